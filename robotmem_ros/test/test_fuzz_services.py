"""
Property-based fuzzing of every request field, on the engine (many examples) and the node.

Inputs mix huge strings, lone surrogates, NaN/inf, deep JSON, FTS5 operator soup, SQL-looking
text and JSON of the wrong type. Every call must either succeed with a correct result or be
rejected with a typed error (engine) / ``success=false`` and an error that is not an
"internal error" (node), and a rejected call must leave the store byte-for-byte unchanged
(schema, rows, FTS and vector index). After the node fuzz the node is still alive and answers.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from engine_helpers import make_engine
from hypothesis import given, HealthCheck, settings, strategies as st
import pytest
from reliability_helpers import checker, fingerprint
from robotmem_msgs.srv import (EndSession, Forget, Learn, Recall, SavePerception, StartSession,
                               Update)
from robotmem_ros.errors import RobotMemError, StorageError
from robotmem_ros.node.conversions import json_field
from robotmem_ros.types import PerceptionInput

ENGINE_EXAMPLES = 150
NODE_EXAMPLES = 25
ENGINE_SETTINGS = settings(max_examples=ENGINE_EXAMPLES, deadline=None, database=None,
                           suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                  HealthCheck.too_slow,
                                                  HealthCheck.data_too_large])
NODE_SETTINGS = settings(ENGINE_SETTINGS, max_examples=NODE_EXAMPLES)

FTS_SOUP = ['AND', 'OR', 'NOT', 'NEAR(', 'NEAR', ')', '(', '"', '*', '^', ':', 'body:', '-',
            '+', '{', '}', 'col:x', "'", ';', '--']
SQL_TEXT = ["'); DROP TABLE memories;--", '" OR 1=1 --', 'SELECT * FROM memories',
            "x' UNION SELECT sql FROM sqlite_master --"]
WORDS = ['red', 'cup', 'shelf', 'gripper', 'force', '12.5N', 'drawer', 'lidar']


def text_strategy(surrogates: bool) -> st.SearchStrategy[str]:
    """Strings a caller might send: words, soup, SQL, unicode junk, huge, empty."""
    chars = st.characters(blacklist_categories=() if surrogates else ('Cs',))
    return st.one_of(
        st.lists(st.sampled_from(WORDS + FTS_SOUP + SQL_TEXT), max_size=12).map(' '.join),
        st.text(chars, max_size=60),
        st.sampled_from(['', ' ', '*', '\t\n', 'x' * 2000, 'y' * 2001, 'z' * 4001,
                         'w ' * 60_000]),
        st.builds(lambda w, n: (w + ' ') * n, st.sampled_from(WORDS), st.integers(0, 1200)))


def deep(depth: int, kind: str) -> Any:
    """Return a JSON value nested ``depth`` levels of lists or objects."""
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == 'list' else {'k': value}
    return value


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                          allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (st.lists(inner, max_size=4)
                   | st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)


def json_strategy(surrogates: bool) -> st.SearchStrategy[Any]:
    """JSON fields of a request (text): valid objects, wrong top-level types, deep, NaN, broken."""
    return st.one_of(
        st.just(''),
        st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=5).map(json.dumps),
        JSON_VALUES.map(json.dumps),  # wrong top-level type most of the time
        st.builds(lambda d, k: json.dumps({'a': deep(d, k)}), st.integers(1, 80),
                  st.sampled_from(['list', 'dict'])),
        st.sampled_from(['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}', '{', '[1,',
                         '{"a": 1, "a": 2}', 'null', '{"big": "' + 'b' * 300_000 + '"}']),
        text_strategy(surrogates))


def object_strategy(surrogates: bool) -> st.SearchStrategy[Any]:
    """
    JSON arguments of the engine (Python values): the same cases as ``json_strategy``, parsed.

    Text is among them: JSON text is parsed at the ROS boundary, so the engine must refuse it.
    """
    return st.one_of(
        st.none(),
        st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=5),
        JSON_VALUES,  # wrong top-level type most of the time
        st.builds(lambda d, k: {'a': deep(d, k)}, st.integers(1, 80),
                  st.sampled_from(['list', 'dict'])),
        st.sampled_from([{'x': math.nan}, {'x': math.inf}, {'x': -math.inf},
                         {'big': 'b' * 300_000}]),
        text_strategy(surrogates))


FILTER_OBJECTS = st.one_of(
    st.builds(lambda path, op, val: {path: {op: val}},
              st.sampled_from(['task.success', 'spatial.object_position.0', 'a..b', '', '$or',
                               'params.force']),
              st.sampled_from(['$eq', '$ne', '$gt', '$gte', '$lt', '$lte', '$in', '$nin',
                               '$exists', '$regex', '$where', 'gt']),
              JSON_VALUES),
    st.builds(lambda v: {'created_at': v}, JSON_VALUES),
    st.builds(lambda v: {'include_superseded': v, 'as_of': v}, JSON_VALUES))
SPATIAL_OBJECTS = st.one_of(
    st.builds(lambda f, t, d: {'field': f, 'target': t, 'max_distance': d},
              st.sampled_from(['spatial.object_position', 'x', '', 5]),
              st.one_of(st.lists(JSON_VALUES, max_size=5), JSON_VALUES),
              JSON_VALUES),
    st.sampled_from([{'field': 'p', 'target': [math.nan, 0, 0]},
                     {'field': 'p', 'target': [math.inf]}]))
# the node gets text (NaN serializes to the non-JSON NaN it must refuse), the engine objects
FILTERS = json_strategy(False) | FILTER_OBJECTS.map(json.dumps)
SPATIAL = json_strategy(False) | SPATIAL_OBJECTS.map(json.dumps)
ENGINE_FILTERS = object_strategy(True) | FILTER_OBJECTS
ENGINE_SPATIAL = object_strategy(True) | SPATIAL_OBJECTS
NUMBERS = st.one_of(st.floats(), st.integers(-2**40, 2**40), st.sampled_from(
    [math.nan, math.inf, -math.inf, 0, -1, 1, 100, 101, 2**31 - 1]))
WRONG_TYPES = st.sampled_from([None, 5, 1.5, [], {}, b'bytes', True])


# --- engine ---------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def engine(tmp_path_factory):
    """One BM25-only store for the whole engine fuzz (rejected calls must not change it)."""
    eng = make_engine(tmp_path_factory.mktemp('fuzz'))
    for sentence in ('the red cup is on the shelf', 'gripper force 12.5N worked on the cup',
                     'the lidar is mounted on the drawer'):
        eng.learn(sentence, {'task': {'success': True},
                             'spatial': {'object_position': [0.1, 0.2, 0.3]}})
    yield eng
    eng.close()


def run_checked(eng, call: Callable[[], Any], check_ok: Callable[[Any], None]) -> None:
    """Either the call works (check_ok holds) or raises a typed error and changes nothing."""
    before = fingerprint(eng)
    try:
        result = call()
    except StorageError as exc:  # the store was healthy: a StorageError is a bug
        pytest.fail(f'StorageError on a healthy store: {exc}')
    except RobotMemError as exc:
        assert str(exc), 'errors must say what is wrong'
        assert fingerprint(eng) == before, 'a rejected call changed the store'
        return
    check_ok(result)


def stored_content(eng, memory_id: int) -> str:
    row = eng.db.reader().execute('SELECT content FROM memories WHERE id = ?',
                                  (memory_id,)).fetchone()
    return row[0] if row else None


@ENGINE_SETTINGS
@given(insight=text_strategy(True) | WRONG_TYPES, context=object_strategy(True) | WRONG_TYPES,
       collection=st.sampled_from(['', 'fuzz', 'x' * 129, ' ', 'a\ud800']) | WRONG_TYPES,
       session_id=st.sampled_from(['', 'sess-1', 's' * 257]) | text_strategy(True))
def test_engine_learn(engine, insight, context, collection, session_id):
    """Learn: stored as given (stripped) or rejected without a trace."""
    def ok(result):
        assert result.status in ('created', 'duplicate', 'merged', 'superseded_existing')
        if result.status == 'created':
            assert stored_content(engine, result.memory_id) == insight.strip()
    run_checked(engine, lambda: engine.learn(insight, context, collection, session_id), ok)


@ENGINE_SETTINGS
@given(query=text_strategy(True) | WRONG_TYPES, n=NUMBERS | WRONG_TYPES,
       min_confidence=NUMBERS | WRONG_TYPES, context_filter=ENGINE_FILTERS | WRONG_TYPES,
       spatial_sort=ENGINE_SPATIAL | WRONG_TYPES,
       session_id=st.sampled_from(['', 'sess-1']) | text_strategy(True))
def test_engine_recall(engine, query, n, min_confidence, context_filter, spatial_sort,
                       session_id):
    """Recall: a bounded, well-formed result or a typed error; never a changed store."""
    def ok(result):
        limit = engine.config.default_n if n is None else n
        assert result.total == len(result.memories) <= limit <= 100
        assert all(m.status != 'forgotten' for m in result.memories)
        assert all(math.isfinite(m.rrf_score) for m in result.memories)
    run_checked(engine, lambda: engine.recall(query, n, min_confidence, session_id,
                                              context_filter, spatial_sort), ok)


@ENGINE_SETTINGS
@given(description=text_strategy(True) | WRONG_TYPES,
       perception_type=st.sampled_from(['', 'visual', 'p' * 129]) | text_strategy(True),
       data=object_strategy(True) | WRONG_TYPES, metadata=object_strategy(True),
       created_at=st.none() | NUMBERS, batch=st.booleans())
def test_engine_save_perception(engine, description, perception_type, data, metadata,
                                created_at, batch):
    """Perceptions, single and batched: stored as given or rejected (batch: id 0)."""
    item = PerceptionInput(description=description, perception_type=perception_type,
                           data=data, metadata=metadata, created_at=created_at)
    if batch:
        before = fingerprint(engine)
        ids = engine.save_perceptions([item])
        if ids == [0]:
            assert fingerprint(engine) == before
        else:
            assert stored_content(engine, ids[0]) == description.strip()
        return

    def ok(memory_id):
        assert stored_content(engine, memory_id) == description.strip()
    run_checked(engine, lambda: engine.save_perception(item), ok)


@ENGINE_SETTINGS
@given(memory_id=st.integers(-5, 10**12) | WRONG_TYPES, new_content=text_strategy(True),
       context=object_strategy(True), reason=text_strategy(True) | WRONG_TYPES,
       action=st.sampled_from(['update', 'forget']))
def test_engine_update_and_forget(engine, memory_id, new_content, context, reason, action):
    """Update/forget of any id: done as asked, or NotFound/Validation with nothing changed."""
    def updated(result):
        assert stored_content(engine, memory_id) == new_content.strip()
    if action == 'update':
        run_checked(engine, lambda: engine.update(memory_id, new_content, context), updated)
    else:
        run_checked(engine, lambda: engine.forget(memory_id, reason), lambda r: None)


@ENGINE_SETTINGS
@given(context=object_strategy(True) | WRONG_TYPES,
       collection=st.sampled_from(['', 'fuzz', 'c' * 129]) | WRONG_TYPES,
       session_id=text_strategy(True) | WRONG_TYPES, score=st.none() | NUMBERS | WRONG_TYPES)
def test_engine_sessions(engine, context, collection, session_id, score):
    """start_session / end_session with junk: a session or a typed error, nothing half-done."""
    def started(info):
        assert len(info.session_id) == 32
    run_checked(engine, lambda: engine.start_session(context, collection), started)
    run_checked(engine, lambda: engine.end_session(session_id, score), lambda r: None)


@ENGINE_SETTINGS
@given(text=json_strategy(True), field=st.sampled_from(['context', 'data', 'context_filter']))
def test_json_text_parsed_at_the_boundary(engine, text, field):
    """JSON text through the node's parser into the engine: stored/used, or refused cleanly."""
    def call():
        value = json_field(text, field, engine.config)
        if field == 'context':
            return engine.learn('the cup from the fuzzed context', value)
        if field == 'data':
            return engine.save_perception(PerceptionInput('a fuzzed camera frame', data=value))
        return engine.recall('cup', context_filter=value)
    run_checked(engine, call, lambda result: None)


# --- node -----------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def node(ros, tmp_path_factory):
    """One BM25-only node for the service fuzz."""
    from conftest import NodeProcess
    tmp = tmp_path_factory.mktemp('fuzz_node')
    proc = NodeProcess(ros, tmp / 'memory.db', tmp / 'node.log')
    proc.status()
    proc.call(Learn, 'learn', insight='the red cup is on the shelf')
    yield proc
    log = proc.log()
    assert proc.stop() == 0, log
    assert 'Traceback' not in log


def call_node(node, srv_type: Any, service: str, **fields: Any) -> Any:
    """Call a service with fuzzed fields; the answer must never be an internal error."""
    with checker(node.db_path) as eng:
        before = fingerprint(eng, hits=False)
    response = node.call(srv_type, service, **fields)
    assert not response.error.startswith('internal error'), response.error
    assert response.success == (response.error == ''), 'success and error must agree'
    if not response.success:
        assert response.error, 'a failure must carry an error'
        with checker(node.db_path) as eng:
            assert fingerprint(eng, hits=False) == before, 'a rejected call changed the store'
    return response


NODE_TEXT = text_strategy(False)
NODE_JSON = json_strategy(False)
FLOAT64 = st.floats() | st.sampled_from([math.nan, math.inf, -math.inf])
INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)


@NODE_SETTINGS
@given(insight=NODE_TEXT, context=NODE_JSON, collection=NODE_TEXT, session_id=NODE_TEXT)
def test_node_learn(node, insight, context, collection, session_id):
    """Learn service under fuzz."""
    call_node(node, Learn, 'learn', insight=insight, context=context, collection=collection,
              session_id=session_id)


@NODE_SETTINGS
@given(query=NODE_TEXT, n=INT32, min_confidence=FLOAT64, context_filter=FILTERS,
       spatial_sort=SPATIAL, session_id=NODE_TEXT, collection=NODE_TEXT)
def test_node_recall(node, query, n, min_confidence, context_filter, spatial_sort, session_id,
                     collection):
    """Recall service under fuzz: at most n (or 100) results, or an error."""
    res = call_node(node, Recall, 'recall', query=query, n=n, min_confidence=min_confidence,
                    context_filter=context_filter, spatial_sort=spatial_sort,
                    session_id=session_id, collection=collection)
    assert len(res.memories) <= 100 and res.total == len(res.memories)


@NODE_SETTINGS
@given(description=NODE_TEXT, perception_type=NODE_TEXT, data=NODE_JSON, metadata=NODE_JSON,
       session_id=NODE_TEXT, collection=NODE_TEXT)
def test_node_save_perception(node, description, perception_type, data, metadata, session_id,
                              collection):
    """Fuzz the SavePerception service."""
    call_node(node, SavePerception, 'save_perception', description=description,
              perception_type=perception_type, data=data, metadata=metadata,
              session_id=session_id, collection=collection)


@NODE_SETTINGS
@given(memory_id=INT64, new_content=NODE_TEXT, context=NODE_JSON, reason=NODE_TEXT,
       session_context=NODE_JSON, collection=NODE_TEXT, session_id=NODE_TEXT,
       has_score=st.booleans(), score=FLOAT64)
def test_node_update_forget_sessions(node, memory_id, new_content, context, reason,
                                     session_context, collection, session_id, has_score,
                                     score):
    """Update, Forget, StartSession and EndSession services under fuzz."""
    call_node(node, Update, 'update', memory_id=memory_id, new_content=new_content,
              context=context)
    call_node(node, Forget, 'forget', memory_id=memory_id, reason=reason)
    call_node(node, StartSession, 'start_session', context=session_context,
              collection=collection)
    call_node(node, EndSession, 'end_session', session_id=session_id,
              has_outcome_score=has_score, outcome_score=score)


def test_lone_surrogates_never_leave_an_rclpy_client():
    """Check that rclpy cannot serialize lone surrogates (the engine fuzz covers them)."""
    from rclpy.serialization import serialize_message
    with pytest.raises(UnicodeEncodeError):
        serialize_message(Learn.Request(insight='half \ud800 pair'))


def test_node_alive_and_answering_after_fuzz(node):
    """Runs last in this module: the node survived every callback and still serves requests."""
    assert node.proc.poll() is None
    learned = node.call(Learn, 'learn', insight='after the fuzz the node still learns')
    assert learned.success, learned.error
    found = node.call(Recall, 'recall', query='after the fuzz node learns')
    assert learned.memory_id in [m.id for m in found.memories]
