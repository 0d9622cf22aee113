"""rafrx's observables and operators under ordinary ReactiveX usage.

Re-subscription, multicasting (share / replay), cutting a stream short
(take / first / take_until), raising subscribers, schedulers (marble tests,
observe_on / subscribe_on), concat / merge of converted streams, ``await``,
``.run()`` and the Rx grammar; disposing from another thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as rx
from reactivex.internal.exceptions import SequenceContainsNoElementsError
from reactivex.scheduler import ImmediateScheduler, NewThreadScheduler, ThreadPoolScheduler
from reactivex.scheduler.eventloop import AsyncIOScheduler
from reactivex.subject import Subject
from reactivex.testing import ReactiveTest, TestScheduler

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    TextContent,
    ToolCalledContent,
    ToolCallingContent,
)
from rafrx.errors import IncompleteStream
from rafrx.events import ResponseStartedEvent
from rafrx.messages import ChatMessage
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIChatClient
from rafrx.sources.dialects import OpenAIChatDialect
from rafrx.sse import ServerSentEvent
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec, render
from rafrx.tools import tool
from tests.operators import apart, contents, records, values

USER = [ChatMessage.user("hi")]

BODY = render(
    Reply(
        text="Hello world, here is the answer.",
        tool_calls=[
            ToolCallSpec("add", {"a": 1, "b": 2}, id="c1"),
            ToolCallSpec("add", {"a": 3, "b": 4}, id="c2"),
        ],
    ),
    "openai-chat",
)
TEXT_BODY = render(Reply(text="Just text, no tools."), "openai-chat")
TRUNCATED = BODY[: len(BODY) // 2]  # no [DONE], no finish_reason: IncompleteStream


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class Events:
    """An observer that records every notification and checks the Rx grammar."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.errors: list[Exception] = []
        self.completed = 0
        self.violations: list[str] = []

    def on_next(self, value: Any) -> None:
        if self.errors or self.completed:
            self.violations.append(f"on_next after a terminal: {value!r}")
        self.items.append(value)

    def on_error(self, error: Exception) -> None:
        if self.errors or self.completed:
            self.violations.append(f"second terminal: {error!r}")
        self.errors.append(error)

    def on_completed(self) -> None:
        if self.errors or self.completed:
            self.violations.append("second terminal: completed")
        self.completed += 1

    def subscribe(self, source: Observable[Any], **kw: Any) -> Any:
        return source.subscribe(self.on_next, self.on_error, self.on_completed, **kw)

    @property
    def ended(self) -> bool:
        return bool(self.errors or self.completed)

    def check_one_terminal(self) -> None:
        assert self.violations == []
        assert len(self.errors) + self.completed == 1


class CountingDialect:
    """The OpenAI chat dialect, counting the events it is fed (the decoding work)."""

    made = 0

    def __init__(self, fed: list[int]) -> None:
        self._inner = OpenAIChatDialect()
        self._fed = fed
        CountingDialect.made += 1

    @property
    def done(self) -> bool:
        return self._inner.done

    def feed(self, event: ServerSentEvent) -> list[u.AgentResponseUpdate]:
        self._fed[0] += 1
        return self._inner.feed(event)

    def close(self) -> list[u.AgentResponseUpdate]:
        return self._inner.close()


def counting(fed: list[int]) -> Callable[[], CountingDialect]:
    return lambda: CountingDialect(fed)


def recording_add(ran: list[int]) -> Any:
    """An ``add`` tool (the name the bodies call) that records its calls."""

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append(a)
        return a + b

    return add


def long_body(events: int) -> bytes:
    one = b'data: {"choices":[{"index":0,"delta":{"content":"ab"}}]}\n\n'
    end = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    return one * events + end


async def chunks_of(
    body: bytes, size: int = 32, log: list[str] | None = None
) -> AsyncIterator[bytes]:
    """``body`` as an async iterable of small chunks, one per loop turn."""
    try:
        for i in range(0, len(body), size):
            await asyncio.sleep(0)
            yield body[i : i + size]
    finally:
        if log is not None:
            log.append("closed")


def converted(body: bytes = BODY) -> Observable[AgentResponseResult]:
    return from_sse(body).pipe(ops.convert())


# ---------------------------------------------------------------- cold re-subscription


def test_resubscribing_a_converted_bytes_body_gives_equal_fresh_results() -> None:
    stream = from_sse(BODY).pipe(ops.convert(), ops.aggregate())
    first, second = Events(), Events()
    first.subscribe(stream)
    second.subscribe(stream)
    first.check_one_terminal()
    second.check_one_terminal()
    assert first.items == second.items
    assert first.items[0] is not second.items[0]
    assert [c.arguments for c in first.items[0].tool_calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]


def test_resubscription_generates_fresh_ids_for_id_less_legacy_calls() -> None:
    """Cold: each subscription has its own splitter, so the ids it generates differ,
    while everything else is equal."""
    updates = [
        u.ToolCallDelta(0, name="add", arguments_delta='{"a": 1, "b": 2}'),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    stream = reactivex.from_iterable(updates).pipe(ops.convert(), ops.aggregate())
    one = stream.run()
    two = stream.run()
    assert one.tool_calls[0].id != two.tool_calls[0].id
    assert one.tool_calls[0].arguments == two.tool_calls[0].arguments == {"a": 1, "b": 2}


def test_a_piped_observable_kept_and_extended_twice_stays_independent() -> None:
    """Fusion builds a new observable: the shorter pipe keeps working on its own."""
    base = from_sse(BODY).pipe(ops.split_legacy_delta(), ops.accumulate_tool_calls())
    longer = base.pipe(ops.parse_args_stream(), ops.flush_tool_calls(), ops.aggregate())
    short = Events()
    short.subscribe(base)
    response = longer.run()
    again = Events()
    again.subscribe(base)
    short.check_one_terminal()
    assert short.items == again.items
    assert not any(isinstance(c, ToolCallingContent) for c in contents(short.items))
    assert [c.id for c in response.tool_calls] == ["c1", "c2"]


def test_the_same_operator_object_can_be_used_in_two_pipelines() -> None:
    convert = ops.convert()
    aggregate = ops.aggregate()
    one = from_sse(BODY).pipe(convert, aggregate).run()
    two = from_sse(TEXT_BODY).pipe(convert, aggregate).run()
    assert one.text == "Hello world, here is the answer."
    assert two.text == "Just text, no tools."
    assert two.tool_calls == ()


def test_rx_retry_resubscribes_a_failing_body_and_ends_with_its_error() -> None:
    fed = [0]
    CountingDialect.made = 0
    events = Events()
    events.subscribe(
        from_sse(TRUNCATED, counting(fed)).pipe(ops.convert(), ops.aggregate(), rx.retry(3))
    )
    events.check_one_terminal()
    assert CountingDialect.made == 3
    [error] = events.errors
    assert isinstance(error, IncompleteStream)
    assert error.partial is not None
    assert error.partial.text.startswith("Hello")


# ---------------------------------------------------------------- multicasting


def test_replay_decodes_once_and_every_subscriber_gets_the_same_items() -> None:
    fed = [0]
    stream = from_sse(BODY, counting(fed)).pipe(ops.convert(), rx.replay())
    early, late = Events(), Events()
    early.subscribe(stream)
    stream.connect()
    late.subscribe(stream)
    early.check_one_terminal()
    late.check_one_terminal()
    assert early.items == late.items
    assert all(a is b for a, b in zip(early.items, late.items, strict=True))
    once = fed[0]
    from_sse(BODY, counting(fed)).pipe(ops.convert()).subscribe()
    assert fed[0] == 2 * once  # replay() read the body once


def test_publish_behaves_as_it_does_over_from_iterable() -> None:
    """A published converted stream: the subscriber before connect() gets
    everything, a late one only the completion, exactly as for a plain iterable."""

    def seen(source: Observable[Any]) -> tuple[list[Any], list[Any]]:
        published = source.pipe(rx.publish())
        early, late = Events(), Events()
        early.subscribe(published)
        published.connect()
        late.subscribe(published)
        early.check_one_terminal()
        late.check_one_terminal()
        return early.items, late.items

    results = converted().pipe(rx.to_list()).run()
    assert seen(converted()) == seen(reactivex.from_iterable(results)) == (results, [])


@pytest.mark.asyncio
async def test_share_over_an_async_body_reads_it_once_for_two_subscribers() -> None:
    fed = [0]
    shared = from_sse(chunks_of(BODY), counting(fed)).pipe(ops.convert(), rx.share())
    done = asyncio.get_running_loop().create_future()
    one, two = Events(), Events()
    one.subscribe(shared)
    two.subscribe(shared)
    shared.subscribe(on_completed=lambda: done.set_result(None))
    await asyncio.wait_for(done, 2)
    one.check_one_terminal()
    two.check_one_terminal()
    assert one.items == two.items
    assert fed[0] == BODY.count(b"data:")


@pytest.mark.asyncio
async def test_share_over_a_client_stream_sends_one_request(llm_server: LLMServer) -> None:
    llm_server.enqueue(Reply(text="shared answer"))
    async with OpenAIChatClient(llm_server.url) as client:
        shared = client.stream(USER).pipe(ops.convert(), rx.share())
        one: asyncio.Future[AgentResponse] = asyncio.get_running_loop().create_future()
        two: asyncio.Future[AgentResponse] = asyncio.get_running_loop().create_future()
        shared.pipe(ops.aggregate()).subscribe(one.set_result, one.set_exception)
        shared.pipe(ops.aggregate()).subscribe(two.set_result, two.set_exception)
        first, second = await asyncio.wait_for(asyncio.gather(one, two), 2)
    assert first.text == second.text == "shared answer"
    assert len(llm_server.requests) == 1


# ---------------------------------------------------------------- cutting a stream short


def test_first_of_a_converted_body_is_the_step_start_and_ends_the_subscription() -> None:
    events = Events()
    events.subscribe(converted().pipe(rx.first()))
    events.check_one_terminal()
    [result] = events.items
    assert isinstance(result.events[0], ResponseStartedEvent)
    assert events.completed == 1


def test_take_1_over_a_whole_bytes_body_stops_decoding_it() -> None:
    fed = [0]
    events = Events()
    events.subscribe(from_sse(long_body(5_000), counting(fed)).pipe(rx.take(1)))
    events.check_one_terminal()
    assert events.items == [u.TextDelta("ab")]
    assert fed[0] < 100, f"{fed[0]} events decoded for take(1)"


def test_take_over_a_chunked_body_stops_reading_and_closes_it() -> None:
    fed = [0]
    closed: list[bool] = []

    def body() -> Iterator[bytes]:
        try:
            for _ in range(5_000):
                yield b'data: {"choices":[{"index":0,"delta":{"content":"ab"}}]}\n\n'
        finally:
            closed.append(True)

    events = Events()
    events.subscribe(from_sse(body(), counting(fed)).pipe(ops.convert(), rx.take(3)))
    events.check_one_terminal()
    assert len(events.items) == 3
    assert fed[0] <= 4
    assert closed == [True]


def test_a_take_until_fired_from_on_next_stops_a_fused_chunked_body() -> None:
    closed: list[bool] = []

    def body() -> Iterator[bytes]:
        try:
            for _ in range(5_000):
                yield b'data: {"choices":[{"index":0,"delta":{"content":"ab"}}]}\n\n'
        finally:
            closed.append(True)

    stop: Subject[int] = Subject()
    events = Events()

    def on_next(result: AgentResponseResult) -> None:
        events.on_next(result)
        if len(events.items) == 2:
            stop.on_next(1)

    from_sse(body()).pipe(ops.convert(), rx.take_until(stop)).subscribe(
        on_next, events.on_error, events.on_completed
    )
    events.check_one_terminal()
    assert events.completed == 1
    assert len(events.items) == 2
    assert closed == [True]
    assert stop.observers == []


@pytest.mark.asyncio
async def test_take_until_mid_async_stream_cancels_the_reader_and_closes_the_body(
    no_task_leak: None,
) -> None:
    log: list[str] = []
    stop: Subject[int] = Subject()
    done = asyncio.get_running_loop().create_future()
    events = Events()
    source = from_sse(chunks_of(long_body(2_000), 64, log)).pipe(ops.convert())
    events.subscribe(
        source.pipe(rx.take_until(stop), rx.do_action(on_completed=lambda: done.set_result(None)))
    )
    for _ in range(5):
        await asyncio.sleep(0)
    stop.on_next(1)
    await asyncio.wait_for(done, 2)
    count = len(events.items)
    await asyncio.sleep(0.02)
    events.check_one_terminal()
    assert 0 < count < 2_000
    assert len(events.items) == count
    assert log == ["closed"]


@pytest.mark.asyncio
async def test_first_tool_result_disposes_the_other_running_tool(no_task_leak: None) -> None:
    started: list[str] = []
    cancelled: list[str] = []

    @tool
    async def slow(name: str) -> str:
        """Wait a while."""
        started.append(name)
        try:
            await asyncio.sleep(0 if name == "fast" else 5)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise
        return name

    calls = (
        ToolCallingContent("c1", "slow", {"name": "lazy"}),
        ToolCallingContent("c2", "slow", {"name": "fast"}),
    )
    source = reactivex.of(AgentResponseResult(contents=calls))
    first = await source.pipe(
        ops.execute_tools([slow]),
        rx.first(lambda r: any(isinstance(c, ToolCalledContent) for c in r.contents)),
    )
    assert first.contents == (ToolCalledContent("c2", result="fast"),)
    await asyncio.sleep(0.01)
    assert sorted(started) == ["fast", "lazy"]
    assert cancelled == ["lazy"]


@pytest.mark.asyncio
async def test_take_before_a_tool_call_never_starts_the_tool(no_task_leak: None) -> None:
    ran: list[int] = []
    record = recording_add(ran)

    results = await converted().pipe(ops.execute_tools([record]), rx.take(2), rx.to_list())
    await asyncio.sleep(0.02)
    assert len(results) == 2
    assert ran == []


# ---------------------------------------------------------------- raising subscribers


def test_a_subscriber_raising_in_on_next_is_not_called_again() -> None:
    calls: list[AgentResponseResult] = []
    errors: list[Exception] = []

    def on_next(result: AgentResponseResult) -> None:
        calls.append(result)
        raise ValueError(f"boom {len(calls)}")

    escaped: list[Exception] = []
    try:
        converted().subscribe(on_next, errors.append)
    except ValueError as exc:
        escaped.append(exc)
    assert [str(e) for e in errors + escaped] == ["boom 1"]
    assert len(calls) == 1, f"on_next called again with {calls[1:]}"


def test_from_sse_alone_reports_a_raising_subscriber_through_on_error() -> None:
    """The reference for the test above: the source alone calls on_next once."""
    calls: list[Any] = []
    errors: list[Exception] = []

    def on_next(update: Any) -> None:
        calls.append(update)
        raise ValueError("boom")

    from_sse(BODY).subscribe(on_next, errors.append)
    assert len(calls) == 1
    assert [str(e) for e in errors] == ["boom"]


@pytest.mark.asyncio
async def test_a_subscriber_raising_once_on_an_async_converted_stream_gets_no_error_content() -> (
    None
):
    events = Events()
    done = asyncio.get_running_loop().create_future()

    def on_next(result: AgentResponseResult) -> None:
        events.on_next(result)
        if len(events.items) == 1:
            raise ValueError("boom")

    def on_error(error: Exception) -> None:
        events.on_error(error)
        done.set_result(None)

    from_sse(chunks_of(BODY)).pipe(ops.convert()).subscribe(on_next, on_error)
    await asyncio.wait_for(done, 2)
    assert [str(e) for e in events.errors] == ["boom"]
    assert not any(isinstance(c, ErrorContent) for c in contents(events.items))
    assert len(events.items) == 1


def test_without_on_error_a_failing_fused_pipeline_raises_from_subscribe() -> None:
    seen: list[AgentResponseResult] = []
    with pytest.raises(IncompleteStream):
        from_sse(TRUNCATED).pipe(ops.convert()).subscribe(seen.append)
    assert isinstance(contents(seen)[-1], ErrorContent)


def test_a_raising_on_completed_propagates_once_and_nothing_follows() -> None:
    events = Events()

    def on_completed() -> None:
        events.on_completed()
        raise RuntimeError("done badly")

    with pytest.raises(RuntimeError, match="done badly"):
        converted().pipe(ops.aggregate()).subscribe(events.on_next, events.on_error, on_completed)
    events.check_one_terminal()
    assert len(events.items) == 1


# ---------------------------------------------------------------- schedulers


def test_marble_a_bytes_body_on_the_test_scheduler_emits_at_subscription() -> None:
    scheduler = TestScheduler()
    observer = scheduler.start(lambda: from_sse(BODY).pipe(ops.convert(), ops.aggregate()))
    [(time, response), (end, kind)] = [
        (m.time, m.value.value if m.value.kind == "N" else m.value.kind) for m in observer.messages
    ]
    assert (time, end, kind) == (200, 200, "C")
    assert response.text == "Hello world, here is the answer."


def test_disposed_before_the_scheduler_runs_the_drive_reads_nothing() -> None:
    fed = [0]
    scheduler = TestScheduler()
    events = Events()
    subscription = events.subscribe(
        from_sse(BODY, counting(fed)).pipe(ops.convert()), scheduler=scheduler
    )
    subscription.dispose()
    scheduler.start()
    assert events.items == []
    assert not events.ended
    assert fed[0] == 0


def test_marble_a_map_between_operators_breaks_fusion_not_results_or_timing() -> None:
    lookup = {
        "m": u.ResponseMetadata("r", "m"),
        "t": u.TextDelta("Hi"),
        "d": u.ToolCallDelta(0, id="c", name="f", arguments_delta='{"k": '),
        "e": u.ToolCallDelta(0, arguments_delta="1}"),
        "f": u.Finish(FinishReason.TOOL_CALLS),
    }
    diagram = "-m-t--d-e--f-|"

    def run_with(*operators: Any) -> list[Any]:
        scheduler = TestScheduler()
        xs = scheduler.create_hot_observable(records(diagram, lookup))
        return scheduler.start(lambda: xs.pipe(*operators)).messages

    fused = run_with(
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        ops.parse_args_stream(),
        ops.flush_tool_calls(),
    )
    separate = run_with(
        apart(
            ops.split_legacy_delta(),
            ops.accumulate_tool_calls(),
            ops.parse_args_stream(),
            ops.flush_tool_calls(),
        )
    )
    converted_ = run_with(ops.convert())
    assert fused == separate == converted_
    assert [m.time for m in fused][-3:] == [310, 330, 330]  # Finish; Calling and | at the end
    [calling] = [c for r in values(fused) for c in r.contents if isinstance(c, ToolCallingContent)]
    assert calling.arguments == {"k": 1}


def test_marble_aggregate_disposed_mid_stream_disposes_the_hot_source() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(
        ReactiveTest.on_next(210, u.TextDelta("a")),
        ReactiveTest.on_next(300, u.TextDelta("b")),
        ReactiveTest.on_completed(400),
    )
    observer = scheduler.start(lambda: xs.pipe(ops.convert(), ops.aggregate()), disposed=250)
    assert observer.messages == []
    assert xs.subscriptions == [ReactiveTest.subscribe(200, 250)]


@pytest.mark.parametrize(
    "scheduler",
    [ImmediateScheduler(), NewThreadScheduler(), ThreadPoolScheduler(2)],
    ids=["immediate", "new-thread", "thread-pool"],
)
def test_subscribing_on_any_scheduler_gives_the_synchronous_result(scheduler: Any) -> None:
    expected = from_sse(BODY).pipe(ops.convert(), ops.aggregate()).run()
    ended = threading.Event()
    events = Events()
    from_sse(BODY).pipe(ops.convert(), ops.aggregate()).subscribe(
        events.on_next,
        lambda e: (events.on_error(e), ended.set()),
        lambda: (events.on_completed(), ended.set()),
        scheduler=scheduler,
    )
    assert ended.wait(2)
    events.check_one_terminal()
    assert events.items == [expected]


def test_subscribe_on_and_observe_on_a_thread_pool() -> None:
    pool = ThreadPoolScheduler(2)
    expected = converted().pipe(rx.to_list()).run()
    got = converted().pipe(rx.subscribe_on(pool), rx.observe_on(pool), rx.to_list()).run()
    assert len(got) == len(expected)
    assert [r.contents for r in got] == [r.contents for r in expected]


@pytest.mark.asyncio
async def test_subscribe_on_and_observe_on_the_asyncio_loop() -> None:
    loop = asyncio.get_running_loop()
    scheduler = AsyncIOScheduler(loop)
    async_result = await from_sse(chunks_of(BODY)).pipe(
        rx.subscribe_on(scheduler), ops.convert(), rx.observe_on(scheduler), ops.aggregate()
    )
    sync_result = await from_sse(BODY).pipe(
        rx.observe_on(scheduler), ops.convert(), ops.execute_tools([add]), ops.aggregate()
    )
    assert async_result.text == sync_result.text == "Hello world, here is the answer."
    assert [m.content for m in sync_result.tool_messages] == ["3", "7"]


def test_subscribing_from_inside_another_subscription_defers_the_drive() -> None:
    """Inside Rx's trampoline a bytes body is read after the current action, as
    reactivex.from_iterable is; nested pipelines still complete, in order."""
    order: list[str] = []

    def inner(_: Any) -> None:
        order.append("outer item")
        from_sse(TEXT_BODY).pipe(ops.convert(), ops.aggregate()).subscribe(
            lambda r: order.append(r.text)
        )
        order.append("after inner subscribe")

    reactivex.from_iterable([1]).subscribe(inner)
    assert order == ["outer item", "after inner subscribe", "Just text, no tools."]


# ---------------------------------------------------------------- combining streams


def test_concat_of_two_converted_calls_aggregates_two_steps() -> None:
    response = reactivex.concat(converted(BODY), converted(TEXT_BODY)).pipe(ops.aggregate()).run()
    assert response.text == "Hello world, here is the answer.Just text, no tools."
    assert [c.id for c in response.tool_calls] == ["c1", "c2"]
    roles = [m.role.value for m in response.turn_transcript]
    assert roles == ["assistant", "assistant"]
    assert response.turn_transcript[-1].content == "Just text, no tools."
    assert response.finish_reason is FinishReason.STOP


def test_merge_of_two_converted_streams_keeps_every_result_once() -> None:
    one = converted(BODY).pipe(rx.to_list()).run()
    two = converted(TEXT_BODY).pipe(rx.to_list()).run()
    merged = reactivex.merge(converted(BODY), converted(TEXT_BODY)).pipe(rx.to_list()).run()
    assert len(merged) == len(one) + len(two)
    assert sorted(map(repr, merged)) == sorted(map(repr, one + two))


def test_operator_overloads_concat_and_slice_on_a_fused_observable() -> None:
    both = converted(TEXT_BODY) + converted(TEXT_BODY)
    texts = [c.text for c in contents(both.pipe(rx.to_list()).run()) if isinstance(c, TextContent)]
    assert "".join(texts) == "Just text, no tools." * 2
    first_two = converted(TEXT_BODY)[:2].pipe(rx.to_list()).run()
    assert first_two == converted(TEXT_BODY).pipe(rx.to_list()).run()[:2]


def test_zip_of_the_same_converted_body_pairs_equal_results() -> None:
    stream = converted()
    pairs = reactivex.zip(stream, stream).pipe(rx.to_list()).run()
    assert pairs
    assert all(a == b for a, b in pairs)


# ---------------------------------------------------------------- await and run


@pytest.mark.asyncio
async def test_await_equals_run_for_a_fused_pipeline() -> None:
    pipeline = from_sse(BODY).pipe(ops.convert(), ops.aggregate())
    assert await pipeline == pipeline.run()
    assert await from_sse(BODY) == u.Finish(FinishReason.TOOL_CALLS)


@pytest.mark.asyncio
async def test_await_of_an_empty_converted_stream_raises_no_elements() -> None:
    with pytest.raises(SequenceContainsNoElementsError):
        await reactivex.empty().pipe(ops.convert())
    with pytest.raises(SequenceContainsNoElementsError):
        reactivex.empty().pipe(ops.convert()).run()


@pytest.mark.asyncio
async def test_await_of_a_failing_async_stream_raises_its_error_with_partial(
    no_task_leak: None,
) -> None:
    with pytest.raises(IncompleteStream) as caught:
        await from_sse(chunks_of(TRUNCATED)).pipe(ops.convert(), ops.aggregate())
    assert caught.value.partial is not None
    assert caught.value.partial.interrupted


def test_run_of_a_fused_pipeline_equals_rx_run_with_an_explicit_scheduler() -> None:
    pipeline = from_sse(BODY).pipe(ops.convert(), ops.aggregate())
    assert pipeline.run() == pipeline.run(NewThreadScheduler())
    with pytest.raises(IncompleteStream):
        from_sse(TRUNCATED).pipe(ops.convert(), ops.aggregate()).run()


def test_run_of_an_unfused_bytes_body_returns_the_last_update() -> None:
    assert from_sse(BODY).run() == u.Finish(FinishReason.TOOL_CALLS)
    assert from_sse(BODY).pipe(rx.map(lambda x: x), ops.convert(), ops.aggregate()).run() == (
        from_sse(BODY).pipe(ops.convert(), ops.aggregate()).run()
    )


# ---------------------------------------------------------------- Rx grammar


@pytest.mark.parametrize("body", [BODY, TRUNCATED, b"data: not json\n\n"], ids=["ok", "cut", "bad"])
@pytest.mark.parametrize(
    "pipeline",
    [
        lambda s: s.pipe(ops.convert()),
        lambda s: s.pipe(ops.convert(), ops.aggregate()),
        lambda s: s.pipe(rx.map(lambda x: x), ops.convert(), rx.map(lambda x: x), ops.aggregate()),
        lambda s: s.pipe(apart(ops.split_legacy_delta(), ops.accumulate_tool_calls())),
        lambda s: s.pipe(ops.convert(eager=True), ops.flush_tool_calls()),
    ],
    ids=["convert", "convert+aggregate", "mapped", "apart", "eager+flush"],
)
def test_exactly_one_terminal_and_nothing_after_it(
    body: bytes, pipeline: Callable[[Observable[Any]], Observable[Any]]
) -> None:
    events = Events()
    events.subscribe(pipeline(from_sse(body)))
    events.check_one_terminal()
    if body is BODY:
        assert events.completed == 1
    else:
        assert events.items == [] or not isinstance(events.items[-1], AgentResponse)


@pytest.mark.asyncio
@pytest.mark.parametrize("body", [BODY, TRUNCATED], ids=["ok", "cut"])
async def test_exactly_one_terminal_over_an_async_body_with_tools(body: bytes) -> None:
    done = asyncio.get_running_loop().create_future()
    events = Events()
    source = from_sse(chunks_of(body)).pipe(ops.convert(), ops.execute_tools([add]))
    source.pipe(rx.finally_action(lambda: done.set_result(None))).subscribe(
        events.on_next, events.on_error, events.on_completed
    )
    await asyncio.wait_for(done, 2)
    await asyncio.sleep(0.01)
    events.check_one_terminal()
    called = [c for c in contents(events.items) if isinstance(c, ToolCalledContent)]
    assert len(called) == (2 if body is BODY else 0)


# ---------------------------------------------------------------- execute_tools


@pytest.mark.asyncio
async def test_resubscribing_execute_tools_runs_the_tools_again(no_task_leak: None) -> None:
    ran: list[int] = []
    record = recording_add(ran)

    stream = converted().pipe(ops.execute_tools([record]), ops.aggregate())
    one = await stream
    two = await stream
    assert sorted(ran) == [1, 1, 3, 3]
    assert [m.content for m in one.tool_messages] == [m.content for m in two.tool_messages]


@pytest.mark.asyncio
async def test_share_around_execute_tools_runs_each_tool_once(no_task_leak: None) -> None:
    ran: list[int] = []
    record = recording_add(ran)

    shared = from_sse(chunks_of(BODY)).pipe(ops.convert(), ops.execute_tools([record]), rx.share())
    one = shared.pipe(ops.aggregate(), rx.to_future())
    two = shared.pipe(ops.aggregate(), rx.to_future())
    first, second = await asyncio.wait_for(asyncio.gather(one, two), 2)
    assert sorted(ran) == [1, 3]
    assert first.tool_messages == second.tool_messages


# ---------------------------------------------------------------- clients


@pytest.mark.asyncio
async def test_rx_retry_around_a_client_stream_sends_a_new_request(llm_server: LLMServer) -> None:
    llm_server.enqueue(Fault.status(500), Reply(text="second time lucky"))
    async with OpenAIChatClient(llm_server.url) as client:
        response = await client.stream(USER).pipe(ops.convert(), ops.aggregate(), rx.retry(2))
    assert response.text == "second time lucky"
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
async def test_first_on_a_client_stream_closes_the_connection(llm_server: LLMServer) -> None:
    llm_server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.01))
    async with OpenAIChatClient(llm_server.url) as client:
        first = await client.stream(USER).pipe(
            ops.convert(), rx.first(lambda r: any(isinstance(c, TextContent) for c in r.contents))
        )
        assert [c.text for c in contents([first])] == ["word "]
        await llm_server.wait_connections_closed(timeout=1.0)


def test_disposing_a_client_subscription_from_another_thread_after_its_loop_closed() -> None:
    holder: dict[str, Any] = {}

    async def main() -> None:
        async with LLMServer() as server, aiohttp.ClientSession() as session:
            server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.01))
            client = OpenAIChatClient(server.url, session=session)
            seen = asyncio.Event()
            before = asyncio.all_tasks()
            holder["sub"] = client.stream(USER).subscribe(lambda _: seen.set(), lambda _: None)
            [call] = asyncio.all_tasks() - before
            await asyncio.wait_for(seen.wait(), 2)
            # the loop ends while the call runs: as asyncio.run does, cancel it
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)

    asyncio.run(main())
    errors: list[BaseException] = []

    def dispose() -> None:
        try:
            holder["sub"].dispose()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=dispose)
    thread.start()
    thread.join(2)
    assert errors == []


@pytest.mark.asyncio
async def test_disposing_execute_tools_from_another_thread_cancels_the_tool_promptly() -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    cancelled: asyncio.Future[float] = loop.create_future()

    @tool
    async def slow() -> str:
        """Take a long time."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set_result(time.monotonic())
            raise
        return "late"

    stop: Subject[int] = Subject()
    events = Events()
    source = reactivex.of(AgentResponseResult(contents=(ToolCallingContent("c1", "slow", {}),)))
    events.subscribe(source.pipe(ops.execute_tools([slow]), rx.take_until(stop)))
    await asyncio.wait_for(started.wait(), 1)
    fired = time.monotonic()

    def fire() -> None:
        time.sleep(0.1)  # the loop is asleep in its selector by then
        stop.on_next(1)

    threading.Thread(target=fire).start()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(cancelled), 1.0)
    assert events.completed == 1
    assert cancelled.done(), "the tool was still running 1 s after the disposal"
    assert cancelled.result() - fired < 0.6


@pytest.mark.asyncio
async def test_disposing_an_agent_turn_from_another_thread_cancels_its_tool_promptly() -> None:
    from rafrx.agent import Agent

    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    cancelled: asyncio.Future[float] = loop.create_future()

    @tool
    async def slow() -> str:
        """Take a long time."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set_result(time.monotonic())
            raise
        return "late"

    class Scripted:
        def stream(self, messages: Any, tools: Any = None) -> Observable[u.AgentResponseUpdate]:
            return reactivex.from_iterable(
                [
                    u.ToolCallStart("c1", "slow"),
                    u.ToolCallArgs("c1", "{}"),
                    u.ToolCallEnd("c1"),
                    u.Finish(FinishReason.TOOL_CALLS),
                ]
            )

    events = Events()
    subscription = events.subscribe(Agent(Scripted(), tools=[slow]).run("go"))
    await asyncio.wait_for(started.wait(), 1)
    fired = time.monotonic()

    def dispose() -> None:
        time.sleep(0.1)  # the loop is asleep in its selector by then
        subscription.dispose()

    threading.Thread(target=dispose).start()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(cancelled), 1.0)
    assert cancelled.done(), "the tool was still running 1 s after the disposal"
    assert cancelled.result() - fired < 0.6
    assert not events.ended
