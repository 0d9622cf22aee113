"""pydantic, where a tool meets it: models as argument types and ``Field()`` metadata.

pydantic is no dependency of rafrx: these functions look for it in
``sys.modules`` only, so a value can be pydantic's only once the user has
imported it.

Example:
    >>> import pydantic
    >>> class Point(pydantic.BaseModel):
    ...     '''A point.'''
    ...     x: int = pydantic.Field(description="Across.")
    ...     title: str = ""
    >>> model_schema(Point)
    {'description': 'A point.', 'properties': {'x': {'description': 'Across.', 'type': 'integer'}, 'title': {'default': '', 'type': 'string'}}, 'required': ['x'], 'type': 'object'}
"""  # noqa: E501

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["field_default", "field_info", "is_model", "model_schema"]

# Keywords whose value is a map of names to schemas, a list of schemas, or one schema.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SCHEMA_ONE = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
)


def is_model(cls: type) -> bool:
    """Whether ``cls`` is a pydantic model class."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(cls, pydantic.BaseModel)


def field_info(value: Any) -> Any:
    """``value`` if it is a pydantic ``FieldInfo`` (what ``Field()`` returns), else ``None``."""
    pydantic = sys.modules.get("pydantic")
    return value if pydantic is not None and isinstance(value, pydantic.fields.FieldInfo) else None


def field_default(field: Any) -> Any:
    """The schema default of an optional ``Field()``: its JSON form, or none for a factory."""
    from rafrx._schema import _NO_DEFAULT, _json_default_value  # (a cycle at import time)

    if field.default_factory is not None:
        return _NO_DEFAULT
    return _json_default_value(field.default)


def model_schema(cls: Any, seen: tuple[type, ...] = ()) -> dict[str, Any]:
    """The model's JSON schema, standalone: every ``$ref`` inlined, pydantic's titles left out.

    Raises:
        TypeError: the model refers to itself (directly or not).
    """
    if cls in seen:
        raise TypeError(f"recursive types are not supported in a tool schema: {cls.__name__}")
    full = cls.model_json_schema()
    inlined: dict[str, Any] = _inlined(full, full.get("$defs", {}), (cls.__name__,))
    return inlined


def _inlined(node: Any, defs: Mapping[str, Any], open_refs: tuple[str, ...]) -> Any:
    if not isinstance(node, Mapping):
        return node  # a boolean schema
    out: dict[str, Any] = {}
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rpartition("/")[2]
        if name in open_refs:
            raise TypeError(f"recursive types are not supported in a tool schema: {name}")
        if name not in defs:
            raise TypeError(f"a tool schema cannot refer outside itself: {ref}")
        out.update(_inlined(defs[name], defs, (*open_refs, name)))
    for key, value in node.items():
        if key in ("$ref", "$defs", "title"):
            continue
        if key in _SCHEMA_MAPS:
            out[key] = {name: _inlined(s, defs, open_refs) for name, s in value.items()}
        elif key in _SCHEMA_LISTS:
            out[key] = [_inlined(s, defs, open_refs) for s in value]
        elif key in _SCHEMA_ONE:
            out[key] = _inlined(value, defs, open_refs)
        else:
            out[key] = value  # a default, an enum, a description: values, not schemas
    return out
