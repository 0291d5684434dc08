"""
Security: SQL/FTS injection, SQL built only from constant fragments, no extra listeners.

* Injection strings go through every text field of every engine entry point and every service;
  afterwards the schema is unchanged, the store is consistent and accepted text is stored
  verbatim (so it was bound as a value, never parsed as SQL or FTS syntax).
* A static check lists every f-string in the engine that looks like SQL and the expressions
  it interpolates; each one is reviewed (see REVIEWED) to be a constant fragment or a
  placeholder list, never a request value. A new interpolation fails the test until reviewed.
* The node opens no socket a plain rclpy node does not open, and no TCP listener at all.
* Read-only parameters (db_path, model_dir, ...) cannot be changed at run time.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import subprocess
import sys

from engine_helpers import make_engine
import psutil
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from reliability_helpers import assert_consistent, checker
from robotmem_msgs.srv import (EndSession, Forget, Learn, Recall, SavePerception, StartSession,
                               Update)
from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine.text import fts_query
from robotmem_ros.errors import NotFoundError, RobotMemError, ValidationError
from robotmem_ros.types import PerceptionInput

INJECTIONS = [
    "'); DROP TABLE memories;--",
    '" OR 1=1 --',
    "x' UNION SELECT sql FROM sqlite_master --",
    '1; DELETE FROM memories WHERE 1=1',
    "robert'); DELETE FROM sessions; --",
    'body:secret', 'col:x', 'NEAR(', 'NEAR(a b, 2)', 'a OR b NOT c', '"unbalanced', '^start',
    'memories_fts MATCH * --', '{"$where": "1"}', '%_%', '/* comment */ x',
    'nul\x00byte',
]
ENGINE_ENTRY_TIMEOUT_S = 60.0
FACT = 'the spare gripper fingers are in drawer four'
ENGINE_DIR = pathlib.Path(__file__).resolve().parents[1] / 'robotmem_ros' / 'engine'


def schema_of(engine) -> list[tuple]:
    """Return every schema object of the store."""
    return [tuple(r) for r in engine.db.reader().execute(
        'SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name')]


def object_carrying(value: str) -> dict:
    """Return an object that carries ``value`` as key and value, nested."""
    return {value: value, 'nested': {value: [value, {value: value}]}}


def json_carriers(value: str) -> list[str]:
    """JSON text of the object carrying ``value``, plus ``value`` raw (request fields)."""
    return [json.dumps(object_carrying(value)), value]


def engine_calls(engine, value: str):
    """Yield (label, thunk) for every text field of every engine entry point."""
    fact = engine.learn(FACT)
    session = engine.start_session(collection='sec')
    yield 'learn.insight', lambda: engine.learn(value)
    yield 'learn.collection', lambda: engine.learn('the wrench is on the wall', collection=value)
    yield 'learn.session_id', lambda: engine.learn('the mop is in the closet', session_id=value)
    for carrier in (object_carrying(value), value):  # the engine takes objects, refuses text
        yield 'learn.context', lambda c=carrier: engine.learn('the lamp is on the desk', c)
        yield 'start_session.context', lambda c=carrier: engine.start_session(c)
        yield 'update.context', lambda c=carrier: engine.update(fact.memory_id, FACT, c)
        yield 'recall.context_filter', lambda c=carrier: engine.recall('gripper',
                                                                       context_filter=c)
        for field in ('data', 'metadata'):
            yield f'perception.{field}', lambda c=carrier, f=field: engine.save_perception(
                PerceptionInput(description='camera sees a cup', **{f: c}))
    yield 'recall.spatial_sort', lambda: engine.recall(
        'gripper', spatial_sort={'field': value, 'target': [0, 0, 0]})
    yield 'recall.query', lambda: engine.recall(value)
    yield 'recall.session_id', lambda: engine.recall('gripper', session_id=value)
    yield 'recall.collection', lambda: engine.recall('gripper', collection=value)
    yield 'start_session.collection', lambda: engine.start_session(collection=value)
    yield 'end_session.session_id', lambda: engine.end_session(value)
    for field in ('description', 'perception_type', 'session_id', 'collection'):
        yield f'perception.{field}', lambda f=field: engine.save_perception(
            PerceptionInput(**{'description': 'camera sees a cup', f: value}))
        yield f'perceptions.{field}', lambda f=field: engine.save_perceptions(
            [PerceptionInput(**{'description': 'camera sees a bowl', f: value})])
    yield 'update.new_content', lambda: engine.update(fact.memory_id, value)
    yield 'forget.reason', lambda: engine.forget(
        engine.learn(f'temporary note {value!r} about the ladder').memory_id, value)
    yield 'sessions.collection', lambda: engine.sessions(collection=value)
    yield 'episode.session_id', lambda: engine.episode(value)
    yield 'cleanup.collection', lambda: engine.cleanup_exact_duplicates(value, dry_run=False)
    yield 'end_session.real', lambda: engine.end_session(session.session_id, 0.5)


def searchable(text: str) -> bool:
    """Return True when the engine stores ``text`` (it refuses text no query can find)."""
    return fts_query(text) is not None


@pytest.mark.parametrize('value', INJECTIONS)
def test_engine_entry_points_bind_injection_strings_as_values(tmp_path, value):
    """Every call either works or raises a typed error; schema and consistency hold."""
    engine = make_engine(tmp_path, embed=True)
    baseline = schema_of(engine)
    outcomes = {}
    for label, call in engine_calls(engine, value):
        try:
            call()
            outcomes[label] = 'ok'
        except (ValidationError, NotFoundError) as exc:
            outcomes[label] = type(exc).__name__
        except RobotMemError as exc:  # StorageError here would mean SQL saw the text
            pytest.fail(f'{label}: {type(exc).__name__}: {exc}')
    assert schema_of(engine) == baseline
    stored = {r[0] for r in engine.db.reader().execute('SELECT content FROM memories')}
    if '\x00' in value:
        assert outcomes['learn.insight'] == 'ValidationError'
        assert all(value not in s for s in stored)
    elif not searchable(value):  # '%_%': nothing a query could find, refused
        assert outcomes['learn.insight'] == 'ValidationError' and value.strip() not in stored
    else:
        assert outcomes['learn.insight'] == 'ok' and value.strip() in stored
        assert outcomes['recall.query'] == 'ok'
        found = engine.recall('*', n=100, collection=value)
        assert {m.content for m in found.memories} == {
            'the wrench is on the wall', 'camera sees a cup', 'camera sees a bowl'}
    engine.close()
    assert_consistent(tmp_path / 'memory.db')


def test_fts_operators_in_queries_are_literal(tmp_path):
    """Operator words in a query are searched as words, never run as FTS syntax."""
    engine = make_engine(tmp_path)
    near = engine.learn('the NEAR sensor reads body temperature').memory_id
    lamp = engine.learn('the lamp is on the desk').memory_id
    expected = {'NEAR(': [near], 'body:temperature': [near], '"NEAR" OR': [near],
                'near*': [near], 'NOT lamp': [lamp]}  # as FTS syntax, NOT would drop the lamp
    for query, ids in expected.items():
        assert [m.id for m in engine.recall(query, n=10).memories] == ids, query
    engine.close()


# --- static check: SQL f-strings ------------------------------------------------------------

SQL_SHAPE = re.compile(r'\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|PRAGMA|CREATE '
                       r'(TABLE|INDEX|UNIQUE|VIRTUAL)|WHERE|VALUES)\b')
# Interpolated expression -> why it is safe (reviewed against the code that builds it).
REVIEWED = {
    'marks': "','.join('?' * len(ids)): placeholders only",
    'spared': "store._not_in('category', ...): a constant column and '?' placeholders",
    'where[0]': "store.context_sql: ' AND json_extract(m.context_json, ?) = ?' repeated",
    'BUSY_TIMEOUT_MS': 'module constant',
    'LOCK_POLL_MS': 'module constant',
    'MEMORY_COLUMNS': 'module constant column list',
    "' AND '.join(where)": 'list of constant condition fragments with named placeholders',
    'number + 1': 'integer schema version',
    'table': 'constant table names: consistency_store.DEPENDENT_TABLES (checked), store.purge',
    'column': 'constant column names: report_store.COUNTED_COLUMNS (checked), store.purge',
    'where': "constant condition ('1', \"status = 'active'\", \"status != 'forgotten'\", ...)",
    'ACTIVE': "report_store constant \"status = 'active'\"",
    'int(bins)': 'integer bin count, forced through int()',
    'int(bins) - 1': 'integer bin count, forced through int()',
    '-int(cache_kib)': 'integer page cache size (database.connect), forced through int()',
    '_selected(include_forgotten)': 'one of two constant conditions with a named placeholder',
    "' AND '.join(where[1:])": 'the same constant fragments, less the MATCH (fts_search)',
    "', '.join(RESTORED)": 'constant column tuple (transfer_store)',
    "', '.join((':' + c for c in RESTORED))": 'named placeholders of the constant column tuple',
    'DECAY_REF': 'schema constant: the decay reference expression its index is built on',
    'STORED': 'schema constant: the store time expression the retention index is built on',
    'UNTOUCHED_PERCEPTION': "schema constant: the retention index's condition",
    'select': 'constant SELECT ... IN of store.contents / store.fts_bodies (_texts_by_id)',
    'schema.CONTEXT_VALUES_SQL': 'schema constant: json_extract of the constant CONTEXT_PATHS',
    'match': "store._ranked_first: where[0] (constant MATCH) and a constant '+rowid IN' with a "
             'named placeholder',
    'lookup': "store._ranked_first: the constant 'rowid' or '+rowid'",
    'embedding': "vector_store.codes_since: 'NULL' or 'e.embedding'",
    'join': "vector_store.codes_since: '' or a constant LEFT JOIN; jaccard_store._passing: "
            "'' or a constant CROSS JOIN of memories_fts",
    'body': "jaccard_store._passing: 'NULL' or 'f.body'",
    'rows': "vector_store.context_ids: '(?, ?, ?)' placeholders repeated",
    '_TEXT_LOG_WHEN': 'schema constant: the text index log triggers fire once meta names one',
}


def sql_fstrings() -> list[tuple[str, int, str]]:
    """Return (file, line, expression) for every interpolation in an SQL-shaped f-string."""
    found = []
    for path in sorted(ENGINE_DIR.rglob('*.py')):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.JoinedStr):
                continue
            text = ''.join(v.value for v in node.values if isinstance(v, ast.Constant))
            if SQL_SHAPE.search(text):
                found.extend((path.name, node.lineno, ast.unparse(v.value))
                             for v in node.values if isinstance(v, ast.FormattedValue))
    return found


def test_sql_fstrings_interpolate_only_reviewed_constant_fragments():
    """Every SQL f-string interpolation in the engine is one reviewed to be constant."""
    found = sql_fstrings()
    assert found, 'the scan found no SQL f-strings: the pattern is broken'
    unreviewed = [f'{name}:{line}: {{{expr}}}' for name, line, expr in found
                  if expr not in REVIEWED]
    assert unreviewed == [], 'review these SQL interpolations: ' + '; '.join(unreviewed)


def test_no_sql_built_with_format_or_percent():
    """str.format / % formatting on SQL-looking strings is not used at all."""
    offenders = []
    for path in sorted(ENGINE_DIR.rglob('*.py')):
        for node in ast.walk(ast.parse(path.read_text())):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == 'format':
                target = node.func.value
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                target = node.left
            if isinstance(target, ast.Constant) and isinstance(target.value, str) \
                    and SQL_SHAPE.search(target.value):
                offenders.append(f'{path.name}:{node.lineno}')
    assert offenders == []


# --- the node -------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def node(ros, tmp_path_factory):
    """One BM25-only node for the module."""
    from conftest import NodeProcess
    tmp = tmp_path_factory.mktemp('security')
    proc = NodeProcess(ros, tmp / 'memory.db', tmp / 'node.log')
    proc.status()
    yield proc
    assert proc.stop() == 0, proc.log()


def service_calls(node, value: str):
    """Yield (label, response) for each text field of each service carrying ``value``."""
    fact = node.call(Learn, 'learn', insight='the drill bits are in the blue case')
    assert fact.success, fact.error
    carriers = json_carriers(value)
    yield 'learn.insight', node.call(Learn, 'learn', insight=value)
    for field in ('collection', 'session_id'):
        yield f'learn.{field}', node.call(Learn, 'learn', insight='the saw hangs on a hook',
                                          **{field: value})
    for carrier in carriers:
        yield 'learn.context', node.call(Learn, 'learn', insight='the fan is by the window',
                                         context=carrier)
        yield 'start_session.context', node.call(StartSession, 'start_session',
                                                 context=carrier)
        yield 'recall.context_filter', node.call(Recall, 'recall', query='drill',
                                                 context_filter=carrier)
        yield 'update.context', node.call(Update, 'update', memory_id=fact.memory_id,
                                          new_content='the drill bits are in the blue case',
                                          context=carrier)
        for field in ('data', 'metadata'):
            yield f'save_perception.{field}', node.call(
                SavePerception, 'save_perception', description='a cup', **{field: carrier})
    for field in ('query', 'session_id', 'collection'):
        yield f'recall.{field}', node.call(Recall, 'recall', **{'query': 'drill', field: value})
    yield 'recall.spatial_sort', node.call(Recall, 'recall', query='drill', spatial_sort=(
        json.dumps({'field': value, 'target': [1, 2, 3]})))
    yield 'start_session.collection', node.call(StartSession, 'start_session',
                                                collection=value)
    yield 'end_session.session_id', node.call(EndSession, 'end_session', session_id=value)
    for field in ('description', 'perception_type', 'session_id', 'collection'):
        yield f'save_perception.{field}', node.call(
            SavePerception, 'save_perception', **{'description': 'a bowl', field: value})
    yield 'update.new_content', node.call(Update, 'update', memory_id=fact.memory_id,
                                          new_content=value)
    yield 'forget.reason', node.call(Forget, 'forget', memory_id=fact.memory_id, reason=value)


@pytest.mark.parametrize('value', INJECTIONS)
def test_services_bind_injection_strings_as_values(node, value):
    """Every service answers (ok or a clear error), the schema and the store stay sound."""
    with checker(node.db_path) as engine:
        baseline = schema_of(engine)
    for label, response in service_calls(node, value):
        assert not response.error.startswith('internal error'), (label, response.error)
    with checker(node.db_path) as engine:
        assert schema_of(engine) == baseline
        contents = {r[0] for r in engine.db.reader().execute('SELECT content FROM memories')}
    # ROS strings end at a NUL (C strings): 'nul\x00byte' arrives as 'nul'.
    arrived = value.split('\x00')[0].strip()
    assert (arrived in contents) == searchable(arrived)
    assert not any('\x00' in c for c in contents)
    assert_consistent(node.db_path)


def socket_counts(pid: int) -> dict[str, int]:
    """Count a process's inet sockets by protocol, and its TCP listeners."""
    conns = psutil.Process(pid).net_connections(kind='inet')
    return {'tcp': sum(c.type == 1 for c in conns), 'udp': sum(c.type == 2 for c in conns),
            'tcp_listen': sum(c.status == psutil.CONN_LISTEN for c in conns)}


def test_node_opens_no_socket_beyond_a_plain_ros_node(node):
    """
    Memory node sockets <= two bare rclpy nodes' sockets (DDS only); no TCP listener.

    The node has two DDS participants: its own and the perception receiver's (a context of its
    own, see node/perception_receiver.py).
    """
    env = dict(os.environ)
    bare = subprocess.Popen(
        [sys.executable, '-c', 'import rclpy, sys; rclpy.init(); '
         "n = rclpy.create_node('bare_probe'); print('up', flush=True); sys.stdin.read()"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert bare.stdout.readline().strip() == 'up'
        expected = socket_counts(bare.pid)
    finally:
        bare.stdin.close()
        bare.wait(30)
    found = socket_counts(node.proc.pid)
    assert found['tcp_listen'] == 0 and found['tcp'] == 0, found
    assert found['udp'] <= 2 * expected['udp'], (found, expected)
    domain = int(os.environ.get('ROS_DOMAIN_ID', '0'))
    ports = {c.laddr.port for c in psutil.Process(node.proc.pid).net_connections(kind='udp')}
    assert any(7400 + 250 * domain <= p < 7650 + 250 * domain for p in ports), ports


READ_ONLY = [name for name, spec, _ in MemoryConfig().items() if spec.read_only]


def set_parameter(node, name: str, value: ParameterValue):
    """Call the node's set_parameters service for one parameter; return its result."""
    response = node.client.call(SetParameters, f'{node.prefix}/set_parameters',
                                parameters=[Parameter(name=name, value=value)])
    return response.results[0]


def string_value(text: str) -> ParameterValue:
    return ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=text)


@pytest.mark.parametrize('name', ['db_path', 'model_dir'])
def test_store_and_model_paths_cannot_be_changed_at_run_time(node, tmp_path, name):
    """set_parameters on db_path / model_dir is refused and the node keeps its store."""
    result = set_parameter(node, name, string_value(str(tmp_path / 'elsewhere')))
    assert not result.successful and result.reason
    current = node.client.call(GetParameters, f'{node.prefix}/get_parameters', names=[name])
    assert current.values[0].string_value == (str(node.db_path) if name == 'db_path' else '')
    learned = node.call(Learn, 'learn', insight=f'the {name} stayed where it was')
    with checker(node.db_path) as engine:
        assert engine.db.reader().execute('SELECT 1 FROM memories WHERE id = ?',
                                          (learned.memory_id,)).fetchone()
    assert not (tmp_path / 'elsewhere').exists()


def test_every_read_only_setting_is_refused_and_a_writable_one_accepted(node):
    """The read-only flags come from MemoryConfig; a writable setting shows the check can pass."""
    assert {'db_path', 'model_dir'} <= set(READ_ONLY)
    for name in READ_ONLY:
        current = node.client.call(GetParameters, f'{node.prefix}/get_parameters',
                                   names=[name]).values[0]
        assert not set_parameter(node, name, current).successful, name
    changed = ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=7)
    assert set_parameter(node, 'default_n', changed).successful
