"""What a user expects of ``@tool`` definitions, judged against peers and provider rules.

Peers: pydantic-ai (``Tool``/``@agent.tool``), openai-agents-python
(``function_tool``), langchain (``@tool``). Provider rules: OpenAI function
calling (name pattern) and Anthropic ``input_schema``.
"""

import asyncio
import dataclasses
import datetime
import enum
import functools
import re
from typing import Any, Literal, TypedDict

import attrs
import jsonschema
import pytest

from rafrx.errors import InvalidToolArguments
from rafrx.tools import Tool, tool

# The name rule both OpenAI ("a-z, A-Z, 0-9, underscores and dashes, max length 64")
# and Anthropic (``^[a-zA-Z0-9_-]{1,64}$``) state for function/tool names.
PROVIDER_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


@attrs.frozen
class Spot:
    """A place.

    Args:
        lat: Latitude.
        lon: Longitude.
    """

    lat: float
    lon: float
    label: str = ""


@dataclasses.dataclass
class DataSpot:
    x: int


class DictSpot(TypedDict):
    x: int


def run(t: Tool, arguments: Any) -> Any:
    return asyncio.run(t.invoke(arguments))


# ---------------------------------------------------------------- what works


def test_generated_schemas_are_valid_json_schema_and_validation_agrees_with_jsonschema() -> None:
    """A schema rafrx sends must be valid JSON Schema (Anthropic: ``input_schema`` is a
    JSON Schema object; OpenAI: ``parameters`` is a JSON Schema object), each default
    must fit its own property, and ``Tool.validate`` should accept exactly what the
    schema the model saw accepts (checked against the ``jsonschema`` reference)."""

    @tool
    def plan(
        city: str,
        when: datetime.date,
        unit: Unit = Unit.C,
        mode: Literal["fast", "slow"] = "fast",
        days: int | None = None,
        tags: list[str] = [],  # noqa: B006 - a default under test
        pair: tuple[str, int] | None = None,
        weights: dict[str, float] | None = None,
        where: Spot | None = None,
        *,
        verbose: bool = False,
    ) -> str:
        """Plan a trip."""
        return city

    schema = plan.parameters
    validator_cls = jsonschema.Draft202012Validator
    validator_cls.check_schema(schema)
    for name, prop in schema["properties"].items():
        if "default" in prop:
            assert validator_cls(prop).is_valid(prop["default"]), name
    validator = validator_cls(schema)
    base = {"city": "Oslo", "when": "2024-05-01"}
    cases: list[Any] = [
        base,
        {**base, "unit": "fahrenheit", "mode": "slow", "days": 3, "verbose": True},
        {**base, "days": None, "pair": ["a", 1], "weights": {"x": 1.5}},
        {**base, "where": {"lat": 1, "lon": 2.5}, "tags": ["a", "b"]},
        {**base, "days": 2.0},  # a whole float is an integer in JSON Schema too
        {"city": "Oslo"},
        {**base, "extra": 1},
        {**base, "unit": "kelvin"},
        {**base, "days": "3"},
        {**base, "days": True},
        {**base, "pair": ["a", 1, 2]},
        {**base, "pair": [1, "a"]},
        {**base, "weights": {"x": "heavy"}},
        {**base, "where": {"lat": 1}},
        {**base, "where": {"lat": 1, "lon": 2, "alt": 3}},
        {**base, "tags": "a"},
        {**base, "verbose": 1},
    ]
    for case in cases:
        try:
            plan.validate(case)
            accepted = True
        except InvalidToolArguments:
            accepted = False
        assert accepted == validator.is_valid(case), case


def test_every_provider_definition_carries_the_same_object_schema_and_a_valid_name() -> None:
    """OpenAI Chat (``function.parameters``), Responses (flat ``parameters``) and
    Anthropic (``input_schema``) each get the same ``type: object`` schema, and the
    name satisfies both providers' ``^[a-zA-Z0-9_-]{1,64}$``."""

    @tool
    async def get_weather(city: str, unit: Unit = Unit.C) -> str:
        """Current weather."""
        return city

    chat, responses, anthropic = (
        get_weather.to_openai(),
        get_weather.to_responses(),
        get_weather.to_anthropic(),
    )
    assert chat["function"]["parameters"] == responses["parameters"]
    assert responses["parameters"] == anthropic["input_schema"]
    assert anthropic["input_schema"]["type"] == "object"
    assert set(anthropic) == {"name", "description", "input_schema"}
    assert PROVIDER_NAME.fullmatch(anthropic["name"])
    assert responses["strict"] is False  # rafrx's schema is not a strict one: say so


def test_a_tool_behind_a_functools_wraps_decorator_keeps_its_schema_and_is_awaited() -> None:
    """Users wrap tools in logging/retry decorators built with ``functools.wraps``
    (``*args, **kwargs`` wrappers); peers read the wrapped signature
    (``inspect.signature`` follows ``__wrapped__``)."""

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs)

        return wrapper

    @tool
    @logged
    async def double(n: int) -> int:
        """Double n."""
        return 2 * n

    assert double.name == "double"
    assert double.description == "Double n."
    assert double.parameters["properties"] == {"n": {"type": "integer"}}
    assert run(double, {"n": 4}) == 8


def test_names_the_providers_refuse_are_refused_when_the_tool_is_defined() -> None:
    """OpenAI and Anthropic reject the whole request for a bad tool name; failing at
    definition time, naming the rule, is what a user wants."""

    def météo(city: str) -> str:  # a valid Python identifier, an invalid tool name
        return city

    with pytest.raises(ValueError, match="tool name"):
        tool(météo)
    with pytest.raises(ValueError, match="tool name"):
        tool(météo, name="x" * 65)
    with pytest.raises(ValueError, match="tool name"):
        tool(lambda city: city)  # '<lambda>'
    with pytest.raises(ValueError, match="tool name"):
        tool(météo, name="weather.get")
    assert tool(météo, name="x" * 64).name == "x" * 64


# ---------------------------------------------------------------- gaps and bugs


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    """Python's ``$`` matches just before a final ``\\n``; ``^[a-zA-Z0-9_-]{1,64}$``
    (OpenAI/Anthropic) is a full-string rule, so ``"search\\n"`` must be refused
    like any other bad name (e.g. a name read from a config file with its newline)."""

    def search(query: str) -> str:
        return query

    with pytest.raises(ValueError, match="tool name"):
        Tool("search\n", "Search.", {"type": "object", "properties": {}}, search)
    with pytest.raises(ValueError, match="tool name"):
        tool(search, name="search\n")
