"""Transport faults and lifecycle edges of the HTTP clients, for real on 127.0.0.1.

A server that accepts the connection and closes it without answering; an
error status whose body is cut short or stalls; disposing from another
thread, on the very last update, or during a retry's backoff; observers
whose ``on_completed`` / ``on_error`` raise. Raw faults are served by a
small asyncio server written here (no HTTP library on the server side).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from reactivex.abc import DisposableBase

from rafrx import ChatMessage
from rafrx import updates as u
from rafrx.errors import HTTPStatusError, TransportError
from rafrx.sources.clients import RetryPolicy, Timeouts
from rafrx.testing import Fault, LLMServer, Replay, Reply, render
from tests.reliability._support import CLIENTS, expected_partial, run_async

FORMATS = list(CLIENTS)
KEY = "sk-transport-0123456789abcdef"
USER = [ChatMessage.user("Tell me a story.")]

Handler = Callable[["RawServer", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A TCP server on 127.0.0.1 answering each connection with ``handler``.

    Counts connections and complete requests; on exit it releases handlers
    waiting on :attr:`release`, closes every connection and awaits them.
    """

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self.release = asyncio.Event()
        self.connections = 0
        self.requests = 0
        self.closed_by_client = 0
        self.url = ""

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            await self._handler(self, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """One whole HTTP request (head and ``Content-Length`` body)."""
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        body = await reader.readexactly(int(length.group(1))) if length else b""
        self.requests += 1
        return head + body

    async def wait_client_close(self, reader: asyncio.StreamReader) -> None:
        """Wait (until released) for the client to close its end."""
        read = asyncio.ensure_future(reader.read(1))
        release = asyncio.ensure_future(self.release.wait())
        done, pending = await asyncio.wait({read, release}, return_when=asyncio.FIRST_COMPLETED)
        for future in pending:
            future.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if read in done and read.result() == b"":
            self.closed_by_client += 1


def no_key(*texts: object) -> None:
    for text in texts:
        assert KEY not in str(text)


# ---------------------------------------------------------------- no answer at all


async def hang_up(server: RawServer, reader: asyncio.StreamReader, _: Any) -> None:
    """Read the request, then close the connection without a byte of answer."""
    await server.read_request(reader)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_server_that_hangs_up_without_answering(no_task_leak: None, fmt: str) -> None:
    async with RawServer(hang_up) as server:
        # The key also sits in the URL path (some gateways do that) and in the query.
        base = f"{server.url}/{KEY}/v1?key={KEY}"
        async with CLIENTS[fmt](base, KEY) as client:
            got = await run_async(client.stream(USER))
    error = got.error
    assert type(error) is TransportError, repr(error)
    assert error.retryable  # nothing was received: the request may be sent again
    assert error.message.startswith(f"connection to {server.url}/***/v1/")
    assert "failed" in error.message
    assert "disconnected" in error.message.lower()
    assert "key=" not in error.message
    no_key(error, repr(error), vars(error))
    assert got.updates == []
    assert error.partial is not None
    assert error.partial == expected_partial([])
    assert server.requests == 1


@pytest.mark.asyncio
async def test_a_hang_up_before_any_output_is_retried_by_the_policy(no_task_leak: None) -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02, jitter=False)
    async with (
        RawServer(hang_up) as server,
        CLIENTS["anthropic"](server.url, KEY, retry=policy) as client,
    ):
        got = await run_async(client.stream(USER))
    assert type(got.error) is TransportError
    assert server.requests == 3


# ---------------------------------------------------------------- error bodies that break


ERROR_HEAD = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: 500\r\n\r\n"
)
ERROR_START = b'{"error": {"message": "Overloaded, key ' + KEY.encode() + b" is fine"


async def cut_error_body(server: RawServer, reader: asyncio.StreamReader, writer: Any) -> None:
    """A 503 announcing 500 bytes of body, closed after the first few dozen."""
    await server.read_request(reader)
    writer.write(ERROR_HEAD + ERROR_START)
    await writer.drain()


async def stalled_error_body(server: RawServer, reader: asyncio.StreamReader, writer: Any) -> None:
    """A 503 whose body stops coming after the first few dozen bytes."""
    await server.read_request(reader)
    writer.write(ERROR_HEAD + ERROR_START)
    await writer.drain()
    await server.wait_client_close(reader)


@pytest.mark.asyncio
@pytest.mark.parametrize("handler", [cut_error_body, stalled_error_body], ids=["cut", "stalled"])
async def test_an_error_body_that_breaks_still_gives_the_status_error(
    no_task_leak: None, handler: Handler
) -> None:
    async with RawServer(handler) as server:
        timeouts = Timeouts(connect=30, first_byte=30, idle=0.2)
        async with CLIENTS["openai-chat"](server.url, KEY, timeouts=timeouts) as client:
            start = time.monotonic()
            got = await run_async(client.stream(USER))
            elapsed = time.monotonic() - start
            if handler is stalled_error_body:
                # It gave up on the body after the idle timeout and closed the connection
                # (not left it in the pool, half read).
                await asyncio.wait_for(_until(lambda: server.closed_by_client == 1), 5)
    error = got.error
    assert type(error) is HTTPStatusError, repr(error)
    assert (error.status, error.retryable) == (503, True)
    assert error.body == '{"error": {"message": "Overloaded, key *** is fine'  # what came, redacted
    assert error.provider_message is None  # the JSON is cut: no message to read from it
    assert str(error) == "HTTP 503"
    no_key(error, repr(error), vars(error))
    assert error.partial == expected_partial([])
    assert elapsed < 5  # the idle timeout, not the 30 s first-byte one


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.005)


# ---------------------------------------------------------------- dispose


SLOW = Reply(text="word " * 400, chunk_size=5, delay=0.01)  # about 4 s of stream


@contextlib.contextmanager
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a daemon thread, in debug mode: it raises when
    another thread calls its non-thread-safe methods. Stopped and closed on exit
    (bounded waits, so a broken stream cannot hang the suite)."""
    loop = asyncio.new_event_loop()
    loop.set_debug(True)
    thread = threading.Thread(target=loop.run_forever, name="client-loop", daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_disposing_from_another_thread_closes_the_connection(fmt: str) -> None:
    """The stream runs on a loop in a worker thread; the main thread disposes it
    (a GUI or a sync caller would): the dispose must hop onto the loop."""
    received: list[u.AgentResponseUpdate] = []
    terminal: list[Any] = []
    first = threading.Event()

    def on_next(update: u.AgentResponseUpdate) -> None:
        received.append(update)
        if isinstance(update, u.TextDelta):
            first.set()

    with LLMServer.in_thread() as server, loop_in_thread() as loop:
        server.enqueue(SLOW)
        client = CLIENTS[fmt](server.url, KEY)

        async def subscribe() -> DisposableBase:
            return client.stream(USER).subscribe(
                on_next, terminal.append, lambda: terminal.append("completed")
            )

        try:
            subscription = asyncio.run_coroutine_threadsafe(subscribe(), loop).result(5)
            assert first.wait(5)
            subscription.dispose()  # from the main thread
            deadline = time.monotonic() + 5
            while server.open_connections and time.monotonic() < deadline:
                time.sleep(0.005)
            assert server.open_connections == 0  # closed, promptly
            count = len(received)
            time.sleep(0.05)
            assert len(received) == count  # nothing after the dispose took effect
            subscription.dispose()  # twice: a no-op
        finally:
            asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(5)
    assert terminal == []
    assert "".join(x.delta for x in received if isinstance(x, u.TextDelta)).startswith("word ")


def _without_done(fmt: str) -> bytes:
    """A chat body with a finish reason but no ``[DONE]``: its ``Finish`` comes at EOF."""
    body = render(Reply(text="All done."), fmt)
    return body[: body.rindex(b"data: [DONE]")]


@pytest.mark.asyncio
async def test_disposing_on_the_update_delivered_at_end_of_input(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    llm_server.enqueue(Replay(_without_done("openai-chat")))
    received: list[u.AgentResponseUpdate] = []
    terminal: list[Any] = []
    subscription: list[DisposableBase] = []
    finished = asyncio.Event()

    def on_next(update: u.AgentResponseUpdate) -> None:
        received.append(update)
        if isinstance(update, u.Finish):
            subscription[0].dispose()
            finished.set()

    async with CLIENTS["openai-chat"](llm_server.url, KEY) as client:
        subscription.append(
            client.stream(USER).subscribe(
                on_next, terminal.append, lambda: terminal.append("completed")
            )
        )
        await asyncio.wait_for(finished.wait(), 5)
        await asyncio.sleep(0.05)
    assert isinstance(received[-1], u.Finish)
    assert "".join(x.delta for x in received if isinstance(x, u.TextDelta)) == "All done."
    assert terminal == []  # disposed: neither completion nor error
    assert loop_errors == []
    await llm_server.wait_connections_closed(timeout=5.0)


@pytest.mark.asyncio
async def test_disposing_during_the_retry_backoff_sends_no_second_request(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Fault.status(503, message="busy"), Reply(text="never"))
    policy = RetryPolicy(initial_backoff=30, jitter=False)  # a long wait, cut by the dispose
    terminal: list[Any] = []
    async with CLIENTS["openai-responses"](llm_server.url, KEY, retry=policy) as client:
        subscription = client.stream(USER).subscribe(
            terminal.append, terminal.append, lambda: terminal.append("completed")
        )
        await llm_server.wait_requests(1)
        await asyncio.sleep(0.1)  # the 503 is read: the call now waits out its backoff
        start = time.monotonic()
        subscription.dispose()
        await asyncio.sleep(0.1)
    assert time.monotonic() - start < 5  # not the 30 s backoff
    assert terminal == []
    assert len(llm_server.requests) == 1
    assert llm_server.queued == 1
    # the llm_server fixture then checks that the waiting task was cancelled, not left running


# ---------------------------------------------------------------- observers that raise


@pytest.mark.asyncio
async def test_an_on_completed_that_raises_is_reported_to_the_loop(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    bug = RuntimeError("on_completed bug")
    received: list[u.AgentResponseUpdate] = []
    called = asyncio.Event()

    def on_completed() -> None:
        called.set()
        raise bug

    async with CLIENTS["anthropic"](llm_server.url, KEY) as client:
        client.stream(USER).subscribe(received.append, on_completed=on_completed)
        await asyncio.wait_for(called.wait(), 5)
        await asyncio.sleep(0.01)
    assert isinstance(received[-1], u.Finish)
    assert len(loop_errors) == 1
    assert loop_errors[0]["exception"] is bug
    assert loop_errors[0]["message"] == "a rafrx stream observer raised"


@pytest.mark.asyncio
async def test_an_on_error_that_raises_is_reported_to_the_loop(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    llm_server.enqueue(Fault.status(500, message=f"internal, key {KEY}"))
    bug = RuntimeError("on_error bug")
    errors: list[Exception] = []
    called = asyncio.Event()

    def on_error(error: Exception) -> None:
        errors.append(error)
        called.set()
        raise bug

    async with CLIENTS["openai-chat"](llm_server.url, KEY) as client:
        client.stream(USER).subscribe(on_error=on_error)
        await asyncio.wait_for(called.wait(), 5)
        await asyncio.sleep(0.01)
    assert len(errors) == 1
    assert isinstance(errors[0], HTTPStatusError)
    assert errors[0].provider_message == "internal, key ***"
    assert len(loop_errors) == 1
    assert loop_errors[0]["exception"] is bug
    no_key(loop_errors[0])
    await llm_server.wait_connections_closed(timeout=5.0)
