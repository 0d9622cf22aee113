"""The peers: how other Python libraries aggregate the same bytes.

Each runner takes the body's chunks and returns an :class:`Outcome`, doing
what that library's users get when they stream:

* ``openai``: openai-python's own SSE decoder, ``construct_type`` of each
  ``ChatCompletionChunk`` (what ``Stream`` yields) and
  ``ChatCompletionStreamState.handle_chunk``; ``get_final_completion()`` at the end.
* ``anthropic``: anthropic-sdk-python's SSE decoder, ``construct_type`` of
  each ``RawMessageStreamEvent`` and ``accumulate_event`` (the snapshot
  ``MessageStream`` keeps; it re-parses a tool's whole input with jiter on
  every ``input_json_delta``).
* ``langchain``: the stdlib limit loop's decoding, one ``AIMessageChunk`` per
  delta (text, ``reasoning_content`` in ``additional_kwargs``,
  ``tool_call_chunks``), merged with ``+`` as ``full = full + chunk``;
  ``full.tool_calls`` at the end. The conversion is written here (no provider
  package), and is lighter than langchain-openai's, which also copies the raw
  tool calls into ``additional_kwargs``.
* ``jiter``: the stdlib limit loop plus a preview of every call's arguments
  after each delta, re-parsing the whole buffer with
  ``jiter.from_json(buf, partial_mode=True)`` as the Anthropic SDK, Vercel's
  AI SDK and LangChain do; final arguments parsed once.

A peer whose package is missing is reported by :data:`MISSING` and skipped.
Packages are imported on first use; :func:`prepare` imports one up front.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
from collections.abc import Callable, Iterable
from typing import Any

from bench.outcome import Outcome

__all__ = [
    "MISSING",
    "prepare",
    "run_anthropic_accumulate",
    "run_jiter_reparse",
    "run_langchain",
    "run_openai_state",
]

_PACKAGES = {
    "openai": "openai",
    "anthropic": "anthropic",
    "langchain": "langchain_core",
    "jiter": "jiter",
}

MISSING: dict[str, str] = {
    peer: f"{module} not installed (pip install -e '.[bench]')"
    for peer, module in _PACKAGES.items()
    if importlib.util.find_spec(module) is None
}
"""Peer name → why it cannot run (its package is not installed)."""


def prepare(peer: str) -> None:
    """Import a peer's package now, so that no timed run pays for the import."""
    importlib.import_module(_PACKAGES[peer])
    {
        "openai": _openai,
        "anthropic": _anthropic,
        "langchain": _langchain,
        "jiter": _jiter,
    }[peer]()


@functools.cache
def _openai() -> Any:
    from openai._models import construct_type
    from openai._streaming import SSEDecoder
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    return construct_type, SSEDecoder, ChatCompletionStreamState, ChatCompletionChunk


@functools.cache
def _anthropic() -> Any:
    from anthropic._models import construct_type
    from anthropic._streaming import SSEDecoder
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import RawMessageStreamEvent

    return construct_type, SSEDecoder, accumulate_event, RawMessageStreamEvent


@functools.cache
def _langchain() -> Any:
    from langchain_core.messages import AIMessageChunk
    from langchain_core.messages.tool import tool_call_chunk

    return AIMessageChunk, tool_call_chunk


@functools.cache
def _jiter() -> Any:
    from jiter import from_json

    return from_json


# ------------------------------------------------------------------- openai


def run_openai_state(chunks: Iterable[bytes], dialect: str) -> Outcome:
    """openai-python: SSE decoder → ``ChatCompletionChunk`` → ``ChatCompletionStreamState``."""
    if dialect != "openai-chat":
        raise ValueError("ChatCompletionStreamState reads OpenAI chat streams only")
    construct_type, decoder, state_class, chunk_type = _openai()
    state: Any = state_class()
    for sse in decoder().iter_bytes(iter(chunks)):
        if sse.data.startswith("[DONE]"):
            break
        state.handle_chunk(construct_type(type_=chunk_type, value=sse.json()))
    message = state.get_final_completion().choices[0].message
    calls = tuple(
        (tc.id, tc.function.name, json.loads(tc.function.arguments or "{}"))
        for tc in message.tool_calls or ()
    )
    reasoning = getattr(message, "reasoning_content", None) or ""
    return Outcome(message.content or "", reasoning, calls)


# ---------------------------------------------------------------- anthropic


def run_anthropic_accumulate(chunks: Iterable[bytes], dialect: str) -> Outcome:
    """anthropic-sdk-python: SSE decoder → ``RawMessageStreamEvent`` → ``accumulate_event``."""
    if dialect != "anthropic":
        raise ValueError("accumulate_event reads Anthropic streams only")
    construct_type, decoder, accumulate_event, event_type = _anthropic()
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for sse in decoder().iter_bytes(iter(chunks)):
        if sse.event in (None, "ping") or not sse.data:
            continue
        event = construct_type(type_=event_type, value=sse.json())
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[tuple[str, str, Any]] = []
    for block in snapshot.content:
        if block.type == "text":
            text.append(block.text)
        elif block.type == "thinking":
            reasoning.append(block.thinking)
        elif block.type == "tool_use":
            calls.append((block.id, block.name, block.input))
    return Outcome("".join(text), "".join(reasoning), tuple(calls))


# ---------------------------------------------------------------- langchain


def _chat_messages(obj: dict[str, Any]) -> Iterable[Any]:
    AIMessageChunk, tool_call_chunk = _langchain()
    for choice in obj["choices"]:
        delta = choice["delta"]
        kwargs: dict[str, Any] = {}
        if delta.get("reasoning_content"):
            kwargs["reasoning_content"] = delta["reasoning_content"]
        chunks = [
            tool_call_chunk(
                name=tc.get("function", {}).get("name"),
                args=tc.get("function", {}).get("arguments"),
                id=tc.get("id"),
                index=tc["index"],
            )
            for tc in delta.get("tool_calls") or ()
        ]
        yield AIMessageChunk(
            content=delta.get("content") or "", additional_kwargs=kwargs, tool_call_chunks=chunks
        )


def _anthropic_messages(obj: dict[str, Any]) -> Iterable[Any]:
    AIMessageChunk, tool_call_chunk = _langchain()
    kind = obj["type"]
    if kind == "content_block_start" and obj["content_block"]["type"] == "tool_use":
        block = obj["content_block"]
        yield AIMessageChunk(
            content="",
            tool_call_chunks=[
                tool_call_chunk(name=block["name"], args="", id=block["id"], index=obj["index"])
            ],
        )
    elif kind == "content_block_delta":
        delta = obj["delta"]
        if delta["type"] == "text_delta":
            yield AIMessageChunk(content=delta["text"])
        elif delta["type"] == "thinking_delta":
            yield AIMessageChunk(
                content="", additional_kwargs={"reasoning_content": delta["thinking"]}
            )
        elif delta["type"] == "input_json_delta":
            yield AIMessageChunk(
                content="",
                tool_call_chunks=[tool_call_chunk(args=delta["partial_json"], index=obj["index"])],
            )


def _payloads(chunks: Iterable[bytes]) -> Iterable[dict[str, Any]]:
    """Decoded ``data:`` payloads, split as the limit loop splits them."""
    buf = b""
    for chunk in chunks:
        buf += chunk
        if b"\n" not in chunk:
            continue
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            if line.startswith(b"data: "):
                if line == b"data: [DONE]":
                    return
                yield json.loads(line[6:])


def run_langchain(chunks: Iterable[bytes], dialect: str) -> Outcome:
    """langchain-core: one ``AIMessageChunk`` per delta, merged with ``+``."""
    to_messages: Callable[[dict[str, Any]], Iterable[Any]] = (
        _chat_messages if dialect == "openai-chat" else _anthropic_messages
    )
    full: Any = None
    for obj in _payloads(chunks):
        for message in to_messages(obj):
            full = message if full is None else full + message
    calls = tuple((tc["id"], tc["name"], tc["args"]) for tc in full.tool_calls)
    reasoning = full.additional_kwargs.get("reasoning_content", "")
    return Outcome(full.content, reasoning, calls)


# -------------------------------------------------------------------- jiter


def _jiter_chat(chunks: Iterable[bytes]) -> Outcome:
    from_json = _jiter()
    buffers: dict[int, bytes] = {}
    previews: dict[int, Any] = {}
    calls: dict[int, list[Any]] = {}
    text: list[str] = []
    reasoning: list[str] = []
    for obj in _payloads(chunks):
        for choice in obj["choices"]:
            delta = choice["delta"]
            if delta.get("content"):
                text.append(delta["content"])
            if delta.get("reasoning_content"):
                reasoning.append(delta["reasoning_content"])
            for tc in delta.get("tool_calls") or ():
                index = tc["index"]
                fn = tc.get("function") or {}
                if index not in calls:
                    calls[index] = [tc.get("id"), fn.get("name")]
                    buffers[index] = b""
                args = fn.get("arguments")
                if args:
                    buf = buffers[index] = buffers[index] + args.encode()
                    previews[index] = from_json(buf, partial_mode=True)
    return Outcome(
        "".join(text),
        "".join(reasoning),
        tuple((c[0], c[1], json.loads(buffers[i] or b"{}")) for i, c in calls.items()),
    )


def _jiter_anthropic(chunks: Iterable[bytes]) -> Outcome:
    from_json = _jiter()
    buffers: dict[int, bytes] = {}
    previews: dict[int, Any] = {}
    calls: dict[int, list[Any]] = {}
    text: list[str] = []
    reasoning: list[str] = []
    for obj in _payloads(chunks):
        kind = obj["type"]
        if kind == "content_block_delta":
            delta = obj["delta"]
            dtype = delta["type"]
            if dtype == "text_delta":
                text.append(delta["text"])
            elif dtype == "thinking_delta":
                reasoning.append(delta["thinking"])
            elif dtype == "input_json_delta" and delta["partial_json"]:
                index = obj["index"]
                buf = buffers[index] = buffers[index] + delta["partial_json"].encode()
                previews[index] = from_json(buf, partial_mode=True)
        elif kind == "content_block_start" and obj["content_block"]["type"] == "tool_use":
            block = obj["content_block"]
            calls[obj["index"]] = [block["id"], block["name"]]
            buffers[obj["index"]] = b""
    return Outcome(
        "".join(text),
        "".join(reasoning),
        tuple((c[0], c[1], json.loads(buffers[i] or b"{}")) for i, c in calls.items()),
    )


def run_jiter_reparse(chunks: Iterable[bytes], dialect: str) -> Outcome:
    """The limit loop plus a jiter partial re-parse of the arguments after every delta."""
    return _jiter_chat(chunks) if dialect == "openai-chat" else _jiter_anthropic(chunks)
