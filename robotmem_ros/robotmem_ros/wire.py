"""
What the node and its clients agree on beyond the .msg files: services, status QoS, stamps, JSON.

Both sides import this module, so it sits at the bottom of the package and imports only rclpy
and the interfaces: a manipulation node that uses the client never loads the engine.
"""

from __future__ import annotations

import json
import math
from typing import Any

from builtin_interfaces.msg import Time
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from robotmem_msgs.srv import (EndSession, Forget, Learn, Recall, SavePerception, StartSession,
                               Update)

# The node's services, under its namespace: the node serves exactly these, the client calls
# exactly these.
SERVICES: dict[str, Any] = {
    'learn': Learn, 'recall': Recall, 'start_session': StartSession,
    'end_session': EndSession, 'save_perception': SavePerception, 'forget': Forget,
    'update': Update,
}

# Requests a client can have in flight on one service (its request writer and response reader
# keep this many; with ROS's default of 10, a client with 300 Recalls in flight got 288 answers).
CLIENT_QUEUE_DEPTH = 100


def service_qos(depth: int) -> QoSProfile:
    """
    Return ROS's service QoS (reliable, volatile, keep last) with a queue ``depth`` deep.

    The depth is how many requests a server holds while its callbacks are busy, and how many
    answers it keeps until each client has acknowledged its own. Past it, DDS drops the oldest
    without telling anyone: with ROS's default of 10, a node with 40 Learns pending answered 11.
    """
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


# ~/status is latched: a late subscriber gets the last value at once.
LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                     reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)

_NS = 1_000_000_000
_SEC_MAX = 2**31 - 1  # Time.sec is int32


def to_time(epoch: float | None) -> Time:
    """
    Epoch seconds -> Time; None (never happened) -> zero time.

    Never raises: a stored time beyond what Time holds (only a store written before import
    validated timestamps can have one) becomes the latest Time instead of failing the call.
    """
    if epoch is None or not math.isfinite(epoch) or epoch <= 0:
        return Time()
    if epoch >= _SEC_MAX:
        return Time(sec=_SEC_MAX, nanosec=0)
    ns = round(epoch * _NS)
    return Time(sec=ns // _NS, nanosec=ns % _NS)


def from_time(stamp: Time) -> float | None:
    """Time -> epoch seconds; a zero stamp (publisher left it unset) -> None, i.e. now."""
    if stamp.sec == 0 and stamp.nanosec == 0:
        return None
    return stamp.sec + stamp.nanosec / _NS


def to_json(value: Any) -> str:
    """
    Value for a *_json / context field: '' for nothing, JSON text passed on, else serialized.

    Text is passed on unparsed because the node validates it once, with the error a caller
    can act on.
    """
    if value is None or isinstance(value, str):
        return value or ''
    if not value:
        return ''
    return json.dumps(value, ensure_ascii=False, default=str)


def from_json(text: str) -> Any:
    """Parse a *_json field; empty means nothing, not an error."""
    return json.loads(text) if text else {}
