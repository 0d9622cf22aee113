"""A hostile or odd HTTP server against the three clients, for real on 127.0.0.1.

Redirects and the API key, keys in the URL query, non-stream 200 answers,
HTTP/1.0 close-delimited bodies, 1xx responses, bad chunked framing, bodies
cut mid-UTF-8, odd charsets and encodings, error statuses with every body
shape, ``Retry-After`` with retries on. Raw faults come from a small asyncio
socket server written here (no HTTP library on the server side).

Every test runs ``client.stream(messages).pipe(convert(), aggregate())`` (or
``collect_agent_response``) under a timeout: the observable must end, with a
typed :class:`~rafrx.errors.RafrxError` carrying ``partial``, and leave no
task running (the ``no_task_leak`` fixture) and no ``ResourceWarning`` (the
suite turns warnings into errors).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import pickle
import time
import traceback
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.client_proto
import aiohttp.http_parser
import pytest
import reactivex
from reactivex import operators as rxops

from rafrx import ChatMessage, collect_agent_response, convert
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import (
    MAX_BODY_CHARS,
    ConnectTimeout,
    ContentTypeError,
    HTTPStatusError,
    IncompleteStream,
    ProtocolError,
    RafrxError,
    StreamInterrupted,
)
from rafrx.recorder import record_http
from rafrx.response import AgentResponse
from rafrx.sources._http import MAX_SNIPPET
from rafrx.sources._policy import parse_retry_after
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.testing import Reply, render_events
from tests.reliability.test_http_adversarial import Handler, RawServer, chunk, whole

KEY = "sk-hostile-SECRET-0123456789abcdef"
USER = [ChatMessage.user("Hello?")]
FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, jitter=False)
FORMATS = ["openai-chat", "anthropic", "openai-responses"]
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
#: The body of an error clipped by rafrx.errors: the kept text plus its marker.
MAX_ERROR_CHARS = MAX_BODY_CHARS + 40


# ---------------------------------------------------------------- bodies


def events(fmt: str) -> list[bytes]:
    """The SSE events of a reply "Hello" in ``fmt``."""
    return render_events(Reply(text="Hello"), fmt)  # type: ignore[arg-type]


def head(fmt: str) -> bytes:
    """The events of ``fmt`` up to and including the one with the text "Hello"."""
    out = b""
    for event in events(fmt):
        out += event
        if b'"Hello"' in event:
            return out
    raise AssertionError("no text event")


def full(fmt: str) -> bytes:
    return b"".join(events(fmt))


# ---------------------------------------------------------------- a raw server

SSE_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
)


def answer(*parts: bytes, gap: float = 0.05, linger: float = 0.05) -> Handler:
    """Read the request, then write ``parts`` ``gap`` seconds apart, wait ``linger``, close."""

    async def handler(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        for n, part in enumerate(parts):
            if n:
                await asyncio.sleep(gap)
            writer.write(part)
            await writer.drain()
        await asyncio.sleep(linger)

    return handler


# ---------------------------------------------------------------- running a call


async def outcome(
    source: reactivex.Observable[u.AgentResponseUpdate], timeout: float = 2.5
) -> tuple[AgentResponse | None, Exception | None, list[u.AgentResponseUpdate]]:
    """Run ``source → convert() → aggregate()``; fail the test if it does not end
    within ``timeout`` s. Returns (response, error, updates)."""
    updates: list[u.AgentResponseUpdate] = []
    done: asyncio.Future[tuple[AgentResponse | None, Exception | None]]
    done = asyncio.get_running_loop().create_future()

    def on_next(response: AgentResponse) -> None:
        if not done.done():
            done.set_result((response, None))

    def on_error(error: Exception) -> None:
        if not done.done():
            done.set_result((None, error))

    subscription = source.pipe(
        rxops.do_action(updates.append), convert(), ops.aggregate()
    ).subscribe(on_next, on_error)
    try:
        async with asyncio.timeout(timeout):
            response, error = await done
    except TimeoutError:
        pytest.fail(f"the observable did not end within {timeout} s (got {updates!r})")
    finally:
        subscription.dispose()
    return response, error, updates


def typed(error: Exception | None, kind: type[RafrxError] = RafrxError) -> RafrxError:
    """``error`` is a ``kind`` with its ``partial`` set by ``aggregate()``."""
    assert isinstance(error, kind), repr(error)
    assert error.partial is not None, "aggregate() did not set .partial"
    return error


def texts_of(error: BaseException) -> str:
    """Everything an error reporter could show for ``error``."""
    out = [str(error), repr(error), repr(vars(error))]
    out.append("".join(traceback.format_exception(error)))
    with contextlib.suppress(Exception):
        out.append(repr(pickle.dumps(error)))
    return "\n".join(out)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0.01)


@pytest.fixture
def no_resource_warning() -> Iterator[None]:
    """Fail if an unclosed session / transport / connector warns during the test."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    leaked = [w for w in seen if issubclass(w.category, ResourceWarning)]
    assert not leaked, [str(w.message) for w in leaked]


# ================================================================ security


REDIRECTS = [301, 302, 303, 307, 308]


@pytest.mark.asyncio
@pytest.mark.parametrize("status", REDIRECTS)
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_redirect_to_another_port_never_forwards_the_key(
    no_task_leak: None, no_resource_warning: None, fmt: str, status: int
) -> None:
    """Every redirect code, every client, the key in its own header and in an
    ``api-key`` header (Azure): the other host gets no request at all, even with
    retries on, and the error names the status without the key."""

    async with RawServer(answer(whole(b"200 OK", b"text/event-stream", full(fmt)))) as other:
        location = f"{other.url}/v1/steal".encode()
        reason = b"%d Moved" % status
        moved = whole(reason, b"text/plain", b"moved " + KEY.encode(), b"Location: " + location)
        async with (
            RawServer(answer(moved)) as api,
            CLIENTS[fmt](api.url, KEY, headers={"api-key": KEY}, retry=FAST_RETRY) as client,
        ):
            response, error, updates = await outcome(client.stream(USER))
    assert response is None
    err = typed(error, HTTPStatusError)
    assert (err.status, err.retryable) == (status, False)
    assert err.partial is not None
    assert err.partial.text == ""
    assert updates == []
    assert other.connections == 0
    assert other.heads == []
    assert len(api.heads) == 1
    assert KEY.encode() in api.heads[0]
    assert KEY not in texts_of(err)


@pytest.mark.asyncio
async def test_a_redirect_loop_is_one_request(no_task_leak: None) -> None:
    """A server redirecting to itself forever: not followed, one request only."""

    async def loop_(server: RawServer, reader: Any, writer: Any) -> None:
        while True:  # keep-alive: answer every request on this connection
            await server.read_request(reader)
            writer.write(
                whole(b"307 Again", b"text/plain", b"", f"Location: {server.url}".encode())
            )
            await writer.drain()

    async with (
        RawServer(loop_) as api,
        AnthropicClient(api.url, KEY, retry=FAST_RETRY) as client,
    ):
        _, error, _ = await outcome(client.stream(USER))
    err = typed(error, HTTPStatusError)
    assert err.status == 307
    assert len(api.heads) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_plain_key_in_the_url_query_stays_out_of_errors_reprs_and_logs(
    no_task_leak: None, caplog: pytest.LogCaptureFixture, fmt: str
) -> None:
    """Gemini style ``?key=``: a 401 whose body echoes the request line (a gateway's
    debug page) must not show the key; nor the client repr, nor the logs."""
    caplog.set_level(logging.DEBUG)
    qkey = "AIzaSyHOSTILE0123456789abcdefghijklmno"

    async def echo(server: RawServer, reader: Any, writer: Any) -> None:
        request_head = await server.read_request(reader)
        line = request_head.split(b"\r\n", 1)[0]
        writer.write(whole(b"401 Unauthorized", b"text/plain", b"denied: " + line))
        await writer.drain()

    async with RawServer(echo) as api:
        client = CLIENTS[fmt](f"{api.url}/v1?key={qkey}&alt=sse", KEY)
        async with client:
            _, error, _ = await outcome(client.stream(USER))
    assert qkey.encode() in api.heads[0]  # it was sent
    err = typed(error, HTTPStatusError)
    assert err.body is not None
    assert err.body.startswith("denied: POST")
    for text in (texts_of(err), repr(client), caplog.text):
        assert qkey not in text
        assert KEY not in text


@pytest.mark.asyncio
async def test_a_percent_encoded_key_in_the_url_query_stays_out_of_errors(
    no_task_leak: None,
) -> None:
    """``?key=`` holding ``+``, ``/`` and ``=`` (base64-like tokens, written
    percent-encoded as a URL demands). rafrx hides the URL password in every form
    it is sent (``_url_secrets``: as is, URL-encoded, base64), but a query value
    only decoded: a server echoing the request line shows the key as it was sent."""
    wire = "AIzaQ%2Bk%2Fey%3D%3DHOSTILE"
    decoded = "AIzaQ+k/ey==HOSTILE"

    async def echo(server: RawServer, reader: Any, writer: Any) -> None:
        request_head = await server.read_request(reader)
        line = request_head.split(b"\r\n", 1)[0]
        writer.write(whole(b"401 Unauthorized", b"text/plain", b"denied: " + line))
        await writer.drain()

    async with (
        RawServer(echo) as api,
        OpenAIChatClient(f"{api.url}/v1?key={wire}", KEY) as client,
    ):
        _, error, _ = await outcome(client.stream(USER))
    err = typed(error, HTTPStatusError)
    sent = api.heads[0].split(b"\r\n", 1)[0].decode()
    sent_key = sent.split("key=", 1)[1].split(" ", 1)[0]  # AIzaQ%2Bk/ey%3D%3DHOSTILE
    shown = texts_of(err)
    assert decoded not in shown
    assert sent_key not in shown, f"the key as sent leaked: {err.body!r}"


@pytest.mark.asyncio
async def test_record_http_does_not_forward_the_key_on_a_redirect(
    no_task_leak: None, tmp_path: Path
) -> None:
    """The clients refuse redirects because the key headers would go along;
    ``record_http`` (the documented way to capture a provider's stream) must not
    leak the key to whatever host a redirect names either."""
    async with RawServer(
        answer(whole(b"200 OK", b"text/event-stream", full("anthropic")))
    ) as other:
        location = f"{other.url}/v1/messages".encode()
        moved = whole(b"307 Moved", b"text/plain", b"", b"Location: " + location)
        async with RawServer(answer(moved)) as api:
            with contextlib.suppress(RafrxError):
                await record_http(
                    f"{api.url}/v1/messages",
                    tmp_path / "turn.sse",
                    json_body={"stream": True},
                    headers={"x-api-key": KEY, "api-key": KEY},
                    timeout=2,
                )
    assert KEY.encode() in api.heads[0]
    assert all(KEY.encode() not in h for h in other.heads), other.heads


# ================================================================ response shapes


NOT_A_STREAM = [
    pytest.param(b"text/html; charset=utf-8", b"<html><form>proxy login</form>", id="html"),
    pytest.param(
        b"application/json",
        b'{"id":"chatcmpl-1","choices":[{"message":{"content":"non-stream answer"}}]}',
        id="json-answer",
    ),
    pytest.param(
        b"application/json",
        b'{"error":{"message":"Invalid API key","type":"invalid_request_error"}}',
        id="json-error",
    ),
    # (a body that starts as an event stream is read whatever its type says:
    # tests/sources/test_provider_shapes_4.py)
    pytest.param(None, b"upstream said no", id="no-content-type"),
    pytest.param(b"text/plain", b"x" * 200_000, id="huge-text"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("content_type", "body"), NOT_A_STREAM)
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_200_that_is_not_an_event_stream_fails_before_decoding(
    no_task_leak: None, no_resource_warning: None, fmt: str, content_type: bytes | None, body: bytes
) -> None:
    """ContentTypeError with status 200 and a bounded, key-free snippet; not
    retried even with the policy on; nothing decoded."""
    sent = body + b" " + KEY.encode()
    async with (
        RawServer(answer(whole(b"200 OK", content_type, sent))) as api,
        CLIENTS[fmt](api.url, KEY, retry=FAST_RETRY) as client,
    ):
        _, error, updates = await outcome(client.stream(USER))
    err = typed(error, ContentTypeError)
    assert err.status == 200
    assert not err.retryable
    assert err.body is not None
    assert 0 < len(err.body.encode()) <= MAX_SNIPPET
    assert err.body.startswith(body.decode()[:MAX_SNIPPET])
    assert KEY not in texts_of(err)
    assert updates == []
    assert err.partial is not None
    assert err.partial.text == ""
    assert len(api.heads) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_informational_responses_before_the_200_are_skipped(
    no_task_leak: None, no_resource_warning: None, fmt: str
) -> None:
    """``100 Continue`` and ``103 Early Hints`` (with headers) before the real answer."""
    informational = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    )
    async with (
        RawServer(answer(informational, whole(b"200 OK", b"text/event-stream", full(fmt)))) as api,
        CLIENTS[fmt](api.url, KEY) as client,
    ):
        response, error, _ = await outcome(client.stream(USER))
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "Hello"


@pytest.mark.asyncio
async def test_endless_informational_responses_hit_the_first_byte_timeout(
    no_task_leak: None,
) -> None:
    """``102 Processing`` every 50 ms forever: never a final answer. The first-byte
    timeout counts until the final response, so the call ends (ConnectTimeout)."""

    async def processing(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        while True:
            writer.write(b"HTTP/1.1 102 Processing\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)

    async with (
        RawServer(processing) as api,
        OpenAIChatClient(api.url, KEY, timeouts=Timeouts(first_byte=0.5)) as client,
    ):
        started = time.monotonic()
        _, error, _ = await outcome(client.stream(USER))
    assert time.monotonic() - started < 1.5
    typed(error, ConnectTimeout)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_http_1_0_close_delimited_body_completes(
    no_task_leak: None, no_resource_warning: None, fmt: str
) -> None:
    """No Content-Length, no chunking: the body ends when the server closes."""
    response_ = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + full(fmt)
    async with RawServer(answer(response_)) as api, CLIENTS[fmt](api.url, KEY) as client:
        response, error, _ = await outcome(client.stream(USER))
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "Hello"


@pytest.mark.asyncio
@pytest.mark.parametrize("framing", ["http/1.0", "chunked", "content-length"])
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_body_cut_mid_utf8_character_at_eof_keeps_what_arrived(
    no_task_leak: None, no_resource_warning: None, fmt: str, framing: str
) -> None:
    """The body ends (cleanly, per its framing) inside the 2-byte "é" of an event
    that never completes: IncompleteStream, partial "Hello", no U+FFFD invented."""
    cut = head(fmt) + 'data: {"type": "x", "text": "caf\u00e9'.encode()[:-1]
    if framing == "http/1.0":
        parts = [b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + cut]
    elif framing == "chunked":
        parts = [
            SSE_CHUNKED + b"\r\n" + chunk(head(fmt)),
            chunk(cut[len(head(fmt)) :]) + b"0\r\n\r\n",
        ]
    else:
        parts = [whole(b"200 OK", b"text/event-stream", cut)]
    async with RawServer(answer(*parts)) as api, CLIENTS[fmt](api.url, KEY) as client:
        _, error, _ = await outcome(client.stream(USER))
    err = typed(error, IncompleteStream)
    assert err.partial is not None
    assert err.partial.text == "Hello"
    assert "\ufffd" not in err.partial.text


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "framing",
    [
        pytest.param(SSE_CHUNKED + b"\r\n", id="chunked"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 900\r\n\r\n",
            id="content-length",
        ),
        pytest.param(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", id="http/1.0"),
    ],
)
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_server_that_closes_right_after_the_headers(
    no_task_leak: None, no_resource_warning: None, fmt: str, framing: bytes
) -> None:
    """Typed at once (StreamInterrupted for a framing left unfinished,
    IncompleteStream for a close-delimited body), empty partial, not retried
    twice into the same hole without the policy."""
    async with RawServer(answer(framing)) as api, CLIENTS[fmt](api.url, KEY) as client:
        started = time.monotonic()
        _, error, updates = await outcome(client.stream(USER))
    assert time.monotonic() - started < 1.0
    err = typed(error, StreamInterrupted if b"HTTP/1.1" in framing else IncompleteStream)
    assert updates == []
    assert err.partial is not None
    assert err.partial.text == ""
    assert len(api.heads) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"zz\r\nxx\r\n", id="bad-chunk-size"),
        pytest.param(b"5\r\nabcdeXY", id="no-crlf"),
    ],
)
async def test_bad_chunk_framing_mid_body_is_a_typed_break_at_once(
    no_task_leak: None, bad: bytes
) -> None:
    """A chunk-size line that is not hex, mid-body, after "Hello": aiohttp's C
    parser closes the connection but leaves the body reader waiting (it sets no
    error on it). rafrx fails the reader when the connection closes, so the stream
    ends as StreamInterrupted right away, with "Hello" kept, not at the idle
    timeout (an hour here: the guard below would end the test first)."""
    parts = (SSE_CHUNKED + b"\r\n" + chunk(head("openai-chat")), bad)
    async with (
        RawServer(answer(*parts, linger=3)) as api,
        OpenAIChatClient(api.url, KEY, timeouts=Timeouts(idle=3600)) as client,
    ):
        _, error, _ = await outcome(client.stream(USER), timeout=2.8)
    err = typed(error, StreamInterrupted)
    assert "closed before the body ended" in str(err)
    assert err.partial is not None
    assert err.partial.text == "Hello"


@pytest.fixture
def pure_python_http_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp without its C extension (``AIOHTTP_NO_EXTENSIONS=1``, PyPy, no wheel):
    the client protocol parses responses with the pure-Python parser."""
    monkeypatch.setattr(
        aiohttp.client_proto, "HttpResponseParser", aiohttp.http_parser.HttpResponseParserPy
    )


@pytest.mark.asyncio
async def test_bad_chunk_size_mid_body_is_typed_with_the_pure_python_parser(
    no_task_leak: None, pure_python_http_parser: None
) -> None:
    """Text "Hello", then a chunk-size line that is not hex. aiohttp's pure-Python parser
    fails the body with ``aiohttp.http_exceptions.TransferEncodingError``, an
    ``HttpProcessingError`` and not a ``ClientError``: ``_read_body`` lets it through
    to ``on_error`` as is (no RafrxError, no ``partial``, not redacted)."""
    parts = (SSE_CHUNKED + b"\r\n" + chunk(head("openai-chat")), b"zz\r\nxx\r\n")
    async with RawServer(answer(*parts)) as api, OpenAIChatClient(api.url, KEY) as client:
        _, error, updates = await outcome(client.stream(USER))
    assert [x for x in updates if isinstance(x, u.TextDelta)] == [u.TextDelta("Hello")]
    err = typed(error, RafrxError)  # not aiohttp.http_exceptions.TransferEncodingError
    assert isinstance(err, StreamInterrupted | ProtocolError), repr(err)
    assert err.partial is not None
    assert err.partial.text == "Hello"


@pytest.mark.asyncio
async def test_a_bad_chunk_in_an_error_body_keeps_the_status_error_with_the_pure_python_parser(
    no_task_leak: None, pure_python_http_parser: None
) -> None:
    """The same bad chunk inside a 500's body: ``_read_text`` catches only
    ``ClientError``/``OSError``/``TimeoutError``, so the raw aiohttp exception
    replaces the ``HTTPStatusError`` (and its retry decision)."""
    parts = (
        b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunk(b'{"error": {"message": "boom"'),
        b"zz\r\nxx\r\n",
    )
    async with (
        RawServer(answer(*parts)) as api,
        OpenAIChatClient(api.url, KEY, retry=FAST_RETRY) as client,
    ):
        _, error, _ = await outcome(client.stream(USER))
    err = typed(error, HTTPStatusError)
    assert err.status == 500
    assert err.body is not None
    assert err.body.startswith('{"error": {"message": "boom"')


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_deflate_encoded_stream_flushed_per_event_decodes_live(
    no_task_leak: None, no_resource_warning: None, fmt: str
) -> None:
    """``Content-Encoding: deflate`` (zlib), one sync-flushed chunk per event."""
    compressor = zlib.compressobj()
    parts = [SSE_CHUNKED + b"Content-Encoding: deflate\r\n\r\n"]
    for event in events(fmt):
        parts.append(chunk(compressor.compress(event) + compressor.flush(zlib.Z_SYNC_FLUSH)))
    parts.append(chunk(compressor.flush()) + b"0\r\n\r\n")
    async with (
        RawServer(answer(*parts, gap=0.01)) as api,
        CLIENTS[fmt](api.url, KEY) as client,
    ):
        response, error, _ = await outcome(client.stream(USER))
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "Hello"


@pytest.mark.asyncio
@pytest.mark.parametrize("encoding", [b"br", b"zstd", b"x-unknown"])
async def test_an_encoding_the_client_cannot_decode_is_a_typed_error(
    no_task_leak: None, no_resource_warning: None, encoding: bytes
) -> None:
    """A body in an encoding nobody asked for: a typed error, never a hang or a crash.
    (An encoding aiohttp knows but cannot decode is a ProtocolError; one it does
    not know passes through as bytes that never make an event.)"""
    response_ = whole(
        b"200 OK",
        b"text/event-stream",
        b"\x8b\x00garbage\x00" * 4,
        b"Content-Encoding: " + encoding,
    )
    async with RawServer(answer(response_)) as api, OpenAIChatClient(api.url, KEY) as client:
        _, error, updates = await outcome(client.stream(USER))
    err = typed(error, ProtocolError)
    assert updates == []
    assert not err.retryable
    assert KEY not in texts_of(err)


@pytest.mark.asyncio
async def test_an_event_stream_actually_in_utf16_is_a_typed_error(no_task_leak: None) -> None:
    """``charset=utf-16`` is ignored (the body is read as UTF-8, as RELIABILITY #5
    says): real UTF-16 bytes make no event, so the stream is incomplete."""
    body = full("openai-chat").decode().encode("utf-16")
    response_ = whole(b"200 OK", b"text/event-stream; charset=utf-16", body)
    async with RawServer(answer(response_)) as api, OpenAIChatClient(api.url, KEY) as client:
        _, error, updates = await outcome(client.stream(USER))
    typed(error, IncompleteStream)
    assert updates == []


@pytest.mark.asyncio
async def test_huge_headers_on_an_error_status_stay_bounded(no_task_leak: None) -> None:
    """A 429 whose headers are gigantic: a bounded protocol error, the key not in it."""
    response_ = whole(b"429 Slow", b"application/json", b"{}", b"X-Junk: " + KEY.encode() * 4000)
    async with (
        RawServer(answer(response_)) as api,
        OpenAIChatClient(api.url, KEY, retry=FAST_RETRY) as client,
    ):
        _, error, _ = await outcome(client.stream(USER))
    err = typed(error, ProtocolError)
    assert len(err.message) < 2000
    assert KEY not in texts_of(err)


# ================================================================ status codes


STATUSES = [401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 529]
RETRYABLE = {408, 409, 429, 500, 502, 503, 529}
BODIES = {
    "json": (b"application/json", b'{"error": {"message": "nope KEY", "type": "some_error"}}'),
    "html": (b"text/html", b"<html><body><h1>Bad Gateway</h1>KEY</body></html>"),
    "empty": (b"text/plain", b""),
    "huge": (b"text/plain", b"KEY " + b"y" * 3_000_000),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", list(BODIES))
@pytest.mark.parametrize("status", STATUSES)
async def test_an_error_status_is_a_typed_bounded_key_free_http_status_error(
    no_task_leak: None, status: int, shape: str
) -> None:
    content_type, body = BODIES[shape]
    body = body.replace(b"KEY", KEY.encode())
    async with (
        RawServer(answer(whole(b"%d Err" % status, content_type, body))) as api,
        OpenAIChatClient(api.url, KEY) as client,
    ):
        with pytest.raises(RafrxError) as info:
            async with asyncio.timeout(2.5):
                await collect_agent_response(client.stream(USER).pipe(convert()))
    err = info.value
    assert type(err) is HTTPStatusError, repr(err)
    assert err.status == status
    assert err.retryable == (status in RETRYABLE)
    assert err.body is not None
    assert len(err.body) <= MAX_ERROR_CHARS
    assert KEY not in texts_of(err)
    if shape == "json":
        assert err.provider_message == "nope ***"
        assert err.error_type == "some_error"
    if shape == "empty":
        assert err.body == ""
    assert err.partial is not None
    assert err.partial.text == ""


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_huge_error_body_is_not_downloaded_whole(
    no_task_leak: None, no_resource_warning: None, fmt: str
) -> None:
    """A 502 announcing 200 MB: rafrx reads its bounded prefix and closes; the
    server never gets to send it all."""
    sent = [0]

    async def huge(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        writer.write(
            b"HTTP/1.1 502 Bad\r\nContent-Type: text/html\r\nContent-Length: 200000000\r\n\r\n"
        )
        block = b"<p>" + b"z" * 65533
        for _ in range(200_000_000 // len(block)):
            writer.write(block)
            await writer.drain()
            sent[0] += len(block)

    async with RawServer(huge) as api, CLIENTS[fmt](api.url, KEY) as client:
        _, error, _ = await outcome(client.stream(USER))
    err = typed(error, HTTPStatusError)
    assert err.status == 502
    assert err.body is not None
    assert len(err.body) <= MAX_ERROR_CHARS
    assert sent[0] < 50_000_000


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_retry_after_is_honoured_and_delivered_content_is_never_repeated(
    no_task_leak: None, fmt: str
) -> None:
    """503 with ``Retry-After: 1`` → wait ~1 s → a 200 that sends "Hello" and
    drops: the drop is not retried (content was delivered), "Hello" appears once."""
    times: list[float] = []

    async def flaky(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        times.append(time.monotonic())
        if len(times) == 1:
            writer.write(whole(b"503 Busy", b"application/json", b"{}", b"Retry-After: 1"))
        else:
            writer.write(SSE_CHUNKED + b"\r\n" + chunk(head(fmt)))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()

    async with (
        RawServer(flaky) as api,
        CLIENTS[fmt](api.url, KEY, retry=FAST_RETRY) as client,
    ):
        _, error, updates = await outcome(client.stream(USER), timeout=2.8)
    err = typed(error, StreamInterrupted)
    assert len(times) == 2
    assert 0.9 <= times[1] - times[0] < 1.6
    assert err.partial is not None
    assert err.partial.text == "Hello"
    assert [x.delta for x in updates if isinstance(x, u.TextDelta)] == ["Hello"]


@contextlib.contextmanager
def timezone(name: str) -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


@pytest.mark.asyncio
async def test_retry_after_as_an_asctime_http_date_is_gmt_whatever_the_local_zone(
    no_task_leak: None,
) -> None:
    """RFC 9110 5.6.7: a recipient MUST accept all three HTTP-date formats, all
    in GMT; ``asctime`` has no zone. On a host at UTC-5, "1 s from now" in that
    form is read as 5 hours, beyond ``max_retry_after``: the 503 is not retried."""
    now = 1_445_412_470.0
    asctime = time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(now + 10))
    hits: list[float] = []

    async def busy_then_ok(server: RawServer, reader: Any, writer: Any) -> None:
        await server.read_request(reader)
        hits.append(time.monotonic())
        if len(hits) == 1:
            date = time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(time.time() + 1.5))
            writer.write(
                whole(b"503 Busy", b"application/json", b"{}", f"Retry-After: {date}".encode())
            )
        else:
            writer.write(whole(b"200 OK", b"text/event-stream", full("openai-chat")))
        await writer.drain()

    with timezone("Etc/GMT+5"):  # POSIX sign: UTC-5
        parsed = parse_retry_after({"Retry-After": asctime}, now=now)
        async with (
            RawServer(busy_then_ok) as api,
            OpenAIChatClient(api.url, KEY, retry=FAST_RETRY) as client,
        ):
            response, error, _ = await outcome(client.stream(USER), timeout=2.8)
    assert parsed == 10.0, f"read as {parsed} s"
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "Hello"
    assert len(hits) == 2
    assert 0.4 <= hits[1] - hits[0] < 2.0


@pytest.mark.asyncio
async def test_an_error_body_is_decoded_by_its_declared_charset(no_task_leak: None) -> None:
    """A European proxy's 403 page in ISO-8859-1: ``.body`` and the provider message
    should read as the server wrote them, not as U+FFFD."""
    text = '{"error": {"message": "Accès refusé: clé invalide"}}'
    response_ = whole(
        b"403 Interdit", b"application/json; charset=iso-8859-1", text.encode("latin-1")
    )
    async with RawServer(answer(response_)) as api, OpenAIChatClient(api.url, KEY) as client:
        _, error, _ = await outcome(client.stream(USER))
    err = typed(error, HTTPStatusError)
    assert err.status == 403
    assert err.body == text
    assert err.provider_message == "Accès refusé: clé invalide"
