"""
How this process's commits changed FTS5's term row counts, so exact counts outlive them.

Recall's BM25 scores with exact row counts (engine/vocab_store.py), reused only while FTS5's
structure record is the one they were read under. Every learn rewrites that record, so a
recall after a learn read each of its terms' counts again from ``fts5vocab``, which walks the
term's whole posting list: 1.9-2.0 ms of a 7.3-7.5 ms recall after a learn at 1M memories
(docs/performance.md, "Term counts across a learn").

A learn changes the counts of its own tokens only. The writer notes each FTS row it adds or
removes (its tokens, +1 or -1), and at commit the structure record before and after the
transaction: a step. A count read under structure S is then brought to the current structure
by adding the deltas of the steps from S to it, and read again whenever that chain has a gap:
a commit of another process, a transaction whose FTS changes were not all noted (``taint``:
bulk purges, a rebuild, a savepoint rolled back), or a step forgotten (STEPS_KEPT). So a count
is always the one ``fts5vocab`` would give as of the reader's snapshot.

While ``rows_wanted`` is set, each step also keeps the rows themselves (id, body, sign), up to
ROWS_KEPT a step: the Jaccard postings held in the process for a small store
(engine/resident_text.py) follow this process's commits by them, and are read again at any
gap, as the counts are. Where no postings are held (a large store) no body is kept.

A body's tokens are its space separated words: FTS rows hold the engine's tokens joined by
spaces (text.fts_index_text), the same equality the Jaccard filter and the scores of memories
changed since the text index's state rest on.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Iterable, NamedTuple

# Steps remembered: a reader whose counts are older than this many of this process's commits
# reads them again.
STEPS_KEPT = 256
# Rows kept of one step: a larger transaction leaves its step without rows, so the postings held
# in the process are read again after it. A batch of 200 perceptions fits; at most 256 × 256
# bodies are kept (about 16 MB of long ones).
ROWS_KEPT = 256

# (memory id, FTS body, +1 added or -1 removed), in the order the transaction made them.
RowChange = tuple[int, str, int]


class _Step(NamedTuple):
    """One commit of this process: the structure it left, its count changes and its rows."""

    after: bytes
    delta: collections.Counter[str]
    rows: tuple[RowChange, ...] | None


class CountLedger:
    """The term count changes of one store's writer, step by step (one step per commit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: collections.OrderedDict[bytes, _Step] = collections.OrderedDict()
        self._before: bytes | None = None  # the structure at the transaction's first FTS change
        self._delta: collections.Counter[str] = collections.Counter()
        self._rows: list[RowChange] = []
        self._keeps_rows = False  # rows_wanted at the transaction's first FTS change
        self._tainted = False
        self.rows_wanted = False  # set by the postings while they hold or build a state
        # From just before a noted transaction's COMMIT until its step is recorded: a reader
        # that sees a structure no step leads to may be reading that commit (resident_text).
        self.committing = False

    # --- the writer (under the store's write lock) ---------------------------------------

    def note(self, memory_id: int, body: str, sign: int,
             structure: Callable[[], bytes]) -> None:
        """
        Note the FTS row of ``memory_id`` added (+1) or removed (-1), its ``body`` as stored.

        ``structure`` reads FTS5's structure record, called before the transaction's first FTS
        change: the last commit flushed its rows, so it is the record the transaction began on.
        """
        if self._before is None:
            # A flag set later in the transaction would leave its first rows out of the step.
            self._before, self._keeps_rows = structure(), self.rows_wanted
        for token in set(body.split()):
            self._delta[token] += sign
        if self._keeps_rows and len(self._rows) <= ROWS_KEPT:  # one past it: the step keeps none
            self._rows.append((memory_id, body, sign))

    def taint(self) -> None:
        """Mark the open transaction as changing FTS rows it did not note: it makes no step."""
        self._tainted = True

    def committed(self, after: bytes | None) -> None:
        """
        Record the step of the transaction just committed, then start the next one afresh.

        ``after`` is the structure record read after the commit, None when another connection
        may have committed in between (then it would not be this commit's record).
        """
        before, delta, tainted = self._before, self._delta, self._tainted
        rows = self._rows if self._keeps_rows and len(self._rows) <= ROWS_KEPT else None
        if before is not None and not tainted and after is not None and after != before:
            with self._lock:
                self._steps[before] = _Step(after, collections.Counter(
                    {token: change for token, change in delta.items() if change}),
                    tuple(rows) if rows is not None else None)
                while len(self._steps) > STEPS_KEPT:
                    self._steps.popitem(last=False)
        self.discard()  # the step first: a reader that saw ``committing`` clear finds it

    def discard(self) -> None:
        """Forget the open transaction's notes (after a rollback, or once recorded)."""
        self._before, self._delta, self._rows, self._keeps_rows, self._tainted = (
            None, collections.Counter(), [], False, False)
        self.committing = False

    @property
    def noted(self) -> bool:
        """Return True when the open transaction noted an FTS change."""
        return self._before is not None

    # --- readers ---------------------------------------------------------------------------

    def changes(self, since: bytes, until: bytes,
                terms: Iterable[str]) -> dict[str, int] | None:
        """
        Return how the row counts of ``terms`` changed from structure ``since`` to ``until``.

        None when the steps between them are not all known: the caller reads the counts again.
        """
        wanted = set(terms)
        total = dict.fromkeys(wanted, 0)
        at, seen = since, 0
        with self._lock:
            while at != until:
                step = self._steps.get(at)
                seen += 1
                if step is None or seen > STEPS_KEPT:
                    return None
                at = step.after
                for term in wanted.intersection(step.delta):
                    total[term] += step.delta[term]
        return total

    def rows(self, since: bytes, until: bytes) -> list[RowChange] | None:
        """
        Return the FTS rows changed from structure ``since`` to ``until``, in order.

        None when a step between them is unknown or kept no rows (the reader reads again).
        """
        changes: list[RowChange] = []
        at, seen = since, 0
        with self._lock:
            while at != until:
                step = self._steps.get(at)
                seen += 1
                if step is None or step.rows is None or seen > STEPS_KEPT:
                    return None
                changes.extend(step.rows)
                at = step.after
        return changes


def taint(conn: Any) -> None:
    """Taint the open transaction of ``conn``'s ledger, if it has one (a reader has none)."""
    ledger = getattr(conn, 'count_ledger', None)
    if ledger is not None:
        ledger.taint()
