"""The IVF stage of the vector index: used once built, never wrong, never in the way (15)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from diagnostic_msgs.msg import DiagnosticStatus
from engine_helpers import bulk_vectors, make_engine
import numpy as np
import pytest
from robotmem_ros.engine import ann_stage, store, vector_index
from robotmem_ros.node.perception_ingest import IngestCounters
from robotmem_ros.node.status import build_diagnostics

pytestmark = pytest.mark.skipif(not ann_stage.available(), reason='faiss-cpu is not installed')

BUILD_WAIT_S = 120.0  # a bound for a hung build, not a speed target


def _topics(rng: np.random.Generator, topics: int, each: int) -> np.ndarray:
    """Draw unit vectors in families around ``topics`` centres, as real memories come."""
    centres = rng.standard_normal((topics, 384))
    vectors = np.repeat(centres, each, axis=0) + 0.4 * rng.standard_normal((topics * each, 384))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def _built(engine, entries: int) -> dict:
    """Search once (which starts the build), then wait until the stage covers ``entries``."""
    index = engine.db.vectors
    index.refresh()
    deadline = time.monotonic() + BUILD_WAIT_S
    while time.monotonic() < deadline:
        index.refresh()
        stats = index.stats()
        if stats['ann_entries'] >= entries and not stats['ann_building']:
            return stats
        assert not stats['ann_error'], stats['ann_error']
        time.sleep(0.05)
    raise AssertionError(f'stage not built in {BUILD_WAIT_S} s: {index.stats()}')


@pytest.fixture
def scans(monkeypatch) -> list[int]:
    """Record every full sign-bit scan (the path the stage replaces)."""
    calls: list[int] = []
    real = vector_index._hamming

    def counting(codes, query, rows):
        calls.append(rows)
        return real(codes, query, rows)

    monkeypatch.setattr(vector_index, '_hamming', counting)
    return calls


def _exact(vectors: np.ndarray, ids: list[int], query: np.ndarray, k: int) -> list[int]:
    return [ids[i] for i in np.argsort(-(vectors @ query), kind='stable')[:k]]


def test_a_built_stage_answers_without_a_full_scan_and_finds_the_neighbours(tmp_path, scans):
    rng = np.random.default_rng(5)
    engine = make_engine(tmp_path, ann_min_vectors=1000, ann_nprobe=16)
    vectors = _topics(rng, 60, 50)
    ids = bulk_vectors(engine, vectors)
    stats = _built(engine, len(ids))
    assert stats['ann_bytes'] > 0
    status = engine.status()
    assert status.ann_vectors == status.index_vectors == len(ids) and not status.ann_error
    scans.clear()
    overlap = []
    for query in vectors[rng.choice(len(ids), 20, replace=False)]:
        hits = store.vec_search(engine.db.reader(), query, 'default', 10)
        overlap.append(len({i for i, _ in hits} & set(_exact(vectors, ids, query, 10))) / 10)
        exact = float(vectors[ids.index(hits[0][0])] @ query)
        assert hits[0][1] == pytest.approx(exact, abs=1e-5)  # cosines are exact, from SQLite
    assert scans == []
    assert np.mean(overlap) >= 0.9
    engine.close()


def test_below_the_threshold_or_with_zero_there_is_no_stage(tmp_path, scans):
    rng = np.random.default_rng(6)
    for name, threshold in (('below.db', 5000), ('off.db', 0)):
        engine = make_engine(tmp_path, name=name, ann_min_vectors=threshold)
        bulk_vectors(engine, _topics(rng, 20, 50))
        store.vec_search(engine.db.reader(), _topics(rng, 1, 1)[0], 'default', 5)
        stats = engine.db.vectors.stats()
        assert stats['ann_entries'] == 0 and not stats['ann_building']
        engine.close()
    assert scans  # the scan answered


def test_filters_still_return_k_when_k_exist(tmp_path):
    rng = np.random.default_rng(7)
    engine = make_engine(tmp_path, ann_min_vectors=1000)
    bulk_vectors(engine, _topics(rng, 40, 50), data={'robot': 'b'})
    session = engine.start_session().session_id
    mine = bulk_vectors(engine, _topics(rng, 3, 5), session=session)
    robot_a = bulk_vectors(engine, _topics(rng, 2, 6), data={'robot': 'a'})
    _built(engine, 2000 + 15 + 12)
    conn = engine.db.reader()
    query = _topics(rng, 1, 1)[0]
    hits = store.vec_search(conn, query, 'default', 10, session_id=session)
    assert len(hits) == 10 and {i for i, _ in hits} <= set(mine)
    assert len(store.vec_search(conn, query, 'default', 50, session_id=session)) == 15
    hits = store.vec_search(conn, query, 'default', 10, context=[('$.data.robot', 'a')])
    assert len(hits) == 10 and {i for i, _ in hits} <= set(robot_a)
    engine.close()


def test_vectors_stored_after_the_build_are_found_and_deleted_ones_never(tmp_path, scans):
    rng = np.random.default_rng(8)
    engine = make_engine(tmp_path, ann_min_vectors=1000)
    vectors = _topics(rng, 40, 50)
    ids = bulk_vectors(engine, vectors)
    _built(engine, len(ids))
    later = _topics(rng, 1, 3)
    added = bulk_vectors(engine, later)
    conn = engine.db.reader()
    scans.clear()
    assert store.vec_search(conn, later[1], 'default', 1)[0][0] == added[1]
    assert engine.db.vectors.stats()['ann_entries'] == len(ids) + 3
    engine.forget(added[1])
    engine.forget(ids[7])
    assert added[1] not in [i for i, _ in store.vec_search(conn, later[1], 'default', 10)]
    assert ids[7] not in [i for i, _ in store.vec_search(conn, vectors[7], 'default', 10)]
    assert scans == []
    engine.close()


def test_a_failed_build_leaves_the_scan_answering(tmp_path, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise MemoryError('no room for the index')

    monkeypatch.setattr(ann_stage, 'build', broken)
    rng = np.random.default_rng(9)
    engine = make_engine(tmp_path, ann_min_vectors=500)
    vectors = _topics(rng, 20, 50)
    ids = bulk_vectors(engine, vectors)
    index = engine.db.vectors
    index.refresh()
    deadline = time.monotonic() + BUILD_WAIT_S
    # Until the builder thread has ended, not only set the error (it closes its connection).
    while ((not index.stats()['ann_error'] or index.stats()['ann_building'])
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert 'no room for the index' in index.stats()['ann_error']
    assert 'sign-bit scan keeps answering' in caplog.text
    hits = store.vec_search(engine.db.reader(), vectors[3], 'default', 1)
    assert hits[0][0] == ids[3]
    index.refresh()
    assert not index.stats()['ann_building']  # no retry loop
    status = engine.status()
    assert status.ann_vectors == 0 and status.index_vectors == len(ids)
    diagnostic = build_diagnostics(status, '', IngestCounters(), 100, 'auto')[0]
    assert diagnostic.level == DiagnosticStatus.WARN
    assert 'no room for the index' in diagnostic.message
    engine.close()


def test_closing_during_a_build_is_quiet_and_a_reindex_discards_the_stage(tmp_path, caplog):
    rng = np.random.default_rng(10)
    engine = make_engine(tmp_path, ann_min_vectors=1000)
    bulk_vectors(engine, _topics(rng, 40, 50))
    engine.db.vectors.refresh()
    assert engine.db.vectors.stats()['ann_building']
    engine.close()
    again = make_engine(tmp_path, ann_min_vectors=1000)
    _built(again, 2000)
    again.db.vectors.reset()
    assert again.db.vectors.stats()['ann_entries'] == 0
    again.close()
    assert 'could not be built' not in caplog.text


def test_a_selective_filter_probes_more_lists():
    stage = ann_stage.AnnStage(8, 10_000, nprobe=24)
    assert stage.nlist == 100
    assert stage.probes(10_000, 10_000) == 24
    assert stage.probes(2_500, 10_000) == 48  # a quarter of the rows: twice the lists
    assert stage.probes(1_000, 10_000) == 76
    assert stage.probes(100, 10_000) == 100  # every list, no more
    assert stage.probes(0, 10_000) == 100


def test_appends_after_a_build_hand_the_outgrown_lists_back(tmp_path, monkeypatch):
    trims = []
    trimmer = SimpleNamespace(return_freed=lambda: trims.append(1))
    monkeypatch.setattr(vector_index, 'heap', trimmer)
    rng = np.random.default_rng(10)
    engine = make_engine(tmp_path, ann_min_vectors=1000)
    index = engine.db.vectors
    ids = bulk_vectors(engine, _topics(rng, 20, 50))
    _built(engine, len(ids))
    trims.clear()
    for vector in _topics(rng, 1, vector_index.TRIM_APPENDS - 1):
        bulk_vectors(engine, vector[None, :])
        index.refresh()
    assert trims == []
    assert index.stats()['ann_entries'] == len(ids) + vector_index.TRIM_APPENDS - 1
    bulk_vectors(engine, _topics(rng, 1, 1))
    index.refresh()
    assert trims == [1]
    engine.close()


def test_compacted_lists_answer_as_built_and_take_appends():
    # compact copies each list's packed blocks of 32 codes: a copy that shifted or cut a
    # block would change the answers; appends after it must land in the copied lists.
    rng = np.random.default_rng(11)
    vectors = _topics(rng, 30, 100)
    stage = ann_stage.AnnStage(vectors.shape[1], len(vectors), nprobe=8)
    stage.train(vectors)
    for start in range(0, 2_500, 700):  # blocks that end inside lists' blocks of 32
        stage.add(vectors[start:min(start + 700, 2_500)])
    everything = np.ones(len(vectors), dtype=bool)
    queries = vectors[::97]
    bitmap = ann_stage.pack(everything[:stage.size])
    built = [stage.search(q, bitmap, stage.size, stage.size, 20) for q in queries]
    stage.compact()
    assert [stage.search(q, bitmap, stage.size, stage.size, 20).tolist()
            for q in queries] == [found.tolist() for found in built]
    stage.add(vectors[2_500:])
    assert stage.size == len(vectors)
    for position in (2_500, 2_777, len(vectors) - 1):
        found = stage.search(vectors[position], ann_stage.pack(everything), len(vectors),
                             len(vectors), 5)
        assert position in found.tolist()


def test_positions_past_a_bitmap_are_never_proposed():
    # A stage that grew after a search took its mask (another thread's refresh) holds
    # positions the bitmap has no bit for; faiss must not read past its last byte for them.
    rng = np.random.default_rng(12)
    vectors = _topics(rng, 20, 100)
    stage = ann_stage.AnnStage(vectors.shape[1], len(vectors), nprobe=8)
    stage.train(vectors)
    stage.add(vectors)
    for held in (1_000, 1_003, 1_997):  # a whole last byte, a partial one
        bitmap = ann_stage.pack(np.ones(held, dtype=bool))
        for position in range(held, len(vectors), 37):  # each query is a vector past them
            found = stage.search(vectors[position], bitmap, 1, held, 50)  # every list probed
            assert found.size == 50 and found.max() < held
    # A kept bitmap's last byte can gain the bits of positions appended after a search took
    # it (_Mask.bitmap): the search still proposes none past the size it was asked with.
    bitmap = ann_stage.pack(np.ones(1_008, dtype=bool))
    for position in range(1_003, 1_008):
        found = stage.search(vectors[position], bitmap, 1, 1_003, 50)
        assert found.size and found.max() < 1_003


def test_a_search_raced_by_a_growing_refresh_reads_only_the_arrays_it_took(tmp_path):
    # A recall takes its mask's bitmap and the id arrays under the index's lock and asks the
    # stage after releasing it. A learn committed in between can reallocate the arrays (full
    # after a chunked load) and, searching with the same mask, set the new position's bit in
    # the shared last byte: the recall must not look that position up in its shorter arrays.
    rng = np.random.default_rng(14)
    held = 1_999  # loaded in chunks of 1 000: the arrays are full, the last byte partial
    vectors = _topics(rng, 20, 100)
    engine = make_engine(tmp_path, ann_min_vectors=1_000, ann_nprobe=16)
    bulk_vectors(engine, vectors[:held])
    index = engine.db.vectors
    _built(engine, held)
    assert len(index._ids) == held
    stage_lock, learned = index._ann_lock, []

    class LearnFirst:
        """The stage's lock, taken by the recall only after a learn has stored and searched."""

        def __enter__(self):
            if not learned:
                learned.append(bulk_vectors(engine, vectors[held:held + 1]))
                store.vec_search(engine.db.reader(), vectors[held], 'default', 10)
            return stage_lock.__enter__()

        def __exit__(self, *exc):
            return stage_lock.__exit__(*exc)

    index._ann_lock = LearnFirst()
    found = store.vec_search(engine.db.reader(), vectors[held], 'default', 10)
    index._ann_lock = stage_lock
    assert learned and len(index._ids) > held  # the race happened
    assert len(found) == 10 and index.stats()['entries'] == held + 1
    engine.close()


def test_a_kept_bitmap_is_the_packed_mask_as_it_grows():
    # The kept mask packs only the bytes from its last packed one on; growing by steps that
    # end inside bytes (and past the buffer's slack) must give the bytes packed whole.
    rng = np.random.default_rng(13)
    kept = vector_index._Mask(np.zeros(16, dtype=bool), 0, 0, 0)
    for step in (5, 1, 8, 3, 700, 13, vector_index.MASK_SLACK + 9, 2):
        size = kept.size + step
        bits = np.zeros(size + 11, dtype=bool)
        bits[:kept.size] = kept.bits[:kept.size]
        bits[kept.size:size] = rng.random(step) < 0.5
        kept.bits, kept.size = bits, size
        assert kept.bitmap().tolist() == ann_stage.pack(bits[:size]).tolist()
