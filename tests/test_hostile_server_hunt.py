"""Pins of what a security reviewer auditing rafrx against an untrusted OpenAI-compatible
endpoint (a hostile or compromised ``base_url``) checked and found right: resource
exhaustion, slow servers, redirects, secrets echoed back, lying streams.

The bugs the same hunt found are in ``test_hostile_server_fixes.py``. Every exchange is real
HTTP over 127.0.0.1: a small aiohttp app, or a raw asyncio server where the test needs bytes
aiohttp's own server refuses to write (a header that never ends, a chunk size that
overflows). Limits are set small through the documented options, so that each test is fast.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import pytest
from aiohttp import web
from pydantic import Field

from rafrx import Agent, ChatMessage, RafrxError, collect_agent_response
from rafrx import operators as ops
from rafrx.errors import (
    ConnectTimeout,
    HTTPStatusError,
    IdleTimeout,
    InvalidToolArguments,
    LimitExceeded,
    MalformedEvent,
    ProtocolError,
    ProviderError,
)
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.tools import tool

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Script = Callable[[asyncio.StreamWriter], Awaitable[None]]

KEY = "sk-hostile-test-0123456789abcdef"


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """An aiohttp app on 127.0.0.1 answering every path with ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def serve_raw(script: Script) -> AsyncIterator[str]:
    """A raw TCP server on 127.0.0.1: reads a request's head, then runs ``script``."""

    running: set[asyncio.Task[Any]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        running.add(task)
        try:
            await reader.readuntil(b"\r\n\r\n")
            await script(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def call_chunk(call: dict[str, Any]) -> bytes:
    return chat_chunk({"tool_calls": [call]})


DONE = b"data: [DONE]\n\n"


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def replying(
    *bodies: bytes, content_type: str = "text/event-stream", headers: dict[str, str] | None = None
) -> Handler:
    """A handler answering its n-th request with ``bodies[n]`` (the last one after them)."""
    left = list(bodies)

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": content_type, **(headers or {})})
        await response.prepare(request)
        await response.write(left.pop(0) if len(left) > 1 else left[0])
        await response.write_eof()
        return response

    return handler


async def failure(client: LLMClient) -> RafrxError:
    """The error a one-message call through ``convert()`` ends with (the client is closed)."""
    try:
        await collect_agent_response(client.stream([ChatMessage.user("hi")]).pipe(ops.convert()))
    except RafrxError as err:
        return err
    finally:
        await client.aclose()
    raise AssertionError("the call succeeded")


def shows(err: RafrxError) -> str:
    """Everything an error shows: its text, repr and string attributes."""
    parts = [str(err), repr(err), *(str(a) for a in err.args)]
    parts += [value for value in vars(err).values() if isinstance(value, str)]
    return "\n".join(parts)


# ----------------------------------------------------------------- redirects


@pytest.mark.asyncio
async def test_a_redirect_to_another_host_is_not_followed_and_the_key_goes_nowhere() -> None:
    hits: list[dict[str, str]] = []

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        hits.append(dict(request.headers))
        return web.Response(text="thanks")

    async with serve(elsewhere) as other:

        async def redirecting(request: web.Request) -> web.StreamResponse:
            await request.read()
            location = f"{other}/v1/chat/completions?key={KEY}"
            return web.Response(status=307, headers={"Location": location})

        async with serve(redirecting) as url:
            err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 307
    assert not err.retryable
    assert hits == []
    assert f"redirects to {other}/v1/chat/completions?key=***; not followed" in str(err)
    assert KEY not in shows(err)


@pytest.mark.asyncio
async def test_a_redirect_to_a_file_url_is_named_and_not_followed() -> None:
    async def redirecting(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(status=302, headers={"Location": "file:///etc/passwd"})

    async with serve(redirecting) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, HTTPStatusError)
    assert "redirects to file:///etc/passwd; not followed" in str(err)


# ----------------------------------------------------------------- resource exhaustion


@pytest.mark.asyncio
async def test_a_gzip_bomb_stops_at_the_line_limit_keeping_what_came() -> None:
    inflated = chat_chunk({"content": "hello"}) + b"data: " + b"a" * (8 * 1024 * 1024)
    bomb = gzip.compress(inflated, 9)
    assert len(bomb) < 64 * 1024  # (a small body: a thousand times more once decoded)
    handler = replying(bomb, headers={"Content-Encoding": "gzip"})
    async with serve(handler) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m", max_line_bytes=64 * 1024)
        err = await failure(client)
    assert isinstance(err, LimitExceeded)
    assert err.limit == 64 * 1024
    assert err.partial is not None
    assert err.partial.text == "hello"


@pytest.mark.asyncio
async def test_an_endless_line_on_a_body_that_never_ends_fails_at_the_limit() -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chat_chunk({"content": "so far"}) + b"data: ")
        try:
            for _ in range(10_000):  # (ends when the client goes)
                await response.write(b"x" * 4096)
        except ConnectionError:
            pass
        return response

    async with serve(endless) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m", max_line_bytes=32 * 1024)
        err = await asyncio.wait_for(failure(client), 5)
    assert isinstance(err, LimitExceeded)
    assert "max_line_bytes=32768" in str(err)
    assert err.partial is not None
    assert err.partial.text == "so far"


@pytest.mark.asyncio
async def test_endless_response_headers_are_a_protocol_error() -> None:
    async def headers_forever(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
        for n in range(5000):
            writer.write(b"X-Pad-%d: x\r\n" % n)
        await writer.drain()

    async with serve_raw(headers_forever) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, ProtocolError)
    assert "Too many headers" in str(err)


@pytest.mark.asyncio
async def test_a_huge_header_line_is_a_protocol_error_without_the_key() -> None:
    async def long_header(writer: asyncio.StreamWriter) -> None:
        value = (KEY.encode() + b" ") * 20_000
        writer.write(b"HTTP/1.1 200 OK\r\nX-Echo: " + value + b"\r\n\r\n")
        await writer.drain()

    async with serve_raw(long_header) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, ProtocolError)
    assert KEY not in shows(err)


@pytest.mark.asyncio
async def test_a_chunk_size_that_overflows_is_a_protocol_error() -> None:
    async def overflowing(writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffffffffff\r\ndata: x\r\n"
        )
        await writer.drain()

    async with serve_raw(overflowing) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, ProtocolError)
    assert "Chunk size" in str(err)


@pytest.mark.asyncio
async def test_deeply_nested_event_data_is_a_malformed_event_not_a_recursion_error() -> None:
    deep = b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n"
    async with serve(replying(chat_chunk({"content": "before"}) + deep)) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, MalformedEvent)
    assert "recursion" in str(err)
    assert err.partial is not None
    assert err.partial.text == "before"


@pytest.mark.asyncio
async def test_a_hundred_thousand_digit_integer_in_event_data_is_a_malformed_event() -> None:
    digits = b"9" * 100_000
    body = b'data: {"id": "c", "choices": [], "usage": {"prompt_tokens": ' + digits + b"}}\n\n"
    async with serve(replying(chat_chunk({"content": "before"}) + body + DONE)) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, MalformedEvent)
    assert "4300 digits" in str(err)
    assert err.partial is not None
    assert err.partial.text == "before"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
        ('{"n": ' + "1" * 100_000 + "}", "4300 digits"),
    ],
    ids=["nested", "digits"],
)
async def test_tool_arguments_too_deep_or_too_long_a_number_fail_that_call_alone(
    arguments: str, why: str
) -> None:
    body = (
        chat_chunk({"content": "calling"})
        + call_chunk(
            {
                "index": 0,
                "id": "call_bad",
                "type": "function",
                "function": {"name": "f", "arguments": ""},
            }
        )
        + b"".join(
            call_chunk({"index": 0, "function": {"arguments": arguments[i : i + 4096]}})
            for i in range(0, len(arguments), 4096)
        )
        + call_chunk(
            {
                "index": 1,
                "id": "call_ok",
                "type": "function",
                "function": {"name": "f", "arguments": '{"n": 1}'},
            }
        )
        + chat_chunk({}, "tool_calls")
        + DONE
    )
    async with serve(replying(body)) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m")
        try:
            response = await collect_agent_response(
                client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
            )
        finally:
            await client.aclose()
    assert response.text == "calling"
    bad, ok = response.tool_calls
    assert bad.arguments is None
    assert isinstance(bad.invalid_arguments, InvalidToolArguments)
    assert why in (bad.error or "")
    assert ok.arguments == {"n": 1}
    assert ok.error is None


@pytest.mark.asyncio
async def test_a_tool_call_index_of_a_trillion_is_one_call() -> None:
    body = (
        call_chunk(
            {
                "index": 10**12,
                "id": "call_1",
                "type": "function",
                "function": {"name": "f", "arguments": "{}"},
            }
        )
        + chat_chunk({}, "tool_calls")
        + DONE
    )
    async with serve(replying(body)) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m")
        try:
            response = await collect_agent_response(
                client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
            )
        finally:
            await client.aclose()
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [("call_1", "f", {})]


# ----------------------------------------------------------------- slow servers


@pytest.mark.asyncio
async def test_headers_sent_a_line_at_a_time_hit_the_first_byte_timeout() -> None:
    async def trickle(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for n in range(100):
            writer.write(b"X-Slow-%d: x\r\n" % n)
            await writer.drain()
            await asyncio.sleep(0.05)

    async with serve_raw(trickle) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m", timeouts=Timeouts(first_byte=0.3))
        err = await asyncio.wait_for(failure(client), 2)
    assert isinstance(err, ConnectTimeout)
    assert "first byte (0.3 s)" in str(err)


@pytest.mark.asyncio
async def test_endless_interim_1xx_responses_hit_the_first_byte_timeout() -> None:
    async def processing(writer: asyncio.StreamWriter) -> None:
        for _ in range(100):
            writer.write(b"HTTP/1.1 102 Processing\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)

    async with serve_raw(processing) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m", timeouts=Timeouts(first_byte=0.3))
        err = await asyncio.wait_for(failure(client), 2)
    assert isinstance(err, ConnectTimeout)


@pytest.mark.asyncio
async def test_a_body_that_trickles_then_stalls_ends_in_an_idle_timeout_keeping_the_text() -> None:
    """Each byte restarts the idle timeout (documented: no total timeout on a body); the
    silence after them ends the stream."""

    async def trickle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in (chat_chunk({"content": "slow"}), b": a\n", b": b\n", b": c\n"):
            await response.write(piece)
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)  # (silence: the client goes first)
        return response

    async with serve(trickle) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m", timeouts=Timeouts(idle=0.25))
        err = await asyncio.wait_for(failure(client), 2)
    assert isinstance(err, IdleTimeout)
    assert err.partial is not None
    assert err.partial.text == "slow"


@pytest.mark.asyncio
async def test_a_body_that_never_ends_after_done_still_completes() -> None:
    async def stuck(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chat_chunk({"content": "hi"}, "stop") + DONE)
        await asyncio.sleep(2)  # (never ends the body)
        return response

    async with serve(stuck) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m")
        try:
            response = await asyncio.wait_for(
                collect_agent_response(client.stream([ChatMessage.user("hi")]).pipe(ops.convert())),
                1.5,
            )
        finally:
            await client.aclose()
    assert response.text == "hi"


@pytest.mark.asyncio
async def test_a_retry_after_of_years_is_not_waited_for() -> None:
    sent = 0

    async def limited(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        sent += 1
        await request.read()
        headers = {"Retry-After": "100000000", "retry-after-ms": "1e308"}
        return web.Response(status=429, headers=headers, text="{}")

    async with serve(limited) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m", retry=RetryPolicy())
        err = await asyncio.wait_for(failure(client), 2)
    assert isinstance(err, HTTPStatusError)
    assert err.status == 429
    assert sent == 1


@pytest.mark.asyncio
async def test_a_server_asking_for_retries_forever_gets_max_attempts() -> None:
    sent = 0

    async def failing(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        sent += 1
        await request.read()
        headers = {"x-should-retry": "true", "Retry-After": "0"}
        return web.Response(status=400, headers=headers, text="{}")

    async with serve(failing) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m", retry=RetryPolicy(max_attempts=4))
        err = await asyncio.wait_for(failure(client), 2)
    assert isinstance(err, HTTPStatusError)
    assert sent == 4
    assert err.attempts == 4


# ----------------------------------------------------------------- secrets echoed back


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "body",
    [
        b'data: {"error": {"message": "bad key ' + KEY.encode() + b'", "type": "x"}}\n\n',
        b"data: {not json " + KEY.encode() + b"}\n\n",
        b"data: {not json " + KEY[:12].encode() + b"\ndata: " + KEY[12:].encode() + b"}\n\n",
    ],
    ids=["error-event", "malformed", "malformed-split-over-lines"],
)
async def test_a_key_echoed_mid_stream_is_redacted_in_the_error(body: bytes) -> None:
    handler = replying(chat_chunk({"content": "so far"}) + body, headers={"x-request-id": KEY})
    async with serve(handler) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, ProviderError | MalformedEvent)
    assert KEY not in shows(err)
    assert err.request_id == "***"
    assert err.partial is not None
    assert err.partial.text == "so far"


@pytest.mark.asyncio
async def test_a_key_echoed_in_an_http_error_and_its_request_id_is_redacted() -> None:
    async def echoing(request: web.Request) -> web.StreamResponse:
        await request.read()
        body = json.dumps({"error": {"message": f"you sent {request.headers['Authorization']}"}})
        return web.Response(
            status=401, text=body, content_type="application/json", headers={"request-id": KEY}
        )

    async with serve(echoing) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 401
    assert "you sent Bearer ***" in str(err)
    assert KEY not in shows(err)


# ----------------------------------------------------------------- lying streams


def _anthropic(*blocks: bytes, stop: str = "tool_use") -> bytes:
    start = event(
        "message_start",
        {"type": "message_start", "message": {"id": "msg", "model": "claude-x", "usage": {}}},
    )
    end = event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}})
    return start + b"".join(blocks) + end + event("message_stop", {"type": "message_stop"})


def _tool_use(index: int, call_id: str, name: str) -> bytes:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return event(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def _input(index: int, partial_json: str) -> bytes:
    delta = {"type": "input_json_delta", "partial_json": partial_json}
    return event(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def _stop(index: int) -> bytes:
    return event("content_block_stop", {"type": "content_block_stop", "index": index})


@pytest.mark.asyncio
async def test_anthropic_deltas_and_stops_for_blocks_never_started_are_ignored() -> None:
    body = _anthropic(
        _tool_use(0, "toolu_1", "f"),
        _input(5, '{"smuggled": true}'),
        _input(0, '{"a": 1}'),
        _stop(7),
        _stop(0),
    )
    async with serve(replying(body)) as url:
        client = AnthropicClient(url, api_key=KEY, model="claude-x")
        try:
            response = await collect_agent_response(
                client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
            )
        finally:
            await client.aclose()
    assert [(c.id, c.arguments, c.complete) for c in response.tool_calls] == [
        ("toolu_1", {"a": 1}, True)
    ]


@pytest.mark.asyncio
async def test_an_anthropic_index_restarted_with_a_new_call_never_runs_the_first() -> None:
    """Block 0 starts ``f``, gets half its arguments, then starts again as ``g``: ``f`` is
    cut short (kept, never run), ``g`` runs."""
    first = _anthropic(
        _tool_use(0, "toolu_1", "f"),
        _input(0, '{"a": '),
        _tool_use(0, "toolu_2", "g"),
        _input(0, '{"a": 2}'),
        _stop(0),
    )
    second = _anthropic(
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "ok"},
            },
        ),
        _stop(0),
        stop="end_turn",
    )
    ran: list[str] = []

    @tool
    def f(a: int) -> str:
        """F."""
        ran.append("f")
        return "f"

    @tool
    def g(a: int) -> str:
        """G."""
        ran.append("g")
        return "g"

    async with serve(replying(first, second)) as url:
        client = AnthropicClient(url, api_key=KEY, model="claude-x")
        try:
            response = await Agent(client, tools=[f, g]).send("hi")
        finally:
            await client.aclose()
    assert ran == ["g"]
    assert response.text == "ok"
    calls = {c.id: c for c in response.tool_calls}
    assert calls["toolu_1"].complete is False
    assert calls["toolu_2"].arguments == {"a": 2}


@pytest.mark.asyncio
async def test_a_tool_call_with_an_empty_name_is_a_protocol_error() -> None:
    body = (
        call_chunk(
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "", "arguments": "{}"},
            }
        )
        + chat_chunk({}, "tool_calls")
        + DONE
    )
    async with serve(replying(body)) as url:
        err = await failure(OpenAIChatClient(url, api_key=KEY, model="m"))
    assert isinstance(err, ProtocolError)
    assert "never a name" in str(err)


@pytest.mark.asyncio
async def test_a_tool_name_the_agent_does_not_have_is_answered_not_run() -> None:
    first = (
        call_chunk(
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "f\u202e; rm -rf ~", "arguments": "{}"},
            }
        )
        + chat_chunk({}, "tool_calls")
        + DONE
    )
    second = chat_chunk({"content": "ok"}, "stop") + DONE
    ran: list[str] = []

    @tool
    def f() -> str:
        """F."""
        ran.append("f")
        return "f"

    async with serve(replying(first, second)) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m")
        try:
            response = await Agent(client, tools=[f]).send("hi")
        finally:
            await client.aclose()
    assert ran == []
    (answer,) = [m for m in response.turn_transcript if m.tool_call_id == "call_1"]
    assert answer.is_error
    assert "unknown tool" in (answer.content or "")
    assert response.text == "ok"


@pytest.mark.asyncio
@pytest.mark.parametrize("amount", ["NaN", "1e999", "-1e999"])
async def test_a_non_finite_number_never_passes_a_tool_argument_constraint(amount: str) -> None:
    """``NaN`` compares false with every bound: a check written ``value > maximum`` would
    let it through. Python's ``json`` reads ``NaN`` and ``1e999`` (as ``inf``)."""
    first = (
        call_chunk(
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "pay", "arguments": f'{{"amount": {amount}}}'},
            }
        )
        + chat_chunk({}, "tool_calls")
        + DONE
    )
    second = chat_chunk({"content": "ok"}, "stop") + DONE
    paid: list[float] = []

    @tool
    def pay(amount: Annotated[float, Field(ge=0, le=100)]) -> str:
        """Pay."""
        paid.append(amount)
        return "paid"

    async with serve(replying(first, second)) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m")
        try:
            response = await Agent(client, tools=[pay]).send("hi")
        finally:
            await client.aclose()
    assert paid == []
    (answer,) = [m for m in response.turn_transcript if m.tool_call_id == "call_1"]
    assert answer.is_error
    assert "invalid arguments for tool 'pay'" in (answer.content or "")
