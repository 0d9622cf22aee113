"""Raising errors without reference cycles, so that a failed stream is freed at once.

A raised exception's traceback holds every frame it passed through, and each
frame its locals. When one of those locals leads back to the exception (an
object keeping it to raise again, a future holding it, the variable it was
raised from), the failure makes a cycle: only the cycle collector frees it,
which may be much later, so a client dropped after an error would close its
connections late ("Unclosed client session"). The helpers here keep frames
and errors apart:

* :func:`without_frames` strips a ``CancelledError`` a task keeps;
* :func:`detached` copies an error an object keeps, to raise the copy;
* :class:`Outcome` is a future for one result or error whose ``wait()``
  raises the error without the awaiting frame keeping it.

Example:
    >>> from rafrx.errors import MalformedEvent
    >>> kept = MalformedEvent("bad event", raw="{")
    >>> copy = detached(kept)
    >>> copy is not kept, type(copy), copy.raw, copy.__traceback__
    (True, <class 'rafrx.errors.MalformedEvent'>, '{', None)
"""

from __future__ import annotations

import asyncio
import copy
import dis
import inspect
import sys
import threading
import traceback
from types import FrameType, TracebackType
from typing import Generic, TypeVar

from rafrx._call import call_on

__all__ = ["Outcome", "detached", "let_go", "without_frames"]

E = TypeVar("E", bound=BaseException)
T = TypeVar("T")


def without_frames(error: E) -> E:
    """``error`` with no traceback and no context, to re-raise from a task that keeps it.

    A task keeps the ``CancelledError`` it ends with; with its traceback, the
    error holds the task's frames and what they hold (a call, its runner, the
    client), which lead back to the task. Raise it ``from None``.
    """
    error.__context__ = None
    return error.with_traceback(None)


def let_go(error: E) -> E:
    """``error``, for a user to keep, no longer holding what its frames held.

    Its traceback (and its causes' and contexts') still says where it was
    raised, but the frames it went through are cleared of their locals (a
    response, the last chunk of a body, a conversation), and the frames still
    running (where it was caught, and their callers) leave the traceback,
    whose locals could not be cleared. A frame left still links to its
    caller, though, when that caller called it directly, or awaited it on
    Python 3.12 and later; the caller is running, so its locals would stay
    with the error once it ends. And a frame may be a suspended coroutine's
    (one that caught the error and went on to await something else), which
    clearing would close. Such a traceback is kept as text instead, in a note
    (:func:`traceback.print_exception` shows it).

    Example:
        >>> async def fail(big: bytes) -> None:
        ...     raise ValueError("no")
        >>> async def call() -> ValueError:
        ...     try:
        ...         await fail(b"x" * 10**6)
        ...     except ValueError as caught:
        ...         return let_go(caught)
        >>> error = asyncio.run(call())
        >>> error.__traceback__ is None or error.__traceback__.tb_frame.f_locals == {}
        True
        >>> "in fail" in "".join(traceback.format_exception(error))
        True
    """
    running: set[FrameType] = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        running.add(frame)
        frame = frame.f_back
    chain: list[BaseException | None] = [error]
    seen: set[int] = set()
    while chain:
        each = chain.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        tb = each.__traceback__
        while tb is not None and tb.tb_frame in running:
            tb = tb.tb_next
        if tb is not None:
            paused = any(_may_be_paused(frame) for frame in _frames(tb))
            if not paused:  # (clearing a suspended coroutine's frame would close it)
                traceback.clear_frames(tb)
            if paused or tb.tb_frame.f_back in running:
                each.add_note(_KEPT_AS_TEXT + "".join(traceback.format_tb(tb)).rstrip())
                tb = None
        each.__traceback__ = tb
        chain += [each.__cause__, each.__context__]
    return error


_KEPT_AS_TEXT = "Traceback (most recent call last; kept as text, with no frames):\n"

_GENERATOR_CODE = (
    inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)
# Where a suspended generator's frame stands: at its yield (3.11, 3.12) or at the
# resume after it (3.13). One that ended with an error was stopped elsewhere, but for
# an error thrown in at a yield, which then reads as suspended: it is kept as text.
_PAUSES = frozenset(dis.opmap[name] for name in ("YIELD_VALUE", "RESUME") if name in dis.opmap)


def _frames(tb: TracebackType | None) -> list[FrameType]:
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _may_be_paused(frame: FrameType) -> bool:
    """Whether ``frame`` may be a suspended generator's or coroutine's, which
    ``frame.clear()`` would close (before Python 3.13; later it refuses)."""
    code = frame.f_code
    if not code.co_flags & _GENERATOR_CODE:
        return False
    return frame.f_lasti < 0 or code.co_code[frame.f_lasti] in _PAUSES


def detached(error: E) -> E:
    """A copy of ``error`` (same type and attributes) with no traceback, cause or context.

    For an error an object keeps to raise again: raising the kept one would
    give it a traceback holding the raising frame, and so the object itself.
    Keep a detached copy and raise a new detached copy each time. An error
    that cannot be made again from its ``args`` (an SDK's status error, with
    required keyword arguments) is copied without its ``__init__``; notes
    added to the copy stay its own.
    """
    try:
        duplicate = copy.copy(error)
    except Exception:  # (copy calls type(error)(*error.args))
        duplicate = type(error).__new__(type(error))
        duplicate.args = error.args
        duplicate.__dict__.update(vars(error))
    if isinstance(getattr(duplicate, "__notes__", None), list):
        duplicate.__notes__ = list(duplicate.__notes__)
    return duplicate


class Outcome(Generic[T]):
    """The one result or error of a subscription, for a coroutine to await.

    Unlike an ``asyncio.Future``, it lets go of the error as :meth:`wait`
    raises it: a future keeps its exception, and the awaiting frame (which
    holds the future) ends up in that exception's traceback.

    Example:
        >>> async def main() -> str:
        ...     outcome: Outcome[str] = Outcome()
        ...     asyncio.get_running_loop().call_soon(outcome.set_result, "done")
        ...     return await outcome.wait()
        >>> asyncio.run(main())
        'done'
    """

    __slots__ = ("_error", "_lock", "_ready", "_settled", "_value")
    _value: T  # set with _settled

    def __init__(self) -> None:
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._error: BaseException | None = None
        self._settled = False
        self._lock = threading.Lock()  # (settled from any thread: the first one counts)

    def done(self) -> bool:
        """Whether a result or an error was set (only the first one counts)."""
        return self._settled

    def set_result(self, value: T) -> None:
        """Settle with ``value``, unless already settled (from any thread)."""
        with self._lock:
            if self._settled or self._ready.get_loop().is_closed():
                return
            self._settled = True
            self._value = value
        call_on(self._ready.get_loop(), self._wake)

    def set_exception(self, error: BaseException) -> None:
        """Settle with ``error``, unless already settled (from any thread)."""
        with self._lock:
            if self._settled or self._ready.get_loop().is_closed():
                return
            self._settled = True
            self._error = error
        call_on(self._ready.get_loop(), self._wake)

    def _wake(self) -> None:
        if not self._ready.done():
            self._ready.set_result(None)

    async def wait(self) -> T:
        """The result, once set; raises the error (once: it is not kept)."""
        await self._ready
        error, self._error = self._error, None
        if error is not None:
            try:
                raise error
            finally:
                del error  # this frame is in its traceback
        try:
            return self._value
        except AttributeError:
            raise RuntimeError("the outcome was an error, raised already") from None
