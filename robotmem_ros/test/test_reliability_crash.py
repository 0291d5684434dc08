"""
Crash safety: kill -9 the node during learn calls and perception ingest, then restart it.

Each round drives the node with Learn calls and a perception stream, kills it with SIGKILL at
a random moment, restarts it on the same file and checks: SQLite integrity ok, FTS / vectors /
tags / history agree with ``memories`` (``doctor``), every acknowledged Learn (response
received) is stored, and at least as many perceptions are stored as the node last reported as
written (``perception_written`` in its status). Unflushed perceptions may be lost: that loss
is bounded by one batch / flush interval (docs/reliability.md) and is printed, not asserted.
"""

from __future__ import annotations

import random
import signal
import threading
import time

from conftest import RosClient
import pytest
from reliability_helpers import assert_consistent, Caller, checker
from robotmem_msgs.msg import NodeStatus, PerceptionData
from robotmem_msgs.srv import Learn
from robotmem_ros.wire import LATCHED

FAST_ROUNDS = 3
SOAK_ROUNDS = 20
KILL_AFTER_S = (0.0, 2.0)  # after both loads are flowing
FLOW_GUARD_S = 60.0
WORDS = ('gripper wrench shelf table drawer cup bottle sponge tray bolt cable door charger '
         'camera lidar wheel arm box crate pallet bin hook lever valve pump filter screen '
         'panel button switch knife fork plate bowl towel glove helmet ladder rope tape '
         'hammer drill saw brush bucket mop broom lamp fan heater sensor').split()
PUBLISH_CHUNK = 20
PUBLISH_PAUSE_S = 0.04


def sentence(rng: random.Random, tag: str) -> str:
    return f'{tag}: the ' + ' '.join(rng.sample(WORDS, 7))


class Round:
    """Load on one node until it is killed; remembers what the node acknowledged."""

    def __init__(self, ros, node, number: int, seed: int) -> None:
        self.ros, self.node, self.number = ros, node, number
        self.collection = f'crash{number}'
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.caller = Caller(ros, node.prefix, self.stop)
        self.acked: dict[int, str] = {}  # memory id -> insight (status created)
        self.acked_dupes: set[int] = set()
        self.published: list[str] = []
        self.max_written = 0
        self.failures: list[str] = []
        self.max_backlog = 0
        self.flowing = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        sub = self.ros.node.create_subscription(
            NodeStatus, f'{self.node.prefix}/status', self._on_status, LATCHED)
        pub = self.ros.node.create_publisher(PerceptionData,
                                             f'{self.node.namespace}/perception', 1000)
        threads = [threading.Thread(target=self._learn_loop),
                   threading.Thread(target=self._publish_loop, args=(pub,))]
        for thread in threads:
            thread.start()
        assert self.flowing.wait(FLOW_GUARD_S), 'no learn acknowledged / perception written'
        time.sleep(self.rng.uniform(*KILL_AFTER_S))
        self.node.proc.send_signal(signal.SIGKILL)
        self.node.proc.wait()
        self.stop.set()
        for thread in threads:
            thread.join()
        self.ros.node.destroy_subscription(sub)
        self.ros.node.destroy_publisher(pub)
        self.caller.close()

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

    def _publish_loop(self, pub) -> None:
        seq = 0
        while not self.stop.is_set():
            for _ in range(PUBLISH_CHUNK):
                msg = PerceptionData(seq=seq, perception_type='visual',
                                     description=f'round {self.number} perception {seq}: '
                                     + ' '.join(self.rng.sample(WORDS, 5)),
                                     collection=self.collection)
                msg.header.frame_id = 'crash_test_camera'
                pub.publish(msg)
                self.published.append(msg.description)
                seq += 1
            time.sleep(PUBLISH_PAUSE_S)

    def check(self) -> dict:
        """Everything acknowledged is stored; return the numbers of this round."""
        assert self.failures == []
        assert_consistent(self.node.db_path)
        with checker(self.node.db_path) as engine:
            conn = engine.db.reader()
            for memory_id, insight in self.acked.items():
                row = conn.execute('SELECT content, status FROM memories WHERE id = ?',
                                   (memory_id,)).fetchone()
                assert row is not None, f'acknowledged learn {memory_id} lost'
                assert row['content'] == insight and row['status'] != 'forgotten'
            for memory_id in self.acked_dupes:
                assert conn.execute('SELECT 1 FROM memories WHERE id = ?',
                                    (memory_id,)).fetchone() is not None
            stored = [r[0] for r in conn.execute(
                "SELECT content FROM memories WHERE type = 'perception' AND collection = ?",
                (self.collection,))]
        assert len(stored) == len(set(stored)), 'a perception batch was written twice'
        assert set(stored) <= set(self.published)
        assert len(stored) >= self.max_written, (len(stored), self.max_written)
        return {'round': self.number, 'learn_acked': len(self.acked) + len(self.acked_dupes),
                'published': len(self.published), 'written_reported': self.max_written,
                'max_node_backlog': self.max_backlog,
                'stored': len(stored), 'unflushed_lost': len(self.published) - len(stored)}


def crash_rounds(ros, start_node, tmp_path, rounds: int) -> list[dict]:
    db_path = tmp_path / 'memory.db'
    params = {'embed_backend': 'onnx', 'perception_batch_size': 50,
              'perception_flush_interval': 0.2}
    seed = random.randrange(1 << 30)
    results = []
    node = start_node(db_path=db_path, **params)
    for number in range(rounds):
        # The load comes from a client of the round's own, closed after the kill: a sender that
        # wrote to the killed node can be left unable to reach the node restarted in its place
        # (conftest.ros; docs/reliability.md, "A dead client's shared-memory port").
        sender = RosClient()
        try:
            crash = Round(sender, node, number, seed + number)
            crash.run()
        finally:
            sender.close()
        assert node.proc.returncode == -signal.SIGKILL
        node = start_node(db_path=db_path, **params)  # restart on the crashed file
        results.append(crash.check())
    print(f'\ncrash rounds (seed {seed}):')
    for result in results:
        print('  ' + ', '.join(f'{k}={v}' for k, v in result.items()))
    assert sum(r['stored'] for r in results) > 0 and sum(r['learn_acked'] for r in results) > 0
    return results


def test_kill_during_load_loses_nothing_acknowledged(ros, start_node, tmp_path):
    crash_rounds(ros, start_node, tmp_path, FAST_ROUNDS)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_during_load_soak(ros, start_node, tmp_path):
    crash_rounds(ros, start_node, tmp_path, SOAK_ROUNDS)
