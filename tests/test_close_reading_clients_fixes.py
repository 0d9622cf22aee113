"""Regression tests for the bugs a close, line-by-line reading of rafrx's code found
(clients, schemas, history and helpers side).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import attrs
import pydantic
import pytest

from rafrx import Agent, InMemoryHistoryProvider, Tool, tool
from rafrx._slot_init import slot_init
from rafrx.sources.clients import AnthropicClient
from rafrx.testing import LLMServer, Reply


@dataclasses.dataclass
class Point:
    """A point on the plane."""

    x: int
    y: int


class Window(pydantic.BaseModel):
    """A window on the screen."""

    width: int
    height: int


# ---------------------------------------------------------------- 1. Field description lost


def test_a_field_description_on_a_class_typed_parameter_survives_the_class_docstring() -> None:
    """What the user does: describes a parameter whose type is a documented class with
    ``Annotated[Point, Field(description="Where the marker goes.")]`` (a dataclass,
    attrs class, TypedDict or pydantic model), the README's documented way to give
    constraints and descriptions ("``Annotated[int, Field(ge=1)]`` constraints are sent").

    What happens: the tool schema (sent to every provider) says the *class's*
    docstring, "A point on the plane.", and the parameter's own description is
    gone. ``annotated_schema`` handles a ``FieldInfo`` with
    ``extra.update(annotated_schema(schema, field.metadata))``
    (rafrx/_constraints.py:100); that inner call returns ``{**schema, **extra}``,
    i.e. the whole base schema, whose ``description`` (the class docstring)
    overwrites the Field's one set just before.

    What should happen: the Field's description, as with a plain string
    (``Annotated[Point, "Where the marker goes."]`` gives it, see below) and as
    pydantic itself does (a field's ``description`` beats the referenced model's
    docstring in ``model_json_schema``).
    """

    def mark(
        at: Annotated[Point, pydantic.Field(description="Where the marker goes.")],
        size: Annotated[Window, pydantic.Field(description="The marker's box.")],
        plain: Annotated[Point, "Where the label goes."],
    ) -> str:
        """Put a marker."""
        return ""

    props = tool(mark).parameters["properties"]
    assert props["plain"]["description"] == "Where the label goes."  # (a string works)
    assert props["size"]["description"] == "The marker's box."
    assert props["at"]["description"] == "Where the marker goes."


# ---------------------------------------------------------------- 2. strict mode and $defs


def test_strict_form_of_a_schema_with_defs_closes_the_defined_objects() -> None:
    """What the user does: builds a ``Tool(..., strict=True)`` from a hand-written or
    generated schema that shares sub-schemas through ``$defs`` / ``$ref`` (pydantic's
    ``Model.model_json_schema()`` always does for nested models), and offers it to
    OpenAI.

    What happens: ``strict_schema`` (rafrx/_strict.py:84-110) rewrites ``properties``,
    ``items`` and the ``anyOf``-like lists but never looks into ``$defs`` or
    ``definitions``: the defined objects go out without ``additionalProperties:
    false`` and with optional properties still optional (and their ``default``).
    OpenAI refuses the tool with a 400 ("'additionalProperties' is required to be
    supplied and to be false"), the very error ``Tool.__attrs_post_init__`` says
    strict tools turn into a ``TypeError`` at construction instead. An optional
    property holding a ``$ref`` is also made required *without* ``null``, because
    ``check`` ignores ``$ref`` and so ``_nullable`` believes it takes null.

    What should happen: the definitions in strict form too, as openai-python's
    ``to_strict_json_schema`` does (src/openai/lib/_pydantic.py: it recurses into
    ``$defs`` and ``definitions`` before anything else), or a ``TypeError``.
    """
    schema = {
        "type": "object",
        "$defs": {
            "Addr": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "zip": {"type": "string", "default": ""},
                },
                "required": ["city"],
            }
        },
        "properties": {"home": {"$ref": "#/$defs/Addr"}},
        "required": ["home"],
    }
    strict = Tool("ship", "Ship it.", schema, lambda home: "", strict=True).strict_parameters
    addr = strict["$defs"]["Addr"]
    assert addr.get("additionalProperties") is False
    assert sorted(addr.get("required", ())) == ["city", "zip"]
    assert "default" not in addr["properties"]["zip"]


# ---------------------------------------------------------------- 3-4. slot_init contract


def test_slot_init_refuses_a_class_with_cache_hash() -> None:
    """What a maintainer does: puts ``@slot_init`` on a frozen attrs class made with
    ``cache_hash=True`` (a natural choice for the hashable content values).

    What happens: it is accepted, and every ``hash()`` of an instance then raises
    ``AttributeError: ... '_attrs_cached_hash'``: attrs' own ``__init__`` sets that
    slot, the replacement (rafrx/_slot_init.py:97-127) does not.

    What should happen: the module's contract, "A class using what it does not
    reproduce ... is refused when it is decorated, so attrs' behaviour is never
    silently changed", i.e. a ``TypeError`` from ``slot_init``.
    """

    @attrs.frozen(cache_hash=True)
    class Cached:
        x: int

    try:
        slot_init(Cached)
    except TypeError:
        return  # refused: right
    assert hash(Cached(1)) == hash(Cached(1))


def test_slot_init_on_a_subclass_with_inherited_fields_works() -> None:
    """What a maintainer does: puts ``@slot_init`` on a slotted attrs class that
    inherits fields from another one.

    What happens: ``KeyError: 'x'`` from ``cls.__dict__[name]``
    (rafrx/_slot_init.py:113): an inherited field's slot lives in the base class.

    What should happen: the documented ``TypeError`` ("``cls`` is not a slotted attrs
    class, or uses a feature the replacement does not reproduce"), or support (look
    the descriptor up along the MRO).
    """

    @attrs.frozen
    class Base:
        x: int

    @attrs.frozen
    class Derived(Base):
        y: int = 0

    try:
        slot_init(Derived)
    except TypeError:
        return
    assert Derived(1, 2) == Derived(x=1, y=2)


# ---------------------------------------------------------------- 5. history aliasing


@pytest.mark.asyncio
async def test_a_change_to_the_returned_response_does_not_reach_the_saved_history() -> None:
    """What the user does: runs a turn with ``InMemoryHistoryProvider`` and then edits
    a block of the returned ``AgentResponse`` (redacting a thinking text before
    showing or logging it, say).

    What happens: the saved history changes too: ``save`` stores the very objects
    it is given (rafrx/history.py:110), and the response's messages share their
    ``provider_data`` blocks with them. The next turn then sends Claude an edited
    thinking block whose signature no longer matches (a 400).

    What should happen: what the history holds is the history's own, as ``load``
    already guarantees in the other direction ("copies: what a caller does to a
    loaded message's blocks never reaches the history", history.py:103): ``save``
    should keep copies.
    """
    async with LLMServer() as server:
        server.enqueue(Reply(text="Hi.", reasoning="Greet them."))
        history = InMemoryHistoryProvider()
        async with AnthropicClient(server.url, "sk-ant-test") as client:
            response = await Agent(client, history=history).send("Hello")
    (block,) = response.turn_transcript[-1].provider_data["anthropic_thinking"]
    block["thinking"] = "[redacted]"
    (kept,) = history.messages[-1].provider_data["anthropic_thinking"]
    assert kept["thinking"] == "Greet them."


# ---------------------------------------------------- suspicions of the first reading, fixed


def test_a_hand_built_schema_s_top_level_any_of_is_checked() -> None:
    """``{"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}`` beside the properties of a
    hand-built tool's schema was never checked at the top (only nested ones were): ``{}``
    ran the tool. Now it is refused, naming both ways it could fit."""
    from rafrx.errors import InvalidToolArguments

    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    either = Tool("either", "One of a or b.", schema, lambda **kwargs: kwargs)
    assert either.validate({"b": "x"}) == {"b": "x"}
    with pytest.raises(InvalidToolArguments, match=r"missing required argument 'a' or .*'b'"):
        either.validate({})


def test_draft_4_exclusive_minimum_true_makes_the_minimum_exclusive() -> None:
    """Draft 4 (and OpenAPI 3.0) write an exclusive bound as ``minimum`` plus
    ``exclusiveMinimum: true``; the flag was ignored, so 0 passed ``minimum: 0`` where it
    must not."""
    from rafrx._schema_check import check

    schema = {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1}
    assert check(schema, 0.5, "n") is None
    assert check(schema, 0, "n") == "argument 'n': expected more than 0, got integer 0"
    assert check(schema, 1, "n") is None  # (maximum stays inclusive)
    assert check({**schema, "exclusiveMaximum": True}, 1, "n") is not None


def test_a_string_too_short_is_said_with_one_got() -> None:
    """The message said "got" twice: ``expected 3.. characters, got 1, got string "a"``."""
    from rafrx._schema_check import check

    said = check({"type": "string", "minLength": 3}, "a", "x")
    assert said == "argument 'x': expected 3.. characters, got 1: string \"a\""


def test_without_nulls_reads_a_union_nested_in_a_union() -> None:
    """``(A | str) | None`` gives an ``anyOf`` inside an ``anyOf``; the inner branch was not
    seen to hold an object, so a null standing for an optional member of ``A`` was left in
    and the arguments then failed the schema (found by this file's hypothesis test)."""
    from rafrx._strict import without_nulls

    inner = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {"aa": {"anyOf": [{"anyOf": [inner, {"type": "string"}]}, {"type": "null"}]}},
    }
    assert without_nulls(schema, {"aa": {"a": None}}) == {"aa": {}}
    assert without_nulls(schema, {"aa": "text"}) == {"aa": "text"}
