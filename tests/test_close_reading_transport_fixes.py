"""Regression tests for the bugs a close, line-by-line reading of rafrx's code found
(transport side; the passing pins of the same reading are in test_close_reading_transport.py).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from rafrx import ChatMessage
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, RetryPolicy
from rafrx.updates import Finish

USER = [ChatMessage.user("Hi")]

CHAT_BODY = (
    b'data: {"id": "c1", "model": "m", "choices": [{"delta": {"content": "Hi"}}]}\n\n'
    b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
MESSAGE_START = (
    b"event: message_start\n"
    b'data: {"type": "message_start", "message": {"id": "msg_1", "model": "claude", '
    b'"usage": {"input_tokens": 9, "output_tokens": 1}}}\n\n'
)
OVERLOADED = (
    b"event: error\n"
    b'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
)


@contextlib.asynccontextmanager
async def serve(
    path: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


class Outcome:
    def __init__(self) -> None:
        self.items: list[Any] = []
        self.ended: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def on_next(self, item: Any) -> None:
        self.items.append(item)

    def on_error(self, error: Exception) -> None:
        self.ended.set_result(error)

    def on_completed(self) -> None:
        self.ended.set_result("completed")


@pytest.mark.asyncio
async def test_aclose_after_the_terminal_marker_leaves_a_complete_stream_complete() -> None:
    """What the user does: streams a chat answer; the server sends everything up to and
    including ``data: [DONE]`` but does not end the chunked body at once (common behind
    proxies, and what ``BODY_END_WAIT`` exists for). The app reacts to the ``Finish``
    (the answer is shown, the user quits) and calls ``await client.aclose()``.

    What happens: the observer gets ``on_error(TransportError("client closed ... after 3
    update(s)"))`` instead of ``on_completed``: a response that arrived whole, terminal
    marker included, is reported as failed, and ``collect_agent_response`` / an Agent
    turn waiting on it raises.

    What should happen: ``on_completed``. ``LLMClient.stream`` documents "After the
    provider's terminal marker ([DONE]), the stream completes once the body ends, or
    within 0.1 s if it does not"; the wait is only for connection reuse. ``aclose()``
    says it ends "a running stream"; this one has nothing left to deliver (its decoder
    is ``done``), and RELIABILITY row 2 counts a stream with its terminal marker as
    complete. The same happens when ``asyncio.run`` ends in that window (the
    ``CancelledError`` branch of ``_StreamCall._run``).

    Root cause: ``_StreamCall.abort`` (rafrx/sources/_http.py ~578) always ends with a
    ``TransportError``, also while ``_attempt`` is in ``_finish_body`` after the
    decoder is done.
    """

    async def done_then_hold(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(CHAT_BODY)
        await asyncio.sleep(3)  # the body's end comes late
        return response

    async with serve("/v1/chat/completions", done_then_hold) as url:
        client = OpenAIChatClient(url)
        outcome = Outcome()
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_next(item: Any) -> None:
            outcome.on_next(item)
            if isinstance(item, Finish) and not finished.done():
                finished.set_result(None)

        client.stream(USER).subscribe(on_next, outcome.on_error, outcome.on_completed)
        await asyncio.wait_for(finished, 5)
        await client.aclose()
        result = await asyncio.wait_for(outcome.ended, 5)
    assert [type(item).__name__ for item in outcome.items][-2:] == ["TextDelta", "Finish"]
    assert result == "completed", repr(result)


@pytest.mark.asyncio
async def test_aclose_during_a_retry_backoff_delivers_nothing_of_the_retried_attempt() -> None:
    """What the user does: an ``AnthropicClient`` with a ``RetryPolicy``. The first
    attempt gets ``message_start`` (input_tokens 9) and then an ``overloaded_error``
    event; that is retryable and nothing was delivered, so the call waits to retry.
    Meanwhile the app shuts down: ``await client.aclose()``.

    What happens: the observer receives ``Usage(prompt_tokens=9, ...)`` (from the attempt
    that was given up for a retry) and then ``TransportError("... after 0 update(s)")``.
    The failed attempt's metadata was dropped (``held.clear()``), so the partial has a
    usage with no response id or model, and the error's own message says no update was
    delivered before it.

    What should happen: no update; just the ``TransportError``. ``_attempt`` says so:
    "a failed attempt's [decoder] owes nothing: it was retried", and ``RetryPolicy``:
    "only the attempt that answers is seen". Had the retry gone ahead, that usage would
    never have been delivered; whether the user closes the client during the backoff
    should not change what the failed attempt owes. ``aclose()``: "one waiting to retry
    sends nothing more".

    Root cause: ``_StreamCall._run`` (rafrx/sources/_http.py ~700-714) decides to retry
    but keeps ``self.decoder`` (the failed attempt's) through ``await asyncio.sleep``;
    ``abort`` (and the loop-ending ``CancelledError`` branch) then ``_salvaged`` it.
    Fix: ``self.decoder = None`` when a retry is decided, before the sleep.
    """
    hits: list[int] = []

    async def overloaded(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        return web.Response(body=MESSAGE_START + OVERLOADED, content_type="text/event-stream")

    async with serve("/v1/messages", overloaded) as url:
        client = AnthropicClient(url, "sk-ant-test", retry=RetryPolicy(initial_backoff=30))
        outcome = Outcome()
        client.stream(USER).subscribe(outcome.on_next, outcome.on_error, outcome.on_completed)
        for _ in range(500):  # until the first attempt failed and the call waits to retry
            if hits:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        await client.aclose()
        result = await asyncio.wait_for(outcome.ended, 5)
    assert type(result).__name__ == "TransportError", repr(result)
    assert len(hits) == 1
    assert outcome.items == [], outcome.items


# ------------------------------------------------- a body with no event (a suspicion)


async def _stream_error(body: bytes, chunks: int = 1) -> Exception:
    """What a chat stream ends with when the server answers ``body`` (status 200,
    ``text/event-stream``), sent in ``chunks`` pieces."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        size = -(-len(body) // chunks) or 1
        for start in range(0, len(body), size):
            await response.write(body[start : start + size])
            await asyncio.sleep(0.01)
        return response

    async with serve("/v1/chat/completions", answer) as url:
        client = OpenAIChatClient(url)
        outcome = Outcome()
        client.stream(USER).subscribe(outcome.on_next, outcome.on_error, outcome.on_completed)
        result = await asyncio.wait_for(outcome.ended, 5)
        await client.aclose()
    assert outcome.items == []
    assert isinstance(result, Exception), result
    return result


@pytest.mark.asyncio
@pytest.mark.parametrize("chunks", [1, 7])
async def test_a_json_error_sent_as_an_event_stream_body_is_the_providers_error(
    chunks: int,
) -> None:
    """A server (a proxy, a local one) that answers a streaming request with status 200,
    ``Content-Type: text/event-stream`` and a plain JSON error body, no ``data:`` line.

    Before: ``IncompleteStream("the stream ended without [DONE] or a finish_reason")``,
    and the server's message was lost (its line is no SSE field: the decoder ignores it).
    Now: the provider's error, as the same JSON in an ``event: error`` gives it, with its
    type deciding whether a retry may help, and the body kept.
    """
    body = b'{"error": {"message": "model not loaded", "type": "overloaded_error"}}\n'
    error = await _stream_error(body, chunks)
    assert type(error).__name__ == "ProviderError"
    assert str(error) == "model not loaded"
    assert getattr(error, "error_type", None) == "overloaded_error"
    assert getattr(error, "retryable", None) is True
    assert "model not loaded" in (getattr(error, "body", None) or "")


@pytest.mark.asyncio
async def test_a_body_with_no_event_says_how_it_began() -> None:
    """Any other body with no event (an HTML page labelled an event stream) ends as
    ``IncompleteStream`` quoting its first lines (comments left out), where before it
    said only that the terminal marker never came."""
    error = await _stream_error(b": proxy\n<html><body>502 Bad Gateway</body></html>\n")
    assert type(error).__name__ == "IncompleteStream"
    assert str(error).startswith("the stream ended without [DONE] or a finish_reason; ")
    assert "it began: '<html><body>502 Bad Gateway</body></html>'" in str(error)
    assert ": proxy" not in str(error)


@pytest.mark.asyncio
async def test_a_body_of_keep_alive_comments_only_is_just_incomplete() -> None:
    """Comments only (a server that pinged, then hung up): nothing to quote."""
    error = await _stream_error(b": ping\n\n: ping\n\n")
    assert type(error).__name__ == "IncompleteStream"
    assert str(error) == "the stream ended without [DONE] or a finish_reason"
