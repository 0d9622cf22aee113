"""Adversarial tests for rafrx.tools: schemas from signatures, validation, results.

The model's arguments are untrusted: whatever it sends must end as a value for
the tool or as an :class:`InvalidToolArguments`, never as another exception.
Schemas go into request bodies, so they must be strict JSON.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import functools
import json
import math
from collections.abc import Iterator
from typing import Annotated, Any, Literal, NamedTuple, Optional, TypedDict, Union

import attrs
import pytest
import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx import operators as ops
from rafrx._docstrings import parse_docstring
from rafrx.content import ToolCalledContent, ToolCallingContent
from rafrx.errors import InvalidToolArguments
from rafrx.response import AgentResponseResult
from rafrx.tools import Tool, format_result, tool


def strict_json(value: Any) -> Any:
    """``value`` through strict JSON (no NaN/Infinity), as an API would read it."""
    return json.loads(json.dumps(value, allow_nan=False))


# ---------------------------------------------------------------- fixtures (module level)


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mode(enum.StrEnum):
    FAST = "fast"
    SAFE = "safe"


class Size(enum.Enum):
    SMALL = (1, 2)
    LARGE = (3, 4)


class Color(str, enum.Enum):  # noqa: UP042 - the mixin form under test
    RED = "red"


@attrs.define
class Point:
    """A point on the plane.

    Args:
        x: Abscissa, positive.
        y: Ordinate.
    """

    x: int = attrs.field(validator=attrs.validators.gt(0))
    y: int = 0


@dataclasses.dataclass
class DataPoint:
    x: int


class TypedPoint(TypedDict):
    x: int


class TuplePoint(NamedTuple):
    x: int


# ---------------------------------------------------------------- schemas that work


def test_every_spelling_of_optional_gives_the_same_nullable_schema() -> None:
    def f(
        a: Optional[int] = None,  # noqa: UP045 - the spelling under test
        b: int | None = None,
        c: Union[int, None] = None,  # noqa: UP007 - the spelling under test
        d: None | int = None,  # noqa: RUF036 - the spelling under test
    ) -> str:
        return ""

    props = tool(f).parameters["properties"]
    expected = {"type": ["integer", "null"], "default": None}
    assert props == {"a": expected, "b": expected, "c": expected, "d": expected}
    assert tool(f).validate({"a": None, "b": 2.0}) == {"a": None, "b": 2}


def test_string_forward_references_resolve() -> None:
    def f(x: int | None = None, unit: Unit = Unit.C) -> str:
        return ""

    props = tool(f).parameters["properties"]
    assert props["x"] == {"type": ["integer", "null"], "default": None}
    assert props["unit"] == {
        "type": "string",
        "enum": ["celsius", "fahrenheit"],
        "default": "celsius",
    }


def test_annotated_descriptions_nest_and_the_docstring_wins() -> None:
    def f(
        a: Annotated[int, "From Annotated."],
        b: Annotated[str | None, "B from Annotated."] = None,
        tags: list[Annotated[str, "One tag."]] | None = None,
    ) -> str:
        """Do it.

        Args:
            a: From the docstring.
        """
        return ""

    props = tool(f).parameters["properties"]
    assert props["a"] == {"type": "integer", "description": "From the docstring."}
    assert props["b"] == {
        "type": ["string", "null"],
        "description": "B from Annotated.",
        "default": None,
    }
    assert props["tags"]["anyOf"][0]["items"] == {"type": "string", "description": "One tag."}


def test_enum_flavours_convert_to_members() -> None:
    def f(unit: Unit, level: Level, mode: Mode = Mode.SAFE) -> str:
        return f"{unit.name}{level.name}{mode.name}"

    t = tool(f)
    props = t.parameters["properties"]
    assert props["level"] == {"type": "integer", "enum": [1, 2]}
    assert props["mode"] == {"type": "string", "enum": ["fast", "safe"], "default": "safe"}
    assert t.validate({"unit": "fahrenheit", "level": 2, "mode": "fast"}) == {
        "unit": Unit.F,
        "level": Level.HIGH,
        "mode": Mode.FAST,
    }
    assert asyncio.run(t.invoke({"unit": "celsius", "level": 1})) == "CLOWSAFE"


def test_keyword_only_and_positional_only_parameters_bind_correctly() -> None:
    def f(a: int, /, b: int = 2, *, c: int, d: str = "x") -> str:
        return f"{a}-{b}-{c}-{d}"

    t = tool(f)
    assert t.parameters["required"] == ["a", "c"]
    assert asyncio.run(t.invoke({"c": 3, "a": 1.0})) == "1-2-3-x"
    assert asyncio.run(t.invoke({"d": "é", "c": 3, "b": 5, "a": 1})) == "1-5-3-é"


def test_bound_methods_classmethods_and_staticmethods() -> None:
    class Box:
        def __init__(self) -> None:
            self.k = 10

        def scale(self, n: int) -> int:
            """Scale n."""
            return n * self.k

        @classmethod
        def name_of(cls, n: int) -> str:
            return f"{cls.__name__}{n}"

        @staticmethod
        def twice(n: int) -> int:
            return 2 * n

    for method in (Box().scale, Box.name_of, Box.twice):
        t = tool(method)
        assert t.parameters["properties"] == {"n": {"type": "integer"}}
        assert t.parameters["required"] == ["n"]
    assert asyncio.run(tool(Box().scale).invoke({"n": 3})) == 30
    assert tool(Box().scale).description == "Scale n."


def test_async_tools_and_containers() -> None:
    @tool
    async def f(
        m: dict[str, list[tuple[int, str]]], fixed: tuple[int, str], many: tuple[float, ...]
    ) -> Any:
        return (m, fixed, many)

    out = asyncio.run(f.invoke({"m": {"a": [[1.0, "x"]]}, "fixed": [2, "y"], "many": [1, 2.5]}))
    assert out == ({"a": [(1, "x")]}, (2, "y"), (1.0, 2.5))
    assert f.parameters["properties"]["fixed"]["minItems"] == 2


def test_defaults_of_every_kind() -> None:
    sentinel = object()

    def f(
        a: list[int] = [1, 2],  # noqa: B006 - a mutable default under test
        b: dict[str, int] = {"k": 1},  # noqa: B006
        c: Any = sentinel,
        d: datetime.date = datetime.date(2024, 5, 1),
        e: bytes | None = None,
        g: str = "é\u2028",
        h: Unit = Unit.F,
    ) -> str:
        return ""

    # bytes has no schema: decorating fails, clearly, at decoration time
    with pytest.raises(TypeError, match="bytes"):
        tool(f)

    def g(
        a: list[int] = [1, 2],  # noqa: B006
        b: dict[str, int] = {"k": 1},  # noqa: B006
        c: Any = sentinel,
        d: datetime.date = datetime.date(2024, 5, 1),
        s: str = "é\u2028",
        h: Unit = Unit.F,
    ) -> str:
        return ""

    schema = tool(g).parameters
    assert schema["required"] == []
    props = schema["properties"]
    assert props["a"]["default"] == [1, 2]
    assert props["b"]["default"] == {"k": 1}
    assert "default" not in props["c"]  # no JSON form
    assert "default" not in props["d"]
    assert props["s"]["default"] == "é\u2028"
    assert props["h"]["default"] == "fahrenheit"
    assert strict_json(tool(g).to_openai()) == tool(g).to_openai()


def test_unsupported_parameter_types_fail_at_decoration_with_a_type_error() -> None:
    # NamedTuples, sets and complex numbers are not supported: a clear TypeError
    for hint in (TuplePoint, set[int], complex):

        def f(p: Any) -> str:
            return ""

        f.__annotations__["p"] = hint
        with pytest.raises(TypeError, match="unsupported type"):
            tool(f)


def test_generators_are_accepted_but_their_results_are_a_clear_error() -> None:
    def numbers(n: int) -> Iterator[int]:
        yield from range(n)

    called = asyncio.run(run_tools([calling("c1", "numbers", {"n": 2})], [tool(numbers)]))
    assert called["c1"].result is None
    assert "generator" in (called["c1"].error or "")


# ---------------------------------------------------------------- bad arguments


def kitchen_sink(
    flag: bool,
    n: int,
    x: float,
    unit: Unit,
    point: Point,
    tags: list[str],
    when: datetime.datetime | None = None,
    mode: Literal["a", "b"] = "a",
) -> str:
    return "ok"


SINK = tool(kitchen_sink)
GOOD = {"flag": True, "n": 1, "x": 1.5, "unit": "celsius", "point": {"x": 1}, "tags": []}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"flag": 1}, "argument 'flag': expected boolean, got integer 1"),
        ({"n": True}, "argument 'n': expected integer, got boolean true"),
        ({"n": 1.5}, "argument 'n': expected integer, got number 1.5"),
        ({"n": math.nan}, "argument 'n': expected integer, got number NaN"),
        ({"n": math.inf}, "argument 'n': expected integer, got number Infinity"),
        ({"n": "1"}, "argument 'n': expected integer, got string"),
        ({"x": False}, "argument 'x': expected number, got boolean false"),
        ({"unit": "kelvin"}, "argument 'unit': expected one of"),
        ({"point": {"x": "1"}}, "argument 'point.x': expected integer"),
        ({"point": {"x": 0}}, "ValueError: 'x' must be > 0"),
        ({"point": {"y": 1}}, "missing required argument 'point.x'"),
        ({"point": {"x": 1, "z": 2}}, "unexpected argument 'point.z' (expected: x, y)"),
        ({"point": [1]}, "argument 'point': expected object, got array"),
        ({"tags": ["a", 2]}, "argument 'tags[1]': expected string, got integer 2"),
        ({"tags": "a"}, "argument 'tags': expected array, got string"),
        ({"when": "tomorrow"}, "ValueError: Invalid isoformat string"),
        ({"mode": "c"}, 'expected one of "a", "b", got string "c"'),
        ({"extra": 1}, "unexpected argument 'extra'"),
    ],
)
def test_bad_arguments_are_invalid_tool_arguments(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidToolArguments) as info:
        SINK.validate({**GOOD, **change})
    assert message in str(info.value)
    assert info.value.name == "kitchen_sink"


def test_missing_keys_and_non_objects() -> None:
    with pytest.raises(InvalidToolArguments) as info:
        SINK.validate({})
    for name in ("flag", "n", "x", "unit", "point", "tags"):
        assert f"missing required argument {name!r}" in str(info.value)
    for bad in (None, [], "{}", 3, True):
        with pytest.raises(InvalidToolArguments, match="must be a JSON object"):
            SINK.validate(bad)


def test_whole_and_huge_numbers_that_fit() -> None:
    out = SINK.validate({**GOOD, "n": 2.0**70, "x": 2**80})
    assert out["n"] == 2**70
    assert isinstance(out["n"], int)
    assert out["x"] == float(2**80)
    assert isinstance(out["x"], float)


def json_value() -> st.SearchStrategy[Any]:
    scalars = (
        st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=6,
    )


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*GOOD, "when", "mode", "zz"]), json_value(), max_size=9))
def test_any_json_arguments_give_a_value_or_invalid_tool_arguments(
    arguments: dict[str, Any],
) -> None:
    try:
        out = SINK.validate(arguments)
    except InvalidToolArguments as exc:
        problem = str(exc)
    else:
        assert set(out) == set(arguments)
        assert isinstance(out["point"], Point)
        assert isinstance(out["unit"], Unit)
        return
    assert problem.startswith("invalid arguments for tool 'kitchen_sink': ")


@settings(max_examples=100, deadline=None)
@given(json_value())
def test_invoke_never_raises_anything_but_tool_errors_through_execute_tools(value: Any) -> None:
    called = asyncio.run(
        run_tools([calling("c1", "kitchen_sink", {**GOOD, "tags": value})], [SINK])
    )
    content = called["c1"]
    assert (content.result is None) != (content.error is None)
    if content.error is not None:
        assert "tags" in content.error


# ---------------------------------------------------------------- results


def test_format_result_of_many_types() -> None:
    assert format_result(None) == "null"
    assert format_result("") == ""
    assert format_result("é😀") == "é😀"
    assert format_result((1, "a")) == '[1, "a"]'
    assert format_result(Level.HIGH) == "2"
    assert (
        format_result({"p": Point(1, 2), "u": Unit.C}) == '{"p": {"x": 1, "y": 2}, "u": "celsius"}'
    )
    assert format_result(DataPoint(3)) == '{"x": 3}'
    assert format_result(frozenset({2, 1})) == "[1, 2]"
    assert format_result({1: "int keys"}) == '{"1": "int keys"}'
    big = "x" * 1_000_000
    assert format_result(big) is big
    for no_json in (b"bytes", ValueError("boom"), object(), 1j):
        with pytest.raises(TypeError, match=type(no_json).__name__):
            format_result(no_json)


def circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        pytest.param(b"\x00bytes", "bytes", id="bytes"),
        pytest.param(ValueError("boom"), "ValueError", id="exception-returned"),
        pytest.param(circular(), "Circular", id="circular"),
        pytest.param({(1, 2): "a"}, "keys must be", id="tuple-keys"),
    ],
)
def test_unserialisable_results_become_error_results_not_crashes(value: Any, needle: str) -> None:
    def give() -> Any:
        return value

    called = asyncio.run(run_tools([calling("c1", "give")], [tool(give)]))
    assert called["c1"].result is None
    assert needle in (called["c1"].error or "")


# ---------------------------------------------------------------- helpers


def calling(call_id: str, name: str, arguments: Any = None) -> ToolCallingContent:
    return ToolCallingContent(call_id, name, {} if arguments is None else arguments)


async def run_tools(
    calls: list[ToolCallingContent], tools: list[Tool]
) -> dict[str, ToolCalledContent]:
    done = asyncio.Event()
    items: list[AgentResponseResult] = []
    errors: list[Exception] = []

    def on_error(error: Exception) -> None:
        errors.append(error)
        done.set()

    source = reactivex.of(AgentResponseResult("r", "m", None, tuple(calls)))
    source.pipe(ops.execute_tools(tools)).subscribe(items.append, on_error, done.set)
    await asyncio.wait_for(done.wait(), 5)
    assert errors == []
    return {c.call_id: c for r in items for c in r.contents if isinstance(c, ToolCalledContent)}


# ================================================================ bugs (each test fails today)


def test_a_nan_or_infinite_default_is_left_out_of_the_schema() -> None:
    # Request bodies are strict JSON: NaN/Infinity in a tool schema makes the API
    # reject the whole request (or the body fails to serialize with allow_nan=False).
    def f(x: float = math.nan, y: float = math.inf) -> str:
        return ""

    t = tool(f)
    assert strict_json(t.to_openai()) == t.to_openai()
    assert t.parameters["required"] == []


def test_a_one_line_summary_ending_in_a_colon_is_the_description() -> None:
    def f(x: int) -> str:
        """Search the web for:"""
        return ""

    assert tool(f).description == "Search the web for:"


def test_a_functools_partial_becomes_a_tool_with_the_remaining_parameters() -> None:
    # rafrx._call explicitly supports callables behind functools.partial; tool() crashes
    # on them: typing.get_type_hints(partial) raises TypeError.
    def base(a: int, b: str) -> str:
        """Repeat b."""
        return b * a

    t = tool(functools.partial(base, b="x"), name="repeat")
    assert t.parameters["properties"]["a"] == {"type": "integer"}
    assert t.parameters["required"] == ["a"]
    assert asyncio.run(t.invoke({"a": 3.0})) == "xxx"


def test_a_callable_object_becomes_a_tool_typed_by_its_call_method() -> None:
    class Doubler:
        """Double n."""

        def __call__(self, n: int) -> int:
            return 2 * n

    t = tool(Doubler())
    assert t.parameters["properties"] == {"n": {"type": "integer"}}
    assert asyncio.run(t.invoke({"n": 2.0})) == 4


def test_a_huge_integer_for_a_float_parameter_is_invalid_arguments_not_overflow() -> None:
    def f(x: float) -> str:
        return repr(x)

    with pytest.raises(InvalidToolArguments, match="argument 'x'"):
        tool(f).validate({"x": 10**400})


def test_a_union_tries_the_next_member_when_a_conversion_fails() -> None:
    def f(when: datetime.date | str) -> str:
        return repr(when)

    t = tool(f)
    assert t.validate({"when": "2024-05-01"}) == {"when": datetime.date(2024, 5, 1)}
    assert t.validate({"when": "next week"}) == {"when": "next week"}


def test_a_literal_of_enum_members_uses_their_json_values() -> None:
    def f(unit: Literal[Unit.C]) -> str:
        return unit.name

    t = tool(f)
    assert strict_json(t.parameters)["properties"]["unit"] == {
        "type": "string",
        "enum": ["celsius"],
    }
    assert t.validate({"unit": "celsius"}) == {"unit": Unit.C}


def test_a_whole_float_is_an_integer_for_int_enums_and_int_literals_too() -> None:
    # "a float with no fraction is an integer" (rafrx._schema_check): `int` takes 1.0,
    # but an IntEnum or Literal[1, 2] rejects it ("expected one of 1, 2, got number 1.0").
    def f(level: Level, n: Literal[1, 2]) -> str:
        return ""

    assert tool(f).validate({"level": 1.0, "n": 2.0}) == {"level": Level.LOW, "n": 2}


def test_an_enum_with_tuple_values_accepts_the_json_arrays_its_schema_lists() -> None:
    def f(size: Size) -> str:
        return size.name

    t = tool(f)
    assert strict_json(t.parameters)["properties"]["size"]["enum"] == [[1, 2], [3, 4]]
    assert t.validate({"size": [3, 4]}) == {"size": Size.LARGE}


def test_a_deeply_nested_wrong_value_is_invalid_arguments_not_a_recursion_error() -> None:
    value: list[Any] = []
    node = value
    for _ in range(5000):
        node.append([])
        node = node[0]

    def f(n: int) -> str:
        return ""

    with pytest.raises(InvalidToolArguments, match="argument 'n': expected integer, got array"):
        tool(f).validate({"n": value})


def test_google_arg_types_with_nested_parentheses() -> None:
    _, docs = parse_docstring(
        """Search.

        Args:
            query (str): The query.
            opts (dict(str, int)): Options.
        """
    )
    assert docs == {"query": "The query.", "opts": "Options."}


def test_google_keyword_args_section_documents_keyword_only_parameters() -> None:
    def f(query: str, *, limit: int = 10) -> str:
        """Search.

        Args:
            query: The query.

        Keyword Args:
            limit: Max hits.
        """
        return ""

    assert tool(f).parameters["properties"]["limit"].get("description") == "Max hits."


def test_a_str_enum_result_is_sent_as_its_plain_value() -> None:
    # format_result returns a (str, Enum) member itself: str() of it is 'Color.RED',
    # so anything that renders the tool message as text shows the member, not "red".
    text = format_result(Color.RED)
    assert type(text) is str
    assert str(text) == "red"


def test_enum_dict_keys_in_a_result_are_sent_as_their_values() -> None:
    # Enum values are given a JSON form, but not enum keys: json.dumps never calls
    # `default` for keys, so {Unit.C: 1} raises TypeError.
    assert format_result({Unit.C: 1}) == '{"celsius": 1}'
