"""Details of the HTTP clients: error bodies of every shape, ``Retry-After``
values that do not parse, backoff jitter, timeout validation, a closed
session, and a client class of one's own, over real HTTP against LLMServer.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any

import aiohttp
import pytest

from rafrx import ChatMessage, collect_agent_response, convert
from rafrx.errors import HTTPStatusError, RafrxError, TransportError
from rafrx.messages import ToolCall
from rafrx.sources.clients import (
    LLMClient,
    OpenAIChatClient,
    RetryPolicy,
    Timeouts,
    ToolLike,
)
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec

KEY = "sk-edge-SECRET-77c1"
USER = [ChatMessage.user("Hello?")]
FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, jitter=False)


async def failure(client: LLMClient) -> RafrxError:
    """The error a call ends with, ``partial`` set by ``collect_agent_response``."""
    with pytest.raises(RafrxError) as info:
        await collect_agent_response(client.stream(USER).pipe(convert()))
    assert info.value.partial is not None
    assert info.value.partial.text == ""
    return info.value


# ---------------------------------------------------------------- error bodies


GEMINI = [
    {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted (e.g. check quota).",
            "status": "RESOURCE_EXHAUSTED",
        }
    }
]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "message", "error_type"),
    [
        (GEMINI, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED"),
        (
            {"error": {"message": "No such model", "code": "model_not_found"}},
            "No such model",
            "model_not_found",
        ),
        ({"error": {"message": "Bad key", "code": 401}}, "Bad key", None),
        ({"error": "Invalid API key provided"}, "Invalid API key provided", None),
        ({"error": None, "message": "flat message", "type": "error"}, "flat message", None),
        ([], None, None),
        (["just", "strings"], None, None),
        ("a JSON string", None, None),
        (42, None, None),
    ],
    ids=[
        "gemini-list",
        "string-code",
        "integer-code",
        "string-error",
        "null-error",
        "empty-list",
        "list-of-strings",
        "json-string",
        "json-number",
    ],
)
async def test_error_body_shapes(
    llm_server: LLMServer, body: Any, message: str | None, error_type: str | None
) -> None:
    raw = json.dumps(body)
    llm_server.enqueue(Fault.status(429, body=raw.encode()))  # served as application/json
    async with OpenAIChatClient(llm_server.url, KEY) as client:
        err = await failure(client)
    assert type(err) is HTTPStatusError
    assert (err.status, err.retryable) == (429, True)
    assert (err.provider_message, err.error_type) == (message, error_type)
    assert err.body == raw
    assert str(err) == ("HTTP 429" if message is None else f"HTTP 429: {message}")


@pytest.mark.asyncio
async def test_an_error_string_echoing_the_key_is_redacted(llm_server: LLMServer) -> None:
    body = json.dumps({"error": f"Incorrect API key provided: {KEY}"}).encode()
    llm_server.enqueue(Fault.status(401, body=body))
    async with OpenAIChatClient(llm_server.url, KEY) as client:
        err = await failure(client)
    assert isinstance(err, HTTPStatusError)
    assert err.provider_message == "Incorrect API key provided: ***"
    assert not err.retryable
    for text in (str(err), repr(err), err.body or "", repr(vars(err))):
        assert KEY not in text


# ---------------------------------------------------------------- Retry-After


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "Wed, 99 Foo 2015 07:28:00 GMT"}, None),
        ({"Retry-After": "Wed, 21 Oct 2015 25:28:00 GMT"}, None),  # hour 25
        ({"retry-after-ms": "a while", "Retry-After": "3"}, 3.0),
        ({"retry-after-ms": "", "Retry-After": "whenever"}, None),
        ({"retry-after-ms": "250"}, 0.25),
    ],
    ids=["word", "bad-date", "bad-hour", "bad-ms-good-seconds", "both-bad", "ms"],
)
async def test_retry_after_headers_that_do_not_parse_are_ignored(
    llm_server: LLMServer, headers: dict[str, str], retry_after: float | None
) -> None:
    llm_server.enqueue(Fault.status(429, headers=headers))
    async with OpenAIChatClient(llm_server.url) as client:
        err = await failure(client)
    assert isinstance(err, HTTPStatusError)
    assert err.retry_after == retry_after
    assert err.retryable


@pytest.mark.asyncio
@pytest.mark.parametrize(("offset", "low", "high"), [(30, 28.0, 30.5), (-3600, 0.0, 0.0)])
async def test_retry_after_as_an_http_date_is_seconds_from_now(
    llm_server: LLMServer, offset: float, low: float, high: float
) -> None:
    when = email.utils.formatdate(time.time() + offset, usegmt=True)
    llm_server.enqueue(Fault.status(503, retry_after=when))
    async with OpenAIChatClient(llm_server.url) as client:
        err = await failure(client)
    assert isinstance(err, HTTPStatusError)
    assert err.retry_after is not None
    assert low <= err.retry_after <= high  # a date in the past: no wait


@pytest.mark.asyncio
async def test_an_unparsable_retry_after_falls_back_to_the_backoff(llm_server: LLMServer) -> None:
    llm_server.enqueue(
        Fault.status(503, headers={"Retry-After": "later", "retry-after-ms": "n/a"}),
        Reply(text="second time lucky"),
    )
    policy = RetryPolicy(initial_backoff=0.2, jitter=False)
    async with OpenAIChatClient(llm_server.url, retry=policy) as client:
        start = time.monotonic()
        response = await collect_agent_response(client.stream(USER).pipe(convert()))
    assert response.text == "second time lucky"
    assert time.monotonic() - start >= 0.2  # waited the backoff, not 0
    assert len(llm_server.requests) == 2


# ---------------------------------------------------------------- policy and timeouts


def test_jitter_shortens_the_backoff_by_at_most_a_quarter() -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff=0.5, max_backoff=4.0)
    assert policy.jitter  # on by default
    busy = HTTPStatusError(503)
    for attempt, backoff in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (8, 4.0)]:
        delays = [policy.delay(busy, attempt) for _ in range(200)]
        assert all(d is not None and 0.75 * backoff <= d <= backoff for d in delays), delays
        assert len(set(delays)) > 1  # spread, so clients that failed together do not retry together


def test_jitter_never_changes_what_the_server_asked_for() -> None:
    policy = RetryPolicy(initial_backoff=0.5)
    assert policy.jitter
    assert [policy.delay(HTTPStatusError(429, retry_after=3.0), 1) for _ in range(20)] == [3.0] * 20
    assert policy.delay(HTTPStatusError(400), 1) is None
    assert policy.delay(HTTPStatusError(503), 3) is None  # max_attempts reached


@pytest.mark.parametrize("field", ["connect", "first_byte", "idle"])
@pytest.mark.parametrize("value", [0, -1.5])
def test_timeouts_must_be_positive_or_none(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{field} must be positive or None, got {value}"):
        Timeouts(**{field: value})
    assert getattr(Timeouts(**{field: None}), field) is None


# ---------------------------------------------------------------- sessions and subclasses


@pytest.mark.asyncio
async def test_a_closed_session_given_by_the_caller_fails_the_stream_at_once(
    llm_server: LLMServer,
) -> None:
    session = aiohttp.ClientSession()
    await session.close()
    client = OpenAIChatClient(llm_server.url, KEY, session=session, retry=FAST_RETRY)
    with pytest.raises(TransportError) as info:  # typed, not aiohttp's RuntimeError
        await collect_agent_response(client.stream(USER).pipe(convert()))
    await client.aclose()
    assert "session is closed" in str(info.value)
    assert not info.value.retryable
    assert KEY not in repr(info.value)
    assert llm_server.requests == []  # nothing sent, nothing retried


class EchoChatClient(LLMClient):
    """A client of one's own: an OpenAI-compatible server with a bare payload."""

    dialect = "openai-chat"
    endpoint = "chat/completions"
    default_model = "echo-1"

    def _payload(self, messages: list[ChatMessage], tools: list[ToolLike]) -> dict[str, Any]:
        return {"model": self.model, "messages": [m.to_openai() for m in messages]}


@pytest.mark.asyncio
async def test_a_subclass_of_llm_client_is_its_own_async_context_manager(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Reply(text="Hi.", tool_calls=[ToolCallSpec("now", {}, id="c1")]))
    client = EchoChatClient(llm_server.url, KEY)
    async with client as entered:
        assert entered is client
        response = await collect_agent_response(client.stream(USER).pipe(convert()))
    await llm_server.wait_connections_closed(timeout=5.0)  # __aexit__ closed the session
    assert (response.text, response.tool_calls) == ("Hi.", (ToolCall("c1", "now", {}),))
    (request,) = llm_server.requests
    messages = [m.to_openai() for m in USER]
    assert request.json == {"model": "echo-1", "messages": messages, "stream": True}
    assert request.headers["Authorization"] == "Bearer ***"
