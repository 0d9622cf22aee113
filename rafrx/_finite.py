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
    sequences copied as dicts and lists; anything else as it is).

    Any depth the parser reads is copied (the walk keeps its own stack, not
    Python's); a container inside itself raises ``ValueError``, as in ``json``.
    """
    if not isinstance(value, _CONTAINERS):
        return _number(value)
    root = _shell(value)
    path: set[int] = set()  # the containers being copied: a cycle comes back to one
    stack: list[tuple[Any, Any] | int] = [(value, root)]
    while stack:
        entry = stack.pop()
        if isinstance(entry, int):  # all below this container is copied
            path.discard(entry)
            continue
        source, target = entry
        if id(source) in path:
            raise ValueError("Circular reference detected")
        path.add(id(source))
        stack.append(id(source))
        for key, item in source.items() if isinstance(source, Mapping) else enumerate(source):
            if isinstance(item, _CONTAINERS):
                target[key] = child = _shell(item)
                stack.append((item, child))
            else:
                target[key] = _number(item)
    return root


_CONTAINERS = (Mapping, list, tuple)


def _number(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _shell(container: Any) -> dict[Any, Any] | list[Any]:
    """An empty copy of ``container`` to fill in: a dict, or a list of its length."""
    return {} if isinstance(container, Mapping) else [None] * len(container)


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
