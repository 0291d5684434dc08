"""
Retrieval quality of recall on labelled collections: R@1/5/10 and MRR@10 per channel mix.

Documents are stored with ``engine.learn`` with default parameters (dedup and the rule decider
on, as on a robot; the node's Learn service calls the same method; vectors are batch-computed
beforehand with the same model, so only the embedding call is skipped) and every query is
recalled three ways: hybrid (BM25 + vector, fused as the engine's parameters say), bm25_only
and vector_only. Dedup may fold a document into an earlier, near-identical one; the folded
document then counts as found when its keeper is returned. Reported per corpus: how many
learned documents end up hidden — superseded or merged by the decision layer, or folded by a
dedup layer other than "exact" — as a share of the documents (LoCoMo target: <= 1 %), and
exact repeats apart.

Formats: Cranfield-style (docs.jsonl doc_id/text, queries.jsonl qid/text, qrels.csv qid/doc_id)
and LoCoMo (turns.jsonl with sample_id/dia_id/speaker/text, one collection per conversation;
qa.jsonl questions; qrels.csv qid/sample_id/dia_id; category 5 is adversarial and reported
apart). A LoCoMo turn is stored as users store a conversation, ``Speaker: text`` — the input is
never reshaped to suit the engine.

    python bench/recall_quality.py                       # Cranfield and LoCoMo from --eval
    python bench/recall_quality.py --docs D --queries Q --qrels R [--limit 100]
    python bench/recall_quality.py --model-dir DIR       # a model outside the registry
"""

from __future__ import annotations

import argparse
from collections import Counter
import csv
from dataclasses import dataclass, field
import json
import pathlib
import random
import tempfile
import time
from typing import Any, Sequence

from common import add_run_arguments, DEFAULT_EVAL, print_table, quiet_logs, write_result
import metrics
from precomputed import embed_cached, PrecomputedEmbedder
from robotmem_ros.config import MemoryConfig
from robotmem_ros.embedding import load_embedder
from robotmem_ros.engine import MemoryEngine

MODES = {'hybrid': ('bm25', 'vector'), 'bm25_only': ('bm25',), 'vector_only': ('vector',)}
DEFAULT_COLLECTION = 'docs'


@dataclass
class Corpus:
    """Documents, queries and judgements in one shape for both formats."""

    docs: list[tuple[str, str, str]]                  # (doc key, collection, text)
    queries: list[tuple[str, str, str, str]]          # (qid, collection, text, group)
    qrels: dict[str, set[str]] = field(default_factory=dict)


def _jsonl(path: pathlib.Path) -> list[dict]:
    with open(path, encoding='utf-8') as fh:
        return [json.loads(line) for line in fh if line.strip()]


def turn_text(speaker: str, text: str) -> str:
    """A dialogue turn as a user stores it: ``Speaker: text``."""
    return f'{speaker}: {text}'


def load_corpus(docs: pathlib.Path, queries: pathlib.Path, qrels: pathlib.Path,
                max_chars: int) -> Corpus:
    """Read either format (LoCoMo is recognised by its dia_id / question fields)."""
    doc_rows, query_rows = _jsonl(docs), _jsonl(queries)
    locomo = bool(doc_rows) and 'dia_id' in doc_rows[0]
    if locomo:
        corpus = Corpus(
            [(f'{d["sample_id"]}/{d["dia_id"]}', d['sample_id'],
              turn_text(d['speaker'], d['text'])[:max_chars]) for d in doc_rows],
            [(q['qid'], q['sample_id'], q['question'], f'category {q["category"]}')
             for q in query_rows])
    else:
        corpus = Corpus([(d['doc_id'], DEFAULT_COLLECTION, d['text'][:max_chars])
                         for d in doc_rows],
                        [(q['qid'], DEFAULT_COLLECTION, q['text'], 'all') for q in query_rows])
    with open(qrels, newline='', encoding='utf-8') as fh:
        for row in csv.DictReader(fh):
            key = f'{row["sample_id"]}/{row["dia_id"]}' if locomo else row['doc_id']
            corpus.qrels.setdefault(row['qid'], set()).add(key)
    return corpus


def ingest(engine: MemoryEngine, corpus: Corpus) -> tuple[dict[str, int], Counter, float]:
    """Learn every document; return doc key → memory id, outcome counts, seconds."""
    memory_of: dict[str, int] = {}
    outcomes: Counter = Counter()
    start = time.perf_counter()
    for key, collection, text in corpus.docs:
        if not text.strip():
            continue
        result = engine.learn(text, collection=collection)
        memory_of[key] = result.memory_id
        outcomes[result.status if result.status != 'duplicate'
                 else f'duplicate_{result.method}'] += 1
    return memory_of, outcomes, time.perf_counter() - start


def hidden_share(engine: MemoryEngine, memory_of: dict[str, int], outcomes: Counter
                 ) -> dict[str, Any]:
    """
    Learned documents that recall no longer shows as themselves.

    Superseded (the decider replaced them, or end-of-session consolidation), merged into
    another memory, or folded by a non-exact dedup layer. Exact repeats are counted apart: the
    stored memory says the same text.
    """
    inactive = {row[0] for row in engine.db.reader().execute(
        "SELECT id FROM memories WHERE status != 'active'")}
    superseded = sum(1 for mid in set(memory_of.values()) if mid in inactive)
    merged = outcomes['merged']
    folded = sum(n for k, n in outcomes.items()
                 if k.startswith('duplicate_') and k != 'duplicate_exact')
    docs = max(1, len(memory_of))
    hidden = superseded + merged + folded
    return {'learned': len(memory_of), 'superseded': superseded, 'merged': merged,
            'folded_near_duplicate': folded, 'exact_repeats': outcomes['duplicate_exact'],
            'hidden': hidden, 'hidden_share': hidden / docs, 'outcomes': dict(outcomes)}


def split_of(queries: Sequence[tuple[str, str, str, str]]) -> dict[str, str]:
    """
    Query id → 'dev' or 'held_out': the halves that settings are chosen on and reported on.

    LoCoMo has no split, so its conversations alternate in sample-id order (a conversation's
    questions stay together; the other half is never looked at while choosing). A one-collection
    corpus (Cranfield) alternates its queries in file order.
    """
    collections = sorted({c for _, c, _, _ in queries})
    if len(collections) > 1:
        half = {c: ('dev', 'held_out')[i % 2] for i, c in enumerate(collections)}
        return {qid: half[c] for qid, c, _, _ in queries}
    return {q[0]: ('dev', 'held_out')[i % 2] for i, q in enumerate(queries)}


def run_queries(engine: MemoryEngine, corpus: Corpus, memory_of: dict[str, int],
                queries: Sequence[tuple[str, str, str, str]]) -> dict[str, Any]:
    """Recall each judged query in each mode; metrics overall, per query group and split."""
    split = split_of(corpus.queries)
    doc_of: dict[int, set[str]] = {}
    for key, mid in memory_of.items():
        doc_of.setdefault(mid, set()).add(key)
    out: dict[str, Any] = {}
    for mode, channels in MODES.items():
        ranked: dict[str, list[list[int]]] = {}
        relevant: dict[str, list[set[int]]] = {}
        halves: dict[str, tuple[list[list[int]], list[set[int]]]] = {}
        latencies = []
        for qid, collection, text, group in queries:
            rel = {memory_of[k] for k in corpus.qrels.get(qid, ()) if k in memory_of}
            if not rel:
                continue
            result = engine.recall(text, 10, 0.0, collection=collection, channels=channels)
            latencies.append(result.query_ms)
            ranked.setdefault(group, []).append([m.id for m in result.memories])
            relevant.setdefault(group, []).append(rel)
            if group != 'category 5':
                half = halves.setdefault(split[qid], ([], []))
                half[0].append(ranked[group][-1])
                half[1].append(rel)
        groups = {g: metrics.ranking(ranked[g], relevant[g]) for g in sorted(ranked)}
        main = [g for g in ranked if g != 'category 5']
        out[mode] = {'overall': metrics.ranking(sum((ranked[g] for g in main), []),
                                                sum((relevant[g] for g in main), [])),
                     'groups': groups,
                     'splits': {h: metrics.ranking(*halves[h]) for h in sorted(halves)},
                     'median_query_ms': sorted(latencies)[len(latencies) // 2]
                     if latencies else float('nan')}
    return out


def evaluate(name: str, corpus: Corpus, real: Any, model: str, limit: int, seed: int,
             use_cache: bool, decider: str, settings: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """Ingest into a fresh store and score the queries."""
    texts = sorted({t for _, _, t in corpus.docs if t.strip()})
    queries = [q for q in corpus.queries if corpus.qrels.get(q[0])]
    if limit and len(queries) > limit:
        queries = random.Random(seed).sample(queries, limit)
    readable = [t for t in texts if real.readability(t) >= MemoryConfig().min_readability]
    embedder = PrecomputedEmbedder(real, readable, embed_cached(real, readable,
                                                                use_cache=use_cache))
    qtexts = sorted({q[2] for q in queries})
    embedder.add(qtexts, embed_cached(real, qtexts, use_cache=use_cache))
    with tempfile.TemporaryDirectory(prefix='robotmem-recall-') as tmp:
        engine = MemoryEngine(MemoryConfig(db_path=f'{tmp}/recall.db', embed_model=model,
                                           decider=decider, **(settings or {})), embedder)
        try:
            memory_of, outcomes, ingest_s = ingest(engine, corpus)
            folded = sum(n for k, n in outcomes.items() if k.startswith('duplicate_'))
            hidden = hidden_share(engine, memory_of, outcomes)
            shared = Counter(memory_of.values())
            folded_judged = len({k for rel in corpus.qrels.values() for k in rel
                                 if k in memory_of and shared[memory_of[k]] > 1})
            # The decision layer may supersede an older memory with a newer one it updates;
            # superseded memories leave default recall, so their documents cannot be found.
            inactive = {row[0] for row in engine.db.reader().execute(
                "SELECT id FROM memories WHERE status != 'active'")}
            judged_inactive = len({k for rel in corpus.qrels.values() for k in rel
                                   if memory_of.get(k) in inactive})
            modes = run_queries(engine, corpus, memory_of, queries)
        finally:
            engine.close()
    return {'docs': len(corpus.docs), 'stored': len(set(memory_of.values())),
            'folded_by_dedup': folded, 'judged_docs_sharing_a_memory': folded_judged,
            'superseded_by_decider': len(inactive),
            'judged_docs_superseded': judged_inactive,
            'hidden': hidden,
            'queries': len(queries), 'ingest_s': ingest_s,
            'collections': len({c for _, c, _ in corpus.docs}), 'modes': modes,
            'embed_misses': embedder.misses}


def report(sets: dict[str, Any]) -> None:
    """Print the tables."""
    rows = []
    for name, r in sets.items():
        for mode, m in r['modes'].items():
            for group, g in [('overall', m['overall'])] + list(m['splits'].items()) + (
                    list(m['groups'].items()) if len(m['groups']) > 1 else []):
                rows.append([name, mode, group, g['queries'], g['R@1'], g['R@5'], g['R@10'],
                             g['MRR@10']])
    print_table('recall quality (category 5 = adversarial, not in overall)',
                ['set', 'mode', 'queries', 'n', 'R@1', 'R@5', 'R@10', 'MRR@10'], rows)
    print_table('ingest: learned documents hidden (superseded, merged, folded by a non-exact '
                'dedup layer)',
                ['set', 'docs', 'stored', 'superseded', 'merged', 'near-dup folded',
                 'exact repeats', 'hidden share', 'judged docs superseded', 'ingest s'],
                [[n, r['docs'], r['stored'], r['hidden']['superseded'], r['hidden']['merged'],
                  r['hidden']['folded_near_duplicate'], r['hidden']['exact_repeats'],
                  r['hidden']['hidden_share'], r['judged_docs_superseded'], r['ingest_s']]
                 for n, r in sets.items()])


def engine_setting(text: str) -> tuple[str, Any]:
    """Parse ``NAME=VALUE`` into a MemoryConfig field and a value of the field's type."""
    name, _, value = text.partition('=')
    default = getattr(MemoryConfig(), name, None)
    if default is None or not value:
        raise argparse.ArgumentTypeError(f'expected NAME=VALUE with a MemoryConfig name: {text}')
    if isinstance(default, bool):
        return name, value.lower() in ('1', 'true', 'yes')
    return name, type(default)(value)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--docs', type=pathlib.Path)
    parser.add_argument('--queries', type=pathlib.Path)
    parser.add_argument('--qrels', type=pathlib.Path)
    parser.add_argument('--eval', type=pathlib.Path, default=DEFAULT_EVAL)
    parser.add_argument('--sets', default='cranfield,locomo',
                        help='standard sets under --eval (used when --docs is not given)')
    parser.add_argument('--model', default=MemoryConfig().embed_model)
    parser.add_argument('--model-dir', default='',
                        help='a model directory (model.onnx + tokenizer.json) instead of --model')
    parser.add_argument('--limit', type=int, default=0, help='sample this many queries per set')
    parser.add_argument('--max-docs', type=int, default=0,
                        help='keep only the first N docs (smoke runs; qrels outside are dropped)')
    parser.add_argument('--decider', default=MemoryConfig().decider,
                        choices=('rules', 'llm', 'none'),
                        help='decision layer used while ingesting (default: the engine default)')
    parser.add_argument('--set', action='append', default=[], metavar='NAME=VALUE',
                        type=engine_setting,
                        help='engine parameter for this run, e.g. --set fusion=rrf (repeatable)')
    add_run_arguments(parser, '', 'result name (default recall_<model>)')
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Evaluate the requested collections and write the JSON."""
    args = parse_args(argv)
    quiet_logs()
    if args.docs:
        jobs = {args.docs.parent.name or 'custom': (args.docs, args.queries, args.qrels)}
    else:
        files = {'cranfield': ('docs.jsonl', 'queries.jsonl'), 'locomo': ('turns.jsonl',
                                                                          'qa.jsonl')}
        jobs = {n: (args.eval / n / files[n][0], args.eval / n / files[n][1],
                    args.eval / n / 'qrels.csv') for n in args.sets.split(',')}
    real = load_embedder(MemoryConfig(embed_model=args.model, model_dir=args.model_dir))
    max_chars = MemoryConfig().max_insight_chars
    settings = dict(args.set)
    if args.model_dir:  # the store's configuration names the model its vectors come from
        settings.setdefault('model_dir', args.model_dir)
    results = {}
    for name, (docs, queries, qrels) in jobs.items():
        corpus = load_corpus(docs, queries, qrels, max_chars)
        if args.max_docs:
            corpus.docs = corpus.docs[:args.max_docs]
        results[name] = evaluate(name, corpus, real, args.model, args.limit, args.seed,
                                 not args.no_cache, args.decider, settings)
        print(f'{name}: done', flush=True)
    report(results)
    # The embedder that made the vectors (a model directory is named by its folder).
    model = pathlib.Path(args.model_dir).name if args.model_dir else args.model
    doc = {'model': model, 'decider': args.decider, 'settings': settings,
           'eval_dir': str(args.eval),
           'limit': args.limit, 'max_docs': args.max_docs, 'sets': results}
    name = args.name or f'recall_{model}' + (
        f'_decider-{args.decider}' if args.decider != MemoryConfig().decider else '')
    print(f'\nwrote {write_result(name, doc, args.results)}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
