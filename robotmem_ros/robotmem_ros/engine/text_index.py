"""
BM25 candidates from a tantivy index beside the store, where FTS5's ranking costs too much.

FTS5 finds a query's matches quickly but ranks every one of them (``bm25()`` per match): the OR
of a query's terms matches 40 000–190 000 rows of a 1M store, 40–150 ms. tantivy (Rust, block-max
WAND) gives the same best 50 in 2–4 ms (docs/performance.md, "The text index"). From
``text_index_min_rows`` FTS rows on, a BM25 search outside a session takes its candidates from
here (its context equalities on schema.CONTEXT_PATHS are terms of the index), and so does the
dedup Jaccard layer (``overlapping``: every fact that can reach the threshold, where FTS5's
rare-token query read thousands of rows at 1M). FTS5 keeps everything else (searches within a
session or on other context paths, corpus statistics), and the callers still score every
candidate from its FTS body (engine/bm25.py, engine/jaccard_store.py), so only the choice of
candidates moves to this index.

The SQLite file stays the source of truth; this index is a cache of its FTS rows:

* Once an index exists (meta ``text_index``), triggers on ``memories`` log in ``text_changes``
  every memory whose text, status or collection changes, in the transaction of the change
  (schema.py, version 7): writes of any process, the CLI included.
* ``state.json`` in the index directory names the last change the index holds; it is written
  after each commit. A search leaves out the memories changed since and ranks them with FTS5
  instead, so the next recall finds a learn before the index holds it. A crash between a commit
  and its state only makes that set larger.
* A worker thread applies the log about every CATCH_UP_S (one tantivy commit, 15–25 ms at 1M),
  and deletes log rows the index has held for PRUNE_AFTER_S: longer than any search keeps the
  state it read.
* An index that is missing, unreadable, of another store or ahead of the store's log is built
  again from the FTS rows in the background (about 30 s per million rows); FTS5 answers until
  it is ready. Only one process writes an index (tantivy's own lock); another one reads it.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import logging
import math
import os
import pathlib
import shutil
import threading
import time
from typing import Any, Callable, ContextManager, Iterable, Sequence
import uuid

import numpy as np

from robotmem_ros.engine import heap, jaccard_store, schema, text_log_store, vocab_store
from robotmem_ros.engine import text as textmod

LOG = logging.getLogger('robotmem.engine')

# 2: type and ntok, for the Jaccard layer; 3: ctx, for filtered searches; 4: jw (_length_weight);
# 5: sized (length_bucket)
FORMAT = 5
CATCH_UP_S = 1.0
PRUNE_AFTER_S = 30.0
WRITER_HEAP = 15_000_000  # tantivy's least heap for one indexing thread
# More changes than this not yet applied (a batch of perceptions): FTS5 ranks until the worker
# catches up, since ranking that many apart would cost what FTS5's full ranking costs.
MAX_CHANGED = 10_000
# The Jaccard layer asks for this many facts sharing enough tokens first, for all of them
# next, and gives way to FTS5 beyond the most.
OVERLAPPING_FIRST = 4_096
# Of the rarest tokens of its length, a fact must hold this many (a minimum-should-match): 3
# measured slower than 2 at 1M memories (docs/performance.md, "Three of the rarest tokens").
OVERLAP = 2
# length_bucket: a length of its own up to this, then buckets 1/8 to 1/16 of the length wide
# (part of the index's format).
EXACT_LENGTHS = 15
NESTED_MAX = 8  # a nested level costs each fact found a step: 0.6 ms a level for 40 000
MAX_OVERLAPPING = 50_000
# From this many facts named by the rare tokens at most (their postings over k), the query
# weighs each fact by its length (WEIGHT_SPAN, WEIGHT_SHIFT) and asks for WEIGHTED_FIRST first:
# weighing costs about 0.1 µs a named fact, handing over a hit about as much (docs/performance.md,
# "Facts weighed by their length").
WEIGHTED_FROM = 8_192
WEIGHTED_FIRST = 512
WEIGHT_SPAN = 256.0
WEIGHT_SHIFT = 8
# Context values longer than this get no term (tantivy drops a term over 65 530 bytes).
MAX_CONTEXT_BYTES = 1_000
# A filter term (collection, status, type, context value) held by this share of the documents
# or more is left out of the query: SQL tests every result against the filters anyway, and
# intersecting a posting list of nearly every document cost 2 ms of a 4 ms search at 1M.
NEARLY_ALL = 0.99
_TOKENIZER = 'robotmem_tokens'


def available() -> bool:
    """Return True when the tantivy package is installed."""
    return importlib.util.find_spec('tantivy') is not None


def path_for(db_path: pathlib.Path) -> pathlib.Path:
    """Return the directory of a store's text index: ``<store>-tindex``."""
    return db_path.with_name(db_path.name + '-tindex')


class TextIndex:
    """The tantivy index of one store, its state and the worker that keeps it current."""

    def __init__(self, db_path: pathlib.Path, min_rows: int, opener: Callable[[], Any],
                 write: Callable[[], ContextManager[Any]],
                 snapshot: Callable[[Any], ContextManager[Any]]) -> None:
        """
        Describe the index of the store at ``db_path``; nothing is read or started yet.

        ``opener`` gives the worker its own connection, ``write`` is the store's one write
        path (the build's meta mark, the log's pruning) and ``snapshot`` holds one read
        transaction (database.snapshot).
        """
        self.directory = path_for(db_path)
        self._min_rows = min_rows if available() else 0
        self._opener = opener
        self._write = write
        self._snapshot = snapshot
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._index: Any = None
        self._state: dict[str, Any] = {}
        self._state_mtime = 0.0
        self._writer: Any = None
        self._commits: collections.deque[tuple[float, int]] = collections.deque()
        self.error = ''

    # --- search ----------------------------------------------------------------------------

    def candidates(self, conn: Any, match: str, collection: str, depth: int, *,
                   active_only: bool, context: Sequence[tuple[str, Any]] = ()
                   ) -> tuple[list[tuple[int, float]], list[int], bool] | None:
        """
        Rank a MATCH expression's matches in one collection; None while no index can answer.

        ``context``: (json path, value) equalities on schema.CONTEXT_PATHS the matches must
        meet, as SQL compares them (``context_terms``). Returns (id, score) of the best
        ``depth`` the index holds as of its state, best first (lower is better, as FTS5's
        bm25), the memories changed since (for FTS5 to rank), and whether more matches may
        follow the ones returned.
        """
        ready = self._ready(conn)
        if ready is None:
            return None
        index, changed = ready
        terms = context_terms(
            [(schema.CONTEXT_PATHS.index(path[2:]), value) for path, value in context])
        if len(terms) < len(context):  # a value the index leaves out (too long): FTS5 ranks
            return None
        asked = depth + len(changed)
        try:
            hits, ids = _search(conn, index, match, collection, active_only, terms, asked)
        except ValueError as exc:  # tantivy's errors (a damaged file): FTS5 answers
            self._report(exc)
            return None
        left_out = set(changed)
        ranked = [(int(memory_id), -float(score)) for (score, _), memory_id in zip(hits, ids)
                  if memory_id not in left_out]
        return ranked[:depth], changed, len(hits) == asked

    def overlapping(self, conn: Any, tokens: frozenset[str], collection: str,
                    threshold: float) -> tuple[dict[int, float], list[int]] | None:
        """
        Name every active fact of a collection whose Jaccard with ``tokens`` may reach threshold.

        Returns ({id: Jaccard} of the facts the index holds that reach it, the memories changed
        since its state, all of them, for the caller to score: engine/jaccard_store). The
        Jaccard is the one of the fact's FTS body. None while no index can answer, or when too
        many facts share enough tokens.
        """
        ready = self._ready(conn)
        if ready is None:
            return None
        index, changed = ready
        try:
            found = _overlapping(conn, index, tokens, collection, threshold)
        except ValueError as exc:
            self._report(exc)
            return None
        if found is None:
            return None
        left_out = set(changed)
        return ({memory_id: score for memory_id, score in found.items()
                 if memory_id not in left_out}, changed)

    def tidy(self, conn: Any) -> None:
        """
        Keep the change log bounded, in the caller's write (the engine's open).

        Rows the index's state has named for PRUNE_AFTER_S go. A log that no index here can
        read (no index of this store on disk, and this process builds none: off, no tantivy,
        or a store under the threshold) stops: meta and rows are deleted, and an index built
        later starts a log of its own.
        """
        token = text_log_store.token(conn)
        if token is None:
            return
        state = _read_state(self.directory)
        if state is not None and state['token'] == token:
            if time.time() - (self.directory / 'state.json').stat().st_mtime >= PRUNE_AFTER_S:
                text_log_store.forget_changes(conn, int(state['seq']))
        elif not self._min_rows or vocab_store.fts_totals(conn)[0] < self._min_rows:
            text_log_store.stop(conn)

    def stats(self) -> dict[str, Any]:
        """Documents held, last change held, whether a build runs, the last error."""
        index = self._index
        return {'text_index_docs': index.searcher().num_docs if index is not None else 0,
                'text_index_seq': int(self._state.get('seq', 0)),
                'text_index_building': self._worker is not None and index is None,
                'text_index_error': self.error}

    def close(self) -> None:
        """Stop the worker and release tantivy's writer lock; idempotent."""
        self._stop.set()
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=30.0)
        with self._lock:
            self._index, self._writer = None, None

    # --- state -----------------------------------------------------------------------------

    def _ready(self, conn: Any) -> tuple[Any, list[int]] | None:
        """Return the index and the memories changed since its state; None if it can't answer."""
        if not self._min_rows:
            return None
        self._start_worker(conn)
        index, seq = self._current()
        if index is None or text_log_store.token(conn) != self._state.get('token'):
            return None  # none yet, or the store stopped logging for it (tidy): FTS5 answers
        changed = text_log_store.changed_since(conn, seq)
        if len(changed) > MAX_CHANGED:  # a burst the worker has not applied yet
            return None
        return index, changed

    def _start_worker(self, conn: Any) -> None:
        if self._worker is not None or self._stop.is_set():
            return
        if vocab_store.fts_totals(conn)[0] < self._min_rows:
            return
        with self._lock:
            if self._worker is None and not self._stop.is_set():
                self._worker = threading.Thread(target=self._run, name='text-index',
                                                daemon=True)
                self._worker.start()

    def _current(self) -> tuple[Any, int]:
        """Return the index and the last change it holds, re-read if another process wrote."""
        index = self._index
        if index is None:
            return None, 0
        try:
            mtime = (self.directory / 'state.json').stat().st_mtime
        except OSError:
            return None, 0
        if mtime != self._state_mtime:
            # State first, then the index: the index is then at least as new as the state.
            state = _read_state(self.directory)
            if state is None or state.get('token') != self._state.get('token'):
                return None, 0
            index.reload()
            self._state, self._state_mtime = state, mtime
        return index, int(self._state['seq'])

    def _report(self, exc: Exception) -> None:
        """Log a failure once (the worker retries every CATCH_UP_S) and keep it for stats."""
        if str(exc) != self.error:
            LOG.warning('text index %s: %s; FTS5 ranks meanwhile', self.directory, exc)
        self.error = str(exc)

    def _run(self) -> None:
        conn = self._opener()
        try:
            while not self._stop.is_set():
                try:
                    if self._index is None:
                        self._open_or_build(conn)
                    else:
                        self._catch_up(conn)
                        heap.return_owed()  # once idle: what the last commits freed
                    self.error = ''
                except Exception as exc:  # noqa: BLE001 - the worker must outlive one failure
                    self._report(exc)
                    with self._lock:
                        self._index, self._writer = None, None
                self._stop.wait(CATCH_UP_S)
        finally:
            conn.close()

    def _open_or_build(self, conn: Any) -> None:
        token = text_log_store.token(conn)
        state = _read_state(self.directory)
        if (state is not None and token is not None and state.get('token') == token
                and int(state['seq']) <= text_log_store.last_change(conn)):
            try:
                self._adopt(_open_index(self.directory), state)
                return
            except (OSError, ValueError) as exc:
                LOG.warning('text index %s unreadable (%s); building it again', self.directory,
                            exc)
        self._build(conn)

    def _build(self, conn: Any) -> None:
        began = time.monotonic()
        token = uuid.uuid4().hex
        with self._write() as writer_conn:  # from here on every change is logged
            text_log_store.start(writer_conn, token)
        _clear_dead_builds(self.directory)
        building = self.directory.with_name(f'{self.directory.name}.build-{os.getpid()}')
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        index = _open_index(building, create=True)
        writer = index.writer(heap_size=WRITER_HEAP, num_threads=1)
        count = 0
        with self._snapshot(conn):  # one read: the rows and the end of the log agree
            seq = text_log_store.last_change(conn)
            for rows in text_log_store.all_rows(conn):
                if self._stop.is_set():
                    break
                for row in rows:
                    writer.add_document(_document(row))
                count += len(rows)
        if self._stop.is_set():
            shutil.rmtree(building, ignore_errors=True)
            return
        writer.commit()
        writer.wait_merging_threads()
        del writer
        state = {'format': FORMAT, 'token': token, 'seq': seq}
        _write_state(building, state)
        shutil.rmtree(self.directory, ignore_errors=True)
        os.replace(building, self.directory)
        self._adopt(_open_index(self.directory), state)
        LOG.info('text index %s: %d rows in %.1f s', self.directory, count,
                 time.monotonic() - began)
        heap.return_freed()  # the build's writer heap and rows

    def _own_writer(self) -> Any:
        """
        Return this process's writer of the index, opened once; None if another holds it.

        Kept open: a writer per catch-up grew RSS by about 7 MiB a commit at 1M (RSS settled
        15 MiB above a reader with one writer kept, docs/performance.md).
        """
        if self._writer is None:
            try:
                self._writer = self._index.writer(heap_size=WRITER_HEAP, num_threads=1)
            except ValueError:  # LockBusy: another process holds tantivy's writer lock
                return None
        return self._writer

    def _adopt(self, index: Any, state: dict[str, Any]) -> None:
        with self._lock:
            self._index, self._state = index, state
            self._state_mtime = (self.directory / 'state.json').stat().st_mtime

    def _catch_up(self, conn: Any) -> None:
        done = int(self._state['seq'])
        with self._snapshot(conn):
            if text_log_store.token(conn) != self._state.get('token'):
                raise ValueError('the store no longer logs changes for this index')
            seq = text_log_store.last_change(conn)
            if seq <= done:
                return
            changed = text_log_store.changed_since(conn, done, seq)
            rows = text_log_store.rows_of(conn, changed)
        writer = self._own_writer()
        if writer is None:  # another process writes this index
            return
        for memory_id in changed:
            writer.delete_documents_by_term('id', memory_id)
        for row in rows:
            writer.add_document(_document(row))
        writer.commit()
        state = dict(self._state, seq=seq)
        _write_state(self.directory, state)
        self._index.reload()
        self._adopt(self._index, state)
        now = time.monotonic()
        self._commits.append((now, seq))
        held = 0
        while self._commits and self._commits[0][0] <= now - PRUNE_AFTER_S:
            held = self._commits.popleft()[1]
        if held:
            with self._write() as writer_conn:
                text_log_store.forget_changes(writer_conn, held)
        heap.return_freed(heap.PERIOD_S)  # what this commit and the learns before it freed


def _search(conn: Any, index: Any, match: str, collection: str, active_only: bool,
            context: list[str], count: int) -> tuple[list[tuple[float, Any]], list[int]]:
    """Return tantivy's best ``count`` (score, address) with ``context`` terms, and ids."""
    import tantivy
    searcher = index.searcher()
    terms = _terms(conn, searcher, index.schema, textmod.match_terms(match))
    if not terms:  # no term the index holds: nothing matches
        return [], []
    must = [(tantivy.Occur.Must, tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, term) for term in terms]))]
    filters = [('collection', collection)] + ([('status', 'active')] if active_only else [])
    filters += [('ctx', term) for term in context]
    must += _filters(searcher, index.schema, filters)
    hits = searcher.search(tantivy.Query.boolean_query(must), count, count=False).hits
    return hits, searcher.fast_field_values('id', [address for _, address in hits])


def _overlapping(conn: Any, index: Any, tokens: frozenset[str], collection: str,
                 threshold: float) -> dict[int, float] | None:
    """
    Return {id: Jaccard} of the active facts whose Jaccard with ``tokens`` reaches ``threshold``.

    Such a fact, of b tokens, holds m_b of the n tokens (_least_overlaps), hence k of any
    n − m_b + k of them: the gate asks, for each length bucket that can reach the threshold,
    for k of the rarest tokens among that bucket's facts (field ``sized``), and tantivy counts
    the n tokens only for the facts found, every token scoring 1, so a fact's score is its
    overlap o; with its own token count b (fast field ``ntok``) its Jaccard is o / (n + b − o).
    None when more than MAX_OVERLAPPING facts share enough tokens, or for a threshold of 0,
    which every length can reach.

    Rarity is tantivy's document frequency: it orders the tokens, which only sets the cost.
    A token in more documents than half the facts the gate can name is counted in a level of
    its own (the NESTED_MAX most common): tantivy seeks a lone optional term along its skip
    list to each fact found, but walks a union of optional terms over every document in
    between (docs/performance.md, "The Jaccard layer's query").

    Best first, the search is complete once its last hit scores below what a fact that
    reaches the threshold scores. Unweighted that bar is the least m_b, which thousands of
    long facts may pass at 1M; where the gate names many facts, each score is weighted by the
    fact's length instead (_length_weight), and only a few dozen pass (_weighted_bar).
    """
    import tantivy
    if threshold <= 0.0:
        return None
    n = len(tokens)
    schema, searcher = index.schema, index.searcher()
    counts = {term: searcher.doc_freq('body', term) for term in tokens}
    order = sorted(tokens, key=lambda term: (counts[term], term))

    def one(field: str, term: str, score: float) -> Any:
        query = tantivy.Query.term_query(schema, field, term, index_option='basic')
        return tantivy.Query.const_score_query(query, score)

    least = _least_overlaps(n, threshold)
    gates, named = [], 0.0
    for bucket, m in least.items():
        k = min(OVERLAP, m)
        size = n - m + k
        sized = {term: searcher.doc_freq('sized', f'{bucket}:{term}') for term in tokens}
        rare = sorted(tokens, key=lambda term: (sized[term], term))[:size]
        named += sum(sized[term] for term in rare) / k  # at most, by this bucket's gate
        gates.append((tantivy.Occur.Should, tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, one('sized', f'{bucket}:{term}', 0.0)) for term in rare],
            k)))
    common = _nested(order, counts, named)
    query = tantivy.Query.boolean_query(
        [(tantivy.Occur.Must, tantivy.Query.boolean_query(gates))]
        + [(tantivy.Occur.Should, one('body', term, 1.0)) for term in order
           if term not in common]
        + _filters(searcher, schema, [('collection', collection), ('status', 'active'),
                                      ('type', 'fact')]))
    for term in common:
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, query), (tantivy.Occur.Should, one('body', term, 1.0))])
    weighted = named >= WEIGHTED_FROM
    limit = WEIGHTED_FIRST if weighted else OVERLAPPING_FIRST
    while True:
        bar = (_weighted_bar(n, threshold) if weighted else min(least.values()) - 0.5)
        result = searcher.search(query, limit, count=True,
                                 weight_by_field='jw' if weighted else None)
        hits = result.hits
        if len(hits) < limit or result.count <= limit or hits[-1][0] < bar:
            break
        if result.count > MAX_OVERLAPPING:
            return None
        # Unweighted, more than a page pass the bar: weighted, fewer do.
        limit = min(result.count, 8 * limit) if weighted else WEIGHTED_FIRST
        weighted = True
    shared = np.fromiter((score for score, _ in hits), dtype=float, count=len(hits))
    # Best first, so the facts that pass the bar lead; a list of thousands of numpy bools
    # zipped with the hits took 0.7 ms of a learn at 1M.
    held = int(np.count_nonzero(shared >= bar))
    found = [address for _, address in hits[:held]]
    sizes = np.asarray(searcher.fast_field_values('ntok', found), dtype=float)
    overlap = np.rint(shared[:held] / (_multiplier(sizes) if weighted else 1.0))
    scores = overlap / (n + sizes - overlap)
    reach = np.flatnonzero(scores >= threshold)
    return {int(memory_id): float(score) for memory_id, score in zip(
        searcher.fast_field_values('id', [found[i] for i in reach]), scores[reach])}


def length_bucket(size: int) -> int:
    """
    Return the length bucket of a fact of ``size`` Jaccard tokens (its ``sized`` terms' prefix).

    Its own length up to EXACT_LENGTHS, then 8 buckets a power of two: integers only, so an
    index and a query agree on every machine.
    """
    if size <= EXACT_LENGTHS:
        return size
    shift = size.bit_length() - 4
    return 8 * shift + (size >> shift)


def _next_bucket(size: int) -> int:
    """Return the least length past ``size`` in another bucket (length_bucket)."""
    if size < EXACT_LENGTHS:
        return size + 1
    shift = max(size.bit_length() - 4, 0)
    return ((size >> shift) + 1) << shift


def _least_overlaps(n: int, threshold: float) -> dict[int, int]:
    """
    {bucket: the least overlap with n tokens of a fact of that bucket that reaches threshold}.

    A fact of b tokens reaches t when its overlap o ≥ c·(n + b), c = t / (1 + t), and holds
    o ≤ min(n, b): only b within [t·n, n / t] can. The overlap needed grows with b, so a
    bucket's least is that of its shortest length in the window, and the loop steps from
    bucket to bucket (a low threshold's window is long). ``threshold`` > 0.
    """
    least: dict[int, int] = {}
    size = max(1, math.floor(threshold * n))
    while size <= n / threshold + 1:
        overlap = jaccard_store.least_overlap(n + size, threshold / (1.0 + threshold))
        if overlap <= min(n, size):
            least.setdefault(length_bucket(size), overlap)
            size = _next_bucket(size)
        else:
            size += 1
    return least


def _length_weight(sizes: Any) -> Any:
    """
    Return the fast field ``jw`` of facts of ``sizes`` Jaccard tokens (a number or an array).

    tantivy multiplies a weighted search's score by log2(2 + jw) (``weight_by_field``): this
    value makes that WEIGHT_SPAN / (size + WEIGHT_SHIFT), at least 1.
    """
    return np.maximum(2.0 ** (WEIGHT_SPAN / (sizes + WEIGHT_SHIFT)) - 2.0, 0.0)


def _multiplier(sizes: np.ndarray) -> np.ndarray:
    """Return what tantivy multiplied the scores of facts of ``sizes`` tokens by."""
    return np.log2(2.0 + _length_weight(sizes))


def _weighted_bar(n: int, threshold: float) -> float:
    """
    Return the least weighted score of a fact that reaches ``threshold`` with n tokens.

    A fact of b tokens reaches it when its overlap o ≥ c·(n + b), c = t / (1 + t), and is
    weighted by S / (b + β): its score is at least S·c·(n + b) / (b + β). Only b within
    [t·n, n / t] can reach t, and over that window the bound is monotone: its least is at
    one end. Exact for β = n; the further the two, the more facts below t pass too (the
    caller computes each Jaccard). Facts longer than S − β are weighted by 1, more than the
    bound, so they still pass it. A little under it for float rounding.
    """
    if threshold <= 0.0:
        return 0.0
    c = threshold / (1.0 + threshold)
    ends = (threshold * n, n / threshold)
    least = min(c * (n + b) / (b + WEIGHT_SHIFT) for b in ends)
    return WEIGHT_SPAN * least * (1.0 - 1e-6)


def _nested(order: list[str], counts: dict[str, int], named: float) -> list[str]:
    """Return the tokens that _overlapping counts level by level."""
    common = [term for term in order if 2 * counts[term] > named]
    return common[max(len(common) - NESTED_MAX, 0):]  # the most common ones


def _filters(searcher: Any, schema: Any, pairs: list[tuple[str, str]]) -> list[Any]:
    """
    Return required clauses (scoring 0) for the (field, value) filters that leave any out.

    A value held by NEARLY_ALL of the documents gets none (the callers' SQL filters every
    result). Deleted documents still count in a term's frequency, so a skipped filter may let
    a few documents through that SQL then drops; none that pass is ever left out.
    """
    import tantivy
    floor = NEARLY_ALL * searcher.num_docs
    return [(tantivy.Occur.Must, tantivy.Query.const_score_query(
        tantivy.Query.term_query(schema, name, value, index_option='basic'), 0.0))
        for name, value in pairs if searcher.doc_freq(name, value) < floor]


def _terms(conn: Any, searcher: Any, schema: Any, terms: list[str]) -> list[Any]:
    """
    One query per term, weighted so that tantivy's BM25 ranks as FTS5's ``bm25()``.

    Both score ``idf × tf·(k1 + 1) / (tf + k1·(1 − b + b·len/avg))`` with k1 = 1.2, b = 0.75,
    but tantivy's IDF is ``ln(1 + (N − n + 0.5) / (n + 0.5))`` and FTS5's the same log without
    the 1 (nearly 0 for a term in most rows): each term is boosted by their ratio, from FTS5's
    row counts, so the candidates are the ones FTS5 would rank first. tantivy's N and n count
    every document its segments hold, deleted ones too until a merge drops them; the boost
    must use the same N (:func:`_held_documents`), or a store with many pending deletes (a
    burst of forgets) ranks by skewed IDFs.
    """
    import tantivy
    stats = vocab_store.corpus_stats(conn, terms)
    total = _held_documents(searcher)
    queries = []
    for term in terms:
        held = searcher.doc_freq('body', term)
        if held:
            own = math.log(1.0 + (total - held + 0.5) / (held + 0.5))
            queries.append(tantivy.Query.boost_query(
                tantivy.Query.term_query(schema, 'body', term, index_option='freq'),
                stats.idf(term) / own))
    return queries


def _held_documents(searcher: Any) -> int:
    """
    Return tantivy's BM25 N: the documents its segments hold, deleted ones included.

    The binding gives the live count only (``num_docs``); every document holds one status
    term, and a term's document frequency counts deleted documents as BM25 does.
    """
    return sum(searcher.doc_freq('status', status) for status in schema.STATUSES)


def context_terms(values: Iterable[tuple[int, Any]]) -> list[str]:
    """
    Terms of (position in schema.CONTEXT_PATHS, value) pairs, equal where SQL's ``=`` is.

    SQL compares numbers by value (1 = 1.0) and reads JSON ``true`` as 1 (the equalities of
    ContextFilter.sql_equalities), so numbers and booleans become one float. An object, a
    list or null has no term (no pushed equality names one), nor has an integer beyond a
    float's range (SQL reads it as infinite, which no filter may name), a string over
    MAX_CONTEXT_BYTES or one that is not valid UTF-8 (a lone surrogate from a JSON escape):
    a search for one of those goes to FTS5.
    """
    terms = []
    for position, value in values:
        term = _term(value)
        if term is not None:
            terms.append(f'{position}:{term}')
    return terms


def _term(value: Any) -> str | None:
    try:
        if isinstance(value, (bool, int, float)):
            return repr(float(value))
        if isinstance(value, str) and len(value.encode('utf-8')) <= MAX_CONTEXT_BYTES:
            return 's:' + value
    except (OverflowError, UnicodeEncodeError):
        pass
    return None


def _document(row: Any) -> Any:
    import tantivy
    values = json.loads(row[4]) if row[4] is not None else []
    tokens = textmod.body_jaccard_tokens(row[5])
    bucket = length_bucket(len(tokens))
    return tantivy.Document(id=row[0], collection=row[1], status=row[2], type=row[3],
                            ctx=context_terms(enumerate(values)), body=row[5],
                            ntok=len(tokens), jw=float(_length_weight(len(tokens))),
                            sized=' '.join(f'{bucket}:{term}' for term in tokens))


def _open_index(directory: pathlib.Path, *, create: bool = False) -> Any:
    """
    Open (or create) an index whose body field is split at spaces only.

    FTS bodies are already the engine's tokens joined by spaces (text.fts_index_text), the
    tokens the queries use; tantivy must not split or fold them again.
    """
    import tantivy
    if create:
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field('id', indexed=True, fast=True)
        builder.add_text_field('collection', tokenizer_name='raw', index_option='basic')
        builder.add_text_field('status', tokenizer_name='raw', index_option='basic')
        builder.add_text_field('type', tokenizer_name='raw', index_option='basic')
        builder.add_text_field('ctx', tokenizer_name='raw', index_option='basic')  # values
        builder.add_integer_field('ntok', fast=True)  # the body's Jaccard token count
        builder.add_float_field('jw', fast=True)  # _length_weight(ntok)
        builder.add_text_field('body', tokenizer_name=_TOKENIZER, index_option='freq')
        # Each Jaccard token prefixed by the fact's length_bucket: the Jaccard layer's gate.
        builder.add_text_field('sized', tokenizer_name=_TOKENIZER, index_option='basic')
        index = tantivy.Index(builder.build(), path=str(directory))
    else:
        index = tantivy.Index.open(str(directory))
    index.register_tokenizer(
        _TOKENIZER, tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
    return index


def _clear_dead_builds(directory: pathlib.Path) -> None:
    """Delete the build directories of processes that died building (kill -9 mid-build)."""
    for partial in directory.parent.glob(f'{directory.name}.build-*'):
        pid = partial.name.rsplit('-', 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(partial, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _read_state(directory: pathlib.Path) -> dict[str, Any] | None:
    try:
        state = json.loads((directory / 'state.json').read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get('format') != FORMAT:
        return None
    if not isinstance(state.get('seq'), int) or not isinstance(state.get('token'), str):
        return None
    return state


def _write_state(directory: pathlib.Path, state: dict[str, Any]) -> None:
    partial = directory / 'state.json.partial'
    partial.write_text(json.dumps(state))
    os.replace(partial, directory / 'state.json')
