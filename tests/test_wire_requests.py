"""The request payloads rafrx builds, pinned against what each provider accepts.

Every expected payload here was checked key by key against the official SDKs'
request param types (``openai.types.chat.ChatCompletionMessageParam``,
``openai.types.responses.ResponseInputItemParam``, ``anthropic.types.MessageParam``
and the tool params) and the rules the APIs enforce beyond the types
(Anthropic: system on top, strict user/assistant alternation or same-role
turns the API merges, every ``tool_use`` answered by a ``tool_result`` in the
very next user message, thinking blocks sent back first and with their
signature; OpenAI chat: ``content: null`` next to ``tool_calls``, arguments as
a JSON string, one tool message per call; Responses: ``function_call`` /
``function_call_output`` items joined by ``call_id``). The SDKs are not
imported: the payloads are literal.

The most important case is rafrx's own transcript sent back: an agent turn
with reasoning, four parallel tool calls (two ran, one denied by the approver,
one raising) and a second turn loaded from history, over real HTTP against
:class:`rafrx.testing.LLMServer`, one run per client.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from rafrx import (
    InMemoryHistoryProvider,
    ToolApprovalRequestEvent,
    ToolApprovalResponse,
    collect_agent_response,
    convert,
)
from rafrx.agent import Agent
from rafrx.messages import (
    ANTHROPIC_THINKING,
    ChatMessage,
    MessageRole,
    ToolCall,
    from_anthropic,
    to_anthropic,
)
from rafrx.response import AgentResponse
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import Tool, tool

# ---------------------------------------------------------------- the agent turn


@tool
def weather(city: str, days: int = 1) -> str:
    """Forecast for a city.

    Args:
        city: The city.
        days: How many days.
    """
    return f"{city}: sunny"


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return "deleted"  # pragma: no cover - always denied here


@tool
def boom(x: int) -> str:
    """Always fails."""
    raise ValueError("kaboom")


TOOLS: list[Tool] = [weather, delete_file, boom]

WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city."},
        "days": {"type": "integer", "description": "How many days.", "default": 1},
    },
    "required": ["city"],
    "additionalProperties": False,
}
DELETE_PARAMS = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
BOOM_PARAMS = {
    "type": "object",
    "properties": {"x": {"type": "integer"}},
    "required": ["x"],
    "additionalProperties": False,
}

DENIED = "Error: the user denied the call to tool 'delete_file': not today"
RAISED = "Error: tool 'boom' raised ValueError: kaboom"


async def deny(event: ToolApprovalRequestEvent) -> ToolApprovalResponse:
    return ToolApprovalResponse(event.call_id, False, reason="not today")


async def two_turns(
    server: LLMServer, client: LLMClient
) -> tuple[AgentResponse, list[dict[str, Any]]]:
    """Turn 1: reasoning, text and four parallel calls, then the answer; turn 2: "Thanks"."""
    server.enqueue(
        Reply(
            text="Let me check.",
            reasoning="Need weather.",
            tool_calls=[
                ToolCallSpec("weather", {"city": "Paris"}, id="call_1"),
                ToolCallSpec("weather", {"city": "Rome", "days": 2}, id="call_2"),
                ToolCallSpec("delete_file", {"path": "/tmp/x"}, id="call_3"),
                ToolCallSpec("boom", {"x": 1}, id="call_4"),
            ],
        ),
        Reply(text="Paris and Rome are sunny."),
        Reply(text="Bye."),
    )
    agent = Agent(
        client,
        tools=TOOLS,
        instructions="Be brief.",
        approver=deny,
        history=InMemoryHistoryProvider(),
    )
    async with client:
        first = await agent.send("Weather in Paris and Rome?")
        await agent.send("Thanks")
    requests = [r.json for r in server.requests]
    assert len(requests) == 3
    return first, requests


# ---------------------------------------------------------------- OpenAI chat

OPENAI_ASSISTANT_WITH_CALLS = {
    "role": "assistant",
    "content": "Let me check.",
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Rome", "days": 2}'},
        },
        {
            "id": "call_3",
            "type": "function",
            "function": {"name": "delete_file", "arguments": '{"path": "/tmp/x"}'},
        },
        {
            "id": "call_4",
            "type": "function",
            "function": {"name": "boom", "arguments": '{"x": 1}'},
        },
    ],
    # DeepSeek's field: its thinking mode rejects a tool-loop continuation without it.
    "reasoning_content": "Need weather.",
}
OPENAI_TOOL_RESULTS = [
    {"role": "tool", "content": "Paris: sunny", "tool_call_id": "call_1"},
    {"role": "tool", "content": "Rome: sunny", "tool_call_id": "call_2"},
    {"role": "tool", "content": DENIED, "tool_call_id": "call_3"},
    {"role": "tool", "content": RAISED, "tool_call_id": "call_4"},
]
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Forecast for a city.",
            "parameters": WEATHER_PARAMS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "delete_file",
            "description": "Delete a file.",
            "parameters": DELETE_PARAMS,
        },
    },
    {
        "type": "function",
        "function": {"name": "boom", "description": "Always fails.", "parameters": BOOM_PARAMS},
    },
]


@pytest.mark.asyncio
async def test_openai_chat_agent_transcript_goes_back_as_chat_messages(
    llm_server: LLMServer,
) -> None:
    _, requests = await two_turns(llm_server, OpenAIChatClient(llm_server.url, "sk-t", "m"))
    head = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
    ]
    assert requests[1] == {
        "model": "m",
        "messages": [*head, OPENAI_ASSISTANT_WITH_CALLS, *OPENAI_TOOL_RESULTS],
        "stream_options": {"include_usage": True},
        "tools": OPENAI_TOOLS,
        "stream": True,
    }
    assert requests[2]["messages"] == [
        *head,
        OPENAI_ASSISTANT_WITH_CALLS,
        *OPENAI_TOOL_RESULTS,
        {"role": "assistant", "content": "Paris and Rome are sunny."},
        {"role": "user", "content": "Thanks"},
    ]
    for request in requests:
        assert_openai_chat_rules(request["messages"])


@pytest.mark.asyncio
@pytest.mark.parametrize("field", ["reasoning", None])
async def test_openai_chat_reasoning_goes_back_under_the_field_asked_for(
    llm_server: LLMServer, field: str | None
) -> None:
    """``reasoning_field`` names the field the reasoning goes back in: Ollama reads
    ``reasoning``; a strict server (StepFun, via OpenRouter) refuses the unknown
    ``reasoning_content`` ("Unrecognized chat message"), so ``None`` sends none.

    Evidence: https://github.com/HKUDS/nanobot/pull/795 (StepFun),
    https://github.com/ollama/ollama/pull/18536 (Ollama reads ``reasoning``).
    """
    client = OpenAIChatClient(llm_server.url, "sk-t", "m", reasoning_field=field)
    _, requests = await two_turns(llm_server, client)
    [assistant] = [m for m in requests[1]["messages"] if m.get("tool_calls")]
    expected = {k: v for k, v in OPENAI_ASSISTANT_WITH_CALLS.items() if k != "reasoning_content"}
    if field is not None:
        expected[field] = "Need weather."
    assert assistant == expected
    assert all("reasoning_content" not in m for r in requests for m in r["messages"])


def assert_openai_chat_rules(messages: list[dict[str, Any]]) -> None:
    """Each assistant's tool calls are answered, in full, by the tool messages right after."""
    for i, msg in enumerate(messages):
        calls = msg.get("tool_calls")
        if msg["role"] != "assistant" or calls is None:
            continue
        assert calls, "an empty tool_calls array is rejected by OpenAI"
        for call in calls:
            assert call["type"] == "function"
            assert isinstance(call["function"]["arguments"], str)
        answered = []
        for follower in messages[i + 1 :]:
            if follower["role"] != "tool":
                break
            answered.append(follower["tool_call_id"])
        assert answered == [c["id"] for c in calls]


def test_openai_chat_assistant_with_only_tool_calls_has_null_content() -> None:
    msg = ChatMessage.assistant_with_tools("", [ToolCall("call_1", "now", {})])
    assert msg.to_openai() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
        ],
    }


def test_openai_chat_arguments_are_json_strings_whatever_they_are() -> None:
    broken = ToolCall("c1", "f", None, raw_arguments='{"a":', error="invalid JSON")
    calls = [broken, ToolCall("c2", "g", [1, 2]), ToolCall("c3", "h", {"é": "ü"})]
    wire = ChatMessage.assistant_with_tools("", calls).to_openai()
    assert [c["function"]["arguments"] for c in wire["tool_calls"]] == [
        '{"a":',  # the model's exact text, sent back as it came
        "[1, 2]",
        '{"é": "ü"}',
    ]


def test_openai_chat_round_trips_a_wire_conversation() -> None:
    wire: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi", "name": "ann"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "12:00", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Noon."},
    ]
    assert [ChatMessage.from_openai(m).to_openai() for m in wire] == wire


def test_openai_chat_text_parts_are_sent_as_one_string() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    msg = ChatMessage.from_openai({"role": "user", "content": parts})
    assert msg.to_openai() == {"role": "user", "content": "ab"}


# ---------------------------------------------------------------- Anthropic


def anthropic_assistant_with_calls(signature: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            # thinking first, unchanged, with its signature
            {"type": "thinking", "thinking": "Need weather.", "signature": signature},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
            {
                "type": "tool_use",
                "id": "call_2",
                "name": "weather",
                "input": {"city": "Rome", "days": 2},
            },
            {
                "type": "tool_use",
                "id": "call_3",
                "name": "delete_file",
                "input": {"path": "/tmp/x"},
            },
            {"type": "tool_use", "id": "call_4", "name": "boom", "input": {"x": 1}},
        ],
    }


# All four results in the one user message right after the tool_use blocks; the denied
# and the failed call marked is_error, as Anthropic asks of a failed tool.
ANTHROPIC_TOOL_RESULTS = {
    "role": "user",
    "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "Paris: sunny"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "Rome: sunny"},
        {"type": "tool_result", "tool_use_id": "call_3", "content": DENIED, "is_error": True},
        {"type": "tool_result", "tool_use_id": "call_4", "content": RAISED, "is_error": True},
    ],
}
ANTHROPIC_TOOLS = [
    {"name": "weather", "description": "Forecast for a city.", "input_schema": WEATHER_PARAMS},
    {"name": "delete_file", "description": "Delete a file.", "input_schema": DELETE_PARAMS},
    {"name": "boom", "description": "Always fails.", "input_schema": BOOM_PARAMS},
]


def user_text(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


@pytest.mark.asyncio
async def test_anthropic_agent_transcript_goes_back_as_messages(llm_server: LLMServer) -> None:
    first, requests = await two_turns(llm_server, AnthropicClient(llm_server.url, "sk-t", "m"))
    provider_data = first.turn_transcript[0].provider_data
    assert provider_data is not None
    signature = provider_data[ANTHROPIC_THINKING][0]["signature"]
    assert signature.startswith("sig_")
    assert requests[1] == {
        "model": "m",
        "max_tokens": 4096,
        "messages": [
            user_text("Weather in Paris and Rome?"),
            anthropic_assistant_with_calls(signature),
            ANTHROPIC_TOOL_RESULTS,
        ],
        "system": "Be brief.",
        "tools": ANTHROPIC_TOOLS,
        "stream": True,
    }
    assert requests[2]["messages"] == [
        user_text("Weather in Paris and Rome?"),
        anthropic_assistant_with_calls(signature),
        ANTHROPIC_TOOL_RESULTS,
        {"role": "assistant", "content": [{"type": "text", "text": "Paris and Rome are sunny."}]},
        user_text("Thanks"),
    ]
    assert requests[2]["system"] == "Be brief."
    for request in requests:
        assert_anthropic_rules(request["messages"])


def assert_anthropic_rules(messages: list[dict[str, Any]]) -> None:
    """Strict alternation, non-empty content, tool_use answered in the next message."""
    assert messages[0]["role"] == "user"
    for previous, msg in itertools.pairwise(messages):
        assert msg["role"] != previous["role"]
    for i, msg in enumerate(messages):
        assert msg["role"] in ("user", "assistant")
        assert msg["content"], "empty content is rejected"
        blocks = msg["content"]
        kinds = [b["type"] for b in blocks]
        if "thinking" in kinds or "redacted_thinking" in kinds:
            assert kinds[0] in ("thinking", "redacted_thinking")
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if uses:
            following = messages[i + 1]["content"]
            results = [b["tool_use_id"] for b in following if b["type"] == "tool_result"]
            assert results == uses
            assert [b["type"] for b in following[: len(results)]] == ["tool_result"] * len(uses)


def test_anthropic_system_messages_go_on_top_joined() -> None:
    system, wire = to_anthropic(
        [ChatMessage.system("One."), ChatMessage.user("Hi"), ChatMessage.system("Two.")]
    )
    assert system == "One.\n\nTwo."
    assert wire == [user_text("Hi")]


def test_anthropic_text_after_tool_results_is_a_separate_user_turn() -> None:
    # Anthropic merges consecutive same-role turns, so the tool_result blocks
    # stay first in the user turn that follows the tool_use.
    _, wire = to_anthropic(
        [
            ChatMessage.user("Time?"),
            ChatMessage.assistant_with_tools("", [ToolCall("c1", "now", {})]),
            ChatMessage.tool("12:00", "c1"),
            ChatMessage.user("And the date?"),
        ]
    )
    assert wire == [
        user_text("Time?"),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "now", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "12:00"}],
        },
        user_text("And the date?"),
    ]


def test_anthropic_two_tool_steps_keep_each_result_after_its_call() -> None:
    _, wire = to_anthropic(
        [
            ChatMessage.user("Go"),
            ChatMessage.assistant_with_tools("", [ToolCall("a", "f", {})]),
            ChatMessage.tool("1", "a"),
            ChatMessage.assistant_with_tools("More.", [ToolCall("b", "f", {"n": 2})]),
            ChatMessage.tool("2", "b"),
            ChatMessage.assistant("Done."),
        ]
    )
    assert wire == [
        user_text("Go"),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "1"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "More."},
                {"type": "tool_use", "id": "b", "name": "f", "input": {"n": 2}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "2"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]
    assert_anthropic_rules(wire)


def test_anthropic_redacted_thinking_goes_back_verbatim_and_first() -> None:
    blocks = (
        {"type": "thinking", "thinking": "Hmm.", "signature": "EqQBCg"},
        {"type": "redacted_thinking", "data": "EmwKAhgB"},
    )
    msg = ChatMessage(
        MessageRole.ASSISTANT,
        "",
        tool_calls=[ToolCall("toolu_1", "now", {})],
        reasoning="Hmm.",
        provider_data={ANTHROPIC_THINKING: blocks},
    )
    _, wire = to_anthropic([ChatMessage.user("Time?"), msg])
    assert wire[1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Hmm.", "signature": "EqQBCg"},
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}},
        ],
    }


def test_anthropic_input_is_always_an_object_and_names_stay_off_the_wire() -> None:
    broken = ToolCall("c1", "f", None, raw_arguments='{"a":', error="invalid JSON")
    _, wire = to_anthropic(
        [
            ChatMessage(MessageRole.USER, "Hi", name="ann"),
            ChatMessage.assistant_with_tools("", [broken, ToolCall("c2", "g", [1])]),
        ]
    )
    assert wire == [
        user_text("Hi"),
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
                {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
            ],
        },
    ]


def test_anthropic_wire_round_trips_through_chat_messages() -> None:
    wire = [
        user_text("Time?"),
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Clock.", "signature": "sig"},
                {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}},
                {"type": "tool_use", "id": "toolu_2", "name": "date", "input": {"tz": "UTC"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "May 1"},
            ],
        },
    ]
    assert to_anthropic(from_anthropic("Be brief.", wire)) == ("Be brief.", wire)


# ---------------------------------------------------------------- OpenAI Responses

RESPONSES_TURN_ONE = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": "Let me check."},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Paris"}',
    },
    {
        "type": "function_call",
        "call_id": "call_2",
        "name": "weather",
        "arguments": '{"city": "Rome", "days": 2}',
    },
    {
        "type": "function_call",
        "call_id": "call_3",
        "name": "delete_file",
        "arguments": '{"path": "/tmp/x"}',
    },
    {"type": "function_call", "call_id": "call_4", "name": "boom", "arguments": '{"x": 1}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "Paris: sunny"},
    {"type": "function_call_output", "call_id": "call_2", "output": "Rome: sunny"},
    {"type": "function_call_output", "call_id": "call_3", "output": DENIED},
    {"type": "function_call_output", "call_id": "call_4", "output": RAISED},
]


@pytest.mark.asyncio
async def test_responses_agent_transcript_goes_back_as_input_items(
    llm_server: LLMServer,
) -> None:
    _, requests = await two_turns(llm_server, OpenAIResponsesClient(llm_server.url, "sk-t", "m"))
    # The reasoning item the server streamed goes back as it came, before the step's message.
    reasoning = requests[1]["input"][2]
    assert reasoning == {
        "id": reasoning["id"],
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Need weather."}],
    }
    assert reasoning["id"].startswith("rs_")
    # The items after it go back as the output items they were, with their ids: the API
    # pairs a reasoning item with the item after it by id.
    message, *calls = requests[1]["input"][3:8]
    assert message == {
        "type": "message",
        "id": message["id"],
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}],
    }
    assert message["id"].startswith("msg_")
    assert all(call["id"].startswith("fc_") for call in calls)
    assert [{k: v for k, v in c.items() if k != "id"} for c in calls] == RESPONSES_TURN_ONE[3:7]
    turn_one = [*RESPONSES_TURN_ONE[:2], reasoning, message, *calls, *RESPONSES_TURN_ONE[7:]]
    assert requests[1]["input"] == turn_one
    assert requests[2]["input"] == [
        *turn_one,
        {"role": "assistant", "content": "Paris and Rome are sunny."},
        {"role": "user", "content": "Thanks"},
    ]
    assert requests[1]["model"] == "m"
    assert requests[1]["stream"] is True
    # Flat function tools (no nested "function"), not strict (see below).
    assert [
        (t["type"], t["name"], t["description"], t["parameters"], t["strict"])
        for t in requests[1]["tools"]
    ] == [
        ("function", "weather", "Forecast for a city.", WEATHER_PARAMS, False),
        ("function", "delete_file", "Delete a file.", DELETE_PARAMS, False),
        ("function", "boom", "Always fails.", BOOM_PARAMS, False),
    ]
    for request in requests:
        assert_responses_rules(request["input"])


def assert_responses_rules(items: list[dict[str, Any]]) -> None:
    """Every output answers an earlier call; arguments and outputs are strings."""
    called: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            assert isinstance(item["arguments"], str)
            json.loads(item["arguments"])
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in called
            assert isinstance(item["output"], str)
        elif item.get("type") == "reasoning":
            assert isinstance(item["id"], str)
            assert isinstance(item["summary"], list)
        elif item.get("type") == "message":  # an output message, paired by its id
            assert isinstance(item["id"], str)
            assert item["role"] == "assistant"
            assert all(part["type"] == "output_text" for part in item["content"])
        else:
            assert item["role"] in ("system", "developer", "user", "assistant")
            assert isinstance(item["content"], str)


def test_responses_invalid_arguments_go_back_as_the_raw_text() -> None:
    broken = ToolCall("c1", "f", None, raw_arguments='{"a":', error="invalid JSON")
    assert to_responses_input(
        [ChatMessage.assistant_with_tools("", [broken]), ChatMessage.tool("Error: bad", "c1")]
    ) == [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":'},
        {"type": "function_call_output", "call_id": "c1", "output": "Error: bad"},
    ]


# ---------------------------------------------------------------- tool definitions


def test_tool_definitions_per_provider() -> None:
    assert weather.to_openai() == OPENAI_TOOLS[0]
    assert weather.to_anthropic() == ANTHROPIC_TOOLS[0]


@pytest.mark.parametrize(
    "given",
    [
        pytest.param(OPENAI_TOOLS[0], id="openai-shaped"),
        pytest.param(ANTHROPIC_TOOLS[0], id="anthropic-shaped"),
        pytest.param(weather, id="Tool"),
    ],
)
@pytest.mark.asyncio
async def test_tools_in_any_shape_are_sent_in_the_providers_shape(
    llm_server: LLMServer, given: Any
) -> None:
    for client in (
        OpenAIChatClient(llm_server.url, "sk-t", "m"),
        AnthropicClient(llm_server.url, "sk-t", "m"),
    ):
        llm_server.enqueue(Reply(text="ok"))
        async with client:
            await client_text(client, given)
    chat, anthropic = (r.json for r in llm_server.requests)
    assert chat["tools"] == [OPENAI_TOOLS[0]]
    assert anthropic["tools"] == [ANTHROPIC_TOOLS[0]]


async def client_text(client: LLMClient, given: Any) -> None:
    updates = client.stream([ChatMessage.user("Hi")], [given])
    await collect_agent_response(updates.pipe(convert()))


# ---------------------------------------------------------------- Responses: strict


@pytest.mark.asyncio
async def test_responses_function_tools_say_strict_false(llm_server: LLMServer) -> None:
    # openai.types.responses.FunctionToolParam has ``strict: Required[Optional[bool]]``,
    # and the Responses API treats an omitted ``strict`` as strict mode: it
    # normalizes the schema (every property required, additionalProperties
    # false), so ``days`` (optional, default 1) becomes mandatory. rafrx's
    # schemas are not strict schemas; ``strict: False`` keeps them as written.
    llm_server.enqueue(Reply(text="ok"))
    async with OpenAIResponsesClient(llm_server.url, "sk-t", "m") as client:
        updates = client.stream([ChatMessage.user("Hi")], [weather])
        await collect_agent_response(updates.pipe(convert()))
    expected = {
        "type": "function",
        "name": "weather",
        "description": "Forecast for a city.",
        "parameters": WEATHER_PARAMS,
        "strict": False,
    }
    assert llm_server.requests[0].json["tools"] == [expected]
    assert weather.to_responses() == expected


# ---------------------------------------------------------------- Anthropic round trip


def test_from_anthropic_keeps_tool_results_next_to_user_text() -> None:
    # A user turn holding tool_result blocks then text is valid Anthropic input
    # (tool_result blocks first, text after; it is also what the API makes of
    # two consecutive user turns). from_anthropic drops the tool_result blocks,
    # so sending the conversation back leaves tool_use toolu_1 unanswered:
    # "tool_use ids were found without tool_result blocks immediately after".
    wire = [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "text", "text": "And Rome?"},
            ],
        },
    ]
    _, again = to_anthropic(from_anthropic(None, wire))
    sent = [b for m in again for b in m["content"] if b["type"] == "tool_result"]
    assert sent == [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]
    assert again[2]["content"][0]["type"] == "tool_result"


# ---------------------------------------------------------------- Anthropic: empty content


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param(
            [ChatMessage.user("a"), ChatMessage.assistant(""), ChatMessage.user("b")],
            id="empty-assistant",
        ),
        pytest.param(
            # What aggregate() keeps of an OpenAI-chat (DeepSeek) step that only
            # reasoned: reasoning, no text, no calls, no Anthropic thinking blocks.
            [
                ChatMessage.user("a"),
                ChatMessage(MessageRole.ASSISTANT, "", reasoning="hmm"),
                ChatMessage.user("b"),
            ],
            id="reasoning-only-assistant",
        ),
    ],
)
def test_anthropic_never_sends_an_empty_content_list(messages: list[ChatMessage]) -> None:
    # Anthropic: "messages.N: all messages must have non-empty content except for
    # the optional final assistant message" (400 invalid_request_error).
    _, wire = to_anthropic(messages)
    assert all(m["content"] for m in wire), wire


# ---------------------------------------------------------------- OpenAI chat: empty tool_calls


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(
            # vLLM, Ollama, Azure and other compatible servers return "tool_calls": []
            ChatMessage.from_openai({"role": "assistant", "content": "Hi", "tool_calls": []}),
            id="from_openai",
        ),
        pytest.param(ChatMessage.assistant_with_tools("Hi", []), id="assistant_with_tools"),
    ],
)
def test_openai_chat_never_sends_an_empty_tool_calls_array(message: ChatMessage) -> None:
    # OpenAI: 400 "Invalid 'messages[1].tool_calls': empty array. Expected an
    # array with minimum length 1, but got an empty array instead." (code empty_array)
    wire: dict[str, Any] = message.to_openai()
    assert wire == {"role": "assistant", "content": "Hi"}


def test_openai_chat_empty_tool_calls_keep_the_content() -> None:
    # With no text either, the message must still carry content (not null with
    # no tool_calls): "content is required unless tool_calls is specified".
    wire = ChatMessage.assistant_with_tools("", []).to_openai()
    assert wire == {"role": "assistant", "content": ""}


@pytest.mark.asyncio
async def test_a_strict_flag_of_the_tools_own_definition_is_kept(llm_server: LLMServer) -> None:
    """Given in a provider's shape with ``strict``, a tool keeps it in both OpenAI APIs."""
    params = {"type": "object", "properties": {}}
    given: dict[str, Any] = {
        "type": "function",
        "function": {"name": "now", "description": "", "parameters": params, "strict": True},
    }
    for _ in range(2):
        llm_server.enqueue(Reply(text="ok"))
    async with OpenAIChatClient(llm_server.url, "sk-t", "m") as chat:
        await client_text(chat, given)
    async with OpenAIResponsesClient(llm_server.url, "sk-t", "m") as responses:
        await client_text(responses, given)
    chat_tool, responses_tool = (r.json["tools"][0] for r in llm_server.requests)
    assert chat_tool["function"]["strict"] is True
    assert responses_tool["strict"] is True
    plain = {k: v for k, v in given["function"].items() if k != "strict"}
    async with OpenAIChatClient(llm_server.url, "sk-t", "m") as chat:
        llm_server.enqueue(Reply(text="ok"))
        await client_text(chat, {"type": "function", "function": plain})
    assert "strict" not in llm_server.requests[-1].json["tools"][0]["function"]  # chat: unset


@pytest.mark.asyncio
async def test_a_strict_tool_is_sent_strict_to_openai_and_as_written_to_anthropic(
    llm_server: LLMServer,
) -> None:
    """``@tool(strict=True)``: both OpenAI APIs get the strict schema and flag (what
    ``openai.pydantic_function_tool`` sends), Anthropic the schema as written."""

    @tool(strict=True)
    def forecast(city: str, days: int = 1) -> str:
        """Forecast for a city."""
        return city

    strict = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": ["integer", "null"]}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    clients = (
        OpenAIChatClient(llm_server.url, "sk-t", "m"),
        OpenAIResponsesClient(llm_server.url, "sk-t", "m"),
        AnthropicClient(llm_server.url, "sk-t", "m"),
    )
    for client in clients:
        llm_server.enqueue(Reply(text="ok"))
        async with client:
            await client_text(client, forecast)
    chat, responses, anthropic = (r.json["tools"][0] for r in llm_server.requests)
    assert chat == {
        "type": "function",
        "function": {
            "name": "forecast",
            "description": "Forecast for a city.",
            "parameters": strict,
            "strict": True,
        },
    }
    assert responses == {"type": "function", **chat["function"]}
    assert anthropic["input_schema"] == forecast.parameters
    assert anthropic["input_schema"]["required"] == ["city"]
    assert "strict" not in anthropic
