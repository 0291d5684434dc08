"""
The hub connection: every statement a robot or an operator runs against PostgreSQL.

Robots connect as their own role (row-level security decides what they see and may change).
Pushes are idempotent upserts keyed by the global id; a row whose shared fields did not change
is not rewritten (no new sequence number, no needless pull by the others).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from pgvector.psycopg import register_vector
import psycopg
from psycopg.types.json import Jsonb

from robotmem_ros.engine import text as textmod
from robotmem_ros.errors import StorageError
from robotmem_ros.fleet.hub_schema import CHANNEL, hub_version, SCHEMA_VERSION

CONNECT_TIMEOUT_S = 3
OWNER_CONNECT_TIMEOUT_S = 5  # the CLI, run by an operator (robots use the one above)
STATEMENT_TIMEOUT_MS = 30_000
PUSH_COLUMNS = ('gid', 'robot_id', 'collection', 'type', 'content', 'category', 'kind',
                'confidence', 'context', 'status', 'superseded_by', 'created_at', 'model',
                'embedding')
SHARED = ('collection', 'type', 'content', 'category', 'kind', 'context', 'status',
          'superseded_by', 'model', 'embedding')
# What a catch-up compares (HubRow.state): the shared columns, the model for the vector.
STATE_COLUMNS = ('collection', 'content', 'status', 'category', 'kind', 'superseded_by',
                 'context', 'model')
PULL_COLUMNS = ('gid', 'robot_id', 'collection', 'type', 'content', 'category', 'kind',
                'confidence', 'context', 'status', 'created_at', 'model', 'embedding')
HubError = psycopg.Error


@dataclass
class HubRow:
    """One memory as the hub carries it."""

    gid: str
    robot_id: str
    collection: str
    type: str
    content: str
    category: str
    kind: str
    confidence: float
    context: dict
    status: str
    created_at: float
    model: str
    embedding: np.ndarray | None
    superseded_by: str | None = None

    def state(self) -> tuple:
        """
        Values in STATE_COLUMNS order: what a catch-up compares with the hub's row.

        The columns a change of the memory rewrites at the hub (SHARED), the model standing
        for the vector it is written with.
        """
        return (self.collection, self.content, self.status, self.category, self.kind,
                self.superseded_by, self.context, self.model)

    def push_tuple(self) -> tuple:
        """Values in PUSH_COLUMNS order."""
        return (self.gid, self.robot_id, self.collection, self.type, self.content, self.category,
                self.kind, self.confidence, Jsonb(self.context), self.status, self.superseded_by,
                self.created_at, self.model, self.embedding)


Watermark = tuple[int, int]  # (txid, seq) of the last pulled change


def connect(url: str, password: str | None = None) -> Any:
    """Open an autocommit connection with the vector type registered; StorageError if not."""
    # Keepalives notice a hub that vanished without closing the connection (network cut).
    # HNSW hands back its ef_search nearest rows of the whole table and the filters (status,
    # model, collection, row security) come after, so a robot's small collection beside large
    # ones came back empty. pgvector 0.8's iterative scan searches on until k rows pass. With
    # an older pgvector, PostgreSQL should keep the unknown setting as an unused placeholder or
    # drop it with a warning (untested: the bundled server has pgvector 0.8.5).
    # The server's own keepalives (this session's socket) notice a robot that vanished while
    # idle, and its user timeout one that vanished with data unacknowledged (the NOTIFYs other
    # robots' pushes send it): its session, and the sync turn it may hold (take_turn), end
    # within about 25 s, not the system's two hours or fifteen minutes.
    kwargs: dict[str, Any] = {'autocommit': True, 'connect_timeout': CONNECT_TIMEOUT_S,
                              'options': f'-c statement_timeout={STATEMENT_TIMEOUT_MS} '
                                         '-c hnsw.iterative_scan=strict_order '
                                         '-c tcp_keepalives_idle=10 '
                                         '-c tcp_keepalives_interval=5 '
                                         '-c tcp_keepalives_count=3 '
                                         '-c tcp_user_timeout=25000',
                              'keepalives': 1, 'keepalives_idle': 10,
                              'keepalives_interval': 5, 'keepalives_count': 3}
    if password is not None:
        kwargs['password'] = password
    try:
        conn = psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        raise StorageError(f'fleet hub unreachable: {_first_line(exc)}') from exc
    try:
        version = hub_version(conn)
        if version != SCHEMA_VERSION:
            raise StorageError(f'fleet hub schema is version {version}, this robotmem needs '
                               f'{SCHEMA_VERSION}: run `robotmem fleet migrate` as the hub owner')
        register_vector(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def connect_owner(url: str, password: str | None = None) -> Any:
    """
    Open the hub owner's autocommit connection (migrate, add-robot); StorageError if not.

    No schema check and no vector type, unlike :func:`connect`: migrate is what creates them.
    """
    kwargs: dict[str, Any] = {'autocommit': True, 'connect_timeout': OWNER_CONNECT_TIMEOUT_S}
    if password is not None:
        kwargs['password'] = password
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        raise StorageError(f'fleet hub unreachable: {_first_line(exc)}') from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def hub_dim(conn: Any) -> int:
    """Dimension of the hub's embedding column."""
    return conn.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'robotmem.memories'::regclass "
        "AND attname = 'embedding'").fetchone()[0]


def push(conn: Any, rows: Sequence[HubRow]) -> None:
    """Upsert ``rows`` in one transaction (all or nothing)."""
    cols = ', '.join(PUSH_COLUMNS)
    marks = ', '.join(['%s'] * len(PUSH_COLUMNS))
    changed = ' OR '.join(f'm.{c} IS DISTINCT FROM excluded.{c}' for c in SHARED)
    updates = ', '.join(f'{c} = excluded.{c}' for c in SHARED)
    sql = (f'INSERT INTO robotmem.memories AS m ({cols}) VALUES ({marks}) '
           f'ON CONFLICT (gid) DO UPDATE SET {updates} WHERE {changed}')
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(sql, [r.push_tuple() for r in rows])


def pull(conn: Any, robot_id: str, collections: Sequence[str], after: Watermark,
         limit: int, floor: int) -> list[tuple[Watermark, HubRow]]:
    """
    Other robots' rows in ``collections`` changed after ``after``, oldest change first.

    Only changes of transactions older than ``floor`` (transaction_floor: older than every
    running one) are returned: a transaction still in flight may hold a lower sequence number
    and must not be jumped over.
    """
    cols = ', '.join(PULL_COLUMNS)
    rows = conn.execute(
        f'SELECT txid::text::bigint, seq, {cols} FROM robotmem.memories '
        f'WHERE (txid, seq) > (%s::text::xid8, %s) AND txid < %s::text::xid8 '
        f'AND robot_id <> %s AND collection = ANY(%s) ORDER BY txid, seq LIMIT %s',
        (str(after[0]), after[1], str(floor), robot_id, list(collections),
         int(limit))).fetchall()
    return [((r[0], r[1]), _hub_row(r[2:])) for r in rows]


def hub_identity(conn: Any) -> str:
    """
    Return the hub server's system identifier ('' where this role may not read it).

    A physical standby keeps its primary's identifier and transaction ids; a server restored
    from a dump, or a logical replica, has its own (local_store.Restart).
    """
    try:
        with conn.transaction():
            row = conn.execute('SELECT system_identifier::text FROM pg_control_system()'
                               ).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        return ''
    return row[0]


def transaction_floor(conn: Any) -> int:
    """
    Return the hub's oldest running transaction id (every pulled change is older).

    It only grows on one server; a pull's watermark at or past it means the hub's transaction
    ids started again (local_store.Restart). A round reads it once and pulls below it.
    """
    return conn.execute('SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint'
                        ).fetchone()[0]


def own_states(conn: Any, gids: Sequence[str]) -> dict[str, tuple]:
    """Own rows' STATE_COLUMNS by gid, as HubRow.state gives them (for catch-up)."""
    rows = conn.execute(f'SELECT gid, {", ".join(STATE_COLUMNS)} FROM robotmem.memories '
                        'WHERE gid = ANY(%s)', (list(gids),)).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def count_rows(conn: Any, robot_id: str | None = None) -> int:
    """Rows visible to this role (of one robot when given)."""
    if robot_id is None:
        return conn.execute('SELECT count(*) FROM robotmem.memories').fetchone()[0]
    return conn.execute('SELECT count(*) FROM robotmem.memories WHERE robot_id = %s',
                        (robot_id,)).fetchone()[0]


# The sync of one robot takes turns: the node's thread and ``robotmem fleet push|pull`` may
# sync one store. A push reads outbox entries, sends them, then acknowledges what it read; a
# second push that read an entry before the first acknowledged it would acknowledge the change
# queued in between without sending it, and send the older row after the newer one. Two pulls
# would apply one batch twice and could move a watermark back. A session advisory lock per
# robot and kind on the hub (the one place both reach), held from the first read to the last
# local write; the server ends it with the session (its keepalives: connect).
TURN_CLASS = 0x524D0  # 'RM' and the kind below: robotmem's advisory lock keys
PUSH, PULL = 1, 2
TURN_NAMES = {PUSH: 'push', PULL: 'pull'}


class TurnWaitCancelled(psycopg.Error):
    """
    A wait for a turn was cancelled; the caller must drop the connection (a HubError).

    The server can grant the lock as the statement timeout fires, and a session's advisory
    lock outlives the cancelled statement: only the session's end is sure to free the turn.
    """


def take_turn(conn: Any, kind: int, robot_id: str, wait: bool) -> bool:
    """
    Take this robot's push or pull turn on this connection; False if another holds it.

    ``wait``: wait for it (bounded by the statement timeout) instead of answering False.
    """
    key = (TURN_CLASS + kind, robot_id)
    if wait:
        try:
            conn.execute('SELECT pg_advisory_lock(%s, hashtext(%s))', key)
        except psycopg.errors.QueryCanceled as exc:
            raise TurnWaitCancelled(
                f'the wait for the {TURN_NAMES[kind]} turn of robot {robot_id!r} was cancelled '
                f'after up to {_timeout_s(conn)} (the statement timeout): another session '
                "(the node's sync or a `robotmem fleet` command) holds it; try again when it "
                'ends') from exc
        return True
    return conn.execute('SELECT pg_try_advisory_lock(%s, hashtext(%s))', key).fetchone()[0]


def _timeout_s(conn: Any) -> str:
    """Return this session's statement timeout as PostgreSQL writes it ('30s')."""
    return conn.execute('SHOW statement_timeout').fetchone()[0]


def end_turn(conn: Any, kind: int, robot_id: str) -> None:
    """End this connection's turn; a connection lost or closed has ended it already."""
    if conn.closed:
        return
    try:
        conn.execute('SELECT pg_advisory_unlock(%s, hashtext(%s))', (TURN_CLASS + kind, robot_id))
    except HubError:
        pass  # the connection broke: the server ended the session and its locks


def listen(conn: Any) -> None:
    """Subscribe this connection to change notifications."""
    conn.execute(f'LISTEN {CHANNEL}')


def drain_notifications(conn: Any) -> int:
    """Consume pending notifications without blocking; return how many arrived."""
    return sum(1 for _ in conn.notifies(timeout=0.0))


def vector_search(conn: Any, vector: np.ndarray, model: str, collections: Sequence[str],
                  k: int) -> list[str]:
    """Gids of the nearest active rows embedded with ``model`` (HNSW), best first."""
    rows = conn.execute(
        "SELECT gid FROM robotmem.memories WHERE status = 'active' AND model = %s "
        'AND collection = ANY(%s) AND embedding IS NOT NULL '
        'ORDER BY embedding <=> %s LIMIT %s',
        (model, list(collections), np.asarray(vector, dtype=np.float32), int(k))).fetchall()
    return [r[0] for r in rows]


def exact_vector_search(conn: Any, vector: np.ndarray, model: str,
                        collections: Sequence[str], k: int) -> list[str]:
    """Rank like vector_search without the index (the benchmark's ground truth)."""
    with conn.transaction():
        conn.execute('SET LOCAL enable_indexscan = off')
        return vector_search(conn, vector, model, collections, k)


def text_search(conn: Any, query: str, collections: Sequence[str], k: int) -> list[str]:
    """
    Gids ranked by full text: any query word may match (like the local BM25 channel).

    The query is cut into words and stripped of stop words by the engine's own rules, so "the"
    or "for" never make every row a candidate; the hub's parser then normalizes each word.
    """
    query = ' '.join(t for t in textmod.tokenize(query) if t not in textmod.QUERY_STOPWORDS)
    rows = conn.execute(
        "WITH q AS (SELECT to_tsquery('simple', string_agg(quote_literal(w), ' | ')) AS q "
        "FROM unnest(tsvector_to_array(to_tsvector('simple', %s))) w) "
        'SELECT m.gid FROM robotmem.memories m, q '
        "WHERE q.q IS NOT NULL AND m.tsv @@ q.q AND m.status = 'active' "
        'AND m.collection = ANY(%s) ORDER BY ts_rank(m.tsv, q.q) DESC, m.gid LIMIT %s',
        (query, list(collections), int(k))).fetchall()
    return [r[0] for r in rows]


def rows_by_gid(conn: Any, gids: Iterable[str]) -> dict[str, HubRow]:
    """Load rows by global id."""
    cols = ', '.join(PULL_COLUMNS)
    rows = conn.execute(f'SELECT {cols} FROM robotmem.memories WHERE gid = ANY(%s)',
                        (list(gids),)).fetchall()
    return {r[0]: _hub_row(r) for r in rows}


def hub_stats(conn: Any) -> list[dict]:
    """Rows per robot and collection with their last change, as this role sees them."""
    rows = conn.execute(
        "SELECT robot_id, collection, count(*) FILTER (WHERE status = 'active'), count(*), "
        'max(seq) FROM robotmem.memories GROUP BY 1, 2 ORDER BY 1, 2').fetchall()
    return [{'robot_id': r[0], 'collection': r[1], 'active': r[2], 'rows': r[3],
             'last_seq': r[4]} for r in rows]


def _hub_row(values: Sequence[Any]) -> HubRow:
    """Build a HubRow from PULL_COLUMNS values (the vector as a float32 array)."""
    row = HubRow(*values)
    if row.embedding is not None:
        row.embedding = row.embedding.to_numpy().astype(np.float32)
    return row


def wrap(exc: psycopg.Error) -> StorageError:
    """Typed error with the first line of the server's message."""
    return StorageError(f'fleet hub: {_first_line(exc)}')
