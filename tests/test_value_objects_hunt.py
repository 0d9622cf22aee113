"""Bug hunt: the public value objects as users handle them.

Equality and hashing, copy / deepcopy / pickle, attrs.evolve, to_dict /
from_dict / JSON round trips (driven by the recorded fixtures replayed
through ``from_sse`` -> ``convert()`` -> ``aggregate()``), and reprs.
"""

from __future__ import annotations

import copy
import json
import math
import pathlib
import pickle
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx

import rafrx
from rafrx import errors as E
from rafrx import operators as ops
from rafrx import updates as U
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
    UriContent,
    UsageContent,
)
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import ChatMessage, MessageRole, MessageSource, ToolCall
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.sources import from_sse

FIXTURES = pathlib.Path(__file__).parent / "data" / "fixtures"
MANIFEST = json.loads((FIXTURES / "MANIFEST.json").read_text())
REPLAYABLE = [e for e in MANIFEST if e["format"] != "sse-only"]

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _replay(entry: dict[str, Any]) -> tuple[list[AgentResponseResult], AgentResponse, Any]:
    data = (FIXTURES / entry["path"]).read_bytes()
    results: list[AgentResponseResult] = []
    try:
        response = (
            from_sse([data], dialect=entry["format"])
            .pipe(ops.convert(), rx.do_action(results.append), ops.aggregate())
            .run()
        )
        return results, response, None
    except E.RafrxError as caught:
        error = caught
    assert error.partial is not None
    return results, error.partial, error


_CACHE: dict[str, tuple[list[AgentResponseResult], AgentResponse, Any]] = {}


def replay(entry: dict[str, Any]) -> tuple[list[AgentResponseResult], AgentResponse, Any]:
    if entry["path"] not in _CACHE:
        _CACHE[entry["path"]] = _replay(entry)
    return _CACHE[entry["path"]]


def _roundtrip_json(d: Any) -> Any:
    return json.loads(json.dumps(d, allow_nan=False))


# ----------------------------------------------------------------- fixtures


@pytest.mark.parametrize("entry", REPLAYABLE, ids=lambda e: e["path"])
def test_fixture_values_survive_pickle_deepcopy_and_dict_round_trips(entry: dict[str, Any]) -> None:
    results, response, err = replay(entry)
    assert results, "a recorded stream gives at least one result"
    # the final response
    assert pickle.loads(pickle.dumps(response)) == response
    assert copy.deepcopy(response) == response
    assert copy.copy(response) == response
    # every chunk
    assert [pickle.loads(pickle.dumps(r)) for r in results] == results
    assert copy.deepcopy(results) == results
    # messages: to_dict -> JSON -> from_dict gives an equal message
    for msg in (*response.turn_transcript, *response.tool_messages):
        back = ChatMessage.from_dict(_roundtrip_json(msg.to_dict()))
        assert back == msg
        assert pickle.loads(pickle.dumps(msg)) == msg
    # tool calls: to_dict -> JSON -> from_dict gives an equal call
    for call in response.tool_calls:
        assert ToolCall.from_dict(_roundtrip_json(call.to_dict())) == call
    # the response's own dict is strict JSON
    dumped = json.dumps(response.to_dict(), allow_nan=False)
    assert json.loads(dumped)["text"] == response.text
    # an error the stream ended with survives pickle with its partial and fields
    if err is not None:
        back_err = pickle.loads(pickle.dumps(err))
        assert type(back_err) is type(err)
        assert back_err.__dict__ == err.__dict__
        assert back_err.partial == response
        assert str(back_err) == str(err)


@pytest.mark.parametrize("entry", REPLAYABLE, ids=lambda e: e["path"])
def test_fixture_transcript_survives_openai_wire_round_trip_of_tool_calls(
    entry: dict[str, Any],
) -> None:
    _, response, _ = replay(entry)
    for msg in response.turn_transcript:
        back = ChatMessage.from_openai(_roundtrip_json(msg.to_openai()))
        assert back.role == msg.role
        assert back.content == msg.content
        assert back.reasoning == msg.reasoning
        got = [(c.id, c.name, c.arguments) for c in back.tool_calls or ()]
        want = [
            (c.id, c.name, c.arguments)
            for c in msg.tool_calls or ()
            if c.error is None and c.complete
        ]
        if all(c.error is None for c in msg.tool_calls or ()):
            assert got == want


def test_fixture_response_chunks_are_frozen() -> None:
    results, response, _ = replay(REPLAYABLE[0])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        response.text = "changed"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        results[0].contents = ()  # type: ignore[misc]
    assert isinstance(response.tool_calls, tuple)
    assert isinstance(response.turn_transcript, tuple)
    assert isinstance(results[0].contents, tuple)


# ----------------------------------------------------------------- contents

_text = st.text(max_size=20)
_opt_text = st.none() | _text
_meta = st.builds(ResponseMetadata, _opt_text, _opt_text)
_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
_json = st.recursive(
    _json_leaf,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_text, kids, max_size=4),
    max_leaves=12,
)
_usage = st.builds(
    Usage,
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
)
_reason = st.sampled_from(list(FinishReason))

_contents = st.one_of(
    st.builds(TextContent, _text, meta=_meta),
    st.builds(ReasoningContent, _text, meta=_meta, provider_data=st.none() | _json),
    st.builds(UriContent, _text, _opt_text, meta=_meta),
    st.builds(ToolCallStartContent, _text, _text, meta=_meta),
    st.builds(ToolCallArgsContent, _text, _text, meta=_meta),
    st.builds(ToolCallArgsParsedContent, _text, _text, _json, meta=_meta),
    st.builds(ToolCallArgsProgressContent, _text, _text, st.integers(0, 10**6), _text, meta=_meta),
    st.builds(ToolCallEndContent, _text, meta=_meta),
    st.builds(ToolCallingContent, _text, _text, _json, _text, _opt_text, meta=_meta),
    st.builds(
        ToolCallIncompleteContent, _text, _text, _text, _json, st.none() | _reason, meta=_meta
    ),
    st.builds(ToolCalledContent, _text, result=_text, meta=_meta),
    st.builds(ToolCalledContent, _text, error=_text, meta=_meta),
    st.builds(UsageContent, _usage, meta=_meta),
    st.builds(ErrorContent, _text, meta=_meta),
)
_events = st.one_of(
    st.builds(ResponseStartedEvent, _opt_text, _opt_text),
    st.builds(ToolApprovalRequestEvent, _text, _text, _json, _text),
    st.builds(FinishEvent, _reason, st.none() | _usage),
)
_updates = st.one_of(
    st.builds(U.TextDelta, _text),
    st.builds(U.ReasoningDelta, _text, provider_data=st.none() | _json),
    st.builds(U.ToolCallDelta, st.integers(0, 50), _opt_text, _opt_text, _text),
    st.builds(U.ToolCallStart, _text, _text),
    st.builds(U.ToolCallArgs, _text, _text),
    st.builds(U.ToolCallEnd, _text),
    st.builds(U.ToolCalled, _text, result=_text),
    st.builds(U.ToolCalled, _text, error=_text),
    st.builds(U.ToolApprovalRequest, _text, _text, _json, _text),
    st.builds(U.Usage, _usage),
    st.builds(U.Finish, _reason, st.none() | _usage),
    st.builds(U.Error, _text, error_type=_opt_text),
    st.builds(U.ResponseMetadata, _opt_text, _opt_text),
    st.builds(U.Uri, _text, _opt_text),
)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@FAST
@given(st.one_of(_contents, _events, _updates))
def test_value_objects_copy_pickle_and_hash_consistently(value: Any) -> None:
    for clone in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert type(clone) is type(value)
        assert clone == value
        if _hashable(value):
            assert hash(clone) == hash(value)
    # evolve with no change gives an equal value (the documented builder of attrs classes)
    assert attrs.evolve(value) == value
    # frozen
    first = attrs.fields(type(value))[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(value, first, getattr(value, first))


@FAST
@given(
    st.lists(_contents, max_size=5), st.lists(_events, max_size=3), _opt_text, st.none() | _reason
)
def test_agent_response_result_round_trips(
    contents: list[Any], events: list[Any], rid: Any, reason: Any
) -> None:
    result = AgentResponseResult(id=rid, finish_reason=reason, contents=contents, events=events)
    assert result.contents == tuple(contents)
    contents.append(TextContent("later"))  # the caller's list is not the result's
    assert len(result.contents) == len(contents) - 1
    assert pickle.loads(pickle.dumps(result)) == result
    assert copy.deepcopy(result) == result


@pytest.mark.parametrize(
    "cls",
    [
        TextContent,
        ReasoningContent,
        UriContent,
        ToolCallStartContent,
        ToolCallArgsContent,
        ToolCallArgsParsedContent,
        ToolCallArgsProgressContent,
        ToolCallEndContent,
        ToolCallingContent,
        ToolCallIncompleteContent,
        ToolCalledContent,
        UsageContent,
        ErrorContent,
    ],
)
def test_every_content_keeps_meta_keyword_only_and_out_of_match_args(cls: type) -> None:
    # DESIGN.md: every variant has keyword-only meta, outside __match_args__
    field = attrs.fields_dict(cls)["meta"]
    assert field.kw_only
    assert field.default == ResponseMetadata()
    assert "meta" not in cls.__match_args__


def test_meta_takes_part_in_equality_and_hash() -> None:
    a = TextContent("x", meta=ResponseMetadata("r1", "m"))
    b = TextContent("x", meta=ResponseMetadata("r2", "m"))
    assert a != b
    assert a == TextContent("x", meta=ResponseMetadata("r1", "m"))
    assert hash(a) == hash(TextContent("x", meta=ResponseMetadata("r1", "m")))


def test_tool_called_content_result_and_error_exclusive_also_through_evolve() -> None:
    ok = ToolCalledContent("c", result="42")
    with pytest.raises(ValueError, match="a result or an error, not both"):
        attrs.evolve(ok, error="boom")
    with pytest.raises(ValueError, match="a result or an error, not both"):
        ToolCalledContent("c", result="42", error="boom")
    with pytest.raises(ValueError, match="a result or an error, not both"):
        U.ToolCalled("c", result="42", error="boom")


def test_content_with_dict_field_is_clearly_unhashable_not_silently_wrong() -> None:
    c = ToolCallingContent("c", "f", {"a": 1})
    with pytest.raises(TypeError):
        hash(c)
    assert c == ToolCallingContent("c", "f", {"a": 1})


# ----------------------------------------------------------------- ToolCall

_call = st.builds(
    ToolCall,
    _text,
    _text,
    _json,
    raw_arguments=_opt_text,
    error=_opt_text,
    complete=st.booleans(),
    partial_value=_json,
)


@FAST
@given(_call)
def test_tool_call_to_dict_json_from_dict_round_trip(call: ToolCall) -> None:
    data = call.to_dict()
    back = ToolCall.from_dict(_roundtrip_json(data))
    assert back == call
    # to_dict hands out copies: mutating it never reaches the frozen call
    if isinstance(data["arguments"], dict):
        data["arguments"]["__injected__"] = 1
        assert "__injected__" not in (call.arguments or {})
    assert pickle.loads(pickle.dumps(call)) == call


def test_tool_call_non_finite_numbers_become_null_in_dict_and_json() -> None:
    call = ToolCall("c1", "f", {"x": float("nan"), "y": [float("inf"), 1.5]})
    data = call.to_dict()
    assert data["arguments"] == {"x": None, "y": [None, 1.5]}
    json.dumps(data, allow_nan=False)
    assert json.loads(call.arguments_json()) == {"x": None, "y": [None, 1.5]}


def test_tool_call_from_dict_ignores_unknown_keys_and_defaults() -> None:
    call = ToolCall.from_dict({"id": "c", "name": "f", "future_field": 1})
    assert call == ToolCall("c", "f", {})
    assert call.complete is True


# ----------------------------------------------------------------- ChatMessage

_call_clean = st.builds(ToolCall, st.text(min_size=1, max_size=10), _text, _json)
_block = st.dictionaries(st.sampled_from(["type", "id", "signature", "text"]), _text, max_size=4)
_provider_data = st.none() | st.dictionaries(
    st.sampled_from(["anthropic_thinking", "openai_reasoning", "opaque"]),
    st.lists(_block, max_size=3).map(tuple),
    max_size=3,
)
_message = st.builds(
    ChatMessage,
    st.sampled_from(list(MessageRole)),
    _text,
    name=_opt_text,
    tool_calls=st.none() | st.lists(_call, max_size=3),
    tool_call_id=_opt_text,
    source=st.none() | st.sampled_from(list(MessageSource)),
    reasoning=_opt_text,
    provider_data=_provider_data,
    is_error=st.booleans(),
)


@FAST
@given(_message)
def test_chat_message_to_dict_json_from_dict_round_trip(msg: ChatMessage) -> None:
    back = ChatMessage.from_dict(_roundtrip_json(msg.to_dict()))
    assert back == msg
    assert pickle.loads(pickle.dumps(msg)) == msg
    assert copy.deepcopy(msg) == msg


@FAST
@given(
    st.sampled_from(["", "Let me check.", "héllo \u2028 wörld"]),
    st.lists(_call_clean, min_size=1, max_size=3, unique_by=lambda c: c.id),
    _opt_text,
    st.none() | _text,
)
def test_assistant_with_tools_openai_wire_round_trip(
    text: str, calls: list[ToolCall], reasoning: str | None, name: str | None
) -> None:
    # messages.py docstring: ChatMessage.from_openai(msg.to_openai()) == msg
    msg = attrs.evolve(
        ChatMessage.assistant_with_tools(text, calls), reasoning=reasoning, name=name
    )
    back = ChatMessage.from_openai(_roundtrip_json(msg.to_openai()))
    assert back == msg


@FAST
@given(_text, st.text(min_size=1, max_size=10))
def test_tool_message_openai_wire_round_trip_keeps_all_but_source(
    result: str, call_id: str
) -> None:
    msg = ChatMessage.tool(result, call_id)
    back = ChatMessage.from_openai(_roundtrip_json(msg.to_openai()))
    assert back == msg.with_source(None)


def test_chat_message_role_given_as_string_equals_enum() -> None:
    a = ChatMessage("user", "hi")
    b = ChatMessage.user("hi")
    assert a == b
    assert hash(a) == hash(b)
    assert a.role is MessageRole.USER


def test_chat_message_source_given_as_string_behaves_like_equal_enum_message() -> None:
    a = ChatMessage("user", "hi", source="external")  # type: ignore[arg-type]
    b = ChatMessage.user("hi", source=MessageSource.EXTERNAL)
    assert a == b
    assert hash(a) == hash(b)
    assert a.to_dict() == b.to_dict()


def test_chat_message_frozen_and_tool_calls_is_a_copy() -> None:
    calls = [ToolCall("c1", "f", {})]
    msg = ChatMessage.assistant_with_tools("", calls)
    calls.append(ToolCall("c2", "g", {}))
    assert len(msg.tool_calls or ()) == 1
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        msg.content = "x"  # type: ignore[misc]


def test_chat_message_with_provider_data_dict_is_clearly_unhashable() -> None:
    msg = ChatMessage.from_dict(
        {"role": "assistant", "content": "", "provider_data": {"opaque": [{"type": "x"}]}}
    )
    with pytest.raises(TypeError):
        hash(msg)
    assert msg.provider_data == {"opaque": ({"type": "x"},)}


# ----------------------------------------------------------------- AgentResponse


def _sample_response() -> AgentResponse:
    call = ToolCall("c1", "now", {"tz": "UTC", "n": float("nan")})
    return AgentResponse(
        id="r1",
        model="m",
        text="Checking.",
        reasoning_text="hmm",
        tool_calls=[call],
        tool_messages=[ChatMessage.tool("12:00", "c1")],
        turn_transcript=[
            ChatMessage.assistant_with_tools("Checking.", [call]),
            ChatMessage.tool("12:00", "c1"),
        ],
        finish_reason=FinishReason.TOOL_CALLS,
        usage=Usage(1, 2, 3, reasoning_tokens=1),
        source_agent_id="agent",
        interrupted=True,
    )


def test_agent_response_to_dict_is_strict_json_and_complete() -> None:
    r = _sample_response()
    d = _roundtrip_json(r.to_dict())
    assert d["tool_calls"][0]["arguments"] == {"tz": "UTC", "n": None}
    assert d["finish_reason"] == "tool_calls"
    assert d["usage"]["reasoning_tokens"] == 1
    assert d["interrupted"] is True
    assert [ChatMessage.from_openai(m).content for m in d["turn_transcript"]] == [
        "Checking.",
        "12:00",
    ]
    assert set(d) >= {f.name for f in attrs.fields(AgentResponse)}


def test_agent_response_pickle_copy_evolve() -> None:
    r = _sample_response()
    # NaN != NaN: compare through pickling identity of everything else
    back = pickle.loads(pickle.dumps(r))
    assert back.to_dict() == r.to_dict()
    assert attrs.evolve(r, text="other").text == "other"
    assert attrs.evolve(r, tool_calls=[]).tool_calls == ()
    clean = attrs.evolve(r, tool_calls=[ToolCall("c1", "now", {"tz": "UTC"})], turn_transcript=[])
    assert pickle.loads(pickle.dumps(clean)) == clean
    assert copy.deepcopy(clean) == clean
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        r.usage = None  # type: ignore[misc]


def test_usage_add_and_hash() -> None:
    a, b = Usage(1, 2, 3), Usage(4, 5, 9, cached_tokens=2)
    assert a + b == Usage(5, 7, 12, cached_tokens=2)
    assert hash(Usage(1, 2, 3)) == hash(a)
    with pytest.raises(TypeError):
        a + 1  # type: ignore[operator]
    assert pickle.loads(pickle.dumps(FinishReason.STOP)) is FinishReason.STOP


# ----------------------------------------------------------------- errors

ERRORS: list[E.RafrxError] = [
    E.RafrxError("base", status=500, body="b", retryable=True),
    E.TransportError("t"),
    E.StreamInterrupted("si"),
    E.StreamTimeout("st"),
    E.ConnectTimeout("ct"),
    E.IdleTimeout("idle"),
    E.HTTPStatusError(
        429,
        body="{}",
        provider_message="slow",
        error_type="rate",
        code="c",
        retry_after=2.5,
        request_id="req_1",
    ),
    E.HTTPStatusError(302, message="HTTP 302 from x"),
    E.ProtocolError("p"),
    E.ContentTypeError("ct", body="<html>"),
    E.LimitExceeded("too big", limit=10),
    E.MalformedEvent("bad", raw="{oops", event_name="message"),
    E.IncompleteStream("inc"),
    E.ProviderError("over", error_type="overloaded_error", code="x", retryable=True, body="b"),
    E.ToolError("te", call_id="c1", name="f"),
    E.ToolNotFound("nf", call_id="c1", name="f"),
    E.InvalidToolArguments("ia", call_id="c1"),
    E.ToolTimeout("to", name="f"),
    E.ToolApprovalDenied("no"),
    E.ToolExecutionError("ex"),
    E.MaxStepsExceeded("max"),
]


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__ + ":" + e.message)
def test_errors_survive_pickle_copy_deepcopy(err: E.RafrxError) -> None:
    err.partial = AgentResponse(text="so far", interrupted=True)
    err.attempts = 3
    err.add_note("a note")
    for clone in (pickle.loads(pickle.dumps(err)), copy.copy(err), copy.deepcopy(err)):
        assert type(clone) is type(err)
        assert clone.__dict__ == err.__dict__
        assert clone.args == err.args
        assert str(clone) == str(err)
        assert repr(clone) == repr(err)
        assert clone.retryable == err.retryable
        assert clone.partial == err.partial
        assert clone.attempts == 3


def test_error_pickle_through_all_protocols_keeps_subclass_fields() -> None:
    err = E.HTTPStatusError(503, body="x" * 10, provider_message="down", retry_after=1.0)
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(err, protocol=proto))
        assert (
            back.status,
            back.body,
            back.provider_message,
            back.retry_after,
            back.retryable,
        ) == (
            503,
            "x" * 10,
            "down",
            1.0,
            True,
        )


def test_user_subclass_of_rafrx_error_with_positional_init_pickles() -> None:
    class Custom(E.RafrxError):
        def __init__(self, code: int, detail: str) -> None:
            super().__init__(f"{code}: {detail}")
            self.code = code
            self.detail = detail

    globals()["Custom"] = Custom
    Custom.__qualname__ = "Custom"
    try:
        back = pickle.loads(pickle.dumps(Custom(7, "boom")))
        assert (back.code, back.detail, str(back)) == (7, "boom", "7: boom")
    finally:
        del globals()["Custom"]


def test_error_message_and_repr_are_bounded_on_a_megabyte() -> None:
    huge = "x" * 1_000_000
    for err in (
        E.RafrxError(huge, body=huge),
        E.ProviderError(huge, body=huge),
        E.MalformedEvent(huge, raw=huge),
        E.HTTPStatusError(500, body=huge, message=huge),
    ):
        assert len(err.message) < E.MAX_BODY_CHARS + 100
        assert len(str(err)) < E.MAX_BODY_CHARS + 100
        assert len(repr(err)) < E.MAX_BODY_CHARS + 200
        assert err.body is None or len(err.body) < E.MAX_BODY_CHARS + 100
        if isinstance(err, E.MalformedEvent):
            assert len(err.raw) < E.MAX_BODY_CHARS + 100


def test_errors_are_catchable_by_hierarchy() -> None:
    assert issubclass(E.IdleTimeout, E.StreamTimeout)
    assert issubclass(E.StreamTimeout, E.TransportError)
    assert issubclass(E.ContentTypeError, E.ProtocolError)
    assert issubclass(E.ToolTimeout, E.ToolError)
    assert all(isinstance(e, (rafrx.RafrxError, Exception)) for e in ERRORS)
    assert E.HTTPStatusError(503).retryable
    assert not E.HTTPStatusError(400).retryable


# ----------------------------------------------------------------- history


def test_in_memory_history_load_hands_out_copies_and_round_trips() -> None:
    import asyncio

    msg = ChatMessage.from_dict(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "f", "arguments": {"a": [1]}}],
            "provider_data": {"opaque": [{"type": "sig", "signature": "s"}]},
        }
    )
    history = InMemoryHistoryProvider()
    asyncio.run(history.save([msg, ChatMessage.tool("ok", "c1")]))
    loaded = asyncio.run(history.load())
    assert [m.source for m in loaded] == [MessageSource.CHAT_HISTORY] * 2
    assert loaded[0].with_source(None) == msg
    loaded[0].tool_calls[0].arguments["a"].append(2)  # type: ignore[index]
    assert history.messages[0].tool_calls[0].arguments == {"a": [1]}  # type: ignore[index]
    # saving what was loaded never duplicates
    asyncio.run(history.save(loaded))
    assert len(history.messages) == 2
    assert pickle.loads(pickle.dumps(history)).messages == history.messages
    assert repr(history) == "InMemoryHistoryProvider(2 messages)"


# ----------------------------------------------------------------- finite values


def test_non_finite_argument_value_survives_message_to_dict_as_null() -> None:
    call = ToolCall("c", "f", {"x": float("inf")}, raw_arguments='{"x": 1e400}')
    msg = ChatMessage.assistant_with_tools("", [call])
    d = _roundtrip_json(msg.to_dict())
    assert d["tool_calls"][0]["arguments"] == {"x": None}
    # the wire keeps the model's own text for 1e400
    wire = msg.to_openai()["tool_calls"][0]["function"]["arguments"]
    assert wire == '{"x": 1e400}'
    assert math.isinf(json.loads(wire)["x"])


# ----------------------------------------------------------------- deep arguments


def _deep_call_response(depth: int) -> AgentResponse:
    import reactivex

    raw = '{"a":' * depth + "1" + "}" * depth
    turn = [
        U.ToolCallDelta(0, id="c1", name="f", arguments_delta=raw),
        U.Finish(FinishReason.TOOL_CALLS),
    ]
    return reactivex.from_iterable(turn).pipe(ops.convert(), ops.aggregate()).run()


def test_deeply_nested_arguments_survive_to_dict_like_they_survive_the_wire() -> None:
    response = _deep_call_response(500)
    call = response.tool_calls[0]
    assert call.error is None
    assert isinstance(call.arguments, dict)
    json.dumps(call.arguments)  # Python's own JSON copes
    assert response.turn_transcript[0].to_openai()["tool_calls"][0]["id"] == "c1"
    # ... and so must the storage forms
    assert ToolCall.from_dict(json.loads(json.dumps(call.to_dict()))) == call
    msg = response.turn_transcript[0]
    assert ChatMessage.from_dict(json.loads(json.dumps(msg.to_dict()))) == msg
    assert json.loads(json.dumps(response.to_dict()))["tool_calls"][0]["id"] == "c1"


def test_moderately_nested_arguments_to_dict_round_trip() -> None:
    response = _deep_call_response(100)
    call = response.tool_calls[0]
    assert ToolCall.from_dict(json.loads(json.dumps(call.to_dict()))) == call


# ----------------------------------------------------------------- aliasing


def _scribble(value: Any) -> None:
    """Mutate every dict and list reachable from ``value``."""
    if isinstance(value, dict):
        for v in list(value.values()):
            _scribble(v)
        value["__scribbled__"] = True
    elif isinstance(value, list):
        for v in list(value):
            _scribble(v)
        value.append("__scribbled__")


@pytest.mark.parametrize("entry", REPLAYABLE, ids=lambda e: e["path"])
def test_exported_wire_and_storage_dicts_never_alias_the_frozen_values(
    entry: dict[str, Any],
) -> None:
    _, response, _ = replay(entry)
    before = copy.deepcopy(response)
    _scribble(response.to_dict())
    for msg in response.turn_transcript:
        _scribble(msg.to_dict())
        _scribble(msg.to_openai())
    for call in response.tool_calls:
        _scribble(call.to_dict())
    _scribble(rafrx.messages.to_anthropic([ChatMessage.user("hi"), *response.turn_transcript])[1])
    assert response == before


def test_from_openai_and_from_anthropic_copy_their_input() -> None:
    msg = ChatMessage.from_openai(_WIRE)
    before = copy.deepcopy(msg)
    wire = copy.deepcopy(_WIRE)
    msg = ChatMessage.from_openai(wire)
    _scribble(wire)
    assert msg == before
    blocks = [
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": [1]}},
    ]
    anth = [{"role": "assistant", "content": blocks}]
    back = rafrx.messages.from_anthropic(None, anth)
    before_anth = copy.deepcopy(back)
    _scribble(anth)
    assert back == before_anth


_WIRE: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "f", "arguments": {"a": [1]}},
            "extra_content": {"google": {"thought_signature": "sig"}},
        },
    ],
    "reasoning_details": [{"type": "reasoning.text", "text": "t"}],
}


def test_from_dict_copies_its_input_like_from_openai_does() -> None:
    msg = ChatMessage.from_openai(copy.deepcopy(_WIRE))
    stored = msg.to_dict()
    back = ChatMessage.from_dict(stored)
    before = copy.deepcopy(back)
    _scribble(stored)
    assert back == before
    call_data = {"id": "c", "name": "f", "arguments": {"a": [1]}}
    call = ToolCall.from_dict(call_data)
    call_data["arguments"]["a"].append(2)
    assert call.arguments == {"a": [1]}


# ----------------------------------------------------------------- history

_hist_msg = st.builds(
    ChatMessage,
    st.sampled_from(list(MessageRole)),
    _text,
    source=st.none() | st.sampled_from(list(MessageSource)),
)


@FAST
@given(st.lists(_hist_msg, max_size=8), st.lists(_hist_msg, max_size=4))
def test_in_memory_history_saves_only_new_messages_and_never_duplicates(
    first: list[ChatMessage], second: list[ChatMessage]
) -> None:
    import asyncio

    from rafrx.history import is_new

    history = InMemoryHistoryProvider()
    asyncio.run(history.save(first))
    kept = [m for m in first if is_new(m)]
    assert list(history.messages) == kept
    loaded = asyncio.run(history.load())
    assert [m.with_source(None) for m in loaded] == [m.with_source(None) for m in kept]
    assert all(m.source is MessageSource.CHAT_HISTORY for m in loaded)
    asyncio.run(history.save([*loaded, *second]))
    assert list(history.messages) == kept + [m for m in second if is_new(m)]


def test_value_classes_are_re_exported_from_rafrx() -> None:
    from rafrx import content, events, response

    for module in (content, events, response):
        for name in module.__all__:
            assert getattr(rafrx, name) is getattr(module, name)
    for name in (
        "ChatMessage",
        "ToolCall",
        "MessageRole",
        "MessageSource",
        "RafrxError",
        "HTTPStatusError",
        "InMemoryHistoryProvider",
    ):
        assert hasattr(rafrx, name)
