"""Size limits: endless lines and huge tool arguments fail clearly, memory stays bounded.

A line with no newline, an event of many lines and a tool argument of 20 to
100 MB are streamed (generated lazily, so only the reader's memory counts);
the reader stops with :class:`~rafrx.errors.LimitExceeded` at the configured
limit (``max_line_bytes`` / ``max_event_bytes`` of ``from_sse``,
``max_argument_chars`` of ``convert()``, or their documented defaults), stops
reading, and its peak memory (``tracemalloc``) stays within a small multiple
of the limit.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from rafrx import ChatMessage
from rafrx import operators as ops
from rafrx.errors import LimitExceeded
from rafrx.operators._accumulate_tool_calls import DEFAULT_MAX_ARGUMENT_CHARS
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIChatClient
from rafrx.sse import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES
from rafrx.testing import Fault, LLMServer, Reply
from tests.reliability._support import Outcome, run_async, run_pipeline

MiB = 1024 * 1024
PIECE = 64 * 1024


def peak_memory(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the peak of memory allocated while it ran (bytes)."""
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def apeak_memory(fn: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = await fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class Endless:
    """``data: xxxx…`` with no newline, ``total`` bytes, counting what was read."""

    def __init__(self, total: int, prefix: bytes = b"data: ") -> None:
        self.total = total
        self.prefix = prefix
        self.read = 0

    def __iter__(self) -> Iterator[bytes]:
        yield self.prefix
        piece = b"x" * PIECE
        while self.read < self.total:
            self.read += PIECE
            yield piece


def argument_events(total: int, *, done: bool = True) -> Iterator[bytes]:
    """An OpenAI chat body calling ``write(content=…)`` with ``total`` bytes of content."""
    start = {"index": 0, "id": "call_big", "function": {"name": "write", "arguments": '{"c": "'}}
    yield _chunk({"tool_calls": [start]})
    event = _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "x" * PIECE}}]})
    for _ in range(total // PIECE):
        yield event
    if done:
        end = {"index": 0, "function": {"arguments": '"}'}}
        yield _chunk({"tool_calls": [end]}, "tool_calls") + b"data: [DONE]\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


# ---------------------------------------------------------------- lines and events


@pytest.mark.parametrize("limit", [MiB, None])
def test_a_100_mb_line_stops_at_the_line_limit(limit: int | None) -> None:
    body = Endless(100 * MiB)
    kwargs = {} if limit is None else {"max_line_bytes": limit}
    want = DEFAULT_MAX_LINE_BYTES if limit is None else limit
    got, peak = peak_memory(lambda: run_pipeline(from_sse(body, "openai-chat", **kwargs)))
    assert isinstance(got.error, LimitExceeded), repr(got.error)
    assert got.error.limit == want
    assert "max_line_bytes" in got.error.message
    assert got.error.partial is not None
    assert got.error.partial.interrupted
    assert body.read <= want + PIECE  # it stopped reading at the limit
    assert peak < 1.5 * want + 2 * MiB


def test_an_event_of_many_lines_stops_at_the_event_limit() -> None:
    line = b"data: " + b"y" * 1000 + b"\n"

    def lines() -> Iterator[bytes]:
        for _ in range(100_000):  # 100 MB of data lines, no blank line
            yield line * 64

    limit = 2 * MiB
    got, peak = peak_memory(
        lambda: run_pipeline(from_sse(lines(), "anthropic", max_event_bytes=limit))
    )
    assert isinstance(got.error, LimitExceeded), repr(got.error)
    assert got.error.limit == limit
    assert "max_event_bytes" in got.error.message
    assert peak < 3 * limit + 2 * MiB


def test_the_default_limits_are_documented_and_finite() -> None:
    assert 16 * MiB == DEFAULT_MAX_LINE_BYTES
    assert 64 * MiB == DEFAULT_MAX_EVENT_BYTES
    assert 64 * MiB == DEFAULT_MAX_ARGUMENT_CHARS
    for doc in (from_sse.__doc__, ops.accumulate_tool_calls.__doc__):
        assert doc is not None
        assert "LimitExceeded" in doc


@pytest.mark.asyncio
async def test_a_huge_line_from_the_server_stops_at_the_default_limit(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Fault.huge_line(24 * MiB, body=Reply(text="Hello")))

    async def call() -> Outcome:
        async with OpenAIChatClient(llm_server.url, "sk-x") as client:
            return await run_async(client.stream([ChatMessage.user("hi")]))

    got, peak = await apeak_memory(call)
    assert isinstance(got.error, LimitExceeded), repr(got.error)
    assert got.error.limit == DEFAULT_MAX_LINE_BYTES
    assert got.error.partial is not None
    assert got.error.partial.interrupted
    # the server's 64 KiB writes are traced too: a small allowance for them
    assert peak < 1.5 * DEFAULT_MAX_LINE_BYTES + 4 * MiB
    await llm_server.wait_connections_closed()


# ---------------------------------------------------------------- tool arguments


def test_a_100_mb_tool_argument_stops_at_the_argument_limit() -> None:
    limit = 4 * MiB
    results: list[Any] = []
    errors: list[Exception] = []

    def run() -> None:
        from_sse(argument_events(100 * MiB), "openai-chat").pipe(
            ops.convert(max_argument_chars=limit), ops.aggregate()
        ).subscribe(results.append, errors.append)

    _, peak = peak_memory(run)
    assert not results
    assert len(errors) == 1
    error = errors[0]
    assert isinstance(error, LimitExceeded), repr(error)
    assert error.limit == limit
    assert "call_big" in error.message
    assert "write" in error.message
    assert error.partial is not None
    (cut,) = error.partial.tool_calls  # the cut call is kept, never to run
    assert (cut.id, cut.complete) == ("call_big", False)
    assert len(cut.raw_arguments or "") <= limit
    # bounded by the limit, not the 100 MB: the stages' copies of the argument, and the
    # partial's two (the cut call's raw text and its preview, partial_value)
    assert peak < 5 * limit + 2 * MiB


def test_a_large_argument_under_the_limit_costs_memory_linear_in_its_size() -> None:
    size = 16 * MiB
    got, peak = peak_memory(lambda: run_pipeline(from_sse(argument_events(size), "openai-chat")))
    assert got.error is None, repr(got.error)
    assert got.response is not None
    (call,) = got.response.tool_calls
    assert len(call.arguments["c"]) == size
    del got, call
    assert peak < 5 * size


class LazyServer:
    """A bare aiohttp server streaming a huge tool argument, generated as it goes."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent = 0
        self.finished = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for event in argument_events(self.total):
                await response.write(event)
                self.sent += len(event)
        except (ConnectionError, RuntimeError):
            pass  # the client went away
        finally:
            self.finished.set()
        return response

    async def __aenter__(self) -> LazyServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.mark.asyncio
async def test_a_100_mb_tool_argument_over_http_stops_the_download(no_task_leak: None) -> None:
    limit = 8 * MiB
    async with LazyServer(100 * MiB) as server:

        async def call() -> tuple[list[Any], list[Exception]]:
            results: list[Any] = []
            errors: list[Exception] = []
            async with OpenAIChatClient(server.url, "sk-x") as client:
                done = asyncio.get_running_loop().create_future()
                client.stream([ChatMessage.user("write")]).pipe(
                    ops.convert(max_argument_chars=limit), ops.aggregate()
                ).subscribe(results.append, errors.append, lambda: done.set_result(None))
                await _until(lambda: bool(errors or results))
            return results, errors

        (results, errors), peak = await apeak_memory(call)
        await asyncio.wait_for(server.finished.wait(), 10)
    assert not results
    (error,) = errors
    assert isinstance(error, LimitExceeded), repr(error)
    assert error.limit == limit
    assert error.partial is not None
    (cut,) = error.partial.tool_calls
    assert (cut.complete, cut.arguments) == (False, None)
    assert len(cut.raw_arguments or "") <= limit
    # the failure closed the connection: the server could not send much more
    assert server.sent < limit + 16 * MiB
    assert peak < 5 * limit + 8 * MiB  # as above, with the client's buffers


async def _until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)
