"""
How many FTS rows hold each term, and how many rows and tokens FTS5 holds (no scan of rows).

Two queries choose their terms by the term counts: the Jaccard layer asks for its rarest tokens
(engine/jaccard_store.py), and the related-memories query of an end of session keeps the
rarest terms of the session's facts within a budget of matching rows (engine/recall.py).
Recall's BM25 (engine/bm25.py) scores with exact counts and the totals.
"""

from __future__ import annotations

import time
from typing import Any, Iterable
import weakref

from robotmem_ros.engine import bm25

# Per connection: the FTS5 vocabulary of memories_fts, one row per term with its row count.
_VOCAB = ('CREATE VIRTUAL TABLE IF NOT EXISTS temp.memories_fts_vocab '
          "USING fts5vocab(main, 'memories_fts', 'row')")
# fts5vocab counts a term's rows by walking its posting list: about 3 ms per common term at
# 1M memories, 30 ms for one fact's tokens, at every learn. The Jaccard layer and the related
# query only choose terms by the counts, so a count read in the last COUNT_TTL_S seconds is
# reused (per connection, at most COUNT_CACHE_TERMS terms): a stale count can change what a
# query costs, never its result. BM25 scores by them, so it asks for exact counts: reused only
# while the FTS index is as it was when they were read (_STRUCTURE), so a score never depends
# on when the store last answered.
COUNT_TTL_S = 30.0
COUNT_CACHE_TERMS = 50_000
# term -> (row count, time read, the FTS structure record then, None if not read exactly)
_CACHES: weakref.WeakKeyDictionary[Any, dict[str, tuple[int, float, bytes | None]]] = \
    weakref.WeakKeyDictionary()
# FTS5's structure record (rowid 10 of its %_data table): the index's segments and a write
# counter, rewritten by every transaction that changes the index and by nothing else. Keyed
# on it, exact counts outlive commits that leave the text alone: PRAGMA data_version changed
# with every recall's hit counts, so each recall re-read its terms' counts (about 3 ms per
# common term at 1M). Across this process's own commits they are brought forward by the
# writer's ledger (engine/count_ledger.py) instead of read again.
_STRUCTURE = 'SELECT block FROM memories_fts_data WHERE id = 10'


# FTS5's "averages" record (rowid 1 of its %_data table): varints of the row count and of each
# column's token total, kept current by every committed write; FTS5's own bm25() reads it.
_AVERAGES = 'SELECT block FROM memories_fts_data WHERE id = 1'


def row_counts(conn: Any, terms: Iterable[str], *, exact: bool = False) -> dict[str, int]:
    """
    Return how many FTS rows hold each term (0 for none).

    Counts up to COUNT_TTL_S old, or with ``exact`` as of the FTS index's last committed
    change (a connection's own uncommitted changes aside).
    """
    cache = _CACHES.setdefault(conn, {})
    now = time.monotonic()
    # Only exact reads need the version (a statement less in every learn's Jaccard query);
    # entries read without one never count as exact.
    version = structure(conn) if exact else None
    wanted = set(terms)
    counts = {}
    older: dict[bytes, list[str]] = {}  # exact counts read under another structure
    for term in wanted:
        hit = cache.get(term)
        if hit is not None and (hit[2] == version if exact else now - hit[1] < COUNT_TTL_S):
            counts[term] = hit[0]
        elif exact and hit is not None and hit[2] is not None:
            older.setdefault(hit[2], []).append(term)
    ledger = getattr(conn, 'count_ledger', None)
    for since, stale in older.items() if ledger is not None else ():
        changes = ledger.changes(since, version, stale)
        for term in stale if changes is not None else ():
            count = cache[term][0] + changes[term]
            if count >= 0:
                counts[term] = count
                cache[term] = (count, now, version)
    missing = sorted(wanted - counts.keys())
    if missing:
        conn.execute(_VOCAB)
        marks = ','.join('?' * len(missing))
        found = dict(conn.execute(
            f'SELECT term, doc FROM temp.memories_fts_vocab WHERE term IN ({marks})',
            missing).fetchall())
        if len(cache) + len(missing) > COUNT_CACHE_TERMS:
            cache.clear()
        for term in missing:
            counts[term] = found.get(term, 0)
            cache[term] = (counts[term], now, version)
    return counts


def structure(conn: Any) -> bytes:
    """Return FTS5's structure record as of the connection's snapshot (b'' before any write)."""
    row = conn.execute(_STRUCTURE).fetchone()
    return bytes(row[0]) if row and row[0] is not None else b''


def corpus_stats(conn: Any, terms: Iterable[str]) -> bm25.CorpusStats:
    """Return what BM25 needs of the index for ``terms``, as of the last commit."""
    rows, tokens = fts_totals(conn)
    return bm25.CorpusStats(rows, tokens, row_counts(conn, terms, exact=True))


def _rarest_first(conn: Any, terms: Iterable[str]) -> list[tuple[str, int]]:
    """(term, row count) of the distinct terms, fewest rows first (unknown ones), ties by text."""
    counts = row_counts(conn, terms)
    return sorted(counts.items(), key=lambda item: (item[1], item[0]))


def rarest(conn: Any, terms: Iterable[str], count: int) -> list[str]:
    """Return the ``count`` terms in the fewest FTS rows (unknown ones first), ties by text."""
    return [term for term, _ in _rarest_first(conn, terms)[:count]]


def rarest_within(conn: Any, terms: Iterable[str], budget: int) -> list[str]:
    """
    Return the rarest terms whose row counts add up to at most ``budget`` (at least one).

    FTS5 ranks every row an OR query matches, so the sum of the row counts is what the
    query costs; the rare terms are also the ones that weigh most in BM25.
    """
    kept, total = [], 0
    for term, count in _rarest_first(conn, terms):
        total += count
        if kept and total > budget:
            break
        kept.append(term)
    return kept


def fts_totals(conn: Any) -> tuple[int, int]:
    """Return (rows, tokens) of the FTS index as of the last commit; (0, 0) when empty."""
    row = conn.execute(_AVERAGES).fetchone()
    values = _varints(bytes(row[0])) if row and row[0] else []
    return (values[0], values[1]) if len(values) >= 2 else (0, 0)


def _varints(blob: bytes) -> list[int]:
    """Decode SQLite varints: big-endian 7-bit groups, the 9th byte carries 8 bits."""
    values, pos = [], 0
    while pos < len(blob):
        value = 0
        for width in range(9):
            if pos == len(blob):  # a cut record: FTS5 writes whole ones
                return values
            byte = blob[pos]
            pos += 1
            if width == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values
