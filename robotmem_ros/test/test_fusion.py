"""Score arithmetic: score and RRF fusion, real-world weighting, MaxScore normalization."""

import math

from hypothesis import example, given, settings, strategies as st
import pytest
from robotmem_ros.engine.fusion import maxscore_normalize, rrf_fuse, score_fuse, source_weight
from robotmem_ros.errors import ValidationError


def test_rrf_matches_the_seed_formula():
    bm25 = [11, 12, 13]
    vector = [12, 14]
    scores = rrf_fuse([bm25, vector], 60)
    assert scores == {
        11: 1 / 61,
        12: pytest.approx(1 / 62 + 1 / 61),
        13: 1 / 63,
        14: 1 / 62,
    }
    assert max(scores, key=scores.get) == 12     # found by both engines: ranked first


def test_rrf_single_list_is_the_bm25_only_fallback():
    assert rrf_fuse([[5, 6]], 60) == {5: 1 / 61, 6: 1 / 62}
    assert rrf_fuse([[5, 6]], 0) == {5: 1.0, 6: 0.5}


def test_rrf_counts_a_repeated_id_at_its_best_rank_only():
    assert rrf_fuse([[7, 8, 7, 7]], 60) == {7: 1 / 61, 8: 1 / 62}


def test_rrf_of_nothing_is_empty():
    assert rrf_fuse([], 60) == {}
    assert rrf_fuse([[], []], 60) == {}


@pytest.mark.parametrize('k', [-1, 1.5, '60', None, True])
def test_rrf_rejects_a_bad_k(k):
    with pytest.raises(ValidationError, match='rrf k must be an integer >= 0'):
        rrf_fuse([[1]], k)


@pytest.mark.parametrize('ranked', [[[1, '2']], [[1.0]], [[None]], [[True]]])
def test_rrf_rejects_non_integer_ids(ranked):
    with pytest.raises(ValidationError, match='rrf ranked ids must be integers'):
        rrf_fuse(ranked, 60)


def test_score_fusion_min_max_normalizes_each_list_then_weights():
    bm25 = [(11, 9.0), (12, 5.0), (13, 1.0)]
    vector = [(12, 0.9), (14, 0.5)]
    scores = score_fuse([bm25, vector], (0.6, 0.4))
    assert scores == {11: pytest.approx(0.6), 12: pytest.approx(0.6 * 0.5 + 0.4),
                      13: 0.0, 14: 0.0}


def test_score_fusion_keeps_a_clear_bm25_lead_that_rrf_flattens():
    # A keyword hit far above the rest of its list beats a document found fairly well by
    # both channels; RRF sees only ranks and puts the document found by both first.
    bm25 = [(1, 20.0), (2, 3.0), (3, 2.9)]
    vector = [(3, 0.62), (4, 0.61), (2, 0.60), (1, 0.10)]
    fused = score_fuse([bm25, vector], (0.6, 0.4))
    assert max(fused, key=fused.get) == 1
    ranks = rrf_fuse([[i for i, _ in bm25], [i for i, _ in vector]], 60)
    assert max(ranks, key=ranks.get) != 1


def test_score_fusion_of_one_item_or_equal_scores_gives_full_weight():
    assert score_fuse([[(5, 3.0)]], (0.6,)) == {5: pytest.approx(0.6)}
    assert score_fuse([[(5, 2.0), (6, 2.0)], []], (0.5, 0.5)) == {5: 0.5, 6: 0.5}
    assert score_fuse([[], []], (0.5, 0.5)) == {}


def test_score_fusion_counts_a_repeated_id_at_its_first_occurrence():
    assert score_fuse([[(7, 4.0), (8, 2.0), (7, 0.0)]], (1.0,)) == {7: 1.0, 8: 0.0}


@pytest.mark.parametrize('lists, weights, message', [
    ([[(1, 1.0)]], (0.5, 0.5), 'one weight per list'),
    ([[(1, math.nan)]], (1.0,), 'fused scores must be finite'),
    ([[('1', 1.0)]], (1.0,), 'fused ids must be integers'),
    ([[(True, 1.0)]], (1.0,), 'fused ids must be integers'),
    ([[(1, 1.0)]], (-1.0,), 'scores must be finite numbers >= 0'),
])
def test_score_fusion_rejects_bad_input(lists, weights, message):
    with pytest.raises(ValidationError, match=message):
        score_fuse(lists, weights)


@pytest.mark.parametrize('context, weight', [
    ({'env': {'sim_or_real': 'real'}, 'task': {'success': True}}, 1.5),
    ({'env': {'sim_or_real': 'sim'}}, 1.0),
    ({'env': {'sim_or_real': 'REAL'}}, 1.0),
    ({'env': 'real'}, 1.0),
    ({}, 1.0),
    (None, 1.0),
])
def test_source_weight_rewards_real_world_memories(context, weight):
    assert source_weight(context, 1.5) == weight


def test_maxscore_puts_the_best_at_one():
    assert maxscore_normalize([0.02, 0.04, 0.01]) == [0.5, 1.0, 0.25]
    assert maxscore_normalize([3]) == [1.0]
    assert maxscore_normalize([0.0, 2.0]) == [0.0, 1.0]


def test_maxscore_is_safe_on_empty_and_all_zero():
    assert maxscore_normalize([]) == []
    assert maxscore_normalize([0.0, 0, 0.0]) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize('scores', [[1.0, -0.1], [math.nan], [math.inf, 1.0], ['1.0'], [None],
                                    [True], [10 ** 400]])
def test_maxscore_rejects_scores_that_are_not_finite_and_non_negative(scores):
    with pytest.raises(ValidationError, match='scores must be finite numbers >= 0'):
        maxscore_normalize(scores)


IDS = st.integers(1, 30)
RANKED = st.lists(st.lists(IDS, max_size=12), max_size=5)
K = st.integers(0, 100)


@settings(max_examples=200, deadline=None)
@given(ranked=RANKED, k=K)
@example(ranked=[[1], [1], [1]], k=4)  # failed once without the tolerance
def test_rrf_scores_are_positive_and_cover_every_ranked_id(ranked, k):
    scores = rrf_fuse(ranked, k)
    assert set(scores) == {memory_id for lst in ranked for memory_id in lst}
    # a sum of n equal terms may round one ulp above n / (k + 1): 3 * (1 / 5) > 3 / 5
    bound = len(ranked) / (k + 1)
    assert all(0 < score and (score <= bound or math.isclose(score, bound))
               for score in scores.values())


@settings(max_examples=200, deadline=None)
@given(ranked=st.lists(st.lists(IDS, max_size=12), min_size=1, max_size=5), k=K)
def test_an_id_first_in_every_list_gets_the_top_score(ranked, k):
    ranked = [[0] + lst for lst in ranked]
    scores = rrf_fuse(ranked, k)
    assert scores[0] == max(scores.values())
    assert all(score < scores[0] for memory_id, score in scores.items() if memory_id != 0)


@settings(max_examples=200, deadline=None)
@given(ranked=RANKED, extra=st.lists(IDS, max_size=12), k=K)
def test_adding_a_list_never_lowers_a_score(ranked, extra, k):
    before = rrf_fuse(ranked, k)
    after = rrf_fuse(ranked + [extra], k)
    assert all(after[memory_id] >= score for memory_id, score in before.items())
    assert all(after[memory_id] > before.get(memory_id, 0.0) for memory_id in extra)


@settings(max_examples=200, deadline=None)
@given(ranked=RANKED, k=K, data=st.data())
def test_rrf_does_not_depend_on_the_order_of_lists(ranked, k, data):
    shuffled = data.draw(st.permutations(ranked))
    assert rrf_fuse(shuffled, k) == rrf_fuse(ranked, k)


@settings(max_examples=300, deadline=None)
@given(scores=st.lists(st.one_of(st.floats(0, 1e300), st.integers(0, 10 ** 6)), max_size=20))
def test_maxscore_max_is_exactly_one_and_order_is_kept(scores):
    normalized = maxscore_normalize(scores)
    assert len(normalized) == len(scores)
    if any(scores):
        assert max(normalized) == 1.0
        assert normalized[scores.index(max(scores))] == 1.0
    else:
        assert normalized == [0.0] * len(scores)
    for i in range(len(scores)):
        for j in range(len(scores)):
            if scores[i] <= scores[j]:
                assert normalized[i] <= normalized[j]


SCORED = st.lists(st.lists(st.tuples(IDS, st.floats(-50, 50)), max_size=12), max_size=4)


@settings(max_examples=200, deadline=None)
@given(scored=SCORED, data=st.data())
def test_score_fusion_is_bounded_by_the_weights_and_order_free(scored, data):
    weights = data.draw(st.lists(st.floats(0, 1), min_size=len(scored), max_size=len(scored)))
    fused = score_fuse(scored, weights)
    assert set(fused) == {memory_id for lst in scored for memory_id, _ in lst}
    assert all(0.0 <= score <= math.fsum(weights) + 1e-12 for score in fused.values())
    order = data.draw(st.permutations(range(len(scored))))
    assert score_fuse([scored[i] for i in order], [weights[i] for i in order]) == fused
