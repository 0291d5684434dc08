"""
Recall pipeline (docs/memory.md): BM25 + KNN → fusion → feedback → adjacency → top-k.

After fusion, pseudo-relevance feedback and adjacent memories re-score the candidates; the
weights (age, source) and the filters then decide which of them are returned.

Filters never starve results: when filtering leaves fewer than n, both channels are fetched
once more at ``max_fetch`` depth before giving up. KNN filters by collection, status and session
inside the vector index, so a superseded memory never takes a KNN slot.
"""

from __future__ import annotations

import functools
import heapq
import time
from typing import Any, Callable

import numpy as np

from robotmem_ros.engine import adjacency, bm25, feedback, store, vocab_store
from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.context import EngineContext
from robotmem_ros.engine.context_filter import ContextFilter, FilterOptions, origin_in_scope
from robotmem_ros.engine.decay import half_life_weight
from robotmem_ros.engine.fusion import maxscore_normalize, rrf_fuse, score_fuse, source_weight
from robotmem_ros.engine.spatial import SpatialSort
from robotmem_ros.engine.validation import RECALL_CHANNELS as BOTH
from robotmem_ros.types import MemoryRecord, RecallResult

LIST_CHUNK = 500
RECORD_STEP = 16  # candidates' records read per statement at least (see Recaller._weighted)
ADJACENT_LENDERS = 2  # candidates that lend score to their neighbours, per result asked for
# Candidates re-scored with the feedback words, per fusion_depth (or 2 n): all of a first pass,
# a bounded head of a filter's retry at max_fetch depth.
FEEDBACK_HEAD = 2
RELATED_QUERY_FACTS = 5  # the session facts whose text makes the related-memories query
# The related query's BM25 terms: its rarest, up to this many matching FTS rows in all. FTS5
# ranks every row an OR query matches; five facts' common words matched most of a large store
# (1.2-2.4 s of an end of session at 1M memories). Below this many rows every term is kept.
RELATED_MATCH_BUDGET = 20_000


class Recaller:
    """Runs recall queries against an engine's store."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx

    def recall(self, query: str, n: int, min_conf: float, session_id: str,
               cfilter: ContextFilter, options: FilterOptions, spatial: SpatialSort | None,
               collection: str, channels: tuple[str, ...] = BOTH) -> RecallResult:
        """Search, filter, rank and touch; the facade has validated every argument."""
        start = time.perf_counter()
        now = self.ctx.clock()
        with self.ctx.db.errors():
            if query == '*':
                records, mode = self._list(collection, n, min_conf, session_id, cfilter,
                                           options, spatial, now), 'all'
            else:
                records, mode = self._ranked(query, collection, n, min_conf, session_id,
                                             cfilter, options, spatial, now, channels)
                self._touch(records, now)
        return RecallResult(records, len(records), mode,
                            (time.perf_counter() - start) * 1000.0)

    def related(self, session_id: str, collection: str, limit: int) -> list[MemoryRecord]:
        """
        Memories from other sessions that relate to this session's facts (proactive recall).

        The query is made of the session's own facts, so they would fill the first pass of
        both channels; the session is excluded inside them (SQL and the vector index's mask).
        Its BM25 side keeps the facts' rarest terms within RELATED_MATCH_BUDGET matching rows,
        the way a "more like this" query keeps a document's most distinctive terms.
        """
        conn = self.ctx.db.reader()
        facts = store.session_facts(conn, session_id, RELATED_QUERY_FACTS)
        if not facts:
            return []
        query = ' '.join(facts)[:self.ctx.config.max_insight_chars]
        terms = vocab_store.rarest_within(conn, textmod.query_terms(query), RELATED_MATCH_BUDGET)
        records, _ = self._ranked(query, collection, limit, self.ctx.config
                                  .default_min_confidence, '', ContextFilter(),
                                  FilterOptions(), None, self.ctx.clock(), BOTH,
                                  exclude_session=session_id, terms=terms)
        return records

    # --- channels --------------------------------------------------------------------------

    def _ranked(self, query: str, collection: str, n: int, min_conf: float, session_id: str,
                cfilter: ContextFilter, options: FilterOptions, spatial: SpatialSort | None,
                now: float, channels: tuple[str, ...], exclude_session: str = '',
                terms: list[str] | None = None) -> tuple[list[MemoryRecord], str]:
        """Rank by both channels; ``terms`` replaces the query's own BM25 terms when given."""
        cfg = self.ctx.config
        conn = self.ctx.db.reader()
        fts_q, bm_terms = None, []
        if 'bm25' in channels:
            bm_terms = textmod.query_terms(query) if terms is None else terms
            fts_q = textmod.fts_match(bm_terms)
        qvec = functools.cache(functools.partial(self.ctx.embedding.embed_query, query)
                               if 'vector' in channels else lambda: None)
        filtered = bool(session_id or not cfilter.is_empty or spatial
                        or options.origin is not None or cfg.recall_scope != 'all'
                        or options.created_from is not None or options.created_to is not None
                        or options.as_of is not None)
        fetch = min(max(cfg.fusion_depth, n * (4 if filtered else 2)), cfg.max_fetch)
        pushed = cfilter.sql_equalities()  # equalities tested in SQL, before ranking
        # Where FTS5 ranks, the memories that can meet them, from the vector index (superseded
        # ones have no vector): BM25 then reads rows for its best matches only.
        within = (functools.cache(functools.partial(store.filter_candidates, conn, collection,
                                                    pushed))
                  if pushed and not options.include_superseded else None)
        while True:
            vec_result = self.ctx.side.start(functools.partial(
                self._nearest, qvec, collection, fetch, session_id, exclude_session, pushed))
            bm = _rescored(conn, store.fts_search(
                conn, fts_q, collection, fetch, now=now, session_id=session_id,
                min_confidence=min_conf, include_inactive=options.include_superseded,
                exclude_session=exclude_session, context=pushed, within=within), bm_terms, cfg
            ) if fts_q else []
            vec = vec_result()
            scores = _fuse(bm, vec, cfg)
            scores = _with_adjacent(conn, _with_feedback(conn, scores, bm, vec, bm_terms, n, cfg),
                                    n, cfg)
            kept = self._weighted(conn, scores, n if spatial is None else 0,
                                  lambda r: _passes(r, min_conf, cfilter, options, now)
                                  and origin_in_scope(r.origin, cfg.recall_scope), now)
            exhausted = len(bm) < fetch and len(vec) < fetch
            if len(kept) >= n or exhausted or fetch >= cfg.max_fetch:
                break
            # Both channels cost about a full scan whatever their depth (BM25 ranks every match,
            # KNN is brute force), so the retry goes straight to the bound: at most two passes.
            fetch = cfg.max_fetch
        kept.sort(key=lambda r: (-r.rrf_score, r.id))
        if spatial is not None:
            kept = spatial.apply(kept, lambda r: r.context)
        kept = kept[:n]
        for record, score in zip(kept, maxscore_normalize([r.rrf_score for r in kept])):
            record.rrf_score = score
        return kept, _mode(fts_q is not None or qvec() is None, qvec() is not None)

    def _nearest(self, qvec: Callable[[], np.ndarray | None], collection: str, depth: int,
                 session_id: str, exclude_session: str, context: list[tuple[str, Any]]
                 ) -> list[tuple[int, float]]:
        """
        Run the vector channel: embed the query (once a recall), find its nearest ``depth``.

        It runs beside the BM25 channel on a spare thread (engine/side_threads.py), so it reads
        through that thread's own connection; its errors reach the caller with its result.
        """
        vector = qvec()
        if vector is None:
            return []
        return store.vec_search(self.ctx.db.reader(), vector, collection, depth,
                                session_id=session_id, exclude_session=exclude_session,
                                context=context)

    def _weighted(self, conn: Any, scores: dict[int, float], n: int,
                  passes: Callable[[MemoryRecord], bool], now: float) -> list[MemoryRecord]:
        """
        Candidates that pass, scored by fusion x age (half-life) x source: all that can be top n.

        Records are read in fused-score order, a step at a time (the step doubles). A weight is
        at most max(1, real_weight), since a half-life weight is at most 1. So once the next
        fused score times that is below the n-th weighted score kept, no later candidate can
        reach the top ``n``, and the rest are never read or parsed. ``n`` 0 reads them all
        (a spatial sort reorders every one).
        """
        cfg = self.ctx.config
        ceiling = max(1.0, cfg.real_weight)
        order = sorted(scores, key=lambda memory_id: (-scores[memory_id], memory_id))
        kept: list[MemoryRecord] = []
        start, step = 0, max(2 * n, RECORD_STEP)
        while start < len(order):
            chunk = order[start:start + step]
            records = self.ctx.access.records(conn, chunk)
            for record in (records[i] for i in chunk if i in records):
                if passes(record):
                    half_life = (cfg.episodic_half_life_days if record.kind == 'episodic'
                                 else cfg.semantic_half_life_days)
                    age = now - (record.last_accessed or record.created_at)
                    record.rrf_score = (scores[record.id] * half_life_weight(age, half_life)
                                        * source_weight(record.context, cfg.real_weight))
                    kept.append(record)
            start, step = start + step, 2 * step
            if (n and start < len(order) and len(kept) >= n and scores[order[start]] * ceiling
                    < heapq.nlargest(n, (r.rrf_score for r in kept))[-1]):
                break
        return kept

    def _list(self, collection: str, n: int, min_conf: float, session_id: str,
              cfilter: ContextFilter, options: FilterOptions, spatial: SpatialSort | None,
              now: float) -> list[MemoryRecord]:
        """
        Query ``*``: memories passing the filters in time order (episode replay).

        Pages through the matching rows with a (created_at, id) cursor until ``n`` pass the
        context filter or the rows run out, so a rare match late in a long episode is found.
        A spatial sort needs every match to order them; it ranks the first ``max_fetch``.
        """
        cfg = self.ctx.config
        conn = self.ctx.db.reader()
        page = functools.partial(
            store.timeline_page, conn, collection, limit=LIST_CHUNK, now=now,
            min_confidence=min_conf, session_id=session_id,
            include_superseded=options.include_superseded, created_from=options.created_from,
            created_to=options.created_to, context=cfilter.sql_equalities())
        wanted = cfg.max_fetch if spatial is not None else n
        kept: list[MemoryRecord] = []
        cursor = (float('-inf'), 0)
        while len(kept) < wanted:
            rows = page(after=cursor)
            if not rows:
                break
            ids = [row[0] for row in rows]
            records = self.ctx.access.records(conn, ids)
            kept.extend(r for r in (records[i] for i in ids)
                        if _passes(r, min_conf, cfilter, options, now)
                        and origin_in_scope(r.origin, cfg.recall_scope))
            cursor = (rows[-1][1], rows[-1][0])
            if len(rows) < LIST_CHUNK:
                break
        if spatial is not None:
            kept = spatial.apply(kept, lambda r: r.context)
        return kept[:n]

    def _touch(self, records: list[MemoryRecord], now: float) -> None:
        """Count the hits; never waits for the write lock and never fails the read."""
        if not records:
            return
        self.ctx.access.record([r.id for r in records], now)
        for record in records:
            record.access_count += 1
            record.last_accessed = now


def _rescored(conn: Any, hits: list[tuple[int, float]], terms: list[str], cfg: Any
              ) -> list[tuple[int, float]]:
    """Score FTS5's candidates with ``bm25_k1`` / ``bm25_b`` (engine/bm25.py), best first."""
    if not hits:
        return []
    return bm25.rescore(store.fts_bodies(conn, [i for i, _ in hits]), terms,
                        vocab_store.corpus_stats(conn, terms), cfg.bm25_k1, cfg.bm25_b)


def _fuse(bm: list[tuple[int, float]], vec: list[tuple[int, float]], cfg: Any
          ) -> dict[int, float]:
    """Merge the channels as ``cfg.fusion`` says; both score higher-better."""
    if cfg.fusion == 'rrf':
        return rrf_fuse([[i for i, _ in bm], [i for i, _ in vec]], cfg.rrf_k)
    return score_fuse([bm, vec], (cfg.bm25_weight, 1.0 - cfg.bm25_weight))


def _with_feedback(conn: Any, scores: dict[int, float], bm: list[tuple[int, float]],
                   vec: list[tuple[int, float]], terms: list[str], n: int, cfg: Any
                   ) -> dict[int, float]:
    """
    Expand the BM25 terms with the best long candidates' words and fuse again (engine/feedback).

    The sample is read first (feedback_docs bodies), so a store of short memories pays for
    those few rows only. The best FEEDBACK_HEAD × max(fusion_depth, 2 n) candidates are
    re-scored, vector-only ones included; BM25 candidates beyond that head keep their score.
    """
    if not (cfg.feedback_docs and cfg.feedback_terms and cfg.feedback_weight and terms
            and scores):
        return scores
    sample = store.fts_bodies(conn, _best(scores, cfg.feedback_docs))
    weights = feedback.sample_weights(sample.values(), terms, textmod.QUERY_STOPWORDS,
                                      cfg.feedback_min_tokens)
    if not weights:
        return scores
    words = feedback.candidates(weights, cfg.feedback_terms)
    stats = vocab_store.corpus_stats(conn, [*terms, *words])
    expansion = feedback.best_terms(weights, words, stats.idf, cfg.feedback_terms)
    if not expansion:
        return scores
    head = _best(scores, FEEDBACK_HEAD * max(cfg.fusion_depth, 2 * n))
    bodies = {**sample, **store.fts_bodies(conn, [i for i in head if i not in sample])}
    rescored = dict(bm)
    rescored.update(feedback.rescored(bodies, rescored, terms, expansion, stats, cfg.bm25_k1,
                                      cfg.bm25_b, cfg.feedback_weight))
    return _fuse(sorted(rescored.items(), key=lambda hit: (-hit[1], hit[0])), vec, cfg)


def _with_adjacent(conn: Any, scores: dict[int, float], n: int, cfg: Any) -> dict[int, float]:
    """
    Spread the best candidates' scores to the candidates stored next to them (engine/adjacency).

    Only the best ADJACENT_LENDERS × n lend (each costs two index seeks): on LoCoMo the best 20
    of 50 give R@10 / MRR@10 within 0.003 of all 50 (docs/performance.md, "Adjacent
    memories"), and a filter's retry at max_fetch depth would otherwise look up thousands.
    """
    if not (cfg.adjacent_span and cfg.adjacent_weight and scores):
        return scores
    lenders = _best(scores, ADJACENT_LENDERS * max(n, 1))
    return adjacency.spread(scores, store.adjacent(conn, lenders, cfg.adjacent_span),
                            cfg.adjacent_weight)


def _best(scores: dict[int, float], count: int) -> list[int]:
    """Return the ``count`` best-scored ids, best first (ties: the older memory first)."""
    return heapq.nlargest(count, scores, key=lambda memory_id: (scores[memory_id], -memory_id))


def _mode(bm25: bool, vector: bool) -> str:
    if bm25 and vector:
        return 'hybrid'
    return 'vector_only' if vector else 'bm25_only'


def _passes(record: MemoryRecord, min_conf: float, cfilter: ContextFilter,
            options: FilterOptions, now: float) -> bool:
    if record.status == 'forgotten' or record.confidence < min_conf:
        return False
    if record.status != 'active' and not options.include_superseded:
        return False
    if (options.as_of is None and record.status == 'active'
            and record.valid_until is not None and record.valid_until <= now):
        return False
    if options.created_from is not None and record.created_at < options.created_from:
        return False
    if options.created_to is not None and record.created_at > options.created_to:
        return False
    if options.as_of is not None and not (
            record.created_at <= options.as_of
            and (record.valid_until is None or options.as_of < record.valid_until)):
        return False
    return options.origin_matches(record.origin) and cfilter.matches(record.context)
