"""
Adjacent memories share their score: a turn or an episode step is recalled with its context.

A conversation answers a question over several turns ("what did you research?" / "adoption
agencies"), and a robot's episode states a fact over several steps (the detection, then the
grasp that worked). The turn that holds the answer often shares few words with the question
while the turn next to it matches. So after fusion each memory gains ``adjacent_weight`` times
the best fused score among the memories stored ``k`` places before or after it, for every
``k`` up to ``adjacent_span``, in its collection and session (docs/memory.md, "Recall"):

    score'(m) = score(m) + w · Σ_{k=1..span} max(score(m - k), score(m + k))

Only the channels' candidates are re-ranked: a memory that no channel found never enters the
results this way, so a keyword-only recall still returns keyword matches only. On LoCoMo stored
as ``Speaker: text`` (dev half) span 2 and weight 0.35 lift hybrid R@10 from 0.670 to 0.742
and MRR@10 from 0.505 to 0.524 (docs/performance.md, "Adjacent memories").
"""

from __future__ import annotations

from typing import Mapping


def spread(scores: Mapping[int, float], adjacent: Mapping[int, tuple[list[int], list[int]]],
           weight: float) -> dict[int, float]:
    """
    Return the scores with each scored memory's share of its neighbours' scores added.

    ``adjacent`` maps a scored memory to its neighbours (before, nearest first; after, nearest
    first: store.adjacent); scored memories it lacks lend nothing. Neighbours that are not
    scored gain nothing and stay out of the result.
    """
    # best[m][k]: the best score k places from m; m is k places from c exactly when c is k
    # places from m, so walking the scored memories' own neighbours finds every such pair.
    best: dict[int, dict[int, float]] = {}
    for source, (before, after) in adjacent.items():
        score = scores.get(source, 0.0)
        for side in (before, after):
            for distance, memory_id in enumerate(side, start=1):
                near = best.setdefault(memory_id, {})
                near[distance] = max(near.get(distance, 0.0), score)
    return {memory_id: score + weight * sum(best.get(memory_id, {}).values())
            for memory_id, score in scores.items()}
