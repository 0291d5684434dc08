"""
The Jaccard layer's rare-token filter loses no fact above the threshold (engine/jaccard_store).

Compared with the exhaustive check (Jaccard of the probe against every stored fact) on the
hand-written robot facts of bench/data/decision_pairs*.tsv, which hold many rewordings.
"""

from __future__ import annotations

import math
import pathlib
import time
from typing import Any

from engine_helpers import make_engine, wait_for_postings, wait_for_text_index
import numpy as np
import pytest
from robotmem_ros.engine import jaccard_store, store, text_index
from robotmem_ros.engine import text as textmod

DATA = pathlib.Path(__file__).resolve().parents[2] / 'bench' / 'data'


def _facts() -> list[str]:
    texts: dict[str, None] = {}
    for name in ('decision_pairs.tsv', 'decision_pairs_heldout.tsv'):
        for line in (DATA / name).read_text(encoding='utf-8').splitlines():
            if line and not line.startswith('#'):
                for text in line.split('\t')[2:4]:
                    texts.setdefault(text.strip(), None)
    return list(texts)


@pytest.mark.parametrize('overlap', [1, 2, 3, 4])
@pytest.mark.parametrize('n', range(1, 41))
def test_overlap_terms_hold_for_every_possible_set(n: int, overlap: int) -> None:
    for threshold in (0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 0.95):
        size, k = jaccard_store.overlap_terms(n, threshold, overlap)
        assert 1 <= k <= min(size, overlap) and size <= n
        assert k == 1 or math.comb(size, k) <= jaccard_store.MAX_GROUPS
        for shared in range(n + 1):
            for other_only in range(3 * n + 1):
                if shared and shared / (n + other_only) >= threshold:  # J = 0 shares nothing
                    # B misses n - shared of A's tokens; any `size` of them keep k of B's.
                    assert size - (n - shared) >= k


def _insert(engine: Any, texts: list[str], now: float) -> list[int]:
    with engine.db.write() as conn:  # every text, rewordings included (no dedup on this path)
        return [store.insert_memory(conn, type_='fact', content=text, collection='default',
                                    session_id='', category='observation', perception_type='',
                                    kind='semantic', confidence=0.8, context={}, created_at=now)
                for text in texts]


def _check_exhaustively(conn: Any, facts: list[str], ids: list[int], now: float) -> None:
    texts = dict(zip(ids, facts))
    stored = {i: textmod.jaccard_tokens(t) for i, t in texts.items()}
    near_pairs = 0
    for probe in facts:
        tokens = textmod.jaccard_tokens(probe)
        exhaustive = sorted(((-textmod.jaccard(tokens, other), i) for i, other in stored.items()))
        for threshold in (0.4, 0.5, 0.7):
            above = [(i, -score) for score, i in exhaustive if -score >= threshold]
            got = jaccard_store.candidates(conn, tokens, 'default', 5, threshold, now=now)
            assert [hit[:2] for hit in got if hit[1] >= threshold] == above[:5], probe
            assert all(hit.content == texts[hit.memory_id] for hit in got), probe
            wide = jaccard_store.candidates(conn, tokens, 'default', len(facts), threshold,
                                            now=now)
            assert [hit[:2] for hit in wide if hit[1] >= threshold] == above, probe
        near_pairs += sum(1 for score, _ in exhaustive if 0.7 < -score < 1.0)
    assert near_pairs >= 20  # the data really holds rewordings above the threshold


@pytest.mark.parametrize('postings', [False, True])
def test_candidates_match_the_exhaustive_check(tmp_path: pathlib.Path, postings: bool) -> None:
    """FTS5's rare-token query, or the postings held in the process (engine/resident_text)."""
    facts = _facts()
    assert len(facts) > 300
    engine = make_engine(tmp_path, resident_text_max_rows=10_000 if postings else 0)
    conn = engine.db.reader()
    ids = _insert(engine, facts[:len(facts) // 2], time.time())
    if postings:
        wait_for_postings(engine, conn)
    ids += _insert(engine, facts[len(facts) // 2:], time.time())  # brought forward by steps
    _check_exhaustively(conn, facts, ids, time.time())
    assert engine.db.resident.stats()['resident_text_rows'] == (len(facts) if postings else 0)
    assert engine.db.resident.builds == int(postings)
    engine.close()


@pytest.mark.skipif(not text_index.available(), reason='tantivy is not installed')
@pytest.mark.parametrize('nested_max', [text_index.NESTED_MAX, 0])
@pytest.mark.parametrize('weighted', [False, True])
def test_the_text_index_names_the_same_candidates(tmp_path: pathlib.Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  nested_max: int, weighted: bool) -> None:
    """
    Half the facts in the index, half learned since (the log): the same exact answers.

    With common tokens counted level by level, as by default, or all in one union; with the
    facts weighted by their length (pages of two, so that the search grows) or not.
    """
    monkeypatch.setattr(text_index, 'NESTED_MAX', nested_max)
    if weighted:
        monkeypatch.setattr(text_index, 'WEIGHTED_FROM', 0)
        monkeypatch.setattr(text_index, 'WEIGHTED_FIRST', 2)
    nested: list[int] = []
    choose = text_index._nested
    monkeypatch.setattr(text_index, '_nested', lambda *args: nested.append(
        len(choose(*args))) or choose(*args))
    facts = _facts()
    engine = make_engine(tmp_path, text_index_min_rows=100, resident_text_max_rows=0)
    now = time.time()
    ids = _insert(engine, facts[:len(facts) // 2], now)
    conn = engine.db.reader()
    wait_for_text_index(engine, conn)
    monkeypatch.setattr(text_index.TextIndex, '_catch_up', lambda self, conn: None)
    ids += _insert(engine, facts[len(facts) // 2:], now)
    tokens = textmod.jaccard_tokens(facts[0])
    named = engine.db.text.overlapping(conn, tokens, 'default', 0.7)
    assert named is not None and named[0][ids[0]] == 1.0  # the index answers, not FTS5
    assert set(ids[len(facts) // 2:]) <= set(named[1])  # the facts it does not hold yet
    monkeypatch.setattr(text_index, 'OVERLAPPING_FIRST', 2)  # a second, wider search
    monkeypatch.setattr(text_index, 'MAX_OVERLAPPING', 3)  # more share a token: FTS5 answers
    assert engine.db.text.overlapping(conn, tokens, 'default', 0.1) is None
    monkeypatch.setattr(text_index, 'MAX_OVERLAPPING', len(facts))
    assert engine.db.text.overlapping(conn, tokens, 'default', 0.1) is not None
    assert engine.db.text.overlapping(conn, tokens, 'default', 0.0) is None  # any length
    _check_exhaustively(conn, facts, ids, now)
    assert (max(nested) > 0) == (nested_max > 0)  # the data holds common tokens
    engine.close()


@pytest.mark.parametrize('threshold', [0.3, 0.5, 0.7, 0.9])
def test_the_weighted_bar_lets_every_fact_that_reaches_the_threshold_pass(
        threshold: float) -> None:
    """Each overlap o of n query and b fact tokens with Jaccard >= t scores the bar or more."""
    passed = 0
    for n in range(1, 61):
        bar = text_index._weighted_bar(n, threshold)
        sizes = np.arange(1, 400, dtype=float)
        weight = text_index._multiplier(sizes)
        for overlap in range(1, n + 1):
            reach = (overlap / (n + sizes - overlap) >= threshold) & (sizes >= overlap)
            assert np.all((overlap * weight)[reach] >= bar), (n, overlap)
            if n == text_index.WEIGHT_SHIFT:  # exact there: only those that reach t pass
                short = (sizes < text_index.WEIGHT_SPAN - n) & (sizes >= overlap)
                assert np.array_equal((overlap * weight >= bar)[short], reach[short])
            passed += int(np.count_nonzero(reach))
    assert passed > 500  # the loop checked pairs that reach t
    # Stored weights give the multiplier tantivy applies: log2(2 + jw).
    assert math.isclose(math.log2(2.0 + text_index._length_weight(9)),
                        float(text_index._multiplier(np.array([9.0]))[0]))


@pytest.mark.parametrize('threshold', [0.05, 0.3, 0.5, 0.7, 0.9, 1.0])
def test_the_length_gates_hold_every_fact_that_reaches_the_threshold(threshold: float) -> None:
    """Each overlap o of n query and b fact tokens with Jaccard >= t has a gate that asks <= o."""
    sizes = np.arange(1, 400)
    buckets = np.array([text_index.length_bucket(int(size)) for size in sizes])
    assert np.all(np.diff(buckets) >= 0) and buckets[14] == 15  # its own length up to 15
    gated = 0
    for n in range(1, 61):
        least = text_index._least_overlaps(n, threshold)
        asked = np.array([least.get(int(bucket), n + 1) for bucket in buckets])
        for overlap in range(1, n + 1):
            reach = (overlap / (n + sizes - overlap) >= threshold) & (sizes >= overlap)
            assert np.all(asked[reach] <= overlap), (n, overlap)
            gated += int(np.count_nonzero(reach))
    assert gated >= 60  # b = o = n reaches every t: at least one pair for each n


# 'all to SQL': the index leaves every filter to SQL, as one held by nearly every document.
@pytest.mark.parametrize('indexed', [False, 'postings', *(pytest.param(
    mode, marks=pytest.mark.skipif(not text_index.available(), reason='tantivy is not installed'))
    for mode in ('indexed', 'all to SQL'))])
def test_candidates_keep_to_active_facts_of_the_collection_and_session(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, indexed: bool | str) -> None:
    if indexed == 'all to SQL':
        monkeypatch.setattr(text_index, 'NEARLY_ALL', 0.0)
    engine = make_engine(tmp_path, resident_text_max_rows=100 if indexed == 'postings' else 0,
                         text_index_min_rows=1 if indexed in ('indexed', 'all to SQL') else 0)
    now = time.time()
    text = 'the red cup on shelf two needs a grip force of 12.5 N'
    with engine.db.write() as conn:
        def put(collection: str, session: str = '', type_: str = 'fact') -> int:
            if session:
                store.ensure_session(conn, session, collection, now)
            rows = conn.execute('SELECT COUNT(*) FROM memories').fetchone()[0]
            return store.insert_memory(  # one more word each: Jaccard 0.85 to the probe
                conn, type_=type_, content=f'{text} batch{rows}', collection=collection,
                session_id=session,
                category='observation', perception_type='', kind='semantic', confidence=0.8,
                context={}, created_at=now)
        mine, other, gone, seen = put('a'), put('b'), put('a', 's1'), put('a', type_='perception')
        in_session, expired = put('a', 's2'), put('a')
        store.set_status(conn, gone, 'superseded', now=now)
        # Still active for the text index (validity is not logged): SQL's filter drops it.
        conn.execute('UPDATE memories SET valid_until = ? WHERE id = ?', (now - 1.0, expired))
    conn = engine.db.reader()
    tokens = textmod.jaccard_tokens(text)
    if indexed == 'postings':  # every row, of any collection, type or status: SQL filters
        wait_for_postings(engine, conn)
        assert len(engine.db.resident.overlapping(conn, tokens, 0.7)) == 6
    elif indexed:
        wait_for_text_index(engine, conn)
        assert engine.db.text.overlapping(conn, tokens, 'a', 0.01) is not None

    def named(**session: str) -> list[int]:
        return [hit.memory_id for hit in jaccard_store.candidates(
            conn, tokens, 'a', 5, 0.7, now=now, **session)]

    assert named() == [mine, in_session]
    assert named(session_id='s2') == [in_session]
    everything = jaccard_store.candidates(conn, tokens, 'a', 10, 0.01, now=now)
    assert not {other, seen} & {hit.memory_id for hit in everything}
    engine.close()
