"""Engine maintenance on real SQLite files: dedup cleanup, doctor, reindex, stats, transfer."""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

from engine_helpers import make_engine, wait_for_postings, wait_for_text_index
import pytest
from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import consistency_store, database, MemoryEngine, store, text_index
from robotmem_ros.engine import vocab_store
from robotmem_ros.engine.doctor import check_file
from robotmem_ros.engine.maintenance import MAX_CLEANUP_OPS
from robotmem_ros.errors import CorruptDatabaseError, NotFoundError, StorageError, ValidationError
from robotmem_ros.types import PerceptionInput
import sqlite_vec

try:
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover
    import sqlite3  # type: ignore[no-redef]

MINILM = 'minilm-l6-int8'
USE = 'use-multilingual-int8'


def open_engine(path: pathlib.Path, backend: str = 'none', model: str = MINILM,
                **kwargs: Any) -> MemoryEngine:
    return MemoryEngine.open(MemoryConfig(db_path=str(path), embed_backend=backend,
                                          embed_model=model), **kwargs)


def raw(path: pathlib.Path) -> Any:
    """Open a plain connection, as a buggy tool or an old robotmem would (FKs not enforced)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    return conn


def make_old_duplicate(conn: Any, memory_id: int, *, confidence: float, created_at: float,
                       text: str | None = None) -> int:
    """Copy an active fact the way a DB written before the unique index could hold it."""
    conn.execute('DROP INDEX IF EXISTS uq_memories_active_fact')
    cur = conn.execute(
        'INSERT INTO memories(type, content, content_hash, collection, session_id, category, '
        'perception_type, kind, confidence, context_json, status, created_at, valid_from) '
        'SELECT type, COALESCE(?, content), content_hash, collection, session_id, category, '
        "perception_type, kind, ?, context_json, 'active', ?, ? FROM memories WHERE id = ?",
        (text, confidence, created_at, created_at, memory_id))
    new_id = cur.lastrowid
    body = conn.execute('SELECT body FROM memories_fts WHERE rowid = ?',
                        (memory_id,)).fetchone()[0]
    conn.execute('INSERT INTO memories_fts(rowid, body) VALUES (?, ?)', (new_id, body))
    return new_id


# --- exact duplicate cleanup -----------------------------------------------------------------

def test_cleanup_previews_then_keeps_highest_confidence_then_newest(tmp_path):
    db = tmp_path / 'm.db'
    engine = open_engine(db)
    a = engine.learn('the blue bin is next to the door').memory_id
    b = engine.learn('the torque limit of joint 3 is 40Nm').memory_id
    engine.close()
    conn = raw(db)
    # "The  BLUE bin..." normalizes to the same text: found although its stored hash differs.
    a_strong = make_old_duplicate(conn, a, confidence=0.99, created_at=1.0,
                                  text='The  BLUE bin is next to the door')
    conn.execute("UPDATE memories SET content_hash = 'legacy' WHERE id = ?", (a_strong,))
    b_old = make_old_duplicate(conn, b, confidence=0.9, created_at=1.0)
    b_new = make_old_duplicate(conn, b, confidence=0.9, created_at=2e9)
    conn.execute('UPDATE memories SET confidence = 0.9 WHERE id = ?', (b,))
    conn.close()

    engine = open_engine(db)
    preview = engine.cleanup_exact_duplicates(dry_run=True)
    assert {(op['old_id'], op['keep_id']) for op in preview} == {
        (a, a_strong), (b, b_new), (b_old, b_new)}
    assert all(op['preview'] for op in preview)
    assert engine.recall('*', n=10).total == 5  # the preview changed nothing

    applied = engine.cleanup_exact_duplicates(dry_run=False)
    assert applied == preview
    recalled = {r.id for r in engine.recall('*', n=10).memories}
    assert recalled == {a_strong, b_new}
    record = store.fetch_records(engine.db.reader(), [b_old])[b_old]
    assert (record.status, record.superseded_by) == ('superseded', b_new)
    trail = engine.history(b_old)
    assert trail[-1]['event'] == 'supersede' and trail[-1]['details'] == {'kept': b_new}
    assert engine.cleanup_exact_duplicates(dry_run=False) == []
    engine.close()


def test_cleanup_is_capped_per_call_and_doctor_restores_the_unique_index(tmp_path):
    db = tmp_path / 'm.db'
    engine = open_engine(db)
    keep = engine.learn('shelf B holds the spare grippers', collection='lab').memory_id
    engine.close()
    conn = raw(db)
    for i in range(MAX_CLEANUP_OPS + 5):
        make_old_duplicate(conn, keep, confidence=0.1, created_at=float(i))
    conn.close()

    engine = open_engine(db)
    assert engine.doctor()['warnings']['duplicate_fact_groups'] == 1
    assert engine.doctor()['problems']['unique_index_missing'] == 1
    assert engine.cleanup_exact_duplicates('default', dry_run=True) == []
    assert len(engine.cleanup_exact_duplicates('lab', dry_run=False)) == MAX_CLEANUP_OPS
    repaired = engine.doctor(repair=True)
    assert 'unique_index_missing' not in repaired['repaired']
    assert any('dedup' in note for note in repaired['notes'])
    assert len(engine.cleanup_exact_duplicates('lab', dry_run=False)) == 5
    assert engine.doctor(repair=True)['repaired'] == {'unique_index_missing': 1}
    assert engine.doctor()['ok']
    assert engine.learn('shelf B holds the spare grippers', collection='lab').memory_id == keep
    engine.close()


# --- doctor ----------------------------------------------------------------------------------

def test_doctor_stays_clean_while_memories_are_forgotten_between_checks(tmp_path):
    """
    A doctor run, then forgets, then doctor again on the same engine: the store is sound.

    SQLite 3.51's FTS5 check once reported "checksum mismatch" here, on the reader connection
    that had read the FTS table before the forget, and doctor stopped at the integrity check.
    """
    engine = open_engine(tmp_path / 'm.db')
    ids = [engine.learn(text).memory_id for text in (
        'the red cup is on the left shelf', 'grip force 12 N works for mugs',
        'the blue box sits near the sink', 'lidar noise is high by the window')]
    assert engine.doctor()['ok']
    for memory_id in ids[:2]:
        engine.forget(memory_id)
        report = engine.doctor()
        assert report['integrity'] == ['ok'] and report['ok'], report
    assert [m.id for m in engine.recall('blue box sink').memories] == [ids[2]]


def test_doctor_detects_and_repairs_without_an_embedder(tmp_path):
    db = tmp_path / 'm.db'
    engine = open_engine(db, backend='onnx')
    session = engine.start_session().session_id
    ids = [engine.learn(text, session_id=session).memory_id for text in (
        'the red cup is on the left shelf', 'the gripper must close at 12.5N for cups',
        'the lab door sticks in the morning', 'forklift zone is off limits after 6pm')]
    engine.forget(ids[3], reason='obsolete')
    engine.close()
    conn = raw(db)
    vectors_before = conn.execute('SELECT COUNT(*) FROM memory_vectors').fetchone()[0]
    conn.execute("UPDATE memories_fts SET body = 'garbage' WHERE rowid = ?", (ids[0],))
    conn.execute('DELETE FROM memories_fts WHERE rowid = ?', (ids[1],))
    conn.execute("INSERT INTO memories_fts(rowid, body) VALUES (?, 'forgotten words')",
                 (ids[3],))
    conn.execute('INSERT INTO memory_vectors(memory_id, collection, session_id, is_fact, code) '
                 'SELECT 9999, collection, session_id, is_fact, code FROM memory_vectors '
                 'WHERE memory_id = ?', (ids[0],))
    conn.execute('DELETE FROM memory_vectors WHERE memory_id = ?', (ids[2],))
    conn.execute('DELETE FROM memory_embeddings WHERE memory_id = ?', (ids[2],))
    # A sign-bit code that no longer matches its float vector (what the index scans).
    conn.execute('UPDATE memory_vectors SET code = zeroblob(48) WHERE memory_id = ?', (ids[1],))
    conn.execute("INSERT INTO tags(memory_id, tag) VALUES (8888, 'orphan')")
    conn.execute("UPDATE memories SET session_id = 'lost-session' WHERE id = ?", (ids[1],))
    conn.close()

    engine = open_engine(db)  # no embedder: the checks still cover the vector table
    report = engine.doctor()
    assert report['integrity'] == ['ok'] and report['vector_checks']
    assert {k: v for k, v in report['problems'].items() if v} == {
        'fts_stale': 1, 'fts_missing': 1, 'fts_stray': 1, 'vector_stray': 1,
        'vector_missing': 1, 'vector_metadata': 1, 'orphan_tags': 1, 'missing_sessions': 1}
    assert not report['ok'] and report['repaired'] == {}
    repaired = engine.doctor(repair=True)
    assert repaired['ok'] and repaired['repaired']['vector_stray'] == 1
    assert not any(engine.doctor()['problems'].values())
    assert engine.recall('red cup').memories[0].id == ids[0]  # FTS row rebuilt
    assert engine.recall('12.5N').memories[0].id == ids[1]
    assert engine.recall('forgotten words').total == 0
    assert engine.episode('lost-session')['memories'][0]['id'] == ids[1]
    assert engine.doctor()['warnings']['pending_embeddings'] == 2
    engine.close()
    conn = raw(db)
    # ids[2]'s vector was deleted, the stray and ids[1]'s stale row dropped: only ids[0] left.
    assert conn.execute('SELECT COUNT(*) FROM memory_vectors').fetchone()[0] == vectors_before - 2
    conn.close()
    engine = open_engine(db, backend='onnx')
    assert engine.embed_pending() == 2
    assert engine.doctor()['ok'] and engine.doctor()['warnings']['pending_embeddings'] == 0
    engine.close()


def test_an_engine_without_embedder_leaves_vectors_alone(tmp_path):
    db = tmp_path / 'm.db'
    engine = open_engine(db, backend='onnx')
    engine.learn('the charging dock is behind the blue bin')
    engine.close()
    engine = open_engine(db)
    engine.learn('the second arm is offline this week')
    engine.stats()
    engine.doctor(repair=True)
    engine.close()
    engine = open_engine(db, backend='onnx')
    assert not engine.embedding.reindex_needed
    assert engine.embed_pending() == 1
    assert engine.recall('charging dock').mode == 'hybrid'
    assert engine.doctor()['ok']
    engine.close()


def test_corrupt_file_gives_a_clear_error_and_is_never_written(tmp_path):
    db = tmp_path / 'm.db'
    garbage = b'this is not an sqlite file at all' * 200
    db.write_bytes(garbage)
    with pytest.raises(CorruptDatabaseError, match='not modified'):
        check_file(db)
    with pytest.raises(StorageError):
        open_engine(db)
    assert db.read_bytes() == garbage
    with pytest.raises(NotFoundError):
        check_file(tmp_path / 'missing.db')


def test_doctor_reports_a_locked_store_as_an_error_not_a_damaged_index(tmp_path, monkeypatch):
    """
    FTS5's index check is a write: another process holding the lock says nothing about the index.

    It used to count any StorageError as damage, so a store kept busy past the busy timeout
    was reported with a broken index, and ``--repair`` would drop and rebuild a sound one.
    """
    monkeypatch.setattr(database, 'BUSY_TIMEOUT_MS', 200)  # the real wait, made short
    db = tmp_path / 'm.db'
    engine = open_engine(db)
    engine.learn('the red cup is on the left shelf')
    holder = raw(db)
    holder.execute('BEGIN IMMEDIATE')  # another writer, as the CLI importing would be
    try:
        with pytest.raises(StorageError, match='locked') as caught:
            engine.doctor()
        assert not isinstance(caught.value, CorruptDatabaseError)
    finally:
        holder.execute('ROLLBACK')
        holder.close()
    report = engine.doctor(repair=True)
    assert report['ok'] and report['repaired'] == {}
    engine.close()


def test_a_damaged_fts_index_is_typed_as_corruption(tmp_path):
    """FTS5 reports some damage without "malformed" in its text; its result code tells it."""
    db = tmp_path / 'm.db'
    engine = open_engine(db)
    for i in range(30):
        engine.learn(f'box number {i} sits on shelf {i * 3}')
    engine.close()
    conn = raw(db)
    conn.execute('UPDATE memories_fts_data SET block = zeroblob(length(block)) '
                 'WHERE id = (SELECT MAX(id) FROM memories_fts_data)')
    conn.close()
    engine = open_engine(db)
    with pytest.raises(CorruptDatabaseError, match='fts5: corruption'):
        with engine.db.write() as conn:
            consistency_store.check_fts_index(conn)
    report = engine.doctor(repair=True)
    if report['integrity'] == ['ok']:  # an SQLite whose integrity_check skips FTS5 tables
        assert report['problems']['fts_index'] == 1 and report['repaired']['fts_index'] == 1
    else:  # SQLite's own check saw it first (3.51 does): nothing is repaired then
        assert not report['ok'] and report['repaired'] == {}
    engine.close()


def test_a_repair_reaches_the_text_index(tmp_path, monkeypatch):
    """
    FTS rows the repair writes again are logged for the text index.

    The triggers see no change of the memory itself, and the index would go on answering from
    its old documents.
    """
    monkeypatch.setattr(text_index, 'CATCH_UP_S', 0.05)
    engine = make_engine(tmp_path, text_index_min_rows=50)
    engine.save_perceptions([PerceptionInput(description=f'reading number {i} of the arm')
                             for i in range(200)])
    target, = engine.save_perceptions([PerceptionInput(
        description='the zebra cup sits on the shelf')])
    with engine.db.write() as conn:  # a damaged store: one memory's FTS row is missing
        store.unindex_text(conn, target)
    conn = engine.db.reader()
    wait_for_text_index(engine, conn)
    assert engine.doctor(repair=True)['repaired']['fts_missing'] == 1
    wait_for_text_index(engine, conn)
    assert [i for i, _ in store.fts_search(conn, '"zebra"', 'default', 5, now=time.time())
            ] == [target]
    engine.close()


def test_a_rebuilt_fts_table_repeats_no_structure_readers_hold(tmp_path):
    """
    A rebuilt FTS table repeats no structure record of an earlier one (rebuild_fts).

    FTS5 starts a recreated table's records over, and the postings of a small store and the
    term counts are keyed on them.
    """
    engine = make_engine(tmp_path)
    engine.learn('the torque wrench lives in the second drawer')
    conn = engine.db.reader()
    wait_for_postings(engine, conn)  # they hold the store as of the first learn
    held = vocab_store.structure(conn)
    later = engine.learn('the red cup is on the left shelf').memory_id
    for _ in range(2):  # a second rebuild must not repeat the first one's records either
        seen = vocab_store.structure(conn)
        with engine.db.write() as writer:
            consistency_store.rebuild_fts(writer)
        assert vocab_store.structure(conn) not in (held, seen)
    wait_for_postings(engine, conn)
    assert [i for i, _ in engine.db.resident.ranked(conn, ['cup', 'red'], 5)] == [later]
    assert engine.recall('red cup left shelf').memories[0].id == later
    engine.close()


# --- reindex ---------------------------------------------------------------------------------

def test_reindex_switches_model_and_resumes_after_an_interruption(tmp_path):
    db = tmp_path / 'm.db'
    engine = open_engine(db, backend='onnx')
    for i in range(7):
        engine.learn(f'shelf {i} holds box number {i * 11}')
    engine.save_perception(PerceptionInput('camera sees a green box', 'vision'))
    engine.close()

    engine = open_engine(db, backend='onnx', model=USE)
    assert engine.embedding.reindex_needed

    def stop_after_first_batch(done: int, total: int) -> None:
        assert total == 8
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.reindex(batch_size=3, progress=stop_after_first_batch)
    engine.close()
    conn = raw(db)
    meta = dict(conn.execute('SELECT key, value FROM meta'))
    assert meta['reindex_in_progress'] == USE and meta['embed_dim'] == '512'
    assert conn.execute('SELECT COUNT(*) FROM memories WHERE embedded = 0').fetchone()[0] == 5
    conn.close()

    engine = open_engine(db, backend='onnx', model=USE)
    seen: list[tuple[int, int]] = []
    result = engine.reindex(batch_size=3, progress=lambda d, t: seen.append((d, t)))
    assert result['resumed'] and not result['recreated_table']
    assert result['processed'] == 5 and seen[-1] == (5, 5)
    assert not engine.embedding.reindex_needed
    assert engine.recall('which shelf holds box 33').mode == 'hybrid'
    assert engine.doctor()['ok']
    assert engine.stats()['model_id'] == USE and not engine.stats()['reindex_in_progress']
    engine.close()
    assert not open_engine(db, backend='onnx', model=USE).embedding.reindex_needed


def test_a_reindex_by_another_process_is_followed_by_a_running_engine(tmp_path):
    # A node kept writing vectors of its model into a store that `robotmem reindex` had moved
    # to another: after a restart those memories were left out of every vector search, and no
    # reindex was asked for. It now stops writing them once another process changed the model.
    db = tmp_path / 'm.db'
    running = open_engine(db, backend='onnx')
    running.learn('shelf 1 holds the torque wrench', {'robot': 'arm-1'})
    other = open_engine(db, backend='onnx', model=USE)  # a second process, as the CLI is
    other.reindex()
    learned = running.learn('shelf 2 holds the drill bits')
    assert running.embedding.reindex_needed
    assert running.recall('drill bits').mode == 'bm25_only'
    assert running.embed_pending() == 0
    conn = raw(db)
    assert conn.execute('SELECT embedded FROM memories WHERE id = ?',
                        (learned.memory_id,)).fetchone()[0] == 0
    conn.close()
    assert other.embed_pending() == 1  # the store's model embeds what was learned meanwhile
    # A filtered recall loads the vector index, now with the other model's (wider) rows: the
    # way back must start it again, or every later search read past the query's code.
    filtered = running.recall('torque wrench', context_filter={'robot': 'arm-1'})
    assert [m.content for m in filtered.memories] == ['shelf 1 holds the torque wrench']
    back = open_engine(db, backend='onnx')  # and moved back to the running engine's model
    back.reindex()
    running.learn('shelf 3 holds the cable ties')
    assert not running.embedding.reindex_needed
    running.learn('shelf 4 holds the zip bags')
    assert running.recall('cable ties').mode == 'hybrid'
    assert running.recall('torque wrench', channels=('vector',)).memories[0].content == (
        'shelf 1 holds the torque wrench')
    for engine in (back, other, running):
        engine.close()
    engine = open_engine(db, backend='onnx')
    assert engine.embed_pending() == 1  # shelf 3: learned before the engine saw the way back
    assert engine.recall('drill bits', channels=('vector',)).memories[0].content == (
        'shelf 2 holds the drill bits')
    assert engine.db.vectors.stats()['entries'] == 4
    engine.close()


def test_reindex_needs_a_model(tmp_path):
    engine = open_engine(tmp_path / 'm.db')
    with pytest.raises(Exception, match='needs an embedding model'):
        engine.reindex()
    with pytest.raises(ValidationError):
        engine.reindex(batch_size=0)
    engine.close()


# --- stats, history --------------------------------------------------------------------------

def test_stats_and_history(tmp_path):
    engine = open_engine(tmp_path / 'm.db')
    session = engine.start_session(collection='kitchen').session_id
    fact = engine.learn('never put metal in the microwave', collection='kitchen',
                        session_id=session).memory_id
    engine.save_perceptions([PerceptionInput(f'frame {i}', 'vision', session_id=session,
                                             collection='kitchen') for i in range(3)])
    engine.update(fact, 'never put metal or foil in the microwave')
    stats = engine.stats()
    assert stats['memories_total'] == 4 and stats['by_collection'] == {'kitchen': 4}
    assert stats['by_type'] == {'perception': 3, 'fact': 1}
    assert stats['sessions'] == {'total': 1, 'ended': 0, 'open': 1}
    assert sum(b['count'] for b in stats['confidence_histogram']) == 4
    assert stats['oldest'] <= stats['newest']
    assert len(stats['growth_per_day']) == 7
    assert stats['growth_per_day'][-1]['facts'] == 1
    assert stats['growth_per_day'][-1]['perceptions'] == 3
    assert [e['event'] for e in engine.history(fact)] == ['create', 'update']
    assert engine.history(fact)[1]['old_content'] == 'never put metal in the microwave'
    with pytest.raises(NotFoundError):
        engine.history(12345)
    with pytest.raises(ValidationError):
        engine.history(0)
    with pytest.raises(NotFoundError):
        engine.episode('no-such-session')
    engine.close()


# --- export / import -------------------------------------------------------------------------

FIELDS = ('type', 'content', 'collection', 'session_id', 'category', 'perception_type', 'kind',
          'confidence', 'status', 'created_at', 'last_accessed', 'last_seen', 'decay_ref',
          'valid_from', 'valid_until', 'stored_at', 'access_count', 'reinforce_count',
          'context_json')


def snapshot(path: pathlib.Path) -> tuple[list[tuple], list[tuple], dict[str, list[str]]]:
    """Every exported field of every memory (ids replaced by content), sessions, tags."""
    conn = raw(path)
    conn.row_factory = sqlite3.Row
    rows = conn.execute('SELECT * FROM memories ORDER BY created_at, content').fetchall()
    text = {r['id']: r['content'] for r in rows}
    memories = [tuple(r[f] for f in FIELDS) + (text.get(r['superseded_by']),) for r in rows]
    sessions = [tuple(r) for r in conn.execute(
        'SELECT id, collection, context_json, started_at, ended_at, outcome_score, '
        'summary_json FROM sessions ORDER BY id')]
    tags: dict[str, list[str]] = {}
    for mid, tag in conn.execute('SELECT memory_id, tag FROM tags ORDER BY tag'):
        tags.setdefault(text[mid], []).append(tag)
    conn.close()
    return memories, sessions, tags


def build_store(path: pathlib.Path) -> MemoryEngine:
    engine = open_engine(path)
    session = engine.start_session(context={'task': 'pick'}, collection='arm').session_id
    engine.learn('the gripper must close at 12.5N for cups', collection='arm',
                 context={'spatial': {'object_position': [0.1, 0.2, 0.0]}}, session_id=session)
    engine.learn('red cup slipped when grasped from the side', collection='arm',
                 context={'task': {'success': False}}, session_id=session)
    engine.learn('the gripper must close at 12.5N for cups', collection='arm')  # reinforce
    engine.save_perceptions([PerceptionInput(f'wrist camera frame {i}', 'vision',
                                             data={'i': i}, session_id=session,
                                             collection='arm', created_at=1e9 + i)
                             for i in range(4)])
    engine.recall('gripper cups', collection='arm')  # access counts
    old = engine.learn('bin 4 is empty', collection='arm').memory_id
    engine.update(old, 'bin 4 holds screws')
    gone = engine.learn('temporary note', collection='arm').memory_id
    engine.forget(gone)
    engine.end_session(session, outcome_score=0.75)
    engine.learn('a fact in another collection')
    engine.close()
    conn = raw(path)  # a superseded fact with its keeper, as consolidation leaves them
    conn.execute("UPDATE memories SET status = 'superseded', superseded_by = 1, "
                 'valid_until = created_at + 5 WHERE id = 2')
    conn.close()
    return engine


def test_export_import_round_trip_is_exact_and_idempotent(tmp_path):
    src, dst, out = tmp_path / 'a.db', tmp_path / 'b.db', tmp_path / 'x.jsonl'
    build_store(src)
    engine = open_engine(src)
    calls: list[tuple[int, int]] = []
    counts = engine.export_jsonl(str(out), progress=lambda d, t: calls.append((d, t)))
    engine.close()
    assert counts == {'sessions': 1, 'memories': 8} and calls[-1] == (8, 8)
    assert not out.with_name(out.name + '.partial').exists()

    engine = open_engine(dst)
    report = engine.import_jsonl(str(out))
    assert report['imported'] == 8 and report['skipped'] == [] and report['sessions'] == 1
    again = engine.import_jsonl(str(out))
    assert again['imported'] == 0 and len(again['skipped']) == 8
    assert engine.doctor()['ok']
    engine.close()
    source, target = snapshot(src), snapshot(dst)
    forgotten = [m for m in source[0] if m[8] == 'forgotten']
    assert len(forgotten) == 1
    assert target[0] == [m for m in source[0] if m[8] != 'forgotten']
    assert target[1] == source[1]
    assert target[2] == {k: v for k, v in source[2].items() if k != 'temporary note'}


def test_import_validates_the_whole_file_first(tmp_path):
    src, out = tmp_path / 'a.db', tmp_path / 'x.jsonl'
    build_store(src)
    engine = open_engine(src)
    engine.export_jsonl(str(out), collection='arm')
    engine.close()
    lines = out.read_text().splitlines()
    broken = json.loads(lines[-1])
    broken['confidence'] = 'high'
    out.write_text('\n'.join(lines[:-1] + [json.dumps(broken)]) + '\n')
    engine = open_engine(tmp_path / 'b.db')
    with pytest.raises(ValidationError, match=f':{len(lines)}: confidence'):
        engine.import_jsonl(str(out))
    assert engine.stats()['memories_total'] == 0
    out.write_text('{"hello": 1}\n')
    with pytest.raises(ValidationError, match='not a robotmem export'):
        engine.import_jsonl(str(out))
    engine.close()
