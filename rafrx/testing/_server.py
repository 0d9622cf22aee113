""":class:`LLMServer`: a real aiohttp server on 127.0.0.1 that speaks three LLM APIs."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import reprlib
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from rafrx.errors import error_text
from rafrx.testing._recorded import RecordedRequest
from rafrx.testing._render import WIRE_FORMATS
from rafrx.testing._responses import DEFAULT_REPLY, Fault, Replay, Reply, ServerResponse
from rafrx.testing._serve import NOT_STREAMING, error_response, serve

if TYPE_CHECKING:
    from rafrx.testing._thread import ServerThread

__all__ = ["LLMServer", "Script"]

_log = logging.getLogger("rafrx.testing")

Script: TypeAlias = Callable[[RecordedRequest], "ServerResponse | Awaitable[ServerResponse]"]
"""A function choosing the answer to a request (sync or async)."""

_S = TypeVar("_S", bound="Script | None")

#: Seconds :meth:`LLMServer.close` gives running handlers before cancelling them.
_SHUTDOWN_TIMEOUT = 0.5

#: Pending connections the listening socket queues (the kernel caps it at
#: ``somaxconn``); aiohttp's default of 128 drops SYNs when a thousand
#: clients connect at once, which stalls them for seconds.
_BACKLOG = 2048

#: The largest request body read (aiohttp's default, 1 MiB, is less than a
#: long conversation); a larger one gets HTTP 413 in the provider's error shape.
_MAX_REQUEST_BYTES = 64 * 1024 * 1024


def _check_response(response: object) -> None:
    """Raise ``TypeError`` unless ``response`` is one the server can answer with."""
    if not isinstance(response, Reply | Replay | Fault):
        raise TypeError(
            f"the server answers with a Reply, Replay or Fault, not {response!r}"
            + (" (a function goes to script())" if callable(response) else "")
        )


def _script_error(exc: Exception) -> str:
    """The message of the HTTP 500 answering a script that raised ``exc``."""
    name, text = type(exc).__name__, error_text(exc)
    if text:
        return f"script raised {name}: {text}"
    ran_out = " (an iterator of replies ran out?)" if isinstance(exc, StopIteration) else ""
    return f"script raised {name}{ran_out}"


#: The deepest nesting of arrays and objects a request body may have: a body the
#: server takes is one it can answer (the answer writes parts of it back as JSON,
#: which recursion bounds too), and the limit is the same on every stack.
_MAX_BODY_DEPTH = 512

#: The message of the HTTP 400 a body nested deeper than ``_MAX_BODY_DEPTH`` gets.
_TOO_DEEP = (
    "The request body is JSON nested too deeply: this test server takes"
    f" at most {_MAX_BODY_DEPTH} levels of arrays and objects."
)

#: The message of the HTTP 400 a body that is not JSON gets (as OpenAI words it).
_NOT_JSON = "We could not parse the JSON body of your request: it is not JSON."


def _parse_body(raw: bytes) -> tuple[Any, str | None]:
    """A request body's JSON (``None`` when it is empty or no JSON), and why it
    cannot be answered: it is not JSON, or nested more than ``_MAX_BODY_DEPTH``
    levels deep.

    Example:
        >>> _parse_body(b'{"stream": true}'), _parse_body(b"")
        (({'stream': True}, None), (None, None))
        >>> _parse_body(b"not json")[1]
        'We could not parse the JSON body of your request: it is not JSON.'
    """
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        return None, _NOT_JSON
    except RecursionError:
        return None, _TOO_DEEP
    # (a body with fewer brackets than the limit, strings' included, is not that deep)
    if raw.count(b"[") + raw.count(b"{") > _MAX_BODY_DEPTH and _nested_deeper_than(
        body, _MAX_BODY_DEPTH
    ):
        return None, _TOO_DEEP
    return body, None


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects more than ``limit`` levels deep,
    found level by level, without recursion.

    Example:
        >>> _nested_deeper_than({"a": [[1]]}, 3), _nested_deeper_than({"a": [[1]]}, 2)
        (False, True)
    """
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return bool(level)


def _streaming(body: Any) -> bool:
    """Whether a request body asks for a stream (``"stream": true``)."""
    return isinstance(body, dict) and body.get("stream") is True


class _CountingServer(web.Server):
    """An aiohttp low-level server that reports connections opening and closing,
    keeps their transports until they are lost, and reads request bodies up to
    ``_MAX_REQUEST_BYTES``."""

    def __init__(self, owner: LLMServer, **kwargs: Any) -> None:
        super().__init__(owner._handle, request_factory=self._request, **kwargs)
        self._owner = owner
        self._transports: dict[RequestHandler, asyncio.Transport] = {}

    def _request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        loop = asyncio.get_running_loop()
        return web.BaseRequest(
            message, payload, protocol, writer, task, loop, client_max_size=_MAX_REQUEST_BYTES
        )

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self._transports[handler] = transport
        self._owner._connection_opened()

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self._transports.pop(handler, None)
        self._owner._connection_closed()

    def abort_connections(self) -> None:
        """Abort the connections not lost yet, discarding what they have not sent."""
        for transport in list(self._transports.values()):
            transport.abort()


class LLMServer:
    """A local LLM server: OpenAI chat, Anthropic Messages and OpenAI Responses.

    Endpoints: ``POST {url}/v1/chat/completions``, ``POST {url}/v1/messages``
    and ``POST {url}/v1/responses``. Each request takes the next response
    from the queue (:meth:`enqueue`), else asks the script (:meth:`script`),
    else gets :attr:`default`. A :class:`~rafrx.testing.Reply` is rendered in
    the wire format of the endpoint that was hit. Request bodies up to 64 MiB
    are read and recorded; a larger one is recorded without its body
    (``json`` is ``None``) and gets HTTP 413 in the provider's error shape.

    The server only streams, as rafrx's clients always ask: a request whose
    JSON body lacks ``"stream": true`` is recorded, then answered HTTP 400 in
    the provider's error shape saying so, and takes no answer from the queue;
    so is one whose body is not JSON, or nests arrays and objects more than
    512 levels deep (recorded with ``json`` ``None``), with a message saying
    which. Every body the server takes, up to that depth, gets its answer.
    Every answer carries the provider's request id header (Anthropic's
    ``request-id``, OpenAI's ``x-request-id``); an Anthropic error's body
    names it too (``request_id``), as Anthropic's does.

    Args:
        host: The interface to listen on.
        port: The port; ``0`` picks a free one.
        default: The answer when the queue is empty and no script is set
            (a ``TypeError`` when it is not a response).
        keep_requests: How many of the latest requests :attr:`requests` keeps
            (``None``: all of them, for tests), and of the latest exceptions
            :attr:`script_errors` keeps; :attr:`request_count` counts every
            request. ``rafrx serve``, which runs for days, keeps none.

    Example:
        >>> import asyncio
        >>> import aiohttp
        >>> from rafrx.testing import Reply
        >>> async def main() -> tuple[int, bool, int]:
        ...     async with LLMServer() as server, aiohttp.ClientSession() as http:
        ...         server.enqueue(Reply(text="Hi!"))
        ...         body = {"model": "claude-test", "stream": True}
        ...         async with http.post(server.url + "/v1/messages", json=body) as resp:
        ...             body = await resp.read()
        ...     return resp.status, b"message_stop" in body, len(server.requests)
        >>> asyncio.run(main())
        (200, True, 1)
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        default: ServerResponse = DEFAULT_REPLY,
        keep_requests: int | None = None,
    ) -> None:
        if keep_requests is not None and keep_requests < 0:
            raise ValueError(f"keep_requests must be at least 0 or None, got {keep_requests}")
        self.host = host
        self._requested_port = port  # 0: a free one, on each start
        self._port = port
        self.default = default
        self.requests: list[RecordedRequest] = []
        self.request_count = 0  # every request since the start (or reset()), kept or not
        self.keep_requests = keep_requests
        self.connections_opened = 0
        self.connections_closed = 0
        self.script_errors: list[Exception] = []  # kept as requests are (keep_requests)
        self._failed_assertion: AssertionError | None = None  # for close() to raise
        self._queue: deque[ServerResponse] = deque()
        self._script: Script | None = None
        self._lock = threading.Lock()
        self._runner: web.ServerRunner | None = None
        self._server: _CountingServer | None = None
        self._closing: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one it was started on

    def __repr__(self) -> str:
        where = self.url if self._runner is not None else "not started"
        return f"LLMServer({where}, requests={self.request_count}, queued={len(self._queue)})"

    # ------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The port listened on (known once started)."""
        if self._runner is None:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:54321``."""
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        return f"http://{host}:{self.port}"

    @property
    def started(self) -> bool:
        """Whether the server is listening."""
        return self._runner is not None

    async def start(self) -> LLMServer:
        """Start listening on the running loop; returns the server."""
        if self._runner is not None:
            raise RuntimeError("the server is already started")
        self._closing = asyncio.Event()
        self._changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        server = _CountingServer(self, handler_cancellation=True, access_log=None)
        runner = web.ServerRunner(server, shutdown_timeout=_SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self._requested_port, backlog=_BACKLOG)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._port = int(runner.addresses[0][1])
        self._runner, self._server = runner, server
        return self

    async def close(self) -> None:
        """Stop: end stalls, close every connection, release the port.

        A response still running after a short grace period is cancelled; a
        connection whose client stopped reading is aborted, its unsent bytes
        discarded.

        Raises:
            AssertionError: A script's assertion failed since the server started
                (or was :meth:`reset`): the first such, raised again once the
                server is closed, so the test fails even when the client it
                tests retried or handled the HTTP 500 it got.
        """
        runner, server = self._runner, self._server
        if runner is None or server is None:
            return
        await self._stop(runner, server)
        failed, self._failed_assertion = self._failed_assertion, None
        if failed is not None:
            raise failed

    async def _stop(self, runner: web.ServerRunner, server: _CountingServer) -> None:
        """Close the connections and release the port."""
        self._runner = self._server = None
        assert self._closing is not None
        self._closing.set()
        await runner.cleanup()
        # cleanup() closes each connection once its send buffer drains: never,
        # if the client stopped reading.
        server.abort_connections()
        await asyncio.sleep(0)  # abort() closes the sockets on the next loop iteration

    async def __aenter__(self) -> LLMServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.close()
        except AssertionError:
            if exc is None or isinstance(exc, Exception):  # (not over a cancellation)
                raise

    @classmethod
    def in_thread(
        cls,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        default: ServerResponse = DEFAULT_REPLY,
        keep_requests: int | None = None,
    ) -> ServerThread:
        """Run a server on its own event loop in a daemon thread, for sync code.

        The arguments are the constructor's.

        Example:
            >>> import urllib.request
            >>> with LLMServer.in_thread() as server:
            ...     request = urllib.request.Request(server.url + "/v1/chat/completions",
            ...                                      data=b'{"stream": true}', method="POST")
            ...     with urllib.request.urlopen(request) as response:
            ...         body = response.read()
            >>> body.endswith(b"data: [DONE]\\n\\n")
            True
        """
        from rafrx.testing._thread import ServerThread

        return ServerThread(cls(host, port, default=default, keep_requests=keep_requests))

    # ------------------------------------------------------------ behaviour

    @property
    def default(self) -> ServerResponse:
        """The answer when the queue is empty and no script is set.

        Raises:
            TypeError: (on assignment) it is not a :class:`~rafrx.testing.Reply`,
                :class:`~rafrx.testing.Replay` or :class:`~rafrx.testing.Fault`.
        """
        return self._default

    @default.setter
    def default(self, response: ServerResponse) -> None:
        _check_response(response)
        self._default = response

    def enqueue(self, *responses: ServerResponse) -> None:
        """Queue answers for the next requests, first in first out (thread-safe).

        Raises:
            TypeError: one of ``responses`` is not a :class:`Reply`,
                :class:`Replay` or :class:`Fault` (a script goes to :meth:`script`).
        """
        for response in responses:
            _check_response(response)
        with self._lock:
            self._queue.extend(responses)

    @property
    def queued(self) -> int:
        """How many queued answers are still unused."""
        return len(self._queue)

    def script(self, fn: _S) -> _S:
        """Answer requests with ``fn(request)`` when the queue is empty.

        ``fn`` gets the :class:`~rafrx.testing.RecordedRequest` (messages,
        tools, :attr:`~rafrx.testing.RecordedRequest.last_role`) and returns
        a response, or an awaitable of one. Usable as a decorator; ``None``
        removes the script. An exception in ``fn``, or a return value that is
        not a :class:`~rafrx.testing.Reply`, :class:`~rafrx.testing.Replay`
        or :class:`~rafrx.testing.Fault`, becomes an HTTP 500 whose message
        names it; the exception is kept in :attr:`script_errors`. A failed
        ``assert`` in ``fn`` is the test's own: :meth:`close` (the end of
        ``async with``, of a :class:`~rafrx.testing.ServerThread`) raises it
        again, so the test fails with it even when the client it tests
        retried or handled the 500.

        Raises:
            TypeError: ``fn`` is neither callable nor ``None`` (a response goes
                to :meth:`enqueue`, or to :attr:`default` to answer every request).

        Example:
            >>> from rafrx.testing import Reply, ToolCallSpec
            >>> server = LLMServer()
            >>> @server.script
            ... def turn(request):
            ...     if request.last_role == "tool":
            ...         return Reply(text="Done.")
            ...     return Reply(tool_calls=[ToolCallSpec("search", {"q": "rx"})])
        """
        if fn is not None and not callable(fn):
            raise TypeError(
                f"script() takes a function of the request, not {reprlib.repr(fn)}"
                " (a response goes to enqueue(), or to default for every request)"
            )
        self._script = fn
        return fn

    def reset(self) -> None:
        """Forget queued answers, the script, recorded requests and script errors."""
        with self._lock:
            self._queue.clear()
            self._script = None
            self.requests.clear()
            self.request_count = 0
            self.script_errors.clear()
            self._failed_assertion = None

    # ------------------------------------------------------------ connections

    @property
    def open_connections(self) -> int:
        """Connections currently open."""
        return self.connections_opened - self.connections_closed

    def _connection_opened(self) -> None:
        self.connections_opened += 1
        self._notify()

    def _connection_closed(self) -> None:
        self.connections_closed += 1
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait until ``predicate()`` holds; checked after every request and
        connection change. Await it on the server's event loop (for a server
        in a thread: ``thread.run(server.wait_until(...))``): from another
        loop, it is a ``RuntimeError`` unless the predicate holds already.

        Raises:
            TimeoutError: It did not hold within ``timeout`` seconds.
            RuntimeError: The server is not started, or runs on another loop.
        """
        changed = self._changed
        if changed is None:
            raise RuntimeError("the server is not started")
        if not predicate() and asyncio.get_running_loop() is not self._loop:  # (no wake-up)
            raise RuntimeError(
                "wait on the server's event loop, not another one"
                " (a server in a thread: thread.run(server.wait_requests(...)))"
            )
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                while not predicate():
                    changed.clear()
                    await changed.wait()
        except TimeoutError:
            if not deadline.expired():  # (the predicate's own)
                raise
            raise TimeoutError(f"the condition did not hold within {timeout} s") from None

    async def wait_connections_closed(self, timeout: float = 5.0) -> None:
        """Wait until every connection made so far is closed.

        Raises:
            TimeoutError: Some stayed open for ``timeout`` seconds; the
                message says how many.
        """
        try:
            await self.wait_until(lambda: self.open_connections == 0, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"{self.open_connections} connection(s) still open after {timeout} s"
            ) from None

    async def wait_requests(self, count: int, timeout: float = 5.0) -> None:
        """Wait until at least ``count`` requests have arrived.

        Raises:
            TimeoutError: Fewer came within ``timeout`` seconds; the message
                says how many.
        """
        try:
            await self.wait_until(lambda: self.request_count >= count, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"{self.request_count} of {count} requests came within {timeout} s"
            ) from None

    # ------------------------------------------------------------ handling

    async def _next_response(self, request: RecordedRequest) -> ServerResponse:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            script = self._script
        if script is None:
            return self.default
        try:
            answer = script(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            _log.exception("LLMServer script failed")
            self._keep_script_error(exc)
            return Fault.status(500, message=_script_error(exc))
        if not isinstance(answer, Reply | Replay | Fault):
            message = f"script returned {reprlib.repr(answer)}, not a Reply, Replay or Fault"
            _log.error("LLMServer %s", message)
            return Fault.status(500, message=message)
        return answer

    def _keep_script_error(self, exc: Exception) -> None:
        """Keep what a script raised; the first failed assertion is for :meth:`close`."""
        with self._lock:
            self.script_errors.append(exc)
            if self.keep_requests is not None and len(self.script_errors) > self.keep_requests:
                del self.script_errors[: len(self.script_errors) - self.keep_requests]
            if isinstance(exc, AssertionError) and self._failed_assertion is None:
                self._failed_assertion = exc

    def _record_request(self, request: web.BaseRequest, body: Any) -> RecordedRequest:
        """Record ``request`` with its parsed ``body``; tell the waiters."""
        recorded = RecordedRequest.build(
            request.path, request.headers.items(), body, request.method, request.query.items()
        )
        self._record(recorded)
        self._notify()
        return recorded

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.request_count += 1
            self.requests.append(request)
            if self.keep_requests is not None and len(self.requests) > self.keep_requests:
                del self.requests[: len(self.requests) - self.keep_requests]

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as too_large:
            self._record_request(request, None)
            shape = WIRE_FORMATS.get(request.path, "openai-chat")
            return error_response(shape, 413, too_large.text or "Request too large")
        body, unparsable = _parse_body(raw)
        recorded = self._record_request(request, body)
        wire_format = WIRE_FORMATS.get(request.path)
        if wire_format is None:
            message = f"no endpoint {request.method} {request.path}"
            return error_response("openai-chat", 404, message)
        if request.method != "POST":
            return error_response(wire_format, 405, f"{request.method} {request.path}: use POST")
        if unparsable is not None:
            return error_response(wire_format, 400, unparsable)
        if not _streaming(body):
            return error_response(wire_format, 400, NOT_STREAMING)
        response = await self._next_response(recorded)
        assert self._closing is not None
        return await serve(request, response, wire_format, body, self._closing)
