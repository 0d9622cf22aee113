"""Schedulers, threads and subscription semantics, as reactivex users meet them.

In-memory sources (``from_sse`` over bytes, chunk lists, generators and async
iterables built from the recorded fixtures) and real HTTP against rafrx's own
``LLMServer``: ``subscribe_on`` / ``observe_on`` with every stock scheduler,
``.run()`` from threads, coroutines and callbacks, multicasting, resubscription,
disposal from other threads, twice, after completion and after the loop closed,
and subscribers that raise. Where it matters, rafrx is compared with what
reactivex's own sources and operators do in the same situation.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import reactivex
from reactivex import operators as rx
from reactivex.scheduler import (
    CurrentThreadScheduler,
    EventLoopScheduler,
    ImmediateScheduler,
    NewThreadScheduler,
    ThreadPoolScheduler,
    TimeoutScheduler,
)
from reactivex.scheduler.eventloop import AsyncIOThreadSafeScheduler
from reactivex.subject import Subject

import rafrx
from rafrx import ChatMessage
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.agent import _RUNNING as RUNNING_TURNS
from rafrx.content import TextContent
from rafrx.errors import IncompleteStream
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"
TOOLS_BODY = (FIXTURES / "openai-chat" / "deepseek-reasoning-tools.sse").read_bytes()
ANTHROPIC_BODY = (FIXTURES / "anthropic" / "anthropic-parallel-tool-use.sse").read_bytes()
USER = [ChatMessage.user("hi")]
SLOW = Reply(text="word " * 3000, chunk_size=4, delay=0.005)
PATIENCE = 5.0


async def until(predicate: Any, timeout: float = PATIENCE) -> None:
    """Poll ``predicate`` on the loop until it holds (fails the test after ``timeout``)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def lines_of(body: bytes) -> list[bytes]:
    """The body as one chunk per line: many chunks, split inside events."""
    return body.splitlines(keepends=True)


def reference(body: bytes = TOOLS_BODY, dialect: str = "openai-chat") -> AgentResponse:
    return from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()


def all_texts(results: list[AgentResponseResult]) -> str:
    return "".join(c.text for r in results for c in r.contents if isinstance(c, TextContent))


@pytest.fixture
def thread_errors() -> Iterator[list[Any]]:
    """What reaches ``threading.excepthook`` or ``sys.unraisablehook`` during the test."""
    seen: list[Any] = []
    old_thread, old_unraisable = threading.excepthook, sys.unraisablehook
    threading.excepthook = seen.append
    sys.unraisablehook = seen.append
    try:
        yield seen
    finally:
        threading.excepthook, sys.unraisablehook = old_thread, old_unraisable


class Gate:
    """A sync chunk iterable that blocks before chunk ``hold`` until released, and
    records whether its iterator was closed (``from_sse`` promises to close it)."""

    def __init__(self, chunks: list[bytes], hold: int) -> None:
        self.chunks = chunks
        self.hold = hold
        self.reached = threading.Event()
        self.release = threading.Event()
        self.closed = threading.Event()
        self.started = threading.Event()
        self.yielded = 0

    def __iter__(self) -> Iterator[bytes]:
        self.started.set()
        try:
            for k, chunk in enumerate(self.chunks):
                if k == self.hold:
                    self.reached.set()
                    self.release.wait(PATIENCE)
                self.yielded += 1
                yield chunk
        finally:
            self.closed.set()


# ---------------------------------------------------------------- sync sources on schedulers


SCHEDULERS = {
    "thread-pool": lambda: ThreadPoolScheduler(2),
    "event-loop": EventLoopScheduler,
    "new-thread": NewThreadScheduler,
    "timeout": TimeoutScheduler,
    "immediate": ImmediateScheduler,
    "current-thread": CurrentThreadScheduler,
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_a_fused_pipeline_gives_the_same_response_on_every_stock_scheduler(name: str) -> None:
    """``run(scheduler)``, ``subscribe_on``/``observe_on`` inside and around the fused
    reducer pipe: the response is the one of a plain synchronous run."""
    expected = reference()
    scheduler = SCHEDULERS[name]()
    try:
        pipelines = {
            "run(scheduler)": from_sse(TOOLS_BODY).pipe(ops.convert(), ops.aggregate()),
            "subscribe_on between": from_sse(TOOLS_BODY).pipe(
                ops.convert(), rx.subscribe_on(scheduler), ops.aggregate()
            ),
            "observe_on between": from_sse(lines_of(TOOLS_BODY)).pipe(
                rx.subscribe_on(scheduler),
                ops.split_legacy_delta(),
                rx.observe_on(scheduler),
                ops.accumulate_tool_calls(),
                ops.parse_args_stream(),
                ops.flush_tool_calls(),
                ops.aggregate(),
            ),
            "subscribe_on around": from_sse(TOOLS_BODY).pipe(
                ops.convert(), ops.aggregate(), rx.subscribe_on(scheduler)
            ),
        }
        got = {
            label: (p.run(scheduler) if label == "run(scheduler)" else p.run())
            for label, p in pipelines.items()
        }
        assert got == dict.fromkeys(pipelines, expected)
    finally:
        if isinstance(scheduler, EventLoopScheduler):
            scheduler.dispose()


@pytest.mark.timeout(20)
def test_one_cold_pipeline_run_concurrently_from_many_threads_gives_independent_results(
    pool: ThreadPoolScheduler,
) -> None:
    """One observable object, eight threads running it at once: each subscription has
    its own reducers and decoder (DESIGN: cold, one reducer per subscription)."""
    expected = reference(ANTHROPIC_BODY, "anthropic")
    pipeline = from_sse(lines_of(ANTHROPIC_BODY), "anthropic").pipe(ops.convert(), ops.aggregate())
    results: list[Any] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait(PATIENCE)
        for _ in range(5):
            results.append(pipeline.run())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE * 2)
    assert not any(t.is_alive() for t in threads)
    assert len(results) == 40
    assert all(r == expected for r in results)


@pytest.mark.timeout(20)
def test_run_called_inside_an_on_next_callback_of_another_stream() -> None:
    """A subscriber that runs a nested pipeline synchronously from ``on_next`` (on the
    trampoline of the outer subscription) gets the full nested result each time."""
    expected = reference()
    nested: list[AgentResponse] = []
    outer = from_sse(TOOLS_BODY).pipe(ops.convert())
    done: list[str] = []
    outer.subscribe(
        lambda _: nested.append(from_sse(TOOLS_BODY).pipe(ops.convert(), ops.aggregate()).run()),
        lambda e: done.append(repr(e)),
        lambda: done.append("completed"),
    )
    count = len(outer.pipe(rx.to_list()).run())
    assert done == ["completed"]
    assert len(nested) == count
    assert all(r == expected for r in nested)


@pytest.mark.timeout(20)
def test_publish_connect_and_replay_give_late_and_early_subscribers_the_same_items() -> None:
    """Multicasting a synchronous pipeline behaves as with ``reactivex.from_iterable``:
    ``publish`` subscribers present at ``connect`` get everything, ``replay`` serves a
    subscriber that comes after completion, a plain resubscription reads the body anew."""
    pipeline = from_sse(lines_of(TOOLS_BODY)).pipe(ops.convert())
    expected = pipeline.pipe(rx.to_list()).run()

    published = pipeline.pipe(rx.publish())
    first: list[Any] = []
    second: list[Any] = []
    published.subscribe(first.append)
    published.subscribe(second.append)
    published.connect()
    assert first == expected
    assert second == expected

    replayed = pipeline.pipe(rx.replay())
    replayed.connect()
    late: list[Any] = []
    ended: list[str] = []
    replayed.subscribe(late.append, lambda e: ended.append(repr(e)), lambda: ended.append("done"))
    assert late == expected
    assert ended == ["done"]

    assert pipeline.pipe(rx.to_list()).run() == expected  # cold: again, in full


@pytest.mark.timeout(20)
def test_repeat_and_retry_resubscribe_a_fused_pipeline_as_they_do_from_iterable() -> None:
    """``repeat(n)`` gives n whole responses (no recursion limit at 2000), ``retry(n)``
    re-reads a re-iterable body n times and ends with the typed error."""
    responses = (
        from_sse(TOOLS_BODY)
        .pipe(ops.convert(), ops.aggregate(), rx.repeat(2000), rx.to_list())
        .run()
    )
    assert len(responses) == 2000
    assert responses[0] == responses[-1] == reference()

    reads: list[int] = []

    class Truncated:
        def __iter__(self) -> Iterator[bytes]:
            reads.append(1)
            yield TOOLS_BODY[:200]

    with pytest.raises(IncompleteStream):
        from_sse(Truncated()).pipe(ops.convert(), rx.retry(3), ops.aggregate()).run()
    assert len(reads) == 3


@pytest.mark.timeout(20)
def test_concat_take_reads_only_the_first_body() -> None:
    """As ``from_iterable`` would: ``concat(a, b).pipe(take(1))`` never starts ``b``."""
    started: list[str] = []

    def body(tag: str) -> Iterator[bytes]:
        started.append(tag)
        yield TOOLS_BODY

    first = (
        reactivex.concat(
            from_sse(body("a")).pipe(ops.convert()), from_sse(body("b")).pipe(ops.convert())
        )
        .pipe(rx.take(1), rx.to_list())
        .run()
    )
    # (generators: body() only runs its first line when iterated)
    assert len(first) == 1
    assert started == ["a"]


# ---------------------------------------------------------------- disposal of sync sources


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fused", [False, True], ids=["raw", "convert"])
@pytest.mark.parametrize("how", ["scheduler=pool", "subscribe_on(pool)"])
def test_disposing_a_pool_driven_body_from_another_thread_stops_and_closes_it(
    pool: ThreadPoolScheduler, fused: bool, how: str, thread_errors: list[Any]
) -> None:
    """from_sse: read "on the scheduler the subscription names ... Reading stops ... when
    the subscription is disposed ... and the iterator is then closed." Disposed from the
    main thread while a pool thread reads. (Under ``subscribe_on`` reactivex only hands the
    subscription its disposable once the synchronous drive returned, as with
    ``from_iterable``: there the body is read to its end, but nothing more is delivered.)"""
    gate = Gate(lines_of(TOOLS_BODY), hold=6)
    source = from_sse(gate)
    observable = source.pipe(ops.convert()) if fused else source
    items: list[Any] = []
    ended: list[str] = []
    callbacks = (items.append, lambda e: ended.append(repr(e)), lambda: ended.append("done"))
    if how == "scheduler=pool":
        subscription = observable.subscribe(*callbacks, scheduler=pool)
    else:
        subscription = observable.pipe(rx.subscribe_on(pool)).subscribe(*callbacks)
    assert gate.reached.wait(PATIENCE)
    subscription.dispose()
    seen = len(items)
    gate.release.set()
    assert gate.closed.wait(PATIENCE), "the chunk iterator was never closed"
    subscription.dispose()  # twice: nothing
    assert ended == []
    assert len(items) == seen  # nothing after dispose returned
    if how == "scheduler=pool":
        assert gate.yielded == gate.hold + 1  # it stopped reading at the next chunk
    assert thread_errors == []


@pytest.mark.timeout(20)
def test_disposing_before_a_busy_scheduler_starts_the_drive_reads_nothing() -> None:
    """Like ``from_iterable``: a subscription disposed before its scheduled action ran
    never starts the body."""
    scheduler = EventLoopScheduler()
    try:
        busy = threading.Event()
        scheduler.schedule(lambda *_: busy.wait(PATIENCE))
        gate = Gate(lines_of(TOOLS_BODY), hold=10_000)
        got: list[Any] = []
        subscription = from_sse(gate).pipe(ops.convert()).subscribe(got.append, scheduler=scheduler)
        subscription.dispose()
        busy.set()
        flushed = threading.Event()
        scheduler.schedule(lambda *_: flushed.set())
        assert flushed.wait(PATIENCE)
        assert not gate.started.is_set()
        assert got == []
    finally:
        scheduler.dispose()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fused", [False, True], ids=["raw", "convert+aggregate"])
def test_disposing_after_completion_and_twice_is_harmless(fused: bool) -> None:
    observable: reactivex.Observable[Any] = from_sse(TOOLS_BODY)
    if fused:
        observable = observable.pipe(ops.convert(), ops.aggregate())
    ended: list[str] = []
    subscription = observable.subscribe(
        lambda _: None, lambda e: ended.append(repr(e)), lambda: ended.append("done")
    )
    subscription.dispose()
    subscription.dispose()
    assert ended == ["done"]


# ---------------------------------------------------------------- subscribers that raise


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fused", [False, True], ids=["raw", "convert"])
def test_a_raising_on_next_on_a_pool_thread_reaches_on_error_once(
    pool: ThreadPoolScheduler, fused: bool
) -> None:
    """from_sse routes an exception from the subscriber's on_next to its on_error (its
    drive: "the stream's error, or a subscriber's"; the reducer wrapper: "the observer's
    on_next raised"), once, on a pool thread, and stops and closes its iterator."""

    def compare(observable: reactivex.Observable[Any]) -> list[Any]:
        boom = ValueError("subscriber")
        ended: list[Any] = []
        done = threading.Event()

        def on_next(_: Any) -> None:
            raise boom

        def finish(what: Any) -> None:
            ended.append(what)
            done.set()

        observable.pipe(rx.subscribe_on(pool)).subscribe(
            on_next, finish, lambda: finish("completed")
        )
        assert done.wait(PATIENCE)
        return [e is boom for e in ended]

    gate = Gate(lines_of(TOOLS_BODY), hold=10_000)
    source = from_sse(gate)
    assert compare(source.pipe(ops.convert()) if fused else source) == [True]
    assert gate.closed.wait(PATIENCE)
    assert gate.yielded < len(gate.chunks)


@pytest.mark.timeout(20)
def test_a_raising_downstream_operator_after_convert_fails_the_stream_with_its_error() -> None:
    """A user's ``rx.map`` after ``convert()`` that raises: its error ends the stream (as
    ``map`` does), the rest of the body is not decoded, and ``aggregate`` after it never
    wraps it."""
    boom = KeyError("mine")
    calls: list[int] = []

    def mapper(result: AgentResponseResult) -> AgentResponseResult:
        calls.append(1)
        if len(calls) == 3:
            raise boom
        return result

    gate = Gate(lines_of(TOOLS_BODY), hold=10_000)
    with pytest.raises(KeyError) as caught:
        from_sse(gate).pipe(ops.convert(), rx.map(mapper), ops.aggregate()).run()
    assert caught.value is boom
    assert len(calls) == 3
    assert gate.closed.is_set()


# ---------------------------------------------------------------- run() in a coroutine


@pytest.mark.timeout(20)
@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["subscribe_on(pool)", "delay"])
async def test_run_in_a_coroutine_refuses_a_stream_that_does_not_end_at_once(
    pool: ThreadPoolScheduler, where: str
) -> None:
    """In a loop's thread, run() cannot tell a stream another thread drives from one
    the loop must drive (which would wait forever): it refuses both and says to await,
    and awaiting gives the answer."""

    def upstream(source: reactivex.Observable[Any]) -> reactivex.Observable[Any]:
        if where == "delay":
            return source.pipe(rx.delay(0.01))
        return source.pipe(rx.subscribe_on(pool))

    stream = from_sse(TOOLS_BODY).pipe(upstream, ops.convert(), ops.aggregate())
    with pytest.raises(RuntimeError, match="await it instead"):
        stream.run()
    assert await asyncio.wait_for(stream, PATIENCE) == reference()


# ---------------------------------------------------------------- async iterables


class SlowChunks:
    """An async iterable of chunks with a pause after ``pause_at``; records ``aclose``."""

    def __init__(self, chunks: list[bytes], pause_at: int, pause: float = 30.0) -> None:
        self.chunks = chunks
        self.pause_at = pause_at
        self.pause = pause
        self.closed = threading.Event()
        self.paused = threading.Event()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[bytes]:
        try:
            for k, chunk in enumerate(self.chunks):
                if k == self.pause_at:
                    self.paused.set()
                    await asyncio.sleep(self.pause)
                yield chunk
        finally:
            self.closed.set()


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_an_async_body_disposed_from_a_worker_thread_is_closed(
    no_task_leak: None, loop_errors: list[dict[str, Any]], thread_errors: list[Any]
) -> None:
    """Disposing from another thread cancels the reading task and ``aclose()``s the
    iterator (from_sse docstring); nothing is reported, nothing is emitted after."""
    chunks = SlowChunks(lines_of(TOOLS_BODY), pause_at=6)
    items: list[Any] = []
    ended: list[str] = []
    subscription = (
        from_sse(chunks)
        .pipe(ops.convert())
        .subscribe(items.append, lambda e: ended.append(repr(e)), lambda: ended.append("done"))
    )
    await asyncio.wait_for(asyncio.to_thread(chunks.paused.wait, PATIENCE), PATIENCE)
    seen = len(items)
    await asyncio.to_thread(subscription.dispose)
    await asyncio.to_thread(subscription.dispose)
    await asyncio.wait_for(asyncio.to_thread(chunks.closed.wait, PATIENCE), PATIENCE)
    await asyncio.sleep(0.05)
    assert (len(items), ended) == (seen, [])
    assert loop_errors == []
    assert thread_errors == []


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_an_async_body_subscribed_twice_with_a_reiterable_gives_two_full_results(
    no_task_leak: None,
) -> None:
    """Cold: an async iterable whose ``__aiter__`` starts anew gives each subscriber the
    whole response."""
    chunks = SlowChunks(lines_of(TOOLS_BODY), pause_at=10_000)
    pipeline = from_sse(chunks).pipe(ops.convert(), ops.aggregate())
    first, second = await asyncio.gather(
        asyncio.wait_for(rafrx.collect_agent_response(from_sse(chunks).pipe(ops.convert())), 5),
        asyncio.wait_for(_last(pipeline), 5),
    )
    assert first == second == reference()


async def _last(observable: reactivex.Observable[Any]) -> Any:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    last: list[Any] = []
    observable.subscribe(
        last.append,
        lambda e: loop.call_soon_threadsafe(done.set_exception, e),
        lambda: loop.call_soon_threadsafe(done.set_result, last[-1]),
    )
    return await done


@pytest.mark.timeout(20)
def test_disposing_an_async_body_after_its_loop_closed_does_not_raise() -> None:
    class Endless:
        def __aiter__(self) -> Endless:
            return self

        async def __anext__(self) -> bytes:
            await asyncio.sleep(3600)
            return b""

    loop = asyncio.new_event_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def subscribe() -> Any:
        subscription = from_sse(Endless()).subscribe(lambda _: None, lambda _: None)
        await asyncio.sleep(0.01)
        return subscription

    subscription = loop.run_until_complete(subscribe())
    loop.close()
    subscription.dispose()  # must not raise
    subscription.dispose()


# ---------------------------------------------------------------- real HTTP


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_share_of_a_client_stream_sends_one_request_for_two_subscribers(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Reply(text="shared reply"))
    loop = asyncio.get_running_loop()
    async with OpenAIChatClient(llm_server.url) as client:
        shared = client.stream(USER).pipe(ops.convert(), rx.share())
        got: list[list[AgentResponseResult]] = [[], []]
        ends = [loop.create_future(), loop.create_future()]
        for k in range(2):
            shared.subscribe(
                got[k].append, ends[k].set_exception, lambda k=k: ends[k].set_result(1)
            )
        await asyncio.wait_for(asyncio.gather(*ends), PATIENCE)
        assert all_texts(got[0]) == all_texts(got[1]) == "shared reply"
        assert llm_server.request_count == 1
    await llm_server.wait_connections_closed(2.0)


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_disposing_from_a_pool_thread_inside_observe_on_closes_the_connection(
    llm_server: LLMServer,
    pool: ThreadPoolScheduler,
    loop_errors: list[dict[str, Any]],
    thread_errors: list[Any],
) -> None:
    """A UI consuming on a pool (observe_on) disposes from its on_next: the request is
    aborted promptly, no terminal event comes, nothing is reported anywhere."""
    llm_server.enqueue(SLOW)
    async with OpenAIChatClient(llm_server.url) as client:
        third = threading.Event()
        holder: list[Any] = []
        seen: list[int] = []
        ended: list[str] = []

        def on_next(_: Any) -> None:
            seen.append(threading.get_ident())
            if len(seen) == 3:
                holder[0].dispose()
                holder[0].dispose()
                third.set()

        holder.append(
            client.stream(USER)
            .pipe(ops.convert(), rx.observe_on(pool))
            .subscribe(on_next, lambda e: ended.append(repr(e)), lambda: ended.append("done"))
        )
        assert await asyncio.to_thread(third.wait, PATIENCE)
        await llm_server.wait_connections_closed(2.0)
        await asyncio.sleep(0.05)
        assert len(seen) == 3
        assert ended == []
        assert threading.get_ident() not in seen
    assert loop_errors == []
    assert thread_errors == []


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_a_raising_subscriber_of_a_client_stream_gets_its_own_error_and_the_request_ends(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    llm_server.enqueue(SLOW, SLOW)
    loop = asyncio.get_running_loop()
    async with OpenAIChatClient(llm_server.url) as client:
        for pipeline in (client.stream(USER), client.stream(USER).pipe(ops.convert())):
            boom = ValueError("subscriber")
            ended: asyncio.Future[Any] = loop.create_future()

            def on_next(_: Any, boom: Exception = boom) -> None:
                raise boom

            def completed(ended: asyncio.Future[Any] = ended) -> None:
                ended.set_result("completed")

            pipeline.subscribe(on_next, ended.set_result, completed)
            assert await asyncio.wait_for(ended, PATIENCE) is boom
            await llm_server.wait_connections_closed(2.0)
    assert loop_errors == []


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_client_stream_disposed_after_completion_and_twice_reports_nothing(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    llm_server.enqueue(Reply(text="x"))
    loop = asyncio.get_running_loop()
    async with OpenAIChatClient(llm_server.url) as client:
        ended: asyncio.Future[Any] = loop.create_future()
        subscription = (
            client.stream(USER)
            .pipe(ops.convert())
            .subscribe(lambda _: None, ended.set_exception, lambda: ended.set_result("done"))
        )
        assert await asyncio.wait_for(ended, PATIENCE) == "done"
        subscription.dispose()
        await asyncio.to_thread(subscription.dispose)  # and from another thread
        await asyncio.sleep(0.05)
    assert loop_errors == []


@pytest.mark.timeout(30)
def test_a_client_stream_run_from_several_threads_on_a_background_loop(
    pool: ThreadPoolScheduler,
) -> None:
    """Sync threads each ``.run()`` the same cold observable, subscribed on a background
    loop with ``subscribe_on(AsyncIOThreadSafeScheduler)``: one request each, each its
    own full response."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        with LLMServer.in_thread() as server:
            client = OpenAIChatClient(server.url)
            try:
                for k in range(4):
                    server.enqueue(Reply(text=f"reply {k}"))
                turn = client.stream(USER).pipe(
                    rx.subscribe_on(AsyncIOThreadSafeScheduler(loop)),
                    ops.convert(),
                    ops.aggregate(),
                )
                texts: list[str] = []
                errors: list[BaseException] = []

                def worker() -> None:
                    try:
                        texts.append(turn.run().text)
                    except BaseException as exc:  # (reported below)
                        errors.append(exc)

                threads = [threading.Thread(target=worker) for _ in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(PATIENCE * 2)
                assert errors == []
                assert sorted(texts) == [f"reply {k}" for k in range(4)]
                assert server.request_count == 4
            finally:
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_a_subject_fed_from_a_worker_thread_through_the_fused_operators() -> None:
    """Pure operators over a hot Subject fed from another thread (a user's own SDK
    callback): items arrive on that thread, the response is the in-memory one."""
    updates = from_sse(TOOLS_BODY).pipe(rx.to_list()).run()
    subject: Subject[u.AgentResponseUpdate] = Subject()
    threads: set[int] = set()
    response = rafrx.collect_agent_response(
        subject.pipe(rx.do_action(lambda _: threads.add(threading.get_ident())), ops.convert())
    )
    task = asyncio.ensure_future(response)
    await asyncio.sleep(0)

    def feed() -> None:
        for update in updates:
            subject.on_next(update)
            time.sleep(0.001)
        subject.on_completed()

    await asyncio.to_thread(feed)
    assert await asyncio.wait_for(task, PATIENCE) == reference()
    assert threading.get_ident() not in threads


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_run_in_a_coroutine_on_a_client_stream_or_turn_refuses_without_side_effects(
    llm_server: LLMServer,
) -> None:
    """``run()`` in the loop's thread on an HTTP stream (its docstring: RuntimeError, not
    a deadlock): no request goes out, the agent saves nothing, no task is left."""
    llm_server.enqueue(Reply(text="never"))
    async with OpenAIChatClient(llm_server.url) as client:
        with pytest.raises(RuntimeError, match="await it instead"):
            client.stream(USER).pipe(ops.convert(), ops.aggregate()).run()
        history = rafrx.InMemoryHistoryProvider()
        with pytest.raises(RuntimeError, match="await it instead"):
            rafrx.Agent(client, history=history).run("hi").pipe(ops.aggregate()).run()
        await asyncio.sleep(0.1)
        assert llm_server.request_count == 0
        assert history.messages == ()


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_an_agent_turn_emits_every_result_on_the_loop_thread_even_for_sync_tools(
    llm_server: LLMServer,
) -> None:
    """Sync tools run on rafrx's own threads, but their results reach the subscriber on
    the loop's thread, one at a time (Rx grammar)."""

    @rafrx.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        time.sleep(0.01)
        return a + b

    llm_server.enqueue(
        Reply(
            tool_calls=[rafrx_spec("add", {"a": 1, "b": 2}), rafrx_spec("add", {"a": 3, "b": 4})]
        ),
        Reply(text="3 and 7"),
    )
    threads: list[int] = []
    async with OpenAIChatClient(llm_server.url) as client:
        turn = (
            rafrx.Agent(client, tools=[add])
            .run("add")
            .pipe(rx.do_action(lambda _: threads.append(threading.get_ident())))
        )
        response = await asyncio.wait_for(rafrx.collect_agent_response(turn), PATIENCE)
    assert response.text.endswith("3 and 7")
    assert sorted(m.content for m in response.tool_messages) == ["3", "7"]
    assert threads
    assert set(threads) == {threading.get_ident()}


def rafrx_spec(name: str, arguments: dict[str, Any]) -> Any:
    from rafrx.testing import ToolCallSpec

    return ToolCallSpec(name, arguments)


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_cancelling_collect_agent_response_stops_a_body_read_on_a_pool(
    pool: ThreadPoolScheduler,
) -> None:
    """collect_agent_response: "Cancelling the awaiting task disposes the subscription";
    a body read on a pool thread (scheduler the subscription names) then stops and its
    iterator is closed."""
    gate = Gate(lines_of(TOOLS_BODY), hold=6)
    results = from_sse(gate).pipe(ops.convert(), rx.subscribe_on(pool))
    # (subscribe_on outside the fused part: the drive itself runs on the trampoline of
    # the pool thread and checks the dispose flag set through subscribe_on's disposable)
    task = asyncio.ensure_future(rafrx.collect_agent_response(results))
    assert await asyncio.to_thread(gate.reached.wait, PATIENCE)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.release.set()
    assert await asyncio.to_thread(gate.closed.wait, PATIENCE)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("scheduler", [None, "pool"])
def test_take_on_a_fused_pipeline_stops_reading_the_body(
    pool: ThreadPoolScheduler, scheduler: str | None
) -> None:
    """from_sse: reading stops "when the subscription is disposed (a take(n) that has its
    items), and the iterator is then closed", on the trampoline and on a named scheduler."""
    gate = Gate(lines_of(TOOLS_BODY), hold=10_000)
    observable = from_sse(gate).pipe(ops.convert(), rx.take(2), rx.to_list())
    got = observable.run(pool) if scheduler else observable.run()
    assert len(got) == 2
    assert gate.closed.wait(PATIENCE)
    assert gate.yielded < len(gate.chunks) // 2


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_share_keeps_the_request_while_one_subscriber_remains_then_aborts_it(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(SLOW)
    async with OpenAIChatClient(llm_server.url) as client:
        shared = client.stream(USER).pipe(ops.convert(), rx.share())
        first: list[Any] = []
        second: list[Any] = []
        a = shared.subscribe(first.append)
        b = shared.subscribe(second.append)
        await until(lambda: len(second) >= 3)
        a.dispose()
        count = len(second)
        await until(lambda: len(second) >= count + 5)
        assert llm_server.open_connections == 1
        b.dispose()
        await llm_server.wait_connections_closed(2.0)
        assert llm_server.request_count == 1


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_switch_latest_over_client_streams_aborts_superseded_requests(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]]
) -> None:
    """Type-ahead: each new prompt switches to a new request; the superseded ones are
    aborted (connections closed), only the last one's text arrives after the switch."""
    llm_server.enqueue(SLOW, SLOW, Reply(text="final answer"))
    loop = asyncio.get_running_loop()
    async with OpenAIChatClient(llm_server.url) as client:
        prompts: Subject[str] = Subject()
        results: list[AgentResponseResult] = []
        ended: asyncio.Future[str] = loop.create_future()
        prompts.pipe(
            rx.map(lambda p: client.stream([ChatMessage.user(p)]).pipe(ops.convert())),
            rx.switch_latest(),
        ).subscribe(results.append, ended.set_exception, lambda: ended.set_result("done"))
        prompts.on_next("a")
        await llm_server.wait_requests(1)
        await until(lambda: len(results) >= 2)
        prompts.on_next("ab")
        await llm_server.wait_requests(2)
        await until(lambda: len(results) >= 4)
        await until(lambda: llm_server.open_connections == 1)  # the first one was aborted
        before_last = len(results)
        prompts.on_next("abc")
        prompts.on_completed()
        assert await asyncio.wait_for(ended, PATIENCE) == "done"
        assert all_texts(results[before_last:]) == "final answer"
        assert llm_server.request_count == 3
    await llm_server.wait_connections_closed(2.0)
    assert loop_errors == []


@pytest.mark.timeout(20)
def test_a_later_stream_error_gets_its_error_content_after_a_subscriber_raised_once() -> None:
    from rafrx.content import ErrorContent
    from rafrx.errors import StreamInterrupted

    subject: Subject[u.AgentResponseUpdate] = Subject()
    contents: list[Any] = []
    errors: list[Exception] = []
    calls = [0]

    def on_next(result: AgentResponseResult) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise ValueError("a glitch in the UI callback")
        contents.extend(result.contents)

    subject.pipe(ops.convert()).subscribe(on_next, errors.append)
    with pytest.raises(ValueError, match="glitch"):
        subject.on_next(u.TextDelta("a"))  # the feeder catches and logs it, and goes on
    subject.on_next(u.TextDelta("b"))
    drop = StreamInterrupted("the connection dropped")
    subject.on_error(drop)
    assert errors == [drop]
    assert contents == [TextContent("b"), ErrorContent("the connection dropped")]


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_a_subscriber_raising_in_its_terminal_callback_reaches_the_loop_handler_once(
    llm_server: LLMServer, loop_errors: list[dict[str, Any]], thread_errors: list[Any]
) -> None:
    """No on_error given (reactivex's default re-raises) or an on_completed that raises:
    on a loop-driven source the exception is reported once to the loop's exception
    handler, as a raising asyncio callback would be; never lost, never a crash."""
    from rafrx.errors import HTTPStatusError, IncompleteStream
    from rafrx.testing import Fault

    async def cut() -> AsyncIterator[bytes]:
        yield b'data: {"choices": [{"delta": {"content": "Hel'

    def raise_key() -> None:
        raise KeyError("on_completed")

    llm_server.enqueue(Fault.status(500), Reply(text="x"))
    async with OpenAIChatClient(llm_server.url) as client:
        client.stream(USER).pipe(ops.convert()).subscribe(lambda _: None)
        await until(lambda: len(loop_errors) >= 1)
        from_sse(cut()).pipe(ops.convert()).subscribe(lambda _: None)
        await until(lambda: len(loop_errors) >= 2)
        client.stream(USER).pipe(ops.convert()).subscribe(lambda _: None, None, raise_key)
        await until(lambda: len(loop_errors) >= 3)
        await asyncio.sleep(0.1)
    kinds = [type(c.get("exception")) for c in loop_errors]
    assert kinds == [HTTPStatusError, IncompleteStream, KeyError]
    assert thread_errors == []


@pytest.mark.timeout(20)
@pytest.mark.asyncio
async def test_a_sync_body_on_the_asyncio_loop_disposed_first_reads_nothing() -> None:
    """``subscribe(..., scheduler=AsyncIOScheduler(loop))``: the body is read in a loop
    callback; disposing before that callback ran cancels it, as for ``from_iterable``."""
    from reactivex.scheduler.eventloop import AsyncIOScheduler

    scheduler = AsyncIOScheduler(asyncio.get_running_loop())
    gate = Gate(lines_of(TOOLS_BODY), hold=10_000)
    got: list[Any] = []
    subscription = from_sse(gate).pipe(ops.convert()).subscribe(got.append, scheduler=scheduler)
    subscription.dispose()
    await asyncio.sleep(0.05)
    assert not gate.started.is_set()
    assert got == []

    ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    last: list[Any] = []
    from_sse(TOOLS_BODY).pipe(ops.convert(), ops.aggregate()).subscribe(
        last.append, ended.set_exception, lambda: ended.set_result("done"), scheduler=scheduler
    )
    assert last == []  # not during subscribe: on the loop
    assert await asyncio.wait_for(ended, PATIENCE) == "done"
    assert last == [reference()]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("what", ["client stream", "convert", "agent turn"])
def test_disposing_a_client_stream_after_its_loop_closed_does_not_raise(what: str) -> None:
    import gc
    import warnings

    with LLMServer.in_thread() as server:
        server.enqueue(SLOW)
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(lambda _loop, _context: None)
        got: list[Any] = []

        async def subscribe() -> Any:
            client = OpenAIChatClient(server.url)  # (kept by the subscription alone)
            if what == "agent turn":
                observable: reactivex.Observable[Any] = rafrx.Agent(client).run("hi")
            else:
                observable = client.stream(USER)
                if what == "convert":
                    observable = observable.pipe(ops.convert())
            subscription = observable.subscribe(got.append, lambda _: None)
            await until(lambda: len(got) >= 3)
            return subscription

        subscription = loop.run_until_complete(subscribe())
        loop.close()
        old_hook = sys.unraisablehook
        sys.unraisablehook = lambda _: None  # (what the closed loop leaves for the GC)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    subscription.dispose()  # must not raise
                    subscription.dispose()
                finally:
                    # (the client's session, left on the closed loop, goes with the GC)
                    del subscription
                    gc.collect()
        finally:
            sys.unraisablehook = old_hook
    # a turn's task that can never run again is not kept among the running ones
    assert not [task for task in RUNNING_TURNS if task.get_loop() is loop]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("multicast", ["share", "replay", "publish"])
def test_multicasting_a_sync_pipeline_serves_subscribers_exactly_as_from_iterable(
    multicast: str,
) -> None:
    """Two subscribers before the connection and one after: each gets what it would get
    from ``reactivex.from_iterable`` of the same results (``share`` drains into the first
    subscriber during its subscribe, ``replay`` serves everyone, ``publish`` only those
    present at ``connect``), and every one of them is told the stream completed."""
    rafrx_source = from_sse(lines_of(TOOLS_BODY)).pipe(ops.convert())
    items = rafrx_source.pipe(rx.to_list()).run()

    def served(source: reactivex.Observable[Any]) -> list[Any]:
        operator = {"share": rx.share(), "replay": rx.replay(), "publish": rx.publish()}
        shared: Any = source.pipe(operator[multicast])
        got: list[list[Any]] = [[], [], []]
        ended: list[int] = []
        for k in range(2):
            shared.subscribe(got[k].append, on_completed=lambda k=k: ended.append(k))
        if hasattr(shared, "connect"):
            shared.connect()
        shared.subscribe(got[2].append, on_completed=lambda: ended.append(2))
        return [*got, ended]

    assert served(rafrx_source) == served(reactivex.from_iterable(items))
