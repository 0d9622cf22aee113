"""Regression tests of session 12's transport fixes (helper B): a proxy's 407 for a
plain-``http://`` target, the API host's ``.netrc`` password kept out of errors and
logs, a given trust_env session's netrc login beside the key, a given session's
proxy credentials, auth= and default headers kept out of errors and logs, and transport
settings (proxy= …) refused as body fields.

Each failed on the commit before its fix, for the reason its docstring gives (one saying
"as before" guards what the fix keeps). Every HTTP
exchange is real aiohttp over 127.0.0.1 (a small aiohttp app of the test's own).
"""

from __future__ import annotations

import base64
import logging
import pathlib
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext

import aiohttp
import pytest
from aiohttp import web
from reactivex import Observable
from yarl import URL

from rafrx import collect_agent_response, convert
from rafrx.errors import HTTPStatusError, RafrxError, TransportError
from rafrx.recorder import record
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    Timeouts,
)
from rafrx.testing import Reply, render
from rafrx.updates import AgentResponseUpdate
from tests.sources._raw_server import KEY, USER, ask, raw_server, sse

FAST = Timeouts(connect=2.0, first_byte=5.0, idle=5.0)
API_HOST = "api.example.invalid"  # (reached through the proxy only: it never resolves)
PROXY_PASSWORD = "Pr0xy-S3cret-pw"
NETRC_PASSWORD = "n3trc-S3cret-pw"


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


# ------------------------------------------------------------ 2. the API host's .netrc password


BASIC = base64.b64encode(f"me:{NETRC_PASSWORD}".encode()).decode()


async def echo_credentials(request: web.Request) -> web.Response:
    """A server refusing the login it got, quoting it: the header and the decoded password."""
    sent = request.headers.get("Authorization", "")
    login = base64.b64decode(sent.removeprefix("Basic ")).decode() if sent else ""
    message = f"invalid credentials {sent!r} ({login})"
    return web.json_response({"error": {"message": message, "type": "auth_error"}}, status=401)


@pytest.mark.asyncio
@pytest.mark.parametrize("given_session", [False, True], ids=["own-session", "given-session"])
async def test_the_api_hosts_netrc_password_never_reaches_an_error(
    no_task_leak: None, clean_env: pathlib.Path, given_session: bool
) -> None:
    """What the user has: ``trust_env=True`` (or a ``ClientSession(trust_env=True)``), no
    API key, and a ``.netrc`` entry for the API host, whose login goes as Basic auth.

    What happens: the server refuses it quoting the credentials it got (the header and
    the decoded password, as a debugging gateway does) and the ``HTTPStatusError``'s
    message, repr and body hold the password, and its Basic form: they reach logs and
    bug reports. The API key, the proxy's credentials, a password in ``base_url`` are
    all redacted; the ``.netrc`` one was not.

    What should happen: it is redacted as the API key is, in the error and so in a
    recording of the stream that ends with it.
    """
    clean_env.write_text(f"machine 127.0.0.1 login me password {NETRC_PASSWORD}\n")
    recording = clean_env.parent / "turn.jsonl"
    session = aiohttp.ClientSession(trust_env=True) if given_session else None
    async with (
        raw_server(echo_credentials) as (root, seen),
        session or nullcontext(),
        OpenAIChatClient(
            root + "/v1", timeouts=FAST, trust_env=not given_session, session=session
        ) as client,
    ):
        err = await failure(record(client.stream(USER), recording))
    assert seen[0].headers["Authorization"] == f"Basic {BASIC}"  # (the login was sent)
    assert isinstance(err, HTTPStatusError)
    written = recording.read_text()
    assert "invalid credentials" in written  # (the recording ends with the error)
    shown = f"{err} {err!r} {err.body} {err.provider_message} {written}"
    assert NETRC_PASSWORD not in shown
    assert BASIC not in shown


async def failure(updates: Observable[AgentResponseUpdate]) -> RafrxError:
    """The error the call of ``updates`` ends with."""
    try:
        await collect_agent_response(updates.pipe(convert()))
    except RafrxError as err:
        return err
    raise AssertionError("the call succeeded")


@pytest.mark.asyncio
async def test_the_api_hosts_netrc_password_never_reaches_a_log(
    no_task_leak: None, clean_env: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same password echoed where rafrx logs what the server said: an event stream
    sent with a wrong ``Content-Type`` (decoded, with a warning quoting it)."""
    clean_env.write_text(f"machine 127.0.0.1 login me password {NETRC_PASSWORD}\n")

    async def echoing_content_type(request: web.Request) -> web.Response:
        kind = f"text/plain; login={base64.b64decode(BASIC).decode()}"
        return web.Response(
            body=render(Reply(text="ok"), "openai-chat"), headers={"Content-Type": kind}
        )

    with caplog.at_level(logging.WARNING, logger="rafrx"):
        async with (
            raw_server(echoing_content_type) as (root, _),
            OpenAIChatClient(root + "/v1", timeouts=FAST, trust_env=True) as client,
        ):
            response, err = await ask(client)
    assert err is None
    assert response is not None
    assert response.text == "ok"
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "as Content-Type" in logged
    assert NETRC_PASSWORD not in logged


# ------------------------------------------------------------ 3. a given session's .netrc login


@pytest.mark.asyncio
async def test_a_given_trust_env_session_adding_a_netrc_login_beside_the_key_says_so(
    no_task_leak: None, clean_env: pathlib.Path
) -> None:
    """What the user does: gives the client an ``aiohttp.ClientSession(trust_env=True)``
    and an API key (sent as ``Authorization``), with a ``.netrc`` entry for the API host.

    What happens: aiohttp adds the host's netrc login, then refuses it beside the
    ``Authorization`` header; every call fails with "ValueError: Cannot combine
    AUTHORIZATION header with AUTH argument or credentials encoded in URL", which names
    neither the session nor ``.netrc``: the user looks for credentials in ``base_url``.

    rafrx cannot make the call work without changing the user's session: aiohttp takes
    the netrc login for any request of a ``trust_env`` session unless given ``auth=``
    (sent as Basic, refused beside the header too), and a request's ``middlewares=``
    (aiohttp 3.12+) would replace the session's own. What should happen: the error says
    why, and what to do; never the password.
    """
    clean_env.write_text(f"machine 127.0.0.1 login me password {NETRC_PASSWORD}\n")
    async with (
        raw_server(echo_credentials) as (root, seen),
        aiohttp.ClientSession(trust_env=True) as session,
        OpenAIChatClient(root + "/v1", KEY, timeouts=FAST, session=session) as client,
    ):
        _, err = await ask(client)
    assert seen == []  # (refused before it was sent)
    assert type(err) is TransportError
    assert not err.retryable
    said = str(err)
    assert "Cannot combine AUTHORIZATION header" in said
    added = "the given aiohttp session adds the .netrc login of 127.0.0.1 (trust_env=True)"
    assert f"{added}, which aiohttp refuses beside the Authorization header" in said
    assert NETRC_PASSWORD not in f"{said} {err!r}"


@pytest.mark.asyncio
@pytest.mark.parametrize("trust_env", [False, True])
async def test_a_given_sessions_auth_beside_the_key_is_named_not_a_netrc_login(
    no_task_leak: None, clean_env: pathlib.Path, trust_env: bool
) -> None:
    """A given ``ClientSession(auth=BasicAuth(...))`` beside an API key: aiohttp refuses
    every call with the same words as for a ``.netrc`` login. The error names the
    session's ``auth=`` (with no ``.netrc`` entry there is no ``.netrc`` to blame, with
    ``trust_env`` or not); never its password."""
    with warnings.catch_warnings():  # (BasicAuth and auth=: deprecated in aiohttp 3.14)
        warnings.simplefilter("ignore", DeprecationWarning)
        auth = aiohttp.BasicAuth("svc", NETRC_PASSWORD)
        session = aiohttp.ClientSession(trust_env=trust_env, auth=auth)
    async with (
        raw_server(echo_credentials) as (root, seen),
        session,
        OpenAIChatClient(root + "/v1", KEY, timeouts=FAST, session=session) as client,
    ):
        _, err = await ask(client)
    assert seen == []  # (refused before it was sent)
    assert type(err) is TransportError
    said = str(err)
    assert "the given aiohttp session sends its auth= login, which aiohttp refuses" in said
    assert ".netrc" not in said
    assert NETRC_PASSWORD not in f"{said} {err!r}"


# ------------------------------------------------------- 4. a given session's proxy credentials


PROXY_BASIC = base64.b64encode(f"svc:{PROXY_PASSWORD}".encode()).decode()


def proxy_page(kind: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A proxy failing to reach the API (502), its page (``kind``: ``text`` or ``json``,
    as a gateway's) quoting the credentials it got: the header, and the decoded password."""

    async def bad_gateway(request: web.Request) -> web.Response:
        sent = request.headers.get("Proxy-Authorization", "")
        login = base64.b64decode(sent.removeprefix("Basic ")).decode() if sent else "none"
        said = f"upstream unreachable for Proxy-Authorization {sent!r} (user {login})"
        if kind == "json":
            return web.json_response({"error": {"message": said, "type": "proxy"}}, status=502)
        return web.Response(status=502, text=said)

    return bad_gateway


@asynccontextmanager
async def given_session_with_proxy_auth(proxy: str) -> AsyncIterator[OpenAIChatClient]:
    """A given ``ClientSession(proxy=..., proxy_auth=BasicAuth(...))`` (both deprecated
    in aiohttp 3.14, still sent), no environment."""
    url = URL(proxy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        auth = aiohttp.BasicAuth(url.user or "", url.password or "")
        session = aiohttp.ClientSession(proxy=url.with_user(None), proxy_auth=auth)
    async with (
        session,
        OpenAIChatClient(f"http://{API_HOST}/v1", KEY, timeouts=FAST, session=session) as client,
    ):
        yield client


PROXIES = [own_session_from_env, given_session_with_proxy, given_session_with_proxy_auth]
PROXY_IDS = ["trust_env", "given-session-proxy", "given-session-proxy_auth"]


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["text", "json"])
@pytest.mark.parametrize("make_client", PROXIES, ids=PROXY_IDS)
async def test_a_given_sessions_proxy_credentials_never_reach_an_error(
    no_task_leak: None,
    clean_env: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    make_client: Callable[[str], AbstractAsyncContextManager[OpenAIChatClient]],
    kind: str,
) -> None:
    """What the user does: gives the client an ``aiohttp.ClientSession(proxy=
    "http://svc:pw@host:port")`` (or ``proxy_auth=BasicAuth("svc", "pw")``) and calls an
    ``http://`` API through it; the proxy cannot reach the API and answers 502, its page
    quoting the ``Proxy-Authorization`` it got and the decoded password (as a debugging
    gateway does).

    What happens: the ``HTTPStatusError``'s message (a text page's first line), body and
    provider message hold the password and its Basic form: they reach logs and bug
    reports. The same proxy from the environment (``trust_env``) is redacted; the given
    session's was not, rafrx took proxy credentials from the environment only.

    What should happen: the credentials a given session sends its proxy are among the
    request's secrets, redacted in all their forms, as the environment proxy's are.
    """
    async with raw_server(proxy_page(kind)) as (root, seen):
        proxy = root.replace("http://", f"http://svc:{PROXY_PASSWORD}@")
        monkeypatch.setenv("HTTP_PROXY", proxy)  # (used by the trust_env client only)
        with caplog.at_level(logging.DEBUG, logger="rafrx"):
            async with make_client(proxy) as client:
                _, err = await ask(client)
    assert seen[0].headers["Proxy-Authorization"] == f"Basic {PROXY_BASIC}"  # (it went)
    assert isinstance(err, HTTPStatusError)
    assert err.status == 502
    shown = f"{err} {err!r} {err.body} {err.provider_message}"
    assert "upstream unreachable for Proxy-Authorization" in shown  # (the page is kept)
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert PROXY_PASSWORD not in shown + logged
    assert PROXY_BASIC not in shown + logged


@pytest.mark.asyncio
@pytest.mark.parametrize("make_client", PROXIES, ids=PROXY_IDS)
async def test_a_given_sessions_proxy_credentials_never_reach_a_log(
    no_task_leak: None,
    clean_env: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    make_client: Callable[[str], AbstractAsyncContextManager[OpenAIChatClient]],
) -> None:
    """The same credentials echoed where rafrx logs what it got: an event stream the
    proxy passes on with a ``Content-Type`` quoting them (decoded, with a warning)."""

    async def echoing_content_type(request: web.Request) -> web.Response:
        sent = request.headers.get("Proxy-Authorization", "")
        login = base64.b64decode(sent.removeprefix("Basic ")).decode()
        kind = f"text/plain; via={sent.removeprefix('Basic ')}; login={login}"
        return web.Response(
            body=render(Reply(text="ok"), "openai-chat"), headers={"Content-Type": kind}
        )

    async with raw_server(echoing_content_type) as (root, _):
        proxy = root.replace("http://", f"http://svc:{PROXY_PASSWORD}@")
        monkeypatch.setenv("HTTP_PROXY", proxy)
        with caplog.at_level(logging.WARNING, logger="rafrx"):
            async with make_client(proxy) as client:
                response, err = await ask(client)
    assert err is None
    assert response is not None
    assert response.text == "ok"
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "as Content-Type" in logged
    assert PROXY_PASSWORD not in logged
    assert PROXY_BASIC not in logged


# ------------------------------------------- 5. a given session's auth= and default headers


SESSION_SECRET = "s3ss10n-S3cret-pw"
SESSION_BASIC = base64.b64encode(f"svc:{SESSION_SECRET}".encode()).decode()
# What a given session sends with every request: its auth=, or a credential header.
SESSION_CREDENTIALS = {
    "auth": {},  # (auth=BasicAuth("svc", SESSION_SECRET): see session_with)
    "api-key": {"api-key": SESSION_SECRET},  # (Azure's)
    "x-api-key": {"x-api-key": SESSION_SECRET},
    "basic": {"Authorization": f"Basic {SESSION_BASIC}"},
    "bearer": {"Authorization": f"Bearer {SESSION_SECRET}"},
}
TITLE = "my-app-title"  # (a session header that is no credential: shown as it is)


def quoted_headers(request: web.Request) -> str:
    """What a debugging server quotes of the headers it got: each one, its token alone
    (the part after a scheme), and a Basic login decoded."""
    quoted = []
    for name, value in request.headers.items():
        scheme, _, token = value.partition(" ")
        quoted.append(f"{name}={value!r} (token {token})")
        if scheme == "Basic":
            quoted.append(f"login {base64.b64decode(token).decode()}")
    return "; ".join(quoted)


def headers_page(kind: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A server refusing the call (``kind``: a JSON 401, or a text 500), its page quoting
    the headers it got."""

    async def refuse(request: web.Request) -> web.Response:
        said = f"refused: {quoted_headers(request)}"
        if kind == "json":
            return web.json_response({"error": {"message": said, "type": "auth"}}, status=401)
        return web.Response(status=500, text=said)

    return refuse


def session_with(credentials: str) -> aiohttp.ClientSession:
    """A session sending ``credentials`` (a key of :data:`SESSION_CREDENTIALS`: its
    default headers, or ``auth=``) and a title header with every request."""
    headers = {"X-Title": TITLE, **SESSION_CREDENTIALS[credentials]}
    if credentials != "auth":
        return aiohttp.ClientSession(headers=headers)
    with warnings.catch_warnings():  # (both deprecated in aiohttp 3.14, still sent)
        warnings.simplefilter("ignore", DeprecationWarning)
        auth = aiohttp.BasicAuth("svc", SESSION_SECRET)
        return aiohttp.ClientSession(headers=headers, auth=auth)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["json", "text"])
@pytest.mark.parametrize("credentials", list(SESSION_CREDENTIALS))
async def test_a_given_sessions_auth_and_default_headers_never_reach_an_error(
    no_task_leak: None,
    clean_env: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
    credentials: str,
    kind: str,
) -> None:
    """What the user does: gives the client (no ``api_key``) an ``aiohttp.ClientSession``
    that sends the credentials with every request: ``auth=BasicAuth(...)``, or default
    ``headers=`` with ``api-key`` (as for Azure), ``x-api-key`` or an ``Authorization``
    (Basic or Bearer). The server refuses the call, its page quoting the headers it got
    (and a Basic login decoded), as a debugging gateway does.

    What happens: the ``HTTPStatusError``'s message, repr, body and provider message hold
    the credential (the catch-all patterns see a ``Bearer`` token only beside its
    scheme): they reach logs and bug reports. The same headers given as the client's
    ``headers=`` are redacted; the session's were not among the request's secrets.

    What should happen: what a given session sends with every request is among the
    request's secrets, by the rule for the client's ``headers=``, and its ``auth=`` in
    every form of a login; a header that is no credential stays as it is.
    """
    async with raw_server(headers_page(kind)) as (root, seen):
        with caplog.at_level(logging.DEBUG, logger="rafrx"):
            async with (
                session_with(credentials) as session,
                OpenAIChatClient(root + "/v1", timeouts=FAST, session=session) as client,
            ):
                _, err = await ask(client)
    sent = seen[0].headers
    assert SESSION_SECRET in f"{sent} {base64.b64decode(SESSION_BASIC)!r}"  # (it went)
    assert isinstance(err, HTTPStatusError)
    shown = f"{err} {err!r} {err.body} {err.provider_message}"
    assert f"x-title='{TITLE}'" in shown.lower()  # (the page is kept, the title as it is)
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert SESSION_SECRET not in shown + logged
    assert SESSION_BASIC not in shown + logged


@pytest.mark.asyncio
@pytest.mark.parametrize("credentials", list(SESSION_CREDENTIALS))
async def test_a_given_sessions_auth_and_default_headers_never_reach_a_log(
    no_task_leak: None,
    clean_env: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
    credentials: str,
) -> None:
    """The same credentials echoed where rafrx logs what the server said: an event
    stream sent with a ``Content-Type`` quoting them (decoded, with a warning)."""

    async def echoing_content_type(request: web.Request) -> web.Response:
        kind = f"text/plain; got={quoted_headers(request)}"
        return web.Response(
            body=render(Reply(text="ok"), "openai-chat"), headers={"Content-Type": kind}
        )

    with caplog.at_level(logging.WARNING, logger="rafrx"):
        async with (
            raw_server(echoing_content_type) as (root, _),
            session_with(credentials) as session,
            OpenAIChatClient(root + "/v1", timeouts=FAST, session=session) as client,
        ):
            response, err = await ask(client)
    assert err is None
    assert response is not None
    assert response.text == "ok"
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "as Content-Type" in logged
    assert SESSION_SECRET not in logged
    assert SESSION_BASIC not in logged


@pytest.mark.asyncio
async def test_a_basic_authorization_in_the_clients_headers_is_redacted_decoded_too(
    no_task_leak: None, clean_env: pathlib.Path
) -> None:
    """The rule the session's headers now share with the client's ``headers=``: an
    ``Authorization: Basic`` there was redacted as sent (base64), but a server quoting
    the login decoded put its password into the error. It is a login: every form of
    it is redacted."""
    headers = {"Authorization": f"Basic {SESSION_BASIC}"}
    async with (
        raw_server(headers_page("json")) as (root, _),
        OpenAIChatClient(root + "/v1", timeouts=FAST, headers=headers) as client,
    ):
        _, err = await ask(client)
    assert isinstance(err, HTTPStatusError)
    shown = f"{err} {err!r} {err.body} {err.provider_message}"
    assert "login svc:***" in shown
    assert SESSION_SECRET not in shown


# ------------------------------------------------- 6. transport settings given as body fields


CLIENTS: list[type[LLMClient]] = [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient]
PROXY_URL = f"http://svc:{PROXY_PASSWORD}@proxy.example.invalid:3128"
# Each transport setting a user of httpx, requests, aiohttp or openai-python gives this
# way, as they would give it (credentials in it where it holds any), and what the error
# says to use instead.
TRANSPORT_SETTINGS = {
    "proxy": (PROXY_URL, "aiohttp.ClientSession(proxy="),
    "proxies": ({"https://": PROXY_URL}, "aiohttp.ClientSession(proxy="),
    "proxy_auth": (("svc", PROXY_PASSWORD), "the credentials in the proxy's URL"),
    "auth": (("svc", PROXY_PASSWORD), "api_key=, or headers="),
    "http_client": (object(), "session= (an aiohttp.ClientSession)"),
    "verify": (False, "aiohttp.TCPConnector(ssl="),
    "ssl": (False, "aiohttp.TCPConnector(ssl="),
    "default_headers": ({"x-api-key": PROXY_PASSWORD}, "headers="),
    "default_query": ({"api-key": PROXY_PASSWORD}, "the query in base_url"),
}


@pytest.mark.parametrize("name", list(TRANSPORT_SETTINGS))
@pytest.mark.parametrize("client_class", CLIENTS, ids=lambda c: c.__name__)
def test_a_transport_setting_given_as_a_body_field_is_refused_at_construction(
    client_class: type[LLMClient], name: str
) -> None:
    """What the user does, coming from httpx or openai-python:
    ``OpenAIChatClient(url, proxy="http://svc:pw@proxy:3128")`` (or ``verify=False``,
    ``http_client=``, ``default_headers=`` …).

    What happens: the client takes it as one more body field (``**params``) and sends
    it to the API in every request's body, the proxy's credentials (or the headers'
    key) with it; the request goes direct, not through the proxy; the setting does
    nothing (a lenient server ignores it) or the API answers 400.

    What should happen: a ``TypeError`` at once, naming the setting and what to use
    instead (a session with ``proxy=``, ``trust_env=True`` …), never what it holds.
    """
    value, instead = TRANSPORT_SETTINGS[name]
    with pytest.raises(TypeError) as refused:
        client_class("http://127.0.0.1:1", KEY, **{name: value})
    said = str(refused.value)
    assert said.startswith(f"{client_class.__name__}() got {name}=, a transport setting")
    assert instead in said
    assert PROXY_PASSWORD not in f"{said} {refused.value!r}"


@pytest.mark.asyncio
@pytest.mark.parametrize("name", list(TRANSPORT_SETTINGS))
@pytest.mark.parametrize("client_class", CLIENTS, ids=lambda c: c.__name__)
async def test_a_transport_setting_given_to_a_call_is_refused_before_anything_is_sent(
    no_task_leak: None, client_class: type[LLMClient], name: str
) -> None:
    """The same setting given to one call, ``client.stream(messages, proxy=...)``: it
    went in that request's body; now a ``TypeError`` from ``stream()``, nothing sent."""
    value, instead = TRANSPORT_SETTINGS[name]
    async with raw_server(sse()) as (root, seen), client_class(root, KEY) as client:
        with pytest.raises(TypeError) as refused:
            client.stream(USER, **{name: value})
    assert seen == []
    said = str(refused.value)
    assert said.startswith(f"{client_class.__name__}.stream() got {name}=")
    assert instead in said
    assert PROXY_PASSWORD not in f"{said} {refused.value!r}"


DIALECT_OF = {
    OpenAIChatClient: "openai-chat",
    AnthropicClient: "anthropic",
    OpenAIResponsesClient: "openai-responses",
}
# Body fields that pass as before: common ones, a provider's extras, and those a
# gateway reads (LiteLLM's timeout and api_base), named like transport settings.
BODY_FIELDS = {
    "temperature": 0.2,
    "top_p": 0.9,
    "metadata": {"user_id": "u-1"},
    "reasoning_effort": "low",
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "timeout": 30,
    "api_base": "https://gateway.example/v1",
}


@pytest.mark.asyncio
@pytest.mark.parametrize("client_class", CLIENTS, ids=lambda c: c.__name__)
async def test_ordinary_body_fields_still_go_in_the_body(
    no_task_leak: None, client_class: type[LLMClient]
) -> None:
    """As before: the client's and the call's other keywords are body fields."""
    handler = sse("ok", DIALECT_OF[client_class])
    async with (
        raw_server(handler) as (root, seen),
        client_class(root, KEY, **BODY_FIELDS) as client,
    ):
        response, err = await ask(client, max_output_tokens=64, store=False)
    assert err is None
    assert response is not None
    assert response.text == "ok"
    body = seen[0].body
    assert {name: body[name] for name in BODY_FIELDS} == BODY_FIELDS
    assert (body["max_output_tokens"], body["store"]) == (64, False)
