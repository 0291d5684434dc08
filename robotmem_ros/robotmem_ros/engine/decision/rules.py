"""
The default decider: facets, numbers and negation, no model.

Per peer the relation decides: the same fact → SKIP; a new value for the same facet, newer
than the stored one → DELETE it (the engine supersedes it) and CREATE; new detail for the
same facet → MERGE into it. History categories (events, episodes, perceptions) and texts that
are records whatever their category (conversation turns, detections, ``source:`` lines; see
``judgment.is_record``) are records of what happened: a different record never replaces or
extends another, so they only SKIP restatements and CREATE everything else. A SKIP needs the
candidate to restate the peer (``guard.skip_refusal``), not only to share its words.
"""

from __future__ import annotations

from typing import Sequence

from robotmem_ros.engine import judgment
from robotmem_ros.engine.categories import category_class, HISTORY
from robotmem_ros.engine.decision.base import Decider
from robotmem_ros.engine.decision.facet import parse, Parsed
from robotmem_ros.engine.decision.guard import skip_refusal
from robotmem_ros.engine.decision.merge import merge_text
from robotmem_ros.engine.decision.relation import (classify, CONTRADICTS, REFINES, SAME,
                                                   scope_differs, UNRELATED)
from robotmem_ros.engine.decision.types import (Action, Candidate, CREATE, DELETE, Existing, MERGE,
                                                NONE, Proposal, SKIP)


class RuleDecider(Decider):
    """Decide from the text alone, deterministically and in microseconds."""

    name = 'rules'

    def propose(self, candidate: Candidate, peers: Sequence[Existing]) -> Proposal:
        """Classify the candidate against each peer, then pick one decision for all."""
        parsed = parse(candidate.text)
        history = (category_class(candidate.category) == HISTORY
                   or judgment.is_record(candidate.text))
        deletes: list[Action] = []
        refined: list[tuple[Existing, str]] = []
        for peer in peers:
            relation, why = self.relation(candidate, parsed, peer)
            if relation == SAME and not skip_refusal(candidate, peer):
                return Proposal(SKIP, reason=f'same as #{peer.id}: {why}')
            if history or relation in (SAME, UNRELATED) or judgment.is_record(peer.text):
                continue
            if relation == CONTRADICTS and candidate.created_at >= peer.created_at:
                deletes.append(Action(DELETE, peer.id, reason=why))
            elif relation == REFINES:
                refined.append((peer, why))
        if deletes:
            ids = ', '.join(f'#{a.target_id}' for a in deletes)
            return Proposal(CREATE, tuple(deletes), f'new value supersedes {ids}')
        if refined:
            peer, why = refined[0]
            merged = merge_text(peer.text, candidate.text)
            if merged is None:
                return Proposal(SKIP, reason=f'#{peer.id} already holds every clause')
            action = Action(MERGE, peer.id, merged, why)
            return Proposal(NONE, (action,), f'adds detail to #{peer.id}')
        if history:
            return Proposal(CREATE, reason='a new record in a history category')
        return Proposal(CREATE, reason='no stored memory states this facet')

    @staticmethod
    def relation(candidate: Candidate, parsed: Parsed, peer: Existing) -> tuple[str, str]:
        """Relation of the candidate to one peer; a different scope makes them unrelated."""
        key = scope_differs(candidate.context, peer.context)
        if key:
            return UNRELATED, f'different {key}'
        relation, why = classify(parse(peer.text), parsed)
        if relation == CONTRADICTS and candidate.created_at < peer.created_at:
            return relation, f'{why}; older than #{peer.id}, kept both'
        return relation, why
