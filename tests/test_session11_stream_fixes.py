"""Regression tests of session 11's stream fixes (a stall after the finish reason, and
the items that follow).

Each failed on the commit before its fix, for the reason its docstring gives. Every
HTTP exchange is real aiohttp over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import reactivex

from rafrx import ChatMessage, FinishReason, RafrxError, collect_agent_response
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import IdleTimeout, IncompleteStream, MalformedEvent
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, Timeouts
from rafrx.sources.dialects import AnthropicDialect, Dialect, OpenAIChatDialect
from rafrx.sse import ServerSentEvent
from rafrx.testing import Fault, LLMServer

USER = [ChatMessage.user("hi")]


def stalling(server: LLMServer, body: bytes) -> None:
    """Have ``server`` send ``body`` and then nothing (the client's idle timeout ends it)."""
    server.enqueue(Fault.stall(30, after_bytes=len(body), body=body))


async def failure(results: object) -> RafrxError:
    try:
        await collect_agent_response(results)  # type: ignore[arg-type]
    except RafrxError as err:
        return err
    raise AssertionError("the call succeeded")


def chat_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + json.dumps({**chunk, **extra}).encode() + b"\n\n"


def anthropic_event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


# ---------------------------------------------------------------- item 1: stall after finish


@pytest.mark.asyncio
async def test_a_chat_stream_stalling_after_its_finish_reason_keeps_it_in_the_partial(
    llm_server: LLMServer,
) -> None:
    """A chat stream that stalls after its finish reason (only ``data: [DONE]`` missing)
    ends in ``IdleTimeout`` (RELIABILITY.md #6), and its ``.partial`` had no finish reason.

    The dialect held the ``Finish`` for ``[DONE]`` and its ``salvage()`` left it out, and
    an error after a ``Finish`` opened an LLM call of its own in ``accumulate_tool_calls``
    (a new, unfinished step), so the partial lost the finish reason and the usage the
    ``Finish`` carried. The partial keeps everything received (RELIABILITY.md #2: a
    finish reason without ``[DONE]`` counts as complete).
    """
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    body = chat_chunk({"content": "Hello"}) + chat_chunk({}, "stop", usage=usage)
    stalling(llm_server, body)
    client = OpenAIChatClient(llm_server.url, api_key="k", model="m", timeouts=Timeouts(idle=0.2))
    async with client:
        error = await asyncio.wait_for(failure(client.stream(USER).pipe(ops.convert())), 2)
    assert isinstance(error, IdleTimeout)
    partial = error.partial
    assert partial is not None
    assert partial.interrupted
    assert partial.text == "Hello"
    assert partial.finish_reason is FinishReason.STOP
    assert partial.usage is not None
    assert partial.usage.total_tokens == 5
    assert [m.content for m in partial.turn_transcript] == ["Hello"]


@pytest.mark.asyncio
async def test_an_anthropic_stream_stalling_after_its_stop_reason_keeps_it_in_the_partial(
    llm_server: LLMServer,
) -> None:
    """The same stall in Anthropic's stream: ``message_delta`` (the stop reason) came,
    ``message_stop`` did not; the partial had no finish reason."""
    body = b"".join(
        anthropic_event(e)
        for e in (
            {
                "type": "message_start",
                "message": {"id": "msg_1", "model": "c", "usage": {"input_tokens": 3}},
            },
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hello"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2},
            },
        )
    )
    stalling(llm_server, body)
    client = AnthropicClient(llm_server.url, api_key="k", model="c", timeouts=Timeouts(idle=0.2))
    async with client:
        error = await asyncio.wait_for(failure(client.stream(USER).pipe(ops.convert())), 2)
    assert isinstance(error, IdleTimeout)
    partial = error.partial
    assert partial is not None
    assert (partial.text, partial.finish_reason) == ("Hello", FinishReason.STOP)
    assert partial.usage is not None
    assert partial.usage.total_tokens == 5


def test_an_error_after_a_finish_belongs_to_the_llm_call_that_finished() -> None:
    """``accumulate_tool_calls``: an error right after a ``Finish`` started an LLM call
    of its own (a ``ResponseStartedEvent``), which ``aggregate()`` took for an unfinished
    step: the partial had no finish reason. The error now comes with the call that
    finished; an error after the next call's first update still belongs to that one."""
    finished = [u.ResponseMetadata("r", "m"), u.TextDelta("Hi"), u.Finish(FinishReason.STOP)]
    results: list[Any] = []
    errors: list[Exception] = []
    source = reactivex.concat(reactivex.from_iterable(finished), reactivex.throw(IdleTimeout("x")))
    source.pipe(ops.accumulate_tool_calls()).subscribe(results.append, errors.append)
    assert [len(r.events) for r in results] == [1, 0, 1, 0]  # started, -, finish, the error
    errors.clear()
    source.pipe(ops.convert(), ops.aggregate()).subscribe(on_error=errors.append)
    partial = errors[0].partial  # type: ignore[attr-defined]
    assert (partial.text, partial.finish_reason) == ("Hi", FinishReason.STOP)

    errors.clear()
    next_call = reactivex.concat(
        reactivex.from_iterable([*finished, u.TextDelta("more")]), reactivex.throw(IdleTimeout("x"))
    )
    next_call.pipe(ops.convert(), ops.aggregate()).subscribe(on_error=errors.append)
    partial = errors[0].partial  # type: ignore[attr-defined]
    assert (partial.text, partial.finish_reason) == ("Himore", None)


# ---------------------------------------------------------------- item 3: too deep to write


def _tool_use_start(depth: int) -> ServerSentEvent:
    """A ``content_block_start`` whose tool_use ``input`` nests ``depth`` arrays deep."""
    deep = "[" * depth + "]" * depth
    data = (
        '{"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", '
        f'"id": "toolu_1", "name": "f", "input": {{"a": {deep}}}}}}}'
    )
    return ServerSentEvent("content_block_start", data)


def _chat_call_chunk(depth: int) -> ServerSentEvent:
    """A chat chunk whose tool call's ``arguments`` is an object nesting ``depth`` deep."""
    deep = "[" * depth + "]" * depth
    call = f'{{"index": 0, "id": "c1", "function": {{"name": "f", "arguments": {{"a": {deep}}}}}}}'
    data = f'{{"choices": [{{"index": 0, "delta": {{"tool_calls": [{call}]}}}}]}}'
    return ServerSentEvent("", data)


def _feed_error(dialect: Dialect, event: ServerSentEvent) -> Exception | None:
    """What ``dialect.feed(event)`` raises (any exception), or None."""
    try:
        dialect.feed(event)
    except Exception as err:  # (a bare RecursionError is the bug)
        return err
    return None


def _too_deep_to_read(make: Callable[[], Dialect], event: Callable[[int], ServerSentEvent]) -> int:
    """The least depth whose event ``json.loads`` refuses (a bisection)."""
    low, high = 1, 1 << 16  # (readable, not)
    while high - low > 1:
        middle = (low + high) // 2
        error = _feed_error(make(), event(middle))
        if isinstance(error, MalformedEvent) and "not valid JSON" in str(error):
            high = middle
        else:
            low = middle
    return high


@pytest.mark.parametrize(
    ("make", "event", "window"),
    [(AnthropicDialect, _tool_use_start, True), (OpenAIChatDialect, _chat_call_chunk, False)],
)
def test_arguments_too_deep_to_write_back_are_a_malformed_event(
    make: Callable[[], Dialect], event: Callable[[int], ServerSentEvent], window: bool
) -> None:
    """Arguments a provider sends as a JSON value (an Anthropic tool_use block's starting
    ``input``, a chat call's ``arguments`` object) are written back as text with
    ``json.dumps``. Nested just deep enough that ``json.loads`` reads the event but
    ``json.dumps``, called deeper in the stack, cannot write it, the Anthropic dialect
    raised a bare ``RecursionError``, which breaks the ``Dialect.feed`` contract
    (ProviderError or MalformedEvent). It is now a ``MalformedEvent`` keeping the event,
    as data too deep to read is. (In a chat chunk the arguments sit deeper in the event
    than ``json.dumps`` is in the stack: no such depth, checked all the same.)"""
    limit = _too_deep_to_read(make, event)
    too_deep_to_write = []
    for depth in range(max(1, limit - 100), limit):
        error = _feed_error(make(), event(depth))
        assert error is None or isinstance(error, MalformedEvent), repr(error)
        if error is not None:
            assert error.raw == event(depth).data
            assert "nested too deeply to write as JSON" in str(error)
            too_deep_to_write.append(depth)
    assert bool(too_deep_to_write) is window


def test_updates_before_arguments_too_deep_to_write_are_kept() -> None:
    """Through ``from_sse`` the text before such a block is kept in the partial, with the
    typed error."""
    head = b"".join(
        anthropic_event(e)
        for e in (
            {"type": "message_start", "message": {"id": "msg_1", "model": "c"}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "before"},
            },
            {"type": "content_block_stop", "index": 0},
        )
    )
    limit = _too_deep_to_read(AnthropicDialect, _tool_use_start)
    too_deep_to_write = 0
    for depth in range(limit - 100, limit + 1):
        start = _tool_use_start(depth)
        body = head + f"event: {start.event}\ndata: {start.data}\n\n".encode()
        errors: list[Exception] = []
        from_sse([body], dialect="anthropic").pipe(ops.convert(), ops.aggregate()).subscribe(
            on_error=errors.append
        )
        [error] = errors
        if isinstance(error, IncompleteStream):
            continue  # (read and written back: the stream only ends too soon)
        assert isinstance(error, MalformedEvent)
        assert error.partial is not None
        assert error.partial.text == "before"
        if "not valid JSON" in str(error):
            break
        assert "nested too deeply to write as JSON" in str(error)
        too_deep_to_write += 1
    assert too_deep_to_write
