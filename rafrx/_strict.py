"""OpenAI's strict mode for tool schemas (``"strict": true``: arguments always fit).

Strict mode takes a subset of JSON Schema: every object lists all its
properties in ``required`` and sets ``additionalProperties: false``, and
every schema says what it accepts. :func:`strict_schema` rewrites a tool's
schema that way: an optional property becomes required but nullable (a
``null`` then stands for "not given", see :func:`without_nulls`), and
defaults are left out. What strict mode cannot say (an open ``dict``, any
value, a fixed-length tuple: OpenAI refuses ``prefixItems`` there) is a
``TypeError`` naming the parameter.

Example:
    >>> schema = {"type": "object", "properties": {"a": {"type": "string"},
    ...     "n": {"type": "integer", "default": 3}}, "required": ["a"]}
    >>> strict_schema(schema)
    {'type': 'object', 'properties': {'a': {'type': 'string'}, 'n': {'type': ['integer', 'null']}}, 'required': ['a', 'n'], 'additionalProperties': False}
    >>> without_nulls(schema, {"a": "x", "n": None})
    {'a': 'x'}
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rafrx._schema_check import SCHEMA_LISTS, check

__all__ = ["strict_schema", "without_nulls"]


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The strict-mode form of a tool's (object) schema.

    Raises:
        TypeError: a part of it has no strict form; the message names the parameter.
    """
    strict = _strict(schema, "")
    assert isinstance(strict, dict)
    return strict


def without_nulls(
    schema: Mapping[str, Any] | bool, value: Any, root: Mapping[str, Any] | None = None
) -> Any:
    """``value`` without the ``null``s that strict mode's nullable stand-ins for optional
    properties let through (so that their defaults apply), at any depth (``$ref``s to
    the ``$defs`` or ``definitions`` of ``root``, the whole schema, followed)."""
    if not isinstance(schema, Mapping):
        return value
    root = schema if root is None else root
    node: Mapping[str, Any] = _resolved(schema, root)
    branches = [*node.get("anyOf", ()), *node.get("oneOf", ())]
    if branches:  # ``Point | None``, ``Cat | Dog``: the branch the value fits, nulls dropped
        branches = [_resolved(b, root) for b in branches]
        fitting = [b for b in branches if _holds(b, value)]
        for branch in fitting:
            stripped = without_nulls(branch, value, root)
            if check(branch, stripped, "") is None:
                return stripped
        node = fitting[0] if fitting else node
    if isinstance(value, Mapping):
        properties = {k: _resolved(v, root) for k, v in node.get("properties", {}).items()}
        required = set(node.get("required", ()))
        return {
            key: without_nulls(properties.get(key, True), item, root)
            for key, item in value.items()
            if not (item is None and key in properties and key not in required)
            or check(properties[key], None, "") is None  # null is a value it takes
        }
    if isinstance(value, list):
        prefix = node.get("prefixItems", ())
        return [
            without_nulls(prefix[i] if i < len(prefix) else node.get("items", True), item, root)
            for i, item in enumerate(value)
        ]
    return value


def _resolved(schema: Any, root: Mapping[str, Any]) -> Any:
    """``schema``, or what its ``$ref`` to ``root``'s ``$defs`` / ``definitions`` names."""
    ref = schema.get("$ref") if isinstance(schema, Mapping) else None
    if isinstance(ref, str):
        for key in ("$defs", "definitions"):
            defined = root.get(key)
            name = ref.removeprefix(f"#/{key}/")
            if name != ref and isinstance(defined, Mapping) and name in defined:
                return defined[name]
    return schema


def _holds(schema: Any, value: Any) -> bool:
    """Whether ``schema`` is an object schema and ``value`` an object, or both arrays."""
    if not isinstance(schema, Mapping):
        return False
    if any(_holds(b, value) for b in (*schema.get("anyOf", ()), *schema.get("oneOf", ()))):
        return True  # (a union nested in a union)
    if isinstance(value, Mapping):
        return schema.get("type") == "object" or "properties" in schema
    if isinstance(value, list):
        return schema.get("type") == "array" or "items" in schema or "prefixItems" in schema
    return False


def _strict(node: Any, path: str) -> Any:
    if node is True or node == {}:
        raise _inexpressible(path, "it takes any value, and strict mode needs a type")
    if not isinstance(node, Mapping):
        return node  # False
    if "prefixItems" in node or isinstance(node.get("items"), list):  # (or draft 4's form)
        raise _inexpressible(path, "strict mode has no fixed-length tuples (use tuple[T, ...])")
    out = {key: value for key, value in node.items() if key != "default"}
    for key in SCHEMA_LISTS:
        if key in out:
            out[key] = [_strict(part, path) for part in out[key]]
    for key in ("$defs", "definitions"):  # (what ``$ref``s name: strict too)
        if isinstance(out.get(key), Mapping):
            out[key] = {name: _strict(sub, f"#/{key}/{name}") for name, sub in out[key].items()}
    if "items" in out and out["items"] is not False:
        out["items"] = _strict(out["items"], f"{path}[]")
    kinds = out.get("type")
    if kinds == "object" or "properties" in out or (isinstance(kinds, list) and "object" in kinds):
        if out.get("additionalProperties", False) is not False:
            raise _inexpressible(path, "strict mode allows no open objects (dict[str, ...])")
        required = set(out.get("required", ()))
        properties = {}
        for name, sub in out.get("properties", {}).items():
            where = f"{path}.{name}" if path else name
            strict = _strict(sub, where)
            properties[name] = strict if name in required else _nullable(strict)
        out["properties"] = properties
        out["required"] = list(properties)
        out["additionalProperties"] = False
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" not in schema and check(schema, None, "") is None:
        return schema  # takes null already (what a $ref names is not checked here)
    kind = schema.get("type")
    if isinstance(kind, str) and "enum" not in schema and "const" not in schema:
        return {**schema, "type": [kind, "null"]}
    if isinstance(kind, list) and "enum" not in schema and "const" not in schema:
        return {**schema, "type": [*kind, "null"]}
    described = {k: schema[k] for k in ("description",) if k in schema}
    inner = {k: v for k, v in schema.items() if k != "description"}
    return {"anyOf": [inner, {"type": "null"}], **described}


def _inexpressible(path: str, why: str) -> TypeError:
    where = f"parameter {path!r}" if path else "the parameters"
    return TypeError(f"strict mode cannot express {where}: {why}")
