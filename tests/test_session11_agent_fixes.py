"""Regression tests of session 11's agent fixes: a turn kept as a dict, an evolved live
state, a turn given a time limit, and turn tasks left pending at exit.

Each failed on the commit before its fix, for the reason its docstring gives. Every HTTP
exchange is real aiohttp over 127.0.0.1 (rafrx.testing.LLMServer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafrx import Agent
from rafrx import content as c
from rafrx.errors import RafrxError, TurnTimeout
from rafrx.events import FinishEvent, ResponseStartedEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import ChatMessage
from rafrx.notebook._state import LiveState
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from tests.strategies import stored_calls, stored_messages, unicode_text

# ----------------------------------------------------------------- AgentResponse.to_dict

#: JSON values (flat: any JSON value's round trip is test_message_storage's).
_scalars = st.none() | st.booleans() | st.integers() | unicode_text(max_size=5)
_values = _scalars | st.lists(_scalars, max_size=2) | st.dictionaries(unicode_text(), _scalars)
_calls = stored_calls(_values)
_messages = stored_messages(_values, max_items=2)
_counts = st.integers(min_value=0, max_value=10**6)
_usages = st.builds(Usage, _counts, _counts, _counts, st.none() | _counts, st.none() | _counts)
_responses = st.builds(
    AgentResponse,
    id=st.none() | unicode_text(),
    model=st.none() | unicode_text(),
    text=unicode_text(),
    reasoning_text=st.none() | unicode_text(),
    tool_calls=st.lists(_calls, max_size=2),
    tool_messages=st.lists(_messages, max_size=2),
    turn_transcript=st.lists(_messages, max_size=3),
    finish_reason=st.none() | st.sampled_from(FinishReason),
    usage=st.none() | _usages,
    source_agent_id=st.none() | unicode_text(),
    interrupted=st.booleans(),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_responses)
def test_a_response_with_every_field_is_stored_and_read_back_equal(
    response: AgentResponse,
) -> None:
    """``to_dict()`` wrote each message in OpenAI wire form: a message's ``source`` and
    ``is_error`` and a cut call's ``partial_value`` and ``complete`` were lost, and
    there was no ``from_dict`` to read a kept turn back."""
    text = json.dumps(response.to_dict(), ensure_ascii=False, allow_nan=False)
    assert AgentResponse.from_dict(json.loads(text)) == response


def test_a_failed_tool_result_keeps_its_source_and_is_error_in_the_dict() -> None:
    failed = ChatMessage.tool("Error: ValueError: no", "c1", is_error=True)
    data = AgentResponse(tool_messages=[failed], turn_transcript=[failed]).to_dict()
    for kept in (data["tool_messages"][0], data["turn_transcript"][0]):
        assert kept["source"] == "tool_result"
        assert kept["is_error"] is True


# ----------------------------------------------------------------- attrs.evolve(LiveState)


def _one_call_with_a_tool() -> LiveState:
    state = LiveState()
    state.add(
        AgentResponseResult(
            events=[ResponseStartedEvent("r1", "m")],
            contents=[c.TextContent("Check"), c.ToolCallStartContent("c1", "now")],
        )
    )
    state.add(AgentResponseResult(contents=[c.TextContent("ing."), c.ToolCallEndContent("c1")]))
    state.add(AgentResponseResult(contents=[c.ToolCallingContent("c1", "now", {})]))
    return state


def _rest_of_the_call() -> list[AgentResponseResult]:
    return [
        AgentResponseResult(contents=[c.ToolCalledContent("c1", "12:00")]),
        AgentResponseResult(contents=[c.UsageContent(Usage(5, 2, 7))]),
        AgentResponseResult(events=[FinishEvent(FinishReason.TOOL_CALLS, Usage(5, 2, 7))]),
    ]


def test_an_evolved_live_state_goes_on_as_the_original_does() -> None:
    """``attrs.evolve`` made a state without its bookkeeping (the current LLM call's
    cards, each call id's cards): the tool's result made a second card ``c1 #2`` and
    the call's usage counted as a second LLM call's."""
    original = _one_call_with_a_tool()
    evolved = attrs.evolve(_one_call_with_a_tool(), model="other")
    for state in (original, evolved):
        for result in _rest_of_the_call():
            state.add(result)
    assert list(evolved.cards) == list(original.cards) == ["c1"]
    assert evolved.cards["c1"].result == "12:00"
    assert evolved.step_usage == original.step_usage == [Usage(5, 2, 7)]
    assert evolved.usage == original.usage
    assert (evolved.model, evolved.text) == ("other", original.text)


# ----------------------------------------------------------------- Agent.send(timeout=...)


def now() -> str:
    """The time."""
    return "12:00"


#: A slow answer: 120 deltas 20 ms apart (2.4 s), cut by a timeout of a fraction of that.
SLOW_ANSWER = Reply(text="It is noon. " * 40, chunk_size=4, delay=0.02)


@pytest.mark.asyncio
async def test_a_turn_over_its_timeout_ends_with_a_typed_error_holding_what_arrived() -> None:
    """Only ``asyncio.timeout`` around ``send()`` could limit a turn: it cancelled the
    turn, and the caller got a bare ``TimeoutError`` with nothing of the tool's result
    or the text that had arrived (``send`` took no ``timeout``)."""
    history = InMemoryHistoryProvider()
    async with LLMServer() as server:
        server.enqueue(Reply(tool_calls=[ToolCallSpec("now", {})]), SLOW_ANSWER, Reply(text="Hi."))
        async with OpenAIChatClient(server.url, model="m") as client:
            agent = Agent(client, tools=[now], history=history)
            with pytest.raises(TurnTimeout) as caught:
                await agent.send("Time?", timeout=0.4)
            error = caught.value
            assert isinstance(error, RafrxError)
            assert isinstance(error, TimeoutError)
            assert "0.4 s" in str(error)
            assert not error.retryable
            partial = error.partial
            assert partial is not None
            assert partial.interrupted
            assert [m.content for m in partial.tool_messages] == ["12:00"]
            assert partial.text.startswith("It is noon.")
            assert partial.finish_reason is None  # (the last LLM call never finished)
            assert list(await history.load()) == []  # a failed turn: nothing saved
            assert (await agent.send("Hello")).text == "Hi."  # the agent goes on
    assert [m.content for m in await history.load()] == ["Hello", "Hi."]


@pytest.mark.asyncio
async def test_a_turn_within_its_timeout_is_saved_as_without_one() -> None:
    history = InMemoryHistoryProvider()
    async with LLMServer() as server:
        server.enqueue(Reply(text="Hi."))
        async with OpenAIChatClient(server.url, model="m") as client:
            response = await Agent(client, history=history).send("Hello", timeout=5)
    assert response.text == "Hi."
    assert [m.content for m in await history.load()] == ["Hello", "Hi."]


class _NoClient:
    """A client never asked to stream (an agent's client has a ``stream`` method)."""

    def stream(self, messages: Any, tools: Any = None) -> Any:
        raise AssertionError("not called")


@pytest.mark.parametrize("timeout", [0, -1, float("nan")])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(timeout: float) -> None:
    agent = Agent(_NoClient())
    with pytest.raises(ValueError, match="timeout"):
        agent.run("Hello", timeout=timeout)


# ----------------------------------------------------------------- turns left pending at exit

#: A program whose turn's observer starts the next turn when the turn ends with an error:
#: here, the error of its loop's end (asyncio.run returns with the turn still streaming).
_NEXT_TURN_ON_ERROR = textwrap.dedent(
    """
    import asyncio, reactivex
    from rafrx import Agent

    class Never:
        def stream(self, messages, tools=None, **params):
            return reactivex.never()

    agent = Agent(Never())

    def again(error):
        print("one:", error)
        agent.run("two").subscribe(lambda _: None, lambda error: print("two:", error))

    async def main():
        agent.run("one").subscribe(lambda _: None, again)
        await asyncio.sleep(0.01)

    asyncio.run(main())
    """
)


def test_a_turn_started_as_its_loop_ends_is_not_left_pending_at_exit() -> None:
    """``asyncio.run`` cancels the tasks there are, then closes the loop: a turn the
    first turn's observer started on its error (the loop's end) got a task that was
    never cancelled, reported "Task was destroyed but it is pending!" (name
    'rafrx turn') at the interpreter's exit, and never told its observer."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", _NEXT_TURN_ON_ERROR],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "destroyed but it is pending" not in done.stderr, done.stderr
    assert done.stdout.splitlines() == [
        "one: the turn was cancelled (its event loop ended?)",
        "two: the turn was not started: its event loop is ending",
    ]
