"""
``with ros_session(args):`` — rclpy initialised for a block, on every supported distro.

Kilted's ``rclpy.init`` returns a context manager; Jazzy's (rclpy 7.1) returns None. This is
the one way the package's entry points start and end ROS, so both distros behave alike.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import rclpy


@contextlib.contextmanager
def ros_session(args: Sequence[str] | None = None) -> Iterator[None]:
    """Initialise the default context with ``args``; shut it down on leaving the block."""
    rclpy.init(args=None if args is None else list(args))
    try:
        yield
    finally:
        rclpy.try_shutdown()
