"""
The postings held in the process (engine/resident_text.py): exact, or no answer.

Each test changes FTS rows one way and compares what the postings name, as a connection of
the engine reads the store, with the Jaccard of every FTS row a fresh connection reads, and
their BM25 ranking with FTS5's, to the last bit of every score. The
postings are brought forward by the writer's ledger; a change they cannot follow (another
process's commit, a bulk purge, a savepoint rolled back) means no answer until they are built
again, never a wrong one.
"""

import random
import threading

from engine_helpers import (dock_store, fts_row_of_another_writer, fts_rows_purged,
                            fts_savepoint_rolled_back, fts_write_rolled_back, make_engine,
                            wait_for_postings)
import pytest
from robotmem_ros.engine import count_ledger, jaccard_store, store
from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.database import connect

WORDS = ['wrench', 'drawer', 'pallet', 'dock', 'cup', 'red', 'shelf', 'left', 'blue', 'box',
         'the', 'on', 'in', 'gripper', 'force', 'table', 'door', 'locked', 'open']
PROBES = ['the torque wrench lives in the second drawer', 'pallet 3 waits at the dock',
          'the red cup is on the left shelf', 'a blue box by the locked door']
THRESHOLDS = (0.2, 0.5, 0.7)


def _bodies(engine):
    """{id: FTS body} of every FTS row, read by a fresh connection."""
    conn = connect(str(engine.db.path))
    try:
        return dict(store.every_fts_body(conn))
    finally:
        conn.close()


def _truth(engine, tokens, threshold):
    """{id: Jaccard} of every FTS row reaching ``threshold``, read by a fresh connection."""
    rows = _bodies(engine).items()
    scores = {memory_id: textmod.jaccard(tokens, textmod.body_jaccard_tokens(body))
              for memory_id, body in rows if isinstance(body, str)}
    return {memory_id: score for memory_id, score in scores.items() if score >= threshold}


def _ranking(engine, terms, depth):
    """FTS5's best ``depth`` (id, bm25) for the OR of ``terms``, ties to the lower id."""
    conn = connect(str(engine.db.path))
    try:
        rows = conn.execute('SELECT rowid, bm25(memories_fts) FROM memories_fts '
                            'WHERE memories_fts MATCH ?', (textmod.fts_match(terms),)).fetchall()
    finally:
        conn.close()
    return sorted(((row[0], row[1]) for row in rows), key=lambda row: (row[1], row[0]))[:depth]


def _assert_exact(engine, conn):
    for probe in PROBES:
        tokens = textmod.jaccard_tokens(probe)
        for threshold in THRESHOLDS:
            assert engine.db.resident.overlapping(conn, tokens, threshold) == _truth(
                engine, tokens, threshold), (probe, threshold)
        terms = textmod.query_terms(probe) + ['the', 'nowhere']  # a stopword, an unknown term
        for depth in (0, 1, 3, 50):
            assert engine.db.resident.ranked(conn, terms, depth) == _ranking(
                engine, terms, depth), (probe, depth)
    bodies = _bodies(engine)
    asked = [*bodies, 12_345]  # and an id of no row
    assert engine.db.resident.bodies(conn, asked) == bodies


@pytest.fixture
def engine(tmp_path):
    engine = dock_store(tmp_path, pallets=8)
    wait_for_postings(engine, engine.db.reader())
    yield engine
    engine.close()


def test_learns_updates_and_forgets_are_brought_forward_without_a_build(engine):
    conn = engine.db.reader()
    _assert_exact(engine, conn)
    red = engine.learn('the red cup is on the left shelf')
    engine.learn('a second wrench hangs in the drawer')
    _assert_exact(engine, conn)
    engine.update(red.memory_id, 'the blue box is by the locked door')
    _assert_exact(engine, conn)
    engine.forget(red.memory_id, reason='test')
    _assert_exact(engine, conn)
    assert engine.db.resident.builds == 1
    assert engine.db.resident.stats() == {'resident_text_rows': 10,
                                          'resident_text_building': False}


def test_a_commit_of_another_connection_means_a_new_build(engine):
    conn = engine.db.reader()
    fts_row_of_another_writer(engine, 5_000, 'the red cup on the left shelf')
    tokens = textmod.jaccard_tokens(PROBES[2])
    assert engine.db.resident.overlapping(conn, tokens, 0.5) is None  # a gap: FTS5 answers
    wait_for_postings(engine, conn)
    assert 5_000 in engine.db.resident.overlapping(conn, tokens, 0.5)
    engine.learn('a cup of bolts sits by the dock')  # then a step of this process's writer
    _assert_exact(engine, conn)
    assert engine.db.resident.builds == 2


def test_rolled_back_purged_and_tainted_writes_leave_no_wrong_answer(engine):
    conn = engine.db.reader()
    fts_write_rolled_back(engine)
    _assert_exact(engine, conn)  # nothing changed: still held
    assert engine.db.resident.builds == 1
    fts_rows_purged(engine, [row[0] for row in conn.execute('SELECT id FROM memories LIMIT 3')])
    assert engine.db.resident.overlapping(conn, frozenset({'wrench'}), 0.1) is None
    wait_for_postings(engine, conn)
    _assert_exact(engine, conn)
    fts_savepoint_rolled_back(engine)
    assert engine.db.resident.overlapping(conn, frozenset({'wrench'}), 0.1) is None
    wait_for_postings(engine, conn)
    _assert_exact(engine, conn)
    assert engine.db.resident.builds == 3


def test_the_writers_own_uncommitted_rows_are_left_to_fts5(engine):
    now = engine.clock()
    tokens = textmod.jaccard_tokens(PROBES[2])
    with engine.db.write() as writer:
        assert engine.db.resident.overlapping(writer, tokens, 0.5) is not None  # none yet
        new = store.insert_memory(writer, type_='fact', content=PROBES[2], collection='default',
                                  session_id='', category='observation', perception_type='',
                                  kind='semantic', confidence=0.8, context={}, created_at=now)
        assert engine.db.resident.overlapping(writer, tokens, 0.5) is None
        # FTS5 sees the transaction's own row, as a learn inside a larger write must.
        assert jaccard_store.candidates(writer, tokens, 'default', 3, 0.5, now=now) == [
            (new, 1.0, PROBES[2])]
    _assert_exact(engine, engine.db.reader())
    assert engine.db.resident.builds == 1


def test_a_read_between_a_commit_and_its_step_keeps_the_postings(engine, monkeypatch):
    # A recall beside a learn can read the structure record a commit left before the writer
    # has recorded that commit's step: FTS5 answers it, and the postings are not read again.
    conn = engine.db.reader()
    ledger, answers = engine.db.counts, []
    recorded = ledger.committed

    def recall_in_the_window(after):
        answers.append(engine.db.resident.overlapping(conn, frozenset({'wrench'}), 0.1))
        recorded(after)

    monkeypatch.setattr(ledger, 'committed', recall_in_the_window)
    engine.learn('a second wrench hangs in the drawer')
    monkeypatch.undo()
    assert answers == [None]
    _assert_exact(engine, conn)
    assert engine.db.resident.builds == 1


def test_past_the_limit_the_postings_are_dropped_and_not_built_again(tmp_path):
    engine = make_engine(tmp_path, resident_text_max_rows=12)
    for index in range(10):  # no token in common: ten rows
        engine.learn(f'pallet{index} waits{index} inspection{index}')
    conn = engine.db.reader()
    wait_for_postings(engine, conn)
    assert engine.db.resident.stats()['resident_text_rows'] == 10
    for index in range(3):
        engine.learn(f'crate{index} stacked{index} shelf{index}')
    tokens = textmod.jaccard_tokens('crate1 stacked1 shelf1')
    assert engine.db.resident.overlapping(conn, tokens, 0.5) is None
    assert engine.db.resident.stats() == {'resident_text_rows': 0,
                                          'resident_text_building': False}
    hits = jaccard_store.candidates(conn, tokens, 'default', 3, 0.5, now=engine.clock())
    assert hits and hits[0][1] == 1.0  # FTS5 answers
    assert engine.db.resident.builds == 1
    engine.close()


def test_random_changes_keep_every_answer_exact(engine):
    rng = random.Random(11)
    conn = engine.db.reader()
    learned, answered = [], 0
    for step in range(80):
        action = rng.random()
        if action < 0.6 or not learned:
            text = ' '.join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
            learned.append(engine.learn(f'{text} {step}').memory_id)
        elif action < 0.8:
            engine.update(rng.choice(learned),
                          ' '.join(rng.choice(WORDS) for _ in range(5)) + f' {step}')
        elif action < 0.95:
            engine.forget(learned.pop(rng.randrange(len(learned))), reason='test')
        else:  # another process's write
            fts_row_of_another_writer(engine, 9_000 + step, ' '.join(rng.sample(WORDS, 4)))
        tokens = textmod.jaccard_tokens(' '.join(rng.sample(WORDS, 5)))
        named = engine.db.resident.overlapping(conn, tokens, 0.4)
        if named is not None:
            answered += 1
            assert named == _truth(engine, tokens, 0.4)
        terms = rng.sample(WORDS, 3)
        ranked = engine.db.resident.ranked(conn, terms, 4)
        assert ranked is None or ranked == _ranking(engine, terms, 4)
    assert answered > 40  # mostly from the postings, not FTS5


def test_a_close_during_a_build_ends_it(tmp_path):
    engine = make_engine(tmp_path)
    engine.learn('the torque wrench lives in the second drawer')
    conn = engine.db.reader()
    engine.db.resident.overlapping(conn, frozenset({'wrench'}), 0.5)  # starts a build
    engine.close()
    assert engine.db.resident.overlapping(conn, frozenset({'wrench'}), 0.5) is None
    assert not [t for t in threading.enumerate() if t.name == 'resident-text']


def test_the_ledger_keeps_rows_only_while_they_are_wanted_and_whole():
    ledger = count_ledger.CountLedger()
    ledger.note(1, 'red cup', 1, lambda: b'a')
    ledger.committed(b'b')
    assert ledger.rows(b'a', b'b') is None  # no postings held: no body kept
    ledger.rows_wanted = True
    ledger.note(2, 'red cup', 1, lambda: b'b')
    ledger.committed(b'c')
    for memory_id in range(count_ledger.ROWS_KEPT + 1):
        ledger.note(memory_id, 'blue box', 1, lambda: b'c')
    ledger.committed(b'd')
    ledger.rows_wanted = False
    ledger.note(3, 'green mat', 1, lambda: b'd')
    ledger.rows_wanted = True  # set within a transaction: its first row is not in the step
    ledger.note(4, 'green mat', 1, lambda: b'd')
    ledger.committed(b'e')
    assert ledger.rows(b'b', b'c') == [(2, 'red cup', 1)]
    assert ledger.rows(b'b', b'd') is None  # the third step kept its counts only
    assert ledger.changes(b'b', b'd', ['blue']) == {'blue': count_ledger.ROWS_KEPT + 1}
    assert ledger.rows(b'd', b'e') is None
    assert ledger.changes(b'a', b'e', ['green', 'red']) == {'green': 2, 'red': 2}
