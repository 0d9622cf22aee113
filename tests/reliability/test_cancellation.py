"""Cancellation everywhere: dispose single calls and agent turns at random points.

Each disposal must close the HTTP connection (the server sees it), cancel
running tools, leave no asyncio task, socket or file descriptor behind
(counted), deliver nothing afterwards, and leave the partial response
available, marked interrupted (through :func:`rafrx.notebook.live`, whose
view keeps what arrived, and ``err.partial`` when a turn fails).
"""

from __future__ import annotations

import asyncio
import io
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from reactivex import operators as rxops

from rafrx import Agent, ChatMessage, collect_agent_response
from rafrx import operators as ops
from rafrx.content import TextContent, ToolCalledContent, ToolCallingContent
from rafrx.events import FinishEvent, ResponseStartedEvent
from rafrx.notebook import LiveView, live, text_display
from rafrx.response import AgentResponseResult
from rafrx.testing import LLMServer, RecordedRequest, Reply, ServerResponse, ToolCallSpec
from rafrx.tools import tool
from tests.reliability._support import CLIENTS, count_fds, settle, wait_for

FORMATS = list(CLIENTS)
STORY = " ".join(f"word{i}" for i in range(200))  # 200 events of ~5 ms: about 1 s


@pytest_asyncio.fixture
async def server() -> AsyncIterator[LLMServer]:
    """A local server; after the test (its clients closed) no connection, task,
    socket or file descriptor may be left."""
    async with LLMServer() as llm:
        await settle()
        tasks = asyncio.all_tasks()
        fds = count_fds()
        yield llm
        await llm.wait_connections_closed()
        current = asyncio.current_task()
        await wait_for(lambda: not [t for t in asyncio.all_tasks() - tasks if t is not current])
        await wait_for(lambda: count_fds() <= fds)


def view_of(source: Any) -> tuple[LiveView, list[AgentResponseResult]]:
    """A live view of ``source`` and the list of results it received."""
    seen: list[AgentResponseResult] = []
    view = live(source.pipe(rxops.do_action(seen.append)), display=text_display(io.StringIO()))
    return view, seen


def text_of(results: list[AgentResponseResult]) -> str:
    return "".join(c.text for r in results for c in r.contents if isinstance(c, TextContent))


# ---------------------------------------------------------------- single calls


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_dispose_a_call_at_random_points(server: LLMServer, fmt: str) -> None:
    rng = random.Random(fmt)
    server.default = Reply(text=STORY, chunk_size=6, delay=0.005)
    async with CLIENTS[fmt](server.url, "sk-x") as client:
        for _ in range(6):
            view, seen = view_of(client.stream([ChatMessage.user("go")]).pipe(ops.convert()))
            await asyncio.sleep(rng.uniform(0, 0.4))
            view.dispose()
            delivered = len(seen)
            await server.wait_connections_closed()  # the server saw the close
            await asyncio.sleep(0.03)
            assert len(seen) == delivered  # nothing after disposal
            response = view.response
            assert response.interrupted
            assert response.text == text_of(seen)
            assert STORY.startswith(response.text)
            assert view.done
            view.dispose()  # twice is a no-op
            assert len(seen) == delivered
    assert len(server.requests) == 6


async def _dispose_after(server: LLMServer, source: Any, stop_after: int) -> None:
    seen: list[Any] = []
    ended: list[str] = []
    holder: dict[str, Any] = {}

    def on_next(update: Any) -> None:
        seen.append(update)
        if len(seen) == stop_after:
            holder["subscription"].dispose()

    holder["subscription"] = source.subscribe(
        on_next, lambda e: ended.append(repr(e)), lambda: ended.append("done")
    )
    await wait_for(lambda: len(seen) >= stop_after)
    await server.wait_connections_closed()
    await asyncio.sleep(0.02)
    assert len(seen) == stop_after
    assert ended == []


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_dispose_from_inside_on_next(server: LLMServer, fmt: str) -> None:
    server.default = Reply(text=STORY, chunk_size=6, delay=0.002)
    async with CLIENTS[fmt](server.url, "sk-x") as client:
        for stop_after in (1, 2, 7, 30):
            await _dispose_after(server, client.stream([ChatMessage.user("go")]), stop_after)


@pytest.mark.asyncio
async def test_cancelling_the_awaiting_task_at_random_points(server: LLMServer) -> None:
    rng = random.Random(7)
    server.default = Reply(text=STORY, chunk_size=6, delay=0.005)
    async with CLIENTS["anthropic"](server.url, "sk-x") as client:
        for _ in range(5):
            task = asyncio.create_task(
                collect_agent_response(client.stream([ChatMessage.user("go")]).pipe(ops.convert()))
            )
            await asyncio.sleep(rng.uniform(0, 0.3))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await server.wait_connections_closed()


@pytest.mark.asyncio
async def test_dispose_before_the_server_answers(server: LLMServer) -> None:
    from rafrx.testing import Fault

    async with CLIENTS["openai-chat"](server.url, "sk-x") as client:
        for _ in range(3):
            server.enqueue(Fault.stall(30))
            view, seen = view_of(client.stream([ChatMessage.user("go")]))
            await server.wait_requests(len(server.requests) + 1)
            view.dispose()
            await server.wait_connections_closed()
            assert seen == []
            assert view.response.interrupted
            assert view.response.text == ""


# ---------------------------------------------------------------- agent turns


class SlowTools:
    """Async tools that record starts, ends and cancellations."""

    def __init__(self, seconds: float | tuple[float, float], seed: int = 0) -> None:
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.started = 0
        self.finished = 0
        self.cancelled = 0
        self.running = 0
        self.tool = tool(self.lookup)

    async def lookup(self, query: str) -> str:
        """Look something up, slowly."""
        self.started += 1
        self.running += 1
        seconds = self.seconds
        if isinstance(seconds, tuple):
            seconds = self.rng.uniform(*seconds)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        self.finished += 1
        return f"found {query}"


def tool_loop(request: RecordedRequest) -> ServerResponse:
    """Call two tools, then answer with a long text."""
    if request.last_role == "tool":
        return Reply(text=STORY, chunk_size=12, delay=0.003)
    calls = [ToolCallSpec("lookup", {"query": q}) for q in ("rx", "sse")]
    return Reply(text="Let me look.", tool_calls=calls, chunk_size=4, delay=0.003)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_dispose_a_turn_while_its_tools_run(server: LLMServer, fmt: str) -> None:
    server.script(tool_loop)
    tools = SlowTools(30.0)
    async with CLIENTS[fmt](server.url, "sk-x") as client:
        agent = Agent(client, tools=[tools.tool])
        view, seen = view_of(agent.run("Look things up."))
        await wait_for(lambda: tools.started == 2)
        view.dispose()
        await wait_for(lambda: tools.running == 0)
        assert tools.cancelled == 2
        assert tools.finished == 0
        response = view.response
        assert response.interrupted
        assert response.text == "Let me look."
        assert [c.name for c in response.tool_calls] == ["lookup", "lookup"]
        assert response.tool_messages == ()  # no result was made up
        assert not any(isinstance(c, ToolCalledContent) for r in seen for c in r.contents)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_dispose_a_turn_at_random_points(server: LLMServer, fmt: str) -> None:
    """Streaming the call, running tools, streaming the answer: anywhere."""
    server.script(tool_loop)
    rng = random.Random(fmt)
    tools = SlowTools((0.0, 0.15), seed=3)
    async with CLIENTS[fmt](server.url, "sk-x") as client:
        agent = Agent(client, tools=[tools.tool])
        for _ in range(6):
            view, seen = view_of(agent.run("Look things up."))
            await asyncio.sleep(rng.uniform(0, 0.6))
            view.dispose()
            delivered = len(seen)
            await wait_for(lambda: tools.running == 0)
            started = sum(isinstance(e, ResponseStartedEvent) for r in seen for e in r.events)
            finished = sum(isinstance(e, FinishEvent) for r in seen for e in r.events)
            if started > finished:  # disposed while the model streamed: that connection closes
                await server.wait_connections_closed()
            else:  # disposed between calls: at most the idle keep-alive connection is left
                assert server.open_connections <= 1
            await asyncio.sleep(0.02)
            assert len(seen) == delivered
            response = view.response
            assert response.interrupted or response.text.endswith(STORY)
            calls = [c for r in seen for c in r.contents if isinstance(c, ToolCallingContent)]
            results = [c for r in seen for c in r.contents if isinstance(c, ToolCalledContent)]
            assert len(results) <= len(calls) <= 2
            assert len(response.tool_messages) == len(results)
    assert tools.started == tools.finished + tools.cancelled


@pytest.mark.asyncio
async def test_cancelling_agent_send_cancels_its_tools(server: LLMServer) -> None:
    server.script(tool_loop)
    tools = SlowTools(30.0)
    async with CLIENTS["openai-chat"](server.url, "sk-x") as client:
        agent = Agent(client, tools=[tools.tool])
        task = asyncio.create_task(agent.send("Look things up."))
        await wait_for(lambda: tools.started == 2)
        start = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_for(lambda: tools.running == 0)
        assert time.monotonic() - start < 5
        assert tools.cancelled == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_turn_cut_mid_answer_keeps_its_tool_results_in_partial(
    server: LLMServer, fmt: str
) -> None:
    from rafrx.errors import StreamInterrupted
    from rafrx.testing import Fault, render

    answer = render(Reply(text=STORY, chunk_size=12), fmt)
    cut = answer.index(b"word50")

    def script(request: RecordedRequest) -> ServerResponse:
        if request.last_role == "tool":
            return Fault.drop_after(cut, body=answer)
        return Reply(tool_calls=[ToolCallSpec("lookup", {"query": "rx"})])

    server.script(script)
    tools = SlowTools(0.0)
    async with CLIENTS[fmt](server.url, "sk-x") as client:
        agent = Agent(client, tools=[tools.tool])
        with pytest.raises(StreamInterrupted) as caught:
            await agent.send("Look it up.")
    partial = caught.value.partial
    assert partial is not None
    assert partial.interrupted
    assert [m.content for m in partial.tool_messages] == ["found rx"]
    assert [c.name for c in partial.tool_calls] == ["lookup"]
    assert partial.text
    assert STORY.startswith(partial.text)
    assert "word50" not in partial.text
