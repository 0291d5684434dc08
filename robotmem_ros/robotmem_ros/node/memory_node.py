"""
The robotmem ROS 2 node: services and the perception stream around one MemoryEngine.

Every service callback is a thin adapter (request -> engine call -> response). Whatever goes
wrong inside a request becomes ``success=false, error=...`` in its response: the node is
shared by every manipulation node on the robot and must never die on one bad request. Writes
share a MutuallyExclusive callback group (the engine serializes them anyway; this keeps
executor threads free for Recall, which runs in a Reentrant group next to them).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, qos_profile_sensor_data, QoSProfile,
                       ReliabilityPolicy)
from robotmem_msgs.msg import PerceptionData
from robotmem_msgs.srv import (EndSession, Forget, Learn, Recall, SavePerception, StartSession,
                               Update)
from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import MemoryEngine
from robotmem_ros.engine.store_owner import StoreOwner
from robotmem_ros.errors import RobotMemError, ValidationError
from robotmem_ros.fleet.status import FleetStatus
from robotmem_ros.node import conversions as conv
from robotmem_ros.node import log_bridge, middleware
from robotmem_ros.node.answered_requests import AnsweredRequests
from robotmem_ros.node.parameters import declare_config_parameters, make_set_callback
from robotmem_ros.node.perception_ingest import PerceptionIngest
from robotmem_ros.node.perception_receiver import PerceptionReceiver
from robotmem_ros.node.status import StatusReporter
from robotmem_ros.ros_session import ros_session
from robotmem_ros.wire import service_qos, SERVICES

NODE_NAME = 'robotmem'
EMBED_PERIOD_S = 1.0
STATUS_POLL_S = 0.25
EXECUTOR_THREADS = 4
# Services that only read: they run in a Reentrant group, beside the one writer at a time.
READ_SERVICES = frozenset({'recall'})


def perception_qos(config: MemoryConfig) -> QoSProfile:
    """Subscription QoS from the perception_qos parameter (never TRANSIENT_LOCAL)."""
    if config.perception_qos == 'sensor_data':
        return qos_profile_sensor_data
    reliability = (ReliabilityPolicy.RELIABLE if config.perception_qos == 'reliable'
                   else ReliabilityPolicy.BEST_EFFORT)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=config.perception_depth,
                      reliability=reliability, durability=DurabilityPolicy.VOLATILE)


class MemoryNode(Node):
    """Hosts the memory engine; raises RobotMemError when the store cannot be opened."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._log_handler = log_bridge.install(self.get_logger())
        self._engine: MemoryEngine | None = None
        self._owner: StoreOwner | None = None
        self._ingest: PerceptionIngest | None = None
        self._receiver: PerceptionReceiver | None = None
        self._fleet: Any = None
        try:
            self._start()
        except BaseException:
            self._shutdown_engine()
            raise

    def _start(self) -> None:
        config = self._config = declare_config_parameters(self)
        self._ingest = PerceptionIngest(
            self._save_batch, batch_size=config.perception_batch_size,
            flush_interval=config.perception_flush_interval,
            max_buffer=config.perception_max_buffer, on_flush=self._on_store_change)
        self._status = StatusReporter(
            self, self._ingest.counters, str(config.resolved_db_path()),
            lambda: self._config.perception_max_buffer, config.embed_device)
        self._answered = AnsweredRequests(config.resend_window_s, config.resend_window_max)
        self._owner = StoreOwner(config.resolved_db_path(), self.get_fully_qualified_name())
        self._engine = MemoryEngine.open(config, on_lock_wait=self._on_lock_wait)
        self.add_on_set_parameters_callback(
            make_set_callback(lambda: self._config, self._apply_config))

        writes = MutuallyExclusiveCallbackGroup()
        reads = ReentrantCallbackGroup()
        for name, srv_type in SERVICES.items():  # each served by the method _<name>
            group = reads if name in READ_SERVICES else writes
            self.create_service(srv_type, f'~/{name}',
                                self._guarded(f'~/{name}', getattr(self, f'_{name}'),
                                              group is writes),
                                qos_profile=service_qos(config.service_queue_depth),
                                callback_group=group)
        self._ingest.start()
        self._receiver = PerceptionReceiver(self, perception_qos(config), self._on_perception)
        # Housekeeping runs on wall time: under use_sim_time a paused or absent /clock must not
        # stop embedding, status or diagnostics.
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(EMBED_PERIOD_S, self._embed_pending,
                          callback_group=MutuallyExclusiveCallbackGroup(), clock=steady)
        timers = MutuallyExclusiveCallbackGroup()
        self.create_timer(STATUS_POLL_S, self._status.publish, callback_group=timers,
                          clock=steady)
        self._heartbeat = self.create_timer(config.status_period, self._status.heartbeat,
                                            callback_group=timers, clock=steady)
        self._start_fleet(config)
        self._status.attach_store(self._engine.status)  # ready=true: services are up
        self._status.heartbeat()
        self.get_logger().info(
            f'ready: store {config.resolved_db_path()}, embed {config.embed_backend}, '
            f'perception QoS {config.perception_qos}')

    def _start_fleet(self, config: MemoryConfig) -> None:
        """
        Sync with the fleet hub in a thread of its own when fleet_url is set.

        A missing extra or bad fleet settings leave the robot's own memory fully working: the
        error is logged and shown in NodeStatus and /diagnostics.
        """
        if not config.fleet_url:
            return
        try:
            from robotmem_ros.fleet.settings import FleetSettings
            from robotmem_ros.fleet.sync import FleetSync
            self._fleet = FleetSync(self._engine, FleetSettings.from_config(config))
        except ImportError as exc:
            error = (f'fleet extra not installed ({exc.name}): '
                     'pip install -r requirements/fleet.txt')
        except RobotMemError as exc:
            error = f'fleet disabled: {exc}'
        else:
            self._fleet.start()
            self._status.attach_fleet(self._fleet.status)
            return
        self.get_logger().error(error)
        failed = FleetStatus(robot_id=config.fleet_robot_id, error=error)
        self._status.attach_fleet(lambda: failed)

    def _on_lock_wait(self, holder: str) -> None:
        """Report, once per holder, that the store's write lock keeps this node from starting."""
        message = f'waiting for the store lock held by {holder}'
        if message != self._status.message:
            self.get_logger().warning(
                f'{message} (giving up after store_lock_timeout = '
                f'{self.get_parameter("store_lock_timeout").value:g} s)')
        self._status.set_message(message)

    # --- parameters ---------------------------------------------------------------------------
    def _apply_config(self, config: MemoryConfig) -> None:
        """Install new settings: the engine first (it may refuse them), then the node's own."""
        self._engine.set_config(config)
        self._config = config
        self._ingest.configure(batch_size=config.perception_batch_size,
                               flush_interval=config.perception_flush_interval,
                               max_buffer=config.perception_max_buffer)
        self._heartbeat.timer_period_ns = int(config.status_period * 1e9)
        self._answered.configure(config.resend_window_s, config.resend_window_max)
        self._status.mark_dirty()

    # --- service plumbing ---------------------------------------------------------------------
    def _guarded(self, name: str, handler: Callable[[Any, Any], Any],
                 writes: bool) -> Callable[[Any, Any], Any]:
        """
        Wrap a handler so every failure becomes an error response, never a dead node.

        A write request that carries a ``request_id`` already answered gets that answer again
        and is not applied a second time (see answered_requests).
        """

        def callback(request: Any, response: Any) -> Any:
            request_id = getattr(request, 'request_id', '')
            answered = self._answered.get(name, request_id)
            if answered is not None:
                return answered
            try:
                answer = handler(request, response)
                self._answered.remember(name, request_id, answer)
                return answer
            except RobotMemError as exc:
                error = str(exc) or type(exc).__name__
                self.get_logger().warning(f'{name}: {error}')
            except Exception as exc:
                self.get_logger().error(f'{name} failed:\n{traceback.format_exc()}')
                error = f'internal error: {type(exc).__name__}: {exc}'
            finally:
                if writes:
                    self._on_store_change()
                    if self._fleet is not None:  # push a service write now, not next period
                        self._fleet.wake()
            failed = type(response)()  # fresh: no half-filled fields, empty lists
            failed.error = error
            return failed

        return callback

    def _on_store_change(self) -> None:
        self._status.mark_dirty()

    # --- services -----------------------------------------------------------------------------
    def _learn(self, req: Learn.Request, res: Learn.Response) -> Learn.Response:
        result = self._engine.learn(req.insight, conv.json_field(req.context, 'context',
                                                                 self._config),
                                    req.collection, req.session_id)
        return conv.fill_learn(res, result)

    def _recall(self, req: Recall.Request, res: Recall.Response) -> Recall.Response:
        result = self._engine.recall(req.query, **conv.recall_limits(req),
                                     **conv.recall_json(req, self._config),
                                     session_id=req.session_id, collection=req.collection)
        return conv.fill_recall(res, result)

    def _start_session(self, req: StartSession.Request,
                       res: StartSession.Response) -> StartSession.Response:
        context = conv.json_field(req.context, 'context', self._config)
        info = self._engine.start_session(context, req.collection)
        res.success = True
        res.session_id = info.session_id
        res.collection = info.collection
        res.active_memories_count = info.active_memories_count
        return res

    def _end_session(self, req: EndSession.Request,
                     res: EndSession.Response) -> EndSession.Response:
        score = req.outcome_score if req.has_outcome_score else None
        return conv.fill_end_session(res, self._engine.end_session(req.session_id, score))

    def _save_perception(self, req: SavePerception.Request,
                         res: SavePerception.Response) -> SavePerception.Response:
        perception = conv.perception_from_request(req, self._config)
        res.memory_id = self._engine.save_perception(perception)
        res.success = True
        return res

    def _forget(self, req: Forget.Request, res: Forget.Response) -> Forget.Response:
        self._engine.forget(req.memory_id, req.reason)
        res.success = True
        return res

    def _update(self, req: Update.Request, res: Update.Response) -> Update.Response:
        result = self._engine.update(req.memory_id, req.new_content,
                                     conv.json_field(req.context, 'context', self._config))
        res.success = True
        res.old_content = result.old_content
        res.new_content_out = result.new_content
        return res

    # --- perception stream ----------------------------------------------------------------------
    def _on_perception(self, msg: PerceptionData) -> None:
        publisher = (msg.header.frame_id, msg.session_id)
        try:
            item = conv.perception_from_msg(msg, self._config)
        except ValidationError as exc:  # counted like a row the engine rejects
            self._ingest.reject(str(exc), publisher, msg.seq)
            return
        self._ingest.offer(item, publisher, msg.seq)

    def _save_batch(self, batch: Any) -> list[int]:
        return self._engine.save_perceptions(batch)

    def _embed_pending(self) -> None:
        try:
            if self._engine.embed_pending():
                self._status.mark_dirty()
        except Exception as exc:  # embedding is best effort; recall falls back to BM25
            self.get_logger().warning(f'background embedding failed: {exc}',
                                      throttle_duration_sec=60.0)

    # --- shutdown -------------------------------------------------------------------------------
    def _shutdown_engine(self) -> None:
        """Stop the parts in dependency order (buffer flushed before the store closes)."""
        self.stop_receiving()
        for attribute, finish in (('_ingest', 'stop'), ('_fleet', 'stop'), ('_engine', 'close'),
                                  ('_owner', 'release')):
            part = getattr(self, attribute)
            if part is not None:  # the ingest's last flush still writes through the engine
                getattr(part, finish)()
                setattr(self, attribute, None)
        log_bridge.uninstall(self._log_handler)

    def stop_receiving(self) -> None:
        """Stop the perception thread; must happen before any executor shuts down."""
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    def destroy_node(self) -> None:
        """Flush buffered perceptions and close the store, then tear down ROS entities."""
        self._shutdown_engine()
        super().destroy_node()


def _run(args: list[str] | None) -> int:
    profile = middleware.use_node_profile(os.environ)  # before the first DDS participant
    with ros_session(args):
        # The executor exists before the node: a signal that lands while the store is opening
        # must find everything it needs to shut down.
        executor = MultiThreadedExecutor(num_threads=EXECUTOR_THREADS)
        node = None
        try:
            node = MemoryNode()
            node.get_logger().info(profile)  # once ready: a failed start prints one [FATAL] only
            executor.add_node(node)
            # spin_once in a loop instead of spin(): spin() occasionally misses a signal.
            while rclpy.ok():
                executor.spin_once(timeout_sec=0.5)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        except RobotMemError as exc:
            if rclpy.ok():
                rclpy.logging.get_logger(NODE_NAME).fatal(f'cannot start: {exc}')
                return 1
        except Exception:
            if rclpy.ok():  # a real bug, not a signal racing the start-up
                raise
        finally:
            # The perception thread waits on DDS; an executor shutting down beside that wait
            # crashed the process (SIGSEGV), so it stops first.
            if node is not None:
                node.stop_receiving()
            executor.shutdown()
            if node is not None:
                node.destroy_node()
    return 0


def main(args: list[str] | None = None) -> int:
    """Entry point of ``ros2 run robotmem_ros robotmem_node``; exit 0 on SIGINT/SIGTERM."""
    try:
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C before rclpy installed its handlers
        return 0


if __name__ == '__main__':
    sys.exit(main())
