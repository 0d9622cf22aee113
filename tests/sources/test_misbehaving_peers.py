"""Misbehaving peers and subscribers at the transport: typed errors, nothing lost.

A peer that does not speak HTTP or redirects gives a ``RafrxError`` without
secrets; a subscriber that disposes (and raises) from ``on_next`` or from
another thread stops the stream cleanly, with its exception reported to the
loop; a ``Retry-After`` of ``nan`` counts as absent.
(Each of these once failed: found by covering the sources layer's branches.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web
from reactivex.abc import DisposableBase

from rafrx import ChatMessage, collect_agent_response, convert
from rafrx import updates as u
from rafrx.errors import HTTPStatusError, RafrxError
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import Fault, LLMServer, Reply

KEY = "sk-bug-SECRET-51d0"
USER = [ChatMessage.user("Hello?")]


async def call_error(base_url: str) -> BaseException:
    async with OpenAIChatClient(base_url, KEY) as client:
        with pytest.raises(Exception) as info:  # noqa: PT011 - the type is what is checked
            await collect_agent_response(client.stream(USER).pipe(convert()))
    return info.value


def assert_typed_and_secret_free(error: BaseException) -> None:
    assert isinstance(error, RafrxError), f"not a RafrxError: {type(error).__module__}.{error!r}"
    assert error.partial is not None
    for text in (str(error), repr(error), repr(vars(error))):
        assert KEY not in text


# ---------------------------------------------------------------- raw aiohttp errors


@pytest.mark.asyncio
async def test_a_server_that_does_not_answer_http_gives_a_typed_error_without_the_key(
    no_task_leak: None,
) -> None:
    """A peer that answers the POST with bytes that are not HTTP (another protocol on
    the port, a broken proxy): a ``RafrxError`` naming the safe URL, not aiohttp's
    ``ClientResponseError``, whose repr holds the headers and the key."""

    async def not_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    server = await asyncio.start_server(not_http, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        error = await call_error(f"http://127.0.0.1:{port}/v1?key={KEY}")
    assert_typed_and_secret_free(error)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("target", "shown"),
    [
        ("loop", "http://127.0.0.1:{port}/v1/chat/completions"),
        (f"ftp://127.0.0.1/v1?key={KEY}", "ftp://127.0.0.1/v1?key=***"),
        ("/v2/chat/completions", "http://127.0.0.1:{port}/v2/chat/completions"),
    ],
    ids=["redirect-loop", "redirect-to-ftp", "same-origin"],
)
async def test_a_redirect_is_not_followed_and_names_its_masked_target(
    no_task_leak: None, target: str, shown: str
) -> None:
    """A proxy answering with a 307 to itself (forever, if followed), to a URL that is
    not HTTP (``ftp://…?key=<key>``) or to another path: redirects are not followed
    (the key headers would go along), so one request is sent and the error, a
    non-retryable ``HTTPStatusError``, names the target with its key masked, so
    that the user can fix ``base_url``."""
    requests: list[str] = []

    async def redirect(request: web.Request) -> web.Response:
        requests.append(request.path)
        raise web.HTTPTemporaryRedirect(str(request.url) if target == "loop" else target)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        error = await call_error(f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()
    assert_typed_and_secret_free(error)
    assert isinstance(error, HTTPStatusError)
    assert (error.status, error.retryable) == (307, False)
    assert f"redirects to {shown.format(port=port)};" in error.message
    assert requests == ["/v1/chat/completions"]


# ---------------------------------------------------------------- subscriber errors lost


@pytest.mark.asyncio
async def test_client_stream_reports_a_subscriber_error_raised_after_it_disposed(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    """``on_next`` disposes its own subscription, then raises (a bug in user code): the
    exception reaches the loop's exception handler (RELIABILITY.md #15), as it does
    with ``from_sse``, instead of vanishing."""
    llm_server.enqueue(Reply(text="word " * 50, chunk_size=5))
    bug = ValueError("subscriber bug after dispose")
    subscription: list[DisposableBase] = []
    raised = asyncio.Event()

    def on_next(update: u.AgentResponseUpdate) -> None:
        if isinstance(update, u.TextDelta):
            subscription[0].dispose()
            raised.set()
            raise bug

    async with OpenAIChatClient(llm_server.url, KEY) as client:
        subscription.append(client.stream(USER).subscribe(on_next))
        await asyncio.wait_for(raised.wait(), 5)
        await llm_server.wait_connections_closed(timeout=5.0)
        await asyncio.sleep(0.05)
    assert [c.get("exception") for c in loop_errors] == [bug]


def _chat(content: str) -> bytes:
    data = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return f"data: {json.dumps(data)}\n\n".encode()


@pytest.mark.asyncio
@pytest.mark.parametrize("raises", [False, True], ids=["dispose", "dispose-then-raise"])
async def test_from_sse_dispose_inside_on_next_lets_the_body_clean_up(
    no_task_leak: None, loop_errors: list[dict[str, Any]], raises: bool
) -> None:
    """``on_next`` disposes (``take(n)`` does exactly that), and the async body's
    cleanup awaits something (closing a file or a response, say): the body closes
    completely (the reading task is not cancelled under its own feet), and an
    exception raised after the dispose reaches the loop's exception handler."""
    log: list[str] = []
    bug = ValueError("subscriber bug after dispose")

    async def body() -> AsyncIterator[bytes]:
        try:
            yield _chat("one ") + _chat("two ")
            yield b"data: [DONE]\n\n"
        finally:
            log.append("finally")
            await asyncio.sleep(0)  # e.g. await response.wait_for_close()
            log.append("cleaned up")

    subscription: list[DisposableBase] = []

    def on_next(update: u.AgentResponseUpdate) -> None:
        subscription[0].dispose()
        if raises:
            raise bug

    subscription.append(from_sse(body()).subscribe(on_next))
    for _ in range(20):
        await asyncio.sleep(0)
    assert log == ["finally", "cleaned up"]
    if raises:
        assert [c.get("exception") for c in loop_errors] == [bug]


@contextlib.contextmanager
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a daemon thread; on exit its tasks are cancelled,
    then it is stopped and closed (bounded waits)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="reader-loop", daemon=True)
    thread.start()

    async def cancel_all() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await loop.shutdown_asyncgens()

    try:
        yield loop
    finally:
        asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()


def test_from_sse_dispose_from_another_thread_takes_effect() -> None:
    """``from_sse`` reads on a loop in a worker thread; the body goes silent; the
    main thread disposes (the HTTP clients support exactly this): the dispose hops
    onto the loop (a ``task.cancel()`` from another thread would not wake it) and
    the body's ``finally`` runs at once."""
    first = threading.Event()
    closed = threading.Event()
    terminal: list[Any] = []

    async def stalls() -> AsyncIterator[bytes]:
        try:
            yield _chat("one ")
            await asyncio.Event().wait()  # the server goes silent
            yield b"data: [DONE]\n\n"
        finally:
            closed.set()

    async def subscribe() -> DisposableBase:
        return from_sse(stalls()).subscribe(
            lambda update: first.set(), terminal.append, lambda: terminal.append("completed")
        )

    with loop_in_thread() as loop:
        subscription = asyncio.run_coroutine_threadsafe(subscribe(), loop).result(5)
        assert first.wait(5)
        subscription.dispose()  # from the main thread
        assert closed.wait(3), "the dispose never reached the reader"
    assert terminal == []


# ---------------------------------------------------------------- Retry-After: nan


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "nan"}, None),
        ({"retry-after-ms": "NaN", "Retry-After": "5"}, 5.0),
    ],
    ids=["retry-after", "retry-after-ms"],
)
async def test_a_nan_retry_after_is_not_read_as_zero(
    llm_server: LLMServer, headers: dict[str, str], expected: float | None
) -> None:
    """``Retry-After`` is delay-seconds or an HTTP date; ``float()`` also reads "nan",
    which would become a wait of 0 s (retrying at once) and shadow a valid header:
    NaN counts as absent (``inf``, by contrast, is a wait longer than any cap)."""
    llm_server.enqueue(Fault.status(429, headers=headers))
    async with OpenAIChatClient(llm_server.url) as client:
        with pytest.raises(HTTPStatusError) as info:
            await collect_agent_response(client.stream(USER).pipe(convert()))
    assert info.value.retry_after == expected
