"""
Recall hit counts (access_count, last_accessed): held in memory, written off the request path.

Counting a hit is a write, and writing it in the recall cost a 10k recall 0.2-0.4 ms of its
3.6 (p50; docs/performance.md, "Hit counts off the request path"): a transaction, the rows
and the decay index's pages into the WAL, and the readers' page caches dropped by the commit.
So a recall only adds its hits here; a background thread writes the hits gathered over
``FLUSH_DELAY_S``, ``FLUSH_ROWS`` memories a transaction, with ``Database.try_write``, which
never waits: when the store is busy (a long end_session, another process importing) they stay
pending and go out with a later try, or at close.

What a caller sees does not change: every record the engine reads through :meth:`records`
has the pending hits added, so a recall counts and weighs the hits of the recall before it
whether or not they are written yet. A batch is added from its own table until its commit, and
that commit and a read with its addition exclude each other, so no hit is counted twice or
missed. Another process sees the hits once written, about ``FLUSH_DELAY_S`` later unless the
store is busy. The pending table is bounded: past the bound its oldest entries are folded into
a sorted array of memory ids, where each keeps one hit at the time of the newest hit folded.
That under-counts popularity and can move a memory's last hit forward by as long as the store
stayed busy, but a memory a recall touched stays touched: retention never purges a perception
whose only hit was folded.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from typing import Any, Iterable, Sequence

import numpy as np

from robotmem_ros.engine import store
from robotmem_ros.engine.database import Database
from robotmem_ros.errors import StorageError
from robotmem_ros.types import MemoryRecord

LOG = logging.getLogger('robotmem.engine')
MAX_PENDING = 10_000
MERGE_IDS = 1024  # folded ids gathered in a set before they join the sorted array
# The hits gathered over this long are written together; a process that reads the store's
# file (the CLI, a backup) sees a recall's hits about this much later, when the store is free.
FLUSH_DELAY_S = 0.5
# Memories a transaction writes: at 1M memories 100 rows not in the page cache hold the write
# lock 10 ms, 1 000 rows 95 ms; between batches the thread pauses so a waiting learn goes first.
FLUSH_ROWS = 64
BATCH_PAUSE_S = 0.001
JOIN_S = 5.0


class _Folded:
    """
    Memories whose pending hits were folded past the bound: one hit each, one time.

    Their ids in one sorted array, 8 bytes a memory (a pending entry takes about 110), the
    latest in a set merged into it every MERGE_IDS folds. Bounded by the memories recalls
    touched while the store stayed busy, whatever their ids (which only grow: a robot at 10 Hz
    numbers 300M perceptions a year).
    """

    def __init__(self) -> None:
        self._sorted = np.zeros(0, dtype=np.int64)
        self._fresh: set[int] = set()
        self.last = 0.0

    def add(self, memory_id: int, last: float) -> None:
        self._fresh.add(memory_id)
        self.last = max(self.last, last)
        if len(self._fresh) >= MERGE_IDS:
            self._merge()

    def __contains__(self, memory_id: int) -> bool:
        if memory_id in self._fresh:
            return True
        at = int(np.searchsorted(self._sorted, memory_id))
        return at < len(self._sorted) and int(self._sorted[at]) == memory_id

    def __getitem__(self, memory_id: int) -> tuple[int, float]:
        return 1, self.last

    def ids(self) -> np.ndarray:
        """Return a copy of every folded id, in order."""
        self._merge()
        return self._sorted.copy()

    def take(self, limit: int) -> dict[int, tuple[int, float]]:
        """Remove up to ``limit`` memories, lowest ids first, and return their hits."""
        self._merge()
        taken = dict.fromkeys(self._sorted[:limit].tolist(), (1, self.last))
        self._sorted = self._sorted[limit:]
        if not len(self._sorted):
            self._sorted, self.last = np.zeros(0, dtype=np.int64), 0.0
        return taken

    def _merge(self) -> None:
        if not self._fresh:
            return
        new = np.sort(np.fromiter(self._fresh, dtype=np.int64, count=len(self._fresh)))
        at = np.searchsorted(self._sorted, new)
        held = at < len(self._sorted)
        held[held] = self._sorted[at[held]] == new[held]
        self._sorted = np.insert(self._sorted, at[~held], new[~held])
        self._fresh.clear()


class AccessCounts:
    """Pending hit counts of one store and the thread that writes them."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()  # the tables and the folded hits
        self._view = threading.Lock()  # a batch's commit / a read and its addition
        self._pending: dict[int, tuple[int, float]] = {}  # id -> (hits, last time)
        self._writing: dict[int, tuple[int, float]] = {}  # the batch being written
        self._folded = _Folded()  # older than every pending entry: past MAX_PENDING
        self._flushing = threading.Lock()  # one batch at a time (the thread, close, a caller)
        self._last_error = ''
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='robotmem-hits', daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Return how many memories have hits not yet committed (0: SQL holds every hit)."""
        return len(self.unwritten())

    def unwritten(self) -> set[int]:
        """
        Return the memories whose hits are not committed yet.

        Called inside a write, it names every hit SQL lacks: the batch being written cannot
        commit before that write ends.
        """
        with self._lock:
            held = set(self._pending) | set(self._writing)
            folded = self._folded.ids()  # a copy: made into a set without the lock
        return held.union(folded.tolist())

    def record(self, memory_ids: Iterable[int], now: float) -> None:
        """Count one hit for each id; the background thread writes them."""
        with self._lock:
            self._add({memory_id: (1, now) for memory_id in memory_ids})
        self._wake.set()

    def records(self, conn: Any, ids: Sequence[int]) -> dict[int, MemoryRecord]:
        """Read memories (store.fetch_records) with the hits not yet written added."""
        with self._view:
            records = store.fetch_records(conn, ids)
            with self._lock:
                unwritten = [(held[i], records[i])
                             for held in (self._writing, self._pending, self._folded)
                             for i in records if i in held]
        for (hits, last), record in unwritten:
            record.access_count += hits
            record.last_accessed = max(record.last_accessed or 0.0, last)
        return records

    def flush(self) -> bool:
        """Write every pending hit unless the store is busy; return True when none are left."""
        while (written := self._write_batch()) is not None:
            if not written:
                return False
        return True

    def close(self) -> None:
        """Stop the thread, then write what is pending if the store is free."""
        self._stop.set()
        self._wake.set()
        self._thread.join(JOIN_S)
        self.flush()

    def _add(self, hits: dict[int, tuple[int, float]]) -> None:
        """Merge ``hits`` in (under ``_lock``); past the bound the oldest entries are folded."""
        for memory_id, (count, last) in hits.items():
            held, when = self._pending.pop(memory_id, (0, last))
            self._pending[memory_id] = (held + count, max(when, last))  # re-insert: newest last
        while len(self._pending) > MAX_PENDING:
            memory_id = next(iter(self._pending))
            self._folded.add(memory_id, self._pending.pop(memory_id)[1])

    def _write_batch(self) -> bool | None:
        """
        Write the oldest FLUSH_ROWS hits, folded first: True if written, False if not, None.

        None: there were none.

        Until its commit the batch is added to reads from ``_writing``; the commit and the
        batch's removal from there happen under ``_view``, so a read sees the hits either in
        SQL or from the batch, never both or neither. A read waits for a commit at most, not
        for the batch's writes.
        """
        with self._flushing, contextlib.ExitStack() as committed:
            with self._lock:
                batch = self._folded.take(FLUSH_ROWS)
                if not batch:
                    batch = dict(itertools.islice(self._pending.items(), FLUSH_ROWS))
                    for memory_id in batch:
                        del self._pending[memory_id]
                self._writing = batch
            if not batch:
                return None
            written = False
            try:
                with self._db.try_write() as conn:
                    if conn is not None:
                        store.add_accesses(conn, [(hits, last, memory_id)
                                                  for memory_id, (hits, last) in batch.items()])
                        committed.enter_context(self._view)  # held past the commit below
                        written = True
            except StorageError as exc:
                written = self._failed(exc)
            with self._lock:
                self._writing = {}
                if not written:  # older than every hit still pending: first in line again
                    rest, self._pending = self._pending, batch
                    self._add(rest)
        if written and self._last_error:
            LOG.info('recall hit counts written again')
            self._last_error = ''
        return written

    def _failed(self, exc: StorageError) -> bool:
        error = str(exc)
        if error != self._last_error:
            LOG.warning('recall hit counts not written yet (store not writable): %s', error)
        self._last_error = error
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._stop.wait(FLUSH_DELAY_S)  # gather this long's hits
            self._wake.clear()
            written: bool | None = None
            while not self._stop.is_set() and (written := self._write_batch()):
                self._stop.wait(BATCH_PAUSE_S)  # a learn waiting for the write lock goes first
            if written is False:
                self._wake.set()  # busy or refused: try again after the next delay
