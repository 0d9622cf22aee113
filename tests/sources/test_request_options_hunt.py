"""The user who tunes the request: options, structured outputs, tool choice, reasoning.

Angle of this hunt: a user passes provider options through rafrx's clients
(``OpenAIChatClient``, ``AnthropicClient``, ``OpenAIResponsesClient``: ``**params`` at
construction and per ``stream()`` call, ``headers``) and through an ``Agent``, and
expects each option to arrive exactly as the provider's API takes it, and the streams
those options cause (structured JSON text, refusals, logprobs, ``n > 1``) to come back
intact. Every request goes over real HTTP to :class:`~rafrx.testing.LLMServer` on
127.0.0.1 (or, for hand-written streams, a :class:`~rafrx.testing.Replay` of it), whose
recorded requests show the body the provider would have received.

What ``tests/test_request_bodies_hunt.py`` already pins (each documented field arriving
unchanged, per-call fields not sticking, ``max_tokens`` defaults, server tools) is not
repeated here; this file covers falsy values, precedence as a property, removing and
merging defaults, the options an agent's tool loop carries on every step, structured
output text split anywhere, refusals and logprobs in the stream, and the options rafrx
itself controls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rafrx
from rafrx import Agent, ChatMessage, FinishReason, tool
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import LLMServer, Replay, Reply, ToolCallSpec

GUARD = 5.0  # seconds: a guard against hangs only

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = sorted(CLIENTS)
USER = [ChatMessage.user("Hi")]


async def call(
    client: LLMClient, messages: Sequence[ChatMessage], tools: Any = None, **params: Any
) -> rafrx.AgentResponse:
    """One call through ``client``, awaited to its end."""
    updates = client.stream(list(messages), tools, **params)
    async with asyncio.timeout(GUARD):
        return await rafrx.collect_agent_response(updates.pipe(rafrx.convert()))


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values, types included (``0`` is not ``False``, nor ``0.0``)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@tool
def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city's name.
    """
    return f"{city}: sunny"


# ================================================================ falsy values


FALSY: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "temperature": 0,
        "top_p": 0.0,
        "seed": 0,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logprobs": False,
        "store": False,
        "parallel_tool_calls": False,
        "metadata": {},
        "stop": [],
        "user": "",
    },
    "anthropic": {
        "temperature": 0,
        "top_k": 0,
        "top_p": 0.0,
        "stop_sequences": [],
        "metadata": {},
    },
    "openai-responses": {
        "temperature": 0,
        "top_p": 0.0,
        "parallel_tool_calls": False,
        "store": False,
        "metadata": {},
        "instructions": "",
    },
}


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", ["client", "call"])
async def test_falsy_option_values_are_sent_with_their_exact_json_type(
    llm_server: LLMServer, fmt: str, where: str
) -> None:
    """``temperature=0``, ``seed=0``, ``False``, ``{}``, ``[]``, ``""``: a falsy value is
    a value the user chose (greedy decoding, no parallel calls, no stop sequences), not
    an absent one. Each arrives, as the same JSON type (``0`` stays an integer, ``0.0``
    a float, ``False`` a boolean), whether given to the client or to the call."""
    options = FALSY[fmt]
    at_client = options if where == "client" else {}
    at_call = options if where == "call" else {}
    async with CLIENTS[fmt](llm_server.url, "sk-test", **at_client) as client:
        await call(client, USER, [lookup], **at_call)
    body = llm_server.requests[-1].json
    for key, value in options.items():
        assert key in body, key
        assert same_json(body[key], value), (key, body[key])


@pytest.mark.asyncio
async def test_a_zero_max_tokens_given_to_anthropic_is_sent_not_replaced_by_the_default(
    llm_server: LLMServer,
) -> None:
    """``max_tokens`` is the one field the Anthropic client fills in itself (4096): a
    falsy ``0`` given to a call must not read as "not given" and fall back to it."""
    async with AnthropicClient(llm_server.url, "sk-test", max_tokens=1) as client:
        await call(client, USER, max_tokens=0)
    assert same_json(llm_server.requests[-1].json["max_tokens"], 0)


# ================================================================ precedence

SCALARS = st.one_of(
    st.integers(-5, 5),
    st.floats(-2, 2, allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(max_size=5),
    st.none(),
)
KEYS = st.sampled_from(["temperature", "top_p", "seed", "user", "x_vendor", "store_hint"])
OPTION_MAPS = st.dictionaries(KEYS, SCALARS, max_size=4)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    fmt=st.sampled_from(FORMATS),
    at_client=OPTION_MAPS,
    at_call=OPTION_MAPS,
)
def test_the_call_wins_over_the_client_key_by_key_and_nothing_is_dropped(
    fmt: str, at_client: dict[str, Any], at_call: dict[str, Any]
) -> None:
    """For any options given to the client and to one call, the body holds each key
    of both, the call's value where both give one; the next call sends the client's
    alone; the client's own fields (``model``, ``stream``) are still right."""

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            LLMServer() as server,
            CLIENTS[fmt](server.url, "sk-test", model="m-1", **at_client) as client,
        ):
            await call(client, USER, **at_call)
            await call(client, USER)
            first, second = (r.json for r in server.requests)
        return first, second

    first, second = asyncio.run(run())
    for key, value in {**at_client, **at_call}.items():
        assert same_json(first[key], value), (key, first[key])
    for key, value in at_client.items():
        assert same_json(second[key], value), (key, second[key])
    for key in set(at_call) - set(at_client):
        assert key not in second
    assert first["stream"] is second["stream"] is True
    assert first["model"] == second["model"] == "m-1"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_call_may_pick_another_model_and_the_next_call_goes_back(
    llm_server: LLMServer, fmt: str
) -> None:
    """``model`` per call (a cheaper model for one summary) is that call's model only;
    the server's reported model comes back in the response."""
    async with CLIENTS[fmt](llm_server.url, "sk-test", model="big") as client:
        small = await call(client, USER, model="small")
        big = await call(client, USER)
    assert [r.json["model"] for r in llm_server.requests] == ["small", "big"]
    assert (small.model, big.model) == ("small", "big")


@pytest.mark.asyncio
async def test_a_nested_option_given_per_call_replaces_the_clients_whole(
    llm_server: LLMServer,
) -> None:
    """A per-call mapping replaces the client's mapping of the same key whole, as the
    SDKs' keyword arguments do (``reasoning={"effort": "high"}`` for one call does not
    inherit the client's ``summary``): no deep merge the user did not ask for."""
    async with OpenAIResponsesClient(
        llm_server.url, "sk-test", reasoning={"effort": "low", "summary": "auto"}
    ) as client:
        await call(client, USER, reasoning={"effort": "high"})
        await call(client, USER)
    first, second = (r.json for r in llm_server.requests)
    assert first["reasoning"] == {"effort": "high"}
    assert second["reasoning"] == {"effort": "low", "summary": "auto"}


# ================================================================ stream_options


@pytest.mark.asyncio
async def test_include_usage_false_is_honoured_and_the_response_has_no_usage(
    llm_server: LLMServer,
) -> None:
    """A user who turns usage off (``stream_options={"include_usage": False}``) gets
    that sent as given, not overridden by the client's default, and the server's
    stream then has no usage chunk: the response's usage is ``None``, not an error."""
    async with OpenAIChatClient(llm_server.url, "sk-test") as client:
        off = await call(client, USER, stream_options={"include_usage": False})
        on = await call(client, USER)
    first, second = (r.json for r in llm_server.requests)
    assert first["stream_options"] == {"include_usage": False}
    assert second["stream_options"] == {"include_usage": True}
    assert off.usage is None
    assert on.usage is not None


@pytest.mark.asyncio
async def test_call_stream_options_replace_the_clients_but_keep_include_usage(
    llm_server: LLMServer,
) -> None:
    """Client ``stream_options={"include_obfuscation": False}`` and a call's own
    ``stream_options``: the call's mapping wins whole, and ``include_usage`` is still
    added to it (the client promises usage unless the user says otherwise)."""
    async with OpenAIChatClient(
        llm_server.url, "sk-test", stream_options={"include_obfuscation": False}
    ) as client:
        await call(client, USER, stream_options={"include_obfuscation": True})
    body = llm_server.requests[-1].json
    assert body["stream_options"] == {"include_usage": True, "include_obfuscation": True}


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
async def test_only_the_chat_client_adds_stream_options(llm_server: LLMServer, fmt: str) -> None:
    """``stream_options.include_usage`` is a Chat Completions field: the Anthropic and
    Responses clients never add it (Anthropic refuses unknown fields; the Responses
    API's ``stream_options`` has no ``include_usage``)."""
    async with CLIENTS[fmt](llm_server.url, "sk-test") as client:
        await call(client, USER)
    assert "stream_options" not in llm_server.requests[-1].json


# ================================================================ store / include (Responses)


@pytest.mark.asyncio
async def test_store_false_given_per_call_asks_for_encrypted_reasoning_that_call_only(
    llm_server: LLMServer,
) -> None:
    """``store=False`` for one call (a zero-data-retention request) asks for
    ``reasoning.encrypted_content`` beside the client's ``include`` for that call; the
    next call, stored, sends the client's ``include`` untouched."""
    async with OpenAIResponsesClient(
        llm_server.url, "sk-test", include=["message.output_text.logprobs"]
    ) as client:
        await call(client, USER, store=False)
        await call(client, USER)
        assert client.params == {"include": ["message.output_text.logprobs"]}
    first, second = (r.json for r in llm_server.requests)
    assert first["include"] == ["message.output_text.logprobs", "reasoning.encrypted_content"]
    assert second["include"] == ["message.output_text.logprobs"]
    assert "store" not in second


@pytest.mark.asyncio
async def test_store_false_with_include_none_still_asks_for_encrypted_reasoning(
    llm_server: LLMServer,
) -> None:
    """``include=None`` (a user clearing the field) with ``store=False``: the body has
    a list with ``reasoning.encrypted_content``, not ``null``."""
    async with OpenAIResponsesClient(llm_server.url, "sk-test", store=False) as client:
        await call(client, USER, include=None)
    assert llm_server.requests[-1].json["include"] == ["reasoning.encrypted_content"]


@pytest.mark.asyncio
async def test_store_true_per_call_overrides_the_clients_store_false(
    llm_server: LLMServer,
) -> None:
    """A client made for ``store=False`` and one call with ``store=True``: that call
    is a stored one (no encrypted-content request is forced into it)."""
    async with OpenAIResponsesClient(llm_server.url, "sk-test", store=False) as client:
        await call(client, USER, store=True)
    body = llm_server.requests[-1].json
    assert body["store"] is True
    assert "include" not in body


# ================================================================ options in the agent loop

AGENT_OPTIONS: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "temperature": 0,
        "response_format": {"type": "json_object"},
        "reasoning_effort": "low",
    },
    "anthropic": {
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "temperature": 0,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "max_tokens": 2048,
    },
    "openai-responses": {
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "json_object"}},
    },
}


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_agent_sends_the_clients_options_on_every_step_of_a_tool_loop(
    llm_server: LLMServer, fmt: str
) -> None:
    """An ``Agent`` over a client configured with tool choice, sampling, reasoning and
    a JSON output format: the first call and the one after the tool ran both carry
    every option unchanged, beside the agent's tools and ``stream: true``."""
    options = AGENT_OPTIONS[fmt]
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Paris"})]),
        Reply(text='{"weather": "sunny"}'),
    )
    client = CLIENTS[fmt](llm_server.url, "sk-test", model="m-1", **options)
    async with client:
        agent = Agent(client, tools=[lookup])
        async with asyncio.timeout(GUARD):
            response = await agent.send("Weather in Paris?")
    assert response.text == '{"weather": "sunny"}'
    bodies = [r.json for r in llm_server.requests]
    assert len(bodies) == 2
    for body in bodies:
        for key, value in options.items():
            assert same_json(body[key], value), (key, body[key])
        assert body["stream"] is True
        assert body["model"] == "m-1"
    assert [list(r.tool_names) for r in llm_server.requests] == [["lookup"], ["lookup"]]
    assert llm_server.requests[1].last_role == "tool"


# ================================================================ structured output text

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=30, deadline=None)
@given(
    fmt=st.sampled_from(FORMATS),
    value=st.dictionaries(st.text(max_size=6), JSON_VALUES, min_size=1, max_size=4),
    chunk_size=st.integers(1, 9),
    ascii_only=st.booleans(),
)
def test_structured_json_text_arrives_intact_however_the_deltas_split_it(
    fmt: str, value: dict[str, Any], chunk_size: int, ascii_only: bool
) -> None:
    """A JSON answer (``response_format`` / ``text.format`` / Anthropic's output
    format), streamed in deltas that cut it anywhere (inside strings, escapes, numbers
    and multi-byte characters), comes back as the exact text, which parses to the value
    the model wrote."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    formats = {
        "openai-chat": {"response_format": {"type": "json_object"}},
        "anthropic": {},
        "openai-responses": {"text": {"format": {"type": "json_object"}}},
    }

    async def run() -> rafrx.AgentResponse:
        async with LLMServer() as server, CLIENTS[fmt](server.url, "sk-test") as client:
            server.enqueue(Reply(text=text, chunk_size=chunk_size))
            return await call(client, USER, **formats[fmt])

    response = asyncio.run(run())
    assert response.text == text
    assert json.loads(response.text) == value
    assert response.finish_reason is FinishReason.STOP


# ================================================================ refusals and logprobs


def chat_sse(*chunks: dict[str, Any]) -> bytes:
    """Chat completion chunks as an SSE body ending with ``[DONE]``."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    events = [f"data: {json.dumps({**base, **chunk})}\n\n" for chunk in chunks]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def choice(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}


USAGE = {"usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}, "choices": []}


async def replayed(fmt: str, body: bytes, chunk_size: int | None = None) -> rafrx.AgentResponse:
    async with LLMServer() as server, CLIENTS[fmt](server.url, "sk-test") as client:
        server.enqueue(Replay(body, chunk_size=chunk_size))
        return await call(client, USER)


@pytest.mark.asyncio
@pytest.mark.parametrize("chunk_size", [None, 1, 13])
async def test_a_chat_refusal_under_structured_outputs_is_the_reply_once_and_whole(
    no_task_leak: None, chunk_size: int | None
) -> None:
    """With ``response_format: json_schema`` the model may refuse: the refusal streams
    in ``delta.refusal`` with ``content: null`` (and its own logprobs). rafrx documents
    it as the reply the user sees (``TextDelta``, openai_chat.py): it arrives whole and
    once, the logprobs chunks break nothing, and the usage chunk is still read."""
    logprobs = {"content": None, "refusal": [{"token": "I", "logprob": -0.1, "bytes": [73]}]}
    body = chat_sse(
        choice({"role": "assistant", "content": None, "refusal": ""}),
        choice({"refusal": "I'm sorry, "}, logprobs=logprobs),
        choice({"refusal": "I can't help with that."}, logprobs=logprobs),
        choice({}, "stop"),
        USAGE,
    )
    response = await replayed("openai-chat", body, chunk_size)
    assert response.text == "I'm sorry, I can't help with that."
    assert response.finish_reason is FinishReason.STOP
    assert response.usage is not None
    assert response.usage.total_tokens == 12


@pytest.mark.asyncio
async def test_chat_logprobs_chunks_leave_the_json_text_exact(no_task_leak: None) -> None:
    """``logprobs=True, top_logprobs=2``: every chunk carries ``choices[0].logprobs``
    (tokens, bytes, top alternatives), and some carry logprobs but an empty delta; the
    JSON text is exact and nothing else leaks into it."""

    def lp(token: str) -> dict[str, Any]:
        entry = {"token": token, "logprob": -0.5, "bytes": list(token.encode())}
        return {"content": [{**entry, "top_logprobs": [entry, entry]}], "refusal": None}

    pieces = ['{"', "a", '": [', "1", ", ", '"é"', "]}"]
    chunks = [choice({"role": "assistant", "content": ""}, logprobs=None)]
    chunks += [choice({"content": p}, logprobs=lp(p)) for p in pieces]
    chunks += [choice({}, logprobs=lp("")), choice({}, "stop", logprobs=None), USAGE]
    response = await replayed("openai-chat", chat_sse(*chunks), chunk_size=5)
    assert response.text == '{"a": [1, "é"]}'
    assert json.loads(response.text) == {"a": [1, "é"]}
    assert response.usage is not None


@pytest.mark.asyncio
async def test_with_n_2_only_the_first_choice_is_the_reply(no_task_leak: None) -> None:
    """``n=2``: the chunks of both choices interleave. rafrx documents that only
    choice 0 is read: its text comes whole, never mixed with choice 1's, and its finish
    reason is the response's even when choice 1 finishes after it."""
    body = chat_sse(
        choice({"role": "assistant", "content": "A1"}),
        {"choices": [{"index": 1, "delta": {"role": "assistant", "content": "B1"}}]},
        choice({"content": " A2"}),
        {"choices": [{"index": 1, "delta": {"content": " B2"}}]},
        choice({}, "length"),
        {"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]},
        USAGE,
    )
    response = await replayed("openai-chat", body, chunk_size=7)
    assert response.text == "A1 A2"
    assert response.finish_reason is FinishReason.LENGTH
    assert response.usage is not None


def responses_sse(*events: dict[str, Any]) -> bytes:
    """Responses API events as an SSE body (named events, as OpenAI sends them)."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def refusal_stream(refusal: str, pieces: Sequence[str]) -> bytes:
    msg = "msg_1"
    item = {"type": "message", "id": msg, "status": "in_progress", "role": "assistant"}
    part = {"type": "refusal", "refusal": refusal}
    done_item = {**item, "status": "completed", "content": [part]}
    response = {"id": "resp_1", "object": "response", "model": "gpt-4o", "status": "completed"}
    where = {"item_id": msg, "output_index": 0, "content_index": 0}
    return responses_sse(
        {"type": "response.created", "response": {**response, "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        {
            "type": "response.content_part.added",
            **where,
            "part": {"type": "refusal", "refusal": ""},
        },
        *({"type": "response.refusal.delta", **where, "delta": p} for p in pieces),
        {"type": "response.refusal.done", **where, "refusal": refusal},
        {"type": "response.content_part.done", **where, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {
            "type": "response.completed",
            "response": {
                **response,
                "output": [done_item],
                "usage": {"input_tokens": 5, "output_tokens": 7, "total_tokens": 12},
            },
        },
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("chunk_size", [None, 3])
async def test_a_responses_refusal_is_the_reply_once_and_one_assistant_message(
    no_task_leak: None, chunk_size: int | None
) -> None:
    """``text.format: json_schema`` and a refusal: ``response.refusal.delta`` pieces,
    then ``refusal.done``, ``content_part.done``, ``output_item.done`` and the final
    output all repeat it. The reply is the refusal once (not two or four times), and
    the transcript holds one assistant message with it, once."""
    refusal = "I'm sorry, I can't help with that."
    body = refusal_stream(refusal, ["I'm sorry, ", "I can't ", "help with that."])
    response = await replayed("openai-responses", body, chunk_size)
    assert response.text == refusal
    assert response.finish_reason is FinishReason.STOP
    [message] = response.turn_transcript
    assert message.content == refusal


@pytest.mark.asyncio
async def test_a_responses_refusal_without_deltas_is_taken_from_its_done_event(
    no_task_leak: None,
) -> None:
    """A server that sends the refusal only in ``response.refusal.done`` (no deltas):
    the reply is still the refusal, once."""
    refusal = "No."
    response = await replayed("openai-responses", refusal_stream(refusal, []))
    assert response.text == refusal


@pytest.mark.asyncio
async def test_an_anthropic_refusal_stop_reason_is_a_content_filter_finish(
    no_task_leak: None,
) -> None:
    """Anthropic's ``stop_reason: "refusal"`` (streaming classifiers): the response's
    finish reason says the provider refused (``CONTENT_FILTER``), and the text before
    it is kept."""

    def ev(data: dict[str, Any]) -> str:
        return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"

    usage = {"input_tokens": 5, "output_tokens": 2}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude"}
    body = "".join(
        [
            ev({"type": "message_start", "message": {**message, "content": [], "usage": usage}}),
            ev(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                }
            ),
            ev(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "Sure"},
                }
            ),
            ev({"type": "content_block_stop", "index": 0}),
            ev({"type": "message_delta", "delta": {"stop_reason": "refusal"}, "usage": usage}),
            ev({"type": "message_stop"}),
        ]
    ).encode()
    response = await replayed("anthropic", body)
    assert response.text == "Sure"
    assert response.finish_reason is FinishReason.CONTENT_FILTER


@pytest.mark.asyncio
async def test_responses_logprobs_on_text_deltas_leave_the_text_exact(no_task_leak: None) -> None:
    """``include=["message.output_text.logprobs"]``: each ``output_text.delta`` carries
    a ``logprobs`` list; the text is exact and comes once."""
    msg, where = "msg_1", {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    pieces = ['{"ok"', ": ", "true}"]
    text = "".join(pieces)
    item = {"type": "message", "id": msg, "status": "in_progress", "role": "assistant"}
    done_item = {**item, "status": "completed", "content": [{"type": "output_text", "text": text}]}
    body = responses_sse(
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-4o"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        *(
            {
                "type": "response.output_text.delta",
                **where,
                "delta": p,
                "logprobs": [{"token": p, "logprob": -0.1, "top_logprobs": []}],
            }
            for p in pieces
        ),
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "model": "gpt-4o",
                "status": "completed",
                "output": [done_item],
            },
        },
    )
    response = await replayed("openai-responses", body, chunk_size=11)
    assert response.text == text
    assert json.loads(response.text) == {"ok": True}


# ================================================================ what rafrx controls


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_stream_false_given_anywhere_still_streams(llm_server: LLMServer, fmt: str) -> None:
    """``stream`` is the client's: a ``stream=False`` copied from a non-streaming
    snippet, at the client or per call, still sends ``stream: true`` (the clients only
    read streams) and the reply streams in."""
    async with CLIENTS[fmt](llm_server.url, "sk-test", stream=False) as client:
        first = await call(client, USER)
        second = await call(client, USER, stream=False)
    assert [r.json["stream"] for r in llm_server.requests] == [True, True]
    assert first.text == second.text != ""


def test_messages_given_as_a_call_option_clash_with_the_conversation_loudly() -> None:
    """``messages`` is the conversation, the first argument of ``stream``: given again
    as an option it is a ``TypeError`` at once, not a body quietly holding one of
    the two."""
    client = OpenAIChatClient("http://127.0.0.1:9", "sk-test")
    with pytest.raises(TypeError, match="messages"):
        client.stream(USER, messages=USER)  # type: ignore[misc]


@pytest.mark.asyncio
async def test_an_option_json_cannot_carry_fails_the_call_before_any_request(
    llm_server: LLMServer,
) -> None:
    """A body field JSON cannot carry (``stop={"END"}``, a set; a pydantic class given
    as ``response_format``, which only the SDK's ``parse()`` converts) fails the call
    with an error naming the type: no request is sent, nothing hangs."""
    async with OpenAIChatClient(llm_server.url, "sk-test-0123456789abcdefghij") as client:
        with pytest.raises(Exception, match="set") as caught:
            await call(client, USER, stop={"END"})
    assert llm_server.request_count == 0
    assert "sk-test-0123456789abcdefghij" not in str(caught.value)


# ================================================================ headers, URLs, secrets


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fmt", "headers"),
    [
        ("openai-chat", {"HTTP-Referer": "https://app.example", "X-Title": "My app"}),
        ("anthropic", {"anthropic-beta": "output-128k-2025-02-19,interleaved-thinking-2025-05-14"}),
        ("openai-responses", {"X-Client-Request-Id": "req-1", "X-Stainless-Lang": "python"}),
    ],
)
async def test_extra_headers_never_end_up_in_the_body_and_options_never_in_the_headers(
    llm_server: LLMServer, fmt: str, headers: dict[str, str]
) -> None:
    """Headers go as headers (each exactly once, value intact), body options as body
    fields: neither leaks into the other when both are given."""
    async with CLIENTS[fmt](llm_server.url, "sk-test", headers=headers, temperature=0) as client:
        await call(client, USER)
    request = llm_server.requests[-1]
    for name, value in headers.items():
        assert request.headers.getall(name) == [value]
        assert name not in request.json
    assert "temperature" not in request.headers
    assert "headers" not in request.json


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_key_given_in_options_or_headers_stays_out_of_the_clients_repr(
    fmt: str,
) -> None:
    """The repr of a client given a key, a gateway header and body options shows none
    of their values (a repr lands in logs and notebook outputs)."""
    secret = "sk-live-0123456789abcdefghijklmnop"
    client = CLIENTS[fmt](
        "http://127.0.0.1:9/api/v1/",
        secret,
        headers={"cf-aig-authorization": "Bearer gw-0123456789abcdef"},
        metadata={"user_id": "u-1"},
    )
    shown = repr(client)
    assert secret not in shown
    assert "gw-0123456789abcdef" not in shown
    assert "u-1" not in shown
    await client.aclose()


# ---------------------------------------------------------------- bodies the API refuses


@pytest.mark.asyncio
@pytest.mark.parametrize("store", [None, False], ids=["store-default", "store-false"])
async def test_a_responses_input_string_goes_as_the_api_takes_it(
    llm_server: LLMServer, store: bool | None
) -> None:
    """``input`` may be a string (``ResponseCreateParamsBase.input: str | list``): it
    goes as given, not split into an array of characters."""
    params: dict[str, Any] = {"input": "Say hi"}
    if store is not None:
        params["store"] = store
    async with OpenAIResponsesClient(llm_server.url, "sk-test") as client:
        await call(client, [], **params)
    body = llm_server.requests[-1].json
    assert body["input"] == "Say hi"
    assert ("reasoning.encrypted_content" in body.get("include", ())) is (store is False)


@pytest.mark.asyncio
async def test_stream_options_none_leaves_the_field_out(llm_server: LLMServer) -> None:
    """A server that refuses unknown fields refuses ``stream_options`` whatever its
    value ("Unknown parameter: 'stream_options'", QuantumNous/new-api#418): ``None``
    leaves it out, as ``reasoning_field=None`` leaves out rafrx's other extra field."""
    async with OpenAIChatClient(llm_server.url, "sk-test", stream_options=None) as client:
        await call(client, USER)
        await call(client, USER, stream_options={"include_usage": False})
    first, second = (r.json for r in llm_server.requests[-2:])
    assert "stream_options" not in first
    assert second["stream_options"] == {"include_usage": False}


@pytest.mark.asyncio
async def test_chat_tool_options_go_only_with_tools(llm_server: LLMServer) -> None:
    """OpenAI refuses ``parallel_tool_calls`` and ``tool_choice`` without ``tools``
    ("'parallel_tool_calls' is only allowed when 'tools' are specified", Upsonic#323;
    openai/swarm#32 and camel-ai/camel#3706 fixed it so): one client configured with
    them serves calls with and without tools."""
    options = {"parallel_tool_calls": False, "tool_choice": "auto"}
    async with OpenAIChatClient(llm_server.url, "sk-test", **options) as client:
        await call(client, USER)
        await call(client, USER, [lookup])
    without, with_tools = (r.json for r in llm_server.requests[-2:])
    assert not {"tools", "parallel_tool_calls", "tool_choice"} & set(without)
    assert with_tools["parallel_tool_calls"] is False
    assert with_tools["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in with_tools["tools"]] == ["lookup"]
