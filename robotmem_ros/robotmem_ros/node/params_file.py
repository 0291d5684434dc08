"""
Read the sections of a ROS 2 parameter file that apply to one node.

The launch file reads the params file itself and passes the values as a dict, so launch
arguments can override single values. It must pick the sections rcl would pick for the node's
fully qualified name: a file with ``/ur5e/robotmem:`` and ``/ur10/robotmem:`` sections gives
each robot its own values. Keys are matched as rcl matches them: ``*`` stands for one name
token, ``/**`` for any number of them (``/**:`` applies to every node). One convenience on
top: a plain ``robotmem:`` key (no leading slash, which rcl reads as ``/robotmem``) applies to
a node named robotmem in any namespace, so the shipped params.yaml works under
``namespace:=ur5e``. Pure YAML, no ROS import, so it also runs where launch_ros is missing.

The shipped ``config/params.yaml`` is written by ``render_params_yaml`` from the settings table
(``python -m robotmem_ros.node.params_file > robotmem_ros/config/params.yaml``), grouped by
owner, each parameter under its description.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from robotmem_ros.config import MemoryConfig, OWNERS
import yaml

_HEADER = """\
# Every robotmem parameter with its default and description, grouped by who reads it.
# Written from robotmem_ros/config.py (python -m robotmem_ros.node.params_file); test_launch.py
# checks it is current. Ranges and choices: ros2 param describe /robotmem <name>
# Use your own copy with
#   ros2 launch robotmem_ros robotmem.launch.py params_file:=/path/params.yaml
robotmem:
  ros__parameters:
"""


def node_fqn(namespace: str, name: str) -> str:
    """Return the fully qualified name of node ``name`` in ``namespace`` ('' = root)."""
    namespace = namespace.strip('/')
    return f'/{namespace}/{name}' if namespace else f'/{name}'


def _key_pattern(key: str) -> re.Pattern[str]:
    """Compile a params-file node key (wildcards included) into a regex over full names."""
    if not key.startswith('/'):
        key = '/**/' + key  # the plain-name convenience (see module docstring)
    parts = []
    for token in key.strip('/').split('/'):
        if token == '**':
            parts.append('(?:/[^/]+)*')
        else:
            parts.append('/' + '[^/]+'.join(re.escape(p) for p in token.split('*')))
    return re.compile(''.join(parts))


def section_matches(key: Any, fqn: str) -> bool:
    """Whether the section keyed ``key`` applies to the node named ``fqn``."""
    return _key_pattern(str(key)).fullmatch(fqn) is not None


def _sections(doc: dict[Any, Any], prefix: str = '') -> list[tuple[str, dict[str, Any]]]:
    """List (node key, parameters) in file order; ``ns: node: ros__parameters:`` nests."""
    found = []
    for key, value in doc.items():
        key = f'{prefix}/{key}' if prefix else str(key)
        if not isinstance(value, dict):
            continue
        if 'ros__parameters' in value:
            found.append((key, value['ros__parameters'] or {}))
        else:
            found += _sections(value, key)
    return found


def node_parameters(path: str, fqn: str = '/robotmem') -> dict[str, Any]:
    """
    Merge the ``ros__parameters`` of every section of the file at ``path`` that matches ``fqn``.

    Sections apply in file order, a later match overriding an earlier one, as rcl merges them.
    """
    with open(path, encoding='utf-8') as f:
        doc = yaml.safe_load(f) or {}
    merged: dict[str, Any] = {}
    for key, params in _sections(doc):
        if section_matches(key, fqn):
            merged.update(params)
    return merged


def _yaml_value(value: Any) -> str:
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def render_params_yaml(config: MemoryConfig | None = None) -> str:
    """Return params.yaml for ``config`` (default: the defaults), grouped by owner."""
    config = config or MemoryConfig()
    out = [_HEADER]
    for owner, title in OWNERS.items():
        out.append(f'    # === {title} ===\n')
        for name, spec, value in config.items():
            if spec.owner != owner:
                continue
            text = spec.description + (' Read-only.' if spec.read_only else '')
            out += [f'    # {line}\n' for line in textwrap.wrap(text, 93)]
            out.append(f'    {name}: {_yaml_value(value)}\n')
    return ''.join(out)


if __name__ == '__main__':
    print(render_params_yaml(), end='')
