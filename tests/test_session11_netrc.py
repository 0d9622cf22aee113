"""Regression tests (session 11, helper G): a ``.netrc`` login for the API host beside
an API key, with ``trust_env=True``.

What the user has: ``trust_env=True`` (for a proxy from the environment) and a
``~/.netrc`` entry for the API host (curl's, a CI's), with the key given as
``api_key`` (sent as ``Authorization``).

What happened: every request failed before it was sent. With ``trust_env`` aiohttp
takes the host's netrc login as Basic auth when no ``auth=`` is given, then refuses it
beside the ``Authorization`` header ("Cannot combine AUTHORIZATION header with AUTH
argument or credentials encoded in URL").

What should happen (httpx's, so openai-python's, behaviour): an explicit
``Authorization`` wins over ``.netrc``; without one the netrc login is sent as before;
the proxy from the environment and its credentials (in its URL or in ``.netrc``) work
as before. Every exchange is real aiohttp over 127.0.0.1, against a server recording
the raw headers.
"""

from __future__ import annotations

import base64
import pathlib
from typing import Any

import aiohttp
import pytest

from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, Timeouts
from tests.sources._raw_server import KEY, ask, raw_server, sse

FAST = Timeouts(connect=2.0, first_byte=5.0, idle=5.0)
API_HOST = "api.example.invalid"  # (reached through the proxy only: it never resolves)
ENTRIES = (
    "machine 127.0.0.1 login me password netrc-pw\n"
    f"machine {API_HOST} login api-user password api-pw\n"
)


def _basic(login: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode()


@pytest.fixture
def netrc_file(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A ``.netrc`` in a fresh ``$HOME`` (named by ``$NETRC`` too) holding
    :data:`ENTRIES`, and no proxy in the environment."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ws_proxy", "wss_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)  # (urllib then ignores HTTP_PROXY)
    path = tmp_path / ".netrc"
    path.write_text(ENTRIES)
    path.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(path))
    return path


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("options", "sent"),
    [
        ({"api_key": KEY}, f"Bearer {KEY}"),
        ({"headers": {"authorization": "Bearer gateway-token"}}, "Bearer gateway-token"),
    ],
    ids=["api-key", "lower-case-header"],
)
async def test_an_authorization_header_wins_over_the_hosts_netrc_login(
    no_task_leak: None, netrc_file: pathlib.Path, options: dict[str, Any], sent: str
) -> None:
    """The API host (127.0.0.1) has a netrc entry; the key's ``Authorization``, or one
    given in ``headers=`` (in any case), is sent alone and the call succeeds."""
    async with (
        raw_server(sse("ok")) as (url, seen),
        OpenAIChatClient(url, timeouts=FAST, trust_env=True, **options) as client,
    ):
        response, error = await ask(client)
    assert error is None
    assert response is not None
    assert response.text == "ok"
    assert seen[0].headers.getall("Authorization") == [sent]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("entry", "client_type", "options", "sent"),
    [
        ("login me password netrc-pw", OpenAIChatClient, {}, _basic("me", "netrc-pw")),
        ("login me", OpenAIChatClient, {}, _basic("me", "")),
        ("login me password netrc-pw", AnthropicClient, {"api_key": KEY}, _basic("me", "netrc-pw")),
    ],
    ids=["no-key", "login-without-password", "anthropic-x-api-key"],
)
async def test_without_an_authorization_header_the_netrc_login_is_sent(
    no_task_leak: None,
    netrc_file: pathlib.Path,
    entry: str,
    client_type: Any,
    options: dict[str, Any],
    sent: str,
) -> None:
    """As before: no ``Authorization`` of the client's (no key, or Anthropic's
    ``x-api-key``) lets ``trust_env`` send the host's netrc login as Basic auth."""
    netrc_file.write_text(f"machine 127.0.0.1 {entry}\n")
    fmt = "anthropic" if client_type is AnthropicClient else "openai-chat"
    async with (
        raw_server(sse("ok", fmt)) as (url, seen),
        client_type(url, timeouts=FAST, trust_env=True, **options) as client,
    ):
        response, error = await ask(client)
    assert error is None
    assert response is not None
    assert seen[0].headers.getall("Authorization") == [sent]
    if "api_key" in options:
        assert seen[0].headers["x-api-key"] == KEY


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("options", "sent"),
    [({"api_key": KEY}, f"Bearer {KEY}"), ({}, _basic("api-user", "api-pw"))],
    ids=["api-key", "no-key"],
)
async def test_the_environments_proxy_gets_its_netrc_login_beside_the_key(
    no_task_leak: None,
    netrc_file: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, Any],
    sent: str,
) -> None:
    """``HTTP_PROXY`` names a proxy (127.0.0.1, its login in ``.netrc``) that answers
    itself; the API host has a netrc entry too. Each call (the second on a pooled
    connection) goes through the proxy with its ``Proxy-Authorization``, and the
    ``Authorization`` is the key's, else the API host's netrc login."""
    async with raw_server(sse("ok")) as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        base = f"http://{API_HOST}/v1"
        async with OpenAIChatClient(base, timeouts=FAST, trust_env=True, **options) as client:
            for _ in range(2):
                response, error = await ask(client)
                assert error is None
                assert response is not None
    assert len(seen) == 2
    for request in seen:
        assert request.target == f"http://{API_HOST}/v1/chat/completions"
        assert request.headers.getall("Proxy-Authorization") == [_basic("me", "netrc-pw")]
        assert request.headers.getall("Authorization") == [sent]


@pytest.mark.asyncio
async def test_a_proxy_urls_own_credentials_are_sent_beside_the_key(
    no_task_leak: None, netrc_file: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HTTP_PROXY=http://svc:p%40ss@…``: the URL's credentials (decoded) win over the
    proxy host's netrc entry, as in aiohttp; the key is sent beside them."""
    async with raw_server(sse("ok")) as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy.replace("http://", "http://svc:p%40ss@"))
        base = f"http://{API_HOST}/v1"
        async with OpenAIChatClient(base, KEY, timeouts=FAST, trust_env=True) as client:
            _, error = await ask(client)
    assert error is None
    assert seen[0].headers.getall("Proxy-Authorization") == [_basic("svc", "p@ss")]
    assert seen[0].headers.getall("Authorization") == [f"Bearer {KEY}"]


@pytest.mark.asyncio
async def test_a_given_session_keeps_its_own_trust_env(
    no_task_leak: None, netrc_file: pathlib.Path
) -> None:
    """A ``session=`` is used as the user made it: ``ClientSession()`` (no
    ``trust_env``) sends no netrc login, whatever the client's ``trust_env``."""
    async with (
        raw_server(sse("ok")) as (url, seen),
        aiohttp.ClientSession() as session,
        OpenAIChatClient(url, session=session, timeouts=FAST, trust_env=True) as client,
    ):
        _, error = await ask(client)
    assert error is None
    assert "Authorization" not in seen[0].headers
