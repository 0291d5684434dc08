"""robotmem_replay: real rosbag2 bags (sqlite3 and mcap) replayed into a node subprocess."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

from conftest import CALL_TIMEOUT_S, PACKAGE_DIR
import pytest
from robotmem_ros.bag_types import LEARN_REQUEST_TYPE, PERCEPTION_TYPE, robotmem_typestore
from robotmem_ros.client import MemoryClient
from robotmem_ros.replay import BagEpisode, EXIT_UNREADABLE, Replayer, ReplayError
from rosbags.rosbag2 import StoragePlugin, Writer

BASE_NS = 1_700_000_000 * 10**9
STEP_NS = 50_000_000            # 20 Hz, 50 messages = 2.5 s of robot time
SESSIONS = ('bag-episode-mug', 'bag-episode-blocks')
# One fact in three wordings (lift / grab / take): pairwise Jaccard 0.67, under the learn-time
# dedup threshold and over consolidation's. Facts that name different places (over the tray /
# near the sink) are different facts and are never merged (issue 12).
MUG_FACTS = ['lift the red mug by the handle slowly',
             'grab the red mug by the handle slowly',
             'take the red mug by the handle slowly']


def describe(i: int) -> str:
    """Perception text of message ``i``: even ones belong to the mug episode."""
    if i % 2 == 0:
        return f'wrist camera sees the red mug handle at step {i}'
    return f'overhead camera sees blue block {i} stacked on the pallet'


def write_episode_bag(path: pathlib.Path, storage: StoragePlugin, count: int = 50,
                      base_ns: int = BASE_NS) -> None:
    """Two interleaved sessions of perceptions, plus Learn requests in the mug session."""
    store = robotmem_typestore()
    perception = store.types[PERCEPTION_TYPE]
    learn = store.types[LEARN_REQUEST_TYPE]
    header = store.types['std_msgs/msg/Header']
    stamp = store.types['builtin_interfaces/msg/Time']
    with Writer(path, version=9, storage_plugin=storage) as writer:
        perceptions = writer.add_connection('/robot/perception', PERCEPTION_TYPE,
                                            typestore=store)
        learns = writer.add_connection('/robot/learn_requests', LEARN_REQUEST_TYPE,
                                       typestore=store)
        for i in range(count):
            t = base_ns + i * STEP_NS
            msg = perception(
                header=header(stamp=stamp(sec=t // 10**9, nanosec=t % 10**9),
                              frame_id=f'cam{i % 2}'),
                seq=i // 2, perception_type='visual', description=describe(i),
                data=f'{{"step": {i}}}', metadata='', session_id=SESSIONS[i % 2],
                collection='')
            writer.write(perceptions, t, store.serialize_cdr(msg, PERCEPTION_TYPE))
            if i in (10, 20, 30):
                fact = learn(insight=MUG_FACTS[i // 10 - 1], context='', collection='',
                             session_id=SESSIONS[0], request_id='')
                writer.write(learns, t + 1, store.serialize_cdr(fact, LEARN_REQUEST_TYPE))


def replay_cli(bag: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    """Run robotmem_replay as users do (module entry of the console script)."""
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
    return subprocess.run([sys.executable, '-m', 'robotmem_ros.replay', str(bag), *args],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize('storage, how', [(StoragePlugin.SQLITE3, 'in-process'),
                                          (StoragePlugin.MCAP, 'cli')], ids=['sqlite3', 'mcap'])
def test_replayed_episodes_are_complete_ordered_and_consolidated(ros, start_node, tmp_path,
                                                                 storage, how):
    bag = tmp_path / 'episode_bag'
    write_episode_bag(bag, storage)
    node = start_node()
    if how == 'cli':
        done = replay_cli(bag, '--rate', '10', '--end-session', '--namespace', node.prefix)
        assert done.returncode == 0, done.stdout + done.stderr + node.log()
        assert 'perceptions sent 50, written 50' in done.stdout
    else:
        replayer = Replayer(ros.node, node.prefix, rate=None, timeout=CALL_TIMEOUT_S)
        report = replayer.run(BagEpisode(bag), end_sessions=True)
        assert report.complete, f'{report}\n{node.log()}'
        assert (report.perceptions_sent, report.perceptions_written, report.learned) == \
            (50, 50, 3)
        assert report.sessions == list(SESSIONS) and report.ended == dict.fromkeys(SESSIONS, '')

    memory = MemoryClient(ros.node, node.prefix, timeout=CALL_TIMEOUT_S)
    try:
        for parity, session in enumerate(SESSIONS):
            episode = memory.recall('*', n=100, min_confidence=0.0, session_id=session)
            seen = [m for m in episode.memories if m.type == 'perception']
            expected = range(parity, 50, 2)
            assert [m.content for m in seen] == [describe(i) for i in expected]
            assert [m.created_at for m in seen] == \
                [pytest.approx((BASE_NS + i * STEP_NS) / 1e9, abs=1e-6) for i in expected]
            assert {m.session_id for m in seen} == {session}

        mug_facts = [m for m in memory.recall('*', n=100, min_confidence=0.0,
                                              session_id=SESSIONS[0]).memories
                     if m.type == 'fact']
        assert len(mug_facts) == 1, 'EndSession should merge the three near-duplicate facts'
        assert mug_facts[0].content in MUG_FACTS

        for query, session in (('blue block stacked on the pallet', SESSIONS[1]),
                               ('red mug handle', SESSIONS[0])):
            found = memory.recall(query, n=5, min_confidence=0.0)
            assert found.memories and {m.session_id for m in found.memories} == {session}
    finally:
        memory.close()


def test_session_override_and_topic_selection(ros, start_node, tmp_path):
    bag = tmp_path / 'override_bag'
    write_episode_bag(bag, StoragePlugin.SQLITE3, count=10)
    node = start_node()
    report = Replayer(ros.node, node.prefix, rate=None, session_id='live-session',
                      timeout=CALL_TIMEOUT_S).run(
        BagEpisode(bag, topics=['/robot/perception'], learn_topics=['/no/such/topic']))
    assert report.complete and report.sessions == ['live-session'], f'{report}\n{node.log()}'
    assert (report.perceptions_sent, report.learned) == (10, 0)
    memory = MemoryClient(ros.node, node.prefix, timeout=CALL_TIMEOUT_S)
    try:
        episode = memory.recall('*', n=100, min_confidence=0.0, session_id='live-session')
        assert [m.content for m in episode.memories] == [describe(i) for i in range(10)]
    finally:
        memory.close()


def test_unusable_bags_are_refused(tmp_path):
    with pytest.raises(ReplayError, match='metadata.yaml'):
        BagEpisode(tmp_path)
    bag = tmp_path / 'empty_bag'
    write_episode_bag(bag, StoragePlugin.MCAP, count=1)
    with pytest.raises(ReplayError, match='no robotmem_msgs'):
        BagEpisode(bag, topics=['/elsewhere'], learn_topics=['/elsewhere'])
    done = replay_cli(tmp_path / 'missing')
    assert done.returncode == EXIT_UNREADABLE and 'not a rosbag2 directory' in done.stderr


def test_a_replayed_year_old_archive_is_recallable_after_end_session(ros, start_node, tmp_path):
    """Stamps order the episode; decay counts from when the replay stored it (docs)."""
    bag = tmp_path / 'archive_bag'
    base_ns = (int(time.time()) - 400 * 86_400) * 10**9
    write_episode_bag(bag, StoragePlugin.SQLITE3, count=20, base_ns=base_ns)
    node = start_node()
    report = Replayer(ros.node, node.prefix, rate=None, timeout=CALL_TIMEOUT_S).run(
        BagEpisode(bag), end_sessions=True)
    assert report.complete and report.ended == dict.fromkeys(SESSIONS, ''), \
        f'{report}\n{node.log()}'
    memory = MemoryClient(ros.node, node.prefix, timeout=CALL_TIMEOUT_S)
    try:
        found = memory.recall('overhead camera blue block stacked on the pallet', n=5)
        assert found.memories and {m.session_id for m in found.memories} == {SESSIONS[1]}
        episode = memory.recall('*', n=100, session_id=SESSIONS[1])  # default min_confidence
        seen = [m for m in episode.memories if m.type == 'perception']
        assert [m.content for m in seen] == [describe(i) for i in range(1, 20, 2)]
        assert [m.created_at for m in seen] == \
            [pytest.approx((base_ns + i * STEP_NS) / 1e9, abs=1e-6) for i in range(1, 20, 2)]
        assert all(m.confidence == pytest.approx(0.9) for m in seen)
    finally:
        memory.close()
