"""
Operator views and bulk cleanup: stats, sessions, episodes, history, exact-duplicate cleanup.

These run on the engine's connections (reads on a WAL reader, writes through the one writer
path), so an operator may use them while the node serves requests on the same file.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Iterator

from robotmem_ros.engine import report_store as reports, schema, store
from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.context import EngineContext
from robotmem_ros.engine.validation import check_id, check_text
from robotmem_ros.errors import NotFoundError
from robotmem_ros.types import EngineStatus, MemoryRecord


MAX_CLEANUP_OPS = 200
PREVIEW_CHARS = 80
HISTOGRAM_BINS = 10
FETCH_CHUNK = 500
GROWTH_DAYS = 7
DAY_S = 86_400


def _guard(ctx: EngineContext, work: Any) -> Any:
    """Run ``work()``, its sqlite errors translated by the database layer."""
    with ctx.db.errors():
        return work()


# --- stats -----------------------------------------------------------------------------------

def stats(ctx: EngineContext, status: EngineStatus) -> dict[str, Any]:
    """Gather the counts, sizes and confidence distribution an operator checks first."""
    return _guard(ctx, lambda: _stats(ctx, status))


def _stats(ctx: EngineContext, status: EngineStatus) -> dict[str, Any]:
    conn = ctx.db.reader()
    by_status = reports.count_by(conn, 'status', active_only=False)
    span = reports.time_span(conn)
    sessions = reports.session_counts(conn)
    return {
        'db_path': status.db_path, 'db_bytes': status.db_bytes,
        'schema_version': schema.version(conn),
        'model_id': store.get_meta(conn, 'embed_model_id') or '',
        'embed_dim': int(store.get_meta(conn, 'embed_dim') or 0),
        'reindex_in_progress': store.get_meta(conn, 'reindex_in_progress') is not None,
        'memories_total': sum(by_status.values()), 'by_status': by_status,
        'by_collection': reports.count_by(conn, 'collection'),
        'by_type': reports.count_by(conn, 'type'), 'by_kind': reports.count_by(conn, 'kind'),
        'by_category': reports.count_by(conn, 'category'),
        'sessions': {'total': sessions[0], 'ended': sessions[1],
                     'open': sessions[0] - sessions[1]},
        'oldest': span[0], 'newest': span[1],
        'pending_embeddings': store.count_unembedded(conn, active_only=True),
        'below_recall_threshold': reports.count_below(conn, ctx.config.default_min_confidence),
        'confidence_histogram': _histogram(conn),
        'growth_per_day': _growth(conn, ctx.clock()),
        'text_index': ctx.db.text.stats(),
        'resident_text': ctx.db.resident.stats(),
    }


def _growth(conn: Any, now: float, days: int = GROWTH_DAYS) -> list[dict[str, Any]]:
    """
    Memories stored per UTC day over the last ``days`` days, facts and perceptions apart.

    A robot streaming perceptions at 10 Hz adds about 860k rows a day: this is the line an
    operator reads to see how fast the store grows (and what retention has to keep up with).
    """
    first = (int(now // DAY_S) - days + 1) * DAY_S
    by_day: dict[int, dict[str, int]] = {}
    for day, type_, count in reports.stored_per_day(conn, first):
        by_day.setdefault(day, {})[type_] = count
    out = []
    for day in range(int(first // DAY_S), int(now // DAY_S) + 1):
        stamp = datetime.datetime.fromtimestamp(day * DAY_S, datetime.timezone.utc)
        counts = by_day.get(day, {})
        out.append({'day': stamp.date().isoformat(), 'facts': counts.get('fact', 0),
                    'perceptions': counts.get('perception', 0)})
    return out


def _histogram(conn: Any) -> list[dict[str, Any]]:
    """Active memories per confidence decile: how far decay has pushed the store."""
    found = reports.confidence_bins(conn, HISTOGRAM_BINS)
    return [{'lo': b / HISTOGRAM_BINS, 'hi': (b + 1) / HISTOGRAM_BINS, 'count': found.get(b, 0)}
            for b in range(HISTOGRAM_BINS)]


# --- sessions, episodes, history -------------------------------------------------------------

def sessions(ctx: EngineContext, collection: str = '', limit: int = 100
             ) -> list[dict[str, Any]]:
    """Most recent sessions first, with how many facts and perceptions each still holds."""
    return _guard(ctx, lambda: reports.session_list(ctx.db.reader(), collection, limit))


def episode(ctx: EngineContext, session_id: str) -> dict[str, Any]:
    """Return a session and its memories (superseded ones included, marked) in time order."""
    session_id = check_text('session_id', session_id, max_chars=256, stored=True)
    return _guard(ctx, lambda: _episode(ctx, session_id))


def _episode(ctx: EngineContext, session_id: str) -> dict[str, Any]:
    conn = ctx.db.reader()
    row = store.get_session(conn, session_id)
    if row is None:
        raise NotFoundError(f'unknown session {session_id!r}')
    session = dict(row)
    session['context'] = json.loads(session.pop('context_json') or '{}')
    session['summary'] = json.loads(session.pop('summary_json') or 'null')
    ids = reports.episode_ids(conn, session_id)
    memories = []
    for start in range(0, len(ids), FETCH_CHUNK):
        chunk = ids[start:start + FETCH_CHUNK]
        records = ctx.access.records(conn, chunk)
        memories.extend(records[i].to_dict() for i in chunk)
    return {'session': session, 'memories': memories}


def iter_memories(ctx: EngineContext, collection: str = '', *,
                  include_superseded: bool = False) -> Iterator[MemoryRecord]:
    """Yield memories in id order, a chunk at a time, so a whole store never sits in RAM."""
    last_id = 0
    while True:
        ids = _guard(ctx, lambda: reports.memory_ids_page(
            ctx.db.reader(), collection, after=last_id, limit=FETCH_CHUNK,
            include_superseded=include_superseded))
        if not ids:
            return
        records = _guard(ctx, lambda: ctx.access.records(ctx.db.reader(), ids))
        yield from (records[i] for i in ids)
        last_id = ids[-1]


def history(ctx: EngineContext, memory_id: int) -> list[dict[str, Any]]:
    """Audit trail of one memory, oldest first."""
    memory_id = check_id('memory_id', memory_id)
    return _guard(ctx, lambda: _history(ctx, memory_id))


def _history(ctx: EngineContext, memory_id: int) -> list[dict[str, Any]]:
    conn = ctx.db.reader()
    rows = reports.history_rows(conn, memory_id)
    if not rows and store.get_memory(conn, memory_id) is None:
        raise NotFoundError(f'memory {memory_id} does not exist')
    out = []
    for row in rows:
        entry = dict(row)
        entry['details'] = json.loads(entry.pop('details_json') or '{}')
        out.append(entry)
    return out


# --- exact duplicate cleanup -----------------------------------------------------------------

def cleanup_exact_duplicates(ctx: EngineContext, collection: str, dry_run: bool
                             ) -> list[dict[str, Any]]:
    """
    Supersede active facts whose normalized text repeats; at most MAX_CLEANUP_OPS per call.

    The unique index stops new duplicates, but files written before it (or salvaged ones) can
    hold them. Hashes are recomputed from the text, so rows hashed by an older normalization
    are found too. The plan is made inside the write transaction when applying, so a writer in
    another process cannot slip between planning and superseding.
    """
    if dry_run:
        return _guard(ctx, lambda: _plan(ctx.db.reader(), collection))
    now = ctx.clock()

    def apply() -> list[dict[str, Any]]:
        with ctx.db.write() as conn:
            plan = _plan(conn, collection)
            for op in plan:
                store.set_status(conn, op['old_id'], 'superseded', now=now,
                                 superseded_by=op['keep_id'])
                store.add_history(conn, op['old_id'], 'supersede', created_at=now,
                                  reason='exact duplicate cleanup', actor='maintenance',
                                  details={'kept': op['keep_id']})
            return plan
    return _guard(ctx, apply)


def _plan(conn: Any, collection: str) -> list[dict[str, Any]]:
    groups: dict[str, list[Any]] = {}
    for row in reports.active_facts(conn, collection):
        groups.setdefault(textmod.content_hash(row['content']), []).append(row)
    ops: list[dict[str, Any]] = []
    for group in (g for g in groups.values() if len(g) > 1):
        keep = max(group, key=lambda r: (r['confidence'], r['created_at'], r['id']))
        ops.extend({'old_id': r['id'], 'keep_id': keep['id'],
                    'preview': r['content'][:PREVIEW_CHARS]} for r in group if r is not keep)
        if len(ops) >= MAX_CLEANUP_OPS:
            break
    return ops[:MAX_CLEANUP_OPS]
