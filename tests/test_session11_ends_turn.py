"""``@tool(ends_turn=True)``: a tool whose result ends the agent's turn (OpenAI's Agents
SDK's ``StopAtTools``), end to end over real HTTP against the local
:class:`~rafrx.testing.LLMServer` with each of the three clients.

Once the calls of an LLM call have run, a call of an ``ends_turn`` tool that returned a
result ends the turn: no other LLM call, the tool results last in the transcript,
``finish_reason`` that LLM call's (``TOOL_CALLS``), the turn saved to history, and the
next turn goes on from it with a request its API accepts. A call of it that failed
(an exception, bad arguments, a timeout, a denied approval) lets the model read the
error and go on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from reactivex import operators as rx

from rafrx.agent import Agent
from rafrx.events import ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import ChatMessage, MessageSource
from rafrx.response import FinishReason
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import Tool, tool
from tests.test_agent_wire import results_of, wire_problems
from tests.test_wire_validity_properties import all_problems

GUARD = 5.0  # seconds: a guard against hangs only, never reached by a passing test

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}

RAN: list[tuple[str, Any]] = []


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()


@pytest.fixture(params=sorted(CLIENTS))
def client_class(request: pytest.FixtureRequest) -> type[LLMClient]:
    return CLIENTS[request.param]


@tool(ends_turn=True)
def submit(answer: str) -> str:
    """Submit the final answer.

    Args:
        answer: The answer.
    """
    RAN.append(("submit", answer))
    if answer == "boom":
        raise ValueError("not a valid answer")
    return f"submitted {answer}"


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    RAN.append(("lookup", city))
    return f"{city}: sunny"


async def send(agent: Agent, text: str) -> Any:
    async with asyncio.timeout(GUARD):
        return await agent.send(text)


def user(text: str) -> ChatMessage:
    return ChatMessage.user(text, source=MessageSource.EXTERNAL)


# ---------------------------------------------------------------- the option


def test_ends_turn_is_off_by_default_and_kept_by_the_decorator() -> None:
    def echo(text: str) -> str:
        return text

    assert tool(echo).ends_turn is False
    assert lookup.ends_turn is False
    assert submit.ends_turn is True
    assert Tool("echo", "Echo.", {"type": "object"}, echo).ends_turn is False
    assert tool(name="shout", ends_turn=True)(echo).ends_turn is True


# ---------------------------------------------------------------- the turn ends


@pytest.mark.asyncio
async def test_an_ends_turn_tool_ends_the_turn_without_another_llm_call(
    llm_server: LLMServer, client_class: type[LLMClient]
) -> None:
    llm_server.enqueue(
        Reply(text="Submitting.", tool_calls=[ToolCallSpec("submit", {"answer": "42"}, id="c1")]),
        Reply(text="never asked for"),
    )
    async with client_class(llm_server.url, "k") as client:
        agent = Agent(client, tools=[submit, lookup])
        async with asyncio.timeout(GUARD):
            results = await agent.run("What is the answer?").pipe(rx.to_list())
    assert len(llm_server.requests) == 1
    assert RAN == [("submit", "42")]
    starts = [e for r in results for e in r.events if isinstance(e, ResponseStartedEvent)]
    assert len(starts) == 1


@pytest.mark.asyncio
async def test_the_response_ends_with_the_tool_result_and_the_llm_calls_finish_reason(
    llm_server: LLMServer, client_class: type[LLMClient]
) -> None:
    llm_server.enqueue(
        Reply(text="Submitting.", tool_calls=[ToolCallSpec("submit", {"answer": "42"}, id="c1")])
    )
    async with client_class(llm_server.url, "k") as client:
        response = await send(Agent(client, tools=[submit], max_steps=1), "What is the answer?")
    assert len(llm_server.requests) == 1
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert response.text == "Submitting."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("c1", "submit", {"answer": "42"})
    ]
    assert [(m.tool_call_id, m.content, m.is_error) for m in response.tool_messages] == [
        ("c1", "submitted 42", False)
    ]
    assert [m.role.value for m in response.turn_transcript] == ["assistant", "tool"]
    assert response.turn_transcript[-1] == response.tool_messages[-1]


@pytest.mark.asyncio
async def test_a_mixed_step_runs_every_call_then_ends(
    llm_server: LLMServer, client_class: type[LLMClient]
) -> None:
    llm_server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("submit", {"answer": "sunny"}, id="c1"),
                ToolCallSpec("lookup", {"city": "Oslo"}, id="c2"),
            ]
        ),
        Reply(text="never asked for"),
    )
    async with client_class(llm_server.url, "k") as client:
        response = await send(Agent(client, tools=[submit, lookup]), "Weather?")
    assert len(llm_server.requests) == 1
    assert sorted(RAN) == [("lookup", "Oslo"), ("submit", "sunny")]
    assert [(m.tool_call_id, m.content) for m in response.tool_messages] == [
        ("c1", "submitted sunny"),
        ("c2", "Oslo: sunny"),
    ]
    assert [m.role.value for m in response.turn_transcript] == ["assistant", "tool", "tool"]
    assert response.finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.asyncio
async def test_an_ends_turn_tool_called_after_other_steps_ends_the_turn_there(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"}, id="c1")]),
        Reply(tool_calls=[ToolCallSpec("submit", {"answer": "sunny"}, id="c2")]),
        Reply(text="never asked for"),
    )
    async with OpenAIChatClient(llm_server.url, "k") as client:
        response = await send(Agent(client, tools=[submit, lookup]), "Weather?")
    assert len(llm_server.requests) == 2
    assert llm_server.requests[1].last_role == "tool"  # the normal tool's result went back
    assert [m.role.value for m in response.turn_transcript] == [
        "assistant", "tool", "assistant", "tool",
    ]  # fmt: skip
    assert response.tool_messages[-1].content == "submitted sunny"


# ---------------------------------------------------------------- the model goes on


@tool(ends_turn=True, timeout=0.05)
async def slow_submit(answer: str) -> str:
    """Submit slowly."""
    await asyncio.sleep(5)
    return answer  # pragma: no cover


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (
            ToolCallSpec("submit", {"answer": "boom"}, id="c1"),
            "Error: tool 'submit' raised ValueError: not a valid answer",
        ),
        (
            ToolCallSpec("submit", {"answer": 42}, id="c1"),
            "Error: invalid arguments for tool 'submit': argument 'answer': "
            "expected string, got integer 42",
        ),
        (
            ToolCallSpec("submit", '{"answer": ', id="c1"),
            "Error: invalid arguments for tool 'submit': invalid JSON arguments: "
            "Expecting value: line 1 column 12 (char 11)",
        ),
        (
            ToolCallSpec("slow_submit", {"answer": "42"}, id="c1"),
            "Error: tool 'slow_submit' timed out after 0.05 s",
        ),
    ],
    ids=["raises", "bad-arguments", "unparsable", "timeout"],
)
async def test_a_failed_ends_turn_call_lets_the_model_go_on(
    llm_server: LLMServer, client_class: type[LLMClient], call: ToolCallSpec, error: str
) -> None:
    llm_server.enqueue(Reply(tool_calls=[call]), Reply(text="That failed, sorry."))
    async with client_class(llm_server.url, "k") as client:
        response = await send(Agent(client, tools=[submit, slow_submit]), "Submit.")
    assert len(llm_server.requests) == 2
    assert results_of(llm_server.requests[1])[-1][1].startswith("Error: ")
    assert [(m.content, m.is_error) for m in response.tool_messages] == [(error, True)]
    assert response.text == "That failed, sorry."
    assert response.finish_reason is FinishReason.STOP


@tool(ends_turn=True, requires_approval=True)
def publish(text: str) -> str:
    """Publish the text."""
    RAN.append(("publish", text))
    return f"published {text}"


@pytest.mark.asyncio
@pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
async def test_an_ends_turn_call_ends_the_turn_only_once_approved(
    llm_server: LLMServer, client_class: type[LLMClient], approved: bool
) -> None:
    asked: list[ToolApprovalRequestEvent] = []

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append(event)
        return approved

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("publish", {"text": "hi"}, id="c1")]),
        Reply(text="Not published."),
    )
    async with client_class(llm_server.url, "k") as client:
        response = await send(Agent(client, tools=[publish], approver=approver), "Publish hi.")
    assert [e.call_id for e in asked] == ["c1"]
    if approved:
        assert len(llm_server.requests) == 1
        assert RAN == [("publish", "hi")]
        assert response.turn_transcript[-1].content == "published hi"
        assert response.finish_reason is FinishReason.TOOL_CALLS
    else:
        assert len(llm_server.requests) == 2
        assert RAN == []
        assert response.tool_messages[0].is_error
        assert response.text == "Not published."
        assert response.finish_reason is FinishReason.STOP


# ---------------------------------------------------------------- history and the next turn


@pytest.mark.asyncio
async def test_the_turn_is_saved_and_the_next_turn_sends_a_valid_request(
    llm_server: LLMServer, client_class: type[LLMClient]
) -> None:
    history = InMemoryHistoryProvider()
    llm_server.enqueue(
        Reply(
            reasoning="The answer is known.",
            text="Submitting.",
            tool_calls=[
                ToolCallSpec("submit", {"answer": "42"}, id="call_1"),
                ToolCallSpec("lookup", {"city": "Oslo"}, id="call_2"),
            ],
        ),
        Reply(text="It was 42."),
    )
    async with client_class(llm_server.url, "k") as client:
        agent = Agent(client, tools=[submit, lookup], instructions="Be brief.", history=history)
        first = await send(agent, "What is the answer?")
        assert list(history.messages) == [user("What is the answer?"), *first.turn_transcript]
        assert [m.role.value for m in history.messages] == ["user", "assistant", "tool", "tool"]
        # (every provider's rules, merged Anthropic turns, and the official SDKs' types)
        assert all_problems([*history.messages, user("What did you submit?")]) == {}
        second = await send(agent, "What did you submit?")
    assert second.text == "It was 42."
    assert len(llm_server.requests) == 2
    before, after = llm_server.requests
    assert wire_problems(before) == []
    assert wire_problems(after) == []
    assert after.messages[: len(before.messages)] == before.messages  # nothing rewritten
    assert after.last_role == "user"
    assert results_of(after) == [("call_1", "submitted 42"), ("call_2", "Oslo: sunny")]
    assert [m.role.value for m in history.messages] == [
        "user", "assistant", "tool", "tool", "user", "assistant",
    ]  # fmt: skip


@pytest.mark.asyncio
async def test_a_turn_that_ended_by_a_tool_goes_on_from_a_json_saved_history(
    llm_server: LLMServer, client_class: type[LLMClient]
) -> None:
    """The history as a store keeps it (``to_dict``/``from_dict``), loaded by a fresh agent:
    its request is the one the first agent sends."""
    history = InMemoryHistoryProvider()
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("submit", {"answer": "42"}, id="call_1")]),
        Reply(text="42."),
        Reply(text="42."),
    )
    async with client_class(llm_server.url, "k") as client:
        await send(Agent(client, tools=[submit], history=history), "Answer?")
        stored = [m.to_dict() for m in history.messages]
        await send(Agent(client, tools=[submit], history=history), "Again?")
        loaded = InMemoryHistoryProvider([ChatMessage.from_dict(d) for d in stored])
        await send(Agent(client, tools=[submit], history=loaded), "Again?")
    continued, fresh = llm_server.requests[1], llm_server.requests[2]
    assert wire_problems(fresh) == []
    assert fresh.json == continued.json
