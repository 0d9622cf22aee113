"""pydantic, where a tool meets it: models (and pydantic dataclasses) as argument
types, and ``Field()`` metadata.

pydantic is no dependency of rafrx: these functions look for its modules in
``sys.modules`` only, so a value can be pydantic's only once the user has
imported it. pydantic describes and builds its own types
(:func:`pydantic_schema`), with the JSON semantics the arguments come in.

Example:
    >>> import pydantic
    >>> class Point(pydantic.BaseModel):
    ...     '''A point.
    ...
    ...     Attributes:
    ...         y: Up.
    ...     '''
    ...     x: int = pydantic.Field(description="Across.")
    ...     y: int = 0
    >>> schema, convert = pydantic_schema(Point)
    >>> schema
    {'description': 'A point.', 'properties': {'x': {'description': 'Across.', 'type': 'integer'}, 'y': {'default': 0, 'type': 'integer', 'description': 'Up.'}}, 'required': ['x'], 'type': 'object'}
    >>> convert({"x": 1.0})
    Point(x=1, y=0)
"""  # noqa: E501

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from rafrx._docstrings import parse_docstring
from rafrx._schema_check import SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_ONE

__all__ = ["field_info", "is_model", "is_pydantic_class", "pydantic_schema"]

# Left out: pydantic's titles, and OpenAPI's discriminator (its mapping names $defs).
_LEFT_OUT = frozenset({"$ref", "$defs", "title", "discriminator"})


def _loaded(module: str, name: str) -> Any:
    """``module.name`` if the module is imported, else ``None``."""
    found = sys.modules.get(module)
    return getattr(found, name, None) if found is not None else None


def is_model(cls: type) -> bool:
    """Whether ``cls`` is a pydantic model class."""
    model = _loaded("pydantic.main", "BaseModel")
    return model is not None and issubclass(cls, model)


def is_pydantic_class(cls: type) -> bool:
    """Whether ``cls`` is a pydantic model or a pydantic dataclass."""
    return is_model(cls) or (dataclasses.is_dataclass(cls) and hasattr(cls, "__pydantic_fields__"))


def field_info(value: Any) -> Any:
    """``value`` if it is a pydantic ``FieldInfo`` (what ``Field()`` returns), else ``None``."""
    info = _loaded("pydantic.fields", "FieldInfo")
    return value if info is not None and isinstance(value, info) else None


def pydantic_schema(hint: Any) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    """The standalone JSON schema of a type pydantic builds (every ``$ref`` inlined,
    pydantic's titles left out), and the converter from validated JSON to it.

    A model's docstring is read as other classes' are: its description, and
    its ``Attributes:`` for the fields ``Field(description=...)`` left bare.
    The converter validates in pydantic's JSON mode (an ISO string is a
    date even for a strict model); its ``ValidationError`` is a ``ValueError``.

    Raises:
        TypeError: the type refers to itself (directly or not).
    """
    adapter = sys.modules["pydantic"].TypeAdapter(hint)
    full = adapter.json_schema()
    schema: dict[str, Any] = _inlined(full, full.get("$defs", {}), ())
    if isinstance(hint, type) and hint.__doc__ and "properties" in schema:
        description, docs = parse_docstring(hint.__doc__)
        if description:
            schema["description"] = description
        for name, sub in schema["properties"].items():
            if docs.get(name) and isinstance(sub, dict) and "description" not in sub:
                sub["description"] = docs[name]

    def convert(value: Any) -> Any:
        return adapter.validate_json(json.dumps(value))

    return schema, convert


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
        if key in _LEFT_OUT:
            continue
        if key in SCHEMA_MAPS:
            out[key] = {name: _inlined(s, defs, open_refs) for name, s in value.items()}
        elif key in SCHEMA_LISTS:
            out[key] = [_inlined(s, defs, open_refs) for s in value]
        elif key in SCHEMA_ONE:
            out[key] = _inlined(value, defs, open_refs)
        else:
            out[key] = value  # a default, an enum, a description: values, not schemas
    return out
