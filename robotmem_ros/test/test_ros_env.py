"""scripts/ros_env.sh sourced for one distro after the other: only the last one's paths stay."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / 'scripts' / 'ros_env.sh'
VARIABLES = ('PATH', 'AMENT_PREFIX_PATH', 'CMAKE_PREFIX_PATH', 'PYTHONPATH', 'LD_LIBRARY_PATH')
INSTALL = {'kilted': ROOT / 'install', 'jazzy': ROOT / 'install-jazzy'}


@pytest.mark.parametrize('first,last', [('kilted', 'jazzy'), ('jazzy', 'kilted')])
def test_sourcing_for_another_distro_drops_the_first_ones_paths(first, last):
    # A Jazzy test run in a shell that had sourced the Kilted env loaded Kilted's message
    # libraries (they came later on the paths) and its nodes died on a symbol lookup error.
    show = '; '.join(f'printf "%s\\n" "${{{name}:-}}"' for name in VARIABLES)
    command = (f'set -eu; export ROS_DISTRO_WHEELS={first}; source "{SCRIPT}"; '
               f'export ROS_DISTRO_WHEELS={last}; source "{SCRIPT}"; {show}')
    env = dict(os.environ, ROBOTMEM_VENV=sys.prefix)  # one venv: the paths under test differ
    out = subprocess.run(['bash', '-c', command], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    values = dict(zip(VARIABLES, out.stdout.splitlines()))
    assert 'ros_env.sh' not in out.stderr, out.stderr
    other = str(INSTALL[first])
    for name, value in values.items():
        left = [e for e in value.split(':') if e == other or e.startswith(other + '/')]
        assert not left, f'{name} keeps {first} entries: {left}'
    assert str(INSTALL[last] / 'robotmem_msgs' / 'lib') in values['LD_LIBRARY_PATH'].split(':')


def test_another_checkouts_messages_are_named_on_stderr(tmp_path):
    # Not ours to drop (the name alone cannot tell whose they are), but a user who sourced
    # another checkout's env must learn why this one's nodes may fail.
    foreign = tmp_path / 'other' / 'install' / 'robotmem_msgs'
    env = dict(os.environ, ROBOTMEM_VENV=sys.prefix, AMENT_PREFIX_PATH=str(foreign),
               LD_LIBRARY_PATH=f'{foreign}/lib')
    out = subprocess.run(['bash', '-c', f'set -eu; source "{SCRIPT}"; echo "$AMENT_PREFIX_PATH"'],
                         env=env, capture_output=True, text=True, timeout=60, check=True)
    warnings = out.stderr.splitlines()
    assert len(warnings) == 2, out.stderr
    assert f"AMENT_PREFIX_PATH holds another checkout's {foreign};" in warnings[0]
    assert f"LD_LIBRARY_PATH holds another checkout's {foreign}/lib;" in warnings[1]
    assert str(foreign) in out.stdout.strip().split(':')
