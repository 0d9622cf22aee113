"""Unusual runtimes: rafrx under asyncio debug mode, an eager task factory, and loops
in worker threads.

The angle: a user who does not run rafrx the way CI does. They turn on asyncio's
debug mode (``loop.set_debug(True)``, ``PYTHONASYNCIODEBUG=1``, ``python -X dev``)
with ``ResourceWarning`` as an error, set Python 3.12's
``asyncio.eager_task_factory`` on their loop (FastAPI and other frameworks do, for
speed), or run ``asyncio.run`` in several worker threads at once (a sync web
server, a GUI, Streamlit's script threads). Each run must give the same results as
a plain loop, leak no task, connection or warning, and never block the loop.

On Python 3.11, which has no ``asyncio.eager_task_factory``, the same thing is
done by hand (:func:`eager_task_factory` below: the task's first step runs inside
``create_task``, with the new task as the current one, as 3.12's does), so these
tests run on every supported Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import sys
import threading
import time
import typing
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Annotated, Any, Literal, TypeVar

import pytest
import typing_extensions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import (
    Agent,
    AgentResponse,
    AgentResponseResult,
    ChatMessage,
    IdleTimeout,
    InMemoryHistoryProvider,
    RafrxError,
    StreamInterrupted,
    ToolApprovalRequestEvent,
    ToolApprovalResponse,
    TransportError,
    collect_agent_response,
    tool,
)
from rafrx import operators as ops
from rafrx.errors import ConnectTimeout, HTTPStatusError
from rafrx.sources import from_sse
from rafrx.sources.clients import (
    AnthropicClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec, render

T = TypeVar("T")

CLIENTS = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = list(CLIENTS)
USER = [ChatMessage.user("go")]
TEXT = "The quick brown fox jumps over the lazy dog. " * 3
#: A callback blocking the loop this long is a bug (small inputs only). Shorter ones are
#: the machine's load as much as rafrx's: timings belong in bench/, not in these tests.
SLOW_CALLBACK = 5.0


# ---------------------------------------------------------------- runtimes


def eager_task_factory(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
) -> asyncio.Future[Any]:
    """``asyncio.eager_task_factory`` (3.12+); on 3.11 the same, by hand: the task's
    first step runs now, inside ``create_task``, as the current task."""
    real = getattr(asyncio, "eager_task_factory", None)
    if real is not None:
        return real(loop, coro, **kwargs)  # type: ignore[no-any-return]
    handles: list[asyncio.Handle] = []
    schedule = loop.call_soon

    def capture(callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        handle = schedule(callback, *args, context=context)
        handles.append(handle)
        return handle

    loop.call_soon = capture  # type: ignore[method-assign]  # (the first step Task schedules)
    try:
        task = asyncio.tasks._PyTask(coro, loop=loop, **kwargs)  # type: ignore[attr-defined]
    finally:
        del loop.call_soon
    handles[0].cancel()
    current = asyncio.tasks._current_tasks.pop(loop, None)  # type: ignore[attr-defined]
    try:
        task._Task__step()  # the first step, now (as 3.12's Task.eager_start)
    finally:
        if current is not None:
            asyncio.tasks._current_tasks[loop] = current  # type: ignore[attr-defined]
    return task  # type: ignore[no-any-return]


class Watch:
    """What a loop reports: its exception handler's calls and asyncio's log records
    (slow callbacks, "Task was destroyed but it is pending", "never retrieved")."""

    def __init__(self) -> None:
        self.handler: list[dict[str, Any]] = []
        self.records: list[logging.LogRecord] = []

    def problems(self) -> list[str]:
        logged = [r.getMessage()[:300] for r in self.records if r.levelno >= logging.WARNING]
        return [str(c.get("message")) for c in self.handler] + logged


class _Collect(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


@contextlib.contextmanager
def watching() -> Iterator[Watch]:
    """Collect asyncio's warnings and errors; ``ResourceWarning`` is an error meanwhile."""
    watch = Watch()
    handler = _Collect(watch.records)
    log = logging.getLogger("asyncio")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            yield watch
            gc.collect()  # (a task or a transport dropped unclosed reports when it goes)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def run(
    main: Callable[[], Awaitable[T]], *, debug: bool = False, eager: bool = False
) -> tuple[T, Watch]:
    """``main()`` on a fresh loop (debug mode, an eager task factory); its result and
    what the loop reported. No task of it may be left running."""

    async def wrapper() -> T:
        loop = asyncio.get_running_loop()
        loop.slow_callback_duration = SLOW_CALLBACK
        loop.set_exception_handler(lambda _loop, context: watch.handler.append(context))
        if eager:
            loop.set_task_factory(eager_task_factory)
        result = await main()
        await asyncio.sleep(0)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if left:
            await asyncio.wait(left, timeout=2)
        still = [t for t in left if not t.done()]
        assert still == [], f"tasks left running: {still}"
        return result

    with watching() as watch, asyncio.Runner(debug=debug) as runner:
        result = runner.run(wrapper())
    return result, watch


def both(
    main: Callable[[], Awaitable[T]], *, debug: bool = False, eager: bool = True
) -> tuple[T, T, Watch]:
    """``main()`` on a plain loop, then on the runtime under test: both results."""
    plain, _ = run(main)
    other, watch = run(main, debug=debug, eager=eager)
    return plain, other, watch


RUNTIMES = pytest.mark.parametrize(
    ("debug", "eager"),
    [(True, False), (False, True), (True, True)],
    ids=["debug", "eager", "debug+eager"],
)


# ---------------------------------------------------------------- tools


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers (never suspends: with an eager factory it ends in create_task)."""
    return a + b


@tool
async def slow_add(a: int, b: int) -> int:
    """Add two numbers, after a moment."""
    await asyncio.sleep(0.01)
    return a + b


@tool
def mul(a: int, b: int) -> int:
    """Multiply two numbers (a sync tool: runs in a worker thread)."""
    time.sleep(0.01)
    return a * b


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Delete a file (needs approval)."""
    return f"wiped {path}"


CALLS = [
    ToolCallSpec("add", {"a": 2, "b": 3}),
    ToolCallSpec("slow_add", {"a": 1, "b": 1}),
    ToolCallSpec("mul", {"a": 2, "b": 3}),
]


def summary(response: AgentResponse) -> tuple[Any, ...]:
    """What a user reads of a turn: text, calls, tool results, the transcript's shape."""
    return (
        response.text,
        response.finish_reason,
        [(c.name, c.arguments) for c in response.tool_calls],
        [m.content for m in response.tool_messages],
        [(m.role.value, bool(m.tool_calls)) for m in response.turn_transcript],
        len(response.turn_transcript),
    )


# ---------------------------------------------------------------- the eager factory itself


def test_the_eager_factory_runs_a_tasks_first_step_inside_create_task() -> None:
    """The harness: with the factory set, a task starts before ``create_task`` returns,
    as the current task; a task that never suspends is done at once."""

    async def main() -> tuple[list[str], bool, int]:
        seen: list[str] = []

        async def child() -> int:
            me = asyncio.current_task()
            seen.append("started as child" if me is not parent else "started as parent")
            await asyncio.sleep(0)
            seen.append("resumed")
            return 5

        async def instant() -> int:
            return 7

        parent = asyncio.current_task()
        task = asyncio.get_running_loop().create_task(child())
        seen.append("create_task returned")
        done = asyncio.get_running_loop().create_task(instant())
        value = await task
        return [*seen, str(value)], done.done(), await done

    (seen, done_at_once, value), watch = run(main, eager=True)
    assert seen == ["started as child", "create_task returned", "resumed", "5"]
    assert (done_at_once, value) == (True, 7)
    assert watch.problems() == []


# ---------------------------------------------------------------- streams


@RUNTIMES
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stream_reads_the_same_under_the_runtime(fmt: str, debug: bool, eager: bool) -> None:
    """A text and reasoning stream: the same response, no warning, no slow callback."""

    async def main() -> tuple[Any, ...]:
        async with LLMServer() as server, CLIENTS[fmt](server.url, model="m") as client:
            server.enqueue(Reply(text=TEXT, reasoning="Let me think.", chunk_size=3))
            results = client.stream(USER).pipe(ops.convert())
            response = await collect_agent_response(results)
            return response.text, response.reasoning_text, response.finish_reason, response.usage

    plain, other, watch = both(main, debug=debug, eager=eager)
    assert other == plain
    assert other[0] == TEXT
    assert watch.problems() == []


@RUNTIMES
@pytest.mark.parametrize("fmt", FORMATS)
def test_disposing_mid_stream_closes_the_connection_under_the_runtime(
    fmt: str, debug: bool, eager: bool
) -> None:
    """Dispose after the first text: nothing more arrives, the server sees the
    connection closed, and no task, transport or warning is left behind."""

    async def main() -> tuple[int, int]:
        async with LLMServer() as server, CLIENTS[fmt](server.url, model="m") as client:
            server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.005))
            got: list[Any] = []
            first = asyncio.Event()

            def on_next(update: Any) -> None:
                got.append(update)
                first.set()

            subscription = client.stream(USER).subscribe(on_next)
            await asyncio.wait_for(first.wait(), 5)
            subscription.dispose()
            count = len(got)
            await server.wait_connections_closed()
            await asyncio.sleep(0.05)
            return len(got) - count, server.open_connections

    (more, open_connections), watch = run(main, debug=debug, eager=eager)
    assert (more, open_connections) == (0, 0)
    assert watch.problems() == []


FAULTS: list[tuple[str, Fault, type[RafrxError]]] = [
    ("stall before headers", Fault.stall(5), ConnectTimeout),
    ("stall mid-body", Fault.stall(5, after_bytes=40), IdleTimeout),
    ("dropped", Fault.drop_after(60), StreamInterrupted),
    ("reset", Fault.drop_after(60, reset=True), StreamInterrupted),
    ("http 400", Fault.status(400), HTTPStatusError),
]


@RUNTIMES
@pytest.mark.parametrize(("what", "fault", "error"), FAULTS, ids=[f[0] for f in FAULTS])
def test_faults_end_in_the_same_typed_error_under_the_runtime(
    what: str, fault: Fault, error: type[RafrxError], debug: bool, eager: bool
) -> None:
    """Timeouts, dropped connections and HTTP errors: the same typed error, promptly,
    with the connection closed and nothing reported to the loop."""

    async def main() -> tuple[type[BaseException], float, int]:
        timeouts = Timeouts(first_byte=0.3, idle=0.3)
        async with LLMServer() as server:
            client = OpenAIChatClient(server.url, model="m", timeouts=timeouts)
            server.enqueue(fault)
            started = time.monotonic()
            with pytest.raises(RafrxError) as caught:
                await collect_agent_response(client.stream(USER).pipe(ops.convert()))
            took = time.monotonic() - started
            await client.aclose()  # (an HTTP error's connection may go back to the pool)
            await server.wait_connections_closed()
            return type(caught.value), took, server.open_connections

    (kind, took, open_connections), watch = run(main, debug=debug, eager=eager)
    assert kind is error
    assert took < 3.0
    assert open_connections == 0
    assert watch.problems() == []


@RUNTIMES
def test_a_retried_request_delivers_once_under_the_runtime(debug: bool, eager: bool) -> None:
    """Two 503s then the answer: one response, three requests, nothing duplicated."""

    async def main() -> tuple[str, int]:
        policy = RetryPolicy(initial_backoff=0.01, jitter=False)
        async with (
            LLMServer() as server,
            OpenAIChatClient(server.url, model="m", retry=policy) as client,
        ):
            server.enqueue(Fault.status(503), Fault.status(503), Reply(text="third time"))
            response = await collect_agent_response(client.stream(USER).pipe(ops.convert()))
            return response.text, len(server.requests)

    result, watch = run(main, debug=debug, eager=eager)
    assert result == ("third time", 3)
    assert watch.problems() == []


@RUNTIMES
def test_aclose_mid_stream_ends_the_call_with_a_transport_error(debug: bool, eager: bool) -> None:
    async def main() -> tuple[type[BaseException], int]:
        async with LLMServer() as server:
            client = OpenAIChatClient(server.url, model="m")
            server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.005))
            first = asyncio.Event()
            results = client.stream(USER).pipe(rx.do_action(lambda _: first.set()), ops.convert())
            waiting = asyncio.ensure_future(collect_agent_response(results))
            await asyncio.wait_for(first.wait(), 5)
            await client.aclose()
            with pytest.raises(RafrxError) as caught:
                await waiting
            await server.wait_connections_closed()
            return type(caught.value), server.open_connections

    result, watch = run(main, debug=debug, eager=eager)
    assert result == (TransportError, 0)
    assert watch.problems() == []


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fmt=st.sampled_from(FORMATS),
    cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=12),
    suspend=st.booleans(),
)
def test_from_sse_over_an_async_iterable_under_an_eager_factory_matches_the_sync_decode(
    fmt: str, cuts: list[int], suspend: bool
) -> None:
    """``from_sse`` over an async iterable (split anywhere, yielding to the loop or
    not) under an eager factory and debug mode gives the updates of the sync decode."""
    body = render(
        Reply(text="héllo 🌍 " * 5, tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2})]), fmt
    )
    points = sorted({c % len(body) for c in cuts} | {0, len(body)})
    chunks = [body[a:b] for a, b in itertools.pairwise(points) if b > a]
    expected = from_sse(iter(chunks), dialect=fmt).pipe(rx.to_list()).run()

    async def main() -> list[Any]:
        async def pieces() -> Any:
            for chunk in chunks:
                if suspend:
                    await asyncio.sleep(0)
                yield chunk

        done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        from_sse(pieces(), dialect=fmt).pipe(rx.to_list()).subscribe(
            done.set_result, done.set_exception
        )
        return await done

    got, watch = run(main, debug=True, eager=True)
    assert got == expected
    assert watch.problems() == []


# ---------------------------------------------------------------- agent turns


@RUNTIMES
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("eager_tools", [False, True], ids=["tools-after", "tools-eager"])
def test_an_agent_turn_with_tools_is_the_same_under_the_runtime(
    fmt: str, eager_tools: bool, debug: bool, eager: bool
) -> None:
    """Three tools at once (one that never suspends, one async, one sync in a
    thread), then the answer: the same turn, in call order, saved the same."""

    async def main() -> tuple[Any, ...]:
        async with LLMServer() as server, CLIENTS[fmt](server.url, model="m") as client:
            server.enqueue(Reply(tool_calls=CALLS), Reply(text="5, 2 and 6"))
            history = InMemoryHistoryProvider()
            agent = Agent(client, tools=[add, slow_add, mul], history=history, eager_tools=True)
            agent.eager_tools = eager_tools
            response = await agent.send("sums")
            saved = [(m.role.value, m.content) for m in await history.load()]
            return (*summary(response), saved)

    plain, other, watch = both(main, debug=debug, eager=eager)
    assert other == plain
    assert plain[3] == ["5", "2", "6"]
    assert watch.problems() == []


@RUNTIMES
def test_approvals_answered_at_once_or_later_run_the_tool_under_the_runtime(
    debug: bool, eager: bool
) -> None:
    """An async approver that answers without suspending, and an observable of answers
    given on the next loop pass: the tool runs once, the request shows once."""

    async def instant(event: ToolApprovalRequestEvent) -> bool:
        return True

    async def main() -> list[Any]:
        out: list[Any] = []
        async with LLMServer() as server, OpenAIChatClient(server.url, model="m") as client:
            answers: Subject[ToolApprovalResponse] = Subject()
            for approver in (instant, answers):
                server.enqueue(
                    Reply(tool_calls=[ToolCallSpec("wipe", {"path": "/tmp/x"})]), Reply(text="ok")
                )
                requests: list[str] = []

                def on_next(result: AgentResponseResult, requests: list[str] = requests) -> None:
                    for event in result.events:
                        if isinstance(event, ToolApprovalRequestEvent):
                            requests.append(event.call_id)
                            asyncio.get_running_loop().call_soon(
                                answers.on_next, ToolApprovalResponse(event.call_id, True)
                            )

                agent = Agent(client, tools=[wipe], approver=approver)
                response = await collect_agent_response(
                    agent.run("wipe it").pipe(rx.do_action(on_next))
                )
                out.append(([m.content for m in response.tool_messages], len(requests)))
        return out

    plain, other, watch = both(main, debug=debug, eager=eager)
    assert other == plain == [(["wiped /tmp/x"], 1), (["wiped /tmp/x"], 1)]
    assert watch.problems() == []


@RUNTIMES
def test_cancelling_a_turn_mid_stream_stops_it_and_saves_nothing(debug: bool, eager: bool) -> None:
    async def main() -> tuple[int, int, int]:
        async with LLMServer() as server, OpenAIChatClient(server.url, model="m") as client:
            server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.005))
            history = InMemoryHistoryProvider()
            first = asyncio.Event()
            agent = Agent(client, history=history)
            turn = agent.run("talk").pipe(rx.do_action(lambda _: first.set()))
            waiting = asyncio.ensure_future(collect_agent_response(turn))
            await asyncio.wait_for(first.wait(), 5)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await server.wait_connections_closed()
            open_connections = server.open_connections
            # the agent goes on: the next turn works
            server.enqueue(Reply(text="again"))
            again = await agent.send("hello?")
            return len(await history.load()), open_connections, len(again.text)

    result, watch = run(main, debug=debug, eager=eager)
    assert result == (2, 0, len("again"))
    assert watch.problems() == []


@RUNTIMES
def test_a_failing_turn_leaves_the_agent_usable_with_an_observable_approver(
    debug: bool, eager: bool
) -> None:
    """A context provider that fails at once ends the turn during ``create_task``
    under an eager factory: the agent must not think a turn is still running (its
    observable approver serves one turn at a time)."""

    class Failing:
        async def provide(self, messages: Any) -> list[ChatMessage]:
            raise ValueError("the context store is down")

    async def main() -> tuple[str, str]:
        async with LLMServer() as server, OpenAIChatClient(server.url, model="m") as client:
            answers: Subject[ToolApprovalResponse] = Subject()
            agent = Agent(client, approver=answers, context_providers=[Failing()])
            failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
            agent.run("hi").subscribe(on_error=failed.set_result)
            error = await failed
            agent.context_providers = ()
            server.enqueue(Reply(text="fine"))
            return str(error), (await agent.send("again")).text

    result, watch = run(main, debug=debug, eager=eager)
    assert result == ("the context store is down", "fine")
    assert watch.problems() == []


# ---------------------------------------------------------------- loops in threads


def in_threads(count: int, work: Callable[[int], T], timeout: float = 30) -> list[T | str]:
    """``work(i)`` in ``count`` threads at once; each result, or its error's name."""
    results: list[T | str] = ["did not finish"] * count
    barrier = threading.Barrier(count)

    def target(i: int) -> None:
        barrier.wait(10)
        try:
            results[i] = work(i)
        except BaseException as exc:
            results[i] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return results


def _scripted(server: LLMServer) -> None:
    """Answer each conversation with what its user said, after an ``add`` call."""

    @server.script
    def turn(request: Any) -> Reply:
        messages = request.json["messages"]
        said = next(m["content"] for m in messages if m["role"] == "user")
        if messages[-1]["role"] == "tool":
            return Reply(text=f"{said}: {messages[-1]['content']}", chunk_size=2)
        return Reply(tool_calls=[ToolCallSpec("add", {"a": len(said), "b": 1})])


@pytest.mark.parametrize("eager", [False, True], ids=["plain", "eager"])
def test_threads_each_running_their_own_loop_and_agent_get_their_own_answers(
    eager: bool,
) -> None:
    """Six threads, each ``asyncio.Runner(debug=True)`` with its own client and agent,
    all at once against one server: each gets the answer to its own question."""
    with LLMServer.in_thread() as server:
        _scripted(server)

        def work(i: int) -> tuple[str, list[str]]:
            async def main() -> tuple[str, list[str]]:
                async with OpenAIChatClient(server.url, model="m") as client:
                    agent = Agent(client, tools=[add], history=InMemoryHistoryProvider())
                    response = await agent.send(f"thread {i}")
                    return response.text, [m.content for m in response.tool_messages]

            result, watch = run(main, debug=True, eager=eager)
            assert watch.problems() == []
            return result

        results = in_threads(6, work)
    assert results == [(f"thread {i}: {len(f'thread {i}') + 1}", ["9"]) for i in range(6)]


def test_one_client_shared_by_threads_with_their_own_loops_streams_in_each() -> None:
    """A client made once (a module global) and used from four threads' loops at once."""
    with LLMServer.in_thread() as server:
        _scripted(server)
        client = OpenAIChatClient(server.url, model="m")

        def work(i: int) -> str:
            async def main() -> str:
                agent = Agent(client, tools=[add])
                return (await agent.send(f"user {i}")).text

            result, watch = run(main, debug=True)
            assert watch.problems() == []
            return result

        results = in_threads(4, work)
    assert results == [f"user {i}: {len(f'user {i}') + 1}" for i in range(4)]


def test_one_agent_used_turn_after_turn_from_new_threads_keeps_its_history() -> None:
    """Streamlit's pattern: each interaction runs the script in a new thread, which
    calls ``asyncio.run(agent.send(...))`` on the agent kept in the session."""
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="one"), Reply(text="two"), Reply(text="three"))
        client = OpenAIChatClient(server.url, model="m")
        agent = Agent(client, history=InMemoryHistoryProvider())
        texts: list[str] = []
        for word in ("a", "b", "c"):
            result = in_threads(1, lambda _i, w=word: asyncio.run(agent.send(w)).text)
            texts.extend(str(r) for r in result)
        saved = asyncio.run(agent.history.load())  # type: ignore[union-attr]
        last = server.requests[-1].json["messages"]
    assert texts == ["one", "two", "three"]
    assert [(m.role.value, m.content) for m in saved] == [
        ("user", "a"),
        ("assistant", "one"),
        ("user", "b"),
        ("assistant", "two"),
        ("user", "c"),
        ("assistant", "three"),
    ]
    assert [m["content"] for m in last] == ["a", "one", "b", "two", "c"]


def test_a_turn_on_a_worker_threads_loop_disposed_from_the_main_thread() -> None:
    """A GUI's pattern: the loop runs in a worker thread, the main thread starts a
    turn there and disposes it mid-stream: the stream stops and closes, the loop
    reports nothing (debug mode checks every cross-thread call)."""
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="word " * 1000, chunk_size=4, delay=0.005))
        loop = asyncio.new_event_loop()
        loop.set_debug(True)
        watch = Watch()
        loop.set_exception_handler(lambda _loop, context: watch.handler.append(context))
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            client = OpenAIChatClient(server.url, model="m")
            got: list[AgentResponseResult] = []
            first = threading.Event()
            ended: list[str] = []

            def on_next(result: AgentResponseResult) -> None:
                got.append(result)
                first.set()

            async def start() -> Any:
                return (
                    Agent(client)
                    .run("talk")
                    .subscribe(
                        on_next, lambda e: ended.append("error"), lambda: ended.append("completed")
                    )
                )

            subscription = asyncio.run_coroutine_threadsafe(start(), loop).result(5)
            assert first.wait(5)
            subscription.dispose()  # from the main thread
            count = len(got)
            deadline = time.monotonic() + 5
            while server.open_connections and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.05)
            asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(5)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()
    assert server.open_connections == 0
    assert len(got) == count
    assert ended == []
    assert watch.problems() == []


class _SlowHistory(InMemoryHistoryProvider):
    """A history kept in a database: a save takes a moment."""

    async def save(self, messages: Any) -> None:
        await asyncio.sleep(0.2)
        await super().save(messages)


def test_one_agent_used_from_threads_each_running_their_own_loop_at_once() -> None:
    """A sync web app keeps one agent per conversation and each request thread runs
    ``asyncio.run(agent.send(...))``: on a double submit, turns of one agent run on
    two loops at once. A turn waiting for another loop's history save is woken when it
    ends (it hung: an asyncio future awaited from another thread's loop)."""
    with LLMServer.in_thread() as server:
        server.script(lambda request: Reply(text="ok"))
        client = OpenAIChatClient(server.url, model="m")
        history = _SlowHistory()
        agent = Agent(client, history=history)

        def work(i: int) -> str:
            async def turn() -> str:
                return (await asyncio.wait_for(agent.send(f"message {i}"), 10)).text

            return asyncio.run(turn())

        results = in_threads(4, work)
        saved = asyncio.run(history.load())
    assert results == ["ok"] * 4
    assert [m.role.value for m in saved] == ["user", "assistant"] * 4
    assert sorted(m.content for m in saved[::2]) == [f"message {i}" for i in range(4)]


# ---------------------------------------------------------------- Python 3.12's type aliases

T_ = TypeVar("T_")
# What ``type Celsius = float``, ``type Unit = Literal["c", "f"]``, ``type Pair[T] = tuple[T,
# T]`` and ``type Tree = list[Tree]`` make on 3.12 (the same class backported on 3.11).
Celsius = typing_extensions.TypeAliasType("Celsius", float)
Unit = typing_extensions.TypeAliasType("Unit", Literal["c", "f"])
Pair = typing_extensions.TypeAliasType("Pair", tuple[T_, T_], type_params=(T_,))


def _tree() -> Any:
    """``type Tree = list[Tree]``: on 3.11, whose aliases cannot name themselves, a name
    the alias cannot resolve."""
    if sys.version_info >= (3, 12):
        namespace: dict[str, Any] = {}
        exec("type Tree = list[Tree]", namespace)
        return namespace["Tree"]
    return typing_extensions.TypeAliasType("Tree", list[typing.ForwardRef("Tree")])


def test_a_tool_takes_type_aliases_as_what_they_name() -> None:
    """PEP 695 aliases, bare, generic, in ``Annotated`` and in containers: the schema
    and the conversion of the value they name."""

    def set_temperature(
        room: str,
        value: Celsius,  # type: ignore[valid-type]
        unit: Unit = "c",  # type: ignore[valid-type]
        corners: Pair[int] = (0, 0),  # type: ignore[valid-type]
        limits: list[Annotated[Celsius, "°C"]] | None = None,  # type: ignore[valid-type]
    ) -> str:
        """Set a room's temperature."""
        return f"{room}: {value!r} {unit} {corners} {limits}"

    made = tool(set_temperature)
    properties = made.parameters["properties"]
    assert properties["value"] == {"type": "number"}
    assert properties["unit"]["enum"] == ["c", "f"]
    assert properties["corners"]["prefixItems"] == [{"type": "integer"}] * 2
    arguments = {"room": "hall", "value": 21, "corners": [1, 2], "limits": [18]}
    assert asyncio.run(made.invoke(arguments)) == "hall: 21.0 c (1, 2) [18.0]"


def test_a_recursive_type_alias_is_refused_when_the_tool_is_made() -> None:
    def plant(tree: Any) -> None:
        """Plant a tree."""

    plant.__annotations__["tree"] = _tree()
    with pytest.raises(TypeError, match=r"Tree"):
        tool(plant)
