"""Object lifecycles and event loops: clients, streams and agents across loops.

A script calling ``asyncio.run`` per question with one client, a loop driven by
hand (``run_until_complete``), a client shared by threads with loops of their
own and closed from one of them, a loop that ends while a stream runs, and
blocking ``run()`` called from a coroutine. After each: no unclosed session or
connector, no connection left open on the server, nothing hangs.

HTTP is real aiohttp on 127.0.0.1 (the scripted server runs in its own thread,
as these tests run their own loops).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from rafrx import (
    Agent,
    ChatMessage,
    InMemoryHistoryProvider,
    RafrxError,
    TransportError,
    collect_agent_response,
)
from rafrx import operators as ops
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ServerThread

USER = [ChatMessage.user("go")]
SLOW = Reply(text="word " * 600, chunk_size=4, delay=0.005)
#: How long a test waits for what a bug would make hang, before failing.
PATIENCE = 5.0


@pytest.fixture
def served() -> Iterator[tuple[LLMServer, ServerThread]]:
    """A scripted server on its own thread (the tests run loops of their own)."""
    thread = LLMServer.in_thread()
    server = thread.start()
    try:
        yield server, thread
    finally:
        thread.stop()


def connections_closed(thread: ServerThread, timeout: float = PATIENCE) -> bool:
    try:
        thread.run(thread.server.wait_connections_closed(timeout), timeout + 1)
    except (TimeoutError, AssertionError):
        return False
    return True


@contextlib.contextmanager
def unclosed_warnings() -> Iterator[list[str]]:
    """The "Unclosed ..." ResourceWarnings raised inside the block (after a GC)."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
        gc.collect()
    found.extend(str(w.message) for w in caught if "nclosed" in str(w.message))


async def ask(client: OpenAIChatClient) -> str:
    response = await collect_agent_response(client.stream(USER).pipe(ops.convert()))
    return response.text


def on_thread(fn: Callable[[], Any], timeout: float = PATIENCE) -> tuple[bool, list[Any]]:
    """Run ``fn`` on a daemon thread; (finished in time, [its value or exception])."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=target, daemon=True, name="lifecycle-hunt")
    thread.start()
    thread.join(timeout)
    return not thread.is_alive(), out


# ---------------------------------------------------------------- asyncio.run per question


def test_one_client_over_several_asyncio_runs_never_closed_leaks_nothing(
    served: tuple[LLMServer, ServerThread],
) -> None:
    """A script calling ``asyncio.run`` per question with one module-level client and no
    ``aclose()``: each run's session is closed when ``asyncio.run`` ends its loop."""
    server, thread = served
    server.default = Reply(text="hi there")
    client = OpenAIChatClient(server.url)
    with unclosed_warnings() as found:
        answers = [asyncio.run(ask(client)) for _ in range(3)]
        sessions = [session for session, _ in client._sessions._owned.values()]
        del client
    assert answers == ["hi there"] * 3
    assert all(session.closed for session in sessions)
    assert found == []
    assert connections_closed(thread)


def test_aclose_twice_then_reuse_and_async_with_twice(
    served: tuple[LLMServer, ServerThread],
) -> None:
    """``aclose()`` is idempotent and the client stays usable (documented); ``async with``
    one client twice works, and closes what it opened each time."""
    server, thread = served
    server.default = Reply(text="ok")
    client = OpenAIChatClient(server.url)

    async def main() -> list[str]:
        texts = [await ask(client)]
        await client.aclose()
        await client.aclose()
        texts.append(await ask(client))
        for _ in range(2):
            async with client:
                texts.append(await ask(client))
            assert all(s.closed for s, _ in client._sessions._owned.values())
            assert client._sessions._owned == {}
        return texts

    with unclosed_warnings() as found:
        texts = asyncio.run(main())
    assert texts == ["ok"] * 4
    assert found == []
    assert connections_closed(thread)


def test_a_client_made_outside_any_loop_then_used_in_a_hand_driven_loop(
    served: tuple[LLMServer, ServerThread],
) -> None:
    """Made at import time, used with ``run_until_complete`` and closed on that loop."""
    server, thread = served
    server.default = Reply(text="ok")
    client = OpenAIChatClient(server.url)
    loop = asyncio.new_event_loop()
    try:
        with unclosed_warnings() as found:
            assert loop.run_until_complete(ask(client)) == "ok"
            assert loop.run_until_complete(ask(client)) == "ok"
            loop.run_until_complete(client.aclose())
    finally:
        loop.close()
    assert found == []
    assert connections_closed(thread)


def test_agent_turns_over_several_asyncio_runs_keep_one_history(
    served: tuple[LLMServer, ServerThread],
) -> None:
    """One Agent (and its client) across ``asyncio.run`` calls: each turn works, sees the
    history the earlier ones saved, and nothing is left open."""
    server, thread = served
    server.default = Reply(text="ok")
    history = InMemoryHistoryProvider()
    agent = Agent(OpenAIChatClient(server.url), history=history)

    async def turn(text: str) -> str:
        return (await agent.send(text)).text

    with unclosed_warnings() as found:
        assert [asyncio.run(turn(t)) for t in ("one", "two", "three")] == ["ok"] * 3
    sent = server.requests[-1].messages
    assert [m["content"] for m in sent if m["role"] == "user"] == ["one", "two", "three"]
    assert found == []
    assert connections_closed(thread)


# ---------------------------------------------------------------- several loops


def test_aclose_from_another_loop_ends_a_stream_running_on_a_thread_s_loop(
    served: tuple[LLMServer, ServerThread],
) -> None:
    """A client shared by two threads' loops: ``aclose()`` on one ends the other loop's
    running stream with the documented TransportError and closes its session."""
    server, thread = served
    server.default = SLOW
    client = OpenAIChatClient(server.url)
    other = asyncio.new_event_loop()
    runner = threading.Thread(target=other.run_forever, daemon=True)
    runner.start()
    ended: list[BaseException] = []

    async def stream_there() -> None:
        with contextlib.suppress(RafrxError):
            await ask(client)

    async def subscribe_there() -> None:
        client.stream(USER).subscribe(on_error=ended.append, on_completed=lambda: None)

    try:
        asyncio.run_coroutine_threadsafe(subscribe_there(), other).result(PATIENCE)
        thread.run(server.wait_requests(1))
        sessions = []
        while not sessions:
            sessions = [s for s, _ in client._sessions._owned.values()]
        done, _ = on_thread(lambda: asyncio.run(client.aclose()))
        assert done, "aclose() from another loop hung"
        assert [type(e) for e in ended] == [TransportError]
        assert "client closed" in str(ended[0])
        assert all(s.closed for s in sessions)
        assert connections_closed(thread)
    finally:
        other.call_soon_threadsafe(other.stop)
        runner.join(PATIENCE)
        other.run_until_complete(other.shutdown_asyncgens())
        other.close()


def test_aclose_closes_the_session_of_a_loop_that_is_open_but_not_running(
    served: tuple[LLMServer, ServerThread],
) -> None:
    server, thread = served
    server.default = Reply(text="ok")
    client = OpenAIChatClient(server.url)
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(ask(client)) == "ok"
        (session, _), *_ = client._sessions._owned.values()
        asyncio.run(client.aclose())  # "close the sessions this client created"
        assert not client._sessions._owned
        loop.run_until_complete(asyncio.sleep(0.1))  # the loop runs again: the close runs
        closed, connections = session.closed, connections_closed(thread, 1.0)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    assert closed, "aclose() returned, the session of the idle loop still open"
    assert connections, "aclose() returned, the connection of the idle loop still open"


def test_aclose_does_not_hang_when_the_other_loop_stops_before_closing_its_session(
    served: tuple[LLMServer, ServerThread],
) -> None:
    server, _ = served
    server.default = Reply(text="ok")
    client = OpenAIChatClient(server.url)
    other = asyncio.new_event_loop()
    runner = threading.Thread(target=other.run_forever, daemon=True)
    runner.start()
    assert asyncio.run_coroutine_threadsafe(ask(client), other).result(PATIENCE) == "ok"
    owned = dict(client._sessions._owned)
    go = threading.Event()

    def busy_then_stop() -> None:  # the other thread's last callback: then it stops
        go.wait(PATIENCE)
        other.stop()

    other.call_soon_threadsafe(busy_then_stop)
    closing = threading.Thread(target=asyncio.run, args=(client.aclose(),), daemon=True)
    closing.start()
    closing.join(0.3)  # (aclose() has seen the other loop running and sent it the close)
    go.set()
    runner.join(PATIENCE)
    closing.join(PATIENCE)
    assert not closing.is_alive(), "aclose() hangs: it waits on a loop that stopped"
    (session, _), *_ = [*owned.values()]
    other.run_until_complete(asyncio.sleep(0.1))  # it runs again: the close it was sent runs
    other.close()
    assert session.closed


@pytest.mark.parametrize("what", ["client stream", "agent turn"])
def test_a_stream_whose_loop_ends_mid_way_tells_its_observer(
    served: tuple[LLMServer, ServerThread], what: str
) -> None:
    server, thread = served
    server.default = SLOW
    client = OpenAIChatClient(server.url)
    items: list[object] = []
    ends: list[object] = []

    async def main() -> None:
        source = client.stream(USER) if what == "client stream" else Agent(client).run("go")
        source.subscribe(items.append, ends.append, lambda: ends.append("completed"))
        while not items:
            await asyncio.sleep(0.01)
        # returns with the stream running: asyncio.run cancels what is left

    with unclosed_warnings() as found:
        asyncio.run(main())
    assert items, "the stream did not start"
    assert found == []
    assert connections_closed(thread)
    assert len(ends) == 1, "the stream ended with its loop, and its observer never heard"
    assert isinstance(ends[0], Exception)


# ---------------------------------------------------------------- blocking entry points


def test_blocking_run_from_plain_sync_code_is_a_clear_error(
    served: tuple[LLMServer, ServerThread],
) -> None:
    """No loop in the thread: ``.run()`` of a client pipeline raises at once."""
    server, _ = served
    server.default = Reply(text="ok")
    client = OpenAIChatClient(server.url)
    done, out = on_thread(lambda: client.stream(USER).pipe(ops.convert(), ops.aggregate()).run())
    assert done
    assert isinstance(out[0], RuntimeError)
    assert "loop" in str(out[0])


def test_blocking_run_inside_a_running_loop_is_a_clear_error_not_a_deadlock(
    served: tuple[LLMServer, ServerThread],
) -> None:
    server, _ = served
    server.default = Reply(text="ok")
    client = OpenAIChatClient(server.url)

    async def main() -> object:
        return client.stream(USER).pipe(ops.convert(), ops.aggregate()).run()

    done, out = on_thread(lambda: asyncio.run(main()))
    assert done, "run() inside a running loop deadlocks the loop forever"
    assert isinstance(out[0], RuntimeError)


def test_disposing_a_stream_and_a_turn_after_their_loop_closed_is_quiet_and_the_agent_goes_on(
    served: tuple[LLMServer, ServerThread],
) -> None:
    """Subscriptions kept past ``asyncio.run`` (a notebook cell's): disposing them later,
    with their loop closed, raises nothing; the agent's next turn, on a new loop, works."""
    server, thread = served
    server.default = SLOW
    client = OpenAIChatClient(server.url)
    agent = Agent(client)
    kept: list[Any] = []

    async def main() -> None:
        kept.append(client.stream(USER).subscribe(on_error=lambda e: None))
        kept.append(agent.run("go").subscribe(on_error=lambda e: None))
        await asyncio.sleep(0.1)

    asyncio.run(main())
    for subscription in kept:
        subscription.dispose()
    server.default = Reply(text="again")

    async def turn() -> str:
        return (await agent.send("next")).text

    with unclosed_warnings() as found:
        assert asyncio.run(turn()) == "again"
    assert found == []
    assert connections_closed(thread)


def test_a_given_session_closed_by_its_owner_before_a_call_is_a_typed_error(
    served: tuple[LLMServer, ServerThread],
) -> None:
    """The user's own aiohttp session, closed before the call: a non-retryable
    TransportError at once, no hang, nothing sent."""
    server, _ = served
    server.default = Reply(text="ok")

    async def main() -> BaseException | None:
        session = aiohttp.ClientSession()
        await session.close()
        client = OpenAIChatClient(server.url, session=session)
        try:
            async with asyncio.timeout(PATIENCE):
                await ask(client)
        except RafrxError as err:
            return err
        return None

    error = asyncio.run(main())
    assert isinstance(error, TransportError)
    assert not error.retryable
    assert server.requests == []
