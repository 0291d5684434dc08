"""
Nearest-first ordering of recalled memories by a coordinate stored in their context.

``spatial_sort`` names a context field holding a coordinate list and a target point; memories
are ordered by Euclidean distance to the target and those without a usable coordinate (missing,
not a list, non-numeric, other dimension) are dropped, as are those beyond ``max_distance``.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Callable, Iterable, Mapping, TypeVar

from robotmem_ros.engine.context_filter import (
    check_json_object, is_number, parse_path, resolve_path)
from robotmem_ros.errors import ValidationError

MAX_DIMENSIONS = 16
_KEYS = {'field', 'target', 'max_distance'}
_WHAT = 'spatial_sort'
# {"target": [..]} is two levels; the slack lets a wrongly nested target get its own message.
_MAX_DEPTH = 4

T = TypeVar('T')


@dataclass(frozen=True)
class SpatialSort:
    """A validated spatial sort: ``distance`` and ``apply`` cannot raise on any context."""

    field: str
    path: tuple[str, ...]
    target: tuple[float, ...]
    max_distance: float | None = None

    def distance(self, context: Any) -> float:
        """Return the distance to the target, or ``math.inf`` if the coordinate is unusable."""
        point = resolve_path(context, self.path)
        if not isinstance(point, (list, tuple)) or len(point) != len(self.target):
            return math.inf
        if not all(is_number(x) for x in point):
            return math.inf
        try:
            # math.dist scales internally, so far-apart large coordinates do not overflow.
            distance = math.dist([float(x) for x in point], self.target)
        except OverflowError:       # an int too large for a float
            return math.inf
        return distance if math.isfinite(distance) else math.inf

    def apply(self, items: Iterable[T], context_of: Callable[[T], Any]) -> list[T]:
        """Return the items nearest first (stable on ties), without the unusable or too far."""
        limit = math.inf if self.max_distance is None else self.max_distance
        scored = [(self.distance(context_of(item)), item) for item in items]
        kept = [(d, item) for d, item in scored if d != math.inf and d <= limit]
        kept.sort(key=lambda pair: pair[0])
        return [item for _, item in kept]


def _finite(value: Any, where: str) -> float:
    if not is_number(value):
        raise ValidationError(f'{where} must be a number, got {value!r}')
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValidationError(f'{where} must be finite, got {value!r}')
    return number


def parse_spatial_sort(value: Mapping[str, Any] | None, *,
                       max_bytes: int) -> SpatialSort | None:
    """Validate a spatial sort; ``None`` or ``{}`` means no sort."""
    raw = check_json_object(value, what=_WHAT, max_bytes=max_bytes, max_depth=_MAX_DEPTH)
    if not raw:
        return None
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ValidationError(f'{_WHAT}: unknown key(s) {unknown} (allowed: field, target, '
                              'max_distance)')
    field = raw.get('field')
    path = parse_path(field, f'{_WHAT}.field')
    target = raw.get('target')
    if not isinstance(target, (list, tuple)) or not 1 <= len(target) <= MAX_DIMENSIONS:
        raise ValidationError(f'{_WHAT}.target must be a list of 1 to {MAX_DIMENSIONS} numbers, '
                              f'got {target!r}')
    point = tuple(_finite(x, f'{_WHAT}.target[{i}]') for i, x in enumerate(target))
    max_distance = raw.get('max_distance')
    if max_distance is not None:
        max_distance = _finite(max_distance, f'{_WHAT}.max_distance')
        if max_distance < 0:
            raise ValidationError(f'{_WHAT}.max_distance must be >= 0, got {max_distance}')
    return SpatialSort(field, path, point, max_distance)
