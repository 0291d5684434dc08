"""
Consistency checks of a store, and their repair in one transaction.

``memories`` is the source of truth; the FTS index, the vector table, tags, history and
sessions are derived from or hang off it. Every check counts rows that disagree with it and
every repair makes the derived row agree again (or marks the memory for ``embed_pending``).
Nothing is repaired in a file that fails SQLite's own integrity check: that needs a backup.
"""

from __future__ import annotations

import pathlib
from typing import Any, TYPE_CHECKING

import numpy as np

from robotmem_ros.engine import schema, store
from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.database import _connect, classify, DatabaseError, Error as SqlError
from robotmem_ros.engine.vector_index import code_of
from robotmem_ros.errors import CorruptDatabaseError, NotFoundError

if TYPE_CHECKING:
    from robotmem_ros.engine.engine import MemoryEngine

UNIQUE_INDEX = 'uq_memories_active_fact'
PROBLEMS = ('fts_missing', 'fts_stale', 'fts_stray', 'fts_index', 'vector_missing',
            'vector_stray', 'vector_metadata', 'orphan_tags', 'orphan_history',
            'missing_sessions', 'unique_index_missing')


def check_file(path: pathlib.Path) -> list[str]:
    """
    Run ``PRAGMA integrity_check`` on a read-only connection; ``['ok']`` when sound.

    Runs before anything opens the file for writing, so a damaged file is looked at, never
    touched (opening for writing would switch its journal mode and may checkpoint into it).
    """
    if not path.is_file():
        raise NotFoundError(f'no database at {path}')
    try:
        conn = _connect(str(path), read_only=True)
        try:
            return [row[0] for row in conn.execute('PRAGMA integrity_check')]
        finally:
            conn.close()
    except DatabaseError as exc:
        raise CorruptDatabaseError(
            f'{path} is not a readable SQLite database ({exc}); it was not modified. Restore '
            f'it from a backup or salvage it with `sqlite3 {path} .recover`.') from exc


def doctor(engine: 'MemoryEngine', repair: bool) -> dict[str, Any]:
    """Check (and with ``repair`` fix) the store; see the module docstring."""
    try:
        return _doctor(engine, repair)
    except SqlError as exc:
        raise classify(exc, engine.db.path) from exc


def _doctor(engine: 'MemoryEngine', repair: bool) -> dict[str, Any]:
    # On a fresh connection: SQLite 3.51's FTS5 check reports a false "checksum mismatch" on a
    # connection that read the FTS table before another connection changed it.
    integrity = check_file(engine.db.path)
    report: dict[str, Any] = {'db_path': str(engine.db.path), 'integrity': integrity,
                              'vector_checks': False, 'problems': {}, 'warnings': {},
                              'repaired': {}, 'notes': []}
    if integrity != ['ok']:
        report['notes'].append('SQLite integrity check failed: nothing was checked further or '
                               'repaired; restore a backup or salvage with `sqlite3 .recover`')
        report['ok'] = False
        return report
    found = _Findings(engine)
    report['vector_checks'] = found.vector_checks
    report['problems'] = found.counts()
    report['warnings'] = found.warnings()
    if not found.vector_checks:
        report['notes'].append('sqlite-vec is not loadable here: vector checks skipped')
    if repair and any(report['problems'].values()):
        with engine.db.write() as wconn:
            report['repaired'] = _repair(wconn, found, engine)
        found = _Findings(engine)
    if found.duplicate_groups and not found.has_unique_index:
        report['notes'].append('duplicate active facts block the unique index: run '
                               '`robotmem dedup`, then `robotmem doctor --repair`')
    report['ok'] = not any(found.counts().values())
    return report


class _Findings:
    """Ids (or counts) of every inconsistency, gathered on one reader snapshot."""

    def __init__(self, engine: 'MemoryEngine') -> None:
        conn = engine.db.reader()
        conn.execute('BEGIN')
        try:
            self._gather(conn, engine)
        finally:
            conn.execute('ROLLBACK')

    def _gather(self, conn: Any, engine: 'MemoryEngine') -> None:
        rows = conn.execute('SELECT id, status, embedded, content, collection, category, kind, '
                            'session_id FROM memories').fetchall()
        indexed = dict(conn.execute('SELECT rowid, body FROM memories_fts').fetchall())
        live = {r['id']: r for r in rows if r['status'] != 'forgotten'}
        self.fts_missing = [mid for mid in live if mid not in indexed]
        self.fts_stray = [mid for mid in indexed if mid not in live]
        self.fts_stale = [mid for mid, r in live.items() if mid in indexed
                          and indexed[mid] != textmod.fts_index_text(r['content'])]
        self.fts_index = _fts_index_problem(engine)
        self.vector_checks = True
        self.vector_missing: list[int] = []
        self.vector_stray: list[int] = []
        self.vector_metadata: list[int] = []
        if self.vector_checks:
            self._vectors(conn, {r['id']: r for r in rows if r['status'] == 'active'})
        self.orphan_tags = _count(conn, 'tags')
        self.orphan_history = _count(conn, 'history')
        self.missing_sessions = [r[0] for r in conn.execute(
            'SELECT session_id FROM memories WHERE session_id IS NOT NULL UNION '
            'SELECT session_id FROM session_outcomes EXCEPT SELECT id FROM sessions')]
        self.has_unique_index = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?",
            (UNIQUE_INDEX,)).fetchone() is not None
        self.duplicate_groups = conn.execute(
            "SELECT COUNT(*) FROM (SELECT 1 FROM memories WHERE status = 'active' AND "
            "type = 'fact' GROUP BY collection, content_hash HAVING COUNT(*) > 1)").fetchone()[0]
        self.pending = sum(1 for r in rows if r['status'] == 'active' and r['embedded'] == 0)
        self.reindex_in_progress = store.get_meta(conn, 'reindex_in_progress') is not None
        self.reindex_needed = engine.embedding.reindex_needed

    def _vectors(self, conn: Any, active: dict[int, Any]) -> None:
        vecs = {r[0]: (r[1], r[2]) for r in conn.execute(
            'SELECT v.memory_id, v.code, e.embedding FROM memory_vectors v '
            'LEFT JOIN memory_embeddings e ON e.memory_id = v.memory_id')}
        vecs.update((r[0], (b'', r[1])) for r in conn.execute(
            'SELECT memory_id, embedding FROM memory_embeddings WHERE memory_id NOT IN '
            '(SELECT memory_id FROM memory_vectors)'))
        self.vector_missing = [mid for mid, r in active.items()
                               if r['embedded'] == 1 and mid not in vecs]
        self.vector_stray = [mid for mid in vecs if mid not in active]
        # The sign-bit code the index scans must be the one of the stored float vector.
        self.vector_metadata = [
            mid for mid, (code, blob) in vecs.items() if mid in active
            and (blob is None or code != code_of(np.frombuffer(blob, dtype='<f4')))]

    def counts(self) -> dict[str, int]:
        """Count the problems a repair fixes (0 = consistent)."""
        values = {name: getattr(self, name) for name in PROBLEMS if name != 'unique_index_missing'}
        out = {name: v if isinstance(v, int) else len(v) for name, v in values.items()}
        out['unique_index_missing'] = int(not self.has_unique_index)
        return out

    def warnings(self) -> dict[str, int]:
        """Conditions another command resolves (dedup, reindex, embed_pending)."""
        return {'duplicate_fact_groups': self.duplicate_groups,
                'pending_embeddings': self.pending,
                'reindex_in_progress': int(self.reindex_in_progress),
                'reindex_needed': int(self.reindex_needed)}


def _count(conn: Any, table: str) -> int:
    return conn.execute(f'SELECT COUNT(*) FROM {table} t WHERE NOT EXISTS '
                        f'(SELECT 1 FROM memories m WHERE m.id = t.memory_id)').fetchone()[0]


def _fts_index_problem(engine: 'MemoryEngine') -> int:
    """FTS5's own check of its index against its stored text (1 = damaged)."""
    try:
        with engine.db.write() as conn:
            conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
    except (SqlError, CorruptDatabaseError):
        return 1
    return 0


def _repair(conn: Any, found: _Findings, engine: 'MemoryEngine') -> dict[str, int]:
    """Make every derived row agree with ``memories``, inside the caller's transaction."""
    fixed: dict[str, int] = {}
    if found.fts_index:
        fixed['fts_index'] = _rebuild_fts(conn)
    else:
        for mid in found.fts_stray:
            conn.execute('DELETE FROM memories_fts WHERE rowid = ?', (mid,))
        for mid in found.fts_missing + found.fts_stale:
            _index(conn, mid)
    fixed.update(fts_stray=len(found.fts_stray), fts_missing=len(found.fts_missing),
                 fts_stale=len(found.fts_stale))
    for mid in found.vector_stray + found.vector_metadata:
        store.delete_vector(conn, mid)
    for mid in found.vector_missing + found.vector_metadata:
        conn.execute('UPDATE memories SET embedded = 0 WHERE id = ?', (mid,))
    fixed.update(vector_stray=len(found.vector_stray), vector_missing=len(found.vector_missing),
                 vector_metadata=len(found.vector_metadata))
    for table in ('tags', 'history'):
        fixed[f'orphan_{table}'] = conn.execute(
            f'DELETE FROM {table} WHERE NOT EXISTS '
            f'(SELECT 1 FROM memories m WHERE m.id = {table}.memory_id)').rowcount
    for sid in found.missing_sessions:
        row = conn.execute('SELECT MIN(created_at), MIN(collection) FROM memories '
                           'WHERE session_id = ?', (sid,)).fetchone()
        store.ensure_session(conn, sid, row[1] or engine.config.collection,
                             row[0] if row[0] is not None else engine.clock())
    fixed['missing_sessions'] = len(found.missing_sessions)
    if not found.has_unique_index and not found.duplicate_groups:
        conn.execute(next(s for s in schema.MIGRATIONS[0] if UNIQUE_INDEX in s))
        fixed['unique_index_missing'] = 1
    return {name: n for name, n in fixed.items() if n}


def _index(conn: Any, memory_id: int) -> None:
    content = conn.execute('SELECT content FROM memories WHERE id = ?',
                           (memory_id,)).fetchone()[0]
    conn.execute('DELETE FROM memories_fts WHERE rowid = ?', (memory_id,))
    conn.execute('INSERT INTO memories_fts(rowid, body) VALUES (?, ?)',
                 (memory_id, textmod.fts_index_text(content)))


def _rebuild_fts(conn: Any) -> int:
    """Recreate the FTS table from its own DDL and re-index every non-forgotten memory."""
    ddl = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'").fetchone()[0]
    conn.execute('DROP TABLE memories_fts')
    conn.execute(ddl)
    rows = conn.execute("SELECT id, content FROM memories WHERE status != 'forgotten'")
    conn.executemany('INSERT INTO memories_fts(rowid, body) VALUES (?, ?)',
                     ((mid, textmod.fts_index_text(content)) for mid, content in rows.fetchall()))
    return 1
