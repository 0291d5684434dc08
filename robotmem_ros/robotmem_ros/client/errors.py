"""Errors a MemoryClient raises; all are MemoryClientError so one except clause covers them."""

from __future__ import annotations


class MemoryClientError(RuntimeError):
    """
    The memory node refused or could not answer a request.

    ``server_error`` holds the node's own error text (``success=false, error=...``) when the
    node answered; it is empty when the request never got an answer.
    """

    def __init__(self, service: str, message: str, server_error: str = '') -> None:
        super().__init__(f'{service}: {message}')
        self.service = service
        self.server_error = server_error


class ServiceUnavailableError(MemoryClientError):
    """No memory node serves the service (not started, wrong namespace, or it went away)."""


class ServiceTimeoutError(MemoryClientError, TimeoutError):
    """The node did not answer in time."""


class ExecutorDeadlockError(MemoryClientError):
    """A blocking call from a callback of a single-threaded executor would never return."""
