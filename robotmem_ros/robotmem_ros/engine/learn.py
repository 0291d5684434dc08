"""
Learn pipeline: validate → label → embed → dedup → decide → write.

One write transaction in the common case: under the lock the dedup layers run (a duplicate
reinforces the existing memory and ends there), the rule decider (docs/decisions.md) judges whether
the new fact refines or contradicts similar ones, and the fact is written with the decision
applied. Two steps leave the lock in between: an LLM decider, which may take seconds and must
not stall other writers, and a merge whose text needs a new vector (the embedder runs outside
the lock). Then the fact is written in a second transaction; the unique index still
guarantees no second active copy appears meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
from typing import Any

import numpy as np

from robotmem_ros.engine import dedup, store
from robotmem_ros.engine.context import EngineContext
from robotmem_ros.engine.database import savepoint
from robotmem_ros.engine.decision import (Candidate, DELETE, Existing, LLMDecider,
                                          make_decider, MERGE, Outcome, SKIP)
from robotmem_ros.engine.inference import infer, Inferred
from robotmem_ros.errors import ConflictError, StorageError
from robotmem_ros.types import LearnResult, MemoryRecord


RESERVED_CONTEXT_KEYS = ('category', 'confidence', 'kind', 'tags')


@dataclass
class _Fact:
    content: str
    context: dict[str, Any]
    collection: str
    session_id: str
    labels: Inferred
    vector: np.ndarray | None
    # Whether the model was asked for ``vector`` (None then: text it cannot read). A vector
    # written when the store's model changed between the embedding and the write would be of
    # the other model, and a None written then would mark a readable text as unreadable.
    embedded: bool


class Learner:
    """Runs learn requests against an engine's store."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.decider = make_decider(ctx.config)

    def reconfigure(self) -> None:
        """Rebuild the decider after a run-time parameter change."""
        self.decider = make_decider(self.ctx.config)

    def learn(self, content: str, context: dict, collection: str, session_id: str
              ) -> LearnResult:
        """Store a fact the facade validated (text, context, collection, session)."""
        ctx = self.ctx
        embedded = ctx.embedding.usable
        fact = _Fact(content, {k: v for k, v in context.items()
                               if k not in RESERVED_CONTEXT_KEYS},
                     collection, session_id,
                     infer(content, context, has_session=bool(session_id)),
                     ctx.embedding.embed_fact(content) if embedded else None, embedded)
        try:
            return self._learn(fact)
        except ConflictError:
            # Another writer stored the same text between our check and our insert: the
            # unique index refused the second row, so report the first as the duplicate.
            with ctx.db.read() as conn:
                existing = store.find_active_by_hash(conn, fact.collection, content)
            if existing is None:
                raise StorageError('concurrent write conflict; retry the request') from None
            return LearnResult(existing, 'duplicate', 'exact', existing, 1.0, [],
                               fact.labels.inferred)

    def _learn(self, fact: _Fact) -> LearnResult:
        ctx = self.ctx
        now = ctx.clock()
        with ctx.db.write() as conn:
            verdict = dedup.check(conn, fact.content, collection=fact.collection,
                                  session_id=fact.session_id, vector=self._vector(fact),
                                  config=ctx.config, now=now, beside=self._beside(conn))
            records = self._records(conn, verdict)
            similar = _shown(records, verdict.similar)
            if verdict.is_duplicate:
                _reinforce(conn, verdict.existing_id, verdict.method, now)
                return LearnResult(verdict.existing_id, 'duplicate', verdict.method,
                                   verdict.existing_id, verdict.similarity, similar,
                                   fact.labels.inferred)
            peers = self._peers(records, similar, verdict.neighbours)
            remote = isinstance(self.decider, LLMDecider)
            outcome = None if remote else self._decide(fact, peers, now)
            if not remote and not self._merges_to_embed(outcome):
                return self._apply(conn, fact, outcome, similar, peers, {}, now)
        if remote:
            outcome = self._decide(fact, peers, now)
        merged_vectors = self._merged_vectors(outcome)
        with ctx.db.write() as conn:
            return self._apply(conn, fact, outcome, similar, peers, merged_vectors, now)

    def _beside(self, conn: Any) -> dedup.Beside | None:
        """
        Run dedup's vector search on a spare thread's reader while the writer wrote nothing.

        A learn inside a larger write (one that changed rows already) searches on ``conn``:
        a reader would not see those rows.
        """
        if not self.ctx.db.unwritten(conn):
            return None
        db, side = self.ctx.db, self.ctx.side
        return lambda search: side.start(lambda: search(db.reader()))

    # --- decision --------------------------------------------------------------------------

    def _records(self, conn: Any, verdict: dedup.DedupVerdict) -> dict[int, MemoryRecord]:
        """
        Read in one go the records of the near misses and, when the decider will run, its peers.

        The peers are the near misses and the vector neighbours: read apart, the near misses
        were read twice in every learn that reaches the decider.
        """
        ids = set(verdict.similar)
        if self.decider is not None and not verdict.is_duplicate:
            ids.update(memory_id for memory_id, _ in verdict.neighbours)
        return self.ctx.access.records(conn, sorted(ids))

    def _peers(self, records: dict[int, MemoryRecord], similar: list[MemoryRecord],
               neighbours: list[tuple[int, float]]) -> list[Existing]:
        if self.decider is None:
            return []
        scores = {r.id: r.rrf_score for r in similar}
        for memory_id, sim in neighbours:  # vector prefilter, threshold 0.0 (docs/decisions.md)
            scores.setdefault(memory_id, sim)
        return [Existing(r.id, r.content, r.category, r.context, r.created_at, scores[r.id])
                for r in (records[i] for i in sorted(scores) if i in records)
                if r.status == 'active']

    def _decide(self, fact: _Fact, peers: list[Existing], now: float) -> Outcome | None:
        if self.decider is None or not peers:
            return None
        return self.decider.decide(
            Candidate(fact.content, fact.labels.category, fact.context, now), peers)

    def _merges_to_embed(self, outcome: Outcome | None) -> list[Any]:
        if outcome is None or not self.ctx.embedding.usable:
            return []
        return [a for a in outcome.actions if a.kind == MERGE and a.merged_text]

    def _merged_vectors(self, outcome: Outcome | None) -> dict[int, np.ndarray | None]:
        return {a.target_id: self.ctx.embedding.embed_fact(a.merged_text)
                for a in self._merges_to_embed(outcome)}

    # --- write -----------------------------------------------------------------------------

    def _apply(self, conn: Any, fact: _Fact, outcome: Outcome | None,
               similar: list[MemoryRecord], peers: list[Existing],
               merged_vectors: dict[int, Any], now: float) -> LearnResult:
        inferred = dict(fact.labels.inferred)
        if outcome is not None:
            inferred['decision'] = outcome.to_dict()
            similar = self._with_withheld(conn, similar, outcome.withheld, peers)
        if outcome is not None and outcome.decision == SKIP and outcome.actions == ():
            target = _first_active(conn, [outcome.repeats]) or 0
            if target:
                _reinforce(conn, target, f'decider {outcome.decider}: {outcome.reason}', now)
                score = next(e.similarity for e in peers if e.id == target)
                return LearnResult(target, 'duplicate', 'decider', target, score, similar,
                                   inferred)
        merges = [a for a in (outcome.actions if outcome else ()) if a.kind == MERGE]
        applied = [a for a in merges if self._merge(conn, a, outcome, merged_vectors, now)]
        if applied:
            target = applied[0].target_id
            inferred['merged_ids'] = [a.target_id for a in applied]
            # The candidate has no row of its own: a DELETE beside the MERGEs points at the
            # first memory merged into (docs/decisions.md).
            superseded = self._supersede_all(conn, outcome, target, now)
            if superseded:
                inferred['superseded_ids'] = superseded
            return LearnResult(target, 'merged', 'decider', target, _score_of(similar, target),
                               similar, inferred)
        memory_id = self._insert(conn, fact, now)
        if outcome is not None:  # audit why the decider let the fact in
            store.add_history(conn, memory_id, 'decide', created_at=now, reason=outcome.reason,
                              actor=outcome.decider, new_content=fact.content,
                              details=outcome.to_dict())
        superseded = self._supersede_all(conn, outcome, memory_id, now) if outcome else []
        if superseded:
            inferred['superseded_ids'] = superseded
            return LearnResult(memory_id, 'superseded_existing', 'decider', superseded[0],
                               _score_of(similar, superseded[0]), similar, inferred)
        return LearnResult(memory_id, 'created', '', 0, 0.0, similar, inferred)

    def _insert(self, conn: Any, fact: _Fact, now: float) -> int:
        if fact.session_id:
            store.ensure_session(conn, fact.session_id, fact.collection, now)
        labels = fact.labels
        memory_id = store.insert_memory(
            conn, type_='fact', content=fact.content, collection=fact.collection,
            session_id=fact.session_id, category=labels.category, perception_type='',
            kind=labels.kind, confidence=labels.confidence, context=fact.context,
            created_at=now, tags=labels.tags)
        if self._vector_kept(fact.embedded):
            store.put_vector(conn, memory_id, fact.vector)
        return memory_id

    def _vector_kept(self, embedded: bool) -> bool:
        """
        Tell whether a vector made before this write may be written (or used) in it.

        The store may have changed models since (another process's reindex, followed at the
        write's start by EmbeddingState.check_store): only a vector made while the engine's
        model was the store's, and still is, belongs there. A memory left without one waits
        unembedded for the store's model (``embed_pending``).
        """
        return embedded and self.ctx.embedding.usable

    def _vector(self, fact: _Fact) -> np.ndarray | None:
        """Return the new fact's vector for dedup, None when it is not the store's model's."""
        return fact.vector if self._vector_kept(fact.embedded) else None

    def _merge(self, conn: Any, action: Any, outcome: Outcome, vectors: dict[int, Any],
               now: float) -> bool:
        row = _as_decided(conn, action)
        if row is None or not action.merged_text:
            return False
        try:
            with savepoint(conn, 'merge'):
                store.replace_content(conn, action.target_id, action.merged_text,
                                      json.loads(row['context_json']))
        except ConflictError:  # merged text equals another active fact: keep both as they are
            return False
        if self._vector_kept(action.target_id in vectors):
            store.put_vector(conn, action.target_id, vectors[action.target_id])
        store.add_history(conn, action.target_id, 'merge', created_at=now,
                          old_content=row['content'], new_content=action.merged_text,
                          reason=action.reason or outcome.reason, actor=outcome.decider,
                          details=outcome.to_dict())
        return True

    def _supersede_all(self, conn: Any, outcome: Outcome, new_id: int, now: float
                       ) -> list[int]:
        """Apply the outcome's DELETEs, each pointing at ``new_id``; return the superseded."""
        return [a.target_id for a in outcome.actions
                if a.kind == DELETE and self._supersede(conn, a, new_id, outcome, now)]

    def _supersede(self, conn: Any, action: Any, new_id: int, outcome: Outcome,
                   now: float) -> bool:
        row = _as_decided(conn, action)
        if row is None or action.target_id == new_id:
            return False
        store.set_status(conn, action.target_id, 'superseded', now=now, superseded_by=new_id)
        store.add_history(conn, action.target_id, 'supersede', created_at=now,
                          old_content=row['content'], new_content=outcome.candidate_text,
                          reason=action.reason or outcome.reason, actor=outcome.decider,
                          details=outcome.to_dict())
        return True

    def _with_withheld(self, conn: Any, similar: list[MemoryRecord], withheld: tuple[int, ...],
                       peers: list[Existing]) -> list[MemoryRecord]:
        """Add the memories the guard kept from being rewritten: the caller decides."""
        scores = {e.id: e.similarity for e in peers if e.id in withheld}
        missing = {i: s for i, s in scores.items() if i not in {r.id for r in similar}}
        if not missing:
            return similar
        return similar + _shown(self.ctx.access.records(conn, sorted(missing)), missing)


def _shown(records: dict[int, MemoryRecord], similar: dict[int, float]) -> list[MemoryRecord]:
    """Return the records of ``similar`` among ``records``, best first, as callers see them."""
    shown = [records[memory_id] for memory_id in similar if memory_id in records]
    for record in shown:
        record.rrf_score = similar[record.id]
    return sorted(shown, key=lambda r: (-r.rrf_score, r.id))


def _reinforce(conn: Any, memory_id: int, why: str, now: float) -> None:
    store.reinforce(conn, memory_id, now)
    store.add_history(conn, memory_id, 'reinforce', created_at=now,
                      reason=f'duplicate learn ({why})')


def _as_decided(conn: Any, action: Any) -> Any | None:
    """
    Return the action's target if it is still active and still says what the decider read.

    A remote decider, or a merge whose text must be embedded, decides outside the write lock:
    another writer (the CLI, the fleet sync) may rewrite the target meanwhile, and a merged
    text built from the old one would drop that change. The action is not applied then: the
    candidate is stored as its own fact, as when the target is gone.
    """
    row = store.get_active(conn, action.target_id)
    if row is None or (action.before and row['content'] != action.before):
        return None
    return row


def _first_active(conn: Any, ids: list[int]) -> int | None:
    for memory_id in ids:
        if store.get_active(conn, memory_id) is not None:
            return memory_id
    return None


def _score_of(similar: list[MemoryRecord], memory_id: int) -> float:
    return next((r.rrf_score for r in similar if r.id == memory_id), 0.0)
