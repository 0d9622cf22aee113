"""Failure paths leave no reference cycles: what a failed stream, turn or tool call
made is freed by reference counting alone, without the cyclic garbage collector.

A raised exception's traceback holds every frame it passed through, and each frame
its locals; when a local (the variable the error was raised from, an object keeping
the error to raise it again, a future holding it, a task that failed with it) leads
back to the error, the failure is a cycle. Only the cycle collector frees it, maybe
much later, and with it everything those frames hold: the call, its session pool and
aiohttp session, the observer chain, the agent. A client dropped after an idle
timeout then closes its connections only when the GC happens to run.

Each test runs its scenario with the GC disabled (after a collection), lets the event
loop settle, drops every reference it holds (a caught error is kept only as a weak
reference, its type and message), then checks two things without collecting: that
the weak references (the error, the client, the agent, the tool ...) are dead; and,
collecting with ``gc.DEBUG_SAVEALL``, that no rafrx object and no frame of rafrx's
code (``rafrx.testing``, the scripted server, excluded) sits on a strongly connected
component of the cyclic garbage the scenario made. Cycles wholly inside aiohttp or
asyncio, with no rafrx object on them, do not count. A failure message names the
rafrx frames (file:line where they stopped) and objects of each cycle found.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import traceback
import types
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import reactivex

import rafrx
import rafrx._cycles
from rafrx import ChatMessage, FinishReason
from rafrx import operators as ops
from rafrx.agent import Agent
from rafrx.errors import ProviderError, RafrxError, ToolExecutionError, ToolTimeout
from rafrx.sources import UpdateDecoder, from_sse
from rafrx.sources.clients import OpenAIChatClient, Timeouts
from rafrx.sse import SSEDecoder
from rafrx.testing import Fault, LLMServer, Replay, Reply, ToolCallSpec, render, render_events
from rafrx.tools import Tool, tool

KEY = "sk-cycles-0123456789abcdefghij"
USER = [ChatMessage.user("Tell me a story.")]
FAST = Timeouts(connect=5.0, first_byte=0.5, idle=0.2)

RAFRX_DIR = str(Path(rafrx.__file__).resolve().parent) + os.sep
TESTING_DIR = RAFRX_DIR + "testing" + os.sep

EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "Once"}}]}\n\n'
MALFORMED = b"data: {this is not json\n\n"
STORY = Reply(text="Once upon a time there was a stream that broke.", chunk_size=4)
FIRST_EVENT = len(render_events(STORY, "openai-chat", {})[0])


# ---------------------------------------------------------------- cyclic garbage


def _rafrx_code(code: object) -> bool:
    return (
        isinstance(code, types.CodeType)
        and code.co_filename.startswith(RAFRX_DIR)
        and not code.co_filename.startswith(TESTING_DIR)
    )


def _where(code: types.CodeType, line: int | None = None) -> str:
    path = "rafrx/" + code.co_filename[len(RAFRX_DIR) :].replace(os.sep, "/")
    at = "" if line is None else f":{line}"
    return f"{path}{at} {code.co_qualname}"


def rafrx_label(obj: object) -> str | None:
    """What ``obj`` is when it is rafrx's (a frame or function of its code, an instance
    of one of its types), else ``None``."""
    if isinstance(obj, types.FrameType):
        code = obj.f_code
        return f"frame {_where(code, obj.f_lineno)}" if _rafrx_code(code) else None
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    code = None
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
    elif isinstance(obj, types.CoroutineType):
        code = obj.cr_code
    elif isinstance(obj, types.GeneratorType):
        code = obj.gi_code
    elif isinstance(obj, types.AsyncGeneratorType):
        code = obj.ag_code
    if code is not None:
        return f"{type(obj).__name__} {_where(code)}" if _rafrx_code(code) else None
    module = getattr(type(obj), "__module__", None)
    if not isinstance(module, str):  # (a class's own __module__ descriptor)
        return None
    if module.startswith("rafrx") and not module.startswith("rafrx.testing"):
        return f"{module}.{type(obj).__qualname__}"
    return None


def _cycles(objects: Sequence[object], nodes: Sequence[int]) -> list[list[int]]:
    """The strongly connected components of ``nodes`` (indexes into ``objects``) that
    hold a cycle (more than one object, or one referring to itself); iterative Tarjan."""
    where = {id(objects[n]): n for n in nodes}
    edges = {
        n: [where[id(r)] for r in gc.get_referents(objects[n]) if id(r) in where] for n in nodes
    }
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    found: list[list[int]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, 0)]
        while work:
            node, i = work[-1]
            if i < len(edges[node]):
                work[-1] = (node, i + 1)
                nxt = edges[node][i]
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    found.append(component)
    return found


def rafrx_cycles() -> list[str]:
    """Collect (saving all garbage) and describe each cycle with rafrx objects on it.

    The garbage is the cycles made since the GC was disabled (it was collected just
    before). A cycle that is one also without its rafrx objects (aiohttp's own, with a
    rafrx frame in the traceback it keeps) is told apart: rafrx's objects still wait
    for the GC on it.
    """
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        collect_quietly()
        garbage = list(gc.garbage)
        gc.garbage.clear()
    finally:
        gc.set_debug(flags)
    try:
        found = []
        for component in _cycles(garbage, range(len(garbage))):
            labels = {n: rafrx_label(garbage[n]) for n in component}
            ours = sorted({label for label in labels.values() if label})
            if not ours:
                continue  # aiohttp's, asyncio's or the scripted server's alone
            counts: dict[str, int] = {}
            for n in component:
                if labels[n] is None:
                    name = type(garbage[n]).__name__
                    counts[name] = counts.get(name, 0) + 1
            others = ", ".join(f"{name} x{count}" for name, count in sorted(counts.items()))
            foreign = _cycles(garbage, [n for n in component if labels[n] is None])
            note = " [also a cycle without rafrx's objects, which sit on it]" if foreign else ""
            found.append(f"{len(component)} objects{note}: {'; '.join(ours)} + {others}")
        return found
    finally:
        del garbage  # (cycles again: the next collection frees them)


def collect_quietly() -> None:
    """``gc.collect()``, with aiohttp's "Unclosed client session" from ``__del__`` ignored:
    a session a cycle kept is finalized by the GC before rafrx's async generator closes
    it on the loop (the symptom of the cycles these tests look for, which they report)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@contextlib.asynccontextmanager
async def gc_off() -> AsyncIterator[None]:
    """The GC disabled after a collection (the measured part), enabled again after."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        collect_quietly()  # what a failing test left; its sessions close on the loop
        await settle()


async def settle(rounds: int = 20) -> None:
    """Let done callbacks and closing transports run (never collecting)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def eventually(predicate: Callable[[], bool], timeout: float = 1.0) -> bool:
    """Whether ``predicate`` holds within ``timeout`` seconds (polling, never collecting)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            return False
        await asyncio.sleep(0.005)
    return True


async def settle_threads(refs: dict[str, weakref.ref[Any]]) -> None:
    """:func:`settle`, then up to a second (never collecting) for the referents to die: a
    sync tool's worker thread drops the call it ran only when it runs again, which a
    loaded machine may delay. Something on a cycle never dies without the GC."""
    await settle()
    await eventually(lambda: all(ref() is None for ref in refs.values()))


def assert_freed(refs: dict[str, weakref.ref[Any]]) -> None:
    """Every referent dead without the GC, and no rafrx object on cyclic garbage."""
    alive = sorted(name for name, ref in refs.items() if ref() is not None)
    cycles = rafrx_cycles()
    report = "\n  ".join(cycles) or "none"
    assert not alive, f"alive until the GC runs: {alive}; cycles with rafrx objects:\n  {report}"
    assert not cycles, f"cycles with rafrx objects:\n  {report}"


# ---------------------------------------------------------------- consumers


class Seen:
    """What a consumer saw of the outcome, holding nothing but weak references."""

    def __init__(self) -> None:
        self.refs: dict[str, weakref.ref[Any]] = {}
        self.error_type: type[BaseException] | None = None
        self.message = ""
        self.session: Any = None  # a strong reference, when a test asks for one

    def caught(self, error: BaseException) -> None:
        self.refs["error"] = weakref.ref(error)
        if error.__cause__ is not None:
            self.refs["error.__cause__"] = weakref.ref(error.__cause__)
        self.error_type = type(error)
        self.message = str(error)

    def keep(self, name: str, value: object) -> None:
        self.refs[name] = weakref.ref(value)


async def observe(source: reactivex.Observable[Any]) -> Seen:
    """Subscribe as a minimal UI would: callbacks that keep no error, until it ends."""
    seen = Seen()
    ended = asyncio.Event()

    def on_error(error: Exception) -> None:
        seen.caught(error)
        ended.set()

    subscription = source.subscribe(on_error=on_error, on_completed=ended.set)
    try:
        async with asyncio.timeout(10):
            await ended.wait()
    finally:
        subscription.dispose()
    return seen


async def collect(source: reactivex.Observable[Any]) -> Seen:
    """``await rafrx.collect_agent_response(source)``, catching its RafrxError."""
    seen = Seen()
    try:
        await rafrx.collect_agent_response(source)
    except RafrxError as error:
        seen.caught(error)
    return seen


async def observe_updates(client: OpenAIChatClient) -> Seen:
    return await observe(client.stream(USER))


async def collect_response(client: OpenAIChatClient) -> Seen:
    return await collect(client.stream(USER).pipe(ops.convert()))


CONSUMERS: dict[str, Callable[[OpenAIChatClient], Awaitable[Seen]]] = {
    "subscribe": observe_updates,
    "collect_agent_response": collect_response,
}


# ---------------------------------------------------------------- HTTP failures


def _faults() -> dict[str, tuple[Callable[[], Fault | Replay] | None, str]]:
    """Server responses that fail the stream (``None``: no server listens), and the
    RafrxError each gives."""
    return {
        "connection-refused": (None, "TransportError"),
        "first-byte-timeout": (lambda: Fault.stall(2.0), "ConnectTimeout"),
        "http-500": (lambda: Fault.status(500), "HTTPStatusError"),
        "http-429": (lambda: Fault.status(429, retry_after=0), "HTTPStatusError"),
        "idle-timeout": (
            lambda: Fault.stall(2.0, after_bytes=FIRST_EVENT, body=STORY),
            "IdleTimeout",
        ),
        "malformed-event": (lambda: Replay(MALFORMED), "MalformedEvent"),
        "malformed-after-an-event": (lambda: Replay(EVENT + MALFORMED), "MalformedEvent"),
        "line-too-long-after-an-event": (
            lambda: Replay(EVENT + b"data: " + b"x" * 4096 + b"\n\n"),
            "LimitExceeded",
        ),
        "dropped-mid-stream": (
            lambda: Fault.drop_after(FIRST_EVENT + 10, body=STORY),
            "StreamInterrupted",
        ),
        "reset-mid-stream": (
            lambda: Fault.drop_after(FIRST_EVENT + 10, body=STORY, reset=True),
            "StreamInterrupted",
        ),
    }


FAULTS = _faults()


def refused_url() -> str:
    """The address of a port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def fail_client(
    server: LLMServer,
    fault: str,
    consume: Callable[[OpenAIChatClient], Awaitable[Seen]],
    *,
    close: bool = True,
) -> Seen:
    """One failing call on a new client, consumed by ``consume``; the client closed
    (unless ``close`` is false) and held only weakly after."""
    make, expected = FAULTS[fault]
    if make is not None:
        server.enqueue(make())
    url = server.url if make is not None else refused_url()
    client = OpenAIChatClient(url, KEY, model="m", timeouts=FAST, max_line_bytes=1024)
    seen = await consume(client)
    if close:
        await client.aclose()
    else:  # rafrx's own: the aiohttp session the client made on this loop
        (seen.session, _), *_ = client._sessions._owned.values()
    seen.keep("client", client)
    assert seen.error_type is not None, "the stream was expected to fail"
    assert seen.error_type.__name__ == expected, (seen.error_type, seen.message)
    return seen


@pytest.mark.asyncio
@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_failed_http_stream_is_freed_without_the_gc(
    llm_server: LLMServer, fault: str, consumer: str
) -> None:
    """The error, the client and every object of the call die by reference counting."""
    async with gc_off():
        seen = await fail_client(llm_server, fault, CONSUMERS[consumer])
        await settle()
        assert_freed(seen.refs)


async def closes(seen: Seen) -> bool:
    """Whether the session ``seen`` holds (let go of here) is closed within a second."""
    session, seen.session = seen.session, None
    return await eventually(lambda: session.closed)


@pytest.mark.asyncio
@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("fault", ["http-500", "idle-timeout", "dropped-mid-stream"])
async def test_a_client_dropped_after_a_failure_closes_its_session_without_the_gc(
    llm_server: LLMServer, fault: str, consumer: str
) -> None:
    """A client dropped (not closed) after a failed call: freeing it ends its session
    pool, whose session then closes on the loop, at once and not at the next GC."""
    async with gc_off():
        seen = await fail_client(llm_server, fault, CONSUMERS[consumer], close=False)
        closed = await closes(seen)
        connections = await eventually(lambda: llm_server.open_connections == 0)
        alive = sorted(name for name, ref in seen.refs.items() if ref() is not None)
        report = "\n  ".join(rafrx_cycles()) or "none"
        assert closed, f"the session stays open until the GC; alive: {alive}; cycles:\n  {report}"
        assert connections, f"{llm_server.open_connections} connection(s) left open"
        assert not alive, f"alive until the GC runs: {alive}; cycles:\n  {report}"


# ---------------------------------------------------------------- decoders (sans IO)


def _decoders() -> dict[str, tuple[Callable[[], Any], bytes]]:
    long_line = EVENT + b"data: " + b"x" * 200
    return {
        "UpdateDecoder-malformed-after-an-event": (UpdateDecoder, EVENT + MALFORMED),
        "UpdateDecoder-line-too-long-after-an-event": (
            lambda: UpdateDecoder(max_line_bytes=64),
            long_line,
        ),
        "SSEDecoder-line-too-long-after-an-event": (
            lambda: SSEDecoder(max_line_bytes=64),
            long_line,
        ),
    }


DECODERS = _decoders()


def _decode(name: str) -> Seen:
    make, body = DECODERS[name]
    seen = Seen()
    decoder = make()  # (slotted without __weakref__: a cycle through it shows as garbage)
    assert decoder.feed(body), "the event before the error comes first"
    try:
        decoder.close()
    except RafrxError as error:
        seen.caught(error)
    return seen


@pytest.mark.asyncio
@pytest.mark.parametrize("decoder", list(DECODERS))
async def test_a_decoder_failing_after_an_event_is_freed_without_the_gc(decoder: str) -> None:
    """An error kept by ``feed()`` and raised by ``close()``: once both are dropped, the
    decoder and the error die by reference counting."""
    async with gc_off():
        seen = _decode(decoder)
        assert seen.error_type is not None
        assert_freed(seen.refs)


# ---------------------------------------------------------------- streams without HTTP


def _sources() -> dict[str, Callable[[], reactivex.Observable[Any]]]:
    overloaded = b'event: error\ndata: {"error": {"type": "overloaded_error"}}\n\n'
    return {
        "from_sse-malformed": lambda: from_sse(MALFORMED),
        "from_sse-malformed-after-an-event": lambda: from_sse(EVENT + MALFORMED),
        "from_sse-truncated": lambda: from_sse(EVENT),
        "from_sse-provider-error": lambda: from_sse(overloaded),
        # Deferred: a reactivex.throw() made up front would itself keep the error, and the
        # frame it is passed to, which its traceback holds, would keep it (a cycle of the
        # caller's making).
        "reactivex.throw": lambda: reactivex.defer(
            lambda _: reactivex.throw(ProviderError("overloaded"))
        ),
    }


SOURCES = _sources()


@pytest.mark.asyncio
@pytest.mark.parametrize("source", list(SOURCES))
async def test_collect_agent_response_of_a_failing_stream_is_freed_without_the_gc(
    source: str,
) -> None:
    """``collect_agent_response`` raising a stream's error: the error (and its
    ``.partial``) die once the caller drops it."""
    async with gc_off():
        seen = await collect(SOURCES[source]().pipe(ops.convert()))
        assert seen.error_type is not None
        await settle()
        assert_freed(seen.refs)


@pytest.mark.asyncio
@pytest.mark.parametrize("source", list(SOURCES))
async def test_a_failing_sync_pipeline_is_freed_without_the_gc(source: str) -> None:
    """``from_sse(...).pipe(convert(), aggregate())`` subscribed with callbacks that keep
    no error: the error dies with the subscription."""
    async with gc_off():
        seen = await observe(SOURCES[source]().pipe(ops.convert(), ops.aggregate()))
        assert seen.error_type is not None
        await settle()
        assert_freed(seen.refs)


# ---------------------------------------------------------------- tools


class Boom(Exception):
    """What the failing tools raise."""


def failing_tool(kind: str, refs: dict[str, weakref.ref[Any]]) -> Tool:
    """A tool that fails: raising Boom (sync or async), or timing out."""

    def note(error: Boom) -> Boom:
        refs["raised"] = weakref.ref(error)
        return error

    if kind == "sync":

        def explode(why: str) -> str:
            """Fail."""
            raise note(Boom(why))

        return tool(explode)
    if kind == "async":

        async def explode_async(why: str) -> str:
            """Fail."""
            await asyncio.sleep(0)
            raise note(Boom(why))

        return tool(explode_async, name="explode")

    async def hang(why: str) -> str:
        """Never answer."""
        await asyncio.sleep(30)
        return why

    return tool(hang, name="explode", timeout=0.02)


async def _invoke(kind: str) -> Seen:
    seen = Seen()
    explode = failing_tool(kind, seen.refs)
    seen.keep("tool", explode)
    try:
        await explode.invoke({"why": "on purpose"})
    except (ToolExecutionError, ToolTimeout) as error:
        seen.caught(error)
    return seen


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["sync", "async", "timeout"])
async def test_a_failing_tool_invoke_is_freed_without_the_gc(kind: str) -> None:
    """``Tool.invoke`` raising ToolExecutionError (or ToolTimeout): the error, its cause
    and the tool die once the caller drops them."""
    async with gc_off():
        seen = await _invoke(kind)
        assert seen.error_type is (ToolTimeout if kind == "timeout" else ToolExecutionError)
        await settle_threads(seen.refs)
        assert_freed(seen.refs)


async def _tool_turn(server: LLMServer, kind: str) -> Seen:
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("explode", {"why": "on purpose"})]),
        Reply(text="The tool failed, sorry."),
    )
    seen = Seen()
    explode = failing_tool(kind, seen.refs)
    async with OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST) as client:
        agent = Agent(client, tools=[explode])
        response = await agent.send("Use the tool.")
        assert response.text == "The tool failed, sorry."
        assert response.finish_reason is FinishReason.STOP
        del response
    seen.keep("tool", explode)
    seen.keep("agent", agent)
    seen.keep("client", client)
    return seen


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["sync", "async", "timeout"])
async def test_an_agent_turn_whose_tool_fails_is_freed_without_the_gc(
    llm_server: LLMServer, kind: str
) -> None:
    """A tool failing inside a turn becomes an error result the model reads; after the
    turn, the tool's exception, the tool, the agent and the client are all freed."""
    async with gc_off():
        seen = await _tool_turn(llm_server, kind)
        await settle_threads(seen.refs)
        assert_freed(seen.refs)


# ---------------------------------------------------------------- agent turns


async def agent_send(agent: Agent) -> Seen:
    seen = Seen()
    try:
        await agent.send("Tell me a story.")
    except RafrxError as error:
        seen.caught(error)
    return seen


async def agent_run(agent: Agent) -> Seen:
    return await observe(agent.run("Tell me a story."))


AGENT_CONSUMERS: dict[str, Callable[[Agent], Awaitable[Seen]]] = {
    "Agent.send": agent_send,
    "Agent.run-subscribe": agent_run,
}


async def _failing_turn(server: LLMServer, fault: str, consumer: str) -> Seen:
    make, expected = FAULTS[fault]
    assert make is not None
    server.enqueue(make())
    async with OpenAIChatClient(server.url, KEY, model="m", timeouts=FAST) as client:
        agent = Agent(client, tools=[failing_tool("async", {})])
        seen = await AGENT_CONSUMERS[consumer](agent)
    assert seen.error_type is not None, "the turn was expected to fail"
    assert seen.error_type.__name__ == expected, (seen.error_type, seen.message)
    seen.keep("agent", agent)
    seen.keep("client", client)
    return seen


@pytest.mark.asyncio
@pytest.mark.parametrize("consumer", list(AGENT_CONSUMERS))
@pytest.mark.parametrize("fault", ["http-500", "idle-timeout"])
async def test_an_agent_turn_failed_by_the_model_stream_is_freed_without_the_gc(
    llm_server: LLMServer, fault: str, consumer: str
) -> None:
    """A turn ended by its LLM call's error: the error (with ``.partial``), the agent and
    the client die once the caller drops them."""
    async with gc_off():
        seen = await _failing_turn(llm_server, fault, consumer)
        await settle()
        assert_freed(seen.refs)


# ---------------------------------------------------------------- a long run


def count_rafrx_objects() -> int:
    """Live objects of rafrx's types, and frames and functions of its code."""
    return sum(1 for obj in gc.get_objects() if rafrx_label(obj) is not None)


@pytest.mark.asyncio
async def test_150_failed_calls_leave_no_growing_garbage(llm_server: LLMServer) -> None:
    """A caller retrying a failing endpoint 150 times on one client with the GC off (every
    other call an HTTP 500, the others cut mid-stream): the live rafrx objects after call
    150 are no more than after call 50 (give or take 10)."""
    body = render(Reply(text="never"), "openai-chat")
    counts: dict[int, int] = {}
    async with gc_off():
        client = OpenAIChatClient(llm_server.url, KEY, model="m", timeouts=FAST)
        try:
            for n in range(1, 151):
                llm_server.enqueue(Fault.status(500) if n % 2 else Fault.drop_after(60, body=body))
                seen = await collect_response(client)
                assert seen.error_type is not None
                del seen
                if n in (50, 150):
                    await settle()
                    counts[n] = count_rafrx_objects()
        finally:
            await client.aclose()
        growth = counts[150] - counts[50]
        report = "\n  ".join(rafrx_cycles()[:3]) or "none"
        assert growth <= 10, (
            f"{growth} more live rafrx objects after 150 failed calls than after 50 "
            f"({counts}); cycles (first 3):\n  {report}"
        )


# ---------------------------------------------------------------- let_go


class _Held:
    """A local a frame holds, to see whether a kept error keeps the frame."""


def _raise_here() -> None:
    raise ValueError("deep")


def _caught_by_a_direct_caller(refs: list[weakref.ref[Any]]) -> ValueError:
    held = _Held()
    refs.append(weakref.ref(held))
    try:
        _raise_here()  # (a plain call: its frame links back here, a running frame)
    except ValueError as caught:
        return rafrx._cycles.let_go(caught)
    raise AssertionError("unreachable")


async def _raise_when_awaited() -> None:
    await asyncio.sleep(0)
    raise ValueError("deep")


async def _caught_by_an_awaiting_caller(refs: list[weakref.ref[Any]]) -> ValueError:
    held = _Held()
    refs.append(weakref.ref(held))
    try:
        await _raise_when_awaited()  # (links back here on Python 3.12 and later)
    except ValueError as caught:
        return rafrx._cycles.let_go(caught)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("caller", ["direct", "awaiting"])
def test_a_kept_error_keeps_no_running_frame_only_where_it_was_raised(caller: str) -> None:
    """``let_go`` keeps no frame that links back to one still running when it ran (that
    frame's locals would stay with the error once it ends): the traceback of such an
    error is kept as text, in a note that says where it was raised."""
    refs: list[weakref.ref[Any]] = []
    gc.collect()
    gc.disable()
    try:
        if caller == "direct":
            error = _caught_by_a_direct_caller(refs)
        else:
            error = asyncio.run(_caught_by_an_awaiting_caller(refs))
        assert refs[0]() is None, "the caller's locals live on in the kept error"
    finally:
        gc.enable()
    shown = "".join(traceback.format_exception(error))
    assert "_raise_" in shown
    assert "deep" in shown
    tb = error.__traceback__
    while tb is not None:
        assert tb.tb_frame.f_locals == {}
        tb = tb.tb_next
