"""Tool approvals, above all the provider's own tools that ask approval
(the Responses API's remote MCP tools: ``mcp_approval_request`` output items answered
by ``mcp_approval_response`` input items).

What a user would expect of them: every request asked (concurrently) and answered after
itself; local tool calls and remote approvals side by side, one approver (a ``Subject``)
answering both by id; answers that come early, late, for another id, or not as ``True``;
timeouts; disposal and cancellation while an answer is awaited; history (in memory and as
JSON) and the next turn's request being valid Responses input; ``store=False``; the
reasoning items before a request; the recorder and the renderers. Everything over real
HTTP on 127.0.0.1 when a client is involved; nothing patched.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter
from reactivex import Observable, abc
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import Agent, collect_agent_response
from rafrx import operators as ops
from rafrx.content import ReasoningContent, TextContent
from rafrx.errors import MaxStepsExceeded
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import OPENAI_REASONING, ChatMessage, MessageRole, answers_approvals
from rafrx.notebook import (
    LiveState,
    live_html,
    result_html,
    timeline,
)
from rafrx.recorder import load, record, replay
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIResponsesClient, to_responses_input
from rafrx.terminal import TerminalRenderer
from rafrx.tools import ToolApprovalResponse, tool
from rafrx.updates import AgentResponseUpdate
from tests.sources._raw_server import KEY, Seen, raw_server
from tests.sources.test_responses_agent_hunt import (
    JSONHistory,
    call,
    message,
    reasoning,
    serving,
    turn,
)
from tests.test_agent_mcp_approvals import GUARD, QUESTION, answer_body, approval_body, served
from tests.test_sdk_request_types import body_problems

MODEL = "gpt-x"
ITEM = TypeAdapter[Any](ResponseInputItemParam)


# ---------------------------------------------------------------- helpers


def mcp_request(
    item_id: str, name: str = "roll", arguments: Any = '{"sides": 6}'
) -> dict[str, Any]:
    """A remote MCP tool's ``mcp_approval_request`` output item."""
    return {
        "type": "mcp_approval_request",
        "id": item_id,
        "server_label": "dice",
        "name": name,
        "arguments": arguments,
    }


def mcp_call(item_id: str, request_id: str, output: str = "4") -> dict[str, Any]:
    """The ``mcp_call`` item the server runs once its request is approved."""
    return {
        "type": "mcp_call",
        "id": item_id,
        "server_label": "dice",
        "name": "roll",
        "arguments": '{"sides": 6}',
        "output": output,
        "approval_request_id": request_id,
    }


def checked(seen: Seen) -> list[dict[str, Any]]:
    """A recorded request's input items, each validated as openai-python's input item,
    and the whole body checked against the SDK's request types."""
    body = seen.body
    assert isinstance(body, dict)
    items: list[dict[str, Any]] = body["input"]
    for item in items:
        ITEM.validate_python(item)
    assert body_problems("openai-responses", body) == []
    return items


def answers(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if i.get("type") == "mcp_approval_response"]


def shape(items: Sequence[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """``(type or role, id or approval_request_id)`` of each input item."""
    return [
        (i.get("type") or i.get("role"), i.get("id") or i.get("approval_request_id")) for i in items
    ]


def answered_after_request(items: Sequence[dict[str, Any]]) -> None:
    """Every answer names a request that came before it in ``items`` (whole or by
    reference), and no request is answered twice."""
    requests: set[str] = set()
    answered: list[str] = []
    for item in items:
        if item.get("type") in ("mcp_approval_request", "item_reference"):
            requests.add(item["id"])
        elif item.get("type") == "mcp_approval_response":
            assert item["approval_request_id"] in requests, f"answer before request: {items}"
            answered.append(item["approval_request_id"])
    assert len(answered) == len(set(answered)), answered


def answer_blocks(results: Sequence[AgentResponseResult]) -> list[dict[str, Any]]:
    """The ``mcp_approval_response`` blocks ``execute_tools`` emitted in ``results``."""
    return [
        c.provider_data
        for r in results
        for c in r.contents
        if isinstance(c, ReasoningContent)
        and isinstance(c.provider_data, dict)
        and c.provider_data.get("type") == "mcp_approval_response"
    ]


def approving(result: AgentResponseResult) -> bool:
    return any(isinstance(e, ToolApprovalRequestEvent) for e in result.events)


async def alone(
    body: bytes, approver: Any, tools: Sequence[Any] = (), **kwargs: Any
) -> AgentResponse:
    """``execute_tools`` over a Responses SSE body (no HTTP: no client involved)."""
    stream = from_sse(body, "openai-responses").pipe(
        ops.convert(), ops.execute_tools(tools, approver, **kwargs)
    )
    return await asyncio.wait_for(collect_agent_response(stream), GUARD)


@tool(requires_approval=True)
def lookup(city: str) -> str:
    """Look the weather up."""
    return f"sunny in {city}"


def subscribe_turn(
    agent: Agent, text: str, on_result: Callable[[AgentResponseResult], None] | None = None
) -> tuple[asyncio.Future[None], abc.DisposableBase, list[AgentResponseResult]]:
    """Subscribe to ``agent.run(text)``: its end, its subscription and its results."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    results: list[AgentResponseResult] = []

    def on_next(result: AgentResponseResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    def on_error(error: Exception) -> None:
        if not done.done():
            done.set_exception(error)

    def on_completed() -> None:
        if not done.done():
            done.set_result(None)

    subscription = agent.run(text).subscribe(on_next, on_error, on_completed)
    return done, subscription, results


# ================================================================ execute_tools alone


@pytest.mark.asyncio
async def test_several_remote_requests_are_all_asked_at_once_and_each_answered_after_it() -> None:
    asked: list[str] = []
    everyone = asyncio.Event()

    async def approver(request: ToolApprovalRequestEvent) -> bool:
        asked.append(request.call_id)
        if len(asked) == 3:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 2)  # (asked one after the other: times out)
        return True

    body = turn(mcp_request("mcpr_1"), mcp_request("mcpr_2"), mcp_request("mcpr_3"))
    response = await alone(body, approver)
    [msg] = response.turn_transcript
    items = to_responses_input([msg])
    assert sorted(asked) == ["mcpr_1", "mcpr_2", "mcpr_3"]
    answered_after_request(items)
    assert sorted((a["approval_request_id"], a["approve"]) for a in answers(items)) == [
        ("mcpr_1", True),
        ("mcpr_2", True),
        ("mcpr_3", True),
    ]


@pytest.mark.asyncio
async def test_an_answer_to_another_request_denies_the_remote_tool() -> None:
    response = await alone(
        approval_body(), lambda request: ToolApprovalResponse("mcpr_other", True)
    )
    [answer] = answers(to_responses_input(response.turn_transcript))
    assert answer["approve"] is False
    assert "mcpr_other" in answer["reason"]


@pytest.mark.parametrize(
    "given",
    ["yes", 1, None, 0, "true", [True], ToolApprovalResponse("mcpr_01", "yes")],  # type: ignore[arg-type]
    ids=["yes", "one", "none", "zero", "true-str", "list", "response-approved-str"],
)
@pytest.mark.asyncio
async def test_anything_but_true_denies_the_remote_tool(given: Any) -> None:
    async def approver(request: ToolApprovalRequestEvent) -> Any:
        return given

    response = await alone(approval_body(), approver)
    [answer] = answers(to_responses_input(response.turn_transcript))
    assert answer["approve"] is False
    assert isinstance(answer["reason"], str)
    assert answer["reason"]
    ITEM.validate_python(answer)


@pytest.mark.asyncio
async def test_an_async_approver_raising_or_cancelling_itself_denies_the_remote_tool() -> None:
    async def raising(request: ToolApprovalRequestEvent) -> bool:
        raise LookupError("no such user")

    async def cancelling(request: ToolApprovalRequestEvent) -> bool:
        raise asyncio.CancelledError("the dialog was closed")

    for approver, why in ((raising, "no such user"), (cancelling, "the dialog was closed")):
        response = await alone(approval_body(), approver)
        [answer] = answers(to_responses_input(response.turn_transcript))
        assert answer["approve"] is False
        assert why in answer["reason"]


@pytest.mark.asyncio
async def test_an_observable_answer_given_before_the_request_is_seen_counts() -> None:
    upstream: Subject[AgentResponseUpdate] = Subject()
    decisions: Subject[ToolApprovalResponse] = Subject()
    stream = upstream.pipe(ops.convert(), ops.execute_tools([], decisions))
    task = asyncio.ensure_future(collect_agent_response(stream))
    await asyncio.sleep(0)  # subscribed
    decisions.on_next(ToolApprovalResponse("mcpr_01", False, "pre-denied by policy"))
    decisions.on_next(ToolApprovalResponse("mcpr_01", True))  # (the first answer counts)
    updates = from_sse(approval_body(), "openai-responses").pipe(rx.to_list()).run()
    for update in updates:
        upstream.on_next(update)
    upstream.on_completed()
    response = await asyncio.wait_for(task, GUARD)
    [answer] = answers(to_responses_input(response.turn_transcript))
    assert answer["approve"] is False
    assert "pre-denied by policy" in answer["reason"]


@pytest.mark.asyncio
async def test_an_observable_answer_after_the_approval_timeout_is_ignored() -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()
    results: list[AgentResponseResult] = []
    stream = from_sse(approval_body(), "openai-responses").pipe(
        ops.convert(), ops.execute_tools([], decisions, approval_timeout=0.05)
    )
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    stream.subscribe(results.append, done.set_exception, lambda: done.set_result(None))
    await asyncio.wait_for(done, GUARD)
    decisions.on_next(ToolApprovalResponse("mcpr_01", True))  # too late
    await asyncio.sleep(0.05)
    blocks = answer_blocks(results)
    assert len(blocks) == 1
    assert blocks[0]["approve"] is False
    assert "0.05 s" in blocks[0]["reason"]
    assert not decisions.observers  # (the subscription to the answers ended with the stream)


@pytest.mark.asyncio
async def test_an_observable_that_completes_denies_the_pending_remote_tools() -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()

    def on_result(result: AgentResponseResult) -> None:
        if approving(result):
            asyncio.get_running_loop().call_soon(decisions.on_completed)

    stream = from_sse(turn(mcp_request("mcpr_1"), mcp_request("mcpr_2")), "openai-responses")
    response = await asyncio.wait_for(
        collect_agent_response(
            stream.pipe(ops.convert(), ops.execute_tools([], decisions), rx.do_action(on_result))
        ),
        GUARD,
    )
    got = answers(to_responses_input(response.turn_transcript))
    assert sorted(a["approval_request_id"] for a in got) == ["mcpr_1", "mcpr_2"]
    assert all(a["approve"] is False and "completed" in a["reason"] for a in got)


@pytest.mark.asyncio
async def test_an_observable_answer_from_another_thread_approves_the_remote_tool() -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()

    def on_result(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):  # a UI thread answers
                answer = ToolApprovalResponse(event.call_id, True)
                threading.Thread(target=decisions.on_next, args=(answer,)).start()

    stream = from_sse(approval_body(), "openai-responses").pipe(
        ops.convert(), ops.execute_tools([], decisions), rx.do_action(on_result)
    )
    response = await asyncio.wait_for(collect_agent_response(stream), GUARD)
    [answer] = answers(to_responses_input(response.turn_transcript))
    assert answer == {
        "type": "mcp_approval_response",
        "approval_request_id": "mcpr_01",
        "approve": True,
    }


@pytest.mark.asyncio
async def test_an_observable_answer_given_while_the_request_is_emitted_counts() -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()

    def on_result(result: AgentResponseResult) -> None:  # answers at once, re-entrantly
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                decisions.on_next(ToolApprovalResponse(event.call_id, True))

    stream = from_sse(turn(mcp_request("mcpr_1"), mcp_request("mcpr_2")), "openai-responses")
    response = await asyncio.wait_for(
        collect_agent_response(
            stream.pipe(ops.convert(), ops.execute_tools([], decisions), rx.do_action(on_result))
        ),
        GUARD,
    )
    got = answers(to_responses_input(response.turn_transcript))
    assert sorted((a["approval_request_id"], a["approve"]) for a in got) == [
        ("mcpr_1", True),
        ("mcpr_2", True),
    ]


@pytest.mark.asyncio
async def test_disposing_execute_tools_while_a_remote_approval_waits_sends_no_answer() -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()
    results: list[AgentResponseResult] = []
    asked = asyncio.Event()

    def on_next(result: AgentResponseResult) -> None:
        results.append(result)
        if approving(result):
            asked.set()

    stream = from_sse(approval_body(), "openai-responses").pipe(
        ops.convert(), ops.execute_tools([], decisions)
    )
    subscription = stream.subscribe(on_next)
    await asyncio.wait_for(asked.wait(), GUARD)
    subscription.dispose()
    decisions.on_next(ToolApprovalResponse("mcpr_01", True))  # after disposal: no effect
    await asyncio.sleep(0.05)
    assert not decisions.observers
    assert answer_blocks(results) == []
    tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("rafrx approval")]
    assert all(t.done() for t in tasks)


@pytest.mark.asyncio
async def test_what_the_approver_does_to_the_arguments_never_changes_what_goes_back() -> None:
    def meddling(request: ToolApprovalRequestEvent) -> bool:
        request.arguments["sides"] = 1000  # an approval UI "editing" the call
        return True

    response = await alone(approval_body(), meddling)
    request, _ = to_responses_input(response.turn_transcript)
    assert json.loads(request["arguments"]) == {"sides": 6}


@pytest.mark.asyncio
async def test_object_arguments_of_a_request_are_a_copy_in_the_event() -> None:
    def meddling(request: ToolApprovalRequestEvent) -> bool:
        request.arguments["sides"] = 1000
        return True

    body = turn(mcp_request("mcpr_1", arguments={"sides": 6}))
    response = await alone(body, meddling)
    request, _ = to_responses_input(response.turn_transcript)
    assert request["arguments"] in ({"sides": 6}, '{"sides": 6}')


# ================================================================ the agent, over HTTP


@pytest.mark.asyncio
async def test_agent_answers_several_requests_and_the_next_call_is_valid_input() -> None:
    bodies = [
        turn(mcp_request("mcpr_1"), mcp_request("mcpr_2", "flip", "{}")),
        turn(mcp_call("mcp_1", "mcpr_1"), message("msg_1", "4, and heads.")),
    ]
    asked: list[str] = []

    def approver(request: ToolApprovalRequestEvent) -> ToolApprovalResponse:
        asked.append(request.call_id)
        return ToolApprovalResponse(request.call_id, request.name == "roll", "no flipping")

    async with (
        raw_server(serving(*bodies)) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        response = await asyncio.wait_for(Agent(client, approver=approver).send("Go."), GUARD)
    assert sorted(asked) == ["mcpr_1", "mcpr_2"]
    assert len(seen) == 2
    items = checked(seen[1])
    answered_after_request(items)
    decided = {a["approval_request_id"]: a["approve"] for a in answers(items)}
    assert decided == {"mcpr_1": True, "mcpr_2": False}
    assert response.text == "4, and heads."


@pytest.mark.asyncio
async def test_one_subject_answers_a_local_call_and_a_remote_request_by_id() -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()
    asked: list[str] = []
    loop = asyncio.get_running_loop()

    def on_result(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                asked.append(event.call_id)
                verdict = ToolApprovalResponse(event.call_id, event.call_id == "call_1", "no")
                loop.call_later(0.01, decisions.on_next, verdict)

    bodies = [
        turn(call("fc_1", "call_1", "lookup", {"city": "Kyoto"}), mcp_request("mcpr_1")),
        turn(message("msg_1", "Sunny; no dice.")),
    ]
    async with (
        raw_server(serving(*bodies)) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, tools=[lookup], approver=decisions)
        done, _, _ = subscribe_turn(agent, "Weather and a die?", on_result)
        await asyncio.wait_for(done, GUARD)
    assert sorted(asked) == ["call_1", "mcpr_1"]
    items = checked(seen[1])
    answered_after_request(items)
    [output] = [i for i in items if i.get("type") == "function_call_output"]
    assert output == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "sunny in Kyoto",
    }
    [answer] = answers(items)
    assert (answer["approval_request_id"], answer["approve"]) == ("mcpr_1", False)
    assert not decisions.observers


@pytest.mark.asyncio
async def test_a_subject_answers_approvals_asked_in_two_steps_of_one_turn() -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()
    loop = asyncio.get_running_loop()

    def on_result(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                verdict = ToolApprovalResponse(event.call_id, True)
                loop.call_later(0.01, decisions.on_next, verdict)

    bodies = [
        turn(mcp_request("mcpr_1"), response_id="resp_1"),
        turn(mcp_call("mcp_1", "mcpr_1"), mcp_request("mcpr_2"), response_id="resp_2"),
        turn(mcp_call("mcp_2", "mcpr_2"), message("msg_1", "4 and 5."), response_id="resp_3"),
    ]
    async with (
        raw_server(serving(*bodies)) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=decisions)
        done, _, results = subscribe_turn(agent, "Roll twice.", on_result)
        await asyncio.wait_for(done, GUARD)
    assert len(seen) == 3
    items = checked(seen[2])
    answered_after_request(items)
    assert [(a["approval_request_id"], a["approve"]) for a in answers(items)] == [
        ("mcpr_1", True),
        ("mcpr_2", True),
    ]
    assert "".join(c.text for r in results for c in r.contents if isinstance(c, TextContent)) == (
        "4 and 5."
    )


@pytest.mark.asyncio
async def test_a_subject_answer_for_the_wrong_id_never_approves_and_times_out_denied() -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()
    loop = asyncio.get_running_loop()

    def on_result(result: AgentResponseResult) -> None:
        if approving(result):  # answers "mcpr_02": not this request
            loop.call_soon(decisions.on_next, ToolApprovalResponse("mcpr_02", True))

    async with (
        raw_server(served(approval_body(), answer_body("Not rolled."))) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=decisions, approval_timeout=0.1)
        done, _, _ = subscribe_turn(agent, "Roll a die.", on_result)
        await asyncio.wait_for(done, GUARD)
    [answer] = answers(checked(seen[1]))
    assert answer["approval_request_id"] == "mcpr_01"
    assert answer["approve"] is False
    assert "0.1 s" in answer["reason"]


@pytest.mark.asyncio
async def test_disposing_the_turn_while_a_remote_approval_waits(no_task_leak: None) -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()
    history = InMemoryHistoryProvider()
    asked = asyncio.Event()

    def on_result(result: AgentResponseResult) -> None:
        if approving(result):
            asked.set()

    async with (
        raw_server(serving(approval_body(), turn(message("msg_9", "Hello again.")))) as (
            url,
            seen,
        ),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=decisions, history=history)
        done, subscription, _ = subscribe_turn(agent, "Roll a die.", on_result)
        await asyncio.wait_for(asked.wait(), GUARD)
        subscription.dispose()
        decisions.on_next(ToolApprovalResponse("mcpr_01", True))  # too late: no one listens
        await asyncio.sleep(0.05)
        assert len(seen) == 1  # no answer went out
        assert not decisions.observers
        assert history.messages == ()  # nothing saved, not half of it
        assert not done.done()  # (a disposed observable says nothing more)
        # The agent is free again: the next turn (same observable approver) runs.
        response = await asyncio.wait_for(agent.send("Hi."), GUARD)
    assert response.text == "Hello again."
    assert checked(seen[1]) == [{"role": "user", "content": "Hi."}]


@pytest.mark.asyncio
async def test_cancelling_send_while_the_approver_thinks(no_task_leak: None) -> None:
    cancelled: list[str] = []
    asked = asyncio.Event()

    async def approver(request: ToolApprovalRequestEvent) -> bool:
        asked.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(request.call_id)
            raise
        return True

    history = InMemoryHistoryProvider()
    async with (
        raw_server(serving(approval_body(), turn(message("msg_9", "Hello again.")))) as (
            url,
            seen,
        ),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=approver, history=history)
        sending = asyncio.ensure_future(agent.send("Roll a die."))
        await asyncio.wait_for(asked.wait(), GUARD)
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(sending, GUARD)
        await asyncio.sleep(0.05)
        assert cancelled == ["mcpr_01"]
        assert len(seen) == 1
        assert history.messages == ()
        response = await asyncio.wait_for(agent.send("Hi."), GUARD)
    assert response.text == "Hello again."
    assert checked(seen[1]) == [{"role": "user", "content": "Hi."}]


@pytest.mark.asyncio
async def test_a_blocking_sync_approver_left_behind_by_disposal_sends_nothing(
    loop_errors: list[dict[str, Any]],
) -> None:
    release = threading.Event()
    entered = threading.Event()

    def approver(request: ToolApprovalRequestEvent) -> bool:  # a terminal prompt
        entered.set()
        release.wait(5)
        return True

    async with (
        raw_server(serving(approval_body(), turn(message("msg_9", "unused")))) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=approver)
        done, subscription, results = subscribe_turn(agent, "Roll a die.")
        await asyncio.wait_for(asyncio.to_thread(entered.wait, 5), GUARD)
        subscription.dispose()
        release.set()
        await asyncio.sleep(0.2)
        count = len(results)
        await asyncio.sleep(0.05)
        assert len(seen) == 1
    assert len(results) == count
    assert answer_blocks(results) == []
    assert not done.done()
    assert loop_errors == []


@pytest.mark.asyncio
async def test_disposing_the_turn_from_another_thread_while_an_approval_waits(
    loop_errors: list[dict[str, Any]],
) -> None:
    decisions: Subject[ToolApprovalResponse] = Subject()
    asked = asyncio.Event()

    def on_result(result: AgentResponseResult) -> None:
        if approving(result):
            asked.set()

    async with (
        raw_server(serving(approval_body(), answer_body())) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=decisions)
        done, subscription, results = subscribe_turn(agent, "Roll a die.", on_result)
        await asyncio.wait_for(asked.wait(), GUARD)
        worker = threading.Thread(target=subscription.dispose)  # a UI's "stop" button
        worker.start()
        await asyncio.to_thread(worker.join, 5)
        await asyncio.sleep(0.1)
        assert len(seen) == 1
        assert not decisions.observers
        pending = [
            t
            for t in asyncio.all_tasks()
            if t.get_name().startswith(("rafrx approval", "rafrx turn"))
        ]
        assert all(t.done() for t in pending)
    assert answer_blocks(results) == []
    assert not done.done()
    assert loop_errors == []


@pytest.mark.asyncio
async def test_a_blocking_sync_approver_past_the_timeout_does_not_hold_the_turn() -> None:
    release = threading.Event()

    def approver(request: ToolApprovalRequestEvent) -> bool:  # a prompt nobody answers
        release.wait(5)
        return True

    try:
        async with (
            raw_server(serving(approval_body(), answer_body("Not rolled."))) as (url, seen),
            OpenAIResponsesClient(url, KEY, MODEL) as client,
        ):
            agent = Agent(client, approver=approver, approval_timeout=0.1)
            response = await asyncio.wait_for(agent.send("Roll a die."), 3)
    finally:
        release.set()
    assert response.text == "Not rolled."
    [answer] = answers(checked(seen[1]))
    assert answer["approve"] is False
    assert "0.1 s" in answer["reason"]


@pytest.mark.asyncio
async def test_max_steps_reached_after_an_answer_keeps_it_in_the_partial_and_saves_nothing() -> (
    None
):
    history = InMemoryHistoryProvider()
    async with (
        raw_server(serving(approval_body(), answer_body())) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=lambda request: True, max_steps=1, history=history)
        with pytest.raises(MaxStepsExceeded) as raised:
            await asyncio.wait_for(agent.send("Roll a die."), GUARD)
    assert len(seen) == 1
    partial = raised.value.partial
    assert partial is not None
    assert any(answers_approvals(m) for m in partial.turn_transcript)
    assert history.messages == ()
    assert "server had not ended the turn" in str(raised.value)


@pytest.mark.asyncio
async def test_two_steps_are_enough_for_an_approval_and_its_answer() -> None:
    async with (
        raw_server(serving(approval_body(), answer_body())) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=lambda request: True, max_steps=2)
        response = await asyncio.wait_for(agent.send("Roll a die."), GUARD)
    assert len(seen) == 2
    assert response.text == "You rolled a 4."


# ================================================================ history and the wire


def _dice_turns() -> list[bytes]:
    return [
        turn(reasoning("rs_1", "Ask to roll.", encrypted="E1"), mcp_request("mcpr_1")),
        turn(mcp_call("mcp_1", "mcpr_1"), message("msg_1", "You rolled a 4.")),
        turn(message("msg_2", "Again: a 4.")),
    ]


@pytest.mark.parametrize("kind", ["memory", "json"])
@pytest.mark.asyncio
async def test_a_saved_turn_with_an_approval_makes_a_valid_next_request(kind: str) -> None:
    history: Any = InMemoryHistoryProvider() if kind == "memory" else JSONHistory()
    async with (
        raw_server(serving(*_dice_turns())) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=lambda request: True, history=history)
        await asyncio.wait_for(agent.send("Roll a die."), GUARD)
        response = await asyncio.wait_for(agent.send("Again?"), GUARD)
    assert response.text == "Again: a 4."
    items = checked(seen[2])
    answered_after_request(items)
    assert shape(items) == [
        ("user", None),
        ("reasoning", "rs_1"),
        ("item_reference", "mcpr_1"),
        ("mcp_approval_response", "mcpr_1"),
        ("item_reference", "mcp_1"),
        ("assistant", None),
        ("user", None),
    ]
    assert items[1]["encrypted_content"] == "E1"


@pytest.mark.asyncio
async def test_with_store_off_the_reasoning_and_request_go_back_whole_in_order() -> None:
    history = InMemoryHistoryProvider()
    async with (
        raw_server(serving(*_dice_turns())) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL, store=False) as client,
    ):
        agent = Agent(client, approver=lambda request: True, history=history)
        await asyncio.wait_for(agent.send("Roll a die."), GUARD)
        await asyncio.wait_for(agent.send("Again?"), GUARD)
    second, third = checked(seen[1]), checked(seen[2])
    assert shape(second) == [
        ("user", None),
        ("reasoning", "rs_1"),
        ("mcp_approval_request", "mcpr_1"),
        ("mcp_approval_response", "mcpr_1"),
    ]
    assert second[2] == mcp_request("mcpr_1")
    assert "reasoning.encrypted_content" in seen[1].body["include"]
    answered_after_request(third)
    assert [t for t, _ in shape(third)].count("mcp_approval_response") == 1


@pytest.mark.asyncio
async def test_with_store_off_an_answer_never_goes_without_its_request() -> None:
    bodies = [
        turn(reasoning("rs_1", "Ask.", encrypted=None), mcp_request("mcpr_1")),
        turn(message("msg_1", "You rolled a 4.")),
    ]
    async with (
        raw_server(serving(*bodies)) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL, store=False) as client,
    ):
        await asyncio.wait_for(Agent(client, approver=lambda r: True).send("Roll."), GUARD)
    answered_after_request(checked(seen[1]))


@pytest.mark.asyncio
async def test_reasoning_items_before_each_request_go_back_paired_and_in_order() -> None:
    bodies = [
        turn(
            reasoning("rs_1", "First a die.", encrypted="E1"),
            mcp_request("mcpr_1"),
            reasoning("rs_2", "Then a coin.", encrypted="E2"),
            mcp_request("mcpr_2", "flip", "{}"),
        ),
        turn(message("msg_1", "Done.")),
    ]
    async with (
        raw_server(serving(*bodies)) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        await asyncio.wait_for(Agent(client, approver=lambda r: True).send("Go."), GUARD)
    items = checked(seen[1])
    head = shape(items)[:5]
    assert head == [
        ("user", None),
        ("reasoning", "rs_1"),
        ("item_reference", "mcpr_1"),
        ("reasoning", "rs_2"),
        ("item_reference", "mcpr_2"),
    ]
    assert [i.get("encrypted_content") for i in items[1:5:2]] == ["E1", "E2"]
    answered_after_request(items)
    assert len(answers(items)) == 2


@pytest.mark.asyncio
async def test_a_question_left_to_the_caller_can_be_answered_in_the_next_turn() -> None:
    """Without an approver the request stays in the history; the caller answers it with an
    assistant message carrying an ``mcp_approval_response`` block, which goes back after it."""
    history = InMemoryHistoryProvider()
    async with (
        raw_server(serving(approval_body(), answer_body())) as (url, seen),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, history=history)
        await asyncio.wait_for(agent.send("Roll a die."), GUARD)
        block = {"type": "mcp_approval_response", "approval_request_id": "mcpr_01", "approve": True}
        answer = ChatMessage(MessageRole.ASSISTANT, "", provider_data={OPENAI_REASONING: (block,)})
        response = await asyncio.wait_for(agent.send([answer]), GUARD)
    assert response.text == "You rolled a 4."
    items = checked(seen[1])
    assert items[:1] == [QUESTION]
    answered_after_request(items)
    assert answers(items) == [block]


# ================================================================ recorder and renderers


@pytest.mark.asyncio
async def test_a_recorded_turn_with_an_approval_replays_to_the_same_response(
    tmp_path: Path,
) -> None:
    path = tmp_path / "turn.jsonl"
    async with (
        raw_server(served(approval_body(), answer_body())) as (url, _),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        agent = Agent(client, approver=lambda r: ToolApprovalResponse(r.call_id, False, "no"))
        recorded = record(agent.run("Roll a die."), path)
        response = await asyncio.wait_for(
            collect_agent_response(recorded, agent_id=agent.id), GUARD
        )
    replayed = await asyncio.wait_for(
        collect_agent_response(replay(path), agent_id=agent.id), GUARD
    )
    assert replayed.turn_transcript == response.turn_transcript
    assert to_responses_input(replayed.turn_transcript) == to_responses_input(
        response.turn_transcript
    )
    events = [e for r in load(path).items for e in r.events]
    [request] = [e for e in events if isinstance(e, ToolApprovalRequestEvent)]
    assert (request.call_id, request.arguments) == ("mcpr_01", {"sides": 6})
    picture = timeline(load(path))
    assert picture.svg.startswith("<svg")
    assert any("mcpr_01" in lane for lane in picture.lanes)


@pytest.mark.asyncio
async def test_recorded_updates_replayed_into_execute_tools_ask_the_approver_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "updates.jsonl"
    async with (
        raw_server(served(approval_body())) as (url, _),
        OpenAIResponsesClient(url, KEY, MODEL) as client,
    ):
        updates: Observable[AgentResponseUpdate] = client.stream([ChatMessage.user("Roll.")])
        await asyncio.wait_for(record(updates, path).pipe(rx.to_list()), GUARD)
    asked: list[Any] = []

    def approver(request: ToolApprovalRequestEvent) -> bool:
        asked.append((request.call_id, request.name, request.arguments, request.description))
        return True

    response = await asyncio.wait_for(
        collect_agent_response(replay(path).pipe(ops.convert(), ops.execute_tools([], approver))),
        GUARD,
    )
    assert asked == [("mcpr_01", "roll", {"sides": 6}, "a tool of the MCP server 'dice'")]
    [answer] = answers(to_responses_input(response.turn_transcript))
    assert answer["approve"] is True


async def _denied_results() -> list[AgentResponseResult]:
    body = turn(reasoning("rs_1", "Ask first.", encrypted="E1"), mcp_request("mcpr_1"))
    stream = from_sse(body, "openai-responses").pipe(
        ops.convert(),
        ops.execute_tools([], lambda r: ToolApprovalResponse(r.call_id, False, "not now")),
    )
    results: list[AgentResponseResult] = await asyncio.wait_for(stream.pipe(rx.to_list()), GUARD)
    return results


@pytest.mark.asyncio
async def test_the_terminal_shows_the_request_and_no_empty_lines_for_the_blocks() -> None:
    results = await _denied_results()
    for color in (False, True):
        out = io.StringIO()
        renderer = TerminalRenderer(out, color=color)
        for result in results:
            renderer.result(result)
        renderer.close()
        text = out.getvalue()
        lines = text.splitlines()
        assert sum("approval asked: roll(" in line for line in lines) == 1
        assert '"sides": 6' in text
        assert text.count("Ask first.") == 1
        assert all(line.strip(" \x1b[0m") for line in lines), lines  # no blank junk line
        assert "mcp_approval" not in text
        assert "{'type'" not in text


@pytest.mark.asyncio
async def test_the_notebook_html_of_the_approval_results_is_escaped_and_not_empty() -> None:
    body = turn(mcp_request("mcpr_1", "<script>x</script>", '{"q": "<b>"}'))
    stream = from_sse(body, "openai-responses").pipe(
        ops.convert(), ops.execute_tools([], lambda r: True)
    )
    results: list[AgentResponseResult] = await asyncio.wait_for(stream.pipe(rx.to_list()), GUARD)
    html = "".join(result_html(r) for r in results)
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert '"<b>"' not in html
    assert "approval asked" in html
    state = LiveState()
    for result in results:
        state.add(copy.deepcopy(result))
    assert "<script>" not in live_html(state)
