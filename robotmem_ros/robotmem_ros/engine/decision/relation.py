"""
How a new fact relates to one stored fact: same, refines, contradicts or unrelated.

The order of the tests matters: a flipped negation is a contradiction whatever else matches;
a fact that adds no word and no number is the same fact however it is phrased; only then
are facets compared, so a paraphrase is never mistaken for an update.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Any, Mapping

from robotmem_ros.engine import judgment
from robotmem_ros.engine.decision.facet import Parsed
from robotmem_ros.engine.decision.quantity import Quantity
from robotmem_ros.engine.text import STATE_OPPOSITES

SAME = 'same'
REFINES = 'refines'
CONTRADICTS = 'contradicts'
UNRELATED = 'unrelated'

# Context keys that scope a fact: 12.5 N in simulation does not contradict 14 N on hardware.
SCOPE_KEYS = ('sim_or_real', 'robot_id', 'robot', 'embodiment')
_MIN_SHARED = 0.5
# States that exclude each other: a swap between them is an update, not a second fact.
# Directions (left/right, up/down) may both hold and are kept as two facts.
_ANTONYMS = frozenset(frozenset(pair) for pair in STATE_OPPOSITES)
_SHORT_VALUE = 3


def _is_unit_token(token: str) -> bool:
    return token.startswith('<') and not token.startswith('<=')


def _words(p: Parsed) -> set[str]:
    """Content tokens except quantities with a unit (bare numbers are names: 'shelf 2')."""
    return {t for t in p.content if not _is_unit_token(t)}


def _contained(small: tuple[Quantity, ...], large: tuple[Quantity, ...]) -> bool:
    """Every quantity of ``small`` appears in ``large`` (as a multiset, units converted)."""
    pool = list(large)
    for q in small:
        match = next((i for i, other in enumerate(pool) if q.same_as(other)), None)
        if match is None:
            return False
        pool.pop(match)
    return True


def _value_conflict(old: tuple[Quantity, ...], new: tuple[Quantity, ...]) -> bool:
    """Tell whether a dimension both facts measure lost an old value in the new fact."""
    shared = {q.dimension for q in old} & {q.dimension for q in new}
    return any(q.dimension in shared and not any(q.same_as(n) for n in new) for q in old)


def scope_of(context: Mapping[str, Any]) -> dict[str, Any]:
    """Return the scoping keys of a memory context, top-level or under 'env'."""
    env = context.get('env') if isinstance(context.get('env'), Mapping) else {}
    scope = {}
    for key in SCOPE_KEYS:
        value = context.get(key, env.get(key))
        if value not in (None, ''):
            scope[key] = value
    return scope


def scope_differs(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """Name of the first scoping key both contexts set to different values, else ''."""
    sa, sb = scope_of(a), scope_of(b)
    return next((k for k in sa if k in sb and sa[k] != sb[k]), '')


def classify(old: Parsed, new: Parsed) -> tuple[str, str]:
    """Return (relation, reason) of ``new`` with respect to ``old``."""
    old_words, new_words = _words(old), _words(new)
    if old.negated != new.negated:
        if set(old.content) == set(new.content):
            return CONTRADICTS, 'same statement with the negation flipped'
    elif new_words <= old_words and _contained(new.quantities, old.quantities):
        return SAME, 'adds no word and no value'
    if old_words == new_words and _value_conflict(old.quantities, new.quantities):
        return CONTRADICTS, 'same words, different value'
    if old.split and new.split:
        if set(old.head) != set(new.head):
            return UNRELATED, 'different facet'
        return _compare_values(old, new)
    return _align(old, new)


def _compare_values(old: Parsed, new: Parsed) -> tuple[str, str]:
    """
    Compare values of one facet: keeping every old token refines, replacing one contradicts.

    A changed number is an update only when the new value keeps every other word of the old
    one: "grip force 5.5N works for cups of batch 0" and "6.0N ... for mugs of batch 1" are two
    facts about two objects, not one value corrected.
    """
    if set(old.value) <= set(new.content):
        return REFINES, 'same facet, keeps the old value and adds detail'
    old_words = {t for t in old.value if not t.startswith('<')}
    new_words = {t for t in new.value if not t.startswith('<')}
    old_numbers = {t for t in old.value if t.startswith('<')}
    new_numbers = {t for t in new.value if t.startswith('<')}
    if _value_conflict(old.value_quantities, new.value_quantities) or (
            old_numbers and new_numbers and old_numbers != new_numbers):
        if old_words <= new_words:
            return CONTRADICTS, 'same facet, different value'
        return UNRELATED, 'same facet, a value for something else'
    short = (old.copula == new.copula and len(old.head) >= 2
             and max(len(old.value), len(new.value)) <= _SHORT_VALUE)
    if short:
        return CONTRADICTS, 'same facet, different value'
    return UNRELATED, 'same facet words, values about different things'


def _align(old: Parsed, new: Parsed) -> tuple[str, str]:
    """No facet split: align the token sequences and look at what changed."""
    if not old.content:
        return UNRELATED, 'nothing to compare'
    ops = SequenceMatcher(None, old.content, new.content, autojunk=False).get_opcodes()
    changed = [op for op in ops if op[0] in ('replace', 'delete')]
    if not changed:
        # Detail added after the old text refines it; a place or an ordinal set inside it
        # names another thing ("put the [middle] black bowl on top of the cabinet").
        within = judgment.narrowed_within(old.content, new.content)
        if within:
            return UNRELATED, f'{", ".join(within)} within the old text names another thing'
        return REFINES, 'keeps the old text and adds detail'
    kept = sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag == 'equal')
    if len(changed) == 1 and kept / len(old.content) >= _MIN_SHARED:
        _, i1, i2, j1, j2 = changed[0]
        if any(token.startswith('<') for token in old.content[i1:i2]):
            return CONTRADICTS, 'one value of the statement changed'
        if frozenset(old.content[i1:i2] + new.content[j1:j2]) in _ANTONYMS:
            return CONTRADICTS, 'one word flipped to its opposite'
        # A swapped descriptive word ("left" → "right" gripper) may be a second, equally true
        # fact; superseding would hide it, and a duplicate costs less than lost information.
        return UNRELATED, 'one descriptive word differs; both kept'
    return UNRELATED, 'statements differ in several places'
