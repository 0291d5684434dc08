"""Learn: validation, auto-inference and each write-time dedup layer (docs/memory.md)."""

import threading

from engine_helpers import count, make_engine
import pytest
from robotmem_ros.engine.database import sqlite3
from robotmem_ros.errors import ConflictError, ValidationError


@pytest.mark.parametrize('insight, context, message', [
    ('', None, 'insight must not be empty'),
    ('   ', None, 'insight must not be empty'),
    ('x' * 2001, None, 'too long'),
    ('ok', [1, 2], 'must be a JSON object, got list'),
    ('ok', '{"a": 1}', 'must be a JSON object, got str'),  # JSON text is parsed at the node
    ('ok', {'a': float('nan')}, 'not finite'),
    ('bad \ud800 surrogate', None, 'UTF-8'),
    ('ok', {'confidence': 2}, 'confidence'),
    ('ok', {'kind': 'forever'}, 'kind'),
])
def test_bad_input_is_rejected_and_stores_nothing(engine, insight, context, message):
    with pytest.raises(ValidationError, match=message):
        engine.learn(insight, context)
    assert count(engine) == 0


def test_deep_json_is_rejected(engine):
    deep: dict = {'a': 1}
    for _ in range(39):
        deep = {'a': deep}
    with pytest.raises(ValidationError, match='deep'):
        engine.learn('ok', deep)


def test_created_fact_reports_inference(engine):
    result = engine.learn('always calibrate before grasping',
                          {'task': {'name': 'pick'}, 'robot': {'type': 'UR5e'}})
    assert result.status == 'created'
    assert result.auto_inferred['category'] == 'constraint'
    assert result.auto_inferred['confidence'] == 0.95
    assert 'robot:ur5e' in result.auto_inferred['tags']


def test_explicit_context_values_win_over_inference(engine):
    result = engine.learn('always calibrate before grasping',
                          {'category': 'procedure', 'confidence': 0.4, 'kind': 'episodic'})
    assert 'category' not in result.auto_inferred
    record = engine.recall('calibrate grasping', min_confidence=0.0).memories[0]
    assert (record.category, record.confidence, record.kind) == ('procedure', 0.4, 'episodic')


def test_failed_task_is_a_postmortem(engine):
    result = engine.learn('gripper closed too early on the bottle', {'task': {'success': False}})
    assert result.auto_inferred['category'] == 'postmortem'


def test_exact_duplicate_is_normalized_and_reinforces(engine):
    first = engine.learn('grip_force=12.5N works for cups')
    again = engine.learn('  GRIP_FORCE=12.5N   works for CUPS ')
    assert (again.status, again.method, again.existing_id) == (
        'duplicate', 'exact', first.memory_id)
    assert again.similarity == 1.0
    row = engine.db.reader().execute('SELECT reinforce_count, last_seen FROM memories WHERE id=?',
                                     (first.memory_id,)).fetchone()
    assert row[0] == 1 and row[1] is not None
    assert [h['event'] for h in _history(engine, first.memory_id)] == ['create', 'reinforce']
    assert count(engine) == 1


def test_exact_dedup_is_scoped_to_collection(engine):
    engine.learn('the tray is at station B', collection='cell_a')
    result = engine.learn('the tray is at station B', collection='cell_b')
    assert result.status == 'created'


def test_jaccard_duplicate_with_reordered_words(engine):
    first = engine.learn('place the red cube on the blue tray carefully')
    result = engine.learn('carefully place red cube on blue tray')
    assert (result.status, result.method, result.existing_id) == (
        'duplicate', 'jaccard', first.memory_id)
    assert result.similarity > 0.7


def test_jaccard_survives_fts_operator_text(engine):
    # Raw text with FTS5 syntax must neither raise nor silently disable the Jaccard layer.
    first = engine.learn('cup AND NOT "mug" OR bowl* NEAR(handle) -grasp')
    result = engine.learn('cup and not mug or bowl near handle grasp')
    assert result.status == 'duplicate' and result.existing_id == first.memory_id


def test_numbers_block_every_layer(tmp_path):
    engine = make_engine(tmp_path, decider='none')  # dedup alone; decisions tested apart
    engine.learn('grip force 12.5N works for ceramic cups')
    result = engine.learn('grip force 15N works for ceramic cups')
    assert result.status == 'created'
    assert count(engine) == 2
    engine.close()


@pytest.mark.parametrize('first, second', [
    ('the spare cup is on the left shelf next to the red box',
     'the spare cup is on the right shelf next to the red box'),
    ('do not grasp the wine glass from the top with the gripper',
     'grasp the wine glass from the top with the gripper'),
    ('机械臂抓取杯子时需要降低速度', '机械臂抓取杯子时不需要降低速度'),
])
def test_negation_and_opposites_are_never_duplicates(tmp_path, first, second):
    engine = make_engine(tmp_path, decider='none')
    engine.learn(first)
    assert engine.learn(second).status == 'created'
    engine.close()


def test_similar_facts_are_reported_not_blocking(engine):
    first = engine.learn('open the drawer slowly with the left gripper')
    result = engine.learn('open the drawer slowly with the right gripper')
    assert result.status == 'created'
    assert [f.id for f in result.similar_facts] == [first.memory_id]
    assert 0.4 <= result.similar_facts[0].rrf_score <= 0.7


def test_chinese_jaccard_dedup_compares_segmented_words(engine):
    first = engine.learn('机械臂抓取杯子时需要降低速度')
    result = engine.learn('机械臂 抓取 杯子 时 需要 降低 速度')
    assert result.status == 'duplicate' and result.existing_id == first.memory_id
    other = engine.learn('机械臂放置盒子时需要提高速度')
    assert other.status == 'created'


def test_session_jaccard_without_embedder(engine):
    session = engine.start_session().session_id
    first = engine.learn('cable tray blocks the left approach path', session_id=session)
    result = engine.learn('cable tray blocks left approach path today', session_id=session)
    assert result.status == 'duplicate'
    assert result.existing_id == first.memory_id


def test_cosine_layer_catches_paraphrase(tmp_path):
    # A human paraphrase of one robot task (robot_pairs dev set, cosine 0.94, Jaccard 0.5):
    # other words for the actions and the place, nothing that changes the goal.
    embedded = make_engine(tmp_path, embed=True, dedup_cosine_threshold=0.8)
    first = embedded.learn('lift the black bowl from the table center and put it on the plate')
    result = embedded.learn('pick up the black bowl in the middle of the table and place it on '
                            'plate')
    assert result.status == 'duplicate', result
    assert result.method == 'cosine'
    assert result.existing_id == first.memory_id
    assert result.similarity >= 0.8
    embedded.close()


def test_cosine_layer_respects_the_threshold(embedded):
    embedded.learn('The robot should slow down when approaching a glass object')
    result = embedded.learn('When nearing glass objects, the robot must reduce its speed')
    assert result.status == 'created'
    assert result.similar_facts and result.similar_facts[0].rrf_score < 0.95


def test_cosine_layer_is_number_aware(tmp_path):
    engine = make_engine(tmp_path, embed=True, decider='none')
    engine.learn('set the grip force to 12.5 N for ceramic cups')
    result = engine.learn('set the grip force to 14 N for ceramic cups')
    assert result.status == 'created'
    engine.close()


def test_unreadable_text_skips_cosine(embedded):
    # MiniLM maps Chinese to [UNK]: unrelated sentences would look alike; cosine must not run.
    embedded.learn('机械臂抓取杯子时需要降低速度')
    result = embedded.learn('今天仓库的温度比较高')
    assert result.status == 'created'
    pending = embedded.db.reader().execute(
        'SELECT embedded FROM memories WHERE id = ?', (result.memory_id,)).fetchone()[0]
    assert pending == -1


def test_learn_works_when_embedding_fails(embedded, monkeypatch):
    def broken(texts):
        raise RuntimeError('onnx session died')
    monkeypatch.setattr(embedded.embedding.embedder, 'embed', broken)
    result = embedded.learn('the conveyor stops at sensor S3')
    assert result.status == 'created'
    assert embedded.embedding.failures >= 1
    assert embedded.recall('conveyor sensor').mode == 'bm25_only'


def test_unique_index_blocks_a_second_active_copy(engine):
    engine.learn('the door sensor is flaky')
    with pytest.raises(ConflictError) as refused:  # the database layer types the error
        with engine.db.write() as conn:
            conn.execute(
                'INSERT INTO memories(type, content, content_hash, collection, confidence, '
                'created_at, valid_from) SELECT type, content, content_hash, collection, '
                'confidence, created_at, valid_from FROM memories')
    assert isinstance(refused.value.__cause__, sqlite3.IntegrityError)


def test_eight_threads_learning_the_same_200_facts(tmp_path):
    engine = make_engine(tmp_path)
    facts = [f'bin {i} holds part number P-{i * 7} in slot {i % 13}' for i in range(200)]
    errors = []

    def worker(offset):
        for i in range(200):
            try:
                engine.learn(facts[(i + offset * 25) % 200])
            except Exception as exc:  # noqa: BLE001 - the test counts every failure
                errors.append(exc)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert count(engine, "status = 'active'") == 200
    engine.close()


def test_two_engines_on_one_file_never_duplicate(tmp_path):
    first, second = make_engine(tmp_path), make_engine(tmp_path)
    facts = [f'pallet {i} weighs {i + 10} kg' for i in range(100)]

    def run(eng):
        for fact in facts:
            eng.learn(fact)
    threads = [threading.Thread(target=run, args=(e,)) for e in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count(first, "status = 'active'") == 100
    first.close()
    second.close()


def _history(engine, memory_id):
    return engine.db.reader().execute(
        'SELECT event FROM history WHERE memory_id = ? ORDER BY id', (memory_id,)).fetchall()
