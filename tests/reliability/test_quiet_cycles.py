"""Quiet paths leave no reference cycles: successful streams, disposals, agent turns
with tools and approvals, the sync pipeline, retries and the notebook's live view are
freed by reference counting alone, without the cyclic garbage collector.

The companion of ``test_failure_cycles.py`` (whose helpers this file uses): each test
runs its scenario with the GC disabled (after a collection), lets the event loop
settle, drops every reference it holds (keeping weak references to the client, the
agent, the tools, the response ...), then checks that those are dead and, collecting
with ``gc.DEBUG_SAVEALL``, that no rafrx object and no frame of rafrx's code sits on a
strongly connected component of the cyclic garbage the scenario made.

That shape is :func:`assert_scenario_freed` (:func:`assert_client_scenario_freed` on a
fresh client): a scenario is a coroutine function, whose locals die when it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
import reactivex
from reactivex import operators as rx
from reactivex.subject import ReplaySubject, Subject

import rafrx
from rafrx import ChatMessage, FinishReason
from rafrx import operators as ops
from rafrx.agent import _RUNNING as RUNNING_TURNS
from rafrx.agent import Agent
from rafrx.errors import RafrxError
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.notebook import live, text_display
from rafrx.operators._execute_tools import _RUNNING as RUNNING_TOOLS
from rafrx.operators._reducer import ReducedObservable
from rafrx.sources import from_sse
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
)
from rafrx.testing import Fault, LLMServer, Replay, Reply, ToolCallSpec, render, render_events
from rafrx.tools import Tool, ToolApprovalResponse, tool
from tests.reliability.test_failure_cycles import (
    FAST,
    KEY,
    Seen,
    assert_freed,
    count_rafrx_objects,
    eventually,
    gc_off,
    rafrx_cycles,
    settle,
)

USER = [ChatMessage.user("Weather in Paris and Rome?")]
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
CALLS = (
    ToolCallSpec("weather", {"city": "Paris"}, id="call_paris"),
    ToolCallSpec("weather", {"city": "Rome"}, id="call_rome"),
)
#: Reasoning, text and two parallel tool calls.
RICH = Reply(
    reasoning="The user wants two forecasts.",
    text="Let me look both up.",
    tool_calls=CALLS,
    chunk_size=5,
)
ANSWER = Reply(text="Sunny in both.", chunk_size=4)
#: A long, paced reply: disposed long before its end.
SLOW = Reply(text="slowly " * 200, chunk_size=3, delay=0.002)
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False)
#: How a test stops a stream: dispose of its subscription, or cancel the task collecting it.
STOPS = ["dispose", "cancel-collect"]

#: A scenario: it runs with the GC off and keeps (weakly) in ``Seen`` what must die.
Scenario = Callable[[Seen], Awaitable[object]]
#: A scenario on a client (made before it, closed after it).
ClientScenario = Callable[[LLMClient, Seen], Awaitable[object]]


def make_client(kind: str, server: LLMServer, **kwargs: Any) -> LLMClient:
    return CLIENTS[kind](server.url, KEY, model="m", timeouts=FAST, **kwargs)


def check_rich(response: rafrx.AgentResponse) -> None:
    assert response.text == RICH.text
    assert response.reasoning_text == RICH.reasoning
    assert [c.arguments for c in response.tool_calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert response.finish_reason is FinishReason.TOOL_CALLS


def keep_rich(response: rafrx.AgentResponse, seen: Seen) -> None:
    """Check that ``response`` is RICH's, then hold it only weakly."""
    check_rich(response)
    seen.keep("response", response)


def assert_no_error(seen: Seen) -> None:
    assert seen.error_type is None, (seen.error_type, seen.message)


# ---------------------------------------------------------------- the shape of every test


async def assert_scenario_freed(scenario: Scenario, then: Scenario | None = None) -> None:
    """Run ``scenario`` with the GC off (then ``then``, once the scenario's locals are
    gone), let the loop settle, and assert that all it kept is dead without the GC and
    that no rafrx object sits on cyclic garbage."""
    async with gc_off():
        seen = Seen()
        await scenario(seen)
        if then is not None:
            await then(seen)
        await settle()
        assert_freed(seen.refs)


async def closed(client: LLMClient, seen: Seen) -> None:
    """Close the client, then hold it only weakly."""
    await client.aclose()
    seen.keep("client", client)


async def assert_client_scenario_freed(
    server: LLMServer,
    kind: str,
    replies: Sequence[Reply | Fault | Replay],
    use: ClientScenario,
    *,
    then: Scenario | None = None,
    **client_options: Any,
) -> None:
    """:func:`assert_scenario_freed` of ``use`` on a fresh client of ``kind`` (made with
    ``client_options``), closed after it; ``server`` answers ``replies``."""

    async def scenario(seen: Seen) -> None:
        server.enqueue(*replies)
        client = make_client(kind, server, **client_options)
        await use(client, seen)
        await closed(client, seen)

    await assert_scenario_freed(scenario, then)


async def wait_for_event(event: asyncio.Event) -> None:
    """Wait for ``event``, 10 seconds at the most."""
    async with asyncio.timeout(10):
        await event.wait()


def at_the_third(action: Callable[[], object]) -> Callable[[Any], None]:
    """An ``on_next`` that runs ``action`` when its third item comes."""
    count = 0

    def counted(_: Any) -> None:
        nonlocal count
        count += 1
        if count == 3:
            action()

    return counted


async def cancel(task: asyncio.Future[Any], seen: Seen) -> None:
    """Cancel ``task``, which must end cancelled; then hold it only weakly."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
    seen.keep("task", task)


async def stop(
    source: reactivex.Observable[Any],
    how: str,
    ready: Callable[[], Awaitable[object]],
    seen: Seen,
) -> None:
    """Subscribe to ``source`` ("dispose") or collect its response in a task
    ("cancel-collect"); once ``ready()`` returns, dispose of the subscription or cancel
    the task."""
    if how == "dispose":
        subscription = source.subscribe(on_error=seen.caught)
        async with asyncio.timeout(10):
            await ready()
        subscription.dispose()
    else:
        task = asyncio.ensure_future(rafrx.collect_agent_response(source))
        async with asyncio.timeout(10):
            await ready()
        await cancel(task, seen)


# ---------------------------------------------------------------- consumers


async def observe_all(source: reactivex.Observable[Any], seen: Seen) -> int:
    """Subscribe with callbacks that keep nothing but a weak reference to the last item,
    until the stream ends; how many items came."""
    ended = asyncio.Event()
    count = 0

    def on_next(item: Any) -> None:
        nonlocal count
        count += 1
        seen.keep("last item", item)

    def on_error(error: Exception) -> None:
        seen.caught(error)
        ended.set()

    subscription = source.subscribe(on_next, on_error, ended.set)
    try:
        await wait_for_event(ended)
    finally:
        subscription.dispose()
    assert_no_error(seen)
    return count


async def subscribe_updates(client: LLMClient, seen: Seen) -> None:
    assert await observe_all(client.stream(USER), seen) > 5


async def subscribe_results(client: LLMClient, seen: Seen) -> None:
    assert await observe_all(client.stream(USER).pipe(ops.convert()), seen) > 5


async def subscribe_aggregate(client: LLMClient, seen: Seen) -> None:
    assert await observe_all(client.stream(USER).pipe(ops.convert(), ops.aggregate()), seen) == 1
    # (the last item is the response)


async def collect(client: LLMClient, seen: Seen) -> None:
    keep_rich(await rafrx.collect_agent_response(client.stream(USER).pipe(ops.convert())), seen)


CONSUMERS: dict[str, ClientScenario] = {
    "subscribe-updates": subscribe_updates,
    "subscribe-results": subscribe_results,
    "subscribe-aggregate": subscribe_aggregate,
    "collect_agent_response": collect,
}


# ---------------------------------------------------------------- successful streams


@pytest.mark.asyncio
@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("kind", list(CLIENTS))
async def test_a_successful_stream_is_freed_without_the_gc(
    llm_server: LLMServer, kind: str, consumer: str
) -> None:
    """Reasoning, text and two parallel tool calls, read to the end: the client, the
    items and the response die by reference counting."""
    await assert_client_scenario_freed(llm_server, kind, [RICH], CONSUMERS[consumer])


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", list(CLIENTS))
async def test_a_client_dropped_after_a_successful_call_closes_its_session_without_the_gc(
    llm_server: LLMServer, kind: str
) -> None:
    """A client dropped (not closed) after a successful call: its session closes on the
    loop at once, not at the next GC."""
    async with gc_off():
        seen = Seen()
        llm_server.enqueue(RICH)
        client = make_client(kind, llm_server)
        await collect(client, seen)
        (session, _), *_ = client._sessions._owned.values()
        seen.keep("client", client)
        del client
        is_closed = await eventually(lambda: session.closed)
        session = None  # (held by the lambda's cell: let go of it)
        connections = await eventually(lambda: llm_server.open_connections == 0)
        alive = sorted(name for name, ref in seen.refs.items() if ref() is not None)
        report = "\n  ".join(rafrx_cycles()) or "none"
        assert is_closed, (
            f"the session stays open until the GC; alive: {alive}; cycles:\n  {report}"
        )
        assert connections, f"{llm_server.open_connections} connection(s) left open"
        assert not alive, f"alive until the GC runs: {alive}; cycles:\n  {report}"


# ---------------------------------------------------------------- disposal mid-stream


async def dispose_in_on_next(client: LLMClient, seen: Seen) -> None:
    """Dispose from the observer's own ``on_next``, at the third update."""
    done = asyncio.Event()
    box: list[Any] = []

    def dispose() -> None:
        box.pop().dispose()
        done.set()

    box.append(client.stream(USER).subscribe(at_the_third(dispose), seen.caught))
    await wait_for_event(done)
    box.clear()


async def dispose_from_outside(client: LLMClient, seen: Seen) -> None:
    """Dispose from the consumer's task, once three updates came."""
    three = asyncio.Event()
    results = client.stream(USER).pipe(ops.convert())
    subscription = results.subscribe(at_the_third(three.set), seen.caught)
    await wait_for_event(three)
    subscription.dispose()


async def take_three(client: LLMClient, seen: Seen) -> None:
    """``take(3)``: it disposes its source after the third update."""
    count = await observe_all(client.stream(USER).pipe(rx.take(3)), seen)
    assert count == 3


async def collect_take(client: LLMClient, seen: Seen) -> None:
    """``collect_agent_response`` of ``convert(), take(3)``: a response of three chunks."""
    results = client.stream(USER).pipe(ops.convert(), rx.take(3))
    response = await rafrx.collect_agent_response(results)
    assert response.text.startswith("slo")
    seen.keep("response", response)


async def cancel_collect(client: LLMClient, seen: Seen) -> None:
    """Cancel the task awaiting ``collect_agent_response``, once three updates came."""
    three = asyncio.Event()
    counted = rx.do_action(at_the_third(three.set))
    await stop(client.stream(USER).pipe(counted, ops.convert()), "cancel-collect", three.wait, seen)


DISPOSERS: dict[str, ClientScenario] = {
    "dispose-in-on_next": dispose_in_on_next,
    "dispose-from-outside": dispose_from_outside,
    "take(3)": take_three,
    "collect-take(3)": collect_take,
    "cancel-collect": cancel_collect,
}


@pytest.mark.asyncio
@pytest.mark.parametrize("how", list(DISPOSERS))
@pytest.mark.parametrize("kind", list(CLIENTS))
async def test_a_stream_disposed_mid_way_is_freed_without_the_gc(
    llm_server: LLMServer, kind: str, how: str
) -> None:
    """A stream stopped after a few updates: its connection closes, and the client and
    everything of the call die by reference counting."""

    async def disposed(client: LLMClient, seen: Seen) -> None:
        await DISPOSERS[how](client, seen)
        assert_no_error(seen)
        assert await eventually(lambda: llm_server.open_connections == 0)

    await assert_client_scenario_freed(llm_server, kind, [SLOW], disposed)


# ---------------------------------------------------------------- retries


def _overloaded_in_band() -> Replay:
    """An Anthropic stream that starts, then reports ``overloaded_error`` in an event."""
    start = render_events(Reply(text="x"), "anthropic", {})[0]
    overloaded = (
        b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
        b'"message": "Overloaded"}}\n\n'
    )
    return Replay(start + overloaded)


#: A first attempt failing retryably: the client kind, and the failure.
FIRST_ATTEMPTS: dict[str, tuple[str, Callable[[], Reply | Fault | Replay]]] = {
    "http-429": ("openai-chat", lambda: Fault.status(429, retry_after=0)),
    "http-500": ("openai-chat", lambda: Fault.status(500)),
    "anthropic-overloaded-in-band": ("anthropic", _overloaded_in_band),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("consumer", ["subscribe-results", "collect_agent_response"])
@pytest.mark.parametrize("first", list(FIRST_ATTEMPTS))
async def test_a_stream_retried_then_successful_is_freed_without_the_gc(
    llm_server: LLMServer, first: str, consumer: str
) -> None:
    """A first attempt failing retryably, the second answering: the error of the first
    attempt, the client and the response die by reference counting."""
    kind, failure = FIRST_ATTEMPTS[first]

    async def retried(client: LLMClient, seen: Seen) -> None:
        await CONSUMERS[consumer](client, seen)
        assert llm_server.request_count == 2

    await assert_client_scenario_freed(
        llm_server, kind, [failure(), RICH], retried, retry=FAST_RETRY
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("how", STOPS)
async def test_a_stream_stopped_while_waiting_to_retry_is_freed_without_the_gc(
    llm_server: LLMServer, how: str
) -> None:
    """An HTTP 503, then the stream stopped during the backoff before its retry: no
    second request, and the first attempt's error, the client and the call die by
    reference counting."""

    async def backoff_begun() -> None:
        assert await eventually(lambda: llm_server.request_count == 1)
        await asyncio.sleep(0.05)  # (the error read, the backoff begun)

    async def stopped(client: LLMClient, seen: Seen) -> None:
        updates = client.stream(USER)
        source = updates if how == "dispose" else updates.pipe(ops.convert())
        await stop(source, how, backoff_begun, seen)
        await settle()
        assert_no_error(seen)
        assert llm_server.request_count == 1

    await assert_client_scenario_freed(
        llm_server,
        "openai-chat",
        [Fault.status(503), RICH],
        stopped,
        retry=RetryPolicy(initial_backoff=5.0),
    )


# ---------------------------------------------------------------- one client, several calls


@pytest.mark.asyncio
@pytest.mark.parametrize("consumer", ["subscribe", "collect_agent_response"])
async def test_a_client_closed_mid_stream_is_freed_without_the_gc(
    llm_server: LLMServer, consumer: str
) -> None:
    """``aclose()`` while a healthy stream runs: the stream ends with a TransportError
    ("client closed"), and the error, the client and the call die by reference counting."""

    async def closed_mid_stream(seen: Seen) -> None:
        llm_server.enqueue(SLOW)
        client = make_client("anthropic", llm_server)
        three = asyncio.Event()
        source = client.stream(USER).pipe(rx.do_action(at_the_third(three.set)))
        if consumer == "subscribe":
            subscription = source.subscribe(on_error=seen.caught)
            await wait_for_event(three)
            await closed(client, seen)
            subscription.dispose()
        else:
            task = asyncio.ensure_future(rafrx.collect_agent_response(source.pipe(ops.convert())))
            await wait_for_event(three)
            await closed(client, seen)
            try:
                await task
            except RafrxError as error:
                seen.caught(error)
            del task  # (its error's traceback holds this frame: no cycle through it)
        assert seen.error_type is not None
        assert seen.error_type.__name__ == "TransportError"

    await assert_scenario_freed(closed_mid_stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", list(CLIENTS))
async def test_concurrent_successful_streams_on_one_client_are_freed_without_the_gc(
    llm_server: LLMServer, kind: str
) -> None:
    """Five calls at once on one client, each with tool calls: everything dies by
    reference counting once they are done."""

    async def five_at_once(client: LLMClient, seen: Seen) -> None:
        responses = await asyncio.gather(
            *[
                rafrx.collect_agent_response(client.stream(USER).pipe(ops.convert()))
                for _ in range(5)
            ]
        )
        for n, response in enumerate(responses):
            check_rich(response)
            seen.keep(f"response {n}", response)

    await assert_client_scenario_freed(llm_server, kind, [RICH] * 5, five_at_once)


# ---------------------------------------------------------------- the sync pipeline


async def chunked(body: bytes, size: int) -> AsyncIterator[bytes]:
    """``body`` in chunks of ``size`` bytes, one a loop iteration."""
    for at in range(0, len(body), size):
        await asyncio.sleep(0)
        yield body[at : at + size]


def _pipelines() -> dict[str, Callable[[bytes, str, Seen], Awaitable[None]]]:
    async def subscribe(body: bytes, dialect: str, seen: Seen) -> None:
        source = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate())
        assert type(source) is ReducedObservable
        responses: list[rafrx.AgentResponse] = []
        source.subscribe(responses.append, seen.caught)
        keep_rich(responses.pop(), seen)

    async def run(body: bytes, dialect: str, seen: Seen) -> None:
        source = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate())
        assert isinstance(source, ReducedObservable)
        keep_rich(source.run(), seen)

    async def rx_run(body: bytes, dialect: str, seen: Seen) -> None:
        """Not over a SyncSource: ``ReducedObservable.run`` is reactivex's ``run``."""
        updates = from_sse(body, dialect).pipe(rx.to_list()).run()
        source = reactivex.from_iterable(updates).pipe(ops.convert(), ops.aggregate())
        assert isinstance(source, ReducedObservable)
        keep_rich(source.run(), seen)

    async def take(body: bytes, dialect: str, seen: Seen) -> None:
        results: list[Any] = []
        from_sse(body, dialect).pipe(ops.convert(), rx.take(2)).subscribe(
            results.append, seen.caught
        )
        assert len(results) == 2
        seen.keep("last item", results.pop())

    async def collect_sync(body: bytes, dialect: str, seen: Seen) -> None:
        results = from_sse(body, dialect).pipe(ops.convert())
        keep_rich(await rafrx.collect_agent_response(results), seen)

    async def collect_async_iterable(body: bytes, dialect: str, seen: Seen) -> None:
        results = from_sse(chunked(body, 64), dialect).pipe(ops.convert())
        keep_rich(await rafrx.collect_agent_response(results), seen)

    async def async_iterable_take(body: bytes, dialect: str, seen: Seen) -> None:
        results = from_sse(chunked(body, 16), dialect).pipe(ops.convert(), rx.take(2))
        assert await observe_all(results, seen) == 2

    return {
        "subscribe-aggregate": subscribe,
        "ReducedObservable.run": run,
        "rx-source-run": rx_run,
        "take(2)": take,
        "collect_agent_response": collect_sync,
        "collect-async-iterable": collect_async_iterable,
        "async-iterable-take(2)": async_iterable_take,
    }


PIPELINES = _pipelines()


@pytest.mark.asyncio
@pytest.mark.parametrize("how", list(PIPELINES))
@pytest.mark.parametrize("dialect", list(CLIENTS))
async def test_a_sync_pipeline_is_freed_without_the_gc(dialect: str, how: str) -> None:
    """``from_sse(body).pipe(convert(), aggregate())`` and its kin, over a whole body:
    the response and every object of the pipeline die by reference counting."""
    body = render(RICH, dialect)  # type: ignore[arg-type]

    async def pipeline(seen: Seen) -> None:
        await PIPELINES[how](body, dialect, seen)
        assert_no_error(seen)

    await assert_scenario_freed(pipeline)


# ---------------------------------------------------------------- agent turns with tools


class Tools:
    """Fresh tools per test (module-level ones would never die), and what they saw."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = asyncio.Event()
        self.release = threading.Event()

    def sync(self) -> Tool:
        def weather(city: str) -> str:
            """The forecast for a city."""
            self.calls += 1
            return f"{city}: sunny"

        return tool(weather)

    def async_(self, *, requires_approval: bool = False) -> Tool:
        async def weather(city: str) -> str:
            """The forecast for a city."""
            await asyncio.sleep(0)
            self.calls += 1
            return f"{city}: sunny"

        return tool(weather, requires_approval=requires_approval)

    def hanging_async(self) -> Tool:
        started = self.started

        async def weather(city: str) -> str:
            """The forecast for a city (never comes)."""
            started.set()
            await asyncio.sleep(30)
            return city

        return tool(weather)

    def blocking_sync(self, loop: asyncio.AbstractEventLoop) -> Tool:
        started, release = self.started, self.release

        def weather(city: str) -> str:
            """The forecast for a city (blocks until released)."""
            loop.call_soon_threadsafe(started.set)
            release.wait(5)
            return city

        return tool(weather)


def _approvers() -> dict[str, tuple[bool, Callable[[], Any]]]:
    """Approvers (made anew for each test: a module-level one never dies), and whether
    they approve the calls."""

    def sync_yes() -> Any:
        def approve(event: ToolApprovalRequestEvent) -> bool:
            return True

        return approve

    def async_yes() -> Any:
        async def approve(event: ToolApprovalRequestEvent) -> bool:
            await asyncio.sleep(0)
            return True

        return approve

    def async_no() -> Any:
        async def deny(event: ToolApprovalRequestEvent) -> ToolApprovalResponse:
            return ToolApprovalResponse(event.call_id, False, "not today")

        return deny

    def replayed(approved: bool) -> ReplaySubject[ToolApprovalResponse]:
        answers: ReplaySubject[ToolApprovalResponse] = ReplaySubject()
        for call in CALLS:
            assert call.id is not None
            answers.on_next(ToolApprovalResponse(call.id, approved))
        return answers

    return {
        "sync-approver-yes": (True, sync_yes),
        "async-approver-yes": (True, async_yes),
        "async-approver-no": (False, async_no),
        "subject-yes": (True, lambda: replayed(True)),
        "subject-no": (False, lambda: replayed(False)),
    }


APPROVERS = _approvers()


async def agent_send(agent: Agent, seen: Seen) -> rafrx.AgentResponse:
    return await agent.send("Weather in Paris and Rome?")


async def agent_run(agent: Agent, seen: Seen) -> rafrx.AgentResponse:
    """``Agent.run`` subscribed as a UI would, answering approval requests when the
    approver is a plain ``Subject``."""
    answers = agent.approver if type(agent.approver) is Subject else None
    aggregator = ops.aggregate(agent.id)
    responses: list[rafrx.AgentResponse] = []
    ended = asyncio.Event()

    def on_next(result: rafrx.AgentResponseResult) -> None:
        if answers is not None:
            for event in result.events:
                if isinstance(event, ToolApprovalRequestEvent):
                    answers.on_next(ToolApprovalResponse(event.call_id, True))

    def on_error(error: Exception) -> None:
        seen.caught(error)
        ended.set()

    subscription = (
        agent.run("Weather in Paris and Rome?")
        .pipe(rx.do_action(on_next), aggregator)
        .subscribe(responses.append, on_error, ended.set)
    )
    try:
        await wait_for_event(ended)
    finally:
        subscription.dispose()
    assert_no_error(seen)
    return responses.pop()


AGENT_CONSUMERS: dict[str, Callable[[Agent, Seen], Awaitable[rafrx.AgentResponse]]] = {
    "Agent.send": agent_send,
    "Agent.run-subscribe": agent_run,
}


def _tool_setups() -> dict[str, Callable[[Tools], dict[str, Any]]]:
    setups: dict[str, Callable[[Tools], dict[str, Any]]] = {
        "sync-tool": lambda t: {"tools": [t.sync()]},
        "async-tool": lambda t: {"tools": [t.async_()]},
        "async-tool-eager": lambda t: {"tools": [t.async_()], "eager_tools": True},
        "subject-approver-answered-live": lambda t: {
            "tools": [t.async_(requires_approval=True)],
            "approver": Subject(),
        },
    }
    for name, (_, make) in APPROVERS.items():
        setups[name] = lambda t, make=make: {
            "tools": [t.async_(requires_approval=True)],
            "approver": make(),
        }
    return setups


TOOL_SETUPS = _tool_setups()


def _expected_calls(setup: str) -> int:
    if setup in APPROVERS:
        return 2 if APPROVERS[setup][0] else 0
    return 2


def keep_agent(agent: Agent, options: dict[str, Any], seen: Seen) -> None:
    """Hold the agent, its tools and its approver only weakly."""
    for t in agent.tools:
        seen.keep(f"tool {t.name}", t)
    if options.get("approver") is not None:
        seen.keep("approver", options["approver"])
    seen.keep("agent", agent)


def agent_turn(setup: str, consumer: str) -> ClientScenario:
    """A turn whose model calls two tools at once (set up as ``setup``), then answers."""

    async def turn(client: LLMClient, seen: Seen) -> None:
        tools = Tools()
        options = TOOL_SETUPS[setup](tools)
        agent = Agent(client, **options)
        response = await AGENT_CONSUMERS[consumer](agent, seen)
        assert response.text == RICH.text + ANSWER.text
        assert len(response.tool_messages) == 2
        assert tools.calls == _expected_calls(setup)
        seen.keep("response", response)
        keep_agent(agent, options, seen)

    return turn


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("setup", "consumer"),
    [
        (setup, consumer)
        for setup in TOOL_SETUPS
        for consumer in AGENT_CONSUMERS
        # (only a subscriber sees the approval requests, to answer them live)
        if not (setup == "subject-approver-answered-live" and consumer == "Agent.send")
    ],
)
async def test_an_agent_turn_with_tools_is_freed_without_the_gc(
    llm_server: LLMServer, setup: str, consumer: str
) -> None:
    """A turn whose model calls two tools at once (run, approved or denied), then
    answers: the agent, its tools, its approver, the client and the response die by
    reference counting."""
    turn = agent_turn(setup, consumer)
    await assert_client_scenario_freed(llm_server, "openai-chat", [RICH, ANSWER], turn)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["anthropic", "openai-responses"])
async def test_an_agent_turn_with_tools_on_other_clients_is_freed_without_the_gc(
    llm_server: LLMServer, kind: str
) -> None:
    """The same turn (two approved async tool calls) over Anthropic and Responses."""
    turn = agent_turn("async-approver-yes", "Agent.send")
    await assert_client_scenario_freed(llm_server, kind, [RICH, ANSWER], turn)


@pytest.mark.asyncio
@pytest.mark.parametrize("consumer", list(AGENT_CONSUMERS))
async def test_agent_turns_with_a_history_are_freed_without_the_gc(
    llm_server: LLMServer, consumer: str
) -> None:
    """Two turns over an InMemoryHistoryProvider (the first calls tools): the agent, the
    history, the client and the responses die by reference counting."""

    async def two_turns(client: LLMClient, seen: Seen) -> None:
        tools = Tools()
        history = InMemoryHistoryProvider()
        agent = Agent(client, tools=[tools.sync()], history=history, instructions="Be brief.")
        first = await AGENT_CONSUMERS[consumer](agent, seen)
        assert first.text == RICH.text + ANSWER.text
        second = await AGENT_CONSUMERS[consumer](agent, seen)
        assert second.text == "You asked about the weather."
        # user, assistant with the calls, two results, answer; user, answer
        assert len(history.messages) == 7
        seen.keep("first", first)
        seen.keep("second", second)
        seen.keep("history", history)
        seen.keep("agent", agent)

    replies = [RICH, ANSWER, Reply(text="You asked about the weather.")]
    await assert_client_scenario_freed(llm_server, "openai-chat", replies, two_turns)


# ---------------------------------------------------------------- turns stopped during a tool


def _stopped_tool(tools: Tools, what: str) -> dict[str, Any]:
    """The agent options of a turn that stops at ``what``: a tool running (async, or
    sync on a worker thread), or an approval awaited (an async approver, a Subject)."""
    if what == "async-tool":
        return {"tools": [tools.hanging_async()]}
    if what == "sync-tool":
        return {"tools": [tools.blocking_sync(asyncio.get_running_loop())]}
    weather = tools.async_(requires_approval=True)
    if what == "subject-approval":

        def requested(result: rafrx.AgentResponseResult) -> None:
            if any(isinstance(e, ToolApprovalRequestEvent) for e in result.events):
                tools.started.set()

        return {"tools": [weather], "approver": Subject(), "watch": requested}
    started = tools.started

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        started.set()
        await asyncio.sleep(30)
        return True

    return {"tools": [weather], "approver": approver}


def stopped_during_tool(server: LLMServer, what: str, how: str) -> ClientScenario:
    """A turn stopped (as ``how``) once it runs its tool or awaits its approval (as
    ``what``); then the tool let go."""

    async def turn(client: LLMClient, seen: Seen) -> None:
        tools = Tools()
        options = _stopped_tool(tools, what)
        watch = options.pop("watch", lambda _: None)
        agent = Agent(client, **options)
        await stop(agent.run("Weather?").pipe(rx.do_action(watch)), how, tools.started.wait, seen)
        tools.release.set()
        await settle()
        assert server.request_count == 1
        assert tools.calls == 0
        keep_agent(agent, options, seen)

    return turn


async def turns_ended(seen: Seen) -> None:
    """No error, and no turn nor tool call left running."""
    assert_no_error(seen)
    assert await eventually(lambda: not RUNNING_TURNS and not RUNNING_TOOLS, timeout=2.0)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", STOPS)
@pytest.mark.parametrize("what", ["async-tool", "sync-tool", "async-approval", "subject-approval"])
async def test_a_turn_stopped_while_a_tool_runs_is_freed_without_the_gc(
    llm_server: LLMServer, what: str, how: str
) -> None:
    """A turn disposed of (or the task collecting it cancelled) while its tool runs or
    its approval is awaited: once the tool is done, the agent, the tool, the approver
    and the client die by reference counting."""
    await assert_client_scenario_freed(
        llm_server,
        "openai-chat",
        [Reply(tool_calls=[CALLS[0]]), ANSWER],
        stopped_during_tool(llm_server, what, how),
        then=turns_ended,
    )


@pytest.mark.asyncio
async def test_a_turn_taken_short_is_freed_without_the_gc(llm_server: LLMServer) -> None:
    """``Agent.run(...).pipe(take(2))``: the turn disposed of from inside its first LLM
    call's stream; the agent, its tool and the client die by reference counting."""

    async def taken_short(client: LLMClient, seen: Seen) -> None:
        agent = Agent(client, tools=[Tools().async_()])
        assert await observe_all(agent.run("Weather?").pipe(rx.take(2)), seen) == 2
        assert await eventually(lambda: not RUNNING_TURNS)
        assert await eventually(lambda: llm_server.open_connections == 0)
        keep_agent(agent, {}, seen)

    await assert_client_scenario_freed(llm_server, "openai-chat", [SLOW], taken_short)


# ---------------------------------------------------------------- the notebook's live view


def _shown(client: LLMClient, what: str) -> reactivex.Observable[Any]:
    """What a live view shows: a client's raw updates (which ``as_results`` converts
    through a Subject), its converted results, or an agent's turn."""
    if what == "updates":
        return client.stream(USER)
    if what == "results":
        return client.stream(USER).pipe(ops.convert())
    return Agent(client, tools=[Tools().async_()]).run("Weather?")


def _view(source: reactivex.Observable[Any]) -> Any:
    return live(source, display=text_display(io.StringIO()), interval=0.001)


def live_to_the_end(what: str) -> ClientScenario:
    """A live view of ``what``, awaited to the end."""

    async def watched(client: LLMClient, seen: Seen) -> None:
        view = _view(_shown(client, what))
        response = await view
        if what == "agent":
            assert response.text == RICH.text + ANSWER.text
        else:
            check_rich(response)
        assert view.state.status == "done"
        seen.keep("view", view)
        seen.keep("response", response)

    return watched


def live_stopped(what: str, how: str) -> ClientScenario:
    """A live view of ``what``, disposed of (or its await cancelled) after three items."""

    async def watched(client: LLMClient, seen: Seen) -> None:
        view = _view(_shown(client, what))
        assert await eventually(lambda: view.state.items >= 3)
        if how == "dispose":
            view.dispose()
        else:  # (``await view`` in a cell the user interrupts)
            task = asyncio.ensure_future(view._wait())
            await asyncio.sleep(0)
            await cancel(task, seen)
        assert view.done
        assert view.state.status == "stopped"
        seen.keep("view", view)

    return watched


async def assert_live_view_freed(
    server: LLMServer, replies: Sequence[Reply | Fault | Replay], watched: ClientScenario
) -> None:
    """:func:`assert_client_scenario_freed` of a live view, once the closed client's
    connections are all closed."""

    async def disconnected(seen: Seen) -> None:
        assert await eventually(lambda: server.open_connections == 0)

    await assert_client_scenario_freed(server, "openai-chat", replies, watched, then=disconnected)


@pytest.mark.asyncio
@pytest.mark.parametrize("what", ["updates", "results", "agent"])
async def test_a_live_view_of_a_stream_that_ended_is_freed_without_the_gc(
    llm_server: LLMServer, what: str
) -> None:
    """``rafrx.notebook.live`` with a text display (headless), awaited to the end: the
    view, the response and the client die by reference counting."""
    await assert_live_view_freed(llm_server, [RICH, ANSWER], live_to_the_end(what))


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["dispose", "cancel-await"])
async def test_a_live_view_of_updates_stopped_mid_stream_is_freed_without_the_gc(
    llm_server: LLMServer, how: str
) -> None:
    """A live view of a client's raw updates, disposed (or its await cancelled) after a
    few results: the view and the client die by reference counting."""
    await assert_live_view_freed(llm_server, [SLOW], live_stopped("updates", how))


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["dispose", "cancel-await"])
@pytest.mark.parametrize("what", ["results", "agent"])
async def test_a_live_view_of_results_stopped_mid_stream_is_freed_without_the_gc(
    llm_server: LLMServer, what: str, how: str
) -> None:
    """A live view of converted results or of an agent's turn (no Subject in between),
    disposed (or its await cancelled) after a few results: the view, the agent and the
    client die by reference counting."""
    await assert_live_view_freed(llm_server, [SLOW], live_stopped(what, how))


# ---------------------------------------------------------------- a long run


async def _execute_tools_call(client: LLMClient, server: LLMServer, weather: Tool) -> None:
    """One LLM call streaming two tool calls, run by ``execute_tools``."""
    server.enqueue(RICH)
    results = client.stream(USER, [weather]).pipe(ops.convert(), ops.execute_tools([weather]))
    response = await rafrx.collect_agent_response(results)
    assert len(response.tool_messages) == 2


async def _agent_turn(client: LLMClient, server: LLMServer, weather: Tool) -> None:
    """An agent turn of two LLM calls: two tool calls, then the answer."""
    server.enqueue(RICH, ANSWER)
    response = await Agent(client, tools=[weather]).send("Weather in Paris and Rome?")
    assert len(response.tool_messages) == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("how", "calls_per_round"), [("execute_tools", 1), ("Agent.send", 2)], ids=["tools", "agent"]
)
async def test_150_successful_calls_with_tools_leave_no_growing_garbage(
    llm_server: LLMServer, how: str, calls_per_round: int
) -> None:
    """150 successful LLM calls on one client with the GC off, each streaming two tool
    calls that run (through ``execute_tools``, or in agent turns): the live rafrx objects
    after call 150 are no more than after call 50 (give or take 10)."""
    tools = Tools()
    weather = tools.async_()
    one = _execute_tools_call if how == "execute_tools" else _agent_turn
    counts: dict[int, int] = {}
    async with gc_off():
        client = make_client("openai-chat", llm_server)
        try:
            for n in range(calls_per_round, 151, calls_per_round):
                await one(client, llm_server, weather)
                if n in (50, 150):
                    await settle()
                    counts[n] = count_rafrx_objects()
        finally:
            await client.aclose()
        assert tools.calls == 2 * 150 // calls_per_round
        growth = counts[150] - counts[50]
        report = "\n  ".join(rafrx_cycles()[:3]) or "none"
        assert growth <= 10, (
            f"{growth} more live rafrx objects after 150 successful calls than after 50 "
            f"({counts}); cycles (first 3):\n  {report}"
        )
