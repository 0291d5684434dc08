"""
Guard rails on every decider's proposal: hide or rewrite a stored fact only on evidence.

A decider — the rules or a language model — may propose to SKIP the candidate (a repeat), to
MERGE it into a stored memory, or to DELETE (supersede) a stored memory. Each hides or rewrites
a fact, so each needs evidence from the two texts themselves:

* SKIP: the candidate restates the stored memory (``judgment.restates``: no new content word,
  nothing in conflict, same source, same roles) or is the same fact in other words; a record
  (a conversation turn, a detection) only when it is the same record in other words — "Gina:
  It was great!" says less than an earlier "Gina: ... great ..." turn, yet is a turn of its own;
* MERGE: the rules read the pair as the same facet refined or updated, and neither text is a
  record;
* DELETE: the rules read the pair as the same attribute of the same subject with a conflicting
  value, the candidate is the newer one, and neither text is a record (a conversation turn, a
  detection, an event, a ``source:`` line).

A refused action is dropped, the memory stays as it is, and the engine reports it to the
caller among ``similar_facts``: when unsure, keep both and let the caller decide.
"""

from __future__ import annotations

from robotmem_ros.engine import judgment
from robotmem_ros.engine.decision.facet import parse
from robotmem_ros.engine.decision.relation import classify, CONTRADICTS, REFINES
from robotmem_ros.engine.decision.types import Candidate, DELETE, Existing, MERGE


def skip_refusal(candidate: Candidate, peer: Existing) -> str:
    """Why ``candidate`` may not be dropped as a repeat of ``peer``; '' when it may."""
    why = judgment.difference(peer.text, candidate.text)
    if not why:
        return ''
    if not judgment.is_record(candidate.text) and judgment.restates(peer.text, candidate.text):
        return ''
    return f'#{peer.id} does not already say this ({why})'


def action_refusal(kind: str, candidate: Candidate, peer: Existing) -> str:
    """Why a MERGE or DELETE of ``peer`` by ``candidate`` lacks evidence; '' when it has it."""
    for text in (candidate.text, peer.text):
        if judgment.is_record(text):
            return f'{text!r} is a record (turn, detection or event): never rewritten'
    relation, why = classify(parse(peer.text), parse(candidate.text))
    if kind == DELETE:
        if relation != CONTRADICTS:
            return f'no conflicting value for the same attribute ({why})'
        if candidate.created_at < peer.created_at:
            return f'#{peer.id} is newer'
    if kind == MERGE and relation not in (REFINES, CONTRADICTS):
        return f'not the same facet ({why})'
    return ''
