"""
MemoryEngine: the facade the node, the CLI and the benchmarks use.

Writes go through ``Database.write`` (one lock, one IMMEDIATE transaction each); embeddings are
computed before the lock is taken so a slow model never holds up other writers. Every method
raises only ``RobotMemError`` subclasses for bad input or a failing store.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Iterator, Sequence
import uuid

from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import (consolidation, doctor, heap, maintenance, reindex, store,
                                 transfer, vector_store)
from robotmem_ros.engine.access_counts import AccessCounts
from robotmem_ros.engine.context import EngineContext
from robotmem_ros.engine.context_filter import parse_filter
from robotmem_ros.engine.database import Database
from robotmem_ros.engine.decay import apply_decay
from robotmem_ros.engine.embedding_state import EmbeddingState
from robotmem_ros.engine.learn import Learner
from robotmem_ros.engine.recall import Recaller
from robotmem_ros.engine.retention import prune_perceptions
from robotmem_ros.engine.schema import migrate, SCHEMA_VERSION
from robotmem_ros.engine.side_threads import SideThreads
from robotmem_ros.engine.spatial import parse_spatial_sort
from robotmem_ros.engine.validation import (check_channels, check_finite, check_id,
                                            check_min_confidence, check_recall_n, check_searchable,
                                            check_text, json_object, plausible_stamp,
                                            RECALL_CHANNELS)
from robotmem_ros.errors import (ConfigError, ConflictError, EmbeddingError, NotFoundError,
                                 RobotMemError, ValidationError)
from robotmem_ros.types import (EndSessionResult, EngineStatus, LearnResult, MemoryRecord,
                                PerceptionInput, RecallResult, SessionInfo, UpdateResult)

LOG = logging.getLogger('robotmem.engine')
PERCEPTION_CONFIDENCE = 0.9
RELATED_LIMIT = 5


class MemoryEngine:
    """Long-term memory over one SQLite file."""

    def __init__(self, config: MemoryConfig, embedder: Any | None = None, *,
                 embed_error: str = '', clock: Callable[[], float] = time.time,
                 on_lock_wait: Callable[[str], None] | None = None) -> None:
        """
        Open (and migrate) the store.

        When another process holds the write lock, wait at most ``store_lock_timeout`` seconds,
        calling ``on_lock_wait(holder)`` meanwhile, then raise StoreLockedError: a start-up
        either serves or fails within a known time.
        """
        heap.map_large_blocks(config.heap_mmap_threshold)  # before the indexes' arrays
        self._config = config
        self.clock = clock
        self.db = Database(config.resolved_db_path(), ann_min_vectors=config.ann_min_vectors,
                           ann_nprobe=config.ann_nprobe,
                           int8_max_vectors=config.int8_max_vectors,
                           text_index_min_rows=config.text_index_min_rows,
                           resident_text_max_rows=config.resident_text_max_rows,
                           reader_cache_kib=config.reader_cache_kib)
        self.embedding = EmbeddingState(embedder, config.min_readability, embed_error)
        try:
            with self.db.write(wait_s=config.store_lock_timeout, on_wait=on_lock_wait) as conn:
                began, old = time.monotonic(), migrate(conn)
                store.adopt_legacy_vectors(conn, vec_loaded=self.db.has_vec)
                filled = store.fill_filters(conn)
                self.db.text.tidy(conn)
                if old < SCHEMA_VERSION:
                    LOG.info('store %s: schema %d -> %d in %.1f s (%d vectors given filter ids)',
                             self.db.path, old, SCHEMA_VERSION, time.monotonic() - began, filled)
                self.embedding.bind(conn)
                vector_store.ensure_store_id(conn)
            self.db.on_outside_commit = self._follow_model
        except RobotMemError:
            self.db.close()
            raise
        self._ctx = EngineContext(self.db, self.embedding, clock, config,
                                  SideThreads(config.side_threads), AccessCounts(self.db))
        self.recaller = Recaller(self._ctx)
        self.learner = Learner(self._ctx)
        self._counter_lock = threading.Lock()
        self.stamps_replaced = 0  # perception stamps outside the plausible window

    def _follow_model(self, conn: Any) -> None:
        """
        Follow the store's model after another process's commit (a write's start).

        A change either way drops the vector index: it may hold rows of the other model's width
        (a search refreshed while vectors were off), and those positions answer no query.
        """
        if self.embedding.check_store(conn):
            self.db.vectors.reset()

    @classmethod
    def open(cls, config: MemoryConfig, **kwargs: Any) -> 'MemoryEngine':
        """Open the store and load the configured embedder (failure → BM25-only)."""
        embedder, error = None, ''
        if config.embed_backend != 'none':
            try:
                from robotmem_ros.embedding import load_embedder
                embedder = load_embedder(config)
            except EmbeddingError as exc:
                error = str(exc)
                LOG.error('embedder unavailable, running BM25-only: %s', exc)
        return cls(config, embedder, embed_error=error, **kwargs)

    # --- configuration ---------------------------------------------------------------------

    @property
    def config(self) -> MemoryConfig:
        """Return the current settings."""
        return self._config

    def set_config(self, new: MemoryConfig) -> None:
        """Apply run-time changes; read-only settings must stay as they are."""
        for name, spec, value in new.items():
            if spec.read_only and getattr(self._config, name) != value:
                raise ConfigError(f'{name} is read-only at run time')
        self._config = self._ctx.config = new
        self.embedding.min_readability = new.min_readability
        self.learner.reconfigure()

    def close(self) -> None:
        """Write pending recall counts if the store is free, close every connection."""
        self._ctx.side.close()
        if not self.db.closed:
            self._ctx.access.close()
        self.db.close()

    # --- learn -----------------------------------------------------------------------------

    def learn(self, insight: str, context: dict | None = None, collection: str = '',
              session_id: str = '') -> LearnResult:
        """
        Store a fact, unless it is already known (then reinforce that memory).

        The decision layer may instead merge it into a memory it refines, or supersede the
        memories it contradicts; the result's status says which.
        """
        content = check_searchable('insight', check_text(
            'insight', insight, max_chars=self._config.max_insight_chars))
        ctx = self._json('context', context)
        return self.learner.learn(content, ctx, self._writable_collection(collection),
                                  self._session_id(session_id))

    # --- perceptions -----------------------------------------------------------------------

    def save_perception(self, perception: PerceptionInput) -> int:
        """Store one perception; duplicates are normal for sensors and are simply stored."""
        row = self._perception_row(perception)
        return self._write_perceptions([row])[0]

    def save_perceptions(self, batch: Sequence[PerceptionInput]) -> list[int]:
        """Store a batch in ONE transaction; invalid items get id 0 (logged), others are kept."""
        rows: list[dict | None] = []
        for item in batch:
            try:
                rows.append(self._perception_row(item))
            except ValidationError as exc:
                LOG.warning('perception rejected: %s', exc)
                rows.append(None)
        valid = [r for r in rows if r is not None]
        ids = iter(self._write_perceptions(valid) if valid else [])
        return [next(ids) if r is not None else 0 for r in rows]

    def _perception_row(self, p: PerceptionInput) -> dict:
        cfg = self._config
        description = check_searchable('description', check_text(
            'description', p.description, max_chars=cfg.max_description_chars))
        perception_type = check_text('perception_type', p.perception_type or 'generic',
                                     max_chars=128)
        context = {'data': self._json('data', p.data), 'metadata': self._json('metadata',
                                                                              p.metadata)}
        now = self.clock()
        created_at = now
        if p.created_at is not None:
            stamp = check_finite('created_at', p.created_at)
            if plausible_stamp(stamp, now, cfg.perception_stamp_max_future):
                created_at = stamp
            else:  # keep the perception, ordered by arrival; the bad stamp stays visible
                context['stamp_replaced'] = stamp
                with self._counter_lock:
                    self.stamps_replaced += 1
        return {'content': description, 'perception_type': perception_type,
                'context': context, 'collection': self._writable_collection(p.collection),
                'session_id': self._session_id(p.session_id), 'created_at': created_at}

    def _write_perceptions(self, rows: list[dict]) -> list[int]:
        now = self.clock()
        with self.db.write() as conn:
            ids = []
            for row in rows:
                if row['session_id']:
                    store.ensure_session(conn, row['session_id'], row['collection'], now)
                ids.append(store.insert_memory(
                    conn, type_='perception', content=row['content'],
                    collection=row['collection'], session_id=row['session_id'],
                    category='perception', perception_type=row['perception_type'],
                    kind='episodic', confidence=PERCEPTION_CONFIDENCE,
                    context=row['context'], created_at=row['created_at'], stored_at=now,
                    decay_ref=now,
                    tags=['perception', f'perception:{row["perception_type"]}']))
            return ids

    def embed_pending(self, limit: int = 256) -> int:
        """Embed stored memories that have no vector yet (perceptions are embedded lazily)."""
        if not self.embedding.usable:
            return 0
        self._bound_backlog()
        with self.db.read() as conn:
            rows = store.unembedded(conn, limit)
        if not rows:
            return 0
        readable = [(mid, text) for mid, text in rows if self.embedding.readable(text)]
        vectors = self.embedding.embed([text for _, text in readable]) if readable else None
        if readable and vectors is None:
            return 0
        by_id = {mid: vectors[i] for i, (mid, _) in enumerate(readable)}
        with self.db.write() as conn:
            if not self.embedding.usable:  # the store changed models meanwhile: not ours to fill
                return 0
            for mid, _ in rows:
                store.put_vector(conn, mid, by_id.get(mid))
        return len(rows)

    def _bound_backlog(self) -> None:
        """
        Keep the embedding backlog within ``max_pending_embeddings``.

        Past it, the oldest waiting perceptions stay BM25-only (``embedded = -2``), counted and
        logged, never silently: a stream faster than the embedder would otherwise grow the
        backlog without end.
        """
        cap = self._config.max_pending_embeddings
        with self.db.read() as conn:
            pending = store.count_unembedded(conn, active_only=False)
        if pending <= cap:
            return
        with self.db.write() as conn:
            skipped = store.leave_unembedded(conn, pending - cap)
        self.embedding.skipped += skipped
        LOG.warning('embedding backlog of %d passed max_pending_embeddings = %d: %d oldest '
                    'perceptions left BM25-only (%d so far)', pending, cap, skipped,
                    self.embedding.skipped)

    # --- recall ----------------------------------------------------------------------------

    def recall(self, query: str, n: int | None = None, min_confidence: float | None = None,
               session_id: str = '', context_filter: dict | None = None,
               spatial_sort: dict | None = None, collection: str = '', *,
               channels: Sequence[str] = RECALL_CHANNELS) -> RecallResult:
        """
        Rank memories for ``query`` (docs/performance.md); ``*`` lists an episode in order.

        ``n`` and ``min_confidence`` default (None) to ``default_n`` and
        ``default_min_confidence``. ``channels`` picks BM25, vector search or both (the
        default); benchmarks compare them.
        """
        cfg = self._config
        collection = self._collection(collection)
        query = check_text('query', query, max_chars=cfg.max_insight_chars)
        n = check_recall_n(n, cfg.default_n)
        min_confidence = check_min_confidence(min_confidence, cfg.default_min_confidence)
        session_id = self._session_id(session_id, stored=True)
        # Checked as a stored context is (a lone surrogate cannot be bound in SQL), then parsed.
        cfilter, options = parse_filter(self._json('context_filter', context_filter),
                                        max_bytes=cfg.max_json_bytes,
                                        max_depth=cfg.max_json_depth)
        spatial = parse_spatial_sort(spatial_sort, max_bytes=cfg.max_json_bytes)
        return self.recaller.recall(query, n, min_confidence, session_id, cfilter, options,
                                    spatial, collection, check_channels(channels))

    # --- sessions --------------------------------------------------------------------------

    def start_session(self, context: dict | None = None, collection: str = '') -> SessionInfo:
        """Open an episode and return its id."""
        ctx = self._json('context', context)
        collection = self._writable_collection(collection)
        session_id = uuid.uuid4().hex
        now = self.clock()
        with self.db.write() as conn:
            store.ensure_session(conn, session_id, collection, now, ctx)
            count = store.count_active(conn, collection)
        return SessionInfo(session_id, collection, count)

    def end_session(self, session_id: str, outcome_score: float | None = None
                    ) -> EndSessionResult:
        """Record the outcome; consolidate the session's facts, decay, recall related ones."""
        session_id = check_text('session_id', session_id, max_chars=256, stored=True)
        if outcome_score is not None:
            outcome_score = check_finite('outcome_score', outcome_score)
        with self.db.read() as conn:
            session = store.get_session(conn, session_id)
        if session is None:
            raise NotFoundError(f'unknown session {session_id!r}')
        collection = session['collection']
        cfg = self._config
        now = self.clock()
        vectors = self._session_vectors(session_id)
        self._ctx.access.flush()  # consolidation, decay and retention read the hit counts
        with self.db.write() as conn:
            candidates = consolidation.eligible(conn, session_id, collection, cfg, vectors)
            clusters = consolidation.consolidate(conn, candidates, cfg, now)
            decayed = apply_decay(conn, collection, cfg.decay_rate, now,
                                  cfg.default_min_confidence)
            pruned = prune_perceptions(conn, now=now, days=cfg.perception_retention_days,
                                       touched=self._ctx.access.unwritten())
            summary = self._session_summary(conn, session, outcome_score, now)
            summary['pruned_perceptions'] = pruned
            store.end_session(conn, session_id, outcome_score, now, summary)
        superseded = sum(len(c.members) - 1 for c in clusters)
        sims = [c.avg_similarity for c in clusters]
        return EndSessionResult(
            merged_groups=len(clusters), superseded_count=superseded,
            compression_ratio=superseded / len(candidates) if candidates else 0.0,
            avg_similarity=sum(sims) / len(sims) if sims else 0.0, decayed_count=decayed,
            pruned_perceptions=pruned,
            related_memories=self.recaller.related(session_id, collection, RELATED_LIMIT),
            summary=summary,
            consolidated=[{'representative_id': c.representative.id,
                           'superseded_ids': [m.id for m in c.members
                                              if m.id != c.representative.id],
                           'avg_similarity': c.avg_similarity} for c in clusters])

    def _session_vectors(self, session_id: str) -> dict[int, Any]:
        if not self.embedding.usable:
            return {}
        with self.db.read() as conn:
            return store.session_vectors(conn, session_id)

    def _session_summary(self, conn: Any, session: Any, outcome: float | None,
                         now: float) -> dict:
        counts = store.session_type_counts(conn, session['id'])
        return {'session_id': session['id'], 'collection': session['collection'],
                'facts': counts.get('fact', 0), 'perceptions': counts.get('perception', 0),
                'duration_s': now - session['started_at'], 'outcome_score': outcome}

    # --- forget / update -------------------------------------------------------------------

    def forget(self, memory_id: int, reason: str = '') -> None:
        """Soft-delete a memory: it leaves recall, FTS and vectors; its history stays."""
        memory_id = check_id('memory_id', memory_id)
        reason = check_text('reason', reason, max_chars=1000, required=False)
        now = self.clock()
        with self.db.write() as conn:
            row = self._active_row(conn, memory_id)
            store.set_status(conn, memory_id, 'forgotten', now=now)
            store.add_history(conn, memory_id, 'forget', created_at=now,
                              old_content=row['content'], reason=reason)

    def update(self, memory_id: int, new_content: str, context: dict | None = None
               ) -> UpdateResult:
        """Rewrite a memory: re-hash, re-index FTS and vector, keep the old text in history."""
        memory_id = check_id('memory_id', memory_id)
        content = check_searchable('new_content', check_text(
            'new_content', new_content, max_chars=self._config.max_insight_chars))
        ctx_update = self._json('context', context)
        embedded = self.embedding.usable  # see Learner._vector_kept
        vector = self.embedding.embed_fact(content) if embedded else None
        now = self.clock()
        try:
            with self.db.write() as conn:
                row = self._active_row(conn, memory_id)
                # Checked again merged: keys added to a large context could outgrow the limit
                # that an import or a fleet pull of this memory holds it to.
                ctx = self._json('context', {**json.loads(row['context_json']), **ctx_update})
                store.replace_content(conn, memory_id, content, ctx)
                if embedded and self.embedding.usable:
                    store.put_vector(conn, memory_id, vector)
                store.add_history(conn, memory_id, 'update', created_at=now,
                                  old_content=row['content'], new_content=content)
        except ConflictError:
            with self.db.read() as conn:
                other = store.find_active_by_hash(conn, self._config.collection, content)
            raise ValidationError('another active memory already holds this text'
                                  + (f' (id {other})' if other else '')) from None
        return UpdateResult(row['content'], content)

    def _active_row(self, conn: Any, memory_id: int) -> Any:
        row = store.get_memory(conn, memory_id)
        if row is None:
            raise NotFoundError(f'memory {memory_id} does not exist')
        if row['status'] != 'active':
            raise NotFoundError(f'memory {memory_id} is {row["status"]}, not active')
        return row

    # --- status ----------------------------------------------------------------------------

    def status(self) -> EngineStatus:
        """Counters and identity for NodeStatus and diagnostics."""
        with self.db.read() as conn:
            pending = store.count_unembedded(conn, active_only=True)
            active = store.count_active(conn, self._config.collection)
        emb = self.embedding.embedder
        index = self.db.vectors.stats()
        return EngineStatus(
            db_path=str(self.db.path),
            embed_backend='onnx' if emb is not None else 'none',
            embed_device=getattr(emb, 'device', '') if emb is not None else '',
            model_id=self.embedding.model_id, collection=self._config.collection,
            active_memories_count=active,
            db_bytes=_db_bytes(self.db.path), reindex_needed=self.embedding.reindex_needed,
            embed_error=self.embedding.error, embed_failures=self.embedding.failures,
            pending_embeddings=pending if self.embedding.usable else 0,
            embed_skipped=self.embedding.skipped, stamps_replaced=self.stamps_replaced,
            index_vectors=index['live'], ann_vectors=index['ann_entries'],
            ann_building=index['ann_building'], ann_error=index['ann_error'],
            checkpoint_error=self.db.checkpointer.last_error)

    # --- maintenance (logic in maintenance.py, doctor.py, reindex.py, transfer.py) ---------

    def stats(self) -> dict:
        """Count by collection/type/kind/category/status; sizes, model, decay histogram."""
        return maintenance.stats(self._ctx, self.status())

    def sessions(self, collection: str = '', limit: int = 100) -> list[dict]:
        """Most recent sessions with their fact and perception counts."""
        return maintenance.sessions(self._ctx, collection, limit)

    def episode(self, session_id: str) -> dict:
        """Return a session and its memories in time order."""
        return maintenance.episode(self._ctx, session_id)

    def iter_memories(self, collection: str = '') -> Iterator[MemoryRecord]:
        """Yield the active memories (of one collection, or all) in id order, by chunks."""
        return maintenance.iter_memories(self._ctx,
                                         self._collection(collection) if collection else '')

    def history(self, memory_id: int) -> list[dict]:
        """Audit trail of a memory, oldest first."""
        return maintenance.history(self._ctx, memory_id)

    def cleanup_exact_duplicates(self, collection: str = '', dry_run: bool = True
                                 ) -> list[dict]:
        """Supersede repeated active facts (<= 200 per call); ``dry_run`` only previews."""
        return maintenance.cleanup_exact_duplicates(self._ctx, self._collection(collection),
                                                    dry_run)

    def doctor(self, repair: bool = False) -> dict:
        """Check FTS/vector/tag/history/session consistency; ``repair`` fixes it."""
        return doctor.doctor(self._ctx, repair)

    def reindex(self, batch_size: int = 64, progress: Callable | None = None) -> dict:
        """Re-embed every active memory with the current model (resumable)."""
        return reindex.reindex(self._ctx, batch_size, progress)

    def export_jsonl(self, path: str, **options: Any) -> dict:
        """Write sessions and memories to a JSONL file (see transfer.export_jsonl)."""
        self._ctx.access.flush()  # the file holds the hit counts
        return transfer.export_jsonl(self._ctx, path, **options)

    def import_jsonl(self, path: str, **options: Any) -> dict:
        """Import a JSONL export; exact duplicates are skipped and reported."""
        return transfer.import_jsonl(self._ctx, path, **options)

    # --- helpers ---------------------------------------------------------------------------

    def _json(self, name: str, value: Any) -> dict:
        return json_object(name, value, max_bytes=self._config.max_json_bytes,
                           max_depth=self._config.max_json_depth)

    def _collection(self, collection: str) -> str:
        if not collection:
            return self._config.collection
        return check_text('collection', collection, max_chars=128)

    def _writable_collection(self, collection: str) -> str:
        """Return a collection a write may name: known already, or within ``max_collections``."""
        name = self._collection(collection)
        limit = self._config.max_collections
        with self.db.read() as conn:
            admitted = store.collection_admitted(conn, name, limit)
        if not admitted:
            raise ValidationError(
                f'collection {name!r} is new and the store already holds max_collections = '
                f'{limit} collections; write to an existing one or raise the parameter')
        return name

    @staticmethod
    def _session_id(session_id: str, stored: bool = False) -> str:
        """Check a session id: one to write to, or (``stored``) one a store may hold."""
        return check_text('session_id', session_id or '', max_chars=256, required=False,
                          stored=stored)


def _db_bytes(path: Any) -> int:
    total = 0
    for suffix in ('', '-wal', '-shm'):
        try:
            total += path.with_name(path.name + suffix).stat().st_size
        except OSError:
            pass
    return total
