"""
The Jaccard layer's postings of a small store, held in the process (docs/performance.md).

Below ``resident_text_max_rows`` FTS rows, dedup's Jaccard candidates come from here instead
of FTS5's rare-token query (engine/jaccard_store.py): the token sets of the FTS bodies and,
per token, the memories that hold it. The layer's candidates are then the facts holding k of
the q rarest tokens (jaccard_store.overlap_terms), found by counting over q posting sets, and
their Jaccard is taken from the sets held: no statement and no body read for the ones that miss
the threshold. (FTS5 intersected up to 64 AND groups and read the body of every match.)

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
import sys
import threading
import time
from typing import Any, Callable, ContextManager, Iterable

from robotmem_ros.engine import jaccard_store, store, vocab_store
from robotmem_ros.engine import text as textmod

LOG = logging.getLogger('robotmem.engine')

# Of the q rarest tokens a candidate must hold k (jaccard_store.overlap_terms), the most asked:
# 0.25 ms p50 a learn's query at 10k memories with 3, 0.28 with 2 or 4, 0.67 with 1.
OVERLAP = 3
# After a build failed, calls leave the postings alone this long (FTS5 answers).
RETRY_S = 30.0


class _Postings:
    """The Jaccard token set of every FTS row and, per token, the rows holding it."""

    def __init__(self, structure: bytes) -> None:
        self.structure = structure
        self.tokens: dict[int, frozenset[str]] = {}
        self.holders: dict[str, set[int]] = {}

    def add(self, memory_id: int, body: str) -> None:
        self.remove(memory_id)
        # One string per token, shared by every set holding it (a third of the memory).
        tokens = frozenset(map(sys.intern, textmod.body_jaccard_tokens(body)))
        self.tokens[memory_id] = tokens
        for token in tokens:
            self.holders.setdefault(token, set()).add(memory_id)

    def remove(self, memory_id: int) -> None:
        for token in self.tokens.pop(memory_id, ()):
            held = self.holders[token]
            held.discard(memory_id)
            if not held:
                del self.holders[token]

    def overlapping(self, tokens: frozenset[str], threshold: float, overlap: int
                    ) -> dict[int, float]:
        """
        Return {id: Jaccard} of every row whose Jaccard with ``tokens`` reaches ``threshold``.

        Such a row holds k of the q rarest tokens (jaccard_store.overlap_terms): the counts
        over those q posting sets name every one, rarity by the sets' sizes.
        """
        size, k = jaccard_store.overlap_terms(len(tokens), threshold, overlap)
        empty: set[int] = set()
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
        self.builds = 0  # completed builds: the first and one per gap since

    def overlapping(self, conn: Any, tokens: frozenset[str], threshold: float
                    ) -> dict[int, float] | None:
        """
        Return {id: Jaccard} of the FTS rows reaching ``threshold`` as ``conn`` reads them.

        Every row, of any collection, type or status (the caller's SQL filters the best).
        None while the postings cannot answer for ``conn``: FTS5 answers then.
        """
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
            return (postings.overlapping(tokens, threshold, OVERLAP) if postings is not None
                    else None)

    def _current(self, conn: Any, structure: bytes) -> _Postings | None:
        """Return the postings as of ``structure`` (under the lock); None, and maybe a build."""
        postings = self._postings
        if postings is not None and postings.structure != structure:
            changes = self._ledger.rows(postings.structure, structure)
            if changes is None:
                if self._ledger.rows(structure, postings.structure) is not None:
                    return None  # ``conn`` reads an older state than the postings hold
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
        if (self._builder is not None or self._postings is not None
                or time.monotonic() - self._failed_at < RETRY_S
                or vocab_store.fts_totals(conn)[0] > self._max_rows):
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
                        if isinstance(body, str):
                            postings.add(memory_id, body)
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
