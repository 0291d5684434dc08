"""
The text index against FTS5's ranking of every match, interleaved on one store (issue 15).

Two engines open the same store in one process: one with the shipped ``text_index_min_rows``
(the text index proposes the BM25 candidates, engine/text_index.py), one with it at 0 (FTS5
ranks every match, the code before). Each query is asked of both, in alternating order, so both
see the same machine and page cache. Reported: recall p50 / p95 (embedding excluded: the real
model's query vectors are computed beforehand), with and without a context filter
(``datagen.context_filter``), the share of the final top 10 both return, and the BM25 channel
itself (``store.fts_search`` at the recall's depth): in how many queries the
two give the same scores, and the same ids.

Then learn: bench facts not yet stored (5 % rewordings of earlier ones), each learned by one
of the two in turn, after asking both for the dedup Jaccard layer's candidates
(``jaccard_store``: named by the text index, or by FTS5's rare-token query) and counting the
facts where they agree.

The store is one that ``bench/bench_scale.py`` filled (its ``--work`` directory's
``scale.db``), or any store at least ``text_index_min_rows`` large. Results go to
bench/results/NAME.json (default text_index_ab).

Usage::

    python bench/bench_text_index.py --store /tmp/scale/scale.db [--queries 240] [--learns 200]
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import time
from typing import Any, Sequence

from common import latency_summary, print_table, quiet_logs, RESULTS_DIR, write_result
import datagen  # noqa: I100,I201


def _engine(path: pathlib.Path, embedder: Any, min_rows: int) -> Any:
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.engine import MemoryEngine
    return MemoryEngine(MemoryConfig(db_path=str(path), text_index_min_rows=min_rows), embedder)


def _settle(engine: Any, text_index: bool, timeout: float = 600.0) -> float:
    """Wait for the IVF stage (and the text index); return the seconds waited."""
    started = time.monotonic()
    engine.recall('warm up', n=10)  # the first search loads the indexes, starts their builds
    while time.monotonic() - started < timeout:
        engine.db.vectors.refresh()
        built = not engine.db.vectors.stats().get('ann_building')
        if built and (not text_index or engine.db.text.stats()['text_index_docs']):
            break
        time.sleep(0.5)
    return time.monotonic() - started


def _channel(engine: Any, query: str) -> list[tuple[int, float]]:
    from robotmem_ros.engine import store
    from robotmem_ros.engine import text as textmod
    match = textmod.fts_query(query)
    if not match:
        return []
    return store.fts_search(engine.db.reader(), match, engine.config.collection,
                            engine.config.fusion_depth, now=time.time())


def _jaccard_candidates(engine: Any, content: str) -> list[Any]:
    from robotmem_ros.engine import jaccard_store
    from robotmem_ros.engine import text as textmod
    return jaccard_store.candidates(engine.db.reader(), textmod.jaccard_tokens(content),
                                    engine.config.collection, 5,
                                    engine.config.dedup_jaccard_threshold, now=time.time())


def _unstored(engine: Any, count: int, seed: int) -> list[Any]:
    """The first ``count`` bench facts of ``seed`` not in the store (an earlier run's learns)."""
    from robotmem_ros.engine import store
    conn = engine.db.reader()
    fresh = (fact for fact in datagen.memories(100 * count, seed=seed)
             if store.find_active_by_hash(conn, engine.config.collection, fact.text) is None)
    return list(itertools.islice(fresh, count))


def _learn(indexed: Any, plain: Any, facts: list[Any]) -> dict[str, Any]:
    """Learn ``facts`` in turn by each engine; compare their Jaccard candidates first."""
    times: dict[str, list[float]] = {'text_index': [], 'fts5': []}
    agree = 0
    for number, fact in enumerate(facts):
        agree += _jaccard_candidates(indexed, fact.text) == _jaccard_candidates(plain, fact.text)
        name, engine = (('text_index', indexed), ('fts5', plain))[number % 2]
        started = time.perf_counter()
        engine.learn(fact.text, fact.context)
        times[name].append((time.perf_counter() - started) * 1000)
    return {'learn': {name: latency_summary(samples) for name, samples in times.items()},
            'jaccard_candidates_agree': agree, 'learns': len(facts)}


def measure(path: pathlib.Path, count: int, seed: int, min_rows: int,
            learns: int = 0) -> dict[str, Any]:
    """Ask ``count`` bench queries of both engines, alternating, then learn; the figures."""
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder
    from precomputed import PrecomputedEmbedder
    real = load_embedder(MemoryConfig())
    queries = datagen.queries(count + 20, seed=seed)
    embedder = PrecomputedEmbedder(real, queries, real.embed(queries))
    indexed = _engine(path, embedder, min_rows)
    plain = _engine(path, embedder, 0)
    facts = _unstored(indexed, learns, seed + 1_000_003)  # other facts than the store's
    embedder.add([fact.text for fact in facts], real.embed([fact.text for fact in facts]))
    settled = {'text_index_s': _settle(indexed, True), 'fts5_s': _settle(plain, False)}
    for query in queries[:20]:
        indexed.recall(query, n=10), plain.recall(query, n=10)
    times: dict[str, dict[str, list[float]]] = {
        call: {'text_index': [], 'fts5': []} for call in ('recall', 'recall_context_filter')}
    shared: dict[str, list[float]] = {call: [] for call in times}
    same_scores, same_ids = 0, 0
    cfilter = datagen.context_filter(seed)
    for number, query in enumerate(queries[20:]):
        pair = (('text_index', indexed), ('fts5', plain))
        for call, filters in (('recall', None), ('recall_context_filter', cfilter)):
            found = {}
            for name, engine in (pair if number % 2 else pair[::-1]):
                started = time.perf_counter()
                found[name] = [r.id for r in engine.recall(query, n=10,
                                                           context_filter=filters).memories]
                times[call][name].append((time.perf_counter() - started) * 1000)
            shared[call].append(len(set(found['text_index']) & set(found['fts5']))
                                / max(1, len(found['fts5'])))
        ours, theirs = _channel(indexed, query), _channel(plain, query)
        same_ids += [i for i, _ in ours] == [i for i, _ in theirs]
        same_scores += len(ours) == len(theirs) and all(
            abs(a - b) <= 1e-4 * abs(b) + 1e-5
            for a, b in zip(sorted(s for _, s in ours), sorted(s for _, s in theirs)))
    text_dir = indexed.db.text.directory
    result = {'store': str(path), 'queries': count, 'settle_s': settled,
              'text_index': indexed.db.text.stats(),
              'text_index_bytes': sum(f.stat().st_size for f in text_dir.iterdir()),
              **{call: {name: latency_summary(samples) for name, samples in by_name.items()}
                 for call, by_name in times.items()},
              'context_filter': cfilter,
              'top10_shared': sum(shared['recall']) / len(shared['recall']),
              'top10_shared_context_filter': (sum(shared['recall_context_filter'])
                                              / len(shared['recall_context_filter'])),
              'bm25_channel_same_scores': same_scores, 'bm25_channel_same_ids': same_ids}
    if facts:
        result.update(_learn(indexed, plain, facts))
    indexed.close()
    plain.close()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison and write bench/results/NAME.json."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--store', required=True, type=pathlib.Path)
    parser.add_argument('--queries', type=int, default=240)
    parser.add_argument('--seed', type=int, default=22)
    parser.add_argument('--learns', type=int, default=200)
    parser.add_argument('--min-rows', type=int, default=None,
                        help='text_index_min_rows of the indexed engine (default: the shipped)')
    parser.add_argument('--name', default='text_index_ab')
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    quiet_logs()
    from robotmem_ros.config import MemoryConfig
    if args.min_rows is None:
        args.min_rows = MemoryConfig().text_index_min_rows
    result = measure(args.store, args.queries, args.seed, args.min_rows, args.learns)
    for call in ('recall', 'recall_context_filter', 'learn'):
        print_table(f'{call}, interleaved (ms)', ('ranker', 'p50', 'p95'), [
            (name, f"{row['p50_ms']:.1f}", f"{row['p95_ms']:.1f}")
            for name, row in result.get(call, {}).items()])
    print(f"top 10 shared {result['top10_shared']:.3f} "
          f"({result['top10_shared_context_filter']:.3f} filtered); BM25 channel: same scores in "
          f"{result['bm25_channel_same_scores']} / {args.queries} queries, same ids in "
          f"{result['bm25_channel_same_ids']}")
    if args.learns:
        print(f"Jaccard candidates agree in {result['jaccard_candidates_agree']} / "
              f"{result['learns']}")
    print(f"wrote {write_result(args.name, {'params': vars(args), **result}, args.results)}")
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
