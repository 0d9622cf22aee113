"""Regression tests of session 10's fixes in tool schemas and the message model: ``oneOf``
checked as JSON Schema says (exactly one branch), the code execution container of a paused
Anthropic turn sent back, and an Anthropic message's text after a ``tool_use`` block sent
back where it stood.

Each failed on the commit before its fix, for the reason its docstring gives (those
marked "pin" hold behaviour the fix must keep). Every HTTP exchange is real aiohttp over
127.0.0.1 (rafrx.testing.LLMServer).
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

import pydantic
import pytest
import reactivex

import tests.sources.test_anthropic_agent_hunt as hunt
from rafrx import operators as ops
from rafrx import updates as u
from rafrx._schema_check import check
from rafrx.errors import InvalidToolArguments
from rafrx.messages import (
    ANTHROPIC_THINKING,
    CONTAINER_REF,
    ChatMessage,
    from_anthropic,
    pending_container,
    to_anthropic,
)
from rafrx.response import AgentResponse, FinishReason
from rafrx.testing import LLMServer
from rafrx.tools import Tool, tool
from tests.test_sdk_request_types import body_problems

GUARD = 5.0

# ================================================================ oneOf: exactly one branch

NUMBER_OR_INTEGER = {"oneOf": [{"type": "number"}, {"type": "integer"}]}


def test_oneof_refuses_a_value_that_fits_two_branches_and_says_so() -> None:
    """``2`` is a number and an integer: ``oneOf`` requires exactly one branch to match
    (it was checked as ``anyOf``, so the value passed)."""
    error = check(NUMBER_OR_INTEGER, 2, "n")
    assert error is not None
    assert "several matched" in error
    assert "branches 0, 1" in error
    assert error.startswith("argument 'n': ")
    assert check(NUMBER_OR_INTEGER, 2.5, "n") is None  # one branch: fine


def test_oneof_with_no_branch_fitting_still_names_the_nearest() -> None:
    """Pin: a value no branch takes is still refused as before."""
    schema = {"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 3}]}
    assert check(schema, 1, "n") == "argument 'n': expected at least 3, got integer 1"


def test_oneof_branches_this_check_cannot_judge_are_left_to_the_provider() -> None:
    """Pin: branches with a ``$ref`` or ``not`` (keywords the check does not evaluate)
    seem to fit anything; refusing the value as fitting several would refuse valid calls."""
    refs = {"oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]}
    assert check(refs, {"a": 1}, "x") is None
    exclusive = {
        "oneOf": [
            {"type": "object", "required": ["a"], "not": {"required": ["b"]}},
            {"type": "object", "required": ["b"], "not": {"required": ["a"]}},
        ]
    }
    assert check(exclusive, {"a": 1, "b": 2}, "x") is None  # (not checked: as before)
    nested = {"oneOf": [{"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}}, {}]}
    assert check(nested, {"p": 1}, "x") is None


def _run_calls(tools: list[Tool[..., Any]], arguments: str, name: str) -> AgentResponse:
    updates: list[u.AgentResponseUpdate] = [
        u.ToolCallStart("c1", name),
        u.ToolCallArgs("c1", arguments),
        u.ToolCallEnd("c1"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]

    async def run() -> AgentResponse:
        results = reactivex.from_iterable(updates).pipe(
            ops.convert(), ops.execute_tools(tools), ops.aggregate()
        )
        return await asyncio.wait_for(results, GUARD)

    return asyncio.run(run())


def test_a_tool_call_fitting_two_oneof_branches_is_not_run() -> None:
    """A hand-built tool whose schema takes a ``oneOf``: the call that fits both
    branches gets an error result naming it, and the function never runs."""
    ran: list[Any] = []
    schema = {
        "type": "object",
        "properties": {
            "target": {
                "oneOf": [
                    {"type": "object", "properties": {"id": {"type": "integer"}}},
                    {"type": "object", "properties": {"name": {"type": "string"}}},
                ]
            }
        },
        "required": ["target"],
    }
    pick = Tool("pick", "Pick a target.", schema, lambda target: ran.append(target) or "ok")
    with pytest.raises(InvalidToolArguments, match="several matched"):
        pick.validate({"target": {"id": 1, "name": "x"}})
    response = _run_calls([pick], '{"target": {"id": 1, "name": "x"}}', "pick")
    [message] = response.tool_messages
    assert message.is_error
    assert "argument 'target': expected exactly one oneOf branch" in message.content
    assert ran == []
    assert pick.validate({"target": {"id": 1, "name": 2}}) == {"target": {"id": 1, "name": 2}}


class Cat(pydantic.BaseModel):
    kind: Literal["cat"] = "cat"
    name: str


class Dog(pydantic.BaseModel):
    kind: Literal["dog"] = "dog"
    name: str


class Pet(pydantic.BaseModel):
    pet: Annotated[Cat | Dog, pydantic.Field(discriminator="kind")]


def test_a_pydantic_tagged_union_takes_a_tagged_value_and_refuses_an_untagged_one() -> None:
    """pydantic gives a tagged union as ``oneOf`` (the tag a ``const`` with a default):
    a value with its tag fits one branch and runs; one without fits both, which
    pydantic refuses too ("Unable to extract tag"): refused before the call."""

    @tool
    def adopt(p: Pet) -> str:
        """Adopt a pet."""
        return type(p.pet).__name__

    assert "oneOf" in adopt.parameters["properties"]["p"]["properties"]["pet"]
    assert adopt.validate({"p": {"pet": {"kind": "dog", "name": "Rex"}}})["p"].pet == Dog(
        name="Rex"
    )
    with pytest.raises(InvalidToolArguments, match="several matched"):
        adopt.validate({"p": {"pet": {"name": "Rex"}}})


def test_a_union_of_overlapping_types_is_anyof_and_takes_what_fits_both() -> None:
    """Pin: ``int | float`` (2 fits both) is ``anyOf`` in the schema rafrx makes, so
    the exact-one rule of ``oneOf`` never refuses it."""

    @tool
    def scale(factor: int | float, tags: list[str] | str) -> str:
        """Scale."""
        return f"{factor!r} {tags!r}"

    assert "oneOf" not in repr(scale.parameters)
    assert scale.validate({"factor": 2, "tags": "a"}) == {"factor": 2, "tags": "a"}


# ====================================================== Anthropic: a paused turn's container


def _with_container(body: bytes, container_id: str) -> bytes:
    """An Anthropic stream whose ``message_delta`` names its code execution container."""
    container = {"id": container_id, "expires_at": "2099-01-01T00:00:00Z"}
    marked = body.replace(
        b'"stop_sequence": null}, "usage"',
        b'"stop_sequence": null, "container": ' + json.dumps(container).encode() + b'}, "usage"',
    )
    assert marked != body
    return marked


@pytest.mark.asyncio
async def test_a_paused_code_execution_turn_goes_on_in_its_container(
    llm_server: LLMServer,
) -> None:
    """``pause_turn`` while Claude's code runs: the continuation must name the paused
    message's container (the SDK's tool runners pass ``container.id`` on), or it goes
    on in a new one, without the files and state the code left. It was named only
    when client tool calls were pending."""
    paused = hunt.message(
        hunt.server_use("srvtoolu_01", "code_execution", {"code": "open('a.txt','w')"}),
        hunt.code_result("srvtoolu_01"),
        stop="pause_turn",
    )
    paused = _with_container(paused, "container_011Paused")
    sdk = hunt.sdk_message(paused)
    assert sdk.container is not None
    assert sdk.container.id == "container_011Paused"
    [response] = await hunt.run_turns(llm_server, [paused, hunt.answer("Saved.")], ["Save it."])
    assert response.text == "Saved."
    first, second = llm_server.requests
    assert "container" not in first.body
    assert second.body.get("container") == "container_011Paused"
    assert body_problems("anthropic", second.json) == []
    assert hunt.assistant_contents(second) == [hunt.kept_wire(sdk)]


def test_a_finished_turn_names_no_container() -> None:
    """Pin: a message that neither paused nor waits for calls names no container (it may
    have expired by the next turn; Anthropic does not require it)."""
    mark = {"type": CONTAINER_REF, "id": "container_1"}
    done = ChatMessage("assistant", "Done.", provider_data={ANTHROPIC_THINKING: (mark,)})
    assert pending_container([ChatMessage.user("Go."), done]) is None


# ====================================================== Anthropic: text after a tool_use block

SPLIT_TURN = (
    hunt.text("Let me look it up."),
    hunt.tool_use("toolu_01", "lookup", {"city": "Oslo"}),
    hunt.text("Then I will tell you."),
)


@pytest.mark.asyncio
async def test_text_after_a_tool_use_block_goes_back_after_it(llm_server: LLMServer) -> None:
    """``[text, tool_use, text]``: the stream's text joins into the message's one text,
    and the message went back as ``[text "AB", tool_use]``: the model's words moved
    before its call, run together. It goes back as it came (as the SDK keeps it)."""
    step = hunt.message(*SPLIT_TURN)
    sdk = hunt.sdk_message(step)
    await hunt.run_turns(llm_server, [step, hunt.answer("Sunny.")], ["Oslo?"], tools=[hunt.lookup])
    second = llm_server.requests[1]
    assert body_problems("anthropic", second.json) == []
    assert hunt.assistant_contents(second) == [hunt.kept_wire(sdk)]
    assert [b["type"] for b in hunt.kept_wire(sdk)] == ["text", "tool_use", "text"]


def test_from_anthropic_keeps_text_after_a_tool_use_block_in_its_place() -> None:
    """The same through ``from_anthropic``: back through ``to_anthropic`` the message
    is what it was (the text after the call was glued to the text before it)."""
    wire = [{"role": "user", "content": [hunt.text("Oslo?")]}]
    wire.append({"role": "assistant", "content": list(SPLIT_TURN)})
    [_, assistant] = from_anthropic(None, wire)
    assert assistant.content == "Let me look it up.Then I will tell you."  # one text
    assert to_anthropic([ChatMessage.user("Oslo?"), assistant]) == (None, wire)


def test_text_before_the_calls_only_keeps_no_refs() -> None:
    """Pin: the common ``[text, tool_use, tool_use]`` keeps no provider data."""
    calls = [hunt.tool_use(f"toolu_0{i}", "lookup", {"city": "Oslo"}) for i in (1, 2)]
    wire = [{"role": "assistant", "content": [hunt.text("Looking."), *calls]}]
    [assistant] = from_anthropic(None, wire)
    assert assistant.provider_data is None
    assert to_anthropic([assistant]) == (None, wire)
