"""The aiohttp clients over real HTTP against LLMServer on 127.0.0.1.

Every recorded fixture is replayed through the matching client and must give
exactly what ``from_sse`` gives for the same bytes (and what the manifest
expects); scripted replies round-trip in all three wire formats; requests,
secrets, cold subscription, disposal, retries and sessions are checked.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from reactivex import operators as rx

from rafrx import ChatMessage, ToolCall, Usage, collect_agent_response, convert, updates
from rafrx.errors import (
    HTTPStatusError,
    ProviderError,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.response import AgentResponse, FinishReason
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
    to_responses_input,
    tool_schema,
)
from rafrx.testing import Fault, LLMServer, RecordedRequest, Replay, Reply, ToolCallSpec
from rafrx.tools import tool
from tests.sources.test_fixtures import (
    BY_PATH,
    IDS,
    _check_content,
    _expected_finish,
    _expected_usage,
    _normalized,
    _outcome,
)

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures"
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = list(CLIENTS)
KEY = "sk-test-SECRET-4f2a9"
USER = [ChatMessage.user("What's the weather in Paris?")]
FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.05, jitter=False)


async def collect(
    client: LLMClient, messages: Sequence[ChatMessage] = USER, tools: Any = None
) -> AgentResponse:
    return await collect_agent_response(client.stream(messages, tools).pipe(convert()))


async def outcome(client: LLMClient) -> AgentResponse | RafrxError:
    try:
        return await collect(client)
    except RafrxError as err:
        return err


# ---------------------------------------------------------------- recorded fixtures


@pytest.mark.asyncio
@pytest.mark.parametrize("path", IDS)
async def test_recorded_fixture_over_http_matches_the_manifest(
    llm_server: LLMServer, path: str
) -> None:
    entry = BY_PATH[path]
    fmt, expected = entry["format"], entry["expected"]
    body = (FIXTURES / path).read_bytes()
    llm_server.enqueue(Replay(body, chunk_size=997))
    async with CLIENTS[fmt](llm_server.url, KEY) as client:
        got = await outcome(client)
    await llm_server.wait_connections_closed(timeout=2)

    # Exactly what from_sse gives for the same bytes: HTTP adds and loses nothing.
    assert _normalized(got, body) == _normalized(_outcome(body, fmt), body)

    if "error" in expected:
        assert isinstance(got, ProviderError), repr(got)
        assert got.message == expected["error"]["message"]
        assert got.partial is not None
        _check_content(got.partial, expected)
        return
    assert isinstance(got, AgentResponse), repr(got)
    _check_content(got, expected)
    calls = [c for c in expected["tool_calls"] if not c.get("block_not_stopped")]
    assert [(c.name, c.arguments) for c in got.tool_calls if c.complete] == [
        (c["name"], c["arguments"]) for c in calls
    ]
    assert got.finish_reason == _expected_finish(fmt, expected, calls)
    want = _expected_usage(fmt, expected["usage"])
    got_usage = None if got.usage is None else (got.usage.prompt_tokens, got.usage.total_tokens)
    assert got_usage == (None if want is None else (want.prompt_tokens, want.total_tokens))


@pytest.mark.asyncio
@pytest.mark.parametrize("chunk_size", [1, 64])
async def test_small_chunks_give_the_same_response(llm_server: LLMServer, chunk_size: int) -> None:
    path = "anthropic/anthropic-thinking-tool-use.sse"
    body = (FIXTURES / path).read_bytes()
    llm_server.enqueue(Replay(body, chunk_size=chunk_size))
    async with AnthropicClient(llm_server.url) as client:
        got = await collect(client)
    assert _normalized(got, body) == _normalized(_outcome(body, "anthropic"), body)


# ---------------------------------------------------------------- scripted replies


ROUND_TRIP = Reply(
    text="Checking both — one moment.",
    reasoning="The user wants weather and time; call both tools at once.",
    tool_calls=[
        ToolCallSpec("weather", {"city": "Paris", "days": 2}, id="call_w"),
        ToolCallSpec("clock", {"tz": "Europe/Paris", "fmt": "24h"}, id="call_c"),
    ],
    usage=Usage(prompt_tokens=42, completion_tokens=17, total_tokens=59, reasoning_tokens=9),
    chunk_size=5,
    model="model-x",
)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_scripted_reply_round_trips(llm_server: LLMServer, fmt: str) -> None:
    llm_server.enqueue(ROUND_TRIP)
    async with CLIENTS[fmt](llm_server.url, KEY) as client:
        response = await collect(client)
    assert response.text == ROUND_TRIP.text
    assert response.reasoning_text == ROUND_TRIP.reasoning
    assert response.tool_calls == (
        ToolCall("call_w", "weather", {"city": "Paris", "days": 2}),
        ToolCall("call_c", "clock", {"tz": "Europe/Paris", "fmt": "24h"}),
    )
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert response.model == "model-x"
    assert response.id
    usage = response.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (42, 17, 59)
    if fmt != "anthropic":  # Anthropic does not report reasoning tokens
        assert usage.reasoning_tokens == 9


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "finish", [FinishReason.STOP, FinishReason.LENGTH, FinishReason.CONTENT_FILTER]
)
async def test_finish_reasons_round_trip(
    llm_server: LLMServer, fmt: str, finish: FinishReason
) -> None:
    llm_server.enqueue(Reply(text="Partial answ", finish=finish))
    async with CLIENTS[fmt](llm_server.url) as client:
        response = await collect(client)
    assert (response.text, response.finish_reason) == ("Partial answ", finish)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_estimated_usage_is_reported(llm_server: LLMServer, fmt: str) -> None:
    llm_server.enqueue(Reply(text="x" * 40))
    async with CLIENTS[fmt](llm_server.url) as client:
        response = await collect(client)
    assert response.usage is not None
    assert response.usage.completion_tokens == 10
    assert response.usage.prompt_tokens > 0
    assert response.usage.total_tokens == response.usage.prompt_tokens + 10


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_scripted_tool_loop_in_every_format(llm_server: LLMServer, fmt: str) -> None:
    @llm_server.script
    def turn(request: RecordedRequest) -> Reply:
        if request.last_role == "tool":
            return Reply(text="It is sunny.")
        return Reply(tool_calls=[ToolCallSpec("weather", {"city": "Paris"}, id="call_1")])

    async with CLIENTS[fmt](llm_server.url) as client:
        first = await collect(client, USER, [weather])
        assert first.tool_calls == (ToolCall("call_1", "weather", {"city": "Paris"}),)
        history = [
            *USER,
            ChatMessage.assistant_with_tools("", first.tool_calls),
            ChatMessage.tool("18 °C, sunny", "call_1"),
        ]
        second = await collect(client, history, [weather])
    assert second.text == "It is sunny."
    assert [r.last_role for r in llm_server.requests] == ["user", "tool"]


# ---------------------------------------------------------------- requests


@tool
def weather(city: str) -> str:
    """Forecast for a city.

    Args:
        city: The city's name.
    """
    return f"{city}: sunny"


CONVERSATION = [
    ChatMessage.system("Be brief."),
    ChatMessage.user("Weather?"),
    ChatMessage.assistant_with_tools("Checking.", [ToolCall("c1", "weather", {"city": "Oslo"})]),
    ChatMessage.tool("cold", "c1"),
]


@pytest.mark.asyncio
async def test_openai_chat_request(llm_server: LLMServer) -> None:
    client = OpenAIChatClient(
        llm_server.url, KEY, "gpt-x", temperature=0.5, headers={"X-Trace": "t1"}
    )
    async with client:
        await collect_agent_response(
            client.stream(CONVERSATION, [weather], temperature=0.1, seed=7).pipe(convert())
        )
    (request,) = llm_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.json == {
        "model": "gpt-x",
        "messages": [m.to_openai() for m in CONVERSATION],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Forecast for a city.",
                    "parameters": weather.parameters,
                },
            }
        ],
        "temperature": 0.1,
        "seed": 7,
    }
    assert request.headers["Authorization"] == "Bearer ***"
    assert request.headers["Accept"] == "text/event-stream"
    assert request.headers["X-Trace"] == "t1"
    assert request.headers["User-Agent"].startswith("rafrx")


@pytest.mark.asyncio
async def test_anthropic_request(llm_server: LLMServer) -> None:
    client = AnthropicClient(llm_server.url, KEY, "claude-x", max_tokens=99)
    async with client:
        await collect(client, CONVERSATION, [weather.to_anthropic()])
    (request,) = llm_server.requests
    assert request.path == "/v1/messages"
    assert request.json == {
        "model": "claude-x",
        "max_tokens": 99,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "cold"}],
            },
        ],
        "tools": [
            {
                "name": "weather",
                "description": "Forecast for a city.",
                "input_schema": weather.parameters,
            }
        ],
        "stream": True,
    }
    assert request.headers["x-api-key"] == "***"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in request.headers


@pytest.mark.asyncio
async def test_responses_request(llm_server: LLMServer) -> None:
    async with OpenAIResponsesClient(llm_server.url, KEY, "gpt-r") as client:
        await collect(client, CONVERSATION, [weather.to_openai()])
    (request,) = llm_server.requests
    assert request.path == "/v1/responses"
    assert request.json == {
        "model": "gpt-r",
        "input": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Checking."},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "weather",
                "arguments": '{"city": "Oslo"}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "cold"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "weather",
                "description": "Forecast for a city.",
                "parameters": weather.parameters,
                "strict": False,
            }
        ],
        "stream": True,
    }
    assert request.headers["Authorization"] == "Bearer ***"


def test_tool_schema_accepts_every_shape() -> None:
    want = ("weather", "Forecast for a city.", weather.parameters)
    assert tool_schema(weather) == want
    assert tool_schema(weather.to_openai()) == want
    assert tool_schema(weather.to_anthropic()) == want
    assert tool_schema(weather.to_responses()) == want
    assert tool_schema({"name": "noop"}) == ("noop", "", {"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("client", "own", "theirs"),
    [
        (
            OpenAIChatClient,
            {"type": "custom", "custom": {"name": "run_code", "description": "Python."}},
            {"type": "function", "function": {"name": "weather"}},
        ),
        (
            OpenAIResponsesClient,
            {"type": "web_search", "search_context_size": "low"},
            {"type": "function", "name": "weather", "parameters": {"type": "object"}},
        ),
        (
            AnthropicClient,
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"type": "custom", "name": "weather", "input_schema": {"type": "object"}},
        ),
    ],
    ids=["chat-custom", "responses-web_search", "anthropic-server-tool"],
)
def test_a_tool_of_a_kind_the_provider_defines_goes_as_given(
    client: type[LLMClient], own: dict[str, Any], theirs: dict[str, Any]
) -> None:
    sent = client("http://127.0.0.1:1", model="m")._payload([ChatMessage.user("Q?")], [own, theirs])
    assert sent["tools"][0] == own
    assert sent["tools"][0] is not own  # (a copy: the request never shares the caller's)
    assert tool_schema(sent["tools"][1]) == tool_schema(theirs)  # (in the client's shape)
    # (Anthropic's own shape goes as given: its "custom" type, its cache_control ...)
    assert sent["tools"][1].get("type") == (
        "function" if client is not AnthropicClient else "custom"
    )


def test_responses_input_keeps_order_and_empty_assistant_text() -> None:
    items = to_responses_input([ChatMessage.user("a"), ChatMessage.assistant("")])
    assert items == [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}]


@pytest.mark.parametrize(
    ("base", "client", "url"),
    [
        ("https://api.openai.com", OpenAIChatClient, "https://api.openai.com/v1/chat/completions"),
        ("https://api.openai.com/v1/", OpenAIChatClient, "https://api.openai.com/v1/chat/completions"),
        ("https://openrouter.ai/api/v1", OpenAIChatClient, "https://openrouter.ai/api/v1/chat/completions"),
        ("http://localhost:11434/v1", OpenAIResponsesClient, "http://localhost:11434/v1/responses"),
        ("https://api.anthropic.com", AnthropicClient, "https://api.anthropic.com/v1/messages"),
        ("https://x.azure.com/openai?api-version=1", OpenAIChatClient, "https://x.azure.com/openai/chat/completions?api-version=1"),
    ],
)  # fmt: skip
def test_endpoint_urls(base: str, client: type[LLMClient], url: str) -> None:
    assert str(client(base).url) == url


def test_base_url_must_be_absolute() -> None:
    with pytest.raises(ValueError, match="absolute"):
        OpenAIChatClient("api.openai.com")


# ---------------------------------------------------------------- secrets


@pytest.mark.parametrize("client_type", CLIENTS.values())
def test_repr_hides_the_api_key(client_type: type[LLMClient]) -> None:
    client = client_type("http://127.0.0.1:1", KEY, "m")
    assert repr(client) == (
        f"{client_type.__name__}(base_url='http://127.0.0.1:1', model='m', api_key=***)"
    )
    assert KEY not in repr(vars(client))
    assert "api_key=None" in repr(client_type("http://127.0.0.1:1"))


@pytest.mark.asyncio
async def test_the_key_is_sent_but_never_shown(
    llm_server: LLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sent: list[str] = []

    async def on_request_start(
        session: Any, ctx: Any, params: aiohttp.TraceRequestStartParams
    ) -> None:
        sent.append(params.headers["Authorization"])

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_request_start)
    llm_server.enqueue(
        Fault.status(401, message=f"Incorrect API key provided: {KEY}"),
        Fault.drop_after(300),
    )
    async with aiohttp.ClientSession(trace_configs=[trace]) as session:
        client = OpenAIChatClient(llm_server.url, KEY, session=session)
        errors = [await outcome(client), await outcome(client)]
        await client.aclose()
        assert not session.closed  # a given session is the caller's
    assert sent == [f"Bearer {KEY}"] * 2
    status, interrupted = errors
    assert isinstance(status, HTTPStatusError)
    assert status.provider_message == "Incorrect API key provided: ***"
    assert isinstance(interrupted, StreamInterrupted)
    for err in errors:
        assert isinstance(err, RafrxError)
        shown = [str(err), repr(err), err.body or "", repr(vars(err))]
        assert all(KEY not in text for text in shown)
    assert KEY not in caplog.text
    assert all(KEY not in repr(r) for r in llm_server.requests)


# ---------------------------------------------------------------- cold, dispose


@pytest.mark.asyncio
async def test_the_observable_is_cold(llm_server: LLMServer) -> None:
    async with OpenAIChatClient(llm_server.url) as client:
        stream = client.stream(USER).pipe(convert())
        await asyncio.sleep(0.05)
        assert llm_server.requests == []
        first = await collect_agent_response(stream)
        second = await collect_agent_response(stream)
    assert first.text == second.text == "Hello from the rafrx test server!"
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_disposing_closes_the_connection_promptly(llm_server: LLMServer, fmt: str) -> None:
    llm_server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.01))  # ~4 s of stream
    received: list[Any] = []
    first = asyncio.Event()

    def on_next(update: Any) -> None:
        received.append(update)
        if isinstance(update, updates.TextDelta):
            first.set()

    async with CLIENTS[fmt](llm_server.url) as client:
        subscription = client.stream(USER).subscribe(on_next)
        await asyncio.wait_for(first.wait(), 2)
        assert llm_server.open_connections == 1
        start = time.monotonic()
        subscription.dispose()
        count = len(received)
        await llm_server.wait_connections_closed(timeout=1.0)
        assert time.monotonic() - start < 1.0
        await asyncio.sleep(0.05)
        assert len(received) == count  # nothing after dispose
        subscription.dispose()  # twice is a no-op


@pytest.mark.asyncio
async def test_take_disposes_from_inside_on_next(llm_server: LLMServer) -> None:
    llm_server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.01))
    async with AnthropicClient(llm_server.url) as client:
        done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        client.stream(USER).pipe(
            rx.filter(lambda u: isinstance(u, updates.TextDelta)), rx.take(2), rx.to_list()
        ).subscribe(done.set_result, done.set_exception)
        got = await asyncio.wait_for(done, 2)
        assert got == [updates.TextDelta("word "), updates.TextDelta("word ")]
        await llm_server.wait_connections_closed(timeout=1.0)


@pytest.mark.asyncio
async def test_disposing_before_the_response_aborts_the_request(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.stall(10))
    async with OpenAIChatClient(llm_server.url) as client:
        subscription = client.stream(USER).subscribe(lambda u: None)
        await llm_server.wait_requests(1)
        subscription.dispose()
        await llm_server.wait_connections_closed(timeout=1.0)


@pytest.mark.asyncio
async def test_cancelling_the_awaiting_task_closes_the_connection(llm_server: LLMServer) -> None:
    llm_server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.01))
    async with OpenAIResponsesClient(llm_server.url) as client:
        waiting = asyncio.ensure_future(collect(client))
        await llm_server.wait_requests(1)
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await llm_server.wait_connections_closed(timeout=1.0)


@pytest.mark.asyncio
async def test_a_raising_subscriber_gets_its_error_and_the_connection_closes(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.01))
    boom = ValueError("subscriber bug")
    errors: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()

    def on_next(update: Any) -> None:
        raise boom

    async with OpenAIChatClient(llm_server.url, retry=FAST_RETRY) as client:
        client.stream(USER).subscribe(on_next, errors.set_result)
        assert await asyncio.wait_for(errors, 2) is boom
        await llm_server.wait_connections_closed(timeout=1.0)
    assert len(llm_server.requests) == 1  # never retried


def test_subscribing_without_an_event_loop_is_an_error() -> None:
    errors: list[Exception] = []
    OpenAIChatClient("http://127.0.0.1:1").stream(USER).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError)
    assert "event loop" in str(errors[0])


@pytest.mark.asyncio
async def test_many_concurrent_streams_are_not_limited_by_a_pool(llm_server: LLMServer) -> None:
    n = 150  # aiohttp's default pool would hold the 101st request back
    llm_server.enqueue(*[Fault.stall(30, after_bytes=0) for _ in range(n)])
    async with OpenAIChatClient(llm_server.url) as client:
        tasks = [asyncio.ensure_future(collect(client)) for _ in range(n)]
        await llm_server.wait_until(lambda: llm_server.open_connections == n, timeout=10)
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)
        await llm_server.wait_connections_closed(timeout=2)


# ---------------------------------------------------------------- retries


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_429_with_retry_after_zero_is_retried_once(llm_server: LLMServer, fmt: str) -> None:
    llm_server.enqueue(Fault.status(429, retry_after=0), Reply(text="finally"))
    async with CLIENTS[fmt](llm_server.url, retry=RetryPolicy(initial_backoff=5)) as client:
        start = time.monotonic()
        response = await collect(client)
    assert response.text == "finally"
    assert time.monotonic() - start < 2  # Retry-After: 0, not the backoff of 3.75 s or more
    assert len(llm_server.requests) == 2
    await llm_server.wait_connections_closed(timeout=2)


@pytest.mark.asyncio
async def test_output_already_delivered_is_never_retried(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.drop_after(900), Reply(text="second"))
    async with OpenAIChatClient(llm_server.url, retry=FAST_RETRY) as client:
        with pytest.raises(StreamInterrupted) as caught:
            await collect(client)
    assert caught.value.partial is not None
    assert caught.value.partial.text.startswith("The quick")
    assert len(llm_server.requests) == 1
    assert llm_server.queued == 1


@pytest.mark.asyncio
async def test_retries_stop_after_max_attempts(llm_server: LLMServer) -> None:
    llm_server.enqueue(*[Fault.status(503, message="busy")] * 3, Reply(text="never"))
    async with OpenAIChatClient(llm_server.url, retry=FAST_RETRY) as client:
        with pytest.raises(HTTPStatusError) as caught:
            await collect(client)
    assert (caught.value.status, caught.value.provider_message) == (503, "busy")
    assert len(llm_server.requests) == 3
    assert llm_server.connections_opened == 1  # each failed response was released for reuse


@pytest.mark.asyncio
async def test_a_retried_response_is_a_new_stream(llm_server: LLMServer) -> None:
    body = (FIXTURES / "openai-chat/openai-text.sse").read_bytes()
    llm_server.enqueue(Fault.status(503), Replay(b"\xef\xbb\xbf" + body))  # BOM stripped again
    async with OpenAIChatClient(llm_server.url, retry=FAST_RETRY) as client:
        response = await collect(client)
    assert response.text == BY_PATH["openai-chat/openai-text.sse"]["expected"]["text"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "fault",
    [
        Fault.status(400, message="bad request"),
        Fault.status(429, retry_after=120),  # longer than max_retry_after
        Fault.status(503, headers={"x-should-retry": "false"}),
        Fault.wrong_content_type(),
    ],
    ids=["400", "retry-after-too-long", "x-should-retry-false", "wrong-content-type"],
)
async def test_errors_that_are_not_retried(llm_server: LLMServer, fault: Fault) -> None:
    llm_server.enqueue(fault, Reply(text="never"))
    async with OpenAIChatClient(llm_server.url, retry=FAST_RETRY) as client:
        with pytest.raises(RafrxError):
            await collect(client)
    assert len(llm_server.requests) == 1


@pytest.mark.asyncio
async def test_x_should_retry_true_and_retry_after_ms(llm_server: LLMServer) -> None:
    llm_server.enqueue(
        Fault.status(400, headers={"x-should-retry": "true", "retry-after-ms": "200"}),
        Reply(text="ok"),
    )
    async with AnthropicClient(llm_server.url, retry=FAST_RETRY) as client:
        start = time.monotonic()
        assert (await collect(client)).text == "ok"
    assert time.monotonic() - start >= 0.2
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
async def test_without_a_policy_nothing_is_retried(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.status(429, retry_after=0), Reply(text="never"))
    async with OpenAIChatClient(llm_server.url) as client:
        with pytest.raises(HTTPStatusError) as caught:
            await collect(client)
    assert caught.value.retryable
    assert caught.value.retry_after == 0.0
    assert len(llm_server.requests) == 1


def _refused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.asyncio
async def test_connection_refused_is_retried_with_backoff(no_task_leak: None) -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.1, jitter=False)
    async with OpenAIChatClient(_refused_url(), KEY, retry=policy) as client:
        start = time.monotonic()
        with pytest.raises(TransportError) as caught:
            await collect(client)
    assert time.monotonic() - start >= 0.1 + 0.2
    assert "cannot connect" in str(caught.value)
    assert caught.value.retryable


# ---------------------------------------------------------------- sessions


def test_a_client_used_from_two_loops_gets_a_session_per_loop() -> None:
    with LLMServer.in_thread() as server:
        client = OpenAIChatClient(server.url)
        first = asyncio.run(collect(client))  # no aclose: asyncio.run's shutdown closes it
        server_thread_wait(server)
        second = asyncio.run(_collect_and_close(client))
        server_thread_wait(server)
        assert first.text == second.text
        assert server.connections_opened == 2
    gc.collect()  # an unclosed session or transport would warn (an error here)


async def _collect_and_close(client: LLMClient) -> AgentResponse:
    async with client:
        return await collect(client)


def server_thread_wait(server: LLMServer) -> None:
    deadline = time.monotonic() + 2
    while server.open_connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.open_connections == 0


@pytest.mark.asyncio
async def test_aclose_without_use_and_twice(no_task_leak: None) -> None:
    client = AnthropicClient("http://127.0.0.1:1")
    await client.aclose()
    await client.aclose()


@pytest.mark.asyncio
async def test_aclose_from_another_loop_closes_that_loops_session(llm_server: LLMServer) -> None:
    client = OpenAIChatClient(llm_server.url)
    other = asyncio.new_event_loop()
    ready = threading.Event()
    thread = threading.Thread(target=lambda: (ready.set(), other.run_forever()), daemon=True)
    thread.start()
    ready.wait()
    try:
        future = asyncio.run_coroutine_threadsafe(collect(client), other)
        await asyncio.wrap_future(future)
        # Whether the connection went back to the other loop's pool depends on whether
        # the chunked terminator arrived with [DONE]; either way aclose() must end it.
        await client.aclose()
        await llm_server.wait_connections_closed(timeout=2)
        assert llm_server.open_connections == 0
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(2)
        other.close()
