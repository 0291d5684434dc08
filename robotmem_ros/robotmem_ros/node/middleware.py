"""
The Fast DDS profile the memory node gives its own DDS participant, and why.

Fast DDS 3 (ROS 2 Kilted) announces every endpoint with XTypes type information. A participant
that learns of an endpoint whose type it has not registered yet asks a peer for the type (a
type lookup) and holds that endpoint, and every later endpoint of the same type, until the
answer arrives. When the peer it asked is gone (a client process that exited) the answer never
arrives; in Fast DDS 3.2 that wait has no end. A client process started then sees the memory
node but never its services: "server not available" after any timeout. With 8 processes each
starting client processes in a loop, 5 % of the new clients never saw the node's services,
also after 80 s; with this profile none did (docs/reliability.md, "Fresh clients", and
``bench/bench_fresh_clients.py``). Jazzy's Fast DDS 2.14 does not wait on type lookups and
ignores the property.

The same wait can strike the node itself: a client's request writer held back by the node
leaves its requests unread, though the client sees the service ready.

With ``fastdds.type_propagation: disabled`` the node announces its endpoints without type
information, so peers match them by type name at once, as before XTypes; and the node's
participant has no type-lookup service, so it matches its peers' endpoints by type name too
and never waits on a lookup. Clients need no change. The ROS type hash still travels in each
endpoint's user data, so mismatched interface versions are still told apart. The profile is
used only when the user has not chosen one through ``FASTDDS_DEFAULT_PROFILES_FILE``.
"""

from __future__ import annotations

import pathlib
from typing import MutableMapping

PROFILE_ENV = 'FASTDDS_DEFAULT_PROFILES_FILE'
NODE_PROFILE = pathlib.Path(__file__).with_name('fastdds_profile.xml')


def use_node_profile(environ: MutableMapping[str, str]) -> str:
    """
    Point Fast DDS at the node's profile unless the user chose one; say which one applies.

    Must run before the process creates its first DDS participant (before ``rclpy.init``):
    Fast DDS reads the variable when it loads its profiles.
    """
    chosen = environ.get(PROFILE_ENV, '')
    if chosen:
        return (f'Fast DDS profile: {chosen} ({PROFILE_ENV}, chosen by the user; the node '
                f'recommends fastdds.type_propagation=disabled, see {NODE_PROFILE.name})')
    environ[PROFILE_ENV] = str(NODE_PROFILE)
    return f'Fast DDS profile: {NODE_PROFILE} (type propagation disabled)'
