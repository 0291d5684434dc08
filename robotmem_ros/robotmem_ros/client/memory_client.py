"""
MemoryClient: the robotmem services as typed Python calls for manipulation nodes.

Each service has a blocking method (returns the engine's result type, raises
MemoryClientError with the node's error text) and an ``*_async`` twin returning an rclpy
Future of the same result. Blocking methods are safe inside callbacks of a node spun by a
MultiThreadedExecutor (or by an executor in another thread): the client's entities live in
their own Reentrant callback group, and the caller waits on an event rather than spinning.
From a callback of a single-threaded executor they raise ExecutorDeadlockError instead of
hanging; a node nobody spins (a plain script) is spun for the duration of each call.

A blocking call never hangs on a lost answer: it re-sends the request when no answer came
within ``attempt_timeout`` (doubling) until its own timeout (see resend). Every write request
carries a fresh ``request_id``, and the node answers a re-sent copy with the first copy's
answer, so a re-send never stores, forgets or consolidates twice.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.task import Future
from robotmem_msgs.msg import NodeStatus
from robotmem_msgs.srv import (EndSession, Forget, Learn, Recall, SavePerception, StartSession,
                               Update)
from robotmem_ros.client import results
from robotmem_ros.client.errors import (ExecutorDeadlockError, MemoryClientError,
                                        ServiceTimeoutError, ServiceUnavailableError)
from robotmem_ros.client.resend import send_until_answered, stamp_request_id
from robotmem_ros.client.waiting import deadlock_reason, Waiter
from robotmem_ros.types import (EndSessionResult, LearnResult, RecallResult, SessionInfo,
                                UpdateResult)
from robotmem_ros.wire import CLIENT_QUEUE_DEPTH, LATCHED, service_qos, SERVICES, to_json

DEFAULT_NAMESPACE = '/robotmem'
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_ATTEMPT_TIMEOUT_S = 1.0
JsonArg = str | dict | list | None


# How each service's response becomes the client's result (wire.SERVICES names them).
_PARSERS: dict[str, Callable[[Any], Any]] = {
    'learn': results.learn_result,
    'recall': results.recall_result,
    'start_session': results.session_info,
    'end_session': results.end_session_result,
    'save_perception': lambda res: res.memory_id,
    'forget': lambda res: None,
    'update': results.update_result,
}


class MemoryClient:
    """Typed client of one robotmem node (services under ``namespace``)."""

    def __init__(self, node: Node, namespace: str = DEFAULT_NAMESPACE,
                 timeout: float = DEFAULT_TIMEOUT_S,
                 attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT_S) -> None:
        self.node = node
        self.namespace = '/' + namespace.strip('/')
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout
        self._group = ReentrantCallbackGroup()
        self._clients = {
            name: node.create_client(srv_type, f'{self.namespace}/{name}',
                                     qos_profile=service_qos(CLIENT_QUEUE_DEPTH),
                                     callback_group=self._group)
            for name, srv_type in SERVICES.items()}
        self._status: NodeStatus | None = None
        self._status_event = threading.Event()
        self._status_sub = node.create_subscription(
            NodeStatus, f'{self.namespace}/status', self._on_status, LATCHED,
            callback_group=self._group)
        self._waiter = Waiter(node)

    @property
    def perception_topic(self) -> str:
        """
        Return the node's ``perception`` topic: relative, so in the namespace around the node.

        Services are private (``/robotmem/learn`` for node ``robotmem`` in ``/``) but the
        subscription is ``perception`` in the node's namespace (``/perception``).
        """
        return f'{self.namespace.rsplit("/", 1)[0]}/perception'

    # --- readiness and status -----------------------------------------------------------------
    @property
    def status(self) -> NodeStatus | None:
        """Latest NodeStatus of the node (None until one arrived)."""
        return self._status

    def _on_status(self, msg: NodeStatus) -> None:
        self._status = msg
        self._status_event.set()

    def wait_status(self, predicate: Callable[[NodeStatus], bool],
                    timeout: float | None = None) -> NodeStatus | None:
        """Block until a NodeStatus satisfies ``predicate``; return it, or None on timeout."""
        self._refuse_deadlock('status')
        satisfied = self._waiter.until(
            lambda: self._status is not None and predicate(self._status),
            self._deadline(timeout), self._status_event)
        return self._status if satisfied else None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the node reports ready=true and every service has a server."""
        self._refuse_deadlock('status')
        return self._waiter.until(
            lambda: (self._status is not None and self._status.ready
                     and all(c.service_is_ready() for c in self._clients.values())),
            self._deadline(timeout), self._status_event)

    def close(self) -> None:
        """Destroy the client's ROS entities (the node itself stays)."""
        for client in self._clients.values():
            self.node.destroy_client(client)
        self.node.destroy_subscription(self._status_sub)

    # --- blocking calls -----------------------------------------------------------------------
    def learn(self, insight: str, context: JsonArg = '', collection: str = '',
              session_id: str = '', timeout: float | None = None) -> LearnResult:
        """Store a fact; ``status`` says whether it was created or matched an existing one."""
        return self._call('learn', learn_request(insight, context, collection, session_id),
                          timeout)

    def recall(self, query: str, n: int | None = None,
               min_confidence: float | None = None,
               session_id: str = '', context_filter: JsonArg = '', spatial_sort: JsonArg = '',
               collection: str = '', timeout: float | None = None) -> RecallResult:
        """Find memories; ``query='*'`` lists every match of the filters in time order."""
        return self._call('recall', recall_request(query, n, min_confidence, session_id,
                                                   context_filter, spatial_sort, collection),
                          timeout)

    def start_session(self, context: JsonArg = '', collection: str = '',
                      timeout: float | None = None) -> SessionInfo:
        """Open an episode; pass its session_id to learn/perceptions/end_session."""
        return self._call('start_session', StartSession.Request(
            context=to_json(context), collection=collection), timeout)

    def end_session(self, session_id: str, outcome_score: float | None = None,
                    timeout: float | None = None) -> EndSessionResult:
        """Close an episode: consolidation, decay, related memories."""
        return self._call('end_session', end_session_request(session_id, outcome_score),
                          timeout)

    def save_perception(self, description: str, perception_type: str = '',
                        data: JsonArg = '', metadata: JsonArg = '', session_id: str = '',
                        collection: str = '', timeout: float | None = None) -> int:
        """Store one perception now (the topic is the bulk path); returns its memory id."""
        return self._call('save_perception', perception_request(
            description, perception_type, data, metadata, session_id, collection), timeout)

    def forget(self, memory_id: int, reason: str = '', timeout: float | None = None) -> None:
        """Retire a memory (kept in history, no longer recalled)."""
        self._call('forget', Forget.Request(memory_id=memory_id, reason=reason), timeout)

    def update(self, memory_id: int, new_content: str, context: JsonArg = '',
               timeout: float | None = None) -> UpdateResult:
        """Replace a memory's text and merge ``context`` into its context."""
        return self._call('update', Update.Request(
            memory_id=memory_id, new_content=new_content, context=to_json(context)), timeout)

    # --- futures ------------------------------------------------------------------------------
    # Never blocking, so callable from any callback. The future fails at once with
    # ServiceUnavailableError when no server is known (call wait_ready first); it has no
    # timeout of its own: cancel it to give up.
    def learn_async(self, insight: str, context: JsonArg = '', collection: str = '',
                    session_id: str = '') -> Future:
        """Future of :meth:`learn`."""
        return self._send('learn', learn_request(insight, context, collection, session_id))

    def recall_async(self, query: str, n: int | None = None,
                     min_confidence: float | None = None,
                     session_id: str = '', context_filter: JsonArg = '',
                     spatial_sort: JsonArg = '', collection: str = '') -> Future:
        """Future of :meth:`recall`."""
        return self._send('recall', recall_request(query, n, min_confidence, session_id,
                                                   context_filter, spatial_sort, collection))

    def start_session_async(self, context: JsonArg = '', collection: str = '') -> Future:
        """Future of :meth:`start_session`."""
        return self._send('start_session', StartSession.Request(
            context=to_json(context), collection=collection))

    def end_session_async(self, session_id: str, outcome_score: float | None = None) -> Future:
        """Future of :meth:`end_session`."""
        return self._send('end_session', end_session_request(session_id, outcome_score))

    def save_perception_async(self, description: str, perception_type: str = '',
                              data: JsonArg = '', metadata: JsonArg = '', session_id: str = '',
                              collection: str = '') -> Future:
        """Future of :meth:`save_perception`."""
        return self._send('save_perception', perception_request(
            description, perception_type, data, metadata, session_id, collection))

    def forget_async(self, memory_id: int, reason: str = '') -> Future:
        """Future of :meth:`forget`."""
        return self._send('forget', Forget.Request(memory_id=memory_id, reason=reason))

    def update_async(self, memory_id: int, new_content: str, context: JsonArg = '') -> Future:
        """Future of :meth:`update`."""
        return self._send('update', Update.Request(
            memory_id=memory_id, new_content=new_content, context=to_json(context)))

    # --- plumbing -----------------------------------------------------------------------------
    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def _refuse_deadlock(self, name: str) -> None:
        reason = deadlock_reason(self.node)
        if reason:
            raise ExecutorDeadlockError(name, reason)

    def _send(self, name: str, request: Any) -> Future:
        """Send now; the returned future carries the parsed result or a MemoryClientError."""
        client = self._clients[name]
        out = Future()
        if not client.service_is_ready():
            out.set_exception(ServiceUnavailableError(name, f'no server for {client.srv_name}'))
            return out
        raw = client.call_async(stamp_request_id(request))
        raw.add_done_callback(lambda done: _settle(name, done, out))
        out.add_done_callback(lambda done: done.cancelled() and client.remove_pending_request(raw))
        return out

    def _call(self, name: str, request: Any, timeout: float | None) -> Any:
        """Send (re-sending copies of one request id) and wait; parse or raise the answer."""
        self._refuse_deadlock(name)
        client = self._clients[name]
        response, copies = send_until_answered(
            client, stamp_request_id(request), self._waiter, self._deadline(timeout),
            self.attempt_timeout)
        if response is None:
            raise _no_answer(name, client.srv_name, self.namespace, copies)
        return _parse(name, response)


def _no_answer(name: str, srv_name: str, namespace: str, attempts: int) -> MemoryClientError:
    """Build the error of a call that ran out of time (could anything be sent at all?)."""
    if attempts == 0:
        return ServiceUnavailableError(
            name, f'no server for {srv_name} (is the memory node running in namespace '
            f'{namespace!r}?)')
    return ServiceTimeoutError(name, f'no answer from {srv_name} in time ({attempts} '
                               f'attempt{"s" if attempts > 1 else ""})')


def _settle(name: str, raw: Future, out: Future) -> None:
    """Complete ``out`` from the raw service future: parsed result or MemoryClientError."""
    if out.done() or out.cancelled():
        return
    if raw.cancelled():
        out.cancel()
        return
    try:
        result = _parse(name, raw.result())
    except MemoryClientError as exc:
        out.set_exception(exc)
        return
    except Exception as exc:  # transport error: the caller must see it
        out.set_exception(MemoryClientError(name, f'{type(exc).__name__}: {exc}'))
        return
    out.set_result(result)


def _parse(name: str, response: Any) -> Any:
    """Turn a response into the result type, or raise MemoryClientError with the node's text."""
    if not response.success:
        raise MemoryClientError(name, response.error or 'request failed', response.error)
    try:
        return _PARSERS[name](response)
    except Exception as exc:  # an unparsable answer: the caller must see it
        raise MemoryClientError(name, f'{type(exc).__name__}: {exc}') from exc


def learn_request(insight: str, context: JsonArg, collection: str,
                  session_id: str) -> Learn.Request:
    """Build a Learn request (context as JSON text)."""
    return Learn.Request(insight=insight, context=to_json(context), collection=collection,
                         session_id=session_id)


def recall_request(query: str, n: int | None, min_confidence: float | None, session_id: str,
                   context_filter: JsonArg, spatial_sort: JsonArg,
                   collection: str) -> Recall.Request:
    """Build a Recall request (filters as JSON text; None -> the wire's 0 / -1 defaults)."""
    return Recall.Request(query=query, n=0 if n is None else n,
                          min_confidence=-1.0 if min_confidence is None else float(min_confidence),
                          session_id=session_id, context_filter=to_json(context_filter),
                          spatial_sort=to_json(spatial_sort), collection=collection)


def end_session_request(session_id: str, outcome_score: float | None) -> EndSession.Request:
    """Build an EndSession request (no score -> has_outcome_score false)."""
    return EndSession.Request(session_id=session_id, has_outcome_score=outcome_score is not None,
                              outcome_score=float(outcome_score or 0.0))


def perception_request(description: str, perception_type: str, data: JsonArg,
                       metadata: JsonArg, session_id: str,
                       collection: str) -> SavePerception.Request:
    """Build a SavePerception request (data/metadata as JSON text)."""
    return SavePerception.Request(description=description, perception_type=perception_type,
                                  data=to_json(data), metadata=to_json(metadata),
                                  session_id=session_id, collection=collection)
