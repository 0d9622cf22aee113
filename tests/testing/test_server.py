"""LLMServer over real HTTP: routing, queue/script/default, recording, faults, counters.

The SSE bodies are read here with a tiny independent parser (LF framing, as
the server writes), not with rafrx's own decoder.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any
from unittest.mock import ANY

import aiohttp
import pytest
import pytest_asyncio

from rafrx.response import FinishReason, Usage
from rafrx.testing import (
    FAULT_REPLY,
    Fault,
    LLMServer,
    RecordedRequest,
    Replay,
    Reply,
    ToolCallSpec,
    render,
    render_events,
)

CHAT, MESSAGES, RESPONSES = "/v1/chat/completions", "/v1/messages", "/v1/responses"


def parse_events(body: bytes) -> list[tuple[str | None, Any]]:
    """(event name, parsed JSON data or the raw string) per LF-framed event."""
    out: list[tuple[str | None, Any]] = []
    for block in body.decode().split("\n\n"):
        if not block:
            continue
        name, data = None, []
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        text = "\n".join(data)
        out.append((name, text if text == "[DONE]" else json.loads(text)))
    return out


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(
    http: aiohttp.ClientSession,
    server: LLMServer,
    path: str,
    body: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Mapping[str, str], bytes]:
    body = {"stream": True, **(body or {})}  # the server only streams
    async with http.post(server.url + path, json=body, headers=headers) as resp:
        return resp.status, resp.headers, await resp.read()


REPLY = Reply(
    text="Hello, world!",
    reasoning="Think first.",
    tool_calls=[
        ToolCallSpec("weather", {"city": "Paris"}, id="call_a"),
        ToolCallSpec("time", {"tz": "CET"}, id="call_b"),
    ],
    usage=Usage(prompt_tokens=11, completion_tokens=7, total_tokens=18, reasoning_tokens=3),
    chunk_size=4,
)


# ---------------------------------------------------------------- wire formats


@pytest.mark.asyncio
async def test_openai_chat_reply_is_well_formed_chunks(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    llm_server.enqueue(REPLY)
    request = {"model": "m1", "stream_options": {"include_usage": True}}
    status, headers, body = await post(http, llm_server, CHAT, request)
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = parse_events(body)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["model"] for c in chunks} == {"m1"}
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "Hello, world!"
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "Think first."
    assert max(len(d.get("content") or "") for d in deltas) == 4
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        for call in d.get("tool_calls", ()):
            slot = calls.setdefault(call["index"], {"id": "", "name": "", "args": ""})
            slot["id"] += call.get("id", "")
            slot["name"] += call.get("function", {}).get("name", "")
            slot["args"] += call.get("function", {}).get("arguments", "")
    assert calls == {
        0: {"id": "call_a", "name": "weather", "args": '{"city":"Paris"}'},
        1: {"id": "call_b", "name": "time", "args": '{"tz":"CET"}'},
    }
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert [f for f in finishes if f] == ["tool_calls"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "completion_tokens_details": {"reasoning_tokens": 3},
    }


@pytest.mark.asyncio
async def test_openai_chat_sends_usage_only_when_asked(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    _, _, body = await post(http, llm_server, CHAT, {"model": "m"})
    assert b'"usage"' not in body
    _, _, body = await post(http, llm_server, CHAT, {"stream_options": {"include_usage": True}})
    assert b'"usage":{"prompt_tokens"' in body


@pytest.mark.asyncio
async def test_anthropic_reply_is_well_formed_events(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    llm_server.enqueue(REPLY)
    status, _, body = await post(http, llm_server, MESSAGES, {"model": "claude-x"})
    assert status == 200
    events = parse_events(body)
    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]  # (as Anthropic's)
    assert names[-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["model"] == "claude-x"
    assert events[0][1]["message"]["usage"]["input_tokens"] == 11
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "text", "tool_use", "tool_use"]
    assert [(b.get("id"), b.get("name")) for b in starts[2:]] == [
        ("call_a", "weather"),
        ("call_b", "time"),
    ]
    by_index: dict[int, str] = {}
    signatures = 0
    for name, data in events:
        if name != "content_block_delta":
            continue
        delta = data["delta"]
        if delta["type"] == "signature_delta":
            signatures += 1
            continue
        piece = delta.get("text") or delta.get("thinking") or delta.get("partial_json") or ""
        by_index[data["index"]] = by_index.get(data["index"], "") + piece
    assert by_index == {
        0: "Think first.",
        1: "Hello, world!",
        2: '{"city":"Paris"}',
        3: '{"tz":"CET"}',
    }
    assert signatures == 1
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert stops == [0, 1, 2, 3]
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {"output_tokens": 7}


@pytest.mark.asyncio
async def test_responses_reply_is_well_formed_events(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    llm_server.enqueue(REPLY)
    status, _, body = await post(http, llm_server, RESPONSES, {"model": "gpt-x"})
    assert status == 200
    events = parse_events(body)
    assert all(name == data["type"] for name, data in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    summary = "".join(d["delta"] for n, d in events if n == "response.reasoning_summary_text.delta")
    assert (text, summary) == ("Hello, world!", "Think first.")
    added = [d["item"] for n, d in events if n == "response.output_item.added"]
    assert [i["type"] for i in added] == ["reasoning", "message", "function_call", "function_call"]
    args: dict[str, str] = {}
    for name, data in events:
        if name == "response.function_call_arguments.delta":
            args[data["item_id"]] = args.get(data["item_id"], "") + data["delta"]
    calls = [(i["call_id"], i["name"], args[i["id"]]) for i in added[2:]]
    assert calls == [("call_a", "weather", '{"city":"Paris"}'), ("call_b", "time", '{"tz":"CET"}')]
    final = events[-1][1]["response"]
    assert final["status"] == "completed"
    assert final["model"] == "gpt-x"
    assert [o["type"] for o in final["output"]] == [i["type"] for i in added]
    assert final["usage"] == {
        "input_tokens": 11,
        "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 18,
    }


@pytest.mark.parametrize(
    ("fmt", "finish", "wire"),
    [
        ("openai-chat", FinishReason.LENGTH, b'"finish_reason":"length"'),
        ("openai-chat", FinishReason.CONTENT_FILTER, b'"finish_reason":"content_filter"'),
        ("anthropic", FinishReason.LENGTH, b'"stop_reason":"max_tokens"'),
        ("anthropic", FinishReason.STOP, b'"stop_reason":"end_turn"'),
        ("anthropic", FinishReason.CONTENT_FILTER, b'"stop_reason":"refusal"'),
        ("openai-responses", FinishReason.LENGTH, b'"reason":"max_output_tokens"'),
        ("openai-responses", FinishReason.ERROR, b"event: response.failed"),
        ("openai-chat", FinishReason.ERROR, b'"finish_reason":"error"'),
        ("openai-chat", FinishReason.OTHER, b'"finish_reason":"other"'),
        ("anthropic", FinishReason.OTHER, b'"stop_reason":"other"'),
    ],
)
def test_finish_reasons_use_each_providers_spelling(fmt: Any, finish: Any, wire: bytes) -> None:
    assert wire in render(Reply(text="x", finish=finish), fmt)


def test_anthropic_error_finish_ends_with_an_error_event() -> None:
    events = render_events(Reply(text="partial", finish=FinishReason.ERROR), "anthropic")
    assert events[-2].startswith(b"event: content_block_stop\n")
    error = json.loads(events[-1].removeprefix(b"event: error\ndata: "))
    assert error == {"type": "error", "error": {"type": "api_error", "message": ANY}}
    assert not any(b"message_delta" in e or b"message_stop" in e for e in events)


@pytest.mark.parametrize(
    ("reply", "content"),
    [
        (Reply(tool_calls=[ToolCallSpec("f")]), None),
        (Reply(reasoning="r", tool_calls=[ToolCallSpec("f")]), None),
        (Reply(text="t", tool_calls=[ToolCallSpec("f")]), ""),
        (Reply(text="t"), ""),
        (Reply(), ""),
    ],
)
def test_chat_first_delta_content_is_null_only_for_tool_calls_without_text(
    reply: Reply, content: str | None
) -> None:
    first = json.loads(render_events(reply, "openai-chat")[0].removeprefix(b"data: "))
    assert first["choices"][0]["delta"] == {
        "role": "assistant",
        "content": content,
        "refusal": None,
    }


def test_reply_accepts_provider_spellings_of_finish() -> None:
    assert Reply(finish="end_turn").finish_reason is FinishReason.STOP
    assert Reply(finish="length").finish_reason is FinishReason.LENGTH
    assert Reply(tool_calls=[ToolCallSpec("f")]).finish_reason is FinishReason.TOOL_CALLS
    with pytest.raises(ValueError, match="chunk_size"):
        Reply(chunk_size=0)


def test_estimated_usage_grows_with_the_prompt_and_the_reply() -> None:
    from rafrx.testing import estimate_usage

    short = estimate_usage(Reply(text="hi"), {"messages": [{"role": "user", "content": "a"}]})
    long = estimate_usage(
        Reply(text="hi" * 100, reasoning="r" * 40),
        {"messages": [{"role": "user", "content": "a" * 400}]},
    )
    assert short.total_tokens == short.prompt_tokens + short.completion_tokens
    assert long.prompt_tokens > short.prompt_tokens + 90
    assert long.completion_tokens == 50 + 10
    assert (short.reasoning_tokens, long.reasoning_tokens) == (None, 10)


def test_string_arguments_go_out_verbatim() -> None:
    body = render(Reply(tool_calls=[ToolCallSpec("f", '{"broken": ')], chunk_size=100), "anthropic")
    assert b'"partial_json":"{\\"broken\\": "' in body


# ---------------------------------------------------------------- behaviour


@pytest.mark.asyncio
async def test_queue_is_fifo_then_script_then_default(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    llm_server.default = Reply(text="default")
    llm_server.enqueue(Reply(text="first"), Reply(text="second"))
    assert llm_server.queued == 2
    bodies = [(await post(http, llm_server, CHAT))[2] for _ in range(2)]
    assert b'"first"' in bodies[0]
    assert b'"second"' in bodies[1]
    assert llm_server.queued == 0
    assert b'"default"' in (await post(http, llm_server, CHAT))[2]

    @llm_server.script
    def turn(request: RecordedRequest) -> Reply:
        return Reply(text=f"you said {request.messages[-1]['content']}", chunk_size=100)

    llm_server.enqueue(Reply(text="queued wins", chunk_size=100))
    body = {"messages": [{"role": "user", "content": "ping"}]}
    assert b'"queued wins"' in (await post(http, llm_server, CHAT, body))[2]
    assert b'"you said ping"' in (await post(http, llm_server, CHAT, body))[2]
    llm_server.script(None)
    assert b'"default"' in (await post(http, llm_server, CHAT, body))[2]


@pytest.mark.asyncio
async def test_async_script_sees_tool_results_in_every_format(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    seen: list[tuple[str | None, str | None, tuple[str, ...]]] = []

    async def turn(request: RecordedRequest) -> Reply:
        await asyncio.sleep(0)
        seen.append((request.wire_format, request.last_role, request.tool_names))
        if request.last_role == "tool":
            return Reply(text="done")
        return Reply(tool_calls=[ToolCallSpec("f", {})])

    llm_server.script(turn)
    tools_openai = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    chat_tool = {
        "messages": [{"role": "user", "content": "go"}, {"role": "tool", "content": "ok"}],
        "tools": tools_openai,
    }
    chat_user = {"messages": [{"role": "user", "content": "go"}], "tools": tools_openai}
    anthropic_tool = {
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]},
        ],
        "tools": [{"name": "f", "input_schema": {}}],
    }
    responses_tool = {
        "input": [{"type": "function_call_output", "call_id": "x", "output": "ok"}],
        "tools": [{"type": "function", "name": "f"}],
    }
    responses_user = {"input": "hello"}
    assert b"tool_calls" in (await post(http, llm_server, CHAT, chat_user))[2]
    assert b'"done"' in (await post(http, llm_server, CHAT, chat_tool))[2]
    assert b'"done"' in (await post(http, llm_server, MESSAGES, anthropic_tool))[2]
    assert b'"done"' in (await post(http, llm_server, RESPONSES, responses_tool))[2]
    assert b"function_call" in (await post(http, llm_server, RESPONSES, responses_user))[2]
    assert seen == [
        ("openai-chat", "user", ("f",)),
        ("openai-chat", "tool", ("f",)),
        ("anthropic", "tool", ("f",)),
        ("openai-responses", "tool", ("f",)),
        ("openai-responses", "user", ()),
    ]


@pytest.mark.asyncio
async def test_a_failing_script_answers_500_naming_the_error(
    llm_server: LLMServer, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(request: RecordedRequest) -> Reply:
        raise KeyError("nope")

    llm_server.script(broken)
    status, _, body = await post(http, llm_server, CHAT)
    assert status == 500
    assert "script raised KeyError" in json.loads(body)["error"]["message"]
    assert "LLMServer script failed" in caplog.text


@pytest.mark.asyncio
async def test_requests_are_recorded_with_secrets_redacted(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    await post(
        http,
        llm_server,
        MESSAGES,
        {"model": "claude", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": "sk-ant-SECRET", "anthropic-version": "2023-06-01"},
    )
    await post(http, llm_server, CHAT, headers={"Authorization": "Bearer sk-SECRET"})
    first, second = llm_server.requests
    assert (first.path, first.method, first.model) == (MESSAGES, "POST", "claude")
    assert first.json["messages"] == [{"role": "user", "content": "hi"}]
    assert first.headers["X-API-KEY"] == "***"
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert second.headers["authorization"] == "Bearer ***"
    assert "SECRET" not in repr(llm_server.requests)


@pytest.mark.asyncio
async def test_unknown_paths_get_404_and_are_recorded(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    status, _, body = await post(http, llm_server, "/v2/nothing")
    assert status == 404
    assert "no endpoint POST /v2/nothing" in body.decode()
    async with http.get(llm_server.url + CHAT) as resp:
        assert resp.status == 405  # a known endpoint, the wrong method
    assert [r.path for r in llm_server.requests] == ["/v2/nothing", CHAT]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "request_body"),
    [
        (CHAT, {}),
        (MESSAGES, {"stream": False}),
        (RESPONSES, {"stream": "true"}),
    ],
)
async def test_requests_that_do_not_stream_get_400_in_the_providers_shape(
    llm_server: LLMServer, http: aiohttp.ClientSession, path: str, request_body: Any
) -> None:
    llm_server.enqueue(Reply(text="kept for the next request"))
    async with http.post(llm_server.url + path, data=json.dumps(request_body).encode()) as resp:
        status, headers, body = resp.status, resp.headers, await resp.json()
    assert status == 400
    assert headers["Content-Type"] == "application/json"
    if path == MESSAGES:
        assert headers["request-id"].startswith("req_")
        assert body["error"]["type"] == "invalid_request_error"
    else:
        assert headers["x-request-id"].startswith("req_")
        assert (body["error"]["type"], body["error"]["code"]) == ("invalid_request_error", None)
    assert '"stream": true' in body["error"]["message"]
    assert len(llm_server.requests) == 1  # recorded, but the queued reply is kept
    assert llm_server.queued == 1


@pytest.mark.asyncio
async def test_replay_serves_the_exact_bytes_in_chunks(
    llm_server: LLMServer, http: aiohttp.ClientSession, tmp_path: Any
) -> None:
    body = b"data: {}\n\n" * 50
    path = tmp_path / "x.sse"
    path.write_bytes(body)
    llm_server.enqueue(Replay(body, chunk_size=7), Replay(str(path)), Replay(path, pacing=True))
    for _ in range(3):
        status, headers, got = await post(http, llm_server, CHAT)
        assert (status, got) == (200, body)
        assert headers["Content-Type"] == "text/event-stream; charset=utf-8"


@pytest.mark.asyncio
async def test_paced_replay_sends_event_by_event(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    body = b"data: 1\n\ndata: 2\r\n\r\ndata: 3\n\n"
    llm_server.enqueue(Replay(body, pacing=True, delay=0.1))
    arrivals: list[tuple[float, bytes]] = []
    start = time.monotonic()
    async with http.post(llm_server.url + CHAT, json={"stream": True}) as resp:
        async for chunk in resp.content.iter_any():
            arrivals.append((time.monotonic() - start, chunk))
    assert b"".join(c for _, c in arrivals) == body
    assert arrivals[0][1] == b"data: 1\n\n"  # the first event went out alone
    assert len(arrivals) >= 2
    assert arrivals[-1][0] >= 0.2  # two pauses of 0.1 s


# ---------------------------------------------------------------- faults


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "shape"),
    [(CHAT, "openai"), (MESSAGES, "anthropic"), (RESPONSES, "openai")],
)
async def test_status_fault_sends_the_providers_error_json(
    llm_server: LLMServer, http: aiohttp.ClientSession, path: str, shape: str
) -> None:
    llm_server.enqueue(Fault.status(429, message="Slow down", retry_after=2))
    status, headers, body = await post(http, llm_server, path)
    assert status == 429
    assert headers["Retry-After"] == "2"
    assert headers["Content-Type"] == "application/json"
    data = json.loads(body)
    if shape == "anthropic":
        assert data == {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "Slow down"},
            "request_id": headers["request-id"],  # (as Anthropic's body names it)
        }
    else:
        assert data == {
            "error": {
                "message": "Slow down",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        }
    request_id = "request-id" if shape == "anthropic" else "x-request-id"
    assert headers[request_id].startswith("req_")


@pytest.mark.asyncio
async def test_status_fault_bodies(llm_server: LLMServer, http: aiohttp.ClientSession) -> None:
    llm_server.enqueue(
        Fault.status(503, body="upstream down", headers={"retry-after-ms": "250"}),
        Fault.status(500, body=""),
        Fault.status(400, body={"detail": "bad"}),
        Fault.status(502, body=b"\x00\x01"),
        Fault.status(404),
    )
    status, headers, body = await post(http, llm_server, CHAT)
    assert (status, body, headers["retry-after-ms"]) == (503, b"upstream down", "250")
    assert headers["Content-Type"].startswith("text/plain")
    assert (await post(http, llm_server, CHAT))[::2] == (500, b"")
    assert (await post(http, llm_server, CHAT))[::2] == (400, b'{"detail": "bad"}')
    assert (await post(http, llm_server, CHAT))[::2] == (502, b"\x00\x01")
    status, _, body = await post(http, llm_server, CHAT)
    assert json.loads(body)["error"]["message"] == "Not Found"


@pytest.mark.asyncio
@pytest.mark.parametrize("reset", [False, True])
async def test_drop_after_cuts_the_connection_after_n_bytes(
    llm_server: LLMServer, http: aiohttp.ClientSession, reset: bool
) -> None:
    body = b"data: " + b"x" * 500 + b"\n\n"
    llm_server.enqueue(Fault.drop_after(123, body=body, reset=reset))
    received = bytearray()

    async def read() -> None:
        async with http.post(llm_server.url + CHAT, json={"stream": True}) as resp:
            assert resp.status == 200
            async for chunk in resp.content.iter_any():
                received.extend(chunk)

    with pytest.raises(aiohttp.ClientPayloadError):
        await read()
    if reset:  # a reset may discard what was still in flight
        assert body[:123].startswith(received)
    else:
        assert received == body[:123]
    await llm_server.wait_connections_closed(timeout=2)


@pytest.mark.asyncio
async def test_stall_before_headers_delays_the_response(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    llm_server.enqueue(Fault.stall(0.3))
    start = time.monotonic()
    status, _, body = await post(http, llm_server, CHAT)
    assert time.monotonic() - start >= 0.3
    assert status == 200
    assert b"quick brown fox" not in body  # split into 8-character deltas
    assert b"data: [DONE]" in body


@pytest.mark.asyncio
async def test_stall_after_bytes_pauses_mid_body(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    body = b"data: 1\n\ndata: 2\n\n"
    llm_server.enqueue(Fault.stall(0.3, after_bytes=9, body=body))
    arrivals: list[tuple[float, bytes]] = []
    start = time.monotonic()
    async with http.post(llm_server.url + CHAT, json={"stream": True}) as resp:
        async for chunk in resp.content.iter_any():
            arrivals.append((time.monotonic() - start, chunk))
    assert [c for _, c in arrivals] == [b"data: 1\n\n", b"data: 2\n\n"]
    assert arrivals[1][0] >= 0.3


@pytest.mark.asyncio
async def test_closing_the_server_ends_a_stall_at_once(no_task_leak: None) -> None:
    async with aiohttp.ClientSession() as http:
        server = await LLMServer().start()
        server.enqueue(Fault.stall(30, after_bytes=0))
        async with http.post(server.url + CHAT, json={"stream": True}) as resp:
            start = time.monotonic()
            await server.close()
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        assert time.monotonic() - start < 2
        assert server.open_connections == 0


@pytest.mark.asyncio
async def test_garbage_is_inserted_after_the_first_event(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    body = b"data: 1\n\ndata: 2\n\n"
    llm_server.enqueue(
        Fault.garbage(size=40, seed=7, body=body),
        Fault.garbage(b"\xff\xfe", at=7, framed=False, body=body),
    )
    _, _, got = await post(http, llm_server, CHAT)
    assert got.startswith(b"data: 1\n\ndata: ")
    assert got.endswith(b"\n\ndata: 2\n\n")
    junk = got[len(b"data: 1\n\ndata: ") : -len(b"\n\ndata: 2\n\n")]
    assert len(junk) == 40
    assert b"\n" not in junk
    assert b"\r" not in junk
    with pytest.raises(UnicodeDecodeError):
        junk.decode()
    _, _, got = await post(http, llm_server, CHAT)
    assert got == b"data: 1\xff\xfe\n\ndata: 2\n\n"


@pytest.mark.asyncio
async def test_huge_line_streams_without_a_newline(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    size = 3 * 1024 * 1024
    llm_server.enqueue(Fault.huge_line(size, body=b"data: first\n\ndata: second\n\n"))
    status, _, got = await post(http, llm_server, CHAT)
    assert status == 200
    assert got[:20] == b"data: first\n\ndata: x"
    assert len(got) == len(b"data: first\n\ndata: ") + size
    assert got.count(b"\n") == 2


@pytest.mark.asyncio
async def test_wrong_content_type(llm_server: LLMServer, http: aiohttp.ClientSession) -> None:
    llm_server.enqueue(Fault.wrong_content_type(), Fault.wrong_content_type("application/json"))
    status, headers, body = await post(http, llm_server, CHAT)
    assert (status, headers["Content-Type"]) == (200, "text/html; charset=utf-8")
    assert b"502 Bad Gateway" in body
    assert (await post(http, llm_server, CHAT))[1]["Content-Type"] == "application/json"


@pytest.mark.asyncio
async def test_default_fault_body_is_rendered_for_the_endpoint(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    llm_server.enqueue(Fault.stall(0.01, after_bytes=0))
    _, _, body = await post(http, llm_server, MESSAGES)
    text = "".join(d["delta"]["text"] for n, d in parse_events(body) if n == "content_block_delta")
    assert text == FAULT_REPLY.text


# ---------------------------------------------------------------- connections


@pytest.mark.asyncio
async def test_connection_counters_and_waiting_for_them(llm_server: LLMServer) -> None:
    assert llm_server.open_connections == 0
    http = aiohttp.ClientSession()
    try:
        await post(http, llm_server, CHAT)
        await post(http, llm_server, CHAT)  # keep-alive: the same connection
        assert (llm_server.connections_opened, llm_server.open_connections) == (1, 1)
        with pytest.raises(TimeoutError, match="1 connection"):
            await llm_server.wait_connections_closed(timeout=0.1)
    finally:
        await http.close()
    await llm_server.wait_connections_closed(timeout=2)
    assert (llm_server.connections_opened, llm_server.connections_closed) == (1, 1)
    await llm_server.wait_requests(2, timeout=0.1)
    with pytest.raises(TimeoutError):
        await llm_server.wait_requests(3, timeout=0.05)


@pytest.mark.asyncio
async def test_lifecycle_errors_and_repr(no_task_leak: None) -> None:
    server = LLMServer()
    assert not server.started
    assert "not started" in repr(server)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.url
    async with server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server.port > 0
        assert server.url in repr(server)
        with pytest.raises(RuntimeError, match="already started"):
            await server.start()
    await server.close()  # twice is fine
    assert not server.started


def test_in_thread_serves_sync_code() -> None:
    thread = LLMServer.in_thread(default=Reply(text="threaded"))
    with thread as server:
        server.enqueue(Reply(text="queued"))
        bodies = []
        for _ in range(2):
            request = urllib.request.Request(
                server.url + MESSAGES, data=b'{"stream": true}', method="POST"
            )
            with urllib.request.urlopen(request, timeout=5) as resp:
                bodies.append(resp.read())
        thread.run(server.wait_connections_closed(timeout=5), timeout=10)
        assert len(server.requests) == 2
    assert b'"queued"' in bodies[0]
    assert b'"threaded"' in bodies[1]
    assert not server.started
    with pytest.raises(RuntimeError, match="not running"):
        _ = thread.loop


@pytest.mark.parametrize("attempt", range(5))  # (a race: tried a few times)
def test_in_thread_stop_from_many_threads_at_once_stops_it_once(attempt: int) -> None:
    thread = LLMServer.in_thread()
    server = thread.start()
    go = threading.Barrier(4)
    errors: list[BaseException] = []

    def stop() -> None:
        go.wait()
        try:
            thread.stop()
        except BaseException as exc:  # the failure this test is about
            errors.append(exc)

    stoppers = [threading.Thread(target=stop) for _ in range(4)]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join(10)
    assert errors == []
    assert not server.started
    with pytest.raises(RuntimeError, match="not running"):
        _ = thread.loop


def test_in_thread_reports_a_port_in_use() -> None:
    with LLMServer.in_thread() as server, pytest.raises(OSError, match="address already in use"):
        LLMServer.in_thread(port=server.port).start()


@pytest.mark.asyncio
async def test_the_query_is_recorded_with_key_like_values_redacted(
    llm_server: LLMServer, http: aiohttp.ClientSession
) -> None:
    """Azure-style endpoints carry ``api-version`` (and sometimes a key) in the query."""
    path = "/v1/chat/completions?api-version=2024-10-21&key=s3cr3t-value"
    status, _, _ = await post(http, llm_server, path, {"messages": []})
    assert status == 200
    [request] = llm_server.requests
    assert request.path == "/v1/chat/completions"
    assert dict(request.query) == {"api-version": "2024-10-21", "key": "***"}
    assert "s3cr3t" not in repr(request)
