"""A bug hunt on the stream shapes of round 3 (commit 43a59b8): Chat custom tool calls,
the Poolside rule for a nameless delta with another id, LiteLLM's ``thinking_blocks``,
Moonshot / FastChat / vLLM odds, Anthropic server-tool blocks kept whole, and the
Responses dialect's ``.done``-only reasoning, ``completed``-but-incomplete responses and
``output_index`` message dedupe.

Each body goes through ``from_sse(body, dialect)`` → ``convert()`` → ``aggregate()`` (the
helpers of ``test_provider_shapes*.py``); the oracles are the SDKs' accumulators where they
read the same events (openai's ``ChatCompletionStreamState``, anthropic's
``accumulate_event``), the SDKs' request types for what goes back (``sdk_problems``), and
the invariants the library states (a body split anywhere gives the same result, the typed
fast path gives what the general path gives, a call cut by the token limit never runs).
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

from anthropic.types import MessageParam
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam

from rafrx import operators as ops
from rafrx.errors import RafrxError
from rafrx.messages import (
    THINKING_BLOCKS,
    ChatMessage,
    from_anthropic,
    to_anthropic,
    to_openai_chat,
)
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources import OpenAIChatDialect, from_sse
from rafrx.sources.clients import to_responses_input
from rafrx.sse import ServerSentEvent
from tests.sources.test_dialect_fast_paths import assert_same_both_ways
from tests.sources.test_dialect_quirks import CHUNK, sse
from tests.sources.test_provider_shapes import (
    RESP,
    aggregate,
    block_delta,
    block_start,
    block_stop,
    ch,
    completed,
    ev,
    message_start,
    rs,
    sdk_anthropic,
    sdk_chat,
    tc,
)
from tests.test_sdk_request_types import sdk_problems
from tests.test_sdk_request_types import wire as over_http

# ---------------------------------------------------------------- helpers


def custom(
    index: int | None,
    call_id: str | None = None,
    name: str | None = None,
    text: str | None = None,
) -> dict[str, Any]:
    """A Chat Completions custom tool-call delta (``custom: {name?, input?}``)."""
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if text is not None:
        body["input"] = text
    call: dict[str, Any] = {"type": "custom", "custom": body}
    if index is not None:
        call["index"] = index
    if call_id is not None:
        call["id"] = call_id
    return call


def function(
    index: int | None, call_id: str | None = None, name: str | None = None, args: str = ""
) -> dict[str, Any]:
    """A Chat Completions function tool-call delta."""
    fn: dict[str, Any] = {"arguments": args}
    if name is not None:
        fn["name"] = name
    call: dict[str, Any] = {"type": "function", "function": fn}
    if index is not None:
        call["index"] = index
    if call_id is not None:
        call["id"] = call_id
    return call


def calls_of(response: AgentResponse) -> list[tuple[Any, ...]]:
    return [(c.id, c.name, c.arguments, c.complete) for c in response.tool_calls]


def outcome(body: bytes, dialect: str = "openai-chat") -> Any:
    """What a body gives, whatever its end: the response, or the error and its partial."""
    results: list[Any] = []
    errors: list[Exception] = []
    from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).subscribe(
        results.append, errors.append
    )
    if errors:
        [error] = errors
        assert isinstance(error, RafrxError)
        partial = error.partial
        return ("error", type(error).__name__, _summary(partial) if partial else None)
    [response] = results
    return ("ok", _summary(response))


def _summary(response: AgentResponse) -> Any:
    return (
        response.text,
        response.reasoning_text,
        [(c.id, c.name, c.arguments, c.raw_arguments, c.complete) for c in response.tool_calls],
        response.finish_reason,
        response.usage,
        [m.to_openai() for m in response.turn_transcript],
    )


def split_body(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    return [body[a:b] for a, b in pairwise(points)]


def assistant_wire_blocks(response: AgentResponse) -> list[dict[str, Any]]:
    _, wire = to_anthropic(response.turn_transcript)
    return [b for m in wire if m["role"] == "assistant" for b in m["content"]]


# ================================================================ chat: custom tool calls


def test_chat_custom_call_cut_by_length_is_not_complete() -> None:
    body = sse(
        ch({"role": "assistant", "content": None}),
        tc(custom(0, "call_c1", "shell", "rm -rf /tmp/bu")),
        ch({}, "length"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.finish_reason is FinishReason.LENGTH
    [call] = response.tool_calls
    assert call.complete is False
    assert call.raw_arguments is not None
    assert "rm -rf /tmp/bu" in call.raw_arguments


def test_chat_function_call_cut_by_length_is_not_complete_for_comparison() -> None:
    """The rule the custom call should follow: a function call cut by the limit never runs."""
    body = sse(
        tc(function(0, "call_f1", "write", '{"path": "a.txt", "text": "hel')),
        ch({}, "length"),
        "[DONE]",
    )
    [call] = aggregate(body).tool_calls
    assert call.complete is False


def test_chat_custom_call_repeating_id_and_name_is_one_call() -> None:
    body = sse(
        tc(custom(0, "call_c1", "shell", "echo")),
        tc(custom(0, "call_c1", "shell", " hello")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert calls_of(response) == [("call_c1", "shell", {"input": "echo hello"}, True)]


def test_chat_custom_call_interleaved_with_a_function_call() -> None:
    body = sse(
        ch({"role": "assistant", "content": None}),
        tc(custom(0, "call_c1", "shell", "ls")),
        tc(function(1, "call_f1", "get", '{"a":')),
        tc(custom(0, text=" -l")),
        tc(function(1, args=" 1}")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert calls_of(response) == [
        ("call_c1", "shell", {"input": "ls -l"}, True),
        ("call_f1", "get", {"a": 1}, True),
    ]
    sent = response.turn_transcript[-1].to_openai()["tool_calls"]
    assert sent == [
        {"id": "call_c1", "type": "custom", "custom": {"name": "shell", "input": "ls -l"}},
        {"id": "call_f1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}},
    ]


def test_chat_parallel_custom_calls_at_their_own_indexes() -> None:
    body = sse(
        tc(custom(0, "call_a", "shell", "cat a"), custom(1, "call_b", "python", "print(")),
        tc(custom(1, text="1)"), custom(0, text=".txt")),
        tc(custom(2, "call_c", "shell")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert calls_of(response) == [
        ("call_a", "shell", {"input": "cat a.txt"}, True),
        ("call_b", "python", {"input": "print(1)"}, True),
        ("call_c", "shell", {"input": ""}, True),
    ]
    sent = response.turn_transcript[-1].to_openai()["tool_calls"]
    assert [c["type"] for c in sent] == ["custom"] * 3


def test_chat_custom_call_with_empty_input_goes_back_with_empty_input() -> None:
    body = sse(tc(custom(0, "call_c1", "noop")), ch({}, "tool_calls"), "[DONE]")
    response = aggregate(body)
    assert calls_of(response) == [("call_c1", "noop", {"input": ""}, True)]
    assert response.turn_transcript[-1].to_openai()["tool_calls"] == [
        {"id": "call_c1", "type": "custom", "custom": {"name": "noop", "input": ""}}
    ]


@settings(max_examples=80, deadline=None)
@given(
    text=st.text(alphabet=' \n\t"\\/é中😀\u2028\x00\x1fab{}', max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=4),
)
def test_chat_custom_input_is_kept_exactly_however_it_is_cut(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    pieces = [text[a:b] for a, b in pairwise(points)] or [""]
    body = sse(
        tc(custom(0, "call_c1", "shell", pieces[0])),
        *(tc(custom(0, text=p)) for p in pieces[1:]),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert calls_of(response) == [("call_c1", "shell", {"input": text}, True)]
    wire = over_http(response.turn_transcript[-1].to_openai())
    assert wire["tool_calls"][0]["custom"]["input"] == text


def test_chat_custom_call_stream_without_done_ends_at_the_finish_reason() -> None:
    body = sse(tc(custom(0, "call_c1", "shell", "ls")), ch({}, "tool_calls"))
    response = aggregate(body)
    assert calls_of(response) == [("call_c1", "shell", {"input": "ls"}, True)]


def test_chat_custom_call_cut_without_any_finish_stays_incomplete() -> None:
    body = sse(tc(custom(0, "call_c1", "shell", "rm -rf /tmp/bu")))
    kind, name, partial = outcome(body)
    assert (kind, name) == ("error", "IncompleteStream")
    [(call_id, call_name, _, raw, complete)] = partial[2]
    assert (call_id, call_name, complete) == ("call_c1", "shell", False)
    assert raw == '{"input": "rm -rf /tmp/bu'


def test_chat_custom_then_function_call_at_the_same_index() -> None:
    body = sse(
        tc(custom(0, "call_c1", "shell", "ls")),
        tc(function(0, "call_f1", "get", '{"a": 1}')),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert calls_of(response) == [
        ("call_c1", "shell", {"input": "ls"}, True),
        ("call_f1", "get", {"a": 1}, True),
    ]


def test_chat_two_custom_calls_at_index_0_with_distinct_ids() -> None:
    """Ollama-style: every call whole at index 0, each with its own id."""
    body = sse(
        tc(custom(0, "call_1", "shell", "ls")),
        tc(custom(0, "call_2", "shell", "pwd")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    assert calls_of(aggregate(body)) == [
        ("call_1", "shell", {"input": "ls"}, True),
        ("call_2", "shell", {"input": "pwd"}, True),
    ]


def test_chat_custom_call_without_id_still_goes_back_as_custom() -> None:
    body = sse(tc(custom(0, None, "shell", "ls")), ch({}, "tool_calls"), "[DONE]")
    response = aggregate(body)
    [call] = response.tool_calls
    assert call.arguments == {"input": "ls"}
    [sent] = response.turn_transcript[-1].to_openai()["tool_calls"]
    assert sent["type"] == "custom"
    assert sent["custom"] == {"name": "shell", "input": "ls"}


def test_chat_custom_call_pieces_without_index_continue_the_last_call() -> None:
    body = sse(
        tc(custom(None, "call_1", "shell", "ls")),
        tc(custom(None, text=" -la")),
        tc(custom(None, "call_2", "python", "1+1")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    assert calls_of(aggregate(body)) == [
        ("call_1", "shell", {"input": "ls -la"}, True),
        ("call_2", "python", {"input": "1+1"}, True),
    ]


def test_chat_custom_call_whose_later_chunks_carry_another_id_is_one_call() -> None:
    """Poolside's id change applies to a custom call as well."""
    body = sse(
        tc(custom(0, "call_A1", "shell", "ls")),
        tc(custom(0, "call_B2", text=" -l")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    [(call_id, name, arguments, complete)] = calls_of(response)
    assert (name, arguments, complete) == ("shell", {"input": "ls -l"}, True)
    [sent] = response.turn_transcript[-1].to_openai()["tool_calls"]
    assert sent == {"id": call_id, "type": "custom", "custom": {"name": "shell", "input": "ls -l"}}


def test_chat_custom_call_survives_to_openai_then_from_openai() -> None:
    body = sse(tc(custom(0, "call_c1", "shell", 'echo "hi"')), ch({}, "tool_calls"), "[DONE]")
    sent = aggregate(body).turn_transcript[-1].to_openai()
    back = ChatMessage.from_openai(sent)
    assert [(c.id, c.name, c.arguments) for c in back.tool_calls or ()] == [
        ("call_c1", "shell", {"input": 'echo "hi"'})
    ]
    assert back.to_openai() == sent


def test_chat_custom_call_and_its_result_fit_the_sdk_types_on_every_api() -> None:
    body = sse(
        ch({"role": "assistant", "content": "Listing."}),
        tc(custom(0, "call_c1", "shell", "ls")),
        tc(function(1, "call_f1", "now")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    history = [
        ChatMessage.user("list the files"),
        *response.turn_transcript,
        ChatMessage.tool("a.txt", "call_c1"),
        ChatMessage.tool("12:00", "call_f1"),
    ]
    for message in to_openai_chat(history):
        assert sdk_problems(over_http(message), ChatCompletionMessageParam) == []
    items = to_responses_input(history)
    outputs = {i["call_id"]: i["type"] for i in items if i.get("type", "").endswith("_output")}
    assert outputs == {"call_c1": "custom_tool_call_output", "call_f1": "function_call_output"}
    calls = {i["call_id"]: i["type"] for i in items if i.get("type", "").endswith("_call")}
    assert calls == {"call_c1": "custom_tool_call", "call_f1": "function_call"}
    _, wire = to_anthropic(history)
    for message in wire:
        assert sdk_problems(over_http(message), MessageParam) == []
    uses = [b for m in wire for b in m["content"] if b["type"] == "tool_use"]
    assert [(b["id"], b["input"]) for b in uses] == [("call_c1", {"input": "ls"}), ("call_f1", {})]


# ================================================================ chat: the Poolside rule


def test_chat_ollama_parallel_calls_at_index_0_with_ids_and_names_streamed_in_pieces() -> None:
    body = sse(
        tc(function(0, "call_1", "read", "")),
        tc(function(0, args='{"p": "a"}')),
        tc(function(0, "call_2", "write", "")),
        tc(function(0, args='{"p": "b"}')),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    assert calls_of(aggregate(body)) == [
        ("call_1", "read", {"p": "a"}, True),
        ("call_2", "write", {"p": "b"}, True),
    ]


def test_chat_id_alone_first_then_the_name_keeps_the_id() -> None:
    body = sse(
        tc({"index": 0, "id": "call_123", "type": "function"}),
        tc(function(0, name="lookup")),
        tc(function(0, args='{"q": 1}')),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    assert calls_of(aggregate(body)) == [("call_123", "lookup", {"q": 1}, True)]


def test_chat_id_alone_then_a_name_with_another_id_starts_that_call() -> None:
    body = sse(
        tc({"index": 0, "id": "call_A", "type": "function"}),
        tc(function(0, "call_B", "lookup")),
        tc(function(0, args='{"q": 1}')),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    assert calls_of(aggregate(body)) == [("call_B", "lookup", {"q": 1}, True)]


def test_chat_second_call_at_index_0_announced_by_its_id_alone() -> None:
    body = sse(
        tc({"index": 0, "id": "call_A", "type": "function"}),
        tc(function(0, name="lookup")),
        tc(function(0, args='{"q": 1}')),
        tc({"index": 0, "id": "call_B", "type": "function"}),
        tc(function(0, name="lookup")),
        tc(function(0, args='{"q": 2}')),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    assert calls_of(aggregate(body)) == [
        ("call_A", "lookup", {"q": 1}, True),
        ("call_B", "lookup", {"q": 2}, True),
    ]


def test_chat_poolside_id_change_on_two_parallel_calls_matches_the_sdk() -> None:
    body = sse(
        tc(function(0, "call_A1", "f")),
        tc(function(1, "call_B1", "g")),
        tc(function(0, "call_A2", args='{"x":')),
        tc(function(1, "call_B2", args='{"y": 2}')),
        tc(function(0, "call_A2", args=" 1}")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    sdk = sdk_chat(body).choices[0].message.tool_calls
    response = aggregate(body)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        (s.function.name, json.loads(s.function.arguments)) for s in sdk
    ]
    ids = [c["id"] for c in response.turn_transcript[-1].to_openai()["tool_calls"]]
    assert len(set(ids)) == 2


@settings(max_examples=120, deadline=None)
@given(
    calls=st.lists(
        st.tuples(st.sampled_from(["f", "g", "h"]), st.integers(0, 5), st.integers(1, 4)),
        min_size=1,
        max_size=3,
    ),
    data=st.data(),
)
def test_chat_ids_changing_on_nameless_chunks_agree_with_the_sdk(
    calls: list[tuple[str, int, int]], data: st.DataObject
) -> None:
    """Each call at its own index, its later chunks with any id (or none): the calls,
    names and arguments are the SDK's (it merges by index)."""
    chunks: list[dict[str, Any]] = []
    for index, (name, value, pieces) in enumerate(calls):
        args = json.dumps({"v": value, "s": "x" * value})
        size = -(-len(args) // pieces)
        chunks.append(tc(function(index, f"call_{index}", name)))
        for at in range(0, len(args), size):
            later_id = data.draw(st.sampled_from([None, f"call_{index}", f"other_{index}_{at}"]))
            chunks.append(tc(function(index, later_id, args=args[at : at + size])))
    body = sse(*chunks, ch({}, "tool_calls"), "[DONE]")
    sdk = sdk_chat(body).choices[0].message.tool_calls
    response = aggregate(body)
    assert [(c.name, c.arguments, c.complete) for c in response.tool_calls] == [
        (s.function.name, json.loads(s.function.arguments), True) for s in sdk
    ]


# ================================================================ chat: thinking_blocks


def litellm_thinking(text: str | None, signature: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "thinking"}
    if text is not None:
        block["thinking"] = text
    block["signature"] = signature
    delta: dict[str, Any] = {"thinking_blocks": [block]}
    if text:
        delta["reasoning_content"] = text
    return ch(delta)


def test_chat_litellm_two_signed_blocks_and_a_redacted_one_go_back_as_three() -> None:
    body = sse(
        ch({"role": "assistant", "content": ""}),
        litellm_thinking("First "),
        litellm_thinking("thought."),
        litellm_thinking(None, "SIG1"),
        ch({"thinking_blocks": [{"type": "redacted_thinking", "data": "ENC"}]}),
        litellm_thinking("Second"),
        litellm_thinking(" thought.", None),
        litellm_thinking("", "SIG2"),
        ch({"content": "Answer."}),
        ch({}, "stop"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.reasoning_text == "First thought.Second thought."
    assert response.text == "Answer."
    assert response.turn_transcript[-1].to_openai()["thinking_blocks"] == [
        {"type": "thinking", "thinking": "First thought.", "signature": "SIG1"},
        {"type": "redacted_thinking", "data": "ENC"},
        {"type": "thinking", "thinking": "Second thought.", "signature": "SIG2"},
    ]


def test_chat_litellm_thinking_blocks_round_trip_through_from_openai() -> None:
    body = sse(
        litellm_thinking("Plan."),
        litellm_thinking("", "SIG"),
        tc(function(0, "toolu_1", "now", "{}")),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    sent = aggregate(body).turn_transcript[-1].to_openai()
    back = ChatMessage.from_openai(sent)
    assert back.to_openai() == sent
    assert sent["thinking_blocks"] == [
        {"type": "thinking", "thinking": "Plan.", "signature": "SIG"}
    ]


def test_chat_empty_thinking_blocks_send_no_thinking_blocks_back() -> None:
    body = sse(
        ch({"content": "Hi", "thinking_blocks": []}),
        ch({"thinking_blocks": None}),
        ch({}, "stop"),
        "[DONE]",
    )
    response = aggregate(body)
    message = response.turn_transcript[-1]
    assert THINKING_BLOCKS not in (message.provider_data or {})
    assert "thinking_blocks" not in message.to_openai()
    assert (
        "thinking_blocks"
        not in ChatMessage.from_openai(
            {"role": "assistant", "content": "Hi", "thinking_blocks": []}
        ).to_openai()
    )


def test_chat_thinking_blocks_beside_tool_calls_in_one_delta() -> None:
    body = sse(
        ch(
            {
                "reasoning_content": "Call it.",
                "thinking_blocks": [{"type": "thinking", "thinking": "Call it.", "signature": "S"}],
                "tool_calls": [function(0, "toolu_1", "now", "{}")],
            }
        ),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.reasoning_text == "Call it."
    assert calls_of(response) == [("toolu_1", "now", {}, True)]
    assert response.turn_transcript[-1].to_openai()["thinking_blocks"] == [
        {"type": "thinking", "thinking": "Call it.", "signature": "S"}
    ]


# ================================================================ chat: usage, errors, finish


def test_chat_moonshot_choice_usage_then_a_top_level_usage_chunk_wins() -> None:
    choice_usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    body = sse(
        ch({"content": "Hi"}),
        {
            "id": "c",
            "object": CHUNK,
            "model": "kimi",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "usage": choice_usage}],
        },
        {
            "id": "c",
            "object": CHUNK,
            "model": "kimi",
            "choices": [],
            "usage": {"prompt_tokens": 19, "completion_tokens": 13, "total_tokens": 32},
        },
        ch({"content": ""}),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.usage == Usage(19, 13, 32)


def test_chat_moonshot_usage_in_a_second_choice_is_ignored() -> None:
    body = sse(
        {
            "object": CHUNK,
            "choices": [
                {"index": 0, "delta": {"content": "A"}, "finish_reason": "stop"},
                {
                    "index": 1,
                    "delta": {"content": "B"},
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
                },
            ],
        },
        "[DONE]",
    )
    response = aggregate(body)
    assert (response.text, response.usage) == ("A", None)


def test_chat_abort_with_a_tool_call_in_flight_is_an_error_finish() -> None:
    body = sse(
        tc(function(0, "call_1", "write", '{"path": "a.txt", "te')),
        ch({}, "abort"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.finish_reason is FinishReason.ERROR
    [call] = response.tool_calls
    assert call.arguments is None  # never run as it is
    assert call.error is not None


def test_chat_fastchat_success_chunk_with_error_code_zero_is_not_an_error() -> None:
    body = sse(
        ch({"content": "Hello"}),
        {**ch({"content": "!"}, "stop"), "error_code": 0},
        "[DONE]",
    )
    assert aggregate(body).text == "Hello!"


# ================================================================ chat: invariants


_NEW_CHAT_CHUNKS = st.sampled_from(
    [
        tc(custom(0, "call_c", "shell", 'a"b')),
        tc(custom(0, text="\n😀")),
        tc(custom(1, "call_d", "py")),
        tc(custom(None, text="x")),
        tc(function(0, "call_other", args='{"k": 1}')),
        tc(function(1, "call_e", "f", "{}")),
        litellm_thinking("t"),
        litellm_thinking(None, "SIG"),
        ch({"thinking_blocks": [{"type": "redacted_thinking", "data": "D"}]}),
        ch({"thinking_blocks": []}),
        ch({"thinking_blocks": None, "content": "c"}),
        {
            "object": CHUNK,
            "choices": [
                {
                    "index": 0,
                    "delta": {},
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 2},
                }
            ],
        },
        {"object": CHUNK, "choices": [{"index": 0, "delta": {"content": "u"}, "usage": None}]},
        {"text": "boom", "error_code": 50001},
        {"text": "fine", "error_code": 0, "choices": []},
        ch({"content": "z"}, "abort"),
        ch({}, "tool_calls"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_NEW_CHAT_CHUNKS, min_size=1, max_size=8), st.booleans())
def test_chat_new_shapes_give_the_same_updates_on_the_fast_and_general_paths(
    chunks: list[dict[str, Any]], done: bool
) -> None:
    events = [ServerSentEvent(data=json.dumps(c, ensure_ascii=False)) for c in chunks]
    if done:
        events.append(ServerSentEvent(data="[DONE]"))
    assert_same_both_ways(OpenAIChatDialect, events)


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(_NEW_CHAT_CHUNKS, min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
)
def test_chat_new_shapes_give_the_same_result_however_the_body_is_split(
    chunks: list[dict[str, Any]], cuts: list[int]
) -> None:
    body = sse(*chunks, "[DONE]")
    assert outcome(split_body(body, cuts)) == outcome(body)  # type: ignore[arg-type]


# ================================================================ anthropic: server blocks


def a_stop(reason: str = "end_turn") -> list[tuple[str, dict[str, Any]]]:
    return [
        ev(
            "message_delta",
            delta={"stop_reason": reason, "stop_sequence": None},
            usage={"output_tokens": 5},
        ),
        ev("message_stop"),
    ]


def a_text(i: int, text: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        block_start(i, {"type": "text", "text": ""}),
        block_delta(i, {"type": "text_delta", "text": text}),
        block_stop(i),
    ]


def a_thinking(i: int, text: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        block_start(i, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(i, {"type": "thinking_delta", "thinking": text}),
        block_delta(i, {"type": "signature_delta", "signature": f"SIG{i}"}),
        block_stop(i),
    ]


def a_redacted(i: int) -> list[tuple[str, dict[str, Any]]]:
    return [block_start(i, {"type": "redacted_thinking", "data": f"ENC{i}"}), block_stop(i)]


def a_search(i: int, query: str) -> list[tuple[str, dict[str, Any]]]:
    start = {"type": "server_tool_use", "id": f"srvtoolu_{i}", "name": "web_search", "input": {}}
    return [
        block_start(i, start),
        block_delta(i, {"type": "input_json_delta", "partial_json": ""}),
        block_delta(i, {"type": "input_json_delta", "partial_json": '{"query": '}),
        block_delta(i, {"type": "input_json_delta", "partial_json": json.dumps(query) + "}"}),
        block_stop(i),
    ]


def a_result(i: int, use_id: str) -> list[tuple[str, dict[str, Any]]]:
    result = {
        "type": "web_search_result",
        "url": f"https://example.com/{i}",
        "title": "Example",
        "encrypted_content": f"EqgfC{i}",
        "page_age": None,
    }
    block = {"type": "web_search_tool_result", "tool_use_id": use_id, "content": [result]}
    return [block_start(i, block), block_stop(i)]


def a_tool(i: int, args: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        block_start(i, {"type": "tool_use", "id": f"toolu_{i}", "name": "remember", "input": {}}),
        block_delta(i, {"type": "input_json_delta", "partial_json": json.dumps(args)}),
        block_stop(i),
    ]


def _sdk_order(body: bytes) -> list[tuple[str, Any]]:
    return _texts_joined(
        [_key(b.model_dump(exclude_none=True)) for b in sdk_anthropic(body).content]
    )


def _mine(response: AgentResponse) -> list[tuple[str, Any]]:
    return _texts_joined([_key(b) for b in assistant_wire_blocks(response)])


def _texts_joined(keys: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Adjacent text blocks as one (rafrx sends a run of text blocks as one: Anthropic
    takes either)."""
    out: list[tuple[str, Any]] = []
    for kind, value in keys:
        if kind == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + value)
        else:
            out.append((kind, value))
    return out


def _key(block: dict[str, Any]) -> tuple[str, Any]:
    kind = block["type"]
    if kind == "text":
        return kind, block["text"]
    if kind == "thinking":
        return kind, (block["thinking"], block["signature"])
    if kind == "redacted_thinking":
        return kind, block["data"]
    if kind in ("tool_use", "server_tool_use"):
        return kind, (block["id"], block["name"], block["input"])
    if kind == "web_search_tool_result":
        return kind, (block["tool_use_id"], [r.get("url") for r in block["content"]])
    return kind, None


def test_anthropic_text_and_two_searches_then_a_tool_use_in_the_sdk_order() -> None:
    body = sse(
        message_start(),
        *a_text(0, "Let me search."),
        *a_search(1, "paris weather"),
        *a_result(2, "srvtoolu_1"),
        *a_text(3, "Now the other."),
        *a_search(4, "lyon weather"),
        *a_result(5, "srvtoolu_4"),
        *a_text(6, "Both sunny."),
        *a_tool(7, {"fact": "sunny"}),
        *a_stop("tool_use"),
    )
    response = aggregate(body, "anthropic")
    assert _mine(response) == _sdk_order(body)
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_anthropic_thinking_around_a_search_in_the_sdk_order() -> None:
    body = sse(
        message_start(),
        *a_thinking(0, "Search first."),
        *a_search(1, "q"),
        *a_result(2, "srvtoolu_1"),
        *a_thinking(3, "Got it."),
        *a_text(4, "Answer."),
        *a_tool(5, {"x": 1}),
        *a_stop("tool_use"),
    )
    response = aggregate(body, "anthropic")
    assert _mine(response) == _sdk_order(body)
    assert response.reasoning_text == "Search first.Got it."


_A_PARTS = st.lists(
    st.sampled_from(["text", "thinking", "redacted", "search"]), min_size=1, max_size=6
)


@settings(max_examples=150, deadline=None)
@given(parts=_A_PARTS, tools=st.integers(0, 2), reason=st.sampled_from(["end_turn", "pause_turn"]))
def test_anthropic_block_order_going_back_is_the_sdks(
    parts: list[str], tools: int, reason: str
) -> None:
    """Text, thinking, redacted thinking and searches (a server_tool_use and its result) in
    any order, then client tool calls: to_anthropic gives back the blocks the SDK saw."""
    events: list[Any] = [message_start()]
    i = 0
    for part in parts:
        if part == "text":
            events += a_text(i, f"T{i}.")
        elif part == "thinking":
            events += a_thinking(i, f"R{i}.")
        elif part == "redacted":
            events += a_redacted(i)
        else:
            events += a_search(i, f"q{i}")
            i += 1
            events += a_result(i, f"srvtoolu_{i - 1}")
        i += 1
    for _ in range(tools):
        events += a_tool(i, {"n": i})
        i += 1
    body = sse(*events, *a_stop("tool_use" if tools else reason))
    response = aggregate(body, "anthropic")
    assert _mine(response) == _sdk_order(body)
    _, wire = to_anthropic(response.turn_transcript)
    for message in wire:
        assert sdk_problems(over_http(message), MessageParam) == []


@settings(max_examples=40, deadline=None)
@given(parts=_A_PARTS, cuts=st.lists(st.integers(0, 20_000), max_size=6))
def test_anthropic_server_blocks_give_the_same_result_however_the_body_is_split(
    parts: list[str], cuts: list[int]
) -> None:
    events: list[Any] = [message_start()]
    for i, part in enumerate(parts):
        events += {
            "text": lambda i: a_text(i, "é😀 t"),
            "thinking": lambda i: a_thinking(i, "r"),
            "redacted": a_redacted,
            "search": lambda i: a_search(i, 'q "x"'),
        }[part](i)
    body = sse(*events, *a_stop("pause_turn"))
    whole = outcome(body, "anthropic")
    assert outcome(split_body(body, cuts), "anthropic") == whole  # type: ignore[arg-type]
    assert whole[1][3] is FinishReason.OTHER


def test_anthropic_unknown_block_type_is_kept_whole_in_its_place() -> None:
    unknown = {"type": "container_upload", "file_id": "file_01"}
    body = sse(
        message_start(),
        *a_text(0, "Before."),
        block_start(1, unknown),
        block_delta(1, {"type": "some_future_delta", "x": 1}),
        block_stop(1),
        *a_text(2, "After."),
        *a_stop(),
    )
    response = aggregate(body, "anthropic")
    assert response.text == "Before.After."
    assert assistant_wire_blocks(response) == [
        {"type": "text", "text": "Before."},
        unknown,
        {"type": "text", "text": "After."},
    ]


def test_anthropic_web_search_error_result_is_kept_as_it_came() -> None:
    error = {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_0", "content": error}
    body = sse(
        message_start(),
        *a_search(0, "q"),
        block_start(1, result),
        block_stop(1),
        *a_text(2, "I could not search."),
        *a_stop(),
    )
    response = aggregate(body, "anthropic")
    blocks = assistant_wire_blocks(response)
    assert [b["type"] for b in blocks] == ["server_tool_use", "web_search_tool_result", "text"]
    assert blocks[1] == result
    _, wire = to_anthropic(response.turn_transcript)
    assert sdk_problems(over_http(wire[-1]), MessageParam) == []


def test_anthropic_server_tool_use_cut_by_max_tokens_is_not_sent_back_broken() -> None:
    body = sse(
        message_start(),
        *a_text(0, "Searching."),
        block_start(
            1, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
        ),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"query": "par'}),
        *a_stop("max_tokens"),
    )
    response = aggregate(body, "anthropic")
    assert response.finish_reason is FinishReason.LENGTH
    assert response.text == "Searching."
    blocks = assistant_wire_blocks(response)
    for block in blocks:
        if block["type"] == "server_tool_use":
            assert block["input"] == {"query": "par"} or block["input"] == {}
    _, wire = to_anthropic(response.turn_transcript)
    for message in wire:
        assert sdk_problems(over_http(message), MessageParam) == []


def test_anthropic_server_input_after_its_stop_is_ignored() -> None:
    body = sse(
        message_start(),
        *a_search(0, "q"),
        block_delta(0, {"type": "input_json_delta", "partial_json": "garbage"}),
        *a_stop("pause_turn"),
    )
    response = aggregate(body, "anthropic")
    [block] = assistant_wire_blocks(response)
    assert block["input"] == {"query": "q"}


def test_anthropic_mcp_tool_use_with_its_whole_input_at_start_is_kept() -> None:
    use = {
        "type": "mcp_tool_use",
        "id": "mcptoolu_1",
        "name": "roll",
        "server_name": "dice",
        "input": {"sides": 6},
    }
    result = {
        "type": "mcp_tool_result",
        "tool_use_id": "mcptoolu_1",
        "is_error": False,
        "content": [{"type": "text", "text": "4"}],
    }
    body = sse(
        message_start(),
        block_start(0, use),
        block_stop(0),
        block_start(1, result),
        block_stop(1),
        *a_text(2, "You rolled 4."),
        *a_stop(),
    )
    response = aggregate(body, "anthropic")
    assert assistant_wire_blocks(response) == [
        use,
        result,
        {"type": "text", "text": "You rolled 4."},
    ]


def test_anthropic_server_blocks_survive_to_anthropic_then_from_anthropic() -> None:
    body = sse(
        message_start(),
        *a_text(0, "Let me search."),
        *a_search(1, "paris"),
        *a_result(2, "srvtoolu_1"),
        *a_text(3, "Sunny."),
        *a_stop(),
    )
    response = aggregate(body, "anthropic")
    system, wire = to_anthropic(response.turn_transcript)
    assert to_anthropic(from_anthropic(system, wire)) == (system, wire)


def test_anthropic_pause_turn_resume_request_fits_the_sdk_type() -> None:
    body = sse(
        message_start(),
        *a_thinking(0, "Search."),
        *a_text(1, "One moment."),
        *a_search(2, "paris"),
        *a_stop("pause_turn"),
    )
    response = aggregate(body, "anthropic")
    assert response.finish_reason is FinishReason.OTHER
    history = [ChatMessage.user("weather?"), *response.turn_transcript]
    _, wire = to_anthropic(history)
    assert [b["type"] for b in wire[-1]["content"]] == ["thinking", "text", "server_tool_use"]
    for message in wire:
        assert sdk_problems(over_http(message), MessageParam) == []


# ================================================================ responses


def r_reasoning(rid: str, parts: list[str], **extra: Any) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": p} for p in parts]
    return {"type": "reasoning", "id": rid, "summary": summary, **extra}


def r_message(mid: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
    return {"type": "message", "id": mid, "role": "assistant", "status": status, "content": content}


def reasoning_done_only(rid: str, parts: list[str], index: int, done_id: str | None = None) -> list:
    events = [rs("response.output_item.added", output_index=index, item=r_reasoning(rid, []))]
    for k, part in enumerate(parts):
        events.append(
            rs(
                "response.reasoning_summary_text.done",
                item_id=rid,
                output_index=index,
                summary_index=k,
                text=part,
            )
        )
    finished = r_reasoning(done_id or rid, parts)
    events.append(rs("response.output_item.done", output_index=index, item=finished))
    return events


def reasoning_streamed(rid: str, parts: list[str], index: int) -> list:
    events = [rs("response.output_item.added", output_index=index, item=r_reasoning(rid, []))]
    for k, part in enumerate(parts):
        common = {"item_id": rid, "output_index": index, "summary_index": k}
        events.append(rs("response.reasoning_summary_text.delta", delta=part, **common))
        events.append(rs("response.reasoning_summary_text.done", text=part, **common))
    events.append(rs("response.output_item.done", output_index=index, item=r_reasoning(rid, parts)))
    return events


def message_streamed(mid: str, text: str, index: int, with_index: bool = True) -> list:
    at = {"output_index": index} if with_index else {}
    return [
        rs(
            "response.output_item.added", output_index=index, item=r_message(mid, "", "in_progress")
        ),
        rs("response.output_text.delta", item_id=mid, content_index=0, delta=text, **at),
        rs("response.output_text.done", item_id=mid, content_index=0, text=text, **at),
        rs("response.output_item.done", output_index=index, item=r_message(mid, text)),
    ]


def test_responses_several_summary_parts_sent_only_as_done_are_each_kept_once() -> None:
    parts = ["**Plan** ", "Check the diff. ", "Then answer."]
    body = sse(
        rs("response.created", response=RESP),
        *reasoning_done_only("rs_1", parts, 0),
        *message_streamed("msg_1", "OK.", 1),
        completed(r_reasoning("rs_1", parts), r_message("msg_1", "OK.")),
    )
    response = aggregate(body, "openai-responses")
    assert (response.reasoning_text, response.text) == ("".join(parts), "OK.")


def test_responses_deltas_for_one_item_and_done_only_for_another() -> None:
    body = sse(
        rs("response.created", response=RESP),
        *reasoning_streamed("rs_1", ["A. ", "B. "], 0),
        *reasoning_done_only("rs_2", ["C. "], 1),
        completed(r_reasoning("rs_1", ["A. ", "B. "]), r_reasoning("rs_2", ["C. "])),
    )
    response = aggregate(body, "openai-responses")
    assert response.reasoning_text == "A. B. C. "


def test_responses_reasoning_only_in_the_finished_item_is_kept_once() -> None:
    item = r_reasoning("rs_1", ["Whole."], content=[{"type": "reasoning_text", "text": ""}])
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item=r_reasoning("rs_1", [])),
        rs("response.output_item.done", output_index=0, item=item),
        completed(item),
    )
    response = aggregate(body, "openai-responses")
    assert response.reasoning_text == "Whole."
    kept = response.turn_transcript[-1].provider_data or {}
    assert [b["id"] for b in kept["openai_reasoning"] if b["type"] == "reasoning"] == ["rs_1"]


def test_responses_reasoning_item_whose_id_changes_per_stage_is_reasoned_once() -> None:
    body = sse(
        rs("response.created", response=RESP),
        *reasoning_done_only("rs_A", ["Think."], 0, done_id="rs_B"),
        *message_streamed("msg_1", "Hi.", 1),
        completed(r_reasoning("rs_C", ["Think."]), r_message("msg_1", "Hi.")),
    )
    response = aggregate(body, "openai-responses")
    assert response.reasoning_text == "Think."


def test_responses_completed_incomplete_with_a_finished_function_call() -> None:
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "now",
        "arguments": "{}",
        "status": "completed",
    }
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item={**call, "arguments": ""}),
        rs("response.function_call_arguments.delta", item_id="fc_1", output_index=0, delta="{}"),
        rs("response.function_call_arguments.done", item_id="fc_1", output_index=0, arguments="{}"),
        rs("response.output_item.done", output_index=0, item=call),
        completed(call, status="incomplete", incomplete_details={"reason": "max_output_tokens"}),
    )
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.LENGTH
    assert calls_of(response) == [("call_1", "now", {}, True)]


def test_responses_completed_incomplete_for_content_filter_and_without_details() -> None:
    filtered = sse(
        rs("response.created", response=RESP),
        completed(status="incomplete", incomplete_details={"reason": "content_filter"}),
    )
    assert aggregate(filtered, "openai-responses").finish_reason is FinishReason.CONTENT_FILTER
    bare = sse(rs("response.created", response=RESP), completed(status="incomplete"))
    assert aggregate(bare, "openai-responses").finish_reason is not FinishReason.STOP


def test_responses_completed_incomplete_message_only_in_the_output_is_kept() -> None:
    body = sse(
        rs("response.created", response=RESP),
        completed(
            r_message("msg_1", "The first half", "incomplete"),
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        ),
    )
    response = aggregate(body, "openai-responses")
    assert (response.text, response.finish_reason) == ("The first half", FinishReason.LENGTH)


def test_responses_completed_incomplete_cut_custom_call_is_not_complete() -> None:
    call = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "shell"}
    body = sse(
        rs("response.created", response=RESP),
        rs(
            "response.output_item.added",
            output_index=0,
            item={**call, "input": "", "status": "in_progress"},
        ),
        rs(
            "response.custom_tool_call_input.delta",
            item_id="ctc_1",
            output_index=0,
            delta="rm -rf /tmp/bu",
        ),
        completed(
            {**call, "input": "rm -rf /tmp/bu", "status": "incomplete"},
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        ),
    )
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.LENGTH
    [c] = response.tool_calls
    assert c.complete is False


def test_responses_completed_incomplete_cut_function_call_is_not_complete() -> None:
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "write"}
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item={**call, "arguments": ""}),
        rs(
            "response.function_call_arguments.delta",
            item_id="fc_1",
            output_index=0,
            delta='{"path": "a',
        ),
        completed(
            {**call, "arguments": '{"path": "a', "status": "incomplete"},
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        ),
    )
    [c] = aggregate(body, "openai-responses").tool_calls
    assert c.complete is False


def test_responses_message_with_changing_ids_goes_back_as_one_message_item() -> None:
    reasoning = r_reasoning("rs_1", ["Think."], encrypted_content="ENC")
    body = sse(
        rs("response.created", response=RESP),
        *reasoning_streamed("rs_1", ["Think."], 0),
        rs(
            "response.output_item.added", output_index=1, item=r_message("msg_A", "", "in_progress")
        ),
        rs(
            "response.output_text.delta",
            item_id="msg_A",
            output_index=1,
            content_index=0,
            delta="Hi",
        ),
        rs("response.output_item.done", output_index=1, item=r_message("msg_B", "Hi")),
        completed(reasoning, r_message("msg_C", "Hi")),
    )
    response = aggregate(body, "openai-responses")
    assert response.text == "Hi"
    items = to_responses_input(response.turn_transcript)
    messages = [i for i in items if i.get("type") == "message" or i.get("role") == "assistant"]
    assert len(messages) == 1


def test_responses_a_second_message_only_in_its_finished_item_is_not_swallowed() -> None:
    body = sse(
        rs("response.created", response=RESP),
        *message_streamed("msg_1", "First. ", 0),
        rs(
            "response.output_item.added", output_index=1, item=r_message("msg_2", "", "in_progress")
        ),
        rs("response.output_item.done", output_index=1, item=r_message("msg_2", "Second.")),
        completed(r_message("msg_1", "First. "), r_message("msg_2", "Second.")),
    )
    assert aggregate(body, "openai-responses").text == "First. Second."


def test_responses_a_second_message_only_in_the_completed_output_is_not_swallowed() -> None:
    body = sse(
        rs("response.created", response=RESP),
        *message_streamed("msg_1", "First. ", 0),
        completed(r_message("msg_1", "First. "), r_message("msg_2", "Second.")),
    )
    assert aggregate(body, "openai-responses").text == "First. Second."


def test_responses_deltas_without_output_index_are_text_once() -> None:
    body = sse(
        rs("response.created", response=RESP),
        *message_streamed("msg_1", "Hello.", 0, with_index=False),
        *message_streamed("msg_2", " Bye.", 1, with_index=False),
        completed(r_message("msg_1", "Hello."), r_message("msg_2", " Bye.")),
    )
    assert aggregate(body, "openai-responses").text == "Hello. Bye."


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["streamed", "done_only", "item_only"]), min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 20_000), max_size=5),
)
def test_responses_reasoning_shapes_are_kept_once_and_split_invariant(
    kinds: list[str], cuts: list[int]
) -> None:
    events: list[Any] = [rs("response.created", response=RESP)]
    finals = []
    expected = ""
    for index, kind in enumerate(kinds):
        rid, parts = f"rs_{index}", [f"<{index}a>", f"<{index}b>"]
        expected += "".join(parts)
        if kind == "streamed":
            events += reasoning_streamed(rid, parts, index)
        elif kind == "done_only":
            events += reasoning_done_only(rid, parts, index)
        else:
            events.append(
                rs("response.output_item.done", output_index=index, item=r_reasoning(rid, parts))
            )
        finals.append(r_reasoning(rid, parts))
    body = sse(*events, completed(*finals))
    whole = outcome(body, "openai-responses")
    assert whole[1][1] == expected
    assert outcome(split_body(body, cuts), "openai-responses") == whole  # type: ignore[arg-type]
