"""
SQL of the in-memory vector index (engine/vector_index.py): its load and its exact rescoring.

The index holds sign-bit codes in RAM and only proposes candidates; these reads feed it the
rows of ``memory_vectors``, give it the float vectors that decide, and check a saved snapshot
of it against the rows (engine/index_snapshot.py). The writes of vectors (put, delete) are
row-level and live in store.py.
"""

from __future__ import annotations

from typing import Any, Sequence
import uuid

_HEADER = 40  # printf('%016x%016x%08x'): a packed record's id, seq and vector bytes


def codes_since(conn: Any, seq: int, limit: int, floats: bool = False) -> list[Any]:
    """
    Return (seq, memory_id, code, collection, session_id, is_fact, embedding, filters).

    Rows after ``seq``: every vector write takes a new seq, so reading past the last one seen
    picks up what any process stored since. ``embedding`` is the float vector (NULL if missing)
    when ``floats`` asks for it, which the index quantizes to its 8-bit copy, else NULL;
    ``filters`` packs the filter ids (engine/schema.py, CONTEXT_PATHS).
    """
    embedding, join = 'NULL', ''
    if floats:
        embedding = 'e.embedding'
        join = 'LEFT JOIN memory_embeddings e ON e.memory_id = v.memory_id'
    return conn.execute(f'SELECT v.seq, v.memory_id, v.code, v.collection, v.session_id, '
                        f'v.is_fact, {embedding}, v.filters FROM memory_vectors v {join} '
                        f'WHERE v.seq > ? ORDER BY v.seq LIMIT ?', (seq, limit)).fetchall()


def context_ids(conn: Any, pairs: Sequence[tuple[str, Any]]) -> list[int | None]:
    """Ids of (context path, value) pairs in ``context_values``; None for a pair never stored."""
    if not pairs:
        return []
    rows = ', '.join('(?, ?, ?)' for _ in pairs)
    return [row[0] for row in conn.execute(
        f'SELECT c.id FROM (VALUES {rows}) w LEFT JOIN context_values c '
        f'ON c.path = w.column2 AND c.value = w.column3 ORDER BY w.column1',
        [item for number, pair in enumerate(pairs) for item in (number, *pair)])]


def seq_span(conn: Any) -> int:
    """Return an upper bound of the vector rows stored: the span of their seqs (two seeks)."""
    # Two subqueries: SQLite answers a lone MIN or MAX with one seek, both together by a scan.
    low, high = conn.execute('SELECT (SELECT MIN(seq) FROM memory_vectors), '
                             '(SELECT MAX(seq) FROM memory_vectors)').fetchone()
    return 0 if low is None else high - low + 1


def active_embeddings(conn: Any, ids: Sequence[int],
                      where: tuple[str, list[Any]]) -> list[tuple[int, int, bytes]]:
    """
    Return (id, seq, float vector) of the memories ``ids`` that are active and meet ``where``.

    ``where`` is SQL on ``memories m`` and its parameters (store.context_sql); the seq lets
    the index drop a candidate whose vector was replaced after it was loaded.

    The rows come back packed in one row: a cursor steps once per row and releases the GIL
    at each step, so a read of 80 rows waited for the GIL 80 times whenever another thread
    ran Python, as a learn's Jaccard layer does beside it (docs/performance.md, "One step for
    the float read"). Each record is a fixed header (id, seq, bytes of the vector; hex) and the
    vector's bytes, which ``||`` and ``group_concat`` copy as they are.
    """
    marks = ','.join('?' * len(ids))
    packed = conn.execute(
        f"SELECT CAST(group_concat(printf('%016x%016x%08x', m.id, v.seq, length(e.embedding))"
        f" || e.embedding, '') AS BLOB) FROM memories m "
        f'JOIN memory_vectors v ON v.memory_id = m.id '
        f'JOIN memory_embeddings e ON e.memory_id = m.id '
        f"WHERE m.id IN ({marks}) AND m.status = 'active'{where[0]}",
        [*ids, *where[1]]).fetchone()[0]
    rows, at = [], 0
    while packed and at < len(packed):
        head, at = packed[at:at + _HEADER], at + _HEADER
        size = int(head[32:], 16)
        rows.append((int(head[:16], 16), int(head[16:32], 16), packed[at:at + size]))
        at += size
    return rows


def embeddings_between(conn: Any, first_seq: int, last_seq: int) -> list[Any]:
    """
    Return (seq, float vector) of the vector rows with ``first_seq <= seq <= last_seq``.

    The approximate stage of the index (engine/ann_stage.py) is filled in seq order, block by
    block, so a range read keeps one block of floats in memory at a time.
    """
    return conn.execute('SELECT v.seq, e.embedding FROM memory_vectors v '
                        'JOIN memory_embeddings e ON e.memory_id = v.memory_id '
                        'WHERE v.seq BETWEEN ? AND ? ORDER BY v.seq',
                        (first_seq, last_seq)).fetchall()


def embeddings_of_seqs(conn: Any, seqs: Sequence[int]) -> list[Any]:
    """Return (seq, float vector) of the vector rows ``seqs`` still stored (a training sample)."""
    marks = ','.join('?' * len(seqs))
    return conn.execute(f'SELECT v.seq, e.embedding FROM memory_vectors v '
                        f'JOIN memory_embeddings e ON e.memory_id = v.memory_id '
                        f'WHERE v.seq IN ({marks})', list(seqs)).fetchall()


def seq_high_water(conn: Any) -> int:
    """Return the highest seq ever given to a vector row (AUTOINCREMENT's mark; 0 if none)."""
    mark = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'memory_vectors'"
                        ).fetchone()
    return mark[0] if mark else 0


def store_id(conn: Any) -> str | None:
    """Return the id the store took at its first open (meta ``store_id``); None before it."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    return row[0] if row else None


def ensure_store_id(conn: Any) -> None:
    """
    Give a store its id once, in the opening write (``conn`` is the writer).

    A snapshot of the index names the store it was taken of: a store deleted and made again at
    the same path, its rows written anew with the same ids and vectors (a bag replayed into a
    fresh store), passes every other check, and the snapshot's sessions and collections would
    be the old store's.
    """
    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('store_id', ?)",
                 (uuid.uuid4().hex,))


def count_through(conn: Any, seq: int) -> int:
    """Return how many vector rows of seq ``seq`` or lower are stored (a primary key range)."""
    return conn.execute('SELECT COUNT(*) FROM memory_vectors WHERE seq <= ?',
                        (seq,)).fetchone()[0]


def codes_of_seqs(conn: Any, seqs: Sequence[int]) -> dict[int, tuple[int, bytes]]:
    """Return {seq: (memory_id, code)} of the rows of those seqs still stored."""
    marks = ','.join('?' * len(seqs))
    return {seq: (memory_id, bytes(code)) for seq, memory_id, code in conn.execute(
        f'SELECT seq, memory_id, code FROM memory_vectors WHERE seq IN ({marks})', list(seqs))}
