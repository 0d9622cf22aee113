"""Approval requests of the Responses API's remote MCP tools, answered by the approver.

A remote MCP tool whose ``require_approval`` is set ends the response with an
``mcp_approval_request`` output item; the client answers with an
``mcp_approval_response`` input item naming it (``approval_request_id``,
``approve``) after the request item, and the model goes on (openai-python's
``response_input_item_param.McpApprovalRequest`` / ``McpApprovalResponse``).
``execute_tools`` with an approver asks it, as for a local tool, and adds the
answer to the assistant message; the agent sends it back within the turn. All over
real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from aiohttp import web
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import Agent, collect_agent_response
from rafrx import operators as ops
from rafrx.errors import MaxStepsExceeded
from rafrx.events import ToolApprovalRequestEvent
from rafrx.messages import answers_approvals
from rafrx.notebook import live, response_html
from rafrx.response import AgentResponseResult
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIResponsesClient, to_responses_input
from rafrx.terminal import TerminalRenderer
from rafrx.tools import ToolApprovalResponse
from tests.sources._raw_server import KEY, Seen, raw_server
from tests.sources.test_dialect_quirks import sse
from tests.sources.test_provider_shapes import RESP, completed, rs
from tests.test_notebook_robustness import FakeDisplay

GUARD = 10  # seconds: against hangs only

REQUEST = {
    "type": "mcp_approval_request",
    "id": "mcpr_01",
    "server_label": "dice",
    "name": "roll",
    "arguments": '{"sides": 6}',
}
QUESTION = {"role": "user", "content": "Roll a die."}


def approval_body() -> bytes:
    return sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item=REQUEST),
        rs("response.output_item.done", output_index=0, item=REQUEST),
        completed(REQUEST),
    )


def answer_body(text: str = "You rolled a 4.") -> bytes:
    call = {
        "type": "mcp_call",
        "id": "mcp_01",
        "server_label": "dice",
        "name": "roll",
        "arguments": '{"sides": 6}',
        "output": "4",
        "approval_request_id": "mcpr_01",
    }
    message = {
        "type": "message",
        "id": "msg_01",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return sse(
        rs("response.created", response=RESP),
        rs("response.output_item.done", output_index=0, item=call),
        rs("response.output_item.added", output_index=1, item={**message, "content": []}),
        rs(
            "response.output_text.delta",
            item_id="msg_01",
            output_index=1,
            content_index=0,
            delta=text,
        ),
        rs("response.output_item.done", output_index=1, item=message),
        completed(call, message),
    )


def served(*bodies: bytes) -> Any:
    queue = list(bodies)

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=queue.pop(0), content_type="text/event-stream")

    return handle


def valid_input(seen: Seen) -> list[dict[str, Any]]:
    """The request's input items, each checked against openai-python's input item type."""
    items: list[dict[str, Any]] = seen.body["input"]
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseInputItemParam)
    for item in items:
        adapter.validate_python(item)
    return items


@pytest.mark.asyncio
async def test_an_approved_remote_tool_goes_back_with_its_answer_and_the_model_goes_on() -> None:
    asked: list[ToolApprovalRequestEvent] = []

    def approve(request: ToolApprovalRequestEvent) -> bool:
        asked.append(request)
        return True

    async with (
        raw_server(served(approval_body(), answer_body())) as (url, seen),
        OpenAIResponsesClient(url, KEY, "gpt-x") as client,
    ):
        response = await asyncio.wait_for(
            Agent(client, approver=approve).send("Roll a die."), GUARD
        )
    assert [(r.call_id, r.name, r.arguments) for r in asked] == [("mcpr_01", "roll", {"sides": 6})]
    assert "dice" in asked[0].description
    assert len(seen) == 2
    assert valid_input(seen[1]) == [
        QUESTION,
        {"type": "item_reference", "id": "mcpr_01"},  # (stored by the API: store is not off)
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_01", "approve": True},
    ]
    assert response.text == "You rolled a 4."


@pytest.mark.asyncio
async def test_a_denied_remote_tool_goes_back_denied_with_the_reason() -> None:
    async with (
        raw_server(served(approval_body(), answer_body("I may not roll."))) as (url, seen),
        OpenAIResponsesClient(url, KEY, "gpt-x") as client,
    ):
        agent = Agent(
            client,
            approver=lambda request: ToolApprovalResponse(request.call_id, False, "no dice today"),
        )
        response = await asyncio.wait_for(agent.send("Roll a die."), GUARD)
    [answer] = [i for i in valid_input(seen[1]) if i.get("type") == "mcp_approval_response"]
    assert answer["approve"] is False
    assert "no dice today" in answer["reason"]
    assert response.text == "I may not roll."


@pytest.mark.asyncio
async def test_an_unanswered_remote_tool_is_denied_at_the_approval_timeout() -> None:
    async def never(request: ToolApprovalRequestEvent) -> bool:
        await asyncio.sleep(3600)
        return True

    async with (
        raw_server(served(approval_body(), answer_body("Not rolled."))) as (url, seen),
        OpenAIResponsesClient(url, KEY, "gpt-x") as client,
    ):
        agent = Agent(client, approver=never, approval_timeout=0.05)
        await asyncio.wait_for(agent.send("Roll a die."), GUARD)
    [answer] = [i for i in valid_input(seen[1]) if i.get("type") == "mcp_approval_response"]
    assert answer["approve"] is False
    assert "0.05 s" in answer["reason"]


@pytest.mark.asyncio
async def test_an_observable_approver_answers_a_remote_tool() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    results: list[AgentResponseResult] = []

    def on_result(result: AgentResponseResult) -> None:
        results.append(result)
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):  # a UI's answer, a moment later
                loop.call_later(0.01, answers.on_next, ToolApprovalResponse(event.call_id, True))

    loop = asyncio.get_running_loop()
    async with (
        raw_server(served(approval_body(), answer_body())) as (url, seen),
        OpenAIResponsesClient(url, KEY, "gpt-x") as client,
    ):
        done: asyncio.Future[None] = loop.create_future()
        Agent(client, approver=answers).run("Roll a die.").subscribe(
            on_result,
            lambda e: done.set_exception(e),
            lambda: done.set_result(None),
        )
        await asyncio.wait_for(done, GUARD)
    assert len(seen) == 2
    assert valid_input(seen[1])[-1]["approve"] is True
    assert "".join(c.text for r in results for c in r.contents if hasattr(c, "text")).endswith(
        "You rolled a 4."
    )


@pytest.mark.asyncio
async def test_without_an_approver_the_request_is_left_to_the_caller() -> None:
    async with (
        raw_server(served(approval_body())) as (url, seen),
        OpenAIResponsesClient(url, KEY, "gpt-x") as client,
    ):
        response = await asyncio.wait_for(Agent(client).send("Roll a die."), GUARD)
    assert len(seen) == 1
    [message] = response.turn_transcript
    assert not answers_approvals(message)
    assert to_responses_input(response.turn_transcript) == [REQUEST]  # to answer by hand


@pytest.mark.asyncio
async def test_a_server_that_keeps_asking_stops_at_max_steps() -> None:
    async with (
        raw_server(served(*[approval_body()] * 3)) as (url, seen),
        OpenAIResponsesClient(url, KEY, "gpt-x") as client,
    ):
        agent = Agent(client, approver=lambda request: True, max_steps=3)
        with pytest.raises(MaxStepsExceeded) as raised:
            await asyncio.wait_for(agent.send("Roll a die."), GUARD)
    assert len(seen) == 3
    assert "calling tools" not in str(raised.value)


@pytest.mark.asyncio
async def test_execute_tools_alone_adds_the_answer_after_the_request() -> None:
    response = await asyncio.wait_for(
        collect_agent_response(
            from_sse(approval_body(), "openai-responses").pipe(
                ops.convert(), ops.execute_tools([], approver=lambda request: True)
            )
        ),
        GUARD,
    )
    [message] = response.turn_transcript
    assert answers_approvals(message)
    assert to_responses_input([message]) == [
        REQUEST,
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_01", "approve": True},
    ]


@pytest.mark.asyncio
async def test_a_failing_approver_denies_the_remote_tool() -> None:
    def broken(request: ToolApprovalRequestEvent) -> bool:
        raise RuntimeError("the approval UI crashed")

    response = await asyncio.wait_for(
        collect_agent_response(
            from_sse(approval_body(), "openai-responses").pipe(
                ops.convert(), ops.execute_tools([], approver=broken)
            )
        ),
        GUARD,
    )
    [_, answer] = to_responses_input(response.turn_transcript)
    assert answer["approve"] is False
    assert "the approval UI crashed" in answer["reason"]


@pytest.mark.asyncio
async def test_with_store_off_the_request_goes_back_whole_before_its_answer() -> None:
    async with (
        raw_server(served(approval_body(), answer_body())) as (url, seen),
        OpenAIResponsesClient(url, KEY, "gpt-x", store=False) as client,
    ):
        agent = Agent(client, approver=lambda request: True)
        response = await asyncio.wait_for(agent.send("Roll a die."), GUARD)
    assert valid_input(seen[1]) == [
        QUESTION,
        REQUEST,
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_01", "approve": True},
    ]
    assert response.text == "You rolled a 4."


@pytest.mark.asyncio
async def test_answers_go_back_in_the_order_of_the_requests_whatever_order_they_come_in() -> None:
    second = {**REQUEST, "id": "mcpr_02", "arguments": '{"sides": 20}'}
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.done", output_index=0, item=REQUEST),
        rs("response.output_item.done", output_index=1, item=second),
        completed(REQUEST, second),
    )
    answered: list[str] = []

    async def slow_on_the_first(request: ToolApprovalRequestEvent) -> bool:
        await asyncio.sleep(0.2 if request.call_id == "mcpr_01" else 0)
        answered.append(request.call_id)
        return request.call_id == "mcpr_01"

    response = await asyncio.wait_for(
        collect_agent_response(
            from_sse(body, "openai-responses").pipe(
                ops.convert(), ops.execute_tools([], approver=slow_on_the_first)
            )
        ),
        GUARD,
    )
    assert answered == ["mcpr_02", "mcpr_01"]  # the approver answered the second first
    items = to_responses_input(response.turn_transcript)
    assert [(item["type"], item.get("approval_request_id", item.get("id"))) for item in items] == [
        ("mcp_approval_request", "mcpr_01"),
        ("mcp_approval_request", "mcpr_02"),
        ("mcp_approval_response", "mcpr_01"),
        ("mcp_approval_response", "mcpr_02"),
    ]
    assert [item.get("approve") for item in items[2:]] == [True, False]


@pytest.mark.asyncio
@pytest.mark.parametrize("approved", [True, False])
async def test_a_live_view_and_the_turns_html_show_the_remote_approval(approved: bool) -> None:
    async with (
        raw_server(served(approval_body(), answer_body())) as (url, _seen),
        OpenAIResponsesClient(url, KEY, "gpt-x") as client,
    ):
        display = FakeDisplay()
        view = live(
            Agent(client, approver=lambda request: approved).run("Roll a die."),
            display=display,
            interval=0,
        )
        response = await asyncio.wait_for(view, GUARD)
    card = view.state.cards["mcpr_01"]
    assert card.arguments == {"sides": 6}
    final = display.updates[-1]
    html = response_html(response)
    assert "🔒 approval asked: <b>dice.roll</b>" in html
    if approved:
        assert card.status == "approved"
        assert "[tool roll mcpr_01: approved]" in final.text
        assert "✔ approved" in html
    else:
        assert card.status == "denied"
        assert "[tool roll mcpr_01: denied]" in final.text
        assert "✘ denied: the user denied the call to tool" in html


@pytest.mark.asyncio
@pytest.mark.parametrize("approved", [True, False])
async def test_the_terminal_says_how_a_remote_approval_was_answered(approved: bool) -> None:
    results = await asyncio.wait_for(
        from_sse(approval_body(), "openai-responses")
        .pipe(ops.convert(), ops.execute_tools([], approver=lambda request: approved))
        .pipe(rx.to_list()),
        GUARD,
    )
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    for result in results:
        renderer.result(result)
    renderer.close()
    lines = out.getvalue().splitlines()
    assert any("approval asked: roll(" in line for line in lines)
    if approved:
        assert any(line.endswith(" roll approved") for line in lines), lines
    else:
        assert any("roll denied: the user denied the call to tool 'roll'" in line for line in lines)
