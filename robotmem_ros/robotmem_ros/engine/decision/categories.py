"""
Which categories may be merged, superseded or always folded together.

Seed 001 splits categories into an always-merge class (the profile), a class where MERGE is
allowed (preferences, entities, patterns) and one where it is not (events, cases). Robot
categories map onto those three classes here, in one table, so the deciders and the
normalization rules can never disagree about a category.
"""

from __future__ import annotations

PROFILE = 'profile'
KNOWLEDGE = 'knowledge'
HISTORY = 'history'

# Perception types are time-stamped records of what a sensor saw: history, never rewritten.
PERCEPTION_TYPES = frozenset({
    'perception', 'visual', 'tactile', 'auditory', 'proprioceptive', 'procedural',
})

CATEGORY_CLASSES: dict[str, str] = {
    'profile': PROFILE,
    'observation': KNOWLEDGE,
    'constraint': KNOWLEDGE,
    'preference': KNOWLEDGE,
    'decision': KNOWLEDGE,
    'procedure': KNOWLEDGE,
    'gotcha': KNOWLEDGE,
    'entity': KNOWLEDGE,
    'event': HISTORY,
    'episode': HISTORY,
    'postmortem': HISTORY,
    **{name: HISTORY for name in PERCEPTION_TYPES},
}


def category_class(category: str) -> str:
    """Return PROFILE, KNOWLEDGE or HISTORY; unknown categories are treated as knowledge."""
    return CATEGORY_CLASSES.get(category.strip().lower(), KNOWLEDGE)


def same_category(a: str, b: str) -> bool:
    """Compare category names the way the engine stores them (case and spaces ignored)."""
    return a.strip().lower() == b.strip().lower()
