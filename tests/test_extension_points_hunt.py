"""Extending rafrx through its documented extension points, as a third party would.

The user here writes what rafrx does not ship, using only the documented
hooks: a :class:`~rafrx.sources.dialects.Dialect` of their own for a new SSE
format (a Gemini-native-like stream with no ``[DONE]``: the chunk with a
``finishReason`` ends it), registered in ``DIALECTS`` or passed as a factory;
an :class:`~rafrx.sources.clients.LLMClient` subclass for a new HTTP API
(key in a custom header or in the URL's query); a ``ChatClient`` that is no
``LLMClient`` (scripted, threaded, timer-driven); operators of their own
between rafrx's; and tools that are not made with ``@tool``.

What is pinned: such extensions get exactly what the built-in dialects and
clients get, from ``convert()``/``aggregate()``, the HTTP machinery (typed
errors keeping what was received, retries before content only, idle
timeouts, disposal closing the connection, the key never shown), the agent
loop (tools, approvals, errors with ``.partial``), the recorder and the
notebook view. HTTP runs for real over 127.0.0.1 (``rafrx.testing``).
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import reactivex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.disposable import Disposable
from reactivex.scheduler.eventloop import AsyncIOScheduler

import rafrx
from rafrx import Agent, ChatMessage, FinishReason, Usage, collect_agent_response, tool
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import (
    HTTPStatusError,
    IdleTimeout,
    IncompleteStream,
    MalformedEvent,
    ProviderError,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.notebook import live, text_display
from rafrx.recorder import record, record_sse, replay
from rafrx.sources import DIALECTS, UpdateDecoder, from_sse, get_dialect
from rafrx.sources.clients import (
    LLMClient,
    OpenAIChatClient,
    RetryPolicy,
    Timeouts,
    ToolDefinition,
    ToolLike,
    tool_schema,
)
from rafrx.sources.dialects._common import get_list, load_object, provider_error
from rafrx.sse import ServerSentEvent
from rafrx.testing import REDACTED, Fault, LLMServer, Replay
from rafrx.tools import Tool

KEY = "gk-test-0123456789abcdefXYZ"
USER = [ChatMessage.user("Hi")]

# ---------------------------------------------------------------- a dialect of one's own

_FINISH = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
}


class GeminiLikeDialect:
    """Gemini's ``streamGenerateContent?alt=sse`` shape: no ``[DONE]``; the chunk with
    a ``finishReason`` (and the usage) ends the stream; function calls come whole."""

    def __init__(self) -> None:
        self._done = False
        self._finish: FinishReason | None = None
        self._usage: Usage | None = None
        self._calls = 0
        self._meta = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: ServerSentEvent) -> list[u.AgentResponseUpdate]:
        if self._done:
            return []
        data = load_object(event)
        if "error" in data:
            raise provider_error(event, data["error"])
        out: list[u.AgentResponseUpdate] = []
        if not self._meta and data.get("responseId"):
            self._meta = True
            out.append(u.ResponseMetadata(data["responseId"], data.get("modelVersion")))
        for candidate in get_list(event, data, "candidates"):
            for part in (candidate.get("content") or {}).get("parts") or []:
                if part.get("text"):
                    delta = part["text"]
                    out.append(
                        u.ReasoningDelta(delta) if part.get("thought") else u.TextDelta(delta)
                    )
                if "functionCall" in part:
                    call = part["functionCall"]
                    self._calls += 1
                    call_id = call.get("id") or f"gem_{self._calls}"
                    out += [
                        u.ToolCallStart(call_id, call["name"]),
                        u.ToolCallArgs(call_id, json.dumps(call.get("args", {}))),
                        u.ToolCallEnd(call_id),
                    ]
            if candidate.get("finishReason"):
                reason = _FINISH.get(candidate["finishReason"], FinishReason.OTHER)
                self._finish = FinishReason.TOOL_CALLS if self._calls else reason
        usage = data.get("usageMetadata")
        if usage:
            prompt, completion = (
                usage.get("promptTokenCount", 0),
                usage.get("candidatesTokenCount", 0),
            )
            self._usage = Usage(
                prompt, completion, usage.get("totalTokenCount", prompt + completion)
            )
        if self._finish is not None:
            self._done = True
        return out

    def close(self) -> list[u.AgentResponseUpdate]:
        if self._finish is None:
            raise IncompleteStream("the stream ended before a finishReason")
        return [u.Finish(self._finish, usage=self._usage)]

    def salvage(self) -> list[u.AgentResponseUpdate]:
        return [u.Usage(self._usage)] if self._usage is not None else []


class HoldingDialect(GeminiLikeDialect):
    """The same format, but nothing comes out before :meth:`close` (a dialect that
    must see the whole answer first), and it never says ``done``."""

    def __init__(self) -> None:
        super().__init__()
        self._held: list[u.AgentResponseUpdate] = []

    @property
    def done(self) -> bool:
        return False

    def feed(self, event: ServerSentEvent) -> list[u.AgentResponseUpdate]:
        self._held += super().feed(event)
        return []

    def close(self) -> list[u.AgentResponseUpdate]:
        return [*self._held, *super().close()]


class LegacyDeltaDialect(GeminiLikeDialect):
    """The same format, its calls as legacy ``ToolCallDelta`` pieces (as openai-chat)."""

    def feed(self, event: ServerSentEvent) -> list[u.AgentResponseUpdate]:
        out: list[u.AgentResponseUpdate] = []
        index: dict[str, int] = {}
        for update in super().feed(event):
            if isinstance(update, u.ToolCallStart):
                index[update.id] = len(index) + self._calls
                out.append(u.ToolCallDelta(index[update.id], update.id, update.name))
            elif isinstance(update, u.ToolCallArgs):
                half = len(update.args_delta) // 2
                for piece in (update.args_delta[:half], update.args_delta[half:]):
                    out.append(u.ToolCallDelta(index[update.id], arguments_delta=piece))
            elif not isinstance(update, u.ToolCallEnd):
                out.append(update)
        return out


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\r\n\r\n"


def text_body(*texts: str, usage: tuple[int, int] = (3, 2), finish: str = "STOP") -> bytes:
    chunks = [
        event(
            {
                "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}}],
                "responseId": "resp-1",
                "modelVersion": "gemini-like-1",
            }
        )
        for text in texts
    ]
    chunks.append(
        event(
            {
                "candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": finish}],
                "usageMetadata": {
                    "promptTokenCount": usage[0],
                    "candidatesTokenCount": usage[1],
                    "totalTokenCount": sum(usage),
                },
            }
        )
    )
    return b"".join(chunks)


def call_body(*calls: tuple[str, dict[str, Any]], text: str = "") -> bytes:
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts += [{"functionCall": {"name": name, "args": args}} for name, args in calls]
    return event(
        {
            "candidates": [{"content": {"parts": parts}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1},
        }
    )


def error_event(code: int = 503, message: str = "The model is overloaded.") -> bytes:
    status = "UNAVAILABLE" if code == 503 else "INVALID_ARGUMENT"
    return event({"error": {"code": code, "message": message, "status": status}})


def respond(updates: reactivex.Observable[Any]) -> rafrx.AgentResponse:
    result: rafrx.AgentResponse = updates.pipe(ops.convert(), ops.aggregate()).run()
    return result


def failure(updates: reactivex.Observable[Any]) -> RafrxError:
    with pytest.raises(RafrxError) as info:
        respond(updates)
    return info.value


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> str:
    """The dialect registered by name, as DIALECTS' docstring says (undone after)."""
    monkeypatch.setitem(DIALECTS, "gemini-like", GeminiLikeDialect)
    return "gemini-like"


# ---------------------------------------------------------------- the dialect, pure


def test_a_dialect_factory_gives_text_metadata_usage_and_finish() -> None:
    response = respond(from_sse(text_body("Hel", "lo"), GeminiLikeDialect))
    assert (response.text, response.id, response.model) == ("Hello", "resp-1", "gemini-like-1")
    assert response.usage == Usage(3, 2, 5)
    assert response.finish_reason is FinishReason.STOP


def test_a_registered_dialect_works_by_name_everywhere(registered: str) -> None:
    body = text_body("Hi")
    assert respond(from_sse(body, registered)).text == "Hi"
    decoder = UpdateDecoder(registered)
    assert decoder.feed(body)[1] == u.TextDelta("Hi")
    assert decoder.done
    assert isinstance(get_dialect(registered), GeminiLikeDialect)
    with pytest.raises(ValueError, match="'gemini-like'"):  # listed among the known ones
        get_dialect("gemini")


def test_tool_calls_from_a_dialect_become_tool_calls_with_a_tool_calls_finish() -> None:
    body = call_body(("get_weather", {"city": "Paris"}), ("now", {}), text="Checking.")
    response = respond(from_sse(body, GeminiLikeDialect))
    assert response.text == "Checking."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("gem_1", "get_weather", {"city": "Paris"}),
        ("gem_2", "now", {}),
    ]
    assert all(call.complete for call in response.tool_calls)
    assert response.finish_reason is FinishReason.TOOL_CALLS
    (assistant,) = response.turn_transcript
    assert assistant.tool_calls == response.tool_calls


def test_legacy_tool_call_deltas_from_a_dialect_give_the_same_calls() -> None:
    body = call_body(("get_weather", {"city": "Paris"}), ("now", {}))
    started = respond(from_sse(body, GeminiLikeDialect))
    legacy = respond(from_sse(body, LegacyDeltaDialect))
    assert legacy.tool_calls == started.tool_calls
    assert legacy.finish_reason is started.finish_reason


def test_a_dialect_that_holds_everything_until_close_gives_the_same_response() -> None:
    body = text_body("Hel", "lo") + call_body(("now", {}))
    assert respond(from_sse(body, HoldingDialect)) == respond(from_sse(body, GeminiLikeDialect))


def test_bytes_after_the_dialects_done_are_never_fed() -> None:
    fed: list[str] = []

    class Watching(GeminiLikeDialect):
        def feed(self, event: ServerSentEvent) -> list[u.AgentResponseUpdate]:
            fed.append(event.data)
            return super().feed(event)

    body = text_body("Hi") + b"data: {not json at all\n\n" + error_event()
    assert respond(from_sse(body, Watching)).text == "Hi"
    assert len(fed) == 2


def test_a_truncated_stream_is_incomplete_with_the_text_and_the_salvaged_usage() -> None:
    body = text_body("Hel", "lo")
    cut = body[: body.rindex(b"data:")]  # without the finishing chunk
    error = failure(from_sse(cut, GeminiLikeDialect))
    assert isinstance(error, IncompleteStream)
    assert error.partial is not None
    assert error.partial.text == "Hello"
    assert error.partial.interrupted


def test_salvage_of_a_dialect_delivers_usage_before_a_provider_error() -> None:
    usage_only = event({"usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 1}})
    body = text_body("Hel")[: text_body("Hel").rindex(b"data:")] + usage_only + error_event()
    error = failure(from_sse(body, GeminiLikeDialect))
    assert isinstance(error, ProviderError)
    assert (error.message, error.retryable) == ("The model is overloaded.", True)
    assert error.partial is not None
    assert error.partial.text == "Hel"
    assert error.partial.usage == Usage(7, 1, 8)
    assert error.partial.finish_reason is FinishReason.ERROR


def test_an_event_that_fails_in_a_dialect_keeps_the_updates_before_it_in_the_same_chunk() -> None:
    whole = text_body("Hel", "lo")
    body = whole[: whole.rindex(b"data:")] + b"data: {broken\n\n"  # one chunk, junk last
    one_piece = failure(from_sse(body, GeminiLikeDialect))
    assert isinstance(one_piece, MalformedEvent)
    assert one_piece.raw == "{broken"
    assert one_piece.partial is not None
    assert one_piece.partial.text == "Hello"


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
    holding=st.booleans(),
)
def test_any_chunking_of_a_dialects_body_gives_the_same_response(
    texts: list[str], cuts: list[int], holding: bool
) -> None:
    body = text_body(*texts) + call_body(("f", {"q": texts[0]}))
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    dialect = HoldingDialect if holding else GeminiLikeDialect
    whole = respond(from_sse(body, GeminiLikeDialect))
    assert respond(from_sse(pieces, dialect)) == whole
    assert whole.text == "".join(texts)


def _identity(x: Any) -> Any:
    return x


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=4),
    end=st.sampled_from(["finish", "cut", "error"]),
)
def test_operators_of_ones_own_between_rafrxs_change_nothing(texts: list[str], end: str) -> None:
    """The fused ``convert()`` + ``aggregate()`` loop and the same operators with a
    user's ``rx.map`` between each give equal responses, or errors of the same class
    and with equal ``.partial``."""
    body = text_body(*texts)
    if end != "finish":
        body = body[: body.rindex(b"data:")] + (error_event() if end == "error" else b"")

    def run(fused: bool) -> tuple[Any, ...]:
        source = from_sse(body, GeminiLikeDialect)
        if fused:
            pipeline = source.pipe(ops.convert(), ops.aggregate())
        else:
            pipeline = source.pipe(
                rx.map(_identity),
                ops.split_legacy_delta(),
                rx.map(_identity),
                ops.accumulate_tool_calls(),
                rx.map(_identity),
                ops.parse_args_stream(),
                ops.flush_tool_calls(),
                rx.map(_identity),
                ops.aggregate(),
            )
        try:
            return ("ok", pipeline.run())
        except RafrxError as error:
            return (type(error), error.message, error.partial)

    assert run(fused=True) == run(fused=False)


# ---------------------------------------------------------------- operators of one's own


def test_dropping_usage_updates_between_from_sse_and_convert() -> None:
    def without_usage(update: u.AgentResponseUpdate) -> u.AgentResponseUpdate:
        if isinstance(update, u.Finish):
            return u.Finish(update.finish_reason)
        return update

    body = text_body("Hi")
    kept = respond(from_sse(body, GeminiLikeDialect))
    dropped = respond(
        from_sse(body, GeminiLikeDialect).pipe(
            rx.filter(lambda x: not isinstance(x, u.Usage)), rx.map(without_usage)
        )
    )
    assert dropped.usage is None
    assert (dropped.text, dropped.finish_reason) == (kept.text, kept.finish_reason)


def test_a_tool_result_injected_by_ones_operator_is_the_calls_result() -> None:
    def answer_calls(source: reactivex.Observable[Any]) -> reactivex.Observable[Any]:
        def on_each(update: Any) -> list[Any]:
            if isinstance(update, u.ToolCallEnd):
                return [update, u.ToolCalled(update.id, result="21 °C")]
            return [update]

        # concat_map, not flat_map: under run() each inner from_iterable runs on a thread
        # of its own (the subscription's NewThreadScheduler), and flat_map keeps no order
        # between them (an argument fragment could pass its call's start).
        return source.pipe(rx.concat_map(lambda x: reactivex.from_iterable(on_each(x))))

    body = call_body(("get_weather", {"city": "Paris"}))
    response = respond(from_sse(body, GeminiLikeDialect).pipe(answer_calls))
    assert [(m.tool_call_id, m.content) for m in response.tool_messages] == [("gem_1", "21 °C")]
    assistant, result = response.turn_transcript
    assert assistant.tool_calls == response.tool_calls
    assert result.tool_call_id == "gem_1"


def test_an_operator_rewriting_text_between_convert_and_aggregate() -> None:
    def shout(result: rafrx.AgentResponseResult) -> rafrx.AgentResponseResult:
        contents = tuple(
            rafrx.TextContent(c.text.upper()) if isinstance(c, rafrx.TextContent) else c
            for c in result.contents
        )
        return rafrx.AgentResponseResult(
            result.id, result.model, result.finish_reason, contents, result.events
        )

    response = from_sse(text_body("Hel", "lo"), GeminiLikeDialect).pipe(
        ops.convert(), rx.map(shout), ops.aggregate()
    )
    assert response.run().text == "HELLO"


# ---------------------------------------------------------------- an LLMClient of one's own


class GeminiLikeClient(LLMClient):
    """A client for the new API: its dialect by name, its key in its own header."""

    dialect = "gemini-like"
    endpoint = "chat/completions"  # (where the local test server listens)
    default_model = "gemini-like-1"

    def _auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key}

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        declarations = [
            {"name": name, "description": description, "parameters": parameters}
            for name, description, parameters in map(tool_schema, tools)
        ]
        return {
            "model": self.model,
            "contents": [
                {"role": m.role.value, "parts": [{"text": m.content}]}
                for m in messages
                if m.content
            ],
            **({"tools": [{"functionDeclarations": declarations}]} if declarations else {}),
        }


class FactoryClient(GeminiLikeClient):
    """The same client with its dialect given as a factory, not registered."""

    dialect = GeminiLikeDialect  # type: ignore[assignment]


async def collect(client: LLMClient, **params: Any) -> rafrx.AgentResponse:
    return await collect_agent_response(client.stream(USER, **params).pipe(ops.convert()))


async def fail(client: LLMClient) -> RafrxError:
    with pytest.raises(RafrxError) as info:
        await collect(client)
    return info.value


def shows_no_key(error: BaseException) -> bool:
    texts = [str(error), repr(error), str(getattr(error, "body", "")), str(error.args)]
    return not any(KEY in text for text in texts)


@pytest.mark.asyncio
async def test_a_subclass_streams_with_its_registered_dialect_and_payload(
    llm_server: LLMServer, registered: str
) -> None:
    llm_server.enqueue(Replay(text_body("Hel", "lo"), chunk_size=5))
    async with GeminiLikeClient(llm_server.url, KEY) as client:
        response = await collect(client)
    assert (response.text, response.usage) == ("Hello", Usage(3, 2, 5))
    (request,) = llm_server.requests
    assert request.json == {
        "model": "gemini-like-1",
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "stream": True,
    }
    assert request.headers["x-goog-api-key"] == REDACTED  # sent (and recorded redacted)
    assert "Authorization" not in request.headers


@pytest.mark.asyncio
async def test_a_subclass_may_name_a_dialect_factory(llm_server: LLMServer) -> None:
    llm_server.enqueue(Replay(call_body(("now", {}), text="Let me see.")))
    async with FactoryClient(llm_server.url, KEY) as client:
        response = await collect(client)
    assert response.text == "Let me see."
    assert [c.name for c in response.tool_calls] == ["now"]


@pytest.mark.asyncio
async def test_a_key_in_a_custom_header_never_shows(llm_server: LLMServer, registered: str) -> None:
    client = GeminiLikeClient(llm_server.url, KEY)
    assert KEY not in repr(client)
    echoed = {"error": {"code": 400, "message": f"API key not valid: {KEY}"}}
    llm_server.enqueue(Fault.status(400, body=echoed))
    error = await fail(client)
    assert isinstance(error, HTTPStatusError)
    assert error.status == 400
    assert "API key not valid" in error.message
    assert shows_no_key(error)
    cut = text_body("x")
    llm_server.enqueue(Replay(cut[: cut.rindex(b"data:")] + error_event(message=f"bad {KEY}")))
    in_band = await fail(client)  # (a dialect's ProviderError goes through the same redaction)
    assert isinstance(in_band, ProviderError)
    assert shows_no_key(in_band)
    await client.aclose()


@pytest.mark.asyncio
async def test_a_key_in_the_urls_query_never_shows(llm_server: LLMServer, registered: str) -> None:
    client = GeminiLikeClient(f"{llm_server.url}/v1?key={KEY}&alt=sse")
    assert KEY not in repr(client)
    body = text_body("aaaa", "bbbb", "cccc")
    llm_server.enqueue(Fault.drop_after(body.index(b"data:", 5) + 20, body=Replay(body)))
    dropped = await fail(client)
    assert isinstance(dropped, StreamInterrupted)
    assert shows_no_key(dropped)
    assert dropped.partial is not None
    assert dropped.partial.text == "aaaa"
    llm_server.enqueue(Fault.status(403, message=f"key={KEY} is not allowed"))
    refused = await fail(client)
    assert isinstance(refused, HTTPStatusError)
    assert shows_no_key(refused)
    await client.aclose()
    assert llm_server.requests[0].query.get("alt") == "sse"


@pytest.mark.asyncio
async def test_retries_come_for_free_and_only_before_content(
    llm_server: LLMServer, registered: str
) -> None:
    retry = RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False)
    async with GeminiLikeClient(llm_server.url, KEY, retry=retry) as client:
        llm_server.enqueue(Replay(error_event()), Replay(text_body("ok")))
        assert (await collect(client)).text == "ok"
        assert len(llm_server.requests) == 2
        half = text_body("half")
        llm_server.enqueue(Replay(half[: half.rindex(b"data:")] + error_event()))
        error = await fail(client)  # after content: never sent again (no duplicates)
    assert isinstance(error, ProviderError)
    assert error.retryable
    assert error.partial is not None
    assert error.partial.text == "half"
    assert len(llm_server.requests) == 3


@pytest.mark.asyncio
async def test_the_idle_timeout_covers_a_subclass(llm_server: LLMServer, registered: str) -> None:
    body = text_body("first", "second")
    stall = Fault.stall(5.0, after_bytes=body.index(b"data:", 5), body=Replay(body))
    llm_server.enqueue(stall)
    async with GeminiLikeClient(llm_server.url, KEY, timeouts=Timeouts(idle=0.2)) as client:
        error = await fail(client)
    assert isinstance(error, IdleTimeout)
    assert error.partial is not None
    assert error.partial.text == "first"


@pytest.mark.asyncio
async def test_disposing_a_subclass_stream_closes_the_connection(
    llm_server: LLMServer, registered: str
) -> None:
    llm_server.enqueue(Replay(text_body(*["word "] * 200), chunk_size=16, delay=0.01))
    client = GeminiLikeClient(llm_server.url, KEY)
    got: list[Any] = []
    first = asyncio.Event()

    def on_next(update: Any) -> None:
        got.append(update)
        first.set()

    subscription = client.stream(USER).subscribe(on_next)
    await asyncio.wait_for(first.wait(), 5)
    subscription.dispose()
    seen = len(got)
    await llm_server.wait_connections_closed(timeout=5)
    await asyncio.sleep(0.05)
    assert len(got) == seen  # nothing after disposal
    assert llm_server.connections_closed == llm_server.connections_opened == 1
    await client.aclose()


@pytest.mark.asyncio
async def test_aclose_ends_a_subclass_stream_with_a_transport_error(
    llm_server: LLMServer, registered: str
) -> None:
    llm_server.enqueue(Replay(text_body(*["word "] * 200), chunk_size=16, delay=0.01))
    client = GeminiLikeClient(llm_server.url, KEY)
    ended: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
    client.stream(USER).subscribe(on_error=ended.set_result)
    await asyncio.sleep(0.1)
    await client.aclose()
    error = await asyncio.wait_for(ended, 5)
    assert isinstance(error, TransportError)
    assert not error.retryable


@pytest.mark.asyncio
async def test_an_agent_runs_a_tool_loop_over_a_subclass(
    llm_server: LLMServer, registered: str
) -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    llm_server.enqueue(Replay(call_body(("add", {"a": 2, "b": 3}))), Replay(text_body("5.")))
    async with GeminiLikeClient(llm_server.url, KEY, tool_choice="required") as client:
        response = await Agent(client, tools=[add]).send("2 + 3?")
    assert response.text == "5."
    assert [m.content for m in response.tool_messages] == ["5"]
    first, second = llm_server.requests
    declared = first.json["tools"][0]["functionDeclarations"][0]
    assert (declared["name"], declared["description"]) == ("add", "Add two numbers.")
    assert first.json["tool_choice"] == "required"
    assert second.json["tool_choice"] == "auto"  # the agent let the model answer
    assert {"role": "tool", "parts": [{"text": "5"}]} in second.json["contents"]


# ---------------------------------------------------------------- a ChatClient of one's own


class Scripted:
    """A ChatClient that is no LLMClient: one list of updates per LLM call."""

    def __init__(self, *calls: list[Any]) -> None:
        self.calls = list(calls)
        self.seen: list[list[ChatMessage]] = []

    def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None = None
    ) -> reactivex.Observable[Any]:
        self.seen.append(list(messages))
        return self.source(self.calls.pop(0))

    def source(self, updates: list[Any]) -> reactivex.Observable[Any]:
        return reactivex.from_iterable(updates)


def call(call_id: str, name: str, arguments: dict[str, Any]) -> list[Any]:
    return [
        u.ToolCallStart(call_id, name),
        u.ToolCallArgs(call_id, json.dumps(arguments)),
        u.ToolCallEnd(call_id),
    ]


ANSWER = [u.TextDelta("Done."), u.Finish(FinishReason.STOP)]


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.mark.asyncio
async def test_a_chat_client_drives_a_multi_step_loop_with_approvals() -> None:
    client = Scripted(
        [*call("c1", "delete", {"path": "a.txt"}), u.Finish(FinishReason.TOOL_CALLS)],
        [*call("c2", "delete", {"path": "b.txt"}), u.Finish(FinishReason.TOOL_CALLS)],
        ANSWER,
    )
    asked: list[str] = []

    async def approver(request: rafrx.ToolApprovalRequestEvent) -> bool:
        asked.append(request.arguments["path"])
        return request.arguments["path"] == "a.txt"

    response = await Agent(client, tools=[delete], approver=approver).send("Clean up.")
    assert asked == ["a.txt", "b.txt"]
    first, second = (m.content for m in response.tool_messages)
    assert first == "deleted a.txt"
    assert "b.txt" not in second  # denied: never ran
    assert response.tool_messages[1].is_error
    assert len(client.seen) == 3
    assert [m.role.value for m in client.seen[2]][-4:] == ["assistant", "tool", "assistant", "tool"]


class Threaded(Scripted):
    """Emits from a worker thread, brought back to the loop with ``observe_on``
    (what ChatClient's docstring asks of such a client)."""

    def __init__(self, *calls: list[Any], back_to_loop: bool = True) -> None:
        super().__init__(*calls)
        self.back_to_loop = back_to_loop
        self.threads: list[threading.Thread] = []

    def source(self, updates: list[Any]) -> reactivex.Observable[Any]:
        def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
            def run() -> None:
                for update in updates:
                    observer.on_next(update)
                observer.on_completed()

            thread = threading.Thread(target=run)
            self.threads.append(thread)
            thread.start()
            return Disposable()

        created = reactivex.create(subscribe)
        if not self.back_to_loop:
            return created
        return created.pipe(rx.observe_on(AsyncIOScheduler(asyncio.get_running_loop())))


@pytest.mark.asyncio
async def test_a_chat_client_emitting_from_a_thread_gives_what_a_sync_one_does() -> None:
    turns = ([*call("c1", "add", {"a": 2, "b": 3}), u.Finish(FinishReason.TOOL_CALLS)], ANSWER)
    threaded = Threaded(*turns)
    response = await Agent(threaded, tools=[add], id="a").send("2 + 3?")
    expected = await Agent(Scripted(*turns), tools=[add], id="a").send("2 + 3?")
    for thread in threaded.threads:
        thread.join(5)
    assert response == expected
    assert [m.content for m in response.tool_messages] == ["5"]


@pytest.mark.asyncio
async def test_a_thread_emitting_client_without_observe_on_fails_fast_not_hangs() -> None:
    client = Threaded(
        [*call("c1", "add", {"a": 2, "b": 3}), u.Finish(FinishReason.TOOL_CALLS)],
        ANSWER,
        back_to_loop=False,
    )
    with pytest.raises(RuntimeError, match="running asyncio loop"):
        await asyncio.wait_for(Agent(client, tools=[add]).send("2 + 3?"), 5)
    for thread in client.threads:
        thread.join(5)


@pytest.mark.asyncio
async def test_a_timer_driven_chat_client_on_the_loop() -> None:
    class Timed(Scripted):
        def source(self, updates: list[Any]) -> reactivex.Observable[Any]:
            scheduler = AsyncIOScheduler(asyncio.get_running_loop())
            return reactivex.interval(0.005, scheduler=scheduler).pipe(
                rx.take(len(updates)), rx.map(lambda i: updates[i])
            )

    client = Timed(
        [u.TextDelta("Let me add. "), *call("c1", "add", {"a": 1, "b": 1})],  # (no Finish)
        ANSWER,
    )
    response = await Agent(client, tools=[add]).send("1 + 1?")
    assert response.text == "Let me add. Done."
    assert [m.content for m in response.tool_messages] == ["2"]


@pytest.mark.asyncio
async def test_a_rafrx_error_mid_stream_keeps_the_turn_so_far() -> None:
    class Failing(Scripted):
        def source(self, updates: list[Any]) -> reactivex.Observable[Any]:
            if updates:
                return super().source(updates)
            return reactivex.concat(
                reactivex.from_iterable([u.TextDelta("The sum")]),
                reactivex.throw(StreamInterrupted("peer reset")),
            )

    client = Failing([*call("c1", "add", {"a": 2, "b": 3}), u.Finish(FinishReason.TOOL_CALLS)], [])
    with pytest.raises(StreamInterrupted) as info:
        await Agent(client, tools=[add]).send("2 + 3?")
    partial = info.value.partial
    assert partial is not None
    assert [m.content for m in partial.tool_messages] == ["5"]
    assert partial.text == "The sum"
    assert partial.interrupted


@pytest.mark.asyncio
async def test_disposing_a_turn_disposes_the_chat_clients_stream() -> None:
    disposed = asyncio.Event()

    class Endless(Scripted):
        def source(self, updates: list[Any]) -> reactivex.Observable[Any]:
            def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
                observer.on_next(u.TextDelta("thinking"))
                return Disposable(disposed.set)

            return reactivex.create(subscribe)

    seen: list[Any] = []
    subscription = Agent(Endless([])).run("Hi").subscribe(seen.append)
    await asyncio.sleep(0.05)
    subscription.dispose()
    await asyncio.wait_for(disposed.wait(), 2)
    assert len(seen) == 1


# ---------------------------------------------------------------- tools not made with @tool


class WeatherDefinition:
    """A tool definition of one's own (an MCP tool, say): the ToolDefinition protocol."""

    name = "get_weather"
    description = "The weather in a city."
    parameters: dict[str, Any] = {  # noqa: RUF012 - a definition, read only
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }


@pytest.mark.asyncio
async def test_a_tool_definition_object_is_offered_by_a_client_as_it_says(
    llm_server: LLMServer,
) -> None:
    definition = WeatherDefinition()
    assert isinstance(definition, ToolDefinition)
    llm_server.enqueue(Replay(b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n'))
    async with OpenAIChatClient(llm_server.url, KEY, model="m") as client:
        await collect_agent_response(client.stream(USER, [definition]).pipe(ops.convert()))
    (request,) = llm_server.requests
    assert request.json["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WeatherDefinition.parameters,
            },
        }
    ]


@pytest.mark.asyncio
async def test_a_hand_built_tool_runs_with_its_schema_validated() -> None:
    ran: list[dict[str, Any]] = []

    def weather(**arguments: Any) -> dict[str, Any]:
        ran.append(arguments)
        return {"city": arguments["city"], "sky": "sunny"}

    hand_built = Tool(
        WeatherDefinition.name,
        WeatherDefinition.description,
        WeatherDefinition.parameters,
        weather,
    )
    client = Scripted(
        [
            *call("c1", "get_weather", {"city": "Paris"}),
            *call("c2", "get_weather", {"town": "Oslo"}),
            u.Finish(FinishReason.TOOL_CALLS),
        ],
        ANSWER,
    )
    response = await Agent(client, tools=[hand_built]).send("Weather?")
    good, bad = response.tool_messages
    assert ran == [{"city": "Paris"}]  # the call without "city" never ran
    assert json.loads(good.content) == {"city": "Paris", "sky": "sunny"}  # sent as JSON
    assert bad.is_error
    assert "city" in bad.content


# ---------------------------------------------------------------- recorder and notebook


@pytest.mark.asyncio
async def test_a_subclass_stream_records_and_replays_equal(
    llm_server: LLMServer, registered: str, tmp_path: Path
) -> None:
    llm_server.enqueue(Replay(call_body(("now", {}), text="One moment.")))
    path = tmp_path / "turn.jsonl"
    async with GeminiLikeClient(llm_server.url, KEY) as client:
        live_items = await client.stream(USER).pipe(lambda s: record(s, path), rx.to_list())
    replayed = replay(path).pipe(rx.to_list()).run()
    assert replayed == live_items
    assert respond(replay(path)).tool_calls[0].name == "now"


@pytest.mark.asyncio
async def test_a_raw_recording_replays_with_the_registered_dialect_it_names(
    registered: str, tmp_path: Path
) -> None:
    path = tmp_path / "turn.sse"
    body = text_body("Hel", "lo")

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 40):
            yield body[start : start + 40]

    async for _ in record_sse(chunks(), path, meta={"dialect": registered}):
        pass
    response = respond(replay(path, dialect="auto"))
    assert (response.text, response.usage) == ("Hello", Usage(3, 2, 5))


@pytest.mark.asyncio
async def test_the_live_view_treats_a_dialects_updates_like_the_built_in_ones() -> None:
    printed = io.StringIO()
    body = call_body(("get_weather", {"city": "Paris"}), text="Checking. ")
    response = await live(from_sse(body, GeminiLikeDialect), display=text_display(printed))
    assert response == respond(from_sse(body, GeminiLikeDialect))
    assert "get_weather" in printed.getvalue()
    assert "Checking." in printed.getvalue()
