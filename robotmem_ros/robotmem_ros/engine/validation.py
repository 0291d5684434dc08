"""
Input checks shared by every engine entry point.

Everything a caller sends is checked here before any write starts, so a rejected request never
leaves a partial row behind and the error names the field at fault.
"""

from __future__ import annotations

import json
import math
from typing import Any
import unicodedata

from robotmem_ros.engine import text as textmod
from robotmem_ros.engine.context_filter import check_json_object
from robotmem_ros.errors import ValidationError

# builtin_interfaces/Time.sec is int32: no message can carry a later time (2038-01-19), so no
# stored time may lie beyond it (a larger one made every later recall fail in the conversion).
TIMESTAMP_MAX = float(2**31 - 1)
# Perception stamps before this are a clock that was never set (1970, sim time) or garbage.
PLAUSIBLE_STAMP_MIN = 946_684_800.0  # 2000-01-01T00:00:00Z
SQLITE_INT_MAX = 2**63 - 1
MAX_RECALL_N = 100
# A category is a label: Learn refuses a longer one, as fleet pulls do, so that a fleet copy of
# what Learn stored is never refused. Import takes the longer ones an earlier Learn stored.
MAX_CATEGORY_CHARS = 256
RECALL_CHANNELS = ('bm25', 'vector')
# Characters that render as nothing: whitespace is handled by strip(); these are format
# characters (zero-width space/joiners, word joiner, BOM, soft hyphen...), Unicode category Cf.
_INVISIBLE_CATEGORIES = ('Cf',)


def check_text(name: str, value: Any, *, max_chars: int, required: bool = True,
               stored: bool = False) -> str:
    """
    Return the stripped text or raise ValidationError (empty, too long, not UTF-8-encodable).

    Text made only of invisible characters is refused: stored, it would name nothing a later
    call accepts. ``stored`` names a value a store may already hold (an import, a fleet pull,
    the session an EndSession ends): an earlier version took such text, so only empty text is
    refused there, or what it stored could never be moved or ended.
    """
    if not isinstance(value, str):
        raise ValidationError(f'{name} must be a string')
    text = value.strip()
    if required and not (text if stored else _visible(text)):
        raise ValidationError(f'{name} must not be empty')
    if text and not stored and not _visible(text):
        raise ValidationError(f'{name} holds only invisible characters: give a visible one '
                              'or none')
    if len(text) > max_chars:
        raise ValidationError(f'{name} is too long: {len(text)} characters (max {max_chars})')
    check_encodable(name, text)
    if '\x00' in text:
        raise ValidationError(f'{name} must not contain NUL characters')
    return text


def _visible(text: str) -> bool:
    """Return True when some character is neither whitespace nor invisible (BOM, ZWSP...)."""
    return any(not ch.isspace() and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
               for ch in text)


def check_searchable(name: str, text: str) -> str:
    """
    Refuse text that no query can find: no letter or digit the index keeps (emoji only).

    The BM25 index drops symbols and the embedder cannot read them, so such a memory would be
    stored and never recalled; an error now beats a silent loss later.
    """
    if textmod.fts_query(text) is None:
        raise ValidationError(f'{name} has nothing searchable: it needs at least one word or '
                              f'number (symbols and emoji alone cannot be recalled)')
    return text


def check_id(name: str, value: Any) -> int:
    """Return a positive integer id or raise ValidationError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= SQLITE_INT_MAX:
        raise ValidationError(f'{name} must be a positive integer, got {value!r}')
    return value


def check_finite(name: str, value: Any) -> float:
    """Return ``value`` as float when it is a finite number (an int too large for one is not)."""
    try:
        valid = not isinstance(value, bool) and isinstance(value, (int, float)) \
            and math.isfinite(value)
    except OverflowError:
        valid = False
    if not valid:
        raise ValidationError(f'{name} must be a finite number, got {value!r}')
    return float(value)


def check_range(name: str, value: Any, low: float, high: float) -> float:
    """Return ``value`` as float when it is a finite number in [low, high]."""
    number = check_finite(name, value)
    if not low <= number <= high:
        raise ValidationError(f'{name} must be between {low:g} and {high:g}, got {value!r}')
    return number


def check_timestamp(name: str, value: Any) -> float:
    """Return epoch seconds in [0, 2038-01-19] (what builtin_interfaces/Time can carry)."""
    return check_range(name, value, 0.0, TIMESTAMP_MAX)


def check_count(name: str, value: Any, minimum: int = 0) -> int:
    """Return an integer in [minimum, 2**63 - 1] (what an SQLite INTEGER holds)."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not minimum <= value <= SQLITE_INT_MAX:
        raise ValidationError(f'{name} must be an integer between {minimum} and '
                              f'{SQLITE_INT_MAX}, got {value!r}')
    return value


def check_recall_n(n: Any, default: int) -> int:
    """Return how many results a recall may return: ``default`` for None, else 1..MAX_RECALL_N."""
    if n is None:
        return default
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValidationError(f'n must be an integer, got {n!r}')
    if not 1 <= n <= MAX_RECALL_N:
        raise ValidationError(f'n must be between 1 and {MAX_RECALL_N}, got {n}')
    return n


def check_min_confidence(value: Any, default: float) -> float:
    """Return a recall's confidence floor: ``default`` for None, else a number in [0, 1]."""
    if value is None:
        return default
    value = check_finite('min_confidence', value)
    if not 0 <= value <= 1:
        raise ValidationError(f'min_confidence must be between 0 and 1, got {value}')
    return value


def check_channels(channels: Any) -> tuple[str, ...]:
    """Return the retrieval channels a recall runs: a non-empty subset of RECALL_CHANNELS."""
    chosen = tuple(channels)
    if not chosen or any(c not in RECALL_CHANNELS for c in chosen):
        raise ValidationError(f'channels must be a non-empty subset of {RECALL_CHANNELS}, '
                              f'got {chosen!r}')
    return chosen


def plausible_stamp(stamp: float, now: float, max_future: float) -> bool:
    """Return True when a perception stamp lies between 2000-01-01 and now + max_future."""
    return PLAUSIBLE_STAMP_MIN <= stamp <= min(now + max_future, TIMESTAMP_MAX)


def check_encodable(name: str, text: str) -> None:
    """Reject lone surrogates, which SQLite cannot store as UTF-8."""
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        raise ValidationError(f'{name} is not valid UTF-8 (lone surrogate)') from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f'{name} is not a valid JSON number')


def json_object_from_text(text: str, *, what: str, max_depth: int) -> dict[str, Any]:
    """
    Parse JSON object text strictly, the one parser of JSON text (requests, the CLI, imports).

    NaN and Infinity are refused (JSON has no such numbers), nesting that outruns the parser is
    reported against ``max_depth`` (the checks of the parsed dict then apply it exactly).
    """
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValidationError(f'{what}: nested deeper than {max_depth} levels') from None
    except ValueError as exc:
        raise ValidationError(f'{what}: invalid JSON ({exc})') from None
    if not isinstance(value, dict):
        raise ValidationError(f'{what}: must be a JSON object, got {type(value).__name__}')
    return value


def json_object(name: str, value: Any, *, max_bytes: int, max_depth: int) -> dict:
    """Check a JSON object field (None → {}) against the size/depth limits, storable as UTF-8."""
    obj = check_json_object(value, what=name, max_bytes=max_bytes, max_depth=max_depth)
    check_encodable(name, json.dumps(obj, ensure_ascii=False))
    return obj
