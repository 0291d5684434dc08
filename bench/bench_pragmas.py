"""
SQLite page-cache settings (``mmap_size``, ``cache_size``) against learn and recall latency.

Runs on a copy of an existing store (for instance one filled by bench_scale.py's batch path,
with its text index and index snapshot beside it) with the real model's vectors precomputed,
so the figures are what the store costs. Settings take turns, each on a fresh engine that
waits for its background indexes (``common.wait_until_ready``), over several rounds, so a
change in machine load hits every setting alike. Every call gets its own query or fact (no
learn is a duplicate of an earlier one). A memory map's pages count in the process's RSS
(``RssFile``), so each setting's file-backed RSS is reported beside its latencies. A setting's
pragmas run after the engine's own (``default``: the writer at SQLite's page cache, every other
connection at ``reader_cache_kib``).

    python bench/bench_pragmas.py --store /tmp/scale/scale.db [--rounds 3] [--calls 40]
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile
from typing import Any, Sequence

from common import (latency_summary, print_table, RESULTS_DIR, timed,  # noqa: I100
                    wait_until_ready, write_run)
import datagen  # noqa: I201

SETTINGS = {
    'default': (),
    'mmap_256MiB': ('PRAGMA mmap_size=268435456',),
    'mmap_1GiB': ('PRAGMA mmap_size=1073741824',),
    'cache_64MiB': ('PRAGMA cache_size=-65536',),
    'mmap_1GiB_cache_64MiB': ('PRAGMA mmap_size=1073741824', 'PRAGMA cache_size=-65536'),
}
MEASURES = ('recall', 'recall_context_filter', 'learn')


def _copy_store(store: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    """Copy the store and the files beside it that share its name (indexes, WAL)."""
    for source in store.parent.glob(store.name + '*'):
        if source.is_dir():
            shutil.copytree(source, work / source.name)
        else:
            shutil.copy(source, work / source.name)
    return work / store.name


def _rss_file_mib() -> float:
    """File-backed resident pages of this process (a memory map's pages among them), MiB."""
    for line in pathlib.Path('/proc/self/status').read_text().splitlines():
        if line.startswith('RssFile:'):
            return int(line.split()[1]) / 1024
    return float('nan')


def main(argv: Sequence[str] | None = None) -> int:
    """Time recall, filtered recall and learn under each setting; write NAME.json."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--store', required=True, type=pathlib.Path,
                        help='an existing store (copied with its side files, not changed)')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--calls', type=int, default=40, help='calls per measure per round')
    parser.add_argument('--seed', type=int, default=7)
    parser.add_argument('--work', type=pathlib.Path, default=None,
                        help='where the copy is made (default: the system temp directory)')
    parser.add_argument('--name', default='pragmas')
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    from precomputed import PrecomputedEmbedder
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder
    from robotmem_ros.engine import database, MemoryEngine
    real = load_embedder(MemoryConfig())
    pre = PrecomputedEmbedder(real, [], real.embed([]))
    total = args.rounds * len(SETTINGS) * args.calls
    facts = list(datagen.memories(total, seed=args.seed, dup_rate=0.0))
    queries = list(datagen.queries(2 * total, seed=args.seed + 1))
    pre.add([fact.text for fact in facts], real.embed([fact.text for fact in facts]))
    pre.add(queries, real.embed(queries))
    cfilter = datagen.context_filter(args.seed)
    plain = database.connect
    times: dict[str, dict[str, list[float]]] = {
        name: {measure: [] for measure in MEASURES} for name in SETTINGS}
    rss_file: dict[str, list[float]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        path = _copy_store(args.store, pathlib.Path(work))
        at = 0
        for _ in range(args.rounds):
            for name, pragmas in SETTINGS.items():
                def connect(target: str, *, read_only: bool = False, cache_kib: int = 0,
                            pragmas: Sequence[str] = pragmas) -> Any:
                    conn = plain(target, read_only=read_only, cache_kib=cache_kib)
                    for pragma in pragmas:
                        conn.execute(pragma)
                    return conn
                database.connect = connect
                try:
                    engine = MemoryEngine(MemoryConfig(db_path=str(path)), pre)
                    engine.recall(queries[0], n=10)  # loads the indexes, starts their builds
                    wait_until_ready(engine)
                    span = slice(at, at + args.calls)
                    times[name]['recall'] += timed(
                        [lambda q=q: engine.recall(q, n=10) for q in queries[span]])
                    times[name]['recall_context_filter'] += timed(
                        [lambda q=q: engine.recall(q, n=10, context_filter=cfilter)
                         for q in queries[total:][span]])
                    times[name]['learn'] += timed(
                        [lambda f=f: engine.learn(f.text, f.context) for f in facts[span]])
                    rss_file[name].append(_rss_file_mib())
                    engine.close()
                finally:
                    database.connect = plain
                at += args.calls
    summary = {name: {**{measure: latency_summary(samples)
                         for measure, samples in by_measure.items()},
                      'rss_file_mib': rss_file[name]}
               for name, by_measure in times.items()}
    print_table(f'{args.store}: p50 / p95 ms, {args.rounds} rounds of {args.calls} calls',
                ['setting', *MEASURES, 'RssFile MiB'],
                [[name, *(f"{row[m]['p50_ms']:.2f} / {row[m]['p95_ms']:.2f}" for m in MEASURES),
                  f"{max(row['rss_file_mib']):.0f}"] for name, row in summary.items()])
    return write_run(args, **summary)


if __name__ == '__main__':
    sys.exit(main())
