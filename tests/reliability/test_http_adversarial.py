"""Hostile HTTP peers and lifecycle edges of the clients, for real on 127.0.0.1.

Servers that trickle headers or bodies, send endless or gigantic headers,
gzip bodies (valid, corrupt, a decompression bomb), a ``[DONE]`` and then
silence on a kept-alive connection, big error bodies before a retry, odd
``Retry-After`` values, cross-origin redirects, bodies that echo credentials;
``aclose()`` while streams run; dispose during the error-body read; many
concurrent subscriptions disposed mid-body. Raw faults come from a small
asyncio server written here (no HTTP library on the server side), the rest
from :class:`~rafrx.testing.LLMServer`.

Each test states the behaviour it expects; the ones that fail pin a bug.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import gzip
import logging
import math
import re
import socket
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import attrs
import pytest
import reactivex

from rafrx import ChatMessage
from rafrx import updates as u
from rafrx.errors import (
    ConnectTimeout,
    HTTPStatusError,
    IdleTimeout,
    LimitExceeded,
    MalformedEvent,
    ProtocolError,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.testing import Fault, LLMServer, Reply
from tests.reliability._support import count_fds, run_async, settle, wait_for

KEY = "sk-adversarial-SECRET-0123456789"
USER = [ChatMessage.user("Hello?")]
FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, jitter=False)

HELLO = b'data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n'
BODY = (
    HELLO + b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


# ---------------------------------------------------------------- a raw server

Handler = Callable[["RawServer", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A TCP server on 127.0.0.1 answering each connection with ``handler``.

    Records each request head; on exit it closes every connection and awaits
    the handlers.
    """

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self.heads: list[bytes] = []
        self.connections = 0
        self.open = 0
        self.url = ""

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        self.open += 1
        try:
            await self._handler(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self.open -= 1
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """One whole HTTP request (head and ``Content-Length`` body)."""
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        if length:
            await reader.readexactly(int(length.group(1)))
        self.heads.append(head)
        return head


def whole(status: bytes, content_type: bytes | None, body: bytes, *extra: bytes) -> bytes:
    """A complete HTTP/1.1 response with a ``Content-Length`` (and no
    ``Content-Type`` when ``content_type`` is ``None``)."""
    head = b"HTTP/1.1 " + status + b"\r\n"
    if content_type is not None:
        head += b"Content-Type: " + content_type + b"\r\n"
    head += b"".join(line + b"\r\n" for line in extra)
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def collect(
    source: reactivex.Observable[u.AgentResponseUpdate], timeout: float
) -> tuple[list[u.AgentResponseUpdate], Exception | None, bool]:
    """(updates, error, ended): subscribe, wait ``timeout`` s at most, then dispose."""
    items: list[u.AgentResponseUpdate] = []
    done: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def on_error(error: Exception) -> None:
        if not done.done():
            done.set_result(error)

    def on_completed() -> None:
        if not done.done():
            done.set_result(None)

    subscription = source.subscribe(items.append, on_error, on_completed)
    try:
        async with asyncio.timeout(timeout):
            error = await done
    except TimeoutError:
        return items, None, False
    finally:
        subscription.dispose()
    return items, error, True


def text_of(updates: list[u.AgentResponseUpdate]) -> str:
    return "".join(x.delta for x in updates if isinstance(x, u.TextDelta))


def exception_chain(error: BaseException) -> list[BaseException]:
    """``error`` and everything reachable through ``__cause__`` / ``__context__``."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        item = todo.pop()
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [item.__cause__, item.__context__]
    return seen


def texts_of(error: BaseException) -> str:
    """Every text an error reporter could show for ``error`` and its chain."""
    out = []
    for item in exception_chain(error):
        out += [str(item), repr(item), repr(vars(item)) if hasattr(item, "__dict__") else ""]
        for name in ("request_info", "headers", "history"):
            out.append(repr(getattr(item, name, None)))
    return "\n".join(out)


# ---------------------------------------------------------------- encodings


@pytest.mark.asyncio
async def test_a_gzip_encoded_chunked_stream_decodes_like_the_plain_one(
    no_task_leak: None,
) -> None:
    async def gzipped(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        data = gzip.compress(BODY)
        writer.write(SSE_HEAD + b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(data), 7):  # compressed bytes split anywhere
            writer.write(chunk(data[i : i + 7]))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(gzipped) as server, OpenAIChatClient(server.url, KEY) as client:
        got = await run_async(client.stream(USER))
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "Hello"


@pytest.mark.asyncio
async def test_corrupt_deflate_mid_stream_keeps_what_arrived(no_task_leak: None) -> None:
    async def corrupt(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(SSE_HEAD + b"Content-Encoding: deflate\r\nTransfer-Encoding: chunked\r\n\r\n")
        compressor = zlib.compressobj()
        writer.write(chunk(compressor.compress(HELLO) + compressor.flush(zlib.Z_SYNC_FLUSH)))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunk(b"not deflate at all " * 4))
        await writer.drain()
        await asyncio.sleep(0.2)

    async with RawServer(corrupt) as server, OpenAIChatClient(server.url, KEY) as client:
        items, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, StreamInterrupted), repr(error)
    assert text_of(items) == "Hello"  # the items come first, then the typed error
    assert KEY not in texts_of(error)


@pytest.mark.asyncio
async def test_a_gzip_bomb_stops_at_the_line_limit(no_task_leak: None) -> None:
    """40 MiB of one ``data:`` line in 40 KiB of gzip: the client gives up at its
    line limit, long before the whole bomb is inflated."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = compressor.compress(b"data: ")
    block = b"x" * (1 << 20)
    data += b"".join(compressor.compress(block) for _ in range(40)) + compressor.flush()

    async def bomb(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(whole(b"200 OK", b"text/event-stream", data, b"Content-Encoding: gzip"))
        await writer.drain()

    async with (
        RawServer(bomb) as server,
        OpenAIChatClient(server.url, KEY, max_line_bytes=1 << 20) as client,
    ):
        items, error, ended = await collect(client.stream(USER), 5)
    assert ended
    assert isinstance(error, LimitExceeded), repr(error)
    assert items == []


# ---------------------------------------------------------------- headers


@pytest.mark.asyncio
async def test_headers_trickled_one_byte_at_a_time_hit_the_first_byte_timeout(
    no_task_leak: None,
) -> None:
    async def trickle(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        for byte in SSE_HEAD + b"X-Pad: " + b"a" * 1000:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.01)

    timeouts = Timeouts(connect=5, first_byte=0.3, idle=5)
    async with (
        RawServer(trickle) as server,
        OpenAIChatClient(server.url, KEY, timeouts=timeouts) as client,
    ):
        start = time.monotonic()
        items, error, ended = await collect(client.stream(USER), 3)
        elapsed = time.monotonic() - start
    assert ended
    assert isinstance(error, ConnectTimeout), repr(error)
    assert 0.25 < elapsed < 1.5
    assert items == []


@pytest.mark.parametrize(
    "headers",
    [
        b"X-Big: " + b"a" * 100_000 + b"\r\n",
        b"".join(b"X-H%d: v\r\n" % i for i in range(50_000)),
    ],
    ids=["one-100k-header", "50k-headers"],
)
@pytest.mark.asyncio
async def test_gigantic_or_endless_headers_are_a_bounded_protocol_error(
    no_task_leak: None, headers: bytes
) -> None:
    async def huge(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(SSE_HEAD + headers + b"\r\n" + BODY)
        await writer.drain()

    async with RawServer(huge) as server, OpenAIChatClient(server.url, KEY) as client:
        items, error, ended = await collect(client.stream(USER), 5)
    assert ended
    assert isinstance(error, ProtocolError), repr(error)
    assert not error.retryable
    assert len(error.message) < 1000
    assert KEY not in error.message
    assert items == []


# ---------------------------------------------------------------- bodies


@pytest.mark.asyncio
async def test_a_body_trickled_byte_by_byte_within_the_idle_timeout_completes(
    no_task_leak: None,
) -> None:
    async def trickle(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(SSE_HEAD + b"\r\n")
        for byte in BODY:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.001)

    async with (
        RawServer(trickle) as server,
        OpenAIChatClient(server.url, KEY, timeouts=Timeouts(idle=0.5)) as client,
    ):
        got = await run_async(client.stream(USER))
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "Hello"


@pytest.mark.asyncio
async def test_a_body_shorter_than_its_content_length_keeps_what_arrived(
    no_task_leak: None,
) -> None:
    async def short(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(SSE_HEAD + b"Content-Length: 10000\r\n\r\n" + HELLO)
        await writer.drain()
        await asyncio.sleep(0.05)

    async with RawServer(short) as server, OpenAIChatClient(server.url, KEY) as client:
        items, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, StreamInterrupted), repr(error)
    assert text_of(items) == "Hello"


@pytest.mark.asyncio
async def test_events_before_an_oversized_line_in_the_same_read_are_kept(
    no_task_leak: None,
) -> None:
    """An event, then a line past ``max_line_bytes``, arriving in one TCP read:
    ``TextDelta("Hello")`` is delivered before ``LimitExceeded``, exactly as when
    the two arrive in separate reads ("everything received before a failure is
    kept"), so what a caller gets does not depend on how TCP split the bytes."""

    async def event_then_huge_line(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(whole(b"200 OK", b"text/event-stream", HELLO + b"data: " + b"x" * 5000))
        await writer.drain()

    async with (
        RawServer(event_then_huge_line) as server,
        OpenAIChatClient(server.url, KEY, max_line_bytes=1024) as client,
    ):
        items, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, LimitExceeded), repr(error)
    assert text_of(items) == "Hello"


@pytest.mark.asyncio
async def test_done_then_silence_does_not_poison_the_next_request(no_task_leak: None) -> None:
    """``[DONE]`` arrives but the chunked body does not end: the stream completes
    after a short wait for it (``BODY_END_WAIT``), and the half-read connection is
    not reused for the next request.

    The body's end is held until both streams are over: a stream waiting for that end
    would only fail at its idle timeout. (The server sent it after 0.5 s, and both
    streams had to be over within 0.4 s: a loaded machine took up to 0.55 s.)"""
    streams_over = asyncio.Event()

    async def done_then_stall(server: RawServer, reader: Any, writer: Any) -> None:
        while True:
            await server.read_request(reader)
            writer.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(BODY))
            await writer.drain()
            await streams_over.wait()
            writer.write(chunk(b"data: garbage after done\n\n") + b"0\r\n\r\n")
            await writer.drain()

    async with RawServer(done_then_stall) as server:
        async with OpenAIChatClient(server.url, KEY, timeouts=Timeouts(idle=2)) as client:
            start = time.monotonic()
            first = await run_async(client.stream(USER))
            second = await run_async(client.stream(USER))
            elapsed = time.monotonic() - start
            streams_over.set()
        await wait_for(lambda: server.open == 0, 2)
    for got in (first, second):
        assert got.error is None, repr(got.error)
        assert got.response is not None
        assert got.response.text == "Hello"
    assert elapsed < 1.5, f"{elapsed:.2f} s: not a short wait for the body's end"  # (~0.25)
    assert server.connections == 2


@pytest.mark.asyncio
async def test_a_big_error_body_then_a_retry_on_the_same_session(no_task_leak: None) -> None:
    """A 503 whose 200 KB body is only partly read (64 KiB): the retry must not be
    sent on that connection as if it were clean."""
    answers = [
        whole(
            b"503 Busy",
            b"application/json",
            b'{"error": {"message": "' + b"x" * 200_000 + b'"}}',
            b"Retry-After: 0",
        ),
        whole(b"200 OK", b"text/event-stream", BODY),
    ]

    async def serve(server: RawServer, reader: Any, writer: Any) -> None:
        while answers:
            await server.read_request(reader)
            writer.write(answers.pop(0))
            await writer.drain()

    async with (
        RawServer(serve) as server,
        OpenAIChatClient(server.url, KEY, retry=FAST_RETRY) as client,
    ):
        got = await run_async(client.stream(USER))
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "Hello"
    assert len(server.heads) == 2


@pytest.mark.asyncio
async def test_an_error_body_that_trickles_is_cut_by_the_idle_timeout(
    no_task_leak: None,
) -> None:
    start_of_body = '{"error": {"message": "boom'

    async def trickle(server: RawServer, reader: Any, writer: Any) -> None:
        """The body's start at once, then a byte every 10 ms (10 s of them): what the
        idle timeout cuts is the trickle, and the kept body starts with what came at
        once (trickled too, its 27 bytes took 0.3 s: on a loaded machine, longer)."""
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\n\r\n")
        writer.write(start_of_body.encode())
        for _ in range(1000):
            await writer.drain()
            await asyncio.sleep(0.01)
            writer.write(b"!")

    async with (
        RawServer(trickle) as server,
        OpenAIChatClient(server.url, KEY, timeouts=Timeouts(idle=0.3)) as client,
    ):
        start = time.monotonic()
        items, error, ended = await collect(client.stream(USER), 3)
        elapsed = time.monotonic() - start
    assert ended
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.status == 500
    assert error.body is not None
    assert error.body.startswith(start_of_body)
    assert set(error.body.removeprefix(start_of_body)) <= {"!"}  # what came, as it came
    assert elapsed < 1.5  # (the idle timeout is 0.3 s; the trickle would take 10 s)
    assert items == []


# ---------------------------------------------------------------- Retry-After


def _past_date() -> str:
    return email.utils.formatdate(time.time() - 3600, usegmt=True)


@pytest.mark.parametrize(
    ("headers", "retried", "at_least", "at_most"),
    [
        ({"Retry-After": "-5"}, True, 0.0, 0.5),
        ({"Retry-After": "past-date"}, True, 0.0, 0.5),
        ({"Retry-After": "0.2"}, True, 0.2, 1.0),
        ({"Retry-After": "99999"}, False, 0.0, 0.5),
        ({"Retry-After": "99999", "retry-after-ms": "150"}, True, 0.15, 1.0),
        ({"retry-after-ms": "99999999"}, False, 0.0, 0.5),
        ({"retry-after-ms": "inf", "Retry-After": "0"}, False, 0.0, 0.5),
        ({"retry-after-ms": "nan", "Retry-After": "0.2"}, True, 0.2, 1.0),
        ({"Retry-After": "-inf"}, True, 0.0, 0.5),
    ],
    ids=[
        "negative",
        "past-date",
        "fraction",
        "huge",
        "ms-wins",
        "huge-ms",
        "infinite-ms-wins",
        "nan-ms-is-absent",
        "minus-infinity",
    ],
)
@pytest.mark.asyncio
async def test_odd_retry_after_values(
    llm_server: LLMServer,
    headers: dict[str, str],
    retried: bool,
    at_least: float,
    at_most: float,
) -> None:
    headers = {k: _past_date() if v == "past-date" else v for k, v in headers.items()}
    llm_server.enqueue(Fault.status(429, headers=headers), Reply(text="ok"))
    async with OpenAIChatClient(llm_server.url, KEY, retry=FAST_RETRY) as client:
        start = time.monotonic()
        got = await run_async(client.stream(USER))
        elapsed = time.monotonic() - start
    assert at_least <= elapsed < at_most
    if retried:
        assert got.error is None, repr(got.error)
        assert len(llm_server.requests) == 2
    else:
        assert isinstance(got.error, HTTPStatusError), repr(got.error)
        assert got.error.retry_after is not None
        assert got.error.retry_after > FAST_RETRY.max_retry_after
        assert len(llm_server.requests) == 1


@pytest.mark.parametrize("cap", [FAST_RETRY.max_retry_after, math.inf], ids=["capped", "no-cap"])
@pytest.mark.parametrize("value", ["1e400", "inf"])
@pytest.mark.asyncio
async def test_an_infinite_retry_after_is_beyond_the_cap(
    llm_server: LLMServer, value: str, cap: float
) -> None:
    """RetryPolicy: "a server asking for more than ``max_retry_after`` seconds is not
    retried". ``Retry-After: 1e400`` (or ``inf``) asks for more than ``99999`` does:
    it is not read as absent (which would retry after the backoff) but as ``inf``,
    and not retried even when ``max_retry_after`` is itself ``inf``."""
    llm_server.enqueue(Fault.status(429, retry_after=value), Reply(text="ok"))
    policy = attrs.evolve(FAST_RETRY, max_retry_after=cap)
    async with OpenAIChatClient(llm_server.url, KEY, retry=policy) as client:
        got = await run_async(client.stream(USER))
    assert isinstance(got.error, HTTPStatusError), repr(got.error)
    assert got.error.retry_after == math.inf
    assert len(llm_server.requests) == 1


@pytest.mark.asyncio
async def test_a_first_byte_timeout_is_retried_and_the_stalled_connection_closed(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Fault.stall(5.0), Reply(text="second try"))
    timeouts = Timeouts(connect=5, first_byte=0.2, idle=5)
    async with OpenAIChatClient(llm_server.url, KEY, timeouts=timeouts, retry=FAST_RETRY) as c:
        start = time.monotonic()
        got = await run_async(c.stream(USER))
        elapsed = time.monotonic() - start
        await llm_server.wait_until(lambda: llm_server.open_connections <= 1, 2)
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "second try"
    assert 0.2 <= elapsed < 2
    assert len(llm_server.requests) == 2


# ---------------------------------------------------------------- secrets


@pytest.mark.asyncio
async def test_nothing_logged_during_failures_shows_the_key(
    llm_server: LLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    llm_server.enqueue(
        Fault.status(401, body={"error": {"message": f"bad key {KEY}"}}),
        Fault.drop_after(40),
        Fault.status(503, retry_after=0),
        Reply(text="ok"),
    )
    async with AnthropicClient(f"{llm_server.url}?key={KEY}", KEY, retry=FAST_RETRY) as c:
        outcomes = [await run_async(c.stream(USER)) for _ in range(3)]
    assert [type(o.error) for o in outcomes] == [HTTPStatusError, StreamInterrupted, type(None)]
    for outcome in outcomes[:2]:
        assert outcome.error is not None
        assert KEY not in str(outcome.error)
        assert KEY not in repr(vars(outcome.error))
    assert KEY not in caplog.text


@pytest.mark.asyncio
async def test_a_cross_origin_redirect_does_not_forward_the_api_key(no_task_leak: None) -> None:
    """A 307 from the API host to another origin (a compromised proxy, an open
    redirect): aiohttp would drop ``Authorization`` but not Anthropic's
    ``x-api-key`` (nor a key header given in ``headers=``). The key must never
    reach another origin: the redirect is not followed, and the error names the
    target so that the user can fix ``base_url``."""

    async def elsewhere(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(whole(b"404 Not Found", b"text/plain", b"nope"))
        await writer.drain()

    async with RawServer(elsewhere) as other:

        async def redirect(server: RawServer, reader: Any, writer: Any) -> None:
            await server.read_request(reader)
            location = f"{other.url}/v1/messages".encode()
            writer.write(
                whole(b"307 Temporary Redirect", b"text/plain", b"", b"Location: " + location)
            )
            await writer.drain()

        async with (
            RawServer(redirect) as api,
            AnthropicClient(api.url, KEY, headers={"api-key": KEY}) as client,
        ):
            _, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, HTTPStatusError), repr(error)
    assert (error.status, error.retryable) == (307, False)
    assert f"redirects to {other.url}/v1/messages;" in error.message
    assert KEY.encode() in api.heads[0]  # sent to the API host, as it should be
    assert other.heads == []


@pytest.mark.asyncio
async def test_the_exception_chain_of_a_protocol_error_holds_no_secret(
    no_task_leak: None,
) -> None:
    """``raise ProtocolError(...) from None`` would hide aiohttp's exception from the
    printed traceback but keep it as ``__context__``, whose ``request_info`` holds
    the ``Authorization`` header and the URL with ``?key=``, for anything walking
    the chain (error reporters, ``vars()`` dumps, pickles): the error has no chain."""

    async def bad_status_line(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 2x0 OK\r\n\r\n")
        await writer.drain()

    async with (
        RawServer(bad_status_line) as server,
        OpenAIChatClient(f"{server.url}/v1?key={KEY}", KEY) as client,
    ):
        _, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, ProtocolError), repr(error)
    assert KEY not in str(error)
    assert KEY not in texts_of(error)
    assert exception_chain(error) == [error]


@pytest.mark.asyncio
async def test_url_credentials_echoed_back_are_redacted(no_task_leak: None) -> None:
    """``http://me:<password>@host`` becomes ``Authorization: Basic base64(me:<password>)``.
    A server (a debugging proxy) that echoes the request in its 401 body puts
    that base64 in ``HTTPStatusError.body`` unredacted: the password in all but
    name (base64 is not a secret). An echoed API key is redacted; the URL
    password must be too, in every form that was sent."""
    password = "hunter2-url-password"
    basic = base64.b64encode(f"me:{password}".encode()).decode()

    async def echo(server: RawServer, reader: Any, writer: Any) -> None:
        head = await server.read_request(reader)
        writer.write(whole(b"401 Unauthorized", b"text/plain", head))
        await writer.drain()

    async with RawServer(echo) as server:
        url = server.url.replace("http://", f"http://me:{password}@")
        async with OpenAIChatClient(url) as client:
            _, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, HTTPStatusError), repr(error)
    assert basic.encode() in server.heads[0]  # it was sent
    texts = texts_of(error)
    assert password not in texts
    assert basic not in texts


async def echo_request(server: RawServer, reader: Any, writer: Any) -> None:
    """Answer 401 with the request head as the body (a debugging proxy)."""
    head = await server.read_request(reader)
    writer.write(whole(b"401 Unauthorized", b"text/plain", head))
    await writer.drain()


@pytest.mark.asyncio
async def test_keys_in_the_url_query_or_in_key_headers_echoed_back_are_redacted(
    no_task_leak: None,
) -> None:
    """A key sent as ``?key=`` (Gemini's way) or in a header given with ``headers=``
    (Azure's ``api-key``) is redacted from an echoed body like ``api_key`` is."""
    header_key = "azure-SECRET-key-0987654321"
    async with (
        RawServer(echo_request) as server,
        OpenAIChatClient(f"{server.url}/v1?key={KEY}", headers={"api-key": header_key}) as client,
    ):
        _, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, HTTPStatusError), repr(error)
    assert KEY.encode() in server.heads[0]
    assert header_key.encode() in server.heads[0]
    texts = texts_of(error)
    assert KEY not in texts
    assert header_key not in texts


@pytest.mark.asyncio
async def test_a_url_password_aiohttp_cannot_send_gives_a_typed_error_without_it(
    no_task_leak: None,
) -> None:
    """aiohttp sends URL credentials as latin-1 Basic auth and refuses others with a
    ``UnicodeEncodeError`` whose ``object`` is ``"user:password"``: the error is a
    typed one that quotes neither."""
    password = "pässwörd-€uro"
    async with RawServer(echo_request) as server:
        url = server.url.replace("http://", f"http://me:{quote(password)}@")
        async with OpenAIChatClient(url) as client:
            _, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, TransportError), repr(error)
    assert not error.retryable
    assert "UnicodeEncodeError" in error.message
    assert password not in texts_of(error)
    assert exception_chain(error) == [error]
    assert server.heads == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _answer_then_stall(server: RawServer, reader: Any, writer: Any) -> None:
    await server.read_request(reader)
    writer.write(SSE_HEAD + b"\r\n" + HELLO)
    await writer.drain()
    await asyncio.sleep(5)


async def _cut_mid_body(server: RawServer, reader: Any, writer: Any) -> None:
    await server.read_request(reader)
    writer.write(SSE_HEAD + b"Content-Length: 10000\r\n\r\n" + HELLO)
    await writer.drain()


async def _no_answer(server: RawServer, reader: Any, writer: Any) -> None:
    await server.read_request(reader)
    await asyncio.sleep(5)


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (None, TransportError),
        (_no_answer, ConnectTimeout),
        (_cut_mid_body, StreamInterrupted),
        (_answer_then_stall, IdleTimeout),
    ],
    ids=["refused", "first-byte-timeout", "cut-mid-body", "idle-timeout"],
)
@pytest.mark.asyncio
async def test_transport_errors_are_not_chained_to_what_they_replace(
    no_task_leak: None, handler: Handler | None, expected: type[RafrxError]
) -> None:
    """No ``__context__`` left by ``raise ... from None``: aiohttp's exceptions, and
    what they hold, are not reachable from the error."""
    timeouts = Timeouts(connect=1, first_byte=0.2, idle=0.2)
    async with contextlib.AsyncExitStack() as stack:
        if handler is None:
            url = f"http://127.0.0.1:{_free_port()}"
        else:
            url = (await stack.enter_async_context(RawServer(handler))).url
        client = OpenAIChatClient(f"{url}/v1?key={KEY}", KEY, timeouts=timeouts)
        await stack.enter_async_context(client)
        _, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert type(error) is expected, repr(error)
    assert exception_chain(error) == [error]
    assert KEY not in texts_of(error)


@pytest.mark.asyncio
async def test_a_malformed_event_echoing_the_key_keeps_no_copy_of_it(no_task_leak: None) -> None:
    """The key is redacted from ``MalformedEvent.raw``, and the ``JSONDecodeError``
    it was raised from (whose ``doc`` is the whole event data) is dropped."""
    body = b"data: {not json " + KEY.encode() + b"}\n\n"

    async def malformed(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(whole(b"200 OK", b"text/event-stream", body))
        await writer.drain()

    async with RawServer(malformed) as server, OpenAIChatClient(server.url, KEY) as client:
        _, error, ended = await collect(client.stream(USER), 3)
    assert ended
    assert isinstance(error, MalformedEvent), repr(error)
    assert error.raw == "{not json ***}"
    assert KEY not in texts_of(error)


# ---------------------------------------------------------------- closing and disposing


@pytest.mark.asyncio
async def test_aclose_ends_the_streams_that_are_running(llm_server: LLMServer) -> None:
    """``client.aclose()`` while a stream is mid-body: the stream ends promptly with a
    typed, non-retryable error after the items it delivered, instead of waiting
    out the idle timeout (here 3 s) and then blaming the server with
    ``IdleTimeout``; its task is done when ``aclose()`` returns."""
    llm_server.enqueue(Reply(text="a" * 400, chunk_size=1, delay=0.005))
    client = OpenAIChatClient(llm_server.url, KEY, timeouts=Timeouts(idle=3))
    outcome = asyncio.ensure_future(collect(client.stream(USER), 1.0))
    await wait_for(lambda: llm_server.open_connections == 1)
    await asyncio.sleep(0.1)
    await client.aclose()
    items, error, ended = await outcome
    await client.aclose()
    assert ended, "the stream was still running 1 s after aclose()"
    assert isinstance(error, TransportError), repr(error)
    assert not isinstance(error, IdleTimeout)
    assert not error.retryable
    assert "client closed" in error.message
    assert text_of(items)
    assert text_of(items) == "a" * len(text_of(items))


@pytest.mark.asyncio
async def test_aclose_during_a_retry_backoff_sends_nothing_more(llm_server: LLMServer) -> None:
    """``aclose()`` while a stream sleeps before its retry: the stream ends (typed
    error) and the retry is not sent, on a fresh session that the closed client
    would never close again."""
    llm_server.enqueue(Fault.status(503, retry_after=0.2), Reply(text="late"))
    client = OpenAIChatClient(llm_server.url, KEY, retry=RetryPolicy(jitter=False))
    outcome = asyncio.ensure_future(collect(client.stream(USER), 2.0))
    await llm_server.wait_requests(1)
    await asyncio.sleep(0.05)  # the 503 was read: the stream sleeps before its retry
    await client.aclose()
    _, error, ended = await outcome
    await settle()
    try:
        assert ended
        assert isinstance(error, TransportError), repr(error)
        assert len(llm_server.requests) == 1, "a request was sent after aclose()"
        assert llm_server.open_connections == 0
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_aclose_ends_the_streams_on_a_session_given_by_the_caller(
    llm_server: LLMServer,
) -> None:
    """The client does not own a session it was given, but owns its calls:
    ``aclose()`` ends them (what the session's owner does before closing it) and
    leaves the session open for the next call."""
    llm_server.enqueue(Reply(text="a" * 400, chunk_size=1, delay=0.005))
    async with aiohttp.ClientSession() as session:
        client = OpenAIChatClient(llm_server.url, KEY, session=session, timeouts=Timeouts(idle=3))
        outcome = asyncio.ensure_future(collect(client.stream(USER), 1.0))
        await wait_for(lambda: llm_server.open_connections == 1)
        await asyncio.sleep(0.1)
        await client.aclose()
        items, error, ended = await outcome
        assert ended
        assert isinstance(error, TransportError), repr(error)
        assert text_of(items)
        assert not session.closed
        llm_server.enqueue(Reply(text="again"))
        got = await run_async(client.stream(USER))
    assert got.response is not None
    assert got.response.text == "again"


@pytest.mark.asyncio
async def test_a_session_closed_by_its_owner_mid_body_is_not_blamed_on_the_server(
    llm_server: LLMServer,
) -> None:
    """aiohttp leaves a read from a closed session waiting (aio-libs/aiohttp#5582): rafrx
    fails the read when the connection closes, so the stream ends at once (not at the
    idle timeout: an hour here), with what it delivered, and a ``TransportError``
    naming the closed session, not an error blamed on the server."""
    llm_server.enqueue(Reply(text="a" * 400, chunk_size=1, delay=0.005))
    session = aiohttp.ClientSession()
    client = OpenAIChatClient(llm_server.url, KEY, session=session, timeouts=Timeouts(idle=3600))
    outcome = asyncio.ensure_future(collect(client.stream(USER), 3))
    await wait_for(lambda: llm_server.open_connections == 1)
    await asyncio.sleep(0.1)
    await session.close()
    items, error, ended = await outcome
    assert ended
    assert isinstance(error, TransportError), repr(error)
    assert not isinstance(error, IdleTimeout)
    assert "session was closed" in error.message
    assert text_of(items)


@pytest.mark.parametrize("fault", ["status", "content-type"])
@pytest.mark.asyncio
async def test_dispose_while_the_error_body_is_read(no_task_leak: None, fault: str) -> None:
    """Disposing while the client reads a stalled error body / wrong-type snippet:
    nothing more is emitted, the connection closes, nothing is retried."""
    head = (
        b"HTTP/1.1 503 Busy\r\nContent-Type: application/json\r\n"
        if fault == "status"
        else b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
    )

    async def stall(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(head + b"Content-Length: 1000\r\n\r\n" + b"{")
        await writer.drain()
        await reader.read()  # until the client closes

    seen: list[object] = []
    async with (
        RawServer(stall) as server,
        OpenAIChatClient(server.url, KEY, retry=FAST_RETRY) as client,
    ):
        subscription = client.stream(USER).subscribe(seen.append, seen.append, seen.append)
        await wait_for(lambda: len(server.heads) == 1)
        await asyncio.sleep(0.05)
        subscription.dispose()
        subscription.dispose()
        await wait_for(lambda: server.open == 0, 2)
        await asyncio.sleep(0.05)
    assert seen == []
    assert len(server.heads) == 1


@pytest.mark.asyncio
async def test_many_concurrent_streams_disposed_mid_body_leave_nothing_open(
    llm_server: LLMServer,
) -> None:
    llm_server.default = Reply(text="b" * 200, chunk_size=1, delay=0.01)
    fds = count_fds()
    async with OpenAIChatClient(llm_server.url, KEY) as client:
        source = client.stream(USER)
        counts = [0] * 50
        subscriptions = []
        for n in range(50):

            def count(_: object, n: int = n) -> None:
                counts[n] += 1

            subscriptions.append(source.subscribe(count))
        await wait_for(lambda: all(counts), 5)
        for subscription in subscriptions:
            subscription.dispose()
        frozen = list(counts)
        await llm_server.wait_connections_closed(timeout=5)
        await asyncio.sleep(0.05)
        assert counts == frozen  # nothing after dispose
        # the same cold observable still works afterwards
        llm_server.default = Reply(text="again")
        got = await run_async(source)
        assert got.response is not None
        assert got.response.text == "again"
    await settle()
    assert count_fds() <= fds + 2
    assert len(llm_server.requests) == 51


@pytest.mark.asyncio
async def test_a_client_is_reusable_after_aclose(llm_server: LLMServer) -> None:
    client: LLMClient = AnthropicClient(llm_server.url, KEY)
    for _ in range(2):
        got = await run_async(client.stream(USER))
        assert got.error is None, repr(got.error)
        await client.aclose()
    await llm_server.wait_connections_closed(timeout=5)
    assert len(llm_server.requests) == 2
