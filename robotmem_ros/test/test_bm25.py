"""Recall's BM25 (engine/bm25.py): FTS5's scores at its constants, b as documented, totals."""

import math

from engine_helpers import make_engine
from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import bm25, vocab_store
from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.recall import _rescored

TURNS = [
    'Caroline: I went to a support group yesterday and it was really powerful',
    'Melanie: that sounds great, what did you talk about at the group',
    'Caroline: mostly about the adoption agencies I have been researching for months now',
    'Melanie: I took the kids camping at the beach last weekend',
    'Caroline: group',
    'Melanie: the kids loved the beach and the campfire stories, we will go again in summer',
]


def _fts5_scores(conn, terms):
    """FTS5's own bm25(), negated (higher better), of every row the OR of ``terms`` matches."""
    rows = conn.execute('SELECT rowid, bm25(memories_fts) FROM memories_fts '
                        'WHERE memories_fts MATCH ?', (textmod.fts_match(terms),)).fetchall()
    return {rowid: -score for rowid, score in rows}


def _ours(conn, terms, k1, b):
    """Recall's own re-score (recall._rescored) of every row the OR of ``terms`` matches."""
    matched = [(rowid, 0.0) for (rowid,) in conn.execute(
        'SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?', (textmod.fts_match(terms),))]
    return _rescored(conn, matched, terms, MemoryConfig(bm25_k1=k1, bm25_b=b))


def test_fts5_constants_give_fts5s_own_scores(tmp_path):
    engine = make_engine(tmp_path)
    for turn in TURNS:
        engine.learn(turn)
    conn = engine.db.reader()
    for query in ('what did Caroline research', 'support group', 'kids beach camping summer'):
        terms = textmod.query_terms(query)
        expected = _fts5_scores(conn, terms)
        ours = dict(_ours(conn, terms, 1.2, 0.75))
        assert ours.keys() == expected.keys() and expected
        for rowid, score in expected.items():
            assert math.isclose(ours[rowid], score, rel_tol=1e-9, abs_tol=1e-12), (query, rowid)
    engine.close()


def test_lower_b_lets_a_long_answer_beat_a_short_echo():
    # "group" once in a 2-token row and twice in a 20-token row; the other rows lack it.
    stats = bm25.CorpusStats(rows=20, tokens=200, term_rows={'group': 2})
    bodies = {1: 'caroline group', 2: ' '.join(['group'] * 2 + ['word'] * 18)}
    assert [i for i, _ in bm25.rescore(bodies, ['group'], stats, 1.2, 0.75)] == [1, 2]
    assert [i for i, _ in bm25.rescore(bodies, ['group'], stats, 1.2, 0.3)] == [2, 1]
    # b = 0: the length is ignored; a term in more than half the rows keeps FTS5's floor IDF.
    common = bm25.CorpusStats(rows=4, tokens=40, term_rows={'group': 3})
    assert common.idf('group') == bm25.MIN_IDF
    assert bm25.rescore({5: 'no match here'}, ['group'], stats, 1.2, 0.0) == [(5, 0.0)]
    # Adjacent repeats all count, and a term never matches inside a longer token.
    [(_, twice)] = bm25.rescore({6: 'group group groups regroup'}, ['group'], stats, 1.2, 0.0)
    assert math.isclose(twice, stats.idf('group') * 2 * 2.2 / (2 + 1.2))


def test_totals_read_apart_from_the_counts_never_fail_a_recall():
    # A commit between the statements: more rows hold the term than the totals know of.
    stale = bm25.CorpusStats(rows=1, tokens=0, term_rows={'cup': 3})
    assert stale.idf('cup') == bm25.MIN_IDF
    [(_, score)] = bm25.rescore({7: 'red cup'}, ['cup'], stale, 1.2, 0.3)
    assert math.isfinite(score) and score > 0


def test_totals_are_the_rows_and_tokens_fts5_holds(tmp_path):
    engine = make_engine(tmp_path)
    assert vocab_store.fts_totals(engine.db.reader()) == (0, 0)
    ids = [engine.learn(turn).memory_id for turn in TURNS]
    engine.forget(ids[1], 'wrong speaker')
    conn = engine.db.reader()
    bodies = [body for (body,) in conn.execute('SELECT body FROM memories_fts')]
    assert len(bodies) == len(TURNS) - 1
    assert vocab_store.fts_totals(conn) == (len(bodies), sum(len(b.split()) for b in bodies))
    engine.close()


def test_a_cut_averages_record_reads_what_it_holds():
    assert vocab_store._varints(bytes([0x87, 0x03, 0x9C, 0x0A])) == [899, 3594]
    assert vocab_store._varints(bytes([0x87, 0x03, 0x9C])) == [899]
    # Nine bytes: eight 7-bit groups, then a whole byte.
    assert vocab_store._varints(bytes([0xFF] * 8 + [0x01])) == [(((1 << 56) - 1) << 8) | 0x01]


def test_recall_ranks_by_the_configured_b(tmp_path):
    short = make_engine(tmp_path, name='fts5.db', bm25_b=0.75)
    long_ = make_engine(tmp_path, name='low_b.db', bm25_b=0.0)
    for engine in (short, long_):
        engine.learn('Caroline: group')
        engine.learn('Caroline: the group met twice, and the group leader said the support '
                     'group will keep meeting every week through the whole winter')
        for index in range(8):
            engine.learn(f'Melanie: unrelated note number {index} about painting')
    first = {name: engine.recall('group', n=2).memories[0].content
             for name, engine in (('fts5', short), ('low_b', long_))}
    assert first['fts5'] == 'Caroline: group'
    assert first['low_b'].startswith('Caroline: the group met twice')
    short.close()
    long_.close()
