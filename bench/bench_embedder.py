"""
Embedder speed: single-sentence latency, batch throughput, load time and memory.

Each (model, threads) case runs in a fresh subprocess so load time and RSS are not flattered by
an earlier case. Prints a table and writes bench/results/embedder.json.

    python bench/bench_embedder.py [--models minilm-l6-dq use-multilingual-int8]
                                   [--threads 1 2] [--model-dir DIR ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort
import psutil

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'robotmem_ros'))

from robotmem_ros.config import MemoryConfig  # noqa: E402
from robotmem_ros.embedding import load_embedder  # noqa: E402

BUNDLED = ['minilm-l6-int8', 'minilm-l6-dq', 'use-multilingual-int8']


def robot_sentences(n: int) -> list[str]:
    """Short, varied facts of the kind a robot stores (10-20 tokens each)."""
    subjects = ['The robot', 'Arm 2', 'The mobile base', 'The gripper', 'Operator Anna']
    verbs = ['placed', 'picked up', 'dropped', 'inspected', 'could not reach']
    objects = ['the blue box', 'a red cup', 'the torque wrench', 'two bottles', 'the tray']
    places = ['on shelf {}', 'near the kitchen door', 'in bin {}', 'at dock {}',
              'beside the charger']
    combos = itertools.cycle(itertools.product(subjects, verbs, objects, places))
    return [f'{s} {v} {o} {p.format(i % 17)} at {8 + i % 10}:{i % 60:02d}.'
            for i, (s, v, o, p) in zip(range(n), combos)]


def machine() -> dict:
    """Describe the machine the numbers were measured on."""
    model = platform.processor()
    try:
        for line in pathlib.Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                model = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    return {'cpu': model, 'logical_cores': os.cpu_count(),
            'physical_cores': psutil.cpu_count(logical=False),
            'onnxruntime': ort.__version__, 'python': platform.python_version(),
            'load_avg_at_start': os.getloadavg()}


def run_case(model: str, threads: int, n_single: int, n_batch: int) -> dict:
    """Measure one (model, threads) case in this process."""
    proc = psutil.Process()
    rss_before = proc.memory_info().rss
    config = MemoryConfig(embed_threads=threads, query_cache_size=0)
    config = config.replace(model_dir=model) if os.path.isdir(model) else \
        config.replace(embed_model=model)
    started = time.perf_counter()
    embedder = load_embedder(config)
    load_s = time.perf_counter() - started
    rss_added = proc.memory_info().rss - rss_before
    sentences = robot_sentences(max(n_single, n_batch))
    for text in sentences[:20]:
        embedder.embed([text])
    latencies = []
    for text in sentences[:n_single]:
        t0 = time.perf_counter()
        embedder.embed([text])
        latencies.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    embedder.embed(sentences[:n_batch])
    batch_s = time.perf_counter() - t0
    return {'model': embedder.model_id, 'threads': threads, 'device': embedder.device,
            'load_s': load_s, 'rss_added_mb': rss_added / 2**20,
            'single_p50_ms': float(np.percentile(latencies, 50) * 1e3),
            'single_p95_ms': float(np.percentile(latencies, 95) * 1e3),
            'batch_per_s': n_batch / batch_s, 'batch_ms_per_item': batch_s / n_batch * 1e3,
            'rss_after_mb': proc.memory_info().rss / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--models', nargs='*', default=BUNDLED)
    parser.add_argument('--model-dir', nargs='*', default=[], help='extra model_dir cases')
    parser.add_argument('--threads', nargs='*', type=int, default=[1, 2])
    parser.add_argument('--single', type=int, default=300, help='single-sentence calls')
    parser.add_argument('--batch', type=int, default=2048, help='sentences in the batch run')
    parser.add_argument('--out', default=str(ROOT / 'bench/results/embedder.json'))
    parser.add_argument('--case', nargs=2, metavar=('MODEL', 'THREADS'), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), args.single, args.batch)))
        return
    rows = []
    for model in args.models + args.model_dir:
        for threads in args.threads:
            out = subprocess.run(
                [sys.executable, __file__, '--case', model, str(threads),
                 '--single', str(args.single), '--batch', str(args.batch)],
                check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
    header = (f'{"model":<24}{"thr":>4}{"load s":>8}{"RSS+ MB":>9}{"p50 ms":>8}{"p95 ms":>8}'
              f'{"batch/s":>9}{"ms/item":>9}')
    print(header)
    for r in rows:
        print(f'{r["model"]:<24}{r["threads"]:>4}{r["load_s"]:>8.2f}{r["rss_added_mb"]:>9.0f}'
              f'{r["single_p50_ms"]:>8.2f}{r["single_p95_ms"]:>8.2f}{r["batch_per_s"]:>9.0f}'
              f'{r["batch_ms_per_item"]:>9.2f}')
    info = machine()
    print(f'machine: {info["cpu"]}, {info["logical_cores"]} logical cores, '
          f'onnxruntime {info["onnxruntime"]}; {len(robot_sentences(1)[0].split())}-word '
          f'robot facts')
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps({'machine': info, 'results': rows}, indent=2))


if __name__ == '__main__':
    main()
