"""
Recall hit counts held in memory and written by a background thread (engine/access_counts.py).

What a caller sees must not depend on whether the thread has written them yet: every read
adds the hits still pending, no hit is counted twice or lost across a flush, and whatever
reads the counts in SQL (end_session's retention and decay, export, another process after
close) finds them written.
"""

from __future__ import annotations

import json
import threading

from conftest import wait_until
from engine_helpers import count, make_engine
from robotmem_ros.engine import access_counts, store
from robotmem_ros.engine.database import connect
from robotmem_ros.types import PerceptionInput


class WriteLock:
    """
    Another connection holding the store's SQLite write lock: the thread cannot write.

    Opened by the engine's own SQLite library: two copies of SQLite in one process do not see
    each other's file locks.
    """

    def __init__(self, path: str) -> None:
        self.conn = connect(path)
        self.conn.execute('BEGIN IMMEDIATE')

    def release(self) -> None:
        self.conn.execute('COMMIT')
        self.conn.close()


def stored_hits(engine) -> list[int]:
    return [row[0] for row in engine.db.reader().execute(
        'SELECT access_count FROM memories ORDER BY id')]


def test_a_recall_counts_the_hits_not_yet_written(tmp_path):
    engine = make_engine(tmp_path)
    session = engine.start_session().session_id
    fact = engine.learn('the torque wrench hangs on the left wall',
                        session_id=session).memory_id
    lock = WriteLock(str(engine.db.path))
    try:
        for expected in (1, 2, 3):
            hit = engine.recall('torque wrench', n=1).memories[0]
            assert (hit.id, hit.access_count) == (fact, expected)
        assert stored_hits(engine) == [0]  # nothing written: the lock is held
        assert engine.recaller.ctx.access.pending == 1
        # Every read of records shows them: a listing (which counts no hit), an episode.
        assert [m.access_count for m in engine.iter_memories()] == [3]
        listed = engine.recall('*', n=5).memories[0]
        assert listed.access_count == 3 and listed.last_accessed is not None
        assert [m['access_count'] for m in engine.episode(session)['memories']] == [3]
    finally:
        lock.release()
    assert wait_until(lambda: engine.recaller.ctx.access.pending == 0)
    assert stored_hits(engine) == [3]
    assert engine.recall('torque wrench', n=1).memories[0].access_count == 4
    engine.close()


def test_a_busy_store_logs_once_and_loses_no_hit(tmp_path, caplog):
    engine = make_engine(tmp_path)
    engine.learn('the charger is behind the red door')
    engine.db._writer.execute('PRAGMA query_only=ON')  # every write now fails
    for _ in range(3):
        engine.recall('charger red door')
    access = engine.recaller.ctx.access
    assert access.flush() is False and access.flush() is False
    assert access.pending == 1
    refused = [r for r in caplog.records if 'not written yet' in r.getMessage()]
    assert len(refused) == 1, caplog.text
    engine.db._writer.execute('PRAGMA query_only=OFF')
    assert wait_until(lambda: access.pending == 0)
    assert stored_hits(engine) == [3]
    engine.close()


def test_hits_are_neither_lost_nor_counted_twice_while_the_thread_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(access_counts, 'FLUSH_DELAY_S', 0.0)  # a flush beside every recall
    engine = make_engine(tmp_path)
    engine.learn('the spare gripper pads are in drawer three')
    engine.learn('the torque wrench hangs on the left wall')
    seen: dict[str, list[int]] = {'gripper pads': [], 'torque wrench': []}

    def recall(query: str) -> None:
        for _ in range(150):
            seen[query].append(engine.recall(query, n=1).memories[0].access_count)

    threads = [threading.Thread(target=recall, args=(q,)) for q in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for counts in seen.values():
        assert counts == list(range(1, 151))
    engine.close()
    reopened = make_engine(tmp_path)
    assert stored_hits(reopened) == [150, 150]
    reopened.close()


def test_close_writes_what_is_pending(tmp_path, monkeypatch):
    monkeypatch.setattr(access_counts, 'FLUSH_DELAY_S', 3600.0)  # only close writes them
    engine = make_engine(tmp_path)
    engine.learn('the lab door is locked at night')
    engine.recall('lab door')
    assert stored_hits(engine) == [0]
    engine.close()
    reopened = make_engine(tmp_path)
    assert stored_hits(reopened) == [1]
    reopened.close()


def test_what_reads_the_counts_in_sql_finds_them_written(tmp_path, monkeypatch):
    monkeypatch.setattr(access_counts, 'FLUSH_DELAY_S', 3600.0)
    engine = make_engine(tmp_path)
    session = engine.start_session().session_id
    engine.learn('the lab door is locked at night', session_id=session)
    engine.recall('lab door')
    out = tmp_path / 'export.jsonl'
    engine.export_jsonl(str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r['access_count'] for r in rows if r.get('content')] == [1]
    engine.recall('lab door')
    engine.end_session(session)
    assert count(engine, 'access_count = 2') == 1
    engine.close()


def test_many_hits_go_out_in_batches_of_bounded_size(tmp_path, monkeypatch):
    monkeypatch.setattr(access_counts, 'FLUSH_DELAY_S', 3600.0)  # only flush() writes them
    engine = make_engine(tmp_path)
    ids = engine.save_perceptions([PerceptionInput(f'camera frame {i} of the shelf')
                                   for i in range(3 * access_counts.FLUSH_ROWS + 7)])
    access = engine.recaller.ctx.access
    access.record(ids, 5.0)
    access.record(ids[:10], 6.0)
    batches = []
    real = store.add_accesses
    monkeypatch.setattr(store, 'add_accesses', lambda conn, hits: (
        batches.append(len(hits)), real(conn, hits)))
    assert access.flush() and access.pending == 0
    assert batches == [access_counts.FLUSH_ROWS] * 3 + [7]
    assert count(engine, 'access_count = 2 AND last_accessed = 6.0') == 10
    assert count(engine, 'access_count = 1 AND last_accessed = 5.0') == len(ids) - 10
    engine.close()


def test_past_the_bound_hits_fold_and_no_touched_memory_is_lost(tmp_path, monkeypatch):
    # A store busy for long (another process importing) gathers more memories with hits than
    # the table holds. The oldest fold to one hit each: still counted, still kept by retention.
    monkeypatch.setattr(access_counts, 'FLUSH_DELAY_S', 3600.0)  # only flush() writes them
    monkeypatch.setattr(access_counts, 'MAX_PENDING', 25)
    monkeypatch.setattr(access_counts, 'MERGE_IDS', 4)  # folded ids merged in steps
    engine = make_engine(tmp_path)
    ids = engine.save_perceptions([PerceptionInput(f'camera frame {i} of the shelf')
                                   for i in range(30)])
    assert ids == list(range(1, 31))
    access = engine.recaller.ctx.access
    lock = WriteLock(str(engine.db.path))
    try:
        for chunk, when in ((ids[:5], 0.0), (ids[:5], 0.5), (ids[5:10], 1.0),
                            (ids[5:10], 1.0), (ids[10:], 2.0)):
            access.record(chunk, when)  # ids[:5], oldest, fold: 2 hits -> 1, at time 0.5
        assert access.flush() is False
        assert len(access._pending) == 25 and access.pending == 30
        assert access.unwritten() == set(ids)  # what end_session's retention leaves alone
        records = access.records(engine.db.reader(), ids)
        assert [records[i].access_count for i in ids] == [1] * 5 + [2] * 5 + [1] * 20
        assert [records[i].last_accessed for i in ids] == [0.5] * 5 + [1.0] * 5 + [2.0] * 20
    finally:
        lock.release()
    assert access.flush() and access.pending == 0
    assert stored_hits(engine) == [1] * 5 + [2] * 5 + [1] * 20
    # Folded ids, far apart and near, go out lowest first, in batches.
    monkeypatch.setattr(access_counts, 'FLUSH_ROWS', 16)
    far = [8 * 8192 * k + 3 for k in range(1, 4)]
    access.record(far, 5.0)
    access.record(range(1, 41), 6.0)  # far and 1..15 fold
    batches = []
    real = store.add_accesses
    monkeypatch.setattr(store, 'add_accesses', lambda conn, hits: (
        batches.append([memory_id for _, _, memory_id in hits]), real(conn, hits)))
    assert access.flush() and access.pending == 0
    assert batches == [list(range(1, 16)) + far[:1], far[1:],
                       list(range(16, 32)), list(range(32, 41))]
    assert stored_hits(engine) == [2] * 5 + [3] * 5 + [2] * 20  # ids 1..30: one hit more
    engine.close()
