"""The CPython limit: the least work a correct client can do in pure Python.

A hand-written loop per wire format: split the SSE body into lines, decode
each ``data:`` payload once (``json.loads``, or ``orjson.loads`` for the
variant), append text and argument fragments to lists, join them and parse
each call's arguments once at the end. No events, no objects, no partial
parsing: any library that does more per chunk is measured against this.

Example:
    >>> body = b'data: {"choices":[{"delta":{"content":"Hi"}}]}\\n\\ndata: [DONE]\\n\\n'
    >>> limit_openai_chat([body[:10], body[10:]])
    Outcome(text='Hi', reasoning='', tool_calls=())
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from bench.outcome import Outcome

__all__ = ["limit_anthropic", "limit_openai_chat"]

Loads = Callable[[bytes], Any]


def limit_openai_chat(chunks: Iterable[bytes], loads: Loads = json.loads) -> Outcome:
    """OpenAI chat (and DeepSeek ``reasoning_content``) body → :class:`Outcome`."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, list[Any]] = {}  # index -> [id, name, argument fragments]
    buf = b""
    for chunk in chunks:
        buf += chunk
        if b"\n" not in chunk:
            continue
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                break
            for choice in loads(payload)["choices"]:
                delta = choice["delta"]
                content = delta.get("content")
                if content:
                    text.append(content)
                thought = delta.get("reasoning_content")
                if thought:
                    reasoning.append(thought)
                tool_calls = delta.get("tool_calls")
                if tool_calls:
                    for tc in tool_calls:
                        fn = tc.get("function") or {}
                        call = calls.get(tc["index"])
                        if call is None:
                            call = calls[tc["index"]] = [tc.get("id"), fn.get("name"), []]
                        args = fn.get("arguments")
                        if args:
                            call[2].append(args)
    return Outcome(
        "".join(text),
        "".join(reasoning),
        tuple((c[0], c[1], loads("".join(c[2]).encode() or b"{}")) for c in calls.values()),
    )


def limit_anthropic(chunks: Iterable[bytes], loads: Loads = json.loads) -> Outcome:
    """Anthropic Messages API body → :class:`Outcome` (``event:`` lines skipped)."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, list[Any]] = {}  # block index -> [id, name, argument fragments]
    buf = b""
    for chunk in chunks:
        buf += chunk
        if b"\n" not in chunk:
            continue
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            if not line.startswith(b"data: "):
                continue
            obj = loads(line[6:])
            kind = obj["type"]
            if kind == "content_block_delta":
                delta = obj["delta"]
                dtype = delta["type"]
                if dtype == "text_delta":
                    text.append(delta["text"])
                elif dtype == "input_json_delta":
                    calls[obj["index"]][2].append(delta["partial_json"])
                elif dtype == "thinking_delta":
                    reasoning.append(delta["thinking"])
            elif kind == "content_block_start":
                block = obj["content_block"]
                if block["type"] == "tool_use":
                    calls[obj["index"]] = [block["id"], block["name"], []]
    return Outcome(
        "".join(text),
        "".join(reasoning),
        tuple((c[0], c[1], loads("".join(c[2]).encode() or b"{}")) for c in calls.values()),
    )
