"""
Retention of raw perceptions: a robot streaming at 10 Hz stores about 860k rows a day.

Perceptions stored more than ``perception_retention_days`` ago (a bag replayed today counts
from today, not from its stamps) that no recall ever returned are deleted for good (row, FTS
row, vector, tags, history), a bounded batch per call so an end_session stays short. What the
robot learned from them lives on in facts; perceptions a recall touched are kept. 0 days keeps
everything (the default: deleting data is the operator's decision).
"""

from __future__ import annotations

from typing import Any, Iterable

from robotmem_ros.engine import store

PRUNE_BATCH = 5000
DAY_S = 86_400.0


def prune_perceptions(conn: Any, *, now: float, days: float, touched: Iterable[int] = (),
                      limit: int = PRUNE_BATCH) -> int:
    """
    Delete up to ``limit`` untouched perceptions stored over ``days`` ago; return how many.

    ``touched`` names memories a recall returned whose hits are not in SQL yet (the store was
    busy when they were to be written: engine/access_counts.py); they are kept as well.
    """
    if days <= 0:
        return 0
    ids = store.untouched_perceptions(conn, now - days * DAY_S, limit, touched)
    store.purge(conn, ids)
    return len(ids)
