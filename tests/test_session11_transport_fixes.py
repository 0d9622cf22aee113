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


# ------------------------------------------------------------ 2. api_key and URL credentials


def test_an_api_key_beside_credentials_in_base_url_is_refused_when_the_client_is_made() -> None:
    """``OpenAIChatClient("https://user:pass@host/v1", api_key=...)`` failed every request.

    What happens: the client is made, and each call ends in a ``TransportError``
    "Cannot combine AUTHORIZATION header with AUTH argument or credentials encoded in
    URL": aiohttp sends URL credentials as ``Authorization: Basic`` and refuses the key's
    ``Authorization: Bearer`` beside them.

    What should happen: a ``ValueError`` when the client is made, naming the conflict
    and the URL with its password masked; neither secret in it. The same for an
    ``Authorization`` given in ``headers=``.
    """
    url = "https://user:pa55-w0rd-xyz@gateway.example/v1"
    with pytest.raises(ValueError, match="holds credentials and api_key") as caught:
        OpenAIChatClient(url, api_key="sk-0123456789abcdef", model="m")
    assert "pa55-w0rd-xyz" not in str(caught.value)
    assert "sk-0123456789abcdef" not in str(caught.value)
    assert "user:***@gateway.example" in str(caught.value)
    with pytest.raises(ValueError, match="holds credentials and headers="):
        OpenAIChatClient(url, model="m", headers={"authorization": "Bearer t-0123456789"})


@pytest.mark.asyncio
async def test_credentials_in_base_url_go_with_a_key_of_another_header() -> None:
    """No conflict where the key has its own header (Anthropic's ``x-api-key``), or with
    no key: a gateway's Basic credentials in ``base_url`` and the key both arrive."""
    seen: list[tuple[str | None, str | None]] = []

    async def gateway(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Authorization"), request.headers.get("x-api-key")))
        return web.json_response({"error": {"message": "nope"}}, status=401)

    async with serve(gateway) as url:
        with_credentials = url.replace("http://", "http://user:pa55-w0rd-xyz@")
        client = AnthropicClient(with_credentials, api_key="sk-ant-0123456789", model="m")
        err = await failure(client.stream([ChatMessage.user("Hi")]))
        await client.aclose()
    assert isinstance(err, HTTPStatusError)
    assert seen == [("Basic dXNlcjpwYTU1LXcwcmQteHl6", "sk-ant-0123456789")]
