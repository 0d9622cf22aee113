"""The agent layer when tools, approvers and UIs misbehave: every call gets a result.

A tool or approver raising ``CancelledError`` itself, an approver observable that
ends, two answers to one request, a tool that ignores its timeout's cancellation,
tools and approver reassigned between turns, an approver mutating what it
approves. (Each of these once failed: found by adversarial testing.) Real HTTP
against the local LLMServer, like tests/test_agent_adversarial.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx.agent import Agent
from rafrx.content import ToolCalledContent
from rafrx.events import ToolApprovalRequestEvent
from rafrx.response import AgentResponseResult
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import ToolApprovalResponse, tool

GUARD = 2.0  # seconds: a guard against hangs only
HANG = 0.5  # seconds: where a turn that should end at once is declared hung


@pytest_asyncio.fixture
async def server(llm_server: LLMServer) -> AsyncIterator[LLMServer]:
    yield llm_server
    await llm_server.wait_connections_closed(timeout=GUARD)


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"


def approval_requests(result: AgentResponseResult) -> list[ToolApprovalRequestEvent]:
    return [e for e in result.events if isinstance(e, ToolApprovalRequestEvent)]


def called(results: list[AgentResponseResult]) -> list[ToolCalledContent]:
    return [c for r in results for c in r.contents if isinstance(c, ToolCalledContent)]


def anthropic_tool_results(server: LLMServer, n: int) -> list[str]:
    """The tool_use_ids answered by tool_result blocks in request ``n``."""
    return [
        b["tool_use_id"]
        for m in server.requests[n].messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


# ---------------------------------------------------------------- CancelledError raised, not ours


@pytest.mark.asyncio
async def test_a_tool_raising_cancelled_error_still_gets_a_result(server: LLMServer) -> None:
    """A tool (or a library it uses) raising ``asyncio.CancelledError`` while the turn
    is not being cancelled gets an error result like any other failure: the next
    request must answer every ``tool_use`` (providers reject it otherwise)."""

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page (its HTTP library's own timeout surfaces as a cancellation)."""
        raise asyncio.CancelledError

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("fetch", {"url": "http://x"}, id="toolu_1")]),
        Reply(text="ok"),
    )
    async with AnthropicClient(server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[fetch]).send("go"), GUARD)
    assert [m.tool_call_id for m in response.tool_messages] == ["toolu_1"]
    assert anthropic_tool_results(server, 1) == ["toolu_1"]


@pytest.mark.asyncio
async def test_an_approver_raising_cancelled_error_still_gives_the_call_a_result(
    server: LLMServer,
) -> None:
    """The same through the approver (its UI prompt was closed, say)."""

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        raise asyncio.CancelledError

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("remove", {"path": "/tmp/a"}, id="toolu_1")]),
        Reply(text="ok"),
    )
    async with AnthropicClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[remove], approver=approver)
        response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert [m.tool_call_id for m in response.tool_messages] == ["toolu_1"]
    assert anthropic_tool_results(server, 1) == ["toolu_1"]


# ---------------------------------------------------------------- an approver that ends


async def turn_with_subject(
    server: LLMServer,
    subject: Subject[ToolApprovalResponse],
    on_next: Callable[[AgentResponseResult], None],
) -> list[AgentResponseResult]:
    """The results of a turn whose model calls ``remove`` (approved through ``subject``);
    fails the test if the turn has not ended after HANG seconds."""
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("remove", {"path": "/tmp/a"}, id="c1")]),
        Reply(text="Not removed."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[remove], approver=subject)
        try:
            return await asyncio.wait_for(
                agent.run("rm").pipe(rx.do_action(on_next), rx.to_list()), HANG
            )
        except TimeoutError:
            pytest.fail("the turn hung waiting for an answer that can never come")


@pytest.mark.asyncio
async def test_an_approver_subject_that_completes_does_not_hang_the_turn(
    server: LLMServer,
) -> None:
    """The approver is a Subject and the UI completes it while a call waits: no answer
    can come any more, so the pending (and any later) request is denied."""
    subject: Subject[ToolApprovalResponse] = Subject()

    def on_next(result: AgentResponseResult) -> None:
        if approval_requests(result):
            subject.on_completed()

    results = await turn_with_subject(server, subject, on_next)
    assert [(c.call_id, c.result) for c in called(results)] == [("c1", None)]


@pytest.mark.asyncio
async def test_an_approver_subject_that_errors_does_not_hang_the_turn(server: LLMServer) -> None:
    """The approver Subject errors: the error stays out of the UI code that called
    ``subject.on_error``, and the waiting call is denied; nothing hangs."""
    subject: Subject[ToolApprovalResponse] = Subject()
    raised: list[Exception] = []

    def on_next(result: AgentResponseResult) -> None:
        if approval_requests(result):
            try:
                subject.on_error(ValueError("approval UI crashed"))
            except ValueError as exc:
                raised.append(exc)

    results = await turn_with_subject(server, subject, on_next)
    assert [(c.call_id, c.result) for c in called(results)] == [("c1", None)]
    assert raised == []  # the approver's error was thrown back into the UI code


# ---------------------------------------------------------------- two answers


@pytest.mark.asyncio
async def test_deny_then_approve_given_at_once_does_not_run_the_tool(server: LLMServer) -> None:
    """Two answers for one call pushed as the request arrives (a double click: Deny,
    then Approve): the first counts, as it does for answers arriving while the call
    waits (test_a_late_approval_answered_twice_counts_the_first_answer)."""
    ran: list[str] = []

    @tool(requires_approval=True)
    def wipe(path: str) -> str:
        """Wipe a disk."""
        ran.append(path)
        return "wiped"

    subject: Subject[ToolApprovalResponse] = Subject()

    def on_next(result: AgentResponseResult) -> None:
        for event in approval_requests(result):
            subject.on_next(ToolApprovalResponse(event.call_id, False, reason="no!"))
            subject.on_next(ToolApprovalResponse(event.call_id, True))

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("wipe", {"path": "/dev/sda"}, id="c1")]),
        Reply(text="ok"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[wipe], approver=subject)
        results = await asyncio.wait_for(
            agent.run("wipe").pipe(rx.do_action(on_next), rx.to_list()), GUARD
        )
    assert ran == []
    assert [c.error for c in called(results)] == ["the user denied the call to tool 'wipe': no!"]


# ---------------------------------------------------------------- a stubborn tool


@pytest.mark.asyncio
async def test_a_tool_ignoring_cancellation_still_times_out(server: LLMServer) -> None:
    """An async tool with ``timeout=0.05`` that swallows its cancellation and returns
    later: a ToolTimeout error result; the value produced after the deadline is not used."""

    @tool(timeout=0.05)
    async def stubborn() -> str:
        """Ignores cancellation."""
        try:
            await asyncio.sleep(0.3)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)
        return "late"

    server.enqueue(Reply(tool_calls=[ToolCallSpec("stubborn", {}, id="c1")]), Reply(text="ok"))
    async with OpenAIChatClient(server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[stubborn]).send("go"), GUARD)
    assert [m.content for m in response.tool_messages] == [
        "Error: tool 'stubborn' timed out after 0.05 s"
    ]


# ---------------------------------------------------------------- reassigned attributes


@pytest.mark.asyncio
async def test_tools_and_approver_assigned_after_construction_take_effect(
    server: LLMServer,
) -> None:
    """``Agent.tools`` and ``Agent.approver`` are public attributes: assigning them
    changes both what the model is offered and what runs, from the next call on."""

    @tool
    def extra() -> str:
        """An extra tool."""
        return "extra!"

    async def yes(event: ToolApprovalRequestEvent) -> bool:
        return True

    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("remove", {"path": "/tmp/a"}, id="c1"),
                ToolCallSpec("extra", {}, id="c2"),
            ]
        ),
        Reply(text="ok"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[remove])
        agent.tools = (*agent.tools, extra)
        agent.approver = yes
        response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert server.requests[0].tool_names == ("remove", "extra")  # offered...
    assert [m.content for m in response.tool_messages] == ["removed /tmp/a", "extra!"]  # ...run


# ---------------------------------------------------------------- a copy for the approver


@pytest.mark.asyncio
async def test_an_approver_cannot_change_the_arguments_it_approves(server: LLMServer) -> None:
    """``ToolApprovalRequestEvent.arguments`` is a copy: an approver (or UI code
    formatting it) that mutates it changes neither what runs nor the transcript."""
    ran: list[str] = []

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        shown: Any = event.arguments
        shown["path"] = "/etc/passwd"  # e.g. a UI normalising paths for display
        return True

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("delete", {"path": "/tmp/x"}, id="c1")]),
        Reply(text="ok"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[delete], approver=approver)
        response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert ran == ["/tmp/x"]
    assert response.tool_calls[0].arguments == {"path": "/tmp/x"}
