"""What strict JSON can carry of a Python value: NaN and the infinities as ``null``.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``1e400`` (an infinity), and
writes them back as bare ``NaN`` / ``Infinity``, which no strict JSON parser
takes. Whatever rafrx sends or hands out as JSON goes through :func:`finite`
first (``null``, as JavaScript's ``JSON.stringify`` writes them).

Example:
    >>> finite({"x": [1.5, float("nan")], "y": float("-inf")})
    {'x': [1.5, None], 'y': None}
    >>> strict_dumps({"n": float("inf")})
    '{"n": null}'
    >>> is_strict_json('{"n": 1e400}'), is_strict_json('{"n": NaN}')
    (True, False)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["finite", "is_strict_json", "strict_dumps"]


def finite(value: Any) -> Any:
    """``value`` with each NaN or infinity in it made ``None`` (mappings and
    sequences copied as dicts and lists; anything else as it is)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def strict_dumps(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)``, with NaN and the infinities as ``null``.

    The value is only walked when it holds one of them (``json.dumps`` refuses
    it first), so the usual case costs one ``json.dumps``.
    """
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError as err:
        if not str(err).startswith("Out of range float"):
            raise  # a circular reference
        return json.dumps(finite(value), allow_nan=False, **options)


def _refuse(literal: str) -> Any:
    raise ValueError(f"{literal} is not JSON")


def is_strict_json(text: str) -> bool:
    """Whether ``text`` is JSON that any parser takes (no ``NaN`` / ``Infinity``)."""
    try:
        json.loads(text, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return False
    return True
