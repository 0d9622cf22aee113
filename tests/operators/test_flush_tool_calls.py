"""``flush_tool_calls()``: one ``ToolCallingContent`` per ended call, parsed, in start order."""

from __future__ import annotations

from typing import Any

import pytest
import reactivex

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    ResponseMetadata,
    TextContent,
    ToolCallArgsContent,
    ToolCallEndContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
)
from rafrx.errors import ProviderError
from rafrx.operators._flush_tool_calls import FAILED_FIRST, parse_arguments
from rafrx.response import AgentResponseResult, FinishReason
from tests.operators import apart, contents, marble, records, run, subscribed

R = AgentResponseResult
META = ResponseMetadata("r", "m")


def start(call_id: str, name: str = "f") -> R:
    return R("r", "m", contents=[ToolCallStartContent(call_id, name, meta=META)])


def args(call_id: str, delta: str) -> R:
    return R("r", "m", contents=[ToolCallArgsContent(call_id, delta, meta=META)])


def end(call_id: str) -> R:
    return R("r", "m", contents=[ToolCallEndContent(call_id, meta=META)])


def calling(call_id: str, name: str, arguments: Any, raw: str, error: str | None = None) -> Any:
    return ToolCallingContent(call_id, name, arguments, raw, error, meta=META)


def callings(results: list[AgentResponseResult]) -> list[ToolCallingContent]:
    return [c for c in contents(results) if isinstance(c, ToolCallingContent)]


FINISH = R("r", "m", FinishReason.TOOL_CALLS)

# ---------------------------------------------------------------- marbles

LOOKUP: dict[str, Any] = {
    "s": start("a"),
    "x": args("a", '{"q": '),
    "y": args("a", '"z"}'),
    "e": end("a"),
    "f": FINISH,
    "c": R("r", "m", contents=[calling("a", "f", {"q": "z"}, '{"q": "z"}')]),
}


def test_marble_calling_comes_after_the_last_upstream_item() -> None:
    messages, subscriptions = marble(ops.flush_tool_calls(), "-s-x-y-e-f-|", LOOKUP)
    assert messages == records("-s-x-y-e-f-(c,|)", LOOKUP)
    assert subscriptions == [subscribed(200, 310)]


def test_marble_eager_calling_comes_right_after_the_end() -> None:
    messages, subscriptions = marble(ops.flush_tool_calls(eager=True), "-s-x-y-e-----f-|", LOOKUP)
    assert messages == records("-s-x-y-(e,c)-f-|", LOOKUP)
    assert subscriptions == [subscribed(200, 350)]


def test_marble_an_upstream_error_flushes_no_call_to_run() -> None:
    boom = ProviderError("overloaded")
    messages, subscriptions = marble(ops.flush_tool_calls(), "-s-x-y-e-#", LOOKUP, error=boom)
    # the ended call, not flushed yet, comes just before the error: never run, its
    # arguments whole
    cut = ToolCallIncompleteContent(
        "a", "f", '{"q": "z"}', {"q": "z"}, None, FAILED_FIRST, whole=True, meta=META
    )
    assert messages[:-2] == records("-s-x-y-e", LOOKUP)
    assert [(m.time, m.value.kind) for m in messages[-2:]] == [(290, "N"), (290, "E")]
    assert messages[-2].value.value.contents == (cut,)
    assert messages[-1].value.exception is boom
    assert subscriptions == [subscribed(200, 290)]


def test_marble_unsubscribe_disposes_upstream_and_flushes_nothing() -> None:
    messages, subscriptions = marble(ops.flush_tool_calls(), "-s-x-y-e-f-|", LOOKUP, disposed=285)
    assert messages == records("-s-x-y-e", LOOKUP)
    assert subscriptions == [subscribed(200, 285)]


# ---------------------------------------------------------------- semantics


def flush(*results: R, eager: bool = False) -> list[AgentResponseResult]:
    out, errors = run(results, ops.flush_tool_calls(eager=eager))
    assert errors == []
    return out


def test_results_pass_through_unchanged() -> None:
    items = [start("a"), args("a", "{}"), R(contents=[TextContent("hi")]), end("a"), FINISH]
    out = flush(*items)
    assert all(x is y for x, y in zip(out, items, strict=False))
    assert out[len(items) :] == [R("r", "m", contents=[calling("a", "f", {}, "{}")])]


def test_callings_come_in_start_order_whatever_order_the_calls_end() -> None:
    out = flush(
        start("A", "read"),
        start("B", "write"),
        args("B", '{"path": "b"}'),
        args("A", '{"path": "a"}'),
        end("B"),
        end("A"),
        FINISH,
    )
    assert len(out) == 8
    assert out[-1].contents == (
        calling("A", "read", {"path": "a"}, '{"path": "a"}'),
        calling("B", "write", {"path": "b"}, '{"path": "b"}'),
    )


@pytest.mark.parametrize("raw", ["", "   ", "\n"])
def test_empty_arguments_become_an_empty_object(raw: str) -> None:
    pieces = [args("a", raw)] if raw else []
    assert callings(flush(start("a"), *pieces, end("a"))) == [calling("a", "f", {}, raw)]


def test_invalid_json_sets_error_keeps_raw_and_never_raises() -> None:
    out = flush(
        start("a"),
        args("a", '{"q": "unterminated'),
        end("a"),
        start("b"),
        args("b", "[1]"),
        end("b"),
    )
    bad, good = callings(out)
    assert bad.arguments is None
    assert bad.raw_arguments == '{"q": "unterminated'
    assert bad.error is not None
    assert bad.error.startswith("invalid JSON arguments")
    assert good == calling("b", "f", [1], "[1]")


def test_a_parsable_prefix_is_not_a_complete_call() -> None:
    # '{"q": 1}' parses after the second delta, but only the End completes the call.
    out = flush(start("a"), args("a", '{"q": 1'), args("a", "}"), args("a", ""), FINISH)
    assert callings(out) == []


def test_a_call_whose_arguments_never_ended_is_never_flushed() -> None:
    out = flush(start("a"), args("a", "{}"), end("a"), start("b"), args("b", "{}"), FINISH)
    assert [c.call_id for c in callings(out)] == ["a"]


def test_eager_flushes_each_call_right_after_its_end_and_nothing_twice() -> None:
    out = flush(
        start("A"),
        start("B"),
        args("A", "{}"),
        end("A"),
        args("B", "[]"),
        end("B"),
        FINISH,
        eager=True,
    )
    kinds = [
        type(c).__name__ + ":" + c.call_id if hasattr(c, "call_id") else "finish"
        for r in out
        for c in (r.contents or [None])
        if c is not None or r.finish_reason
    ]
    assert kinds == [
        "ToolCallStartContent:A",
        "ToolCallStartContent:B",
        "ToolCallArgsContent:A",
        "ToolCallEndContent:A",
        "ToolCallingContent:A",
        "ToolCallArgsContent:B",
        "ToolCallEndContent:B",
        "ToolCallingContent:B",
        "finish",
    ]


def test_eager_never_flushes_an_unended_call() -> None:
    out = flush(start("A"), args("A", "{}"), FINISH, eager=True)
    assert callings(out) == []


def test_meta_comes_from_the_start_and_id_model_from_the_last_result() -> None:
    first = ResponseMetadata("r1", "m1")
    out = flush(
        R("r1", "m1", contents=[ToolCallStartContent("a", "f", meta=first)]),
        R("r2", "m2", contents=[ToolCallEndContent("a")]),
    )
    assert (out[-1].id, out[-1].model) == ("r2", "m2")
    assert out[-1].contents[0].meta == first


def test_arguments_for_an_unknown_call_are_ignored() -> None:
    out = flush(args("ghost", "{}"), end("ghost"), start("a"), end("a"))
    assert [c.call_id for c in callings(out)] == ["a"]


def test_no_calls_means_no_extra_result() -> None:
    items = [R(contents=[TextContent("hi")]), FINISH]
    assert flush(*items) == items


def test_after_an_upstream_error_only_the_error_content_and_the_error_arrive() -> None:
    out, errors = run(
        [u.ToolCallStart("a", "f"), u.ToolCallArgs("a", "{}"), u.ToolCallEnd("a"), u.Error("x")],
        ops.accumulate_tool_calls(),
        ops.flush_tool_calls(),
    )
    assert [type(e) for e in errors] == [ProviderError]
    assert callings(out) == []
    assert [type(c) for c in contents(out)][-1] is ErrorContent
    assert sum(isinstance(c, ErrorContent) for c in contents(out)) == 1


def test_state_is_per_subscription() -> None:
    piped = reactivex.from_iterable([start("a"), args("a", '{"k": 1}'), end("a")]).pipe(
        ops.flush_tool_calls()
    )
    first: list[R] = []
    second: list[R] = []
    piped.subscribe(first.append)
    piped.subscribe(second.append)
    assert first == second
    assert callings(first) == [calling("a", "f", {"k": 1}, '{"k": 1}')]


def test_parse_arguments() -> None:
    assert parse_arguments("") == ({}, None)
    assert parse_arguments(" \t") == ({}, None)
    assert parse_arguments('{"a": [1, {"b": null}]}') == ({"a": [1, {"b": None}]}, None)
    assert parse_arguments('"just a string"') == ("just a string", None)
    value, error = parse_arguments("{'single': 'quotes'}")
    assert value is None
    assert error is not None
    assert error.startswith("invalid JSON arguments: ")


# ---------------------------------------------------------------- applied twice

TWO_CALLS_REUSING_AN_ID = [
    start("A"),
    args("A", '{"n": 1}'),
    start("B"),
    end("A"),
    args("B", "{}"),
    end("B"),
    FINISH,
    start("A"),  # the next LLM call reuses an id
    args("A", '{"n": 2}'),
    end("A"),
    FINISH,
]


@pytest.mark.parametrize("first", [False, True], ids=["lazy", "eager"])
@pytest.mark.parametrize("second", [False, True], ids=["then-lazy", "then-eager"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "apart"])
def test_flushing_twice_flushes_each_call_once(first: bool, second: bool, fused: bool) -> None:
    """flush_tool_calls() after one that already flushed (as after convert()) adds no
    second ToolCallingContent: execute_tools would run the tool twice."""
    once, errors = run(TWO_CALLS_REUSING_AN_ID, ops.flush_tool_calls(eager=first))
    assert errors == []
    pair = (ops.flush_tool_calls(eager=first), ops.flush_tool_calls(eager=second))
    twice, errors = run(TWO_CALLS_REUSING_AN_ID, *pair if fused else (apart(*pair),))
    assert errors == []
    assert [(c.call_id, c.arguments) for c in callings(twice)] == [
        (c.call_id, c.arguments) for c in callings(once)
    ]
    assert len(callings(once)) == 3
    # the rest passes through as it came, and no result is left empty
    others = [c for c in contents(twice) if not isinstance(c, ToolCallingContent)]
    assert others == [c for c in contents(once) if not isinstance(c, ToolCallingContent)]
    assert all(r.contents or r.finish_reason or r.events for r in twice)


def test_a_calling_that_came_from_upstream_alone_passes_through() -> None:
    """A ToolCallingContent with no lifecycle before it (a source that sends calls whole)
    is not this flusher's to hold back."""
    whole = R("r", "m", contents=[calling("Z", "f", {}, "{}")])
    assert callings(flush(whole, FINISH)) == [calling("Z", "f", {}, "{}")]
    assert callings(flush(whole, FINISH, eager=True)) == [calling("Z", "f", {}, "{}")]
