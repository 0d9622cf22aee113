"""Sentence-by-sentence checks of DESIGN.md claims that other tests leave thin.

Each test quotes the sentence it checks.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import pytest
import reactivex
from reactivex import operators as rx

from rafrx import (
    Agent,
    AgentResponseResult,
    ChatMessage,
    FinishEvent,
    InMemoryHistoryProvider,
    MessageRole,
    MessageSource,
    ResponseStartedEvent,
    TextContent,
    ToolCall,
    ToolCalledContent,
    ToolCallingContent,
    ToolCallStartContent,
    collect_agent_response,
)
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
)
from rafrx.errors import HTTPStatusError, ProtocolError, StreamInterrupted
from rafrx.response import FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.tools import format_result, tool
from rafrx.typing import Operator

D = u.ToolCallDelta


def run(
    updates: Iterable[Any], *operators: Operator[Any, Any]
) -> tuple[list[Any], list[Exception]]:
    """Everything the piped ``operators`` emit over ``updates``, and the errors."""
    out: list[Any] = []
    errors: list[Exception] = []
    reactivex.from_iterable(list(updates)).pipe(*operators).subscribe(out.append, errors.append)
    return out, errors


def contents(results: Iterable[AgentResponseResult]) -> list[Any]:
    """Every content of ``results``, in order."""
    return [c for r in results for c in r.contents]


def parsed_and_progress(args: Sequence[str]) -> list[Any]:
    """The Parsed / Progress contents for one call whose arguments arrive as ``args``."""
    updates: list[u.AgentResponseUpdate] = [u.ToolCallStart("c", "f")]
    updates += [u.ToolCallArgs("c", a) for a in args]
    out, errors = run(updates, ops.accumulate_tool_calls(), ops.parse_args_stream())
    assert errors == []
    return [
        c
        for c in contents(out)
        if isinstance(c, ToolCallArgsParsedContent | ToolCallArgsProgressContent)
    ]


# ---------------------------------------------------------------- split_legacy_delta


def test_split_two_indexes_sharing_an_id_stay_two_calls() -> None:
    """'each ToolCallDelta index becomes one call' (and 'parallel ... calls stay apart')."""
    stream = [
        u.ResponseMetadata("r", "m"),
        D(0, id="dup", name="f", arguments_delta='{"x": 1}'),
        D(1, id="dup", name="g", arguments_delta='{"y": 2}'),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    out, errors = run(stream, ops.convert(), ops.aggregate())
    assert errors == []
    calls = out[0].tool_calls
    # Two names: two calls, the second with an id of its own (the same id and name on
    # two indexes is one call going on: tests/operators/test_operators_adversarial.py).
    assert [(c.name, c.arguments) for c in calls] == [("f", {"x": 1}), ("g", {"y": 2})]
    assert [c.id for c in calls] == ["dup", "dup_2"]


def test_split_start_order_is_the_order_names_arrive_not_the_index_order() -> None:
    """'ToolCallEnd for every open call in start order just before Finish'."""
    out, errors = run(
        [
            D(1, id="b", name="g"),
            D(0, id="a", arguments_delta="{"),
            D(0, name="f", arguments_delta="}"),
            u.Finish(FinishReason.TOOL_CALLS),
        ],
        ops.split_legacy_delta(),
    )
    assert errors == []
    assert out == [
        u.ToolCallStart("b", "g"),
        u.ToolCallStart("a", "f"),
        u.ToolCallArgs("a", "{}"),
        u.ToolCallEnd("b"),
        u.ToolCallEnd("a"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]


def test_split_id_arriving_between_held_arguments_and_the_name_is_used() -> None:
    """'its id is the first non-empty id seen by then' (arguments held back until the name)."""
    out, errors = run(
        [D(0, arguments_delta='{"a"'), D(0, id="late"), D(0, name="f", arguments_delta=": 1}")],
        ops.split_legacy_delta(),
    )
    assert errors == []
    assert out == [
        u.ToolCallStart("late", "f"),
        u.ToolCallArgs("late", '{"a": 1}'),
        u.ToolCallEnd("late"),
    ]


def test_split_other_updates_pass_as_the_same_objects_in_order() -> None:
    """'Other updates pass.'"""
    others: list[u.AgentResponseUpdate] = [
        u.ResponseMetadata("r", "m"),
        u.TextDelta("é😀"),
        u.ReasoningDelta("think"),
        u.Uri("https://example.org", "text/html"),
        u.Usage(Usage(1, 2, 3)),
        u.ToolCalled("x", result="r"),
        u.ToolApprovalRequest("x", "f", {}, "d"),
    ]
    out, errors = run(others, ops.split_legacy_delta())
    assert errors == []
    assert len(out) == len(others)
    assert all(a is b for a, b in zip(out, others, strict=True))


def test_split_generated_ids_differ_for_calls_without_ids_in_one_response() -> None:
    """'else a generated id unique in the response'."""
    out, errors = run(
        [D(0, name="f", arguments_delta="{}"), D(1, name="f", arguments_delta="{}")],
        ops.split_legacy_delta(),
    )
    assert errors == []
    starts = [x for x in out if isinstance(x, u.ToolCallStart)]
    assert len(starts) == 2
    assert starts[0].id
    assert starts[1].id
    assert starts[0].id != starts[1].id


# ---------------------------------------------------------------- accumulate_tool_calls


def test_accumulate_one_response_started_per_llm_call_over_three_calls() -> None:
    """'An LLM call begins with the first update and with the first update after a Finish'."""
    stream = [
        u.ResponseMetadata("r1", "m"),
        u.TextDelta("a"),
        u.Finish(FinishReason.STOP),
        u.ResponseMetadata("r2", "m"),
        u.Finish(FinishReason.STOP),
        u.TextDelta("c"),
        u.Finish(FinishReason.LENGTH),
    ]
    out, errors = run(stream, ops.accumulate_tool_calls())
    assert errors == []
    started = [e for r in out for e in r.events if isinstance(e, ResponseStartedEvent)]
    finished = [e for r in out for e in r.events if isinstance(e, FinishEvent)]
    assert [e.id for e in started] == ["r1", "r2", "r2"]
    assert [e.finish_reason for e in finished] == [
        FinishReason.STOP,
        FinishReason.STOP,
        FinishReason.LENGTH,
    ]
    # every started event precedes its finish event
    kinds = [type(e).__name__[0] for r in out for e in r.events]
    assert kinds == ["R", "F", "R", "F", "R", "F"]


def test_accumulate_interleaved_calls_keep_their_own_names_and_arguments() -> None:
    """'state per call_id (name, args, start_emitted) so ... interleaved calls stay apart'."""
    stream = [
        u.ToolCallStart("a", "f"),
        u.ToolCallStart("b", "g"),
        u.ToolCallArgs("b", '{"q": "b'),
        u.ToolCallArgs("a", '{"q": "a'),
        u.ToolCallStart("a", "f"),  # a duplicate start: dropped
        u.ToolCallArgs("a", '"}'),
        u.ToolCallArgs("b", '"}'),
        u.ToolCallEnd("b"),
        u.ToolCallEnd("a"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    out, errors = run(stream, ops.convert(), ops.aggregate())
    assert errors == []
    calls = out[0].tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("a", "f", {"q": "a"}),
        ("b", "g", {"q": "b"}),
    ]


# ---------------------------------------------------------------- parse_args_stream


def test_parse_a_number_split_across_fragments_is_parsed_whole() -> None:
    """'A call never ends because its buffer happens to parse (a parsable prefix may be
    truncated input)'."""
    got = parsed_and_progress(['{"n": 1', "2", "3", "}"])
    assert got == [ToolCallArgsParsedContent("c", "n", 123)]


def test_parse_literals_and_nested_values_match_json_loads() -> None:
    """'Invariant (for objects without duplicate keys): every Parsed value equals
    json.loads(full)[name]'."""
    args = ['{"a": tr', 'ue, "b": {"x": [1, "}"]}, "c": -0.5e1', ' , "d": nu', "ll}"]
    full = json.loads("".join(args))
    parsed = [c for c in parsed_and_progress(args) if isinstance(c, ToolCallArgsParsedContent)]
    assert [(p.name, p.value) for p in parsed] == list(full.items())


def test_parse_progress_received_counts_utf8_bytes_of_decoded_escapes() -> None:
    """'received = UTF-8 bytes of the *decoded* value so far, value = the newly decoded
    fragment'."""
    got = parsed_and_progress(['{"s": "a\\', "n\\u00e", '9\\"x"}'])
    progress = [c for c in got if isinstance(c, ToolCallArgsProgressContent)]
    assert "".join(p.value for p in progress) == 'a\né"x'
    for i, p in enumerate(progress):
        so_far = "".join(q.value for q in progress[: i + 1])
        assert p.received == len(so_far.encode("utf-8"))
    assert got[-1] == ToolCallArgsParsedContent("c", "s", 'a\né"x')


def test_parse_raw_non_ascii_progress_is_whole_code_points() -> None:
    """'value = the newly decoded fragment, always whole code points'."""
    got = parsed_and_progress(['{"s": "日本', '😀"}'])
    progress = [c for c in got if isinstance(c, ToolCallArgsProgressContent)]
    assert [(p.received, p.value) for p in progress] == [(6, "日本"), (10, "😀")]


def test_parse_escaped_member_names_are_decoded() -> None:
    """'every Parsed value equals json.loads(full)[name]' (name as json.loads decodes it)."""
    args = '{"k\\u00e9y": 1, "a\\"b": "v"}'
    parsed = [c for c in parsed_and_progress([args]) if isinstance(c, ToolCallArgsParsedContent)]
    assert {p.name: p.value for p in parsed} == json.loads(args)


def test_parse_invalid_json_stops_events_even_if_valid_members_follow() -> None:
    """'Invalid JSON stops events for that call; no exception.'"""
    got = parsed_and_progress(['{"a": 1,, ', '"b": 2}'])
    assert got == [ToolCallArgsParsedContent("c", "a", 1)]


# ---------------------------------------------------------------- flush_tool_calls


@pytest.mark.parametrize("raw", ["", "   ", "\n\t"])
def test_flush_blank_arguments_through_convert_become_an_empty_object(raw: str) -> None:
    """'"" → {}'."""
    stream = [
        u.ToolCallStart("c", "f"),
        u.ToolCallArgs("c", raw),
        u.ToolCallEnd("c"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    out, errors = run(stream, ops.convert())
    assert errors == []
    callings = [c for c in contents(out) if isinstance(c, ToolCallingContent)]
    assert [(c.arguments, c.error) for c in callings] == [({}, None)]


def test_flush_trailing_garbage_is_invalid_and_raw_is_kept() -> None:
    """'invalid JSON → error set and raw_arguments kept' (one strict parse at the end)."""
    stream = [
        u.ToolCallStart("c", "f"),
        u.ToolCallArgs("c", '{"a": 1} x'),
        u.ToolCallEnd("c"),
    ]
    out, errors = run(stream, ops.accumulate_tool_calls(), ops.flush_tool_calls())
    assert errors == []
    calling = contents(out)[-1]
    assert isinstance(calling, ToolCallingContent)
    assert calling.error is not None
    assert calling.raw_arguments == '{"a": 1} x'


def test_flush_default_is_not_eager() -> None:
    """'flush_tool_calls(eager=False)': by default callings come after the last item."""
    stream = [
        u.ToolCallStart("c", "f"),
        u.ToolCallEnd("c"),
        u.TextDelta("after"),
    ]
    out, errors = run(stream, ops.accumulate_tool_calls(), ops.flush_tool_calls())
    assert errors == []
    kinds = [type(c).__name__ for c in contents(out)]
    assert kinds[-1] == "ToolCallingContent"
    assert kinds.index("TextContent") < kinds.index("ToolCallingContent")


# ---------------------------------------------------------------- aggregate


def _results_with_a_late_tool_result() -> list[AgentResponseResult]:
    """Two LLM calls; the first call's tool result arrives after the second call started."""
    return [
        AgentResponseResult(
            contents=(ToolCallStartContent("a", "f"), ToolCallingContent("a", "f", {})),
            events=(ResponseStartedEvent(None, None),),
        ),
        AgentResponseResult(
            finish_reason=FinishReason.TOOL_CALLS,
            events=(FinishEvent(FinishReason.TOOL_CALLS),),
        ),
        AgentResponseResult(
            contents=(TextContent("done"),), events=(ResponseStartedEvent(None, None),)
        ),
        AgentResponseResult(contents=(ToolCalledContent("a", "R"),)),
        AgentResponseResult(
            finish_reason=FinishReason.STOP, events=(FinishEvent(FinishReason.STOP),)
        ),
    ]


def test_aggregate_tool_message_belongs_to_the_step_of_its_call() -> None:
    """'turn_transcript = per step the assistant message (with tool_calls) and its tool
    messages ..., then the final assistant message'."""
    response = (
        reactivex.from_iterable(_results_with_a_late_tool_result()).pipe(ops.aggregate()).run()
    )
    shape = [(m.role, m.content) for m in response.turn_transcript]
    assert shape == [
        (MessageRole.ASSISTANT, ""),
        (MessageRole.TOOL, "R"),
        (MessageRole.ASSISTANT, "done"),
    ]


@pytest.mark.asyncio
async def test_aggregate_eager_pipeline_over_two_llm_calls_keeps_tool_results_in_their_step() -> (
    None
):
    """'the final answer is turn_transcript[-1]' with convert(eager=True) + execute_tools."""

    @tool
    def f() -> str:
        """Return R."""
        return "R"

    stream = [
        u.ToolCallStart("a", "f"),
        u.ToolCallEnd("a"),
        u.Finish(FinishReason.TOOL_CALLS),
        u.TextDelta("done"),
        u.Finish(FinishReason.STOP),
    ]
    results = reactivex.from_iterable(stream).pipe(ops.convert(eager=True), ops.execute_tools([f]))
    response = await asyncio.wait_for(collect_agent_response(results), 2)
    assert response.turn_transcript[-1] == ChatMessage(MessageRole.ASSISTANT, "done")


def test_aggregate_usage_sums_over_calls_and_counts_the_last_report_within_a_call() -> None:
    """'usage summed over LLM calls (Anthropic reports cumulative usage within a call:
    count it once)'."""
    stream = [
        u.Usage(Usage(10, 1, 11)),
        u.Usage(Usage(10, 5, 15)),  # cumulative: replaces the first report
        u.Finish(FinishReason.TOOL_CALLS),
        u.Finish(FinishReason.STOP, Usage(20, 2, 22, reasoning_tokens=1)),
    ]
    out, errors = run(stream, ops.convert(), ops.aggregate())
    assert errors == []
    assert out[0].usage == Usage(30, 7, 37, reasoning_tokens=1)


def test_aggregate_text_is_all_text_of_the_turn_in_order_across_steps() -> None:
    """'text is all assistant text of the turn in order (the final answer is
    turn_transcript[-1])'."""
    stream = [
        u.TextDelta("Let me "),
        u.TextDelta("check. "),
        u.Finish(FinishReason.TOOL_CALLS),
        u.TextDelta("Sunny, "),
        u.TextDelta("22 °C ☀"),
        u.Finish(FinishReason.STOP),
    ]
    out, errors = run(stream, ops.convert(), ops.aggregate())
    assert errors == []
    assert out[0].text == "Let me check. Sunny, 22 °C ☀"
    assert out[0].turn_transcript[-1].content == "Sunny, 22 °C ☀"


def test_aggregate_empty_final_answer_is_still_the_last_transcript_message() -> None:
    """'then the final assistant message' (even an empty one)."""
    stream = [u.TextDelta("thinking aloud"), u.Finish(FinishReason.TOOL_CALLS)]
    stream += [u.Finish(FinishReason.STOP)]
    out, errors = run(stream, ops.convert(), ops.aggregate())
    assert errors == []
    transcript = out[0].turn_transcript
    assert [m.content for m in transcript] == ["thinking aloud", ""]
    assert transcript[-1].role is MessageRole.ASSISTANT


# ---------------------------------------------------------------- execute_tools


@pytest.mark.asyncio
async def test_execute_tools_runs_a_call_whose_id_comes_back_in_the_next_llm_call() -> None:
    """'execute_tools(...): runs each ToolCalling' (ids may repeat across LLM calls)."""
    runs: list[int] = []

    @tool
    def f(n: int) -> int:
        """Count a run."""
        runs.append(n)
        return n

    stream = [
        u.ToolCallStart("call_0", "f"),
        u.ToolCallArgs("call_0", '{"n": 1}'),
        u.ToolCallEnd("call_0"),
        u.Finish(FinishReason.TOOL_CALLS),
        u.ToolCallStart("call_0", "f"),
        u.ToolCallArgs("call_0", '{"n": 2}'),
        u.ToolCallEnd("call_0"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    results = await asyncio.wait_for(
        reactivex.from_iterable(stream).pipe(
            ops.convert(eager=True), ops.execute_tools([f]), rx.to_list()
        ),
        2,
    )
    callings = [c for c in contents(results) if isinstance(c, ToolCallingContent)]
    assert [c.arguments for c in callings] == [{"n": 1}, {"n": 2}]
    assert sorted(runs) == [1, 2]


def test_format_result_non_str_results_are_valid_json() -> None:
    """'Non-str tool results are sent as JSON.'"""

    def strict(text: str) -> Any:
        def refuse(constant: str) -> Any:
            raise ValueError(f"not JSON: {constant}")

        return json.loads(text, parse_constant=refuse)

    assert strict(format_result({"a": [1, 2.5, None, True], "é": "😀"})) == {
        "a": [1, 2.5, None, True],
        "é": "😀",
    }
    assert strict(format_result(None)) is None
    for value in (math.nan, {"x": math.inf}):
        strict(format_result(value))


@pytest.mark.asyncio
async def test_execute_tools_error_text_names_the_exception_type_and_message() -> None:
    """'exceptions ... become error (its text names the exception type and message)'."""

    @tool
    def boom(key: str) -> str:
        """Fail."""
        raise LookupError(f"no such key: {key}")

    call = ToolCallingContent("c1", "boom", {"key": "ключ"})
    results = await asyncio.wait_for(
        reactivex.of(AgentResponseResult(contents=(call,))).pipe(
            ops.execute_tools([boom]), rx.to_list()
        ),
        2,
    )
    called = [c for c in contents(results) if isinstance(c, ToolCalledContent)]
    assert len(called) == 1
    assert called[0].result is None
    assert called[0].error is not None
    assert "LookupError" in called[0].error
    assert "no such key: ключ" in called[0].error


# ---------------------------------------------------------------- types


def test_tool_called_content_result_and_error_are_mutually_exclusive() -> None:
    """'ToolCalledContent(call_id, result=None, error=None) (result and error are mutually
    exclusive)'."""
    with pytest.raises((ValueError, TypeError)):
        ToolCalledContent("c", "r", "e")
    assert ToolCalledContent("c", error="e").result is None


def test_result_sequences_are_tuples_even_when_built_from_lists() -> None:
    """'frozen, slotted attrs classes; sequences are tuples'."""
    result = AgentResponseResult(contents=[TextContent("a")], events=[])
    assert isinstance(result.contents, tuple)
    assert isinstance(result.events, tuple)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.id = "x"  # type: ignore[misc]


# ---------------------------------------------------------------- errors


def _failing(updates: Sequence[u.AgentResponseUpdate], error: Exception) -> Any:
    """``updates`` then ``error``."""
    return reactivex.concat(reactivex.from_iterable(list(updates)), reactivex.throw(error))


def test_error_partial_keeps_a_call_that_ended_before_the_stream_failed() -> None:
    """'aggregate() re-raises the same error ... with .partial set to the AgentResponse built
    so far' (a cut call no longer vanishes; an ended one must not either)."""
    updates = [
        u.ToolCallStart("a", "f"),
        u.ToolCallArgs("a", '{"x": 1}'),
        u.ToolCallEnd("a"),
        u.ToolCallStart("b", "g"),
        u.ToolCallArgs("b", '{"y"'),
    ]
    partial_ids: dict[bool, list[str]] = {}
    for eager in (True, False):
        error = StreamInterrupted("dropped")
        errors: list[Exception] = []
        _failing(updates, error).pipe(ops.convert(eager=eager), ops.aggregate()).subscribe(
            on_error=errors.append
        )
        assert errors == [error]
        assert error.partial is not None
        partial_ids[eager] = [c.id for c in error.partial.tool_calls]
    assert partial_ids[True] == ["a", "b"]
    # (Failed earlier in this session: the non-eager partial dropped the ended call "a".)
    assert partial_ids[False] == ["a", "b"]


def test_error_a_protocol_error_in_split_gives_error_content_then_the_same_error() -> None:
    """'Before that, the converter emits a result holding an ErrorContent'."""
    stream = [D(0, id="x", arguments_delta="{}"), u.Finish(FinishReason.TOOL_CALLS)]
    out, errors = run(stream, ops.convert())
    assert len(errors) == 1
    assert isinstance(errors[0], ProtocolError)
    last = out[-1].contents
    assert len(last) == 1
    assert isinstance(last[0], ErrorContent)
    assert last[0].message == str(errors[0])


def test_error_http_status_and_body_survive_aggregate_unchanged() -> None:
    """'aggregate() re-raises the same error (same class, same .status/.body) with .partial'."""
    error = HTTPStatusError(503, body='{"error": "überlastet"}', provider_message="busy")
    errors: list[Exception] = []
    _failing([u.TextDelta("par"), u.TextDelta("tial")], error).pipe(
        ops.convert(), ops.aggregate()
    ).subscribe(on_error=errors.append)
    assert errors == [error]
    assert errors[0] is error
    assert error.status == 503
    assert error.body == '{"error": "überlastet"}'
    assert error.partial is not None
    assert error.partial.text == "partial"


# ---------------------------------------------------------------- agent and history


class _Scripted:
    """A client that plays one scripted list of updates per LLM call."""

    def __init__(self, *calls: list[u.AgentResponseUpdate]) -> None:
        self.calls = list(calls)
        self.requests: list[list[ChatMessage]] = []

    def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[Any] | None = None
    ) -> reactivex.Observable[u.AgentResponseUpdate]:
        self.requests.append(list(messages))
        return reactivex.from_iterable(self.calls.pop(0))


class _Context:
    """A context provider adding one system message."""

    async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        return [ChatMessage.system("facts", source=MessageSource.EXTERNAL)]


@pytest.mark.asyncio
async def test_agent_saves_new_input_and_transcript_never_loaded_or_context() -> None:
    """'InMemoryHistoryProvider (saves the turn's new input plus its turn_transcript; never
    what it loaded, CHAT_HISTORY, nor CONTEXT_PROVIDER messages)'."""

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    history = InMemoryHistoryProvider([ChatMessage.user("old"), ChatMessage.assistant("older")])
    client = _Scripted(
        [
            u.ToolCallStart("c1", "add"),
            u.ToolCallArgs("c1", '{"a": 1, "b": 2}'),
            u.ToolCallEnd("c1"),
            u.Finish(FinishReason.TOOL_CALLS),
        ],
        [u.TextDelta("3"), u.Finish(FinishReason.STOP)],
    )
    agent = Agent(
        client,
        tools=[add],
        instructions="be brief",
        history=history,
        context_providers=[_Context()],
    )
    injected = ChatMessage.system("inline", source=MessageSource.CONTEXT_PROVIDER)
    response = await asyncio.wait_for(agent.send([ChatMessage.user("q"), injected]), 2)
    assert response.text == "3"
    first = client.requests[0]
    assert [(m.role, m.content) for m in first] == [
        (MessageRole.SYSTEM, "be brief"),
        (MessageRole.SYSTEM, "facts"),
        (MessageRole.USER, "old"),
        (MessageRole.ASSISTANT, "older"),
        (MessageRole.USER, "q"),
        (MessageRole.SYSTEM, "inline"),
    ]
    assert first[1].source is MessageSource.CONTEXT_PROVIDER
    assert [(m.role, m.content) for m in history.messages] == [
        (MessageRole.USER, "old"),
        (MessageRole.ASSISTANT, "older"),
        (MessageRole.USER, "q"),
        (MessageRole.ASSISTANT, ""),
        (MessageRole.TOOL, "3"),
        (MessageRole.ASSISTANT, "3"),
    ]
    assert history.messages[3].tool_calls == (ToolCall("c1", "add", {"a": 1, "b": 2}),)


@pytest.mark.asyncio
async def test_agent_run_covers_every_llm_call_with_one_started_and_finish_each() -> None:
    """'run(message_or_messages) -> Observable[AgentResponseResult] covering every LLM call of
    the turn' and 'ResponseStartedEvent(id, model) (one per LLM call: the step boundary)'."""

    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    client = _Scripted(
        [
            u.ResponseMetadata("r1", "m"),
            D(0, id="c1", name="echo", arguments_delta='{"text": "é"}'),
            u.Finish(FinishReason.TOOL_CALLS),
        ],
        [u.ResponseMetadata("r2", "m"), u.TextDelta("ok"), u.Finish(FinishReason.STOP)],
    )
    results = await asyncio.wait_for(Agent(client, tools=[echo]).run("go").pipe(rx.to_list()), 2)
    events = [e for r in results for e in r.events]
    assert [type(e).__name__ for e in events] == [
        "ResponseStartedEvent",
        "FinishEvent",
        "ResponseStartedEvent",
        "FinishEvent",
    ]
    assert [e.id for e in events if isinstance(e, ResponseStartedEvent)] == ["r1", "r2"]
    called = [c for c in contents(results) if isinstance(c, ToolCalledContent)]
    assert [(c.call_id, c.result, c.error) for c in called] == [("c1", "é", None)]
    # the second request carries the tool loop: assistant with the call, then its result
    second = client.requests[1]
    assert second[-2].tool_calls == (ToolCall("c1", "echo", {"text": "é"}),)
    assert (second[-1].role, second[-1].tool_call_id, second[-1].content) == (
        MessageRole.TOOL,
        "c1",
        "é",
    )


# ---------------------------------------------------------------- finish reasons


def _anthropic_stop(reason: str) -> bytes:
    """An Anthropic stream whose message ends with ``reason``."""
    start = {
        "type": "message_start",
        "message": {"id": "m", "model": "c", "usage": {"input_tokens": 1, "output_tokens": 1}},
    }
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason},
        "usage": {"output_tokens": 2},
    }
    return (
        f"event: message_start\ndata: {json.dumps(start)}\n\n"
        f"event: message_delta\ndata: {json.dumps(delta)}\n\n"
        'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    ).encode()


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("tool_use", FinishReason.TOOL_CALLS),
        ("max_tokens", FinishReason.LENGTH),
        ("no_such_reason_💥", FinishReason.OTHER),
    ],
)
def test_anthropic_stop_reasons_map_as_the_design_says(reason: str, expected: FinishReason) -> None:
    """'Anthropic end_turn/stop_sequence→STOP, tool_use→TOOL_CALLS, max_tokens→LENGTH;
    unknown→OTHER'; and 'usage arrives once per LLM call ... never both'."""
    out: list[Any] = []
    errors: list[Exception] = []
    from_sse([_anthropic_stop(reason)], dialect="anthropic").subscribe(out.append, errors.append)
    assert errors == []
    finishes = [x for x in out if isinstance(x, u.Finish)]
    assert [f.finish_reason for f in finishes] == [expected]
    usage_updates = [x for x in out if isinstance(x, u.Usage)]
    assert (len(usage_updates), finishes[0].usage is not None) in {(1, False), (0, True)}
    total = finishes[0].usage or usage_updates[0].usage
    assert (total.prompt_tokens, total.completion_tokens) == (1, 2)
