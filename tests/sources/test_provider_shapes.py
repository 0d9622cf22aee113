"""Stream shapes that providers really send, each with public evidence, end to end.

Every body is built by hand after a documented or reported shape (the URL is in
each test's docstring) and goes through ``from_sse(body, dialect)`` →
``convert()`` → ``aggregate()``: the text, reasoning, tool calls, usage, finish
reason and errors must be what a user of that provider expects, and nothing
received may be lost. Where an official SDK accumulator can read the same
events (openai's ``ChatCompletionStreamState``, anthropic's ``accumulate_event``,
openai's ``Response`` model), it is the oracle.

The shapes already covered by ``test_dialect_quirks.py``, ``test_dialects.py``,
``test_sdk_differential.py`` and the recorded fixtures are not repeated here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from anthropic._models import construct_type as anthropic_construct
from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from openai._models import construct_type as openai_construct
from openai._streaming import SSEDecoder as OpenAISSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import Response

from rafrx import operators as ops
from rafrx.content import ToolCallArgsProgressContent, UriContent
from rafrx.errors import ProviderError, RafrxError
from rafrx.events import ToolApprovalRequestEvent
from rafrx.messages import ToolCall
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.sources import from_sse
from tests.sources.test_dialect_quirks import CHUNK, sse

# ---------------------------------------------------------------- helpers


def ch(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """A Chat Completions chunk with one choice (index 0)."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    base = {"id": "chatcmpl-1", "object": CHUNK, "created": 1, "model": "m"}
    return {**base, "choices": [choice], **extra}


def tc(*calls: dict[str, Any]) -> dict[str, Any]:
    """A chunk carrying ``calls`` as ``delta.tool_calls``."""
    return ch({"tool_calls": list(calls)})


def aggregate(body: bytes, dialect: str = "openai-chat") -> AgentResponse:
    """The aggregated response of a body that must complete without error."""
    response = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    assert isinstance(response, AgentResponse)
    return response


def failure(body: bytes, dialect: str = "openai-chat") -> RafrxError:
    """The typed error of a body that must fail (its ``partial`` is set by aggregate())."""
    results: list[AgentResponse] = []
    errors: list[Exception] = []
    from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).subscribe(
        results.append, errors.append
    )
    assert results == [], "the stream completed; the provider reported an error"
    [error] = errors
    assert isinstance(error, RafrxError), repr(error)
    assert error.partial is not None
    return error


def converted(body: bytes, dialect: str) -> list[AgentResponseResult]:
    """The converted results of a body (whatever the stream's end)."""
    results: list[AgentResponseResult] = []
    from_sse(body, dialect).pipe(ops.convert()).subscribe(results.append, lambda _err: None)
    return results


def sdk_chat(body: bytes) -> Any:
    """openai-python's snapshot of a chat stream (as test_sdk_differential.py reads it)."""
    state: Any = ChatCompletionStreamState()
    for event in OpenAISSEDecoder().iter_bytes(iter([body])):
        if event.data.startswith("[DONE]"):
            break
        chunk = openai_construct(type_=ChatCompletionChunk, value=event.json())
        if chunk.object == CHUNK:
            state.handle_chunk(chunk)
    return state.current_completion_snapshot


def sdk_anthropic(body: bytes) -> Any:
    """anthropic-sdk-python's MessageStream snapshot of a Messages stream."""
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for event in AnthropicSSEDecoder().iter_bytes(iter([body])):
        if event.event in (None, "ping") or not event.data:
            continue
        raw = anthropic_construct(type_=RawMessageStreamEvent, value=event.json())
        snapshot = accumulate_event(event=raw, current_snapshot=snapshot, json_bufs=json_bufs)
    return snapshot


def uris(results: Iterable[AgentResponseResult]) -> list[str]:
    return [c.uri for r in results for c in r.contents if isinstance(c, UriContent)]


# ================================================================ openai-chat


def test_chat_legacy_function_call_deltas_become_a_tool_call() -> None:
    """The deprecated ``functions`` API streams ``delta.function_call`` (name, then argument
    pieces) and ends with ``finish_reason: "function_call"``; Azure deployments and older
    compatible servers still send it. rafrx already writes and reads this shape in
    ``ChatMessage.to_openai()`` / ``from_openai()``.

    Evidence: https://github.com/openai/openai-node/issues/188 (accumulating
    ``delta.function_call.name`` / ``.arguments`` until ``finish_reason == "function_call"``);
    openai-python's ``ChoiceDelta.function_call`` ("Deprecated and replaced by tool_calls").
    Oracle: ``ChatCompletionStreamState`` rebuilds ``message.function_call``.
    """
    body = sse(
        ch({"role": "assistant", "content": None, "function_call": {"name": "get_weather"}}),
        ch({"function_call": {"arguments": '{"city":'}}),
        ch({"function_call": {"arguments": ' "Paris"}'}}),
        ch({}, "function_call"),
        "[DONE]",
    )
    sdk = sdk_chat(body).choices[0]
    assert (sdk.message.function_call.name, sdk.message.function_call.arguments) == (
        "get_weather",
        '{"city": "Paris"}',
    )
    response = aggregate(body)
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        (sdk.message.function_call.name, json.loads(sdk.message.function_call.arguments))
    ]


def test_chat_groq_usage_only_under_x_groq() -> None:
    """Groq long sent the usage of a stream only in the last chunk's ``x_groq.usage``
    (no top-level ``usage``), with its own timing fields mixed in.

    Evidence: https://github.com/vercel/ai/issues/1651 ("They return the usage object under
    a x-groq key in the last chunk"), https://github.com/Portkey-AI/gateway/issues/1072.
    """
    body = sse(
        ch({"role": "assistant", "content": ""}),
        ch({"content": "Hi!"}),
        {
            **ch({}, "stop"),
            "x_groq": {
                "id": "req_01hy8ppkajfqk987jv2vx88m9r",
                "usage": {
                    "queue_time": 0.07535312,
                    "prompt_tokens": 23,
                    "prompt_time": 0.006,
                    "completion_tokens": 19,
                    "completion_time": 0.022,
                    "total_tokens": 42,
                    "total_time": 0.028,
                },
            },
        },
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "Hi!"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(23, 19, 42)


def test_chat_same_function_parallel_calls_all_at_index_0_without_ids() -> None:
    """Ollama (through LiteLLM) and Gemini-to-OpenAI adapters stream parallel calls each
    whole, every one at ``index: 0``; when they call the same function and carry no id,
    only the arguments restarting after a complete JSON value tell them apart.

    Evidence: https://github.com/huggingface/smolagents/pull/1958 (Ollama: merged into
    ``{"query": "Emma Bull"}{"query": "Virginia Woolf"}``),
    https://github.com/su-kaka/gcli2api/pull/406 (Gemini: three ``get_weather`` calls at
    index 0), https://github.com/NousResearch/hermes-agent/pull/12930.
    """
    call = {"index": 0, "type": "function", "function": {"name": "get_weather"}}
    body = sse(
        ch({"role": "assistant", "content": None}),
        tc({**call, "function": {**call["function"], "arguments": '{"city": "Beijing"}'}}),
        tc({**call, "function": {**call["function"], "arguments": '{"city": "Shanghai"}'}}),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert [(c.name, c.arguments, c.error) for c in response.tool_calls] == [
        ("get_weather", {"city": "Beijing"}, None),
        ("get_weather", {"city": "Shanghai"}, None),
    ]
    assert len({c.id for c in response.tool_calls}) == 2


def test_chat_url_citation_annotations_become_uris() -> None:
    """OpenAI's search models (``gpt-4o-search-preview``, ``web_search_options``) stream
    ``delta.annotations`` of type ``url_citation`` in Chat Completions.

    Evidence: https://github.com/vercel/ai/pull/7754 (citations in ``streamText``),
    https://github.com/MacPaw/OpenAI/pull/399 ("When OpenAI uses web tool call in stream
    mode - it returns annotation object"), https://github.com/openai/openai-agents-js/pull/1617.
    Oracle: ``ChatCompletionStreamState`` keeps ``message.annotations``.
    """
    citation = {
        "type": "url_citation",
        "url_citation": {
            "url": "https://example.com/paris-weather",
            "title": "Paris weather",
            "start_index": 0,
            "end_index": 12,
        },
    }
    body = sse(
        ch({"role": "assistant", "content": ""}),
        ch({"content": "It is sunny."}),
        ch({"annotations": [citation]}),
        ch({}, "stop"),
        "[DONE]",
    )
    sdk = sdk_chat(body).choices[0].message
    assert [a.url_citation.url for a in sdk.annotations] == ["https://example.com/paris-weather"]
    assert aggregate(body).text == "It is sunny."
    assert uris(converted(body, "openai-chat")) == [a.url_citation.url for a in sdk.annotations]


def test_chat_gemini_thought_signature_on_a_tool_call_goes_back() -> None:
    """Gemini 3 on its OpenAI-compatible endpoint puts an opaque signature on each streamed
    tool call, ``extra_content.google.thought_signature``, which must come back on that call
    in the next request of the tool loop.

    Evidence: https://github.com/earendil-works/pi/pull/3234 ("Function call is missing a
    thought_signature in functionCall parts"), https://github.com/crmne/ruby_llm/issues/591,
    https://github.com/Gitlawb/openclaude/issues/76.
    """
    signature = "CiQBcsjafPYQ3rUqZ0Xg1Ykx5mP0g0wqU7jL7X4uQ3+VNmVv3Qo="
    body = sse(
        ch({"role": "assistant"}),
        tc(
            {
                "id": "function-call-1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                "extra_content": {"google": {"thought_signature": signature}},
            }
        ),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.tool_calls == (ToolCall("function-call-1", "get_weather", {"city": "Paris"}),)
    sent_back = response.turn_transcript[-1].to_openai()["tool_calls"][0]
    assert sent_back.get("extra_content") == {"google": {"thought_signature": signature}}


@pytest.mark.parametrize("fused", [True, False], ids=["convert", "operators"])
@pytest.mark.parametrize("signed", [0, 1], ids=["signed-first", "signed-later"])
def test_chat_gemini_signature_on_calls_without_ids_goes_back_on_each(
    fused: bool, signed: int
) -> None:
    """An adapter that streams Gemini's calls with no ids: each call gets an id of
    rafrx's, and its signature (on its first delta or a later one) goes back on it."""
    signatures = ["c2lnLW9uZQ==", "c2lnLXR3bw=="]
    pieces = [
        [
            {"index": i, "function": {"name": "get_weather", "arguments": '{"city":'}},
            {"index": i, "function": {"arguments": f'"{city}"}}'}},
        ]
        for i, city in enumerate(["Paris", "Oslo"])
    ]
    for i, signature in enumerate(signatures):
        pieces[i][signed]["extra_content"] = {"google": {"thought_signature": signature}}
    body = sse(
        ch({"role": "assistant"}),
        *(tc(piece) for call in pieces for piece in call),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    if fused:
        response = aggregate(body)
    else:
        response = (
            from_sse(body, "openai-chat")
            .pipe(
                ops.split_legacy_delta(),
                ops.accumulate_tool_calls(),
                ops.parse_args_stream(),
                ops.flush_tool_calls(),
                ops.aggregate(),
            )
            .run()
        )
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert all(c.id.startswith("call_") for c in response.tool_calls)
    sent_back = response.turn_transcript[-1].to_openai()["tool_calls"]
    assert [call["id"] for call in sent_back] == [c.id for c in response.tool_calls]
    assert [call.get("extra_content") for call in sent_back] == [
        {"google": {"thought_signature": s}} for s in signatures
    ]


def test_chat_vllm_error_chunk_before_any_token_is_typed_and_retryable() -> None:
    """vLLM reports a failed generation inside a 200 stream as ``data: {"error": {...}}``
    followed by ``data: [DONE]``, possibly before any token.

    Evidence: https://github.com/vllm-project/guidellm/issues/743 (the exact two events),
    https://github.com/vllm-project/vllm/pull/40986.
    """
    body = sse(
        {"error": {"message": "TimeoutError", "type": "GatewayTimeout", "code": 504}},
        "[DONE]",
    )
    error = failure(body)
    assert isinstance(error, ProviderError)
    assert (error.message, error.error_type, error.code, error.retryable) == (
        "TimeoutError",
        "GatewayTimeout",
        "504",
        True,
    )
    assert error.partial is not None
    assert error.partial.finish_reason is FinishReason.ERROR
    assert error.partial.text == ""


def test_chat_llama_cpp_error_field_mid_stream_is_a_provider_error() -> None:
    """llama.cpp servers built through 2025 report a failure mid-stream, at HTTP 200,
    as a non-standard ``error:`` SSE field, then ``data: [DONE]``. A WHATWG decoder
    drops the field, and the stream would seem to end well.

    Evidence: https://github.com/ggml-org/llama.cpp/pull/16109 (the fix, which
    changed ``server_sent_event(sink, "error", ...)``),
    https://github.com/coddy-project/coddy-agent/pull/106 (the exact bytes, b5966).
    """
    error_object = {
        "code": 400,
        "message": "the request exceeds the available context size. try increasing it",
        "type": "invalid_request_error",
    }
    body = (
        sse(ch({"role": "assistant", "content": None}), ch({"content": "Par"}))
        + b"error: "
        + json.dumps(error_object).encode()
        + b"\n\n"
        + sse("[DONE]")
    )
    error = failure(body)
    assert isinstance(error, ProviderError)
    assert (error.message, error.error_type, error.code) == (
        error_object["message"],
        "invalid_request_error",
        "400",
    )
    assert error.partial is not None
    assert (error.partial.text, error.partial.finish_reason) == ("Par", FinishReason.ERROR)


def test_chat_role_and_empty_tool_calls_on_every_delta_then_usage_tail() -> None:
    """Groq (through Portkey) repeats ``role`` and an empty ``tool_calls: []`` on every
    delta; the usage comes in a last chunk with ``choices: []``.

    Evidence: https://github.com/Portkey-AI/gateway/issues/1338 (the recorded chunks).
    Oracle: ``ChatCompletionStreamState``.
    """
    delta = {"role": "assistant", "tool_calls": []}
    body = sse(
        ch({**delta, "content": ""}),
        ch({**delta, "content": "Hello"}),
        ch({**delta, "content": "!"}),
        ch({**delta, "content": ""}, "length"),
        {
            "id": "chatcmpl-1",
            "object": CHUNK,
            "created": 1,
            "model": "m",
            "choices": [],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        },
        "[DONE]",
    )
    sdk = sdk_chat(body)
    response = aggregate(body)
    assert response.text == sdk.choices[0].message.content == "Hello!"
    assert response.tool_calls == ()
    assert response.finish_reason is FinishReason.LENGTH
    assert response.usage == Usage(11, 3, 14)
    assert (sdk.usage.prompt_tokens, sdk.usage.completion_tokens) == (11, 3)


def test_chat_usage_on_the_finish_chunk_survives_a_usage_less_tail() -> None:
    """xAI sends the usage with the finish chunk, then one more chunk with empty
    ``choices`` and no usage: the usage must not be lost.

    Evidence: https://github.com/BerriAI/litellm/issues/17136,
    https://github.com/openai/openai-agents-python/pull/2126. No SDK oracle here: openai's
    ``ChatCompletionStreamState`` (3.63) itself overwrites the usage with the tail's ``None``.
    """
    usage = {"prompt_tokens": 29, "completion_tokens": 2, "total_tokens": 31}
    body = sse(
        ch({"role": "assistant", "content": "Hello"}),
        ch({}, "stop", usage=usage),
        {"id": "chatcmpl-1", "object": CHUNK, "created": 1, "model": "m", "choices": []},
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "Hello"
    assert response.usage == Usage(29, 2, 31)


def test_chat_deepseek_usage_with_cache_hit_and_reasoning_tokens() -> None:
    """DeepSeek's final chunk carries its own ``prompt_cache_hit_tokens`` /
    ``prompt_cache_miss_tokens`` next to OpenAI's ``prompt_tokens_details.cached_tokens``
    and ``completion_tokens_details.reasoning_tokens``.

    Evidence: tests/data/fixtures/openai-chat/deepseek-reasoning-tools.sse (recorded, from
    vercel/ai), https://github.com/prism-php/prism/pull/1021 (clients dropping these counts).
    """
    usage = {
        "prompt_tokens": 339,
        "completion_tokens": 83,
        "total_tokens": 422,
        "prompt_tokens_details": {"cached_tokens": 320},
        "completion_tokens_details": {"reasoning_tokens": 39},
        "prompt_cache_hit_tokens": 320,
        "prompt_cache_miss_tokens": 19,
    }
    body = sse(
        ch({"role": "assistant", "content": None, "reasoning_content": "Think."}),
        ch({"content": "Done.", "reasoning_content": None}),
        ch({"content": "", "reasoning_content": None}, "stop", usage=usage),
        "[DONE]",
    )
    response = aggregate(body)
    assert (response.reasoning_text, response.text) == ("Think.", "Done.")
    assert response.usage == Usage(339, 83, 422, reasoning_tokens=39, cached_tokens=320)


def test_chat_openrouter_reasoning_details_pieces_are_merged_and_go_back() -> None:
    """OpenRouter streams ``reasoning_details`` of a thinking model in pieces: the text
    of one entry (``type`` + ``index``) over many deltas, its signature in a later one.
    They must go back merged, as one entry per index, on the assistant message.

    Evidence: https://openrouter.ai/docs/guides/best-practices/reasoning-tokens
    (preserving reasoning blocks); the repo's recording
    ``openai-chat/openrouter-anthropic-thinking-tool.sse`` has exactly this shape.
    """
    fmt = "anthropic-claude-v1"
    pieces = [f"piece {i} " for i in range(2000)]
    body = sse(
        *(
            ch(
                {
                    "reasoning": p,
                    "reasoning_details": [
                        {"type": "reasoning.text", "text": p, "format": fmt, "index": 0}
                    ],
                }
            )
            for p in pieces
        ),
        ch(
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "signature": "SIG", "format": fmt, "index": 0}
                ]
            }
        ),
        tc(
            {
                "index": 0,
                "id": "c1",
                "type": "function",
                "function": {"name": "f", "arguments": "{}"},
            }
        ),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.reasoning_text == "".join(pieces)
    sent = response.turn_transcript[0].to_openai()
    assert sent["reasoning_details"] == [
        {
            "type": "reasoning.text",
            "text": "".join(pieces),
            "format": fmt,
            "index": 0,
            "signature": "SIG",
        }
    ]


# ================================================================ anthropic


def ev(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


def block_start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ev("content_block_start", index=index, content_block=block)


def block_delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ev("content_block_delta", index=index, delta=delta)


def block_stop(index: int) -> tuple[str, dict[str, Any]]:
    return ev("content_block_stop", index=index)


def message_start(**usage: int) -> tuple[str, dict[str, Any]]:
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1, **usage},
    }
    return ev("message_start", message=message)


def test_anthropic_model_context_window_exceeded_is_a_length_finish() -> None:
    """Anthropic's newer stop reason ``model_context_window_exceeded``: generation stopped
    because the context window filled up (a token limit, like ``max_tokens``).

    Evidence: anthropic-sdk-python's ``StopReason`` literal (installed 2.17.0) and its
    v0.119.0 release note ("add new stop reason 'model_context_window_exceeded'"),
    https://newreleases.io/project/github/anthropics/anthropic-sdk-python/release/v0.119.0;
    Vercel's mapping to ``length``:
    https://app.unpkg.com/@ai-sdk/anthropic@3.0.58/files/src/map-anthropic-stop-reason.ts
    """
    body = sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Let me write the file."}),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_01", "name": "write", "input": {}}),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"path": "a.txt", "te'}),
        ev(
            "message_delta",
            delta={"stop_reason": "model_context_window_exceeded", "stop_sequence": None},
            usage={"output_tokens": 4000},
        ),
        ev("message_stop"),
    )
    sdk = sdk_anthropic(body)
    assert sdk.stop_reason == "model_context_window_exceeded"
    response = aggregate(body, "anthropic")
    assert response.text == "Let me write the file."
    assert response.finish_reason is FinishReason.LENGTH
    [call] = response.tool_calls
    assert call.complete is False
    assert call.raw_arguments == '{"path": "a.txt", "te'


def test_anthropic_web_search_turn_matches_the_sdk() -> None:
    """A web-search turn as the Messages API streams it: a signed thinking block, a
    ``server_tool_use`` block with its ``input_json_delta``, a ``web_search_tool_result``,
    text blocks with ``citations_delta``, a client ``tool_use`` whose first
    ``partial_json`` is empty, ``ping``, and a ``message_delta`` whose cumulative usage
    counts ``server_tool_use.web_search_requests``.

    Evidence: https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/web-search-tool
    (streaming example); recorded:
    tests/data/fixtures/anthropic/anthropic-web-search-server-tool.sse.
    Oracle: ``accumulate_event``.
    """
    result = {
        "type": "web_search_result",
        "url": "https://example.com/weather",
        "title": "Weather",
        "encrypted_content": "EqgfCioIARgBIiQ3",
        "page_age": None,
    }
    citation = {
        "type": "web_search_result_location",
        "url": "https://example.com/weather",
        "title": "Weather",
        "encrypted_index": "Eo8BCioIAhgBIiQy",
        "cited_text": "Sunny, 21 degrees.",
    }
    body = sse(
        message_start(cache_read_input_tokens=100, cache_creation_input_tokens=0),
        ev("ping"),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Search first."}),
        block_delta(0, {"type": "signature_delta", "signature": "EqQBCkgIARABGAIiQ"}),
        block_stop(0),
        block_start(
            1, {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}
        ),
        block_delta(1, {"type": "input_json_delta", "partial_json": ""}),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"query": "paris weather"}'}),
        block_stop(1),
        block_start(
            2,
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [result]},
        ),
        block_stop(2),
        block_start(3, {"type": "text", "text": ""}),
        block_delta(3, {"type": "text_delta", "text": "In Paris: "}),
        block_stop(3),
        block_start(4, {"type": "text", "text": "", "citations": []}),
        block_delta(4, {"type": "citations_delta", "citation": citation}),
        block_delta(4, {"type": "text_delta", "text": "sunny."}),
        block_stop(4),
        block_start(5, {"type": "tool_use", "id": "toolu_01", "name": "remember", "input": {}}),
        block_delta(5, {"type": "input_json_delta", "partial_json": ""}),
        block_delta(5, {"type": "input_json_delta", "partial_json": '{"fact": "sunny"}'}),
        block_stop(5),
        ev(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={
                "input_tokens": 1200,
                "cache_read_input_tokens": 100,
                "output_tokens": 90,
                "server_tool_use": {"web_search_requests": 1},
            },
        ),
        ev("message_stop"),
    )
    sdk = sdk_anthropic(body)
    response = aggregate(body, "anthropic")
    assert response.text == "".join(b.text for b in sdk.content if b.type == "text")
    assert response.reasoning_text == "".join(
        b.thinking for b in sdk.content if b.type == "thinking"
    )
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        (b.id, b.name, b.input) for b in sdk.content if b.type == "tool_use"
    ]
    prompt = sdk.usage.input_tokens + (sdk.usage.cache_read_input_tokens or 0)
    assert response.usage == Usage(
        prompt, sdk.usage.output_tokens, prompt + sdk.usage.output_tokens, cached_tokens=100
    )
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert uris(converted(body, "anthropic")) == ["https://example.com/weather"]


def test_anthropic_overloaded_error_inside_tool_arguments_cuts_the_call() -> None:
    """``overloaded_error`` can arrive as an ``error`` event in the middle of a 200 stream,
    here while a ``tool_use`` block's arguments stream: the error is typed and retryable,
    the text is kept, and the half-streamed call is kept cut short (never run).

    Evidence: https://docs.anthropic.com/en/docs/build-with-claude/streaming#error-events
    ("we may occasionally send errors in the event stream ... an overloaded_error").
    """
    body = sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Saving."}),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_01", "name": "save", "input": {}}),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"name": "Pa'}),
        ev(
            "error",
            error={"details": None, "type": "overloaded_error", "message": "Overloaded"},
            request_id="req_011CSHoEeqs5C35K2UUqR7Fy",
        ),
    )
    error = failure(body, "anthropic")
    assert isinstance(error, ProviderError)
    assert (error.error_type, error.message, error.retryable) == (
        "overloaded_error",
        "Overloaded",
        True,
    )
    assert error.partial is not None
    assert error.partial.text == "Saving."
    assert error.partial.finish_reason is FinishReason.ERROR
    [call] = error.partial.tool_calls
    assert (call.id, call.complete, call.raw_arguments) == ("toolu_01", False, '{"name": "Pa')
    assert call.partial_value == {"name": "Pa"}


# ================================================================ openai-responses

RESP = {
    "id": "resp_01",
    "object": "response",
    "created_at": 1,
    "model": "gpt-5",
    "status": "in_progress",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


def rs(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


def completed(*output: dict[str, Any], **extra: Any) -> tuple[str, dict[str, Any]]:
    return rs(
        "response.completed",
        response={**RESP, "status": "completed", "output": list(output), **extra},
    )


def test_responses_mcp_approval_request_is_surfaced() -> None:
    """With a remote MCP tool whose ``require_approval`` is set, the Responses API ends the
    turn with an ``mcp_approval_request`` output item (``output_item.added`` then
    ``output_item.done``, no other event); the client must answer it with an
    ``mcp_approval_response`` naming ``approval_request_id``.

    Evidence: openai-python ``McpApprovalRequest`` (installed),
    https://learn.microsoft.com/en-us/dotnet/api/azure.ai.agentserver.responses.responseeventstream.outputitemmcpapprovalrequest
    ("MCP approval requests have no intermediate events — only output_item.added and
    output_item.done").
    """
    item = {
        "type": "mcp_approval_request",
        "id": "mcpr_01",
        "server_label": "dice",
        "name": "roll",
        "arguments": '{"sides": 6}',
    }
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item=item),
        rs("response.output_item.done", output_index=0, item=item),
        completed(item),
    )
    requests = [
        e
        for r in converted(body, "openai-responses")
        for e in r.events
        if isinstance(e, ToolApprovalRequestEvent)
    ]
    assert [(e.call_id, e.name) for e in requests] == [("mcpr_01", "roll")]
    assert requests[0].arguments in ({"sides": 6}, '{"sides": 6}')


def test_responses_text_sent_only_in_output_text_done_is_kept() -> None:
    """A minimal compatible server streams ``response.created`` →
    ``response.output_text.done`` → ``response.completed``: the whole text arrives once,
    without deltas (rafrx already delivers a function call's arguments from its ``.done``
    event, or from the final output, when no delta came).

    Evidence: https://github.com/Sophomoresty/gemini-web2api/pull/57 ("the server only emits
    three events: response.created -> response.output_text.done -> response.completed").
    Oracle: the final ``Response``'s ``output_text`` (openai-python's model).
    """
    message = {
        "type": "message",
        "id": "msg_01",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Paris is sunny.", "annotations": []}],
    }
    body = sse(
        rs("response.created", response=RESP),
        rs(
            "response.output_text.done",
            item_id="msg_01",
            output_index=0,
            content_index=0,
            text="Paris is sunny.",
        ),
        completed(message),
    )
    final = Response.model_validate(dict(sse_events(body))["response.completed"]["response"])
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.STOP
    assert response.text == final.output_text == "Paris is sunny."


def test_responses_failed_context_length_after_text_keeps_the_partial() -> None:
    """``response.failed`` with ``error.code = "context_length_exceeded"`` after some text:
    a typed, non-retryable error whose partial keeps the text.

    Evidence: https://github.com/BerriAI/litellm/issues/29223 (the ``response.failed``
    payload: ``error={'code': 'context_length_exceeded', 'message': ...}``, ``usage=None``).
    """
    message = "Your input exceeds the context window of this model."
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_text.delta", item_id="msg_01", output_index=0, delta="Part"),
        rs(
            "response.failed",
            response={
                **RESP,
                "status": "failed",
                "error": {"code": "context_length_exceeded", "message": message},
                "usage": None,
            },
        ),
    )
    error = failure(body, "openai-responses")
    assert isinstance(error, ProviderError)
    assert (error.message, error.code, error.retryable) == (
        message,
        "context_length_exceeded",
        False,
    )
    assert error.partial is not None
    assert (error.partial.text, error.partial.finish_reason) == ("Part", FinishReason.ERROR)
    assert error.partial.id == "resp_01"


def custom_call_body(code: str, pieces: int, *, done: bool = True) -> bytes:
    """A Responses turn calling the custom tool ``run_code`` with ``code``."""
    call = {"type": "custom_tool_call", "id": "ctc_01", "call_id": "call_01", "name": "run_code"}
    size = -(-len(code) // pieces)
    deltas = [
        rs(
            "response.custom_tool_call_input.delta",
            item_id="ctc_01",
            output_index=0,
            delta=code[i : i + size],
        )
        for i in range(0, len(code), size)
    ]
    finished = {**call, "status": "completed", "input": code}
    tail = [
        rs("response.custom_tool_call_input.done", item_id="ctc_01", output_index=0, input=code),
        rs("response.output_item.done", output_index=0, item=finished),
        completed(finished),
    ]
    return sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item={**call, "input": ""}),
        *deltas,
        *(tail if done else ()),
    )


def test_responses_custom_tool_call_input_streams_as_an_input_argument() -> None:
    """A custom tool (GPT-5's free-form tools) is called with an ``input`` text, not JSON
    arguments: ``output_item.added`` (a ``custom_tool_call``), then
    ``custom_tool_call_input.delta`` events, ``custom_tool_call_input.done`` and
    ``output_item.done``. rafrx delivers the call with the arguments ``{"input": text}``,
    the text growing as it streams (Progress events) however it is escaped.

    Evidence: openai-python ``ResponseCustomToolCall``,
    ``ResponseCustomToolCallInputDeltaEvent`` (installed);
    https://platform.openai.com/docs/guides/function-calling#custom-tools.
    Oracle: the final ``Response``'s ``custom_tool_call`` item (openai-python's model).
    """
    code = 'print("héllo 😀")\n\tpath = "C:\\temp"\n'
    body = custom_call_body(code, pieces=7)
    final = Response.model_validate(dict(sse_events(body))["response.completed"]["response"])
    [sdk_call] = final.output
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.TOOL_CALLS
    [call] = response.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "call_01",
        "run_code",
        {"input": sdk_call.input},
    )
    grown = "".join(
        c.value
        for r in converted(body, "openai-responses")
        for c in r.contents
        if isinstance(c, ToolCallArgsProgressContent)
    )
    assert grown == code


def test_responses_custom_tool_call_cut_short_keeps_what_streamed() -> None:
    """The same stream cut after the input deltas: a typed error, and the partial response
    keeps the call with the input received (its arguments incomplete)."""
    error = failure(custom_call_body("x = 1\ny = 2\n", pieces=3, done=False), "openai-responses")
    assert error.partial is not None
    [call] = error.partial.tool_calls
    assert call.name == "run_code"
    assert call.raw_arguments == '{"input": "x = 1\\ny = 2\\n'


def sse_events(body: bytes) -> list[tuple[str, Any]]:
    """(type, data) of each event of a Responses body, by openai-python's decoder."""
    return [(e.json()["type"], e.json()) for e in OpenAISSEDecoder().iter_bytes(iter([body]))]
