"""The errors users get, as values and as messages: for each way a stream or a turn
can fail over real HTTP on 127.0.0.1, the error's class, its attributes, its ``str``
and ``repr``, pickling and copying, retries, and what the CLI prints."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import pickle
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rafrx import Agent, ChatMessage, FinishReason, collect_agent_response, convert, tool
from rafrx.errors import (
    MAX_BODY_CHARS,
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    IncompleteStream,
    MalformedEvent,
    MaxStepsExceeded,
    ProviderError,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.response import AgentResponse
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.testing import Reply, ToolCallSpec, render
from tests.sources._raw_server import raw_server

KEY = "sk-uxhunt-0123456789abcdefghijklmnop"
USER = [ChatMessage.user("Hi")]
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02, jitter=False)

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


def make(url: str, fmt: str = "openai-chat", **kwargs: Any) -> LLMClient:
    return CLIENTS[fmt](url, api_key=KEY, model="m", **kwargs)


async def fail(client: LLMClient) -> RafrxError:
    """One call through ``client`` that must fail; its error."""
    try:
        async with asyncio.timeout(15):
            response = await collect_agent_response(client.stream(USER).pipe(convert()))
    except RafrxError as err:
        return err
    finally:
        await client.aclose()
    raise AssertionError(f"the call succeeded: {response!r}")


def answering(
    status: int,
    body: bytes | str,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Any:
    data = body.encode() if isinstance(body, str) else body

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(
            status=status, body=data, headers={"Content-Type": content_type, **(headers or {})}
        )

    return handle


def streaming(chunks: list[bytes], *, then: str = "eof", delay: float = 0.0) -> Any:
    """A 200 event stream of ``chunks``, then a clean end (``eof``), a stall or an abort."""

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
            if delay:
                await asyncio.sleep(delay)
        if then == "stall":
            await asyncio.sleep(30)
        elif then == "abort":
            assert request.transport is not None
            request.transport.abort()
            return response
        await response.write_eof()
        return response

    return handle


def texts_of(err: BaseException) -> list[str]:
    texts = [str(err), repr(err), *map(str, err.args)]
    texts += [v for v in vars(err).values() if isinstance(v, str)]
    return texts


def check_readable(err: RafrxError, *, longest: int = 600) -> None:
    """What every error's text must be: short, no bytes reprs, no secrets, no object reprs."""
    text = str(err)
    assert text.strip(), repr(err)
    assert len(text) <= longest, len(text)
    assert "b'" not in text, text
    assert 'b"' not in text, text
    assert " object at 0x" not in text, text
    assert " object at 0x" not in repr(err), repr(err)
    assert all(KEY not in t and KEY[:16] not in t for t in texts_of(err)), texts_of(err)
    assert len(text.splitlines()) <= 3, text


def roundtrip_keeps(err: RafrxError, *names: str) -> None:
    for clone in (pickle.loads(pickle.dumps(err)), copy.copy(err), copy.deepcopy(err)):
        assert type(clone) is type(err)
        assert str(clone) == str(err)
        assert repr(clone) == repr(err)
        assert clone.args == err.args
        for name in ("message", "status", "body", "retryable", *names):
            assert getattr(clone, name) == getattr(err, name), name
        if err.partial is not None:
            assert clone.partial == err.partial


def openai_error(message: str, kind: str, code: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


# ---------------------------------------------------------------- HTTP statuses


STATUSES = [
    (400, "invalid_request_error", False),
    (401, "authentication_error", False),
    (403, "permission_error", False),
    (404, "not_found_error", False),
    (408, "timeout_error", True),
    (409, "conflict_error", True),
    (413, "request_too_large", False),
    (429, "rate_limit_error", True),
    (500, "api_error", True),
    (502, "bad_gateway", True),
    (503, "service_unavailable", True),
    (529, "overloaded_error", True),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("status", "kind", "retryable"), STATUSES, ids=lambda v: str(v))
async def test_http_status_with_json_body_is_a_full_http_status_error(
    status: int, kind: str, retryable: bool
) -> None:
    body = openai_error(f"the provider says {kind}", kind)
    headers = {"x-request-id": "req_123"}
    async with raw_server(answering(status, body, headers=headers)) as (url, seen):
        err = await fail(make(url))
    assert type(err) is HTTPStatusError
    assert len(seen) == 1
    assert err.status == status
    assert err.body == body
    assert err.retryable is retryable
    assert err.provider_message == f"the provider says {kind}"
    assert err.error_type == kind
    assert err.request_id == "req_123"
    assert str(err) == f"HTTP {status}: the provider says {kind}"
    assert (
        repr(err) == f"HTTPStatusError('HTTP {status}: the provider says {kind}', status={status})"
    )
    check_readable(err)
    assert isinstance(err.partial, AgentResponse)
    assert err.partial.interrupted
    assert err.partial.text == ""
    roundtrip_keeps(err, "provider_message", "error_type", "request_id", "retry_after", "code")
    assert err.__cause__ is None


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", list(CLIENTS))
async def test_anthropic_shaped_529_body(fmt: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Over"}})
    async with raw_server(answering(529, body)) as (url, _):
        err = await fail(make(url, fmt))
    assert isinstance(err, HTTPStatusError)
    assert (err.status, err.error_type, err.provider_message, err.retryable) == (
        529,
        "overloaded_error",
        "Over",
        True,
    )
    assert str(err) == "HTTP 529: Over"


@pytest.mark.asyncio
async def test_html_error_page_gives_a_short_message_with_the_status() -> None:
    page = "<html><head><title>502 Bad Gateway</title></head><body>" + "x" * 5000 + "</body>"
    async with raw_server(answering(502, page, "text/html")) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 502
    assert err.retryable
    assert err.body is not None
    assert err.body.startswith("<html>")
    assert err.provider_message is None
    assert "502" in str(err)
    assert "<html>" not in str(err)
    check_readable(err)


@pytest.mark.asyncio
async def test_empty_error_body() -> None:
    async with raw_server(answering(503, b"", "text/plain")) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 503
    assert err.retryable
    assert err.body == ""
    assert str(err).startswith("HTTP 503")
    check_readable(err)


@pytest.mark.asyncio
async def test_plain_text_error_body_is_in_the_message() -> None:
    async with raw_server(answering(401, "Unauthorized: token expired", "text/plain")) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert err.body == "Unauthorized: token expired"
    assert "token expired" in str(err)


@pytest.mark.asyncio
async def test_ten_megabyte_error_body_is_bounded() -> None:
    body = json.dumps({"error": {"message": "too large", "type": "x", "pad": "p" * 10_000_000}})
    async with raw_server(answering(413, body)) as (url, _):
        t0 = time.monotonic()
        err = await fail(make(url))
    assert time.monotonic() - t0 < 10
    assert isinstance(err, HTTPStatusError)
    assert err.status == 413
    assert not err.retryable
    assert err.body is not None
    assert len(err.body) <= MAX_BODY_CHARS + 100
    assert len(str(err)) < 200
    assert len(repr(err)) < 300
    assert len(pickle.dumps(err)) < 3 * MAX_BODY_CHARS
    check_readable(err)


@pytest.mark.asyncio
async def test_huge_provider_message_is_clipped_in_str() -> None:
    body = openai_error("m" * 50_000, "invalid_request_error")
    async with raw_server(answering(400, body)) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert len(str(err)) <= MAX_BODY_CHARS + 100
    assert "more characters" in str(err)


@pytest.mark.asyncio
async def test_non_utf8_error_body_is_decoded_with_replacement() -> None:
    body = b'{"error": {"message": "caf\xe9 closed \xff", "type": "invalid_request_error"}}'
    async with raw_server(answering(400, body)) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert err.provider_message == "caf\ufffd closed \ufffd"
    assert str(err) == "HTTP 400: caf\ufffd closed \ufffd"
    assert "\\x" not in str(err)
    assert "\\x" not in repr(err)
    check_readable(err)


@pytest.mark.asyncio
async def test_latin1_error_body_uses_its_declared_charset() -> None:
    body = '{"error": {"message": "café fermé", "type": "x"}}'.encode("latin-1")
    async with raw_server(answering(400, body, "application/json; charset=iso-8859-1")) as (
        url,
        _,
    ):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert err.provider_message == "café fermé"


@pytest.mark.asyncio
async def test_a_key_echoed_in_a_401_body_is_redacted_everywhere() -> None:
    body = openai_error(f"Incorrect API key provided: {KEY}.", "invalid_request_error", "bad_key")
    async with raw_server(answering(401, body)) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert err.code == "bad_key"
    assert str(err) == "HTTP 401: Incorrect API key provided: ***."
    check_readable(err)
    dumped = pickle.dumps(err)
    assert KEY.encode() not in dumped


@pytest.mark.asyncio
async def test_fastapi_detail_body() -> None:
    body = json.dumps({"detail": "Model not found"})
    async with raw_server(answering(404, body)) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert str(err) == "HTTP 404: Model not found"


@pytest.mark.asyncio
async def test_ollama_string_error_body() -> None:
    body = json.dumps({"error": 'model "llama9" not found, try pulling it first'})
    async with raw_server(answering(404, body)) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert str(err) == 'HTTP 404: model "llama9" not found, try pulling it first'


@pytest.mark.asyncio
async def test_a_redirect_is_a_clear_non_retryable_error() -> None:
    headers = {"Location": "https://elsewhere.example/v1/chat/completions"}
    async with raw_server(answering(307, b"", "text/plain", headers)) as (url, seen):
        err = await fail(make(url, retry=FAST_RETRY))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 307
    assert not err.retryable
    assert len(seen) == 1
    assert "elsewhere.example" in str(err)
    check_readable(err)


# ---------------------------------------------------------------- content type


@pytest.mark.asyncio
async def test_wrong_content_type_is_a_content_type_error_with_a_snippet() -> None:
    page = "<html>" + "y" * 10_000 + "</html>"
    async with raw_server(answering(200, page, "text/html")) as (url, seen):
        err = await fail(make(url, retry=FAST_RETRY))
    assert type(err) is ContentTypeError
    assert len(seen) == 1  # not retried
    assert not err.retryable
    assert err.status == 200
    assert err.body is not None
    assert err.body.startswith("<html>")
    assert len(err.body) <= 2048
    assert "text/html" in str(err)
    assert "text/event-stream" in str(err)
    check_readable(err)
    roundtrip_keeps(err)


# ---------------------------------------------------------------- transport


@pytest.mark.asyncio
async def test_connection_refused_is_a_retryable_transport_error() -> None:
    async with raw_server(answering(200, b"")) as (url, _):
        pass  # closed: its port now refuses
    err = await fail(make(url))
    assert type(err) is TransportError
    assert err.retryable
    assert err.status is None
    assert url in str(err)
    assert "connect" in str(err).lower()
    check_readable(err)
    assert err.__cause__ is None
    assert err.__context__ is None
    roundtrip_keeps(err)
    assert isinstance(err.partial, AgentResponse)


@pytest.mark.asyncio
async def test_unresolvable_host_is_a_transport_error() -> None:
    err = await fail(make("http://no-such-host.invalid", timeouts=Timeouts(connect=5)))
    assert isinstance(err, TransportError)
    assert not isinstance(err, StreamInterrupted)
    assert "no-such-host.invalid" in str(err)
    check_readable(err)


@pytest.mark.asyncio
async def test_key_in_the_url_query_stays_out_of_a_transport_error() -> None:
    async with raw_server(answering(200, b"")) as (url, _):
        pass
    client = OpenAIChatClient(f"{url}/v1?key={KEY}", model="m")
    err = await fail(client)
    assert isinstance(err, TransportError)
    check_readable(err)


# ---------------------------------------------------------------- in-band errors


def sse_lines(*events: tuple[str | None, Any]) -> list[bytes]:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {text}\n\n".encode())
    return out


def chat_chunk(text: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }


@pytest.mark.asyncio
async def test_openai_chat_in_band_error_keeps_the_text_and_the_provider_fields() -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
    chunks = sse_lines((None, chat_chunk("Hello ")), (None, chat_chunk("world")), (None, error))
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url))
    assert type(err) is ProviderError
    assert err.error_type == "server_error"
    assert str(err) == "The server had an error"
    assert err.body is not None
    assert "server_error" in err.body
    assert err.partial is not None
    assert err.partial.text == "Hello world"
    assert err.partial.finish_reason is FinishReason.ERROR
    assert err.partial.interrupted
    check_readable(err)
    roundtrip_keeps(err, "error_type", "code")


@pytest.mark.asyncio
async def test_anthropic_error_event_is_a_retryable_provider_error() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 3, "output_tokens": 0},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hi"},
    }
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    chunks = sse_lines(
        ("message_start", start),
        ("content_block_start", block),
        ("content_block_delta", delta),
        ("error", error),
    )
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url, "anthropic"))
    assert type(err) is ProviderError
    assert err.error_type == "overloaded_error"
    assert err.retryable
    assert str(err) == "Overloaded"
    assert err.partial is not None
    assert err.partial.text == "Hi"
    assert err.partial.id == "msg_1"
    check_readable(err)


@pytest.mark.asyncio
async def test_anthropic_error_event_before_content_is_retried() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [],
            "usage": {"input_tokens": 3, "output_tokens": 0},
        },
    }
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    calls = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return await streaming(sse_lines(("message_start", start), ("error", error)))(request)
        body = render(Reply(text="fine"), "anthropic")
        return web.Response(body=body, content_type="text/event-stream")

    async with raw_server(handle) as (url, _):
        client = make(url, "anthropic", retry=FAST_RETRY)
        async with asyncio.timeout(10):
            response = await collect_agent_response(client.stream(USER).pipe(convert()))
        await client.aclose()
    assert calls == 2
    assert response.text == "fine"


@pytest.mark.asyncio
async def test_responses_failed_event_is_a_provider_error() -> None:
    created = {
        "type": "response.created",
        "response": {"id": "resp_1", "model": "gpt", "status": "in_progress", "output": []},
    }
    failed = {
        "type": "response.failed",
        "response": {
            "id": "resp_1",
            "status": "failed",
            "error": {"code": "server_error", "message": "Something went wrong"},
            "output": [],
        },
    }
    chunks = sse_lines(("response.created", created), ("response.failed", failed))
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url, "openai-responses"))
    assert type(err) is ProviderError
    assert err.code == "server_error"
    assert err.error_type == "server_error"
    assert str(err) == "Something went wrong"
    assert err.retryable
    check_readable(err)


@pytest.mark.asyncio
async def test_responses_error_event_is_a_provider_error() -> None:
    error = {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": None}
    async with raw_server(streaming(sse_lines(("error", error)))) as (url, _):
        err = await fail(make(url, "openai-responses"))
    assert type(err) is ProviderError
    assert err.code == "rate_limit_exceeded"
    assert str(err) == "Slow down"
    assert err.retryable


@pytest.mark.asyncio
async def test_in_band_error_echoing_the_key_is_redacted() -> None:
    error = {"error": {"message": f"key {KEY} is revoked", "type": "invalid_request_error"}}
    async with raw_server(streaming(sse_lines((None, error)))) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, ProviderError)
    assert "***" in str(err)
    check_readable(err)
    assert KEY.encode() not in pickle.dumps(err)


# ---------------------------------------------------------------- protocol


@pytest.mark.asyncio
async def test_malformed_json_is_a_malformed_event_keeping_the_raw_data() -> None:
    chunks = [*sse_lines((None, chat_chunk("so far"))), b"data: {unparsable}\n\n"]
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url))
    assert type(err) is MalformedEvent
    assert err.raw == "{unparsable}"
    assert err.event_name in (None, "message")
    assert not err.retryable
    assert "JSON" in str(err)
    assert err.partial is not None
    assert err.partial.text == "so far"
    check_readable(err)
    roundtrip_keeps(err, "raw", "event_name")
    assert err.__cause__ is None


@pytest.mark.asyncio
async def test_truncated_stream_is_an_incomplete_stream_with_the_text() -> None:
    chunks = sse_lines((None, chat_chunk("half a ")), (None, chat_chunk("sentence")))
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url))
    assert type(err) is IncompleteStream
    assert not err.retryable
    assert "[DONE]" in str(err)
    assert err.partial is not None
    assert err.partial.text == "half a sentence"
    assert err.partial.finish_reason is None
    check_readable(err)
    roundtrip_keeps(err)


@pytest.mark.asyncio
async def test_idle_timeout_names_the_timeout_and_keeps_the_text() -> None:
    chunks = sse_lines((None, chat_chunk("waiting")))
    async with raw_server(streaming(chunks, then="stall")) as (url, _):
        err = await fail(make(url, timeouts=Timeouts(idle=0.3), retry=FAST_RETRY))
    assert type(err) is IdleTimeout
    assert not err.retryable
    assert "0.3" in str(err)
    assert "idle" in str(err)
    assert err.partial is not None
    assert err.partial.text == "waiting"
    check_readable(err)


@pytest.mark.asyncio
async def test_dropped_connection_mid_event_is_stream_interrupted_readably() -> None:
    chunks = [*sse_lines((None, chat_chunk("cut "))), b'data: {"id": "c1", "choi']
    async with raw_server(streaming(chunks, then="abort")) as (url, _):
        err = await fail(make(url, retry=FAST_RETRY))
    assert type(err) is StreamInterrupted
    assert not err.retryable
    assert err.partial is not None
    assert err.partial.text == "cut "
    assert "mid-stream" in str(err)
    check_readable(err)
    assert "<" not in str(err), str(err)
    assert "message=" not in str(err), str(err)


# ---------------------------------------------------------------- retries


def flaky(statuses: list[int], headers: dict[str, str] | None = None) -> tuple[Any, list[float]]:
    """A handler answering each status in turn (with an OpenAI error), then a reply."""
    times: list[float] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        times.append(time.monotonic())
        if len(times) <= len(statuses):
            status = statuses[len(times) - 1]
            return await answering(status, openai_error("busy", "server_error"), headers=headers)(
                request
            )
        return web.Response(
            body=render(Reply(text="ok"), "openai-chat"), content_type="text/event-stream"
        )

    return handle, times


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
async def test_retryable_statuses_are_retried(status: int) -> None:
    handle, times = flaky([status])
    async with raw_server(handle) as (url, _):
        client = make(url, retry=FAST_RETRY)
        response = await collect_agent_response(client.stream(USER).pipe(convert()))
        await client.aclose()
    assert response.text == "ok"
    assert len(times) == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
async def test_client_errors_are_not_retried(status: int) -> None:
    handle, times = flaky([status])
    async with raw_server(handle) as (url, _):
        err = await fail(make(url, retry=FAST_RETRY))
    assert isinstance(err, HTTPStatusError)
    assert err.status == status
    assert len(times) == 1


@pytest.mark.asyncio
async def test_retry_after_is_honoured() -> None:
    handle, times = flaky([429], headers={"Retry-After": "1"})
    async with raw_server(handle) as (url, _):
        client = make(url, retry=FAST_RETRY)
        response = await collect_agent_response(client.stream(USER).pipe(convert()))
        await client.aclose()
    assert response.text == "ok"
    assert len(times) == 2
    assert times[1] - times[0] >= 0.9


@pytest.mark.asyncio
async def test_quota_429_is_not_retried() -> None:
    body = openai_error(
        "You exceeded your current quota", "insufficient_quota", "insufficient_quota"
    )
    async with raw_server(answering(429, body)) as (url, seen):
        err = await fail(make(url, retry=FAST_RETRY))
    assert isinstance(err, HTTPStatusError)
    assert not err.retryable
    assert len(seen) == 1
    assert "quota" in str(err)


@pytest.mark.asyncio
async def test_x_should_retry_false_stops_retries() -> None:
    body = openai_error("busy", "server_error")
    headers = {"x-should-retry": "false"}
    async with raw_server(answering(503, body, headers=headers)) as (url, seen):
        err = await fail(make(url, retry=FAST_RETRY))
    assert isinstance(err, HTTPStatusError)
    assert not err.retryable
    assert len(seen) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", ["http-503", "refused"])
async def test_final_error_after_retries_says_how_many_attempts(fault: str) -> None:
    handle, times = flaky([503, 503, 503, 503])
    async with raw_server(handle) as (url, _):
        if fault == "http-503":
            err = await fail(make(url, retry=FAST_RETRY))
    if fault == "refused":
        err = await fail(make(url, retry=FAST_RETRY))  # the server is gone: refused
        assert type(err) is TransportError
    else:
        assert isinstance(err, HTTPStatusError)
        assert err.status == 503
        assert len(times) == 3
    assert err.retryable
    assert "3 attempts" in str(err) or getattr(err, "attempts", None) == 3


# ---------------------------------------------------------------- the agent


@tool
def explode(x: int) -> str:
    """Always fails.

    Args:
        x: Anything.
    """
    raise RuntimeError(f"kaboom {x} with {KEY}")


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    return f"deleted {path}"


def scripted(*replies: Reply) -> tuple[Any, list[Any]]:
    bodies: list[Any] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        reply = replies[min(len(bodies), len(replies)) - 1]
        return web.Response(body=render(reply, "openai-chat"), content_type="text/event-stream")

    return handle, bodies


@pytest.mark.asyncio
async def test_a_tool_error_goes_to_the_model_without_the_key() -> None:
    handle, bodies = scripted(
        Reply(tool_calls=[ToolCallSpec("explode", {"x": 1}, id="call_1")]), Reply(text="sorry")
    )
    async with raw_server(handle) as (url, _):
        client = make(url)
        response = await Agent(client, tools=[explode]).send("go")
        await client.aclose()
    assert response.text == "sorry"
    tool_message = bodies[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "kaboom 1" in tool_message["content"]
    assert "RuntimeError" in tool_message["content"]
    assert KEY not in tool_message["content"]


@pytest.mark.asyncio
async def test_max_steps_exceeded_keeps_the_partial_turn() -> None:
    handle, bodies = scripted(
        Reply(tool_calls=[ToolCallSpec("explode", {"x": 1}, id="call_1")]),
        Reply(tool_calls=[ToolCallSpec("explode", {"x": 2}, id="call_2")]),
    )
    async with raw_server(handle) as (url, _):
        client = make(url)
        with pytest.raises(MaxStepsExceeded) as info:
            await Agent(client, tools=[explode], max_steps=2).send("go")
        await client.aclose()
    err = info.value
    assert len(bodies) == 2
    assert "max_steps=2" in str(err)
    assert err.partial is not None
    assert err.partial.interrupted
    assert [c.id for c in err.partial.tool_calls] == ["call_1", "call_2"]
    assert len(err.partial.tool_messages) == 2
    check_readable(err)
    roundtrip_keeps(err)


@pytest.mark.asyncio
async def test_a_denied_approval_is_told_to_the_model() -> None:
    handle, bodies = scripted(
        Reply(tool_calls=[ToolCallSpec("delete", {"path": "/etc"}, id="call_1")]),
        Reply(text="ok, not deleted"),
    )

    async def deny(event: Any) -> bool:
        return False

    async with raw_server(handle) as (url, _):
        client = make(url)
        response = await Agent(client, tools=[delete], approver=deny).send("delete /etc")
        await client.aclose()
    assert response.text == "ok, not deleted"
    content = bodies[1]["messages"][-1]["content"]
    assert "denied" in content
    assert "delete" in content


@pytest.mark.asyncio
async def test_http_error_in_an_agent_turn_keeps_earlier_steps() -> None:
    calls = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            reply = Reply(text="Let me try.", tool_calls=[ToolCallSpec("explode", {"x": 1})])
            return web.Response(body=render(reply, "openai-chat"), content_type="text/event-stream")
        return await answering(500, openai_error("down", "server_error"))(request)

    async with raw_server(handle) as (url, _):
        client = make(url)
        with pytest.raises(HTTPStatusError) as info:
            await Agent(client, tools=[explode]).send("go")
        await client.aclose()
    err = info.value
    assert str(err) == "HTTP 500: down"
    assert err.partial is not None
    assert err.partial.text == "Let me try."
    assert err.partial.finish_reason is None  # not the first call's tool_calls
    assert len(err.partial.tool_messages) == 1


# ---------------------------------------------------------------- errors as values


@pytest.mark.asyncio
async def test_errors_stay_hashable_and_equal_to_themselves() -> None:
    async with raw_server(answering(429, openai_error("slow", "rate_limit_error"))) as (url, _):
        err = await fail(make(url))
    assert err == err
    assert hash(err) == hash(err)
    assert {err: 1}[err] == 1


async def error_of(stream: Any) -> RafrxError:
    """The error ``stream`` ends with, with this frame (the catcher's) out of its traceback."""
    try:
        await collect_agent_response(stream)
    except RafrxError as err:
        tb = err.__traceback__
        return err.with_traceback(None if tb is None else tb.tb_next)
    raise AssertionError("the call succeeded")


@pytest.mark.asyncio
async def test_a_kept_error_does_not_hold_the_client() -> None:
    import gc
    import weakref

    async with raw_server(answering(500, openai_error("x", "server_error"))) as (url, _):
        client = make(url)
        err = await error_of(client.stream(USER).pipe(convert()))
        await client.aclose()
    ref = weakref.ref(client)
    del client
    gc.collect()
    assert ref() is None
    assert isinstance(err, HTTPStatusError)
    assert err.__cause__ is None


# ---------------------------------------------------------------- the CLI


async def run_cli(url: str, *extra: str, stdin: str = "hello\n") -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "UXHUNT_KEY": KEY}
    env.pop("RAFRX_DEBUG", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rafrx",
        "chat",
        "--base-url",
        url,
        "--model",
        "m",
        "--plain",
        "--api-key-env",
        "UXHUNT_KEY",
        *extra,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate(stdin.encode())
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", list(CLIENTS))
async def test_cli_http_401_is_one_clear_line_and_a_failure_status(fmt: str) -> None:
    body = openai_error(f"Invalid API key {KEY}", "authentication_error")
    async with raw_server(answering(401, body)) as (url, _):
        code, out, err = await run_cli(url, "--format", fmt)
    both = out + err
    assert code != 0
    assert "Traceback" not in both
    assert KEY not in both
    lines = [line for line in both.splitlines() if "401" in line]
    assert len(lines) == 1, both
    assert "HTTPStatusError" in lines[0]
    assert "Invalid API key" in lines[0]


@pytest.mark.asyncio
async def test_cli_connection_refused_is_one_line_exit_2() -> None:
    async with raw_server(answering(200, b"")) as (url, _):
        pass
    code, out, err = await run_cli(url)
    assert code == 2
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "unreachable" in lines[0]
    assert url in lines[0]


@pytest.mark.asyncio
async def test_cli_in_band_error_is_reported_with_status_1() -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    chunks = sse_lines((None, chat_chunk("Hel")), (None, error))
    async with raw_server(streaming(chunks)) as (url, _):
        code, out, err = await run_cli(url)
    assert code == 1
    assert "Traceback" not in out + err
    assert "ProviderError: The server had an error" in out + err


# ---------------------------------------------------------------- more shapes


@pytest.mark.asyncio
async def test_first_byte_timeout_is_a_retryable_connect_timeout() -> None:
    from rafrx.errors import ConnectTimeout

    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(5)
        return web.Response(body=b"")

    async with raw_server(slow) as (url, _):
        err = await fail(make(url, timeouts=Timeouts(first_byte=0.3)))
    assert type(err) is ConnectTimeout
    assert err.retryable
    assert "0.3" in str(err)
    check_readable(err)
    roundtrip_keeps(err)


@pytest.mark.asyncio
async def test_openai_chat_string_error_payload() -> None:
    chunks = sse_lines((None, {"error": "Rate limit reached for requests"}))
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url))
    assert type(err) is ProviderError
    assert str(err) == "Rate limit reached for requests"


@pytest.mark.asyncio
async def test_openai_chat_event_error_line() -> None:
    error = {"error": {"message": "upstream overloaded", "type": "overloaded_error"}}
    chunks = sse_lines((None, chat_chunk("a")), ("error", error))
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url))
    assert type(err) is ProviderError
    assert err.error_type == "overloaded_error"
    assert str(err) == "upstream overloaded"
    assert err.partial is not None
    assert err.partial.text == "a"


@pytest.mark.asyncio
async def test_error_content_before_the_error_matches_it_and_hides_the_key() -> None:
    from rafrx.content import ErrorContent

    error = {"error": {"message": f"key {KEY} revoked", "type": "invalid_request_error"}}
    chunks = sse_lines((None, chat_chunk("x")), (None, error))
    seen: list[Any] = []
    async with raw_server(streaming(chunks)) as (url, _):
        client = make(url)
        results = client.stream(USER).pipe(convert())
        from reactivex import operators as rx

        with pytest.raises(ProviderError) as info:
            await collect_agent_response(results.pipe(rx.do_action(on_next=seen.append)))
        await client.aclose()
    errors = [c for r in seen for c in r.contents if isinstance(c, ErrorContent)]
    assert len(errors) == 1
    assert errors[0].message == str(info.value)
    assert KEY not in errors[0].message


@pytest.mark.asyncio
async def test_integer_error_code_is_kept_as_in_band() -> None:
    payload = {"error": {"code": 402, "message": "Insufficient credits"}}
    async with raw_server(answering(402, json.dumps(payload))) as (url, _):
        http_err = await fail(make(url))
    async with raw_server(streaming(sse_lines((None, payload)))) as (url, _):
        band_err = await fail(make(url))
    assert isinstance(http_err, HTTPStatusError)
    assert isinstance(band_err, ProviderError)
    assert band_err.code == "402"
    assert http_err.code == band_err.code


@pytest.mark.asyncio
async def test_line_limit_error_is_readable_and_pickles() -> None:
    from rafrx.errors import LimitExceeded

    chunks = [b"data: " + b"z" * 5000 + b"\n\n"]
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url, max_line_bytes=1024))
    assert type(err) is LimitExceeded
    assert err.limit == 1024
    assert "1024" in str(err)
    check_readable(err)
    roundtrip_keeps(err, "limit")


@pytest.mark.asyncio
async def test_gemini_list_error_body() -> None:
    body = json.dumps(
        [{"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}}]
    )
    async with raw_server(answering(400, body)) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert err.error_type == "INVALID_ARGUMENT"
    assert str(err) == "HTTP 400: API key not valid."
    assert not err.retryable


@pytest.mark.asyncio
async def test_cli_huge_provider_message_stays_one_bounded_line() -> None:
    body = openai_error("word " * 10_000, "invalid_request_error")
    async with raw_server(answering(400, body)) as (url, _):
        code, out, err = await run_cli(url)
    assert code == 1
    assert "Traceback" not in out + err
    lines = [line for line in (out + err).splitlines() if "HTTP 400" in line]
    assert len(lines) == 1
    assert len(lines[0]) < 4000, len(lines[0])


@pytest.mark.asyncio
async def test_cli_wrong_content_type_is_reported() -> None:
    async with raw_server(answering(200, "<html>hi</html>", "text/html")) as (url, _):
        code, out, err = await run_cli(url)
    assert code == 1
    assert "Traceback" not in out + err
    assert "ContentTypeError" in out + err
    assert "text/html" in out + err


@pytest.mark.asyncio
async def test_cli_idle_timeout_is_reported() -> None:
    # the CLI has no idle option: the stream ends cut short (abort) after some text
    chunks = sse_lines((None, chat_chunk("partial answer")))
    async with raw_server(streaming(chunks, then="abort")) as (url, _):
        code, out, err = await run_cli(url)
    assert code == 1
    assert "Traceback" not in out + err
    assert "partial answer" in out
    assert "StreamInterrupted" in out + err


@pytest.mark.asyncio
async def test_json_error_answer_with_200_shows_the_providers_message() -> None:
    body = json.dumps({"error": {"message": "streaming unsupported for this model"}})
    async with raw_server(answering(200, body)) as (url, _):
        err = await fail(make(url))
    assert type(err) is ContentTypeError
    assert err.body == body
    assert "streaming unsupported for this model" in str(err)


@pytest.mark.asyncio
async def test_half_event_at_a_clean_end_is_not_dispatched() -> None:
    chunks = [*sse_lines((None, chat_chunk("kept"))), b'data: {"id": "c1", "choi']
    async with raw_server(streaming(chunks)) as (url, _):
        err = await fail(make(url))
    assert type(err) is IncompleteStream
    assert err.partial is not None
    assert err.partial.text == "kept"


@pytest.mark.asyncio
async def test_a_drop_before_the_response_is_retried_as_a_transport_error() -> None:
    async def drop(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.abort()
        return web.Response()

    async with raw_server(drop) as (url, seen):
        err = await fail(make(url, retry=FAST_RETRY))
    assert type(err) is TransportError
    assert err.retryable
    assert len(seen) == 3
    assert "Server disconnected" in str(err)
    check_readable(err)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
async def test_in_band_server_error_before_content_is_retried(fmt: str) -> None:
    if fmt == "openai-chat":
        first = sse_lines((None, {"error": {"message": "busy", "type": "server_error"}}))
    else:
        created = {
            "type": "response.created",
            "response": {"id": "resp_1", "model": "gpt", "status": "in_progress", "output": []},
        }
        failed = {
            "type": "response.failed",
            "response": {
                "id": "resp_1",
                "status": "failed",
                "error": {"code": "server_error", "message": "busy"},
            },
        }
        first = sse_lines(("response.created", created), ("response.failed", failed))
    calls = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return await streaming(first)(request)
        return web.Response(body=render(Reply(text="fine"), fmt), content_type="text/event-stream")

    async with raw_server(handle) as (url, _):
        client = make(url, fmt, retry=FAST_RETRY)
        async with asyncio.timeout(10):
            response = await collect_agent_response(client.stream(USER).pipe(convert()))
        await client.aclose()
    assert calls == 2
    assert response.text == "fine"


@pytest.mark.asyncio
async def test_a_stalled_error_body_still_gives_the_status_error() -> None:
    async def stall(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=500, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"error": {"mess')
        await asyncio.sleep(5)
        return response

    async with raw_server(stall) as (url, _):
        err = await fail(make(url, timeouts=Timeouts(idle=0.3)))
    assert type(err) is HTTPStatusError
    assert err.status == 500
    assert err.body == '{"error": {"mess'
    assert str(err) == "HTTP 500"


@pytest.mark.asyncio
async def test_retry_after_too_long_is_not_waited_for_and_is_kept() -> None:
    body = openai_error("slow down", "rate_limit_error")
    async with raw_server(answering(429, body, headers={"Retry-After": "3600"})) as (url, seen):
        t0 = time.monotonic()
        err = await fail(make(url, retry=FAST_RETRY))
    assert time.monotonic() - t0 < 5
    assert isinstance(err, HTTPStatusError)
    assert len(seen) == 1
    assert err.retry_after == 3600.0
    assert err.retryable


@pytest.mark.asyncio
async def test_retry_after_ms_is_honoured_over_retry_after() -> None:
    handle, times = flaky([503], headers={"retry-after-ms": "400", "Retry-After": "30"})
    async with raw_server(handle) as (url, _):
        client = make(url, retry=FAST_RETRY)
        async with asyncio.timeout(10):
            response = await collect_agent_response(client.stream(USER).pipe(convert()))
        await client.aclose()
    assert response.text == "ok"
    assert 0.35 <= times[1] - times[0] < 5


@pytest.mark.parametrize("client_type", [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient])
def test_a_non_http_base_url_is_refused_when_the_client_is_made(client_type: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("must be an http or https URL, got 'ftp://")):
        client_type("ftp://127.0.0.1:1", api_key=KEY, model="m")


@pytest.mark.asyncio
async def test_a_cut_tool_call_in_the_partial_survives_pickling() -> None:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "write", "arguments": '{"path": "a.txt", "content": "hel'},
    }
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
    }
    chunks = sse_lines((None, chat_chunk("Let me")), (None, chunk))
    async with raw_server(streaming(chunks, then="abort")) as (url, _):
        err = await fail(make(url))
    assert type(err) is StreamInterrupted
    assert err.partial is not None
    (cut,) = err.partial.tool_calls
    assert not cut.complete
    assert cut.raw_arguments == '{"path": "a.txt", "content": "hel'
    assert cut.partial_value == {"path": "a.txt", "content": "hel"}
    assert cut.error is not None
    assert "cut short" in cut.error
    roundtrip_keeps(err)


@pytest.mark.asyncio
async def test_anthropic_malformed_event_keeps_its_event_name() -> None:
    bad = b'event: content_block_delta\ndata: {"type": "content_block_delta", \n\n'
    async with raw_server(streaming([bad])) as (url, _):
        err = await fail(make(url, "anthropic"))
    assert type(err) is MalformedEvent
    assert err.event_name == "content_block_delta"
    assert err.raw == '{"type": "content_block_delta", '
    check_readable(err)


@pytest.mark.asyncio
async def test_a_bom_before_a_json_error_body_keeps_the_providers_message() -> None:
    body = "\ufeff" + openai_error("model not supported", "invalid_request_error")
    async with raw_server(answering(400, body.encode())) as (url, _):
        err = await fail(make(url))
    assert isinstance(err, HTTPStatusError)
    assert err.provider_message == "model not supported"
    assert str(err) == "HTTP 400: model not supported"


@pytest.mark.asyncio
async def test_cli_unresolvable_host_is_one_line_exit_2() -> None:
    code, out, err = await run_cli("http://no-such-host.invalid")
    assert code == 2
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "unreachable" in lines[0]
    assert "no-such-host.invalid" in lines[0]


@pytest.mark.asyncio
async def test_retry_after_http_date_is_honoured() -> None:
    import email.utils

    when = email.utils.formatdate(time.time() + 2, usegmt=True)
    handle, times = flaky([503], headers={"Retry-After": when})
    async with raw_server(handle) as (url, _):
        client = make(url, retry=FAST_RETRY)
        async with asyncio.timeout(10):
            response = await collect_agent_response(client.stream(USER).pipe(convert()))
        await client.aclose()
    assert response.text == "ok"
    assert times[1] - times[0] >= 0.9


@pytest.mark.asyncio
async def test_a_tool_call_cut_by_an_in_band_error_is_incomplete_in_the_partial() -> None:
    call = {
        "index": 0,
        "id": "call_9",
        "type": "function",
        "function": {"name": "write", "arguments": '{"path": "a'},
    }
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
    }
    error = {"error": {"message": "overloaded", "type": "overloaded_error"}}
    async with raw_server(streaming(sse_lines((None, chunk), (None, error)))) as (url, _):
        err = await fail(make(url))
    assert type(err) is ProviderError
    assert err.partial is not None
    assert err.partial.finish_reason is FinishReason.ERROR
    (cut,) = err.partial.tool_calls
    assert not cut.complete
    assert cut.id == "call_9"
    assert cut.raw_arguments == '{"path": "a'


@pytest.mark.asyncio
async def test_anthropic_request_id_header_is_kept() -> None:
    body = json.dumps({"type": "error", "error": {"type": "api_error", "message": "Internal"}})
    async with raw_server(answering(500, body, headers={"request-id": "req_abc"})) as (url, _):
        err = await fail(make(url, "anthropic"))
    assert isinstance(err, HTTPStatusError)
    assert err.request_id == "req_abc"
    assert err.error_type == "api_error"
    assert str(err) == "HTTP 500: Internal"


@pytest.mark.asyncio
async def test_x_should_retry_true_retries_a_400() -> None:
    handle, times = flaky([400], headers={"x-should-retry": "true"})
    async with raw_server(handle) as (url, _):
        client = make(url, retry=FAST_RETRY)
        async with asyncio.timeout(10):
            response = await collect_agent_response(client.stream(USER).pipe(convert()))
        await client.aclose()
    assert response.text == "ok"
    assert len(times) == 2


@pytest.mark.asyncio
async def test_after_a_retried_503_the_final_400_is_the_error() -> None:
    calls = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return await answering(503, openai_error("busy", "server_error"))(request)
        return await answering(400, openai_error("bad request", "invalid_request_error"))(request)

    async with raw_server(handle) as (url, _):
        err = await fail(make(url, retry=FAST_RETRY))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 400
    assert str(err) == "HTTP 400: bad request (after 2 attempts)"
    assert err.provider_message == "bad request"
    assert err.attempts == calls == 2


@pytest.mark.asyncio
async def test_a_credential_header_echoed_in_an_error_is_redacted() -> None:
    token = "AIzaSyD-uxhunt-0123456789abcdefghij"
    body = openai_error(f"API key not valid: {token}", "invalid_request_error")
    async with raw_server(answering(400, body)) as (url, _):
        client = OpenAIChatClient(url, model="m", headers={"X-Goog-Api-Key": token})
        err = await fail(client)
    assert isinstance(err, HTTPStatusError)
    assert all(token not in t for t in texts_of(err)), texts_of(err)
    assert "API key not valid" in str(err)


@pytest.mark.asyncio
async def test_a_password_in_the_base_url_stays_out_of_errors() -> None:
    async with raw_server(answering(200, b"")) as (url, _):
        pass
    secret = "pw-uxhunt-0123456789"
    base = url.replace("http://", f"http://me:{secret}@")
    err = await fail(OpenAIChatClient(base, model="m"))
    assert isinstance(err, TransportError)
    assert all(secret not in t for t in texts_of(err)), texts_of(err)
    assert "me:***@" in str(err)


@pytest.mark.asyncio
async def test_the_partial_after_a_retry_is_the_last_attempts_only() -> None:
    def start(msg_id: str) -> dict[str, Any]:
        return {
            "type": "message_start",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": "claude",
                "content": [],
                "usage": {"input_tokens": 3, "output_tokens": 0},
            },
        }

    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "B"},
    }
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    calls = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return await streaming(sse_lines(("message_start", start("msg_A")), ("error", error)))(
                request
            )
        events = sse_lines(
            ("message_start", start("msg_B")),
            ("content_block_start", block),
            ("content_block_delta", delta),
        )
        return await streaming(events)(request)

    async with raw_server(handle) as (url, _):
        err = await fail(make(url, "anthropic", retry=FAST_RETRY))
    assert calls == 2
    assert type(err) is IncompleteStream
    assert err.partial is not None
    assert err.partial.id == "msg_B"
    assert err.partial.text == "B"


@tool(timeout=0.1)
async def slow(x: int) -> str:
    """Takes too long.

    Args:
        x: Anything.
    """
    await asyncio.sleep(5)
    return "never"


@pytest.mark.asyncio
async def test_tool_timeout_and_unknown_tool_are_told_to_the_model() -> None:
    handle, bodies = scripted(
        Reply(
            tool_calls=[
                ToolCallSpec("slow", {"x": 1}, id="call_1"),
                ToolCallSpec("nope", {}, id="call_2"),
            ]
        ),
        Reply(text="done"),
    )
    async with raw_server(handle) as (url, _):
        client = make(url)
        t0 = time.monotonic()
        response = await Agent(client, tools=[slow]).send("go")
        await client.aclose()
    assert time.monotonic() - t0 < 4
    assert response.text == "done"
    results = {
        m["tool_call_id"]: m["content"] for m in bodies[1]["messages"] if m["role"] == "tool"
    }
    assert "timed out after 0.1 s" in results["call_1"]
    assert "unknown tool 'nope'" in results["call_2"]
    assert "slow" in results["call_2"]  # names what is available
