"""A recall's vector channel beside its BM25 channel: same answers, errors and shutdown intact."""

import threading

from engine_helpers import FakeClock, make_engine
import pytest
from robotmem_ros.engine import database, store
from robotmem_ros.engine.side_threads import SideThreads
from robotmem_ros.errors import StorageError

WAIT_S = 30.0  # a hang guard, not a speed assertion

FACTS = ['Use a gentle pinch to pick up eggs', 'The warehouse door closes at 18:00',
         'grab the egg carton by its long side', 'eggs are stored on the top shelf',
         'the gripper pads were replaced on Monday', 'pick up the mug by its handle',
         'the red cup is on the left shelf', 'grip force for the ceramic mug is 12N']


def test_a_call_runs_on_a_spare_thread_and_its_error_reaches_the_caller():
    side = SideThreads(1)
    try:
        assert side.start(threading.get_ident)() != threading.get_ident()

        def fail():
            raise ValueError('from the spare thread')
        waiting = side.start(fail)
        with pytest.raises(ValueError, match='from the spare thread'):
            waiting()
        assert side.start(threading.get_ident)() != threading.get_ident()  # freed after a failure
    finally:
        side.close()


def test_a_caller_that_finds_no_free_thread_runs_the_call_itself_when_it_asks():
    side = SideThreads(1)
    release, started = threading.Event(), threading.Event()

    def hold():
        started.set()
        return release.wait(WAIT_S)
    try:
        held = side.start(hold)
        assert started.wait(WAIT_S)
        ran = []
        busy = side.start(lambda: ran.append(threading.get_ident()) or 'done')
        assert not ran  # nothing queued behind the busy thread, nothing run yet
        assert busy() == 'done' and ran == [threading.get_ident()]
        release.set()
        assert held() is True
    finally:
        release.set()
        side.close()


@pytest.mark.parametrize('count', [0, 1])
def test_no_spare_threads_or_a_closed_pool_run_in_the_caller(count):
    side = SideThreads(count)
    side.close()
    assert side.start(threading.get_ident)() == threading.get_ident()


@pytest.fixture
def twin_engines(tmp_path):
    """Store the same facts twice: one store recalls with a spare thread, the other without."""
    engines = [make_engine(tmp_path, embed=True, name=f'{threads}.db', side_threads=threads,
                           clock=FakeClock()) for threads in (1, 0)]  # the same ages
    for engine in engines:
        for i, fact in enumerate(FACTS):
            engine.learn(fact, {'robot': 'ur5e' if i % 2 else 'sim'}, session_id='s1')
    yield engines
    for engine in engines:
        engine.close()


@pytest.mark.parametrize('query, kwargs', [
    ('how should I pick up eggs', {}),
    ('which shelf', {'context_filter': {'robot': 'ur5e'}}),
    ('mug', {'session_id': 's1', 'n': 3}),
    ('nothing shares these words', {}),
])
def test_recall_with_a_spare_thread_answers_as_without(twin_engines, query, kwargs):
    beside, serial = (engine.recall(query, **kwargs) for engine in twin_engines)
    assert beside.mode == serial.mode == 'hybrid'
    assert [(m.content, m.rrf_score) for m in beside.memories] == [
        (m.content, m.rrf_score) for m in serial.memories]
    assert beside.memories  # the vector channel always finds the nearest


def test_the_vector_channel_runs_beside_the_bm25_channel(embedded, monkeypatch):
    for fact in FACTS:
        embedded.learn(fact)
    threads = {}
    for name in ('vec_search', 'fts_search'):
        def spy(*args, original=getattr(store, name), name=name, **kwargs):
            threads[name] = threading.current_thread().name
            return original(*args, **kwargs)
        monkeypatch.setattr(store, name, spy)
    assert embedded.recall('how should I pick up eggs').total
    assert threads['vec_search'].startswith('robotmem-side')
    assert threads['fts_search'] == threading.current_thread().name


def test_a_storage_error_on_the_spare_thread_is_a_typed_error(embedded, monkeypatch):
    embedded.learn(FACTS[0])

    def broken(*args, **kwargs):
        raise database.sqlite3.OperationalError('disk I/O error')
    monkeypatch.setattr(store, 'vec_search', broken)
    with pytest.raises(StorageError):
        embedded.recall('eggs')
    monkeypatch.undo()
    assert embedded.recall('eggs').total == 1  # the store and its threads still answer


def test_close_ends_the_spare_threads(tmp_path):
    engine = make_engine(tmp_path, embed=True)
    engine.learn(FACTS[0])
    assert engine.recall('eggs').total == 1
    spare = list(engine._ctx.side._pool._threads)
    assert spare and all(thread.is_alive() for thread in spare)
    engine.close()
    assert not any(thread.is_alive() for thread in spare)
    with pytest.raises(StorageError, match='closed'):
        engine.recall('eggs')


def spy_on_vector_search(monkeypatch, engine):
    """Record, per vector search, its thread's name and whether it ran on the writer."""
    seen = []

    def spy(conn, *args, original=store.vec_search, **kwargs):
        seen.append((threading.current_thread().name, conn is engine.db._writer))
        return original(conn, *args, **kwargs)
    monkeypatch.setattr(store, 'vec_search', spy)
    return seen


def test_a_learns_neighbours_are_searched_beside_its_jaccard_layer(embedded, monkeypatch):
    embedded.learn(FACTS[0])
    seen = spy_on_vector_search(monkeypatch, embedded)
    assert embedded.learn(FACTS[1]).status == 'created'
    assert len(seen) == 1 and seen[0][0].startswith('robotmem-side') and not seen[0][1]


def test_a_learn_inside_a_write_that_changed_rows_searches_on_the_writer(embedded, monkeypatch):
    seen = spy_on_vector_search(monkeypatch, embedded)
    with embedded.db.write():
        embedded.learn(FACTS[0])  # a reader would not see this row until the commit
        embedded.learn(FACTS[1])
    assert seen[1] == (threading.current_thread().name, True)


def test_learn_verdicts_with_a_spare_thread_are_those_without(twin_engines):
    texts = ['Use a gentle pinch to pick up eggs',  # stored already: exact
             'use a gentle pinch to pick up the eggs',  # a near copy
             'Grab eggs with a gentle pinch',  # a paraphrase
             'Use a firm grip to pick up eggs',  # a different fact that looks alike
             'the blue box is on the bottom shelf']
    beside, serial = ([engine.learn(text, session_id='s2') for text in texts]
                      for engine in twin_engines)
    assert [(r.status, r.method, r.existing_id, r.similarity) for r in beside] == [
        (r.status, r.method, r.existing_id, r.similarity) for r in serial]
    assert [[m.id for m in r.similar_facts] for r in beside] == [
        [m.id for m in r.similar_facts] for r in serial]
    assert {r.method for r in beside} > {'', 'exact'}  # a layer past the exact one decided
