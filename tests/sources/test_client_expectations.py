"""What a user coming from openai-python / anthropic-sdk-python expects of the clients.

Each test runs a real request over 127.0.0.1, against
:class:`~rafrx.testing.LLMServer` or a small aiohttp server of its own (for
paths, raw headers and bodies LLMServer does not make), and states what the
official SDK (installed: openai 3.63, anthropic 2.17, on ``httpx2``) or the
provider's documentation does.
"""

from __future__ import annotations

import gzip
import json

import pytest
from aiohttp import web

from rafrx.errors import ContentTypeError, HTTPStatusError
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    RetryPolicy,
)
from rafrx.testing import Fault, LLMServer, Reply
from tests.sources._raw_server import KEY, ask, raw_server, sse

FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, jitter=False)


def texts_of(err: BaseException) -> str:
    """Every text an error shows: str, repr, and its string attributes."""
    parts = [str(err), repr(err)]
    parts += [v for v in vars(err).values() if isinstance(v, str)]
    return "\n".join(parts)


# ================================================================ base_url


@pytest.mark.asyncio
async def test_an_azure_deployment_url_keeps_its_query_and_uses_the_api_key_header(
    no_task_leak: None,
) -> None:
    """Azure OpenAI (as ``openai.AzureOpenAI`` builds it): POST
    ``{endpoint}/openai/deployments/{name}/chat/completions?api-version=...`` with the key
    in an ``api-key`` header and no ``Authorization``
    (https://learn.microsoft.com/azure/ai-services/openai/reference)."""
    base = "/openai/deployments/gpt-4o-prod?api-version=2024-10-21"
    async with (
        raw_server(sse("ok")) as (url, seen),
        OpenAIChatClient(url + base, headers={"api-key": KEY}) as client,
    ):
        response, error = await ask(client)
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "ok"
    [request] = seen
    assert request.path == "/openai/deployments/gpt-4o-prod/chat/completions"
    assert request.query == {"api-version": "2024-10-21"}
    assert request.headers.getall("api-key") == [KEY]
    assert "Authorization" not in request.headers


# ================================================================ headers


@pytest.mark.asyncio
async def test_extra_headers_are_sent_verbatim_and_win_case_insensitively(
    no_task_leak: None,
) -> None:
    """OpenRouter's attribution headers (``HTTP-Referer``, ``X-Title``:
    https://openrouter.ai/docs/api-reference/overview), OpenAI's ``OpenAI-Organization`` /
    ``OpenAI-Project`` go as given, once each; a user's ``user-agent`` replaces the
    client's own whatever its case, as openai/_base_client.py:2389 ``_merge_headers``
    ("Merge headers case-insensitively, with later mappings taking precedence") does."""
    extra = {
        "HTTP-Referer": "https://example.org/app",
        "X-Title": "My App",
        "OpenAI-Organization": "org-123",
        "OpenAI-Project": "proj_456",
        "user-agent": "my-app/1.0",
    }
    async with (
        raw_server(sse("ok")) as (url, seen),
        OpenAIChatClient(url + "/api/v1", KEY, headers=extra) as client,
    ):
        _, error = await ask(client)
    assert error is None, repr(error)
    [request] = seen
    assert request.path == "/api/v1/chat/completions"
    for name, value in extra.items():
        assert request.headers.getall(name) == [value], name
    assert request.headers.getall("Authorization") == [f"Bearer {KEY}"]
    assert request.headers["Content-Type"] == "application/json"


@pytest.mark.asyncio
async def test_anthropic_auth_version_and_beta_headers(no_task_leak: None) -> None:
    """Anthropic Messages: the key in ``x-api-key``, an ``anthropic-version`` header, betas
    in ``anthropic-beta`` (https://docs.anthropic.com/en/api/versioning,
    https://docs.anthropic.com/en/api/beta-headers); ``max_tokens`` is required in the
    body."""
    beta = "interleaved-thinking-2025-05-14,token-efficient-tools-2025-02-19"
    async with raw_server(sse("ok", "anthropic")) as (url, seen):
        headers = {"anthropic-beta": beta}
        async with AnthropicClient(url, KEY, headers=headers) as client:
            response, error = await ask(client)
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "ok"
    [request] = seen
    assert request.headers.getall("x-api-key") == [KEY]
    assert request.headers.getall("anthropic-version") == ["2023-06-01"]
    assert request.headers.getall("anthropic-beta") == [beta]
    assert "Authorization" not in request.headers
    assert isinstance(request.body["max_tokens"], int)
    assert request.body["stream"] is True


@pytest.mark.asyncio
async def test_an_empty_api_key_sends_no_authorization_header(no_task_leak: None) -> None:
    """openai-python treats an empty key as no key: openai/lib/_client_auth.py:190-199
    (``not self.api_key`` → "Missing credentials") and :73 ``auth_headers =
    {"Authorization": f"Bearer {api_key}"} if api_key else {}``. An empty key
    (``os.environ.get("OPENAI_API_KEY", "")`` against a local server) must mean no
    Authorization header, as ``api_key=None`` does here, not a credential-less one."""
    async with raw_server(sse("ok")) as (url, seen), OpenAIChatClient(url, "") as client:
        _, error = await ask(client)
    assert error is None, repr(error)
    [request] = seen
    assert "Authorization" not in request.headers, request.headers.getall("Authorization")


@pytest.mark.asyncio
async def test_user_stream_options_keep_include_usage(llm_server: LLMServer) -> None:
    """OpenAI documents two ``stream_options`` fields, ``include_usage`` and
    ``include_obfuscation`` ("set include_obfuscation to false to optimize for bandwidth",
    https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options).
    The client promises ``stream_options.include_usage`` (OpenAIChatClient docstring);
    turning obfuscation off must not turn usage off."""
    client = OpenAIChatClient(llm_server.url, KEY, stream_options={"include_obfuscation": False})
    async with client:
        response, error = await ask(client)
    assert error is None, repr(error)
    [request] = llm_server.requests
    assert request.body["stream_options"] == {"include_usage": True, "include_obfuscation": False}
    assert response is not None
    assert response.usage is not None
    assert response.usage.total_tokens > 0


# ================================================================ errors and retries


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [520, 524])
async def test_every_5xx_before_the_body_is_retried(llm_server: LLMServer, status: int) -> None:
    """openai/_base_client.py:964 and anthropic/_base_client.py:1036 ``if
    response.status_code >= 500: return True`` (``_should_retry``); RetryPolicy's
    docstring and RELIABILITY.md row 4 list "5xx". OpenAI and Anthropic sit behind
    Cloudflare, whose 520 ("unknown error") and 524 ("a timeout occurred") pages reach
    clients as transient failures."""
    page = f"<html><body>error code: {status}</body></html>"
    llm_server.enqueue(Fault.status(status, body=page), Reply(text="second time"))
    async with OpenAIChatClient(llm_server.url, KEY, retry=FAST_RETRY) as client:
        response, error = await ask(client)
    assert error is None, repr(error)
    assert response is not None
    assert response.text == "second time"
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_never_retried_even_with_retry_after(
    llm_server: LLMServer, status: int
) -> None:
    """openai/_base_client.py:927 ``_should_retry``: 4xx other than 408/409/429 are not
    retried, whatever ``Retry-After`` says; the provider's message and type are kept
    (Anthropic's ``{"type": "error", "error": {...}}`` shape,
    https://docs.anthropic.com/en/api/errors)."""
    message = f"nope {status}"
    llm_server.enqueue(Fault.status(status, message=message, retry_after=0), Reply(text="x"))
    async with AnthropicClient(llm_server.url, KEY, retry=FAST_RETRY) as client:
        _, error = await ask(client)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert (error.status, error.retryable) == (status, False)
    assert error.provider_message == message
    assert error.error_type is not None
    assert error.error_type.endswith("_error")
    assert len(llm_server.requests) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("client_type", "header"),
    [(OpenAIChatClient, "x-request-id"), (AnthropicClient, "request-id")],
    ids=["openai", "anthropic"],
)
async def test_an_http_error_carries_the_request_id(
    llm_server: LLMServer, client_type: type[LLMClient], header: str
) -> None:
    """openai/_exceptions.py:135 ``self.request_id = response.headers.get("x-request-id")``,
    anthropic/_exceptions.py:132 ``response.headers.get("request-id")``. OpenAI
    "recommends logging request IDs in production deployments"
    (https://platform.openai.com/docs/api-reference/debugging-requests); Anthropic asks
    for ``request-id`` when contacting support (https://docs.anthropic.com/en/api/errors).
    rafrx's own LLMServer sends it on every answer "(the SDKs' .request_id)"."""
    llm_server.enqueue(Fault.status(400, message="bad", headers={header: "req_0123abcd"}))
    async with client_type(llm_server.url, KEY) as client:
        _, error = await ask(client)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert getattr(error, "request_id", None) == "req_0123abcd" or "req_0123abcd" in str(error)


@pytest.mark.asyncio
async def test_a_gzip_encoded_rate_limit_body_gives_the_typed_provider_error(
    no_task_leak: None,
) -> None:
    """A 429 whose JSON body is ``Content-Encoding: gzip`` (as a CDN sends it) is read as
    the SDK reads it: the OpenAI ``{"error": {message, type, code}}`` fields and
    ``retry-after-ms`` (openai/_base_client.py:864) end up on the typed error."""
    error_body = {
        "error": {
            "message": "Rate limit reached for gpt-4o in organization org-x on tokens.",
            "type": "tokens",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }

    async def limited(request: web.Request) -> web.StreamResponse:
        return web.Response(
            status=429,
            body=gzip.compress(json.dumps(error_body).encode()),
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "Content-Encoding": "gzip",
                "retry-after-ms": "250",
            },
        )

    async with raw_server(limited) as (url, seen), OpenAIChatClient(url, KEY) as client:
        _, error = await ask(client)
    assert isinstance(error, HTTPStatusError), repr(error)
    assert (error.status, error.retryable, error.retry_after) == (429, True, 0.25)
    assert error.provider_message == error_body["error"]["message"]
    assert (error.error_type, error.code) == ("tokens", "rate_limit_exceeded")
    assert len(seen) == 1


@pytest.mark.asyncio
async def test_a_json_completion_instead_of_a_stream_is_a_typed_error_not_retried(
    llm_server: LLMServer,
) -> None:
    """A proxy that ignores ``stream: true`` and answers ``application/json``: a typed
    ContentTypeError with a snippet of the body (RELIABILITY.md row 5: "Fail before
    decoding with a snippet of the body; not retried by default"), sent once even with a
    retry policy."""
    completion = json.dumps({"object": "chat.completion", "choices": [{"message": {}}]})
    llm_server.enqueue(Fault.wrong_content_type("application/json", body=completion))
    async with OpenAIChatClient(llm_server.url, KEY, retry=FAST_RETRY) as client:
        _, error = await ask(client)
    assert isinstance(error, ContentTypeError), repr(error)
    assert error.body is not None
    assert "chat.completion" in error.body
    assert error.retryable is False
    assert len(llm_server.requests) == 1
