"""
What every decider shares: category isolation, the profile rule and the fail-safe.

A decider only proposes; this base picks the peers it may look at (same category, top 5 by
similarity), applies the always-merge rule of profile categories without asking it, runs the
normalization rules on its proposal, and turns any exception into CREATE, because storing a
duplicate costs less than losing a fact.
"""

from __future__ import annotations

import abc
import logging
from typing import Sequence

from robotmem_ros.engine.categories import category_class, PROFILE, same_category
from robotmem_ros.engine.decision.merge import merge_text
from robotmem_ros.engine.decision.normalize import normalize
from robotmem_ros.engine.decision.types import (Action, Candidate, CREATE, Existing, MERGE, NONE,
                                                Outcome, Proposal, SKIP)

_log = logging.getLogger(__name__)
MAX_PEERS = 5


class Decider(abc.ABC):
    """Base class; subclasses implement ``propose``."""

    name = 'decider'

    def decide(self, candidate: Candidate, existing: Sequence[Existing]) -> Outcome:
        """Return the normalized outcome; never raises."""
        try:
            peers = peers_of(candidate, existing)
            if not peers:
                return Outcome(CREATE, (), self.name, 'no similar memory in this category',
                               candidate.text)
            if category_class(candidate.category) == PROFILE:
                proposal = profile_proposal(candidate, peers[0])
            else:
                proposal = self.propose(candidate, peers)
            return normalize(proposal, candidate, peers, self.name)
        except Exception as exc:  # fail-safe: any failure keeps the fact
            _log.warning('%s decider failed, creating: %r', self.name, exc)
            return Outcome(CREATE, (), self.name, f'decider failed: {exc!r}', candidate.text)

    @abc.abstractmethod
    def propose(self, candidate: Candidate, peers: Sequence[Existing]) -> Proposal:
        """Propose a decision against ``peers`` (same category, most similar first)."""


def peers_of(candidate: Candidate, existing: Sequence[Existing]) -> list[Existing]:
    """Same-category memories, most similar first, at most MAX_PEERS."""
    same = [e for e in existing if same_category(e.category, candidate.category)]
    return sorted(same, key=lambda e: -e.similarity)[:MAX_PEERS]


def profile_proposal(candidate: Candidate, top: Existing) -> Proposal:
    """Profile facts always fold into the closest profile memory (docs/decisions.md)."""
    merged = merge_text(top.text, candidate.text)
    if merged is None:
        return Proposal(SKIP, reason='the profile already says this')
    action = Action(MERGE, top.id, merged, 'profile memories always merge')
    return Proposal(NONE, (action,), 'profile memories always merge')
