"""
Recall hit counts (access_count, last_accessed), written without ever making a read wait.

Counting a hit is a write. A recall that waited for the write lock behind a long end_session of
this node, or behind another process (the CLI importing), would wait up to the busy timeout:
longer than a client's call timeout. So hits are collected in memory and written with
``Database.try_write``, which never waits: when the store is busy they stay pending and go out
with the next recall that finds it free (before it reads, so its answer counts them), or at
close. The pending table is bounded; past the
bound the oldest entries are dropped, which only under-counts popularity.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable

from robotmem_ros.engine import store
from robotmem_ros.engine.database import Database
from robotmem_ros.errors import StorageError

LOG = logging.getLogger('robotmem.engine')
MAX_PENDING = 10_000


class AccessCounts:
    """Pending hit counts of one store, flushed opportunistically."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[int, float]] = {}  # id -> (hits, last time)

    @property
    def pending(self) -> int:
        """Return how many memories have hits not yet written."""
        with self._lock:
            return len(self._pending)

    def record(self, memory_ids: Iterable[int], now: float) -> None:
        """Count one hit for each id and try to write every pending hit now."""
        with self._lock:
            for memory_id in memory_ids:
                hits, _ = self._pending.pop(memory_id, (0, now))
                self._pending[memory_id] = (hits + 1, now)  # re-insert: newest last
            while len(self._pending) > MAX_PENDING:
                del self._pending[next(iter(self._pending))]
        self.flush()

    def flush(self) -> bool:
        """Write the pending hits unless the store is busy; return True when none are left."""
        if not self.pending:
            return True
        try:
            with self._db.try_write() as conn:
                if conn is None:
                    return False
                with self._lock:
                    pending, self._pending = self._pending, {}
                store.add_accesses(conn, [(hits, last, memory_id)
                                          for memory_id, (hits, last) in pending.items()])
        except StorageError as exc:
            LOG.warning('recall results not counted (store not writable): %s', exc)
            return False
        return True
