"""``parse_args_stream()``: Progress and Parsed contents while tool-call arguments stream."""

from __future__ import annotations

import json
from typing import Any

import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ResponseMetadata,
    TextContent,
    ToolCallArgsContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
    ToolCallEndContent,
    ToolCallStartContent,
)
from rafrx.response import AgentResponseResult
from tests.operators import contents, marble, records, run, subscribed
from tests.strategies import argument_objects, chunks

R = AgentResponseResult
Parsed = ToolCallArgsParsedContent
Progress = ToolCallArgsProgressContent
META = ResponseMetadata("r", "m")


def parse(*updates: Any) -> list[Any]:
    """Contents after accumulate + parse_args_stream over ``updates``."""
    out, errors = run(updates, ops.accumulate_tool_calls(), ops.parse_args_stream())
    assert errors == []
    return contents(out)


def stream(call_id: str, name: str, pieces: list[str]) -> list[Any]:
    args = [u.ToolCallArgs(call_id, p) for p in pieces]
    return [u.ToolCallStart(call_id, name), *args, u.ToolCallEnd(call_id)]


# ---------------------------------------------------------------- marbles

LOOKUP: dict[str, Any] = {
    "s": R(contents=[ToolCallStartContent("c", "write", meta=META)]),
    "a": R(contents=[ToolCallArgsContent("c", '{"path": "a.', meta=META)]),
    "b": R(contents=[ToolCallArgsContent("c", 'py", "n": 1}', meta=META)]),
    "e": R(contents=[ToolCallEndContent("c", meta=META)]),
    "t": R(contents=[TextContent("hi")]),
    "A": R(
        contents=[
            ToolCallArgsContent("c", '{"path": "a.', meta=META),
            Progress("c", "path", 2, "a.", meta=META),
        ]
    ),
    "B": R(
        contents=[
            ToolCallArgsContent("c", 'py", "n": 1}', meta=META),
            Progress("c", "path", 4, "py", meta=META),
            Parsed("c", "path", "a.py", meta=META),
            Parsed("c", "n", 1, meta=META),
        ]
    ),
}


def test_marble_parsed_and_progress_follow_each_args_content() -> None:
    messages, subscriptions = marble(ops.parse_args_stream(), "-s-a-t-b-e-|", LOOKUP)
    assert messages == records("-s-A-t-B-e-|", LOOKUP)
    assert subscriptions == [subscribed(200, 310)]


def test_marble_upstream_error_is_forwarded_and_disposes() -> None:
    boom = ConnectionResetError("reset")
    messages, subscriptions = marble(ops.parse_args_stream(), "-s-a-#", LOOKUP, error=boom)
    assert messages == records("-s-A-#", LOOKUP, error=boom)
    assert messages[-1].value.exception is boom
    assert subscriptions == [subscribed(200, 250)]


def test_marble_unsubscribe_disposes_upstream() -> None:
    messages, subscriptions = marble(ops.parse_args_stream(), "-s-a-t-b-|", LOOKUP, disposed=255)
    assert messages == records("-s-A-t", LOOKUP)
    assert subscriptions == [subscribed(200, 255)]


# ---------------------------------------------------------------- semantics


def test_results_without_argument_deltas_pass_as_the_same_object() -> None:
    items = [LOOKUP["s"], LOOKUP["t"], LOOKUP["e"], R()]
    out, errors = run(items, ops.parse_args_stream())
    assert errors == []
    assert all(x is y for x, y in zip(out, items, strict=True))


def test_expanded_results_keep_id_model_finish_reason_and_events() -> None:
    from rafrx.events import ResponseStartedEvent

    started = ResponseStartedEvent("r", "m")
    item = R("r", "m", None, [ToolCallArgsContent("c", '{"k": 2}')], [started])
    out, _ = run([item], ops.parse_args_stream())
    assert out == [R("r", "m", None, [item.contents[0], Parsed("c", "k", 2)], [started])]


def test_a_parsable_prefix_does_not_complete_a_member() -> None:
    got = parse(*stream("c", "f", ['{"n": 12', "3", "}"]))
    assert [c for c in got if isinstance(c, Parsed)] == [Parsed("c", "n", 123)]
    assert got.index(Parsed("c", "n", 123)) == got.index(ToolCallArgsContent("c", "}")) + 1


def test_parallel_interleaved_calls_are_parsed_apart() -> None:
    got = parse(
        u.ToolCallStart("A", "read"),
        u.ToolCallStart("B", "write"),
        u.ToolCallArgs("A", '{"path"'),
        u.ToolCallArgs("B", '{"path"'),
        u.ToolCallArgs("B", ': "b.txt"}'),
        u.ToolCallArgs("A", ': "a.txt"}'),
    )
    parsed = [c for c in got if isinstance(c, Parsed)]
    assert parsed == [Parsed("B", "path", "b.txt"), Parsed("A", "path", "a.txt")]


def test_each_args_content_is_followed_by_its_own_events() -> None:
    item = R(
        contents=[
            ToolCallStartContent("A", "f"),
            ToolCallArgsContent("A", '{"x": 1,'),
            ToolCallStartContent("B", "g"),
            ToolCallArgsContent("B", '{"y": 2}'),
        ]
    )
    out, _ = run([item], ops.parse_args_stream())
    assert out[0].contents == (
        ToolCallStartContent("A", "f"),
        ToolCallArgsContent("A", '{"x": 1,'),
        Parsed("A", "x", 1),
        ToolCallStartContent("B", "g"),
        ToolCallArgsContent("B", '{"y": 2}'),
        Parsed("B", "y", 2),
    )


def test_invalid_json_stops_events_for_that_call_only_and_never_raises() -> None:
    got = parse(
        *stream("bad", "f", ['{"a": 1, ', "oops", ', "b": 2}']),
        *stream("good", "g", ['{"c": 3}']),
    )
    parsed = [c for c in got if isinstance(c, Parsed)]
    # "a" was complete before the error; nothing of "bad" comes after it.
    assert parsed == [Parsed("bad", "a", 1), Parsed("good", "c", 3)]
    assert ToolCallEndContent("bad") in got


def test_non_object_arguments_give_no_events() -> None:
    got = parse(*stream("c", "f", ["[1, ", '"two"]']))
    assert not any(isinstance(c, Parsed | Progress) for c in got)


def test_escaped_surrogate_pair_split_between_deltas_is_never_split_in_progress() -> None:
    got = parse(*stream("c", "f", ['{"s": "a\\ud83d', "\\ude", "00b", '"}']))
    progress = [c for c in got if isinstance(c, Progress)]
    assert "".join(p.value for p in progress) == "a😀b"
    assert all("\ud83d" not in p.value for p in progress)
    assert [p.received for p in progress][-1] == len("a😀b".encode())
    assert Parsed("c", "s", "a😀b") in got


def test_progress_received_counts_utf8_bytes_of_the_decoded_value() -> None:
    got = parse(*stream("c", "f", ['{"s": "é', "中", '\\n"}']))
    progress = [(p.received, p.value) for p in got if isinstance(p, Progress)]
    assert progress == [(2, "é"), (5, "中"), (6, "\n")]


def test_meta_is_carried_from_the_args_content() -> None:
    out, _ = run(
        [R(contents=[ToolCallArgsContent("c", '{"k": "v"}', meta=META)])], ops.parse_args_stream()
    )
    assert all(c.meta == META for c in out[0].contents)


def test_state_is_per_subscription() -> None:
    piped = reactivex.from_iterable([LOOKUP["s"], LOOKUP["a"], LOOKUP["b"], LOOKUP["e"]]).pipe(
        ops.parse_args_stream()
    )
    first: list[R] = []
    second: list[R] = []
    piped.subscribe(first.append)
    piped.subscribe(second.append)
    assert first == second == [LOOKUP["s"], LOOKUP["A"], LOOKUP["B"], LOOKUP["e"]]


# ---------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(arguments=argument_objects(), ensure_ascii=st.booleans(), data=st.data())
def test_parsed_and_progress_agree_with_json_loads(
    arguments: dict[str, Any], ensure_ascii: bool, data: st.DataObject
) -> None:
    full = json.dumps(arguments, ensure_ascii=ensure_ascii)
    pieces = data.draw(chunks(full, max_pieces=40))
    got = parse(*stream("c", "f", pieces))
    expected = json.loads(full)

    parsed = [c for c in got if isinstance(c, Parsed)]
    assert [(p.name, p.value) for p in parsed] == list(expected.items())
    for p in parsed:
        assert p.value == expected[p.name]

    by_name: dict[str, str] = {}
    for p in (c for c in got if isinstance(c, Progress)):
        assert isinstance(expected[p.name], str)
        assert p.value, "a Progress carries new text"
        p.value.encode("utf-8")  # whole code points: no lone surrogate
        by_name[p.name] = by_name.get(p.name, "") + p.value
        assert p.received == len(by_name[p.name].encode("utf-8"))
    for name, value in expected.items():
        if isinstance(value, str):
            assert by_name.get(name, "") == value
        else:
            assert name not in by_name

    # Each Parsed comes after the delta that completed it, never before its Progress.
    for p in parsed:
        later = got[got.index(p) + 1 :]
        assert not any(isinstance(c, Progress) and c.name == p.name for c in later)


@settings(max_examples=60, deadline=None)
@given(arguments=argument_objects(), data=st.data())
def test_splitting_the_deltas_differently_never_changes_the_parsed_values(
    arguments: dict[str, Any], data: st.DataObject
) -> None:
    full = json.dumps(arguments, ensure_ascii=True)
    first = parse(*stream("c", "f", data.draw(chunks(full))))
    second = parse(*stream("c", "f", data.draw(chunks(full))))

    def parsed(got: list[Any]) -> list[Any]:
        return [c for c in got if isinstance(c, Parsed)]

    def text(got: list[Any]) -> dict[str, str]:
        out: dict[str, str] = {}
        for p in got:
            if isinstance(p, Progress):
                out[p.name] = out.get(p.name, "") + p.value
        return out

    assert parsed(first) == parsed(second)
    assert text(first) == text(second)


def test_a_whole_call_in_one_result_is_parsed_in_place() -> None:
    """Start, arguments and end in one result (a hand-built or batched result)."""
    whole = R(
        "r",
        "m",
        None,
        [
            ToolCallStartContent("c", "f"),
            ToolCallArgsContent("c", '{"path": "a", "n": 1}'),
            ToolCallEndContent("c"),
            TextContent("done"),
        ],
    )
    out, errors = run([whole], ops.parse_args_stream())
    assert errors == []
    assert contents(out) == [
        ToolCallStartContent("c", "f"),
        ToolCallArgsContent("c", '{"path": "a", "n": 1}'),
        Progress("c", "path", 1, "a"),
        Parsed("c", "path", "a"),
        Parsed("c", "n", 1),
        ToolCallEndContent("c"),
        TextContent("done"),
    ]
    assert (out[0].id, out[0].model) == ("r", "m")


def test_an_ended_call_is_forgotten_whether_its_end_came_with_arguments_or_alone() -> None:
    """After its end, arguments under the same id parse afresh (no leftover parser state)."""
    start, end = ToolCallStartContent("c", "f"), ToolCallEndContent("c")
    first = ToolCallArgsContent("c", '{"a": 1}')
    again = R(contents=[ToolCallArgsContent("c", '{"b": 2}')])
    with_arguments = [R(contents=[start, first, end]), again]
    alone = [R(contents=[start, first]), R(contents=[end]), again]
    for items in (with_arguments, alone):
        out, errors = run(items, ops.parse_args_stream())
        assert errors == []
        assert [c for c in contents(out) if isinstance(c, Parsed)] == [
            Parsed("c", "a", 1),
            Parsed("c", "b", 2),
        ]
