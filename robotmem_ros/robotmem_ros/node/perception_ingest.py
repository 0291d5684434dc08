"""
Buffered, batched ingest of the perception stream.

The subscription callback must never wait on SQLite: a stalled write would back up into the
DDS reader queue and silently lose samples there. So the callback only appends to a bounded
in-memory buffer, and one writer thread drains it in batches (one engine transaction each).
When the writer cannot keep up, the buffer drops its oldest entries and counts them, so memory
stays bounded and the loss is visible in NodeStatus. No ROS import here: the logic is tested
without a middleware.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
import logging
import threading
import time
from typing import Callable, Deque, Hashable, Sequence

from robotmem_ros.types import PerceptionInput

_LOG = logging.getLogger('robotmem.node.ingest')

WriteBatch = Callable[[Sequence[PerceptionInput]], Sequence[int]]


@dataclass(frozen=True)
class IngestCounters:
    """Snapshot of the stream counters (published in NodeStatus and diagnostics)."""

    received: int = 0
    written: int = 0
    dropped: int = 0
    failed: int = 0
    seq_gaps: int = 0
    backlog: int = 0
    batches: int = 0


class SeqGapCounter:
    """
    Count sequence gaps per publisher.

    One global counter would report a gap every time two publishers interleave; keying by
    publisher (frame_id + session) makes the number mean "messages this publisher sent that
    never arrived". A sequence that goes backwards is a publisher restart, not a gap. The key
    table is bounded so a stream of one-off keys cannot grow memory without limit.
    """

    def __init__(self, max_publishers: int = 4096) -> None:
        self._last: collections.OrderedDict[Hashable, int] = collections.OrderedDict()
        self._max = max_publishers
        self.gaps = 0

    def observe(self, publisher: Hashable, seq: int) -> int:
        """Record ``seq`` from ``publisher``; return how many messages were skipped."""
        last = self._last.pop(publisher, None)
        self._last[publisher] = seq
        if len(self._last) > self._max:
            self._last.popitem(last=False)
        if last is None or seq <= last:
            return 0
        missed = seq - last - 1
        self.gaps += missed
        return missed


class PerceptionIngest:
    """
    Bounded buffer + writer thread that turns a message stream into batched writes.

    ``write_batch`` is called with at most ``batch_size`` items and must write them in one
    transaction (``MemoryEngine.save_perceptions``), returning one id per item (0 = rejected).
    ``on_flush`` runs after every batch (success or failure) so the owner can refresh its
    status.
    """

    def __init__(self, write_batch: WriteBatch, *, batch_size: int, flush_interval: float,
                 max_buffer: int, on_flush: Callable[[], None] | None = None) -> None:
        self._write_batch = write_batch
        self._on_flush = on_flush
        self._buffer: Deque[PerceptionInput] = collections.deque()
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._seq = SeqGapCounter()
        self._received = self._written = self._dropped = self._failed = self._batches = 0
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._max_buffer = max_buffer
        self._thread: threading.Thread | None = None
        self._stopping = False

    # --- configuration ---------------------------------------------------------------------
    def configure(self, *, batch_size: int, flush_interval: float, max_buffer: int) -> None:
        """Apply new limits at run time (ROS parameter change)."""
        with self._cond:
            self._batch_size = batch_size
            self._flush_interval = flush_interval
            self._max_buffer = max_buffer
            self._trim_locked()
            self._cond.notify_all()

    # --- producer side ---------------------------------------------------------------------
    def offer(self, item: PerceptionInput, publisher: Hashable = None, seq: int | None = None
              ) -> None:
        """Buffer one perception; never blocks on the store."""
        with self._cond:
            self._received += 1
            if seq is not None:
                self._seq.observe(publisher, seq)
            self._buffer.append(item)
            self._trim_locked()
            if len(self._buffer) >= self._batch_size:
                self._cond.notify_all()

    def reject(self, reason: str, publisher: Hashable = None, seq: int | None = None) -> None:
        """Count a message that could not be read (bad JSON) as received and failed."""
        _LOG.warning('perception rejected: %s', reason)
        with self._cond:
            self._received += 1
            self._failed += 1
            if seq is not None:
                self._seq.observe(publisher, seq)

    def _trim_locked(self) -> None:
        overflow = len(self._buffer) - self._max_buffer
        for _ in range(max(overflow, 0)):
            self._buffer.popleft()
        if overflow > 0:
            self._dropped += overflow

    # --- consumer side ---------------------------------------------------------------------
    def flush(self, full_batches_only: bool = False) -> int:
        """Write what is buffered, one transaction per batch; return rows written."""
        total = 0
        with self._write_lock:
            while True:
                with self._cond:
                    size = min(self._batch_size, len(self._buffer))
                    if full_batches_only and size < self._batch_size:
                        size = 0
                    batch = [self._buffer.popleft() for _ in range(size)]
                if not batch:
                    return total
                total += self._write(batch)

    def _write(self, batch: list[PerceptionInput]) -> int:
        try:
            ids = self._write_batch(batch)
        except Exception:  # a failed batch must never kill the writer thread
            _LOG.exception('perception batch of %d failed; rows counted as failed', len(batch))
            with self._cond:
                self._failed += len(batch)
                self._batches += 1
            written = 0
        else:
            written = sum(1 for memory_id in ids if memory_id)  # 0 = item rejected
            with self._cond:
                self._written += written
                self._failed += len(batch) - written
                self._batches += 1
        if self._on_flush is not None:
            self._on_flush()
        return written

    def counters(self) -> IngestCounters:
        """Return a consistent snapshot of the counters."""
        with self._cond:
            return IngestCounters(self._received, self._written, self._dropped, self._failed,
                                  self._seq.gaps, len(self._buffer), self._batches)

    # --- writer thread ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the writer thread (flushes at batch size or every flush_interval s)."""
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name='robotmem-ingest', daemon=True)
        self._thread.start()

    def stop(self) -> int:
        """Stop the writer thread and write what is still buffered; return rows written."""
        thread, self._thread = self._thread, None
        if thread is not None:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            thread.join()
        return self.flush()

    def _run(self) -> None:
        deadline = time.monotonic() + self._flush_interval
        while True:
            with self._cond:
                while (not self._stopping and len(self._buffer) < self._batch_size
                       and time.monotonic() < deadline):
                    self._cond.wait(deadline - time.monotonic())
                if self._stopping:
                    return
                due = time.monotonic() >= deadline
            # Between deadlines only full batches go out, so a fast stream is not split into
            # many small transactions; at the deadline the partial remainder is written too.
            self.flush(full_batches_only=not due)
            if due:
                deadline = time.monotonic() + self._flush_interval
