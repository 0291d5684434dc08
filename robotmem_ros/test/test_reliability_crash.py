"""
Crash safety: kill -9 the node during learn calls and perception ingest, then restart it.

Each round drives the node with Learn calls and a perception stream, kills it with SIGKILL at
a random moment, restarts it on the same file and checks: SQLite integrity ok, FTS / vectors /
tags / history agree with ``memories`` (``doctor``), every acknowledged Learn (response
received) is stored, and at least as many perceptions are stored as the node last reported as
written (``perception_written`` in its status). Unflushed perceptions may be lost: that loss
is bounded by one batch / flush interval (docs/reliability.md) and is printed, not asserted.

The load of a round comes from a process of its own (this file run as a script), as every
other extra participant of the suite does (docs/reliability.md, "The test suite: one
participant per process").
"""

from __future__ import annotations

import faulthandler
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from conftest import script_env
import pytest
from reliability_helpers import assert_consistent, Caller, checker
from robotmem_msgs.msg import NodeStatus, PerceptionData
from robotmem_msgs.srv import Learn
from robotmem_ros.wire import LATCHED

FAST_ROUNDS = 3
SOAK_ROUNDS = 20
KILL_AFTER_S = (0.0, 2.0)  # after both loads are flowing
FLOW_GUARD_S = 60.0
LOAD_GUARD_S = 240.0  # a hung load dumps its stack below pytest's 300 s timeout
WORDS = ('gripper wrench shelf table drawer cup bottle sponge tray bolt cable door charger '
         'camera lidar wheel arm box crate pallet bin hook lever valve pump filter screen '
         'panel button switch knife fork plate bowl towel glove helmet ladder rope tape '
         'hammer drill saw brush bucket mop broom lamp fan heater sensor').split()
PUBLISH_CHUNK = 20
PUBLISH_PAUSE_S = 0.04
FLOWING = 'crash load: flowing'
RESULT = 'crash load result: '


def sentence(rng: random.Random, tag: str) -> str:
    return f'{tag}: the ' + ' '.join(rng.sample(WORDS, 7))


class Load:
    """
    Learn calls and a perception stream on one node until told to stop (runs in the child).

    Remembers what the node acknowledged and the most perceptions it reported as written.
    """

    def __init__(self, node: Any, namespace: str, number: int, seed: int) -> None:
        self.number = number
        self.collection = f'crash{number}'
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.caller = Caller(node, f'{namespace}/robotmem', self.stop)
        self.acked: dict[int, str] = {}  # memory id -> insight (status created)
        self.acked_dupes: set[int] = set()
        self.published: list[str] = []
        self.max_written = 0
        self.failures: list[str] = []
        self.max_backlog = 0
        self.flowing = threading.Event()
        self._lock = threading.Lock()
        node.create_subscription(NodeStatus, f'{namespace}/robotmem/status', self._on_status,
                                 LATCHED)
        self._pub = node.create_publisher(PerceptionData, f'{namespace}/perception', 1000)
        self._threads = [threading.Thread(target=self._learn_loop),
                         threading.Thread(target=self._publish_loop)]
        for thread in self._threads:
            thread.start()

    def finish(self) -> dict[str, Any]:
        """Stop both loads; return what happened (JSON-ready)."""
        self.stop.set()
        for thread in self._threads:
            thread.join()
        return {'acked': self.acked, 'acked_dupes': sorted(self.acked_dupes),
                'published': self.published, 'max_written': self.max_written,
                'max_backlog': self.max_backlog, 'failures': self.failures}

    def _on_status(self, msg: NodeStatus) -> None:
        with self._lock:
            self.max_written = max(self.max_written, msg.perception_written)
            self.max_backlog = max(self.max_backlog,
                                   msg.perception_received - msg.perception_written)
        if msg.perception_written and self.acked:
            self.flowing.set()

    def _learn_loop(self) -> None:
        i = 0
        while not self.stop.is_set():
            insight = sentence(self.rng, f'round {self.number} fact {i}')
            res = self.caller(Learn, 'learn', insight=insight, collection=self.collection)
            if res is None:
                return
            if not res.success:
                self.failures.append(res.error)
            elif res.status == 'created':
                self.acked[res.memory_id] = insight
            else:
                self.acked_dupes.add(res.memory_id)
            i += 1

    def _publish_loop(self) -> None:
        seq = 0
        while not self.stop.is_set():
            for _ in range(PUBLISH_CHUNK):
                msg = PerceptionData(seq=seq, perception_type='visual',
                                     description=f'round {self.number} perception {seq}: '
                                     + ' '.join(self.rng.sample(WORDS, 5)),
                                     collection=self.collection)
                msg.header.frame_id = 'crash_test_camera'
                self._pub.publish(msg)
                self.published.append(msg.description)
                seq += 1
            time.sleep(PUBLISH_PAUSE_S)


def load_process(namespace: str, number: int, seed: int) -> None:
    """
    Child: print ``FLOWING`` once both loads reach the node, stop on a line from stdin.

    Then print what happened as one JSON line after ``RESULT``. Both are marked because Fast
    DDS writes its own warnings to stdout too (docs/reliability.md, "The harness's own
    failures").
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    rclpy.init()
    node = rclpy.create_node(f'robotmem_crash_load_{os.getpid()}')
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    load = Load(node, namespace, number, seed)
    print(FLOWING if load.flowing.wait(FLOW_GUARD_S) else 'not flowing', flush=True)
    sys.stdin.readline()
    print(RESULT + json.dumps(load.finish()), flush=True)


def run_round(node: Any, number: int, seed: int) -> dict[str, Any]:
    """Load ``node`` from a fresh process, SIGKILL it once the load flows; return the load."""
    proc = subprocess.Popen([sys.executable, __file__, node.namespace, str(number), str(seed)],
                            env=script_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline()]
        while lines[-1] and lines[-1].strip() not in (FLOWING, 'not flowing'):
            lines.append(proc.stdout.readline())
        assert lines[-1].strip() == FLOWING, ('no learn acknowledged / perception written',
                                              lines, node.log())
        time.sleep(random.Random(seed).uniform(*KILL_AFTER_S))
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait()
        out, err = proc.communicate('stop\n', timeout=LOAD_GUARD_S)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
    results = [line[len(RESULT):] for line in out.splitlines() if line.startswith(RESULT)]
    assert results, (out, err)
    return json.loads(results[0])


def check_round(db_path: pathlib.Path, number: int, load: dict[str, Any]) -> dict[str, Any]:
    """Everything acknowledged is stored; return the numbers of this round."""
    assert load['failures'] == []
    assert_consistent(db_path)
    with checker(db_path) as engine:
        conn = engine.db.reader()
        for memory_id, insight in load['acked'].items():
            row = conn.execute('SELECT content, status FROM memories WHERE id = ?',
                               (int(memory_id),)).fetchone()
            assert row is not None, f'acknowledged learn {memory_id} lost'
            assert row['content'] == insight and row['status'] != 'forgotten'
        for memory_id in load['acked_dupes']:
            assert conn.execute('SELECT 1 FROM memories WHERE id = ?',
                                (memory_id,)).fetchone() is not None
        stored = [r[0] for r in conn.execute(
            "SELECT content FROM memories WHERE type = 'perception' AND collection = ?",
            (f'crash{number}',))]
    assert len(stored) == len(set(stored)), 'a perception batch was written twice'
    assert set(stored) <= set(load['published'])
    assert len(stored) >= load['max_written'], (len(stored), load['max_written'])
    return {'round': number, 'learn_acked': len(load['acked']) + len(load['acked_dupes']),
            'published': len(load['published']), 'written_reported': load['max_written'],
            'max_node_backlog': load['max_backlog'],
            'stored': len(stored), 'unflushed_lost': len(load['published']) - len(stored)}


def crash_rounds(start_node, tmp_path, rounds: int) -> list[dict]:
    db_path = tmp_path / 'memory.db'
    params = {'embed_backend': 'onnx', 'perception_batch_size': 50,
              'perception_flush_interval': 0.2}
    seed = random.randrange(1 << 30)
    results = []
    node = start_node(db_path=db_path, **params)
    for number in range(rounds):
        # The load comes from a process of the round's own: a sender that wrote to the killed
        # node can be left unable to reach the node restarted in its place (conftest.ros;
        # docs/reliability.md, "A dead client's shared-memory port").
        load = run_round(node, number, seed + number)
        assert node.proc.returncode == -signal.SIGKILL
        node = start_node(db_path=db_path, **params)  # restart on the crashed file
        results.append(check_round(db_path, number, load))
    print(f'\ncrash rounds (seed {seed}):')
    for result in results:
        print('  ' + ', '.join(f'{k}={v}' for k, v in result.items()))
    assert sum(r['stored'] for r in results) > 0 and sum(r['learn_acked'] for r in results) > 0
    return results


def test_kill_during_load_loses_nothing_acknowledged(start_node, tmp_path):
    crash_rounds(start_node, tmp_path, FAST_ROUNDS)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_during_load_soak(start_node, tmp_path):
    crash_rounds(start_node, tmp_path, SOAK_ROUNDS)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(LOAD_GUARD_S, exit=True)
    load_process(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    # Leave without tearing DDS down (as test_reliability_concurrency's workers do): the node
    # it wrote to is dead, and Fast DDS's writer teardown has deadlocked under load.
    os._exit(0)
