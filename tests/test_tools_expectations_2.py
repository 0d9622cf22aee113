"""What ``@tool`` should do next: dataclass, TypedDict and pydantic parameters, field
metadata, the JSON Schema validation keywords, Sphinx and NumPy docstrings, empty
schemas, pydantic results and OpenAI strict mode.

Peers (pydantic-ai, openai-agents-python, langchain) accept these types and
docstring styles; the provider rules are OpenAI function calling (strict mode)
and Anthropic ``input_schema``. Schemas are checked against the ``jsonschema``
reference (Draft 2020-12).
"""

import dataclasses
import datetime
import enum
import json
from typing import Annotated, Any, NotRequired, Required

import annotated_types as at
import jsonschema
import pydantic
import pytest
from typing_extensions import TypedDict  # pydantic wants it on Python < 3.12

from rafrx.errors import InvalidToolArguments
from rafrx.tools import Tool, format_result, tool
from tests.test_tools_expectations import run

Validator = jsonschema.Draft202012Validator


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


def accepts(t: Tool, arguments: Any) -> bool:
    try:
        t.validate(arguments)
    except InvalidToolArguments:
        return False
    return True


def invalid_message(t: Tool, arguments: Any) -> str:
    with pytest.raises(InvalidToolArguments) as caught:
        t.validate(arguments)
    return str(caught.value)


def walk(schema: Any) -> list[dict[str, Any]]:
    """Every subschema (dict) of ``schema``; the ``properties`` mappings themselves are
    not schemas, only their values are."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        found.append(schema)
        for key, value in schema.items():
            if key in ("properties", "$defs", "patternProperties"):
                for sub in value.values():
                    found += walk(sub)
            elif key in ("items", "additionalProperties", "not"):
                found += walk(value)
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
                for sub in value:
                    found += walk(sub)
    return found


def openai_strict_problems(schema: Any) -> list[str]:
    """Every object (sub)schema that breaks OpenAI strict mode's rules: each object
    sets ``additionalProperties: false`` and lists every property in ``required``;
    no ``default`` anywhere."""
    problems: list[str] = []
    for sub in walk(schema):
        if sub.get("type") == "object" or "properties" in sub:
            if sub.get("additionalProperties") is not False:
                problems.append(f"additionalProperties not false in {sub}")
            missing = set(sub.get("properties", {})) - set(sub.get("required", []))
            if missing:
                problems.append(f"not required: {sorted(missing)}")
        if "default" in sub:
            problems.append(f"default in {sub}")
    return problems


def nullable(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(nullable(s) for s in schema.get("anyOf", ()))


def hand_tool(properties: dict[str, Any], **extra: Any) -> Tool:
    """A tool built by hand (no binder) whose function returns its keyword arguments."""
    schema = {"type": "object", "properties": properties, "required": list(properties), **extra}
    Validator.check_schema(schema)
    return Tool("limits", "Check limits.", schema, lambda **kw: kw)


# ---------------------------------------------------------------- types used below


@dataclasses.dataclass
class Point:
    """A point on the map.

    Attributes:
        x: Horizontal position.
        y: Vertical position.
    """

    x: int
    y: int = 0


@dataclasses.dataclass
class Plain:
    a: int
    b: str


@dataclasses.dataclass
class Route:
    """A route.

    Args:
        start: Where it starts.
        stops: Where it stops.
    """

    start: Point
    stops: list[Point] = dataclasses.field(default_factory=list)
    name: str = "route"
    length: int = dataclasses.field(init=False, default=0)


@dataclasses.dataclass
class TreeNode:
    value: int
    children: "list[TreeNode]"


class Query(TypedDict):
    text: str
    limit: NotRequired[int]


class Options(TypedDict, total=False):
    key: Required[str]
    depth: int
    unit: Unit


class Author(pydantic.BaseModel):
    name: str = pydantic.Field(description="Full name.")


class Book(pydantic.BaseModel):
    """A book."""

    title: str = pydantic.Field(description="The book's title.")
    pages: int = pydantic.Field(ge=1)
    author: Author
    co_authors: list[Author]


class Order(pydantic.BaseModel):
    qty: int

    @pydantic.field_validator("qty")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("qty must be even")
        return value


class Category(pydantic.BaseModel):
    label: str
    parent: "Category | None" = None


class Stamp(pydantic.BaseModel):
    when: datetime.datetime
    user_name: str = pydantic.Field(alias="userName")


# ---------------------------------------------------------------- 1. dataclasses


def test_dataclass_parameter_gets_a_closed_object_schema_with_descriptions() -> None:
    @tool
    def place(p: Point) -> str:
        """Place a point."""
        return "ok"

    schema = place.parameters["properties"]["p"]
    Validator.check_schema(place.parameters)
    assert schema["type"] == "object"
    assert schema["description"] == "A point on the map."
    assert schema["required"] == ["x"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"x", "y"}
    assert schema["properties"]["x"]["type"] == "integer"
    assert schema["properties"]["x"]["description"] == "Horizontal position."
    assert schema["properties"]["y"]["description"] == "Vertical position."


def test_dataclass_auto_signature_docstring_is_not_a_description() -> None:
    assert Plain.__doc__ == "Plain(a: int, b: str)"  # what dataclass generates

    @tool
    def use(v: Plain) -> str:
        """Use it."""
        return "ok"

    schema = use.parameters["properties"]["v"]
    assert schema["type"] == "object"
    assert "description" not in schema
    assert schema["required"] == ["a", "b"]


def test_dataclass_default_factory_is_optional_and_init_false_field_is_absent() -> None:
    @tool
    def travel(route: Route) -> str:
        """Travel."""
        return "ok"

    schema = travel.parameters["properties"]["route"]
    assert set(schema["properties"]) == {"start", "stops", "name"}  # not `length`
    assert schema["required"] == ["start"]
    assert schema["description"] == "A route."
    assert schema["properties"]["start"]["description"] == "Where it starts."
    assert schema["properties"]["stops"]["type"] == "array"


def test_dataclass_arguments_become_instances_nested_and_in_lists() -> None:
    @tool
    def travel(route: Route, extra: list[Point]) -> Any:
        """Travel."""
        return route, extra

    route, extra = run(
        travel,
        {
            "route": {"start": {"x": 1.0, "y": 2}, "stops": [{"x": 3}]},
            "extra": [{"x": 4, "y": 5}, {"x": 6}],
        },
    )
    assert route == Route(start=Point(1, 2), stops=[Point(3, 0)])
    assert type(route.start) is Point
    assert type(route.start.x) is int
    assert all(type(s) is Point for s in route.stops)
    assert route.length == 0
    assert extra == [Point(4, 5), Point(6, 0)]


def test_dataclass_schema_is_enforced_by_validate_as_by_jsonschema() -> None:
    @tool
    def place(p: Point) -> str:
        """Place a point."""
        return "ok"

    validator = Validator(place.parameters)
    cases = [
        {"p": {"x": 1}},
        {"p": {"x": 1, "y": 2}},
        {"p": {"y": 2}},
        {"p": {"x": 1, "z": 0}},
        {"p": {"x": "1"}},
        {"p": [1, 2]},
    ]
    for case in cases:
        assert accepts(place, case) == validator.is_valid(case), case
    assert not accepts(place, {"p": {"x": 1, "z": 0}})


def test_recursive_dataclass_is_refused_at_decoration() -> None:
    def fine(p: Point) -> str:
        return "ok"

    def bad(node: TreeNode) -> str:
        return "no"

    assert tool(fine).parameters["properties"]["p"]["type"] == "object"
    with pytest.raises(TypeError, match=r"(?i)recurs|cycl"):
        tool(bad)


# ---------------------------------------------------------------- 2. TypedDict


def test_typeddict_schema_required_follows_notrequired() -> None:
    @tool
    def search(query: Query) -> str:
        """Search."""
        return "ok"

    schema = search.parameters["properties"]["query"]
    Validator.check_schema(search.parameters)
    assert schema["type"] == "object"
    assert schema["properties"] == {"text": {"type": "string"}, "limit": {"type": "integer"}}
    assert schema["required"] == ["text"]
    assert schema["additionalProperties"] is False


def test_typeddict_total_false_with_required_key() -> None:
    @tool
    def configure(options: Options) -> str:
        """Configure."""
        return "ok"

    schema = configure.parameters["properties"]["options"]
    assert schema["required"] == ["key"]
    assert set(schema["properties"]) == {"key", "depth", "unit"}
    assert schema["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]
    assert schema["additionalProperties"] is False


def test_typeddict_value_is_a_plain_dict_with_converted_values() -> None:
    @tool
    def configure(options: Options) -> Any:
        """Configure."""
        return options

    value = run(configure, {"options": {"key": "k", "depth": 2.0, "unit": "fahrenheit"}})
    assert type(value) is dict
    assert value == {"key": "k", "depth": 2, "unit": Unit.F}
    assert type(value["depth"]) is int
    assert value["unit"] is Unit.F


def test_typeddict_validation_rejects_missing_and_unknown_keys() -> None:
    @tool
    def search(query: Query) -> str:
        """Search."""
        return "ok"

    assert accepts(search, {"query": {"text": "a"}})
    assert accepts(search, {"query": {"text": "a", "limit": 3}})
    assert not accepts(search, {"query": {"limit": 3}})
    assert not accepts(search, {"query": {"text": "a", "page": 2}})
    assert not accepts(search, {"query": {"text": "a", "limit": "3"}})


# ---------------------------------------------------------------- 3. pydantic models


def test_pydantic_model_schema_is_inlined_and_untitled() -> None:
    @tool
    def add(book: Book) -> str:
        """Add a book."""
        return "ok"

    author = {
        "type": "object",
        "properties": {"name": {"type": "string", "description": "Full name."}},
        "required": ["name"],
    }
    assert add.parameters["properties"]["book"] == {
        "description": "A book.",
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "The book's title."},
            "pages": {"type": "integer", "minimum": 1},
            "author": author,
            "co_authors": {"type": "array", "items": author},
        },
        "required": ["title", "pages", "author", "co_authors"],
    }
    assert add.parameters["required"] == ["book"]


def test_pydantic_schema_has_no_refs_no_defs_and_no_auto_titles() -> None:
    @tool
    def add(book: Book) -> str:
        """Add a book."""
        return "ok"

    Validator.check_schema(add.parameters)
    text = json.dumps(add.parameters)
    assert "$ref" not in text
    assert "$defs" not in text
    assert all("title" not in sub for sub in walk(add.parameters))
    assert "title" in add.parameters["properties"]["book"]["properties"]  # the field stays


def test_pydantic_argument_becomes_a_model_instance() -> None:
    @tool
    def add(book: Book) -> Any:
        """Add a book."""
        return book

    book = run(
        add,
        {
            "book": {
                "title": "Dune",
                "pages": 412,
                "author": {"name": "Frank Herbert"},
                "co_authors": [{"name": "A"}],
            }
        },
    )
    assert type(book) is Book
    assert type(book.author) is Author
    assert book.author.name == "Frank Herbert"
    assert type(book.co_authors[0]) is Author
    assert book.pages == 412


def test_pydantic_schema_constraint_is_enforced() -> None:
    @tool
    def add(book: Book) -> str:
        """Add a book."""
        return "ok"

    good = {"title": "T", "pages": 1, "author": {"name": "N"}, "co_authors": []}
    assert accepts(add, {"book": good})
    message = invalid_message(add, {"book": {**good, "pages": 0}})
    assert "pages" in message


def test_pydantic_validator_failure_is_invalid_arguments_naming_the_parameter() -> None:
    @tool
    def place(order: Order) -> int:
        """Place it."""
        return order.qty

    assert run(place, {"order": {"qty": 4}}) == 4
    with pytest.raises(InvalidToolArguments) as caught:
        run(place, {"order": {"qty": 3}})
    assert "order" in str(caught.value)


def test_recursive_pydantic_model_is_refused_at_decoration() -> None:
    def fine(order: Order) -> str:
        return "ok"

    def bad(category: Category) -> str:
        return "no"

    assert tool(fine).parameters["properties"]["order"]["type"] == "object"
    with pytest.raises(TypeError, match=r"(?i)recurs|cycl"):
        tool(bad)


# ---------------------------------------------------------------- 4. Annotated metadata


def test_annotated_pydantic_field_gives_description_and_bounds() -> None:
    @tool
    def pick(n: Annotated[int, pydantic.Field(description="How many.", ge=1, le=10)]) -> int:
        """Pick."""
        return n

    assert pick.parameters["properties"]["n"] == {
        "type": "integer",
        "description": "How many.",
        "minimum": 1,
        "maximum": 10,
    }
    assert pick.parameters["required"] == ["n"]


def test_annotated_types_number_bounds_map_to_json_schema() -> None:
    @tool
    def f(
        ratio: Annotated[float, at.Gt(0), at.Lt(1)],
        step: Annotated[int, at.Ge(0), at.Le(9), at.MultipleOf(3)],
    ) -> str:
        """F."""
        return "ok"

    props = f.parameters["properties"]
    assert props["ratio"] == {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
    assert props["step"] == {"type": "integer", "minimum": 0, "maximum": 9, "multipleOf": 3}


def test_annotated_lengths_map_to_string_and_array_keywords() -> None:
    @tool
    def f(
        code: Annotated[str, at.MinLen(2), at.MaxLen(5)],
        tags: Annotated[list[str], at.MinLen(1), at.MaxLen(3)],
    ) -> str:
        """F."""
        return "ok"

    props = f.parameters["properties"]
    assert props["code"] == {"type": "string", "minLength": 2, "maxLength": 5}
    assert props["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1,
        "maxItems": 3,
    }


def test_annotated_field_pattern_and_lengths() -> None:
    @tool
    def f(
        zip_code: Annotated[str, pydantic.Field(pattern=r"^\d+$", min_length=4, max_length=8)],
    ) -> str:
        """F."""
        return zip_code

    assert f.parameters["properties"]["zip_code"] == {
        "type": "string",
        "pattern": r"^\d+$",
        "minLength": 4,
        "maxLength": 8,
    }
    Validator.check_schema(f.parameters)


def test_annotated_string_is_still_the_description() -> None:
    @tool
    def f(n: Annotated[int, "How many.", at.Ge(1)]) -> int:
        """F."""
        return n

    assert f.parameters["properties"]["n"] == {
        "type": "integer",
        "description": "How many.",
        "minimum": 1,
    }


def test_annotated_bounds_are_enforced_on_invoke() -> None:
    @tool
    def pick(n: Annotated[int, pydantic.Field(ge=1, le=10)]) -> int:
        """Pick."""
        return n

    assert run(pick, {"n": 10}) == 10
    with pytest.raises(InvalidToolArguments, match="argument 'n'"):
        run(pick, {"n": 11})
    with pytest.raises(InvalidToolArguments, match="argument 'n'"):
        run(pick, {"n": 0})


# ---------------------------------------------------------------- 5. Field as default


def test_field_default_gives_schema_default_and_description() -> None:
    @tool
    def f(n: int = pydantic.Field(default=3, description="N.")) -> int:
        """F."""
        return n

    assert f.parameters["properties"]["n"] == {"type": "integer", "default": 3, "description": "N."}
    assert f.parameters["required"] == []


def test_field_default_is_the_value_passed_not_the_fieldinfo() -> None:
    @tool
    def f(n: int = pydantic.Field(default=3, description="N.")) -> Any:
        """F."""
        return n

    assert run(f, {}) == 3
    assert run(f, {"n": 5}) == 5
    assert f.validate({}).get("n", 3) == 3


def test_field_default_factory_is_optional_and_fresh_each_call() -> None:
    @tool
    def f(tags: list[str] = pydantic.Field(default_factory=list)) -> Any:  # noqa: B008
        """F."""
        tags.append("seen")
        return list(tags)

    assert "default" not in f.parameters["properties"]["tags"]
    assert f.parameters["properties"]["tags"]["type"] == "array"
    assert f.parameters["required"] == []
    assert run(f, {}) == ["seen"]
    assert run(f, {}) == ["seen"]  # a fresh list, not one shared between calls


def test_field_without_default_is_required() -> None:
    @tool
    def f(q: str = pydantic.Field(description="x")) -> str:
        """F."""
        return q

    assert f.parameters["properties"]["q"] == {"type": "string", "description": "x"}
    assert f.parameters["required"] == ["q"]
    assert not accepts(f, {})


# ---------------------------------------------------------------- 6. validation keywords


def test_maximum_is_enforced_and_named() -> None:
    t = hand_tool({"n": {"type": "integer", "maximum": 10}})
    assert t.validate({"n": 10}) == {"n": 10}
    message = invalid_message(t, {"n": 11})
    assert "argument 'n'" in message
    assert "10" in message


def test_minimum_is_enforced_and_named() -> None:
    t = hand_tool({"n": {"type": "number", "minimum": 5}})
    assert accepts(t, {"n": 5})
    message = invalid_message(t, {"n": 4.5})
    assert "argument 'n'" in message
    assert "5" in message.replace("4.5", "")


def test_exclusive_bounds_are_enforced() -> None:
    t = hand_tool({"x": {"type": "number", "exclusiveMinimum": 2, "exclusiveMaximum": 7}})
    assert accepts(t, {"x": 2.5})
    assert accepts(t, {"x": 6.99})
    assert "argument 'x'" in invalid_message(t, {"x": 2})
    assert "argument 'x'" in invalid_message(t, {"x": 7})


def test_multiple_of_is_enforced() -> None:
    t = hand_tool({"n": {"type": "integer", "multipleOf": 5}})
    assert accepts(t, {"n": 15})
    assert accepts(t, {"n": 0})
    message = invalid_message(t, {"n": 12})
    assert "argument 'n'" in message
    assert "5" in message


def test_string_lengths_count_code_points() -> None:
    t = hand_tool({"s": {"type": "string", "maxLength": 1}})
    assert accepts(t, {"s": "\u00e9"})  # é
    assert accepts(t, {"s": "\U0001f600"})  # one code point, two UTF-16 units
    assert "argument 's'" in invalid_message(t, {"s": "ab"})
    u = hand_tool({"s": {"type": "string", "minLength": 2}})
    assert not accepts(u, {"s": "\U0001f600"})
    assert accepts(u, {"s": "\u00e9\u00e9"})


def test_pattern_is_a_search() -> None:
    t = hand_tool({"code": {"type": "string", "pattern": "[0-9]{3}"}})
    assert accepts(t, {"code": "ab123cd"})
    assert "argument 'code'" in invalid_message(t, {"code": "ab12"})
    u = hand_tool({"code": {"type": "string", "pattern": "^[a-z]+$"}})
    assert accepts(u, {"code": "abc"})
    assert not accepts(u, {"code": "abc1"})


def test_const_is_enforced() -> None:
    t = hand_tool({"version": {"const": "v1"}})
    assert accepts(t, {"version": "v1"})
    assert "argument 'version'" in invalid_message(t, {"version": "v2"})


def test_min_and_max_properties_are_enforced() -> None:
    t = hand_tool(
        {
            "labels": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "minProperties": 1,
                "maxProperties": 2,
            }
        }
    )
    assert accepts(t, {"labels": {"a": "x"}})
    assert accepts(t, {"labels": {"a": "x", "b": "y"}})
    assert "argument 'labels'" in invalid_message(t, {"labels": {}})
    assert "argument 'labels'" in invalid_message(t, {"labels": {"a": "x", "b": "y", "c": "z"}})


def test_min_properties_on_the_arguments_object() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "minProperties": 1,
    }
    t = Tool("either", "Either.", schema, lambda **kw: kw)
    assert accepts(t, {"a": "x"})
    assert not accepts(t, {})


def test_all_of_is_enforced() -> None:
    t = hand_tool({"n": {"allOf": [{"type": "integer"}, {"minimum": 1}]}})
    assert accepts(t, {"n": 1})
    assert "argument 'n'" in invalid_message(t, {"n": 0})
    assert not accepts(t, {"n": "1"})


def test_unique_items_is_enforced_with_json_equality() -> None:
    t = hand_tool({"ids": {"type": "array", "items": {}, "uniqueItems": True}})
    assert accepts(t, {"ids": [1, 2]})
    assert accepts(t, {"ids": [1, True]})  # a boolean is never a number
    assert "argument 'ids'" in invalid_message(t, {"ids": [1, 2, 1]})
    assert not accepts(t, {"ids": [1, 1.0]})  # the same JSON number


def test_keywords_are_enforced_by_invoke_too() -> None:
    t = hand_tool({"n": {"type": "integer", "maximum": 10}})
    assert run(t, {"n": 3}) == {"n": 3}
    with pytest.raises(InvalidToolArguments, match="argument 'n'"):
        run(t, {"n": 11})


def test_validation_agrees_with_jsonschema_on_every_keyword() -> None:
    t = hand_tool(
        {
            "n": {"type": "integer", "minimum": 0, "maximum": 100, "multipleOf": 2},
            "x": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "s": {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[a-z\u00e9]"},
            "v": {"const": [1, "a"]},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "m": {
                "type": "object",
                "maxProperties": 1,
                "additionalProperties": {"type": "integer"},
            },
            "k": {"allOf": [{"type": "integer"}, {"maximum": 5}]},
        }
    )
    validator = Validator(t.parameters)
    base = {"n": 2, "x": 0.5, "s": "ab", "v": [1, "a"], "tags": ["a"], "m": {}, "k": 5}
    cases = [
        base,
        {**base, "n": 101},
        {**base, "n": 3},
        {**base, "n": -2},
        {**base, "x": 0},
        {**base, "x": 1.0},
        {**base, "s": ""},
        {**base, "s": "abcd"},
        {**base, "s": "\u00e9\u00e9\u00e9"},
        {**base, "s": "1ab"},
        {**base, "v": [1, "b"]},
        {**base, "v": [1.0, "a"]},
        {**base, "tags": ["a", "a"]},
        {**base, "m": {"a": 1, "b": 2}},
        {**base, "k": 6},
    ]
    for case in cases:
        assert accepts(t, case) == validator.is_valid(case), case


# ---------------------------------------------------------------- 7. docstrings


def test_sphinx_docstring_fills_descriptions() -> None:
    @tool
    def forecast(city: str, days: int = 1, unit: str = "C") -> str:
        """Forecast the weather.

        :param city: The city's
            name.
        :param int days: How many days.
        :type days: int
        :param unit: The unit.
        :type unit: str
        :returns: The forecast.
        """
        return city

    props = forecast.parameters["properties"]
    assert forecast.description == "Forecast the weather."
    assert props["city"]["description"] == "The city's name."
    assert props["days"]["description"] == "How many days."
    assert props["unit"]["description"] == "The unit."


def test_numpy_docstring_fills_descriptions() -> None:
    @tool
    def forecast(city: str, days: int = 1) -> str:
        """Forecast the weather.

        Parameters
        ----------
        city : str
            The city's name.
        days : int, optional
            How many.

        Returns
        -------
        str
            The forecast.
        """
        return city

    props = forecast.parameters["properties"]
    assert forecast.description == "Forecast the weather."
    assert props["city"]["description"] == "The city's name."
    assert props["days"]["description"] == "How many."
    assert set(props) == {"city", "days"}


def test_description_keeps_every_paragraph_before_the_args_section() -> None:
    @tool
    def search(q: str) -> str:
        """Search the web.

        Use it for recent events.

        Args:
            q: Query.
        """
        return q

    assert search.description == "Search the web.\n\nUse it for recent events."
    assert search.parameters["properties"]["q"]["description"] == "Query."


def test_description_joins_lines_within_a_paragraph_and_stops_at_a_field_list() -> None:
    @tool
    def search(q: str) -> str:
        """Search the web
        for pages.

        Prefer it over guessing,
        always.

        :param q: Query.
        """
        return q

    assert search.description == "Search the web for pages.\n\nPrefer it over guessing, always."
    assert search.parameters["properties"]["q"]["description"] == "Query."


def test_description_stops_at_a_doctest() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Exact for integers.

        >>> add(1, 2)
        3
        """
        return a + b

    assert add.description == "Add two numbers.\n\nExact for integers."


def test_google_docstring_keeps_working_with_the_other_sections() -> None:
    @tool
    def forecast(city: str, days: int = 1) -> str:
        """Forecast the weather.

        Args:
            city (str): The city's
                name.
            days: How many days.

        Returns:
            The forecast.
        """
        return city

    props = forecast.parameters["properties"]
    assert forecast.description == "Forecast the weather."
    assert props["city"]["description"] == "The city's name."
    assert props["days"]["description"] == "How many days."


# ---------------------------------------------------------------- 8. empty parameters


def test_an_empty_hand_built_schema_is_sent_as_an_empty_object_schema() -> None:
    t = Tool("ping", "Ping.", {}, lambda: "pong")
    empty = {"type": "object", "properties": {}}
    assert t.to_anthropic()["input_schema"] == empty
    assert t.to_openai()["function"]["parameters"] == empty
    assert t.parameters == {}
    assert run(t, {}) == "pong"


def test_a_decorated_tool_without_parameters_keeps_its_schema() -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    expected = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    assert ping.parameters == expected
    assert ping.to_anthropic()["input_schema"] == expected
    assert ping.to_openai()["function"]["parameters"] == expected


# ---------------------------------------------------------------- 9. pydantic results


def test_a_pydantic_result_is_its_json_dump_by_alias() -> None:
    stamp = Stamp(when=datetime.datetime(2024, 5, 1, 12, 30), userName="ada")
    assert json.loads(format_result(stamp)) == {"when": "2024-05-01T12:30:00", "userName": "ada"}


def test_pydantic_results_inside_containers_and_dataclasses() -> None:
    @dataclasses.dataclass
    class Holder:
        stamp: Stamp

    stamp = Stamp(when=datetime.datetime(2024, 5, 1), userName="ada")
    dumped = {"when": "2024-05-01T00:00:00", "userName": "ada"}
    assert json.loads(format_result([stamp, stamp])) == [dumped, dumped]
    assert json.loads(format_result({"first": stamp})) == {"first": dumped}
    assert json.loads(format_result(Holder(stamp))) == {"stamp": dumped}


# ---------------------------------------------------------------- 10. strict mode


def test_strict_flag_reaches_both_openai_definitions() -> None:
    @tool(strict=True)
    def f(a: str, n: int = 3) -> str:
        """F."""
        return a

    assert f.strict is True
    assert f.to_openai()["function"]["strict"] is True
    assert f.to_responses()["strict"] is True
    assert "strict" not in f.to_anthropic()


def test_a_tool_is_not_strict_by_default_and_keeps_todays_schema() -> None:
    @tool
    def f(a: str, n: int = 3) -> str:
        """F."""
        return a

    assert f.strict is False
    assert "strict" not in f.to_openai()["function"]
    assert f.to_responses()["strict"] is False
    assert f.to_openai()["function"]["parameters"] == f.parameters
    assert f.parameters["properties"]["n"] == {"type": "integer", "default": 3}
    assert f.parameters["required"] == ["a"]


def test_strict_parameters_require_everything_and_make_optionals_nullable() -> None:
    @tool(strict=True)
    def f(a: str, n: int = 3, unit: Unit = Unit.C, note: str | None = None) -> str:
        """F."""
        return a

    schema = f.strict_parameters
    Validator.check_schema(schema)
    assert openai_strict_problems(schema) == []
    assert set(schema["required"]) == {"a", "n", "unit", "note"}
    assert schema["properties"]["a"] == {"type": "string"}
    assert all(nullable(schema["properties"][k]) for k in ("n", "unit", "note"))
    validator = Validator(schema)
    assert validator.is_valid({"a": "x", "n": None, "unit": None, "note": None})
    assert validator.is_valid({"a": "x", "n": 2, "unit": "fahrenheit", "note": "y"})
    assert not validator.is_valid({"a": "x"})
    assert f.to_openai()["function"]["parameters"] == schema
    assert f.to_responses()["parameters"] == schema


def test_strict_rules_hold_in_nested_objects() -> None:
    @tool(strict=True)
    def travel(route: Route) -> str:
        """Travel."""
        return "ok"

    schema = travel.strict_parameters
    Validator.check_schema(schema)
    assert openai_strict_problems(schema) == []
    route = schema["properties"]["route"]
    assert set(route["required"]) == {"start", "stops", "name"}
    assert nullable(route["properties"]["name"])
    assert set(route["properties"]["start"]["required"]) == {"x", "y"}


def test_strict_tool_sends_the_normal_schema_to_anthropic() -> None:
    @tool(strict=True)
    def f(a: str, n: int = 3) -> str:
        """F."""
        return a

    assert f.to_anthropic()["input_schema"] == f.parameters
    assert f.parameters["required"] == ["a"]
    assert f.parameters["properties"]["n"] == {"type": "integer", "default": 3}


def test_strict_null_for_an_optional_parameter_means_its_default() -> None:
    @tool(strict=True)
    def f(a: str, n: int = 3) -> Any:
        """F."""
        return a, n

    assert run(f, {"a": "x", "n": None}) == ("x", 3)
    assert run(f, {"a": "x", "n": 5}) == ("x", 5)
    assert f.validate({"a": "x", "n": None}).get("n", 3) == 3


def test_strict_null_for_a_nullable_parameter_stays_none() -> None:
    @tool(strict=True)
    def f(a: str, n: int | None = 5) -> Any:
        """F."""
        return n

    assert run(f, {"a": "x", "n": None}) is None
    assert run(f, {"a": "x", "n": 2}) == 2


def test_hand_built_strict_tool() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    t = Tool("echo", "Echo.", schema, lambda a: a, strict=True)
    assert t.strict is True
    assert t.to_openai()["function"]["strict"] is True
    assert t.to_responses()["strict"] is True
    assert t.to_openai()["function"]["parameters"] == schema
    assert Tool("echo", "Echo.", schema, lambda a: a).strict is False


def test_strict_refuses_an_open_dict_naming_the_parameter() -> None:
    def f(scores: dict[str, int]) -> str:
        return "ok"

    assert tool(f).parameters["properties"]["scores"]["type"] == "object"  # fine when not strict
    with pytest.raises(TypeError, match="scores"):
        tool(f, strict=True)


def test_strict_refuses_any_and_missing_hints_naming_the_parameter() -> None:
    def f(payload: Any) -> str:
        return "ok"

    def g(blob) -> str:  # type: ignore[no-untyped-def]
        return "ok"

    assert tool(f).parameters["properties"]["payload"] == {}
    with pytest.raises(TypeError, match="payload"):
        tool(f, strict=True)
    with pytest.raises(TypeError, match="blob"):
        tool(g, strict=True)
