"""Regression tests of session 11's transport fixes: secrets redaction, the client's
credentials, proxy errors and the SSE decoder's event size limit.

Each failed on the commit before its fix, for the reason its docstring gives. Every HTTP
exchange is real aiohttp over 127.0.0.1 (a small aiohttp app of the test's own).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from rafrx import ChatMessage, RafrxError, collect_agent_response
from rafrx._redaction import redact
from rafrx.errors import HTTPStatusError
from rafrx.sources.clients import OpenAIChatClient

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


# ------------------------------------------------------------ 1. short secrets

WRONG_KEY_BODY = {
    "error": {
        "message": "Incorrect API key provided: a. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
    }
}


@pytest.mark.asyncio
async def test_a_one_character_api_key_is_masked_as_a_word_not_inside_every_word() -> None:
    """A one-character key garbles every error text it is redacted from.

    What the user does: calls a local server with ``api_key="a"`` (a placeholder, as
    local servers are given) and the server answers 401 "Incorrect API key provided: a".

    What happens: every ``a`` in the error is ``***`` ("inv***lid_request_error",
    "pl***tform"): the body is no longer JSON, so even the provider's message is lost
    ("HTTP 401").

    What should happen: a secret that short is masked where it stands as a whole word
    (the key the server echoes), not inside other words; a realistic key is still
    masked everywhere.
    """

    async def wrong_key(request: web.Request) -> web.Response:
        return web.json_response(WRONG_KEY_BODY, status=401)

    async with serve(wrong_key) as url:
        client = OpenAIChatClient(url + "/v1", api_key="a", model="m")
        err = await failure(client.stream([ChatMessage.user("Hi")]))
        await client.aclose()
    assert isinstance(err, HTTPStatusError)
    expected = "Incorrect API key provided: ***. You can find your API key at"
    assert expected in str(err)
    assert err.body is not None
    assert "invalid_request_error" in err.body
    assert "platform.openai.com/account" in err.body


def test_a_short_secret_is_redacted_as_a_word_and_a_long_one_everywhere() -> None:
    """The recorder's redaction: ``secrets=["k"]`` turned every ``k`` of a model's text
    into ``[REDACTED]`` ("I [REDACTED]now"); a long secret is still found inside words."""
    assert redact("I know the key: k.", ["k"]) == "I know the key: [REDACTED]."
    assert redact("key=hunter2-hunter2x", ["hunter2-hunter2"]) == "key=[REDACTED]x"
