"""
Numbers with units, normalized to SI so that "5 cm" and "50 mm" compare equal.

Robot facts change by their numbers ("12.5N" becomes "14 N"); comparing numbers as strings
would see "0.5 m/s" and "500 mm/s" as a conflict and "12.5N" and "12.5 N" as different.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
import re

_DEG = math.pi / 180.0

# unit spelling -> (dimension, factor to the SI base of that dimension)
UNITS: dict[str, tuple[str, float]] = {
    'm/s^2': ('acceleration', 1.0), 'm/s2': ('acceleration', 1.0),
    'm/s²': ('acceleration', 1.0),
    'm/s': ('speed', 1.0), 'cm/s': ('speed', 0.01), 'mm/s': ('speed', 0.001),
    'km/h': ('speed', 1 / 3.6),
    'rad/s': ('angular_speed', 1.0), 'deg/s': ('angular_speed', _DEG),
    'km': ('length', 1000.0), 'm': ('length', 1.0), 'cm': ('length', 0.01),
    'mm': ('length', 0.001), 'um': ('length', 1e-6),
    '米': ('length', 1.0), '厘米': ('length', 0.01), '毫米': ('length', 0.001),
    'kn': ('force', 1000.0), 'n': ('force', 1.0), '牛': ('force', 1.0),
    'nm': ('torque', 1.0), 'n·m': ('torque', 1.0), 'n.m': ('torque', 1.0),
    'kg': ('mass', 1.0), 'g': ('mass', 0.001), '公斤': ('mass', 1.0), '千克': ('mass', 1.0),
    '克': ('mass', 0.001),
    'ms': ('time', 0.001), 's': ('time', 1.0), 'sec': ('time', 1.0), 'secs': ('time', 1.0),
    'second': ('time', 1.0), 'seconds': ('time', 1.0), 'min': ('time', 60.0),
    'mins': ('time', 60.0), 'minute': ('time', 60.0), 'minutes': ('time', 60.0),
    'h': ('time', 3600.0), 'hr': ('time', 3600.0), 'hrs': ('time', 3600.0),
    'hour': ('time', 3600.0), 'hours': ('time', 3600.0), '秒': ('time', 1.0),
    '毫秒': ('time', 0.001), '分钟': ('time', 60.0), '小时': ('time', 3600.0),
    'rad': ('angle', 1.0), 'deg': ('angle', _DEG), 'degree': ('angle', _DEG),
    'degrees': ('angle', _DEG), '°': ('angle', _DEG), '度': ('angle', _DEG),
    'pa': ('pressure', 1.0), 'kpa': ('pressure', 1000.0), 'mpa': ('pressure', 1e6),
    'bar': ('pressure', 1e5),
    '%': ('ratio', 0.01),
    'hz': ('frequency', 1.0), 'khz': ('frequency', 1000.0), 'fps': ('frame_rate', 1.0),
    'v': ('voltage', 1.0), 'mv': ('voltage', 0.001), 'ma': ('current', 0.001),
    'w': ('power', 1.0), 'kw': ('power', 1000.0), 'wh': ('energy', 3600.0),
}

_UNIT_ALT = '|'.join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
# A number not glued to a preceding name ("M4", "ur5e" and "shelf_1" are names, not values),
# then an optional unit that does not run on into a longer word ("5 m" yes, "5 mugs" no).
# The classes are ASCII on purpose: a CJK character next to a number is not part of a name.
QUANTITY_PATTERN = (
    r'(?<![a-z0-9_.])(?P<num>[-+]?\d+(?:\.\d+)?)'
    r'(?:\s*(?P<unit>' + _UNIT_ALT + r'))?(?![a-z0-9_])'
)


@dataclass(frozen=True)
class Quantity:
    """A number in SI units; ``dimension`` is '' for a bare number (a count or a name)."""

    value: float
    dimension: str

    def same_as(self, other: Quantity) -> bool:
        """Equal dimension and value, with a relative tolerance for unit conversions."""
        return (self.dimension == other.dimension
                and math.isclose(self.value, other.value, rel_tol=1e-6, abs_tol=1e-12))

    def token(self) -> str:
        """Return a string equal exactly when two quantities are (for sequence alignment)."""
        return f'<{self.dimension}={self.value:.6g}>'


def parse_quantity(number: str, unit: str | None) -> Quantity:
    """Convert one matched number and unit to SI."""
    value = float(number)
    if not unit:
        return Quantity(value, '')
    dimension, factor = UNITS[unit.lower()]
    return Quantity(value * factor, dimension)
