"""
Service calls that survive a lost answer: re-send the same request until one copy is answered.

DDS matches a service's request and response topics independently. A client can see the
server (its request writer is matched) while the server's response writer has not yet matched
the client's response reader; the server then executes the request, cannot deliver the answer
and logs "failed to send response". No rclpy API lets the client observe that second match,
so waiting before the first call cannot close the gap. Re-sending can, provided a second copy
is harmless: every request type with a ``request_id`` field gets a fresh id here, and the
memory node answers a copy with the first copy's answer instead of applying it again.
"""

from __future__ import annotations

import threading
import time
from typing import Any
import uuid

from rclpy.client import Client
from rclpy.task import Future
from robotmem_ros.client.waiting import Waiter

MAX_ATTEMPT_S = 4.0


def stamp_request_id(request: Any) -> Any:
    """Give ``request`` a fresh ``request_id`` if its type has one and it is empty."""
    if hasattr(request, 'request_id') and not request.request_id:
        request.request_id = uuid.uuid4().hex
    return request


def send_until_answered(client: Client, request: Any, waiter: Waiter, deadline: float,
                        attempt_s: float) -> tuple[Any | None, int]:
    """
    Return ``(response, copies sent)``; the response is None when ``deadline`` passed first.

    Each copy waits ``attempt_s`` (doubling, at most MAX_ATTEMPT_S) before the next goes out;
    an answer to any copy ends the call, so a slow answer is never thrown away. A server that
    vanished (node restart) is waited for before the next copy. The caller owns the request
    id: copies are identical.
    """
    wake = threading.Event()
    sent: list[Future] = []
    try:
        while True:
            if not waiter.until(client.service_is_ready, deadline, wake):
                return None, len(sent)
            future = client.call_async(request)
            future.add_done_callback(lambda _: wake.set())
            sent.append(future)
            waiter.until(lambda: any(f.done() for f in sent),
                         min(deadline, time.monotonic() + attempt_s), wake)
            answered = next((f for f in sent if f.done()), None)
            if answered is not None:
                return answered.result(), len(sent)
            if time.monotonic() >= deadline:
                return None, len(sent)
            attempt_s = min(2.0 * attempt_s, MAX_ATTEMPT_S)
    finally:
        for future in sent:
            if not future.done():
                client.remove_pending_request(future)
                future.cancel()
