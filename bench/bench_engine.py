"""
Engine speed and size at N existing memories: learn, recall, end_session, decay, bytes, RSS.

The store is filled with seeded synthetic robot memories (``datagen``) through a batch path
(store rows + real-model vectors computed in batches and cached on disk), then measured with
single calls, the way a robot makes them. Learn and recall run twice: with the real embedder
(what a caller sees) and with a ``PrecomputedEmbedder`` serving the same model's vectors
(what the store itself costs). Recall queries are all distinct so the query cache never hides
the model. Usage: ``python bench/bench_engine.py [--sizes 1000,10000,100000] [--smoke]``.
"""

from __future__ import annotations

import argparse
from collections import Counter
import json
import pathlib
import random
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

from common import (add_run_arguments, latency_summary, median_over_repeats, print_table,
                    quiet_logs, rss_mb, timed, write_run)
import datagen
from precomputed import embed_cached, PrecomputedEmbedder
from robotmem_ros.config import MemoryConfig
from robotmem_ros.embedding import load_embedder
from robotmem_ros.engine import MemoryEngine, store
from robotmem_ros.engine.inference import infer

FILL_CHUNK = 2000
DAY = 86_400.0
RECALL_VARIANTS = ('plain', 'context_filter', 'spatial_sort', 'bm25_only')


class Clock:
    """A settable clock for the engine, so rows can be aged without waiting."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def fill(engine: MemoryEngine, items: Sequence[datagen.Memory], vectors: Any,
         session_id: str = '') -> None:
    """Insert memories in big transactions, bypassing dedup (the fill is not measured)."""
    cfg = engine.config
    emb = engine.embedding
    for start in range(0, len(items), FILL_CHUNK):
        chunk = items[start:start + FILL_CHUNK]
        now = engine.clock()
        with engine.db.write() as conn:
            if session_id:
                store.ensure_session(conn, session_id, cfg.collection, now)
            for offset, item in enumerate(chunk):
                if store.find_active_by_hash(conn, cfg.collection, item.text) is not None:
                    continue  # a measured learn of an earlier size already stored this text
                labels = infer(item.text, item.context, has_session=bool(session_id))
                memory_id = store.insert_memory(
                    conn, type_='fact', content=item.text, collection=cfg.collection,
                    session_id=session_id, category=labels.category, perception_type='',
                    kind=labels.kind, confidence=labels.confidence, context=item.context,
                    created_at=now, tags=labels.tags)
                readable = emb.readable(item.text)
                store.put_vector(conn, memory_id, vectors[start + offset] if readable else None)


def db_bytes(engine: MemoryEngine) -> int:
    """Size of the store after a WAL checkpoint (main file only then)."""
    engine.db.reader().execute('PRAGMA wal_checkpoint(TRUNCATE)')
    path = engine.db.path
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + '-wal'))
               if p.exists())


def learn_texts(rng: random.Random, fresh: Any, existing: Sequence[datagen.Memory],
                count: int) -> list[datagen.Memory]:
    """Measured learns: new memories plus 5% rewordings of stored ones (dedup hits)."""
    out = []
    for _ in range(count):
        if existing and rng.random() < 0.05:
            base = rng.choice(existing)
            out.append(datagen.Memory(datagen.reword(rng, base.text), base.context))
        else:
            out.append(next(fresh))
    return out


class EngineBench:
    """One store grown through the sizes, measured at each."""

    def __init__(self, args: argparse.Namespace, work: pathlib.Path) -> None:
        self.args = args
        self.clock = Clock()
        self.real = load_embedder(MemoryConfig(embed_model=args.model))
        config = MemoryConfig(db_path=str(work / 'engine.db'), embed_model=args.model)
        self.pre = PrecomputedEmbedder(self.real, [], self.real.embed([]))
        self.eng_real = MemoryEngine(config, self.real, clock=self.clock)
        self.eng_pre = MemoryEngine(config, self.pre, clock=self.clock)
        self.rng = random.Random(args.seed)
        self.fresh = datagen.memories(10**9, seed=args.seed + 1)
        self.query_pool = iter(datagen.queries(
            len(args.sizes) * args.repeats * args.queries * (len(RECALL_VARIANTS) + 3),
            seed=args.seed + 2))
        self.stored: list[datagen.Memory] = []

    def grow_to(self, size: int) -> None:
        """Add fill memories until the store holds ``size`` of them."""
        items = list(datagen.memories(size, seed=self.args.seed))[len(self.stored):]
        vectors = embed_cached(self.real, [m.text for m in items],
                               use_cache=not self.args.no_cache)
        fill(self.eng_pre, items, vectors)
        self.stored.extend(items)

    def learn(self, engine: MemoryEngine, precompute: bool) -> dict[str, Any]:
        """Median over repeats of single learns; counts how many dedup folded."""
        repeats: list[dict[str, float]] = []
        methods: Counter[str] = Counter()
        for _ in range(self.args.repeats):
            items = learn_texts(self.rng, self.fresh, self.stored, self.args.learns)
            texts = [m.text for m in items]
            if precompute:
                self.pre.add(texts, self.real.embed(texts))
            results: list[Any] = []
            repeats.append(latency_summary(timed(
                [lambda m=m: results.append(engine.learn(m.text, m.context)) for m in items])))
            methods.update(r.method for r in results if r.status == 'duplicate')
        out = median_over_repeats(repeats)
        out['duplicates_found'] = sum(methods.values())
        out['dedup_methods'] = dict(methods)
        return out

    def recall(self, variant: str, engine: MemoryEngine, precompute: bool) -> dict[str, Any]:
        """Median over repeats of single recalls of distinct queries."""
        kwargs: dict[str, Any] = {'n': 10}
        if variant == 'context_filter':
            kwargs['context_filter'] = datagen.context_filter(self.args.seed)
        elif variant == 'spatial_sort':
            kwargs['spatial_sort'] = datagen.spatial_sort(self.args.seed)
        channels = ('bm25',) if variant == 'bm25_only' else ('bm25', 'vector')
        repeats, hits = [], []
        for _ in range(self.args.repeats):
            queries = [next(self.query_pool) for _ in range(self.args.queries)]
            if precompute:
                self.pre.add(queries, self.real.embed(queries))

            def one(q: str) -> None:
                result = engine.recall(
                    q, kwargs['n'], None, '', kwargs.get('context_filter'),
                    kwargs.get('spatial_sort'), engine.config.collection, channels=channels)
                hits.append(result.total)
            repeats.append(latency_summary(timed([lambda q=q: one(q) for q in queries])))
        out = median_over_repeats(repeats)
        out['mean_results'] = sum(hits) / len(hits)
        return out

    def measure(self, size: int) -> dict[str, Any]:
        """Everything measured at one size."""
        row: dict[str, Any] = {'n': size, 'db_bytes': db_bytes(self.eng_pre)}
        row['bytes_per_memory'] = row['db_bytes'] / size
        row['learn_real'] = self.learn(self.eng_real, False)
        row['learn_precomputed'] = self.learn(self.eng_pre, True)
        for variant in RECALL_VARIANTS:
            row[f'recall_{variant}'] = self.recall(variant, self.eng_real, False)
        for variant in ('plain', 'context_filter', 'spatial_sort'):
            row[f'recall_{variant}_precomputed'] = self.recall(variant, self.eng_pre, True)
        row['rss_mb_bench_process'] = rss_mb()
        row['rss_mb'] = rss_probe(self.eng_pre.db.path, self.args.model)
        row['precomputed_misses'] = self.pre.misses
        return row

    def decay(self) -> dict[str, Any]:
        """end_session of an empty session after 30 idle days: decay of every stored row."""
        repeats = []
        for _ in range(self.args.repeats):
            session = self.eng_pre.start_session()
            self.clock.offset += 30 * DAY
            start = time.perf_counter()
            result = self.eng_pre.end_session(session.session_id)
            repeats.append({'ms': (time.perf_counter() - start) * 1000.0,
                            'decayed': float(result.decayed_count)})
            start = time.perf_counter()
            again = self.eng_pre.end_session(self.eng_pre.start_session().session_id)
            repeats[-1]['rerun_ms'] = (time.perf_counter() - start) * 1000.0
            repeats[-1]['rerun_decayed'] = float(again.decayed_count)
        return median_over_repeats(repeats)

    def close(self) -> None:
        """Close both engines."""
        self.eng_real.close()
        self.eng_pre.close()


def rss_probe(db_path: pathlib.Path, model: str) -> float:
    """
    RSS of a fresh process that opens the store and serves 20 recalls and 20 learns.

    The benchmark process itself holds the generated corpus, so its RSS says little about
    what the engine needs on a robot.
    """
    out = subprocess.run([sys.executable, __file__, '--rss-probe', str(db_path),
                          '--model', model], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])['rss_mb']


def probe_main(db_path: str, model: str) -> int:
    """Child side of rss_probe: print {"rss_mb": ...} after some real work."""
    quiet_logs()
    engine = MemoryEngine.open(MemoryConfig(db_path=db_path, embed_model=model))
    try:
        for query in datagen.queries(20, seed=99):
            engine.recall(query, n=10)
        for memory in datagen.memories(20, seed=98):
            engine.learn(memory.text, memory.context, collection='rss_probe')
        print(json.dumps({'rss_mb': rss_mb()}))
    finally:
        engine.close()
    return 0


def end_session_bench(args: argparse.Namespace, work: pathlib.Path, real: Any
                      ) -> dict[str, Any]:
    """end_session on a fresh store whose one session holds ``session_size`` facts."""
    items = list(datagen.memories(args.session_size, seed=args.seed + 7))
    vectors = embed_cached(real, [m.text for m in items], use_cache=not args.no_cache)
    repeats, summary = [], {}
    for r in range(args.repeats):
        config = MemoryConfig(db_path=str(work / f'session{r}.db'), embed_model=args.model)
        engine = MemoryEngine(config, real)
        try:
            session = engine.start_session({'task': 'bench'})
            fill(engine, items, vectors, session_id=session.session_id)
            start = time.perf_counter()
            result = engine.end_session(session.session_id, outcome_score=0.8)
            repeats.append({'ms': (time.perf_counter() - start) * 1000.0})
            summary = {'merged_groups': result.merged_groups,
                       'superseded_count': result.superseded_count,
                       'avg_similarity': result.avg_similarity}
        finally:
            engine.close()
    return {**median_over_repeats(repeats), 'session_facts': len(items), **summary}


def report(doc: dict[str, Any]) -> None:
    """Print the tables."""
    rows = doc['sizes']
    print_table('learn latency (ms): real embedder vs precomputed vectors',
                ['N', 'real p50', 'real p95', 'pre p50', 'pre p95', 'dups', 'bytes/mem',
                 'RSS MiB'],
                [[r['n'], r['learn_real']['p50_ms'], r['learn_real']['p95_ms'],
                  r['learn_precomputed']['p50_ms'], r['learn_precomputed']['p95_ms'],
                  r['learn_real']['duplicates_found'] + r['learn_precomputed']['duplicates_found'],
                  round(r['bytes_per_memory']), round(r['rss_mb'])] for r in rows])
    names = [f'recall_{v}' for v in RECALL_VARIANTS] + [
        f'recall_{v}_precomputed' for v in ('plain', 'context_filter', 'spatial_sort')]
    print_table('recall latency p50 / p95 (ms), n=10',
                ['variant'] + [f'N={r["n"]}' for r in rows],
                [[name[7:]] + [f'{fmt2(r[name]["p50_ms"])} / {fmt2(r[name]["p95_ms"])}'
                               for r in rows] for name in names])
    es, dc = doc['end_session'], doc['decay']
    print_table('end_session and decay', ['what', 'median ms', 'detail'],
                [[f'end_session ({es["session_facts"]} facts)', es['ms'],
                  f'{es["merged_groups"]} groups, {es["superseded_count"]} superseded'],
                 [f'decay ({doc["decay_rows"]} rows, +30 days)', dc['ms'],
                  f'{int(dc["decayed"])} rows changed'],
                 ['decay again (same day)', dc['rerun_ms'],
                  f'{int(dc["rerun_decayed"])} rows changed']])


def fmt2(value: float) -> str:
    """Two-decimal latency text."""
    return f'{value:.2f}'


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--sizes', default='1000,10000,100000',
                        help='comma-separated N of existing memories')
    parser.add_argument('--learns', type=int, default=100, help='learn calls per repeat')
    parser.add_argument('--queries', type=int, default=50, help='recall calls per repeat')
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--session-size', type=int, default=1000)
    parser.add_argument('--model', default=MemoryConfig().embed_model)
    add_run_arguments(parser, 'engine', 'result file name (NAME.json)')
    parser.add_argument('--smoke', action='store_true', help='tiny sizes (CI)')
    parser.add_argument('--rss-probe', metavar='DB', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.learns, args.queries, args.repeats = '200,500', 5, 5, 1
        args.session_size = min(args.session_size, 60)
    args.sizes = sorted(int(s) for s in str(args.sizes).split(','))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the engine benchmark and write NAME.json."""
    args = parse_args(argv)
    if args.rss_probe:
        return probe_main(args.rss_probe, args.model)
    quiet_logs()
    rss_start = rss_mb()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix='robotmem-bench-') as tmp:
        work = pathlib.Path(tmp)
        bench = EngineBench(args, work)
        rss_loaded = rss_mb()
        try:
            sizes = []
            for size in args.sizes:
                t0 = time.perf_counter()
                bench.grow_to(size)
                fill_s = time.perf_counter() - t0
                row = bench.measure(size)
                row['fill_s'] = fill_s
                sizes.append(row)
                print(f'N={size}: measured (fill {fill_s:.1f}s)', flush=True)
            decay = bench.decay()
        finally:
            bench.close()
        session = end_session_bench(args, work, bench.real)
    doc = {'model': bench.real.model_id, 'rss_mb_python': rss_start,
           'rss_mb_engine_loaded': rss_loaded, 'sizes': sizes, 'decay_rows': args.sizes[-1],
           'decay': decay, 'end_session': session,
           'wall_s': time.perf_counter() - started}
    report(doc)
    return write_run(args, **doc)


if __name__ == '__main__':
    raise SystemExit(main())
