"""
Fleet settings and credentials.

The connection string is a ROS parameter; the password never is (parameters are readable by
anyone on the ROS graph). It comes from ``fleet_password_file``, else ``$ROBOTMEM_FLEET_PASSWORD``,
else libpq's own ``.pgpass`` / ``PGPASSWORD``. TLS is asked for in the connection string
(``sslmode=verify-full sslrootcert=...``).
"""

from __future__ import annotations

from dataclasses import dataclass
import os
import pathlib
import re
from urllib.parse import urlsplit

from robotmem_ros.config import MemoryConfig
from robotmem_ros.errors import ConfigError

PASSWORD_ENV = 'ROBOTMEM_FLEET_PASSWORD'
ROBOT_ID = re.compile(r'^[A-Za-z0-9_.-]{1,64}$')


@dataclass(frozen=True)
class FleetSettings:
    """What the sync needs; built once from the engine config."""

    url: str
    password: str | None
    robot_id: str
    collections: tuple[str, ...]
    period: float
    batch_size: int
    outbox_limit: int

    @classmethod
    def from_config(cls, config: MemoryConfig) -> 'FleetSettings':
        """Validate the fleet parameters and read the password; raise ConfigError."""
        check_url(config.fleet_url)
        if not ROBOT_ID.match(config.fleet_robot_id):
            raise ConfigError('fleet_robot_id must be 1-64 letters, digits, "_", "." or "-" '
                              f'when fleet_url is set, got {config.fleet_robot_id!r}')
        collections = tuple(c.strip() for c in config.fleet_collections.split(',')
                            if c.strip()) or (config.collection,)
        return cls(config.fleet_url, read_password(config.fleet_password_file),
                   config.fleet_robot_id, collections, config.fleet_sync_period,
                   config.fleet_batch_size, config.fleet_outbox_limit)


def check_url(url: str) -> None:
    """Reject an empty URL and one that carries a password (it would leak as a parameter)."""
    if not url:
        raise ConfigError('fleet_url is empty')
    if '://' in url:
        if urlsplit(url).password:
            raise ConfigError('fleet_url must not contain a password: put it in '
                              f'fleet_password_file or ${PASSWORD_ENV}')
    elif re.search(r'(^|\s)password\s*=', url):
        raise ConfigError('fleet_url must not contain password=: put it in '
                          f'fleet_password_file or ${PASSWORD_ENV}')


def read_password(path: str) -> str | None:
    """Password from the file (first line), else the environment, else None (libpq decides)."""
    if path:
        try:
            text = pathlib.Path(path).expanduser().read_text(encoding='utf-8')
        except OSError as exc:
            raise ConfigError(f'cannot read fleet_password_file {path}: {exc.strerror}') from exc
        lines = text.splitlines()
        return lines[0] if lines else ''
    return os.environ.get(PASSWORD_ENV) or None
