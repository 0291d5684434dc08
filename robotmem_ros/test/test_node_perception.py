"""Perception topic into the node subprocess: batching, QoS variants, stamps, shutdown flush."""

import json
import os
import sqlite3
import time

from conftest import script_result, wait_until
from diagnostic_msgs.msg import DiagnosticArray
import pytest
from rclpy.qos import qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from robotmem_msgs.msg import PerceptionData

STAMP0 = 1_700_000_000


def perception_rows(db_path):
    with sqlite3.connect(f'file:{db_path}?mode=ro', uri=True) as conn:
        return conn.execute('SELECT content, created_at, session_id FROM memories '
                            'WHERE type = ? ORDER BY created_at', ('perception',)).fetchall()


def publish(ros, node, count, qos, session='s1', frame='camera', first_seq=1):
    """Publish ``count`` perceptions as fast as rclpy can, stamped 1 ms apart."""
    pub = ros.node.create_publisher(PerceptionData, f'{node.namespace}/perception', qos)
    assert wait_until(lambda: pub.get_subscription_count() > 0)
    for i in range(count):
        msg = PerceptionData(seq=first_seq + i, perception_type='vision',
                             description=f'object {i} seen at bin {i % 7}',
                             data='{"bin": %d}' % (i % 7), session_id=session,
                             collection='perception')
        msg.header.frame_id = frame
        msg.header.stamp.sec = STAMP0 + i // 1000
        msg.header.stamp.nanosec = (i % 1000) * 1_000_000
        pub.publish(msg)
    return pub


def diagnostics_of(ros, node, predicate):
    """Wait for this node's perception diagnostics satisfying ``predicate``; return its values."""
    def mine(array):
        for status in array.status:
            if status.name == 'robotmem: perception' and status.hardware_id == str(node.db_path):
                values = {kv.key: int(kv.value) for kv in status.values}
                return predicate(values)
        return False

    array = ros.wait_for(DiagnosticArray, '/diagnostics', mine)
    status = next(s for s in array.status if s.name == 'robotmem: perception')
    return {kv.key: int(kv.value) for kv in status.values}


def test_reliable_full_speed_burst_is_stored_completely_in_batches(ros, start_node):
    # KEEP_LAST depth bounds the burst DDS can hold, on both ends, while the node takes the
    # messages (rclpy takes a few thousand per second), so both depths are sized to the burst.
    node = start_node(perception_batch_size=500, perception_flush_interval=60.0,
                      perception_depth=5000, status_period=0.5)
    publish(ros, node, 5000, QoSProfile(depth=5000, reliability=ReliabilityPolicy.RELIABLE))
    status = node.status(lambda s: s.perception_written >= 5000)
    assert (status.perception_received, status.perception_written) == (5000, 5000)
    assert (status.perception_dropped, status.perception_failed) == (0, 0)
    values = diagnostics_of(ros, node, lambda v: v['written'] == 5000)
    assert values['batches'] == 10  # one save_perceptions transaction per 500
    assert values['seq_gaps'] == 0
    rows = perception_rows(node.db_path)
    assert len(rows) == 5000
    assert rows[0][1] == pytest.approx(STAMP0) and rows[-1][1] == pytest.approx(STAMP0 + 4.999)
    assert [r[0] for r in rows[:2]] == ['object 0 seen at bin 0', 'object 1 seen at bin 1']


@pytest.mark.parametrize('qos_param, qos', [
    ('best_effort', QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)),
    ('sensor_data', qos_profile_sensor_data),
])
def test_best_effort_variants_receive_a_paced_stream(ros, start_node, qos_param, qos):
    node = start_node(perception_qos=qos_param, perception_flush_interval=0.05)
    pub = ros.node.create_publisher(PerceptionData, f'{node.namespace}/perception', qos)
    assert wait_until(lambda: pub.get_subscription_count() > 0)
    for i in range(20):  # paced: best effort may drop under load, which is its contract
        pub.publish(PerceptionData(seq=i + 1, description=f'lidar sweep {i}', session_id='b'))
        wait_until(lambda: False, timeout=0.01)
    status = node.status(lambda s: s.perception_written >= 1)
    assert status.perception_failed == 0
    assert len(perception_rows(node.db_path)) >= status.perception_written


def test_seq_gaps_are_counted_per_publisher(ros, start_node):
    node = start_node(perception_flush_interval=0.05)
    pub = ros.node.create_publisher(PerceptionData, f'{node.namespace}/perception', 100)
    assert wait_until(lambda: pub.get_subscription_count() > 0)
    # Two sources interleaved on one writer (DDS orders samples per writer only): no gap
    # until the camera jumps from 5 to 10.
    sends = [(frame, seq) for seq in range(1, 6) for frame in ('cam', 'arm')] + [('cam', 10)]
    for frame, seq in sends:
        msg = PerceptionData(seq=seq, description=f'{frame} {seq}', session_id='s1')
        msg.header.frame_id = frame
        pub.publish(msg)
    values = diagnostics_of(ros, node, lambda v: v['received'] == len(sends))
    assert values['seq_gaps'] == 4, values


def test_shutdown_flushes_the_buffer(ros, start_node):
    node = start_node(perception_batch_size=10_000, perception_flush_interval=60.0,
                      perception_depth=1000)
    publish(ros, node, 300, QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
    status = node.status(lambda s: s.perception_received == 300)
    assert status.perception_written == 0  # still buffered: no batch full, no interval due
    assert node.stop() == 0, node.log()
    assert len(perception_rows(node.db_path)) == 300


def test_invalid_perception_counts_as_failed_not_fatal(ros, start_node):
    node = start_node(perception_flush_interval=0.05)
    pub = ros.node.create_publisher(PerceptionData, f'{node.namespace}/perception', 10)
    assert wait_until(lambda: pub.get_subscription_count() > 0)
    pub.publish(PerceptionData(description='', session_id='x'))
    pub.publish(PerceptionData(description='unreadable data', data='{"a":', session_id='x'))
    pub.publish(PerceptionData(description='valid one', data='{"a": 1}', session_id='x'))
    status = node.status(lambda s: s.perception_failed + s.perception_written == 3)
    assert (status.perception_failed, status.perception_written) == (2, 1)
    assert [row[0] for row in perception_rows(node.db_path)] == ['valid one']


def test_paced_stream_at_500_per_second_is_stored_completely(ros, start_node):
    # A steady sensor rate, not a burst: with the subscription on a MultiThreadedExecutor only
    # ~25% of a 500 msg/s stream reached the node (rclpy 9.1.2); default depths must suffice.
    node = start_node(status_period=0.5)
    pub = ros.node.create_publisher(PerceptionData, f'{node.namespace}/perception',
                                    QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
    assert wait_until(lambda: pub.get_subscription_count() > 0)
    start = time.monotonic()
    for i in range(1500):
        while time.monotonic() - start < i / 500.0:
            time.sleep(0.0005)
        pub.publish(PerceptionData(seq=i + 1, description=f'wrist camera frame {i}',
                                   session_id='paced'))
    status = node.status(lambda s: s.perception_written >= 1500)
    assert (status.perception_received, status.perception_written) == (1500, 1500)


RESULT = 'receiver result: '


def shut_down_between_two_waits() -> dict:
    """
    Child: shut a receiver's context down just before its second real wait; report its thread.

    The receiver is a second participant beside its parent node, so this runs in a process of
    its own (conftest.script_result).
    """
    import threading

    import rclpy
    from robotmem_ros.node.perception_receiver import PerceptionReceiver

    rclpy.init()
    parent = rclpy.create_node(f'perception_parent_{os.getpid()}')
    failures = []
    threading.excepthook = lambda hook_args: failures.append(repr(hook_args.exc_value))
    receiver = PerceptionReceiver(parent, QoSProfile(depth=10), lambda message: None)
    executor = receiver._executor
    real_spin_once = executor.spin_once
    calls = []

    def shut_down_before_the_second(timeout_sec=None):
        calls.append(timeout_sec)
        if len(calls) == 2:
            receiver._context.shutdown()  # the real wait set then meets an invalid context
        real_spin_once(timeout_sec=timeout_sec)

    executor.spin_once = shut_down_before_the_second
    receiver._thread.join(10)
    outcome = {'alive': receiver._thread.is_alive(), 'calls': len(calls), 'failures': failures}
    receiver.close()
    return outcome


def test_a_context_shut_down_between_two_waits_ends_the_receiver_quietly():
    """The signal handler of rclpy can shut the context down after one wait, before the next."""
    assert script_result(__file__, RESULT) == {'alive': False, 'calls': 2, 'failures': []}


if __name__ == '__main__':
    print(RESULT + json.dumps(shut_down_between_two_waits()), flush=True)
    os._exit(0)  # the parent node's teardown is not what this checks
