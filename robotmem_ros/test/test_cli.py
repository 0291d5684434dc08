"""The ``robotmem`` command driven as a subprocess on real store files."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest
from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import MemoryEngine
from robotmem_ros.types import PerceptionInput
from test_maintenance import make_old_duplicate, open_engine, raw, snapshot, USE

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def cli(db: pathlib.Path, *args: str, rc: int = 0) -> subprocess.CompletedProcess:
    """Run ``robotmem --db DB ARGS`` and check its exit code."""
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
    env['COLUMNS'] = '200'  # tables wide enough that a text is never wrapped mid-phrase
    proc = subprocess.run([sys.executable, '-m', 'robotmem_ros.cli.main', '--db', str(db),
                           *args], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == rc, f'rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}'
    return proc


def cli_json(db: pathlib.Path, *args: str) -> Any:
    return json.loads(cli(db, *args, '--json').stdout)


def one_line_error(proc: subprocess.CompletedProcess, text: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert 'Traceback' not in proc.stderr
    assert lines and lines[-1].startswith('robotmem: error: ') and text in lines[-1], proc.stderr


@pytest.fixture(scope='module')
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Build a store with an ended episode (perceptions, facts with positions), MiniLM vectors."""
    db = tmp_path_factory.mktemp('cli') / 'memory.db'
    engine = MemoryEngine.open(MemoryConfig(db_path=str(db)))
    session = engine.start_session(context={'task': 'pick_place'}).session_id
    start = engine.clock()
    engine.save_perceptions([PerceptionInput(f'{kind} reading {i}', kind, session_id=session,
                                             data={'i': i}, created_at=start + i)
                             for i, kind in enumerate(['vision', 'force'] * 4)])
    facts = [engine.learn(text, session_id=session, context={
        'task': {'success': ok}, 'spatial': {'object_position': [x, y, 0.0]}}).memory_id
        for text, ok, x, y in (('the red cup slipped when grasped from the side', False, .3, .1),
                               ('grasp the mug by its handle from above', True, .5, -.2),
                               ('the green box is heavy, lift with both arms', True, .1, .4))]
    engine.embed_pending()
    engine.end_session(session, outcome_score=0.6)
    engine.close()
    return {'db': db, 'session': session, 'facts': facts}


@pytest.fixture
def db(built: dict[str, Any], tmp_path: pathlib.Path) -> pathlib.Path:
    """Copy the built store for a test that writes."""
    copy = tmp_path / 'memory.db'
    shutil.copy(built['db'], copy)
    return copy


def test_usage_errors_exit_2(built):
    for args in ((), ('frobnicate',), ('history', 'abc'), ('recall', 'x', '--n', 'many'),
                 ('plot', 'map'), ('reindex', '--batch-size', '0')):
        proc = cli(built['db'], *args, rc=2)
        assert 'Traceback' not in proc.stderr


def test_stats(built, tmp_path):
    stats = cli_json(built['db'], 'stats')
    assert stats['memories_total'] == 11 and stats['by_type'] == {'perception': 8, 'fact': 3}
    model = MemoryConfig().embed_model
    assert stats['model_id'] == model and stats['sessions']['ended'] == 1
    table = cli(built['db'], 'stats').stdout
    assert 'by category' in table and model in table
    one_line_error(cli(tmp_path / 'none.db', 'stats', rc=1), 'no database at')
    assert not (tmp_path / 'none.db').exists()


def test_recall(built):
    result = cli_json(built['db'], 'recall', 'red cup slipped', '--embed-backend', 'none')
    assert result['mode'] == 'bm25_only'
    assert result['memories'][0]['id'] == built['facts'][0]
    episode = cli_json(built['db'], 'recall', '*', '--session', built['session'], '--n', '50',
                       '--embed-backend', 'none')
    assert episode['mode'] == 'all' and episode['total'] == 11
    near = cli_json(built['db'], 'recall', '*', '--spatial', json.dumps(
        {'field': 'spatial.object_position', 'target': [0.5, -0.2, 0.0]}),
        '--embed-backend', 'none')
    assert near['memories'][0]['id'] == built['facts'][1]
    assert 'red cup' in cli(built['db'], 'recall', 'red cup', '--embed-backend', 'none').stdout
    one_line_error(cli(built['db'], 'recall', 'x', '--filter', '{bad', '--embed-backend',
                       'none', rc=1), 'context_filter')


def test_learn(db):
    first = cli_json(db, 'learn', 'the charger is behind the blue bin', '--context',
                     '{"task": {"success": true}}', '--embed-backend', 'none')
    assert first['status'] == 'created'
    again = cli_json(db, 'learn', 'The charger is behind the  blue bin', '--embed-backend',
                     'none')
    assert (again['status'], again['method'], again['memory_id']) == (
        'duplicate', 'exact', first['memory_id'])
    one_line_error(cli(db, 'learn', '   ', '--embed-backend', 'none', rc=1), 'insight')
    one_line_error(cli(db, 'learn', 'the tray is empty', '--context', '[1]', '--embed-backend',
                       'none', rc=1), 'context')
    one_line_error(cli(db, 'learn', '\U0001f50b\u26a1', '--embed-backend', 'none', rc=1),
                   'nothing searchable')


def test_sessions_episode_history(built):
    sessions = cli_json(built['db'], 'sessions')
    assert [(s['id'], s['facts'], s['perceptions'], s['outcome_score']) for s in sessions] == [
        (built['session'], 3, 8, 0.6)]
    episode = cli_json(built['db'], 'episode', built['session'])
    times = [m['created_at'] for m in episode['memories']]
    assert len(times) == 11 and times == sorted(times)
    assert episode['session']['context'] == {'task': 'pick_place'}
    assert built['session'][:8] in cli(built['db'], 'episode', built['session']).stdout
    history = cli_json(built['db'], 'history', str(built['facts'][0]))
    assert history[0]['event'] == 'create'
    one_line_error(cli(built['db'], 'episode', 'nope', rc=1), 'unknown session')
    one_line_error(cli(built['db'], 'history', '99999', rc=1), 'does not exist')


def test_dedup_preview_then_apply(built, db):
    keep = built['facts'][0]
    conn = raw(db)
    old = make_old_duplicate(conn, keep, confidence=0.2, created_at=1.0)
    conn.close()
    preview = cli_json(db, 'dedup', '--dry-run')
    text = 'the red cup slipped when grasped from the side'
    assert preview == {'dry_run': True,
                       'operations': [{'old_id': old, 'keep_id': keep, 'preview': text}]}
    assert 'would supersede' in cli(db, 'dedup', '--dry-run').stdout
    assert cli_json(db, 'dedup')['operations'] == preview['operations']
    assert cli_json(db, 'dedup', '--dry-run')['operations'] == []
    assert cli_json(db, 'history', str(old))[-1]['event'] == 'supersede'
    one_line_error(cli(db, 'dedup', '--collection', '  ', rc=1), 'collection')


def test_export_import_round_trip(built, tmp_path):
    out, target = tmp_path / 'x.jsonl', tmp_path / 'robot2.db'
    assert cli_json(built['db'], 'export', str(out)) == {
        'file': str(out), 'sessions': 1, 'memories': 11}
    result = cli_json(target, 'import', str(out), '--embed-backend', 'none')
    assert (result['imported'], result['skipped'], result['embedded']) == (11, [], 0)
    assert snapshot(target) == snapshot(built['db'])
    assert len(cli_json(target, 'import', str(out), '--embed-backend', 'none')['skipped']) == 11
    assert cli(target, 'doctor').returncode == 0
    one_line_error(cli(target, 'import', str(tmp_path / 'missing.jsonl'), rc=1), 'no such file')
    out.write_text(out.read_text().replace('"kind": "episodic"', '"kind": "sometimes"', 1))
    one_line_error(cli(tmp_path / 'robot3.db', 'import', str(out), '--embed-backend', 'none',
                       rc=1), 'kind must be one of')


def test_doctor_detects_and_repairs(built, db, tmp_path):
    fact = built['facts'][0]
    conn = raw(db)
    conn.execute("UPDATE memories_fts SET body = 'broken' WHERE rowid = ?", (fact,))
    conn.execute('INSERT INTO memory_vectors(memory_id, collection, session_id, is_fact, code) '
                 'SELECT 777, collection, session_id, is_fact, code FROM memory_vectors '
                 'WHERE memory_id = ?', (fact,))
    conn.close()
    found = cli(db, 'doctor', '--json', rc=1)
    report = json.loads(found.stdout)
    assert report['problems']['fts_stale'] == 1 and report['problems']['vector_stray'] == 1
    assert 'doctor --repair' in found.stderr
    repaired = cli_json(db, 'doctor', '--repair')
    assert repaired['ok'] and repaired['repaired'] == {'fts_stale': 1, 'vector_stray': 1}
    assert 'OK' in cli(db, 'doctor').stdout
    bad = tmp_path / 'corrupt.db'
    bad.write_bytes(b'\x00garbage' * 512)
    one_line_error(cli(bad, 'doctor', '--repair', rc=1), 'not modified')
    one_line_error(cli(bad, 'stats', rc=1), 'not a valid robotmem database')
    assert bad.read_bytes() == b'\x00garbage' * 512


def test_reindex_resumes_after_interruption(db):
    engine = open_engine(db, backend='onnx', model=USE)

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.reindex(batch_size=4, progress=interrupt)
    engine.close()
    assert cli_json(db, 'stats')['reindex_in_progress']
    result = cli_json(db, 'reindex', '--embed-model', USE, '--batch-size', '4')
    assert result['resumed'] and result['processed'] == 11 - 4 and result['dim'] == 512
    stats = cli_json(db, 'stats')
    assert stats['model_id'] == USE and not stats['reindex_in_progress']
    assert stats['pending_embeddings'] == 0
    one_line_error(cli(db, 'reindex', '--embed-backend', 'none', rc=1),
                   'needs an embedding model')


def test_plots(built, tmp_path):
    timeline, top = tmp_path / 'episode.png', tmp_path / 'map.png'
    out = cli_json(built['db'], 'plot', 'episode', built['session'], '-o', str(timeline))
    assert out['points'] == 11 and timeline.read_bytes().startswith(PNG_MAGIC)
    out = cli_json(built['db'], 'plot', 'map', '--field', 'spatial.object_position',
                   '--color-by', 'outcome', '-o', str(top))
    assert out['points'] == 3 and top.read_bytes().startswith(PNG_MAGIC)
    one_line_error(cli(built['db'], 'plot', 'map', '--field', 'no.such.field', '-o',
                       str(top), rc=1), 'no active memory has a usable position')
    one_line_error(cli(built['db'], 'plot', 'episode', 'nope', '-o', str(timeline), rc=1),
                   'unknown session')
