"""
Values that must never get into the store, or never hurt once there: real files, real node.

- Import validates every number (timestamps a message can carry, confidence in [0, 1],
  integers SQLite holds); a bad line names itself and nothing is imported.
- A row with an out-of-range time (a store written before that check) never fails a recall.
- Text that renders as nothing (zero-width characters, a BOM) is empty; text with nothing a
  search can find (emoji only) is refused with a clear error; an optional id or label that
  renders as nothing, or that import or a fleet pull would refuse, is refused at Learn.
- An integer beyond a double, or a float SQLite reads differently from Python, in a context:
  stored, embedded, and found by an equality filter.
- Perception stamps outside [2000-01-01, now + perception_stamp_max_future] are replaced by the
  receive time and counted; a perception decays from when it was stored, not from its stamp.
"""

from __future__ import annotations

import json
import pathlib
import re
import sqlite3

from conftest import wait_until
from engine_helpers import count, FakeClock, make_engine
import pytest
from robotmem_msgs.msg import PerceptionData
from robotmem_msgs.srv import Learn, Recall
from robotmem_ros.errors import ValidationError
from robotmem_ros.types import PerceptionInput
from test_node_perception import diagnostics_of

NOW = 1_790_000_000.0  # 2026-09


def export_lines(tmp_path: pathlib.Path) -> list[dict]:
    engine = make_engine(tmp_path, name='source.db')
    session = engine.start_session().session_id
    engine.learn('the drill bits are sorted by size in the red case', session_id=session)
    engine.save_perception(PerceptionInput('camera sees the red case open', session_id=session))
    engine.end_session(session, 0.8)
    engine.export_jsonl(str(tmp_path / 'good.jsonl'))
    engine.close()
    return [json.loads(line) for line in (tmp_path / 'good.jsonl').read_text().splitlines()]


BAD_VALUES = [
    ('memory', 'created_at', 1e300), ('memory', 'created_at', -1.0),
    ('memory', 'created_at', 2**31), ('memory', 'last_accessed', 1e300),
    ('memory', 'decay_ref', 1e19), ('memory', 'valid_until', -5),
    ('memory', 'confidence', 5.0), ('memory', 'confidence', -0.1),
    ('memory', 'access_count', 2**70), ('memory', 'reinforce_count', -1),
    ('memory', 'id', 2**64), ('memory', 'superseded_by', 2**63),
    ('session', 'started_at', 1e300), ('session', 'ended_at', -1e9),
]


@pytest.mark.parametrize('record, field, value', BAD_VALUES,
                         ids=[f'{r}.{f}={v:g}' for r, f, v in BAD_VALUES])
def test_import_refuses_numbers_a_recall_cannot_carry(tmp_path, record, field, value):
    lines = export_lines(tmp_path)
    target = next(i for i, line in enumerate(lines) if line['record'] == record)
    lines[target][field] = value
    bad = tmp_path / 'bad.jsonl'
    bad.write_text(''.join(json.dumps(line) + '\n' for line in lines))
    engine = make_engine(tmp_path)
    try:
        with pytest.raises(ValidationError, match=re.escape(f'{bad}:{target + 1}: {field} must')):
            engine.import_jsonl(str(bad))
        assert count(engine) == 0
        engine.import_jsonl(str(tmp_path / 'good.jsonl'))  # the valid file still imports
        assert count(engine) == 2
    finally:
        engine.close()


def test_a_stored_out_of_range_time_never_fails_a_recall(start_node, tmp_path):
    node = start_node()
    assert node.call(Learn, 'learn', insight='the calibration board leans on the east wall',
                     context='{"task": {"name": "calibrate"}}').success
    # A store written before import checked timestamps can hold such a row.
    with sqlite3.connect(node.db_path) as conn:
        conn.execute('UPDATE memories SET created_at = 1e300, last_accessed = 1e300, '
                     'valid_from = 1e300')
    for query in ('calibration board', '*'):
        found = node.call(Recall, 'recall', query=query, n=5)
        assert found.error == '' and len(found.memories) == 1, found
        assert found.memories[0].created_at.sec == 2**31 - 1
    assert 'internal error' not in node.log()


@pytest.mark.parametrize('text', ['\u200b\u200b', '\ufeff', '\ufeff \u200d\u2060\u200c\n',
                                  '\u00ad'], ids=['zero-width-space', 'bom', 'mixed', 'shy'])
def test_invisible_text_is_empty(engine, text):
    with pytest.raises(ValidationError, match='insight must not be empty'):
        engine.learn(text)
    with pytest.raises(ValidationError, match='description must not be empty'):
        engine.save_perception(PerceptionInput(text))
    assert count(engine) == 0


@pytest.mark.parametrize('session_id', ['\u200b', '\ufeff\u00ad'], ids=['zwsp', 'bom-shy'])
def test_a_session_id_that_renders_as_nothing_is_refused(engine, session_id):
    # Stored, it named a session that EndSession refused as empty on every call and that an
    # import of the store's own export refused.
    with pytest.raises(ValidationError, match='session_id holds only invisible characters'):
        engine.learn('the torque wrench is in drawer two', session_id=session_id)
    with pytest.raises(ValidationError, match='session_id holds only invisible characters'):
        engine.save_perception(PerceptionInput('the torque wrench is in drawer two',
                                               session_id=session_id))
    assert count(engine) == 0
    # One a store already holds (an earlier version took it) can still be read and ended.
    assert engine.recall('torque wrench', session_id=session_id).memories == []


@pytest.mark.parametrize('category, error', [
    ('obs\x00ervation', 'must not contain NUL'), ('x' * 257, 'is too long: 257 characters'),
    ('\u200b', 'must not be empty')], ids=['nul', 'long', 'invisible'])
def test_a_category_another_path_would_refuse_is_refused_at_learn(tmp_path, category, error):
    # A NUL was cut off on the wire, and import (or a fleet pull) refused what Learn stored.
    engine = make_engine(tmp_path)
    with pytest.raises(ValidationError, match=f'context.category {error}'):
        engine.learn('the torque wrench is in drawer two', {'category': category})
    kept = engine.learn('the torque wrench is in drawer two', {'category': 'x' * 256})
    assert kept.status == 'created'
    engine.export_jsonl(str(tmp_path / 'out.jsonl'))
    other = make_engine(tmp_path, name='other.db')
    assert other.import_jsonl(str(tmp_path / 'out.jsonl'))['imported'] == 1


@pytest.mark.parametrize('context', [{'robot': 10**400}, {'task': {'name': -10**400}}],
                         ids=['robot', 'task.name'])
def test_an_integer_beyond_a_double_at_a_filtered_path_is_embedded(tmp_path, context):
    # The vector index files a memory by these paths; float() of such an integer raised, so a
    # learn with a model failed, and the same value imported stalled every later embedding.
    engine = make_engine(tmp_path, embed=True)
    assert engine.learn('the red cup is on the table', context).status == 'created'
    source = make_engine(tmp_path, name='source.db')
    source.learn('the blue box sits by the door', context)
    source.learn('the green bottle is in the fridge')
    source.export_jsonl(str(tmp_path / 'out.jsonl'))
    engine.import_jsonl(str(tmp_path / 'out.jsonl'))
    assert engine.embed_pending() == 2
    embedded = engine.db.reader().execute('SELECT embedded FROM memories').fetchall()
    assert [row[0] for row in embedded] == [1, 1, 1]
    found = engine.recall('red cup', context_filter=context, n=5)
    assert sorted(m.content for m in found.memories) == [
        'the blue box sits by the door', 'the red cup is on the table']


@pytest.mark.parametrize('value', [2.3947504372216924e-120, 3.9942566682411615e+250, 0.1],
                         ids=['tiny', 'huge', 'plain'])
def test_a_float_equality_finds_the_memory_holding_that_float(tmp_path, value):
    # SQLite reads some decimals of very large or small magnitude one unit in the last place
    # off Python's: pushed down to SQL, the equality dropped the very memory it names.
    engine = make_engine(tmp_path, embed=True)
    context = {'bias': value, 'robot': value, 'sensor': {'bias': value}}
    engine.learn('the gripper camera bias was measured', context)
    engine.learn('the wrist camera bias was measured', {'bias': 1.0, 'robot': 1.0})
    for path in ('bias', 'robot', 'sensor.bias'):
        for query in ('*', 'camera bias'):
            found = engine.recall(query, context_filter={path: value}, n=5)
            assert [m.content for m in found.memories] == [
                'the gripper camera bias was measured'], (path, query)


def test_a_plain_float_equality_is_still_tested_before_the_cut(tmp_path):
    # Tested in Python only, a filter on 0.5 applies after the channels' cut (max_fetch): a
    # query matching more memories than that missed the one memory holding 0.5.
    engine = make_engine(tmp_path, max_fetch=10)
    target = engine.learn('the gripper closed at half force on the long thin aluminium bar '
                          'during calibration run seven', {'force': 0.5}).memory_id
    for i in range(40):
        engine.learn(f'gripper trial {i} closed on box {i * 13}', {'force': 0.25 + i})
    found = engine.recall('gripper', n=5, context_filter={'force': 0.5})
    assert [m.id for m in found.memories] == [target]


def test_an_update_cannot_grow_a_context_past_the_limit(tmp_path):
    # Merged unchecked, the context outgrew max_json_bytes, which imports and fleet pulls
    # hold a memory to.
    engine = make_engine(tmp_path, max_json_bytes=1024)
    learned = engine.learn('the torque wrench is in drawer two', {'note': 'a' * 600})
    with pytest.raises(ValidationError, match='larger than 1024 bytes'):
        engine.update(learned.memory_id, 'the torque wrench is in drawer three',
                      {'more': 'b' * 600})
    kept = engine.recall('torque wrench', n=5).memories
    assert [(m.content, m.context) for m in kept] == [
        ('the torque wrench is in drawer two', {'note': 'a' * 600})]


def test_emoji_only_text_is_refused_with_a_clear_error(start_node):
    node = start_node()
    refused = node.call(Learn, 'learn', insight='\U0001f34e\U0001f525\u2705')
    assert not refused.success and 'nothing searchable' in refused.error
    kept = node.call(Learn, 'learn', insight='\U0001f34e apple crate is full')
    assert kept.success
    found = node.call(Recall, 'recall', query='apple crate', n=5)
    assert [m.content for m in found.memories] == ['\U0001f34e apple crate is full']


def test_implausible_perception_stamps_are_replaced_by_the_receive_time(tmp_path):
    clock = FakeClock(NOW)
    engine = make_engine(tmp_path, clock=clock)
    try:
        stamps = [NOW - 60.0, -(2.0**31), 2.0**31 - 1, -5.0, 1e300, 12.5, NOW + 7200.0]
        ids = engine.save_perceptions(
            [PerceptionInput(f'lidar sweep {i}', created_at=s) for i, s in enumerate(stamps)])
        assert all(ids)
        rows = engine.db.reader().execute(
            'SELECT content, created_at, context_json FROM memories ORDER BY id').fetchall()
        assert [r['created_at'] for r in rows] == [NOW - 60.0] + [NOW] * 6
        assert [json.loads(r['context_json']).get('stamp_replaced') for r in rows] == \
            [None] + stamps[1:]
        assert engine.status().stamps_replaced == 6
        listing = engine.recall('*', n=10, min_confidence=0.0)
        assert [m.content for m in listing.memories] == [f'lidar sweep {i}' for i in range(7)]
        with pytest.raises(ValidationError, match='created_at must be a finite number'):
            engine.save_perception(PerceptionInput('bad', created_at=float('nan')))
    finally:
        engine.close()


def test_topic_stamps_policy_counted_in_diagnostics(ros, start_node):
    node = start_node(status_period=0.5)
    pub = ros.node.create_publisher(PerceptionData, f'{node.namespace}/perception', 10)
    assert wait_until(lambda: pub.get_subscription_count() > 0)
    for seq, sec in enumerate((1_700_000_000, -2**31, 2**31 - 1, -5), 1):
        msg = PerceptionData(seq=seq, description=f'sonar ping {seq}', session_id='stamps')
        msg.header.stamp.sec = sec
        pub.publish(msg)
    # Both in one predicate: a heartbeat may read the store before the batch's counters.
    diagnostics_of(ros, node, lambda v: v['written'] == 4 and v['stamps_replaced'] == 3)
    listing = node.call(Recall, 'recall', query='*', n=10, min_confidence=0.0,
                        session_id='stamps')
    assert [m.content for m in listing.memories] == [f'sonar ping {i}' for i in range(1, 5)]
    assert listing.memories[0].created_at.sec == 1_700_000_000
    assert all(m.created_at.sec > 1_700_000_000 for m in listing.memories[1:])


def test_a_perception_decays_from_when_it_was_stored_not_from_its_stamp(tmp_path):
    clock = FakeClock(NOW)
    engine = make_engine(tmp_path, clock=clock)
    try:
        session = engine.start_session().session_id
        year_ago = NOW - 365 * 86_400.0
        engine.save_perception(PerceptionInput('forklift parked at dock four',
                                               session_id=session, created_at=year_ago))
        assert engine.end_session(session).decayed_count == 0
        found = engine.recall('forklift dock', n=5)
        assert [(m.confidence, m.created_at) for m in found.memories] == [(0.9, year_ago)]
        clock.advance_days(10)  # ten days after storing it: ten days of decay
        engine.end_session(engine.start_session().session_id)
        [memory] = engine.recall('forklift dock', n=5).memories
        assert memory.confidence == pytest.approx(0.9 * 0.99 ** 10)
    finally:
        engine.close()
