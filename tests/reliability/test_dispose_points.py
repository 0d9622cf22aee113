"""Dispose or cancel at an arbitrary point, over real HTTP, and check that nothing
is left behind.

Each hypothesis example runs on a fresh event loop (``asyncio.run``) against a fresh
:class:`rafrx.testing.LLMServer`, and after the scenario the harness asserts:

* no asyncio task the scenario started is still pending (after a short settle);
* every connection the server saw is closed once the client is closed, and none is
  left open by a disposed call while the client is still open;
* nothing reached the loop's exception handler ("Task was destroyed but it is
  pending", "Unclosed client session", "Unclosed connection" ...), no unraisable
  exception and no ``ResourceWarning`` / ``RuntimeWarning`` was emitted;
* nothing hangs (every scenario runs under a timeout).

The scenarios also check the stream grammar seen by the subscriber (nothing after
dispose, at most one terminal event), side effects after dispose (no new request, no
tool started, no approver asked) and, for connections dropped at byte N, that the
error is a typed :class:`~rafrx.errors.RafrxError` whose ``.partial`` holds exactly
what was received (its text a prefix of the full text).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from reactivex import operators as rxops

from rafrx import Agent, ChatMessage
from rafrx import operators as ops
from rafrx.content import (
    TextContent,
    ToolCallingContent,
)
from rafrx.errors import IncompleteStream, RafrxError, StreamInterrupted
from rafrx.events import ToolApprovalRequestEvent
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.sources.clients import RetryPolicy
from rafrx.testing import (
    Fault,
    LLMServer,
    RecordedRequest,
    Reply,
    ServerResponse,
    ToolCallSpec,
    render,
)
from rafrx.tools import tool
from tests.reliability._support import CLIENTS

FORMATS = list(CLIENTS)

POINTS = settings(
    max_examples=6,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

#: Seconds tasks get to finish after the scenario before they count as leaked.
SETTLE = 1.0

TEXT = "".join(f"w{i} " for i in range(60))  # 60 distinct words


# ---------------------------------------------------------------- the harness


class Trouble:
    """What went wrong outside the scenario's own assertions."""

    def __init__(self) -> None:
        self.loop_errors: list[str] = []
        self.unraisable: list[str] = []
        self.warnings: list[str] = []

    def all(self) -> list[str]:
        return [*self.loop_errors, *self.unraisable, *self.warnings]


def _describe(context: dict[str, Any]) -> str:
    exc = context.get("exception")
    return f"{context.get('message')!r} {exc!r}" if exc is not None else repr(context["message"])


def run_checked(scenario: Callable[[], Awaitable[None]], timeout: float = 8.0) -> Trouble:
    """Run ``scenario`` on a fresh loop under a timeout; fail on leaks and warnings."""
    trouble = Trouble()
    old_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        trouble.unraisable.append(f"unraisable {unraisable.exc_value!r} in {unraisable.object!r}")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: trouble.loop_errors.append(_describe(ctx)))
        async with asyncio.timeout(timeout):
            await scenario()

    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            asyncio.run(main())
            gc.collect()
            gc.collect()
        trouble.warnings = [
            f"{w.category.__name__}: {w.message}"
            for w in caught
            if issubclass(w.category, ResourceWarning | RuntimeWarning)
        ]
    finally:
        sys.unraisablehook = old_hook
    assert not trouble.all(), trouble.all()
    return trouble


@asynccontextmanager
async def arena() -> AsyncIterator[LLMServer]:
    """A server; on exit (after the clients closed) no task may be left pending and
    no connection open."""
    async with LLMServer() as server:
        for _ in range(3):
            await asyncio.sleep(0)
        before = asyncio.all_tasks()
        yield server
        current = asyncio.current_task()
        started = {t for t in asyncio.all_tasks() - before if t is not current and not t.done()}
        if started:
            await asyncio.wait(started, timeout=SETTLE)
        leaked = [t for t in started if not t.done()]
        assert not leaked, f"tasks still pending after the scenario: {leaked}"
        await server.wait_connections_closed(timeout=2.0)


class Probe:
    """An observer recording everything, and anything that arrives after dispose."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.terminal: list[Any] = []
        self.late: list[Any] = []
        self.disposed = False
        self.subscription: Any = None
        self.ended = asyncio.get_running_loop().create_future()

    def _record(self, kind: str, value: Any) -> None:
        if self.disposed:
            self.late.append((kind, value))
            return
        if kind == "next":
            self.items.append(value)
        else:
            self.terminal.append((kind, value))
            if not self.ended.done():
                self.ended.set_result((kind, value))

    def on_next(self, value: Any) -> None:
        self._record("next", value)

    def on_error(self, error: Exception) -> None:
        self._record("error", error)

    def on_completed(self) -> None:
        self._record("completed", None)

    def subscribe(self, source: Any) -> Probe:
        self.subscription = source.subscribe(self.on_next, self.on_error, self.on_completed)
        return self

    def dispose(self) -> None:
        self.disposed = True
        self.subscription.dispose()

    def check_grammar(self) -> None:
        assert self.late == [], f"delivered after dispose: {self.late}"
        assert len(self.terminal) <= 1, self.terminal


def text_of(results: list[AgentResponseResult]) -> str:
    return "".join(c.text for r in results for c in r.contents if isinstance(c, TextContent))


async def until(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.002)


def check_calls(partial: AgentResponse, results: list[AgentResponseResult], reply: Reply) -> None:
    """The partial's tool calls are the calls seen starting, in order; each keeps the
    argument text received (a prefix of the call's full arguments)."""
    from rafrx.content import ToolCallArgsContent, ToolCallStartContent

    contents = [c for r in results for c in r.contents]
    started = [c.call_id for c in contents if isinstance(c, ToolCallStartContent)]
    assert [c.id for c in partial.tool_calls] == started
    full = [spec.arguments_json() for spec in reply.tool_calls]
    for n, call in enumerate(partial.tool_calls):
        received = "".join(
            c.args_delta
            for c in contents
            if isinstance(c, ToolCallArgsContent) and c.call_id == call.id
        )
        assert full[n].startswith(received), (full[n], received)
        if call.complete:
            assert call.arguments == reply.tool_calls[n].arguments
        else:
            assert call.raw_arguments == received, (call, received)


class Counting:
    """A client wrapper counting the LLM calls an agent *starts* (subscriptions), which,
    unlike the server's count, does not race with requests already in flight."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls = 0

    def stream(self, messages: Any, tools: Any = None) -> Any:
        import reactivex

        source = self.client.stream(messages, tools)

        def subscribe(observer: Any, scheduler: Any = None) -> Any:
            self.calls += 1
            return source.subscribe(observer, scheduler=scheduler)

        return reactivex.create(subscribe)


def replies() -> st.SearchStrategy[Reply]:
    """Replies with text, reasoning and tool calls, streamed in small pieces."""
    calls = st.lists(
        st.sampled_from(
            [
                ToolCallSpec("lookup", {"query": "rx streams"}),
                ToolCallSpec("lookup", {"query": "a" * 40}),
                ToolCallSpec("add", {"a": 1, "b": 2}),
            ]
        ),
        max_size=2,
    )
    return st.builds(
        Reply,
        text=st.sampled_from(["", TEXT[:40], TEXT, "héllo wörld 中文 😀 " * 3]),
        reasoning=st.sampled_from(["", "thinking hard about it"]),
        tool_calls=calls,
        chunk_size=st.integers(1, 9),
        delay=st.sampled_from([0.0, 0.001]),
    )


# ---------------------------------------------------------------- single calls


@POINTS
@given(fmt=st.sampled_from(FORMATS), reply=replies(), stop_after=st.integers(1, 80))
def test_dispose_a_client_pipeline_inside_on_next_after_n_results(
    fmt: str, reply: Reply, stop_after: int
) -> None:
    """client.stream() | convert() | tap | aggregate(), disposed from inside the n-th
    result: nothing more arrives, the connection closes, nothing leaks."""

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            server.enqueue(reply)
            results: list[AgentResponseResult] = []
            probe = Probe()

            def tap(result: AgentResponseResult) -> None:
                results.append(result)
                if len(results) == stop_after:
                    probe.dispose()

            source = client.stream([ChatMessage.user("go")]).pipe(
                ops.convert(), rxops.do_action(tap), ops.aggregate()
            )
            probe.subscribe(source)
            await until(lambda: probe.disposed or probe.ended.done())
            count = len(results)
            if probe.disposed:
                # closed, or (a body read whole before the dispose) idle in the pool
                await until(lambda: server.open_connections <= 1)
                await asyncio.sleep(0.02)
                assert len(results) == count  # nothing after dispose
                assert probe.items == []
                assert probe.terminal == []
            else:
                kind, value = await probe.ended
                assert kind == "completed", value
                assert isinstance(probe.items[0], AgentResponse)
                assert probe.items[0].text == reply.text
            probe.check_grammar()
            probe.dispose()  # after the end, or twice: a no-op
            probe.subscription.dispose()
            await asyncio.sleep(0.01)
            probe.check_grammar()

    run_checked(scenario)


@POINTS
@given(fmt=st.sampled_from(FORMATS), wait=st.floats(0.0, 0.25))
def test_dispose_a_client_pipeline_from_outside_at_a_random_time(fmt: str, wait: float) -> None:
    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            server.enqueue(Reply(text=TEXT, chunk_size=3, delay=0.002))
            results: list[AgentResponseResult] = []
            probe = Probe().subscribe(
                client.stream([ChatMessage.user("go")]).pipe(
                    ops.convert(), rxops.do_action(results.append), ops.aggregate()
                )
            )
            await asyncio.sleep(wait)
            finished = probe.ended.done()
            probe.dispose()
            count = len(results)
            if not finished:
                await server.wait_connections_closed(timeout=2.0)
            else:
                assert server.open_connections <= 1  # the idle keep-alive connection
            await asyncio.sleep(0.02)
            assert len(results) == count
            assert TEXT.startswith(text_of(results))
            probe.check_grammar()

    run_checked(scenario)


@POINTS
@given(
    fmt=st.sampled_from(FORMATS),
    stall_at=st.integers(0, 2000),
    wait=st.floats(0.0, 0.1),
)
def test_dispose_while_the_server_stalls(fmt: str, stall_at: int, wait: float) -> None:
    """The server goes silent after ``stall_at`` body bytes; dispose during the silence."""

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            reply = Reply(text=TEXT, chunk_size=4)
            body = render(reply, fmt)
            at = min(stall_at, len(body) - 1)
            server.enqueue(Fault.stall(30.0, after_bytes=at, body=reply))
            results: list[AgentResponseResult] = []
            probe = Probe().subscribe(
                client.stream([ChatMessage.user("go")]).pipe(
                    ops.convert(), rxops.do_action(results.append), ops.aggregate()
                )
            )
            await server.wait_requests(1)
            await asyncio.sleep(0.02 + wait)
            assert not probe.ended.done()
            start = time.monotonic()
            probe.dispose()
            await server.wait_connections_closed(timeout=2.0)
            assert time.monotonic() - start < 1.0
            assert TEXT.startswith(text_of(results))
            probe.check_grammar()
            assert probe.terminal == []

    run_checked(scenario)


@settings(POINTS, max_examples=4)
@given(
    fmt=st.sampled_from(FORMATS),
    wait_ms=st.integers(0, 90),
    status=st.sampled_from([429, 500, 503, 529]),
)
def test_dispose_during_a_retry_backoff_sends_nothing_more(
    fmt: str, wait_ms: int, status: int
) -> None:
    async def scenario() -> None:
        async with arena() as server:
            policy = RetryPolicy(max_attempts=3, initial_backoff=0.1, jitter=False)
            async with CLIENTS[fmt](server.url, "sk-x", retry=policy) as client:
                server.enqueue(Fault.status(status), Fault.status(status))
                probe = Probe().subscribe(
                    client.stream([ChatMessage.user("go")]).pipe(ops.convert(), ops.aggregate())
                )
                await server.wait_requests(1)
                await asyncio.sleep(wait_ms / 1000)
                sent = len(server.requests)
                probe.dispose()
                await asyncio.sleep(0.3)  # past every backoff (0.1 then 0.2 s)
                assert len(server.requests) == sent
                assert server.open_connections <= 1
                probe.check_grammar()
                assert probe.terminal == []

    run_checked(scenario)


@POINTS
@given(
    fmt=st.sampled_from(FORMATS),
    reply=replies(),
    fraction=st.floats(0.0, 1.0),
    reset=st.booleans(),
)
def test_a_connection_dropped_at_byte_n_fails_typed_with_the_partial_so_far(
    fmt: str, reply: Reply, fraction: float, reset: bool
) -> None:
    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            body = render(reply, fmt)
            cut = int(fraction * len(body))
            server.enqueue(Fault.drop_after(cut, body=reply, reset=reset))
            results: list[AgentResponseResult] = []
            probe = Probe().subscribe(
                client.stream([ChatMessage.user("go")]).pipe(
                    ops.convert(), rxops.do_action(results.append), ops.aggregate()
                )
            )
            kind, value = await asyncio.wait_for(probe.ended, 3.0)
            probe.check_grammar()
            if kind == "completed":
                assert probe.items[0].text == reply.text
                return
            assert isinstance(value, RafrxError), repr(value)
            assert isinstance(value, StreamInterrupted | IncompleteStream), repr(value)
            assert probe.items == []
            partial = value.partial
            assert partial is not None
            assert partial.interrupted
            assert partial.text == text_of(results)
            assert reply.text.startswith(partial.text)
            assert reply.reasoning.startswith(partial.reasoning_text or "")
            check_calls(partial, results, reply)

    run_checked(scenario)


# ---------------------------------------------------------------- agent turns


class Tools:
    """A sync and an async tool that record their runs and cancellations."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started: list[str] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []
        self.lock = threading.Lock()

        async def lookup(query: str) -> str:
            """Look something up, slowly."""
            self.started.append("lookup")
            try:
                await asyncio.sleep(self.seconds)
            except asyncio.CancelledError:
                self.cancelled.append("lookup")
                raise
            self.finished.append("lookup")
            return f"found {query}"

        def add(a: int, b: int) -> int:
            """Add two numbers, slowly (in a thread)."""
            with self.lock:
                self.started.append("add")
            time.sleep(min(self.seconds, 0.05))
            with self.lock:
                self.finished.append("add")
            return a + b

        self.lookup = tool(lookup)
        self.add = tool(add)
        self.all = [self.lookup, self.add]

    @property
    def running(self) -> int:
        return len(self.started) - len(self.finished) - len(self.cancelled)


def tool_loop(text: str = TEXT) -> Callable[[RecordedRequest], ServerResponse]:
    def script(request: RecordedRequest) -> ServerResponse:
        if request.last_role == "tool":
            return Reply(text=text, chunk_size=5, delay=0.001)
        calls = [ToolCallSpec("lookup", {"query": "rx"}), ToolCallSpec("add", {"a": 2, "b": 3})]
        return Reply(text="Let me look.", tool_calls=calls, chunk_size=4, delay=0.001)

    return script


@POINTS
@given(
    fmt=st.sampled_from(FORMATS),
    stop_after=st.integers(1, 60),
    seconds=st.sampled_from([0.0, 0.05, 0.3]),
    eager=st.booleans(),
)
def test_dispose_an_agent_turn_inside_on_next_after_n_results(
    fmt: str, stop_after: int, seconds: float, eager: bool
) -> None:
    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            server.script(tool_loop())
            tools = Tools(seconds)
            agent = Agent(counted, tools=tools.all, eager_tools=eager)
            probe = Probe()
            seen: list[AgentResponseResult] = []
            state: dict[str, Any] = {}

            def tap(result: AgentResponseResult) -> None:
                seen.append(result)
                if len(seen) == stop_after:
                    state["requests"] = counted.calls
                    state["started"] = len(tools.started)
                    probe.dispose()

            probe.subscribe(agent.run("Look things up.").pipe(rxops.do_action(tap)))
            await until(lambda: probe.disposed or probe.ended.done(), timeout=6.0)
            if not probe.disposed:
                kind, value = await probe.ended
                assert kind == "completed", value
                return
            count = len(seen)
            await until(lambda: tools.running == 0, timeout=2.0)
            await asyncio.sleep(0.05)
            assert len(seen) == count
            assert counted.calls == state["requests"]  # no LLM call after dispose
            assert len(tools.started) == state["started"]  # no tool started after dispose
            assert probe.terminal == []
            probe.check_grammar()
            await until(lambda: server.open_connections <= 1)

    run_checked(scenario)


@POINTS
@given(fmt=st.sampled_from(FORMATS), wait=st.floats(0.0, 0.1), sync_approver=st.booleans())
def test_dispose_an_agent_turn_during_an_approval_wait(
    fmt: str, wait: float, sync_approver: bool
) -> None:
    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            ran: list[str] = []
            asked: list[str] = []
            release = threading.Event()

            @tool(requires_approval=True)
            def delete(path: str) -> str:
                """Delete a file."""
                ran.append(path)
                return "deleted"

            async def async_approver(event: ToolApprovalRequestEvent) -> bool:
                asked.append(event.call_id)
                await asyncio.sleep(30)
                return True

            def blocking_approver(event: ToolApprovalRequestEvent) -> bool:
                asked.append(event.call_id)
                release.wait(5)
                return True

            def script(request: RecordedRequest) -> ServerResponse:
                if request.last_role == "tool":
                    return Reply(text="done")
                return Reply(tool_calls=[ToolCallSpec("delete", {"path": "/tmp/x"})])

            server.script(script)
            agent = Agent(
                counted,
                tools=[delete],
                approver=blocking_approver if sync_approver else async_approver,
            )
            probe = Probe().subscribe(agent.run("Delete it."))
            await until(lambda: bool(asked))
            await asyncio.sleep(wait)
            probe.dispose()
            release.set()
            await asyncio.sleep(0.1)
            assert ran == []  # approved after the dispose: still never run
            assert counted.calls == 1
            probe.check_grammar()
            assert probe.terminal == []
            requests = [
                e for r in probe.items for e in r.events if isinstance(e, ToolApprovalRequestEvent)
            ]
            assert len(requests) == 1

    run_checked(scenario)


@POINTS
@given(fmt=st.sampled_from(FORMATS), fraction=st.floats(0.0, 1.0), eager=st.booleans())
def test_an_agent_turn_cut_at_byte_n_fails_typed_and_cancels_its_tools(
    fmt: str, fraction: float, eager: bool
) -> None:
    """The first call (text then two tool calls) is cut at byte N: a typed error whose
    partial holds the text so far; no tool keeps running; no second call."""

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            first = Reply(
                text="Let me look.",
                tool_calls=[
                    ToolCallSpec("lookup", {"query": "rx"}),
                    ToolCallSpec("add", {"a": 2, "b": 3}),
                ],
                chunk_size=3,
                delay=0.001,
            )
            body = render(first, fmt)
            cut = int(fraction * len(body))

            def script(request: RecordedRequest) -> ServerResponse:
                if request.last_role == "tool":
                    return Reply(text="All done.")
                return Fault.drop_after(cut, body=first)

            server.script(script)
            tools = Tools(5.0)
            agent = Agent(counted, tools=tools.all, eager_tools=eager)
            seen: list[AgentResponseResult] = []
            probe = Probe().subscribe(agent.run("Look.").pipe(rxops.do_action(seen.append)))
            kind, value = await asyncio.wait_for(probe.ended, 4.0)
            probe.check_grammar()
            if kind == "completed":
                assert counted.calls == 2
                return
            assert isinstance(value, StreamInterrupted | IncompleteStream), repr(value)
            partial = value.partial
            assert partial is not None
            assert partial.interrupted
            assert partial.text == text_of(seen)
            assert "Let me look.".startswith(partial.text)
            assert counted.calls == 1
            await until(lambda: tools.running == 0, timeout=2.0)
            assert "lookup" not in tools.finished

    run_checked(scenario)


@POINTS
@given(
    fmt=st.sampled_from(FORMATS),
    fraction=st.floats(0.0, 1.0),
    reset=st.booleans(),
)
def test_an_agent_turn_cut_at_byte_n_of_its_second_call_keeps_the_tool_results(
    fmt: str, fraction: float, reset: bool
) -> None:
    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            answer = Reply(text=TEXT, chunk_size=7)
            body = render(answer, fmt)
            cut = int(fraction * len(body))

            def script(request: RecordedRequest) -> ServerResponse:
                if request.last_role == "tool":
                    return Fault.drop_after(cut, body=answer, reset=reset)
                return Reply(
                    text="Let me look.",
                    tool_calls=[
                        ToolCallSpec("lookup", {"query": "rx"}),
                        ToolCallSpec("add", {"a": 2, "b": 3}),
                    ],
                )

            server.script(script)
            tools = Tools(0.0)
            agent = Agent(counted, tools=tools.all)
            seen: list[AgentResponseResult] = []
            probe = Probe().subscribe(agent.run("Look.").pipe(rxops.do_action(seen.append)))
            kind, value = await asyncio.wait_for(probe.ended, 4.0)
            probe.check_grammar()
            if kind == "completed":
                assert text_of(seen) == "Let me look." + TEXT
                return
            assert isinstance(value, StreamInterrupted | IncompleteStream), repr(value)
            partial = value.partial
            assert partial is not None
            assert partial.interrupted
            assert partial.text == text_of(seen)
            assert ("Let me look." + TEXT).startswith(partial.text)
            assert sorted(m.content for m in partial.tool_messages) == ["5", "found rx"]
            assert [c.name for c in partial.tool_calls] == ["lookup", "add"]

    run_checked(scenario)


@settings(POINTS, max_examples=5)
@given(
    fmt=st.sampled_from(FORMATS),
    plan=st.lists(st.one_of(st.none(), st.floats(0.0, 0.15)), min_size=2, max_size=8),
)
def test_disposing_some_of_many_concurrent_streams_leaves_the_others_intact(
    fmt: str, plan: list[float | None]
) -> None:
    """Streams sharing one client (and its connection pool); those planned ``None`` run
    to the end and must get the whole text, the others are disposed at a random time."""

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            server.default = Reply(text=TEXT, chunk_size=4, delay=0.001)
            probes = [
                Probe().subscribe(
                    client.stream([ChatMessage.user("go")]).pipe(ops.convert(), ops.aggregate())
                )
                for _ in plan
            ]

            async def dispose_later(probe: Probe, wait: float) -> None:
                await asyncio.sleep(wait)
                probe.dispose()

            await asyncio.gather(
                *(dispose_later(p, w) for p, w in zip(probes, plan, strict=True) if w is not None)
            )
            for probe, wait in zip(probes, plan, strict=True):
                if wait is None:
                    kind, value = await asyncio.wait_for(probe.ended, 3.0)
                    assert kind == "completed", value
                    assert probe.items[0].text == TEXT
                probe.check_grammar()
            # then the pool still serves a new stream correctly
            again = Probe().subscribe(
                client.stream([ChatMessage.user("go")]).pipe(ops.convert(), ops.aggregate())
            )
            kind, value = await asyncio.wait_for(again.ended, 3.0)
            assert kind == "completed", value
            assert again.items[0].text == TEXT
            await until(lambda: server.open_connections <= len(plan) + 1)

    run_checked(scenario)


@POINTS
@given(fmt=st.sampled_from(FORMATS), wait=st.floats(0.0, 0.15), agent=st.booleans())
def test_dispose_from_another_thread(fmt: str, wait: float, agent: bool) -> None:
    """A UI thread disposes: the call still ends on its loop, closes its connection, and
    no request or tool starts afterwards."""

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            tools = Tools(0.05)
            if agent:
                server.script(tool_loop(TEXT * 3))
                source = Agent(counted, tools=tools.all).run("Look.")
            else:
                server.default = Reply(text=TEXT * 3, chunk_size=3, delay=0.001)
                source = client.stream([ChatMessage.user("go")]).pipe(ops.convert())
            probe = Probe().subscribe(source)
            await asyncio.sleep(wait)
            thread = threading.Thread(target=probe.dispose)
            thread.start()
            await asyncio.to_thread(thread.join)
            await asyncio.sleep(0.05)
            requests, started = counted.calls, len(tools.started)
            await until(lambda: server.open_connections <= 1)
            await until(lambda: tools.running == 0)
            await asyncio.sleep(0.1)
            assert counted.calls == requests
            assert len(tools.started) == started
            probe.check_grammar()
            assert probe.terminal == [] or probe.ended.done()

    run_checked(scenario)


class Boom(Exception):
    pass


@POINTS
@given(fmt=st.sampled_from(FORMATS), fail_at=st.integers(1, 60), agent=st.booleans())
def test_a_subscriber_raising_at_result_n_ends_the_stream_and_closes_it(
    fmt: str, fail_at: int, agent: bool
) -> None:
    """RELIABILITY #15: the subscriber's on_next raises; the stream reports it (once),
    closes the connection and leaves no task."""

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            tools = Tools(0.0)
            if agent:
                server.script(tool_loop())
                source = Agent(counted, tools=tools.all).run("Look.")
            else:
                server.default = Reply(text=TEXT, chunk_size=3, delay=0.001)
                source = client.stream([ChatMessage.user("go")]).pipe(ops.convert())
            seen: list[Any] = []
            errors: list[Exception] = []
            ended = asyncio.get_running_loop().create_future()

            def on_next(item: Any) -> None:
                seen.append(item)
                if len(seen) == fail_at:
                    raise Boom(f"at {fail_at}")

            def on_error(error: Exception) -> None:
                errors.append(error)
                if not ended.done():
                    ended.set_result(None)

            def on_completed() -> None:
                if not ended.done():
                    ended.set_result(None)

            source.subscribe(on_next, on_error, on_completed)
            await asyncio.wait_for(ended, 4.0)
            if len(seen) >= fail_at:
                assert len(errors) == 1
                assert isinstance(errors[0], Boom), repr(errors[0])
                count = len(seen)
                await until(lambda: server.open_connections <= 1)
                await asyncio.sleep(0.05)
                assert len(seen) == count
                requests = counted.calls
                await asyncio.sleep(0.05)
                assert counted.calls == requests
            else:
                assert errors == []

    run_checked(scenario)


@POINTS
@given(fmt=st.sampled_from(FORMATS), calls=st.integers(1, 3))
def test_dispose_on_seeing_the_approval_request_asks_no_one(fmt: str, calls: int) -> None:
    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            ran: list[str] = []
            asked: list[str] = []

            @tool(requires_approval=True)
            def delete(path: str) -> str:
                """Delete a file."""
                ran.append(path)
                return "deleted"

            async def approver(event: ToolApprovalRequestEvent) -> bool:
                asked.append(event.call_id)
                return True

            server.script(
                lambda r: (
                    Reply(text="ok")
                    if r.last_role == "tool"
                    else Reply(
                        tool_calls=[ToolCallSpec("delete", {"path": f"/{i}"}) for i in range(calls)]
                    )
                )
            )
            agent = Agent(counted, tools=[delete], approver=approver)
            probe = Probe()

            def tap(result: AgentResponseResult) -> None:
                if any(isinstance(e, ToolApprovalRequestEvent) for e in result.events):
                    probe.dispose()

            probe.subscribe(agent.run("Delete.").pipe(rxops.do_action(tap)))
            await until(lambda: probe.disposed or probe.ended.done())
            assert probe.disposed
            await asyncio.sleep(0.1)
            assert asked == []
            assert ran == []
            assert counted.calls == 1
            probe.check_grammar()

    run_checked(scenario)


# ---------------------------------------------------------------- rarer dispose points


@POINTS
@given(fmt=st.sampled_from(FORMATS), wait=st.floats(0.0, 0.1), answer_after=st.booleans())
def test_dispose_during_a_wait_for_an_observable_approver(
    fmt: str, wait: float, answer_after: bool
) -> None:
    from reactivex.subject import Subject

    from rafrx.tools import ToolApprovalResponse

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            ran: list[str] = []
            answers: Subject[ToolApprovalResponse] = Subject()

            @tool(requires_approval=True)
            def delete(path: str) -> str:
                """Delete a file."""
                ran.append(path)
                return "deleted"

            server.script(
                lambda r: (
                    Reply(text="ok")
                    if r.last_role == "tool"
                    else Reply(tool_calls=[ToolCallSpec("delete", {"path": "/x"}, id="call_1")])
                )
            )
            agent = Agent(counted, tools=[delete], approver=answers)
            probe = Probe().subscribe(agent.run("Delete."))
            await until(
                lambda: any(
                    isinstance(e, ToolApprovalRequestEvent) for r in probe.items for e in r.events
                )
            )
            await asyncio.sleep(wait)
            probe.dispose()
            if answer_after:
                answers.on_next(ToolApprovalResponse("call_1", True))
                answers.on_completed()
            await asyncio.sleep(0.05)
            assert ran == []
            assert counted.calls == 1
            assert answers.observers == []  # the approver's subscription was disposed
            probe.check_grammar()

    run_checked(scenario)


@settings(POINTS, max_examples=5)
@given(
    fmt=st.sampled_from(FORMATS),
    wait=st.floats(0.0, 0.15),
    stubborn=st.booleans(),
)
def test_dispose_around_a_tool_timeout(fmt: str, wait: float, stubborn: bool) -> None:
    """A tool with ``timeout=0.05`` that overruns (``stubborn``: it shields itself from
    cancellation for a while); the turn is disposed before, during or after the
    timeout. Nothing more arrives, and only the stubborn tool may finish later."""

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            events: list[str] = []

            @tool(timeout=0.05)
            async def slow(n: int) -> str:
                """Slow."""
                events.append("start")
                try:
                    await asyncio.sleep(0.3)
                except asyncio.CancelledError:
                    events.append("cancelled")
                    if not stubborn:
                        raise
                    await asyncio.sleep(0.1)
                events.append("end")
                return "done"

            server.script(
                lambda r: (
                    Reply(text="ok", delay=0.01, chunk_size=1)
                    if r.last_role == "tool"
                    else Reply(tool_calls=[ToolCallSpec("slow", {"n": 1})])
                )
            )
            probe = Probe().subscribe(Agent(counted, tools=[slow]).run("Go."))
            await until(lambda: "start" in events)
            await asyncio.sleep(wait)
            probe.dispose()
            count, requests = len(probe.items), counted.calls
            await asyncio.sleep(0.2)
            assert len(probe.items) == count
            assert counted.calls == requests
            probe.check_grammar()

    run_checked(scenario)


class SlowHistory:
    """A history provider whose load and save take a while."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.saved: list[list[ChatMessage]] = []
        self.saving = 0
        self.loads = 0

    async def load(self) -> list[ChatMessage]:
        self.loads += 1
        await asyncio.sleep(self.seconds)
        return [m for batch in self.saved for m in batch]

    async def save(self, messages: Any) -> None:
        self.saving += 1
        await asyncio.sleep(self.seconds)
        self.saved.append(list(messages))


@settings(POINTS, max_examples=4)
@given(fmt=st.sampled_from(FORMATS), wait=st.floats(0.0, 0.3))
def test_dispose_a_turn_with_slow_history_at_a_random_time(fmt: str, wait: float) -> None:
    """Loading, streaming, tools, saving: dispose anywhere. A save that began ends
    (the next turn sees it); a turn disposed before saving saves nothing; nothing is
    delivered after dispose; the next turn works."""

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            server.script(tool_loop(TEXT[:30]))
            history = SlowHistory(0.05)
            tools = Tools(0.02)
            agent = Agent(counted, tools=tools.all, history=history)
            probe = Probe().subscribe(agent.run("Look."))
            await asyncio.sleep(wait)
            began_saving = history.saving > 0
            finished = probe.ended.done()
            probe.dispose()
            await asyncio.sleep(0.15)
            probe.check_grammar()
            if finished:
                assert probe.terminal[0][0] == "completed"
            if began_saving:
                assert len(history.saved) == 1  # ran on to its end
            else:
                assert history.saved == []
            # the next turn waits for a save still running, then loads what it saved
            first, saved = counted.calls, bool(history.saved)
            next_turn = Probe().subscribe(agent.run("Again."))
            kind, value = await asyncio.wait_for(next_turn.ended, 3.0)
            assert kind == "completed", value
            # what the next turn sent holds the first turn's messages iff it was saved
            sent = str(server.requests[first].messages)
            assert ("Look." in sent) == saved, sent

    run_checked(scenario)


@POINTS
@given(fmt=st.sampled_from(FORMATS), wait=st.floats(0.0, 0.3))
def test_cancelling_agent_send_at_a_random_time(fmt: str, wait: float) -> None:
    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            counted = Counting(client)
            server.script(tool_loop(TEXT))
            tools = Tools(0.05)
            agent = Agent(counted, tools=tools.all)
            task = asyncio.create_task(agent.send("Look."))
            await asyncio.sleep(wait)
            cancelled = task.cancel()
            try:
                response = await task
            except asyncio.CancelledError:
                assert cancelled
            else:
                assert response.text.endswith(TEXT)
            requests, started = counted.calls, len(tools.started)
            await until(lambda: tools.running == 0)
            await asyncio.sleep(0.05)
            assert counted.calls == requests
            assert len(tools.started) == started
            await until(lambda: server.open_connections <= 1)

    run_checked(scenario)


@POINTS
@given(
    fmt=st.sampled_from(FORMATS),
    reply=replies(),
    fraction=st.floats(0.0, 1.0),
    fault=st.sampled_from(["idle", "garbage", "drop"]),
)
def test_a_fault_at_byte_n_gives_a_typed_error_with_the_partial_so_far(
    fmt: str, reply: Reply, fraction: float, fault: str
) -> None:
    from rafrx.sources.clients import Timeouts

    async def scenario() -> None:
        async with arena() as server:
            timeouts = Timeouts(idle=0.1)
            async with CLIENTS[fmt](server.url, "sk-x", timeouts=timeouts) as client:
                body = render(reply, fmt)
                cut = int(fraction * len(body))
                if fault == "idle":
                    server.enqueue(Fault.stall(3.0, after_bytes=cut, body=reply))
                elif fault == "garbage":
                    server.enqueue(Fault.garbage(b"{unparsable", at=cut, framed=False, body=reply))
                else:
                    server.enqueue(Fault.drop_after(cut, body=reply))
                results: list[AgentResponseResult] = []
                probe = Probe().subscribe(
                    client.stream([ChatMessage.user("go")]).pipe(
                        ops.convert(), rxops.do_action(results.append), ops.aggregate()
                    )
                )
                kind, value = await asyncio.wait_for(probe.ended, 3.0)
                probe.check_grammar()
                if kind == "completed":
                    response = probe.items[0]
                    assert response.text == reply.text or fault == "garbage"
                    return
                assert isinstance(value, RafrxError), repr(value)
                partial = value.partial
                assert partial is not None
                assert partial.interrupted
                assert partial.text == text_of(results)
                if fault != "garbage":
                    assert reply.text.startswith(partial.text)
                    check_calls(partial, results, reply)
                await until(lambda: server.open_connections <= 1)

    run_checked(scenario)


@POINTS
@given(fmt=st.sampled_from(FORMATS), fraction=st.floats(0.0, 1.0))
def test_an_in_band_error_after_content_keeps_the_partial_and_closes(
    fmt: str, fraction: float
) -> None:
    """Reply(finish=ERROR) streams part of the text and then the provider's error; the
    error is typed, the partial holds the text, and the connection is not left open."""
    from rafrx.response import FinishReason

    async def scenario() -> None:
        async with arena() as server, CLIENTS[fmt](server.url, "sk-x") as client:
            n = int(fraction * len(TEXT))
            server.enqueue(Reply(text=TEXT[:n], finish=FinishReason.ERROR, chunk_size=5))
            results: list[AgentResponseResult] = []
            probe = Probe().subscribe(
                client.stream([ChatMessage.user("go")]).pipe(
                    ops.convert(), rxops.do_action(results.append), ops.aggregate()
                )
            )
            kind, value = await asyncio.wait_for(probe.ended, 3.0)
            probe.check_grammar()
            if fmt == "openai-chat":  # a bare finish_reason "error": a response that says so
                assert kind == "completed", value
                assert probe.items[0].finish_reason == FinishReason.ERROR
                assert probe.items[0].text == TEXT[:n]
                return
            assert kind == "error", value
            assert isinstance(value, RafrxError), repr(value)
            partial = value.partial
            assert partial is not None
            assert partial.text == TEXT[:n] == text_of(results)
            assert partial.finish_reason == FinishReason.ERROR
            await until(lambda: server.open_connections <= 1)

    run_checked(scenario)


@settings(POINTS, max_examples=4, phases=[Phase.explicit, Phase.generate])  # (no slow shrinking)
@given(fmt=st.sampled_from(FORMATS), wait=st.floats(0.0, 0.2), agent=st.booleans())
def test_dispose_then_drop_an_unclosed_client_warns_about_nothing(
    fmt: str, wait: float, agent: bool
) -> None:
    """No ``async with``: the user disposes mid-turn and drops the client and agent.
    The connection must still close and no "Unclosed ..." warning may appear (the
    harness checks the loop handler, warnings and unraisable hooks)."""

    async def scenario() -> None:
        async with arena() as server:
            client = CLIENTS[fmt](server.url, "sk-x")
            tools = Tools(0.05)
            if agent:
                server.script(tool_loop(TEXT))
                source = Agent(client, tools=tools.all).run("Look.")
            else:
                server.default = Reply(text=TEXT, chunk_size=3, delay=0.002)
                source = client.stream([ChatMessage.user("go")]).pipe(ops.convert())
            probe = Probe().subscribe(source)
            await asyncio.sleep(wait)
            probe.dispose()
            del client, source, probe
            for _ in range(3):
                gc.collect()
                await asyncio.sleep(0.02)
            await until(lambda: server.open_connections <= 1)
            await until(lambda: tools.running == 0)

    run_checked(scenario)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("end", ["dispose", "complete"])
def test_dropping_a_client_after_a_converted_stream_warns_about_nothing(fmt: str, end: str) -> None:
    """The clean drop test_client_faults proves for ``client.stream()`` alone, with the
    documented pipeline ``client.stream().pipe(convert())``: after a dispose mid-stream
    or a completed call, dropping the client (no ``aclose()``) must not warn."""

    async def scenario() -> None:
        async with arena() as server:
            server.default = Reply(text=TEXT, chunk_size=2, delay=0.003)
            client = CLIENTS[fmt](server.url, "sk-x")
            source = client.stream([ChatMessage.user("go")]).pipe(ops.convert())
            probe = Probe().subscribe(source)
            items = probe.items
            if end == "dispose":
                await until(lambda: len(items) >= 5)
                probe.dispose()
                await server.wait_connections_closed(timeout=2.0)
            else:
                kind, value = await asyncio.wait_for(probe.ended, 3.0)
                assert kind == "completed", value
            del client, source, probe
            for _ in range(3):
                gc.collect()
                await asyncio.sleep(0.02)

    run_checked(scenario)


def test_a_tool_cancelled_by_dispose_leaves_no_reference_cycle() -> None:
    """What ``_http._run`` does for the stream task (no frames on the CancelledError, so a
    client dropped after a dispose is freed at once, not by the cycle collector) must hold
    for execute_tools' tool tasks too: once disposed and dropped, the subscriber is freed
    by reference counting alone."""
    import weakref

    from reactivex.subject import Subject

    class Sentinel:
        pass

    async def scenario() -> None:
        started = asyncio.Event()

        @tool
        async def slow(n: int) -> str:
            """Slow."""
            started.set()
            await asyncio.sleep(30)
            return "late"

        source: Subject[AgentResponseResult] = Subject()
        sentinel = Sentinel()
        alive = weakref.ref(sentinel)
        subscription = source.pipe(ops.execute_tools([slow])).subscribe(lambda r, s=sentinel: None)
        del sentinel
        source.on_next(AgentResponseResult(contents=(ToolCallingContent("c1", "slow", {"n": 1}),)))
        await asyncio.wait_for(started.wait(), 2.0)
        subscription.dispose()
        for _ in range(5):
            await asyncio.sleep(0)  # the cancelled tool task ends
        await asyncio.sleep(0.01)
        del subscription, source, slow
        assert alive() is None, "the disposed subscriber is only freed by the cycle collector"

    gc.disable()
    try:
        run_checked(scenario)
    finally:
        gc.enable()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("phase", ["tool", "approval"])
def test_dropping_a_client_after_disposing_an_agent_mid_tool_warns_about_nothing(
    fmt: str, phase: str
) -> None:
    async def scenario() -> None:
        async with arena() as server:
            started = asyncio.Event()

            @tool(requires_approval=phase == "approval")
            async def slow(n: int) -> str:
                """Slow."""
                started.set()
                await asyncio.sleep(30)
                return "late"

            async def approver(event: ToolApprovalRequestEvent) -> bool:
                started.set()
                await asyncio.sleep(30)
                return True

            server.script(
                lambda r: (
                    Reply(text="ok")
                    if r.last_role == "tool"
                    else Reply(tool_calls=[ToolCallSpec("slow", {"n": 1})])
                )
            )
            client = CLIENTS[fmt](server.url, "sk-x")
            probe = Probe().subscribe(Agent(client, tools=[slow], approver=approver).run("Go."))
            await asyncio.wait_for(started.wait(), 2.0)
            probe.dispose()
            await asyncio.sleep(0.02)
            del client, probe
            for _ in range(3):
                gc.collect()
                await asyncio.sleep(0.02)

    run_checked(scenario)
