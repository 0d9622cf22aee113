"""Bug hunt in the new tool features: dataclass / TypedDict / pydantic parameters, Field and
annotated_types constraints, the new JSON Schema keywords, Sphinx / NumPy docstrings,
pydantic results and OpenAI strict mode.

References: ``jsonschema.Draft202012Validator`` for validation, pydantic's own
``TypeAdapter`` / ``validate_call`` for conversion and schemas.
"""

import asyncio
import dataclasses
import datetime
import decimal
import enum
import json
import math
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Annotated, Any, ClassVar, Generic, Literal, NotRequired, TypeVar

import annotated_types as at
import jsonschema
import pydantic
import pytest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from typing_extensions import ReadOnly, TypedDict

from rafrx._docstrings import parse_docstring
from rafrx._schema_check import check
from rafrx.errors import InvalidToolArguments
from rafrx.tools import Tool, format_result, tool

Validator = jsonschema.Draft202012Validator
ROOT = Path(__file__).resolve().parents[1]


def run(t: Tool, arguments: Any) -> Any:
    return asyncio.run(t.invoke(arguments))


def accepts(t: Tool, arguments: Any) -> bool:
    try:
        t.validate(arguments)
    except InvalidToolArguments:
        return False
    return True


def rafrx_accepts(schema: dict[str, Any], value: Any) -> bool:
    return check(schema, value, "") is None


def prop(t: Tool, name: str) -> dict[str, Any]:
    return t.parameters["properties"][name]


def all_strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in [k, *all_strings(v)]]
    if isinstance(node, list):
        return [s for v in node for s in all_strings(v)]
    return []


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


# ============================================================== passing guards


def test_unique_items_agrees_with_jsonschema_on_json_equality() -> None:
    cases = [
        [1, 1.0],
        [1, True],
        [0, False],
        [{"a": 1}, {"a": 1.0}],
        [[1, [2]], [1.0, [2.0]]],
        [{"a": [1]}, {"a": [True]}],
        [None, None],
        [2**53 + 1, float(2**53)],
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
    ]
    schema = {"type": "array", "uniqueItems": True}
    got = [rafrx_accepts(schema, v) for v in cases]
    want = [Validator(schema).is_valid(v) for v in cases]
    assert got == want == [False, True, True, False, False, True, False, True, False]


def test_const_enum_and_all_of_agree_with_jsonschema() -> None:
    cases = [
        ({"const": 1.0}, 1),
        ({"const": [1, {"a": 2}]}, [1.0, {"a": 2.0}]),
        ({"const": False}, 0),
        ({"const": None}, None),
        ({"enum": [0.1, "x"]}, 0.1),
        ({"allOf": [{"minimum": 5}, {"maximum": 3}]}, 4),
        ({"allOf": [{"type": "integer"}, {"type": "number"}]}, 2.0),
        ({"allOf": [{"minLength": 1}, {"pattern": "^a"}]}, "ba"),
    ]
    got = [rafrx_accepts(s, v) for s, v in cases]
    want = [Validator(s).is_valid(v) for s, v in cases]
    assert got == want == [True, True, False, True, True, False, True, False]


def test_string_lengths_are_code_points_as_in_jsonschema() -> None:
    cases = [
        ({"minLength": 2}, "\U0001f389"),  # one code point (no surrogates)
        ({"maxLength": 1}, "\u00e9"),  # precomposed
        ({"maxLength": 1}, "e\u0301"),  # combining: two code points
        ({"maxLength": 2}, "\U0001f468\u200d\U0001f469"),  # ZWJ sequence: three
    ]
    got = [rafrx_accepts(s, v) for s, v in cases]
    want = [Validator(s).is_valid(v) for s, v in cases]
    assert got == want == [False, True, False, False]


def test_number_keywords_ignore_booleans_and_handle_big_ints() -> None:
    cases = [
        ({"multipleOf": 3}, True),
        ({"minimum": 1.5}, True),
        ({"multipleOf": 2}, 2**70 + 1),
        ({"multipleOf": 0.5}, 2**70),
        ({"minimum": 2**64}, 2**64 - 1),
        ({"exclusiveMaximum": 1}, 1.0),
        ({"multipleOf": 1e-5}, 0.00003),
        ({"multipleOf": 1.5}, 4.5),
    ]
    got = [rafrx_accepts(s, v) for s, v in cases]
    want = [Validator(s).is_valid(v) for s, v in cases]
    assert got == want == [True, True, False, True, False, False, True, True]


def test_min_max_properties_in_nested_objects_name_the_argument() -> None:
    schema = {
        "type": "object",
        "properties": {"opts": {"type": "object", "maxProperties": 1}},
    }
    assert check(schema, {"opts": {"a": 1}}, "") is None
    error = check(schema, {"opts": {"a": 1, "b": 2}}, "")
    assert error is not None
    assert "'opts'" in error
    assert not Validator(schema).is_valid({"opts": {"a": 1, "b": 2}})


def test_annotated_list_field_min_length_is_min_items_and_enforced() -> None:
    @tool
    def f(xs: Annotated[list[int], Field(min_length=1, max_length=2)]) -> int:
        return len(xs)

    assert prop(f, "xs") == {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 1,
        "maxItems": 2,
    }
    assert not accepts(f, {"xs": []})
    assert not accepts(f, {"xs": [1, 2, 3]})
    assert run(f, {"xs": [1, 2.0]}) == 2


def test_annotated_types_len_on_string() -> None:
    @tool
    def f(s: Annotated[str, at.Len(1, 5)]) -> str:
        return s

    assert prop(f, "s") == {"type": "string", "minLength": 1, "maxLength": 5}
    assert [accepts(f, {"s": v}) for v in ["", "a", "abcde", "abcdef"]] == [
        False,
        True,
        True,
        False,
    ]


def test_field_default_factory_gives_a_fresh_object_per_invocation() -> None:
    seen: list[list[int]] = []

    @tool
    def f(xs: list[int] = Field(default_factory=list)) -> int:  # noqa: B008
        seen.append(xs)
        xs.append(1)
        return len(xs)

    assert "default" not in prop(f, "xs")
    assert f.parameters["required"] == []
    assert [run(f, {}), run(f, {})] == [1, 1]
    assert seen[0] is not seen[1]


def test_field_mutable_default_is_not_shared_between_calls() -> None:
    @tool
    def f(xs: list[int] = Field(default=[7])) -> int:  # noqa: B008
        xs.append(1)
        return len(xs)

    assert prop(f, "xs")["default"] == [7]
    assert [run(f, {}), run(f, {})] == [2, 2]


def test_field_default_on_positional_only_parameter() -> None:
    @tool
    def f(a: int = Field(default=2), /, b: int = 3) -> tuple[int, int]:
        return a, b

    assert prop(f, "a")["default"] == 2
    assert run(f, {"b": 5}) == (2, 5)
    assert run(f, {}) == (2, 3)
    assert run(f, {"a": 9.0}) == (9, 3)


def test_field_default_none_on_optional_int() -> None:
    @tool
    def f(n: int | None = Field(default=None, description="N.")) -> Any:
        return n

    assert prop(f, "n") == {"type": ["integer", "null"], "description": "N.", "default": None}
    assert run(f, {}) is None
    assert run(f, {"n": 3.0}) == 3


def test_docstring_beats_field_description() -> None:
    @tool
    def f(n: Annotated[int, Field(description="From field.")] = 1) -> int:
        """F.

        Args:
            n: From doc.
        """
        return n

    assert prop(f, "n") == {"type": "integer", "description": "From doc.", "default": 1}


@dataclasses.dataclass(kw_only=True, frozen=True, slots=True)
class KwInner:
    x: int
    y: str = "a"


@dataclasses.dataclass
class KwOuter:
    inner: KwInner
    limit: ClassVar[int] = 3
    cache: dict[str, int] = dataclasses.field(default_factory=dict, init=False)


def test_dataclass_kw_only_frozen_slots_nested_classvar_and_init_false() -> None:
    @tool
    def f(o: KwOuter) -> Any:
        return o

    schema = prop(f, "o")
    assert list(schema["properties"]) == ["inner"]  # no ClassVar, no init=False field
    assert schema["properties"]["inner"]["required"] == ["x"]
    assert run(f, {"o": {"inner": {"x": 1.0}}}) == KwOuter(KwInner(x=1, y="a"))
    assert not accepts(f, {"o": {"inner": {"x": 1}, "limit": 4}})


def test_dataclass_inheritance_keeps_base_fields_and_defaults() -> None:
    @tool
    def f(o: "Derived") -> Any:
        return o

    schema = prop(f, "o")
    assert list(schema["properties"]) == ["a", "b", "c"]
    assert schema["required"] == ["a"]
    assert run(f, {"o": {"a": 1, "c": 5}}) == Derived(1, 2, 5)


@dataclasses.dataclass
class BaseDC:
    a: int
    b: int = 2


@dataclasses.dataclass
class Derived(BaseDC):
    c: int = 3


class TDBase(TypedDict):
    a: int


class TDSub(TDBase, total=False):
    b: int


def test_typeddict_inheritance_with_total_false_subclass() -> None:
    @tool
    def f(t: TDSub) -> Any:
        return t

    assert prop(f, "t")["required"] == ["a"]
    assert run(f, {"t": {"a": 1.0}}) == {"a": 1}
    assert not accepts(f, {"t": {"b": 1}})


@dataclasses.dataclass
class Node:
    children: list["Node"]


def test_recursion_through_a_list_is_refused() -> None:
    with pytest.raises(TypeError, match="recursive"):

        @tool
        def f(n: Node) -> None: ...


class PNode(BaseModel):
    kids: list["PNode"] = []


def test_recursive_pydantic_model_through_a_list_is_refused() -> None:
    with pytest.raises(TypeError, match="recursive"):

        @tool
        def f(n: PNode) -> None: ...


class Aliased(BaseModel):
    model_config = ConfigDict(extra="forbid")
    full_name: str = Field(alias="fullName")


def test_pydantic_alias_is_in_the_schema_and_converts() -> None:
    @tool
    def f(m: Aliased) -> str:
        return m.full_name

    schema = prop(f, "m")
    assert list(schema["properties"]) == ["fullName"]
    assert schema["additionalProperties"] is False
    assert run(f, {"m": {"fullName": "Ada"}}) == "Ada"
    assert not accepts(f, {"m": {"full_name": "Ada"}})


class Inner(BaseModel):
    """An inner thing."""

    v: int


class HasRefSibling(BaseModel):
    inner: Inner = Field(description="The inner one.")
    items: list[Inner] = []
    by_key: dict[str, Inner] = {}


def test_ref_with_sibling_description_is_inlined_and_converted() -> None:
    @tool
    def f(m: HasRefSibling) -> Any:
        return m

    schema = prop(f, "m")
    assert schema["properties"]["inner"] == {
        "description": "The inner one.",
        "properties": {"v": {"type": "integer"}},
        "required": ["v"],
        "type": "object",
    }
    assert "$ref" not in json.dumps(f.parameters)
    got = run(f, {"m": {"inner": {"v": 1}, "items": [{"v": 2}], "by_key": {"k": {"v": 3}}}})
    assert got == HasRefSibling(inner=Inner(v=1), items=[Inner(v=2)], by_key={"k": Inner(v=3)})


T = TypeVar("T")


class Box(BaseModel, Generic[T]):
    item: T


def test_generic_and_root_models() -> None:
    @tool
    def f(b: Box[int], r: pydantic.RootModel[list[int]]) -> Any:
        return b.item, r.root

    assert prop(f, "b")["properties"] == {"item": {"type": "integer"}}
    assert prop(f, "r") == {"items": {"type": "integer"}, "type": "array"}
    assert run(f, {"b": {"item": 2}, "r": [1, 2]}) == (2, [1, 2])


def test_strict_list_of_dataclasses_null_means_default() -> None:
    @tool(strict=True)
    def f(ps: list[Point]) -> Any:
        return ps

    items = f.strict_parameters["properties"]["ps"]["items"]
    assert items["required"] == ["x", "y"]
    assert items["properties"]["y"] == {"type": ["integer", "null"]}
    assert run(f, {"ps": [{"x": 1, "y": None}, {"x": 2, "y": 5}]}) == [Point(1, 0), Point(2, 5)]


class StrictM(BaseModel):
    unit: Unit = Unit.C
    tag: Literal["a", "b"] | None = None
    n: int = Field(default=1, description="N.")


def test_strict_optional_enum_and_literal_become_any_of_with_null() -> None:
    @tool(strict=True)
    def f(m: StrictM, unit: Unit = Unit.F) -> Any:
        return m, unit

    sp = f.strict_parameters
    assert sp["properties"]["unit"] == {
        "anyOf": [{"type": "string", "enum": ["celsius", "fahrenheit"]}, {"type": "null"}]
    }
    m = sp["properties"]["m"]
    assert m["required"] == ["unit", "tag", "n"]
    assert m["additionalProperties"] is False
    assert m["properties"]["n"] == {"description": "N.", "type": ["integer", "null"]}
    assert "default" not in json.dumps(sp)
    # every schema it builds is valid JSON Schema, and accepts the nulls it invites
    Validator.check_schema(sp)
    args = {"m": {"unit": None, "tag": None, "n": None}, "unit": None}
    assert Validator(sp).is_valid(args)
    assert run(f, args) == (StrictM(), Unit.F)


def test_strict_already_nullable_parameter_keeps_null() -> None:
    @tool(strict=True)
    def f(n: int | None = 5) -> Any:
        return n

    assert f.strict_parameters["properties"]["n"] == {"type": ["integer", "null"]}
    assert run(f, {"n": None}) is None
    assert run(f, {"n": 2}) == 2


def test_strict_hand_built_schema_without_required() -> None:
    def f(a: int = 4, b: str = "x") -> Any:
        return a, b

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    t = Tool("f", "F.", schema, f, strict=True)
    assert t.strict_parameters == {
        "type": "object",
        "properties": {"a": {"type": ["integer", "null"]}, "b": {"type": ["string", "null"]}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    assert run(t, {"a": None, "b": None}) == (4, "x")
    assert t.parameters == schema  # not rewritten in place


def test_strict_definitions_are_independent_copies() -> None:
    @tool(strict=True)
    def f(m: StrictM, tags: list[Literal["a", "b"]] | None = None) -> None: ...

    before = json.dumps(f.parameters, sort_keys=True)
    first = f.to_openai()
    first["function"]["parameters"]["properties"]["m"]["required"].append("zzz")
    first["function"]["parameters"]["properties"]["tags"]["anyOf"][0]["items"]["enum"].append("c")
    second = f.to_openai()
    assert "zzz" not in second["function"]["parameters"]["properties"]["m"]["required"]
    assert second["function"]["parameters"]["properties"]["tags"]["anyOf"][0]["items"]["enum"] == [
        "a",
        "b",
    ]
    assert f.to_responses()["strict"] is True
    assert json.dumps(f.parameters, sort_keys=True) == before


def test_numpy_shared_names_and_star_args() -> None:
    doc = """Do it.

    Parameters
    ----------
    x, y : int
        Coords,
        continued.
    *args : int
        More.

    Returns
    -------
    int
        Result.
    """
    assert parse_docstring(doc) == (
        "Do it.",
        {"x": "Coords, continued.", "y": "Coords, continued.", "args": "More."},
    )


def test_sphinx_empty_param_text_and_type_fields() -> None:
    doc = """Summary.

    :param x:
    :param y: The y.
    :type y: int
    :param List[int] z: The z,
        wrapped.
    :raises ValueError: bad.
    """
    assert parse_docstring(doc) == ("Summary.", {"x": "", "y": "The y.", "z": "The z, wrapped."})


def test_windows_line_endings_and_tabs() -> None:
    crlf = "Summary.\r\n\r\n    Second para.\r\n\r\n    Args:\r\n        x: The x.\r\n"
    assert parse_docstring(crlf) == ("Summary.\n\nSecond para.", {"x": "The x."})
    tabs = "Summary\twith tab.\n\n\tArgs:\n\t\tx: The x.\n\t\t\tmore.\n"
    assert parse_docstring(tabs) == ("Summary with tab.", {"x": "The x. more."})


def test_google_types_with_nested_brackets_and_multiline_description() -> None:
    doc = """Summary.

    Args:
        cb (Callable[[int], str]): The callback.
        opts (dict(str, int)):
            Options,
            over lines.
    """
    assert parse_docstring(doc)[1] == {"cb": "The callback.", "opts": "Options, over lines."}


def test_pydantic_result_with_set_datetime_and_int_keys() -> None:
    class M(BaseModel):
        s: set[int]
        when: datetime.datetime
        d: dict[int, str]

    text = format_result(M(s={2, 1}, when=datetime.datetime(2024, 1, 1), d={1: "a"}))
    assert json.loads(text) == {"s": [1, 2], "when": "2024-01-01T00:00:00", "d": {"1": "a"}}


def test_strict_typeddict_null_for_not_required_key_is_dropped() -> None:
    class Opts(TypedDict):
        a: int
        b: NotRequired[str]

    def f(o: Any) -> Any:
        return o

    f.__annotations__["o"] = Opts
    t = tool(f, strict=True)
    o = t.strict_parameters["properties"]["o"]
    assert o["required"] == ["a", "b"]
    assert o["properties"]["b"] == {"type": ["string", "null"]}
    assert run(t, {"o": {"a": 1, "b": None}}) == {"a": 1}
    assert run(t, {"o": {"a": 1, "b": "x"}}) == {"a": 1, "b": "x"}


class Mixed(BaseModel):
    unit: Unit
    tags: list[str] = Field(default=[], max_length=3)
    score: Annotated[float, Field(ge=0, lt=10)] = 1.0


def test_generated_schemas_are_valid_and_validation_agrees_with_jsonschema() -> None:
    @tool
    def f(
        p: Point,
        m: Mixed,
        code: Annotated[str, Field(pattern="^[A-Z]{2}$")],
        n: Annotated[int, at.MultipleOf(5), at.Gt(0)] = 5,
        when: datetime.date | None = None,
        pair: tuple[int, str] | None = None,
    ) -> None: ...

    Validator.check_schema(f.parameters)
    with pytest.raises(TypeError, match="'pair'"):  # (strict mode has no fixed-length tuples)
        tool(f.fn, strict=True)
    base = {"p": {"x": 1}, "m": {"unit": "celsius"}, "code": "NO"}
    variants = [
        base,
        {**base, "n": 10},
        {**base, "n": 7},
        {**base, "n": -5},
        {**base, "code": "nor"},
        {**base, "code": "NOR"},
        {**base, "m": {"unit": "kelvin"}},
        {**base, "m": {"unit": "celsius", "tags": ["a", "b", "c", "d"]}},
        {**base, "m": {"unit": "celsius", "score": 10}},
        {**base, "m": {"unit": "celsius", "score": 9.5}},
        {**base, "p": {"x": 1, "z": 2}},
        {**base, "pair": [1, "a"]},
        {**base, "pair": [1, "a", 2]},
        {**base, "pair": ["a", 1]},
        {**base, "extra": 1},
    ]
    got = [accepts(f, v) for v in variants]
    want = [Validator(f.parameters).is_valid(v) for v in variants]
    assert got == want
    assert got == [
        True, True, False, False, False, False, False, False,
        False, True, False, True, False, False, False,
    ]  # fmt: skip


# ============================================================== bugs


def test_plain_import_pydantic_then_a_defaulted_parameter() -> None:
    code = textwrap.dedent(
        """
        import pydantic
        from rafrx.tools import tool

        @tool
        def f(x: int = 1) -> int:
            return x

        print(f.parameters["properties"]["x"]["default"])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-400:]
    assert done.stdout.strip() == "1"


def test_multiple_of_with_a_large_quotient_agrees_with_jsonschema() -> None:
    cases = [
        ({"multipleOf": 0.1}, 1e30),
        ({"multipleOf": 2.0}, 10**30),
        ({"type": "integer", "multipleOf": 0.25}, 1e308),
    ]
    assert [Validator(s).is_valid(v) for s, v in cases] == [True, True, True]
    assert [rafrx_accepts(s, v) for s, v in cases] == [True, True, True]


def test_dict_min_length_is_min_properties() -> None:
    @tool
    def f(d: Annotated[dict[str, int], Field(min_length=1)]) -> Any:
        return d

    assert (
        TypeAdapter(Annotated[dict[str, int], Field(min_length=1)]).json_schema()["minProperties"]
        == 1
    )
    assert prop(f, "d").get("minProperties") == 1
    assert not accepts(f, {"d": {}})


def test_max_length_on_optional_list_is_enforced() -> None:
    hint = Annotated[list[int] | None, Field(max_length=2)]

    @tool
    def f(xs: hint = None) -> Any:  # type: ignore[valid-type]
        return xs

    with pytest.raises(pydantic.ValidationError):
        TypeAdapter(hint).validate_python([1, 2, 3])
    assert not accepts(f, {"xs": [1, 2, 3]})


def test_decimal_bound_is_enforced_and_schema_is_json() -> None:
    @tool
    def f(s: Annotated[float, Field(ge=decimal.Decimal("0.5"))]) -> float:
        return s

    with pytest.raises(pydantic.ValidationError):
        TypeAdapter(Annotated[float, Field(ge=decimal.Decimal("0.5"))]).validate_python(0.1)
    assert not accepts(f, {"s": 0.1})
    json.dumps(f.to_openai())


def test_date_bound_does_not_break_the_json_schema() -> None:
    hint = Annotated[datetime.date, Field(gt=datetime.date(2020, 1, 1))]

    @tool
    def f(d: hint) -> Any:  # type: ignore[valid-type]
        return d

    assert "exclusiveMinimum" not in TypeAdapter(hint).json_schema()
    text = json.dumps(f.to_openai())
    assert json.loads(text)["function"]["name"] == "f"


def test_compiled_pattern_becomes_its_source() -> None:
    @tool
    def f(s: Annotated[str, Field(pattern=re.compile("^a+$"))]) -> str:
        return s

    assert prop(f, "s") == {"type": "string", "pattern": "^a+$"}
    assert not accepts(f, {"s": "b"})


def test_pattern_python_cannot_compile_fails_at_decoration_or_cleanly() -> None:
    hint = Annotated[str, Field(pattern=r"^\p{L}+$")]
    assert TypeAdapter(hint).validate_python("abc") == "abc"
    try:

        @tool
        def f(s: hint) -> str:  # type: ignore[valid-type]
            return s

    except TypeError:
        return  # refused up front: fine
    try:
        f.validate({"s": "abc"})
    except InvalidToolArguments:
        pass
    except re.error as exc:  # pragma: no cover - the bug
        pytest.fail(f"re.error escaped validate(): {exc}")


def test_pattern_dollar_does_not_match_before_a_trailing_newline() -> None:
    hint = Annotated[str, Field(pattern="^[a-z]+$")]
    with pytest.raises(pydantic.ValidationError):
        TypeAdapter(hint).validate_python("abc\n")

    @tool
    def f(s: hint) -> str:  # type: ignore[valid-type]
        return s

    assert accepts(f, {"s": "abc"})
    assert not accepts(f, {"s": "abc\n"})


def test_annotated_field_default_makes_the_parameter_optional() -> None:
    def f(x: Annotated[int, Field(default=3)]) -> int:
        return x

    assert pydantic.validate_call(f)() == 3  # type: ignore[call-arg]
    t = tool(f)
    assert t.parameters["required"] == []
    assert run(t, {}) == 3


def test_dataclass_initvar_is_a_parameter() -> None:
    @dataclasses.dataclass
    class Scaled:
        x: int
        scale: dataclasses.InitVar[int]

        def __post_init__(self, scale: int) -> None:
            self.x *= scale

    def f(v: Scaled) -> int:
        return v.x

    f.__annotations__["v"] = Scaled
    assert TypeAdapter(Scaled).json_schema()["required"] == ["x", "scale"]
    t = tool(f)
    assert prop(t, "v")["required"] == ["x", "scale"]
    assert run(t, {"v": {"x": 2, "scale": 3}}) == 6


@pydantic.dataclasses.dataclass
class PydDC:
    x: int = Field(description="X.")
    y: int = Field(default=3, ge=1)


def test_pydantic_dataclass_fields() -> None:
    @tool
    def f(p: PydDC) -> Any:
        return p

    schema = prop(f, "p")
    assert schema["required"] == ["x"]
    assert schema["properties"]["x"].get("description") == "X."
    assert schema["properties"]["y"].get("minimum") == 1
    assert run(f, {"p": {"x": 1}}) == PydDC(x=1, y=3)


def test_typeddict_not_required_under_future_annotations() -> None:
    module = types.ModuleType("rafrx_hunt_future_td")
    sys.modules[module.__name__] = module
    try:
        source = textwrap.dedent(
            """
            from __future__ import annotations
            from typing import NotRequired
            from typing_extensions import TypedDict

            class TD(TypedDict):
                a: int
                b: NotRequired[int]
            """
        )
        exec(compile(source, "<future-td>", "exec"), module.__dict__)
        td = module.__dict__["TD"]
        assert TypeAdapter(td).json_schema()["required"] == ["a"]

        def f(t: Any) -> Any:
            return t

        f.__annotations__["t"] = td
        t = tool(f)
        assert prop(t, "t")["required"] == ["a"]
        assert run(t, {"t": {"a": 1}}) == {"a": 1}
    finally:
        del sys.modules[module.__name__]


class ReadOnlyTD(TypedDict):
    a: ReadOnly[int]
    b: NotRequired[ReadOnly[str]]


def test_typeddict_readonly_keys() -> None:
    with pytest.warns(UserWarning, match="ReadOnly"):
        assert TypeAdapter(ReadOnlyTD).json_schema()["required"] == ["a"]

    @tool
    def f(t: ReadOnlyTD) -> Any:
        return t

    assert prop(f, "t")["properties"] == {"a": {"type": "integer"}, "b": {"type": "string"}}
    assert prop(f, "t")["required"] == ["a"]


class Cat(BaseModel):
    name: str


class Dog(BaseModel):
    name: str
    barks: bool


def test_union_of_models_converts_to_the_best_match() -> None:
    @tool
    def f(pet: Cat | Dog) -> Any:
        return pet

    data = {"name": "Rex", "barks": True}
    assert TypeAdapter(Cat | Dog).validate_python(data) == Dog(name="Rex", barks=True)
    assert run(f, {"pet": data}) == Dog(name="Rex", barks=True)


class StrictConfigModel(BaseModel):
    model_config = ConfigDict(strict=True)
    when: datetime.date
    pair: tuple[int, int]
    unit: Unit


def test_strict_config_model_accepts_the_json_its_schema_describes() -> None:
    @tool
    def f(m: StrictConfigModel) -> Any:
        return m

    data = {"when": "2024-01-02", "pair": [1, 2], "unit": "celsius"}
    want = StrictConfigModel.model_validate_json(json.dumps(data))
    assert Validator(prop(f, "m")).is_valid(data)
    assert run(f, {"m": data}) == want


class Attributed(BaseModel):
    """A point.

    Attributes:
        x: Across.
    """

    x: int


@dataclasses.dataclass
class AttributedDC:
    """A point.

    Attributes:
        x: Across.
    """

    x: int


def test_pydantic_model_attributes_section_like_a_dataclass() -> None:
    @tool
    def f(m: Attributed, d: AttributedDC) -> None: ...

    assert prop(f, "d")["description"] == "A point."
    assert prop(f, "d")["properties"]["x"]["description"] == "Across."
    assert prop(f, "m")["description"] == "A point."
    assert prop(f, "m")["properties"]["x"].get("description") == "Across."


class CatD(BaseModel):
    kind: Literal["cat"]


class DogD(BaseModel):
    kind: Literal["dog"]


class Owner(BaseModel):
    pet: CatD | DogD = Field(discriminator="kind")


def test_discriminated_union_leaves_no_dangling_defs_reference() -> None:
    @tool
    def f(owner: Owner) -> Any:
        return owner

    dangling = [s for s in all_strings(f.parameters) if "#/$defs/" in s]
    assert dangling == []
    assert run(f, {"owner": {"pet": {"kind": "dog"}}}) == Owner(pet=DogD(kind="dog"))


def test_same_named_nested_model_is_not_recursion() -> None:
    other = types.ModuleType("rafrx_hunt_other")
    sys.modules[other.__name__] = other
    try:
        exec("from pydantic import BaseModel\nclass Item(BaseModel):\n    n: int\n", other.__dict__)
        inner_item = other.__dict__["Item"]
        Item = pydantic.create_model("Item", inner=(inner_item, ...))
        assert set(Item.model_json_schema()["$defs"]) == {"Item"}  # pydantic names it "Item"

        def f(item: Any) -> Any:
            return item

        f.__annotations__["item"] = Item
        t = tool(f)
        inner = prop(t, "item")["properties"]["inner"]
        assert inner["properties"] == {"n": {"type": "integer"}}
        assert run(t, {"item": {"inner": {"n": 1}}}).inner == inner_item(n=1)
    finally:
        del sys.modules[other.__name__]


def test_strict_null_inside_an_optional_dataclass_means_default() -> None:
    @tool(strict=True)
    def f(p: Point | None = None) -> Any:
        return p

    args = {"p": {"x": 1, "y": None}}
    assert Validator(f.strict_parameters).is_valid(args)
    assert run(f, args) == Point(1, 0)


def test_strict_null_inside_a_tuple_item_means_default() -> None:
    @tool(strict=True)
    def f(p: tuple[Point, ...]) -> Any:
        return p

    args = {"p": [{"x": 1, "y": None}, {"x": 2, "y": 3}]}
    assert Validator(f.strict_parameters).is_valid(args)
    assert run(f, args) == (Point(1, 0), Point(2, 3))


def test_strict_hand_built_tool_with_empty_schema() -> None:
    def ping() -> str:
        return "pong"

    assert Tool("ping", "Ping.", {}, ping).strict_parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    t = Tool("ping", "Ping.", {}, ping, strict=True)
    assert t.to_openai()["function"]["strict"] is True
    assert run(t, {}) == "pong"


def test_pydantic_result_with_nan_is_null_like_a_dataclass() -> None:
    class M(BaseModel):
        x: float

    @dataclasses.dataclass
    class D:
        x: float

    assert format_result(D(math.nan)) == '{"x": null}'
    assert format_result(M(x=math.nan)) == '{"x": null}'


def test_description_line_starting_with_a_role_is_prose() -> None:
    doc = """Summary.

    Some prose mentions :func:`foo` here,
    :func:`bar` starts this line.

    Args:
        x: X.
    """
    assert parse_docstring(doc) == (
        "Summary.\n\nSome prose mentions :func:`foo` here, :func:`bar` starts this line.",
        {"x": "X."},
    )
