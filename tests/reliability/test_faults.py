"""Faults done for real by the local server, read through the HTTP clients.

Connection refused, reset mid-stream, stalls before the first byte and
between chunks (connect, first-byte and idle timeouts), HTTP error statuses
with JSON, text and empty bodies, ``Retry-After`` under the opt-in retry
policy (counted requests), garbage and invalid UTF-8, a wrong content type,
an error event mid-stream and JSON of the wrong shape. Every outcome is a
typed :class:`~rafrx.errors.RafrxError` carrying what is known, with
``.partial`` holding exactly the updates delivered before the fault, and no
connection is left open.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rafrx import ChatMessage
from rafrx import updates as u
from rafrx.errors import (
    ConnectTimeout,
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    MalformedEvent,
    ProviderError,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.sources.clients import LLMClient, RetryPolicy, Timeouts
from rafrx.testing import Fault, LLMServer, Replay, Reply, render, render_events
from tests.reliability._support import CLIENTS, Outcome, expected_partial, run_async

FORMATS = list(CLIENTS)
KEY = "sk-reliability-0123456789abcdef"
USER = [ChatMessage.user("Tell me a story.")]
FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, jitter=False)
STORY = "Once upon a time, a stream was cut in two and nobody noticed. " * 3


def client(server: LLMServer, fmt: str, **kwargs: Any) -> LLMClient:
    return CLIENTS[fmt](server.url, KEY, **kwargs)


async def call(c: LLMClient) -> Outcome:
    return await run_async(c.stream(USER))


def assert_failed_cleanly(got: Outcome, kind: Any) -> RafrxError:
    """``got`` failed with ``kind``, its partial holding exactly what was delivered."""
    error = got.error
    assert isinstance(error, kind), repr(error)
    assert got.response is None
    assert KEY not in str(error)
    assert KEY not in repr(error)
    assert error.partial is not None
    assert error.partial.interrupted
    failure = ProviderError("cut") if isinstance(error, ProviderError) else None
    assert error.partial == expected_partial(got.updates, failure)
    return error


def text_of(updates: list[u.AgentResponseUpdate]) -> str:
    return "".join(x.delta for x in updates if isinstance(x, u.TextDelta))


# ---------------------------------------------------------------- connections


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A 127.0.0.1 URL nobody listens on (the port is held, not listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def unaccepting_url() -> Iterator[str]:
    """A 127.0.0.1 URL whose listen backlog is full: connecting hangs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        address = listener.getsockname()
        fillers = []
        try:
            for _ in range(4):
                filler = socket.socket()
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(address)
                fillers.append(filler)
            yield f"http://127.0.0.1:{address[1]}"
        finally:
            for filler in fillers:
                filler.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_connection_refused(no_task_leak: None, refused_url: str, fmt: str) -> None:
    async with CLIENTS[fmt](refused_url, KEY) as c:
        got = await call(c)
    error = assert_failed_cleanly(got, TransportError)
    assert type(error) is TransportError
    assert error.retryable
    assert refused_url in error.message
    assert got.updates == []


@pytest.mark.asyncio
async def test_connection_refused_is_retried_by_the_policy_then_reported(
    no_task_leak: None, refused_url: str
) -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.1, jitter=False)
    async with CLIENTS["openai-chat"](refused_url, KEY, retry=policy) as c:
        start = time.monotonic()
        got = await call(c)
    assert_failed_cleanly(got, TransportError)
    assert time.monotonic() - start >= 0.05 + 0.1  # two backoffs: three attempts


@pytest.mark.asyncio
async def test_connect_timeout(no_task_leak: None, unaccepting_url: str) -> None:
    timeouts = Timeouts(connect=0.3, first_byte=30, idle=30)
    async with CLIENTS["openai-chat"](unaccepting_url, KEY, timeouts=timeouts) as c:
        start = time.monotonic()
        got = await call(c)
    error = assert_failed_cleanly(got, ConnectTimeout)
    assert error.retryable
    assert 0.25 <= time.monotonic() - start < 10


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_reset_mid_stream_keeps_what_arrived(llm_server: LLMServer, fmt: str) -> None:
    body = render(Reply(text=STORY, chunk_size=8), fmt)
    cut = body.index(b"nobody")  # well inside the text
    llm_server.enqueue(Fault.drop_after(cut, body=body, reset=True), Reply(text="again"))
    async with client(llm_server, fmt, retry=FAST_RETRY) as c:
        got = await call(c)
    error = assert_failed_cleanly(got, TransportError)
    assert not error.retryable
    text = text_of(got.updates)
    assert STORY.startswith(text)
    assert error.partial is not None
    assert error.partial.text == text
    assert len(llm_server.requests) == 1  # output was delivered: never retried
    await llm_server.wait_connections_closed()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_closed_mid_stream_is_stream_interrupted(llm_server: LLMServer, fmt: str) -> None:
    body = render(Reply(text=STORY, chunk_size=8), fmt)
    events = render_events(Reply(text=STORY, chunk_size=8), fmt, {})
    cut = sum(len(e) for e in events[:6])  # six whole events, then the close
    llm_server.enqueue(Fault.drop_after(cut, body=body))
    async with client(llm_server, fmt) as c:
        got = await call(c)
    error = assert_failed_cleanly(got, StreamInterrupted)
    assert text_of(got.updates) == text_of(_updates(b"".join(events[:6]), fmt))
    assert error.partial is not None
    assert error.partial.text
    await llm_server.wait_connections_closed()


def _updates(body: bytes, fmt: str) -> list[u.AgentResponseUpdate]:
    """What a stream failing after ``body`` delivers: its events' updates, then what
    it owes (Anthropic's usage reported so far, which only a ``Finish`` carries)."""
    from rafrx.sources import UpdateDecoder

    decoder = UpdateDecoder(fmt)
    return decoder.feed(body) + decoder.salvage()


# ---------------------------------------------------------------- stalls


def test_timeouts_have_finite_defaults_and_no_total_timeout() -> None:
    defaults = Timeouts()
    for value in (defaults.connect, defaults.first_byte, defaults.idle):
        assert value is not None
        assert 1 <= value <= 300
    assert not hasattr(defaults, "total")  # a long generation is fine while bytes come
    assert CLIENTS["openai-chat"]("http://127.0.0.1:1").timeouts == defaults


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_stall_before_the_first_byte(llm_server: LLMServer, fmt: str) -> None:
    llm_server.enqueue(Fault.stall(30))
    timeouts = Timeouts(connect=5, first_byte=0.3, idle=30)
    async with client(llm_server, fmt, timeouts=timeouts) as c:
        start = time.monotonic()
        got = await call(c)
    assert_failed_cleanly(got, ConnectTimeout)
    assert 0.25 <= time.monotonic() - start < 10
    assert got.updates == []
    await llm_server.wait_connections_closed()  # the half-open request was aborted


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_stall_between_chunks(llm_server: LLMServer, fmt: str) -> None:
    events = render_events(Reply(text=STORY, chunk_size=8), fmt, {})
    at = sum(len(e) for e in events[:5])
    llm_server.enqueue(Fault.stall(30, after_bytes=at, body=b"".join(events)), Reply(text="x"))
    timeouts = Timeouts(connect=5, first_byte=5, idle=0.3)
    async with client(llm_server, fmt, timeouts=timeouts, retry=FAST_RETRY) as c:
        start = time.monotonic()
        got = await call(c)
    error = assert_failed_cleanly(got, IdleTimeout)
    assert not error.retryable
    assert 0.25 <= time.monotonic() - start < 10
    assert got.updates == _updates(b"".join(events[:5]), fmt)
    assert len(llm_server.requests) == 1
    await llm_server.wait_connections_closed()


@pytest.mark.asyncio
async def test_keep_alive_comments_reset_the_idle_timeout(llm_server: LLMServer) -> None:
    events = render_events(Reply(text="slow but alive", chunk_size=4), "openai-chat", {})
    paced = b"".join(e + b": keep-alive\n\n" for e in events)
    # 0.1 s between blocks, 1 s in all, under an idle timeout of 0.5 s
    llm_server.enqueue(Replay(paced, pacing=True, delay=1.0 / (2 * len(events))))
    timeouts = Timeouts(connect=5, first_byte=5, idle=0.5)
    async with client(llm_server, "openai-chat", timeouts=timeouts) as c:
        got = await call(c)
    assert got.error is None
    assert got.response is not None
    assert got.response.text == "slow but alive"


# ---------------------------------------------------------------- HTTP statuses

STATUSES = [400, 401, 404, 413, 429, 500, 503]
RETRYABLE = {429, 500, 503}


def _status_body(kind: str, status: int) -> tuple[Any, str | None]:
    """A body to send and the provider message expected from it."""
    if kind == "json":
        message = f"status {status}: the provider explains"
        return {"error": {"message": message, "type": "some_error"}}, message
    if kind == "text":
        return f"upstream said {status} <html>", None
    return "", None


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["json", "text", "empty"])
@pytest.mark.parametrize("status", STATUSES)
async def test_http_error_status(llm_server: LLMServer, status: int, kind: str) -> None:
    body, message = _status_body(kind, status)
    for fmt in FORMATS:
        llm_server.enqueue(Fault.status(status, body=body))
        async with client(llm_server, fmt) as c:
            got = await call(c)
        error = assert_failed_cleanly(got, HTTPStatusError)
        assert isinstance(error, HTTPStatusError)
        assert error.status == status
        assert str(status) in error.message
        assert error.retryable is (status in RETRYABLE)
        sent = json.dumps(body) if isinstance(body, dict) else body
        assert error.body == sent
        assert error.provider_message == message
        if message is not None:
            assert message in error.message
        assert got.updates == []
    assert len(llm_server.requests) == len(FORMATS)  # no policy: never retried
    await llm_server.wait_connections_closed()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_retry_after_is_honoured_by_the_policy(llm_server: LLMServer, fmt: str) -> None:
    llm_server.enqueue(Fault.status(429, retry_after=1), Reply(text="finally"))
    async with client(llm_server, fmt, retry=FAST_RETRY) as c:
        start = time.monotonic()
        got = await call(c)
    assert got.error is None
    assert got.response is not None
    assert got.response.text == "finally"
    assert time.monotonic() - start >= 0.95  # waited as asked, not the 0.01 s backoff
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
async def test_retry_after_ms_and_statuses_in_a_row(llm_server: LLMServer) -> None:
    llm_server.enqueue(
        Fault.status(503, headers={"retry-after-ms": "150"}),
        Fault.status(500),
        Reply(text="third time"),
    )
    async with client(llm_server, "anthropic", retry=FAST_RETRY) as c:
        start = time.monotonic()
        got = await call(c)
    assert got.response is not None
    assert got.response.text == "third time"
    assert time.monotonic() - start >= 0.15
    assert len(llm_server.requests) == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [429, 503])
async def test_without_the_policy_nothing_is_retried(llm_server: LLMServer, status: int) -> None:
    llm_server.enqueue(Fault.status(status, retry_after=0), Reply(text="never asked for"))
    async with client(llm_server, "openai-chat") as c:
        got = await call(c)
    error = assert_failed_cleanly(got, HTTPStatusError)
    assert isinstance(error, HTTPStatusError)
    assert error.retry_after == 0
    assert len(llm_server.requests) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [400, 401, 404, 413])
async def test_client_errors_are_never_retried(llm_server: LLMServer, status: int) -> None:
    llm_server.enqueue(Fault.status(status, retry_after=0), Reply(text="never asked for"))
    async with client(llm_server, "openai-responses", retry=FAST_RETRY) as c:
        got = await call(c)
    assert_failed_cleanly(got, HTTPStatusError)
    assert len(llm_server.requests) == 1


@pytest.mark.asyncio
async def test_a_retry_after_beyond_the_cap_is_not_waited_for(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.status(429, retry_after=3600), Reply(text="never asked for"))
    async with client(llm_server, "openai-chat", retry=FAST_RETRY) as c:
        start = time.monotonic()
        got = await call(c)
    error = assert_failed_cleanly(got, HTTPStatusError)
    assert isinstance(error, HTTPStatusError)
    assert error.retry_after == 3600
    assert time.monotonic() - start < 5
    assert len(llm_server.requests) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_retries_stop_once_content_was_delivered(llm_server: LLMServer, fmt: str) -> None:
    body = render(Reply(text=STORY, chunk_size=8), fmt)
    llm_server.enqueue(
        Fault.status(503, retry_after=0),
        Fault.drop_after(body.index(b"nobody"), body=body),
        Reply(text="a duplicate"),
    )
    async with client(llm_server, fmt, retry=FAST_RETRY) as c:
        got = await call(c)
    assert_failed_cleanly(got, StreamInterrupted)
    assert STORY.startswith(text_of(got.updates))
    assert text_of(got.updates)
    assert len(llm_server.requests) == 2  # the 503 was retried, the cut stream not
    await llm_server.wait_connections_closed()


# ---------------------------------------------------------------- hostile bodies


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_garbage_event(llm_server: LLMServer, fmt: str, seed: int) -> None:
    llm_server.enqueue(Fault.garbage(size=64, seed=seed, body=Reply(text=STORY)))
    async with client(llm_server, fmt, retry=FAST_RETRY) as c:
        got = await call(c)
    error = assert_failed_cleanly(got, MalformedEvent)
    assert isinstance(error, MalformedEvent)
    assert error.raw  # the offending data is kept (decoded, U+FFFD for bad bytes)
    assert len(llm_server.requests) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_invalid_utf8_inside_text_becomes_replacement_characters(
    llm_server: LLMServer, fmt: str
) -> None:
    body = render(Reply(text="café au lait", chunk_size=64), fmt)
    at = body.index("café".encode()) + 3  # inside the é
    llm_server.enqueue(Fault.garbage(b"\xff\xfe", at=at, framed=False, body=body))
    async with client(llm_server, fmt) as c:
        got = await call(c)
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text.startswith("caf\ufffd")
    assert got.response.text.endswith(" au lait")


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_unknown_lines_and_binary_comments_are_ignored(
    llm_server: LLMServer, fmt: str
) -> None:
    events = render_events(Reply(text=STORY, chunk_size=16), fmt, {})
    noise = b": \x00\xff\xfe binary comment\nweird-field: \xc3\x28\nretry: x\n\n"
    body = noise.join(events)
    llm_server.enqueue(Replay(body, chunk_size=7))
    async with client(llm_server, fmt) as c:
        got = await call(c)
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == STORY


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("content_type", "status"),
    [("text/html; charset=utf-8", 200), ("application/json", 200), ("text/plain", 502)],
)
async def test_wrong_content_type(llm_server: LLMServer, content_type: str, status: int) -> None:
    page = "<html><body><h1>Bad gateway</h1>" + "x" * 10_000 + "</body></html>"
    llm_server.enqueue(Fault.wrong_content_type(content_type, body=page, status=status))
    async with client(llm_server, "openai-chat") as c:
        got = await call(c)
    kind = HTTPStatusError if status >= 400 else ContentTypeError
    error = assert_failed_cleanly(got, kind)
    assert error.status == status
    assert error.body is not None
    assert error.body.startswith("<html><body><h1>Bad gateway")
    if kind is ContentTypeError:
        assert len(error.body) < len(page)  # a snippet, not the whole page
        assert content_type in error.message
    await llm_server.wait_connections_closed()


@pytest.mark.asyncio
async def test_a_wrong_content_type_is_not_retried(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.wrong_content_type(), Reply(text="never asked for"))
    async with client(llm_server, "anthropic", retry=FAST_RETRY) as c:
        got = await call(c)
    assert_failed_cleanly(got, ContentTypeError)
    assert len(llm_server.requests) == 1


# ---------------------------------------------------------------- in-band errors

_ERRORS = {
    "openai-chat": [
        b'event: error\ndata: {"error": {"message": "Overloaded", "type": "server_error"}}\n\n',
        b'data: {"error": {"message": "Overloaded", "type": "server_error", "code": 503}}\n\n',
    ],
    "anthropic": [
        b'event: error\ndata: {"type": "error", "error": '
        b'{"type": "overloaded_error", "message": "Overloaded"}}\n\n',
    ],
    "openai-responses": [
        b'event: error\ndata: {"type": "error", "code": "server_error", '
        b'"message": "Overloaded"}\n\n',
        b'event: response.failed\ndata: {"type": "response.failed", "response": '
        b'{"status": "failed", "error": {"code": "server_error", "message": "Overloaded"}}}\n\n',
    ],
}
_ERROR_CASES = [(fmt, n) for fmt, cases in _ERRORS.items() for n in range(len(cases))]


@pytest.mark.asyncio
@pytest.mark.parametrize(("fmt", "n"), _ERROR_CASES)
async def test_error_event_mid_stream(llm_server: LLMServer, fmt: str, n: int) -> None:
    events = render_events(Reply(text=STORY, chunk_size=8), fmt, {})
    body = b"".join(events[:6]) + _ERRORS[fmt][n] + b"".join(events[6:])
    llm_server.enqueue(Replay(body), Reply(text="a duplicate"))
    async with client(llm_server, fmt, retry=FAST_RETRY) as c:
        got = await call(c)
    error = assert_failed_cleanly(got, ProviderError)
    assert error.message == "Overloaded"
    assert got.updates == _updates(b"".join(events[:6]), fmt)
    assert error.partial is not None
    assert error.partial.text == text_of(got.updates)
    assert error.partial.text
    assert len(llm_server.requests) == 1  # content was delivered: terminal


@pytest.mark.asyncio
@pytest.mark.parametrize(("fmt", "n"), _ERROR_CASES)
async def test_error_event_before_content_is_retried(
    llm_server: LLMServer, fmt: str, n: int
) -> None:
    llm_server.enqueue(Replay(_ERRORS[fmt][n]), Reply(text="recovered"))
    async with client(llm_server, fmt, retry=FAST_RETRY) as c:
        got = await call(c)
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "recovered"
    assert len(llm_server.requests) == 2


_WRONG_SHAPE = {
    "openai-chat": [
        b"data: [1, 2, 3]\n\n",
        b'data: "a string"\n\n',
        b'data: {"choices": "not a list"}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": 42}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": -1}]}}]}\n\n',
    ],
    "anthropic": [
        b"event: content_block_delta\ndata: [1]\n\n",
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": "text"}\n\n',
        b'event: message_delta\ndata: {"type": "message_delta", "usage": 5}\n\n',
    ],
    "openai-responses": [
        b"data: null\n\n",
        b'data: {"type": "response.output_item.added", "item": []}\n\n',
    ],
}
_SHAPE_CASES = [(fmt, n) for fmt, cases in _WRONG_SHAPE.items() for n in range(len(cases))]


@pytest.mark.asyncio
@pytest.mark.parametrize(("fmt", "n"), _SHAPE_CASES)
async def test_valid_json_of_the_wrong_shape(llm_server: LLMServer, fmt: str, n: int) -> None:
    events = render_events(Reply(text=STORY, chunk_size=8), fmt, {})
    bad = _WRONG_SHAPE[fmt][n]
    llm_server.enqueue(Replay(b"".join(events[:4]) + bad + b"".join(events[4:])))
    async with client(llm_server, fmt) as c:
        got = await call(c)
    error = assert_failed_cleanly(got, MalformedEvent)
    assert isinstance(error, MalformedEvent)
    data = bad.split(b"data: ", 1)[1].rstrip(b"\n").decode()
    assert error.raw == data
    assert got.updates == _updates(b"".join(events[:4]), fmt)


# ---------------------------------------------------------------- deeply nested JSON

DEEP = "[" * 50_000 + "]" * 50_000  # valid JSON that json.loads cannot build


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_deeply_nested_json_anywhere_is_a_typed_error(
    llm_server: LLMServer, fmt: str
) -> None:
    from rafrx.testing import ToolCallSpec
    from tests.reliability._support import tool_callings

    arguments = '{"a": ' + DEEP + "}"
    llm_server.enqueue(
        Fault.status(500, body=DEEP.encode()),  # an error body
        Replay(f"data: {DEEP}\n\n".encode()),  # an event
        Replay(f"event: error\ndata: {DEEP}\n\n".encode()),  # an error event
        Reply(tool_calls=[ToolCallSpec("f", arguments)], chunk_size=4096),  # tool arguments
    )
    async with client(llm_server, fmt) as c:
        kinds: list[Any] = [HTTPStatusError, MalformedEvent, ProviderError | MalformedEvent]
        for kind in kinds:
            got = await call(c)
            assert_failed_cleanly(got, kind)
        got = await call(c)
    assert got.error is None, repr(got.error)
    (calling,) = tool_callings(got.results)
    assert calling.error is not None
    assert calling.raw_arguments == arguments
