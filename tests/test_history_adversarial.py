"""Adversarial tests for history on the wire: rafrx messages <-> OpenAI chat, Anthropic, Responses.

A transcript must go back to each provider in a form its API accepts (tool
results right after the call that asked for them, no empty content lists,
ids kept, signed thinking blocks kept for Anthropic) and, where the format
can carry it, come back unchanged.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import (
    ANTHROPIC_THINKING,
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
    from_anthropic,
    to_anthropic,
)
from rafrx.operators import aggregate, convert
from rafrx.sources import from_sse
from rafrx.sources.clients import to_responses_input

TRICKY = '"\\/\n\t\x00 é中\u2028\ufeff😀𝄞{}[]'


def texts(min_size: int = 0) -> st.SearchStrategy[str]:
    return st.text(min_size=min_size, max_size=12) | st.text(TRICKY, min_size=min_size, max_size=12)


def json_values() -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**80), 2**80)
        | st.floats(allow_nan=False, allow_infinity=False)
        | texts()
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts(), inner, max_size=3),
        max_leaves=6,
    )


def strict_json(value: Any) -> Any:
    """``value`` through strict JSON, as an API reads a request body."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(json.dumps(value, allow_nan=False), parse_constant=refuse)


# ---------------------------------------------------------------- conversations


@st.composite
def tool_loop(draw: st.DrawFn, *, thinking: bool = True) -> list[ChatMessage]:
    """A well-formed agent conversation: each call is answered right after its turn."""
    ids = itertools.count()
    out: list[ChatMessage] = []
    if draw(st.booleans()):
        out.append(ChatMessage.system(draw(texts(1))))
    for _ in range(draw(st.integers(1, 2))):
        out.append(ChatMessage.user(draw(texts(1))))
        for _ in range(draw(st.integers(0, 2))):
            calls = [
                ToolCall(
                    f"toolu_{next(ids)}", draw(st.sampled_from(["now", "read_file", "f-1"])), args
                )
                for args in draw(
                    st.lists(
                        st.dictionaries(texts(), json_values(), max_size=3), min_size=1, max_size=3
                    )
                )
            ]
            blocks = draw(st.none() | thinking_blocks()) if thinking else None
            out.append(assistant(draw(texts()), calls, blocks))
            out.extend(ChatMessage.tool(draw(texts()), c.id, source=None) for c in calls)
        blocks = draw(st.none() | thinking_blocks()) if thinking else None
        out.append(assistant(draw(texts(1)), None, blocks))
    return out


def thinking_blocks() -> st.SearchStrategy[tuple[dict[str, Any], ...]]:
    signed = st.builds(
        lambda text, sig: {"type": "thinking", "thinking": text, "signature": sig},
        texts(1),
        st.text("ABCabc012+/=", min_size=4, max_size=16),
    )
    redacted = st.builds(
        lambda data: {"type": "redacted_thinking", "data": data}, st.text("ABC=", min_size=1)
    )
    return st.lists(signed | redacted, min_size=1, max_size=3).map(tuple)


def assistant(
    text: str, calls: list[ToolCall] | None, blocks: tuple[dict[str, Any], ...] | None
) -> ChatMessage:
    reasoning = "".join(b.get("thinking", "") for b in blocks or ()) or None
    return ChatMessage(
        MessageRole.ASSISTANT,
        text,
        tool_calls=calls,
        reasoning=reasoning,
        provider_data={ANTHROPIC_THINKING: blocks} if blocks else None,
    )


# ---------------------------------------------------------------- OpenAI chat


def assert_openai_rules(wire: list[dict[str, Any]]) -> None:
    for i, message in enumerate(wire):
        assert message["role"] in ("system", "user", "assistant", "tool")
        if message.get("tool_calls"):
            ids = [c["id"] for c in message["tool_calls"]]
            answers = [m["tool_call_id"] for m in wire[i + 1 : i + 1 + len(ids)]]
            assert answers == ids  # every call answered, right after its turn
            for call in message["tool_calls"]:
                assert call["type"] == "function"
                assert isinstance(call["function"]["arguments"], str)
        else:
            assert "tool_calls" not in message
            assert isinstance(message["content"], str)
        if message["role"] == "tool":
            assert isinstance(message["content"], str)


@settings(max_examples=120, deadline=None)
@given(tool_loop(thinking=False))
def test_openai_chat_tool_loops_are_valid_and_round_trip(messages: list[ChatMessage]) -> None:
    wire = [m.to_openai() for m in messages]
    assert strict_json(wire) == wire
    assert_openai_rules(wire)
    assert [ChatMessage.from_openai(m) for m in strict_json(wire)] == messages


@settings(max_examples=120, deadline=None)
@given(
    st.lists(json_values(), min_size=1, max_size=4),
    texts(),
    st.none() | texts(),
)
def test_openai_chat_round_trips_any_json_arguments_and_reasoning(
    arguments: list[Any], text: str, reasoning: str | None
) -> None:
    # Arguments that are not objects (a list, a string, null...) still round trip.
    calls = [ToolCall(f"call_{i}", "f", a) for i, a in enumerate(arguments)]
    msg = ChatMessage(MessageRole.ASSISTANT, text, tool_calls=calls, reasoning=reasoning)
    wire = strict_json(msg.to_openai())
    assert [json.loads(c["function"]["arguments"]) for c in wire["tool_calls"]] == arguments
    assert wire["content"] == (text or None)
    assert ChatMessage.from_openai(wire) == msg


@pytest.mark.parametrize(
    "raw",
    ['{"a": ', "not json", '{"a": 1}}', "[1, 2", '"unterminated', "{'a': 1}"],
)
def test_unparseable_openai_arguments_are_kept_verbatim_but_anthropic_gets_an_object(
    raw: str,
) -> None:
    data = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": raw}}
        ],
    }
    msg = ChatMessage.from_openai(data)
    [call] = msg.tool_calls or ()
    assert call.error is not None
    assert call.raw_arguments == raw
    assert msg.to_openai() == data
    assert to_responses_input([msg])[0]["arguments"] == raw
    _, wire = to_anthropic([msg])
    assert wire[0]["content"] == [{"type": "tool_use", "id": "call_9", "name": "f", "input": {}}]


def test_openai_content_parts_of_every_text_kind_are_joined() -> None:
    msg = ChatMessage.from_openai(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "é"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "input_text", "text": "😀"},
                "raw",
            ],
        }
    )
    assert msg == ChatMessage.user("é😀raw")


# ---------------------------------------------------------------- Anthropic


def assert_anthropic_rules(wire: list[dict[str, Any]]) -> None:
    for i, message in enumerate(wire):
        assert message["role"] in ("user", "assistant")
        assert message["content"], f"messages.{i}: empty content"
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if message["role"] == "assistant":
            kinds = [b["type"] for b in message["content"]]
            thinking = [k for k in kinds if k in ("thinking", "redacted_thinking")]
            assert kinds[: len(thinking)] == thinking  # thinking blocks first
            for block in message["content"]:
                if block["type"] == "tool_use":
                    assert isinstance(block["input"], dict)
                if block["type"] == "text":
                    assert block["text"]
        if uses:
            following = wire[i + 1]
            assert following["role"] == "user"
            results = [b["tool_use_id"] for b in following["content"] if b["type"] == "tool_result"]
            assert results == uses
            assert [b["type"] for b in following["content"][: len(uses)]] == ["tool_result"] * len(
                uses
            )


@settings(max_examples=120, deadline=None)
@given(tool_loop())
def test_anthropic_tool_loops_are_valid_and_round_trip(messages: list[ChatMessage]) -> None:
    system, wire = to_anthropic(messages)
    assert strict_json(wire) == wire
    assert_anthropic_rules(wire)
    # whitespace-only text is not sent (test_messages pins it): no round trip for it
    assume(all(m.content == "" or m.content.strip() for m in messages))
    has_system = messages[0].role is MessageRole.SYSTEM
    assert system == (messages[0].content if has_system else None)
    assert from_anthropic(system, strict_json(wire)) == messages
    # every signed thinking block goes back verbatim, in order
    sent = [b for m in wire for b in m["content"] if b["type"] in ("thinking", "redacted_thinking")]
    kept = [b for m in messages for b in (m.provider_data or {}).get(ANTHROPIC_THINKING, ())]
    assert sent == kept


@settings(max_examples=60, deadline=None)
@given(tool_loop(), st.lists(texts(1), min_size=1, max_size=3))
def test_anthropic_context_system_messages_anywhere_never_split_a_tool_result_run(
    messages: list[ChatMessage], facts: list[str]
) -> None:
    # Context providers inject system messages; wherever they land, they go on top.
    mixed = list(messages)
    for i, fact in enumerate(facts):
        mixed.insert(
            min(len(mixed), 1 + 2 * i),
            ChatMessage.system(fact, source=MessageSource.CONTEXT_PROVIDER),
        )
    system, wire = to_anthropic(mixed)
    assert_anthropic_rules(wire)
    shown = [fact for fact in facts if fact.strip()]  # (a blank system text is not sent)
    own = [m.content for m in messages if m.role is MessageRole.SYSTEM and m.content.strip()]
    assert (system is not None) == bool(shown or own)
    for fact in shown:
        assert fact in (system or "")


def test_anthropic_stream_to_transcript_to_request_keeps_signed_thinking_first() -> None:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    def block(index: int, content: dict[str, Any], *deltas: dict[str, Any]) -> list[bytes]:
        start = {"type": "content_block_start", "index": index, "content_block": content}
        middle = [
            event(
                "content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}
            )
            for d in deltas
        ]
        stop = event("content_block_stop", {"type": "content_block_stop", "index": index})
        return [event("content_block_start", start), *middle, stop]

    message = {
        "id": "msg_1",
        "model": "claude",
        "role": "assistant",
        "content": [],
        "usage": {"input_tokens": 3},
    }
    chunks = [
        event("message_start", {"type": "message_start", "message": message}),
        *block(
            0,
            {"type": "thinking", "thinking": ""},
            {"type": "thinking_delta", "thinking": "Think é 😀."},
            {"type": "signature_delta", "signature": "SIG=="},
        ),
        *block(1, {"type": "redacted_thinking", "data": "OPAQUE=="}),
        *block(2, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Checking."}),
        *block(
            3,
            {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}},
            {"type": "input_json_delta", "partial_json": '{"tz": "Europe/Paris",'},
            {"type": "input_json_delta", "partial_json": ' "n": [1, 2]}'},
        ),
        *block(4, {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}),
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 9},
            },
        ),
        event("message_stop", {"type": "message_stop"}),
    ]
    responses: list[Any] = []
    from_sse(chunks, dialect="anthropic").pipe(convert(), aggregate()).subscribe(responses.append)
    [step] = responses[0].turn_transcript
    transcript = [
        ChatMessage.user("Time?"),
        step,
        ChatMessage.tool("12:00", "toolu_1"),
        ChatMessage.tool("", "toolu_2"),
    ]
    _, wire = to_anthropic(transcript)
    assert_anthropic_rules(wire)
    assert wire[1]["content"] == [
        {"type": "thinking", "thinking": "Think é 😀.", "signature": "SIG=="},
        {"type": "redacted_thinking", "data": "OPAQUE=="},
        {"type": "text", "text": "Checking."},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "now",
            "input": {"tz": "Europe/Paris", "n": [1, 2]},
        },
        {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}},
    ]
    assert [b["tool_use_id"] for b in wire[2]["content"]] == ["toolu_1", "toolu_2"]


@pytest.mark.parametrize("arguments", [[1, 2], "text", 3, None, True])
def test_anthropic_input_is_an_object_for_non_object_arguments(arguments: Any) -> None:
    msg = ChatMessage.assistant_with_tools("", [ToolCall("c1", "f", arguments)])
    _, wire = to_anthropic([ChatMessage.user("go"), msg, ChatMessage.tool("r", "c1")])
    assert wire[1]["content"][0]["input"] == {}
    assert_anthropic_rules(wire)


# ---------------------------------------------------------------- Responses


def assert_responses_rules(items: list[dict[str, Any]]) -> None:
    called: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            assert set(item) == {"type", "call_id", "name", "arguments"}
            assert isinstance(item["arguments"], str)
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert set(item) == {"type", "call_id", "output"}
            assert item["call_id"] in called  # after its call
            assert isinstance(item["output"], str)
        else:
            assert set(item) == {"role", "content"}
            assert item["role"] in ("system", "developer", "user", "assistant")
            assert isinstance(item["content"], str)


@settings(max_examples=120, deadline=None)
@given(tool_loop())
def test_responses_tool_loops_are_valid_and_keep_ids_text_and_arguments(
    messages: list[ChatMessage],
) -> None:
    items = strict_json(to_responses_input(messages))
    assert_responses_rules(items)
    calls = [c for m in messages for c in m.tool_calls or ()]
    sent = [i for i in items if i.get("type") == "function_call"]
    assert [(i["call_id"], i["name"], json.loads(i["arguments"])) for i in sent] == [
        (c.id, c.name, c.arguments) for c in calls
    ]
    outputs = [
        (i["call_id"], i["output"]) for i in items if i.get("type") == "function_call_output"
    ]
    assert outputs == [(m.tool_call_id, m.content) for m in messages if m.role is MessageRole.TOOL]
    said = [i["content"] for i in items if "role" in i]
    assert said == [
        m.content
        for m in messages
        if m.role is not MessageRole.TOOL and (m.content or not m.tool_calls)
    ]


# ---------------------------------------------------------------- history providers


@settings(max_examples=40, deadline=None)
@given(tool_loop())
def test_saved_and_loaded_history_goes_on_every_wire_unchanged(messages: list[ChatMessage]) -> None:
    history = InMemoryHistoryProvider()
    asyncio.run(history.save(messages))
    loaded = list(asyncio.run(history.load()))
    assert [m.with_source(None) for m in loaded] == messages
    assert to_anthropic(loaded) == to_anthropic(messages)
    assert [m.to_openai() for m in loaded] == [m.to_openai() for m in messages]
    assert to_responses_input(loaded) == to_responses_input(messages)


# ================================================================ bugs (each test fails today)


def test_from_openai_reads_the_developer_role() -> None:
    # OpenAI's chat API names the system prompt "developer" for o1 and later models;
    # from_openai raises ValueError: 'developer' is not a valid MessageRole.
    msg = ChatMessage.from_openai({"role": "developer", "content": "Be brief."})
    assert msg.role is MessageRole.SYSTEM
    assert msg.content == "Be brief."


def test_anthropic_never_sends_an_empty_user_content_list() -> None:
    # "messages.1: all messages must have non-empty content except for the optional
    # final assistant message": an empty user message becomes {"content": []}.
    _, wire = to_anthropic(
        [ChatMessage.user("Hi"), ChatMessage.assistant("Hello"), ChatMessage.user("")]
    )
    assert all(m["content"] for m in wire), wire


def test_from_anthropic_reads_a_system_prompt_given_as_text_blocks() -> None:
    # Anthropic's `system` is a string or a list of text blocks (the form used for
    # prompt caching); from_anthropic stores the list as the message's content and
    # to_anthropic then fails: "sequence item 0: expected str instance, list found".
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    msgs = from_anthropic(system, [{"role": "user", "content": "Hi"}])
    assert msgs[0] == ChatMessage.system("Be brief.")
    assert to_anthropic(msgs)[0] == "Be brief."


def test_arguments_that_were_valid_json_go_back_as_valid_json() -> None:
    # '1e400' is valid JSON; json.loads makes it inf and arguments_json() writes
    # 'Infinity', which no strict JSON parser (nor the providers) accepts.
    raw = '{"big": 1e400}'
    msg = ChatMessage.from_openai(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": raw}}
            ],
        }
    )
    sent = msg.to_openai()["tool_calls"][0]["function"]["arguments"]
    assert "Infinity" not in sent
    assert strict_json(json.loads(sent)) == json.loads(sent)
