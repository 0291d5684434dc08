"""
Normalization rules (docs/decisions.md): turn any decider's proposal into a consistent outcome.

Whatever a decider proposes (the rules or a language model that ignored its instructions),
the engine only ever executes an outcome that obeys, in this order:

1. an unknown decision becomes CREATE (legacy "merge" becomes NONE + MERGE on the top match);
2. actions on unknown memories or on memories of another category are dropped;
3. conflicting actions on one memory are all dropped (logged);
   then the guard rails (``guard.py``): a MERGE or DELETE without evidence is dropped and its
   memory withheld, and a SKIP of a candidate no peer already states becomes CREATE;
4. in a history category (events, episodes, perceptions) any MERGE turns the outcome to SKIP;
5. SKIP carries no actions;
6. a MERGE without text gets one from ``merge_text``; one that adds nothing is dropped;
7. any MERGE forces NONE;
8. CREATE carries DELETE actions only;
9. NONE left without actions becomes CREATE (fail-safe: never lose the candidate).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Sequence

from robotmem_ros.engine.categories import category_class, HISTORY, PROFILE, same_category
from robotmem_ros.engine.decision.guard import action_refusal, skip_refusal
from robotmem_ros.engine.decision.merge import merge_text
from robotmem_ros.engine.decision.types import (Action, ACTION_KINDS, Candidate, CREATE, DECISIONS,
                                                DELETE, Existing, MERGE, NONE, Outcome, Proposal,
                                                SKIP)

_log = logging.getLogger(__name__)
_LEGACY_MERGE = 'MERGE'


def normalize(proposal: Proposal, candidate: Candidate, existing: Sequence[Existing],
              decider: str) -> Outcome:
    """Apply the rules above; every change is explained in ``Outcome.notes``."""
    notes: list[str] = []
    decision, actions = _parse_decision(proposal, existing, notes)
    actions = _resolve_targets(actions, candidate, existing, notes)
    actions = _drop_conflicts(actions, notes)
    withheld: list[int] = []
    actions = _guard_actions(actions, candidate, existing, notes, withheld)
    has_merge = any(a.kind == MERGE for a in actions)
    if has_merge and category_class(candidate.category) == HISTORY:
        notes.append(f'category {candidate.category!r} does not merge: MERGE -> SKIP')
        decision = SKIP
    repeats = _repeated_peer(candidate, existing, notes) if decision == SKIP else 0
    if decision == SKIP and not repeats:
        decision, has_merge = CREATE, False
        actions = [a for a in actions if a.kind != MERGE]
    if decision == SKIP:
        if actions and not has_merge:
            notes.append('SKIP carries no actions: dropped them')
        return dataclasses.replace(
            _outcome(SKIP, [], decider, proposal, candidate, notes, withheld), repeats=repeats)
    actions = _fill_merged_text(actions, candidate, notes)
    if any(a.kind == MERGE for a in actions):
        if decision != NONE:
            notes.append(f'MERGE forces NONE (was {decision})')
        decision = NONE
    if decision == CREATE and any(a.kind != DELETE for a in actions):
        notes.append('CREATE carries DELETE actions only: dropped the others')
        actions = [a for a in actions if a.kind == DELETE]
    if decision == NONE and not actions:
        notes.append('NONE without actions -> CREATE (keep the candidate)')
        decision = CREATE
    return _outcome(decision, actions, decider, proposal, candidate, notes, withheld)


def _outcome(decision: str, actions: list[Action], decider: str, proposal: Proposal,
             candidate: Candidate, notes: list[str], withheld: list[int]) -> Outcome:
    return Outcome(decision, tuple(actions), decider, proposal.reason, candidate.text,
                   tuple(notes), tuple(withheld))


def _guard_actions(actions: list[Action], candidate: Candidate, existing: Sequence[Existing],
                   notes: list[str], withheld: list[int]) -> list[Action]:
    """Drop MERGE / DELETE actions the texts give no evidence for; withhold their targets."""
    by_id = {e.id: e for e in existing}
    profile = category_class(candidate.category) == PROFILE  # profiles always merge
    kept = []
    for action in actions:
        why = '' if profile and action.kind == MERGE else action_refusal(
            action.kind, candidate, by_id[action.target_id])
        if why:
            notes.append(f'{action.kind} on #{action.target_id} refused: {why}')
            withheld.append(action.target_id)
        else:
            kept.append(action)
    return kept


def _repeated_peer(candidate: Candidate, existing: Sequence[Existing],
                   notes: list[str]) -> int:
    """Return the first peer that already says what the candidate says (a SKIP needs one)."""
    refusals = []
    for peer in existing:
        why = skip_refusal(candidate, peer)
        if not why:
            return peer.id
        refusals.append(why)
    notes.append('SKIP refused: ' + '; '.join(refusals) if refusals else 'SKIP refused')
    return 0


def _parse_decision(proposal: Proposal, existing: Sequence[Existing],
                    notes: list[str]) -> tuple[str, list[Action]]:
    raw = str(proposal.decision).strip().upper()
    actions = list(proposal.actions)
    if raw == _LEGACY_MERGE:
        notes.append('legacy decision "merge" -> NONE')
        if not actions and existing:
            actions = [Action(MERGE, existing[0].id, reason='legacy merge into the top match')]
        return NONE, actions
    if raw not in DECISIONS:
        notes.append(f'unknown decision {proposal.decision!r} -> CREATE')
        return CREATE, actions
    return raw, actions


def _resolve_targets(actions: list[Action], candidate: Candidate, existing: Sequence[Existing],
                     notes: list[str]) -> list[Action]:
    """Keep actions of a known kind on a known memory of the candidate's category."""
    by_id = {e.id: e for e in existing}
    kept = []
    for action in actions:
        kind = str(action.kind).strip().upper()
        target = by_id.get(action.target_id)
        if kind not in ACTION_KINDS:
            notes.append(f'unknown action {action.kind!r} on #{action.target_id}: dropped')
        elif target is None:
            notes.append(f'{kind} on unknown memory #{action.target_id}: dropped')
        elif not same_category(target.category, candidate.category):
            notes.append(f'{kind} on #{target.id} of category {target.category!r}: dropped')
        else:
            kept.append(dataclasses.replace(action, kind=kind, before=target.text))
    return kept


def _drop_conflicts(actions: list[Action], notes: list[str]) -> list[Action]:
    """Different kinds on one memory cancel out; a repeated identical kind is kept once."""
    kinds: dict[int, set[str]] = {}
    for a in actions:
        kinds.setdefault(a.target_id, set()).add(a.kind)
    kept, seen = [], set()
    for a in actions:
        if len(kinds[a.target_id]) > 1:
            if a.target_id not in seen:
                msg = f'conflicting actions {sorted(kinds[a.target_id])} on #{a.target_id}'
                _log.warning('%s: dropping them all', msg)
                notes.append(f'{msg}: dropped all')
        elif a.target_id not in seen:
            kept.append(a)
        seen.add(a.target_id)
    return kept


def _fill_merged_text(actions: list[Action], candidate: Candidate,
                      notes: list[str]) -> list[Action]:
    kept = []
    for a in actions:
        if a.kind == MERGE and not (a.merged_text or '').strip():
            merged = merge_text(a.before, candidate.text)
            if merged is None:
                notes.append(f'MERGE into #{a.target_id} adds nothing: dropped')
                continue
            a = dataclasses.replace(a, merged_text=merged)
        kept.append(a)
    return kept
