"""The ROS boundary's JSON parsing: the one place request text becomes the engine's dicts."""

from __future__ import annotations

import pytest
from robotmem_msgs.msg import PerceptionData
from robotmem_msgs.srv import Recall, SavePerception
from robotmem_ros.config import MemoryConfig
from robotmem_ros.errors import ValidationError
from robotmem_ros.node.conversions import (json_field, parse_json_object, perception_from_msg,
                                           perception_from_request, recall_json)

CONFIG = MemoryConfig(max_json_bytes=64, max_json_depth=4)


@pytest.mark.parametrize('text', ['', '   ', '\n\t'])
def test_blank_text_is_nothing(text):
    assert json_field(text, 'context', CONFIG) is None


def test_object_text_becomes_a_dict():
    assert json_field('{"task": {"success": true}, "n": 1.5}', 'context', CONFIG) == {
        'task': {'success': True}, 'n': 1.5}


@pytest.mark.parametrize('text, message', [
    ('{bad json', 'context: invalid JSON'),
    ('{"a": NaN}', 'context: invalid JSON (NaN is not a valid JSON number)'),
    ('{"a": Infinity}', 'context: invalid JSON'),
    ('{"a": -Infinity}', 'context: invalid JSON'),
    ('{"a": ' + '9' * 50 + '}', None),  # a big integer is valid JSON: parsed, checked later
    ('[1, 2]', 'context: must be a JSON object, got list'),
    ('null', 'context: must be a JSON object, got NoneType'),
    ('"text"', 'context: must be a JSON object, got str'),
    ('{"p": "' + 'x' * 60 + '"}', 'context: larger than 64 bytes'),
])
def test_bad_text_is_a_validation_error(text, message):
    if message is None:
        assert json_field(text, 'context', CONFIG) == {'a': int('9' * 50)}
        return
    with pytest.raises(ValidationError, match=message.replace('(', r'\(').replace(')', r'\)')):
        json_field(text, 'context', CONFIG)


def test_size_counts_utf8_bytes_of_the_text():
    text = '{"p": "' + 'é' * 28 + '"}'  # 37 characters, 65 bytes
    with pytest.raises(ValidationError, match='larger than 64 bytes'):
        json_field(text, 'data', CONFIG)


def test_nesting_past_the_parser_is_a_depth_error():
    deep = '[' * 100_000 + ']' * 100_000
    with pytest.raises(ValidationError, match='spatial_sort: nested deeper than 4 levels'):
        parse_json_object(deep, what='spatial_sort', max_bytes=1_000_000, max_depth=4)


def test_recall_fields_are_parsed_by_name():
    request = Recall.Request(query='cup', context_filter='{"task.success": true}')
    assert recall_json(request, CONFIG) == {'context_filter': {'task.success': True},
                                            'spatial_sort': None}
    request.spatial_sort = '{"field": '
    with pytest.raises(ValidationError, match='spatial_sort: invalid JSON'):
        recall_json(request, CONFIG)


def test_perceptions_carry_dicts():
    request = SavePerception.Request(description='cup seen', data='{"x": 1}', metadata='')
    item = perception_from_request(request, CONFIG)
    assert (item.data, item.metadata, item.created_at) == ({'x': 1}, None, None)
    msg = PerceptionData(description='cup seen', metadata='{"cam": "left"}')
    msg.header.stamp.sec = 1_700_000_000
    item = perception_from_msg(msg, CONFIG)
    assert (item.data, item.metadata, item.created_at) == (None, {'cam': 'left'}, 1.7e9)
    msg.data = '[1]'
    with pytest.raises(ValidationError, match='data: must be a JSON object, got list'):
        perception_from_msg(msg, CONFIG)
