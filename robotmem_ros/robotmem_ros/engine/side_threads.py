"""
Calls run beside the caller on spare threads: a recall's vector channel next to its BM25 one.

Why: on the 2-core target both channels spend most of their time where Python lets go of the
GIL (faiss, numpy, tantivy, SQLite's steps), so running them side by side took the two of
them from 15.3 to 9.3 ms at 1M memories and from 5.1 to 3.1 ms at 10k (docs/performance.md,
"Both channels at once"). A caller never queues for a thread: when every spare thread is
busy (concurrent recalls on a multi-threaded executor), the call runs in the caller, after
its own work, as it would with no spare threads (``side_threads`` 0).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
import threading
from typing import Callable, TypeVar

T = TypeVar('T')


class SideThreads:
    """Up to ``count`` calls at a time run beside their callers; the rest run in them."""

    def __init__(self, count: int) -> None:
        self._free = threading.Semaphore(count)
        self._pool = (ThreadPoolExecutor(max_workers=count, thread_name_prefix='robotmem-side')
                      if count else None)

    def start(self, call: Callable[[], T]) -> Callable[[], T]:
        """
        Start ``call`` on a spare thread if one is free; return what waits for its result.

        The result's exception, if any, is raised by that waiting function in the caller, so
        the caller's error handling covers it either way.
        """
        if self._pool is None or not self._free.acquire(blocking=False):
            return call
        try:
            return self._pool.submit(self._run, call).result
        except RuntimeError:  # shut down by close(): run in the caller, which reports why
            self._free.release()
            return call

    def close(self) -> None:
        """Let running calls finish, then end the threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _run(self, call: Callable[[], T]) -> T:
        try:
            return call()
        finally:
            self._free.release()
