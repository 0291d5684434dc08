"""
SQL of the consistency checks: the rows derived from ``memories`` read side by side, and repaired.

The FTS index, the vector tables, tags, history and sessions are derived from or hang off
``memories``. The doctor (engine/doctor.py) decides what disagrees and what to repair; the
statements that read and rewrite those rows live here, next to the row-level ones in store.py.
"""

from __future__ import annotations

from typing import Any

from robotmem_ros.engine import count_ledger, schema, store, text_log_store
from robotmem_ros.engine import text as textmod

UNIQUE_INDEX = 'uq_memories_active_fact'
FTS_GENERATION_KEY = 'fts_generation'  # the FTS table's rebuilds (rebuild_fts)
FTS5_DEFAULT_CRISISMERGE = 16  # fts5Int.h: FTS5_DEFAULT_CRISISMERGE
# Tables whose rows name a memory in ``memory_id`` and mean nothing without it.
DEPENDENT_TABLES = ('tags', 'history')


def memory_rows(conn: Any) -> list[Any]:
    """Return every memory (any status) with the columns the checks compare."""
    return conn.execute('SELECT id, status, embedded, content, collection, category, kind, '
                        'session_id FROM memories').fetchall()


def fts_bodies(conn: Any) -> dict[int, str]:
    """Return the indexed text of every FTS row, keyed by memory id."""
    return dict(conn.execute('SELECT rowid, body FROM memories_fts').fetchall())


def vector_rows(conn: Any) -> dict[int, tuple[bytes | None, bytes | None]]:
    """
    Return (sign-bit code, float vector) of every stored vector, keyed by memory id.

    A row of either table alone counts: a code without its float vector gives None for the
    vector, a float vector without its code gives an empty code.
    """
    rows = {r[0]: (r[1], r[2]) for r in conn.execute(
        'SELECT v.memory_id, v.code, e.embedding FROM memory_vectors v '
        'LEFT JOIN memory_embeddings e ON e.memory_id = v.memory_id')}
    rows.update((r[0], (b'', r[1])) for r in conn.execute(
        'SELECT memory_id, embedding FROM memory_embeddings WHERE memory_id NOT IN '
        '(SELECT memory_id FROM memory_vectors)'))
    return rows


def count_orphans(conn: Any, table: str) -> int:
    """Count the rows of a DEPENDENT_TABLES table whose memory no longer exists."""
    _check_dependent(table)
    return conn.execute(f'SELECT COUNT(*) FROM {table} t WHERE NOT EXISTS '
                        f'(SELECT 1 FROM memories m WHERE m.id = t.memory_id)').fetchone()[0]


def delete_orphans(conn: Any, table: str) -> int:
    """Delete the rows :func:`count_orphans` counts; return how many went."""
    _check_dependent(table)
    return conn.execute(f'DELETE FROM {table} WHERE NOT EXISTS '
                        f'(SELECT 1 FROM memories m WHERE m.id = {table}.memory_id)').rowcount


def _check_dependent(table: str) -> None:
    """Refuse any other name: it is put into the SQL text, not bound."""
    if table not in DEPENDENT_TABLES:
        raise ValueError(f'{table!r} is not one of {DEPENDENT_TABLES}')


def missing_sessions(conn: Any) -> list[str]:
    """Return the session ids that memories or outcomes name but sessions lacks."""
    return [r[0] for r in conn.execute(
        'SELECT session_id FROM memories WHERE session_id IS NOT NULL UNION '
        'SELECT session_id FROM session_outcomes EXCEPT SELECT id FROM sessions')]


def session_origin(conn: Any, session_id: str) -> tuple[float | None, str | None]:
    """Return (first creation time, a collection) of a session's memories, to re-register it."""
    row = conn.execute('SELECT MIN(created_at), MIN(collection) FROM memories '
                       'WHERE session_id = ?', (session_id,)).fetchone()
    return row[0], row[1]


def has_unique_index(conn: Any) -> bool:
    """Tell whether the index that keeps active facts unique per collection exists."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?",
                        (UNIQUE_INDEX,)).fetchone() is not None


def create_unique_index(conn: Any) -> None:
    """Create that index with the schema's own statement (fails while duplicates exist)."""
    conn.execute(next(s for s in schema.MIGRATIONS[0] if UNIQUE_INDEX in s))


def duplicate_fact_groups(conn: Any) -> int:
    """Count the groups of active facts that repeat a normalized text within a collection."""
    return conn.execute(
        "SELECT COUNT(*) FROM (SELECT 1 FROM memories WHERE status = 'active' AND "
        "type = 'fact' GROUP BY collection, content_hash HAVING COUNT(*) > 1)").fetchone()[0]


def check_fts_index(conn: Any) -> None:
    """
    Run FTS5's own check of its index against its stored text, in the caller's write.

    FTS5 takes the command as an INSERT, hence the write. A damaged index raises an sqlite
    corruption error, which the write turns into CorruptDatabaseError.
    """
    conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")


def reindex_text(conn: Any, memory_id: int) -> None:
    """Rewrite a memory's FTS row from its stored text."""
    content = conn.execute('SELECT content FROM memories WHERE id = ?',
                           (memory_id,)).fetchone()[0]
    store.unindex_text(conn, memory_id)
    store.index_text(conn, memory_id, content)


def rebuild_fts(conn: Any) -> None:
    """
    Recreate the FTS table from its own DDL and re-index every non-forgotten memory.

    FTS5 starts a new table's structure records over: the first ones after a rebuild can be
    byte for byte those of the table's early life, and readers key their counts and the
    postings of a small store on those records (engine/count_ledger.py, resident_text.py),
    in this process and in others. So each rebuild writes FTS5's configuration once more than
    the last one did (a setting to its default): each write moves the cookie that begins the
    record on by one, and no record of an earlier table comes back. The text index is built
    again from the new rows (text_log_store.stop).
    """
    ddl = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'").fetchone()[0]
    generation = int(store.get_meta(conn, FTS_GENERATION_KEY) or 0) + 1
    count_ledger.taint(conn)  # FTS rows the writer's steps do not note
    conn.execute('DROP TABLE memories_fts')
    conn.execute(ddl)
    rows = conn.execute("SELECT id, content FROM memories WHERE status != 'forgotten'")
    conn.executemany('INSERT INTO memories_fts(rowid, body) VALUES (?, ?)',
                     ((mid, textmod.fts_index_text(content)) for mid, content in rows.fetchall()))
    for _ in range(generation):
        conn.execute('INSERT INTO memories_fts(memories_fts, rank) '
                     "VALUES ('crisismerge', ?)", (FTS5_DEFAULT_CRISISMERGE,))
    store.set_meta(conn, FTS_GENERATION_KEY, str(generation))
    text_log_store.stop(conn)
