"""
Bad disks: unusable path, corrupt file, disk full — clear errors, data never overwritten.

Tests run as root here, and root ignores file permissions, so "unwritable" is produced with
paths no user can create a file at: a database path whose parent is a regular file, or a path
that is a directory. Disk full is simulated with ``PRAGMA max_page_count`` on the writer
connection (SQLite then answers SQLITE_FULL exactly as on a full disk).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys

from conftest import PACKAGE_DIR, wait_until
from engine_helpers import count, make_engine
import pytest
from robotmem_ros.engine.doctor import check_file
from robotmem_ros.errors import CorruptDatabaseError, StorageError
from robotmem_ros.types import PerceptionInput

EXIT_TIMEOUT_S = 60.0  # hang guard only
UNLIMITED_PAGES = 1_073_741_823


def digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def exit_of(node) -> tuple[int, str]:
    """Wait for a node that must refuse to start; return (exit code, its whole output)."""
    try:
        code = node.proc.wait(EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        node.proc.kill()
        raise AssertionError(f'node did not exit:\n{node.log()}')
    return code, node.log()


def assert_one_fatal_line(output: str, *needles: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert '[FATAL]' in lines[0] and 'Traceback' not in output, output
    for needle in needles:
        assert needle in lines[0], output
    return lines[0]


def unusable_path(tmp_path: pathlib.Path, kind: str) -> pathlib.Path:
    blocker = tmp_path / 'file.txt'
    blocker.write_text('a regular file, not a directory')
    if kind == 'parent_is_file':
        return blocker / 'memory.db'
    if kind == 'ancestor_is_file':
        return blocker / 'sub' / 'memory.db'
    directory = tmp_path / 'dir.db'
    directory.mkdir()
    return directory


@pytest.mark.parametrize('kind', ['parent_is_file', 'ancestor_is_file', 'path_is_directory'])
def test_unusable_db_path_exits_nonzero_with_one_fatal_line(start_node, tmp_path, kind):
    db_path = unusable_path(tmp_path, kind)
    code, output = exit_of(start_node(db_path=db_path, wait_ready=False))
    assert code != 0
    line = assert_one_fatal_line(output, 'cannot start', str(db_path))
    assert 'File exists' not in line  # the errno of mkdir on a file says nothing useful


def corrupt_file(tmp_path: pathlib.Path, kind: str) -> pathlib.Path:
    path = tmp_path / 'memory.db'
    if kind == 'garbage':
        path.write_bytes(os.urandom(16_384))
        return path
    engine = make_engine(tmp_path)
    for i in range(30):
        engine.learn(f'fact {i}: the tool rack holds wrench number {i}')
    engine.close()
    data = bytearray(path.read_bytes())
    data[16:100] = os.urandom(84)  # keep the magic string, garble the page-1 header
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize('kind', ['garbage', 'garbled_header'])
def test_corrupt_db_refuses_to_start_and_is_never_modified(start_node, tmp_path, kind):
    path = corrupt_file(tmp_path, kind)
    before = digest(path)
    code, output = exit_of(start_node(db_path=path, wait_ready=False))
    assert code != 0
    assert_one_fatal_line(output, 'robotmem doctor', str(path))
    assert digest(path) == before
    # Only the owner lock file beside it (see store_owner.py); no -wal / -shm.
    names = sorted(p.name for p in tmp_path.glob('memory.db*'))
    assert names == ['memory.db', 'memory.db.lock']


@pytest.mark.parametrize('kind', ['garbage', 'garbled_header'])
def test_the_suggested_doctor_reports_and_never_modifies(tmp_path, kind):
    """Following the fatal line's advice (`robotmem doctor --db`) is safe on a damaged file."""
    path = corrupt_file(tmp_path, kind)
    before = digest(path)
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([str(PACKAGE_DIR), env.get('PYTHONPATH', '')])
    done = subprocess.run([sys.executable, '-m', 'robotmem_ros.cli.main', 'doctor', '--db',
                           str(path), '--repair'], env=env, capture_output=True, text=True,
                          timeout=EXIT_TIMEOUT_S)
    assert done.returncode != 0 and str(path) in done.stderr + done.stdout
    assert 'Traceback' not in done.stderr
    assert digest(path) == before


def test_corrupt_db_engine_raises_typed_error(tmp_path):
    path = corrupt_file(tmp_path, 'garbage')
    before = digest(path)
    with pytest.raises(CorruptDatabaseError, match='robotmem doctor'):
        make_engine(tmp_path)
    assert digest(path) == before


@pytest.fixture
def full_disk(tmp_path):
    """Yield an engine holding 20 facts whose writer may not grow the file any further."""
    engine = make_engine(tmp_path)
    for i in range(20):
        engine.learn(f'fact {i}: the blue box sits on shelf {i}')
    writer = engine.db._writer
    pages = writer.execute('PRAGMA page_count').fetchone()[0]
    writer.execute(f'PRAGMA max_page_count={pages}')
    yield engine
    engine.close()


def big_text(i: int) -> str:
    return f'observation {i}: ' + ' '.join(f'token{i}x{j}' for j in range(120))


def test_disk_full_writes_fail_clearly_and_change_nothing(full_disk):
    engine = full_disk
    rows = count(engine)
    for call in (lambda i: engine.learn(big_text(i)),
                 lambda i: engine.save_perceptions(
                     [PerceptionInput(description=big_text(i * 100 + k)) for k in range(20)]),
                 lambda i: engine.save_perception(PerceptionInput(description=big_text(i)))):
        for i in range(5):
            with pytest.raises(StorageError, match='disk .* is full'):
                call(i)
    assert count(engine) == rows
    assert not engine.db._writer.in_transaction


def test_disk_full_reads_keep_working(full_disk):
    engine = full_disk
    with pytest.raises(StorageError, match='full'):
        engine.learn(big_text(0))
    found = engine.recall('blue box shelf', n=5)
    assert found.total == 5
    assert all('blue box' in m.content for m in found.memories)
    assert engine.recall('*', n=100).total == 20
    assert engine.status().active_memories_count == 20


def test_disk_full_recovers_when_space_returns(full_disk):
    engine = full_disk
    with pytest.raises(StorageError, match='full'):
        engine.learn(big_text(0))
    engine.db._writer.execute(f'PRAGMA max_page_count={UNLIMITED_PAGES}')
    created = engine.learn(big_text(0))
    assert created.status == 'created'
    assert engine.recall('observation token0x7', n=1).memories[0].id == created.memory_id
    assert check_file(engine.db.path) == ['ok']


def test_recall_survives_a_store_that_refuses_the_access_count_write(tmp_path):
    engine = make_engine(tmp_path)
    learned = engine.learn('the charger is behind the red door')
    engine.db._writer.execute('PRAGMA query_only=ON')  # every write now fails
    with pytest.raises(StorageError):
        engine.learn('a new fact that cannot be written')
    found = engine.recall('charger red door')
    assert [m.id for m in found.memories] == [learned.memory_id]
    engine.db._writer.execute('PRAGMA query_only=OFF')
    # The refused count stayed pending (a recall still counts it) and is written once the
    # store accepts writes again.
    assert engine.recall('charger red door').memories[0].access_count == 2
    assert wait_until(lambda: engine.recaller.ctx.access.pending == 0)
    assert count(engine, 'access_count = 2') == 1
    engine.close()
