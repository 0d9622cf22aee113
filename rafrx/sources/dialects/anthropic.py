"""The Anthropic Messages stream dialect.

* ``message_start`` → :class:`~rafrx.updates.ResponseMetadata`; its usage
  (input and cache tokens) is remembered.
* Text blocks → :class:`~rafrx.updates.TextDelta`; ``citations_delta`` →
  :class:`~rafrx.updates.Uri`.
* Thinking blocks → :class:`~rafrx.updates.ReasoningDelta` per delta, then, at
  the block's end, one ``ReasoningDelta("")`` whose ``provider_data`` is the
  whole block (``{"type": "thinking", "thinking": ..., "signature": ...}``)
  so it can be sent back; ``redacted_thinking`` blocks give one
  ``ReasoningDelta("", provider_data={"type": "redacted_thinking", "data": ...})``.
  When the model thinks *between* text and tool_use blocks (interleaved
  thinking), where those stood is kept too, as ``provider_data`` blocks
  ``TEXT_REF`` / ``TOOL_USE_REF`` (:mod:`rafrx.messages`) before the thinking
  block after them: the message must go back in the order it came. So they are
  when text follows a ``tool_use`` block (``[text, tool_use, text]``): the
  ``TextDelta`` updates join, the message goes back with each text in its place.
* ``tool_use`` blocks → ``ToolCallStart`` / ``ToolCallArgs`` / ``ToolCallEnd``.
  The arguments are the ``input_json_delta`` pieces; an ``input`` the block
  starts with (Anthropic's is ``{}``; some gateways send the whole input there)
  counts only when no piece comes, as in the SDK. A block that never stops
  (``max_tokens`` cut it) gets no ``ToolCallEnd``, so its call is never run: it
  ends cut short (``ToolCallIncompleteContent``).
  A ``tool_use`` block at another index with the ``id`` of an earlier one (a
  gateway giving parallel calls one id) is a call of its own, ``<id>_2``,
  ``<id>_3`` …, as the OpenAI dialects have it: each keeps its arguments and
  is answered apart.
  A block's other members (the ``caller`` of a call made by Claude's code)
  go on its ``TOOL_USE_REF``, which then goes out at once, for the block to
  go back whole and in its place.
* Blocks of server tools, which Anthropic runs (``server_tool_use`` with its
  streamed input, ``web_search_tool_result``, ``mcp_tool_use`` …, any other
  block type), are kept whole, like thinking blocks, as one
  ``ReasoningDelta("", provider_data=block)`` at their end: a paused turn
  (``pause_turn``, marked by a ``PAUSE_TURN_REF`` block) goes back as it came
  for Claude to go on with it. A code execution ``container`` in
  ``message_delta`` is kept as a ``CONTAINER_REF`` block: the next request
  names it while calls made by Claude's code wait in it.
* ``message_delta`` carries the stop reason and *cumulative* usage (it
  overwrites, never adds); ``message_stop`` → ``Finish(reason, usage)`` with
  ``prompt_tokens`` = input + cache creation + cache read tokens. A stop
  reason seen without ``message_stop`` still counts as complete (a stream
  that stalls or breaks there gives the ``Finish`` before its error); a
  ``data: [DONE]`` line (OpenAI's end, which gateways such as GitHub
  Copilot's add) ends the stream as the end of the input does.
* ``event: error`` → :class:`~rafrx.errors.ProviderError` (``overloaded_error``,
  ``api_error`` and ``rate_limit_error`` are retryable); ``ping`` and unknown
  events are ignored.

Example:
    >>> from rafrx.sse import EventFields, ServerSentEvent, event_of
    >>> d = AnthropicDialect()
    >>> d.feed(ServerSentEvent("content_block_delta", '{"type": "content_block_delta", '
    ...     '"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}'))
    [TextDelta(delta='Hi')]
    >>> d.feed(ServerSentEvent("message_delta", '{"type": "message_delta", '
    ...     '"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}'))
    []
    >>> d.feed(ServerSentEvent("message_stop", '{"type": "message_stop"}'))
    [Finish(finish_reason=<FinishReason.STOP: 'stop'>, usage=Usage(prompt_tokens=0, \
completion_tokens=1, total_tokens=1, reasoning_tokens=None, cached_tokens=None))]
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import msgspec

from rafrx import response
from rafrx.errors import IncompleteStream, ProviderError
from rafrx.messages import CONTAINER_REF, PAUSE_TURN_REF, TEXT_REF, TOOL_USE_REF, _tool_use_extra
from rafrx.operators._split_legacy_delta import unique_call_id
from rafrx.response import FinishReason
from rafrx.sources.dialects._common import (
    NOT_FITTING,
    as_int,
    as_str,
    end_marker,
    error_event,
    event_json,
    get_object,
    load_object,
    malformed,
    provider_error,
    reasoning_delta,
    text_delta,
    tool_call_args,
    typed_decoder,
)
from rafrx.sse import EventFields, ServerSentEvent, event_of
from rafrx.updates import (
    AgentResponseUpdate,
    Finish,
    ReasoningDelta,
    ResponseMetadata,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Uri,
    Usage,
)

__all__ = ["AnthropicDialect", "anthropic_usage"]

_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def anthropic_usage(usage: dict[str, Any]) -> response.Usage:
    """Map an Anthropic ``usage`` object to :class:`rafrx.Usage`.

    Prompt tokens include the tokens written to and read from the cache.

    Example:
        >>> anthropic_usage({"input_tokens": 5, "cache_read_input_tokens": 100,
        ...                  "output_tokens": 7})
        Usage(prompt_tokens=105, completion_tokens=7, total_tokens=112, reasoning_tokens=None, \
cached_tokens=100)
    """
    cache_read = as_int(usage.get("cache_read_input_tokens"))
    prompt = (
        (as_int(usage.get("input_tokens")) or 0)
        + (as_int(usage.get("cache_creation_input_tokens")) or 0)
        + (cache_read or 0)
    )
    completion = as_int(usage.get("output_tokens")) or 0
    return response.Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        reasoning_tokens=_thinking_tokens(usage),
        cached_tokens=cache_read,
    )


def _thinking_tokens(usage: dict[str, Any]) -> int | None:
    """The thinking share of the output tokens (``output_tokens_details.thinking_tokens``)."""
    details = usage.get("output_tokens_details")
    return as_int(details.get("thinking_tokens")) if isinstance(details, dict) else None


class _Block:
    """A content block being streamed."""

    __slots__ = (
        "extra",
        "id",
        "input",
        "signature",
        "start",
        "stopped",
        "thinking",
        "type",
        "whole",
    )

    def __init__(self, kind: str, block_id: str = "") -> None:
        self.type = kind
        self.id = block_id
        self.whole: dict[str, Any] | None = None  # a server tool's block, as it started
        self.thinking: list[str] = []  # the thinking, or a server tool's input JSON
        self.signature: str | None = None
        self.stopped = False
        self.start = 0  # where a text block starts in the message's text
        self.extra: dict[str, Any] = {}  # a tool_use block's other members (its ``caller``)
        # A tool_use block's input as it started (JSON): its arguments unless deltas come.
        self.input: str | None = None


def _came_whole(block: _Block) -> bool:
    """Whether a server tool's block came whole at its start (its result: Anthropic
    streams only the tool's input)."""
    return block.whole is not None and block.type.endswith("_tool_result")


# A content_block_delta of text, arguments or thinking (nearly every event of a
# stream), as typed structs that msgspec decodes into directly (1.4-1.6x faster per
# event than dicts: python -m bench.json_decoders). Any other delta type, or a member
# of another type, does not fit: the general path reads it into the same structs
# where it can, so one method applies the rules (tests/sources/test_dialect_fast_paths.py).
# (gc=False: a decoded tree holds no cycle, and untracked structs cost less to build.)


class _TextDelta(msgspec.Struct, gc=False, tag="text_delta"):
    text: str | None = None


class _InputJSONDelta(msgspec.Struct, gc=False, tag="input_json_delta"):
    partial_json: str | None = None


class _ThinkingDelta(msgspec.Struct, gc=False, tag="thinking_delta"):
    thinking: str | None = None


class _BlockDelta(msgspec.Struct, gc=False, tag="content_block_delta"):
    index: int
    delta: _TextDelta | _InputJSONDelta | _ThinkingDelta


_decode_block_delta = typed_decoder(_BlockDelta)


class AnthropicDialect:
    """Messages API events → updates; see the module docstring for the rules."""

    __slots__ = (
        "_blocks",
        "_call_ids",
        "_call_ref_waits",
        "_call_suffixes",
        "_done",
        "_interleaved",
        "_refs",
        "_stop_reason",
        "_text_chars",
        "_usage",
    )

    def __init__(self) -> None:
        self._done = False
        self._blocks: dict[int, _Block] = {}
        self._call_ids: set[str] = set()  # the tool_use blocks' (see _own_call_id)
        self._call_suffixes: dict[str, int] = {}  # a reused id → the next suffix to try
        self._stop_reason: str | None = None
        self._usage: dict[str, Any] = {}
        # Interleaved thinking (a thinking block after a text or tool_use block): where
        # those blocks stood goes into provider_data, as TEXT_REF / TOOL_USE_REF blocks.
        self._text_chars = 0  # the message's text so far (where each text block stands)
        self._refs: list[dict[str, Any]] = []  # text / tool_use refs, until a thinking block
        # A tool_use ref is among them: noted as they come (looking among them at each
        # text block's end would cost quadratic work in a message of many blocks).
        self._call_ref_waits = False
        self._interleaved = False  # one did: each ref goes out as its block ends

    @property
    def done(self) -> bool:
        """True once ``message_stop`` was seen."""
        return self._done

    def feed(self, event: ServerSentEvent) -> list[AgentResponseUpdate]:
        """Translate one event; see :class:`~rafrx.sources.dialects.Dialect`."""
        return self._feed_fields((event.event, event.data, event.id, event.retry))

    def _feed_fields(self, fields: EventFields) -> list[AgentResponseUpdate]:
        """:meth:`feed` for an event given by its fields (:class:`UpdateDecoder
        <rafrx.sources.UpdateDecoder>`'s way): a text, argument or thinking delta needs
        no :class:`ServerSentEvent`; any other event is read from one."""
        if self._done:
            return []
        if fields[0] == "content_block_delta":  # nearly every event: the typed path first
            try:
                typed = _decode_block_delta(fields[1])
            except NOT_FITTING:  # another delta type, or an odd one: the general path
                pass
            else:
                return self._content_delta(typed.index, typed.delta)
        return self._general_event(event_of(fields))

    def _general_event(self, event: ServerSentEvent) -> list[AgentResponseUpdate]:
        """What :meth:`feed` returns for any event but a typed delta: read as dicts."""
        name = event.event
        if name == "error":
            raise self._failed(error_event(event))
        ended = end_marker(event)  # (blank data, or the [DONE] gateways add)
        if ended is not None:
            return self.close() if ended else []
        data = load_object(event)
        kind = data.get("type", name)
        if kind == "error":
            raise self._failed(provider_error(event, get_object(event, data, "error") or data))
        handler = _HANDLERS.get(kind) if type(kind) is str else None
        if handler is None:
            return []  # ping, and event types added after this was written
        return handler(self, event, data)

    def close(self) -> list[AgentResponseUpdate]:
        """End of input: the ``Finish`` if a stop reason was seen.

        Raises:
            IncompleteStream: Neither ``message_stop`` nor a stop reason came.
        """
        if self._done:
            return []
        if self._stop_reason is None:
            raise IncompleteStream("the stream ended without message_stop or a stop_reason")
        return self._finish()

    def salvage(self) -> list[AgentResponseUpdate]:
        """After the stream failed: the blocks that came whole but not their end (a
        signed thinking block, a server tool's result), and the usage reported so far
        (``message_start``'s), which only the ``Finish`` would have carried; once a stop
        reason came, the ``Finish`` itself, as at the end of input (the stream stalled or
        broke before ``message_stop``; not after an error event, which says the response
        failed); see :meth:`UpdateDecoder.salvage`."""
        if self._done:
            return []
        if self._stop_reason is not None:
            return self._finish()
        self._done = True
        out: list[AgentResponseUpdate] = []
        for _, block in sorted(self._blocks.items()):
            whole = block.signature if block.type == "thinking" else _came_whole(block)
            if whole and not block.stopped:
                out += self._stopped(block)
        if self._usage:
            out.append(Usage(anthropic_usage(self._usage)))
        return out

    # ------------------------------------------------------------ handlers

    def _failed(self, error: ProviderError) -> ProviderError:
        """``error``, the provider's word that the response failed: a stop reason it
        gave before is no longer the response's (:meth:`salvage` gives no ``Finish``)."""
        self._stop_reason = None
        return error

    def _finish(self) -> list[AgentResponseUpdate]:
        self._done = True
        usage = anthropic_usage(self._usage) if self._usage else None
        return [Finish(FinishReason.from_provider(self._stop_reason), usage)]

    def _add_usage(self, event: ServerSentEvent, parent: dict[str, Any]) -> None:
        usage = get_object(event, parent, "usage")
        if usage:
            for key in _USAGE_KEYS:
                value = as_int(usage.get(key))
                if value is not None:
                    self._usage[key] = value  # cumulative: overwrite
            thinking = _thinking_tokens(usage)
            if thinking is not None:
                self._usage["output_tokens_details"] = {"thinking_tokens": thinking}

    def _message_start(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        message = get_object(event, data, "message") or {}
        self._add_usage(event, message)
        response_id = as_str(message.get("id"))
        model = as_str(message.get("model"))
        if response_id is None and model is None:
            return []
        return [ResponseMetadata(response_id, model)]

    def _index(self, event: ServerSentEvent, data: dict[str, Any]) -> int:
        index = as_int(data.get("index"))
        if index is None:
            raise malformed(event, f"{data.get('type')} without an integer 'index'")
        return index

    def _block_start(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        index = self._index(event, data)
        block = get_object(event, data, "content_block")
        if block is None:
            raise malformed(event, "content_block_start without a 'content_block'")
        kind = block.get("type")
        kind = kind if isinstance(kind, str) else ""
        if kind == "tool_use":
            call_id, name = as_str(block.get("id")), as_str(block.get("name"))
            if call_id is None or name is None:
                raise malformed(event, "a tool_use block needs an 'id' and a 'name'")
            call_id = self._own_call_id(index, call_id)
            state = self._blocks[index] = _Block(kind, call_id)
            state.extra = _tool_use_extra(block)
            initial = block.get("input")
            if initial:  # (Anthropic starts with {}; a gateway may start with the whole input)
                state.input = event_json(event, initial, "a tool_use block's starting input")
            return [ToolCallStart(call_id, name)]
        state = self._blocks[index] = _Block(kind)
        if kind == "text":
            text = as_str(block.get("text"))
            state.start = self._text_chars
            if text is None:
                return []
            self._text_chars += len(text)
            return [TextDelta(text)]
        out = self._thinking_starts() if kind in ("thinking", "redacted_thinking") else []
        if kind == "thinking":
            text = as_str(block.get("thinking"))
            state.signature = as_str(block.get("signature"))
            if text is not None:
                state.thinking.append(text)
                out.append(ReasoningDelta(text))
        elif kind == "redacted_thinking":
            data_field = block.get("data")
            out.append(ReasoningDelta("", provider_data={"type": kind, "data": data_field}))
        elif kind != "text":  # a server tool's block: kept whole, where it stood
            state.whole = block
            out = self._thinking_starts()
        return out

    def _own_call_id(self, index: int, call_id: str) -> str:
        """The id of the call that the ``tool_use`` block ``index`` starts: ``call_id``,
        unless an earlier block (at another index) has it: then ``<id>_2``, ``<id>_3`` …

        Example:
            >>> d = AnthropicDialect()
            >>> d._own_call_id(0, "toolu_1")
            'toolu_1'
            >>> d._blocks[0] = _Block("tool_use", "toolu_1")
            >>> d._own_call_id(0, "toolu_1")  # block 0 starting again: the same call
            'toolu_1'
            >>> d._own_call_id(1, "toolu_1"), d._own_call_id(2, "toolu_1")
            ('toolu_1_2', 'toolu_1_3')
        """
        block = self._blocks.get(index)
        if call_id in self._call_ids and not (block is not None and block.id == call_id):
            call_id = unique_call_id(call_id, self._call_ids, self._call_suffixes)
        self._call_ids.add(call_id)
        return call_id

    def _thinking_starts(self) -> list[AgentResponseUpdate]:
        """A thinking block starts: the refs of the blocks before it go first."""
        if not self._refs:
            return []
        self._interleaved = True
        out: list[AgentResponseUpdate] = [ReasoningDelta("", provider_data=r) for r in self._refs]
        self._refs.clear()
        self._call_ref_waits = False
        return out

    def _ref(self, ref: dict[str, Any], needed: bool = False) -> list[AgentResponseUpdate]:
        """A text or tool_use block ended: note where it stood, sent once thinking follows
        or at once when ``needed`` (a ``tool_use`` block's ``caller`` goes back on its ref,
        a text block came after a call: both go back in their place)."""
        if self._interleaved:
            return [ReasoningDelta("", provider_data=ref)]
        self._refs.append(ref)
        self._call_ref_waits = self._call_ref_waits or ref["type"] == TOOL_USE_REF
        return self._thinking_starts() if needed else []

    def _block_delta(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        index = data.get("index")
        if type(index) is not int:
            index = self._index(event, data)
        delta = data.get("delta")
        if type(delta) is not dict:
            delta = get_object(event, data, "delta")
            if delta is None:
                raise malformed(event, "content_block_delta without a 'delta'")
        kind = delta.get("type")
        if kind == "text_delta":
            return self._content_delta(index, _TextDelta(as_str(delta.get("text"))))
        if kind == "input_json_delta":
            return self._content_delta(index, _InputJSONDelta(as_str(delta.get("partial_json"))))
        if kind == "thinking_delta":
            return self._content_delta(index, _ThinkingDelta(as_str(delta.get("thinking"))))
        block = self._blocks.get(index)
        if kind == "signature_delta":
            if block is not None:
                block.signature = as_str(delta.get("signature"))
            return []
        if kind == "citations_delta":
            citation = get_object(event, delta, "citation") or {}
            url = as_str(citation.get("url"))
            return [] if url is None else [Uri(url)]
        return []

    def _content_delta(
        self, index: int, delta: _TextDelta | _InputJSONDelta | _ThinkingDelta
    ) -> list[AgentResponseUpdate]:
        """The updates for a text, argument or thinking delta to block ``index``.

        Both paths end here: the typed one with the structs msgspec decoded, the
        general one with structs it built from the dicts.
        """
        if type(delta) is _InputJSONDelta:
            block = self._blocks.get(index)
            if not delta.partial_json or block is None or block.stopped:
                return []
            if block.type != "tool_use":  # a server tool's input: kept with its block
                block.thinking.append(delta.partial_json)
                return []
            block.input = None  # the deltas are the input (as the SDK's accumulate_event reads it)
            return [tool_call_args(block.id, delta.partial_json)]
        if type(delta) is _TextDelta:
            if not delta.text:
                return []
            self._text_chars += len(delta.text)
            return [text_delta(delta.text)]
        assert type(delta) is _ThinkingDelta
        if not delta.thinking:
            return []
        block = self._blocks.get(index)
        if block is not None:
            block.thinking.append(delta.thinking)
        return [reasoning_delta(delta.thinking, None)]

    def _block_stop(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        block = self._blocks.get(self._index(event, data))
        if block is None or block.stopped:
            return []
        return self._stopped(block)

    def _stopped(self, block: _Block) -> list[AgentResponseUpdate]:
        """The updates of a block's end."""
        block.stopped = True
        if block.type == "tool_use":
            ref = {"type": TOOL_USE_REF, "id": block.id, **block.extra}
            end = [ToolCallEnd(block.id), *self._ref(ref, needed=bool(block.extra))]
            return end if block.input is None else [ToolCallArgs(block.id, block.input), *end]
        if block.type == "thinking":
            whole = {"type": "thinking", "thinking": "".join(block.thinking)}
            whole["signature"] = block.signature or ""
            return [ReasoningDelta("", provider_data=whole)]
        if block.type == "text" and self._text_chars > block.start:
            ref = {"type": TEXT_REF, "chars": self._text_chars - block.start}
            # (text after a call: it goes back in its place, not joined to the text before)
            return self._ref(ref, needed=self._call_ref_waits)
        if block.whole is not None:
            return [ReasoningDelta("", provider_data=_server_block(block.whole, block.thinking))]
        return []

    def _message_delta(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        delta = get_object(event, data, "delta") or {}
        reason = as_str(delta.get("stop_reason"))
        if reason is not None:
            self._stop_reason = reason
        self._add_usage(event, data)
        out: list[AgentResponseUpdate] = []
        container = delta.get("container")
        if isinstance(container, dict) and isinstance(container.get("id"), str):
            mark = {"type": CONTAINER_REF, **container}  # (calls may wait in it)
            out.append(ReasoningDelta("", provider_data=mark))
        if reason == "pause_turn":  # marked, for the agent to send the message back
            out.append(ReasoningDelta("", provider_data={"type": PAUSE_TURN_REF}))
        return out

    def _message_stop(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        return self._finish()


def _server_block(started: dict[str, Any], input_json: list[str]) -> dict[str, Any]:
    """A server tool's whole block: as it started, with the input streamed into it."""
    whole = dict(started)
    if input_json:
        with contextlib.suppress(ValueError, RecursionError):  # cut: the block as it started
            whole["input"] = json.loads("".join(input_json))
    return whole


_HANDLERS = {
    "message_start": AnthropicDialect._message_start,
    "content_block_start": AnthropicDialect._block_start,
    "content_block_delta": AnthropicDialect._block_delta,
    "content_block_stop": AnthropicDialect._block_stop,
    "message_delta": AnthropicDialect._message_delta,
    "message_stop": AnthropicDialect._message_stop,
}
