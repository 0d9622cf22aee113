"""Regression tests for the bugs the review of round 3 of the close reading found (two
regressions of that round and one fix left incomplete).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import reactivex
import reactivex.operators as rx_ops
from reactivex import Observable

import rafrx.updates as u
from rafrx import ChatMessage, FinishReason
from rafrx.agent import Agent
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer
from rafrx.tools import Tool, tool

KEY = "sk-review-round3-0123456789abcdef"


# ---------------------------------------------------------------------------- 1


def test_a_tool_invoked_in_a_cancelled_tasks_cleanup_still_runs() -> None:
    """What the user does: a task that holds a lock through a tool releases it in its
    ``finally:`` block: ``await release.invoke({"name": "L"})``; the task is cancelled
    (a timeout, a UI's stop button, ``asyncio.run`` ending).

    What happens: the tool's function never runs, and ``invoke`` raises
    ``ToolExecutionError("tool 'release' raised CancelledError")``, a failure the tool
    never had. Before 97a97f5 the function ran and returned "ok".

    What should happen: Python delivers a cancellation once; awaiting in a ``finally``
    block after it works (``await asyncio.sleep(0)`` does, in the same block), so a
    tool awaited there runs, as it did. 97a97f5 meant to skip the function only when the
    call's own task is cancelled *between* ``invoke`` scheduling the inner task and that
    task's first step ("a tool whose task was cancelled before its first step never
    starts its function"); a cancellation that was already delivered and handled before
    ``invoke`` was called is not that.

    Root cause: rafrx/tools.py:321, ``_call`` checks ``caller.cancelling()``, which stays
    above 0 for the rest of a task once it was cancelled (until ``uncancel()``), so every
    tool invoked from cleanup code is refused. Fix: pass the count ``invoke`` saw,
    ``asyncio.current_task().cancelling()``, and skip the function only when the
    caller's count has grown since.
    """
    ran: list[str] = []

    @tool
    async def release(name: str) -> str:
        """Release a lock."""
        ran.append(name)
        return "ok"

    said: dict[str, Any] = {}

    async def worker() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0)  # (awaiting in cleanup works)
            try:
                said["result"] = await release.invoke({"name": "L"})
            except BaseException as exc:
                said["result"] = repr(exc)

    async def main() -> None:
        task = asyncio.create_task(worker())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert ran == ["L"], f"the cleanup's tool never ran; invoke gave {said.get('result')}"
    assert said["result"] == "ok"


# ---------------------------------------------------------------------------- 2


class _Answering:
    def stream(self, messages: Sequence[ChatMessage], tools: Any = None, **params: Any) -> Any:
        return reactivex.from_iterable([u.TextDelta("hi"), u.Finish(FinishReason.STOP)])


def test_a_turn_already_waiting_on_a_save_stranded_on_a_closed_loop_goes_on() -> None:
    """What the user does: one Agent used from two threads, each with its own loop (as
    ``_HistoryAccess`` allows: "from turns on any thread's loop"). On loop A a turn is
    stopped (``asyncio.wait_for`` timed out) while its history save runs; the save goes
    on, shielded ("a save already begun runs on to its end"). A turn on thread B starts
    and waits for that save before loading history. Then loop A is closed (its thread's
    work is done) with the save unfinished.

    What happens: B's turn waits forever (here: its 3 s ``wait_for`` times out).

    What should happen: 97a97f5: "a save or a turn stranded on a closed loop no longer
    blocks later turns". A turn that began waiting just before the loop closed is such a
    later turn; the fix only helps a turn that *enters* after the close.

    Root cause: rafrx/agent.py:422-434, ``_HistoryAccess._enter`` drops entries of closed
    loops only before it waits; then it awaits ``asyncio.wait`` on the stranded entry,
    which nothing will ever complete, so it never looks again. Fix: wait with a timeout
    (say 0.5 s) and loop, re-checking ``loop.is_closed()`` of the entries awaited.
    """
    gate: dict[str, asyncio.Event] = {}

    class History:
        def __init__(self) -> None:
            self.messages: list[ChatMessage] = []

        def load(self) -> list[ChatMessage]:
            return list(self.messages)

        async def save(self, messages: Sequence[ChatMessage]) -> None:
            self.messages.extend(messages)
            if "A" in gate:
                await gate["A"].wait()  # (loop A's save: never ends)

    agent = Agent(_Answering(), history=History())
    loop_a = asyncio.new_event_loop()

    async def on_a() -> None:
        gate["A"] = asyncio.Event()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.send("one"), 0.2)

    loop_a.run_until_complete(on_a())
    del gate["A"]
    got: dict[str, Any] = {}

    def on_b() -> None:
        async def turn() -> None:
            try:
                got["text"] = (await asyncio.wait_for(agent.send("two"), 3)).text
            except BaseException as exc:
                got["text"] = repr(exc)

        asyncio.run(turn())

    thread = threading.Thread(target=on_b)
    thread.start()
    time.sleep(0.3)  # (ordering only: B is waiting for A's save)
    loop_a.close()
    thread.join(10)
    assert got.get("text") == "hi", f"B's turn: {got.get('text')}"


# ---------------------------------------------------------------------------- 3


class _Registry:
    """A decorator registry of tools, iterable like a list: ``@tools`` adds one."""

    def __init__(self) -> None:
        self.tools: list[Tool[..., Any]] = []

    def __call__(self, fn: Any) -> Any:
        self.tools.append(tool(fn))
        return fn

    def __iter__(self) -> Iterator[Tool[..., Any]]:
        return iter(self.tools)


@pytest.mark.asyncio
async def test_a_callable_registry_of_tools_is_still_taken_by_client_stream() -> None:
    """What the user does: keeps tools in a decorator registry (``@tools`` registers a
    function; iterating it gives the Tools) and passes it as ``client.stream(messages,
    tools=registry)``.

    What happens: ``TypeError: a client's tools are a list (tools=[...]), not one
    _Registry``. Before 97a97f5 it worked (``[*(tools or ())]``).

    What should happen: ``stream``'s ``tools`` is documented as "The tools offered to the
    model" and typed as a sequence of tool definitions; anything iterable over Tools was
    taken, as ``Agent(tools=...)`` still takes any iterable ("assign any iterable the
    constructor takes"). The new check is there to refuse one Tool or one mapping given
    bare; a single Tool is not iterable, so ``not isinstance(tools, Iterable)`` catches it
    already, and ``callable(tools)`` only refuses callable iterables like this one.

    Root cause: rafrx/sources/clients.py:119, ``callable(tools)`` in ``_checked_tools``.
    Fix: drop ``callable(tools)`` (or refuse only ``isinstance(tools, Tool)``).
    """
    registry = _Registry()

    @registry
    def now() -> str:
        """The time."""
        return "12:00"

    async with LLMServer() as llm_server, OpenAIChatClient(llm_server.url, KEY) as client:
        updates: Observable[Any] = client.stream([ChatMessage.user("time?")], registry)
        await updates.pipe(rx_ops.to_list())
    names = [t["function"]["name"] for t in llm_server.requests[-1].json["tools"]]
    assert names == ["now"]
