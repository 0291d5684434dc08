"""
Write-time dedup pipeline (docs/memory.md): exact → Jaccard → cosine → session.

Runs on the writer connection inside the writer lock, so the check and the insert that follows
are one atomic step. Every layer asks ``judgment.difference`` before it folds a fact: texts
that differ in a number, a negation, an opposite word, an object, an attribute, a place or the
roles of their objects are never duplicates, whatever their overlap. Near misses — and the
look-alikes the guard kept apart, which the decision layer needs to see contradictions — are
collected as ``similar`` for the caller.

The collection-wide nearest neighbours may be searched beside the Jaccard layer, on a spare
thread's read connection, while the writer has written nothing: that reader then sees what the
writer sees (Database.unwritten, engine/side_threads.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import functools
from typing import Any, Callable

import numpy as np

from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import jaccard_store, judgment, store
from robotmem_ros.engine import text as textmod

JACCARD_CANDIDATES = 5
COSINE_CANDIDATES = 3
# The collection-wide KNN fetches this many so the decision layer can reuse the neighbours
# instead of scanning the vectors a second time; dedup itself looks at the top 3 (docs/memory.md).
NEIGHBOURS = 5
SESSION_CANDIDATES = 20
Hits = list[tuple[int, float]]
# Starts a search given the connection to run on; returns what waits for its result.
Beside = Callable[[Callable[[Any], Hits]], Callable[[], Hits]]


@dataclass
class DedupVerdict:
    """Duplicate or not, by which layer, and the non-blocking near misses."""

    method: str = ''
    existing_id: int = 0
    similarity: float = 0.0
    similar: dict[int, float] = field(default_factory=dict)
    neighbours: list[tuple[int, float]] = field(default_factory=list)

    @property
    def is_duplicate(self) -> bool:
        """Return True when a layer found the same fact."""
        return bool(self.method)

    def note_similar(self, memory_id: int, similarity: float) -> None:
        """Keep the best similarity seen for a near-miss memory."""
        self.similar[memory_id] = max(similarity, self.similar.get(memory_id, 0.0))


def check(conn: Any, content: str, *, collection: str, session_id: str,
          vector: np.ndarray | None, config: MemoryConfig, now: float,
          beside: Beside | None = None) -> DedupVerdict:
    """
    Run the layers in order and stop at the first duplicate.

    ``beside(search)`` starts ``search(connection)`` where it may run beside this thread and
    returns what waits for its result; without it the search runs on ``conn`` when needed.
    """
    verdict = DedupVerdict()
    existing = store.find_active_by_hash(conn, collection, content)
    if existing is not None:
        verdict.method, verdict.existing_id, verdict.similarity = 'exact', existing, 1.0
        return verdict
    nearest = None
    if vector is not None:
        search = functools.partial(_nearest, vector=vector, collection=collection)
        nearest = beside(search) if beside else functools.partial(search, conn)
    tokens = textmod.jaccard_tokens(content)
    if tokens and _jaccard_layer(conn, verdict, content, tokens, collection, '',
                                 JACCARD_CANDIDATES, 'jaccard', config, now,
                                 near_misses=vector is None):
        return verdict
    if nearest is not None:
        verdict.neighbours = nearest()
        if _cosine_layer(conn, verdict, content, verdict.neighbours[:COSINE_CANDIDATES],
                         config.dedup_cosine_threshold, 'cosine', config):
            return verdict
        if session_id:
            hits = store.vec_search(conn, vector, collection, SESSION_CANDIDATES,
                                    session_id=session_id, type_='fact')
            _cosine_layer(conn, verdict, content, hits, config.session_cosine_threshold,
                          'session_cosine', config)
    elif session_id and tokens:
        # Without an embedder the session layer falls back to Jaccard over the whole episode.
        _jaccard_layer(conn, verdict, content, tokens, collection, session_id,
                       SESSION_CANDIDATES, 'session_jaccard', config, now, near_misses=True)
    return verdict


def _nearest(conn: Any, *, vector: np.ndarray, collection: str) -> Hits:
    """Return the collection's facts nearest ``vector`` (dedup's top 3, the decider's peers)."""
    return store.vec_search(conn, vector, collection, NEIGHBOURS, type_='fact')


def _jaccard_layer(conn: Any, verdict: DedupVerdict, content: str, tokens: frozenset[str],
                   collection: str, session_id: str, limit: int, method: str,
                   config: MemoryConfig, now: float, *, near_misses: bool) -> bool:
    # The best `limit` facts by Jaccard, exact down to the dedup threshold, or down to the
    # similar threshold for ``near_misses`` (without an embedder they are all the decision
    # layer sees; with one, the vector neighbours are its peers and that deeper search would
    # cost as much as the full BM25 ranking it replaces).
    floor = config.dedup_jaccard_threshold
    if near_misses:
        floor = min(floor, config.similar_jaccard_min)
    found = jaccard_store.candidates(conn, tokens, collection, limit, floor, now=now,
                                     session_id=session_id)
    scored = [(hit.memory_id, hit.jaccard) for hit in found]
    contents = {hit.memory_id: hit.content for hit in found}
    # Jaccard must exceed its threshold; cosine only has to reach its own (docs/memory.md).
    return _judge(verdict, content, scored, contents,
                  lambda sim: sim > config.dedup_jaccard_threshold,
                  config.similar_jaccard_min, method)


def _cosine_layer(conn: Any, verdict: DedupVerdict, content: str,
                  hits: list[tuple[int, float]], threshold: float, method: str,
                  config: MemoryConfig) -> bool:
    contents = store.contents(conn, [memory_id for memory_id, _ in hits])
    return _judge(verdict, content, hits, contents, lambda sim: sim >= threshold,
                  config.similar_cosine_min, method)


def _judge(verdict: DedupVerdict, content: str, scored: list[tuple[int, float]],
           contents: dict[int, str], is_duplicate: Callable[[float], bool],
           similar_min: float, method: str) -> bool:
    """Record the first duplicate the guard lets through; note near misses on the way."""
    for memory_id, similarity in scored:
        other = contents[memory_id]
        if is_duplicate(similarity) and judgment.same_fact(content, other):
            verdict.method, verdict.existing_id, verdict.similarity = (
                method, memory_id, similarity)
            return True
        if similarity >= similar_min:
            verdict.note_similar(memory_id, similarity)
    return False
