"""Rarely taken branches of the three dialects, with hand-written events.

Error payloads of unusual shapes, content parts that are plain strings,
thinking text in a block's start, function-call items without an id, events
after the terminal marker, annotations that are not objects. Each case checks
the typed error (and what it keeps) or the exact updates.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import MalformedEvent, ProviderError, RafrxError
from rafrx.messages import ToolCall
from rafrx.response import AgentResponse, FinishReason
from rafrx.sources import from_sse, get_dialect
from rafrx.sse import ServerSentEvent
from tests.sources.test_dialects import ev, sse


def run_all(dialect: str, *events: ServerSentEvent) -> list[u.AgentResponseUpdate]:
    """Feed ``events`` to a fresh dialect, then close it."""
    d = get_dialect(dialect)
    out: list[u.AgentResponseUpdate] = []
    for event in events:
        out += d.feed(event)
    return out + d.close()


def aggregate(body: bytes, dialect: str) -> AgentResponse:
    response = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    assert isinstance(response, AgentResponse)
    return response


def failure(body: bytes, dialect: str) -> RafrxError:
    """The error ``from_sse → convert → aggregate`` ends with (``partial`` set)."""
    with pytest.raises(RafrxError) as info:
        from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    assert info.value.partial is not None
    return info.value


# ---------------------------------------------------------------- openai-chat


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_chat_dialect_ignores_every_event_after_done() -> None:
    d = get_dialect("openai-chat")
    assert d.feed(ev("[DONE]")) == [u.Finish(FinishReason.OTHER)]
    assert d.done
    assert d.feed(ev(chunk({"content": "late"}, "stop"))) == []
    assert d.feed(ev({"error": {"message": "late error"}})) == []
    assert d.feed(ev("{not json")) == []
    assert d.feed(ev({"error": "late"}, event="error")) == []
    assert d.close() == []


def test_chat_error_event_whose_error_is_a_string() -> None:
    data = '{"error": "Upstream model timed out"}'
    with pytest.raises(ProviderError) as info:
        get_dialect("openai-chat").feed(ev(data, event="error"))
    err = info.value
    assert err.message == "Upstream model timed out"
    assert err.error_type is None
    assert err.body == data


def test_chat_error_event_with_a_flat_error_object() -> None:
    data = {"message": "Overloaded", "type": "overloaded_error", "code": 529}
    with pytest.raises(ProviderError) as info:
        get_dialect("openai-chat").feed(ev(data, event="error"))
    err = info.value
    assert (err.message, err.error_type, err.code, err.retryable) == (
        "Overloaded",
        "overloaded_error",
        "529",
        True,
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ('["boom"]', "provider error"),
        ("42", "provider error"),
        ("null", "provider error"),
        ('"boom"', "boom"),
        ("", "provider error"),
        (" ", "provider error"),
    ],
)
def test_chat_error_event_whose_json_is_not_an_object_keeps_its_data(
    data: str, message: str
) -> None:
    body = sse(chunk({"content": "Half an "}), ("error", data))
    err = failure(body, "openai-chat")
    assert type(err) is ProviderError
    assert err.message == message
    assert err.body == data
    assert err.partial is not None
    assert err.partial.text == "Half an "


@pytest.mark.parametrize(
    "delta",
    [{"tool_calls": [42]}, {"content": "x", "tool_calls": ["call"]}],
    ids=["only-tool-calls", "with-content"],
)
def test_chat_tool_call_delta_that_is_not_an_object_is_malformed(delta: dict[str, Any]) -> None:
    bad = json.dumps(chunk(delta))
    body = sse(chunk({"content": "Let me check. "}), bad, chunk({}, "stop"), "[DONE]")
    err = failure(body, "openai-chat")
    assert type(err) is MalformedEvent
    assert err.message == "a tool call delta should be an object"
    assert err.raw == bad
    assert err.partial is not None
    assert err.partial.text == "Let me check. "
    assert err.partial.tool_calls == ()


def test_chat_whole_tool_call_with_object_arguments_in_one_chunk() -> None:
    """Ollama and Gemini send a whole call, arguments as an object, without an index."""
    call = {"id": "c1", "function": {"name": "weather", "arguments": {"city": "Zürich"}}}
    body = sse(chunk({"content": "", "tool_calls": [call]}, "tool_calls"), "[DONE]")
    items: list[u.AgentResponseUpdate] = []
    from_sse(body).subscribe(items.append)
    assert items == [
        u.ToolCallDelta(0, "c1", "weather", '{"city": "Zürich"}'),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    response = aggregate(body, "openai-chat")
    assert response.tool_calls == (ToolCall("c1", "weather", {"city": "Zürich"}),)


def test_chat_content_parts_may_be_plain_strings() -> None:
    out = run_all(
        "openai-chat",
        ev(chunk({"content": ["Hel", "", "lo"]})),
        ev(chunk({"content": [{"type": "text", "text": " world"}, "!"]}, "stop")),
        ev("[DONE]"),
    )
    assert out == [
        u.TextDelta("Hel"),
        u.TextDelta("lo"),
        u.TextDelta(" world"),
        u.TextDelta("!"),
        u.Finish(FinishReason.STOP),
    ]


@pytest.mark.parametrize("part", [42, None, ["nested"], True])
def test_chat_content_part_that_is_neither_text_nor_object_is_malformed(part: Any) -> None:
    event = ev(chunk({"content": ["ok", part]}))
    with pytest.raises(MalformedEvent) as info:
        get_dialect("openai-chat").feed(event)
    assert info.value.message == "a content part should be an object"
    assert info.value.raw == event.data


def test_chat_thinking_part_given_as_a_string_is_reasoning() -> None:
    body = sse(
        chunk({"content": [{"type": "thinking", "thinking": "Paris is "}]}),
        chunk({"content": [{"type": "thinking", "thinking": ""}]}),  # nothing to emit
        chunk({"content": [{"type": "thinking", "thinking": "in France."}]}),
        chunk({"content": [{"type": "text", "text": "France."}]}, "stop"),
        "[DONE]",
    )
    items: list[u.AgentResponseUpdate] = []
    from_sse(body).subscribe(items.append)
    assert items == [
        u.ReasoningDelta("Paris is "),
        u.ReasoningDelta("in France."),
        u.TextDelta("France."),
        u.Finish(FinishReason.STOP),
    ]
    response = aggregate(body, "openai-chat")
    assert (response.reasoning_text, response.text) == ("Paris is in France.", "France.")


# ---------------------------------------------------------------- anthropic


def a_ev(data: dict[str, Any]) -> ServerSentEvent:
    return ev(data, event=data["type"])


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def text_delta(index: int, text: str) -> dict[str, Any]:
    return block_delta(index, {"type": "text_delta", "text": text})


STOP = {"type": "message_stop"}


def test_anthropic_dialect_ignores_every_event_after_message_stop() -> None:
    d = get_dialect("anthropic")
    assert d.feed(a_ev(STOP)) == [u.Finish(FinishReason.OTHER)]
    assert d.done
    assert d.feed(a_ev(text_delta(0, "late"))) == []  # the typed fast path, too
    assert d.feed(ev({"type": "error", "error": {"message": "late"}}, event="error")) == []
    assert d.feed(ev("{oops", event="content_block_start")) == []
    assert d.close() == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ('["overloaded"]', "provider error"),
        ("529", "provider error"),
        ('"overloaded"', "overloaded"),
        ("", "provider error"),
        (" ", "provider error"),
    ],
)
def test_anthropic_error_event_whose_json_is_not_an_object_keeps_its_data(
    data: str, message: str
) -> None:
    body = sse(
        ("content_block_start", block_start(0, {"type": "text", "text": ""})),
        ("content_block_delta", text_delta(0, "Once upon")),
        ("error", data),
    )
    err = failure(body, "anthropic")
    assert type(err) is ProviderError
    assert err.message == message
    assert err.body == data
    assert err.partial is not None
    assert err.partial.text == "Once upon"


@pytest.mark.parametrize("event_line", [None, "message"], ids=["no-event-line", "message"])
def test_anthropic_error_payload_under_another_event_name_is_a_provider_error(
    event_line: str | None,
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    body = sse(
        ("content_block_delta", text_delta(0, "Once upon")),
        (event_line, error) if event_line else error,
    )
    err = failure(body, "anthropic")
    assert type(err) is ProviderError
    assert (err.message, err.error_type, err.retryable) == ("Overloaded", "overloaded_error", True)
    assert err.partial is not None
    assert err.partial.text == "Once upon"


def test_anthropic_thinking_text_in_the_block_start_is_kept() -> None:
    start = {"type": "thinking", "thinking": "Let me ", "signature": "sig-start"}
    out = run_all(
        "anthropic",
        a_ev(block_start(0, start)),
        a_ev(block_delta(0, {"type": "thinking_delta", "thinking": "think."})),
        a_ev({"type": "content_block_stop", "index": 0}),
        a_ev({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        a_ev(STOP),
    )
    whole = {"type": "thinking", "thinking": "Let me think.", "signature": "sig-start"}
    assert out == [
        u.ReasoningDelta("Let me "),
        u.ReasoningDelta("think."),
        u.ReasoningDelta("", provider_data=whole),
        u.Finish(FinishReason.STOP),
    ]


# ---------------------------------------------------------------- openai-responses


def r(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


COMPLETED = r("response.completed", response={})


def test_responses_metadata_waits_for_an_id_or_model() -> None:
    out = run_all(
        "openai-responses",
        ev(r("response.created", response={"status": "in_progress"})),
        ev(r("response.created", response={"id": "", "model": None})),
        ev(r("response.in_progress", response={"id": "resp_7", "model": "gpt-x"})),
        ev(r("response.in_progress", response={"id": "resp_8", "model": "gpt-y"})),
        ev(r("response.output_text.delta", delta="Hi")),
        ev(COMPLETED),
    )
    assert out == [
        u.ResponseMetadata("resp_7", "gpt-x"),
        u.TextDelta("Hi"),
        u.Finish(FinishReason.STOP),
    ]


@pytest.mark.parametrize(
    "item",
    [
        {"type": "function_call", "id": "fc_1", "call_id": "call_1"},
        {"type": "function_call", "name": "weather"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": ""},
    ],
    ids=["no-name", "no-ids", "empty-name"],
)
def test_responses_function_call_item_without_call_id_or_name_is_malformed(
    item: dict[str, Any],
) -> None:
    added = json.dumps(r("response.output_item.added", item=item))
    body = sse(r("response.output_text.delta", delta="Checking. "), added, COMPLETED)
    err = failure(body, "openai-responses")
    assert type(err) is MalformedEvent
    assert err.message == "a function_call item needs a 'call_id' and a 'name'"
    assert err.raw == added
    assert err.partial is not None
    assert err.partial.text == "Checking. "


def test_responses_function_call_item_without_an_id_is_known_by_its_call_id() -> None:
    item = {"type": "function_call", "call_id": "call_9", "name": "weather", "arguments": ""}
    body = sse(
        r("response.output_item.added", item=item),
        r("response.function_call_arguments.delta", item_id="call_9", delta='{"city": '),
        r("response.function_call_arguments.delta", item_id="call_9", delta='"Oslo"}'),
        r("response.function_call_arguments.done", item_id="call_9", arguments='{"city": "Oslo"}'),
        r("response.output_item.done", item={**item, "arguments": '{"city": "Oslo"}'}),
        COMPLETED,
    )
    items: list[u.AgentResponseUpdate] = []
    from_sse(body, "openai-responses").subscribe(items.append)
    assert items == [
        u.ToolCallStart("call_9", "weather"),
        u.ToolCallArgs("call_9", '{"city": '),
        u.ToolCallArgs("call_9", '"Oslo"}'),
        u.ToolCallEnd("call_9"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    response = aggregate(body, "openai-responses")
    assert response.tool_calls == (ToolCall("call_9", "weather", {"city": "Oslo"}),)


def test_responses_reasoning_item_is_kept_whole_once_and_only_with_an_id() -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA=="}
    out = run_all(
        "openai-responses",
        ev(r("response.output_item.added", item={"type": "reasoning", "id": "rs_1"})),
        ev(r("response.reasoning_summary_text.delta", item_id="rs_1", delta="Hm.")),
        ev(r("response.output_item.done", item=item)),
        ev(r("response.output_item.done", item={"type": "reasoning", "summary": []})),
        ev(r("response.output_item.done", item={"type": "reasoning", "id": 7})),
        ev(COMPLETED),
    )
    assert out == [
        u.ReasoningDelta("Hm."),
        u.ReasoningDelta("", provider_data=item),
        u.Finish(FinishReason.STOP),
    ]


def test_responses_content_part_done_without_its_ids_or_part_is_ignored() -> None:
    part = {"type": "output_text", "annotations": [{"url": "https://a.example"}]}
    out = run_all(
        "openai-responses",
        ev(r("response.content_part.done", content_index=0, part=part)),
        ev(r("response.content_part.done", item_id="m", part=part)),
        ev(r("response.content_part.done", item_id="m", content_index="0", part=part)),
        ev(r("response.content_part.done", item_id="m", content_index=0, part=None)),
        ev(r("response.content_part.done", item_id="m", content_index=0, part=part)),
        ev(COMPLETED),
    )
    assert out == [u.Uri("https://a.example"), u.Finish(FinishReason.STOP)]


def test_responses_annotations_that_are_not_objects_are_ignored() -> None:
    out = run_all(
        "openai-responses",
        ev(
            r(
                "response.output_text.annotation.added",
                item_id="m",
                content_index=0,
                annotation="https://x.example",
            )
        ),
        ev(r("response.output_text.annotation.added", annotation=None)),
        ev(
            r(
                "response.content_part.done",
                item_id="m",
                content_index=1,
                part={"annotations": ["https://y.example", 7, {"url": "https://z.example"}]},
            )
        ),
        ev(COMPLETED),
    )
    assert out == [u.Uri("https://z.example"), u.Finish(FinishReason.STOP)]


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "openai-responses"])
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("", "provider error"),
        ("upstream timed out", "upstream timed out"),
        ('"overloaded"', "overloaded"),
        ('{"error": "overloaded"}', "overloaded"),
        ('{"error": {"message": "Overloaded", "type": "overloaded_error"}}', "Overloaded"),
    ],
)
def test_every_dialect_reads_an_error_event_the_same_way(
    dialect: str, data: str, message: str
) -> None:
    """``event: error`` is the provider's error whatever its data, even none at all."""
    with pytest.raises(ProviderError) as info:
        get_dialect(dialect).feed(ServerSentEvent(event="error", data=data))
    assert (info.value.message, info.value.body) == (message, data)
