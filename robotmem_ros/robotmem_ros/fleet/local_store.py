"""
The fleet's SQL on the robot's own SQLite store: outbox, watermark, pulled rows.

Own memories get the global id ``<store id>:<row id>`` (the store id is a UUID made when fleet
sync is first enabled, so a re-created store never reuses an old id). Pulled memories keep their
hub gid and their origin robot; the engine's triggers never queue them, so they are never
pushed back.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import logging
from typing import Any, NamedTuple, Sequence
import uuid

import numpy as np

from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import dedup, schema, store
from robotmem_ros.engine.database import savepoint, snapshot
from robotmem_ros.engine.inference import KINDS
from robotmem_ros.engine.validation import (check_range, check_searchable, check_text,
                                            check_timestamp, json_object, MAX_CATEGORY_CHARS)
from robotmem_ros.errors import ConfigError, ConflictError, ValidationError
from robotmem_ros.fleet.hub import HubRow, Watermark

LOG = logging.getLogger('robotmem.fleet')
TYPES = ('fact', 'perception')

ROW_COLUMNS = ('m.collection, m.type, m.content, m.category, m.kind, m.confidence, '
               'm.context_json, m.status, m.superseded_by, m.created_at, m.embedded')


@dataclass
class Identity:
    """Who this store is at the hub."""

    robot_id: str
    store_id: str

    def gid(self, memory_id: int) -> str:
        """Global id of an own memory."""
        return f'{self.store_id}:{memory_id}'


def enable(conn: Any, robot_id: str, outbox_limit: int, collections: Sequence[str]
           ) -> Identity:
    """
    Mark the store as syncing for ``robot_id`` (from now on the triggers queue own changes).

    The first time, every existing own fact is queued (the overflow mark covers what does not
    fit) and ``collections`` are recorded as shared. A store that belongs to another robot id
    is refused: two robots would share gids.
    """
    current = store.get_meta(conn, 'fleet_robot_id')
    if current is not None and current != robot_id:
        raise ConfigError(f'this store syncs as robot {current!r}, not {robot_id!r}; '
                          'one store belongs to one robot')
    store.set_meta(conn, 'fleet_outbox_limit', str(int(outbox_limit)))
    store_id = store.get_meta(conn, 'fleet_store_id')
    if store_id is None:
        store_id = uuid.uuid4().hex
        store.set_meta(conn, 'fleet_store_id', store_id)
    if current is None:
        store.set_meta(conn, 'fleet_robot_id', robot_id)
        set_shared_collections(conn, collections)
        conn.execute('INSERT INTO fleet_outbox(memory_id) SELECT id FROM memories '
                     "WHERE origin = '' AND type = 'fact' ORDER BY id LIMIT ?",
                     (int(outbox_limit),))
        if own_fact_count(conn) > outbox_length(conn):
            mark_overflow(conn)
    return Identity(robot_id, store_id)


def own_fact_count(conn: Any) -> int:
    """Count own facts (any status)."""
    return conn.execute("SELECT COUNT(*) FROM memories WHERE origin = '' AND type = 'fact'"
                        ).fetchone()[0]


def outbox_length(conn: Any) -> int:
    """Queued own changes."""
    return conn.execute('SELECT COUNT(*) FROM fleet_outbox').fetchone()[0]


def overflow(conn: Any) -> int:
    """Count changes that found the outbox full since the last catch-up (0 = none due)."""
    return int(store.get_meta(conn, 'fleet_overflow') or 0)


def mark_overflow(conn: Any) -> None:
    """Ask for a catch-up with the hub (what a change that finds the outbox full does)."""
    conn.execute("INSERT INTO meta(key, value) VALUES ('fleet_overflow', '1') "
                 'ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1')


def clear_overflow(conn: Any, seen: int) -> None:
    """End a catch-up that started at mark ``seen``; a change that overflowed since keeps it."""
    conn.execute("DELETE FROM meta WHERE key = 'fleet_overflow' AND CAST(value AS INTEGER) = ?",
                 (seen,))


def outbox_batch(conn: Any, ident: Identity, limit: int, model: str, dim: int
                 ) -> tuple[list[tuple[int, int]], list[HubRow]]:
    """Read the oldest queued changes as hub rows, in one snapshot, with their versions."""
    with snapshot(conn):
        rows = conn.execute(f'SELECT o.memory_id, o.version, {ROW_COLUMNS} FROM fleet_outbox o '
                            f'LEFT JOIN memories m ON m.id = o.memory_id '
                            f'ORDER BY o.memory_id LIMIT ?', (int(limit),)).fetchall()
        keys = [(r['memory_id'], r['version']) for r in rows]
        present = [r for r in rows if r['type'] is not None]
        return keys, hub_rows(conn, ident, present, model, dim)


def hub_rows(conn: Any, ident: Identity, rows: Sequence[Any], model: str, dim: int
             ) -> list[HubRow]:
    """Own memory rows (``memory_id`` + ROW_COLUMNS) as hub rows with their vectors."""
    ids = [r['memory_id'] for r in rows if r['embedded'] == 1 and r['status'] == 'active']
    vectors = store.get_vectors(conn, ids)
    out = []
    for r in rows:
        vector = vectors.get(r['memory_id'])
        if vector is not None and len(vector) != dim:
            vector = None  # the hub holds another dimension: text only there
        out.append(HubRow(
            gid=ident.gid(r['memory_id']), robot_id=ident.robot_id, collection=r['collection'],
            type=r['type'], content=r['content'], category=r['category'], kind=r['kind'],
            confidence=r['confidence'], context=json.loads(r['context_json']),
            status=r['status'], created_at=r['created_at'],
            model=model if vector is not None else '', embedding=vector,
            superseded_by=(ident.gid(r['superseded_by']) if r['superseded_by'] else None)))
    return out


def acknowledge(conn: Any, keys: Sequence[tuple[int, int]]) -> None:
    """Drop pushed entries unless they changed again after they were read."""
    conn.executemany('DELETE FROM fleet_outbox WHERE memory_id = ? AND version = ?', keys)


def own_rows_after(conn: Any, after_id: int, limit: int, collections: Sequence[str]
                   ) -> list[Any]:
    """Own facts of ``collections`` after ``after_id`` in id order (the catch-up walk)."""
    marks = ', '.join('?' * len(collections))
    return conn.execute(
        f'SELECT m.id AS memory_id, {ROW_COLUMNS} FROM memories m '
        "WHERE m.origin = '' AND m.type = 'fact' AND m.id > ? "
        f'AND m.collection IN ({marks}) ORDER BY m.id LIMIT ?',
        (int(after_id), *collections, int(limit))).fetchall()


# Where the pulls of each collection stand: one hub position per collection (meta
# ``fleet_watermark:<collection>``), so a collection synced later starts from its beginning and
# a pull of some collections (``robotmem fleet pull --collections``) moves only theirs. A pull
# that reads a collection to the end sets it to CAUGHT_UP below the round's floor, so the
# collections read to the end in one round share one position and are pulled together after.
# A store synced with the one watermark of an older robotmem (meta ``fleet_watermark``) cannot
# tell which collections it served: each starts from 0:0, once.
WATERMARK = 'fleet_watermark:'
CAUGHT_UP = 2 ** 63 - 1  # the largest seq: every change of a transaction below the floor


def watermarks(conn: Any, collections: Sequence[str]) -> dict[str, Watermark]:
    """Return the hub position pulled so far of each collection (0:0 when none yet)."""
    return {c: _position(store.get_meta(conn, WATERMARK + c) or '0:0') for c in collections}


def set_watermarks(conn: Any, collections: Sequence[str], position: Watermark) -> None:
    """Record that ``collections`` are pulled up to ``position``."""
    for collection in collections:
        store.set_meta(conn, WATERMARK + collection, '%d:%d' % position)


def caught_up(floor: int) -> Watermark:
    """Return the position of a collection read to the end below the hub's ``floor``."""
    return floor - 1, CAUGHT_UP


class Restart(NamedTuple):
    """What a pull round must write before it pulls (Restart.of: both False most rounds)."""

    record: bool  # a hub identifier not recorded yet
    from_start: bool  # the hub is another server: every watermark is dropped

    @classmethod
    def of(cls, conn: Any, hub_id: str, floor: int) -> 'Restart':
        """
        Read whether the hub is another server than the watermarks' (no write).

        Watermarks are positions in one server's transactions. A hub restored into a new
        server (``pg_dump`` / ``pg_restore``, a logical replica promoted) has another
        ``hub_id`` (its cluster's system identifier; '' where the role cannot read it) and
        numbers transactions from a low id again, so a watermark of the old server would pass
        every change written since. Also caught without the id: a watermark at or past the
        ``floor`` (every pulled change is older than it on one server).
        """
        known = store.get_meta(conn, 'fleet_hub_id')
        moved = bool(hub_id) and known is not None and hub_id != known
        past = any(_position(value)[0] >= floor for value in _watermark_rows(conn).values())
        return cls(bool(hub_id) and hub_id != known, moved or past)

    def apply(self, conn: Any, hub_id: str) -> None:
        """Record the identifier and drop the watermarks, as read (in a write transaction)."""
        if self.record:
            store.set_meta(conn, 'fleet_hub_id', hub_id)
        if self.from_start:
            conn.executemany('DELETE FROM meta WHERE key = ?',
                             [(key,) for key in _watermark_rows(conn)])


def _watermark_rows(conn: Any) -> dict[str, str]:
    return dict(conn.execute('SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?',
                             (len(WATERMARK), WATERMARK)).fetchall())


def _position(text: str) -> Watermark:
    txid, seq = text.split(':')
    return int(txid), int(seq)


def shared_collections(conn: Any) -> list[str]:
    """Return the collections the last push shared (none for a store synced before the record)."""
    return json.loads(store.get_meta(conn, 'fleet_shared') or '[]')


def set_shared_collections(conn: Any, collections: Sequence[str]) -> None:
    """Record the collections a push shares: one newly shared is caught up at the next push."""
    store.set_meta(conn, 'fleet_shared', json.dumps(sorted(collections)))


class Pulled(NamedTuple):
    """What a pulled batch came to, beside the rows stored or followed."""

    duplicates: int  # new facts local dedup judged known already (reinforced instead)
    refused: int  # rows this store cannot hold (refusal), skipped


def apply_pulled(conn: Any, batch: Sequence[tuple[Watermark, HubRow]], *,
                 config: MemoryConfig, model: str, dim: int, vectors_ok: bool,
                 now: float) -> Pulled:
    """
    Store other robots' rows locally, in the caller's transaction (it sets the watermarks too).

    A new row that local dedup judges a duplicate of a memory already here (its own or pulled
    earlier) is not stored again: the existing memory is reinforced and its history names the
    robot. Rows embedded with another model keep no vector; the embed timer re-embeds them.
    A row this store cannot hold is skipped with a warning (``refusal``).
    """
    duplicates = refused = 0
    for _, row in batch:
        why = refusal(row, config)
        if why:
            LOG.warning('fleet: row %s of robot %s skipped: %s', row.gid, row.robot_id, why)
            refused += 1
            continue
        vector = _usable_vector(row, model, dim) if vectors_ok else None
        local = conn.execute('SELECT id, status, content, context_json FROM memories '
                             'WHERE gid = ?', (row.gid,)).fetchone()
        if local is not None:
            _update_pulled(conn, local, row, vector, now)
        elif _is_copy(conn, row.gid):
            _update_copy(conn, row)
        elif row.status == 'active' and row.type == 'fact':
            verdict = dedup.check(conn, row.content, collection=row.collection, session_id='',
                                  vector=vector, config=config, now=now)
            if verdict.is_duplicate:
                store.reinforce(conn, verdict.existing_id, now)
                store.add_history(conn, verdict.existing_id, 'reinforce', created_at=now,
                                  actor=f'fleet:{row.robot_id}',
                                  reason=f'robot {row.robot_id} learned it too '
                                         f'({verdict.method})', details={'gid': row.gid})
                conn.execute('INSERT INTO fleet_copies(gid, memory_id, robot_id, content, '
                             'context_json) VALUES (?, ?, ?, ?, ?) ON CONFLICT(gid) DO NOTHING',
                             (row.gid, verdict.existing_id, row.robot_id, row.content,
                              json.dumps(row.context, ensure_ascii=False)))
                duplicates += 1
            else:
                _insert_pulled(conn, row, vector, vectors_ok)
    return Pulled(duplicates, refused)


def refusal(row: HubRow, config: MemoryConfig) -> str:
    """
    Say why this store cannot hold a pulled row ('' when it can).

    The hub's table has none of the local checks, and a robot's role may write any row of its
    own there: a value the local schema refused would roll back every later pull, for good,
    and one it took (a context that is not an object) could make a later call fail.
    """
    try:
        for name, value, allowed in (('type', row.type, TYPES), ('kind', row.kind, KINDS),
                                     ('status', row.status, schema.STATUSES)):
            if value not in allowed:
                raise ValidationError(f'{name} must be one of {", ".join(allowed)}')
        check_searchable('content', check_text('content', row.content,
                                               max_chars=config.max_insight_chars))
        check_text('category', row.category, max_chars=MAX_CATEGORY_CHARS, required=False,
                   stored=True)
        check_range('confidence', row.confidence, 0.0, 1.0)
        check_timestamp('created_at', row.created_at)
        json_object('context', row.context, max_bytes=config.max_json_bytes,
                    max_depth=config.max_json_depth)
    except ValidationError as exc:
        return str(exc)
    return ''


def _usable_vector(row: HubRow, model: str, dim: int) -> np.ndarray | None:
    """Use a pulled vector only when the same model made it; never compare across models."""
    if row.embedding is None or row.model != model:
        return None
    return row.embedding if len(row.embedding) == dim else None


def _insert_pulled(conn: Any, row: HubRow, vector: np.ndarray | None, vectors_ok: bool) -> None:
    memory_id = store.insert_memory(
        conn, type_=row.type, content=row.content, collection=row.collection, session_id='',
        category=row.category, perception_type='', kind=row.kind, confidence=row.confidence,
        context=row.context, created_at=row.created_at, tags=['fleet', f'fleet:{row.robot_id}'],
        origin=row.robot_id, gid=row.gid)
    if vectors_ok and vector is not None:
        store.put_vector(conn, memory_id, vector)


def _is_copy(conn: Any, gid: str) -> bool:
    """Tell whether ``gid`` is a copy folded into a memory here (fleet_copies)."""
    return conn.execute('SELECT 1 FROM fleet_copies WHERE gid = ?', (gid,)).fetchone() is not None


def _update_copy(conn: Any, row: HubRow) -> None:
    """Keep a folded copy's latest text and context; a copy its robot ended leaves the list."""
    if row.status != 'active':
        conn.execute('DELETE FROM fleet_copies WHERE gid = ?', (row.gid,))
        return
    conn.execute('UPDATE fleet_copies SET content = ?, context_json = ? WHERE gid = ?',
                 (row.content, json.dumps(row.context, ensure_ascii=False), row.gid))


def _hand_over(conn: Any, local: Any, row: HubRow, now: float) -> bool:
    """
    Make another robot's copy folded into ``local`` its origin; False when there is none.

    The origin's copy ended (``row``), but the fleet still holds the fact: the memory stays
    active, takes that copy's latest text and follows it from now on (the oldest folded copy
    first).
    """
    memory_id = local['id']
    copy = conn.execute('SELECT gid, robot_id, content, context_json FROM fleet_copies '
                        'WHERE memory_id = ? ORDER BY rowid LIMIT 1', (memory_id,)).fetchone()
    if copy is None:
        return False
    conn.execute('DELETE FROM fleet_copies WHERE gid = ?', (copy['gid'],))
    conn.execute('UPDATE memories SET origin = ?, gid = ? WHERE id = ?',
                 (copy['robot_id'], copy['gid'], memory_id))
    store.add_history(conn, memory_id, 'origin', created_at=now, actor=f'fleet:{row.robot_id}',
                      reason=f'robot {row.robot_id} {row.status} its copy; robot '
                             f'{copy["robot_id"]} still holds it', details={'gid': copy['gid']})
    _follow_text(conn, local, copy['content'], json.loads(copy['context_json']), None,
                 copy['robot_id'], now)
    return True


def _update_pulled(conn: Any, local: Any, row: HubRow, vector: np.ndarray | None,
                   now: float) -> None:
    """Follow the origin's change of a pulled memory (text, labels, status)."""
    if local['status'] != 'active':
        return  # statuses only move forward
    memory_id = local['id']
    if row.status != 'active':
        if _hand_over(conn, local, row, now):
            return
        store.set_status(conn, memory_id, row.status, now=now)
        store.add_history(conn, memory_id, row.status, created_at=now,
                          actor=f'fleet:{row.robot_id}', reason='changed by its origin robot')
        return
    conn.execute('UPDATE memories SET category = ?, kind = ? WHERE id = ?',
                 (row.category, row.kind, memory_id))
    _follow_text(conn, local, row.content, row.context, vector, row.robot_id, now)


def _follow_text(conn: Any, local: Any, content: str, context: dict,
                 vector: np.ndarray | None, robot_id: str, now: float) -> None:
    """Give the pulled memory ``local`` its origin's text and context where they changed."""
    if content == local['content'] and context == json.loads(local['context_json']):
        return
    memory_id = local['id']
    try:
        with savepoint(conn, 'pulled'):
            store.replace_content(conn, memory_id, content, context)
    except ConflictError:  # the new text equals another active fact here: that one stands
        store.set_status(conn, memory_id, 'superseded', now=now)
        return
    if vector is not None:
        store.put_vector(conn, memory_id, vector)
    store.add_history(conn, memory_id, 'update', created_at=now, old_content=local['content'],
                      new_content=content, actor=f'fleet:{robot_id}',
                      reason='changed by its origin robot')
