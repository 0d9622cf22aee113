"""Every fault LLMServer can inject, through every client, over real HTTP.

Each must end in its typed error, with ``.partial`` holding exactly what was
received before the fault, no connection left open and no task left running
(the ``llm_server`` fixture checks the tasks).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from rafrx import ChatMessage, collect_agent_response, convert
from rafrx.errors import (
    ConnectTimeout,
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    IncompleteStream,
    LimitExceeded,
    MalformedEvent,
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
from rafrx.testing import Fault, LLMServer, Replay, Reply, ServerResponse, WireFormat, render

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = list(CLIENTS)
USER = [ChatMessage.user("Tell me something.")]
TEXT = "Hello brave new world"  # 6-character deltas: "Hello ", "brave ", "new wo", "rld"
REPLY = Reply(text=TEXT, chunk_size=6)
FAST = Timeouts(connect=2.0, first_byte=0.3, idle=0.3)


def body_of(fmt: Any) -> bytes:
    return render(REPLY, fmt)


def after_event_with(body: bytes, piece: str) -> int:
    """The offset just past the event that carries the text delta ``piece``."""
    return body.index(b"\n\n", body.index(f'"{piece}"'.encode())) + 2


@attrs.frozen
class Case:
    """A fault, the error it must give and the text received before it."""

    fault: Callable[[bytes], ServerResponse]
    error: type[RafrxError] | None
    partial_text: str
    # The body was cut short, so the client must close the connection itself (a
    # complete body may go back to the pool, closed by aclose()).
    closes_connection: bool = True


CASES: dict[str, Case] = {
    "drop-mid-event": Case(
        lambda b: Fault.drop_after(after_event_with(b, "brave ") + 5, body=b),
        StreamInterrupted,
        "Hello brave ",
    ),
    "drop-with-reset": Case(
        lambda b: Fault.drop_after(after_event_with(b, "brave ") + 5, body=b, reset=True),
        StreamInterrupted,
        "",  # a reset may discard bytes in flight; what arrived is checked below
    ),
    "drop-after-headers": Case(lambda b: Fault.drop_after(0, body=b), StreamInterrupted, ""),
    "stall-before-headers": Case(lambda b: Fault.stall(5, body=b), ConnectTimeout, ""),
    "stall-mid-body": Case(
        lambda b: Fault.stall(5, after_bytes=after_event_with(b, "brave "), body=b),
        IdleTimeout,
        "Hello brave ",
    ),
    "stall-shorter-than-idle": Case(
        lambda b: Fault.stall(0.1, after_bytes=after_event_with(b, "Hello "), body=b),
        None,
        TEXT,
        closes_connection=False,
    ),
    "garbage-event": Case(
        lambda b: Fault.garbage(at=after_event_with(b, "brave "), body=b),
        MalformedEvent,
        "Hello brave ",
        closes_connection=False,
    ),
    "invalid-utf8-in-text": Case(
        lambda b: Fault.garbage(b"\xff\xfe", at=b.index(b"new wo") + 1, framed=False, body=b),
        None,
        "Hello brave n\ufffd\ufffdew world",
        closes_connection=False,
    ),
    "huge-line": Case(lambda b: Fault.huge_line(17 * 1024 * 1024, body=b), LimitExceeded, ""),
    "endless-line-then-eof": Case(
        lambda b: Fault.huge_line(1024 * 1024, body=b),
        IncompleteStream,
        "",
        closes_connection=False,
    ),
    "eof-without-terminal-marker": Case(
        lambda b: Replay(b[: after_event_with(b, "rld")]),
        IncompleteStream,
        TEXT,
        closes_connection=False,
    ),
    "wrong-content-type": Case(
        lambda b: Fault.wrong_content_type(), ContentTypeError, "", closes_connection=False
    ),
    "status-500": Case(
        lambda b: Fault.status(500, message="internal"),
        HTTPStatusError,
        "",
        closes_connection=False,
    ),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(CASES))
async def test_fault_gives_its_typed_error_and_leaves_nothing_open(
    llm_server: LLMServer, fmt: WireFormat, name: str
) -> None:
    case = CASES[name]
    body = body_of(fmt)
    llm_server.enqueue(case.fault(body))
    client = CLIENTS[fmt](llm_server.url, "sk-fault-key", timeouts=FAST)
    try:
        if case.error is None:
            response = await collect_agent_response(client.stream(USER).pipe(convert()))
            assert response.text == case.partial_text
        else:
            with pytest.raises(case.error) as caught:
                await collect_agent_response(client.stream(USER).pipe(convert()))
            err = caught.value
            assert type(err) is case.error, repr(err)
            assert err.partial is not None
            assert err.partial.interrupted
            if name == "drop-with-reset":
                assert TEXT.startswith(err.partial.text)
            else:
                assert err.partial.text == case.partial_text
            assert "sk-fault-key" not in str(err)
        if case.closes_connection:
            await llm_server.wait_connections_closed(timeout=1.0)
    finally:
        await client.aclose()
    await llm_server.wait_connections_closed(timeout=1.0)
    assert len(llm_server.requests) == 1


# ---------------------------------------------------------------- details


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fmt", "error_type"),
    [
        # OpenAI's 429 type says which limit ("requests" or "tokens"); its code
        # is "rate_limit_exceeded".
        ("openai-chat", "requests"),
        ("anthropic", "rate_limit_error"),
        ("openai-responses", "requests"),
    ],
)
async def test_http_status_error_carries_what_the_server_said(
    llm_server: LLMServer, fmt: str, error_type: str
) -> None:
    llm_server.enqueue(Fault.status(429, message="Rate limit reached", retry_after=7))
    async with CLIENTS[fmt](llm_server.url) as client:
        err = await _error(client)
    assert isinstance(err, HTTPStatusError)
    assert (err.status, err.retryable, err.retry_after) == (429, True, 7.0)
    assert (err.provider_message, err.error_type) == ("Rate limit reached", error_type)
    assert err.code == (None if fmt == "anthropic" else "rate_limit_exceeded")
    assert err.body is not None
    assert "Rate limit reached" in err.body
    assert str(err) == "HTTP 429: Rate limit reached"
    assert err.partial is not None
    assert err.partial.text == ""


@pytest.mark.asyncio
async def test_a_429_for_an_exhausted_quota_is_not_retried(llm_server: LLMServer) -> None:
    """OpenAI answers 429 both to too many requests and to an account out of credit;
    only the first passes with time, so only it is retried."""
    quota = {
        "error": {
            "message": "You exceeded your current quota, please check your plan.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    }
    llm_server.enqueue(Fault.status(429, body=quota), Reply(text="never sent"))
    retry = RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False)
    async with OpenAIChatClient(llm_server.url, retry=retry) as client:
        err = await _error(client)
    assert isinstance(err, HTTPStatusError)
    assert (err.status, err.error_type, err.code) == (
        429,
        "insufficient_quota",
        "insufficient_quota",
    )
    assert err.retryable is False
    assert len(llm_server.requests) == 1


@pytest.mark.asyncio
async def test_anthropic_overloaded_is_retryable(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.status(529, message="Overloaded"))
    async with AnthropicClient(llm_server.url) as client:
        err = await _error(client)
    assert isinstance(err, HTTPStatusError)
    assert (err.status, err.error_type, err.retryable) == (529, "overloaded_error", True)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "message"),
    [("", None), ("upstream went away", None), ({"detail": "no such model"}, "no such model")],
)
async def test_non_provider_error_bodies(
    llm_server: LLMServer, body: Any, message: str | None
) -> None:
    llm_server.enqueue(Fault.status(502, body=body))
    async with OpenAIChatClient(llm_server.url) as client:
        err = await _error(client)
    assert isinstance(err, HTTPStatusError)
    assert err.status == 502
    assert err.provider_message == message
    assert err.body == (body if isinstance(body, str) else '{"detail": "no such model"}')


@pytest.mark.asyncio
async def test_wrong_content_type_keeps_a_snippet(llm_server: LLMServer) -> None:
    page = "<html>" + "proxy error " * 1000 + "</html>"
    llm_server.enqueue(Fault.wrong_content_type(body=page))
    async with OpenAIChatClient(llm_server.url) as client:
        err = await _error(client)
    assert isinstance(err, ContentTypeError)
    assert err.status == 200
    assert "text/html" in str(err)
    assert err.body is not None
    assert err.body.startswith("<html>proxy error")
    assert len(err.body) == 2048


@pytest.mark.asyncio
async def test_charset_parameter_is_accepted(llm_server: LLMServer) -> None:
    body = body_of("openai-chat")
    llm_server.enqueue(Replay(body))  # served as text/event-stream; charset=utf-8
    async with OpenAIChatClient(llm_server.url) as client:
        response = await collect_agent_response(client.stream(USER).pipe(convert()))
    assert response.text == TEXT


@pytest.mark.asyncio
async def test_keep_alive_comments_reset_the_idle_timeout(llm_server: LLMServer) -> None:
    body = body_of("anthropic")
    first = after_event_with(body, "Hello ")
    paced = body[:first] + b": keep-alive\n\n" * 10 + body[first:]
    # 0.3 s with nothing but comments between two deltas: twice the idle timeout.
    llm_server.enqueue(Replay(paced, pacing=True, delay=0.03))
    timeouts = Timeouts(first_byte=1.0, idle=0.15)
    async with AnthropicClient(llm_server.url, timeouts=timeouts) as client:
        response = await collect_agent_response(client.stream(USER).pipe(convert()))
    assert response.text == TEXT


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_connection_refused(no_task_leak: None, fmt: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with CLIENTS[fmt](f"http://127.0.0.1:{port}", "sk-refused-key") as client:
        err = await _error(client)
    assert type(err) is TransportError
    assert err.retryable
    assert f"127.0.0.1:{port}" in str(err)
    assert "sk-refused-key" not in str(err)
    assert err.partial is not None


@pytest.mark.asyncio
async def test_limits_of_the_sse_decoder_protect_memory(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.huge_line(40 * 1024 * 1024))
    async with OpenAIChatClient(llm_server.url) as client:
        err = await _error(client)
    assert isinstance(err, LimitExceeded)
    # The client stopped reading at the limit: the server could not send it all.
    await llm_server.wait_connections_closed(timeout=1.0)


async def _error(client: LLMClient) -> RafrxError:
    try:
        response: AgentResponse = await collect_agent_response(client.stream(USER).pipe(convert()))
    except RafrxError as err:
        return err
    raise AssertionError(f"no error: {response!r}")


@pytest.mark.asyncio
async def test_the_client_line_limit_is_configurable(llm_server: LLMServer) -> None:
    body = b"data: " + b"x" * 5000 + b"\n\n"
    llm_server.enqueue(Replay(body, chunk_size=512))
    client = OpenAIChatClient(llm_server.url, model="m", max_line_bytes=1024)
    try:
        with pytest.raises(LimitExceeded) as caught:
            await collect_agent_response(client.stream([ChatMessage.user("hi")]).pipe(convert()))
        assert caught.value.limit == 1024
    finally:
        await client.aclose()
