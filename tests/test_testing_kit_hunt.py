"""Pins of what a team testing its own agent with ``rafrx.testing`` relies on, checked
and found right by a hunt from that angle (the bugs it fixed are pinned in
``test_testing_kit_fixes.py``).

Scripted multi-turn tool loops in each wire format, assertions on what the agent sent,
faults reaching the agent as typed errors, recordings replayed through the server, a
server in a thread for sync code, and nothing left behind after close.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rafrx import Agent, AgentResponse, ChatMessage, collect_agent_response
from rafrx import operators as ops
from rafrx.errors import (
    ConnectTimeout,
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    LimitExceeded,
    StreamInterrupted,
)
from rafrx.recorder import load_sse, record_http, replay, sample, samples
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.testing import (
    Fault,
    LLMServer,
    RecordedRequest,
    Replay,
    Reply,
    ToolCallSpec,
    WireFormat,
)

FORMATS: tuple[WireFormat, ...] = ("openai-chat", "anthropic", "openai-responses")
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "openai-responses": "/v1/responses",
}
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
KEY = "sk-test-HUNTKEY0123456789abcdef"


async def ask(client: LLMClient, text: str) -> AgentResponse:
    """One LLM call of ``client``, as the agent's aggregated response."""
    return await collect_agent_response(client.stream([ChatMessage.user(text)]).pipe(ops.convert()))


def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city.
    """
    return f"{city}: sunny ☀"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_scripted_tool_loop_runs_and_records_what_the_agent_sent(fmt: WireFormat) -> None:
    """A script keyed on ``last_role`` drives a two-step tool loop in each format; the
    recorded requests show the agent's key redacted, its tool offered by name, the
    model asked for, and the tool's result going back as the last (tool) turn."""
    async with LLMServer() as server:

        @server.script
        def turn(request: RecordedRequest) -> Reply:
            if request.last_role == "tool":
                return Reply(text="It is sunny in Zürich.")
            return Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Zürich"})])

        async with CLIENTS[fmt](server.url, api_key=KEY, model="m-1") as client:
            response = await Agent(client, tools=[lookup]).send("Weather in Zürich?")
        await server.wait_connections_closed(timeout=2)

    assert response.text == "It is sunny in Zürich."
    first, second = server.requests
    assert (first.last_role, second.last_role) == ("user", "tool")
    assert first.tool_names == second.tool_names == ("lookup",)
    assert first.model == second.model == "m-1"
    assert first.wire_format == fmt
    assert KEY not in json.dumps([dict(r.headers) for r in server.requests])
    assert "Zürich: sunny ☀" in json.dumps(second.messages[-1], ensure_ascii=False)


@pytest.mark.asyncio
async def test_a_queue_that_runs_out_falls_back_to_the_default_and_queued_counts_down() -> None:
    """An agent that makes one request more than scripted gets ``default`` (here a 500
    fault, the strict setting a test can choose), and ``queued`` says what was unused."""
    strict = Fault.status(500, message="no scripted reply left")
    async with LLMServer(default=strict) as server:
        server.enqueue(Reply(text="one"), Reply(text="two"))
        assert server.queued == 2
        async with OpenAIChatClient(server.url, model="m") as client:
            first = await ask(client, "a")
            assert server.queued == 1
            await ask(client, "b")
            with pytest.raises(HTTPStatusError, match="no scripted reply left") as failed:
                await ask(client, "c")
    assert first.text == "one"
    assert failed.value.status == 500
    assert server.queued == 0
    assert server.request_count == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_rate_limit_then_a_reply_is_retried_after_the_servers_retry_after(
    fmt: WireFormat,
) -> None:
    """A 429 with ``Retry-After: 0`` then a reply: the agent's retry policy tries again
    and gets the reply; the server saw the same request twice."""
    async with LLMServer() as server:
        server.enqueue(Fault.status(429, retry_after=0), Reply(text="after the wait"))
        retry = RetryPolicy(max_attempts=2, jitter=False)
        async with CLIENTS[fmt](server.url, model="m", retry=retry) as client:
            response = await ask(client, "hi")
    assert response.text == "after the wait"
    first, second = server.requests
    assert first.json == second.json


@pytest.mark.asyncio
async def test_a_drop_mid_stream_reaches_the_agent_as_stream_interrupted_with_the_partial() -> None:
    """``Fault.drop_after`` cuts the reply under the client: the agent sees a typed
    ``StreamInterrupted`` (not retried: output was delivered) carrying what came."""
    async with LLMServer() as server:
        body = Reply(text="The first part arrives, the rest never does.", chunk_size=4)
        server.enqueue(Fault.drop_after(1000, body=body))  # the role chunk, 2 deltas and a half
        retry = RetryPolicy(max_attempts=3, jitter=False)
        async with OpenAIChatClient(server.url, model="m", retry=retry) as client:
            with pytest.raises(StreamInterrupted) as dropped:
                await ask(client, "hi")
        await server.wait_connections_closed(timeout=2)
    assert server.request_count == 1
    partial = dropped.value.partial
    assert partial is not None
    assert partial.text == "The firs"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_recording_of_the_server_replays_byte_for_byte_and_decodes_the_same(
    fmt: WireFormat, tmp_path: Path
) -> None:
    """``record_http`` saves a stream (the key kept out of the files); ``Replay(path)``
    serves the exact bytes again; ``replay(path, dialect="auto")`` decodes the same turn."""
    path = tmp_path / f"{fmt}.sse"
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        reply = Reply(text="héllo 👋", tool_calls=[ToolCallSpec("f", {"q": "ü"})], chunk_size=3)
        server.enqueue(reply)
        url = server.url + PATHS[fmt]
        headers = {"Authorization": f"Bearer {KEY}"}
        recorded = await record_http(
            url, path, json_body={"stream": True, "model": "m"}, headers=headers, dialect=fmt
        )
        server.enqueue(Replay(path, pacing=True))
        async with http.post(url, json={"stream": True}) as resp:
            served = await resp.read()
    assert served == recorded.body == load_sse(path).body
    assert KEY not in path.read_text() + path.with_name(f"{fmt}.timing.json").read_text()
    turn = replay(path, dialect="auto").pipe(ops.convert(), ops.aggregate()).run()
    assert turn.text == "héllo 👋"
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("f", {"q": "ü"})]


@pytest.mark.asyncio
async def test_closing_while_many_clients_stream_leaves_no_connection_or_task() -> None:
    """Twenty clients mid-stream (slow replies) when the server closes: each gets an
    error or its end, every connection is closed and no task of the server is left."""
    before = asyncio.all_tasks()
    server = await LLMServer(default=Reply(text="x" * 400, chunk_size=1, delay=0.01)).start()

    async def one() -> object:
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(server.url + PATHS["anthropic"], json={"stream": True}) as r,
            ):
                return await r.read()
        except aiohttp.ClientError as exc:
            return exc

    clients = [asyncio.create_task(one()) for _ in range(20)]
    await server.wait_requests(20, timeout=2)
    await server.close()
    results = await asyncio.wait_for(asyncio.gather(*clients), timeout=2)
    assert all(isinstance(r, aiohttp.ClientError) for r in results)
    assert server.open_connections == 0
    left = {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()}
    assert not [t for t in left if not t.done()]


def test_a_server_in_a_thread_serves_sync_code_from_many_threads() -> None:
    """Sync code on eight threads at once against ``in_thread``: each gets one of the
    queued answers (none twice), the requests are all recorded, and ``run`` reaches the
    server's coroutines; after the block, no server thread is left."""
    thread = LLMServer.in_thread()
    got: list[bytes] = []
    with thread as server:
        server.enqueue(*(Reply(text=f"answer-{i}") for i in range(8)))

        def ask() -> None:
            request = urllib.request.Request(
                server.url + PATHS["openai-chat"], data=b'{"stream": true}', method="POST"
            )
            with urllib.request.urlopen(request, timeout=5) as answer:
                got.append(answer.read())

        workers = [threading.Thread(target=ask) for _ in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(5)
        thread.run(server.wait_requests(8), timeout=5)
        thread.run(server.wait_connections_closed(), timeout=5)
    texts = sorted(
        next(t for t in (f"answer-{i}" for i in range(8)) if t.encode() in b) for b in got
    )
    assert texts == sorted(f"answer-{i}" for i in range(8))
    assert server.request_count == 8
    assert not [t for t in threading.enumerate() if t.name == "rafrx-llm-server"]


def test_thread_run_passes_on_the_coroutines_own_timeout_error() -> None:
    """``run`` with room to spare re-raises the coroutine's own ``TimeoutError`` (its
    message saying how many requests came), not one of its own."""
    thread = LLMServer.in_thread()
    with (
        thread as server,
        pytest.raises(TimeoutError, match=r"0 of 1 requests came within 0\.05 s"),
    ):
        thread.run(server.wait_requests(1, timeout=0.05), timeout=5)


@pytest.mark.asyncio
async def test_a_reused_server_reset_between_tests_starts_clean() -> None:
    """A server shared by tests and ``reset()`` between them: the next test sees no
    queued answer, no script and no request of the one before; ``default`` stays."""
    async with LLMServer(default=Reply(text="default")) as server:
        server.enqueue(Reply(text="left over"))
        server.script(lambda request: Reply(text="scripted"))
        async with (
            aiohttp.ClientSession() as http,
            http.post(server.url + PATHS["anthropic"], json={"stream": True}) as r,
        ):
            await r.read()
        server.reset()
        assert (server.queued, server.requests, server.request_count) == (0, [], 0)
        async with OpenAIChatClient(server.url, model="m") as client:
            response = await ask(client, "hi")
    assert response.text == "default"
    assert server.request_count == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_requests_holding_images_are_recorded_as_sent(fmt: WireFormat) -> None:
    """A user turn with an image part in each provider's shape is recorded whole, and
    its ``last_role`` is ``"user"``."""
    image: dict[str, Any] = {
        "openai-chat": {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        "anthropic": {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
        },
        "openai-responses": {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
    }[fmt]
    text = {"type": "input_text" if fmt == "openai-responses" else "text", "text": "What is it?"}
    turn = {"role": "user", "content": [text, image]}
    key = "input" if fmt == "openai-responses" else "messages"
    body = {"model": "m", "stream": True, key: [turn]}
    async with (
        LLMServer() as server,
        aiohttp.ClientSession() as http,
        http.post(server.url + PATHS[fmt], json=body) as resp,
    ):
        assert resp.status == 200
        await resp.read()
    [request] = server.requests
    assert request.messages == [turn]
    assert request.last_role == "user"


@pytest.mark.asyncio
async def test_a_status_fault_with_headers_reaches_the_client_error() -> None:
    """A 529 with the provider's shape: rafrx's Anthropic client raises an
    ``HTTPStatusError`` with the status, the message and the server's request id."""
    async with LLMServer() as server:
        server.enqueue(Fault.status(529, headers={"request-id": "req_pinned"}))
        async with AnthropicClient(server.url, model="m") as client:
            with pytest.raises(HTTPStatusError) as failed:
                await ask(client, "hi")
    assert failed.value.status == 529
    assert "Overloaded" in str(failed.value)
    assert failed.value.request_id == "req_pinned"


def test_a_request_the_server_does_not_serve_is_recorded_with_its_answer_shape() -> None:
    """Sync code posting without ``"stream": true`` gets the 400 in OpenAI's shape saying
    why; the request is recorded and takes nothing from the queue."""
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="kept"))
        request = urllib.request.Request(
            server.url + PATHS["openai-chat"], data=b'{"model": "m"}', method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        error = json.loads(refused.value.read())["error"]
        assert refused.value.code == 400
        assert "stream" in error["message"]
        assert server.queued == 1
        assert server.requests[0].json == {"model": "m"}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.stall(30), ConnectTimeout),
        (Fault.stall(30, after_bytes=300), IdleTimeout),
        (Fault.huge_line(size=20 * 1024 * 1024), LimitExceeded),
        (Fault.wrong_content_type(), ContentTypeError),
    ],
    ids=["stall-before-headers", "stall-mid-body", "huge-line", "wrong-content-type"],
)
async def test_each_fault_reaches_the_agent_as_its_typed_error_and_is_cleaned_up(
    fault: Fault, error: type[Exception]
) -> None:
    """The agent's client, with short timeouts, sees each fault as its own error type
    within a fraction of the stall, and the server has no connection left after it."""
    fast = Timeouts(connect=2, first_byte=0.2, idle=0.2)
    async with LLMServer() as server:
        server.enqueue(fault)
        async with AnthropicClient(server.url, model="m", timeouts=fast) as client:
            with pytest.raises(error):
                await ask(client, "hi")
        await server.wait_connections_closed(timeout=2)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", samples())
async def test_the_shipped_samples_replay_through_the_server_to_the_agents_client(
    name: str,
) -> None:
    """Each sample recording, served paced by ``Replay``, reaches the client of its
    format as the scripted turn: text and the two tool calls."""
    fmt = load_sse(sample(name)).dialect
    async with LLMServer() as server:
        server.enqueue(Replay(sample(name), pacing=True))
        async with CLIENTS[fmt](server.url, model="m") as client:
            response = await ask(client, "hi")
    assert response.text.startswith("Let me check the weather in Paris")
    assert [call.name for call in response.tool_calls] == ["get_weather", "write_file"]


def test_waiting_from_another_loop_for_what_already_happened_returns_at_once() -> None:
    """``asyncio.run(server.wait_requests(1))`` on a server in a thread, once the request
    came, returns (no wait needed, so no wake-up from the server's loop either)."""
    with LLMServer.in_thread() as server:
        request = urllib.request.Request(
            server.url + PATHS["anthropic"], data=b'{"stream": true}', method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            answer.read()
        asyncio.run(server.wait_requests(1, timeout=1))
        assert server.request_count == 1
