"""Clients as gateway and proxy users expect: Anthropic base URLs as the Anthropic SDK
builds them, credential headers by name kept out of errors, and ``trust_env``.

Each test runs real requests over 127.0.0.1, against
:class:`~rafrx.testing.LLMServer` or a small aiohttp server of its own that records
what it received (the path, the raw request target, the headers, the body) and can
echo the request headers back, as some gateways' error pages do. No function is
patched; a host that does not exist (``.invalid``, RFC 6761) stands for the target
a proxy reaches.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rafrx.errors import HTTPStatusError, ProviderError, TransportError
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    Timeouts,
)
from rafrx.testing import LLMServer, Reply, render_events
from tests.sources._raw_server import KEY, ask, raw_server, sse

#: Short enough that a connection test that goes wrong fails fast instead of hanging.
FAST = Timeouts(connect=2.0, first_byte=5.0, idle=5.0)
#: A host that never resolves (RFC 6761): only a proxy can answer for it.
NOWHERE = "rafrx-proxy-test.invalid"

CLIENTS: list[type[LLMClient]] = [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient]
DIALECTS = {
    OpenAIChatClient: "openai-chat",
    AnthropicClient: "anthropic",
    OpenAIResponsesClient: "openai-responses",
}
ENDPOINTS = {
    OpenAIChatClient: "/v1/chat/completions",
    AnthropicClient: "/v1/messages",
    OpenAIResponsesClient: "/v1/responses",
}


def texts_of(err: BaseException) -> str:
    """Every text an error shows: str, repr, its args and its string attributes."""
    parts = [str(err), repr(err)]
    parts += [a for a in err.args if isinstance(a, str)]
    parts += [v for v in vars(err).values() if isinstance(v, str)]
    return "\n".join(parts)


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment with no proxy settings at all (either case), to set them from."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ws_proxy", "wss_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)  # (urllib then ignores HTTP_PROXY)
    return monkeypatch


# ================================================================ 1. base_url


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("base_path", "expected"),
    [
        ("", "/v1/messages"),
        ("/", "/v1/messages"),
        ("/anthropic", "/anthropic/v1/messages"),
        ("/anthropic/", "/anthropic/v1/messages"),
        ("/gw/v1", "/gw/v1/messages"),
        ("/gw/v1/", "/gw/v1/messages"),
        ("/v1/acct-123/my-gateway/anthropic", "/v1/acct-123/my-gateway/anthropic/v1/messages"),
    ],
    ids=["root", "root-slash", "prefix", "prefix-slash", "v1", "v1-slash", "cloudflare-like"],
)
async def test_anthropic_base_url_gets_v1_messages_unless_it_ends_in_v1(
    no_task_leak: None, base_path: str, expected: str
) -> None:
    """anthropic-sdk-python posts to ``{base_url}/v1/messages`` (its ``base_url`` is the
    server root: ``Anthropic(base_url="https://api.deepseek.com/anthropic")`` is DeepSeek's
    documented setup, https://api-docs.deepseek.com/guides/anthropic_api; Cloudflare AI
    Gateway's is ``https://gateway.ai.cloudflare.com/v1/{account}/{gateway}/anthropic``).
    A path already ending in ``/v1`` is an API prefix: only ``/messages`` is added. A
    trailing slash changes nothing; a path that merely starts with ``/v1`` is a prefix."""
    async with (
        raw_server(sse("ok", "anthropic")) as (url, seen),
        AnthropicClient(url + base_path, KEY, timeouts=FAST) as client,
    ):
        response, error = await ask(client)
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "ok"
    [request] = seen
    assert request.method == "POST"
    assert request.path == expected
    assert str(client.url) == url + expected


@pytest.mark.asyncio
async def test_anthropic_base_url_query_is_kept(no_task_leak: None) -> None:
    """A gateway prefix with a query (a tenant, an ``api-version``) keeps it on the
    request, after the ``/v1/messages`` the path gets."""
    async with (
        raw_server(sse("ok", "anthropic")) as (url, seen),
        AnthropicClient(
            url + "/anthropic/?tenant=acme&api-version=2", KEY, timeouts=FAST
        ) as client,
    ):
        response, error = await ask(client)
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "ok"
    [request] = seen
    assert request.path == "/anthropic/v1/messages"
    assert request.query == {"tenant": "acme", "api-version": "2"}
    assert str(client.url) == url + "/anthropic/v1/messages?tenant=acme&api-version=2"


def test_anthropic_client_url_for_real_gateways() -> None:
    """The URL built for the documented gateway base URLs (no request is sent)."""
    cases = {
        "https://api.deepseek.com/anthropic": "https://api.deepseek.com/anthropic/v1/messages",
        "https://api.anthropic.com": "https://api.anthropic.com/v1/messages",
        "https://gateway.ai.cloudflare.com/v1/acct/gw/anthropic": (
            "https://gateway.ai.cloudflare.com/v1/acct/gw/anthropic/v1/messages"
        ),
        "http://localhost:4000/v1": "http://localhost:4000/v1/messages",  # LiteLLM proxy
    }
    built = {base: str(AnthropicClient(base, KEY).url) for base in cases}
    assert built == cases


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("client_type", "base_path", "expected"),
    [
        (OpenAIChatClient, "", "/v1/chat/completions"),
        (OpenAIChatClient, "/api/v1", "/api/v1/chat/completions"),
        (OpenAIChatClient, "/openai", "/openai/chat/completions"),
        (OpenAIChatClient, "/v1beta/openai/", "/v1beta/openai/chat/completions"),
        (OpenAIResponsesClient, "", "/v1/responses"),
        (OpenAIResponsesClient, "/openai", "/openai/responses"),
    ],
    ids=["chat-root", "chat-api-v1", "chat-openai", "chat-gemini", "resp-root", "resp-openai"],
)
async def test_openai_base_url_path_is_the_api_prefix_unchanged(
    no_task_leak: None, client_type: type[LLMClient], base_path: str, expected: str
) -> None:
    """openai-python's ``base_url`` is the API prefix (``https://openrouter.ai/api/v1``,
    Gemini's ``.../v1beta/openai/``, Groq's ``.../openai/v1``): only the endpoint is added,
    never a ``/v1`` (the Anthropic rule must not leak into the OpenAI clients); with no
    path at all, ``/v1`` is the prefix."""
    fmt = DIALECTS[client_type]
    async with (
        raw_server(sse("ok", fmt)) as (url, seen),
        client_type(url + base_path, KEY, timeouts=FAST) as client,
    ):
        response, error = await ask(client)
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "ok"
    [request] = seen
    assert request.path == expected
    assert str(client.url) == url + expected


# ================================================================ 2. credential headers


def echo_401(request: web.Request) -> web.Response:
    """A gateway's 401 that echoes every request header, and each value's token alone
    (the part after a scheme such as ``Bearer``)."""
    echoed = "; ".join(f"{k}={v}" for k, v in request.headers.items())
    tokens = [v.partition(" ")[2] for v in request.headers.values() if " " in v]
    body = {
        "error": {
            "message": f"invalid credentials: {echoed} (tokens: {', '.join(tokens)})",
            "type": "authentication_error",
            "code": "invalid_api_key",
            "request_headers": dict(request.headers),
        }
    }
    return web.json_response(body, status=401)


async def echoing_401(request: web.Request) -> web.StreamResponse:
    return echo_401(request)


#: Credential headers of real gateways, and made-up ones for each word of the rule.
SECRET_HEADERS = [
    ("cf-aig-authorization", "Bearer cf-secret-123456"),  # Cloudflare AI Gateway
    ("x-portkey-api-key", "pk-live-7f3a9c2e51"),  # Portkey
    ("helicone-auth", "Bearer hc-abcdef987654"),  # Helicone
    ("Ocp-Apim-Subscription-Key", "apim0a1b2c3d4e5f"),  # Azure API Management
    ("x-session-token", "sess-9z8y7x6w5v"),
    ("X-Client-Secret", "clsec-4u3t2s1r"),
    ("X-Proxy-Password", "pw-hunter2-hunter2"),
    ("X-Upstream-Cookie", "sid=ck-31415926535"),
    ("X-Gateway-Session", "gws-27182818284"),
    ("X-API-TOKEN", "tok-UPPER-112358"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("name", "value"), SECRET_HEADERS, ids=[n for n, _ in SECRET_HEADERS])
async def test_a_credential_header_echoed_in_an_http_error_is_redacted(
    no_task_leak: None, name: str, value: str
) -> None:
    """A header whose name says credential (``auth``, ``key``, ``token``, ``secret``,
    ``password``, ``cookie``, ``session``, in any case) is a secret like the API key: it
    goes to the server as given, but an error body that echoes it (value, or the token
    after its scheme) shows neither in the error's str, repr, args or attributes."""
    token = value.partition(" ")[2]
    async with (
        raw_server(echoing_401) as (url, seen),
        OpenAIChatClient(url + "/v1", KEY, headers={name: value}, timeouts=FAST) as client,
    ):
        _, error = await ask(client)
    [request] = seen
    assert request.headers.getall(name) == [value]  # sent verbatim
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.status == 401
    assert error.body is not None
    assert "invalid credentials" in error.body
    assert "***" in error.body
    shown = texts_of(error)
    assert value not in shown
    if token:
        assert token not in shown
    assert KEY not in shown  # (the API key, as before)


@pytest.mark.asyncio
async def test_a_credential_header_echoed_in_an_anthropic_400_is_redacted(
    no_task_leak: None,
) -> None:
    """The same through AnthropicClient and Anthropic's error shape (DeepSeek's Anthropic
    endpoint behind Cloudflare AI Gateway, with ``cf-aig-authorization``)."""
    value, token = "Bearer cf-secret-123456", "cf-secret-123456"

    async def bad_request(request: web.Request) -> web.StreamResponse:
        seen_value = request.headers.get("cf-aig-authorization", "")
        message = f"gateway refused cf-aig-authorization={seen_value} (token {token})"
        body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return web.json_response(body, status=400)

    async with (
        raw_server(bad_request) as (url, seen),
        AnthropicClient(
            url + "/anthropic", KEY, headers={"cf-aig-authorization": value}, timeouts=FAST
        ) as client,
    ):
        _, error = await ask(client)
    assert len(seen) == 1
    assert isinstance(error, HTTPStatusError), repr(error)
    assert (error.status, error.error_type) == (400, "invalid_request_error")
    assert error.provider_message is not None
    assert error.provider_message.startswith("gateway refused cf-aig-authorization=")
    shown = texts_of(error)
    assert value not in shown
    assert token not in shown


@pytest.mark.asyncio
async def test_a_credential_header_echoed_in_an_anthropic_error_event_is_redacted(
    no_task_leak: None,
) -> None:
    """An error arriving mid-stream (``event: error`` after the message started, as
    Anthropic sends ``overloaded_error``) whose data echoes a credential header: the
    ProviderError's message, body, str, repr and args show neither value nor token."""
    name, value = "x-portkey-api-key", "pk-live-7f3a9c2e51"
    auth, token = "Bearer cf-secret-123456", "cf-secret-123456"

    async def failing_stream(request: web.Request) -> web.StreamResponse:
        events = render_events(Reply(text="partial answer", chunk_size=64), "anthropic")
        head = [e for e in events if b"message_start" in e or b"content_block_" in e][:3]
        echoed = f"upstream failed for {name}={request.headers[name]}, " + (
            f"cf-aig-authorization={request.headers['cf-aig-authorization']} ({token})"
        )
        error = {"type": "error", "error": {"type": "overloaded_error", "message": echoed}}
        tail = f"event: error\ndata: {json.dumps(error)}\n\n".encode()
        return web.Response(body=b"".join([*head, tail]), content_type="text/event-stream")

    headers = {name: value, "cf-aig-authorization": auth}
    async with (
        raw_server(failing_stream) as (url, seen),
        AnthropicClient(url, KEY, headers=headers, timeouts=FAST) as client,
    ):
        _, error = await ask(client)
    assert len(seen) == 1
    assert isinstance(error, ProviderError), repr(error)
    assert error.error_type == "overloaded_error"
    assert error.message.startswith("upstream failed for x-portkey-api-key=")
    assert error.partial is not None
    assert error.partial.text == "partial answer"
    shown = texts_of(error)
    for secret in (value, auth, token):
        assert secret not in shown, secret


@pytest.mark.asyncio
async def test_a_credential_header_echoed_in_an_openai_chat_error_chunk_is_redacted(
    no_task_leak: None,
) -> None:
    """OpenRouter-style mid-stream error (``data: {"error": {...}}`` after content,
    https://openrouter.ai/docs/api-reference/streaming) echoing ``helicone-auth``."""
    value, token = "Bearer hc-abcdef987654", "hc-abcdef987654"

    async def failing_stream(request: web.Request) -> web.StreamResponse:
        events = render_events(Reply(text="partial", chunk_size=64), "openai-chat")
        head = [e for e in events if b'"content":"partial"' in e]
        message = f"provider rejected helicone-auth: {request.headers['helicone-auth']} / {token}"
        error = {"error": {"message": message, "code": 502}}
        tail = f"data: {json.dumps(error)}\n\n".encode()
        return web.Response(body=b"".join([*head, tail]), content_type="text/event-stream")

    async with (
        raw_server(failing_stream) as (url, seen),
        OpenAIChatClient(
            url + "/v1", KEY, headers={"helicone-auth": value}, timeouts=FAST
        ) as client,
    ):
        _, error = await ask(client)
    assert len(seen) == 1
    assert isinstance(error, ProviderError), repr(error)
    assert error.message.startswith("provider rejected helicone-auth: ")
    assert error.partial is not None
    assert error.partial.text == "partial"
    shown = texts_of(error)
    assert value not in shown
    assert token not in shown


@pytest.mark.asyncio
async def test_harmless_headers_echoed_stay_visible_beside_a_redacted_credential(
    no_task_leak: None,
) -> None:
    """OpenRouter's attribution headers (``X-Title``, ``HTTP-Referer``) are not
    credentials: echoed in an error they still show (they help debugging), while the
    credential header echoed beside them does not."""
    headers = {
        "X-Title": "My App",
        "HTTP-Referer": "https://example.org/app",
        "x-portkey-api-key": "pk-live-7f3a9c2e51",
    }
    async with (
        raw_server(echoing_401) as (url, seen),
        OpenAIChatClient(url + "/api/v1", KEY, headers=headers, timeouts=FAST) as client,
    ):
        _, error = await ask(client)
    assert len(seen) == 1
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.body is not None
    assert error.provider_message is not None
    for shown in (error.body, error.provider_message, str(error)):
        assert "X-Title=My App" in shown
        assert "HTTP-Referer=https://example.org/app" in shown
        assert "pk-live-7f3a9c2e51" not in shown
    assert json.loads(error.body)["error"]["request_headers"]["X-Title"] == "My App"


@pytest.mark.parametrize("client_type", CLIENTS, ids=lambda c: c.__name__)
def test_client_repr_shows_no_header_value(client_type: type[LLMClient]) -> None:
    """A client's repr (logged, shown in tracebacks) shows no header value: neither a
    credential's nor a harmless one's."""
    headers = dict(SECRET_HEADERS)
    headers |= {"X-Title": "My App", "HTTP-Referer": "https://example.org/app"}
    client = client_type("http://127.0.0.1:1/v1", KEY, headers=headers)
    shown = repr(client) + "\n" + str(client)
    assert client_type.__name__ in shown
    for value in [*headers.values(), KEY]:
        assert value not in shown, value
    for _, value in SECRET_HEADERS:
        token = value.partition(" ")[2]
        if token:
            assert token not in shown, token


# ================================================================ 3. trust_env


@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", CLIENTS, ids=lambda c: c.__name__)
async def test_trust_env_sends_through_http_proxy_from_the_environment(
    no_task_leak: None, no_proxy_env: pytest.MonkeyPatch, client_type: type[LLMClient]
) -> None:
    """``trust_env=True`` (aiohttp's ``ClientSession(trust_env=True)``, httpx's default in
    the SDKs) makes the client's own session honour ``HTTP_PROXY``: the request for a host
    that does not exist reaches the proxy, which answers it; ``trust_env`` is an option
    of the client, never a body field."""
    async with LLMServer() as proxy:
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        proxy.enqueue(Reply(text="via proxy"))
        client = client_type(f"http://{NOWHERE}/v1", KEY, timeouts=FAST, trust_env=True)
        async with client:
            response, error = await ask(client)
        assert error is None, repr(error)
        assert response is not None
        assert response.text == "via proxy"
        [request] = proxy.requests
        assert request.path == ENDPOINTS[client_type]
        assert request.headers["Host"] == NOWHERE
        assert "trust_env" not in request.body
        assert request.body["stream"] is True


@pytest.mark.asyncio
async def test_trust_env_proxy_gets_the_absolute_uri(
    no_task_leak: None, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """Through an HTTP proxy the request target is the absolute URI (RFC 9112 3.2.2),
    query included; the API key header goes along to the target, unchanged."""
    async with raw_server(sse("proxied")) as (proxy_url, seen):
        no_proxy_env.setenv("HTTP_PROXY", proxy_url)
        base = f"http://{NOWHERE}/api/v1?tenant=acme"
        async with OpenAIChatClient(base, KEY, timeouts=FAST, trust_env=True) as client:
            response, error = await ask(client)
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "proxied"
    [request] = seen
    assert request.target == f"http://{NOWHERE}/api/v1/chat/completions?tenant=acme"
    assert request.headers["Host"] == NOWHERE
    assert request.headers.getall("Authorization") == [f"Bearer {KEY}"]
    assert "trust_env" not in request.body


@pytest.mark.asyncio
@pytest.mark.parametrize("trust_env", [None, False], ids=["default", "false"])
async def test_without_trust_env_the_proxy_environment_is_ignored(
    no_task_leak: None, no_proxy_env: pytest.MonkeyPatch, trust_env: bool | None
) -> None:
    """By default (aiohttp's default, ``trust_env=False``) ``HTTP_PROXY`` is not read:
    the client connects to the host itself, which does not resolve: a TransportError
    naming it, and the proxy never hears of the request."""
    options: dict[str, Any] = {} if trust_env is None else {"trust_env": trust_env}
    async with LLMServer() as proxy:
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        client = OpenAIChatClient(f"http://{NOWHERE}/v1", KEY, timeouts=FAST, **options)
        async with client:
            response, error = await ask(client)
        assert response is None
        assert isinstance(error, TransportError), repr(error)
        assert NOWHERE in str(error)
        assert proxy.request_count == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("no_proxy", "proxied"),
    [
        (NOWHERE, False),
        (f"example.com,{NOWHERE}", False),
        (".invalid", False),
        ("example.com,localhost", True),
    ],
    ids=["host", "in-list", "domain-suffix", "other-hosts"],
)
async def test_trust_env_honours_no_proxy(
    no_task_leak: None, no_proxy_env: pytest.MonkeyPatch, no_proxy: str, proxied: bool
) -> None:
    """``NO_PROXY`` (a host, a list, a domain suffix) keeps matching hosts off the proxy:
    the client then connects itself (TransportError, the proxy gets nothing); other
    hosts still go through it."""
    async with LLMServer() as proxy:
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        no_proxy_env.setenv("NO_PROXY", no_proxy)
        proxy.enqueue(Reply(text="via proxy"))
        client = OpenAIChatClient(f"http://{NOWHERE}/v1", KEY, timeouts=FAST, trust_env=True)
        async with client:
            response, error = await ask(client)
        if proxied:
            assert error is None, repr(error)
            assert response is not None
            assert response.text == "via proxy"
            assert proxy.request_count == 1
        else:
            assert response is None
            assert isinstance(error, TransportError), repr(error)
            assert NOWHERE in str(error)
            assert proxy.request_count == 0


@pytest.mark.asyncio
async def test_a_given_session_ignores_the_clients_trust_env(
    no_task_leak: None, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """A ``session=`` is the user's, used as they made it: the client's ``trust_env=True``
    does not make a plain session read ``HTTP_PROXY``."""
    async with LLMServer() as proxy, aiohttp.ClientSession() as session:
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        client = OpenAIChatClient(
            f"http://{NOWHERE}/v1", KEY, timeouts=FAST, session=session, trust_env=True
        )
        async with client:
            response, error = await ask(client)
        assert response is None
        assert isinstance(error, TransportError), repr(error)
        assert proxy.request_count == 0
        assert not session.closed  # (the user's to close)


@pytest.mark.asyncio
async def test_a_given_trusting_session_uses_the_proxy_whatever_the_client_says(
    no_task_leak: None, no_proxy_env: pytest.MonkeyPatch
) -> None:
    """And the other way round: a user's ``ClientSession(trust_env=True)`` goes through
    the proxy even with the client's ``trust_env=False``."""
    async with LLMServer() as proxy, aiohttp.ClientSession(trust_env=True) as session:
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        proxy.enqueue(Reply(text="user's proxy"))
        client = OpenAIChatClient(
            f"http://{NOWHERE}/v1", KEY, timeouts=FAST, session=session, trust_env=False
        )
        async with client:
            response, error = await ask(client)
        assert error is None, repr(error)
        assert response is not None
        assert response.text == "user's proxy"
        [request] = proxy.requests
        assert request.headers["Host"] == NOWHERE
        assert "trust_env" not in request.body
        assert not session.closed


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("client_type", "trust_env"),
    [(OpenAIChatClient, True), (AnthropicClient, False), (OpenAIResponsesClient, True)],
    ids=["chat-true", "anthropic-false", "responses-true"],
)
async def test_trust_env_is_never_a_body_field(
    llm_server: LLMServer,
    no_proxy_env: pytest.MonkeyPatch,
    client_type: type[LLMClient],
    trust_env: bool,
) -> None:
    """With no proxy in the environment, ``trust_env`` either way reaches the server
    directly, and the body holds the request's fields only (the client's ``**params``
    must not swallow it)."""
    client = client_type(llm_server.url, KEY, timeouts=FAST, trust_env=trust_env, temperature=0.5)
    async with client:
        response, error = await ask(client)
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "Hello from the rafrx test server!"
    [request] = llm_server.requests
    assert "trust_env" not in request.body
    assert request.body["temperature"] == 0.5  # (the other params still go)
