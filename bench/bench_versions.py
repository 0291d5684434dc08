"""
Two code versions on one existing store, in alternating worker processes (issue 15).

``bench_scale.py`` compares versions on two stores it fills itself (five minutes per version
at 1M). This opens a store already filled (its ``--work`` directory's ``scale.db``, or any
store) with each version in turn, round after round, so both see the same rows, indexes and
page cache, and the machine's drift falls on both. A worker opens the store as the node does,
waits until the vector index's approximate stage and the text index are ready, then times
recalls, recalls with ``datagen.context_filter``, learns of bench facts not yet stored, and
recalls that each follow a learn (embedding excluded: the real model's vectors are computed
beforehand), and reports its RSS.

Each call is timed twice: wall time, and the CPU time of the whole process (every thread, the
background ones included). On this 2-core machine a call cannot take less wall time than half
its CPU time, so the second says whether a latency target can be met by running work side by
side or only by doing less of it (docs/performance.md, "What a call costs in CPU").

Learns add rows: each round adds 2 × ``--calls`` facts per version (0.07 % of a 1M store over
the default run), so later rounds see a store a little larger for both versions alike. A
second run on the same store needs another ``--seed``: its facts would be stored already.
Both versions must read the store's schema: the newer one migrates it at its first open, and a
version from before that migration refuses it (schema 9 came with b89e829, 10 with abe5636, 11
with 016a367: a before-ref older than the store's schema needs its own store, or
``bench_scale.py``).

Usage::

    python bench/bench_versions.py --store /tmp/scale/scale.db --before-ref 21e9c63 \
        [--rounds 3] [--calls 60] [--name versions_1m]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

from common import (latency_summary, print_table, REPO_ROOT,  # noqa: I100,I101
                    RESULTS_DIR, wait_until_ready, write_run)
import datagen  # noqa: I201

MEASURES = ('recall', 'recall_context_filter', 'learn', 'recall_after_learn')
CPU = '_cpu'  # suffix of a measure's process CPU time per call


def worker(args: argparse.Namespace) -> None:
    """Open the store with the version on sys.path, time each measure, print one JSON line."""
    import psutil
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder
    from robotmem_ros.engine import MemoryEngine
    from precomputed import PrecomputedEmbedder

    real = load_embedder(MemoryConfig())
    pre = PrecomputedEmbedder(real, [], real.embed([]))
    queries = datagen.queries(2 * args.calls, seed=args.seed)
    # Facts of their own per worker: a fact the other version stored would be an exact repeat.
    facts = list(datagen.memories(2 * args.calls, seed=args.fact_seed, dup_rate=0.0))
    texts = [*queries, *(fact.text for fact in facts)]
    pre.add(texts, real.embed(texts))
    engine = MemoryEngine(MemoryConfig(db_path=args.store), pre)
    engine.recall('warm up', n=10)  # loads the indexes, starts what builds in the background
    wait_until_ready(engine)
    cfilter = datagen.context_filter(args.seed)
    # (untimed setup or None, timed call) per measure.
    calls: dict[str, list[tuple[Callable[[], Any] | None, Callable[[], Any]]]] = {
        'recall': [(None, functools.partial(engine.recall, q, n=10))
                   for q in queries[:args.calls]],
        'recall_context_filter': [
            (None, functools.partial(engine.recall, q, n=10, context_filter=cfilter))
            for q in queries[args.calls:]],
        'learn': [(None, functools.partial(engine.learn, f.text, f.context))
                  for f in facts[:args.calls]],
        # A robot's pattern: each recall follows a learn, whose FTS row changes the term
        # counts and which the text index does not hold yet.
        'recall_after_learn': [(functools.partial(engine.learn, f.text, f.context),
                                functools.partial(engine.recall, q, n=10))
                               for f, q in zip(facts[args.calls:], queries)]}
    row: dict[str, Any] = {}
    for measure in MEASURES:
        row[measure], row[measure + CPU] = [], []
        for setup, call in calls[measure]:
            if setup is not None:
                setup()
            began, used = time.perf_counter(), time.process_time()
            call()
            row[measure].append((time.perf_counter() - began) * 1000.0)
            row[measure + CPU].append((time.process_time() - used) * 1000.0)
    row['rss_mib'] = psutil.Process().memory_info().rss / 2**20
    engine.close()
    print(json.dumps(row), flush=True)


def _package(label: str, ref: str, where: pathlib.Path) -> pathlib.Path:
    from bench_scale import _before_tree
    return _before_tree(ref, where / label) if ref else REPO_ROOT / 'robotmem_ros'


def _run_worker(package: pathlib.Path, args: argparse.Namespace, seed: int,
                fact_seed: int) -> dict[str, Any]:
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(package), str(REPO_ROOT / 'bench'),
                                         env.get('PYTHONPATH', '')])
    env['ROBOTMEM_BENCH_PACKAGE'] = str(package)
    out = subprocess.run([sys.executable, __file__, '--worker', '--store', args.store,
                          '--calls', str(args.calls), '--seed', str(seed),
                          '--fact-seed', str(fact_seed)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    """Alternate the versions for ``--rounds`` rounds; write bench/results/NAME.json."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--store', required=True, help='an existing store (scale.db)')
    parser.add_argument('--before-ref', default='', help='git ref of the code before')
    parser.add_argument('--after-ref', default='', help='git ref of the code after '
                        '(default: this tree)')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--calls', type=int, default=60, help='calls per measure and round')
    parser.add_argument('--seed', type=int, default=101)
    parser.add_argument('--name', default='versions')
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--fact-seed', type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    samples: dict[str, dict[str, list[float]]] = {}
    rss: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix='versions_') as work:
        packages = {'before': _package('before', args.before_ref, pathlib.Path(work)),
                    'after': _package('after', args.after_ref, pathlib.Path(work))}
        for round_ in range(args.rounds):
            # Alternate which version goes first; each round's learns are new facts.
            order = ('before', 'after') if round_ % 2 == 0 else ('after', 'before')
            for number, label in enumerate(order):
                row = _run_worker(packages[label], args, args.seed + 1000 * round_,
                                  args.seed + 1000 * round_ + 500 + number)
                for measure in (*MEASURES, *(m + CPU for m in MEASURES)):
                    samples.setdefault(label, {}).setdefault(measure, []).extend(row[measure])
                rss.setdefault(label, []).append(row['rss_mib'])
                print(label, round_, {m: round(latency_summary(row[m])['p50_ms'], 2)
                                      for m in MEASURES}, flush=True)
    summary = {label: {**{m: latency_summary(v) for m, v in by_measure.items()},
                       'rss_mib': rss[label]} for label, by_measure in samples.items()}
    print_table(f'{args.store}: p50 / p95 ms, {args.rounds} rounds of {args.calls} calls',
                ['code', *MEASURES, 'RSS MiB'],
                [[label, *(f"{row[m]['p50_ms']:.2f} / {row[m]['p95_ms']:.2f}"
                           for m in MEASURES), f"{max(row['rss_mib']):.0f}"]
                 for label, row in summary.items()])
    print_table('CPU time of the process per call, p50 ms (all threads)', ['code', *MEASURES],
                [[label, *(f"{row[m + CPU]['p50_ms']:.2f}" for m in MEASURES)]
                 for label, row in summary.items()])
    return write_run(args, **summary)


if __name__ == '__main__':
    sys.exit(main())
