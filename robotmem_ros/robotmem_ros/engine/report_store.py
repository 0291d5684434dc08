"""
SQL of the operator's reports: statistics, the session list, episodes, history, duplicates.

engine/maintenance.py shapes these into what `robotmem stats`, `sessions`, `episode`,
`history` and `dedup` print; the statements that read the store for them live here, next to
the row-level ones in store.py. All of them only read.
"""

from __future__ import annotations

from typing import Any

ACTIVE = "status = 'active'"
# The columns stats may count by: they go into the SQL text, so no other name is accepted.
COUNTED_COLUMNS = ('status', 'collection', 'type', 'kind', 'category')


def count_by(conn: Any, column: str, *, active_only: bool = True) -> dict[str, int]:
    """Count memories by one of COUNTED_COLUMNS, most frequent first."""
    if column not in COUNTED_COLUMNS:
        raise ValueError(f'{column!r} is not one of {COUNTED_COLUMNS}')
    where = ACTIVE if active_only else '1'
    return {str(key): n for key, n in conn.execute(
        f'SELECT {column}, COUNT(*) FROM memories WHERE {where} GROUP BY {column} '
        f'ORDER BY COUNT(*) DESC, {column}')}


def time_span(conn: Any) -> tuple[float | None, float | None]:
    """Return the creation time of the oldest and the newest memory that is not forgotten."""
    row = conn.execute('SELECT MIN(created_at), MAX(created_at) FROM memories '
                       "WHERE status != 'forgotten'").fetchone()
    return row[0], row[1]


def session_counts(conn: Any) -> tuple[int, int]:
    """Return (sessions, of them ended)."""
    row = conn.execute('SELECT COUNT(*), COUNT(ended_at) FROM sessions').fetchone()
    return row[0], row[1]


def count_below(conn: Any, min_confidence: float) -> int:
    """Count active memories under ``min_confidence`` (a default recall skips them)."""
    return conn.execute(f'SELECT COUNT(*) FROM memories WHERE {ACTIVE} AND confidence < ?',
                        (min_confidence,)).fetchone()[0]


def confidence_bins(conn: Any, bins: int) -> dict[int, int]:
    """Count active memories per confidence bin 0 … bins-1 (only bins that hold any)."""
    return dict(conn.execute(
        f'SELECT MIN(MAX(CAST(confidence * {int(bins)} AS INTEGER), 0), {int(bins) - 1}) '
        f'AS bin, COUNT(*) FROM memories WHERE {ACTIVE} GROUP BY bin'))


def stored_per_day(conn: Any, since: float) -> list[tuple[int, str, int]]:
    """Return (UTC day number, type, count) of the memories created since ``since``."""
    return [tuple(row) for row in conn.execute(
        'SELECT CAST(created_at / 86400 AS INTEGER) AS day, type, COUNT(*) '
        'FROM memories WHERE created_at >= ? GROUP BY day, type', (since,))]


def session_list(conn: Any, collection: str, limit: int) -> list[dict[str, Any]]:
    """List the most recent sessions first, with the facts and perceptions each still holds."""
    rows = conn.execute(
        'SELECT s.id, s.collection, s.started_at, s.ended_at, s.outcome_score, '
        "COALESCE(SUM(m.type = 'fact'), 0) AS facts, "
        "COALESCE(SUM(m.type = 'perception'), 0) AS perceptions "
        'FROM sessions s LEFT JOIN memories m ON m.session_id = s.id '
        "AND m.status != 'forgotten' WHERE (:c = '' OR s.collection = :c) "
        'GROUP BY s.id ORDER BY s.started_at DESC, s.id LIMIT :lim',
        {'c': collection, 'lim': int(limit)}).fetchall()
    return [dict(row) for row in rows]


def episode_ids(conn: Any, session_id: str) -> list[int]:
    """Return the ids of a session's memories that are not forgotten, in time order."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM memories WHERE session_id = ? AND status != 'forgotten' "
        'ORDER BY created_at, id', (session_id,))]


def memory_ids_page(conn: Any, collection: str, *, after: int, limit: int,
                    include_superseded: bool) -> list[int]:
    """
    Return the ids after ``after`` in id order: active memories, superseded ones if asked.

    ``collection`` '' means every collection.
    """
    where = "status != 'forgotten'" if include_superseded else ACTIVE
    return [r[0] for r in conn.execute(
        f"SELECT id FROM memories WHERE {where} AND (:c = '' OR collection = :c) "
        'AND id > :last ORDER BY id LIMIT :lim',
        {'c': collection, 'last': int(after), 'lim': int(limit)})]


def history_rows(conn: Any, memory_id: int) -> list[Any]:
    """Return a memory's audit entries, oldest first."""
    return conn.execute('SELECT id, event, old_content, new_content, reason, actor, '
                        'details_json, created_at FROM history WHERE memory_id = ? ORDER BY id',
                        (memory_id,)).fetchall()


def active_facts(conn: Any, collection: str) -> list[Any]:
    """Return (id, content, confidence, created_at) of a collection's active facts by id."""
    return conn.execute('SELECT id, content, confidence, created_at FROM memories '
                        "WHERE collection = ? AND status = 'active' AND type = 'fact' "
                        'ORDER BY id', (collection,)).fetchall()
