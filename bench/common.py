"""
Shared plumbing of the benchmark scripts: paths, machine identity, statistics, output.

Every result file carries the machine it was measured on (cores, CPU model, load) because a
latency number without its machine is meaningless; statistics are medians over repeats so one
noisy repeat (another process on a 2-core box) does not move the headline.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Sequence

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# The package under test goes first on sys.path: this tree's, or the one a side-by-side run
# names (bench_scale.py's --before-ref worker). Without the variable, a worker meant to run an
# older version imported this tree's code instead.
PACKAGE_DIR = pathlib.Path(os.environ.get('ROBOTMEM_BENCH_PACKAGE', REPO_ROOT / 'robotmem_ros'))
RESULTS_DIR = REPO_ROOT / 'bench' / 'results'
SETTLE_TIMEOUT_S = 900.0  # an IVF stage and a text index built at 1M take minutes
DEFAULT_EVAL = (REPO_ROOT / '..' / 'shared' / 'eval').resolve()
CACHE_DIR = pathlib.Path(os.environ.get('ROBOTMEM_BENCH_CACHE',
                                        '~/.cache/robotmem_bench')).expanduser()

if str(PACKAGE_DIR) not in sys.path:
    sys.path.insert(0, str(PACKAGE_DIR))


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (falls back to platform.processor())."""
    try:
        for line in pathlib.Path('/proc/cpuinfo').read_text().splitlines():
            if line.lower().startswith(('model name', 'hardware', 'cpu model')):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    try:
        return subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ''


def machine_info() -> dict[str, Any]:
    """Identity of the machine and software a result was measured with."""
    import sqlite3
    try:
        from pysqlite3 import dbapi2 as sqlite_mod
    except ImportError:
        sqlite_mod = sqlite3
    try:
        import onnxruntime
        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = ''
    return {
        'cores': os.cpu_count(),
        'cpu_model': cpu_model(),
        'machine': platform.machine(),
        'os': platform.platform(),
        'python': platform.python_version(),
        'sqlite': sqlite_mod.sqlite_version,
        'onnxruntime': ort_version,
        'loadavg_1m': round(os.getloadavg()[0], 2),
        'git_commit': _git_commit(),
        # Anything unusual about the tree measured (e.g. a local engine patch), set by the
        # person running the benchmark.
        'note': os.environ.get('ROBOTMEM_BENCH_NOTE', ''),
    }


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` in [0, 100] (numpy's default method)."""
    if not samples:
        return float('nan')
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def timed(calls: Sequence[Callable[[], Any]]) -> list[float]:
    """Run each call once; return the latencies in ms."""
    out = []
    for call in calls:
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def latency_summary(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / mean of one repeat's samples, in milliseconds."""
    return {'p50_ms': percentile(samples_ms, 50), 'p95_ms': percentile(samples_ms, 95),
            'mean_ms': statistics.fmean(samples_ms) if samples_ms else float('nan'),
            'count': len(samples_ms)}


def median_over_repeats(repeats: Sequence[dict[str, float]]) -> dict[str, float]:
    """Median of every numeric field across repeats, plus the per-repeat values of p50."""
    out: dict[str, Any] = {}
    for key in repeats[0]:
        values = [r[key] for r in repeats]
        out[key] = statistics.median(values)
    out['repeats'] = len(repeats)
    if 'p50_ms' in repeats[0]:
        out['p50_ms_each'] = [round(r['p50_ms'], 3) for r in repeats]
    return out


def write_result(name: str, payload: dict[str, Any],
                 results_dir: pathlib.Path = RESULTS_DIR) -> pathlib.Path:
    """Write ``results_dir/NAME.json`` with the machine block and a timestamp."""
    results_dir.mkdir(parents=True, exist_ok=True)
    doc = {'benchmark': name,
           'generated_at': datetime.datetime.now(datetime.timezone.utc).isoformat(
               timespec='seconds'),
           'machine': machine_info(), **payload}
    path = results_dir / f'{name}.json'
    path.write_text(json.dumps(doc, indent=1, sort_keys=False, default=_jsonable) + '\n')
    return path


def write_run(args: argparse.Namespace, **payload: Any) -> int:
    """Write ``args.name``.json with the run's arguments as ``params``; return exit code 0."""
    params = {k: v for k, v in vars(args).items() if k != 'results'}
    print(f'\nwrote {write_result(args.name, {"params": params, **payload}, args.results)}')
    return 0


def add_run_arguments(parser: argparse.ArgumentParser, name: str, name_help: str) -> None:
    """Add the options every measuring script shares: seed, cache, where and how to write."""
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--no-cache', action='store_true',
                        help='do not read/write the cached vectors')
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    parser.add_argument('--name', default=name, help=name_help)


def dedup_results(results: pathlib.Path) -> Iterator[tuple[pathlib.Path, dict[str, Any]]]:
    """Yield every dedup_<model>.json written with the judgment guard; say which are skipped."""
    for path in sorted(results.glob('dedup_*.json')):
        doc = json.loads(path.read_text())
        if 'sets' not in doc:
            continue
        if not all('guards' in r for r in doc['sets'].values()):
            print(f'{path.name}: written before the judgment guard (issue 12), skipped; '
                  'rerun bench/dedup_quality.py for this model')
            continue
        yield path, doc


def _jsonable(value: Any) -> Any:
    if hasattr(value, 'tolist'):
        return value.tolist()
    if isinstance(value, pathlib.Path):
        return str(value)
    raise TypeError(f'not JSON serializable: {type(value).__name__}')


def fmt(value: Any) -> str:
    """Compact cell text: 3 significant decimals for floats."""
    if isinstance(value, float):
        if value != value:
            return '-'
        return f'{value:.3f}' if abs(value) < 100 else f'{value:.1f}'
    return str(value)


def print_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print a fixed-width text table (plain text so logs and CI output stay readable)."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    print(f'\n{title}')
    print('  '.join(h.ljust(w) for h, w in zip(headers, widths)))
    print('  '.join('-' * w for w in widths))
    for row in cells:
        print('  '.join(c.rjust(w) for c, w in zip(row, widths)))
    sys.stdout.flush()


def rss_mb() -> float:
    """Resident set size of this process, in MiB."""
    import psutil
    return psutil.Process().memory_info().rss / 2**20


def wait_until_ready(engine: Any) -> None:
    """
    Wait for the approximate vector stage, the text index and the Jaccard postings.

    The text index serves a store large enough for it, the Jaccard postings a store small
    enough for them (engine/resident_text.py). They are built or caught up in the background
    after an open; until then the sign-bit scan and FTS5 answer, the costs of a start rather
    than of the steady state measured. The text index must hold every change, a previous
    process's learns included: until its worker has applied them (about a second), FTS5 ranks
    those memories apart.
    """
    from robotmem_ros.engine import text_log_store, vocab_store
    conn = engine.db.reader()
    text_index = vocab_store.fts_totals(conn)[0] >= engine.config.text_index_min_rows
    resident = getattr(engine.db, 'resident', None)  # absent in versions before it

    def postings_ready() -> bool:
        limit = getattr(engine.config, 'resident_text_max_rows', 0)
        if resident is None or not 0 < vocab_store.fts_totals(conn)[0] <= limit:
            return True  # none held at this size
        # A Jaccard query starts their build where none is held.
        return resident.overlapping(conn, frozenset({'warm'}), 1.0) is not None

    started = time.monotonic()
    while time.monotonic() - started < SETTLE_TIMEOUT_S:
        engine.db.vectors.refresh()
        held = engine.db.text.stats()
        text_ready = not text_index or (
            held['text_index_docs'] and held['text_index_seq'] >= text_log_store.last_change(conn))
        if not engine.db.vectors.stats().get('ann_building') and text_ready and postings_ready():
            return
        engine.recall('warm up', n=1)  # a search starts the text index's worker
        time.sleep(0.5)


def quiet_logs() -> None:
    """Keep engine warnings (expected in benchmarks: unreadable texts, fallbacks) off stdout."""
    import logging
    logging.getLogger('robotmem').setLevel(logging.ERROR)
