"""
Store latency, memory and cold start from 1k to 1M memories, before and after the vector index.

Each code version runs in its own worker process on its own store, filled through the batch
path (rows + vectors in big transactions, no dedup: the fill is not measured), then measured
with single calls the way a robot makes them. Embedding is excluded: learns and recalls use a
``PrecomputedEmbedder`` holding the real model's vectors, so the figures are what the store
costs.

Vectors: the real model embeds a pool of ``--pool`` synthetic memories (cached on disk); memory
``i`` gets pool vector ``i mod pool`` plus seeded noise (cosine about 0.93 to its base), so a
large store has families of close neighbours, harder for a quantized first pass than distinct
texts. Embedding a million texts would take hours on the 2-core target.

Usage::

    python bench/bench_scale.py --before-ref 991b7c3 --sizes 1000,10000,100000 \
        --after-sizes 1000,10000,100000,1000000
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, Sequence

import numpy as np

from common import latency_summary, REPO_ROOT, RESULTS_DIR, write_result  # noqa: I100,I101,I201
import datagen  # noqa: I201

FILL_CHUNK = 5000
NOISE = 0.02
CALLS = 25


# --- worker (runs with the code version under test on sys.path) ------------------------------

def _vectors(pool: np.ndarray, start: int, count: int, seed: int) -> np.ndarray:
    """Vectors of memories start..start+count (pool vector + seeded noise, unit length)."""
    first, last = start // FILL_CHUNK, (start + count - 1) // FILL_CHUNK
    blocks = []
    for block in range(first, last + 1):  # noise drawn per aligned block: any slicing agrees
        rows = np.arange(block * FILL_CHUNK, (block + 1) * FILL_CHUNK)
        noise = np.random.default_rng(seed + block).standard_normal(
            (FILL_CHUNK, pool.shape[1])).astype(np.float32)
        noise[rows < len(pool)] = 0.0  # the pool itself is stored as embedded
        blocks.append(pool[rows % len(pool)] + NOISE * noise)
    out = np.concatenate(blocks)[start - first * FILL_CHUNK:][:count]
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def _fill(engine: Any, store: Any, texts: Iterator[Any], pool: np.ndarray, start: int,
          end: int, seed: int, session_id: str | None = None) -> list[int]:
    """Rows and FTS rows by executemany, vectors through the version's own put_vector."""
    from robotmem_ros.engine import text as textmod
    collection = engine.config.collection
    ids = []
    for chunk_start in range(start, end, FILL_CHUNK):
        count = min(FILL_CHUNK, end - chunk_start)
        vectors = _vectors(pool, chunk_start, count, seed)
        items = [next(texts) for _ in range(count)]
        contents = [f'{item.text} #{chunk_start + i}' for i, item in enumerate(items)]
        now = time.time()
        with engine.db.write() as conn:
            first = conn.execute('SELECT COALESCE(MAX(id), 0) + 1 FROM memories').fetchone()[0]
            chunk_ids = list(range(first, first + count))
            if session_id:
                store.ensure_session(conn, session_id, collection, now)
            conn.executemany(
                'INSERT INTO memories(id, type, content, content_hash, collection, session_id, '
                'category, kind, confidence, context_json, created_at, valid_from) '
                "VALUES (?, 'fact', ?, ?, ?, ?, 'observation', 'semantic', 0.5, ?, ?, ?)",
                [(i, c, textmod.content_hash(c), collection, session_id,
                  json.dumps(item.context), now, now)
                 for i, c, item in zip(chunk_ids, contents, items)])
            conn.executemany('INSERT INTO memories_fts(rowid, body) VALUES (?, ?)',
                             [(i, textmod.fts_index_text(c)) for i, c in zip(chunk_ids, contents)])
            for memory_id, vector in zip(chunk_ids, vectors):
                store.put_vector(conn, memory_id, vector)
        ids.extend(chunk_ids)
    return ids


def _timed(calls: Sequence[Any]) -> dict[str, float]:
    out = []
    for call in calls:
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000.0)
    return latency_summary(out)


def _recall_at_10(engine: Any, store: Any, pool: np.ndarray, ids: list[int], seed: int,
                  queries: np.ndarray) -> float:
    """Overlap of the store's vector top 10 with an exact scan of every stored vector."""
    size = len(ids)
    scores = np.full((len(queries), size), -2.0, dtype=np.float32)
    for start in range(0, size, 100_000):
        count = min(100_000, size - start)
        scores[:, start:start + count] = queries @ _vectors(pool, start, count, seed).T
    overlap = []
    for q, row in zip(queries, scores):
        exact = {ids[i] for i in np.argpartition(-row, 10)[:10]}
        got = {i for i, _ in store.vec_search(engine.db.reader(), q, engine.config.collection,
                                              10)}
        overlap.append(len(exact & got) / 10)
    return float(np.mean(overlap))


def collections_cost(args: argparse.Namespace) -> None:
    """
    Bytes on disk per collection that holds one embedded fact, for each count in --collections.

    Also the bytes of the same number of facts in one collection, so the difference is what a
    collection itself costs (issue 13: vec0 spent a 1.67 MB chunk per partition).
    """
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.engine import MemoryEngine, store
    pool = np.load(args.pool)
    for count in args.collections:
        row: dict[str, Any] = {'collections': count}
        for layout in ('one_per_collection', 'all_in_one'):
            with tempfile.TemporaryDirectory() as work:
                path = pathlib.Path(work) / 'c.db'
                # The batch path writes below the facade, so max_collections does not apply.
                engine = MemoryEngine(MemoryConfig(db_path=str(path), embed_backend='none'))
                with engine.db.write() as conn:
                    for i in range(count):
                        name = f'c{i}' if layout == 'one_per_collection' else 'default'
                        memory_id = store.insert_memory(
                            conn, type_='fact', content=f'the tool {i} is on shelf {i}',
                            collection=name, session_id='', category='observation',
                            perception_type='', kind='semantic', confidence=0.8, context={},
                            created_at=time.time())
                        _ensure_vec_table(store, conn)
                        store.put_vector(conn, memory_id, pool[i % len(pool)])
                engine.close()
                row[f'{layout}_bytes'] = path.stat().st_size
        row['bytes_per_collection_beyond_the_facts'] = (
            row['one_per_collection_bytes'] - row['all_in_one_bytes']) / count
        print(json.dumps(row), flush=True)


def _ensure_vec_table(store: Any, conn: Any) -> None:
    """Today's code creates its vec0 table when a model is bound; do it without a model."""
    if hasattr(store, 'create_vec_table') and not store.has_vec_table(conn):
        store.create_vec_table(conn, 384)


def worker(args: argparse.Namespace) -> None:
    """Grow one store through the sizes and measure at each; print one JSON line per size."""
    import psutil
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder
    from robotmem_ros.engine import MemoryEngine, store
    from precomputed import PrecomputedEmbedder

    pool = np.load(args.pool)
    real = load_embedder(MemoryConfig())
    pre = PrecomputedEmbedder(real, [], real.embed([]))
    config = MemoryConfig(db_path=str(pathlib.Path(args.work) / 'scale.db'))
    engine = MemoryEngine(config, pre)
    texts = datagen.memories(10**9, seed=args.seed, dup_rate=0.0)
    fresh = datagen.memories(10**9, seed=args.seed + 7, dup_rate=0.0)
    query_pool = iter(datagen.queries(10_000, seed=args.seed + 2))
    cfilter = datagen.context_filter(args.seed)
    done = 0
    filled: list[int] = []
    for size in args.sizes:
        started = time.perf_counter()
        filled += _fill(engine, store, texts, pool, done, size, args.seed)
        fill_s = time.perf_counter() - started
        done = size
        learns = [next(fresh) for _ in range(CALLS)]
        pre.add([m.text for m in learns], real.embed([m.text for m in learns]))
        queries = [next(query_pool) for _ in range(2 * CALLS)]
        qvecs = real.embed(queries)
        pre.add(queries, qvecs)
        engine.recall(queries[0], n=10)  # the first search loads the index
        row: dict[str, Any] = {'n': size, 'fill_s': fill_s, 'package': _package_dir(),
                               'ann_build_s': _settled(engine.db.vectors)}
        row['index'] = engine.db.vectors.stats()
        row['learn'] = _timed([lambda m=m: engine.learn(m.text, m.context) for m in learns])
        row['recall'] = _timed([lambda q=q: engine.recall(q, n=10) for q in queries[:CALLS]])
        row['recall_context_filter'] = _timed([
            lambda q=q: engine.recall(q, n=10, context_filter=cfilter) for q in queries[CALLS:]])
        row['dedup_jaccard_query'] = _timed([
            lambda m=m: _jaccard_candidates(engine, store, m.text) for m in learns])
        row['vector_search'] = _timed([
            lambda v=v: store.vec_search(engine.db.reader(), v, config.collection, 10)
            for v in qvecs[:CALLS]])
        if args.recall_at_10:
            row['vector_recall_at_10'] = _recall_at_10(engine, store, pool, filled, args.seed,
                                                       qvecs[:10])
        row['rss_mib_bench_process'] = psutil.Process().memory_info().rss / 2**20
        engine.db.reader().execute('PRAGMA wal_checkpoint(TRUNCATE)')
        row['db_bytes'] = engine.db.path.stat().st_size
        row['cold_start_s'], row['rss_mib'], row['rss_mib_index_built'] = _cold_start(
            engine.db.path)
        row['load_avg'] = os.getloadavg()
        print(json.dumps(row), flush=True)
    if args.end_session:
        print(json.dumps(_end_session(engine, store, pool, args)), flush=True)
    engine.close()


def _package_dir() -> str:
    """Where the code under test was imported from (the JSON shows which version ran)."""
    import robotmem_ros
    return str(pathlib.Path(robotmem_ros.__file__).resolve().parents[1])


def _settled(index: Any) -> float:
    """
    Wait until a background build of the index's approximate stage ends; return its seconds.

    A robot measures the index it runs on most of the time; the code before the stage has no
    ``ann_building`` and returns 0 at once.
    """
    began = time.perf_counter()
    while index.stats().get('ann_building'):
        time.sleep(0.2)
        index.refresh()
    return time.perf_counter() - began


def _jaccard_candidates(engine: Any, store: Any, content: str) -> list[Any]:
    """The dedup Jaccard layer's candidate query, as the version under test runs it."""
    from robotmem_ros.engine import text as textmod
    conn, collection, now = engine.db.reader(), engine.config.collection, time.time()
    try:
        from robotmem_ros.engine import jaccard_store
    except ImportError:  # before the rare-token filter: the BM25 top 5 of every token
        return store.fts_search(conn, textmod.fts_query(content), collection, 5, now=now,
                                type_='fact')
    return jaccard_store.candidates(conn, textmod.jaccard_tokens(content), collection, 5,
                                    engine.config.dedup_jaccard_threshold, now=now)


def _end_session(engine: Any, store: Any, pool: np.ndarray,
                 args: argparse.Namespace) -> dict[str, Any]:
    """end_session of a session holding ``--end-session`` facts (pool vectors, 5% rewordings)."""
    session = engine.start_session().session_id
    texts = datagen.memories(10**9, seed=args.seed + 13, dup_rate=0.05)
    start = 10_000_000  # noise blocks no fill uses
    _fill(engine, store, texts, pool, start, start + args.end_session, args.seed, session)
    began = time.perf_counter()
    result = engine.end_session(session)
    return {'end_session_facts': args.end_session,
            'end_session_ms': (time.perf_counter() - began) * 1000.0,
            'superseded': result.superseded_count, 'load_avg': os.getloadavg()}


def _cold_start(path: pathlib.Path) -> tuple[float, float, float]:
    """
    Start a fresh process as the node starts: open the store with the model, answer a recall.

    Returns (seconds from start to the answer, RSS in MiB after it, RSS in MiB once a
    background build of the index's approximate stage has ended): what a node costs.
    """
    code = ('import time; t = time.perf_counter(); import psutil; '
            'from robotmem_ros.config import MemoryConfig; '
            'from robotmem_ros.engine import MemoryEngine; '
            'from bench_scale import _settled; '
            f'e = MemoryEngine.open(MemoryConfig(db_path={str(path)!r})); '
            'e.recall("grip force for the red cup", n=10); '
            'print(time.perf_counter() - t, psutil.Process().memory_info().rss / 2**20); '
            '_settled(e.db.vectors); print(psutil.Process().memory_info().rss / 2**20)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True, env=os.environ)
    first, built = out.stdout.strip().splitlines()[-2:]
    seconds, rss = first.split()
    return float(seconds), float(rss), float(built)


# --- driver ----------------------------------------------------------------------------------

def _pool(size: int, seed: int) -> pathlib.Path:
    from precomputed import embed_cached
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder
    real = load_embedder(MemoryConfig())
    texts = [m.text for m in datagen.memories(size, seed=seed + 11, dup_rate=0.0)]
    path = pathlib.Path(tempfile.gettempdir()) / f'robotmem_scale_pool_{size}_{seed}.npy'
    np.save(path, embed_cached(real, texts))
    return path


def _before_tree(ref: str, where: pathlib.Path) -> pathlib.Path:
    """Extract the package as of ``ref`` (today's code) into ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(['git', '-C', str(REPO_ROOT), 'archive', ref, 'robotmem_ros'],
                             capture_output=True, check=True).stdout
    subprocess.run(['tar', '-x', '-C', str(where)], input=archive, check=True)
    return where / 'robotmem_ros'


def _run(label: str, package: pathlib.Path, sizes: list[int], pool: pathlib.Path,
         args: argparse.Namespace) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(package), str(REPO_ROOT / 'bench'),
                                         env.get('PYTHONPATH', '')])
    env['ROBOTMEM_BENCH_PACKAGE'] = str(package)
    rows = []
    with tempfile.TemporaryDirectory(prefix=f'scale_{label}_') as work:
        cmd = [sys.executable, __file__, '--worker', '--work', work, '--pool', str(pool),
               '--sizes', ','.join(map(str, sizes)), '--seed', str(args.seed)]
        if label == 'after':
            cmd.append('--recall-at-10')
        if args.end_session:
            cmd += ['--end-session', str(args.end_session)]
        if args.collections:
            cmd += ['--collections', ','.join(map(str, args.collections))]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        for line in proc.stdout:
            row = json.loads(line)
            print(label, json.dumps(row), flush=True)
            rows.append(row)
        proc.wait()
    return rows


def plot(results: pathlib.Path = RESULTS_DIR, name: str = 'scale') -> list[pathlib.Path]:
    """
    Latency vs N (log-log) and memory vs N, before and after, from the scale JSON files.

    Reads ``NAME.json`` when it holds both runs, else ``NAME_before.json`` and
    ``NAME_after.json`` (runs merged by hand); draws ``NAME_vs_n.png``.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    runs = {}
    for label in ('before', 'after'):
        path = results / f'{name}.json'
        if not path.exists() or label not in json.loads(path.read_text()):
            path = results / f'{name}_{label}.json'
        if path.exists():
            rows = json.loads(path.read_text()).get(label, [])
            runs[label] = [r for r in rows if 'n' in r]
    out = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, rows in runs.items():
        style = '--' if label == 'before' else '-'
        for key, colour in (('learn', 'C0'), ('recall', 'C1'), ('recall_context_filter', 'C2'),
                            ('vector_search', 'C3')):
            axes[0].plot([r['n'] for r in rows], [r[key]['p50_ms'] for r in rows], style,
                         marker='o', color=colour, label=f'{key} ({label})')
        axes[1].plot([r['n'] for r in rows], [r['rss_mib'] for r in rows], style, marker='o',
                     color='C0', label=f'node RSS, MiB ({label})')
        axes[1].plot([r['n'] for r in rows], [r['db_bytes'] / 2**20 for r in rows], style,
                     marker='s', color='C1', label=f'DB size, MiB ({label})')
    axes[0].set(xscale='log', yscale='log', xlabel='memories in the store',
                ylabel='p50 latency, ms', title='latency vs N (embedding excluded)')
    axes[1].set(xscale='log', yscale='log', xlabel='memories in the store', ylabel='MiB',
                title='memory vs N')
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(True, which='both', alpha=0.3)
    fig.tight_layout()
    path = results / f'{name}_vs_n.png'
    fig.savefig(path, dpi=110)
    out.append(path)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run both versions and write bench/results/scale.json and its plots."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--sizes', default='1000,10000,100000')
    parser.add_argument('--after-sizes', default='')
    parser.add_argument('--before-ref', default='')
    parser.add_argument('--pool', default='4000')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--before-only', action='store_true',
                        help='measure only the --before-ref code (merge the JSON by hand)')
    parser.add_argument('--end-session', type=int, default=0,
                        help='also time end_session of a session with this many facts')
    parser.add_argument('--plot', action='store_true', help='only draw scale_vs_n.png')
    parser.add_argument('--collections', default='',
                        help='instead of the sizes: bytes per one-fact collection, e.g. 1,100')
    parser.add_argument('--worker', action='store_true')
    parser.add_argument('--recall-at-10', action='store_true')
    parser.add_argument('--work', default='')
    parser.add_argument('--name', default='scale', help='result name (bench/results/NAME.json)')
    args = parser.parse_args(argv)
    if args.plot:
        print(plot(RESULTS_DIR, args.name))
        return 0
    args.sizes = [int(s) for s in args.sizes.split(',')]
    if args.collections:
        args.collections = [int(c) for c in args.collections.split(',')]
    if args.worker:
        (collections_cost if args.collections else worker)(args)
        return 0
    pool = _pool(int(args.pool), args.seed)
    doc: dict[str, Any] = {'pool': int(args.pool), 'noise': NOISE,
                           'calls_per_measure': CALLS}
    after_sizes = [int(s) for s in args.after_sizes.split(',')] if args.after_sizes else \
        args.sizes
    if not args.before_only:
        doc['after'] = _run('after', REPO_ROOT / 'robotmem_ros', after_sizes, pool, args)
    if args.before_ref:
        with tempfile.TemporaryDirectory(prefix='scale_before_code_') as code:
            package = _before_tree(args.before_ref, pathlib.Path(code))
            doc['before_ref'] = args.before_ref
            doc['before'] = _run('before', package, args.sizes, pool, args)
    write_result(args.name, doc)
    return 0


if __name__ == '__main__':
    sys.exit(main())
