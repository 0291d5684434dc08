"""
PNG plots from the result JSON files (matplotlib, headless Agg backend).

Renders whatever results exist in --results: latency vs N (engine.json), similarity histograms
and precision-recall curves per dedup layer (dedup_<model>.json), recall quality bars
(recall_<model>.json). ``python bench/plots.py [--results DIR]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any, Sequence

from common import dedup_results, RESULTS_DIR
import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402,I100 - the backend must be chosen first

LAYER_LABEL = {'jaccard': 'Jaccard', 'cosine': 'cosine',
               'jaccard_guarded': 'Jaccard (guarded)',
               'cosine_guarded': 'cosine (guarded)',
               'cosine_same_numbers': 'cosine, same numbers only'}
CONFIG_KEY = {'jaccard': 'dedup_jaccard_threshold', 'cosine': 'dedup_cosine_threshold'}


def _load(path: pathlib.Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _machine(doc: dict[str, Any]) -> str:
    m = doc.get('machine', {})
    return f'{m.get("cpu_model", "?")}, {m.get("cores", "?")} cores'


def latency_plot(doc: dict[str, Any], out: pathlib.Path) -> pathlib.Path:
    """Learn and recall p50 (solid) / p95 (dashed) against N, log-log."""
    rows = doc['sizes']
    ns = [r['n'] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    series = [(left, 'learn_real', 'learn, real embedder'),
              (left, 'learn_precomputed', 'learn, precomputed vectors')]
    series += [(right, k, k[7:].replace('_', ' ')) for k in rows[0]
               if k.startswith('recall_')]
    for ax, key, label in series:
        line, = ax.plot(ns, [r[key]['p50_ms'] for r in rows], marker='o', label=label)
        ax.plot(ns, [r[key]['p95_ms'] for r in rows], ls='--', color=line.get_color(),
                alpha=0.6)
    for ax, title in ((left, 'learn'), (right, 'recall (n=10)')):
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xlabel('memories in the store (N)')
        ax.set_ylabel('latency ms (solid p50, dashed p95)')
        ax.set_title(title)
        ax.grid(True, which='both', alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f'robotmem engine latency vs N — {_machine(doc)}', fontsize=10)
    fig.tight_layout()
    return _save(fig, out)


def dedup_hist_plot(doc: dict[str, Any], out: pathlib.Path,
                    chosen: dict[str, float]) -> pathlib.Path:
    """Similarity histograms, duplicate vs not, per set and layer, thresholds marked."""
    sets = doc['sets']
    fig, axes = plt.subplots(len(sets), 2, figsize=(10, 2.2 * len(sets)), squeeze=False)
    for row, (name, result) in zip(axes, sets.items()):
        for ax, layer in zip(row, ('jaccard', 'cosine')):
            hist = result['hist'][layer]
            edges = hist['edges']
            width = edges[1] - edges[0]
            total_dup = max(sum(hist['duplicate']), 1)
            total_not = max(sum(hist['not_duplicate']), 1)
            ax.bar(edges[:-1], [c / total_not for c in hist['not_duplicate']], width,
                   align='edge', alpha=0.5, label='not duplicate')
            ax.bar(edges[:-1], [c / total_dup for c in hist['duplicate']], width,
                   align='edge', alpha=0.5, label='duplicate')
            ax.axvline(result['config'][CONFIG_KEY[layer]], color='k', ls=':',
                       label='shipped default')
            if chosen.get(layer) is not None:  # None: no threshold reached the target
                ax.axvline(chosen[layer], color='r', label='recommended')
            ax.set_title(f'{name}: {LAYER_LABEL[layer]}', fontsize=9)
            ax.tick_params(labelsize=7)
        row[0].legend(fontsize=6)
    fig.suptitle(f'dedup similarity, model {doc["model"]} (share of pairs per bin)',
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, out)


def dedup_pr_plot(doc: dict[str, Any], out: pathlib.Path) -> pathlib.Path:
    """Precision-recall curves of the guarded layers (judgment.difference) per set."""
    sets = doc['sets']
    cols = 3
    rows = (len(sets) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(12, 3.6 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (name, result) in zip(flat, sets.items()):
        for layer, curve in result['pr'].items():
            points = [(r, p) for r, p in zip(curve['recall'], curve['precision']) if p == p]
            if len(points) > 1 and result['layers'][layer]['coverage'] > 0:
                ax.plot([r for r, _ in points], [p for _, p in points],
                        label=f'{LAYER_LABEL[layer]} '
                              f'(AUC {result["layers"][layer]["auc"]:.2f})')
        for layer, marker in (('jaccard', 'o'), ('cosine', 's')):
            point = result['at_config'][layer]
            if point['precision'] == point['precision'] and point['tp']:
                ax.plot(point['recall'], point['precision'], marker, color='k', ms=5)
        full = result['at_config']['full']
        if full['tp']:
            ax.plot(full['recall'], full['precision'], '*', color='r', ms=10,
                    label='full decision @ defaults')
        ax.axhline(0.95, color='grey', ls=':', lw=1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel('recall', fontsize=8)
        ax.set_ylabel('precision', fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=6, loc='lower left')
    for ax in flat[len(sets):]:
        ax.axis('off')
    fig.suptitle(f'dedup precision-recall per layer, model {doc["model"]} '
                 f'(black marks: layer at default threshold)', fontsize=10)
    fig.tight_layout()
    return _save(fig, out)


def recall_plot(doc: dict[str, Any], out: pathlib.Path) -> pathlib.Path:
    """R@10 and MRR@10 per set and mode."""
    sets = doc['sets']
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 3.8), squeeze=False)
    for ax, (name, result) in zip(axes[0], sets.items()):
        modes = list(result['modes'])
        for i, metric in enumerate(('R@1', 'R@10', 'MRR@10')):
            values = [result['modes'][m]['overall'][metric] for m in modes]
            ax.bar([x + i * 0.27 for x in range(len(modes))], values, 0.27, label=metric)
        ax.set_xticks([x + 0.27 for x in range(len(modes))], modes, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f'{name} ({result["queries"]} queries)', fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f'recall quality, model {doc["model"]}, decider {doc.get("decider", "?")}',
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, out)


def _save(fig: Any, out: pathlib.Path) -> pathlib.Path:
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def chosen_thresholds(results: pathlib.Path, model: str) -> dict[str, float]:
    """Recommended thresholds written by run_all (thresholds.json), if present."""
    doc = _load(results / 'thresholds.json') or {}
    model_doc = doc.get('models', {}).get(model, {})
    chosen = {}
    if 'dedup_jaccard_threshold' in doc:
        chosen['jaccard'] = doc['dedup_jaccard_threshold']
    if 'dedup_cosine_threshold' in model_doc:
        chosen['cosine'] = model_doc['dedup_cosine_threshold']
    return chosen


def render(results: pathlib.Path) -> list[pathlib.Path]:
    """Render every plot whose input exists; return the written files."""
    written = []
    engine = _load(results / 'engine.json')
    if engine:
        written.append(latency_plot(engine, results / 'latency_vs_n.png'))
    for path, doc in dedup_results(results):
        written.append(dedup_hist_plot(doc, results / f'{path.stem}_hist.png',
                                       chosen_thresholds(results, doc['model'])))
        written.append(dedup_pr_plot(doc, results / f'{path.stem}_pr.png'))
    for path in sorted(results.glob('recall_*.json')):
        written.append(recall_plot(json.loads(path.read_text()),
                                   results / f'{path.stem}.png'))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Render the plots."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    for path in render(args.results):
        print(f'wrote {path}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
