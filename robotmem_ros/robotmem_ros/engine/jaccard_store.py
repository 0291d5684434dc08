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

import itertools
import json
import math
from typing import Any, NamedTuple

from robotmem_ros.engine import store, vocab_store
from robotmem_ros.engine import text as textmod

# FTS5's rows must hold this many of the rarest tokens (AND groups), fewer where that takes more
# than MAX_GROUPS groups. 3 read 40-45 % fewer rows than 2 and cost less to intersect: a
# learn's candidates 2.27 -> 2.11 ms at 10k memories, 7.23 -> 5.72 ms at 90k; 4 was slower
# than 3 at both (docs/performance.md, "Three of the rarest tokens").
FTS_OVERLAP = 3
MAX_GROUPS = 64


class Candidate(NamedTuple):
    """A fact the Jaccard layer may fold a new one into: its id, Jaccard and stored text."""

    memory_id: int
    jaccard: float
    content: str


def least_overlap(n: int, threshold: float) -> int:
    """
    Return m: any set with Jaccard >= threshold against an n-token set holds m of its tokens.

    ``m = ⌈t·n⌉``, computed a hair low (a whole ``t·n`` up to rounding gives ``t·n``), so a
    float comparison at the boundary never accepts a pair that the filter dropped.
    """
    return max(1, math.floor(threshold * n - 1e-9) + 1)


def overlap_terms(n: int, threshold: float, overlap: int) -> tuple[int, int]:
    """
    (q, k): any set with Jaccard >= threshold against an n-token set holds k of any q.

    ``k`` is ``overlap`` at most, and the largest whose ``C(q, k)`` groups of k are at most
    MAX_GROUPS (k = 1 is one group per token).
    """
    m = least_overlap(n, threshold)
    k = min(overlap, m)
    while k > 1 and math.comb(n - m + k, k) > MAX_GROUPS:
        k -= 1
    return n - m + k, k


def candidates(conn: Any, tokens: frozenset[str], collection: str, limit: int,
               threshold: float, *, now: float, session_id: str = ''
               ) -> list[Candidate]:
    """
    Return the ``limit`` active facts nearest ``tokens`` with Jaccard >= ``threshold``.

    Best first, ties to the lower id, each with its text (the judge reads it); exact: the
    filter drops no such fact. In a small store the postings held in the process
    (engine/resident_text.py), in a store with a text index (engine/text_index.py) the index,
    name the facts that can reach the threshold, except within a session; FTS5's rare-token
    filter otherwise. The index and FTS5 find facts below the threshold as well, different
    ones: those are left out.
    """
    if not tokens:
        return []
    where = ['m.collection = :c', "m.type = 'fact'", store.ACTIVE_SQL]
    if session_id:
        where.append('m.session_id = :s')
    params = {'c': collection, 'now': now, 's': session_id}
    named = None if session_id else _named(conn, tokens, collection, threshold)
    if named is None:
        rows, scores = _matched(conn, tokens, threshold, where, params), {}
    else:
        # The postings or the index scored the facts they hold; SQL's filters (validity) are
        # run on the best of them only. The memories changed since the index's state are read
        # and scored here (the postings are current: none).
        scores, changed = named
        rows = _passing(conn, changed, where, params, bodies=True)
    # The texts come with the SQL filters' answer; the FTS5 rows' own are read with the best.
    contents = {memory_id: content for memory_id, _, content in rows if content is not None}
    passed = {memory_id for memory_id, _, _ in rows}
    # The FTS body's Jaccard (the text's tokens, space separated) ranks; the kept ones are
    # then scored from their text, as the judge compares them.
    scores.update((memory_id, textmod.jaccard(tokens, textmod.body_jaccard_tokens(body)))
                  for memory_id, body, _ in rows)
    order = sorted((memory_id for memory_id, score in scores.items() if score >= threshold),
                   key=lambda memory_id: (-scores[memory_id], memory_id))
    best: list[int] = []
    for start in range(0, len(order), 2 * max(limit, 1)):
        chunk = order[start:start + 2 * max(limit, 1)]
        unchecked = [memory_id for memory_id in chunk if memory_id not in passed]
        for memory_id, _, content in _passing(conn, unchecked, where, params):
            passed.add(memory_id)
            contents[memory_id] = content
        best += [memory_id for memory_id in chunk if memory_id in passed][:limit - len(best)]
        if len(best) >= limit:
            break
    contents.update(store.contents(conn, [i for i in best if i not in contents]))
    kept = [Candidate(memory_id, textmod.jaccard(tokens, textmod.jaccard_tokens(
        contents[memory_id])), contents[memory_id]) for memory_id in best
        if memory_id in contents]  # a reader outside a transaction: a row may be gone since
    return sorted(kept, key=lambda hit: (-hit.jaccard, hit.memory_id))


def _named(conn: Any, tokens: frozenset[str], collection: str, threshold: float
           ) -> tuple[dict[int, float], list[int]] | None:
    """
    {id: Jaccard} of the facts that can reach ``threshold``, the memories changed since; None.

    The postings held in the process answer for a small store (engine/resident_text.py), the
    text index for a large one; None while neither can, and FTS5's query answers.
    """
    resident = getattr(conn, 'resident_text', None)
    scores = resident.overlapping(conn, tokens, threshold) if resident is not None else None
    if scores is not None:
        return scores, []
    index = getattr(conn, 'text_index', None)
    return index.overlapping(conn, tokens, collection, threshold) if index is not None else None


def _passing(conn: Any, ids: list[int], where: list[str], params: dict[str, Any], *,
             bodies: bool = False) -> list[Any]:
    """(id, FTS body if ``bodies`` else None, text) of the memories ``ids`` that pass ``where``."""
    if not ids:
        return []
    # CROSS JOIN: the ids are the outer loop (primary key and rowid lookups).
    body, join = (('f.body', ' CROSS JOIN memories_fts f ON f.rowid = m.id') if bodies
                  else ('NULL', ''))
    return conn.execute(
        f'SELECT m.id, {body}, m.content FROM json_each(:ids) j CROSS JOIN memories m '
        f'ON m.id = j.value{join} WHERE {" AND ".join(where)}',
        {**params, 'ids': json.dumps(ids)}).fetchall()


def _matched(conn: Any, tokens: frozenset[str], threshold: float, where: list[str],
             params: dict[str, Any]) -> list[Any]:
    """
    (id, FTS body, None) of FTS5's rows holding k of the q rarest tokens that pass ``where``.

    k and q as overlap_terms gives them. The texts are not read here, where thousands of rows
    may match: candidates reads those of the best few.
    """
    size, k = overlap_terms(len(tokens), threshold, FTS_OVERLAP)
    prefix = [_quoted(t) for t in vocab_store.rarest(conn, tokens, size)]
    params['q'] = ' OR '.join('(' + ' AND '.join(group) + ')'
                              for group in itertools.combinations(prefix, k))
    # CROSS JOIN: the FTS match list is the outer loop (see store.fts_search).
    return conn.execute(
        f'SELECT m.id, memories_fts.body, NULL FROM memories_fts CROSS JOIN memories m '
        f'ON m.id = memories_fts.rowid WHERE memories_fts MATCH :q AND {" AND ".join(where)}',
        params).fetchall()


def _quoted(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'
