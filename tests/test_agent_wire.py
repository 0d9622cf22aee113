"""The agent loop end to end over real HTTP: what the server receives on every turn.

Each test drives an :class:`~rafrx.agent.Agent` against the local
:class:`~rafrx.testing.LLMServer`, in all three dialects, and checks *every*
recorded request against the rules the real APIs enforce (``wire_problems``):

OpenAI chat completions
    * an assistant message with ``tool_calls`` is followed by one ``tool``
      message per call id ("An assistant message with 'tool_calls' must be
      followed by tool messages responding to each 'tool_call_id'"), and a
      ``tool`` message answers a call of the assistant message before it
      ("messages with role 'tool' must be a response to a preceding message
      with 'tool_calls'");
    * ``tool_calls`` is never ``[]``; ``content`` is ``null`` only next to
      ``tool_calls``; arguments are a JSON *string*; call ids are unique.

Anthropic Messages
    * no ``system`` role in ``messages`` (it goes in the top-level ``system``);
      roles are ``user``/``assistant`` and the first message is ``user``;
    * content is never empty, and a text block is never empty or whitespace
      only ("text content blocks must contain non-whitespace text");
    * every ``tool_use`` is answered by a ``tool_result`` at the *beginning* of
      the very next (user) message ("tool_use ids were found without
      tool_result blocks immediately after"), and a ``tool_result`` answers a
      ``tool_use`` of the message right before it ("unexpected tool_use_id");
    * thinking blocks come first in an assistant message and carry their
      signature; ``input`` is an object; ids match ``^[a-zA-Z0-9_-]+$``.

OpenAI Responses
    * every ``function_call_output`` follows a ``function_call`` with its
      ``call_id`` ("No tool call found for function call output") and every
      ``function_call`` has an output ("No tool output found for function
      call"); arguments are a JSON string; call ids are unique.

Beyond those rules: the conversation only grows (each request starts with the
previous request's messages: a turn's transcript goes back exactly once),
the tool definitions are the same on every request, and the final
:class:`~rafrx.AgentResponse` matches what the next request carries.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import reactivex
from reactivex import operators as rx

from rafrx.agent import Agent
from rafrx.content import ToolCalledContent
from rafrx.errors import MaxStepsExceeded
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import (
    FUNCTION_CALL_REF,
    OPENAI_REASONING,
    ChatMessage,
    MessageRole,
    MessageSource,
    from_anthropic,
    to_anthropic,
    to_openai_chat,
)
from rafrx.operators import aggregate
from rafrx.response import AgentResponseResult, FinishReason, Usage
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.testing import LLMServer, RecordedRequest, Replay, Reply, ToolCallSpec
from rafrx.tools import tool

FIXTURES = Path(__file__).parent / "data" / "fixtures"
GUARD = 5.0  # seconds: a guard against hangs only, never reached by a passing test

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


@pytest_asyncio.fixture
async def server(llm_server: LLMServer) -> AsyncIterator[LLMServer]:
    """The shared local server; after the test every connection must be closed."""
    yield llm_server
    await llm_server.wait_connections_closed(timeout=GUARD)


@pytest.fixture(params=sorted(CLIENTS))
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---------------------------------------------------------------- the API rules

_ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _json_string(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def _openai_chat_problems(messages: Sequence[Any], raw: frozenset[str]) -> list[str]:
    problems: list[str] = []
    ids: list[str] = []
    open_calls: set[str] | None = None  # ids still to answer after an assistant's tool_calls
    answerable: set[str] = set()  # ids of the assistant message right before the tool run
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            problems.append(f"messages.{i}: unknown role {role!r}")
        if role != "tool" and open_calls:
            problems.append(f"messages.{i}: tool_calls {sorted(open_calls)} not answered")
            open_calls = None
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if open_calls is None or call_id not in answerable:
                problems.append(f"messages.{i}: tool message {call_id!r} answers no preceding call")
            elif call_id not in open_calls:
                problems.append(f"messages.{i}: call {call_id!r} answered twice")
            else:
                open_calls.discard(call_id)
            if not isinstance(msg.get("content"), str):
                problems.append(f"messages.{i}: tool content is not a string")
            continue
        if role == "assistant" and "tool_calls" in msg:
            calls = msg["tool_calls"]
            if not calls:
                problems.append(f"messages.{i}: empty tool_calls array")
            for call in calls:
                ids.append(call.get("id"))
                if call.get("type") != "function" or not call.get("id"):
                    problems.append(f"messages.{i}: malformed tool call {call!r}")
                arguments = call.get("function", {}).get("arguments")
                if not (_json_string(arguments) or (call.get("id") in raw and arguments)):
                    problems.append(f"messages.{i}: arguments are not a JSON string")
            answerable = {c.get("id") for c in calls}
            open_calls = set(answerable)
            if msg.get("content") is not None and not isinstance(msg["content"], str):
                problems.append(f"messages.{i}: content is neither null nor a string")
        else:
            answerable = set()
            if not isinstance(msg.get("content"), str):
                problems.append(f"messages.{i}: content {msg.get('content')!r} is not a string")
    if open_calls:
        problems.append(f"end: tool_calls {sorted(open_calls)} not answered")
    if len(ids) != len(set(ids)):
        problems.append(f"duplicate tool call ids {ids}")
    return problems


def _anthropic_problems(body: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    messages = body.get("messages") or []
    system = body.get("system")
    if system is not None and not (isinstance(system, str) and system):
        problems.append(f"system {system!r} is not a non-empty string")
    if not messages:
        problems.append("no messages")
    elif messages[0].get("role") != "user":
        problems.append("the first message is not a user message")
    ids: list[str] = []
    previous_uses: list[str] = []
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role not in ("user", "assistant"):
            problems.append(f"messages.{i}: role {role!r}")
        content = msg.get("content")
        if isinstance(content, str):
            blocks: list[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list) and content:
            blocks = content
        else:
            problems.append(f"messages.{i}: empty content")
            blocks = []
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not str(block.get("text", "")).strip():
                problems.append(
                    f"messages.{i}.content.{j}: text blocks must contain non-whitespace text"
                )
        # tool results: exactly the previous message's tool_use ids, first in the message
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        leading = 0
        while leading < len(blocks) and blocks[leading].get("type") == "tool_result":
            leading += 1
        if previous_uses:
            if role != "user" or sorted(results[:leading]) != sorted(previous_uses):
                problems.append(
                    f"messages.{i}: tool_use ids {previous_uses} without tool_result blocks "
                    "immediately after"
                )
        elif results:
            problems.append(f"messages.{i}: unexpected tool_use_id {results} in tool_result")
        if leading != len(results):
            problems.append(f"messages.{i}: tool_result blocks not at the beginning")
        for block in blocks:
            if block.get("type") == "tool_result" and not isinstance(block.get("content"), str):
                problems.append(f"messages.{i}: tool_result content is not a string")
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        if uses and role != "assistant":
            problems.append(f"messages.{i}: tool_use in a {role} message")
        for use in uses:
            ids.append(use.get("id"))
            if not _ANTHROPIC_ID.match(str(use.get("id"))):
                problems.append(f"messages.{i}: tool_use id {use.get('id')!r}")
            if not isinstance(use.get("input"), dict):
                problems.append(f"messages.{i}: tool_use input is not an object")
        previous_uses = [u.get("id") for u in uses]
        # thinking first, signed
        kinds = [b.get("type") for b in blocks]
        thinking = [k in ("thinking", "redacted_thinking") for k in kinds]
        if any(thinking) and (role != "assistant" or thinking != sorted(thinking, reverse=True)):
            problems.append(f"messages.{i}: thinking blocks are not first in an assistant turn")
        for block in blocks:
            if block.get("type") == "thinking" and not block.get("signature"):
                problems.append(f"messages.{i}: thinking block without a signature")
    if previous_uses:
        problems.append(f"end: tool_use ids {previous_uses} without tool_result blocks")
    if len(ids) != len(set(ids)):
        problems.append(f"duplicate tool_use ids {ids}")
    return problems


def _responses_problems(items: Sequence[Any], raw: frozenset[str]) -> list[str]:
    problems: list[str] = []
    calls: list[str] = []
    outputs: list[str] = []
    reasoning: list[str] = []
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            calls.append(item.get("call_id"))
            if not item.get("call_id") or not item.get("name"):
                problems.append(f"input.{i}: malformed function_call {item!r}")
            arguments = item.get("arguments")
            if not (_json_string(arguments) or (item.get("call_id") in raw and arguments)):
                problems.append(f"input.{i}: arguments are not a JSON string")
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in calls:
                problems.append(f"input.{i}: no tool call found for output {call_id!r}")
            if call_id in outputs:
                problems.append(f"input.{i}: call {call_id!r} answered twice")
            outputs.append(call_id)
            if not isinstance(item.get("output"), str):
                problems.append(f"input.{i}: output is not a string")
        elif kind in (None, "message"):
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                problems.append(f"input.{i}: role {item.get('role')!r}")
        elif kind == "reasoning":
            # OpenAI: "Item 'rs_…' of type 'reasoning' was provided without its required
            # following item", and "Duplicate item found with id rs_…".
            if not isinstance(item.get("id"), str) or not isinstance(item.get("summary"), list):
                problems.append(f"input.{i}: malformed reasoning item {item!r}")
            if i + 1 == len(items) or items[i + 1].get("type") == "function_call_output":
                problems.append(f"input.{i}: reasoning item without its following item")
            if item.get("id") in reasoning:
                problems.append(f"input.{i}: duplicate reasoning item {item.get('id')!r}")
            reasoning.append(item.get("id"))
        else:
            problems.append(f"input.{i}: unknown item type {kind!r}")
    missing = [c for c in calls if c not in outputs]
    if missing:
        problems.append(f"no tool output found for function calls {missing}")
    if len(calls) != len(set(calls)):
        problems.append(f"duplicate call ids {calls}")
    return problems


def wire_problems(request: RecordedRequest, raw: frozenset[str] = frozenset()) -> list[str]:
    """Every rule of the request's API that the request breaks (empty: none).

    ``raw``: ids of calls whose arguments the model sent as invalid JSON; rafrx sends
    those back verbatim on purpose (OpenAI accepts them; vLLM, llama.cpp and Kimi
    refuse them: see the report), so they are not held against the request here.
    """
    if request.wire_format == "openai-chat":
        return _openai_chat_problems(request.messages, raw)
    if request.wire_format == "anthropic":
        return _anthropic_problems(request.body)
    if request.wire_format == "openai-responses":
        return _responses_problems(request.messages, raw)
    return [f"unknown endpoint {request.path}"]


def assert_valid_and_growing(
    requests: Sequence[RecordedRequest], raw: frozenset[str] = frozenset()
) -> None:
    """Every request obeys its API; each starts with the previous one's conversation
    (nothing dropped, nothing sent twice); the tool definitions never change."""
    for n, request in enumerate(requests):
        assert wire_problems(request, raw) == [], f"request {n}"
    for n in range(1, len(requests)):
        before, after = requests[n - 1].messages, requests[n].messages
        assert len(after) > len(before), f"request {n} does not grow the conversation"
        assert after[: len(before)] == before, f"request {n} rewrote the conversation"
        assert requests[n].body.get("tools") == requests[0].body.get("tools"), f"request {n}"
        assert requests[n].body.get("system") == requests[0].body.get("system"), f"request {n}"


def wire_of(fmt: str, messages: Sequence[ChatMessage]) -> list[Any]:
    """The wire form of ``messages`` as each client sends them."""
    if fmt == "openai-chat":
        return to_openai_chat([m for m in messages if m.role is not MessageRole.SYSTEM])
    if fmt == "anthropic":
        return to_anthropic(messages)[1]
    return [i for i in to_responses_input(messages) if i.get("role") != "system"]


def _unpaired(item: dict[str, Any]) -> dict[str, Any]:
    """A Responses input item as it goes when no reasoning item precedes it: an output
    message as an easy message, a function call without its item id."""
    if item.get("type") == "message":
        return {"role": item["role"], "content": item["content"][0]["text"]}
    return {
        k: v for k, v in item.items() if not (k == "id" and item.get("type") == "function_call")
    }


def non_system(request: RecordedRequest) -> list[Any]:
    return [m for m in request.messages if m.get("role") != "system"]


def results_of(request: RecordedRequest) -> list[tuple[str, str]]:
    """(call id, text) of the tool results sent, in order, in any format."""
    out: list[tuple[str, str]] = []
    for item in request.messages:
        if item.get("type") == "function_call_output":
            out.append((item["call_id"], item["output"]))
        elif item.get("role") == "tool":
            out.append((item["tool_call_id"], item["content"]))
        content = item.get("content")
        if isinstance(content, list):
            out.extend(
                (b["tool_use_id"], b["content"]) for b in content if b.get("type") == "tool_result"
            )
    return out


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def calls_of(request: RecordedRequest) -> list[tuple[str, str, Any]]:
    """(call id, name, parsed arguments) of the tool calls sent, in order, in any format."""
    out: list[tuple[str, str, Any]] = []
    for item in request.messages:
        if item.get("type") == "function_call":
            out.append((item["call_id"], item["name"], _loads(item["arguments"])))
        for call in item.get("tool_calls") or ():
            function = call["function"]
            out.append((call["id"], function["name"], _loads(function["arguments"])))
        content = item.get("content")
        if isinstance(content, list):
            out.extend(
                (b["id"], b["name"], b["input"]) for b in content if b.get("type") == "tool_use"
            )
    return out


async def collect(agent: Agent, prompt: str | Sequence[ChatMessage]) -> list[AgentResponseResult]:
    async with asyncio.timeout(GUARD):
        return list(await agent.run(prompt).pipe(rx.to_list()))


# ---------------------------------------------------------------- tools

LOG: list[tuple[str, Any]] = []


@tool
def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city's name.
    """
    LOG.append(("lookup", city))
    return f"{city}: ☀ 21 °C"


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file."""
    LOG.append(("remove", path))
    return f"removed {path}"


async def only_tmp(event: ToolApprovalRequestEvent) -> bool:
    return str(event.arguments["path"]).startswith("/tmp/")


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    LOG.clear()


def user(text: str) -> ChatMessage:
    return ChatMessage.user(text, source=MessageSource.EXTERNAL)


# ---------------------------------------------------------------- a whole conversation


@pytest.mark.asyncio
async def test_every_request_of_a_three_turn_conversation_follows_the_api_rules(
    server: LLMServer, fmt: str
) -> None:
    history = InMemoryHistoryProvider()
    server.enqueue(
        # turn 1, step 1: reasoning, a preamble and two parallel calls (non-ASCII arguments)
        Reply(
            reasoning="Two cities: look both up.",
            text="Checking…",
            tool_calls=[
                ToolCallSpec("lookup", {"city": "Zürich"}, id="call_1"),
                ToolCallSpec("lookup", {"city": "東京 🗼"}, id="call_2"),
            ],
            usage=Usage(100, 10, 110),
        ),
        # step 2: one more call, no text
        Reply(
            tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"}, id="call_3")],
            usage=Usage(200, 5, 205),
        ),
        # step 3: the answer
        Reply(reasoning="Done.", text="Sunny everywhere.", usage=Usage(300, 4, 304)),
        # turn 2: two removals, one denied by the approver
        Reply(
            tool_calls=[
                ToolCallSpec("remove", {"path": "/tmp/a"}, id="call_4"),
                ToolCallSpec("remove", {"path": "/etc/passwd"}, id="call_5"),
            ]
        ),
        Reply(text="Removed /tmp/a only."),
        # turn 3: a plain answer
        Reply(text="Bye!"),
    )
    async with CLIENTS[fmt](server.url, "sk-test") as client:
        agent = Agent(
            client,
            tools=[lookup, remove],
            instructions="Be brief.",
            history=history,
            approver=only_tmp,
            id="wire",
        )
        results1 = await collect(agent, "Weather in Zürich, Tokyo and Oslo?")
        r2 = await asyncio.wait_for(agent.send("Remove /tmp/a and /etc/passwd."), GUARD)
        r3 = await asyncio.wait_for(agent.send("Thanks!"), GUARD)
    requests = server.requests
    assert len(requests) == 6
    assert_valid_and_growing(requests)

    # the system prompt: on top, once, in each API's place
    for request in requests:
        if fmt == "anthropic":
            assert request.body["system"] == "Be brief."
            assert all(m["role"] != "system" for m in request.messages)
        else:
            assert request.messages[0] == {"role": "system", "content": "Be brief."}
            assert [m.get("role") for m in request.messages].count("system") == 1

    # the results of each step go back after their calls, in call order, ids intact
    assert calls_of(requests[1]) == [
        ("call_1", "lookup", {"city": "Zürich"}),
        ("call_2", "lookup", {"city": "東京 🗼"}),
    ]
    assert results_of(requests[1]) == [
        ("call_1", "Zürich: ☀ 21 °C"),
        ("call_2", "東京 🗼: ☀ 21 °C"),
    ]
    assert results_of(requests[2])[2:] == [("call_3", "Oslo: ☀ 21 °C")]
    assert results_of(requests[4])[3:] == [
        ("call_4", "removed /tmp/a"),
        ("call_5", "Error: the user denied the call to tool 'remove'; it was not run"),
    ]
    assert LOG == [
        ("lookup", "Zürich"),
        ("lookup", "東京 🗼"),
        ("lookup", "Oslo"),
        ("remove", "/tmp/a"),
    ]

    # turn 1's response: three LLM calls, usage summed, the transcript as sent back
    r1 = await reactivex.from_iterable(results1).pipe(aggregate(agent_id=agent.id))
    starts = [e for r in results1 for e in r.events if isinstance(e, ResponseStartedEvent)]
    finishes = [e.finish_reason for r in results1 for e in r.events if isinstance(e, FinishEvent)]
    assert len(starts) == 3
    assert finishes == [FinishReason.TOOL_CALLS, FinishReason.TOOL_CALLS, FinishReason.STOP]
    if fmt == "openai-responses":  # OpenAI always sends the token details, 0 when none
        assert r1.usage == Usage(600, 19, 619, reasoning_tokens=0, cached_tokens=0)
    else:
        assert r1.usage == Usage(600, 19, 619)
    assert r1.finish_reason is FinishReason.STOP
    assert r1.id == starts[-1].id
    assert r1.source_agent_id == "wire"
    assert r1.turn_transcript[-1].content == "Sunny everywhere."
    assert [c.id for c in r1.tool_calls] == ["call_1", "call_2", "call_3"]
    assert [m.role for m in r1.turn_transcript] == [
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    # turn 2's request carries turn 1 exactly as its response says, once
    turn1 = [user("Weather in Zürich, Tokyo and Oslo?"), *r1.turn_transcript]
    sent = non_system(requests[3])
    assert sent == wire_of(fmt, [*turn1, user("Remove /tmp/a and /etc/passwd.")])
    turn2 = [user("Remove /tmp/a and /etc/passwd."), *r2.turn_transcript]
    assert non_system(requests[5]) == wire_of(fmt, [*turn1, *turn2, user("Thanks!")])
    assert list(history.messages) == [*turn1, *turn2, user("Thanks!"), *r3.turn_transcript]
    assert r3.text == "Bye!"


def test_the_rule_checker_catches_what_each_api_refuses() -> None:
    """``wire_problems`` is not vacuous: each payload below is one the real API rejects."""

    def req(path: str, body: dict[str, Any]) -> RecordedRequest:
        return RecordedRequest.build(path, {}, body)

    chat = "/v1/chat/completions"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    unanswered = [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}]
    assert wire_problems(req(chat, {"messages": unanswered}))
    orphan = [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "c1"}]
    assert wire_problems(req(chat, {"messages": orphan}))
    bad_args = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "tool_calls": [{**call, "function": {"name": "f", "arguments": "{"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    assert wire_problems(req(chat, {"messages": bad_args}))
    assert wire_problems(req(chat, {"messages": bad_args}), raw=frozenset({"c1"})) == []
    late = [*unanswered, {"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c1"}]
    assert wire_problems(req(chat, {"messages": late}))

    messages = "/v1/messages"
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "r"}
    text = {"type": "text", "text": "go"}
    ok = [
        {"role": "user", "content": [text]},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result, text]},
    ]
    assert wire_problems(req(messages, {"messages": ok})) == []
    assert wire_problems(
        req(messages, {"messages": [*ok[:2], {"role": "user", "content": [text]}]})
    )
    assert wire_problems(
        req(messages, {"messages": [*ok[:2], {"role": "user", "content": [text, result]}]})
    )
    blank = [{"role": "user", "content": [{"type": "text", "text": "\n\n"}]}]
    assert wire_problems(req(messages, {"messages": blank}))
    thinking = {"type": "thinking", "thinking": "t", "signature": "s"}
    late_thought = [ok[0], {"role": "assistant", "content": [text, thinking]}]
    assert wire_problems(req(messages, {"messages": late_thought}))
    unsigned = [ok[0], {"role": "assistant", "content": [{**thinking, "signature": ""}, text]}]
    assert wire_problems(req(messages, {"messages": unsigned}))
    assert wire_problems(req(messages, {"messages": ok, "system": ""}))

    responses = "/v1/responses"
    fc = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c1", "output": "r"}
    assert wire_problems(req(responses, {"input": [fc, out]})) == []
    assert wire_problems(req(responses, {"input": [fc]}))
    assert wire_problems(req(responses, {"input": [out, fc]}))


# ---------------------------------------------------------------- empty content


@pytest.mark.asyncio
async def test_anthropic_whitespace_only_assistant_text_is_not_sent_back(server: LLMServer) -> None:
    """Claude often streams a whitespace-only text block (``"\\n\\n"``) before a tool call.
    The Messages API refuses a text block with no non-whitespace text
    ("messages: text content blocks must contain non-whitespace text"), so the
    tool loop's second request must leave that block out."""
    server.enqueue(
        Reply(text="\n\n", tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"}, id="toolu_1")]),
        Reply(text="Sunny."),
    )
    async with AnthropicClient(server.url, "sk-ant") as client:
        response = await asyncio.wait_for(Agent(client, tools=[lookup]).send("Oslo?"), GUARD)
    assert response.text.endswith("Sunny.")
    second = server.requests[1]
    assert second.messages[1]["role"] == "assistant"
    assert [b["type"] for b in second.messages[1]["content"]] == ["tool_use"]
    assert wire_problems(second) == []


@pytest.mark.asyncio
async def test_empty_and_reasoning_only_steps_send_no_empty_content(
    server: LLMServer, fmt: str
) -> None:
    """A step with no text (only calls), and a turn whose answer is empty, never put an
    empty text block or an empty tool_calls array on the wire."""
    history = InMemoryHistoryProvider()
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Rome"}, id="c1")]),
        Reply(text=""),  # the model said nothing
        Reply(text="Still here."),
    )
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        first = await asyncio.wait_for(agent.send("Rome?"), GUARD)
        await asyncio.wait_for(agent.send("Hello?"), GUARD)
    assert_valid_and_growing(server.requests)
    assert first.text == ""
    assert first.finish_reason is FinishReason.STOP
    roles = [m.role for m in history.messages]
    assert roles[:3] == [MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL]
    assert roles[-2:] == [MessageRole.USER, MessageRole.ASSISTANT]
    assert history.messages[-1].content == "Still here."


# ---------------------------------------------------------------- failures still answer


@pytest.mark.asyncio
async def test_every_failed_call_still_gets_exactly_one_result_on_the_wire(
    server: LLMServer, fmt: str
) -> None:
    @tool(timeout=0.05)
    async def slow() -> str:
        """Takes a while."""
        await asyncio.sleep(5)
        return "late"  # pragma: no cover

    @tool
    def boom() -> str:
        """Fails."""
        raise RuntimeError("kaputt ✗")

    calls = [
        ToolCallSpec("lookup", {"city": "Bern"}, id="ok"),
        ToolCallSpec("slow", {}, id="timeout"),
        ToolCallSpec("boom", {}, id="raises"),
        ToolCallSpec("nope", {}, id="unknown"),
        ToolCallSpec("lookup", '{"city": ', id="unparsable"),
        ToolCallSpec("lookup", {"town": "Bern"}, id="invalid"),
        ToolCallSpec("remove", {"path": "/etc/hosts"}, id="denied"),
    ]
    server.enqueue(Reply(tool_calls=calls), Reply(text="Partly done."))
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup, slow, boom, remove], approver=only_tmp)
        response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert len(server.requests) == 2
    assert_valid_and_growing(server.requests, raw=frozenset({"unparsable"}))
    sent = results_of(server.requests[1])
    assert [call_id for call_id, _ in sent] == [c.id for c in calls]
    texts = dict(sent)
    assert texts["ok"] == "Bern: ☀ 21 °C"
    assert all(texts[c.id].startswith("Error: ") for c in calls[1:])
    assert "timed out" in texts["timeout"]
    assert "kaputt ✗" in texts["raises"]
    assert "denied" in texts["denied"]
    # the unparsable call goes back as a call (an object for Anthropic) with its result
    assert [c[0] for c in calls_of(server.requests[1])] == [c.id for c in calls]
    assert [(m.tool_call_id, m.content) for m in response.tool_messages] == sent
    assert [m.is_error for m in response.tool_messages] == [False] + [True] * (len(calls) - 1)
    if fmt == "anthropic":  # the one API with a flag for it
        blocks = server.requests[1].messages[-1]["content"]
        assert [b.get("is_error", False) for b in blocks] == [False] + [True] * (len(calls) - 1)
    assert response.text == "Partly done."


# ---------------------------------------------------------------- max steps


@pytest.mark.asyncio
async def test_after_max_steps_the_conversation_goes_on_valid_and_without_the_failed_turn(
    server: LLMServer, fmt: str
) -> None:
    history = InMemoryHistoryProvider()
    server.enqueue(
        Reply(text="Hi."),
        *[Reply(tool_calls=[ToolCallSpec("lookup", {"city": f"C{n}"})]) for n in range(2)],
        Reply(text="Fine."),
    )
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history, max_steps=2)
        await asyncio.wait_for(agent.send("hello"), GUARD)
        with pytest.raises(MaxStepsExceeded) as info:
            await asyncio.wait_for(agent.send("loop"), GUARD)
        after = await asyncio.wait_for(agent.send("again"), GUARD)
    requests = server.requests
    assert len(requests) == 4  # 1 + max_steps + 1
    assert_valid_and_growing(requests[:3])  # the failed turn's own steps
    for request in requests:
        assert wire_problems(request) == []
    partial = info.value.partial
    assert partial is not None
    assert partial.interrupted
    assert len(partial.tool_calls) == len(partial.tool_messages) == 2
    # the next turn carries the first turn once and nothing of the failed one
    assert non_system(requests[3]) == wire_of(
        fmt, [user("hello"), ChatMessage.assistant("Hi."), user("again")]
    )
    assert after.text == "Fine."


# ---------------------------------------------------------------- interrupts


@pytest.mark.asyncio
async def test_an_interrupted_tool_then_the_next_turn_sends_a_valid_conversation(
    server: LLMServer, fmt: str
) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def crawl(url: str) -> str:
        """Crawl a site."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"  # pragma: no cover

    history = InMemoryHistoryProvider()
    server.enqueue(
        Reply(text="Hello."),
        Reply(text="Crawling.", tool_calls=[ToolCallSpec("crawl", {"url": "https://x"})]),
        Reply(text="OK, stopped."),
    )
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[crawl], history=history, instructions="Sys.")
        await asyncio.wait_for(agent.send("hi"), GUARD)
        seen: list[AgentResponseResult] = []
        subscription = agent.run("crawl x").subscribe(seen.append)
        await asyncio.wait_for(started.wait(), GUARD)
        subscription.dispose()  # the user pressed stop
        await asyncio.wait_for(cancelled.wait(), GUARD)
        after = await asyncio.wait_for(agent.send("never mind"), GUARD)
    assert len(server.requests) == 3
    for request in server.requests:
        assert wire_problems(request) == []
    assert non_system(server.requests[2]) == wire_of(
        fmt, [user("hi"), ChatMessage.assistant("Hello."), user("never mind")]
    )
    assert any(isinstance(e, FinishEvent) for r in seen for e in r.events)
    assert not any(isinstance(c, ToolCalledContent) for r in seen for c in r.contents)
    assert after.text == "OK, stopped."


# ---------------------------------------------------------------- history and sharing


class JsonHistory:
    """A history provider that keeps the conversation as JSON text (as a file or a
    database row would), in the provider's own wire format."""

    def __init__(self, fmt: str, text: str = "[]") -> None:
        self.fmt = fmt
        self.text = text

    async def load(self) -> Sequence[ChatMessage]:
        data = json.loads(self.text)
        if self.fmt == "anthropic":
            return from_anthropic(None, data)
        return [ChatMessage.from_openai(d) for d in data]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        old = list(await self.load())
        new = [m for m in messages if m.source is not MessageSource.CHAT_HISTORY]
        if self.fmt == "anthropic":
            data: list[Any] = to_anthropic([*old, *new])[1]
        else:
            data = [m.to_openai() for m in [*old, *new]]
        self.text = json.dumps(data, ensure_ascii=False)


@pytest.mark.asyncio
async def test_history_saved_as_json_and_loaded_by_a_fresh_agent_sends_the_same_request(
    server: LLMServer, fmt: str
) -> None:
    def replies() -> list[Reply]:
        return [
            Reply(
                reasoning="Look it up.",
                text="One moment.",
                tool_calls=[ToolCallSpec("lookup", {"city": "Kraków"}, id="call_k")],
            ),
            Reply(text="Sunny in Kraków."),
            Reply(text="You asked about Kraków."),
        ]

    server.enqueue(*replies())
    memory = InMemoryHistoryProvider()
    stored = JsonHistory(fmt)
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], instructions="Sys.", history=memory)
        await asyncio.wait_for(agent.send("Kraków?"), GUARD)
        await asyncio.wait_for(agent.send("What did I ask?"), GUARD)
        # the same conversation, persisted as JSON between the turns by another process
        server.enqueue(*replies())
        writer = Agent(client, tools=[lookup], instructions="Sys.", history=stored)
        await asyncio.wait_for(writer.send("Kraków?"), GUARD)
        reader = Agent(
            client, tools=[lookup], instructions="Sys.", history=JsonHistory(fmt, stored.text)
        )
        await asyncio.wait_for(reader.send("What did I ask?"), GUARD)
    requests = server.requests
    assert len(requests) == 6
    assert_valid_and_growing(requests[:3])
    sent = unsigned(requests[2].json)
    if fmt == "openai-responses":
        # The reasoning item went back within the first conversation; the chat-format
        # JSON the second one was kept as has no place for it.
        assert [i["type"] for i in sent["input"] if i.get("type") == "reasoning"] == ["reasoning"]
        # Without it, the items it was paired with by id go back as plain ones.
        sent["input"] = [_unpaired(i) for i in sent["input"] if i.get("type") != "reasoning"]
    assert unsigned(requests[5].json) == sent
    assert requests[5].json != unsigned(requests[5].json) or fmt != "anthropic"  # signed


def unsigned(value: Any) -> Any:
    """``value`` with each Anthropic thinking signature (random per reply) made ``"*"``."""
    if isinstance(value, dict):
        return {k: "*" if k == "signature" else unsigned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unsigned(v) for v in value]
    return value


@pytest.mark.asyncio
async def test_two_agents_sharing_one_history_each_see_the_other_turn_once(
    server: LLMServer, fmt: str
) -> None:
    shared = InMemoryHistoryProvider()
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Lima"}, id="call_a")]),
        Reply(text="A: sunny in Lima."),
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Quito"}, id="call_b")]),
        Reply(text="B: sunny in Quito."),
        Reply(text="A: both sunny."),
    )
    async with CLIENTS[fmt](server.url, "k") as client:
        a = Agent(client, tools=[lookup], instructions="You are A.", history=shared, id="a")
        b = Agent(client, tools=[lookup], instructions="You are B.", history=shared, id="b")
        ra = await asyncio.wait_for(a.send("A, Lima?"), GUARD)
        rb = await asyncio.wait_for(b.send("B, Quito?"), GUARD)
        await asyncio.wait_for(a.send("A, summary?"), GUARD)
    requests = server.requests
    for request in requests:
        assert wire_problems(request) == []
    turn_a = [user("A, Lima?"), *ra.turn_transcript]
    turn_b = [user("B, Quito?"), *rb.turn_transcript]
    assert non_system(requests[2]) == wire_of(fmt, [*turn_a, user("B, Quito?")])
    assert non_system(requests[4]) == wire_of(fmt, [*turn_a, *turn_b, user("A, summary?")])
    if fmt == "anthropic":
        assert [r.body["system"] for r in requests] == ["You are A."] * 2 + ["You are B."] * 2 + [
            "You are A."
        ]
    else:
        assert [r.messages[0]["content"] for r in requests] == ["You are A."] * 2 + [
            "You are B."
        ] * 2 + ["You are A."]
    assert [m.tool_call_id for m in shared.messages if m.role is MessageRole.TOOL] == [
        "call_a",
        "call_b",
    ]


@pytest.mark.asyncio
async def test_two_agents_on_one_client_at_once_keep_their_conversations_apart(
    server: LLMServer, fmt: str
) -> None:
    """Two concurrent multi-turn conversations with tool loops over one client: each
    request holds only its own agent's messages, and each conversation only grows."""

    def who(request: RecordedRequest) -> str:
        return "A" if "[A]" in json.dumps(request.messages, ensure_ascii=False) else "B"

    @server.script
    def answer(request: RecordedRequest) -> Reply:
        name = who(request)
        if request.last_role == "tool":
            return Reply(text=f"[{name}] done", chunk_size=2, delay=0.002)
        step = len(calls_of(request))
        return Reply(
            text=f"[{name}] working",
            tool_calls=[ToolCallSpec("lookup", {"city": f"{name}-{step}"})],
            chunk_size=2,
            delay=0.002,
        )

    async with CLIENTS[fmt](server.url, "k") as client:
        agents = {
            name: Agent(client, tools=[lookup], history=InMemoryHistoryProvider(), id=name)
            for name in "AB"
        }

        async def converse(name: str) -> None:
            for turn in range(2):
                await agents[name].send(f"[{name}] question {turn}")

        await asyncio.wait_for(asyncio.gather(converse("A"), converse("B")), GUARD)
    by_agent: dict[str, list[RecordedRequest]] = {"A": [], "B": []}
    for request in server.requests:
        text = json.dumps(request.messages, ensure_ascii=False)
        assert ("[A]" in text) != ("[B]" in text)
        by_agent[who(request)].append(request)
    for name, requests in by_agent.items():
        assert len(requests) == 4, name
        assert_valid_and_growing(requests)
        cities = [c[2]["city"] for c in calls_of(requests[-1])]
        assert cities == [f"{name}-0", f"{name}-1"]


@pytest.mark.asyncio
async def test_an_empty_final_answer_still_ends_the_transcript_with_an_assistant_message(
    server: LLMServer,
) -> None:
    """DESIGN: ``turn_transcript`` is "per step the assistant message and its tool
    messages, then the final assistant message" and "the final answer is
    ``turn_transcript[-1]``". When the model answers a tool result with nothing
    (it happens), a UI showing ``turn_transcript[-1]`` as the answer shows the raw
    tool output instead."""
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"}, id="c1")]),
        Reply(text=""),
    )
    async with OpenAIChatClient(server.url, "k") as client:
        response = await asyncio.wait_for(Agent(client, tools=[lookup]).send("Oslo?"), GUARD)
    assert response.finish_reason is FinishReason.STOP
    assert [m.role for m in response.turn_transcript] == [
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    assert response.turn_transcript[-1].content == ""


# ---------------------------------------------------------------- arguments intact

AWKWARD = 'Zürich \u2028 \u2029 \x85 \u00a0 😀 👩‍👩‍👧 \ufeff "quoted" \\ back/slash \t\n\r \x00 end'


@pytest.mark.asyncio
async def test_large_and_non_ascii_arguments_and_results_reach_the_tool_and_go_back_intact(
    server: LLMServer, fmt: str
) -> None:
    seen: list[Any] = []

    @tool
    def write(path: str, text: str, meta: dict[str, Any]) -> str:
        """Write a file."""
        seen.append((path, text, meta))
        return text[-200:] + " ✓"

    big = "lorem ipsum ✓ " * 40_000 + AWKWARD  # ~560 KB
    meta = {"ключ": [1, 2.5, None, True, {"深": "値"}], "big": 12345678901234567890}
    server.enqueue(
        Reply(
            text=AWKWARD,
            tool_calls=[
                ToolCallSpec("write", {"path": "/tmp/ü.txt", "text": big, "meta": meta}, id="w1"),
                ToolCallSpec("write", {"path": AWKWARD, "text": AWKWARD, "meta": {}}, id="w2"),
            ],
            chunk_size=4096,
        ),
        Reply(text=AWKWARD),
    )
    async with CLIENTS[fmt](server.url, "k") as client:
        response = await asyncio.wait_for(Agent(client, tools=[write]).send(AWKWARD), GUARD)
    assert seen == [("/tmp/ü.txt", big, meta), (AWKWARD, AWKWARD, {})]
    assert response.text == AWKWARD * 2
    second = server.requests[1]
    assert_valid_and_growing(server.requests)
    assert calls_of(second) == [
        ("w1", "write", {"path": "/tmp/ü.txt", "text": big, "meta": meta}),
        ("w2", "write", {"path": AWKWARD, "text": AWKWARD, "meta": {}}),
    ]
    assert results_of(second) == [("w1", big[-200:] + " ✓"), ("w2", AWKWARD + " ✓")]
    texts = json.dumps(second.messages, ensure_ascii=False)
    assert texts.count(json.dumps(AWKWARD, ensure_ascii=False)[1:-1]) >= 2  # input and preamble


# ---------------------------------------------------------------- Anthropic thinking


def _sse(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _block(index: int, start: dict[str, Any], *deltas: dict[str, Any]) -> str:
    out = _sse(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": start},
    )
    for delta in deltas:
        out += _sse(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
    return out + _sse("content_block_stop", {"type": "content_block_stop", "index": index})


@pytest.mark.asyncio
async def test_anthropic_redacted_and_signed_thinking_go_back_first_and_verbatim(
    server: LLMServer,
) -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
    }
    body = (
        _sse(
            "message_start",
            {"type": "message_start", "message": {**message, "usage": {"input_tokens": 5}}},
        )
        + _block(0, {"type": "redacted_thinking", "data": "RU5DUllQVEVE"})
        + _block(
            1,
            {"type": "thinking", "thinking": "", "signature": ""},
            {"type": "thinking_delta", "thinking": "Check the ☂ forecast."},
            {"type": "signature_delta", "signature": "EqQBCgIYAhIM"},
        )
        + _block(2, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Looking."})
        + _block(
            3,
            {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {}},
            {"type": "input_json_delta", "partial_json": '{"city": "Bergen"}'},
        )
        + _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 9},
            },
        )
        + _sse("message_stop", {"type": "message_stop"})
    )
    server.enqueue(Replay(body.encode(), chunk_size=7), Reply(text="Rain."))
    async with AnthropicClient(server.url, "sk-ant") as client:
        response = await asyncio.wait_for(Agent(client, tools=[lookup]).send("Bergen?"), GUARD)
    assert_valid_and_growing(server.requests)
    assert server.requests[1].messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "redacted_thinking", "data": "RU5DUllQVEVE"},
            {"type": "thinking", "thinking": "Check the ☂ forecast.", "signature": "EqQBCgIYAhIM"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"city": "Bergen"}},
        ],
    }
    assert response.reasoning_text == "Check the ☂ forecast."
    assert response.text == "Looking.Rain."


@pytest.mark.asyncio
async def test_responses_reasoning_items_go_back_before_their_call_verbatim(
    server: LLMServer,
) -> None:
    """A real OpenAI recording (o4-mini, encrypted reasoning): its reasoning item goes back
    whole, encrypted_content and all, right before the function call it led to, as the
    Responses API asks of a stateless (store=false) tool loop; and only once."""
    recording = FIXTURES / "openai-responses" / "responses-reasoning-summary-tool.sse"
    done = [
        json.loads(line[len("data: ") :])["item"]
        for line in recording.read_text().splitlines()
        if line.startswith("data: ") and '"response.output_item.done"' in line
    ]
    reasoning_item, call_item = done
    assert reasoning_item["type"] == "reasoning"
    assert reasoning_item["encrypted_content"]

    @tool
    def weather(location: str) -> str:
        """The weather at a place."""
        return f"{location}: 24 °C"

    server.enqueue(Replay(recording, chunk_size=97), Reply(text="Warm."), Reply(text="Yes."))
    async with OpenAIResponsesClient(server.url, "sk-test", model="o4-mini") as client:
        agent = Agent(client, tools=[weather], history=InMemoryHistoryProvider())
        response = await asyncio.wait_for(agent.send("Weather in Florence?"), GUARD)
        await asyncio.wait_for(agent.send("Still warm?"), GUARD)
    assert_valid_and_growing(server.requests)
    second = non_system(server.requests[1])
    assert second[1:] == [
        reasoning_item,
        {
            "type": "function_call",
            "call_id": call_item["call_id"],
            "name": "weather",
            "arguments": '{"location": "Florence, Italy"}',  # rafrx's own JSON of them
            "id": call_item["id"],  # the item the reasoning item is paired with
        },
        {
            "type": "function_call_output",
            "call_id": call_item["call_id"],
            "output": "Florence, Italy: 24 °C",
        },
    ]
    kept = response.turn_transcript[0].provider_data
    ref = {"type": FUNCTION_CALL_REF, "id": call_item["id"], "call_id": call_item["call_id"]}
    assert kept == {OPENAI_REASONING: (reasoning_item, ref)}  # in output order
    third = non_system(server.requests[2])
    assert [i.get("type") for i in third].count("reasoning") == 1  # from history, once


@pytest.mark.asyncio
async def test_concurrent_turns_on_a_shared_history_are_each_saved_whole(
    server: LLMServer, fmt: str
) -> None:
    """Two agents on one history, their turns overlapping: each turn is saved in one
    piece (its call still followed by its result), so the next request is valid."""
    shared = InMemoryHistoryProvider()

    @server.script
    def answer(request: RecordedRequest) -> Reply:
        text = json.dumps(request.messages[-1], ensure_ascii=False)
        if request.last_role == "tool":
            return Reply(text="slow done", delay=0.01)
        if "slow" in text:
            return Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Slowtown"})], delay=0.01)
        return Reply(text="quick done")

    async with CLIENTS[fmt](server.url, "k") as client:
        a = Agent(client, tools=[lookup], history=shared)
        b = Agent(client, tools=[lookup], history=shared)
        await asyncio.wait_for(asyncio.gather(a.send("slow please"), b.send("quick please")), GUARD)
        await asyncio.wait_for(a.send("and now?"), GUARD)
    last = server.requests[-1]
    assert wire_problems(last) == []
    assert [m.content for m in shared.messages if m.role is MessageRole.USER] == [
        "quick please",
        "slow please",
        "and now?",
    ]
    roles = [m.role.value for m in shared.messages]
    assert roles == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
