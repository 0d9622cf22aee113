"""Thread safety: what users do across threads with rafrx.

A UI thread disposes a stream, a turn or a tool run mid-flight; sync code with no
loop subscribes by mistake; Rx schedulers move work between a thread pool and the
loop; sync tools and approvers block in rafrx's worker threads; the scripted server
runs in its own thread while others feed it; one client is shared by threads that
each run their own loop; an approval or a live view is answered or finished from a
thread that is not the loop's.

Documented behaviour is asserted where there is some (``DESIGN.md``, the README,
the docstrings); elsewhere what a serious library does: a prompt stop, a typed
error, nothing lost or leaked, no hang.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import reactivex
from reactivex import operators as rx
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.scheduler.eventloop import AsyncIOThreadSafeScheduler
from reactivex.subject import Subject

from rafrx import (
    Agent,
    AgentResponse,
    AgentResponseResult,
    ChatMessage,
    FinishReason,
    InMemoryHistoryProvider,
    RafrxError,
    ToolApprovalRequestEvent,
    ToolApprovalResponse,
    ToolCalledContent,
    ToolCallingContent,
    TransportError,
    collect_agent_response,
    tool,
)
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.notebook import live, text_display
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec, render
from tests.reliability._support import MANIFEST, fixture, normalized, wait_for

USER = [ChatMessage.user("go")]
SLOW = Reply(text="word " * 3000, chunk_size=4, delay=0.005)
BODY = render(Reply(text="Hello there."), "openai-chat")
TOOL_BODY = render(
    Reply(
        text="Adding.",
        tool_calls=[
            ToolCallSpec("add", {"a": 1, "b": 2}, id="c1"),
            ToolCallSpec("add", {"a": 3, "b": 4}, id="c2"),
        ],
    ),
    "openai-chat",
)
#: How long a hand-off from a worker thread to the loop may take (generous: CI).
PROMPT = 2.0
#: How long a test waits for what a bug would make hang, before failing.
PATIENCE = 4.0


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def rafrx_tasks() -> set[asyncio.Task[Any]]:
    """The running tasks of rafrx's own calls, turns and tool runs on this loop."""
    found = set()
    for task in asyncio.all_tasks():
        name = task.get_name()
        coro = getattr(task.get_coro(), "__qualname__", "")
        if task.done():
            continue
        if name.startswith("rafrx") or coro.startswith(("_StreamCall", "_Turn", "_Runner")):
            found.add(task)
    return found


def called(results: list[AgentResponseResult]) -> list[ToolCalledContent]:
    return [c for r in results for c in r.contents if isinstance(c, ToolCalledContent)]


def in_thread(fn: Callable[[], Any], timeout: float = 10.0) -> Any:
    """``fn()`` on a new plain thread (no event loop); its value or exception."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(("value", fn()))
        except BaseException as exc:
            out.append(("error", exc))

    thread = threading.Thread(target=target, name="no-loop")
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{fn} was still running after {timeout} s"
    kind, value = out[0]
    if kind == "error":
        raise value
    return value


@pytest.fixture
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a daemon thread (a sync app's background loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="background-loop", daemon=True)
    thread.start()
    try:
        yield loop
    finally:

        async def drain() -> None:
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_asyncgens()

        asyncio.run_coroutine_threadsafe(drain(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# ---------------------------------------------------------------- disposing from a thread


@pytest.mark.timeout(30)
@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient])
async def test_a_client_stream_disposed_from_another_thread_stops_and_closes_promptly(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]], client_type: Any
) -> None:
    llm_server.enqueue(SLOW)
    async with client_type(llm_server.url, "sk-thread") as client:
        seen: list[AgentResponseResult] = []
        ended: list[object] = []
        first = asyncio.Event()

        def on_next(result: AgentResponseResult) -> None:
            seen.append(result)
            first.set()

        subscription = (
            client.stream(USER)
            .pipe(ops.convert())
            .subscribe(on_next, ended.append, lambda: ended.append("completed"))
        )
        await asyncio.wait_for(first.wait(), 5)
        await asyncio.sleep(0.05)  # mid-stream

        def dispose() -> int:
            subscription.dispose()
            return len(seen)

        at_dispose = await asyncio.to_thread(dispose)
        started = time.monotonic()
        await wait_for(lambda: llm_server.open_connections == 0, PROMPT)
        await wait_for(lambda: not rafrx_tasks(), PROMPT)
        assert time.monotonic() - started < PROMPT
        await asyncio.sleep(0.1)
        assert len(seen) <= at_dispose + 1  # at most the one being delivered as it returned
        assert ended == []  # disposed: no terminal event
        assert loop_errors == []


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_an_agent_turn_disposed_from_another_thread_while_a_sync_tool_blocks(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()

    def block() -> str:
        """Block until released."""
        entered.set()
        release.wait(10)
        returned.set()
        return "late"

    llm_server.enqueue(Reply(tool_calls=[ToolCallSpec("block", {})]), Reply(text="never"))
    history = InMemoryHistoryProvider()
    results: list[AgentResponseResult] = []
    ended: list[object] = []
    async with OpenAIChatClient(llm_server.url) as client:
        agent = Agent(client, tools=[block], history=history)
        subscription = agent.run("go").subscribe(
            results.append, ended.append, lambda: ended.append("completed")
        )
        try:
            assert await asyncio.to_thread(entered.wait, 5)
            started = time.monotonic()
            await asyncio.to_thread(subscription.dispose)
            await wait_for(lambda: not rafrx_tasks(), PROMPT)
            assert time.monotonic() - started < PROMPT
        finally:
            release.set()
        assert await asyncio.to_thread(returned.wait, 5)
        await asyncio.sleep(0.2)  # the tool's late value has had every chance to show
    assert called(results) == []
    assert ended == []
    assert len(llm_server.requests) == 1  # no second LLM call after the disposal
    assert history.messages == ()  # a disposed turn saves nothing
    assert loop_errors == []


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_execute_tools_disposed_from_another_thread_while_20_sync_tools_block(
    no_task_leak: None, loop_errors: list[dict[str, Any]]
) -> None:
    running = threading.Semaphore(0)
    release = threading.Event()

    def block(i: int) -> str:
        """Block until released."""
        running.release()
        release.wait(10)
        return f"late {i}"

    calls = tuple(ToolCallingContent(f"c{i}", "block", {"i": i}) for i in range(20))
    results: list[AgentResponseResult] = []
    ended: list[object] = []
    subscription = (
        reactivex.of(AgentResponseResult(contents=calls))
        .pipe(ops.execute_tools([block], concurrency=20))
        .subscribe(results.append, ended.append, lambda: ended.append("completed"))
    )
    try:

        def all_running() -> bool:
            return all(running.acquire(timeout=5) for _ in range(20))

        assert await asyncio.to_thread(all_running)
        started = time.monotonic()
        await asyncio.to_thread(subscription.dispose)
        await wait_for(lambda: not rafrx_tasks(), PROMPT)
        assert time.monotonic() - started < PROMPT
    finally:
        release.set()
    await asyncio.sleep(0.3)
    assert called(results) == []
    assert ended == []
    assert loop_errors == []


# ---------------------------------------------------------------- no loop on this thread


class _Chunks:
    """An async iterable of chunks (never iterated in these tests)."""

    def __aiter__(self) -> Any:
        raise AssertionError("read without a loop")


def _no_loop_sources() -> dict[str, Callable[[], reactivex.Observable[Any]]]:
    client = OpenAIChatClient("http://127.0.0.1:9")  # never reached

    def never(x: int) -> int:
        """Never runs."""
        raise AssertionError("a tool ran with no loop")

    calling = AgentResponseResult(contents=(ToolCallingContent("c1", "never", {"x": 1}),))
    return {
        "client.stream": lambda: client.stream(USER),
        "client.stream+convert+aggregate": lambda: client.stream(USER).pipe(
            ops.convert(), ops.aggregate()
        ),
        "Agent.run": lambda: Agent(client).run("go"),
        "execute_tools": lambda: reactivex.of(calling).pipe(ops.execute_tools([never])),
        "from_sse(async iterable)": lambda: from_sse(_Chunks()),
    }


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", list(_no_loop_sources()))
def test_subscribing_with_no_running_loop_is_a_clear_error_not_a_hang(name: str) -> None:
    """DESIGN.md: sources are subscribed to from code running in a loop. From a plain
    thread, ``.run()`` fails at once with a RuntimeError that says so."""
    source = _no_loop_sources()[name]()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="loop"):
        in_thread(source.run)
    assert time.monotonic() - started < PROMPT


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_subscribe_on_a_thread_pool_around_a_client_stream_is_a_clear_error(
    no_task_leak: None, pool: ThreadPoolScheduler
) -> None:
    """subscribe_on moves the subscription to a pool thread, where no loop runs: the
    stream ends with the documented RuntimeError (on that thread), sends nothing."""
    async with LLMServer() as server, OpenAIChatClient(server.url) as client:
        failed = threading.Event()
        errors: list[Exception] = []

        def on_error(error: Exception) -> None:
            errors.append(error)
            failed.set()

        client.stream(USER).pipe(rx.subscribe_on(pool)).subscribe(on_error=on_error)
        assert await asyncio.to_thread(failed.wait, PROMPT)
        assert isinstance(errors[0], RuntimeError)
        assert "event loop" in str(errors[0])
        assert server.request_count == 0


# ---------------------------------------------------------------- Rx schedulers


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_decoding_on_a_pool_then_observe_on_the_loop_runs_tools_on_the_loop(
    no_task_leak: None, pool: ThreadPoolScheduler
) -> None:
    """The documented way to hand a pool's items to the loop's operators: observe_on an
    AsyncIOThreadSafeScheduler; execute_tools then runs there."""
    loop = asyncio.get_running_loop()
    decoded_on: set[int] = set()
    results = from_sse(TOOL_BODY).pipe(
        rx.subscribe_on(pool),
        rx.do_action(lambda _: decoded_on.add(threading.get_ident())),
        rx.observe_on(AsyncIOThreadSafeScheduler(loop)),
        ops.convert(),
        ops.execute_tools([add]),
    )
    response = await asyncio.wait_for(collect_agent_response(results), PATIENCE)
    assert response.text == "Adding."
    assert [(m.tool_call_id, m.content) for m in response.tool_messages] == [
        ("c1", "3"),
        ("c2", "7"),
    ]
    assert decoded_on
    assert threading.get_ident() not in decoded_on


@pytest.mark.timeout(30)
def test_sync_code_drives_client_streams_and_turns_on_a_background_loop(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    """No loop on the calling thread: ``subscribe_on(AsyncIOThreadSafeScheduler(loop))``
    runs streams and turns on a background loop, ``.run()`` blocks for the result, and a
    dispose from the calling thread closes the connection at once."""
    background = AsyncIOThreadSafeScheduler(loop_thread)
    with LLMServer.in_thread() as server:
        client = OpenAIChatClient(server.url)
        try:
            server.enqueue(Reply(text="hello"))
            response = (
                client.stream(USER)
                .pipe(rx.subscribe_on(background), ops.convert(), ops.aggregate())
                .run()
            )
            assert response.text == "hello"

            server.enqueue(
                Reply(tool_calls=[ToolCallSpec("add", {"a": 2, "b": 3})]), Reply(text="5")
            )
            turn = Agent(client, tools=[add]).run("2 + 3?")
            response = turn.pipe(rx.subscribe_on(background), ops.aggregate()).run()
            assert (response.text, [m.content for m in response.tool_messages]) == ("5", ["5"])

            server.enqueue(SLOW)
            first = threading.Event()
            ended: list[object] = []
            subscription = (
                client.stream(USER)
                .pipe(rx.subscribe_on(background))
                .subscribe(lambda _: first.set(), ended.append, lambda: ended.append("done"))
            )
            assert first.wait(5)
            subscription.dispose()
            deadline = time.monotonic() + PROMPT
            while server.open_connections and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.open_connections == 0
            assert ended == []
        finally:
            asyncio.run_coroutine_threadsafe(client.aclose(), loop_thread).result(10)


@pytest.mark.timeout(60)
def test_the_sync_pipeline_in_many_threads_matches_a_single_threaded_run() -> None:
    """from_sse(bytes) → convert() → aggregate() shares no state between subscriptions:
    16 threads replaying every fixture at once give exactly the single-threaded result."""
    paths = [entry["path"] for entry in MANIFEST]

    def run(path: str) -> str:
        body, dialect = fixture(path)
        try:
            response = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return normalized(response, body)

    expected = {path: run(path) for path in paths}
    work = paths * 4
    barrier = threading.Barrier(16)
    got: dict[int, list[tuple[str, str]]] = collections.defaultdict(list)

    def worker(k: int) -> None:
        barrier.wait(10)
        for path in work[k::16]:
            got[k].append((path, run(path)))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, mid-operator
    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        sys.setswitchinterval(old)
    pairs = [pair for k in range(16) for pair in got[k]]
    assert len(pairs) == len(work)
    assert [path for path, text in pairs if text != expected[path]] == []


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_collect_agent_response_over_a_stream_read_on_a_thread_pool(
    pool: ThreadPoolScheduler,
) -> None:
    """from_sse's docs: a bytes body is read "on the scheduler the subscription names";
    awaiting the response of one read on a pool must not wait for an unrelated wake-up
    of the loop."""

    def slowly(update: u.AgentResponseUpdate) -> u.AgentResponseUpdate:
        time.sleep(0.02)  # the loop is asleep in its selector when the stream ends
        return update

    results = from_sse(BODY).pipe(rx.subscribe_on(pool), rx.map(slowly), ops.convert())
    started = time.monotonic()
    task = asyncio.ensure_future(collect_agent_response(results))
    done, _ = await asyncio.wait({task}, timeout=PATIENCE)
    elapsed = time.monotonic() - started
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert done, f"collect_agent_response still waiting {elapsed:.1f} s after the stream ended"
    assert task.result().text == "Hello there."
    assert elapsed < PROMPT


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_an_agent_over_a_client_that_emits_on_a_worker_thread(
    pool: ThreadPoolScheduler,
) -> None:
    """Agent takes "your own" client: one wrapping a blocking SDK emits on a pool thread.
    The turn must end when its stream does."""

    def slowly(update: u.AgentResponseUpdate) -> u.AgentResponseUpdate:
        time.sleep(0.02)
        return update

    class ThreadedClient:
        def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
            updates = [u.TextDelta("Hi from a thread"), u.Finish(FinishReason.STOP)]
            return reactivex.from_iterable(updates).pipe(rx.subscribe_on(pool), rx.map(slowly))

    started = time.monotonic()
    task = asyncio.ensure_future(Agent(ThreadedClient()).send("go"))
    done, _ = await asyncio.wait({task}, timeout=PATIENCE)
    elapsed = time.monotonic() - started
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert done, f"the turn was still running {elapsed:.1f} s after its stream ended"
    assert task.result().text == "Hi from a thread"
    assert elapsed < PROMPT


# ---------------------------------------------------------------- sync tools and approvers


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_twenty_blocking_sync_tools_all_run_at_once_results_in_call_order(
    no_task_leak: None,
) -> None:
    """README: sync tools run on rafrx's threads, as many at once as ``concurrency``.
    A barrier only 20 threads at once can pass proves they all ran together; the
    transcript keeps call start order although they finish in reverse."""
    barrier = threading.Barrier(20, timeout=10)
    threads: set[int] = set()

    def nap(i: int) -> str:
        """Wait for the others, then sleep (the first call longest)."""
        threads.add(threading.get_ident())
        barrier.wait()
        time.sleep(0.05 + 0.02 * (19 - i))
        return f"slept {i}"

    specs = [ToolCallSpec("nap", {"i": i}, id=f"c{i}") for i in range(20)]
    body = render(Reply(tool_calls=specs), "openai-chat")
    emitted: list[str] = []
    started = time.monotonic()
    response = await asyncio.wait_for(
        collect_agent_response(
            from_sse(body).pipe(
                ops.convert(),
                ops.execute_tools([nap], concurrency=20),
                rx.do_action(lambda r: emitted.extend(c.call_id for c in called([r]))),
            )
        ),
        20,
    )
    elapsed = time.monotonic() - started
    serial = sum(0.05 + 0.02 * (19 - i) for i in range(20))  # 5.8 s
    assert elapsed < serial / 3, f"{elapsed:.2f} s: the tools did not run in parallel"
    assert len(threads) == 20
    assert threading.get_ident() not in threads
    assert [m.tool_call_id for m in response.tool_messages] == [f"c{i}" for i in range(20)]
    assert [m.content for m in response.tool_messages] == [f"slept {i}" for i in range(20)]
    assert sorted(emitted) == sorted(f"c{i}" for i in range(20))


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_a_turn_disposed_from_a_ui_thread_while_a_sync_approver_blocks(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    """README: disposing a turn stops it at once, no tool starts after it. The approver's
    thread cannot be interrupted; its late "yes" must not run the tool."""
    asked, release, returned = threading.Event(), threading.Event(), threading.Event()
    ran: list[str] = []

    @tool(requires_approval=True)
    def remove(path: str) -> str:
        """Remove a file."""
        ran.append(path)
        return "removed"

    def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.set()
        release.wait(10)
        returned.set()
        return True

    llm_server.enqueue(Reply(tool_calls=[ToolCallSpec("remove", {"path": "/"})]), Reply(text="no"))
    results: list[AgentResponseResult] = []
    ended: list[object] = []
    async with OpenAIChatClient(llm_server.url) as client:
        subscription = (
            Agent(client, tools=[remove], approver=approver)
            .run("clean up")
            .subscribe(results.append, ended.append, lambda: ended.append("completed"))
        )
        try:
            assert await asyncio.to_thread(asked.wait, 5)
            started = time.monotonic()
            await asyncio.to_thread(subscription.dispose)  # a UI thread's "stop"
            await wait_for(lambda: not rafrx_tasks(), PROMPT)
            assert time.monotonic() - started < PROMPT
        finally:
            release.set()
        assert await asyncio.to_thread(returned.wait, 5)
        await asyncio.sleep(0.3)
    assert ran == []
    assert called(results) == []
    assert ended == []
    assert len(llm_server.requests) == 1
    assert loop_errors == []


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_a_sync_approver_that_blocks_or_raises_keeps_the_loop_free_and_denies(
    no_task_leak: None,
) -> None:
    """A sync approver runs in a worker thread: while it blocks, the loop keeps running
    (another call's tool completes); one that raises denies its call, saying why."""
    ran: list[str] = []
    free_tool_done = threading.Event()

    @tool(requires_approval=True)
    def guarded(name: str) -> str:
        """Needs approval."""
        ran.append(name)
        return f"ran {name}"

    async def free() -> str:
        """Needs nothing."""
        free_tool_done.set()
        return "free"

    def approver(event: ToolApprovalRequestEvent) -> bool:
        if event.arguments["name"] == "boom":
            raise PermissionError("no terminal attached")
        assert free_tool_done.wait(5), "the loop was blocked while the approver waited"
        return True

    calls = (
        ToolCallingContent("c1", "guarded", {"name": "boom"}),
        ToolCallingContent("c2", "guarded", {"name": "ok"}),
        ToolCallingContent("c3", "free", {}),
    )
    results: list[AgentResponseResult] = await asyncio.wait_for(
        reactivex.of(AgentResponseResult(contents=calls)).pipe(
            ops.execute_tools([guarded, free], approver), rx.to_list()
        ),
        PATIENCE,
    )
    outcome = {c.call_id: c for c in called(results)}
    assert outcome["c1"].result is None
    assert outcome["c1"].error is not None
    assert "PermissionError" in outcome["c1"].error
    assert "no terminal attached" in outcome["c1"].error
    assert outcome["c2"].result == "ran ok"
    assert outcome["c3"].result == "free"
    assert ran == ["ok"]


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_an_approval_subject_answered_from_a_ui_thread_runs_the_tool_promptly() -> None:
    """execute_tools' docs: the approver may be "a Subject the UI answers". A UI answers
    on its own thread; the approved call must run right away."""
    answers: Subject[ToolApprovalResponse] = Subject()
    requests: list[ToolApprovalRequestEvent] = []
    answered_at: list[float] = []

    @tool(requires_approval=True)
    def deploy(env: str) -> str:
        """Deploy."""
        return f"deployed {env}"

    def ui(event: ToolApprovalRequestEvent) -> None:
        time.sleep(0.1)  # the user clicks; the loop sleeps in its selector meanwhile
        answered_at.append(time.monotonic())
        answers.on_next(ToolApprovalResponse(event.call_id, True))

    def on_next(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                requests.append(event)
                threading.Thread(target=ui, args=(event,), name="ui").start()

    calling = AgentResponseResult(contents=(ToolCallingContent("c1", "deploy", {"env": "prod"}),))
    task = asyncio.ensure_future(
        collect_agent_response(
            reactivex.of(calling).pipe(ops.execute_tools([deploy], answers), rx.do_action(on_next))
        )
    )
    done, _ = await asyncio.wait({task}, timeout=PATIENCE)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert len(requests) == 1
    assert answered_at
    assert done, "the approved tool had not run 4 s after the UI thread's answer"
    response: AgentResponse = task.result()
    assert [m.content for m in response.tool_messages] == ["deployed prod"]
    assert time.monotonic() - answered_at[0] < PATIENCE


# ---------------------------------------------------------------- the server thread


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_server_thread_enqueue_from_many_threads_while_clients_stream(
    no_task_leak: None,
) -> None:
    """ServerThread: enqueue is thread-safe. 8 threads enqueue 25 replies each while 16
    clients stream: every reply is served exactly once."""
    producers, per_producer = 8, 25
    total = producers * per_producer
    with LLMServer.in_thread(default=Reply(text="default")) as server:
        barrier = threading.Barrier(producers + 1)

        def produce(p: int) -> None:
            barrier.wait(10)
            for k in range(per_producer):
                server.enqueue(Reply(text=f"{p}-{k}"))
                if k % 5 == 0:
                    time.sleep(0.001)

        threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
        for thread in threads:
            thread.start()
        served: list[str] = []
        async with OpenAIChatClient(server.url) as client:

            async def consume() -> None:
                deadline = time.monotonic() + 20
                while sum(t != "default" for t in served) < total:
                    assert time.monotonic() < deadline, f"{len(served)} served"
                    stream = client.stream(USER).pipe(ops.convert())
                    served.append((await collect_agent_response(stream)).text)

            await asyncio.to_thread(barrier.wait, 10)
            await asyncio.gather(*(consume() for _ in range(16)))
        for thread in threads:
            thread.join(10)
        replies = collections.Counter(t for t in served if t != "default")
        assert len(replies) == total
        assert set(replies.values()) == {1}
        assert server.queued == 0


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_server_thread_stopped_while_requests_stream_ends_them_with_typed_errors(
    no_task_leak: None, loop_errors: list[dict[str, Any]]
) -> None:
    thread = LLMServer.in_thread(default=SLOW)
    server = thread.start()
    try:
        async with OpenAIChatClient(server.url) as client:

            async def one() -> object:
                try:
                    return await collect_agent_response(client.stream(USER).pipe(ops.convert()))
                except RafrxError as error:
                    return error

            tasks = [asyncio.ensure_future(one()) for _ in range(5)]
            await asyncio.to_thread(thread.run, server.wait_requests(5), 10)
            await asyncio.sleep(0.1)
            started = time.monotonic()
            await asyncio.to_thread(thread.stop)
            stopped = time.monotonic() - started
            outcomes = await asyncio.wait_for(asyncio.gather(*tasks), PROMPT)
            ended = time.monotonic() - started
    finally:
        thread.stop()
    assert stopped < PROMPT
    assert ended < PROMPT
    assert all(isinstance(o, RafrxError) for o in outcomes), outcomes
    assert not any(t.name == "rafrx-llm-server" for t in threading.enumerate())
    assert loop_errors == []


# ---------------------------------------------------------------- one client, many loops


class _YieldingLoop(asyncio.SelectorEventLoop):
    """A loop whose ``is_closed()`` lets other threads run once it is closed (as any
    method may: a GIL switch can come between two bytecodes), widening the window in
    which a pruning of closed loops from shared state races another thread's."""

    def is_closed(self) -> bool:
        closed = super().is_closed()
        if closed:
            time.sleep(0.0005)
        return closed


@pytest.mark.timeout(60)
def test_one_client_shared_by_threads_each_running_their_own_loop() -> None:
    """SessionPool keeps "one session per event loop": a client shared by worker threads
    that each run a call on a loop of their own. Every call to a closed port must fail
    with the TransportError it is, never with the pool's own bookkeeping error. (Seen
    with stock loops too, under load; the loop here only makes the race certain.)"""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: connections are refused
    client = OpenAIChatClient(f"http://127.0.0.1:{port}")
    unexpected: list[str] = []
    stop = threading.Event()
    barrier = threading.Barrier(8)

    async def one() -> None:
        with contextlib.suppress(TransportError):  # what a refused connection is
            await collect_agent_response(client.stream(USER).pipe(ops.convert()))

    def worker() -> None:
        barrier.wait(10)
        for _ in range(60):
            if stop.is_set():
                return
            try:
                with asyncio.Runner(loop_factory=_YieldingLoop) as runner:
                    runner.run(one())
            except Exception as exc:
                unexpected.append(f"{type(exc).__name__}: {exc}")
                stop.set()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(50)
    assert unexpected == []


# ---------------------------------------------------------------- notebook


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_awaiting_a_live_view_of_a_stream_that_ends_on_a_worker_thread(
    pool: ThreadPoolScheduler,
) -> None:
    """``await live(obs)`` gives the response when the stream ends, whatever thread it
    ends on (a replay read on a pool, a thread-based client)."""

    def slowly(update: u.AgentResponseUpdate) -> u.AgentResponseUpdate:
        time.sleep(0.02)
        return update

    view = live(
        from_sse(BODY).pipe(rx.subscribe_on(pool), rx.map(slowly)),
        display=text_display(io.StringIO()),
    )
    started = time.monotonic()

    async def wait() -> AgentResponse:
        return await view

    task = asyncio.ensure_future(wait())
    done, _ = await asyncio.wait({task}, timeout=PATIENCE)
    elapsed = time.monotonic() - started
    if not done:
        view.dispose()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert view.done
    assert done, f"await view still waiting {elapsed:.1f} s after the stream ended"
    assert task.result().text == "Hello there."
    assert elapsed < PROMPT
