"""The aiohttp transport of the clients: one cold observable, one HTTP request.

Subscribing starts a task on the running loop that sends the request, checks
the status and content type, reads the body with ``iter_any()`` (never
``readline``), feeds an :class:`~rafrx.sources.UpdateDecoder` and emits each
update as soon as its chunk is decoded. Disposing cancels the task and
*closes* the response, so the server sees the connection end at once.

Failures become typed :mod:`rafrx.errors`:

============================================  ==============================
what happened                                 error
============================================  ==============================
status >= 400, or a redirect (not followed)   :class:`~rafrx.errors.HTTPStatusError`
not ``text/event-stream``                     :class:`~rafrx.errors.ContentTypeError`
refused, DNS, reset before the response       :class:`~rafrx.errors.TransportError`
no connection / headers in time               :class:`~rafrx.errors.ConnectTimeout`
silence between chunks for ``idle`` seconds   :class:`~rafrx.errors.IdleTimeout`
connection lost mid-body                      :class:`~rafrx.errors.StreamInterrupted`
EOF without the terminal marker               :class:`~rafrx.errors.IncompleteStream`
the client's ``aclose()`` mid-call            :class:`~rafrx.errors.TransportError`
============================================  ==============================

Secrets (API keys) are replaced by ``***`` in every error message and body,
and no error is chained to aiohttp's exceptions (which hold the request headers).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import email.utils
import functools
import io
import json
import logging
import math
import random
import re
import threading
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, Final, final

import aiohttp
import attrs
import reactivex
from aiohttp.http_exceptions import (
    ContentLengthError,
    HttpProcessingError,
    PayloadEncodingError,
    TransferEncodingError,
)
from multidict import CIMultiDictProxy
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from yarl import URL

from rafrx._cycles import let_go, without_frames
from rafrx._finite import finite, strict_dumps
from rafrx._redaction import env_secrets, redact_with, secret_prefix_at
from rafrx.errors import (
    ConnectTimeout,
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    ProtocolError,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.sources._decoder import UpdateDecoder
from rafrx.sources._idle import IdleTimer
from rafrx.sources.dialects._common import is_retryable
from rafrx.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    check_content_type,
    sniff_event_stream,
)
from rafrx.updates import AgentResponseUpdate, ResponseMetadata

__all__ = [
    "HTTPRequest",
    "RetryPolicy",
    "SessionPool",
    "Timeouts",
    "masked_url",
    "parse_retry_after",
    "redact",
    "redact_error",
    "stream_updates",
]

_log = logging.getLogger(__name__)

#: Bytes of an error body read for :class:`~rafrx.errors.HTTPStatusError`.
MAX_ERROR_BODY: Final = 64 * 1024
#: Bytes of a wrong-content-type body kept as the error's snippet.
MAX_SNIPPET: Final = 2048
#: Seconds a call waits, after its terminal marker, for the body's end (so that
#: its connection can be reused) before it closes the connection and completes.
BODY_END_WAIT: Final = 0.1


def _optional_positive(instance: Any, attribute: Any, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be positive or None, got {value}")


@final
@attrs.frozen
class Timeouts:
    """How long a request may wait; ``None`` waits forever.

    There is deliberately no total timeout: a long generation is fine as long
    as bytes keep coming.

    Attributes:
        connect: Seconds to open the connection (TCP and TLS).
        first_byte: Seconds from sending the request to the response headers.
        idle: Seconds without any byte of the body (keep-alive comments count).
    """

    connect: float | None = attrs.field(default=10.0, validator=_optional_positive)
    first_byte: float | None = attrs.field(default=60.0, validator=_optional_positive)
    idle: float | None = attrs.field(default=60.0, validator=_optional_positive)


@final
@attrs.frozen
class RetryPolicy:
    """Opt-in retries of failed requests, never of delivered output.

    A request is retried only when its error is retryable (HTTP 408, 409,
    429, 5xx, a refused connection, a connect timeout, a retryable provider
    error; an ``x-should-retry`` header overrides) and no update was emitted
    yet, so nothing is ever duplicated. The response's metadata (its id and
    model) waits for its first content, so an overloaded provider's error
    event right after ``message_start`` is retried too. The wait is the server's
    ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date) when given,
    else exponential backoff; a server asking for more than
    ``max_retry_after`` seconds (``inf`` included) is not retried. When it
    gives up, the stream ends with the last attempt's error, whose
    ``attempts`` says how many were made (and its message, "(after N attempts)").

    Example:
        >>> policy = RetryPolicy(initial_backoff=0.5, jitter=False)
        >>> [policy.delay(HTTPStatusError(503), attempt) for attempt in (1, 2, 3)]
        [0.5, 1.0, None]
        >>> policy.delay(HTTPStatusError(429, retry_after=3.0), 1)
        3.0
        >>> print(policy.delay(HTTPStatusError(429, retry_after=math.inf), 1))
        None
    """

    max_attempts: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    jitter: bool = True

    def delay(self, error: BaseException, attempt: int) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``; ``None``: do not retry.

        Args:
            error: Why attempt ``attempt`` failed.
            attempt: The number of the failed attempt, from 1.
        """
        if attempt >= self.max_attempts:
            return None
        if not isinstance(error, RafrxError) or not error.retryable:
            return None
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float):
            if not math.isfinite(retry_after) or retry_after > self.max_retry_after:
                return None  # even with max_retry_after=inf: never sleep forever
            return max(0.0, float(retry_after))
        backoff = min(self.max_backoff, self.initial_backoff * 2.0 ** (attempt - 1))
        if self.jitter:
            backoff *= 1.0 - 0.25 * random.random()
        return backoff


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds a response asks to wait: ``retry-after-ms``, else ``Retry-After``.

    ``None`` when neither is a number or a date (``"nan"`` is not a number);
    a value too large for a float (``1e400``, ``inf``) is ``inf``: longer
    than any wait.

    Example:
        >>> parse_retry_after({"retry-after-ms": "1500"}), parse_retry_after({"Retry-After": "2"})
        (1.5, 2.0)
        >>> parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0)
        10.0
        >>> parse_retry_after({"Retry-After": "1e400"}), parse_retry_after({"Retry-After": "nan"})
        (inf, None)
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _seconds(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # the asctime form: an HTTP date is always GMT (RFC 9110 5.6.7)
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _fail_body_when_closed(response: aiohttp.ClientResponse) -> Callable[[], object]:
    """Fail the body's reader if its connection closes before the body ends.

    aiohttp's C parser, on bad chunk framing mid-body, closes the connection and
    leaves the body reader waiting, with no error set on it: the stream would end
    only at the idle timeout. Returns the function that stops watching (the
    connection may go back to the pool and serve other requests).
    """
    connection = response.connection
    protocol = None if connection is None else connection.protocol
    closed = None if protocol is None else protocol.closed
    if closed is None:  # already closed: the reader has its end or its error
        return _nothing
    content = response.content

    def on_closed(future: asyncio.Future[None]) -> None:
        if not content.is_eof() and content.exception() is None:
            content.set_exception(
                aiohttp.ClientPayloadError("the connection closed before the body ended")
            )

    # (one callback that reads the future's error, whoever made it: an error nobody
    # reads would be logged when the future goes)
    closed.remove_done_callback(_read_error)
    closed.add_done_callback(_read_error)
    closed.add_done_callback(on_closed)
    return functools.partial(closed.remove_done_callback, on_closed)


def _read_error(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _nothing() -> None:
    pass


def _body_text(data: bytes, response: aiohttp.ClientResponse) -> str:
    """``data`` decoded as ``response`` declares it (U+FFFD for what does not decode),
    or as UTF-8 when Python has no text encoding by that name: an unknown one, a
    bytes-to-bytes codec (``hex``, ``zlib``) or one without ``"replace"`` (``idna``)."""
    charset = response.charset
    if charset:
        with contextlib.suppress(LookupError, UnicodeError):
            return data.decode(charset, "replace").removeprefix("\ufeff")
    return data.decode("utf-8", "replace").removeprefix("\ufeff")  # a BOM (.NET / IIS)


def _seconds(value: str | None) -> float | None:
    """A header's number, at least 0 (``inf`` stays ``inf``); None when absent or not a
    number (``"nan"``)."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return None if math.isnan(number) else max(0.0, number)


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``***``, and what any key looks like
    (``sk-…``, ``Bearer …``: a gateway may add its own) and the environment's
    secrets (``*_API_KEY`` …) by ``[REDACTED]``, as the recorder does.

    Example:
        >>> redact("bad key sk-123", ["sk-123"])
        'bad key ***'
        >>> redact("upstream said: Bearer sk-proj-0123456789abcdefXYZ", [])
        'upstream said: Bearer [REDACTED]'
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return redact_with(text, tuple(env_secrets()))


#: The marker ``rafrx.errors`` puts where it clipped a long text.
_CLIPPED = re.compile(r"… \[\d+ more characters\]\Z")

#: The longest start of a secret a cut text may end with: no more than a key's public prefix.
_HARMLESS_PREFIX: Final = 3


def redact_cut(text: str, secrets: Sequence[str]) -> str:
    """:func:`redact` for a text cut short: a secret the cut split leaves its start at
    the end (before a clip marker, if any), which goes too.

    Example:
        >>> redact_cut("the key is sk-12", ["sk-123456"])
        'the key is ***'
        >>> redact_cut("the key is sk-1234… [5 more characters]", ["sk-123456"])
        'the key is ***… [5 more characters]'
    """
    marker = _CLIPPED.search(text)
    head, tail = (text[: marker.start()], marker.group()) if marker else (text, "")
    head = redact(head, secrets)
    at = secret_prefix_at(head, secrets, least=_HARMLESS_PREFIX + 1)
    return (head if at == len(head) else head[:at] + "***") + tail


def redact_error(error: RafrxError, secrets: Sequence[str]) -> RafrxError:
    """``error`` with every secret in its text attributes replaced (see :func:`redact`),
    and, when ``secrets`` are given or it held one, without the exceptions it was
    raised from or during.

    For errors built from what the server sent (an in-band error event or a
    malformed event that echoes the key): message, body, raw data, provider
    fields. Its ``__cause__`` and ``__context__`` (a ``JSONDecodeError`` holds
    the whole event data) cannot be redacted, so they are dropped.

    Example:
        >>> redact_error(RafrxError("bad key sk-123", body="sk-123"), ["sk-123"]).body
        '***'
    """
    changed = any(secrets)
    for name, value in list(vars(error).items()):
        if isinstance(value, str):
            shown = redact_cut(value, secrets)
            changed = changed or shown != value
            setattr(error, name, shown)
    args = tuple(redact_cut(a, secrets) if isinstance(a, str) else a for a in error.args)
    if changed or args != error.args:  # (then what it came from may hold it too)
        error.args = args
        error.__cause__ = error.__context__ = None
        error.__suppress_context__ = True
    return error


def masked_url(url: URL) -> str:
    """``url`` with its password (or a user name alone: a token) and query values
    (which may hold a key) as ``***``.

    Example:
        >>> masked_url(URL("https://me:pw@example.com/v1?key=AIza123"))
        'https://me:***@example.com/v1?key=***'
        >>> masked_url(URL("https://tok-123@example.com/v1"))
        'https://***@example.com/v1'
    """
    if url.password:
        url = url.with_password("***")
    elif url.user:
        url = url.with_user("***")
    if url.query_string:
        url = url.with_query([(name, "***") for name in url.query])
    return str(url)


@final
@attrs.frozen
class HTTPRequest:
    """One streaming POST: where, what, with which (secret) headers.

    ``headers`` and ``secrets`` stay out of the repr.
    """

    url: URL = attrs.field(repr=lambda url: repr(masked_url(url)))
    payload: Mapping[str, Any]
    dialect: str
    headers: Mapping[str, str] = attrs.field(repr=False)
    secrets: tuple[str, ...] = attrs.field(default=(), repr=False)
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES

    @property
    def safe_url(self) -> str:
        """The URL without its query (which may hold a key) and with its password as ``***``."""
        return masked_url(self.url.with_query(None))


# ---------------------------------------------------------------- sessions


async def _keep_open(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """Closes ``session`` when the loop shuts its async generators down
    (``asyncio.run`` does), if :meth:`SessionPool.aclose` did not."""
    try:
        yield
    finally:
        await session.close()


class SessionPool:
    """The ``aiohttp.ClientSession`` a client uses, one per event loop, and the
    calls running on them.

    A session given by the user is used as is and never closed. Otherwise one
    is created lazily on the running loop, with no connection limit (1000
    concurrent streams need 1000 connections), closed by :meth:`aclose`, or
    when ``asyncio.run`` ends the loop.
    """

    def __init__(
        self, session: aiohttp.ClientSession | None = None, *, trust_env: bool = False
    ) -> None:
        self._given = session
        self._trust_env = trust_env
        self._owned: dict[asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, Any]] = {}
        self._calls: set[_StreamCall] = set()

    async def get(self) -> aiohttp.ClientSession:
        """The session for the running loop."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        owned = self._owned.get(loop)
        if owned is not None and not owned[0].closed:
            return owned[0]
        for other in list(self._owned):  # (a snapshot: threads with loops of their own share it)
            if other.is_closed():
                self._owned.pop(other, None)
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=self._trust_env,
        )
        keeper = _keep_open(session)
        self._owned[loop] = (session, keeper)
        await keeper.__anext__()  # registers it with the loop's async-generator hooks
        return session

    def track(self, call: _StreamCall, task: asyncio.Task[None]) -> None:
        """Count ``call`` as running until ``task`` is done."""
        self._calls.add(call)
        task.add_done_callback(lambda _: self._calls.discard(call))

    async def aclose(self) -> None:
        """End the calls still running, then close the sessions this pool created.

        Each running call ends at once with a non-retryable
        :class:`~rafrx.errors.TransportError` (after what it already
        delivered), its response closed and, on this loop, its task awaited.
        Calls started afterwards work as before, on new sessions. A session
        of another thread's loop is closed on that loop; if that loop is not
        running (or stops first), it is closed when that loop runs again
        (``asyncio.run`` ending it does).
        """
        current = asyncio.get_running_loop()
        calls = list(self._calls)
        for call in calls:
            call.abort()
        tasks = [call.task for call in calls if call.loop is current and call.task is not None]
        tasks = [task for task in tasks if task is not asyncio.current_task()]
        if tasks:
            await asyncio.wait(tasks)
        owned, self._owned = self._owned, {}
        for loop, (_, keeper) in owned.items():
            if loop is current:
                await keeper.aclose()
            elif not loop.is_closed():  # (a loop not running closes it when it runs again)
                future = asyncio.run_coroutine_threadsafe(keeper.aclose(), loop)
                closed = asyncio.wrap_future(future)
                while not closed.done() and loop.is_running():  # (it may stop before it)
                    await asyncio.wait({closed}, timeout=0.1)


# ---------------------------------------------------------------- the observable


def stream_updates(
    request: HTTPRequest,
    sessions: SessionPool,
    timeouts: Timeouts,
    retry: RetryPolicy | None = None,
) -> Observable[AgentResponseUpdate]:
    """A cold observable of the updates of one streamed request.

    Each subscription sends the request once (plus retries, see
    :class:`RetryPolicy`) on the running event loop; disposing aborts it, and
    so does :meth:`SessionPool.aclose` (with a ``TransportError``).

    Redirects are not followed: a 3xx response is a non-retryable
    :class:`~rafrx.errors.HTTPStatusError` naming where it points (password and
    query values masked), because following it would send the API key
    headers (``x-api-key``, ``api-key`` ...) to wherever it points.

    Args:
        request: What to send.
        sessions: The sessions to send it with; tracks the call.
        timeouts: Connect, first-byte and idle timeouts.
        retry: The retry policy; ``None`` sends once.
    """

    def subscribe(
        observer: abc.ObserverBase[AgentResponseUpdate],
        scheduler: abc.SchedulerBase | None = None,
    ) -> abc.DisposableBase:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            observer.on_error(
                RuntimeError("subscribe to a client stream from code running in an event loop")
            )
            return Disposable()
        call = _StreamCall(request, sessions, timeouts, retry, observer, loop)
        call.start()
        return Disposable(call.dispose)

    return reactivex.create(subscribe)


def _current_task() -> asyncio.Task[Any] | None:
    """The running task, or ``None`` outside a running loop (a sync caller)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class _SubscriberFailed(Exception):
    """The observer's ``on_next`` raised: report it, never retry."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _StreamCall:
    """The state of one subscription: its task, its response, what it delivered."""

    def __init__(
        self,
        request: HTTPRequest,
        sessions: SessionPool,
        timeouts: Timeouts,
        retry: RetryPolicy | None,
        observer: abc.ObserverBase[AgentResponseUpdate],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.request = request
        self.sessions = sessions
        self.session: aiohttp.ClientSession | None = None  # the one the request went on
        self.timeouts = timeouts
        self.retry = retry
        self.observer = observer
        self.loop = loop
        self.thread = threading.get_ident()
        self.task: asyncio.Task[None] | None = None
        self.response: aiohttp.ClientResponse | None = None
        self.decoder: UpdateDecoder | None = None  # the latest attempt's
        self.delivered = 0
        # With retries, the response's metadata waits for its first content: an error
        # before any content (an overloaded provider, right after message_start) can
        # then still be retried, and only the attempt that answers is seen.
        self.held: list[AgentResponseUpdate] | None = None if retry is None else []
        self.stopped = False
        self.delivered_all = False  # the terminal marker came: only the body's end is awaited

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.task = self.loop.create_task(self._run())
        self.sessions.track(self, self.task)
        self.task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        self.task = None  # (the task keeps its error, whose traceback holds this call)

    def abort(self) -> None:
        """End the call with a TransportError: its client was closed."""
        if threading.get_ident() != self.thread:
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self.abort)
            return
        if self.stopped:
            return
        self._close()
        task = self.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        self._cut_short(
            TransportError(
                f"client closed: the call to {self.request.safe_url} was ended by aclose() "
                f"after {self.delivered} update(s)",
                retryable=False,
            )
        )

    def dispose(self) -> None:
        if self.loop.is_closed():  # (nothing runs there any more: nothing to stop)
            self.stopped = True
            return
        if threading.get_ident() != self.thread:
            with contextlib.suppress(RuntimeError):  # (it closed meanwhile)
                self.loop.call_soon_threadsafe(self.dispose)
            return
        if self.stopped:
            return
        self.stopped = True
        self._close()
        task = self.task
        if task is not None and not task.done() and task is not _current_task():
            task.cancel()

    def _close(self) -> None:
        response, self.response = self.response, None
        if response is not None:
            response.close()

    def _release(self) -> None:
        response, self.response = self.response, None
        if response is not None:
            response.release()

    # ------------------------------------------------------------ emitting

    def _deliver(self, updates: list[AgentResponseUpdate]) -> None:
        on_next = self.observer.on_next
        for update in updates:
            if self.stopped:
                return
            if self.held is not None:
                if type(update) is ResponseMetadata:
                    self.held.append(update)
                    continue
                self._deliver_held()
            self.delivered += 1
            try:
                on_next(update)
            except Exception as exc:
                raise _SubscriberFailed(exc) from exc

    def _deliver_held(self) -> None:
        """Emit the metadata held for the first content (see ``held``); hold no more."""
        held, self.held = self.held, None
        if held:
            self._deliver(held)

    def _cut_short(self, error: RafrxError) -> None:
        """End the call cut short by its client or loop: with ``error`` (after what
        the stream still owes), unless everything came and only the body's own end was
        awaited, which the stream does not need (:meth:`_finish_body`)."""
        self._end(None if self.delivered_all else self._salvaged(error))

    def _salvaged(self, error: RafrxError) -> Exception:
        """Deliver what the failed stream still owes (:meth:`UpdateDecoder.salvage`); the
        error to end with is then ``error``, or the subscriber's own if it raised meanwhile."""
        decoder, self.decoder = self.decoder, None
        if decoder is not None and not self.stopped:
            try:
                self._deliver(decoder.salvage())
            except _SubscriberFailed as failed:
                return failed.error
        return error

    def _end(self, error: Exception | None = None) -> None:
        if self.stopped:
            return
        if self.held:  # the metadata of a response with no content: it still counts
            try:
                self._deliver_held()
            except _SubscriberFailed as failed:
                error = failed.error
        self.stopped = True
        try:
            if error is None:
                self.observer.on_completed()
            else:
                self.observer.on_error(error)
        except Exception as exc:
            self._report(exc)

    def _report(self, error: Exception) -> None:
        """An observer's exception with no stream left to carry it: the loop's handler gets it."""
        self.loop.call_exception_handler(
            {"message": "a rafrx stream observer raised", "exception": error}
        )

    # ------------------------------------------------------------ the task

    async def _run(self) -> None:
        attempt = 0
        try:
            while not self.stopped:
                attempt += 1
                try:
                    await self._attempt()
                except _SubscriberFailed as failed:
                    self._close()
                    if self.stopped:  # it disposed, then raised: nobody to tell but the loop
                        self._report(failed.error)
                    else:
                        self._end(failed.error)
                    return
                except RafrxError as err:
                    self._close()
                    redact_error(err, self.request.secrets)
                    delay = None
                    if self.retry is not None and self.delivered == 0:
                        delay = self.retry.delay(err, attempt)
                    if delay is None:
                        if attempt > 1:
                            _note_attempts(err, attempt)
                        # (kept by the user: the call goes with it; and no local holds it)
                        self._end(self._salvaged(let_go(err)))
                        return
                    # The failed attempt's metadata and what its end owes: never seen.
                    self.decoder = None
                    if self.held:
                        self.held.clear()
                    await asyncio.sleep(delay)
                except Exception as exc:
                    self._close()
                    self._end(let_go(exc))
                    return
                else:
                    return
        except asyncio.CancelledError as cancelled:
            self._close()
            if not self.stopped:  # not disposed: its loop is ending (asyncio.run returned)
                self._cut_short(
                    TransportError(
                        f"the call to {self.request.safe_url} was cancelled (its event loop "
                        f"ended?) after {self.delivered} update(s)",
                        retryable=False,
                    )
                )
            # (the frames below: their asyncio.timeout() blocks hold the task)
            raise without_frames(cancelled) from None

    async def _attempt(self) -> None:
        self.decoder = None  # (a failed attempt's owes nothing: it was retried)
        response = await self._send()
        self.response = response
        if response.status >= 300:  # redirects are not followed (see stream_updates)
            raise await self._status_error(response)
        head = b""  # (read to see what a body that is said not to be an event stream is)
        content_type = response.headers.get("Content-Type")
        try:
            check_content_type(content_type)
        except ContentTypeError:
            head = await self._head(response)
            if not sniff_event_stream(head):
                snippet = await self._read_text(response, MAX_SNIPPET, head)
                said = _provider_error(snippet)[0]  # e.g. a server that will not stream, in JSON
                raise ContentTypeError(
                    f"expected Content-Type text/event-stream, got {content_type!r} "
                    f"from {self.request.safe_url}" + (f": {said}" if said else ""),
                    status=response.status,
                    body=snippet,
                ) from None
            _log.warning(
                "%s sent an event stream as Content-Type %r: decoding it",
                self.request.safe_url,
                content_type,
            )
        request = self.request
        self.decoder = decoder = UpdateDecoder(
            request.dialect,
            max_line_bytes=request.max_line_bytes,
            max_event_bytes=request.max_event_bytes,
        )
        if head:
            self._deliver(decoder.feed(head))
        if not (decoder.done or self.stopped):  # (a head may hold the whole stream)
            await self._read_body(response, decoder)
        if self.stopped:
            return
        tail = decoder.close()
        self._deliver(tail)
        if decoder.done:
            self.delivered_all = True
            await self._finish_body(response)
        else:
            self._release()  # (the body's end: the connection goes back to the pool)
        self._end()

    async def _finish_body(self, response: aiohttp.ClientResponse) -> None:
        """After the terminal marker, everything is delivered: wait a moment for
        the body's own end (a server often sends its last chunk a little later),
        so that the connection can serve the next call. Anything else, or
        nothing within ``BODY_END_WAIT``, closes the connection instead."""
        try:
            async with asyncio.timeout(BODY_END_WAIT):
                ended = not await response.content.readany()  # (b"": the body's end)
        except (TimeoutError, aiohttp.ClientError, OSError, HttpProcessingError):
            ended = False
        if ended:
            self._release()
        else:
            self._close()

    async def _send(self) -> aiohttp.ClientResponse:
        request, timeouts = self.request, self.timeouts
        self.session = session = await self.sessions.get()
        if session.closed:  # a session given by the user, closed by them
            raise TransportError(
                f"cannot send to {request.safe_url}: the aiohttp session is closed",
                retryable=False,
            )
        try:
            async with asyncio.timeout(timeouts.first_byte):
                return await session.post(
                    request.url,
                    data=_json_body(session, request.payload),
                    headers=dict(request.headers),
                    allow_redirects=False,
                    raise_for_status=False,  # ours to build, whatever the session says
                    timeout=aiohttp.ClientTimeout(
                        total=None, connect=None, sock_connect=timeouts.connect, sock_read=None
                    ),
                )
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            error = self._send_error(exc)
        # Raised out here, not in the handler: the error gets no __context__, as
        # aiohttp's exception holds the request (its headers and full URL).
        try:
            raise error
        finally:
            del error  # this frame is in its traceback: no cycle

    def _send_error(self, exc: Exception) -> RafrxError:
        """The typed error for ``exc``, raised while sending, without its secrets."""
        url, secrets = self.request.safe_url, self.request.secrets
        if isinstance(exc, aiohttp.ClientConnectorError):
            return TransportError(redact(f"cannot connect to {url}: {exc.os_error}", secrets))
        if isinstance(exc, TimeoutError):  # aiohttp.ServerTimeoutError too
            timeouts = self._describe_connect_timeout()
            return ConnectTimeout(f"no response from {url} within {timeouts}")
        if isinstance(exc, aiohttp.ClientConnectionError | OSError):
            message = f"connection to {url} failed: {type(exc).__name__}: {exc}"
            return TransportError(redact(message, secrets))
        if isinstance(exc, aiohttp.ClientResponseError):  # not HTTP, a bad header
            # exc.message only: str(exc) and repr(exc) carry the full URL and the headers.
            message = f"invalid HTTP response from {url}: {type(exc).__name__}"
            detail = f"{message}: {exc.message}" if exc.message else message
            return ProtocolError(redact(detail, secrets))
        if isinstance(exc, ValueError):  # a request aiohttp cannot build (a bad header ...)
            detail = type(exc).__name__
            if not isinstance(exc, UnicodeError):  # whose text quotes the URL's password
                detail = f"{detail}: {exc}"
            message = f"cannot send the request to {url}: {detail}"
            return TransportError(redact(message, secrets), retryable=False)
        return TransportError(redact(f"request to {url} failed: {type(exc).__name__}", secrets))

    def _describe_connect_timeout(self) -> str:
        t = self.timeouts
        return f"the connect ({t.connect} s) / first byte ({t.first_byte} s) timeout"

    async def _read_body(self, response: aiohttp.ClientResponse, decoder: UpdateDecoder) -> None:
        idle = self.timeouts.idle
        chunks = response.content.iter_any().__aiter__()
        unwatch = _fail_body_when_closed(response)
        try:
            async with asyncio.timeout(None) as deadline:
                timer = IdleTimer(self.loop, idle, deadline, response.content)
                try:
                    while True:
                        timer.waiting()
                        try:
                            chunk = await chunks.__anext__()
                        except StopAsyncIteration:
                            return
                        self._deliver(decoder.feed(chunk))
                        if decoder.done or self.stopped:
                            return
                finally:
                    timer.cancel()
        except TimeoutError:
            error: RafrxError = IdleTimeout(
                f"no data from {self.request.safe_url} for {idle} s (idle timeout)"
            )
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ClientConnectionError,
            OSError,
            HttpProcessingError,  # bad framing, from the pure-Python parser: no ClientError
        ) as exc:
            message = (
                f"the connection to {self.request.safe_url} broke mid-stream "
                f"after {self.delivered} update(s): {_why_broken(exc)}"
            )
            error = StreamInterrupted(redact(message, self.request.secrets))
            exc.__traceback__ = None  # aiohttp's reader keeps it: no frame of this call in it
        finally:
            unwatch()
        if self.session is not None and self.session.closed:  # not the server's fault
            error = TransportError(
                f"the aiohttp session was closed while streaming from "
                f"{self.request.safe_url}, after {self.delivered} update(s)",
                retryable=False,
            )
        try:
            raise error  # out of the handlers: no __context__ (see _send)
        finally:
            del error

    async def _head(self, response: aiohttp.ClientResponse) -> bytes:
        """The body's first bytes: enough to tell whether it is an event stream."""
        return await self._read(
            response,
            b"",
            lambda head: len(head) < MAX_SNIPPET and sniff_event_stream(bytes(head)) is None,
        )

    async def _read_text(
        self, response: aiohttp.ClientResponse, limit: int, head: bytes = b""
    ) -> str:
        """The body's first ``limit`` bytes (after ``head``, read already), as text."""
        data = await self._read(response, head, lambda data: len(data) < limit)
        return redact_cut(_body_text(data[:limit], response), self.request.secrets)

    async def _read(
        self, response: aiohttp.ClientResponse, head: bytes, more: Callable[[bytearray], bool]
    ) -> bytes:
        """``head`` and the body's next bytes while ``more(what came)``: until the body's
        end, a broken connection or the idle timeout (what came is the body)."""
        data = bytearray(head)
        try:
            async with asyncio.timeout(self.timeouts.idle):
                while more(data):
                    chunk = await response.content.readany()
                    if not chunk:
                        break
                    data += chunk
        except (TimeoutError, aiohttp.ClientError, OSError, HttpProcessingError):
            pass  # what came is the body
        return bytes(data)

    async def _status_error(self, response: aiohttp.ClientResponse) -> HTTPStatusError:
        body = await self._read_text(response, MAX_ERROR_BODY)
        self._release()
        headers: CIMultiDictProxy[str] = response.headers
        if response.status < 400:
            return HTTPStatusError(response.status, body=body, message=self._redirect(response))
        message, error_type, code = _provider_error(body)
        reason = None
        if message is None and response.content_type == "text/plain":
            reason = _first_line(body)  # a gateway's or a proxy's reason, in words
        error = HTTPStatusError(
            response.status,
            body=body,
            message=None if reason is None else f"HTTP {response.status}: {reason}",
            provider_message=message,
            error_type=error_type,
            code=code,
            retry_after=parse_retry_after(headers),
            request_id=headers.get("x-request-id") or headers.get("request-id"),
        )
        if error.retryable and not is_retryable(error_type, code, response.status):
            error.retryable = False  # a 429 for an exhausted quota: waiting does not help
        should_retry = headers.get("x-should-retry", "").lower()
        if should_retry in ("true", "false"):
            error.retryable = should_retry == "true"
        return error

    def _redirect(self, response: aiohttp.ClientResponse) -> str:
        """The message of a 3xx response's error: where it points, masked; not followed."""
        request, status = self.request, response.status
        location = response.headers.get("Location")
        if location is None:
            return f"HTTP {status} from {request.safe_url}, not followed (no Location)"
        try:
            target = masked_url(request.url.join(URL(location)))
        except ValueError:
            target = repr(location)
        message = (
            f"HTTP {status}: {request.safe_url} redirects to {target}; not followed, as the "
            "API key would go along: set base_url to the new address"
        )
        return redact(message, request.secrets)


def _json_body(session: aiohttp.ClientSession, payload: Mapping[str, Any]) -> aiohttp.Payload:
    """``payload`` as aiohttp's ``json=`` sends it (the session's ``json_serialize``,
    UTF-8, ``application/json``, a ``Content-Length``), but from a ``BytesIO``.

    aiohttp builds ``json=`` (and ``data=bytes``) bodies as a ``BytesPayload``,
    which warns (``ResourceWarning``: "Sending a large body directly with raw
    bytes might lock the event loop") when the body is over 1 MiB, a long
    conversation; a ``BytesIOPayload`` is written in chunks, yielding to the loop.

    The body is strict JSON: a NaN or an infinity a past turn holds (a model's
    ``NaN`` in a kept block, a tool's) goes as ``null``, not as the bare ``NaN``
    that ``json.dumps`` writes and the providers refuse; and a lone surrogate
    (half of an emoji a tool cut, a stream's split escape) goes as U+FFFD, since
    Anthropic, OpenAI and DeepSeek refuse the whole request for it ("no low
    surrogate in string"), this one and every later one of the conversation.
    """
    serialize = session.json_serialize
    # (aiohttp's default, else the user's own serializer: give it what JSON can carry)
    text = strict_dumps(payload) if serialize is json.dumps else serialize(finite(payload))
    return aiohttp.BytesIOPayload(io.BytesIO(_utf8(text)), content_type="application/json")


# A \uXXXX escape of a high surrogate not followed by a low one, or of a low one
# not after a high one (an escaped backslash before it is a false alarm: see _utf8).
_LONE_SURROGATE: Final = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _utf8(body: str) -> bytes:
    """A JSON text in UTF-8, each lone surrogate in it (escaped or not) as U+FFFD.

    The usual body holds none: one scan for ``\\ud`` and the encoding (with
    emoji, escaped as pairs, a regular expression too). Else, or when an escaped
    backslash might stand before what reads as an escape, it is decoded and
    encoded again, with surrogate pairs joined.

    Example:
        >>> _utf8('["a\\ud83d\\ude00", "b\\ud800"]').decode()
        '["a😀", "b\ufffd"]'
    """
    escapes = "\\ud" in body or "\\uD" in body
    # (after an escaped backslash, what reads as an escape may be text: decode to know)
    if not escapes or ("\\\\" not in body and _LONE_SURROGATE.search(body) is None):
        try:
            return body.encode()
        except UnicodeEncodeError:  # a raw one, from a serializer that writes text as it is
            pass
    text = json.dumps(json.loads(body), ensure_ascii=False)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


def _provider_error(body: str) -> tuple[str | None, str | None, str | None]:
    """The provider's error message, type and code, from the usual JSON shapes."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to build
        return None, None, None
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        data = data[0]  # Gemini wraps its error in a list
    if not isinstance(data, Mapping):
        return None, None, None
    error = data.get("error")
    code = None
    if isinstance(error, Mapping):
        message, kind = error.get("message"), error.get("type") or error.get("status")
        code = error.get("code")
        if kind is None and isinstance(code, str):
            kind = code
    elif isinstance(error, str):
        message, kind = error, None
    else:
        message = data.get("message") or data.get("detail")
        kind = data.get("type") if data.get("type") != "error" else None
    if isinstance(code, int) and not isinstance(code, bool):
        code = str(code)  # OpenRouter's, Gemini's (as the dialects keep an in-band one)
    return (
        message if isinstance(message, str) else None,
        kind if isinstance(kind, str) else None,
        code if isinstance(code, str) else None,
    )


def _first_line(text: str, limit: int = 200) -> str | None:
    """The first non-blank line of ``text``, clipped to ``limit`` characters."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not line:
        return None
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _why_broken(exc: BaseException) -> str:
    """Why a response body stopped, in words. (aiohttp's payload error quotes its
    parser's exception, ``<TransferEncodingError: 400, message=...>``: no HTTP 400.)"""
    cause = exc.__cause__
    if isinstance(cause, ContentLengthError):
        return "the body ended before its Content-Length"
    if isinstance(cause, TransferEncodingError):
        return "the chunked body ended before its last chunk"
    if isinstance(cause, PayloadEncodingError) or isinstance(exc, PayloadEncodingError):
        return "the compressed body could not be decoded"
    if isinstance(exc, aiohttp.ClientPayloadError):  # (its words, without a repr it quotes)
        return re.split(r"[:.] <", str(exc), maxsplit=1)[0] or "the response body was cut short"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, HttpProcessingError):
        return f"invalid HTTP framing ({exc.message})"
    return f"{type(exc).__name__}: {exc}"


def _note_attempts(error: RafrxError, attempts: int) -> None:
    """Say on ``error``, the last attempt's, that the request was sent ``attempts`` times."""
    error.attempts = attempts
    error.message = f"{error.message} (after {attempts} attempts)"
    error.args = (error.message, *error.args[1:])
