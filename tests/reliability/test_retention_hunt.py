"""Retention over long use: what a server running many agent turns, or a notebook left
open, keeps alive.

The rule: memory per stream is bounded by what it must keep (the text and arguments
themselves, what history must hold), with no per-delta object retention beyond that;
nothing leaks a task, a socket or a response; a failure kept for later (its error, its
``.partial``) holds the turn, not the connection, the client or the agent.

Every check is a count after ``gc.collect()``, a weak reference, a reachability walk
(``gc.get_referents``) or a ``tracemalloc`` ratio with generous bounds: none is timed.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import io
import sys
import tracemalloc
import types
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
import pytest_asyncio
from reactivex import Observable

from rafrx import ChatMessage
from rafrx import operators as ops
from rafrx.agent import _RUNNING as RUNNING_TURNS
from rafrx.agent import Agent
from rafrx.content import TextContent, ToolCallArgsProgressContent
from rafrx.errors import RafrxError
from rafrx.history import InMemoryHistoryProvider
from rafrx.notebook import live, text_display
from rafrx.operators._aggregate import ResponseAggregator
from rafrx.operators._execute_tools import _RUNNING as RUNNING_TOOLS
from rafrx.recorder import record
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIChatClient, RetryPolicy, Timeouts
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec, render_events

KEY = "sk-retention-0123456789abcdefghij"
KiB = 1024
MiB = 1024 * KiB
FAST = Timeouts(connect=5.0, first_byte=1.0, idle=0.2)
#: A long text, streamed in many small deltas, whose body is cut after 150 KB.
LONG = "lorem ipsum " * (400_000 // 12)


# ---------------------------------------------------------------- helpers


@pytest_asyncio.fixture
async def server(no_task_leak: None) -> AsyncIterator[LLMServer]:
    async with LLMServer() as llm:
        llm.keep_requests = 0  # the test server's own record of requests stays empty
        yield llm


_BASELINE: collections.Counter[type] = collections.Counter()


@pytest.fixture(autouse=True)
def _baseline() -> Iterator[None]:
    """The live objects by type as the test starts: what earlier tests of the same
    process left (a hypothesis example, a module's list) is not this test's."""
    gc.collect()
    _BASELINE.clear()
    _BASELINE.update(type(o) for o in gc.get_objects())
    yield
    _BASELINE.clear()


def live_count(*kinds: type) -> int:
    """How many more live, GC-tracked objects are instances of ``kinds`` than when
    the test started."""
    now = sum(1 for o in gc.get_objects() if isinstance(o, kinds))
    return now - sum(n for kind, n in _BASELINE.items() if issubclass(kind, kinds))


def rafrx_type_counts() -> collections.Counter[str]:
    """Live GC-tracked objects of rafrx's and aiohttp's types, by type name."""
    counts: collections.Counter[str] = collections.Counter()
    for o in gc.get_objects():
        module = getattr(type(o), "__module__", None)
        if isinstance(module, str) and module.startswith(("rafrx", "aiohttp")):
            counts[f"{module}.{type(o).__qualname__}"] += 1
    return counts


def reachable(root: object) -> list[object]:
    """Every object reachable from ``root`` through ``gc.get_referents``, without going
    into modules, classes, module namespaces (a function's globals) or the event loop
    (from which everything running is reachable)."""
    namespaces = {id(vars(m)) for m in list(sys.modules.values()) if m is not None}
    seen = {id(root)}
    stack = [root]
    found: list[object] = []
    while stack:
        obj = stack.pop()
        found.append(obj)
        for ref in gc.get_referents(obj):
            if id(ref) in seen:
                continue
            seen.add(id(ref))
            if id(ref) in namespaces or isinstance(
                ref, (type, types.ModuleType, asyncio.AbstractEventLoop)
            ):
                continue
            stack.append(ref)
    return found


def describe(objs: Iterable[object]) -> str:
    """The rafrx and aiohttp objects and the big byte strings among ``objs``."""
    counts: collections.Counter[str] = collections.Counter()
    for o in objs:
        module = getattr(type(o), "__module__", None)
        if isinstance(module, str) and module.startswith(("rafrx", "aiohttp")):
            counts[f"{module}.{type(o).__qualname__}"] += 1
        elif isinstance(o, (bytes, bytearray)) and len(o) > 8 * KiB:
            counts[f"bytes({len(o)})"] += 1
        elif isinstance(o, types.FrameType):
            counts[f"frame {o.f_code.co_qualname}"] += 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))


async def settle() -> None:
    """Let finished tasks, closing transports and done-callbacks run."""
    for _ in range(5):
        await asyncio.sleep(0.01)


async def outcome(observable: Observable[Any]) -> tuple[list[Any], Exception | None]:
    """Subscribe, wait for the end; the items and the error (caught by an ``on_error``
    callback, so the error's traceback holds only the frames it was raised through)."""
    items: list[Any] = []
    errors: list[Exception] = []
    done = asyncio.get_running_loop().create_future()

    def on_error(error: Exception) -> None:
        errors.append(error)
        done.set_result(None)

    observable.subscribe(items.append, on_error, lambda: done.set_result(None))
    await done
    return items, (errors[0] if errors else None)


def traced(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """Run ``fn`` under tracemalloc: its result, what stays allocated after a
    collection, and the peak (both relative to the start)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, current - base, peak - base


def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return f"Sunny in {city}, 21 °C."


def asks_weather(request: Any) -> Reply:
    """The model calls ``weather`` first, then answers from the tool result."""
    if request.messages[-1]["role"] == "tool":
        return Reply(text="It is sunny there, 21 degrees. " * 4, chunk_size=4)
    return Reply(
        text="Let me check.",
        tool_calls=[ToolCallSpec("weather", {"city": "Paris"})],
        chunk_size=3,
    )


# ---------------------------------------------------------------- agent turns


@pytest.mark.asyncio
async def test_a_hundred_agent_turns_keep_only_the_history(server: LLMServer) -> None:
    """A server runs 100 turns (each with a tool call) of one Agent with an in-memory
    history: after each, what stays alive is the history's messages; no result, chunk,
    aggregator, turn, task or aiohttp response of a finished turn, and the memory
    traced from turn 20 to turn 100 grows by about what the history holds."""
    server.script(asks_weather)
    history = InMemoryHistoryProvider()
    async with OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST) as client:
        agent = Agent(client, tools=[weather], history=history)
        for n in range(1, 21):
            response = await agent.send(f"Weather, question {n}?")
        assert response.tool_messages[0].content == "Sunny in Paris, 21 °C."
        del response
        await settle()
        gc.collect()
        tasks = len(asyncio.all_tasks())
        before = rafrx_type_counts()
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            for n in range(21, 101):
                response = await agent.send(f"Weather, question {n}?")
                assert response.text.endswith("21 degrees. ")
            del response
            await settle()
            gc.collect()
            growth = tracemalloc.get_traced_memory()[0] - start
        finally:
            tracemalloc.stop()
        after = rafrx_type_counts()
        saved = history.messages
        assert len(saved) == 400  # user, assistant (call), tool, assistant per turn
        grown = {k: after[k] - before[k] for k in after if after[k] > before[k]}
        # 80 turns x 4 messages (and their tool calls) are all that may grow.
        allowed = {"rafrx.messages.ChatMessage": 320, "rafrx.messages.ToolCall": 80}
        extra = {k: v for k, v in grown.items() if v > allowed.get(k, 2)}
        assert not extra, f"grew over 80 turns: {extra}"
        for kind in (
            AgentResponseResult,
            AgentResponse,
            ResponseAggregator,
            aiohttp.ClientResponse,
        ):
            assert live_count(kind) == 0, kind
        assert len(asyncio.all_tasks()) <= tasks
        assert not RUNNING_TURNS
        assert not RUNNING_TOOLS
        assert not agent._turns
        assert not agent._history_access.saving
        history_bytes = sum(len(m.content or "") for m in saved[80:])
        # ~1 KB per message of object overhead is generous; a turn's results kept would
        # be ~100 chunks a turn.
        assert growth < 4 * history_bytes + 320 * 1200 + 64 * KiB, (growth, history_bytes)


@pytest.mark.asyncio
async def test_a_finished_turn_and_its_results_die(server: LLMServer) -> None:
    """A notebook runs a turn with a tool, watching every result; once it drops them
    and the turn has ended, each result, the response, the tool's arguments and the
    turn's observer are gone (weak references), while history keeps its messages."""
    server.script(asks_weather)
    history = InMemoryHistoryProvider()
    refs: list[weakref.ref[Any]] = []

    class Watcher:
        """An observer the user subscribes; it keeps nothing."""

        def __init__(self, done: asyncio.Future[None]) -> None:
            self.done = done
            self.count = 0

        def on_next(self, result: AgentResponseResult) -> None:
            refs.append(weakref.ref(result))
            self.count += 1

        def on_error(self, error: Exception) -> None:
            self.done.set_exception(error)

        def on_completed(self) -> None:
            self.done.set_result(None)

    async with OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST) as client:
        agent = Agent(client, tools=[weather], history=history)
        await agent.send("warm up")
        for _ in range(3):
            done = asyncio.get_running_loop().create_future()
            watcher = Watcher(done)
            subscription = agent.run("Weather in Paris?").subscribe(watcher)
            await done
            assert watcher.count > 10
            refs.append(weakref.ref(watcher))
            del watcher, subscription, done
        response = await agent.send("And now?")
        refs.append(weakref.ref(response))
        del response
        await settle()
        gc.collect()
        alive = [r() for r in refs if r() is not None]
        assert not alive, f"{len(alive)} of {len(refs)} still alive: {alive[:3]!r}"
        assert len(history.messages) == 4 * 5


# ---------------------------------------------------------------- failures


def failures() -> list[Reply | Fault]:
    """One of each way a stream fails, with a long text before the failure."""
    body = Reply(text=LONG, chunk_size=64)
    return [
        Fault.status(500, body="x" * 200_000),
        Fault.drop_after(150_000, body=body),
        Fault.stall(2.0, after_bytes=150_000, body=body),
        Fault.garbage(b"data: {this is not json\n\n"),
        Reply(text="fine, this one works", chunk_size=4),
    ]


@pytest.mark.asyncio
async def test_many_failed_streams_of_one_client_do_not_pile_up(server: LLMServer) -> None:
    """A server's client streams 36 times, 4 in 5 of them failing (HTTP 500, dropped
    connection, idle timeout, malformed event) or disposed mid-stream, some with
    retries; once the errors are dropped nothing of them is alive: no aiohttp response,
    no task, at most the one keep-alive connection, and memory does not grow."""
    retry = RetryPolicy(max_attempts=2, initial_backoff=0.001, jitter=False)
    async with OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST, retry=retry) as client:

        async def one_round() -> None:
            for reply in failures():
                server.enqueue(reply, reply)  # (a retry gets the same)
                _, error = await outcome(
                    client.stream([ChatMessage.user("hi")]).pipe(ops.convert(), ops.aggregate())
                )
                assert (error is None) == isinstance(reply, Reply), error
                server.reset()
            server.enqueue(Reply(text="slowly " * 2000, chunk_size=8, delay=0.001))
            items: list[Any] = []
            subscription = client.stream([ChatMessage.user("long")]).subscribe(
                items.append, lambda _: None
            )
            for _ in range(400):  # (a bound, not a timing: 20 updates come long before)
                if len(items) >= 20:
                    break
                await asyncio.sleep(0.005)
            assert len(items) >= 20
            subscription.dispose()
            server.reset()

        await one_round()
        await settle()
        gc.collect()
        tasks = len(asyncio.all_tasks())
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            for _ in range(5):
                await one_round()
            await settle()
            gc.collect()
            growth = tracemalloc.get_traced_memory()[0] - start
        finally:
            tracemalloc.stop()
        assert live_count(aiohttp.ClientResponse) == 0
        assert live_count(RafrxError) == 0
        assert len(asyncio.all_tasks()) <= tasks
        await server.wait_until(lambda: server.open_connections <= 1, 2.0)
    # 30 streams: a 150 KB body or a 200 KB error kept per stream would be megabytes.
    assert growth < 256 * KiB, growth


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["dropped", "idle-timeout", "http-500"])
async def test_a_kept_stream_error_holds_no_connection_nor_body(
    server: LLMServer, kind: str
) -> None:
    """A server keeps the last error of a failed stream, closes the client and drops
    it: the error (and its ``.partial``) must not keep the aiohttp response, session,
    the stream's call or the raw body chunks alive."""
    body = Reply(text=LONG, chunk_size=64)
    fault = {
        "dropped": Fault.drop_after(150_000, body=body),
        "idle-timeout": Fault.stall(2.0, after_bytes=150_000, body=body),
        "http-500": Fault.status(500, body="x" * 200_000),
    }[kind]
    server.enqueue(fault)
    client = OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST)
    _, error = await outcome(
        client.stream([ChatMessage.user("hi")]).pipe(ops.convert(), ops.aggregate())
    )
    await client.aclose()
    client_ref = weakref.ref(client)
    del client
    await settle()
    gc.collect()
    assert isinstance(error, RafrxError)
    assert client_ref() is None
    held = reachable(error)
    bad = [
        o
        for o in held
        if isinstance(o, (aiohttp.ClientResponse, aiohttp.ClientSession))
        or (type(o).__module__ == "rafrx.sources._http" and type(o).__name__ == "_StreamCall")
        or (isinstance(o, (bytes, bytearray)) and len(o) > 8 * KiB)
    ]
    assert not bad, f"a kept {type(error).__name__} holds: {describe(held)}"


@pytest.mark.asyncio
async def test_a_kept_agent_turn_error_does_not_keep_the_agent(server: LLMServer) -> None:
    """A server keeps the error of a failed agent turn (its ``.partial`` shows what
    came), then drops the agent, its client and its history: they must die."""
    server.enqueue(Fault.drop_after(150_000, body=Reply(text=LONG, chunk_size=64)))
    client = OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST)
    history = InMemoryHistoryProvider([ChatMessage.user("x" * 100_000)])
    agent = Agent(client, history=history)
    _, error = await outcome(agent.run("hello"))
    await client.aclose()
    assert isinstance(error, RafrxError)
    assert error.partial is not None
    assert error.partial.text.startswith("lorem ipsum")
    refs = {
        "agent": weakref.ref(agent),
        "client": weakref.ref(client),
        "history": weakref.ref(history),
    }
    del agent, client, history
    await settle()
    gc.collect()
    alive = [name for name, ref in refs.items() if ref() is not None]
    assert not alive, f"the kept error keeps {alive} alive: {describe(reachable(error))}"


@pytest.mark.asyncio
async def test_a_failing_tool_s_exception_and_its_frame_die(server: LLMServer) -> None:
    """A tool raises while holding a big object; the model reads the error and answers.
    After the turn, the exception, its frame's big local and the results are gone."""
    refs: list[weakref.ref[Any]] = []

    class ForecastError(Exception):
        """The tool's failure (weakly referable)."""

    class Big:
        """A large buffer the tool holds when it fails."""

        def __init__(self) -> None:
            self.data = bytearray(2 * MiB)

    def weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city.
        """
        buffer = Big()
        refs.append(weakref.ref(buffer))
        error = ForecastError(f"no forecast for {city}")
        refs.append(weakref.ref(error))
        raise error

    def script(request: Any) -> Reply:
        if request.messages[-1]["role"] == "tool":
            return Reply(text="The forecast failed.")
        return Reply(tool_calls=[ToolCallSpec("weather", {"city": "Paris"})])

    server.script(script)
    history = InMemoryHistoryProvider()
    async with OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST) as client:
        agent = Agent(client, tools=[weather], history=history)
        for _ in range(3):
            response = await agent.send("Weather?")
            assert "no forecast for Paris" in (response.tool_messages[0].content or "")
        del response
        await settle()
        gc.collect()
        assert len(refs) == 6
        alive = [r() for r in refs if r() is not None]
        assert not alive, alive


# ---------------------------------------------------------------- long streams


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "openai-responses"])
def test_a_long_text_stream_costs_memory_linear_in_the_text(dialect: str) -> None:
    """A user aggregates a 1 MB answer streamed in 65,536 deltas of 16 characters: the
    peak is a small multiple of the text and the response keeps about twice the text
    (its text and its transcript), not an object per delta."""
    text = "abcdefghijklmno " * (MiB // 16)
    events = render_events(Reply(text=text, chunk_size=16), dialect)
    body_size = sum(len(e) for e in events)

    def run() -> AgentResponse:
        return from_sse(events, dialect).pipe(ops.convert(), ops.aggregate()).run()

    response, kept, peak = traced(run)
    assert response.text == text
    assert live_count(TextContent, AgentResponseResult) == 0
    # (65,536 TextContent chunks kept would be > 10 MB)
    assert kept < 3 * len(text) + 256 * KiB, kept
    assert peak < 6 * len(text) + MiB, (peak, body_size)


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic"])
def test_a_1_mb_tool_argument_keeps_no_progress_chunks(dialect: str) -> None:
    """A model streams a ``write_file`` call whose 1 MB ``content`` comes in 65,536
    deltas (each a ToolCallArgsProgressContent): the peak is a small multiple of the
    argument and what the response keeps is about the argument."""
    content = "x" * MiB
    reply = Reply(tool_calls=[ToolCallSpec("write_file", {"path": "a.txt", "content": content})])
    events = render_events(attrs_evolve_chunk(reply, 16), dialect)

    def run() -> AgentResponse:
        return from_sse(events, dialect).pipe(ops.convert(), ops.aggregate()).run()

    response, kept, peak = traced(run)
    assert response.tool_calls[0].arguments == {"path": "a.txt", "content": content}
    assert live_count(ToolCallArgsProgressContent, AgentResponseResult) == 0
    assert kept < 3 * MiB, kept
    assert peak < 10 * MiB, peak


def attrs_evolve_chunk(reply: Reply, chunk_size: int) -> Reply:
    """``reply`` with another ``chunk_size``."""
    return attrs.evolve(reply, chunk_size=chunk_size)


def test_a_live_view_over_a_long_stream_keeps_no_deltas() -> None:
    """A notebook shows a 512 KB answer (32,768 deltas) and a 256 KB tool argument in a
    live view and keeps the view: what it keeps is a few copies of the text (its
    state, its response), no chunk and no per-delta object."""
    text = "abcdefghijklmno " * (512 * KiB // 16)
    arg = "y" * (256 * KiB)
    reply = Reply(
        text=text,
        tool_calls=[ToolCallSpec("write_file", {"path": "a", "content": arg})],
        chunk_size=16,
    )
    events = render_events(reply, "anthropic")
    out = io.StringIO()

    def run() -> Any:
        return live(from_sse(events, "anthropic").pipe(ops.convert()), display=text_display(out))

    view, kept, peak = traced(run)
    assert view.done
    assert view.response.text == text
    assert view.state.items > 30_000
    assert live_count(TextContent, ToolCallArgsProgressContent, AgentResponseResult) == 0
    size = len(text) + len(arg)
    assert kept < 6 * size + 512 * KiB, kept
    assert peak < 10 * size + MiB, peak


def test_recording_a_long_stream_keeps_no_deltas(tmp_path: Path) -> None:
    """A user records a 128 KB answer in 8,192 deltas (and a 64 KB argument) to a
    file while aggregating it: the recorder holds no delta once written, so the peak
    stays a small multiple of the text and nothing of the stream stays but the
    response; the file has every delta."""
    text = "abcdefghijklmno " * (128 * KiB // 16)
    arg = "z" * (64 * KiB)
    reply = Reply(
        text=text,
        tool_calls=[ToolCallSpec("write_file", {"path": "a", "content": arg})],
        chunk_size=16,
    )
    events = render_events(reply, "openai-chat")
    path = tmp_path / "turn.jsonl"

    def run() -> AgentResponse:
        results = from_sse(events, "openai-chat").pipe(ops.convert())
        return record(results, path).pipe(ops.aggregate()).run()

    response, kept, peak = traced(run)
    assert response.text == text
    assert live_count(TextContent, AgentResponseResult) == 0
    size = len(text) + len(arg)
    assert kept < 5 * size + 256 * KiB, kept
    assert peak < 12 * size + MiB, peak
    lines = path.read_text("utf-8").count("\n")
    assert lines > 8_192


@pytest.mark.asyncio
async def test_live_views_of_many_turns_over_http_do_not_pile_up(server: LLMServer) -> None:
    """A notebook left open runs 40 live views of streamed answers and drops each view:
    no view, state, aggregator, response or aiohttp response of them stays alive."""
    server.default = Reply(text="A live answer, streamed slowly. " * 20, chunk_size=5)
    refs: list[weakref.ref[Any]] = []
    async with OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST) as client:
        for _ in range(40):
            view = live(
                client.stream([ChatMessage.user("hi")]), display=text_display(io.StringIO())
            )
            response = await view
            assert response.text.startswith("A live answer")
            refs.append(weakref.ref(view))
            refs.append(weakref.ref(response))
            del view, response
        await settle()
        gc.collect()
        alive = [r() for r in refs if r() is not None]
        assert not alive, alive[:3]
        assert live_count(aiohttp.ClientResponse, ResponseAggregator, AgentResponse) == 0


# ---------------------------------------------------------------- module-level state


@pytest.mark.asyncio
async def test_module_level_state_does_not_grow_per_stream(server: LLMServer) -> None:
    """A server streams with many clients (each its own key) and agents, some turns
    disposed mid-way: rafrx's module-level task sets end empty and its caches stay
    within their bounds."""
    from rafrx import _redaction, _schema_check

    server.script(asks_weather)
    for n in range(30):
        async with OpenAIChatClient(
            server.url, f"sk-user-{n:04d}-abcdefghijklmnop", model="m"
        ) as client:
            agent = Agent(client, tools=[weather])
            if n % 3 == 0:
                subscription = agent.run("Weather?").subscribe(lambda _: None, lambda _: None)
                await asyncio.sleep(0)
                subscription.dispose()
            else:
                await agent.send("Weather?")
            server.enqueue(Fault.status(401))
            _, error = await outcome(client.stream([ChatMessage.user("hi")]))
            assert isinstance(error, RafrxError)
            del error
        del agent, client
    await settle()
    gc.collect()
    assert not RUNNING_TURNS
    assert not RUNNING_TOOLS
    assert _redaction._forms.cache_info().currsize <= 256
    assert _schema_check._compiled.cache_info().currsize <= 256
    assert live_count(Agent, OpenAIChatClient, aiohttp.ClientSession) == 0


def test_a_turn_s_results_die_while_a_sync_source_is_reused() -> None:
    """The same body replayed through ``convert()`` 200 times (as a test or a replay
    loop does): no result of an ended subscription stays alive."""
    events = render_events(Reply(text="hello world " * 50, chunk_size=4), "openai-chat")
    source = from_sse(events, "openai-chat").pipe(ops.convert())
    gc.collect()
    before = live_count(AgentResponseResult, TextContent)
    for _ in range(200):
        results: list[Any] = []
        source.subscribe(results.append)
        assert len(results) > 100
    del results
    gc.collect()
    assert live_count(AgentResponseResult, TextContent) <= before
