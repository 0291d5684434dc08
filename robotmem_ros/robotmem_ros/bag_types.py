"""
robotmem_msgs types for the ``rosbags`` library, read from the interface files themselves.

rosbags ships the standard ROS 2 types but not ours. Registering them from the .msg/.srv text
(the installed share directory found through the ament index, else the source tree next to this
package) keeps one definition of each type: what the node was built from is what bags are written
and checked against. A service request is registered as ``pkg/srv/Name_Request``, the name rosidl
gives it, so a bag topic can carry Learn requests.
"""

from __future__ import annotations

import pathlib

from rosbags.typesys import get_types_from_msg, get_typestore, Stores
from rosbags.typesys.store import Typestore

PACKAGE = 'robotmem_msgs'
PERCEPTION_TYPE = f'{PACKAGE}/msg/PerceptionData'
LEARN_REQUEST_TYPE = f'{PACKAGE}/srv/Learn_Request'
STORE = Stores.ROS2_KILTED
_SOURCE_TREE = pathlib.Path(__file__).resolve().parents[2] / PACKAGE


class InterfaceNotFoundError(LookupError):
    """Neither an installed nor a source copy of robotmem_msgs holds the interface file."""


def interface_dirs() -> list[pathlib.Path]:
    """Where robotmem_msgs interface files may live, installed copy first."""
    dirs = []
    try:
        from ament_index_python.packages import (get_package_share_directory,
                                                 PackageNotFoundError)
        try:
            dirs.append(pathlib.Path(get_package_share_directory(PACKAGE)))
        except PackageNotFoundError:
            pass
    except ImportError:  # plain Python without ament: the source tree still works
        pass
    dirs.append(_SOURCE_TREE)
    return dirs


def interface_text(typename: str) -> str:
    """Text of the .msg, or the request part of the .srv, that defines ``typename``."""
    _, kind, name = typename.split('/')
    is_request = kind == 'srv' and name.endswith('_Request')
    filename = f'{name[:-len("_Request")]}.srv' if is_request else f'{name}.{kind}'
    for base in interface_dirs():
        path = base / kind / filename
        if path.is_file():
            text = path.read_text(encoding='utf-8')
            return text.split('\n---')[0] + '\n' if is_request else text
    raise InterfaceNotFoundError(
        f'{kind}/{filename} not found in {[str(d) for d in interface_dirs()]}')


def robotmem_typestore(typenames: tuple[str, ...] = (PERCEPTION_TYPE, LEARN_REQUEST_TYPE)
                       ) -> Typestore:
    """Return a Kilted typestore with ``typenames`` registered from their interface files."""
    store = get_typestore(STORE)
    types: dict = {}
    for typename in typenames:
        # The .msg parser files every name under "msg/" (srv/X -> srv/msg/X): key it as asked.
        (definition,) = get_types_from_msg(interface_text(typename), typename).values()
        types[typename] = definition
    store.register(types)
    return store
