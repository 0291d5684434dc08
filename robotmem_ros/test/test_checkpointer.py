"""WAL checkpoints off the request path (engine/checkpointer.py), on a real SQLite file."""

import time

from diagnostic_msgs.msg import DiagnosticStatus
from engine_helpers import make_engine
from robotmem_ros.engine.checkpointer import Checkpointer
from robotmem_ros.engine.database import connect
from robotmem_ros.node.perception_ingest import IngestCounters
from robotmem_ros.node.status import build_diagnostics


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.02)


def _wal_store(path):
    conn = connect(str(path))
    conn.execute('PRAGMA journal_mode=WAL')
    conn.execute('PRAGMA wal_autocheckpoint=0')
    conn.execute('PRAGMA journal_size_limit=0')
    conn.execute('CREATE TABLE t (x TEXT)')
    return conn


def test_a_grown_wal_is_copied_into_the_database_by_the_thread(tmp_path):
    path = tmp_path / 'wal.db'
    conn = _wal_store(path)
    conn.executemany('INSERT INTO t VALUES (?)', [('x' * 500,)] * 200)
    worker = Checkpointer(path, lambda: connect(str(path)), wal_bytes=4096)
    worker.committed()
    _wait_for(lambda: worker.checkpoints >= 1)
    probe = connect(str(path))
    busy, frames, copied = probe.execute('PRAGMA wal_checkpoint(PASSIVE)').fetchone()
    assert (busy, frames) == (0, copied) and frames > 0  # every frame was already copied
    worker.stop()
    probe.close()
    conn.close()


def test_a_small_wal_is_left_alone(tmp_path):
    path = tmp_path / 'wal.db'
    conn = _wal_store(path)
    conn.execute("INSERT INTO t VALUES ('one row')")
    worker = Checkpointer(path, lambda: connect(str(path)), wal_bytes=1 << 30)
    worker.committed()
    time.sleep(0.3)
    assert worker.checkpoints == 0
    worker.stop()
    conn.close()


def test_a_failing_checkpoint_is_reported_and_never_raises(tmp_path):
    def broken():
        raise OSError('no such device')

    path = tmp_path / 'wal.db'
    conn = _wal_store(path)
    conn.executemany('INSERT INTO t VALUES (?)', [('x' * 500,)] * 50)
    worker = Checkpointer(path, broken, wal_bytes=1)
    worker.committed()
    _wait_for(lambda: worker.last_error != '')
    assert 'no such device' in worker.last_error and worker.running  # retried, not dead
    worker.stop()
    conn.close()


def test_the_stores_commits_never_checkpoint_and_wake_the_thread(tmp_path):
    engine = make_engine(tmp_path)
    writer_setting = engine.db.reader().execute('PRAGMA wal_autocheckpoint').fetchone()[0]
    assert writer_setting == 1000  # a reader keeps SQLite's default; only the writer is off
    with engine.db.write() as conn:
        assert conn.execute('PRAGMA wal_autocheckpoint').fetchone()[0] == 0
    engine.db.checkpointer.wal_bytes = 1  # every commit's WAL is now worth a checkpoint
    engine.learn('the spare gripper pads are in the left drawer')
    _wait_for(lambda: engine.db.checkpointer.checkpoints >= 1)
    engine.close()
    assert not engine.db.checkpointer.running


def test_a_failing_checkpoint_shows_in_the_store_diagnostic(tmp_path):
    def broken():
        raise OSError('I/O error on the WAL')

    engine = make_engine(tmp_path)
    engine.db.checkpointer._opener = broken  # the thread's connection cannot be opened
    engine.db.checkpointer.wal_bytes = 1
    engine.learn('the spare gripper pads are in the left drawer')
    _wait_for(lambda: engine.db.checkpointer.last_error != '')
    status = engine.status()
    assert 'I/O error on the WAL' in status.checkpoint_error
    diagnostic = build_diagnostics(status, '', IngestCounters(), 100, 'auto')[0]
    assert diagnostic.level == DiagnosticStatus.WARN
    assert 'WAL checkpoint failing' in diagnostic.message
    assert engine.recall('gripper pads').total == 1  # the store itself keeps working
    engine.close()
