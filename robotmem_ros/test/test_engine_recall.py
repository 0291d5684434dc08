"""Recall: the pipeline of docs/memory.md, filters that never starve, episode listing, touch."""


from engine_helpers import FakeClock, make_engine
import pytest
from robotmem_ros.errors import ValidationError
from robotmem_ros.types import PerceptionInput


@pytest.mark.parametrize('kwargs, message', [
    ({'query': ''}, 'query must not be empty'),
    ({'query': 'cup', 'n': 101}, 'n must be between'),
    ({'query': 'cup', 'n': -1}, 'n must be between'),
    ({'query': 'cup', 'min_confidence': float('nan')}, 'finite'),
    ({'query': 'cup', 'min_confidence': 1.5}, 'min_confidence'),
    ({'query': 'cup', 'context_filter': {'a': {'$regex': 'x'}}}, 'regex'),
    ({'query': 'cup', 'context_filter': '{}'}, 'must be a JSON object, got str'),
    ({'query': 'cup', 'context_filter': {'robot': '\ud800x'}}, 'context_filter is not valid'),
    ({'query': 'cup', 'context_filter': {'robot': {'$in': ['\udfff']}}}, 'not valid UTF-8'),
    ({'query': 'cup', 'spatial_sort': {'field': 'p'}}, 'target'),
])
def test_bad_requests(engine, kwargs, message):
    with pytest.raises(ValidationError, match=message):
        engine.recall(**kwargs)


@pytest.mark.parametrize('store, facts, query, mode', [
    # Without an embedder: BM25 alone; the best match scores 1 and nothing unrelated follows.
    ('engine', ['grasp the cup from the side with 12.5N', 'the conveyor belt runs at 0.3 m/s'],
     'how to grasp a cup', 'bm25_only'),
    # With one: the vector channel finds a paraphrase that shares no word with the query.
    ('embedded', ['Use a gentle pinch to pick up eggs', 'The warehouse door closes at 18:00'],
     'how should I grab something fragile', 'hybrid'),
])
def test_best_match_comes_first(request, store, facts, query, mode):
    engine = request.getfixturevalue(store)
    for fact in facts:
        engine.learn(fact)
    result = engine.recall(query)
    assert result.mode == mode
    assert result.memories[0].content == facts[0]
    if mode == 'bm25_only':
        assert result.memories[0].rrf_score == 1.0
        assert result.total == len(result.memories) == 1


FUSION_FACTS = ['Use a gentle pinch to pick up eggs', 'The warehouse door closes at 18:00',
                'grab the egg carton by its long side', 'eggs are stored on the top shelf',
                'the gripper pads were replaced on Monday', 'pick up the mug by its handle']


@pytest.mark.parametrize('weight, alone', [(1.0, ('bm25',)), (0.0, ('vector',))])
def test_score_fusion_weight_one_channel_gives_that_channels_ranking(tmp_path, weight, alone):
    engine = make_engine(tmp_path, embed=True, bm25_weight=weight)
    try:
        for fact in FUSION_FACTS:
            engine.learn(fact)
        query = 'how should I pick up eggs'
        hybrid = engine.recall(query, 6, 0.0)
        single = engine.recall(query, 6, 0.0, channels=alone)
    finally:
        engine.close()
    assert hybrid.mode == 'hybrid'
    # Min-max puts the channel's last hit at 0, level with what the channel did not find, so
    # the order is that channel's down to its second-to-last hit.
    count = len(single.memories)
    assert count >= 3
    assert [m.id for m in hybrid.memories[:count - 1]] == [m.id for m in single.memories[:-1]]
    assert single.memories[-1].id in {m.id for m in hybrid.memories}


def test_rrf_fusion_is_still_available(tmp_path):
    engine = make_engine(tmp_path, embed=True, fusion='rrf')
    try:
        for fact in FUSION_FACTS:
            engine.learn(fact)
        result = engine.recall('how should I pick up eggs', n=3)
    finally:
        engine.close()
    assert result.mode == 'hybrid'
    assert result.memories[0].rrf_score == 1.0
    assert any(m.content.startswith('Use a gentle pinch') for m in result.memories)


def test_query_operator_soup_is_safe(engine):
    engine.learn('cup handle faces left')
    for query in ['"unbalanced', 'AND OR NOT', 'NEAR(a b', '*cup*', "'; DROP TABLE memories;--",
                  'cup^2 {col} :x']:
        engine.recall(query)
    assert engine.recall('cup handle').total == 1


def test_min_confidence_zero_is_a_real_value(engine):
    engine.learn('low trust hint about the shelf', {'confidence': 0.1})
    assert engine.recall('shelf hint').total == 0             # default 0.3
    assert engine.recall('shelf hint', min_confidence=0.0).total == 1


def test_context_filter_does_not_starve(engine):
    for i in range(60):
        engine.learn(f'pick attempt {i} on the cup with force {i}N',
                     {'task': {'success': i % 20 == 0}})
    result = engine.recall('pick cup force', n=3, context_filter={'task.success': True})
    assert result.total == 3
    assert all(m.context['task']['success'] for m in result.memories)


def test_spatial_sort_nearest_first_and_cutoff(engine):
    objects = {'cup': [1.0, 0.0, 0.4], 'mug': [1.3, 0.7, 0.42], 'bowl': [1.31, 0.69, 0.42],
               'plate': [5, 5, 5]}
    for name, pos in objects.items():
        engine.learn(f'{name} seen on the workbench', {'spatial': {'object_position': pos}})
    engine.learn('tray seen on the workbench')
    result = engine.recall('seen workbench', n=10, spatial_sort={
        'field': 'spatial.object_position', 'target': [1.3, 0.7, 0.42], 'max_distance': 1.0})
    assert [m.content.split()[0] for m in result.memories] == ['mug', 'bowl', 'cup']


def test_real_world_memories_weigh_more(engine):
    sim = {'env': {'sim_or_real': 'sim'}, 'confidence': 0.8}
    real = {'env': {'sim_or_real': 'real'}, 'confidence': 0.8}
    engine.learn('grasp box with suction cup alpha', sim)
    engine.learn('grasp box with suction cup beta', real)
    assert engine.recall('grasp box suction cup').memories[0].content.endswith('beta')


def test_session_filter_and_episode_listing_in_time_order(tmp_path):
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock)
    session = engine.start_session().session_id
    other = engine.start_session().session_id
    stamps = [clock.now + 30, clock.now + 10, clock.now + 20]
    engine.save_perceptions([PerceptionInput(f'frame {i}', 'camera', session_id=session,
                                             created_at=t) for i, t in enumerate(stamps)])
    engine.learn('cup is on the left shelf', session_id=session)
    engine.save_perception(PerceptionInput('frame other', 'camera', session_id=other))
    episode = engine.recall('*', n=100, session_id=session)
    assert episode.mode == 'all'
    assert [m.content for m in episode.memories] == [
        'cup is on the left shelf', 'frame 1', 'frame 2', 'frame 0']
    assert engine.recall('frame', session_id=other).total == 1
    engine.close()


def test_time_range_filter(tmp_path):
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock)
    engine.learn('first shift note about torque')
    clock.advance_days(1)
    engine.learn('second shift note about torque')
    window = {'created_at': {'$gte': clock.now - 3600}}
    result = engine.recall('torque note', context_filter=window)
    assert [m.content for m in result.memories] == ['second shift note about torque']
    engine.close()


def test_recall_touches_hits(engine):
    memory_id = engine.learn('lidar needs cleaning weekly').memory_id
    engine.recall('lidar cleaning')
    hit = engine.recall('lidar cleaning').memories[0]
    assert hit.id == memory_id and hit.access_count == 2 and hit.last_accessed is not None


def test_superseded_and_forgotten_never_return(engine):
    keep = engine.learn('the spare gripper is in locker 3').memory_id
    gone = engine.learn('the old gripper is in locker 9').memory_id
    engine.forget(gone, 'scrapped')
    assert [m.id for m in engine.recall('gripper locker', n=10).memories] == [keep]
    with engine.db.write() as conn:
        conn.execute("UPDATE memories SET status = 'superseded' WHERE id = ?", (keep,))
    assert engine.recall('gripper locker').total == 0
    assert engine.recall('gripper locker', context_filter={'include_superseded': True}).total == 1


def test_update_reindexes_text(engine):
    memory_id = engine.learn('the calibration board is blue').memory_id
    result = engine.update(memory_id, 'the calibration board is green')
    assert result.old_content == 'the calibration board is blue'
    assert engine.recall('blue').total == 0
    assert engine.recall('green').memories[0].id == memory_id


def test_update_and_forget_validate(engine):
    with pytest.raises(ValidationError):
        engine.update(-1, 'x')
    from robotmem_ros.errors import NotFoundError
    with pytest.raises(NotFoundError):
        engine.forget(12345)
    with pytest.raises(NotFoundError):
        engine.end_session('no-such-session')


def test_vector_channel_skipped_for_unreadable_query(embedded):
    embedded.learn('机械臂抓取杯子时需要降低速度')
    result = embedded.recall('抓取杯子')
    assert result.mode == 'bm25_only'
    assert result.total == 1


def test_vector_channel_respects_collection(embedded):
    embedded.learn('fragile parts need slow motion', collection='a')
    embedded.learn('fragile parts need slow motion', collection='b')
    result = embedded.recall('delicate components movement speed', collection='a', n=10)
    assert {m.collection for m in result.memories} == {'a'}


def test_latin_accents_are_kept(engine):
    engine.learn('the robot waits at the café door')
    assert engine.recall('café').total == 1
    assert engine.recall('cafe').total == 0


def test_chinese_query_is_segmented_like_the_index(engine):
    engine.learn('机械臂抓取杯子时需要降低速度')
    engine.learn('仓库门在晚上六点关闭')
    hits = engine.recall('如何抓取杯子').memories
    assert [m.content for m in hits] == ['机械臂抓取杯子时需要降低速度']


def test_filter_on_an_integer_beyond_64_bits_recalls_instead_of_failing(engine):
    engine.learn('the cup weighs a lot', {'mass': 2**64})
    engine.learn('the cup is light', {'mass': 1})
    result = engine.recall('cup', context_filter={'mass': 2**64})
    assert [m.content for m in result.memories] == ['the cup weighs a lot']


@pytest.mark.parametrize('context_filter', [None, {'task.success': True}])
def test_records_read_best_first_rank_as_reading_them_all(tmp_path, context_filter):
    """
    Recall reads candidates' records in fused order and stops once none can reach the top n.

    Ages (two half-lives), the real-world weight and a filter reorder the candidates after
    fusion; every top n must be the one that reading every candidate gives.
    """
    import random
    from robotmem_ros.engine import store
    from robotmem_ros.engine.context_filter import parse_filter
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock, real_weight=3.0)
    rng = random.Random(3)
    words = ['gripper', 'torque', 'cup', 'shelf', 'camera', 'lidar', 'battery', 'wrist']
    with engine.db.write() as conn:
        for i in range(400):
            store.insert_memory(
                conn, type_='fact', content=' '.join(rng.sample(words, 3)) + f' note{i}',
                collection='default', session_id='', category='observation',
                perception_type='', kind=rng.choice(['episodic', 'semantic']), confidence=0.8,
                context={'env': {'sim_or_real': rng.choice(['sim', 'real'])},
                         'task': {'success': rng.random() < 0.3}},
                created_at=clock.now - rng.random() * 90 * 86_400)
    cfilter, options = parse_filter(context_filter, max_bytes=4096, max_depth=8)
    ranked = engine.recaller._ranked
    for query in ('gripper torque', 'cup shelf camera', 'battery', 'wrist lidar note7'):
        for n in (1, 5, 10):
            args = (query, 'default', n, 0.0, '', cfilter, options)
            best_first = ranked(*args, None, clock.now, ('bm25',))[0]
            everything = ranked(*args, _ReadAll(), clock.now, ('bm25',))[0]
            assert [(m.id, m.rrf_score) for m in best_first] == [
                (m.id, m.rrf_score) for m in everything]
    engine.close()


class _ReadAll:
    """A spatial sort that keeps the order: recall then reads every candidate's record."""

    def apply(self, records, context_of):
        return records
