"""The transport, read line by line: the edge each branch was written for.

The angle is a code reviewer's, not a user's. For each branch of
``rafrx/sources/_http.py``, ``_decoder.py``, ``_from_sse.py``, ``rafrx/sse.py``,
``rafrx/json_stream.py`` and ``rafrx/_partial_json.py``, ask which input reaches
it and whether the result is right. The inputs are:

* buffer boundaries: a CRLF, a multi-byte character or the BOM split across HTTP
  writes, and a limit hit exactly;
* retries: the ``Retry-After`` forms, attempt counting, no retry after output,
  and a retried response's own BOM and metadata;
* timeouts: first byte vs idle, and keep-alive comments;
* the sniffed event stream behind a wrong ``Content-Type``;
* the sans-IO pieces at their documented boundaries.

HTTP goes over real aiohttp on 127.0.0.1. A small ``aiohttp.web`` app writes the
exact bytes (and splits) each test needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafrx import ChatMessage, collect_agent_response, convert
from rafrx.errors import (
    ConnectTimeout,
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    IncompleteStream,
    LimitExceeded,
    ProviderError,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.json_stream import StreamingArgsParser
from rafrx.sources import UpdateDecoder, from_sse
from rafrx.sources._policy import RetryPolicy, Timeouts, parse_retry_after
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient
from rafrx.sse import SSEDecoder
from rafrx.updates import Finish, ResponseMetadata, TextDelta, Usage

USER = [ChatMessage.user("Hi")]
FAST = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
NO_WAIT = RetryPolicy(initial_backoff=0.01, max_backoff=0.01, jitter=False)


def chat_chunk(text: str) -> bytes:
    payload = {"choices": [{"delta": {"content": text}}]}
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


STOP = b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n'
DONE = b"data: [DONE]\n\n"


def chat_body(*texts: str) -> bytes:
    return b"".join(map(chat_chunk, texts)) + STOP + DONE


MESSAGE_START = (
    b"event: message_start\n"
    b'data: {"type": "message_start", "message": {"id": "msg_%d", "model": "claude", '
    b'"usage": {"input_tokens": 9, "output_tokens": 1}}}\n\n'
)
OVERLOADED = (
    b"event: error\n"
    b'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
)
ANTHROPIC_REST = (
    b"event: content_block_start\n"
    b'data: {"type": "content_block_start", "index": 0, '
    b'"content_block": {"type": "text", "text": ""}}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type": "content_block_delta", "index": 0, '
    b'"delta": {"type": "text_delta", "text": "Sunny."}}\n\n'
    b"event: content_block_stop\n"
    b'data: {"type": "content_block_stop", "index": 0}\n\n'
    b"event: message_delta\n"
    b'data: {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, '
    b'"usage": {"output_tokens": 3}}\n\n'
    b"event: message_stop\n"
    b'data: {"type": "message_stop"}\n\n'
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """An aiohttp app on 127.0.0.1 answering every POST with ``handler``; yields its root."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def writes(*pieces: bytes, content_type: str = "text/event-stream") -> Handler:
    """A handler writing each piece as its own HTTP chunk (flushed, with a pause)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0.005)
        await response.write_eof()
        return response

    return handle


class Run:
    """What one subscription saw: its items, then its error or completion."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.error: Exception | None = None
        self._ended = asyncio.Event()

    async def of(self, source: Any, timeout: float = 10) -> Run:
        def on_error(error: Exception) -> None:
            self.error = error
            self._ended.set()

        source.subscribe(self.items.append, on_error, self._ended.set)
        await asyncio.wait_for(self._ended.wait(), timeout)
        return self

    @property
    def text(self) -> str:
        return "".join(item.delta for item in self.items if isinstance(item, TextDelta))


async def run(source: Any, timeout: float = 10) -> Run:
    return await Run().of(source, timeout)


async def chat(url: str, **kwargs: Any) -> Run:
    async with OpenAIChatClient(url, **kwargs) as client:
        return await run(client.stream(USER))


async def failure(source: Any) -> RafrxError:
    """The error a converted stream fails with, its ``.partial`` set (by ``convert``)."""
    try:
        await asyncio.wait_for(collect_agent_response(source.pipe(convert())), 10)
    except RafrxError as err:
        return err
    raise AssertionError("the stream did not fail")


async def chat_failure(url: str, **kwargs: Any) -> RafrxError:
    async with OpenAIChatClient(url, **kwargs) as client:
        return await failure(client.stream(USER))


def splits_of(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    return [body[a:b] for a, b in itertools.pairwise(points)]


# ---------------------------------------------------------------- buffer boundaries over HTTP


@pytest.mark.asyncio
async def test_a_crlf_split_between_two_http_chunks_is_one_line_end() -> None:
    """ "\\r" ends one write and "\\n" starts the next: one line end, no blank line."""
    body = chat_body("Hel", "lo").replace(b"\n", b"\r\n")
    pieces = []
    rest = body
    while b"\r\n" in rest:  # cut inside every CRLF
        at = rest.index(b"\r\n") + 1
        pieces.append(rest[:at])
        rest = rest[at:]
    pieces.append(rest)
    async with serve(writes(*pieces)) as url:
        got = await chat(url)
    assert got.error is None, repr(got.error)
    assert got.text == "Hello"
    assert isinstance(got.items[-1], Finish)


@pytest.mark.asyncio
@pytest.mark.parametrize("cut", [1, 2, 3])
async def test_a_four_byte_character_split_between_http_chunks_arrives_whole(cut: int) -> None:
    body = chat_body("a🙂b")
    emoji = "🙂".encode()
    at = body.index(emoji) + cut
    async with serve(writes(body[:at], body[at:])) as url:
        got = await chat(url)
    assert got.error is None, repr(got.error)
    assert got.text == "a🙂b"
    assert "\ufffd" not in got.text


@pytest.mark.asyncio
@pytest.mark.parametrize("cut", [1, 2])
async def test_a_bom_split_between_http_chunks_is_stripped(cut: int) -> None:
    body = b"\xef\xbb\xbf" + chat_body("Hi")
    async with serve(writes(body[:cut], body[cut:])) as url:
        got = await chat(url)
    assert got.error is None, repr(got.error)
    assert got.text == "Hi"


@pytest.mark.asyncio
async def test_a_retried_response_strips_its_own_bom() -> None:
    """Each attempt is a new stream: its BOM goes too (RELIABILITY, last line)."""
    answers = [web.Response(status=503, text="busy"), None]

    async def handle(request: web.Request) -> web.StreamResponse:
        answer = answers.pop(0)
        if answer is not None:
            return answer
        return await writes(b"\xef\xbb", b"\xbf" + chat_body("again"))(request)

    async with serve(handle) as url:
        got = await chat(url, retry=NO_WAIT)
    assert got.error is None, repr(got.error)
    assert got.text == "again"
    assert answers == []


def exact_line(limit: int) -> bytes:
    """A chat chunk whose ``data:`` line is exactly ``limit`` bytes (without its end)."""
    head = b'data: {"choices": [{"delta": {"content": "'
    tail = b'"}}]}'
    return head + b"x" * (limit - len(head) - len(tail)) + tail


@pytest.mark.asyncio
@pytest.mark.parametrize("crlf", [False, True])
async def test_a_line_of_exactly_max_line_bytes_passes_over_http(crlf: bool) -> None:
    limit = 256
    line = exact_line(limit)
    assert len(line) == limit
    end = b"\r\n\r\n" if crlf else b"\n\n"
    # cut right after the line, inside its line end, so that the "\r" ends a write
    async with serve(writes(line + end[:1], end[1:] + STOP + DONE)) as url:
        got = await chat(url, max_line_bytes=limit)
    assert got.error is None, repr(got.error)
    assert got.text == "x" * (limit - 47)


@pytest.mark.asyncio
async def test_one_byte_past_max_line_bytes_fails_after_the_events_before_it() -> None:
    limit = 256
    line = exact_line(limit + 1)
    async with serve(writes(chat_chunk("before"), line[:100], line[100:] + b"\n\n")) as url:
        got = await chat(url, max_line_bytes=limit)
        error = await chat_failure(url, max_line_bytes=limit)
    assert isinstance(got.error, LimitExceeded), repr(got.error)
    assert got.text == "before"
    assert isinstance(error, LimitExceeded)
    assert error.partial is not None
    assert error.partial.text == "before"


# ---------------------------------------------------------------- retries


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after-ms": "250"}, 0.25),
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after-ms": "nan", "Retry-After": "2"}, 2.0),  # a bad ms header: the other
        ({"Retry-After": "-5"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after_forms(headers: dict[str, str], seconds: float | None) -> None:
    assert parse_retry_after(headers) == seconds


@given(delta=st.integers(min_value=0, max_value=10**6))
@FAST
def test_parse_retry_after_reads_an_http_date_as_seconds_from_now(delta: int) -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + delta, usegmt=True)
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(delta)
    # an HTTP date in the past asks for no wait, never a negative one
    past = email.utils.formatdate(now - delta - 1, usegmt=True)
    assert parse_retry_after({"Retry-After": past}, now=now) == 0.0


def test_the_asctime_form_of_an_http_date_is_read_as_gmt() -> None:
    now = email.utils.parsedate_to_datetime("Sun, 06 Nov 1994 08:49:30 GMT").timestamp()
    assert parse_retry_after({"Retry-After": "Sun Nov  6 08:49:37 1994"}, now=now) == 7.0


@given(attempt=st.integers(1, 10), retry_after=st.floats(0, 100, allow_nan=False))
@FAST
def test_retry_delay_honours_retry_after_up_to_the_cap_and_counts_attempts(
    attempt: int, retry_after: float
) -> None:
    policy = RetryPolicy(max_attempts=4, max_retry_after=50.0, jitter=False)
    delay = policy.delay(HTTPStatusError(429, retry_after=retry_after), attempt)
    if attempt >= 4 or retry_after > 50.0:
        assert delay is None
    else:
        assert delay == retry_after
    backoff = policy.delay(HTTPStatusError(503), attempt)
    if attempt >= 4:
        assert backoff is None
    else:
        assert backoff == min(policy.max_backoff, policy.initial_backoff * 2 ** (attempt - 1))


@pytest.mark.asyncio
async def test_a_call_given_up_after_its_attempts_says_how_many_were_made() -> None:
    hits: list[int] = []

    async def busy(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        return web.json_response({"error": {"message": "busy"}}, status=503)

    async with serve(busy) as url:
        got = await chat(url, retry=RetryPolicy(max_attempts=3, initial_backoff=0.01))
    assert isinstance(got.error, HTTPStatusError), repr(got.error)
    assert len(hits) == 3
    assert got.error.attempts == 3
    assert "(after 3 attempts)" in str(got.error)
    assert got.items == []


@pytest.mark.asyncio
async def test_a_retry_after_above_the_cap_is_not_retried() -> None:
    hits: list[int] = []

    async def limited(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        return web.json_response(
            {"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "3600"}
        )

    async with serve(limited) as url:
        got = await chat(url, retry=RetryPolicy(max_retry_after=60))
    assert isinstance(got.error, HTTPStatusError), repr(got.error)
    assert got.error.retry_after == 3600.0
    assert len(hits) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(("status", "header", "tries"), [(503, "false", 1), (400, "true", 2)])
async def test_x_should_retry_overrides_the_status(status: int, header: str, tries: int) -> None:
    hits: list[int] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        return web.json_response(
            {"error": {"message": "no"}}, status=status, headers={"x-should-retry": header}
        )

    async with serve(handle) as url:
        got = await chat(url, retry=RetryPolicy(max_attempts=2, initial_backoff=0.01))
    assert isinstance(got.error, HTTPStatusError), repr(got.error)
    assert len(hits) == tries


@pytest.mark.asyncio
async def test_no_retry_once_output_was_delivered() -> None:
    """A drop after text: retrying would duplicate it (RELIABILITY row 1)."""
    hits: list[int] = []

    async def cut(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chat_chunk("partial"))
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return response

    async with serve(cut) as url:
        got = await chat(url, retry=NO_WAIT)
    assert isinstance(got.error, StreamInterrupted), repr(got.error)
    assert len(hits) == 1
    assert got.text == "partial"


@pytest.mark.asyncio
async def test_the_failed_attempts_metadata_is_never_seen_after_a_retry() -> None:
    """Anthropic overloaded right after ``message_start``: retried, and only the second
    response's id and usage reach the subscriber."""
    hits: list[int] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        start = MESSAGE_START % len(hits)
        body = start + (OVERLOADED if len(hits) == 1 else ANTHROPIC_REST)
        return web.Response(body=body, content_type="text/event-stream")

    async with serve(handle) as url, AnthropicClient(url, "sk-ant-x", retry=NO_WAIT) as client:
        got = await run(client.stream(USER))
    assert got.error is None, repr(got.error)
    assert len(hits) == 2
    ids = [item.id for item in got.items if isinstance(item, ResponseMetadata)]
    assert ids == ["msg_2"]
    assert got.text == "Sunny."
    assert not any(isinstance(item, Usage) for item in got.items)  # it rides on the Finish


@pytest.mark.asyncio
async def test_an_overloaded_error_without_a_retry_policy_keeps_its_metadata_and_usage() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=(MESSAGE_START % 7) + OVERLOADED, content_type="text/event-stream")

    async with serve(handle) as url, AnthropicClient(url, "sk-ant-x") as client:
        error = await failure(client.stream(USER))
    assert isinstance(error, ProviderError), repr(error)
    assert error.retryable
    assert error.partial is not None
    assert error.partial.id == "msg_7"
    assert error.partial.usage is not None
    assert error.partial.usage.prompt_tokens == 9


# ---------------------------------------------------------------- timeouts


@pytest.mark.asyncio
async def test_headers_later_than_first_byte_is_a_connect_timeout() -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(2)
        return web.Response(body=chat_body("late"), content_type="text/event-stream")

    async with serve(slow) as url:
        started = time.monotonic()
        got = await chat(url, timeouts=Timeouts(first_byte=0.2, idle=5))
        took = time.monotonic() - started
    assert isinstance(got.error, ConnectTimeout), repr(got.error)
    assert got.error.retryable
    assert took < 1.5


@pytest.mark.asyncio
async def test_silence_after_the_headers_is_an_idle_timeout_with_the_partial() -> None:
    async def stall(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chat_chunk("so far"))
        await asyncio.sleep(3)
        return response

    async with serve(stall) as url:
        error = await chat_failure(url, timeouts=Timeouts(idle=0.3), retry=NO_WAIT)
    assert isinstance(error, IdleTimeout), repr(error)
    assert not error.retryable
    assert error.partial is not None
    assert error.partial.text == "so far"


@pytest.mark.asyncio
async def test_keep_alive_comments_reset_the_idle_timeout() -> None:
    """Ten comments 0.1 s apart outlast an idle timeout of 0.3 s: no IdleTimeout."""
    pings = [b": ping\n\n"] * 10

    async def pinging(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for ping in pings:
            await response.write(ping)
            await asyncio.sleep(0.1)
        await response.write(chat_body("awake"))
        await response.write_eof()
        return response

    async with serve(pinging) as url:
        got = await chat(url, timeouts=Timeouts(idle=0.3))
    assert got.error is None, repr(got.error)
    assert got.text == "awake"


# ---------------------------------------------------------------- content types


@pytest.mark.asyncio
async def test_an_event_stream_labelled_json_is_sniffed_even_from_a_split_head() -> None:
    """The head comes a few bytes at a time ("da", "ta: {..."): sniffing waits for enough."""
    body = chat_body("sniffed")
    pieces = [body[:1], body[1:2], body[2:4], body[4:]]
    async with serve(writes(*pieces, content_type="application/json")) as url:
        got = await chat(url)
    assert got.error is None, repr(got.error)
    assert got.text == "sniffed"


@pytest.mark.asyncio
async def test_a_json_error_labelled_json_is_a_content_type_error_quoting_it() -> None:
    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "streaming is not supported"}})

    async with serve(refuse) as url:
        got = await chat(url, retry=NO_WAIT)
    assert isinstance(got.error, ContentTypeError), repr(got.error)
    assert "streaming is not supported" in str(got.error)
    assert got.error.status == 200
    assert not got.error.retryable


# ---------------------------------------------------------------- the sans-IO pieces


@given(cuts=st.lists(st.integers(0, 10_000), max_size=6))
@FAST
def test_update_decoder_keeps_updates_before_an_in_band_error_however_split(
    cuts: list[int],
) -> None:
    """An Anthropic text, then an error event: the text always comes out, then the error."""
    body = (
        (MESSAGE_START % 1)
        + ANTHROPIC_REST.split(b"event: content_block_stop")[0]
        + OVERLOADED
        + b"event: message_stop\ndata: {}\n\n"  # never read: the error ends the stream
    )
    decoder = UpdateDecoder("anthropic")
    got: list[Any] = []
    error: Exception | None = None
    try:
        for chunk in splits_of(body, cuts):
            got += decoder.feed(chunk)
            if decoder.done:
                break
        got += decoder.close()
    except ProviderError as err:
        error = err
    assert isinstance(error, ProviderError)
    assert "".join(u.delta for u in got if isinstance(u, TextDelta)) == "Sunny."
    salvaged = decoder.salvage()
    assert [type(u) for u in salvaged] == [Usage]
    assert decoder.salvage() == []  # owed once


@given(extra=st.integers(-2, 2), split=st.integers(0, 300))
@FAST
def test_sse_line_limit_is_exact_with_crlf_split_anywhere(extra: int, split: int) -> None:
    limit = 200
    line = b"data: " + b"y" * (limit - 6 + extra)
    body = line + b"\r\n\r\n"
    decoder = SSEDecoder(max_line_bytes=limit)
    events = []
    error: LimitExceeded | None = None
    try:
        for chunk in splits_of(body, [split]):
            events += decoder.feed(chunk)
        decoder.close()
    except LimitExceeded as err:
        error = err
    if extra > 0:
        assert error is not None
        assert events == []
    else:
        assert error is None
        assert [len(e.data) for e in events] == [limit - 6 + extra]


@given(cut=st.integers(1, 3), prefix=st.integers(0, 3))
@FAST
def test_sse_line_limit_counts_a_split_character_in_utf8_bytes(cut: int, prefix: int) -> None:
    """A line of exactly the limit, in UTF-8 bytes, whose last character (4 bytes) is
    split across chunks: accepted; one more byte: refused."""
    char = "🙂".encode()
    for over in (0, 1):
        line = b"data: " + b"a" * (prefix + over) + char
        limit = len(line) - over
        decoder = SSEDecoder(max_line_bytes=limit)
        at = len(line) - len(char) + cut
        try:
            events = decoder.feed(line[:at]) + decoder.feed(line[at:] + b"\n\n")
        except LimitExceeded:
            assert over == 1
        else:
            assert over == 0
            assert [e.data for e in events] == ["a" * prefix + "🙂"]


def test_sync_from_sse_stops_reading_at_the_terminal_marker_and_closes_the_iterator() -> None:
    asked: list[int] = []
    closed: list[bool] = []

    def body() -> Iterator[bytes]:
        try:
            asked.append(1)
            yield chat_chunk("one") + STOP
            asked.append(2)
            yield DONE
            asked.append(3)
            yield b"data: not json\n\n"
        finally:
            closed.append(True)

    items: list[Any] = []
    outcome: list[Any] = []
    from_sse(body()).subscribe(items.append, outcome.append, lambda: outcome.append("done"))
    assert outcome == ["done"]
    assert asked == [1, 2]
    assert closed == [True]
    assert [type(item) for item in items] == [TextDelta, Finish]


@pytest.mark.asyncio
async def test_async_from_sse_disposed_mid_body_closes_the_async_iterator() -> None:
    closed = asyncio.Event()
    more = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        try:
            yield chat_chunk("first")
            await more.wait()  # never set: the reader waits here when disposed
            yield DONE
        finally:
            closed.set()

    items: list[Any] = []
    first = asyncio.Event()

    def on_next(item: Any) -> None:
        items.append(item)
        first.set()

    subscription = from_sse(body()).subscribe(on_next)
    await asyncio.wait_for(first.wait(), 5)
    subscription.dispose()
    await asyncio.wait_for(closed.wait(), 5)
    assert [type(item) for item in items] == [TextDelta]


def test_from_sse_of_an_empty_body_is_an_incomplete_stream() -> None:
    errors: list[Exception] = []
    from_sse(b"").subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert isinstance(errors[0], IncompleteStream)


@given(size=st.integers(1, 40), extra=st.integers(-3, 3))
@FAST
def test_args_parser_max_bytes_is_exact_in_utf8_bytes(size: int, extra: int) -> None:
    text = json.dumps({"s": "é" * size}, ensure_ascii=False)
    limit = len(text.encode()) + extra
    if limit <= 0:
        return
    parser = StreamingArgsParser(max_bytes=limit)
    for char in text:  # one character a fragment: the limit is crossed mid-string
        parser.feed(char)
    if extra >= 0:
        assert parser.error is None
        assert parser.close() == {"s": "é" * size}
    else:
        assert parser.error is not None
        assert "exceed" in parser.error
        with pytest.raises(json.JSONDecodeError):
            parser.close()


@given(value=st.text(max_size=12), cuts=st.lists(st.integers(0, 200), max_size=5))
@FAST
def test_args_parser_escapes_split_anywhere_decode_as_json_loads(
    value: str, cuts: list[int]
) -> None:
    """Escapes (\\uXXXX, surrogate pairs, \\n) cut at any offset: the same string as
    ``json.loads``, and the progress fragments add up to it."""
    text = json.dumps({"v": value})  # ensure_ascii: every non-ASCII char is an escape
    parser = StreamingArgsParser()
    grown = []
    for piece in [text[a:b] for a, b in _pairs(text, cuts)]:
        grown += [e.fragment for e in parser.feed(piece) if type(e).__name__ == "ArgProgress"]
    assert parser.close() == json.loads(text)
    assert "".join(grown) == value


def _pairs(text: str, cuts: list[int]) -> list[tuple[int, int]]:
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return list(itertools.pairwise(points))


@pytest.mark.asyncio
async def test_aclose_during_a_retry_backoff_sends_nothing_more() -> None:
    """``aclose()``: "one waiting to retry sends nothing more"; it ends with a
    non-retryable TransportError."""
    hits: list[int] = []

    async def busy(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        return web.json_response({"error": {"message": "busy"}}, status=503)

    async with serve(busy) as url:
        client = OpenAIChatClient(url, retry=RetryPolicy(initial_backoff=30, jitter=False))
        runner = asyncio.ensure_future(run(client.stream(USER)))
        for _ in range(500):
            if hits:
                break
            await asyncio.sleep(0.01)
        await client.aclose()
        got = await asyncio.wait_for(runner, 5)
    assert isinstance(got.error, TransportError), repr(got.error)
    assert not got.error.retryable
    assert len(hits) == 1
