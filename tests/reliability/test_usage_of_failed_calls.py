"""A call that fails keeps the usage its provider had already reported.

Anthropic reports a call's input tokens in ``message_start`` and the rest in
``message_delta``; only the ``Finish`` of ``message_stop`` carries them on. A
failed Responses call reports its usage in ``response.failed`` itself. When the
stream fails (an error event, a dropped connection, a clean end without the
terminal marker), the dialect's ``salvage()`` gives that usage as a ``Usage``
update just before the error, so ``err.partial.usage`` counts what the call
cost (anthropic-sdk-python's ``current_message_snapshot`` keeps it too) and an
agent sums it. Usage still arrives once per LLM call: no ``Finish`` follows.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rafrx import ChatMessage, FinishReason, Usage
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import (
    IncompleteStream,
    ProviderError,
    RafrxError,
    StreamInterrupted,
)
from rafrx.sources import UpdateDecoder, from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIResponsesClient, RetryPolicy
from rafrx.testing import Fault, LLMServer, Replay, Reply, render_events

KEY = "sk-usage-0123456789abcdef"
USER = [ChatMessage.user("Tell me a story.")]


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


ANTHROPIC_START = _event(
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 5},
        },
    },
)
ANTHROPIC_TEXT = _event(
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
) + _event(
    "content_block_delta",
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
)
OVERLOADED = _event(
    "error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
)
START_USAGE = Usage(15, 1, 16, cached_tokens=5)  # (input counts cache reads, as Finish's does)

RESPONSE = {"id": "resp_1", "object": "response", "status": "in_progress", "model": "gpt-x"}
RESPONSES_FAILED = b"".join(
    _event(data["type"], data)
    for data in (
        {"type": "response.created", "response": RESPONSE},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "m1", "role": "assistant", "content": []},
        },
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "item_id": "m1",
            "delta": "Hel",
        },
        {
            "type": "response.failed",
            "response": {
                **RESPONSE,
                "status": "failed",
                "error": {"code": "server_error", "message": "The server had an error"},
                "usage": {"input_tokens": 11, "output_tokens": 2, "total_tokens": 13},
            },
        },
    )
)


def _failure(body: bytes, dialect: str) -> RafrxError:
    with pytest.raises(RafrxError) as caught:
        from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    return caught.value


@pytest.mark.parametrize("tail", [b"", OVERLOADED], ids=["no-message_stop", "error-event"])
def test_an_anthropic_failure_keeps_message_start_usage(tail: bytes) -> None:
    error = _failure(ANTHROPIC_START + ANTHROPIC_TEXT + tail, "anthropic")
    assert isinstance(error, IncompleteStream if not tail else ProviderError)
    assert error.partial is not None
    assert error.partial.text == "Hello"
    assert error.partial.usage == START_USAGE


def test_a_responses_failure_keeps_the_usage_response_failed_reports() -> None:
    error = _failure(RESPONSES_FAILED, "openai-responses")
    assert isinstance(error, ProviderError)
    assert error.partial is not None
    assert error.partial.text == "Hel"
    assert error.partial.usage == Usage(11, 2, 13)


@pytest.mark.parametrize("tail", [b"", OVERLOADED], ids=["no-message_stop", "error-event"])
def test_the_usage_comes_once_just_before_the_error_and_no_finish(tail: bytes) -> None:
    items: list[u.AgentResponseUpdate] = []
    errors: list[Exception] = []
    from_sse(ANTHROPIC_START + ANTHROPIC_TEXT + tail, "anthropic").subscribe(
        items.append, errors.append
    )
    assert len(errors) == 1
    assert items[-1] == u.Usage(START_USAGE)
    assert [type(x) for x in items].count(u.Usage) == 1
    assert not any(isinstance(x, u.Finish) for x in items)


def test_a_stream_that_completes_owes_nothing() -> None:
    body = b"".join(render_events(Reply(text="Hi", usage=Usage(7, 3, 10)), "anthropic", {}))
    decoder = UpdateDecoder("anthropic")
    updates = decoder.feed(body) + decoder.close()
    assert updates[-1] == u.Finish(FinishReason.STOP, Usage(7, 3, 10))
    assert decoder.salvage() == []
    assert not any(isinstance(x, u.Usage) for x in updates)


def test_salvage_gives_the_usage_once_and_nothing_before_any_usage() -> None:
    assert UpdateDecoder("anthropic").salvage() == []  # (nothing received: nothing owed)
    decoder = UpdateDecoder("anthropic")
    decoder.feed(ANTHROPIC_START)
    assert decoder.salvage() == [u.Usage(START_USAGE)]
    assert decoder.salvage() == []
    assert UpdateDecoder("openai-chat").salvage() == []  # (nothing received: nothing owed)


def test_a_subscriber_error_is_reported_without_a_usage_after_it() -> None:
    """A subscriber that raises is not sent more items: the error is its own."""
    seen: list[u.AgentResponseUpdate] = []
    errors: list[Exception] = []
    bug = ValueError("subscriber bug")

    def on_next(update: u.AgentResponseUpdate) -> None:
        seen.append(update)
        if isinstance(update, u.TextDelta):
            raise bug

    from_sse(ANTHROPIC_START + ANTHROPIC_TEXT, "anthropic").subscribe(on_next, errors.append)
    assert errors == [bug]
    assert not any(isinstance(x, u.Usage) for x in seen)


@pytest.mark.asyncio
@pytest.mark.parametrize("raises", [False, True], ids=["stream-error", "subscriber-error"])
async def test_an_async_body_salvages_only_a_stream_error(raises: bool) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield ANTHROPIC_START
        await asyncio.sleep(0)
        yield ANTHROPIC_TEXT
        raise ConnectionResetError("the peer went away")

    seen: list[u.AgentResponseUpdate] = []
    done: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
    bug = ValueError("subscriber bug")

    def on_next(update: u.AgentResponseUpdate) -> None:
        seen.append(update)
        if raises and isinstance(update, u.TextDelta):
            raise bug

    from_sse(body(), "anthropic").subscribe(on_next, done.set_result)
    error = await asyncio.wait_for(done, 5)
    if raises:
        assert error is bug
        assert not any(isinstance(x, u.Usage) for x in seen)
    else:
        assert isinstance(error, ConnectionResetError)
        assert seen[-1] == u.Usage(START_USAGE)


async def _collect_failure(stream: Any) -> RafrxError:
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    stream.pipe(ops.convert(), ops.aggregate()).subscribe(
        done.set_result, lambda err: done.set_result(err)
    )
    result = await asyncio.wait_for(done, 10)
    assert isinstance(result, RafrxError), repr(result)
    return result


@pytest.mark.asyncio
async def test_an_anthropic_connection_dropped_mid_answer_keeps_the_input_tokens(
    llm_server: LLMServer,
) -> None:
    body = ANTHROPIC_START + ANTHROPIC_TEXT + b"event: content_block_delta\ndata: {"
    llm_server.enqueue(Fault.drop_after(len(body), body=Replay(body + b'"x": 1}\n\n')))
    async with AnthropicClient(llm_server.url, KEY) as client:
        error = await _collect_failure(client.stream(USER))
    assert isinstance(error, StreamInterrupted)
    assert error.partial is not None
    assert (error.partial.text, error.partial.usage) == ("Hello", START_USAGE)
    await llm_server.wait_connections_closed()


@pytest.mark.asyncio
async def test_a_failed_responses_call_over_http_keeps_its_usage(llm_server: LLMServer) -> None:
    llm_server.enqueue(Reply(text="Hello there", finish="error", usage=Usage(7, 3, 10)))
    async with OpenAIResponsesClient(llm_server.url, KEY) as client:
        error = await _collect_failure(client.stream(USER))
    assert isinstance(error, ProviderError)
    assert error.partial is not None
    assert error.partial.text == "Hello there"
    assert error.partial.usage == Usage(7, 3, 10, reasoning_tokens=0, cached_tokens=0)


@pytest.mark.asyncio
async def test_a_retried_attempt_owes_nothing(llm_server: LLMServer) -> None:
    """An attempt that failed before any content was retried: it was never seen, and
    neither is its usage when the next attempt fails before its body."""
    llm_server.enqueue(Replay(ANTHROPIC_START + OVERLOADED))
    llm_server.enqueue(Fault.status(400, message="bad request"))
    retry = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, jitter=False)
    seen: list[u.AgentResponseUpdate] = []
    done: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
    async with AnthropicClient(llm_server.url, KEY, retry=retry) as client:
        client.stream(USER).subscribe(seen.append, done.set_result)
        error = await asyncio.wait_for(done, 10)
    assert getattr(error, "status", None) == 400
    assert seen == []
