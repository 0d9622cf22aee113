"""Write one :data:`~rafrx.testing.ServerResponse` onto an aiohttp request.

Replies are rendered for the endpoint, replays chunked or paced, and faults
done for real: a dropped connection is closed (or reset) under the client, a
stall is silence on an open socket. A body is rendered (or read) whole before
the response headers go out, then written as paced writes; a fault keeps that
pacing and strikes at its byte offset.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import socket
import struct
import uuid
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any, TypeAlias

from aiohttp import web
from multidict import CIMultiDict

from rafrx.testing._render import WireFormat, error_body, render_events
from rafrx.testing._responses import Body, Fault, Replay, Reply, ServerResponse

__all__ = ["FAULT_REPLY", "NOT_STREAMING", "error_response", "request_id_header", "serve"]

#: The body faults stream around when they are given none.
FAULT_REPLY = Reply(text="The quick brown fox jumps over the lazy dog.", chunk_size=8)

#: The message of the HTTP 400 a request without ``"stream": true`` gets.
NOT_STREAMING = (
    'This test server only streams: set "stream": true in the request body '
    "(it answers no non-streaming request)."
)

_SSE = "text/event-stream; charset=utf-8"
_HUGE_WRITE = 64 * 1024

_log = logging.getLogger("rafrx.testing")

_Write: TypeAlias = tuple[float, bytes]
"""One write of a body: the seconds to wait first, then the bytes."""

#: Where an SSE event ends: a line ending, then an empty line. Line endings
#: are CRLF, LF or CR; a CR right before an LF is part of a CRLF.
_EVENT_END = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r)")


class _ServerClosing(Exception):
    """The server is shutting down: end the response now."""


class _Stream:
    """A streamed response that knows how to pause, drop and give up."""

    def __init__(
        self, request: web.BaseRequest, closing: asyncio.Event, wire_format: WireFormat
    ) -> None:
        self.request = request
        self.closing = closing
        self.response = web.StreamResponse(
            headers={
                "Content-Type": _SSE,
                "Cache-Control": "no-cache",
                **request_id_header(wire_format),
            }
        )

    async def open(self) -> None:
        await self.response.prepare(self.request)

    async def write(self, data: bytes) -> None:
        if data:
            await self.response.write(data)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.closing.is_set():
            raise _ServerClosing
        try:
            await asyncio.wait_for(self.closing.wait(), seconds)
        except TimeoutError:
            return
        raise _ServerClosing

    def drop(self, reset: bool) -> None:
        transport = self.request.transport
        if transport is None:
            return
        if reset:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        else:
            transport.close()


async def serve(
    request: web.BaseRequest,
    response: ServerResponse,
    wire_format: WireFormat,
    body: Any,
    closing: asyncio.Event,
) -> web.StreamResponse:
    """Answer ``request`` with ``response`` in ``wire_format``.

    A body that cannot be rendered or read (a missing :class:`Replay` file …)
    is an HTTP 500 naming the error, sent instead of the 200.

    Args:
        request: The aiohttp request.
        response: What to answer.
        wire_format: The format of the endpoint that was hit.
        body: The request's parsed JSON (for model name and usage estimate).
        closing: Set when the server shuts down; pending stalls end at once.
    """
    if isinstance(response, Fault) and response.kind == "status":
        return _status(response, wire_format)
    if isinstance(response, Fault) and response.kind == "wrong_content_type":
        return _wrong_content_type(response, wire_format)
    source = response.body if isinstance(response, Fault) else response
    if source is None:
        source = FAULT_REPLY
    try:
        writes = _writes(source, wire_format, body if isinstance(body, Mapping) else {})
    except Exception as exc:
        _log.exception("LLMServer cannot serve %s", type(source).__name__)
        message = f"cannot serve the {type(source).__name__}: {type(exc).__name__}: {exc}"
        return error_response(wire_format, 500, message)
    stream = _Stream(request, closing, wire_format)
    try:
        if isinstance(response, Fault):
            await _fault(stream, response, writes)
        else:
            await stream.open()
            await _write(stream, writes)
    except (ConnectionError, _ServerClosing):
        stream.drop(reset=False)
    return stream.response


def _writes(source: Body, wire_format: WireFormat, request_json: Mapping[str, Any]) -> list[_Write]:
    """The body of ``source`` as paced writes: a reply's events ``delay`` apart,
    a replay's chunks or events ``delay`` apart, raw bytes at once."""
    if isinstance(source, Reply):
        return _paced(render_events(source, wire_format, request_json), source.delay)
    if isinstance(source, Replay):
        data = source.read()
        if source.pacing:
            return _paced(_split_events(data), source.delay)
        size = source.chunk_size or max(len(data), 1)
        return _paced((data[i : i + size] for i in range(0, len(data), size)), source.delay)
    return [(0.0, source)]


def _paced(pieces: Iterable[bytes], delay: float) -> list[_Write]:
    return [(delay if i else 0.0, piece) for i, piece in enumerate(pieces)]


async def _write(stream: _Stream, writes: Iterable[_Write]) -> None:
    for pause, data in writes:
        await stream.sleep(pause)
        await stream.write(data)


def _cut(writes: list[_Write], at: int) -> tuple[list[_Write], list[_Write]]:
    """The writes of the body's first ``at`` bytes, and those of the rest.

    A write cut in two keeps its pause before the first half; the second
    half follows without one.
    """
    sent = 0
    for i, (pause, data) in enumerate(writes):
        cut = at - sent
        if cut <= 0:
            return writes[:i], writes[i:]
        if cut < len(data):
            return [*writes[:i], (pause, data[:cut])], [(0.0, data[cut:]), *writes[i + 1 :]]
        sent += len(data)
    return writes, []


def _split_events(data: bytes) -> list[bytes]:
    """``data`` cut after each event (each blank line), in one pass."""
    pieces: list[bytes] = []
    start = 0
    for match in _EVENT_END.finditer(data):
        pieces.append(data[start : match.end()])
        start = match.end()
    if start < len(data):
        pieces.append(data[start:])
    return pieces


def _first_event_end(writes: list[_Write]) -> int:
    """The body offset right after its first event, ``0`` when it has none."""
    match = _EVENT_END.search(b"".join(data for _, data in writes))
    return match.end() if match else 0


def request_id_header(wire_format: WireFormat) -> dict[str, str]:
    """A fresh request id under the provider's header name: Anthropic's
    ``request-id``, OpenAI's ``x-request-id`` (the SDKs' ``.request_id``)."""
    name = "request-id" if wire_format == "anthropic" else "x-request-id"
    return {name: f"req_{uuid.uuid4().hex}"}


def error_response(wire_format: WireFormat, status: int, message: str) -> web.Response:
    """An HTTP error in the provider's JSON error shape, with a request id."""
    return _status(Fault.status(status, message=message), wire_format)


def _status(fault: Fault, wire_format: WireFormat) -> web.Response:
    headers: CIMultiDict[str] = CIMultiDict(fault.headers)
    for name, value in request_id_header(wire_format).items():
        headers.setdefault(name, value)
    if fault.retry_after is not None:
        headers["Retry-After"] = fault.retry_after
    payload = fault.error_body
    if payload is None:
        message = fault.message or _reason(fault.status_code)
        request_id = headers.get("request-id")  # (Anthropic's body names it too)
        payload = error_body(
            wire_format, fault.status_code, message, fault.error_type, request_id=request_id
        )
    if isinstance(payload, Mapping):
        headers.setdefault("Content-Type", "application/json")
        data = json.dumps(payload).encode()
    elif isinstance(payload, str):
        headers.setdefault("Content-Type", "text/plain; charset=utf-8")
        data = payload.encode()
    else:
        headers.setdefault("Content-Type", "application/json")
        data = payload
    return web.Response(status=fault.status_code, body=data, headers=headers)


def _wrong_content_type(fault: Fault, wire_format: WireFormat) -> web.Response:
    """The answer of a :meth:`Fault.wrong_content_type`: its body and content type,
    with the provider's request id header, as every answer of the server has."""
    headers = {"Content-Type": fault.content_type or "text/html", **request_id_header(wire_format)}
    return web.Response(status=fault.status_code, body=fault.data or b"", headers=headers)


def _reason(status: int) -> str:
    """The default error message: the reason phrase (Anthropic's for 529)."""
    if status == 529:
        return "Overloaded"
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


async def _fault(stream: _Stream, fault: Fault, writes: list[_Write]) -> None:
    if fault.kind == "drop_after":
        await stream.open()
        await _write(stream, _cut(writes, fault.at or 0)[0])
        stream.drop(fault.reset)
    elif fault.kind == "stall":
        if fault.at is None:
            await stream.sleep(fault.seconds)
            await stream.open()
            await _write(stream, writes)
        else:
            before, after = _cut(writes, fault.at)
            await stream.open()
            await _write(stream, before)
            await stream.sleep(fault.seconds)
            await _write(stream, after)
    elif fault.kind == "garbage":
        at = _first_event_end(writes) if fault.at is None else fault.at
        before, after = _cut(writes, at)
        await stream.open()
        await _write(stream, [*before, (0.0, _garbage(fault)), *after])
    elif fault.kind == "huge_line":
        await stream.open()
        if fault.body is not None:
            await _write(stream, _cut(writes, _first_event_end(writes))[0])
        await stream.write(b"data: ")
        for start in range(0, fault.size, _HUGE_WRITE):
            await stream.write(b"x" * min(_HUGE_WRITE, fault.size - start))
    else:  # pragma: no cover - the kinds are a closed set
        raise ValueError(f"unknown fault kind {fault.kind!r}")


def _garbage(fault: Fault) -> bytes:
    junk = fault.data
    if junk is None:
        rng = random.Random(fault.seed)
        junk = bytes(rng.choice(_NOT_NEWLINE) for _ in range(fault.size))
    return b"data: " + junk + b"\n\n" if fault.framed else junk


_NOT_NEWLINE = bytes(b for b in range(256) if b not in (0x0A, 0x0D))
