"""Regression tests of session 12's transport fixes (helper B): a proxy's 407 for a
plain-``http://`` target.

Each failed on the commit before its fix, for the reason its docstring gives (one saying
"as before" guards what the fix keeps). Every HTTP
exchange is real aiohttp over 127.0.0.1 (a small aiohttp app of the test's own).
"""

from __future__ import annotations

import base64
import pathlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from rafrx.errors import HTTPStatusError, TransportError
from rafrx.sources.clients import OpenAIChatClient, Timeouts
from tests.sources._raw_server import KEY, ask, raw_server

FAST = Timeouts(connect=2.0, first_byte=5.0, idle=5.0)
API_HOST = "api.example.invalid"  # (reached through the proxy only: it never resolves)
PROXY_PASSWORD = "Pr0xy-S3cret-pw"


@pytest.fixture
def clean_env(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """No proxy in the environment, and an empty ``.netrc`` (named by ``$NETRC``) to
    fill; returns its path."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ws_proxy", "wss_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)  # (urllib then ignores HTTP_PROXY)
    path = tmp_path / ".netrc"
    path.write_text("")
    path.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(path))
    return path


# ------------------------------------------------------------ 1. a proxy's 407, no CONNECT


async def ask_for_proxy_credentials(request: web.Request) -> web.Response:
    """A proxy that wants other credentials: 407, its page echoing what it was sent."""
    sent = request.headers.get("Proxy-Authorization", "nothing")
    return web.Response(
        status=407,
        headers={"Proxy-Authenticate": 'Basic realm="corp"'},
        text=f"Proxy Authentication Required: you sent {sent}",
    )


@asynccontextmanager
async def own_session_from_env(proxy: str) -> AsyncIterator[OpenAIChatClient]:
    """The client's own session, with ``trust_env=True`` and ``HTTP_PROXY`` set."""
    async with OpenAIChatClient(
        f"http://{API_HOST}/v1", KEY, timeouts=FAST, trust_env=True
    ) as client:
        yield client


@asynccontextmanager
async def given_session_from_env(proxy: str) -> AsyncIterator[OpenAIChatClient]:
    """A given ``ClientSession(trust_env=True)``, with ``HTTP_PROXY`` set."""
    async with (
        aiohttp.ClientSession(trust_env=True) as session,
        OpenAIChatClient(f"http://{API_HOST}/v1", KEY, timeouts=FAST, session=session) as client,
    ):
        yield client


@asynccontextmanager
async def given_session_with_proxy(proxy: str) -> AsyncIterator[OpenAIChatClient]:
    """A given ``ClientSession(proxy=...)``, no environment."""
    async with (
        aiohttp.ClientSession(proxy=proxy) as session,
        OpenAIChatClient(f"http://{API_HOST}/v1", KEY, timeouts=FAST, session=session) as client,
    ):
        yield client


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "make_client",
    [own_session_from_env, given_session_from_env, given_session_with_proxy],
    ids=["trust_env", "given-session-trust_env", "given-session-proxy"],
)
async def test_a_proxys_407_for_a_plain_http_target_names_the_proxy(
    no_task_leak: None,
    clean_env: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    make_client: Callable[[str], AbstractAsyncContextManager[OpenAIChatClient]],
) -> None:
    """What the user does: calls an ``http://`` API through a proxy (from the
    environment with ``trust_env``, or a session's ``proxy=``) that wants other
    credentials. No ``CONNECT`` for a plain-HTTP target: the proxy answers the request
    itself, 407 Proxy Authentication Required.

    What happens: ``HTTPStatusError(407)`` with the proxy's page as the API's body, as
    if the API had refused the call.

    What should happen: as when the proxy refuses a ``CONNECT``: a ``TransportError``
    saying the proxy refused, naming it by its address without its credentials (which
    its page echoes), with the status, not retryable.
    """
    async with raw_server(ask_for_proxy_credentials) as (root, seen):
        proxy = root.replace("http://", f"http://svc:{PROXY_PASSWORD}@")
        monkeypatch.setenv("HTTP_PROXY", proxy)
        async with make_client(proxy) as client:
            _, err = await ask(client)
    assert [request.target for request in seen] == [f"http://{API_HOST}/v1/chat/completions"]
    assert type(err) is TransportError
    said = str(err)
    where = root.removeprefix("http://")
    assert said == (
        f"the proxy {where} refused the request to http://{API_HOST}/v1/chat/completions: "
        "HTTP 407 Proxy Authentication Required"
    )
    assert err.status == 407
    assert not err.retryable
    assert PROXY_PASSWORD not in f"{said} {err!r} {err.body}"
    assert base64.b64encode(f"svc:{PROXY_PASSWORD}".encode()).decode() not in f"{err!r}"


@pytest.mark.asyncio
async def test_a_407_without_a_proxy_stays_the_servers_status_error(
    no_task_leak: None, clean_env: pathlib.Path
) -> None:
    """No proxy in use (``trust_env`` and none in the environment): the server's own 407,
    however odd, is its ``HTTPStatusError``, as before."""
    async with (
        raw_server(ask_for_proxy_credentials) as (root, _),
        OpenAIChatClient(root + "/v1", KEY, timeouts=FAST, trust_env=True) as client,
    ):
        _, err = await ask(client)
    assert type(err) is HTTPStatusError
    assert err.status == 407
