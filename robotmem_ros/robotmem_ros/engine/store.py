"""
Row-level SQL of the memory store: the statements of learn, recall, sessions and maintenance.

SQL lives in store modules only: this one, and a sibling ``*_store.py`` for a part whose queries
are its own (jaccard_store: dedup candidates; vector_store: the vector index; report_store:
operator reports; consistency_store: the doctor; transfer_store: export and import).
Functions take the connection to use, so the caller decides whether a statement runs inside the
writer's transaction or on a reader; sqlite errors are typed by the database layer. A memory's
FTS row, vector and tags are written in step with ``memories`` by the functions here.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from robotmem_ros.engine import bm25, count_ledger, schema, text as textmod, vector_store
from robotmem_ros.engine import vocab_store
from robotmem_ros.engine.schema import DECAY_REF, STORED, UNTOUCHED_PERCEPTION
from robotmem_ros.engine.vector_index import code_of, to_blob
from robotmem_ros.types import MemoryRecord

ACTIVE_SQL = "m.status = 'active' AND (m.valid_until IS NULL OR m.valid_until > :now)"
# An unfiltered BM25 search first ranks this many times the asked depth, then filters.
FTS_DEPTH_FACTOR = 4
ROWID_LOOKUPS = 8  # FTS5 ranks this many ids or fewer by lookups, more by a pass (_ranked_first)
FTS5_K1, FTS5_B = 1.2, 0.75  # FTS5's bm25() parameters, which the text index's scores follow
MEMORY_COLUMNS = ('m.id, m.type, m.content, m.collection, m.session_id, m.category, '
                  'm.perception_type, m.kind, m.confidence, m.context_json, m.status, '
                  'm.superseded_by, m.access_count, m.created_at, m.last_accessed, '
                  'm.valid_from, m.valid_until, m.origin')


def record_of(row: Any, tags: Sequence[str] = ()) -> MemoryRecord:
    """Build a MemoryRecord from a row selected with MEMORY_COLUMNS."""
    return MemoryRecord(
        id=row['id'], content=row['content'], type=row['type'], category=row['category'],
        perception_type=row['perception_type'], confidence=row['confidence'],
        context=json.loads(row['context_json']), session_id=row['session_id'] or '',
        collection=row['collection'], access_count=row['access_count'],
        created_at=row['created_at'], last_accessed=row['last_accessed'], kind=row['kind'],
        status=row['status'], tags=list(tags), valid_from=row['valid_from'],
        valid_until=row['valid_until'], superseded_by=row['superseded_by'],
        origin=row['origin'])


def fetch_records(conn: Any, ids: Sequence[int]) -> dict[int, MemoryRecord]:
    """Load memories (any status) with their tags, keyed by id."""
    if not ids:
        return {}
    marks = ','.join('?' * len(ids))
    rows = conn.execute(f'SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.id IN ({marks})',
                        list(ids)).fetchall()
    tags = tags_of(conn, ids)
    return {row['id']: record_of(row, tags.get(row['id'], ())) for row in rows}


def tags_of(conn: Any, ids: Sequence[int]) -> dict[int, list[str]]:
    """Return the tags of memories ``ids`` in name order, keyed by id (untagged ones absent)."""
    tags: dict[int, list[str]] = {}
    if not ids:
        return tags
    marks = ','.join('?' * len(ids))
    for memory_id, tag in conn.execute(
            f'SELECT memory_id, tag FROM tags WHERE memory_id IN ({marks}) ORDER BY tag',
            list(ids)):
        tags.setdefault(memory_id, []).append(tag)
    return tags


# --- meta ------------------------------------------------------------------------------------

def get_meta(conn: Any, key: str) -> str | None:
    """Return a meta value or None."""
    row = conn.execute('SELECT value FROM meta WHERE key = ?', (key,)).fetchone()
    return row[0] if row else None


def delete_meta(conn: Any, key: str) -> None:
    """Remove a meta value (absent is fine)."""
    conn.execute('DELETE FROM meta WHERE key = ?', (key,))


def set_meta(conn: Any, key: str, value: str) -> None:
    """Insert or replace a meta value."""
    conn.execute('INSERT INTO meta(key, value) VALUES (?, ?) '
                 'ON CONFLICT(key) DO UPDATE SET value = excluded.value', (key, value))


# --- sessions --------------------------------------------------------------------------------

def ensure_session(conn: Any, session_id: str, collection: str, now: float,
                   context: dict | None = None) -> None:
    """Register a session on first sight (robots may stream before calling StartSession)."""
    conn.execute(
        'INSERT INTO sessions(id, collection, context_json, started_at) VALUES (?, ?, ?, ?) '
        'ON CONFLICT(id) DO NOTHING',
        (session_id, collection, json.dumps(context or {}, ensure_ascii=False), now))


def get_session(conn: Any, session_id: str) -> Any:
    """Return the session row or None."""
    return conn.execute('SELECT * FROM sessions WHERE id = ?', (session_id,)).fetchone()


# --- collections -----------------------------------------------------------------------------

def collection_admitted(conn: Any, name: str, limit: int) -> bool:
    """Tell whether a write may name ``name``: it exists already, or the store has room."""
    if conn.execute('SELECT 1 FROM collections WHERE name = ?', (name,)).fetchone():
        return True
    return conn.execute('SELECT COUNT(*) FROM collections').fetchone()[0] < limit


# --- memories --------------------------------------------------------------------------------

def insert_memory(conn: Any, *, type_: str, content: str, collection: str, session_id: str,
                  category: str, perception_type: str, kind: str, confidence: float,
                  context: dict, created_at: float, tags: Iterable[str] = (),
                  stored_at: float | None = None, decay_ref: float | None = None,
                  origin: str = '', gid: str | None = None) -> int:
    """
    Insert a memory, its FTS row, tags and a ``create`` history entry; return its id.

    ``stored_at`` is the time of this write, for a row whose ``created_at`` is a stamp of its
    own: a perception replayed from an old bag keeps its stamp for ordering, and retention
    counts from its store time. ``decay_ref`` starts the decay clock elsewhere than
    ``created_at`` (the store time of such a perception). ``origin`` and ``gid`` are set for a
    memory pulled from another robot (docs/fleet.md).
    """
    cur = conn.execute(
        'INSERT INTO memories(type, content, content_hash, collection, session_id, category, '
        'perception_type, kind, confidence, context_json, created_at, valid_from, stored_at, '
        'decay_ref, origin, gid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
        (type_, content, textmod.content_hash(content), collection, session_id or None,
         category, perception_type, kind, confidence,
         json.dumps(context, ensure_ascii=False), created_at, created_at, stored_at, decay_ref,
         origin, gid))
    memory_id = cur.lastrowid
    index_text(conn, memory_id, content)
    add_tags(conn, memory_id, tags)
    add_history(conn, memory_id, 'create', new_content=content, created_at=created_at)
    return memory_id


def add_accesses(conn: Any, hits: list[tuple[int, float, int]]) -> None:
    """Add recall hits: (count, last time, memory id) each; last_accessed never goes back."""
    conn.executemany('UPDATE memories SET access_count = access_count + ?, last_accessed = '
                     'MAX(COALESCE(last_accessed, 0), ?) WHERE id = ?', hits)


def add_history(conn: Any, memory_id: int, event: str, *, created_at: float,
                old_content: str | None = None, new_content: str | None = None,
                reason: str = '', actor: str = 'engine', details: dict | None = None) -> None:
    """Append one audit entry (create, reinforce, supersede, merge, update, forget, decay)."""
    conn.execute(
        'INSERT INTO history(memory_id, event, old_content, new_content, reason, actor, '
        'details_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
        (memory_id, event, old_content, new_content, reason, actor,
         json.dumps(details or {}, ensure_ascii=False), created_at))


def get_active(conn: Any, memory_id: int) -> Any:
    """Return the text and context of memory ``memory_id`` while it is active, else None."""
    return conn.execute('SELECT content, context_json FROM memories WHERE id = ? '
                        "AND status = 'active'", (memory_id,)).fetchone()


def reinforce(conn: Any, memory_id: int, now: float) -> None:
    """Count one more sighting of a memory (a duplicate learn, another robot's same fact)."""
    conn.execute('UPDATE memories SET reinforce_count = reinforce_count + 1, last_seen = ? '
                 'WHERE id = ?', (now, memory_id))


def find_active_by_hash(conn: Any, collection: str, content: str) -> int | None:
    """Id of the active fact with the same normalized text, via the unique index."""
    row = conn.execute(
        'SELECT id FROM memories WHERE collection = ? AND content_hash = ? '
        "AND status = 'active' AND type = 'fact'",
        (collection, textmod.content_hash(content))).fetchone()
    return row[0] if row else None


def set_status(conn: Any, memory_id: int, status: str, *, now: float,
               superseded_by: int | None = None) -> None:
    """
    Deactivate a memory: status, validity end, and out of the vector index.

    Forgotten memories leave the FTS index too (they must never come back); superseded ones
    keep their FTS row so "what did we believe at time T" can still search them.
    """
    conn.execute('UPDATE memories SET status = ?, superseded_by = ?, '
                 'valid_until = COALESCE(valid_until, ?) WHERE id = ?',
                 (status, superseded_by, now, memory_id))
    delete_vector(conn, memory_id)
    if status == 'forgotten':
        unindex_text(conn, memory_id)


def replace_content(conn: Any, memory_id: int, content: str, context: dict) -> None:
    """Rewrite a memory's text and context and re-index its FTS row (vector handled apart)."""
    conn.execute('UPDATE memories SET content = ?, content_hash = ?, context_json = ?, '
                 'embedded = 0 WHERE id = ?',
                 (content, textmod.content_hash(content),
                  json.dumps(context, ensure_ascii=False), memory_id))
    unindex_text(conn, memory_id)
    index_text(conn, memory_id, content)
    delete_vector(conn, memory_id)


def index_text(conn: Any, memory_id: int, content: str) -> None:
    """
    Add a memory's FTS row: the tokens recall and the Jaccard layer match on.

    Every FTS row change of the writer is noted in its count ledger (engine/count_ledger.py)
    or taints the transaction, else readers' exact term counts would go wrong.
    """
    body = textmod.fts_index_text(content)
    ledger = getattr(conn, 'count_ledger', None)
    if ledger is not None:
        ledger.note(memory_id, body, 1, functools.partial(vocab_store.structure, conn))
    conn.execute('INSERT INTO memories_fts(rowid, body) VALUES (?, ?)', (memory_id, body))


def unindex_text(conn: Any, memory_id: int) -> None:
    """Remove a memory's FTS row (absent is fine), so no text search finds it any more."""
    ledger = getattr(conn, 'count_ledger', None)
    if ledger is not None:
        row = conn.execute('SELECT body FROM memories_fts WHERE rowid = ?',
                           (memory_id,)).fetchone()
        if row is not None and isinstance(row[0], str):
            ledger.note(memory_id, row[0], -1,
                        functools.partial(vocab_store.structure, conn))
        elif row is not None:  # a body no learn writes (NULL, a blob): counted again
            ledger.taint()
    conn.execute('DELETE FROM memories_fts WHERE rowid = ?', (memory_id,))


def every_fts_body(conn: Any) -> Iterator[tuple[int, Any]]:
    """Yield (memory id, FTS body) of every FTS row, in rowid order."""
    yield from conn.execute('SELECT rowid, body FROM memories_fts ORDER BY rowid')


def add_tags(conn: Any, memory_id: int, tags: Iterable[str]) -> None:
    """Attach tags to a memory; a tag it already has is kept once."""
    conn.executemany('INSERT OR IGNORE INTO tags(memory_id, tag) VALUES (?, ?)',
                     [(memory_id, tag) for tag in tags])


# --- vectors ---------------------------------------------------------------------------------

FILL_CHUNK = 10_000
# A filtered BM25 search is restricted to the index's matches while at most this many active
# memories have no vector; above it (a BM25-only store) it tests every match's context.
UNINDEXED_MAX = 2_000
_SQL_INT_MIN, _SQL_INT_MAX = -2**63, 2**63 - 1


def put_vector(conn: Any, memory_id: int, vector: np.ndarray | None) -> None:
    """Store a memory's vector (or mark it as not embeddable when ``vector`` is None)."""
    if vector is None:
        conn.execute('UPDATE memories SET embedded = -1 WHERE id = ?', (memory_id,))
        return
    row = conn.execute(f'SELECT m.status, {schema.CONTEXT_VALUES_SQL} FROM memories m '
                       f'WHERE m.id = ?', (memory_id,)).fetchone()
    if row is None or row[0] != 'active':
        return
    # Delete + insert (not upsert): a replaced vector gets a new seq, so every process's index
    # sees the change. The filter ids are copied from the context as it is now.
    conn.execute('DELETE FROM memory_vectors WHERE memory_id = ?', (memory_id,))
    conn.execute('INSERT INTO memory_vectors(memory_id, collection, session_id, is_fact, code, '
                 "filters) SELECT id, collection, COALESCE(session_id, ''), type = 'fact', ?, ? "
                 'FROM memories WHERE id = ?',
                 (code_of(vector), _filter_ids(conn, row[1], {}), memory_id))
    conn.execute('INSERT OR REPLACE INTO memory_embeddings(memory_id, embedding) VALUES (?, ?)',
                 (memory_id, to_blob(vector)))
    conn.execute('UPDATE memories SET embedded = 1 WHERE id = ?', (memory_id,))


def fill_filters(conn: Any) -> int:
    """
    Write the filter ids of vector rows that have none (a store from before schema 5).

    In seq order, FILL_CHUNK rows a statement; a row's seq is kept, so an index already
    loaded would not see the change: this runs at open, before any search. Returns the rows.
    """
    known: dict[tuple[str, Any], int] = {}  # pairs seen, in this transaction only
    filled, after = 0, 0
    while True:
        rows = conn.execute(f'SELECT v.seq, {schema.CONTEXT_VALUES_SQL} FROM memory_vectors v '
                            f'CROSS JOIN memories m ON m.id = v.memory_id WHERE v.seq > ? '
                            f'AND v.filters IS NULL ORDER BY v.seq LIMIT ?',
                            (after, FILL_CHUNK)).fetchall()
        if not rows:
            return filled
        conn.executemany('UPDATE memory_vectors SET filters = ? WHERE seq = ?',
                         [(_filter_ids(conn, row[1], known), row[0]) for row in rows])
        filled, after = filled + len(rows), rows[-1][0]


def _filter_ids(conn: Any, values: str | None, known: dict[tuple[str, Any], int]) -> bytes:
    """
    Pack the ``context_values`` ids of a context's filter values, giving new values an id.

    ``values`` is schema.CONTEXT_VALUES_SQL's JSON array; a value compares as SQLite's:
    true is 1, and an integer beyond 64 bits is a real, as ``json_extract`` returns them (one
    beyond a double's range is infinite there: Python's ``float`` would raise, and every later
    write of that memory's vector with it). Objects, lists, null and a missing path get 0.
    ``known`` caches ids within a transaction.
    """
    pairs = []
    for position, (path, value) in enumerate(zip(schema.CONTEXT_PATHS,
                                                 json.loads(values) if values else ())):
        if isinstance(value, bool) or (isinstance(value, int)
                                       and _SQL_INT_MIN <= value <= _SQL_INT_MAX):
            pairs.append((position, (path, int(value))))
        elif isinstance(value, int):  # beyond 64 bits
            pairs.append((position, (path, _as_real(value))))
        elif isinstance(value, (float, str)):
            pairs.append((position, (path, value)))
    wanted = [pair for _, pair in pairs if pair not in known]
    for pair, found in zip(wanted, vector_store.context_ids(conn, wanted)):
        known[pair] = found if found is not None else conn.execute(
            'INSERT INTO context_values(path, value) VALUES (?, ?)', pair).lastrowid
    packed = np.zeros(len(schema.CONTEXT_PATHS), dtype='<i4')
    for position, pair in pairs:
        packed[position] = known[pair]
    return packed.tobytes()


def _as_real(value: int) -> float:
    """Return an integer as SQLite reads it into a real: the nearest double, or an infinity."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def mark_unembedded(conn: Any, memory_id: int) -> None:
    """Queue a memory for a new vector (embed_pending writes it)."""
    conn.execute('UPDATE memories SET embedded = 0 WHERE id = ?', (memory_id,))


def get_vectors(conn: Any, ids: Sequence[int]) -> dict[int, np.ndarray]:
    """Return the stored vectors of ``ids`` (those that have one)."""
    if not ids:
        return {}
    marks = ','.join('?' * len(ids))
    rows = conn.execute(f'SELECT memory_id, embedding FROM memory_embeddings '
                        f'WHERE memory_id IN ({marks})', list(ids)).fetchall()
    return {row[0]: np.frombuffer(row[1], dtype='<f4') for row in rows}


def delete_vector(conn: Any, memory_id: int) -> None:
    """Remove a memory's vector; every index drops it on its next search."""
    conn.execute('DELETE FROM memory_vectors WHERE memory_id = ?', (memory_id,))
    conn.execute('DELETE FROM memory_embeddings WHERE memory_id = ?', (memory_id,))


def session_vectors(conn: Any, session_id: str) -> dict[int, np.ndarray]:
    """Float vectors of a session's memories, keyed by id."""
    rows = conn.execute('SELECT e.memory_id, e.embedding FROM memory_embeddings e '
                        'JOIN memories m ON m.id = e.memory_id WHERE m.session_id = ?',
                        (session_id,))
    return {mid: np.frombuffer(blob, dtype='<f4') for mid, blob in rows}


def vec_search(conn: Any, vector: np.ndarray, collection: str, k: int, *,
               session_id: str = '', type_: str = '', exclude_session: str = '',
               context: Sequence[tuple[str, Any]] = ()) -> list[tuple[int, float]]:
    """
    K nearest active memories of a collection, optionally filtered; (id, cosine).

    Filters: one session or all but one (``exclude_session``), one type.

    ``context`` holds (json path, value) equalities every result must meet, tested before
    ranking so that a selective filter still gets k results when k exist: on the index's
    filter ids for the paths it holds (schema.CONTEXT_PATHS), in SQL on the candidates
    for the others. Runs on the index of the store the connection belongs to
    (database.StoreConnection); a connection opened without one (a bare tool connection) has
    no vector search.
    """
    index = getattr(conn, 'vector_index', None)
    if index is None:
        return []
    held, rest = _held(conn, context)
    if held is None:  # a value no vector row holds: nothing can match
        return []
    return index.search(conn, vector, collection, k, session_id=session_id, type_=type_,
                        exclude_session=exclude_session, context=held,
                        where=context_sql(rest))


def _held(conn: Any, context: Sequence[tuple[str, Any]]
          ) -> tuple[list[tuple[int, int]] | None, list[tuple[str, Any]]]:
    """
    Split (json path, value) equalities into the index's and the rest.

    The index's are (position in schema.CONTEXT_PATHS, value id) pairs, None when a value
    has no id (no vector row holds it).
    """
    paths = schema.CONTEXT_PATHS
    held = [(path[2:], value) for path, value in context if path[2:] in paths]
    value_ids = vector_store.context_ids(conn, held)
    rest = [(path, value) for path, value in context if path[2:] not in paths]
    if None in value_ids:
        return None, rest
    return [(paths.index(path), value_id)
            for (path, _), value_id in zip(held, value_ids)], rest


def filter_candidates(conn: Any, collection: str,
                      context: Sequence[tuple[str, Any]]) -> list[int] | None:
    """
    Ids that include every active memory meeting ``context``'s equalities on indexed paths.

    The vector index's matches plus the active memories it does not hold (no vector yet),
    read first: a memory embedded meanwhile is then in the index when it is asked. None when
    no equality is on an indexed path, the store has no index, more than UNINDEXED_MAX
    memories are unembedded (a BM25-only store) or the index cannot vouch for its set.
    """
    index = getattr(conn, 'vector_index', None)
    if index is None or not any(path[2:] in schema.CONTEXT_PATHS for path, _ in context):
        return None
    unindexed = [row[0] for row in conn.execute(
        'SELECT id FROM memories INDEXED BY idx_memories_unembedded WHERE collection = ? '
        "AND embedded != 1 AND status = 'active' LIMIT ?", (collection, UNINDEXED_MAX + 1))]
    if len(unindexed) > UNINDEXED_MAX:
        return None
    held, _ = _held(conn, context)
    ids = index.ids_holding(collection, held) if held is not None else np.zeros(0, np.int64)
    return None if ids is None else [*ids.tolist(), *unindexed]


def context_sql(context: Sequence[tuple[str, Any]]) -> tuple[str, list[Any]]:
    """Build SQL conditions (on alias ``m``) and parameters for (json path, value) pairs."""
    return (''.join(' AND json_extract(m.context_json, ?) = ?' for _ in context),
            [item for pair in context for item in pair])


def adopt_legacy_vectors(conn: Any, *, vec_loaded: bool) -> int:
    """
    Move the vectors of a sqlite-vec ``memories_vec`` table (schema 1) into memory_vectors.

    Needs sqlite-vec loaded to read the old table (``vec_loaded``, Database.has_vec); without
    it the memories are marked for re-embedding instead, so no vector is silently lost.
    Returns the rows moved.
    """
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memories_vec'").fetchone() is None:
        return 0
    if not vec_loaded:  # the vec0 module cannot read the table: re-embed instead
        conn.execute('UPDATE memories SET embedded = 0 WHERE embedded = 1')
        return 0
    rows = conn.execute('SELECT memory_id, embedding FROM memories_vec').fetchall()
    for memory_id, blob in rows:
        put_vector(conn, memory_id, np.frombuffer(blob, dtype='<f4'))
    conn.execute('DROP TABLE memories_vec')
    return len(rows)


def _context_equalities(context: Sequence[tuple[str, Any]], where: list[str],
                        params: dict[str, Any]) -> None:
    """Add ``json_extract(context) = value`` tests for (json path, value) pairs, named."""
    for number, (path, value) in enumerate(context):
        where.append(f'json_extract(m.context_json, :p{number}) = :v{number}')
        params.update({f'p{number}': path, f'v{number}': value})


def session_facts(conn: Any, session_id: str, limit: int) -> list[str]:
    """Texts of a session's strongest active facts, most confident and newest first."""
    return [row[0] for row in conn.execute(
        "SELECT content FROM memories WHERE session_id = ? AND status = 'active' "
        "AND type = 'fact' ORDER BY confidence DESC, created_at DESC LIMIT ?",
        (session_id, limit))]


def timeline_page(conn: Any, collection: str, *, after: tuple[float, int], limit: int,
                  now: float, min_confidence: float = 0.0, session_id: str = '',
                  include_superseded: bool = False, created_from: float | None = None,
                  created_to: float | None = None,
                  context: Sequence[tuple[str, Any]] = ()) -> list[tuple[int, float]]:
    """
    One page of (id, created_at) in time order, after the ``(created_at, id)`` cursor.

    ``include_superseded`` keeps superseded memories (never forgotten ones); ``context`` are
    (json path, value) equalities every row must meet, as in fts_search.
    """
    where = ['m.collection = :c', 'm.confidence >= :minc',
             '(m.created_at > :lc OR (m.created_at = :lc AND m.id > :lid))',
             "m.status != 'forgotten'" if include_superseded else ACTIVE_SQL]
    if session_id:
        where.append('m.session_id = :s')
    if created_from is not None:
        where.append('m.created_at >= :t0')
    if created_to is not None:
        where.append('m.created_at <= :t1')
    params = {'c': collection, 'minc': min_confidence, 'now': now, 's': session_id,
              't0': created_from, 't1': created_to, 'lim': int(limit),
              'lc': after[0], 'lid': after[1]}
    _context_equalities(context, where, params)
    return [(row[0], row[1]) for row in conn.execute(
        f'SELECT m.id, m.created_at FROM memories m WHERE {" AND ".join(where)} '
        f'ORDER BY m.created_at, m.id LIMIT :lim', params)]


# --- full text -------------------------------------------------------------------------------

def fts_search(conn: Any, query: str, collection: str, limit: int, *, now: float,
               session_id: str = '', type_: str = '', include_inactive: bool = False,
               min_confidence: float = 0.0, exclude_session: str = '',
               context: Sequence[tuple[str, Any]] = (),
               within: Callable[[], Sequence[int] | None] | None = None
               ) -> list[tuple[int, float]]:
    """
    BM25 search; returns (id, score) best first. ``query`` must come from text.fts_query.

    The score is FTS5's bm25 (lower is better). From ``text_index_min_rows`` FTS rows on, a
    search without a session, its context equalities (if any) all on schema.CONTEXT_PATHS,
    takes its best from the text index, which scores as FTS5 does, and from the memories
    changed since the index's state, ranked by FTS5 (engine/text_index.py).

    ``context``: (json path, value) equalities every result must meet (see vec_search).
    ``within``: called where FTS5 must rank a context-filtered search, it gives ids that
    include every memory meeting them (filter_candidates) or None; FTS5 then ranks only those
    matches, and rows are read for the best of them only.
    """
    where = ['memories_fts MATCH :q', 'm.collection = :c', 'm.confidence >= :minc']
    if not include_inactive:
        where.append(ACTIVE_SQL)
    else:
        where.append("m.status != 'forgotten'")
    if session_id:
        where.append('m.session_id = :s')
    if type_:
        where.append('m.type = :t')
    if exclude_session:
        where.append('m.session_id IS NOT :xs')
    params = {'q': query, 'c': collection, 'minc': min_confidence, 'now': now,
              's': session_id, 't': type_, 'xs': exclude_session, 'lim': int(limit)}
    _context_equalities(context, where, params)
    depth = FTS_DEPTH_FACTOR * int(limit)
    if not session_id and all(path[2:] in schema.CONTEXT_PATHS for path, _ in context):
        # The index's best in the collection (and context) pass most filters left: the
        # filters run on the best FTS_DEPTH_FACTOR × limit ids only.
        indexed = _indexed_first(conn, where, params, depth, not include_inactive, context)
        if indexed is not None:
            return indexed
    ids = within() if within is not None and context else None
    if ids is not None:  # every memory that can pass is in ``ids``: rank those alone
        rows = _ranked_first(conn, where, params, depth, ids)
        if len(rows) < int(limit):  # too few passed among the best: rank every one in the set
            rows = _ranked_first(conn, where, params, -1, ids)
        return rows
    if not (session_id or context):
        # Most matches pass the filters left: FTS5 (or the postings held for a small store)
        # ranks them alone (no join per match).
        rows = _held_first(conn, where, params, depth)
        if rows is None:
            rows = _ranked_first(conn, where, params, depth, None)
        if len(rows) == int(limit):
            return rows
    # A selective filter (session, context) or too few in the first pass: filter every match
    # and rank only those that pass. CROSS JOIN pins the FTS table as the outer loop: with a
    # plain JOIN the planner may walk idx_memories_collection and evaluate MATCH once per
    # stored row (linear in the store).
    sql = (f'SELECT m.id, bm25(memories_fts) AS score FROM memories_fts '
           f'CROSS JOIN memories m ON m.id = memories_fts.rowid WHERE {" AND ".join(where)} '
           f'ORDER BY score LIMIT :lim')
    rows = conn.execute(sql, params).fetchall()
    return [(row[0], row[1]) for row in rows]


def _indexed_first(conn: Any, where: list[str], params: dict[str, Any], depth: int,
                   active_only: bool, context: Sequence[tuple[str, Any]]
                   ) -> list[tuple[int, float]] | None:
    """
    Rank by the store's text index (engine/text_index.py); None where FTS5 must rank.

    The index's best ``depth`` go through the filters in its order; the memories changed since
    its state are ranked by FTS5, and the two lists merge by score. None while no index can
    answer, or when too few passed and the index had more matches.
    """
    index = getattr(conn, 'text_index', None)
    found = index.candidates(conn, params['q'], params['c'], depth, active_only=active_only,
                             context=context) if index is not None else None
    if found is None:
        return None
    ranked, changed, more = found
    rows = _passing_in_order(conn, where, params, ranked)
    if len(rows) < int(params['lim']) and more:
        return None
    if changed:  # the index's scores are FTS5's (text_index._terms): one order for both
        rows += _scored_apart(conn, where, params, changed)
        rows = sorted(rows, key=lambda hit: (hit[1], hit[0]))[:int(params['lim'])]
    return rows


def _held_first(conn: Any, where: list[str], params: dict[str, Any], depth: int
                ) -> list[tuple[int, float]] | None:
    """
    Rank as _ranked_first does, by the postings of a small store (engine/resident_text.py).

    They give FTS5's best ``depth`` matches and their ``bm25()`` without a pass over every
    match in FTS5; None while they cannot answer, and FTS5 ranks.
    """
    resident = getattr(conn, 'resident_text', None)
    ranked = (resident.ranked(conn, textmod.match_terms(params['q']), depth)
              if resident is not None else None)
    return _passing_in_order(conn, where, params, ranked) if ranked is not None else None


def _passing_in_order(conn: Any, where: list[str], params: dict[str, Any],
                      ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Return the first ``:lim`` of ``ranked`` (id, score) that pass the filters (where[1:])."""
    scores = dict(ranked)
    params['ranked'] = json.dumps([memory_id for memory_id, _ in ranked])
    return [(row[0], scores[row[0]]) for row in conn.execute(
        f'SELECT m.id FROM json_each(:ranked) j CROSS JOIN memories m ON m.id = j.value '
        f'WHERE {" AND ".join(where[1:])} ORDER BY j.key LIMIT :lim', params)]


def _scored_apart(conn: Any, where: list[str], params: dict[str, Any], ids: Sequence[int]
                  ) -> list[tuple[int, float]]:
    """
    FTS5's ``bm25()`` of those memories ``ids`` that match and pass the filters, as (id, score).

    They are the memories changed since the text index's state: one read of their FTS bodies,
    scored by bm25.py with FTS5's parameters and statistics, gives FTS5's scores. FTS5 itself
    ranked them by a lookup per id (about 1 ms each at 1M) or, past ROWID_LOOKUPS, a pass over
    every match of the query (18–25 ms): most of a recall that follows a few learns.
    """
    params['changed'] = json.dumps(list(ids))
    bodies = dict(conn.execute(
        f'SELECT m.id, f.body FROM json_each(:changed) j CROSS JOIN memories m '
        f'ON m.id = j.value CROSS JOIN memories_fts f ON f.rowid = m.id '
        f'WHERE {" AND ".join(where[1:])}', params))
    terms = textmod.match_terms(params['q'])
    hits = bm25.rescore(bodies, terms, vocab_store.corpus_stats(conn, terms), FTS5_K1, FTS5_B)
    return [(memory_id, -score) for memory_id, score in hits if score > 0]


def _ranked_first(conn: Any, where: list[str], params: dict[str, Any], depth: int,
                  within: Sequence[int] | None) -> list[tuple[int, float]]:
    """
    Rank the matches in FTS5 alone, then run the filters on the best ``depth`` (-1: all).

    Only the matches in ``within`` are ranked when it is given. The filters keep the rank
    order. CROSS JOIN: the ids are the outer loop (primary key lookups, not an index walk).
    A plain ``rowid IN`` is one FTS5 lookup per id, ``+rowid`` one pass over every match:
    about 1 ms an id against 18–25 ms at 1M (533 ms against 4 ms for 1 857 ids at 100k), so
    up to ROWID_LOOKUPS ids (a context filter's candidate set that small) are looked up.
    """
    params['depth'] = depth
    match = where[0]
    if within is not None:
        params['ids'] = json.dumps(list(within))
        lookup = 'rowid' if len(within) <= ROWID_LOOKUPS else '+rowid'
        match += f' AND {lookup} IN (SELECT value FROM json_each(:ids))'
    return [(row[0], row[1]) for row in conn.execute(
        f'SELECT f.rowid, f.score FROM (SELECT rowid, bm25(memories_fts) AS score '
        f'FROM memories_fts WHERE {match} ORDER BY score LIMIT :depth) f '
        f'CROSS JOIN memories m ON m.id = f.rowid WHERE {" AND ".join(where[1:])} '
        f'ORDER BY f.score LIMIT :lim', params)]


# The active memories stored just before / after each of :ids in its collection and session,
# up to :span a side (one seek each on idx_memories_adjacent); group_concat's order is not
# defined, so adjacent() sorts the ids.
_ADJACENT = """
    SELECT m.id,
        (SELECT group_concat(id) FROM (
            SELECT p.id AS id FROM memories p
            WHERE p.collection = m.collection AND p.session_id IS m.session_id
                AND p.status = 'active' AND p.id < m.id
            ORDER BY p.id DESC LIMIT :span)),
        (SELECT group_concat(id) FROM (
            SELECT p.id AS id FROM memories p
            WHERE p.collection = m.collection AND p.session_id IS m.session_id
                AND p.status = 'active' AND p.id > m.id
            ORDER BY p.id LIMIT :span))
    FROM memories m WHERE m.id IN (SELECT value FROM json_each(:ids))"""


def adjacent(conn: Any, ids: Sequence[int], span: int
             ) -> dict[int, tuple[list[int], list[int]]]:
    """
    Return the memories stored next to each of ``ids``: (before, after), nearest first.

    Up to ``span`` active memories a side, in the memory's collection and session, in storage
    (id) order; a memory without a session is adjacent to others without one. Ids that are
    not stored are absent.
    """
    rows = conn.execute(_ADJACENT, {'ids': json.dumps(list(ids)), 'span': int(span)})
    return {row[0]: (sorted(_ids(row[1]), reverse=True), sorted(_ids(row[2])))
            for row in rows.fetchall()}


def _ids(joined: str | None) -> list[int]:
    return [int(part) for part in joined.split(',')] if joined else []


def fts_bodies(conn: Any, ids: Sequence[int]) -> dict[int, str]:
    """
    Return the FTS bodies (indexed tokens, space separated) of ``ids``, keyed by id.

    The postings of a small store hold them (engine/resident_text.py): no statement then.
    """
    resident = getattr(conn, 'resident_text', None)
    held = resident.bodies(conn, ids) if resident is not None and ids else None
    return held if held is not None else _texts_by_id(
        conn, 'SELECT rowid, body FROM memories_fts WHERE rowid IN', ids)


def _not_in(column: str, values: Iterable[str]) -> tuple[str, list[str]]:
    """Return ``column NOT IN (?, ...)`` and its parameters, in a stable order."""
    names = sorted(values)
    return f'{column} NOT IN ({",".join("?" * len(names))})', names


# --- end of session: consolidation, decay, retention -------------------------------------------

def mergeable_facts(conn: Any, session_id: str, collection: str, max_confidence: float,
                    protected: Iterable[str]) -> list[Any]:
    """
    Return the session's active facts consolidation may merge, oldest first.

    (id, content, category, confidence, access_count, created_at) of facts below
    ``max_confidence`` whose category is not in ``protected``.
    """
    spared, categories = _not_in('category', protected)
    # INDEXED BY: without statistics the planner walked the collection's index, every active
    # row of it (600 ms at 1M memories), for a session of a few hundred facts.
    return conn.execute(
        'SELECT id, content, category, confidence, access_count, created_at FROM memories '
        'INDEXED BY idx_memories_session '
        "WHERE session_id = ? AND collection = ? AND status = 'active' AND type = 'fact' "
        f'AND confidence < ? AND {spared} ORDER BY created_at, id',
        [session_id, collection, max_confidence, *categories]).fetchall()


def decay_candidates(conn: Any, collection: str, protected: Iterable[str],
                     idle_since: float) -> list[Any]:
    """
    Return (id, confidence, reference time) of the active memories decay may lower.

    The reference is the latest of creation, last recall, last reinforcement and the time up
    to which decay was already applied; only references at or before ``idle_since`` are
    returned, and memories of a ``protected`` category are left out.
    """
    spared, categories = _not_in('category', protected)
    return conn.execute(
        f'SELECT id, confidence, {DECAY_REF} FROM memories INDEXED BY idx_memories_decay '
        f"WHERE collection = ? AND status = 'active' AND {DECAY_REF} <= ? AND {spared}",
        [collection, idle_since, *categories]).fetchall()


def set_decayed(conn: Any, updates: Iterable[tuple[float, float, int]]) -> None:
    """Write (new confidence, decay applied up to, memory id) for each decayed memory."""
    conn.executemany('UPDATE memories SET confidence = ?, decay_ref = ? WHERE id = ?',
                     list(updates))


def untouched_perceptions(conn: Any, before: float, limit: int,
                          touched: Iterable[int] = ()) -> list[int]:
    """
    Return ids of perceptions stored before ``before`` that no recall returned, oldest first.

    Stored, not stamped: a bag replayed today is as new as a live perception (stored_at).
    ``touched``: memories whose recall hits SQL does not hold yet, left out too.
    """
    return [row[0] for row in conn.execute(
        f'SELECT id FROM memories INDEXED BY idx_memories_retention '
        f'WHERE {UNTOUCHED_PERCEPTION} AND {STORED} < ? '
        'AND id NOT IN (SELECT value FROM json_each(?)) '
        f'ORDER BY {STORED} LIMIT ?',
        (before, json.dumps(sorted(touched)), int(limit)))]


def purge(conn: Any, ids: Sequence[int]) -> None:
    """Delete memories for good: row, FTS row, vector, tags and history."""
    rows = [(memory_id,) for memory_id in ids]
    count_ledger.taint(conn)  # thousands of rows: readers read their counts again
    for table, column in (('tags', 'memory_id'), ('history', 'memory_id'),
                          ('memory_vectors', 'memory_id'), ('memory_embeddings', 'memory_id'),
                          ('memories_fts', 'rowid'), ('memories', 'id')):
        conn.executemany(f'DELETE FROM {table} WHERE {column} = ?', rows)


def contents(conn: Any, ids: Sequence[int]) -> dict[int, str]:
    """Return the text of memories ``ids``, keyed by id."""
    return _texts_by_id(conn, 'SELECT id, content FROM memories WHERE id IN', ids)


def _texts_by_id(conn: Any, select: str, ids: Sequence[int]) -> dict[int, str]:
    """Run a constant ``SELECT id, text ... WHERE id IN`` over ``ids``; {id: text}."""
    if not ids:
        return {}
    marks = ','.join('?' * len(ids))
    return dict(conn.execute(f'{select} ({marks})', list(ids)))


# --- statements of the engine facade -----------------------------------------------------------

def get_memory(conn: Any, memory_id: int) -> Any:
    """Return the row of memory ``memory_id`` (any status), or None."""
    return conn.execute('SELECT * FROM memories WHERE id = ?', (memory_id,)).fetchone()


def count_active(conn: Any, collection: str) -> int:
    """Return how many active memories ``collection`` holds."""
    return conn.execute('SELECT COUNT(*) FROM memories WHERE collection = ? '
                        "AND status = 'active'", (collection,)).fetchone()[0]


def unembedded(conn: Any, limit: int, after: int = 0) -> list[tuple[int, str]]:
    """Return (id, content) of active memories waiting for a vector, oldest first after id."""
    return [tuple(row) for row in conn.execute(
        "SELECT id, content FROM memories WHERE embedded = 0 AND status = 'active' "
        'AND id > ? ORDER BY id LIMIT ?', (int(after), int(limit)))]


def unembed_all(conn: Any, *, drop_vectors: bool) -> None:
    """Mark every active memory as waiting for a vector; drop the stored vectors if asked."""
    if drop_vectors:
        conn.execute('DELETE FROM memory_vectors')
        conn.execute('DELETE FROM memory_embeddings')
    conn.execute("UPDATE memories SET embedded = 0 WHERE status = 'active'")


def count_unembedded(conn: Any, *, active_only: bool) -> int:
    """Return how many memories wait for a vector (all of them, or the active ones)."""
    where = "embedded = 0 AND status = 'active'" if active_only else 'embedded = 0'
    return conn.execute(f'SELECT COUNT(*) FROM memories WHERE {where}').fetchone()[0]


def leave_unembedded(conn: Any, count: int) -> int:
    """Mark the ``count`` oldest waiting perceptions BM25-only (embedded = -2); return how many."""
    return conn.execute(
        'UPDATE memories SET embedded = -2 WHERE id IN (SELECT id FROM memories '
        "WHERE embedded = 0 AND type = 'perception' ORDER BY id LIMIT ?)", (count,)).rowcount


def session_type_counts(conn: Any, session_id: str) -> dict[str, int]:
    """Return the active memories of a session counted by type (fact, perception)."""
    return dict(conn.execute(
        "SELECT type, COUNT(*) FROM memories WHERE session_id = ? AND status = 'active' "
        'GROUP BY type', (session_id,)).fetchall())


def end_session(conn: Any, session_id: str, outcome: float | None, now: float,
                summary: dict) -> None:
    """Record a session's end: its outcome (one row per report) and its summary."""
    conn.execute('INSERT INTO session_outcomes(session_id, outcome_score, recorded_at) '
                 'VALUES (?, ?, ?)', (session_id, outcome, now))
    conn.execute('UPDATE sessions SET ended_at = ?, outcome_score = COALESCE(?, outcome_score), '
                 'summary_json = ? WHERE id = ?', (now, outcome, json.dumps(summary), session_id))
