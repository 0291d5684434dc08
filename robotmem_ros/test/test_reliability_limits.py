"""
Resource limits are settings (ROS parameters): each is enforced exactly at its value.

For every size limit, a request exactly at the limit is accepted and one unit over it is
rejected with a ValidationError that names the field, and the store is unchanged. Recall's n
is capped at 100. The perception buffer is bounded: overflow drops the oldest items and counts
them. The same limits reach the node as parameters, settable at run time.
"""

from __future__ import annotations

import json
import signal

from conftest import wait_until
from engine_helpers import count, make_engine
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from reliability_helpers import checker, fingerprint
from robotmem_msgs.msg import PerceptionData
from robotmem_msgs.srv import Learn
from robotmem_ros.errors import ValidationError
from robotmem_ros.types import PerceptionInput

SMALL = {'max_insight_chars': 50, 'max_description_chars': 40, 'max_json_bytes': 120,
         'max_json_depth': 3}


def nested(depth: int) -> dict:
    """Return an object with ``depth`` levels of objects (the outer one counts as 1)."""
    value: dict = {'leaf': 1}
    for _ in range(depth - 1):
        value = {'k': value}
    return value


def object_of_bytes(size: int) -> dict:
    """Return an object whose compact JSON is exactly ``size`` UTF-8 bytes."""
    text = json.dumps({'p': ''}, separators=(',', ':'))
    return {'p': 'x' * (size - len(text))}


def word_text(chars: int) -> str:
    """Return readable text of exactly ``chars`` characters."""
    return ('grip ' * chars)[:chars - 1] + 'z'


# (setting, field named in the error, call with a value exactly `size` units big)
CASES = [
    ('max_insight_chars', 'insight', lambda e, n: e.learn(word_text(n))),
    ('max_insight_chars', 'new_content',
     lambda e, n: e.update(e.learn('the old text of a fact').memory_id, word_text(n))),
    ('max_insight_chars', 'query', lambda e, n: e.recall(word_text(n))),
    ('max_description_chars', 'description',
     lambda e, n: e.save_perception(PerceptionInput(description=word_text(n)))),
    ('max_json_bytes', 'context', lambda e, n: e.learn('a fact with context',
                                                       object_of_bytes(n))),
    ('max_json_bytes', 'data', lambda e, n: e.save_perception(
        PerceptionInput(description='camera frame', data=object_of_bytes(n)))),
    ('max_json_bytes', 'context_filter', lambda e, n: e.recall('fact',
                                                               context_filter=object_of_bytes(n))),
    ('max_json_depth', 'context', lambda e, n: e.learn('a deep fact', nested(n))),
    ('max_json_depth', 'metadata', lambda e, n: e.save_perception(
        PerceptionInput(description='lidar scan', metadata=nested(n)))),
    ('max_json_depth', 'context_filter',
     lambda e, n: e.recall('fact', context_filter={'a': nested(n - 1)})),
]


@pytest.mark.parametrize('setting,field,call', CASES,
                         ids=[f'{s}-{f}' for s, f, _ in CASES])
def test_size_limit_is_exact_and_rejection_changes_nothing(tmp_path, setting, field, call):
    """At the limit: accepted. One over: ValidationError naming the field; store unchanged."""
    limit = SMALL[setting]
    engine = make_engine(tmp_path, **SMALL)
    call(engine, limit)
    before = fingerprint(engine)
    with pytest.raises(ValidationError, match=field) as raised:
        call(engine, limit + 1)
    assert str(limit) in str(raised.value)
    if field != 'new_content':  # that case learns its target first, on purpose
        assert fingerprint(engine) == before
    engine.close()


def test_defaults_are_the_documented_ones(tmp_path):
    """docs/reliability.md lists these defaults; a change must update it."""
    engine = make_engine(tmp_path)
    cfg = engine.config
    assert (cfg.max_insight_chars, cfg.max_description_chars, cfg.max_json_bytes,
            cfg.max_json_depth, cfg.perception_max_buffer) == (2000, 4000, 262_144, 16, 20_000)
    engine.close()


@pytest.mark.parametrize('n,ok', [(1, True), (100, True), (None, True), (0, False),
                                  (101, False), (-1, False), (10**9, False)])
def test_recall_n_is_capped_at_100(tmp_path, n, ok):
    """Accept None (the default) and 1..100; refuse anything else (0 is the wire's default)."""
    engine = make_engine(tmp_path)
    for i in range(120):
        engine.save_perception(PerceptionInput(description=f'frame {i} shows the red cup'))
    if ok:
        found = engine.recall('red cup', n=n)
        assert found.total == (engine.config.default_n if n is None else n)
        assert engine.recall('*', n=n).total == found.total
    else:
        with pytest.raises(ValidationError, match='between 1 and 100'):
            engine.recall('red cup', n=n)
    engine.close()


def test_perception_buffer_is_bounded_and_drops_oldest(ros, start_node):
    """A buffer of 10 that is never flushed keeps the newest 10 and counts 40 drops."""
    node = start_node(perception_max_buffer=10, perception_batch_size=1000,
                      perception_flush_interval=60.0)
    pub = ros.node.create_publisher(PerceptionData, f'{node.namespace}/perception', 100)
    try:
        assert wait_until(lambda: pub.get_subscription_count() > 0)
        for seq in range(50):
            pub.publish(PerceptionData(seq=seq, description=f'buffered frame {seq}'))
        status = node.status(lambda s: s.perception_received == 50)
        assert (status.perception_dropped, status.perception_written) == (40, 0)
    finally:
        ros.node.destroy_publisher(pub)
    assert node.stop(signal.SIGINT) == 0  # shutdown flushes what the buffer still holds
    with checker(node.db_path) as engine:
        kept = sorted(r[0] for r in engine.db.reader().execute(
            "SELECT content FROM memories WHERE type = 'perception'"))
        assert count(engine, "type = 'perception'") == 10
    assert kept == sorted(f'buffered frame {seq}' for seq in range(40, 50))


def test_limits_are_node_parameters_settable_at_run_time(start_node):
    """max_insight_chars from the launch, then changed with set_parameters, is what Learn uses."""
    node = start_node(max_insight_chars=30)
    assert node.call(Learn, 'learn', insight=word_text(30)).success
    too_long = node.call(Learn, 'learn', insight=word_text(31))
    assert not too_long.success and 'insight' in too_long.error and '30' in too_long.error
    value = ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=40)
    result = node.client.call(SetParameters, f'{node.prefix}/set_parameters',
                              parameters=[Parameter(name='max_insight_chars', value=value)])
    assert result.results[0].successful, result.results[0].reason
    assert node.call(Learn, 'learn', insight=word_text(40)).success
    assert not node.call(Learn, 'learn', insight=word_text(41)).success
