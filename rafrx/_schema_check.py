"""Checking parsed JSON against the subset of JSON Schema that tool schemas use.

Supported keywords: ``type`` (a name or a list of names), ``enum``,
``const``, ``anyOf``/``oneOf``/``allOf`` (``oneOf``: exactly one branch, where the
branches use only these keywords); for numbers ``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``; for strings
``minLength``/``maxLength`` (in code points) and ``pattern`` (a search, as JSON
Schema says); for arrays
``items``/``prefixItems``/``minItems``/``maxItems``/``uniqueItems``; for
objects ``properties``/``required``/``additionalProperties``/
``minProperties``/``maxProperties``. An integer is a
``number``, and a float with no fraction is an ``integer``; a boolean is
never a number. ``enum`` compares as JSON does (``1.0`` is ``1``, a list is
the tuple it spells). Errors name the argument they are about.

Example:
    >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}},
    ...     "required": ["n"], "additionalProperties": False}
    >>> check_object(schema, {"n": 2}, "")
    []
    >>> check_object(schema, {"n": True, "m": 1}, "")
    ["argument 'n': expected integer, got boolean true", "unexpected argument 'm' (expected: n)"]
    >>> check({"type": "array", "items": {"type": "string"}}, ["a", 1], "tags")
    "argument 'tags[1]': expected string, got integer 1"
"""

from __future__ import annotations

import fractions
import functools
import json
import operator
import re
import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "SCHEMA_LISTS",
    "SCHEMA_MAPS",
    "SCHEMA_ONE",
    "check",
    "check_object",
    "json_equal",
    "json_type",
    "show",
]

_SHOWN = 40  # characters of a value an error message shows

# The JSON Schema keywords whose value is a map of names to schemas, a list of
# schemas, or one schema: where a schema's subschemas are.
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas"})
SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
SCHEMA_ONE = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
)


def json_type(value: Any) -> str:
    """The JSON type name of a parsed JSON value (the Python type's name otherwise).

    Example:
        >>> json_type(True), json_type(1), json_type(1.5), json_type(None), json_type((1,))
        ('boolean', 'integer', 'number', 'null', 'array')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def json_equal(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are the same JSON value.

    Numbers compare by value (``1 == 1.0``) but a boolean is never a number,
    and a tuple is the array it spells.

    Example:
        >>> json_equal(1.0, 1), json_equal(True, 1), json_equal((1, [2]), [1, (2,)])
        (True, False, True)
    """
    kinds = json_type(a), json_type(b)
    if set(kinds) <= {"integer", "number"}:
        return bool(a == b)
    if kinds[0] != kinds[1]:
        return False
    if kinds[0] == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if kinds[0] == "object":
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def show(value: Any) -> str:
    """A value for an error message: its JSON type and its JSON text, cut at 40 characters.

    Only as much of the value is rendered as is shown, however deeply it nests.

    Example:
        >>> show("x" * 50)
        'string "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'
    """
    text = ""
    try:
        for chunk in json.JSONEncoder(ensure_ascii=False).iterencode(value):
            text += chunk
            if len(text) > _SHOWN:
                break
    except (TypeError, ValueError):  # not JSON: a Python value, or one that holds itself
        try:
            text = repr(value)
        except RecursionError:
            text = reprlib.repr(value)  # bounded
    if len(text) > _SHOWN:
        text = text[: _SHOWN - 3] + "..."
    return f"{json_type(value)} {text}"


def check(schema: Mapping[str, Any] | bool, value: Any, path: str) -> str | None:
    """The first way ``value`` breaks the (JSON-schema subset) ``schema``, or ``None``.

    Args:
        schema: The schema; ``True`` or ``{}`` allow anything, ``False`` nothing
            (and so does anything else that is not a schema, left to the provider).
        value: The parsed JSON value.
        path: Where the value is (``"a.b[0]"``), for the message; ``""`` at the top.
    """
    if schema is False:
        return f"{_where(path)}not allowed"
    if not isinstance(schema, Mapping) or not schema:
        return None
    kinds = _kinds(schema)
    if kinds is not None and not _fits(value, kinds):
        return f"{_where(path)}expected {' or '.join(kinds)}, got {show(value)}"
    if "enum" in schema and not any(json_equal(value, v) for v in schema["enum"]):
        options = ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
        return f"{_where(path)}expected one of {options}, got {show(value)}"
    if "const" in schema and not json_equal(value, schema["const"]):
        return f"{_where(path)}expected {_text(schema['const'])}, got {show(value)}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            error = _check_branches(schema[key], value, path, exactly_one=key == "oneOf")
            if error:
                return error
    for part in schema.get("allOf", ()):
        error = check(part, value, path)
        if error:
            return error
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _check_number(schema, value, path)
    if isinstance(value, str):
        return _check_string(schema, value, path)
    if isinstance(value, list | tuple):
        return _check_array(schema, value, path)
    if isinstance(value, Mapping):
        errors = check_object(schema, value, path)
        return "; ".join(errors) if errors else None  # every problem, as at the top
    return None


def check_object(schema: Mapping[str, Any], value: Mapping[str, Any], path: str) -> list[str]:
    """Every way the object ``value`` breaks the object ``schema`` (missing, unexpected, wrong).

    Args:
        schema: An object schema.
        value: The parsed JSON object.
        path: Where the object is, for the messages; ``""`` at the top.
    """
    errors: list[str] = []
    properties: Mapping[str, Any] = schema.get("properties", {})
    prefix = f"{path}." if path else ""
    count = _count_error(schema, "Properties", len(value), "properties")
    if count:
        errors.append(f"{_where(path) or 'arguments: '}{count}")
    for name in schema.get("required", ()):
        if name not in value:
            errors.append(f"missing required argument {prefix + name!r}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        sub = properties.get(name, extra)
        if sub is False:
            expected = ", ".join(properties) or "none"
            errors.append(f"unexpected argument {prefix + name!r} (expected: {expected})")
            continue
        error = check(sub, item, prefix + name)
        if error:
            errors.append(error)
    return errors


def _check_branches(
    branches: Sequence[Any], value: Any, path: str, *, exactly_one: bool
) -> str | None:
    """How ``value`` breaks ``anyOf`` (no branch fits) or ``oneOf`` (``exactly_one``:
    no branch, or several, fit), or ``None``. No value fits an empty list of branches
    (which JSON Schema does not allow: the tool's schema is at fault, and says so).

    Several fitting ``oneOf`` branches are an error only where this check is sure of
    each fit: a branch with a keyword it does not check (a ``$ref``, ``not``) may
    refuse the value, and that is left to the provider, as for any such keyword.

    Example:
        >>> number_or_integer = [{"type": "number"}, {"type": "integer"}]
        >>> _check_branches(number_or_integer, 1.5, "n", exactly_one=True) is None
        True
        >>> _check_branches(number_or_integer, 2, "n", exactly_one=True)
        "argument 'n': expected exactly one oneOf branch to match, but several matched (branches 0, 1), got integer 2"
        >>> _check_branches([], 2, "n", exactly_one=False)
        "argument 'n': no value matches the schema's empty anyOf (a schema error: anyOf needs a branch)"
    """  # noqa: E501
    if not branches:
        keyword = "oneOf" if exactly_one else "anyOf"
        return (
            f"{_where(path)}no value matches the schema's empty {keyword} "
            f"(a schema error: {keyword} needs a branch)"
        )
    errors = [check(branch, value, path) for branch in branches]
    fitting = [i for i, error in enumerate(errors) if error is None]
    if not fitting:
        # a branch of the value's own type explains best (not "expected null")
        near = [e for b, e in zip(branches, errors, strict=True) if e and _same_type(b, value)]
        return near[0] if len(near) == 1 else " or ".join(e for e in errors if e)
    if exactly_one and len(fitting) > 1 and all(_checked_whole(branches[i]) for i in fitting):
        numbers = ", ".join(map(str, fitting))
        return (
            f"{_where(path)}expected exactly one oneOf branch to match, "
            f"but several matched (branches {numbers}), got {show(value)}"
        )
    return None


#: The JSON Schema keywords that assert something :func:`check` does not check.
UNCHECKED = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
        "dependentSchemas",
        "dependentRequired",
        "dependencies",
        "contains",
        "minContains",
        "maxContains",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)


def _checked_whole(schema: Any) -> bool:
    """Whether :func:`check` checks all that ``schema`` asserts, at any depth: no
    keyword of :data:`UNCHECKED`, no ``pattern`` Python cannot compile.

    Example:
        >>> _checked_whole({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}})
        False
    """
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, Mapping):
        return False  # not a schema: left to the provider
    if not UNCHECKED.isdisjoint(schema):
        return False
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and _compiled(pattern) is None:
        return False
    subschemas: list[Any] = []
    for key, sub in schema.items():
        if key in SCHEMA_MAPS and isinstance(sub, Mapping):
            subschemas += sub.values()
        elif key in SCHEMA_LISTS and isinstance(sub, list):
            subschemas += sub
        elif key in SCHEMA_ONE or key == "additionalItems":
            subschemas += sub if isinstance(sub, list) else [sub]  # (draft 4's tuple items)
    return all(_checked_whole(sub) for sub in subschemas)


#: The order bounds: the JSON Schema keyword, the ``Annotated`` metadata attribute that
#: gives it (annotated_types' ``Ge``, pydantic's ``Field(ge=...)``), the test a value
#: must pass, and the words of the error when it does not.
ORDER_BOUNDS: Final[tuple[tuple[str, str, Callable[[Any, Any], bool], str], ...]] = (
    ("minimum", "ge", operator.ge, "at least"),
    ("exclusiveMinimum", "gt", operator.gt, "more than"),
    ("maximum", "le", operator.le, "at most"),
    ("exclusiveMaximum", "lt", operator.lt, "less than"),
)


def _check_number(schema: Mapping[str, Any], value: float, path: str) -> str | None:
    if schema.get("exclusiveMinimum") is True or schema.get("exclusiveMaximum") is True:
        schema = _draft4_bounds(schema)
    for key, _, holds, words in ORDER_BOUNDS:
        bound: Any = schema.get(key)
        is_number = isinstance(bound, int | float) and not isinstance(bound, bool)
        if is_number and not holds(value, bound):
            return f"{_where(path)}expected {words} {_text(bound)}, got {show(value)}"
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and step > 0 and not _is_multiple(value, step):
        return f"{_where(path)}expected a multiple of {_text(step)}, got {show(value)}"
    return None


def _draft4_bounds(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with draft 4's (and OpenAPI 3.0's) ``exclusiveMinimum: true``, which
    makes ``minimum`` exclusive, in today's form: ``exclusiveMinimum`` the bound.

    Example:
        >>> _draft4_bounds({"minimum": 0, "exclusiveMinimum": True})
        {'exclusiveMinimum': 0}
    """
    out = dict(schema)
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(exclusive) is True:
            del out[exclusive]
            if bound in out:
                out[exclusive] = out.pop(bound)
    return out


def _is_multiple(value: float, step: float) -> bool:
    """Whether ``value`` is a whole multiple of ``step``, in the decimals they are written in
    (``0.3`` is a multiple of ``0.1``)."""
    if isinstance(value, int) and isinstance(step, int):
        return value % step == 0
    try:
        return fractions.Fraction(repr(value)) % fractions.Fraction(repr(step)) == 0
    except (ValueError, OverflowError):  # an infinity, NaN
        return False


def _check_string(schema: Mapping[str, Any], value: str, path: str) -> str | None:
    count = _count_error(schema, "Length", len(value), "characters")  # code points, as JSON
    if count:
        return f"{_where(path)}{count}: {show(value)}"
    pattern = schema.get("pattern")
    regex = _compiled(pattern) if isinstance(pattern, str) else None
    if regex is not None and regex.search(value) is None:
        return f"{_where(path)}expected a string matching {pattern!r}, got {show(value)}"
    return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    """A JSON Schema (ECMA-262) pattern as a Python regex: ``$`` is the end of the
    string, not also the place before a final newline. ``None`` for one Python
    cannot compile (``\\p{L}``): it is sent to the model but not checked here.

    Example:
        >>> _compiled("^[a-z]+$").search("abc\\n") is None, _compiled(r"\\p{L}") is None
        (True, True)
    """
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            char = r"\Z"
        out.append(char)
    try:
        return re.compile("".join(out))
    except re.error:
        return None


def _count_error(schema: Mapping[str, Any], key: str, count: int, things: str) -> str | None:
    """How ``count`` breaks ``min<key>``/``max<key>``, or ``None``."""
    low, high = schema.get(f"min{key}"), schema.get(f"max{key}")
    if (low is None or count >= low) and (high is None or count <= high):
        return None
    wanted = low if low == high else f"{low or 0}..{high if high is not None else ''}"
    return f"expected {wanted} {things}, got {count}"


def _check_array(schema: Mapping[str, Any], value: Sequence[Any], path: str) -> str | None:
    count = _count_error(schema, "Items", len(value), "items")
    if count:
        return f"{_where(path)}{count}"
    if schema.get("uniqueItems") is True:
        first: dict[Any, int] = {}
        for i, item in enumerate(value):
            j = first.setdefault(_identity(item), i)
            if j != i:
                return f"{_where(path)}expected unique items, but items {j} and {i} are equal"
    items = schema.get("items", True)
    if isinstance(items, list):  # drafts 4 to 2019-09's tuples (MCP servers, zod): positions
        prefix, rest = items, schema.get("additionalItems", True)
    else:
        prefix, rest = schema.get("prefixItems", []), items
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else rest
        error = check(sub, item, f"{path}[{i}]")
        if error:
            return error
    return None


def _identity(value: Any) -> Any:
    """A hashable key equal for JSON-equal values (``1`` and ``1.0``, never ``True``)."""
    kind = json_type(value)
    if kind == "array":
        return kind, tuple(_identity(v) for v in value)
    if kind == "object":
        return kind, frozenset((k, _identity(v)) for k, v in value.items())
    if kind == "integer":
        kind = "number"  # 1 == 1.0 and hash(1) == hash(1.0)
    return kind, value


def _text(value: Any) -> str:
    """A schema's bound or constant as JSON text."""
    return json.dumps(value, ensure_ascii=False)


def _kinds(schema: Mapping[str, Any]) -> list[str] | None:
    """The schema's ``type`` as a list of names, or ``None`` when it has none."""
    kind = schema.get("type")
    if kind is None:
        return None
    return [kind] if isinstance(kind, str) else list(kind)


def _fits(value: Any, kinds: list[str]) -> bool:
    return any(_is_type(value, k) for k in kinds)


def _is_type(value: Any, kind: str) -> bool:
    actual = json_type(value)
    if kind == "number":
        return actual in ("integer", "number")
    if kind == "integer":
        return actual == "integer" or (actual == "number" and float(value).is_integer())
    return actual == kind


def _same_type(schema: Mapping[str, Any] | bool, value: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    kinds = _kinds(schema)
    return kinds is not None and _fits(value, kinds)


def _where(path: str) -> str:
    return f"argument {path!r}: " if path else ""
