"""
Confidence decay and recall-time half-life weighting (docs/memory.md).

Decay is idempotent: each memory stores the reference time up to which decay was applied, and
only whole elapsed days are applied, so running it twice in a row changes nothing (a formula
recomputed from creation on every call would compound). Perceptions start that
reference at the time they were stored, not at their header stamp: a bag recorded a year ago and
replayed today is a fresh memory of an old event (docs/reliability.md, "Replayed data").
"""

from __future__ import annotations

import math
from typing import Any

from robotmem_ros.engine import store
from robotmem_ros.engine.categories import DECAY_PROTECTED

DAY = 86_400.0


def apply_decay(conn: Any, collection: str, rate: float, now: float,
                audit_below: float) -> int:
    """
    Decay active memories of ``collection``; return how many changed.

    The clock restarts at the latest of creation, last recall and last reinforcement. An audit
    entry is written when a memory falls below ``audit_below`` (it then drops out of default
    recall) rather than for every daily step, which would grow the history without bound.
    """
    if rate <= 0.0:
        return 0
    # Only memories idle for a whole day leave SQLite: a store decayed today returns none.
    rows = store.decay_candidates(conn, collection, DECAY_PROTECTED, idle_since=now - DAY)
    updates = []
    for memory_id, confidence, ref in rows:
        days = max(math.floor((now - ref) / DAY), 1)
        new = confidence * (1.0 - rate) ** days
        updates.append((new, ref + days * DAY, memory_id))
        if confidence >= audit_below > new:
            store.add_history(conn, memory_id, 'decay', created_at=now,
                              reason=f'confidence below {audit_below} after {days} idle days',
                              details={'from': confidence, 'to': new, 'days': days})
    store.set_decayed(conn, updates)
    return len(updates)


def half_life_weight(age_seconds: float, half_life_days: float) -> float:
    """Return 0.5 ** (age / half-life): episodic memories fade faster than semantic ones."""
    return 0.5 ** (max(age_seconds, 0.0) / (half_life_days * DAY))
