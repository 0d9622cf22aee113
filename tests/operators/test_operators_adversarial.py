"""Adversarial tests of the public operators used standalone and composed by users.

Each operator alone on hand-built sequences, in unusual orders, subscribed
twice, disposed mid-stream, failed at every position, over threads; and the
value types they emit. Tests that fail pin a bug: their name and docstring
state the expected behaviour.
"""

from __future__ import annotations

import copy
import json
import pickle
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.scheduler import ThreadPoolScheduler
from reactivex.subject import Subject

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    ReasoningContent,
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
from rafrx.errors import ProtocolError, ProviderError, StreamInterrupted
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import ToolCall
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from tests.operators import contents, run
from tests.strategies import LLMCall, legacy_updates, llm_calls, start_args_updates

R = AgentResponseResult
D = u.ToolCallDelta
S = u.ToolCallStart
A = u.ToolCallArgs
E = u.ToolCallEnd
STOP = u.Finish(FinishReason.STOP)
TOOLS = u.Finish(FinishReason.TOOL_CALLS)


def callings(results: list[Any]) -> list[ToolCallingContent]:
    return [c for c in contents(results) if isinstance(c, ToolCallingContent)]


def one_call(call_id: str, name: str, *fragments: str) -> list[u.AgentResponseUpdate]:
    return [S(call_id, name), *(A(call_id, f) for f in fragments), E(call_id)]


# A small but complete stream: metadata, reasoning, text, two legacy calls (one
# interleaved with text), usage and a finish.
MIXED: list[u.AgentResponseUpdate] = [
    u.ResponseMetadata("resp", "model"),
    u.ReasoningDelta("think"),
    u.TextDelta("Hel"),
    D(0, id="a", name="read", arguments_delta='{"path": "é'),
    u.TextDelta("lo"),
    D(0, arguments_delta='.py"}'),
    D(1, id="b", name="list", arguments_delta="{}"),
    u.Usage(Usage(1, 2, 3)),
    TOOLS,
]

STANDALONE: dict[str, Callable[[], tuple[Any, ...]]] = {
    "split": lambda: (ops.split_legacy_delta(),),
    "split+accumulate": lambda: (ops.split_legacy_delta(), ops.accumulate_tool_calls()),
    "piped": lambda: (
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        ops.parse_args_stream(),
        ops.flush_tool_calls(),
    ),
    "convert": lambda: (ops.convert(),),
    "convert-eager": lambda: (ops.convert(eager=True),),
    "convert+aggregate": lambda: (ops.convert(), ops.aggregate()),
}


# ---------------------------------------------------------------- Rx grammar


@pytest.mark.parametrize("name", list(STANDALONE))
def test_cold_resubscription_gives_equal_independent_results(name: str) -> None:
    observable = reactivex.from_iterable(MIXED).pipe(*STANDALONE[name]())
    first: list[Any] = []
    second: list[Any] = []
    observable.subscribe(first.append)
    observable.subscribe(second.append)
    assert first
    assert first == second
    assert all(a is not b for a, b in zip(first, second, strict=True) if isinstance(a, R))


@pytest.mark.parametrize("name", list(STANDALONE))
def test_take_n_gives_exactly_the_first_n_items_and_disposes(name: str) -> None:
    full, errors = run(MIXED, *STANDALONE[name]())
    assert errors == []
    for n in range(1, len(full) + 1):
        out, errors = run(MIXED, *STANDALONE[name](), rx.take(n))
        assert errors == []
        assert out == full[:n]


@pytest.mark.parametrize("name", [n for n in STANDALONE if n != "convert+aggregate"])
def test_disposing_from_on_next_stops_output_and_unsubscribes_a_subject(name: str) -> None:
    subject: Subject[Any] = Subject()
    seen: list[Any] = []
    holder: dict[str, Any] = {}

    def on_next(item: Any) -> None:
        seen.append(item)
        holder["sub"].dispose()

    holder["sub"] = subject.pipe(*STANDALONE[name]()).subscribe(
        on_next, lambda e: seen.append(("error", e)), lambda: seen.append("completed")
    )
    for update in MIXED:
        subject.on_next(update)
    subject.on_completed()
    assert len(seen) == 1
    assert subject.observers == []


def test_a_take_between_fused_operators_cuts_the_stream_for_the_next_one() -> None:
    updates = [u.TextDelta(x) for x in "abcdef"]
    [response], errors = run(updates, ops.accumulate_tool_calls(), rx.take(2), ops.aggregate())
    assert errors == []
    assert response.text == "ab"


def test_nothing_after_a_misbehaving_source_completed() -> None:
    def subscribe(observer: Any, scheduler: Any = None) -> Any:
        observer.on_next(u.TextDelta("a"))
        observer.on_completed()
        observer.on_next(u.TextDelta("b"))
        observer.on_error(StreamInterrupted("late"))
        observer.on_completed()
        return reactivex.disposable.Disposable()

    out: list[Any] = []
    errors: list[Exception] = []
    done: list[bool] = []
    reactivex.create(subscribe).pipe(ops.convert(), ops.aggregate()).subscribe(
        out.append, errors.append, lambda: done.append(True)
    )
    assert [r.text for r in out] == ["a"]
    assert errors == []
    assert done == [True]


def test_the_piped_operators_over_thread_pools_give_the_synchronous_result() -> None:
    expected, _ = run(MIXED, ops.convert(), ops.aggregate())
    pool = ThreadPoolScheduler(4)
    for _ in range(5):
        got: list[Any] = []
        errors: list[Exception] = []
        ended = threading.Event()
        reactivex.from_iterable(MIXED).pipe(
            rx.observe_on(pool),
            ops.split_legacy_delta(),
            rx.observe_on(pool),
            ops.accumulate_tool_calls(),
            rx.observe_on(pool),
            ops.parse_args_stream(),
            rx.observe_on(pool),
            ops.flush_tool_calls(),
            rx.observe_on(pool),
            ops.aggregate(),
        ).subscribe(got.append, errors.append, ended.set)
        assert ended.wait(5)
        assert errors == []
        assert got == expected


def test_concurrent_subscriptions_from_threads_do_not_share_state() -> None:
    observable = reactivex.from_iterable(MIXED).pipe(ops.convert(), ops.aggregate())
    expected = observable.run()
    results: list[Any] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(20):
            got = observable.run()
            with lock:
                results.append(got)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 120
    assert all(r == expected for r in results)


# ---------------------------------------------------------------- errors everywhere


def _fail_after(updates: list[Any], k: int, error: Exception, *operators: Any) -> Any:
    """Push ``updates[:k]`` through a subject, then ``error``: (before, after, errors)."""
    subject: Subject[Any] = Subject()
    out: list[Any] = []
    errors: list[Exception] = []
    subject.pipe(*operators).subscribe(out.append, errors.append)
    for update in updates[:k]:
        subject.on_next(update)
    before = len(out)
    subject.on_error(error)
    return out[:before], out[before:], errors


@settings(max_examples=40, deadline=None)
@given(call=llm_calls(), legacy=st.booleans(), data=st.data())
def test_an_upstream_error_at_any_position_keeps_everything_and_ends_typed(
    call: LLMCall, legacy: bool, data: st.DataObject
) -> None:
    updates = data.draw(legacy_updates(call) if legacy else start_args_updates(call))
    full, errors = run(updates, ops.convert())
    assert errors == []
    k = data.draw(st.integers(0, len(updates)))
    boom = StreamInterrupted("connection reset")
    before, after, errors = _fail_after(updates, k, boom, ops.convert())
    assert before == full[: len(before)]
    *cut, last = [c for r in after for c in r.contents]
    assert (type(last), last.message) == (ErrorContent, "connection reset")
    # before it, only the calls not flushed yet, never to run (never a call to run)
    assert all(isinstance(c, ToolCallIncompleteContent) for c in cut)
    started = [c.call_id for r in before for c in r.contents if isinstance(c, ToolCallStartContent)]
    assert [c.call_id for c in cut] == [i for i in started if i in {c.call_id for c in cut}]
    assert errors == [boom]

    boom = StreamInterrupted("connection reset")
    _, after, errors = _fail_after(updates, k, boom, ops.convert(), ops.aggregate())
    assert after == []
    assert errors == [boom]
    partial = boom.partial
    assert partial is not None
    assert partial.interrupted
    texts = "".join(x.delta for x in updates[:k] if isinstance(x, u.TextDelta))
    assert partial.text == texts
    # those whose arguments ended whole are complete there (never run: no result)
    assert [c.id for c in partial.tool_calls if not c.complete] == [
        c.call_id for c in cut if not c.whole
    ]
    assert {c.call_id for c in cut if c.whole} <= {c.id for c in partial.tool_calls if c.complete}
    assert partial.tool_messages == ()


@pytest.mark.parametrize("k", range(len(MIXED) + 1))
def test_an_error_update_at_any_position_becomes_a_provider_error_with_partial(k: int) -> None:
    updates = [*MIXED[:k], u.Error("overloaded", error_type="overloaded_error"), u.TextDelta("x")]
    out, errors = run(updates, ops.convert(), ops.aggregate())
    assert out == []
    [error] = errors
    assert isinstance(error, ProviderError)
    assert error.error_type == "overloaded_error"
    assert error.partial is not None
    assert error.partial.text == "".join(x.delta for x in MIXED[:k] if isinstance(x, u.TextDelta))


def test_a_nameless_legacy_call_fails_typed_at_completion_with_its_arguments_named() -> None:
    out, errors = run([u.TextDelta("hi"), D(0, id="a", arguments_delta='{"k": 1}')], ops.convert())
    [error] = errors
    assert isinstance(error, ProtocolError)
    assert '{"k": 1}' in str(error)
    assert contents(out) == [TextContent("hi"), ErrorContent(str(error))]


def test_a_tool_called_update_takes_a_result_or_an_error_like_its_content() -> None:
    """The content a ToolCalled update maps to forbids both fields: the update
    refuses them when it is built, so no stream ends on the content's bare
    ValueError halfway through."""
    with pytest.raises(ValueError, match="a result or an error, not both"):
        u.ToolCalled("c", result="out", error="timed out")
    updates = [u.TextDelta("hi"), u.ToolCalled("c", error="timed out")]
    out, errors = run(updates, ops.convert(), ops.aggregate())
    assert errors == []
    [response] = out
    assert response.text == "hi"
    assert [m.content for m in response.tool_messages] == ["Error: timed out"]


# ---------------------------------------------------------------- split_legacy_delta


def test_split_is_idempotent() -> None:
    once, _ = run(MIXED, ops.split_legacy_delta())
    twice, _ = run(MIXED, ops.split_legacy_delta(), ops.split_legacy_delta())
    assert once == twice


def test_split_passes_start_args_updates_and_objects_untouched() -> None:
    items = [*one_call("a", "f", "{}"), u.Uri("https://x"), STOP]
    out, errors = run(items, ops.split_legacy_delta())
    assert errors == []
    assert all(a is b for a, b in zip(out, items, strict=True))


def test_split_same_id_and_name_on_two_indexes_are_two_calls() -> None:
    """Each index is its own call, as openai-python reads it, even under one id."""
    out, errors = run(
        [
            D(0, id="a", name="f", arguments_delta='{"x": '),
            D(1, id="a", name="f", arguments_delta='{"x": 2}'),
            D(0, arguments_delta="1}"),
        ],
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        ops.flush_tool_calls(),
    )
    assert errors == []
    assert [(c.call_id, c.arguments) for c in callings(out)] == [("a", {"x": 1}), ("a_2", {"x": 2})]


def test_split_unicode_ids_names_and_a_huge_held_back_argument() -> None:
    body = json.dumps({"text": "日本語😀" * 20_000}, ensure_ascii=False)
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]
    updates = [D(0, id="çall-é", arguments_delta=p) for p in pieces]
    updates.append(D(0, name="écrire"))
    out, errors = run([*updates, TOOLS], ops.convert())
    assert errors == []
    [calling] = callings(out)
    assert (calling.call_id, calling.name) == ("çall-é", "écrire")
    assert calling.arguments == json.loads(body)


# ---------------------------------------------------------------- accumulate_tool_calls


def test_accumulate_updates_after_finish_start_a_new_llm_call() -> None:
    out, errors = run([u.TextDelta("a"), STOP, u.TextDelta("b"), STOP], ops.accumulate_tool_calls())
    assert errors == []
    started = [r for r in out if any(isinstance(e, ResponseStartedEvent) for e in r.events)]
    finished = [r for r in out if any(isinstance(e, FinishEvent) for e in r.events)]
    assert len(started) == 2
    assert len(finished) == 2


def test_accumulate_interleaved_parallel_calls_with_unicode_and_non_object_arguments() -> None:
    updates = [
        S("a", "f"),
        S("b", "g"),
        S("c", "h"),
        A("a", "[1, "),
        A("b", '"ünï'),
        A("c", "nu"),
        A("a", "2]"),
        A("b", 'cödé"'),
        A("c", "ll"),
        E("c"),
        E("b"),
        E("a"),
        TOOLS,
    ]
    out, errors = run(updates, ops.convert())
    assert errors == []
    assert [(c.call_id, c.arguments, c.error) for c in callings(out)] == [
        ("a", [1, 2], None),
        ("b", "ünïcödé", None),
        ("c", None, None),
    ]
    # No Parsed / Progress for arguments that are not an object.
    assert not [
        c
        for c in contents(out)
        if isinstance(c, (ToolCallArgsParsedContent, ToolCallArgsProgressContent))
    ]


def test_accumulate_on_completed_without_finish_gives_no_finish_event() -> None:
    out, errors = run([u.TextDelta("a")], ops.accumulate_tool_calls())
    assert errors == []
    assert [e for r in out for e in r.events] == [ResponseStartedEvent()]


# ---------------------------------------------------------------- parse_args_stream


def test_parse_on_hand_built_results_in_any_grouping_agrees_with_json_loads() -> None:
    args = {"path": 'a"\\é😀\n', "n": [1, {"x": None}], "s": ""}
    text = json.dumps(args, ensure_ascii=True)
    grouped = [R(contents=[ToolCallStartContent("c", "f"), ToolCallArgsContent("c", text[:5])])]
    grouped += [R(contents=[ToolCallArgsContent("c", ch)]) for ch in text[5:]]
    grouped.append(R(contents=[ToolCallEndContent("c")]))
    out, errors = run(grouped, ops.parse_args_stream())
    assert errors == []
    parsed = {c.name: c.value for c in contents(out) if isinstance(c, ToolCallArgsParsedContent)}
    assert parsed == args
    grown = "".join(
        c.value
        for c in contents(out)
        if isinstance(c, ToolCallArgsProgressContent) and c.name == "path"
    )
    assert grown == args["path"]


def test_parse_invalid_then_more_arguments_never_raises() -> None:
    frags = ['{"a": 1', "}}}", '"b": 2', "\x00"]
    results = [R(contents=[ToolCallStartContent("c", "f")])]
    results += [R(contents=[ToolCallArgsContent("c", f)]) for f in frags]
    out, errors = run(results, ops.parse_args_stream())
    assert errors == []
    assert [c for c in contents(out) if isinstance(c, ToolCallArgsParsedContent)] == [
        ToolCallArgsParsedContent("c", "a", 1)
    ]


# ---------------------------------------------------------------- flush_tool_calls


@pytest.mark.parametrize("raw", ["", " \n", "{}"])
def test_flush_empty_arguments_become_an_empty_object(raw: str) -> None:
    out, _ = run([*one_call("c", "f", raw), TOOLS], ops.convert())
    [calling] = callings(out)
    assert calling.arguments == {}
    assert calling.error is None


def test_flush_keeps_both_calls_when_a_call_id_is_reused_in_the_next_llm_call() -> None:
    """accumulate_tool_calls() lets a call id be reused after a Finish (a new LLM
    call); flush_tool_calls() owes one ToolCallingContent per *ended* call, so
    the first call (ended, not yet flushed) must not be overwritten by the second."""
    updates = [
        *one_call("call_0", "f", '{"x": 1}'),
        TOOLS,
        *one_call("call_0", "g", '{"y": 2}'),
        TOOLS,
    ]
    out, errors = run(updates, ops.accumulate_tool_calls(), ops.flush_tool_calls())
    assert errors == []
    assert [(c.name, c.arguments) for c in callings(out)] == [("f", {"x": 1}), ("g", {"y": 2})]


def test_flush_ignores_argument_fragments_after_the_end_as_eager_mode_does() -> None:
    """ToolCallEndContent means the arguments are complete. With eager=True the call
    is flushed with what it had at its end; eager=False must flush the same call,
    not one corrupted by a stray fragment that arrives after the end."""
    results = [
        R(contents=[ToolCallStartContent("a", "f"), ToolCallArgsContent("a", '{"k": 1}')]),
        R(contents=[ToolCallEndContent("a")]),
        R(contents=[ToolCallArgsContent("a", "garbage")]),
    ]
    eager, _ = run(results, ops.flush_tool_calls(eager=True))
    lazy, _ = run(results, ops.flush_tool_calls())
    assert [c.arguments for c in callings(eager)] == [{"k": 1}]
    assert callings(lazy) == callings(eager)


def test_flush_eager_and_lazy_give_the_same_calls() -> None:
    lazy, _ = run(MIXED, ops.convert())
    eager, _ = run(MIXED, ops.convert(eager=True))
    key = sorted((c.call_id, json.dumps(c.arguments)) for c in callings(lazy))
    assert key == sorted((c.call_id, json.dumps(c.arguments)) for c in callings(eager))
    assert len(key) == 2


# ---------------------------------------------------------------- aggregate


def test_aggregate_on_hand_built_results_without_events() -> None:
    results = [
        R(contents=[TextContent("a"), ReasoningContent("r")]),
        R(contents=[ToolCallingContent("c", "f", {"k": 1}, '{"k": 1}')]),
        R(contents=[ToolCalledContent("c", result="ok")]),
        R(contents=[UsageContent(Usage(1, 1, 2))]),
    ]
    [response], errors = run(results, ops.aggregate("me"))
    assert errors == []
    assert response.text == "a"
    assert response.reasoning_text == "r"
    assert response.tool_calls == (ToolCall("c", "f", {"k": 1}),)
    assert [m.content for m in response.tool_messages] == ["ok"]
    assert response.usage == Usage(1, 1, 2)
    assert response.source_agent_id == "me"
    assert not response.interrupted


def test_aggregate_of_nothing_is_an_empty_response() -> None:
    [response], errors = run([], ops.aggregate())
    assert errors == []
    assert response == AgentResponse()


def test_aggregate_keeps_non_object_and_invalid_arguments() -> None:
    updates = [*one_call("a", "f", "[1]"), *one_call("b", "g", "{oops"), TOOLS]
    [response], _ = run(updates, ops.convert(), ops.aggregate())
    a, b = response.tool_calls
    assert a.arguments == [1]
    assert (b.arguments, b.raw_arguments) == (None, "{oops")
    assert b.error is not None
    assert response.turn_transcript[0].to_openai()["tool_calls"][1]["function"] == {
        "name": "g",
        "arguments": "{oops",
    }


def _peak(make: Callable[[], Iterator[Any]], *operators: Any) -> int:
    tracemalloc.start()
    try:
        reactivex.from_iterable(make()).pipe(*operators).subscribe(lambda _: None)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


N_DELTAS = 40_000


def test_aggregate_does_not_retain_one_object_per_text_delta() -> None:
    """No per-delta retention: 40k four-character text deltas (160 kB of text)
    must not cost aggregate() a list of 40k separate strings (about 60 bytes
    each, 15x the text) until completion."""

    def deltas() -> Iterator[Any]:
        for i in range(N_DELTAS):
            yield u.TextDelta(f"{i % 10_000:04d}")
        yield STOP

    payload = 4 * N_DELTAS
    assert _peak(deltas, ops.accumulate_tool_calls(), ops.aggregate()) < 4 * payload


def test_convert_does_not_retain_one_object_per_argument_fragment() -> None:
    """No per-delta retention: a 160 kB argument in 40k fragments must not be kept
    as 40k strings (once by the flusher, twice by the streaming parser)."""

    def deltas() -> Iterator[Any]:
        yield S("c", "write")
        yield A("c", '{"content": "')
        for i in range(N_DELTAS):
            yield A("c", f"{i % 10_000:04d}")
        yield A("c", '"}')
        yield E("c")
        yield TOOLS

    payload = 4 * N_DELTAS
    assert _peak(deltas, ops.convert()) < 8 * payload


# ---------------------------------------------------------------- composition misuse


def test_convert_on_an_already_converted_stream_fails_instead_of_emitting_garbage() -> None:
    out, errors = run(MIXED, ops.convert(), ops.convert())
    assert len(errors) == 1
    assert callings(out) == []


# ---------------------------------------------------------------- emitted types


def test_results_are_immutable_tuples_even_from_lists() -> None:
    result = R(contents=[TextContent("a")], events=[FinishEvent(FinishReason.STOP)])
    assert type(result.contents) is tuple
    assert type(result.events) is tuple
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.contents = ()  # type: ignore[misc]
    response = AgentResponse(tool_calls=[ToolCall("c", "f")], turn_transcript=[])
    assert type(response.tool_calls) is tuple


ALL_TYPES: list[Any] = [
    TextContent("a", meta=ResponseMetadata("r", "m")),
    ToolCallStartContent("c", "f"),
    ToolCallArgsContent("c", "{"),
    ToolCallArgsProgressContent("c", "k", 3, "abc"),
    ToolCallEndContent("c"),
    ToolCalledContent("c", error="boom"),
    UsageContent(Usage(1, 2, 3)),
    ErrorContent("e"),
    ResponseStartedEvent("r", "m"),
    FinishEvent(FinishReason.STOP, Usage()),
    R("r", "m", FinishReason.STOP, [TextContent("a")], [FinishEvent(FinishReason.STOP)]),
]


@pytest.mark.parametrize("value", ALL_TYPES, ids=lambda v: type(v).__name__)
def test_emitted_values_are_hashable_picklable_and_equal_to_their_copies(value: Any) -> None:
    assert hash(value) == hash(copy.deepcopy(value))
    assert pickle.loads(pickle.dumps(value)) == value
    assert repr(value).startswith(type(value).__name__ + "(")
    assert not hasattr(value, "__dict__")


def test_meta_is_part_of_equality_but_not_of_match_args_or_repr() -> None:
    meta = ResponseMetadata("r", "m")
    assert TextContent("a") != TextContent("a", meta=meta)
    assert "meta" not in repr(TextContent("a", meta=meta))
    assert TextContent.__match_args__ == ("text",)
    match TextContent("a", meta=meta):
        case TextContent(text):
            assert text == "a"


def test_tool_called_content_result_and_error_are_exclusive_however_built() -> None:
    with pytest.raises(ValueError, match="not both"):
        ToolCalledContent("c", "r", "e")
    with pytest.raises(ValueError, match="not both"):
        attrs.evolve(ToolCalledContent("c", "r"), error="e")


def test_approval_event_keeps_non_hashable_arguments_by_value() -> None:
    out, _ = run([u.ToolApprovalRequest("c", "f", {"k": [1]}, "why")], ops.convert())
    [event] = [e for r in out for e in r.events if isinstance(e, ToolApprovalRequestEvent)]
    assert event == ToolApprovalRequestEvent("c", "f", {"k": [1]}, "why")
