"""Helpers shared by the reliability, fuzz and security tests: store checks, raw service calls."""

from __future__ import annotations

import contextlib
import hashlib
import pathlib
import threading
from typing import Any, Iterator

from engine_helpers import make_engine
from robotmem_ros.engine import MemoryEngine

CALL_GUARD_S = 30.0  # hang guard for one call, never a speed assertion
# Recall hits: an engine writes them from a thread of its own whenever earlier recalls' hits
# are due (engine/access_counts.py), so a node can change them at any moment.
HIT_COLUMNS = ('access_count', 'last_accessed')


@contextlib.contextmanager
def checker(db_path: pathlib.Path) -> Iterator[MemoryEngine]:
    """Open a BM25-only engine on an existing store (safe next to a running node: WAL)."""
    engine = make_engine(db_path.parent, name=db_path.name)
    try:
        yield engine
    finally:
        engine.close()


def assert_consistent(db_path: pathlib.Path) -> dict:
    """Assert integrity ok, FTS/vectors/tags/history agree with memories, no duplicate facts."""
    with checker(db_path) as engine:
        report = engine.doctor(repair=False)
        duplicates = duplicate_active_facts(engine)
    assert report['integrity'] == ['ok'], report
    assert report['ok'], report
    assert duplicates == [], duplicates
    return report


def duplicate_active_facts(engine: MemoryEngine) -> list[tuple]:
    """Return (collection, hash, count) of active facts stored more than once."""
    return [tuple(r) for r in engine.db.reader().execute(
        "SELECT collection, content_hash, COUNT(*) FROM memories WHERE status = 'active' "
        "AND type = 'fact' GROUP BY collection, content_hash HAVING COUNT(*) > 1")]


def fingerprint(engine: MemoryEngine, *, hits: bool = True) -> str:
    """
    Hash of the schema and of every row, FTS and vector index included.

    ``engine``'s pending recall hits are written first, so its thread cannot change the hash
    later. A node's engine, in its own process, writes its hits when they are due, which must
    not look like a change made by the call under test: ``hits=False`` leaves HIT_COLUMNS out.
    """
    assert engine.recaller.ctx.access.flush(), 'pending recall hits could not be written'
    conn = engine.db.reader()
    digest = hashlib.sha256()
    queries = ['SELECT type, name, sql FROM sqlite_master ORDER BY name']
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                 "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"):
        if not table.startswith('memories_fts_'):
            queries.append(f'SELECT {columns(conn, table, hits)} FROM "{table}"')
    queries.append('SELECT rowid, body FROM memories_fts')
    for sql in queries:
        digest.update(sql.encode())
        for row in sorted(repr(tuple(r)) for r in conn.execute(sql)):
            digest.update(row.encode())
    return digest.hexdigest()


def columns(conn: Any, table: str, hits: bool = True) -> str:
    """Return ``table``'s columns for a SELECT; without HIT_COLUMNS where ``hits`` is False."""
    return ', '.join(f'"{c[1]}"' for c in conn.execute(f'PRAGMA table_info("{table}")')
                     if hits or table != 'memories' or c[1] not in HIT_COLUMNS)


class Caller:
    """
    Service calls from one client node that give up when ``stop`` is set.

    RosClient.call asserts on a missing response; a load that kills the node mid-call needs a
    call that simply returns None instead.
    """

    def __init__(self, node: Any, prefix: str, stop: threading.Event | None = None) -> None:
        self.node = node
        self.prefix = prefix
        self.stop = stop or threading.Event()
        self._clients: dict[str, Any] = {}

    def __call__(self, srv_type: Any, service: str, **fields: Any) -> Any | None:
        """Return the response, or None when stopped (or the guard expired) before it came."""
        client = self._clients.get(service)
        if client is None:
            client = self.node.create_client(srv_type, f'{self.prefix}/{service}')
            assert client.wait_for_service(timeout_sec=CALL_GUARD_S), service
            self._clients[service] = client
        done = threading.Event()
        future = client.call_async(srv_type.Request(**fields))
        future.add_done_callback(lambda _: done.set())
        waited = 0.0
        while not done.wait(0.05):
            waited += 0.05
            if self.stop.is_set() or waited > CALL_GUARD_S:
                return None
        return future.result()
