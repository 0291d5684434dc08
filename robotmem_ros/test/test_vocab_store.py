"""Row counts of FTS terms (engine/vocab_store.py): exact when read, cached, and the budget."""

from engine_helpers import dock_store
from robotmem_ros.engine import vocab_store


def test_row_counts_are_the_rows_holding_each_term(tmp_path):
    engine = dock_store(tmp_path)
    conn = engine.db.reader()
    counts = vocab_store.row_counts(conn, iter(['dock', 'wrench', 'unknownterm']))
    matched = {term: conn.execute('SELECT COUNT(*) FROM memories_fts WHERE memories_fts '
                                  'MATCH ?', (f'"{term}"',)).fetchone()[0]
               for term in ('dock', 'wrench')}
    assert counts == {'dock': matched['dock'], 'wrench': matched['wrench'], 'unknownterm': 0}
    assert matched == {'dock': 12, 'wrench': 1}
    engine.close()


def test_a_count_is_reused_until_it_is_older_than_its_ttl(tmp_path, monkeypatch):
    engine = dock_store(tmp_path)
    conn = engine.db.reader()
    assert vocab_store.row_counts(conn, ['wrench']) == {'wrench': 1}
    engine.learn('a second wrench hangs on the wall')
    assert vocab_store.row_counts(conn, ['wrench']) == {'wrench': 1}  # cached: only a cost
    monkeypatch.setattr(vocab_store, 'COUNT_TTL_S', 0.0)
    assert vocab_store.row_counts(conn, ['wrench']) == {'wrench': 2}
    engine.close()


def test_rarest_within_keeps_the_rarest_terms_up_to_the_budget(tmp_path):
    engine = dock_store(tmp_path)
    conn = engine.db.reader()
    terms = ['dock', 'wrench', 'drawer', 'pallet', 'nowhere']
    assert vocab_store.rarest(conn, terms, 3) == ['nowhere', 'drawer', 'wrench']
    assert vocab_store.rarest_within(conn, terms, 2) == ['nowhere', 'drawer', 'wrench']
    assert vocab_store.rarest_within(conn, terms, 14) == ['nowhere', 'drawer', 'wrench', 'dock']
    assert vocab_store.rarest_within(conn, ['dock', 'pallet'], 0) == ['dock']  # at least one
    engine.close()


def test_exact_counts_are_reused_until_a_commit_changes_the_text(tmp_path):
    engine = dock_store(tmp_path)
    conn = engine.db.reader()
    reads = []  # the reads of the count of 'wrench' (the recall below reads 'torque')
    conn.set_trace_callback(
        lambda sql: reads.append(sql) if "memories_fts_vocab WHERE term IN ('wrench')" in sql
        else None)
    assert vocab_store.row_counts(conn, ['wrench'], exact=True) == {'wrench': 1}
    assert vocab_store.row_counts(conn, ['wrench'], exact=True) == {'wrench': 1}
    assert len(reads) == 1  # no commit in between: the count read first is still exact
    assert engine.recall('torque', n=3).memories  # commits hit counts, not text
    with engine.db.write() as writer:
        writer.execute('UPDATE memories SET confidence = 0.9')
    assert vocab_store.row_counts(conn, ['wrench'], exact=True) == {'wrench': 1}
    assert len(reads) == 1
    second = engine.learn('a second wrench hangs on the wall')  # the writer adds an FTS row
    assert vocab_store.row_counts(conn, ['wrench'], exact=True) == {'wrench': 2}
    engine.forget(second.memory_id, reason='test')  # and deletes it
    assert vocab_store.row_counts(conn, ['wrench'], exact=True) == {'wrench': 1}
    assert len(reads) == 1  # both brought forward by the writer's ledger (test_count_ledger)
    with engine.db.write() as writer:  # an FTS change the ledger did not note
        writer.execute("INSERT INTO memories_fts(rowid, body) VALUES (999, 'wrench')")
        engine.db.counts.taint()
    assert vocab_store.row_counts(conn, ['wrench'], exact=True) == {'wrench': 2}
    assert len(reads) == 2
    conn.set_trace_callback(None)
    engine.close()


def test_the_writers_exact_counts_follow_its_own_commits(tmp_path):
    engine = dock_store(tmp_path)
    with engine.db.write() as writer:
        assert vocab_store.row_counts(writer, ['wrench'], exact=True) == {'wrench': 1}
    engine.learn('a second wrench hangs on the wall')
    with engine.db.write() as writer:
        assert vocab_store.row_counts(writer, ['wrench'], exact=True) == {'wrench': 2}
    engine.close()
