"""
Fleet memory against a real PostgreSQL + pgvector hub (the bundled server, Unix socket).

Measured, each on a fresh throw-away hub:

* push and pull throughput (memories/s) of one robot's sync, vectors included;
* propagation latency A -> B: from A's learn returning to the fact being found by B's local
  recall, with both sync threads at the default period: once with the node's behaviour (a
  service write wakes the sync) and once period-only (the worst case);
* ``--robots`` simulated robots syncing at once (each its own store, role and thread):
  time until every robot holds every other robot's facts;
* hub recall (full text + HNSW, fused) at ``--hub-n`` memories with the real model's vectors
  (batch-embedded once, cached), HNSW recall@10 against an exact scan.

Everything runs on this machine, hub included, so the numbers are a lower bound for a real
site (no network) and an upper bound for contention (robots and hub share the CPU).

    python bench/bench_fleet.py [--facts 2000] [--samples 30] [--robots 10] [--hub-n 100000]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time
from typing import Any, Sequence

from common import print_table, quiet_logs, RESULTS_DIR, write_result
import datagen
import numpy as np
from pgvector.psycopg import register_vector
from precomputed import embed_cached
from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import MemoryEngine
from robotmem_ros.fleet import hub as hubmod
from robotmem_ros.fleet import local_store
from robotmem_ros.fleet.local_hub import LocalHub
from robotmem_ros.fleet.recall import fleet_recall
from robotmem_ros.fleet.settings import FleetSettings
from robotmem_ros.fleet.sync import FleetSync

DEFAULT_PERIOD = MemoryConfig().fleet_sync_period
POLL_S = 0.002


class BenchRobot:
    """A robot: engine on its own file, role at the hub, sync (thread optional)."""

    def __init__(self, hub: LocalHub, root: pathlib.Path, robot_id: str, collection: str,
                 embedder: Any, period: float = DEFAULT_PERIOD) -> None:
        self.robot_id = robot_id
        url = hub.add_robot(robot_id, [collection])
        config = MemoryConfig(db_path=str(root / f'{robot_id}.db'), collection=collection,
                              embed_backend='onnx' if embedder else 'none')
        self.engine = MemoryEngine(config, embedder)
        self.sync = FleetSync(self.engine, FleetSettings(url, None, robot_id, (collection,),
                                                         period, 500, 100_000))

    def close(self) -> None:
        self.sync.stop()
        self.engine.close()


def _texts(count: int, seed: int) -> list[str]:
    return [m.text for m in datagen.memories(count, seed=seed, dup_rate=0.0)]


def bench_throughput(hub: LocalHub, root: pathlib.Path, embedder: Any, facts: int) -> dict:
    """One robot pushes ``facts`` memories, another pulls them."""
    a = BenchRobot(hub, root, 'tp_a', 'tp', embedder)
    b = BenchRobot(hub, root, 'tp_b', 'tp', embedder)
    try:
        texts = _texts(facts, seed=11)
        start = time.perf_counter()
        for text in texts:
            a.engine.learn(text)
        learn_s = time.perf_counter() - start
        start = time.perf_counter()
        pushed = a.sync.push_all()
        push_s = time.perf_counter() - start
        start = time.perf_counter()
        pulled = b.sync.pull_all()
        pull_s = time.perf_counter() - start
        return {'facts': facts, 'learned_per_s': facts / learn_s, 'pushed': pushed,
                'push_per_s': pushed / push_s, 'pulled': pulled, 'pull_per_s': pulled / pull_s,
                'pull_duplicates': b.sync.status().duplicates}
    finally:
        a.close()
        b.close()


def _found(engine: MemoryEngine, text: str) -> bool:
    return engine.db.reader().execute('SELECT 1 FROM memories WHERE content = ?',
                                      (text,)).fetchone() is not None


def bench_propagation(hub: LocalHub, root: pathlib.Path, samples: int, wake: bool) -> dict:
    """A learns, B's local store has it: seconds, ``samples`` times, default period."""
    tag = 'wake' if wake else 'period'
    a = BenchRobot(hub, root, f'lat_a_{tag}', f'lat_{tag}', None)
    b = BenchRobot(hub, root, f'lat_b_{tag}', f'lat_{tag}', None)
    a.sync.start()
    b.sync.start()
    rng = np.random.default_rng(5)
    latencies = []
    try:
        for text in _texts(samples, seed=21 if wake else 22):
            time.sleep(float(rng.uniform(0.0, DEFAULT_PERIOD)))  # random phase vs the period
            start = time.perf_counter()
            a.engine.learn(text)
            if wake:
                a.sync.wake()  # what the node does after every service write
            while not _found(b.engine, text):
                time.sleep(POLL_S)
            latencies.append(time.perf_counter() - start)
            assert b.engine.recall(text, n=1).memories, text  # and local recall finds it
    finally:
        a.close()
        b.close()
    ms = [x * 1000 for x in latencies]
    return {'mode': 'node (write wakes the sync)' if wake else 'period only',
            'period_s': DEFAULT_PERIOD, 'samples': len(ms),
            'p50_ms': float(np.percentile(ms, 50)), 'p95_ms': float(np.percentile(ms, 95)),
            'max_ms': max(ms), 'all_ms': [round(x, 1) for x in ms]}


def bench_many_robots(hub: LocalHub, root: pathlib.Path, robots: int, each: int) -> dict:
    """``robots`` robots with ``each`` facts start syncing at once; until all hold all."""
    fleet = [BenchRobot(hub, root, f'many_{i}', 'many', None) for i in range(robots)]
    try:
        for i, robot in enumerate(fleet):
            for text in _texts(each, seed=100 + i):
                robot.engine.learn(f'{text} (robot {i})')
        # Each robot's own dedup may have folded a few generated facts: count what will move.
        own = {r.robot_id: local_store.own_fact_count(r.engine.db.reader()) for r in fleet}
        total_own = sum(own.values())
        start = time.perf_counter()
        for robot in fleet:
            robot.sync.start()
        done: dict[str, float] = {}
        while len(done) < robots:
            for robot in fleet:
                # Received = stored + judged duplicates of what it already had.
                if robot.robot_id not in done and robot.sync.status().pulled >= (
                        total_own - own[robot.robot_id]):
                    done[robot.robot_id] = time.perf_counter() - start
            time.sleep(0.02)
        total = time.perf_counter() - start
        with hub.connect_admin() as conn:
            rows = hubmod.count_rows(conn)
    finally:
        for robot in fleet:
            robot.close()
    moved = total_own + sum(total_own - n for n in own.values())
    return {'robots': robots, 'facts_each': each, 'hub_rows': rows,
            'all_in_step_s': total, 'first_in_step_s': min(done.values()),
            'median_in_step_s': statistics.median(done.values()),
            'rows_moved': moved, 'rows_moved_per_s': moved / total,
            'note': 'all robots are threads of one Python process (one GIL) on the hub\'s '
                    'machine'}


def _fill_hub(hub: LocalHub, texts: Sequence[str], vectors: np.ndarray, model: str,
              robots: int) -> dict:
    """COPY the memories in (index dropped, rebuilt after: how a bulk load is done)."""
    with hub.connect_admin() as conn:
        register_vector(conn)
        conn.execute('DROP INDEX robotmem.memories_embedding')
        start = time.perf_counter()
        with conn.cursor().copy(
                'COPY robotmem.memories (gid, robot_id, collection, type, content, confidence, '
                'status, created_at, model, embedding) FROM STDIN') as copy:
            for i, (text, vector) in enumerate(zip(texts, vectors)):
                copy.write_row((f'bulk:{i}', f'bulk_{i % robots}', 'bulk', 'fact', text, 0.8,
                                'active', 0.0, model, vector))
        load_s = time.perf_counter() - start
        # pgvector builds HNSW fastest while the graph fits in maintenance_work_mem (about
        # 2 KB per 384-d vector); past it, the build goes on disk and slows down many times.
        work_mem_mb = max(1024, len(texts) * 3 // 1024)
        conn.execute(f"SET maintenance_work_mem = '{work_mem_mb}MB'")
        start = time.perf_counter()
        conn.execute('CREATE INDEX memories_embedding ON robotmem.memories '
                     'USING hnsw (embedding vector_cosine_ops)')
        index_s = time.perf_counter() - start
        conn.execute('VACUUM ANALYZE robotmem.memories')
        size = conn.execute("SELECT pg_total_relation_size('robotmem.memories')").fetchone()[0]
    return {'load_s': load_s, 'hnsw_build_s': index_s, 'table_bytes': size}


EF_SEARCH = (40, 100, 200)  # pgvector's default, then wider HNSW searches


def bench_hub_recall(hub: LocalHub, embedder: Any, n: int, queries: int) -> dict:
    """Hub recall latency at ``n`` memories and HNSW recall@10 against an exact scan."""
    texts = _texts(n, seed=31)
    vectors = embed_cached(embedder, texts)
    fill = _fill_hub(hub, texts, vectors, embedder.model_id, robots=10)
    url = hub.add_robot('reader', ['bulk'])
    conn = hubmod.connect(url)
    qtexts = datagen.queries(queries, seed=41)
    qvecs = [embedder.embed_query(q) for q in qtexts]
    out: dict[str, Any] = {'n': n, **fill, 'queries': queries}
    try:
        text_lat = []
        for q in qtexts:
            start = time.perf_counter()
            hubmod.text_search(conn, q, ['bulk'], 10)
            text_lat.append((time.perf_counter() - start) * 1000)
        out['text_p50_ms'] = float(np.percentile(text_lat, 50))
        out['text_p95_ms'] = float(np.percentile(text_lat, 95))
        for ef in EF_SEARCH:
            conn.execute(f'SET hnsw.ef_search = {ef}')
            lat, vec_lat, hits = [], [], []
            for q, v in zip(qtexts, qvecs):
                start = time.perf_counter()
                fleet_recall(conn, q, ['bulk'], 10, vector=v, model=embedder.model_id,
                             rrf_k=60)
                lat.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                approx = hubmod.vector_search(conn, v, embedder.model_id, ['bulk'], 10)
                vec_lat.append((time.perf_counter() - start) * 1000)
                exact = hubmod.exact_vector_search(conn, v, embedder.model_id, ['bulk'], 10)
                hits.append(len(set(approx) & set(exact)) / 10)
            out[f'ef{ef}'] = {'recall_p50_ms': float(np.percentile(lat, 50)),
                              'recall_p95_ms': float(np.percentile(lat, 95)),
                              'hnsw_p50_ms': float(np.percentile(vec_lat, 50)),
                              'recall_at_10': float(np.mean(hits))}
        exact_lat = []
        for v in qvecs[:10]:
            start = time.perf_counter()
            hubmod.exact_vector_search(conn, v, embedder.model_id, ['bulk'], 10)
            exact_lat.append((time.perf_counter() - start) * 1000)
        out['exact_p50_ms'] = float(np.percentile(exact_lat, 50))
    finally:
        conn.close()
    return out


def plot(doc: dict, out: pathlib.Path) -> None:
    """Propagation latency distribution (both modes) and the fleet run."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for run in doc['propagation']:
        left.hist(run['all_ms'], bins=20, alpha=0.6,
                  label=f"{run['mode']}: p50 {run['p50_ms']:.0f}, p95 {run['p95_ms']:.0f} ms")
    left.axvline(2000, color='red', ls='--', lw=1, label='target p95 2 s')
    left.set_xlabel('A learns -> B has it locally (ms)')
    left.set_ylabel('samples')
    left.set_title(f"propagation at the default period ({DEFAULT_PERIOD:g} s)")
    left.legend(fontsize=7)
    tp = doc['throughput']
    many = doc['many_robots']
    bars = {'push': tp['push_per_s'], 'pull': tp['pull_per_s'],
            f"{many['robots']} robots\n(rows moved)": many['rows_moved_per_s']}
    right.bar(list(bars), list(bars.values()), color=['C0', 'C1', 'C2'])
    right.set_ylabel('memories / s')
    right.set_title('sync throughput')
    m = doc['machine']
    fig.suptitle(f"robotmem fleet — {m['cores']} cores, load {m['loadavg_1m']}, hub on the "
                 'same machine', fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def bench_robots(hub: LocalHub, root: pathlib.Path, embedder: Any,
                 args: argparse.Namespace) -> dict[str, Any]:
    """Throughput, propagation and many robots at once; print their tables."""
    doc: dict[str, Any] = {}
    doc['throughput'] = bench_throughput(hub, root, embedder, args.facts)
    print_table('push / pull (one robot, vectors included)',
                ('facts', 'learn/s', 'push/s', 'pull/s'),
                [(args.facts, doc['throughput']['learned_per_s'],
                  doc['throughput']['push_per_s'], doc['throughput']['pull_per_s'])])
    doc['propagation'] = [bench_propagation(hub, root, args.samples, wake)
                          for wake in (True, False)]
    print_table(f'propagation A -> B (period {DEFAULT_PERIOD:g} s)',
                ('mode', 'samples', 'p50 ms', 'p95 ms', 'max ms'),
                [(r['mode'], r['samples'], r['p50_ms'], r['p95_ms'], r['max_ms'])
                 for r in doc['propagation']])
    doc['many_robots'] = many = bench_many_robots(hub, root, args.robots, args.each)
    print_table(f"{args.robots} robots syncing at once",
                ('robots', 'facts each', 'all in step s', 'median s', 'rows moved/s'),
                [(many['robots'], many['facts_each'], many['all_in_step_s'],
                  many['median_in_step_s'], many['rows_moved_per_s'])])
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """Run every fleet measurement; print tables, write JSON and a plot."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--facts', type=int, default=2000)
    parser.add_argument('--samples', type=int, default=30)
    parser.add_argument('--robots', type=int, default=10)
    parser.add_argument('--each', type=int, default=200, help='facts per simulated robot')
    parser.add_argument('--hub-n', type=int, default=100_000)
    parser.add_argument('--queries', type=int, default=50)
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    parser.add_argument('--hub-only', action='store_true',
                        help='only the hub recall at --hub-n (e.g. 1000000)')
    parser.add_argument('--name', default='fleet', help='result name (bench/results/NAME.json)')
    args = parser.parse_args(argv)
    quiet_logs()
    from robotmem_ros.embedding import load_embedder
    embedder = load_embedder(MemoryConfig())
    doc: dict[str, Any] = {'model': embedder.model_id, 'period_s': DEFAULT_PERIOD}
    with tempfile.TemporaryDirectory(prefix='robotmem_fleet_') as tmp:
        root = pathlib.Path(tmp)
        if not args.hub_only:
            hub = LocalHub(root / 'hub')
            try:
                doc.update(bench_robots(hub, root, embedder, args))
            finally:
                hub.close()
        if args.hub_n:
            hub = LocalHub(root / 'hub_recall')
            try:
                doc['hub_recall'] = bench_hub_recall(hub, embedder, args.hub_n, args.queries)
            finally:
                hub.close()
            rec = doc['hub_recall']
            print_table(f"hub recall at {rec['n']} memories (HNSW build "
                        f"{rec['hnsw_build_s']:.0f} s, exact scan p50 "
                        f"{rec['exact_p50_ms']:.1f} ms)",
                        ('ef_search', 'fused p50 ms', 'fused p95 ms', 'HNSW p50 ms',
                         'recall@10'),
                        [(ef, rec[f'ef{ef}']['recall_p50_ms'], rec[f'ef{ef}']['recall_p95_ms'],
                          rec[f'ef{ef}']['hnsw_p50_ms'], rec[f'ef{ef}']['recall_at_10'])
                         for ef in EF_SEARCH])
            print(f"full-text channel alone: p50 {rec['text_p50_ms']:.1f} ms, "
                  f"p95 {rec['text_p95_ms']:.1f} ms")
    path = write_result(args.name, doc, args.results)
    if not args.hub_only:
        plot(json.loads(path.read_text()), args.results / f'{args.name}.png')
    print(f'\nwrote {path}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
