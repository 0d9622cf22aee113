"""``IdleTimer``: an idle timeout that costs a clock read per chunk, not a timer.

The obvious idle timeout re-arms a timer around every read (asyncio's
``Timeout.reschedule`` before the read and again after it): each re-arm
cancels one ``TimerHandle`` and pushes a new one on the event loop's heap,
about 3 µs per read with a thousand streams open, paid on every chunk of
every stream. :class:`IdleTimer` keeps one timer per stream instead: a read
only notes the time it started waiting (:meth:`IdleTimer.waiting`), and when
the timer fires it re-arms itself for the newest deadline, or expires if the
stream really has been silent that long. The timeout is exactly as strict;
the timer fires at most once per ``idle`` seconds of streaming.

Example:
    >>> import asyncio
    >>> async def silent_server() -> str:
    ...     loop = asyncio.get_running_loop()
    ...     try:
    ...         async with asyncio.timeout(None) as deadline:
    ...             timer = IdleTimer(loop, 0.01, deadline)
    ...             try:
    ...                 for _ in range(3):
    ...                     timer.waiting()
    ...                     await asyncio.sleep(0.005)  # a chunk arrives in time
    ...                 timer.waiting()
    ...                 await asyncio.sleep(1)  # then nothing
    ...             finally:
    ...                 timer.cancel()
    ...     except TimeoutError:
    ...         return "idle"
    ...     return "done"
    >>> asyncio.run(silent_server())
    'idle'
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["IdleTimer"]


class Counted(Protocol):
    """What :class:`IdleTimer` reads of a body: the bytes that came so far (read or not)."""

    @property
    def total_bytes(self) -> int: ...


class _NoCount:
    total_bytes = 0


_NO_COUNT = _NoCount()


class IdleTimer:
    """Expire ``deadline`` once ``idle`` seconds pass in one wait for data.

    Call :meth:`waiting` just before each wait (the await that reads the next
    chunk) and :meth:`cancel` when the reading ends. Time between a chunk's
    arrival and the next :meth:`waiting` (decoding it, running subscribers)
    does not count: that code runs without yielding to the loop, so the
    timer cannot fire during it, and :meth:`waiting` then starts the count
    afresh.

    Args:
        loop: The running event loop.
        idle: Seconds of silence allowed; ``None``: no limit (the timer
            then does nothing).
        deadline: The :func:`asyncio.timeout` around the reads; on expiry it
            is rescheduled to now, so it cancels the waiting task and raises
            ``TimeoutError`` out of its ``async with``, with asyncio's own
            handling of cancellation.
        body: The stream read (an :class:`aiohttp.StreamReader`), whose
            ``total_bytes`` counts the bytes that came in, read or not. When
            the event loop was busy elsewhere (another task's long synchronous
            work), the timer may fire before the waiting task saw the bytes
            that came meanwhile: bytes that came since the wait began mean
            the stream is not silent, and the timer waits on.
    """

    __slots__ = ("_body", "_count", "_deadline", "_handle", "_idle", "_loop", "_since")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        idle: float | None,
        deadline: asyncio.Timeout,
        body: Counted | None = None,
    ) -> None:
        self._loop = loop
        self._idle = 0.0 if idle is None else idle
        self._deadline = deadline
        self._body: Counted = _NO_COUNT if body is None else body
        self._count = self._body.total_bytes
        self._since = loop.time()
        self._handle: asyncio.TimerHandle | None = None
        if idle is not None:
            self._handle = loop.call_at(self._since + idle, self._check)

    def waiting(self) -> None:
        """A wait for the next chunk starts now."""
        self._since = self._loop.time()
        self._count = self._body.total_bytes

    def cancel(self) -> None:
        """Stop the timer (the reading ended); idempotent."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        now = self._loop.time()
        if self._body.total_bytes != self._count:  # bytes came, not read yet: the loop was busy
            self._since = now
            self._count = self._body.total_bytes
        due = self._since + self._idle
        if now < due:  # data came since this timer was set
            self._handle = self._loop.call_at(due, self._check)
        else:
            self._handle = None
            self._deadline.reschedule(now)
