"""Regression tests of this session's fixes to items left on the known list.

Each failed on the commit before its fix.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest
import reactivex
from reactivex import Observable

from rafrx import Agent, ChatMessage, FinishReason, OpenAIChatClient, tool
from rafrx import updates as u
from rafrx.agent import _RUNNING


@tool
def now() -> str:
    """The time."""
    return "12:00"


@tool(name="now")
def other_now() -> str:
    """Another clock of the same name."""
    return "13:00"


def test_tools_assigned_after_construction_are_checked_for_two_of_a_name() -> None:
    """What the user does: ``agent.tools = [now, other_now]`` (both named "now").
    What happened: the setter took them, and every turn then failed at its first tool
    call, far from the line that caused it. What should happen: the same ValueError the
    constructor gives for the same list."""
    client = OpenAIChatClient(base_url="http://127.0.0.1:9/v1", api_key="k", model="m")
    agent = Agent(client, tools=[now])
    with pytest.raises(ValueError, match="two tools are named 'now'"):
        Agent(client, tools=[now, other_now])
    with pytest.raises(ValueError, match="two tools are named 'now'"):
        agent.tools = [now, other_now]
    assert [t.name for t in agent.tools] == ["now"]  # (unchanged by the refused list)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"reasoning_content": "", "reasoning": "Think."}, "Think."),
        ({"reasoning_content": "Think.", "reasoning": ""}, "Think."),
        ({"reasoning_content": "A.", "reasoning": "B."}, "A."),
        ({"reasoning_content": ""}, ""),
        ({"reasoning": None}, None),
        ({}, None),
    ],
)
def test_a_blank_reasoning_content_gives_way_to_a_reasoning_text(
    fields: dict[str, object], expected: str | None
) -> None:
    """What the user does: reads back a message saved by a proxy that fills DeepSeek's
    ``reasoning_content`` with "" and puts the text in ``reasoning`` (Ollama's and
    OpenRouter's field). What happened: the reasoning read as "" and was lost in the
    next request. What should happen: the text, whichever field holds it; with both
    filled, ``reasoning_content`` (as the stream dialect reads them)."""
    message = ChatMessage.from_openai({"role": "assistant", "content": "Hi", **fields})
    assert message.reasoning == expected


def test_a_turn_stranded_on_a_closed_loop_is_let_go_quietly() -> None:
    """What the user does: a sync program runs a turn on a loop of its own and closes
    that loop while the turn still streams (it gave up on it), then goes on with new
    turns on new loops. What happened: the stranded turn's task stayed in the module's
    set of running turns for good, holding the turn, its agent and its conversation.
    What should happen: the next turn lets it go, and when it is collected its
    coroutine closes quietly (no "Exception ignored" report: nobody is left to tell)."""

    class Client:
        def __init__(self) -> None:
            self.calls = 0

        def stream(self, messages: Any, tools: Any = None, **params: Any) -> Observable[Any]:
            self.calls += 1
            if self.calls == 1:
                return reactivex.never()  # still streaming when its loop is closed
            return reactivex.from_iterable([u.TextDelta("two"), u.Finish(FinishReason.STOP)])

    agent = Agent(Client())
    loop = asyncio.new_event_loop()

    async def first() -> None:
        agent.run("one").subscribe(lambda _: None)
        await asyncio.sleep(0)

    loop.run_until_complete(first())
    (stranded,) = [t for t in _RUNNING if t.get_loop() is loop]
    loop.close()
    assert asyncio.run(agent.send("two")).text == "two"
    assert stranded not in _RUNNING
    stranded_ref = weakref.ref(stranded)
    del stranded
    gc.collect()
    assert stranded_ref() is None
