"""The text a tool's return value is sent back to the model as.

``str`` goes as is; anything else as JSON, with the common Python values that
JSON lacks given a JSON form, as values and as dict keys.

Example:
    >>> import datetime
    >>> format_result("done"), format_result({"when": datetime.date(2024, 5, 1)})
    ('done', '{"when": "2024-05-01"}')
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import pathlib
import sys
import uuid
from typing import Any

import attrs

from rafrx._pydantic import is_model

__all__ = ["format_result"]


def format_result(value: Any) -> str:
    """The text sent back to the model for a tool's return value.

    ``str`` goes as is (a ``str`` subclass, such as a ``StrEnum`` member, as
    its plain text); anything else as JSON (enums as their value, attrs and
    dataclass instances as objects, sets as lists, dates in ISO format, dict
    keys of those kinds as their JSON string, pydantic models as their
    ``model_dump(mode="json", by_alias=True)``). NaN and the infinities go as
    ``null`` (as keys, as ``json.dumps`` names them: ``"NaN"``, ``"Infinity"``),
    and an integer with more digits than Python writes
    (``sys.get_int_max_str_digits()``) as a string of its digits.

    Raises:
        TypeError: the value has no JSON form.
        ValueError: the value holds itself (a circular reference).

    Example:
        >>> format_result("done"), format_result({"n": 1, "ok": True}), format_result(None)
        ('done', '{"n": 1, "ok": true}', 'null')
        >>> class Unit(enum.StrEnum):
        ...     C = "celsius"
        >>> format_result(Unit.C), format_result({Unit.C: 21.5})
        ('celsius', '{"celsius": 21.5}')
        >>> format_result({"mean": float("nan")})
        '{"mean": null}'
    """
    if isinstance(value, str):
        return str.__str__(value)  # not str(): a (str, Enum) member would show as 'Unit.C'
    return json.dumps(_with_json_keys(value), ensure_ascii=False, allow_nan=False, default=_to_json)


def _with_json_keys(value: Any, open_containers: frozenset[int] = frozenset()) -> Any:
    """``value`` with every dict key that JSON lacks given its JSON form, and every
    NaN or infinity as ``None``.

    ``json.dumps`` calls ``default`` for values only, never for keys. A
    container met again inside itself is left as is, for ``json.dumps`` to
    report the circular reference.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None  # NaN and the infinities have no JSON form: null, as JSON.stringify
    if type(value) is int:
        return _long_int(value)
    if id(value) in open_containers or not isinstance(value, dict | list | tuple):
        return value
    inside = open_containers | {id(value)}
    if isinstance(value, dict):
        return {_key(k): _with_json_keys(v, inside) for k, v in value.items()}
    return [_with_json_keys(item, inside) for item in value]


def _key(key: Any) -> Any:
    """A dict key as JSON takes it: as is, or its JSON form if that is a string or number."""
    if isinstance(key, float) and not math.isfinite(key):
        return repr(key).replace("inf", "Infinity").replace("nan", "NaN")  # as json.dumps
    if type(key) is int:
        return _long_int(key)
    if key is None or isinstance(key, str | int | float):
        return key
    try:
        form = _to_json(key)
    except TypeError:
        return key  # for json.dumps to refuse, naming the type
    return form if form is None or isinstance(form, str | int | float) else key


def _long_int(value: int) -> int | str:
    """``value``, or its digits as a string when it has more than Python writes
    (``sys.get_int_max_str_digits()``, which ``json.dumps`` would refuse)."""
    limit = sys.get_int_max_str_digits()
    if limit and value.bit_length() > 3 * limit:  # 3.32 bits a digit: maybe too long
        digits = str(decimal.Decimal(value))  # (no limit on this conversion)
        if len(digits.lstrip("-")) > limit:
            return digits
    return value


def _to_json(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if is_model(type(value)):
        return _with_json_keys(value.model_dump(mode="json", by_alias=True))
    if attrs.has(type(value)):
        return _with_json_keys(attrs.asdict(value, recurse=False))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _with_json_keys(fields)
    if isinstance(value, set | frozenset):
        return _with_json_keys(sorted(value, key=repr))
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, pathlib.PurePath | uuid.UUID | decimal.Decimal):
        return str(value)
    raise TypeError(f"a tool result of type {type(value).__name__} is not JSON serializable")
