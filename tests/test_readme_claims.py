"""The README's prose, sentence by sentence: each behaviour it claims, tried as a reader would.

Every test drives rafrx over real HTTP on 127.0.0.1 (the local
:class:`~rafrx.testing.LLMServer`, or a small ``aiohttp.web`` server) and
quotes, in its docstring, the README sentence it checks.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any

import pytest
import pytest_asyncio
import reactivex
from aiohttp import web
from pydantic import Field
from reactivex import operators as rx

import rafrx
from rafrx import operators as ops
from rafrx.agent import Agent
from rafrx.content import (
    ErrorContent,
    ToolCalledContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
)
from rafrx.errors import (
    HTTPStatusError,
    IdleTimeout,
    IncompleteStream,
    ProviderError,
    RafrxError,
)
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.json_stream import partial_json
from rafrx.messages import ChatMessage, ToolCall
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    Timeouts,
)
from rafrx.testing import Fault, LLMServer, RecordedRequest, Replay, Reply, ToolCallSpec, render
from rafrx.tools import tool

SECRET = "sk-readme-claims-SECRET-0123456789abcdef"
WAIT = 10.0


async def results_of(
    source: reactivex.Observable[AgentResponseResult],
) -> tuple[list[AgentResponseResult], BaseException | None]:
    """Every result an observable emits, and the error it ends with (``None`` if it completes)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[BaseException | None] = loop.create_future()
    seen: list[AgentResponseResult] = []

    def end(error: BaseException | None) -> None:
        if not done.done():
            done.set_result(error)

    subscription = source.subscribe(seen.append, end, lambda: end(None))
    try:
        error = await asyncio.wait_for(done, WAIT)
    finally:
        subscription.dispose()
    return seen, error


def contents(results: Sequence[AgentResponseResult]) -> list[Any]:
    return [c for r in results for c in r.contents]


def chat(server: LLMServer, **kwargs: Any) -> OpenAIChatClient:
    return OpenAIChatClient(server.url, api_key=SECRET, model="gpt-test", **kwargs)


def anthropic(server: LLMServer, **kwargs: Any) -> AnthropicClient:
    return AnthropicClient(server.url, api_key=SECRET, model="claude-test", **kwargs)


def responses(server: LLMServer, **kwargs: Any) -> OpenAIResponsesClient:
    return OpenAIResponsesClient(server.url, api_key=SECRET, model="gpt-test", **kwargs)


CLIENTS = {"openai-chat": chat, "anthropic": anthropic, "openai-responses": responses}


def chat_tool_messages(request: RecordedRequest) -> dict[str, str]:
    """A chat request's tool results, by call id."""
    return {
        m["tool_call_id"]: m["content"] for m in request.body["messages"] if m["role"] == "tool"
    }


def chat_calls(request: RecordedRequest) -> list[dict[str, Any]]:
    """The tool calls of a chat request's assistant messages."""
    return [c for m in request.body["messages"] for c in (m.get("tool_calls") or [])]


@pytest_asyncio.fixture
async def server(llm_server: LLMServer) -> AsyncIterator[LLMServer]:
    yield llm_server


# ------------------------------------------------------------------ errors lose nothing


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_http_error_is_typed_with_status_and_body(server: LLMServer, wire: str) -> None:
    """README: "HTTP errors ... end the observable with a typed `rafrx.RafrxError`
    (... `HTTPStatusError` with `.status` and `.body` ...)"."""
    server.enqueue(Fault.status(503, message="the kitchen is closed"))
    client = CLIENTS[wire](server)
    try:
        _, error = await results_of(client.stream([ChatMessage.user("Hi")]).pipe(ops.convert()))
    finally:
        await client.aclose()
    assert isinstance(error, HTTPStatusError)
    assert isinstance(error, RafrxError)
    assert error.status == 503
    assert "the kitchen is closed" in str(error.body)


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_error_content_comes_just_before_the_error_and_aggregate_reraises_it(
    server: LLMServer, wire: str
) -> None:
    """README: "Just before the error, the converter emits a result holding an
    `ErrorContent`; `aggregate()` re-raises the same error with `.partial` set to
    the `AgentResponse` built from everything received."."""
    text = "The quick brown fox jumps over the lazy dog. " * 20
    body = Reply(text=text, chunk_size=5)
    at = render(body, wire).index(b"jumps") + 400  # type: ignore[arg-type]
    server.enqueue(Fault.drop_after(at, body=body))
    client = CLIENTS[wire](server)
    aggregated: list[AgentResponse] = []
    try:
        source = client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), rx.share())
        seen: list[AgentResponseResult] = []
        loop = asyncio.get_running_loop()
        conv_error: asyncio.Future[BaseException] = loop.create_future()
        agg_error: asyncio.Future[BaseException] = loop.create_future()
        source.subscribe(seen.append, conv_error.set_result)
        source.pipe(ops.aggregate()).subscribe(aggregated.append, agg_error.set_result)
        error = await asyncio.wait_for(conv_error, WAIT)
        reraised = await asyncio.wait_for(agg_error, WAIT)
    finally:
        await client.aclose()
    assert isinstance(error, RafrxError)
    assert reraised is error
    assert not aggregated
    assert any(isinstance(c, ErrorContent) for c in seen[-1].contents)
    assert not any(isinstance(c, ErrorContent) for r in seen[:-1] for c in r.contents)
    partial = error.partial
    assert isinstance(partial, AgentResponse)
    received = "".join(c.text for c in contents(seen) if isinstance(c, rafrx.TextContent))
    assert received
    assert text.startswith(received)
    assert partial.text == received


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_malformed_sse_ends_with_a_typed_error(server: LLMServer, wire: str) -> None:
    """README: "malformed SSE ... end the observable with a typed `rafrx.RafrxError`"."""
    server.enqueue(Fault.garbage())
    client = CLIENTS[wire](server)
    try:
        results, error = await results_of(
            client.stream([ChatMessage.user("Hi")]).pipe(ops.convert())
        )
    finally:
        await client.aclose()
    assert isinstance(error, RafrxError)
    assert results
    assert any(isinstance(c, ErrorContent) for c in results[-1].contents)


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_idle_stream_ends_with_idle_timeout(server: LLMServer, wire: str) -> None:
    """README: "timeouts ... end the observable with a typed `rafrx.RafrxError`
    (... `IdleTimeout`, …)"."""
    server.enqueue(Fault.stall(5.0, after_bytes=200, body=Reply(text="x" * 400)))
    client = CLIENTS[wire](server, timeouts=Timeouts(idle=0.3))
    try:
        with pytest.raises(IdleTimeout) as caught:
            await asyncio.wait_for(
                rafrx.collect_agent_response(
                    client.stream([ChatMessage.user("Hi")]).pipe(ops.convert())
                ),
                WAIT,
            )
    finally:
        await client.aclose()
    assert isinstance(caught.value, RafrxError)
    assert isinstance(caught.value.partial, AgentResponse)


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_truncated_stream_ends_with_incomplete_stream(server: LLMServer, wire: str) -> None:
    """README: "truncated streams end the observable with a typed `rafrx.RafrxError`
    (... `IncompleteStream` ...)"."""
    whole = render(Reply(text="Hello there, how are you?"), wire)  # type: ignore[arg-type]
    events = whole.split(b"\n\n")
    cut = b"\n\n".join(events[: len(events) // 2]) + b"\n\n"  # whole events, then a clean EOF
    server.enqueue(Replay(cut))
    client = CLIENTS[wire](server)
    try:
        _, error = await results_of(client.stream([ChatMessage.user("Hi")]).pipe(ops.convert()))
    finally:
        await client.aclose()
    assert isinstance(error, IncompleteStream)


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_in_band_provider_error_is_a_provider_error(server: LLMServer, wire: str) -> None:
    """README: "in-band provider errors ... end the observable with a typed
    `rafrx.RafrxError` (... `ProviderError` ...)"."""
    if wire == "openai-chat":  # an error object in the stream, as OpenAI-compatible servers send
        head = render(Reply(text="Half an ans"), "openai-chat").split(b"\n\n")[:-3]
        error_event = b'data: {"error": {"message": "overloaded", "type": "server_error"}}'
        server.enqueue(Replay(b"\n\n".join([*head, error_event]) + b"\n\n"))
    else:
        server.enqueue(Reply(text="Half an ans", finish="error"))
    client = CLIENTS[wire](server)
    try:
        with pytest.raises(ProviderError) as caught:
            await asyncio.wait_for(
                rafrx.collect_agent_response(
                    client.stream([ChatMessage.user("Hi")]).pipe(ops.convert())
                ),
                WAIT,
            )
    finally:
        await client.aclose()
    assert caught.value.partial is not None
    assert caught.value.partial.text == "Half an ans"


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_api_key_never_in_reprs_logs_or_errors(
    server: LLMServer, wire: str, caplog: pytest.LogCaptureFixture
) -> None:
    """README: "API keys never appear in reprs, logs or errors."."""
    caplog.set_level(logging.DEBUG)
    server.enqueue(Fault.status(401, message="bad key"))
    server.enqueue(Fault.drop_after(150))
    client = CLIENTS[wire](server)
    shown: list[str] = [repr(client), str(client)]
    try:
        for _ in range(2):
            _, error = await results_of(client.stream([ChatMessage.user("Hi")]).pipe(ops.convert()))
            assert isinstance(error, RafrxError)
            shown += [str(error), repr(error), repr(error.args), repr(vars(error))]
            shown += [repr(error.partial)]
            if isinstance(error, HTTPStatusError):
                shown.append(str(error.body))
    finally:
        await client.aclose()
    shown += [r.getMessage() for r in caplog.records]
    shown += [str(r.exc_info) for r in caplog.records if r.exc_info]
    assert all(SECRET not in s for s in shown)


@pytest.mark.asyncio
async def test_credential_named_header_is_redacted_wherever_it_shows(
    server: LLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    """README: "`headers=` (any header named like a credential is redacted wherever it
    could show)"."""
    caplog.set_level(logging.DEBUG)
    token = "gateway-token-SECRET-987654321"
    server.enqueue(Fault.status(403, message="forbidden"))
    client = OpenAIChatClient(
        server.url, model="gpt-test", headers={"X-Gateway-Api-Key": token, "X-Trace": "t1"}
    )
    try:
        _, error = await results_of(client.stream([ChatMessage.user("Hi")]).pipe(ops.convert()))
    finally:
        await client.aclose()
    # the header does go out
    assert server.requests
    assert server.requests[0].headers["X-Trace"] == "t1"
    assert "X-Gateway-Api-Key" in server.requests[0].headers
    assert isinstance(error, HTTPStatusError)
    shown = [repr(client), str(error), repr(error), repr(vars(error)), str(error.body)]
    shown += [r.getMessage() for r in caplog.records]
    assert all(token not in s for s in shown)


# ------------------------------------------------------------------ a tool call cut short

CUT = '{"path": "a.py", "text": "def f('


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_call_cut_by_the_token_limit_is_incomplete(server: LLMServer, wire: str) -> None:
    """README: "When the model hits its token limit mid-arguments (`finish_reason:
    length`, `stop_reason: max_tokens`) ... the call ends as a
    `ToolCallIncompleteContent` (not a `ToolCallingContent`), and
    `response.tool_calls` keeps it as `ToolCall(complete=False, raw_arguments=…,
    partial_value=…, error="arguments cut short: …")`: the finish reason, not a JSON
    error, says why. `partial_value` is what the arguments were on their way to
    (`rafrx.json_stream.partial_json`)."."""
    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("add", {"a": 1, "b": 2}, id="call_ok"),
                ToolCallSpec("write_file", CUT, id="call_cut"),
            ],
            finish="length",
        )
    )
    client = CLIENTS[wire](server)
    try:
        results, error = await results_of(
            client.stream([ChatMessage.user("Write it")]).pipe(ops.convert())
        )
    finally:
        await client.aclose()
    assert error is None
    seen = contents(results)
    calling = [c.call_id for c in seen if isinstance(c, ToolCallingContent)]
    cut = [c for c in seen if isinstance(c, ToolCallIncompleteContent)]
    assert calling == ["call_ok"]
    assert [c.call_id for c in cut] == ["call_cut"]
    response = await rafrx.collect_agent_response(reactivex.from_iterable(results))
    by_id = {c.id: c for c in response.tool_calls}
    assert by_id["call_ok"].complete
    call = by_id["call_cut"]
    assert isinstance(call, ToolCall)
    assert call.complete is False
    assert call.raw_arguments == CUT
    assert call.partial_value == partial_json(CUT) == {"path": "a.py", "text": "def f("}
    assert call.error is not None
    assert call.error.startswith("arguments cut short: ")
    assert "length" in call.error or "token limit" in call.error
    assert "JSON" not in call.error


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_call_open_when_the_stream_fails_is_incomplete(server: LLMServer, wire: str) -> None:
    """README: "or the stream fails while a call is open, the call ends as a
    `ToolCallIncompleteContent` (not a `ToolCallingContent`)" and "A tool call cut short
    never runs and never vanishes."."""
    ran: list[str] = []

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        ran.append(path)
        return "ok"

    body = Reply(
        tool_calls=[ToolCallSpec("write_file", {"path": "a.py", "text": "y" * 600}, id="c1")],
        chunk_size=4,
    )
    whole = render(body, wire)  # type: ignore[arg-type]
    at = whole.index(b"yyyy") + 200  # in the middle of the arguments
    server.enqueue(Fault.drop_after(at, body=body))
    client = CLIENTS[wire](server)
    try:
        results, error = await results_of(
            client.stream([ChatMessage.user("Write it")], [write_file]).pipe(
                ops.convert(), ops.execute_tools([write_file])
            )
        )
    finally:
        await client.aclose()
    assert isinstance(error, RafrxError)
    seen = contents(results)
    assert not any(isinstance(c, ToolCallingContent) for c in seen)
    cut = [c for c in seen if isinstance(c, ToolCallIncompleteContent)]
    assert [c.call_id for c in cut] == ["c1"]
    assert isinstance(cut[0].partial_value, dict)
    assert cut[0].partial_value.get("path") == "a.py"
    with pytest.raises(RafrxError) as caught:
        await rafrx.collect_agent_response(
            reactivex.from_iterable(results).pipe(rx.concat(reactivex.throw(error)))
        )
    assert [c.id for c in caught.value.partial.tool_calls] == ["c1"]
    assert caught.value.partial.tool_calls[0].complete is False
    assert ran == []


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_agent_runs_completed_calls_and_leaves_the_cut_one_out(
    server: LLMServer, wire: str
) -> None:
    """README: "The calls that did complete still run; the cut one stays out of the
    transcript sent back to the model." and "A tool call cut short never runs"."""
    ran: list[str] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append("add")
        return a + b

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        ran.append("write_file")
        return "ok"

    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("add", {"a": 1, "b": 2}, id="call_ok"),
                ToolCallSpec("write_file", CUT, id="call_cut"),
            ],
            finish="length",
        ),
        Reply(text="3, and the file was too long."),
    )
    client = CLIENTS[wire](server)
    try:
        agent = Agent(client, tools=[add, write_file])
        response = await asyncio.wait_for(agent.send("Add and write"), WAIT)
    finally:
        await client.aclose()
    assert ran == ["add"]
    assert len(server.requests) == 2
    sent = json.dumps(server.requests[1].body)
    assert "call_ok" in sent
    assert "call_cut" not in sent
    assert "def f(" not in sent
    assert response.text == "3, and the file was too long."
    assert {c.id: c.complete for c in response.tool_calls} == {"call_ok": True, "call_cut": False}


# ------------------------------------------------------------------ the agent loop


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_unanswered_approval_times_out_to_a_denial_the_model_reads(
    server: LLMServer, wire: str
) -> None:
    """README: "With `Agent(approval_timeout=seconds)` an approval nobody answers in
    time denies the call, and the model is told so."."""
    ran: list[str] = []
    asked: list[str] = []

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    async def never(request: ToolApprovalRequestEvent) -> bool:
        asked.append(request.call_id)
        await asyncio.Event().wait()
        return True

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("delete", {"path": "/etc"}, id="call_del")]),
        Reply(text="It was not approved."),
    )
    client = CLIENTS[wire](server)
    try:
        agent = Agent(client, tools=[delete], approver=never, approval_timeout=0.3)
        response = await asyncio.wait_for(agent.send("Delete /etc"), WAIT)
    finally:
        await client.aclose()
    assert asked == ["call_del"]
    assert ran == []
    assert response.text == "It was not approved."
    assert len(server.requests) == 2
    second = json.dumps(server.requests[1].body)
    assert "denied" in second
    assert "0.3" in second


@pytest.mark.asyncio
async def test_disposing_a_turn_starts_no_tool_and_asks_no_approver(server: LLMServer) -> None:
    """README: "Disposing a turn stops it at once (no tool starts, no approver is asked
    after it)"."""
    ran: list[str] = []
    asked: list[str] = []

    @tool
    def free(x: int) -> int:
        """Free."""
        ran.append("free")
        return x

    @tool(requires_approval=True)
    def gated(x: int) -> int:
        """Gated."""
        ran.append("gated")
        return x

    def approver(request: ToolApprovalRequestEvent) -> bool:
        asked.append(request.call_id)
        return True

    server.enqueue(
        Reply(
            text="Let me call them.",
            tool_calls=[ToolCallSpec("free", {"x": 1}), ToolCallSpec("gated", {"x": 2})],
            chunk_size=2,
            delay=0.02,
        )
    )
    client = chat(server)
    loop = asyncio.get_running_loop()
    started: asyncio.Future[None] = loop.create_future()
    holder: list[Any] = []

    def on_next(result: AgentResponseResult) -> None:
        if any(isinstance(c, ToolCallStartContent) for c in result.contents):
            holder[0].dispose()
            if not started.done():
                started.set_result(None)

    try:
        agent = Agent(client, tools=[free, gated], approver=approver, eager_tools=True)
        holder.append(agent.run("Go").subscribe(on_next))
        await asyncio.wait_for(started, WAIT)
        await server.wait_connections_closed()
        await asyncio.sleep(0.3)  # the rest of the reply would have come by now
    finally:
        await client.aclose()
    assert ran == []
    assert asked == []


@pytest.mark.asyncio
async def test_disposing_during_a_tool_never_leaves_a_call_without_result(
    server: LLMServer,
) -> None:
    """README: "Disposing a turn ... never leaves history with a call but no result"."""
    entered = asyncio.Event()

    @tool
    async def slow(x: int) -> int:
        """Slow."""
        entered.set()
        await asyncio.Event().wait()
        return x

    server.enqueue(Reply(text="first answer"))
    server.enqueue(Reply(tool_calls=[ToolCallSpec("slow", {"x": 1}, id="call_slow")]))
    server.enqueue(Reply(text="third answer"))
    client = chat(server)
    history = InMemoryHistoryProvider()
    try:
        agent = Agent(client, tools=[slow], history=history)
        await asyncio.wait_for(agent.send("one"), WAIT)
        subscription = agent.run("two").subscribe(lambda _: None)
        await asyncio.wait_for(entered.wait(), WAIT)
        subscription.dispose()
        await asyncio.wait_for(agent.send("three"), WAIT)
    finally:
        await client.aclose()
    saved = history.messages
    ids = {c.id for m in saved for c in (m.tool_calls or ())}
    answered = {m.tool_call_id for m in saved if m.tool_call_id}
    assert ids <= answered
    third = server.requests[-1]
    assert set(chat_tool_messages(third)) >= {c["id"] for c in chat_calls(third)}


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_loaded_history_with_a_call_but_no_result_is_repaired(
    server: LLMServer, wire: str
) -> None:
    """README: "a loaded history that does (a save that failed half-way) is repaired
    before it is sent (`rafrx.messages.paired`)"."""
    broken = [
        ChatMessage.user("What's the weather?"),
        ChatMessage.assistant_with_tools("", [ToolCall("call_lost", "weather", {"city": "X"})]),
    ]
    history = InMemoryHistoryProvider(broken)
    client = CLIENTS[wire](server)
    try:
        agent = Agent(client, history=history)
        response = await asyncio.wait_for(agent.send("Hello again"), WAIT)
    finally:
        await client.aclose()
    assert response.text
    sent = server.requests[0].body
    text = json.dumps(sent)
    if "call_lost" in text:  # kept: then it must be answered
        if wire == "openai-chat":
            assert "call_lost" in chat_tool_messages(server.requests[0])
        elif wire == "anthropic":
            assert text.count("call_lost") >= 2
            assert "tool_result" in text
        else:
            assert "function_call_output" in text


@pytest.mark.asyncio
async def test_an_agents_turns_save_one_at_a_time(server: LLMServer) -> None:
    """README: "an agent's turns save one at a time"."""
    saving = 0
    most = 0
    saved: list[list[str]] = []
    gate = asyncio.Event()

    class SlowHistory:
        def __init__(self) -> None:
            self.inner = InMemoryHistoryProvider()

        async def load(self) -> Sequence[ChatMessage]:
            return await self.inner.load()

        async def save(self, messages: Sequence[ChatMessage]) -> None:
            nonlocal saving, most
            saving += 1
            most = max(most, saving)
            gate.set()
            await asyncio.sleep(0.2)
            await self.inner.save(messages)
            saved.append([str(m.content) for m in messages])
            saving -= 1

    client = chat(server)
    try:
        agent = Agent(client, history=SlowHistory())
        a = asyncio.ensure_future(agent.send("one"))
        b = asyncio.ensure_future(agent.send("two"))
        c = asyncio.ensure_future(agent.send("three"))
        await asyncio.wait_for(asyncio.gather(a, b, c), WAIT)
    finally:
        await client.aclose()
    assert len(saved) == 3
    assert most == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("wire", list(CLIENTS))
async def test_tool_exception_timeout_and_systemexit_become_error_results(
    server: LLMServer, wire: str
) -> None:
    """README: "A tool's exception, timeout or `SystemExit` becomes an error result the
    model reads, never the end of the loop."."""

    @tool
    def boom() -> str:
        """Fails."""
        raise ValueError("kaboom-123")

    @tool(timeout=0.2)
    async def sleepy() -> str:
        """Too slow."""
        await asyncio.sleep(30)
        return "late"

    @tool
    def leave() -> str:
        """Exits."""
        raise SystemExit(7)

    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("boom", {}, id="call_boom"),
                ToolCallSpec("sleepy", {}, id="call_sleepy"),
                ToolCallSpec("leave", {}, id="call_leave"),
            ]
        ),
        Reply(text="All three failed."),
    )
    client = CLIENTS[wire](server)
    try:
        agent = Agent(client, tools=[boom, sleepy, leave])
        results, error = await results_of(agent.run("Try them"))
    finally:
        await client.aclose()
    assert error is None
    called = {c.call_id: c for c in contents(results) if isinstance(c, ToolCalledContent)}
    assert set(called) == {"call_boom", "call_sleepy", "call_leave"}
    assert all(c.error is not None and c.result is None for c in called.values())
    assert len(server.requests) == 2
    second = json.dumps(server.requests[1].body)
    assert "kaboom-123" in second
    assert "0.2" in second  # the timeout is said
    assert "SystemExit" in second or "exit" in second.lower()
    response = await rafrx.collect_agent_response(reactivex.from_iterable(results))
    assert response.text == "All three failed."


@pytest.mark.asyncio
async def test_failed_tool_result_is_marked_is_error_for_anthropic(server: LLMServer) -> None:
    """README: "A failed tool's result is marked `is_error` for Anthropic."."""

    @tool
    def boom() -> str:
        """Fails."""
        raise RuntimeError("nope")

    @tool
    def fine() -> str:
        """Works."""
        return "yes"

    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("boom", {}, id="toolu_a"),
                ToolCallSpec("fine", {}, id="toolu_b"),
            ]
        ),
        Reply(text="done"),
    )
    client = anthropic(server)
    try:
        await asyncio.wait_for(Agent(client, tools=[boom, fine]).send("Go"), WAIT)
    finally:
        await client.aclose()
    blocks = [
        b
        for m in server.requests[1].body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    by_id = {b["tool_use_id"]: b for b in blocks}
    assert by_id["toolu_a"].get("is_error") is True
    assert not by_id["toolu_b"].get("is_error")


@pytest.mark.asyncio
async def test_sync_tools_run_on_rafrx_threads_as_many_at_once_as_concurrency(
    server: LLMServer,
) -> None:
    """README: "Tools are plain functions (sync ones run on rafrx's own threads, as many
    at once as the agent's `concurrency`)"."""
    lock = threading.Lock()
    running = 0
    most = 0
    threads: set[str] = set()
    main = threading.current_thread()

    @tool
    def work(n: int) -> int:
        """Work."""
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            threads.add(threading.current_thread().name)
            assert threading.current_thread() is not main
        time.sleep(0.15)
        with lock:
            running -= 1
        return n

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("work", {"n": i}) for i in range(6)]),
        Reply(text="done"),
    )
    client = chat(server)
    try:
        agent = Agent(client, tools=[work], concurrency=3)
        results, error = await results_of(agent.run("Work"))
    finally:
        await client.aclose()
    assert error is None
    called = [c for c in contents(results) if isinstance(c, ToolCalledContent)]
    assert len(called) == 6
    assert all(c.error is None for c in called)
    assert most == 3
    assert threads
    assert all(name.startswith("rafrx") for name in threads)


@pytest.mark.asyncio
async def test_partials_callables_and_methods_are_tools(server: LLMServer) -> None:
    """README: "Tools are plain functions ..., `functools.partial`s, callable objects or
    methods: `@tool` on a method gives each instance its tool, without `self` in the
    schema."."""

    def greet(greeting: str, name: str) -> str:
        """Greet someone.

        Args:
            greeting: The greeting.
            name: Who.
        """
        return f"{greeting}, {name}"

    hello = functools.partial(greet, "Hello")

    class Shout:
        def __call__(self, text: str) -> str:
            """Shout text."""
            return text.upper()

    class Counter:
        def __init__(self, start: int) -> None:
            self.value = start

        @tool
        def bump(self, by: int) -> int:
            """Bump the counter."""
            self.value += by
            return self.value

    one, two = Counter(100), Counter(200)
    assert "self" not in json.dumps(one.bump.parameters)
    assert one.bump is not two.bump
    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("greet", {"name": "Ada"}, id="c1"),
                ToolCallSpec("Shout", {"text": "hey"}, id="c2"),
                ToolCallSpec("bump", {"by": 5}, id="c3"),
            ]
        ),
        Reply(text="done"),
    )
    client = chat(server)
    try:
        shout = tool(Shout(), name="Shout")
        await asyncio.wait_for(Agent(client, tools=[hello, shout, two.bump]).send("Go"), WAIT)
    finally:
        await client.aclose()
    assert (one.value, two.value) == (100, 205)
    sent = {f["function"]["name"]: f["function"] for f in server.requests[0].body["tools"]}
    assert set(sent["greet"]["parameters"]["properties"]) == {"name"}
    assert "self" not in json.dumps(sent["bump"]["parameters"])
    assert chat_tool_messages(server.requests[1]) == {"c1": "Hello, Ada", "c2": "HEY", "c3": "205"}


@pytest.mark.asyncio
async def test_annotated_field_constraints_are_sent_and_checked(server: LLMServer) -> None:
    """README: "`Annotated[int, Field(ge=1)]` constraints are sent and checked"."""
    ran: list[int] = []

    @tool
    def repeat(times: Annotated[int, Field(ge=1)]) -> str:
        """Repeat."""
        ran.append(times)
        return "ok"

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("repeat", {"times": 0}, id="c_bad")]),
        Reply(tool_calls=[ToolCallSpec("repeat", {"times": 2}, id="c_good")]),
        Reply(text="done"),
    )
    client = chat(server)
    try:
        await asyncio.wait_for(Agent(client, tools=[repeat]).send("Go"), WAIT)
    finally:
        await client.aclose()
    schema = server.requests[0].body["tools"][0]["function"]["parameters"]
    assert schema["properties"]["times"].get("minimum") == 1
    assert ran == [2]
    bad = chat_tool_messages(server.requests[1])["c_bad"]
    assert "times" in bad
    assert bad != "ok"


def test_docstring_styles_give_parameter_descriptions() -> None:
    """README: "The schema comes from ... the docstring (Google, Sphinx or NumPy
    parameters)"."""

    def google(city: str) -> str:
        """Weather.

        Args:
            city: The city to look up.
        """
        return city

    def sphinx(city: str) -> str:
        """Weather.

        :param city: The city to look up.
        """
        return city

    def numpy(city: str) -> str:
        """Weather.

        Parameters
        ----------
        city : str
            The city to look up.
        """
        return city

    for fn in (google, sphinx, numpy):
        made = tool(fn)
        assert made.parameters["properties"]["city"].get("description") == "The city to look up."
        assert made.description == "Weather."


@pytest.mark.asyncio
async def test_strict_tool_schema_and_null_means_default(server: LLMServer) -> None:
    """README: "`@tool(strict=True)` sends OpenAI the schema in its strict form (every
    property required, optional ones nullable: a `null` means the default)."."""
    got: list[tuple[str, int]] = []

    @tool(strict=True)
    def search(query: str, limit: int = 5) -> str:
        """Search."""
        got.append((query, limit))
        return "found"

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("search", {"query": "rx", "limit": None})]),
        Reply(text="done"),
    )
    client = chat(server)
    try:
        await asyncio.wait_for(Agent(client, tools=[search]).send("Go"), WAIT)
    finally:
        await client.aclose()
    function = server.requests[0].body["tools"][0]["function"]
    assert function.get("strict") is True
    params = function["parameters"]
    assert set(params["required"]) == {"query", "limit"}
    assert params.get("additionalProperties") is False
    limit = params["properties"]["limit"]
    assert "null" in json.dumps(limit)
    assert got == [("rx", 5)]


# ------------------------------------------------------------------ what goes back on the wire


@pytest.mark.asyncio
async def test_deepseek_reasoning_goes_back_on_every_tool_call_message(
    server: LLMServer,
) -> None:
    """README: "DeepSeek's `reasoning_content` (on every tool-call message of a thinking
    conversation)"."""

    @tool
    def step(n: int) -> int:
        """Step."""
        return n

    server.enqueue(
        Reply(reasoning="think one", tool_calls=[ToolCallSpec("step", {"n": 1})]),
        Reply(reasoning="think two", tool_calls=[ToolCallSpec("step", {"n": 2})]),
        Reply(reasoning="think three", text="done"),
    )
    client = chat(server)
    try:
        await asyncio.wait_for(Agent(client, tools=[step]).send("Go"), WAIT)
    finally:
        await client.aclose()
    last = server.requests[-1].body["messages"]
    calling = [m for m in last if m["role"] == "assistant" and m.get("tool_calls")]
    assert [m.get("reasoning_content") for m in calling] == ["think one", "think two"]


@pytest.mark.asyncio
@pytest.mark.parametrize("field", ["reasoning", None])
async def test_reasoning_field_names_where_past_reasoning_goes(
    server: LLMServer, field: str | None
) -> None:
    """README: "`OpenAIChatClient(reasoning_field=...)` names the field a past turn's
    reasoning goes back in (`reasoning_content`, Ollama's `reasoning`, or none for a
    server that refuses unknown fields)."."""

    @tool
    def step(n: int) -> int:
        """Step."""
        return n

    server.enqueue(
        Reply(reasoning="pondering", tool_calls=[ToolCallSpec("step", {"n": 1})]),
        Reply(text="done"),
    )
    client = chat(server, reasoning_field=field)
    try:
        await asyncio.wait_for(Agent(client, tools=[step]).send("Go"), WAIT)
    finally:
        await client.aclose()
    assistant = [m for m in server.requests[1].body["messages"] if m["role"] == "assistant"]
    assert len(assistant) == 1
    assert "reasoning_content" not in assistant[0]
    if field is None:
        assert "pondering" not in json.dumps(assistant[0])
    else:
        assert assistant[0].get(field) == "pondering"


@pytest.mark.asyncio
async def test_store_false_asks_for_encrypted_reasoning(server: LLMServer) -> None:
    """README: "the Responses API's reasoning items with their `encrypted_content` ...
    (`store=False` asks for the encrypted content)"."""
    client = responses(server)
    try:
        await asyncio.wait_for(
            rafrx.collect_agent_response(
                client.stream([ChatMessage.user("Hi")], store=False).pipe(ops.convert())
            ),
            WAIT,
        )
    finally:
        await client.aclose()
    body = server.requests[0].body
    assert body.get("store") is False
    assert "reasoning.encrypted_content" in body.get("include", [])


@pytest.mark.asyncio
async def test_agent_offers_server_tools_given_as_mappings(server: LLMServer) -> None:
    """README: "an agent offers such server tools given as mappings,
    `Agent(tools=[f, {"type": "web_search_20250305", "name": "web_search"}])`"."""

    def f(x: int) -> int:
        """F."""
        return x

    web_search = {"type": "web_search_20250305", "name": "web_search"}
    client = anthropic(server)
    try:
        await asyncio.wait_for(Agent(client, tools=[f, web_search]).send("Search"), WAIT)
    finally:
        await client.aclose()
    offered = server.requests[0].body["tools"]
    assert web_search in offered
    assert any(t.get("name") == "f" and "input_schema" in t for t in offered)


# ------------------------------------------------------------------ clients


@pytest.mark.asyncio
async def test_anthropic_gateway_prefix_gets_v1_messages() -> None:
    """README: "for Anthropic, a gateway prefix such as
    `https://api.deepseek.com/anthropic` gets `/v1/messages` as in its SDK"."""
    paths: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        paths.append(request.path)
        payload = await request.json()
        body = render(Reply(text="via the gateway"), "anthropic", payload)
        return web.Response(body=body, content_type="text/event-stream")

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = AnthropicClient(f"http://127.0.0.1:{port}/anthropic", api_key=SECRET, model="m")
    try:
        response = await asyncio.wait_for(
            rafrx.collect_agent_response(
                client.stream([ChatMessage.user("Hi")]).pipe(ops.convert())
            ),
            WAIT,
        )
    finally:
        await client.aclose()
        await runner.cleanup()
    assert paths == ["/anthropic/v1/messages"]
    assert response.text == "via the gateway"


@pytest.mark.asyncio
async def test_trust_env_takes_the_proxy_from_the_environment(
    server: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: "`trust_env=True` for proxies from the environment"."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.setenv("http_proxy", server.url)
    # a host that does not resolve: only the proxy (the local server) can answer
    client: LLMClient = OpenAIChatClient(
        "http://llm.invalid", api_key=SECRET, model="m", trust_env=True
    )
    try:
        response = await asyncio.wait_for(
            rafrx.collect_agent_response(
                client.stream([ChatMessage.user("Hi")]).pipe(ops.convert())
            ),
            WAIT,
        )
    finally:
        await client.aclose()
    assert response.text == "Hello from the rafrx test server!"
    assert len(server.requests) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("make", "suffix", "path"),
    [
        (OpenAIChatClient, "/v1", "/v1/chat/completions"),
        (OpenAIChatClient, "", "/v1/chat/completions"),
        (OpenAIResponsesClient, "/v1", "/v1/responses"),
        (AnthropicClient, "", "/v1/messages"),
    ],
)
async def test_clients_take_the_base_url_their_sdk_takes(
    server: LLMServer, make: type[LLMClient], suffix: str, path: str
) -> None:
    """README: "Clients take the `base_url` their provider's SDK takes" (openai-python's
    ends in `/v1`, anthropic's does not; the README's own example gives
    `https://api.openai.com`)."""
    client = make(server.url + suffix, api_key=SECRET, model="m")  # type: ignore[call-arg]
    try:
        response = await asyncio.wait_for(
            rafrx.collect_agent_response(
                client.stream([ChatMessage.user("Hi")]).pipe(ops.convert())
            ),
            WAIT,
        )
    finally:
        await client.aclose()
    assert [r.path for r in server.requests] == [path]
    assert response.text == "Hello from the rafrx test server!"


@pytest.mark.asyncio
async def test_disposing_while_a_tool_runs_starts_no_queued_tool_nor_approval(
    server: LLMServer,
) -> None:
    """README: "Disposing a turn stops it at once (no tool starts, no approver is asked
    after it)"."""
    entered = asyncio.Event()
    disposed = False
    started: list[str] = []
    asked_after: list[str] = []

    @tool
    async def first(x: int) -> int:
        """First."""
        started.append("first")
        entered.set()
        await asyncio.Event().wait()
        return x

    @tool
    def second(x: int) -> int:
        """Second."""
        started.append("second")
        return x

    @tool(requires_approval=True)
    def third(x: int) -> int:
        """Third."""
        started.append("third")
        return x

    def approver(request: ToolApprovalRequestEvent) -> bool:
        if disposed:
            asked_after.append(request.name)
        return True

    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("first", {"x": 1}),
                ToolCallSpec("second", {"x": 2}),
                ToolCallSpec("third", {"x": 3}),
            ]
        )
    )
    client = chat(server)
    try:
        agent = Agent(client, tools=[first, second, third], approver=approver, concurrency=1)
        subscription = agent.run("Go").subscribe(lambda _: None)
        await asyncio.wait_for(entered.wait(), WAIT)
        disposed = True
        subscription.dispose()
        await asyncio.sleep(0.3)  # the queued calls would have started by now
    finally:
        await client.aclose()
    assert started == ["first"]
    assert asked_after == []
    assert len(server.requests) == 1
