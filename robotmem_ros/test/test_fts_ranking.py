"""
BM25 search ranks first and filters after (store.fts_search) with the result of filtering first.

The reference is the plan it replaced: join every match to its row, filter, rank, cut.
"""

from __future__ import annotations

import pathlib
import time

from engine_helpers import make_engine, wait_for_postings
import pytest
from robotmem_ros.engine import store
from robotmem_ros.engine import text as textmod
from test_dedup_candidates import _facts

QUERIES = ('grip force for the cup', 'joint speed of the arm', 'where is the gripper',
           'battery level after the run', 'shelf', 'camera')


def _reference(conn, query: str, collection: str, limit: int, now: float) -> list:
    rows = conn.execute(
        'SELECT m.id, bm25(memories_fts) FROM memories_fts CROSS JOIN memories m '
        'ON m.id = memories_fts.rowid WHERE memories_fts MATCH ? AND m.collection = ? '
        f'AND {store.ACTIVE_SQL.replace(":now", "?")}', (query, collection, now)).fetchall()
    return sorted(((score, memory_id) for memory_id, score in rows))[:limit]


def fill_two_collections(engine, now: float) -> list[int]:
    """
    Store every fact of the decision pairs; return their ids in order.

    Most rows in 'a'; every 7th in 'b' (few: the first pass runs short there); every 5th of
    'a' superseded (filtered out after ranking).
    """
    ids = []
    with engine.db.write() as conn:
        for number, text in enumerate(_facts()):
            collection = 'b' if number % 7 == 0 else 'a'
            memory_id = store.insert_memory(
                conn, type_='fact', content=text, collection=collection, session_id='',
                category='observation', perception_type='', kind='semantic',
                confidence=0.8, context={}, created_at=now)
            if collection == 'a' and number % 5 == 0:
                store.set_status(conn, memory_id, 'superseded', now=now)
            ids.append(memory_id)
    return ids


@pytest.mark.parametrize('postings', [False, True])
def test_rank_first_returns_what_filtering_first_returns(tmp_path: pathlib.Path,
                                                         postings: bool) -> None:
    """FTS5 ranks, or the postings held in the process (engine/resident_text.py)."""
    engine = make_engine(tmp_path, resident_text_max_rows=10_000 if postings else 0)
    now = time.time()
    fill_two_collections(engine, now)
    conn = engine.db.reader()
    if postings:
        wait_for_postings(engine, conn)
    checked = 0
    for text in QUERIES:
        query = textmod.fts_query(text)
        for collection in ('a', 'b'):
            for limit in (1, 5, 20, 200):
                got = store.fts_search(conn, query, collection, limit, now=now)
                want = _reference(conn, query, collection, limit, now)
                assert sorted((score, i) for i, score in got) == want, (text, collection)
                checked += len(want)
    assert checked > 200
    assert engine.db.resident.builds == int(postings)
    assert (engine.db.resident.ranked(conn, ['cup'], 5) is not None) == postings
    engine.close()
