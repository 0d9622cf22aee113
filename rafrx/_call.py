"""Calling a sync or async function from async code without blocking the event loop.

Async functions (and async callable objects, also behind
``functools.partial``) run on the loop; sync ones run in a worker thread
with :func:`asyncio.to_thread`. A sync function that returns an awaitable
has it awaited too.

Example:
    >>> import asyncio
    >>> async def double(x: int) -> int:
    ...     return 2 * x
    >>> is_async(double), is_async(len)
    (True, False)
    >>> asyncio.run(call_function(double, [21], {})), asyncio.run(call_function(len, ["abc"], {}))
    (42, 3)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

__all__ = ["SYNC_THREADS", "call_function", "call_on", "is_async"]

SYNC_THREADS: Final = concurrent.futures.ThreadPoolExecutor(
    max_workers=256, thread_name_prefix="rafrx-sync"
)
"""The threads sync functions run on: not asyncio's default pool (a few threads, shared
with everything else on the loop), so that as many sync tools run at once as the
caller's concurrency allows, and a tool's timeout counts its run, not a wait for a
thread that timed-out tools still hold. Threads start as they are needed."""


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` returns a coroutine (a coroutine function or async callable).

    Example:
        >>> async def ping() -> None: ...
        >>> is_async(functools.partial(ping)), is_async(print)
        (True, False)
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    call = getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


async def call_function(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Any:
    """Call ``fn(*args, **kwargs)`` (in a worker thread if sync) and return its awaited value."""
    if is_async(fn):
        result = fn(*args, **kwargs)
    else:  # as asyncio.to_thread, on threads of its own (see SYNC_THREADS)
        call = _CallOnce(fn, args, kwargs)
        result = await asyncio.get_running_loop().run_in_executor(SYNC_THREADS, call)
    if inspect.isawaitable(result):
        result = await result
    return result


class _CallOnce:
    """``fn(*args, **kwargs)`` in a copy of the caller's context, for a worker thread,
    letting go of all three as it runs: a pool's worker keeps what it ran until the OS
    lets it run again, which a loaded machine delays past the caller's resuming; the
    caller's function and arguments must not live on until then (they die when the
    caller drops them). The result and an exception reach the caller through the
    worker's future."""

    __slots__ = ("_call",)

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]):
        self._call: Callable[[], Any] | None = functools.partial(
            contextvars.copy_context().run, _no_stop, fn, args, kwargs
        )

    def __call__(self) -> Any:
        call, self._call = self._call, None
        if call is None:
            raise RuntimeError("a sync call runs once")
        return call()


def _no_stop(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``fn(*args, **kwargs)``, with a ``StopIteration`` it raises made a ``RuntimeError``
    (as a coroutine's is, PEP 479): an asyncio future cannot hold one, and its
    awaiter would wait forever."""
    try:
        return fn(*args, **kwargs)
    except StopIteration as exc:
        raise RuntimeError(f"{getattr(fn, '__name__', 'function')} raised StopIteration") from exc


def call_on(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    """Call ``callback`` now on ``loop``'s own thread, else soon on ``loop`` (which it
    wakes); not at all once ``loop`` is closed. For what asyncio objects must only be
    touched from their loop's thread: cancelling a task when disposed from elsewhere.
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        callback()
    elif not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # (it closed meanwhile)
            loop.call_soon_threadsafe(callback)
