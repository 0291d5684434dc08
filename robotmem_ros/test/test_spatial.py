"""Spatial sort: distance on robot contexts, nearest-first ordering, validation."""

import json
import math

from hypothesis import given, settings, strategies as st
import pytest
from robotmem_ros.engine.spatial import parse_spatial_sort as engine_parse_spatial_sort
from robotmem_ros.engine.spatial import SpatialSort
from robotmem_ros.errors import ValidationError
from robotmem_ros.node.conversions import parse_json_object

FIELD = 'spatial.object_position'
CUP = [1.3, 0.7, 0.42]


def parse_spatial_sort(spec, *, max_bytes):
    """Take the node's path: JSON text is parsed by node.conversions, the engine checks dicts."""
    if isinstance(spec, str):
        spec = parse_json_object(spec, what='spatial_sort', max_bytes=max_bytes, max_depth=16)
    return engine_parse_spatial_sort(spec, max_bytes=max_bytes)


def sort(spec):
    return parse_spatial_sort(spec, max_bytes=4096)


def at(position, name):
    """Build a memory-like item whose context holds ``position``."""
    return {'name': name, 'context': {'spatial': {'object_position': position},
                                      'robot': {'type': 'UR5e'}}}


def context_of(item):
    return item['context']


def test_parse_text_and_dict_alike():
    spec = {'field': FIELD, 'target': CUP, 'max_distance': 0.1}
    parsed = sort(json.dumps(spec))
    assert parsed == sort(spec)
    assert parsed == SpatialSort(FIELD, ('spatial', 'object_position'), tuple(CUP), 0.1)
    assert sort({'field': FIELD, 'target': [1, 2]}).target == (1.0, 2.0)
    assert sort({'field': FIELD, 'target': [1], 'max_distance': None}).max_distance is None


@pytest.mark.parametrize('empty', [None, '', '  ', '{}', {}])
def test_empty_means_no_sort(empty):
    assert sort(empty) is None


def test_distance_is_euclidean():
    spatial = sort({'field': FIELD, 'target': [1.0, 0.7, 0.42]})
    assert spatial.distance(at(CUP, 'cup')['context']) == pytest.approx(0.3)
    assert spatial.distance(at([4.0, 4.7, 0.42], 'far')['context']) == pytest.approx(5.0)
    assert spatial.distance(at([1, 1, 0], 'ints')['context']) == pytest.approx(
        math.sqrt(0.09 + 0.42 ** 2))


def test_distance_through_list_index_path():
    spatial = sort({'field': 'waypoints.1', 'target': [0, 0]})
    assert spatial.distance({'waypoints': [[9, 9], [3, 4]]}) == 5.0


@pytest.mark.parametrize('context', [
    {},
    None,
    {'spatial': {}},
    {'spatial': {'object_position': None}},
    {'spatial': {'object_position': '1.3,0.7,0.42'}},
    {'spatial': {'object_position': {'x': 1.3, 'y': 0.7, 'z': 0.42}}},
    {'spatial': {'object_position': [1.3, 0.7]}},              # 2-D vs 3-D target
    {'spatial': {'object_position': [1.3, 0.7, 0.42, 0.0]}},
    {'spatial': {'object_position': [1.3, 0.7, '0.42']}},
    {'spatial': {'object_position': [1.3, 0.7, True]}},         # bool is not a coordinate
    {'spatial': {'object_position': [1.3, 0.7, None]}},
    {'spatial': {'object_position': [1.3, 0.7, [0.42]]}},
    {'spatial': {'object_position': [1.3, 0.7, math.nan]}},
    {'spatial': {'object_position': [1.3, 0.7, math.inf]}},
    {'spatial': {'object_position': [1.3, 0.7, 10 ** 400]}},    # int beyond float range
    {'spatial': [1.3, 0.7, 0.42]},
])
def test_unusable_coordinates_are_infinitely_far(context):
    assert sort({'field': FIELD, 'target': CUP}).distance(context) == math.inf


def test_large_but_finite_coordinates_do_not_overflow():
    spatial = sort({'field': 'p', 'target': [1e300, -1e300]})
    assert spatial.distance({'p': [-1e300, 1e300]}) == pytest.approx(2 * math.sqrt(2) * 1e300)


def test_apply_sorts_nearest_first_and_drops_unusable():
    items = [at([2.0, 0.7, 0.42], 'far'), at('nowhere', 'bad'), at(CUP, 'exact'),
             {'name': 'no-context', 'context': {}}, at([1.3, 0.8, 0.42], 'near'),
             at([1.3, 0.7], 'flat')]
    ordered = sort({'field': FIELD, 'target': CUP}).apply(items, context_of)
    assert [item['name'] for item in ordered] == ['exact', 'near', 'far']


def test_apply_cuts_at_max_distance_inclusive():
    items = [at([1.3, 0.7, 0.42], 'on'), at([1.3, 0.7, 0.52], 'edge'),
             at([1.3, 0.7, 0.5201], 'beyond')]
    spec = {'field': FIELD, 'target': CUP, 'max_distance': 0.1}
    spatial = sort(spec)
    edge = spatial.distance(items[1]['context'])
    spatial = sort({**spec, 'max_distance': edge})
    assert [item['name'] for item in spatial.apply(items, context_of)] == ['on', 'edge']
    exact_only = sort({**spec, 'max_distance': 0})
    assert [item['name'] for item in exact_only.apply(items, context_of)] == ['on']


def test_apply_is_stable_for_ties():
    items = [at([1.3, 0.7, 0.52], f'tie{i}') for i in range(5)] + [at(CUP, 'first')]
    ordered = sort({'field': FIELD, 'target': CUP}).apply(items, context_of)
    assert [item['name'] for item in ordered] == ['first'] + [f'tie{i}' for i in range(5)]


def test_apply_on_nothing_is_nothing():
    assert sort({'field': FIELD, 'target': CUP}).apply([], context_of) == []


@pytest.mark.parametrize('spec, message', [
    ('{"field": ', 'spatial_sort: invalid JSON'),
    ('[1, 2, 3]', 'spatial_sort: must be a JSON object'),
    ('{"field": "p", "target": [NaN]}', 'invalid JSON'),
    ({'target': CUP}, 'spatial_sort.field: path must be a non-empty string'),
    ({'field': '', 'target': CUP}, 'spatial_sort.field: path must be a non-empty string'),
    ({'field': 3, 'target': CUP}, 'spatial_sort.field: path must be a non-empty string'),
    ({'field': 'spatial..p', 'target': CUP}, 'empty segment'),
    ({'field': FIELD}, 'spatial_sort.target must be a list of 1 to 16 numbers'),
    ({'field': FIELD, 'target': []}, 'spatial_sort.target must be a list of 1 to 16 numbers'),
    ({'field': FIELD, 'target': 1.3}, 'spatial_sort.target must be a list'),
    ({'field': FIELD, 'target': '1.3,0.7'}, 'spatial_sort.target must be a list'),
    ({'field': FIELD, 'target': [0.0] * 17}, 'spatial_sort.target must be a list of 1 to 16'),
    ({'field': FIELD, 'target': [1.3, '0.7']}, 'spatial_sort.target[1] must be a number'),
    ({'field': FIELD, 'target': [True]}, 'spatial_sort.target[0] must be a number'),
    ({'field': FIELD, 'target': [None]}, 'spatial_sort.target[0] must be a number'),
    ({'field': FIELD, 'target': [[1.3]]}, 'spatial_sort.target[0] must be a number'),
    ({'field': FIELD, 'target': [1.0, math.inf]}, "spatial_sort['target'][1]: number inf"),
    ({'field': FIELD, 'target': [10 ** 400]}, 'spatial_sort.target[0] must be finite'),
    ({'field': FIELD, 'target': CUP, 'max_distance': -0.1}, 'max_distance must be >= 0'),
    ({'field': FIELD, 'target': CUP, 'max_distance': '0.1'}, 'max_distance must be a number'),
    ({'field': FIELD, 'target': CUP, 'max_distance': False}, 'max_distance must be a number'),
    ({'field': FIELD, 'target': CUP, 'max_distance': 10 ** 400}, 'max_distance must be finite'),
    ({'field': FIELD, 'target': CUP, 'k': 3}, "spatial_sort: unknown key(s) ['k']"),
    ({'field': FIELD, 'target': [[[[[1]]]]]}, 'nested deeper'),
])
def test_malformed_spatial_sort_raises_validation_error(spec, message):
    with pytest.raises(ValidationError) as info:
        sort(spec)
    assert message in str(info.value)


def test_size_limit():
    text = json.dumps({'field': FIELD, 'target': CUP})
    assert parse_spatial_sort(text, max_bytes=len(text)) is not None
    with pytest.raises(ValidationError, match='larger than'):
        parse_spatial_sort(text, max_bytes=len(text) - 1)


COORD = st.floats(-1e3, 1e3, allow_nan=False)
JUNK = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.integers(), COORD,
                 st.lists(st.one_of(COORD, st.text(max_size=2), st.none()), max_size=4))


@settings(max_examples=200, deadline=None)
@given(target=st.lists(COORD, min_size=1, max_size=4),
       points=st.lists(st.one_of(st.lists(COORD, min_size=1, max_size=4), JUNK), max_size=12),
       max_distance=st.one_of(st.none(), st.floats(0, 2e3)))
def test_apply_keeps_exactly_the_close_enough_in_distance_order(target, points, max_distance):
    spatial = sort({'field': 'p', 'target': target, 'max_distance': max_distance})
    items = [{'p': point} for point in points]
    ordered = spatial.apply(items, lambda item: item)
    distances = [spatial.distance(item) for item in ordered]
    assert distances == sorted(distances)
    limit = math.inf if max_distance is None else max_distance
    expected = [item for item in items if spatial.distance(item) <= limit
                and spatial.distance(item) != math.inf]
    assert sorted(map(id, ordered)) == sorted(map(id, expected))
    for item in items:
        point = item['p']
        usable = isinstance(point, list) and len(point) == len(target) and all(
            isinstance(x, float) for x in point)
        assert (spatial.distance(item) != math.inf) == usable
