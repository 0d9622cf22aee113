"""What an idle timeout costs per chunk read: re-armed per read, or rafrx's ``IdleTimer``.

Usage::

    python -m bench.idle_timer                        # 1000 readers, 200 chunks each
    python -m bench.idle_timer --readers 100 --repeat 7

A live LLM stream arrives one event per socket read, so whatever a client
does per read is paid per chunk. rafrx's HTTP source guards every read with
an idle timeout (``Timeouts.idle``). This measures, on one event loop with
``--readers`` concurrent readers, each reading ``--chunks`` chunks from its
own stream (a future per read, as a socket stream reader has; a feeder gives
every reader one chunk per loop iteration, so every read waits, as on a live
stream), the loop's time per chunk read:

* ``none``: no timeout, the floor;
* ``reschedule``: ``asyncio.timeout`` re-armed before each read and cleared
  after it (``Timeout.reschedule``), the usual way: two timer handles per
  read, one pushed on the loop's heap and cancelled;
* ``IdleTimer``: what rafrx does (``rafrx/sources/_idle.py``): one timer per
  stream, re-armed only when it fires; a read notes the clock and the
  stream's byte count.

Best of ``--repeat`` runs; the last column is the cost over ``none``.

Example:
    >>> rows = measure(readers=4, chunks=10, repeat=1)
    >>> [name for name, _ in rows]
    ['none', 'reschedule', 'IdleTimer']
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from rafrx.sources._idle import IdleTimer

__all__ = ["measure"]

_IDLE = 60.0
_CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":" token"}}]}\n\n'

Reader = Callable[[asyncio.AbstractEventLoop, "_Stream"], Coroutine[Any, Any, int]]


async def _none(loop: asyncio.AbstractEventLoop, chunks: _Stream) -> int:
    n = 0
    while True:
        try:
            await chunks.__anext__()
        except StopAsyncIteration:
            return n
        n += 1


async def _reschedule(loop: asyncio.AbstractEventLoop, chunks: _Stream) -> int:
    n = 0
    async with asyncio.timeout(None) as deadline:
        while True:
            deadline.reschedule(loop.time() + _IDLE)
            try:
                await chunks.__anext__()
            except StopAsyncIteration:
                return n
            deadline.reschedule(None)
            n += 1


async def _idle_timer(loop: asyncio.AbstractEventLoop, chunks: _Stream) -> int:
    n = 0
    async with asyncio.timeout(None) as deadline:
        timer = IdleTimer(loop, _IDLE, deadline, chunks)  # (counting its bytes, as aiohttp's)
        try:
            while True:
                timer.waiting()
                try:
                    await chunks.__anext__()
                except StopAsyncIteration:
                    return n
                n += 1
        finally:
            timer.cancel()


class _Stream:
    """An async iterator of chunks, each read waiting on a future until fed; it
    counts the bytes fed, as an aiohttp ``StreamReader`` does (``total_bytes``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.total_bytes = 0
        self._chunks: list[bytes | None] = []
        self._waiter: asyncio.Future[None] | None = None

    def feed(self, chunk: bytes | None) -> None:
        """Deliver a chunk (``None``: the end)."""
        self._chunks.append(chunk)
        self.total_bytes += 0 if chunk is None else len(chunk)
        if self._waiter is not None:
            self._waiter.set_result(None)
            self._waiter = None

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        if not self._chunks:
            self._waiter = self._loop.create_future()
            await self._waiter
        chunk = self._chunks.pop(0)
        if chunk is None:
            raise StopAsyncIteration
        return chunk


READERS: dict[str, Reader] = {"none": _none, "reschedule": _reschedule, "IdleTimer": _idle_timer}


async def _run(reader: Reader, readers: int, chunks: int) -> float:
    loop = asyncio.get_running_loop()
    streams = [_Stream(loop) for _ in range(readers)]
    tasks = [loop.create_task(reader(loop, stream)) for stream in streams]
    await asyncio.sleep(0)  # every reader now waits for its first chunk
    start = time.perf_counter()
    for _ in range(chunks):
        for stream in streams:
            stream.feed(_CHUNK)
        await asyncio.sleep(0)  # the readers take their chunk, then wait again
    for stream in streams:
        stream.feed(None)
    counts = await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    assert counts == [chunks] * readers, "a reader missed chunks"
    return elapsed / (readers * chunks)


def measure(readers: int = 1000, chunks: int = 200, repeat: int = 5) -> list[tuple[str, float]]:
    """``(reader, best seconds per chunk)`` for each way of guarding reads."""
    best = {name: float("inf") for name in READERS}
    for _ in range(repeat):  # interleaved, so background load hits all alike
        for name, reader in READERS.items():
            best[name] = min(best[name], asyncio.run(_run(reader, readers, chunks)))
    return list(best.items())


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rows = measure(args.readers, args.chunks, args.repeat)
    floor = rows[0][1]
    print(f"{args.readers} readers x {args.chunks} chunks, best of {args.repeat}\n")
    print("| idle timeout | µs per chunk read | over none |")
    print("| --- | --- | --- |")
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1e6:.2f} | {(seconds - floor) * 1e6:+.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
