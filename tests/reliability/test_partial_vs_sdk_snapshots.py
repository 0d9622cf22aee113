"""A failed stream's ``err.partial`` knows at least what the provider's SDK snapshot knows.

When a stream fails (the body ends without its terminal marker, an in-band
error event, a malformed event, a dropped connection), ``aggregate()`` raises
a :class:`~rafrx.errors.RafrxError` whose ``.partial`` is the
:class:`~rafrx.response.AgentResponse` built from what was received. A user of
the provider's own SDK would hold, at that moment, its running snapshot:

* OpenAI chat: openai-python's ``ChatCompletionStreamState.current_completion_snapshot``;
* Anthropic: anthropic-sdk-python's ``accumulate_event`` snapshot
  (``MessageStream.current_message_snapshot``);
* OpenAI Responses: openai-python's ``ResponseStreamState`` snapshot (the output
  items as added, and the finished ones ``output_item.done`` gave).

Here every recorded fixture (and generated streams, with hypothesis) is cut at
event boundaries, the same prefix goes to the SDK accumulator and to rafrx
(``from_sse(prefix, dialect).pipe(convert(), aggregate())``), and rafrx must
keep no less: the text, the reasoning, each tool call (id, name, whole
arguments; a cut one as ``ToolCall(complete=False)`` whose raw arguments, or
partial value, cover the SDK's), usage, response id and model, finish reason,
redacted thinking, and the signed thinking / server-tool blocks that ended.
The same prefixes are also followed by an in-band error and by a malformed
event, and a sample goes over HTTP through the clients (``Fault.drop_after``).

rafrx differs in shape by design (a refusal is text, usage sums cache tokens
into the prompt, a call with ``""`` arguments has ``{}``, a provider error's
partial has finish reason ``ERROR``); the comparisons below map those.
Known gaps (chat usage and signed blocks that had not ended when the stream
failed) are reported elsewhere and not asserted here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from anthropic._models import construct_type as anthropic_construct
from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import NOT_GIVEN
from openai._models import construct_type as openai_construct
from openai._streaming import SSEDecoder as OpenAISSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from rafrx import ChatMessage
from rafrx import operators as ops
from rafrx.errors import IncompleteStream, MalformedEvent, ProviderError, RafrxError
from rafrx.json_stream import partial_json
from rafrx.messages import ToolCall
from rafrx.response import AgentResponse, FinishReason
from rafrx.sources import from_sse
from rafrx.testing import Fault, LLMServer, Replay
from tests.reliability._support import CLIENTS, MANIFEST
from tests.sources.test_sdk_differential import (
    anthropic_streams,
    chat_streams,
    responses_streams,
)

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures"
KEY = "sk-partials-0123456789abcdef"
DIALECTS = ("openai-chat", "anthropic", "openai-responses")
BY_DIALECT = {
    dialect: [e["path"] for e in MANIFEST if e["format"] == dialect] for dialect in DIALECTS
}
#: At most this many cut points per fixture (all of them in shorter bodies).
MAX_CUTS = 18

# In-band failures appended after a prefix, per dialect.
ERROR_EVENTS = {
    "openai-chat": b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n',
    "anthropic": b"event: error\ndata: "
    b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n',
    "openai-responses": b"event: error\ndata: "
    b'{"type": "error", "code": "server_error", "message": "boom"}\n\n',
}
MALFORMED_EVENTS = {
    "openai-chat": b'data: {"choices": [\n\n',
    "anthropic": b'event: content_block_delta\ndata: {"type": "content_block_delta", \n\n',
    "openai-responses": b'data: {"type": "response.output_text.delta", \n\n',
}
TAILS = {"cut": dict.fromkeys(DIALECTS, b""), "error": ERROR_EVENTS, "malformed": MALFORMED_EVENTS}

# ------------------------------------------------------------------ bodies and cuts


def events_of(body: bytes) -> list[bytes]:
    """The body's events, each with its blank line (CRLF read as LF)."""
    body = body.replace(b"\r\n", b"\n")
    return [part + b"\n\n" for part in body.split(b"\n\n") if part.strip()]


@cache
def fixture_events(path: str) -> tuple[bytes, ...]:
    return tuple(events_of((FIXTURES / path).read_bytes()))


def cut_points(count: int) -> list[int]:
    """Prefix lengths (in events) to try: all of a short body, else the first and last
    ones and evenly spaced ones between (the ends are where the state is richest)."""
    if count <= MAX_CUTS:
        return list(range(count))
    head, tail = list(range(4)), list(range(count - 8, count))
    step = (count - 12) / (MAX_CUTS - 12)
    middle = [4 + int(i * step) for i in range(MAX_CUTS - 12)]
    return sorted(set(head + middle + tail))


def is_done(event: bytes) -> bool:
    return event.strip().endswith(b"[DONE]")


def rafrx_of(body: bytes, dialect: str) -> tuple[AgentResponse, RafrxError | None]:
    """The response, or the error and its partial."""
    try:
        return from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run(), None
    except RafrxError as err:
        error = err
    partial = error.partial
    assert partial is not None, repr(error)
    assert partial.interrupted
    return partial, error


# ------------------------------------------------------------------ the SDKs' snapshots


class SDKGaveUp(Exception):
    """The SDK's accumulator itself fails on this stream: its user holds nothing."""


def sdk_chat(body: bytes) -> Any:
    """openai-python's running snapshot; None before the first chunk."""
    state: Any = ChatCompletionStreamState()
    seen = False
    for sse in OpenAISSEDecoder().iter_bytes(iter([body])):
        if sse.data.startswith("[DONE]"):
            break
        try:
            data = sse.json()
        except ValueError:
            break  # openai's Stream raises here
        if not isinstance(data, dict) or data.get("error") is not None:
            break  # (an APIError)
        chunk = openai_construct(type_=ChatCompletionChunk, value=data)
        if chunk.object != "chat.completion.chunk":
            continue  # Azure's filter chunks, which ChatCompletionStream skips too
        if any(choice.delta is None for choice in chunk.choices):
            continue  # Azure's content-filter offsets (which the SDK fails on): no content
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (pydantic, on Mistral's content arrays)
            try:
                state.handle_chunk(chunk)
            except (TypeError, AttributeError, IndexError, AssertionError) as exc:
                # (index-less tool calls: Gemini, Ollama, Mistral; Writer's null ids)
                raise SDKGaveUp from exc
        seen = True
    return state.current_completion_snapshot if seen else None


def sdk_anthropic(body: bytes) -> tuple[Any, set[int]]:
    """anthropic-sdk-python's snapshot, and the indices of the blocks that stopped."""
    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    stopped: set[int] = set()
    for sse in AnthropicSSEDecoder().iter_bytes(iter([body])):
        if sse.event in (None, "ping") or not sse.data:
            continue
        if sse.event == "error":
            break  # anthropic's Stream raises here
        try:
            data = sse.json()
        except ValueError:
            break
        event = anthropic_construct(type_=RawMessageStreamEvent, value=data)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
        if event.type == "content_block_stop":
            stopped.add(event.index)
    return snapshot, stopped


def sdk_responses(body: bytes) -> tuple[Any, list[Any]]:
    """openai-python's snapshot and its output items (the finished version where
    ``output_item.done`` came)."""
    state: Any = ResponseStreamState(input_tools=NOT_GIVEN, text_format=NOT_GIVEN)
    refusals: dict[tuple[int, int], str] = {}
    for sse in OpenAISSEDecoder().iter_bytes(iter([body])):
        if sse.data.startswith("[DONE]"):
            break
        try:
            data = sse.json()
        except ValueError:
            break
        if data.get("type") in ("error", "response.failed"):
            break
        list(state.handle_event(openai_construct(type_=ResponseStreamEvent, value=data)))
        if data.get("type") == "response.refusal.delta":
            key = (data["output_index"], data["content_index"])
            refusals[key] = refusals.get(key, "") + data["delta"]
    snapshot = state._ResponseStreamState__current_snapshot
    if snapshot is None:
        return None, []
    finished = dict(state._completed_output)
    # The SDK's snapshot does not gather refusal deltas (only output_text's), so an
    # unfinished refusal part gets them here: rafrx keeps them as text.
    for (index, part_index), refusal in refusals.items():
        item = state._output_items.get(index)
        if index not in finished and item is not None and item.type == "message":
            part = item.content[part_index]
            part.refusal = (part.refusal or "") + refusal
    return snapshot, [finished.get(i, item) for i, item in enumerate(snapshot.output)]


# ------------------------------------------------------------------ "covers"


def covers(ours: Any, theirs: Any) -> bool:
    """``ours`` holds at least ``theirs``: a partial JSON value read from more (or the
    same) input. Strings may go on, lists may be longer, objects have more members."""
    if theirs in (None, {}, [], ""):
        return True
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and all(
            k in ours and covers(ours[k], v) for k, v in theirs.items()
        )
    if isinstance(theirs, list):
        return (
            isinstance(ours, list)
            and len(ours) >= len(theirs)
            and all(covers(a, b) for a, b in zip(ours, theirs, strict=False))
        )
    if isinstance(theirs, str):
        return isinstance(ours, str) and ours.startswith(theirs)
    return bool(ours == theirs)


def check_call(ours: ToolCall, sdk_id: str | None, name: str, raw: str | None, value: Any) -> None:
    """One SDK call against rafrx's: same id and name, and arguments no less complete."""
    if sdk_id:
        assert ours.id == sdk_id
    assert ours.name == name
    if ours.complete:
        if raw is None:
            assert ours.arguments == (value or {})
        elif _whole_json(raw):
            assert ours.arguments == json.loads(raw)
        else:  # whole in rafrx (the provider ended it), still in progress in the SDK's
            assert covers(ours.arguments, _preview(raw)), (ours.arguments, raw)
        return
    if raw is not None:  # the SDK keeps the raw text: rafrx keeps at least as much
        assert (ours.raw_arguments or "").startswith(raw), (ours.raw_arguments, raw)
    else:  # the SDK keeps a partial parse: rafrx's partial value covers it
        assert covers(ours.partial_value, value), (ours.partial_value, value)


def _whole_json(raw: str) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


def _preview(raw: str) -> Any:
    """What ``raw``, a prefix of the arguments, was on its way to (None: nothing yet)."""
    try:
        return partial_json(raw)
    except ValueError:
        return None


def check_finish(ours: AgentResponse, error: RafrxError | None, sdk_reason: str | None) -> None:
    if error is None:
        assert sdk_reason is not None
        assert ours.finish_reason == FinishReason.from_provider(sdk_reason)
    elif isinstance(error, ProviderError):
        assert ours.finish_reason in (FinishReason.ERROR, None)  # (DESIGN: ERROR for a provider's)
    else:
        assert ours.finish_reason in (None, FinishReason.from_provider(sdk_reason))


def kept_blocks(ours: AgentResponse) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in ours.turn_transcript:
        for blocks in (message.provider_data or {}).values():
            for block in blocks if isinstance(blocks, list | tuple) else (blocks,):
                if isinstance(block, dict):
                    out.append(block)
    return out


# ------------------------------------------------------------------ per-dialect checks


def check_chat(body: bytes, ours: AgentResponse, error: RafrxError | None) -> None:
    try:
        snapshot = sdk_chat(body)
    except SDKGaveUp:
        return
    if snapshot is None:
        assert ours.text == ""
        assert not ours.tool_calls
        return
    if snapshot.id:
        assert ours.id == snapshot.id
    if snapshot.model:
        assert ours.model == snapshot.model
    if not snapshot.choices:
        return
    choice = snapshot.choices[0]
    message = choice.message
    if isinstance(message.content, str) or message.content is None:
        # (rafrx reads a refusal as text: openai_chat.py's docstring)
        assert ours.text == (message.content or "") + (message.refusal or "")
    extra = message.to_dict()
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        assert ours.reasoning_text == reasoning
    sdk_calls = message.tool_calls or []
    assert len(ours.tool_calls) == len(sdk_calls)
    for mine, theirs in zip(ours.tool_calls, sdk_calls, strict=True):
        check_call(mine, theirs.id, theirs.function.name, theirs.function.arguments or "", None)
    if error is None:
        check_finish(ours, error, choice.finish_reason)
        if snapshot.usage is not None:
            assert ours.usage is not None
            assert ours.usage.total_tokens == snapshot.usage.total_tokens
    elif choice.finish_reason is not None:
        check_finish(ours, error, choice.finish_reason)


def check_anthropic(body: bytes, ours: AgentResponse, error: RafrxError | None) -> None:
    snapshot, stopped = sdk_anthropic(body)
    if snapshot is None:
        assert ours.text == ""
        assert ours.usage is None
        return
    assert (ours.id, ours.model) == (snapshot.id, snapshot.model)
    blocks = snapshot.content
    assert ours.text == "".join(b.text for b in blocks if b.type == "text")
    thinking = "".join(b.thinking for b in blocks if b.type == "thinking")
    assert (ours.reasoning_text or "") == thinking
    calls = [b for b in blocks if b.type == "tool_use"]
    assert len(ours.tool_calls) == len(calls)
    for mine, theirs in zip(ours.tool_calls, calls, strict=True):
        check_call(mine, theirs.id, theirs.name, None, theirs.input)
    # Usage: what the SDK counted (message_start's, message_delta's), always (salvage()).
    usage = snapshot.usage
    prompt = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    assert ours.usage is not None
    assert (ours.usage.prompt_tokens, ours.usage.completion_tokens) == (prompt, usage.output_tokens)
    assert ours.usage.cached_tokens == usage.cache_read_input_tokens
    if error is None or snapshot.stop_reason is not None:
        check_finish(ours, error, snapshot.stop_reason)
    # The blocks to send back: redacted thinking (whole at its start), and the signed
    # thinking and server tools' blocks that ended.
    kept = kept_blocks(ours)
    for index, block in enumerate(blocks):
        if block.type == "redacted_thinking":
            assert {"type": "redacted_thinking", "data": block.data} in kept
        elif block.type == "thinking" and index in stopped:
            assert {
                "type": "thinking",
                "thinking": block.thinking,
                "signature": block.signature,
            } in kept
        elif block.type not in ("text", "tool_use", "thinking") and index in stopped:
            key = getattr(block, "id", None) or getattr(block, "tool_use_id", None)
            assert any(
                k.get("type") == block.type and key in (k.get("id"), k.get("tool_use_id"))
                for k in kept
            ), (block.type, key)


def check_responses(body: bytes, ours: AgentResponse, error: RafrxError | None) -> None:
    snapshot, items = sdk_responses(body)
    if snapshot is None:
        assert ours.text == ""
        assert not ours.tool_calls
        return
    assert ours.id == snapshot.id
    if snapshot.model:
        assert ours.model == snapshot.model
    text, reasoning, calls = [], [], []
    for item in items:
        if item.type == "message":
            for part in item.content:
                text.append(part.text if part.type == "output_text" else part.refusal)
        elif item.type == "reasoning":
            reasoning += [s.text for s in item.summary or ()]
            reasoning += [c.text for c in getattr(item, "content", None) or ()]
        elif item.type == "function_call":
            calls.append(item)
    # The SDK's in-progress snapshot does not gather reasoning deltas (only finished
    # items'), so rafrx's reasoning covers it; the text is gathered by both.
    assert ours.text == "".join(text)
    assert (ours.reasoning_text or "").startswith("".join(reasoning)) or not reasoning
    assert len(ours.tool_calls) == len(calls)
    for mine, theirs in zip(ours.tool_calls, calls, strict=True):
        check_call(mine, theirs.call_id, theirs.name, theirs.arguments or "", None)
    kept = kept_blocks(ours)
    finished = set(_finished_ids(body))
    for item in items:
        if item.type == "reasoning" and item.id in finished:
            mine = [k for k in kept if k.get("type") == "reasoning" and k.get("id") == item.id]
            assert len(mine) == 1
            assert mine[0].get("encrypted_content") == getattr(item, "encrypted_content", None)


def _finished_ids(body: bytes) -> list[str]:
    out = []
    for event in events_of(body):
        for line in event.decode("utf-8", "replace").split("\n"):
            if line.startswith("data:") and '"response.output_item.done"' in line:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    out.append(json.loads(line[5:])["item"]["id"])
    return out


CHECKS: dict[str, Callable[[bytes, AgentResponse, RafrxError | None], None]] = {
    "openai-chat": check_chat,
    "anthropic": check_anthropic,
    "openai-responses": check_responses,
}


def check_prefix(events: tuple[bytes, ...] | list[bytes], k: int, dialect: str, tail: str) -> None:
    """Cut after ``k`` events (then the tail), and compare both sides."""
    head = b"".join(events[:k])
    body = head + TAILS[tail][dialect]
    ours, error = rafrx_of(body, dialect)
    if tail != "cut" and isinstance(rafrx_of(head, dialect)[1], IncompleteStream):
        # (the prefix itself neither ended nor failed: the tail is what fails it)
        assert isinstance(error, ProviderError if tail == "error" else MalformedEvent)
    CHECKS[dialect](head, ours, error)


# ------------------------------------------------------------------ fixtures, cut


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("tail", ["cut", "error", "malformed"])
def test_every_fixture_cut_at_event_boundaries_keeps_what_the_sdk_keeps(
    dialect: str, tail: str
) -> None:
    for path in BY_DIALECT[dialect]:
        events = fixture_events(path)
        for k in cut_points(len(events)):
            if tail != "cut" and any(is_done(e) for e in events[:k]):
                continue  # the stream ended: what follows is not read
            try:
                check_prefix(events, k, dialect, tail)
            except AssertionError as exc:
                raise AssertionError(f"{path} cut after {k} events ({tail})") from exc


@pytest.mark.parametrize(
    "path",
    [
        "anthropic/anthropic-thinking-tool-use.sse",
        "anthropic/anthropic-max-tokens-truncated-tool-json.sse",
        "openai-chat/openai-parallel-tool-calls.sse",
        "openai-responses/responses-parallel-function-calls.sse",
    ],
)
def test_cuts_inside_events_keep_what_came_before_them(path: str) -> None:
    """A cut inside an event (its bytes half sent) is the cut before it, for both."""
    events = fixture_events(path)
    dialect = next(e["format"] for e in MANIFEST if e["path"] == path)
    for k in cut_points(len(events) - 1):
        whole = b"".join(events[:k])
        for fraction in (1, 3, 2):
            half = events[k][: max(1, len(events[k]) * fraction // 4)]
            ours, error = rafrx_of(whole + half, dialect)
            CHECKS[dialect](whole, ours, error)


def test_the_fixture_sweep_sees_every_kind_of_state() -> None:
    """The sweep is not vacuous: some of its prefixes hold cut calls of each dialect,
    signed thinking, redacted thinking, a server tool's blocks and usage."""
    seen: set[str] = set()
    for dialect in DIALECTS:
        for path in BY_DIALECT[dialect]:
            events = fixture_events(path)
            for k in cut_points(len(events)):
                ours, error = rafrx_of(b"".join(events[:k]), dialect)
                if error is None:
                    continue
                if any(not c.complete for c in ours.tool_calls):
                    seen.add(f"cut-call:{dialect}")
                if ours.usage is not None:
                    seen.add(f"usage:{dialect}")
                for block in kept_blocks(ours):
                    seen.add(f"block:{block.get('type')}")
    assert {f"cut-call:{d}" for d in DIALECTS} <= seen
    assert "usage:anthropic" in seen
    assert {"block:thinking", "block:redacted_thinking", "block:server_tool_use"} <= seen
    assert "block:reasoning" in seen


# ------------------------------------------------------------------ pinned cases


def test_an_anthropic_tool_call_cut_by_the_drop_keeps_more_than_the_sdk() -> None:
    """anthropic-sdk-python parses the cut input with jiter's partial mode, which drops
    the unfinished string; rafrx's ``partial_value`` keeps it, and the raw text."""
    events = fixture_events("anthropic/anthropic-max-tokens-truncated-tool-json.sse")
    k = max(i for i, e in enumerate(events) if b"input_json_delta" in e) + 1
    body = b"".join(events[:k])
    snapshot, _ = sdk_anthropic(body)
    [theirs] = [b for b in snapshot.content if b.type == "tool_use"]
    ours, error = rafrx_of(body, "anthropic")
    assert error is not None
    [call] = ours.tool_calls
    assert not call.complete
    assert (call.id, call.name) == (theirs.id, theirs.name)
    assert covers(call.partial_value, theirs.input)
    assert call.partial_value != theirs.input  # strictly more: the unfinished line
    assert json.loads(json.dumps(theirs.input))["filename"] == call.partial_value["filename"]


def test_a_chat_call_cut_mid_arguments_has_the_sdks_raw_arguments() -> None:
    events = fixture_events("openai-chat/openai-parallel-tool-calls.sse")
    k = max(i for i, e in enumerate(events) if b'"arguments"' in e)  # before the last piece
    body = b"".join(events[:k])
    snapshot = sdk_chat(body)
    ours, error = rafrx_of(body, "openai-chat")
    assert error is not None
    theirs = snapshot.choices[0].message.tool_calls
    assert [c.id for c in ours.tool_calls] == [c.id for c in theirs]
    assert [c.raw_arguments if not c.complete else None for c in ours.tool_calls][-1] == (
        theirs[-1].function.arguments
    )
    assert not ours.tool_calls[-1].complete


def test_an_anthropic_error_after_message_delta_keeps_its_usage() -> None:
    """Usage that ``message_delta`` raised (output tokens) is in the partial of an
    error that follows, as in the SDK's snapshot."""
    events = fixture_events("anthropic/anthropic-parallel-tool-use.sse")
    k = next(i for i, e in enumerate(events) if b"message_delta" in e) + 1
    body = b"".join(events[:k])
    snapshot, _ = sdk_anthropic(body)
    ours, error = rafrx_of(body + ERROR_EVENTS["anthropic"], "anthropic")
    assert isinstance(error, ProviderError)
    assert ours.usage is not None
    assert ours.usage.completion_tokens == snapshot.usage.output_tokens > 1
    assert ours.finish_reason == FinishReason.ERROR  # (DESIGN: a provider's error event)


def test_a_responses_function_call_ended_before_the_drop_is_kept_whole() -> None:
    """An ended call whose response then failed is kept complete, with its parsed
    arguments (never run: no result), where the SDK holds it as an in-progress item."""
    events = fixture_events("openai-responses/responses-function-call.sse")
    k = next(i for i, e in enumerate(events) if b"function_call_arguments.done" in e) + 1
    body = b"".join(events[:k])
    _, items = sdk_responses(body)
    [theirs] = [i for i in items if i.type == "function_call"]
    ours, error = rafrx_of(body, "openai-responses")
    assert error is not None
    [call] = ours.tool_calls
    assert (call.id, call.name, call.complete) == (theirs.call_id, theirs.name, True)
    assert call.arguments == json.loads(theirs.arguments)
    assert call.error is None
    assert ours.tool_messages == ()


# ------------------------------------------------------------------ generated streams

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PLANS = {
    "openai-chat": chat_streams,
    "anthropic": anthropic_streams,
    "openai-responses": responses_streams,
}


@pytest.mark.parametrize("dialect", DIALECTS)
@SETTINGS
@given(data=st.data())
def test_generated_streams_cut_anywhere_keep_what_the_sdk_keeps(
    dialect: str, data: st.DataObject
) -> None:
    plan = data.draw(PLANS[dialect](), label="plan")
    events = events_of(plan.body)
    k = data.draw(st.integers(0, len(events) - 1), label="events kept")
    tail = data.draw(st.sampled_from(sorted(TAILS)), label="tail")
    check_prefix(events, k, dialect, tail)


# ------------------------------------------------------------------ over HTTP

HTTP_SAMPLE = [
    ("openai-chat/openai-parallel-tool-calls.sse", 0.6),
    ("openai-chat/deepseek-reasoning-tools.sse", 0.9),
    ("anthropic/anthropic-thinking-tool-use.sse", 0.8),
    ("anthropic/anthropic-redacted-thinking.sse", 0.5),
    ("openai-responses/responses-reasoning-summary-tool.sse", 0.7),
    ("openai-responses/responses-parallel-function-calls.sse", 0.5),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "where"), HTTP_SAMPLE)
@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
async def test_a_dropped_connection_keeps_what_the_sdk_keeps(
    llm_server: LLMServer, path: str, where: float, reset: bool
) -> None:
    events = fixture_events(path)
    dialect = next(e["format"] for e in MANIFEST if e["path"] == path)
    k = int(len(events) * where)
    body = b"".join(events)
    head = b"".join(events[:k])
    llm_server.enqueue(Fault.drop_after(len(head), body=Replay(body), reset=reset))
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    async with CLIENTS[dialect](llm_server.url, KEY, model="m") as client:
        client.stream([ChatMessage.user("Hi")]).pipe(ops.convert(), ops.aggregate()).subscribe(
            done.set_result, done.set_result
        )
        error = await asyncio.wait_for(done, 10)
    assert isinstance(error, RafrxError), error
    assert error.partial is not None
    CHECKS[dialect](head, error.partial, error)
    # And the partial is the one from_sse makes of the same bytes.
    offline, _ = rafrx_of(head, dialect)
    assert (error.partial.text, error.partial.reasoning_text, error.partial.usage) == (
        offline.text,
        offline.reasoning_text,
        offline.usage,
    )
    assert error.partial.tool_calls == offline.tool_calls
    await llm_server.wait_connections_closed()
