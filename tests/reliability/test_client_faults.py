"""The HTTP clients against RELIABILITY.md / DESIGN.md, where other tests are thin.

Each test drives a real client over 127.0.0.1 against
:class:`~rafrx.testing.LLMServer` (real aiohttp on both sides, no patching):
secrets that straddle the point where an error body or raw event data is
cut, in-band errors right after the first (metadata-only) event, a caller's
session configured to raise on HTTP errors or to time out, disposal, the
``charset`` of an event stream, ``retry-after-ms`` over ``Retry-After``,
every retryable status, a 1 MiB data line and the snapshot of an in-band
failure.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
import warnings
from typing import Any

import aiohttp
import pytest

from rafrx import ChatMessage, FinishReason
from rafrx import updates as u
from rafrx.errors import (
    ContentTypeError,
    HTTPStatusError,
    MalformedEvent,
    ProviderError,
    StreamTimeout,
)
from rafrx.sources.clients import LLMClient, OpenAIChatClient, RetryPolicy, Timeouts
from rafrx.testing import Fault, LLMServer, Replay, Reply, ToolCallSpec, render, render_events
from tests.reliability._support import CLIENTS, Outcome, run_async

FORMATS = list(CLIENTS)
KEY = "sk-hunt-0123456789abcdefghijklmnop"  # 34 characters
USER = [ChatMessage.user("Tell me a story.")]
FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, jitter=False)


def client(server: LLMServer, fmt: str, **kwargs: Any) -> LLMClient:
    return CLIENTS[fmt](server.url, KEY, **kwargs)


async def call(c: LLMClient) -> Outcome:
    return await run_async(c.stream(USER))


def leaked(text: str | None) -> bool:
    """Whether ``text`` shows the key or most of it (its first 20 characters)."""
    return text is not None and KEY[:20] in text


def error_texts(error: BaseException) -> list[str]:
    """Every text an error shows: str, repr and its string attributes."""
    texts = [str(error), repr(error), *map(str, error.args)]
    texts += [v for v in vars(error).values() if isinstance(v, str)]
    return texts


# ---------------------------------------------------------------- secrets cut in two


@pytest.mark.asyncio
async def test_a_key_at_the_end_of_a_wrong_content_type_snippet_is_not_shown(
    llm_server: LLMServer,
) -> None:
    """The body snippet of a ContentTypeError is cut at 2 KiB; a key straddling the cut
    must not survive as a long prefix."""
    page = "x" * (2048 - 28) + KEY + " rest of the proxy page"
    llm_server.enqueue(Fault.wrong_content_type("text/html", body=page))
    async with client(llm_server, "openai-chat") as c:
        got = await call(c)
    assert isinstance(got.error, ContentTypeError)
    assert got.error.body is not None
    assert got.error.body.startswith("xxxx")
    assert not any(leaked(t) for t in error_texts(got.error)), got.error.body[-40:]


@pytest.mark.asyncio
async def test_a_key_at_the_clip_of_malformed_event_data_is_not_shown(
    llm_server: LLMServer,
) -> None:
    """MalformedEvent keeps the raw data clipped to MAX_BODY_CHARS; a key straddling the
    clip must not survive as a long prefix."""
    data = "{unparsable " + "x" * (8192 - 12 - 22) + KEY
    llm_server.enqueue(Replay(f"data: {data}\n\n".encode()))
    async with client(llm_server, "openai-chat") as c:
        got = await call(c)
    assert isinstance(got.error, MalformedEvent)
    assert got.error.raw.startswith("{unparsable xxx")
    assert not any(leaked(t) for t in error_texts(got.error)), got.error.raw[-60:]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_key_at_the_clip_of_a_long_provider_error_message_is_not_shown(
    llm_server: LLMServer, fmt: str
) -> None:
    """A provider error message longer than MAX_BODY_CHARS that echoes the key across
    the clip must not show most of the key."""
    message = "y" * (8192 - 22) + KEY
    payload = {"type": "error", "error": {"message": message, "type": "server_error"}}
    llm_server.enqueue(Replay(b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"))
    async with client(llm_server, fmt) as c:
        got = await call(c)
    assert isinstance(got.error, ProviderError)
    assert got.error.message.startswith("yyyy")
    assert not any(leaked(t) for t in error_texts(got.error)), got.error.message[-60:]


# ---------------------------------------------------------------- retries


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_overload_right_after_the_metadata_event_is_retried(
    llm_server: LLMServer, fmt: str
) -> None:
    """RELIABILITY row 3: an error event before any content is retryable at request
    level; the first event of each dialect (message_start, response.created, the
    role chunk) carries only the response id and model, no content."""
    first = render_events(Reply(text="never sent"), fmt, {})[0]
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    error = b"event: error\ndata: " + json.dumps(overloaded).encode() + b"\n\n"
    llm_server.enqueue(Replay(first + error), Reply(text="recovered"))
    async with client(llm_server, fmt, retry=FAST_RETRY) as c:
        got = await call(c)
    assert not any(isinstance(x, u.TextDelta) for x in got.updates[:1])
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "recovered"
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
async def test_a_callers_session_with_raise_for_status_still_gives_http_status_errors(
    llm_server: LLMServer,
) -> None:
    """A session given by the caller may be made with ``raise_for_status=True``: a 429
    must still be an HTTPStatusError with its status, retried by the policy."""
    llm_server.enqueue(Fault.status(429, retry_after=0), Reply(text="ok"))
    http = aiohttp.ClientSession(raise_for_status=True)
    async with http, client(llm_server, "openai-chat", session=http, retry=FAST_RETRY) as c:
        got = await call(c)
    assert not isinstance(got.error, HTTPStatusError) or got.error.status == 429
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "ok"
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [408, 409, 502, 504, 529])
async def test_every_retryable_status_is_retried_over_http(
    llm_server: LLMServer, status: int
) -> None:
    """RELIABILITY row 4: 408, 409 and 5xx before the body are retried by the policy."""
    llm_server.enqueue(Fault.status(status), Reply(text="second time"))
    async with client(llm_server, "anthropic", retry=FAST_RETRY) as c:
        got = await call(c)
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "second time"
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
async def test_retry_after_ms_wins_over_a_long_retry_after(llm_server: LLMServer) -> None:
    """``retry-after-ms`` (OpenAI's) is read before ``Retry-After``: 100 ms, not 30 s."""
    llm_server.enqueue(
        Fault.status(429, retry_after=30, headers={"retry-after-ms": "100"}),
        Reply(text="after 100 ms"),
    )
    async with client(llm_server, "openai-chat", retry=FAST_RETRY) as c:
        start = time.monotonic()
        got = await call(c)
    elapsed = time.monotonic() - start
    assert got.response is not None, repr(got.error)
    assert got.response.text == "after 100 ms"
    assert 0.09 <= elapsed < 2.0
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
async def test_every_failed_attempt_releases_its_connection(llm_server: LLMServer) -> None:
    """RELIABILITY row 4: four 503s then an answer leave at most the pooled connection
    open, and none once the client is closed."""
    llm_server.enqueue(*[Fault.status(503)] * 4, Reply(text="fifth"))
    policy = RetryPolicy(max_attempts=5, initial_backoff=0.01, max_backoff=0.02, jitter=False)
    c = client(llm_server, "openai-responses", retry=policy)
    try:
        got = await call(c)
        assert got.response is not None, repr(got.error)
        assert got.response.text == "fifth"
        assert len(llm_server.requests) == 5
        await llm_server.wait_until(lambda: llm_server.open_connections <= 1, 2.0)
    finally:
        await c.aclose()
    await llm_server.wait_connections_closed(2.0)


# ---------------------------------------------------------------- timeouts


@pytest.mark.asyncio
async def test_a_callers_session_timeouts_do_not_cut_a_long_stream(llm_server: LLMServer) -> None:
    """RELIABILITY row 6: no total timeout on the body, even when the caller's session
    has one (and a short ``sock_read``): only the client's idle timeout counts."""
    llm_server.enqueue(Reply(text="slow " * 8, chunk_size=5, delay=0.1))  # about 1 s
    session_timeout = aiohttp.ClientTimeout(total=0.3, sock_read=0.05)
    async with aiohttp.ClientSession(timeout=session_timeout) as http:
        timeouts = Timeouts(connect=2, first_byte=2, idle=2)
        async with client(llm_server, "openai-chat", session=http, timeouts=timeouts) as c:
            got = await call(c)
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == "slow " * 8


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_silence_right_after_the_headers_is_a_stream_timeout(
    llm_server: LLMServer, fmt: str
) -> None:
    """RELIABILITY row 6: headers, then no body byte at all: a StreamTimeout once the
    idle timeout passes, the connection closed."""
    llm_server.enqueue(Fault.stall(30, after_bytes=0))
    async with client(llm_server, fmt, timeouts=Timeouts(first_byte=2, idle=0.3)) as c:
        start = time.monotonic()
        got = await call(c)
    assert isinstance(got.error, StreamTimeout), repr(got.error)
    assert 0.25 <= time.monotonic() - start < 2.5
    assert got.updates == []
    assert got.error.partial is not None
    assert got.error.partial.interrupted
    await llm_server.wait_connections_closed(2.0)


# ---------------------------------------------------------------- disposal


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_disposing_twice_mid_stream_emits_nothing_more_and_closes(
    llm_server: LLMServer, fmt: str
) -> None:
    """RELIABILITY row 7: dispose mid-stream (twice: a no-op): no more items, no
    completion or error, and the server sees its connection closed while it streams."""
    llm_server.enqueue(Reply(text="slow " * 100, chunk_size=2, delay=0.01))
    seen: list[Any] = []
    third = asyncio.get_running_loop().create_future()

    def on_next(update: u.AgentResponseUpdate) -> None:
        seen.append(update)
        if len(seen) == 3 and not third.done():
            third.set_result(None)

    async with client(llm_server, fmt) as c:
        subscription = c.stream(USER).subscribe(
            on_next, lambda e: seen.append(("error", e)), lambda: seen.append("completed")
        )
        await asyncio.wait_for(third, 2.0)
        subscription.dispose()
        count = len(seen)
        subscription.dispose()
        await llm_server.wait_connections_closed(1.0)  # closed, not returned to a pool
        await asyncio.sleep(0.1)
    assert len(seen) == count
    assert all(not isinstance(x, str | tuple) for x in seen)


@pytest.mark.asyncio
async def test_disposing_mid_stream_then_dropping_the_client_warns_about_nothing(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    """RELIABILITY row 7: after a mid-stream dispose, no ResourceWarning and nothing
    for the loop's exception handler. Dropping a client without ``aclose()`` is clean
    after a completed call (its session is closed by the loop's async-generator hook)."""
    llm_server.enqueue(Reply(text="slow " * 100, chunk_size=2, delay=0.01))
    seen: list[u.AgentResponseUpdate] = []
    third = asyncio.get_running_loop().create_future()

    def on_next(update: u.AgentResponseUpdate) -> None:
        seen.append(update)
        if len(seen) == 3 and not third.done():
            third.set_result(None)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c: OpenAIChatClient | None = OpenAIChatClient(llm_server.url, KEY)
        assert c is not None
        subscription = c.stream(USER).subscribe(on_next)
        await asyncio.wait_for(third, 2.0)
        subscription.dispose()
        await llm_server.wait_connections_closed(1.0)
        c = None
        del subscription
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0.02)
    messages = [str(w.message) for w in caught] + [str(e.get("message")) for e in loop_errors]
    assert not [m for m in messages if "nclosed" in m], messages


# ---------------------------------------------------------------- decoding


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "content_type",
    [
        "text/event-stream; charset=iso-8859-1",
        "TEXT/EVENT-STREAM",
        "text/event-stream;charset=UTF-8",
        "Text/Event-Stream ; charset=windows-1252",
    ],
)
async def test_an_event_stream_with_any_charset_is_decoded_as_utf8(
    llm_server: LLMServer, content_type: str
) -> None:
    """RELIABILITY row 5: ``text/event-stream;charset=…`` is accepted, any case, and
    the body is still UTF-8."""
    text = "café ☕ naïve 😀"
    body = render(Reply(text=text, chunk_size=3), "openai-chat")
    llm_server.enqueue(Fault.wrong_content_type(content_type, body=body))
    async with client(llm_server, "openai-chat") as c:
        got = await call(c)
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == text


@pytest.mark.asyncio
async def test_a_one_mib_data_line_over_http_decodes(llm_server: LLMServer) -> None:
    """RELIABILITY row 8: a 1 MiB single ``data`` line is one event (no ``readline``
    limit), served in 64 KiB writes."""
    text = "z" * (1024 * 1024)
    body = render(Reply(text=text, chunk_size=len(text)), "anthropic")
    llm_server.enqueue(Replay(body, chunk_size=64 * 1024))
    async with client(llm_server, "anthropic") as c:
        got = await call(c)
    assert got.error is None, repr(got.error)
    assert got.response is not None
    assert got.response.text == text
    assert [x for x in got.updates if isinstance(x, u.TextDelta)] == [u.TextDelta(text)]


@pytest.mark.asyncio
async def test_a_malformed_named_event_keeps_its_raw_data_and_event_name(
    llm_server: LLMServer,
) -> None:
    """RELIABILITY row 9: ``MalformedEvent(raw, event_name)``, the raw text kept."""
    events = render_events(Reply(text="Hello there"), "anthropic", {})
    bad = b"event: content_block_delta\ndata: {unparsable}\n\n"
    llm_server.enqueue(Replay(b"".join(events[:4]) + bad + b"".join(events[4:])))
    async with client(llm_server, "anthropic") as c:
        got = await call(c)
    assert isinstance(got.error, MalformedEvent), repr(got.error)
    assert got.error.raw == "{unparsable}"
    assert got.error.event_name == "content_block_delta"
    assert got.error.__cause__ is None


# ---------------------------------------------------------------- the snapshot of a failure


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
async def test_the_partial_of_an_in_band_error_after_content_finishes_with_error(
    llm_server: LLMServer, fmt: str
) -> None:
    """RELIABILITY row 3: after content, an error event is terminal and the snapshot is
    closed with finish "error" (vercel's text-end + finish "error")."""
    llm_server.enqueue(Reply(text="partial answer", finish=FinishReason.ERROR))
    async with client(llm_server, fmt) as c:
        got = await call(c)
    assert isinstance(got.error, ProviderError), repr(got.error)
    partial = got.error.partial
    assert partial is not None
    assert partial.text == "partial answer"
    assert partial.interrupted
    assert partial.finish_reason is FinishReason.ERROR


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
async def test_a_call_ended_before_an_in_band_error_stays_in_the_partial(
    llm_server: LLMServer, fmt: str
) -> None:
    """ "Snapshot" = the aggregate built so far: a tool call whose arguments arrived in
    full (its block stopped) before the error event must not vanish from it, even if it
    is not to be run."""
    reply = Reply(
        text="Let me look.",
        tool_calls=[ToolCallSpec("lookup", {"q": "rx"}, id="call_1")],
        finish=FinishReason.ERROR,
    )
    llm_server.enqueue(reply)
    async with client(llm_server, fmt) as c:
        got = await call(c)
    assert isinstance(got.error, ProviderError), repr(got.error)
    assert any(isinstance(x, u.ToolCallEnd) for x in got.updates)
    partial = got.error.partial
    assert partial is not None
    assert partial.text == "Let me look."
    assert [call.id for call in partial.tool_calls] == ["call_1"]
    (kept,) = partial.tool_calls
    assert kept.name == "lookup"
    assert kept.arguments == {"q": "rx"} or kept.raw_arguments == '{"q":"rx"}'
