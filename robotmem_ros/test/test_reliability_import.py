"""
An interrupted ``robotmem import`` run again gives the store an uninterrupted import gives.

The file is an export of a real store whose early memories are superseded by later ones, so
links cross batch boundaries. The interruption is a real one at a deterministic point: the CLI
is killed with SIGKILL once its first batch is committed, and, in process, the progress callback
raises KeyboardInterrupt (Ctrl-C) right after the first batch.
"""

from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import subprocess
import sys

from conftest import PACKAGE_DIR, wait_until
from engine_helpers import make_engine
import pytest
from robotmem_ros.types import PerceptionInput

SUPERSEDED = 2000  # four import batches of 500: links from early batches point past them


def write_export(tmp_path: pathlib.Path) -> pathlib.Path:
    """Export a store where memory i (i <= SUPERSEDED) is superseded by SUPERSEDED + i."""
    engine = make_engine(tmp_path, name='source.db')
    try:
        engine.learn('the pallet jack is charged overnight at dock two')
        engine.save_perceptions([
            PerceptionInput(f'bin {i} holds {i % 13} brackets of size M{i % 7 + 3}',
                            perception_type='inventory', session_id='shift-1' if i % 2 else '',
                            created_at=1_700_000_000.0 + i)
            for i in range(2 * SUPERSEDED - 1)])
        with engine.db.write() as conn:  # what consolidation or the decider leaves behind
            conn.executemany("UPDATE memories SET status = 'superseded', superseded_by = ? "
                             'WHERE id = ?',
                             [(SUPERSEDED + i, i) for i in range(1, SUPERSEDED + 1)])
        path = tmp_path / 'export.jsonl'
        engine.export_jsonl(str(path))
    finally:
        engine.close()
    return path


def snapshot(db_path: pathlib.Path) -> list[tuple]:
    """Every memory by content: status, link target's content, times, counters, tags."""
    engine = make_engine(db_path.parent, name=db_path.name)
    try:
        rows = engine.db.reader().execute(
            'SELECT m.content, m.type, m.status, t.content, m.session_id, m.confidence, '
            'm.created_at, m.access_count, m.embedded, (SELECT group_concat(tag) FROM tags '
            'WHERE memory_id = m.id) FROM memories m LEFT JOIN memories t '
            'ON t.id = m.superseded_by ORDER BY m.content').fetchall()
        report = engine.doctor(repair=False)
    finally:
        engine.close()
    assert report['ok'], report
    return [tuple(r) for r in rows]


def cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
    return subprocess.Popen([sys.executable, '-m', 'robotmem_ros.cli.main',
                             '--embed-backend', 'none', *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope='module')
def export(tmp_path_factory) -> tuple[pathlib.Path, list[tuple]]:
    """Return the export file and the store an uninterrupted import makes of it."""
    tmp = tmp_path_factory.mktemp('import')
    path = write_export(tmp)
    engine = make_engine(tmp, name='whole.db')
    try:
        report = engine.import_jsonl(str(path))
    finally:
        engine.close()
    assert report['imported'] == 2 * SUPERSEDED and not report['skipped']
    whole = snapshot(tmp / 'whole.db')
    linked = [row for row in whole if row[2] == 'superseded']
    assert len(linked) == SUPERSEDED and all(row[3] for row in linked)
    return path, whole


def test_import_interrupted_after_a_batch_then_rerun_equals_uninterrupted(export, tmp_path):
    path, whole = export
    engine = make_engine(tmp_path)

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt  # Ctrl-C right after the first batch committed

    try:
        with pytest.raises(KeyboardInterrupt):
            engine.import_jsonl(str(path), progress=interrupt)
        assert 0 < engine.db.reader().execute('SELECT COUNT(*) FROM memories').fetchone()[0] \
            < 2 * SUPERSEDED
        report = engine.import_jsonl(str(path))
        assert report['imported'] + len(report['skipped']) == 2 * SUPERSEDED
    finally:
        engine.close()
    assert snapshot(tmp_path / 'memory.db') == whole


def stored(db: pathlib.Path) -> int:
    try:
        with sqlite3.connect(f'file:{db}?mode=ro', uri=True) as conn:
            return conn.execute('SELECT COUNT(*) FROM memories').fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def test_cli_import_killed_then_rerun_equals_uninterrupted(export, tmp_path):
    path, whole = export
    db = tmp_path / 'memory.db'
    proc = cli('--db', str(db), '--json', 'import', str(path))
    # SIGKILL once a batch is committed: wherever it lands after that, the re-run must repair.
    assert wait_until(lambda: stored(db) > 0 or proc.poll() is not None)
    proc.kill()
    proc.wait(60)
    done = cli('--db', str(db), '--json', 'import', str(path))
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    assert json.loads(out)['imported'] + len(json.loads(out)['skipped']) == 2 * SUPERSEDED
    assert snapshot(db) == whole
