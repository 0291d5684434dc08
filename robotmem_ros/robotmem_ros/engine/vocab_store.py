"""
How many FTS rows hold each term, from FTS5's own vocabulary table (no scan of the rows).

Two queries choose their terms by it: the Jaccard layer asks for its rarest tokens
(engine/jaccard_store.py), and the related-memories query of an end of session keeps the
rarest terms of the session's facts within a budget of matching rows (engine/recall.py).
"""

from __future__ import annotations

import time
from typing import Any, Iterable
import weakref

# Per connection: the FTS5 vocabulary of memories_fts, one row per term with its row count.
_VOCAB = ('CREATE VIRTUAL TABLE IF NOT EXISTS temp.memories_fts_vocab '
          "USING fts5vocab(main, 'memories_fts', 'row')")
# fts5vocab counts a term's rows by walking its posting list: about 3 ms per common term at
# 1M memories, 30 ms for one fact's tokens, at every learn. Both users only choose terms by
# the counts, so a count read in the last COUNT_TTL_S seconds is reused (per connection, at
# most COUNT_CACHE_TERMS terms): a stale count can change what a query costs, never its result.
COUNT_TTL_S = 30.0
COUNT_CACHE_TERMS = 50_000
_CACHES: weakref.WeakKeyDictionary[Any, dict[str, tuple[int, float]]] = \
    weakref.WeakKeyDictionary()


def row_counts(conn: Any, terms: Iterable[str]) -> dict[str, int]:
    """Return how many FTS rows hold each term (0 for a term no row holds), a cached count."""
    cache = _CACHES.setdefault(conn, {})
    now = time.monotonic()
    wanted = set(terms)
    counts = {}
    for term in wanted:
        hit = cache.get(term)
        if hit is not None and now - hit[1] < COUNT_TTL_S:
            counts[term] = hit[0]
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
            cache[term] = (counts[term], now)
    return counts


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
