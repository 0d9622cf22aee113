"""``convert()``: the four converter operators composed, and the pipeline as a whole."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any
from unittest import mock

import attrs
import pytest
import reactivex
from hypothesis import example, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx_ops

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    ReasoningContent,
    TextContent,
    ToolCallingContent,
)
from rafrx.errors import IncompleteStream, ProviderError
from rafrx.events import FinishEvent, ResponseStartedEvent
from rafrx.messages import ChatMessage, MessageRole, ToolCall
from rafrx.operators._convert import Converter
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from tests.operators import apart, contents, marble, run, subscribed
from tests.strategies import (
    LLMCall,
    argument_runs,
    legacy_updates,
    llm_calls,
    messy_updates,
    start_args_updates,
)

R = AgentResponseResult
D = u.ToolCallDelta

DEFAULT_LIMIT = 64 * 1024 * 1024
LENGTH = FinishReason.LENGTH


def piped(eager: bool = False, max_argument_chars: int = DEFAULT_LIMIT) -> Any:
    """The four operators, one by one: what convert() must equal."""
    return apart(
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(max_argument_chars),
        ops.parse_args_stream(),
        ops.flush_tool_calls(eager),
    )


@contextlib.contextmanager
def counted_ids() -> Iterator[None]:
    """Generated call ids count from 0, so two runs over the same input can be compared."""
    counter = itertools.count()

    def new_call_id() -> str:
        return f"gen_{next(counter)}"

    with mock.patch("rafrx.operators._split_legacy_delta.new_call_id", new_call_id):
        yield


def outcome(updates: list[Any], operator: Any) -> tuple[list[Any], list[tuple[type, str]]]:
    with counted_ids():
        out, errors = run(updates, operator)
    return out, [(type(e), str(e)) for e in errors]


def response(updates: list[Any]) -> AgentResponse:
    out, errors = run(updates, ops.convert(), ops.aggregate())
    assert errors == []
    [result] = out
    return result  # type: ignore[no-any-return]


def expected_response(call: LLMCall) -> AgentResponse:
    """What the plan of one LLM call must aggregate to, however it is streamed."""
    tool_calls = [ToolCall(c.id, c.name, c.arguments) for c in call.calls]
    message = None
    if call.text or call.reasoning or tool_calls or call.finish_reason is not None:
        message = ChatMessage(  # an empty final answer is an empty assistant message
            MessageRole.ASSISTANT,
            call.text,
            tool_calls=tool_calls or None,
            reasoning=call.reasoning or None,
        )
    return AgentResponse(
        id=call.response_id,
        model=call.model,
        text=call.text,
        reasoning_text=call.reasoning or None,
        tool_calls=tool_calls,
        turn_transcript=[] if message is None else [message],
        finish_reason=call.finish_reason,
        usage=call.usage,
    )


# ---------------------------------------------------------------- marbles

LOOKUP: dict[str, Any] = {
    "m": u.ResponseMetadata("r", "m"),
    "t": u.TextDelta("Hi"),
    "d": D(0, id="c", name="f", arguments_delta='{"k": 1}'),
    "f": u.Finish(FinishReason.TOOL_CALLS),
}


def test_marble_convert_emits_per_update_and_the_callings_at_completion() -> None:
    messages, subscriptions = marble(ops.convert(), "-m-t-d-f-|", LOOKUP)
    assert [m.time for m in messages] == [210, 230, 250, 250, 270, 270, 290, 290]
    results = [m.value.value for m in messages[:-1]]
    assert results[0].events == (ResponseStartedEvent("r", "m"),)
    assert [type(c).__name__ for r in results for c in r.contents] == [
        "TextContent",
        "ToolCallStartContent",
        "ToolCallArgsContent",
        "ToolCallArgsParsedContent",
        "ToolCallEndContent",
        "ToolCallingContent",
    ]
    assert results[5].finish_reason is FinishReason.TOOL_CALLS
    assert results[5].events == (FinishEvent(FinishReason.TOOL_CALLS),)
    assert messages[-1].value.kind == "C"
    assert subscriptions == [subscribed(200, 290)]


def test_marble_convert_equals_the_piped_operators() -> None:
    first, first_subscriptions = marble(ops.convert(), "-m-t-d-f-|", LOOKUP)
    second, second_subscriptions = marble(piped(), "-m-t-d-f-|", LOOKUP)
    assert first == second
    assert first_subscriptions == second_subscriptions


def test_marble_error_one_error_content_then_the_error() -> None:
    boom = ConnectionResetError("reset")
    messages, subscriptions = marble(ops.convert(), "-t-d-#", LOOKUP, error=boom)
    errors = [m for m in messages if m.value.kind == "E"]
    assert [e.value.exception for e in errors] == [boom]
    assert messages[-2].value.value == R(contents=[ErrorContent("reset")])
    assert sum(isinstance(c, ErrorContent) for r in values_of(messages) for c in r.contents) == 1
    assert not any(
        isinstance(c, ToolCallingContent) for r in values_of(messages) for c in r.contents
    )
    assert subscriptions == [subscribed(200, 250)]


def test_marble_unsubscribe_disposes_upstream() -> None:
    messages, subscriptions = marble(ops.convert(), "-m-t-d-f-|", LOOKUP, disposed=235)
    assert len(messages) == 2
    assert subscriptions == [subscribed(200, 235)]


def values_of(messages: list[Any]) -> list[Any]:
    return [m.value.value for m in messages if m.value.kind == "N"]


# ---------------------------------------------------------------- pipeline behaviour


def test_seed_parallel_sequence_through_the_whole_pipeline() -> None:
    updates = [
        u.ToolCallStart("A", "read"),
        u.ToolCallStart("B", "write"),
        u.ToolCallArgs("A", '{"path"'),
        u.ToolCallArgs("B", '{"path"'),
        u.ToolCallArgs("A", ': "a.txt"}'),
        u.ToolCallArgs("B", ': "b.txt", "content": "hi"}'),
        u.ToolCallEnd("A"),
        u.ToolCallEnd("B"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    out, errors = run(updates, ops.convert())
    assert errors == []
    assert [c for c in contents(out) if isinstance(c, ToolCallingContent)] == [
        ToolCallingContent("A", "read", {"path": "a.txt"}, '{"path": "a.txt"}'),
        ToolCallingContent(
            "B", "write", {"path": "b.txt", "content": "hi"}, '{"path": "b.txt", "content": "hi"}'
        ),
    ]
    assert response(updates).tool_calls == (
        ToolCall("A", "read", {"path": "a.txt"}),
        ToolCall("B", "write", {"path": "b.txt", "content": "hi"}),
    )


def test_tool_call_end_comes_before_finish_and_calling_after_everything() -> None:
    out, _ = run(
        [D(0, id="c", name="f", arguments_delta="{}"), u.Finish(FinishReason.TOOL_CALLS)],
        ops.convert(),
    )
    kinds = [type(c).__name__ for r in out for c in r.contents]
    finish_at = next(i for i, r in enumerate(out) if r.finish_reason is not None)
    end_at = next(
        i
        for i, r in enumerate(out)
        if any(type(c).__name__ == "ToolCallEndContent" for c in r.contents)
    )
    assert end_at < finish_at == len(out) - 2
    assert kinds[-1] == "ToolCallingContent"


def test_eager_convert_flushes_right_after_the_end() -> None:
    out, _ = run(
        [D(0, id="c", name="f", arguments_delta="{}"), u.Finish(FinishReason.TOOL_CALLS)],
        ops.convert(eager=True),
    )
    assert [type(c).__name__ for r in out for c in r.contents] == [
        "ToolCallStartContent",
        "ToolCallArgsContent",
        "ToolCallEndContent",
        "ToolCallingContent",
    ]
    assert out[-1].finish_reason is FinishReason.TOOL_CALLS


def test_convert_state_is_per_subscription() -> None:
    source = reactivex.from_iterable(
        [
            u.TextDelta("a"),
            D(0, id="c", name="f", arguments_delta="{}"),
            u.Finish(FinishReason.STOP),
        ]
    ).pipe(ops.convert())
    first: list[R] = []
    second: list[R] = []
    source.subscribe(first.append)
    source.subscribe(second.append)
    assert first == second
    assert len(first) == 6


def test_custom_operators_slot_in_between_the_built_in_ones() -> None:
    def redact(result: R) -> R:
        return attrs.evolve(
            result,
            contents=[
                TextContent(c.text.replace("hunter2", "*******"), meta=c.meta)
                if isinstance(c, TextContent)
                else c
                for c in result.contents
            ],
        )

    def no_reasoning(update: Any) -> bool:
        return not isinstance(update, u.ReasoningDelta)

    source = reactivex.from_iterable(
        [
            u.ReasoningDelta("The password is hunter2."),
            u.TextDelta("Your password is "),
            u.TextDelta("hunter2."),
            D(0, id="c", name="login", arguments_delta='{"user": "ann"}'),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    )
    result = source.pipe(
        rx_ops.filter(no_reasoning),
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        rx_ops.map(redact),
        ops.parse_args_stream(),
        ops.flush_tool_calls(),
        ops.aggregate(),
    ).run()
    assert result.text == "Your password is *******."
    assert result.reasoning_text is None
    assert result.tool_calls == (ToolCall("c", "login", {"user": "ann"}),)


def test_a_raising_user_operator_between_built_ins_fails_cleanly_with_partial() -> None:
    def explode(result: R) -> R:
        if any(isinstance(c, ReasoningContent) for c in result.contents):
            raise ProviderError("user mapper failed")
        return result

    out, errors = run(
        [u.TextDelta("kept"), u.ReasoningDelta("boom"), u.TextDelta("never")],
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        rx_ops.map(explode),
        ops.parse_args_stream(),
        ops.flush_tool_calls(),
        ops.aggregate(),
    )
    assert out == []
    assert [str(e) for e in errors] == ["user mapper failed"]
    assert isinstance(errors[0], ProviderError)
    assert errors[0].partial is not None
    assert errors[0].partial.text == "kept"


def test_split_then_convert_is_idempotent_on_start_args_updates() -> None:
    updates = [u.ToolCallStart("a", "f"), u.ToolCallArgs("a", "{}"), u.ToolCallEnd("a")]
    first, _ = run(updates, ops.convert())
    second, _ = run(updates, ops.split_legacy_delta(), ops.convert())
    assert first == second


# ---------------------------------------------------------------- properties


@settings(max_examples=250, deadline=None)
@given(
    # argument_runs: mostly fragments of open calls, where convert() keeps per-call state
    updates=messy_updates() | argument_runs(),
    eager=st.booleans(),
    limit=st.sampled_from([DEFAULT_LIMIT, 4, 12]),
)
def test_convert_equals_the_four_operators_piped(
    updates: list[Any], eager: bool, limit: int
) -> None:
    assert outcome(updates, ops.convert(eager, limit)) == outcome(updates, piped(eager, limit))


@st.composite
def starts_and_ends(draw: st.DrawFn) -> list[Any]:
    """Calls starting and ending (duplicates, unknown ids, reused wire indexes, ends
    after an emoji's first half), with fragments and the odd other update between:
    convert() takes the usual starts and ends without the chain."""
    ids = st.sampled_from(["a", "b", "c"])
    fragment = st.sampled_from(["", "", '{"k": "v', '"}', "1}", "\ud83d", "\ude00", "{}"])
    delta = st.builds(
        D,
        st.sampled_from([0, 0, 1, 2, -1]),
        st.none() | st.sampled_from(["", "a", "x"]),
        st.none() | st.none() | st.sampled_from(["", "f", "g"]),
        fragment,
    )
    lifecycle = st.one_of(
        st.builds(u.ToolCallStart, ids, st.sampled_from(["f", "g"])),
        st.builds(u.ToolCallEnd, ids),
        st.builds(u.ToolCallArgs, ids, fragment),
        delta,
    )
    other = st.one_of(
        st.builds(u.TextDelta, st.just("t")),
        st.builds(u.ResponseMetadata, st.none() | st.just("r"), st.none() | st.just("m")),
        st.builds(u.Finish, st.sampled_from([FinishReason.TOOL_CALLS, FinishReason.LENGTH])),
    )
    head: list[Any] = [u.ToolCallStart("a", "f"), u.ToolCallStart("b", "g"), D(0, "c", "f")]
    weighted = st.sampled_from([0, 0, 0, 0, 0, 1]).flatmap(lambda k: lifecycle if k == 0 else other)
    return head[: draw(st.sampled_from([0, 3, 3]))] + draw(st.lists(weighted, max_size=30))


@settings(max_examples=300, deadline=None)
@example(  # a fragment at the wire index of a call that has ended: not that call's any more
    updates=[D(0, "c", "f"), u.ToolCallEnd("c"), D(0, arguments_delta="{}")], eager=False, limit=6
)
@example(  # its name again at a started index, with no arguments: not a new call
    updates=[D(0, "c", "f"), D(0, name="f"), D(0, arguments_delta="{}")], eager=False, limit=6
)
@example(  # a finish ending two calls, the first holding an emoji's first half
    updates=[D(0, "c", "f"), D(1, "d", "g"), D(0, arguments_delta="\ud83d"), u.Finish(LENGTH)],
    eager=True,
    limit=DEFAULT_LIMIT,
)
@example(  # the end of a call holding an emoji's first half: it goes before the end
    updates=[u.ToolCallStart("a", "f"), u.ToolCallArgs("a", '"\ud83d'), u.ToolCallEnd("a")],
    eager=True,
    limit=DEFAULT_LIMIT,
)
@given(updates=starts_and_ends(), eager=st.booleans(), limit=st.sampled_from([DEFAULT_LIMIT, 6]))
def test_convert_equals_piped_on_starts_and_ends(
    updates: list[Any], eager: bool, limit: int
) -> None:
    assert outcome(updates, ops.convert(eager, limit)) == outcome(updates, piped(eager, limit))


class _CountedChain:
    """A converter's chain, counting the updates that go through it."""

    def __init__(self, chain: Any) -> None:
        self.chain = chain
        self.stepped: list[str] = []

    def step(self, update: Any) -> Any:
        self.stepped.append(type(update).__name__)
        return self.chain.step(update)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.chain, name)


@pytest.mark.parametrize("legacy", [False, True], ids=["ToolCallStart", "ToolCallDelta"])
def test_the_usual_starts_ends_and_fragments_skip_the_chain(legacy: bool) -> None:
    """Only the metadata and the finish of a usual tool-call stream go through the chain
    (so a slip cannot quietly make the fast paths dead code)."""
    updates: list[Any] = [u.ResponseMetadata("r", "m")]
    for index, call_id in enumerate(["c1", "c2"]):
        if legacy:
            updates += [
                D(index, call_id, "f", ""),
                D(index, arguments_delta='{"k": '),
                D(index, arguments_delta="1}"),
            ]
        else:
            updates += [
                u.ToolCallStart(call_id, "f"),
                u.ToolCallArgs(call_id, '{"k": '),
                u.ToolCallArgs(call_id, "1}"),
                u.ToolCallEnd(call_id),
            ]
    updates.append(u.Finish(FinishReason.TOOL_CALLS))
    converter = Converter()
    counted = _CountedChain(converter._chain)
    converter._chain = counted  # type: ignore[assignment]
    results = [r for x in updates for r in converter.step(x)] + list(converter.finish())
    assert counted.stepped == ["ResponseMetadata", "Finish"]
    assert outcome(updates, ops.convert())[0] == results


@settings(max_examples=50, deadline=None)
@given(call=llm_calls(), data=st.data())
def test_legacy_deltas_aggregate_to_the_plan_however_they_are_split(
    call: LLMCall, data: st.DataObject
) -> None:
    assert response(data.draw(legacy_updates(call))) == expected_response(call)


@settings(max_examples=50, deadline=None)
@given(call=llm_calls(), data=st.data())
def test_start_args_updates_aggregate_to_the_plan_however_they_are_split(
    call: LLMCall, data: st.DataObject
) -> None:
    assert response(data.draw(start_args_updates(call))) == expected_response(call)


@settings(max_examples=25, deadline=None)
@given(call=llm_calls(), data=st.data())
def test_convert_equals_piped_on_well_formed_streams(call: LLMCall, data: st.DataObject) -> None:
    updates = data.draw(legacy_updates(call))
    assert outcome(updates, ops.convert()) == outcome(updates, piped())


def test_usage_as_update_or_on_finish_gives_the_same_response() -> None:
    usage = Usage(3, 4, 7)
    a = response([u.TextDelta("x"), u.Usage(usage), u.Finish(FinishReason.STOP)])
    b = response([u.TextDelta("x"), u.Finish(FinishReason.STOP, usage)])
    assert a == b
    assert a.usage == usage


def test_convert_equals_piped_when_a_stage_fails_after_emitting_in_the_same_step() -> None:
    # split emits Start and the held-back Args together; accumulate raises on the Args.
    updates = [D(0, id="c", arguments_delta='{"k": "long"}'), D(0, name="f")]
    converted = outcome(updates, ops.convert(max_argument_chars=4))
    assert converted == outcome(updates, piped(max_argument_chars=4))
    results, errors = converted
    assert [type(c).__name__ for r in results for c in r.contents] == [
        "ToolCallStartContent",
        "ToolCallIncompleteContent",  # the call the limit stopped: reported, never run
        "ErrorContent",
    ]
    assert [t.__name__ for t, _ in errors] == ["LimitExceeded"]


class _Twice:
    """A stage emitting each item twice."""

    def step(self, item: str) -> tuple[str, ...]:
        return (item, item + "'")

    def finish(self) -> tuple[str, ...]:
        return ("twice-done",)

    def fail(self, error: Exception) -> tuple[str, ...]:
        return ("twice-failed",)


class _RaiseOn:
    """A stage that raises on one item, and says so in ``fail``."""

    def __init__(self, bad: str) -> None:
        self.bad = bad

    def step(self, item: str) -> tuple[str, ...]:
        if item == self.bad:
            raise ValueError(item)
        return (item.upper(),)

    def finish(self) -> tuple[str, ...]:
        return ()

    def fail(self, error: Exception) -> tuple[str, ...]:
        return (f"failed:{error}",)


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(st.sampled_from(["a", "b", "x"]), max_size=6),
    bad=st.sampled_from(["x", "x'", "X", "X'"]),
    shape=st.sampled_from(["four", "twice-raise", "raise-twice", "upper-raise"]),
)
def test_chain_behaves_like_piped_reducers_when_a_stage_raises(
    items: list[str], bad: str, shape: str
) -> None:
    from rafrx.operators._reducer import Chain, reducer_operator

    def stages() -> list[Any]:  # two stages take the chain's unrolled path
        early = _RaiseOn("x'" if bad.startswith("x") else "?")
        return {
            "four": [_Twice(), early, _Twice(), _RaiseOn(bad)],
            "twice-raise": [_Twice(), _RaiseOn(bad)],
            "raise-twice": [_RaiseOn(bad), _Twice()],
            "upper-raise": [_RaiseOn("?"), _RaiseOn(bad)],  # one item in, one out
        }[shape]

    def chained(source: Any) -> Any:
        return source.pipe(reducer_operator(lambda: Chain(*stages())))

    def one_by_one(source: Any) -> Any:
        made = stages()
        return source.pipe(apart(*(reducer_operator(lambda s=s: s) for s in made)))

    def observe(operator: Any) -> tuple[list[Any], list[str]]:
        out, errors = run(items, operator)
        return out, [str(e) for e in errors]

    assert observe(chained) == observe(one_by_one)


# ---------------------------------------------------------------- fusion


def _error_partials(errors: list[Exception]) -> list[Any]:
    return [getattr(e, "partial", None) for e in errors]


@settings(max_examples=200, deadline=None)
@given(
    updates=messy_updates() | argument_runs(),
    eager=st.booleans(),
    limit=st.sampled_from([DEFAULT_LIMIT, 4]),
    five=st.booleans(),
)
def test_fused_pipeline_equals_the_operators_kept_apart(
    updates: list[Any], eager: bool, limit: int, five: bool
) -> None:
    if five:  # five reducers in one chain
        stages: tuple[Any, ...] = (
            ops.split_legacy_delta(),
            ops.accumulate_tool_calls(limit),
            ops.parse_args_stream(),
            ops.flush_tool_calls(eager),
            ops.aggregate("agent"),
        )
    else:  # two: the chain's unrolled two-stage step
        stages = (ops.convert(eager, limit), ops.aggregate("agent"))
    with counted_ids():
        fused, fused_errors = run(updates, *stages)
    with counted_ids():
        kept_apart, apart_errors = run(updates, apart(*stages))
    assert fused == kept_apart
    assert [(type(e), str(e)) for e in fused_errors] == [(type(e), str(e)) for e in apart_errors]
    assert _error_partials(fused_errors) == _error_partials(apart_errors)


def test_pipe_on_a_fused_observable_is_reactivex_pipe() -> None:
    from rafrx.sources import from_sse

    body = b'data: {"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]}\n\n'
    source = from_sse(body)
    assert source.pipe() is source
    counts = source.pipe(ops.convert(), rx_ops.map(lambda r: len(r.contents)), rx_ops.to_list())
    expected = reactivex.pipe(
        source, ops.convert(), rx_ops.map(lambda r: len(r.contents)), rx_ops.to_list()
    )
    assert counts.run() == expected.run()
    assert counts.run() == [1, 0]  # the TextContent, then the finish
    assert source.pipe(ops.convert()).pipe(ops.aggregate()).run().text == "Hi"


def test_piped_reducer_operators_fuse_into_one_subscription() -> None:
    from rafrx.operators._reducer import Chain, ReducedObservable

    source = reactivex.of(u.TextDelta("Hi"))
    pipeline = source.pipe(ops.convert(), rx_ops.map(lambda r: r), ops.aggregate())
    assert isinstance(pipeline, ReducedObservable)
    assert pipeline.source is not source  # the map stands between: not fused past it
    fused = source.pipe(ops.convert(), ops.parse_args_stream(), ops.aggregate())
    assert isinstance(fused, ReducedObservable)
    assert fused.source is source
    chain = fused.factory()
    assert isinstance(chain, Chain)
    names = [type(stage).__name__ for stage in chain.stages]
    assert names[-2:] == ["ArgsStreamParser", "ResponseAggregator"]
    assert fused.run().text == pipeline.run().text == "Hi"


def test_a_fused_pipeline_subscribes_once_and_disposes_its_source() -> None:
    def fused(source: Any) -> Any:
        return source.pipe(ops.convert(), ops.aggregate())

    messages, subscriptions = marble(fused, "-m-t-d-f-|", LOOKUP)
    [response] = values_of(messages)
    assert response.text == "Hi"
    assert [c.name for c in response.tool_calls] == ["f"]
    assert subscriptions == [subscribed(200, 290)]
    messages, subscriptions = marble(fused, "-m-t-d-f-|", LOOKUP, disposed=235)
    assert messages == []
    assert subscriptions == [subscribed(200, 235)]


def test_run_of_a_fused_sync_pipeline_equals_rx_run() -> None:
    from reactivex.internal.exceptions import SequenceContainsNoElementsError

    from rafrx.sources import from_sse

    body = b'data: {"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]}\n\n'
    fused = from_sse(body + b"data: [DONE]\n\n").pipe(ops.convert(), ops.aggregate())
    kept_apart = from_sse(body + b"data: [DONE]\n\n").pipe(apart(ops.convert(), ops.aggregate()))
    assert fused.run() == kept_apart.run()
    assert fused.run().text == "Hi"
    truncated = from_sse(b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\n')
    for pipeline in (truncated.pipe(ops.convert()), truncated.pipe(apart(ops.convert()))):
        with pytest.raises(IncompleteStream) as caught:
            pipeline.pipe(ops.aggregate()).run()
        assert caught.value.partial is not None
        assert caught.value.partial.text == "Hi"
    from rafrx.operators._reducer import ReducedObservable, reducer_operator

    empty = from_sse(body + b"data: [DONE]\n\n").pipe(reducer_operator(_DropAll))
    assert isinstance(empty, ReducedObservable)
    with pytest.raises(SequenceContainsNoElementsError):
        empty.run()


class _DropAll:
    """A reducer that emits nothing."""

    def step(self, item: Any) -> tuple[()]:
        return ()

    def finish(self) -> tuple[()]:
        return ()

    def fail(self, error: Exception) -> tuple[()]:
        return ()


@pytest.mark.parametrize("legacy", [False, True], ids=["ToolCallArgs", "ToolCallDelta"])
def test_a_long_argument_in_tiny_fragments_equals_the_piped_operators(legacy: bool) -> None:
    """Several thousand fragments: the kept arguments and the parser's values go
    into blocks on the way (rafrx._fragments); nothing changes for it."""
    import json

    args = json.dumps({"path": "a.py", "content": 'say("hé")\n' * 500, "n": list(range(300))})
    second = json.dumps({"content": "x" * 3000})
    if legacy:
        updates: list[Any] = [D(0, "c1", "write", ""), D(1, "c2", "write", "")]
        for i in range(max(len(args), len(second))):
            updates += [
                D(0, arguments_delta=args[i : i + 1]),
                D(1, arguments_delta=second[i : i + 1]),
            ]
    else:
        updates = [u.ToolCallStart("c1", "write"), u.ToolCallStart("c2", "write")]
        for i in range(max(len(args), len(second))):
            updates += [
                u.ToolCallArgs("c1", args[i : i + 1]),
                u.ToolCallArgs("c2", second[i : i + 1]),
            ]
        updates += [u.ToolCallEnd("c1"), u.ToolCallEnd("c2")]
    updates.append(u.Finish(FinishReason.TOOL_CALLS))

    fused = outcome(updates, ops.convert())
    assert fused == outcome(updates, piped())
    calls = {
        c.call_id: c for r in fused[0] for c in r.contents if isinstance(c, ToolCallingContent)
    }
    assert calls["c1"].raw_arguments == args
    assert calls["c1"].arguments == json.loads(args)
    assert calls["c2"].arguments == json.loads(second)
