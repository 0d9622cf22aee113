"""``aggregate()`` and ``collect_agent_response()``: result chunks → one ``AgentResponse``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex.disposable import Disposable
from reactivex.subject import Subject

import rafrx
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import TextContent, ToolCalledContent, ToolCallingContent
from rafrx.errors import ProviderError, RafrxError, StreamInterrupted
from rafrx.messages import ANTHROPIC_THINKING, ChatMessage, MessageRole, MessageSource, ToolCall
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from tests.operators import marble, records, run, subscribed

R = AgentResponseResult
D = u.ToolCallDelta


def llm_call(*updates: Any) -> Observable[AgentResponseResult]:
    """One LLM call's updates, converted (the agent applies convert() per call)."""
    return reactivex.from_iterable(list(updates)).pipe(ops.convert())


def tool_results(*called: ToolCalledContent) -> Observable[AgentResponseResult]:
    return reactivex.of(*(R(contents=[c]) for c in called))


def aggregate(*parts: Observable[AgentResponseResult], agent_id: str | None = None) -> Any:
    out, errors = run([], lambda _: reactivex.concat(*parts).pipe(ops.aggregate(agent_id)))
    assert errors == []
    assert len(out) == 1
    return out[0]


def two_step_turn() -> list[Observable[AgentResponseResult]]:
    """Ask → two parallel calls → results (B finishes first) → final answer."""
    return [
        llm_call(
            u.ResponseMetadata("r1", "gpt-x"),
            u.ReasoningDelta("Need both files."),
            u.TextDelta("Reading "),
            u.TextDelta("both."),
            D(0, id="A", name="read", arguments_delta='{"path": '),
            D(1, id="B", name="read", arguments_delta='{"path": "b.py"}'),
            D(0, arguments_delta='"a.py"}'),
            u.Finish(FinishReason.TOOL_CALLS, Usage(100, 20, 120)),
        ),
        tool_results(
            ToolCalledContent("B", "print('b')"),
            ToolCalledContent("A", error="FileNotFoundError: a.py"),
        ),
        llm_call(
            u.ResponseMetadata("r2", "gpt-x"),
            u.TextDelta(" Only b.py exists."),
            u.Finish(FinishReason.STOP, Usage(150, 10, 160)),
        ),
    ]


CALL_A = ToolCall("A", "read", {"path": "a.py"})
CALL_B = ToolCall("B", "read", {"path": "b.py"})
TOOL_B = ChatMessage.tool("print('b')", "B")
TOOL_A = ChatMessage.tool("Error: FileNotFoundError: a.py", "A", is_error=True)


# ---------------------------------------------------------------- marbles


def test_marble_one_response_at_completion() -> None:
    lookup: dict[str, Any] = {
        "a": R("r", "m", contents=[TextContent("Hel")]),
        "b": R("r", "m", contents=[TextContent("lo")]),
        "f": R("r", "m", FinishReason.STOP, events=[rafrx.FinishEvent(FinishReason.STOP)]),
        "R": AgentResponse(
            "r",
            "m",
            "Hello",
            turn_transcript=[ChatMessage.assistant("Hello")],
            finish_reason=FinishReason.STOP,
        ),
    }
    messages, subscriptions = marble(ops.aggregate(), "-a-b-f-|", lookup)
    assert messages == records("-------(R,|)", lookup)
    assert subscriptions == [subscribed(200, 270)]


def test_marble_unsubscribe_before_completion_emits_nothing_and_disposes() -> None:
    lookup = {"a": R(contents=[TextContent("x")])}
    messages, subscriptions = marble(ops.aggregate(), "-a-a-a-|", lookup, disposed=245)
    assert messages == []
    assert subscriptions == [subscribed(200, 245)]


def test_marble_error_reraised_with_partial() -> None:
    boom = StreamInterrupted("connection reset")
    lookup = {"a": R(contents=[TextContent("par")]), "b": R(contents=[TextContent("tial")])}
    messages, subscriptions = marble(ops.aggregate(), "-a-b-#", lookup, error=boom)
    assert len(messages) == 1
    assert messages[0].time == 250
    assert messages[0].value.exception is boom
    assert boom.partial is not None
    assert boom.partial.text == "partial"
    assert boom.partial.interrupted is True
    assert subscriptions == [subscribed(200, 250)]


# ---------------------------------------------------------------- the response


def test_two_step_turn_with_parallel_calls() -> None:
    response = aggregate(*two_step_turn(), agent_id="agent-1")
    assert response.id == "r2"
    assert response.model == "gpt-x"
    assert response.text == "Reading both. Only b.py exists."
    assert response.reasoning_text == "Need both files."
    assert response.tool_calls == (CALL_A, CALL_B)
    assert response.tool_messages == (TOOL_A, TOOL_B)
    assert all(m.source is MessageSource.TOOL_RESULT for m in response.tool_messages)
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(250, 30, 280)
    assert response.source_agent_id == "agent-1"
    assert response.interrupted is False


def test_turn_transcript_per_step_with_tool_messages_in_call_start_order() -> None:
    response = aggregate(*two_step_turn())
    assert response.turn_transcript == (
        ChatMessage(
            MessageRole.ASSISTANT,
            "Reading both.",
            tool_calls=[CALL_A, CALL_B],
            reasoning="Need both files.",
        ),
        TOOL_A,  # A started first, although B's result arrived first
        TOOL_B,
        ChatMessage.assistant(" Only b.py exists."),
    )
    assert response.turn_transcript[-1].content == " Only b.py exists."


def test_reasoning_text_is_none_when_there_was_none() -> None:
    response = aggregate(llm_call(u.TextDelta("hi"), u.Finish(FinishReason.STOP)))
    assert response.reasoning_text is None
    assert response.turn_transcript == (ChatMessage.assistant("hi"),)


def test_reasoning_only_step_and_thinking_provider_data_survive() -> None:
    block = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    response = aggregate(
        llm_call(
            u.ReasoningDelta("h", provider_data=None),
            u.ReasoningDelta("m", provider_data=block),
            u.ToolCallStart("t1", "f"),
            u.ToolCallEnd("t1"),
            u.Finish(FinishReason.TOOL_CALLS),
        )
    )
    [message] = response.turn_transcript
    assert message.reasoning == "hm"
    assert message.provider_data == {ANTHROPIC_THINKING: (block,)}
    assert message.tool_calls == (ToolCall("t1", "f", {}),)
    assert response.reasoning_text == "hm"


def test_invalid_arguments_become_a_tool_call_with_error_and_raw_arguments() -> None:
    response = aggregate(
        llm_call(D(0, id="c", name="f", arguments_delta='{"a": '), u.Finish(FinishReason.LENGTH))
    )
    [call] = response.tool_calls
    assert (call.id, call.name, call.arguments) == ("c", "f", None)
    assert call.raw_arguments == '{"a": '
    assert call.error is not None
    assert response.finish_reason is FinishReason.LENGTH


def test_calls_without_start_contents_are_ordered_as_they_come() -> None:
    """Results holding only ToolCallingContent (no ToolCallStartContent): a hand-built source."""
    response = aggregate(
        reactivex.of(
            R(contents=[TextContent("Both.")]),
            R(contents=[ToolCallingContent("B", "read", {"path": "b.py"})]),
            R(contents=[ToolCallingContent("A", "read", {"path": "a.py"})]),
        ),
        tool_results(
            ToolCalledContent("A", error="FileNotFoundError: a.py"),
            ToolCalledContent("B", "print('b')"),
        ),
    )
    assert response.tool_calls == (CALL_B, CALL_A)
    assert response.turn_transcript == (
        ChatMessage.assistant_with_tools("Both.", [CALL_B, CALL_A]),
        TOOL_B,
        TOOL_A,
    )


def test_usage_is_counted_once_within_a_call_and_summed_over_calls() -> None:
    response = aggregate(
        llm_call(
            u.Usage(Usage(10, 1, 11)),  # Anthropic: message_start ...
            u.TextDelta("a"),
            u.Usage(Usage(10, 50, 60)),  # ... then cumulative message_delta
            u.Finish(FinishReason.TOOL_CALLS),
        ),
        llm_call(u.TextDelta("b"), u.Finish(FinishReason.STOP, Usage(70, 5, 75))),
    )
    assert response.usage == Usage(80, 55, 135)


def test_usage_is_none_when_no_call_reported_it() -> None:
    assert aggregate(llm_call(u.TextDelta("a"), u.Finish(FinishReason.STOP))).usage is None


def test_finish_reason_is_the_last_llm_calls() -> None:
    response = aggregate(
        llm_call(u.Finish(FinishReason.TOOL_CALLS)), llm_call(u.Finish(FinishReason.LENGTH))
    )
    assert response.finish_reason is FinishReason.LENGTH


def test_an_empty_stream_gives_an_empty_response() -> None:
    assert aggregate(reactivex.empty()) == AgentResponse()


def test_tool_messages_of_unknown_calls_are_kept_after_the_known_ones() -> None:
    response = aggregate(
        llm_call(u.ToolCallStart("a", "f"), u.ToolCallEnd("a"), u.Finish(FinishReason.TOOL_CALLS)),
        tool_results(ToolCalledContent("server_side", "done"), ToolCalledContent("a", "ok")),
    )
    assert [m.tool_call_id for m in response.tool_messages] == ["a", "server_side"]


def test_state_is_per_subscription() -> None:
    piped = reactivex.concat(*two_step_turn()).pipe(ops.aggregate())
    assert piped.run() == piped.run() == aggregate(*two_step_turn())


# ---------------------------------------------------------------- errors


def test_upstream_error_is_reraised_with_the_partial_response() -> None:
    boom = StreamInterrupted("reset")
    stream = reactivex.concat(
        reactivex.from_iterable(
            [
                u.ResponseMetadata("r1", "m"),
                u.TextDelta("Reading."),
                D(0, id="A", name="read", arguments_delta="{}"),
                D(1, id="B", name="read", arguments_delta='{"pa'),
            ]
        ),
        reactivex.throw(boom),
    )
    with pytest.raises(StreamInterrupted) as info:
        stream.pipe(ops.convert(), ops.aggregate()).run()
    assert info.value is boom
    partial = info.value.partial
    assert partial is not None
    assert partial.interrupted is True
    assert (partial.id, partial.text) == ("r1", "Reading.")
    # Neither call's arguments ended: both are kept, cut short, never to run.
    got = [(c.id, c.complete, c.raw_arguments, c.partial_value) for c in partial.tool_calls]
    assert got == [("A", False, "{}", {}), ("B", False, '{"pa', {})]
    assert all("stream ended before the call did" in str(c.error) for c in partial.tool_calls)
    assert all(m.tool_calls is None for m in partial.turn_transcript)
    assert partial.turn_transcript == (ChatMessage.assistant("Reading."),)


def test_an_error_update_raises_provider_error_with_partial() -> None:
    with pytest.raises(ProviderError) as info:
        reactivex.from_iterable(
            [u.TextDelta("Half an ans"), u.Error("overloaded", error_type="overloaded_error")]
        ).pipe(ops.convert(), ops.aggregate()).run()
    assert str(info.value) == "overloaded"
    assert info.value.error_type == "overloaded_error"
    assert info.value.partial is not None
    assert info.value.partial.text == "Half an ans"


def test_an_existing_partial_is_kept() -> None:
    earlier = AgentResponse(text="from an inner aggregate")
    boom = RafrxError("x")
    boom.partial = earlier
    with pytest.raises(RafrxError):
        reactivex.throw(boom).pipe(ops.aggregate()).run()
    assert boom.partial is earlier


def test_a_foreign_error_passes_unchanged() -> None:
    boom = KeyError("k")
    out, errors = run([], lambda _: reactivex.throw(boom).pipe(ops.aggregate()))
    assert out == []
    assert errors == [boom]
    assert not hasattr(boom, "partial")


# ---------------------------------------------------------------- collect_agent_response


@pytest.mark.asyncio
async def test_collect_agent_response_over_a_synchronous_source() -> None:
    response = await rafrx.collect_agent_response(reactivex.concat(*two_step_turn()))
    assert response == aggregate(*two_step_turn())


@pytest.mark.asyncio
async def test_collect_agent_response_with_a_source_emitting_later_from_the_loop() -> None:
    loop = asyncio.get_running_loop()
    subject: Subject[u.AgentResponseUpdate] = Subject()
    updates = [u.TextDelta("late "), u.TextDelta("text"), u.Finish(FinishReason.STOP)]
    for i, update in enumerate(updates):
        loop.call_later(0.001 * (i + 1), subject.on_next, update)
    loop.call_later(0.01, subject.on_completed)
    response = await asyncio.wait_for(
        rafrx.collect_agent_response(subject.pipe(ops.convert()), agent_id="a"), 5
    )
    assert response.text == "late text"
    assert response.source_agent_id == "a"


@pytest.mark.asyncio
async def test_collect_agent_response_raises_with_partial() -> None:
    source = reactivex.concat(
        reactivex.of(u.TextDelta("so far")), reactivex.throw(StreamInterrupted("reset"))
    ).pipe(ops.convert())
    with pytest.raises(StreamInterrupted) as info:
        await rafrx.collect_agent_response(source)
    assert info.value.partial is not None
    assert info.value.partial.text == "so far"


@pytest.mark.asyncio
async def test_cancelling_collect_agent_response_disposes_the_subscription() -> None:
    subscribed_event = asyncio.Event()
    disposed: list[bool] = []

    def never_ending(observer: Any, scheduler: Any = None) -> Disposable:
        observer.on_next(u.TextDelta("start"))
        subscribed_event.set()
        return Disposable(lambda: disposed.append(True))

    task = asyncio.ensure_future(
        rafrx.collect_agent_response(reactivex.create(never_ending).pipe(ops.convert()))
    )
    await asyncio.wait_for(subscribed_event.wait(), 5)
    assert disposed == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert disposed == [True]
