"""
The text index (engine/text_index.py) proposes the candidates FTS5 would, and never a stale one.

Real SQLite stores and real tantivy indexes; the threshold is lowered so that a few hundred rows
make a store "large". The reference is FTS5's own ranking of every match.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import time
from typing import Any

from engine_helpers import make_engine, wait_for_text_index
import pytest
from robotmem_ros.engine import store, text_index, text_log_store
from robotmem_ros.engine import text as textmod
from test_fts_ranking import fill_two_collections

pytestmark = pytest.mark.skipif(not text_index.available(), reason='tantivy is not installed')

QUERIES = ('grip force for the cup', 'joint speed of the arm', 'where is the gripper',
           'battery level after the run', 'shelf', 'camera', 'the red cup is on the left shelf')
MIN_ROWS = 200


@pytest.fixture(autouse=True)
def _quick_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_index, 'CATCH_UP_S', 0.05)
    monkeypatch.setattr(text_index, 'PRUNE_AFTER_S', 0.0)


def _indexed(tmp_path: pathlib.Path) -> tuple[Any, Any, float, list[int]]:
    """Open an engine on a store over the threshold, its index current: engine, reader, ..."""
    engine = make_engine(tmp_path, text_index_min_rows=MIN_ROWS)
    now = time.time()
    ids = fill_two_collections(engine, now)
    conn = engine.db.reader()
    wait_for_text_index(engine, conn)
    return engine, conn, now, ids


def _every_match(conn: Any, query: str, collection: str, now: float,
                 context: tuple[tuple[str, Any], ...]) -> dict[int, float]:
    equalities, values = store.context_sql(context)
    rows = conn.execute(
        'SELECT m.id, bm25(memories_fts) FROM memories_fts CROSS JOIN memories m '
        'ON m.id = memories_fts.rowid WHERE memories_fts MATCH ? AND m.collection = ? '
        f'AND {store.ACTIVE_SQL.replace(":now", "?")}{equalities}',
        (query, collection, now, *values)).fetchall()
    return dict(rows)


def _check_against_fts5(conn: Any, now: float, rel: float = 1e-4,
                        context: tuple[tuple[str, Any], ...] = ()) -> int:
    """
    Every answer holds real matches with FTS5's scores, and the best ones FTS5 has.

    ``rel``: documents deleted from the index but not yet merged away still count in its
    average document length, so after changes its scores are FTS5's within a few percent.
    """
    checked = 0
    for text in QUERIES:
        query = textmod.fts_query(text)
        for collection in ('a', 'b'):
            every = _every_match(conn, query, collection, now, context)
            for limit in (1, 5, 20):
                got = store.fts_search(conn, query, collection, limit, now=now,
                                       context=context)
                assert len(got) == min(limit, len(every)), (text, collection, limit)
                for memory_id, score in got:
                    assert memory_id in every, (text, memory_id)
                    assert score == pytest.approx(every[memory_id], rel=rel, abs=1e-5)
                want = sorted(every.values())[:limit]
                assert sorted(score for _, score in got) == pytest.approx(
                    want, rel=rel, abs=1e-5), (text, collection, limit)
                checked += len(got)
    return checked


# 0.0: every filter is left to SQL, as a filter term held by nearly every document is.
@pytest.mark.parametrize('nearly_all', [text_index.NEARLY_ALL, 0.0])
def test_candidates_are_fts5s_best(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                   nearly_all: float) -> None:
    monkeypatch.setattr(text_index, 'NEARLY_ALL', nearly_all)
    engine, conn, now, _ = _indexed(tmp_path)
    assert engine.db.text.stats()['text_index_docs'] == conn.execute(
        'SELECT count(*) FROM memories_fts').fetchone()[0]
    assert _check_against_fts5(conn, now) > 100
    assert store.fts_search(conn, textmod.fts_query('xylophone quokka'), 'a', 5, now=now) == []
    assert engine.stats()['text_index']['text_index_docs'] > MIN_ROWS
    engine.close()


@pytest.mark.parametrize('nearly_all', [text_index.NEARLY_ALL, 0.0])
def test_context_filters_are_searched_in_the_index(tmp_path: pathlib.Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   nearly_all: float) -> None:
    """Equalities on schema.CONTEXT_PATHS go to the index; a context changed alone is logged."""
    monkeypatch.setattr(text_index, 'NEARLY_ALL', nearly_all)
    engine, conn, now, ids = _indexed(tmp_path)
    with engine.db.write() as writer:  # contexts set after the index exists: the log has them
        for number, memory_id in enumerate(ids):
            task = {'name': 'pick', 'success': number % 3 == 0}
            context = {'robot': 'ab'[number % 2], 'task': task,
                       'env': {'sim_or_real': 'real' if number % 4 else 'sim'}}
            if number % 11 == 0:
                context['task']['success'] = 1  # equal to true, in SQL
            writer.execute('UPDATE memories SET context_json = ? WHERE id = ?',
                           (json.dumps(context), memory_id))
        odd = ({'robot': 10**400}, {'robot': 'x' * (text_index.MAX_CONTEXT_BYTES + 1)},
               {'robot': {'id': 7}, 'task': {'name': [1], 'success': None}})
        for context, memory_id in zip(odd, ids[1:]):  # values the index keeps no term of
            writer.execute('UPDATE memories SET context_json = ? WHERE id = ?',
                           (json.dumps(context), memory_id))
    wait_for_text_index(engine, conn)
    assert engine.db.text.stats()['text_index_error'] == ''
    checked = 0
    for context in ((('$.robot', 'a'),), (('$.robot', 'b'), ('$.task.success', True)),
                    (('$.task.success', 1), ('$.env.sim_or_real', 'real')),
                    (('$.task.name', 'pick'),), (('$.robot', 'z'),),
                    (('$.robot', 'a'), ('$.task.success', 1.0))):
        assert engine.db.text.candidates(conn, '"cup"', 'a', 5, active_only=True,
                                         context=context) is not None
        checked += _check_against_fts5(conn, now, context=context)
    assert checked > 300
    searcher, schema = engine.db.text._index.searcher(), engine.db.text._index.schema
    kept = text_index._filters(searcher, schema, [('collection', 'a'), ('type', 'fact'),
                                                  ('ctx', text_index.context_terms(
                                                      [(2, 'pick')])[0])])
    assert len(kept) == (1 if nearly_all else 0)  # all facts, all 'pick': left to SQL
    long = (('$.robot', 'x' * (text_index.MAX_CONTEXT_BYTES + 1)),)  # no term: FTS5 ranks
    assert engine.db.text.candidates(conn, '"cup"', 'a', 5, active_only=True,
                                     context=long) is None
    engine.close()


def test_below_the_threshold_or_without_tantivy_fts5_ranks(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(tmp_path, name='small.db', text_index_min_rows=100_000)
    now = time.time()
    fill_two_collections(engine, now)
    conn = engine.db.reader()
    assert engine.db.text.candidates(conn, '"cup"', 'a', 5, active_only=True) is None
    engine.close()
    monkeypatch.setattr(text_index, 'available', lambda: False)
    engine = make_engine(tmp_path, name='bare.db', text_index_min_rows=MIN_ROWS)
    fill_two_collections(engine, now)
    conn = engine.db.reader()
    assert engine.db.text.candidates(conn, '"cup"', 'a', 5, active_only=True) is None
    assert _check_against_fts5(conn, now) > 100
    engine.close()
    assert not text_index.path_for(tmp_path / 'bare.db').exists()
    assert not text_index.path_for(tmp_path / 'small.db').exists()


def test_scores_stay_fts5s_while_deleted_documents_wait_for_a_merge(
        tmp_path: pathlib.Path) -> None:
    """
    Forgetting half the store leaves deleted documents in tantivy's segments, counted in its N.

    The boost that turns tantivy's IDF into FTS5's must use that N, or every score drifts
    (median 35 %, at most 46 % here when it used the live count; now at most 0.3 %): only the
    average length still counts them.
    """
    engine, conn, now, ids = _indexed(tmp_path)
    with engine.db.write() as writer:
        for memory_id in ids[::2]:
            store.set_status(writer, memory_id, 'forgotten', now=now)
    wait_for_text_index(engine, conn)
    assert _check_against_fts5(conn, now, rel=0.01) > 50
    engine.close()


def _search(conn: Any, text: str, now: float) -> list[int]:
    return [i for i, _ in store.fts_search(conn, textmod.fts_query(text), 'a', 10, now=now)]


def test_changes_are_found_before_and_after_the_index_holds_them(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, conn, now, _ = _indexed(tmp_path)
    with engine.db.write() as writer:
        new = store.insert_memory(
            writer, type_='fact', content='the zebra gripper holds the quokka', collection='a',
            session_id='', category='observation', perception_type='', kind='semantic',
            confidence=0.8, context={}, created_at=now)
    assert _search(conn, 'zebra quokka', now) == [new]  # before the index holds it
    monkeypatch.setattr(text_index, 'MAX_CHANGED', -1)  # always over: as after a burst
    assert engine.db.text.candidates(conn, '"zebra"', 'a', 5, active_only=True) is None
    assert _search(conn, 'zebra quokka', now) == [new]
    monkeypatch.setattr(text_index, 'MAX_CHANGED', 10_000)
    wait_for_text_index(engine, conn)
    assert _search(conn, 'zebra quokka', now) == [new]  # held by the index
    with engine.db.write() as writer:
        store.replace_content(writer, new, 'the okapi gripper holds the wombat', {})
    assert _search(conn, 'zebra quokka', now) == []  # its old text, still in the index
    assert _search(conn, 'okapi wombat', now) == [new]
    wait_for_text_index(engine, conn)
    assert _search(conn, 'zebra quokka', now) == [] and _search(conn, 'okapi wombat', now) == [new]
    with engine.db.write() as writer:
        store.set_status(writer, new, 'forgotten', now=now)
    assert _search(conn, 'okapi wombat', now) == []
    wait_for_text_index(engine, conn)
    assert _search(conn, 'okapi wombat', now) == []
    # Applied changes leave the log (PRUNE_AFTER_S is 0 here).
    deadline = time.monotonic() + 30
    while conn.execute('SELECT count(*) FROM text_changes').fetchone()[0]:
        assert time.monotonic() < deadline, 'the log was not pruned'
        time.sleep(0.05)
    assert _check_against_fts5(conn, now, rel=0.05) > 100
    engine.close()


def _state(db: pathlib.Path) -> dict[str, Any]:
    return json.loads((text_index.path_for(db) / 'state.json').read_text())


def _rewrite_state(db: pathlib.Path, **change: Any) -> None:
    (text_index.path_for(db) / 'state.json').write_text(json.dumps({**_state(db), **change}))


def test_a_start_reuses_its_index_and_rebuilds_any_other(tmp_path: pathlib.Path) -> None:
    db = tmp_path / 'memory.db'
    left = tmp_path / 'memory.db-tindex.build-999999999'  # a build killed with its process
    left.mkdir()
    engine, _, now, _ = _indexed(tmp_path)
    token = _state(db)['token']
    engine.close()
    assert not left.exists()

    for spoil, rebuilt in ((lambda: None, False),
                           (lambda: _rewrite_state(db, token='another store'), True),
                           (lambda: _rewrite_state(db, seq=10**9), True),  # an older store copy
                           # written by an older version (format 3 had no length weights)
                           (lambda: _rewrite_state(db, format=text_index.FORMAT - 1), True),
                           (lambda: (text_index.path_for(db) / 'meta.json').write_text('x'), True),
                           (lambda: (text_index.path_for(db) / 'state.json').unlink(), True)):
        spoil()
        engine = make_engine(tmp_path, text_index_min_rows=MIN_ROWS)
        conn = engine.db.reader()
        wait_for_text_index(engine, conn)
        assert (_state(db)['token'] != token) == rebuilt
        token = _state(db)['token']
        assert _check_against_fts5(conn, now) > 100
        engine.close()


def test_changed_memories_get_fts5s_scores(tmp_path: pathlib.Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Memories the index does not hold yet, more than ROWID_LOOKUPS, scored as FTS5 does."""
    engine, conn, now, _ = _indexed(tmp_path)
    monkeypatch.setattr(text_index.TextIndex, '_catch_up', lambda self, conn: None)
    with engine.db.write() as writer:
        new = [store.insert_memory(
            writer, type_='fact', content=f'{text} near station {number}',
            collection='ab'[number % 2], session_id='', category='observation',
            perception_type='', kind='semantic', confidence=0.8, context={}, created_at=now)
            for number, text in enumerate(QUERIES * 4)]
        store.set_status(writer, new[2], 'superseded', now=now)
    assert len(new) > store.ROWID_LOOKUPS
    found = 0
    for text in QUERIES:
        query = textmod.fts_query(text)
        assert set(new) <= set(engine.db.text.candidates(
            conn, query, 'a', 5, active_only=True)[1])  # not held: ranked apart
        for collection in ('a', 'b'):
            every = _every_match(conn, query, collection, now, ())
            got = store.fts_search(conn, query, collection, 40, now=now)
            for memory_id, score in got:
                if memory_id in new:
                    assert score == pytest.approx(every[memory_id], rel=1e-9)
                    found += 1
            assert new[2] not in dict(got)
    assert found > 20
    assert _check_against_fts5(conn, now, rel=0.05) > 100
    engine.close()


def test_a_state_older_than_the_index_costs_time_not_answers(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A crash between tantivy's commit and state.json: the index holds changes its state does
    # not name. Those memories are ranked by FTS5 again: none is returned twice or by old text.
    monkeypatch.setattr(text_index, 'PRUNE_AFTER_S', 3600.0)
    db = tmp_path / 'memory.db'
    engine, conn, now, ids = _indexed(tmp_path)
    before = _state(db)['seq']
    changed = ids[1:60:3]
    with engine.db.write() as writer:
        for number, memory_id in enumerate(changed):
            store.replace_content(writer, memory_id, f'zebra cup {number} on the okapi shelf', {})
    wait_for_text_index(engine, conn)
    assert _state(db)['seq'] > before
    engine.close()
    _rewrite_state(db, seq=before)
    engine = make_engine(tmp_path, text_index_min_rows=MIN_ROWS)
    conn = engine.db.reader()
    engine.db.text.candidates(conn, '"cup"', 'a', 1, active_only=True)
    deadline = time.monotonic() + 30
    while not engine.db.text.stats()['text_index_docs']:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    found = engine.db.text.candidates(conn, textmod.fts_query('zebra okapi'), 'a', 50,
                                      active_only=True)
    if found is not None and engine.db.text.stats()['text_index_seq'] == before:
        ranked, pending, _ = found
        assert set(changed) <= set(pending)
        assert not {i for i, _ in ranked} & set(changed)
    got = [i for i, _ in store.fts_search(conn, textmod.fts_query('zebra okapi'), 'a', 50,
                                          now=now)]
    live = {i for i in changed
            if conn.execute('SELECT status, collection FROM memories WHERE id = ?',
                            (i,)).fetchone()[:] == ('active', 'a')}
    assert sorted(got) == sorted(live) and len(set(got)) == len(got)
    assert _check_against_fts5(conn, now, rel=0.05) > 100
    wait_for_text_index(engine, conn)
    assert _check_against_fts5(conn, now, rel=0.05) > 100
    engine.close()


def _log_rows(conn: Any) -> int:
    return conn.execute('SELECT count(*) FROM text_changes').fetchone()[0]


def test_the_log_stays_bounded_when_no_index_reads_it(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_index, 'PRUNE_AFTER_S', 3600.0)  # the worker keeps its log
    db = tmp_path / 'memory.db'
    engine, conn, now, ids = _indexed(tmp_path)
    with engine.db.write() as writer:
        for memory_id in ids[:30]:
            store.set_status(writer, memory_id, 'forgotten', now=now)
    wait_for_text_index(engine, conn)
    assert _log_rows(conn) >= 30
    engine.close()
    # An open with the index off: what the index on disk holds leaves the log, the rest stays.
    monkeypatch.setattr(text_index, 'PRUNE_AFTER_S', 0.0)
    engine = make_engine(tmp_path, text_index_min_rows=0)
    conn = engine.db.reader()
    assert _log_rows(conn) == 0 and text_log_store.token(conn) is not None
    with engine.db.write() as writer:
        store.set_status(writer, ids[40], 'forgotten', now=now)
    assert _log_rows(conn) == 1
    engine.close()
    # With no index of this store on disk, nothing would read the log: it stops.
    shutil.rmtree(text_index.path_for(db))
    engine = make_engine(tmp_path, text_index_min_rows=0)
    conn = engine.db.reader()
    assert _log_rows(conn) == 0 and text_log_store.token(conn) is None
    with engine.db.write() as writer:
        store.set_status(writer, ids[41], 'forgotten', now=now)
    assert _log_rows(conn) == 0
    engine.close()
    # Turned on again, the index is built anew and is exact.
    engine = make_engine(tmp_path, text_index_min_rows=MIN_ROWS)
    conn = engine.db.reader()
    wait_for_text_index(engine, conn)
    assert _check_against_fts5(conn, now) > 100
    engine.close()


# A writer process killed with SIGKILL while it learns and forgets memories (its worker commits
# every CATCH_UP_S): every acknowledged change holds after a restart.
_WRITER = """
import pathlib, random, sys, time
from engine_helpers import make_engine, wait_for_text_index
from robotmem_ros.engine import store, text_index
from test_fts_ranking import fill_two_collections
text_index.CATCH_UP_S = 0.02
tmp = pathlib.Path(sys.argv[1])
engine = make_engine(tmp, text_index_min_rows=%d)
now = time.time()
ids = fill_two_collections(engine, now)
conn = engine.db.reader()
engine.db.text.candidates(conn, '"cup"', 'a', 1, active_only=True)
print('ready', flush=True)
rng = random.Random(int(sys.argv[2]))
for number in range(100000):
    with engine.db.write() as writer:  # committed when the block ends: then acknowledged
        if number %% 3 == 2:
            mid, done = rng.choice(ids), 'forgot'
            store.set_status(writer, mid, 'forgotten', now=now)
        else:
            done = 'learned'
            mid = store.insert_memory(
                writer, type_='fact', content=f'okapi memo{number}z holds a wombat',
                collection='a', session_id='', category='observation', perception_type='',
                kind='semantic', confidence=0.8, context={}, created_at=now)
    print(done, mid, number, flush=True)
    time.sleep(0.003)
""" % MIN_ROWS


@pytest.mark.parametrize('seed', [1, 2])
def test_kill_9_while_writing_loses_no_change(tmp_path: pathlib.Path, seed: int) -> None:
    import signal
    import subprocess
    import sys
    here = pathlib.Path(__file__).resolve().parent
    child = subprocess.Popen([sys.executable, '-c', _WRITER, str(tmp_path), str(seed)],
                             cwd=here, stdout=subprocess.PIPE, text=True)
    acked: list[list[str]] = []
    started = 0.0
    for line in child.stdout:
        acked.append(line.split())
        started = started or (time.monotonic() if line.startswith('ready') else 0.0)
        if started and time.monotonic() - started > 2.0 + seed:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    learned = {int(a[1]): int(a[2]) for a in acked if a[0] == 'learned'}
    forgot = {int(a[1]) for a in acked if a[0] == 'forgot'}
    assert len(learned) > 20 and forgot
    engine = make_engine(tmp_path, text_index_min_rows=MIN_ROWS)
    conn = engine.db.reader()
    now = time.time()
    for attempt in ('as found', 'caught up'):
        for memory_id, number in learned.items():
            got = _search(conn, f'memo{number}z', now)
            assert got == [memory_id], (attempt, memory_id, got)
        for memory_id in forgot:
            text = conn.execute('SELECT content FROM memories WHERE id = ?',
                                (memory_id,)).fetchone()[0]
            assert memory_id not in _search(conn, text, now), (attempt, memory_id)
        assert _check_against_fts5(conn, now, rel=0.05) > 30  # fewer: facts were forgotten
        wait_for_text_index(engine, conn)
    engine.close()
