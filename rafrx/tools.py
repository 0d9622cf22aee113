"""Tools: Python functions the model can call, with schemas, validation and timeouts.

``@tool`` turns a sync or async function into a :class:`Tool`: the name is the
function's, the description the docstring's first paragraph, and the JSON
schema of the parameters comes from the type hints (``str``, ``int``,
``float``, ``bool``, ``list[...]``, ``tuple[...]``, ``dict[str, ...]``,
``X | None``, ``Literal``, ``Enum``, attrs classes, ``datetime``/``date`` as
ISO strings, ``Annotated[X, "doc"]``)
with per-parameter descriptions from a Google-style ``Args:`` section.
Parameters with a default are optional.

Example:
    >>> @tool
    ... def weather(city: str, days: int = 1) -> str:
    ...     '''Forecast for a city.
    ...
    ...     Args:
    ...         city: The city's name.
    ...         days: How many days ahead.
    ...     '''
    ...     return f"{city}: sunny for {days} days"
    >>> weather.name, weather.description
    ('weather', 'Forecast for a city.')
    >>> weather.parameters["properties"]["city"]
    {'type': 'string', 'description': "The city's name."}
    >>> weather.parameters["required"]
    ['city']
    >>> import asyncio
    >>> asyncio.run(weather.invoke({"city": "Paris"}))
    'Paris: sunny for 1 days'
    >>> weather.validate({"city": "Paris", "days": True})
    Traceback (most recent call last):
    ...
    rafrx.errors.InvalidToolArguments: invalid arguments for tool 'weather': argument 'days': expected integer, got boolean true

:meth:`Tool.invoke` validates the arguments, converts them (enum values to
members, objects to attrs instances) and runs the function; sync functions
run in a worker thread (``asyncio.to_thread``) so they never block the event
loop. Definitions serialize to each provider's request format
(:meth:`Tool.to_openai`, :meth:`Tool.to_anthropic`, :meth:`Tool.to_responses`).
"""  # noqa: E501

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import functools
import inspect
import json
import pathlib
import re
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias, Union, final, overload

import attrs

from rafrx.errors import InvalidToolArguments, ToolError, ToolExecutionError, ToolTimeout

__all__ = ["Tool", "ToolApprovalResponse", "as_tool", "format_result", "tool"]

_Converter: TypeAlias = Callable[[Any], Any]
_Binder: TypeAlias = Callable[[Mapping[str, Any]], tuple[list[Any], dict[str, Any]]]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _identity(value: Any) -> Any:
    return value


# ---------------------------------------------------------------- docstrings


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph and the ``Args:`` descriptions of a Google docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    first: list[str] = []
    for line in lines:
        if not line.strip() or re.match(r"^[A-Z][A-Za-z ]*:\s*$", line):
            break
        first.append(line.strip())
    params: dict[str, str] = {}
    in_args = False
    indent: int | None = None
    current: str | None = None
    for line in lines:
        if re.match(r"^(Args|Arguments|Parameters|Params):\s*$", line):
            in_args, indent, current = True, None, None
            continue
        if not in_args:
            continue
        if line.strip() and not line[0].isspace():
            break  # the next section
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        entry = re.match(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line.strip())
        if depth == indent and entry:
            current = entry.group(1)
            params[current] = entry.group(2).strip()
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
    return " ".join(first), params


# ---------------------------------------------------------------- schemas


def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    if set(schema) <= {"type", "description"} and isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _literal_schema(values: Sequence[Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    kinds = {_json_type(v) for v in values}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    schema["enum"] = list(values)
    return schema


def _type_schema(hint: Any, seen: tuple[type, ...]) -> tuple[dict[str, Any], _Converter]:
    """The JSON schema of a type hint, and the converter from validated JSON to it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is inspect.Parameter.empty or hint is object:
        return {}, _identity
    if origin is Annotated:
        schema, convert = _type_schema(args[0], seen)
        docs = [a for a in args[1:] if isinstance(a, str)]
        return ({**schema, "description": docs[0]} if docs else schema), convert
    if hint is None or hint is type(None):
        return {"type": "null"}, _identity
    if hint is bool:
        return {"type": "boolean"}, _identity
    if hint is int:
        return {"type": "integer"}, int
    if hint is float:
        return {"type": "number"}, float
    if hint is str:
        return {"type": "string"}, _identity
    if hint is datetime.datetime:
        return {"type": "string", "format": "date-time"}, datetime.datetime.fromisoformat
    if hint is datetime.date:
        return {"type": "string", "format": "date"}, datetime.date.fromisoformat
    if origin is Union or origin is types.UnionType:
        return _union_schema(args, seen)
    if origin is Literal:
        return _literal_schema(args), _identity
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _literal_schema([m.value for m in hint]), hint
    if origin in (list, Sequence, Iterable) or hint is list:
        item_schema, item = _type_schema(args[0] if args else Any, seen)
        return {"type": "array", "items": item_schema}, lambda v: [item(x) for x in v]
    if origin is tuple or hint is tuple:
        return _tuple_schema(args or (Any, ...), seen)
    if origin in (dict, Mapping) or hint is dict:
        if args and args[0] is not str:
            raise TypeError(f"dict keys must be str in a tool schema, not {args[0]!r}")
        value_schema, value = _type_schema(args[1] if args else Any, seen)
        schema = {"type": "object", "additionalProperties": value_schema}
        return schema, lambda v: {k: value(x) for k, x in v.items()}
    if isinstance(hint, type) and attrs.has(hint):
        return _attrs_schema(hint, seen)
    raise TypeError(f"unsupported type in a tool schema: {hint!r}")


def _union_schema(args: tuple[Any, ...], seen: tuple[type, ...]) -> tuple[dict[str, Any], Any]:
    members = [a for a in args if a is not type(None)]
    nullable = len(members) < len(args)
    parts = [_type_schema(a, seen) for a in members]
    if len(parts) == 1:
        schema, inner = parts[0]
        if not nullable:
            return schema, inner
        return _with_null(schema), lambda v: None if v is None else inner(v)
    any_of = [s for s, _ in parts] + ([{"type": "null"}] if nullable else [])

    def convert(value: Any) -> Any:
        if value is None and nullable:
            return None
        for schema, inner in parts:
            if _check(schema, value, "") is None:
                return inner(value)
        return value

    return {"anyOf": any_of}, convert


def _tuple_schema(args: tuple[Any, ...], seen: tuple[type, ...]) -> tuple[dict[str, Any], Any]:
    if len(args) == 2 and args[1] is Ellipsis:
        item_schema, item = _type_schema(args[0], seen)
        return {"type": "array", "items": item_schema}, lambda v: tuple(item(x) for x in v)
    parts = [_type_schema(a, seen) for a in args]
    schema = {
        "type": "array",
        "prefixItems": [s for s, _ in parts],
        "items": False,
        "minItems": len(parts),
        "maxItems": len(parts),
    }
    return schema, lambda v: tuple(c(x) for (_, c), x in zip(parts, v, strict=True))


def _attrs_schema(cls: type, seen: tuple[type, ...]) -> tuple[dict[str, Any], _Converter]:
    if cls in seen:
        raise TypeError(f"recursive types are not supported in a tool schema: {cls.__name__}")
    hints = typing.get_type_hints(cls, include_extras=True)
    description, docs = _parse_docstring(cls.__doc__)
    properties: dict[str, Any] = {}
    converters: dict[str, _Converter] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        name = field.alias or field.name
        field_schema, field_convert = _type_schema(hints.get(field.name, Any), (*seen, cls))
        if docs.get(name):
            field_schema = {**field_schema, "description": docs[name]}
        properties[name], converters[name] = field_schema, field_convert
        if field.default is attrs.NOTHING:
            required.append(name)
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if description and not description.startswith(f"{cls.__name__}("):
        schema = {"description": description, **schema}

    def convert(value: Mapping[str, Any]) -> Any:
        return cls(**{k: converters[k](v) for k, v in value.items()})

    return schema, convert


# ---------------------------------------------------------------- validation


def _json_type(value: Any) -> str:
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


def _is_type(value: Any, kind: str) -> bool:
    actual = _json_type(value)
    if kind == "number":
        return actual in ("integer", "number")
    if kind == "integer":
        return actual == "integer" or (actual == "number" and float(value).is_integer())
    return actual == kind


def _same_type(schema: Mapping[str, Any] | bool, value: Any) -> bool:
    if not isinstance(schema, Mapping) or "type" not in schema:
        return False
    kind = schema["type"]
    return any(_is_type(value, k) for k in ([kind] if isinstance(kind, str) else kind))


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{_json_type(value)} {text}"


def _where(path: str) -> str:
    return f"argument {path!r}: " if path else ""


def _check(schema: Mapping[str, Any] | bool, value: Any, path: str) -> str | None:
    """The first way ``value`` breaks the (JSON-schema subset) ``schema``, or ``None``."""
    if schema is True or schema == {}:
        return None
    if schema is False:
        return f"{_where(path)}not allowed"
    assert isinstance(schema, Mapping)
    kind = schema.get("type")
    if kind is not None:
        kinds: list[str] = [kind] if isinstance(kind, str) else list(kind)
        if not any(_is_type(value, k) for k in kinds):
            return f"{_where(path)}expected {' or '.join(kinds)}, got {_show(value)}"
    if "enum" in schema and not any(
        value == v and _json_type(value) == _json_type(v) for v in schema["enum"]
    ):
        options = ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
        return f"{_where(path)}expected one of {options}, got {_show(value)}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branches = [(s, _check(s, value, path)) for s in schema[key]]
            if all(error for _, error in branches):
                # a branch of the value's own type explains best (not "expected null")
                near = [e for s, e in branches if e and _same_type(s, value)]
                return near[0] if len(near) == 1 else " or ".join(e for _, e in branches if e)
    if isinstance(value, list | tuple):
        return _check_array(schema, value, path)
    if isinstance(value, Mapping):
        errors = _check_object(schema, value, path)
        return errors[0] if errors else None
    return None


def _check_array(schema: Mapping[str, Any], value: Sequence[Any], path: str) -> str | None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if (low is not None and len(value) < low) or (high is not None and len(value) > high):
        count = low if low == high else f"{low or 0}..{high if high is not None else ''}"
        return f"{_where(path)}expected {count} items, got {len(value)}"
    prefix = schema.get("prefixItems", [])
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else schema.get("items", True)
        error = _check(sub, item, f"{path}[{i}]")
        if error:
            return error
    return None


def _check_object(schema: Mapping[str, Any], value: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    properties: Mapping[str, Any] = schema.get("properties", {})
    prefix = f"{path}." if path else ""
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
        error = _check(sub, item, prefix + name)
        if error:
            errors.append(error)
    return errors


# ---------------------------------------------------------------- the tool


@final
@attrs.frozen
class ToolApprovalResponse:
    """An answer to a :class:`~rafrx.ToolApprovalRequestEvent`.

    An approver may return one instead of a bool (to tell the model why a
    call was denied), or a UI may push them into a ``Subject`` given as the
    approver.

    Example:
        >>> ToolApprovalResponse("call_1", False, reason="not on Fridays").approved
        False
    """

    call_id: str
    approved: bool
    reason: str | None = None


def _valid_name(instance: Any, attribute: Any, value: str) -> None:
    if not _NAME.match(value):
        raise ValueError(f"a tool name must match {_NAME.pattern}, got {value!r}")


def _positive(instance: Any, attribute: Any, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"timeout must be positive, got {value}")


@final
@attrs.frozen
class Tool:
    """A function the model can call.

    Build one with :func:`tool`, or by hand for a function taking keyword
    arguments that follow ``parameters`` (then validation uses the schema
    only and no conversion happens).

    Attributes:
        name: The name the model calls it by (``[A-Za-z0-9_-]{1,64}``).
        description: What it does, for the model.
        parameters: The JSON schema (an object schema) of its arguments.
        fn: The sync or async function.
        requires_approval: Whether a call must be approved before it runs.
        timeout: Seconds a call may take; ``None`` for no limit.

    Example:
        >>> def echo(text: str) -> str:
        ...     return text
        >>> t = Tool("echo", "Echo the text.", {"type": "object",
        ...     "properties": {"text": {"type": "string"}}, "required": ["text"]}, echo)
        >>> t.to_openai()["function"]["name"], t.validate({"text": "hi"})
        ('echo', {'text': 'hi'})
    """

    name: str = attrs.field(validator=_valid_name)
    description: str
    parameters: Mapping[str, Any] = attrs.field(hash=False)
    fn: Callable[..., Any] = attrs.field(repr=False)
    requires_approval: bool = False
    timeout: float | None = attrs.field(default=None, validator=_positive)
    _binder: _Binder | None = attrs.field(
        default=None, kw_only=True, alias="binder", repr=False, eq=False, hash=False
    )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, as if it were not decorated."""
        return self.fn(*args, **kwargs)

    # ------------------------------------------------------------ definitions

    def to_openai(self) -> dict[str, Any]:
        """The Chat Completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def to_anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages ``tools`` entry."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.parameters),
        }

    def to_responses(self) -> dict[str, Any]:
        """The OpenAI Responses API ``tools`` entry."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }

    # ------------------------------------------------------------ calling

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` (parsed JSON) and return them converted to Python values.

        Raises:
            InvalidToolArguments: listing every problem (missing required,
                unexpected, wrong type), each naming the argument.
        """
        args, kwargs = self._bind(arguments)
        if args:
            names = list(inspect.signature(self.fn).parameters)[: len(args)]
            kwargs = {**dict(zip(names, args, strict=True)), **kwargs}
        return kwargs

    def _bind(self, arguments: Any) -> tuple[list[Any], dict[str, Any]]:
        if not isinstance(arguments, Mapping):
            raise self._invalid(f"arguments must be a JSON object, got {_show(arguments)}")
        if self.parameters.get("type", "object") != "object":
            error = _check(self.parameters, arguments, "")
            problems = [error] if error else []
        else:
            problems = _check_object(self.parameters, arguments, "")
        if problems:
            raise self._invalid("; ".join(problems))
        if self._binder is None:
            return [], dict(arguments)
        try:
            return self._binder(arguments)
        except (TypeError, ValueError) as exc:
            raise self._invalid(f"{type(exc).__name__}: {exc}") from exc

    def _invalid(self, problem: str) -> InvalidToolArguments:
        return InvalidToolArguments(
            f"invalid arguments for tool {self.name!r}: {problem}", name=self.name
        )

    async def invoke(self, arguments: Any) -> Any:
        """Validate ``arguments``, run the function (in a thread if sync) and return its value.

        Raises:
            InvalidToolArguments: the arguments do not fit the schema.
            ToolTimeout: the call took longer than ``timeout`` (it is
                cancelled; a sync function's thread runs on to its end).
            ToolExecutionError: the function raised; the message names the
                exception type and message (a :class:`~rafrx.errors.ToolError`
                it raises is passed on as is).
        """
        args, kwargs = self._bind(arguments)
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                return await self._run(args, kwargs)
        except ToolError:
            raise
        except TimeoutError as exc:
            if deadline.expired():
                raise ToolTimeout(
                    f"tool {self.name!r} timed out after {self.timeout:g} s", name=self.name
                ) from exc
            raise self._raised(exc) from exc
        except Exception as exc:
            raise self._raised(exc) from exc

    def _raised(self, exc: Exception) -> ToolExecutionError:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return ToolExecutionError(f"tool {self.name!r} raised {detail}", name=self.name)

    async def _run(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        fn = self.fn
        if _is_async(fn):
            result = fn(*args, **kwargs)
        else:
            result = await asyncio.to_thread(functools.partial(fn, *args, **kwargs))
        if inspect.isawaitable(result):
            result = await result
        return result


def _is_async(fn: Callable[..., Any]) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    call = getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


# ---------------------------------------------------------------- @tool


def _function_schema(fn: Callable[..., Any], docs: Mapping[str, str]) -> tuple[Any, _Binder]:
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    properties: dict[str, Any] = {}
    converters: dict[str, _Converter] = {}
    required: list[str] = []
    positional: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"a tool cannot take *args or **kwargs: {fn.__name__}({param})")
        if param.kind is param.POSITIONAL_ONLY:
            positional.append(param.name)
        schema, convert = _type_schema(hints.get(param.name, Any), ())
        if docs.get(param.name):
            schema = {**schema, "description": docs[param.name]}
        if param.default is param.empty:
            required.append(param.name)
        else:
            default = _json_default_value(param.default)
            if default is not _NO_DEFAULT:
                schema = {**schema, "default": default}
        properties[param.name], converters[param.name] = schema, convert
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }

    def bind(arguments: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        values = {k: converters[k](v) for k, v in arguments.items()}
        args = []
        for name in positional:  # positional-only: in order, stopping at the first absent
            if name not in values:
                break
            args.append(values.pop(name))
        return args, values

    return schema, bind


_NO_DEFAULT = object()


def _json_default_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return _NO_DEFAULT
    return value


def _make_tool(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    requires_approval: bool,
    timeout: float | None,
) -> Tool:
    summary, docs = _parse_docstring(inspect.getdoc(fn))
    schema, binder = _function_schema(fn, docs)
    return Tool(
        name or str(getattr(fn, "__name__", type(fn).__name__)),
        summary if description is None else description,
        schema,
        fn,
        requires_approval,
        timeout,
        binder=binder,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    timeout: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a sync or async function; use bare or with options.

    Args:
        fn: The function (when used as ``@tool``).
        name: The tool's name; the function's name by default.
        description: Overrides the docstring's first paragraph.
        requires_approval: Ask the approver before each call.
        timeout: Seconds a call may take.

    Raises:
        TypeError: a parameter's type hint has no JSON schema, or the
            function takes ``*args`` / ``**kwargs``.

    Example:
        >>> @tool(requires_approval=True, timeout=5)
        ... async def delete_file(path: str) -> str:
        ...     '''Delete a file.'''
        ...     return f"deleted {path}"
        >>> delete_file.requires_approval, delete_file.timeout, delete_file.to_anthropic()["name"]
        (True, 5, 'delete_file')
    """
    if fn is not None:
        return _make_tool(fn, name, description, requires_approval, timeout)
    return lambda f: _make_tool(f, name, description, requires_approval, timeout)


def as_tool(value: Tool | Callable[..., Any]) -> Tool:
    """A :class:`Tool` as is, or a plain function made into one with :func:`tool`."""
    return value if isinstance(value, Tool) else tool(value)


# ---------------------------------------------------------------- results


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
