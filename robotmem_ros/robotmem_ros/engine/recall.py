"""
Recall pipeline: BM25 + filtered KNN → fusion (score or RRF) → weights → filters → top-k.

Filters never starve results: when filtering leaves fewer than n, both channels are fetched
once more at ``max_fetch`` depth before giving up. KNN filters by collection, status and session
inside the vector index, so a superseded memory never takes a KNN slot.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, TYPE_CHECKING

from robotmem_ros.engine import store
from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.access_counts import AccessCounts
from robotmem_ros.engine.context_filter import (ContextFilter, FilterOptions, origin_in_scope,
                                                parse_filter)
from robotmem_ros.engine.database import Error as SqlError
from robotmem_ros.engine.decay import half_life_weight
from robotmem_ros.engine.fusion import maxscore_normalize, rrf_fuse, score_fuse, source_weight
from robotmem_ros.engine.spatial import parse_spatial_sort, SpatialSort
from robotmem_ros.engine.types import MemoryRecord, RecallResult
from robotmem_ros.engine.validation import check_finite, check_text
from robotmem_ros.errors import StorageError, ValidationError

if TYPE_CHECKING:
    from robotmem_ros.engine.engine import MemoryEngine

MAX_N = 100
BOTH = ('bm25', 'vector')
LIST_CHUNK = 500


class Recaller:
    """Runs recall queries against an engine's store."""

    def __init__(self, engine: 'MemoryEngine') -> None:
        self.engine = engine
        self.access = AccessCounts(engine.db)

    def recall(self, query: str, n: int, min_confidence: float, session_id: str,
               context_filter: str | dict, spatial_sort: str | dict, collection: str, *,
               channels: Iterable[str] = BOTH) -> RecallResult:
        """Validate, search, filter, rank and touch; see MemoryEngine.recall."""
        start = time.perf_counter()
        cfg = self.engine.config
        query = check_text('query', query, max_chars=cfg.max_insight_chars)
        n = self._n(n)
        min_conf = self._min_confidence(min_confidence)
        session_id = check_text('session_id', session_id or '', max_chars=256, required=False)
        cfilter, options = parse_filter(context_filter, max_bytes=cfg.max_json_bytes,
                                        max_depth=cfg.max_json_depth)
        spatial = parse_spatial_sort(spatial_sort, max_bytes=cfg.max_json_bytes)
        now = self.engine.clock()
        self.access.flush()  # hits deferred by a busy store, so this answer counts them
        try:
            if query == '*':
                records, mode = self._list(collection, n, min_conf, session_id, cfilter,
                                           options, spatial, now), 'all'
            else:
                records, mode = self._ranked(query, collection, n, min_conf, session_id,
                                             cfilter, options, spatial, now, tuple(channels))
                self._touch(records, now)
        except SqlError as exc:
            raise StorageError(f'recall failed: {exc}') from exc
        return RecallResult(records, len(records), mode,
                            (time.perf_counter() - start) * 1000.0)

    def related(self, session_id: str, collection: str, limit: int) -> list[MemoryRecord]:
        """Memories from other sessions that relate to this session's facts (proactive recall)."""
        rows = self.engine.db.reader().execute(
            "SELECT content FROM memories WHERE session_id = ? AND status = 'active' "
            "AND type = 'fact' ORDER BY confidence DESC, created_at DESC LIMIT 5",
            (session_id,)).fetchall()
        if not rows:
            return []
        query = ' '.join(row[0] for row in rows)[:self.engine.config.max_insight_chars]
        records, _ = self._ranked(query, collection, limit, self.engine.config
                                  .default_min_confidence, '', ContextFilter(),
                                  FilterOptions(), None, self.engine.clock(), BOTH,
                                  exclude_session=session_id)
        return records

    # --- validation ------------------------------------------------------------------------

    def _n(self, n: Any) -> int:
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValidationError(f'n must be an integer, got {n!r}')
        if n == 0:
            return self.engine.config.default_n
        if not 1 <= n <= MAX_N:
            raise ValidationError(f'n must be between 1 and {MAX_N} (0 = default), got {n}')
        return n

    def _min_confidence(self, value: Any) -> float:
        value = check_finite('min_confidence', value)
        if value < 0:
            return self.engine.config.default_min_confidence
        if value > 1:
            raise ValidationError(f'min_confidence must be <= 1 (negative = default), got {value}')
        return value

    # --- channels --------------------------------------------------------------------------

    def _ranked(self, query: str, collection: str, n: int, min_conf: float, session_id: str,
                cfilter: ContextFilter, options: FilterOptions, spatial: SpatialSort | None,
                now: float, channels: tuple[str, ...], exclude_session: str = ''
                ) -> tuple[list[MemoryRecord], str]:
        cfg = self.engine.config
        conn = self.engine.db.reader()
        fts_q = textmod.fts_query(query) if 'bm25' in channels else None
        qvec = self.engine.embedding.embed_query(query) if 'vector' in channels else None
        mode = _mode(fts_q is not None or qvec is None, qvec is not None)
        filtered = bool(session_id or exclude_session or not cfilter.is_empty or spatial
                        or options.origin is not None or cfg.recall_scope != 'all'
                        or options.created_from is not None or options.created_to is not None
                        or options.as_of is not None)
        fetch = min(max(cfg.fusion_depth, n * (4 if filtered else 2)), cfg.max_fetch)
        pushed = cfilter.sql_equalities()  # equalities tested in SQL, before ranking
        while True:
            bm = store.fts_search(conn, fts_q, collection, fetch, now=now,
                                  session_id=session_id, min_confidence=min_conf,
                                  include_inactive=options.include_superseded,
                                  context=pushed) if fts_q else []
            vec = store.vec_search(conn, qvec, collection, fetch, session_id=session_id,
                                   context=pushed) if qvec is not None else []
            scores = _fuse(bm, vec, cfg)
            records = store.fetch_records(conn, list(scores))
            kept = [r for r in records.values()
                    if r.session_id != exclude_session or not exclude_session
                    if _passes(r, min_conf, cfilter, options, now)
                    and origin_in_scope(r.origin, cfg.recall_scope)]
            exhausted = len(bm) < fetch and len(vec) < fetch
            if len(kept) >= n or exhausted or fetch >= cfg.max_fetch:
                break
            # Both channels cost about a full scan whatever their depth (BM25 ranks every match,
            # KNN is brute force), so the retry goes straight to the bound: at most two passes.
            fetch = cfg.max_fetch
        for record in kept:
            half_life = (cfg.episodic_half_life_days if record.kind == 'episodic'
                         else cfg.semantic_half_life_days)
            age = now - (record.last_accessed or record.created_at)
            record.rrf_score = (scores[record.id] * half_life_weight(age, half_life)
                                * source_weight(record.context, cfg.real_weight))
        kept.sort(key=lambda r: (-r.rrf_score, r.id))
        if spatial is not None:
            kept = spatial.apply(kept, lambda r: r.context)
        kept = kept[:n]
        for record, score in zip(kept, maxscore_normalize([r.rrf_score for r in kept])):
            record.rrf_score = score
        return kept, mode

    def _list(self, collection: str, n: int, min_conf: float, session_id: str,
              cfilter: ContextFilter, options: FilterOptions, spatial: SpatialSort | None,
              now: float) -> list[MemoryRecord]:
        """
        Query ``*``: memories passing the filters in time order (episode replay).

        Pages through the matching rows with a (created_at, id) cursor until ``n`` pass the
        context filter or the rows run out, so a rare match late in a long episode is found.
        A spatial sort needs every match to order them; it ranks the first ``max_fetch``.
        """
        cfg = self.engine.config
        conn = self.engine.db.reader()
        where = ['m.collection = :c', 'm.confidence >= :minc',
                 '(m.created_at > :lc OR (m.created_at = :lc AND m.id > :lid))']
        where.append("m.status != 'forgotten'" if options.include_superseded
                     else store.ACTIVE_SQL)
        if session_id:
            where.append('m.session_id = :s')
        if options.created_from is not None:
            where.append('m.created_at >= :t0')
        if options.created_to is not None:
            where.append('m.created_at <= :t1')
        params = {'c': collection, 'minc': min_conf, 'now': now, 's': session_id,
                  't0': options.created_from, 't1': options.created_to, 'lim': LIST_CHUNK,
                  'lc': float('-inf'), 'lid': 0}
        for number, (path, value) in enumerate(cfilter.sql_equalities()):
            where.append(f'json_extract(m.context_json, :p{number}) = :v{number}')
            params.update({f'p{number}': path, f'v{number}': value})
        sql = (f'SELECT m.id, m.created_at FROM memories m WHERE {" AND ".join(where)} '
               f'ORDER BY m.created_at, m.id LIMIT :lim')
        wanted = cfg.max_fetch if spatial is not None else n
        kept: list[MemoryRecord] = []
        while len(kept) < wanted:
            rows = conn.execute(sql, params).fetchall()
            if not rows:
                break
            ids = [row[0] for row in rows]
            records = store.fetch_records(conn, ids)
            kept.extend(r for r in (records[i] for i in ids)
                        if _passes(r, min_conf, cfilter, options, now)
                        and origin_in_scope(r.origin, cfg.recall_scope))
            params['lc'], params['lid'] = rows[-1][1], rows[-1][0]
            if len(rows) < LIST_CHUNK:
                break
        if spatial is not None:
            kept = spatial.apply(kept, lambda r: r.context)
        return kept[:n]

    def _touch(self, records: list[MemoryRecord], now: float) -> None:
        """Count the hits; never waits for the write lock and never fails the read."""
        if not records:
            return
        self.access.record([r.id for r in records], now)
        for record in records:
            record.access_count += 1
            record.last_accessed = now


def _fuse(bm: list[tuple[int, float]], vec: list[tuple[int, float]], cfg: Any
          ) -> dict[int, float]:
    """Merge the channels as ``cfg.fusion`` says; FTS5's bm25() is lower-better, so negate."""
    if cfg.fusion == 'rrf':
        return rrf_fuse([[i for i, _ in bm], [i for i, _ in vec]], cfg.rrf_k)
    return score_fuse([[(i, -score) for i, score in bm], vec],
                      (cfg.bm25_weight, 1.0 - cfg.bm25_weight))


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
