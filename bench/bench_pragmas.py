"""
SQLite page-cache settings (``mmap_size``, ``cache_size``) against learn and recall latency.

Runs on a copy of an existing store (for instance one filled by bench_scale.py's batch path)
with the real model's vectors precomputed, so the figures are what the store costs. Settings
take turns, each on fresh connections, over several rounds, so a change in machine load hits
every setting alike.

    python bench/bench_pragmas.py --store /tmp/scale.db --rounds 3
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Sequence

from common import write_result  # noqa: I100
import datagen  # noqa: I201

SETTINGS = {
    'default': (),
    'mmap_256MiB': ('PRAGMA mmap_size=268435456',),
    'mmap_1GiB': ('PRAGMA mmap_size=1073741824',),
    'cache_64MiB': ('PRAGMA cache_size=-65536',),
    'mmap_1GiB_cache_64MiB': ('PRAGMA mmap_size=1073741824', 'PRAGMA cache_size=-65536'),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Time recall, filtered recall and learn under each setting; write pragmas.json."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--store', required=True, help='an existing store (copied, not changed)')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--calls', type=int, default=6, help='calls per measure per round')
    parser.add_argument('--name', default='pragmas')
    args = parser.parse_args(argv)
    from precomputed import PrecomputedEmbedder
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder
    from robotmem_ros.engine import database, MemoryEngine
    real = load_embedder(MemoryConfig())
    pre = PrecomputedEmbedder(real, [], real.embed([]))
    total = args.rounds * len(SETTINGS) * args.calls
    learns = list(datagen.memories(total, seed=7, dup_rate=0.0))
    queries = list(datagen.queries(total, seed=2))
    pre.add([m.text for m in learns], real.embed([m.text for m in learns]))
    pre.add(queries, real.embed(queries))
    cfilter = datagen.context_filter(0)
    plain = database._connect
    times: dict[str, dict[str, list[float]]] = {
        name: {'recall': [], 'recall_context_filter': [], 'learn': []} for name in SETTINGS}
    loads = []
    with tempfile.TemporaryDirectory() as work:
        path = pathlib.Path(work) / 'store.db'
        shutil.copy(args.store, path)
        call = 0
        for _ in range(args.rounds):
            for name, pragmas in SETTINGS.items():
                def connect(target: str, *, read_only: bool = False,
                            pragmas: Sequence[str] = pragmas) -> Any:
                    conn = plain(target, read_only=read_only)
                    for pragma in pragmas:
                        conn.execute(pragma)
                    return conn
                database._connect = connect
                engine = MemoryEngine(MemoryConfig(db_path=str(path)), pre)
                engine.recall(queries[0], n=10)  # loads the vector index
                for _ in range(args.calls):
                    query, memory = queries[call], learns[call]
                    call += 1
                    for key, run in (
                            ('recall', lambda: engine.recall(query, n=10)),
                            ('recall_context_filter',
                             lambda: engine.recall(query, n=10, context_filter=cfilter)),
                            ('learn', lambda: engine.learn(memory.text, memory.context))):
                        start = time.perf_counter()
                        run()
                        times[name][key].append((time.perf_counter() - start) * 1000.0)
                engine.close()
                database._connect = plain
            loads.append(os.getloadavg())
    doc: dict[str, Any] = {'store': args.store, 'rounds': args.rounds, 'calls': args.calls,
                           'load_avg': loads}
    for name, measures in times.items():
        doc[name] = {key: {'p50_ms': statistics.median(v), 'count': len(v)}
                     for key, v in measures.items()}
        print(name, {key: round(value['p50_ms'], 1) for key, value in doc[name].items()})
    write_result(args.name, doc)
    return 0


if __name__ == '__main__':
    sys.exit(main())
