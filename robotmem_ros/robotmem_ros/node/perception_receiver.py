"""
The perception subscription on its own internal node and single-threaded executor.

Measured with rclpy 9.1.2 (the Kilted wheels): a subscription spun by a MultiThreadedExecutor
took 61 (spin) to 1,062 (spin_once loop) of 4,000 messages published at 500/s — the rest was
lost in DDS — while a SingleThreadedExecutor took all 4,000. The services stay on the main
node's MultiThreadedExecutor (Recall must run beside writes); the stream gets a thread of its
own that does nothing but hand messages to the ingest buffer.

The internal node is hidden (a leading underscore, as ROS names internal nodes), so
`ros2 node list` and `ros2 param list` skip it, and it still serves parameters, so the tools
that do list hidden nodes (``--include-hidden-nodes``, ``ros2 param dump``) get an answer
instead of waiting on it.

That thread runs in a context of its own: waiting on the node's shared context while SIGINT
tore it down crashed the process (SIGSEGV, about one stop in five). rclpy's signal handler still
shuts this context down too, which the thread sees as ExternalShutdownException and ends on —
or, when the shutdown lands between two waits, as the RCLError of a wait set built on a context
that is no longer valid (rclpy checks the context only after a wait); seen as a traceback on
Ctrl-C of `make run`. Both end the thread quietly; an RCLError with the context still valid is
raised.
"""

from __future__ import annotations

import threading
from typing import Callable

import rclpy
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.signals import SignalHandlerOptions
from robotmem_msgs.msg import PerceptionData

SPIN_TIMEOUT_S = 0.2
JOIN_TIMEOUT_S = 5.0


class PerceptionReceiver:
    """Subscribe to the parent's ``perception`` topic from a dedicated thread."""

    def __init__(self, parent: Node, qos: QoSProfile,
                 on_message: Callable[[PerceptionData], None]) -> None:
        # The topic is resolved by the parent, so remaps given for the memory node apply; the
        # internal node ignores global arguments so `-r __node:=...` cannot rename it too.
        topic = parent.resolve_topic_name('perception')
        self._context = Context()
        rclpy.init(context=self._context, signal_handler_options=SignalHandlerOptions.NO)
        self._node = Node(f'_{parent.get_name()}_perception',
                          namespace=parent.get_namespace(), context=self._context,
                          use_global_arguments=False)
        self._node.create_subscription(PerceptionData, topic, on_message, qos)
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self._node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name='robotmem-perception',
                                        daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            while not self._stop.is_set():
                self._executor.spin_once(timeout_sec=SPIN_TIMEOUT_S)
        except ExternalShutdownException:
            pass  # rclpy's signal handler shuts every context down; close() still runs
        except _rclpy.RCLError:
            if self._context.ok():
                raise

    def close(self) -> None:
        """Stop receiving (idempotent); buffered messages are flushed by the ingest."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_S)
        self._executor.shutdown()
        self._node.destroy_node()
        self._context.try_shutdown()
