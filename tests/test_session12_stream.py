"""Session 12, helper E: a stream that fails after the provider had ended the tool calls'
arguments keeps those calls whole in the error's ``.partial``.

User: an agent service whose provider stalls (idle timeout), drops the connection or
sends an error event right after the calls' end: chat's ``finish_reason:
"tool_calls"`` chunk came and only the usage chunk and ``[DONE]`` are missing;
Anthropic's ``content_block_stop`` (and ``message_delta`` with ``stop_reason:
"tool_use"``) came but not ``message_stop``; Responses' ``function_call_arguments.done``
/ ``output_item.done`` came but not ``response.completed``. The service salvages
``.partial`` to tell the user which calls the model made whole.

What happened: every such call came back ``ToolCall(complete=False, arguments=None,
error="never run: …")``, exactly like a call cut mid-arguments, although its
arguments were whole JSON: ``.partial`` could not tell whole calls from cut ones.

What should happen (RELIABILITY.md: "everything received up to then is kept"; a
finish reason without ``[DONE]`` counts as complete): such a call is complete in
``.partial``, with its parsed arguments, and still never runs (the stream failed: the
turn ends with the error). A call whose arguments never ended stays cut, and so does
one whose ended arguments are invalid JSON while its LLM call never finished (the
token limit may have cut them).

Every exchange is real HTTP over 127.0.0.1 against :class:`rafrx.testing.LLMServer`.
"""

from __future__ import annotations

from typing import Any

import pytest
from reactivex import operators as rx_ops

from rafrx import Agent, ChatMessage, RafrxError, collect_agent_response, tool
from rafrx import operators as ops
from rafrx.content import ToolCallIncompleteContent, ToolCallingContent
from rafrx.errors import IdleTimeout, ProviderError, StreamInterrupted
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import MessageRole, ToolCall
from rafrx.operators._flush_tool_calls import FAILED_FIRST
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason
from rafrx.sources.clients import (
    AnthropicClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    Timeouts,
)
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec, render

pytestmark = pytest.mark.asyncio

CLIENTS: dict[str, Any] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
IDLE = Timeouts(idle=0.1)
STALL = 1.0  # the server's silence: ten idle timeouts (LLMServer.close() ends it early)
CUT = "arguments cut short: the stream ended before the call did"

ADD = ToolCallSpec("add", {"a": 1}, id="c1")
MUL = ToolCallSpec("mul", {"b": 2, "note": "twenty-two words"}, id="c2")  # in several deltas
WHOLE = [
    ToolCall("c1", "add", {"a": 1}),
    ToolCall("c2", "mul", {"b": 2, "note": "twenty-two words"}),
]


def after(body: bytes, marker: bytes, nth: int = 1) -> int:
    """The offset just past the event holding the ``nth`` occurrence of ``marker``."""
    at = -1
    for _ in range(nth):
        at = body.index(marker, at + 1)
    return body.index(b"\n\n", at) + 2


async def fail(
    fmt: str, body: bytes, at: int, *, drop: bool = False
) -> tuple[RafrxError, list[AgentResponseResult]]:
    """Stream ``body`` cut at byte ``at`` (a stall, or a reset connection with ``drop``)
    through ``convert()``; the error raised and the results seen before it."""
    seen: list[AgentResponseResult] = []
    fault = (
        Fault.drop_after(at, body=body, reset=True)
        if drop
        else Fault.stall(STALL, after_bytes=at, body=body)
    )
    async with LLMServer() as server:
        server.enqueue(fault)
        async with CLIENTS[fmt](server.url, "sk-test", timeouts=IDLE) as client:
            results = client.stream([ChatMessage.user("hi")]).pipe(
                ops.convert(), rx_ops.do_action(seen.append)
            )
            with pytest.raises(RafrxError) as caught:
                await collect_agent_response(results)
            await server.close()  # (ends the stall now)
    return caught.value, seen


def partial_of(error: RafrxError) -> AgentResponse:
    assert error.partial is not None
    assert error.partial.interrupted
    return error.partial


def not_run(results: list[AgentResponseResult]) -> list[tuple[str, bool]]:
    """The calls flushed before the error: none to run; (id, whole) of those that never run."""
    contents = [c for r in results for c in r.contents]
    assert not [c for c in contents if isinstance(c, ToolCallingContent)]
    return [(c.call_id, c.whole) for c in contents if isinstance(c, ToolCallIncompleteContent)]


# ---------------------------------------------------------------- OpenAI chat


@pytest.mark.parametrize("drop", [False, True], ids=["stall", "reset"])
async def test_chat_failure_after_finish_reason_keeps_the_calls_complete(drop: bool) -> None:
    body = render(Reply(tool_calls=[ADD, MUL]), "openai-chat")
    error, results = await fail(
        "openai-chat", body, after(body, b'"finish_reason":"tool_calls"'), drop=drop
    )
    assert isinstance(error, StreamInterrupted if drop else IdleTimeout)
    partial = partial_of(error)
    assert partial.finish_reason is FinishReason.TOOL_CALLS
    assert list(partial.tool_calls) == WHOLE
    assert not_run(results) == [("c1", True), ("c2", True)]
    assert partial.tool_messages == ()  # never run
    [message] = partial.turn_transcript  # what the model said, its calls unanswered
    assert message.role is MessageRole.ASSISTANT
    assert list(message.tool_calls or ()) == WHOLE


async def test_chat_invalid_arguments_of_a_finished_call_are_the_models_not_a_cut() -> None:
    """The finish reason (not ``length``) came: invalid JSON is the model's mistake, as
    at a normal finish (an ``InvalidToolArguments`` scoped to the call), not a cut."""
    body = render(Reply(tool_calls=[ToolCallSpec("add", '{"a": 1,}', id="c1")]), "openai-chat")
    error, _ = await fail("openai-chat", body, after(body, b'"finish_reason":"tool_calls"'))
    [call] = partial_of(error).tool_calls
    assert (call.complete, call.arguments, call.raw_arguments) == (True, None, '{"a": 1,}')
    assert (call.error or "").startswith("invalid JSON arguments")
    assert call.invalid_arguments is not None


async def test_chat_length_finish_keeps_the_whole_call_and_cuts_the_other() -> None:
    body = render(
        Reply(tool_calls=[ADD, ToolCallSpec("mul", '{"b": "tw', id="c2")], finish="length"),
        "openai-chat",
    )
    error, _ = await fail("openai-chat", body, after(body, b'"finish_reason":"length"'))
    partial = partial_of(error)
    assert partial.finish_reason is FinishReason.LENGTH
    whole, cut = partial.tool_calls
    assert whole == ToolCall("c1", "add", {"a": 1})
    assert (cut.complete, cut.raw_arguments, cut.partial_value) == (False, '{"b": "tw', {"b": "tw"})
    assert (
        cut.error == "arguments cut short: the response hit its token limit (finish reason length)"
    )


async def test_chat_stall_before_the_finish_reason_still_cuts_every_call() -> None:
    """No finish reason: chat never said the arguments ended (a parsable prefix is no
    proof, RELIABILITY #12), so every call stays cut."""
    body = render(Reply(tool_calls=[ADD, MUL]), "openai-chat")
    error, _ = await fail("openai-chat", body, after(body, b'"arguments":"{\\"b'))
    calls = partial_of(error).tool_calls
    assert [(c.id, c.complete, c.error) for c in calls] == [("c1", False, CUT), ("c2", False, CUT)]


# ---------------------------------------------------------------- Anthropic


@pytest.mark.parametrize("drop", [False, True], ids=["stall", "reset"])
async def test_anthropic_failure_after_message_delta_keeps_the_calls_complete(drop: bool) -> None:
    body = render(Reply(text="On it.", tool_calls=[ADD, MUL]), "anthropic")
    error, results = await fail("anthropic", body, after(body, b"event: message_delta"), drop=drop)
    assert isinstance(error, StreamInterrupted if drop else IdleTimeout)
    partial = partial_of(error)
    assert partial.finish_reason is FinishReason.TOOL_CALLS
    assert partial.text == "On it."
    assert list(partial.tool_calls) == WHOLE
    assert not_run(results) == [("c1", True), ("c2", True)]


async def test_anthropic_stall_after_a_blocks_stop_keeps_that_call_and_cuts_the_open_one() -> None:
    """``content_block_stop`` ended c1's arguments, which parse: whole (eager tools would
    have run it already). c2 was mid-arguments: cut."""
    body = render(Reply(tool_calls=[ADD, MUL]), "anthropic")
    error, results = await fail("anthropic", body, after(body, b'"partial_json":"{', nth=2))
    partial = partial_of(error)
    assert partial.finish_reason is None
    whole, cut = partial.tool_calls
    assert whole == WHOLE[0]
    assert (cut.id, cut.complete, cut.error) == ("c2", False, CUT)
    assert (cut.raw_arguments or "").startswith('{"b":2')
    assert not_run(results) == [("c1", True), ("c2", False)]


async def test_anthropic_ended_invalid_arguments_without_a_stop_reason_stay_cut() -> None:
    """Invalid JSON at ``content_block_stop`` with no ``stop_reason`` yet: the token limit
    may have cut it (``max_tokens``), so it stays cut; the valid call before it is whole."""
    bad = ToolCallSpec("mul", '{"b": 2', id="c2")
    body = render(Reply(tool_calls=[ADD, bad]), "anthropic")
    error, _ = await fail("anthropic", body, after(body, b'"content_block_stop","index":1'))
    calls = partial_of(error).tool_calls
    assert calls[0] == WHOLE[0]
    assert (calls[1].id, calls[1].complete, calls[1].error) == ("c2", False, FAILED_FIRST)
    assert calls[1].raw_arguments == '{"b": 2'


# ---------------------------------------------------------------- OpenAI Responses


async def test_responses_stall_after_function_call_arguments_done_keeps_the_call() -> None:
    body = render(Reply(tool_calls=[ADD, MUL]), "openai-responses")
    error, results = await fail(
        "openai-responses", body, after(body, b"event: response.function_call_arguments.done")
    )
    [call] = partial_of(error).tool_calls
    assert call == WHOLE[0]
    assert not_run(results) == [("c1", True)]


@pytest.mark.parametrize("drop", [False, True], ids=["stall", "reset"])
async def test_responses_failure_after_the_last_output_item_done_keeps_every_call(
    drop: bool,
) -> None:
    body = render(Reply(tool_calls=[ADD, MUL]), "openai-responses")
    at = after(body, b"event: response.output_item.done", nth=2)
    error, results = await fail("openai-responses", body, at, drop=drop)
    assert isinstance(error, StreamInterrupted if drop else IdleTimeout)
    partial = partial_of(error)
    assert partial.finish_reason is None  # (response.completed never came)
    assert list(partial.tool_calls) == WHOLE
    assert not_run(results) == [("c1", True), ("c2", True)]


# ---------------------------------------------------------------- a provider's error event


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
async def test_an_error_event_after_the_calls_ended_keeps_them_complete(fmt: str) -> None:
    """Anthropic's ``error`` event after the blocks stopped, Responses' ``response.failed``
    after the items were done: the response failed (finish reason ``ERROR``), but the
    arguments had come whole."""
    async with LLMServer() as server:
        server.enqueue(Reply(tool_calls=[ADD, MUL], finish=FinishReason.ERROR))
        async with CLIENTS[fmt](server.url, "sk-test") as client:
            with pytest.raises(ProviderError) as caught:
                await collect_agent_response(
                    client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
                )
    partial = partial_of(caught.value)
    assert partial.finish_reason is FinishReason.ERROR
    assert list(partial.tool_calls) == WHOLE
    assert partial.tool_messages == ()


# ---------------------------------------------------------------- the agent


@pytest.mark.parametrize("fmt", sorted(CLIENTS))
async def test_an_agent_runs_no_call_of_a_failed_stream_but_its_partial_shows_them_whole(
    fmt: str,
) -> None:
    ran: list[int] = []

    @tool
    def add(a: int) -> int:
        """Add one."""
        ran.append(a)
        return a + 1

    marker = {
        "openai-chat": b'"finish_reason":"tool_calls"',
        "anthropic": b"event: message_delta",
        "openai-responses": b'"type":"function_call","status":"completed"',
    }[fmt]
    body = render(Reply(tool_calls=[ADD]), fmt)
    history = InMemoryHistoryProvider()
    async with LLMServer() as server:
        server.enqueue(Fault.stall(STALL, after_bytes=after(body, marker), body=body))
        async with CLIENTS[fmt](server.url, "sk-test", timeouts=IDLE) as client:
            agent = Agent(client, tools=[add], history=history)
            with pytest.raises(IdleTimeout) as caught:
                await agent.send("add one to 1")
            await server.close()
    assert ran == []  # the stream failed: the turn ends with the error, no tool runs
    assert len(server.requests) == 1
    partial = partial_of(caught.value)
    assert list(partial.tool_calls) == [WHOLE[0]]
    assert partial.tool_messages == ()
    assert list(await history.load()) == []  # nothing saved


# ---------------------------------------------------------------- the live view


async def test_the_live_view_shows_a_whole_call_of_a_failed_stream_as_never_run() -> None:
    """The live card of a call whose arguments ended whole before the stream stalled
    shows its arguments and "never run" (it said "cut short", as for arguments cut
    mid-way); the next call, not started at the stall, has no card."""
    from rafrx.notebook._render import live_html
    from rafrx.notebook._state import LiveState

    body = render(Reply(tool_calls=[ADD, MUL]), "anthropic")
    error, results = await fail("anthropic", body, after(body, b"content_block_stop"))
    assert isinstance(error, IdleTimeout)
    state = LiveState()
    for result in results:
        state.add(result)
    assert list(state.cards) == ["c1"]
    whole = state.cards["c1"]
    assert (whole.status, whole.arguments) == ("never run", {"a": 1})
    assert whole.argument_error == FAILED_FIRST
    assert "never run" in live_html(state)
