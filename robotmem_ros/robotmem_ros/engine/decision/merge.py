"""
Fold a new fact into a stored one, clause by clause.

A stored memory may hold several clauses ("payload: 5 kg; reach: 850 mm"). A new clause
replaces the stored clause it refines or contradicts, is dropped when a clause already says
it, and is appended otherwise, so a merged memory never states two values for one facet.
"""

from __future__ import annotations

import re

from robotmem_ros.engine.decision.facet import parse
from robotmem_ros.engine.decision.relation import classify, SAME, UNRELATED

_CLAUSE_RE = re.compile(r'\s*(?:[;；。\n]|\.\s)\s*')
JOINER = '; '


def clauses(text: str) -> list[str]:
    """Split on ';', '。', newlines and sentence ends (not on commas, which sit in values)."""
    return [c.strip().rstrip('.') for c in _CLAUSE_RE.split(text) if c.strip().rstrip('.')]


def merge_text(old: str, new: str) -> str | None:
    """Return the merged text, or None when ``new`` adds nothing to ``old``."""
    merged = clauses(old)
    changed = False
    for clause in clauses(new):
        parsed = parse(clause)
        for i, kept in enumerate(merged):
            relation, _ = classify(parse(kept), parsed)
            if relation == SAME:
                break
            if relation != UNRELATED:
                merged[i] = clause
                changed = True
                break
        else:
            merged.append(clause)
            changed = True
    return JOINER.join(merged) if changed else None
