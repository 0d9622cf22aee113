"""``IdleTimer``: one timer per stream, exactly as strict as a timer re-armed per read.

The HTTP source's own idle-timeout behaviour is tested over real HTTP in
``test_http_faults.py`` and ``tests/reliability/test_faults.py``; these pin
the timer's rules on a bare event loop.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rafrx.sources._idle import IdleTimer

IDLE = 0.2  # generous: a loaded CI machine may delay the loop by tens of ms


async def _read(arrivals: list[float], idle: float = IDLE, work: float = 0.0) -> int:
    """Wait for chunks arriving after ``arrivals`` seconds each (blocking ``work`` after each).

    Returns how many arrived before the idle timeout, or raises ``TimeoutError``.
    """
    loop = asyncio.get_running_loop()
    got = 0
    async with asyncio.timeout(None) as deadline:
        timer = IdleTimer(loop, idle, deadline)
        try:
            for gap in arrivals:
                timer.waiting()
                await asyncio.sleep(gap)  # the next chunk
                got += 1
                time.sleep(work)  # decoding it and running subscribers: no await
        finally:
            timer.cancel()
    return got


@pytest.mark.asyncio
async def test_silence_longer_than_idle_expires() -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await _read([0.01, 0.01, 10.0])
    assert IDLE <= time.monotonic() - start < 2


@pytest.mark.asyncio
async def test_chunks_within_idle_never_expire_however_long_the_stream() -> None:
    # 10 gaps of a quarter of the idle time: the stream lasts 2.5 idle periods,
    # so the timer fires twice and must re-arm itself each time.
    assert await _read([IDLE / 4] * 10) == 10


@pytest.mark.asyncio
async def test_time_spent_handling_a_chunk_does_not_count_as_silence() -> None:
    # Each chunk takes longer than the idle time to handle (blocking), but the
    # next one arrives soon after the read starts waiting again.
    assert await _read([0.01] * 3, work=IDLE * 1.5) == 3


@pytest.mark.asyncio
async def test_the_timeout_counts_from_the_last_wait_not_the_first() -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await _read([IDLE / 2, IDLE / 2, IDLE / 2, 10.0])
    # The silence started after three half-idle gaps: it expires one idle later.
    assert time.monotonic() - start >= 2.5 * IDLE


@pytest.mark.asyncio
async def test_cancel_stops_the_timer() -> None:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(None) as deadline:
        timer = IdleTimer(loop, 0.02, deadline)
        timer.cancel()
        timer.cancel()  # idempotent
        await asyncio.sleep(0.1)  # five idle periods, no timeout
    assert deadline.when() is None


@pytest.mark.asyncio
async def test_an_outside_cancellation_stays_a_cancellation() -> None:
    task = asyncio.ensure_future(_read([10.0], idle=5.0))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # and the timer did not outlive the read
    assert not [h for h in asyncio.get_running_loop()._scheduled if not h.cancelled()]  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_no_idle_limit_sets_no_timer() -> None:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(None) as deadline:
        timer = IdleTimer(loop, None, deadline)
        timer.waiting()
        await asyncio.sleep(0.05)
        assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        timer.cancel()
    assert deadline.when() is None


class _Body:
    """What the timer reads of an aiohttp body: the bytes that came so far."""

    def __init__(self) -> None:
        self.total_bytes = 0


@contextmanager
def _socket_body(
    loop: asyncio.AbstractEventLoop,
) -> Iterator[tuple[socket.socket, _Body, asyncio.Queue[bytes]]]:
    """A real socket read as aiohttp does: the loop's reader callback counts the
    bytes and hands them to the waiting task. Yields the server's end, the count
    and the queue of what came."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    body = _Body()
    came: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        data = ours.recv(4096)
        body.total_bytes += len(data)
        came.put_nowait(data)

    loop.add_reader(ours.fileno(), readable)
    try:
        yield theirs, body, came
    finally:
        loop.remove_reader(ours.fileno())
        ours.close()
        theirs.close()


async def _read_until_end(body: _Body, came: asyncio.Queue[bytes]) -> bytes:
    loop = asyncio.get_running_loop()
    got = b""
    async with asyncio.timeout(None) as deadline:
        timer = IdleTimer(loop, IDLE, deadline, body)
        try:
            while not got.endswith(b"end"):
                timer.waiting()
                got += await came.get()
        finally:
            timer.cancel()
    return got


@pytest.mark.asyncio
async def test_bytes_that_came_while_the_loop_was_busy_are_not_silence() -> None:
    """Another callback holds the loop longer than the idle time while the server
    keeps sending: after it, the loop reads the socket, then runs the due timer,
    before the waiting task sees the bytes. The timer counts them: no timeout."""
    loop = asyncio.get_running_loop()
    with _socket_body(loop) as (server, body, came):

        def busy() -> None:  # (a notebook's other pane rendering, synchronously)
            server.send(b"x")
            time.sleep(IDLE * 2)
            loop.call_later(IDLE / 4, server.send, b"end")

        loop.call_later(IDLE / 2, busy)
        assert await _read_until_end(body, came) == b"xend"


@pytest.mark.asyncio
async def test_bytes_already_read_do_not_hold_off_a_real_silence() -> None:
    loop = asyncio.get_running_loop()
    with _socket_body(loop) as (server, body, came):
        for at in (0.01, IDLE / 2, IDLE):
            loop.call_later(at, server.send, b"x")
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await _read_until_end(body, came)
    assert body.total_bytes == 3
    assert IDLE * 2 <= time.monotonic() - start < 5
