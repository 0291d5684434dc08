"""
Input checks shared by every engine entry point.

Everything a caller sends is checked here before any write starts, so a rejected request never
leaves a partial row behind and the error names the field at fault.
"""

from __future__ import annotations

import json
import math
from typing import Any

from robotmem_ros.engine.context_filter import load_json_object
from robotmem_ros.errors import ValidationError


def check_text(name: str, value: Any, *, max_chars: int, required: bool = True) -> str:
    """Return the stripped text or raise ValidationError (empty, too long, not UTF-8-encodable)."""
    if not isinstance(value, str):
        raise ValidationError(f'{name} must be a string')
    text = value.strip()
    if required and not text:
        raise ValidationError(f'{name} must not be empty')
    if len(text) > max_chars:
        raise ValidationError(f'{name} is too long: {len(text)} characters (max {max_chars})')
    check_encodable(name, text)
    if '\x00' in text:
        raise ValidationError(f'{name} must not contain NUL characters')
    return text


def check_id(name: str, value: Any) -> int:
    """Return a positive integer id or raise ValidationError."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValidationError(f'{name} must be a positive integer, got {value!r}')
    return value


def check_finite(name: str, value: Any) -> float:
    """Return ``value`` as float when it is a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f'{name} must be a finite number, got {value!r}')
    return float(value)


def check_encodable(name: str, text: str) -> None:
    """Reject lone surrogates, which SQLite cannot store as UTF-8."""
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        raise ValidationError(f'{name} is not valid UTF-8 (lone surrogate)') from None


def json_object(name: str, value: Any, *, max_bytes: int, max_depth: int) -> dict:
    """Parse a JSON object field ('' → {}) with the size/depth limits, storable as UTF-8."""
    obj = load_json_object(value, what=name, max_bytes=max_bytes, max_depth=max_depth)
    check_encodable(name, json.dumps(obj, ensure_ascii=False))
    return obj
