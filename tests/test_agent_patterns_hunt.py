"""The agent patterns people build with OpenAI's Agents SDK, pydantic-ai, LangGraph and
smolagents, built on :class:`rafrx.Agent` against the local scripted LLM server.

The angle: a user who knows those frameworks and reaches for the same patterns,
in each wire format (OpenAI chat, Anthropic Messages, the Responses API):

* a "final answer" tool whose arguments are the structured output;
* a model stuck calling the same tool with the same arguments, a tool that
  fails every time (what the model reads, ``MaxStepsExceeded`` and its ``.partial``);
* parallel calls where one is slow, one fails and one needs an approval;
  ``concurrency`` limits; ``eager_tools``;
* sub-agents: an ``Agent`` run inside a tool (sharing the client), its events
  streamed out, cancelled with its parent, timed out; a handoff that switches
  the client and tools mid-turn;
* rich tool results (pydantic models, ``None``, huge strings, bytes) and
  side effects that must not run twice (retries, a turn resumed from ``.partial``);
* context providers and instructions that change per turn; an agent reused
  across turns (with ``InMemoryHistoryProvider``, or the conversation kept by hand);
  ``Agent.run`` (cold) vs ``Agent.send``;
* a turn cancelled from the UI mid-tool, then the conversation going on.

Every request the server receives is checked against the rules the real APIs
enforce (``wire_problems`` of ``tests/test_agent_wire.py``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex.subject import Subject

from rafrx import (
    Agent,
    AgentResponseResult,
    ChatMessage,
    InMemoryHistoryProvider,
    RetryPolicy,
    ToolApprovalResponse,
)
from rafrx.content import TextContent, ToolCalledContent
from rafrx.errors import HTTPStatusError, MaxStepsExceeded, StreamInterrupted, ToolError
from rafrx.events import FinishEvent, ToolApprovalRequestEvent
from rafrx.messages import MessageRole, MessageSource
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, ToolCallSpec
from rafrx.tools import tool
from tests.test_agent_wire import wire_problems

FORMATS = ("openai-chat", "anthropic", "openai-responses")
CLIENTS: dict[str, Any] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
GUARD = 10.0  # seconds, against hangs only


def client_for(fmt: str, server: LLMServer, **params: Any) -> Any:
    return CLIENTS[fmt](server.url, model="m", **params)


def all_valid(server: LLMServer) -> None:
    """Every request the server got obeys its API."""
    for request in server.requests:
        assert wire_problems(request) == [], (request.wire_format, wire_problems(request))


def results_of(request: RecordedRequest) -> list[tuple[str, str]]:
    """The tool results a request carries, as ``(call id, text)`` in each wire format."""
    out: list[tuple[str, str]] = []
    for item in request.messages:
        if item.get("role") == "tool":
            out.append((item["tool_call_id"], item["content"]))
        elif item.get("type") == "function_call_output":
            out.append((item["call_id"], item["output"]))
        elif isinstance(item.get("content"), list):
            for block in item["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.append((block["tool_use_id"], block["content"]))
    return out


def anthropic_error_flags(request: RecordedRequest) -> dict[str, bool]:
    """``tool_use_id`` → ``is_error`` of the Anthropic ``tool_result`` blocks."""
    return {
        block["tool_use_id"]: bool(block.get("is_error"))
        for item in request.messages
        if isinstance(item.get("content"), list)
        for block in item["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    }


def collect(agent: Agent, message: str) -> tuple[asyncio.Future[None], list[AgentResponseResult]]:
    """Subscribe to ``agent.run(message)``: the results as they come and the end."""
    seen: list[AgentResponseResult] = []
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_error(error: Exception) -> None:
        if not ended.done():
            ended.set_exception(error)

    def on_completed() -> None:
        if not ended.done():
            ended.set_result(None)

    agent.run(message).subscribe(seen.append, on_error, on_completed)
    return ended, seen


# ================================================================ final answer tools


class Verdict(pydantic.BaseModel):
    label: str
    confidence: float


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_final_answer_tool_gives_the_structured_output_and_the_loop_ends(
    llm_server: LLMServer, fmt: str
) -> None:
    """pydantic-ai's output tool / smolagents' ``final_answer``: the model calls it with
    the structured answer, the tool validates it into a pydantic model, and with the
    default ``tool_choice`` the turn ends on the model's next (text) reply, keeping the
    validated arguments in ``response.tool_calls``."""
    got: list[Verdict] = []

    @tool
    def final_answer(verdict: Verdict) -> str:
        """Give the final, structured answer."""
        got.append(verdict)
        return "recorded"

    llm_server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("final_answer", {"verdict": {"label": "spam", "confidence": 0.9}})
            ]
        ),
        Reply(text="Done."),
    )
    async with client_for(fmt, llm_server) as client:
        response = await Agent(client, tools=[final_answer]).send("Classify: WIN A PRIZE")
    assert got == [Verdict(label="spam", confidence=0.9)]
    assert response.tool_calls[-1].name == "final_answer"
    assert response.tool_calls[-1].arguments == {"verdict": {"label": "spam", "confidence": 0.9}}
    assert response.turn_transcript[-1].content == "Done."
    assert llm_server.request_count == 2
    all_valid(llm_server)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_invalid_structured_output_is_sent_back_for_the_model_to_fix(
    llm_server: LLMServer, fmt: str
) -> None:
    """pydantic-ai retries an output tool whose arguments fail validation: the model
    reads what was wrong and calls again. rafrx sends the validation error back (the
    tool never runs on bad arguments) and the corrected call runs."""
    got: list[Verdict] = []

    @tool
    def final_answer(verdict: Verdict) -> str:
        """Give the final, structured answer."""
        got.append(verdict)
        return "recorded"

    bad = ToolCallSpec("final_answer", {"verdict": {"label": "spam"}}, id="bad_1")
    good = ToolCallSpec("final_answer", {"verdict": {"label": "ham", "confidence": 0.2}})
    llm_server.enqueue(Reply(tool_calls=[bad]), Reply(tool_calls=[good]), Reply(text="ok"))
    async with client_for(fmt, llm_server) as client:
        response = await Agent(client, tools=[final_answer]).send("Classify: hello")
    assert got == [Verdict(label="ham", confidence=0.2)]
    (sent_id, error), *_ = results_of(llm_server.requests[1])
    assert "confidence" in error
    assert "final_answer" in error
    assert response.tool_messages[0].is_error
    assert not response.tool_messages[1].is_error
    if fmt == "anthropic":
        assert anthropic_error_flags(llm_server.requests[1]) == {sent_id: True}
    all_valid(llm_server)


# ================================================================ stuck and failing tools


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_the_same_call_again_and_again_is_bounded_by_max_steps(
    llm_server: LLMServer, fmt: str
) -> None:
    """A model stuck calling ``search("x")`` forever: the loop stops after exactly
    ``max_steps`` requests with ``MaxStepsExceeded`` that names the limit, and its
    ``.partial`` keeps every call and result (the Agents SDK's ``MaxTurnsExceeded``
    keeps ``run_data`` the same way)."""
    calls: list[str] = []

    @tool
    def search(q: str) -> str:
        """Search."""
        calls.append(q)
        return f"nothing for {q}"

    llm_server.script(lambda _: Reply(tool_calls=[ToolCallSpec("search", {"q": "x"})]))
    async with client_for(fmt, llm_server) as client:
        agent = Agent(client, tools=[search], max_steps=3, history=InMemoryHistoryProvider())
        with pytest.raises(MaxStepsExceeded, match=r"max_steps=3") as caught:
            await asyncio.wait_for(agent.send("find x"), GUARD)
    assert llm_server.request_count == 3
    assert calls == ["x", "x", "x"]
    partial = caught.value.partial
    assert partial is not None
    assert [c.name for c in partial.tool_calls] == ["search"] * 3
    assert [m.content for m in partial.tool_messages] == ["nothing for x"] * 3
    roles = [m.role for m in partial.turn_transcript]
    assert roles == [MessageRole.ASSISTANT, MessageRole.TOOL] * 3
    assert agent.history is not None
    assert await agent.history.load() == ()
    all_valid(llm_server)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_tool_that_always_fails_shows_the_model_why_and_stays_bounded(
    llm_server: LLMServer, fmt: str
) -> None:
    """A tool failing every time: each result names the exception type and message
    (what a model needs to change course), is marked ``is_error`` for Anthropic, and
    the loop still ends at ``max_steps``."""

    @tool
    def fetch(url: str) -> str:
        """Fetch a URL."""
        raise ConnectionError(f"could not reach {url}")

    llm_server.script(
        lambda _: Reply(tool_calls=[ToolCallSpec("fetch", {"url": "http://x.invalid"})])
    )
    async with client_for(fmt, llm_server) as client:
        with pytest.raises(MaxStepsExceeded) as caught:
            await asyncio.wait_for(Agent(client, tools=[fetch], max_steps=2).send("go"), GUARD)
    (call_id, text), *_ = results_of(llm_server.requests[1])
    assert "ConnectionError" in text
    assert "could not reach http://x.invalid" in text
    if fmt == "anthropic":
        assert anthropic_error_flags(llm_server.requests[1]) == {call_id: True}
    partial = caught.value.partial
    assert partial is not None
    assert all(m.is_error for m in partial.tool_messages)
    assert len(partial.tool_messages) == 2
    all_valid(llm_server)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_tool_error_text_reaches_the_model_verbatim(llm_server: LLMServer, fmt: str) -> None:
    """pydantic-ai's ``ModelRetry("...")`` pattern: a tool raising ``ToolError`` with a
    hint has exactly that hint sent back (no exception-type noise), and the model's
    second try runs."""
    tries: list[str] = []

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        tries.append(city)
        if city != "Paris":
            raise ToolError("unknown city; give a capital city's name")
        return "sunny"

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("weather", {"city": "Pariss"})]),
        Reply(tool_calls=[ToolCallSpec("weather", {"city": "Paris"})]),
        Reply(text="Sunny in Paris."),
    )
    async with client_for(fmt, llm_server) as client:
        response = await Agent(client, tools=[weather]).send("Weather in Paris?")
    assert tries == ["Pariss", "Paris"]
    (_, hint), *_ = results_of(llm_server.requests[1])
    assert hint.endswith("unknown city; give a capital city's name")
    assert "ToolError" not in hint
    assert response.text.endswith("Sunny in Paris.")
    all_valid(llm_server)


# ================================================================ parallel calls


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_parallel_slow_failing_and_approved_calls(llm_server: LLMServer, fmt: str) -> None:
    """One step with a slow tool, a failing one and two needing approval (one granted,
    one denied with a reason by a UI pushing answers into a ``Subject``): every call
    gets exactly one result, in the order the model made the calls, whatever order
    they finished in; the denial's reason reaches the model; the denied tool never runs."""
    ran: list[str] = []

    @tool
    async def slow(ms: int) -> str:
        """Sleep."""
        await asyncio.sleep(ms / 1000)
        ran.append("slow")
        return "slept"

    @tool
    def broken() -> str:
        """Fails."""
        raise RuntimeError("disk full")

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(f"delete {path}")
        return f"deleted {path}"

    answers: Subject[ToolApprovalResponse] = Subject()

    def ui(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                ok = event.arguments["path"] == "/tmp/a"
                reason = None if ok else "not outside /tmp"
                loop.call_later(
                    0.01, answers.on_next, ToolApprovalResponse(event.call_id, ok, reason)
                )

    loop = asyncio.get_running_loop()
    calls = [
        ToolCallSpec("slow", {"ms": 80}, id="c_slow"),
        ToolCallSpec("broken", {}, id="c_broken"),
        ToolCallSpec("delete", {"path": "/tmp/a"}, id="c_ok"),
        ToolCallSpec("delete", {"path": "/etc/passwd"}, id="c_no"),
    ]
    llm_server.enqueue(Reply(tool_calls=calls), Reply(text="Done."))
    async with client_for(fmt, llm_server) as client:
        agent = Agent(client, tools=[slow, broken, delete], approver=answers, concurrency=2)
        ended: asyncio.Future[None] = loop.create_future()
        agent.run("clean up").subscribe(ui, ended.set_exception, lambda: ended.set_result(None))
        await asyncio.wait_for(ended, GUARD)
    assert sorted(ran) == ["delete /tmp/a", "slow"]
    sent = dict(results_of(llm_server.requests[1]))
    assert [i for i, _ in results_of(llm_server.requests[1])] == [
        "c_slow",
        "c_broken",
        "c_ok",
        "c_no",
    ]
    assert sent["c_slow"] == "slept"
    assert sent["c_ok"] == "deleted /tmp/a"
    assert "RuntimeError" in sent["c_broken"]
    assert "disk full" in sent["c_broken"]
    assert "not outside /tmp" in sent["c_no"]
    all_valid(llm_server)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(calls=st.integers(1, 7), concurrency=st.integers(1, 4))
def test_concurrency_caps_sync_tools_running_at_once(calls: int, concurrency: int) -> None:
    """``concurrency`` is the most tools running at once in one LLM call: sync tools on
    rafrx's threads never exceed it, and reach it when there is enough work."""
    lock = threading.Lock()
    state = {"active": 0, "peak": 0}

    @tool
    def work(i: int) -> int:
        """Work."""
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
        time.sleep(0.03)
        with lock:
            state["active"] -= 1
        return i

    async def main() -> list[str]:
        async with LLMServer() as server:
            server.enqueue(
                Reply(tool_calls=[ToolCallSpec("work", {"i": i}) for i in range(calls)]),
                Reply(text="ok"),
            )
            async with OpenAIChatClient(server.url, model="m") as client:
                agent = Agent(client, tools=[work], concurrency=concurrency)
                response = await asyncio.wait_for(agent.send("go"), GUARD)
        return [m.content for m in response.tool_messages]

    assert asyncio.run(main()) == [str(i) for i in range(calls)]
    assert state["peak"] == min(calls, concurrency)


@pytest.mark.asyncio
async def test_a_call_awaiting_approval_does_not_hold_a_concurrency_slot(
    llm_server: LLMServer,
) -> None:
    """With ``concurrency=1``, a call waiting for a human's approval must not stop the
    other calls of the step from running meanwhile."""
    answers: Subject[ToolApprovalResponse] = Subject()
    quick_done = asyncio.Event()

    @tool(requires_approval=True)
    def deploy() -> str:
        """Deploy."""
        return "deployed"

    @tool
    async def quick() -> str:
        """Quick."""
        quick_done.set()
        return "quick"

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("deploy", {}, id="d1"), ToolCallSpec("quick", {})]),
        Reply(text="ok"),
    )
    async with OpenAIChatClient(llm_server.url, model="m") as client:
        agent = Agent(client, tools=[deploy, quick], approver=answers, concurrency=1)
        turn = asyncio.ensure_future(agent.send("ship it"))
        await asyncio.wait_for(quick_done.wait(), GUARD)  # ran while deploy awaits its answer
        answers.on_next(ToolApprovalResponse("d1", True))
        response = await asyncio.wait_for(turn, GUARD)
    assert [m.content for m in response.tool_messages] == ["deployed", "quick"]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
async def test_eager_tools_start_while_the_model_still_streams(
    llm_server: LLMServer, fmt: str
) -> None:
    """``eager_tools=True``: where the wire says a call ended (Anthropic's
    ``content_block_stop``, the Responses ``function_call_arguments.done``), the tool
    runs while later calls still stream, so its result comes before the step's end."""

    @tool
    def work(i: int) -> int:
        """Work."""
        return i

    slow_stream = Reply(
        tool_calls=[ToolCallSpec("work", {"i": 1}), ToolCallSpec("work", {"i": 2})],
        chunk_size=1,
        delay=0.02,
    )
    llm_server.enqueue(slow_stream, Reply(text="ok"))
    async with client_for(fmt, llm_server) as client:
        ended, seen = collect(Agent(client, tools=[work], eager_tools=True), "go")
        await asyncio.wait_for(ended, GUARD)
    order = [
        "called" if isinstance(c, ToolCalledContent) else "finish"
        for r in seen
        for c in (*r.contents, *r.events)
        if isinstance(c, ToolCalledContent | FinishEvent)
    ]
    assert order[0] == "called"
    assert order.index("finish") > 0
    assert order.count("called") == 2


@pytest.mark.asyncio
async def test_disposing_while_one_sync_tool_runs_starts_none_of_the_queued_ones(
    llm_server: LLMServer,
) -> None:
    """A UI's stop button while ``concurrency=1`` holds three calls in line: the running
    sync tool cannot be stopped (its thread runs on), but the queued ones never start."""
    started: list[int] = []
    running = threading.Event()
    release = threading.Event()

    @tool
    def side_effect(i: int) -> str:
        """Do something irreversible."""
        started.append(i)
        running.set()
        release.wait(GUARD)
        return "done"

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("side_effect", {"i": i}) for i in range(3)]),
    )
    async with OpenAIChatClient(llm_server.url, model="m") as client:
        agent = Agent(client, tools=[side_effect], concurrency=1)
        subscription = agent.run("go").subscribe(lambda _: None, lambda _: None)
        await asyncio.wait_for(asyncio.to_thread(running.wait, GUARD), GUARD)
        subscription.dispose()
        release.set()
        await asyncio.sleep(0.1)  # (room for a wrongly queued tool to start)
    assert started == [0]
    assert llm_server.request_count == 1


# ================================================================ sub-agents and handoffs


def sub_agent_script(server: LLMServer) -> None:
    """Requests whose instructions say ``SUB`` get a lookup then an answer; the main
    agent's get a ``research`` call, then an answer once it has a tool result."""

    @server.script
    def answer(request: RecordedRequest) -> Reply:
        sub = "SUB" in json.dumps(request.body)
        if request.last_role == "tool":
            return Reply(text="sub-answer" if sub else "main-answer")
        if sub:
            return Reply(text="Looking it up. ", tool_calls=[ToolCallSpec("lookup", {"q": "rx"})])
        return Reply(tool_calls=[ToolCallSpec("research", {"topic": "rx"})])


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_agent_as_tool_sharing_the_client(llm_server: LLMServer, fmt: str) -> None:
    """The Agents SDK's ``agent.as_tool()``: a tool that awaits another ``Agent``'s
    turn on the same loop and client. The nested turn has its own instructions and
    tools; its answer is the parent's tool result; both agents' requests are valid."""
    sub_agent_script(llm_server)

    @tool
    def lookup(q: str) -> str:
        """Look up."""
        return f"facts about {q}"

    async with client_for(fmt, llm_server) as client:
        sub = Agent(client, tools=[lookup], instructions="SUB researcher", id="sub")

        @tool
        async def research(topic: str) -> str:
            """Research a topic with a sub-agent."""
            answer = await sub.send(topic)
            return answer.turn_transcript[-1].content

        history = InMemoryHistoryProvider()
        main = Agent(client, tools=[research], instructions="MAIN", history=history)
        response = await asyncio.wait_for(main.send("Tell me about rx"), GUARD)
    assert response.turn_transcript[-1].content == "main-answer"
    assert [m.content for m in response.tool_messages] == ["sub-answer"]
    assert llm_server.request_count == 4
    main_tools = {r.tool_names for r in llm_server.requests}
    assert main_tools == {("research",), ("lookup",)}
    # the parent's history holds only its own turn
    assert [m.role for m in history.messages] == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    all_valid(llm_server)


@pytest.mark.asyncio
async def test_sub_agent_events_stream_out_before_the_parent_tool_result(
    llm_server: LLMServer,
) -> None:
    """Streaming a sub-agent's text to the UI (LangGraph's ``subgraphs=True``): the tool
    subscribes to ``sub.run()`` and forwards each result into a ``Subject`` the UI
    watches; the UI sees the sub-agent's text before the parent's tool result."""
    sub_agent_script(llm_server)
    ui: list[str] = []
    relay: Subject[AgentResponseResult] = Subject()
    relay.subscribe(
        lambda r: ui.extend(f"sub:{c.text}" for c in r.contents if isinstance(c, TextContent))
    )

    @tool
    def lookup(q: str) -> str:
        """Look up."""
        return "facts"

    async with OpenAIChatClient(llm_server.url, model="m") as client:
        sub = Agent(client, tools=[lookup], instructions="SUB")

        @tool
        async def research(topic: str) -> str:
            """Research with a sub-agent, streaming it out."""
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            texts: list[str] = []

            def on_next(result: AgentResponseResult) -> None:
                relay.on_next(result)
                texts.extend(c.text for c in result.contents if isinstance(c, TextContent))

            sub.run(topic).subscribe(on_next, done.set_exception, lambda: done.set_result(None))
            await done
            return "".join(texts)

        main = Agent(client, tools=[research], instructions="MAIN")
        ended, seen = collect(main, "go")
        await asyncio.wait_for(ended, GUARD)
    parent_result_at = next(
        i for i, r in enumerate(seen) if any(isinstance(c, ToolCalledContent) for c in r.contents)
    )
    assert "".join(t[4:] for t in ui) == "Looking it up. sub-answer"
    assert parent_result_at > 0
    called = next(c for c in seen[parent_result_at].contents if isinstance(c, ToolCalledContent))
    assert called.result == "Looking it up. sub-answer"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_cancelling_the_parent_stops_the_sub_agent_and_the_chat_goes_on(
    llm_server: LLMServer, fmt: str
) -> None:
    """Cancelling the parent's ``send`` mid-sub-agent (a UI's stop button) cancels the
    nested turn and closes its connection; neither history keeps anything of the turn,
    and the next turn's request is valid."""
    streaming = asyncio.Event()

    @llm_server.script
    def answer(request: RecordedRequest) -> Reply:
        if "SUB" in json.dumps(request.body):
            streaming.set()
            return Reply(text="slow " * 300, chunk_size=1, delay=0.01)
        if request.last_role == "tool":
            return Reply(text="main-answer")
        return Reply(tool_calls=[ToolCallSpec("research", {"topic": "rx"})])

    async with client_for(fmt, llm_server) as client:
        sub_history = InMemoryHistoryProvider()
        sub = Agent(client, instructions="SUB", history=sub_history)

        @tool
        async def research(topic: str) -> str:
            """Research with a sub-agent."""
            return (await sub.send(topic)).text

        history = InMemoryHistoryProvider([ChatMessage.user("hi"), ChatMessage.assistant("hello")])
        main = Agent(client, tools=[research], history=history, instructions="MAIN")
        turn = asyncio.ensure_future(main.send("research rx"))
        await asyncio.wait_for(streaming.wait(), GUARD)
        await asyncio.sleep(0.05)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        await llm_server.wait_connections_closed(GUARD)
        assert len(history.messages) == 2
        assert sub_history.messages == ()
        llm_server.script(lambda _: Reply(text="fine"))
        response = await asyncio.wait_for(main.send("never mind"), GUARD)
    assert response.text == "fine"
    sent = llm_server.requests[-1].messages
    assert json.dumps(sent).count("research rx") == 0
    assert len(history.messages) == 4
    all_valid(llm_server)


@pytest.mark.asyncio
async def test_a_tool_timeout_around_a_sub_agent_cancels_it(llm_server: LLMServer) -> None:
    """``@tool(timeout=...)`` wrapping a sub-agent that takes too long: the parent model
    reads a timeout error, and the sub-agent's stream is closed, not left running."""

    @llm_server.script
    def answer(request: RecordedRequest) -> Reply:
        if "SUB" in json.dumps(request.body):
            return Reply(text="slow " * 300, chunk_size=1, delay=0.01)
        if request.last_role == "tool":
            return Reply(text="gave up")
        return Reply(tool_calls=[ToolCallSpec("research", {"topic": "rx"})])

    sub_client = AnthropicClient(llm_server.url, model="m")  # (closed last, see below)
    sub = Agent(sub_client, instructions="SUB")

    @tool(timeout=0.2)
    async def research(topic: str) -> str:
        """Research with a sub-agent."""
        return (await sub.send(topic)).text

    async with AnthropicClient(llm_server.url, model="m") as client:
        response = await asyncio.wait_for(Agent(client, tools=[research]).send("go"), GUARD)
    # the parent's client is closed; the sub-agent's is not, yet its stream was aborted
    await llm_server.wait_connections_closed(GUARD)
    await sub_client.aclose()
    assert response.tool_messages[0].is_error
    assert "timed out after 0.2 s" in response.tool_messages[0].content
    assert response.turn_transcript[-1].content == "gave up"


@pytest.mark.asyncio
async def test_sub_agent_max_steps_becomes_an_error_result_for_the_parent(
    llm_server: LLMServer,
) -> None:
    """A sub-agent stuck in a loop raises ``MaxStepsExceeded`` inside the parent's tool:
    the parent model reads an error naming it, and the parent's turn goes on."""

    @llm_server.script
    def answer(request: RecordedRequest) -> Reply:
        if "SUB" in json.dumps(request.body):
            return Reply(tool_calls=[ToolCallSpec("lookup", {"q": "x"})])
        if request.last_role == "tool":
            return Reply(text="sub-agent failed, sorry")
        return Reply(tool_calls=[ToolCallSpec("research", {"topic": "rx"})])

    @tool
    def lookup(q: str) -> str:
        """Look up."""
        return "nothing"

    async with OpenAIResponsesClient(llm_server.url, model="m") as client:
        sub = Agent(client, tools=[lookup], instructions="SUB", max_steps=2)

        @tool
        async def research(topic: str) -> str:
            """Research with a sub-agent."""
            return (await sub.send(topic)).text

        response = await asyncio.wait_for(Agent(client, tools=[research]).send("go"), GUARD)
    error = response.tool_messages[0].content
    assert response.tool_messages[0].is_error
    assert "MaxStepsExceeded" in error
    assert "max_steps=2" in error
    assert response.turn_transcript[-1].content == "sub-agent failed, sorry"
    all_valid(llm_server)


@pytest.mark.asyncio
@pytest.mark.parametrize(("first", "second"), [(a, b) for a in FORMATS for b in FORMATS if a != b])
async def test_handoff_switches_client_and_tools_mid_turn(
    llm_server: LLMServer, first: str, second: str
) -> None:
    """A handoff (the Agents SDK's ``transfer_to_billing``) done by a tool that assigns
    the agent another client (another provider) and other tools: the next LLM call of
    the same turn goes to the new provider, offers the new tools, and its request,
    holding the first provider's reasoning and calls, is valid."""
    c1 = client_for(first, llm_server)
    c2 = client_for(second, llm_server)

    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    agent: Agent | None = None

    @tool
    def transfer_to_billing() -> str:
        """Hand the conversation to billing."""
        assert agent is not None
        agent.client = c2
        agent.tools = [refund]
        return "transferred"

    agent = Agent(c1, tools=[transfer_to_billing], instructions="triage")
    llm_server.enqueue(
        Reply(
            text="Transferring.",
            reasoning="billing",
            tool_calls=[ToolCallSpec("transfer_to_billing", {})],
        ),
        Reply(reasoning="refund it", tool_calls=[ToolCallSpec("refund", {"order": "A1"})]),
        Reply(text="Refunded."),
    )
    try:
        response = await asyncio.wait_for(agent.send("refund A1"), GUARD)
    finally:
        await c1.aclose()
        await c2.aclose()
    assert [r.wire_format for r in llm_server.requests] == [first, second, second]
    assert [r.tool_names for r in llm_server.requests] == [
        ("transfer_to_billing",),
        ("refund",),
        ("refund",),
    ]
    assert [m.content for m in response.tool_messages] == ["transferred", "refunded A1"]
    all_valid(llm_server)


# ================================================================ rich results, side effects


class Order(pydantic.BaseModel):
    id: str
    total: float
    items: list[str]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_rich_tool_results_reach_the_model_as_json(llm_server: LLMServer, fmt: str) -> None:
    """Tools returning a pydantic model, a dict, ``None`` and a huge string: the first
    three go as JSON (``null`` for ``None``); the huge one is cut at
    ``max_result_chars`` with a marker saying how much was cut."""

    @tool
    def rich(kind: str) -> Any:
        """Return something."""
        values: dict[str, Any] = {
            "model": Order(id="A1", total=9.5, items=["pen"]),
            "dict": {"ok": True, "n": [1, 2]},
            "none": None,
            "huge": "x" * 500,
        }
        return values[kind]

    kinds = ["model", "dict", "none", "huge"]
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("rich", {"kind": k}, id=f"c_{k}") for k in kinds]),
        Reply(text="ok"),
    )
    async with client_for(fmt, llm_server) as client:
        await Agent(client, tools=[rich], max_result_chars=100).send("go")
    sent = dict(results_of(llm_server.requests[1]))
    assert json.loads(sent["c_model"]) == {"id": "A1", "total": 9.5, "items": ["pen"]}
    assert json.loads(sent["c_dict"]) == {"ok": True, "n": [1, 2]}
    assert sent["c_none"] == "null"
    assert sent["c_huge"] == "x" * 100 + "… [truncated: 400 more characters]"
    all_valid(llm_server)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


@settings(max_examples=15, deadline=None)
@given(value=json_values)
def test_any_json_value_a_tool_returns_reaches_the_model_intact(value: Any) -> None:
    """A non-str JSON value a tool returns arrives as JSON that parses back to it."""

    @tool
    def produce() -> Any:
        """Produce the value."""
        return value

    async def main() -> Any:
        async with LLMServer() as server:
            server.enqueue(Reply(tool_calls=[ToolCallSpec("produce", {})]), Reply(text="ok"))
            async with OpenAIResponsesClient(server.url, model="m") as client:
                await asyncio.wait_for(Agent(client, tools=[produce]).send("go"), GUARD)
            (_, text), *_ = results_of(server.requests[1])
            return text

    text = asyncio.run(main())
    if isinstance(value, str):
        assert text == value
    else:
        assert json.loads(text) == value


@pytest.mark.asyncio
async def test_bytes_result_is_an_error_the_model_reads_naming_the_type(
    llm_server: LLMServer,
) -> None:
    """A tool returning ``bytes`` (an image) has no JSON form: the model reads an error
    naming the type (as ``format_result`` documents), and the loop goes on."""

    @tool
    def screenshot() -> bytes:
        """Take a screenshot."""
        return b"\x89PNG..."

    llm_server.enqueue(Reply(tool_calls=[ToolCallSpec("screenshot", {})]), Reply(text="ok"))
    async with AnthropicClient(llm_server.url, model="m") as client:
        response = await Agent(client, tools=[screenshot]).send("look")
    assert response.tool_messages[0].is_error
    assert "bytes" in response.tool_messages[0].content
    assert response.turn_transcript[-1].content == "ok"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_retried_request_never_runs_a_tool_twice(llm_server: LLMServer, fmt: str) -> None:
    """``RetryPolicy`` retries only before anything was delivered: a 503 on the first
    try, then a tool call: the side-effecting tool runs once."""
    charges: list[int] = []

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        charges.append(amount)
        return "charged"

    llm_server.enqueue(
        Fault.status(503),
        Reply(tool_calls=[ToolCallSpec("charge", {"amount": 5})]),
        Fault.status(503),
        Reply(text="Paid."),
    )
    retry = RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.01, jitter=False)
    async with client_for(fmt, llm_server, retry=retry) as client:
        response = await Agent(client, tools=[charge]).send("pay 5")
    assert charges == [5]
    assert llm_server.request_count == 4
    assert response.turn_transcript[-1].content == "Paid."


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("fault", ["status", "drop"])
async def test_resuming_a_failed_turn_from_partial_does_not_rerun_its_tools(
    llm_server: LLMServer, fmt: str, fault: str
) -> None:
    """The step after a side-effecting tool fails (HTTP 400, or the stream drops after
    some text): the error's ``.partial`` holds the call and its result, nothing is
    saved, and sending ``[question, *partial.turn_transcript]`` goes on from there:
    the tool does not run again, the request is valid, and history then holds it all."""
    charges: list[int] = []

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        charges.append(amount)
        return f"charged {amount}"

    broken = (
        Fault.status(400)
        if fault == "status"
        else Fault.drop_after(300, body=Reply(text="Your payment went through and " * 20))
    )
    llm_server.enqueue(Reply(tool_calls=[ToolCallSpec("charge", {"amount": 5})]), broken)
    history = InMemoryHistoryProvider()
    async with client_for(fmt, llm_server) as client:
        agent = Agent(client, tools=[charge], history=history)
        with pytest.raises(HTTPStatusError if fault == "status" else StreamInterrupted) as caught:
            await agent.send("pay 5")
        partial = caught.value.partial
        assert partial is not None
        assert history.messages == ()
        assert [m.content for m in partial.tool_messages] == ["charged 5"]
        llm_server.enqueue(Reply(text="Paid."))
        transcript = [m for m in partial.turn_transcript if m.content or m.tool_calls]
        response = await agent.send([ChatMessage.user("pay 5"), *transcript])
    assert charges == [5]
    assert response.turn_transcript[-1].content == "Paid."
    assert [m.role for m in history.messages] == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    all_valid(llm_server)


# ================================================================ turns, context, history


class TurnCounter:
    """A context provider giving the turn's number and what it was shown."""

    def __init__(self) -> None:
        self.shown: list[int] = []

    async def provide(self, messages: Any) -> list[ChatMessage]:
        self.shown.append(len(messages))
        return [ChatMessage.system(f"turn {len(self.shown)}")]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_context_and_instructions_change_per_turn_and_are_never_saved(
    llm_server: LLMServer, fmt: str
) -> None:
    """An agent reused over three turns with a history: the context provider is asked
    once per turn (not once per LLM call), shown the history and the new input; new
    instructions assigned between turns go in the next turn's requests; neither is saved."""

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    context = TurnCounter()
    history = InMemoryHistoryProvider()
    async with client_for(fmt, llm_server) as client:
        agent = Agent(client, tools=[add], history=history, context_providers=[context])
        for turn in range(3):
            agent.instructions = f"Persona {turn}"
            llm_server.enqueue(
                Reply(tool_calls=[ToolCallSpec("add", {"a": turn, "b": 1})]),
                Reply(text=f"{turn + 1}"),
            )
            await asyncio.wait_for(agent.send(f"{turn} + 1?"), GUARD)
    assert context.shown == [1, 5, 9]
    for turn in range(3):
        for request in llm_server.requests[2 * turn : 2 * turn + 2]:
            body = json.dumps(request.body)
            assert f"Persona {turn}" in body
            assert f"turn {turn + 1}" in body
            assert "Persona" not in body.replace(f"Persona {turn}", "")
    assert len(history.messages) == 12
    assert all(m.role is not MessageRole.SYSTEM for m in history.messages)
    all_valid(llm_server)


@pytest.mark.asyncio
async def test_run_is_cold_and_send_is_one_turn(llm_server: LLMServer) -> None:
    """``agent.run(q)`` does nothing until subscribed, and each subscription is a turn
    of its own; ``agent.send(q)`` is one turn awaited to its ``AgentResponse``."""
    llm_server.script(lambda _: Reply(text="hi"))
    history = InMemoryHistoryProvider()
    async with OpenAIChatClient(llm_server.url, model="m") as client:
        agent = Agent(client, history=history)
        turn = agent.run("hello")
        await asyncio.sleep(0.05)
        assert llm_server.request_count == 0
        for _ in range(2):
            ended, _seen = collect_from(turn)
            await asyncio.wait_for(ended, GUARD)
        response = await agent.send("again")
    assert llm_server.request_count == 3
    assert response.text == "hi"
    assert response.source_agent_id == agent.id
    assert [m.content for m in history.messages] == ["hello", "hi", "hello", "hi", "again", "hi"]


def collect_from(
    results: Any,
) -> tuple[asyncio.Future[None], list[AgentResponseResult]]:
    seen: list[AgentResponseResult] = []
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    results.subscribe(seen.append, ended.set_exception, lambda: ended.set_result(None))
    return ended, seen


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_conversation_kept_by_hand_across_turns(llm_server: LLMServer, fmt: str) -> None:
    """The Agents SDK's ``result.to_input_list()`` pattern without a history provider:
    each turn sends the whole conversation so far plus the new question; every request,
    with reasoning and tool calls of earlier turns, is valid and grows only."""

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    async with client_for(fmt, llm_server) as client:
        agent = Agent(client, tools=[add], instructions="Be brief.")
        conversation: list[ChatMessage] = [ChatMessage.user("0 + 2?")]
        for turn in range(3):
            llm_server.enqueue(
                Reply(reasoning="add", tool_calls=[ToolCallSpec("add", {"a": turn, "b": 2})]),
                Reply(reasoning="done", text=f"{turn + 2}"),
            )
            response = await asyncio.wait_for(agent.send(conversation), GUARD)
            conversation = [*conversation, *response.turn_transcript]
            conversation.append(ChatMessage.user(f"{turn + 1} + 2?"))
    sizes = [len(r.messages) for r in llm_server.requests]
    assert sizes == sorted(sizes)
    assert [m.content for m in conversation if m.role is MessageRole.ASSISTANT and m.content] == [
        "2",
        "3",
        "4",
    ]
    all_valid(llm_server)


# ================================================================ cancelling from the UI


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", ["dispose", "cancel"])
async def test_cancel_mid_tool_then_continue(llm_server: LLMServer, fmt: str, how: str) -> None:
    """A UI stops a turn while an async tool runs (disposing the ``run`` subscription,
    or cancelling the task awaiting ``send``): the tool is cancelled, no other request
    is made, history is as before, and the next turn's request is valid and does not
    carry the stopped turn."""
    tool_started = asyncio.Event()
    tool_cancelled = asyncio.Event()

    @tool
    async def long_job(n: int) -> str:
        """A long job."""
        tool_started.set()
        try:
            await asyncio.sleep(GUARD)
        except asyncio.CancelledError:
            tool_cancelled.set()
            raise
        return "finished"

    llm_server.enqueue(Reply(tool_calls=[ToolCallSpec("long_job", {"n": 1})]))
    history = InMemoryHistoryProvider([ChatMessage.user("hi"), ChatMessage.assistant("hello")])
    async with client_for(fmt, llm_server) as client:
        agent = Agent(client, tools=[long_job], history=history)
        stop: Callable[[], object]
        if how == "dispose":
            stop = agent.run("start the job").subscribe(lambda _: None, lambda _: None).dispose
        else:
            stop = asyncio.ensure_future(agent.send("start the job")).cancel
        await asyncio.wait_for(tool_started.wait(), GUARD)
        stop()
        await asyncio.wait_for(tool_cancelled.wait(), GUARD)
        assert llm_server.request_count == 1
        assert [m.content for m in history.messages] == ["hi", "hello"]
        llm_server.enqueue(Reply(text="OK, stopped."))
        response = await asyncio.wait_for(agent.send("stop that"), GUARD)
    assert response.text == "OK, stopped."
    assert "start the job" not in json.dumps(llm_server.requests[-1].messages)
    assert [m.content for m in history.messages] == ["hi", "hello", "stop that", "OK, stopped."]
    assert all(m.source is not MessageSource.CONTEXT_PROVIDER for m in history.messages)
    all_valid(llm_server)


# ---------------------------------------------------------------- forcing tool_choice

FORCING = {
    # (client class, a tool_choice forcing a tool call in that API's own form, its auto)
    "chat-required": (OpenAIChatClient, "required", "auto"),
    "chat-named": (OpenAIChatClient, {"type": "function", "function": {"name": "answer"}}, "auto"),
    "chat-allowed": (
        OpenAIChatClient,
        {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}},
        {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
    ),
    "anthropic-any": (
        AnthropicClient,
        {"type": "any", "disable_parallel_tool_use": True},
        {"type": "auto", "disable_parallel_tool_use": True},
    ),
    "anthropic-named": (AnthropicClient, {"type": "tool", "name": "answer"}, {"type": "auto"}),
    "responses-required": (OpenAIResponsesClient, "required", "auto"),
    "responses-named": (OpenAIResponsesClient, {"type": "function", "name": "answer"}, "auto"),
    "responses-allowed": (
        OpenAIResponsesClient,
        {"type": "allowed_tools", "mode": "required", "tools": []},
        {"type": "allowed_tools", "mode": "auto", "tools": []},
    ),
}


def _forces_a_tool(body: Any) -> bool:
    """Whether a request's ``tool_choice`` obliges the model to call a tool."""
    choice = body.get("tool_choice")
    if choice == "required":
        return True
    if not isinstance(choice, dict):
        return False
    inner = choice.get("allowed_tools")
    mode = inner.get("mode") if isinstance(inner, dict) else choice.get("mode")
    return choice.get("type") in ("any", "tool", "function") or mode == "required"


@pytest.mark.asyncio
@pytest.mark.parametrize("reset", [True, False], ids=["reset", "kept"])
@pytest.mark.parametrize("case", list(FORCING))
async def test_a_forcing_tool_choice_goes_back_to_auto_once_the_turn_used_a_tool(
    case: str, reset: bool
) -> None:
    """A client's ``tool_choice`` that forces a tool call (the "final answer tool"
    pattern) would never let the model answer: once a step used tools, the turn's
    later steps send auto (OpenAI's Agents SDK's ``reset_tool_choice``); the next turn
    is forced again. ``reset_tool_choice=False`` keeps it, to ``MaxStepsExceeded``."""
    client_class, choice, auto = FORCING[case]
    ran: list[str] = []

    @tool
    def answer(text: str) -> str:
        """Give the final answer."""
        ran.append(text)
        return "recorded"

    async with LLMServer() as server:

        @server.script
        def model(request: RecordedRequest) -> Reply:  # as the real APIs behave
            if _forces_a_tool(request.body) or request.last_role != "tool":
                return Reply(tool_calls=[ToolCallSpec("answer", {"text": "42"})])
            return Reply(text="The answer is 42.")

        async with client_class(server.url, model="m", tool_choice=choice) as client:
            agent = Agent(client, tools=[answer], max_steps=3, reset_tool_choice=reset)
            if not reset:
                with pytest.raises(MaxStepsExceeded):
                    await agent.send("6 * 7?")
                assert [r.body["tool_choice"] for r in server.requests] == [choice] * 3
                return
            response = await agent.send("6 * 7?")
            await agent.send("And 6 * 8?")
        sent = [r.body["tool_choice"] for r in server.requests]
    assert ran == ["42", "42"]
    assert response.turn_transcript[-1].content == "The answer is 42."
    assert sent == [choice, auto, choice, auto]


def test_a_negative_max_result_chars_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="max_result_chars"):
        Agent(OpenAIChatClient("http://127.0.0.1:9", model="m"), max_result_chars=-1)
