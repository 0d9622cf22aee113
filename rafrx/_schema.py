"""JSON schemas from Python type hints, with converters from validated JSON back to Python.

Each hint gives a pair: the JSON schema the model sees, and a function that
turns a value that passed that schema into the Python value the tool
expects (``int`` for whole floats, enum members, attrs instances, tuples,
dates). :func:`function_schema` does this for every parameter of a function
(also behind ``functools.partial``, or of a callable object) and returns a
binder that splits converted arguments into ``(args, kwargs)``.

Example:
    >>> import enum
    >>> class Unit(enum.Enum):
    ...     C = "celsius"
    ...     F = "fahrenheit"
    >>> schema, convert = type_schema(list[Unit] | None)
    >>> schema
    {'anyOf': [{'type': 'array', 'items': {'type': 'string', 'enum': ['celsius', 'fahrenheit']}}, {'type': 'null'}]}
    >>> convert(["celsius"])
    [<Unit.C: 'celsius'>]
    >>> def f(city: str, /, days: int = 1) -> None: ...
    >>> schema, bind = function_schema(f, {"city": "The city."})
    >>> schema["properties"]
    {'city': {'type': 'string', 'description': 'The city.'}, 'days': {'type': 'integer', 'default': 1}}
    >>> bind({"city": "Oslo", "days": 2.0})
    (['Oslo'], {'days': 2})
"""  # noqa: E501

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias, Union

import attrs
import typing_extensions

from rafrx._constraints import annotated_schema, bounded
from rafrx._docstrings import parse_docstring
from rafrx._pydantic import field_info, is_pydantic_class, pydantic_schema
from rafrx._schema_check import check, json_equal, json_type, show

__all__ = ["Binder", "ConversionError", "Converter", "function_schema", "type_schema"]

Converter: TypeAlias = Callable[[Any], Any]
"""Turns a value that passed a schema into the Python value of the type hint."""

Binder: TypeAlias = Callable[[Mapping[str, Any]], tuple[list[Any], dict[str, Any]]]
"""Turns validated arguments into a function's converted ``(args, kwargs)``.

Raises :class:`ConversionError` for an argument that fits its schema but not its type.
"""

_REQUIRED = object()  # a property without a default
_NO_DEFAULT = object()  # an optional property whose default has no JSON form

# What a converter raises for a value that fits the schema but not the type
# (an ISO string that is no date, an int too large for a float, a failed attrs validator).
_CONVERSION_ERRORS = (TypeError, ValueError, ArithmeticError)


class ConversionError(ValueError):
    """An argument fits its schema but has no value of its type; the message names it."""


def _identity(value: Any) -> Any:
    return value


def type_schema(hint: Any, seen: tuple[Any, ...] = ()) -> tuple[dict[str, Any], Converter]:
    """The JSON schema of a type hint, and the converter from validated JSON to it.

    Args:
        hint: The type hint (``Any``/``object``/no hint allow any value).
        seen: The classes and type aliases being expanded, to refuse recursive types.

    Raises:
        TypeError: the hint has no JSON schema (or is recursive, is a
            ``dict`` with non-``str`` keys, or is a ``Literal`` or enum with a
            value that has no JSON form).

    Example:
        >>> type_schema(tuple[int, str])[0]["prefixItems"]
        [{'type': 'integer'}, {'type': 'string'}]

        ``Literal`` and enum values are listed as JSON and converted back:

        >>> schema, convert = type_schema(Literal[1, 2])
        >>> schema, convert(2.0)
        ({'type': 'integer', 'enum': [1, 2]}, 2)
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is inspect.Parameter.empty or hint is object:
        return {}, _identity
    if isinstance(hint, _TYPE_ALIASES) or isinstance(origin, _TYPE_ALIASES):
        return _alias_schema(hint, seen)
    if origin is Annotated:
        schema, convert = type_schema(args[0], seen)
        return annotated_schema(schema, args[1:]), bounded(convert, args[1:])
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
        if any(isinstance(a, type) and is_pydantic_class(a) for a in args):
            return pydantic_schema(hint)  # pydantic picks the member that fits best
        return _union_schema(args, seen)
    if origin is Literal:
        return _choices_schema(args)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _choices_schema(list(hint))
    if origin in (list, Sequence, Iterable) or hint is list:
        item_schema, item = type_schema(args[0] if args else Any, seen)
        return {"type": "array", "items": item_schema}, lambda v: [item(x) for x in v]
    if origin is tuple or hint is tuple:
        return _tuple_schema(args or (Any, ...), seen)
    if origin in (dict, Mapping) or hint is dict:
        if args and args[0] is not str:
            raise TypeError(f"dict keys must be str in a tool schema, not {args[0]!r}")
        value_schema, value = type_schema(args[1] if args else Any, seen)
        schema = {"type": "object", "additionalProperties": value_schema}
        return schema, lambda v: {k: value(x) for k, x in v.items()}
    if isinstance(hint, type):
        if is_pydantic_class(hint):
            return pydantic_schema(hint)
        if attrs.has(hint) or dataclasses.is_dataclass(hint) or _is_typeddict(hint):
            return _class_schema(hint, seen)
    raise TypeError(f"unsupported type in a tool schema: {hint!r}")


#: What a ``type`` statement makes (Python 3.12), and its backport, a class of its own
#: on Pythons that have the statement but not yet every feature of the backport.
_TYPE_ALIASES: tuple[type, ...] = tuple(
    kind
    for kind in (typing_extensions.TypeAliasType, vars(typing).get("TypeAliasType"))
    if kind is not None
)


def _alias_schema(hint: Any, seen: tuple[Any, ...]) -> tuple[dict[str, Any], Converter]:
    """A ``type`` alias (``type Celsius = float``) as what it names; a generic one
    (``Pair[int]`` of ``type Pair[T] = tuple[T, T]``) with its arguments put in.

    Example:
        >>> T = typing.TypeVar("T")
        >>> Pair = typing_extensions.TypeAliasType("Pair", tuple[T, T], type_params=(T,))
        >>> type_schema(Pair[int])[0]["prefixItems"]
        [{'type': 'integer'}, {'type': 'integer'}]
    """
    alias: Any = hint if isinstance(hint, _TYPE_ALIASES) else typing.get_origin(hint)
    if alias in seen:
        raise TypeError(f"recursive types are not supported in a tool schema: {alias.__name__}")
    value = alias.__value__
    if alias is not hint:
        value = value[typing.get_args(hint)]
    return type_schema(value, (*seen, alias))


def function_schema(fn: Callable[..., Any], docs: Mapping[str, str]) -> tuple[Any, Binder]:
    """The object schema of a function's parameters, and the binder of its arguments.

    Parameters with a default are optional (the default is in the schema when
    it has a JSON form); positional-only parameters are passed positionally.
    For a ``functools.partial`` the parameters are those it leaves open (one
    it fixes by keyword is not the model's to set); a callable object's
    hints are its ``__call__``'s.

    Args:
        fn: The function.
        docs: Each parameter's description (from the docstring's ``Args:``).

    Raises:
        TypeError: a parameter's hint has no JSON schema, or ``fn`` takes
            ``*args`` / ``**kwargs``.

    Example:
        >>> def g(a: int, b: str) -> None: ...
        >>> schema, bind = function_schema(functools.partial(g, b="x"), {})
        >>> schema["properties"], bind({"a": 1.0})
        ({'a': {'type': 'integer'}}, ([], {'a': 1}))
    """
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(_hinted(fn), include_extras=True)
    fixed = _fixed_keywords(fn)
    positional = {  # positional-only parameters and their defaults, in order
        p.name: p.default for p in signature.parameters.values() if p.kind is p.POSITIONAL_ONLY
    }

    def properties() -> Iterator[tuple[str, Any, Any]]:
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                name = getattr(fn, "__name__", repr(fn))
                raise TypeError(f"a tool cannot take *args or **kwargs: {name}({param})")
            if param.name in fixed:
                continue
            hint = hints.get(param.name, Any)
            field = field_info(param.default)
            if field is not None:  # ``= Field(default=..., description=...)``
                hint = Annotated[hint, field]
            elif param.default is param.empty:
                field = _annotated_default(hint)  # ``Annotated[int, Field(default=3)]``
            if field is not None and not field.is_required():
                filled[param.name] = functools.partial(field.get_default, call_default_factory=True)
                default = (
                    _NO_DEFAULT if field.default_factory else _json_default_value(field.default)
                )
            elif field is not None or param.default is param.empty:
                default = _REQUIRED
            else:
                default = _json_default_value(param.default)
            yield param.name, hint, default

    filled: dict[str, Callable[[], Any]] = {}  # the defaults Python cannot apply: Field()s
    schema, converters = _object_schema(properties(), docs, ())

    def bind(arguments: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        values: dict[str, Any] = {}
        for name, value in arguments.items():
            try:
                values[name] = converters[name](value)
            except _CONVERSION_ERRORS as exc:
                problem = f"argument {name!r}: {type(exc).__name__}: {exc}"
                raise ConversionError(problem) from exc
        for name, make in filled.items():
            if name not in values:
                values[name] = make()
        # Positional-only, in order, up to the last one given; one left out before it
        # takes its default (the schema has made sure it has one).
        given = [i for i, name in enumerate(positional) if name in values]
        names = list(positional)[: given[-1] + 1] if given else []
        args = [values.pop(name) if name in values else positional[name] for name in names]
        return args, values

    return schema, bind


def _annotated_default(hint: Any) -> Any:
    """The pydantic ``Field()`` in an ``Annotated`` hint's metadata that has a default."""
    if typing.get_origin(hint) is Annotated:
        for item in typing.get_args(hint)[1:]:
            field = field_info(item)
            if field is not None and not field.is_required():
                return field
    return None


def _hinted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function whose type hints describe calling ``fn``.

    That is ``fn`` itself, a ``functools.partial``'s function, or a callable
    object's ``__call__``.
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn) or isinstance(fn, type):
        return fn
    call: Callable[..., Any] = type(fn).__call__
    return call


def _fixed_keywords(fn: Callable[..., Any]) -> set[str]:
    """The parameters a ``functools.partial`` fixes by keyword."""
    fixed: set[str] = set()
    while isinstance(fn, functools.partial):
        fixed |= fn.keywords.keys()
        fn = fn.func
    return fixed


def _object_schema(
    properties: Iterable[tuple[str, Any, Any]],
    docs: Mapping[str, str],
    seen: tuple[Any, ...],
) -> tuple[dict[str, Any], dict[str, Converter]]:
    """A closed object schema of ``(name, hint, default)`` triples, and each one's converter.

    ``default`` is ``_REQUIRED`` for a required property, ``_NO_DEFAULT`` for an
    optional one without a schema default, else the JSON default.
    """
    schemas: dict[str, Any] = {}
    converters: dict[str, Converter] = {}
    required: list[str] = []
    for name, hint, default in properties:
        schema, convert = type_schema(hint, seen)
        if docs.get(name):
            schema = {**schema, "description": docs[name]}
        if default is _REQUIRED:
            required.append(name)
        elif default is not _NO_DEFAULT:
            schema = {**schema, "default": default}
        schemas[name], converters[name] = schema, convert
    object_schema = {
        "type": "object",
        "properties": schemas,
        "required": required,
        "additionalProperties": False,
    }
    return object_schema, converters


def _class_schema(cls: type, seen: tuple[Any, ...]) -> tuple[dict[str, Any], Converter]:
    """An attrs class, a dataclass or a ``TypedDict`` as a closed object schema.

    The JSON object becomes an instance (a plain ``dict`` for a ``TypedDict``);
    its fields are described by the class docstring's ``Attributes:`` section.
    """
    if cls in seen:
        raise TypeError(f"recursive types are not supported in a tool schema: {cls.__name__}")
    hints = typing.get_type_hints(cls, include_extras=True)
    description, docs = parse_docstring(cls.__doc__)
    schema, converters = _object_schema(_fields(cls, hints), docs, (*seen, cls))
    if description and not description.startswith(f"{cls.__name__}("):  # not a generated one
        schema = {"description": description, **schema}
    make: Callable[..., Any] = dict if _is_typeddict(cls) else cls

    def convert(value: Mapping[str, Any]) -> Any:
        return make(**{k: converters[k](v) for k, v in value.items()})

    return schema, convert


def _is_typeddict(cls: type) -> bool:
    """Whether ``cls`` is a ``TypedDict``: typing's, or typing_extensions' (another before 3.13)."""
    return issubclass(cls, dict) and hasattr(cls, "__required_keys__")


def _qualifier(hint: Any) -> str | None:
    """``"Required"`` for ``Required[...]`` (typing's or typing_extensions'), and so on."""
    origin = typing.get_origin(hint)
    return getattr(origin, "_name", None) if origin is not None else None


def _fields(cls: type, hints: Mapping[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """The ``(name, hint, default)`` of each field a class is built from."""
    if attrs.has(cls):
        for field in attrs.fields(cls):
            if field.init:
                default = field.default
                if default is attrs.NOTHING:
                    default = _REQUIRED
                elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                    default = _NO_DEFAULT
                else:
                    default = _json_default_value(default)
                yield field.alias or field.name, hints.get(field.name, Any), default
    elif dataclasses.is_dataclass(cls):
        yield from _dataclass_fields(cls, hints)
    else:
        yield from _typeddict_keys(cls, hints)


def _dataclass_fields(cls: type, hints: Mapping[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """A dataclass's ``__init__`` parameters: its fields, and its ``InitVar``s."""
    regular = {item.name for item in dataclasses.fields(cls)}
    every: Mapping[str, dataclasses.Field[Any]] = cls.__dataclass_fields__  # type: ignore[attr-defined]
    for item in every.values():
        hint = hints.get(item.name, Any)
        if not item.init or not (item.name in regular or isinstance(hint, dataclasses.InitVar)):
            continue  # a ClassVar, or not an __init__ parameter
        if isinstance(hint, dataclasses.InitVar):
            hint = hint.type
        if item.default is not dataclasses.MISSING:
            default = _json_default_value(item.default)
        else:
            default = _REQUIRED if item.default_factory is dataclasses.MISSING else _NO_DEFAULT
        yield item.name, hint, default


def _typeddict_keys(cls: type, hints: Mapping[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """A ``TypedDict``'s keys; ``Required[...]``/``NotRequired[...]`` say what
    ``__required_keys__`` cannot under ``from __future__ import annotations`` before 3.12."""
    required_keys = cls.__required_keys__  # type: ignore[attr-defined]
    for name, hint in hints.items():
        required = name in required_keys
        while (qualifier := _qualifier(hint)) in ("Required", "NotRequired", "ReadOnly"):
            required = {"Required": True, "NotRequired": False}.get(qualifier, required)
            hint = typing.get_args(hint)[0]
        yield name, hint, _REQUIRED if required else _NO_DEFAULT


def _union_schema(args: tuple[Any, ...], seen: tuple[Any, ...]) -> tuple[dict[str, Any], Any]:
    members = [a for a in args if a is not type(None)]
    nullable = len(members) < len(args)
    parts = [type_schema(a, seen) for a in members]
    if len(parts) == 1:
        schema, inner = parts[0]
        if not nullable:
            return schema, inner
        return _with_null(schema), lambda v: None if v is None else inner(v)
    any_of = [s for s, _ in parts] + ([{"type": "null"}] if nullable else [])

    def convert(value: Any) -> Any:
        if value is None and nullable:
            return None
        failure: Exception | None = None
        for schema, inner in parts:  # the first member that takes the value
            if check(schema, value, "") is None:
                try:
                    return inner(value)
                except _CONVERSION_ERRORS as exc:  # "next week" for `date | str`
                    if failure is None:
                        failure = exc
        if failure is not None:
            raise failure
        return value

    return {"anyOf": any_of}, convert


def _tuple_schema(args: tuple[Any, ...], seen: tuple[Any, ...]) -> tuple[dict[str, Any], Any]:
    if len(args) == 2 and args[1] is Ellipsis:
        item_schema, item = type_schema(args[0], seen)
        return {"type": "array", "items": item_schema}, lambda v: tuple(item(x) for x in v)
    parts = [type_schema(a, seen) for a in args]
    schema = {
        "type": "array",
        "prefixItems": [s for s, _ in parts],
        "items": False,
        "minItems": len(parts),
        "maxItems": len(parts),
    }
    return schema, lambda v: tuple(c(x) for (_, c), x in zip(parts, v, strict=True))


def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    if set(schema) <= {"type", "description"} and isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _choices_schema(choices: Sequence[Any]) -> tuple[dict[str, Any], Converter]:
    """The schema of ``Literal`` values or enum members, and the converter back to them.

    The schema lists their JSON values (an enum member's value, a tuple as an
    array); a JSON value matches as :func:`~rafrx._schema_check.json_equal` says.
    """
    pairs = []
    for choice in choices:
        try:
            pairs.append((_as_json(choice), choice))
        except (TypeError, ValueError):
            raise TypeError(f"{choice!r} has no JSON form for a tool schema") from None
    values = [value for value, _ in pairs]
    schema: dict[str, Any] = {}
    kinds = {json_type(v) for v in values}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    schema["enum"] = values

    def convert(value: Any) -> Any:
        for json_value, choice in pairs:
            if json_equal(value, json_value):
                return choice
        raise ValueError(f"expected one of {values}, got {show(value)}")

    return schema, convert


def _as_json(value: Any) -> Any:
    """``value`` (an enum member as its value) as strict JSON gives it back.

    Raises:
        TypeError: it has no JSON form.
        ValueError: it holds NaN or an infinity.
    """
    if isinstance(value, enum.Enum):
        value = value.value
    return json.loads(json.dumps(value, allow_nan=False))


def _json_default_value(value: Any) -> Any:
    """A default as the schema gives it; ``_NO_DEFAULT`` when it has no (strict) JSON form."""
    try:
        return _as_json(value)
    except (TypeError, ValueError):
        return _NO_DEFAULT
