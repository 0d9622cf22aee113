"""Session 12: what the flaky CI tests hunted down left in rafrx itself.

tests/reliability/test_quiet_cycles.py's turns with a sync approver failed once under
CI load with the approver "alive until the GC runs": a sync function runs on a
ThreadPoolExecutor worker, which keeps the work item it ran (the function, its
arguments) until the OS lets it run again, and on a loaded machine that comes after
the awaiting caller has resumed, finished its turn and dropped the function. These
tests force that ordering: an executor whose worker holds on to what it ran until
released.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rafrx._call
from rafrx import Agent, tool
from rafrx._call import call_function
from rafrx.events import ToolApprovalRequestEvent
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec

KEY = "sk-session12-0123456789abcdef"


class LateWorkers(concurrent.futures.Executor):
    """Runs each call on a thread of its own that, as a pool's worker the OS has not
    scheduled again yet, keeps what it ran after setting the result, until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: list[threading.Thread] = []

    def submit(  # type: ignore[override]
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        held = [fn, args, kwargs]  # (the work item)

        def work() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(held[0](*held[1], **held[2]))
                except BaseException as exc:
                    future.set_exception(exc)
            self.release.wait(5)
            held.clear()

        thread = threading.Thread(target=work, daemon=True)
        self.threads.append(thread)
        thread.start()
        return future

    def let_go(self) -> None:
        self.release.set()
        for thread in self.threads:
            thread.join(5)


@pytest.fixture
def late_workers(monkeypatch: pytest.MonkeyPatch) -> Iterator[LateWorkers]:
    workers = LateWorkers()
    monkeypatch.setattr(rafrx._call, "SYNC_THREADS", workers)
    gc.collect()
    gc.disable()
    try:
        yield workers
    finally:
        gc.enable()
        workers.let_go()


class Note:
    """An argument, to see when it dies."""


@pytest.mark.asyncio
async def test_a_sync_call_lets_go_of_its_function_and_arguments_once_it_returned(
    late_workers: LateWorkers,
) -> None:
    def weather(note: Note) -> str:
        return "sunny"

    note = Note()
    assert await call_function(weather, [note], {}) == "sunny"
    function, argument = weakref.ref(weather), weakref.ref(note)
    del weather, note
    assert function() is None  # (before the fix: kept by the worker that ran it)
    assert argument() is None
    assert not late_workers.release.is_set()  # the worker still holds what it ran


@pytest.mark.asyncio
async def test_an_agents_sync_approver_and_tool_die_with_the_turn_however_late_the_worker(
    llm_server: LLMServer, late_workers: LateWorkers
) -> None:
    """The quiet-cycles test's turn, its worker forced late: a sync approver and a sync
    tool are freed by reference counting as soon as the turn is dropped."""
    calls = (
        ToolCallSpec("weather", {"city": "Paris"}, id="call_paris"),
        ToolCallSpec("weather", {"city": "Rome"}, id="call_rome"),
    )

    def weather(city: str) -> str:
        """The forecast for a city."""
        return f"{city}: sunny"

    def approve(event: ToolApprovalRequestEvent) -> bool:
        return True

    llm_server.enqueue(Reply(tool_calls=calls), Reply(text="Sunny in both."))
    async with OpenAIChatClient(llm_server.url, KEY, model="m") as client:
        agent = Agent(client, tools=[tool(weather, requires_approval=True)], approver=approve)
        response = await agent.send("Weather in Paris and Rome?")
        assert [m.content for m in response.tool_messages] == ["Paris: sunny", "Rome: sunny"]
        refs = {
            "agent": weakref.ref(agent),
            "approver": weakref.ref(approve),
            "tool function": weakref.ref(weather),
        }
        del agent, approve, weather, response
        for _ in range(20):
            await asyncio.sleep(0)  # (done callbacks run; nothing is collected)
        alive = sorted(name for name, ref in refs.items() if ref() is not None)
        assert alive == []  # (before the fix: the approver and the tool function)
    assert not late_workers.release.is_set()
