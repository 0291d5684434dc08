"""
Embedding model quality on labelled public data: pair AUC, dedup threshold, retrieval.

For each model: cosine ROC-AUC on the test splits (MRPC, STS-B en with score >= 4 as duplicate
and <= 2 as not, LCQMC / BQ / ATEC / PAWS-X zh); the lowest cosine whose precision is >= 0.95 on
the train/dev splits (the model's ``dedup_cosine_threshold``); pure vector retrieval R@10 and
MRR@10 on Cranfield. Prints a table and writes bench/results/model_compare.json.

    python bench/model_compare.py --eval /work/shared/eval [--limit 500] [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import sys
import time
from typing import Iterable

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'robotmem_ros'))

from robotmem_ros.config import MemoryConfig  # noqa: E402
from robotmem_ros.embedding import Embedder, load_embedder  # noqa: E402

BUNDLED = ['minilm-l6-int8', 'minilm-l6-dq', 'use-multilingual-int8']
ZH_SETS = ['LCQMC', 'BQ', 'ATEC', 'PAWSX']
TARGET_PRECISION = 0.95

Pairs = list[tuple[str, str, int]]


def _rows(path: pathlib.Path) -> Iterable[dict]:
    with path.open(newline='', encoding='utf-8') as f:
        yield from csv.DictReader(f)


def _subsample(pairs: Pairs, limit: int, seed: int = 7) -> Pairs:
    if limit <= 0 or len(pairs) <= limit:
        return pairs
    keep = np.random.default_rng(seed).choice(len(pairs), size=limit, replace=False)
    return [pairs[i] for i in sorted(keep)]


def load_pair_sets(eval_dir: pathlib.Path, limit: int) -> dict[str, dict[str, Pairs]]:
    """Return {'test': {name: pairs}, 'tune_en': ..., 'tune_zh': ...} of (s1, s2, label)."""
    sets: dict[str, dict[str, Pairs]] = {'test': {}, 'tune_en': {}, 'tune_zh': {}}

    def mrpc_text(s: str) -> str:
        return s.replace(' <QUOTE> ', ' "').replace('<QUOTE>', '"')

    mrpc = list(_rows(eval_dir / 'mrpc/mrpc.csv'))
    for split, group in (('test', 'test'), ('train', 'tune_en')):
        sets[group][f'MRPC {split}'] = [
            (mrpc_text(r['sentence1']), mrpc_text(r['sentence2']), int(r['label']))
            for r in mrpc if r['split'] == split]
    stsb = [r for r in _rows(eval_dir / 'stsb_en/stsb_en.csv')
            if float(r['score']) >= 4.0 or float(r['score']) <= 2.0]
    for name, group, in_split in (('STS-B en test', 'test', lambda s: s == 'test'),
                                  ('STS-B en train+dev', 'tune_en', lambda s: s != 'test')):
        sets[group][name] = [(r['sentence1'], r['sentence2'], int(float(r['score']) >= 4.0))
                             for r in stsb if in_split(r['split'])]
    zh = list(_rows(eval_dir / 'zh_pairs/zh_pairs.csv'))
    for name in ZH_SETS:
        for split, group in (('test', 'test'), ('valid', 'tune_zh')):
            sets[group][f'{name} {split}'] = [
                (r['sentence1'], r['sentence2'], int(r['label']))
                for r in zh if r['dataset'] == name and r['split'] == split]
    return {g: {k: _subsample(v, limit) for k, v in d.items()} for g, d in sets.items()}


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann-Whitney AUC with average ranks for ties."""
    order = np.argsort(scores, kind='mergesort')
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    ranks = (sums / counts)[inverse]
    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def precision_threshold(scores: np.ndarray, labels: np.ndarray,
                        target: float = TARGET_PRECISION) -> tuple[float | None, float]:
    """Lowest cosine whose 'score >= t' set has precision >= target: (threshold, recall)."""
    order = np.argsort(-scores, kind='mergesort')
    hits = np.cumsum(labels[order])
    precision = hits / np.arange(1, len(order) + 1)
    # Ignore the first few cuts: a precision over a handful of pairs says nothing.
    ok = np.nonzero((precision >= target) & (np.arange(len(order)) >= 19))[0]
    if len(ok) == 0:
        return None, 0.0
    cut = ok[-1]
    return float(scores[order][cut]), float(hits[cut] / max(labels.sum(), 1))


def pair_cosines(embedder: Embedder, pairs: Pairs) -> np.ndarray:
    """Cosine of every pair, each distinct sentence embedded once."""
    texts = sorted({t for a, b, _ in pairs for t in (a, b)})
    vectors = embedder.embed(texts)
    index = {t: i for i, t in enumerate(texts)}
    left = vectors[[index[a] for a, _, _ in pairs]]
    right = vectors[[index[b] for _, b, _ in pairs]]
    return np.sum(left * right, axis=1)


def cranfield(embedder: Embedder, eval_dir: pathlib.Path) -> dict[str, float]:
    """Pure vector search over all Cranfield docs: mean R@10 and MRR@10 over judged queries."""
    docs = [json.loads(line) for line in (eval_dir / 'cranfield/docs.jsonl').open()]
    queries = [json.loads(line) for line in (eval_dir / 'cranfield/queries.jsonl').open()]
    relevant: dict[str, set[str]] = {}
    for r in _rows(eval_dir / 'cranfield/qrels.csv'):
        relevant.setdefault(r['qid'], set()).add(r['doc_id'])
    doc_ids = np.array([d['doc_id'] for d in docs])
    doc_vectors = embedder.embed([d['text'] for d in docs])
    judged = [q for q in queries if q['qid'] in relevant]
    query_vectors = embedder.embed([q['text'] for q in judged])
    top = np.argsort(-(query_vectors @ doc_vectors.T), axis=1)[:, :10]
    recalls, rrs = [], []
    for q, row in zip(judged, top):
        found = [doc_id in relevant[q['qid']] for doc_id in doc_ids[row]]
        recalls.append(sum(found) / len(relevant[q['qid']]))
        rrs.append(1.0 / (found.index(True) + 1) if any(found) else 0.0)
    return {'R@10': float(np.mean(recalls)), 'MRR@10': float(np.mean(rrs))}


def evaluate(embedder: Embedder, sets: dict[str, dict[str, Pairs]],
             eval_dir: pathlib.Path, min_readability: float) -> dict:
    """All measures for one model."""
    result: dict = {'model': embedder.model_id, 'dim': embedder.dim, 'auc': {},
                    'threshold': {}}
    for name, pairs in sets['test'].items():
        labels = np.array([label for _, _, label in pairs])
        result['auc'][name] = roc_auc(pair_cosines(embedder, pairs), labels)
    for group in ('tune_en', 'tune_zh'):
        scored = {name: (pair_cosines(embedder, pairs),
                         np.array([label for _, _, label in pairs]))
                  for name, pairs in sets[group].items()}
        scored[f'{group[-2:]} pooled'] = tuple(
            np.concatenate(parts) for parts in zip(*scored.values()))
        for name, (cosines, labels) in scored.items():
            threshold, recall = precision_threshold(cosines, labels)
            result['threshold'][name] = {'cosine': threshold, 'recall': recall}
    zh_texts = [a for subset in sets['test'].values() for a, _, _ in subset
                if any('\u4e00' <= ch <= '\u9fff' for ch in a)]
    result['zh_readable_share'] = float(np.mean(
        [embedder.readability(t) >= min_readability for t in zh_texts]))
    result.update(cranfield(embedder, eval_dir))
    return result


def print_table(results: list[dict]) -> None:
    """One column per model."""
    names = [r['model'] for r in results]
    width = max(24, *(len(n) + 2 for n in names))
    print(f'{"measure":<34}' + ''.join(f'{n:>{width}}' for n in names))

    def line(label: str, values: list) -> None:
        cells = ''.join(f'{v:>{width}.3f}' if isinstance(v, float) else f'{str(v):>{width}}'
                        for v in values)
        print(f'{label:<34}{cells}')

    for name in results[0]['auc']:
        line(f'AUC {name}', [r['auc'][name] for r in results])
    for name in results[0]['threshold']:
        line(f'cos@P>={TARGET_PRECISION} {name}',
             [r['threshold'][name]['cosine'] or 'n/a' for r in results])
        line('  recall at it', [r['threshold'][name]['recall'] for r in results])
    line('zh texts readable', [r['zh_readable_share'] for r in results])
    line('Cranfield R@10', [r['R@10'] for r in results])
    line('Cranfield MRR@10', [r['MRR@10'] for r in results])
    line('seconds', [r['seconds'] for r in results])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--eval', default=str(ROOT / '../shared/eval'),
                        help='labelled eval data directory (read-only)')
    parser.add_argument('--limit', type=int, default=500,
                        help='pairs sampled per split (0 = all)')
    parser.add_argument('--models', nargs='*', default=BUNDLED)
    parser.add_argument('--model-dir', nargs='*', default=[], help='extra model_dir models')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--out', default=str(ROOT / 'bench/results/model_compare.json'))
    args = parser.parse_args()
    eval_dir = pathlib.Path(args.eval).resolve()
    sets = load_pair_sets(eval_dir, args.limit)
    base = MemoryConfig(embed_threads=args.threads, query_cache_size=0)
    configs = [base.replace(embed_model=m) for m in args.models] + \
        [base.replace(model_dir=d) for d in args.model_dir]
    results = []
    for config in configs:
        started = time.perf_counter()
        embedder = load_embedder(config)
        result = evaluate(embedder, sets, eval_dir, config.min_readability)
        result['seconds'] = time.perf_counter() - started
        results.append(result)
        print(f'{result["model"]}: done in {result["seconds"]:.0f} s', file=sys.stderr)
    print_table(results)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({'limit': args.limit, 'target_precision': TARGET_PRECISION,
                               'results': results}, indent=2))


if __name__ == '__main__':
    main()
