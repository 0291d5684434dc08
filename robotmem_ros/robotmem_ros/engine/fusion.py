"""
Score arithmetic of recall: score or reciprocal-rank fusion, source weighting, MaxScore.

Both fusions merge the BM25 and vector rankings although their scores live on different
scales. RRF ignores the scores and keeps only ranks; score fusion puts each channel's scores on
[0, 1] over its own candidates (min-max) and adds them with weights, so a BM25 hit that stands
far above the rest keeps that lead (docs/performance.md, "Recall fusion", has the measurements
that made it the default). MaxScore puts the best hit at 1.0 so scores read alike across
queries.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from robotmem_ros.engine.context_filter import is_number, resolve_path
from robotmem_ros.errors import ValidationError

_SOURCE_PATH = ('env', 'sim_or_real')


def rrf_fuse(ranked_lists: Sequence[Sequence[int]], k: int) -> dict[int, float]:
    """
    Return ``id -> sum over lists of 1 / (k + rank + 1)`` with 0-based ranks.

    An id repeated within one list counts at its first (best) rank only. Each id's terms are
    summed with ``math.fsum``, which is exactly rounded, so the scores do not depend on the
    order the lists are given in.
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValidationError(f'rrf k must be an integer >= 0, got {k!r}')
    terms: dict[int, list[float]] = {}
    for ranked in ranked_lists:
        seen: set[int] = set()
        for rank, memory_id in enumerate(ranked):
            if not isinstance(memory_id, int) or isinstance(memory_id, bool):
                raise ValidationError(f'rrf ranked ids must be integers, got {memory_id!r}')
            if memory_id not in seen:
                seen.add(memory_id)
                terms.setdefault(memory_id, []).append(1.0 / (k + rank + 1))
    return {memory_id: math.fsum(parts) for memory_id, parts in terms.items()}


def score_fuse(scored_lists: Sequence[Sequence[tuple[int, float]]],
               weights: Sequence[float]) -> dict[int, float]:
    """
    Return ``id -> sum over lists of weight * min-max normalized score``.

    Each list holds (id, score) pairs, higher score better. Within a list the best score maps
    to 1 and the worst to 0 (all equal: every one maps to 1), so a channel's weight is the most
    it can add. An id missing from a list gets 0 from it; an id repeated within a list counts
    at its first occurrence. Sums use ``math.fsum``, so the result does not depend on the order
    of the lists.
    """
    if len(weights) != len(scored_lists):
        raise ValidationError('score fusion needs one weight per list')
    terms: dict[int, list[float]] = {}
    for scored, weight in zip(scored_lists, weights):
        weight = _score(weight)
        first: dict[int, float] = {}
        for memory_id, score in scored:
            if not isinstance(memory_id, int) or isinstance(memory_id, bool):
                raise ValidationError(f'fused ids must be integers, got {memory_id!r}')
            value = float(score)
            if not math.isfinite(value):
                raise ValidationError(f'fused scores must be finite, got {score!r}')
            first.setdefault(memory_id, value)
        if not first:
            continue
        low, high = min(first.values()), max(first.values())
        for memory_id, value in first.items():
            unit = (value - low) / (high - low) if high > low else 1.0
            terms.setdefault(memory_id, []).append(weight * unit)
    return {memory_id: math.fsum(parts) for memory_id, parts in terms.items()}


def source_weight(context: Any, real_weight: float) -> float:
    """
    Return the score multiplier: ``real_weight`` for real-world memories, else 1.0.

    Real-robot experience is trusted over simulation; a context is real when
    ``env.sim_or_real == "real"``.
    """
    return real_weight if resolve_path(context, _SOURCE_PATH) == 'real' else 1.0


def maxscore_normalize(scores: Sequence[float]) -> list[float]:
    """
    Divide every score by the largest, so the best is exactly 1.0 and the order is kept.

    Scores must be finite and >= 0 (RRF scores are); all zeros stay zeros.
    """
    values = [_score(score) for score in scores]
    best = max(values, default=0.0)
    if best == 0.0:
        return [0.0] * len(values)
    return [value / best for value in values]


def _score(score: Any) -> float:
    try:
        value = float(score) if is_number(score) else math.nan
    except OverflowError:       # an int too large for a float
        value = math.inf
    if not (math.isfinite(value) and value >= 0):
        raise ValidationError(f'scores must be finite numbers >= 0, got {score!r}')
    return value
