"""Write one :data:`~rafrx.testing.ServerResponse` onto an aiohttp request.

Replies are rendered for the endpoint, replays chunked or paced, and faults
done for real: a dropped connection is closed (or reset) under the client, a
stall is silence on an open socket.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import uuid
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from aiohttp import web

from rafrx.testing._render import WireFormat, error_body, render, render_events
from rafrx.testing._responses import Body, Fault, Replay, Reply, ServerResponse

__all__ = ["FAULT_REPLY", "serve"]

#: The body faults stream around when they are given none.
FAULT_REPLY = Reply(text="The quick brown fox jumps over the lazy dog.", chunk_size=8)

_SSE = "text/event-stream; charset=utf-8"
_HUGE_WRITE = 64 * 1024


class _ServerClosing(Exception):
    """The server is shutting down: end the response now."""


class _Stream:
    """A streamed response that knows how to pause, drop and give up."""

    def __init__(self, request: web.BaseRequest, closing: asyncio.Event) -> None:
        self.request = request
        self.closing = closing
        self.response = web.StreamResponse(
            headers={
                "Content-Type": _SSE,
                "Cache-Control": "no-cache",
                "x-request-id": f"req_{uuid.uuid4().hex}",
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
        return web.Response(
            status=response.status_code,
            body=response.data or b"",
            headers={"Content-Type": response.content_type or "text/html"},
        )
    request_json = body if isinstance(body, Mapping) else {}
    stream = _Stream(request, closing)
    try:
        if isinstance(response, Reply):
            await stream.open()
            events = render_events(response, wire_format, request_json)
            await _events(stream, events, response.delay)
        elif isinstance(response, Replay):
            await stream.open()
            await _replay(stream, response)
        else:
            await _fault(stream, response, _body(response.body, wire_format, request_json))
    except (ConnectionError, _ServerClosing):
        stream.drop(reset=False)
    return stream.response


async def _events(stream: _Stream, events: list[bytes], delay: float) -> None:
    for i, event in enumerate(events):
        if i and delay:
            await stream.sleep(delay)
        await stream.write(event)


def _split_events(data: bytes) -> list[bytes]:
    pieces: list[bytes] = []
    start = 0
    while True:
        end = _event_end(data, start)
        if end < 0:
            break
        pieces.append(data[start:end])
        start = end
    if start < len(data):
        pieces.append(data[start:])
    return pieces


def _event_end(data: bytes, start: int) -> int:
    ends = [data.find(sep, start) + len(sep) for sep in _BLANK_LINES if data.find(sep, start) >= 0]
    return min(ends) if ends else -1


_BLANK_LINES = (b"\n\n", b"\r\n\r\n", b"\r\r")


async def _replay(stream: _Stream, replay: Replay) -> None:
    data = replay.read()
    if replay.pacing:
        await _events(stream, _split_events(data), replay.delay)
        return
    size = replay.chunk_size or max(len(data), 1)
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    await _events(stream, chunks, replay.delay)


def _body(body: Body | None, wire_format: WireFormat, request_json: Mapping[str, Any]) -> bytes:
    if body is None:
        body = FAULT_REPLY
    if isinstance(body, Reply):
        return render(body, wire_format, request_json)
    if isinstance(body, Replay):
        return body.read()
    return body


def _status(fault: Fault, wire_format: WireFormat) -> web.Response:
    headers = dict(fault.headers)
    if fault.retry_after is not None:
        headers["Retry-After"] = fault.retry_after
    payload = fault.error_body
    if payload is None:
        message = fault.message or _reason(fault.status_code)
        payload = error_body(wire_format, fault.status_code, message, fault.error_type)
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


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


async def _fault(stream: _Stream, fault: Fault, data: bytes) -> None:
    if fault.kind == "drop_after":
        await stream.open()
        await stream.write(data[: fault.at or 0])
        stream.drop(fault.reset)
    elif fault.kind == "stall":
        if fault.at is None:
            await stream.sleep(fault.seconds)
            await stream.open()
            await stream.write(data)
        else:
            await stream.open()
            await stream.write(data[: fault.at])
            await stream.sleep(fault.seconds)
            await stream.write(data[fault.at :])
    elif fault.kind == "garbage":
        await stream.open()
        await stream.write(_with_garbage(fault, data))
    elif fault.kind == "huge_line":
        await stream.open()
        if fault.body is not None:
            end = _event_end(data, 0)
            await stream.write(data[: max(end, 0)])
        await stream.write(b"data: ")
        for start in range(0, fault.size, _HUGE_WRITE):
            await stream.write(b"x" * min(_HUGE_WRITE, fault.size - start))
    else:  # pragma: no cover - the kinds are a closed set
        raise ValueError(f"unknown fault kind {fault.kind!r}")


def _with_garbage(fault: Fault, data: bytes) -> bytes:
    junk = fault.data
    if junk is None:
        rng = random.Random(fault.seed)
        junk = bytes(rng.choice(_NOT_NEWLINE) for _ in range(fault.size))
    if fault.framed:
        junk = b"data: " + junk + b"\n\n"
    at = fault.at
    if at is None:
        end = _event_end(data, 0)
        at = end if end >= 0 else 0
    return data[:at] + junk + data[at:]


_NOT_NEWLINE = bytes(b for b in range(256) if b not in (0x0A, 0x0D))
