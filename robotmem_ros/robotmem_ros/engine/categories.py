"""
The category table: how decisions, decay and consolidation treat each category.

Decisions put categories in an always-merge class (the profile), a class where MERGE is
allowed (preferences, entities, patterns) and one where it is not (events, cases); decay and
consolidation spare the categories a robot must not forget or blur (constraints, lessons from
failures). One table, so the deciders, the normalization rules, decay and consolidation can
never disagree about a category (docs/decisions.md, docs/memory.md).
"""

from __future__ import annotations

from dataclasses import dataclass

PROFILE = 'profile'
KNOWLEDGE = 'knowledge'
HISTORY = 'history'

# Perception types are time-stamped records of what a sensor saw: history, never rewritten.
PERCEPTION_TYPES = frozenset({
    'perception', 'visual', 'tactile', 'auditory', 'proprioceptive', 'procedural',
})


@dataclass(frozen=True)
class Policy:
    """How the engine treats one category."""

    merge_class: str            # PROFILE | KNOWLEDGE | HISTORY
    decays: bool = True         # confidence decays with age
    consolidates: bool = True   # EndSession may merge it into a representative


CATEGORIES: dict[str, Policy] = {
    'profile': Policy(PROFILE),
    'observation': Policy(KNOWLEDGE),
    'constraint': Policy(KNOWLEDGE, decays=False, consolidates=False),
    'preference': Policy(KNOWLEDGE, decays=False),
    'decision': Policy(KNOWLEDGE),
    'procedure': Policy(KNOWLEDGE),
    'gotcha': Policy(KNOWLEDGE, consolidates=False),
    'entity': Policy(KNOWLEDGE),
    'event': Policy(HISTORY),
    'episode': Policy(HISTORY),
    'postmortem': Policy(HISTORY, consolidates=False),
    **{name: Policy(HISTORY) for name in PERCEPTION_TYPES},
}
DECAY_PROTECTED = frozenset(name for name, p in CATEGORIES.items() if not p.decays)
CONSOLIDATION_PROTECTED = frozenset(name for name, p in CATEGORIES.items() if not p.consolidates)


def category_class(category: str) -> str:
    """Return PROFILE, KNOWLEDGE or HISTORY; unknown categories are treated as knowledge."""
    policy = CATEGORIES.get(category.strip().lower())
    return policy.merge_class if policy is not None else KNOWLEDGE


def same_category(a: str, b: str) -> bool:
    """Compare category names the way the engine stores them (case and spaces ignored)."""
    return a.strip().lower() == b.strip().lower()
