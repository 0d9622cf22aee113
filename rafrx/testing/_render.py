"""Render a :class:`~rafrx.testing.Reply` as the SSE body a real provider would send.

Example:
    >>> import json
    >>> from rafrx.testing import Reply
    >>> body = render(Reply(text="Hi!", chunk_size=2), "openai-chat")
    >>> chunks = [json.loads(e[6:]) for e in body.split(b"\\n\\n") if e.startswith(b"data: {")]
    >>> [c["choices"][0]["delta"].get("content") for c in chunks]
    ['', 'Hi', '!', None]
    >>> body.endswith(b"data: [DONE]\\n\\n")
    True
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal, TypeAlias

from rafrx.response import FinishReason, Usage
from rafrx.testing._responses import Reply, ToolCallSpec

__all__ = [
    "WIRE_FORMATS",
    "WireFormat",
    "error_body",
    "estimate_usage",
    "render",
    "render_events",
]

WireFormat: TypeAlias = Literal["openai-chat", "anthropic", "openai-responses"]

#: The wire formats, by the endpoint path that speaks them.
WIRE_FORMATS: Mapping[str, WireFormat] = {
    "/v1/chat/completions": "openai-chat",
    "/v1/messages": "anthropic",
    "/v1/responses": "openai-responses",
}

#: Chat ``finish_reason`` values. ``"error"`` is not one OpenAI sends but one
#: OpenAI-compatible servers do (OpenRouter, vLLM …); ``"other"`` is a value
#: no provider documents, to probe how a client takes an unknown one.
_OPENAI_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.ERROR: "error",
    FinishReason.OTHER: "other",
}
#: Anthropic ``stop_reason`` values (``"other"``: an unknown one, as a probe).
#: ``ERROR`` has none: Anthropic ends a failing stream with an ``error`` event.
_ANTHROPIC_STOP = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
    FinishReason.OTHER: "other",
}
#: The provider spellings of a reply's ``finish`` that each format sends as spelled
#: (the others go as the reason they mean). Chat's are those of OpenAI-compatible
#: servers (Zhipu's ``sensitive``, vLLM's ``abort`` …); Responses has none of its own.
_CHAT_SPELLINGS: Final = frozenset(
    {
        "function_call",
        "eos",
        "eos_token",
        "max_tokens",
        "model_length",
        "sensitive",
        "insufficient_system_resource",
        "network_error",
        "abort",
    }
)
_ANTHROPIC_SPELLINGS: Final = frozenset(
    {
        "end_turn",
        "stop_sequence",
        "pause_turn",
        "tool_use",
        "max_tokens",
        "model_context_window_exceeded",
        "refusal",
    }
)
#: The ``error`` event ending an Anthropic stream that failed mid-way.
_ANTHROPIC_STREAM_ERROR = {"type": "api_error", "message": "Internal server error"}
_RESPONSES_INCOMPLETE = {
    FinishReason.LENGTH: "max_output_tokens",
    FinishReason.CONTENT_FILTER: "content_filter",
}


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if not text.isascii() and _SURROGATE.search(text):  # no UTF-8 form: as \ud83d escapes
        return json.dumps(value, separators=(",", ":"))
    return text


def _data(payload: Any) -> bytes:
    return f"data: {_dumps(payload)}\n\n".encode()


def _event(name: str, payload: Any) -> bytes:
    return f"event: {name}\ndata: {_dumps(payload)}\n\n".encode()


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _hex(n: int = 24) -> str:
    return uuid.uuid4().hex[:n]


def estimate_usage(reply: Reply, request: Mapping[str, Any] | None = None) -> Usage:
    """The usage a reply reports: its own ``usage``, else an estimate.

    The estimate counts about four characters a token: the request's
    messages, system prompt, input and tools for the prompt; text, arguments
    and reasoning for the completion (reasoning also as ``reasoning_tokens``).

    Example:
        >>> estimate_usage(Reply(text="12345678"), {"messages": []}).completion_tokens
        2
    """
    if reply.usage is not None:
        return reply.usage
    request = request or {}
    prompt_parts = [
        request.get(key) for key in ("system", "instructions", "messages", "input", "tools")
    ]
    prompt = max(1, _tokens(_dumps([p for p in prompt_parts if p is not None])))
    reasoning = _tokens(reply.reasoning)
    completion = (
        _tokens(reply.text)
        + sum(_tokens(call.name + call.arguments_json()) for call in reply.tool_calls)
        + reasoning
    )
    completion = max(1, completion)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        reasoning_tokens=reasoning if reply.reasoning else None,
    )


def render(
    reply: Reply, wire_format: WireFormat, request: Mapping[str, Any] | None = None
) -> bytes:
    """The whole SSE body of ``reply`` in ``wire_format``.

    Args:
        reply: What to say.
        wire_format: ``"openai-chat"``, ``"anthropic"`` or ``"openai-responses"``.
        request: The request's JSON, for the model name, the prompt-token
            estimate and OpenAI's ``stream_options.include_usage``.

    Example:
        Anthropic's ``input_tokens`` leave out the tokens read from the cache:

        >>> usage = Usage(prompt_tokens=100, completion_tokens=10, total_tokens=110,
        ...               cached_tokens=40)
        >>> start = render(Reply(usage=usage), "anthropic").split(b"\\n")[1]
        >>> json.loads(start[len(b"data: "):])["message"]["usage"]
        {'input_tokens': 60, 'output_tokens': 1, 'cache_read_input_tokens': 40}
    """
    return b"".join(render_events(reply, wire_format, request))


def render_events(
    reply: Reply, wire_format: WireFormat, request: Mapping[str, Any] | None = None
) -> list[bytes]:
    """The SSE body of ``reply`` as a list of events, each ending in a blank line."""
    request = request or {}
    model = reply.model or str(request.get("model") or "rafrx-test-model")
    usage = estimate_usage(reply, request)
    if wire_format == "openai-chat":
        options = request.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        return list(_openai_chat(reply, model, usage, include_usage))
    if wire_format == "anthropic":
        return list(_anthropic(reply, model, usage, request))
    if wire_format == "openai-responses":
        return list(_responses(reply, model, usage, request))
    raise ValueError(f"unknown wire format {wire_format!r}")


def _spelled(reply: Reply, spellings: frozenset[str], table: Mapping[FinishReason, str]) -> str:
    """How a format says why ``reply`` stopped: its provider spelling when the format
    has it (``spellings``), else the format's word for the reason (``table``)."""
    if isinstance(reply.finish, str) and reply.finish in spellings:
        return reply.finish
    return table[reply.finish_reason]


def _call_id(call: ToolCallSpec, prefix: str) -> str:
    return call.id if call.id is not None else f"{prefix}{_hex()}"


# ------------------------------------------------------------------ OpenAI chat


def _openai_usage(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
    if usage.reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return out


def _openai_chat(reply: Reply, model: str, usage: Usage, include_usage: bool) -> Iterator[bytes]:
    base: dict[str, Any] = {
        "id": f"chatcmpl-{_hex()}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_rafrx",
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _data({**base, "choices": [choice]})

    size = reply.chunk_size
    # OpenAI opens a tool-call-only message with content null, a text one with "".
    content = None if reply.tool_calls and not reply.text else ""
    yield chunk({"role": "assistant", "content": content, "refusal": None})
    for piece in _pieces(reply.reasoning, size):
        yield chunk({"reasoning_content": piece})
    for piece in _pieces(reply.text, size):
        yield chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        head = {
            "index": index,
            "id": _call_id(call, "call_"),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        yield chunk({"tool_calls": [head]})
        for piece in _pieces(call.arguments_json(), size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, _spelled(reply, _CHAT_SPELLINGS, _OPENAI_FINISH))
    if include_usage:
        yield _data({**base, "choices": [], "usage": _openai_usage(usage)})
    yield b"data: [DONE]\n\n"


# ------------------------------------------------------------------ Anthropic


def _anthropic(
    reply: Reply, model: str, usage: Usage, request: Mapping[str, Any]
) -> Iterator[bytes]:
    start_usage: dict[str, Any] = {"input_tokens": usage.prompt_tokens, "output_tokens": 1}
    if usage.cached_tokens is not None:
        # Anthropic's input_tokens leave out the tokens read from the cache.
        start_usage["input_tokens"] = max(0, usage.prompt_tokens - usage.cached_tokens)
        start_usage["cache_read_input_tokens"] = usage.cached_tokens
    message: dict[str, Any] = {
        "id": f"msg_{_hex()}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    yield _event("message_start", {"type": "message_start", "message": message})
    blocks = list(_anthropic_blocks(reply))
    # Anthropic's ping comes right after the first content_block_start (if any).
    yield from blocks[:1]
    yield _event("ping", {"type": "ping"})
    yield from blocks[1:]
    yield from _anthropic_end(reply, usage, request)


def _anthropic_blocks(reply: Reply) -> Iterator[bytes]:
    """The content block events of ``reply``: thinking, text, then ``tool_use`` blocks."""
    size = reply.chunk_size
    index = 0

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> Iterator[bytes]:
        yield _event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        for delta in deltas:
            yield _event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})

    if reply.reasoning:
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(reply.reasoning, size)]
        deltas.append({"type": "signature_delta", "signature": f"sig_{_hex(32)}"})
        yield from block({"type": "thinking", "thinking": "", "signature": ""}, deltas)
        index += 1
    if reply.text:
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(reply.text, size)]
        yield from block({"type": "text", "text": ""}, deltas)
        index += 1
    for call in reply.tool_calls:
        start = {"type": "tool_use", "id": _call_id(call, "toolu_"), "name": call.name, "input": {}}
        # Anthropic opens a tool_use block's input with an empty piece.
        deltas = [
            {"type": "input_json_delta", "partial_json": p}
            for p in ("", *_pieces(_anthropic_input(call), size))
        ]
        yield from block(start, deltas)
        index += 1


def _anthropic_input(call: ToolCallSpec) -> str:
    """The input JSON a ``tool_use`` block streams: none for empty arguments, as
    Anthropic sends (its pieces build no ``{}``), else the arguments' JSON."""
    if isinstance(call.arguments, Mapping) and not call.arguments:
        return ""
    return call.arguments_json()


def _matched_stop_sequence(reply: Reply, request: Mapping[str, Any]) -> str | None:
    """The ``stop_sequence`` of Anthropic's ``message_delta``: ``None`` unless the
    reply stopped at one; then the reply's, else the first of the request's."""
    if reply.finish != "stop_sequence":
        return None
    if reply.stop_sequence is not None:
        return reply.stop_sequence
    asked = request.get("stop_sequences")
    if not isinstance(asked, list):
        return None
    return next((sequence for sequence in asked if isinstance(sequence, str)), None)


def _anthropic_end(reply: Reply, usage: Usage, request: Mapping[str, Any]) -> Iterator[bytes]:
    """``message_delta`` and ``message_stop``, or the ``error`` event of a failure."""
    if reply.finish_reason is FinishReason.ERROR:
        yield _event("error", {"type": "error", "error": _ANTHROPIC_STREAM_ERROR})
        return
    stop_reason = _spelled(reply, _ANTHROPIC_SPELLINGS, _ANTHROPIC_STOP)
    stop_sequence = _matched_stop_sequence(reply, request)
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": {"output_tokens": usage.completion_tokens},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})


# ------------------------------------------------------------------ Responses


def _responses_usage(usage: Usage) -> dict[str, Any]:
    """Responses usage; OpenAI always sends both details (0 when there are none)."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cache_write_tokens": 0,
            "cached_tokens": usage.cached_tokens or 0,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.total_tokens,
    }


class _ResponsesWriter:
    """Numbers the events (``sequence_number``) and keeps the finished items."""

    def __init__(self) -> None:
        self.sequence = 0
        self.output: list[dict[str, Any]] = []

    def event(self, name: str, **fields: Any) -> bytes:
        payload = {"type": name, **fields, "sequence_number": self.sequence}
        self.sequence += 1
        return _event(name, payload)


def _response_object(model: str, request: Mapping[str, Any]) -> dict[str, Any]:
    """The Response object of ``response.created``; it echoes the request's
    ``tools`` (as sent) and ``tool_choice`` (``"auto"`` by default), as OpenAI's does."""
    tools = request.get("tools")
    return {
        "id": f"resp_{_hex(32)}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": tools if isinstance(tools, list) else [],
        "usage": None,
    }


def _responses(
    reply: Reply, model: str, usage: Usage, request: Mapping[str, Any]
) -> Iterator[bytes]:
    out = _ResponsesWriter()
    response = _response_object(model, request)
    yield out.event("response.created", response=response)
    yield out.event("response.in_progress", response=response)
    size = reply.chunk_size
    if reply.reasoning:
        yield from _responses_reasoning(out, reply.reasoning, size)
    if reply.text:
        yield from _responses_message(out, reply.text, size)
    for call in reply.tool_calls:
        yield from _responses_call(out, call, size)
    final = {**response, "output": out.output, "usage": _responses_usage(usage)}
    finish = reply.finish_reason
    if finish is FinishReason.ERROR:
        error = {"code": "server_error", "message": "The model failed to finish."}
        yield out.event("response.failed", response={**final, "status": "failed", "error": error})
    elif finish in _RESPONSES_INCOMPLETE:
        details = {"reason": _RESPONSES_INCOMPLETE[finish]}
        yield out.event(
            "response.incomplete",
            response={**final, "status": "incomplete", "incomplete_details": details},
        )
    else:
        yield out.event("response.completed", response={**final, "status": "completed"})


def _responses_reasoning(out: _ResponsesWriter, text: str, size: int) -> Iterator[bytes]:
    index = len(out.output)
    item_id = f"rs_{_hex(32)}"
    yield out.event(
        "response.output_item.added",
        output_index=index,
        item={"id": item_id, "type": "reasoning", "summary": []},
    )
    part = {"type": "summary_text", "text": ""}
    where = {"item_id": item_id, "output_index": index, "summary_index": 0}
    yield out.event("response.reasoning_summary_part.added", **where, part=part)
    for piece in _pieces(text, size):
        yield out.event("response.reasoning_summary_text.delta", **where, delta=piece)
    yield out.event("response.reasoning_summary_text.done", **where, text=text)
    done_part = {"type": "summary_text", "text": text}
    yield out.event("response.reasoning_summary_part.done", **where, part=done_part)
    item = {"id": item_id, "type": "reasoning", "summary": [done_part]}
    out.output.append(item)
    yield out.event("response.output_item.done", output_index=index, item=item)


def _responses_message(out: _ResponsesWriter, text: str, size: int) -> Iterator[bytes]:
    index = len(out.output)
    item_id = f"msg_{_hex(32)}"
    item: dict[str, Any] = {
        "id": item_id,
        "type": "message",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    yield out.event("response.output_item.added", output_index=index, item=item)
    where = {"item_id": item_id, "output_index": index, "content_index": 0}
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    yield out.event("response.content_part.added", **where, part=part)
    for piece in _pieces(text, size):
        yield out.event("response.output_text.delta", **where, delta=piece, logprobs=[])
    yield out.event("response.output_text.done", **where, text=text, logprobs=[])
    done_part = {**part, "text": text}
    yield out.event("response.content_part.done", **where, part=done_part)
    done = {**item, "status": "completed", "content": [done_part]}
    out.output.append(done)
    yield out.event("response.output_item.done", output_index=index, item=done)


def _responses_call(out: _ResponsesWriter, call: ToolCallSpec, size: int) -> Iterator[bytes]:
    index = len(out.output)
    item_id = f"fc_{_hex(32)}"
    arguments = call.arguments_json()
    item = {
        "id": item_id,
        "type": "function_call",
        "status": "in_progress",
        "arguments": "",
        "call_id": _call_id(call, "call_"),
        "name": call.name,
    }
    yield out.event("response.output_item.added", output_index=index, item=item)
    for piece in _pieces(arguments, size):
        yield out.event(
            "response.function_call_arguments.delta",
            item_id=item_id,
            output_index=index,
            delta=piece,
        )
    yield out.event(
        "response.function_call_arguments.done",
        item_id=item_id,
        output_index=index,
        arguments=arguments,
    )
    done = {**item, "status": "completed", "arguments": arguments}
    out.output.append(done)
    yield out.event("response.output_item.done", output_index=index, item=done)


# ------------------------------------------------------------------ errors


def error_body(
    wire_format: WireFormat,
    status: int,
    message: str,
    error_type: str | None = None,
    *,
    request_id: str | None = None,
) -> dict[str, Any]:
    """The JSON error body a provider sends with an HTTP error status.

    Anthropic's is ``{"type": "error", "error": {"type", "message"},
    "request_id"}`` (the id of its ``request-id`` header; left out when
    ``request_id`` is ``None``); OpenAI's (chat and Responses) ``{"error":
    {"message", "type", "param", "code"}}`` with the type and code OpenAI
    pairs with the status (401 ``invalid_api_key``, 404 ``model_not_found``, 429
    ``rate_limit_exceeded``, else ``null``). ``error_type`` replaces the type.

    Example:
        >>> error_body("anthropic", 529, "Overloaded", request_id="req_1")
        {'type': 'error', 'error': {'type': 'overloaded_error', 'message': 'Overloaded'}, \
'request_id': 'req_1'}
        >>> error = error_body("openai-chat", 429, "Rate limit reached")["error"]
        >>> error["type"], error["code"]
        ('requests', 'rate_limit_exceeded')
    """
    if wire_format == "anthropic":
        kind = error_type or _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
        if request_id is not None:
            body["request_id"] = request_id
        return body
    kind, code = _OPENAI_ERRORS.get(status, ("server_error", None))
    return {"error": {"message": message, "type": error_type or kind, "param": None, "code": code}}


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    402: "billing_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
#: OpenAI's error ``type`` and ``code`` by status (a 429's type says which
#: limit was hit: ``requests`` or ``tokens``).
_OPENAI_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}
