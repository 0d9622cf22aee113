"""``from_sse`` over an async iterable when the subscriber misbehaves.

A subscriber that disposes in the middle of a chunk gets nothing more; one
that disposes and then raises, or whose ``on_completed`` / ``on_error``
raises, has its exception handed to the event loop's exception handler
(there is no observer left to tell), and the reading task still ends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from reactivex import operators as rx
from reactivex.abc import DisposableBase

from rafrx import updates as u
from rafrx.errors import IncompleteStream
from rafrx.operators import aggregate, convert
from rafrx.sources import from_sse


def chat(content: str) -> bytes:
    data = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return f"data: {json.dumps(data)}\n\n".encode()


STOP = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
DONE = STOP + b"data: [DONE]\n\n"
THREE = chat("one ") + chat("two ") + chat("three")  # one chunk, three updates


async def body(pieces: list[bytes], log: list[str]) -> AsyncIterator[bytes]:
    """Yields ``pieces`` (after a loop round each), logging what it does."""
    try:
        for piece in pieces:
            await asyncio.sleep(0)
            log.append("yield")
            yield piece
    finally:
        log.append("finally")


def reader_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "rafrx.from_sse"]


async def until_readers_done() -> None:
    async with asyncio.timeout(5):
        while not all(t.done() for t in reader_tasks()):
            await asyncio.sleep(0.001)


@pytest.mark.asyncio
async def test_disposing_inside_on_next_drops_the_rest_of_the_chunk(
    no_task_leak: None, loop_errors: list[dict[str, Any]]
) -> None:
    log: list[str] = []
    items: list[Any] = []
    terminal: list[Any] = []
    subscription: list[DisposableBase] = []

    def on_next(update: Any) -> None:
        items.append(update)
        subscription[0].dispose()

    subscription.append(
        from_sse(body([THREE, DONE], log)).subscribe(
            on_next, terminal.append, lambda: terminal.append("completed")
        )
    )
    await until_readers_done()
    assert items == [u.TextDelta("one ")]
    assert terminal == []
    assert log == ["yield", "finally"]  # the second piece was never read; the body was closed
    assert loop_errors == []


@pytest.mark.asyncio
async def test_a_subscriber_that_disposes_then_raises_is_reported_to_the_loop(
    no_task_leak: None, loop_errors: list[dict[str, Any]]
) -> None:
    log: list[str] = []
    terminal: list[Any] = []
    subscription: list[DisposableBase] = []
    bug = ValueError("subscriber bug after dispose")

    def on_next(update: Any) -> None:
        subscription[0].dispose()
        raise bug

    subscription.append(
        from_sse(body([THREE, DONE], log)).subscribe(
            on_next, terminal.append, lambda: terminal.append("completed")
        )
    )
    await until_readers_done()
    assert terminal == []  # the observer was disposed: nothing goes to it
    assert len(loop_errors) == 1
    assert loop_errors[0]["exception"] is bug
    assert "after disposal" in loop_errors[0]["message"]
    assert "finally" in log


@pytest.mark.asyncio
async def test_an_on_completed_that_raises_is_reported_to_the_loop(
    no_task_leak: None, loop_errors: list[dict[str, Any]]
) -> None:
    bug = RuntimeError("on_completed bug")
    items: list[Any] = []

    def on_completed() -> None:
        raise bug

    from_sse(body([THREE, DONE], [])).subscribe(items.append, on_completed=on_completed)
    await until_readers_done()
    assert [x for x in items if isinstance(x, u.TextDelta)] == [
        u.TextDelta("one "),
        u.TextDelta("two "),
        u.TextDelta("three"),
    ]
    assert len(loop_errors) == 1
    assert loop_errors[0]["exception"] is bug
    assert loop_errors[0]["message"] == "rafrx.from_sse: an observer raised"


@pytest.mark.asyncio
async def test_an_on_error_that_raises_is_reported_to_the_loop(
    no_task_leak: None, loop_errors: list[dict[str, Any]]
) -> None:
    received: list[Exception] = []
    bug = RuntimeError("on_error bug")

    def on_error(error: Exception) -> None:
        received.append(error)
        raise bug

    from_sse(body([THREE], [])).subscribe(on_error=on_error)  # no terminal marker
    await until_readers_done()
    assert len(received) == 1
    assert isinstance(received[0], IncompleteStream)
    assert len(loop_errors) == 1
    assert loop_errors[0]["exception"] is bug
    assert loop_errors[0]["message"] == "rafrx.from_sse: an observer raised"


def test_disposing_after_the_loop_has_ended_is_a_no_op() -> None:
    """``asyncio.run`` cancels the reader and closes the loop; a later dispose
    (from code that outlived the loop) must not touch the closed loop."""
    log: list[str] = []
    items: list[Any] = []

    async def stalls() -> AsyncIterator[bytes]:
        try:
            yield chat("one ")
            await asyncio.Event().wait()  # the server goes silent
            yield DONE
        finally:
            log.append("finally")

    async def main() -> DisposableBase:
        subscription = from_sse(stalls()).subscribe(items.append)
        async with asyncio.timeout(5):
            while not items:
                await asyncio.sleep(0.001)
        return subscription  # still reading when the loop ends

    subscription = asyncio.run(main())
    assert items == [u.TextDelta("one ")]
    assert log == ["finally"]  # asyncio.run cancelled the reader; the body closed
    subscription.dispose()
    subscription.dispose()


def long_text(read: list[int]) -> Any:
    """An SSE body of 100,000 events (a generator), counting the chunks read."""
    for _ in range(100_000):
        read[0] += 1
        yield b'data: {"choices":[{"index":0,"delta":{"content":"ab"}}]}\n\n'
    yield b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


@pytest.mark.parametrize("converted", [False, True], ids=["updates", "convert()"])
def test_take_stops_reading_a_sync_body(converted: bool) -> None:
    """A sync body is read as Rx reads an iterable: once the subscription is
    set up, so a subscriber that has enough (``take``) stops the reading and
    the body is closed."""
    read = [0]
    body = long_text(read)
    source = from_sse(body, "openai-chat")
    if converted:
        source = source.pipe(convert())
    seen: list[Any] = []
    done: list[bool] = []
    source.pipe(rx.take(3)).subscribe(seen.append, on_completed=lambda: done.append(True))
    assert len(seen) == 3
    assert done == [True]
    assert read[0] <= 4
    assert body.gi_frame is None  # closed


def test_a_sync_body_subscribed_directly_is_read_at_once() -> None:
    """Outside Rx's subscribe (no trampoline running), everything is emitted
    during the call, as before."""
    read = [0]
    out = from_sse(long_text(read), "openai-chat").pipe(convert(), aggregate()).run()
    assert read[0] == 100_000
    assert out.text == "ab" * 100_000
