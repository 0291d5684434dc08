"""
SQLite connections: one serialized writer, one reader per thread.

The store needs an SQLite that can load sqlite-vec. This Python's stdlib ``sqlite3`` cannot
load extensions, so ``pysqlite3`` (bundled, recent SQLite) is preferred where installed; a
system Python whose stdlib can load extensions (typical on a robot) works without it.

Every write goes through :meth:`Database.write`, which holds one lock around one
``BEGIN IMMEDIATE`` transaction on the single writer connection: no transaction ever nests, and
writers in other processes (the CLI) wait on ``busy_timeout`` instead of failing.

Every other connection (each thread's reader, the background indexes' and the checkpointer's)
keeps a page cache of ``reader_cache_kib``: the node holds about nine, each filled to SQLite's
2 000 KiB at 1M memories, while the file's pages stay in the system's page cache either way
(256 KiB: the node 9-14 MiB lower through a 1M session, no call slower at 10k or 1M;
docs/performance.md, "Page caches of the read connections").
The writer keeps SQLite's default, so a batch's dirty pages are not spilled mid-transaction.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import threading
import time
from typing import Any, Callable, Iterator

from robotmem_ros.engine import count_ledger, index_snapshot, vocab_store
from robotmem_ros.engine.checkpointer import Checkpointer
from robotmem_ros.engine.resident_text import ResidentText
from robotmem_ros.engine.text_index import TextIndex
from robotmem_ros.engine.vector_index import VectorIndex
from robotmem_ros.errors import ConflictError, CorruptDatabaseError, StorageError


class StoreLockedError(StorageError):
    """Another process kept the store's write lock longer than the caller would wait."""


try:  # pragma: no cover - which one exists depends on the machine
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover
    import sqlite3  # type: ignore[no-redef]

try:
    import sqlite_vec
except ImportError:  # pragma: no cover - only needed to read schema-1 stores (has_vec)
    sqlite_vec = None

BUSY_TIMEOUT_MS = 10_000
LOCK_POLL_MS = 250        # one attempt of the bounded wait for the write lock at start
WAL_WRITE_LOCK_BYTE = 120  # offset of SQLite's WAL writer lock in the -shm file
CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)
Error = sqlite3.Error
IntegrityError = sqlite3.IntegrityError
OperationalError = sqlite3.OperationalError
DatabaseError = sqlite3.DatabaseError


class StoreConnection(sqlite3.Connection):  # type: ignore[misc]
    """A connection that knows the vector index of its store (store.vec_search uses it)."""

    vector_index: VectorIndex | None = None


def connect(path: str, *, read_only: bool = False, cache_kib: int = 0) -> Any:
    """
    Open a connection with the store's settings (``read_only`` never writes the file).

    ``cache_kib`` > 0 caps its page cache at that many KiB; 0 keeps SQLite's default.
    """
    uri = pathlib.Path(path).absolute().as_uri() + ('?mode=ro' if read_only else '')
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                           isolation_level=None, check_same_thread=False,
                           factory=StoreConnection)
    conn.row_factory = sqlite3.Row
    conn.execute(f'PRAGMA busy_timeout={BUSY_TIMEOUT_MS}')
    conn.execute('PRAGMA foreign_keys=ON')
    conn.execute('PRAGMA synchronous=NORMAL')
    if cache_kib > 0:
        conn.execute(f'PRAGMA cache_size={-int(cache_kib)}')
    _load_vec(conn)
    return conn


def _load_vec(conn: Any) -> None:
    if sqlite_vec is None or not hasattr(conn, 'enable_load_extension'):
        return
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    except sqlite3.Error:
        pass  # has_vec reports it; only a schema-1 vec0 table needs the extension


def prepare_path(path: pathlib.Path) -> None:
    """Create the store's directory; raise StorageError naming the path when it cannot be used."""
    if path.is_dir():
        raise StorageError(f'database path {path} is a directory, not a file')
    if path.parent.exists() and not path.parent.is_dir():
        raise StorageError(f'cannot create {path}: {path.parent} is not a directory')
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f'cannot create the directory of {path}: {exc.strerror}') from exc
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise StorageError(f'database {path} is not readable and writable by this user')
    if not path.exists() and not os.access(path.parent, os.W_OK):
        raise StorageError(f'cannot create {path}: directory is not writable')


class Database:
    """The store's connections and the one write path."""

    def __init__(self, path: pathlib.Path, *, ann_min_vectors: int = 0,
                 ann_nprobe: int = 32, int8_max_vectors: int = 0,
                 text_index_min_rows: int = 0, resident_text_max_rows: int = 0,
                 reader_cache_kib: int = 0) -> None:
        self.path = path
        self._open_reader = functools.partial(connect, str(path), cache_kib=reader_cache_kib)
        prepare_path(path)
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._changes_at_begin = -1  # the writer's total_changes when its transaction began
        # Called at the start of a write when another connection (another process: this one
        # writes through this connection alone) committed since the last write began.
        self.on_outside_commit: Callable[[Any], None] | None = None
        self._outside_version: int | None = None  # PRAGMA data_version at the last check
        self._readers: list[Any] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        try:
            self._writer = connect(str(path))
            self._writer.execute('PRAGMA journal_mode=WAL')
            # Checkpoints run in their own thread (engine/checkpointer.py); the WAL is cut
            # back to what the first commit after one writes, so its size shows what is new.
            self._writer.execute('PRAGMA wal_autocheckpoint=0')
            self._writer.execute('PRAGMA journal_size_limit=0')
        except sqlite3.DatabaseError as exc:
            raise classify(exc, path) from exc
        self.checkpointer = Checkpointer(path, self._open_reader)
        self.has_vec = self._probe_vec()
        self.vectors = VectorIndex(self.reader, ann_min_vectors, ann_nprobe,
                                   opener=self._open_reader,
                                   int8_max_vectors=int8_max_vectors,
                                   snapshot=index_snapshot.path_for(path))
        self._writer.vector_index = self.vectors
        self.counts = count_ledger.CountLedger()
        self._writer.count_ledger = self.counts
        self.text = TextIndex(path, text_index_min_rows, self._open_reader, self.write,
                              snapshot)
        self._writer.text_index = self.text
        self.resident = ResidentText(resident_text_max_rows, self._open_reader, self.counts,
                                     snapshot)
        self._writer.resident_text = self.resident

    def _probe_vec(self) -> bool:
        try:
            self._writer.execute('SELECT vec_version()')
            return True
        except sqlite3.Error:
            return False

    @contextlib.contextmanager
    def write(self, *, wait_s: float | None = None,
              on_wait: Callable[[str], None] | None = None) -> Iterator[Any]:
        """
        Run one IMMEDIATE transaction on the writer connection, serialized by a lock.

        Re-entrant: a nested ``write()`` in the same thread joins the outer transaction.
        ``wait_s`` replaces the busy timeout by a bounded wait in short polls, calling
        ``on_wait(holder)`` while another process holds the lock, then StoreLockedError.
        """
        with self._write_lock:
            self._check_open()
            conn = self._writer
            if conn.in_transaction:
                yield conn
                return
            if wait_s is None:
                try:
                    conn.execute('BEGIN IMMEDIATE')
                except sqlite3.Error as exc:
                    raise classify(exc, self.path) from exc
            else:
                self._begin_within(conn, wait_s, on_wait)
            with self._committed(conn):
                yield conn

    @contextlib.contextmanager
    def _committed(self, conn: Any) -> Iterator[None]:
        """
        Close the open transaction of ``conn``: COMMIT after the body, ROLLBACK on error.

        This is where an sqlite error of a write becomes a typed one, once for every write:
        ConflictError for a broken uniqueness rule, else ``classify``'s StorageError.
        """
        self._changes_at_begin = conn.total_changes
        self.counts.discard()
        try:
            self._follow_outside(conn)
            yield
        except BaseException as exc:
            self.counts.discard()
            # SQLite may already have rolled back (SQLITE_FULL, IOERR): a second
            # ROLLBACK would fail and hide the error that explains what went wrong.
            if conn.in_transaction:
                conn.execute('ROLLBACK')
            if isinstance(exc, sqlite3.Error):
                raise self.translated(exc) from exc
            raise
        try:
            version = (conn.execute('PRAGMA data_version').fetchone()[0] if self.counts.noted
                       else 0)
            self.counts.committing = self.counts.noted
            conn.execute('COMMIT')
        except sqlite3.Error as exc:
            self.counts.discard()
            if conn.in_transaction:
                conn.execute('ROLLBACK')
            raise classify(exc, self.path) from exc
        self._count_step(conn, version)
        self.checkpointer.committed()

    def _follow_outside(self, conn: Any) -> None:
        """Call ``on_outside_commit`` when another connection committed (one PRAGMA, µs)."""
        if self.on_outside_commit is None:
            return
        version = conn.execute('PRAGMA data_version').fetchone()[0]
        if version != self._outside_version:
            self.on_outside_commit(conn)
            self._outside_version = version  # after: a hook that failed runs again next write

    def _count_step(self, conn: Any, version: int) -> None:
        """
        Give the count ledger the FTS structure record this commit left (engine/count_ledger).

        It is this commit's unless another connection committed since, which PRAGMA
        data_version (read before the COMMIT) tells. The write is done: a failed read only
        costs readers a read of their counts.
        """
        if not self.counts.noted:
            return
        try:
            after = vocab_store.structure(conn)
            same = conn.execute('PRAGMA data_version').fetchone()[0] == version
        except sqlite3.Error:
            after, same = None, False
        self.counts.committed(after if same else None)

    def _begin_within(self, conn: Any, wait_s: float,
                      on_wait: Callable[[str], None] | None) -> None:
        deadline = time.monotonic() + wait_s
        conn.execute(f'PRAGMA busy_timeout={LOCK_POLL_MS}')
        try:
            while True:
                try:
                    conn.execute('BEGIN IMMEDIATE')
                    return
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        raise classify(exc, self.path) from exc
                holder = lock_holder(self.path)
                if time.monotonic() >= deadline:
                    raise StoreLockedError(
                        f'the store {self.path} stayed locked by {holder} for more than '
                        f'{wait_s:g} s (store_lock_timeout); nothing was written')
                if on_wait is not None:
                    on_wait(holder)
        finally:
            conn.execute(f'PRAGMA busy_timeout={BUSY_TIMEOUT_MS}')

    def unwritten(self, conn: Any) -> bool:
        """
        Return True while ``conn`` is the writer in a transaction that has changed no row yet.

        A read connection then sees what the writer sees: BEGIN IMMEDIATE holds the write lock,
        so no other connection commits before this transaction ends. A learn's nearest
        neighbours are searched on a spare thread's reader on that ground (engine/dedup.py).
        """
        return (conn is self._writer and conn.in_transaction
                and conn.total_changes == self._changes_at_begin)

    @contextlib.contextmanager
    def try_write(self) -> Iterator[Any | None]:
        """
        Like :meth:`write`, but yield None at once when the store is busy.

        For best-effort bookkeeping (recall's access counts): it never waits, neither on a
        writer of this process nor on another process's SQLite write lock.
        """
        if not self._write_lock.acquire(blocking=False):
            yield None
            return
        try:
            with self.errors():  # its own statements too: the caller sees typed errors only
                self._check_open()
                conn = self._writer
                if conn.in_transaction:  # a write of this thread is open: join it
                    yield conn
                    return
                conn.execute('PRAGMA busy_timeout=0')
                try:
                    conn.execute('BEGIN IMMEDIATE')
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        raise
                    conn = None
                finally:
                    self._writer.execute(f'PRAGMA busy_timeout={BUSY_TIMEOUT_MS}')
                if conn is None:
                    yield None
                    return
                with self._committed(conn):
                    yield conn
        finally:
            self._write_lock.release()

    def translated(self, exc: sqlite3.Error) -> StorageError:
        """
        Return the typed error for an sqlite error: the one place this translation is made.

        ConflictError for a broken uniqueness rule (the caller may know what to do), else
        ``classify``'s StorageError with a message an operator can act on.
        """
        if isinstance(exc, sqlite3.IntegrityError):
            return _conflict(exc)
        return classify(exc, self.path)

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Translate an sqlite error raised in the block (reads; writes translate on their own)."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self.translated(exc) from exc

    @contextlib.contextmanager
    def read(self) -> Iterator[Any]:
        """Yield this thread's read connection, its sqlite errors translated."""
        with self.errors():
            yield self.reader()

    def reader(self) -> Any:
        """Return this thread's read connection (WAL: never blocked by the writer)."""
        self._check_open()
        conn = getattr(self._local, 'conn', None)
        if conn is None:
            conn = self._open_reader()
            conn.vector_index = self.vectors
            conn.text_index = self.text
            conn.count_ledger = self.counts
            conn.resident_text = self.resident
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @property
    def closed(self) -> bool:
        """Return True once :meth:`close` ran."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError('the memory store is closed')

    def close(self) -> None:
        """Checkpoint and close every connection; idempotent."""
        self.text.close()  # first: its worker may be waiting for the write lock
        self.resident.close()
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            self.vectors.close()
            self.checkpointer.stop()
            with self._readers_lock:
                for conn in self._readers:
                    conn.close()
                self._readers.clear()
            try:
                self._writer.execute('PRAGMA wal_checkpoint(TRUNCATE)')
            except sqlite3.Error:
                pass  # another process still reads; the WAL stays valid
            self._writer.close()


def _conflict(exc: Exception) -> ConflictError:
    return ConflictError(f'another write stored this first ({exc})')


@contextlib.contextmanager
def savepoint(conn: Any, name: str) -> Iterator[None]:
    """
    Run the block as a savepoint of the open write, so a broken uniqueness rule undoes it alone.

    On an IntegrityError the block is rolled back to the savepoint and ConflictError raised:
    the caller may catch it and go on with the rest of its transaction (learn keeps both facts
    when a merged text equals another one). Any other error is left to the enclosing write,
    which rolls everything back and types it.
    """
    conn.execute(f'SAVEPOINT {name}')
    try:
        yield
    except sqlite3.IntegrityError as exc:
        count_ledger.taint(conn)  # its noted FTS changes are undone: readers read them again
        conn.execute(f'ROLLBACK TO {name}')
        conn.execute(f'RELEASE {name}')
        raise _conflict(exc) from exc
    conn.execute(f'RELEASE {name}')


@contextlib.contextmanager
def snapshot(conn: Any) -> Iterator[Any]:
    """
    Hold one read transaction on a reader, so every read in the block sees the same state.

    The node may write meanwhile (WAL): an export or a doctor run must not mix rows from
    before and after one of its writes. Nothing is written, so the end is a ROLLBACK.
    """
    conn.execute('BEGIN')
    try:
        yield conn
    finally:
        conn.execute('ROLLBACK')


def integrity_check(path: pathlib.Path) -> list[str]:
    """
    Run ``PRAGMA integrity_check`` on a read-only connection; ``['ok']`` when sound.

    Read-only, so a damaged file is looked at, never touched (a connection that writes would
    switch its journal mode and may checkpoint into it). A file SQLite cannot read at all
    raises CorruptDatabaseError saying how to recover it.
    """
    try:
        conn = connect(str(path), read_only=True)
        try:
            return [row[0] for row in conn.execute('PRAGMA integrity_check')]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise CorruptDatabaseError(
            f'{path} is not a readable SQLite database ({exc}); it was not modified. Restore '
            f'it from a backup or salvage it with `sqlite3 {path} .recover`.') from exc


def _is_busy(exc: Exception) -> bool:
    text = str(exc)
    return 'locked' in text or 'busy' in text


def lock_holder(path: pathlib.Path) -> str:
    """
    Name the process that holds the store's write lock, for messages ("pid 42 (python3)").

    SQLite's WAL writer lock is a POSIX lock on one byte of ``<db>-shm``; Linux lists it in
    /proc/locks. Elsewhere, or when it cannot be told, the answer is "another process".
    """
    try:
        inode = os.stat(f'{path}-shm').st_ino
        with open('/proc/locks', encoding='ascii') as locks:
            lines = locks.read().splitlines()
    except OSError:
        return 'another process'
    pids = []
    for line in lines:
        fields = line.split()
        if '->' in fields:  # a waiter, not a holder
            continue
        if len(fields) >= 8 and fields[1] == 'POSIX' and fields[3] == 'WRITE' \
                and fields[5].rsplit(':', 1)[-1] == str(inode) \
                and fields[6] == str(WAL_WRITE_LOCK_BYTE) and fields[4] != str(os.getpid()):
            pids.append(fields[4])
    if not pids:
        return 'another process'
    return ', '.join(f'pid {pid} ({_command(pid)})' for pid in pids)


def _command(pid: str) -> str:
    try:
        return pathlib.Path(f'/proc/{pid}/comm').read_text().strip() or '?'
    except OSError:
        return '?'


def classify(exc: Exception, path: pathlib.Path) -> StorageError:
    """Turn an sqlite error into a typed StorageError with a message an operator can act on."""
    text = str(exc)
    if _is_corrupt(exc):
        return CorruptDatabaseError(
            f'{path} is not a valid robotmem database ({text}); it was not modified. '
            f'Run `robotmem doctor --db {path}` to inspect it.')
    if 'full' in text:
        return StorageError(f'the disk holding {path} is full ({text}); nothing was written')
    if 'readonly' in text or 'read-only' in text:
        return StorageError(f'{path} is read-only ({text}); nothing was written')
    return StorageError(f'database error on {path}: {text}')


def _is_corrupt(exc: Exception) -> bool:
    """
    Tell a damaged file (SQLITE_CORRUPT, SQLITE_NOTADB, extended codes included) by its code.

    The code covers messages the text cannot ("fts5: corruption found reading blob ..."); the
    text is the fallback for an sqlite module that gives no code.
    """
    code = getattr(exc, 'sqlite_errorcode', None)
    if code is not None:
        return (code & 0xFF) in CORRUPT_CODES
    text = str(exc)
    return 'not a database' in text or 'malformed' in text
