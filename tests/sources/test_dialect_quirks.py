"""Provider quirks and SSE framing, through ``from_sse`` with hand-built bodies.

OpenAI-compatible servers (Azure content-filter chunks, Mistral, Groq, vLLM,
Ollama, Gemini), Anthropic's block types and the Responses API's item events,
plus CR / CRLF line ends, comments, ``id`` / ``retry`` fields, multi-line data,
invalid UTF-8 and a BOM on each new response.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import IncompleteStream, ProviderError, RafrxError
from rafrx.messages import ToolCall
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources import UpdateDecoder, from_sse

CHUNK = "chat.completion.chunk"

# ---------------------------------------------------------------- helpers


def sse(*items: Any) -> bytes:
    """A body: each item is data (dict/str) or an (event name, data) pair."""
    out = []
    for item in items:
        name, data = item if isinstance(item, tuple) else (None, item)
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def ch(
    delta: dict[str, Any] | None, index: int = 0, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A Chat Completions chunk with one choice."""
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    return {"object": CHUNK, "choices": [choice], **extra}


def tc(*calls: dict[str, Any]) -> dict[str, Any]:
    """A chunk carrying ``calls`` as ``delta.tool_calls``."""
    return ch({"tool_calls": list(calls)})


def updates(
    body: Any, dialect: str = "openai-chat"
) -> tuple[list[u.AgentResponseUpdate], list[Exception], bool]:
    """Items, errors and whether the stream completed."""
    items: list[u.AgentResponseUpdate] = []
    errors: list[Exception] = []
    done: list[bool] = []
    from_sse(body, dialect).subscribe(items.append, errors.append, lambda: done.append(True))
    return items, errors, bool(done)


def ok(body: Any, dialect: str = "openai-chat") -> list[u.AgentResponseUpdate]:
    """The updates of a body that must complete without error."""
    items, errors, done = updates(body, dialect)
    assert errors == []
    assert done
    return items


def aggregate(body: bytes, dialect: str = "openai-chat") -> AgentResponse:
    response = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    assert isinstance(response, AgentResponse)
    return response


def splits(body: bytes) -> list[list[bytes]]:
    """The body whole, in 1-byte chunks, and cut in two at a few places."""
    cuts = [[body], [body[i : i + 1] for i in range(len(body))]]
    for at in range(1, len(body), max(1, len(body) // 37)):
        cuts.append([body[:at], body[at:]])
    return cuts


FINISH_TOOLS = ch({}, finish="tool_calls")


# ---------------------------------------------------------------- openai-chat quirks


def test_chat_tool_index_starting_at_one_with_id_blank_later_and_no_type() -> None:
    body = sse(
        tc({"index": 1, "id": "call_1", "function": {"name": "f", "arguments": ""}}),
        tc({"index": 1, "id": "", "type": "", "function": {"name": "", "arguments": '{"a":'}}),
        tc({"index": 1, "function": {"arguments": " 1}"}}),
        FINISH_TOOLS,
        ch({}),  # an empty delta after the finish (vLLM, Ollama)
        "[DONE]",
    )
    response = aggregate(body)
    assert response.tool_calls == (ToolCall("call_1", "f", {"a": 1}),)
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_chat_non_contiguous_indexes_stay_two_calls_in_order() -> None:
    body = sse(
        tc(
            {
                "index": 0,
                "id": "a",
                "type": "function",
                "function": {"name": "f", "arguments": "{}"},
            }
        ),
        tc({"index": 3, "id": "b", "function": {"name": "g", "arguments": '{"x": '}}),
        tc({"index": 3, "function": {"arguments": "2}"}}),
        FINISH_TOOLS,
        "[DONE]",
    )
    assert aggregate(body).tool_calls == (ToolCall("a", "f", {}), ToolCall("b", "g", {"x": 2}))


def test_chat_interleaved_parallel_arguments_stay_apart() -> None:
    body = sse(
        tc(
            {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
            {"index": 1, "id": "b", "function": {"name": "g", "arguments": ""}},
        ),
        tc({"index": 1, "function": {"arguments": '{"q": "B'}}),
        tc({"index": 0, "function": {"arguments": '{"q": "A'}}),
        tc({"index": 1, "function": {"arguments": '"}'}}),
        tc({"index": 0, "function": {"arguments": '"}'}}),
        FINISH_TOOLS,
        "[DONE]",
    )
    assert aggregate(body).tool_calls == (
        ToolCall("a", "f", {"q": "A"}),
        ToolCall("b", "g", {"q": "B"}),
    )


def test_chat_whole_call_and_finish_in_one_chunk_mistral_style() -> None:
    call = {
        "id": "D681PevKs",
        "function": {"name": "f", "arguments": '{"city": "Paris"}'},
        "index": 0,
    }
    final = {
        **ch({"tool_calls": [call]}, finish="tool_calls"),
        "usage": {"prompt_tokens": 9, "completion_tokens": 4},
    }
    items = ok(sse(final, "[DONE]"))
    assert items == [
        u.ToolCallDelta(0, "D681PevKs", "f", '{"city": "Paris"}'),
        u.Finish(FinishReason.TOOL_CALLS, Usage(9, 4, 13)),
    ]


def test_chat_index_less_parallel_calls_gemini_style() -> None:
    body = sse(
        tc({"id": "g1", "type": "function", "function": {"name": "f", "arguments": '{"n": 1}'}}),
        tc({"id": "g2", "type": "function", "function": {"name": "f", "arguments": '{"n": 2}'}}),
        ch({}, finish="stop"),
        "[DONE]",
    )
    assert aggregate(body).tool_calls == (
        ToolCall("g1", "f", {"n": 1}),
        ToolCall("g2", "f", {"n": 2}),
    )


def test_chat_arguments_object_kept_with_non_ascii_and_order() -> None:
    args = {"z": "é✓", "a": [1, {"b": None}]}
    body = sse(
        tc({"index": 0, "id": "a", "function": {"name": "f", "arguments": args}}),
        FINISH_TOOLS,
        "[DONE]",
    )
    items = ok(body)
    deltas = [i for i in items if isinstance(i, u.ToolCallDelta)]
    assert [d.arguments_delta for d in deltas] == [json.dumps(args, ensure_ascii=False)]
    assert list(json.loads(deltas[0].arguments_delta)) == ["z", "a"]


def test_chat_string_arguments_are_byte_exact() -> None:
    raw = '{ "s" : "a\\u00e9\\n" ,"n":1.50 }'
    body = sse(
        tc({"index": 0, "id": "a", "function": {"name": "f", "arguments": raw[:7]}}),
        tc({"index": 0, "function": {"arguments": raw[7:]}}),
        FINISH_TOOLS,
        "[DONE]",
    )
    deltas = [i.arguments_delta for i in ok(body) if isinstance(i, u.ToolCallDelta)]
    assert "".join(deltas) == raw


def test_chat_azure_content_filter_chunks() -> None:
    body = sse(
        {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],
        },
        ch({"role": "assistant", "content": ""}, id="chatcmpl-1", model="gpt-4o"),
        ch({"content": "Hi"}, id="chatcmpl-1", model="gpt-4o"),
        {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": None,
                    "content_filter_offsets": {
                        "check_offset": 0,
                        "start_offset": 0,
                        "end_offset": 2,
                    },
                    "content_filter_results": {"hate": {"filtered": False, "severity": "safe"}},
                }
            ],
            "id": "",
            "model": "",
            "object": "",
            "created": 0,
        },
        ch({}, finish="content_filter", id="chatcmpl-1", model="gpt-4o"),
        "[DONE]",
    )
    assert ok(body) == [
        u.ResponseMetadata("chatcmpl-1", "gpt-4o"),
        u.TextDelta("Hi"),
        u.Finish(FinishReason.CONTENT_FILTER),
    ]


def test_chat_explicit_null_object_counts_as_absent_for_metadata() -> None:
    body = sse(
        {
            "id": "c1",
            "model": "m",
            "object": None,
            "choices": [{"index": 0, "delta": {"content": "a"}}],
        },
        ch({}, finish="stop"),
        "[DONE]",
    )
    assert ok(body) == [
        u.ResponseMetadata("c1", "m"),
        u.TextDelta("a"),
        u.Finish(FinishReason.STOP),
    ]


def test_chat_n_choices_interleaved_only_choice_zero_and_its_finish() -> None:
    body = sse(
        ch({"role": "assistant", "content": "A0"}, 0, id="x", model="m"),
        ch({"content": "B0"}, 1),
        ch(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}
                ]
            },
            1,
        ),
        ch({"reasoning_content": "think B"}, 1),
        ch({"content": "A1"}, 0),
        ch({}, 0, "stop"),
        ch({}, 1, "length"),  # choice 1 ends last: its reason must not win
        {
            "object": CHUNK,
            "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        },
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "A0A1"
    assert response.reasoning_text is None  # choice 1's reasoning does not leak
    assert response.tool_calls == ()
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(3, 4, 7)


def test_chat_usage_chunk_with_empty_or_null_choices_after_finish() -> None:
    for choices in ([], None):
        body = sse(
            ch({"content": "a"}, usage=None),
            ch({}, finish="stop", usage=None),
            {
                "object": CHUNK,
                "choices": choices,
                "usage": {"prompt_tokens": 1, "completion_tokens": 2},
            },
            "[DONE]",
        )
        assert ok(body) == [u.TextDelta("a"), u.Finish(FinishReason.STOP, Usage(1, 2, 3))]


def test_chat_continuous_usage_stats_last_one_wins() -> None:
    # vLLM's continuous_usage_stats: every chunk carries the running usage.
    body = sse(
        ch({"content": "a"}, usage={"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}),
        ch({"content": "b"}, usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
        ch(
            {}, finish="stop", usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        ),
        "[DONE]",
    )
    assert aggregate(body).usage == Usage(5, 3, 8)


def test_chat_groq_and_vllm_reasoning_fields_are_not_doubled() -> None:
    body = sse(
        ch({"reasoning": "r1"}),  # Groq / OpenRouter / Ollama
        ch({"reasoning_content": "r2", "reasoning": "r2"}),  # vLLM sends both during a migration
        ch({"content": "ans"}),
        {**ch({}, finish="stop"), "x_groq": {"id": "req_1"}},
        "[DONE]",
    )
    response = aggregate(body)
    assert response.reasoning_text == "r1r2"
    assert response.text == "ans"


def test_chat_mistral_content_parts_with_thinking_and_text() -> None:
    body = sse(
        ch({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}]}),
        ch(
            {
                "content": [
                    {"type": "text", "text": "Hel"},
                    {"type": "reference", "reference_ids": [1]},
                ]
            }
        ),
        ch({"content": [{"type": "text", "text": "lo"}]}, finish="stop"),
        "[DONE]",
    )
    assert ok(body) == [
        u.ReasoningDelta("hm"),
        u.TextDelta("Hel"),
        u.TextDelta("lo"),
        u.Finish(FinishReason.STOP),
    ]


def test_chat_done_then_more_bytes_in_the_same_chunk_are_not_read() -> None:
    body = sse(ch({"content": "a"}), "[DONE]") + b"data: {not json\n\nevent: error\ndata: {}\n\n"
    for chunks in splits(body):
        assert ok(chunks) == [u.TextDelta("a"), u.Finish(FinishReason.OTHER)]


def test_chat_mid_stream_error_chunk_openrouter_style() -> None:
    body = sse(
        ch({"content": "par"}, id="gen-1", model="m"),
        {
            "id": "gen-1",
            "object": CHUNK,
            "error": {"code": 502, "message": "Upstream error"},
            "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
        },
        "[DONE]",
    )
    items, errors, done = updates(body)
    assert items == [u.ResponseMetadata("gen-1", "m"), u.TextDelta("par")]
    assert not done
    assert len(errors) == 1
    err = errors[0]
    assert isinstance(err, ProviderError)
    assert err.message == "Upstream error"
    assert err.retryable is True


# ---------------------------------------------------------------- anthropic

A_START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "stop_reason": None,
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": 5,
            "output_tokens": 1,
        },
    },
}


def bs(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_start", {
        "type": "content_block_start",
        "index": index,
        "content_block": block,
    }


def bd(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}


def be(index: int) -> tuple[str, dict[str, Any]]:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


def a_end(reason: str, **usage: int) -> list[tuple[str, dict[str, Any]]]:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": None},
        "usage": usage,
    }
    return [("message_delta", delta), ("message_stop", {"type": "message_stop"})]


def test_anthropic_full_turn_with_server_tools_citations_thinking_and_unknown_events() -> None:
    body = sse(
        ("message_start", A_START),
        ("ping", {"type": "ping"}),
        bs(0, {"type": "thinking", "thinking": "", "signature": ""}),
        bd(0, {"type": "thinking_delta", "thinking": "hmm"}),
        bd(0, {"type": "signature_delta", "signature": "SIG"}),
        be(0),
        bs(1, {"type": "redacted_thinking", "data": "ENC"}),
        be(1),
        bs(2, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
        bd(2, {"type": "input_json_delta", "partial_json": '{"query": "x"}'}),
        be(2),
        bs(3, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}),
        be(3),
        bs(4, {"type": "text", "text": "", "citations": None}),
        bd(
            4,
            {
                "type": "citations_delta",
                "citation": {
                    "type": "web_search_result_location",
                    "url": "https://a.example/",
                    "cited_text": "x",
                },
            },
        ),
        bd(
            4,
            {"type": "citations_delta", "citation": {"type": "char_location", "document_index": 0}},
        ),
        bd(4, {"type": "text_delta", "text": "Answer"}),
        bd(4, {"type": "brand_new_delta", "stuff": 1}),
        be(4),
        ("brand_new_event", {"type": "brand_new_event", "foo": 1}),
        bs(5, {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {}}),
        bd(5, {"type": "input_json_delta", "partial_json": ""}),
        bd(5, {"type": "input_json_delta", "partial_json": '{"a": 1}'}),
        be(5),
        *a_end("tool_use", output_tokens=50),
    )
    assert ok(body, "anthropic") == [
        u.ResponseMetadata("msg_1", "claude-x"),
        u.ReasoningDelta("hmm"),
        u.ReasoningDelta(
            "", provider_data={"type": "thinking", "thinking": "hmm", "signature": "SIG"}
        ),
        u.ReasoningDelta("", provider_data={"type": "redacted_thinking", "data": "ENC"}),
        # server tools' blocks, whole, to go back in their place
        u.ReasoningDelta(
            "",
            provider_data={
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "x"},
            },
        ),
        u.ReasoningDelta(
            "",
            provider_data={
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [],
            },
        ),
        u.Uri("https://a.example/"),
        u.TextDelta("Answer"),
        u.ToolCallStart("toolu_1", "get"),
        u.ToolCallArgs("toolu_1", '{"a": 1}'),
        u.ToolCallEnd("toolu_1"),
        u.Finish(FinishReason.TOOL_CALLS, Usage(15, 50, 65, cached_tokens=5)),
    ]
    response = aggregate(body, "anthropic")
    assert response.tool_calls == (ToolCall("toolu_1", "get", {"a": 1}),)


def test_anthropic_message_delta_usage_is_cumulative_including_input_tokens() -> None:
    body = sse(
        ("message_start", A_START),
        bs(0, {"type": "text", "text": ""}),
        bd(0, {"type": "text_delta", "text": "x"}),
        be(0),
        ("message_delta", {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 3}}),
        *a_end("end_turn", input_tokens=12, output_tokens=7),
    )
    assert aggregate(body, "anthropic").usage == Usage(17, 7, 24, cached_tokens=5)


def test_anthropic_refusal_and_max_tokens_stop_reasons() -> None:
    for reason, expected in (
        ("refusal", FinishReason.CONTENT_FILTER),
        ("max_tokens", FinishReason.LENGTH),
    ):
        body = sse(("message_start", A_START), *a_end(reason, output_tokens=1))
        assert ok(body, "anthropic")[-1].finish_reason is expected  # type: ignore[union-attr]


def test_anthropic_overloaded_error_after_text_keeps_partial_and_is_typed() -> None:
    body = sse(
        ("message_start", A_START),
        bs(0, {"type": "text", "text": ""}),
        bd(0, {"type": "text_delta", "text": "Hel"}),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    )
    items, errors, done = updates(body, "anthropic")
    start_usage = u.Usage(Usage(15, 1, 16, cached_tokens=5))  # (message_start's, salvaged)
    assert items == [u.ResponseMetadata("msg_1", "claude-x"), u.TextDelta("Hel"), start_usage]
    assert not done
    assert len(errors) == 1
    err = errors[0]
    assert isinstance(err, ProviderError)
    assert (err.error_type, err.message, err.retryable) == ("overloaded_error", "Overloaded", True)


# ---------------------------------------------------------------- openai-responses

RESP = {
    "id": "resp_1",
    "object": "response",
    "model": "gpt-x",
    "status": "in_progress",
    "output": [],
}


def fc_item(item_id: str | None, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }
    if item_id is not None:
        item["id"] = item_id
    return item


def r(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


COMPLETED = r("response.completed", response={**RESP, "status": "completed"})


def test_responses_reasoning_summary_parts_then_function_call_then_usage() -> None:
    body = sse(
        r("response.created", sequence_number=0, response=RESP),
        r("response.in_progress", response=RESP),
        r(
            "response.output_item.added",
            output_index=0,
            item={"id": "rs_1", "type": "reasoning", "summary": []},
        ),
        r(
            "response.reasoning_summary_part.added",
            item_id="rs_1",
            summary_index=0,
            part={"type": "summary_text"},
        ),
        r("response.reasoning_summary_text.delta", item_id="rs_1", summary_index=0, delta="One."),
        r("response.reasoning_summary_text.done", item_id="rs_1", summary_index=0, text="One."),
        r(
            "response.reasoning_summary_part.added",
            item_id="rs_1",
            summary_index=1,
            part={"type": "summary_text"},
        ),
        r("response.reasoning_summary_text.delta", item_id="rs_1", summary_index=1, delta="Two."),
        r(
            "response.output_item.done",
            output_index=0,
            item={"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "ENC"},
        ),
        r("response.output_item.added", output_index=1, item=fc_item("fc_1", "call_1", "f")),
        r("response.function_call_arguments.delta", item_id="fc_1", output_index=1, delta='{"a":'),
        r("response.function_call_arguments.delta", item_id="fc_1", output_index=1, delta="1}"),
        r(
            "response.function_call_arguments.done",
            item_id="fc_1",
            output_index=1,
            arguments='{"a":1}',
        ),
        r(
            "response.output_item.done",
            output_index=1,
            item=fc_item("fc_1", "call_1", "f", '{"a":1}'),
        ),
        r(
            "response.completed",
            response={
                **RESP,
                "status": "completed",
                "usage": {
                    "input_tokens": 3,
                    "input_tokens_details": {"cached_tokens": 1},
                    "output_tokens": 5,
                    "output_tokens_details": {"reasoning_tokens": 2},
                    "total_tokens": 8,
                },
            },
        ),
    )
    items = ok(body, "openai-responses")
    assert items[0] == u.ResponseMetadata("resp_1", "gpt-x")
    assert [
        i for i in items if isinstance(i, u.ToolCallStart | u.ToolCallArgs | u.ToolCallEnd)
    ] == [
        u.ToolCallStart("call_1", "f"),
        u.ToolCallArgs("call_1", '{"a":'),
        u.ToolCallArgs("call_1", "1}"),
        u.ToolCallEnd("call_1"),
    ]
    assert items[-1] == u.Finish(
        FinishReason.TOOL_CALLS, Usage(3, 5, 8, reasoning_tokens=2, cached_tokens=1)
    )
    response = aggregate(body, "openai-responses")
    assert response.reasoning_text == "One.Two."
    assert response.tool_calls == (ToolCall("call_1", "f", {"a": 1}),)


def test_responses_two_interleaved_calls_done_in_reverse_order() -> None:
    body = sse(
        r("response.output_item.added", item=fc_item("fa", "ca", "f")),
        r("response.output_item.added", item=fc_item("fb", "cb", "g")),
        r("response.function_call_arguments.delta", item_id="fb", delta='{"b":'),
        r("response.function_call_arguments.delta", item_id="fa", delta='{"a":'),
        r("response.function_call_arguments.delta", item_id="fa", delta="1}"),
        r("response.function_call_arguments.delta", item_id="fb", delta="2}"),
        r("response.output_item.done", item=fc_item("fb", "cb", "g", '{"b":2}')),
        r("response.output_item.done", item=fc_item("fa", "ca", "f", '{"a":1}')),
        COMPLETED,
    )
    assert aggregate(body, "openai-responses").tool_calls == (
        ToolCall("ca", "f", {"a": 1}),
        ToolCall("cb", "g", {"b": 2}),
    )


def test_responses_refusal_and_incomplete_content_filter() -> None:
    body = sse(
        r("response.refusal.delta", item_id="m", delta="I can't"),
        r("response.refusal.done", item_id="m", refusal="I can't"),
        r(
            "response.incomplete",
            response={"status": "incomplete", "incomplete_details": {"reason": "content_filter"}},
        ),
    )
    assert ok(body, "openai-responses") == [
        u.TextDelta("I can't"),
        u.Finish(FinishReason.CONTENT_FILTER),
    ]


def test_responses_incomplete_max_output_tokens_leaves_the_cut_call_unfinished() -> None:
    body = sse(
        r("response.output_item.added", item=fc_item("fa", "ca", "f")),
        r("response.function_call_arguments.delta", item_id="fa", delta='{"a":'),
        r("response.incomplete", response={"incomplete_details": {"reason": "max_output_tokens"}}),
    )
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.LENGTH
    assert len(response.tool_calls) == 1
    assert response.tool_calls[0].complete is False
    assert response.tool_calls[0].raw_arguments == '{"a":'


def test_responses_call_known_by_call_id_then_done_with_an_id_is_one_call() -> None:
    body = sse(
        r("response.output_item.added", item=fc_item(None, "c", "f")),
        r("response.function_call_arguments.delta", item_id="c", delta='{"a":1}'),
        r("response.output_item.done", item=fc_item("fc_1", "c", "f", '{"a":1}')),
        COMPLETED,
    )
    assert ok(body, "openai-responses") == [
        u.ToolCallStart("c", "f"),
        u.ToolCallArgs("c", '{"a":1}'),
        u.ToolCallEnd("c"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]


def test_responses_tool_calls_finish_reason_implies_the_calls_are_delivered() -> None:
    body = sse(
        r("response.created", response=RESP),
        r(
            "response.completed",
            response={
                **RESP,
                "status": "completed",
                "output": [fc_item("fc", "c", "f", '{"q": 1}')],
            },
        ),
    )
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert response.tool_calls == (ToolCall("c", "f", {"q": 1}),)


def test_responses_error_event_after_text_is_typed_with_partial() -> None:
    body = sse(
        r("response.output_text.delta", item_id="m", delta="Hi"),
        r("error", code="server_error", message="boom", param=None),
    )
    items, errors, done = updates(body, "openai-responses")
    assert items == [u.TextDelta("Hi")]
    assert not done
    assert len(errors) == 1
    assert isinstance(errors[0], ProviderError)
    assert errors[0].message == "boom"
    assert errors[0].retryable is True


# ---------------------------------------------------------------- SSE framing x dialects

CHAT_FRAMED = (
    b"\xef\xbb\xbf: hello\r\nretry: 3000\r\nid: 1\r\n"
    b'data: {"id": "c", "model": "m", "choices": [{"index": 0,\r\n'
    b'data:  "delta": {"content": "H\xffi"}}]}\r\n\r\n'
    b":keepalive\r\r"
    b'id: 2\rdata: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\r\r'
    b"data: [DONE]\r\rdata: {garbage\r\r"
)


def test_chat_framing_bom_comments_id_retry_multiline_cr_and_invalid_utf8() -> None:
    expected = [u.ResponseMetadata("c", "m"), u.TextDelta("H\ufffdi"), u.Finish(FinishReason.STOP)]
    for chunks in splits(CHAT_FRAMED):
        assert ok(chunks) == expected


def test_anthropic_framing_crlf_comment_between_fields_and_split_json() -> None:
    lines = [
        "event: message_start",
        "data: " + json.dumps(A_START),
        "",
        ": a comment between the event and its data",
        "event: content_block_start",
        "id: 7",
        'data: {"type": "content_block_start", "index": 0,',
        'data: "content_block": {"type": "text", "text": ""}}',
        "",
        "retry: 10",
        "",
        "event: content_block_delta",
        ": keep-alive",
        'data: {"type": "content_block_delta", "index": 0,',
        'data: "delta": {"type": "text_delta", "text": "\u00e9\u2028x"}}',
        "",
        "event: content_block_stop",
        'data: {"type": "content_block_stop", "index": 0}',
        "",
        "event: message_delta",
        'data: {"type": "message_delta", "delta": {"stop_reason": "end_turn"},',
        'data: "usage": {"output_tokens": 2}}',
        "",
        "event: message_stop",
        'data: {"type": "message_stop"}',
        "",
        "",
    ]
    body = "\r\n".join(lines).encode()
    expected = [
        u.ResponseMetadata("msg_1", "claude-x"),
        u.TextDelta("\u00e9\u2028x"),
        u.Finish(FinishReason.STOP, Usage(15, 2, 17, cached_tokens=5)),
    ]
    for chunks in splits(body):
        assert ok(chunks, "anthropic") == expected


def test_responses_without_event_lines_cr_only_and_one_byte_chunks() -> None:
    body = (
        b'data: {"type": "response.created", "response": {"id": "r", "model": "m"}}\r\r'
        b'data: {"type": "response.output_text.delta", "delta": "\xe2\x82\xac"}\r\r'
        b'data: {"type": "response.output_text.delta", "delta": "\xe2\x82"}\r\r'
        b'data: {"type": "response.completed", "response": {}}\r\r'
    )
    expected = [
        u.ResponseMetadata("r", "m"),
        u.TextDelta("\u20ac"),
        u.TextDelta("\ufffd"),
        u.Finish(FinishReason.STOP),
    ]
    for chunks in splits(body):
        assert ok(chunks, "openai-responses") == expected


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "openai-responses"])
def test_a_bom_is_stripped_on_each_new_response_decoder(dialect: str) -> None:
    bodies = {
        "openai-chat": sse(ch({"content": "x"}, finish="stop"), "[DONE]"),
        "anthropic": sse(
            bs(0, {"type": "text", "text": ""}),
            bd(0, {"type": "text_delta", "text": "x"}),
            *a_end("end_turn"),
        ),
        "openai-responses": sse(r("response.output_text.delta", delta="x"), COMPLETED),
    }
    body = b"\xef\xbb\xbf" + bodies[dialect]
    results = []
    for _attempt in range(2):  # a retry reads a new response: a new decoder
        decoder = UpdateDecoder(dialect)
        out: list[u.AgentResponseUpdate] = []
        out += decoder.feed(body[:1])
        out += decoder.feed(body[1:2])
        out += decoder.feed(body[2:])
        out += decoder.close()
        results.append(out)
    assert results[0] == results[1]
    assert [i for i in results[0] if isinstance(i, u.TextDelta)] == [u.TextDelta("x")]


def test_a_second_bom_mid_stream_is_not_stripped() -> None:
    # Only the stream's first BOM is stripped: "\ufeffdata: ..." is a field named "\ufeffdata".
    body = (
        b"\xef\xbb\xbf"
        + sse(ch({"content": "a"}))
        + b"\xef\xbb\xbf"
        + sse(ch({"content": "b"}))
        + sse("[DONE]")
    )
    assert ok(body) == [u.TextDelta("a"), u.Finish(FinishReason.OTHER)]


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        ("openai-chat", sse(ch({"content": "a"}))),
        ("anthropic", sse(("message_start", A_START), bs(0, {"type": "text", "text": ""}))),
        ("openai-responses", sse(r("response.output_text.delta", delta="a"))),
    ],
)
def test_a_final_event_without_its_blank_line_is_not_dispatched(dialect: str, body: bytes) -> None:
    # The terminal marker arrives without the blank line: per the SSE standard it is
    # discarded, so the stream is incomplete.
    terminal = {
        "openai-chat": b"data: [DONE]\n",
        "anthropic": b'event: message_stop\ndata: {"type": "message_stop"}',
        "openai-responses": b'data: {"type": "response.completed", "response": {}}\n',
    }[dialect]
    _items, errors, done = updates(body + terminal, dialect)
    assert not done
    assert len(errors) == 1
    assert isinstance(errors[0], IncompleteStream)
    assert isinstance(errors[0], RafrxError)
