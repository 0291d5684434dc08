"""Helpers for fleet tests: robots = engines on their own files, syncing with a real hub."""

from __future__ import annotations

import pathlib
from typing import Any
import uuid

from engine_helpers import make_engine
from robotmem_ros.fleet.settings import FleetSettings


def unique(prefix: str) -> str:
    """Return a robot id / collection name no other test uses (roles are cluster-wide)."""
    return f'{prefix}_{uuid.uuid4().hex[:8]}'


class Robot:
    """One robot: its engine, its hub role and its sync (not started unless asked)."""

    def __init__(self, hub: Any, tmp_path: pathlib.Path, robot_id: str, collections: list[str],
                 *, embed: bool = False, period: float = 1.0, outbox_limit: int = 10_000,
                 batch_size: int = 500, grants: list[str] | None = None) -> None:
        from robotmem_ros.fleet.sync import FleetSync
        self.robot_id = robot_id
        self.url = hub.add_robot(robot_id, grants if grants is not None else collections)
        self.engine = make_engine(tmp_path, embed=embed, name=f'{robot_id}.db',
                                  collection=collections[0])
        self.settings = FleetSettings(self.url, None, robot_id, tuple(collections), period,
                                      batch_size, outbox_limit)
        self.sync = FleetSync(self.engine, self.settings)

    def close(self) -> None:
        self.sync.stop()
        self.engine.close()


def own_facts(engine: Any) -> dict[int, str]:
    """Local own facts: id -> status."""
    return dict(engine.db.reader().execute(
        "SELECT id, status FROM memories WHERE origin = '' AND type = 'fact'").fetchall())


def hub_rows(hub: Any, robot_id: str) -> dict[str, tuple[str, str]]:
    """Hub rows of one robot (read as the owner): gid -> (content, status)."""
    with hub.connect_admin() as conn:
        rows = conn.execute('SELECT gid, content, status FROM robotmem.memories '
                            'WHERE robot_id = %s', (robot_id,)).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}
