"""The vector index saved beside the store and read back at a start (issue 15, cold start)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys

from engine_helpers import bulk_vectors, make_engine, with_context
import numpy as np
import pytest
from robotmem_ros.engine import index_snapshot, store, vector_index
from robotmem_ros.types import PerceptionInput

SAVED = 100  # SNAPSHOT_EVERY in these tests
# Sets of up to RESCORE_MIN (256) vectors are rescored whole: searches below are exact.
CONTEXT = {'task': {'name': 'pick', 'success': True}}


@pytest.fixture(autouse=True)
def _small_snapshots(monkeypatch):
    monkeypatch.setattr(vector_index, 'SNAPSHOT_EVERY', SAVED)


def _unit(rng: np.random.Generator, rows: int) -> np.ndarray:
    vectors = rng.standard_normal((rows, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _open(tmp_path, name='memory.db'):
    return make_engine(tmp_path, name=name, int8_max_vectors=0)  # no 8-bit copy: snapshots on


def _saved(engine) -> int:
    """Search once (the index catches up), wait for a snapshot being written; its size."""
    engine.db.vectors.refresh()
    saver = engine.db.vectors._saver
    if saver is not None:
        saver.join()
    return engine.db.vectors.stats()['snapshot_saved']


def _top(engine, query, k=10, **filters):
    return [i for i, _ in store.vec_search(engine.db.reader(), query, 'default', k, **filters)]


def _exact(vectors: dict[int, np.ndarray], query: np.ndarray, k: int = 10) -> list[int]:
    ids = sorted(vectors)
    scores = np.stack([vectors[i] for i in ids]) @ query
    return [ids[i] for i in np.argsort(-scores, kind='stable')[:k]]


def test_a_start_reads_the_snapshot_and_the_rows_written_since(tmp_path):
    rng = np.random.default_rng(3)
    engine = _open(tmp_path)
    first = _unit(rng, 200)
    ids = with_context(engine, first, CONTEXT)
    assert _saved(engine) == 200
    assert index_snapshot.path_for(engine.db.path).exists()
    later = _unit(rng, 40)  # fewer than SNAPSHOT_EVERY: not saved, read from the rows
    ids_later = bulk_vectors(engine, later)
    live = dict(zip(ids + ids_later, np.concatenate([first, later])))
    with engine.db.write() as conn:
        for memory_id in ids[:10]:  # deleted after the snapshot: stale entries in it
            store.delete_vector(conn, memory_id)
            live.pop(memory_id)
    engine.close()

    engine = _open(tmp_path)
    queries = np.concatenate([first[:20], later[:5], _unit(rng, 5)])
    for query in queries:
        assert _top(engine, query) == _exact(live, query)
    stats = engine.db.vectors.stats()
    assert stats['snapshot_restored'] == 200 and stats['entries'] == 240
    # The filter columns came back too: only the first batch holds the task (those whose
    # vector was deleted are listed as memories the index does not hold).
    held = store.filter_candidates(engine.db.reader(), 'default', [('$.task.name', 'pick')])
    assert held is not None and sorted(held) == ids
    engine.close()


def test_the_index_built_from_rows_answers_as_the_restored_one(tmp_path):
    rng = np.random.default_rng(5)
    engine = _open(tmp_path)
    vectors = _unit(rng, 150)
    bulk_vectors(engine, vectors, session='s1')
    bulk_vectors(engine, _unit(rng, 60), session='s2')
    assert _saved(engine) == 210
    queries = _unit(rng, 8)
    expected = [(_top(engine, q), _top(engine, q, session_id='s2')) for q in queries]
    engine.close()
    for snapshot in (True, False):
        if not snapshot:
            index_snapshot.path_for(tmp_path / 'memory.db').unlink()
        engine = _open(tmp_path)
        got = [(_top(engine, q), _top(engine, q, session_id='s2')) for q in queries]
        assert got == expected
        assert engine.db.vectors.stats()['snapshot_restored'] == (210 if snapshot else 0)
        engine.close()


@pytest.mark.parametrize('damage', ['cut', 'garbage', 'larger_store', 'smaller_store'])
def test_a_damaged_or_foreign_snapshot_is_not_used(tmp_path, caplog, damage):
    rng = np.random.default_rng(9)
    engine = _open(tmp_path)
    vectors = _unit(rng, 120)
    ids = bulk_vectors(engine, vectors)
    assert _saved(engine) == 120
    engine.close()
    path = index_snapshot.path_for(tmp_path / 'memory.db')
    if damage == 'cut':
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    elif damage == 'garbage':
        path.write_bytes(b'not an index' * 100)
    else:  # another store's snapshot: more rows than this one ever had, or other rows
        rows = 300 if damage == 'larger_store' else 100
        other = _open(tmp_path, 'other.db')
        bulk_vectors(other, _unit(rng, rows))
        assert _saved(other) == rows
        other.close()
        shutil.copy(index_snapshot.path_for(tmp_path / 'other.db'), path)
    caplog.set_level(logging.INFO, logger='robotmem.engine')
    engine = _open(tmp_path)
    live = dict(zip(ids, vectors))
    for query in vectors[:10]:
        assert _top(engine, query) == _exact(live, query)
    assert engine.db.vectors.stats()['snapshot_restored'] == 0
    assert 'not used' in caplog.text
    engine.close()


def test_a_store_restored_from_an_older_copy_ignores_the_newer_snapshot(tmp_path):
    """The copy took other rows under the same seqs: the newest sampled rows differ."""
    rng = np.random.default_rng(13)
    engine = _open(tmp_path)
    bulk_vectors(engine, _unit(rng, 100))
    engine.db.vectors.refresh()
    engine.db.vectors._saver.join()
    engine.db.reader().execute('PRAGMA wal_checkpoint(TRUNCATE)')
    engine.close()
    shutil.copy(tmp_path / 'memory.db', tmp_path / 'backup.db')
    engine = _open(tmp_path)
    bulk_vectors(engine, _unit(rng, 100))
    assert _saved(engine) == 200
    engine.close()
    # Restore the copy: it never reached the snapshot's last row.
    for suffix in ('-wal', '-shm'):
        (tmp_path / f'memory.db{suffix}').unlink(missing_ok=True)
    shutil.copy(tmp_path / 'backup.db', tmp_path / 'memory.db')
    path = index_snapshot.path_for(tmp_path / 'memory.db')
    newer_snapshot = path.read_bytes()
    engine = _open(tmp_path)
    assert _saved(engine) == 100  # built from its rows, and saved
    assert engine.db.vectors.stats()['snapshot_restored'] == 0
    engine.close()
    # The copy then took as many rows again before a start (their seqs reach the snapshot's
    # last one, the counts agree), and the newer snapshot is back beside it.
    path.write_bytes(newer_snapshot)
    engine = _open(tmp_path)
    newer = _unit(rng, 100)
    ids = bulk_vectors(engine, newer)  # no search: the index never looks
    engine.close()
    engine = _open(tmp_path)
    for memory_id, query in zip(ids[:5], newer):
        assert _top(engine, query, k=1) == [memory_id]
    assert engine.db.vectors.stats()['snapshot_restored'] == 0
    engine.close()


def test_a_reindex_drops_the_snapshot_and_orphans_are_removed(tmp_path):
    rng = np.random.default_rng(17)
    engine = _open(tmp_path)
    path = index_snapshot.path_for(engine.db.path)
    gone = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                          capture_output=True, text=True, check=True).stdout.strip()
    orphan = path.with_name(f'{path.name}.{gone}.tmp')  # a process killed while saving
    orphan.write_bytes(b'half an index')
    bulk_vectors(engine, _unit(rng, 100))
    assert _saved(engine) == 100
    assert path.exists() and not orphan.exists()
    engine.db.vectors.reset()
    assert not path.exists()
    engine.close()


def test_a_snapshot_that_cannot_be_written_is_logged_and_searches_go_on(
        tmp_path, caplog, monkeypatch):
    def full_disk(path, snapshot):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(index_snapshot, 'save', full_disk)
    caplog.set_level(logging.INFO, logger='robotmem.engine')
    rng = np.random.default_rng(19)
    engine = _open(tmp_path)
    vectors = _unit(rng, 120)
    ids = bulk_vectors(engine, vectors)
    _saved(engine)
    assert 'not written (OSError' in caplog.text
    assert not index_snapshot.path_for(engine.db.path).exists()
    for query in vectors[:5]:
        assert _top(engine, query) == _exact(dict(zip(ids, vectors)), query)
    engine.close()


def test_a_snapshot_whose_newest_rows_all_left_the_store_is_not_used(tmp_path, caplog):
    """Nothing is left to tell a diverged store (restored, written, deleted) from this one."""
    rng = np.random.default_rng(23)
    engine = _open(tmp_path)
    ids = bulk_vectors(engine, _unit(rng, 400))
    assert _saved(engine) == 400
    with engine.db.write() as conn:
        for memory_id in ids[-index_snapshot.SAMPLED_NEWEST:]:
            store.delete_vector(conn, memory_id)
    engine.close()
    caplog.set_level(logging.INFO, logger='robotmem.engine')
    engine = _open(tmp_path)
    engine.db.vectors.refresh()
    assert engine.db.vectors.stats()['snapshot_restored'] == 0
    assert 'none of its newest rows' in caplog.text
    engine.close()


def test_a_snapshot_of_a_store_made_again_at_its_path_is_not_used(tmp_path, caplog):
    """
    The store deleted, its snapshot left, the same rows written again in another session.

    Same ids, seqs and vectors (a bag replayed into a fresh store): every other check passes,
    and the restored index filed every row under the first store's session.
    """
    vectors = _unit(np.random.default_rng(17), 200)

    def fill(session: str) -> tuple[object, list[int]]:
        engine = _open(tmp_path)
        ids = engine.save_perceptions([PerceptionInput(f'reading {i}', session_id=session)
                                       for i in range(len(vectors))])
        with engine.db.write() as conn:
            for memory_id, vector in zip(ids, vectors):
                store.put_vector(conn, memory_id, vector)
        return engine, ids

    engine, first = fill('run-1')
    assert _saved(engine) == 200
    engine.close()
    for path in tmp_path.glob('memory.db*'):
        if path != index_snapshot.path_for(tmp_path / 'memory.db'):
            path.unlink()
    engine, second = fill('run-2')
    assert second == first
    engine.close()
    engine = _open(tmp_path)
    with caplog.at_level(logging.INFO, logger='robotmem.engine'):
        assert _top(engine, vectors[5], k=3, session_id='run-2')[0] == first[5]
    assert _top(engine, vectors[5], k=3, session_id='run-1') == []
    assert engine.db.vectors.stats()['snapshot_restored'] == 0
    assert 'taken of another store' in caplog.text
    engine.close()
