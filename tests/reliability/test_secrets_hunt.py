"""Secrets hunt: API keys in the forms the existing security suites do not try.

Keys with stray whitespace (read from a file, pasted from a web page), a token
given as the URL's user name (``https://TOKEN@host``), keys a gateway echoes
JSON-escaped (PHP's ``\\/``), keys in a ``base_url`` the client refuses, key-like
query parameters in :class:`~rafrx.testing.LLMServer`'s record, and what the
CLI prints. Every request is real HTTP on 127.0.0.1, against a small aiohttp
server of the test's own (it echoes what it was sent, as debugging proxies and
some gateways do) or an :class:`~rafrx.testing.LLMServer`; nothing is patched.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import pickle
import socket
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rafrx import Agent, ChatMessage, collect_agent_response, record
from rafrx import operators as ops
from rafrx.errors import (
    ContentTypeError,
    HTTPStatusError,
    MalformedEvent,
    ProviderError,
    RafrxError,
    TransportError,
)
from rafrx.history import InMemoryHistoryProvider
from rafrx.recorder import record_http, timing_path
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    Timeouts,
)
from rafrx.testing import LLMServer, Reply
from tests.sources._raw_server import raw_server

ROOT = Path(__file__).resolve().parent.parent.parent
#: No ``sk-`` or ``AIza`` prefix: found by value, never by a built-in pattern.
KEY = "secret-key-do-not-leak-0123456789"
#: A key with ``/`` and ``+`` (an AWS-style secret, a base64 credential).
SLASH_KEY = "AKIAsecret/key+do/not-leak=="
FAST = Timeouts(connect=2.0, first_byte=5.0, idle=5.0)
USER = [ChatMessage.user("hi")]
CLIENTS: list[type[LLMClient]] = [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# ---------------------------------------------------------------- helpers


def shown(error: BaseException) -> str:
    """Everything an error shows: str, repr, args, attributes, traceback, pickle."""
    parts = [str(error), repr(error), repr(error.args), repr(vars(error))]
    parts.append("".join(traceback.format_exception(error)))
    parts.append(pickle.dumps(error).decode("latin-1"))
    for linked in (error.__cause__, error.__context__):
        if linked is not None:
            parts.append(repr(linked))
    return "\n".join(parts)


def assert_hidden(secret: str, *texts: object) -> None:
    for text in texts:
        assert secret not in str(text), f"the secret leaked into: {str(text)[:400]}"


async def failure(client: LLMClient) -> BaseException | None:
    """The error one call ends with (``None`` when it completes)."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[BaseException | None] = loop.create_future()

    def finish(error: BaseException | None) -> None:
        if not ended.done():
            ended.set_result(error)

    subscription = client.stream(USER).subscribe(on_error=finish, on_completed=lambda: finish(None))
    try:
        return await asyncio.wait_for(ended, 10)
    finally:
        subscription.dispose()


def request_head(request: web.Request) -> str:
    """The request line and headers, as a debugging proxy's error page shows them."""
    lines = [f"{request.method} {request.raw_path}"]
    lines += [f"{name}: {value}" for name, value in request.headers.items()]
    return "\n".join(lines)


async def echo_head_401(request: web.Request) -> web.StreamResponse:
    """401 with the request's head as a plain-text body."""
    await request.read()
    return web.Response(status=401, text=request_head(request), content_type="text/plain")


async def echo_head_json_401(request: web.Request) -> web.StreamResponse:
    """401 with the request's head in an OpenAI-shaped JSON error (message and body)."""
    await request.read()
    body = {"error": {"message": f"bad credentials:\n{request_head(request)}", "type": "auth"}}
    return web.json_response(body, status=401)


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """An aiohttp server on 127.0.0.1 answering every request with ``handler``: its URL."""
    async with raw_server(handler) as (url, _seen):
        yield url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log record of every logger, at DEBUG."""
    caplog.set_level(logging.DEBUG)
    return caplog


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``python -m rafrx ARGS`` as a subprocess (one line on stdin): status, stdout+stderr.

    Run without blocking the loop, as the test's own server answers it.
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rafrx",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8", **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(b"hello\n"), 60)
    assert process.returncode is not None
    return process.returncode, out.decode("utf-8", "replace") + err.decode("utf-8", "replace")


# ---------------------------------------------------------------- guards that hold


@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", CLIENTS)
async def test_a_key_ending_in_a_newline_is_a_typed_error_without_the_key(
    no_task_leak: None, client_type: type[LLMClient]
) -> None:
    """A key read from a file with ``open(...).read()`` keeps its newline: aiohttp refuses
    the header; the user gets a typed, non-retryable error that does not quote it."""
    async with (
        serving(echo_head_401) as url,
        client_type(url, KEY + "\n", timeouts=FAST) as client,
    ):
        error = await failure(client)
    assert isinstance(error, TransportError), repr(error)
    assert not error.retryable
    assert_hidden(KEY, shown(error))


@pytest.mark.asyncio
async def test_a_basic_credential_given_in_headers_and_echoed_is_redacted(
    no_task_leak: None,
) -> None:
    """``headers={"Authorization": "Basic <base64>"}`` (a gateway behind basic auth):
    the base64 the server echoes is hidden, as the password it encodes."""
    basic = base64.b64encode(f"me:{KEY}".encode()).decode()
    async with (
        serving(echo_head_json_401) as url,
        OpenAIChatClient(url, headers={"Authorization": f"Basic {basic}"}, timeouts=FAST) as c,
    ):
        error = await failure(c)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.status == 401
    assert_hidden(basic, shown(error))


@pytest.mark.asyncio
async def test_a_key_echoed_in_the_request_id_header_is_redacted(no_task_leak: None) -> None:
    """A gateway that names the request by its credential (``x-request-id``): the
    error's ``request_id`` does not carry the key."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        token = request.headers.get("x-goog-api-key", "")
        return web.json_response(
            {"error": {"message": "denied"}}, status=403, headers={"x-request-id": f"req-{token}"}
        )

    async with (
        serving(handler) as url,
        OpenAIChatClient(url, headers={"x-goog-api-key": KEY}, timeouts=FAST) as client,
    ):
        error = await failure(client)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.request_id is not None
    assert error.request_id == "req-***"  # echoed, and redacted
    assert_hidden(KEY, shown(error))


@pytest.mark.asyncio
async def test_a_key_echoed_in_a_wrong_content_type_is_redacted(no_task_leak: None) -> None:
    """A 200 whose Content-Type and body quote the ``Ocp-Apim-Subscription-Key`` header:
    the :class:`ContentTypeError`'s message names the type without the key."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        token = request.headers.get("Ocp-Apim-Subscription-Key", "")
        return web.Response(
            body=f"<html>{token}</html>".encode(),
            headers={"Content-Type": f"text/html; x-key={token}"},
        )

    async with (
        serving(handler) as url,
        OpenAIChatClient(url, headers={"Ocp-Apim-Subscription-Key": KEY}, timeouts=FAST) as c,
    ):
        error = await failure(c)
    assert isinstance(error, ContentTypeError), repr(error)
    assert "text/html" in error.message
    assert error.body == "<html>***</html>"  # echoed, and redacted
    assert_hidden(KEY, shown(error))


@pytest.mark.asyncio
async def test_an_agent_over_a_gateway_echoing_custom_credentials_keeps_none(
    no_task_leak: None, debug_logs: pytest.LogCaptureFixture
) -> None:
    """An agent whose client sends the key as ``?key=``, as ``X-Custom-Token`` and as the
    URL's password, to a gateway that echoes them all: the error, its ``partial``,
    the agent's repr and history, and every DEBUG log record hold none of them."""
    header_key, query_key, password = f"hdr-{KEY}", f"qry-{KEY}", f"pw-{KEY}"
    async with serving(echo_head_json_401) as url:
        base = url.replace("http://", f"http://me:{password}@") + f"/v1?key={query_key}"
        client = OpenAIChatClient(base, headers={"X-Custom-Token": header_key}, timeouts=FAST)
        async with client:
            history = InMemoryHistoryProvider()
            agent = Agent(client, history=history)
            with pytest.raises(RafrxError) as caught:
                await asyncio.wait_for(agent.send("hi"), 10)
            saved = list(await history.load())
    records = [
        (r.getMessage(), r.exc_text, "".join(traceback.format_exception(*r.exc_info)))
        if r.exc_info
        else (r.getMessage(), r.exc_text)
        for r in debug_logs.records
    ]
    assert isinstance(caught.value, HTTPStatusError), repr(caught.value)
    assert "x-custom-token: ***" in (caught.value.body or "").lower()  # echoed, and redacted
    for secret in (header_key, query_key, password):
        assert_hidden(secret, shown(caught.value), caught.value.partial, repr(agent))
        assert_hidden(secret, saved, records)


@pytest.mark.asyncio
async def test_llm_server_records_no_url_password_nor_extra_credential(
    llm_server: LLMServer,
) -> None:
    """What :class:`LLMServer` recorded, printed: the ``Authorization: Basic`` aiohttp
    made of the URL's password and an ``x-goog-api-key`` header are both hidden."""
    llm_server.enqueue(Reply(text="ok"))
    base = llm_server.url.replace("http://", f"http://me:{KEY}@")
    async with OpenAIChatClient(base, headers={"x-goog-api-key": KEY}, timeouts=FAST) as client:
        assert await failure(client) is None
    (request,) = llm_server.requests
    basic = base64.b64encode(f"me:{KEY}".encode()).decode()
    assert request.headers["authorization"] == "Basic ***"
    for secret in (KEY, basic):
        assert_hidden(secret, repr(request), dict(request.headers), repr(llm_server.requests))


# ---------------------------------------------------------------- whitespace around a key


@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", CLIENTS)
@pytest.mark.parametrize("pad", [" ", "\t"], ids=["space", "tab"])
async def test_a_key_with_trailing_whitespace_echoed_back_is_redacted(
    no_task_leak: None, client_type: type[LLMClient], pad: str
) -> None:
    async with (
        serving(echo_head_401) as url,
        client_type(url, KEY + pad, timeouts=FAST) as client,
    ):
        error = await failure(client)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.body is not None
    assert "POST /v1/" in error.body  # the echo came back
    assert_hidden(KEY, shown(error))


@pytest.mark.asyncio
async def test_a_credential_header_with_trailing_whitespace_echoed_back_is_redacted(
    no_task_leak: None,
) -> None:
    async with (
        serving(echo_head_json_401) as url,
        OpenAIChatClient(url, headers={"api-key": KEY + " "}, timeouts=FAST) as client,
    ):
        error = await failure(client)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert_hidden(KEY, shown(error))


@pytest.mark.asyncio
async def test_chat_cli_never_prints_a_key_with_trailing_whitespace_echoed_back(
    no_task_leak: None,
) -> None:
    async with serving(echo_head_json_401) as url:
        code, output = await run_cli(
            "chat",
            "--base-url",
            url,
            "--model",
            "m",
            "--plain",
            "--api-key-env",
            "HUNT_LLM_CREDENTIAL",  # not named like *_API_KEY: no environment fallback
            env={"HUNT_LLM_CREDENTIAL": KEY + " "},
        )
    assert "401" in output, output
    assert code != 0
    assert_hidden(KEY, output)


# ---------------------------------------------------------------- a token as the URL's user


@pytest.mark.asyncio
async def test_a_token_given_as_the_url_user_name_stays_out_of_reprs_and_errors(
    no_task_leak: None,
) -> None:
    base = f"http://{KEY}@127.0.0.1:{free_port()}/v1"
    async with OpenAIChatClient(base, timeouts=FAST) as client:
        error = await failure(client)
        assert_hidden(KEY, repr(client), str(client))
    assert isinstance(error, TransportError), repr(error)
    assert_hidden(KEY, shown(error))


@pytest.mark.asyncio
async def test_a_url_user_token_echoed_as_basic_credentials_is_redacted(
    no_task_leak: None,
) -> None:
    basic = base64.b64encode(f"{KEY}:".encode()).decode()
    async with serving(echo_head_401) as url:
        base = url.replace("http://", f"http://{KEY}@") + "/v1"
        async with OpenAIChatClient(base, timeouts=FAST) as client:
            error = await failure(client)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.body is not None
    assert "authorization: basic" in error.body.lower()  # it was sent, and echoed
    assert_hidden(basic, shown(error))


@pytest.mark.asyncio
async def test_record_http_never_writes_a_token_given_as_the_url_user_name(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    llm_server.enqueue(Reply(text="recorded"))
    url = llm_server.url.replace("http://", f"http://{KEY}@") + "/v1/chat/completions"
    path = tmp_path / "user.sse"
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    await record_http(url, path, json_body=body, dialect="openai-chat")
    assert b"recorded" in path.read_bytes()
    for file in (path, timing_path(path)):
        assert KEY.encode() not in file.read_bytes(), file.name


# ---------------------------------------------------------------- JSON-escaped echoes


def php_json(value: Any) -> str:
    """JSON as PHP's ``json_encode`` writes it: every ``/`` escaped as ``\\/``."""
    return json.dumps(value).replace("/", "\\/")


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["api_key", "header"])
async def test_a_key_echoed_json_escaped_in_an_http_error_body_is_redacted(
    no_task_leak: None, how: str
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        sent = request.headers.get("X-Custom-Token") or request.headers.get("authorization", "")
        body = php_json({"error": {"message": f"invalid token {sent}", "type": "auth"}})
        return web.Response(status=401, text=body, content_type="application/json")

    kwargs: dict[str, Any] = (
        {"api_key": SLASH_KEY} if how == "api_key" else {"headers": {"X-Custom-Token": SLASH_KEY}}
    )
    async with serving(handler) as url, OpenAIChatClient(url, timeouts=FAST, **kwargs) as c:
        error = await failure(c)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.provider_message is not None
    assert_hidden(SLASH_KEY, shown(error))  # (holds: the decoded form is redacted)
    escaped = SLASH_KEY.replace("/", "\\/")
    assert_hidden(escaped, shown(error))


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["error-event", "malformed"])
async def test_a_key_echoed_json_escaped_in_a_stream_error_is_redacted(
    no_task_leak: None, kind: str
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        sent = request.headers.get("x-api-key", "")
        if kind == "error-event":
            data = php_json({"type": "error", "error": {"type": "auth", "message": sent}})
            body = f"event: error\ndata: {data}\n\n"
        else:
            body = f"event: message_start\ndata: {{not json {php_json(sent)}\n\n"
        return web.Response(body=body.encode(), content_type="text/event-stream")

    async with (
        serving(handler) as url,
        AnthropicClient(url, SLASH_KEY, timeouts=FAST) as client,
    ):
        error = await failure(client)
    assert isinstance(error, ProviderError | MalformedEvent), repr(error)
    escaped = SLASH_KEY.replace("/", "\\/")
    assert_hidden(SLASH_KEY, shown(error))
    assert_hidden(escaped, shown(error))


@pytest.mark.asyncio
async def test_a_recording_of_a_call_whose_error_echoes_the_key_escaped_holds_none(
    no_task_leak: None, tmp_path: Path
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        sent = request.headers.get("X-Custom-Token", "")
        body = php_json({"error": {"message": f"invalid {sent}"}})
        return web.Response(status=401, text=body, content_type="application/json")

    path = tmp_path / "call.jsonl"
    headers = {"X-Custom-Token": SLASH_KEY}
    async with serving(handler) as url, OpenAIChatClient(url, headers=headers) as c:
        with pytest.raises(HTTPStatusError):
            await asyncio.wait_for(
                collect_agent_response(record(c.stream(USER).pipe(ops.convert()), path)), 10
            )
    text = path.read_text(encoding="utf-8")
    assert "HTTPStatusError" in text
    assert_hidden(SLASH_KEY.replace("/", "\\/"), text)
    assert_hidden(SLASH_KEY.replace("/", "\\\\/"), text)  # the same, JSON-escaped again


# ---------------------------------------------------------------- a base_url refused


@pytest.mark.parametrize(
    "base",
    [f"api.example.com/v1?key={KEY}", f"/v1?api-key={KEY}", f"me:{KEY}@api.example.com/v1"],
    ids=["query-no-scheme", "query-path-only", "password-no-scheme"],
)
@pytest.mark.parametrize("client_type", CLIENTS)
def test_a_refused_base_url_is_quoted_without_its_key(
    client_type: type[LLMClient], base: str
) -> None:
    with pytest.raises(ValueError, match="absolute URL") as caught:
        client_type(base)
    assert_hidden(KEY, str(caught.value), repr(caught.value))


@pytest.mark.asyncio
async def test_chat_cli_never_prints_a_key_from_a_base_url_it_refuses() -> None:
    code, output = await run_cli(
        "chat", "--base-url", f"api.example.com/v1?key={KEY}", "--model", "m"
    )
    assert code == 2, output
    assert "base-url" in output
    assert_hidden(KEY, output)


# ---------------------------------------------------------------- LLMServer's record


@pytest.mark.asyncio
@pytest.mark.parametrize("param", ["key", "api_key", "x-goog-api-key", "x-api-key", "access-token"])
async def test_llm_server_records_no_key_like_query_value(
    llm_server: LLMServer, param: str
) -> None:
    llm_server.enqueue(Reply(text="ok"))
    async with OpenAIChatClient(f"{llm_server.url}/v1?{param}={KEY}", timeouts=FAST) as client:
        assert await failure(client) is None
    (request,) = llm_server.requests
    assert request.query[param] == "***"
    assert_hidden(KEY, repr(request), dict(request.query))
