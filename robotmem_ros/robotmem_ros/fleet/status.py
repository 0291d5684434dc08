"""Fleet state as the node, the diagnostics and the CLI report it (no psycopg needed here)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FleetStatus:
    """Fleet state for NodeStatus, /diagnostics and ``robotmem fleet status``."""

    robot_id: str = ''
    connected: bool = False
    outbox: int = 0
    outbox_limit: int = 0
    outbox_full: bool = False
    overflow: int = 0             # changes that found the outbox full, caught up on drain
    last_push: float = 0.0        # wall time of the last successful push (0 = never)
    last_pull: float = 0.0        # wall time of the last successful pull (0 = never)
    lag_s: float = -1.0           # seconds since the robot was last in step with the hub
    pushed: int = 0
    pulled: int = 0
    duplicates: int = 0
    refused: int = 0              # pulled rows this store cannot hold, skipped (logged)
    error: str = ''

    def to_dict(self) -> dict:
        """JSON-ready copy."""
        return dict(self.__dict__)
