"""Adjacent memories share their score (engine/adjacency.py): conversation turns, episodes."""

from engine_helpers import make_engine
import pytest
from robotmem_ros.engine import adjacency, store

# A question in one turn, its answer in the next; the answer shares one word with the query.
QUESTION = 'Melanie: what are you researching these days, tell me everything about it?'
ANSWER = 'Caroline: adoption agencies, I want to give a child a loving home one day'
# Shorter than the answer, so BM25 alone ranks it above the answer for "Caroline".
DISTRACTOR = 'Caroline: I went hiking at the lake'
FILLER = ('Melanie: the weather was lovely on saturday', 'Melanie: we painted the fence',
          'Melanie: my kids loved the museum trip')
QUERY = 'what is Caroline researching'


def learn_all(engine, texts, **kwargs):
    return [engine.learn(text, **kwargs).memory_id for text in texts]


def test_spread_adds_the_best_score_at_each_distance_to_candidates_only():
    scores = {1: 1.0, 2: 0.0, 3: 0.5, 7: 0.2}
    chains = {1: ([], [2, 3]), 3: ([2, 1], [4, 5]), 7: ([6, 5], [8])}
    spread = adjacency.spread(scores, chains, 0.5)
    assert spread == {1: 1.0 + 0.5 * 0.5,          # 3 is two places after it
                      2: 0.0 + 0.5 * 1.0 + 0.0,    # 1 and 3 one place off: the best of them
                      3: 0.5 + 0.5 * 1.0,          # 1 two places before it
                      7: 0.2}                      # 4, 5, 6 and 8 were not candidates
    assert adjacency.spread(scores, {}, 0.5) == scores


def test_store_adjacent_keeps_collection_session_and_storage_order(tmp_path):
    engine = make_engine(tmp_path)
    a = learn_all(engine, ['the red cup is on the left shelf', 'the lab door code is 4711'])
    other = learn_all(engine, ['the drill is charged'], collection='tools')
    session = engine.start_session().session_id
    in_session = learn_all(engine, ['episode step one: saw the mug',
                                    'episode step two: grasped the mug'], session_id=session)
    b = learn_all(engine, ['the spare gripper pads are in drawer 3',
                           'the charger dock is behind the door'])
    engine.forget(b[0], reason='test')
    conn = engine.db.reader()
    near = store.adjacent(conn, [a[1], other[0], in_session[0], b[1], 10_000], 2)
    assert near[a[1]] == ([a[0]], [b[1]])  # no session: the session's rows and b[0] skipped
    assert near[other[0]] == ([], [])
    assert near[in_session[0]] == ([], [in_session[1]])
    assert near[b[1]] == ([a[1], a[0]], [])  # nearest first
    assert 10_000 not in near
    plan = ' '.join(row[-1] for row in conn.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM memories WHERE collection = 'default' "
        "AND session_id IS NULL AND status = 'active' AND id < 5 ORDER BY id DESC LIMIT 2"))
    assert 'idx_memories_adjacent' in plan  # one seek, not a walk of the collection
    engine.close()


@pytest.mark.parametrize('span, weight, answer_first', [
    (2, 0.35, True), (0, 0.35, False), (2, 0.0, False)])
def test_the_turn_after_a_matching_question_comes_up(tmp_path, span, weight, answer_first):
    engine = make_engine(tmp_path, adjacent_span=span, adjacent_weight=weight)
    question, answer = learn_all(engine, [QUESTION, ANSWER])
    learn_all(engine, FILLER)
    distractor, = learn_all(engine, [DISTRACTOR])
    ranked = [m.id for m in engine.recall(QUERY, n=10).memories]
    # Keyword recall still returns keyword matches only: adjacency never adds a memory.
    assert sorted(ranked) == sorted([question, answer, distractor])
    assert (ranked.index(answer) < ranked.index(distractor)) is answer_first
    engine.close()


def test_a_turn_of_another_session_lends_nothing(tmp_path):
    engine = make_engine(tmp_path)
    question, = learn_all(engine, [QUESTION], session_id=engine.start_session().session_id)
    answer, = learn_all(engine, [ANSWER])
    learn_all(engine, FILLER)
    distractor, = learn_all(engine, [DISTRACTOR])
    ranked = [m.id for m in engine.recall(QUERY, n=10).memories]
    assert ranked.index(distractor) < ranked.index(answer)
    assert question in ranked
    engine.close()


def test_recall_filters_still_decide_what_is_returned(tmp_path):
    """A memory next to a candidate is never returned for it if a filter excludes it."""
    engine = make_engine(tmp_path)
    question, = learn_all(engine, [QUESTION], context={'robot': 'a'})
    answer, = learn_all(engine, [ANSWER], context={'robot': 'b'})
    learn_all(engine, FILLER, context={'robot': 'b'})
    distractor, = learn_all(engine, [DISTRACTOR], context={'robot': 'b'})
    ranked = [m.id for m in engine.recall(QUERY, n=10, context_filter={'robot': 'b'}).memories]
    assert sorted(ranked) == [answer, distractor]
    ranked = [m.id for m in engine.recall(QUERY, n=10, context_filter={'robot': 'a'}).memories]
    assert ranked == [question]
    engine.close()
