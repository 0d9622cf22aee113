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
a proxy's 407, to CONNECT or to a request     :class:`~rafrx.errors.TransportError`
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
import functools
import io
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import aiohttp
import attrs
import reactivex
from aiohttp.helpers import get_env_proxy_for_url
from aiohttp.http_exceptions import (
    HttpProcessingError,
)
from multidict import CIMultiDictProxy
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from yarl import URL

from rafrx._cycles import let_go, without_frames
from rafrx._finite import finite, strict_dumps
from rafrx._redaction import netrc_secrets
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
from rafrx.sources._failures import (
    body_text,
    first_line,
    note_attempts,
    provider_error,
    why_broken,
)
from rafrx.sources._idle import IdleTimer
from rafrx.sources._policy import RetryPolicy, Timeouts, parse_retry_after, request_id
from rafrx.sources._secrets import masked_url, redact, redact_cut, redact_error
from rafrx.sources._sessions import SessionPool, has_authorization, session_proxy
from rafrx.sources.dialects._common import is_retryable
from rafrx.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    check_content_type,
    sniff_event_stream,
)
from rafrx.updates import AgentResponseUpdate, ResponseMetadata

__all__ = ["BODY_END_WAIT", "MAX_ERROR_BODY", "MAX_SNIPPET", "HTTPRequest", "stream_updates"]

_log = logging.getLogger(__name__)

#: Bytes of an error body read for :class:`~rafrx.errors.HTTPStatusError`.
MAX_ERROR_BODY: Final = 64 * 1024
#: Bytes of a wrong-content-type body kept as the error's snippet.
MAX_SNIPPET: Final = 2048
#: Seconds a call waits, after its terminal marker, for the body's end (so that
#: its connection can be reused) before it closes the connection and completes.
BODY_END_WAIT: Final = 0.1


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
        self.request_id: str | None = None  # the server's, for this attempt's errors
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
        awaited, which the stream does not need (:meth:`_finish_body`). The error
        keeps the id of the response being read, if one came, as the others do
        (redacted as theirs is: the server chose it)."""
        error.request_id = self.request_id
        redact_error(error, self.request.secrets)
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
                    if err.request_id is None:  # (a stream's error after its 200)
                        err.request_id = self.request_id
                    redact_error(err, self.request.secrets)
                    delay = None
                    if self.retry is not None and self.delivered == 0:
                        delay = self.retry.delay(err, attempt)
                    if delay is None:
                        if attempt > 1:
                            note_attempts(err, attempt)
                        # (kept by the user: the call goes with it; and no local holds it)
                        self._end(self._salvaged(let_go(err)))
                        return
                    # The failed attempt's metadata, what its end owes, its id: never seen.
                    self.decoder = self.request_id = None
                    if self.held:
                        self.held.clear()
                    self._log_retry(err, attempt, delay)
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

    def _log_retry(self, error: RafrxError, attempt: int, delay: float) -> None:
        """Log, at INFO as openai-python does, that attempt ``attempt`` failed with
        ``error`` and that the request goes again in ``delay`` seconds."""
        retry = self.retry
        _log.info(
            "Retrying request to %s in %.2f seconds: attempt %d of %d failed (%s)",
            redact(self.request.safe_url, self.request.secrets),
            delay,
            attempt,
            attempt if retry is None else retry.max_attempts,
            _why_retried(error),
        )

    async def _attempt(self) -> None:
        self.decoder = None  # (a failed attempt's owes nothing: it was retried)
        self.request_id = None
        response = await self._send()
        self.response = response
        self.request_id = request_id(response.headers)
        if response.status == 407 and (via := self._proxy()) is not None:
            raise self._proxy_refused(via, "request", response.status, response.reason)
        if response.status >= 300:  # redirects are not followed (see stream_updates)
            raise await self._status_error(response)
        head = b""  # (read to see what a body that is said not to be an event stream is)
        content_type = response.headers.get("Content-Type")
        try:
            check_content_type(content_type)
        except ContentTypeError:
            head = await self._head(response)
            if not sniff_event_stream(head):
                snippet, cut = await self._read_text(response, MAX_SNIPPET, head)
                # (e.g. a server that will not stream, in JSON)
                said = provider_error(snippet, cut=cut)[0]
                raise ContentTypeError(
                    f"expected Content-Type text/event-stream, got {content_type!r} "
                    f"from {self.request.safe_url}" + (f": {said}" if said else ""),
                    status=response.status,
                    body=snippet,
                ) from None
            _log.warning(
                "%s sent an event stream as Content-Type %r: decoding it",
                self.request.safe_url,
                content_type and redact(content_type, self.request.secrets),  # (the server's)
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
            async with asyncio.timeout(None) as deadline:
                expiry = _expire_after(deadline, timeouts.first_byte)
                try:
                    proxy, headers = await self.sessions.from_environment(
                        request.url, request.headers
                    )
                    return await session.post(
                        request.url,
                        data=_json_body(session, request.payload),
                        headers=headers,
                        proxy=proxy,
                        allow_redirects=False,
                        raise_for_status=False,  # ours to build, whatever the session says
                        timeout=aiohttp.ClientTimeout(
                            total=None, connect=None, sock_connect=timeouts.connect, sock_read=None
                        ),
                    )
                finally:
                    if expiry is not None:
                        expiry.cancel()
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
        if isinstance(exc, aiohttp.ClientProxyConnectionError):  # (its host: the proxy's)
            proxy = _host_and_port(exc.host, exc.port)
            message = f"cannot connect to the proxy {proxy} (sending to {url}): {exc.os_error}"
            return TransportError(redact(message, secrets))
        if isinstance(exc, aiohttp.ClientConnectorError):
            return TransportError(redact(f"cannot connect to {url}: {exc.os_error}", secrets))
        if isinstance(exc, TimeoutError):  # aiohttp.ServerTimeoutError too
            timeouts = self._describe_connect_timeout()
            via = self._proxy()
            where = f"the proxy {via} or from {url} through it" if via else url
            return ConnectTimeout(f"no response from {where} within {timeouts}")
        if isinstance(exc, aiohttp.ClientConnectionError | OSError):
            message = f"connection to {url} failed: {type(exc).__name__}: {exc}"
            return TransportError(redact(message, secrets))
        if isinstance(exc, aiohttp.ClientHttpProxyError):  # (the proxy's answer to CONNECT)
            return self._proxy_refused(self._proxy(), "tunnel", exc.status, exc.message)
        if isinstance(exc, aiohttp.ClientResponseError):  # not HTTP, a bad header
            # exc.message only: str(exc) and repr(exc) carry the full URL and the headers.
            message = f"invalid HTTP response from {url}: {type(exc).__name__}"
            detail = f"{message}: {exc.message}" if exc.message else message
            return ProtocolError(redact(detail, secrets))
        if isinstance(exc, ValueError):  # a request aiohttp cannot build (a bad header ...)
            detail = type(exc).__name__
            if not isinstance(exc, UnicodeError):  # whose text quotes the URL's password
                detail = f"{detail}: {exc}"
            message = f"cannot send the request to {url}: {detail}{self._added_credentials(exc)}"
            return TransportError(redact(message, secrets), retryable=False)
        return TransportError(redact(f"request to {url} failed: {type(exc).__name__}", secrets))

    def _added_credentials(self, refusal: ValueError) -> str:
        """Why aiohttp refused to send the request (``refusal``) when a given session adds
        a login beside the request's ``Authorization`` (its ``auth=``, or with
        ``trust_env`` the host's ``.netrc`` login), and what to do; else ``""``. (rafrx
        cannot take the login off a request without changing the user's session; the
        pool's own sessions add none.)"""
        session, request = self.session, self.request
        if session is None or "AUTHORIZATION" not in str(refusal):
            return ""
        if not has_authorization(request.headers):
            return ""
        beside = "which aiohttp refuses beside the Authorization header of api_key or headers="
        if session.auth is not None:
            return f" (the given aiohttp session sends its auth= login, {beside}: give one of them)"
        if session.trust_env and netrc_secrets(request.url.host):
            return (
                f" (the given aiohttp session adds the .netrc login of {request.url.host} "
                f"(trust_env=True), {beside}: give a session without trust_env (a proxy as "
                "its proxy=), or drop that .netrc entry)"
            )
        return ""

    def _proxy_refused(
        self, via: str | None, what: str, status: int, reason: str | None
    ) -> TransportError:
        """The error of a proxy (``host:port``, if known) that answered ``status`` to the
        ``what`` (``tunnel``: its ``CONNECT``; ``request``: a plain-HTTP request it
        answers itself), without its page: it may quote the credentials it was sent."""
        named = f"the proxy {via}" if via else "the proxy"
        message = f"{named} refused the {what} to {self.request.safe_url}: HTTP {status}"
        return TransportError(
            redact(f"{message} {reason}" if reason else message, self.request.secrets),
            status=status,
            retryable=is_retryable(None, None, status),
        )

    def _proxy(self) -> str | None:
        """``host:port`` of the proxy the request went to (the session's own, else
        the environment's when the client's sessions trust it), or ``None``."""
        session = self.session
        proxy = session_proxy(session)
        if proxy is None and session is not None and self.sessions.trust_env:
            with contextlib.suppress(LookupError):
                proxy, _ = get_env_proxy_for_url(self.request.url)
        if proxy is None:
            return None
        return _host_and_port(proxy.host or "?", proxy.port)

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
                f"after {self.delivered} update(s): {why_broken(exc)}"
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
    ) -> tuple[str, bool]:
        """The body's first ``limit`` bytes (after ``head``, read already), as text, and
        whether the body may go on after them: it was cut there."""
        data = await self._read(response, head, lambda data: len(data) < limit)
        text = redact_cut(body_text(data[:limit], response), self.request.secrets)
        return text, len(data) >= limit

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
        body, cut = await self._read_text(response, MAX_ERROR_BODY)
        self._release()
        headers: CIMultiDictProxy[str] = response.headers
        if response.status < 400:
            return HTTPStatusError(response.status, body=body, message=self._redirect(response))
        message, error_type, code = provider_error(body, cut=cut)
        reason = None
        if message is None and response.content_type == "text/plain":
            reason = first_line(body)  # a gateway's or a proxy's reason, in words
        error = HTTPStatusError(
            response.status,
            body=body,
            message=None if reason is None else f"HTTP {response.status}: {reason}",
            provider_message=message,
            error_type=error_type,
            code=code,
            retry_after=parse_retry_after(headers),
            request_id=request_id(headers),
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


def _why_retried(error: RafrxError) -> str:
    """Why an attempt failed, in words that hold nothing the server chose: its
    status, else its class (``HTTP 429``, ``TransportError``)."""
    return type(error).__name__ if error.status is None else f"HTTP {error.status}"


def _expire_after(deadline: asyncio.Timeout, seconds: float | None) -> asyncio.TimerHandle | None:
    """Make ``deadline`` expire ``seconds`` from now, one loop iteration late: headers
    that came in time while the loop was busy elsewhere wake their task first (an
    expiry due at once would cancel it), as the body's idle timeout lets bytes count."""
    if seconds is None:
        return None
    loop = asyncio.get_running_loop()
    return loop.call_later(seconds, lambda: deadline.reschedule(loop.time()))


def _host_and_port(host: str, port: int | None) -> str:
    """``host:port``, an IPv6 address in brackets (no user name, no password).

    Example:
        >>> _host_and_port("::1", 3128), _host_and_port("proxy.example", 8080)
        ('[::1]:3128', 'proxy.example:8080')
    """
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


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
