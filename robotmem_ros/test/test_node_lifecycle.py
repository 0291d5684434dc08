"""Start, stop, restart and parameters of the node subprocess."""

import signal

from diagnostic_msgs.msg import DiagnosticArray
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import ListParameters, SetParameters
from robotmem_msgs.srv import Learn, Recall
from robotmem_ros.config import MemoryConfig


def set_param(node, name, value):
    """Set one parameter through the node's parameter service; return the SetParametersResult."""
    if isinstance(value, float):
        pv = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
    elif isinstance(value, int):
        pv = ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=value)
    else:
        pv = ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value)
    response = node.call(SetParameters, 'set_parameters',
                         parameters=[Parameter(name=name, value=pv)])
    return response.results[0]


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_ready_status_then_clean_exit_on_signal(start_node, tmp_path, sig):
    node = start_node()
    status = node.status()
    assert status.ready and status.db_path == str(tmp_path / 'memory.db')
    assert status.embed_backend == 'none' and status.collection == 'default'
    assert node.stop(sig) == 0, node.log()
    assert 'Traceback' not in node.log() and 'never retrieved' not in node.log()


def test_restart_on_same_db_sees_stored_memories(start_node, tmp_path):
    first = start_node()
    learned = first.call(Learn, 'learn', insight='The wrench lives in the second drawer')
    assert learned.success and first.stop() == 0
    second = start_node(db_path=tmp_path / 'memory.db')
    assert second.status().active_memories_count == 1
    found = second.call(Recall, 'recall', query='wrench drawer')
    assert [m.id for m in found.memories] == [learned.memory_id]


@pytest.mark.parametrize('kind', ['unwritable path', 'corrupt file', 'out-of-range parameter'])
def test_bad_start_exits_1_with_one_fatal_line(start_node, tmp_path, kind):
    params = {}
    db = tmp_path / 'memory.db'
    if kind == 'unwritable path':
        (tmp_path / 'file').write_text('not a directory')
        db = tmp_path / 'file' / 'memory.db'
    elif kind == 'corrupt file':
        db.write_bytes(b'this is not an SQLite database' * 100)
    else:
        params['decay_rate'] = 2.0
    node = start_node(db_path=db, wait_ready=False, **params)
    assert node.proc.wait(60) == 1
    log = node.log()
    assert 'Traceback' not in log, log
    assert len([line for line in log.splitlines() if '[FATAL]' in line]) == 1, log
    if kind == 'corrupt file':
        assert db.read_bytes() == b'this is not an SQLite database' * 100  # never overwritten


def test_declared_parameters_are_the_config_table(start_node):
    node = start_node()
    names = set(node.call(ListParameters, 'list_parameters').result.names)
    assert {name for name, _, _ in MemoryConfig().items()} <= names


def test_parameter_changes_are_validated(start_node):
    node = start_node()
    for name, value in [('dedup_jaccard_threshold', 0.8), ('status_period', 1.0),
                        ('perception_batch_size', 50), ('collection', 'kitchen')]:
        assert set_param(node, name, value).successful, name
    for name, value in [('dedup_jaccard_threshold', 1.5), ('decay_rate', -0.1),
                        ('default_n', 0), ('decider', 'magic'), ('db_path', '/tmp/x.db'),
                        ('embed_backend', 'none')]:
        result = set_param(node, name, value)
        assert not result.successful, name
        assert result.reason, name


def test_parameter_change_applies_at_run_time(start_node):
    node = start_node()
    for i in range(4):
        node.call(Learn, 'learn', insight=f'Shelf {i} holds spare gripper fingers size {i}')
    assert len(node.call(Recall, 'recall', query='gripper fingers', n=0).memories) == 4
    assert set_param(node, 'default_n', 2).successful
    assert len(node.call(Recall, 'recall', query='gripper fingers', n=0).memories) == 2


def test_status_and_diagnostics_heartbeat(ros, start_node):
    node = start_node(status_period=0.2)
    seen = []

    def mine(array):
        if any(s.hardware_id == str(node.db_path) for s in array.status):
            seen.append(array)
        return len(seen) >= 3

    ros.wait_for(DiagnosticArray, '/diagnostics', mine)
    names = [s.name for s in seen[-1].status]
    assert names == ['robotmem: store', 'robotmem: embedder', 'robotmem: perception']
    store = seen[-1].status[0]
    assert store.level == store.OK
    assert {kv.key for kv in store.values} >= {
        'db_bytes', 'active_memories', 'index_vectors', 'ann_vectors', 'ann_building'}
    stamps = [(a.header.stamp.sec, a.header.stamp.nanosec) for a in seen]
    assert stamps == sorted(set(stamps))  # three distinct heartbeats
