"""
SQL of JSONL export and import (engine/transfer.py): every stored field out, and back as it was.

The export reads whole rows a page at a time on one snapshot; the import restores a row with
its status, times and counters instead of learning it anew. The columns that travel are named
here, once, for both directions.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from robotmem_ros.engine import store
from robotmem_ros.engine import text as textmod

# ``stored_at`` travels too: retention counts a perception's days from it, so a store moved by
# export and import keeps its clock (a file written before schema 9 has none: from the stamps).
TIMES = ('last_accessed', 'last_seen', 'decay_ref', 'valid_from', 'valid_until', 'stored_at')
COUNTERS = ('access_count', 'reinforce_count')
# The memory columns an import writes as the file holds them (context and hash apart).
RESTORED = ('type', 'content', 'collection', 'session_id', 'category', 'perception_type',
            'kind', 'confidence', 'status', 'created_at', *TIMES, *COUNTERS)


def _selected(include_forgotten: bool) -> str:
    """Return the condition on memories of an export (collection '' means every one)."""
    where = "(:c = '' OR collection = :c)"
    return where if include_forgotten else f"{where} AND status != 'forgotten'"


def count_exported(conn: Any, collection: str, *, include_forgotten: bool) -> int:
    """Count the memories an export writes."""
    return conn.execute(f'SELECT COUNT(*) FROM memories WHERE {_selected(include_forgotten)}',
                        {'c': collection}).fetchone()[0]


def exported_sessions(conn: Any, collection: str, *, include_forgotten: bool) -> list[Any]:
    """Return the sessions of the collection and those its exported memories name, by start."""
    return conn.execute(
        "SELECT * FROM sessions WHERE (:c = '' OR collection = :c) OR id IN "
        f'(SELECT session_id FROM memories WHERE {_selected(include_forgotten)}) '
        'ORDER BY started_at, id', {'c': collection}).fetchall()


def exported_page(conn: Any, collection: str, *, include_forgotten: bool, after: int,
                  limit: int) -> list[Any]:
    """Return whole memory rows after id ``after``, in id order."""
    return conn.execute(
        f'SELECT * FROM memories WHERE {_selected(include_forgotten)} AND id > :last '
        'ORDER BY id LIMIT :lim',
        {'c': collection, 'last': int(after), 'lim': int(limit)}).fetchall()


def restore_session(conn: Any, item: dict[str, Any]) -> int:
    """Insert an exported session unless its id exists; return 1 when it was stored."""
    summary = item['summary']
    return conn.execute(
        'INSERT INTO sessions(id, collection, context_json, started_at, ended_at, '
        'outcome_score, summary_json) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING',
        (item['id'], item['collection'], json.dumps(item['context'], ensure_ascii=False),
         item['started_at'], item['ended_at'], item['outcome_score'],
         None if summary is None else json.dumps(summary, ensure_ascii=False))).rowcount


def find_identical(conn: Any, item: dict[str, Any]) -> int | None:
    """
    Return the id of a stored memory identical to ``item``, or None.

    Identical: same collection, normalized text, type, creation time and session. This is
    what makes a second import of the same file (or of one interrupted) store nothing twice.
    """
    row = conn.execute(
        'SELECT id FROM memories WHERE collection = ? AND content_hash = ? AND type = ? '
        'AND created_at = ? AND session_id IS ?',
        (item['collection'], textmod.content_hash(item['content']), item['type'],
         item['created_at'], item['session_id'])).fetchone()
    return row[0] if row else None


def restore_memory(conn: Any, item: dict[str, Any]) -> int:
    """
    Insert an exported memory with its RESTORED columns, context, FTS row and tags.

    A forgotten memory gets no FTS row (no search may find it); the caller sets
    ``valid_from`` and writes the history. Returns the new id.
    """
    row = {name: item[name] for name in RESTORED}
    cur = conn.execute(
        f'INSERT INTO memories({", ".join(RESTORED)}, content_hash, context_json) '
        f'VALUES ({", ".join(":" + c for c in RESTORED)}, :content_hash, :context_json)',
        {**row, 'content_hash': textmod.content_hash(item['content']),
         'context_json': json.dumps(item['context'], ensure_ascii=False)})
    memory_id = cur.lastrowid
    if item['status'] != 'forgotten':
        store.index_text(conn, memory_id, item['content'])
    store.add_tags(conn, memory_id, item['tags'])
    return memory_id


def link_superseded(conn: Any, links: Iterable[tuple[int | None, int]]) -> None:
    """Set ``superseded_by`` (new target id, memory id) where the memory has none yet."""
    conn.executemany('UPDATE memories SET superseded_by = ? WHERE id = ? '
                     'AND superseded_by IS NULL', list(links))
