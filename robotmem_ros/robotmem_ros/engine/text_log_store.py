"""
SQL of the text index (engine/text_index.py): its log of changes and the FTS rows it holds.

The log is ``text_changes`` (schema 7, 8): triggers on ``memories`` append a memory's id
whenever its text, status, collection or context changes, once the store has a text index
(meta ``text_index``).
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

from robotmem_ros.engine import schema, store

CHUNK = 20_000
# The meta key that names the store's text index (its token); while it is set the triggers log.
META_KEY = 'text_index'
# Every FTS row with what the index filters on: (id, collection, status, type, the values at
# schema.CONTEXT_PATHS as a JSON array or NULL, body).
_ROWS = (f'SELECT f.rowid, m.collection, m.status, m.type, {schema.CONTEXT_VALUES_SQL}, f.body '
         f'FROM memories_fts f JOIN memories m ON m.id = f.rowid')


def token(conn: Any) -> str | None:
    """Return the token of the store's text index (None: no index, nothing is logged)."""
    return store.get_meta(conn, META_KEY)


def start(conn: Any, new_token: str) -> None:
    """Name a new text index: from its commit on, the triggers log every change for it."""
    store.set_meta(conn, META_KEY, new_token)


def last_change(conn: Any) -> int:
    """Return the seq of the newest change ever logged (AUTOINCREMENT's mark; 0 if none)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'text_changes'").fetchone()
    return int(row[0]) if row else 0


def changed_since(conn: Any, seq: int, upto: int | None = None) -> list[int]:
    """Return the memories changed after ``seq`` (up to ``upto``), each once."""
    if upto is None:
        rows = conn.execute('SELECT DISTINCT memory_id FROM text_changes WHERE seq > ?', (seq,))
    else:
        rows = conn.execute('SELECT DISTINCT memory_id FROM text_changes '
                            'WHERE seq > ? AND seq <= ?', (seq, upto))
    return [row[0] for row in rows]


def all_rows(conn: Any) -> Iterator[list[Any]]:
    """Yield every FTS row with what the index filters on (_ROWS), CHUNK rows at a time."""
    cursor = conn.execute(_ROWS)
    while rows := cursor.fetchmany(CHUNK):
        yield rows


def rows_of(conn: Any, ids: Sequence[int]) -> list[Any]:
    """Return the FTS rows of ``ids`` that still exist, as all_rows gives them."""
    return conn.execute(_ROWS + ' WHERE f.rowid IN (SELECT value FROM json_each(?))',
                        (json.dumps(list(ids)),)).fetchall()


def forget_changes(conn: Any, upto: int) -> None:
    """Delete the log rows up to ``upto`` (the index holds them), in the caller's write."""
    conn.execute('DELETE FROM text_changes WHERE seq <= ?', (upto,))


def log_rewritten(conn: Any, ids: Sequence[int]) -> None:
    """
    Log memories whose FTS rows were written again with no change the triggers see.

    doctor's repair rewrites FTS rows from ``memories`` without touching the memory: the text
    index would go on answering from its old documents. Nothing is logged without an index.
    """
    conn.execute('INSERT INTO text_changes(memory_id) SELECT value FROM json_each(?) '
                 'WHERE EXISTS (SELECT 1 FROM meta WHERE key = ?)',
                 (json.dumps(list(ids)), META_KEY))


def stop(conn: Any) -> None:
    """
    Stop logging for the store's text index and drop its log, in the caller's write.

    An index that finds its token gone answers no more and is built again by the process that
    writes it (engine/text_index.py).
    """
    store.delete_meta(conn, META_KEY)
    forget_changes(conn, last_change(conn))
