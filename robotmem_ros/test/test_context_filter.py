"""Structured context filter: operator semantics on robot contexts, validation, properties."""

import json
import math

from hypothesis import given, settings, strategies as st
import pytest
from robotmem_ros.engine.context_filter import (
    ContextFilter, FilterOptions, json_equal, MISSING, parse_filter as engine_parse_filter,
    resolve_path)
from robotmem_ros.errors import ValidationError
from robotmem_ros.node.conversions import parse_json_object

LIMITS = {'max_bytes': 4096, 'max_depth': 8}

UR5E_GRASP = {
    'task': {'name': 'grasp_cup', 'success': True, 'attempts': 2},
    'robot': {'type': 'UR5e', 'dof': 6},
    'params': {'force': {'value': 12.5, 'unit': 'N'}, 'gripper': 'robotiq_2f85'},
    'spatial': {'object_position': [1.3, 0.7, 0.42]},
    'env': {'sim_or_real': 'real'},
    'tags': ['cup', 'kitchen'],
    'notes': None,
}
FRANKA_PUSH = {
    'task': {'name': 'push_block', 'success': False, 'attempts': 1},
    'robot': {'type': 'Franka', 'dof': 7},
    'params': {'force': {'value': 30, 'unit': 'N'}},
    'spatial': {'object_position': [0.2, -0.1, 0.05]},
    'env': {'sim_or_real': 'sim'},
}


def parse_filter(spec, *, max_bytes, max_depth):
    """Take the node's path: JSON text is parsed by node.conversions, the engine checks dicts."""
    if isinstance(spec, str):
        spec = parse_json_object(spec, what='context_filter', max_bytes=max_bytes,
                                 max_depth=max_depth)
    return engine_parse_filter(spec, max_bytes=max_bytes, max_depth=max_depth)


def test_engine_takes_no_json_text():
    with pytest.raises(ValidationError, match='context_filter: must be a JSON object, got str'):
        engine_parse_filter('{}', **LIMITS)


def flt(spec):
    """Parse a filter given as a dict, with test limits."""
    return parse_filter(spec, **LIMITS)[0]


def hits(spec, context=UR5E_GRASP):
    return flt(spec).matches(context)


# --- operators on a real-looking context --------------------------------------------------

@pytest.mark.parametrize('spec, expected', [
    ({'task.success': True}, True),
    ({'task.success': False}, False),
    ({'robot.type': 'UR5e'}, True),
    ({'robot.type': 'ur5e'}, False),
    ({'params.force.value': 12.5}, True),
    ({'robot.dof': 6.0}, True),                      # 6 == 6.0: numbers compare as numbers
    ({'params.force': {'value': 12.5, 'unit': 'N'}}, True),   # object literal: exact equality
    ({'params.force': {'value': 12.5}}, False),
    ({'tags': ['cup', 'kitchen']}, True),
    ({'tags': 'cup'}, False),                        # no implicit "array contains"
    ({'notes': None}, True),
    ({'task.success': {'$eq': True}}, True),
    ({'task.success': {'$ne': True}}, False),
    ({'robot.type': {'$ne': 'Franka'}}, True),
    ({'params.force.value': {'$lt': 15.0}}, True),
    ({'params.force.value': {'$lt': 12.5}}, False),
    ({'params.force.value': {'$lte': 12.5}}, True),
    ({'params.force.value': {'$gt': 12.5}}, False),
    ({'params.force.value': {'$gte': 12.5}}, True),
    ({'params.force.value': {'$gte': 10.0, '$lte': 20.0}}, True),
    ({'params.force.value': {'$gte': 13, '$lte': 20.0}}, False),
    ({'robot.type': {'$gt': 'Franka'}}, True),       # strings compare with strings
    ({'robot.type': {'$in': ['UR5e', 'UR10']}}, True),
    ({'robot.type': {'$in': ['Franka']}}, False),
    ({'robot.type': {'$in': []}}, False),
    ({'robot.type': {'$nin': ['Franka', 'Kuka']}}, True),
    ({'robot.type': {'$nin': ['UR5e']}}, False),
    ({'params.force.unit': {'$exists': True}}, True),
    ({'params.force.unit': {'$exists': False}}, False),
    ({'notes': {'$exists': True}}, True),            # present with value null still exists
    ({'task.success': True, 'robot.type': 'UR5e'}, True),
    ({'task.success': True, 'robot.type': 'Franka'}, False),
    ({'task.success': True, 'params.force.value': {'$lt': 15}, 'env.sim_or_real': 'real'}, True),
])
def test_operators_on_robot_context(spec, expected):
    assert hits(spec) is expected


def test_filter_separates_two_episodes():
    successful_light = flt({'task.success': True, 'params.force.value': {'$lt': 20}})
    assert [successful_light.matches(c) for c in (UR5E_GRASP, FRANKA_PUSH)] == [True, False]
    franka_or_fail = flt({'task.success': {'$ne': True}, 'robot.dof': {'$in': [7, 8]}})
    assert [franka_or_fail.matches(c) for c in (UR5E_GRASP, FRANKA_PUSH)] == [False, True]


@pytest.mark.parametrize('spec, expected', [
    ({'spatial.object_position.0': 1.3}, True),
    ({'spatial.object_position.2': {'$gt': 0.4}}, True),
    ({'spatial.object_position.3': {'$exists': False}}, True),   # out of range = missing
    ({'spatial.object_position.-1': {'$exists': True}}, False),  # no negative indexes
    ({'spatial.object_position.x': {'$exists': True}}, False),
    ({'tags.1': 'kitchen'}, True),
    ({'spatial.object_position': [1.3, 0.7, 0.42]}, True),
    ({'spatial.object_position': [1.3, 0.7]}, False),
])
def test_list_index_segments(spec, expected):
    assert hits(spec) is expected


def test_lists_of_objects_walk_through_index():
    context = {'grasps': [{'ok': False}, {'ok': True, 'force': 3}]}
    assert flt({'grasps.1.ok': True}).matches(context)
    assert not flt({'grasps.0.ok': True}).matches(context)
    assert flt({'grasps.1.force': {'$lt': 4}}).matches(context)


# --- missing paths --------------------------------------------------------------------------

@pytest.mark.parametrize('spec, expected', [
    ({'task.duration': 3}, False),
    ({'task.duration': {'$eq': None}}, False),       # missing is not null
    ({'task.duration': {'$lt': 10}}, False),
    ({'task.duration': {'$gte': 10}}, False),
    ({'task.duration': {'$in': [1, None]}}, False),
    ({'task.duration': {'$exists': True}}, False),
    ({'task.duration': {'$exists': False}}, True),
    ({'task.duration': {'$ne': 3}}, True),           # mongo: missing matches $ne
    ({'task.duration': {'$nin': [3]}}, True),        # and $nin
    ({'robot.type.vendor': {'$exists': False}}, True),   # walking into a string
    ({'task.success.value': {'$ne': 1}}, True),
])
def test_missing_paths(spec, expected):
    assert hits(spec) is expected


@pytest.mark.parametrize('context', [{}, None, [], 'UR5e', 42, {'task': None}])
def test_degenerate_contexts_never_raise(context):
    assert not flt({'task.success': True}).matches(context)
    assert flt({'task.success': {'$exists': False}}).matches(context)


# --- type mismatches: no match, never an exception -------------------------------------------

@pytest.mark.parametrize('spec', [
    {'task.success': 1},                       # True != 1
    {'task.success': {'$eq': 1}},
    {'task.success': {'$in': [1, 'true']}},
    {'task.attempts': True},                   # 2 is no bool
    {'task.success': {'$gt': 0}},              # bool is not a number
    {'task.success': {'$gte': 0}},
    {'robot.type': {'$lt': 100}},              # string vs number
    {'params.force.value': {'$gt': '10'}},     # number vs string
    {'params.force': {'$gte': 0}},             # object vs number
    {'tags': {'$lt': 'z'}},                    # list vs string
    {'notes': {'$lte': 0}},                    # null vs number
    {'params.force.value': '12.5'},
])
def test_type_mismatch_is_no_match(spec):
    assert hits(spec) is False


def test_bool_equality_is_between_bools_only():
    assert flt({'flag': True}).matches({'flag': True})
    assert not flt({'flag': True}).matches({'flag': 1})
    assert not flt({'flag': 1}).matches({'flag': True})
    assert not flt({'flag': 0}).matches({'flag': False})
    assert flt({'flag': {'$ne': 1}}).matches({'flag': True})
    assert flt({'flag': {'$nin': [0, 1]}}).matches({'flag': False})


def test_nan_in_a_dict_context_is_no_match():
    nan_context = {'x': math.nan}
    for op in ('$lt', '$lte', '$gt', '$gte', '$eq'):
        assert not flt({'x': {op: 1}}).matches(nan_context)


# --- parse input forms and options -----------------------------------------------------------

@pytest.mark.parametrize('empty', [None, '', '   ', '{}', {}])
def test_empty_input_matches_everything(empty):
    context_filter, options = parse_filter(empty, **LIMITS)
    assert context_filter.is_empty
    assert context_filter.matches(UR5E_GRASP) and context_filter.matches({})
    assert options == FilterOptions()


def test_text_and_dict_parse_alike():
    spec = {'task.success': True, 'params.force.value': {'$gte': 10, '$lte': 20}}
    assert parse_filter(json.dumps(spec), **LIMITS) == parse_filter(spec, **LIMITS)
    assert not flt(spec).is_empty


def test_reserved_keys_become_options_not_conditions():
    text = json.dumps({'include_superseded': True,
                       'created_at': {'$gte': 1_700_000_000, '$lte': 1_700_086_400.5},
                       'robot.type': 'UR5e'})
    context_filter, options = parse_filter(text, **LIMITS)
    assert options == FilterOptions(True, 1_700_000_000.0, 1_700_086_400.5)
    assert isinstance(options.created_from, float)
    assert context_filter == ContextFilter(flt({'robot.type': 'UR5e'}).conditions)


def test_reserved_keys_alone_leave_an_empty_filter():
    context_filter, options = parse_filter({'created_at': {'$lte': 5}}, **LIMITS)
    assert context_filter.is_empty
    assert options == FilterOptions(False, None, 5.0)
    assert parse_filter({'include_superseded': False}, **LIMITS)[1] == FilterOptions()


def test_operator_object_needs_eq_to_match_a_dollar_free_object():
    assert flt({'params.force': {'$eq': {'value': 12.5, 'unit': 'N'}}}).matches(UR5E_GRASP)
    assert flt({'x': {}}).matches({'x': {}})
    assert not flt({'x': {}}).matches({'x': {'a': 1}})


def test_input_dict_is_not_modified():
    spec = {'include_superseded': True, 'robot.type': 'UR5e'}
    parse_filter(spec, **LIMITS)
    assert spec == {'include_superseded': True, 'robot.type': 'UR5e'}


# --- validation ---------------------------------------------------------------------------

@pytest.mark.parametrize('spec, message', [
    ('{"robot.type": ', 'invalid JSON'),
    ('not json', 'invalid JSON'),
    ('[1, 2]', 'must be a JSON object'),
    ('"UR5e"', 'must be a JSON object'),
    ('42', 'must be a JSON object'),
    ('null', 'must be a JSON object'),
    ([('a', 1)], 'must be a JSON object'),
    (42, 'must be a JSON object'),
    ('{"x": NaN}', 'invalid JSON'),
    ('{"x": {"$lt": Infinity}}', 'invalid JSON'),
    ('{"x": -Infinity}', 'invalid JSON'),
    ('{"x": 1e999}', "['x']: number inf is not finite"),
    ({'x': math.nan}, "['x']: number nan is not finite"),
    ({'x': {'$in': [1, math.inf]}}, "['x']['$in'][1]: number inf"),
    ({'x': object()}, 'unsupported value type'),
    ({1: 'a'}, 'object key 1 is not a string'),
    ({'': 1}, "context_filter['']: path must be a non-empty string"),
    ({'a..b': 1}, "context_filter['a..b']: path 'a..b' has an empty segment"),
    ({'.a': 1}, 'empty segment'),
    ({'a.': 1}, 'empty segment'),
    ({'$or': [{'a': 1}]}, "context_filter['$or']: top-level operators are not supported"),
    ({'params.force.value': {'$regex': 'x'}},
     "context_filter['params.force.value']: unknown operator '$regex'"),
    ({'x': {'$gt': 1, 'y': 2}}, "context_filter['x']: mixes operators and plain keys"),
    ({'robot.type': {'$in': 'UR5e'}}, "context_filter['robot.type']: $in needs a list"),
    ({'robot.type': {'$nin': {'a': 1}}}, '$nin needs a list'),
    ({'robot.type': {'$exists': 1}}, "context_filter['robot.type']: $exists needs true or false"),
    ({'robot.type': {'$exists': 'yes'}}, '$exists needs true or false'),
    ({'x': {'$lt': None}}, "context_filter['x']: $lt needs a number or a string"),
    ({'x': {'$gte': True}}, '$gte needs a number or a string'),
    ({'x': {'$lte': [1]}}, '$lte needs a number or a string'),
    ({'x': {'$gt': {}}}, '$gt needs a number or a string'),
    ({'include_superseded': 'yes'}, "context_filter['include_superseded']: must be true or"),
    ({'include_superseded': None}, 'include_superseded'),
    ({'created_at': 1_700_000_000}, "context_filter['created_at']: must be an object"),
    ({'created_at': {'$gt': 1}}, "context_filter['created_at']: must be an object"),
    ({'created_at': {'$gte': '2024-01-01'}}, '$gte needs an epoch number'),
    ({'created_at': {'$lte': True}}, '$lte needs an epoch number'),
    ({'created_at': {'$gte': 10**400}}, 'epoch out of range'),
    ({'created_at': {'$gte': 20, '$lte': 10}}, '$gte 20.0 is after $lte 10.0'),
])
def test_malformed_filters_raise_validation_error(spec, message):
    with pytest.raises(ValidationError) as info:
        parse_filter(spec, **LIMITS)
    assert message in str(info.value)


def test_depth_limit_counts_nested_containers():
    four_levels = {'a': {'$in': [[1]]}}
    assert not parse_filter(four_levels, max_bytes=4096, max_depth=4)[0].is_empty
    with pytest.raises(ValidationError, match=r"\['a'\]\['\$in'\]\[0\]: nested deeper than 3"):
        parse_filter(four_levels, max_bytes=4096, max_depth=3)
    with pytest.raises(ValidationError, match='nested deeper than 8 levels'):
        parse_filter('{"a": ' + '[' * 9 + ']' * 9 + '}', **LIMITS)


def test_pathologically_deep_json_text_is_a_validation_error():
    deep = '[' * 200_000 + ']' * 200_000
    with pytest.raises(ValidationError, match='nested deeper'):
        parse_filter('{"a": ' + deep + '}', max_bytes=1_000_000, max_depth=16)


def test_cyclic_dict_is_too_deep_not_a_crash():
    cyclic = {}
    cyclic['a'] = cyclic
    with pytest.raises(ValidationError, match='nested deeper'):
        parse_filter(cyclic, **LIMITS)


def test_size_limit_counts_utf8_bytes_of_text_and_dict():
    small = {'robot.type': '抓' * 10}            # 3 bytes per character
    size = len(json.dumps(small, ensure_ascii=False, separators=(',', ':')).encode())
    assert not parse_filter(small, max_bytes=size, max_depth=4)[0].is_empty
    with pytest.raises(ValidationError, match=f'larger than {size - 1} bytes'):
        parse_filter(small, max_bytes=size - 1, max_depth=4)
    text = json.dumps(small, ensure_ascii=False)
    with pytest.raises(ValidationError, match='larger than'):
        parse_filter(text, max_bytes=len(text.encode()) - 1, max_depth=4)


def test_huge_integer_text_is_a_validation_error():
    with pytest.raises(ValidationError, match='invalid JSON'):
        parse_filter('{"a": ' + '9' * 5000 + '}', max_bytes=10_000, max_depth=4)


# --- helpers shared with spatial/fusion ----------------------------------------------------

def test_resolve_path_tells_missing_from_null():
    assert resolve_path({'a': None}, ('a',)) is None
    assert resolve_path({'a': None}, ('b',)) is MISSING
    assert resolve_path({'a': None}, ('a', 'b')) is MISSING


def test_json_equal_is_type_strict():
    assert json_equal([1, {'a': True}], (1.0, {'a': True}))
    assert not json_equal([1, {'a': True}], [1, {'a': 1}])
    assert not json_equal({'a': 1}, {'a': 1, 'b': 2})
    assert not json_equal(None, 0) and not json_equal('', None)


# --- properties -----------------------------------------------------------------------------

KEYS = st.sampled_from(['a', 'b', 'c', '0', '1'])
NUMBERS = st.one_of(st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=5))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)
PATHS = st.lists(KEYS, min_size=1, max_size=3).map('.'.join)
OPS = st.sampled_from(['$eq', '$ne', '$lt', '$lte', '$gt', '$gte', '$in', '$nin', '$exists',
                       '$bogus', 'plain'])
# Anything goes as operand and as key: the point is that only ValidationError can come out.
ANY_KEY = st.one_of(PATHS, st.text(max_size=6), st.sampled_from(['', '.', 'a..b', '$or']))
FILTERS = st.dictionaries(ANY_KEY, st.one_of(JSON, st.dictionaries(OPS, JSON, max_size=3)),
                          max_size=4)


@settings(max_examples=400, deadline=None)
@given(spec=FILTERS, contexts=st.lists(JSON, max_size=4))
def test_random_filters_raise_only_validation_errors_and_match_never_raises(spec, contexts):
    for source in (spec, json.dumps(spec)):
        try:
            context_filter, _ = parse_filter(source, max_bytes=2048, max_depth=5)
        except ValidationError:
            continue
        for context in contexts:
            assert context_filter.matches(context) in (True, False)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40))
def test_random_text_raises_only_validation_errors(text):
    try:
        parse_filter(text, max_bytes=64, max_depth=4)
    except ValidationError:
        pass


@settings(max_examples=300, deadline=None)
@given(value=NUMBERS, bound=NUMBERS)
def test_lt_and_gte_are_complementary_on_numbers(value, bound):
    context = {'p': {'v': value}}
    below = flt({'p.v': {'$lt': bound}}).matches(context)
    at_or_above = flt({'p.v': {'$gte': bound}}).matches(context)
    assert below != at_or_above
    assert flt({'p.v': {'$gt': bound}}).matches(context) != flt(
        {'p.v': {'$lte': bound}}).matches(context)


@settings(max_examples=300, deadline=None)
@given(context=st.dictionaries(KEYS, JSON, max_size=4), path=PATHS,
       options=st.lists(JSON, max_size=4))
def test_in_is_or_of_eq_and_nin_is_not_in_for_present_paths(context, path, options):
    in_hit = flt({path: {'$in': options}}).matches(context)
    assert in_hit == any(flt({path: {'$eq': option}}).matches(context) for option in options)
    present = flt({path: {'$exists': True}}).matches(context)
    nin_hit = flt({path: {'$nin': options}}).matches(context)
    assert nin_hit == (not in_hit if present else True)


@settings(max_examples=200, deadline=None)
@given(context=st.dictionaries(KEYS, JSON, max_size=4), path=PATHS, value=JSON)
def test_eq_and_ne_partition_every_context(context, path, value):
    assert flt({path: {'$eq': value}}).matches(context) != flt(
        {path: {'$ne': value}}).matches(context)
    assert flt({path: value}).matches(context) == flt({path: {'$eq': value}}).matches(context)


def test_integer_beyond_64_bits_is_tested_in_python_not_bound_in_sql():
    big = 2**63
    context_filter = flt({'a': big, 'b': 2**63 - 1})
    assert context_filter.sql_equalities() == [('$.b', 2**63 - 1)]
    assert context_filter.matches({'a': big, 'b': 2**63 - 1})
    assert not context_filter.matches({'a': big - 1, 'b': 2**63 - 1})
