"""rafrx.testing used as a user would, held to its docstrings.

Complements test_server.py, test_kit_adversarial.py and test_sdk_fidelity.py
(their helpers are reused, their cases not repeated): exact fault byte
offsets, queue dealing under concurrency, reused replies, usage arithmetic as
the official SDKs see it, zero-call ``tool_calls`` finishes, error types per
provider, lifecycle (restart, IPv6, close mid-stream) and the thread wrapper
driven by plain ``http.client``.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pydantic
import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from rafrx.errors import StreamInterrupted, TransportError
from rafrx.response import FinishReason
from rafrx.testing import (
    Fault,
    LLMServer,
    RecordedRequest,
    Replay,
    Reply,
    ToolCallSpec,
    WireFormat,
    error_body,
    estimate_usage,
    render,
    render_events,
)
from tests.testing.test_kit_adversarial import CLIENTS, FORMATS, PATHS, STREAM, ask, parse

USER = [{"role": "user", "content": "Weather in Paris?"}]

#: A deterministic body (no generated ids) for byte-exact fault checks.
BODY = b"".join(f'data: {{"n": {i}, "pad": "{"p" * 20}"}}\n\n'.encode() for i in range(12))


async def _post_raw(
    url: str, body: Any = STREAM, method: str = "POST"
) -> tuple[int, Any, bytes, BaseException | None]:
    """(status, headers, body bytes received, error while reading the body)."""
    received = bytearray()
    async with aiohttp.ClientSession() as session:
        kwargs = {"json": body} if body is not None else {}
        async with session.request(method, url, **kwargs) as resp:
            try:
                async for piece in resp.content.iter_any():
                    received += piece
            except aiohttp.ClientPayloadError as exc:
                return resp.status, resp.headers, bytes(received), exc
            return resp.status, resp.headers, bytes(received), None


# ---------------------------------------------------------------- SDK fixtures


@pytest.fixture(scope="module")
def thread_server() -> Iterator[LLMServer]:
    with LLMServer.in_thread() as server:
        yield server


@pytest.fixture(scope="module")
def warm_sdks(thread_server: LLMServer) -> None:
    """The SDKs build their pydantic models lazily (about a second on first use): do it
    once here so no test pays for it."""
    thread_server.enqueue(Reply(text="w"), Reply(text="w"))
    with openai.OpenAI(base_url=thread_server.url + "/v1", api_key="k", max_retries=0) as client:
        with client.responses.stream(model="m", input="x") as stream:
            list(stream)
            stream.get_final_response()
        with client.chat.completions.stream(model="m", messages=USER) as chat:
            list(chat)
    thread_server.reset()


@pytest.fixture
def tserver(thread_server: LLMServer, warm_sdks: None) -> Iterator[LLMServer]:
    thread_server.reset()
    yield thread_server
    thread_server.reset()


@pytest.fixture
def oai(tserver: LLMServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=tserver.url + "/v1", api_key="sk-t", max_retries=0, http_client=httpx2.Client()
    ) as client:
        yield client


@pytest.fixture
def ant(tserver: LLMServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=tserver.url, api_key="sk-ant-t", max_retries=0, http_client=httpx2.Client()
    ) as client:
        yield client


# ================================================================ lifecycle


def _ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 loopback")
@pytest.mark.asyncio
async def test_url_of_a_server_on_the_ipv6_loopback_is_usable() -> None:
    async with LLMServer(host="::1") as server:
        status, _, body, error = await _post_raw(server.url + PATHS["anthropic"])
    assert (status, error) == (200, None)
    assert b"message_stop" in body


@pytest.mark.asyncio
async def test_a_port_zero_server_restarted_after_close_picks_a_free_port() -> None:
    server = LLMServer()  # port=0: "picks a free one"
    async with server:
        first = server.port
    squatter = socket.socket()
    try:
        squatter.bind(("127.0.0.1", first))
        squatter.listen()
        async with server:  # the documented port 0 again
            status, _, body, _ = await _post_raw(server.url + PATHS["openai-chat"])
            assert server.port != first
        assert status == 200
        assert body.endswith(b"data: [DONE]\n\n")
    finally:
        squatter.close()


@pytest.mark.asyncio
async def test_two_servers_in_a_row_each_serve_and_release_their_port(no_task_leak: None) -> None:
    ports = []
    for text in ("one", "two"):
        async with LLMServer(default=Reply(text=text)) as server:
            _, _, body, _ = await _post_raw(server.url + PATHS["openai-responses"])
            ports.append(server.port)
            assert f'"text":"{text}"'.encode() in body
            await server.wait_connections_closed(timeout=2)
        with pytest.raises(RuntimeError, match="not started"):
            _ = server.url
    for port in ports:  # released: bindable again at once
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_close_mid_stream_gives_the_client_a_typed_error_and_leaves_nothing_behind(
    fmt: WireFormat, no_task_leak: None, loop_errors: list[dict[str, Any]]
) -> None:
    server = LLMServer()
    await server.start()
    server.enqueue(Reply(text="z" * 400, chunk_size=1, delay=0.01))
    async with CLIENTS[fmt](server.url) as client:
        answer = asyncio.ensure_future(ask(client))
        await server.wait_requests(1)
        await asyncio.sleep(0.1)
        started = time.monotonic()
        await server.close()
        assert time.monotonic() - started < 1.0
        with pytest.raises(StreamInterrupted) as caught:
            await answer
    assert caught.value.partial is not None  # type: ignore[attr-defined]
    assert caught.value.partial.text.startswith("z")  # type: ignore[attr-defined]
    assert server.open_connections == 0
    assert loop_errors == []


@pytest.mark.asyncio
async def test_close_while_an_async_script_is_thinking_is_a_transport_error(
    no_task_leak: None, loop_errors: list[dict[str, Any]]
) -> None:
    server = LLMServer()
    await server.start()

    @server.script
    async def slow(request: RecordedRequest) -> Reply:
        await asyncio.sleep(30)
        return Reply(text="never")

    async with CLIENTS["anthropic"](server.url) as client:
        answer = asyncio.ensure_future(ask(client))
        await server.wait_requests(1)
        started = time.monotonic()
        await server.close()
        assert time.monotonic() - started < 2.0
        with pytest.raises(TransportError):
            await answer
    assert loop_errors == []


def test_server_thread_serves_plain_http_client_on_one_keep_alive_connection() -> None:
    thread = LLMServer.in_thread(default=Reply(text="sync"))
    server = thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        bodies = []
        for path in PATHS.values():
            conn.request(
                "POST", path, body=b'{"stream": true}', headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.getheader("Content-Type", "").startswith("text/event-stream")
            bodies.append(resp.read())
        conn.close()
        thread.run(server.wait_connections_closed(timeout=2), timeout=5)
        assert (server.connections_opened, server.connections_closed) == (1, 1)
        assert [r.wire_format for r in server.requests] == list(FORMATS)
        assert [parse(b, f).text for b, f in zip(bodies, FORMATS, strict=True)] == ["sync"] * 3
    finally:
        thread.stop()
    late = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="not running"):
        thread.run(late)
    late.close()


# ================================================================ routing and errors


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_wrong_method_on_a_known_endpoint_answers_like_the_provider(
    llm_server: LLMServer, fmt: WireFormat
) -> None:
    status, headers, body, _ = await _post_raw(llm_server.url + PATHS[fmt], body=None, method="GET")
    assert status in (404, 405)
    payload = json.loads(body)
    assert "GET" in json.dumps(payload)
    if fmt == "anthropic":
        assert headers["request-id"].startswith("req_")
        assert payload["type"] == "error"
        assert set(payload["error"]) == {"type", "message"}
    else:
        assert headers["x-request-id"].startswith("req_")
        assert set(payload["error"]) == {"message", "type", "param", "code"}


@pytest.mark.asyncio
async def test_malformed_json_is_recorded_as_none_and_takes_nothing_from_the_queue(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Reply(text="kept"))
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            llm_server.url + PATHS["anthropic"],
            data=b'{"stream": true, "messages": [',
            headers={"Content-Type": "application/json", "x-api-key": "sk-ant-SECRET"},
        ) as resp,
    ):
        status, payload = resp.status, await resp.json()
        request_id = resp.headers.get("request-id", "")
    assert status == 400
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"
    assert request_id.startswith("req_")
    [recorded] = llm_server.requests
    assert (recorded.json, dict(recorded.body), recorded.messages) == (None, {}, [])
    assert recorded.headers["x-api-key"] == "***"
    assert llm_server.queued == 1


@pytest.mark.parametrize(
    ("status", "kind", "model"),
    [
        (402, "billing_error", anthropic.types.shared.BillingErrorObject),
        (504, "timeout_error", anthropic.types.shared.GatewayTimeoutErrorObject),
    ],
)
def test_anthropic_error_type_is_the_providers_for_402_and_504(
    tserver: LLMServer, ant: anthropic.Anthropic, status: int, kind: str, model: Any
) -> None:
    assert error_body("anthropic", status, "x")["error"]["type"] == kind
    tserver.enqueue(Fault.status(status, message="boom"))
    with pytest.raises(anthropic.APIStatusError) as info:
        ant.messages.create(model="c", max_tokens=9, messages=USER, stream=True)
    assert info.value.status_code == status
    model.model_validate(info.value.body["error"])  # type: ignore[index]


@pytest.mark.asyncio
async def test_an_empty_queue_answers_with_the_default_even_when_it_is_a_fault(
    no_task_leak: None,
) -> None:
    async with LLMServer(default=Fault.status(503, message="down")) as server:
        server.enqueue(Reply(text="first"))
        got = [await _post_raw(server.url + PATHS["openai-chat"]) for _ in range(3)]
    assert [g[0] for g in got] == [200, 503, 503]
    assert json.loads(got[2][2])["error"]["message"] == "down"
    assert got[2][1]["x-request-id"].startswith("req_")


@pytest.mark.asyncio
async def test_a_queued_non_response_fails_clearly_not_with_a_broken_200(
    llm_server: LLMServer,
) -> None:
    def answer(request: RecordedRequest) -> Reply:
        return Reply(text="from a callable")

    try:
        llm_server.enqueue(answer)  # type: ignore[arg-type]
    except TypeError:
        return  # refused up front: fine
    status, _, body, error = await _post_raw(llm_server.url + PATHS["openai-chat"])
    assert error is None
    assert status == 500
    assert b"function" in body or b"Reply" in body


# ================================================================ scripting semantics


@pytest.mark.asyncio
async def test_concurrent_requests_get_queued_answers_in_the_order_they_are_recorded(
    llm_server: LLMServer,
) -> None:
    n = 24
    llm_server.enqueue(*(Reply(text=f"answer {i}", chunk_size=100) for i in range(n)))
    clients = {fmt: CLIENTS[fmt](llm_server.url) for fmt in FORMATS}
    try:
        got = await asyncio.gather(
            *(ask(clients[FORMATS[i % 3]], f"question {i}") for i in range(n))
        )
    finally:
        for client in clients.values():
            await client.aclose()
    answered = {f"question {i}": response.text for i, response in enumerate(got)}
    asked = []
    for request in llm_server.requests:
        said = request.messages[-1]["content"]
        asked.append(said if isinstance(said, str) else said[0]["text"])
    assert sorted(asked) == sorted(answered)
    assert [answered[q] for q in asked] == [f"answer {i}" for i in range(n)]
    assert llm_server.queued == 0


@pytest.mark.asyncio
async def test_the_script_gets_the_recorded_request_itself(llm_server: LLMServer) -> None:
    seen: list[RecordedRequest] = []

    @llm_server.script
    def turn(request: RecordedRequest) -> Reply:
        seen.append(request)
        return Reply(text=f"{request.model}/{request.last_role}/{len(request.messages)}")

    async with CLIENTS["openai-responses"](
        llm_server.url, api_key="sk-proj-HIDDEN", model="gpt-x"
    ) as client:
        response = await ask(client, "hello")
    assert response.text == "gpt-x/user/1"
    assert [id(r) for r in seen] == [id(r) for r in llm_server.requests]
    assert seen[0].headers["Authorization"] == "Bearer ***"
    assert seen[0].wire_format == "openai-responses"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_reused_reply_gets_fresh_ids_and_echoes_each_requests_model(
    llm_server: LLMServer, fmt: WireFormat
) -> None:
    reply = Reply(text="same", tool_calls=[ToolCallSpec("f", {"a": 1}), ToolCallSpec("g")])
    llm_server.enqueue(reply, reply, reply)
    responses = []
    for model in ("model-a", "model-b", "model-c"):
        async with CLIENTS[fmt](llm_server.url, model=model) as client:
            responses.append(await ask(client))
    assert [r.model for r in responses] == ["model-a", "model-b", "model-c"]
    assert all(r.text == "same" for r in responses)
    assert len({r.id for r in responses}) == 3
    assert all(r.id for r in responses)
    call_ids = [c.id for r in responses for c in r.tool_calls]
    assert len(call_ids) == 6
    assert len(set(call_ids)) == 6
    assert [[c.name for c in r.tool_calls] for r in responses] == [["f", "g"]] * 3


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_megabyte_of_text_round_trips_through_each_client(
    llm_server: LLMServer, fmt: WireFormat
) -> None:
    text = ("ünïcødé 🌍 " * 100_000)[:1_000_000]
    llm_server.enqueue(Reply(text=text, chunk_size=50_000))
    async with CLIENTS[fmt](llm_server.url) as client:
        response = await ask(client)
    assert response.text == text
    assert response.finish_reason is FinishReason.STOP


@pytest.mark.parametrize("fmt", FORMATS)
def test_text_with_a_lone_surrogate_renders_as_json_escapes(fmt: WireFormat) -> None:
    reply = Reply(text="half an emoji: \ud83d!", tool_calls=[ToolCallSpec("f", {"s": "\udc00"})])
    body = render(reply, fmt)
    response = parse(body, fmt)
    assert response.text == reply.text
    assert response.tool_calls[0].arguments == {"s": "\udc00"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_render_events_are_single_events_that_end_in_a_blank_line(fmt: WireFormat) -> None:
    reply = Reply(
        text="a\r\nb\rc\n\nd\u2028e\x85f",
        reasoning="r\n\nr",
        tool_calls=[ToolCallSpec("f", {"k": "\n\n"})],
        chunk_size=2,
    )
    events = render_events(reply, fmt, {"stream_options": {"include_usage": True}})
    for event in events:
        assert event.endswith(b"\n\n")
        assert b"\r" not in event
        assert b"\n\n" not in event[:-2]
    assert parse(events, fmt).text == reply.text


def test_estimated_prompt_counts_the_responses_instructions() -> None:
    reply = Reply(text="ok")
    bare = estimate_usage(reply, {"input": "hi"})
    instructed = estimate_usage(reply, {"input": "hi", "instructions": "Be terse. " * 400})
    anthropic_system = estimate_usage(reply, {"messages": [], "system": "Be terse. " * 400})
    assert anthropic_system.prompt_tokens > 900
    assert instructed.prompt_tokens > bare.prompt_tokens + 900


# ================================================================ faults, byte-exact


@pytest.mark.asyncio
@pytest.mark.parametrize("at", [0, 1, 37, len(BODY) - 1])
async def test_drop_after_delivers_exactly_n_body_bytes(llm_server: LLMServer, at: int) -> None:
    llm_server.enqueue(Fault.drop_after(at, body=Replay(BODY, chunk_size=7)))
    status, _, got, error = await _post_raw(llm_server.url + PATHS["openai-chat"])
    assert status == 200
    assert got == BODY[:at]
    assert error is not None  # cut, not a clean end


@pytest.mark.asyncio
async def test_drop_after_past_the_end_sends_everything_then_drops(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.drop_after(10 * len(BODY), body=BODY))
    _, _, got, error = await _post_raw(llm_server.url + PATHS["anthropic"])
    assert got == BODY
    assert error is not None


@pytest.mark.asyncio
async def test_stall_after_bytes_pauses_at_that_offset_then_sends_the_rest(
    llm_server: LLMServer,
) -> None:
    at = 50
    llm_server.enqueue(Fault.stall(0.4, after_bytes=at, body=Replay(BODY, chunk_size=9)))
    arrivals: list[tuple[float, int]] = []
    async with (
        aiohttp.ClientSession() as session,
        session.post(llm_server.url + PATHS["openai-responses"], json=STREAM) as resp,
    ):
        started = time.monotonic()
        received = b""
        async for piece in resp.content.iter_any():
            received += piece
            arrivals.append((time.monotonic() - started, len(received)))
    assert received == BODY
    before = [t for t, n in arrivals if n <= at]
    after = [t for t, n in arrivals if n > at]
    assert before
    assert after
    assert max(before) < 0.2
    assert min(after) >= 0.35


@pytest.mark.asyncio
@pytest.mark.parametrize(("at", "framed"), [(0, True), (23, False), (len(BODY), True)])
async def test_garbage_is_inserted_at_the_offset_exactly(
    llm_server: LLMServer, at: int, framed: bool
) -> None:
    junk = b"\xff\xfe not json \xc3"
    llm_server.enqueue(Fault.garbage(junk, at=at, framed=framed, body=Replay(BODY, chunk_size=5)))
    _, _, got, error = await _post_raw(llm_server.url + PATHS["openai-chat"])
    inserted = b"data: " + junk + b"\n\n" if framed else junk
    assert error is None
    assert got == BODY[:at] + inserted + BODY[at:]


@pytest.mark.asyncio
async def test_garbage_by_default_goes_right_after_the_first_event(llm_server: LLMServer) -> None:
    first = BODY.index(b"\n\n") + 2
    llm_server.enqueue(Fault.garbage(size=16, seed=3, body=BODY))
    _, _, got, _ = await _post_raw(llm_server.url + PATHS["openai-chat"])
    assert got[:first] == BODY[:first]
    assert got[-(len(BODY) - first) :] == BODY[first:]
    junk = got[first : len(got) - (len(BODY) - first)]
    assert junk.startswith(b"data: ")
    assert junk.endswith(b"\n\n")
    assert len(junk) == len(b"data: \n\n") + 16
    assert b"\n" not in junk[6:-2]
    assert b"\r" not in junk[6:-2]


@pytest.mark.asyncio
async def test_huge_line_with_a_body_sends_the_first_event_then_the_line(
    llm_server: LLMServer,
) -> None:
    size = 200_000
    first = BODY.index(b"\n\n") + 2
    llm_server.enqueue(Fault.huge_line(size, body=Replay(BODY)))
    _, _, got, _ = await _post_raw(llm_server.url + PATHS["anthropic"])
    assert got == BODY[:first] + b"data: " + b"x" * size


@pytest.mark.asyncio
async def test_wrong_content_type_sends_its_status_type_and_body(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.wrong_content_type("application/json", body='{"ok": 1}', status=502))
    status, headers, got, _ = await _post_raw(llm_server.url + PATHS["openai-responses"])
    assert (status, headers["Content-Type"], got) == (502, "application/json", b'{"ok": 1}')


# ================================================================ official SDKs


EDGE_REPLIES = {
    "zero calls, tool_calls finish": Reply(finish=FinishReason.TOOL_CALLS),
    "text, tool_calls finish": Reply(text="t", finish="tool_calls"),
    "reasoning and calls, no text": Reply(
        reasoning="hm", tool_calls=[ToolCallSpec("f", {"a": [1]}), ToolCallSpec("g", "")]
    ),
    "empty": Reply(),
}


@pytest.mark.parametrize("name", list(EDGE_REPLIES))
def test_edge_replies_validate_and_accumulate_in_the_openai_chat_sdk(
    tserver: LLMServer, oai: openai.OpenAI, name: str
) -> None:
    reply = EDGE_REPLIES[name]
    tserver.enqueue(reply, reply)
    opts = {"include_usage": True}
    raw = oai.chat.completions.create(
        model="m",
        messages=USER,
        stream=True,
        stream_options=opts,  # type: ignore[arg-type]
    )
    with raw:
        for chunk in raw:
            ChatCompletionChunk.model_validate(chunk.to_dict())
    with oai.chat.completions.stream(model="m", messages=USER, stream_options=opts) as stream:
        list(stream)
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == str(reply.finish_reason)
    assert (choice.message.content or "") == reply.text
    assert [c.function.name for c in choice.message.tool_calls or []] == [
        c.name for c in reply.tool_calls
    ]
    usage = final.usage
    assert usage is not None
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.parametrize("name", list(EDGE_REPLIES))
def test_edge_replies_validate_and_accumulate_in_the_anthropic_sdk(
    tserver: LLMServer, ant: anthropic.Anthropic, name: str
) -> None:
    reply = EDGE_REPLIES[name]
    tserver.enqueue(reply, reply)
    adapter = pydantic.TypeAdapter(RawMessageStreamEvent)
    with ant.messages.create(model="c", max_tokens=9, messages=USER, stream=True) as raw:
        for event in raw:
            adapter.validate_python(event.to_dict())
    with ant.messages.stream(model="c", max_tokens=9, messages=USER) as stream:
        list(stream)
        final = stream.get_final_message()
    expected_stop = {FinishReason.TOOL_CALLS: "tool_use", FinishReason.STOP: "end_turn"}
    assert final.stop_reason == expected_stop[reply.finish_reason]
    assert "".join(b.text for b in final.content if b.type == "text") == reply.text
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [(b.name, b.input) for b in uses] == [
        (c.name, json.loads(c.arguments_json() or "{}")) for c in reply.tool_calls
    ]
    expected = estimate_usage(reply, {"messages": USER})
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        expected.prompt_tokens,
        expected.completion_tokens,
    )


@pytest.mark.parametrize("name", list(EDGE_REPLIES))
def test_edge_replies_validate_and_accumulate_in_the_openai_responses_sdk(
    tserver: LLMServer, oai: openai.OpenAI, name: str
) -> None:
    reply = EDGE_REPLIES[name]
    tserver.enqueue(reply, reply)
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    with oai.responses.create(model="m", input="x", stream=True) as raw:
        for event in raw:
            adapter.validate_python(event.to_dict())
    with oai.responses.stream(model="m", input="x") as stream:
        list(stream)
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text == reply.text
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [
        (c.name, c.arguments_json()) for c in reply.tool_calls
    ]
    assert final.usage is not None
    assert final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_estimated_usage_reaches_rafrx_clients_consistently(
    llm_server: LLMServer, fmt: WireFormat
) -> None:
    reply = Reply(text="x" * 40, reasoning="y" * 20, tool_calls=[ToolCallSpec("f", {"k": "v"})])
    llm_server.enqueue(reply)
    async with CLIENTS[fmt](llm_server.url) as client:
        response = await ask(client)
    usage = response.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    expected = estimate_usage(reply, llm_server.requests[0].body)
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        expected.prompt_tokens,
        expected.completion_tokens,
    )
    assert expected.completion_tokens == 10 + 5 + len('f{"k":"v"}') // 4 + 1


def test_sdk_stream_interrupted_by_drop_after_raises_in_each_sdk(
    tserver: LLMServer, oai: openai.OpenAI, ant: anthropic.Anthropic
) -> None:
    reply = Reply(text="abcdefghij" * 5, chunk_size=2)
    cut = len(render(reply, "anthropic")) // 2
    tserver.enqueue(
        Fault.drop_after(cut, body=reply),
        Fault.drop_after(cut, body=reply),
        Fault.drop_after(cut, body=reply),
    )
    errors = (httpx2.HTTPError, openai.APIError, anthropic.APIError)

    def chat() -> None:
        with oai.chat.completions.stream(model="m", messages=USER) as stream:
            list(stream)

    def messages() -> None:
        with ant.messages.stream(model="c", max_tokens=9, messages=USER) as stream:
            list(stream)

    def responses() -> None:
        with oai.responses.stream(model="m", input="x") as stream:
            list(stream)
            stream.get_final_response()

    with pytest.raises(errors):
        chat()
    with pytest.raises(errors):
        messages()
    with pytest.raises((*errors, RuntimeError)):
        responses()
    assert len(tserver.requests) == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_client_that_hangs_up_mid_stream_leaves_the_server_healthy(
    llm_server: LLMServer, fmt: WireFormat, loop_errors: list[dict[str, Any]]
) -> None:
    llm_server.enqueue(Reply(text="s" * 300, chunk_size=1, delay=0.005), Reply(text="next"))
    async with aiohttp.ClientSession() as session:
        resp = await session.post(llm_server.url + PATHS[fmt], json=STREAM)
        await resp.content.readexactly(200)
        resp.close()  # hang up with the reply half sent
    await llm_server.wait_connections_closed(timeout=2)
    _, _, body, error = await _post_raw(llm_server.url + PATHS[fmt])
    assert error is None
    assert parse(body, fmt).text == "next"
    await asyncio.sleep(0.1)  # let the abandoned handler notice
    assert loop_errors == []


# ---------------------------------------------------------------- keep_requests


@pytest.mark.asyncio
@pytest.mark.parametrize("keep", [0, 2])
async def test_keep_requests_bounds_what_is_recorded_and_counts_every_request(keep: int) -> None:
    async with LLMServer(keep_requests=keep) as server, aiohttp.ClientSession() as http:
        for i in range(5):
            body = {
                "model": "m",
                "stream": True,
                "messages": [{"role": "user", "content": f"q{i}"}],
            }
            async with http.post(server.url + "/v1/chat/completions", json=body) as resp:
                await resp.read()
        await server.wait_requests(5)  # counts every request, kept or not
        assert server.request_count == 5
        kept = [r.body["messages"][0]["content"] for r in server.requests]
        assert kept == ["q3", "q4"][2 - keep :]
        assert "requests=5" in repr(server)
        server.reset()
        assert (server.request_count, server.requests) == (0, [])


def test_keep_requests_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="keep_requests"):
        LLMServer(keep_requests=-1)
