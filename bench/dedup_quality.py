"""
How well the write-time dedup layers tell "same fact" from "different fact" on labelled pairs.

For each pair: the Jaccard layer's similarity (``text.jaccard_tokens``), the cosine layer's (the
configured embedder; only where the model can read both texts, as in the engine), their guarded
forms (keys ``*_guarded``: pairs that ``judgment.difference`` keeps apart — a number, a
negation, an opposite word, an object, an attribute, a place, swapped roles — score 0 / -1, as
the engine does), and the engine's full "is duplicate?" decision (exact → Jaccard → cosine,
guarded, thresholds from ``MemoryConfig`` defaults). Printed per set: ROC-AUC per layer,
precision / recall / F1 at the configured thresholds, and the threshold that reaches precision
>= 0.95, picked on the tune split (train / dev / valid) and scored on the test split.

Alternatives for the guard are scored side by side at the configured thresholds: none
(similarity only), the number/negation/opposite-word check alone (the guard before issue 12),
the content-word alignment rules (shipped), the rules plus the embedder on the differing
spans, and, where ``requirements/bench-pos.txt`` is installed, the rules plus a part-of-speech
tagger that lets replaced verbs and adverbs through (``pos_guard.py``; the JSON then also counts
the paraphrases kept apart by a replaced word, by what the replaced words are).
``robot_pairs`` (human paraphrases of one robot task, minimal edits that change the goal, other
tasks of the scene) also gets accuracy per kind of pair.

    python bench/dedup_quality.py                      # all default sets from --eval
    python bench/dedup_quality.py --pairs my.csv --split test --model use-multilingual-int8
"""

from __future__ import annotations

import argparse
import csv
import math
import pathlib
import random
from typing import Any, Sequence

from common import add_run_arguments, DEFAULT_EVAL, print_table, quiet_logs, write_result
import metrics
import numpy as np
from pos_guard import load_tagger, PosJudge
from precomputed import embed_cached
from robotmem_ros.config import MemoryConfig
from robotmem_ros.embedding import load_embedder
from robotmem_ros.engine import judgment
from robotmem_ros.engine import text as textmod

# name: (file under --eval, dataset column filter, test split, tune split)
SETS = {
    'mrpc': ('mrpc/mrpc.csv', '', 'test', 'train'),
    'stsb_en': ('stsb_en/stsb_en.csv', '', 'test', 'dev'),
    'lcqmc': ('zh_pairs/zh_pairs.csv', 'LCQMC', 'test', 'valid'),
    'bq': ('zh_pairs/zh_pairs.csv', 'BQ', 'test', 'valid'),
    'atec': ('zh_pairs/zh_pairs.csv', 'ATEC', 'test', 'valid'),
    'pawsx_zh': ('zh_pairs/zh_pairs.csv', 'PAWSX', 'test', 'valid'),
    'robot_pairs': ('robot_pairs/robot_pairs_dev.csv', '', '', ''),
}
GUARDS = ('none', 'conflict_only', 'rules', 'rules_span')
# The score() array each guard alternative keeps pairs apart with ('rules_pos': pos_guard.py).
KEPT_APART = {'conflict_only': 'conflict', 'rules': 'distinct', 'rules_span': 'distinct_span',
              'rules_pos': 'distinct_pos'}
SCORE_DUP, SCORE_NOT = 4.0, 2.0
GRID = [round(x, 2) for x in np.linspace(0.0, 1.0, 101)]
PRECISION_TARGET = 0.95


def load_pairs(path: pathlib.Path, split: str, dataset: str = '', limit: int = 0,
               seed: int = 0) -> tuple[list[tuple[str, str]], np.ndarray, int]:
    """Pairs and 0/1 labels of one split; 0-5 scores become >= 4 dup, <= 2 not, rest dropped."""
    with open(path, newline='', encoding='utf-8') as fh:
        rows = [r for r in csv.DictReader(fh)
                if (not split or r.get('split', split) == split)
                and (not dataset or r.get('dataset', dataset) == dataset)]
    key = 'score' if rows and 'score' in rows[0] else 'label'
    graded = key == 'score' or any(float(r[key]) > 1 for r in rows)
    pairs, labels, kinds, dropped = [], [], [], 0
    for row in rows:
        value = float(row[key])
        if graded and SCORE_NOT < value < SCORE_DUP:
            dropped += 1
            continue
        pairs.append((row.get('sentence1', row.get('text_a')),
                      row.get('sentence2', row.get('text_b'))))
        labels.append(int(value >= SCORE_DUP) if graded else int(value))
        kinds.append(row.get('kind', ''))
    if limit and len(pairs) > limit:
        keep = sorted(random.Random(seed).sample(range(len(pairs)), limit))
        pairs, labels = [pairs[i] for i in keep], [labels[i] for i in keep]
        kinds = [kinds[i] for i in keep]
    return pairs, np.array(labels, dtype=np.int64), dropped, kinds


class PairScorer:
    """Similarities of pairs as each dedup layer computes them."""

    def __init__(self, embedder: Any, config: MemoryConfig, use_cache: bool = True,
                 pos: PosJudge | None = None) -> None:
        self.embedder = embedder
        self.config = config
        self.use_cache = use_cache
        self.pos = pos

    def score(self, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
        """Arrays over the pairs: jaccard, cosine (nan when unreadable), guards, exact."""
        jac = np.array([textmod.jaccard(textmod.jaccard_tokens(a), textmod.jaccard_tokens(b))
                        for a, b in pairs])
        feats = [(judgment.features(a), judgment.features(b)) for a, b in pairs]
        conflict = np.array([bool(judgment.conflict(fa, fb)) for fa, fb in feats])
        distinct = np.array([bool(judgment.difference(fa, fb)) for fa, fb in feats])
        exact = np.array([textmod.content_hash(a) == textmod.content_hash(b) for a, b in pairs])
        measures = np.array([bool(fa.measures) and fa.measures == fb.measures
                             for fa, fb in feats])
        cos = np.full(len(pairs), np.nan)
        span = distinct.copy()
        if self.embedder is not None:
            texts = sorted({t for pair in pairs for t in pair})
            readable = [t for t in texts
                        if self.embedder.readability(t) >= self.config.min_readability]
            vectors = dict(zip(readable, embed_cached(self.embedder, readable,
                                                      use_cache=self.use_cache)))
            for i, (a, b) in enumerate(pairs):
                if a in vectors and b in vectors:
                    cos[i] = float(np.dot(vectors[a], vectors[b]))
            span = np.array([bool(judgment.difference(fa, fb, self.span_similarity))
                             for fa, fb in feats])
        out = {'jaccard': jac, 'cosine': cos, 'conflict': conflict, 'distinct': distinct,
               'distinct_span': span, 'exact': exact,
               'same_numbers': measures & ~conflict & ~distinct}
        if self.pos is not None:
            self.pos.tag(t for pair in pairs for t in pair)
            out['distinct_pos'] = np.array([
                bool(judgment.difference(fa, fb, self.pos.span_judge(a, b)))
                for (fa, fb), (a, b) in zip(feats, pairs)])
        return out

    def span_similarity(self, a: str, b: str) -> float:
        """Cosine of two differing spans (the 'rules_span' alternative)."""
        vectors = self.embedder.embed([a, b])
        return float(np.dot(vectors[0], vectors[1]))


def layer_scores(s: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(scores, mask of pairs the layer applies to) per layer, raw and number-aware."""
    readable = ~np.isnan(s['cosine'])
    everyone = np.ones(len(s['jaccard']), dtype=bool)
    return {'jaccard': (s['jaccard'], everyone),
            'jaccard_guarded': (np.where(s['distinct'], 0.0, s['jaccard']), everyone),
            'cosine': (np.nan_to_num(s['cosine'], nan=-1.0), readable),
            'cosine_guarded': (np.where(s['distinct'], -1.0,
                                        np.nan_to_num(s['cosine'], nan=-1.0)), readable),
            # consolidation's relaxed rule applies to pairs that mention the same numbers
            'cosine_same_numbers': (np.nan_to_num(s['cosine'], nan=-1.0),
                                    readable & s['same_numbers'])}


def decide(s: dict[str, np.ndarray], jaccard_threshold: float,
           cosine_threshold: float | None, guard: str = 'rules') -> dict[str, np.ndarray]:
    """Return the engine's decisions per layer and for the pipeline exact → Jaccard → cosine."""
    ok = ~s[KEPT_APART[guard]] if guard != 'none' else np.ones_like(s['distinct'])
    jac = ok & (s['jaccard'] > jaccard_threshold)
    readable = ~np.isnan(s['cosine'])
    cos = (ok & readable & (np.nan_to_num(s['cosine'], nan=-1.0) >= cosine_threshold)
           if cosine_threshold is not None else np.zeros_like(jac))
    return {'jaccard': jac, 'cosine': cos, 'full': s['exact'] | jac | cos}


def engine_jaccard_value(threshold_ge: float | None) -> float | None:
    """Config value for the engine's strict ``jaccard > value`` equal to ``>= threshold_ge``."""
    if threshold_ge is None:
        return None
    return math.floor((threshold_ge - 1e-9) * 100) / 100


def per_kind(full: np.ndarray, labels: np.ndarray, kinds: Sequence[str]) -> dict[str, Any]:
    """Accuracy of the full decision per kind of pair (robot_pairs: paraphrase, edit, ...)."""
    out = {}
    for kind in sorted(set(kinds)):
        mask = np.array([k == kind for k in kinds])
        correct = full[mask] == labels[mask].astype(bool)
        out[kind] = {'pairs': int(mask.sum()), 'accuracy': float(correct.mean()),
                     'judged_duplicate': int(full[mask].sum())}
    return out


def substitutions_by_pos(pos: PosJudge, pairs: Sequence[tuple[str, str]],
                         labels: np.ndarray) -> dict[str, int]:
    """Duplicates the shipped rules keep apart for a replaced word, by what that word is."""
    counts: dict[str, int] = {}
    for (a, b), label in zip(pairs, labels):
        if label and judgment.difference(a, b).startswith('differs in'):
            kind = pos.substitution_class(a, b)
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def print_kept_apart(name: str, pairs: Sequence[tuple[str, str]], labels: np.ndarray,
                     count: int, seed: int) -> None:
    """Print a seeded sample of labelled duplicates the rules keep apart, with the reason."""
    kept = [(a, b, why) for (a, b), label in zip(pairs, labels)
            if label and (why := judgment.difference(a, b))]
    random.Random(seed).shuffle(kept)
    print(f'\n{name}: {min(count, len(kept))} of the {len(kept)} duplicates kept apart '
          f'(seed {seed})')
    for a, b, why in kept[:count]:
        print(f'  {a!r}\n  {b!r}\n    -> {why}')


def evaluate_set(name: str, scorer: PairScorer, test: tuple, tune: tuple | None
                 ) -> dict[str, Any]:
    """All metrics of one pair set."""
    cfg = scorer.config
    pairs, labels, dropped, kinds = test
    s = scorer.score(pairs)
    out: dict[str, Any] = {'pairs': len(pairs), 'duplicates': int(labels.sum()),
                           'dropped_middle_scores': dropped,
                           'readable_share': float((~np.isnan(s['cosine'])).mean()),
                           'conflicts': int(s['conflict'].sum()),
                           'kept_apart_by_guard': int(s['distinct'].sum()),
                           'same_numbers': int(s['same_numbers'].sum()), 'layers': {},
                           'hist': {}, 'pr': {}}
    tuned: dict[str, float | None] = {}
    if tune is not None:
        t_pairs, t_labels = tune[0], tune[1]
        t_layers = layer_scores(scorer.score(t_pairs))
        for layer in ('jaccard_guarded', 'cosine_guarded'):
            scores, mask = t_layers[layer]
            tuned[layer] = metrics.threshold_for_precision(scores[mask], t_labels[mask],
                                                           PRECISION_TARGET)
        out['tune_pairs'] = len(t_pairs)
    for layer, (scores, mask) in layer_scores(s).items():
        entry: dict[str, Any] = {'auc': metrics.roc_auc(scores[mask], labels[mask]),
                                 'coverage': float(mask.mean())}
        entry['threshold_p95_on_test'] = metrics.threshold_for_precision(
            scores[mask], labels[mask], PRECISION_TARGET)
        out['layers'][layer] = entry
        if layer.endswith(('guarded', 'same_numbers')):
            out['pr'][layer] = metrics.pr_curve(scores[mask], labels[mask], GRID)
    for layer in ('jaccard', 'cosine'):
        scores, mask = layer_scores(s)[layer]
        out['hist'][layer] = metrics.histogram(scores[mask], labels[mask])
    at_config = decide(s, cfg.dedup_jaccard_threshold, cfg.dedup_cosine_threshold)
    out['config'] = {'dedup_jaccard_threshold': cfg.dedup_jaccard_threshold,
                     'dedup_cosine_threshold': cfg.dedup_cosine_threshold}
    out['at_config'] = {k: metrics.prf(v, labels) for k, v in at_config.items()}
    guards = GUARDS + (('rules_pos',) if 'distinct_pos' in s else ())
    out['guards'] = {g: metrics.prf(decide(s, cfg.dedup_jaccard_threshold,
                                           cfg.dedup_cosine_threshold, g)['full'], labels)
                     for g in guards}
    if scorer.pos is not None:
        out['substitutions_by_pos'] = substitutions_by_pos(scorer.pos, pairs, labels)
    if any(kinds):
        out['per_kind'] = per_kind(at_config['full'], labels, kinds)
    if tune is not None:
        jac_value = engine_jaccard_value(tuned['jaccard_guarded'])
        cos_value = tuned['cosine_guarded']
        out['tuned'] = {'dedup_jaccard_threshold': jac_value, 'dedup_cosine_threshold': cos_value,
                        'precision_target': PRECISION_TARGET}
        at_tuned = decide(s, jac_value if jac_value is not None else 1.0, cos_value)
        out['at_tuned'] = {k: metrics.prf(v, labels) for k, v in at_tuned.items()}
    return out


def report(model: str, sets: dict[str, Any]) -> None:
    """Print the tables."""
    guards = list(next(iter(sets.values()))['guards'])
    print_table('guard alternatives: full pipeline at the configured thresholds (P / R)',
                ['set'] + [f'{g} P' for g in guards] + [f'{g} R' for g in guards],
                [[n] + [r['guards'][g]['precision'] for g in guards]
                 + [r['guards'][g]['recall'] for g in guards] for n, r in sets.items()])
    if any('substitutions_by_pos' in r for r in sets.values()):
        print_table('duplicates kept apart for a replaced word, by its part of speech',
                    ['set', 'replaced words', 'pairs'],
                    [[n, k, v] for n, r in sets.items()
                     for k, v in sorted(r.get('substitutions_by_pos', {}).items())])
    kinds = [(n, k, v) for n, r in sets.items() for k, v in r.get('per_kind', {}).items()]
    if kinds:
        print_table('accuracy per kind of pair (full pipeline, configured thresholds)',
                    ['set', 'kind', 'pairs', 'accuracy', 'judged duplicate'],
                    [[n, k, v['pairs'], v['accuracy'], v['judged_duplicate']]
                     for n, k, v in kinds])
    print_table(f'dedup quality ({model}): ROC-AUC per layer (cosine only over readable pairs)',
                ['set', 'pairs', 'dup', 'jaccard', 'jac+num', 'cosine', 'cos+num', 'readable'],
                [[n, r['pairs'], r['duplicates'], r['layers']['jaccard']['auc'],
                  r['layers']['jaccard_guarded']['auc'], r['layers']['cosine']['auc'],
                  r['layers']['cosine_guarded']['auc'], r['readable_share']]
                 for n, r in sets.items()])
    rows = []
    for n, r in sets.items():
        for layer in ('jaccard', 'cosine', 'full'):
            c = r['at_config'][layer]
            t = r.get('at_tuned', {}).get(layer, {})
            rows.append([n, layer, c['precision'], c['recall'], c['f1'],
                         t.get('precision', float('nan')), t.get('recall', float('nan')),
                         t.get('f1', float('nan'))])
    print_table('precision / recall / F1 on test: configured thresholds | tuned (P>=0.95 on '
                'tune split)', ['set', 'layer', 'P', 'R', 'F1', 'P tuned', 'R tuned',
                                'F1 tuned'], rows)
    print_table('thresholds reaching precision >= 0.95',
                ['set', 'jaccard (tune, engine >)', 'cosine (tune, >=)', 'jac+num on test',
                 'cos+num on test'],
                [[n, r.get('tuned', {}).get('dedup_jaccard_threshold'),
                  r.get('tuned', {}).get('dedup_cosine_threshold'),
                  r['layers']['jaccard_guarded']['threshold_p95_on_test'],
                  r['layers']['cosine_guarded']['threshold_p95_on_test']]
                 for n, r in sets.items()])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--pairs', type=pathlib.Path,
                        help='a pairs CSV (sentence1, sentence2, label or score); default: '
                             'the standard sets under --eval')
    parser.add_argument('--split', default='test', help='split scored with --pairs')
    parser.add_argument('--tune-split', default='', help='split to pick thresholds on')
    parser.add_argument('--dataset', default='', help='dataset column filter for --pairs')
    parser.add_argument('--sets', default=','.join(SETS), help='standard sets to run')
    parser.add_argument('--eval', type=pathlib.Path, default=DEFAULT_EVAL)
    parser.add_argument('--model', default=MemoryConfig().embed_model,
                        help='bundled model for the cosine layer (minilm-l6-dq, minilm-l6-int8, '
                             'use-multilingual-int8) or "none"')
    parser.add_argument('--limit', type=int, default=0, help='subsample pairs per split')
    parser.add_argument('--kept-apart-sample', type=int, default=0, metavar='N',
                        help='print N seeded duplicates per set that the rules keep apart, '
                             'and why (to read what the guard refuses)')
    add_run_arguments(parser, '', 'result name (default dedup_<model>)')
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Score every requested pair set and write the JSON."""
    args = parse_args(argv)
    quiet_logs()
    default = MemoryConfig()
    config = default.replace(embed_model=args.model if args.model != 'none' else
                             default.embed_model,
                             embed_backend='none' if args.model == 'none' else 'onnx')
    embedder = load_embedder(config) if args.model != 'none' else None
    nlp, tagger = load_tagger()
    print(f'part-of-speech alternative: {tagger if nlp is not None else "skipped, " + tagger}')
    scorer = PairScorer(embedder, config, use_cache=not args.no_cache,
                        pos=PosJudge(nlp) if nlp is not None else None)
    if args.pairs:
        jobs = {args.pairs.stem: (args.pairs, args.dataset, args.split, args.tune_split)}
    else:
        jobs = {n: (args.eval / SETS[n][0], *SETS[n][1:]) for n in args.sets.split(',')}
    results = {}
    for name, (path, dataset, split, tune_split) in jobs.items():
        test = load_pairs(path, split, dataset, args.limit, args.seed)
        tune = load_pairs(path, tune_split, dataset, args.limit, args.seed) \
            if tune_split else None
        results[name] = evaluate_set(name, scorer, test, tune)
        print(f'{name}: {len(test[0])} pairs scored', flush=True)
        if args.kept_apart_sample:
            print_kept_apart(name, test[0], test[1], args.kept_apart_sample, args.seed)
    report(args.model, results)
    name = args.name or f'dedup_{args.model}'
    doc = {'model': args.model, 'eval_dir': str(args.eval), 'limit': args.limit,
           'precision_target': PRECISION_TARGET, 'pos_tagger': tagger, 'sets': results}
    print(f'\nwrote {write_result(name, doc, args.results)}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
