"""Agent turns that overlap or are reused: two turns of one agent at once, one
``run()`` observable subscribed twice, a turn started while another one's history
save runs, histories a provider would refuse, providers that are slow or fail,
attributes changed between and during turns, the ``max_steps`` boundary, tools
shared by two agents, and ``send()`` cancelled at each of its await points.

The scripted client here answers from a function of the request (so that turns
running at once each get their own answer); the wire tests use the real local
:class:`~rafrx.testing.LLMServer` and ``tests/test_agent_wire``'s API-rule checker.

Where the documentation says nothing, the tests hold the agent to what a serious
library does: history never left invalid for the provider (every tool call
answered right after it, no result without its call), a refusal is a clear typed
error raised before anything is sent, and nothing hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from reactivex import Observable, abc
from reactivex import operators as rx
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rafrx import updates as u
from rafrx.agent import Agent
from rafrx.errors import MaxStepsExceeded, ProviderError, RafrxError
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider, is_new
from rafrx.messages import ChatMessage, MessageRole, MessageSource, ToolCall
from rafrx.operators import aggregate
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import Tool, ToolApprovalResponse, tool
from tests.test_agent import text
from tests.test_agent_wire import CLIENTS, wire_problems

GUARD = 5.0  # seconds: a guard against hangs only, never reached by a passing test

EXTERNAL = MessageSource.EXTERNAL
CONTEXT = MessageSource.CONTEXT_PROVIDER
TOOL = MessageRole.TOOL

Updates = list[u.AgentResponseUpdate]
Respond = Callable[[tuple[ChatMessage, ...]], "Updates | Awaitable[Updates]"]


# ---------------------------------------------------------------- a scripted client


class Client:
    """Answers each LLM call with ``respond(messages)`` (sync or async), emitted on the
    loop one update per tick; records every request's messages and tools."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.sent: list[tuple[ChatMessage, ...]] = []
        self.tools: list[tuple[str, ...]] = []

    def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[Tool] | None = None
    ) -> Observable[u.AgentResponseUpdate]:
        def subscribe(
            observer: abc.ObserverBase[u.AgentResponseUpdate],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            sent = tuple(messages)
            self.sent.append(sent)
            self.tools.append(tuple(t.name for t in tools or ()))

            async def emit() -> None:
                try:
                    answer = self.respond(sent)
                    updates = await answer if inspect.isawaitable(answer) else answer
                    for update in updates:
                        await asyncio.sleep(0)
                        observer.on_next(update)
                except Exception as exc:
                    observer.on_error(exc)
                    return
                observer.on_completed()

            task = asyncio.get_running_loop().create_task(emit())
            return Disposable(task.cancel)

        return Observable(subscribe)


def calls(*specs: tuple[str, str, Any], say: str = "") -> Updates:
    """One LLM call making the given (id, name, arguments) calls, after ``say``."""
    out: Updates = [u.ResponseMetadata("resp", "fake-1")]
    if say:
        out.append(u.TextDelta(say))
    for call_id, name, arguments in specs:
        out += [
            u.ToolCallStart(call_id, name),
            u.ToolCallArgs(call_id, json.dumps(arguments)),
            u.ToolCallEnd(call_id),
        ]
    out.append(u.Finish(FinishReason.TOOL_CALLS))
    return out


def last_user(messages: Sequence[ChatMessage]) -> str:
    return next(m.content for m in reversed(messages) if m.role is MessageRole.USER)


def problems(messages: Sequence[ChatMessage]) -> list[str]:
    """What a provider refuses in ``messages``: a tool call not answered right after
    its assistant message, a result answering no open call of the message before it,
    one call id used twice."""
    found: list[str] = []
    open_ids: set[str] = set()
    ids: list[str] = []
    for i, m in enumerate(messages):
        if m.role is TOOL:
            if m.tool_call_id not in open_ids:
                found.append(f"{i}: result {m.tool_call_id!r} answers no open call")
            open_ids.discard(m.tool_call_id or "")
            continue
        if open_ids:
            found.append(f"{i}: calls {sorted(open_ids)} have no result")
        open_ids = set()
        if m.role is MessageRole.ASSISTANT and m.tool_calls:
            open_ids = {c.id for c in m.tool_calls}
            ids += [c.id for c in m.tool_calls]
    if open_ids:
        found.append(f"end: calls {sorted(open_ids)} have no result")
    if len(ids) != len(set(ids)):
        found.append(f"duplicate call ids {ids}")
    return found


def user(content: str) -> ChatMessage:
    return ChatMessage.user(content, source=EXTERNAL)


async def wait_until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(GUARD):
        while not predicate():
            await asyncio.sleep(0.001)


async def outcome_of(awaitable: Awaitable[AgentResponse]) -> AgentResponse | Exception:
    """The response, or the (typed) error a turn ended with; never a hang."""
    try:
        return await asyncio.wait_for(awaitable, GUARD)
    except TimeoutError:
        raise
    except Exception as exc:
        return exc


RAN: list[str] = []


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    RAN.append(city)
    return f"{city}: sun"


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file."""
    RAN.append(path)
    return f"removed {path}"


# ---------------------------------------------------------------- history providers


class RowHistory:
    """One row per message, each write awaited (as a database client does).

    ``fail_after``: the save raises ``ConnectionError`` once that many rows of it
    are written (``0``: before the first)."""

    def __init__(self, delay: float = 0.01, fail_after: int | None = None) -> None:
        self.rows: list[ChatMessage] = []
        self.delay = delay
        self.fail_after = fail_after
        self.saving = asyncio.Event()

    async def load(self) -> Sequence[ChatMessage]:
        snapshot = tuple(self.rows)  # what the SELECT sees
        await asyncio.sleep(0)
        return snapshot

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.saving.set()
        fail_after = self.fail_after  # (a save fails or not as the database was when it began)
        for n, message in enumerate(m for m in messages if is_new(m)):
            await asyncio.sleep(self.delay)
            if fail_after is not None and n >= fail_after:
                raise ConnectionError("db went away")
            self.rows.append(message)


class DocumentHistory:
    """The whole conversation as one document: read it, append, write it back (a
    JSON file, a key-value store), with an await between the read and the write."""

    def __init__(self, delay: float = 0.01) -> None:
        self.rows: list[ChatMessage] = []
        self.delay = delay

    async def load(self) -> Sequence[ChatMessage]:
        await asyncio.sleep(0)
        return tuple(self.rows)

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        document = list(self.rows)  # GET
        await asyncio.sleep(self.delay)
        self.rows = document + [m for m in messages if is_new(m)]  # PUT


# ---------------------------------------------------------------- two turns of one agent at once


def one_tool_then_answer(messages: tuple[ChatMessage, ...]) -> Updates:
    """Each input makes one lookup call (an id of its own), then an answer."""
    asked = last_user(messages)
    if messages[-1].role is TOOL:
        return text(f"{asked} done")
    return calls((f"call-{asked}", "lookup", {"city": asked}))


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_a_turn_loading_while_another_turns_save_is_half_done_sees_no_torn_history() -> None:
    history = RowHistory(delay=0.01)
    client = Client(one_tool_then_answer)
    agent = Agent(client, tools=[lookup], history=history)
    first = asyncio.ensure_future(outcome_of(agent.send("A")))
    await wait_until(lambda: len(history.rows) >= 2)  # "A" and its call saved, not the result
    second = asyncio.ensure_future(outcome_of(agent.send("B")))
    outcomes = await asyncio.gather(first, second)
    assert isinstance(outcomes[0], AgentResponse)
    for request in client.sent:
        assert problems(request) == [], [(m.role.value, m.content) for m in request]
    assert problems(history.rows) == []


@pytest.mark.timeout(30)
@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["rows", "document"])
async def test_two_turns_saving_at_once_neither_interleave_nor_lose_a_turn(kind: str) -> None:
    history = RowHistory() if kind == "rows" else DocumentHistory()
    both_called = asyncio.Event()
    waiting: list[str] = []

    @tool
    async def wait(tag: str) -> str:
        """Wait for the other turn's call."""
        waiting.append(tag)
        if len(waiting) == 2:
            both_called.set()
        await both_called.wait()
        return f"waited {tag}"

    def respond(messages: tuple[ChatMessage, ...]) -> Updates:
        asked = last_user(messages)
        if messages[-1].role is TOOL:
            return text(f"{asked} done")
        return calls((f"call-{asked}", "wait", {"tag": asked}))

    client = Client(respond)
    agent = Agent(client, tools=[wait], history=history)
    outcomes = await asyncio.gather(outcome_of(agent.send("A")), outcome_of(agent.send("B")))
    assert all(isinstance(o, AgentResponse) for o in outcomes), outcomes
    rows = history.rows
    assert problems(rows) == [], [(m.role.value, m.content) for m in rows]
    assert sorted(m.content for m in rows if m.role is MessageRole.USER) == ["A", "B"]
    assert len(rows) == 8  # each turn whole: input, call, result, answer


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_an_approval_given_to_one_turn_never_approves_another_turns_call() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    release_b = asyncio.Event()

    async def respond(messages: tuple[ChatMessage, ...]) -> Updates:
        asked = last_user(messages)
        if messages[-1].role is TOOL:
            return text(f"{asked} done")
        if asked == "B":
            await release_b.wait()
            return calls(("functions.remove:0", "remove", {"path": "/etc/passwd"}))
        return calls(("functions.remove:0", "remove", {"path": "/tmp/a"}))

    agent = Agent(Client(respond), tools=[remove], approver=answers)

    def requests(result: AgentResponseResult) -> list[ToolApprovalRequestEvent]:
        return [e for e in result.events if isinstance(e, ToolApprovalRequestEvent)]

    def ui_for_a(result: AgentResponseResult) -> None:
        for event in requests(result):  # the user approves what turn A asks
            answers.on_next(ToolApprovalResponse(event.call_id, True))
            release_b.set()

    def ui_for_b(result: AgentResponseResult) -> None:
        for event in requests(result):  # and refuses what turn B asks
            answers.on_next(ToolApprovalResponse(event.call_id, False, "not that one"))

    async def turn(prompt: str, ui: Callable[[AgentResponseResult], None]) -> AgentResponse:
        try:
            return await agent.run(prompt).pipe(rx.do_action(ui), aggregate())
        finally:
            release_b.set()  # (turn A refused or over: turn B goes on)

    turn_b = asyncio.ensure_future(outcome_of(turn("B", ui_for_b)))
    await asyncio.sleep(0.02)  # turn B's first LLM call is under way
    turn_a = await outcome_of(turn("A", ui_for_a))
    response_b = await turn_b
    assert "/etc/passwd" not in RAN  # the user said no to it
    # (an overlapping turn may be refused, with a clear error, rather than run)
    if isinstance(turn_a, AgentResponse):
        assert turn_a.tool_messages[0].content == "removed /tmp/a"
    else:
        assert isinstance(turn_a, RuntimeError | RafrxError), turn_a
    assert isinstance(response_b, AgentResponse), response_b
    assert response_b.tool_messages[0].is_error
    assert "not that one" in response_b.tool_messages[0].content


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_a_tool_running_a_nested_turn_of_its_own_agent_does_not_deadlock() -> None:
    """An agent used as its own sub-agent: the nested turn runs while the outer one
    waits on its tool (whatever orders overlapping turns must not lock the whole turn)."""
    history = InMemoryHistoryProvider()
    holder: list[Agent] = []

    @tool
    async def ask(question: str) -> str:
        """Ask the agent itself."""
        response = await holder[0].send(question)
        return response.text

    def respond(messages: tuple[ChatMessage, ...]) -> Updates:
        asked = last_user(messages)
        if messages[-1].role is TOOL and asked == "outer":
            return text(f"outer got {messages[-1].content}")
        if messages[-1].role is TOOL:
            return text(f"inner got {messages[-1].content}")
        if asked == "outer":
            return calls(("o1", "ask", {"question": "inner"}))
        return calls(("i1", "lookup", {"city": "Oslo"}))

    client = Client(respond)
    agent = Agent(client, tools=[ask, lookup], history=history)
    holder.append(agent)
    response = await asyncio.wait_for(agent.send("outer"), GUARD)
    assert response.text == "outer got inner got Oslo: sun"
    assert problems(history.messages) == []
    assert [m.content for m in history.messages if m.role is MessageRole.USER] == [
        "inner",
        "outer",
    ]
    for request in client.sent:
        assert problems(request) == []


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_overlapping_turns_over_http_each_send_valid_requests(
    llm_server: LLMServer,
) -> None:
    """Three turns of one agent at once on one client, each with a tool step: every
    request on the wire follows its API and every turn is saved whole."""
    server = llm_server

    @server.script
    def answer(request: Any) -> Reply:
        if request.last_role == "tool":
            return Reply(text="done", delay=0.001)
        asked = json.dumps(request.messages[-1])
        city = next(c for c in ("Oslo", "Rome", "Lima") if c in asked)
        return Reply(tool_calls=[ToolCallSpec("lookup", {"city": city})], delay=0.001)

    history = InMemoryHistoryProvider()
    async with CLIENTS["anthropic"](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        await asyncio.wait_for(
            asyncio.gather(*(agent.send(c) for c in ("Oslo", "Rome", "Lima"))), GUARD
        )
        assert problems(history.messages) == []
        await asyncio.wait_for(agent.send("Oslo again"), GUARD)
    for request in server.requests:
        assert wire_problems(request) == []
    assert len(history.messages) == 4 * 4


# ---------------------------------------------------------------- one run() observable, reused


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_one_run_observable_subscribed_twice_at_once_runs_two_whole_turns() -> None:
    counter = iter(range(100))

    def respond(messages: tuple[ChatMessage, ...]) -> Updates:
        if messages[-1].role is TOOL:
            return text(f"answer to {messages[-1].tool_call_id}")
        return calls((f"c{next(counter)}", "lookup", {"city": "Oslo"}))

    history = InMemoryHistoryProvider()
    client = Client(respond)
    stream = Agent(client, tools=[lookup], history=history).run("Weather?")
    one, two = await asyncio.wait_for(
        asyncio.gather(stream.pipe(aggregate()), stream.pipe(aggregate())), GUARD
    )
    assert {one.text, two.text} == {"answer to c0", "answer to c1"}
    assert len(client.sent) == 4
    assert problems(history.messages) == []
    assert [m.content for m in history.messages if m.role is MessageRole.USER] == ["Weather?"] * 2
    assert RAN == ["Oslo", "Oslo"]


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_resubscribing_after_an_error_runs_a_fresh_turn_and_keeps_the_first_partial() -> None:
    attempts: list[int] = []

    def respond(messages: tuple[ChatMessage, ...]) -> Updates:
        if messages[-1].role is TOOL:
            attempts.append(len(attempts))
            if len(attempts) == 1:
                return [u.TextDelta("It is"), u.Error("overloaded", error_type="overloaded")]
            return text("Sunny.")
        return calls((f"c{len(attempts)}", "lookup", {"city": "Oslo"}))

    history = InMemoryHistoryProvider()
    client = Client(respond)
    stream = Agent(client, tools=[lookup], history=history).run("Weather?")
    with pytest.raises(ProviderError) as failed:
        await asyncio.wait_for(stream.pipe(aggregate()), GUARD)
    first_partial = failed.value.partial
    assert history.messages == ()
    again = await asyncio.wait_for(stream.pipe(aggregate()), GUARD)
    assert again.text == "Sunny."
    assert failed.value.partial is first_partial
    assert first_partial is not None
    assert first_partial.text == "It is"
    assert [m.tool_call_id for m in first_partial.tool_messages] == ["c0"]
    assert [m.tool_call_id for m in again.tool_messages] == ["c1"]
    assert problems(history.messages) == []
    assert [m.content for m in history.messages] == ["Weather?", "", "Oslo: sun", "Sunny."]


# ---------------------------------------------------------------- slow and failing saves


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_a_stopped_turns_failing_save_is_logged_and_the_next_turn_at_once_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    history = RowHistory(delay=0.02, fail_after=0)
    client = Client(one_tool_then_answer)
    agent = Agent(client, tools=[lookup], history=history)
    task = asyncio.ensure_future(agent.send("first"))
    await asyncio.wait_for(history.saving.wait(), GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    history.fail_after = None  # the database is back for the next turn
    with caplog.at_level(logging.ERROR, logger="rafrx.agent"):
        response = await asyncio.wait_for(agent.send("second"), GUARD)
    assert response.text == "second done"
    assert "saving a stopped turn's history failed" in caplog.text
    assert [m.content for m in client.sent[-2] if m.role is MessageRole.USER] == ["second"]
    assert [m.content for m in history.rows if m.role is MessageRole.USER] == ["second"]
    assert problems(history.rows) == []


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_after_a_save_failed_half_way_the_next_turn_sends_a_valid_request() -> None:
    history = RowHistory(delay=0.001, fail_after=2)
    client = Client(one_tool_then_answer)
    agent = Agent(client, tools=[lookup], history=history)
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(agent.send("first"), GUARD)
    history.fail_after = None
    outcome = await outcome_of(agent.send("second"))
    if isinstance(outcome, Exception):  # refused: clearly, and before sending anything
        assert isinstance(outcome, ValueError | RafrxError), outcome
        assert len(client.sent) == 2
    else:
        assert problems(client.sent[-2]) == [], [(m.role.value, m.content) for m in client.sent[-2]]


# ---------------------------------------------------------------- histories a provider refuses


def _call(call_id: str) -> ChatMessage:
    return ChatMessage.assistant_with_tools("", [ToolCall(call_id, "lookup", {"city": "Oslo"})])


BAD_HISTORIES: dict[str, list[ChatMessage]] = {
    # a result whose call is gone (the call's row lost, or trimmed away)
    "result-without-call": [
        ChatMessage.user("Weather in Oslo?"),
        ChatMessage.tool("Oslo: sun", "call_gone"),
        ChatMessage.assistant("Sunny in Oslo."),
        ChatMessage.user("Thanks."),
        ChatMessage.assistant("You're welcome."),
    ],
    # a call whose result was never saved, then the talk went on
    "call-without-result": [
        ChatMessage.user("Weather in Oslo?"),
        _call("call_lost"),
        ChatMessage.user("Hello?"),
        ChatMessage.assistant("Sorry, sunny."),
    ],
    # a turn cut off after its call (a crash during the save)
    "call-without-result-at-end": [ChatMessage.user("Weather in Oslo?"), _call("call_lost")],
    # the result saved after a later message
    "result-after-another-message": [
        ChatMessage.user("Weather in Oslo?"),
        _call("call_late"),
        ChatMessage.user("Hello?"),
        ChatMessage.tool("Oslo: sun", "call_late"),
        ChatMessage.assistant("Sunny."),
    ],
}
BAD_IDS = {
    "result-without-call": "call_gone",
    "call-without-result": "call_lost",
    "call-without-result-at-end": "call_lost",
    "result-after-another-message": "call_late",
}


@pytest.mark.timeout(30)
@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("kind", "fmt"),
    [
        (kind, fmt)
        for kind in sorted(BAD_HISTORIES)
        for fmt in sorted(CLIENTS)
        # (the Responses API takes an output anywhere after its call)
        if (kind, fmt) != ("result-after-another-message", "openai-responses")
    ],
)
async def test_a_loaded_history_the_provider_would_refuse_is_repaired_or_refused(
    llm_server: LLMServer, fmt: str, kind: str
) -> None:
    server = llm_server
    server.enqueue(Reply(text="ok"))
    history = InMemoryHistoryProvider(BAD_HISTORIES[kind])
    async with CLIENTS[fmt](server.url, "k") as client:
        outcome = await outcome_of(Agent(client, tools=[lookup], history=history).send("Rome?"))
    if isinstance(outcome, Exception):  # refused: clearly, naming the call, sending nothing
        assert isinstance(outcome, ValueError | RafrxError), outcome
        assert BAD_IDS[kind] in str(outcome)
        assert server.requests == []
    else:
        (request,) = server.requests
        assert wire_problems(request) == [], request.messages


@pytest.mark.timeout(30)
@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
async def test_a_loaded_history_reusing_call_ids_is_sent_with_unique_ids(
    llm_server: LLMServer, fmt: str
) -> None:
    """rafrx.messages documents it: Anthropic and the Responses API refuse one id for
    two calls, so each later call gets a fresh id (and its result with it)."""
    server = llm_server
    server.enqueue(Reply(text="ok"))
    step = [_call("functions.lookup:0"), ChatMessage.tool("Oslo: sun", "functions.lookup:0")]
    history = InMemoryHistoryProvider(
        [
            ChatMessage.user("Oslo?"),
            *step,
            ChatMessage.assistant("Sunny."),
            *step,
            ChatMessage.assistant("Still sunny."),
        ]
    )
    async with CLIENTS[fmt](server.url, "k") as client:
        await asyncio.wait_for(Agent(client, tools=[lookup], history=history).send("Rome?"), GUARD)
    (request,) = server.requests
    assert wire_problems(request) == []


# ---------------------------------------------------------------- context, instructions, tools


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_a_slow_huge_context_provider_serves_each_overlapping_turn_its_own_context() -> None:
    class Facts:
        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            asked = last_user(messages)
            await asyncio.sleep(0.03 if asked == "A" else 0.001)  # A's facts come last
            return [ChatMessage.system(f"facts for {asked}: " + "x" * 1_000_000)]

    history = InMemoryHistoryProvider()
    client = Client(one_tool_then_answer)
    agent = Agent(client, tools=[lookup], history=history, context_providers=[Facts()])
    outcomes = await asyncio.gather(outcome_of(agent.send("A")), outcome_of(agent.send("B")))
    assert [o.text for o in outcomes if isinstance(o, AgentResponse)] == ["A done", "B done"]
    for request in client.sent:
        (context,) = [m for m in request if m.source is CONTEXT]
        assert context.content.startswith(f"facts for {last_user(request)}: ")
        assert problems(request) == []
    assert all(m.source is not CONTEXT for m in history.messages)
    assert not any(len(m.content) > 1000 for m in history.messages)


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_instructions_changed_mid_turn_apply_from_the_next_turn_only() -> None:
    holder: list[Agent] = []

    @tool
    def switch(style: str) -> str:
        """Change the agent's instructions."""
        holder[0].instructions = f"Answer {style}."
        return "switched"

    def respond(messages: tuple[ChatMessage, ...]) -> Updates:
        if messages[-1].role is TOOL or last_user(messages) == "again":
            return text("ok")
        return calls(("c1", "switch", {"style": "in French"}))

    client = Client(respond)
    agent = Agent(client, tools=[switch], instructions="Answer briefly.")
    holder.append(agent)
    await asyncio.wait_for(agent.send("go"), GUARD)
    await asyncio.wait_for(agent.send("again"), GUARD)
    systems = [[m.content for m in r if m.role is MessageRole.SYSTEM] for r in client.sent]
    # a turn's requests keep one prefix; the change shows in the next turn
    assert systems == [["Answer briefly."], ["Answer briefly."], ["Answer in French."]]
    assert client.sent[1][: len(client.sent[0])] == client.sent[0]


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_tools_reassigned_mid_turn_are_offered_and_run_from_the_next_llm_call() -> None:
    holder: list[Agent] = []

    @tool
    def forecast(city: str) -> str:
        """Tomorrow's weather."""
        RAN.append(f"forecast {city}")
        return f"{city}: rain tomorrow"

    @tool
    def unlock() -> str:
        """Make the forecast tool available."""
        holder[0].tools = (*holder[0].tools, forecast)
        return "unlocked"

    steps = iter(
        [
            calls(("c1", "unlock", {}), ("c2", "forecast", {"city": "Oslo"})),
            calls(("c3", "forecast", {"city": "Oslo"})),
            text("Rain tomorrow."),
        ]
    )
    client = Client(lambda messages: next(steps))
    agent = Agent(client, tools=[unlock])
    holder.append(agent)
    response = await asyncio.wait_for(agent.send("Forecast?"), GUARD)
    by_id = {m.tool_call_id: m for m in response.tool_messages}
    assert by_id["c1"].content == "unlocked"
    assert by_id["c2"].is_error  # not offered in that call: not found
    assert "unknown tool 'forecast'" in by_id["c2"].content
    assert by_id["c3"].content == "Oslo: rain tomorrow"
    assert client.tools == [("unlock",), ("unlock", "forecast"), ("unlock", "forecast")]
    assert RAN == ["forecast Oslo"]


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_tools_reassigned_mid_turn_with_a_clashing_name_are_refused_where_assigned() -> None:
    """The assignment itself raises (the setter checks names, as the constructor does),
    so the tool that made it fails with that error, the model reads it, and the turn
    goes on with the tools it had."""
    holder: list[Agent] = []
    history = InMemoryHistoryProvider()

    @tool(name="lookup")
    def other_lookup(city: str) -> str:
        """Another tool of the same name."""
        return "?"

    @tool
    def add_clash() -> str:
        """Add a tool whose name clashes."""
        holder[0].tools = (*holder[0].tools, other_lookup)
        return "added"

    steps = iter([calls(("c1", "add_clash", {})), text("Could not add it."), text("fine")])
    client = Client(lambda messages: next(steps))
    agent = Agent(client, tools=[lookup, add_clash], history=history)
    holder.append(agent)
    response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert response.text == "Could not add it."
    (result,) = [m for m in history.messages if m.tool_call_id == "c1"]
    assert result.is_error
    assert "two tools are named 'lookup'" in result.content
    assert [t.name for t in agent.tools] == ["lookup", "add_clash"]
    response = await asyncio.wait_for(agent.send("again"), GUARD)
    assert response.text == "fine"
    assert problems(client.sent[-1]) == []
    assert problems(history.messages) == []


# ---------------------------------------------------------------- the max_steps boundary


@pytest.mark.timeout(30)
@pytest.mark.asyncio
@pytest.mark.parametrize("max_steps", [1, 2, 4])
async def test_tools_in_all_but_the_last_allowed_call_then_an_answer_succeeds(
    max_steps: int,
) -> None:
    steps = iter(
        [calls((f"c{i}", "lookup", {"city": f"city{i}"})) for i in range(max_steps - 1)]
        + [text("Answered.")]
    )
    history = InMemoryHistoryProvider()
    client = Client(lambda messages: next(steps))
    agent = Agent(client, tools=[lookup], history=history, max_steps=max_steps)
    response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert response.text == "Answered."
    assert len(client.sent) == max_steps
    assert len(history.messages) == 1 + 2 * (max_steps - 1) + 1
    assert problems(history.messages) == []


@pytest.mark.timeout(30)
@pytest.mark.asyncio
@pytest.mark.parametrize("max_steps", [1, 3])
async def test_tools_in_exactly_max_steps_calls_fail_with_the_whole_partial_turn(
    max_steps: int,
) -> None:
    def respond(messages: tuple[ChatMessage, ...]) -> Updates:
        if last_user(messages) == "next":
            return text("fresh")
        n = sum(m.role is TOOL for m in messages)
        return calls((f"c{n}", "lookup", {"city": f"city{n}"}), say=f"step {n}. ")

    history = InMemoryHistoryProvider([user("earlier"), ChatMessage.assistant("hi")])
    client = Client(respond)
    agent = Agent(client, tools=[lookup], history=history, max_steps=max_steps)
    stream = agent.run("loop")
    errors: list[MaxStepsExceeded] = []
    for _ in range(2):  # re-subscribing runs the turn again: its own error and partial
        with pytest.raises(MaxStepsExceeded) as failed:
            await asyncio.wait_for(stream.pipe(aggregate()), GUARD)
        errors.append(failed.value)
    assert len(client.sent) == 2 * max_steps
    assert errors[0] is not errors[1]
    for error in errors:
        partial = error.partial
        assert partial is not None
        assert partial.interrupted
        assert f"max_steps={max_steps}" in str(error)
        assert partial.text == "".join(f"step {n}. " for n in range(max_steps))
        assert [m.tool_call_id for m in partial.tool_messages] == [
            f"c{n}" for n in range(max_steps)
        ]
        assert len(partial.turn_transcript) == 2 * max_steps
        assert problems(partial.turn_transcript) == []
    ran = [f"city{n}" for n in range(max_steps)]
    assert [*ran, *ran] == RAN
    assert [m.content for m in history.messages] == ["earlier", "hi"]  # nothing saved
    await asyncio.wait_for(agent.send("next"), GUARD)
    assert [m.content for m in client.sent[-1]] == ["earlier", "hi", "next"]
    assert problems(history.messages) == []


# ---------------------------------------------------------------- tools shared by agents


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_one_stateful_tool_shared_by_two_agents_running_at_once() -> None:
    class Counter:
        def __init__(self) -> None:
            self.calls: list[str] = []

        @tool
        async def count(self, tag: str) -> str:
            """Count a call."""
            self.calls.append(tag)
            await asyncio.sleep(0.01)
            return f"{tag} is call #{self.calls.index(tag) + 1} of {len(self.calls)}"

    shared = Counter().count
    histories = [InMemoryHistoryProvider(), InMemoryHistoryProvider()]

    def respond(messages: tuple[ChatMessage, ...]) -> Updates:
        asked = last_user(messages)
        if messages[-1].role is TOOL:
            return text(messages[-1].content)
        return calls(*((f"{asked}{i}", "count", {"tag": f"{asked}{i}"}) for i in range(3)))

    agents = [Agent(Client(respond), tools=[shared], history=h) for h in histories]
    one, two = await asyncio.wait_for(
        asyncio.gather(agents[0].send("a"), agents[1].send("b")), GUARD
    )
    for response, tag in ((one, "a"), (two, "b")):
        assert [m.tool_call_id for m in response.tool_messages] == [f"{tag}{i}" for i in range(3)]
        assert all(m.content.startswith(m.tool_call_id or "?") for m in response.tool_messages)
    for history in histories:
        assert problems(history.messages) == []
    assert all(m.content.endswith("of 6") for m in (*one.tool_messages, *two.tool_messages))


# ---------------------------------------------------------------- cancelling send() anywhere


class PhaseHistory(RowHistory):
    """A :class:`RowHistory` whose load takes a while, signalling its start."""

    def __init__(self, loading: asyncio.Event, saving: asyncio.Event) -> None:
        super().__init__(delay=0.01)
        self.loading = loading
        self.saving = saving

    async def load(self) -> Sequence[ChatMessage]:
        self.loading.set()
        await asyncio.sleep(0.01)
        return await super().load()


class Phases:
    """A turn whose every await point is slow enough to be caught, and says which it is in."""

    NAMES = ("load", "context", "step1", "tool", "step2", "save", "save-mid")

    def __init__(self) -> None:
        self.events = {name: asyncio.Event() for name in self.NAMES}
        self.history = PhaseHistory(self.events["load"], self.events["save"])

        @tool
        async def slow_lookup(city: str) -> str:
            """Look a city up, slowly."""
            self.events["tool"].set()
            await asyncio.sleep(0.02)
            return f"{city}: sun"

        self.tool = slow_lookup

    async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        self.events["context"].set()
        await asyncio.sleep(0.01)
        return [ChatMessage.system("It is Monday.")]

    async def respond(self, messages: tuple[ChatMessage, ...]) -> Updates:
        asked = last_user(messages)
        if asked != "first":
            return text(f"{asked} done")
        self.events["step2" if messages[-1].role is TOOL else "step1"].set()
        await asyncio.sleep(0.01)
        if messages[-1].role is TOOL:
            return text("first done")
        return calls(
            ("c1", "slow_lookup", {"city": "Oslo"}), ("c2", "slow_lookup", {"city": "Rome"})
        )

    async def reached(self, name: str) -> None:
        if name == "save-mid":
            await wait_until(lambda: len(self.history.rows) >= 2)
        else:
            await asyncio.wait_for(self.events[name].wait(), GUARD)


async def _cancel_then_next_turn(
    phases: Phases, cancel: Callable[[Agent], Awaitable[None]]
) -> None:
    """Cancel a turn (as ``cancel`` does), start the next at once, then check both."""
    client = Client(phases.respond)
    agent = Agent(client, tools=[phases.tool], history=phases.history, context_providers=[phases])
    await cancel(agent)
    response = await asyncio.wait_for(agent.send("second"), GUARD)  # no pause in between
    assert response.text == "second done"
    rows = phases.history.rows
    assert problems(rows) == [], [(m.role.value, m.content) for m in rows]
    users = [m.content for m in rows if m.role is MessageRole.USER]
    assert users in (["second"], ["first", "second"])
    if users == ["first", "second"]:  # the first turn saved whole, before the second loaded
        roles = [m.role.value for m in rows[:6]]
        assert roles == ["user", "assistant", "tool", "tool", "assistant", "user"]
        assert "first done" in [m.content for m in client.sent[-1]]
    for request in client.sent:
        assert problems(request) == [], [(m.role.value, m.content) for m in request]


@pytest.mark.timeout(30)
@pytest.mark.asyncio
@pytest.mark.parametrize("phase", Phases.NAMES)
async def test_cancelling_send_at_each_await_point_leaves_history_valid(
    phase: str, no_task_leak: None
) -> None:
    phases = Phases()

    async def cancel(agent: Agent) -> None:
        task = asyncio.ensure_future(agent.send("first"))
        await phases.reached(phase)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    await _cancel_then_next_turn(phases, cancel)


@pytest.mark.timeout(30)
@pytest.mark.asyncio
@pytest.mark.parametrize("timeout", [0, 0.001, 0.005, 0.012, 0.025, 0.04, 0.06, 0.08, 0.11, 0.2])
async def test_send_under_wait_for_timeouts_leaves_history_valid(
    timeout: float, no_task_leak: None
) -> None:
    phases = Phases()

    async def cancel(agent: Agent) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(agent.send("first"), timeout)

    await _cancel_then_next_turn(phases, cancel)
