"""The test harness itself: its client node keeps delivering after an executor error."""

from __future__ import annotations

import threading
from typing import Any

from conftest import RosClient
import pytest


@pytest.fixture
def own_client():
    client = RosClient()
    yield client
    client.close()


def test_spin_thread_survives_an_invalid_handle_race(own_client: RosClient) -> None:
    """
    The executor raises InvalidHandle when a test thread destroys an entity mid-wait.

    The error is injected here (the real race needs minutes of churn to show); the spin thread
    must log it, keep spinning, and still deliver a message afterwards.
    """
    from rclpy._rclpy_pybind11 import InvalidHandle
    from std_msgs.msg import String

    real_spin_once = own_client.executor.spin_once
    raised = threading.Event()

    def spin_once_failing_once(*args: Any, **kwargs: Any) -> None:
        if not raised.is_set():
            raised.set()
            raise InvalidHandle('cannot use Destroyable because destruction was requested')
        real_spin_once(*args, **kwargs)

    own_client.executor.spin_once = spin_once_failing_once
    assert raised.wait(10), 'the spin loop never called spin_once'
    publisher = own_client.node.create_publisher(String, 'harness_check', 10)
    timer = own_client.node.create_timer(0.1, lambda: publisher.publish(String(data='alive')))
    try:
        msg = own_client.wait_for(String, 'harness_check', lambda m: m.data == 'alive',
                                  timeout=30)
    finally:
        own_client.node.destroy_timer(timer)
    assert msg.data == 'alive'
    assert own_client.spin_errors == 1
