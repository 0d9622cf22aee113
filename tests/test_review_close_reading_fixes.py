"""A reviewer's pins on the close-reading fixes (commits 2e7048c and 659e386).

The angle: read each of those fixes with fresh eyes and pin what must hold around it,
beyond the regression test each got (tests/test_close_reading_*_fixes.py): the sibling
paths (another dialect, another pattern of suspended frame, another way to split a
body), the behaviour users relied on before the fix, and the fix's own promise over a
wide range of inputs (hypothesis, with few examples: the file runs in seconds).

Sections follow the fixes: ``let_go`` and suspended frames, ``UpdateDecoder`` and a
body with no event, the end of an HTTP stream, Anthropic's ``tool_use`` start input
(against the Anthropic SDK's own accumulation), approvals answered twice, message
content, ``LiveState``'s repr and ``==``, the agent's input checks, tools and schemas,
and the recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import math
import queue
import string
import threading
import traceback
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import reactivex
from anthropic._models import construct_type
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import Agent, ChatMessage
from rafrx import content as c
from rafrx import operators as ops
from rafrx import updates as u
from rafrx._cycles import let_go
from rafrx._schema_check import check
from rafrx.errors import IncompleteStream, ProviderError, RafrxError, TransportError
from rafrx.events import ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.notebook import LiveState, live, text_display
from rafrx.recorder import guess_dialect, record, replay
from rafrx.response import AgentResponseResult
from rafrx.sources import from_sse
from rafrx.sources._decoder import UpdateDecoder
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, RetryPolicy
from rafrx.testing import Fault, LLMServer, Replay, Reply
from rafrx.tools import Tool, ToolApprovalResponse, tool

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
USER = [ChatMessage.user("hi")]


# ---------------------------------------------------------------- let_go: suspended frames


async def _fail(big: bytes) -> None:
    raise ValueError("no")


def test_let_go_keeps_an_ordinary_failed_calls_traceback_one_way_or_the_other() -> None:
    """Where the caught frame links to its running caller (3.12+: an awaited frame's
    ``f_back``) the traceback is kept as text; else as frames cleared of their locals.
    Either way it still tells where the error came from."""

    async def call() -> ValueError:
        try:
            await _fail(b"x" * 10**6)
        except ValueError as caught:
            return let_go(caught)
        raise AssertionError

    error = asyncio.run(call())
    frames = [f for f, _ in traceback.walk_tb(error.__traceback__)]
    assert all(f.f_locals == {} for f in frames)
    assert "in _fail" in "".join(traceback.format_exception(error))


def test_let_go_keeps_the_cleared_frames_of_an_error_from_a_failed_task() -> None:
    """The paused-frame heuristic must not turn every traceback into text: an error
    raised in a task and caught by its awaiter keeps its frames (every Python), and
    their locals (a megabyte here) are cleared."""

    async def inner() -> None:
        await _fail(b"y" * 10**6)

    async def call() -> ValueError:
        try:
            await asyncio.create_task(inner())
        except ValueError as caught:
            return let_go(caught)
        raise AssertionError

    error = asyncio.run(call())
    frames = [f for f, _ in traceback.walk_tb(error.__traceback__)]
    assert [f.f_code.co_name for f in frames] == ["inner", "_fail"]
    assert all(f.f_locals == {} for f in frames)
    assert not getattr(error, "__notes__", None)


def test_let_go_leaves_a_sync_generator_that_caught_the_error_running() -> None:
    def worker() -> Iterator[Any]:
        try:
            raise KeyError("k")
        except KeyError as caught:
            yield caught
        yield "went on"

    gen = worker()
    error = next(gen)
    let_go(error)
    assert next(gen) == "went on"
    assert "in worker" in "".join(traceback.format_exception(error))


def test_let_go_leaves_an_async_generator_that_caught_the_error_running() -> None:
    async def worker() -> AsyncIterator[Any]:
        try:
            await _fail(b"")
        except ValueError as caught:
            yield caught
        yield "went on"

    async def main() -> Any:
        gen = worker()
        let_go(await gen.__anext__())
        return await gen.__anext__()

    assert asyncio.run(main()) == "went on"


def test_let_go_leaves_a_traced_worker_coroutine_running() -> None:
    """Under a tracer (a debugger, coverage) the bytecode is instrumented: the
    suspended worker must still be recognised, not closed."""

    async def worker(store: list[BaseException], jobs: asyncio.Queue[int]) -> str:
        while True:
            job = await jobs.get()
            try:
                await _fail(b"")
            except ValueError as caught:
                store.append(caught)
            if job == 2:
                return "done"

    async def main() -> str:
        store: list[BaseException] = []
        jobs: asyncio.Queue[int] = asyncio.Queue()
        task = asyncio.create_task(worker(store, jobs))
        jobs.put_nowait(1)
        while not store:
            await asyncio.sleep(0)
        let_go(store[0])
        jobs.put_nowait(2)
        return await asyncio.wait_for(task, 5)

    previous = __import__("sys").gettrace()
    tracer: Any = lambda frame, event, arg: tracer  # noqa: E731
    __import__("sys").settrace(tracer)
    try:
        assert asyncio.run(main()) == "done"
    finally:
        __import__("sys").settrace(previous)


def test_let_go_on_an_error_caught_by_a_worker_thread_leaves_the_thread_running() -> None:
    jobs: queue.Queue[int | None] = queue.Queue()
    caught: queue.Queue[BaseException] = queue.Queue()
    handled: list[int] = []

    def work() -> None:
        while (job := jobs.get()) is not None:
            try:
                raise ValueError(job)
            except ValueError as exc:
                caught.put(exc)
            handled.append(job)

    thread = threading.Thread(target=work)
    thread.start()
    jobs.put(1)
    let_go(caught.get(timeout=5))
    jobs.put(2)
    caught.get(timeout=5)
    jobs.put(None)
    thread.join(5)
    assert handled == [1, 2]


# ---------------------------------------------------------------- a body with no event

_JSON_ERRORS = st.builds(
    lambda message, kind: {"error": {"message": message, "type": kind}},
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1).filter(
        str.strip
    ),
    st.sampled_from(["server_error", "invalid_request_error", "overloaded_error"]),
)


def _chunked(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(body)) for c in cuts})
    edges = [0, *points, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges) if b > a]


@FEW
@given(
    payload=_JSON_ERRORS,
    dialect=st.sampled_from(["openai-chat", "anthropic", "openai-responses"]),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    pretty=st.booleans(),
)
def test_a_json_error_body_is_the_providers_error_however_it_is_split(
    payload: dict[str, Any], dialect: str, cuts: list[int], pretty: bool
) -> None:
    body = json.dumps(payload, indent=2 if pretty else None, ensure_ascii=False).encode()
    decoder = UpdateDecoder(dialect)
    for chunk in _chunked(body, cuts):
        assert decoder.feed(chunk) == []
    with pytest.raises(ProviderError) as raised:
        decoder.close()
    assert raised.value.message == payload["error"]["message"]
    assert raised.value.error_type == payload["error"]["type"]


@FEW
@given(
    text=st.text(
        string.ascii_letters + string.digits + " .,!?-()<>/", min_size=1, max_size=120
    ).filter(lambda t: t.strip()),
    cuts=st.lists(st.integers(0, 150), max_size=4),
)
def test_a_body_of_plain_text_fails_incomplete_quoting_it(text: str, cuts: list[int]) -> None:
    decoder = UpdateDecoder("openai-chat")
    for chunk in _chunked(text.encode(), cuts):
        decoder.feed(chunk)
    with pytest.raises(IncompleteStream) as raised:
        decoder.close()
    assert "the body held no event" in raised.value.message
    assert text.strip() in raised.value.message


def test_a_stream_that_had_events_and_then_stops_is_not_said_to_hold_none() -> None:
    """The explanation is for a body with no event: a stream cut after its events
    keeps the dialect's own message, whatever garbage came after."""
    decoder = UpdateDecoder("openai-chat")
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    decoder.feed(f"data: {json.dumps(chunk)}\n\n".encode())
    decoder.feed(b'{"error": {"message": "not this one"}}')
    with pytest.raises(IncompleteStream) as raised:
        decoder.close()
    assert "held no event" not in raised.value.message
    assert "not this one" not in raised.value.message


def test_a_complete_stream_still_closes_cleanly_after_a_body_of_comments_first() -> None:
    decoder = UpdateDecoder("openai-chat")
    decoder.feed(b": keep-alive\n\n")
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    out = decoder.feed(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
    out += decoder.close()
    assert any(isinstance(x, u.Finish) for x in out)


def test_an_anthropic_shaped_json_error_body_keeps_its_type_and_retryability() -> None:
    decoder = UpdateDecoder("anthropic")
    decoder.feed(b'{"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}}')
    with pytest.raises(ProviderError) as raised:
        decoder.close()
    assert (raised.value.message, raised.value.error_type) == ("Busy", "overloaded_error")
    assert raised.value.retryable


@pytest.mark.asyncio
async def test_a_json_error_streamed_with_status_200_is_retried_then_answered() -> None:
    """Over HTTP: the provider's error, retryable, is retried like any other before
    anything was delivered; the second attempt's answer is the stream."""
    body = b'{"error": {"message": "model is loading", "type": "server_error"}}'
    async with LLMServer() as server:
        server.enqueue(Replay(body, chunk_size=16), Reply(text="ready"))
        retry = RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=False)
        client = OpenAIChatClient(server.url, model="m", retry=retry)
        try:
            items = await client.stream(USER).pipe(rx.to_list())
        finally:
            await client.aclose()
    assert "".join(x.delta for x in items if isinstance(x, u.TextDelta)) == "ready"


@pytest.mark.asyncio
async def test_a_json_error_streamed_with_status_200_fails_as_that_error_over_http() -> None:
    body = b'{"error": {"message": "context too long", "type": "invalid_request_error"}}'
    async with LLMServer() as server:
        server.enqueue(Replay(body))
        client = AnthropicClient(server.url, model="m", api_key="sk-ant-test-0000000000000000")
        try:
            with pytest.raises(ProviderError, match="context too long") as raised:
                await client.stream(USER).pipe(rx.to_list())
        finally:
            await client.aclose()
    assert raised.value.error_type == "invalid_request_error"
    assert not raised.value.retryable


# ---------------------------------------------------------------- the end of an HTTP stream

_ANTHROPIC_EVENTS = [
    {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
]


def _anthropic(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


@pytest.mark.asyncio
async def test_anthropic_aclose_after_message_stop_completes_the_stream() -> None:
    """The sibling dialect of the fixed case: the body is held open after
    ``message_stop``; ``aclose()`` then ends a stream that has everything."""
    body = _anthropic(*_ANTHROPIC_EVENTS)
    ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    items: list[Any] = []
    async with LLMServer() as server:
        server.enqueue(Fault.stall(3, after_bytes=len(body), body=Replay(body)))
        client = AnthropicClient(server.url, model="m", api_key="sk-ant-test-0000000000000000")
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_next(item: Any) -> None:
            items.append(item)
            if isinstance(item, u.Finish) and not finished.done():
                finished.set_result(None)

        client.stream(USER).subscribe(
            on_next,
            lambda e: ended.done() or ended.set_result(f"error {e!r}"),
            lambda: ended.done() or ended.set_result("completed"),
        )
        await asyncio.wait_for(finished, 5)
        await client.aclose()
        outcome = await asyncio.wait_for(ended, 5)
    assert outcome == "completed"
    assert isinstance(items[-1], u.Finish)


@pytest.mark.asyncio
async def test_aclose_before_the_terminal_marker_still_fails_the_stream() -> None:
    """The other side of that fix: a stream cut before its end is no complete one."""
    body = _anthropic(*_ANTHROPIC_EVENTS)
    cut = body.index(b"event: message_delta")
    ended: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    async with LLMServer() as server:
        server.enqueue(Fault.stall(3, after_bytes=cut, body=Replay(body)))
        client = AnthropicClient(server.url, model="m", api_key="sk-ant-test-0000000000000000")
        got_text: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_next(item: Any) -> None:
            if isinstance(item, u.TextDelta) and not got_text.done():
                got_text.set_result(None)

        client.stream(USER).subscribe(
            on_next,
            lambda e: ended.done() or ended.set_result(e),
            lambda: ended.done() or ended.set_result("completed"),
        )
        await asyncio.wait_for(got_text, 5)
        await client.aclose()
        outcome = await asyncio.wait_for(ended, 5)
    assert isinstance(outcome, TransportError)
    assert "aclose()" in outcome.message


# ---------------------------------------------------------------- anthropic tool_use input

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
_INPUTS = st.dictionaries(st.text(min_size=1, max_size=6), _JSON_VALUES, max_size=4)


def _sdk_input(events: list[dict[str, Any]]) -> Any:
    """The tool input the Anthropic SDK's stream accumulation ends with."""
    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    for event in events:
        typed = construct_type(type_=RawMessageStreamEvent, value=event)
        snapshot = accumulate_event(event=typed, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot.content[0].input


@FEW
@given(
    start=st.one_of(st.just({}), _INPUTS),
    streamed=st.one_of(st.none(), _INPUTS),
    cuts=st.lists(st.integers(0, 200), max_size=5),
    empties=st.lists(st.integers(0, 6), max_size=3),
)
def test_tool_use_arguments_are_what_the_anthropic_sdk_accumulates(
    start: dict[str, Any], streamed: dict[str, Any] | None, cuts: list[int], empties: list[int]
) -> None:
    pieces: list[str] = []
    if streamed is not None:
        text = json.dumps(streamed, ensure_ascii=False)
        edges = [0, *sorted({min(c, len(text)) for c in cuts}), len(text)]
        pieces = [text[a:b] for a, b in itertools.pairwise(edges) if b > a]
    for i in empties:  # Anthropic's empty partial_json pieces
        pieces.insert(min(i, len(pieces)), "")
    block = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": start}
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 0},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": block},
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": p},
            }
            for p in pieces
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    expected = _sdk_input(events)
    response = from_sse(_anthropic(*events), "anthropic").pipe(ops.convert(), ops.aggregate()).run()
    (call,) = response.tool_calls
    assert call.error is None, call.raw_arguments
    assert call.arguments == expected


def test_a_tool_use_start_input_with_no_deltas_arrives_with_the_calls_end() -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}
    events = [
        _ANTHROPIC_EVENTS[0],
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    ]
    updates = from_sse(_anthropic(*events), "anthropic").pipe(rx.to_list()).run()
    kinds = [type(x).__name__ for x in updates if type(x).__name__.startswith("ToolCall")]
    assert kinds == ["ToolCallStart", "ToolCallArgs", "ToolCallEnd"]
    (args,) = [x for x in updates if isinstance(x, u.ToolCallArgs)]
    assert json.loads(args.args_delta) == {"a": 1}


# ---------------------------------------------------------------- approvals answered twice

_RUNS: list[str] = []


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    _RUNS.append(path)
    return f"deleted {path}"


def _calling(call_id: str, path: str) -> AgentResponseResult:
    content = c.ToolCallingContent(call_id, "delete", {"path": path}, json.dumps({"path": path}))
    return AgentResponseResult("resp", "m", None, (content,))


async def _run_approvals(
    answer_on_request: int, *, from_thread: bool = False, timeout: float = 1.0
) -> list[str | None]:
    """Two calls needing approval; the UI answers each request event
    ``answer_on_request`` times (from a thread, if asked); the errors of the results."""
    _RUNS.clear()
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    items: list[AgentResponseResult] = []
    done = asyncio.get_running_loop().create_future()

    def answer(call_id: str) -> None:
        for _ in range(answer_on_request):
            answers.on_next(ToolApprovalResponse(call_id, True))

    def on_item(result: AgentResponseResult) -> None:
        items.append(result)
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                if from_thread:
                    threading.Thread(target=answer, args=(event.call_id,)).start()
                else:
                    answer(event.call_id)

    upstream.pipe(ops.execute_tools([delete], answers, approval_timeout=timeout)).subscribe(
        on_item, done.set_exception, lambda: done.set_result(None)
    )
    upstream.on_next(_calling("c1", "a"))
    upstream.on_next(_calling("c2", "b"))
    upstream.on_completed()
    await asyncio.wait_for(done, 5)
    return [x.error for r in items for x in r.contents if isinstance(x, c.ToolCalledContent)]


@pytest.mark.asyncio
async def test_an_answer_given_as_the_request_is_seen_approves_it() -> None:
    assert await _run_approvals(1) == [None, None]
    assert sorted(_RUNS) == ["a", "b"]


@pytest.mark.asyncio
async def test_a_double_click_on_each_request_runs_each_call_once() -> None:
    assert await _run_approvals(2) == [None, None]
    assert sorted(_RUNS) == ["a", "b"]


@pytest.mark.asyncio
async def test_answers_from_a_ui_thread_approve_their_requests() -> None:
    assert await _run_approvals(2, from_thread=True) == [None, None]
    assert sorted(_RUNS) == ["a", "b"]


@pytest.mark.asyncio
async def test_a_reused_id_in_a_later_llm_call_is_asked_again_and_runs_when_approved() -> None:
    _RUNS.clear()
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    requests: list[str] = []
    done = asyncio.get_running_loop().create_future()

    def on_item(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                requests.append(event.call_id)
                answers.on_next(ToolApprovalResponse(event.call_id, True))

    upstream.pipe(ops.execute_tools([delete], answers, approval_timeout=1)).subscribe(
        on_item, done.set_exception, lambda: done.set_result(None)
    )
    upstream.on_next(_calling("c1", "a"))
    while not _RUNS:
        await asyncio.sleep(0.01)
    upstream.on_next(AgentResponseResult("r2", "m", None, (), (ResponseStartedEvent(),)))
    upstream.on_next(_calling("c1", "b"))
    upstream.on_completed()
    await asyncio.wait_for(done, 5)
    assert requests == ["c1", "c1"]
    assert _RUNS == ["a", "b"]


@pytest.mark.asyncio
async def test_a_late_no_after_a_yes_does_not_undo_the_approval() -> None:
    """Once a request is answered, a second, different answer (a "no" clicked after
    "yes") neither runs nor stops anything: the first answer counts."""
    _RUNS.clear()
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    items: list[AgentResponseResult] = []
    done = asyncio.get_running_loop().create_future()

    def on_item(result: AgentResponseResult) -> None:
        items.append(result)
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                answers.on_next(ToolApprovalResponse(event.call_id, True))
                answers.on_next(ToolApprovalResponse(event.call_id, False, "changed my mind"))

    upstream.pipe(ops.execute_tools([delete], answers)).subscribe(
        on_item, done.set_exception, lambda: done.set_result(None)
    )
    upstream.on_next(_calling("c1", "a"))
    upstream.on_completed()
    await asyncio.wait_for(done, 5)
    (called,) = [x for r in items for x in r.contents if isinstance(x, c.ToolCalledContent)]
    assert called.error is None
    assert _RUNS == ["a"]


# ---------------------------------------------------------------- message content


@FEW
@given(text=st.text())
def test_message_content_text_round_trips_through_to_dict(text: str) -> None:
    message = ChatMessage.assistant(text)
    assert message.content == text
    assert ChatMessage.from_dict(message.to_dict()) == message


@pytest.mark.parametrize("bad", [42, 1.5, b"bytes", ["part"], {"type": "text", "text": "x"}])
def test_message_content_that_is_no_text_is_refused_at_every_way_of_making_one(bad: Any) -> None:
    with pytest.raises(TypeError, match="content is text"):
        ChatMessage.user(bad)
    with pytest.raises(TypeError, match="content is text"):
        attrs.evolve(ChatMessage.user("ok"), content=bad)


def test_openai_assistant_message_with_null_content_and_tool_calls_is_read() -> None:
    message = ChatMessage.from_openai(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a": 1}'},
                }
            ],
        }
    )
    assert message.content == ""
    assert message.tool_calls is not None
    assert message.tool_calls[0].arguments == {"a": 1}


# ---------------------------------------------------------------- LiveState repr and ==


@FEW
@given(
    deltas=st.lists(
        st.tuples(st.sampled_from(["text", "reasoning"]), st.text(min_size=1, max_size=5)),
        min_size=1,
        max_size=12,
    ),
    reads=st.sets(st.integers(0, 12)),
)
def test_live_state_repr_and_eq_do_not_depend_on_when_it_was_read(
    deltas: list[tuple[str, str]], reads: set[int]
) -> None:
    """Two views of one stream, one read (``state.text``) mid-way and one not, are equal
    and show the same: reading joins the pending deltas but changes nothing."""

    def fold(read_at: set[int]) -> LiveState:
        state = LiveState()
        for i, (kind, text) in enumerate(deltas):
            content = c.TextContent(text) if kind == "text" else c.ReasoningContent(text)
            state.add(AgentResponseResult(contents=[content]))
            if i in read_at:
                _ = state.text
        return state

    untouched, read = fold(set()), fold(reads)
    assert repr(untouched) == repr(read)
    assert untouched == read
    assert not untouched.__ne__(read)
    assert untouched.text == "".join(t for k, t in deltas if k == "text")


def test_live_state_repr_is_the_attrs_form_with_the_public_field_names() -> None:
    state = LiveState()
    state.add(AgentResponseResult(contents=[c.TextContent("Hel")]))
    state.add(AgentResponseResult(contents=[c.TextContent("lo")]))
    text = repr(state)
    assert text.startswith("LiveState(blocks=[['text', 'Hello']], cards={}")
    assert "_parts" not in text
    assert "_calls" not in text
    assert state.__eq__(object()) is NotImplemented
    with pytest.raises(TypeError):
        hash(state)  # mutable: unhashable, as attrs made it before


# ---------------------------------------------------------------- live view errors


def test_a_failed_views_response_raises_the_same_error_each_time_with_its_partial() -> None:
    async def main() -> list[BaseException]:
        upstream: Subject[AgentResponseResult] = Subject()
        view = live(upstream, display=text_display(io.StringIO()))
        upstream.on_next(AgentResponseResult(contents=[c.TextContent("half")]))
        upstream.on_error(ProviderError("overloaded", error_type="overloaded_error"))
        raised = []
        for _ in range(2):
            try:
                await view
            except RafrxError as exc:
                raised.append(exc)
        with contextlib.suppress(RafrxError):
            _ = view.response
        return raised

    first, second = asyncio.run(main())
    assert first is not second
    for error in (first, second):
        assert type(error) is ProviderError
        assert error.message == "overloaded"
        assert error.error_type == "overloaded_error"


# ---------------------------------------------------------------- the agent's input checks


class _EchoClient:
    def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
        return reactivex.from_iterable(
            [u.TextDelta(f"{len(messages)} messages"), u.Finish(None, None)]
        )


def test_an_agent_still_takes_a_generator_of_tools_and_a_tuple_of_messages() -> None:
    def get_time(city: str) -> str:
        """The time."""
        return "12:00"

    agent = Agent(_EchoClient(), tools=(t for t in [get_time]))
    assert [t.name for t in agent.tools] == ["get_time"]

    async def main() -> str:
        messages = (ChatMessage.system("be brief"), ChatMessage.user("hi"))
        return (await agent.send(messages)).text

    assert asyncio.run(main()) == "2 messages"


@pytest.mark.parametrize(
    "given_input",
    [{"role": "user", "content": "hi"}, [ChatMessage.user("a"), {"role": "user"}], [42]],
)
def test_an_agents_bad_input_is_a_type_error_naming_the_item(given_input: Any) -> None:
    agent = Agent(_EchoClient())
    with pytest.raises(TypeError, match="an agent's input is a str, a ChatMessage"):
        agent.run(given_input)


# ---------------------------------------------------------------- tools and schemas


def test_a_hand_built_schema_without_a_type_goes_out_as_an_object_everywhere() -> None:
    schema = {"properties": {"q": {"type": "string"}}, "required": ["q"]}
    t = Tool("search", "Search.", schema, lambda q: q)
    assert t.to_openai()["function"]["parameters"]["type"] == "object"
    assert t.to_anthropic()["input_schema"]["type"] == "object"
    assert t.to_responses()["parameters"]["type"] == "object"
    assert "type" not in schema  # the caller's own schema is left as it was
    assert t.validate({"q": "x"}) == {"q": "x"}


@pytest.mark.parametrize("timeout", [math.nan, 0, -1.0, -math.inf])
def test_a_tool_timeout_that_is_not_positive_is_refused(timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout must be positive"):
        Tool("t", "T.", {"type": "object"}, lambda: None, timeout=timeout)


def test_a_method_tool_validates_the_same_read_from_its_class_or_an_instance() -> None:
    class Box:
        @tool
        def put(self, item: str, count: int = 1) -> str:
            """Put items in."""
            return item * count

    arguments = {"item": "x", "count": 2}
    assert Box.put.validate(arguments) == Box().put.validate(arguments) == arguments


@FEW
@given(
    items=st.lists(st.sampled_from(["string", "integer", "boolean"]), min_size=1, max_size=3),
    value=st.lists(st.one_of(st.text(max_size=3), st.integers(), st.booleans()), max_size=5),
    extra=st.sampled_from([True, False, {"type": "string"}]),
)
def test_tuple_form_items_check_like_their_prefix_items_form(
    items: list[str], value: list[Any], extra: Any
) -> None:
    """Draft 4's ``items: [...]`` + ``additionalItems`` accepts exactly what 2020-12's
    ``prefixItems`` + ``items`` does."""
    subs = [{"type": k} for k in items]
    old = {"type": "array", "items": subs, "additionalItems": extra}
    new = {"type": "array", "prefixItems": subs, "items": extra}
    assert (check(old, value, "v") is None) == (check(new, value, "v") is None)


@pytest.mark.parametrize("odd", [None, "string", 3, ["a"]])
def test_a_subschema_that_is_no_schema_allows_anything(odd: Any) -> None:
    schema = {"type": "object", "properties": {"a": odd}}
    assert check(schema, {"a": [1, {"b": None}]}, "") is None


# ---------------------------------------------------------------- the recorder

_SECRET = "AbCdEf0123456789xyz"


@FEW
@given(
    param=st.sampled_from(["api-key", "x-goog-api-key", "access-token", "api_key", "key"]),
    cuts=st.lists(st.integers(1, 80), min_size=1, max_size=4),
)
def test_a_hyphenated_key_parameter_split_anywhere_is_redacted(
    param: str, cuts: list[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = f"see https://api.example.com/v1/models?{param}={_SECRET}&alt=sse for details"
    deltas = [u.TextDelta(piece.decode()) for piece in _chunked(text.encode(), cuts)]
    path = tmp_path_factory.mktemp("rec") / "turn.jsonl"
    record(reactivex.from_iterable(deltas), path).pipe(rx.to_list()).run()
    replayed = replay(path).pipe(rx.to_list()).run()
    joined = "".join(x.delta for x in replayed)
    assert _SECRET[:8] not in joined
    assert _SECRET[-8:] not in joined
    assert joined.startswith("see https://api.example.com/")
    assert joined.endswith(" for details")


def test_an_error_with_an_endless_retry_after_replays_with_it(tmp_path: Path) -> None:
    error = ProviderError("rate limited", error_type="rate_limit_error", retryable=True)
    error.retry_after = math.inf
    path = tmp_path / "turn.jsonl"
    heard: list[BaseException] = []
    record(reactivex.throw(error), path).subscribe(on_error=heard.append)
    assert heard == [error]
    replayed: list[BaseException] = []
    replay(path).subscribe(on_error=replayed.append)
    (again,) = replayed
    assert type(again) is ProviderError
    assert again.message == "rate limited"
    assert again.retry_after == math.inf
    assert again.retryable


def test_guess_dialect_reads_past_long_first_events_of_each_dialect() -> None:
    pad = "x" * 40_000
    responses = (
        f'event: response.created\ndata: {{"type": "response.created", "i": "{pad}"}}\n\n'
    ).encode()
    anthropic = _anthropic({"type": "message_start", "message": {"id": "m", "pad": pad}})
    chat = f'data: {{"id": "c", "choices": [], "pad": "{pad}"}}\n\n'.encode()
    unnamed = f'data: {{"type": "response.created", "pad": "{pad}"}}\n\n'.encode()
    assert guess_dialect(responses) == "openai-responses"
    assert guess_dialect(anthropic) == "anthropic"
    assert guess_dialect(chat) == "openai-chat"
    assert guess_dialect(unnamed) == "openai-responses"
