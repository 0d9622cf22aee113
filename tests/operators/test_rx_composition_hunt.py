"""ReactiveX users composing rafrx's observables over real HTTP (LLMServer on 127.0.0.1).

Cold re-subscription of client and agent observables, multicasting, ``retry``,
``catch``, ``timeout``, ``take`` / ``take_while`` / ``first``, ``concat``,
``buffer_with_time`` / ``throttle_first``, schedulers, ``await`` and
``to_future``, the operators piped one by one against ``convert()``, raising
subscribers and disposal from inside ``on_next`` or another thread. After each
test no asyncio task may be left (the ``llm_server`` fixture) and no aiohttp
session or connector may be reported unclosed.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
import reactivex
from reactivex import Observable
from reactivex import operators as rx
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.scheduler.eventloop import AsyncIOScheduler

import rafrx
from rafrx import Agent, ChatMessage
from rafrx import operators as ops
from rafrx.content import TextContent, ToolCalledContent, ToolCallingContent
from rafrx.errors import RafrxError, StreamInterrupted
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec
from rafrx.tools import tool
from tests.operators import contents

USER = [ChatMessage.user("hi")]
LONG = Reply(text="word " * 400, chunk_size=5, delay=0.005)
TOOL_REPLY = Reply(
    text="Let me add.",
    tool_calls=[
        ToolCallSpec("add", {"a": 1, "b": 2}, id="c1"),
        ToolCallSpec("add", {"a": 3, "b": 4}, id="c2"),
    ],
)
CLIENTS = [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def texts(results: list[AgentResponseResult]) -> str:
    return "".join(c.text for c in contents(results) if isinstance(c, TextContent))


@pytest.fixture
def no_unclosed_aiohttp() -> Iterator[None]:
    """Fail the test if aiohttp reports an unclosed session, connector or response."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
        gc.collect()
    unclosed = [str(w.message) for w in seen if "nclosed" in str(w.message)]
    assert unclosed == []


@pytest_asyncio.fixture
async def server(llm_server: LLMServer, no_unclosed_aiohttp: None) -> AsyncIterator[LLMServer]:
    """The local server, with the task-leak and unclosed-aiohttp checks."""
    yield llm_server


async def settled(server: LLMServer) -> None:
    """Every connection to the server closed (or back idle in the pool and closed by aclose)."""
    await server.wait_connections_closed(timeout=2.0)
    assert server.open_connections == 0


async def terminal_of(
    server: LLMServer,
    observable_of: Callable[[OpenAIChatClient], Observable[Any]],
    on_next: Callable[[Any], None],
) -> Exception:
    """Subscribe ``observable_of(client)`` with ``on_next`` and return what ended it: the
    exception ``on_error`` got (a ``RuntimeError("completed")`` for ``on_completed``).
    Fails if neither came within a second of the request (the loop's handler is shown)."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[Exception] = loop.create_future()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        async with OpenAIChatClient(server.url) as client:
            observable_of(client).subscribe(
                on_next, ended.set_result, lambda: ended.set_result(RuntimeError("completed"))
            )
            await server.wait_requests(1)
            done, _ = await asyncio.wait({ended}, timeout=1.0)
    finally:
        loop.set_exception_handler(None)
    assert done, f"on_error never called; the loop's handler got {reported!r}"
    return ended.result()


# ---------------------------------------------------------------- cold re-subscription


@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", CLIENTS)
async def test_awaiting_one_client_stream_twice_sends_two_requests(
    server: LLMServer, client_type: Any
) -> None:
    """A user keeps one ``client.stream(...)`` pipeline and awaits it twice."""
    server.enqueue(Reply(text="first"), Reply(text="second"))
    async with client_type(server.url) as client:
        pipeline = client.stream(USER).pipe(ops.convert(), ops.aggregate())
        one = await asyncio.wait_for(pipeline, 5)
        two = await asyncio.wait_for(pipeline, 5)
    assert (one.text, two.text) == ("first", "second")
    assert len(server.requests) == 2
    await settled(server)


@pytest.mark.asyncio
async def test_two_concurrent_subscriptions_to_one_client_stream_are_independent(
    server: LLMServer,
) -> None:
    """Two subscribers at once on one cold stream: two requests, no mixing of their text."""
    server.enqueue(Reply(text="alpha " * 30, chunk_size=3, delay=0.002))
    server.enqueue(Reply(text="beta " * 30, chunk_size=3, delay=0.002))
    async with OpenAIChatClient(server.url) as client:
        pipeline = client.stream(USER).pipe(ops.convert(), ops.aggregate())
        one, two = await asyncio.wait_for(
            asyncio.gather(pipeline.pipe(rx.to_future()), pipeline.pipe(rx.to_future())), 5
        )
    assert sorted([one.text, two.text]) == sorted(["alpha " * 30, "beta " * 30])
    assert len(server.requests) == 2
    await settled(server)


@pytest.mark.asyncio
async def test_awaiting_one_agent_run_observable_twice_runs_two_turns(server: LLMServer) -> None:
    """``agent.run(...)`` kept and awaited twice: each subscription is a whole turn."""
    server.enqueue(TOOL_REPLY, Reply(text="3 and 7"), TOOL_REPLY, Reply(text="again 3 and 7"))
    async with OpenAIChatClient(server.url) as client:
        turn = Agent(client, tools=[add]).run("add things")
        one = await asyncio.wait_for(rafrx.collect_agent_response(turn), 5)
        two = await asyncio.wait_for(rafrx.collect_agent_response(turn), 5)
    assert one.text.endswith("3 and 7")
    assert two.text.endswith("again 3 and 7")
    assert [m.content for m in one.tool_messages] == ["3", "7"]
    assert [m.content for m in two.tool_messages] == ["3", "7"]
    assert len(server.requests) == 4
    await settled(server)


# ---------------------------------------------------------------- multicasting


@pytest.mark.asyncio
async def test_replay_of_a_client_stream_serves_a_late_subscriber_from_one_request(
    server: LLMServer,
) -> None:
    """``replay()`` + ``connect()``: the second subscriber comes after the end, one request."""
    server.enqueue(Reply(text="replayed answer"))
    async with OpenAIChatClient(server.url) as client:
        replayed = client.stream(USER).pipe(ops.convert(), rx.replay())
        first = replayed.pipe(ops.aggregate(), rx.to_future())
        connection = replayed.connect()
        response = await asyncio.wait_for(first, 5)
        late = await asyncio.wait_for(replayed.pipe(ops.aggregate(), rx.to_future()), 5)
        connection.dispose()
    assert response.text == late.text == "replayed answer"
    assert len(server.requests) == 1
    await settled(server)


@pytest.mark.asyncio
async def test_publish_of_an_agent_turn_runs_its_tools_once_for_two_subscribers(
    server: LLMServer,
) -> None:
    """A published agent turn watched by a UI and by an aggregator: one turn, tools once."""
    ran: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append(a)
        return a + b

    server.enqueue(TOOL_REPLY, Reply(text="done"))
    async with OpenAIChatClient(server.url) as client:
        published = Agent(client, tools=[add]).run("go").pipe(rx.publish())
        ui: list[AgentResponseResult] = []
        published.subscribe(ui.append)
        response_f = published.pipe(ops.aggregate(), rx.to_future())
        published.connect()
        response = await asyncio.wait_for(response_f, 5)
    assert sorted(ran) == [1, 3]
    assert response.text.endswith("done")
    assert len(server.requests) == 2
    assert texts(ui) == response.text
    await settled(server)


# ---------------------------------------------------------------- retry / catch / timeout


@pytest.mark.asyncio
async def test_retry_after_a_mid_stream_drop_gives_the_text_once(server: LLMServer) -> None:
    """``retry(2)`` after ``aggregate()``: the dropped attempt's text is not duplicated."""
    reply = Reply(text="complete answer " * 10, chunk_size=4)
    server.enqueue(Fault.drop_after(300, body=reply), reply)
    async with OpenAIChatClient(server.url) as client:
        response = await asyncio.wait_for(
            client.stream(USER).pipe(ops.convert(), ops.aggregate(), rx.retry(2)), 5
        )
    assert response.text == "complete answer " * 10
    assert len(server.requests) == 2
    await settled(server)


@pytest.mark.asyncio
async def test_retry_of_an_agent_turn_after_an_http_500(server: LLMServer) -> None:
    """``agent.run(...).pipe(rx.retry(2))``: the failed turn is rerun from scratch."""
    server.enqueue(Fault.status(500), TOOL_REPLY, Reply(text="sum done"))
    async with OpenAIChatClient(server.url) as client:
        response = await asyncio.wait_for(
            rafrx.collect_agent_response(Agent(client, tools=[add]).run("go").pipe(rx.retry(2))), 5
        )
    assert response.text.endswith("sum done")
    assert [m.content for m in response.tool_messages] == ["3", "7"]
    assert len(server.requests) == 3
    await settled(server)


@pytest.mark.asyncio
async def test_catch_falls_back_to_another_client_stream(server: LLMServer) -> None:
    """A 500 from the primary model; ``catch`` switches to a fallback stream."""
    server.enqueue(Fault.status(500), Reply(text="from the fallback"))
    async with OpenAIChatClient(server.url) as primary, AnthropicClient(server.url) as fallback:
        response = await asyncio.wait_for(
            primary.stream(USER).pipe(
                rx.catch(fallback.stream(USER)), ops.convert(), ops.aggregate()
            ),
            5,
        )
    assert response.text == "from the fallback"
    assert len(server.requests) == 2
    await settled(server)


@pytest.mark.asyncio
async def test_catch_after_aggregate_keeps_the_error_partial_reachable(server: LLMServer) -> None:
    """``catch`` with a handler: the handler sees the typed error and its partial response."""
    reply = Reply(text="partial text then cut " * 10, chunk_size=4)
    server.enqueue(Fault.drop_after(1200, body=reply))
    seen: list[Exception] = []

    def handler(error: Exception, _source: Any) -> Observable[AgentResponse]:
        seen.append(error)
        assert isinstance(error, RafrxError)
        assert error.partial is not None
        return reactivex.of(error.partial)

    async with OpenAIChatClient(server.url) as client:
        response = await asyncio.wait_for(
            client.stream(USER).pipe(ops.convert(), ops.aggregate(), rx.catch(handler)), 5
        )
    assert isinstance(seen[0], StreamInterrupted)
    assert response.text
    assert ("partial text then cut " * 10).startswith(response.text)
    await settled(server)


@pytest.mark.asyncio
async def test_rx_timeout_on_a_stalled_stream_closes_the_connection(server: LLMServer) -> None:
    """``rx.timeout(0.2)`` over a server stalling mid-body: TimeoutError, socket closed."""
    server.enqueue(Fault.stall(30, after_bytes=200, body=Reply(text="slow " * 50, chunk_size=2)))
    async with OpenAIChatClient(server.url) as client:
        with pytest.raises(Exception, match=r"(?i)timeout"):
            await asyncio.wait_for(
                client.stream(USER).pipe(rx.timeout(0.2), ops.convert(), ops.aggregate()), 5
            )
        await settled(server)


# ---------------------------------------------------------------- cutting short


@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", CLIENTS)
async def test_take_while_text_ends_the_request(server: LLMServer, client_type: Any) -> None:
    """``take_while`` over a long stream stops it: the connection closes, no task left."""
    server.enqueue(LONG)
    async with client_type(server.url) as client:
        results = await asyncio.wait_for(
            client.stream(USER).pipe(
                ops.convert(),
                rx.take_while(lambda r: len(texts([r])) == 0 or True),
                rx.take(5),
                rx.to_list(),
            ),
            5,
        )
        await settled(server)
    assert len(results) == 5


@pytest.mark.asyncio
async def test_first_text_of_an_agent_turn_stops_the_turn(server: LLMServer) -> None:
    """``first(...)`` on an agent turn: the turn stops, its request is closed, no task left."""
    server.enqueue(LONG)
    async with OpenAIChatClient(server.url) as client:
        first = await asyncio.wait_for(
            Agent(client, tools=[add])
            .run("talk")
            .pipe(rx.first(lambda r: any(isinstance(c, TextContent) for c in r.contents))),
            5,
        )
        await settled(server)
    assert texts([first]) == "word "


@pytest.mark.asyncio
async def test_take_until_a_tool_call_shows_never_runs_it(server: LLMServer) -> None:
    """The UI stops the turn once a ``ToolCallingContent`` shows: the tool must not run."""
    ran: list[int] = []

    @tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append(a)
        await asyncio.sleep(0.05)
        return a + b

    server.enqueue(TOOL_REPLY, Reply(text="never"))
    async with OpenAIChatClient(server.url) as client:
        items = await asyncio.wait_for(
            Agent(client, tools=[add])
            .run("go")
            .pipe(
                rx.take_while(
                    lambda r: not any(isinstance(c, ToolCallingContent) for c in r.contents)
                ),
                rx.to_list(),
            ),
            5,
        )
        await asyncio.sleep(0.1)
    assert not any(isinstance(c, ToolCalledContent) for c in contents(items))
    assert ran == []
    assert len(server.requests) == 1


# ---------------------------------------------------------------- combining


@pytest.mark.asyncio
async def test_concat_of_two_client_streams_aggregates_two_steps(server: LLMServer) -> None:
    """Two LLM calls concatenated (updates) into one ``convert`` + ``aggregate``."""
    server.enqueue(Reply(text="one. "), Reply(text="two."))
    async with OpenAIChatClient(server.url) as client:
        response = await asyncio.wait_for(
            reactivex.concat(client.stream(USER), client.stream(USER)).pipe(
                ops.convert(), ops.aggregate()
            ),
            5,
        )
    assert response.text == "one. two."
    assert [m.content for m in response.turn_transcript] == ["one. ", "two."]
    assert len(server.requests) == 2
    await settled(server)


@pytest.mark.asyncio
async def test_concat_of_two_converted_streams_sums_usage(server: LLMServer) -> None:
    """``convert()`` per call, results concatenated: usage is the sum over both calls."""
    server.enqueue(Reply(text="aaaa " * 20), Reply(text="bb"))
    async with OpenAIChatClient(server.url) as client:
        server.enqueue(Reply(text="aaaa " * 20), Reply(text="bb"))
        first = await client.stream(USER).pipe(ops.convert(), ops.aggregate())
        second = await client.stream(USER).pipe(ops.convert(), ops.aggregate())
        both = await asyncio.wait_for(
            reactivex.concat(
                client.stream(USER).pipe(ops.convert()), client.stream(USER).pipe(ops.convert())
            ).pipe(ops.aggregate()),
            5,
        )
    assert first.usage is not None
    assert second.usage is not None
    assert both.usage is not None
    assert both.usage.completion_tokens == (
        first.usage.completion_tokens + second.usage.completion_tokens
    )
    assert both.text == first.text + second.text


@pytest.mark.asyncio
async def test_buffer_with_time_batches_every_text_once(server: LLMServer) -> None:
    """UI batching with ``buffer_with_time``: the batches hold all the text, in order."""
    server.enqueue(Reply(text="batched words " * 20, chunk_size=3, delay=0.002))
    async with OpenAIChatClient(server.url) as client:
        batches = await asyncio.wait_for(
            client.stream(USER).pipe(
                ops.convert(),
                rx.buffer_with_time(0.02, scheduler=AsyncIOScheduler(asyncio.get_running_loop())),
                rx.to_list(),
            ),
            5,
        )
    assert "".join(texts(batch) for batch in batches) == "batched words " * 20
    await settled(server)


@pytest.mark.asyncio
async def test_observe_on_a_thread_pool_gives_the_same_response(server: LLMServer) -> None:
    """``observe_on(ThreadPoolScheduler)`` between the results and ``aggregate``."""
    server.enqueue(TOOL_REPLY)
    pool = ThreadPoolScheduler(2)
    async with OpenAIChatClient(server.url) as client:
        response = await asyncio.wait_for(
            client.stream(USER).pipe(ops.convert(), rx.observe_on(pool), ops.aggregate()), 5
        )
    assert response.text == "Let me add."
    assert [c.arguments for c in response.tool_calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    await settled(server)


@pytest.mark.asyncio
async def test_subscribe_on_the_loop_from_another_thread_works(server: LLMServer) -> None:
    """A thread subscribes with ``subscribe_on(AsyncIOScheduler(loop))``: the request runs."""
    server.enqueue(Reply(text="from a thread"))
    loop = asyncio.get_running_loop()
    done: asyncio.Future[AgentResponse] = loop.create_future()
    async with OpenAIChatClient(server.url) as client:
        pipeline = client.stream(USER).pipe(
            rx.subscribe_on(AsyncIOScheduler(loop)), ops.convert(), ops.aggregate()
        )

        def subscribe() -> None:
            pipeline.subscribe(
                lambda r: loop.call_soon_threadsafe(done.set_result, r),
                lambda e: loop.call_soon_threadsafe(done.set_exception, e),
            )

        thread = threading.Thread(target=subscribe)
        thread.start()
        response = await asyncio.wait_for(done, 5)
        thread.join(2)
    assert response.text == "from a thread"
    await settled(server)


def test_run_from_sync_code_without_a_loop_fails_clearly() -> None:
    """``.run()`` in plain sync code (no loop): a clear RuntimeError, no hang."""

    client = OpenAIChatClient("http://127.0.0.1:9")
    with pytest.raises(RuntimeError, match="event loop"):
        client.stream(USER).pipe(ops.convert(), ops.aggregate()).run()


# ---------------------------------------------------------------- the operators one by one


@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", CLIENTS)
@pytest.mark.parametrize("eager", [False, True])
async def test_the_operators_piped_by_hand_equal_convert_over_http(
    server: LLMServer, client_type: Any, eager: bool
) -> None:
    """The four operators piped by hand (with a user ``map`` between) equal ``convert()``."""
    server.enqueue(TOOL_REPLY, TOOL_REPLY)
    async with client_type(server.url) as client:
        by_hand = await asyncio.wait_for(
            client.stream(USER).pipe(
                ops.split_legacy_delta(),
                rx.map(lambda x: x),
                ops.accumulate_tool_calls(),
                rx.map(lambda x: x),
                ops.parse_args_stream(),
                rx.map(lambda x: x),
                ops.flush_tool_calls(eager),
                rx.to_list(),
            ),
            5,
        )
        fused = await asyncio.wait_for(
            client.stream(USER).pipe(ops.convert(eager), rx.to_list()), 5
        )
    assert [repr(c) for c in contents(by_hand)] == [repr(c) for c in contents(fused)]
    assert [[type(e).__name__ for e in r.events] for r in by_hand] == [
        [type(e).__name__ for e in r.events] for r in fused
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", CLIENTS)
async def test_the_operators_piped_by_hand_fail_like_convert_over_http(
    server: LLMServer, client_type: Any
) -> None:
    """A dropped connection mid-call: same contents, same error, same partial both ways."""
    reply = Reply(
        text="some text", tool_calls=[ToolCallSpec("add", {"a": 1, "b": 22222})], chunk_size=2
    )
    server.enqueue(Fault.drop_after(700, body=reply), Fault.drop_after(700, body=reply))
    outcomes: list[tuple[list[Any], RafrxError]] = []
    async with client_type(server.url) as client:
        for pipeline in (
            (
                ops.split_legacy_delta(),
                ops.accumulate_tool_calls(),
                rx.map(lambda x: x),
                ops.parse_args_stream(),
                ops.flush_tool_calls(),
            ),
            (ops.convert(),),
        ):
            seen: list[AgentResponseResult] = []
            with pytest.raises(RafrxError) as info:
                await asyncio.wait_for(
                    client.stream(USER).pipe(*pipeline, rx.do_action(seen.append), ops.aggregate()),
                    5,
                )
            outcomes.append((contents(seen), info.value))
    (by_hand, e1), (fused, e2) = outcomes
    assert type(e1) is type(e2)
    assert e1.partial is not None
    assert e2.partial is not None
    assert [type(c).__name__ for c in by_hand] == [type(c).__name__ for c in fused]
    assert e1.partial.text == e2.partial.text
    assert [(c.name, c.complete) for c in e1.partial.tool_calls] == [
        (c.name, c.complete) for c in e2.partial.tool_calls
    ]
    await settled(server)


# ---------------------------------------------------------------- raising subscribers, disposal


@pytest.mark.asyncio
async def test_a_raising_on_next_ends_the_request_and_reaches_on_error(server: LLMServer) -> None:
    """The user's ``on_next`` raises on the third result: the socket closes, ``on_error``
    gets that exception, nothing more is delivered."""
    server.enqueue(LONG)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[Exception] = loop.create_future()
    seen: list[AgentResponseResult] = []
    boom = ValueError("user bug")

    def on_next(result: AgentResponseResult) -> None:
        seen.append(result)
        if len(seen) == 3:
            raise boom

    async with OpenAIChatClient(server.url) as client:
        client.stream(USER).pipe(ops.convert()).subscribe(on_next, ended.set_result)
        error = await asyncio.wait_for(ended, 5)
        await settled(server)
        await asyncio.sleep(0.05)
    assert error is boom
    assert len(seen) == 3


@pytest.mark.asyncio
async def test_a_raising_on_next_on_an_agent_turn_stops_the_turn(server: LLMServer) -> None:
    """Raising in ``on_next`` of an agent turn: the turn ends with that error, tools never
    run after it, no task is left."""
    ran: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append(a)
        return a + b

    server.enqueue(
        Reply(text="word " * 400, tool_calls=TOOL_REPLY.tool_calls, chunk_size=5, delay=0.005),
        Reply(text="done"),
    )
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[Exception] = loop.create_future()
    boom = ValueError("ui bug")

    def on_next(result: AgentResponseResult) -> None:
        raise boom

    async with OpenAIChatClient(server.url) as client:
        Agent(client, tools=[add]).run("go").subscribe(on_next, ended.set_result)
        error = await asyncio.wait_for(ended, 5)
        await settled(server)
    assert error is boom
    assert ran == []
    assert len(server.requests) == 1


@pytest.mark.asyncio
async def test_disposing_inside_on_next_stops_delivery_and_closes(server: LLMServer) -> None:
    """``subscription.dispose()`` from the user's ``on_next``: nothing comes after it."""
    server.enqueue(LONG)
    seen: list[AgentResponseResult] = []
    holder: dict[str, Any] = {}
    got = asyncio.Event()

    def on_next(result: AgentResponseResult) -> None:
        seen.append(result)
        if len(seen) == 2:
            holder["sub"].dispose()
            got.set()

    async with OpenAIChatClient(server.url) as client:
        holder["sub"] = client.stream(USER).pipe(ops.convert()).subscribe(on_next)
        await asyncio.wait_for(got.wait(), 5)
        await settled(server)
        await asyncio.sleep(0.05)
    assert len(seen) == 2


@pytest.mark.asyncio
async def test_disposing_a_client_pipeline_from_another_thread_closes_it(
    server: LLMServer,
) -> None:
    """A UI thread disposes a running stream: the socket closes, delivery stops."""
    server.enqueue(LONG)
    seen: list[AgentResponseResult] = []
    first = asyncio.Event()

    def on_next(result: AgentResponseResult) -> None:
        seen.append(result)
        first.set()

    async with OpenAIChatClient(server.url) as client:
        subscription = (
            client.stream(USER).pipe(ops.convert(), rx.map(lambda r: r)).subscribe(on_next)
        )
        await asyncio.wait_for(first.wait(), 5)
        thread = threading.Thread(target=subscription.dispose)
        thread.start()
        await asyncio.to_thread(thread.join, 2)
        await settled(server)
        count = len(seen)
        await asyncio.sleep(0.05)
    assert len(seen) == count < 400


@pytest.mark.asyncio
async def test_disposing_during_execute_tools_over_http_cancels_the_tool(
    server: LLMServer,
) -> None:
    """A client stream through ``execute_tools``: disposal while a tool runs cancels it."""
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return a + b

    server.enqueue(TOOL_REPLY)
    async with OpenAIChatClient(server.url) as client:
        subscription = (
            client.stream(USER)
            .pipe(ops.convert(eager=True), ops.execute_tools([add]))
            .subscribe(lambda _: None)
        )
        await asyncio.wait_for(started.wait(), 5)
        subscription.dispose()
        await asyncio.wait_for(cancelled.wait(), 2)
    await settled(server)


@pytest.mark.asyncio
async def test_to_future_cancelled_cancels_the_request(server: LLMServer) -> None:
    """Cancelling the future from ``to_future()`` disposes the stream: socket closed."""
    server.enqueue(LONG)
    async with OpenAIChatClient(server.url) as client:
        future = client.stream(USER).pipe(ops.convert(), ops.aggregate(), rx.to_future())
        await server.wait_requests(1)
        await asyncio.sleep(0.02)
        future.cancel()
        await settled(server)
    assert future.cancelled()


@pytest.mark.asyncio
async def test_a_raising_on_next_on_the_aggregated_response_reaches_on_error(
    server: LLMServer,
) -> None:
    """``aggregate()`` emits at completion; the user's ``on_next`` raises on it: the user's
    ``on_error`` gets that exception, as for any other result of a client stream."""
    server.enqueue(Reply(text="the answer"))
    boom = ValueError("save failed")

    def on_next(response: AgentResponse) -> None:
        raise boom

    error = await terminal_of(
        server, lambda c: c.stream(USER).pipe(ops.convert(), ops.aggregate()), on_next
    )
    assert error is boom


@pytest.mark.asyncio
async def test_a_raising_on_next_on_the_flushed_tool_calls_reaches_on_error(
    server: LLMServer,
) -> None:
    """``convert()`` flushes its ``ToolCallingContent`` at completion; the UI's ``on_next``
    raises on that result: ``on_error`` gets it, as it does for the text before."""
    server.enqueue(TOOL_REPLY)
    boom = ValueError("card render failed")

    def on_next(result: AgentResponseResult) -> None:
        if any(isinstance(c, ToolCallingContent) for c in result.contents):
            raise boom

    error = await terminal_of(server, lambda c: c.stream(USER).pipe(ops.convert()), on_next)
    assert error is boom


@pytest.mark.asyncio
async def test_a_raising_on_next_on_the_last_result_of_an_agent_turn_reaches_on_error(
    server: LLMServer,
) -> None:
    """The user's ``on_next`` raises on the turn's last result: ``on_error`` gets it."""
    server.enqueue(Reply(text="final"))
    boom = ValueError("ui bug at the end")

    def on_next(result: AgentResponseResult) -> None:
        if result.finish_reason is not None or any(
            type(e).__name__ == "FinishEvent" for e in result.events
        ):
            raise boom

    error = await terminal_of(server, lambda c: Agent(c).run("go"), on_next)
    assert error is boom


@pytest.mark.asyncio
async def test_two_concurrent_turns_of_one_agent_both_save_whole_turns(server: LLMServer) -> None:
    """Two ``agent.run`` subscriptions at once on one agent with history: both turns end,
    and history keeps every call with its result."""
    from rafrx.history import InMemoryHistoryProvider
    from rafrx.messages import paired

    server.enqueue(TOOL_REPLY, TOOL_REPLY, Reply(text="one"), Reply(text="two"))
    history = InMemoryHistoryProvider()
    async with OpenAIChatClient(server.url) as client:
        agent = Agent(client, tools=[add], history=history)
        one, two = await asyncio.wait_for(
            asyncio.gather(agent.send("first"), agent.send("second")), 5
        )
        saved = list(await history.load())
    assert sorted([one.text[-3:], two.text[-3:]]) == ["one", "two"]
    assert paired(saved) == saved
    assert sum(m.role.value == "tool" for m in saved) == 4
    await settled(server)


@pytest.mark.asyncio
async def test_share_of_an_agent_turn_goes_on_when_one_subscriber_leaves(
    server: LLMServer,
) -> None:
    """``share()``: the UI subscriber takes 1 and leaves; the aggregator still gets the turn."""
    server.enqueue(TOOL_REPLY, Reply(text="done"))
    async with OpenAIChatClient(server.url) as client:
        shared = Agent(client, tools=[add]).run("go").pipe(rx.share())
        peek = shared.pipe(rx.take(1), rx.to_future())
        whole = shared.pipe(ops.aggregate(), rx.to_future())
        _first, response = await asyncio.wait_for(asyncio.gather(peek, whole), 5)
    assert response.text.endswith("done")
    assert [m.content for m in response.tool_messages] == ["3", "7"]
    assert len(server.requests) == 2
    await settled(server)


@pytest.mark.asyncio
async def test_rx_timeout_on_an_agent_turn_cancels_the_running_tool(server: LLMServer) -> None:
    """``rx.timeout`` fires while a tool runs: the tool is cancelled, the turn ends."""
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return a + b

    server.enqueue(TOOL_REPLY, Reply(text="never"))
    async with OpenAIChatClient(server.url) as client:
        with pytest.raises(Exception, match=r"(?i)timeout"):
            await asyncio.wait_for(
                rafrx.collect_agent_response(
                    Agent(client, tools=[add]).run("go").pipe(rx.timeout(0.3))
                ),
                5,
            )
        await asyncio.wait_for(cancelled.wait(), 2)
    assert started.is_set()
    assert len(server.requests) == 1
    await settled(server)


@pytest.mark.asyncio
async def test_throttle_first_for_ui_keeps_the_response_whole(server: LLMServer) -> None:
    """A UI throttled with ``throttle_first`` on a shared stream; the aggregate is whole."""
    server.enqueue(Reply(text="tick " * 100, chunk_size=2, delay=0.001))
    loop = asyncio.get_running_loop()
    async with OpenAIChatClient(server.url) as client:
        shared = client.stream(USER).pipe(ops.convert(), rx.share())
        ui = shared.pipe(
            rx.throttle_first(0.01, scheduler=AsyncIOScheduler(loop)), rx.to_list(), rx.to_future()
        )
        whole = shared.pipe(ops.aggregate(), rx.to_future())
        shown, response = await asyncio.wait_for(asyncio.gather(ui, whole), 5)
    assert response.text == "tick " * 100
    assert 0 < len(shown) < 100
    await settled(server)


@pytest.mark.asyncio
async def test_a_raising_on_next_on_the_error_result_reaches_on_error(server: LLMServer) -> None:
    """The connection drops; ``convert()`` emits its ``ErrorContent`` result and the user's
    ``on_next`` raises on it: the user's ``on_error`` is still called (with one of the two
    errors), the subscription is not left without a terminal notification."""
    reply = Reply(text="cut here " * 30, chunk_size=4)
    server.enqueue(Fault.drop_after(1200, body=reply))
    boom = ValueError("error card failed")

    def on_next(result: AgentResponseResult) -> None:
        if any(type(c).__name__ == "ErrorContent" for c in result.contents):
            raise boom

    error = await terminal_of(server, lambda c: c.stream(USER).pipe(ops.convert()), on_next)
    assert error is boom or isinstance(error, StreamInterrupted)


@pytest.mark.asyncio
async def test_subscribe_on_a_thread_pool_fails_clearly_instead_of_hanging(
    server: LLMServer,
) -> None:
    """``subscribe_on(ThreadPoolScheduler)``: the worker thread has no loop, so the stream
    fails at once with a RuntimeError saying so (and sends nothing)."""
    async with OpenAIChatClient(server.url) as client:
        with pytest.raises(RuntimeError, match="event loop"):
            await asyncio.wait_for(
                client.stream(USER).pipe(
                    rx.subscribe_on(ThreadPoolScheduler(1)), ops.convert(), ops.aggregate()
                ),
                5,
            )
    assert server.requests == []


@pytest.mark.asyncio
async def test_concat_of_two_agent_turns_sends_the_first_turn_as_history(
    server: LLMServer,
) -> None:
    """``concat(agent.run(a), agent.run(b))``: the second turn starts after the first one
    completed (and saved), so its request carries the first turn."""
    from rafrx.history import InMemoryHistoryProvider

    server.enqueue(TOOL_REPLY, Reply(text="first done"), Reply(text="second done"))
    async with OpenAIChatClient(server.url) as client:
        agent = Agent(client, tools=[add], history=InMemoryHistoryProvider())
        results = await asyncio.wait_for(
            reactivex.concat(agent.run("first"), agent.run("second")).pipe(rx.to_list()), 5
        )
    assert texts(results).endswith("first donesecond done")
    last = server.requests[-1].messages
    assert any("first done" in json_text for json_text in map(str, last))
    assert len(server.requests) == 3
    await settled(server)
