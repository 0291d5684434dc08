"""Pseudo-relevance feedback (engine/feedback.py): long matches lend the query their words."""

from collections import Counter

from engine_helpers import make_engine
import pytest
from robotmem_ros.engine import feedback

# Three abstracts, each over 64 tokens. The query matches MATCH well; RELATED and UNRELATED
# each hold one query word ("speed") once, and UNRELATED is shorter, so BM25 alone ranks it
# above RELATED. RELATED shares MATCH's other words (aeroelastic, torsion, stiffness, panel).
MATCH = ('flutter of a swept wing at high speed . the aeroelastic response of the wing was '
         'measured in the wind tunnel for several values of torsion stiffness and bending '
         'stiffness . panel flutter boundaries were found to depend on the torsion stiffness '
         'of the panel , and the aeroelastic model predicted the flutter onset within ten per '
         'cent of the measured onset for every panel and every torsion stiffness tested here .')
RELATED = ('aeroelastic tailoring of composite panels . the torsion stiffness and the bending '
           'stiffness of each panel were varied , and the aeroelastic model was checked against '
           'static tests . panel torsion modes couple with bending modes when the stiffness '
           'ratio is low , which limits the allowable speed of the aircraft . the aeroelastic '
           'panel model gives the torsion stiffness needed for each panel layout and each ply .')
UNRELATED = ('boundary layer transition on a heated cone . heat transfer rates were measured on '
             'a cone in a shock tube , and transition moved forward as the wall temperature '
             'rose . the speed of the shock and the nose radius changed the onset of '
             'transition , and the heat transfer data agree with laminar theory ahead of it .')
QUERY = 'wing flutter at high speed'
FILLER = ('the red cup is on the left shelf', 'the lab door code is 4711',
          'grip_force=12.5N works for cups', 'the charger dock is behind the door',
          'the spare gripper pads are in drawer 3', 'the drill is charged')


def test_the_sample_is_long_bodies_and_their_non_query_content_words():
    long_body = ' '.join(['stiffness', 'torsion', 'torsion', 'the', 'speed', '12.5', 'cm'] * 10)
    weights = feedback.sample_weights([long_body, 'torsion panel'], ['speed'],
                                      frozenset({'the'}), min_tokens=30)
    # Query words, stopwords, numbers and two-letter Latin tokens are no expansion words;
    # weights are relative frequencies within each body, summed over the sample.
    assert weights == Counter({'torsion': pytest.approx(20 / 70 + 1 / 2),
                               'stiffness': pytest.approx(10 / 70), 'panel': 1 / 2})
    # A sample of short bodies on average gives nothing, whatever one long body holds.
    assert feedback.sample_weights([long_body, 'torsion panel'], [], frozenset(),
                                   min_tokens=64) == {}
    assert feedback.sample_weights([], [], frozenset(), min_tokens=1) == {}
    # A two-character CJK word is a word; one character (a particle) is not.
    cjk = feedback.sample_weights(['扭转 刚度 的 x'], [], frozenset(), min_tokens=1)
    assert cjk == {'扭转': 0.25, '刚度': 0.25}


def test_best_terms_weigh_sample_frequency_by_idf_among_the_frequent_words():
    weights = Counter({'common': 0.5, 'rare': 0.2, 'seldom': 0.1, 'zero': 0.3})
    idf = {'common': 0.1, 'rare': 2.0, 'seldom': 3.0, 'zero': 0.0}.get
    assert feedback.candidates(weights, 1) == ['common', 'zero', 'rare']
    words = feedback.candidates(weights, 1)
    assert feedback.best_terms(weights, words, idf, 2) == ['rare', 'common']
    assert feedback.best_terms(weights, ['zero'], idf, 2) == []  # no IDF: not a term


def ranked(tmp_path, name, **settings):
    engine = make_engine(tmp_path, name=name, **settings)
    ids = [engine.learn(text).memory_id for text in (*FILLER, MATCH, RELATED, UNRELATED)]
    order = [m.id for m in engine.recall(QUERY, n=10).memories]
    engine.close()
    return ids[-3:], order


@pytest.mark.parametrize('settings, related_first', [
    ({'feedback_docs': 1}, True), ({'feedback_docs': 0}, False),
    ({'feedback_docs': 1, 'feedback_weight': 0.0}, False),
    ({'feedback_docs': 1, 'feedback_min_tokens': 200}, False)])
def test_a_candidate_sharing_the_best_matchs_words_comes_up(tmp_path, settings, related_first):
    (match, related, unrelated), order = ranked(tmp_path, 'm.db', **settings)
    # Only candidates are re-scored: the result is still the three keyword matches.
    assert sorted(order) == sorted([match, related, unrelated])
    assert order[0] == match
    assert (order.index(related) < order.index(unrelated)) is related_first


def test_short_memories_never_expand_the_query(tmp_path):
    """A store of one-line facts ranks as without feedback, scores included (up to age)."""
    texts = ['the red cup is on the left shelf near the sink',
             'the blue cup is in the dish rack', 'grip_force=12.5N works for cups',
             'cups of batch 1 are ceramic', 'the cup holder is on the right arm']
    results = []
    for name, docs in (('on.db', 5), ('off.db', 0)):
        engine = make_engine(tmp_path, name=name, feedback_docs=docs)
        for text in texts:
            engine.learn(text)
        results.append([(m.id, m.rrf_score) for m in engine.recall('where is the cup').memories])
        engine.close()
    assert [i for i, _ in results[0]] == [i for i, _ in results[1]] and len(results[0]) == 5
    assert [s for _, s in results[0]] == pytest.approx([s for _, s in results[1]], rel=1e-6)
