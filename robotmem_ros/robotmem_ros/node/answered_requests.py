"""
Answers of write services, remembered by request id, so that a re-sent request is applied once.

A DDS service answer can be lost even though the request ran and committed: the server's
response writer may not yet be matched with a brand-new client's response reader (discovery
of the two service topics is independent; the middleware gives up after a short wait and logs
"failed to send response"). The only cure on the client side is to send again, and that is
only safe when the second copy does not learn, forget or consolidate a second time. Each
write request therefore carries a caller-chosen ``request_id``; the first successful answer
is kept here for ``resend_window_s`` and handed back to every copy that follows.

Failed answers are not kept: a failed write changed nothing, so running it again is safe and
may succeed. Requests without an id (``ros2 service call`` by hand) are never remembered.
The memory lives in the node process; docs/reliability.md says what that means across a
restart.
"""

from __future__ import annotations

from collections import OrderedDict
import threading
import time
from typing import Any, Callable


class AnsweredRequests:
    """Bounded, time-limited map from (service, request id) to the answer first sent."""

    def __init__(self, window_s: float, max_answers: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._max = max_answers
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: OrderedDict[tuple[str, str], tuple[float, Any]] = OrderedDict()

    def configure(self, window_s: float, max_answers: int) -> None:
        """Apply new bounds (parameters changed at run time)."""
        with self._lock:
            self._window_s = window_s
            self._max = max_answers
            self._expire()

    def __len__(self) -> int:
        """Answers currently remembered."""
        with self._lock:
            self._expire()
            return len(self._answers)

    def get(self, service: str, request_id: str) -> Any | None:
        """Return the answer remembered for this request, or None."""
        if not request_id:
            return None
        with self._lock:
            self._expire()
            entry = self._answers.get((service, request_id))
            return None if entry is None else entry[1]

    def remember(self, service: str, request_id: str, answer: Any) -> None:
        """Keep ``answer`` for later copies of this request (no-op without an id)."""
        if not request_id or self._max == 0 or self._window_s <= 0:
            return
        with self._lock:
            self._answers[(service, request_id)] = (self._clock(), answer)
            self._answers.move_to_end((service, request_id))
            self._expire()

    def _expire(self) -> None:
        """Drop answers older than the window and the oldest beyond the size bound."""
        oldest_kept = self._clock() - self._window_s
        while self._answers:
            stored_at, _ = next(iter(self._answers.values()))
            if stored_at >= oldest_kept and len(self._answers) <= self._max:
                break
            self._answers.popitem(last=False)
