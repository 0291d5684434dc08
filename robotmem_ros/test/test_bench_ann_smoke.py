"""
bench/bench_ann.py still runs against the engine it calls (VectorIndex, the store's SQL).

A tiny size only (2 000 vectors, 10 queries); no timing is asserted. The sign-bit row uses the
engine's own index on a real SQLite store, so a change to the engine's vector code that breaks
the benchmark fails here. Filtered subsets at this size are smaller than the rescoring pool, so
the engine ranks them exactly: their recall must be 1.0. The faiss row runs where faiss-cpu is
installed (requirements/runtime.txt; a robot may run without it).
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCH = REPO / 'bench' / 'bench_ann.py'
HAS_FAISS = importlib.util.find_spec('faiss') is not None


def _run(tmp_path, candidates, *extra):
    if not BENCH.exists():
        pytest.skip('bench/bench_ann.py not present')
    env = dict(os.environ, ROBOTMEM_BENCH_CACHE=str(tmp_path / 'cache'), TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, str(BENCH), '--sizes', '2000', '--queries', '10',
                           '--pool', '200', '--candidates', candidates, '--search-cap-s', '30',
                           '--results', str(tmp_path), '--work', str(tmp_path), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((tmp_path / 'ann_candidates.json').read_text())
    assert doc['machine']['cores'] >= 1
    (size,) = doc['sizes']
    assert size['n'] == 2000
    return {row['candidate']: row for row in size['candidates']}


def _check_row(row, held):
    assert row['held'] == held
    for by_filter in row['search'].values():
        for stats in by_filter.values():
            assert stats['queries'] == 10
            assert 0.0 <= stats['recall_at_10'] <= 1.0
            assert 0 < stats['p50_ms'] <= stats['p95_ms']


def test_engine_sign_bits_are_exact_on_small_filtered_sets(tmp_path):
    rows = _run(tmp_path, 'signbit')
    row = rows['signbit (engine today)']
    _check_row(row, 2000)
    search = row['search']['']
    assert search['1%']['recall_at_10'] == 1.0
    assert search['10%']['recall_at_10'] == 1.0
    assert search['10%']['returned_min'] == 10
    assert row['add_ms']['count'] == 200
    assert row['index_bytes'] > 0


@pytest.mark.skipif(not HAS_FAISS, reason='faiss-cpu (requirements/runtime.txt) not installed')
def test_faiss_ivfpq_refine_honours_the_filter(tmp_path):
    rows = _run(tmp_path, 'faiss-ivfpq-sq6')
    (row,) = rows.values()
    _check_row(row, 2000)
    assert row['file_bytes'] > 0 and row['load_s'] >= 0
    for by_filter in row['search'].values():
        assert by_filter['10%']['returned_min'] == 10


@pytest.mark.skipif(not HAS_FAISS, reason='faiss-cpu (requirements/runtime.txt) not installed')
def test_the_engine_stage_probes_more_lists_for_a_selective_filter(tmp_path):
    rows = _run(tmp_path, 'engine-stage', '--nprobes', '8')
    (row,) = rows.values()
    _check_row(row, 2000)
    assert row['index_bytes'] > 0
    search = row['search']['nprobe=8']
    # 8 of 44 lists hold one or two of the 1 % filter's 7 rows (its seeded draw); 1/sqrt(share)
    # times as many (136) are every list, so all 7 are candidates and the floats rank them.
    assert search['1%']['recall_at_10'] == 1.0
    assert search['10%']['returned_min'] == 10
