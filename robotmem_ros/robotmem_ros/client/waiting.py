"""
How a blocking client call waits for an answer without starving the executor that delivers it.

A response is only taken off the wire by an executor spinning the calling node. Three cases:

* a MultiThreadedExecutor (or any executor in another thread) spins the node: wait on an
  event; the client's Reentrant callback group lets another executor thread take the answer
  while the caller's callback blocks;
* nobody spins the node (a plain script): spin it here, for the duration of the wait only;
* the caller *is* the single thread of the node's executor (a callback of a
  SingleThreadedExecutor): waiting could never end, so refuse at once with a clear error.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable

from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node

POLL_S = 0.1


def deadlock_reason(node: Node) -> str:
    """
    Why blocking in this thread would deadlock the node's executor ('' when it would not).

    Single-threaded executors run callbacks inside their own spin methods, so a frame of the
    executor on this thread's stack means the caller is one of its callbacks.
    """
    executor = node.executor
    if executor is None or isinstance(executor, MultiThreadedExecutor):
        return ''
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_locals.get('self') is executor:
            return (f'blocking call from a callback of a {type(executor).__name__}, which '
                    'would never deliver the answer: spin the node with a '
                    'MultiThreadedExecutor (or in another thread) or use the *_async method')
        frame = frame.f_back
    return ''


class Waiter:
    """Blocks the calling thread until a condition holds or a deadline passes."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._spin_lock = threading.Lock()

    def until(self, condition: Callable[[], bool], deadline: float,
              wake: threading.Event) -> bool:
        """
        Return True once ``condition()`` holds, False at ``deadline`` (monotonic seconds).

        ``wake`` is set by whatever may change the condition (a response, a status message);
        it is cleared before each check so no wake-up is lost.
        """
        private: SingleThreadedExecutor | None = None
        try:
            while True:
                wake.clear()
                if condition():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                step = min(remaining, POLL_S)
                if private is None and self._node.executor is None:
                    private = self._adopt()
                if private is not None:
                    private.spin_once(timeout_sec=step)
                else:
                    wake.wait(step)
        finally:
            if private is not None:
                self._release(private)

    def _adopt(self) -> SingleThreadedExecutor | None:
        """Spin the unowned node in a private executor (None if another thread already does)."""
        if not self._spin_lock.acquire(blocking=False):
            return None
        executor = SingleThreadedExecutor(context=self._node.context)
        executor.add_node(self._node)
        return executor

    def _release(self, executor: SingleThreadedExecutor) -> None:
        """Hand the node back unowned, so a later call (or the user) may spin it."""
        self._node.executor = None
        executor.shutdown()
        self._spin_lock.release()
