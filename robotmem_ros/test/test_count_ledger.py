"""
Exact term counts across commits (engine/count_ledger.py): always what fts5vocab says.

Each test changes FTS rows one way and compares the counts a long-lived reader gives (brought
forward by the writer's ledger, or read again where its chain has a gap) with the counts a
fresh connection reads from fts5vocab.
"""

import random

from engine_helpers import (dock_store, fts_row_of_another_writer, fts_rows_purged,
                            fts_savepoint_rolled_back, fts_write_rolled_back)
import pytest
from robotmem_ros.engine import count_ledger, store, vocab_store
from robotmem_ros.engine.database import connect

TERMS = ['wrench', 'drawer', 'pallet', 'dock', 'cup', 'red', 'shelf', 'left', 'nowhere']
WORDS = ['wrench', 'drawer', 'pallet', 'dock', 'cup', 'red', 'shelf', 'left', 'blue', 'box',
         'the', 'on', 'in', 'gripper', 'force', 'table', 'door', 'locked', 'open']


def _fresh_counts(engine):
    conn = connect(str(engine.db.path))
    try:
        conn.execute(vocab_store._VOCAB)
        found = dict(conn.execute('SELECT term, doc FROM temp.memories_fts_vocab').fetchall())
    finally:
        conn.close()
    return {term: found.get(term, 0) for term in TERMS}


def _vocab_reads(conn):
    reads = []
    conn.set_trace_callback(lambda sql: reads.append(sql) if 'memories_fts_vocab WHERE' in sql
                            else None)
    return reads


@pytest.fixture
def engine(tmp_path):
    engine = dock_store(tmp_path, pallets=8)
    yield engine
    engine.close()


def test_learns_updates_and_forgets_are_brought_forward_without_a_read(engine):
    conn = engine.db.reader()
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)
    reads = _vocab_reads(conn)
    red = engine.learn('the red cup is on the left shelf')
    engine.learn('a second wrench hangs on the wall')
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)
    engine.update(red.memory_id, 'the blue box is on the right shelf')
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)
    engine.forget(red.memory_id, reason='test')
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)
    assert reads == []
    conn.set_trace_callback(None)


def test_a_commit_of_another_connection_makes_the_reader_read_again(engine):
    conn = engine.db.reader()
    vocab_store.row_counts(conn, TERMS, exact=True)
    fts_row_of_another_writer(engine, 5_000, 'the wrench on the red shelf')
    engine.learn('a cup of bolts sits by the dock')  # then a step of this process's writer
    reads = _vocab_reads(conn)
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)
    assert reads  # the chain from the first read has a gap: counted again
    conn.set_trace_callback(None)


def test_a_rolled_back_write_and_a_tainted_one_leave_no_wrong_count(engine):
    conn = engine.db.reader()
    vocab_store.row_counts(conn, TERMS, exact=True)
    fts_write_rolled_back(engine)
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)
    fts_rows_purged(engine, [row[0] for row in conn.execute('SELECT id FROM memories LIMIT 3')])
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)


def test_a_savepoint_rolled_back_taints_its_transaction(engine):
    conn = engine.db.reader()
    vocab_store.row_counts(conn, TERMS, exact=True)
    fts_savepoint_rolled_back(engine)
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)


def test_random_changes_keep_every_count_exact(engine):
    rng = random.Random(7)
    conn = engine.db.reader()
    learned = []
    for step in range(60):
        action = rng.random()
        if action < 0.6 or not learned:
            text = ' '.join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
            result = engine.learn(f'{text} {step}')
            learned.append(result.memory_id)
        elif action < 0.8:
            engine.update(rng.choice(learned),
                          ' '.join(rng.choice(WORDS) for _ in range(5)) + f' {step}')
        else:
            engine.forget(learned.pop(rng.randrange(len(learned))), reason='test')
        if step % 3 == 0:
            assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)


def test_a_gap_in_the_steps_is_reported():
    ledger = count_ledger.CountLedger()
    assert ledger.changes(b'a', b'a', ['x']) == {'x': 0}
    assert ledger.changes(b'a', b'b', ['x']) is None


def test_a_stored_body_that_is_not_text_never_fails_a_forget(engine):
    """A damaged row (NULL or blob body) is removed; readers count its terms again."""
    conn = engine.db.reader()
    vocab_store.row_counts(conn, TERMS, exact=True)
    with engine.db.write() as writer:
        writer.execute('INSERT INTO memories_fts(rowid, body) VALUES (8000, NULL), '
                       "(8001, CAST('wrench dock' AS BLOB))")
        engine.db.counts.taint()
    vocab_store.row_counts(conn, TERMS, exact=True)
    with engine.db.write() as writer:
        store.unindex_text(writer, 8000)
        store.unindex_text(writer, 8001)
        store.index_text(writer, 8002, 'the wrench on the shelf')
    assert vocab_store.row_counts(conn, TERMS, exact=True) == _fresh_counts(engine)
