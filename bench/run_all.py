"""
Run every benchmark (``make bench``), then derive thresholds and render the plots.

Each step runs as its own subprocess, one at a time (heavy steps would disturb each other's
timings, and a fresh process keeps RSS figures honest); a failing step is reported and the
others still run. ``--smoke`` runs a tiny size of each (about two minutes; CI) into
``bench/results/smoke/`` so the committed full-size results are never overwritten.

    python bench/run_all.py [--smoke] [--only engine,dedup,...] [--skip ingest]
                            [--eval ../shared/eval] [--results DIR]
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import time
from typing import Sequence

from common import DEFAULT_EVAL, RESULTS_DIR
from robotmem_ros.config import MemoryConfig

BENCH = pathlib.Path(__file__).resolve().parent
# the shipped default first; minilm-l6-int8 stays selectable with each script's --model
MODELS = (MemoryConfig().embed_model, 'use-multilingual-int8')


def steps(args: argparse.Namespace) -> dict[str, list[list[str]]]:
    """Command lines per step (script name, then its arguments)."""
    res, ev = str(args.results), str(args.eval)
    if args.smoke:
        return {
            'engine': [['bench_engine.py', '--smoke', '--results', res]],
            'dedup': [['dedup_quality.py', '--eval', ev, '--sets', 'mrpc,stsb_en,lcqmc',
                       '--limit', '80', '--model', m, '--results', res] for m in MODELS],
            'recall': [['recall_quality.py', '--eval', ev, '--limit', '10', '--max-docs',
                        '60', '--results', res]],
            'ingest': [['bench_ingest.py', '--smoke', '--results', res]],
            'embedder': [['bench_embedder.py', '--threads', '2', '--single', '20', '--batch',
                          '64', '--out', f'{res}/embedder.json']],
            # model_compare scores all of Cranfield whatever --limit says (minutes): full only.
            'decisions': [['decision_accuracy.py', '--out', f'{res}/decision_accuracy.json']],
            'thresholds': [['thresholds.py', '--results', res]],
            'plots': [['plots.py', '--results', res]],
        }
    return {
        'engine': [['bench_engine.py', '--results', res]],
        'dedup': [['dedup_quality.py', '--eval', ev, '--model', m, '--results', res]
                  for m in MODELS],
        'recall': [['recall_quality.py', '--eval', ev, '--model', m, '--results', res]
                   for m in MODELS] + [['recall_quality.py', '--eval', ev, '--decider', 'none',
                                        '--results', res]],
        'ingest': [['bench_ingest.py', '--results', res]],
        'fleet': [['bench_fleet.py', '--results', res]],
        'embedder': [['bench_embedder.py', '--out', f'{res}/embedder.json']],
        'models': [['model_compare.py', '--eval', ev, '--out', f'{res}/model_compare.json']],
        'decisions': [['decision_accuracy.py', '--out', f'{res}/decision_accuracy.json']],
        'thresholds': [['thresholds.py', '--results', res]],
        'plots': [['plots.py', '--results', res]],
    }


def run(command: list[str]) -> tuple[int, float]:
    """Run one bench script with this interpreter; return (exit code, seconds)."""
    script = BENCH / command[0]
    if not script.exists():
        print(f'--- {command[0]} is not present: skipped', flush=True)
        return 0, 0.0
    print(f'\n=== {" ".join(command)}', flush=True)
    start = time.perf_counter()
    code = subprocess.run([sys.executable, str(script), *command[1:]], cwd=BENCH.parent).returncode
    return code, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected steps in order and summarise."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--smoke', action='store_true', help='tiny sizes, ~2 minutes')
    parser.add_argument('--eval', type=pathlib.Path, default=DEFAULT_EVAL)
    parser.add_argument('--results', type=pathlib.Path, default=None,
                        help='default bench/results (bench/results/smoke with --smoke)')
    parser.add_argument('--only', default='', help='comma-separated steps to run')
    parser.add_argument('--skip', default='', help='comma-separated steps to leave out')
    args = parser.parse_args(argv)
    if args.results is None:
        args.results = RESULTS_DIR / 'smoke' if args.smoke else RESULTS_DIR
    args.results.mkdir(parents=True, exist_ok=True)
    plan = steps(args)
    chosen = [s for s in (args.only.split(',') if args.only else plan)
              if s not in args.skip.split(',')]
    unknown = set(chosen) - set(plan)
    if unknown:
        parser.error(f'unknown step(s) {", ".join(sorted(unknown))}; known: {", ".join(plan)}')
    summary = []
    for step in chosen:
        for command in plan[step]:
            code, seconds = run(command)
            summary.append((step, command[0], code, seconds))
    print('\nstep        script                 exit  seconds')
    for step, script, code, seconds in summary:
        print(f'{step:<11} {script:<22} {code:>4}  {seconds:7.1f}')
    print(f'results in {args.results}')
    return 1 if any(code for _, _, code, _ in summary) else 0


if __name__ == '__main__':
    raise SystemExit(main())
