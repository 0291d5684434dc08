"""Helpers for fleet tests: robots = engines on their own files, syncing with a real hub."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any
from urllib.parse import parse_qs
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


class TlsHub:
    """
    Run the bundled hub as a site runs one: robots log in over TLS with a SCRAM password.

    Its hba file admits the owner on the local socket (as a site's admin) and every robot role
    with a password only; robots reach it through a TLS front on 127.0.0.1 (tls_front.py: the
    bundled server is built without SSL) with a self-signed certificate they verify.
    """

    def __init__(self, directory: pathlib.Path) -> None:
        from robotmem_ros.fleet.local_hub import LocalHub
        from tls_front import TlsFront
        self.hub = LocalHub(directory)
        pgdata = self.hub._server.pgdata
        (pgdata / 'pg_hba.conf').write_text('local all postgres trust\n'
                                            'local all all scram-sha-256\n')
        with self.hub.connect_admin() as conn:
            conn.execute('SELECT pg_reload_conf()')
        self.cert, key = pathlib.Path(directory) / 'hub.crt', pathlib.Path(directory) / 'hub.key'
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
                        '-subj', '/CN=localhost', '-addext',
                        'subjectAltName=DNS:localhost,IP:127.0.0.1',
                        '-keyout', str(key), '-out', str(self.cert)],
                       check=True, capture_output=True)
        socket_dir = parse_qs(self.hub.admin_url.partition('?')[2])['host'][0]
        self.front = TlsFront(f'{socket_dir}/.s.PGSQL.5432', self.cert, key)

    def url(self, role: str, sslmode: str = 'verify-full') -> str:
        """Return ``role``'s connection string over TCP + TLS (never with the password)."""
        return (f'postgresql://{role}@localhost:{self.front.port}/postgres?sslmode={sslmode}'
                f'&sslrootcert={self.cert}')

    def add_robot(self, robot_id: str, password: str, collections: list[str]) -> None:
        """Create ``robot_id``'s login role with ``password``, reading ``collections``."""
        from robotmem_ros.fleet import hub_schema
        with self.hub.connect_admin() as conn:
            hub_schema.add_robot(conn, robot_id, robot_id, password, collections)

    def close(self) -> None:
        self.front.close()
        self.hub.close()
