"""The node with fleet_url set: sync thread, NodeStatus and /diagnostics (real rclpy + hub)."""

from __future__ import annotations

from conftest import wait_until
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from fleet_helpers import hub_rows, unique
import pytest

pytest.importorskip('psycopg', reason='fleet extra not installed '
                    '(pip install -r requirements/fleet.txt)')

from robotmem_msgs.srv import Learn, Recall  # noqa: E402


def _fleet_diag(node):
    def check(array):
        return any(s.name == 'robotmem: fleet' and s.hardware_id == str(node.db_path)
                   and s.level == DiagnosticStatus.OK for s in array.status)
    return check


def test_node_syncs_and_reports_fleet_state(ros, start_node, fleet_hub, tmp_path):
    cell = unique('cell')
    robot_a, robot_b = unique('na'), unique('nb')
    url_a = fleet_hub.add_robot(robot_a, [cell])
    url_b = fleet_hub.add_robot(robot_b, [cell])
    a = start_node(tmp_path / 'a.db', collection=cell, fleet_url=url_a,
                   fleet_robot_id=robot_a, status_period=0.5)
    b = start_node(tmp_path / 'b.db', collection=cell, fleet_url=url_b,
                   fleet_robot_id=robot_b, status_period=0.5)
    status = a.status(lambda s: s.ready and s.fleet_enabled and s.fleet_connected)
    assert status.fleet_error == '' and status.fleet_outbox == 0
    learned = a.call(Learn, 'learn', insight='the pallet wrapper jams below 5 degrees C')
    assert learned.success
    assert wait_until(lambda: len(hub_rows(fleet_hub, robot_a)) == 1)
    assert wait_until(lambda: [m.content for m in b.call(
        Recall, 'recall', query='pallet wrapper jams', n=5).memories] == [
        'the pallet wrapper jams below 5 degrees C'])
    status = a.status(lambda s: s.fleet_last_push > 0 and s.fleet_outbox == 0)
    assert status.fleet_lag_s >= 0
    ros.wait_for(DiagnosticArray, '/diagnostics', _fleet_diag(a))


def test_bad_fleet_settings_leave_local_memory_working(start_node, tmp_path):
    node = start_node(tmp_path / 'x.db', fleet_url='postgresql://robot:secret@hub/db',
                      fleet_robot_id='r1')
    status = node.status(lambda s: s.ready and s.fleet_enabled)
    assert 'password' in status.fleet_error and not status.fleet_connected
    assert node.call(Learn, 'learn', insight='local memory still works').success
