"""Scale edges of the store: vector index, '*' listing, collection cost and cap (issues 13, 15)."""

from __future__ import annotations

import threading
import time

from engine_helpers import bulk_vectors, make_engine, with_context
import numpy as np
import pysqlite3.dbapi2 as sqlite3
import pytest
from robotmem_ros.engine import schema, store, text as textmod, vector_store
from robotmem_ros.errors import ValidationError
from robotmem_ros.types import PerceptionInput
import sqlite_vec


def _unit(rng: np.random.Generator, rows: int, dim: int = 384) -> np.ndarray:
    vectors = rng.standard_normal((rows, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _exact(vectors: np.ndarray, ids: list[int], query: np.ndarray, k: int) -> list[int]:
    order = np.argsort(-(vectors @ query), kind='stable')[:k]
    return [ids[i] for i in order]


def test_small_sets_are_searched_exactly_and_large_ones_nearly(tmp_path):
    rng = np.random.default_rng(7)
    engine = make_engine(tmp_path)
    small = _unit(rng, 200)
    small_ids = bulk_vectors(engine, small, 'small')
    # Topics, as real memories have them: 100 centres with 30 variations each.
    centres = _unit(rng, 100)
    large = np.repeat(centres, 30, axis=0) + 0.05 * rng.standard_normal((3000, 384))
    large = (large / np.linalg.norm(large, axis=1, keepdims=True)).astype(np.float32)
    large_ids = bulk_vectors(engine, large, 'large')
    conn = engine.db.reader()
    overlap = []
    near = centres[:20] + 0.05 * rng.standard_normal((20, 384))
    for query in (near / np.linalg.norm(near, axis=1, keepdims=True)).astype(np.float32):
        got = [i for i, _ in store.vec_search(conn, query, 'small', 10)]
        assert got == _exact(small, small_ids, query, 10)
        got = [i for i, _ in store.vec_search(conn, query, 'large', 10)]
        overlap.append(len(set(got) & set(_exact(large, large_ids, query, 10))) / 10)
    # Queries near a topic, as a recall is near what was stored (bench: real texts).
    assert np.mean(overlap) >= 0.9
    engine.close()


def _count_rescores(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many float rows each of the index's reads from SQLite asks for."""
    from robotmem_ros.engine import vector_index
    counts: list[int] = []
    real_rescore = vector_index.VectorIndex._rescore

    def counting(self, conn, vector, ids, seqs, where):
        counts.append(len(ids))
        return real_rescore(self, conn, vector, ids, seqs, where)

    monkeypatch.setattr(vector_index.VectorIndex, '_rescore', counting)
    return counts


def test_rescoring_pool_grows_with_the_searched_set(tmp_path, monkeypatch):
    """The floats re-read per search are a share of the set, not a constant (recall at 1M)."""
    from robotmem_ros.engine import vector_index
    monkeypatch.setattr(vector_index, 'RESCORE_MIN', 16)
    rescored = _count_rescores(monkeypatch)
    rng = np.random.default_rng(11)
    engine = make_engine(tmp_path, int8_max_vectors=0)  # without it every candidate is read
    bulk_vectors(engine, _unit(rng, 1000), 'thousand')
    bulk_vectors(engine, _unit(rng, 16_000), 'large')
    query = _unit(rng, 1)[0]
    for collection, pool in (('thousand', 16), ('large', 16_000 // 400)):
        rescored.clear()
        assert len(store.vec_search(engine.db.reader(), query, collection, 1)) == 1
        assert rescored[0] == pool
    engine.close()


def _topics(rng: np.random.Generator, topics: int, each: int) -> np.ndarray:
    """Clusters of close vectors, as real memories have them (the hard case for estimates)."""
    vectors = np.repeat(_unit(rng, topics), each, axis=0)
    vectors += 0.05 * rng.standard_normal(vectors.shape).astype(np.float32)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize('levels', [127, 3])
def test_best_first_rescoring_returns_what_rescoring_every_candidate_does(
        tmp_path, monkeypatch, levels):
    """
    The 8-bit copy decides only which floats are read: every top k is unchanged.

    With codes of -3 .. 3 instead of -127 .. 127 the estimates order the candidates badly, so
    only the stopping bound keeps the results right (stopping at the first k found fails).
    """
    import functools
    from robotmem_ros.engine import vector_index
    monkeypatch.setattr(vector_index, '_quantized',
                        functools.partial(vector_index._quantized, levels=levels))
    reads = _count_rescores(monkeypatch)
    rng = np.random.default_rng(5)
    vectors = _topics(rng, 50, 40)
    with_copy = make_engine(tmp_path, name='copy.db')
    without = make_engine(tmp_path, name='floats.db', int8_max_vectors=0)
    assert bulk_vectors(with_copy, vectors) == bulk_vectors(without, vectors)
    queries = vectors[rng.choice(len(vectors), 30)] + 0.05 * rng.standard_normal((30, 384))
    read = {'copy': 0, 'floats': 0}
    for k in (1, 3, 10, 50):
        for query in queries.astype(np.float32):
            got = {}
            for name, engine in (('copy', with_copy), ('floats', without)):
                reads.clear()
                got[name] = store.vec_search(engine.db.reader(), query, 'default', k)
                read[name] += sum(reads)
            assert [i for i, _ in got['copy']] == [i for i, _ in got['floats']]
            assert [c for _, c in got['copy']] == pytest.approx([c for _, c in got['floats']])
    assert read['copy'] < read['floats'] / (4 if levels == 127 else 1.1)
    assert with_copy.db.vectors.stats()['int8_bytes'] >= 2000 * 384
    assert without.db.vectors.stats()['int8_bytes'] == 0
    with_copy.close()
    without.close()


def test_the_8_bit_copy_is_kept_only_up_to_its_bound(tmp_path):
    rng = np.random.default_rng(6)
    vectors = _unit(rng, 150)
    engine = make_engine(tmp_path, int8_max_vectors=100)
    ids = bulk_vectors(engine, vectors[:80])
    conn = engine.db.reader()
    store.vec_search(conn, vectors[0], 'default', 5)
    assert engine.db.vectors.stats()['int8_bytes'] > 0
    ids += bulk_vectors(engine, vectors[80:])  # past the bound: dropped, searches stay exact
    for query in vectors[:10]:
        got = [i for i, _ in store.vec_search(conn, query, 'default', 10)]
        assert got == _exact(vectors, ids, query, 10)
    assert engine.db.vectors.stats()['int8_bytes'] == 0
    engine.close()
    reopened = make_engine(tmp_path, int8_max_vectors=100)  # over it at start: never built
    assert [i for i, _ in store.vec_search(reopened.db.reader(), vectors[3], 'default', 1)
            ] == [ids[3]]
    assert reopened.db.vectors.stats()['int8_bytes'] == 0
    reopened.close()


def test_8_bit_codes_are_within_half_a_step_and_unknown_vectors_are_marked():
    from robotmem_ros.engine.vector_index import _quantized, to_blob
    rng = np.random.default_rng(8)
    vectors = _unit(rng, 20, dim=16)
    blobs = [to_blob(v) for v in vectors] + [None, to_blob(vectors[0][:8])]
    codes, scale = _quantized(blobs, 16)
    error = np.abs(codes[:20] * scale[:20, None] - vectors)
    assert np.all(error <= scale[:20, None] / 2 + 1e-7)
    assert np.abs(codes[:20]).max() == 127
    assert list(scale[20:]) == [0.0, 0.0]  # missing, other width: always read


def test_sign_bit_candidates_come_by_distance_then_position():
    """The counted cut gives the order a full sort would: a first batch of exactly pool."""
    from robotmem_ros.engine.vector_index import _nearest_first
    rng = np.random.default_rng(9)
    for _ in range(200):
        size, pool = int(rng.integers(1, 3000)), int(rng.integers(1, 300))
        distance = rng.integers(0, int(rng.integers(1, 385)), size=size).astype(np.uint16)
        batches = list(_nearest_first(distance, pool))
        assert len(batches[0]) == min(pool, size)
        assert all(len(batch) <= 4 * pool for batch in batches[1:])
        assert np.array_equal(np.concatenate(batches),
                              np.lexsort((np.arange(size), distance)))


def test_filtered_search_returns_k_when_k_exist(tmp_path):
    rng = np.random.default_rng(1)
    engine = make_engine(tmp_path)
    bulk_vectors(engine, _unit(rng, 2000), 'shared')
    session = engine.start_session(collection='shared').session_id
    mine = bulk_vectors(engine, _unit(rng, 15), 'shared', session)
    conn = engine.db.reader()
    hits = store.vec_search(conn, _unit(rng, 1)[0], 'shared', 10, session_id=session)
    assert len(hits) == 10 and {i for i, _ in hits} <= set(mine)
    assert len(store.vec_search(conn, _unit(rng, 1)[0], 'shared', 50, session_id=session)) == 15
    assert store.vec_search(conn, _unit(rng, 1)[0], 'shared', 5, type_='fact') == []
    engine.close()


def test_a_kept_mask_is_extended_by_the_rows_appended_since(tmp_path, monkeypatch):
    """A selection's mask is reused: only new rows are tested, new names included."""
    rng = np.random.default_rng(11)
    engine = make_engine(tmp_path)
    vectors = _unit(rng, 240)
    first = bulk_vectors(engine, vectors[:120], 'shared')
    session = engine.start_session(collection='shared').session_id
    index = engine.db.vectors
    tested: list[int] = []
    mask_of = index._mask_of
    monkeypatch.setattr(index, '_mask_of',
                        lambda part, *rest: tested.append(part.stop - part.start)
                        or mask_of(part, *rest))
    conn, query = engine.db.reader(), _unit(rng, 1)[0]

    def nearest(collection: str, **where) -> list[int]:
        return [i for i, _ in store.vec_search(conn, query, collection, 5, **where)]
    # Neither the session nor the second collection holds a vector yet.
    assert nearest(collection='other') == []
    assert nearest(collection='shared', session_id=session) == []
    assert nearest(collection='shared') == _exact(vectors[:120], first, query, 5)
    assert tested == [120, 120, 120]
    mine = bulk_vectors(engine, vectors[120:180], 'shared', session)
    other = bulk_vectors(engine, vectors[180:], 'other')
    tested.clear()
    assert nearest(collection='other') == _exact(vectors[180:], other, query, 5)
    assert nearest(collection='shared', session_id=session) == _exact(
        vectors[120:180], mine, query, 5)
    assert nearest(collection='shared') == _exact(vectors[:180], first + mine, query, 5)
    assert tested == [120, 120, 120]  # the appended rows alone
    assert len(store.vec_search(conn, query, 'shared', 100, session_id=session)) == 60
    index.reset()  # a reindex: positions are loaded again, every mask is computed whole
    tested.clear()
    assert nearest(collection='other') == _exact(vectors[180:], other, query, 5)
    assert tested == [240]
    engine.close()


def test_context_equalities_are_tested_before_ranking(tmp_path):
    rng = np.random.default_rng(3)
    engine = make_engine(tmp_path)
    bulk_vectors(engine, _unit(rng, 3000), 'default', data={'robot': 'b', 'ok': True})
    mine = bulk_vectors(engine, _unit(rng, 12), 'default', data={'robot': 'a', 'ok': True})
    one = bulk_vectors(engine, _unit(rng, 1), 'default', data={'robot': 'a', 'ok': 1})
    hits = store.vec_search(engine.db.reader(), _unit(rng, 1)[0], 'default', 10,
                            context=[('$.data.robot', 'a')])
    assert len(hits) == 10 and {i for i, _ in hits} <= set(mine + one)
    recalled = engine.recall('reading', n=20, context_filter={'data.robot': 'a', 'data.ok': True})
    assert sorted(m.id for m in recalled.memories) == mine  # 1 is not true (JSON equality)
    listed = engine.recall('*', n=20, context_filter={'data.robot': 'a'})
    assert sorted(m.id for m in listed.memories) == sorted(mine + one)
    engine.close()


def test_filter_ids_answer_context_equalities_before_ranking(tmp_path, monkeypatch):
    """Paths with filter ids are tested on the index: only matching rows are read."""
    rng = np.random.default_rng(4)
    engine = make_engine(tmp_path)
    with_context(engine, _unit(rng, 3000), {'robot': 'b', 'task': {'success': True}})
    vectors = _unit(rng, 14)
    mine = with_context(engine, vectors[:12], {'robot': 'a', 'task': {'success': True}})
    one = with_context(engine, vectors[12:13], {'robot': 'a', 'task': {'success': 1}})
    with_context(engine, vectors[13:], {'robot': {'id': 'a'}, 'task': {'success': True}})
    counts = _count_rescores(monkeypatch)
    conn, query = engine.db.reader(), _unit(rng, 1)[0]
    hits = store.vec_search(conn, query, 'default', 10, context=[('$.robot', 'a')])
    assert [i for i, _ in hits] == _exact(vectors[:13], mine + one, query, 10)
    assert sum(counts) <= 13  # no row of robot b (or robot {"id": "a"}) was read
    counts.clear()
    assert store.vec_search(conn, query, 'default', 10, context=[('$.robot', 'c')]) == []
    assert store.vec_search(conn, query, 'default', 10,
                            context=[('$.robot', 'a'), ('$.task.success', 2)]) == []
    assert counts == []  # values no vector row holds: answered without a read
    hits = store.vec_search(conn, query, 'default', 20,  # 1 equals true in SQL, as before
                            context=[('$.robot', 'a'), ('$.task.success', True)])
    assert sorted(i for i, _ in hits) == mine + one
    recalled = engine.recall('reading', n=20, context_filter={'robot': 'a', 'task.success': True})
    assert sorted(m.id for m in recalled.memories) == mine  # but not in JSON
    engine.close()


def test_filtered_bm25_ranks_the_index_matches_and_the_unembedded(tmp_path, monkeypatch):
    """Restricted to filter_candidates, BM25 returns what testing every match returns."""
    rng = np.random.default_rng(6)
    engine = make_engine(tmp_path)
    texts = [f'reading {"filler " * i}{i}' for i in range(260)]  # distinct BM25 scores
    # The best matches of robot a are in the yard: a search for the lab ranks past them.
    yard = with_context(engine, _unit(rng, 150), {'robot': 'a', 'site': 'yard'}, texts[:150])
    with_context(engine, _unit(rng, 50), {'robot': 'b', 'site': 'lab'}, texts[150:200])
    held = with_context(engine, _unit(rng, 40), {'robot': 'a', 'site': 'lab'}, texts[200:240])
    pending = with_context(engine, None, {'robot': 'a', 'site': 'lab'}, texts[240:250],
                           embedded=0)
    left = with_context(engine, None, {'robot': 'a', 'site': 'lab'}, texts[250:], embedded=-2)
    conn, now, query = engine.db.reader(), time.time(), textmod.fts_query('reading')
    pairs = [('$.robot', 'a')]
    within = store.filter_candidates(conn, 'default', pairs)
    assert sorted(within) == sorted(yard + held + pending + left)
    for limit in (5, 30, 80):
        for extra in ([], [('$.site', 'lab')]):  # a path without filter ids: SQL tests it
            expected = store.fts_search(conn, query, 'default', limit, now=now,
                                        context=pairs + extra)
            assert store.fts_search(conn, query, 'default', limit, now=now,
                                    context=pairs + extra, within=lambda: within) == expected
    assert len(expected) == 60
    recalled = engine.recall('reading', n=80, context_filter={'robot': 'a', 'site': 'lab'})
    assert sorted(m.id for m in recalled.memories) == sorted(held + pending + left)
    assert store.filter_candidates(conn, 'default', [('$.robot', 'c')]) == pending + left
    assert store.filter_candidates(conn, 'default', [('$.data.robot', 'a')]) is None
    monkeypatch.setattr(store, 'UNINDEXED_MAX', 19)  # a BM25-only store: every match tested
    assert store.filter_candidates(conn, 'default', pairs) is None
    engine.close()


def test_filter_ids_follow_a_changed_context(tmp_path):
    engine = make_engine(tmp_path, embed=True)
    memory_id = engine.learn('the torque wrench lives in the second drawer',
                             context={'robot': 'a'}).memory_id
    engine.update(memory_id, 'the torque wrench lives in the third drawer', {'robot': 'b'})
    query = engine.embedding.embed_query('torque wrench')
    conn = engine.db.reader()
    assert store.vec_search(conn, query, 'default', 5, context=[('$.robot', 'a')]) == []
    assert store.vec_search(conn, query, 'default', 5,
                            context=[('$.robot', 'b')])[0][0] == memory_id
    engine.close()


def test_filter_ids_are_filled_for_a_store_of_schema_4(tmp_path):
    """The migration fills every vector row; a context that is not JSON gets no ids."""
    rng = np.random.default_rng(5)
    engine = make_engine(tmp_path)
    vectors = _unit(rng, 6)
    real = with_context(engine, vectors[:3], {'env': {'sim_or_real': 'real'},
                                              'task': {'name': 'pick', 'success': False}})
    sim = with_context(engine, vectors[3:5], {'env': {'sim_or_real': 'sim'}})
    broken = with_context(engine, vectors[5:], {})
    engine.close()
    conn = sqlite3.connect(str(tmp_path / 'memory.db'), isolation_level=None)
    conn.execute('PRAGMA user_version=4')
    conn.execute('DROP TABLE fleet_copies')  # schema 11 undone
    conn.execute('DROP INDEX idx_memories_retention')  # schema 10 undone
    conn.execute('ALTER TABLE memories DROP COLUMN stored_at')  # schema 9 undone
    for name in ('insert', 'update', 'delete'):  # schema 7 (text index log) undone
        conn.execute(f'DROP TRIGGER text_log_{name}')
    conn.execute('DROP TABLE text_changes')
    conn.execute('DROP INDEX idx_memories_adjacent')  # schema 6 undone
    conn.execute('DROP TABLE context_values')
    conn.execute('DROP INDEX idx_memories_unembedded')
    conn.execute('DROP INDEX idx_vectors_unfiltered')
    conn.execute('ALTER TABLE memory_vectors DROP COLUMN filters')
    conn.execute("UPDATE memories SET context_json = '{not json' WHERE id = ?", broken)
    conn.close()
    engine = make_engine(tmp_path)
    reader, query = engine.db.reader(), _unit(rng, 1)[0]
    found = store.vec_search(reader, query, 'default', 10,
                             context=[('$.env.sim_or_real', 'real'), ('$.task.name', 'pick'),
                                      ('$.task.success', False)])
    assert sorted(i for i, _ in found) == real
    found = store.vec_search(reader, query, 'default', 10,
                             context=[('$.env.sim_or_real', 'sim')])
    assert sorted(i for i, _ in found) == sim
    blobs = dict(reader.execute('SELECT memory_id, filters FROM memory_vectors'))
    ids = {key: np.frombuffer(blob, dtype='<i4').tolist() for key, blob in blobs.items()}
    assert ids[broken[0]] == [0] * len(schema.CONTEXT_PATHS)
    assert ids[real[0]] == ids[real[2]] and ids[real[0]][:2] == [0, 0]
    assert len(set(ids[real[0]][2:])) == 3 and ids[real[0]][4] != ids[sim[0]][4]
    with engine.db.write() as conn:  # a new vector of the broken one is stored without ids too
        store.put_vector(conn, broken[0], vectors[5])
    assert len(store.vec_search(engine.db.reader(), query, 'default', 10)) == 6
    engine.close()


def test_stale_entries_are_never_returned(tmp_path):
    engine = make_engine(tmp_path, embed=True)
    first = engine.learn('the red cup is on the left shelf').memory_id
    second = engine.learn('the gripper must close at 12.5N for cups').memory_id
    query = engine.embedding.embed_query('red cup shelf')
    assert store.vec_search(engine.db.reader(), query, 'default', 5)[0][0] == first
    engine.forget(first)
    assert [i for i, _ in store.vec_search(engine.db.reader(), query, 'default', 5)] == [second]
    engine.update(second, 'the blue box sits under the table')
    hits = store.vec_search(engine.db.reader(), engine.embedding.embed_query('blue box'),
                            'default', 5)
    assert [i for i, _ in hits] == [second] and hits[0][1] > 0.5
    engine.close()


def test_the_packed_float_read_returns_each_vector_byte_for_byte(tmp_path):
    # Vectors whose bytes hold NULs and are no UTF-8 (zeros, -0.0, 2**-149, NaN) travel
    # through ``||`` and group_concat as text; every byte must come back.
    engine = make_engine(tmp_path)
    rng = np.random.default_rng(11)
    vectors = _unit(rng, 40)
    vectors[0, :] = 0.0
    vectors[1, :8] = [-0.0, np.float32(2.0 ** -149), np.nan, np.inf, 1.0, -1.0, 0.0, 255.0]
    ids = bulk_vectors(engine, vectors, 'packed')
    others = bulk_vectors(engine, _unit(rng, 3), 'elsewhere')
    with engine.db.write() as conn:
        conn.execute("UPDATE memories SET status = 'superseded' WHERE id = ?", (ids[5],))
        # A vector of another width is parsed by its own length, not the others'.
        conn.execute('UPDATE memory_embeddings SET embedding = ? WHERE memory_id = ?',
                     (np.arange(7, dtype='<f4').tobytes(), ids[6]))
    conn = engine.db.reader()
    got = vector_store.active_embeddings(conn, [*ids, *others, 10 ** 9],
                                         (' AND m.collection = ?', ['packed']))
    seqs = dict(conn.execute('SELECT memory_id, seq FROM memory_vectors'))
    stored = dict(conn.execute('SELECT memory_id, embedding FROM memory_embeddings'))
    assert sorted(got) == sorted((memory_id, seqs[memory_id], stored[memory_id])
                                 for memory_id in ids if memory_id != ids[5])
    assert {i: v for i, _, v in got}[ids[1]] == vectors[1].astype('<f4').tobytes()
    assert vector_store.active_embeddings(conn, [ids[5], 10 ** 9], ('', [])) == []
    engine.close()


def test_index_catches_up_with_another_writer(tmp_path):
    node = make_engine(tmp_path, embed=True)
    node.learn('the lab door sticks in the morning')
    assert node.recall('door').total == 1
    cli = make_engine(tmp_path, embed=True)  # a second writer on the same file (the CLI)
    added = cli.learn('forklift zone is off limits after 6pm').memory_id
    cli.close()
    query = node.embedding.embed_query('forklift zone')
    assert store.vec_search(node.db.reader(), query, 'default', 1)[0][0] == added
    node.close()


def test_index_is_rebuilt_from_the_file_at_start(tmp_path):
    engine = make_engine(tmp_path, embed=True)
    wanted = engine.learn('the charging dock is behind the blue door').memory_id
    engine.close()
    again = make_engine(tmp_path, embed=True)
    query = again.embedding.embed_query('where is the charging dock')
    assert store.vec_search(again.db.reader(), query, 'default', 1)[0][0] == wanted
    assert again.db.vectors.stats()['live'] == 1
    again.close()


def test_a_schema_1_vec0_store_is_adopted(tmp_path):
    path = tmp_path / 'old.db'
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    for statement in schema.MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute('PRAGMA user_version=1')
    conn.execute('CREATE VIRTUAL TABLE memories_vec USING vec0(memory_id INTEGER PRIMARY KEY, '
                 'collection TEXT PARTITION KEY, embedding float[384] distance_metric=cosine, '
                 'status TEXT, category TEXT, kind TEXT, session_id TEXT)')
    conn.close()
    engine = make_engine(tmp_path, embed=True, name='old.db')
    text = 'the torque wrench lives in the second drawer'
    memory_id = engine.learn(text).memory_id
    vector = engine.embedding.embed_fact(text)
    engine.close()
    conn = sqlite3.connect(str(path), isolation_level=None)  # put it back the old way
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.execute('PRAGMA user_version=1')
    for statement in ('DROP TABLE fleet_copies',  # schema 11 undone
                      'DROP INDEX idx_memories_retention',  # schema 10 undone
                      'ALTER TABLE memories DROP COLUMN stored_at',  # schema 9 undone
                      'DROP TRIGGER text_log_insert',  # schema 7 (text index log) undone
                      'DROP TRIGGER text_log_update', 'DROP TRIGGER text_log_delete',
                      'DROP TABLE text_changes',
                      'DROP INDEX idx_memories_adjacent',  # schema 6 (adjacency) undone
                      'DROP TABLE context_values',  # schema 5 (filter ids) undone
                      'DROP INDEX idx_memories_unembedded',
                      'DROP INDEX idx_memories_decay',  # schema 4 (decay index) undone
                      'DROP TRIGGER fleet_queue_insert', 'DROP TRIGGER fleet_queue_update',
                      'DROP TABLE fleet_outbox', 'DROP INDEX uq_memories_gid',
                      'ALTER TABLE memories DROP COLUMN gid',
                      'ALTER TABLE memories DROP COLUMN origin'):
        conn.execute(statement)  # schema 3 (fleet) undone first
    conn.execute('DROP TABLE memory_vectors')
    conn.execute('DROP TABLE memory_embeddings')
    conn.execute('DROP TRIGGER memories_collection')
    conn.execute('DROP TABLE collections')
    conn.execute('CREATE VIRTUAL TABLE memories_vec USING vec0(memory_id INTEGER PRIMARY KEY, '
                 'collection TEXT PARTITION KEY, embedding float[384] distance_metric=cosine, '
                 'status TEXT, category TEXT, kind TEXT, session_id TEXT)')
    conn.execute("INSERT INTO memories_vec VALUES (?, 'default', ?, 'active', '', 'semantic', '')",
                 (memory_id, store.to_blob(vector)))
    conn.close()
    engine = make_engine(tmp_path, embed=True, name='old.db')
    hits = store.vec_search(engine.db.reader(), engine.embedding.embed_query('torque wrench'),
                            'default', 1)
    assert hits[0][0] == memory_id and hits[0][1] > 0.5
    reader = engine.db.reader()
    assert reader.execute("SELECT 1 FROM sqlite_master WHERE name = 'memories_vec'"
                          ).fetchone() is None
    assert reader.execute('SELECT name FROM collections').fetchall()[0][0] == 'default'
    assert engine.doctor()['ok']
    engine.close()


@pytest.mark.parametrize('kib', [64, 0])
def test_connections_but_the_writer_keep_the_page_cache_set(tmp_path, kib):
    """``reader_cache_kib`` sizes every other connection's cache; 0 and the writer: SQLite's."""
    default = sqlite3.connect(':memory:').execute('PRAGMA cache_size').fetchone()[0]
    engine = make_engine(tmp_path, reader_cache_kib=kib)
    try:
        background = engine.db._open_reader()  # what the indexes and the checkpointer open
        with engine.db.write() as writer:
            caches = [conn.execute('PRAGMA cache_size').fetchone()[0]
                      for conn in (engine.db.reader(), background, writer)]
        background.close()
    finally:
        engine.close()
    assert caches == [-kib if kib else default] * 2 + [default]


def test_star_listing_with_a_filter_finds_every_match(tmp_path):
    engine = make_engine(tmp_path)
    session = engine.start_session().session_id
    engine.save_perceptions([
        PerceptionInput(description=f'step {i}', session_id=session, data={'i': i},
                        created_at=1_700_000_000.0 + i) for i in range(5000)])
    late = engine.recall('*', n=20, session_id=session, context_filter={'data.i': {'$gte': 4990}})
    assert [m.context['data']['i'] for m in late.memories] == list(range(4990, 5000))
    one = engine.recall('*', n=5, context_filter={'data.i': 2600})
    assert [m.context['data']['i'] for m in one.memories] == [2600]
    engine.close()


def test_collections_are_capped(tmp_path):
    engine = make_engine(tmp_path, max_collections=2)
    engine.learn('the red cup is on the left shelf', collection='kitchen')
    engine.learn('the drill is in the workshop', collection='workshop')
    before = engine.db.reader().execute('SELECT COUNT(*) FROM memories').fetchone()[0]
    with pytest.raises(ValidationError, match='max_collections'):
        engine.learn('a third room', collection='garage')
    with pytest.raises(ValidationError, match='max_collections'):
        engine.save_perception(PerceptionInput(description='a box on the floor',
                                               collection='garage'))
    with pytest.raises(ValidationError, match='max_collections'):
        engine.start_session(collection='garage')
    assert engine.learn('the kettle is by the sink', collection='kitchen').status == 'created'
    assert engine.db.reader().execute('SELECT COUNT(*) FROM memories').fetchone()[0] == before + 1
    assert engine.recall('garage', collection='garage').total == 0  # reading never refused
    engine.close()


def test_a_collection_costs_kilobytes_not_a_vector_chunk(tmp_path):
    engine = make_engine(tmp_path, embed=True)
    engine.learn('warm-up fact so the schema pages exist', collection='c0')
    engine.db.close()
    engine = make_engine(tmp_path, embed=True)
    start = _file_bytes(tmp_path / 'memory.db')
    for i in range(1, 41):
        engine.learn(f'fact number {i} about shelf {i}', collection=f'c{i}')
    engine.close()
    per_collection = (_file_bytes(tmp_path / 'memory.db') - start) / 40
    assert per_collection <= 10_000, per_collection  # vec0 cost 1.67 MB per collection


def _file_bytes(path) -> int:
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute('PRAGMA wal_checkpoint(TRUNCATE)')
    conn.close()
    return path.stat().st_size


def test_consolidation_neighbours_give_the_all_pairs_clusters(tmp_path):
    from engine_helpers import embedder
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.engine.consolidation import (Candidate, greedy_clusters, neighbours,
                                                   similarity_fn)
    objects = ('red cup', 'blue mug', 'steel bowl', 'glass jar', 'wooden box', 'paper towel')
    texts = []
    for i, obj in enumerate(objects):
        texts += [f'pick up the {obj} and put it on the tray at {5 + i} N',
                  f'lift the {obj} and place it on the tray at {5 + i} N',
                  f'grab the {obj} and set it on the tray at {5 + i} N',
                  f'the {obj} is kept on the left shelf of the kitchen',
                  f'the {obj} is stored on the kitchen shelf on the left',
                  f'grasp the {obj} from the side, not from the top']
    records = [f'vision: {obj} detected on the tray' for obj in objects]  # never merged
    texts += records
    vectors = embedder().embed(texts)
    items = [Candidate(i, text, 'observation', 0.5, 0, float(i), vectors[i])
             for i, text in enumerate(texts)]
    config = MemoryConfig()
    sim = similarity_fn(config)
    everything = greedy_clusters(items, sim)
    assert everything  # the rewordings do cluster
    near = neighbours(items, config)
    assert all(not near[i] for i in range(len(texts) - len(records), len(texts)))
    pruned = greedy_clusters(items, sim, near)
    assert [(c.representative.id, [m.id for m in c.members]) for c in pruned] == \
        [(c.representative.id, [m.id for m in c.members]) for c in everything]


@pytest.mark.parametrize('threshold', [0.0, 0.3, 0.6, 1.0])
def test_consolidation_jaccard_matrix_is_the_pairwise_jaccard(threshold):
    from robotmem_ros.engine import judgment, text
    from robotmem_ros.engine.consolidation import _jaccard_above, Candidate
    texts = ['the red cup is on the left shelf', 'the red cup is on the right shelf',
             'a red cup on the left shelf', 'the the the', 'grip force 12 N for the cup',
             'grip force 14 N for the cup', 'the shelf', 'left shelf red cup']
    items = [Candidate(i, t, 'observation', 0.5, 0, 0.0) for i, t in enumerate(texts)]
    above = _jaccard_above(items, threshold)
    sets = [judgment.features(t).jaccard for t in texts]
    expected = [[j > i and text.jaccard(sets[i], sets[j]) > threshold
                 for j in range(len(texts))] for i in range(len(texts))]
    assert above.tolist() == expected


def test_retention_deletes_old_untouched_perceptions_only(tmp_path):
    from engine_helpers import FakeClock
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock, perception_retention_days=7.0)
    session = engine.start_session().session_id
    engine.save_perceptions([PerceptionInput(f'camera frame {i} of the shelf',
                                             session_id=session) for i in range(20)])
    engine.save_perception(PerceptionInput('the door sensor reported open', session_id=session))
    fact = engine.learn('the shelf is empty on mondays', session_id=session).memory_id
    touched = engine.recall('door sensor open', n=1).memories[0].id
    clock.advance_days(3)
    assert engine.end_session(session).pruned_perceptions == 0  # not old enough yet
    clock.advance_days(5)
    result = engine.end_session(engine.start_session().session_id)
    assert result.pruned_perceptions == 20 and result.summary['pruned_perceptions'] == 20
    plan = ' '.join(row[-1] for row in engine.db.reader().execute(
        'EXPLAIN QUERY PLAN SELECT id FROM memories INDEXED BY idx_memories_retention '
        f'WHERE {schema.UNTOUCHED_PERCEPTION} AND {schema.STORED} < 0 ORDER BY {schema.STORED}'))
    assert 'idx_memories_retention' in plan and 'TEMP B-TREE' not in plan  # no scan, no sort
    left = {row[0] for row in engine.db.reader().execute('SELECT id FROM memories')}
    assert left == {fact, touched}
    reader = engine.db.reader()
    for table, column in (('tags', 'memory_id'), ('history', 'memory_id'),
                          ('memories_fts', 'rowid')):
        kept = {row[0] for row in reader.execute(f'SELECT DISTINCT {column} FROM {table}')}
        assert kept <= left, table
    assert engine.recall('camera frame shelf', n=10).total == 1  # only the fact is left
    engine.close()


def test_retention_counts_a_replayed_bag_from_when_it_was_stored(tmp_path):
    # A bag recorded 60 days ago and replayed today keeps its header stamps; with 30 days of
    # retention its own EndSession must not delete it, and 30 days later it goes as any other.
    from engine_helpers import FakeClock
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock, perception_retention_days=30.0)
    session = engine.start_session().session_id
    recorded = clock.now - 60 * 86_400.0
    replayed = engine.save_perceptions([PerceptionInput(
        f'pallet {i} seen at dock 3', session_id=session, created_at=recorded + i)
        for i in range(5)])
    result = engine.end_session(session)
    assert result.pruned_perceptions == 0 and result.summary['perceptions'] == 5
    assert [m.id for m in engine.recall('*', n=10, session_id=session).memories] == replayed
    clock.advance_days(31)
    assert engine.end_session(engine.start_session().session_id).pruned_perceptions == 5
    engine.close()


def test_retention_keeps_a_touched_perception_whose_hits_are_not_written_yet(
        tmp_path, monkeypatch):
    # The hit counts are written off the request path, and not at all while the store is busy
    # (the ingest writing a batch when end_session asks): a perception a recall returned must
    # be kept all the same.
    from engine_helpers import FakeClock
    from robotmem_ros.engine import access_counts
    monkeypatch.setattr(access_counts, 'FLUSH_DELAY_S', 3600.0)  # the thread never writes
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock, perception_retention_days=1.0)
    session = engine.start_session().session_id
    engine.save_perceptions([PerceptionInput(f'forklift {i} parked at bay seven',
                                             session_id=session) for i in range(3)])
    clock.advance_days(3)
    touched = {m.id for m in engine.recall('forklift 1 parked at bay seven', n=1).memories}
    monkeypatch.setattr(engine._ctx.access, 'flush', lambda: False)  # the store was busy
    assert engine.end_session(session).pruned_perceptions == 2
    left = {row[0] for row in engine.db.reader().execute('SELECT id FROM memories')}
    assert left == touched and len(touched) == 1
    monkeypatch.undo()
    engine.close()


def test_embedding_backlog_is_bounded_and_reported(tmp_path):
    engine = make_engine(tmp_path, embed=True, max_pending_embeddings=5)
    engine.save_perceptions([PerceptionInput(f'gripper camera frame {i} shows the red cup')
                             for i in range(12)])
    assert engine.status().pending_embeddings == 12
    assert engine.embed_pending(limit=100) == 5  # the 7 oldest are left to BM25
    status = engine.status()
    assert status.pending_embeddings == 0 and status.embed_skipped == 7
    assert engine.recall('frame 0 red cup', n=12).total == 12  # all still findable by BM25
    engine.close()


def test_a_writer_finds_the_vectors_its_own_transaction_stored(tmp_path):
    """
    A writer finds the vectors stored earlier in its transaction, filters applied.

    The index loads committed rows through a reader; a fleet pull stores two robots'
    paraphrases in one transaction, and dedup must see the first one.
    """
    rng = np.random.default_rng(21)
    vectors = _unit(rng, 4)
    engine = make_engine(tmp_path)
    bulk_vectors(engine, vectors[:1])  # a committed row the index holds
    engine.db.vectors.refresh()

    def stored(conn, vector, collection, type_='fact'):
        memory_id = store.insert_memory(
            conn, type_=type_, content=f'fact {collection} {type_}', collection=collection,
            session_id='', category='', perception_type='', kind='semantic', confidence=0.9,
            context={}, created_at=1.0)
        store.put_vector(conn, memory_id, vector)
        return memory_id

    with engine.db.write() as conn:
        own = stored(conn, vectors[1], 'default')
        stored(conn, vectors[1], 'other')  # another collection
        seen = stored(conn, vectors[1], 'default', type_='perception')  # another type
        found = store.vec_search(conn, vectors[1], 'default', 5, type_='fact')
        assert [i for i, _ in found] == [own] and found[0][1] > 0.999
        assert {i for i, _ in store.vec_search(conn, vectors[1], 'default', 5)} == {own, seen, 1}
        store.set_status(conn, own, 'forgotten', now=2.0)
        assert own not in [i for i, _ in store.vec_search(conn, vectors[1], 'default', 5)]
    # Outside the transaction the committed rows come from the index as before.
    assert {i for i, _ in store.vec_search(engine.db.reader(), vectors[1], 'default', 5)
            } == {seen, 1}
    engine.close()


def test_a_search_in_flight_keeps_its_positions_across_a_reset(tmp_path, monkeypatch):
    """
    A search reads the positions its mask was taken on, even if a reset reloads the index.

    A reset (reindex) and a reload by another thread between a search's mask and its
    rescoring used to refill the arrays in place: the search rescored the row of another
    collection now held at a position of its own.
    """
    from robotmem_ros.engine import vector_index
    vectors = _unit(np.random.default_rng(29), 2)
    engine = make_engine(tmp_path)
    index = engine.db.vectors
    (gone,) = bulk_vectors(engine, vectors[:1], 'mine')  # position 0
    (other,) = bulk_vectors(engine, vectors[1:], 'other')  # position 1
    index.refresh()
    with engine.db.write() as conn:  # position 0 is now a stale entry of 'mine'
        store.delete_vector(conn, gone)
    reloading = threading.Thread(target=lambda: (index.reset(), index.refresh()), daemon=True)
    real = vector_index._hamming

    def hamming(codes, query, rows):  # the search has its mask and arrays, no lock held
        if reloading.ident is None:
            reloading.start()
            reloading.join(30)
        return real(codes, query, rows)

    monkeypatch.setattr(vector_index, '_hamming', hamming)
    assert store.vec_search(engine.db.reader(), vectors[1], 'mine', 5) == []
    assert reloading.ident is not None and not reloading.is_alive()
    assert index.stats()['entries'] == 1  # the reload holds 'other' alone, at position 0
    assert [i for i, _ in store.vec_search(engine.db.reader(), vectors[1], 'other', 5)
            ] == [other]
    engine.close()


def test_a_reset_waits_for_a_refresh_between_reading_rows_and_holding_them(
        tmp_path, monkeypatch):
    """
    A reset (reindex) landing while a refresh holds rows it read waits for the refresh.

    It used to drop the held rows there: the rows read were then held from position 0, with
    their seq as the last one loaded, and every older row was left out of the index for good.
    """
    vectors = _unit(np.random.default_rng(31), 11)
    engine = make_engine(tmp_path)
    index = engine.db.vectors
    bulk_vectors(engine, vectors[:10])
    index.refresh()
    bulk_vectors(engine, vectors[10:])  # one row past those held
    asked = threading.Event()  # set when the reset asks for the refresh lock, or is done
    resetting = threading.Thread(target=lambda: (index.reset(), asked.set()), daemon=True)

    class Announced:
        """The index's refresh lock, telling when the resetting thread asks for it."""

        def __init__(self, lock):
            self.lock = lock

        def __enter__(self):
            if threading.current_thread() is resetting:
                asked.set()
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    monkeypatch.setattr(index, '_refresh_lock', Announced(index._refresh_lock))
    real = vector_store.codes_since

    def codes_since(conn, after, limit, floats=False):
        rows = real(conn, after, limit, floats)
        if rows and resetting.ident is None:  # read, not yet held: the reset lands now
            resetting.start()
            assert asked.wait(30)
        return rows

    monkeypatch.setattr(vector_store, 'codes_since', codes_since)
    index.refresh()
    resetting.join(30)
    assert resetting.ident is not None and not resetting.is_alive()
    hits = store.vec_search(engine.db.reader(), vectors[0], 'default', 11)
    assert len(hits) == 11 and index.stats()['entries'] == 11
    engine.close()
