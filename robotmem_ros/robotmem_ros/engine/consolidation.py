"""
End-of-session consolidation (docs/memory.md): complete-linkage clusters of a session's facts.

The pair judgment is ``pair_similarity(a, b)``, a function of two facts, so how the pairs are
found (all pairs of a session, or neighbours from an index) can change without changing it.
Two facts are similar when nothing that differs between them carries content
(``judgment.difference``) and their Jaccard exceeds ``consolidation_threshold`` or, when both
are embedded, their cosine reaches ``consolidation_cosine_threshold``. One relaxation: facts
that state the same measured values (``12.5N``) with no attribute, place or ordinal apart are
similar from ``consolidation_numeric_cosine_threshold`` — the same value said of the same
parameter in other words. Records (conversation turns, detections, events, source-prefixed
lines) are never merged, and facts that differ in a number, a negation or an opposite word are
never similar.

The example of docs/memory.md (three wordings of one grip force) has pairwise Jaccard
0.25-0.43 with our tokens and MiniLM-int8 cosines of 0.59 / 0.73 / 0.75, so it merges only
through the number-anchored cosine rule. Without an embedder,
consolidation is Jaccard-only and more conservative.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import judgment, store
from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.categories import CONSOLIDATION_PROTECTED

MIN_FACTS = 3


@dataclass
class Candidate:
    """A session fact eligible for consolidation."""

    id: int
    content: str
    category: str
    confidence: float
    access_count: int
    created_at: float
    vector: np.ndarray | None = None


@dataclass
class Cluster:
    """One merged group: the representative and the members it supersedes."""

    representative: Candidate
    members: list[Candidate]
    avg_similarity: float


def similarity_fn(config: MemoryConfig) -> Callable[[Candidate, Candidate], float | None]:
    """Return sim(a, b): the similarity if the pair counts as similar, else None."""
    def sim(a: Candidate, b: Candidate) -> float | None:
        return pair_similarity(a, b, config)
    return sim


def pair_similarity(a: Candidate, b: Candidate, config: MemoryConfig) -> float | None:
    """
    Similarity of two session facts if consolidation may merge them, else None.

    Cheapest tests first: features are cached per text, the similarity thresholds reject most
    pairs, and only the pairs that pass them are aligned by the guard.
    """
    fa, fb = judgment.features(a.content), judgment.features(b.content)
    if fa.record or fb.record:
        return None
    cos = (float(np.dot(a.vector, b.vector))
           if a.vector is not None and b.vector is not None else None)
    if (fa.measures and fa.measures == fb.measures and cos is not None
            and cos >= config.consolidation_numeric_cosine_threshold):
        if (judgment.conflict(fa, fb) or judgment.protected_difference(fa, fb)
                or _one_word_replaced(fa, fb)):
            return None
        return cos
    jac = textmod.jaccard(fa.jaccard, fb.jaccard)
    best = jac if jac > config.consolidation_threshold else None
    if cos is not None and cos >= config.consolidation_cosine_threshold:
        best = max(best or 0.0, cos)
    if best is None or judgment.difference(fa, fb):
        return None
    return best


def _one_word_replaced(a: judgment.Features, b: judgment.Features) -> bool:
    """
    Tell whether one text replaces or adds a single content word and the guard calls it content.

    The same measured value lets two reworded facts merge from a low cosine (the example in
    docs/memory.md: "grip_force=12.5N works for cups" / "force 12.5N best for cup grasping",
    two words or more changed on each side). A text that keeps every word but one is a minimal
    edit, the form a different subject or object takes ("the mug weighs 350g" / "the bowl
    weighs 350g", "press the button with 5N" / "press the switch with 5N"): there the guard
    decides, as in every other layer.
    """
    return (min(len(a.bag - b.bag), len(b.bag - a.bag)) <= 1
            and bool(judgment.difference(a, b)))


def neighbours(items: Sequence[Candidate], config: MemoryConfig) -> dict[int, set[int]]:
    """
    Pairs that pass a threshold of :func:`pair_similarity`, found with array operations.

    A superset of what sim keeps: the guard (conflict, difference) still runs on each pair,
    in Python, so only these pairs cost that. Records are never similar, so they get no
    neighbours. Cosine: one matrix product; a pair counts at
    ``consolidation_cosine_threshold``, or at the numeric threshold when both facts state the
    same measured values. Jaccard: exact, from a token incidence matrix.
    """
    near: dict[int, set[int]] = {c.id: set() for c in items}
    facts = [c for c in items if not judgment.features(c.content).record]
    if len(facts) < 2:
        return near
    similar = _jaccard_above(facts, max(config.consolidation_threshold, 0.0))
    at = [i for i, c in enumerate(facts) if c.vector is not None]
    if len(at) > 1:
        matrix = np.stack([facts[i].vector for i in at])
        cosine = matrix @ matrix.T
        groups: dict[frozenset[str], int] = {}
        measures = np.array([groups.setdefault(values, len(groups)) if values else -1
                             for values in (judgment.features(facts[i].content).measures
                                            for i in at)])
        same = (measures[:, None] == measures[None, :]) & (measures[:, None] >= 0)
        similar[np.ix_(at, at)] |= (
            (cosine >= config.consolidation_cosine_threshold - 1e-6)
            | (same & (cosine >= config.consolidation_numeric_cosine_threshold - 1e-6)))
    rows, cols = np.nonzero(np.triu(similar, 1))
    for row, col in zip(rows.tolist(), cols.tolist()):
        near[facts[row].id].add(facts[col].id)
        near[facts[col].id].add(facts[row].id)
    return near


def _jaccard_above(facts: Sequence[Candidate], threshold: float) -> np.ndarray:
    """
    Boolean matrix, upper triangle: the Jaccard of two facts' token sets exceeds threshold.

    Each fact's overlaps with the later ones are a sum of the incidence rows of its own tokens
    (tokens x facts, one byte a cell): n^2 x tokens-per-fact byte additions in numpy. A prefix
    filter compares fewer pairs on varied text, but each in Python, and on a session of
    templated facts (common words) its candidates grew with the square of the session anyway.
    """
    sets = [judgment.features(c.content).jaccard for c in facts]
    vocabulary: dict[str, int] = {}
    members = [[vocabulary.setdefault(token, len(vocabulary)) for token in tokens]
               for tokens in sets]
    incidence = np.zeros((len(vocabulary), len(facts)), dtype=np.uint8)
    for column, rows in enumerate(members):
        incidence[rows, column] = 1
    sizes = np.array([len(tokens) for tokens in sets])
    above = np.zeros((len(facts), len(facts)), dtype=bool)
    for row, rows in enumerate(members[:-1]):
        shared = incidence[rows, row + 1:].sum(axis=0, dtype=np.int64)
        union = sizes[row] + sizes[row + 1:] - shared
        above[row, row + 1:] = shared > threshold * union  # as text.jaccard(a, b) > t
    return above


def greedy_clusters(items: Sequence[Candidate],
                    sim: Callable[[Candidate, Candidate], float | None],
                    near: dict[int, set[int]] | None = None) -> list[Cluster]:
    """
    Greedy complete linkage: a member must be similar to every member already in.

    Stricter than single linkage, so A~B~C chains do not pull in an A that is unlike C.
    Items are visited in the given order; each joins at most one cluster. ``near`` (from
    :func:`neighbours`) limits each item's candidates to its neighbours, still in that order,
    so the visit is linear in the pairs that may be similar, not quadratic in the items; the
    clusters are the same.
    """
    order = {c.id: i for i, c in enumerate(items)}
    used: set[int] = set()
    clusters = []
    for i, first in enumerate(items):
        if first.id in used:
            continue
        members, sims = [first], []
        later = (items[i + 1:] if near is None else
                 [items[j] for j in sorted(order[o] for o in near[first.id]) if j > i])
        for other in later:
            if other.id in used:
                continue
            pair_sims = [sim(other, m) for m in members]
            if all(s is not None for s in pair_sims):
                members.append(other)
                sims.extend(pair_sims)
        if len(members) > 1:
            used.update(m.id for m in members)
            rep = max(members, key=lambda m: (m.confidence, m.access_count, m.created_at))
            clusters.append(Cluster(rep, members, sum(sims) / len(sims)))
    return clusters


def eligible(conn: Any, session_id: str, collection: str, config: MemoryConfig,
             vectors: dict[int, np.ndarray]) -> list[Candidate]:
    """Facts of the session that may be merged (not protected, not highly confident)."""
    rows = store.mergeable_facts(conn, session_id, collection,
                                 config.consolidation_max_confidence, CONSOLIDATION_PROTECTED)
    return [Candidate(*row, vector=vectors.get(row[0])) for row in rows]


def consolidate(conn: Any, candidates: list[Candidate], config: MemoryConfig,
                now: float) -> list[Cluster]:
    """Cluster per category and supersede non-representatives; return the clusters."""
    if len(candidates) < MIN_FACTS:
        return []
    by_category: dict[str, list[Candidate]] = {}
    for cand in candidates:
        by_category.setdefault(cand.category, []).append(cand)
    sim = similarity_fn(config)
    clusters = []
    for group in by_category.values():
        clusters.extend(greedy_clusters(group, sim, neighbours(group, config)))
    for cluster in clusters:
        rep = cluster.representative
        for member in cluster.members:
            if member.id == rep.id:
                continue
            store.set_status(conn, member.id, 'superseded', now=now, superseded_by=rep.id)
            store.add_history(conn, member.id, 'supersede', created_at=now,
                              old_content=member.content, new_content=rep.content,
                              reason='end_session consolidation',
                              details={'representative': rep.id,
                                       'avg_similarity': cluster.avg_similarity})
    return clusters
