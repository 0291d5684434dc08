"""
Read the robotmem section of a ROS 2 parameter file.

A YAML keyed ``robotmem:`` only matches a node named ``/robotmem``; launched under a namespace
the node would silently run on defaults. The launch file therefore reads the file itself and
passes the values as a dict, which applies whatever the namespace. Pure YAML, no ROS import,
so the launch test can run it where launch_ros is missing.
"""

from __future__ import annotations

from typing import Any

import yaml

_WILDCARDS = ('**', '/**')


def node_parameters(path: str, node_name: str = 'robotmem') -> dict[str, Any]:
    """
    Merge the ``ros__parameters`` that apply to ``node_name`` in the file at ``path``.

    Wildcard sections come first and the node's own section wins, as rcl resolves them.
    """
    with open(path, encoding='utf-8') as f:
        doc = yaml.safe_load(f) or {}

    def own_section(key: Any) -> bool:
        return str(key).rstrip('/').split('/')[-1] == node_name

    merged: dict[str, Any] = {}
    for key in sorted(doc, key=own_section):
        if str(key) in _WILDCARDS or own_section(key):
            merged.update((doc[key] or {}).get('ros__parameters', {}))
    return merged
