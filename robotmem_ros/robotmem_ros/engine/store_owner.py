"""
One store, one owner: an OS lock that a memory node holds on its store for its whole life.

Two nodes on one ``db_path`` would both serve: every streamed perception stored twice, one
StartSession opening two sessions. SQLite's own locks only serialize transactions, so the node
takes an exclusive ``flock`` on a sidecar file ``<db>.lock`` before it opens the store and keeps
it until it exits. The kernel drops the lock when the process dies (kill -9 included), so a
crashed owner never blocks a restart. The file holds the owner's pid, host and node name, which
the refused second node prints. The CLI does not take this lock: it is the documented second
writer and goes through SQLite's locking like any other process.
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import socket
import time

from robotmem_ros.engine.database import prepare_path
from robotmem_ros.errors import StorageError


class StoreOwnedError(StorageError):
    """Another running node owns the store."""


def lock_path(db_path: pathlib.Path) -> pathlib.Path:
    """Return the sidecar lock file of a store."""
    return db_path.with_name(db_path.name + '.lock')


class StoreOwner:
    """Exclusive ownership of a store by this process, released by :meth:`release` or exit."""

    def __init__(self, db_path: pathlib.Path, name: str) -> None:
        """Take the lock or raise StoreOwnedError naming the path and the current owner."""
        self.path = lock_path(db_path)
        prepare_path(db_path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f'cannot create the lock file {self.path}: '
                               f'{exc.strerror or exc}') from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = _describe(_read_owner(fd))
            os.close(fd)
            raise StoreOwnedError(
                f'the store {db_path} is already owned by {owner}; one store has one owner: '
                f'stop that node or give this one another db_path') from None
        self._fd: int | None = fd
        record = {'pid': os.getpid(), 'host': socket.gethostname(), 'node': name,
                  'since': time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)

    def release(self) -> None:
        """Drop the lock (idempotent); the file stays, so a waiting reader never races unlink."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def _read_owner(fd: int) -> dict:
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode() or '{}')
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _describe(owner: dict) -> str:
    if not owner:
        return 'another process (owner not recorded yet)'
    return (f'node {owner.get("node", "?")} (pid {owner.get("pid", "?")} on host '
            f'{owner.get("host", "?")})')
