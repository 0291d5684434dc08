"""
SQL of the text index (engine/text_index.py): its log of changes and the FTS rows it holds.

The log is ``text_changes`` (schema 7, 8): triggers on ``memories`` append a memory's id
whenever its text, status, collection or context changes, once the store has a text index
(meta ``text_index``).
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

from robotmem_ros.engine import schema

CHUNK = 20_000
# Every FTS row with what the index filters on: (id, collection, status, type, the values at
# schema.CONTEXT_PATHS as a JSON array or NULL, body).
_ROWS = (f'SELECT f.rowid, m.collection, m.status, m.type, {schema.CONTEXT_VALUES_SQL}, f.body '
         f'FROM memories_fts f JOIN memories m ON m.id = f.rowid')


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
