"""
Recall at the hub (``robotmem fleet recall``): full text + vector, fused like the local recall.

The query vector is compared only with rows embedded by the same model; rows of other models
(or without a vector) are found by the full-text channel alone. Reciprocal-rank fusion with the
engine's ``rrf_k`` merges the two rankings, as the local recall does.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from robotmem_ros.engine.fusion import maxscore_normalize, rrf_fuse
from robotmem_ros.fleet import hub


def fleet_recall(conn: Any, query: str, collections: Sequence[str], n: int, *,
                 vector: np.ndarray | None, model: str, rrf_k: int,
                 fetch: int | None = None) -> list[dict]:
    """Top ``n`` hub rows for ``query`` as dicts (robot, collection, content, score...)."""
    depth = fetch or 2 * n
    text = hub.text_search(conn, query, collections, depth)
    near = (hub.vector_search(conn, vector, model, collections, depth)
            if vector is not None and model else [])
    index = {gid: i for i, gid in enumerate(dict.fromkeys(text + near))}
    scores = rrf_fuse([[index[g] for g in text], [index[g] for g in near]], rrf_k)
    best = sorted(index, key=lambda g: (-scores[index[g]], g))[:n]
    rows = hub.rows_by_gid(conn, best)
    ranked = [g for g in best if g in rows]
    out = []
    for gid, score in zip(ranked, maxscore_normalize([scores[index[g]] for g in ranked])):
        row = rows[gid]
        out.append({'gid': gid, 'robot_id': row.robot_id, 'collection': row.collection,
                    'content': row.content, 'category': row.category, 'status': row.status,
                    'confidence': row.confidence, 'context': row.context,
                    'created_at': row.created_at, 'score': score,
                    'channels': [c for c, hits in (('bm25', text), ('vector', near))
                                 if gid in hits]})
    return out
