"""The HTTP layer as real servers and proxies behave: content encodings, framing
(chunked, Content-Length, close-delimited HTTP/1.0), content types, redirects,
Retry-After, base_url variants, request headers and body, keep-alive.

Everything is served on 127.0.0.1: by aiohttp.web (tests/sources/_raw_server.py)
or, for byte-level control, by a raw asyncio socket server written here.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import gzip
import json
import socket
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rafrx import collect_agent_response, convert
from rafrx.errors import (
    ContentTypeError,
    HTTPStatusError,
    IncompleteStream,
    RafrxError,
    StreamInterrupted,
)
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.testing import Reply, render
from tests.sources._raw_server import KEY, USER, ask, raw_server, sse

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(20)]

FAST = Timeouts(connect=2.0, first_byte=3.0, idle=3.0)


def body(text: str = "hello world", fmt: str = "openai-chat") -> bytes:
    return render(Reply(text=text), fmt)


def no_key_in(err: BaseException) -> None:
    for shown in (str(err), repr(err), str(getattr(err, "body", "")), str(vars(err))):
        assert KEY not in shown
        assert KEY[6:20] not in shown


# ---------------------------------------------------------------- raw socket server

RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """One HTTP/1.1 request: its start line, headers (lower-case) and body."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    data = await reader.readexactly(length) if length else b""
    return {"start": lines[0], "headers": headers, "body": data}


class RawServer:
    """asyncio TCP server on 127.0.0.1: each request is answered by ``handler``
    (which may loop for keep-alive by returning and letting us read again)."""

    def __init__(self, handler: RawHandler, *, keep_alive: bool = False) -> None:
        self.handler = handler
        self.keep_alive = keep_alive
        self.connections = 0
        self.requests: list[dict[str, Any]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.url = ""

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        self.connections += 1
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    break
                self.requests.append(request)
                await self.handler(reader, writer, request)
                if not self.keep_alive:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(BaseException):  # (cancelled at exit: it ends here anyway)
                await writer.wait_closed()


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p)


def head(status: str = "200 OK", *extra: str, version: str = "HTTP/1.1") -> bytes:
    return ("\r\n".join((f"{version} {status}", *extra)) + "\r\n\r\n").encode()


async def outcome(client: LLMClient, **params: Any) -> tuple[Any, RafrxError | None]:
    try:
        return await ask(client, **params)
    finally:
        await client.aclose()


# ---------------------------------------------------------------- content encodings


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compressed_sse_body_is_decoded(encoding: str) -> None:
    raw = body("compressed hello")
    data = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=data,
            headers={"Content-Type": "text/event-stream", "Content-Encoding": encoding},
        )

    async with raw_server(handle) as (url, _):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert err is None, err
    assert response is not None
    assert response.text == "compressed hello"


async def test_gzip_stream_flushed_per_event_is_delivered_incrementally() -> None:
    """A proxy gzipping an SSE stream with a sync flush per event: the first event
    must arrive before the server sends the rest (no buffering to EOF)."""
    events = body("abc").split(b"\n\n")
    events = [e + b"\n\n" for e in events if e]
    first_seen = asyncio.Event()
    gate = asyncio.Event()

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        comp = zlib.compressobj(wbits=31)
        writer.write(
            head(
                "200 OK",
                "Content-Type: text/event-stream",
                "Content-Encoding: gzip",
                "Transfer-Encoding: chunked",
            )
        )
        writer.write(chunked(comp.compress(events[0] + events[1]) + comp.flush(zlib.Z_SYNC_FLUSH)))
        await writer.drain()
        await asyncio.wait_for(gate.wait(), 5)
        rest = b"".join(events[2:])
        writer.write(chunked(comp.compress(rest) + comp.flush()) + b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server:
        client = OpenAIChatClient(server.url, KEY, timeouts=FAST)
        seen: list[Any] = []
        done = asyncio.get_running_loop().create_future()

        def on_next(update: Any) -> None:
            seen.append(update)
            first_seen.set()

        client.stream(USER).subscribe(
            on_next=on_next,
            on_error=lambda e: done.set_result(e),
            on_completed=lambda: done.set_result(None),
        )
        try:
            await asyncio.wait_for(first_seen.wait(), 3)
        finally:
            gate.set()
        result = await asyncio.wait_for(done, 5)
        await client.aclose()
    assert result is None, result


async def test_brotli_without_a_decoder_is_a_typed_error_without_the_key() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=b"\x0b\x02\x80garbage-not-br",
            headers={"Content-Type": "text/event-stream", "Content-Encoding": "br"},
        )

    async with raw_server(handle) as (url, _):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, RafrxError)
    no_key_in(err)


async def test_corrupt_gzip_body_is_stream_interrupted() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=b"\x1f\x8b\x08\x00garbage-garbage-garbage",
            headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"},
        )

    async with raw_server(handle) as (url, _):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, RafrxError), err
    no_key_in(err)


async def test_gzip_json_error_body_keeps_the_provider_message() -> None:
    payload = {"error": {"message": "Invalid model xyz", "type": "invalid_request_error"}}

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(
            status=400,
            body=gzip.compress(json.dumps(payload).encode()),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )

    async with raw_server(handle) as (url, _):
        _, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 400
    assert "Invalid model xyz" in str(err)
    assert not err.retryable


# ---------------------------------------------------------------- framing


async def test_http10_close_delimited_body_completes() -> None:
    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(head("200 OK", "Content-Type: text/event-stream", version="HTTP/1.0"))
        for piece in (body("ten")[i : i + 7] for i in range(0, len(body("ten")), 7)):
            writer.write(piece)
            await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "ten"


async def test_http11_close_delimited_body_completes() -> None:
    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(head("200 OK", "Content-Type: text/event-stream", "Connection: close"))
        writer.write(body("eleven"))
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "eleven"


async def test_content_length_body_completes() -> None:
    data = body("sized")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", f"Content-Length: {len(data)}")
        )
        writer.write(data)
        await writer.drain()
        await asyncio.sleep(0.2)  # keep the connection open: the length ends the body

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "sized"


async def test_content_length_short_body_is_stream_interrupted() -> None:
    data = body("short")
    cut = data[: len(data) // 2]

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", f"Content-Length: {len(data)}")
        )
        writer.write(cut)
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, StreamInterrupted), repr(err)


async def test_chunked_body_without_last_chunk_is_stream_interrupted() -> None:
    data = body("chunky")
    cut = data[: len(data) - 40]

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
        )
        writer.write(chunked(cut))
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, StreamInterrupted | IncompleteStream), repr(err)


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic", "openai-responses"])
async def test_clean_eof_mid_event_without_terminal_is_incomplete(fmt: str) -> None:
    data = body("cut here", fmt)
    # end cleanly (chunked, last chunk sent) in the middle of the event after the text
    text_at = data.find(b"cut here")
    end = data.find(b"\n\n", text_at) + 2
    cut = data[:end] + b'data: {"partial'

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
        )
        writer.write(chunked(cut) + b"0\r\n\r\n")
        await writer.drain()

    cls = {"openai-chat": OpenAIChatClient, "anthropic": AnthropicClient}.get(
        fmt, OpenAIResponsesClient
    )
    async with RawServer(handler) as server:
        response, err = await outcome(cls(server.url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, IncompleteStream), repr(err)


async def test_chunk_boundaries_splitting_utf8_and_crlf() -> None:
    text = "héllo wörld ✓ 😀"
    data = body(text).replace(b"\n", b"\r\n")
    parts = [data[i : i + 3] for i in range(0, len(data), 3)]

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
        )
        for p in parts:
            writer.write(chunked(p))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == text


async def test_informational_103_before_200_is_skipped() -> None:
    data = body("early hints")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(head("103 Early Hints", "Link: </style.css>; rel=preload"))
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", f"Content-Length: {len(data)}")
        )
        writer.write(data)
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "early hints"


# ---------------------------------------------------------------- content types


@pytest.mark.parametrize(
    "ctype",
    ["text/event-stream; charset=utf-8", "TEXT/EVENT-STREAM", "text/event-stream;charset=UTF-8"],
)
async def test_event_stream_with_parameters_is_accepted(ctype: str) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body("typed"), headers={"Content-Type": ctype})

    async with raw_server(handle) as (url, _):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "typed"


async def test_event_stream_with_latin1_charset_is_still_utf8() -> None:
    """RELIABILITY #5: ``text/event-stream;charset=…`` is decoded as UTF-8 regardless."""

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=body("naïve café"), headers={"Content-Type": "text/event-stream; charset=latin-1"}
        )

    async with raw_server(handle) as (url, _):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "naïve café"


async def test_an_event_stream_without_a_content_type_is_decoded() -> None:
    """No ``Content-Type`` at all (nearai/private-ml-sdk#20), but a body that starts as
    an event stream: it is read, as openai-python reads it."""
    data = body("untyped")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(head("200 OK", f"Content-Length: {len(data)}"))
        writer.write(data)
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, repr(err)
    assert response.text == "untyped"


async def test_json_error_with_200_status_names_the_provider_message() -> None:
    payload = {"error": {"message": f"model not found (key {KEY})", "type": "not_found"}}

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.json_response(payload, status=200)

    async with raw_server(handle) as (url, seen):
        client = OpenAIChatClient(url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01))
        response, err = await outcome(client)
    assert response is None
    assert isinstance(err, ContentTypeError), repr(err)
    assert err.status == 200
    assert "model not found" in str(err)
    no_key_in(err)
    assert len(seen) == 1  # not retried by default (RELIABILITY #5)


async def test_html_502_from_a_proxy_is_a_retryable_status_error() -> None:
    html = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(status=502, text=html, content_type="text/html")

    async with raw_server(handle) as (url, seen):
        _, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 502
    assert err.retryable
    assert "502" in str(err)
    assert len(seen) == 1


async def test_html_200_from_a_captive_proxy_is_a_content_type_error_with_snippet() -> None:
    html = "<html><body>Please log in to the corporate proxy</body></html>"

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(status=200, text=html, content_type="text/html")

    async with raw_server(handle) as (url, _):
        _, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert isinstance(err, ContentTypeError)
    assert "corporate proxy" in (err.body or "")


async def test_204_no_content_is_not_a_success() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(status=204)

    async with raw_server(handle) as (url, _):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, RafrxError)


async def test_204_with_event_stream_type_is_incomplete_not_success() -> None:
    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(head("204 No Content", "Content-Type: text/event-stream"))
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, RafrxError), err


# ---------------------------------------------------------------- redirects


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirect_is_not_followed_and_names_the_target(status: int) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/new"):
            return await sse("followed")(request)
        return web.Response(status=status, headers={"Location": "/new/v1/chat/completions"})

    async with raw_server(handle) as (url, seen):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, HTTPStatusError)
    assert err.status == status
    assert not err.retryable
    assert "/new/v1/chat/completions" in str(err)
    assert [s.path for s in seen] == ["/v1/chat/completions"]
    no_key_in(err)


async def test_redirect_to_another_host_sends_nothing_there() -> None:
    async def other(request: web.Request) -> web.StreamResponse:
        return await sse("stolen")(request)

    async with raw_server(other) as (other_url, other_seen):

        async def handle(request: web.Request) -> web.StreamResponse:
            return web.Response(
                status=307,
                headers={"Location": f"{other_url}/v1/chat/completions?key={KEY}"},
            )

        async with raw_server(handle) as (url, seen):
            _, err = await outcome(
                AnthropicClient(url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01))
            )
    assert isinstance(err, HTTPStatusError)
    assert other_seen == []
    assert len(seen) == 1
    no_key_in(err)


# ---------------------------------------------------------------- status errors


async def test_429_retry_after_seconds_is_honoured() -> None:
    calls: list[float] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        calls.append(time.monotonic())
        if len(calls) == 1:
            return web.json_response(
                {"error": {"message": "slow down", "type": "rate_limit_error"}},
                status=429,
                headers={"Retry-After": "1"},
            )
        return await sse("after wait")(request)

    async with raw_server(handle) as (url, _):
        client = OpenAIChatClient(
            url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01, jitter=False)
        )
        response, err = await outcome(client)
    assert err is None, err
    assert response.text == "after wait"
    assert len(calls) == 2
    assert calls[1] - calls[0] >= 0.9


async def test_503_retry_after_http_date_is_honoured() -> None:
    calls: list[float] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        calls.append(time.time())
        if len(calls) == 1:
            when = email.utils.formatdate(time.time() + 2, usegmt=True)
            return web.Response(
                status=503, text="Service Unavailable", headers={"Retry-After": when}
            )
        return await sse("dated")(request)

    async with raw_server(handle) as (url, _):
        client = OpenAIChatClient(
            url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01, jitter=False)
        )
        response, err = await outcome(client)
    assert err is None, err
    assert response.text == "dated"
    assert len(calls) == 2
    # an HTTP date has a one-second resolution: at least ~1 s, not the 0.01 s backoff
    assert calls[1] - calls[0] >= 0.9


async def test_retry_after_without_policy_is_reported() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(status=429, text="busy", headers={"Retry-After": "7"})

    async with raw_server(handle) as (url, seen):
        _, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert isinstance(err, HTTPStatusError)
    assert err.retry_after == 7.0
    assert len(seen) == 1


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("cls", [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient])
async def test_auth_errors_keep_the_message_but_not_the_key(status: int, cls: type) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        sent = request.headers.get("Authorization") or request.headers.get("x-api-key")
        return web.json_response(
            {"error": {"message": f"Incorrect API key provided: {sent}", "type": "auth"}},
            status=status,
        )

    async with raw_server(handle) as (url, seen):
        _, err = await outcome(cls(url, KEY, timeouts=FAST, retry=RetryPolicy()))
    assert isinstance(err, HTTPStatusError)
    assert err.status == status
    assert "Incorrect API key provided" in str(err)
    assert not err.retryable
    assert len(seen) == 1
    no_key_in(err)


async def test_retries_release_connections() -> None:
    """Every failed attempt gives its connection back: 3 attempts over keep-alive
    reuse (or at least do not accumulate) connections."""
    n = 0

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        nonlocal n
        n += 1
        if n < 3:
            msg = b'{"error":{"message":"overloaded"}}'
            writer.write(
                head(
                    "503 Service Unavailable",
                    "Content-Type: application/json",
                    f"Content-Length: {len(msg)}",
                )
                + msg
            )
        else:
            data = body("third")
            writer.write(
                head("200 OK", "Content-Type: text/event-stream", f"Content-Length: {len(data)}")
                + data
            )
        await writer.drain()

    async with RawServer(handler, keep_alive=True) as server:
        client = OpenAIChatClient(
            server.url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01, jitter=False)
        )
        response, err = await outcome(client)
    assert err is None, err
    assert response.text == "third"
    assert len(server.requests) == 3
    assert server.connections == 1, server.connections


# ---------------------------------------------------------------- base_url variants


@pytest.mark.parametrize(
    ("suffix", "cls", "path"),
    [
        ("", OpenAIChatClient, "/v1/chat/completions"),
        ("/", OpenAIChatClient, "/v1/chat/completions"),
        ("/v1", OpenAIChatClient, "/v1/chat/completions"),
        ("/v1/", OpenAIChatClient, "/v1/chat/completions"),
        ("/api/v1/", OpenAIChatClient, "/api/v1/chat/completions"),
        ("/openai", OpenAIChatClient, "/openai/chat/completions"),
        ("", AnthropicClient, "/v1/messages"),
        ("/", AnthropicClient, "/v1/messages"),
        ("/v1/", AnthropicClient, "/v1/messages"),
        ("/anthropic/", AnthropicClient, "/anthropic/v1/messages"),
        ("/v1/", OpenAIResponsesClient, "/v1/responses"),
        ("", OpenAIResponsesClient, "/v1/responses"),
    ],
)
async def test_base_url_paths(suffix: str, cls: type, path: str) -> None:
    fmt = cls.dialect

    async def handle(request: web.Request) -> web.StreamResponse:
        return await sse("pathy", fmt)(request)

    async with raw_server(handle) as (url, seen):
        response, err = await outcome(cls(url + suffix, KEY, timeouts=FAST))
    assert err is None, err
    assert [s.path for s in seen] == [path]
    assert response.text == "pathy"


async def test_base_url_query_is_kept_and_masked_in_errors() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(status=500, text="boom")

    async with raw_server(handle) as (url, seen):
        _, err = await outcome(
            OpenAIChatClient(f"{url}/v1/?api-version=2024-10-01&key={KEY}", timeouts=FAST)
        )
    assert seen[0].path == "/v1/chat/completions"
    assert seen[0].query == {"api-version": "2024-10-01", "key": KEY}
    assert isinstance(err, HTTPStatusError)
    no_key_in(err)


async def test_ipv6_literal_base_url() -> None:
    probe = socket.socket(socket.AF_INET6)
    try:
        probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    finally:
        probe.close()

    async def handle(request: web.Request) -> web.StreamResponse:
        return await sse("six")(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "::1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        response, err = await outcome(OpenAIChatClient(f"http://[::1]:{port}/v1/", KEY))
    finally:
        await runner.cleanup()
    assert err is None, err
    assert response.text == "six"


# ---------------------------------------------------------------- request building


async def test_anthropic_headers_and_body() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await sse("ant", "anthropic")(request)

    async with raw_server(handle) as (url, seen):
        _, err = await outcome(
            AnthropicClient(url, KEY, model="claude-x", timeouts=FAST, temperature=0.3)
        )
    assert err is None, err
    h = seen[0].headers
    assert h["x-api-key"] == KEY
    assert "Authorization" not in h
    assert h.get("anthropic-version")
    assert h["Content-Type"].startswith("application/json")
    assert seen[0].body["model"] == "claude-x"
    assert seen[0].body["stream"] is True
    assert seen[0].body["temperature"] == 0.3
    assert seen[0].body["max_tokens"] > 0
    assert (
        seen[0].body["messages"] == [{"role": "user", "content": "Hi"}]
        or seen[0].body["messages"][0]["role"] == "user"
    )


async def test_openai_headers_and_body() -> None:
    async with raw_server(sse("oa")) as (url, seen):
        _, err = await outcome(
            OpenAIChatClient(url, KEY, model="gpt-x", timeouts=FAST, seed=7), top_p=0.5
        )
    assert err is None, err
    h = seen[0].headers
    assert h["Authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in h
    assert h["Accept"] == "text/event-stream"
    b = seen[0].body
    assert b["model"] == "gpt-x"
    assert b["stream"] is True
    assert b["seed"] == 7
    assert b["top_p"] == 0.5
    assert b["stream_options"] == {"include_usage": True}
    assert b["messages"] == [{"role": "user", "content": "Hi"}]


async def test_no_api_key_sends_no_auth_header() -> None:
    async with raw_server(sse("anon")) as (url, seen):
        _, err = await outcome(OpenAIChatClient(url, timeouts=FAST))
    assert err is None, err
    assert "Authorization" not in seen[0].headers


@pytest.mark.parametrize("name", ["Accept", "accept", "ACCEPT"])
async def test_user_header_replaces_a_default_whatever_its_case(name: str) -> None:
    """A header given by the user replaces the client's default one: HTTP header
    names are case-insensitive, so exactly one value must be sent."""
    async with raw_server(sse("hdr")) as (url, seen):
        _, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=FAST, headers={name: "text/event-stream, */*"})
        )
    assert err is None, err
    assert seen[0].headers.getall("Accept") == ["text/event-stream, */*"]


@pytest.mark.parametrize("name", ["anthropic-version", "Anthropic-Version"])
async def test_user_anthropic_version_header_is_sent_once(name: str) -> None:
    async with raw_server(sse("v", "anthropic")) as (url, seen):
        _, err = await outcome(
            AnthropicClient(url, KEY, timeouts=FAST, headers={name: "2099-01-01"})
        )
    assert err is None, err
    assert seen[0].headers.getall("anthropic-version") == ["2099-01-01"]


@pytest.mark.parametrize("name", ["Authorization", "authorization"])
async def test_user_authorization_with_api_key_sends_one_authorization(name: str) -> None:
    """A gateway token in ``headers`` plus an ``api_key``: the request must carry a
    single Authorization header (two is malformed, RFC 9110 5.3)."""
    async with raw_server(sse("auth")) as (url, seen):
        _, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=FAST, headers={name: "Bearer gw-token-xyz"})
        )
    assert err is None, err
    assert len(seen[0].headers.getall("Authorization")) == 1


# ---------------------------------------------------------------- keep-alive


async def test_sequential_streams_reuse_one_connection() -> None:
    async with raw_server(sse("again")) as (url, seen):
        client = OpenAIChatClient(url, KEY, timeouts=FAST)
        peers: set[Any] = set()
        try:
            for _ in range(20):
                response, err = await ask(client)
                assert err is None, err
                assert response.text == "again"
            session = await client._sessions.get()
            connector = session.connector
            assert connector is not None
            # every response was released to the pool, none is held
            assert len(connector._acquired) == 0  # type: ignore[attr-defined]
            idle = sum(len(v) for v in connector._conns.values())  # type: ignore[attr-defined]
            assert idle <= 1, idle
        finally:
            await client.aclose()
    assert len(seen) == 20
    del peers


async def test_sequential_streams_over_one_raw_keepalive_connection() -> None:
    data = body("ka")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
            + chunked(data)
            + b"0\r\n\r\n"
        )
        await writer.drain()

    async with RawServer(handler, keep_alive=True) as server:
        client = OpenAIChatClient(server.url, KEY, timeouts=FAST)
        try:
            for _ in range(10):
                _response, err = await ask(client)
                assert err is None, err
        finally:
            await client.aclose()
    assert len(server.requests) == 10
    assert server.connections == 1


async def test_server_closing_after_each_response() -> None:
    data = body("bye")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head(
                "200 OK",
                "Content-Type: text/event-stream",
                f"Content-Length: {len(data)}",
                "Connection: close",
            )
            + data
        )
        await writer.drain()

    async with RawServer(handler) as server:
        client = OpenAIChatClient(server.url, KEY, timeouts=FAST)
        try:
            for _ in range(8):
                response, err = await ask(client)
                assert err is None, err
                assert response.text == "bye"
        finally:
            await client.aclose()
    assert server.connections == 8


async def test_keepalive_connection_closed_by_server_while_idle_is_not_an_error() -> None:
    """The server keeps the connection alive, then closes it while idle (its
    keep-alive timeout). The next stream must not fail on the stale socket."""
    data = body("stale")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", f"Content-Length: {len(data)}") + data
        )
        await writer.drain()

    # keep_alive False: the server closes the socket right after answering, but
    # without "Connection: close" the client believes it may reuse it.
    async with RawServer(handler) as server:
        client = OpenAIChatClient(server.url, KEY, timeouts=FAST)
        try:
            _first, err1 = await ask(client)
            await asyncio.sleep(0.2)  # let the FIN arrive
            second, err2 = await ask(client)
        finally:
            await client.aclose()
    assert err1 is None, err1
    assert err2 is None, err2
    assert second.text == "stale"


async def test_disposing_mid_stream_closes_the_connection() -> None:
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, req: Any) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
        )
        first = body("x").split(b"\n\n")[0] + b"\n\n"
        writer.write(chunked(first))
        await writer.drain()
        try:
            got = await asyncio.wait_for(reader.read(1), 5)
            if got == b"":
                closed.set()
        except (ConnectionError, TimeoutError):
            closed.set()

    async with RawServer(handler) as server:
        client = OpenAIChatClient(server.url, KEY, timeouts=FAST)
        got_one = asyncio.Event()
        sub = client.stream(USER).subscribe(on_next=lambda _: got_one.set())
        await asyncio.wait_for(got_one.wait(), 3)
        sub.dispose()
        await asyncio.wait_for(closed.wait(), 3)
        await client.aclose()
    assert closed.is_set()


# ---------------------------------------------------------------- more framing and encodings


async def test_gzip_corrupted_mid_stream_is_interrupted_with_a_clean_reason() -> None:
    data = body("hello")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        comp = zlib.compressobj(wbits=31)
        good = comp.compress(data[:700]) + comp.flush(zlib.Z_SYNC_FLUSH)
        writer.write(
            head(
                "200 OK",
                "Content-Type: text/event-stream",
                "Content-Encoding: gzip",
                "Transfer-Encoding: chunked",
            )
        )
        writer.write(chunked(good))
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(chunked(b"\xff\xff\xff garbage garbage") + b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, StreamInterrupted), repr(err)
    assert err.partial is not None
    assert err.partial.text == "hello"
    assert "\n" not in str(err)
    assert "400" not in str(err), str(err)


async def test_done_then_server_keeps_connection_open_completes_at_once() -> None:
    data = body("quick")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
            + chunked(data)
        )
        await writer.drain()
        await asyncio.sleep(10)

    async with RawServer(handler) as server:
        start = time.monotonic()
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "quick"
    assert time.monotonic() - start < 2.0


async def test_bytes_after_done_on_keepalive_do_not_poison_the_next_request() -> None:
    """The server sends [DONE], then junk in the same chunked body: the half-read
    connection must not go back to the pool, so the next call parses cleanly."""
    data = body("first")
    n = 0

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        nonlocal n
        n += 1
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
        )
        if n == 1:
            writer.write(chunked(data))
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(chunked(b"data: junk after done\n\n" * 50) + b"0\r\n\r\n")
        else:
            writer.write(chunked(body("second")) + b"0\r\n\r\n")
        await writer.drain()

    async with RawServer(handler, keep_alive=True) as server:
        client = OpenAIChatClient(server.url, KEY, timeouts=FAST)
        try:
            first, err1 = await ask(client)
            await asyncio.sleep(0.2)
            second, err2 = await ask(client)
        finally:
            await client.aclose()
    assert err1 is None, err1
    assert err2 is None, err2
    assert (first.text, second.text) == ("first", "second")


async def test_chunk_extensions_and_trailers_are_tolerated() -> None:
    data = body("trailers")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head(
                "200 OK",
                "Content-Type: text/event-stream",
                "Transfer-Encoding: chunked",
                "Trailer: X-Done",
            )
        )
        writer.write(b"%x;ext=1\r\n%s\r\n" % (len(data), data))
        writer.write(b"0\r\nX-Done: yes\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "trailers"


async def test_http10_gzip_close_delimited_body_completes() -> None:
    data = gzip.compress(body("old proxy"))

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head(
                "200 OK",
                "Content-Type: text/event-stream",
                "Content-Encoding: gzip",
                version="HTTP/1.0",
            )
        )
        writer.write(data)
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "old proxy"


async def test_100_continue_before_200_is_skipped() -> None:
    data = body("continued")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(head("100 Continue"))
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", f"Content-Length: {len(data)}") + data
        )
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "continued"


async def test_empty_200_event_stream_is_incomplete() -> None:
    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(head("200 OK", "Content-Type: text/event-stream", "Content-Length: 0"))
        await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert response is None
    assert isinstance(err, IncompleteStream), repr(err)


async def test_headers_never_sent_is_a_connect_timeout() -> None:
    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        await asyncio.sleep(10)

    async with RawServer(handler) as server:
        start = time.monotonic()
        response, err = await outcome(
            OpenAIChatClient(server.url, KEY, timeouts=Timeouts(first_byte=0.5, idle=5))
        )
    assert response is None
    assert isinstance(err, RafrxError), repr(err)
    assert type(err).__name__ == "ConnectTimeout", repr(err)
    assert time.monotonic() - start < 3


async def test_anthropic_json_error_with_200_names_the_message() -> None:
    payload = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.json_response(payload, status=200)

    async with raw_server(handle) as (url, _):
        _, err = await outcome(AnthropicClient(url, KEY, timeouts=FAST))
    assert isinstance(err, ContentTypeError)
    assert "Overloaded" in str(err)


async def test_anthropic_529_is_retryable_and_retried() -> None:
    n = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal n
        n += 1
        if n == 1:
            return web.json_response(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                status=529,
            )
        return await sse("recovered", "anthropic")(request)

    async with raw_server(handle) as (url, _):
        response, err = await outcome(
            AnthropicClient(url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01))
        )
    assert err is None, err
    assert response.text == "recovered"
    assert n == 2


async def test_retry_after_ms_wins_over_retry_after() -> None:
    calls: list[float] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        calls.append(time.monotonic())
        if len(calls) == 1:
            return web.Response(
                status=429, text="busy", headers={"retry-after-ms": "50", "Retry-After": "30"}
            )
        return await sse("ms")(request)

    async with raw_server(handle) as (url, _):
        _response, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=FAST, retry=RetryPolicy(jitter=False))
        )
    assert err is None, err
    assert calls[1] - calls[0] < 1.0


async def test_retry_after_beyond_the_cap_is_not_waited_for() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(status=429, text="come back tomorrow", headers={"Retry-After": "86400"})

    async with raw_server(handle) as (url, seen):
        start = time.monotonic()
        _, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=FAST, retry=RetryPolicy(max_retry_after=5))
        )
    assert isinstance(err, HTTPStatusError)
    assert err.retry_after == 86400
    assert len(seen) == 1
    assert time.monotonic() - start < 2


async def test_redirect_without_location_is_a_status_error() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(status=302)

    async with raw_server(handle) as (url, _):
        _, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 302
    assert "Location" in str(err)


async def test_error_body_in_utf16_is_decoded_by_its_charset() -> None:
    payload = {"error": {"message": "Ungültiger Schlüssel", "type": "auth"}}

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(
            status=401,
            body=json.dumps(payload, ensure_ascii=False).encode("utf-16"),
            headers={"Content-Type": "application/json; charset=utf-16"},
        )

    async with raw_server(handle) as (url, _):
        _, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert isinstance(err, HTTPStatusError)
    assert "Ungültiger Schlüssel" in str(err)


async def test_azure_api_key_header_echoed_in_an_error_is_redacted() -> None:
    azure_key = "0123456789abcdef0123456789abcdef"

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {"error": {"message": f"Access denied for key {request.headers['api-key']}"}},
            status=401,
        )

    async with raw_server(handle) as (url, seen):
        _, err = await outcome(
            OpenAIChatClient(
                f"{url}/openai/deployments/gpt/?api-version=2024-10-21",
                timeouts=FAST,
                headers={"api-key": azure_key},
            )
        )
    assert seen[0].path == "/openai/deployments/gpt/chat/completions"
    assert seen[0].query == {"api-version": "2024-10-21"}
    assert isinstance(err, HTTPStatusError)
    assert "Access denied" in str(err)
    for shown in (str(err), repr(err), err.body or ""):
        assert azure_key not in shown


@pytest.mark.parametrize("name", ["x-api-key", "X-Api-Key"])
async def test_anthropic_user_key_header_with_api_key_sends_one(name: str) -> None:
    async with raw_server(sse("k", "anthropic")) as (url, seen):
        _, err = await outcome(
            AnthropicClient(url, KEY, timeouts=FAST, headers={name: "sk-ant-other"})
        )
    assert err is None, err
    assert len(seen[0].headers.getall("x-api-key")) == 1


async def test_proxy_environment_is_ignored_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    proxied: list[dict[str, Any]] = []

    async def proxy(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        proxied.append(req)
        writer.write(head("502 Bad Gateway", "Content-Length: 0"))
        await writer.drain()

    async with RawServer(proxy) as proxy_server, raw_server(sse("direct")) as (url, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy_server.url)
        monkeypatch.setenv("http_proxy", proxy_server.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "direct"
    assert proxied == []
    assert len(seen) == 1


async def test_concurrent_streams_all_complete() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in body("parallel").split(b"\n\n"):
            if piece:
                await resp.write(piece + b"\n\n")
                await asyncio.sleep(0.005)
        await resp.write_eof()
        return resp

    async with raw_server(handle) as (url, seen):
        client = OpenAIChatClient(url, KEY, timeouts=FAST)
        try:
            results = await asyncio.gather(*(ask(client) for _ in range(40)))
            session = await client._sessions.get()
            assert len(session.connector._acquired) == 0  # type: ignore[union-attr]
        finally:
            await client.aclose()
    assert all(err is None and r.text == "parallel" for r, err in results)
    assert len(seen) == 40


async def test_body_read_error_then_reuse_of_the_client() -> None:
    """After a StreamInterrupted (server cut the body), the same client's next call
    works: no broken connection is reused."""
    n = 0
    data = body("again")

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        nonlocal n
        n += 1
        if n == 1:
            writer.write(
                head("200 OK", "Content-Type: text/event-stream", f"Content-Length: {len(data)}")
                + data[:100]
            )
            await writer.drain()
            writer.transport.abort()
            return
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", f"Content-Length: {len(data)}") + data
        )
        await writer.drain()

    async with RawServer(handler, keep_alive=True) as server:
        client = OpenAIChatClient(server.url, KEY, timeouts=FAST)
        try:
            _, err1 = await ask(client)
            second, err2 = await ask(client)
        finally:
            await client.aclose()
    assert isinstance(err1, StreamInterrupted), repr(err1)
    assert err2 is None, err2
    assert second.text == "again"


# ---------------------------------------------------------------- idle, tails, request framing


async def test_keepalive_comments_reset_the_idle_timeout() -> None:
    events = [e + b"\n\n" for e in body("patient").split(b"\n\n") if e]

    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(events[0])
        for _ in range(8):  # 1.2 s of pings, each well within the 0.5 s idle timeout
            await asyncio.sleep(0.15)
            await resp.write(b": keep-alive\n\n")
        for e in events[1:]:
            await resp.write(e)
        await resp.write_eof()
        return resp

    async with raw_server(handle) as (url, _):
        response, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=Timeouts(first_byte=3, idle=0.5))
        )
    assert err is None, err
    assert response.text == "patient"


async def test_silence_after_headers_is_an_idle_timeout_with_the_partial() -> None:
    events = [e + b"\n\n" for e in body("stalled").split(b"\n\n") if e]

    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(events[0] + events[1])
        await asyncio.sleep(1.5)
        return resp

    async with raw_server(handle) as (url, _):
        start = time.monotonic()
        response, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=Timeouts(first_byte=3, idle=0.4))
        )
        elapsed = time.monotonic() - start
    assert response is None
    assert type(err).__name__ == "IdleTimeout", repr(err)
    assert err.partial.text == "stalled"  # type: ignore[union-attr]
    assert elapsed < 2.5


@pytest.mark.parametrize("tail", [b"\n", b""])
async def test_final_done_without_its_blank_line_still_completes(tail: bytes) -> None:
    data = body("tail").rstrip(b"\n") + tail  # "... data: [DONE]" + "\n" or nothing

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=data, headers={"Content-Type": "text/event-stream"})

    async with raw_server(handle) as (url, _):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "tail"


async def test_anthropic_final_message_stop_without_its_blank_line_completes() -> None:
    data = body("ant tail", "anthropic").rstrip(b"\n")

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=data, headers={"Content-Type": "text/event-stream"})

    async with raw_server(handle) as (url, _):
        response, err = await outcome(AnthropicClient(url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "ant tail"


@pytest.mark.parametrize("cls", [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient])
async def test_request_body_has_a_content_length_not_chunked(cls: type) -> None:
    """Some proxies and small servers refuse a chunked request body: the JSON goes
    with a Content-Length equal to its size."""
    captured: list[dict[str, Any]] = []

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        captured.append(req)
        writer.write(head("500 Internal Server Error", "Content-Length: 0"))
        await writer.drain()

    async with RawServer(handler) as server:
        await outcome(cls(server.url, KEY, timeouts=FAST))
    req = captured[0]
    assert req["start"].startswith("POST ")
    assert "transfer-encoding" not in req["headers"]
    assert int(req["headers"]["content-length"]) == len(req["body"]) > 0
    assert req["headers"]["content-type"].startswith("application/json")
    payload = json.loads(req["body"])
    assert payload["stream"] is True


async def test_responses_request_shape() -> None:
    async with raw_server(sse("resp", "openai-responses")) as (url, seen):
        _, err = await outcome(
            OpenAIResponsesClient(url, KEY, model="o-x", timeouts=FAST, store=False)
        )
    assert err is None, err
    b = seen[0].body
    assert b["model"] == "o-x"
    assert b["stream"] is True
    assert b["store"] is False
    assert b["input"][0]["role"] == "user"
    assert b["input"][0]["content"] == "Hi"
    assert seen[0].headers["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("name", ["User-Agent", "user-agent"])
async def test_user_agent_default_and_override(name: str) -> None:
    async with raw_server(sse("ua")) as (url, seen):
        await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
        await outcome(OpenAIChatClient(url, KEY, timeouts=FAST, headers={name: "my-app/1.0"}))
    assert seen[0].headers["User-Agent"].startswith("rafrx")
    assert seen[1].headers.getall("User-Agent") == ["my-app/1.0"]


@pytest.mark.parametrize("name", ["Content-Type", "content-type"])
async def test_user_content_type_header_is_sent_once(name: str) -> None:
    async with raw_server(sse("ct")) as (url, seen):
        _, err = await outcome(
            OpenAIChatClient(
                url, KEY, timeouts=FAST, headers={name: "application/json; charset=utf-8"}
            )
        )
    assert err is None, err
    assert len(seen[0].headers.getall("Content-Type")) == 1


async def test_ipv6_host_header() -> None:
    probe = socket.socket(socket.AF_INET6)
    try:
        probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    finally:
        probe.close()
    hosts: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        hosts.append(request.headers["Host"])
        return web.Response(status=404, text="nope")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "::1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        _, err = await outcome(AnthropicClient(f"http://[::1]:{port}", KEY, timeouts=FAST))
    finally:
        await runner.cleanup()
    assert hosts == [f"[::1]:{port}"]
    assert isinstance(err, HTTPStatusError)
    assert err.status == 404


# ---------------------------------------------------------------- retries and body bytes


async def test_retries_resend_the_same_body_and_headers() -> None:
    n = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal n
        n += 1
        if n < 3:
            return web.Response(status=503, text="busy")
        return await sse("same", "anthropic")(request)

    async with raw_server(handle) as (url, seen):
        response, err = await outcome(
            AnthropicClient(
                url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01, jitter=False)
            )
        )
    assert err is None, err
    assert response.text == "same"
    assert len(seen) == 3
    assert seen[0].body
    assert seen[0].body == seen[1].body == seen[2].body
    for s in seen:
        assert s.headers["x-api-key"] == KEY
        assert s.path == "/v1/messages"


async def test_x_should_retry_true_on_a_400_is_retried() -> None:
    n = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal n
        n += 1
        if n == 1:
            return web.json_response(
                {"error": {"message": "transient"}}, status=400, headers={"x-should-retry": "true"}
            )
        return await sse("retried")(request)

    async with raw_server(handle) as (url, _):
        response, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01))
        )
    assert err is None, err
    assert response.text == "retried"
    assert n == 2


async def test_retry_after_date_in_the_past_retries_at_once() -> None:
    n = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal n
        n += 1
        if n == 1:
            past = email.utils.formatdate(time.time() - 3600, usegmt=True)
            return web.Response(status=503, text="later", headers={"Retry-After": past})
        return await sse("now")(request)

    async with raw_server(handle) as (url, _):
        start = time.monotonic()
        response, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=5))
        )
        elapsed = time.monotonic() - start
    assert err is None, err
    assert response.text == "now"
    assert elapsed < 2


async def test_bom_on_a_retried_gzip_response_is_stripped() -> None:
    n = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal n
        n += 1
        data = gzip.compress(b"\xef\xbb\xbf" + body("bom"))
        return web.Response(
            status=503 if n == 1 else 200,
            body=data,
            headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"},
        )

    async with raw_server(handle) as (url, _):
        response, err = await outcome(
            OpenAIChatClient(url, KEY, timeouts=FAST, retry=RetryPolicy(initial_backoff=0.01))
        )
    assert err is None, err
    assert response.text == "bom"


async def test_invalid_utf8_in_the_body_becomes_replacement_chars() -> None:
    data = body("AXB").replace(b"AXB", b"A\xffB")

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=data, headers={"Content-Type": "text/event-stream"})

    async with raw_server(handle) as (url, _):
        response, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "A\ufffdB"


async def test_http11_without_length_or_chunked_is_read_to_close() -> None:
    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(head("200 OK", "Content-Type: text/event-stream"))
        for i in range(0, len(body("eof")), 11):
            writer.write(body("eof")[i : i + 11])
            await writer.drain()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "eof"


async def test_status_error_with_an_sse_body_keeps_it() -> None:
    """Some servers answer an error status with the error as an SSE event: the
    body is kept on the error (DESIGN: ``.status``/``.body``)."""
    data = b'data: {"error": {"message": "context too long"}}\n\n'

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(status=400, body=data, headers={"Content-Type": "text/event-stream"})

    async with raw_server(handle) as (url, _):
        _, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 400
    assert "context too long" in (err.body or "")


async def test_url_credentials_with_an_api_key_fail_typed_and_masked() -> None:
    async with raw_server(sse("x")) as (url, seen):
        creds = url.replace("http://", "http://me:hunter2secret@")
        with pytest.raises(ValueError, match="holds credentials") as refused:  # (when made)
            OpenAIChatClient(creds + "/v1", KEY, timeouts=FAST)
        alone, err2 = await outcome(OpenAIChatClient(creds + "/v1", timeouts=FAST))
    assert err2 is None
    assert alone.text == "x"
    assert seen[-1].headers["Authorization"].startswith("Basic ")
    assert "hunter2secret" not in str(refused.value)
    no_key_in(refused.value)


async def test_from_sse_over_an_aiohttp_body_iterator() -> None:
    from reactivex import operators as rx

    from rafrx.sources import from_sse

    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        data = body("via from_sse")
        for i in range(0, len(data), 5):
            await resp.write(data[i : i + 5])
        await resp.write_eof()
        return resp

    async with (
        raw_server(handle) as (url, _),
        aiohttp.ClientSession() as session,
        session.post(url + "/x", json={}) as resp,
    ):
        updates = from_sse(resp.content.iter_any()).pipe(convert())
        response = await collect_agent_response(updates)
    assert response.text == "via from_sse"
    del rx


async def test_sequential_streams_from_a_streaming_server_reuse_the_connection() -> None:
    peers: list[Any] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in body("streamed").split(b"\n\n"):
            if event:
                await resp.write(event + b"\n\n")
        await asyncio.sleep(0.01)  # some cleanup (usage logging ...) before the last chunk
        await resp.write_eof()
        return resp

    async with raw_server(handle) as (url, _):
        client = OpenAIChatClient(url, KEY, timeouts=FAST)
        try:
            for _ in range(10):
                response, err = await ask(client)
                assert err is None, err
                assert response.text == "streamed"
        finally:
            await client.aclose()
    assert len(peers) == 10
    assert len(set(peers)) <= 2, f"{len(set(peers))} connections for 10 sequential streams"


async def test_no_connection_left_open_after_aclose() -> None:
    """Mixed outcomes over keep-alive (success, 429, 200-JSON, cut body), then aclose():
    the server sees every connection closed."""
    live = 0
    n = 0
    data = body("mix")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal live, n
        live += 1
        try:
            while (req := await read_request(reader)) is not None:
                del req
                n += 1
                kind = n % 4
                if kind == 1:
                    writer.write(
                        head(
                            "200 OK",
                            "Content-Type: text/event-stream",
                            f"Content-Length: {len(data)}",
                        )
                        + data
                    )
                elif kind == 2:
                    writer.write(head("429 Too Many Requests", "Content-Length: 4") + b"busy")
                elif kind == 3:
                    msg = b'{"error": {"message": "nope"}}'
                    writer.write(
                        head(
                            "200 OK",
                            "Content-Type: application/json",
                            f"Content-Length: {len(msg)}",
                        )
                        + msg
                    )
                else:
                    writer.write(
                        head(
                            "200 OK",
                            "Content-Type: text/event-stream",
                            f"Content-Length: {len(data) + 50}",
                        )
                        + data[:60]
                    )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            live -= 1
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        client = OpenAIChatClient(url, KEY, timeouts=Timeouts(first_byte=2, idle=0.5))
        outcomes = [await ask(client) for _ in range(8)]
        await client.aclose()
        for _ in range(50):
            if live == 0:
                break
            await asyncio.sleep(0.02)
    finally:
        server.close()
        await server.wait_closed()
    assert [err is None for _, err in outcomes] == [True, False, False, False] * 2
    assert live == 0, f"{live} connection(s) still open after aclose()"


async def test_anthropic_version_default() -> None:
    async with raw_server(sse("v", "anthropic")) as (url, seen):
        await outcome(AnthropicClient(url, KEY, timeouts=FAST))
    assert seen[0].headers.getall("anthropic-version") == ["2023-06-01"]


async def test_base_url_keeps_an_encoded_slash_in_its_path() -> None:
    async with raw_server(sse("enc")) as (url, seen):
        _, err = await outcome(OpenAIChatClient(url + "/models/a%2Fb/v1", timeouts=FAST))
    assert seen, err
    assert seen[0].target == "/models/a%2Fb/v1/chat/completions"


@pytest.mark.parametrize(
    ("suffix", "target"),
    [
        ("/api%20v1/", "/api%20v1/chat/completions"),
        ("/caf%C3%A9/v1", "/caf%C3%A9/v1/chat/completions"),
        ("/v1?x=a%26b", "/v1/chat/completions?x=a%26b"),
    ],
)
async def test_base_url_percent_encoding_is_kept(suffix: str, target: str) -> None:
    async with raw_server(sse("enc")) as (url, seen):
        _, err = await outcome(OpenAIChatClient(url + suffix, timeouts=FAST))
    assert err is None, err
    assert seen[0].target == target


@pytest.mark.parametrize("mode", ["close", "abort"])
async def test_reset_right_after_the_terminal_marker_is_still_a_success(mode: str) -> None:
    data = body("all here")
    first, rest = data[:300], data[300:]

    async def handler(reader: Any, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            head("200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked")
            + chunked(first)
        )
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunked(rest))  # no last chunk: the connection just ends
        if mode == "abort":
            writer.transport.abort()
        else:
            writer.transport.close()

    async with RawServer(handler) as server:
        response, err = await outcome(OpenAIChatClient(server.url, KEY, timeouts=FAST))
    assert err is None, err
    assert response.text == "all here"


@pytest.mark.parametrize("key", [KEY + "\n", KEY + "\r\nX-Evil: 1"])
async def test_an_api_key_with_control_characters_is_refused_without_showing_it(key: str) -> None:
    async with raw_server(sse("x")) as (url, seen):
        _, err = await outcome(OpenAIChatClient(url, key, timeouts=FAST))
    assert seen == []  # nothing sent, no header injected
    assert isinstance(err, RafrxError)
    assert not err.retryable
    no_key_in(err)


@pytest.mark.parametrize("header", ["x-request-id", "request-id"])
async def test_status_error_carries_the_request_id(header: str) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}},
            status=400,
            headers={header: "req_0123"},
        )

    async with raw_server(handle) as (url, _):
        _, err = await outcome(AnthropicClient(url, KEY, timeouts=FAST))
    assert isinstance(err, HTTPStatusError)
    assert err.request_id == "req_0123"
    assert err.error_type == "invalid_request_error"


@pytest.mark.parametrize(
    ("cls", "name", "fmt"),
    [
        (OpenAIChatClient, "Authorization", "openai-chat"),
        (AnthropicClient, "x-api-key", "anthropic"),
    ],
)
async def test_an_explicit_auth_header_wins_over_the_api_key(
    cls: type, name: str, fmt: str
) -> None:
    async with raw_server(sse("x", fmt)) as (url, seen):
        _, err = await outcome(cls(url, KEY, timeouts=FAST, headers={name: "gw-token-xyz"}))
    assert err is None, err
    assert seen[0].headers.getall(name) == ["gw-token-xyz"]


@pytest.mark.parametrize("name", ["accept", "USER-AGENT", "authorization"])
async def test_a_caller_header_in_another_case_replaces_the_default(name: str) -> None:
    async with raw_server(sse("x")) as (url, seen):
        _, err = await outcome(OpenAIChatClient(url, KEY, timeouts=FAST, headers={name: "mine"}))
    assert err is None, err
    assert seen[0].headers.getall(name) == ["mine"]
