"""A framework author's view of rafrx: its protocols implemented, its pieces composed.

The user here builds a product on top of rafrx rather than calling it once:

* their own :class:`~rafrx.history.HistoryProvider` backed by a "database" (rows
  of ``ChatMessage.to_dict()`` JSON, sync or async methods, a generator, a sliding
  window over :class:`~rafrx.history.InMemoryHistoryProvider`, rows in OpenAI's
  format read back with ``ChatMessage.from_openai``), and RAG-like
  :class:`~rafrx.history.ContextProvider` s (system messages, nothing, slow);
* agents composed: a router whose tool runs a sub-agent's turn on the same loop,
  failures and cancellation crossing that boundary, one approval channel for both,
  a conversation resumed by a fresh process from its JSON rows;
* its own tests written with :mod:`rafrx.testing`: scripted tool-call turns on each
  wire format, recorded ``.sse`` replays, faults, ``ServerThread`` from sync tests.

Every HTTP exchange is real aiohttp over 127.0.0.1 through :class:`LLMServer`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex.subject import Subject

from rafrx import Agent, ChatMessage
from rafrx.errors import HTTPStatusError, MaxStepsExceeded, RafrxError
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider, is_new
from rafrx.messages import MessageRole, MessageSource
from rafrx.response import AgentResponseResult, Usage
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import Fault, LLMServer, RecordedRequest, Replay, Reply, ToolCallSpec
from rafrx.tools import ToolApprovalResponse, tool
from tests.test_agent_wire import wire_problems

GUARD = 10.0
FIXTURES = Path(__file__).resolve().parent / "data" / "fixtures"

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = list(CLIENTS)


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city.

    Args:
        city: The city.
    """
    return f"sunny in {city}"


@tool
def weather(location: str) -> str:
    """The weather at a location.

    Args:
        location: Where.
    """
    return f"18C and clear in {location}"


def tool_then_answer(request: RecordedRequest) -> Reply:
    """A model that calls ``lookup`` once, then answers once it has read the result."""
    if request.last_role == "tool":
        return Reply(text="It is sunny.")
    return Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"})])


def all_valid(server: LLMServer) -> None:
    for request in server.requests:
        assert wire_problems(request) == [], request.messages


@pytest_asyncio.fixture
async def server(no_task_leak: None) -> AsyncIterator[LLMServer]:
    async with LLMServer() as started:
        yield started


# ------------------------------------------------------------------ providers of one's own


class RowsHistory:
    """A database-like history: one JSON row per message (``to_dict``), async methods."""

    def __init__(self, rows: list[str] | None = None) -> None:
        self.rows: list[str] = rows if rows is not None else []
        self.saved: list[list[ChatMessage]] = []

    async def load(self) -> Sequence[ChatMessage]:
        await asyncio.sleep(0)
        return [ChatMessage.from_dict(json.loads(row)) for row in self.rows]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.saved.append(list(messages))
        for message in messages:
            if is_new(message):
                await asyncio.sleep(0)
                self.rows.append(json.dumps(message.to_dict()))


class SyncGeneratorHistory:
    """Plain (sync) methods; ``load`` returns a generator, as a DB cursor would."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def load(self) -> Iterator[ChatMessage]:
        return (ChatMessage.from_dict(row) for row in self.rows)

    def save(self, messages: Sequence[ChatMessage]) -> None:
        self.rows.extend(m.to_dict() for m in messages if is_new(m))


class OpenAIRowsHistory:
    """Rows kept in OpenAI's chat format (``to_openai``), read back with ``from_openai``."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    async def load(self) -> Sequence[ChatMessage]:
        return [ChatMessage.from_openai(row) for row in self.rows]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.rows.extend(json.loads(json.dumps(m.to_openai())) for m in messages if is_new(m))


class Window(InMemoryHistoryProvider):
    """The last ``size`` messages only (a sliding-window memory over the built-in one)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    async def load(self) -> Sequence[ChatMessage]:
        return (await super().load())[-self.size :]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_json_rows_history_saves_each_turn_once_and_the_next_turn_sends_it_whole(
    server: LLMServer, fmt: str
) -> None:
    server.script(tool_then_answer)
    history = RowsHistory()
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        agent = Agent(client, tools=[lookup], history=history)
        first = await asyncio.wait_for(agent.send("Weather in Oslo?"), GUARD)
        await asyncio.wait_for(agent.send("Thanks!"), GUARD)
    assert len(history.saved) == 2  # one save a turn, never twice
    turn = history.saved[0]
    assert [m.content for m in turn[:1]] == ["Weather in Oslo?"]
    assert tuple(turn[1:]) == first.turn_transcript
    assert [m.source for m in turn] == [
        MessageSource.EXTERNAL,
        first.turn_transcript[0].source,
        MessageSource.TOOL_RESULT,
        first.turn_transcript[2].source,
    ]
    assert not any(m.source is MessageSource.CHAT_HISTORY for s in history.saved for m in s)
    assert len(history.rows) == 8  # (the second turn calls the tool too)
    assert server.requests[2].messages[: len(server.requests[1].messages)] == (
        server.requests[1].messages
    )
    all_valid(server)


@pytest.mark.asyncio
async def test_sync_provider_methods_and_a_generator_load_are_taken_as_the_async_ones(
    server: LLMServer,
) -> None:
    server.script(tool_then_answer)
    history = SyncGeneratorHistory()
    async with OpenAIChatClient(server.url, "k", model="m") as client:
        agent = Agent(client, tools=[lookup], history=history)
        await asyncio.wait_for(agent.send("Weather?"), GUARD)
        await asyncio.wait_for(agent.send("And tomorrow?"), GUARD)
    assert [r["role"] for r in history.rows] == ["user", "assistant", "tool", "assistant"] * 2
    last = server.requests[-1].messages
    roles = ["user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
    assert [m["role"] for m in last] == roles
    all_valid(server)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_rows_kept_in_openai_format_go_on_with_every_client(
    server: LLMServer, fmt: str
) -> None:
    """A product that stores OpenAI chat dicts (the lingua franca) and reads them back
    with ``from_openai``: the tool loop stays paired on every wire."""
    server.script(tool_then_answer)
    history = OpenAIRowsHistory()
    async with OpenAIChatClient(server.url, "k", model="m") as chat:
        await asyncio.wait_for(Agent(chat, tools=[lookup], history=history).send("Oslo?"), GUARD)
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        agent = Agent(client, tools=[lookup], history=history)
        await asyncio.wait_for(agent.send("And Bergen?"), GUARD)
    assert [r["role"] for r in history.rows] == ["user", "assistant", "tool", "assistant"] * 2
    all_valid(server)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
async def test_a_sliding_window_cutting_a_tool_pair_is_repaired_before_it_is_sent(
    server: LLMServer, fmt: str, size: int
) -> None:
    """A window starting on a tool result (its call cut off) or on a call (its result
    kept): each request still pairs every call with its result."""
    server.script(tool_then_answer)
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        agent = Agent(client, tools=[lookup], history=Window(size))
        for text in ("one", "two", "three"):
            await asyncio.wait_for(agent.send(text), GUARD)
    all_valid(server)


@pytest.mark.asyncio
async def test_a_load_giving_dicts_is_a_type_error_naming_the_provider_before_any_request(
    server: LLMServer,
) -> None:
    class DictRows:
        async def load(self) -> list[dict[str, str]]:
            return [{"role": "user", "content": "hi"}]

        async def save(self, messages: Sequence[ChatMessage]) -> None:
            raise AssertionError("never saved")

    async with OpenAIChatClient(server.url, "k", model="m") as client:
        agent = Agent(client, history=DictRows())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"DictRows\.load\(\) gave .*not a ChatMessage"):
            await asyncio.wait_for(agent.send("hello"), GUARD)
    assert server.requests == []


class HalfSaving(RowsHistory):
    """Fails after writing ``rows_before_failure`` rows of a save, once."""

    def __init__(self, rows_before_failure: int) -> None:
        super().__init__()
        self.rows_before_failure = rows_before_failure
        self.broken = True

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        if not self.broken:
            await super().save(messages)
            return
        self.broken = False
        for message in [m for m in messages if is_new(m)][: self.rows_before_failure]:
            self.rows.append(json.dumps(message.to_dict()))
        raise ConnectionError("database went away")


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("written", [1, 2, 3])
async def test_after_a_save_failed_half_way_the_next_turn_is_valid_on_every_wire(
    server: LLMServer, fmt: str, written: int
) -> None:
    """The failed save's error is the provider's own (the turn's results were all
    delivered before it); the next turn repairs the torn rows before sending them."""
    server.script(tool_then_answer)
    history = HalfSaving(written)
    seen: list[AgentResponseResult] = []
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        agent = Agent(client, tools=[lookup], history=history)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        agent.run("Oslo?").subscribe(seen.append, done.set_exception, lambda: done.set_result(None))
        with pytest.raises(ConnectionError, match="database went away"):
            await asyncio.wait_for(done, GUARD)
        assert any(r.finish_reason is not None for r in seen)  # the answer was delivered
        await asyncio.wait_for(agent.send("Still there?"), GUARD)
    assert len(server.requests) == 4
    all_valid(server)


@pytest.mark.asyncio
async def test_a_failed_or_endless_turn_saves_nothing(server: LLMServer) -> None:
    history = RowsHistory()
    async with OpenAIChatClient(server.url, "k", model="m") as client:
        agent = Agent(client, tools=[lookup], history=history, max_steps=2)
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("lookup", {"city": "A"})]),
            Fault.status(500, message="upstream exploded"),
        )
        with pytest.raises(HTTPStatusError) as failed:
            await asyncio.wait_for(agent.send("one"), GUARD)
        assert failed.value.partial is not None
        assert [m.role for m in failed.value.partial.turn_transcript] == [
            MessageRole.ASSISTANT,
            MessageRole.TOOL,
        ]
        server.script(lambda _: Reply(tool_calls=[ToolCallSpec("lookup", {"city": "B"})]))
        with pytest.raises(MaxStepsExceeded) as endless:
            await asyncio.wait_for(agent.send("two"), GUARD)
        assert endless.value.partial is not None
        assert endless.value.partial.source_agent_id == agent.id
    assert history.saved == []
    assert history.rows == []


# ------------------------------------------------------------------ context providers


class Facts:
    """A RAG step: a system message of retrieved facts, and what it was asked about."""

    def __init__(self, *messages: ChatMessage) -> None:
        self.messages = messages
        self.asked: list[list[tuple[str, str, MessageSource | None]]] = []

    async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        self.asked.append([(m.role.value, m.content, m.source) for m in messages])
        return self.messages


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_context_is_asked_once_a_turn_sent_on_each_call_and_never_saved(
    server: LLMServer, fmt: str
) -> None:
    server.script(tool_then_answer)
    facts = Facts(ChatMessage.system("Fact: Oslo is in Norway."))
    history = RowsHistory()
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        agent = Agent(
            client,
            tools=[lookup],
            instructions="Be brief.",
            history=history,
            context_providers=[facts],
        )
        await asyncio.wait_for(agent.send("Oslo?"), GUARD)
        await asyncio.wait_for(agent.send("Thanks"), GUARD)
    assert len(facts.asked) == 2  # once a turn, not once an LLM call
    assert facts.asked[0] == [("user", "Oslo?", MessageSource.EXTERNAL)]
    assert facts.asked[1][0] == ("user", "Oslo?", MessageSource.CHAT_HISTORY)
    assert facts.asked[1][-1] == ("user", "Thanks", MessageSource.EXTERNAL)
    for request in server.requests:  # every LLM call carries the instructions, then the facts
        dumped = json.dumps(request.body)
        assert dumped.index("Be brief.") < dumped.index("Fact: Oslo is in Norway.")
    if fmt == "anthropic":
        assert {r.body["system"] for r in server.requests} == {
            "Be brief.\n\nFact: Oslo is in Norway."
        }
    assert not any("Fact:" in row for row in history.rows)
    all_valid(server)


@pytest.mark.asyncio
async def test_a_context_provider_giving_nothing_changes_nothing(server: LLMServer) -> None:
    async with OpenAIChatClient(server.url, "k", model="m") as client:
        plain = Agent(client, instructions="Hi.")
        with_empty = Agent(client, instructions="Hi.", context_providers=[Facts()])
        await asyncio.wait_for(plain.send("x"), GUARD)
        await asyncio.wait_for(with_empty.send("x"), GUARD)
    assert server.requests[0].messages == server.requests[1].messages


@pytest.mark.asyncio
async def test_disposing_a_turn_while_a_slow_retriever_runs_sends_nothing_and_leaks_nothing(
    server: LLMServer,
) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    class SlowRetriever:
        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            started.set()
            try:
                await asyncio.Event().wait()  # a vector store that never answers
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return ()

    history = RowsHistory()
    async with OpenAIChatClient(server.url, "k", model="m") as client:
        agent = Agent(client, history=history, context_providers=[SlowRetriever()])
        subscription = agent.run("hello").subscribe(lambda _: None, lambda _: None)
        await asyncio.wait_for(started.wait(), GUARD)
        subscription.dispose()
        await asyncio.wait_for(cancelled.wait(), GUARD)
    assert server.requests == []
    assert history.rows == []


# ------------------------------------------------------------------ agents composed


def router_script(sub_reply: Reply | Fault) -> Any:
    """MAIN calls ``research`` once, then answers; SUB answers with ``sub_reply``."""

    def answer(request: RecordedRequest) -> Reply | Fault:
        if "SUB" in json.dumps(request.body.get("system") or request.messages[0]):
            return sub_reply
        if request.last_role == "tool":
            return Reply(text="main answer", usage=Usage(10, 2, 12))
        spec = ToolCallSpec("research", {"topic": "rx"})
        return Reply(tool_calls=[spec], usage=Usage(7, 3, 10))

    return answer


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_router_whose_tool_runs_a_sub_agent_keeps_each_agent_to_its_own(
    server: LLMServer, fmt: str
) -> None:
    server.script(router_script(Reply(text="sub findings", usage=Usage(100, 50, 150))))
    inner: list[Any] = []
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        sub_history = InMemoryHistoryProvider()
        sub = Agent(client, instructions="SUB", history=sub_history, id="sub")

        @tool
        async def research(topic: str) -> str:
            """Research a topic with the sub-agent."""
            response = await sub.send(topic)
            inner.append(response)
            return response.text

        history = InMemoryHistoryProvider()
        main = Agent(client, tools=[research], instructions="MAIN", history=history, id="main")
        outer = await asyncio.wait_for(main.send("go"), GUARD)
    assert outer.source_agent_id == "main"
    assert inner[0].source_agent_id == "sub"

    def tokens(usage: Usage | None) -> tuple[int, int, int]:
        assert usage is not None
        return usage.prompt_tokens, usage.completion_tokens, usage.total_tokens

    assert tokens(outer.usage) == (17, 5, 22)  # the router's own two calls only
    assert tokens(inner[0].usage) == (100, 50, 150)
    assert outer.tool_messages[0].content == "sub findings"
    assert [m.content for m in sub_history.messages] == ["rx", "sub findings"]
    assert [m.role for m in history.messages] == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    sub_request = next(r for r in server.requests if "SUB" in json.dumps(r.body))
    assert "go" not in json.dumps(sub_request.messages)  # the router's conversation stays out
    all_valid(server)


@pytest.mark.asyncio
async def test_a_sub_agents_http_error_reaches_the_router_model_redacted_as_an_error_result(
    server: LLMServer,
) -> None:
    key = "gw-tok-0123456789abcdefSECRET"
    server.script(router_script(Fault.status(401, message=f"invalid key {key}")))
    async with OpenAIChatClient(server.url, key, model="m") as client:
        sub = Agent(client, instructions="SUB")

        @tool
        async def research(topic: str) -> str:
            """Research a topic with the sub-agent."""
            return (await sub.send(topic)).text

        main = Agent(client, tools=[research], instructions="MAIN")
        outer = await asyncio.wait_for(main.send("go"), GUARD)
    result = outer.tool_messages[0]
    assert result.is_error
    assert "HTTPStatusError" in result.content
    assert "401" in result.content
    assert key not in json.dumps([r.body for r in server.requests])
    assert outer.text == "main answer"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_disposing_the_router_turn_stops_the_sub_agent_mid_stream(
    server: LLMServer, fmt: str
) -> None:
    streaming = asyncio.Event()

    def answer(request: RecordedRequest) -> Reply:
        if "SUB" in json.dumps(request.body):
            streaming.set()
            return Reply(text="slow " * 400, chunk_size=1, delay=0.005)
        return router_script(Reply())(request)

    server.script(answer)
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        sub_history = InMemoryHistoryProvider()
        sub = Agent(client, instructions="SUB", history=sub_history)

        @tool
        async def research(topic: str) -> str:
            """Research a topic with the sub-agent."""
            return (await sub.send(topic)).text

        history = InMemoryHistoryProvider([ChatMessage.user("hi"), ChatMessage.assistant("yo")])
        main = Agent(client, tools=[research], instructions="MAIN", history=history)
        errors: list[Exception] = []
        subscription = main.run("go").subscribe(lambda _: None, errors.append)
        await asyncio.wait_for(streaming.wait(), GUARD)
        await server.wait_until(lambda: server.open_connections >= 1, GUARD)
        subscription.dispose()
        await server.wait_connections_closed(GUARD)
    assert errors == []  # disposed: nothing more is forwarded
    assert sub_history.messages == ()
    assert len(history.messages) == 2


@pytest.mark.asyncio
async def test_a_router_and_its_sub_agent_each_answered_on_their_own_channel(
    server: LLMServer,
) -> None:
    """The UI gives the router and its sub-agent a ``Subject`` of answers each (one
    observable serves one turn at a time, of any agent: answers go by call id); the
    sub-agent's request is answered on its own channel, and its call runs once."""

    def answer(request: RecordedRequest) -> Reply:
        if request.body.get("system") == "SUB":
            if request.last_role == "tool":
                return Reply(text="deleted")
            return Reply(tool_calls=[ToolCallSpec("delete", {"path": "/tmp/x"})])
        return router_script(Reply())(request)

    server.script(answer)
    ran: list[str] = []

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a path."""
        ran.append(path)
        return "ok"

    approvals: Subject[ToolApprovalResponse] = Subject()
    sub_approvals: Subject[ToolApprovalResponse] = Subject()
    asked: list[str] = []
    async with AnthropicClient(server.url, "k", model="m") as client:
        sub = Agent(client, tools=[delete], instructions="SUB", approver=sub_approvals)

        @tool
        async def research(topic: str) -> str:
            """Research a topic with the sub-agent."""
            loop = asyncio.get_running_loop()
            done: asyncio.Future[None] = loop.create_future()
            texts: list[str] = []

            def on_next(result: AgentResponseResult) -> None:
                for event in result.events:
                    if isinstance(event, ToolApprovalRequestEvent):
                        asked.append(event.call_id)
                        approve = ToolApprovalResponse(event.call_id, True)
                        loop.call_soon(sub_approvals.on_next, approve)  # the user clicks
                texts.extend(getattr(c, "text", "") for c in result.contents)

            subscription = sub.run(topic).subscribe(
                on_next, done.set_exception, lambda: done.set_result(None)
            )
            try:
                await done
            finally:
                subscription.dispose()
            return "".join(t for t in texts if isinstance(t, str))

        main = Agent(client, tools=[research], instructions="MAIN", approver=approvals)
        outer = await asyncio.wait_for(main.send("go"), GUARD)
    assert ran == ["/tmp/x"]
    assert len(asked) == 1
    assert outer.tool_messages[0].content == "deleted"
    assert outer.text == "main answer"


@pytest.mark.asyncio
async def test_a_handoff_over_one_history_gives_each_agent_its_own_instructions_and_tools(
    server: LLMServer,
) -> None:
    """Triage answers, then a specialist with another tool goes on from the same
    history; the specialist's requests offer its own tool and carry triage's turn."""
    shared = RowsHistory()
    server.enqueue(
        Reply(text="Passing you to the weather desk."),
        Reply(tool_calls=[ToolCallSpec("weather", {"location": "Oslo"})]),
        Reply(text="18C."),
    )
    async with AnthropicClient(server.url, "k", model="m") as client:
        triage = Agent(client, tools=[lookup], instructions="TRIAGE", history=shared)
        desk = Agent(client, tools=[weather], instructions="DESK", history=shared)
        await asyncio.wait_for(triage.send("I need the weather"), GUARD)
        answer = await asyncio.wait_for(desk.send("In Oslo, please"), GUARD)
    assert answer.text == "18C."
    assert [r.tool_names for r in server.requests] == [("lookup",), ("weather",), ("weather",)]
    assert [r.body["system"] for r in server.requests] == ["TRIAGE", "DESK", "DESK"]
    assert "Passing you to the weather desk." in json.dumps(server.requests[1].messages)
    assert len(shared.rows) == 6
    all_valid(server)


# ------------------------------------------------------------------ resume after a restart


RECORDED_TOOL_TURNS = {
    "anthropic": "anthropic/anthropic-thinking-tool-use.sse",
    "openai-responses": "openai-responses/responses-reasoning-summary-tool.sse",
    "openai-chat": "openai-chat/deepseek-reasoning-tools.sse",
}


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_fresh_process_resuming_from_json_rows_sends_what_the_live_agent_would(
    server: LLMServer, fmt: str
) -> None:
    """A recorded reasoning + tool-call turn (Anthropic's signed thinking, a Responses
    reasoning item, DeepSeek's reasoning_content) saved as JSON text; a new client, agent
    and provider built from that text send the very request the agent that lived through
    the turn sends."""
    recorded = Replay(FIXTURES / RECORDED_TOOL_TURNS[fmt])

    async def run_live() -> tuple[RecordedRequest, str]:
        server.reset()
        server.enqueue(recorded, Reply(text="It is 18C."), Reply(text="You're welcome."))
        rows = RowsHistory()
        async with CLIENTS[fmt](server.url, "k", model="m") as client:
            agent = Agent(client, tools=[weather], history=rows)
            await asyncio.wait_for(agent.send("Weather in Florence?"), GUARD)
            stored = json.dumps(rows.rows)  # what the database holds
            await asyncio.wait_for(agent.send("Thanks!"), GUARD)
        return server.requests[-1], stored

    live_request, stored = await run_live()
    server.reset()
    server.enqueue(Reply(text="You're welcome."))
    async with CLIENTS[fmt](server.url, "k", model="m") as client:  # "after the restart"
        agent = Agent(client, tools=[weather], history=RowsHistory(json.loads(stored)))
        await asyncio.wait_for(agent.send("Thanks!"), GUARD)
    resumed = server.requests[-1]
    assert resumed.messages == live_request.messages
    assert wire_problems(resumed) == []
    dumped = json.dumps(resumed.messages)
    if fmt == "anthropic":
        assert '"signature"' in dumped
    elif fmt == "openai-responses":
        assert '"type": "reasoning"' in dumped
    else:
        assert "reasoning_content" in dumped


# ------------------------------------------------------------------ rafrx.testing as a test kit


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_scripted_call_ids_go_out_and_come_back_paired_on_every_wire(
    server: LLMServer, fmt: str
) -> None:
    server.enqueue(
        Reply(
            text="Checking both.",
            tool_calls=[
                ToolCallSpec("lookup", {"city": "Oslo"}, id="call_one"),
                ToolCallSpec("lookup", {"city": "Lima"}, id="call_two"),
            ],
        ),
        Reply(text="Both sunny."),
    )
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        response = await asyncio.wait_for(Agent(client, tools=[lookup]).send("Two?"), GUARD)
    assert [c.id for c in response.tool_calls] == ["call_one", "call_two"]
    assert [m.tool_call_id for m in response.tool_messages] == ["call_one", "call_two"]
    assert [m.content for m in response.tool_messages] == ["sunny in Oslo", "sunny in Lima"]
    second = server.requests[1]
    assert [r.last_role for r in server.requests] == ["user", "tool"]
    dumped = json.dumps(second.messages)
    assert dumped.count("call_one") == 2
    assert dumped.count("call_two") == 2
    assert wire_problems(second) == []


@pytest.mark.asyncio
async def test_a_failing_script_is_a_typed_500_that_names_the_scripts_error(
    server: LLMServer,
) -> None:
    @server.script
    def broken(request: RecordedRequest) -> Reply:
        raise KeyError("no such fixture: step-2")

    history = RowsHistory()
    async with OpenAIChatClient(server.url, "k", model="m") as client:
        agent = Agent(client, history=history)
        with pytest.raises(HTTPStatusError) as caught:
            await asyncio.wait_for(agent.send("hi"), GUARD)
    assert caught.value.status == 500
    assert "script raised KeyError" in str(caught.value)
    assert "no such fixture" in str(caught.value)
    assert caught.value.partial is not None
    assert history.rows == []


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_drop_in_step_two_keeps_step_ones_tool_result_in_partial_and_saves_nothing(
    server: LLMServer, fmt: str
) -> None:
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"})]),
        Fault.drop_after(400, body=Reply(text="partial answer " * 40, chunk_size=4)),
    )
    history = RowsHistory()
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        agent = Agent(client, tools=[lookup], history=history)
        with pytest.raises(RafrxError) as caught:
            await asyncio.wait_for(agent.send("Oslo?"), GUARD)
    partial = caught.value.partial
    assert partial is not None
    assert partial.interrupted
    assert [m.content for m in partial.tool_messages] == ["sunny in Oslo"]
    assert history.rows == []
    await server.wait_connections_closed(GUARD)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_recorded_tool_turn_replayed_drives_the_agent_like_the_live_provider(
    server: LLMServer, fmt: str
) -> None:
    server.enqueue(Replay(FIXTURES / RECORDED_TOOL_TURNS[fmt], pacing=True), Reply(text="18C."))
    async with CLIENTS[fmt](server.url, "k", model="m") as client:
        response = await asyncio.wait_for(Agent(client, tools=[weather]).send("Weather?"), GUARD)
    assert response.text.endswith("18C.")
    assert response.reasoning_text
    assert response.tool_messages[0].content.startswith("18C and clear in ")
    assert server.requests[1].last_role == "tool"
    assert wire_problems(server.requests[1]) == []


def test_a_sync_test_drives_an_agent_through_a_server_thread_turn_after_turn() -> None:
    """A product's plain (non-async) test: one client and agent, ``asyncio.run`` per turn
    (a new loop each time); every connection is closed when each run ends."""
    threaded_runner = LLMServer.in_thread()
    with threaded_runner as threaded:
        threaded.script(tool_then_answer)
        client = AnthropicClient(threaded.url, "k", model="m")
        history = InMemoryHistoryProvider()
        agent = Agent(client, tools=[lookup], history=history)
        texts = [asyncio.run(agent.send(f"turn {i}")).text for i in range(3)]
        assert texts == ["It is sunny."] * 3
        assert len(history.messages) == 12
        # (each run closed its connections; the server sees the last close a moment later)
        threaded_runner.run(threaded.wait_connections_closed(), timeout=5)
        assert threaded.open_connections == 0
        for request in threaded.requests:
            assert wire_problems(request) == []


# ------------------------------------------------------------------ properties

_SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_CITY = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=30
)


@_SETTINGS
@given(
    fmt=st.sampled_from(FORMATS),
    cities=st.lists(_CITY, min_size=1, max_size=3),
    chunk=st.integers(1, 12),
)
def test_any_scripted_parallel_calls_reach_the_tools_exactly_and_are_saved_paired(
    fmt: str, cities: list[str], chunk: int
) -> None:
    """Over a server thread, any city names split in any chunk size reach the tool
    exactly, and the JSON rows hold each call followed by its result."""
    got: list[str] = []

    @tool
    def where(city: str) -> str:
        """Echo a city."""
        got.append(city)
        return city

    async def turn(url: str) -> RowsHistory:
        history = RowsHistory()
        async with CLIENTS[fmt](url, "k", model="m") as client:
            await asyncio.wait_for(Agent(client, tools=[where], history=history).send("?"), GUARD)
        return history

    with LLMServer.in_thread() as threaded:
        calls = [ToolCallSpec("where", {"city": c}) for c in cities]
        threaded.enqueue(Reply(tool_calls=calls, chunk_size=chunk), Reply(text="ok"))
        history = asyncio.run(turn(threaded.url))
        assert wire_problems(threaded.requests[1]) == []
    assert got == cities
    rows = [json.loads(r) for r in history.rows]
    assert [r["role"] for r in rows] == ["user", "assistant", *["tool"] * len(cities), "assistant"]
    ids = [c["id"] for c in rows[1]["tool_calls"]]
    assert [r["tool_call_id"] for r in rows[2 : 2 + len(cities)]] == ids
    assert [r["content"] for r in rows[2 : 2 + len(cities)]] == cities


@pytest.mark.asyncio
@_SETTINGS
@given(turns=st.lists(st.sampled_from(["tool", "text", "fail"]), min_size=1, max_size=5))
async def test_any_mix_of_tool_text_and_failed_turns_leaves_rows_that_replay_valid(
    turns: list[str],
) -> None:
    """A DB-backed agent living through tool turns, text turns and turns whose second
    LLM call fails: rows only ever hold whole turns, and every request is valid."""
    history = RowsHistory()
    async with LLMServer() as srv, OpenAIChatClient(srv.url, "k", model="m") as client:
        agent = Agent(client, tools=[lookup], history=history)
        whole = 0
        for index, kind in enumerate(turns):
            if kind == "text":
                srv.enqueue(Reply(text=f"answer {index}"))
            else:
                srv.enqueue(Reply(tool_calls=[ToolCallSpec("lookup", {"city": str(index)})]))
                srv.enqueue(Reply(text="done") if kind == "tool" else Fault.status(503))
            try:
                await asyncio.wait_for(agent.send(f"q{index}"), GUARD)
                whole += 1
            except HTTPStatusError:
                assert kind == "fail"
        for request in srv.requests:
            assert wire_problems(request) == []
    rows = [json.loads(r) for r in history.rows]
    assert sum(r["role"] == "user" for r in rows) == whole
    assert len(history.saved) == whole
