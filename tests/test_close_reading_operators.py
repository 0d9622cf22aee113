"""A close, line-by-line reading of ``rafrx/operators`` and ``rafrx/sources/dialects``.

The angle is a code reviewer's, not a user's. For each branch of the operators and the
dialects, the question was "what input reaches this, and is the result right?". These
tests pin the answers that hold and are worth keeping:

* which key each stage uses: wire index, call id, item id or block index;
* the state each stage resets at a ``Finish`` (ids, open calls, the LLM call);
* the Start / Args / Parsed / End / Calling lifecycle, each step once and in order;
* usage: overwritten within an LLM call and summed across calls;
* operators applied twice, or fused, give what the separate operators give;
* the docstrings' smaller claims (``continued_call`` changes no state, results
  without arguments pass through as the same object, ...).

Everything runs through the public operators, or through ``from_sse`` over
hand-made SSE bodies.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest
import reactivex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    ResponseMetadata,
    TextContent,
    ToolCallArgsContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
    ToolCalledContent,
    ToolCallEndContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
    UsageContent,
)
from rafrx.errors import (
    LimitExceeded,
    ProtocolError,
    ProviderError,
    RafrxError,
    StreamInterrupted,
)
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.operators._split_legacy_delta import LegacyDeltaSplitter
from rafrx.response import AgentResponseResult, FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.sources.dialects._common import error_event, openai_usage, provider_error
from rafrx.sse import ServerSentEvent
from rafrx.tools import ToolApprovalResponse, tool

FR = FinishReason

# --------------------------------------------------------------------------- helpers


def run_results(updates: Iterable[u.Update], *operators: Any) -> list[AgentResponseResult]:
    """The results of ``updates`` through ``operators`` (``convert()`` when none)."""
    chain = operators or (ops.convert(),)
    return reactivex.from_iterable(list(updates)).pipe(*chain, rx.to_list()).run()


def contents(results: Sequence[AgentResponseResult]) -> list[Any]:
    return [c for r in results for c in r.contents]


def kinds(results: Sequence[AgentResponseResult], call_id: str | None = None) -> list[str]:
    """Content class names, without the ``Content`` suffix (of one call when given)."""
    return [
        type(c).__name__.removesuffix("Content")
        for c in contents(results)
        if call_id is None or getattr(c, "call_id", None) == call_id
    ]


def events_of(results: Sequence[AgentResponseResult]) -> list[str]:
    return [type(e).__name__ for r in results for e in r.events]


def outcome(observable: reactivex.Observable[Any]) -> tuple[list[Any], BaseException | None]:
    """Everything ``observable`` emits, and how it ended (synchronous sources)."""
    items: list[Any] = []
    errors: list[BaseException] = []
    observable.subscribe(items.append, errors.append)
    return items, (errors[0] if errors else None)


def chat(*chunks: dict[str, Any] | str) -> bytes:
    return "".join(
        f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks
    ).encode()


def chat_delta(delta: dict[str, Any], finish: str | None = None, **top: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **top}


def anthropic(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


MESSAGE_START = {"type": "message_start", "message": {"id": "msg_1", "model": "claude"}}
MESSAGE_STOP = {"type": "message_stop"}


def message_delta(reason: str | None, **usage: int) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage}


def responses(*events: dict[str, Any]) -> bytes:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()


def updates_of(body: bytes, dialect: str) -> list[u.Update]:
    return from_sse(body, dialect).pipe(rx.to_list()).run()


def response_of(body: bytes, dialect: str) -> Any:
    return from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()


def call(call_id: str, name: str, args: str) -> list[u.Update]:
    return [u.ToolCallStart(call_id, name), u.ToolCallArgs(call_id, args), u.ToolCallEnd(call_id)]


# ------------------------------------------------------------- the reducer machinery


def _unfused(*operators: Any) -> list[Any]:
    """The operators with an identity ``map`` between them: no fusion into one Chain."""
    out: list[Any] = []
    for op in operators:
        out += [op, rx.map(lambda x: x)]
    return out


_frags = st.sampled_from(["", "{", '"x"', ": ", "1", "}", '{"x": 1}', "{}", '"s', 'tr"'])
_legacy = st.builds(
    lambda i, cid, name, a: u.ToolCallDelta(i, id=cid, name=name, arguments_delta=a),
    st.integers(0, 2),
    st.sampled_from(["a", "b", None]),
    st.sampled_from(["f", "g", None]),
    _frags,
)
_plain = st.sampled_from(
    [
        u.TextDelta("t"),
        u.ReasoningDelta("r"),
        u.ResponseMetadata("resp", "m"),
        u.Usage(Usage(1, 1, 2)),
        u.Finish(FR.TOOL_CALLS),
        u.Finish(FR.LENGTH, Usage(2, 3, 5)),
        u.Error("boom"),
    ]
)
_streams = st.lists(st.one_of(_legacy, _legacy, _plain), max_size=14)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_streams, st.booleans())
def test_fused_operators_emit_exactly_what_the_separate_operators_emit(
    updates: list[u.Update], eager: bool
) -> None:
    """Reducer operators piped one after another fuse into one Chain; an identity map
    between them prevents that. Both emit the same items and end the same way, also
    when a stage raises halfway through a batch (Error, a nameless call, a limit)."""
    stages = (
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(max_argument_chars=12),
        ops.parse_args_stream(),
        ops.flush_tool_calls(eager),
    )
    fused = outcome(reactivex.from_iterable(updates).pipe(*stages))
    stages = (
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(max_argument_chars=12),
        ops.parse_args_stream(),
        ops.flush_tool_calls(eager),
    )
    apart = outcome(reactivex.from_iterable(updates).pipe(*_unfused(*stages)))
    # (generated ids differ run to run: compare everything but them)
    assert _shape(fused[0]) == _shape(apart[0])
    assert type(fused[1]) is type(apart[1])
    converted = outcome(reactivex.from_iterable(updates).pipe(ops.convert(eager, 12)))
    assert _shape(converted[0]) == _shape(fused[0])
    assert type(converted[1]) is type(fused[1])


_GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")


def _shape(results: list[AgentResponseResult]) -> list[str]:
    """``results`` as text, each generated call id (random) named by its first place."""
    ids: dict[str, str] = {}

    def alias(match: re.Match[str]) -> str:
        return ids.setdefault(match.group(0), f"<generated {len(ids)}>")

    return [_GENERATED_ID.sub(alias, repr(r)) for r in results]


def test_a_stage_that_raises_after_producing_hands_on_what_it_produced_first() -> None:
    """split_legacy_delta makes Start + Args of one delta; the accumulator accepts the
    Start and raises at the Args (past the limit). The Start still comes out, before
    the ErrorContent, and the call is reported cut short, not run."""
    updates = [u.ToolCallDelta(0, id="c", name="f", arguments_delta='{"long": "xxxxxxxx"}')]
    items, error = outcome(reactivex.from_iterable(updates).pipe(ops.convert(max_argument_chars=5)))
    assert isinstance(error, LimitExceeded)
    assert kinds(items) == ["ToolCallStart", "ToolCallIncomplete", "Error"]


def test_disposing_a_reducer_operator_over_a_subject_stops_its_outputs() -> None:
    upstream: Subject[u.Update] = Subject()
    seen: list[AgentResponseResult] = []
    subscription = upstream.pipe(ops.convert()).subscribe(seen.append)
    upstream.on_next(u.TextDelta("a"))
    subscription.dispose()
    upstream.on_next(u.TextDelta("b"))
    upstream.on_completed()
    assert kinds(seen) == ["Text"]


def test_a_fused_pipe_is_cold_each_subscription_gets_fresh_state() -> None:
    piped = reactivex.from_iterable(
        [u.ToolCallDelta(0, id="a", name="f", arguments_delta="{}"), u.Finish(FR.TOOL_CALLS)]
    ).pipe(ops.convert())
    first = piped.pipe(rx.to_list()).run()
    second = piped.pipe(rx.to_list()).run()
    assert _shape(first) == _shape(second)
    assert [c.call_id for c in contents(second) if isinstance(c, ToolCallingContent)] == ["a"]


# -------------------------------------------------------------- split_legacy_delta


def test_continued_call_changes_no_state_as_its_docstring_says() -> None:
    splitter = LegacyDeltaSplitter()
    splitter.step(u.ToolCallDelta(0, id="a", name="f", arguments_delta="{"))
    delta = u.ToolCallDelta(0, arguments_delta='"k": 1}')
    assert splitter.continued_call(delta) == "a"
    assert splitter.continued_call(delta) == "a"
    # a delta bringing another id alone may start a new call: left to step()
    assert splitter.continued_call(u.ToolCallDelta(0, id="b")) is None
    assert splitter.step(delta) == [u.ToolCallArgs("a", '"k": 1}')]
    assert splitter.finish() == [u.ToolCallEnd("a")]


def test_a_repeated_wire_id_is_made_unique_per_response_and_reset_at_finish() -> None:
    """DeepSeek / GLM / Kimi may give parallel calls one id: ``<id>_2``. After the
    Finish the ids are forgotten: the next LLM call may use ``a`` again."""
    updates = [
        u.ToolCallDelta(0, id="a", name="f", arguments_delta="{}"),
        u.ToolCallDelta(1, id="a", name="f", arguments_delta="{}"),
        u.Finish(FR.TOOL_CALLS),
        u.ToolCallDelta(0, id="a", name="f", arguments_delta="{}"),
        u.Finish(FR.TOOL_CALLS),
    ]
    out = reactivex.from_iterable(updates).pipe(ops.split_legacy_delta(), rx.to_list()).run()
    starts = [x.id for x in out if isinstance(x, u.ToolCallStart)]
    assert starts == ["a", "a_2", "a"]


def test_arguments_before_the_name_are_held_then_sent_as_one_fragment() -> None:
    updates = [
        u.ToolCallDelta(0, id="c", arguments_delta='{"x"'),
        u.TextDelta("meanwhile"),
        u.ToolCallDelta(0, arguments_delta=": 1}"),
        u.ToolCallDelta(0, name="f"),
        u.Finish(FR.TOOL_CALLS),
    ]
    out = reactivex.from_iterable(updates).pipe(ops.split_legacy_delta(), rx.to_list()).run()
    assert out == [
        u.TextDelta("meanwhile"),
        u.ToolCallStart("c", "f"),
        u.ToolCallArgs("c", '{"x": 1}'),
        u.ToolCallEnd("c"),
        u.Finish(FR.TOOL_CALLS),
    ]


def test_calls_end_in_start_order_not_index_order() -> None:
    updates = [
        u.ToolCallDelta(1, id="second_index", name="f", arguments_delta="{}"),
        u.ToolCallDelta(0, id="first_index", name="g", arguments_delta="{}"),
        u.Finish(FR.TOOL_CALLS),
    ]
    out = reactivex.from_iterable(updates).pipe(ops.split_legacy_delta(), rx.to_list()).run()
    ends = [x.id for x in out if isinstance(x, u.ToolCallEnd)]
    assert ends == ["second_index", "first_index"]
    assert isinstance(out[-1], u.Finish)


def test_a_call_extra_named_by_index_waits_for_its_call_and_then_names_it_by_id() -> None:
    extra = u.ReasoningDelta(
        "", provider_data={"type": "tool_call_extra", "index": 0, "extra_content": {"s": 1}}
    )
    updates = [extra, u.ToolCallDelta(0, id="c1", name="f"), u.Finish(FR.TOOL_CALLS)]
    out = reactivex.from_iterable(updates).pipe(ops.split_legacy_delta(), rx.to_list()).run()
    assert out[0] == u.ToolCallStart("c1", "f")
    assert out[1] == u.ReasoningDelta(
        "", provider_data={"type": "tool_call_extra", "extra_content": {"s": 1}, "call_id": "c1"}
    )


def test_an_upstream_error_ends_no_call() -> None:
    source = reactivex.concat(
        reactivex.from_iterable([u.ToolCallDelta(0, id="c", name="f", arguments_delta="{}")]),
        reactivex.throw(ProviderError("down")),
    )
    items, error = outcome(source.pipe(ops.split_legacy_delta()))
    assert isinstance(error, ProviderError)
    assert not any(isinstance(x, u.ToolCallEnd) for x in items)


def test_a_nameless_call_with_arguments_is_a_protocol_error_not_a_lost_call() -> None:
    updates = [u.ToolCallDelta(0, id="c", arguments_delta='{"x": 1}'), u.Finish(FR.TOOL_CALLS)]
    items, error = outcome(reactivex.from_iterable(updates).pipe(ops.convert()))
    assert isinstance(error, ProtocolError)
    assert "never a name" in str(error)
    assert kinds(items) == ["Error"]


# ------------------------------------------------------------ accumulate_tool_calls


def test_each_llm_call_is_bracketed_by_one_start_and_one_finish_event() -> None:
    updates = [
        u.ResponseMetadata("r1", "m"),
        u.TextDelta("a"),
        u.Finish(FR.TOOL_CALLS, Usage(1, 2, 3)),
        u.TextDelta("b"),
        u.Finish(FR.STOP),
    ]
    results = run_results(updates, ops.accumulate_tool_calls())
    assert events_of(results) == [
        "ResponseStartedEvent",
        "FinishEvent",
        "ResponseStartedEvent",
        "FinishEvent",
    ]
    finish = results[2]
    assert finish.finish_reason is FR.TOOL_CALLS
    assert finish.contents == (UsageContent(Usage(1, 2, 3), meta=ResponseMetadata("r1", "m")),)
    assert finish.events == (FinishEvent(FR.TOOL_CALLS, Usage(1, 2, 3)),)


def test_a_finish_alone_is_an_llm_call_with_both_events_in_one_result() -> None:
    (result,) = run_results([u.Finish(FR.STOP)], ops.accumulate_tool_calls())
    assert [type(e) for e in result.events] == [ResponseStartedEvent, FinishEvent]
    assert result.finish_reason is FR.STOP


def test_a_duplicate_start_and_an_unknown_end_are_dropped() -> None:
    updates = [
        u.ToolCallStart("c", "f"),
        u.ToolCallStart("c", "f"),
        u.ToolCallEnd("nobody"),
        u.ToolCallArgs("c", "{}"),
        u.ToolCallEnd("c"),
        u.ToolCallEnd("c"),
    ]
    results = run_results(updates, ops.accumulate_tool_calls())
    assert kinds(results) == ["ToolCallStart", "ToolCallArgs", "ToolCallEnd"]


def test_arguments_for_a_call_that_ended_fail_the_stream_with_an_error_content() -> None:
    updates = [*call("c", "f", "{}"), u.ToolCallArgs("c", "more")]
    items, error = outcome(reactivex.from_iterable(updates).pipe(ops.accumulate_tool_calls()))
    assert isinstance(error, ProtocolError)
    assert isinstance(items[-1].contents[-1], ErrorContent)


def test_an_empty_argument_fragment_after_the_end_is_ignored() -> None:
    """Some servers send an empty delta after the end: no error, no content."""
    updates = [*call("c", "f", "{}"), u.ToolCallArgs("c", "")]
    results = run_results(updates, ops.accumulate_tool_calls())
    assert kinds(results) == ["ToolCallStart", "ToolCallArgs", "ToolCallEnd"]


def test_the_same_call_id_starts_again_in_the_next_llm_call() -> None:
    updates = [
        *call("c", "f", '{"n": 1}'),
        u.Finish(FR.TOOL_CALLS),
        *call("c", "f", '{"n": 2}'),
        u.Finish(FR.TOOL_CALLS),
    ]
    results = run_results(updates, ops.convert(eager=True))
    calls = [c for c in contents(results) if isinstance(c, ToolCallingContent)]
    assert [c.arguments for c in calls] == [{"n": 1}, {"n": 2}]


def test_an_error_update_carries_its_type_to_the_error_and_the_error_content() -> None:
    items, error = outcome(
        reactivex.from_iterable([u.TextDelta("a"), u.Error("slow down", error_type="rate")]).pipe(
            ops.convert()
        )
    )
    assert isinstance(error, ProviderError)
    assert error.error_type == "rate"
    assert items[-1].contents == (ErrorContent("slow down"),)


# -------------------------------------------------------------- parse_args_stream


def test_results_without_arguments_pass_the_parser_as_the_same_object() -> None:
    result = AgentResponseResult("r", "m", None, (TextContent("hi"),))
    out: list[AgentResponseResult] = []
    reactivex.of(result).pipe(ops.parse_args_stream()).subscribe(out.append)
    assert out[0] is result


def test_parsed_and_progress_contents_carry_the_fragments_metadata() -> None:
    updates = [
        u.ResponseMetadata("r1", "m1"),
        u.ToolCallStart("c", "f"),
        u.ToolCallArgs("c", '{"path": "a'),
        u.ToolCallArgs("c", 'b", "n": 1}'),
    ]
    results = run_results(updates)
    parsed = [
        c
        for c in contents(results)
        if isinstance(c, ToolCallArgsParsedContent | ToolCallArgsProgressContent)
    ]
    assert {c.meta for c in parsed} == {ResponseMetadata("r1", "m1")}
    assert [(c.name, c.value) for c in parsed if isinstance(c, ToolCallArgsParsedContent)] == [
        ("path", "ab"),
        ("n", 1),
    ]


# --------------------------------------------------------------- flush_tool_calls


def test_the_lazy_flush_is_in_start_order_whatever_order_the_calls_end() -> None:
    updates = [
        u.ToolCallStart("a", "f"),
        u.ToolCallStart("b", "g"),
        u.ToolCallArgs("b", "{}"),
        u.ToolCallEnd("b"),
        u.ToolCallArgs("a", "{}"),
        u.ToolCallEnd("a"),
        u.Finish(FR.TOOL_CALLS),
    ]
    results = run_results(updates)
    assert [c.call_id for c in results[-1].contents] == ["a", "b"]
    assert results[-1].finish_reason is None
    assert not results[-1].events


@pytest.mark.parametrize(
    ("reason", "expected"),
    [(FR.STOP, ToolCallingContent), (FR.LENGTH, ToolCallIncompleteContent)],
)
def test_eagerly_invalid_arguments_wait_for_the_finish_to_tell_what_they_are(
    reason: FinishReason, expected: type
) -> None:
    updates = [*call("c", "f", '{"x": '), u.TextDelta("after"), u.Finish(reason)]
    results = run_results(updates, ops.convert(eager=True))
    assert kinds(results, "c") == [
        "ToolCallStart",
        "ToolCallArgs",
        "ToolCallEnd",
        expected.__name__.removesuffix("Content"),
    ]
    flushed = contents(results)[-1]
    assert isinstance(flushed, expected)
    assert results.index(next(r for r in results if r.finish_reason)) < len(results) - 1


def test_a_failing_stream_cuts_its_ended_calls_before_the_error_content() -> None:
    source = reactivex.concat(
        reactivex.from_iterable([*call("a", "f", "{}"), u.ToolCallStart("b", "g")]),
        reactivex.throw(ProviderError("down")),
    )
    items, error = outcome(source.pipe(ops.convert()))
    assert isinstance(error, ProviderError)
    tail = contents(items)[-3:]
    assert [type(c) for c in tail] == [
        ToolCallIncompleteContent,
        ToolCallIncompleteContent,
        ErrorContent,
    ]
    ended, open_call = tail[0], tail[1]
    assert ended.error is not None
    assert "never run" in ended.error
    assert open_call.call_id == "b"


@pytest.mark.parametrize("first_eager", [False, True])
@pytest.mark.parametrize("second_eager", [False, True])
@pytest.mark.parametrize("args", ["{}", '{"x": ', "cut"])
def test_flush_applied_after_convert_hands_each_call_over_once(
    first_eager: bool, second_eager: bool, args: str
) -> None:
    body: list[u.Update] = [u.ToolCallStart("c", "f")]
    if args == "cut":  # never ended: cut short
        body += [u.ToolCallArgs("c", '{"x"'), u.Finish(FR.LENGTH)]
    else:
        body += [u.ToolCallArgs("c", args), u.ToolCallEnd("c"), u.Finish(FR.TOOL_CALLS)]
    body += [u.ToolCallStart("d", "g"), u.ToolCallArgs("d", "{}"), u.ToolCallEnd("d")]
    body.append(u.Finish(FR.TOOL_CALLS))
    results = run_results(
        body, ops.convert(eager=first_eager), ops.flush_tool_calls(eager=second_eager)
    )
    flushed = [
        c.call_id
        for c in contents(results)
        if isinstance(c, ToolCallingContent | ToolCallIncompleteContent)
    ]
    assert sorted(flushed) == ["c", "d"]


# ----------------------------------------------------------------------- aggregate


def test_usage_the_last_report_within_a_call_counts_and_calls_are_summed() -> None:
    updates = [
        u.Usage(Usage(10, 1, 11)),
        u.Usage(Usage(10, 5, 15)),  # cumulative: replaces the first
        u.Finish(FR.TOOL_CALLS),
        u.Finish(FR.STOP, Usage(20, 2, 22)),
    ]
    response = reactivex.from_iterable(updates).pipe(ops.convert(), ops.aggregate()).run()
    assert response.usage == Usage(30, 7, 37)


@pytest.mark.parametrize(
    ("make_error", "reason"),
    [(lambda: ProviderError("down"), FR.ERROR), (lambda: StreamInterrupted("cut"), None)],
)
def test_an_error_of_the_next_llm_call_never_reports_the_earlier_finish(
    make_error: Callable[[], RafrxError], reason: FinishReason | None
) -> None:
    """With one convert() per LLM call (as the agent does), an error of the next call
    opens that call, which did not finish: the partial's finish reason is ERROR for a
    provider's error, else None, never the earlier call's TOOL_CALLS."""
    error = make_error()  # (one per run: aggregate() sets its .partial)
    finished = [u.TextDelta("a"), u.Finish(FR.TOOL_CALLS)]
    first = reactivex.from_iterable(finished).pipe(ops.convert())
    results = reactivex.concat(first, reactivex.throw(error).pipe(ops.convert()))
    with pytest.raises(type(error)) as caught:
        results.pipe(ops.aggregate()).run()
    partial = caught.value.partial
    assert partial.finish_reason is reason
    assert partial.text == "a"
    assert partial.interrupted is True


@pytest.mark.parametrize(
    "make_error", [lambda: ProviderError("down"), lambda: StreamInterrupted("cut")]
)
def test_an_error_right_after_a_finish_in_one_convert_keeps_that_finish(
    make_error: Callable[[], RafrxError],
) -> None:
    """Within one convert(), an error right after a ``Finish`` is the finished LLM call's
    (a stream that stalls or breaks after its finish reason, before ``[DONE]``): the
    partial keeps that finish reason. (Before session 11 it opened a call of its own,
    and the partial had none.)"""
    error = make_error()
    finished = [u.TextDelta("a"), u.Finish(FR.TOOL_CALLS)]
    source = reactivex.concat(reactivex.from_iterable(finished), reactivex.throw(error))
    with pytest.raises(type(error)) as caught:
        source.pipe(ops.convert(), ops.aggregate()).run()
    partial = caught.value.partial
    assert partial.finish_reason is FR.TOOL_CALLS
    assert partial.text == "a"
    assert partial.interrupted is True


def test_an_empty_final_answer_still_ends_the_transcript() -> None:
    updates = [*call("c", "f", "{}"), u.Finish(FR.TOOL_CALLS)]
    first = reactivex.from_iterable(updates).pipe(ops.convert())
    called = reactivex.of(AgentResponseResult(contents=(ToolCalledContent("c", result="ok"),)))
    last = reactivex.from_iterable([u.Finish(FR.STOP)]).pipe(ops.convert())
    response = reactivex.concat(first, called, last).pipe(ops.aggregate()).run()
    roles = [(m.role.value, m.content) for m in response.turn_transcript]
    assert roles == [("assistant", ""), ("tool", "ok"), ("assistant", "")]
    assert response.turn_transcript[0].tool_calls[0].id == "c"


def test_tool_messages_follow_start_order_and_a_cut_call_stays_out_of_the_message() -> None:
    updates = [
        *call("a", "f", "{}"),
        *call("b", "f", "{}"),
        u.ToolCallStart("cut", "f"),
        u.ToolCallArgs("cut", '{"x'),
        u.Finish(FR.LENGTH),
    ]
    results = reactivex.from_iterable(updates).pipe(ops.convert())
    answers = reactivex.from_iterable(
        [
            AgentResponseResult(contents=(ToolCalledContent("b", result="B"),)),
            AgentResponseResult(contents=(ToolCalledContent("a", result="A"),)),
        ]
    )
    response = reactivex.concat(results, answers).pipe(ops.aggregate()).run()
    assert [c.id for c in response.tool_calls] == ["a", "b", "cut"]
    assert [c.complete for c in response.tool_calls] == [True, True, False]
    assistant = response.turn_transcript[0]
    assert [c.id for c in assistant.tool_calls] == ["a", "b"]
    assert [m.content for m in response.tool_messages] == ["A", "B"]


# ------------------------------------------------------------------- execute_tools

_RUNS: list[str] = []


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    _RUNS.append(path)
    return f"deleted {path}"


@tool
def echo(text: str) -> str:
    """Say it back."""
    _RUNS.append(text)
    return text


def _calling(call_id: str, name: str, arguments: dict[str, Any]) -> AgentResponseResult:
    content = ToolCallingContent(call_id, name, arguments, json.dumps(arguments))
    return AgentResponseResult("resp", "m", None, (content,))


@pytest.mark.asyncio
async def test_a_call_id_runs_once_per_llm_call_and_again_in_the_next_one() -> None:
    _RUNS.clear()
    items = [
        _calling("c1", "echo", {"text": "one"}),
        _calling("c1", "echo", {"text": "again, same call"}),
        AgentResponseResult("resp_2", "m", None, (), (ResponseStartedEvent(),)),
        _calling("c1", "echo", {"text": "two"}),
    ]
    out = await reactivex.from_iterable(items).pipe(ops.execute_tools([echo]), rx.to_list())
    assert sorted(_RUNS) == ["one", "two"]
    assert out[: len(items)] == items  # every result passes through unchanged


@pytest.mark.asyncio
async def test_an_answer_given_before_its_request_counts() -> None:
    """The UI may answer while the request is on its way: the answer waits for it."""
    _RUNS.clear()
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    items: list[AgentResponseResult] = []
    done = asyncio.get_running_loop().create_future()
    upstream.pipe(ops.execute_tools([delete], answers)).subscribe(
        items.append, done.set_exception, lambda: done.set_result(None)
    )
    answers.on_next(ToolApprovalResponse("c1", True))
    upstream.on_next(_calling("c1", "delete", {"path": "a"}))
    upstream.on_completed()
    await asyncio.wait_for(done, 5)
    assert _RUNS == ["a"]
    assert [type(e) for r in items for e in r.events] == [ToolApprovalRequestEvent]


@pytest.mark.asyncio
async def test_an_answer_to_another_call_denies_saying_so() -> None:
    _RUNS.clear()

    def approver(event: ToolApprovalRequestEvent) -> ToolApprovalResponse:
        return ToolApprovalResponse("someone_else", True)

    items = await reactivex.of(_calling("c1", "delete", {"path": "a"})).pipe(
        ops.execute_tools([delete], approver), rx.to_list()
    )
    (called,) = [c for r in items for c in r.contents if isinstance(c, ToolCalledContent)]
    assert _RUNS == []
    assert called.error is not None
    assert "'someone_else'" in called.error


# ------------------------------------------------------------- the OpenAI chat dialect


def test_chat_usage_after_the_finish_chunk_goes_on_the_finish_once() -> None:
    body = chat(
        chat_delta({"content": "Hi"}, id="c1", model="m"),
        chat_delta({}, "stop"),
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
        "[DONE]",
    )
    updates = updates_of(body, "openai-chat")
    assert updates[-1] == u.Finish(FR.STOP, Usage(3, 1, 4))
    assert not any(isinstance(x, u.Usage) for x in updates)


def test_chat_a_finish_reason_without_done_is_complete_done_without_one_is_other() -> None:
    no_done = chat(chat_delta({"content": "Hi"}, "length"))
    assert updates_of(no_done, "openai-chat")[-1] == u.Finish(FR.LENGTH)
    no_reason = chat(chat_delta({"content": "Hi"}), "[DONE]")
    assert updates_of(no_reason, "openai-chat")[-1] == u.Finish(FR.OTHER)


def test_chat_index_less_entries_follow_their_id_then_the_last_call() -> None:
    """Without an index: a name or a new id starts a call at the next free index, a
    known id goes back to its call, an entry with neither continues the last one."""
    body = chat(
        chat_delta({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{"}}]}),
        chat_delta({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
        chat_delta({"tool_calls": [{"id": "a", "function": {"arguments": '"k": 1'}}]}),
        chat_delta({"tool_calls": [{"function": {"arguments": "}"}}]}),
        chat_delta({}, "tool_calls"),
        "[DONE]",
    )
    response = response_of(body, "openai-chat")
    assert [(c.id, c.arguments) for c in response.tool_calls] == [("a", {"k": 1}), ("b", {})]


def test_chat_the_typed_fast_path_and_the_general_path_agree() -> None:
    """``"annotations": []`` does not fit the typed chunk, so the same chunk goes the
    general way: both give the same updates."""
    delta = {
        "reasoning_content": "think",
        "content": "Hi",
        "tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}],
    }
    typed = chat(chat_delta(delta, id="r", model="m"), chat_delta({}, "tool_calls"), "[DONE]")
    general = chat(
        chat_delta({**delta, "annotations": []}, id="r", model="m"),
        chat_delta({}, "tool_calls"),
        "[DONE]",
    )
    assert updates_of(typed, "openai-chat") == updates_of(general, "openai-chat")


def test_chat_only_choice_zero_is_read() -> None:
    body = chat(
        {
            "choices": [
                {"index": 1, "delta": {"content": "other"}, "finish_reason": "length"},
                {"index": 0, "delta": {"content": "mine"}, "finish_reason": "stop"},
            ]
        },
        "[DONE]",
    )
    assert updates_of(body, "openai-chat") == [u.TextDelta("mine"), u.Finish(FR.STOP)]


# ------------------------------------------------------------ the Anthropic dialect


def test_anthropic_usage_is_cumulative_later_reports_overwrite_not_add() -> None:
    body = anthropic(
        {
            "type": "message_start",
            "message": {"id": "m", "usage": {"input_tokens": 10, "output_tokens": 1}},
        },
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Hi"}),
        block_stop(0),
        message_delta(None, output_tokens=5),
        message_delta("end_turn", output_tokens=7),
        MESSAGE_STOP,
    )
    assert updates_of(body, "anthropic")[-1] == u.Finish(FR.STOP, Usage(10, 7, 17))


def test_anthropic_a_tool_use_start_input_with_no_deltas_is_the_arguments() -> None:
    body = anthropic(
        MESSAGE_START,
        block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {"k": 1}}),
        block_stop(0),
        message_delta("tool_use"),
        MESSAGE_STOP,
    )
    (tool_call,) = response_of(body, "anthropic").tool_calls
    assert tool_call.arguments == {"k": 1}


def test_anthropic_a_server_tool_start_input_is_replaced_by_its_streamed_input() -> None:
    """As anthropic-sdk's accumulate_event does for every tool-input block."""
    body = anthropic(
        MESSAGE_START,
        block_start(
            0, {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"q": "x"}}
        ),
        block_delta(0, {"type": "input_json_delta", "partial_json": '{"q": "y"}'}),
        block_stop(0),
        message_delta("end_turn"),
        MESSAGE_STOP,
    )
    kept = [
        x.provider_data
        for x in updates_of(body, "anthropic")
        if isinstance(x, u.ReasoningDelta) and x.provider_data
    ]
    assert kept == [
        {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"q": "y"}}
    ]


def test_anthropic_a_block_stopped_twice_ends_its_call_once() -> None:
    body = anthropic(
        MESSAGE_START,
        block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {}}),
        block_delta(0, {"type": "input_json_delta", "partial_json": "{}"}),
        block_stop(0),
        block_stop(0),
        block_delta(0, {"type": "input_json_delta", "partial_json": "late"}),
        message_delta("tool_use"),
        MESSAGE_STOP,
    )
    updates = updates_of(body, "anthropic")
    assert [x for x in updates if isinstance(x, u.ToolCallEnd | u.ToolCallArgs)] == [
        u.ToolCallArgs("t", "{}"),
        u.ToolCallEnd("t"),
    ]


def test_anthropic_a_tool_use_block_cut_by_max_tokens_is_never_run() -> None:
    body = anthropic(
        MESSAGE_START,
        block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {}}),
        block_delta(0, {"type": "input_json_delta", "partial_json": '{"path": "/tm'}),
        message_delta("max_tokens", output_tokens=9),
        MESSAGE_STOP,
    )
    response = response_of(body, "anthropic")
    assert response.finish_reason is FR.LENGTH
    (cut,) = response.tool_calls
    assert cut.complete is False
    assert cut.partial_value == {"path": "/tm"}
    assert response.turn_transcript[-1].tool_calls is None


def test_anthropic_the_signature_delta_goes_into_the_whole_thinking_block() -> None:
    body = anthropic(
        MESSAGE_START,
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Hmm"}),
        block_delta(0, {"type": "thinking_delta", "thinking": "."}),
        block_delta(0, {"type": "signature_delta", "signature": "s"}),
        block_stop(0),
        message_delta("end_turn"),
        MESSAGE_STOP,
    )
    updates = updates_of(body, "anthropic")
    assert [x for x in updates if isinstance(x, u.ReasoningDelta)] == [
        u.ReasoningDelta("Hmm"),
        u.ReasoningDelta("."),
        u.ReasoningDelta(
            "", provider_data={"type": "thinking", "thinking": "Hmm.", "signature": "s"}
        ),
    ]


def test_anthropic_a_stop_reason_without_message_stop_is_complete() -> None:
    body = anthropic(MESSAGE_START, message_delta("refusal", output_tokens=1))
    assert updates_of(body, "anthropic")[-1] == u.Finish(FR.CONTENT_FILTER, Usage(0, 1, 1))


# ----------------------------------------------------------- the Responses dialect

CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "gpt"}}


def fc_added(item_id: str, call_id: str, name: str = "f", index: int = 0) -> dict[str, Any]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name}
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def fc_done(item_id: str, call_id: str, args: str, index: int = 0) -> dict[str, Any]:
    item = {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": "f",
        "arguments": args,
    }
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def args_delta(item_id: str, delta: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "item_id": item_id, "delta": delta}


def completed(**response: Any) -> dict[str, Any]:
    return {"type": "response.completed", "response": response}


def test_responses_arguments_go_by_item_id_and_a_repeated_call_id_is_another_call() -> None:
    body = responses(
        CREATED,
        fc_added("fc_1", "call_1", index=0),
        fc_added("fc_2", "call_1", index=1),
        args_delta("fc_2", '{"n": 2}'),
        args_delta("fc_1", '{"n": 1}'),
        fc_done("fc_1", "call_1", '{"n": 1}', 0),
        fc_done("fc_2", "call_1", '{"n": 2}', 1),
        completed(),
    )
    response = response_of(body, "openai-responses")
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call_1", {"n": 1}),
        ("call_1_2", {"n": 2}),
    ]
    assert response.finish_reason is FR.TOOL_CALLS


def test_responses_the_first_of_the_two_done_events_ends_the_call_once() -> None:
    body = responses(
        CREATED,
        fc_added("fc_1", "call_1"),
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "arguments": '{"k": 1}',
        },
        fc_done("fc_1", "call_1", '{"k": 1}'),
        completed(),
    )
    updates = updates_of(body, "openai-responses")
    assert [x for x in updates if isinstance(x, u.ToolCallArgs | u.ToolCallEnd)] == [
        u.ToolCallArgs("call_1", '{"k": 1}'),
        u.ToolCallEnd("call_1"),
    ]


def test_responses_incomplete_leaves_an_unfinished_call_cut_short() -> None:
    body = responses(
        CREATED,
        fc_added("fc_1", "call_1"),
        args_delta("fc_1", '{"k": '),
        {
            "type": "response.incomplete",
            "response": {
                "incomplete_details": {"reason": "max_output_tokens"},
                "usage": {"input_tokens": 3, "output_tokens": 4},
            },
        },
    )
    response = response_of(body, "openai-responses")
    assert response.finish_reason is FR.LENGTH
    assert response.usage == Usage(3, 4, 7)
    (cut,) = response.tool_calls
    assert cut.complete is False


def test_responses_a_call_only_in_the_final_output_is_delivered_whole() -> None:
    item = {"type": "function_call", "id": "fc_9", "call_id": "c9", "name": "f", "arguments": "{}"}
    body = responses(CREATED, completed(output=[item]))
    response = response_of(body, "openai-responses")
    assert [(c.id, c.arguments) for c in response.tool_calls] == [("c9", {})]
    assert response.finish_reason is FR.TOOL_CALLS


# --------------------------------------------------------------- the shared helpers


def test_error_event_reads_anthropics_nested_error_object() -> None:
    event = ServerSentEvent(
        "error",
        json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}}),
    )
    error = error_event(event)
    assert (error.message, error.error_type, error.retryable) == ("Busy", "overloaded_error", True)


@pytest.mark.parametrize(
    ("payload", "retryable"),
    [
        ({"type": "insufficient_quota", "code": 429}, False),
        ({"code": "rate_limit_exceeded"}, True),
        ({"type": "invalid_request_error", "code": 400}, False),
        ({"message": "x", "status_code": 503}, True),
    ],
)
def test_provider_error_retryable(payload: dict[str, Any], retryable: bool) -> None:
    assert provider_error(ServerSentEvent(data="{}"), payload).retryable is retryable


def test_openai_usage_keeps_a_zero_detail_and_computes_a_missing_total() -> None:
    usage = openai_usage(
        {
            "prompt_tokens": 5,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 1},
        },
        prompt="prompt",
        completion="completion",
    )
    assert usage == Usage(5, 2, 7, reasoning_tokens=1, cached_tokens=0)


def test_a_kind_listing_helper_sanity() -> None:
    """The helpers above see what they claim (a lifecycle read off convert())."""
    updates = [u.ToolCallDelta(0, id="c", name="f", arguments_delta='{"a": 1}'), u.Finish(FR.STOP)]
    assert kinds(run_results(updates), "c") == [
        "ToolCallStart",
        "ToolCallArgs",
        "ToolCallArgsParsed",
        "ToolCallEnd",
        "ToolCalling",
    ]
    assert isinstance(contents(run_results(updates))[1], ToolCallArgsContent)
    assert isinstance(contents(run_results(updates))[3], ToolCallEndContent)
    assert isinstance(contents(run_results(updates))[0], ToolCallStartContent)
