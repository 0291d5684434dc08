"""Helpers for engine tests: a real store on disk, the real bundled model loaded once."""

from __future__ import annotations

import functools
import json
import pathlib
import time
from typing import Any, Sequence

import numpy as np
import pytest

from robotmem_ros.config import MemoryConfig
from robotmem_ros.embedding import load_embedder
from robotmem_ros.engine import MemoryEngine, store
from robotmem_ros.engine.database import connect, savepoint
from robotmem_ros.errors import ConflictError, StorageError
from robotmem_ros.types import PerceptionInput


@functools.lru_cache(maxsize=None)
def embedder(model: str = 'minilm-l6-int8') -> Any:
    """Load a bundled model once per test run (loading dominates a small test)."""
    return load_embedder(MemoryConfig(embed_model=model))


def make_engine(tmp_path: pathlib.Path, *, embed: bool = False, name: str = 'memory.db',
                model: str = 'minilm-l6-int8', **settings: Any) -> MemoryEngine:
    """Open an engine on a file in ``tmp_path``; BM25-only unless ``embed``."""
    clock = settings.pop('clock', None)
    config = MemoryConfig(db_path=str(tmp_path / name),
                          embed_backend='onnx' if embed else 'none', embed_model=model,
                          **settings)
    kwargs = {'clock': clock} if clock is not None else {}
    return MemoryEngine(config, embedder(model) if embed else None, **kwargs)


class FakeClock:
    """A settable clock so decay and half-life tests can move time without sleeping."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance_days(self, days: float) -> None:
        self.now += days * 86_400.0


def dock_store(tmp_path: pathlib.Path, pallets: int = 12) -> MemoryEngine:
    """Return an engine holding ``pallets`` dock facts and one wrench fact (term-count tests)."""
    engine = make_engine(tmp_path)
    for index in range(pallets):
        engine.learn(f'pallet {index} waits at the dock for inspection {index * 7}')
    engine.learn('the torque wrench lives in the second drawer')
    return engine


def count(engine: MemoryEngine, where: str = '1', *args: Any) -> int:
    """Count memories rows matching ``where`` (read through a fresh reader)."""
    return engine.db.reader().execute(f'SELECT COUNT(*) FROM memories WHERE {where}',
                                      args).fetchone()[0]


def bulk_vectors(engine: MemoryEngine, vectors: Any, collection: str = 'default',
                 session: str = '', data: dict | None = None) -> list[int]:
    """Store one perception per vector through the batch path, then attach the vectors."""
    ids = engine.save_perceptions([
        PerceptionInput(description=f'reading {i}', collection=collection, session_id=session,
                        data=data) for i in range(len(vectors))])
    with engine.db.write() as conn:
        for memory_id, vector in zip(ids, vectors):
            store.put_vector(conn, memory_id, vector)
    return ids


def with_context(engine: MemoryEngine, vectors: np.ndarray | None, context: dict,
                 texts: Sequence[str] = (), embedded: int = 1) -> list[int]:
    """Memories of the given context (written as stored JSON), with their vectors if given."""
    texts = texts or [f'reading {i}' for i in range(len(vectors))]
    ids = engine.save_perceptions([PerceptionInput(description=text) for text in texts])
    with engine.db.write() as conn:
        for number, memory_id in enumerate(ids):
            conn.execute('UPDATE memories SET context_json = ?, embedded = ? WHERE id = ?',
                         (json.dumps(context), embedded, memory_id))
            if vectors is not None:
                store.put_vector(conn, memory_id, vectors[number])
    return ids


def fts_row_of_another_writer(engine: MemoryEngine, memory_id: int, body: str) -> None:
    """Add an FTS row through a connection of its own, as another process (the CLI) would."""
    other = connect(str(engine.db.path))
    try:
        store.index_text(other, memory_id, body)
        other.commit()
    finally:
        other.close()


def fts_write_rolled_back(engine: MemoryEngine) -> None:
    """Fail a write that added an FTS row (noted in the count ledger): it is undone whole."""
    with pytest.raises(StorageError):
        with engine.db.write() as writer:
            store.index_text(writer, 6_000, 'the wrench in the drawer')
            writer.execute('INSERT INTO no_such_table VALUES (1)')


def fts_rows_purged(engine: MemoryEngine, ids: Sequence[int]) -> None:
    """Purge as retention does beside a noted FTS row: rows deleted in bulk, not noted (taint)."""
    with engine.db.write() as writer:
        store.index_text(writer, 6_001, 'the wrench on the dock')
        store.purge(writer, ids)


def fts_savepoint_rolled_back(engine: MemoryEngine) -> None:
    """Roll back a savepoint that noted FTS rows, in a write that commits: a tainted step."""
    with engine.db.write() as writer:
        writer.execute('CREATE TEMP TABLE once (value UNIQUE)')
        writer.execute('INSERT INTO once VALUES (1)')
        store.index_text(writer, 7_000, 'the red wrench')
        with pytest.raises(ConflictError):
            with savepoint(writer, 'clash'):
                store.index_text(writer, 7_001, 'the red cup on the shelf')
                writer.execute('INSERT INTO once VALUES (1)')


def wait_for_postings(engine: Any, conn: Any, timeout: float = 60.0) -> None:
    """Ask until the Jaccard postings answer for ``conn`` (the first ask starts their build)."""
    deadline = time.monotonic() + timeout
    while engine.db.resident.overlapping(conn, frozenset({'cup'}), 1.0) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f'no Jaccard postings: {engine.db.resident.stats()}')
        time.sleep(0.02)


def wait_for_text_index(engine: Any, conn: Any, timeout: float = 60.0) -> None:
    """Ask once (which starts the index's worker), then wait until it holds every change."""
    engine.db.text.candidates(conn, '"cup"', 'a', 1, active_only=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = engine.db.text.stats()
        last = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'text_changes'"
                            ).fetchone()
        if held['text_index_docs'] and held['text_index_seq'] >= (last[0] if last else 0):
            return
        time.sleep(0.05)
    raise AssertionError(f'text index not current: {engine.db.text.stats()}')
