"""``accumulate_tool_calls()``: updates → one ``AgentResponseResult`` per update."""

from __future__ import annotations

from typing import Any

import pytest
import reactivex

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    ReasoningContent,
    ResponseMetadata,
    TextContent,
    ToolCallArgsContent,
    ToolCalledContent,
    ToolCallEndContent,
    ToolCallStartContent,
    UriContent,
    UsageContent,
)
from rafrx.errors import LimitExceeded, ProtocolError, ProviderError
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.operators._accumulate_tool_calls import ToolCallAccumulator
from rafrx.response import AgentResponseResult, FinishReason, Usage
from tests.operators import contents, marble, records, run, subscribed

R = AgentResponseResult
META = ResponseMetadata("resp_1", "gpt-x")
USAGE = Usage(10, 5, 15)


def accumulate(*updates: Any) -> tuple[list[AgentResponseResult], list[Exception]]:
    return run(updates, ops.accumulate_tool_calls())


# ---------------------------------------------------------------- marbles

LOOKUP: dict[str, Any] = {
    "m": u.ResponseMetadata("resp_1", "gpt-x"),
    "t": u.TextDelta("a"),
    "s": u.ToolCallStart("c", "f"),
    "a": u.ToolCallArgs("c", "{}"),
    "e": u.ToolCallEnd("c"),
    "f": u.Finish(FinishReason.TOOL_CALLS),
    "x": u.Error("overloaded"),
    # expected results
    "P": R("resp_1", "gpt-x", events=[ResponseStartedEvent("resp_1", "gpt-x")]),
    "Q": R("resp_1", "gpt-x", contents=[TextContent("a", meta=META)]),
    "S": R("resp_1", "gpt-x", contents=[ToolCallStartContent("c", "f", meta=META)]),
    "T": R("resp_1", "gpt-x", contents=[ToolCallArgsContent("c", "{}", meta=META)]),
    "U": R("resp_1", "gpt-x", contents=[ToolCallEndContent("c", meta=META)]),
    "V": R(
        "resp_1", "gpt-x", FinishReason.TOOL_CALLS, events=[FinishEvent(FinishReason.TOOL_CALLS)]
    ),
    "W": R("resp_1", "gpt-x", contents=[ErrorContent("overloaded", meta=META)]),
}


def test_marble_one_result_per_update_with_step_events() -> None:
    messages, subscriptions = marble(ops.accumulate_tool_calls(), "-m-t-s-a-e-f-|", LOOKUP)
    assert messages == records("-P-Q-S-T-U-V-|", LOOKUP)
    assert subscriptions == [subscribed(200, 330)]


def test_marble_error_update_gives_an_error_content_then_the_error_and_disposes() -> None:
    messages, subscriptions = marble(ops.accumulate_tool_calls(), "-m-t-x-t-|", LOOKUP)
    assert messages[:2] == records("-P-Q", LOOKUP)
    assert messages[2].time == 250
    assert messages[2].value.value == LOOKUP["W"]
    error = messages[3].value.exception
    assert (messages[3].time, type(error), str(error)) == (250, ProviderError, "overloaded")
    assert len(messages) == 4
    assert subscriptions == [subscribed(200, 250)]


def test_marble_upstream_error_gives_one_error_content_then_the_same_error() -> None:
    boom = ConnectionResetError("connection reset by peer")
    messages, subscriptions = marble(ops.accumulate_tool_calls(), "-m-t-#", LOOKUP, error=boom)
    error_result = R(
        "resp_1", "gpt-x", contents=[ErrorContent("connection reset by peer", meta=META)]
    )
    assert messages[:-1] == records("-P-Q-e", {**LOOKUP, "e": error_result})
    assert messages[-1].value.exception is boom
    assert subscriptions == [subscribed(200, 250)]


def test_marble_unsubscribe_disposes_upstream() -> None:
    messages, subscriptions = marble(
        ops.accumulate_tool_calls(), "-m-t-s-a-|", LOOKUP, disposed=245
    )
    assert messages == records("-P-Q", LOOKUP)
    assert subscriptions == [subscribed(200, 245)]


# ---------------------------------------------------------------- LLM calls and events


def test_first_result_of_an_llm_call_carries_response_started() -> None:
    out, _ = accumulate(u.TextDelta("a"), u.TextDelta("b"))
    assert out[0] == R(contents=[TextContent("a")], events=[ResponseStartedEvent()])
    assert out[1] == R(contents=[TextContent("b")])


def test_metadata_arriving_late_updates_later_results_but_not_the_started_event() -> None:
    out, _ = accumulate(
        u.TextDelta("a"),
        u.ResponseMetadata("r", None),
        u.ResponseMetadata(model="m"),
        u.TextDelta("b"),
    )
    assert out[0].events == (ResponseStartedEvent(None, None),)
    assert (out[1].id, out[1].model) == ("r", None)
    assert (out[2].id, out[2].model) == ("r", "m")
    assert out[3].contents == (TextContent("b", meta=ResponseMetadata("r", "m")),)


def test_finish_result_carries_reason_event_and_usage_content() -> None:
    out, _ = accumulate(u.TextDelta("a"), u.Finish(FinishReason.LENGTH, USAGE))
    assert out[1] == R(
        finish_reason=FinishReason.LENGTH,
        contents=[UsageContent(USAGE)],
        events=[FinishEvent(FinishReason.LENGTH, USAGE)],
    )


def test_a_finish_alone_is_a_whole_llm_call() -> None:
    out, _ = accumulate(u.Finish(FinishReason.STOP))
    assert out == [
        R(
            finish_reason=FinishReason.STOP,
            events=[ResponseStartedEvent(), FinishEvent(FinishReason.STOP)],
        )
    ]


def test_the_first_update_after_a_finish_starts_the_next_llm_call() -> None:
    out, _ = accumulate(
        u.ResponseMetadata("r1", "m"),
        u.Finish(FinishReason.TOOL_CALLS),
        u.ResponseMetadata("r2", "m"),
        u.TextDelta("done"),
        u.Finish(FinishReason.STOP),
    )
    started = [e for r in out for e in r.events if isinstance(e, ResponseStartedEvent)]
    assert started == [ResponseStartedEvent("r1", "m"), ResponseStartedEvent("r2", "m")]
    assert out[2].events == (ResponseStartedEvent("r2", "m"),)
    finished = [e for r in out for e in r.events if isinstance(e, FinishEvent)]
    assert finished == [FinishEvent(FinishReason.TOOL_CALLS), FinishEvent(FinishReason.STOP)]


def test_every_update_variant_maps_to_its_content() -> None:
    provider = {"type": "thinking", "signature": "sig"}
    out, errors = accumulate(
        u.ReasoningDelta("hmm", provider_data=provider),
        u.Uri("https://e.com/a", "text/html"),
        u.Usage(USAGE),
        u.ToolCalled("c", "42"),
        u.ToolCalled("d", error="boom"),
        u.ToolApprovalRequest("c", "rm", {"p": "/"}, "delete"),
    )
    assert errors == []
    assert contents(out) == [
        ReasoningContent("hmm", provider_data=provider),
        UriContent("https://e.com/a", "text/html"),
        UsageContent(USAGE),
        ToolCalledContent("c", "42"),
        ToolCalledContent("d", error="boom"),
    ]
    assert out[-1].contents == ()
    assert out[-1].events == (ToolApprovalRequestEvent("c", "rm", {"p": "/"}, "delete"),)


# ---------------------------------------------------------------- tool calls


def test_seed_parallel_calls_with_interleaved_arguments_stay_apart() -> None:
    out, errors = accumulate(
        u.ToolCallStart("A", "read"),
        u.ToolCallStart("B", "write"),
        u.ToolCallArgs("A", '{"path"'),
        u.ToolCallArgs("B", '{"path"'),
        u.ToolCallArgs("B", ': "b"}'),
        u.ToolCallArgs("A", ': "a"}'),
        u.ToolCallEnd("A"),
        u.ToolCallEnd("B"),
    )
    assert errors == []
    assert [r.contents for r in out] == [
        (ToolCallStartContent("A", "read"),),
        (ToolCallStartContent("B", "write"),),
        (ToolCallArgsContent("A", '{"path"'),),
        (ToolCallArgsContent("B", '{"path"'),),
        (ToolCallArgsContent("B", ': "b"}'),),
        (ToolCallArgsContent("A", ': "a"}'),),
        (ToolCallEndContent("A"),),
        (ToolCallEndContent("B"),),
    ]


def test_duplicate_starts_are_dropped() -> None:
    out, errors = accumulate(
        u.ToolCallStart("A", "read"),
        u.ToolCallStart("A", "read"),
        u.ToolCallArgs("A", "{}"),
        u.ToolCallStart("A", "other_name"),
        u.ToolCallEnd("A"),
    )
    assert errors == []
    assert contents(out) == [
        ToolCallStartContent("A", "read"),
        ToolCallArgsContent("A", "{}"),
        ToolCallEndContent("A"),
    ]


def test_ends_of_unknown_or_ended_calls_are_dropped() -> None:
    out, errors = accumulate(
        u.ToolCallEnd("nope"), u.ToolCallStart("A", "f"), u.ToolCallEnd("A"), u.ToolCallEnd("A")
    )
    assert errors == []
    assert contents(out) == [ToolCallStartContent("A", "f"), ToolCallEndContent("A")]


def test_a_call_id_can_be_reused_in_the_next_llm_call() -> None:
    out, errors = accumulate(
        u.ToolCallStart("call_0", "f"),
        u.ToolCallEnd("call_0"),
        u.Finish(FinishReason.TOOL_CALLS),
        u.ToolCallStart("call_0", "g"),
    )
    assert errors == []
    assert contents(out)[-1] == ToolCallStartContent("call_0", "g")


@pytest.mark.parametrize(
    "updates",
    [
        [u.ToolCallArgs("ghost", "{}")],
        [u.ToolCallStart("A", "f"), u.ToolCallEnd("A"), u.ToolCallArgs("A", "}")],
    ],
    ids=["unknown call", "ended call"],
)
def test_arguments_for_a_call_that_is_not_open_fail_the_stream(updates: list[Any]) -> None:
    out, errors = accumulate(*updates, u.TextDelta("never"))
    assert [type(e) for e in errors] == [ProtocolError]
    assert isinstance(out[-1].contents[0], ErrorContent)
    assert TextContent("never") not in contents(out)


def test_arguments_past_the_limit_fail_the_stream_with_limit_exceeded() -> None:
    out, errors = run(
        [u.ToolCallStart("A", "f"), u.ToolCallArgs("A", "12345"), u.ToolCallArgs("A", "V")],
        ops.accumulate_tool_calls(max_argument_chars=5),
    )
    assert len(errors) == 1
    assert isinstance(errors[0], LimitExceeded)
    assert errors[0].limit == 5
    assert contents(out)[:2] == [ToolCallStartContent("A", "f"), ToolCallArgsContent("A", "12345")]
    assert isinstance(contents(out)[-1], ErrorContent)


def test_a_legacy_delta_is_a_protocol_error_that_names_the_fix() -> None:
    _, errors = accumulate(u.ToolCallDelta(0, id="a", name="f"))
    assert len(errors) == 1
    assert isinstance(errors[0], ProtocolError)
    assert "split_legacy_delta" in str(errors[0])


def test_something_that_is_not_an_update_fails_the_stream() -> None:
    out, errors = accumulate("not an update")
    assert [type(e) for e in errors] == [TypeError]
    assert isinstance(out[-1].contents[0], ErrorContent)


def test_error_update_carries_its_type_into_provider_error() -> None:
    out, errors = accumulate(u.TextDelta("partial"), u.Error("Overloaded", error_type="overloaded"))
    assert len(errors) == 1
    assert isinstance(errors[0], ProviderError)
    assert errors[0].error_type == "overloaded"
    assert [type(c) for c in contents(out)] == [TextContent, ErrorContent]
    assert contents(out)[-1] == ErrorContent("Overloaded")


def test_an_upstream_error_without_message_is_named_by_its_type() -> None:
    out: list[AgentResponseResult] = []
    errors: list[Exception] = []
    reactivex.throw(TimeoutError()).pipe(ops.accumulate_tool_calls()).subscribe(
        out.append, errors.append
    )
    assert contents(out) == [ErrorContent("TimeoutError")]
    assert out[0].events == (ResponseStartedEvent(),)
    assert len(errors) == 1
    assert isinstance(errors[0], TimeoutError)


def test_state_is_per_subscription() -> None:
    piped = reactivex.from_iterable(
        [
            u.ResponseMetadata("r", "m"),
            u.ToolCallStart("A", "f"),
            u.ToolCallArgs("A", "{}"),
            u.ToolCallEnd("A"),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    ).pipe(ops.accumulate_tool_calls())
    first: list[AgentResponseResult] = []
    second: list[AgentResponseResult] = []
    errors: list[Exception] = []
    piped.subscribe(first.append, errors.append)
    piped.subscribe(second.append, errors.append)
    assert errors == []
    assert first == second
    assert first[0].events == (ResponseStartedEvent("r", "m"),)
    assert len(second) == 5


def test_an_empty_argument_delta_after_the_end_is_tolerated() -> None:
    acc = ToolCallAccumulator()
    acc.step(u.ToolCallStart("a", "f"))
    acc.step(u.ToolCallEnd("a"))
    assert acc.step(u.ToolCallArgs("a", "")) == ()


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this error")


def test_an_upstream_error_whose_str_raises_still_ends_the_stream_with_an_error_content() -> None:
    """The ErrorContent names the error's type when str(error) raises; the error itself follows."""
    boom = _Unprintable()
    source = reactivex.concat(reactivex.of(u.TextDelta("so far")), reactivex.throw(boom))
    out, errors = run([], lambda _: source.pipe(ops.accumulate_tool_calls()))
    assert errors == [boom]
    assert out[-1].contents == (ErrorContent("<_Unprintable: str() failed>"),)
