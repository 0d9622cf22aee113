"""What a failed stream's ``err.partial`` lacked that the provider SDK's own snapshot
kept, found by comparing the two (``tests/reliability/test_partial_vs_sdk_snapshots.py``),
one test per gap, each fixed by the dialects' ``salvage()``: OpenAI chat's usage (held
for the ``Finish``, or on the chunk that carries the error), Anthropic's signed
thinking block and server tool result whose stop event never came, and OpenRouter's
reasoning details (held for the end).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
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

from rafrx import ChatMessage, Usage
from rafrx import operators as ops
from rafrx.errors import IncompleteStream, ProviderError, RafrxError
from rafrx.messages import ANTHROPIC_THINKING
from rafrx.response import AgentResponse
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import Fault, LLMServer, Replay

FIXTURES = Path(__file__).parents[1] / "data" / "fixtures"
KEY = "sk-partials-0123456789abcdef"
ERROR_CHUNK = b'data: {"error": {"message": "Internal server error", "type": "server_error"}}\n\n'
MALFORMED = b'data: {"choices": [\n\n'


def _events(path: str) -> list[bytes]:
    body = (FIXTURES / path).read_bytes().replace(b"\r\n", b"\n")
    return [part + b"\n\n" for part in body.split(b"\n\n") if part.strip()]


def _failure(body: bytes, dialect: str) -> RafrxError:
    with pytest.raises(RafrxError) as caught:
        from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    return caught.value


def _partial(body: bytes, dialect: str) -> AgentResponse:
    partial = _failure(body, dialect).partial
    assert partial is not None
    return partial


def _sdk_chat(body: bytes) -> Any:
    """openai-python's running snapshot (what ChatCompletionStream holds) of ``body``."""
    state: Any = ChatCompletionStreamState()
    for sse in OpenAISSEDecoder().iter_bytes(iter([body])):
        data = sse.json()
        if "error" in data:
            break  # openai's Stream raises APIError here
        state.handle_chunk(openai_construct(type_=ChatCompletionChunk, value=data))
    return state.current_completion_snapshot


def _sdk_anthropic(body: bytes) -> Any:
    """anthropic-sdk-python's running snapshot (MessageStream.current_message_snapshot)."""
    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    for sse in AnthropicSSEDecoder().iter_bytes(iter([body])):
        if sse.event in (None, "ping", "error") or not sse.data:
            continue
        event = anthropic_construct(type_=RawMessageStreamEvent, value=sse.json())
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


def _kept_blocks(partial: AgentResponse) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in partial.turn_transcript:
        out += (message.provider_data or {}).get(ANTHROPIC_THINKING, ())
    return out


# ---------------------------------------------------------------- chat usage


@pytest.mark.parametrize("tail", [ERROR_CHUNK, MALFORMED], ids=["error-event", "malformed-event"])
def test_chat_usage_chunk_then_a_failure_before_done_loses_the_usage(tail: bytes) -> None:
    """What the user does: streams an OpenAI chat completion with
    ``stream_options={"include_usage": true}``; the finish chunk and the usage chunk
    arrive, then, before ``data: [DONE]``, the server sends an error payload (or a
    proxy garbles one event).

    Before the fix: ``aggregate()`` raises ProviderError / MalformedEvent whose
    ``.partial.usage`` is None: the tokens the provider reported (and bills) are lost.

    What should happen: ``.partial.usage == Usage(14, 30, 44)``, as openai-python's
    ``ChatCompletionStreamState.current_completion_snapshot.usage`` holds at that
    moment, and as rafrx already does for Anthropic and Responses since
    ``UpdateDecoder.salvage()`` (tests/reliability/test_usage_of_failed_calls.py:
    "a call that fails keeps the usage its provider had already reported").
    RELIABILITY/DESIGN: ``.partial`` is "the AgentResponse built so far".
    """
    events = _events("openai-chat/openai-text.sse")
    assert events[-1] == b"data: [DONE]\n\n"
    body = b"".join(events[:-1]) + tail  # everything up to [DONE], then the failure
    sdk = _sdk_chat(b"".join(events[:-1]))
    assert sdk.usage.total_tokens == 44  # the SDK's snapshot knows the usage
    partial = _partial(body, "openai-chat")
    assert partial.text == sdk.choices[0].message.content  # (the text is kept)
    assert partial.usage == Usage(14, 30, 44, reasoning_tokens=0)


@pytest.mark.parametrize(
    ("path", "usage"),
    [
        ("openai-chat/gemini-compat-text.sse", Usage(4, 0, 4)),
        ("openai-chat/vllm-tool-call.sse", Usage(226, 0, 226)),
    ],
)
def test_chat_usage_sent_on_every_chunk_is_lost_when_the_connection_drops(
    path: str, usage: Usage
) -> None:
    """What the user does: streams from Gemini's OpenAI-compatible endpoint (or vLLM
    with ``continuous_usage_stats``), which put the running ``usage`` on every chunk;
    the connection drops after the first chunk.

    Before the fix: IncompleteStream with ``.partial.usage`` None.

    What should happen: the usage of the last chunk received (here the prompt tokens
    the server already counted), as the SDK snapshot's ``usage`` (openai-python's
    ``_accumulate_chunk`` sets ``completion_snapshot.usage = chunk.usage`` on every
    chunk). Anthropic's analogous ``message_start`` usage is kept since the
    salvage() fix; the chat dialect has no ``salvage()``.
    """
    first = _events(path)[0]
    assert _sdk_chat(first).usage.prompt_tokens == usage.prompt_tokens
    error = _failure(first, "openai-chat")
    assert isinstance(error, IncompleteStream)
    assert error.partial is not None
    assert error.partial.usage == usage


def test_openrouter_error_chunk_usage_is_dropped() -> None:
    """What the user does: replays the recorded OpenRouter stream that fails mid-way
    (tests/data/fixtures/openai-chat/openrouter-error-midstream.sse): its last chunk
    carries ``"error": {"code": 400, "message": "Token limit reached"}`` *and* the
    call's ``usage`` (43 prompt, 10 completion, 53 total).

    Before the fix: ProviderError with ``.partial.usage`` None: the dialect raises on
    the ``error`` member before it reads the chunk's usage.

    What should happen: ``.partial.usage`` counts 43/10/53. The fixture's MANIFEST
    entry (hand-checked) gives ``expected.usage`` = 43/10/53 with the oracle note
    "expected.usage comes from the chunk that carries the error"; a failed Responses
    call keeps the usage its ``response.failed`` reports, the same case.
    """
    body = (FIXTURES / "openai-chat/openrouter-error-midstream.sse").read_bytes()
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
    [entry] = [e for e in manifest if e["path"] == "openai-chat/openrouter-error-midstream.sse"]
    error = _failure(body, "openai-chat")
    assert isinstance(error, ProviderError)
    assert error.partial is not None
    want = entry["expected"]["usage"]
    assert error.partial.usage is not None
    got = error.partial.usage
    assert (got.prompt_tokens, got.completion_tokens, got.total_tokens) == (
        want["prompt_tokens"],
        want["completion_tokens"],
        want["total_tokens"],
    )


@pytest.mark.asyncio
async def test_chat_usage_lost_over_http_when_the_connection_drops() -> None:
    """The same as the per-chunk usage case, through OpenAIChatClient against the
    local server: the Gemini-compatible stream is cut after its second chunk
    (``Fault.drop_after``). ``.partial`` has the text but no usage, although both
    chunks said ``usage: {prompt_tokens: 4, ...}`` (the SDK's snapshot has it)."""
    events = _events("openai-chat/gemini-compat-text.sse")
    body = b"".join(events)
    cut = len(events[0]) + len(events[1])
    async with LLMServer() as server:
        server.enqueue(Fault.drop_after(cut, body=Replay(body)))
        async with OpenAIChatClient(server.url, KEY, model="gemini-2.0-flash") as client:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()).subscribe(
                done.set_result, done.set_result
            )
            error = await asyncio.wait_for(done, 10)
    assert isinstance(error, RafrxError), error
    assert error.partial is not None
    assert error.partial.text == "Hello there"
    assert error.partial.usage == Usage(4, 0, 4)


# ---------------------------------------------------------------- signed reasoning


def test_anthropic_thinking_signature_received_before_the_failure_is_dropped() -> None:
    """What the user does: streams Claude with extended thinking; the thinking block's
    ``signature_delta`` arrives, then the connection drops before its
    ``content_block_stop`` (a one-event window, but at the end of every thinking
    block).

    Before the fix: ``.partial.reasoning_text`` has the thinking, but no thinking block
    (with its signature) is kept in ``provider_data``: AnthropicDialect builds the
    block only in ``_block_stop``.

    What should happen: the partial keeps the signed block, as
    anthropic-sdk-python's ``current_message_snapshot`` does (``accumulate_event``
    sets ``content.signature`` on ``signature_delta``). The signature is whole once
    its delta came; rafrx keeps it for a completed stream.
    """
    events = _events("anthropic/anthropic-thinking.sse")
    at = next(i for i, e in enumerate(events) if b'"signature_delta"' in e) + 1
    body = b"".join(events[:at])
    snapshot = _sdk_anthropic(body)
    [thinking] = [b for b in snapshot.content if b.type == "thinking"]
    assert thinking.signature  # the SDK has the signed thinking block
    partial = _partial(body, "anthropic")
    assert partial.reasoning_text == thinking.thinking
    signed = [b for b in _kept_blocks(partial) if b.get("type") == "thinking"]
    assert signed == [
        {"type": "thinking", "thinking": thinking.thinking, "signature": thinking.signature}
    ]


def test_openrouter_reasoning_details_are_dropped_when_the_stream_fails() -> None:
    """What the user does: streams Claude through OpenRouter's chat API (the recorded
    openrouter-reasoning.sse): ``delta.reasoning_details`` carry the reasoning text
    and its ``signature``; after the finish chunk, one event is garbled.

    Before the fix: MalformedEvent whose partial has the reasoning text but none of the
    ``reasoning_details`` (OpenAIChatDialect sends them only in ``_end()``, at
    ``[DONE]`` or at a clean end after a finish reason).

    What should happen: the partial keeps the merged details (with the signature),
    as openai-python's snapshot does (its ``accumulate_delta`` merges the
    ``reasoning_details`` list of the message), and as rafrx does for a completed
    stream (``REASONING_DETAILS`` block, openai_chat.py's docstring).
    """
    events = _events("openai-chat/openrouter-reasoning.sse")
    body = b"".join(e for e in events if b"[DONE]" not in e) + MALFORMED
    sdk = _sdk_chat(b"".join(e for e in events if b"[DONE]" not in e))
    details = sdk.choices[0].message.to_dict()["reasoning_details"]
    assert any(d.get("signature") for d in details)
    partial = _partial(body, "openai-chat")
    kept = [
        block
        for message in partial.turn_transcript
        for blocks in (message.provider_data or {}).values()
        for block in (blocks if isinstance(blocks, list | tuple) else [blocks])
    ]
    assert any("Et0BCkgI" in json.dumps(block) for block in kept), kept


# ---------------------------------------------------------------- server tool blocks


def test_anthropic_web_search_result_block_received_whole_is_dropped() -> None:
    """What the user does: streams Claude with the web search server tool; the
    ``web_search_tool_result`` block arrives whole in its ``content_block_start``
    (it has no deltas), then the connection drops before its ``content_block_stop``.

    Before the fix: the partial keeps the ``server_tool_use`` block but not the search
    result: AnthropicDialect emits a server tool's block only at its
    ``content_block_stop``.

    What should happen: the result block (its ``tool_use_id`` and content) is in the
    partial, as in anthropic-sdk-python's ``current_message_snapshot`` (which appends
    the block at ``content_block_start``).
    """
    events = _events("anthropic/anthropic-web-search-server-tool.sse")
    at = next(i for i, e in enumerate(events) if b'"web_search_tool_result"' in e) + 1
    body = b"".join(events[:at])
    snapshot = _sdk_anthropic(body)
    assert [b.type for b in snapshot.content] == ["server_tool_use", "web_search_tool_result"]
    partial = _partial(body, "anthropic")
    kinds = [b.get("type") for b in _kept_blocks(partial)]
    assert "web_search_tool_result" in kinds, kinds
