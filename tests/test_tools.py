"""Tests for rafrx.tools: schemas from type hints, validation, conversion, invocation."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import pathlib
import threading
import uuid
from typing import Annotated, Any, Literal, Optional

import attrs
import pytest

from rafrx.errors import InvalidToolArguments, ToolError, ToolExecutionError, ToolTimeout
from rafrx.tools import Tool, ToolApprovalResponse, as_tool, format_result, tool


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Point:
    """A point on the map.

    Args:
        x: Longitude.
        y: Latitude.
    """

    x: float
    y: float
    label: str = ""


@attrs.frozen
class Node:
    children: list[Node]


@attrs.frozen
class Route:
    start: Point
    stops: list[Point] = attrs.field(factory=list)


def schema_of(hint: Any) -> dict[str, Any]:
    def f(value):  # type: ignore[no-untyped-def]
        return value

    f.__annotations__ = {"value": hint}
    return dict(tool(f).parameters["properties"]["value"])


# ---------------------------------------------------------------- schemas


@pytest.mark.parametrize(
    ("hint", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (Any, {}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list, {"type": "array", "items": {}}),
        (tuple[str, ...], {"type": "array", "items": {"type": "string"}}),
        (
            tuple[str, int],
            {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "items": False,
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (dict, {"type": "object", "additionalProperties": {}}),
        (Optional[str], {"type": ["string", "null"]}),  # noqa: UP045 - the old spelling on purpose
        (int | None, {"type": ["integer", "null"]}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (
            list[int] | None,
            {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
        ),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, "x"], {"enum": [1, "x"]}),
        (Color, {"type": "string", "enum": ["red", "green"]}),
        (Level, {"type": "integer", "enum": [1, 2]}),
        (Annotated[str, "A city name."], {"type": "string", "description": "A city name."}),
        (datetime.datetime, {"type": "string", "format": "date-time"}),
        (datetime.date, {"type": "string", "format": "date"}),
        (None, {"type": "null"}),
    ],
)
def test_schema_of_each_supported_type(hint: Any, schema: dict[str, Any]) -> None:
    assert schema_of(hint) == schema


def test_attrs_class_becomes_an_object_schema_with_field_docs_and_required_fields() -> None:
    assert schema_of(Point) == {
        "description": "A point on the map.",
        "type": "object",
        "properties": {
            "x": {"type": "number", "description": "Longitude."},
            "y": {"type": "number", "description": "Latitude."},
            "label": {"type": "string", "default": ""},
        },
        "required": ["x", "y"],
        "additionalProperties": False,
    }


def test_nested_attrs_classes() -> None:
    schema = schema_of(Route)
    assert schema["properties"]["start"] == schema_of(Point)
    assert schema["properties"]["stops"] == {"type": "array", "items": schema_of(Point)}
    assert schema["required"] == ["start"]


def test_function_schema_description_and_defaults() -> None:
    @tool
    def search(
        query: str,
        limit: int = 10,
        color: Color = Color.RED,
        tags: list[str] | None = None,
        since: datetime.date | None = None,
    ) -> str:  # pragma: no cover - never called
        """Search the catalogue
        for products.

        A second paragraph is part of the description too.

        Args:
            query (str): What to look for; may span
                two lines.
            limit: How many results.

        Returns:
            The results.
        """
        return ""

    assert search.name == "search"
    assert search.description == (
        "Search the catalogue for products.\n\nA second paragraph is part of the description too."
    )
    assert search.parameters["type"] == "object"
    assert search.parameters["additionalProperties"] is False
    assert search.parameters["required"] == ["query"]
    props = search.parameters["properties"]
    assert props["query"] == {
        "type": "string",
        "description": "What to look for; may span two lines.",
    }
    assert props["limit"] == {"type": "integer", "description": "How many results.", "default": 10}
    assert props["color"] == {"type": "string", "enum": ["red", "green"], "default": "red"}
    assert props["since"] == {
        "anyOf": [{"type": "string", "format": "date"}, {"type": "null"}],
        "default": None,
    }
    assert props["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "default": None,
    }


def test_a_default_without_json_form_leaves_the_parameter_optional_with_no_schema_default() -> None:
    start = datetime.date(2024, 1, 1)

    @tool
    def report(since: datetime.date = start, kinds: Any = frozenset()) -> str:
        return f"{since.isoformat()} {sorted(kinds)}"

    props = report.parameters["properties"]
    assert props["since"] == {"type": "string", "format": "date"}  # no "default": 2024-01-01
    assert props["kinds"] == {}
    assert report.parameters["required"] == []
    assert asyncio.run(report.invoke({})) == "2024-01-01 []"
    assert asyncio.run(report.invoke({"since": "2024-02-03"})) == "2024-02-03 []"


def test_a_parameter_annotated_none_accepts_only_null() -> None:
    @tool
    def reset(token: None) -> str:
        return f"reset with {token}"

    assert reset.parameters["properties"]["token"] == {"type": "null"}
    assert asyncio.run(reset.invoke({"token": None})) == "reset with None"
    with pytest.raises(
        InvalidToolArguments, match="argument 'token': expected null, got integer 0"
    ):
        reset.validate({"token": 0})


def test_unsupported_types_fail_at_decoration() -> None:
    def f(data: bytes) -> None:  # pragma: no cover
        pass

    with pytest.raises(TypeError, match="unsupported type"):
        tool(f)


def test_variadic_parameters_are_rejected() -> None:
    def f(*args: int) -> None:  # pragma: no cover
        pass

    def g(**kwargs: int) -> None:  # pragma: no cover
        pass

    with pytest.raises(TypeError, match=r"\*args or \*\*kwargs"):
        tool(f)
    with pytest.raises(TypeError, match=r"\*args or \*\*kwargs"):
        tool(g)


def test_non_str_dict_keys_and_recursive_types_are_rejected() -> None:
    with pytest.raises(TypeError, match="dict keys must be str"):
        schema_of(dict[int, str])
    with pytest.raises(TypeError, match="recursive"):
        schema_of(Node)


def test_tool_names_must_suit_every_provider() -> None:
    with pytest.raises(ValueError, match="tool name"):
        Tool("has space", "", {"type": "object"}, print)
    with pytest.raises(ValueError, match="timeout"):
        Tool("ok", "", {"type": "object"}, print, timeout=0)


def test_decorator_options() -> None:
    @tool(name="rm", description="Remove a file.", requires_approval=True, timeout=2.5)
    async def remove(path: str) -> str:  # pragma: no cover
        """Ignored description."""
        return path

    assert (remove.name, remove.description) == ("rm", "Remove a file.")
    assert remove.requires_approval is True
    assert remove.timeout == 2.5


def test_decorated_tool_is_still_callable_and_as_tool_wraps_functions() -> None:
    @tool
    def double(n: int) -> int:
        return 2 * n

    def triple(n: int) -> int:
        return 3 * n

    assert double(4) == 8
    assert as_tool(double) is double
    assert as_tool(triple).name == "triple"
    assert as_tool(triple)(2) == 6


# ---------------------------------------------------------------- wire definitions


def test_provider_definitions() -> None:
    @tool
    def weather(city: str) -> str:  # pragma: no cover
        """Current weather."""
        return city

    params = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    assert weather.to_openai() == {
        "type": "function",
        "function": {"name": "weather", "description": "Current weather.", "parameters": params},
    }
    assert weather.to_anthropic() == {
        "name": "weather",
        "description": "Current weather.",
        "input_schema": params,
    }
    assert weather.to_responses() == {
        "type": "function",
        "name": "weather",
        "description": "Current weather.",
        "parameters": params,
        "strict": False,
    }


# ---------------------------------------------------------------- validation


@tool
def book(
    city: str,
    nights: int,
    price: float = 0.0,
    breakfast: bool = False,
    color: Color = Color.RED,
    level: Level = Level.LOW,
    where: Point | None = None,
    tags: list[str] = (),  # type: ignore[assignment]
    pair: tuple[str, int] | None = None,
    mode: Literal["fast", "slow"] = "fast",
) -> dict[str, Any]:
    """Book a room."""
    return {
        "city": city,
        "nights": nights,
        "price": price,
        "breakfast": breakfast,
        "color": color,
        "level": level,
        "where": where,
        "tags": tags,
        "pair": pair,
        "mode": mode,
    }


def problem(arguments: Any) -> str:
    with pytest.raises(InvalidToolArguments) as info:
        book.validate(arguments)
    message = str(info.value)
    assert message.startswith("invalid arguments for tool 'book': ")
    assert info.value.name == "book"
    return message.removeprefix("invalid arguments for tool 'book': ")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"city": "Oslo"}, "missing required argument 'nights'"),
        (
            {"city": "Oslo", "nights": 1, "pets": 2},
            "unexpected argument 'pets' (expected: city, nights, price, breakfast, color, "
            "level, where, tags, pair, mode)",
        ),
        ({"city": 3, "nights": 1}, "argument 'city': expected string, got integer 3"),
        ({"city": "Oslo", "nights": True}, "argument 'nights': expected integer, got boolean true"),
        ({"city": "Oslo", "nights": 1.5}, "argument 'nights': expected integer, got number 1.5"),
        ({"city": "Oslo", "nights": None}, "argument 'nights': expected integer, got null null"),
        (
            {"city": "Oslo", "nights": 1, "breakfast": 1},
            "argument 'breakfast': expected boolean, got integer 1",
        ),
        (
            {"city": "Oslo", "nights": 1, "price": "9"},
            "argument 'price': expected number, got string \"9\"",
        ),
        (
            {"city": "Oslo", "nights": 1, "color": "blue"},
            'argument \'color\': expected one of "red", "green", got string "blue"',
        ),
        (
            {"city": "Oslo", "nights": 1, "level": True},
            "argument 'level': expected integer, got boolean true",
        ),
        (
            {"city": "Oslo", "nights": 1, "mode": "warp"},
            'argument \'mode\': expected one of "fast", "slow", got string "warp"',
        ),
        (
            {"city": "Oslo", "nights": 1, "tags": ["a", 2]},
            "argument 'tags[1]': expected string, got integer 2",
        ),
        (
            {"city": "Oslo", "nights": 1, "where": {"x": 1}},
            "missing required argument 'where.y'",
        ),
        (
            {"city": "Oslo", "nights": 1, "where": {"x": 1, "y": "north"}},
            "argument 'where.y': expected number, got string \"north\"",
        ),
        (
            {"city": "Oslo", "nights": 1, "pair": ["a"]},
            "argument 'pair': expected 2 items, got 1",
        ),
        ([1, 2], "arguments must be a JSON object, got array [1, 2]"),
        (None, "arguments must be a JSON object, got null null"),
    ],
)
def test_validation_errors_name_the_argument(arguments: Any, message: str) -> None:
    assert problem(arguments) == message


def test_every_problem_is_reported_at_once() -> None:
    assert problem({"nights": "2", "extra": 1}) == (
        "missing required argument 'city'; argument 'nights': expected integer, "
        "got string \"2\"; unexpected argument 'extra' (expected: city, nights, price, "
        "breakfast, color, level, where, tags, pair, mode)"
    )


def test_long_values_are_shortened_in_messages() -> None:
    assert problem({"city": "x" * 100, "nights": "y" * 100}) == (
        f"argument 'nights': expected integer, got string \"{'y' * 36}..."
    )


def test_union_errors_list_the_alternatives() -> None:
    @tool
    def pick(value: int | str) -> str:  # pragma: no cover
        return str(value)

    with pytest.raises(InvalidToolArguments, match=r"expected integer, got boolean true or "):
        pick.validate({"value": True})


def test_validation_converts_json_to_python_values() -> None:
    converted = book.validate(
        {
            "city": "Oslo",
            "nights": 2.0,
            "price": 3,
            "color": "green",
            "level": 2,
            "where": {"x": 1, "y": 2.5, "label": "home"},
            "pair": ["a", 1],
        }
    )
    assert converted == {
        "city": "Oslo",
        "nights": 2,
        "price": 3.0,
        "color": Color.GREEN,
        "level": Level.HIGH,
        "where": Point(1.0, 2.5, "home"),
        "pair": ("a", 1),
    }
    assert type(converted["nights"]) is int
    assert type(converted["price"]) is float
    assert type(converted["where"].x) is float


def test_dates_convert_from_iso_strings() -> None:
    @tool
    def remind(at: datetime.datetime, on: datetime.date | None = None) -> None:  # pragma: no cover
        pass

    assert remind.validate({"at": "2024-05-01T10:30:00+00:00", "on": "2024-05-02"}) == {
        "at": datetime.datetime(2024, 5, 1, 10, 30, tzinfo=datetime.UTC),
        "on": datetime.date(2024, 5, 2),
    }
    with pytest.raises(InvalidToolArguments, match="ValueError: Invalid isoformat string"):
        remind.validate({"at": "next tuesday"})


def test_nested_attrs_conversion_and_unions() -> None:
    @tool
    def plan(route: Route, when: int | str | None) -> Route:  # pragma: no cover
        return route

    converted = plan.validate(
        {"route": {"start": {"x": 0, "y": 0}, "stops": [{"x": 1, "y": 2}]}, "when": "now"}
    )
    assert converted == {
        "route": Route(Point(0.0, 0.0), [Point(1.0, 2.0)]),
        "when": "now",
    }
    assert plan.validate({"route": {"start": {"x": 0, "y": 0}}, "when": None})["when"] is None


def test_hand_built_tool_validates_against_its_schema_only() -> None:
    calls: list[dict[str, Any]] = []

    def record(**kwargs: Any) -> str:
        calls.append(kwargs)
        return "ok"

    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }
    t = Tool("record", "Record it.", schema, record)
    with pytest.raises(InvalidToolArguments, match="missing required argument 'n'"):
        t.validate({})
    assert t.validate({"n": 1, "free": "extra allowed"}) == {"n": 1, "free": "extra allowed"}
    assert asyncio.run(t.invoke({"n": 2})) == "ok"
    assert calls == [{"n": 2}]


def test_positional_only_parameters() -> None:
    @tool
    def power(base: int, /, exponent: int = 2) -> int:
        return int(base**exponent)

    assert power.validate({"base": 3}) == {"base": 3}
    assert asyncio.run(power.invoke({"base": 3, "exponent": 3})) == 27


def test_an_omitted_positional_only_parameter_keeps_its_default_and_later_ones_go_by_name() -> None:
    @tool
    def power(base: int = 2, /, exponent: int = 2) -> int:
        return int(base**exponent)

    assert power.parameters["required"] == []
    assert power.validate({"exponent": 5}) == {"exponent": 5}
    assert asyncio.run(power.invoke({"exponent": 5})) == 32
    assert asyncio.run(power.invoke({"base": 3, "exponent": 3})) == 27


def test_python_values_without_json_form_are_named_by_their_type_in_errors() -> None:
    @tool
    def echo(text: str) -> str:  # pragma: no cover - never called
        return text

    loop: list[Any] = []
    loop.append(loop)  # json.dumps raises ValueError: circular reference
    for arguments, message in [
        ({"text": {1, 2}}, "argument 'text': expected string, got set {1, 2}"),
        ({"text": loop}, "argument 'text': expected string, got array [[...]]"),
        ({"text": b"hi"}, "argument 'text': expected string, got bytes b'hi'"),
        ({1, 2}, "arguments must be a JSON object, got set {1, 2}"),
    ]:
        with pytest.raises(InvalidToolArguments) as info:
            echo.validate(arguments)
        assert str(info.value) == f"invalid arguments for tool 'echo': {message}"


def test_hand_built_schemas_with_false_subschemas() -> None:
    """``false`` allows nothing: as ``items`` (an empty array only) or as an ``anyOf`` branch."""
    schema = {
        "type": "object",
        "properties": {
            "none": {"type": "array", "items": False},
            "either": {"anyOf": [False, {"type": "integer"}]},
        },
    }
    t = Tool("strict", "", schema, lambda **kw: kw)
    assert t.validate({"none": [], "either": 3}) == {"none": [], "either": 3}
    for arguments, message in [
        ({"none": ["x"]}, "argument 'none[0]': not allowed"),
        (
            {"either": "3"},
            "argument 'either': not allowed or argument 'either': expected integer, "
            'got string "3"',
        ),
    ]:
        with pytest.raises(InvalidToolArguments) as info:
            t.validate(arguments)
        assert str(info.value) == f"invalid arguments for tool 'strict': {message}"


def test_a_hand_built_schema_typed_with_a_list_is_checked_as_a_whole() -> None:
    schema = {
        "type": ["object"],
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }
    t = Tool("typed", "", schema, lambda **kw: kw)
    assert t.validate({"n": 1, "extra": True}) == {"n": 1, "extra": True}
    with pytest.raises(InvalidToolArguments) as info:
        t.validate({})
    assert str(info.value) == "invalid arguments for tool 'typed': missing required argument 'n'"
    with pytest.raises(InvalidToolArguments) as info:
        t.validate({"n": "1"})
    assert str(info.value) == (
        "invalid arguments for tool 'typed': argument 'n': expected integer, got string \"1\""
    )


# ---------------------------------------------------------------- invocation


@pytest.mark.asyncio
async def test_sync_tools_run_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()

    @tool
    def where() -> int:
        return threading.get_ident()

    assert await where.invoke({}) != loop_thread


@pytest.mark.asyncio
async def test_async_tools_run_on_the_loop() -> None:
    @tool
    async def where() -> int:
        await asyncio.sleep(0)
        return threading.get_ident()

    assert await where.invoke({}) == threading.get_ident()


@pytest.mark.asyncio
async def test_a_sync_tool_does_not_block_the_loop() -> None:
    release = threading.Event()

    @tool
    def wait() -> str:
        release.wait(5)
        return "released"

    task = asyncio.create_task(wait.invoke({}))
    await asyncio.sleep(0.01)
    assert not task.done()
    release.set()  # the loop is free to run this line while the tool blocks its thread
    assert await task == "released"


@pytest.mark.asyncio
async def test_invoke_converts_arguments_before_the_call() -> None:
    result = await book.invoke({"city": "Oslo", "nights": 1, "color": "green"})
    assert result["color"] is Color.GREEN


@pytest.mark.asyncio
async def test_invoke_validates_before_calling() -> None:
    called = False

    @tool
    def f(n: int) -> None:  # pragma: no cover
        nonlocal called
        called = True

    with pytest.raises(InvalidToolArguments):
        await f.invoke({"n": "1"})
    assert not called


@pytest.mark.asyncio
async def test_exceptions_become_tool_execution_errors_naming_type_and_message() -> None:
    @tool
    def fail(n: int) -> None:
        raise ValueError(f"bad n: {n}")

    @tool
    async def fail_async() -> None:
        raise KeyError("k")

    @tool
    def fail_bare() -> None:
        raise RuntimeError

    with pytest.raises(ToolExecutionError) as info:
        await fail.invoke({"n": 3})
    assert str(info.value) == "tool 'fail' raised ValueError: bad n: 3"
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ToolExecutionError, match=r"raised KeyError: 'k'"):
        await fail_async.invoke({})
    with pytest.raises(ToolExecutionError, match=r"^tool 'fail_bare' raised RuntimeError$"):
        await fail_bare.invoke({})


@pytest.mark.asyncio
async def test_a_tool_error_raised_by_the_tool_passes_as_is() -> None:
    @tool
    def picky() -> None:
        raise ToolError("try again with a smaller range")

    with pytest.raises(ToolError, match=r"^try again with a smaller range$"):
        await picky.invoke({})


@pytest.mark.asyncio
async def test_timeout_cancels_an_async_tool() -> None:
    cancelled = asyncio.Event()

    @tool(timeout=0.05)
    async def slow() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"  # pragma: no cover

    with pytest.raises(ToolTimeout, match=r"^tool 'slow' timed out after 0.05 s$"):
        await slow.invoke({})
    assert cancelled.is_set()


@pytest.mark.asyncio
async def test_timeout_of_a_sync_tool() -> None:
    release = threading.Event()

    @tool(timeout=0.05)
    def slow() -> str:
        release.wait(5)
        return "late"

    try:
        with pytest.raises(ToolTimeout):
            await slow.invoke({})
    finally:
        release.set()


@pytest.mark.asyncio
async def test_a_timeout_error_raised_by_the_tool_is_not_a_timeout_of_the_tool() -> None:
    @tool(timeout=5)
    async def upstream() -> None:
        raise TimeoutError("the upstream API timed out")

    with pytest.raises(ToolExecutionError, match="raised TimeoutError: the upstream API"):
        await upstream.invoke({})


@pytest.mark.asyncio
async def test_async_callable_objects_and_awaitable_results() -> None:
    class Counter:
        __name__ = "counter"

        async def __call__(self, n: int) -> int:
            return n + 1

    counter = Counter()
    t = Tool("counter", "", {"type": "object"}, counter)
    assert await t.invoke({"n": 1}) == 2


# ---------------------------------------------------------------- results


def test_format_result() -> None:
    assert format_result("plain text") == "plain text"
    assert format_result(42) == "42"
    assert format_result(None) == "null"
    assert format_result({"ü": [1, 2.5, True]}) == '{"ü": [1, 2.5, true]}'
    assert format_result(Color.GREEN) == '"green"'
    assert format_result(Point(1, 2)) == '{"x": 1, "y": 2, "label": ""}'
    assert format_result({"at": datetime.date(2024, 5, 1)}) == '{"at": "2024-05-01"}'
    assert format_result({3, 1, 2}) == "[1, 2, 3]"
    with pytest.raises(TypeError, match="bytes is not JSON serializable"):
        format_result(b"raw")


def test_format_result_of_dataclasses_paths_uuids_and_decimals() -> None:
    @dataclasses.dataclass
    class Hit:
        path: pathlib.PurePath
        score: decimal.Decimal

    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert format_result([Hit(pathlib.PurePosixPath("src/a.py"), decimal.Decimal("0.50"))]) == (
        '[{"path": "src/a.py", "score": "0.50"}]'
    )
    assert format_result({"id": ident}) == '{"id": "12345678-1234-5678-1234-567812345678"}'
    with pytest.raises(TypeError, match="type type is not JSON serializable"):
        format_result(Hit)  # the class, not an instance


def test_approval_response_value() -> None:
    answer = ToolApprovalResponse("c1", True)
    assert answer == ToolApprovalResponse("c1", True, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        answer.approved = False  # type: ignore[misc]


def test_an_omitted_positional_only_parameter_before_a_given_one_takes_its_default() -> None:
    """``{"height": 5}`` is valid (both are optional): ``width`` gets its default, positionally."""

    @tool
    def box(width: int = 1, height: int = 2, /) -> str:
        return f"{width}x{height}"

    assert box.parameters["required"] == []
    box.validate({"height": 5})  # accepted
    assert asyncio.run(box.invoke({"height": 5})) == "1x5"


def test_a_schema_typed_with_a_list_reports_every_problem_too() -> None:
    """``"type": ["object"]`` lists every problem, as ``"type": "object"`` does."""
    properties: dict[str, Any] = {"n": {"type": "integer"}}
    for kind in ("object", ["object"]):
        schema = {
            "type": kind,
            "properties": properties,
            "required": ["n"],
            "additionalProperties": False,
        }
        t = Tool("typed", "", schema, lambda **kw: kw)
        with pytest.raises(InvalidToolArguments) as info:
            t.validate({"m": 1})
        assert str(info.value) == (
            "invalid arguments for tool 'typed': missing required argument 'n'; "
            "unexpected argument 'm' (expected: n)"
        ), kind
