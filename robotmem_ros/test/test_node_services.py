"""Every service of the node subprocess: happy paths and bad inputs (clear error, DB unchanged)."""

import hashlib
import json
import pathlib
import sqlite3

from conftest import module_node
import pytest
from reliability_helpers import columns
from robotmem_msgs.srv import (EndSession, Forget, Learn, Recall, SavePerception, StartSession,
                               Update)


@pytest.fixture(scope='module')
def node(ros, tmp_path_factory):
    """One BM25-only node for the module (each test uses its own collection)."""
    yield from module_node(ros, tmp_path_factory, 'services')


def db_fingerprint(db_path: pathlib.Path) -> str:
    """
    Hash of every row of every plain table (virtual tables need extensions; skip them).

    The node writes earlier recalls' hits whenever they are due: they are left out (a rejected
    call has no results to count).
    """
    digest = hashlib.sha256()
    with sqlite3.connect(f'file:{db_path}?mode=ro', uri=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name")]
        for table in tables:
            digest.update(table.encode())
            selected = columns(conn, table, hits=False)
            for row in sorted(repr(r) for r in conn.execute(f'SELECT {selected} FROM "{table}"')):
                digest.update(row.encode())
    return digest.hexdigest()


def test_learn_recall_update_forget_round_trip(node):
    learned = node.call(Learn, 'learn', insight='The red cup is on the left shelf',
                        context=json.dumps({'task': {'name': 'pick', 'success': True}}),
                        collection='roundtrip')
    assert learned.success and learned.error == ''
    assert learned.status == 'created' and learned.memory_id > 0

    again = node.call(Learn, 'learn', insight='The red cup is on the left shelf',
                      collection='roundtrip')
    assert again.success and again.status == 'duplicate'
    assert again.existing_id == learned.memory_id

    found = node.call(Recall, 'recall', query='red cup', collection='roundtrip')
    assert found.success and found.error == ''
    assert [m.id for m in found.memories] == [learned.memory_id]
    memory = found.memories[0]
    assert memory.content == 'The red cup is on the left shelf'
    assert memory.type == 'fact' and memory.collection == 'roundtrip'
    assert json.loads(memory.context_json)['task']['name'] == 'pick'
    assert memory.created_at.sec > 0 and found.total == 1 and found.mode

    updated = node.call(Update, 'update', memory_id=learned.memory_id,
                        new_content='The red cup is on the right shelf')
    assert updated.success, updated.error
    assert updated.old_content == 'The red cup is on the left shelf'
    assert updated.new_content_out == 'The red cup is on the right shelf'

    forgotten = node.call(Forget, 'forget', memory_id=learned.memory_id, reason='test')
    assert forgotten.success, forgotten.error
    gone = node.call(Recall, 'recall', query='red cup', collection='roundtrip')
    assert gone.error == '' and gone.memories == []


def test_empty_collection_uses_node_parameter(node):
    learned = node.call(Learn, 'learn', insight='The charging dock is next to the door')
    found = node.call(Recall, 'recall', query='charging dock', collection='default')
    assert learned.memory_id in [m.id for m in found.memories]


def test_session_episode_and_perception_service(node):
    started = node.call(StartSession, 'start_session', context='{"robot": "ur5e"}',
                        collection='episode')
    assert started.success and started.session_id and started.collection == 'episode'
    saved = node.call(SavePerception, 'save_perception', description='gripper closed on mug',
                      perception_type='tactile', data='{"force": 3.5}',
                      session_id=started.session_id, collection='episode')
    assert saved.success and saved.memory_id > 0, saved.error
    node.call(Learn, 'learn', insight='Grasp the mug by its handle', collection='episode',
              session_id=started.session_id)

    episode = node.call(Recall, 'recall', query='*', session_id=started.session_id,
                        collection='episode', min_confidence=0.0)
    assert episode.error == ''
    assert saved.memory_id in [m.id for m in episode.memories]
    perception = next(m for m in episode.memories if m.id == saved.memory_id)
    assert perception.type == 'perception' and perception.perception_type == 'tactile'

    ended = node.call(EndSession, 'end_session', session_id=started.session_id,
                      has_outcome_score=True, outcome_score=0.9)
    assert ended.success, ended.error
    assert ended.summary_json == '' or isinstance(json.loads(ended.summary_json), dict)


BAD_REQUESTS = [
    (Learn, 'learn', {'insight': ''}, 'insight'),
    (Learn, 'learn', {'insight': '   '}, 'insight'),
    (Learn, 'learn', {'insight': 'x' * 2001}, 'too long'),
    (Learn, 'learn', {'insight': 'ok text', 'context': '{not json'}, 'context'),
    (Learn, 'learn', {'insight': 'ok text', 'context': '[1, 2]'}, 'context'),
    (Recall, 'recall', {'query': 'cup', 'context_filter': '{bad'}, 'context_filter'),
    (Recall, 'recall', {'query': 'cup', 'spatial_sort': '{bad'}, 'spatial_sort'),
    (Recall, 'recall', {'query': 'cup', 'n': 101}, 'n'),
    (Recall, 'recall', {'query': 'cup', 'n': -1}, 'n'),
    (EndSession, 'end_session', {'session_id': 'no-such-session'}, 'session'),
    (Forget, 'forget', {'memory_id': -1}, 'memory_id'),
    (Forget, 'forget', {'memory_id': 987654}, '987654'),
    (Update, 'update', {'memory_id': -5, 'new_content': 'x'}, 'memory_id'),
    (Update, 'update', {'memory_id': 987654, 'new_content': 'the bin is empty'}, '987654'),
    (SavePerception, 'save_perception', {'description': 'seen', 'data': '{bad'}, 'data'),
    (StartSession, 'start_session', {'context': 'nope'}, 'context'),
]


@pytest.mark.parametrize('srv_type, service, fields, mentions', BAD_REQUESTS,
                         ids=[f'{b[1]}-{i}' for i, b in enumerate(BAD_REQUESTS)])
def test_bad_input_gives_clear_error_and_leaves_db_unchanged(node, srv_type, service, fields,
                                                             mentions):
    node.call(Learn, 'learn', insight='A fact so the store is not empty', collection='bad')
    before = db_fingerprint(node.db_path)
    response = node.call(srv_type, service, **fields)
    assert response.error and mentions in response.error, response.error
    assert not response.error.startswith('internal error')
    assert response.success is False
    if srv_type is Recall:
        assert list(response.memories) == []
    assert db_fingerprint(node.db_path) == before
