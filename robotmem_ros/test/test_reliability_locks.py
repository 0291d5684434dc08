"""
One owner per store, and locks held by other processes: node subprocesses on real files.

- A second node on a store that a running node owns exits with one [FATAL] line naming the
  path and the owner; the CLI still writes beside the node (it is the documented second writer).
- Another process holding SQLite's write lock never makes a Recall wait: the hit counts are
  deferred and written by a later recall.
- A node started while another process holds the write lock reports the wait in its status,
  then serves when the lock goes, or exits with one [FATAL] line after store_lock_timeout.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

from conftest import PACKAGE_DIR
from engine_helpers import make_engine
from robotmem_msgs.srv import Learn, Recall, SavePerception
from robotmem_ros.engine.store_owner import lock_path
from test_reliability_disk import exit_of

HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute('BEGIN IMMEDIATE')
print('locked', flush=True)
sys.stdin.readline()
conn.execute('COMMIT')
"""


class LockHolder:
    """Another process that holds the store's SQLite write lock until released."""

    def __init__(self, db_path: pathlib.Path) -> None:
        self.proc = subprocess.Popen([sys.executable, '-c', HOLDER, str(db_path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == 'locked'

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write('\n')
            self.proc.stdin.flush()
            assert self.proc.wait(30) == 0


def existing_store(tmp_path: pathlib.Path) -> pathlib.Path:
    engine = make_engine(tmp_path)
    engine.learn('the torque wrench hangs on the left wall of the tool room')
    engine.close()
    return tmp_path / 'memory.db'


def fatal_lines(output: str) -> list[str]:
    assert 'Traceback' not in output, output
    return [line for line in output.splitlines() if '[FATAL]' in line]


def run_cli(db_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
    return subprocess.run([sys.executable, '-m', 'robotmem_ros.cli.main', '--db', str(db_path),
                           '--embed-backend', 'none', '--json', *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_second_node_on_an_owned_store_exits_and_the_owner_serves_alone(start_node, tmp_path):
    first = start_node()
    second = start_node(wait_ready=False)  # same db_path, another namespace
    code, output = exit_of(second)
    assert code == 1
    [line] = fatal_lines(output)
    assert str(first.db_path) in line and 'already owned' in line
    assert f'pid {first.proc.pid}' in line and first.prefix in line
    # The owner alone serves: one save_perception is one row.
    assert first.call(SavePerception, 'save_perception', description='one camera frame',
                      perception_type='visual').success
    stats = run_cli(first.db_path, 'recall', '*', '--n', '100', '--min-confidence', '0')
    assert stats.returncode == 0 and stats.stdout.count('one camera frame') == 1


def test_the_cli_writes_beside_the_owner(start_node, tmp_path):
    node = start_node()
    done = run_cli(node.db_path, 'learn', 'the spare gripper pads are in drawer three')
    assert done.returncode == 0, done.stderr
    found = node.call(Recall, 'recall', query='spare gripper pads', n=5)
    assert [m.content for m in found.memories] == ['the spare gripper pads are in drawer three']


def test_ownership_ends_with_the_owner_even_on_kill_9(start_node, tmp_path):
    first = start_node()
    first.stop(signal.SIGKILL)
    assert lock_path(first.db_path).exists()  # the file stays; the kernel dropped the lock
    second = start_node()
    assert second.call(Learn, 'learn', insight='the owner came back after a crash').success


def test_recall_never_waits_for_another_process_holding_the_write_lock(start_node, tmp_path):
    db_path = existing_store(tmp_path)
    node = start_node(db_path=db_path)
    holder = LockHolder(db_path)
    try:
        held = node.call(Recall, 'recall', query='torque wrench', n=5)
        assert [m.access_count for m in held.memories] == [1]
        assert 'not written yet' not in node.log()
    finally:
        holder.release()
    # The hit counted while the lock was held is written by the next recall, not lost.
    after = node.call(Recall, 'recall', query='torque wrench', n=5)
    assert [m.access_count for m in after.memories] == [2]
    node.stop()
    engine = make_engine(tmp_path)
    try:
        assert [tuple(r) for r in engine.db.reader().execute(
            'SELECT access_count FROM memories')] == [(2,)]
    finally:
        engine.close()


def test_start_waits_for_the_store_lock_then_serves(start_node, tmp_path):
    db_path = existing_store(tmp_path)
    holder = LockHolder(db_path)
    try:
        node = start_node(db_path=db_path, wait_ready=False, store_lock_timeout=600.0)
        waiting = node.status(lambda s: not s.ready and s.message)
        assert waiting.message.startswith(
            f'waiting for the store lock held by pid {holder.proc.pid} ('), waiting.message
    finally:
        holder.release()
    ready = node.status()
    assert ready.ready and ready.message == ''
    assert node.call(Recall, 'recall', query='torque wrench', n=5).memories


def test_start_gives_up_after_store_lock_timeout_with_one_fatal_line(start_node, tmp_path):
    db_path = existing_store(tmp_path)
    holder = LockHolder(db_path)
    try:
        node = start_node(db_path=db_path, wait_ready=False, store_lock_timeout=2.0)
        code, output = exit_of(node)
    finally:
        holder.release()
    assert code == 1
    [line] = fatal_lines(output)
    assert 'cannot start' in line and str(db_path) in line
    assert f'pid {holder.proc.pid}' in line and 'store_lock_timeout' in line
    assert 'waiting for the store lock held by' in output  # the wait was reported first
