"""What ``Annotated`` metadata says of a value, as JSON Schema keywords.

A plain string is the description; a pydantic ``Field()`` gives its
description and constraints, and so do annotated_types' ``Ge``, ``MaxLen``,
``Interval`` …: ``gt``/``ge``/``lt``/``le``/``multiple_of`` become the
number bounds, ``min_length``/``max_length`` the lengths of the value's JSON
type (characters, items or properties), ``pattern`` a pattern.

Example:
    >>> import annotated_types
    >>> annotated_schema({"type": "string"}, ["A code.", annotated_types.Len(2, 3)])
    {'type': 'string', 'description': 'A code.', 'minLength': 2, 'maxLength': 3}
"""

from __future__ import annotations

import decimal
import math
import numbers
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from rafrx._pydantic import field_info
from rafrx._schema_check import ORDER_BOUNDS

__all__ = ["annotated_schema", "bounded"]

# Bound attributes of ``Annotated`` metadata (annotated_types, pydantic's Field) and
# their JSON Schema keywords; lengths are in ``_LENGTHS``, for each type.
_BOUNDS = {name: keyword for keyword, name, _, _ in ORDER_BOUNDS} | {"multiple_of": "multipleOf"}
_LENGTHS = {
    "string": ("minLength", "maxLength"),
    "array": ("minItems", "maxItems"),
    "object": ("minProperties", "maxProperties"),
}


def bounded(convert: Callable[[Any], Any], metadata: Iterable[Any]) -> Callable[[Any], Any]:
    """``convert``, then a check of the order bounds the schema cannot carry (a date's:
    ``Field(ge=date(2024, 1, 1))``); ``convert`` itself when there are none.

    Example:
        >>> import annotated_types, datetime
        >>> after_2024 = bounded(datetime.date.fromisoformat, [annotated_types.Ge(datetime.date(2024, 1, 1))])
        >>> after_2024("1999-12-31")
        Traceback (most recent call last):
        ...
        ValueError: expected at least 2024-01-01, got 1999-12-31
    """  # noqa: E501
    checks = [
        (holds, bound, words)
        for item in _flat(metadata)
        for _, name, holds, words in ORDER_BOUNDS
        if (bound := getattr(item, name, None)) is not None and _json_number(bound) is None
    ]
    if not checks:
        return convert

    def checked(value: Any) -> Any:
        converted = convert(value)
        for holds, bound, words in checks:
            if not holds(converted, bound):
                raise ValueError(f"expected {words} {bound}, got {converted}")
        return converted

    return checked


def _flat(metadata: Iterable[Any]) -> Iterator[Any]:
    """The metadata, with each pydantic ``Field()``'s own metadata in its place."""
    for item in metadata:
        field = field_info(item)
        yield from (field.metadata if field is not None else (item,))


def annotated_schema(schema: dict[str, Any], metadata: Iterable[Any]) -> dict[str, Any]:
    """``schema`` with what ``Annotated`` metadata says: a string is the description;
    a pydantic ``Field`` gives its description and constraints, as do
    annotated_types' ``Ge``, ``MaxLen``, ``Interval`` … (anything else, and a
    bound with no JSON number, such as a date, is left out, as pydantic does).

    Example:
        >>> import annotated_types
        >>> annotated_schema({"type": "integer"}, ["How many.", annotated_types.Interval(ge=1, lt=9)])
        {'type': 'integer', 'description': 'How many.', 'minimum': 1, 'exclusiveMaximum': 9}
        >>> annotated_schema({"anyOf": [{"type": "array"}, {"type": "null"}]}, [annotated_types.MaxLen(2)])
        {'anyOf': [{'type': 'array'}, {'type': 'null'}], 'maxItems': 2}
    """  # noqa: E501
    return {**schema, **_keywords(schema, metadata)}


def _keywords(schema: Mapping[str, Any], metadata: Iterable[Any]) -> dict[str, Any]:
    """What :func:`annotated_schema` adds to ``schema`` (or puts in place of its own)."""
    extra: dict[str, Any] = {}
    sized = [kind for kind in _LENGTHS if kind in _types(schema)] or ["string"]
    for item in metadata:
        if isinstance(item, str):
            extra.setdefault("description", item)
            continue
        field = field_info(item)
        if field is not None:
            if field.description:
                extra["description"] = field.description
            extra.update(_keywords(schema, field.metadata))  # (not the schema's description)
            continue
        for name, keyword in _BOUNDS.items():
            bound = _json_number(getattr(item, name, None))
            if bound is not None:
                extra[keyword] = bound
        for index, name in enumerate(("min_length", "max_length")):
            length = getattr(item, name, None)
            if isinstance(length, int) and not isinstance(length, bool):
                extra.update((_LENGTHS[kind][index], length) for kind in sized)
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, re.Pattern):
            pattern = pattern.pattern
        if isinstance(pattern, str):
            extra["pattern"] = pattern
    return extra


def _types(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types a schema names, in its ``type`` or its ``anyOf`` branches."""
    kind = schema.get("type")
    found = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    for branch in schema.get("anyOf", ()):
        if isinstance(branch, Mapping):
            found |= _types(branch)
    return found


def _json_number(value: Any) -> int | float | None:
    """A bound as a JSON number (a ``Decimal`` or ``Fraction`` too); ``None`` if it is none."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | decimal.Decimal):
        return None
    if isinstance(value, int):
        return value
    number = float(value)
    if not math.isfinite(number):
        return None
    if isinstance(value, float) or not number.is_integer():
        return number
    return int(number)  # a whole Decimal or Fraction
