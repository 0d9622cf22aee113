"""Regression tests of known limitations of tool approvals an earlier session left
(session 11, helper E): answers matched by call id alone, an agent's approver reassigned
mid-turn, and turns stranded on a closed loop kept by their approver.

Each failed on the commit before its fix, for the reason its docstring gives. Every HTTP
exchange is real aiohttp over 127.0.0.1 (``rafrx.testing.LLMServer``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import reactivex
from reactivex.subject import Subject

from rafrx import Agent, FinishReason
from rafrx import content as c
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.events import ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.response import AgentResponseResult
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import ToolApprovalResponse, tool

GUARD = 5.0  # seconds: a guard against hangs only

_RAN: list[str] = []


@tool(requires_approval=True)
async def delete(path: str) -> str:
    """Delete a file."""
    _RAN.append(path)
    return f"deleted {path}"


def _requests(result: AgentResponseResult) -> list[ToolApprovalRequestEvent]:
    return [e for e in result.events if isinstance(e, ToolApprovalRequestEvent)]


def _errors(results: list[AgentResponseResult]) -> list[str | None]:
    return [x.error for r in results for x in r.contents if isinstance(x, c.ToolCalledContent)]


# ------------------------------------------------------------------------------ 1


@pytest.mark.asyncio
async def test_a_duplicate_answer_to_an_old_request_never_approves_a_call_reusing_its_id() -> None:
    """What the user does: an Agent with a ``Subject`` of answers (a UI's approve
    button). The model (Kimi gives every response the same ids,
    ``functions.delete:0``) calls ``delete("a")``; the user approves it, and the
    button sends its answer twice (a double click; the second arrives late). The
    model's next LLM call asks ``delete("b")`` under the same id: the user denies
    that one. The UI names the request each answer is to
    (``ToolApprovalResponse(..., request=event)``).

    What happened: answers were matched by call id alone, and the id was open again
    once the second request was emitted, so the late duplicate approved
    ``delete("b")``, which nobody had approved. (``request=`` did not exist.)

    What should happen: an answer naming its request approves that request only; the
    duplicate to the first is dropped and the user's "no" to the second counts.
    """
    _RAN.clear()
    cid = "functions.delete:0"
    async with LLMServer() as server:
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "a"}, id=cid)]),
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "b"}, id=cid)]),
            Reply(text="Deleted a only."),
        )
        answers: Subject[ToolApprovalResponse] = Subject()
        asked: list[ToolApprovalRequestEvent] = []
        results: list[AgentResponseResult] = []

        def on_next(result: AgentResponseResult) -> None:
            results.append(result)
            for request in _requests(result):
                asked.append(request)
                if len(asked) == 1:
                    answers.on_next(ToolApprovalResponse(cid, True, request=request))
                else:  # the late second click on the first dialog, then "no" to this one
                    answers.on_next(ToolApprovalResponse(cid, True, request=asked[0]))
                    answers.on_next(ToolApprovalResponse(cid, False, "no", request=request))

        async with OpenAIChatClient(server.url, model="m") as client:
            agent = Agent(client, tools=[delete], approver=answers, approval_timeout=GUARD)
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            agent.run("clean up").subscribe(
                on_next, done.set_exception, lambda: done.set_result(None)
            )
            await asyncio.wait_for(done, GUARD)
    assert _RAN == ["a"]
    assert _errors(results) == [None, "the user denied the call to tool 'delete': no"]


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def _calling(call_id: str, path: str) -> AgentResponseResult:
    content = c.ToolCallingContent(call_id, "delete", {"path": path}, json.dumps({"path": path}))
    return AgentResponseResult("resp", "m", None, (content,))


def test_an_answer_to_an_old_request_given_before_the_new_one_is_asked_is_dropped() -> None:
    """What the user does: ``execute_tools([delete], answers)`` over two LLM calls that
    both call ``delete`` under the id ``c1``. The UI approves the first request; its
    duplicate answer (naming the first request) arrives while the second call streams,
    before that call's request is emitted. The user then denies the second request.

    What happened: the duplicate was kept as an answer given ahead for ``c1`` (the id
    was open again on sight of the new call) and approved ``delete("b")`` as soon as
    it asked. What should happen: it answers a request that is over: dropped.
    """
    _RAN.clear()

    async def main() -> list[str | None]:
        answers: Subject[ToolApprovalResponse] = Subject()
        upstream: Subject[AgentResponseResult] = Subject()
        items: list[AgentResponseResult] = []
        asked: list[ToolApprovalRequestEvent] = []
        done = asyncio.get_running_loop().create_future()

        def on_item(result: AgentResponseResult) -> None:
            items.append(result)
            for request in _requests(result):
                asked.append(request)
                if len(asked) == 1:
                    answers.on_next(ToolApprovalResponse("c1", True, request=request))
                else:
                    answers.on_next(ToolApprovalResponse("c1", False, request=request))

        upstream.pipe(ops.execute_tools([delete], answers, approval_timeout=GUARD)).subscribe(
            on_item, done.set_exception, lambda: done.set_result(None)
        )
        upstream.on_next(_calling("c1", "a"))
        await asyncio.wait_for(_until(lambda: bool(_RAN)), GUARD)
        upstream.on_next(AgentResponseResult("resp_2", "m", None, (), (ResponseStartedEvent(),)))
        answers.on_next(ToolApprovalResponse("c1", True, request=asked[0]))  # the late duplicate
        upstream.on_next(_calling("c1", "b"))
        upstream.on_completed()
        await asyncio.wait_for(done, GUARD)
        return _errors(items)

    errors = asyncio.run(main())
    assert _RAN == ["a"]
    assert errors == [None, "the user denied the call to tool 'delete'; it was not run"]


@pytest.mark.asyncio
async def test_a_callable_approver_answering_another_request_denies_the_call() -> None:
    """What the user does: an async approver that answers from a table of earlier
    decisions keyed by call id, and so returns the ``ToolApprovalResponse`` it gave an
    earlier request of the same id. What should happen: an answer naming another
    request never approves this one (the gate fails closed), saying why; an answer
    without ``request`` still counts by id, as before."""
    _RAN.clear()
    earlier = ToolApprovalRequestEvent("c1", "delete", {"path": "x"})
    answers = [
        ToolApprovalResponse("c1", True, request=earlier),
        ToolApprovalResponse("c1", True),
    ]

    async def approver(request: ToolApprovalRequestEvent) -> ToolApprovalResponse:
        return answers.pop(0)

    items: list[AgentResponseResult] = []
    for path in ("a", "b"):
        results = reactivex.from_iterable([_calling("c1", path)])
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        results.pipe(ops.execute_tools([delete], approver)).subscribe(
            items.append, done.set_exception, lambda done=done: done.set_result(None)
        )
        await asyncio.wait_for(done, GUARD)
    assert _RAN == ["b"]
    (denied, ran) = _errors(items)
    assert denied is not None
    assert "answered another request" in denied
    assert ran is None


def test_an_answer_naming_a_request_of_another_call_id_is_refused() -> None:
    """``ToolApprovalResponse(call_id, ..., request=event)`` answers ``event``: an
    ``event.call_id`` that is not ``call_id`` is a mistake, refused at once."""
    with pytest.raises(ValueError, match="c2"):
        ToolApprovalResponse("c1", True, request=ToolApprovalRequestEvent("c2", "delete", {}))


# ------------------------------------------------------------------------------ 2


@pytest.mark.asyncio
async def test_an_approver_reassigned_mid_turn_no_longer_holds_the_old_one() -> None:
    """What the user does: agent one runs a turn with a ``Subject`` of answers ``old``;
    on its first approval request the app answers it and hands agent one a new
    ``Subject`` (``agent.approver = new``: "takes effect from the next LLM call on").
    While agent one's next call waits for ``new``, agent two, given ``old``, runs a
    turn.

    What happened: agent one's turn stayed counted as ``old``'s, so agent two's turn
    failed at once with "a turn ... is running with this approver", though nothing
    used ``old`` any more. What should happen: the turn serves ``new`` from its next
    LLM call on and ``old`` is free: agent two's turn runs.
    """
    _RAN.clear()
    async with LLMServer() as server:
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "a"}, id="c1")]),
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "b"}, id="c2")]),
            Reply(text="two"),  # agent two's turn
            Reply(text="one"),
        )
        old: Subject[ToolApprovalResponse] = Subject()
        new: Subject[ToolApprovalResponse] = Subject()
        second_asked = asyncio.get_running_loop().create_future()
        async with OpenAIChatClient(server.url, model="m") as client:
            one = Agent(client, tools=[delete], approver=old)

            def on_next(result: AgentResponseResult) -> None:
                for request in _requests(result):
                    if request.call_id == "c1":
                        one.approver = new
                        old.on_next(ToolApprovalResponse("c1", True, request=request))
                    else:
                        second_asked.set_result(request)

            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            one.run("clean up").subscribe(
                on_next, done.set_exception, lambda: done.set_result(None)
            )
            request = await asyncio.wait_for(second_asked, GUARD)
            two = Agent(client, approver=old)
            assert (await asyncio.wait_for(two.send("hi"), GUARD)).text == "two"
            new.on_next(ToolApprovalResponse("c2", True, request=request))
            await asyncio.wait_for(done, GUARD)
    assert _RAN == ["a", "b"]


@pytest.mark.asyncio
async def test_an_approver_reassigned_mid_turn_to_one_serving_another_turn_ends_it() -> None:
    """What the user does: agent three's turn waits for an answer from ``shared`` (a
    ``Subject``); meanwhile agent one, mid-turn, is given ``shared`` too
    (``agent.approver = shared``).

    What happened: agent one's next LLM call subscribed to ``shared`` unchecked, so two
    running turns took answers, by call id, from one observable: what a turn
    subscribed while another runs with the same observable is refused for ("a turn
    ... is running with this approver"). What should happen: the same refusal for the
    turn that would start serving ``shared``: it fails with that ``RuntimeError``
    before its next LLM call.
    """
    _RAN.clear()
    async with LLMServer() as server:
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "x"}, id="c3")]),  # three's
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "a"}, id="c1")]),  # one's
            Reply(text="three"),
        )
        own: Subject[ToolApprovalResponse] = Subject()
        shared: Subject[ToolApprovalResponse] = Subject()
        three_asked = asyncio.get_running_loop().create_future()
        async with OpenAIChatClient(server.url, model="m") as client:
            three = Agent(client, tools=[delete], approver=shared)
            three_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            three.run("x").subscribe(
                lambda r: [three_asked.set_result(q) for q in _requests(r)],
                three_done.set_exception,
                lambda: three_done.set_result(None),
            )
            request = await asyncio.wait_for(three_asked, GUARD)
            one = Agent(client, tools=[delete], approver=own)

            def on_next(result: AgentResponseResult) -> None:
                for asked in _requests(result):
                    one.approver = shared
                    own.on_next(ToolApprovalResponse("c1", True, request=asked))

            with pytest.raises(RuntimeError, match="running with this approver"):
                await asyncio.wait_for(_collect(one.run("a"), on_next), GUARD)
            shared.on_next(ToolApprovalResponse("c3", True, request=request))
            await asyncio.wait_for(three_done, GUARD)
    assert _RAN == ["a", "x"]


async def _collect(
    results: reactivex.Observable[AgentResponseResult],
    on_next: Callable[[AgentResponseResult], None],
) -> None:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    results.subscribe(on_next, done.set_exception, lambda: done.set_result(None))
    await done


# ------------------------------------------------------------------------------ 3


def test_a_turn_stranded_on_a_closed_loop_is_not_kept_by_its_approver() -> None:
    """What the user does: a sync program keeps one app-wide ``Subject`` of answers and
    makes an agent per task with it. A turn is under way when the program closes its
    loop (it gave up on it), drops that agent and goes on with other agents, on new
    loops, without that approver.

    What happened: the stranded turn, with its agent, client and conversation, stayed
    in the approver's set of served turns (``_SERVED``) for as long as the approver
    lived: only a later turn with the same approver let it go. What should happen: as
    for the turn's task (``test_a_turn_stranded_on_a_closed_loop_is_let_go_quietly``),
    the next turn lets it go and it is collected: the approver does not keep it.
    """

    class Client:
        def stream(self, messages: Any, tools: Any = None, **params: Any) -> Any:
            if len(messages) == 1 and messages[0].content == "one":
                return reactivex.never()  # still streaming when its loop is closed
            return reactivex.from_iterable([u.TextDelta("two"), u.Finish(FinishReason.STOP)])

    answers: Subject[ToolApprovalResponse] = Subject()
    agent = Agent(Client(), approver=answers)
    loop = asyncio.new_event_loop()

    async def first(agent: Agent) -> None:
        agent.run("one").subscribe(lambda _: None)
        await asyncio.sleep(0)

    loop.run_until_complete(first(agent))
    loop.close()
    (turn,) = agent._turns
    stranded = weakref.ref(turn)
    del turn, agent
    assert asyncio.run(Agent(Client()).send("two")).text == "two"
    gc.collect()
    assert stranded() is None


def test_an_answer_naming_a_providers_request_answers_it_and_no_other() -> None:
    """The provider's own tools' requests (the Responses API's remote MCP tools, a
    ``ToolApprovalRequestEvent`` from upstream) take answers naming them too: an answer
    naming another request of the id (an equal copy, not the one emitted) is dropped,
    the one naming the emitted request counts."""

    async def main() -> list[dict[str, Any]]:
        answers: Subject[ToolApprovalResponse] = Subject()
        upstream: Subject[AgentResponseResult] = Subject()
        items: list[AgentResponseResult] = []
        done = asyncio.get_running_loop().create_future()

        def on_item(result: AgentResponseResult) -> None:
            items.append(result)
            for request in _requests(result):
                other = ToolApprovalRequestEvent(request.call_id, request.name, request.arguments)
                answers.on_next(ToolApprovalResponse("mcpr_1", True, request=other))
                answers.on_next(ToolApprovalResponse("mcpr_1", False, "no", request=request))

        upstream.pipe(ops.execute_tools([], answers, approval_timeout=GUARD)).subscribe(
            on_item, done.set_exception, lambda: done.set_result(None)
        )
        event = ToolApprovalRequestEvent("mcpr_1", "search", {"q": "x"})
        upstream.on_next(AgentResponseResult("resp", "m", None, (), (event,)))
        upstream.on_completed()
        await asyncio.wait_for(done, GUARD)
        return [
            x.provider_data
            for r in items
            for x in r.contents
            if isinstance(x, c.ReasoningContent) and x.provider_data
        ]

    (answer,) = asyncio.run(main())
    assert answer["approve"] is False
    assert answer["reason"] == "the user denied the call to tool 'search': no"
