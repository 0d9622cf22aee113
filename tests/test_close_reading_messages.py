"""A close reading of messages.py, agent.py, tools.py, _schema.py and _schema_check.py.

The angle is a code reviewer's, not a user's. Each branch was read line by
line and asked what input reaches it and whether the result is right. The
tests pin down what that reading confirmed, so that a later change cannot
quietly break it:

* values handed in or out are copies. A caller's dict never shares state
  with a stored message, and the wire dicts are not the message's;
* the wire conversions keep every field and its order (``to_openai`` /
  ``from_openai``, ``to_anthropic`` / ``from_anthropic``, ``to_dict`` /
  ``from_dict``);
* the id bookkeeping gives fresh ids that never collide, and a call's result
  follows it (``with_call_ids``, the per-provider forms of the ids);
* ``paired`` repairs a broken history as its docstring says;
* the agent's small helpers (``_unforced``, ``_as_input``, ``_paired_before``);
* the tool schema and binder: positional-only parameters, what a partial
  fixes, unions, literals;
* the schema checker's edges: ``$`` in patterns, decimal ``multipleOf``,
  ``uniqueItems`` and every problem reported at once.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import functools
import json
import logging
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx import Agent
from rafrx._schema import function_schema, type_schema
from rafrx._schema_check import _compiled, check, check_object, json_equal
from rafrx.agent import _as_input, _paired_before, _unforced
from rafrx.errors import InvalidToolArguments
from rafrx.messages import (
    ANTHROPIC_THINKING,
    CONTAINER_REF,
    LOST_RESULT,
    OPENAI_CALL_EXTRA,
    OPENAI_REASONING,
    REASONING_DETAILS,
    THINKING_BLOCKS,
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
    custom_input,
    from_anthropic,
    paired,
    pending_container,
    provider_data_of,
    to_anthropic,
    to_openai_chat,
    with_call_ids,
)
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import Tool, tool

SETTINGS = settings(max_examples=60, deadline=None)

_names = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=8,
)


def _assistant_with_everything() -> ChatMessage:
    """An assistant message carrying each kind of block that goes back on the chat wire."""
    return ChatMessage(
        MessageRole.ASSISTANT,
        "Looking.",
        tool_calls=[ToolCall("c1", "find", {"q": ["a", {"b": 1}]})],
        reasoning="think",
        provider_data={
            OPENAI_CALL_EXTRA: (
                {"type": "tool_call_extra", "call_id": "c1", "extra_content": {"sig": ["x"]}},
            ),
            REASONING_DETAILS: ({"type": REASONING_DETAILS, "details": [{"text": "r"}]},),
            THINKING_BLOCKS: ({"type": THINKING_BLOCKS, "blocks": [{"signature": "s"}]},),
        },
    )


# ---------------------------------------------------------------- copies, not shared state


def test_from_dict_shares_nothing_with_the_dict_it_read() -> None:
    data = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "f", "arguments": {"xs": [1, 2]}}],
        "provider_data": {ANTHROPIC_THINKING: [{"type": "thinking", "meta": {"k": [1]}}]},
    }
    message = ChatMessage.from_dict(data)
    before = message.to_dict()
    data["tool_calls"][0]["arguments"]["xs"].append(3)
    data["provider_data"][ANTHROPIC_THINKING][0]["meta"]["k"].append(2)
    assert message.to_dict() == before


def test_what_to_dict_to_openai_and_to_anthropic_give_is_the_callers_to_change() -> None:
    message = _assistant_with_everything()
    before = message.to_dict()
    stored = message.to_dict()
    stored["tool_calls"][0]["arguments"]["q"][1]["b"] = 99
    stored["provider_data"][OPENAI_CALL_EXTRA][0]["extra_content"]["sig"].append("y")
    wire = message.to_openai()
    wire["tool_calls"][0]["extra_content"]["sig"].append("z")
    wire["reasoning_details"][0]["text"] = "changed"
    wire["thinking_blocks"][0]["signature"] = "forged"
    _, anthropic = to_anthropic([message])
    anthropic[0]["content"][-1]["input"]["q"][1]["b"] = 7
    assert message.to_dict() == before


def test_from_openai_and_from_anthropic_copy_what_they_read() -> None:
    chat = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "f", "arguments": {"already": ["parsed"]}},
                "extra_content": {"google": {"thought_signature": "sig"}},
            }
        ],
        "reasoning_details": [{"type": "reasoning.text", "text": "r"}],
    }
    wire = [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"xs": [1]}},
            ],
        }
    ]
    read = ChatMessage.from_openai(chat)
    (rebuilt,) = from_anthropic(None, wire)
    before = (read.to_dict(), rebuilt.to_dict())
    chat["tool_calls"][0]["function"]["arguments"]["already"].append("x")
    chat["tool_calls"][0]["extra_content"]["google"]["thought_signature"] = "forged"
    chat["reasoning_details"][0]["text"] = "changed"
    wire[0]["content"][0]["signature"] = "forged"
    wire[0]["content"][1]["input"]["xs"].append(2)
    assert (read.to_dict(), rebuilt.to_dict()) == before


# ---------------------------------------------------------------- round trips


@st.composite
def _chat_assistants(draw: st.DrawFn) -> ChatMessage:
    """Assistant messages as a chat stream leaves them (ids unique, arguments objects)."""
    count = draw(st.integers(1, 3))
    ids = draw(st.lists(_names, min_size=count, max_size=count, unique=True))
    calls = [
        ToolCall(f"call_{i}", draw(_names), draw(st.dictionaries(_names, _json, max_size=3)))
        for i in ids
    ]
    return ChatMessage(
        MessageRole.ASSISTANT,
        draw(st.text(max_size=10)),
        tool_calls=calls,
        reasoning=draw(st.none() | st.text(max_size=10)),
    )


@SETTINGS
@given(_chat_assistants())
def test_an_assistant_message_comes_back_from_the_chat_wire_equal(message: ChatMessage) -> None:
    assert ChatMessage.from_openai(message.to_openai()) == message


def test_every_chat_block_comes_back_from_the_chat_wire_equal() -> None:
    message = _assistant_with_everything()
    assert ChatMessage.from_openai(message.to_openai()) == message


def test_a_legacy_function_call_and_its_answer_round_trip_the_chat_wire() -> None:
    call = ChatMessage.assistant_with_tools("", [ToolCall("", "now", {})])
    answer = ChatMessage("tool", "12:00", name="now")
    wire = [call.to_openai(), answer.to_openai()]
    assert wire == [
        {"role": "assistant", "content": None, "function_call": {"name": "now", "arguments": "{}"}},
        {"role": "function", "name": "now", "content": "12:00"},
    ]
    assert [ChatMessage.from_openai(w) for w in wire] == [call, answer]


def test_two_calls_without_ids_are_not_taken_for_one_legacy_call() -> None:
    message = ChatMessage.assistant_with_tools("", [ToolCall("", "f", {}), ToolCall("", "g", {})])
    wire = message.to_openai()
    assert "function_call" not in wire
    assert [c["function"]["name"] for c in wire["tool_calls"]] == ["f", "g"]


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": "thinking "}, {"type": "tool_use", "id": "t1", "name": "f"}],
        [
            {"type": "text", "text": "Let me look."},
            {"type": "thinking", "thinking": "hm", "signature": "s1"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
            {"type": "thinking", "thinking": "then", "signature": "s2"},
            {"type": "text", "text": "Found it."},
        ],
        [
            {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}},
            {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
            {"type": "text", "text": "Per the web, yes."},
        ],
    ],
    ids=["plain", "interleaved", "server-tools"],
)
def test_an_assistant_wire_message_comes_back_from_anthropic_in_its_order(
    content: list[dict[str, Any]],
) -> None:
    for block in content:
        if block["type"] == "tool_use":
            block.setdefault("input", {})
    wire = [{"role": "user", "content": [{"type": "text", "text": "Q"}]}]
    wire.append({"role": "assistant", "content": content})
    _, again = to_anthropic(from_anthropic(None, wire))
    assert again == wire


def test_tool_results_sent_with_text_come_back_as_tool_messages_then_the_text() -> None:
    wire = [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "", "is_error": True},
                {"type": "text", "text": "And also:"},
            ],
        }
    ]
    messages = from_anthropic(None, wire)
    assert [(m.role, m.tool_call_id, m.is_error, m.content) for m in messages] == [
        (MessageRole.TOOL, "t1", False, "ok"),
        (MessageRole.TOOL, "t2", True, ""),
        (MessageRole.USER, None, False, "And also:"),
    ]
    _, again = to_anthropic(messages)
    assert again[0]["content"][1] == {
        "type": "tool_result",
        "tool_use_id": "t2",
        "content": "Error",  # (Anthropic: "content cannot be empty if is_error")
        "is_error": True,
    }


# ---------------------------------------------------------------- call ids


def test_calls_without_ids_get_fresh_ones_and_answers_find_them_by_name() -> None:
    messages = with_call_ids(
        [
            ChatMessage.assistant_with_tools("", [ToolCall("function_call_0", "x", {})]),
            ChatMessage.tool("X", "function_call_0"),
            ChatMessage.assistant_with_tools("", [ToolCall("", "f", {}), ToolCall("", "g", {})]),
            ChatMessage("tool", "G", name="g"),
            ChatMessage("tool", "F", name="f"),
        ]
    )
    assert [c.id for c in messages[2].tool_calls or ()] == ["function_call_2", "function_call_2_1"]
    assert [m.tool_call_id for m in messages[3:]] == ["function_call_2_1", "function_call_2"]
    assert messages[0].tool_calls[0].id == "function_call_0"  # type: ignore[index]  # (as given)


def test_an_anthropic_id_that_its_form_makes_equal_to_another_gets_its_own() -> None:
    step = [
        ChatMessage.assistant_with_tools("", [ToolCall("x:1", "f", {}), ToolCall("x_1", "f", {})]),
        ChatMessage.tool("a", "x:1"),
        ChatMessage.tool("b", "x_1"),
    ]
    _, wire = to_anthropic(step)
    uses = [b["id"] for b in wire[0]["content"]]
    results = [(b["tool_use_id"], b["content"]) for b in wire[1]["content"]]
    assert len(set(uses)) == 2
    assert results == [(uses[0], "a"), (uses[1], "b")]


def test_two_long_chat_ids_alike_go_as_two_short_ones_the_same_in_every_request() -> None:
    long = "chatcmpl-tool-" + "0" * 32
    step = [
        ChatMessage.assistant_with_tools("", [ToolCall(long, "f", {}), ToolCall(long, "f", {})]),
        ChatMessage.tool("a", long),
        ChatMessage.tool("b", long),
    ]
    wire = to_openai_chat(step)
    ids = [c["id"] for c in wire[0]["tool_calls"]]
    assert len(set(ids)) == 2
    assert all(len(i) <= 40 for i in ids)
    assert [m["tool_call_id"] for m in wire[1:]] == ids
    assert to_openai_chat(step) == wire


@SETTINGS
@given(st.lists(st.sampled_from(["a", "a_1", "b:c", "b_c", "x" * 70]), min_size=1, max_size=5))
def test_calls_with_any_ids_go_to_anthropic_unique_and_answered_in_order(ids: list[str]) -> None:
    calls = [ToolCall(i, "f", {"n": n}) for n, i in enumerate(ids)]
    step = [ChatMessage.assistant_with_tools("", calls)]
    step += [ChatMessage.tool(str(n), i) for n, i in enumerate(ids)]
    _, wire = to_anthropic(step * 2)
    for assistant, results in (wire[0:2], wire[2:4]):
        uses = [b["id"] for b in assistant["content"]]
        assert [b["input"]["n"] for b in assistant["content"]] == list(range(len(ids)))
        assert [(b["tool_use_id"], b["content"]) for b in results["content"]] == [
            (u, str(n)) for n, u in enumerate(uses)
        ]
    every = [b["id"] for m in wire[0::2] for b in m["content"]]
    assert len(set(every)) == len(every)


# ---------------------------------------------------------------- paired


def test_paired_puts_results_in_call_order_and_answers_a_shared_id_in_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = [ToolCall("c1", "f", {}), ToolCall("c2", "f", {}), ToolCall("c1", "f", {})]
    history = [
        ChatMessage.tool("orphan", "c0"),
        ChatMessage.assistant_with_tools("", calls),
        ChatMessage.tool("second", "c2"),
        ChatMessage.system("note"),
        ChatMessage.tool("first", "c1"),
        ChatMessage.tool("third", "c1"),
        ChatMessage.tool("extra", "c9"),
        ChatMessage.user("next"),
    ]
    with caplog.at_level(logging.WARNING, logger="rafrx.messages"):
        fixed = paired(history)
    assert [(m.role.value, m.content) for m in fixed] == [
        ("assistant", ""),
        ("tool", "first"),
        ("tool", "second"),
        ("tool", "third"),
        ("system", "note"),
        ("user", "next"),
    ]
    assert "c0" in caplog.text
    assert "c9" in caplog.text


def test_paired_answers_a_lost_legacy_call_by_name_without_an_id() -> None:
    calls = [ToolCall("", "now", {})]
    fixed = paired([ChatMessage.assistant_with_tools("", calls), ChatMessage.user("?")])
    lost = fixed[1]
    assert (lost.role, lost.name, lost.tool_call_id, lost.is_error, lost.content) == (
        MessageRole.TOOL,
        "now",
        None,
        True,
        LOST_RESULT,
    )


def test_paired_keeps_a_server_result_whose_use_came_in_an_earlier_message() -> None:
    use = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []}
    orphan = {"type": "web_search_tool_result", "tool_use_id": "srv_0", "content": []}
    paused = ChatMessage("assistant", "", provider_data={ANTHROPIC_THINKING: (use,)})
    went_on = ChatMessage("assistant", "ok", provider_data={ANTHROPIC_THINKING: (orphan, result)})
    fixed = paired([ChatMessage.user("q"), paused, went_on])
    assert fixed[1] is paused
    assert fixed[2].provider_data == {ANTHROPIC_THINKING: (result,)}


def test_pending_container_is_the_last_assistant_messages_only() -> None:
    mark = {"type": CONTAINER_REF, "id": "container_1"}
    calling = ChatMessage(
        "assistant",
        tool_calls=[ToolCall("c1", "f", {})],
        provider_data={ANTHROPIC_THINKING: (mark,)},
    )
    answered = [calling, ChatMessage.tool("done", "c1")]
    assert pending_container(answered) == "container_1"
    assert pending_container([*answered, ChatMessage.assistant("All done.")]) is None


# ---------------------------------------------------------------- small helpers


def test_provider_data_of_sorts_blocks_by_the_wire_format_they_go_back_on() -> None:
    blocks = [
        {"type": "thinking", "signature": "s"},
        {"type": "reasoning", "id": "rs_1"},
        {"type": "tool_call_extra", "call_id": "c1", "extra_content": {}},
        {"type": "web_search_call", "id": "ws_1"},
        "not a block",
    ]
    assert provider_data_of(blocks) == {
        ANTHROPIC_THINKING: (blocks[0], blocks[4]),
        OPENAI_REASONING: (blocks[1], blocks[3]),
        OPENAI_CALL_EXTRA: (blocks[2],),
    }
    assert provider_data_of([]) is None


@pytest.mark.parametrize(
    ("call", "wire"),
    [
        (ToolCall("c", "f", None, raw_arguments="{oops", error="bad"), "{oops"),
        (ToolCall("c", "f", {"x": float("inf")}, raw_arguments='{"x": 1e400}'), '{"x": 1e400}'),
        (ToolCall("c", "f", {"x": float("nan")}, raw_arguments='{"x": NaN}'), '{"x": null}'),
        (ToolCall("c", "f", {"x": float("-inf")}), '{"x": null}'),
        (ToolCall("c", "f", {"t": "é"}), '{"t": "é"}'),
    ],
    ids=["invalid-raw", "inf-raw-strict", "nan-raw-not-strict", "inf-no-raw", "non-ascii"],
)
def test_arguments_json_is_always_strict_json_or_the_raw_text(call: ToolCall, wire: str) -> None:
    assert call.arguments_json() == wire


def test_a_custom_call_whose_input_is_no_longer_text_goes_as_its_json() -> None:
    assert custom_input(ToolCall("c", "shell", {"input": "ls"})) == "ls"
    assert custom_input(ToolCall("c", "shell", {"input": ["ls"]})) == '{"input": ["ls"]}'
    assert custom_input(ToolCall("c", "shell", ["ls"])) == '["ls"]'


def test_a_refusal_is_read_as_the_assistants_text() -> None:
    as_field = ChatMessage.from_openai({"role": "assistant", "content": None, "refusal": "No."})
    as_part = ChatMessage.from_openai(
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}
    )
    assert as_field.content == as_part.content == "No."


# ---------------------------------------------------------------- the agent's helpers


@pytest.mark.parametrize(
    ("choice", "unforced"),
    [
        ("required", "auto"),
        ("any", "auto"),
        ("auto", None),
        ("none", None),
        (None, None),
        (
            {"type": "any", "disable_parallel_tool_use": True},
            {"type": "auto", "disable_parallel_tool_use": True},
        ),
        ({"type": "tool", "name": "f"}, {"type": "auto"}),
        ({"type": "none"}, None),
        ({"type": "function", "function": {"name": "f"}}, "auto"),
        ({"type": "function", "name": "f"}, "auto"),
        ({"type": "file_search"}, "auto"),
        (
            {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}},
            {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
        ),
        ({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}, None),
        (
            {"type": "allowed_tools", "mode": "required", "tools": []},
            {"type": "allowed_tools", "mode": "auto", "tools": []},
        ),
    ],
)  # fmt: skip
def test_unforced_lets_the_model_answer_and_leaves_a_free_choice_alone(
    choice: Any, unforced: Any
) -> None:
    given = copy.deepcopy(choice)
    assert _unforced(choice) == unforced
    assert choice == given  # (the client's own params are not changed)


def test_as_input_marks_only_unmarked_messages_external() -> None:
    tool_result = ChatMessage.tool("12:00", "c1")
    plain = ChatMessage.user("hi")
    text, = _as_input("hi")  # fmt: skip
    assert (text.content, text.source) == ("hi", MessageSource.EXTERNAL)
    assert [m.source for m in _as_input([tool_result, plain])] == [
        MessageSource.TOOL_RESULT,
        MessageSource.EXTERNAL,
    ]
    with pytest.raises(TypeError, match="42"):
        _as_input([plain, 42])  # type: ignore[list-item]


def test_paired_before_leaves_the_answers_given_with_the_input_to_the_input() -> None:
    calling = ChatMessage.assistant_with_tools(
        "", [ToolCall("c1", "f", {}), ToolCall("c2", "g", {})]
    )
    answer = ChatMessage.tool("one", "c1")
    history = _paired_before([ChatMessage.user("q"), calling], [answer, ChatMessage.user("go")])
    assert [(m.role.value, m.tool_call_id, m.is_error) for m in history] == [
        ("user", None, False),
        ("assistant", None, False),
        ("tool", "c2", True),  # (c2's result was lost; c1's is the input's)
    ]


def test_an_agents_repr_names_its_client_type_not_its_key() -> None:
    client = OpenAIChatClient("http://127.0.0.1:1", "sk-secret-value", model="m")
    agent = Agent(client, tools=[{"type": "web_search"}], id="a1")
    assert repr(agent) == (
        "Agent(id='a1', client=OpenAIChatClient, tools=[web_search], max_steps=10)"
    )


@pytest.mark.asyncio
async def test_a_forced_tool_choice_goes_back_to_auto_after_the_turn_used_a_tool() -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    async with LLMServer() as server:
        server.enqueue(Reply(tool_calls=[ToolCallSpec("add", {"a": 2, "b": 3})]), Reply(text="5"))
        forced = {"type": "function", "function": {"name": "add"}}
        async with OpenAIChatClient(server.url, model="m", tool_choice=forced) as client:
            response = await Agent(client, tools=[add]).send("2 + 3?")
    assert response.text == "5"
    sent = [r.json.get("tool_choice") for r in server.requests]
    assert sent == [forced, "auto"]
    assert client.params["tool_choice"] == {"type": "function", "function": {"name": "add"}}


# ---------------------------------------------------------------- tool schemas and binding


def test_a_positional_only_argument_left_out_before_a_given_one_takes_its_default() -> None:
    def f(a: int, b: int = 5, /, c: int = 0) -> None: ...

    schema, bind = function_schema(f, {})
    assert schema["required"] == ["a"]
    assert bind({"a": 1, "c": 2}) == ([1], {"c": 2})
    assert bind({"a": 1, "b": 2.0}) == ([1, 2], {})


def test_what_a_partial_fixes_by_keyword_the_model_cannot_set_nor_see() -> None:
    seen: list[str] = []

    def search(query: str, api_key: str) -> str:
        """Search."""
        seen.append(api_key)
        return query

    web = tool(functools.partial(search, api_key="sk-fixed"))
    assert "sk-fixed" not in repr(web)
    assert "api_key" not in json.dumps(web.to_openai())
    with pytest.raises(InvalidToolArguments, match="unexpected argument 'api_key'"):
        web.validate({"query": "q", "api_key": "sk-model"})


def test_a_method_tool_read_from_an_instance_names_its_positional_only_argument() -> None:
    class Counter:
        @tool
        def add(self, n: int, /, by: int = 1) -> int:
            """Add n."""
            return n * by

    assert Counter().add.validate({"n": 2}) == {"n": 2}
    assert list(Counter().add.parameters["properties"]) == ["n", "by"]


def test_a_strict_tools_null_means_the_default_but_a_required_nullable_stays_null() -> None:
    @tool(strict=True)
    def f(x: int | None, y: int = 3) -> str:
        """F."""
        return f"{x} {y}"

    assert f.validate({"x": None, "y": None}) == {"x": None}  # (y: Python's default)
    assert asyncio.run(f.invoke({"x": None, "y": None})) == "None 3"
    assert asyncio.run(f.invoke({"x": 1, "y": 2})) == "1 2"


@pytest.mark.parametrize(
    ("hint", "value", "expected"),
    [
        (datetime.date | str, "next week", "next week"),
        (datetime.date | str, "2024-02-29", datetime.date(2024, 2, 29)),
        (int | str, 5.0, 5),
        (Literal[1, True], True, True),
        (Literal[1, True], 1.0, 1),
        (tuple[int, str], [1.0, "a"], (1, "a")),
        (dict[str, list[int]], {"k": [1.0]}, {"k": [1]}),
    ],
    ids=["date-or-text", "date", "int-or-str", "literal-bool", "literal-int", "tuple", "dict"],
)
def test_a_value_that_passed_its_schema_converts_to_the_hints_type(
    hint: Any, value: Any, expected: Any
) -> None:
    schema, convert = type_schema(hint)
    assert check(schema, value, "") is None
    got = convert(value)
    assert got == expected
    assert type(got) is type(expected)


def test_the_definitions_sent_are_copies_of_the_tools_schema() -> None:
    def f(tags: list[str]) -> None:
        """F."""

    made = tool(f)
    before = copy.deepcopy(made.parameters)
    made.to_openai()["function"]["parameters"]["properties"]["tags"]["items"]["type"] = "x"
    made.to_anthropic()["input_schema"]["required"].append("y")
    made.to_responses()["parameters"]["properties"].clear()
    assert made.parameters == before


def test_an_empty_hand_built_schema_goes_as_an_object_without_properties() -> None:
    empty = Tool("now", "The time.", {}, lambda: "12:00")
    assert empty.to_anthropic()["input_schema"] == {"type": "object", "properties": {}}
    assert empty.validate({}) == {}


# ---------------------------------------------------------------- the schema checker


def test_every_problem_of_the_arguments_is_reported_at_once() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "o": {"type": "object", "required": ["k"]}},
        "required": ["n", "m"],
        "additionalProperties": False,
    }
    problems = check_object(schema, {"n": True, "o": {}, "z": 1}, "")
    assert problems == [
        "missing required argument 'm'",
        "argument 'n': expected integer, got boolean true",
        "missing required argument 'o.k'",
        "unexpected argument 'z' (expected: n, o)",
    ]


def test_an_any_of_error_names_the_branch_of_the_values_own_type() -> None:
    schema = {"anyOf": [{"type": "integer", "minimum": 3}, {"type": "null"}]}
    assert check(schema, 1, "n") == "argument 'n': expected at least 3, got integer 1"


@pytest.mark.parametrize(
    ("pattern", "text", "fits"),
    [
        ("^[a-z]+$", "abc", True),
        ("^[a-z]+$", "abc\n", False),  # ($ is the end, not before a final newline)
        ("^(a|b)$", "b\n", False),
        (r"^\$[0-9]+$", "$12", True),  # (an escaped $ is a dollar)
        ("^[$]$", "$", True),  # (in a class too)
        (r"^[\]$]+$", "]$", True),
        (r"\p{L}", "1", True),  # (Python cannot compile it: sent, not checked)
    ],
)
def test_a_pattern_is_read_as_json_schema_reads_it(pattern: str, text: str, fits: bool) -> None:
    assert (check({"type": "string", "pattern": pattern}, text, "") is None) is fits


def test_a_pattern_python_cannot_compile_is_not_checked() -> None:
    assert _compiled(r"\p{L}") is None


@pytest.mark.parametrize(
    ("value", "step", "fits"),
    [(19.99, 0.01, True), (0.3, 0.1, True), (0.35, 0.1, False), (9.0, 3, True), (10**30, 7, False)],
)
def test_multiple_of_counts_in_the_decimals_written(value: float, step: float, fits: bool) -> None:
    assert (check({"type": "number", "multipleOf": step}, value, "") is None) is fits


@SETTINGS
@given(_json, _json)
def test_unique_items_agrees_with_json_equality(a: Any, b: Any) -> None:
    error = check({"type": "array", "uniqueItems": True}, [a, b], "")
    assert (error is not None) is json_equal(a, b)


@SETTINGS
@given(_json)
def test_json_equality_ignores_the_python_spelling_of_a_value(value: Any) -> None:
    def respelled(v: Any) -> Any:
        if isinstance(v, list):
            return tuple(respelled(x) for x in v)
        if isinstance(v, dict):
            return {k: respelled(x) for k, x in v.items()}
        if isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        return v

    assert json_equal(value, respelled(value))
    assert json_equal(respelled(value), value)
    assert check({"const": value}, respelled(value), "") is None


def test_a_boolean_is_never_a_number_and_a_whole_float_is_an_integer() -> None:
    assert check({"type": "integer"}, 2.0, "") is None
    assert (
        check({"type": "number"}, False, "x") == "argument 'x': expected number, got boolean false"
    )
    assert check({"type": "integer"}, 2.5, "x") is not None
