"""
Structured filter over a memory's context JSON (the ``context_filter`` recall argument).

A filter is a JSON object whose keys are dot paths into the context and whose values are either a
literal (equality) or an operator object ``{"$op": operand, ...}`` (every operator must hold).
All top-level keys must hold too. Everything a caller can get wrong is rejected by
``parse_filter`` with a ``ValidationError``, so ``ContextFilter.matches`` never raises: a value of
the wrong type simply does not match.

Semantics (MongoDB-like, where the seed is silent):

* Equality is JSON equality: ``true`` never equals ``1``, ``1`` equals ``1.0``, lists and objects
  compare element-wise. A list-valued context field is *not* searched for the value (no implicit
  "array contains"); address an element with a numeric segment (``spatial.object_position.0``).
* ``$lt $lte $gt $gte`` compare numbers with numbers (booleans are not numbers) or strings with
  strings; anything else does not match.
* A missing path matches only ``$ne``, ``$nin`` and ``$exists: false``.
* Context keys that contain a dot cannot be addressed.

Four reserved top-level keys are recall options, not conditions, and are taken out at parse
time: ``include_superseded`` (bool), ``created_at`` (``{"$gte": epoch, "$lte": epoch}``, either
bound optional) and ``as_of`` (epoch: "what did we believe then" — memories valid at that time,
superseded ones included) and ``origin`` ("own", "fleet" or a robot id: whose memories, see
docs/fleet.md).

The JSON checks, path parsing and path resolution helpers here are shared with ``spatial``.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import math
import operator
from typing import Any, Callable, Mapping

from robotmem_ros.errors import ValidationError


class _Missing:
    """Type of ``MISSING``; distinct from ``None``, which is a JSON value a path can hold."""

    def __repr__(self) -> str:
        return '<missing>'


MISSING: Any = _Missing()

INCLUDE_SUPERSEDED = 'include_superseded'
CREATED_AT = 'created_at'
AS_OF = 'as_of'
ORIGIN = 'origin'
_SQL_INT_MIN, _SQL_INT_MAX = -2**63, 2**63 - 1  # what SQLite can bind
_EXACT_FLOAT_MIN, _EXACT_FLOAT_MAX = 1e-30, 1e30  # doubles SQLite reads as Python writes them


# --- JSON input ----------------------------------------------------------------------------

def _check_json(value: Any, where: list[Any], max_depth: int) -> None:
    """Reject what JSON cannot carry, so later stages may assume plain finite JSON values."""
    if isinstance(value, (dict, list, tuple)):
        if len(where) >= max_depth + 1:
            raise ValidationError(f'{_where(where)}: nested deeper than {max_depth} levels')
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict) and not isinstance(key, str):
                raise ValidationError(f'{_where(where)}: object key {key!r} is not a string')
            where.append(key)
            _check_json(item, where, max_depth)
            where.pop()
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f'{_where(where)}: number {value} is not finite')
    elif value is not None and not isinstance(value, (bool, int, str)):
        raise ValidationError(f'{_where(where)}: unsupported value type {type(value).__name__}')


def _where(where: list[Any]) -> str:
    return where[0] + ''.join(f'[{part!r}]' for part in where[1:])


def check_json_object(value: Mapping[str, Any] | None, *, what: str, max_bytes: int,
                      max_depth: int) -> dict[str, Any]:
    """
    Return ``value`` as a plain dict of JSON values; ``None`` gives ``{}``.

    The engine takes dicts, not JSON text: text is parsed where it arrives (the node's
    conversions, the CLI). Size is measured in UTF-8 bytes of the compact JSON, so the limit
    means the same as for the text a ROS request carried.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f'{what}: must be a JSON object, got {type(value).__name__}')
    value = dict(value)
    _check_json(value, [what], max_depth)
    size = len(json.dumps(value, ensure_ascii=False, separators=(',', ':'))
               .encode('utf-8', 'surrogatepass'))
    if size > max_bytes:
        raise ValidationError(f'{what}: larger than {max_bytes} bytes')
    return value


# --- dot paths -----------------------------------------------------------------------------

def parse_path(path: Any, where: str) -> tuple[str, ...]:
    """Split a dot path, rejecting empty paths and empty segments (``a..b``, ``.a``)."""
    if not isinstance(path, str) or not path:
        raise ValidationError(f'{where}: path must be a non-empty string')
    segments = tuple(path.split('.'))
    if '' in segments:
        raise ValidationError(f'{where}: path {path!r} has an empty segment')
    return segments


def resolve_path(context: Any, segments: tuple[str, ...]) -> Any:
    """Walk dicts by key and lists by decimal index; return ``MISSING`` where the walk stops."""
    current = context
    for segment in segments:
        if isinstance(current, dict):
            current = current.get(segment, MISSING)
        elif isinstance(current, (list, tuple)) and segment.isascii() and segment.isdigit():
            index = int(segment)
            current = current[index] if index < len(current) else MISSING
        else:
            return MISSING
        if current is MISSING:
            return MISSING
    return current


# --- value comparison ----------------------------------------------------------------------

def is_number(value: Any) -> bool:
    """Tell numbers from booleans, which Python counts as ints but JSON does not."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_equal(left: Any, right: Any) -> bool:
    """Compare two JSON values with JSON's types (``True != 1``, ``1 == 1.0``)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if is_number(left) and is_number(right):
        return left == right
    if isinstance(left, str) and isinstance(right, str):
        return left == right
    if left is None or right is None:
        return left is None and right is None
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(v, right[k])
                                                   for k, v in left.items())
    return False


def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def test(actual: Any, operand: Any) -> bool:
        both_numbers = is_number(actual) and is_number(operand)
        both_strings = isinstance(actual, str) and isinstance(operand, str)
        return (both_numbers or both_strings) and compare(actual, operand)
    return test


def _eq(actual: Any, operand: Any) -> bool:
    return actual is not MISSING and json_equal(actual, operand)


def _in(actual: Any, operand: list[Any]) -> bool:
    return actual is not MISSING and any(json_equal(actual, item) for item in operand)


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    '$eq': _eq,
    '$ne': lambda actual, operand: not _eq(actual, operand),
    '$lt': _ordered(operator.lt),
    '$lte': _ordered(operator.le),
    '$gt': _ordered(operator.gt),
    '$gte': _ordered(operator.ge),
    '$in': _in,
    '$nin': lambda actual, operand: not _in(actual, operand),
    '$exists': lambda actual, operand: (actual is not MISSING) is operand,
}


def _check_operand(op: str, operand: Any, where: str) -> None:
    if op not in _OPERATORS:
        raise ValidationError(f'{where}: unknown operator {op!r} '
                              f'(allowed: {", ".join(_OPERATORS)})')
    if op in ('$in', '$nin') and not isinstance(operand, (list, tuple)):
        raise ValidationError(f'{where}: {op} needs a list, got {type(operand).__name__}')
    if op == '$exists' and not isinstance(operand, bool):
        raise ValidationError(f'{where}: $exists needs true or false, got {operand!r}')
    if op in ('$lt', '$lte', '$gt', '$gte') and not (is_number(operand)
                                                     or isinstance(operand, str)):
        raise ValidationError(f'{where}: {op} needs a number or a string, got {operand!r}')


# --- the filter ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Condition:
    """One ``path op operand`` test; a filter is the AND of its conditions."""

    path: tuple[str, ...]
    op: str
    operand: Any

    def holds(self, context: Any) -> bool:
        """Tell whether the context satisfies this condition (never raises)."""
        return _OPERATORS[self.op](resolve_path(context, self.path), self.operand)


@dataclass(frozen=True)
class FilterOptions:
    """Recall options carried in the filter's reserved keys; the engine applies them itself."""

    include_superseded: bool = False
    created_from: float | None = None
    created_to: float | None = None
    as_of: float | None = None
    origin: str | None = None

    def origin_matches(self, origin: str) -> bool:
        """Tell whether a memory of ``origin`` ('' = own) passes the ``origin`` option."""
        return origin_in_scope(origin, self.origin or 'all')


def origin_in_scope(origin: str, scope: str) -> bool:
    """Whether a memory of ``origin`` belongs to ``scope``: all, own, fleet or one robot id."""
    if scope == 'all':
        return True
    if scope == 'own':
        return origin == ''
    if scope == 'fleet':
        return origin != ''
    return origin == scope


@dataclass(frozen=True)
class ContextFilter:
    """A parsed filter: matching cannot fail because parsing rejected every malformed input."""

    conditions: tuple[Condition, ...] = ()

    @property
    def is_empty(self) -> bool:
        """Tell whether the filter matches everything (lets the engine skip context parsing)."""
        return not self.conditions

    def sql_equalities(self) -> list[tuple[str, Any]]:
        """
        ``(json path, scalar)`` pairs the store may test in SQL before ranking.

        A superset test: SQL's ``json_extract(...) = value`` holds for every context this
        filter matches (it also lets ``1`` equal ``true``), so :meth:`matches` still decides.
        Only plain-identifier paths qualify (a numeric segment indexes a list in Python but
        names a key in a JSON path), and only values SQLite reads back as Python wrote them: no
        integer beyond 64 bits (it cannot be bound), no float of a magnitude outside [1e-30,
        1e30] but zero. The bundled SQLite (3.51) reads some decimals beyond about 1e60 and
        below 1e-60 one unit in the last place off Python's (measured: none of 60 000 random
        doubles within 1e±60, 10-30 % of those around 1e±100 to 1e±300), and an equality that
        fails in SQL drops a row Python would match. Python still tests those, after the
        channels' cut (``max_fetch``) like every condition not tested in SQL.
        """
        return [('$.' + '.'.join(c.path), c.operand) for c in self.conditions
                if c.op == '$eq' and _reads_back(c.operand)
                and all(segment.isidentifier() for segment in c.path)]

    def matches(self, context: Any) -> bool:
        """Tell whether a context satisfies every condition; a non-dict context has no paths."""
        return all(condition.holds(context) for condition in self.conditions)


def _reads_back(value: Any) -> bool:
    """Tell whether SQLite's value of ``value`` stored as JSON text equals Python's exactly."""
    if isinstance(value, float):
        return value == 0.0 or _EXACT_FLOAT_MIN <= abs(value) <= _EXACT_FLOAT_MAX
    if isinstance(value, int):
        return _SQL_INT_MIN <= value <= _SQL_INT_MAX
    return isinstance(value, str)


def _conditions(key: str, value: Any) -> list[Condition]:
    where = f'context_filter[{key!r}]'
    if key.startswith('$'):
        raise ValidationError(f'{where}: top-level operators are not supported; '
                              'top-level keys are dot paths and are ANDed')
    path = parse_path(key, where)
    if not isinstance(value, dict) or not any(k.startswith('$') for k in value):
        return [Condition(path, '$eq', value)]
    if not all(k.startswith('$') for k in value):
        raise ValidationError(f'{where}: mixes operators and plain keys; use {{"$eq": {{...}}}} '
                              'to match an object literally')
    for op, operand in value.items():
        _check_operand(op, operand, where)
    return [Condition(path, op, operand) for op, operand in value.items()]


def _time_bound(name: str, bounds: dict[str, Any], op: str) -> float | None:
    bound = bounds.get(op)
    if bound is not None and not is_number(bound):
        raise ValidationError(f'context_filter[{name!r}]: {op} needs an epoch number, '
                              f'got {bound!r}')
    return None if bound is None else float(bound)


def _options(raw: dict[str, Any]) -> FilterOptions:
    include = raw.pop(INCLUDE_SUPERSEDED, False)
    if not isinstance(include, bool):
        raise ValidationError(f'context_filter[{INCLUDE_SUPERSEDED!r}]: must be true or false, '
                              f'got {include!r}')
    created = raw.pop(CREATED_AT, {})
    if not isinstance(created, dict) or not set(created) <= {'$gte', '$lte'}:
        raise ValidationError(f'context_filter[{CREATED_AT!r}]: must be an object with '
                              f'"$gte" and/or "$lte" epoch seconds, got {created!r}')
    try:
        start = _time_bound(CREATED_AT, created, '$gte')
        end = _time_bound(CREATED_AT, created, '$lte')
    except OverflowError:
        raise ValidationError(f'context_filter[{CREATED_AT!r}]: epoch out of range') from None
    if start is not None and end is not None and start > end:
        raise ValidationError(f'context_filter[{CREATED_AT!r}]: $gte {start} is after '
                              f'$lte {end}')
    as_of = raw.pop(AS_OF, None)
    try:  # an int too large for a float overflows in isfinite() as in float()
        valid = as_of is None or (is_number(as_of) and math.isfinite(as_of))
    except OverflowError:
        valid = False
    if not valid:
        raise ValidationError(f'context_filter[{AS_OF!r}]: must be epoch seconds, got {as_of!r}')
    origin = raw.pop(ORIGIN, None)
    if origin is not None and (not isinstance(origin, str) or not origin):
        raise ValidationError(f'context_filter[{ORIGIN!r}]: must be "own", "fleet" or a robot '
                              f'id, got {origin!r}')
    return FilterOptions(include or as_of is not None, start, end,
                         None if as_of is None else float(as_of), origin)


def parse_filter(value: Mapping[str, Any] | None, *, max_bytes: int,
                 max_depth: int) -> tuple[ContextFilter, FilterOptions]:
    """
    Validate a context filter; ``None`` or ``{}`` gives a filter that matches everything.

    Returns the conditions and, separately, the recall options found in the reserved keys, so
    the engine can push those into SQL instead of testing them per memory.
    """
    raw = check_json_object(value, what='context_filter', max_bytes=max_bytes,
                            max_depth=max_depth)
    options = _options(raw)
    conditions = [c for key, value in raw.items() for c in _conditions(key, value)]
    return ContextFilter(tuple(conditions)), options
