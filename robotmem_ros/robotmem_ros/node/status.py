"""
Latched NodeStatus and /diagnostics of the memory node.

Clients wait for ``ready`` on ``~/status`` (TRANSIENT_LOCAL depth 1, so a late subscriber gets
the last value at once); operators watch /diagnostics. Status is republished when something
changed (cheap check on a short timer) and on every heartbeat, so a dead node shows up as a
missing heartbeat rather than a stale "OK".
"""

from __future__ import annotations

import threading
from typing import Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.publisher import Publisher
from robotmem_msgs.msg import NodeStatus
from robotmem_ros.fleet.status import FleetStatus
from robotmem_ros.node.perception_ingest import IngestCounters
from robotmem_ros.types import EngineStatus
from robotmem_ros.wire import LATCHED

BACKLOG_WARN_SHARE = 0.8
# FleetStatus fields mirrored in NodeStatus as fleet_<name>.
FLEET_FIELDS = ('connected', 'outbox', 'outbox_full', 'last_push', 'last_pull', 'lag_s', 'error')


def build_status(ready: bool, store: EngineStatus | None, counters: IngestCounters,
                 db_path: str, message: str = '', fleet: FleetStatus | None = None
                 ) -> NodeStatus:
    """Assemble the NodeStatus message (store may be None before the engine opened)."""
    msg = NodeStatus(ready=ready, message='' if ready else message, db_path=db_path,
                     perception_received=counters.received,
                     perception_written=counters.written, perception_dropped=counters.dropped,
                     perception_failed=counters.failed)
    if store is not None:
        msg.db_path = store.db_path
        msg.embed_backend = store.embed_backend
        msg.embed_device = store.embed_device
        msg.model_id = store.model_id
        msg.collection = store.collection
        msg.active_memories_count = store.active_memories_count
    if fleet is not None:
        msg.fleet_enabled = True
        for name in FLEET_FIELDS:
            setattr(msg, f'fleet_{name}', getattr(fleet, name))
    return msg


def _status(name: str, level: bytes, message: str, hardware_id: str,
            **values: object) -> DiagnosticStatus:
    return DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id,
                            values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])


def build_diagnostics(store: EngineStatus | None, store_error: str, counters: IngestCounters,
                      max_buffer: int, requested_device: str) -> list[DiagnosticStatus]:
    """One DiagnosticStatus each for the store, the embedder and the perception stream."""
    hw = store.db_path if store is not None else ''
    stamps_replaced = store.stamps_replaced if store is not None else 0
    if store is None or store_error:
        store_diag = _status('robotmem: store', DiagnosticStatus.ERROR,
                             store_error or 'store not open', hw)
    else:
        problems = [m for m in ('reindex needed' if store.reindex_needed else '',
                                f'vector index on its full scan: {store.ann_error}'
                                if store.ann_error else '',
                                f'WAL checkpoint failing: {store.checkpoint_error}'
                                if store.checkpoint_error else '') if m]
        store_diag = _status('robotmem: store',
                             DiagnosticStatus.WARN if problems else DiagnosticStatus.OK,
                             '; '.join(problems) or 'OK', hw,
                             db_bytes=store.db_bytes,
                             active_memories=store.active_memories_count,
                             collection=store.collection, index_vectors=store.index_vectors,
                             ann_vectors=store.ann_vectors, ann_building=store.ann_building)
    if store is None:
        embed_diag = _status('robotmem: embedder', DiagnosticStatus.STALE, 'not loaded', hw)
    else:
        degraded = (store.embed_error or store.embed_failures or store.embed_skipped
                    or (store.embed_backend != 'none' and requested_device != 'auto'
                        and store.embed_device != requested_device))
        embed_diag = _status(
            'robotmem: embedder', DiagnosticStatus.WARN if degraded else DiagnosticStatus.OK,
            store.embed_error or ('fallback or failures' if degraded else 'OK'), hw,
            backend=store.embed_backend, device=store.embed_device,
            requested_device=requested_device, model_id=store.model_id,
            failures=store.embed_failures, pending_embeddings=store.pending_embeddings,
            skipped_backlog=store.embed_skipped)
    if counters.failed:
        level, message = DiagnosticStatus.ERROR, 'perception writes failed'
    elif counters.dropped or counters.backlog >= BACKLOG_WARN_SHARE * max_buffer:
        level, message = DiagnosticStatus.WARN, 'perception backlog / drops'
    else:
        level, message = DiagnosticStatus.OK, 'OK'
    stream_diag = _status('robotmem: perception', level, message, hw,
                          received=counters.received, written=counters.written,
                          dropped=counters.dropped, failed=counters.failed,
                          seq_gaps=counters.seq_gaps, backlog=counters.backlog,
                          max_buffer=max_buffer, batches=counters.batches,
                          stamps_replaced=stamps_replaced)
    return [store_diag, embed_diag, stream_diag]


def build_fleet_diagnostic(fleet: FleetStatus, hardware_id: str) -> DiagnosticStatus:
    """Fleet sync: OK in step, WARN offline or outbox full (the robot keeps working locally)."""
    if fleet.connected and not fleet.outbox_full:
        level, message = DiagnosticStatus.OK, 'OK'
    else:
        level = DiagnosticStatus.WARN
        message = '; '.join(m for m in (
            'outbox full' if fleet.outbox_full else '',
            '' if fleet.connected else f'hub offline: {fleet.error or "not connected yet"}')
            if m)
    return _status('robotmem: fleet', level, message, hardware_id, robot_id=fleet.robot_id,
                   connected=fleet.connected, outbox=fleet.outbox,
                   outbox_limit=fleet.outbox_limit, outbox_full=fleet.outbox_full,
                   last_push=fleet.last_push, last_pull=fleet.last_pull, lag_s=fleet.lag_s,
                   pushed=fleet.pushed, pulled=fleet.pulled,
                   pulled_duplicates=fleet.duplicates, pulled_refused=fleet.refused)


class StatusReporter:
    """Owns ~/status and /diagnostics; thread-safe, callable from any callback or thread."""

    def __init__(self, node: Node, counters: Callable[[], IngestCounters], db_path: str,
                 max_buffer: Callable[[], int], requested_device: str) -> None:
        self._node = node
        self._counters = counters
        self._db_path = db_path
        self._max_buffer = max_buffer
        self._requested_device = requested_device
        self._status_pub = node.create_publisher(NodeStatus, '~/status', LATCHED)
        self._diag_pub = node.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self._lock = threading.Lock()
        self._store_status: Callable[[], EngineStatus] | None = None
        self._store: EngineStatus | None = None
        self._store_error = ''
        self._message = ''
        self._dirty = True
        self._last: NodeStatus | None = None
        self._fleet_status: Callable[[], FleetStatus] | None = None
        self.publish(force=True)

    def attach_fleet(self, fleet_status: Callable[[], FleetStatus]) -> None:
        """Report fleet sync state from now on (only when fleet_url is set)."""
        self._fleet_status = fleet_status

    def _fleet(self) -> FleetStatus | None:
        if self._fleet_status is None:
            return None
        try:
            return self._fleet_status()
        except Exception as exc:  # a failing store is reported by the store diagnostic
            return FleetStatus(error=f'{type(exc).__name__}: {exc}')

    def attach_store(self, store_status: Callable[[], EngineStatus]) -> None:
        """Start reporting the open store (ready=true from now on)."""
        self._store_status = store_status
        self.mark_dirty()
        self.publish(force=True)

    @property
    def message(self) -> str:
        """Return what the node reported it waits for ('' when nothing)."""
        return self._message

    def set_message(self, message: str) -> None:
        """Say what the node waits for before it is ready (published at once when new)."""
        if message != self._message:
            self._message = message
            self.publish()

    def mark_dirty(self) -> None:
        """Note that the store changed; the next publish re-reads its status."""
        self._dirty = True

    def _refresh_store(self) -> None:
        if self._store_status is None or not self._dirty:
            return
        self._dirty = False
        try:
            self._store = self._store_status()
            self._store_error = ''
        except Exception as exc:  # a failing store is reported, not raised into a timer
            self._store_error = f'{type(exc).__name__}: {exc}'

    def publish(self, force: bool = False) -> None:
        """Publish NodeStatus when it changed (or always with ``force``)."""
        with self._lock:
            self._refresh_store()
            msg = build_status(self._store_status is not None and not self._store_error,
                               self._store, self._counters(), self._db_path, self._message,
                               self._fleet())
            if force or msg != self._last:
                self._send(self._status_pub, msg)
                self._last = msg

    def heartbeat(self) -> None:
        """Re-read the store, publish status and diagnostics unconditionally."""
        self.mark_dirty()
        self.publish(force=True)
        with self._lock:
            array = DiagnosticArray()
            array.header.stamp = self._node.get_clock().now().to_msg()
            array.status = build_diagnostics(self._store, self._store_error, self._counters(),
                                             self._max_buffer(), self._requested_device)
            fleet = self._fleet()
            if fleet is not None:
                array.status.append(build_fleet_diagnostic(fleet, self._db_path))
        self._send(self._diag_pub, array)

    def _send(self, publisher: Publisher, msg: NodeStatus | DiagnosticArray) -> None:
        """
        Publish, unless Ctrl-C shut the context down while this callback ran.

        The executor's worker threads finish the callbacks they started after the signal; a
        publish there raised into a future nobody reads once the spin loop had ended, and the
        node printed "The following exception was never retrieved" on Ctrl-C. rclpy raises
        RCLError (context invalid) or, once the shutdown destroyed the publisher, InvalidHandle.
        """
        try:
            publisher.publish(msg)
        except (_rclpy.RCLError, _rclpy.InvalidHandle):
            if self._node.context.ok():
                raise
