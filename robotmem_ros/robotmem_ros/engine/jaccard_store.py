"""
Candidates for the Jaccard dedup layer by a rare-token overlap filter (docs/performance.md).

The OR of every token of a new fact matches most of a large store, and ranking all of those
by BM25 cost most of a learn at 100k memories. A narrower query finds every fact that can
matter. For ``n = |A|`` tokens of the new fact A, ``jaccard(A, B) >= t`` implies
``|A ∩ B| >= t·|A ∪ B| >= t·n``: B holds at least ``m = ⌈t·n⌉`` tokens of A and misses at
most ``n - m``, so any ``n - m + k`` tokens of A include ``k`` that B holds (prefix
filtering; k = 1 gives the issue's "one of the ⌊0.3·n⌋ + 1 rarest" at t = 0.7). The query
asks FTS5 for rows holding ``k`` of the ``n - m + k`` rarest tokens (document frequency from
the FTS5 vocabulary) as an OR of AND groups, which FTS5 answers by intersecting posting
lists. Which tokens are rarest only changes the cost, never the result: every stored fact
scoring ``t`` or more is a candidate, whatever the counts. (A fact that shares no token
scores 0 and is never one.)

Each Jaccard token is a token of ``text.tokenize`` and the FTS rows hold exactly those tokens
(``text.fts_index_text``), so a quoted token matches every row whose Jaccard set contains it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any

from robotmem_ros.engine import text as textmod
from robotmem_ros.engine import vocab_store

# Rows must hold this many of the rarest tokens (AND groups), unless that takes more groups.
OVERLAP = 2
MAX_GROUPS = 64
_ACTIVE = "m.status = 'active' AND (m.valid_until IS NULL OR m.valid_until > :now)"


def overlap_terms(n: int, threshold: float) -> tuple[int, int]:
    """
    (q, k): any set with Jaccard >= threshold against an n-token set holds k of any q of them.

    ``m = ⌈t·n⌉``, computed a hair low (a whole ``t·n`` up to rounding gives ``t·n``), so a
    float comparison at the boundary never accepts a pair that the filter dropped.
    """
    m = max(1, math.floor(threshold * n - 1e-9) + 1)
    k = min(OVERLAP, m)
    if math.comb(n - m + k, k) > MAX_GROUPS:
        k = 1
    return n - m + k, k


def candidates(conn: Any, tokens: frozenset[str], collection: str, limit: int,
               threshold: float, *, now: float, session_id: str = ''
               ) -> list[tuple[int, float]]:
    """
    Return the ``limit`` active facts nearest ``tokens`` by Jaccard: (id, jaccard), best first.

    Ties go to the lower id. Exact over every fact scoring ``threshold`` or more (the filter
    drops none of them); facts below it may be missing from the list.
    """
    if not tokens:
        return []
    size, k = overlap_terms(len(tokens), threshold)
    prefix = [_quoted(t) for t in vocab_store.rarest(conn, tokens, size)]
    query = ' OR '.join('(' + ' AND '.join(group) + ')'
                        for group in itertools.combinations(prefix, k))
    where = ['memories_fts MATCH :q', 'm.collection = :c', "m.type = 'fact'", _ACTIVE]
    if session_id:
        where.append('m.session_id = :s')
    # CROSS JOIN: the FTS match list is the outer loop (see store.fts_search).
    rows = conn.execute(
        f'SELECT m.id, memories_fts.body FROM memories_fts CROSS JOIN memories m '
        f'ON m.id = memories_fts.rowid WHERE {" AND ".join(where)}',
        {'q': query, 'c': collection, 'now': now, 's': session_id}).fetchall()
    # Rank by the FTS body (the text's tokens, space separated: a split instead of a tokenizer
    # run per row), then score the kept ones from their text, as the judge compares them.
    best = [memory_id for _, memory_id in heapq.nsmallest(
        limit, ((-_body_jaccard(tokens, body), memory_id) for memory_id, body in rows))]
    marks = ','.join('?' * len(best))
    kept = [(memory_id, textmod.jaccard(tokens, textmod.jaccard_tokens(content)))
            for memory_id, content in conn.execute(
                f'SELECT id, content FROM memories WHERE id IN ({marks})', best)]
    return sorted(kept, key=lambda hit: (-hit[1], hit[0]))


def _body_jaccard(tokens: frozenset[str], body: str) -> float:
    return textmod.jaccard(tokens, frozenset(body.split()) - textmod.JACCARD_STOPWORDS)


def _quoted(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'
