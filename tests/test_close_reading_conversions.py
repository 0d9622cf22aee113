"""A close reading of the wire conversions in ``rafrx.messages`` and ``to_responses_input``.

Angle: a code reviewer reading ``to_openai_chat``, ``to_anthropic``,
``to_responses_input``, ``from_openai``, ``from_anthropic``, ``paired`` and
``with_call_ids`` line by line, asking for each branch what input reaches it
and whether the result is what the provider takes. Pure functions: no server.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx.messages import (
    ANTHROPIC_THINKING,
    ChatMessage,
    MessageRole,
    ToolCall,
    from_anthropic,
    paired,
    to_anthropic,
    to_openai_chat,
    with_call_ids,
)
from rafrx.sources.clients import to_responses_input

SIGNED = {"type": "thinking", "thinking": "Plan.", "signature": "sig"}


def _calls(*ids: str) -> ChatMessage:
    return ChatMessage.assistant_with_tools("", [ToolCall(i, "f", {"i": i}) for i in ids])


# ------------------------------------------------------------ Anthropic


def test_a_system_note_among_results_keeps_the_results_in_one_user_message() -> None:
    _, wire = to_anthropic(
        [
            ChatMessage.user("Go."),
            _calls("a", "b"),
            ChatMessage.tool("1", "a"),
            ChatMessage.system("Be careful."),
            ChatMessage.tool("", "b", is_error=True),
        ]
    )
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    results = wire[2]["content"]
    assert [(b["tool_use_id"], b.get("is_error", False)) for b in results] == [
        ("a", False),
        ("b", True),
    ]
    assert results[1]["content"] == "Error"  # (empty error content is refused)


def test_system_messages_in_the_middle_go_to_the_system_field_in_order() -> None:
    system, wire = to_anthropic(
        [ChatMessage.system("One."), ChatMessage.user("Hi"), ChatMessage.system("Two.")]
    )
    assert system == "One.\n\nTwo."
    assert all(m["role"] != "system" for m in wire)


def test_an_empty_message_between_results_does_not_split_them() -> None:
    _, wire = to_anthropic(
        [
            _calls("a", "b"),
            ChatMessage.tool("1", "a"),
            ChatMessage.user(" "),
            ChatMessage.tool("2", "b"),
        ]
    )
    assert len(wire) == 2
    assert [b["tool_use_id"] for b in wire[1]["content"]] == ["a", "b"]


def test_a_thinking_only_assistant_message_keeps_its_signed_block() -> None:
    msg = ChatMessage("assistant", "  ", provider_data={ANTHROPIC_THINKING: (SIGNED,)})
    _, wire = to_anthropic([ChatMessage.user("q"), msg])
    assert wire[1] == {"role": "assistant", "content": [SIGNED]}


def test_an_id_with_foreign_characters_is_renamed_alike_in_use_and_result() -> None:
    _, wire = to_anthropic([_calls("functions.f:0"), ChatMessage.tool("ok", "functions.f:0")])
    use = wire[0]["content"][0]["id"]
    assert use == wire[1]["content"][0]["tool_use_id"]
    assert all(ch.isalnum() or ch in "_-" for ch in use)


def test_redacted_thinking_and_server_blocks_come_back_in_their_place() -> None:
    content = [
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"q": "a"}},
        {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
        {"type": "text", "text": "Found it."},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
    ]
    msgs = from_anthropic(None, [{"role": "assistant", "content": content}])
    _, wire = to_anthropic(msgs)
    assert wire[0]["content"] == content


def test_from_anthropic_keeps_is_error_only_when_it_is_true() -> None:
    msgs = from_anthropic(
        None,
        [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "x", "is_error": True},
                    {"type": "tool_result", "tool_use_id": "b", "content": "y", "is_error": False},
                    {"type": "tool_result", "tool_use_id": "c", "content": "z"},
                ],
            }
        ],
    )
    assert [m.is_error for m in msgs] == [True, False, False]


texts = st.sampled_from(["", " ", "\n", "Hi", " x "])
steps = st.lists(
    st.one_of(
        texts.map(ChatMessage.user),
        texts.map(ChatMessage.assistant),
        texts.map(ChatMessage.system),
        st.tuples(texts, st.integers(0, 2)).map(
            lambda t: ChatMessage.assistant_with_tools(
                t[0], [ToolCall(f"c{i}", "f", {}) for i in range(t[1])]
            )
        ),
        st.tuples(texts, st.integers(0, 2), st.booleans()).map(
            lambda t: ChatMessage.tool(t[0], f"c{t[1]}", is_error=t[2])
        ),
    ),
    max_size=8,
)


@settings(max_examples=80, deadline=None)
@given(steps)
def test_anthropic_never_gets_empty_content_nor_blank_text(messages: list[ChatMessage]) -> None:
    system, wire = to_anthropic(paired(messages))
    assert system is None or system.strip()
    for message in wire:
        assert message["content"], message
        for block in message["content"]:
            if block["type"] == "text":
                assert block["text"].strip()
            if block["type"] == "tool_result" and block.get("is_error"):
                assert block["content"].strip()


@settings(max_examples=80, deadline=None)
@given(steps)
def test_every_anthropic_result_answers_a_use_of_the_message_before(
    messages: list[ChatMessage],
) -> None:
    _, wire = to_anthropic(paired(messages))
    for before, message in itertools.pairwise(wire):
        used = {b["id"] for b in before["content"] if b["type"] == "tool_use"}
        answered = [b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"]
        assert set(answered) <= used


# ------------------------------------------------------------ OpenAI chat


def test_an_assistant_with_calls_and_no_text_sends_null_content() -> None:
    wire = to_openai_chat([_calls("a")])
    assert wire[0]["content"] is None
    assert wire[0]["tool_calls"][0]["id"] == "a"


def test_one_id_for_two_calls_of_a_message_goes_as_two_in_calls_and_results() -> None:
    wire = to_openai_chat(
        [_calls("x", "x"), ChatMessage.tool("1", "x"), ChatMessage.tool("2", "x")]
    )
    ids = [c["id"] for c in wire[0]["tool_calls"]]
    assert len(set(ids)) == 2
    assert [m["tool_call_id"] for m in wire[1:]] == ids


def test_the_same_id_in_two_steps_is_kept_on_chat() -> None:
    step = [_calls("functions.f:0"), ChatMessage.tool("1", "functions.f:0")]
    wire = to_openai_chat(step * 2)
    assert [m.get("tool_call_id") for m in wire if m["role"] == "tool"] == ["functions.f:0"] * 2


def test_a_chat_message_with_parts_and_calls_round_trips() -> None:
    data: dict[str, Any] = {
        "role": "assistant",
        "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ],
    }
    msg = ChatMessage.from_openai(data)
    assert msg.content == "AB"
    assert ChatMessage.from_openai(msg.to_openai()) == msg


# ------------------------------------------------------------ Responses


def test_a_failed_result_with_no_text_still_answers_its_call_on_responses() -> None:
    items = to_responses_input(
        [_calls("a"), ChatMessage.tool("", "a", is_error=True), ChatMessage.user("Next")]
    )
    assert [i.get("type") for i in items] == ["function_call", "function_call_output", None]
    assert items[0]["call_id"] == items[1]["call_id"] == "a"


def test_responses_text_goes_before_the_calls_of_its_message() -> None:
    msg = ChatMessage.assistant_with_tools("Checking.", [ToolCall("a", "f", {})])
    items = to_responses_input([msg, ChatMessage.tool("ok", "a")])
    assert items[0] == {"role": "assistant", "content": "Checking."}
    assert items[1]["type"] == "function_call"


def test_a_long_id_goes_short_alike_in_the_call_and_the_output() -> None:
    long = "chatcmpl-tool-" + "9" * 60
    items = to_responses_input([_calls(long), ChatMessage.tool("ok", long)])
    assert items[0]["call_id"] == items[1]["call_id"]
    assert len(items[0]["call_id"]) <= 64


# ------------------------------------------------------------ paired / with_call_ids


def test_paired_puts_a_system_note_after_all_results() -> None:
    fixed = paired(
        [
            _calls("a", "b"),
            ChatMessage.tool("2", "b"),
            ChatMessage.system("n"),
            ChatMessage.tool("1", "a"),
        ]
    )
    assert [(m.role, m.tool_call_id) for m in fixed] == [
        (MessageRole.ASSISTANT, None),
        (MessageRole.TOOL, "a"),
        (MessageRole.TOOL, "b"),
        (MessageRole.SYSTEM, None),
    ]


def test_paired_keeps_is_error_of_a_result_it_reorders() -> None:
    fixed = paired(
        [_calls("a", "b"), ChatMessage.tool("x", "b", is_error=True), ChatMessage.tool("y", "a")]
    )
    assert [(m.tool_call_id, m.is_error) for m in fixed[1:]] == [("a", False), ("b", True)]


def test_with_call_ids_gives_each_legacy_answer_its_own_call() -> None:
    messages = [
        ChatMessage.from_openai(
            {"role": "assistant", "function_call": {"name": "now", "arguments": "{}"}}
        ),
        ChatMessage.from_openai({"role": "function", "name": "now", "content": "1"}),
        ChatMessage.from_openai(
            {"role": "assistant", "function_call": {"name": "now", "arguments": "{}"}}
        ),
        ChatMessage.from_openai({"role": "function", "name": "now", "content": "2"}),
    ]
    out = with_call_ids(messages)
    assert out[0].tool_calls
    assert out[2].tool_calls
    assert out[1].tool_call_id == out[0].tool_calls[0].id
    assert out[3].tool_call_id == out[2].tool_calls[0].id != out[1].tool_call_id
