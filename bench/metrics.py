"""Classification and ranking metrics for the quality benchmarks (numpy only, no sklearn)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

MIN_PREDICTED = 10  # a "precision >= target" threshold must flag at least this many pairs


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties)."""
    pos = int(labels.sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float('nan')
    order = np.argsort(scores, kind='mergesort')
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    start = 0
    while start < len(scores):
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def prf(predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Precision, recall, F1 and the confusion counts of a binary decision."""
    tp = int((predicted & (labels == 1)).sum())
    fp = int((predicted & (labels == 0)).sum())
    fn = int((~predicted & (labels == 1)).sum())
    precision = tp / (tp + fp) if tp + fp else float('nan')
    recall = tp / (tp + fn) if tp + fn else float('nan')
    f1 = (2 * precision * recall / (precision + recall)
          if tp and precision + recall else 0.0)
    return {'precision': precision, 'recall': recall, 'f1': f1, 'tp': tp, 'fp': fp, 'fn': fn}


def threshold_for_precision(scores: np.ndarray, labels: np.ndarray,
                            target: float = 0.95) -> float | None:
    """Lowest threshold t with precision(score >= t) >= target (the most recall at it)."""
    order = np.argsort(-scores, kind='mergesort')
    s, y = scores[order], labels[order]
    tp = np.cumsum(y == 1)
    predicted = np.arange(1, len(s) + 1)
    best = None
    for i in range(len(s)):
        # Only cut between distinct scores: everything tied with s[i] is flagged too.
        if i + 1 < len(s) and s[i + 1] == s[i]:
            continue
        if predicted[i] >= MIN_PREDICTED and tp[i] / predicted[i] >= target:
            best = float(s[i])
    return best


def pr_curve(scores: np.ndarray, labels: np.ndarray,
             grid: Sequence[float]) -> dict[str, list[float]]:
    """Precision and recall when flagging score >= t, for each t of ``grid``."""
    precision, recall = [], []
    pos = max(int(labels.sum()), 1)
    for t in grid:
        flagged = scores >= t
        tp = int((flagged & (labels == 1)).sum())
        n = int(flagged.sum())
        precision.append(tp / n if n else float('nan'))
        recall.append(tp / pos)
    return {'threshold': list(grid), 'precision': precision, 'recall': recall}


def histogram(scores: np.ndarray, labels: np.ndarray, bins: int = 40,
              lo: float = 0.0, hi: float = 1.0) -> dict[str, list]:
    """Count duplicate and non-duplicate pairs per similarity bin (clipped to range)."""
    edges = np.linspace(lo, hi, bins + 1)
    clipped = np.clip(scores, lo, hi)
    dup, _ = np.histogram(clipped[labels == 1], edges)
    other, _ = np.histogram(clipped[labels == 0], edges)
    return {'edges': edges.round(4).tolist(), 'duplicate': dup.tolist(),
            'not_duplicate': other.tolist()}


def ranking(ranked: Sequence[Sequence[int]], relevant: Sequence[set[int]]
            ) -> dict[str, float]:
    """Return mean R@1/5/10 and MRR@10 over queries (each with at least one relevant item)."""
    sums = {'R@1': 0.0, 'R@5': 0.0, 'R@10': 0.0, 'MRR@10': 0.0}
    for hits, rel in zip(ranked, relevant):
        for k in (1, 5, 10):
            sums[f'R@{k}'] += len(rel.intersection(hits[:k])) / len(rel)
        sums['MRR@10'] += next((1.0 / (i + 1) for i, h in enumerate(hits[:10]) if h in rel),
                               0.0)
    count = len(relevant)
    return {k: v / count if count else float('nan') for k, v in sums.items()} | {
        'queries': count}
