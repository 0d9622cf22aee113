"""ChatMessage.to_dict / from_dict: a history kept in a file or a database comes back whole.

Every message every recorded stream puts in a turn's transcript, and arbitrary
messages with every field set, must survive ``to_dict`` → strict JSON →
``from_dict`` unchanged: a continuation that loses a thinking signature or an
``is_error`` is refused or misread by the provider.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from rafrx import operators as ops
from rafrx._finite import finite
from rafrx.messages import (
    ANTHROPIC_THINKING,
    OPENAI_REASONING,
    ChatMessage,
    ToolCall,
)
from rafrx.response import AgentResponse
from rafrx.sources import from_sse
from tests.strategies import (
    anthropic_conversations,
    json_values,
    openai_messages,
    stored_messages,
)

FIXTURES = Path(__file__).resolve().parent / "data" / "fixtures"
MANIFEST: list[dict[str, Any]] = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
STREAMS = [entry for entry in MANIFEST if entry["format"] != "sse-only"]


def _stored(message: ChatMessage) -> ChatMessage:
    """``message`` written as strict JSON text and read back."""
    text = json.dumps(message.to_dict(), ensure_ascii=False, allow_nan=False)
    return ChatMessage.from_dict(json.loads(text))


def _transcript(entry: dict[str, Any]) -> tuple[ChatMessage, ...]:
    results: list[AgentResponse] = []
    pipeline = from_sse([(FIXTURES / entry["path"]).read_bytes()], dialect=entry["format"])
    pipeline.pipe(ops.convert(), ops.aggregate()).subscribe(results.append, lambda _: None)
    return results[0].turn_transcript if results else ()


@pytest.mark.parametrize("entry", STREAMS, ids=[e["path"] for e in STREAMS])
def test_every_recorded_turn_is_stored_and_read_back_equal(entry: dict[str, Any]) -> None:
    for message in _transcript(entry):
        assert _stored(message) == message


def test_the_recorded_turns_store_what_continuations_need() -> None:
    """The fixtures do hold the opaque blocks the round trip above must keep."""
    kept: set[str] = set()
    for entry in STREAMS:
        for message in _transcript(entry):
            kept.update(message.provider_data or ())
    assert {ANTHROPIC_THINKING, OPENAI_REASONING} <= kept


#: JSON values strict JSON carries as they are (an infinity goes as null: tested below).
_values = json_values().filter(lambda value: finite(value) == value)
_messages = stored_messages(_values)


@given(_messages)
def test_any_message_with_every_field_comes_back_equal(message: ChatMessage) -> None:
    assert _stored(message) == message


def _all_finite(message: ChatMessage) -> bool:
    return all(finite(call.arguments) == call.arguments for call in message.tool_calls or ())


@given(openai_messages(), anthropic_conversations())
def test_the_wire_strategies_messages_come_back_equal(
    message: ChatMessage, conversation: list[ChatMessage]
) -> None:
    for each in filter(_all_finite, [message, *conversation]):
        assert _stored(each) == each


def test_fields_at_their_default_are_left_out() -> None:
    assert ChatMessage.user("hi").to_dict() == {"role": "user", "content": "hi"}
    assert ChatMessage.from_dict({"role": "user"}) == ChatMessage.user("")


def test_a_failed_tool_result_keeps_is_error_and_source() -> None:
    failed = ChatMessage.tool("Error: boom", "call_1", is_error=True)
    data = failed.to_dict()
    assert data["is_error"] is True
    assert data["source"] == "tool_result"
    assert _stored(failed).is_error


def test_nan_and_infinity_go_as_null_and_the_raw_text_is_kept() -> None:
    call = ToolCall("c1", "f", {"x": math.nan, "y": [math.inf]}, raw_arguments='{"x": NaN}')
    message = ChatMessage.assistant_with_tools("", [call])
    text = json.dumps(message.to_dict(), allow_nan=False)  # strict JSON: no ValueError
    back = ChatMessage.from_dict(json.loads(text))
    assert back.tool_calls is not None
    assert back.tool_calls[0].arguments == {"x": None, "y": [None]}
    assert back.tool_calls[0].raw_arguments == '{"x": NaN}'


def test_provider_data_is_copied_not_shared() -> None:
    blocks = ({"type": "thinking", "thinking": "hm", "signature": "sig"},)
    message = ChatMessage("assistant", "a", provider_data={ANTHROPIC_THINKING: blocks})
    data = message.to_dict()
    data["provider_data"][ANTHROPIC_THINKING][0]["signature"] = "changed"
    assert blocks[0]["signature"] == "sig"


def test_unknown_keys_are_ignored_and_a_bad_role_is_refused() -> None:
    data = {"role": "assistant", "content": "x", "stored_at": "2026-12-06", "tool_calls": None}
    assert ChatMessage.from_dict(data) == ChatMessage.assistant("x")
    call = {"id": "c1", "name": "f", "arguments": {}, "rank": 3}
    assert ToolCall.from_dict(call) == ToolCall("c1", "f", {})
    with pytest.raises(ValueError, match="'robot' is not a valid MessageRole"):
        ChatMessage.from_dict({"role": "robot", "content": "beep"})
