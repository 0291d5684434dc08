"""Sessions: consolidation (the example of docs/memory.md), decay, half-life, perceptions."""

from engine_helpers import count, FakeClock, make_engine
import pytest
from robotmem_ros.engine import schema, store
from robotmem_ros.engine.categories import DECAY_PROTECTED
from robotmem_ros.engine.consolidation import Candidate, greedy_clusters
from robotmem_ros.engine.decay import DAY, half_life_weight
from robotmem_ros.errors import ValidationError
from robotmem_ros.types import PerceptionInput

CONSOLIDATION_EXAMPLE = [
    ('grip_force=12.5N works for cups', 'observation', 0.85),
    ('12.5N grip force optimal for cylinders', 'observation', 0.80),
    ('force 12.5N best for cup grasping', 'observation', 0.90),
    ('red objects need 15N force', 'observation', 0.85),
    ('always calibrate before grasping', 'constraint', 0.95),
]


def _learn_consolidation_example(engine, session):
    ids = []
    for text, category, confidence in CONSOLIDATION_EXAMPLE:
        result = engine.learn(text, {'category': category, 'confidence': confidence},
                              session_id=session)
        assert result.status == 'created'
        ids.append(result.memory_id)
    return ids


def test_consolidation_example(tmp_path):
    engine = make_engine(tmp_path, embed=True)
    session = engine.start_session().session_id
    m1, m2, m3, m4, m5 = _learn_consolidation_example(engine, session)
    result = engine.end_session(session, 0.9)
    assert (result.merged_groups, result.superseded_count) == (1, 2)
    assert result.consolidated == [{'representative_id': m3, 'superseded_ids': [m1, m2],
                                    'avg_similarity': pytest.approx(result.avg_similarity)}]
    rows = dict(engine.db.reader().execute('SELECT id, status FROM memories').fetchall())
    assert rows == {m1: 'superseded', m2: 'superseded', m3: 'active', m4: 'active',
                    m5: 'active'}
    superseded_by = engine.db.reader().execute(
        'SELECT superseded_by FROM memories WHERE id IN (?, ?)', (m1, m2)).fetchall()
    assert [r[0] for r in superseded_by] == [m3, m3]
    engine.close()


def test_consolidation_without_embedder_is_conservative(tmp_path):
    engine = make_engine(tmp_path)
    session = engine.start_session().session_id
    _learn_consolidation_example(engine, session)
    assert engine.end_session(session).superseded_count == 0
    engine.close()


def test_consolidation_skips_small_sessions_and_protected(tmp_path):
    engine = make_engine(tmp_path)
    session = engine.start_session().session_id
    engine.learn('never lift above 2 m near people', session_id=session)
    engine.learn('never lift above 2 m near humans', {'category': 'constraint'},
                 session_id=session)
    assert engine.end_session(session).merged_groups == 0
    engine.close()


def test_complete_linkage_prevents_chaining():
    a, b, c = (Candidate(i, t, 'observation', 0.5, 0, i) for i, t in enumerate('abc'))
    similar = {frozenset('ab'), frozenset('bc')}

    def sim(x, y):
        return 0.9 if frozenset(x.content + y.content) in similar else None
    clusters = greedy_clusters([a, b, c], sim)
    assert [[m.id for m in cl.members] for cl in clusters] == [[0, 1]]


def test_decay_is_idempotent_and_respects_protection(tmp_path):
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock, decay_rate=0.01)
    session = engine.start_session().session_id
    plain = engine.learn('the spare battery is in the blue box',
                         {'confidence': 0.9}, session_id=session).memory_id
    rule = engine.learn('never drive faster than 1 m/s in the aisle',
                        {'confidence': 0.9}, session_id=session).memory_id
    clock.advance_days(10)
    first = engine.end_session(session)
    second = engine.end_session(session)
    conf = dict(engine.db.reader().execute('SELECT id, confidence FROM memories').fetchall())
    assert first.decayed_count == 1 and second.decayed_count == 0
    assert conf[plain] == pytest.approx(0.9 * 0.99 ** 10)
    assert conf[rule] == 0.9
    clock.advance_days(5)
    engine.end_session(session)
    conf = dict(engine.db.reader().execute('SELECT id, confidence FROM memories').fetchall())
    assert conf[plain] == pytest.approx(0.9 * 0.99 ** 15)
    engine.close()


def test_decay_candidates_are_the_memories_a_whole_day_idle(tmp_path):
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock, decay_rate=0.01)
    old = engine.learn('the spare battery is in the blue box').memory_id
    recalled = engine.learn('the charger dock is behind the door').memory_id
    clock.advance_days(2)
    engine.recall('charger dock')
    clock.advance_days(0.5)
    fresh = engine.learn('the mop is next to the sink').memory_id
    rule = engine.learn('never drive faster than 1 m/s in the aisle').memory_id
    assert engine.recaller.ctx.access.flush()  # the recall's hit, in SQL (end_session does so)
    conn, now = engine.db.reader(), clock()
    plan = ' '.join(row[-1] for row in conn.execute(
        'EXPLAIN QUERY PLAN SELECT id FROM memories INDEXED BY idx_memories_decay '
        f"WHERE collection = 'default' AND status = 'active' AND {schema.DECAY_REF} <= 0"))
    assert 'idx_memories_decay' in plan  # a range of the index, not a scan of the table
    due = store.decay_candidates(conn, 'default', DECAY_PROTECTED, idle_since=now - DAY)
    assert [row[0] for row in due] == [old]
    later = store.decay_candidates(conn, 'default', DECAY_PROTECTED, idle_since=now + DAY)
    assert sorted(row[0] for row in later) == sorted([old, recalled, fresh])
    assert rule not in [row[0] for row in later]  # a constraint never decays
    engine.close()


def test_recall_resets_the_decay_clock(tmp_path):
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock)
    session = engine.start_session().session_id
    memory_id = engine.learn('the charger dock is behind the door', {'confidence': 0.9},
                             session_id=session).memory_id
    clock.advance_days(30)
    engine.recall('charger dock')
    engine.end_session(session)
    conf = engine.db.reader().execute('SELECT confidence FROM memories WHERE id = ?',
                                      (memory_id,)).fetchone()[0]
    assert conf == 0.9
    engine.close()


def test_episodic_memories_fade_faster():
    day = 86_400
    assert half_life_weight(14 * day, 14) == pytest.approx(0.5)
    assert half_life_weight(14 * day, 180) > 0.9


def test_half_life_ranks_fresh_episodic_first(tmp_path):
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock)
    engine.learn('spill seen near dock alpha', {'kind': 'episodic', 'confidence': 0.9})
    clock.advance_days(40)
    engine.learn('spill seen near dock beta', {'kind': 'episodic', 'confidence': 0.9})
    assert engine.recall('spill dock').memories[0].content.endswith('beta')
    engine.close()


def test_valid_until_expires(tmp_path):
    clock = FakeClock()
    engine = make_engine(tmp_path, clock=clock)
    memory_id = engine.learn('aisle 4 is closed for cleaning').memory_id
    with engine.db.write() as conn:
        conn.execute('UPDATE memories SET valid_until = ? WHERE id = ?',
                     (clock.now + 3600, memory_id))
    assert engine.recall('aisle closed').total == 1
    clock.advance_days(1)
    assert engine.recall('aisle closed').total == 0
    engine.close()


def test_duplicate_perceptions_are_stored_without_error(tmp_path):
    engine = make_engine(tmp_path)
    first = engine.save_perception(PerceptionInput('cup at 1.3 0.7', 'vision'))
    second = engine.save_perception(PerceptionInput('cup at 1.3 0.7', 'vision'))
    assert first != second
    assert count(engine, "type = 'perception'") == 2
    engine.close()


def test_perception_batch_is_one_transaction_and_skips_invalid(tmp_path):
    engine = make_engine(tmp_path)
    statements = []
    engine.db._writer.set_trace_callback(statements.append)
    batch = [PerceptionInput(f'obj {i}', 'vision', data={'x': i}) for i in range(50)]
    batch[7] = PerceptionInput('bad data', 'vision', data=[1])
    ids = engine.save_perceptions(batch)
    engine.db._writer.set_trace_callback(None)
    assert ids[7] == 0 and all(ids[:7]) and all(ids[8:])
    assert sum(s.startswith('BEGIN') for s in statements) == 1
    assert count(engine, "type = 'perception'") == 49
    engine.close()


def test_single_perception_rejects_bad_input(tmp_path):
    engine = make_engine(tmp_path)
    with pytest.raises(ValidationError, match='description'):
        engine.save_perception(PerceptionInput('', 'vision'))
    with pytest.raises(ValidationError, match='metadata'):
        engine.save_perception(PerceptionInput('ok', 'vision', metadata=['a']))
    assert count(engine) == 0
    engine.close()


def test_lazy_embedding_of_perceptions(tmp_path):
    engine = make_engine(tmp_path, embed=True)
    engine.save_perceptions([PerceptionInput(f'a red mug on table {i}', 'vision')
                             for i in range(5)])
    assert engine.status().pending_embeddings == 5
    assert engine.embed_pending() == 5
    assert engine.status().pending_embeddings == 0
    assert engine.recall('crimson cup', n=5).mode == 'hybrid'
    engine.close()


def test_end_session_reports_related_memories(tmp_path):
    engine = make_engine(tmp_path)
    old = engine.start_session().session_id
    related = engine.learn('the blue bin fills up by noon', session_id=old).memory_id
    new = engine.start_session().session_id
    engine.learn('emptied the blue bin at noon today', session_id=new)
    result = engine.end_session(new, 1.0)
    assert [m.id for m in result.related_memories] == [related]
    assert result.summary['facts'] == 1 and result.summary['outcome_score'] == 1.0
    engine.close()


@pytest.mark.parametrize('embed', [False, True], ids=['bm25', 'hybrid'])
def test_related_memories_are_found_past_the_sessions_own_facts(tmp_path, embed):
    """
    The related query is made of the session's own facts, which match it best.

    They are excluded inside both channels (not after them), so 120 of them cannot fill the
    candidates; a memory stored without a session is another session's, not this one's.
    """
    engine = make_engine(tmp_path, embed=embed, decider='none')
    colours = ('red', 'blue', 'green', 'yellow', 'black', 'white')
    things = ('crate', 'bin', 'tray', 'pallet', 'bucket')
    docks = ('north', 'south', 'east', 'west')
    old = engine.start_session().session_id
    older = engine.learn('the red crate at the north dock is full by noon',
                         session_id=old).memory_id
    loose = engine.learn('the blue bin at the south dock has a broken lid').memory_id
    new = engine.start_session().session_id
    for colour in colours:
        for thing in things:
            for dock in docks:
                engine.learn(f'the {colour} {thing} at the {dock} dock was emptied',
                             session_id=new)
    related = engine.end_session(new, 1.0).related_memories
    assert {m.id for m in related} == {older, loose}
    engine.close()


def test_reopen_sees_stored_memories(tmp_path):
    engine = make_engine(tmp_path)
    engine.learn('the robot home pose is joint zero')
    engine.close()
    again = make_engine(tmp_path)
    assert again.recall('home pose').total == 1
    again.close()
