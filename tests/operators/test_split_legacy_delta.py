"""``split_legacy_delta()``: index-keyed ``ToolCallDelta`` → ``ToolCallStart/Args/End``."""

from __future__ import annotations

import json
from typing import Any

import pytest
import reactivex
from reactivex.testing import ReactiveTest

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import ProtocolError
from rafrx.operators._split_legacy_delta import LegacyDeltaSplitter
from rafrx.response import FinishReason, Usage
from tests.operators import marble, records, run, subscribed

D = u.ToolCallDelta
S = u.ToolCallStart
A = u.ToolCallArgs
E = u.ToolCallEnd
FINISH = u.Finish(FinishReason.TOOL_CALLS)


def split(*updates: u.AgentResponseUpdate) -> list[Any]:
    out, errors = run(updates, ops.split_legacy_delta())
    assert errors == []
    return out


# ---------------------------------------------------------------- marbles

LOOKUP: dict[str, Any] = {
    "d": D(0, id="a", name="f", arguments_delta="{"),
    "e": D(0, arguments_delta="}"),
    "t": u.TextDelta("hi"),
    "F": FINISH,
    "s": S("a", "f"),
    "x": A("a", "{"),
    "y": A("a", "}"),
    "z": E("a"),
}


def test_marble_one_call_then_text_then_finish() -> None:
    messages, subscriptions = marble(ops.split_legacy_delta(), "-d-----e-t-F-----|", LOOKUP)
    assert messages == records("-(s,x)-y-t-(z,F)-|", LOOKUP)
    assert subscriptions == [subscribed(200, 370)]


def test_marble_open_calls_end_at_completion_without_finish() -> None:
    messages, subscriptions = marble(ops.split_legacy_delta(), "-d-----e-|", LOOKUP)
    assert messages == records("-(s,x)-y-(z,|)", LOOKUP)
    assert subscriptions == [subscribed(200, 290)]


def test_marble_upstream_error_is_forwarded_without_ending_calls() -> None:
    boom = ConnectionResetError("reset")
    messages, subscriptions = marble(ops.split_legacy_delta(), "-d-----#", LOOKUP, error=boom)
    assert messages == records("-(s,x)-#", LOOKUP, error=boom)
    assert messages[-1].value.exception is boom
    assert subscriptions == [subscribed(200, 270)]


def test_marble_unsubscribing_disposes_upstream_and_stops_output() -> None:
    messages, subscriptions = marble(
        ops.split_legacy_delta(), "-d-----e-t-F-|", LOOKUP, disposed=275
    )
    assert messages == records("-(s,x)-y", LOOKUP)
    assert subscriptions == [subscribed(200, 275)]


def test_nothing_is_emitted_after_the_source_completes() -> None:
    scheduler = reactivex.testing.TestScheduler()
    xs = scheduler.create_hot_observable(
        ReactiveTest.on_next(210, LOOKUP["t"]),
        ReactiveTest.on_completed(220),
        ReactiveTest.on_next(230, LOOKUP["t"]),
    )
    observer = scheduler.start(lambda: xs.pipe(ops.split_legacy_delta()))
    assert observer.messages == [
        ReactiveTest.on_next(210, LOOKUP["t"]),
        ReactiveTest.on_completed(220),
    ]
    assert xs.subscriptions == [subscribed(200, 220)]


# ---------------------------------------------------------------- semantics


def test_other_updates_pass_unchanged() -> None:
    others = [
        u.ResponseMetadata("r", "m"),
        u.TextDelta("a"),
        u.ReasoningDelta("b"),
        u.ToolCallStart("x", "f"),
        u.ToolCallArgs("x", "{}"),
        u.ToolCallEnd("x"),
        u.ToolCalled("x", "ok"),
        u.ToolApprovalRequest("x", "f", {}, ""),
        u.Uri("https://e.com"),
        u.Usage(Usage(1, 1, 2)),
        u.Error("boom"),
    ]
    out = split(*others)
    assert out == others
    assert all(a is b for a, b in zip(out, others, strict=True))


def test_whole_call_in_one_chunk() -> None:
    assert split(D(0, id="a", name="f", arguments_delta='{"q": 1}'), FINISH) == [
        S("a", "f"),
        A("a", '{"q": 1}'),
        E("a"),
        FINISH,
    ]


def test_arguments_before_the_name_are_held_back_until_the_start() -> None:
    out = split(
        D(0, id="a", arguments_delta='{"pa'),
        D(0, arguments_delta='th": '),
        D(0, name="read", arguments_delta='"x"'),
        D(0, arguments_delta="}"),
    )
    assert out[0] == S("a", "read")
    assert all(type(x) is A for x in out[1:-1])
    assert "".join(x.args_delta for x in out[1:-1]) == '{"path": "x"}'
    assert out[-1] == E("a")


def test_the_id_is_the_first_non_empty_id_seen_by_the_start() -> None:
    out = split(D(0, id="", arguments_delta="{"), D(0, id="late"), D(0, name="f"), D(0, id=""))
    assert out == [S("late", "f"), A("late", "{"), E("late")]


def test_empty_and_missing_continuation_ids_continue_the_call() -> None:
    out = split(
        D(0, id="a", name="f", arguments_delta="{"),
        D(0, id="", arguments_delta='"k"'),
        D(0, id=None, arguments_delta=": 1"),
        D(0, id="a", arguments_delta="}"),
    )
    assert out == [S("a", "f"), A("a", "{"), A("a", '"k"'), A("a", ": 1"), A("a", "}"), E("a")]


def test_repeated_name_on_a_continuation_does_not_restart_the_call() -> None:
    out = split(D(0, id="a", name="f"), D(0, name="f", arguments_delta="{}"))
    assert out == [S("a", "f"), A("a", "{}"), E("a")]


def test_empty_argument_deltas_give_no_args() -> None:
    assert split(D(0, id="a", name="f"), D(0), D(0, arguments_delta="")) == [S("a", "f"), E("a")]


def test_non_contiguous_indexes_are_separate_calls() -> None:
    out = split(
        D(3, id="a", name="f", arguments_delta="{"),
        D(7, id="b", name="g", arguments_delta="["),
        D(3, arguments_delta="}"),
        D(7, arguments_delta="]"),
        FINISH,
    )
    assert out == [
        S("a", "f"),
        A("a", "{"),
        S("b", "g"),
        A("b", "["),
        A("a", "}"),
        A("b", "]"),
        E("a"),
        E("b"),
        FINISH,
    ]


def test_a_reused_index_with_a_new_id_starts_a_new_call() -> None:
    out = split(
        D(0, id="a", name="f", arguments_delta="{}"),
        D(0, id="b", name="g", arguments_delta="{"),
        D(0, arguments_delta="}"),
        FINISH,
    )
    assert out == [S("a", "f"), A("a", "{}"), S("b", "g"), A("b", "{"), A("b", "}"),
                   E("a"), E("b"), FINISH]  # fmt: skip


def test_index_zero_for_every_parallel_call_still_gives_separate_calls() -> None:
    out = split(
        D(0, id="a", name="f", arguments_delta='{"x": 1}'),
        D(0, id="b", name="f", arguments_delta='{"x": 2}'),
        D(0, id="c", name="g", arguments_delta="{}"),
    )
    starts = [x for x in out if type(x) is S]
    assert starts == [S("a", "f"), S("b", "f"), S("c", "g")]
    assert out[-3:] == [E("a"), E("b"), E("c")]


def test_ends_come_just_before_finish_in_start_order() -> None:
    out = split(
        D(5, id="late_index", name="f"),
        D(1, id="early_index", name="g"),
        u.TextDelta("x"),
        FINISH,
        u.TextDelta("after"),
    )
    assert out[-4:] == [E("late_index"), E("early_index"), FINISH, u.TextDelta("after")]


def test_every_call_ends_exactly_once() -> None:
    out = split(D(0, id="a", name="f"), FINISH, u.Finish(FinishReason.STOP))
    assert out.count(E("a")) == 1


def test_an_empty_delta_after_finish_opens_nothing() -> None:
    out = split(D(0, id="a", name="f", arguments_delta="{}"), FINISH, D(0), D(0, id=""))
    assert out == [S("a", "f"), A("a", "{}"), E("a"), FINISH]


def test_after_finish_an_index_starts_a_new_call_even_with_the_same_id() -> None:
    out = split(D(0, id="a", name="f"), FINISH, D(0, id="a", name="f"), FINISH)
    assert out == [S("a", "f"), E("a"), FINISH, S("a", "f"), E("a"), FINISH]


def test_generated_ids_are_unique_within_and_across_subscriptions() -> None:
    piped = reactivex.from_iterable(
        [D(0, name="f"), D(1, name="g"), D(1, id="", arguments_delta="{}"), FINISH]
    ).pipe(ops.split_legacy_delta())
    first: list[Any] = []
    second: list[Any] = []
    piped.subscribe(first.append)
    piped.subscribe(second.append)
    ids = [x.id for x in first + second if type(x) is S]
    assert len(ids) == 4
    assert len(set(ids)) == 4
    assert all(i for i in ids)
    # The generated id is used consistently for the call's args and end.
    g = first[1].id
    assert first[2:] == [A(g, "{}"), E(first[0].id), E(g), FINISH]


def test_state_is_per_subscription() -> None:
    piped = reactivex.from_iterable(
        [D(0, id="a", name="f", arguments_delta="{"), D(0, arguments_delta="}"), FINISH]
    ).pipe(ops.split_legacy_delta())
    first: list[Any] = []
    second: list[Any] = []
    piped.subscribe(first.append)
    piped.subscribe(second.append)
    assert first == second == [S("a", "f"), A("a", "{"), A("a", "}"), E("a"), FINISH]


def test_the_reducer_directly() -> None:
    splitter = LegacyDeltaSplitter()
    assert splitter.step(D(0, id="a", arguments_delta="{")) == []
    assert splitter.step(D(0, name="f")) == [S("a", "f"), A("a", "{")]
    assert splitter.fail(RuntimeError("x")) == ()
    assert splitter.finish() == [E("a")]
    assert splitter.finish() == []


def test_a_call_with_arguments_but_no_name_is_a_protocol_error() -> None:
    splitter = LegacyDeltaSplitter()
    assert splitter.step(u.ToolCallDelta(0, id="a", arguments_delta='{"x": 1}')) == []
    with pytest.raises(ProtocolError, match="never a name"):
        splitter.step(u.Finish(FinishReason.TOOL_CALLS))


def test_a_negative_index_is_a_protocol_error() -> None:
    splitter = LegacyDeltaSplitter()
    with pytest.raises(ProtocolError, match="index must be >= 0, got -1"):
        splitter.step(u.ToolCallDelta(-1, id="a", name="f"))
    out, errors = run([u.TextDelta("Hi"), u.ToolCallDelta(-2, name="f")], ops.convert())
    assert [type(e).__name__ for e in errors] == ["ProtocolError"]
    assert [type(c).__name__ for r in out for c in r.contents] == ["TextContent", "ErrorContent"]


def test_a_nameless_call_replaced_by_a_new_id_is_a_protocol_error() -> None:
    splitter = LegacyDeltaSplitter()
    splitter.step(u.ToolCallDelta(0, id="a", arguments_delta="{}"))
    with pytest.raises(ProtocolError, match="index 0"):
        splitter.step(u.ToolCallDelta(0, id="b", name="f"))


def test_an_empty_nameless_delta_after_finish_is_ignored() -> None:
    splitter = LegacyDeltaSplitter()
    splitter.step(u.ToolCallDelta(0, id="a", name="f", arguments_delta="{}"))
    splitter.step(u.Finish(FinishReason.TOOL_CALLS))
    assert splitter.step(u.ToolCallDelta(0)) == []
    assert splitter.finish() == []


def test_whole_calls_at_index_0_without_ids_are_separate_calls() -> None:
    """A call's name never changes: a new name at a known index is a new call."""
    out = split(
        D(0, name="f", arguments_delta='{"a": 1}'), D(0, name="g", arguments_delta="{}"), FINISH
    )
    ids = [x.id for x in out if isinstance(x, S)]
    assert [type(x) for x in out] == [S, A, S, A, E, E, u.Finish]
    assert [(x.name, x.id) for x in out if isinstance(x, S)] == [("f", ids[0]), ("g", ids[1])]
    assert ids[0] != ids[1]
    assert [(x.id, x.args_delta) for x in out if isinstance(x, A)] == [
        (ids[0], '{"a": 1}'),
        (ids[1], "{}"),
    ]


def test_a_name_repeated_on_every_delta_continues_the_call() -> None:
    out = split(D(0, "c1", "f", '{"a"'), D(0, None, "f", ": 1}"), D(0, "c1", "f", ""), FINISH)
    assert out == [S("c1", "f"), A("c1", '{"a"'), A("c1", ": 1}"), E("c1"), FINISH]


def test_an_id_that_comes_after_the_generated_one_continues_the_call() -> None:
    """The provider named the call before it sent its id: the id we generated
    at the start stays the call's id, and its arguments stay with it."""
    out = split(D(0, name="f"), D(0, id="call_1", arguments_delta='{"a": 1}'), FINISH)
    [start] = [x for x in out if isinstance(x, S)]
    assert out == [start, A(start.id, '{"a": 1}'), E(start.id), FINISH]


@pytest.mark.parametrize(
    "deltas",
    [
        [D(0, name="f", arguments_delta='{"a": 1}'), D(0, name="g", arguments_delta='{"b": 2}')],
        [D(0, name="f"), D(0, id="call_1", arguments_delta='{"a": 1}')],
    ],
    ids=["new name", "late id"],
)
def test_convert_agrees_with_the_splitter_on_new_calls(deltas: list[Any]) -> None:
    out, errors = run([*deltas, FINISH], ops.convert(), ops.aggregate())
    assert errors == []
    [response] = out
    assert [call.arguments for call in response.tool_calls] == [
        json.loads(d.arguments_delta) for d in deltas if d.arguments_delta
    ]
