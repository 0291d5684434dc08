"""
The postings of a small store, held in the process (docs/performance.md).

Below ``resident_text_max_rows`` FTS rows, the process holds every FTS row's body and tokens
and, per token, the memories that hold it and how often. Three things come from here instead
of FTS5:

* dedup's Jaccard candidates (engine/jaccard_store.py): the facts holding k of the q rarest
  tokens (jaccard_store.overlap_terms), found by counting over q posting sets, their Jaccard
  taken from the sets held, so the ones that miss the threshold cost no statement and no body
  read (FTS5 intersected up to 64 AND groups and read the body of every match);
* BM25's first ranking (store.fts_search): FTS5's best matches and their ``bm25()``, to the
  last bit, summed over the query terms' postings instead of FTS5's pass over every match;
* the FTS bodies the re-scoring and the feedback read (store.fts_bodies).

The SQLite file stays the source of truth; the postings are a cache of its FTS rows, exact as
of one FTS5 structure record (vocab_store.structure), which every transaction that changes the
index rewrites and nothing else does:

* They are read from every FTS row in one read transaction, on a thread of their own, when a
  call finds none or finds them behind in a way the ledger cannot bridge (below); FTS5 answers
  meanwhile, so no call waits for a build.
* This process's commits are applied from its count ledger (engine/count_ledger.py): each step
  names the rows a commit added and removed, and the structure record before and after it. A
  call first brings the postings to the structure its own connection reads.
* A structure the steps do not lead to (another process wrote, a step too large to keep its
  rows or tainted, a step forgotten) means another build; until it is done FTS5 answers. A
  connection at an older structure (a reader that began earlier) and the writer in a
  transaction that already changed FTS rows (not in any step yet) are answered by FTS5 too.
* Past ``resident_text_max_rows`` rows the postings are dropped: the text index takes over
  from ``text_index_min_rows`` (engine/text_index.py).
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import sys
import threading
import time
from typing import Any, Callable, ContextManager, Iterable, Sequence, TypeVar

import numpy as np

from robotmem_ros.engine import bm25, jaccard_store, store, vocab_store
from robotmem_ros.engine import text as textmod

LOG = logging.getLogger('robotmem.engine')

# Of the q rarest tokens a candidate must hold k (jaccard_store.overlap_terms), the most asked:
# 0.25 ms p50 a learn's query at 10k memories with 3, 0.28 with 2 or 4, 0.67 with 1.
OVERLAP = 3
# After a build failed, calls leave the postings alone this long (FTS5 answers).
RETRY_S = 30.0
# A store found too large is not counted again for this long: a recall asks for bodies three
# times, each a statement of its own, and a store shrinks below the limit only by a purge.
LARGE_RECHECK_S = 5.0
SLOTS_FIRST = 1_024  # slots of the score arrays at first; they double when full
K1, B = store.FTS5_K1, store.FTS5_B

Answer = TypeVar('Answer')


class _Postings:
    """
    Every FTS row's body, token counts and Jaccard set, and per token the rows holding it.

    A row also has a slot in two arrays (its memory id, its length in tokens), so that a
    ranking adds each query term's share to one array of scores; a term's slots and counts
    are held as arrays too, from its first ranking until a row holding it changes.
    """

    def __init__(self, structure: bytes) -> None:
        self.structure = structure
        self.bodies: dict[int, str] = {}
        self.tokens: dict[int, frozenset[str]] = {}  # Jaccard sets (no stopwords)
        self.holders: dict[str, dict[int, int]] = {}  # token: {memory id: count in its body}
        self.total = 0  # tokens in all rows: FTS5's nToken
        self._slot: dict[int, int] = {}
        self._free: list[int] = []
        self._ids = np.full(SLOTS_FIRST, -1, dtype=np.int64)
        self._lengths = np.zeros(SLOTS_FIRST)
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, memory_id: int, body: str) -> None:
        self.remove(memory_id)
        # One string per token, shared by every row holding it (a third of the memory).
        words = list(map(sys.intern, body.split()))
        counts = collections.Counter(words)
        self.bodies[memory_id] = body
        self.tokens[memory_id] = textmod.jaccard_set(counts)
        for token, count in counts.items():
            self.holders.setdefault(token, {})[memory_id] = count
            self._arrays.pop(token, None)
        slot = self._free.pop() if self._free else len(self._slot)
        if slot >= self._ids.size:
            self._ids = np.concatenate([self._ids, np.full(self._ids.size, -1, np.int64)])
            self._lengths = np.concatenate([self._lengths, np.zeros(self._lengths.size)])
        self._slot[memory_id] = slot
        self._ids[slot], self._lengths[slot] = memory_id, len(words)
        self.total += len(words)

    def remove(self, memory_id: int) -> None:
        body = self.bodies.pop(memory_id, None)
        if body is None:
            return
        del self.tokens[memory_id]
        for token in set(body.split()):
            held = self.holders[token]
            del held[memory_id]
            if not held:
                del self.holders[token]
            self._arrays.pop(token, None)
        slot = self._slot.pop(memory_id)
        self.total -= int(self._lengths[slot])
        self._ids[slot], self._lengths[slot] = -1, 0.0
        self._free.append(slot)

    def overlapping(self, tokens: frozenset[str], threshold: float, overlap: int
                    ) -> dict[int, float]:
        """
        Return {id: Jaccard} of every row whose Jaccard with ``tokens`` reaches ``threshold``.

        Such a row holds k of the q rarest tokens (jaccard_store.overlap_terms): the counts
        over those q posting sets name every one, rarity by the sets' sizes.
        """
        size, k = jaccard_store.overlap_terms(len(tokens), threshold, overlap)
        empty: dict[int, int] = {}
        rare = sorted((self.holders.get(token, empty) for token in tokens), key=len)[:size]
        if k == 1:
            named: Iterable[int] = set().union(*rare)
        else:
            named = [memory_id for memory_id, count
                     in collections.Counter(itertools.chain.from_iterable(rare)).items()
                     if count >= k]
        scores = {}
        for memory_id in named:
            score = textmod.jaccard(tokens, self.tokens[memory_id])
            if score >= threshold:
                scores[memory_id] = score
        return scores

    def ranked(self, terms: Sequence[str], depth: int) -> list[tuple[int, float]]:
        """
        Return FTS5's best ``depth`` rows for the OR of ``terms``: (id, its ``bm25()``).

        FTS5's own arithmetic (fts5_aux.c, fts5Bm25Function) in its order, term by term in
        the query's order, so every score is the double FTS5 computes; lowest (best) first,
        ties to the lower id. (Where SQLite's build fuses a multiply and an add, as gcc does
        by default on aarch64, a score may differ in its last bit: only rows that tie to
        within that can swap.)
        """
        rows = len(self.bodies)
        if not rows or depth <= 0:
            return []
        average = float(self.total) / float(rows)
        scores = np.zeros(self._ids.size)
        for term in terms:
            held = self.holders.get(term)
            if not held:
                continue  # a term in no row adds nothing to any score
            idf = math.log((rows - len(held) + 0.5) / (len(held) + 0.5))
            idf = idf if idf > 0.0 else bm25.MIN_IDF
            slots, counts = self._term_arrays(term, held)
            norm = K1 * (1 - B + B * self._lengths[slots] / average)
            scores[slots] += idf * ((counts * (K1 + 1.0)) / (counts + norm))
        found = np.flatnonzero(scores)
        if found.size > depth:
            values = scores[found]
            least = np.partition(values, found.size - depth)[found.size - depth]
            found = found[values >= least]  # the best ``depth`` and any tied with the last
        ids = self._ids[found]
        order = np.lexsort((ids, -scores[found]))[:depth]
        return [(int(memory_id), -float(score))
                for memory_id, score in zip(ids[order], scores[found[order]])]

    def _term_arrays(self, term: str, held: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
        arrays = self._arrays.get(term)
        if arrays is None:
            slots = np.fromiter(map(self._slot.__getitem__, held), dtype=np.intp,
                                count=len(held))
            counts = np.fromiter(held.values(), dtype=float, count=len(held))
            arrays = self._arrays[term] = (slots, counts)
        return arrays


class ResidentText:
    """The postings of one store: built, brought forward by the ledger, dropped when large."""

    def __init__(self, max_rows: int, opener: Callable[[], Any], ledger: Any,
                 snapshot: Callable[[Any], ContextManager[Any]]) -> None:
        """
        Describe the postings of a store; nothing is read or started yet.

        ``opener`` gives a build its own connection, ``ledger`` is the writer's count ledger
        and ``snapshot`` holds one read transaction (database.snapshot).
        """
        self._max_rows = max_rows
        self._opener = opener
        self._ledger = ledger
        self._snapshot = snapshot
        self._lock = threading.Lock()
        self._postings: _Postings | None = None
        self._builder: threading.Thread | None = None
        self._closed = False
        self._failed_at = -RETRY_S
        self._large_at = -LARGE_RECHECK_S
        self.builds = 0  # completed builds: the first and one per gap since

    def overlapping(self, conn: Any, tokens: frozenset[str], threshold: float
                    ) -> dict[int, float] | None:
        """
        Return {id: Jaccard} of the FTS rows reaching ``threshold`` as ``conn`` reads them.

        Every row, of any collection, type or status (the caller's SQL filters the best).
        None while the postings cannot answer for ``conn``: FTS5 answers then.
        """
        return self._answer(conn, lambda postings: postings.overlapping(tokens, threshold,
                                                                        OVERLAP))

    def ranked(self, conn: Any, terms: Sequence[str], depth: int
               ) -> list[tuple[int, float]] | None:
        """
        Return FTS5's best ``depth`` FTS rows for the OR of ``terms`` as ``conn`` reads them.

        (id, ``bm25()``) best first, as ``ORDER BY bm25(memories_fts) LIMIT depth`` gives
        them (ties, which FTS5 leaves in no set order, to the lower id); every row, of any
        collection or status. None while the postings cannot answer for ``conn``.
        """
        return self._answer(conn, lambda postings: postings.ranked(terms, depth))

    def bodies(self, conn: Any, ids: Iterable[int]) -> dict[int, str] | None:
        """Return the FTS bodies of those ``ids`` that have one, as ``conn`` reads them; None."""
        return self._answer(conn, lambda postings: {
            memory_id: postings.bodies[memory_id] for memory_id in ids
            if memory_id in postings.bodies})

    def _answer(self, conn: Any, ask: Callable[[_Postings], Answer]) -> Answer | None:
        """Return ``ask`` of the postings as of ``conn``'s state; None where they cannot."""
        if not self._max_rows or self._closed:
            return None
        if conn.in_transaction and self._ledger.noted:
            return None  # the writer changed FTS rows in this transaction: no step holds them
        if self._postings is None:  # none held: a build where the store is small enough (no
            with self._lock:  # read of the structure record, which costs a learn at 1M)
                self._build_later(conn)
            return None
        structure = vocab_store.structure(conn)
        with self._lock:
            postings = self._current(conn, structure)
            return ask(postings) if postings is not None else None

    def _current(self, conn: Any, structure: bytes) -> _Postings | None:
        """Return the postings as of ``structure`` (under the lock); None, and maybe a build."""
        postings = self._postings
        if postings is not None and postings.structure != structure:
            committing = self._ledger.committing  # read first: its step is recorded before
            changes = self._ledger.rows(postings.structure, structure)
            if changes is None:
                if committing or self._ledger.rows(structure, postings.structure) is not None:
                    # ``conn`` reads a commit whose step is not recorded yet, or an older state
                    # than the postings hold
                    return None
                postings = self._postings = None  # a gap: read every row again
            else:
                for memory_id, body, sign in changes:
                    if sign > 0:
                        postings.add(memory_id, body)
                    else:
                        postings.remove(memory_id)
                postings.structure = structure
                if len(postings.tokens) > self._max_rows:
                    postings = self._postings = None
                    self._ledger.rows_wanted = False  # the steps keep no bodies for nothing
        if postings is None:
            self._build_later(conn)
        return postings

    def _build_later(self, conn: Any) -> None:
        """Start a build (under the lock) unless one runs or the store is too large for one."""
        now = time.monotonic()
        if (self._builder is not None or self._postings is not None
                or now - self._failed_at < RETRY_S or now - self._large_at < LARGE_RECHECK_S):
            return
        if vocab_store.fts_totals(conn)[0] > self._max_rows:
            self._large_at = now
            return
        self._ledger.rows_wanted = True  # from before the build's read: no step is missed
        self._builder = threading.Thread(target=self._build, name='resident-text',
                                         daemon=True)
        self._builder.start()

    def _build(self) -> None:
        try:
            conn = self._opener()
            try:
                with self._snapshot(conn):  # the rows and the structure record agree
                    postings = _Postings(vocab_store.structure(conn))
                    for memory_id, body in store.every_fts_body(conn):
                        if self._closed:
                            break
                        # FTS5 counts a row without a body, of no token
                        postings.add(memory_id, body if isinstance(body, str) else '')
            finally:
                conn.close()
        except Exception as exc:  # noqa: BLE001 - FTS5 answers; the next call tries again
            LOG.warning('resident Jaccard postings not built (%s); FTS5 answers', exc)
            postings, self._failed_at = None, time.monotonic()
            self._ledger.rows_wanted = False
        with self._lock:
            if postings is not None and not self._closed:
                self._postings = postings
                self.builds += 1
            self._builder = None

    def stats(self) -> dict[str, Any]:
        """Rows held (0 when none), whether a build runs."""
        postings = self._postings
        return {'resident_text_rows': len(postings.tokens) if postings is not None else 0,
                'resident_text_building': self._builder is not None}

    def close(self) -> None:
        """Drop the postings and wait for a running build; idempotent."""
        with self._lock:
            self._closed = True
            self._postings = None
            builder = self._builder
        if builder is not None and builder is not threading.current_thread():
            builder.join(timeout=30.0)
