"""
WAL checkpoints in a background thread, off the request path (docs/performance.md).

With SQLite's default ``wal_autocheckpoint`` the commit that takes the WAL past 1 000 pages
copies them into the database file and syncs it before it returns: 45 ms of a 110 ms end of
session (1 000 facts, 2-core machine), and the same stall on whichever learn crosses the mark.
The store's writer turns that off, and this thread runs a PASSIVE checkpoint on a connection
of its own once the WAL file has grown past ``wal_bytes``: a PASSIVE checkpoint takes neither
the write lock nor a reader's, so a learn or a recall never waits for it. Durability is
unchanged: a commit is in the WAL before it returns, and a checkpoint only moves pages.
"""

from __future__ import annotations

import logging
import os
import pathlib
import threading
from typing import Any, Callable

LOG = logging.getLogger('robotmem.engine')

# SQLite's own default mark (1 000 pages of 4 KiB); checked this often when nothing wakes it.
WAL_BYTES = 4 * 1024 * 1024
POLL_S = 1.0
JOIN_S = 5.0


class Checkpointer:
    """A daemon thread that checkpoints the WAL of one store when it has grown."""

    def __init__(self, path: pathlib.Path, opener: Callable[[], Any],
                 wal_bytes: int = WAL_BYTES) -> None:
        self._wal = pathlib.Path(f'{path}-wal')
        self._opener = opener
        self.wal_bytes = wal_bytes  # the WAL size from which a checkpoint is due
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.checkpoints = 0
        self.last_error = ''
        self._thread = threading.Thread(target=self._run, name='robotmem-checkpoint',
                                        daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """Wake the thread after a commit: it looks at the size of the WAL, nothing more."""
        self._wake.set()

    def stop(self) -> None:
        """Stop the thread; a checkpoint under way finishes first (bounded wait)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(JOIN_S)

    @property
    def running(self) -> bool:
        """Return True while the thread runs (until :meth:`stop`)."""
        return self._thread.is_alive()

    def _run(self) -> None:
        conn = None
        done: tuple[int, int] | None = None  # the WAL as the last checkpoint left it
        try:
            while not self._stop.is_set():
                self._wake.wait(POLL_S)
                self._wake.clear()
                wal = self._wal_state()
                if self._stop.is_set() or wal[0] < self.wal_bytes or wal == done:
                    continue
                try:
                    conn = conn or self._opener()
                except Exception as exc:  # noqa: BLE001 - say why; the next wake retries
                    self._failed(exc)
                    continue
                if self._checkpoint(conn):
                    done = self._wal_state()
        finally:
            if conn is not None:
                conn.close()

    def _checkpoint(self, conn: Any) -> bool:
        """Copy what it can of the WAL; True when every frame is in the database file."""
        try:
            busy, frames, copied = conn.execute('PRAGMA wal_checkpoint(PASSIVE)').fetchone()
        except Exception as exc:  # noqa: BLE001 - a full disk or a busy file: try again later
            self._failed(exc)
            return False
        self.checkpoints += 1
        self.last_error = ''
        return not busy and frames == copied

    def _failed(self, exc: Exception) -> None:
        error = f'{type(exc).__name__}: {exc}'
        if error != self.last_error:
            LOG.warning('WAL checkpoint failed (%s); it is retried after the next write', error)
        self.last_error = error

    def _wal_state(self) -> tuple[int, int]:
        """Return (size, modification time) of the WAL: unchanged, it is not checkpointed again."""
        try:
            stat = os.stat(self._wal)
        except OSError:
            return 0, 0
        return stat.st_size, stat.st_mtime_ns
