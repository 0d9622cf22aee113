"""Still more stream shapes that providers and servers really send, each with public evidence.

Same method as ``test_provider_shapes.py`` and ``test_provider_shapes_2.py``: every body
is written by hand after a reported or documented shape (the evidence is in each test's
docstring) and goes through ``from_sse(body, dialect)`` → ``convert()`` → ``aggregate()``;
the result must be what a user of that provider expects. Where an official SDK
accumulator reads the same events (openai's ``ChatCompletionStreamState``, anthropic's
``accumulate_event``) it is the oracle. Shapes already covered by the other
``test_provider_shapes*.py``, ``test_dialect_quirks.py`` and ``test_dialect_edges.py``
are not repeated.
"""

from __future__ import annotations

import json
from typing import Any

from rafrx.errors import ProviderError
from rafrx.messages import ChatMessage, to_anthropic
from rafrx.response import FinishReason, Usage
from rafrx.sources.clients import to_responses_input
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
    failure,
    message_start,
    rs,
    sdk_anthropic,
    sdk_chat,
    tc,
)

# ================================================================ openai-chat: usage


def test_chat_moonshot_usage_inside_the_finish_choice_is_kept() -> None:
    """Moonshot (Kimi K2 / K2.5) streams the usage of a response inside the choice of the
    finish chunk, ``choices[0].usage``, with no top-level ``usage`` member.

    Evidence: https://github.com/earendil-works/pi/issues/2017 ("Moonshot returns usage
    data in chunk.choices[0].usage instead of the standard chunk.usage ... usage stats are
    always empty for Kimi models"), https://github.com/earendil-works/pi/pull/2016.
    """
    base = {"id": "chatcmpl-kimi", "object": CHUNK, "created": 1, "model": "kimi-k2.5"}
    body = sse(
        ch({"role": "assistant", "content": ""}),
        ch({"content": "Hello! How can I help?"}),
        {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {},
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 19, "completion_tokens": 13, "total_tokens": 32},
                }
            ],
        },
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "Hello! How can I help?"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(19, 13, 32)


# ================================================================ openai-chat: tool calls


def test_chat_streamed_custom_tool_call_is_not_dropped() -> None:
    """GPT-5's custom (free-form) tools on Chat Completions: the streamed tool-call delta
    carries ``type: "custom"`` and ``custom: {name, input}`` instead of ``function``, the
    ``input`` growing over the deltas. rafrx already delivers a Responses custom call with
    the arguments ``{"input": text}``; the same call on Chat Completions must not vanish.

    Evidence: https://github.com/openai/openai-openapi/issues/576 (the streamed chunk
    ``{"index": 0, "id": ..., "type": "custom", "custom": {"name": ..., "input": "partial
    input"}}``), https://github.com/openai/openai-python/issues/2530,
    https://github.com/openai/openai-python/pull/3247,
    https://github.com/earendil-works/pi/issues/8504.
    """
    body = sse(
        ch({"role": "assistant", "content": None}),
        tc(
            {
                "index": 0,
                "id": "call_x1",
                "type": "custom",
                "custom": {"name": "shell", "input": "echo"},
            }
        ),
        tc({"index": 0, "type": "custom", "custom": {"input": " hello"}}),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert [(c.id, c.name) for c in response.tool_calls] == [("call_x1", "shell")]
    assert response.tool_calls[0].arguments == {"input": "echo hello"}


def test_chat_custom_tool_call_goes_back_as_a_custom_call() -> None:
    """The call goes back as it came: on Chat Completions a ``type: "custom"`` tool call
    with its ``input`` (openai-python's ``ChatCompletionMessageCustomToolCallParam``), on
    the Responses API a ``custom_tool_call`` item, and its result as a tool message."""
    body = sse(
        ch({"role": "assistant", "content": None}),
        tc({"index": 0, "id": "call_x1", "type": "custom", "custom": {"name": "shell"}}),
        tc({"index": 0, "type": "custom", "custom": {"input": 'echo "hi"\n'}}),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.tool_calls[0].arguments == {"input": 'echo "hi"\n'}
    message = response.turn_transcript[-1]
    assert message.to_openai()["tool_calls"] == [
        {"id": "call_x1", "type": "custom", "custom": {"name": "shell", "input": 'echo "hi"\n'}}
    ]
    assert to_responses_input([message, ChatMessage.tool("hi", "call_x1")]) == [
        {"type": "custom_tool_call", "call_id": "call_x1", "name": "shell", "input": 'echo "hi"\n'},
        {"type": "custom_tool_call_output", "call_id": "call_x1", "output": "hi"},
    ]


def test_chat_tool_call_id_changing_after_the_first_chunk_stays_one_call() -> None:
    """Poolside's ``/chat/completions`` stream gives a tool call one ``id`` on its first
    chunk (with the function name) and another ``id`` on every later chunk of the same
    call, always at the same ``index``. The ``index`` says it is one call: openai's
    accumulator merges the pieces into one ``get_weather`` call with whole arguments.

    Evidence: https://github.com/poolsideai/pool/issues/9 ("emits two different id values
    for a single logical tool call ... The first chunk carries one ID (alongside the
    function name), and all subsequent chunks carry a different ID").
    Oracle: ``ChatCompletionStreamState`` (one call, arguments ``{"city": "Paris"}``).
    """
    body = sse(
        ch({"role": "assistant", "content": None}),
        tc(
            {
                "index": 0,
                "id": "call_A1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ),
        tc(
            {"index": 0, "id": "call_B2", "type": "function", "function": {"arguments": '{"city":'}}
        ),
        tc(
            {
                "index": 0,
                "id": "call_B2",
                "type": "function",
                "function": {"arguments": ' "Paris"}'},
            }
        ),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    [sdk_call] = sdk_chat(body).choices[0].message.tool_calls
    response = aggregate(body)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        (sdk_call.function.name, json.loads(sdk_call.function.arguments))
    ]
    assert response.tool_calls[0].id in ("call_A1", "call_B2")


def test_chat_fireworks_repeating_id_type_and_name_on_every_chunk_is_one_call() -> None:
    """Fireworks (GLM models) repeats the tool call's ``id``, ``type`` and
    ``function.name`` (and a stray ``name: null``) on every argument chunk: one call, with
    the provider's id once (not ``chatcmpl-tool-aa62chatcmpl-tool-aa62…``).

    Evidence: https://github.com/SillyTavern/SillyTavern/pull/5948 (the raw Fireworks
    chunks; "tool call IDs were duplicated ... if the provider repeats the id field"),
    https://github.com/langchain4j/langchain4j/pull/4544 (DeepSeek, Qwen: "The full tool
    call ID is repeated in every chunk").
    """
    call = {
        "index": 0,
        "id": "chatcmpl-tool-aa62",
        "type": "function",
        "function": {"name": "debug_tool", "arguments": ""},
        "name": None,
    }
    body = sse(
        ch({"role": "assistant"}),
        tc(call),
        tc({**call, "function": {"name": "debug_tool", "arguments": '{"level":'}}),
        tc({**call, "function": {"name": "debug_tool", "arguments": " 3}"}}),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("chatcmpl-tool-aa62", "debug_tool", {"level": 3})
    ]
    sent = response.turn_transcript[-1].to_openai()["tool_calls"]
    assert [c["id"] for c in sent] == ["chatcmpl-tool-aa62"]


def test_chat_first_tool_chunk_with_only_an_index_keeps_the_real_id() -> None:
    """Some OpenAI-compatible servers open a tool call with a chunk holding only
    ``{"index": 0}`` and send its ``id`` and name in the next chunk: the call must carry
    the provider's id (the tool result goes back under it), not a generated one.

    Evidence: https://github.com/use-agent-os/agent-os/pull/3265 (the repro: "chunk 0 with
    only ``index``, chunk 1 with ``id`` and name" → ``call_123`` throughout).
    """
    body = sse(
        ch({"role": "assistant", "content": None}),
        tc({"index": 0}),
        tc(
            {
                "index": 0,
                "id": "call_123",
                "type": "function",
                "function": {"name": "lookup", "arguments": ""},
            }
        ),
        tc({"index": 0, "function": {"arguments": '{"q": "rafrx"}'}}),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_123", "lookup", {"q": "rafrx"})
    ]


def test_chat_ollama_parallel_calls_all_at_index_0_with_distinct_ids() -> None:
    """Ollama's OpenAI-compatible endpoint streams several tool calls of one turn, each
    whole in its own chunk, all with ``index: 0`` but each with its own ``id`` (and here
    the same function): two calls, not one with concatenated arguments.

    Evidence: https://github.com/ollama/ollama/issues/15457 ("all tool call chunks have
    ``index: 0`` instead of incrementing indices"; two ``file_write`` calls).
    """
    body = sse(
        ch({"role": "assistant", "content": ""}),
        tc(
            {
                "id": "call_h1",
                "index": 0,
                "type": "function",
                "function": {
                    "name": "file_write",
                    "arguments": '{"filePath":"hello.py","content":"print(\\"hello\\")"}',
                },
            }
        ),
        tc(
            {
                "id": "call_w2",
                "index": 0,
                "type": "function",
                "function": {
                    "name": "file_write",
                    "arguments": '{"filePath":"world.py","content":"print(\\"world\\")"}',
                },
            }
        ),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_h1", "file_write", {"filePath": "hello.py", "content": 'print("hello")'}),
        ("call_w2", "file_write", {"filePath": "world.py", "content": 'print("world")'}),
    ]


def test_chat_vllm_empty_arguments_entry_on_the_finish_chunk_adds_no_call() -> None:
    """vLLM's finish chunk of a tool-calling turn repeats the call's index with empty
    arguments (``tool_calls: [{"index": 0, "function": {"arguments": ""}}]``), next to
    ``finish_reason: "tool_calls"``, vLLM's own ``stop_reason`` and the usage: still one
    call, with the usage kept.

    Evidence: https://github.com/vercel/ai/issues/3953 (that exact chunk from vLLM,
    which made a client duplicate the tool call).
    """
    body = sse(
        ch({"role": "assistant", "content": None}),
        tc(
            {
                "index": 0,
                "id": "chatcmpl-tool-a0d9e21c",
                "type": "function",
                "function": {"name": "searchGoogle", "arguments": ""},
            }
        ),
        tc({"index": 0, "function": {"arguments": '{"query": "latest news on ai"}'}}),
        {
            "id": "chat-2267f7e2",
            "object": CHUNK,
            "created": 1733162241,
            "model": "meta/llama-3.1-8b-instruct:fp8",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]},
                    "logprobs": None,
                    "finish_reason": "tool_calls",
                    "stop_reason": 128008,
                }
            ],
            "usage": {"prompt_tokens": 226, "total_tokens": 246, "completion_tokens": 20},
        },
        "[DONE]",
    )
    response = aggregate(body)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("chatcmpl-tool-a0d9e21c", "searchGoogle", {"query": "latest news on ai"})
    ]
    assert response.usage == Usage(226, 20, 246)
    assert response.finish_reason is FinishReason.TOOL_CALLS


# ================================================================ openai-chat: reasoning


def test_chat_litellm_thinking_blocks_signature_goes_back_with_the_call() -> None:
    """A LiteLLM proxy in front of Claude with extended thinking streams, beside
    ``reasoning_content``, ``delta.thinking_blocks`` pieces and, at the end of the block,
    one with the ``signature``; the signed block must go back on the assistant message of
    a tool loop, else Anthropic refuses the next request.

    Evidence: https://docs.litellm.ai/release_notes/v1.63.0/v1.63.0 ("fixes Anthropic
    'thinking' response on streaming to return the ``signature`` block"; the
    ``thinking_blocks`` shape), https://github.com/anomalyco/opencode/issues/3077 (the 400
    through LiteLLM: "a final assistant message must start with a thinking block").
    """
    signature = "ErUBCkYIBxgCIkB3qXlpZ2k0Zm9vYmFyYmF6cXV4"

    def thinking(text: str, sig: str | None = None) -> dict[str, Any]:
        block = {"type": "thinking", "thinking": text, "signature": sig}
        return ch({"reasoning_content": text, "thinking_blocks": [block]})

    body = sse(
        ch({"role": "assistant", "content": ""}),
        thinking("The user wants"),
        thinking(" the weather in Paris."),
        thinking("", signature),
        tc(
            {
                "index": 0,
                "id": "toolu_01",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ),
        tc({"index": 0, "function": {"arguments": '{"city": "Paris"}'}}),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.reasoning_text == "The user wants the weather in Paris."
    assert [c.name for c in response.tool_calls] == ["get_weather"]
    sent = json.dumps(response.turn_transcript[-1].to_openai())
    assert signature in sent


def test_chat_litellm_thinking_blocks_round_trip_through_chat_messages() -> None:
    """Read back from the wire (history kept as chat messages), the blocks go out again."""
    blocks = [
        {"type": "thinking", "thinking": "Plan.", "signature": "SIG"},
        {"type": "redacted_thinking", "data": "ENC"},
    ]
    wire = {"role": "assistant", "content": "Done.", "thinking_blocks": blocks}
    assert ChatMessage.from_openai(wire).to_openai()["thinking_blocks"] == blocks


# ================================================================ openai-chat: finish/errors


def test_chat_vllm_abort_finish_reason_is_an_error() -> None:
    """When vLLM's engine aborts a streaming request (scale-down, shutdown, sleep-mode
    pause, an abort request) the stream still ends at HTTP 200 with a terminal
    ``finish_reason: "abort"`` and ``data: [DONE]``: the answer was cut by the server, as
    with DeepSeek's ``insufficient_system_resource`` (which rafrx maps to ERROR).

    Evidence: https://github.com/vllm-project/vllm/issues/57082 ("terminal finish_reason
    \\"abort\\" (not an OpenAI enum value), then an unconditional data: [DONE]"),
    https://github.com/vllm-project/vllm/pull/47933, https://github.com/sgl-project/sglang/pull/6693
    (SGLang's "abort" finish reason).
    """
    body = sse(
        ch({"role": "assistant", "content": "The first half"}),
        ch({"content": ""}, "abort"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "The first half"
    assert response.finish_reason is FinishReason.ERROR


def test_chat_fastchat_error_code_chunk_is_a_provider_error() -> None:
    """FastChat's ``openai_api_server`` streams, when the model worker fails (CUDA out of
    memory, controller errors), the worker's own payload ``{"text": <message>,
    "error_code": <code>}`` as a chunk, then ``data: [DONE]``: an error, not an answer.

    Evidence: lm-sys/FastChat ``fastchat/serve/openai_api_server.py``,
    ``chat_completion_stream_generator``: ``if content["error_code"] != 0: yield
    f"data: {json.dumps(content, ensure_ascii=False)}\\n\\n"; yield "data: [DONE]\\n\\n"``.
    """
    message = (
        "**NETWORK ERROR DUE TO HIGH TRAFFIC. PLEASE REGENERATE OR REFRESH THIS PAGE.**"
        "\n\n(CUDA out of memory. Tried to allocate 20.00 MiB)"
    )
    body = sse(
        {
            "id": "chatcmpl-3nFQKsLyKqr2",
            "model": "vicuna-7b-v1.5",
            "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}],
        },
        {"text": message, "error_code": 50002},
        "[DONE]",
    )
    error = failure(body)
    assert isinstance(error, ProviderError)
    assert error.message == message


def test_chat_foundry_local_chunks_with_message_and_delta_are_read_once() -> None:
    """Foundry Local's chunks carry the piece both as ``delta`` and as ``message`` (with
    ``tool_calls: []``, ``error: null``, ``IsDelta`` and other extra members) and a new
    ``id`` on every chunk: the text is read once, from the deltas, and the first id is
    the response's.

    Evidence: https://github.com/microsoft/foundry-local/issues/221 (the sample chunks).
    """

    def chunk(n: int, content: str | None, finish: str | None = None) -> dict[str, Any]:
        part: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "name": None,
            "tool_call_id": None,
            "function_call": None,
            "tool_calls": [],
        }
        return {
            "model": "qwen2.5-1.5b-instruct-generic-gpu",
            "choices": [
                {
                    "delta": part,
                    "message": part,
                    "index": 0,
                    "finish_reason": finish,
                    "finish_details": None,
                    "logprobs": None,
                }
            ],
            "usage": None,
            "created": 1754980336,
            "id": f"chat.id.{n}",
            "StreamEvent": None,
            "IsDelta": False,
            "Successful": True,
            "error": None,
            "HttpStatusCode": 0,
            "object": CHUNK,
        }

    body = sse(
        chunk(1, "\n"), chunk(2, "Moon"), chunk(3, "light"), chunk(4, None, "stop"), "[DONE]"
    )
    response = aggregate(body)
    assert response.text == "\nMoonlight"
    assert response.finish_reason is FinishReason.STOP
    assert (response.id, response.model) == ("chat.id.1", "qwen2.5-1.5b-instruct-generic-gpu")


def test_chat_sglang_duplicate_finish_chunks_end_the_turn_once() -> None:
    """SGLang (before its fix) sent ``finish_reason`` twice at the end of a stream: on the
    last content chunk and again on an empty final chunk, each choice carrying SGLang's
    ``matched_stop`` member: one answer, one finish, the usage kept.

    Evidence: https://github.com/sgl-project/sglang/pull/8417 ("Duplicate finish_reason
    chunks during streaming ... Two finish_reason chunks sent"),
    https://github.com/sgl-project/sglang/issues/4550 (SGLang's chunk shape).
    """

    def chunk(content: str | None, finish: str | None, **extra: Any) -> dict[str, Any]:
        delta = {"role": None, "content": content, "reasoning_content": None, "tool_calls": None}
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish,
            "matched_stop": 151645 if finish else None,
        }
        base = {"id": "93b67174", "object": CHUNK, "created": 1742289669, "model": "DeepSeek-R1"}
        return {**base, "choices": [choice], "usage": None, **extra}

    usage = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    body = sse(
        chunk("Happy", None),
        chunk(" to help.", "stop"),
        chunk("", "stop", usage=usage),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "Happy to help."
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(9, 4, 13)
    assert len(response.turn_transcript) == 1


def test_chat_azure_async_filter_annotation_after_the_finish_keeps_the_turn() -> None:
    """With Azure's asynchronous content filter, an annotation-only chunk (``id``,
    ``model`` and ``object`` empty, a choice with ``content_filter_results`` and
    ``content_filter_offsets`` but no ``delta``) arrives after the finish chunk, just
    before ``[DONE]``: it must not clear the finish reason nor the response's id.

    Evidence: https://github.com/langchain-ai/langchain/issues/18977 ("Azure would return
    a chunk of data at the end of the streaming transmission", that chunk),
    https://github.com/openai/openai-node/pull/1982 ("annotations may omit ``delta`` and
    use an empty ``id``").
    """
    annotation = {
        "id": "",
        "object": "",
        "created": 0,
        "model": "",
        "choices": [
            {
                "finish_reason": None,
                "index": 0,
                "content_filter_results": {
                    "hate": {"filtered": False, "severity": "safe"},
                    "self_harm": {"filtered": False, "severity": "safe"},
                    "sexual": {"filtered": False, "severity": "safe"},
                    "violence": {"filtered": False, "severity": "safe"},
                },
                "content_filter_offsets": {
                    "check_offset": 4522,
                    "start_offset": 4522,
                    "end_offset": 4686,
                },
            }
        ],
    }
    ids = {"id": "chatcmpl-az1", "model": "gpt-4o"}
    body = sse(
        {**ch({"role": "assistant", "content": ""}), **ids},
        {**ch({"content": "Done."}), **ids},
        {**ch({}, "stop"), **ids},
        annotation,
        "[DONE]",
    )
    response = aggregate(body)
    assert (response.id, response.model) == ("chatcmpl-az1", "gpt-4o")
    assert response.text == "Done."
    assert response.finish_reason is FinishReason.STOP


# ================================================================ anthropic


def pause_turn_body() -> bytes:
    """A web-search turn that Anthropic pauses: text, then a ``server_tool_use`` block
    whose search has not run yet, then ``stop_reason: "pause_turn"``."""
    return sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Let me search for that."}),
        block_stop(0),
        block_start(
            1, {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}
        ),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"query": "paris weather"}'}),
        block_stop(1),
        ev(
            "message_delta",
            delta={"stop_reason": "pause_turn", "stop_sequence": None},
            usage={"output_tokens": 40, "server_tool_use": {"web_search_requests": 0}},
        ),
        ev("message_stop"),
    )


def test_anthropic_pause_turn_is_not_reported_as_a_normal_stop() -> None:
    """``pause_turn``: the API paused a long-running turn of server tools (web search,
    web fetch); the client must send the response back as-is for Claude to continue. It is
    not the end of the answer, and must not read as one.

    Evidence: https://github.com/gsd-build/gsd-2/pull/2870 and
    https://github.com/gsd-build/gsd-2/pull/3248 ("mapStopReason() mapped Anthropic's
    pause_turn to \\"stop\\", causing the agent loop to treat incomplete server tool
    responses as normal completions"), https://github.com/laravel/ai/pull/493,
    https://github.com/dust-tt/dust/pull/28390 ("the answer is silently truncated
    mid-work"), anthropic-sdk-python ``StopReason`` docstring ("we paused a long-running
    turn. You may provide the response back as-is").
    """
    body = pause_turn_body()
    assert sdk_anthropic(body).stop_reason == "pause_turn"
    response = aggregate(body, "anthropic")
    assert response.text == "Let me search for that."
    assert response.finish_reason is not FinishReason.STOP


def test_anthropic_pause_turn_keeps_the_pending_server_tool_use_to_send_back() -> None:
    """To resume a ``pause_turn`` the client sends the paused assistant content back,
    ``server_tool_use`` block included (rafrx keeps the Responses API's server-tool items
    "to go back, in its place"; Anthropic's are dropped).

    Evidence: https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/server-tools
    ("You may provide the response back as-is in a subsequent request to let Claude
    continue its turn"), https://github.com/laravel/ai/pull/493 ("Streaming replay also
    preserves server-tool input_json_delta payloads so the assistant content is replayed
    with the original server-tool input instead of {}").
    Oracle: ``accumulate_event`` (the ``server_tool_use`` block with its input).
    """
    body = pause_turn_body()
    [sdk_block] = [b for b in sdk_anthropic(body).content if b.type == "server_tool_use"]
    response = aggregate(body, "anthropic")
    _, wire = to_anthropic(response.turn_transcript)
    blocks = [b for m in wire if m["role"] == "assistant" for b in m["content"]]
    assert [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "server_tool_use"] == [
        (sdk_block.id, sdk_block.name, sdk_block.input)
    ]


def test_anthropic_tool_without_parameters_gets_empty_object_arguments() -> None:
    """A call of a tool that takes no parameters streams ``content_block_start`` with
    ``input: {}`` and a single empty ``input_json_delta``: the call is complete, with the
    arguments ``{}`` (what anthropic's accumulator gives), and is sent back the same way.

    Evidence: https://docs.anthropic.com/en/docs/build-with-claude/streaming (the first
    ``input_json_delta`` of a tool_use block may be empty); anthropic-sdk-python
    ``accumulate_event`` keeps ``input == {}`` when the JSON buffer stays empty.
    """
    body = sse(
        message_start(),
        block_start(0, {"type": "tool_use", "id": "toolu_01", "name": "get_time", "input": {}}),
        block_delta(0, {"type": "input_json_delta", "partial_json": ""}),
        block_stop(0),
        ev(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 12},
        ),
        ev("message_stop"),
    )
    [sdk_block] = sdk_anthropic(body).content
    response = aggregate(body, "anthropic")
    [call] = response.tool_calls
    assert (call.id, call.name, call.arguments, call.complete) == (
        sdk_block.id,
        sdk_block.name,
        sdk_block.input,
        True,
    )
    _, wire = to_anthropic(response.turn_transcript)
    assert wire[-1]["content"] == [
        {"type": "tool_use", "id": "toolu_01", "name": "get_time", "input": {}}
    ]
    assert response.finish_reason is FinishReason.TOOL_CALLS


# ================================================================ openai-responses


def test_responses_completed_event_with_an_incomplete_status_is_a_length_finish() -> None:
    """vLLM's Responses endpoint sends ``response.completed`` as the terminal event even
    when the embedded response is ``status: "incomplete"`` with
    ``incomplete_details.reason: "max_output_tokens"``: the truncation must not read as
    a normal end.

    Evidence: https://github.com/vllm-project/agentic-api/issues/273 ("the direct vLLM
    stream's terminal event has ``type: \\"response.completed\\"``, even though the
    embedded response is ``incomplete``"; a downstream translation then reported
    ``finish_reason: \\"stop\\"``), https://github.com/jundot/omlx/pull/2817.
    """
    usage = {"input_tokens": 20, "output_tokens": 16, "total_tokens": 36}
    message = {
        "type": "message",
        "id": "msg_01",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "The first", "annotations": []}],
    }
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item={**message, "content": []}),
        rs(
            "response.output_text.delta",
            item_id="msg_01",
            output_index=0,
            content_index=0,
            delta="The first",
        ),
        rs("response.output_item.done", output_index=0, item=message),
        completed(
            message,
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
            usage=usage,
        ),
    )
    response = aggregate(body, "openai-responses")
    assert response.text == "The first"
    assert response.usage == Usage(20, 16, 36)
    assert response.finish_reason is FinishReason.LENGTH


def test_responses_reasoning_summary_sent_only_as_done_is_kept() -> None:
    """Some Responses gateways stream a reasoning summary without deltas:
    ``reasoning_summary_part.added`` → ``reasoning_summary_text.done`` (the whole text) →
    ``reasoning_summary_part.done`` → ``output_item.done``. rafrx already keeps a text
    that arrives only in ``output_text.done``; the reasoning must not be lost either.

    Evidence: https://github.com/anomalyco/opencode/pull/44595 ("a gateway that streams
    reasoning only as finals produced an empty thinking block"; that exact sequence),
    https://github.com/vllm-project/agentic-api/pull/219.
    """
    summary = "I checked the diff."
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Looks good.", "annotations": []}],
    }
    part = {"type": "summary_text", "text": summary}
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item=reasoning),
        rs(
            "response.reasoning_summary_part.added",
            item_id="rs_1",
            output_index=0,
            summary_index=0,
            part={"type": "summary_text", "text": ""},
        ),
        rs(
            "response.reasoning_summary_text.done",
            item_id="rs_1",
            output_index=0,
            summary_index=0,
            text=summary,
        ),
        rs(
            "response.reasoning_summary_part.done",
            item_id="rs_1",
            output_index=0,
            summary_index=0,
            part=part,
        ),
        rs("response.output_item.done", output_index=0, item={**reasoning, "summary": [part]}),
        rs("response.output_item.added", output_index=1, item={**message, "content": []}),
        rs(
            "response.output_text.delta",
            item_id="msg_1",
            output_index=1,
            content_index=0,
            delta="Looks good.",
        ),
        rs("response.output_item.done", output_index=1, item=message),
        completed({**reasoning, "summary": [part]}, message),
    )
    response = aggregate(body, "openai-responses")
    assert response.text == "Looks good."
    assert response.finish_reason is FinishReason.STOP
    assert response.reasoning_text == summary


def test_responses_message_item_with_a_new_id_at_each_stage_is_text_once() -> None:
    """mistral.rs's OpenResponses streamer mints a fresh message id for
    ``output_item.added`` (and the text deltas), another for ``output_item.done`` and a
    third for the message in ``response.completed``; LiteLLM's Responses bridge likewise
    lists in ``response.completed`` an item id never announced. It is one message: its
    text must be delivered once.

    Evidence: https://github.com/EricLBuehler/mistral.rs/issues/1944
    (``output_item.added`` -> ``msg_A``, ``output_item.done`` -> ``msg_B``,
    ``response.completed`` -> ``msg_C``), https://github.com/BerriAI/litellm/pull/36375
    ("response.completed arrives listing an item whose id never appeared in any
    output_item.added").
    """

    def message(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
        return {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": status,
            "content": content,
        }

    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item=message("msg_A", "", "in_progress")),
        rs(
            "response.output_text.delta",
            item_id="msg_A",
            output_index=0,
            content_index=0,
            delta="Hello",
        ),
        rs(
            "response.output_text.delta",
            item_id="msg_A",
            output_index=0,
            content_index=0,
            delta=" world",
        ),
        rs("response.output_item.done", output_index=0, item=message("msg_B", "Hello world")),
        completed(message("msg_C", "Hello world")),
    )
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.STOP
    assert response.text == "Hello world"


def test_responses_vllm_gpt_oss_reasoning_text_item_with_a_msg_id_stays_reasoning() -> None:
    """vLLM's Responses endpoint for gpt-oss gives its reasoning item a ``msg_`` id,
    opens it with a ``content_part.added`` typed ``output_text``, streams
    ``reasoning_text.delta`` events (not summary ones) with ``sequence_number`` and
    ``logprobs`` members, then a message item: the reasoning stays reasoning (not answer
    text), the answer is not doubled by its ``.done`` events, and the reasoning item goes
    back whole.

    Evidence: https://github.com/vllm-project/vllm/pull/24788 (the printed event
    sequence: ``"item":{"id":"msg_81a7...","type":"reasoning","content":null,...}``,
    ``response.content_part.added`` with ``"type":"output_text"``,
    ``response.reasoning_text.delta``).
    """
    rid, mid = "msg_81a71aae8e5f4af0a7c5d2f0e6bc6324", "msg_9d2c5b1f0e8a4c7bb1f3d5e7a9c0b2d4"
    thought = "The user says hello."
    reasoning: dict[str, Any] = {
        "id": rid,
        "summary": [],
        "type": "reasoning",
        "content": None,
        "encrypted_content": None,
        "status": "in_progress",
    }
    done_reasoning = {
        **reasoning,
        "content": [{"type": "reasoning_text", "text": thought}],
        "status": "completed",
    }
    message = {"id": mid, "type": "message", "role": "assistant", "status": "in_progress"}
    done_message = {
        **message,
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hello!", "annotations": [], "logprobs": []}],
    }
    empty_part = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
    body = sse(
        rs("response.created", response=RESP, sequence_number=0),
        rs("response.output_item.added", item=reasoning, output_index=0, sequence_number=2),
        rs(
            "response.content_part.added",
            content_index=0,
            item_id=rid,
            output_index=0,
            part=empty_part,
            sequence_number=3,
        ),
        rs(
            "response.reasoning_text.delta",
            content_index=0,
            delta="The",
            item_id=rid,
            output_index=0,
            sequence_number=4,
        ),
        rs(
            "response.reasoning_text.delta",
            content_index=0,
            delta=" user says hello.",
            item_id=rid,
            output_index=0,
            sequence_number=5,
        ),
        rs(
            "response.reasoning_text.done",
            content_index=0,
            text=thought,
            item_id=rid,
            output_index=0,
            sequence_number=6,
        ),
        rs("response.output_item.done", output_index=0, item=done_reasoning, sequence_number=7),
        rs("response.output_item.added", output_index=1, item={**message, "content": []}),
        rs(
            "response.content_part.added",
            content_index=0,
            item_id=mid,
            output_index=1,
            part=empty_part,
        ),
        rs(
            "response.output_text.delta",
            content_index=0,
            delta="Hello!",
            item_id=mid,
            output_index=1,
            logprobs=[],
        ),
        rs(
            "response.output_text.done",
            content_index=0,
            text="Hello!",
            item_id=mid,
            output_index=1,
            logprobs=[],
        ),
        rs("response.output_item.done", output_index=1, item=done_message),
        completed(done_reasoning, done_message),
    )
    response = aggregate(body, "openai-responses")
    assert (response.reasoning_text, response.text) == (thought, "Hello!")
    assert response.finish_reason is FinishReason.STOP
    kept = response.turn_transcript[-1].provider_data or {}
    assert [b["id"] for b in kept.get("openai_reasoning", ()) if b.get("type") == "reasoning"] == [
        rid
    ]
