"""Unit tests of the dialects, UpdateDecoder and from_sse, with hand-written events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import (
    IncompleteStream,
    LimitExceeded,
    MalformedEvent,
    ProviderError,
    RafrxError,
)
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources import (
    DIALECTS,
    AnthropicDialect,
    OpenAIChatDialect,
    OpenAIResponsesDialect,
    UpdateDecoder,
    from_sse,
    get_dialect,
)
from rafrx.sse import ServerSentEvent

# ---------------------------------------------------------------- helpers


def ev(data: Any, event: str = "message") -> ServerSentEvent:
    """An event whose data is ``data`` (JSON-encoded unless it is a str)."""
    return ServerSentEvent(event=event, data=data if isinstance(data, str) else json.dumps(data))


def sse(*events: Any) -> bytes:
    """A body: each item is data (dict/str) or an (event name, data) pair."""
    out = []
    for item in events:
        name, data = item if isinstance(item, tuple) else (None, item)
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {"object": "chat.completion.chunk", "choices": [choice], **extra}


def run_all(dialect: Any, *events: ServerSentEvent) -> list[u.AgentResponseUpdate]:
    out: list[u.AgentResponseUpdate] = []
    for event in events:
        out += dialect.feed(event)
    out += dialect.close()
    return out


def aggregate(body: bytes, dialect: str = "openai-chat") -> AgentResponse:
    response = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    assert isinstance(response, AgentResponse)
    return response


def collect(body: Any, dialect: str = "openai-chat") -> tuple[list[Any], list[Exception], bool]:
    items: list[Any] = []
    errors: list[Exception] = []
    done: list[bool] = []
    from_sse(body, dialect).subscribe(items.append, errors.append, lambda: done.append(True))
    return items, errors, bool(done)


def tool_deltas(updates: list[u.AgentResponseUpdate]) -> list[u.ToolCallDelta]:
    return [x for x in updates if isinstance(x, u.ToolCallDelta)]


# ---------------------------------------------------------------- registry


def test_registry_names_and_fresh_instances() -> None:
    assert set(DIALECTS) == {"openai-chat", "anthropic", "openai-responses"}
    assert isinstance(get_dialect("openai-chat"), OpenAIChatDialect)
    assert isinstance(get_dialect("anthropic"), AnthropicDialect)
    assert isinstance(get_dialect("openai-responses"), OpenAIResponsesDialect)
    assert get_dialect("anthropic") is not get_dialect("anthropic")


def test_unknown_dialect_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match="'anthropic', 'openai-chat', 'openai-responses'"):
        get_dialect("gemini")
    with pytest.raises(ValueError, match="unknown dialect 'gemini'"):
        from_sse(b"", "gemini")
    with pytest.raises(ValueError, match="unknown dialect"):
        UpdateDecoder("gemini")


def test_from_sse_rejects_str_and_non_iterables() -> None:
    with pytest.raises(TypeError, match="bytes, not str"):
        from_sse("data: [DONE]\n\n")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int"):
        from_sse(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------- openai-chat


def test_chat_metadata_first_then_text_and_held_finish() -> None:
    d = OpenAIChatDialect()
    out = run_all(
        d,
        ev(chunk({"role": "assistant", "content": "Hel"}, id="c1", model="gpt")),
        ev(chunk({"content": "lo"}, id="c1", model="gpt")),
        ev(chunk({}, "stop", id="c1", model="gpt")),
        ev("[DONE]"),
    )
    assert out == [
        u.ResponseMetadata("c1", "gpt"),
        u.TextDelta("Hel"),
        u.TextDelta("lo"),
        u.Finish(FinishReason.STOP),
    ]
    assert d.done


def test_chat_tool_calls_without_index() -> None:
    d = OpenAIChatDialect()
    out = run_all(
        d,
        ev(chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{"}}]})),
        ev(chunk({"tool_calls": [{"function": {"arguments": "}"}}]})),  # continues "a"
        ev(chunk({"tool_calls": [{"function": {"name": "g", "arguments": "{}"}}]})),  # new
        ev(chunk({"tool_calls": [{"id": "a", "function": {"arguments": " "}}]})),  # same id
        ev(chunk({"tool_calls": [{"id": "c", "function": {"arguments": "["}}]})),  # new id
        ev(chunk({"tool_calls": [{"function": {"arguments": "]"}}]})),  # continues "c"
        ev(chunk({}, "tool_calls")),
        ev("[DONE]"),
    )
    assert tool_deltas(out) == [
        u.ToolCallDelta(0, "a", "f", "{"),
        u.ToolCallDelta(0, None, None, "}"),
        u.ToolCallDelta(1, None, "g", "{}"),
        u.ToolCallDelta(0, "a", None, " "),
        u.ToolCallDelta(2, "c", None, "["),
        u.ToolCallDelta(2, None, None, "]"),
    ]


def test_chat_several_calls_in_one_delta_become_separate_calls() -> None:
    calls = [
        {"id": "p1", "function": {"name": "plus", "arguments": '{"a": 1}'}},
        {"id": "m1", "function": {"name": "minus", "arguments": '{"a": 2}'}},
    ]
    body = sse(chunk({"tool_calls": calls}, "tool_calls"), "[DONE]")
    response = aggregate(body)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("p1", "plus", {"a": 1}),
        ("m1", "minus", {"a": 2}),
    ]
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_chat_index_reused_with_a_new_id_is_a_new_call() -> None:
    body = sse(
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": 1}'}}]}),
        chunk({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "g"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"y": 2}'}}]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("a", "f", {"x": 1}),
        ("b", "g", {"y": 2}),
    ]


def test_chat_index_not_zero_and_explicit_nulls_and_object_arguments() -> None:
    d = OpenAIChatDialect()
    out = run_all(
        d,
        ev(chunk({"content": None, "tool_calls": None, "refusal": None})),
        ev(chunk({"tool_calls": [{"index": 1, "id": "t", "function": {"name": "f"}}]})),
        ev(chunk({"tool_calls": [{"index": 1, "id": None, "function": {"name": None}}]})),
        ev(chunk({"tool_calls": [{"index": 1, "function": {"arguments": {"k": "é"}}}]})),
        ev(chunk(None, "tool_calls")),
        ev("[DONE]"),
    )
    assert tool_deltas(out) == [
        u.ToolCallDelta(1, "t", "f", ""),
        u.ToolCallDelta(1, None, None, '{"k": "é"}'),
    ]


def test_chat_reasoning_content_array_and_refusal() -> None:
    d = OpenAIChatDialect()
    out = run_all(
        d,
        ev(chunk({"reasoning_content": "think", "reasoning": "think"})),  # vLLM sends both
        ev(chunk({"reasoning": "more"})),
        ev(chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "T"}]}]})),
        ev(chunk({"content": [{"type": "text", "text": "A"}, {"type": "image_url"}]})),
        ev(chunk({"refusal": "No."}, "stop")),
        ev("[DONE]"),
    )
    assert out == [
        u.ReasoningDelta("think"),
        u.ReasoningDelta("more"),
        u.ReasoningDelta("T"),
        u.TextDelta("A"),
        u.TextDelta("No."),
        u.Finish(FinishReason.STOP),
    ]


def test_chat_only_choice_zero_is_read() -> None:
    first = chunk({"content": "zero"})
    other = {"choices": [{"index": 1, "delta": {"content": "one"}, "finish_reason": "length"}]}
    out = run_all(OpenAIChatDialect(), ev(other), ev(first), ev(chunk({}, "stop")), ev("[DONE]"))
    assert out == [u.TextDelta("zero"), u.Finish(FinishReason.STOP)]


def test_chat_usage_is_reported_once_with_the_finish() -> None:
    def usage(n: int) -> dict[str, Any]:
        return {
            "prompt_tokens": 10,
            "completion_tokens": n,
            "total_tokens": 10 + n,
            "completion_tokens_details": {"reasoning_tokens": 1},
            "prompt_tokens_details": {"cached_tokens": 4},
        }

    body = sse(
        chunk({"content": "a"}, usage=usage(1)),
        chunk({"content": "b"}, "stop", usage=usage(2)),
        {"object": "chat.completion.chunk", "choices": [], "usage": usage(3)},
        "[DONE]",
    )
    items, errors, completed = collect(body)
    assert completed
    assert not errors
    finishes = [x for x in items if isinstance(x, u.Finish)]
    assert not any(isinstance(x, u.Usage) for x in items)
    assert finishes == [u.Finish(FinishReason.STOP, Usage(10, 3, 13, 1, 4))]
    assert aggregate(body).usage == Usage(10, 3, 13, 1, 4)  # the last one, not a sum


def test_chat_non_chunk_objects_give_no_metadata_but_their_choices_and_usage() -> None:
    azure = {"object": "", "id": "", "model": "", "choices": [], "prompt_filter_results": []}
    late = {"object": "", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    out = run_all(
        OpenAIChatDialect(),
        ev(azure),
        ev(chunk({"content": "x"}, id="c", model="m")),
        ev(chunk({}, "stop")),
        ev(late),
        ev("[DONE]"),
    )
    assert out[0] == u.ResponseMetadata("c", "m")
    assert out[-1] == u.Finish(FinishReason.STOP, Usage(1, 1, 2))


def test_chat_done_then_garbage_is_not_read() -> None:
    body = sse(chunk({"content": "ok"}, "stop"), "[DONE]", "{garbage", ("error", "{}"))
    decoder = UpdateDecoder("openai-chat")
    assert decoder.feed(body) == [u.TextDelta("ok"), u.Finish(FinishReason.STOP)]
    assert decoder.done
    assert decoder.feed(b"data: {more garbage}\n\n") == []
    assert decoder.close() == []
    items, errors, completed = collect(body)
    assert completed
    assert not errors
    assert items[-1] == u.Finish(FinishReason.STOP)


def test_chat_done_without_finish_reason_is_other() -> None:
    assert run_all(OpenAIChatDialect(), ev("[DONE]")) == [u.Finish(FinishReason.OTHER)]


def test_chat_finish_reason_without_done_counts_as_complete() -> None:
    d = OpenAIChatDialect()
    out = run_all(d, ev(chunk({"content": "x"}, "length")))
    assert out == [u.TextDelta("x"), u.Finish(FinishReason.LENGTH)]
    assert d.done


def test_chat_missing_terminal_marker_is_incomplete() -> None:
    d = OpenAIChatDialect()
    assert d.feed(ev(chunk({"content": "cut"}))) == [u.TextDelta("cut")]
    with pytest.raises(IncompleteStream):
        d.close()
    items, errors, completed = collect(sse(chunk({"content": "cut"})))
    assert items == [u.TextDelta("cut")]
    assert not completed
    assert len(errors) == 1
    assert isinstance(errors[0], IncompleteStream)


def test_chat_incomplete_stream_keeps_the_partial_response() -> None:
    body = sse(chunk({"content": "half an ans"}))
    with pytest.raises(IncompleteStream) as info:
        from_sse(body).pipe(ops.convert(), ops.aggregate()).run()
    assert info.value.partial is not None
    assert info.value.partial.text == "half an ans"


@pytest.mark.parametrize("data", ["{not json", '{"choices": [', "nul"])
def test_chat_malformed_json(data: str) -> None:
    with pytest.raises(MalformedEvent) as info:
        OpenAIChatDialect().feed(ev(data))
    assert info.value.raw == data
    assert info.value.event_name == "message"
    assert not isinstance(info.value.__cause__, json.JSONDecodeError)


@pytest.mark.parametrize(
    "payload",
    [
        [1, 2],
        "a string",
        {"choices": "nope"},
        {"choices": [42]},
        {"choices": [{"index": 0, "delta": "text"}]},
        {"choices": [{"index": 0, "delta": {"content": 5}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": -1}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]},
        {"choices": [], "usage": [1]},
    ],
)
def test_chat_wrong_shape_json(payload: Any) -> None:
    event = ev(payload)
    with pytest.raises(MalformedEvent) as info:
        OpenAIChatDialect().feed(event)
    assert info.value.raw == event.data


def test_chat_error_payload_is_a_provider_error() -> None:
    error = {"message": "Rate limit reached", "type": "rate_limit_exceeded", "code": 429}
    with pytest.raises(ProviderError) as info:
        OpenAIChatDialect().feed(ev({"error": error}))
    err = info.value
    assert (err.message, err.error_type, err.code, err.retryable) == (
        "Rate limit reached",
        "rate_limit_exceeded",
        "429",
        True,
    )


def test_chat_named_error_event_is_a_provider_error() -> None:
    payload = {"error": {"message": "bad tool", "type": "invalid_request_error", "code": "x"}}
    with pytest.raises(ProviderError) as info:
        OpenAIChatDialect().feed(ev(payload, event="error"))
    assert (info.value.message, info.value.error_type, info.value.retryable) == (
        "bad tool",
        "invalid_request_error",
        False,
    )
    with pytest.raises(ProviderError, match="upstream exploded"):
        OpenAIChatDialect().feed(ev("upstream exploded", event="error"))


def test_chat_error_mid_stream_keeps_the_partial_text() -> None:
    body = sse(
        chunk({"content": "Hello "}),
        chunk({"content": "wor"}),
        {"error": {"message": "Internal server error", "type": "server_error"}},
    )
    with pytest.raises(ProviderError) as info:
        from_sse(body).pipe(ops.convert(), ops.aggregate()).run()
    assert info.value.retryable
    assert info.value.partial is not None
    assert info.value.partial.text == "Hello wor"


def test_chat_unknown_events_and_fields_are_ignored() -> None:
    out = run_all(
        OpenAIChatDialect(),
        ev("ping", event="keepalive"),
        ev(chunk({"content": "x", "audio": {"id": 1}}, obfuscation="zz", newfield=[1])),
        ev(""),
        ev(chunk({}, "stop")),
        ev("[DONE]"),
    )
    assert out == [u.TextDelta("x"), u.Finish(FinishReason.STOP)]


# ---------------------------------------------------------------- anthropic


def a_ev(data: dict[str, Any]) -> ServerSentEvent:
    return ev(data, event=data["type"])


def message_start(**usage: int) -> dict[str, Any]:
    return {"type": "message_start", "message": {"id": "msg", "model": "claude", "usage": usage}}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str | None, **usage: int) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage}


STOP = {"type": "message_stop"}


def test_anthropic_thinking_then_tool_use() -> None:
    d = AnthropicDialect()
    out = run_all(
        d,
        a_ev(message_start(input_tokens=10, cache_read_input_tokens=5, output_tokens=1)),
        a_ev(block_start(0, {"type": "thinking", "thinking": ""})),
        a_ev(block_delta(0, {"type": "thinking_delta", "thinking": "Hmm"})),
        a_ev(block_delta(0, {"type": "thinking_delta", "thinking": "."})),
        a_ev(block_delta(0, {"type": "signature_delta", "signature": "sig"})),
        a_ev(block_stop(0)),
        a_ev({"type": "ping"}),
        a_ev(block_start(1, {"type": "tool_use", "id": "t1", "name": "f", "input": {}})),
        a_ev(block_delta(1, {"type": "input_json_delta", "partial_json": ""})),
        a_ev(block_delta(1, {"type": "input_json_delta", "partial_json": '{"a": 1}'})),
        a_ev(block_stop(1)),
        a_ev(message_delta("tool_use", output_tokens=20)),
        a_ev(STOP),
    )
    assert out == [
        u.ResponseMetadata("msg", "claude"),
        u.ReasoningDelta("Hmm"),
        u.ReasoningDelta("."),
        u.ReasoningDelta(
            "", provider_data={"type": "thinking", "thinking": "Hmm.", "signature": "sig"}
        ),
        u.ToolCallStart("t1", "f"),
        u.ToolCallArgs("t1", '{"a": 1}'),
        u.ToolCallEnd("t1"),
        u.Finish(FinishReason.TOOL_CALLS, Usage(15, 20, 35, cached_tokens=5)),
    ]
    assert d.done


def test_anthropic_redacted_thinking_initial_input_and_citations() -> None:
    out = run_all(
        AnthropicDialect(),
        a_ev(block_start(0, {"type": "redacted_thinking", "data": "opaque"})),
        a_ev(block_stop(0)),
        a_ev(block_start(1, {"type": "text", "text": "Hi "})),
        a_ev(block_delta(1, {"type": "citations_delta", "citation": {"url": "https://x.org"}})),
        a_ev(block_start(2, {"type": "tool_use", "id": "t", "name": "f", "input": {"k": 1}})),
        a_ev(block_stop(2)),
        a_ev(message_delta("tool_use", output_tokens=3)),
        a_ev(STOP),
    )
    assert out[:5] == [
        u.ReasoningDelta("", provider_data={"type": "redacted_thinking", "data": "opaque"}),
        u.TextDelta("Hi "),
        u.Uri("https://x.org"),
        u.ToolCallStart("t", "f"),
        u.ToolCallArgs("t", '{"k": 1}'),
    ]


def test_anthropic_server_tool_blocks_are_not_client_calls() -> None:
    out = run_all(
        AnthropicDialect(),
        a_ev(block_start(0, {"type": "server_tool_use", "id": "s", "name": "web_search"})),
        a_ev(block_delta(0, {"type": "input_json_delta", "partial_json": '{"q": "x"}'})),
        a_ev(block_stop(0)),
        a_ev(block_start(1, {"type": "web_search_tool_result", "content": []})),
        a_ev(block_stop(1)),
        a_ev(message_delta("end_turn")),
        a_ev(STOP),
    )
    server_use = {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"q": "x"}}
    assert out == [  # no ToolCallStart: kept whole, to go back as they came
        u.ReasoningDelta("", provider_data=server_use),
        u.ReasoningDelta("", provider_data={"type": "web_search_tool_result", "content": []}),
        u.Finish(FinishReason.STOP),
    ]


def test_anthropic_deltas_after_a_block_stop_are_ignored() -> None:
    tool = {"type": "tool_use", "id": "t", "name": "f"}
    out = run_all(
        AnthropicDialect(),
        a_ev(block_start(0, tool)),
        a_ev(block_delta(0, {"type": "input_json_delta", "partial_json": "{}"})),
        a_ev(block_stop(0)),
        a_ev(block_delta(0, {"type": "input_json_delta", "partial_json": " "})),
        a_ev(block_stop(0)),
        a_ev(message_delta("tool_use")),
        a_ev(STOP),
    )
    assert out == [
        u.ToolCallStart("t", "f"),
        u.ToolCallArgs("t", "{}"),
        u.ToolCallEnd("t"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]


def test_anthropic_usage_is_cumulative_and_reported_once() -> None:
    body = sse(
        ("message_start", message_start(input_tokens=100, output_tokens=1)),
        ("content_block_delta", block_delta(0, {"type": "text_delta", "text": "x"})),
        ("message_delta", message_delta(None, output_tokens=5)),
        ("message_delta", message_delta("end_turn", output_tokens=9)),
        ("message_stop", STOP),
    )
    items, errors, completed = collect(body, "anthropic")
    assert completed
    assert not errors
    assert not any(isinstance(x, u.Usage) for x in items)
    assert [x for x in items if isinstance(x, u.Finish)] == [
        u.Finish(FinishReason.STOP, Usage(100, 9, 109))
    ]


def test_anthropic_unstopped_tool_block_is_kept_cut_short() -> None:
    body = sse(
        ("content_block_start", block_start(0, {"type": "tool_use", "id": "t", "name": "f"})),
        ("content_block_delta", block_delta(0, {"type": "input_json_delta", "partial_json": "{"})),
        ("message_delta", message_delta("max_tokens", output_tokens=1)),
        ("message_stop", STOP),
    )
    response = aggregate(body, "anthropic")
    assert [(c.id, c.complete, c.raw_arguments) for c in response.tool_calls] == [("t", False, "{")]
    assert response.finish_reason is FinishReason.LENGTH


def test_anthropic_stop_reason_without_message_stop_is_complete() -> None:
    out = run_all(AnthropicDialect(), a_ev(message_delta("end_turn", output_tokens=2)))
    assert out == [u.Finish(FinishReason.STOP, Usage(0, 2, 2))]


def test_anthropic_missing_terminal_marker_is_incomplete() -> None:
    d = AnthropicDialect()
    d.feed(a_ev(message_start(input_tokens=1)))
    with pytest.raises(IncompleteStream):
        d.close()


@pytest.mark.parametrize(
    ("error_type", "retryable"),
    [
        ("overloaded_error", True),
        ("api_error", True),
        ("rate_limit_error", True),
        ("invalid_request_error", False),
    ],
)
def test_anthropic_error_event(error_type: str, retryable: bool) -> None:
    payload = {"type": "error", "error": {"type": error_type, "message": "Overloaded"}}
    with pytest.raises(ProviderError) as info:
        AnthropicDialect().feed(ev(payload, event="error"))
    assert info.value.error_type == error_type
    assert info.value.message == "Overloaded"
    assert info.value.retryable is retryable


def test_anthropic_malformed_and_wrong_shape() -> None:
    with pytest.raises(MalformedEvent) as info:
        AnthropicDialect().feed(ev("{oops", event="content_block_delta"))
    assert (info.value.raw, info.value.event_name) == ("{oops", "content_block_delta")
    for bad in (
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_delta", "index": 0, "delta": "x"},
        {"type": "content_block_start", "index": 0},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use"}},
        {"type": "message_start", "message": []},
    ):
        with pytest.raises(MalformedEvent):
            AnthropicDialect().feed(a_ev(bad))


def test_anthropic_unknown_events_and_deltas_are_ignored_and_unknown_blocks_kept() -> None:
    """A block type added after this was written is kept whole, to go back as it came."""
    out = run_all(
        AnthropicDialect(),
        a_ev({"type": "ping"}),
        a_ev({"type": "brand_new_event", "x": 1}),
        a_ev(block_start(0, {"type": "new_block"})),
        a_ev(block_delta(0, {"type": "new_delta", "stuff": 1})),
        a_ev(block_stop(0)),
        a_ev(message_delta("end_turn")),
        a_ev(STOP),
    )
    assert out == [
        u.ReasoningDelta("", provider_data={"type": "new_block"}),
        u.Finish(FinishReason.STOP),
    ]


# ---------------------------------------------------------------- openai-responses


def r(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def fc_item(status: str = "in_progress", arguments: str = "") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "f",
        "arguments": arguments,
        "status": status,
    }


def test_responses_dispatch_on_type_without_event_lines() -> None:
    body = sse(
        r("response.created", response={"id": "resp_1", "model": "gpt-5"}),
        r("response.reasoning_summary_text.delta", delta="Plan"),
        r("response.reasoning_text.delta", delta="ning"),
        r("response.output_text.delta", delta="Hi"),
        r("response.completed", response={"usage": {"input_tokens": 3, "output_tokens": 2}}),
    )
    items, errors, completed = collect(body, "openai-responses")
    assert completed
    assert not errors
    assert items == [
        u.ResponseMetadata("resp_1", "gpt-5"),
        u.ReasoningDelta("Plan"),
        u.ReasoningDelta("ning"),
        u.TextDelta("Hi"),
        u.Finish(FinishReason.STOP, Usage(3, 2, 5)),
    ]


def test_responses_function_call_ends_once() -> None:
    out = run_all(
        OpenAIResponsesDialect(),
        ev(r("response.output_item.added", item=fc_item())),
        ev(r("response.function_call_arguments.delta", item_id="fc_1", delta='{"a"')),
        ev(r("response.function_call_arguments.delta", item_id="fc_1", delta=": 1}")),
        ev(r("response.function_call_arguments.done", item_id="fc_1", arguments='{"a": 1}')),
        ev(r("response.output_item.done", item=fc_item("completed", '{"a": 1}'))),
        ev(r("response.completed", response={})),
    )
    assert out == [
        u.ToolCallStart("call_1", "f"),
        u.ToolCallArgs("call_1", '{"a"'),
        u.ToolCallArgs("call_1", ": 1}"),
        u.ToolCallEnd("call_1"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]


def test_responses_function_call_without_deltas_sends_the_whole_arguments() -> None:
    out = run_all(
        OpenAIResponsesDialect(),
        ev(r("response.output_item.added", item=fc_item())),
        ev(r("response.function_call_arguments.done", item_id="fc_1", arguments='{"b": 2}')),
        ev(r("response.completed", response={})),
    )
    assert out == [
        u.ToolCallStart("call_1", "f"),
        u.ToolCallArgs("call_1", '{"b": 2}'),
        u.ToolCallEnd("call_1"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    only_done = run_all(
        OpenAIResponsesDialect(),
        ev(r("response.output_item.done", item=fc_item("completed", "{}"))),
        ev(r("response.completed", response={})),
    )
    assert only_done[:3] == [
        u.ToolCallStart("call_1", "f"),
        u.ToolCallArgs("call_1", "{}"),
        u.ToolCallEnd("call_1"),
    ]


def test_responses_annotations_are_uris_without_duplicates() -> None:
    ann = [{"type": "url_citation", "url": "https://a.example"}]
    both = [*ann, {"type": "url_citation", "url": "https://b.example"}]
    part = {"type": "output_text", "text": "x"}
    out = run_all(
        OpenAIResponsesDialect(),
        ev(
            r(
                "response.output_text.annotation.added",
                item_id="m",
                content_index=0,
                annotation=ann[0],
            )
        ),
        ev(
            r(
                "response.content_part.done",
                item_id="m",
                content_index=0,
                part={**part, "annotations": both},
            )
        ),
        ev(
            r(
                "response.output_item.done",
                item={"type": "message", "id": "m", "content": [{**part, "annotations": both}]},
            )
        ),
        ev(r("response.completed", response={})),
    )
    assert out == [
        u.Uri("https://a.example"),
        u.Uri("https://b.example"),
        u.TextDelta("x"),  # (no text event came: the finished item's text)
        u.Finish(FinishReason.STOP),
    ]


def test_responses_incomplete_maps_the_reason() -> None:
    out = run_all(
        OpenAIResponsesDialect(),
        ev(r("response.output_text.delta", delta="cut")),
        ev(
            r(
                "response.incomplete",
                response={"incomplete_details": {"reason": "max_output_tokens"}},
            )
        ),
    )
    assert out == [u.TextDelta("cut"), u.Finish(FinishReason.LENGTH)]


def test_responses_failed_and_error_events() -> None:
    failed = r(
        "response.failed",
        response={"status": "failed", "error": {"code": "server_error", "message": "boom"}},
    )
    with pytest.raises(ProviderError) as info:
        OpenAIResponsesDialect().feed(ev(failed))
    assert (info.value.message, info.value.code, info.value.retryable) == (
        "boom",
        "server_error",
        True,
    )
    nested = r("error", error={"type": "invalid_request_error", "message": "bad", "code": "c"})
    flat = r("error", code="rate_limit_exceeded", message="slow down")
    with pytest.raises(ProviderError) as info:
        OpenAIResponsesDialect().feed(ev(nested, event="error"))
    assert (info.value.error_type, info.value.message, info.value.retryable) == (
        "invalid_request_error",
        "bad",
        False,
    )
    with pytest.raises(ProviderError) as info:
        OpenAIResponsesDialect().feed(ev(flat))  # no event: line, type "error"
    assert (info.value.code, info.value.message, info.value.retryable) == (
        "rate_limit_exceeded",
        "slow down",
        True,
    )


def test_responses_missing_completed_is_incomplete_and_malformed_json() -> None:
    d = OpenAIResponsesDialect()
    d.feed(ev(r("response.output_text.delta", delta="x")))
    with pytest.raises(IncompleteStream):
        d.close()
    with pytest.raises(MalformedEvent) as info:
        OpenAIResponsesDialect().feed(ev("[1,", event="response.output_text.delta"))
    assert info.value.raw == "[1,"
    with pytest.raises(MalformedEvent):
        OpenAIResponsesDialect().feed(ev(["not", "an", "object"]))
    with pytest.raises(MalformedEvent):
        OpenAIResponsesDialect().feed(ev(r("response.output_item.added", item="x")))


def test_responses_unknown_event_types_are_ignored() -> None:
    out = run_all(
        OpenAIResponsesDialect(),
        ev(r("response.web_search_call.searching", item_id="ws")),
        ev(r("response.something_new", payload=[1, 2])),
        ev(r("response.completed", response={})),
    )
    assert out == [u.Finish(FinishReason.STOP)]


# ---------------------------------------------------------------- UpdateDecoder


def test_update_decoder_keeps_updates_received_before_an_error_in_the_same_chunk() -> None:
    body = sse(chunk({"content": "kept"}), {"error": {"message": "late failure"}})
    decoder = UpdateDecoder("openai-chat")
    assert decoder.feed(body) == [u.TextDelta("kept")]
    assert decoder.done
    with pytest.raises(ProviderError, match="late failure"):
        decoder.close()
    with pytest.raises(ProviderError, match="late failure"):
        decoder.feed(b"data: [DONE]\n\n")


def test_update_decoder_raises_at_once_when_nothing_came_before_the_error() -> None:
    decoder = UpdateDecoder("openai-chat")
    with pytest.raises(MalformedEvent):
        decoder.feed(b"data: {oops}\n\n")


def test_update_decoder_accepts_a_dialect_factory() -> None:
    class Shouty(OpenAIChatDialect):
        def feed(self, event: ServerSentEvent) -> list[u.AgentResponseUpdate]:
            return [
                u.TextDelta(x.delta.upper()) if isinstance(x, u.TextDelta) else x
                for x in super().feed(event)
            ]

    body = sse(chunk({"content": "hi"}, "stop"), "[DONE]")
    assert from_sse(body, Shouty).pipe(ops.convert(), ops.aggregate()).run().text == "HI"


@pytest.mark.parametrize("split", [None, "after-done"], ids=["one-read", "two-reads"])
def test_update_decoder_ignores_a_limit_exceeded_after_the_terminal_marker(
    split: str | None,
) -> None:
    """Bytes after ``[DONE]`` are not read, so a line past the limit there does not
    fail the stream, whether it comes in the same read or not."""
    body = sse(chunk({"content": "Hi"}, "stop"), "[DONE]") + b"data: " + b"x" * 300
    cut_at = body.index(b"[DONE]") + 8
    chunks = [body] if split is None else [body[:cut_at], body[cut_at:]]
    decoder = UpdateDecoder("openai-chat", max_line_bytes=200)
    updates: list[u.AgentResponseUpdate] = []
    for piece in chunks:
        updates += decoder.feed(piece)
        if decoder.done:
            break
    updates += decoder.close()
    assert [type(x).__name__ for x in updates] == ["TextDelta", "Finish"]


@pytest.mark.parametrize("split", [None, "after-event"], ids=["one-read", "two-reads"])
def test_update_decoder_delivers_the_updates_before_a_limit_exceeded(split: str | None) -> None:
    """An event, then a line past the limit: its update first, then the error,
    whether the two come in the same read or not."""
    body = sse(chunk({"content": "Hi"})) + b"data: " + b"x" * 300
    cut_at = body.index(b"\n\n") + 2
    chunks = [body] if split is None else [body[:cut_at], body[cut_at:]]
    items: list[Any] = []
    errors: list[Exception] = []
    from_sse(chunks, max_line_bytes=200).subscribe(items.append, errors.append)
    assert items == [u.TextDelta("Hi")]
    assert [type(e) for e in errors] == [LimitExceeded]


def test_sse_limits_fail_the_stream_with_limit_exceeded() -> None:
    body = sse(chunk({"content": "x" * 200}, "stop"), "[DONE]")
    items: list[Any] = []
    errors: list[Exception] = []
    from_sse(body, max_line_bytes=100).subscribe(items.append, errors.append)
    assert items == []
    assert len(errors) == 1
    assert isinstance(errors[0], LimitExceeded)


# ---------------------------------------------------------------- from_sse, sync


BODY = sse(
    chunk({"content": "Hello"}, id="c9", model="m"),
    chunk({}, "stop"),
    "[DONE]",
)


def test_from_sse_sync_sources_are_cold_and_replay() -> None:
    source = from_sse([BODY[:7], BODY[7:]])
    first: list[Any] = []
    second: list[Any] = []
    source.subscribe(first.append)
    source.subscribe(second.append)
    assert (
        first
        == second
        == [
            u.ResponseMetadata("c9", "m"),
            u.TextDelta("Hello"),
            u.Finish(FinishReason.STOP),
        ]
    )


def test_from_sse_one_shot_generator_stops_at_done_and_is_closed() -> None:
    state = {"read": 0, "closed": False}

    def body() -> Iterator[bytes]:
        try:
            for piece in (BODY, b"data: {never read}\n\n", b"data: {nor this}\n\n"):
                state["read"] += 1
                yield piece
        finally:
            state["closed"] = True

    source = from_sse(body())
    items, errors, completed = [], [], []
    source.subscribe(items.append, errors.append, lambda: completed.append(True))
    assert completed
    assert not errors
    assert state == {"read": 1, "closed": True}
    again: list[Exception] = []
    source.subscribe(on_error=again.append)  # the generator is exhausted
    assert len(again) == 1
    assert isinstance(again[0], IncompleteStream)


def test_from_sse_forwards_errors_of_the_iterable_as_they_are() -> None:
    def body() -> Iterator[bytes]:
        yield BODY[:20]
        raise ConnectionResetError("peer reset")

    errors: list[Exception] = []
    from_sse(body()).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert isinstance(errors[0], ConnectionResetError)


# ---------------------------------------------------------------- from_sse, async


async def agen(pieces: list[bytes], log: list[str]) -> AsyncIterator[bytes]:
    try:
        for piece in pieces:
            await asyncio.sleep(0)
            log.append("yield")
            yield piece
    finally:
        log.append("finally")


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_from_sse_async_iterable_runs_on_the_loop() -> None:
    log: list[str] = []
    pieces = [BODY[i : i + 9] for i in range(0, len(BODY), 9)]
    response = await ops_collect(from_sse(agen(pieces, log)))
    assert response.text == "Hello"
    assert response.id == "c9"
    assert log[-1] == "finally"


async def ops_collect(source: Any) -> AgentResponse:
    from rafrx import collect_agent_response

    return await collect_agent_response(source.pipe(ops.convert()))


@pytest.mark.asyncio
async def test_from_sse_async_stops_reading_at_done_and_closes_the_generator() -> None:
    log: list[str] = []
    items, errors, completed = [], [], []
    done = asyncio.Event()
    from_sse(agen([BODY, b"data: {never}\n\n", b"more"], log)).subscribe(
        items.append, errors.append, lambda: (completed.append(True), done.set())
    )
    await asyncio.wait_for(done.wait(), 5)
    assert completed
    assert not errors
    assert log == ["yield", "finally"]


@pytest.mark.asyncio
async def test_from_sse_async_dispose_mid_stream_cancels_the_reader() -> None:
    log: list[str] = []
    started = asyncio.Event()
    never = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        try:
            yield sse(chunk({"content": "first"}))
            started.set()
            await never.wait()  # the server stalls
            log.append("resumed")
            yield b"data: [DONE]\n\n"
        finally:
            log.append("finally")

    items: list[Any] = []
    terminal: list[Any] = []
    subscription = from_sse(body()).subscribe(
        items.append, terminal.append, lambda: terminal.append("completed")
    )
    await asyncio.wait_for(started.wait(), 5)
    assert items == [u.TextDelta("first")]
    subscription.dispose()
    subscription.dispose()  # twice is a no-op
    await settle()
    assert log == ["finally"]
    assert items == [u.TextDelta("first")]
    assert terminal == []
    tasks = [t for t in asyncio.all_tasks() if t.get_name() == "rafrx.from_sse"]
    assert all(t.done() for t in tasks)


@pytest.mark.asyncio
async def test_from_sse_async_typed_errors_and_iterable_errors() -> None:
    async def failing() -> AsyncIterator[bytes]:
        yield sse(chunk({"content": "a"}))
        raise ConnectionResetError("gone")

    for source, kind in (
        (failing(), ConnectionResetError),
        (agen([sse(chunk({"content": "a"}))], []), IncompleteStream),
        (agen([b'event: error\ndata: {"error": {"message": "m"}}\n\n'], []), ProviderError),
    ):
        result: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
        from_sse(source).subscribe(on_error=result.set_result)
        error = await asyncio.wait_for(result, 5)
        assert isinstance(error, kind)
    await settle()


def test_from_sse_async_without_a_running_loop_fails_on_subscribe() -> None:
    log: list[str] = []
    errors: list[Exception] = []
    gen = agen([BODY], log)
    from_sse(gen).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError)
    assert "asyncio event loop" in str(errors[0])
    assert log == []
    asyncio.run(gen.aclose())  # never started: closing it is a no-op


@pytest.mark.asyncio
async def test_from_sse_async_subscriber_error_goes_to_on_error() -> None:
    result: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()

    def on_next(update: Any) -> None:
        raise ValueError("subscriber bug")

    from_sse(agen([BODY], [])).subscribe(on_next, result.set_result)
    error = await asyncio.wait_for(result, 5)
    assert isinstance(error, ValueError)
    assert not isinstance(error, RafrxError)
    await settle()


def test_responses_error_event_with_plain_text_data_is_a_provider_error() -> None:
    from rafrx.errors import ProviderError
    from rafrx.sources import from_sse

    body = b"event: error\ndata: upstream overloaded\n\n"
    errors: list[Exception] = []
    from_sse(body, "openai-responses").subscribe(on_error=errors.append)
    assert isinstance(errors[0], ProviderError)
    assert "upstream overloaded" in str(errors[0])
