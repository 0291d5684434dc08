"""
Lost answers: the client re-sends, and a re-sent write is applied once.

A DDS service answer can be lost after the request ran (the server's response writer not yet
matched with a new client's reader). The client cannot tell a lost answer from a slow one, so
it sends the same request again; these tests check both halves of that contract: copies with
one ``request_id`` get the first copy's answer from the real node and change the store once,
and MemoryClient recovers from an answer that a server really dropped.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any, Iterator

from conftest import CALL_TIMEOUT_S, module_node, NodeProcess, wait_until
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from robotmem_msgs.srv import (EndSession, Forget, Learn, Recall, SavePerception, StartSession,
                               Update)
from robotmem_ros.client import MemoryClient, ServiceTimeoutError
from robotmem_ros.node.answered_requests import AnsweredRequests
from robotmem_ros.wire import CLIENT_QUEUE_DEPTH, service_qos


@pytest.fixture(scope='module')
def node(ros, tmp_path_factory) -> Iterator[NodeProcess]:
    """One BM25-only node for the module."""
    yield from module_node(ros, tmp_path_factory, 'resend')


def count(node: NodeProcess, sql: str, *args: Any) -> int:
    """Run a COUNT query on the node's store (WAL: reads beside the running node)."""
    with sqlite3.connect(f'file:{node.db_path}?mode=ro', uri=True) as conn:
        return conn.execute(sql, args).fetchone()[0]


def twice(node: NodeProcess, srv_type: Any, service: str, **fields: Any) -> tuple[Any, Any]:
    """Send one request and then an identical copy (same request_id); return both answers."""
    first = node.call(srv_type, service, **fields)
    second = node.call(srv_type, service, **fields)
    return first, second


def test_resent_learn_returns_the_first_answer_and_stores_once(node):
    first, second = twice(node, Learn, 'learn', insight='the torque wrench hangs by the door',
                          collection='resend_learn', request_id='learn-1')
    assert first.success and first.status == 'created'
    assert (second.status, second.memory_id) == ('created', first.memory_id)
    assert count(node, 'SELECT COUNT(*) FROM memories WHERE collection = ?',
                 'resend_learn') == 1
    assert count(node, 'SELECT reinforce_count FROM memories WHERE id = ?',
                 first.memory_id) == 0
    # Without an id the same text is a new request: dedup answers it, as before.
    third = node.call(Learn, 'learn', insight='the torque wrench hangs by the door',
                      collection='resend_learn')
    assert (third.status, third.existing_id) == ('duplicate', first.memory_id)


def test_resent_session_perception_update_forget_end_are_applied_once(node):
    started, again = twice(node, StartSession, 'start_session', collection='resend_writes',
                           request_id='start-1')
    assert started.success and again.session_id == started.session_id
    assert count(node, 'SELECT COUNT(*) FROM sessions WHERE collection = ?',
                 'resend_writes') == 1
    session = started.session_id

    saved, again = twice(node, SavePerception, 'save_perception',
                         description='camera sees a blue crate', session_id=session,
                         request_id='perception-1')
    assert saved.success and again.memory_id == saved.memory_id
    assert count(node, 'SELECT COUNT(*) FROM memories WHERE session_id = ? AND type = ?',
                 session, 'perception') == 1

    fact = node.call(Learn, 'learn', insight='the crate weighs 4 kg', session_id=session)
    updated, again = twice(node, Update, 'update', memory_id=fact.memory_id,
                           new_content='the crate weighs 5 kg', request_id='update-1')
    assert updated.success and again.old_content == 'the crate weighs 4 kg'
    assert count(node, "SELECT COUNT(*) FROM history WHERE memory_id = ? AND event = 'update'",
                 fact.memory_id) == 1

    ended, again = twice(node, EndSession, 'end_session', session_id=session,
                         request_id='end-1')
    assert ended.success and again.summary_json == ended.summary_json
    assert count(node, 'SELECT COUNT(*) FROM session_outcomes WHERE session_id = ?',
                 session) == 1

    forgot, again = twice(node, Forget, 'forget', memory_id=fact.memory_id, reason='test',
                          request_id='forget-1')
    assert forgot.success and again.success
    assert count(node, "SELECT COUNT(*) FROM history WHERE memory_id = ? AND event = 'forget'",
                 fact.memory_id) == 1


def test_copies_in_flight_together_are_applied_once(node, ros):
    """Two copies sent before either is answered (a re-send overtaking a slow answer)."""
    client = ros.node.create_client(Learn, f'{node.prefix}/learn')
    try:
        assert client.wait_for_service(timeout_sec=CALL_TIMEOUT_S)
        request = Learn.Request(insight='copies in flight share one answer',
                                collection='resend_flight', request_id='flight-1')
        done = threading.Event()
        futures = [client.call_async(request) for _ in range(2)]
        for future in futures:
            future.add_done_callback(
                lambda _: all(f.done() for f in futures) and done.set())
        assert done.wait(CALL_TIMEOUT_S), 'no answer to the copies'
        answers = [f.result() for f in futures]
    finally:
        ros.node.destroy_client(client)
    assert [a.status for a in answers] == ['created', 'created']
    assert answers[0].memory_id == answers[1].memory_id
    assert count(node, 'SELECT COUNT(*) FROM memories WHERE collection = ?',
                 'resend_flight') == 1


def test_a_failed_write_is_not_remembered(node):
    """A failure changed nothing, so the same request may run again (and succeed)."""
    bad = node.call(Forget, 'forget', memory_id=987654321, request_id='forget-missing')
    assert not bad.success and bad.error
    again = node.call(Forget, 'forget', memory_id=987654321, request_id='forget-missing')
    assert not again.success and again.error == bad.error


BURST = 100  # requests in flight at once: ten times what ROS's default service queue holds


def burst(ros, node: NodeProcess, srv_type: Any, service: str,
          requests: list[Any]) -> list[Any]:
    """Send every request at once from one client; return the answers that came back."""
    client = ros.node.create_client(srv_type, f'{node.prefix}/{service}',
                                    qos_profile=service_qos(CLIENT_QUEUE_DEPTH))
    try:
        assert client.wait_for_service(timeout_sec=CALL_TIMEOUT_S)
        futures = [client.call_async(request) for request in requests]
        wait_until(lambda: all(f.done() for f in futures))
        return [f.result() for f in futures if f.done()]
    finally:
        ros.node.destroy_client(client)


def test_a_burst_of_writes_is_queued_not_dropped(ros, node):
    """
    Learns pending behind the one writer wait in the node's queue; none is lost.

    With ROS's default service queue (10 deep), DDS dropped the oldest pending requests without
    a trace: of 40 Learns sent at once, the node ran 11 and the rest were never answered.
    """
    answers = burst(ros, node, Learn, 'learn', [
        Learn.Request(insight=f'pallet {i} of the burst is stacked in bay {i}',
                      collection='burst', request_id=f'burst-{i}') for i in range(BURST)])
    assert len(answers) == BURST and all(a.success for a in answers)
    assert count(node, "SELECT COUNT(*) FROM memories WHERE collection = 'burst'") == BURST


def test_a_burst_of_recalls_is_answered(ros, node):
    answers = burst(ros, node, Recall, 'recall', [
        Recall.Request(query=f'pallet in bay {i}', collection='burst') for i in range(BURST)])
    assert len(answers) == BURST and all(a.success for a in answers)


class LossyLearnServer:
    """A Learn server that executes every copy but drops the first answer to each request id."""

    def __init__(self, context: Any, service: str) -> None:
        self.node = rclpy.create_node('lossy_learn_server', context=context)
        self.executed: list[str] = []
        self.dropped: list[str] = []
        self.service = self.node.create_service(Learn, service, self._learn)
        send = self.service.send_response

        def drop_first(response: Any, header: Any) -> None:
            request_id = self.executed[-1]  # one executor thread: callback, then this
            if request_id in self.dropped:
                send(response, header)
            else:
                self.dropped.append(request_id)

        self.service.send_response = drop_first
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def _learn(self, request: Learn.Request, response: Learn.Response) -> Learn.Response:
        self.executed.append(request.request_id)
        response.success = True
        response.memory_id = 7
        response.status = 'created'
        return response

    def close(self) -> None:
        """Stop the spin (it returns once the executor is shut down), then destroy the node."""
        self.executor.shutdown()
        self._thread.join(timeout=CALL_TIMEOUT_S)
        self.node.destroy_node()


@pytest.fixture
def lossy(ros) -> Iterator[LossyLearnServer]:
    """Run the lossy server in the suite's context (one participant per process, as OwnNode)."""
    server = LossyLearnServer(ros.context, '/lossy/robotmem/learn')
    yield server
    server.close()


def test_memory_client_recovers_a_dropped_answer(ros, lossy):
    memory = MemoryClient(ros.node, namespace='/lossy/robotmem', timeout=CALL_TIMEOUT_S,
                          attempt_timeout=0.2)
    try:
        result = memory.learn('the answer to this is dropped once')
    finally:
        memory.close()
    assert result.memory_id == 7
    assert len(lossy.dropped) == 1
    # The copy carried the first copy's request id: the node could answer it from memory.
    assert len(lossy.executed) == 2 and lossy.executed[0] == lossy.executed[1] != ''


def test_memory_client_gives_up_at_its_timeout_with_a_clear_error(ros, lossy):
    memory = MemoryClient(ros.node, namespace='/lossy/robotmem', timeout=CALL_TIMEOUT_S,
                          attempt_timeout=0.2)
    try:
        memory.learn('first a call that gets through (the client sees the server)')
        lossy.service.send_response = lambda response, header: None  # every answer lost
        lossy.executed.clear()
        with pytest.raises(ServiceTimeoutError, match='attempts'):
            memory.learn('nobody will ever answer this', timeout=1.5)
    finally:
        memory.close()
    assert len(lossy.executed) >= 2 and len(set(lossy.executed)) == 1


def test_answered_requests_expire_by_age_and_count():
    now = [0.0]
    answers = AnsweredRequests(window_s=10.0, max_answers=2, clock=lambda: now[0])
    answers.remember('learn', 'a', 'A')
    answers.remember('learn', 'b', 'B')
    answers.remember('forget', 'a', 'FA')  # another service's id space; evicts the oldest
    assert answers.get('learn', 'a') is None
    assert (answers.get('learn', 'b'), answers.get('forget', 'a')) == ('B', 'FA')
    now[0] = 10.5
    assert answers.get('learn', 'b') is None and len(answers) == 0
    answers.remember('learn', '', 'never')  # requests without an id are never remembered
    assert len(answers) == 0
    answers.configure(window_s=0.0, max_answers=5)  # window 0 turns the memory off
    answers.remember('learn', 'c', 'C')
    assert answers.get('learn', 'c') is None
