"""More stream shapes that providers really send, each with public evidence, end to end.

Same method as ``test_provider_shapes.py``: every body is written by hand after a
reported or documented shape (the URL is in each test's docstring) and goes through
``from_sse(body, dialect)`` → ``convert()`` → ``aggregate()``; the result must be what
a user of that provider expects. Shapes already covered by ``test_provider_shapes.py``,
``test_dialect_quirks.py``, ``test_dialects.py`` and ``test_misbehaving_peers.py`` are
not repeated.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from rafrx.errors import ProviderError, RafrxError
from rafrx.response import FinishReason, Usage
from tests.sources.test_dialect_quirks import CHUNK, sse
from tests.sources.test_provider_shapes import (
    RESP,
    aggregate,
    ch,
    completed,
    converted,
    failure,
    rs,
    sse_events,
    uris,
)

# ================================================================ openai-chat


def perplexity_body() -> bytes:
    """Perplexity's stream: every chunk is typed ``chat.completion`` (not ``…chunk``),
    carries the running ``usage`` and the whole ``citations`` list, and each choice has
    both ``delta`` and the accumulated ``message``."""
    citations = ["https://a.example/bizzabo", "https://b.example/event-data"]

    def chunk(delta: str, text: str, finish: str | None, completion: int) -> dict[str, Any]:
        return {
            "id": "pplx-1",
            "model": "llama-3.1-sonar-small-128k-online",
            "created": 1725494279,
            "usage": {
                "prompt_tokens": 15,
                "completion_tokens": completion,
                "total_tokens": 15 + completion,
            },
            "citations": citations,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish,
                    "message": {"role": "assistant", "content": text},
                    "delta": {"role": "assistant", "content": delta},
                }
            ],
        }

    return sse(
        chunk("B", "B", None, 1),
        chunk("izzabo", "Bizzabo", None, 2),
        chunk(" is an events platform.", "Bizzabo is an events platform.", "stop", 7),
        "[DONE]",
    )


def test_chat_perplexity_chunks_typed_chat_completion_keep_id_and_model() -> None:
    """Perplexity streams chunks whose ``object`` is ``"chat.completion"``, not
    ``"chat.completion.chunk"``; they are the answer's chunks and carry its id and model.

    Evidence: https://github.com/BerriAI/litellm/issues/5535 (the raw Perplexity chunk:
    ``"object": "chat.completion"``, ``usage`` and ``citations`` on every chunk, both
    ``message`` and ``delta`` in the choice).
    """
    response = aggregate(perplexity_body())
    assert response.text == "Bizzabo is an events platform."
    assert response.usage == Usage(15, 7, 22)
    assert response.finish_reason is FinishReason.STOP
    assert (response.id, response.model) == ("pplx-1", "llama-3.1-sonar-small-128k-online")


def test_chat_top_level_citations_become_uris_once_each() -> None:
    """Perplexity (and xAI live search) send the answer's sources as a top-level
    ``citations`` array of URLs on the chunks (Perplexity repeats the whole list on every
    chunk). They are the response's citations: each should become one ``Uri``.

    Evidence: https://github.com/BerriAI/litellm/issues/13777 ("Citations are still
    available in each chunk when streaming"), https://github.com/BerriAI/litellm/issues/5535,
    https://github.com/CherryHQ/cherry-studio/pull/6321 (citations from grok).
    """
    assert uris(converted(perplexity_body(), "openai-chat")) == [
        "https://a.example/bizzabo",
        "https://b.example/event-data",
    ]


def test_chat_bedrock_error_object_with_its_message_under_error_keeps_it() -> None:
    """Bedrock's OpenAI-compatible chat endpoint reports a throttling error inside the 200
    stream as ``{"object": "chat.completion", "error": {"error": "<message>",
    "error_code": 4001}}``: the message is under ``error.error``, not ``error.message``.

    Evidence: https://github.com/davidmigloz/ai_clients_dart/issues/85 (the payload),
    https://github.com/davidmigloz/ai_clients_dart/pull/87 ("Bedrock
    (``{"error":{"error":"..."}}``)").
    """
    message = (
        "Too many tokens, please wait before trying again. (Service: BedrockRuntime, "
        "Status Code: 429, Request ID: e19c3839-1a0f-4e00-88ca-bbfb1989bc71)"
    )
    body = sse(
        {"object": "chat.completion", "error": {"error": message, "error_code": 4001}},
        "[DONE]",
    )
    error = failure(body)
    assert isinstance(error, ProviderError)
    assert error.message == message


def test_chat_choiceless_chunk_with_error_type_and_error_message_is_a_provider_error() -> None:
    """DeepInfra (and vLLM-backed Venice) report a request error inside the 200 stream as
    one chunk with ``choices: null`` and the provider fields ``error_type`` /
    ``error_message``, then close the stream.

    Evidence: https://github.com/NousResearch/hermes-agent/issues/65631 ("a single SSE chunk
    whose ``choices`` is ``None`` and whose provider-specific ``error_type`` /
    ``error_message`` fields carry a 400 BadRequestError"),
    https://github.com/NousResearch/hermes-agent/pull/86635,
    https://github.com/NousResearch/hermes-agent/issues/68451 (Venice, context length).
    """
    message = (
        "This model's maximum context length is 163840 tokens. However, you requested "
        "170000 tokens. Please reduce the length of the messages or completion."
    )
    body = sse(
        {
            "id": "chatcmpl-1",
            "object": CHUNK,
            "created": 1,
            "model": "deepseek-v4-flash",
            "choices": None,
            "error_type": "BadRequestError",
            "error_message": message,
        }
    )
    error = failure(body)
    assert isinstance(error, ProviderError), repr(error)
    assert error.message == message
    assert error.retryable is False


def test_chat_minimax_reasoning_only_in_reasoning_details_is_the_reasoning_text() -> None:
    """MiniMax (``reasoning_split: true``) streams its thinking only in
    ``delta.reasoning_details`` entries ``{type: "reasoning.text", id, format, index,
    text}``, each piece incremental, with no ``reasoning`` / ``reasoning_content`` field.

    Evidence: https://github.com/BerriAI/litellm/pull/22394 ("MiniMax returns reasoning
    content in ``delta.reasoning_details`` ... reasoning details are silently lost"),
    https://github.com/MiniMax-AI/MiniMax-M2/issues/95 (the pieces are incremental),
    https://github.com/lidge-jun/opencodex/pull/3132 (the entry shape).
    """

    def piece(text: str) -> dict[str, Any]:
        detail = {
            "type": "reasoning.text",
            "id": "reasoning-text-1",
            "format": "MiniMax-response-v1",
            "index": 0,
            "text": text,
        }
        return ch({"reasoning_details": [detail]})

    body = sse(
        ch({"role": "assistant", "content": ""}),
        piece("The user"),
        piece(" is asking how I am, which is a simple greeting."),
        ch({"content": "I'm well, thanks!"}),
        ch({}, "stop"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "I'm well, thanks!"
    assert response.reasoning_text == "The user is asking how I am, which is a simple greeting."
    sent = response.turn_transcript[-1].to_openai()
    assert [d["text"] for d in sent["reasoning_details"]] == [response.reasoning_text]


def test_chat_audio_transcript_deltas_are_the_answer_text() -> None:
    """With ``modalities: ["text", "audio"]`` (gpt-4o-audio-preview) the assistant's answer
    streams as ``delta.audio.transcript`` pieces (``content`` stays null), beside base64
    ``delta.audio.data``; the transcript is the text of the reply.

    Evidence: https://github.com/openai/openai-node/issues/1206 (the recorded chunks:
    ``"delta":{"audio":{"transcript":"!"}}``), https://github.com/langfuse/langfuse-python/pull/1831
    ("OpenAI returns spoken transcript chunks inside ``delta.audio["transcript"]`` instead
    of ``delta.content``"), https://github.com/openai/openai-python/issues/2507.
    """
    body = sse(
        ch(
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "audio": {"id": "audio_672960c3", "transcript": "Yes"},
            }
        ),
        ch({"audio": {"transcript": ", a golden retriever is a great family dog"}}),
        ch({"audio": {"data": "CAAIAAkACgAPABEAEQARABMAEAANAAgAAwD9"}}),
        ch({"audio": {"transcript": "!"}}),
        ch({"audio": {"expires_at": 1730768595}}, "stop"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "Yes, a golden retriever is a great family dog!"


def test_chat_glm_sensitive_finish_is_a_content_filter() -> None:
    """Zhipu / Z.ai GLM ends a stream it filtered with ``finish_reason: "sensitive"``
    (a content-policy stop), its own spelling of ``content_filter``.

    Evidence: https://github.com/BerriAI/litellm/pull/24373 (``"sensitive"`` →
    ``"content_filter"``), https://github.com/langgenius/dify/issues/7559,
    https://github.com/promptfoo/promptfoo/pull/9905.
    """
    body = sse(
        ch({"role": "assistant", "content": "Here is"}),
        ch({"content": " the"}),
        ch({"content": ""}, "sensitive"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "Here is the"
    assert response.finish_reason is FinishReason.CONTENT_FILTER


@pytest.mark.parametrize(
    "reason",
    ["insufficient_system_resource", "network_error"],
)
def test_chat_finish_reasons_meaning_the_server_interrupted_are_errors(reason: str) -> None:
    """Two documented finish reasons say the server broke off the generation: DeepSeek's
    ``insufficient_system_resource`` ("the request is interrupted due to insufficient
    resource of the inference system") and Z.ai GLM's ``network_error``. The cut answer
    must not pass as a normal end: the response keeps the text, and its finish reason is
    ERROR.

    Evidence: https://api-docs.deepseek.com/api/create-chat-completion (finish_reason
    values), https://deepseekv4pro.com/guides/deepseek-create-chat-completion-api,
    https://github.com/promptfoo/promptfoo/pull/9905 ("Treat provider-side network_error
    finishes as failures"), https://github.com/BerriAI/litellm/pull/24373.
    """
    body = sse(
        ch({"role": "assistant", "content": "The first half"}),
        ch({"content": ""}, reason),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.text == "The first half"
    assert response.finish_reason is FinishReason.ERROR


def test_chat_proxy_plain_text_error_line_then_close_is_not_a_success() -> None:
    """A key proxy in front of DeepSeek, on an upstream reset, appended a plain-text
    ``upstream error: read ECONNRESET`` line to the SSE body and closed it cleanly: no
    finish_reason, no ``[DONE]``, no usage. That is a cut stream, not an (empty) answer;
    what streamed (the reasoning) stays in the partial response.

    Evidence: https://github.com/tetsuo-ai/agenc-core/pull/2492 ("that proxy appended a
    plain-text ``upstream error: read ECONNRESET`` line and closed the response cleanly").
    """
    body = (
        sse(
            ch({"role": "assistant", "content": None, "reasoning_content": "Let me"}),
            ch({"reasoning_content": " think about networkx."}),
        )
        + b"upstream error: read ECONNRESET\n"
    )
    error = failure(body)
    assert isinstance(error, RafrxError)
    assert error.partial is not None
    assert error.partial.reasoning_text == "Let me think about networkx."
    assert error.partial.text == ""


# ================================================================ openai-responses

MESSAGE = {
    "type": "message",
    "id": "msg_01",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Paris is sunny.", "annotations": []}],
}


def test_responses_message_text_only_in_output_item_done_is_kept() -> None:
    """Some Responses-compatible upstreams (and proxies) stream a message item's
    ``output_item.added`` and ``output_item.done`` without any ``output_text`` event: the
    text is only in the finished item's ``content``.

    Evidence: https://github.com/Soju06/codex-lb/pull/504 ("upstream only provides assistant
    text in final output-item or terminal response output payloads", tested as
    "item-done-only"). Oracle: the final ``Response``'s ``output_text`` (openai-python).
    """
    body = sse(
        rs("response.created", response=RESP),
        rs(
            "response.output_item.added",
            output_index=0,
            item={**MESSAGE, "status": "in_progress", "content": []},
        ),
        rs("response.output_item.done", output_index=0, item=MESSAGE),
        completed(MESSAGE),
    )
    final = Response.model_validate(dict(sse_events(body))["response.completed"]["response"])
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.STOP
    assert response.text == final.output_text == "Paris is sunny."


def test_responses_message_only_in_the_terminal_snapshot_is_kept() -> None:
    """A terminal-only Responses stream: ``response.created`` then ``response.completed``
    whose ``response.output`` holds the whole message (rafrx already delivers function
    calls found only there).

    Evidence: https://github.com/NVIDIA-NeMo/Switchyard/pull/777 ("a Responses-compatible
    upstream places a complete message or function call in
    ``response.completed.response.output`` but omits earlier item/delta lifecycle events"),
    https://github.com/Wei-Shaw/sub2api/pull/6925, https://github.com/Soju06/codex-lb/pull/504.
    Oracle: the final ``Response``'s ``output_text`` (openai-python).
    """
    usage = {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
    body = sse(rs("response.created", response=RESP), completed(MESSAGE, usage=usage))
    snapshot = dict(sse_events(body))["response.completed"]["response"]
    final = Response.model_validate({**snapshot, "usage": None})
    response = aggregate(body, "openai-responses")
    assert response.usage == Usage(12, 5, 17)
    assert response.text == final.output_text == "Paris is sunny."


def test_responses_reasoning_only_then_incomplete_max_output_tokens() -> None:
    """A thinking model on Ollama's Responses endpoint spends the whole output budget on
    reasoning: ``reasoning_summary_text.delta`` (many), ``.done``, then
    ``response.incomplete`` with ``max_output_tokens``; the output holds only the
    reasoning item. The reasoning is kept, the text is empty, the finish is LENGTH.

    Evidence: https://github.com/nowledge-co/nowledge-mem/issues/86 (the event sequence
    from ollama.com/v1/responses with deepseek-v4-flash).
    """
    reasoning = {
        "type": "reasoning",
        "id": "rs_01",
        "summary": [{"type": "summary_text", "text": "Need JSON. Think."}],
    }
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item={**reasoning, "summary": []}),
        rs(
            "response.reasoning_summary_text.delta",
            item_id="rs_01",
            output_index=0,
            summary_index=0,
            delta="Need JSON.",
        ),
        rs(
            "response.reasoning_summary_text.delta",
            item_id="rs_01",
            output_index=0,
            summary_index=0,
            delta=" Think.",
        ),
        rs(
            "response.reasoning_summary_text.done",
            item_id="rs_01",
            output_index=0,
            summary_index=0,
            text="Need JSON. Think.",
        ),
        rs(
            "response.incomplete",
            response={
                **RESP,
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "output": [reasoning],
                "usage": {"input_tokens": 20, "output_tokens": 50, "total_tokens": 70},
            },
        ),
    )
    response = aggregate(body, "openai-responses")
    assert response.finish_reason is FinishReason.LENGTH
    assert response.reasoning_text == "Need JSON. Think."
    assert response.text == ""
    assert response.usage == Usage(20, 50, 70)


def test_responses_vllm_text_then_streamed_function_call() -> None:
    """vLLM's Responses endpoint (non-harmony models): a message item with a short text
    part (ids without OpenAI's prefixes), then a ``function_call`` item whose arguments
    stream as deltas, then ``function_call_arguments.done`` and ``output_item.done``.

    Evidence: https://github.com/vllm-project/vllm/pull/29947 (the printed event
    sequence), https://github.com/vllm-project/vllm/pull/36445.
    """
    message = {
        "type": "message",
        "id": "bb5e8602d5166eb0",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    call = {
        "type": "function_call",
        "id": "9c6a9d50fbbcf08e",
        "call_id": "call_b727c44f9cc79cc8",
        "name": "get_current_weather",
        "arguments": "",
        "status": "in_progress",
    }
    arguments = '{"location": "Boston", "unit": "fahrenheit"}'
    deltas = ["{", '"location": "Boston"', ', "unit": "fahrenheit"', "}"]
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item=message),
        rs(
            "response.content_part.added",
            item_id=message["id"],
            output_index=0,
            content_index=0,
            part={"type": "output_text", "text": "", "annotations": []},
        ),
        rs(
            "response.output_text.delta",
            item_id=message["id"],
            output_index=0,
            content_index=0,
            delta="Checking.",
        ),
        rs(
            "response.output_text.done",
            item_id=message["id"],
            output_index=0,
            content_index=0,
            text="Checking.",
        ),
        rs(
            "response.output_item.done",
            output_index=0,
            item={
                **message,
                "status": "completed",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            },
        ),
        rs("response.output_item.added", output_index=1, item=call),
        *(
            rs(
                "response.function_call_arguments.delta",
                item_id=call["id"],
                output_index=1,
                delta=d,
            )
            for d in deltas
        ),
        rs(
            "response.function_call_arguments.done",
            item_id=call["id"],
            output_index=1,
            arguments=arguments,
        ),
        rs(
            "response.output_item.done",
            output_index=1,
            item={**call, "arguments": arguments, "status": "completed"},
        ),
        completed({**call, "arguments": arguments, "status": "completed"}),
    )
    response = aggregate(body, "openai-responses")
    assert response.text == "Checking."
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        (
            "call_b727c44f9cc79cc8",
            "get_current_weather",
            {"location": "Boston", "unit": "fahrenheit"},
        )
    ]
