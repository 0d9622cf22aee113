"""The test kit (rafrx.testing) used as a user would: an adversarial hunt.

What the server renders is parsed back with rafrx's own dialects and compared
with what was scripted; faults are checked against their docs through the real
clients; the thread wrapper, the ``serve`` command and shutdown are exercised
with streams still open. A comment opening a test names the bug it pins.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from rafrx import ChatMessage, collect_agent_response
from rafrx import operators as ops
from rafrx.errors import (
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    MalformedEvent,
    ProtocolError,
    ProviderError,
    StreamInterrupted,
    StreamTimeout,
)
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.sources._policy import RetryPolicy, Timeouts
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import (
    Fault,
    LLMServer,
    RecordedRequest,
    Replay,
    Reply,
    ToolCallSpec,
    WireFormat,
    render,
)

ROOT = Path(__file__).resolve().parents[2]
FORMATS: tuple[WireFormat, ...] = ("openai-chat", "anthropic", "openai-responses")
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "openai-responses": "/v1/responses",
}
#: The least request body the server answers: it only streams.
STREAM = {"stream": True}
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
KEY = "sk-proj-ADVERSARIALSECRET0123456789"
FAST = Timeouts(connect=2.0, first_byte=0.3, idle=0.3)


def parse(body: bytes | Sequence[bytes], fmt: str) -> AgentResponse:
    """The scripted body read back with rafrx's own dialect, synchronously."""
    chunks = [body] if isinstance(body, bytes) else list(body)
    pipeline = from_sse(chunks, fmt).pipe(ops.convert(), ops.flush_tool_calls(), ops.aggregate())
    return pipeline.run()


async def ask(client: LLMClient, text: str = "hi") -> AgentResponse:
    stream = client.stream([ChatMessage.user(text)]).pipe(ops.convert(), ops.flush_tool_calls())
    return await collect_agent_response(stream)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[LLMServer]:
    async with LLMServer() as started:
        yield started


async def raw_request(
    port: int, path: str = "/v1/chat/completions", body: bytes = b'{"stream": true}'
) -> Any:
    """A client that sends a request and then reads nothing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()
    return reader, writer


# ---------------------------------------------------------------- rendering round trips


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_ascii_text_and_reasoning_round_trip_at_every_split(fmt: WireFormat) -> None:
    reply = Reply(text="héllo 🌍 «wörld»\r\n\n\u2028\x00", reasoning="thínk 🤔", chunk_size=1)
    body = render(reply, fmt, {"stream_options": {"include_usage": True}})
    whole = parse(body, fmt)
    bytewise = parse([body[i : i + 1] for i in range(len(body))], fmt)
    for response in (whole, bytewise):
        assert response.text == reply.text
        assert response.reasoning_text == reply.reasoning
        assert response.finish_reason is FinishReason.STOP


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_reply_round_trips_as_an_empty_successful_answer(fmt: WireFormat) -> None:
    response = parse(render(Reply(), fmt), fmt)
    assert response.text == ""
    assert response.tool_calls == ()
    assert response.finish_reason is FinishReason.STOP


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_calls_round_trip_with_ids_names_and_huge_arguments(fmt: WireFormat) -> None:
    huge = {"content": "é🌍x" * 60_000, "n": [1, 2.5, None, True], "nested": {"k": "\"'\\"}}
    calls = [
        ToolCallSpec("write", huge, id="call_given"),
        ToolCallSpec("empty", {}),
        ToolCallSpec("blank", ""),
        ToolCallSpec("bad", '{"a": '),
    ]
    reply = Reply(text="Let me.", tool_calls=calls, chunk_size=997)
    response = parse(render(reply, fmt), fmt)
    got = {call.name: call for call in response.tool_calls}
    assert [call.name for call in response.tool_calls] == ["write", "empty", "blank", "bad"]
    assert got["write"].id == "call_given"
    assert got["write"].arguments == huge
    assert got["empty"].arguments == {}
    assert got["blank"].arguments == {}
    assert len({call.id for call in response.tool_calls}) == 4
    assert response.text == "Let me."
    assert response.finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
def test_scripted_usage_round_trips_in_openai_formats(fmt: WireFormat) -> None:
    usage = Usage(
        prompt_tokens=100,
        completion_tokens=10,
        total_tokens=110,
        reasoning_tokens=4,
        cached_tokens=40,
    )
    body = render(Reply(text="x", usage=usage), fmt, {"stream_options": {"include_usage": True}})
    assert parse(body, fmt).usage == usage


def test_anthropic_usage_round_trips_with_cached_tokens() -> None:
    # Was: the renderer sent input_tokens = prompt_tokens (which already counts
    # the cached tokens) plus cache_read_input_tokens, so Anthropic's own
    # arithmetic (input + cache_read + cache_creation) counted the cache twice.
    usage = Usage(prompt_tokens=100, completion_tokens=10, total_tokens=110, cached_tokens=40)
    got = parse(render(Reply(text="x", usage=usage), "anthropic"), "anthropic").usage
    assert (got.prompt_tokens, got.total_tokens, got.cached_tokens) == (100, 110, 40)


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("length", FinishReason.LENGTH),
        ("max_tokens", FinishReason.LENGTH),
        (FinishReason.CONTENT_FILTER, FinishReason.CONTENT_FILTER),
        ("tool_use", FinishReason.TOOL_CALLS),
    ],
)
@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic"])
def test_finish_reasons_round_trip(fmt: WireFormat, finish: Any, expected: FinishReason) -> None:
    calls = [ToolCallSpec("f", {"a": 1})] if expected is FinishReason.TOOL_CALLS else []
    reply = Reply(text="x", tool_calls=calls, finish=finish)
    assert parse(render(reply, fmt), fmt).finish_reason is expected


# ---------------------------------------------------------------- over HTTP, with the real clients


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fmt", "error_type"),
    [("openai-chat", None), ("anthropic", "api_error"), ("openai-responses", "server_error")],
)
async def test_error_finish_reaches_the_clients_as_each_providers_failure(
    server: LLMServer, fmt: WireFormat, error_type: str | None
) -> None:
    # Chat says finish_reason "error" (as OpenAI-compatible servers do); Anthropic
    # ends with an error event and Responses with response.failed: a retryable
    # ProviderError, the partial text kept.
    server.enqueue(Reply(text="partial", finish=FinishReason.ERROR))
    async with CLIENTS[fmt](server.url) as client:
        if error_type is None:
            response = await ask(client)
            assert (response.text, response.finish_reason) == ("partial", FinishReason.ERROR)
            return
        with pytest.raises(ProviderError) as info:
            await ask(client)
    assert (info.value.error_type, info.value.retryable) == (error_type, True)
    assert info.value.partial is not None
    assert info.value.partial.text == "partial"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_replay_of_a_rendered_body_in_tiny_writes_reads_the_same(
    server: LLMServer, fmt: WireFormat
) -> None:
    reply = Reply(text="ça «marche» 🌍", tool_calls=[ToolCallSpec("f", {"q": "ü" * 50})])
    body = render(reply, fmt)
    server.enqueue(Replay(body, chunk_size=3))
    async with CLIENTS[fmt](server.url) as client:
        response = await ask(client)
    assert response.text == reply.text
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("f", {"q": "ü" * 50})]


@pytest.mark.asyncio
async def test_queue_shorter_than_the_requests_falls_back_to_script_then_default(
    server: LLMServer,
) -> None:
    server.enqueue(Reply(text="one"), Reply(text="two"))
    async with OpenAIChatClient(server.url) as client:
        texts = [(await ask(client)).text for _ in range(3)]
        server.script(lambda request: Reply(text=f"script {request.last_role}"))
        texts.append((await ask(client)).text)
        server.script(None)
        texts.append((await ask(client)).text)
    assert texts == [
        "one",
        "two",
        "Hello from the rafrx test server!",
        "script user",
        "Hello from the rafrx test server!",
    ]
    assert server.queued == 0


@pytest.mark.asyncio
async def test_many_concurrent_clients_each_get_their_own_scripted_answer(
    server: LLMServer,
) -> None:
    @server.script
    async def echo(request: RecordedRequest) -> Reply:
        said = request.messages[-1]["content"]
        if isinstance(said, list):
            said = said[0]["text"]
        await asyncio.sleep(0.001)
        return Reply(text=f"echo {said}", chunk_size=2, delay=0.001)

    clients = [CLIENTS[fmt](server.url) for fmt in FORMATS]
    try:
        answers = await asyncio.gather(*(ask(clients[i % 3], f"n{i}") for i in range(150)))
    finally:
        for client in clients:
            await client.aclose()
    assert [a.text for a in answers] == [f"echo n{i}" for i in range(150)]
    assert len(server.requests) == 150
    await server.wait_connections_closed(timeout=3)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_each_fault_reaches_the_client_as_documented(
    server: LLMServer, fmt: WireFormat
) -> None:
    cases: list[tuple[Fault, type[BaseException]]] = [
        (Fault.status(429, retry_after=3), HTTPStatusError),
        (Fault.drop_after(120), StreamInterrupted),
        (Fault.drop_after(120, reset=True), StreamInterrupted),
        (Fault.stall(5, after_bytes=120), IdleTimeout),
        (Fault.stall(5), StreamTimeout),
        (Fault.garbage(b"{unparsable}"), MalformedEvent),
        (Fault.wrong_content_type(), ContentTypeError),
        (Fault.huge_line(300_000), ProtocolError),
    ]
    async with CLIENTS[fmt](server.url, timeouts=FAST) as client:
        for fault, expected in cases:
            server.enqueue(fault)
            started = time.monotonic()
            with pytest.raises(expected) as caught:
                await ask(client)
            assert time.monotonic() - started < 2, fault
            if fault.kind == "status":
                assert caught.value.status == 429  # type: ignore[attr-defined]
                assert caught.value.retry_after == 3  # type: ignore[attr-defined]
    await server.wait_connections_closed(timeout=3)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_retry_after_is_sent_and_honoured(server: LLMServer, fmt: WireFormat) -> None:
    server.enqueue(
        Fault.status(429, retry_after=0.3),
        Fault.status(503, headers={"retry-after-ms": "150"}),
        Reply(text="third time lucky"),
    )
    policy = RetryPolicy(initial_backoff=5.0, jitter=False)
    async with CLIENTS[fmt](server.url, retry=policy) as client:
        started = time.monotonic()
        response = await ask(client)
        elapsed = time.monotonic() - started
    assert response.text == "third time lucky"
    assert 0.4 <= elapsed < 2.0
    assert len(server.requests) == 3


@pytest.mark.asyncio
async def test_status_fault_error_json_has_each_providers_shape(server: LLMServer) -> None:
    async with aiohttp.ClientSession() as http:
        for fmt, path in PATHS.items():
            server.enqueue(Fault.status(529, message="Overloaded ✋"))
            async with http.post(server.url + path, json=STREAM) as resp:
                assert resp.status == 529
                payload = json.loads(await resp.read())
            if fmt == "anthropic":
                assert payload["type"] == "error"
                assert payload["error"] == {"type": "overloaded_error", "message": "Overloaded ✋"}
            else:
                assert payload["error"]["message"] == "Overloaded ✋"


@pytest.mark.asyncio
async def test_status_fault_headers_are_case_insensitive(server: LLMServer) -> None:
    # Was: _status() merged the user's headers with its defaults in a plain
    # dict, so a lower-case "content-type" went out next to the default
    # "Content-Type": two conflicting Content-Type headers on one response.
    server.enqueue(
        Fault.status(502, body="<html>Bad Gateway</html>", headers={"content-type": "text/html"})
    )
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.url + PATHS["openai-chat"], json=STREAM) as resp,
    ):
        content_types = resp.headers.getall("Content-Type")
    assert content_types == ["text/html"]


@pytest.mark.asyncio
async def test_a_fault_around_a_slow_reply_keeps_the_replys_pacing(server: LLMServer) -> None:
    # Was: a Fault's body was rendered whole and written at once, so the Reply's
    # `delay` (and a Replay's chunk_size/delay) was ignored: "stream slowly,
    # then drop the connection" could not be scripted.
    slow = Reply(text="abcdefghij", chunk_size=1, delay=0.05)
    server.enqueue(Fault.drop_after(len(render(slow, "openai-chat")) - 40, body=slow))
    arrivals: list[float] = []

    async def read() -> None:
        async with (
            aiohttp.ClientSession() as http,
            http.post(server.url + PATHS["openai-chat"], json=STREAM) as resp,
        ):
            async for _ in resp.content.iter_any():
                arrivals.append(time.monotonic() - started)

    started = time.monotonic()
    with pytest.raises(aiohttp.ClientPayloadError):
        await read()
    assert arrivals
    assert arrivals[-1] >= 0.3, arrivals


@pytest.mark.asyncio
async def test_paced_replay_is_linear_in_the_number_of_events(server: LLMServer) -> None:
    # Was: _split_events() searched every separator from each event start to
    # the end of the body (data.find per separator per event): quadratic. A
    # paced replay of a 440 KB recording with 8000 events took seconds to start.
    event = b'data: {"choices":[{"index":0,"delta":{"content":"ab"}}]}\n\n'
    body = event * 8000 + b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'
    server.enqueue(Replay(body + b"data: [DONE]\n\n", pacing=True))
    async with aiohttp.ClientSession() as http:
        started = time.monotonic()
        async with http.post(server.url + PATHS["openai-chat"], json=STREAM) as resp:
            data = await resp.read()
        elapsed = time.monotonic() - started
    assert data.endswith(b"data: [DONE]\n\n")
    assert elapsed < 0.8, f"{elapsed:.2f} s to serve 8000 paced events"


@pytest.mark.asyncio
async def test_paced_replay_writes_each_lf_crlf_terminated_event_apart(server: LLMServer) -> None:
    # Was: pacing only knew "\n\n", "\r\n\r\n" and "\r\r" as blank lines;
    # "\n\r\n" (an LF line then an empty CRLF line) is one too, so such a body
    # was written in one piece instead of event by event.
    events = [f'data: {{"n": {i}}}\n\r\n'.encode() for i in range(4)]
    server.enqueue(Replay(b"".join(events), pacing=True, delay=0.1))
    async with aiohttp.ClientSession() as http:
        started = time.monotonic()
        async with http.post(server.url + PATHS["openai-chat"], json=STREAM) as resp:
            await resp.read()
        elapsed = time.monotonic() - started
    assert elapsed >= 0.25


# ---------------------------------------------------------------- requests and recording


@pytest.mark.asyncio
async def test_request_bodies_over_1_mib_are_accepted_and_recorded(server: LLMServer) -> None:
    # Was: aiohttp's default client_max_size (1 MiB) applied to request.read()
    # in LLMServer._handle: a long conversation (or a tool loop echoing big
    # arguments back) got "413 Maximum request body size exceeded" and was not
    # recorded. Real providers accept tens of MB.
    big = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x" * 1_500_000}]}
    async with aiohttp.ClientSession() as http:
        data = io.BytesIO(json.dumps(big).encode())  # bytes > 1 MiB warn in aiohttp
        headers = {"Content-Type": "application/json"}
        async with http.post(server.url + PATHS["openai-chat"], data=data, headers=headers) as resp:
            status = resp.status
            await resp.read()
    assert status == 200
    assert len(server.requests) == 1
    assert server.requests[0].json == big


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_client_sends_a_request_over_1_mib_without_a_warning(
    server: LLMServer, fmt: WireFormat
) -> None:
    # Was: the clients sent json=payload, which aiohttp turns into a BytesPayload
    # that warns over 1 MiB (ResourceWarning: "Sending a large body directly
    # with raw bytes might lock the event loop"), an error under this repo's
    # filterwarnings. The body must still go out as json= sends it.
    said = "x" * 1_500_000
    async with CLIENTS[fmt](server.url) as client:
        response = await ask(client, said)
    assert response.text == "Hello from the rafrx test server!"
    [request] = server.requests
    sent = json.dumps(request.json).encode()  # what json= (json.dumps, UTF-8) sends
    assert said.encode() in sent
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Content-Length"] == str(len(sent))
    assert "Transfer-Encoding" not in request.headers


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_no_secret_is_recorded_echoed_or_shown(
    server: LLMServer, fmt: WireFormat, caplog: pytest.LogCaptureFixture
) -> None:
    def leak(request: RecordedRequest) -> Reply:
        raise ValueError(f"headers were {dict(request.headers)}")

    server.script(leak)
    extra = {"X-Goog-Api-Key": KEY, "Cookie": f"session={KEY}", "Api-Key": KEY}
    async with CLIENTS[fmt](server.url, api_key=KEY, headers=extra) as client:
        with pytest.raises(HTTPStatusError) as caught:
            await ask(client)
    seen = " ".join(
        [
            repr(server),
            repr(server.requests),
            str([dict(r.headers) for r in server.requests]),
            json.dumps([r.json for r in server.requests]),
            str(caught.value),
            repr(caught.value),
            str(caught.value.body),
            caplog.text,
        ]
    )
    assert "script raised ValueError" in str(caught.value.body)
    assert KEY not in seen
    headers = server.requests[0].headers
    assert headers["x-goog-api-key"] == headers["cookie"] == headers["API-KEY"] == "***"


@pytest.mark.asyncio
async def test_script_returning_none_answers_500_naming_the_problem(server: LLMServer) -> None:
    # Was: a script that forgets to return (None, or any non-response) crashed
    # the handler: aiohttp answered its generic "500 Internal Server Error /
    # Server got itself in trouble" in text/plain, naming nothing, unlike a
    # script that raises.
    server.script(lambda request: None)  # type: ignore[arg-type, return-value]
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.url + PATHS["openai-chat"], json=STREAM) as resp,
    ):
        status, text = resp.status, await resp.text()
    assert status == 500
    assert "script" in text
    assert "None" in text


@pytest.mark.asyncio
async def test_a_replay_of_a_missing_file_is_an_error_before_the_200(
    server: LLMServer, tmp_path: Path
) -> None:
    # Was: serve() sent the 200 headers before it read the Replay file (or
    # rendered the Reply), so a wrong path looked like a provider dropping the
    # stream mid-body (ClientPayloadError) instead of an HTTP error naming it.
    missing = tmp_path / "nope.sse"
    server.enqueue(Replay(missing))
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.url + PATHS["openai-chat"], json=STREAM) as resp,
    ):
        status = resp.status
        with contextlib.suppress(aiohttp.ClientPayloadError):
            await resp.read()
    assert status == 500


# ---------------------------------------------------------------- lifecycle


@pytest.mark.asyncio
async def test_a_closed_port_can_be_reused_at_once() -> None:
    first = LLMServer()
    await first.start()
    port = first.port
    reader, writer = await raw_request(port)
    await reader.readuntil(b"\r\n\r\n")
    await first.close()
    writer.close()
    async with (
        LLMServer(port=port) as second,
        aiohttp.ClientSession() as http,
        http.post(second.url + PATHS["anthropic"], json=STREAM) as resp,
    ):
        assert b"message_stop" in await resp.read()


@pytest.mark.asyncio
async def test_close_ends_stalls_and_slow_replies_at_once() -> None:
    server = LLMServer()
    await server.start()
    server.enqueue(Fault.stall(30, after_bytes=10), Reply(text="x" * 500, chunk_size=1, delay=0.05))
    clients = [await raw_request(server.port), await raw_request(server.port)]
    await server.wait_requests(2)
    await asyncio.sleep(0.1)
    started = time.monotonic()
    await server.close()
    assert time.monotonic() - started < 0.5
    for reader, writer in clients:
        async with asyncio.timeout(1):
            data = await reader.read()
        assert not data.endswith(b"0\r\n\r\n")  # cut, not a clean end of the chunked body
        writer.close()
    assert server.open_connections == 0


@pytest.mark.asyncio
async def test_close_closes_a_connection_whose_client_stopped_reading() -> None:
    # Was: close() promises to "close every connection", but a response stuck
    # in a full send buffer (a client that stopped reading) was only
    # transport.close()d: the connection stayed open until the client read
    # megabytes more. Expected: aborted within the shutdown timeout.
    server = LLMServer()
    await server.start()
    server.enqueue(Reply(text="y" * 8_000_000, chunk_size=8_000_000))
    _reader, writer = await raw_request(server.port)
    await server.wait_requests(1)
    await asyncio.sleep(0.2)
    await server.close()
    try:
        await server.wait_connections_closed(timeout=1)
    finally:
        writer.transport.abort()
        await asyncio.sleep(0.05)


def test_thread_stop_closes_a_connection_whose_client_stopped_reading() -> None:
    # Was: ServerThread.stop() closed the loop while such a transport was still
    # "closing": the server socket leaked (ResourceWarning) and the client never
    # saw EOF, whatever it read afterwards.
    thread = LLMServer.in_thread()
    server = thread.start()
    server.enqueue(Reply(text="y" * 8_000_000, chunk_size=8_000_000))
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n"
            b'{"stream": true}'
        )
        thread.run(server.wait_requests(1), timeout=5)
        time.sleep(0.2)
        thread.stop()
        sock.settimeout(1.0)
        ended = False
        try:
            while sock.recv(1 << 20):
                pass
            ended = True
        except ConnectionResetError:
            ended = True
        except TimeoutError:
            ended = False
        assert ended, "the server side of the connection was never closed"
    finally:
        sock.close()


def _post(url: str, timeout: float = 5) -> bytes:
    request = urllib.request.Request(url, data=b'{"stream": true}', method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return bytes(resp.read())


def test_thread_start_stop_twice_restart_and_no_leaked_threads() -> None:
    before = set(threading.enumerate())
    thread = LLMServer.in_thread(default=Reply(text="threaded"))
    server = thread.start()
    with pytest.raises(RuntimeError, match="already running"):
        thread.start()
    assert b'"threaded"' in _post(server.url + PATHS["openai-chat"])
    thread.stop()
    thread.stop()
    assert not server.started
    again = thread.start()
    try:
        assert b"threaded" in _post(again.url + PATHS["openai-responses"])
        assert len(again.requests) == 2
    finally:
        thread.stop()
    assert set(threading.enumerate()) - before == set()


def test_thread_stop_while_a_stream_is_stalled_returns_at_once() -> None:
    thread = LLMServer.in_thread()
    server = thread.start()
    server.enqueue(Fault.stall(30, after_bytes=10))
    outcome: dict[str, BaseException | bytes] = {}

    def read() -> None:
        try:
            outcome["body"] = _post(server.url + PATHS["openai-chat"], timeout=5)
        except Exception as exc:
            outcome["error"] = exc

    reader = threading.Thread(target=read)
    reader.start()
    thread.run(server.wait_requests(1), timeout=5)
    time.sleep(0.1)
    started = time.monotonic()
    thread.stop()
    assert time.monotonic() - started < 1.5
    reader.join(3)
    assert not reader.is_alive()
    assert "error" in outcome  # cut mid-body, not a complete answer


def test_serve_stops_cleanly_on_sigterm_with_a_stream_open() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "rafrx", "serve", "--port", "0", "--speed", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", process.stdout.readline())
        assert match
        body = json.dumps(
            {"stream": True, "messages": [{"role": "user", "content": "hi"}]}
        ).encode()
        with socket.create_connection(("127.0.0.1", int(match.group(1))), timeout=5) as sock:
            head = f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body)
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=10)
            assert time.monotonic() - started < 3
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "stopped after 1 request(s)" in out
    assert "Traceback" not in err
