"""Provider stream quirks, round 4: more shapes that real servers send, each with evidence.

Same method as ``test_provider_shapes.py`` … ``test_provider_shapes_3.py``: every body is
written by hand after a reported or documented shape (the issue or pull request is named
in each test's docstring) and goes through ``from_sse(body, dialect)`` → ``convert()`` →
``aggregate()``, or through the real client against :class:`~rafrx.testing.LLMServer`
where the HTTP layer matters. Nothing received may be lost or doubled; a stream that is
truly unusable ends with a typed :class:`~rafrx.errors.RafrxError` whose ``partial``
keeps what came. Where anthropic-sdk-python's accumulator reads the same events, it is
the oracle. Shapes covered by the earlier ``test_provider_shapes*.py``,
``test_dialect_quirks.py``, ``test_dialects_hunt.py`` and ``test_dialect_edges.py`` are not
repeated.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rafrx import operators as ops
from rafrx.agent import Agent
from rafrx.content import ToolCallingContent
from rafrx.errors import ContentTypeError, IncompleteStream, ProviderError
from rafrx.messages import ChatMessage, ToolCall
from rafrx.response import FinishReason, Usage
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, Timeouts
from rafrx.testing import Fault, LLMServer, Replay
from rafrx.tools import tool
from tests.sources.test_dialect_quirks import CHUNK, sse
from tests.sources.test_provider_shapes import (
    RESP,
    aggregate,
    block_delta,
    block_start,
    block_stop,
    ch,
    completed,
    converted,
    ev,
    failure,
    message_start,
    rs,
    sdk_anthropic,
    tc,
)

GUARD = 10.0  # seconds: a guard against hangs only

# ================================================================ openai-chat: tool calls


def test_chat_lm_studio_empty_name_on_every_argument_fragment_is_one_call() -> None:
    """LM Studio's OpenAI-compatible endpoint streams a call's arguments in parts, each part
    after the first repeating ``"type": "function"`` with ``"name": ""`` and no id.

    Evidence: https://github.com/lmstudio-ai/lmstudio-bug-tracker/issues/649 (LM Studio
    0.3.16, qwen3: ``{"index": 0, "type": "function", "function": {"name": "",
    "arguments": "count"}}`` … "parts after the first given with an empty function name
    field"). An empty name is no name: one call, its arguments whole, its id kept.
    """
    part = {"index": 0, "type": "function"}
    body = sse(
        tc({**part, "id": "613406915", "function": {"name": "search", "arguments": ""}}),
        *(
            tc({**part, "function": {"name": "", "arguments": piece}})
            for piece in ['{"', "query", '":"', "rx", 'py", "', "count", '":', "3}"]
        ),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.tool_calls == (ToolCall("613406915", "search", {"query": "rxpy", "count": 3}),)
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_chat_cumulative_usage_on_every_chunk_is_counted_once_and_calls_stay_whole() -> None:
    """Z.ai's GLM-5.x (through Command Code) attaches a cumulative ``usage`` object to
    every chunk of the stream, ``finish_reason`` only on the last one; a client that took
    a usage-bearing chunk for the end flushed the half-built tool call at every chunk.

    Evidence: https://github.com/rashidrazak/opencode-cmd-provider/pull/213 ("attaches a
    cumulative ``usage`` object to every SSE chunk … 12 chunks, ``usage`` on all 12,
    ``finish_reason`` only on the last"; "the flush ran at every chunk and deleted the
    half-built call"). Here: reasoning, text and a call in fragments, all with usage; the
    call comes once and whole, the usage is the last report, counted once.
    """

    def usage(n: int) -> dict[str, int]:
        return {"prompt_tokens": 40, "completion_tokens": n, "total_tokens": 40 + n}

    first = {"index": 0, "id": "call_glm_1", "type": "function"}
    body = sse(
        ch({"role": "assistant", "reasoning_content": "Need the"}, usage=usage(1)),
        ch({"reasoning_content": " weather."}, usage=usage(2)),
        ch({"content": "Checking."}, usage=usage(3)),
        ch(
            {"tool_calls": [{**first, "function": {"name": "weather", "arguments": ""}}]},
            usage=usage(4),
        ),
        ch({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}, usage=usage(5)),
        ch({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}, usage=usage(6)),
        ch({}, "tool_calls", usage=usage(7)),
        "[DONE]",
    )
    response = aggregate(body)
    assert response.reasoning_text == "Need the weather."
    assert response.text == "Checking."
    assert response.tool_calls == (ToolCall("call_glm_1", "weather", {"city": "Oslo"}),)
    assert response.usage == Usage(40, 7, 47)
    starts = [
        c
        for r in converted(body, "openai-chat")
        for c in r.contents
        if isinstance(c, ToolCallingContent)
    ]
    assert [c.call_id for c in starts] == ["call_glm_1"]  # flushed once, at the end


@pytest.mark.parametrize(
    "pieces",
    [
        # DeepSeek / Baidu Qianfan in "cumulative mode": each chunk resends the arguments so far
        ['{"path": "/etc', '{"path": "/etc/hosts"', '{"path": "/etc/hosts"}'],
        # a proxy re-emitting the whole arguments after streaming them (opencodex, eliza cloud)
        ['{"command": ', '"ls"}', '{"command": "ls"}'],
    ],
    ids=["cumulative-resend", "whole-again-at-the-end"],
)
def test_chat_resent_arguments_are_kept_raw_and_flagged_never_silently_repaired(
    pieces: list[str],
) -> None:
    """Some OpenAI-wire servers send a call's arguments again: cumulatively (every chunk the
    arguments so far) or whole once more after the fragments. Appending them, as the wire
    format says, gives ``{…}{…}``; a client that silently keeps a guess (``{}`` or the last
    object) runs the tool with arguments the model may not have meant.

    Evidence: https://github.com/NousResearch/hermes-agent/pull/35718 ("Some
    OpenAI-compatible providers (DeepSeek / Baidu Qianfan) resend the full arguments-so-far
    in every stream chunk … ``{...}{...}{...}``, which failed ``json.loads`` and got
    replaced with ``{}`` — a silently corrupted tool call"),
    https://github.com/lidge-jun/opencodex/issues/361 (duplicate ``function.arguments``
    chunk), https://github.com/elizaOS/eliza/pull/16973 (full arguments re-emitted after the
    deltas). rafrx keeps exactly what came as ``raw_arguments``, marks the call's
    arguments invalid, and guesses nothing (DESIGN: invalid JSON → ``error`` set and
    ``raw_arguments`` kept).
    """
    start = {"index": 0, "id": "call_q1", "type": "function"}
    body = sse(
        tc({**start, "function": {"name": "read_file", "arguments": ""}}),
        *(tc({"index": 0, "function": {"arguments": p}}) for p in pieces),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    [call] = response.tool_calls
    assert (call.id, call.name) == ("call_q1", "read_file")
    assert call.raw_arguments == "".join(pieces)  # nothing lost, nothing merged
    assert call.arguments is None
    assert call.error is not None
    assert "invalid JSON" in call.error
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_chat_parallel_calls_sharing_one_id_stay_two_calls_with_distinct_ids() -> None:
    """Azure OpenAI has been seen to give the same id to several tool calls of one response
    (distinct ``index``, same ``id``): a client keying calls by id merges them, and the two
    results cannot be told apart in the next request.

    Evidence: https://github.com/vercel/ai/issues/4936 ("Azure OpenAI quite often use the
    same id across multiple tool calls"; the workaround there rewrites every id). Both
    calls stay, in order, each with its own arguments, and the second id is made unique.
    """
    call = {"id": "call_azure_dup", "type": "function"}
    body = sse(
        tc({**call, "index": 0, "function": {"name": "weather", "arguments": ""}}),
        tc({"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}),
        tc({**call, "index": 1, "function": {"name": "weather", "arguments": ""}}),
        tc({"index": 1, "function": {"arguments": '{"city": "Rome"}'}}),
        ch({}, "tool_calls"),
        "[DONE]",
    )
    response = aggregate(body)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("weather", {"city": "Oslo"}),
        ("weather", {"city": "Rome"}),
    ]
    ids = [c.id for c in response.tool_calls]
    assert ids[0] == "call_azure_dup"
    assert len(set(ids)) == 2
    assistant = response.turn_transcript[0]
    assert [c.id for c in assistant.tool_calls or ()] == ids


def test_chat_choiceless_error_chunk_after_text_is_a_typed_error_with_the_partial() -> None:
    """OpenRouter (and similar aggregators) can answer HTTP 200 and then, mid-stream, send a
    ``chat.completion.chunk`` with empty ``choices`` and a top-level ``error`` object (the
    upstream hit its capacity); a client treating it like a usage-only chunk reports an
    empty success.

    Evidence: https://github.com/diegosouzapw/OmniRoute/pull/8210 (a real request:
    ``nvidia/nemotron-…`` returned "Worker local total request limit reached (33/32)"
    mid-stream; "a false 'successful but empty' response masking a real ``502``"). The
    error is typed and retryable (code 502), and the text streamed before it is kept.
    """
    error_chunk = {
        "id": "gen-1",
        "object": CHUNK,
        "created": 1,
        "model": "nvidia/nemotron",
        "choices": [],
        "error": {"message": "Worker local total request limit reached (33/32)", "code": 502},
    }
    body = sse(ch({"role": "assistant", "content": "The answer is"}), error_chunk, "[DONE]")
    error = failure(body)
    assert isinstance(error, ProviderError)
    assert error.message == "Worker local total request limit reached (33/32)"
    assert error.code == "502"
    assert error.retryable is True
    assert error.partial is not None
    assert error.partial.text == "The answer is"


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.mark.asyncio
async def test_client_agent_runs_a_call_whose_stream_ends_with_finish_reason_stop() -> None:
    """SGLang (before v0.4.9) and Swama end a tool-calling stream with ``finish_reason:
    "stop"`` instead of ``"tool_calls"``; a client deciding from the finish reason never
    runs the tool.

    Evidence: https://github.com/sgl-project/sglang/pull/7708 ("the final chunk always
    having a 'stop' instead of the expected 'tool_calls' … unpredictable behavior in some
    open source software (eg. strand agent)"), https://github.com/Trans-N-ai/swama/issues/50.
    Over real HTTP, the agent runs the complete call and sends its result back.
    """
    first = sse(
        ch({"role": "assistant", "content": ""}),
        tc(
            {
                "index": 0,
                "id": "call_sg1",
                "type": "function",
                "function": {"name": "lookup", "arguments": ""},
            }
        ),
        tc({"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}),
        ch({}, "stop"),
        "[DONE]",
    )
    second = sse(ch({"content": "It is sunny in Oslo."}), ch({}, "stop"), "[DONE]")
    async with LLMServer() as server:
        server.enqueue(Replay(first, chunk_size=37), Replay(second))
        async with OpenAIChatClient(server.url, "sk-test", model="qwen3") as client:
            response = await asyncio.wait_for(Agent(client, tools=[lookup]).send("Weather?"), GUARD)
        requests = [r.json for r in server.requests]
        await server.wait_connections_closed(timeout=GUARD)
    assert response.text == "It is sunny in Oslo."
    assert len(requests) == 2
    sent = requests[1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == "call_sg1"
    assert json.loads(sent[-2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_sg1", "content": "sunny in Oslo"}


# ================================================================ anthropic


def _text_turn(text: str = "Hello!") -> list[tuple[str, dict[str, Any]]]:
    return [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": text}),
        block_stop(0),
        ev(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage={"output_tokens": 4},
        ),
    ]


@pytest.mark.parametrize(
    "sentinel",
    ["[DONE]", ("done", "[DONE]")],
    ids=["data-only", "event-done"],
)
def test_anthropic_done_sentinel_after_message_stop_is_a_clean_end(sentinel: Any) -> None:
    """Gateways in front of Claude (Microsoft Foundry / Azure APIM, LiteLLM, corporate
    proxies) append an OpenAI-style ``data: [DONE]`` (sometimes as ``event: done``) after
    ``message_stop``; a parser that decodes every event as JSON fails the finished turn.

    Evidence: https://github.com/anthropics/anthropic-sdk-csharp/pull/202 ("``data: [DONE]``
    SSE terminal event emitted by Microsoft Foundry"), https://github.com/earendil-works/pi/issues/3708
    (``event: done`` / ``data: [DONE]`` after ``message_stop``: "Could not parse Anthropic
    SSE event done"), https://github.com/zed-industries/zed/pull/61627. The turn ends
    normally: text, stop reason and usage as without the sentinel.
    """
    body = sse(*_text_turn(), ev("message_stop"), sentinel)
    response = aggregate(body, "anthropic")
    assert response.text == "Hello!"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(10, 4, 14)


@pytest.mark.asyncio
async def test_client_anthropic_done_sentinel_after_message_stop_over_http() -> None:
    """The same Foundry-style body over real HTTP, split in small writes: the client ends
    the call at ``message_stop`` and delivers the whole answer (anthropic-sdk-csharp#202)."""
    body = sse(*_text_turn("Hi from Foundry."), ev("message_stop"), "[DONE]")
    async with LLMServer() as server:
        server.enqueue(Replay(body, chunk_size=23))
        async with AnthropicClient(server.url, "sk-ant-test", "claude-sonnet-4-5") as client:
            response = await asyncio.wait_for(
                client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()), GUARD
            )
        await server.wait_connections_closed(timeout=GUARD)
    assert response.text == "Hi from Foundry."
    assert response.finish_reason is FinishReason.STOP


def test_anthropic_null_usage_fields_in_message_delta_keep_the_message_start_counts() -> None:
    """Claude on Bedrock (through an Anthropic-format gateway) sends ``message_delta`` usage
    with ``output_tokens`` only, the input and cache counts ``null`` or absent: they are
    in ``message_start``. Clients adding them crashed or zeroed the input count.

    Evidence: https://github.com/karthink/gptel/pull/1331 (a ``claude-opus-4-6`` stream,
    ``msg_bdrk_…``: ``message_start`` ``input_tokens: 9325``; ``message_delta`` ``"usage":
    {"output_tokens": 76}``: "Wrong type argument: number-or-marker-p, nil"),
    https://github.com/jamesrochabrun/SwiftAnthropic/pull/25 ("``inputTokens`` … might be
    null in the event ``message_delta``"). anthropic-sdk-python's accumulator is the oracle:
    a null count keeps the earlier one.
    """
    start = message_start(
        input_tokens=9325, cache_creation_input_tokens=0, cache_read_input_tokens=0
    )
    start[1]["message"]["id"] = "msg_bdrk_018QLHdNKiowfXmyqBRfMFh7"
    nulls = {
        "input_tokens": None,
        "cache_creation_input_tokens": None,
        "cache_read_input_tokens": None,
    }
    body = sse(
        start,
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Done."}),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {}}),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"cmd": "ls"}'}),
        block_stop(1),
        ev(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={**nulls, "output_tokens": 76},
        ),
        ev("message_stop"),
    )
    response = aggregate(body, "anthropic")
    snapshot = sdk_anthropic(body)
    assert snapshot.usage.input_tokens == 9325
    assert snapshot.usage.output_tokens == 76
    assert response.usage == Usage(9325, 76, 9401, cached_tokens=0)
    assert response.tool_calls == (ToolCall("toolu_01", "bash", {"cmd": "ls"}),)
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_anthropic_stream_that_stops_after_content_block_stop_is_incomplete() -> None:
    """An Anthropic-compatible gateway (Bifrost over Bedrock ConverseStream) that hits
    ``max_tokens`` sends every delta and ``content_block_stop``, then just ends the stream:
    no ``message_delta``, no ``message_stop``, no error frame, HTTP 200.

    Evidence: https://github.com/maximhq/bifrost/issues/6081 ("the stream just ends … a
    client has no protocol-level signal that the turn ended by truncation rather than by
    choice"), https://github.com/QuantumNous/new-api/issues/5870 (a ``/v1/messages``
    stream with no end). Not a success: a typed ``IncompleteStream`` keeping the text.
    """
    body = sse(*_text_turn("A long answer that was cut")[:4])
    error = failure(body, "anthropic")
    assert isinstance(error, IncompleteStream)
    assert error.partial is not None
    assert error.partial.text == "A long answer that was cut"


def test_anthropic_ollama_messages_shape_matches_the_sdk() -> None:
    """Ollama's Anthropic-compatible ``/v1/messages`` (``anthropic.StreamConverter``):
    ``message_start`` with an estimated ``input_tokens``; a ``thinking`` block started
    with ``"thinking": ""`` and never signed; a text block; each tool call as
    ``content_block_start`` with ``input: {}``, *one* ``input_json_delta`` holding the whole
    arguments, and ``content_block_stop``; ``message_delta`` carrying the real
    ``input_tokens`` and ``output_tokens``.

    Evidence: https://github.com/ollama/ollama/pull/13600 ("api: implement anthropic api"),
    ``anthropic/anthropic.go`` ``StreamConverter.Process`` in ollama/ollama. The text,
    reasoning, both calls and the final usage agree with anthropic-sdk-python's snapshot.
    """
    start = message_start(input_tokens=37)
    start[1]["message"].update(id="msg_4f1c", model="qwen3:8b")
    body = sse(
        start,
        block_start(0, {"type": "thinking", "thinking": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Two cities, "}),
        block_delta(0, {"type": "thinking_delta", "thinking": "two calls."}),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        block_delta(1, {"type": "text_delta", "text": "Let me check."}),
        block_stop(1),
        block_start(2, {"type": "tool_use", "id": "call_a1", "name": "weather", "input": {}}),
        block_delta(2, {"type": "input_json_delta", "partial_json": '{"city":"Oslo"}'}),
        block_stop(2),
        block_start(3, {"type": "tool_use", "id": "call_b2", "name": "weather", "input": {}}),
        block_delta(3, {"type": "input_json_delta", "partial_json": '{"city":"Rome"}'}),
        block_stop(3),
        ev(
            "message_delta",
            delta={"stop_reason": "tool_use"},
            usage={"input_tokens": 41, "output_tokens": 28},
        ),
        ev("message_stop"),
    )
    response = aggregate(body, "anthropic")
    snapshot = sdk_anthropic(body)
    assert response.reasoning_text == snapshot.content[0].thinking == "Two cities, two calls."
    assert response.text == snapshot.content[1].text == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        (b.id, b.name, b.input) for b in snapshot.content[2:]
    ]
    assert response.usage == Usage(41, 28, 69)
    assert (snapshot.usage.input_tokens, snapshot.usage.output_tokens) == (41, 28)
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_anthropic_adapter_sending_the_whole_input_at_block_start_keeps_it() -> None:
    """OpenAI→Anthropic adapters (AntSeed, ccrelay) built ``tool_use`` blocks with the full
    ``input`` in ``content_block_start`` and no ``input_json_delta`` at all; clients that
    only read the deltas ran every tool with ``{}``.

    Evidence: https://github.com/AntSeed/antseed/pull/15 ("tool_use content blocks placed
    their full ``input`` in ``content_block_start`` but never emitted
    ``input_json_delta`` … tool arguments arrive as empty ``{}``"),
    https://github.com/inflaborg/ccrelay/pull/119. The input that came is the call's
    arguments, and it goes back as it came.
    """
    body = sse(
        message_start(),
        block_start(
            0,
            {
                "type": "tool_use",
                "id": "toolu_ad1",
                "name": "read",
                "input": {"path": "/home/user/README.md", "lines": [1, 40]},
            },
        ),
        block_stop(0),
        ev("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 12}),
        ev("message_stop"),
    )
    response = aggregate(body, "anthropic")
    assert response.tool_calls == (
        ToolCall("toolu_ad1", "read", {"path": "/home/user/README.md", "lines": [1, 40]}),
    )
    assert response.finish_reason is FinishReason.TOOL_CALLS


# ================================================================ openai-responses


def test_responses_lm_studio_arguments_only_in_the_done_event() -> None:
    """LM Studio's ``/v1/responses`` (GLM-4.7-Flash) sends a function call's arguments only
    in ``response.function_call_arguments.done`` (no ``.delta``), and the
    ``response.output_item.done`` after it, like the final output, carries ``"{}"``.

    Evidence: https://github.com/earendil-works/pi/pull/917 ("the provider sends tool call
    arguments via ``response.function_call_arguments.done`` events instead of streaming
    them … The final ``response.output_item.done`` event then contains empty ``{}``
    arguments"). The call runs with the arguments of the ``.done`` event, once.
    """
    item = {"id": "fc_lm1", "type": "function_call", "call_id": "call_lm1", "name": "bash"}
    empty = {**item, "arguments": "{}", "status": "completed"}
    body = sse(
        rs("response.created", response={**RESP, "status": "in_progress", "output": []}),
        rs(
            "response.output_item.added",
            output_index=0,
            item={**item, "arguments": "", "status": "in_progress"},
        ),
        rs(
            "response.function_call_arguments.done",
            item_id="fc_lm1",
            output_index=0,
            arguments='{"command": "ls -la"}',
        ),
        rs("response.output_item.done", output_index=0, item=empty),
        completed(empty),
    )
    response = aggregate(body, "openai-responses")
    assert response.tool_calls == (ToolCall("call_lm1", "bash", {"command": "ls -la"}),)
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_responses_sglang_router_without_item_done_and_a_generic_final_output() -> None:
    """SGLang's router streams a function call (``output_item.added``, argument deltas,
    ``function_call_arguments.done``) with no ``response.output_item.done``, and its
    ``response.completed`` output is a generic message with empty text instead of the
    ``function_call`` item.

    Evidence: https://github.com/sgl-project/sglang/issues/12653 ("Missing
    ``response.output_item.done`` Event … The ``output`` array contains a generic message
    object … This loses all function call information in the final response"). The
    streamed call is kept, whole and once; the empty message adds no text.
    """
    item = {"id": "fc_sg1", "type": "function_call", "call_id": "call_sg1", "name": "weather"}
    empty_message = {
        "id": "msg_sg1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": ""}],
    }
    body = sse(
        rs("response.created", response={**RESP, "status": "in_progress", "output": []}),
        rs(
            "response.output_item.added",
            output_index=0,
            item={**item, "arguments": "", "status": "in_progress"},
        ),
        rs(
            "response.function_call_arguments.delta",
            item_id="fc_sg1",
            output_index=0,
            delta='{"city": ',
        ),
        rs(
            "response.function_call_arguments.delta",
            item_id="fc_sg1",
            output_index=0,
            delta='"Paris"}',
        ),
        rs(
            "response.function_call_arguments.done",
            item_id="fc_sg1",
            output_index=0,
            arguments='{"city": "Paris"}',
        ),
        completed(empty_message),
    )
    response = aggregate(body, "openai-responses")
    assert response.tool_calls == (ToolCall("call_sg1", "weather", {"city": "Paris"}),)
    assert response.text == ""
    assert response.finish_reason is FinishReason.TOOL_CALLS


# ---------------------------------------------------------------- found by this round


@pytest.mark.parametrize(
    "sentinel", ["[DONE]", ("done", "[DONE]")], ids=["data-only", "event-done"]
)
def test_anthropic_done_sentinel_instead_of_message_stop_ends_the_turn(sentinel: Any) -> None:
    """GitHub Copilot's Anthropic-compatible proxy ends a stream with ``data: [DONE]``
    instead of ``message_stop`` (huggingface/tau#692); Microsoft Foundry and other
    gateways send the same sentinel (anthropics/anthropic-sdk-csharp#202,
    earendil-works/pi#3708, zed-industries/zed#61627). anthropic-sdk-python skips it and
    the message is complete, as a stop reason without ``message_stop`` is for rafrx."""
    body = sse(*_text_turn(), sentinel)
    response = aggregate(body, "anthropic")
    assert response.text == "Hello!"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(10, 4, 14)


@pytest.mark.asyncio
async def test_client_anthropic_copilot_style_done_sentinel_over_http() -> None:
    body = sse(*_text_turn("Hi from Copilot."), "[DONE]")
    async with LLMServer() as server:
        server.enqueue(Replay(body, chunk_size=29))
        async with AnthropicClient(server.url, "sk-ant-test", "claude-sonnet-4-5") as client:
            response = await asyncio.wait_for(
                client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()),
                GUARD,
            )
    assert response.text == "Hi from Copilot."
    assert response.finish_reason is FinishReason.STOP


@pytest.mark.parametrize("dialect", ["anthropic", "openai-responses"])
def test_a_done_sentinel_before_the_end_is_an_incomplete_stream(dialect: str) -> None:
    """A ``[DONE]`` before any stop reason (Anthropic) or ``response.completed``
    (Responses) ends a stream that is not complete: ``IncompleteStream`` with what came,
    not a complaint about JSON syntax."""
    if dialect == "anthropic":
        events: list[Any] = [*_text_turn()[:3], "[DONE]"]
    else:
        delta = {"type": "response.output_text.delta", "item_id": "m1", "delta": "Hello!"}
        events = [("response.output_text.delta", delta), "[DONE]"]
    error = failure(sse(*events), dialect)
    assert isinstance(error, IncompleteStream), repr(error)
    assert error.partial is not None
    assert error.partial.text == "Hello!"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "content_type", ["application/json", "text/plain; charset=utf-8", "application/octet-stream"]
)
async def test_client_reads_an_event_stream_served_with_a_wrong_content_type(
    content_type: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Foundry Local answers ``stream: true`` with ``Content-Type: application/json``
    (microsoft/foundry-dev-tools#195), vLLM-Ascend's proxy did too
    (vllm-project/vllm-ascend#5033), ramalama's RAG proxy says ``text/plain``
    (containers/ramalama#2837); openai-python reads these streams. A body that starts
    as an event stream (here with a BOM, a blank line and a comment)
    is decoded, with a warning naming the type."""
    body = b"\xef\xbb\xbf\r\n: hi\n\n" + sse(
        ch({"role": "assistant", "content": "Hello"}), ch({}, "stop"), "[DONE]"
    )
    async with LLMServer() as server:
        server.enqueue(Fault.wrong_content_type(content_type, body=body))
        async with OpenAIChatClient(server.url, "sk-test", model="phi-4") as client:
            with caplog.at_level("WARNING", logger="rafrx.sources._http"):
                response = await asyncio.wait_for(
                    client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()),
                    GUARD,
                )
    assert response.text == "Hello"
    assert any(content_type in r.getMessage() for r in caplog.records)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b'{"error": {"message": "streaming is not supported"}}'),
        ("text/html", b"<html><body>502</body></html>"),
        ("text/plain", b"\n" * 5000),  # (blank lines only: read up to a bound, no further)
        ("application/octet-stream", b"dat"),  # (too short to tell)
    ],
    ids=["json", "html", "blank-lines", "short"],
)
async def test_a_body_that_is_not_an_event_stream_is_still_refused(
    content_type: str, body: bytes
) -> None:
    """RELIABILITY row 5: a proxy's page or a JSON error body fails before decoding,
    with its type and a snippet; so does a body that does not soon show itself as an
    event stream."""
    async with LLMServer() as server:
        server.enqueue(Fault.wrong_content_type(content_type, body=body))
        async with OpenAIChatClient(server.url, "sk-test", model="m") as client:
            with pytest.raises(ContentTypeError) as raised:
                await asyncio.wait_for(
                    client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()),
                    GUARD,
                )
    assert content_type in str(raised.value)
    assert raised.value.body == body.decode()[:2048]


def _function_call(item_id: str, args: str = "", status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": args,
        "status": status,
    }


@pytest.mark.parametrize("ids", [("fc_A", "fc_B", "fc_C"), ("fc_A", "fc_A", "fc_C")])
def test_responses_one_call_under_other_item_ids_at_later_stages_is_one_call(
    ids: tuple[str, str, str],
) -> None:
    """mistral.rs gives each stage of an item an id of its own (added / done /
    completed), LiteLLM's bridge lists in ``response.completed`` an item id never
    announced (BerriAI/litellm#36375): a finished item with a known ``call_id`` is
    that call, run once; only an item *added* under an id of its own is another call."""
    added, done, final = ids
    args = '{"city": "Paris"}'
    body = sse(
        rs("response.created", response=RESP),
        rs("response.output_item.added", output_index=0, item=_function_call(added, "", "wip")),
        rs("response.function_call_arguments.delta", item_id=added, output_index=0, delta=args),
        rs("response.output_item.done", output_index=0, item=_function_call(done, args)),
        completed(_function_call(final, args)),
    )
    response = aggregate(body, "openai-responses")
    assert [(c.id, c.arguments) for c in response.tool_calls] == [("call_1", {"city": "Paris"})]


async def _held_server(content_type: str, body: bytes, hold: float) -> tuple[Any, str]:
    """A server that writes ``body`` in one write, then holds the connection ``hold`` s."""
    from aiohttp import web

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        await response.write(body)
        await asyncio.sleep(hold)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}/v1"


@pytest.mark.asyncio
@pytest.mark.parametrize("content_type", ["text/event-stream", "application/json"])
async def test_a_mislabelled_stream_whole_in_its_first_read_completes_at_once(
    content_type: str,
) -> None:
    """The whole stream, ``[DONE]`` included, in the read that showed it to be an event
    stream, the connection then held open: the turn completes, as with the right
    type, without waiting for the idle timeout."""
    body = sse(ch({"role": "assistant", "content": "Hello"}), ch({}, "stop"), "[DONE]")
    runner, url = await _held_server(content_type, body, hold=3.0)
    try:
        async with OpenAIChatClient(url, "sk", model="m", timeouts=Timeouts(idle=0.5)) as client:
            response = await asyncio.wait_for(
                client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()),
                GUARD,
            )
        assert response.text == "Hello"
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_a_large_page_that_is_not_a_stream_fails_at_once() -> None:
    """A proxy's 5 KB page in one write, the connection then held: its first read
    already holds more than the snippet, so the ContentTypeError comes at once, not
    after the idle timeout."""
    page = b"<html>" + b"x" * 5000 + b"</html>"
    runner, url = await _held_server("text/html", page, hold=5.0)
    try:
        async with OpenAIChatClient(url, "sk", model="m", timeouts=Timeouts(idle=3.0)) as client:
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(ContentTypeError):
                await asyncio.wait_for(
                    client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()),
                    GUARD,
                )
            assert loop.time() - start < 2.5  # (well under the 3 s idle timeout)
    finally:
        await runner.cleanup()
