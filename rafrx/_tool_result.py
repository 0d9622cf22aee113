"""The text a tool's return value is sent back to the model as.

``str`` goes as is; anything else as JSON, with the common Python values that
JSON lacks given a JSON form.

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
import pathlib
import uuid
from typing import Any

import attrs

__all__ = ["format_result"]


def format_result(value: Any) -> str:
    """The text sent back to the model for a tool's return value.

    ``str`` goes as is; anything else as JSON (enums as their value, attrs and
    dataclass instances as objects, sets as lists, dates in ISO format).

    Raises:
        TypeError: the value has no JSON form.

    Example:
        >>> format_result("done"), format_result({"n": 1, "ok": True}), format_result(None)
        ('done', '{"n": 1, "ok": true}', 'null')
    """
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=_to_json)


def _to_json(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if attrs.has(type(value)):
        return attrs.asdict(value, recurse=False)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, pathlib.PurePath | uuid.UUID | decimal.Decimal):
        return str(value)
    raise TypeError(f"a tool result of type {type(value).__name__} is not JSON serializable")
