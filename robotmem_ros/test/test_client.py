"""MemoryClient against a real node subprocess: each service, errors, executors, futures."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any, Callable, Iterator

from conftest import CALL_TIMEOUT_S, module_node, NodeProcess, PACKAGE_DIR
import pytest
import rclpy
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
from robotmem_ros.client import (ExecutorDeadlockError, MemoryClient, MemoryClientError,
                                 ServiceUnavailableError)
from robotmem_ros.types import LearnResult, RecallResult


@pytest.fixture(scope='module')
def node(ros, tmp_path_factory) -> Iterator[NodeProcess]:
    """One BM25-only node for the module (each test uses its own collection)."""
    yield from module_node(ros, tmp_path_factory, 'client')


@pytest.fixture(scope='module')
def client(ros, node) -> Iterator[MemoryClient]:
    """Client on the shared test node (spun by a SingleThreadedExecutor in another thread)."""
    memory = MemoryClient(ros.node, namespace=node.prefix, timeout=CALL_TIMEOUT_S)
    assert memory.wait_ready(CALL_TIMEOUT_S), node.log()
    yield memory
    memory.close()


class OwnNode:
    """
    A node of its own, spun (or not) the way a manipulation node would be.

    It lives in the suite's context: one DDS participant per test process. Fast DDS can deadlock
    destroying readers and writers while a second participant of the same process is running
    (eProsima/Fast-DDS#6193), and a Jazzy CI run once hung, past every timeout, in a test that
    made a second participant. The executor, what these tests are about, is the node's own.
    """

    def __init__(self, context: Any, executor_type: type | None) -> None:
        self.node = rclpy.create_node(f'client_test_{os.getpid()}_{id(self)}', context=context)
        self.executor = None
        self._thread = None
        if executor_type is not None:
            self.executor = executor_type(context=context)
            self.executor.add_node(self.node)
            self._thread = threading.Thread(target=self.executor.spin, daemon=True)
            self._thread.start()

    def run_in_timer(self, body: Callable[[], Any]) -> Any:
        """Run ``body`` once inside a timer callback; return its result or raise its error."""
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def tick() -> None:
            timer.cancel()
            try:
                outcome['result'] = body()
            except Exception as exc:
                outcome['error'] = exc
            done.set()

        timer = self.node.create_timer(0.01, tick)
        assert done.wait(3 * CALL_TIMEOUT_S), 'timer callback never finished: deadlock'
        self.node.destroy_timer(timer)
        if 'error' in outcome:
            raise outcome['error']
        return outcome['result']

    def close(self) -> None:
        """Stop the spin (it returns once the executor is shut down), then destroy the node."""
        if self.executor is not None:
            self.executor.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=CALL_TIMEOUT_S)
        self.node.destroy_node()


@pytest.fixture
def own_node(ros) -> Iterator[Callable[[type | None], OwnNode]]:
    """Create OwnNodes in the suite's context; torn down after the test."""
    made: list[OwnNode] = []

    def make(executor_type: type | None) -> OwnNode:
        made.append(OwnNode(ros.context, executor_type))
        return made[-1]

    yield make
    for own in made:
        own.close()


def test_every_service_returns_plain_results(client):
    session = client.start_session({'robot': 'ur5e', 'task': 'pick'}, collection='cl_all')
    assert session.session_id and session.collection == 'cl_all'

    learned = client.learn('Grasp the red mug by its handle with 12 N',
                           context={'task': {'name': 'pick', 'success': True},
                                    'params': {'grip_force': 12.0}},
                           collection='cl_all', session_id=session.session_id)
    assert isinstance(learned, LearnResult)
    assert learned.status == 'created' and learned.memory_id > 0

    perception_id = client.save_perception('gripper closed on the red mug', 'tactile',
                                           data={'force': 11.8}, session_id=session.session_id,
                                           collection='cl_all')
    assert perception_id > learned.memory_id

    found = client.recall('red mug handle', collection='cl_all',
                          context_filter={'task.success': True})
    assert isinstance(found, RecallResult) and found.mode
    assert [m.id for m in found.memories] == [learned.memory_id]
    fact = found.memories[0]
    assert fact.context['params']['grip_force'] == 12.0 and fact.created_at > 0

    episode = client.recall('*', session_id=session.session_id, collection='cl_all',
                            min_confidence=0.0)
    assert {m.id for m in episode.memories} == {learned.memory_id, perception_id}

    updated = client.update(learned.memory_id, 'Grasp the red mug by its handle with 10 N',
                            context={'params': {'grip_force': 10.0}})
    assert updated.old_content.endswith('12 N') and updated.new_content.endswith('10 N')

    ended = client.end_session(session.session_id, outcome_score=0.8)
    assert isinstance(ended.summary, dict)

    assert client.forget(learned.memory_id, reason='test') is None
    remaining = client.recall('red mug handle', collection='cl_all').memories
    assert [m.id for m in remaining] == [perception_id]


@pytest.mark.parametrize('call, mentions', [
    (lambda c: c.learn(''), 'insight'),
    (lambda c: c.learn('ok', context='{not json'), 'context'),
    (lambda c: c.recall('cup', n=101), 'n'),
    (lambda c: c.recall('cup', context_filter='{bad'), 'context_filter'),
    (lambda c: c.end_session('no-such-session'), 'session'),
    (lambda c: c.forget(987654), '987654'),
    (lambda c: c.update(-5, 'x'), 'memory_id'),
], ids=['empty-insight', 'bad-context', 'n-range', 'bad-filter', 'unknown-session',
        'unknown-id', 'negative-id'])
def test_errors_carry_the_server_text(client, call, mentions):
    with pytest.raises(MemoryClientError) as raised:
        call(client)
    assert mentions in raised.value.server_error, raised.value
    assert raised.value.server_error in str(raised.value)


def test_missing_node_is_unavailable_not_a_hang(ros):
    absent = MemoryClient(ros.node, namespace='/no_such_robotmem', timeout=0.5)
    try:
        assert absent.wait_ready(0.5) is False
        with pytest.raises(ServiceUnavailableError):
            absent.learn('nobody listens')
        future = absent.recall_async('anything')
        assert future.done() and isinstance(future.exception(), ServiceUnavailableError)
    finally:
        absent.close()


def test_async_future_carries_result_and_error(client):
    done = threading.Event()
    future = client.learn_async('The blue box sits on the conveyor', collection='cl_async')
    future.add_done_callback(lambda _: done.set())
    assert done.wait(CALL_TIMEOUT_S)
    assert future.result().status == 'created'

    failed = threading.Event()
    bad = client.recall_async('box', n=500, collection='cl_async')
    bad.add_done_callback(lambda _: failed.set())
    assert failed.wait(CALL_TIMEOUT_S)
    assert isinstance(bad.exception(), MemoryClientError) and 'n' in bad.exception().server_error


def test_blocking_calls_inside_a_multithreaded_timer_callback(node, own_node):
    own = own_node(MultiThreadedExecutor)
    memory = MemoryClient(own.node, namespace=node.prefix, timeout=CALL_TIMEOUT_S)

    def pick_step() -> tuple[int, list[int]]:
        assert memory.wait_ready(CALL_TIMEOUT_S)
        learned = memory.learn('Wipe the table before placing the tray', collection='cl_mt')
        found = memory.recall('wipe table tray', collection='cl_mt')
        return learned.memory_id, [m.id for m in found.memories]

    memory_id, found = own.run_in_timer(pick_step)
    assert found == [memory_id]


def test_single_threaded_callback_raises_instead_of_hanging(node, own_node):
    own = own_node(SingleThreadedExecutor)
    memory = MemoryClient(own.node, namespace=node.prefix, timeout=CALL_TIMEOUT_S)
    assert memory.wait_ready(CALL_TIMEOUT_S)   # from another thread: waits, does not raise
    with pytest.raises(ExecutorDeadlockError, match='MultiThreadedExecutor'):
        own.run_in_timer(lambda: memory.learn('never sent'))
    # The non-blocking variant is fine there: its future completes once the callback returns.
    future = own.run_in_timer(lambda: memory.recall_async('*', collection='cl_st'))
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    assert done.wait(CALL_TIMEOUT_S) and future.result().memories == []


def test_unspun_node_is_spun_for_the_call(node, own_node):
    own = own_node(None)   # a plain script: nobody spins the node
    memory = MemoryClient(own.node, namespace=node.prefix, timeout=CALL_TIMEOUT_S)
    assert memory.wait_ready(CALL_TIMEOUT_S)
    learned = memory.learn('The spare gripper is in drawer three', collection='cl_script')
    assert memory.recall('spare gripper drawer', collection='cl_script').memories[0].id == \
        learned.memory_id
    assert own.node.executor is None


def test_call_waits_for_a_node_that_is_still_starting(ros, start_node):
    starting = start_node(wait_ready=False)
    memory = MemoryClient(ros.node, namespace=starting.prefix, timeout=CALL_TIMEOUT_S)
    try:
        learned = memory.learn('The tool changer is calibrated every morning')
        assert learned.status == 'created'
    finally:
        memory.close()


def test_example_pick_loop_learns_and_reuses_grip_forces(ros, node):
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
    args = [sys.executable, str(PACKAGE_DIR.parent / 'examples' / 'pick_loop.py'),
            '--namespace', node.prefix, '--robot', 'example_arm', '--objects', 'red_mug',
            '--rounds', '6']
    run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert 'session ended' in run.stderr
    memory = MemoryClient(ros.node, namespace=node.prefix, timeout=CALL_TIMEOUT_S)
    try:
        grasps = memory.recall('*', n=100, min_confidence=0.0,
                               context_filter={'robot': 'example_arm'})
        facts = [m for m in grasps.memories if m.type == 'fact']
        assert facts and all(m.context['task']['object'] == 'red_mug' for m in facts)
        assert any(m.context['task']['success'] for m in facts)   # seed 0: the 3rd try holds
        reused = [line for line in run.stderr.splitlines() if '(memory #' in line]
        assert reused and all(line.endswith('-> held') for line in reused), run.stderr
    finally:
        memory.close()
