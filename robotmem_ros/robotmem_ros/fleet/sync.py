"""
FleetSync: the robot's side of fleet memory, run in a thread of its own.

Offline first: learning and recall never wait for the hub. Each round pushes the outbox in
batches, catches up after an overflow, then pulls other robots' changes since the watermark.
A round starts when the period elapses, when the node reports a local write (``wake``) or when
the hub announces a change (LISTEN/NOTIFY), whichever comes first. A failing hub is retried
with a growing pause (capped), and reported in ``status``.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import threading
import time
from typing import Any, Callable, Sequence, TypeVar

from robotmem_ros.engine import store
from robotmem_ros.errors import RobotMemError
from robotmem_ros.fleet import hub, local_store
from robotmem_ros.fleet.settings import FleetSettings
from robotmem_ros.fleet.status import FleetStatus

LOG = logging.getLogger('robotmem.fleet')
MAX_BACKOFF_S = 5.0
T = TypeVar('T')


class FleetSync:
    """Push/pull between one engine's store and the hub."""

    def __init__(self, engine: Any, settings: FleetSettings, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._settings = settings
        self._clock = clock
        with engine.db.write() as conn:
            self._ident = local_store.enable(conn, settings.robot_id, settings.outbox_limit,
                                             settings.collections)
        self._conn: Any = None
        self._dim = 0
        self._hub_id = ''
        self._lock = threading.Lock()
        self._status = FleetStatus(robot_id=settings.robot_id,
                                   outbox_limit=settings.outbox_limit)
        self._in_step_at = 0.0
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Run rounds in a daemon thread until ``stop``."""
        self._thread = threading.Thread(target=self._run, name='robotmem-fleet', daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread and close the hub connection (idempotent)."""
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._disconnect()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    def wake(self) -> None:
        """Start a round now (called after a local write; never blocks)."""
        try:
            os.write(self._wake_w, b'x')
        except OSError:
            pass  # pipe full (a round is due anyway) or closed

    # --- status --------------------------------------------------------------------------

    def status(self) -> FleetStatus:
        """Return the current fleet state (outbox length read from the store)."""
        with self._engine.db.read() as conn:
            outbox = local_store.outbox_length(conn)
            overflow = local_store.overflow(conn)
        with self._lock:
            status = FleetStatus(**self._status.__dict__)
        status.outbox, status.overflow = outbox, overflow
        status.outbox_full = overflow > 0 or outbox >= self._settings.outbox_limit
        if self._in_step_at:
            status.lag_s = max(0.0, self._clock() - self._in_step_at)
        return status

    def _read(self, query: Callable[..., T], *args: Any) -> T:
        """Run a local_store read on this thread's connection, sqlite errors typed."""
        with self._engine.db.read() as conn:
            return query(conn, *args)

    # --- one round -----------------------------------------------------------------------

    def sync_once(self) -> dict:
        """
        Push everything queued, catch up if needed, pull everything new; raise on failure.

        A turn another session holds (``robotmem fleet push`` or ``pull`` on this store) is
        not waited for: that part of the round is left to the next one.
        """
        conn = self._connection()
        pushed = self.push_all(conn, wait=False)
        pulled = self.pull_all(conn, wait=False)
        self._in_step_at = self._clock()
        return {'pushed': pushed, 'pulled': pulled}

    def push_all(self, conn: Any | None = None, wait: bool = True) -> int:
        """
        Push the outbox in batches, then the catch-ups due; return rows sent.

        ``wait``: wait for this robot's push turn (hub.take_turn), else push nothing when
        another session has it.
        """
        return self._in_turn(hub.PUSH, self._push, conn, wait)

    def pull_all(self, conn: Any | None = None, wait: bool = True,
                 from_start: bool = False) -> int:
        """
        Pull other robots' changes in batches until the hub has nothing newer; return rows.

        Each collection is pulled from its own watermark (a collection synced later from its
        beginning); collections at one position are pulled together. ``wait`` as push_all.
        ``from_start``: read the synced collections' whole history again (rows the hub's row
        security hid, a collection named before its grant, were passed by the watermark);
        rows pulled before are followed again as any change.
        """
        return self._in_turn(hub.PULL, functools.partial(self._pull, from_start=from_start),
                             conn, wait)

    def _in_turn(self, kind: int, work: Callable[[Any], int], conn: Any | None,
                 wait: bool) -> int:
        """Run ``work`` in this robot's turn of ``kind`` on the hub (0 if not taken)."""
        conn = conn or self._connection()
        robot_id = self._settings.robot_id
        if not self._guard(hub.take_turn, conn, kind, robot_id, wait):
            return 0
        try:
            return work(conn)
        finally:
            hub.end_turn(conn, kind, robot_id)

    def _push(self, conn: Any) -> int:
        model = self._model()
        sent = self._share_new_collections(conn, model)
        while True:
            keys, rows = self._read(local_store.outbox_batch, self._ident,
                                    self._settings.batch_size, model, self._dim)
            if not keys:
                break
            rows = self._shared(rows)
            if rows:
                self._guard(hub.push, conn, rows)
            with self._engine.db.write() as local:
                local_store.acknowledge(local, keys)
            sent += len(rows)
            self._note(pushed=len(rows), last_push=self._clock())
        overflow = self._read(local_store.overflow)
        if overflow:
            sent += self._catch_up(conn, model, self._settings.collections)
            with self._engine.db.write() as local:
                local_store.clear_overflow(local, overflow)
        return sent

    def _share_new_collections(self, conn: Any, model: str) -> int:
        """
        Catch up the collections shared since the last push; return rows sent.

        Outbox entries of a collection not shared are acknowledged unsent, so a collection
        shared from now on (or by another pusher of this store, whose collections differ) has
        own facts the hub lacks. A store with no record (synced before it) catches up all of
        its collections once.
        """
        shared = self._read(local_store.shared_collections)
        wanted = sorted(self._settings.collections)
        if shared == wanted:
            return 0
        added = sorted(set(wanted) - set(shared))
        sent = self._catch_up(conn, model, added) if added else 0
        with self._engine.db.write() as local:
            local_store.set_shared_collections(local, wanted)
        return sent

    def _catch_up(self, conn: Any, model: str, collections: Sequence[str]) -> int:
        """Compare every own fact of ``collections`` with the hub and push what differs."""
        sent, after = 0, 0
        while True:
            rows = self._read(local_store.own_rows_after, after, self._settings.batch_size,
                              collections)
            if not rows:
                return sent
            after = rows[-1]['memory_id']
            mine = self._shared(self._read(local_store.hub_rows, self._ident, rows, model,
                                           self._dim))
            if not mine:
                continue
            there = self._guard(hub.own_states, conn, [r.gid for r in mine])
            stale = [r for r in mine if there.get(r.gid) != r.state()]
            if stale:
                self._guard(hub.push, conn, stale)
                sent += len(stale)
                self._note(pushed=len(stale), last_push=self._clock())

    def _pull(self, conn: Any, from_start: bool) -> int:
        """
        Pull every synced collection to the end, below the floor read once for the round.

        Only what moved is written: a batch's rows with its collections' position, and the
        caught-up position of collections whose batch came back empty only when they stood
        apart, so that they are pulled in one query from then on. An idle fleet's rounds
        write nothing to the store (each commit drops the readers' page caches).
        """
        engine = self._engine
        collections = self._settings.collections
        floor = self._guard(hub.transaction_floor, conn)
        restart = self._read(local_store.Restart.of, self._hub_id, floor)
        if from_start or restart.record or restart.from_start:
            with engine.db.write() as local:
                if from_start:
                    local_store.set_watermarks(local, collections, (0, 0))
                restart.apply(local, self._hub_id)
            if restart.from_start:
                LOG.warning('fleet: the hub is another server than the one this robot pulled '
                            'from (restored?): pulling every collection from the start')
        positions = self._read(local_store.watermarks, collections)
        apart = len(set(positions.values())) > 1
        done = local_store.caught_up(floor)
        total = 0
        while True:
            behind: dict[hub.Watermark, list[str]] = {}
            for collection, position in positions.items():
                if position != done:
                    behind.setdefault(position, []).append(collection)
            if not behind:
                self._note(last_pull=self._clock())
                return total
            after = min(behind)  # the collections furthest behind first
            names = behind[after]
            batch = self._guard(hub.pull, conn, self._settings.robot_id, names, after,
                                self._settings.batch_size, floor)
            position = done if len(batch) < self._settings.batch_size else batch[-1][0]
            positions.update((name, position) for name in names)
            if batch or apart:
                with engine.db.write() as local:
                    pulled = local_store.apply_pulled(
                        local, batch, config=engine.config, model=self._model(),
                        dim=engine.embedding.embedder.dim if engine.embedding.usable else 0,
                        vectors_ok=engine.embedding.usable, now=self._clock())
                    local_store.set_watermarks(local, names, position)
                total += len(batch)
                self._note(pulled=len(batch), duplicates=pulled.duplicates,
                           refused=pulled.refused)

    def request_catch_up(self) -> None:
        """Compare every own fact with the hub on the next push (``fleet push --full``)."""
        with self._engine.db.write() as conn:
            local_store.mark_overflow(conn)

    def hub_rows_per_robot(self) -> list[dict]:
        """Rows per robot and collection that this robot's role can see at the hub."""
        return self._guard(hub.hub_stats, self._connection())

    # --- internals -----------------------------------------------------------------------

    def _shared(self, rows: list[hub.HubRow]) -> list[hub.HubRow]:
        """Keep rows of the synced collections; the others stay on the robot."""
        return [r for r in rows if r.collection in self._settings.collections]

    def _model(self) -> str:
        return store_model(self._engine)

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            conn = hub.connect(self._settings.url, self._settings.password)
            try:
                hub.listen(conn)
                self._dim = hub.hub_dim(conn)
                self._hub_id = hub.hub_identity(conn)
            except hub.HubError as exc:
                conn.close()
                raise hub.wrap(exc) from exc
            self._conn = conn
            self._note(connected=True, error='')
        return self._conn

    def _guard(self, func: Callable, conn: Any, *args: Any) -> Any:
        """Run one hub statement; a hub failure drops the connection and raises StorageError."""
        try:
            return func(conn, *args)
        except hub.HubError as exc:
            self._disconnect()
            raise hub.wrap(exc) from exc

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail too
                pass
        self._note(connected=False)

    def _note(self, *, pushed: int = 0, pulled: int = 0, duplicates: int = 0, refused: int = 0,
              **fields: Any) -> None:
        with self._lock:
            self._status.pushed += pushed
            self._status.pulled += pulled
            self._status.duplicates += duplicates
            self._status.refused += refused
            for name, value in fields.items():
                setattr(self._status, name, value)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.sync_once()
                failures = 0
            except RobotMemError as exc:  # hub down, refused, or a local store error
                failures += 1
                self._note(error=str(exc))
                if failures == 1:
                    LOG.warning('fleet sync failed (retrying): %s', exc)
            except Exception as exc:  # noqa: BLE001 - the sync thread must outlive any fault
                failures += 1
                self._note(error=f'{type(exc).__name__}: {exc}')
                LOG.exception('fleet sync round failed')
            pause = self._settings.period * (2 ** min(failures, 6)) if failures else \
                self._settings.period
            self._wait(min(pause, max(MAX_BACKOFF_S, self._settings.period)))

    def _wait(self, timeout: float) -> None:
        """Sleep until the timeout, a wake call or a hub notification."""
        fds = [self._wake_r]
        conn = self._conn
        hub_fd = conn.fileno() if conn is not None and not conn.closed else -1
        if hub_fd >= 0:
            fds.append(hub_fd)
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            return
        if self._wake_r in ready:
            try:
                os.read(self._wake_r, 4096)
            except OSError:
                pass
        if hub_fd in ready:
            try:
                hub.drain_notifications(conn)
            except hub.HubError:
                self._disconnect()


def store_model(engine: Any) -> str:
    """Model of the vectors in the store ('' when it has none)."""
    with engine.db.read() as conn:
        return store.get_meta(conn, 'embed_model_id') or ''
