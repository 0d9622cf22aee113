"""``from_sse``: the bytes of an SSE response → ``Observable[AgentResponseUpdate]``."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rafrx._call import call_on
from rafrx.operators._reducer import SyncSource
from rafrx.sources._decoder import UpdateDecoder
from rafrx.sources.dialects import DIALECTS, DialectFactory, get_dialect
from rafrx.sse import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES
from rafrx.updates import AgentResponseUpdate

__all__ = ["from_sse"]

Chunks = bytes | bytearray | memoryview | Iterable[bytes] | AsyncIterable[bytes]
"""What :func:`from_sse` reads: a whole body, or its chunks (sync or async)."""


def from_sse(
    chunks: Chunks,
    dialect: str | DialectFactory = "openai-chat",
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> Observable[AgentResponseUpdate]:
    """A cold observable of the updates in a streamed LLM response body.

    The bytes go through :class:`~rafrx.sse.SSEDecoder` and the dialect; the
    observable completes after the dialect's terminal marker (bytes after it
    are not read) and fails with the typed error otherwise:
    :class:`~rafrx.errors.IncompleteStream` when the body ends without the
    marker (saying which dialect reads it when its events are another
    dialect's: an Anthropic body decoded as the default ``"openai-chat"``),
    :class:`~rafrx.errors.ProviderError` for an in-band error,
    :class:`~rafrx.errors.MalformedEvent` (also for another exception raised by
    a dialect of one's own, caused by it), :class:`~rafrx.errors.LimitExceeded`;
    each after the updates of the events before it. Exceptions raised by
    ``chunks`` itself are forwarded as they are.

    * ``bytes`` (a whole body) or a sync iterable of byte chunks: read as
      ``reactivex.from_iterable`` reads its iterable (no event loop needed):
      during ``subscribe``, or right after it inside Rx's ``subscribe`` (on
      the current thread's trampoline), or on the scheduler the subscription
      names (``Observable.run`` names a new thread's). Reading stops at the
      terminal marker, an error, or when the subscription is disposed (a
      ``take(n)`` that has its items), and the iterator is then closed.
    * An async iterable of byte chunks: ``subscribe`` must be called with an
      asyncio loop running; a task on that loop reads the chunks. Disposing
      the subscription cancels the task and closes the async iterator
      (``aclose()``), so an HTTP response behind it is released.

    Every subscription reads ``chunks`` anew: bytes and lists replay, but a
    one-shot generator is exhausted after the first subscription (a second
    one sees an empty body and fails with ``IncompleteStream``).

    Args:
        chunks: The response body, whole or split anywhere.
        dialect: ``"openai-chat"``, ``"anthropic"``, ``"openai-responses"``
            (see :data:`~rafrx.sources.dialects.DIALECTS`) or a dialect factory.
        max_line_bytes: Longest SSE line accepted.
        max_event_bytes: Longest SSE event data accepted.

    Raises:
        ValueError: An unknown dialect name.
        TypeError: ``chunks`` is a ``str`` or not iterable, or ``dialect`` neither a
            name nor a factory (a dialect instance given by mistake).

    Example:
        >>> from rafrx import operators as ops
        >>> body = (b'data: {"choices": [{"delta": {"content": "Hello"}}]}\\n\\n'
        ...         b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\\n\\n'
        ...         b'data: [DONE]\\n\\n')
        >>> from_sse(body).pipe(ops.convert(), ops.aggregate()).run().text
        'Hello'
    """
    if isinstance(dialect, str) and dialect not in DIALECTS:
        get_dialect(dialect)  # raises the ValueError listing the names
    if not isinstance(dialect, str) and not callable(dialect):
        raise TypeError(
            f"dialect is a name or a factory of fresh dialects (a class), "
            f"not a {type(dialect).__name__}"
        )
    if isinstance(chunks, str):
        raise TypeError("from_sse() reads bytes, not str: encode the body first")

    decoder = functools.partial(
        UpdateDecoder, dialect, max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes
    )
    if isinstance(chunks, bytes | bytearray | memoryview):
        return _SyncBody(_Pieces(bytes(chunks)), decoder)
    if type(chunks) is list or type(chunks) is tuple:  # (the ABC checks below: Python calls)
        return _SyncBody(chunks, decoder)
    if isinstance(chunks, AsyncIterable):
        return _from_async(chunks, decoder)
    if isinstance(chunks, Iterable):
        return _SyncBody(chunks, decoder)
    raise TypeError(f"from_sse() needs bytes or an iterable of bytes, got {type(chunks).__name__}")


class _Pieces:
    """A whole body read in socket-sized pieces, as a socket delivers it: a subscription
    disposed mid-body (``take(1)``) stops decoding within a piece. Iterable again and
    again (every subscription reads the body anew)."""

    __slots__ = ("body",)

    SIZE = 4096

    def __init__(self, body: bytes) -> None:
        self.body = body

    def __iter__(self) -> Iterator[bytes]:
        body, size = self.body, self.SIZE
        if len(body) <= size:
            yield body
            return
        for start in range(0, len(body), size):
            yield body[start : start + size]


class _SyncBody(SyncSource[AgentResponseUpdate]):
    """``from_sse`` over bytes or a sync iterable: decoded while subscribed."""

    def __init__(self, chunks: Iterable[bytes], make: Callable[[], UpdateDecoder]) -> None:
        self._chunks = chunks
        self._make = make

    def drive(
        self,
        on_next: Callable[[AgentResponseUpdate], None],
        on_error: Callable[[Exception], None],
        on_completed: Callable[[], None],
        stopped: Callable[[], bool] = lambda: False,
    ) -> None:
        if stopped():  # disposed before the drive began: read nothing
            return
        try:
            decoder = self._make()
        except Exception as err:  # (the user's dialect factory failed: nothing was read)
            on_error(err)
            return
        iterator = iter(self._chunks)
        delivering = False  # (an error meanwhile is the subscriber's, not the stream's)
        try:
            try:
                for chunk in iterator:
                    updates = decoder.feed(chunk)
                    delivering = True
                    for update in updates:
                        on_next(update)
                    delivering = False
                    if stopped():  # the subscriber disposed (take(n) has its items)
                        return
                    if decoder.done:
                        break
                tail = decoder.close()
            finally:
                close = getattr(iterator, "close", None)
                if close is not None:
                    close()
            delivering = True
            for update in tail:
                on_next(update)
        except Exception as err:  # the stream's error, or a subscriber's
            if delivering:
                on_error(err)
            elif not stopped():
                _fail_after_salvage(decoder, on_next, on_error, stopped, err)
        else:
            on_completed()


def _fail_after_salvage(
    decoder: UpdateDecoder,
    on_next: Callable[[AgentResponseUpdate], None],
    on_error: Callable[[Exception], None],
    stopped: Callable[[], bool],
    error: Exception,
) -> None:
    """End a failed stream: what it still owes (:meth:`UpdateDecoder.salvage`), then
    ``error``, or the subscriber's own if it raised meanwhile; nothing more once the
    subscriber stopped."""
    try:
        for update in decoder.salvage():
            on_next(update)
            if stopped():
                return
    except Exception as raised:
        error = raised
    on_error(error)


def _from_async(chunks: AsyncIterable[bytes], make: Any) -> Observable[AgentResponseUpdate]:
    def subscribe(
        observer: abc.ObserverBase[AgentResponseUpdate],
        scheduler: abc.SchedulerBase | None = None,
    ) -> abc.DisposableBase:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "from_sse() over an async iterable must be subscribed to from code "
                "running in an asyncio event loop"
            ) from None
        disposed = False

        delivering = False  # (an error meanwhile is the subscriber's, not the stream's)

        def emit(updates: list[AgentResponseUpdate]) -> None:
            nonlocal delivering
            delivering = True
            for update in updates:
                if disposed:
                    return
                observer.on_next(update)
            delivering = False

        def fail(error: Exception) -> None:
            if disposed:  # a subscriber raised and disposed: nobody to tell but the loop
                loop.call_exception_handler(
                    {"message": "rafrx.from_sse: error after disposal", "exception": error}
                )
            else:
                _report(loop, functools.partial(observer.on_error, error))

        async def read() -> None:
            try:
                decoder: UpdateDecoder = make()
            except Exception as err:  # (the user's dialect factory failed: nothing was read)
                fail(err)
                return
            iterator: AsyncIterator[bytes] = chunks.__aiter__()
            try:
                try:
                    while not disposed:
                        try:
                            chunk = await iterator.__anext__()
                        except StopAsyncIteration:
                            break
                        emit(decoder.feed(chunk))
                        if decoder.done:
                            break
                    tail = [] if disposed else decoder.close()
                finally:
                    aclose = getattr(iterator, "aclose", None)
                    if aclose is not None:
                        await aclose()
                emit(tail)
            except Exception as err:  # the stream's error, or a subscriber's
                if delivering or disposed:
                    fail(err)
                else:
                    _fail_after_salvage(decoder, observer.on_next, fail, lambda: disposed, err)
            else:
                if not disposed:
                    _report(loop, observer.on_completed)

        task = loop.create_task(read(), name="rafrx.from_sse")

        def dispose() -> None:
            nonlocal disposed
            disposed = True
            if not task.done():
                call_on(loop, cancel)  # (from another thread too; a closed loop: nothing)

        def cancel() -> None:
            if task is not asyncio.current_task():
                task.cancel()
            # else a subscriber of this very task disposed from on_next: the reader stops
            # at its next check, and the body closes without being cancelled.

        return Disposable(dispose)

    return reactivex.create(subscribe)


def _report(loop: asyncio.AbstractEventLoop, call: Any) -> None:
    """Call an observer's terminal method; an exception it raises goes to the loop."""
    try:
        call()
    except Exception as err:
        loop.call_exception_handler(
            {"message": "rafrx.from_sse: an observer raised", "exception": err}
        )
