"""The reducer operators' shared Rx grammar: one terminal notification, nothing after it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import reactivex

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    TextContent,
    ToolCallIncompleteContent,
    ToolCallStartContent,
)
from rafrx.errors import LimitExceeded, ProtocolError
from rafrx.events import ResponseStartedEvent
from rafrx.operators._reducer import reducer_operator
from rafrx.response import AgentResponseResult
from rafrx.sources import from_sse
from tests.operators import apart, run

R = AgentResponseResult


def chunk(delta: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps({"choices": [{"delta": delta}]}).encode() + b"\n\n"


# A text delta, a tool call whose arguments pass a 10-character limit, more text, and
# then the body ends without a finish reason or [DONE]: the source reads on after the
# operator failed, and ends with its own error (IncompleteStream).
TRUNCATED_AFTER_A_LIMIT = (
    chunk({"content": "Hi"})
    + chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "c",
                    "function": {"name": "f", "arguments": '{"a": "0123456789"}'},
                }
            ]
        }
    )
    + chunk({"content": " more"})
)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "apart"])
def test_the_first_error_wins_when_the_source_fails_after_the_operator_did(fused: bool) -> None:
    convert = ops.convert(max_argument_chars=10)
    operator = convert if fused else apart(convert)
    out: list[AgentResponseResult] = []
    errors: list[Exception] = []
    completed: list[bool] = []
    from_sse(TRUNCATED_AFTER_A_LIMIT).pipe(operator).subscribe(
        out.append, errors.append, lambda: completed.append(True)
    )
    message = "arguments of tool call 'c' (f) exceed 10 characters"
    assert out == [
        R(contents=[TextContent("Hi")], events=[ResponseStartedEvent(None, None)]),
        R(contents=[ToolCallStartContent("c", "f")]),
        R(contents=[ToolCallIncompleteContent("c", "f", "")]),  # the call the limit stopped
        R(contents=[ErrorContent(message)]),
    ]
    assert [(type(e), str(e)) for e in errors] == [(LimitExceeded, message)]
    assert completed == []


def test_the_first_error_is_re_raised_by_aggregate_with_what_came_before() -> None:
    pipeline = from_sse(TRUNCATED_AFTER_A_LIMIT).pipe(
        ops.convert(max_argument_chars=10), ops.aggregate()
    )
    with pytest.raises(LimitExceeded) as caught:
        pipeline.run()
    assert caught.value.limit == 10
    partial = caught.value.partial
    assert partial is not None
    assert (partial.text, partial.interrupted) == ("Hi", True)
    assert [(c.id, c.complete, c.raw_arguments) for c in partial.tool_calls] == [("c", False, "")]


def test_two_fused_stages_fail_as_the_operators_piped_apart_when_the_second_raises() -> None:
    """split_legacy_delta() + accumulate_tool_calls() fuse into a two-stage chain."""
    items = [u.TextDelta("a"), u.ToolCallArgs("x", "{}"), u.TextDelta("b")]
    stages = (ops.split_legacy_delta(), ops.accumulate_tool_calls())
    fused, fused_errors = run(items, *stages)
    kept_apart, apart_errors = run(items, apart(*stages))
    message = "arguments for a tool call that is not open: 'x'"
    assert (
        fused
        == kept_apart
        == [
            R(contents=[TextContent("a")], events=[ResponseStartedEvent(None, None)]),
            R(contents=[ErrorContent(message)]),
        ]
    )
    assert [(type(e), str(e)) for e in fused_errors] == [(ProtocolError, message)]
    assert [(type(e), str(e)) for e in apart_errors] == [(ProtocolError, message)]


class _FailsToFail:
    """A reducer passing items through, whose ``fail`` itself raises (a bug in it)."""

    def step(self, item: Any) -> list[Any]:
        return [item]

    def finish(self) -> list[Any]:
        return []

    def fail(self, error: Exception) -> list[Any]:
        raise RuntimeError(f"fail() broke on {error!r}")


@pytest.mark.parametrize("fused", [False, True], ids=["alone", "fused"])
def test_a_reducer_whose_fail_raises_ends_the_stream_once_with_that_error(fused: bool) -> None:
    upstream = ValueError("upstream")
    source = reactivex.concat(reactivex.of(1, 2), reactivex.throw(upstream))
    if fused:  # behind another reducer operator: one Chain
        source = source.pipe(reducer_operator(_FailsToFail))
    out, errors = run([], lambda _: source.pipe(reducer_operator(_FailsToFail)))
    assert out == [1, 2]
    assert [(type(e), str(e)) for e in errors] == [
        (RuntimeError, "fail() broke on ValueError('upstream')")
    ]  # and run() checked: nothing after it, no completion


BODY = chunk({"content": "Hi"}) + chunk({"content": " there"}) + b"data: [DONE]\n\n"


def test_the_fused_observables_have_the_lock_reactivex_operators_take() -> None:
    # Observable.__init__ is skipped (no RLock per observable): `lock` is made when first
    # asked for, once per observable, and operators that take it work as on any other.
    results = from_sse(BODY).pipe(ops.convert())
    source = results.source  # type: ignore[attr-defined]
    assert results.lock is results.lock
    assert source.lock is source.lock
    assert source.lock is not results.lock
    with results.lock, results.lock:  # (reentrant, as reactivex's own)
        pass
    texts = results.pipe(
        reactivex.operators.take_while(lambda r: not r.finish_reason),
        reactivex.operators.skip_last(1),
        reactivex.operators.to_list(),
    ).run()
    assert [c.text for r in texts for c in r.contents] == ["Hi"]


def test_run_over_a_sync_source_is_what_subscribing_gives() -> None:
    # run() drives the body during the call, without disposables: the same items.
    seen: list[Any] = []
    results = from_sse(BODY).pipe(ops.convert())
    results.subscribe(seen.append)
    assert results.run() == seen[-1]
    assert results.pipe(ops.aggregate()).run().text == "Hi there"
