"""
The memory node as a subprocess, for tests and benchmarks.

A subprocess is the node exactly as a robot runs it (its own DDS participant, its own signal
handling, a real crash when killed), under a unique namespace and on its own database, with its
log in a file. The test suite and the benchmarks share this one harness.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from typing import Any
import uuid

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]


class NodeSubprocess:
    """``python -m robotmem_ros.node.memory_node`` under ``/<ns_prefix><random>``."""

    def __init__(self, db_path: pathlib.Path, log_path: pathlib.Path, *, ns_prefix: str,
                 **params: Any) -> None:
        self.db_path = db_path
        self.log_path = log_path
        self.namespace = f'/{ns_prefix}{uuid.uuid4().hex[:10]}'
        self.prefix = f'{self.namespace}/robotmem'
        args = [sys.executable, '-m', 'robotmem_ros.node.memory_node', '--ros-args',
                '-r', f'__ns:={self.namespace}', '-p', f'db_path:={db_path}']
        for name, value in params.items():
            if isinstance(value, bool):
                value = 'true' if value else 'false'
            args += ['-p', f'{name}:={value}']
        env = dict(os.environ, PYTHONUNBUFFERED='1')
        env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
        self._log = open(log_path, 'ab')
        self.proc = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        """Return everything the node wrote so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors='replace')

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60.0) -> int:
        """Signal the node (SIGINT: it flushes its buffer), wait, kill past ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
