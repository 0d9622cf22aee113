"""Messages: roles, sources, tool calls, constructors and the OpenAI / Anthropic wire forms."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import assume, given, settings

from rafrx.messages import (
    ANTHROPIC_THINKING,
    OPENAI_REASONING,
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
    from_anthropic,
    provider_data_of,
    to_anthropic,
)
from rafrx.sources.clients import to_responses_input
from tests.strategies import anthropic_conversations, argument_objects, openai_messages

CALL = ToolCall("call_1", "read_file", {"path": "a.py", "opts": {"lines": [1, 2]}})

# ---------------------------------------------------------------- enums and values


def test_role_values() -> None:
    assert [(r.name, r.value) for r in MessageRole] == [
        ("SYSTEM", "system"),
        ("USER", "user"),
        ("ASSISTANT", "assistant"),
        ("TOOL", "tool"),
    ]
    assert MessageRole("tool") is MessageRole.TOOL


def test_source_members() -> None:
    assert [s.name for s in MessageSource] == [
        "EXTERNAL",
        "CHAT_HISTORY",
        "CONTEXT_PROVIDER",
        "TOOL_RESULT",
    ]


def test_tool_call_fields_defaults_and_immutability() -> None:
    assert (CALL.id, CALL.name, CALL.arguments) == ("call_1", "read_file", CALL.arguments)
    assert ToolCall("c", "f").arguments == {}
    assert (CALL.raw_arguments, CALL.error) == (None, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        CALL.name = "other"  # type: ignore[misc]
    assert ToolCall("c", "f", {"a": 1}) == ToolCall("c", "f", {"a": 1})
    assert ToolCall("c", "f", {"a": 1}) != ToolCall("c", "f", {"a": 2})
    match CALL:
        case ToolCall(call_id, name, {"path": path}):
            assert (call_id, name, path) == ("call_1", "read_file", "a.py")
        case _:
            pytest.fail("no match")


def test_tool_call_arguments_json() -> None:
    assert json.loads(CALL.arguments_json()) == CALL.arguments
    assert ToolCall("c", "f", {"q": "中😀"}).arguments_json() == '{"q": "中😀"}'
    broken = ToolCall("c", "f", None, raw_arguments='{"q": ', error="invalid JSON")
    assert broken.arguments_json() == '{"q": '


# ---------------------------------------------------------------- ChatMessage


def test_named_constructors() -> None:
    assert ChatMessage.system("Be brief.") == ChatMessage(MessageRole.SYSTEM, "Be brief.")
    assert ChatMessage.user("Hi") == ChatMessage(MessageRole.USER, "Hi")
    assert ChatMessage.assistant("Hello") == ChatMessage(MessageRole.ASSISTANT, "Hello")
    with_tools = ChatMessage.assistant_with_tools("Reading.", [CALL])
    assert with_tools.role is MessageRole.ASSISTANT
    assert with_tools.tool_calls == (CALL,)
    tool = ChatMessage.tool("42", "call_1")
    assert (tool.role, tool.content, tool.tool_call_id) == (MessageRole.TOOL, "42", "call_1")
    assert tool.source is MessageSource.TOOL_RESULT
    assert ChatMessage.user("x", source=MessageSource.CHAT_HISTORY).source is (
        MessageSource.CHAT_HISTORY
    )


def test_defaults() -> None:
    msg = ChatMessage(MessageRole.USER)
    assert msg.content == ""
    assert (msg.name, msg.tool_calls, msg.tool_call_id, msg.source) == (None, None, None, None)
    assert (msg.reasoning, msg.provider_data) == (None, None)


def test_role_given_as_string_is_converted_and_tool_calls_become_a_tuple() -> None:
    msg = ChatMessage("assistant", "x", tool_calls=[CALL])  # type: ignore[arg-type]
    assert msg.role is MessageRole.ASSISTANT
    assert msg.tool_calls == (CALL,)
    assert type(msg.tool_calls) is tuple
    with pytest.raises(ValueError, match="robot"):
        ChatMessage("robot")  # type: ignore[arg-type]


def test_chat_message_is_frozen_equal_by_value_and_readable() -> None:
    msg = ChatMessage.user("Hi 😀")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        msg.content = "changed"  # type: ignore[misc]
    assert msg == ChatMessage.user("Hi 😀")
    assert msg != ChatMessage.assistant("Hi 😀")
    assert msg != msg.with_source(MessageSource.EXTERNAL)
    assert repr(msg).startswith("ChatMessage(role=<MessageRole.USER: 'user'>, content='Hi 😀'")


def test_a_message_renders_as_escaped_html_in_jupyter() -> None:
    call = ToolCall("call_1", "read_file", {"path": "<a.py>"})
    msg = ChatMessage.assistant_with_tools("<b>Reading</b> & more", [call])
    html = msg._repr_html_()
    assert html.startswith('<div class="rafrx-message"><b>assistant</b>: ')
    assert "&lt;b&gt;Reading&lt;/b&gt; &amp; more" in html
    assert "<b>read_file</b>" in html
    assert "&quot;&lt;a.py&gt;&quot;" in html
    assert "<a.py>" not in html
    assert "<code>call_1</code>" in html


def test_with_source_changes_only_the_source() -> None:
    msg = ChatMessage.assistant_with_tools("a", [CALL])
    marked = msg.with_source(MessageSource.CHAT_HISTORY)
    assert marked.source is MessageSource.CHAT_HISTORY
    assert attrs.evolve(marked, source=None) == msg


def test_pattern_matching_on_messages() -> None:
    def kind(msg: ChatMessage) -> str:
        match msg:
            case ChatMessage(MessageRole.TOOL, result, tool_call_id=call_id):
                return f"tool {call_id}: {result}"
            case ChatMessage(MessageRole.ASSISTANT, text, tool_calls=(ToolCall(name=name), *_)):
                return f"assistant calls {name}: {text}"
            case ChatMessage(role, text):
                return f"{role} {text}"
            case _:
                return "?"

    assert kind(ChatMessage.tool("42", "c1")) == "tool c1: 42"
    assert kind(ChatMessage.assistant_with_tools("ok", [CALL])) == "assistant calls read_file: ok"
    assert kind(ChatMessage.user("hi")) == "user hi"


# ---------------------------------------------------------------- OpenAI wire


def test_to_openai_shapes() -> None:
    assert ChatMessage.user("Hi").to_openai() == {"role": "user", "content": "Hi"}
    named = ChatMessage(MessageRole.USER, "Hi", name="ann").to_openai()
    assert named == {"role": "user", "content": "Hi", "name": "ann"}
    wire = ChatMessage.assistant_with_tools("", [CALL]).to_openai()
    assert wire == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "read_file",
                    "arguments": '{"path": "a.py", "opts": {"lines": [1, 2]}}',
                },
            }
        ],
    }
    assert ChatMessage.tool("42", "call_1").to_openai() == {
        "role": "tool",
        "content": "42",
        "tool_call_id": "call_1",
    }
    reasoning = ChatMessage(MessageRole.ASSISTANT, "4", reasoning="2+2").to_openai()
    assert reasoning == {"role": "assistant", "content": "4", "reasoning_content": "2+2"}


def test_source_never_goes_on_the_wire() -> None:
    msg = ChatMessage.user("x", source=MessageSource.CONTEXT_PROVIDER)
    assert "source" not in msg.to_openai()
    assert "context_provider" not in json.dumps(msg.to_openai())
    assert "context_provider" not in json.dumps(to_anthropic([msg]))


def test_from_openai_reads_content_parts_and_null_content() -> None:
    parts = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look "},
            {"type": "image_url", "image_url": {"url": "data:..."}},
            {"type": "text", "text": "here"},
        ],
    }
    assert ChatMessage.from_openai(parts) == ChatMessage.user("Look here")
    assert ChatMessage.from_openai({"role": "assistant", "content": None}).content == ""
    assert ChatMessage.from_openai({"role": "assistant"}).content == ""


def test_from_openai_tool_call_arguments() -> None:
    def call(arguments: Any) -> ToolCall:
        wire = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": arguments}}],
        }
        calls = ChatMessage.from_openai(wire).tool_calls
        assert calls is not None
        return calls[0]

    assert call('{"a": [1, "中"]}') == ToolCall("c", "f", {"a": [1, "中"]})
    assert call("") == ToolCall("c", "f", {})
    assert call(None) == ToolCall("c", "f", {})
    assert call({"already": "parsed"}) == ToolCall("c", "f", {"already": "parsed"})
    broken = call('{"a": tru')
    assert broken.arguments is None
    assert broken.raw_arguments == '{"a": tru'
    assert broken.error is not None
    assert broken.error.startswith("invalid JSON")


def test_invalid_arguments_survive_a_round_trip_byte_exact() -> None:
    raw = '{"path": "a.py", "content": "unterminated'
    msg = ChatMessage.from_openai(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "function": {"name": "write", "arguments": raw}}],
        }
    )
    assert msg.to_openai()["tool_calls"][0]["function"]["arguments"] == raw
    assert ChatMessage.from_openai(msg.to_openai()) == msg


@settings(max_examples=150, deadline=None)
@given(openai_messages())
def test_openai_round_trip(msg: ChatMessage) -> None:
    wire = msg.to_openai()
    assert json.loads(json.dumps(wire)) == wire  # plain JSON
    for call in wire.get("tool_calls") or ():
        json.loads(call["function"]["arguments"], parse_constant=_refuse)  # strict JSON
    # an infinity goes as null (JSON has none), so only finite arguments come back equal
    assume(all(_is_strict_json(c.arguments) for c in msg.tool_calls or ()))
    assert ChatMessage.from_openai(wire) == msg


def _is_strict_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


@settings(max_examples=50, deadline=None)
@given(argument_objects())
def test_openai_arguments_are_a_json_string_that_parses_back(arguments: dict[str, Any]) -> None:
    wire = ChatMessage.assistant_with_tools("", [ToolCall("c", "f", arguments)]).to_openai()
    encoded = wire["tool_calls"][0]["function"]["arguments"]
    assert isinstance(encoded, str)
    strict = json.loads(encoded, parse_constant=_refuse)  # no NaN/Infinity: strict JSON
    assert strict == json.loads(json.dumps(arguments), parse_constant=lambda _: None)  # inf: null


def _refuse(constant: str) -> Any:
    raise ValueError(f"not JSON: {constant}")


# ---------------------------------------------------------------- Anthropic wire


def test_to_anthropic_splits_out_and_joins_system_messages() -> None:
    system, wire = to_anthropic(
        [ChatMessage.system("One."), ChatMessage.user("Hi"), ChatMessage.system("Two.")]
    )
    assert system == "One.\n\nTwo."
    assert wire == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert to_anthropic([ChatMessage.user("Hi")])[0] is None


def test_to_anthropic_tool_use_and_merged_tool_results() -> None:
    call_b = ToolCall("call_2", "list_dir", {"path": "."})
    thinking = {"type": "thinking", "thinking": "Let me look.", "signature": "sig=="}
    _, wire = to_anthropic(
        [
            ChatMessage.user("What is in a.py?"),
            ChatMessage(
                MessageRole.ASSISTANT,
                "Reading.",
                tool_calls=[CALL, call_b],
                reasoning="Let me look.",
                provider_data={ANTHROPIC_THINKING: (thinking,)},
            ),
            ChatMessage.tool("print(1)", "call_1"),
            ChatMessage.tool("a.py", "call_2"),
        ]
    )
    assert wire[1] == {
        "role": "assistant",
        "content": [
            thinking,
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "call_1", "name": "read_file", "input": CALL.arguments},
            {"type": "tool_use", "id": "call_2", "name": "list_dir", "input": {"path": "."}},
        ],
    }
    assert wire[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "print(1)"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "a.py"},
        ],
    }
    assert len(wire) == 3


def test_tool_results_never_merge_into_a_user_message() -> None:
    msgs = [ChatMessage.user("look"), ChatMessage.tool("r", "c1", source=None)]
    _, wire = to_anthropic(msgs)
    assert len(wire) == 2
    assert from_anthropic(*to_anthropic(msgs)) == msgs


def test_an_empty_user_message_is_left_out_of_the_anthropic_messages() -> None:
    # Anthropic refuses an empty content list; the tool results around it are one run.
    a, b = ChatMessage.tool("a", "c1", source=None), ChatMessage.tool("b", "c2", source=None)
    _, wire = to_anthropic([a, ChatMessage.user(""), b])
    assert wire == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "a"},
                {"type": "tool_result", "tool_use_id": "c2", "content": "b"},
            ],
        }
    ]
    assert from_anthropic(None, wire) == [a, b]


def test_from_anthropic_reads_string_content_and_tool_result_parts() -> None:
    msgs = from_anthropic(
        None,
        [
            {"role": "user", "content": "Hi"},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": [{"type": "text", "text": "4"}, {"type": "text", "text": "2"}],
                    }
                ],
            },
        ],
    )
    assert msgs == [ChatMessage.user("Hi"), ChatMessage.tool("42", "c1", source=None)]


def test_from_anthropic_keeps_thinking_blocks_as_provider_data() -> None:
    blocks = (
        {"type": "thinking", "thinking": "step 1. ", "signature": "s1"},
        {"type": "redacted_thinking", "data": "opaque=="},
        {"type": "thinking", "thinking": "step 2.", "signature": "s2"},
    )
    [msg] = from_anthropic(
        None, [{"role": "assistant", "content": [*blocks, {"type": "text", "text": "Done."}]}]
    )
    assert msg.content == "Done."
    assert msg.reasoning == "step 1. step 2."
    assert msg.provider_data == {ANTHROPIC_THINKING: blocks}
    _, wire = to_anthropic([msg])
    assert wire[0]["content"][:3] == list(blocks)


@settings(max_examples=100, deadline=None)
@given(anthropic_conversations())
def test_anthropic_round_trip_keeps_every_field(msgs: list[ChatMessage]) -> None:
    system, wire = to_anthropic(msgs)
    assert json.loads(json.dumps(wire, allow_nan=False)) == wire  # strict JSON
    for message in wire:  # roles alternate no more than the input did; no empty tool runs
        assert message["role"] in ("user", "assistant")
        assert message["content"]
    # every field comes back, of every message Anthropic can carry (not an empty user one,
    # nor an infinity in the arguments: it goes as null)
    assume(all(_is_strict_json(c.arguments) for m in msgs for c in m.tool_calls or ()))
    assume(all(m.content == "" or m.content.strip() for m in msgs))  # (whitespace: not sent)
    assume(not any(m.is_error and not m.content for m in msgs))  # sent as "Error"
    ids = [c.id for m in msgs for c in m.tool_calls or ()]
    assume(len(ids) == len(set(ids)))  # (a repeated id is made unique: see below)
    # (nor an empty system text: Anthropic refuses a blank system)
    sent = [m for m in msgs if m.content or m.role not in (MessageRole.USER, MessageRole.SYSTEM)]
    assert from_anthropic(system, wire) == sent


@settings(max_examples=100, deadline=None)
@given(anthropic_conversations())
def test_anthropic_tool_use_ids_are_unique_and_each_result_follows_its_call(
    msgs: list[ChatMessage],
) -> None:
    _, wire = to_anthropic(msgs)
    blocks = [b for m in wire for b in m["content"]]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    assert len(uses) == len(set(uses))
    made: set[str] = set()  # answering a call made before it, a result answers a call made
    for m in msgs:  # before it on the wire too
        made.update(c.id for c in m.tool_calls or ())
        assume(m.role is not MessageRole.TOOL or m.tool_call_id in made)
    for position, block in enumerate(blocks):
        if block["type"] == "tool_result":
            earlier = [b.get("id") for b in blocks[:position] if b["type"] == "tool_use"]
            assert block["tool_use_id"] in earlier


def test_to_anthropic_sends_an_object_for_a_call_with_invalid_arguments() -> None:
    broken = ToolCall("c1", "f", None, raw_arguments='{"a": ', error="invalid JSON")
    _, wire = to_anthropic([ChatMessage.assistant_with_tools("", [broken])])
    assert wire[0]["content"][0]["input"] == {}


def test_to_anthropic_leaves_out_whitespace_only_text() -> None:
    """Anthropic refuses a text block of whitespace only ("text content blocks
    must contain non-whitespace text"); Claude often streams "\n\n" before a call."""
    call = ToolCall("c1", "lookup", {"city": "Oslo"})
    _, wire = to_anthropic(
        [
            ChatMessage.user("Weather?"),
            ChatMessage.assistant_with_tools("\n\n", [call]),
            ChatMessage.tool("Sunny", "c1"),
            ChatMessage.user(" \t"),
        ]
    )
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert [b["type"] for b in wire[1]["content"]] == ["tool_use"]
    assert [b["type"] for b in wire[2]["content"]] == ["tool_result"]


def test_each_wire_format_sends_back_only_its_own_provider_blocks() -> None:
    thinking = {"type": "thinking", "thinking": "Hm.", "signature": "sig"}
    redacted = {"type": "redacted_thinking", "data": "RU5D"}
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
    data = provider_data_of([thinking, item, redacted])
    assert data == {ANTHROPIC_THINKING: (thinking, redacted), OPENAI_REASONING: (item,)}
    assert provider_data_of([]) is None
    assert provider_data_of(["opaque"]) == {ANTHROPIC_THINKING: ("opaque",)}
    message = ChatMessage(
        MessageRole.ASSISTANT,
        "On it.",
        tool_calls=[ToolCall("c1", "now", {})],
        reasoning="Hm.",
        provider_data=data,
    )
    assert to_responses_input([message]) == [
        item,
        {"role": "assistant", "content": "On it."},
        {"type": "function_call", "call_id": "c1", "name": "now", "arguments": "{}"},
    ]
    _, wire = to_anthropic([message])
    assert [b["type"] for b in wire[0]["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
    ]
    assert "reasoning_content" in message.to_openai()
    assert "openai_reasoning" not in json.dumps(message.to_openai())
