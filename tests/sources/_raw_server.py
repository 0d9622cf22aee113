"""A small aiohttp server of the tests' own, for what LLMServer does not show:
each request's raw target, path, query, headers and body, answered by a handler."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
from aiohttp import web
from multidict import CIMultiDict

from rafrx import ChatMessage, collect_agent_response, convert
from rafrx.errors import RafrxError
from rafrx.response import AgentResponse
from rafrx.sources.clients import LLMClient
from rafrx.testing import Reply, render

USER = [ChatMessage.user("Hi")]
KEY = "sk-test-0123456789abcdefghijklmnop"


@attrs.define
class Seen:
    """One request a :func:`raw_server` received."""

    method: str
    target: str  # the request target as sent (absolute-form through a proxy)
    path: str
    query: dict[str, str]
    headers: CIMultiDict[str]
    body: Any


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def sse(text: str = "ok", fmt: Any = "openai-chat") -> Handler:
    """A handler answering every request with ``text`` streamed in ``fmt``."""

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=render(Reply(text=text), fmt), content_type="text/event-stream")

    return handle


@contextlib.asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[Seen]]]:
    """An aiohttp server on 127.0.0.1 that records each request (any method, any
    path), then lets ``handler`` answer it; yields its root URL and the records."""
    seen: list[Seen] = []

    async def record(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen.append(
            Seen(
                request.method,
                request.raw_path,
                request.path,
                dict(request.query),
                CIMultiDict(request.headers),
                json.loads(raw) if raw else None,
            )
        )
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def ask(client: LLMClient, **params: Any) -> tuple[AgentResponse | None, RafrxError | None]:
    """One call through ``client``: its response, or the error it ended with."""
    try:
        async with asyncio.timeout(10):  # against hangs only
            updates = client.stream(USER, **params).pipe(convert())
            return await collect_agent_response(updates), None
    except RafrxError as err:
        return None, err
