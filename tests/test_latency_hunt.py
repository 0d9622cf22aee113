"""Latency, as a live agent UI needs it: every piece shows up the moment it can.

The angle: someone building a live agent UI over rafrx. Every update must be
emitted as soon as the bytes that complete it arrive (never on the next chunk,
never at the end), rendering must not cost more per update as a huge argument
grows, and a slow UI must not break the stream.

Most tests talk real HTTP on 127.0.0.1 to a small *gated* aiohttp app
(:class:`GatedServer`): it writes one chunk per ``push`` and then waits for the
test. After each push the test waits (bounded) for what that chunk completes; the
next chunk is not sent before, so an update held back until the next chunk (or
the end) makes the wait fail. No assertion is on wall-clock time: tests count
what was emitted, in which order and after which chunk.

Sections:

1. the decoder: an event's updates come with the chunk that completes its blank
   line, whatever the line ends and the split (hypothesis);
2. over HTTP, per dialect: each SSE event's contents arrive before the next event
   is sent (text, tool-call start, each argument fragment, Progress / Parsed per
   top-level member, ToolCallingContent with ``eager=True``, usage, finish), also
   when the blank line or the ``data:`` line is split across chunks;
3. the agent: tool results as each tool finishes, approval requests at once;
4. the live view and the terminal renderer: the latest state, bounded work per
   update for a 1 MB argument;
5. slow and failing subscribers: no idle timeout from a slow consumer, a raising
   subscriber closes the connection, disposal from another thread closes it.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import reactivex
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex.subject import Subject

import rafrx
from rafrx import content as c
from rafrx import events as ev
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.agent import Agent
from rafrx.notebook import LiveSnapshot, LiveState, live
from rafrx.notebook._render import live_html, live_text
from rafrx.operators._convert import Converter
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.sources import UpdateDecoder
from rafrx.sources.clients import (
    AnthropicClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    Timeouts,
)
from rafrx.terminal import TerminalRenderer
from rafrx.testing import Reply, ToolCallSpec, render_events
from rafrx.tools import tool

FIXTURES = Path(__file__).resolve().parent / "data" / "fixtures"
DIALECTS = ("openai-chat", "anthropic", "openai-responses")
CLIENTS: dict[str, Any] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
WAIT = 5.0  # seconds any single wait may take before the test fails


# ---------------------------------------------------------------- helpers


class GatedServer:
    """An aiohttp app on 127.0.0.1 that streams exactly the chunks a test pushes.

    Every POST gets ``200 text/event-stream``; each pushed ``bytes`` is one write
    (drained); ``None`` ends the body. ``closed`` is set when the handler ends
    (the body ended, or the client went away).
    """

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.requests = 0
        self.closed = asyncio.Event()
        self.url = ""
        self._runner: web.AppRunner | None = None

    def push(self, *chunks: bytes | None) -> None:
        for chunk in chunks:
            self.queue.put_nowait(chunk)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            while (chunk := await self.queue.get()) is not None:
                await response.write(chunk)
            await response.write_eof()
        except ConnectionError:
            pass
        finally:
            self.closed.set()
        return response

    async def start(self) -> GatedServer:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest_asyncio.fixture
async def gated() -> AsyncIterator[GatedServer]:
    server = await GatedServer().start()
    try:
        yield server
    finally:
        await server.stop()


async def until(predicate: Callable[[], bool], what: str = "", timeout: float = WAIT) -> None:
    """Wait (bounded) until ``predicate()``; fail saying ``what`` was awaited."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.002)
    except TimeoutError:
        pytest.fail(f"not within {timeout} s: {what}")


def kinds(results: Sequence[Any]) -> list[str]:
    """The class names of the events and contents of ``results``, in order."""
    return [
        type(item).__name__
        for r in results
        if isinstance(r, AgentResponseResult)
        for item in (*r.events, *r.contents)
    ]


def contents(results: Sequence[Any]) -> list[Any]:
    return [x for r in results if isinstance(r, AgentResponseResult) for x in r.contents]


def split_events(body: bytes) -> list[bytes]:
    """A body as its events (LF line ends), each with its blank line."""
    return [part + b"\n\n" for part in body.replace(b"\r\n", b"\n").split(b"\n\n") if part.strip()]


def offline(dialect: str, events: Sequence[bytes], eager: bool) -> list[list[str]]:
    """Per event: the kinds ``convert()`` emits once that event is decoded (no HTTP)."""
    decoder, converter = UpdateDecoder(dialect), Converter(eager)
    per_event: list[list[str]] = []
    for event in events:
        out: list[AgentResponseResult] = []
        for update in decoder.feed(event):
            out.extend(converter.step(update))
        per_event.append(kinds(out))
    return per_event


class Collector:
    """An observer that keeps every item and how the stream ended."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.error: Exception | None = None
        self.completed = False
        self.ended = asyncio.Event()

    def on_next(self, item: Any) -> None:
        self.items.append(item)

    def on_error(self, error: Exception) -> None:
        self.error = error
        self.ended.set()

    def on_completed(self) -> None:
        self.completed = True
        self.ended.set()

    def subscribe(self, source: reactivex.Observable[Any]) -> Any:
        return source.subscribe(self.on_next, self.on_error, self.on_completed)


def _chat_event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "c1",
        "model": "m",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


# ---------------------------------------------------------------- 1. the decoder


_BODIES = {
    "openai-chat": (FIXTURES / "openai-chat" / "openai-text-then-tool-call.sse").read_bytes(),
    "anthropic": (FIXTURES / "anthropic" / "anthropic-thinking-tool-use.sse").read_bytes(),
    "openai-responses": (
        FIXTURES / "openai-responses" / "responses-parallel-function-calls.sse"
    ).read_bytes(),
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_an_event_is_decoded_by_the_chunk_that_completes_its_blank_line(
    dialect: str, newline: bytes, data: st.DataObject
) -> None:
    """Split each event at a random point: nothing before its blank line is complete,
    everything once it is (a CRLF's CR already ends the blank line)."""
    events = [e[:-2].replace(b"\n", newline) + newline * 2 for e in split_events(_BODIES[dialect])]
    whole = UpdateDecoder(dialect)
    expected = [whole.feed(e) for e in events]
    decoder = UpdateDecoder(dialect)
    for event, want in zip(events, expected, strict=True):
        if decoder.done:
            break
        cut = data.draw(st.integers(1, len(event) - 1))
        head, tail = event[:cut], event[cut:]
        complete = head.endswith(newline * 2) or (newline == b"\r\n" and head.endswith(b"\r\n\r"))
        first = decoder.feed(head)
        if complete:
            assert first == want
            assert decoder.feed(tail) == []
        else:
            assert first == []
            assert decoder.feed(tail) == want


@pytest.mark.parametrize(
    ("fragments", "expected"),
    [
        (['{"a": 12', ', "b": true', "}"], [[], [("a", 12), ("b", True)], []]),
        (['{"a": tru', "e", "}"], [[], [("a", True)], []]),
        (['{"a": nul', "l", "}"], [[], [("a", None)], []]),
        (['{"a": "x', '"', "}"], [[], [("a", "x")], []]),
        (['{"a": {"b": 1', "}", "}"], [[], [("a", {"b": 1})], []]),
        (['{"a": [1, 2', "]", "}"], [[], [("a", [1, 2])], []]),
        (['{"a": 1', " ", "}"], [[], [("a", 1)], []]),
        (['{"a": 1', "}"], [[], [("a", 1)]]),
    ],
)
def test_a_member_is_parsed_by_the_fragment_that_completes_its_value(
    fragments: list[str], expected: list[list[tuple[str, Any]]]
) -> None:
    """A literal, string, object or array is complete at its last character; a number
    only at the next delimiter (``1`` may go on as ``12``)."""
    converter = Converter()
    converter.step(u.ToolCallStart("c", "f"))
    got = []
    for fragment in fragments:
        out = converter.step(u.ToolCallArgs("c", fragment))
        got.append(
            [(x.name, x.value) for x in contents(out) if isinstance(x, c.ToolCallArgsParsedContent)]
        )
    assert got == expected


@pytest.mark.parametrize(
    ("fragments", "progress"),
    [
        (['{"p": "ab\\', 'nc"}'], [[], ["ab"], ["\nc"]]),
        (['{"p": "ab\\u00', 'e9"}'], [[], ["ab"], ["é"]]),
        (['{"p": "ab\\ud83d', '\\ude00"}'], [[], ["ab"], ["😀"]]),
        (['{"p": "', "ab", 'cd"}'], [[], [], ["ab"], ["cd"]]),
    ],
)
def test_progress_holds_back_only_the_unfinished_escape(
    fragments: list[str], progress: list[list[str]]
) -> None:
    """A fragment ending inside an escape still shows everything decoded before it."""
    converter = Converter()
    got = [[]] if converter.step(u.ToolCallStart("c", "f")) else []
    for fragment in fragments:
        out = converter.step(u.ToolCallArgs("c", fragment))
        got.append([x.value for x in contents(out) if isinstance(x, c.ToolCallArgsProgressContent)])
    assert got[-len(progress) :] == progress


# ---------------------------------------------------------------- 2. over HTTP

_REPLY = Reply(
    text="Let me check.",
    tool_calls=(
        ToolCallSpec("write_file", {"path": "a.py", "text": "print(1)\n" * 4, "n": 3}, id="c1"),
        ToolCallSpec("lookup", {"q": "x"}, id="c2"),
    ),
    chunk_size=5,
)


async def _stream_event_by_event(
    gated: GatedServer, dialect: str, events: Sequence[bytes], eager: bool
) -> list[list[str]]:
    """Push ``events`` one by one; after each, wait for exactly what it completes."""
    expected = offline(dialect, events, eager)
    client = CLIENTS[dialect](gated.url, api_key="k", model="m")
    seen = Collector()
    subscription = seen.subscribe(
        client.stream([rafrx.ChatMessage.user("hi")]).pipe(ops.convert(eager=eager))
    )
    got: list[list[str]] = []
    try:
        for i, event in enumerate(events):
            before = len(kinds(seen.items))
            gated.push(event)
            want = len(expected[i])
            await until(
                lambda before=before, want=want: len(kinds(seen.items)) - before >= want,
                f"event {i} ({event[:40]!r}) gives {expected[i]}",
            )
            got.append(kinds(seen.items)[before:])
        gated.push(None)
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
        assert seen.error is None, seen.error
    finally:
        subscription.dispose()
        await client.aclose()
    return got


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
async def test_each_event_is_delivered_before_the_next_is_sent(
    gated: GatedServer, dialect: str, eager: bool
) -> None:
    events = render_events(_REPLY, dialect)  # type: ignore[arg-type]
    got = await _stream_event_by_event(gated, dialect, events, eager)
    assert got == offline(dialect, events, eager)[: len(got)]
    flat = [k for step in got for k in step]
    assert flat.count("ToolCallStartContent") == 2
    assert "ToolCallArgsProgressContent" in flat
    assert flat.count("FinishEvent") == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["anthropic", "openai-responses"])
async def test_eager_tool_calling_comes_with_the_event_that_ends_the_call(
    gated: GatedServer, dialect: str
) -> None:
    """With ``eager=True`` (Anthropic, Responses: calls end one by one) the first call is
    ready to run while the second still streams."""
    events = render_events(_REPLY, dialect)  # type: ignore[arg-type]
    got = await _stream_event_by_event(gated, dialect, events, eager=True)
    ready = [i for i, step in enumerate(got) if "ToolCallingContent" in step]
    second_start = next(
        i for i, step in enumerate(got) if step.count("ToolCallStartContent") and i > ready[0]
    )
    assert len(ready) == 2
    assert ready[0] < second_start
    assert "ToolCallEndContent" in got[ready[0]]


@pytest.mark.asyncio
async def test_openai_chat_calls_are_ready_at_done_not_later(gated: GatedServer) -> None:
    """OpenAI chat calls end at ``[DONE]`` (DESIGN.md): with ``eager=True`` every call is
    ready with that event, before the body ends."""
    events = render_events(_REPLY, "openai-chat")
    got = await _stream_event_by_event(gated, "openai-chat", events, eager=True)
    assert got[-1].count("ToolCallingContent") == 2
    assert got[-1][-1] == "FinishEvent"


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_blank_line_arriving_alone_dispatches_at_once(
    gated: GatedServer, dialect: str
) -> None:
    """Each event sent as everything but its last byte, then that byte alone."""
    events = render_events(Reply(text="Hello there", chunk_size=3), dialect)  # type: ignore[arg-type]
    pieces = [p for e in events for p in (e[:-1], e[-1:])]
    expected = offline(dialect, events, eager=False)
    client = CLIENTS[dialect](gated.url, api_key="k", model="m")
    seen = Collector()
    subscription = seen.subscribe(client.stream([rafrx.ChatMessage.user("hi")]).pipe(ops.convert()))
    try:
        total = 0
        for i, event_kinds in enumerate(expected):
            gated.push(pieces[2 * i], pieces[2 * i + 1])
            total += len(event_kinds)
            await until(lambda total=total: len(kinds(seen.items)) >= total, f"event {i}")
        assert len(kinds(seen.items)) == total
        gated.push(None)
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
        assert seen.completed
    finally:
        subscription.dispose()
        await client.aclose()


@pytest.mark.asyncio
async def test_a_data_line_split_byte_by_byte_gives_its_delta_with_the_last_byte(
    gated: GatedServer,
) -> None:
    client = OpenAIChatClient(gated.url, api_key="k", model="m")
    seen = Collector()
    subscription = seen.subscribe(client.stream([rafrx.ChatMessage.user("hi")]))
    try:
        event = _chat_event({"content": "héllo 😀"})
        for i in range(len(event)):
            gated.push(event[i : i + 1])
        await until(lambda: any(isinstance(x, u.TextDelta) for x in seen.items), "the delta")
        assert [x.delta for x in seen.items if isinstance(x, u.TextDelta)] == ["héllo 😀"]
        gated.push(_chat_event({}, "stop"), b"data: [DONE]\n\n", None)
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
        assert seen.completed
    finally:
        subscription.dispose()
        await client.aclose()


@pytest.mark.asyncio
async def test_a_streamed_argument_shows_progress_per_fragment_over_http(
    gated: GatedServer,
) -> None:
    """A 20-fragment ``text`` argument: one Progress per fragment, each before the next."""
    client = OpenAIChatClient(gated.url, api_key="k", model="m")
    seen = Collector()
    subscription = seen.subscribe(client.stream([rafrx.ChatMessage.user("hi")]).pipe(ops.convert()))
    start = {"index": 0, "id": "c1", "function": {"name": "write", "arguments": '{"text": "'}}
    try:
        gated.push(_chat_event({"tool_calls": [start]}))
        for n in range(20):
            fragment = {"index": 0, "function": {"arguments": f"line {n}\\n"}}
            gated.push(_chat_event({"tool_calls": [fragment]}))
            await until(
                lambda n=n: (
                    sum(isinstance(x, c.ToolCallArgsProgressContent) for x in contents(seen.items))
                    == n + 1
                ),
                f"progress {n}",
            )
        bars = [x for x in contents(seen.items) if isinstance(x, c.ToolCallArgsProgressContent)]
        assert [b.value for b in bars] == [f"line {n}\n" for n in range(20)]
        assert bars[-1].received == len("".join(f"line {n}\n" for n in range(20)))
        end = {"index": 0, "function": {"arguments": '"}'}}
        gated.push(_chat_event({"tool_calls": [end]}))
        await until(
            lambda: any(isinstance(x, c.ToolCallArgsParsedContent) for x in contents(seen.items)),
            "the parsed member",
        )
        gated.push(_chat_event({}, "tool_calls"), b"data: [DONE]\n\n", None)
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
        assert seen.completed
    finally:
        subscription.dispose()
        await client.aclose()


@pytest.mark.asyncio
async def test_keep_alive_comments_between_deltas_emit_nothing_and_hold_nothing(
    gated: GatedServer,
) -> None:
    client = OpenAIChatClient(gated.url, api_key="k", model="m")
    seen = Collector()
    subscription = seen.subscribe(client.stream([rafrx.ChatMessage.user("hi")]))
    try:
        for word in ("a", "b", "c"):
            gated.push(b": keep-alive\n\n", _chat_event({"content": word}), b": ping\n\n")
            await until(
                lambda word=word: any(
                    isinstance(x, u.TextDelta) and x.delta == word for x in seen.items
                ),
                word,
            )
        gated.push(_chat_event({}, "stop"), b"data: [DONE]\n\n", None)
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
        assert [type(x).__name__ for x in seen.items] == [
            "ResponseMetadata",
            "TextDelta",
            "TextDelta",
            "TextDelta",
            "Finish",
        ]
    finally:
        subscription.dispose()
        await client.aclose()


# ---------------------------------------------------------------- 3. the agent


def _agent_tools(gate: asyncio.Event, order: list[str]) -> list[Any]:
    @tool
    async def slow(x: int) -> str:
        """Waits for the test."""
        await gate.wait()
        order.append("slow")
        return "slow done"

    @tool
    async def fast(x: int) -> str:
        """Returns at once."""
        order.append("fast")
        return "fast done"

    @tool(requires_approval=True)
    async def risky(x: int) -> str:
        """Needs approval."""
        order.append("risky")
        return "risky done"

    return [slow, fast, risky]


_AGENT_REPLY = Reply(
    tool_calls=(
        ToolCallSpec("slow", {"x": 1}, id="c1"),
        ToolCallSpec("risky", {"x": 2}, id="c2"),
        ToolCallSpec("fast", {"x": 3}, id="c3"),
    )
)


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_agent_forwards_each_tool_result_as_that_tool_finishes(
    gated: GatedServer, dialect: str
) -> None:
    gate = asyncio.Event()
    order: list[str] = []
    asked: list[str] = []

    async def approver(request: ev.ToolApprovalRequestEvent) -> bool:
        asked.append(request.call_id)
        return True

    client = CLIENTS[dialect](gated.url, api_key="k", model="m")
    agent = Agent(client, tools=_agent_tools(gate, order), approver=approver)
    seen = Collector()
    subscription = seen.subscribe(agent.run("go"))
    try:
        gated.push(*render_events(_AGENT_REPLY, dialect), None)  # type: ignore[arg-type]

        def called() -> list[str]:
            return [x.call_id for x in contents(seen.items) if isinstance(x, c.ToolCalledContent)]

        await until(lambda: sorted(called()) == ["c2", "c3"], "the two quick results")
        assert "slow" not in order  # still running: the others did not wait for it
        assert asked == ["c2"]
        gated.push(*render_events(Reply(text="done"), dialect), None)  # type: ignore[arg-type]
        gate.set()
        await until(lambda: called()[-1:] == ["c1"], "the slow result")
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
        assert seen.completed, seen.error
    finally:
        subscription.dispose()
        await client.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["anthropic", "openai-responses"])
async def test_eager_agent_asks_for_approval_before_the_next_call_streams(
    gated: GatedServer, dialect: str
) -> None:
    gate = asyncio.Event()
    asked = asyncio.Event()

    async def approver(request: ev.ToolApprovalRequestEvent) -> bool:
        asked.set()
        return False

    client = CLIENTS[dialect](gated.url, api_key="k", model="m")
    agent = Agent(client, tools=_agent_tools(gate, []), approver=approver, eager_tools=True)
    seen = Collector()
    subscription = seen.subscribe(agent.run("go"))
    events = render_events(_AGENT_REPLY, dialect)  # type: ignore[arg-type]
    expected = offline(dialect, events, eager=True)
    # The event that makes the second call ("risky", which needs approval) ready to run.
    ready_so_far = [
        sum(k.count("ToolCallingContent") for k in expected[: i + 1]) for i in range(len(expected))
    ]
    risky_ready = ready_so_far.index(2)
    try:
        gated.push(*events[: risky_ready + 1])
        async with asyncio.timeout(WAIT):
            await asked.wait()
        assert "ToolApprovalRequestEvent" in kinds(seen.items)
        assert kinds(seen.items).count("ToolCallStartContent") == 2  # c3 not started yet
        gated.push(*events[risky_ready + 1 :], None)
        gated.push(*render_events(Reply(text="ok"), dialect), None)  # type: ignore[arg-type]
        gate.set()
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
        assert seen.completed, seen.error
    finally:
        subscription.dispose()
        await client.aclose()


# ---------------------------------------------------------------- 4. views


class RecordingDisplay:
    """A display handle that keeps every snapshot it gets."""

    def __init__(self) -> None:
        self.snapshots: list[LiveSnapshot] = []

    def __call__(self, obj: LiveSnapshot, display_id: bool = True) -> RecordingDisplay:
        self.snapshots.append(obj)
        return self

    def update(self, obj: LiveSnapshot, **_: Any) -> None:
        self.snapshots.append(obj)


@pytest.mark.asyncio
async def test_live_view_renders_the_trailing_update_after_the_interval() -> None:
    display = RecordingDisplay()
    subject: Subject[Any] = Subject()
    view = live(subject, display=display, interval=0.02)
    try:
        subject.on_next(u.TextDelta("first "))
        subject.on_next(u.TextDelta("second"))  # within the interval: throttled
        await until(lambda: "first second" in display.snapshots[-1].text, "trailing render")
        assert not display.snapshots[-1].final
    finally:
        view.dispose()


@pytest.mark.asyncio
async def test_live_view_over_http_ends_with_everything_and_stops_the_request(
    gated: GatedServer,
) -> None:
    client = OpenAIChatClient(gated.url, api_key="k", model="m")
    display = RecordingDisplay()
    view = live(client.stream([rafrx.ChatMessage.user("hi")]), display=display, interval=0.01)
    try:
        gated.push(_chat_event({"content": "partial"}))
        await until(lambda: "partial" in display.snapshots[-1].text, "the first text")
        view.dispose()  # the user clicks stop
        async with asyncio.timeout(WAIT):
            await gated.closed.wait()
        assert display.snapshots[-1].final
        assert "status: stopped" in display.snapshots[-1].text
    finally:
        view.dispose()
        await client.aclose()


def _huge_argument_results(size: int, step: int = 64) -> list[AgentResponseResult]:
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    raw = json.dumps({"path": "big.txt", "text": text})
    updates = [u.ToolCallStart("c1", "write_file")]
    updates += [u.ToolCallArgs("c1", raw[i : i + step]) for i in range(0, len(raw), step)]
    updates += [u.ToolCallEnd("c1"), u.Finish(FinishReason.TOOL_CALLS)]
    return reactivex.from_iterable(updates).pipe(ops.convert(), reactivex.operators.to_list()).run()


def test_live_render_size_does_not_grow_with_a_huge_streamed_argument() -> None:
    """1 MB streamed in 64-byte deltas: every render (HTML and text) stays small."""
    state = LiveState()
    sizes = []
    for i, result in enumerate(_huge_argument_results(1 << 20)):
        state.add(result)
        if i % 512 == 0:
            sizes.append(len(live_html(state)) + len(live_text(state)))
    sizes.append(len(live_html(state)) + len(live_text(state)))
    assert max(sizes) < 4000, max(sizes)
    assert state.cards["c1"].progress["text"].received == 1 << 20


def test_live_state_work_per_update_does_not_grow_with_the_argument() -> None:
    """The state's own strings stay bounded (the tail), whatever has streamed."""
    state = LiveState()
    for result in _huge_argument_results(1 << 18):
        state.add(result)
        bar = state.cards["c1"].progress.get("text")
        if bar is not None:
            assert len(bar.tail) <= 160
    assert state.cards["c1"].status == "ready"


def test_terminal_writes_a_bounded_amount_for_a_huge_argument() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=True, interval=0.0)
    writes = []
    for result in _huge_argument_results(1 << 20):
        before = out.tell()
        renderer.result(result)
        writes.append(out.tell() - before)
    renderer.close()
    assert max(writes) < 400, max(writes)
    assert "1.0 MiB received" in out.getvalue()


def test_terminal_streams_text_with_each_delta() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    shown = []
    for word in ("Hel", "lo", " wor", "ld"):
        renderer.result(AgentResponseResult(contents=(c.TextContent(word),)))
        shown.append(out.getvalue())
    assert shown == ["Hel", "Hello", "Hello wor", "Hello world"]


# ---------------------------------------------------------------- 5. slow subscribers


@pytest.mark.asyncio
async def test_a_subscriber_blocking_longer_than_the_idle_timeout_is_no_idle_timeout(
    gated: GatedServer,
) -> None:
    client = OpenAIChatClient(gated.url, api_key="k", model="m", timeouts=Timeouts(idle=0.2))
    seen = Collector()

    def on_next(update: Any) -> None:
        seen.on_next(update)
        if isinstance(update, u.TextDelta) and update.delta == "a":
            time.sleep(0.5)  # the scenario: a slow synchronous UI (not an assertion)

    subscription = client.stream([rafrx.ChatMessage.user("hi")]).subscribe(
        on_next, seen.on_error, seen.on_completed
    )
    try:
        gated.push(_chat_event({"content": "a"}))
        await until(lambda: len(seen.items) >= 2, "the first delta")
        gated.push(_chat_event({"content": "b"}), _chat_event({}, "stop"), b"data: [DONE]\n\n")
        gated.push(None)
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
        assert seen.error is None, seen.error
        assert [x.delta for x in seen.items if isinstance(x, u.TextDelta)] == ["a", "b"]
    finally:
        subscription.dispose()
        await client.aclose()


@pytest.mark.asyncio
async def test_a_subscriber_that_raises_ends_the_stream_and_closes_the_connection(
    gated: GatedServer,
) -> None:
    client = OpenAIChatClient(gated.url, api_key="k", model="m")
    seen = Collector()

    def on_next(result: AgentResponseResult) -> None:
        seen.on_next(result)
        if any(isinstance(x, c.TextContent) for x in result.contents):
            raise RuntimeError("the UI broke")

    stream = client.stream([rafrx.ChatMessage.user("hi")]).pipe(ops.convert())
    subscription = stream.subscribe(on_next, seen.on_error, seen.on_completed)
    try:
        gated.push(_chat_event({"content": "a"}))
        async with asyncio.timeout(WAIT):
            await seen.ended.wait()
            await gated.closed.wait()
        assert isinstance(seen.error, RuntimeError)
        assert str(seen.error) == "the UI broke"
        assert gated.requests == 1  # never retried
    finally:
        subscription.dispose()
        await client.aclose()


@pytest.mark.asyncio
async def test_disposing_from_a_ui_thread_closes_the_connection_promptly(
    gated: GatedServer,
) -> None:
    client = OpenAIChatClient(gated.url, api_key="k", model="m")
    seen = Collector()
    subscription = seen.subscribe(client.stream([rafrx.ChatMessage.user("hi")]))
    try:
        gated.push(_chat_event({"content": "a"}))
        await until(lambda: len(seen.items) >= 2, "the first delta")
        worker = threading.Thread(target=subscription.dispose)
        worker.start()
        worker.join(WAIT)
        async with asyncio.timeout(WAIT):
            await gated.closed.wait()  # the server sees the client go, with no more bytes
        count = len(seen.items)
        assert gated.queue.empty()
        assert len(seen.items) == count == 2  # ResponseMetadata, TextDelta
        assert seen.error is None
        assert not seen.completed
    finally:
        subscription.dispose()
        await client.aclose()


@pytest.mark.asyncio
async def test_observe_on_a_worker_keeps_order_and_everything(
    gated: GatedServer, pool: Any
) -> None:
    """A UI that observes on a worker thread (slow callbacks there) still gets every
    result in order, and the stream completes."""
    client = OpenAIChatClient(gated.url, api_key="k", model="m")
    got: list[str] = []
    done = threading.Event()

    def on_next(result: AgentResponseResult) -> None:
        time.sleep(0.001)  # a slowish UI callback, off the loop
        got.extend(x.text for x in result.contents if isinstance(x, c.TextContent))

    stream = client.stream([rafrx.ChatMessage.user("hi")]).pipe(
        ops.convert(), reactivex.operators.observe_on(pool)
    )
    subscription = stream.subscribe(on_next, lambda e: done.set(), done.set)
    try:
        words = [f"w{i} " for i in range(50)]
        gated.push(*(_chat_event({"content": w}) for w in words))
        gated.push(_chat_event({}, "stop"), b"data: [DONE]\n\n", None)
        await until(done.is_set, "the end on the worker")
        assert got == words
    finally:
        subscription.dispose()
        await client.aclose()
