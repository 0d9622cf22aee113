"""Chat messages and their three wire forms, and history persistence, at their edges.

Rule checkers are reused from ``tests/test_agent_wire.py`` (what each API refuses) and
the SDK-type oracle from ``tests/test_sdk_request_types.py``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx.agent import Agent
from rafrx.errors import RafrxError
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import (
    ANTHROPIC_THINKING,
    OPENAI_REASONING,
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
    from_anthropic,
    to_anthropic,
    to_openai_chat,
    with_call_ids,
)
from rafrx.sources.clients import AnthropicClient, to_responses_input
from rafrx.testing import Fault, LLMServer
from tests.test_agent_wire import (
    _anthropic_problems,
    _openai_chat_problems,
    _responses_problems,
)
from tests.test_sdk_request_types import body_problems

M = ChatMessage
TRICKY = '"\\/\n\t\x00 é中\u2028\ufeff😀𝄞{}[]'
_SAFE_ID = st.text("abcdefghijklmnopqrstuvwxyzABC0123456789_-", min_size=1, max_size=8)


def _wire(value: Any) -> Any:
    """``value`` as it goes over HTTP and is parsed back."""
    return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))


def chat_body(messages: list[ChatMessage]) -> dict[str, Any]:
    return _wire({"model": "m", "stream": True, "messages": [m.to_openai() for m in messages]})


def anthropic_body(messages: list[ChatMessage]) -> dict[str, Any]:
    system, wire = to_anthropic(messages)
    body: dict[str, Any] = {"model": "m", "max_tokens": 16, "stream": True, "messages": wire}
    if system is not None:
        body["system"] = system
    return _wire(body)


def responses_body(messages: list[ChatMessage]) -> dict[str, Any]:
    return _wire({"model": "m", "stream": True, "input": to_responses_input(messages)})


def all_problems(messages: list[ChatMessage]) -> dict[str, list[str]]:
    """Every API rule and SDK-type problem of ``messages`` in each wire format."""
    chat, anth, resp = chat_body(messages), anthropic_body(messages), responses_body(messages)
    return {
        "openai-chat": _openai_chat_problems(chat["messages"], frozenset())
        + body_problems("openai-chat", chat),
        "anthropic": _anthropic_problems(anth) + body_problems("anthropic", anth),
        "openai-responses": _responses_problems(resp["input"], frozenset())
        + body_problems("openai-responses", resp),
    }


# ---------------------------------------------------------------- strategies

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(TRICKY, max_size=6)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(TRICKY, max_size=5), json_values, max_size=3)
texts = st.text(max_size=10) | st.text(TRICKY, max_size=10)
nonblank = texts.filter(lambda t: t.strip() != "")


@st.composite
def thinking_blocks(draw: st.DrawFn) -> tuple[dict[str, Any], ...]:
    signed = st.builds(
        lambda t, s: {"type": "thinking", "thinking": t, "signature": s},
        texts,
        st.text("ABCabc012+/=", min_size=4, max_size=12),
    )
    redacted = st.builds(
        lambda d: {"type": "redacted_thinking", "data": d}, st.text("ABC=", min_size=1)
    )
    return tuple(draw(st.lists(signed | redacted, min_size=1, max_size=2)))


@st.composite
def reasoning_items(draw: st.DrawFn) -> tuple[dict[str, Any], ...]:
    n = draw(st.integers(1, 2))
    base = draw(st.text("abc0123", min_size=1, max_size=6))
    return tuple(
        {
            "type": "reasoning",
            "id": f"rs_{base}_{draw(st.integers(0, 10**9))}_{i}",
            "summary": [{"type": "summary_text", "text": draw(texts)}],
            "encrypted_content": draw(st.text("ABCabc", max_size=8)),
        }
        for i in range(n)
    )


@st.composite
def conversations(draw: st.DrawFn) -> list[ChatMessage]:
    """Agent-like conversations: system, user, tool steps (each call answered), a final answer."""
    used: set[str] = set()
    out: list[ChatMessage] = []
    if draw(st.booleans()):
        out.append(M.system(draw(nonblank)))
    for _turn in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            out.append(M.system(draw(nonblank), source=MessageSource.CONTEXT_PROVIDER))
        out.append(M.user(draw(nonblank), source=MessageSource.EXTERNAL))
        for _step in range(draw(st.integers(0, 2))):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                call_id = draw(_SAFE_ID.filter(lambda i: i not in used))
                used.add(call_id)
                calls.append(
                    ToolCall(
                        call_id, draw(st.sampled_from(["f", "g_2", "h-x"])), draw(json_objects)
                    )
                )
            blocks: dict[str, Any] = {}
            if draw(st.booleans()):
                blocks[ANTHROPIC_THINKING] = draw(thinking_blocks())
            if draw(st.booleans()):
                blocks[OPENAI_REASONING] = draw(reasoning_items())
            out.append(
                M(
                    MessageRole.ASSISTANT,
                    draw(texts),
                    tool_calls=calls,
                    reasoning=draw(st.none() | texts),
                    provider_data=blocks or None,
                )
            )
            for call in calls:
                failed = draw(st.booleans())
                result = draw(nonblank) if failed else draw(texts)
                out.append(M.tool(result, call.id, is_error=failed))
        out.append(M(MessageRole.ASSISTANT, draw(texts), reasoning=draw(st.none() | texts)))
    return out


# ---------------------------------------------------------------- generated conversations


@settings(max_examples=25, deadline=None)
@given(conversations())
def test_every_generated_conversation_is_accepted_by_every_api(messages: list[ChatMessage]) -> None:
    assert all_problems(messages) == {"openai-chat": [], "anthropic": [], "openai-responses": []}


@settings(max_examples=25, deadline=None)
@given(conversations())
def test_openai_chat_round_trip_keeps_everything_the_format_carries(
    messages: list[ChatMessage],
) -> None:
    back = [M.from_openai(d) for d in chat_body(messages)["messages"]]
    expected = [attrs.evolve(m, source=None, provider_data=None, is_error=False) for m in messages]
    assert back == expected


@settings(max_examples=25, deadline=None)
@given(conversations())
def test_anthropic_round_trip_keeps_calls_results_errors_and_thinking(
    messages: list[ChatMessage],
) -> None:
    body = anthropic_body(messages)
    back = from_anthropic(body.get("system"), body["messages"])
    calls = [c for m in messages for c in m.tool_calls or ()]
    assert [c for m in back for c in m.tool_calls or ()] == calls
    results = [(m.tool_call_id, m.content, m.is_error) for m in messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content, m.is_error) for m in back if m.role == "tool"] == results
    thinking = [b for m in messages for b in (m.provider_data or {}).get(ANTHROPIC_THINKING, ())]
    assert [b for m in back for b in (m.provider_data or {}).get(ANTHROPIC_THINKING, ())] == [
        dict(b) for b in thinking
    ]
    systems = [m.content for m in messages if m.role == "system"]
    assert body.get("system") == ("\n\n".join(systems) if systems else None)
    # the back-converted conversation goes to Anthropic exactly as before
    assert anthropic_body(back) == body


@settings(max_examples=25, deadline=None)
@given(conversations())
def test_responses_items_keep_pairs_arguments_and_reasoning_order(
    messages: list[ChatMessage],
) -> None:
    items = responses_body(messages)["input"]
    calls = [(c.id, c.name, c.arguments) for m in messages for c in m.tool_calls or ()]
    got = [
        (i["call_id"], i["name"], json.loads(i["arguments"]))
        for i in items
        if i.get("type") == "function_call"
    ]
    assert got == calls
    outputs = [(m.tool_call_id, m.content) for m in messages if m.role == "tool"]
    assert [
        (i["call_id"], i["output"]) for i in items if i.get("type") == "function_call_output"
    ] == outputs
    sent = [i for i in items if i.get("type") == "reasoning"]
    kept = [b for m in messages for b in (m.provider_data or {}).get(OPENAI_REASONING, ())]
    first = {b["id"]: b for b in reversed(kept)}  # each id once (the API refuses it twice),
    assert sent == [dict(b) for b in kept if first[b["id"]] is b]  # where it first stood
    # no Anthropic thinking block ever reaches the Responses API
    assert not [i for i in items if i.get("type") in ("thinking", "redacted_thinking")]


# ---------------------------------------------------------------- single messages


@settings(max_examples=100, deadline=None)
@given(
    call_id=st.text(min_size=1, max_size=8),
    name=st.text(max_size=8),
    arguments=json_values,
    content=texts,
)
def test_any_json_arguments_round_trip_through_openai_and_responses(
    call_id: str, name: str, arguments: Any, content: str
) -> None:
    msg = M.assistant_with_tools(content, [ToolCall(call_id, name, arguments)])
    wire = _wire(msg.to_openai())
    assert json.loads(wire["tool_calls"][0]["function"]["arguments"]) == arguments
    assert M.from_openai(wire) == msg
    (call,) = [i for i in to_responses_input([msg]) if i.get("type") == "function_call"]
    assert json.loads(call["arguments"]) == arguments
    _, anth = to_anthropic([M.user("q"), msg, M.tool("r", call_id)])
    (use,) = [b for b in anth[1]["content"] if b["type"] == "tool_use"]
    assert use["input"] == (arguments if isinstance(arguments, dict) else {})


@pytest.mark.parametrize(
    "data",
    [
        {"role": "assistant", "content": "x", "tool_calls": []},
        {"role": "assistant", "content": None, "tool_calls": []},
    ],
)
def test_from_openai_to_openai_is_a_fixed_point(data: dict[str, Any]) -> None:
    once = M.from_openai(data)
    twice = M.from_openai(once.to_openai())
    assert twice == once


def test_tool_results_with_empty_string_ids_are_paired_like_none() -> None:
    messages = [
        M.from_openai(d)
        for d in [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "", "content": "a"},
            {"role": "tool", "tool_call_id": "", "content": "b"},
        ]
    ]
    problems = all_problems(messages)
    assert problems["anthropic"] == []
    assert problems["openai-responses"] == []


def test_generated_legacy_ids_never_collide_with_existing_ids() -> None:
    messages = [
        M.user("q"),
        M.assistant_with_tools("", [ToolCall("function_call_3", "f", {})]),
        M.tool("a", "function_call_3"),
        M.assistant_with_tools("", [ToolCall("", "f", {})]),  # legacy function_call, position 3
        M(MessageRole.TOOL, "b", name="f"),  # legacy function message answering it
    ]
    ids = [c.id for m in with_call_ids(messages) for c in m.tool_calls or ()]
    assert len(ids) == len(set(ids)), ids


@pytest.mark.parametrize("content", ["", "  \n"])
def test_anthropic_failed_tool_result_is_never_sent_empty(content: str) -> None:
    messages = [
        M.user("q"),
        M.assistant_with_tools("", [ToolCall("c1", "f", {})]),
        M.tool(content, "c1", is_error=True),
    ]
    _, wire = to_anthropic(messages)
    (result,) = wire[-1]["content"]
    assert result["tool_use_id"] == "c1"
    assert not result.get("is_error") or str(result["content"]).strip()


@pytest.mark.parametrize("instructions", ["", "   "])
def test_anthropic_blank_system_is_left_out(instructions: str) -> None:
    system, wire = to_anthropic([M.system(instructions), M.user("hi")])
    assert wire == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert system is None or system.strip()


@pytest.mark.parametrize(
    "call_id", ["functions.lookup:0", "call 1", "tool/1", "résumé_1", "call.abc"]
)
def test_anthropic_tool_use_ids_from_other_providers_are_accepted(call_id: str) -> None:
    messages = [
        M.user("q"),
        M.assistant_with_tools("", [ToolCall(call_id, "lookup", {"city": "Oslo"})]),
        M.tool("sunny", call_id),
        M.assistant("Sunny."),
    ]
    assert all_problems(messages)["anthropic"] == []


def test_anthropic_consecutive_tool_results_of_two_steps_never_merge() -> None:
    # Two tool steps whose middle assistant message carries nothing sendable except
    # its calls: each step's results follow their own tool_use.
    messages = [
        M.user("q"),
        M.assistant_with_tools("  ", [ToolCall("a1", "f", {}), ToolCall("a2", "f", [])]),
        M.tool("1", "a2"),
        M.tool("Error: boom", "a1", is_error=True),
        M.system("ctx", source=MessageSource.CONTEXT_PROVIDER),
        M.assistant_with_tools("", [ToolCall("b1", "g", None)]),
        M.tool("", "b1"),
        M.assistant(""),
        M.user("next"),
    ]
    body = anthropic_body(messages)
    assert _anthropic_problems(body) == []
    assert [m["role"] for m in body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "user",
    ]
    assert [b["tool_use_id"] for b in body["messages"][2]["content"]] == ["a2", "a1"]
    assert body["messages"][2]["content"][1]["is_error"] is True
    assert "is_error" not in body["messages"][2]["content"][0]
    assert body["system"] == "ctx"


def test_from_anthropic_reads_error_results_thinking_and_tool_use_in_one_go() -> None:
    wire = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "ENC"},
                {"type": "text", "text": "Let me see."},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": [1, "é"]}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "bad "}, {"type": "text", "text": "x"}],
                    "is_error": True,
                },
                {"type": "text", "text": "and?"},
            ],
        },
    ]
    back = from_anthropic(None, wire)
    assert [m.role for m in back] == ["user", "assistant", "tool", "user"]
    assistant = back[1]
    assert assistant.reasoning == "hm"
    assert assistant.tool_calls == (ToolCall("t1", "f", {"a": [1, "é"]}),)
    assert assistant.provider_data == {ANTHROPIC_THINKING: tuple(wire[1]["content"][:2])}
    assert (back[2].content, back[2].tool_call_id, back[2].is_error) == ("bad x", "t1", True)
    assert back[3].content == "and?"
    # and back again: thinking first and verbatim, results before the user's text
    _, again = to_anthropic(back)
    assert again[1]["content"] == wire[1]["content"]
    assert again[2]["content"][0]["is_error"] is True
    assert _anthropic_problems({"messages": again}) == []


def test_responses_reasoning_only_step_still_has_a_following_item() -> None:
    items = [{"type": "reasoning", "id": "rs_1", "summary": []}]
    messages = [
        M.user("q"),
        M(MessageRole.ASSISTANT, "", provider_data={OPENAI_REASONING: tuple(items)}),
        M.user("again"),
    ]
    got = to_responses_input(messages)
    assert got[1] == items[0]
    assert got[2] == {"role": "assistant", "content": ""}
    assert _responses_problems(got, frozenset()) == []


def test_legacy_function_call_pairs_on_every_wire() -> None:
    messages = [
        M.user("q"),
        M.from_openai(
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "now", "arguments": ""},
            }
        ),
        M.from_openai({"role": "function", "name": "now", "content": "12:00"}),
        M.assistant("It is noon."),
    ]
    assert messages[1].tool_calls == (ToolCall("", "now", {}),)
    problems = all_problems(messages)
    assert problems["anthropic"] == []
    assert problems["openai-responses"] == []
    # chat: the legacy form goes back as it came
    assert chat_body(messages)["messages"][1] == {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "now", "arguments": "{}"},
    }


# ---------------------------------------------------------------- history persistence


@st.composite
def any_messages(draw: st.DrawFn) -> ChatMessage:
    role = draw(st.sampled_from(list(MessageRole)))
    calls = None
    if role is MessageRole.ASSISTANT and draw(st.booleans()):
        calls = [
            ToolCall(draw(_SAFE_ID), draw(st.text(max_size=5)), draw(json_values))
            for _ in range(draw(st.integers(1, 2)))
        ]
    return M(
        role,
        draw(texts),
        name=draw(st.none() | st.text(min_size=1, max_size=5)),
        tool_calls=calls,
        tool_call_id=draw(_SAFE_ID) if role is MessageRole.TOOL else None,
        source=draw(st.none() | st.sampled_from(list(MessageSource))),
        reasoning=draw(st.none() | texts) if role is MessageRole.ASSISTANT else None,
        provider_data=(
            {ANTHROPIC_THINKING: draw(thinking_blocks())}
            if role is MessageRole.ASSISTANT and draw(st.booleans())
            else None
        ),
        is_error=draw(st.booleans()) if role is MessageRole.TOOL else False,
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(any_messages(), max_size=6))
def test_in_memory_history_keeps_every_field_of_the_new_messages(
    messages: list[ChatMessage],
) -> None:
    history = InMemoryHistoryProvider()
    asyncio.run(history.save(messages))
    new = [m for m in messages if m.source not in ("chat_history", "context_provider")]
    assert list(history.messages) == new
    loaded = asyncio.run(history.load())
    assert list(loaded) == [m.with_source(MessageSource.CHAT_HISTORY) for m in new]
    # saving the loaded conversation again adds nothing
    asyncio.run(history.save([*loaded, *loaded]))
    assert list(history.messages) == new


@settings(max_examples=40, deadline=None)
@given(st.lists(any_messages(), max_size=6))
def test_history_persisted_as_chat_json_comes_back_with_what_chat_carries(
    messages: list[ChatMessage],
) -> None:
    text = json.dumps([m.to_openai() for m in messages], ensure_ascii=False, allow_nan=False)
    back = [M.from_openai(d) for d in json.loads(text)]
    expected = [attrs.evolve(m, source=None, provider_data=None, is_error=False) for m in messages]
    assert back == expected


KEY = "sk-ant-secret-0123456789abcdef"


@pytest.mark.asyncio
async def test_a_failed_turn_never_puts_the_api_key_in_history_or_errors(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(
        Fault.status(401, body={"type": "error", "error": {"message": f"bad x-api-key {KEY}"}})
    )
    history = InMemoryHistoryProvider()
    async with AnthropicClient(llm_server.url, KEY) as client:
        agent = Agent(client, instructions="Sys.", history=history)
        with pytest.raises(RafrxError) as caught:
            await asyncio.wait_for(agent.send("hello"), 10)
    err = caught.value
    shown = f"{err!s} {err!r} {getattr(err, 'body', '')!s}"
    assert KEY not in shown
    partial = getattr(err, "partial", None)
    if partial is not None:
        assert KEY not in json.dumps(partial.to_dict(), ensure_ascii=False)
    assert all(KEY not in repr(m) for m in history.messages)
    assert KEY not in repr(client)


@pytest.mark.parametrize(
    "ids",
    [
        ("functions.lookup:0", "functions.lookup:0"),  # Kimi K2: the same ids every step
        ("call.1", "call:1"),  # two ids that are one in Anthropic's characters
        ("c1", "c1_1"),  # a fresh id is never one given
    ],
)
def test_ids_reused_across_steps_go_unique_on_every_wire_and_pair_with_their_results(
    ids: tuple[str, str],
) -> None:
    messages = [M.user("q")]
    for step, call_id in enumerate(ids):
        call = ToolCall(call_id, "lookup", {"step": step})
        messages += [M.assistant_with_tools("", [call]), M.tool(f"result {step}", call_id)]
    messages.append(M.assistant("done"))
    problems = all_problems(messages)  # (chat sends the ids as given: its provider's own)
    assert (problems["anthropic"], problems["openai-responses"]) == ([], [])
    _, wire = to_anthropic(messages)
    uses = [b["id"] for m in wire for b in m["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in wire for b in m["content"] if b["type"] == "tool_result"]
    assert len(set(uses)) == 2
    assert results == uses
    items = to_responses_input(messages)
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert len(set(calls)) == 2
    assert outputs == calls


def test_two_custom_calls_sharing_an_id_stay_custom_once_renamed_on_both_openai_wires() -> None:
    """A message holds a block per call under two ``provider_data`` keys (a custom call's
    mark and its ``extra_content``): each key names every call, so each is renamed in
    full. (One pool of new ids shared by both keys left the second call's mark under the
    old id: it went out as a plain function call.)"""
    calls = [
        {
            "id": "dup",
            "type": "custom",
            "custom": {"name": name, "input": text},
            "extra_content": {},
        }
        for name, text in (("a", "x"), ("b", "y"))
    ]
    msg = ChatMessage.from_openai({"role": "assistant", "content": None, "tool_calls": calls})
    chat = to_openai_chat([msg])[0]["tool_calls"]
    assert [(c["type"], c["custom"]["name"]) for c in chat] == [("custom", "a"), ("custom", "b")]
    assert len({c["id"] for c in chat}) == 2
    items = [i for i in to_responses_input([msg]) if "call_id" in i]
    assert [(i["type"], i["name"], i["input"]) for i in items] == [
        ("custom_tool_call", "a", "x"),
        ("custom_tool_call", "b", "y"),
    ]
    assert len({i["call_id"] for i in items}) == 2
