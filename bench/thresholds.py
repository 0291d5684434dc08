"""
Recommended MemoryConfig thresholds, derived from the dedup_quality results.

Write-time dedup drops a new fact, so it must be precise: the recommended value per layer is
the strictest of the per-set thresholds that reach precision >= 0.95 on each set's tune split
(English sets for the Jaccard layer and MiniLM; English and Chinese for the multilingual model).
Consolidation only supersedes facts of one session (history keeps them), so it may trade some
precision for recall: it is read off the precision-recall curves at precision >= 0.90, and the
precision of the shipped consolidation values is reported next to it.

    python bench/thresholds.py [--results DIR]   # reads dedup_<model>.json, writes thresholds.json
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Any, Sequence

from common import dedup_results, print_table, RESULTS_DIR, write_result
from robotmem_ros.config import MemoryConfig

EN_SETS = ('mrpc', 'stsb_en')
ZH_SETS = ('lcqmc', 'bq', 'atec', 'pawsx_zh')
CONSOLIDATION_PRECISION = 0.90
MIN_RECALL = 0.05


def curve_threshold(curve: dict[str, list], target: float) -> float | None:
    """
    Lowest grid threshold from which precision stays >= target for every higher one.

    The sparse tail (recall < MIN_RECALL, a handful of pairs) is ignored: one odd pair there
    would otherwise veto every threshold.
    """
    best = None
    points = zip(curve['threshold'], curve['precision'], curve['recall'])
    for t, p, r in reversed(list(points)):
        if p != p or r < MIN_RECALL:    # nothing (or next to nothing) flagged
            continue
        if p < target:
            break
        best = t
    return best


def curve_precision(curve: dict[str, list], threshold: float) -> float | None:
    """Precision of the grid point nearest to ``threshold``."""
    i = min(range(len(curve['threshold'])), key=lambda j: abs(curve['threshold'][j] - threshold))
    p = curve['precision'][i]
    return None if p != p else round(p, 3)


def _strictest(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def recommend(results: pathlib.Path) -> dict[str, Any]:
    """Thresholds and their evidence from every dedup_<model>.json present."""
    cfg = MemoryConfig()
    doc: dict[str, Any] = {'models': {}, 'evidence': {}}
    jaccard_votes = []
    for _, data in dedup_results(results):
        model, sets = data['model'], data['sets']
        cos_sets = EN_SETS + (ZH_SETS if 'multilingual' in model else ())
        evidence = {}
        for name, r in sets.items():
            pr = r['pr']
            evidence[name] = {
                'tuned_jaccard': r.get('tuned', {}).get('dedup_jaccard_threshold'),
                'tuned_cosine': r.get('tuned', {}).get('dedup_cosine_threshold'),
                'consolidation_jaccard_p90': curve_threshold(pr['jaccard_guarded'],
                                                             CONSOLIDATION_PRECISION),
                'consolidation_cosine_p90': curve_threshold(pr['cosine_guarded'],
                                                            CONSOLIDATION_PRECISION),
                'numeric_cosine_p90': curve_threshold(pr['cosine_same_numbers'],
                                                      CONSOLIDATION_PRECISION),
                'precision_at_shipped_consolidation_jaccard': curve_precision(
                    pr['jaccard_guarded'], cfg.consolidation_threshold),
                'precision_at_shipped_consolidation_cosine': curve_precision(
                    pr['cosine_guarded'], cfg.consolidation_cosine_threshold),
                'precision_at_shipped_numeric_cosine': curve_precision(
                    pr['cosine_same_numbers'], cfg.consolidation_numeric_cosine_threshold)}
        doc['evidence'][model] = evidence
        jaccard_votes += [evidence[n]['tuned_jaccard'] for n in EN_SETS if n in evidence]
        doc['models'][model] = {
            'dedup_cosine_threshold': _strictest(
                [evidence[n]['tuned_cosine'] for n in cos_sets if n in evidence]),
            'consolidation_cosine_threshold': _strictest(
                [evidence[n]['consolidation_cosine_p90'] for n in EN_SETS if n in evidence]),
            'consolidation_numeric_cosine_threshold': _strictest(
                [evidence[n]['numeric_cosine_p90'] for n in EN_SETS if n in evidence])}
    doc['dedup_jaccard_threshold'] = _strictest(jaccard_votes)
    doc['shipped'] = {k: getattr(cfg, k) for k in (
        'dedup_jaccard_threshold', 'dedup_cosine_threshold', 'consolidation_threshold',
        'consolidation_cosine_threshold', 'consolidation_numeric_cosine_threshold')}
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """Print and write the recommendations."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    doc = recommend(args.results)
    rows = [['dedup_jaccard_threshold (all models)', doc['shipped']['dedup_jaccard_threshold'],
             doc['dedup_jaccard_threshold']]]
    for model, values in doc['models'].items():
        rows += [[f'{k} ({model})', doc['shipped'].get(k), v] for k, v in values.items()]
    print_table('recommended thresholds (dedup: P>=0.95 on tune splits; consolidation: '
                'P>=0.90)', ['setting', 'shipped', 'recommended'], rows)
    print(f'\nwrote {write_result("thresholds", doc, args.results)}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
