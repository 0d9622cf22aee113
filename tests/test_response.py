"""``Usage``, ``FinishReason``, ``AgentResponseResult``, ``AgentResponse`` and the 3 events."""

from __future__ import annotations

import functools
import json
import operator
import typing
from typing import Any

import attrs
import pytest

from rafrx.content import TextContent
from rafrx.events import Event, FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import ChatMessage, ToolCall
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage

# ---------------------------------------------------------------- Usage


def test_usage_defaults() -> None:
    usage = Usage()
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (0, 0, 0)
    assert usage.reasoning_tokens is None
    assert usage.cached_tokens is None


def test_usage_add_sums_every_count() -> None:
    a = Usage(10, 5, 15, reasoning_tokens=2, cached_tokens=4)
    b = Usage(1, 2, 3, reasoning_tokens=1, cached_tokens=1)
    assert a + b == Usage(11, 7, 18, reasoning_tokens=3, cached_tokens=5)


def test_usage_add_keeps_optional_counts_none_only_when_both_are_none() -> None:
    assert (Usage(1, 1, 2) + Usage(1, 1, 2)).reasoning_tokens is None
    assert (Usage(1, 1, 2, reasoning_tokens=7) + Usage(1, 1, 2)).reasoning_tokens == 7
    assert (Usage(1, 1, 2) + Usage(1, 1, 2, cached_tokens=3)).cached_tokens == 3


def test_usage_add_is_associative_with_a_zero() -> None:
    parts = [Usage(i, 2 * i, 3 * i, reasoning_tokens=i or None) for i in range(4)]
    total = functools.reduce(operator.add, parts, Usage())
    assert total == Usage(6, 12, 18, reasoning_tokens=6)
    assert Usage() + parts[2] == parts[2]


def test_usage_add_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        Usage() + 1  # type: ignore[operator]


def test_usage_is_frozen_and_equal_by_value() -> None:
    usage = Usage(1, 2, 3)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        usage.prompt_tokens = 5  # type: ignore[misc]
    assert usage == Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)
    assert hash(usage) == hash(Usage(1, 2, 3))
    assert repr(usage).startswith("Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3")


# ---------------------------------------------------------------- FinishReason


def test_finish_reason_members_and_values() -> None:
    assert {r.name: r.value for r in FinishReason} == {
        "STOP": "stop",
        "LENGTH": "length",
        "TOOL_CALLS": "tool_calls",
        "CONTENT_FILTER": "content_filter",
        "ERROR": "error",
        "OTHER": "other",
    }
    assert str(FinishReason.TOOL_CALLS) == "tool_calls"
    assert FinishReason("stop") is FinishReason.STOP


PROVIDER_SPELLINGS = [
    # OpenAI chat and compatibles
    ("stop", FinishReason.STOP),
    ("length", FinishReason.LENGTH),
    ("tool_calls", FinishReason.TOOL_CALLS),
    ("function_call", FinishReason.TOOL_CALLS),
    ("content_filter", FinishReason.CONTENT_FILTER),
    ("error", FinishReason.ERROR),
    ("eos", FinishReason.STOP),
    ("eos_token", FinishReason.STOP),
    ("model_length", FinishReason.LENGTH),
    # Anthropic
    ("end_turn", FinishReason.STOP),
    ("stop_sequence", FinishReason.STOP),
    ("pause_turn", FinishReason.OTHER),  # a paused turn is no answer's end
    ("tool_use", FinishReason.TOOL_CALLS),
    ("max_tokens", FinishReason.LENGTH),
    ("refusal", FinishReason.CONTENT_FILTER),
    # Responses API, Gemini
    ("completed", FinishReason.STOP),
    ("failed", FinishReason.ERROR),
    ("max_output_tokens", FinishReason.LENGTH),
    ("safety", FinishReason.CONTENT_FILTER),
    ("recitation", FinishReason.CONTENT_FILTER),
    # Case does not matter (Gemini sends STOP / MAX_TOKENS)
    ("STOP", FinishReason.STOP),
    ("MAX_TOKENS", FinishReason.LENGTH),
    ("End_Turn", FinishReason.STOP),
    # Unknown → OTHER
    ("", FinishReason.OTHER),
    ("something_new", FinishReason.OTHER),
    ("other", FinishReason.OTHER),
]


@pytest.mark.parametrize(("spelling", "expected"), PROVIDER_SPELLINGS)
def test_finish_reason_from_provider(spelling: str, expected: FinishReason) -> None:
    assert FinishReason.from_provider(spelling) is expected


def test_finish_reason_from_provider_none_is_other() -> None:
    assert FinishReason.from_provider(None) is FinishReason.OTHER


# ---------------------------------------------------------------- results


def test_agent_response_result_defaults_and_tuple_conversion() -> None:
    result = AgentResponseResult()
    assert (result.id, result.model, result.finish_reason) == (None, None, None)
    assert result.contents == ()
    assert result.events == ()
    converted = AgentResponseResult(
        contents=[TextContent("a")], events=iter([FinishEvent(FinishReason.STOP)])
    )
    assert converted.contents == (TextContent("a"),)
    assert converted.events == (FinishEvent(FinishReason.STOP),)
    assert type(converted.contents) is tuple
    assert type(converted.events) is tuple


def test_agent_response_result_is_frozen_and_matchable() -> None:
    result = AgentResponseResult("r", "m", FinishReason.STOP, [TextContent("a")])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.id = "x"  # type: ignore[misc]
    match result:
        case AgentResponseResult(response_id, model, reason, (TextContent(text),), ()):
            assert (response_id, model, reason, text) == ("r", "m", FinishReason.STOP, "a")
        case _:
            pytest.fail("no match")
    assert result == AgentResponseResult("r", "m", FinishReason.STOP, (TextContent("a"),))


def test_agent_response_defaults() -> None:
    response = AgentResponse()
    assert response.text == ""
    assert response.reasoning_text is None
    assert response.tool_calls == ()
    assert response.tool_messages == ()
    assert response.turn_transcript == ()
    assert response.finish_reason is None
    assert response.usage is None
    assert response.source_agent_id is None
    assert response.interrupted is False


def test_agent_response_fields_in_contract_order() -> None:
    names = [f.name for f in attrs.fields(AgentResponse)]
    assert names[:10] == [
        "id",
        "model",
        "text",
        "reasoning_text",
        "tool_calls",
        "tool_messages",
        "turn_transcript",
        "finish_reason",
        "usage",
        "source_agent_id",
    ]


def _full_response() -> AgentResponse:
    call = ToolCall("call_1", "read", {"path": "ä.py"})
    return AgentResponse(
        "resp_1",
        "gpt-x",
        "Reading. Done 😀",
        "hmm",
        [call],
        [ChatMessage.tool("42", "call_1")],
        [
            ChatMessage.assistant_with_tools("Reading.", [call]),
            ChatMessage.tool("42", "call_1"),
            ChatMessage.assistant(" Done 😀"),
        ],
        FinishReason.STOP,
        Usage(1, 2, 3),
        "agent-7",
    )


def test_agent_response_holds_tuples_and_is_frozen() -> None:
    response = _full_response()
    assert type(response.tool_calls) is tuple
    assert type(response.tool_messages) is tuple
    assert type(response.turn_transcript) is tuple
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        response.text = "changed"  # type: ignore[misc]
    assert response == _full_response()
    assert response != attrs.evolve(response, usage=Usage(1, 2, 4))


def test_agent_response_to_dict_is_json_ready() -> None:
    data = _full_response().to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["finish_reason"] == "stop"
    assert data["tool_calls"][0]["arguments"] == {"path": "ä.py"}
    assert data["turn_transcript"][0]["tool_calls"][0]["name"] == "read"
    assert data["usage"]["total_tokens"] == 3
    assert data["interrupted"] is False


# ---------------------------------------------------------------- events

ALL_EVENTS: list[Any] = [
    ResponseStartedEvent("resp_1", "gpt-x"),
    ToolApprovalRequestEvent("call_1", "rm", {"path": "/"}, "delete"),
    FinishEvent(FinishReason.LENGTH, Usage(1, 1, 2)),
]


def test_there_are_three_events_and_the_union_holds_exactly_them() -> None:
    assert set(typing.get_args(Event)) == {type(e) for e in ALL_EVENTS}


def test_event_defaults() -> None:
    assert ResponseStartedEvent() == ResponseStartedEvent(None, None)
    assert ToolApprovalRequestEvent("c", "n", {}).description == ""
    assert FinishEvent(FinishReason.STOP).usage is None


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_events_are_frozen_equal_by_value_and_readable(event: Any) -> None:
    first = attrs.fields(type(event))[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(event, first, "x")
    assert attrs.evolve(event) == event
    assert repr(event).startswith(f"{type(event).__name__}({first}=")


def describe(event: Event) -> str:
    match event:
        case ResponseStartedEvent(response_id, model):
            return f"started {response_id} {model}"
        case ToolApprovalRequestEvent(call_id, name, arguments, description):
            return f"approve {call_id} {name} {arguments} {description}"
        case FinishEvent(reason, usage):
            return f"finish {reason} {usage and usage.total_tokens}"
        case _:
            typing.assert_never(event)


def test_pattern_matching_on_every_event() -> None:
    assert [describe(e) for e in ALL_EVENTS] == [
        "started resp_1 gpt-x",
        "approve call_1 rm {'path': '/'} delete",
        "finish length 2",
    ]
