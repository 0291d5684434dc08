"""
An interrupted ``robotmem import`` run again gives the store an uninterrupted import gives.

The file is an export of a real store whose early memories are superseded by later ones, so
links cross batch boundaries. The interruption is a real one at a deterministic point: the CLI
is killed with SIGKILL once its first batch is committed, and, in process, the progress callback
raises KeyboardInterrupt (Ctrl-C) right after the first batch.

An import checks the whole file before it writes: a line with a value the store must not hold (a
number JSON cannot carry, a lone surrogate SQLite cannot bind, runaway nesting) is refused by
file:line, and nothing from that file is stored, even when the bad line is the last one of a
file longer than one batch. What an earlier version's Learn stored and this one refuses (a long
or invisible category, an invisible session id) imports: a store's export always moves.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sqlite3
import subprocess
import sys

from conftest import PACKAGE_DIR, wait_until
from engine_helpers import make_engine
import pytest
from robotmem_ros.engine.transfer import BATCH
from robotmem_ros.engine.validation import MAX_CATEGORY_CHARS
from robotmem_ros.errors import ValidationError
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


# --- a bad line is refused before anything is written --------------------------------------

def small_export(tmp_path: pathlib.Path) -> list[dict]:
    """Return the lines of an export holding one session (with a context) and one fact."""
    engine = make_engine(tmp_path, name='small.db')
    try:
        session = engine.start_session({'robot': 'r1'}).session_id
        engine.learn('the red cup is on the table', {'robot': 'r1'}, session_id=session)
        engine.end_session(session, outcome_score=0.5)
        path = tmp_path / 'small.jsonl'
        engine.export_jsonl(str(path))
    finally:
        engine.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line['record'] for line in lines] == ['header', 'session', 'memory']
    assert isinstance(lines[1]['summary'], dict)
    return lines


def write_lines(path: pathlib.Path, lines: list[dict], literal: str = '') -> pathlib.Path:
    """Write ``lines``; ``literal`` is written raw where a line holds the string '@RAW@'."""
    path.write_text(''.join(json.dumps(line).replace('"@RAW@"', literal) + '\n'
                            for line in lines))
    return path


def assert_refused(tmp_path: pathlib.Path, path: pathlib.Path, pattern: str) -> None:
    """Import ``path`` into an empty store: refused as ``pattern``, and nothing stored."""
    engine = make_engine(tmp_path)
    try:
        with pytest.raises(ValidationError, match=pattern):
            engine.import_jsonl(str(path))
        reader = engine.db.reader()
        assert reader.execute('SELECT COUNT(*) FROM memories').fetchone()[0] == 0
        assert reader.execute('SELECT COUNT(*) FROM sessions').fetchone()[0] == 0
    finally:
        engine.close()


NOT_FINITE = ['NaN', 'Infinity', '-Infinity', '1e999', '-1e999']
PLACES = [('session', 'context'), ('session', 'summary'), ('memory', 'context')]


@pytest.mark.parametrize('record, field', PLACES, ids=[f'{r}.{f}' for r, f in PLACES])
@pytest.mark.parametrize('literal', NOT_FINITE)
def test_import_refuses_a_number_json_cannot_carry(tmp_path, record, field, literal):
    # Stored, such a value made every later export fail and leave its .partial file behind.
    lines = small_export(tmp_path)
    number = next(i for i, line in enumerate(lines, 1) if line['record'] == record)
    lines[number - 1][field] = {**(lines[number - 1][field] or {}), 'reading': '@RAW@'}
    bad = write_lines(tmp_path / 'bad.jsonl', lines, literal)
    # A literal JSON lacks fails the parse; a number past a double (1e999) is infinite, and the
    # check of the object names it.
    assert_refused(tmp_path, bad, re.escape(f'{bad}:{number}: ') + (
        rf"{field}\['reading'\].* not finite" if literal.endswith('e999')
        else 'invalid JSON .* is not a valid JSON number'))
    engine = make_engine(tmp_path, name='good.db')
    try:  # the same file without the bad number imports and exports again
        lines[number - 1][field]['reading'] = 1.5
        engine.import_jsonl(str(write_lines(tmp_path / 'good.jsonl', lines)))
        assert engine.export_jsonl(str(tmp_path / 'again.jsonl')) == {'sessions': 1,
                                                                      'memories': 1}
    finally:
        engine.close()


def many_memories(tmp_path: pathlib.Path) -> list[dict]:
    """Return an export whose memories fill one import batch and part of the next."""
    header, session, memory = small_export(tmp_path)
    count = BATCH + 200
    memories = [dict(memory, id=i, content=f'memory number {i} of the shelf inventory',
                     context={'i': i}) for i in range(1, count + 1)]
    return [dict(header, memories=count), session, *memories]


SURROGATES = {'tag': lambda m: m.update(tags=['shelf', '\ud800']),
              'context key': lambda m: m.update(context={'\udc80': 1}),
              'context value': lambda m: m.update(context={'note': ['fine', '\ud800']})}


@pytest.mark.parametrize('place', SURROGATES)
def test_import_refuses_a_lone_surrogate_before_any_batch_is_written(tmp_path, place):
    # SQLite cannot bind it: it failed the second batch after the session and the first
    # batch were committed, with a raw UnicodeEncodeError, leaving half an import.
    lines = many_memories(tmp_path)
    SURROGATES[place](lines[-1])
    bad = write_lines(tmp_path / 'bad.jsonl', lines)
    assert_refused(tmp_path, bad, re.escape(f'{bad}:{len(lines)}: ') + '.*lone surrogate')


def test_import_refuses_a_context_nested_too_deeply(tmp_path):
    lines = small_export(tmp_path)
    for levels in (100_000, 40):  # past the parser's recursion, and past max_json_depth
        bad = write_lines(tmp_path / 'bad.jsonl', lines[:2] + [
            dict(lines[2], context='@RAW@')], '{"a":' * levels + '1' + '}' * levels)
        assert_refused(tmp_path, bad, re.escape(f'{bad}:3: ') + '.*nested deeper than')


@pytest.mark.parametrize('field, value', [
    ('category', 'c' * (MAX_CATEGORY_CHARS + 44)), ('category', '\u200b'),
    ('session_id', '\u200b')], ids=['long-category', 'invisible-category', 'invisible-session'])
def test_import_takes_back_what_an_earlier_version_stored(tmp_path, field, value):
    # Learn refuses these now; a store written before holds them, and its export must move.
    lines = small_export(tmp_path)
    memory = next(line for line in lines if line['record'] == 'memory')
    if field == 'session_id':
        session = next(line for line in lines if line['record'] == 'session')
        session['id'] = value
    memory[field] = value
    engine = make_engine(tmp_path, name='good.db')
    try:
        assert engine.import_jsonl(str(write_lines(tmp_path / 'old.jsonl', lines)))[
            'imported'] == 1
        if field == 'session_id':
            engine.end_session(value)
            assert [s['ended_at'] is not None for s in engine.sessions()] == [True]
            assert len(engine.episode(value)['memories']) == 1
    finally:
        engine.close()


def test_import_takes_back_the_largest_perception_the_engine_stores(tmp_path):
    # data and metadata, each at the size and depth limits, sit one level down side by side.
    limits = {'max_json_bytes': 2048, 'max_json_depth': 4}
    deepest = {'a': {'b': {'c': 'x' * 1900}}}
    engine = make_engine(tmp_path, name='source.db', **limits)
    try:
        engine.save_perceptions([PerceptionInput('the gripper camera saw the red cup',
                                                 data=deepest, metadata=deepest)])
        engine.export_jsonl(str(tmp_path / 'x.jsonl'))
    finally:
        engine.close()
    engine = make_engine(tmp_path, **limits)
    try:
        assert engine.import_jsonl(str(tmp_path / 'x.jsonl'))['imported'] == 1
    finally:
        engine.close()
