"""Regression tests of the bugs a "production ops" hunt found: the engineer who runs a
rafrx-based agent service and relies on its error reports (the passing pins are in
``test_production_ops_hunt.py``).

Each failed on the commit before its fix, for the reason its docstring gives. Every HTTP
exchange is real aiohttp over 127.0.0.1 (a small aiohttp app of the test's own, where
the test needs a known request id or a proxy that echoes what it was sent).
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from rafrx import ChatMessage, RafrxError, collect_agent_response
from rafrx import operators as ops
from rafrx.errors import HTTPStatusError, ProviderError
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """An aiohttp app on 127.0.0.1 answering every path with ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def failure(results: object) -> RafrxError:
    try:
        await collect_agent_response(results)  # type: ignore[arg-type]
    except RafrxError as err:
        return err
    raise AssertionError("the call succeeded")


ANTHROPIC_OVERLOADED_MIDSTREAM = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_01","type":"message",'
    b'"role":"assistant","model":"claude-x","content":[],"stop_reason":null,'
    b'"usage":{"input_tokens":12,"output_tokens":1}}}\n\n'
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}\n\n'
    b"event: error\n"
    b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
)


@pytest.mark.asyncio
async def test_a_mid_stream_provider_error_keeps_the_responses_request_id() -> None:
    """The request id of a stream that fails after its 200 is lost.

    What the user does: a service calls Anthropic and the stream answers 200 with
    ``request-id: req_011CSupport``, sends some text, then an ``event: error``
    ``overloaded_error``. The service logs the error and opens a support ticket.

    What happens: the ``ProviderError`` has no ``request_id`` (no such attribute), and
    neither its message, its body nor its partial holds the id. The same is true of
    ``StreamInterrupted``, ``IdleTimeout`` and ``IncompleteStream`` from a 200 stream.
    Only ``HTTPStatusError`` keeps it (``_http.py`` reads it only in ``_status_error``).

    What should happen: the error keeps the id of the response it came from, as
    ``HTTPStatusError.request_id`` does.

    Why that is right: ``HTTPStatusError.request_id`` is documented as "what the
    providers' support asks for". Anthropic's errors page says: "Every API response
    includes a unique request-id header ... When contacting support about a specific
    request, please include this ID". It also says that a streamed response can fail
    after its 200, which is this case. anthropic-sdk-python raises an SSE ``error``
    event as an ``APIStatusError`` built with ``response=self.response``, so its
    ``.request_id`` is the header's value. Today the errors a long generation most
    often ends with are the ones that cannot be traced.
    """

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "request-id": "req_011CSupport"}
        )
        await response.prepare(request)
        await response.write(ANTHROPIC_OVERLOADED_MIDSTREAM)
        return response

    async with serve(handler) as url:
        client = AnthropicClient(url, api_key="sk-ant-test-0123456789", model="claude-x")
        try:
            err = await failure(client.stream([ChatMessage.user("hi")]).pipe(ops.convert()))
        finally:
            await client.aclose()
    assert isinstance(err, ProviderError)
    assert err.error_type == "overloaded_error"
    assert getattr(err, "request_id", None) == "req_011CSupport"
    # and it survives the trip to a log shipper / another process
    assert getattr(pickle.loads(pickle.dumps(err)), "request_id", None) == "req_011CSupport"


@pytest.mark.asyncio
async def test_proxy_credentials_from_the_environment_never_reach_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proxy password from ``HTTP_PROXY`` leaks into ``HTTPStatusError``.

    What the user does: a service runs behind an authenticating egress proxy,
    ``HTTP_PROXY=http://svc:Pr0xyS3cret@proxy:3128``, with
    ``OpenAIChatClient(..., trust_env=True)`` as the README says ("``trust_env=True`` for
    proxies from the environment"). The proxy refuses a call (502) with a debugging page
    that echoes the request headers, as debugging proxies and some gateways do.

    What happens: aiohttp sends ``Proxy-Authorization: Basic <base64(svc:Pr0xyS3cret)>``.
    The echo comes back in ``err.body`` and ``str(err)``, and from there into logs and
    error trackers. The client's own ``Authorization: Bearer`` header in the same echo is
    redacted to ``Bearer ***``.

    What should happen: the proxy's credentials are redacted like the client's own. That
    covers the password, and the Basic form aiohttp builds from it, just as
    ``url_secrets`` already gives for a ``base_url`` with a password.

    Why that is right: the README promises that "any header named like a credential is
    redacted wherever it could show". ``is_secret_header("Proxy-Authorization")`` is True.
    The proxy's password is a credential of the service. ``rafrx._redaction.url_secrets``
    already knows how to derive every form a URL's password is sent in. The request
    secrets just never include the proxy URL that ``trust_env`` takes.
    """
    basic = base64.b64encode(b"svc:Pr0xyS3cret").decode()

    async def echoing_proxy(request: web.Request) -> web.StreamResponse:
        await request.read()
        echoed = json.dumps(dict(request.headers))
        return web.Response(status=502, text=f"upstream failed; you sent {echoed}")

    async with serve(echoing_proxy) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.replace("http://", "http://svc:Pr0xyS3cret@"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        client = OpenAIChatClient(
            "http://api.example.invalid",
            api_key="sk-live-0123456789abcdefXYZ",
            model="m",
            trust_env=True,
        )
        try:
            err = await failure(client.stream([ChatMessage.user("hi")]).pipe(ops.convert()))
        finally:
            await client.aclose()
    assert isinstance(err, HTTPStatusError)
    assert err.status == 502
    shown = f"{err} {err!r} {err.body} {err.provider_message}"
    assert "Bearer ***" in shown  # the client's own key is redacted in the same echo
    assert basic not in shown
    assert "Pr0xyS3cret" not in shown
