"""
Consistency checks of a store, and their repair in one transaction.

``memories`` is the source of truth; the FTS index, the vector table, tags, history and
sessions are derived from or hang off it. Every check counts rows that disagree with it and
every repair makes the derived row agree again (or marks the memory for ``embed_pending``).
Nothing is repaired in a file that fails SQLite's own integrity check: that needs a backup.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from robotmem_ros.engine import consistency_store as checks, store, text_log_store
from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.context import EngineContext
from robotmem_ros.engine.database import integrity_check, snapshot
from robotmem_ros.engine.vector_index import code_of
from robotmem_ros.errors import CorruptDatabaseError, NotFoundError


PROBLEMS = ('fts_missing', 'fts_stale', 'fts_stray', 'fts_index', 'vector_missing',
            'vector_stray', 'vector_metadata', 'orphan_tags', 'orphan_history',
            'missing_sessions', 'unique_index_missing')


def check_file(path: pathlib.Path) -> list[str]:
    """
    Run SQLite's own integrity check of the file at ``path``; ``['ok']`` when sound.

    Runs on a read-only connection (database.integrity_check) before anything opens the file
    for writing, so a damaged file is looked at, never touched.
    """
    if not path.is_file():
        raise NotFoundError(f'no database at {path}')
    return integrity_check(path)


def doctor(ctx: EngineContext, repair: bool) -> dict[str, Any]:
    """Check (and with ``repair`` fix) the store; see the module docstring."""
    with ctx.db.errors():
        return _doctor(ctx, repair)


def _doctor(ctx: EngineContext, repair: bool) -> dict[str, Any]:
    # On a fresh connection: SQLite 3.51's FTS5 check reports a false "checksum mismatch" on a
    # connection that read the FTS table before another connection changed it.
    integrity = check_file(ctx.db.path)
    report: dict[str, Any] = {'db_path': str(ctx.db.path), 'integrity': integrity,
                              'vector_checks': False, 'problems': {}, 'warnings': {},
                              'repaired': {}, 'notes': []}
    if integrity != ['ok']:
        report['notes'].append('SQLite integrity check failed: nothing was checked further or '
                               'repaired; restore a backup or salvage with `sqlite3 .recover`')
        report['ok'] = False
        return report
    found = _Findings(ctx)
    report['vector_checks'] = found.vector_checks
    report['problems'] = found.counts()
    report['warnings'] = found.warnings()
    if not found.vector_checks:
        report['notes'].append('sqlite-vec is not loadable here: vector checks skipped')
    if repair and any(report['problems'].values()):
        with ctx.db.write() as wconn:
            report['repaired'] = _repair(wconn, found, ctx)
        found = _Findings(ctx)
    if found.duplicate_groups and not found.has_unique_index:
        report['notes'].append('duplicate active facts block the unique index: run '
                               '`robotmem dedup`, then `robotmem doctor --repair`')
    report['ok'] = not any(found.counts().values())
    return report


class _Findings:
    """Ids (or counts) of every inconsistency, gathered on one reader snapshot."""

    def __init__(self, ctx: EngineContext) -> None:
        with snapshot(ctx.db.reader()) as conn:
            self._gather(conn, ctx)

    def _gather(self, conn: Any, ctx: EngineContext) -> None:
        rows = checks.memory_rows(conn)
        indexed = checks.fts_bodies(conn)
        live = {r['id']: r for r in rows if r['status'] != 'forgotten'}
        self.fts_missing = [mid for mid in live if mid not in indexed]
        self.fts_stray = [mid for mid in indexed if mid not in live]
        self.fts_stale = [mid for mid, r in live.items() if mid in indexed
                          and indexed[mid] != textmod.fts_index_text(r['content'])]
        self.fts_index = _fts_index_problem(ctx)
        self.vector_checks = True
        self.vector_missing: list[int] = []
        self.vector_stray: list[int] = []
        self.vector_metadata: list[int] = []
        if self.vector_checks:
            self._vectors(conn, {r['id']: r for r in rows if r['status'] == 'active'})
        self.orphan_tags = checks.count_orphans(conn, 'tags')
        self.orphan_history = checks.count_orphans(conn, 'history')
        self.missing_sessions = checks.missing_sessions(conn)
        self.has_unique_index = checks.has_unique_index(conn)
        self.duplicate_groups = checks.duplicate_fact_groups(conn)
        self.pending = sum(1 for r in rows if r['status'] == 'active' and r['embedded'] == 0)
        self.reindex_in_progress = store.get_meta(conn, 'reindex_in_progress') is not None
        self.reindex_needed = ctx.embedding.reindex_needed

    def _vectors(self, conn: Any, active: dict[int, Any]) -> None:
        vecs = checks.vector_rows(conn)
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


def _fts_index_problem(ctx: EngineContext) -> int:
    """
    FTS5's own check of its index against its stored text (1 = damaged).

    Only corruption counts as damage. Any other error (the store locked by another writer
    past the busy timeout, a full disk) says nothing about the index: it is raised, so that
    ``--repair`` never rebuilds a sound index because the check could not run.
    """
    try:
        with ctx.db.write() as conn:
            checks.check_fts_index(conn)
    except CorruptDatabaseError:
        return 1
    return 0


def _repair(conn: Any, found: _Findings, ctx: EngineContext) -> dict[str, int]:
    """Make every derived row agree with ``memories``, inside the caller's transaction."""
    fixed: dict[str, int] = {}
    if found.fts_index:
        checks.rebuild_fts(conn)
        fixed['fts_index'] = 1
    else:
        for mid in found.fts_stray:
            store.unindex_text(conn, mid)
        for mid in found.fts_missing + found.fts_stale:
            checks.reindex_text(conn, mid)
        text_log_store.log_rewritten(conn, found.fts_stray + found.fts_missing + found.fts_stale)
    fixed.update(fts_stray=len(found.fts_stray), fts_missing=len(found.fts_missing),
                 fts_stale=len(found.fts_stale))
    for mid in found.vector_stray + found.vector_metadata:
        store.delete_vector(conn, mid)
    for mid in found.vector_missing + found.vector_metadata:
        store.mark_unembedded(conn, mid)
    fixed.update(vector_stray=len(found.vector_stray), vector_missing=len(found.vector_missing),
                 vector_metadata=len(found.vector_metadata))
    for table in checks.DEPENDENT_TABLES:
        fixed[f'orphan_{table}'] = checks.delete_orphans(conn, table)
    for sid in found.missing_sessions:
        started, collection = checks.session_origin(conn, sid)
        store.ensure_session(conn, sid, collection or ctx.config.collection,
                             started if started is not None else ctx.clock())
    fixed['missing_sessions'] = len(found.missing_sessions)
    if not found.has_unique_index and not found.duplicate_groups:
        checks.create_unique_index(conn)
        fixed['unique_index_missing'] = 1
    return {name: n for name, n in fixed.items() if n}
