"""The OpenAI Chat Completions stream dialect (and the many servers that copy it).

Covers OpenAI, Azure OpenAI, DeepSeek, Groq, OpenRouter, Ollama, Gemini's
OpenAI-compatible endpoint, Mistral, vLLM, llama.cpp, xAI, Writer and others:

* ``delta.reasoning_content`` (DeepSeek, llama.cpp, xAI) or ``delta.reasoning``
  (Groq, OpenRouter, Ollama) → :class:`~rafrx.updates.ReasoningDelta`;
* ``delta.content`` as a string → :class:`~rafrx.updates.TextDelta`; as an
  array of parts (Mistral) text parts → ``TextDelta``, ``thinking`` parts →
  ``ReasoningDelta``; ``delta.refusal`` → ``TextDelta`` (it is the reply the
  user sees); ``delta.audio.transcript`` (a spoken answer) → ``TextDelta``;
* ``delta.tool_calls`` → :class:`~rafrx.updates.ToolCallDelta`. An entry
  without ``index`` (Ollama, Gemini, Mistral) that has a name or id starts a
  new call at the next free index, one without continues the last call.
  Arguments sent as an object are serialised with :func:`json.dumps` (too deep
  to write: a ``MalformedEvent``).
  Explicit ``null`` fields count as absent (Writer). A custom (free-form)
  tool's call (``custom: {name, input}``, GPT-5) has the arguments
  ``{"input": text}`` and a ``CUSTOM_TOOL_CALL_REF`` block, so that it goes
  back as a custom call. The deprecated
  ``delta.function_call`` is the call at index 0. A call's ``extra_content``
  (Gemini's ``thought_signature``, which must go back with the call) →
  ``ReasoningDelta("", provider_data={"type": "tool_call_extra", ...})``, with
  the call's ``call_id``, or its ``index`` when it has no id yet (the id
  :func:`~rafrx.operators.split_legacy_delta` gives it goes there);
* LiteLLM's ``delta.thinking_blocks`` (Claude's signed thinking), merged into
  their blocks and sent at the end as ``ReasoningDelta("",
  provider_data={"type": THINKING_BLOCKS, ...})``: they go back on the
  assistant message;
* OpenRouter's ``delta.reasoning_details`` (reasoning text pieces, signatures,
  encrypted blocks) are merged per entry and sent, at the end, as
  ``ReasoningDelta("", provider_data={"type": REASONING_DETAILS, ...})``: they
  go back with the assistant message in a tool loop. Their text is the
  reasoning of a delta that has no other (MiniMax);
* ``delta.annotations`` of type ``url_citation`` (search models), and each new
  URL of a chunk's ``citations`` list (Perplexity, xAI) →
  :class:`~rafrx.updates.Uri`;
* ``finish_reason`` and ``usage`` (Groq's may come only in ``x_groq.usage``,
  Moonshot's only in ``choices[0].usage``):
  the last non-null ones are kept and sent once, as ``Finish(reason, usage)``,
  at ``data: [DONE]`` (or at the end of input when a finish reason was seen:
  some servers omit ``[DONE]``; or, then, before the error of a stream that
  stalls or breaks there).

Only choice index 0 is read: with ``n > 1`` the other choices are ignored.
Chunks whose ``object`` is neither ``chat.completion.chunk`` nor
``chat.completion`` (Perplexity's; Azure's content-filter chunks have ``""``)
contribute their choices and usage but not their (empty) id and model. An
``{"error": ...}`` payload (DeepInfra's: ``error_message``; FastChat's:
``{"text": ..., "error_code": n}``) or an ``event: error``
raises :class:`~rafrx.errors.ProviderError`.

Example:
    >>> from rafrx.sse import EventFields, ServerSentEvent, event_of
    >>> d = OpenAIChatDialect()
    >>> d.feed(ServerSentEvent(data='{"id": "c1", "model": "m", '
    ...     '"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}'))
    [ResponseMetadata(id='c1', model='m'), TextDelta(delta='Hi')]
    >>> d.feed(ServerSentEvent(data='[DONE]')), d.done
    ([Finish(finish_reason=<FinishReason.STOP: 'stop'>, usage=None)], True)
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from rafrx import response
from rafrx._slot_init import slot_builder
from rafrx.errors import IncompleteStream, ProviderError
from rafrx.messages import CUSTOM_TOOL_CALL_REF, REASONING_DETAILS, THINKING_BLOCKS
from rafrx.operators._split_legacy_delta import new_call_id
from rafrx.response import FinishReason
from rafrx.sources.dialects._common import (
    CUSTOM_INPUT_HEAD,
    CUSTOM_INPUT_TAIL,
    NOT_FITTING,
    as_int,
    as_str,
    error_event,
    event_json,
    get_list,
    get_object,
    json_escaped,
    load_object,
    malformed,
    openai_usage,
    provider_error,
    reasoning_delta,
    text_delta,
    typed_decoder,
)
from rafrx.sse import EventFields, ServerSentEvent, event_of
from rafrx.updates import (
    AgentResponseUpdate,
    Finish,
    ReasoningDelta,
    ResponseMetadata,
    TextDelta,
    ToolCallDelta,
    Uri,
    Usage,
)

__all__ = ["OpenAIChatDialect", "chat_usage"]

_JSON_WHITESPACE: Final = " \t\n\r"  # only what JSON allows around a value

_CHUNK = "chat.completion.chunk"
# The objects a response's chunks may be: Perplexity's are "chat.completion", and
# null is absent; Azure's content-filter chunks (object "") have no id or model.
_OBJECTS = (_CHUNK, "chat.completion", None)


def chat_usage(usage: dict[str, Any]) -> response.Usage:
    """Map a Chat Completions ``usage`` object to :class:`rafrx.Usage`.

    Example:
        >>> chat_usage({"prompt_tokens": 3, "completion_tokens": 2,
        ...             "prompt_tokens_details": {"cached_tokens": 1}})
        Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5, reasoning_tokens=None, \
cached_tokens=1)
    """
    return openai_usage(usage, prompt="prompt", completion="completion")


# The usual chunk, as typed structs: msgspec decodes the JSON straight into them,
# skipping the members rafrx does not read (1.4x faster per chunk than decoding to
# dicts and walking them: python -m bench.json_decoders). A chunk that does not fit
# (an error payload, content parts, arguments as an object, a float index, ...)
# goes the general way, through ``load_object``; both give the same updates
# (tests/sources/test_dialect_fast_paths.py). The structs are untracked by the
# cyclic GC (gc=False: a decoded tree holds no cycle), which makes a chunk's decode
# about 8% cheaper (10,400 → 9,500 instructions for a tool-call chunk).


class _Function(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct, gc=False):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None
    custom: None = None  # (a custom tool's call: the general path reads it)
    extra_content: None = None  # (Gemini's signature: the general path keeps it)


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None
    reasoning_details: list[Any] | None = None
    thinking_blocks: None = None  # (LiteLLM's signed thinking: the general path keeps it)
    # Rare members the general path reads (a value here does not fit: that path takes it):
    function_call: None = None
    annotations: None = None
    audio: None = None


class _Choice(msgspec.Struct, gc=False):
    index: int | None = None
    delta: _Delta | None = None
    finish_reason: str | None = None
    usage: None = None  # (Moonshot's usage, in the choice: the general path reads it)


class _Chunk(msgspec.Struct, gc=False):
    """A chunk once the response's id and model were sent: they are skipped, not built
    (a chunk then costs about 8% fewer instructions to decode: 9,500 → 8,700)."""

    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None
    error: None = None  # an error payload does not fit: the general path raises it
    error_message: None = None  # (nor does DeepInfra's)
    x_groq: None = None  # (Groq's usage may come only in there: the general path reads it)
    citations: None = None  # (Perplexity's and xAI's sources: the general path reads them)
    error_code: None = None  # (FastChat's error payload: the general path raises it)


class _FirstChunk(_Chunk, gc=False):
    """A chunk until the response's id and model were sent."""

    id: str | None = None
    model: str | None = None
    object: str = _CHUNK


_decode_first = typed_decoder(_FirstChunk)
_decode_chunk = typed_decoder(_Chunk)
_tool_call_delta = slot_builder(ToolCallDelta)  # (cheaper than the class call)
_NO_FUNCTION = _Function()


class _ThinkingBlocks:
    """LiteLLM's ``thinking_blocks`` (Claude's thinking), from the pieces streamed of them:
    a thinking piece goes on with the last block until that block is signed."""

    __slots__ = ("blocks", "texts")

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self.texts: list[list[str]] = []  # each block's thinking, joined at the end

    def add(self, piece: dict[str, Any]) -> None:
        text = piece.get("thinking")
        last = self.blocks[-1] if self.blocks else None
        if (
            piece.get("type") == "thinking"
            and last is not None
            and last.get("type") == "thinking"
            and not last.get("signature")
        ):
            if isinstance(text, str):
                self.texts[-1].append(text)
            if piece.get("signature"):
                last["signature"] = piece["signature"]
            return
        self.blocks.append(dict(piece))
        self.texts.append([text] if isinstance(text, str) else [])

    def merged(self) -> list[dict[str, Any]]:
        return [
            {**block, "thinking": "".join(texts)} if block.get("type") == "thinking" else block
            for block, texts in zip(self.blocks, self.texts, strict=True)
        ]

    def drop_unsigned(self) -> None:
        """Forget the thinking blocks that have no signature (yet)."""
        kept = [
            (block, texts)
            for block, texts in zip(self.blocks, self.texts, strict=True)
            if block.get("type") != "thinking" or block.get("signature")
        ]
        self.blocks = [block for block, _ in kept]
        self.texts = [texts for _, texts in kept]


class _Detail:
    """One entry of OpenRouter's ``reasoning_details``, from the pieces streamed of it: its
    ``text`` / ``summary`` joined (at the end: linear), its other members as last sent."""

    __slots__ = ("fields", "texts")

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.texts: dict[str, list[str]] = {}

    def add(self, piece: dict[str, Any]) -> None:
        for name, value in piece.items():
            if name in ("text", "summary") and isinstance(value, str):
                self.texts.setdefault(name, []).append(value)
                self.fields.setdefault(name, "")  # (its place among the members)
            elif (value is not None and value != "") or name not in self.fields:
                self.fields[name] = value

    def merged(self) -> dict[str, Any]:
        return {**self.fields, **{name: "".join(parts) for name, parts in self.texts.items()}}


class OpenAIChatDialect:
    """Chat Completions chunks → updates; see the module docstring for the rules."""

    __slots__ = (
        "_cited",
        "_custom",
        "_details",
        "_done",
        "_finish",
        "_ids",
        "_last_index",
        "_meta_sent",
        "_next_index",
        "_thinking",
        "_usage",
    )

    def __init__(self) -> None:
        self._done = False
        self._meta_sent = False
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._next_index = 0  # the next free wire index
        self._last_index: int | None = None
        self._ids: dict[str, int] = {}  # tool call id → index, for index-less entries
        self._custom: dict[int, str] = {}  # index → id of the open custom (free-form) calls
        self._thinking = _ThinkingBlocks()  # LiteLLM's
        self._details: dict[tuple[str | None, int | None], _Detail] = {}  # OpenRouter's
        self._cited: set[str] = set()  # the URLs of top-level citations sent

    @property
    def done(self) -> bool:
        """True once ``[DONE]`` was seen."""
        return self._done

    def feed(self, event: ServerSentEvent) -> list[AgentResponseUpdate]:
        """Translate one event; see :class:`~rafrx.sources.dialects.Dialect`."""
        return self._feed_fields((event.event, event.data, event.id, event.retry))

    def _feed_fields(self, fields: EventFields) -> list[AgentResponseUpdate]:
        """:meth:`feed` for an event given by its fields (:class:`UpdateDecoder
        <rafrx.sources.UpdateDecoder>`'s way): a chunk of the typed shape needs no
        :class:`ServerSentEvent`; the general path builds one."""
        if self._done:
            return []
        name, data, _, _ = fields
        if name == "error":
            raise self._failed(error_event(event_of(fields)))
        if name not in ("message", ""):
            return []  # an unknown named event (e.g. a keep-alive): not a chunk
        if data[:1] != "{":  # not the usual chunk: blank, [DONE], or padded with spaces
            data = data.strip(_JSON_WHITESPACE)
            if not data:
                return []
            if data == "[DONE]":
                self._done = True
                return self._end()
        try:
            typed = (_decode_chunk if self._meta_sent else _decode_first)(data)
        except NOT_FITTING:  # not the usual chunk: the general path
            return self._general_chunk(event_of(fields))
        return self._typed_chunk(fields, typed)

    def _general_chunk(self, event: ServerSentEvent) -> list[AgentResponseUpdate]:
        """What :meth:`feed` returns for a chunk of any other shape: read as dicts."""
        chunk = load_object(event)
        error = chunk.get("error")
        if error is None and chunk.get("error_message") is not None:  # DeepInfra's, Venice's
            error = {"message": chunk["error_message"], "type": chunk.get("error_type")}
        if error is None and chunk.get("error_code") and "choices" not in chunk:  # FastChat's
            error = {"message": chunk.get("text"), "code": chunk["error_code"]}
        if error is not None:
            if type(chunk.get("usage")) is dict:  # (OpenRouter's last chunk: salvage() gives it)
                self._usage = chunk["usage"]
            raise self._failed(
                provider_error(event, error if isinstance(error, dict) else {"message": error})
            )
        out: list[AgentResponseUpdate] = []
        if not self._meta_sent and chunk.get("object") in _OBJECTS:
            response_id = as_str(chunk.get("id"))
            model = as_str(chunk.get("model"))
            if response_id is not None or model is not None:
                self._meta_sent = True
                out.append(ResponseMetadata(response_id, model))
        choices = chunk.get("choices")
        if type(choices) is not list:
            choices = get_list(event, chunk, "choices")
        for choice in choices:
            if type(choice) is not dict:
                raise malformed(event, "a choice should be an object")
            index = choice.get("index")
            if index is not None and (index := as_int(index)) is None:
                raise malformed(event, f"invalid choice index {choice['index']!r}")
            if not index:  # (no index: the only choice)
                self._choice(event, choice, out)
        citations = chunk.get("citations")
        if citations:
            out += self._citations(event, get_list(event, chunk, "citations"))
        usage = get_object(event, chunk, "usage")
        if usage is None and chunk.get("x_groq") is not None:  # Groq's own place for it
            usage = get_object(event, get_object(event, chunk, "x_groq") or {}, "usage")
        if usage is not None:
            self._usage = usage
        return out

    def _typed_chunk(self, fields: EventFields, chunk: _Chunk) -> list[AgentResponseUpdate]:
        """What :meth:`feed` returns for a chunk that fits the typed shape (same rules)."""
        out: list[AgentResponseUpdate] = []
        if type(chunk) is _FirstChunk and chunk.object in _OBJECTS and (chunk.id or chunk.model):
            self._meta_sent = True
            out.append(ResponseMetadata(chunk.id or None, chunk.model or None))
        for choice in chunk.choices or ():
            if choice.index:
                continue  # another choice (n > 1)
            if choice.finish_reason:
                self._finish = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            reasoning = delta.reasoning_content or delta.reasoning
            if delta.reasoning_details:
                detailed = self._add_details(event_of(fields), delta.reasoning_details)
                if delta.reasoning_content is None and delta.reasoning is None:
                    reasoning = detailed  # (MiniMax sends it there only)
            if reasoning:
                out.append(reasoning_delta(reasoning, None))
            if delta.content:
                out.append(text_delta(delta.content))
            if delta.refusal:
                out.append(text_delta(delta.refusal))
            for call in delta.tool_calls or ():
                if call.index is not None and call.index < 0:
                    raise malformed(event_of(fields), f"invalid tool call index {call.index!r}")
                if self._custom and call.function is not None:  # as _tool_calls does
                    self._close_custom(call.index, out)
                function = call.function or _NO_FUNCTION
                update = self._delta(
                    call.index, call.id or None, function.name or None, function.arguments or ""
                )
                if update is not None:
                    out.append(update)
        if chunk.usage is not None:
            self._usage = chunk.usage
        return out

    def close(self) -> list[AgentResponseUpdate]:
        """End of input: the held ``Finish`` if a finish reason was seen.

        Raises:
            IncompleteStream: Neither ``[DONE]`` nor a finish reason came.
        """
        if self._done:
            return []
        if self._finish is None:
            raise IncompleteStream("the stream ended without [DONE] or a finish_reason")
        self._done = True
        return self._end()

    def salvage(self) -> list[AgentResponseUpdate]:
        """After the stream failed: what only its end would have given, as far as it
        came (LiteLLM's thinking blocks, OpenRouter's reasoning details, the usage
        reported); and once a finish reason came, the ``Finish`` itself, as at the end of
        input (the stream stalled or broke before ``[DONE]``; not after the provider's
        error, which says the response failed); see
        :meth:`UpdateDecoder.salvage`."""
        if self._done:
            return []
        self._done = True
        if self._finish is not None:
            return self._end()
        self._thinking.drop_unsigned()  # (cut before its signature: Claude would refuse it)
        out = self._held_reasoning()
        if self._usage is not None:
            out.append(Usage(chat_usage(self._usage)))
        return out

    # ------------------------------------------------------------ internals

    def _failed(self, error: ProviderError) -> ProviderError:
        """``error``, the provider's word that the response failed: a finish reason it
        gave before is no longer the response's (:meth:`salvage` gives no ``Finish``)."""
        self._finish = None
        return error

    def _end(self) -> list[AgentResponseUpdate]:
        """The updates at the end of the response: the end of custom calls' arguments,
        the reasoning blocks held, if any, then the ``Finish``."""
        out: list[AgentResponseUpdate] = []
        finish = self._finish_update(FinishReason.OTHER)
        if finish.finish_reason in (FinishReason.STOP, FinishReason.TOOL_CALLS):
            for index in sorted(self._custom):  # (else cut short: left open, as it came)
                out.append(ToolCallDelta(index, None, None, CUSTOM_INPUT_TAIL))
        self._custom.clear()
        out += self._held_reasoning()
        out.append(finish)
        return out

    def _held_reasoning(self) -> list[AgentResponseUpdate]:
        """LiteLLM's thinking blocks and OpenRouter's reasoning details, merged: they
        go once, at the end."""
        out: list[AgentResponseUpdate] = []
        if self._thinking.blocks:
            blocks = self._thinking.merged()
            out.append(
                ReasoningDelta("", provider_data={"type": THINKING_BLOCKS, "blocks": blocks})
            )
        if self._details:
            details = [detail.merged() for detail in self._details.values()]
            out.append(
                ReasoningDelta("", provider_data={"type": REASONING_DETAILS, "details": details})
            )
        return out

    def _add_details(self, event: ServerSentEvent, details: list[Any]) -> str:
        """Merge OpenRouter's ``reasoning_details`` pieces, one entry per (type, index).

        Returns the reasoning text the pieces carry (their ``text``, or a summary's
        ``summary``), for a provider that sends it nowhere else (MiniMax).
        """
        texts: list[str] = []
        for piece in details:
            if not isinstance(piece, dict):
                raise malformed(event, "a reasoning_details entry should be an object")
            kind, index = piece.get("type"), piece.get("index")
            key = (kind if isinstance(kind, str) else None, index if type(index) is int else None)
            detail = self._details.get(key)
            if detail is None:
                detail = self._details[key] = _Detail()
            detail.add(piece)
            text = piece.get("summary" if kind == "reasoning.summary" else "text")
            if isinstance(text, str):
                texts.append(text)
        return "".join(texts)

    def _citations(self, event: ServerSentEvent, citations: list[Any]) -> list[Uri]:
        """A ``Uri`` for each URL of a top-level ``citations`` list not seen before
        (Perplexity repeats the whole list on every chunk)."""
        new = [url for url in citations if isinstance(url, str) and url not in self._cited]
        self._cited.update(new)
        return [Uri(url) for url in dict.fromkeys(new)]

    def _finish_update(self, default: FinishReason) -> Finish:
        reason = default if self._finish is None else FinishReason.from_provider(self._finish)
        usage = None if self._usage is None else chat_usage(self._usage)
        return Finish(reason, usage)

    def _choice(
        self, event: ServerSentEvent, choice: dict[str, Any], out: list[AgentResponseUpdate]
    ) -> None:
        finish = choice.get("finish_reason")
        if finish is not None:
            finish = as_str(finish)
            if finish is not None:
                self._finish = finish
        usage = choice.get("usage")
        if usage is not None:  # Moonshot's place for it (a top-level one, read after, wins)
            self._usage = get_object(event, choice, "usage")
        delta = choice.get("delta")
        if type(delta) is not dict:
            delta = get_object(event, choice, "delta")
            if delta is None:
                return
        # Most chunks carry one or two of these keys: look each up once, check types only
        # for what is there (this runs for every chunk of every stream).
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None:
            if type(tool_calls) is not list:
                tool_calls = get_list(event, delta, "tool_calls")
            if len(delta) == 1:  # the usual argument chunk
                self._tool_calls(event, tool_calls, out)
                return
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        thinking = delta.get("thinking_blocks")
        if thinking:
            for piece in get_list(event, delta, "thinking_blocks"):
                if not isinstance(piece, dict):
                    raise malformed(event, "a thinking_blocks entry should be an object")
                self._thinking.add(piece)
        details = delta.get("reasoning_details")
        if details:
            detailed = self._add_details(event, get_list(event, delta, "reasoning_details"))
            if delta.get("reasoning_content") is None and delta.get("reasoning") is None:
                reasoning = detailed or None  # (MiniMax sends it there only)
        if reasoning is not None:
            reasoning = as_str(reasoning)
            if reasoning is not None:
                out.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if content is not None:
            if type(content) is str:
                if content:
                    out.append(TextDelta(content))
            elif isinstance(content, list):
                self._content_parts(event, content, out)
            else:
                raise malformed(event, "'content' should be a string or an array")
        refusal = delta.get("refusal")
        if refusal is not None:
            refusal = as_str(refusal)
            if refusal is not None:
                out.append(TextDelta(refusal))
        audio = delta.get("audio")
        if audio is not None:  # a spoken answer: its transcript is the text
            transcript = as_str((get_object(event, delta, "audio") or {}).get("transcript"))
            if transcript:
                out.append(TextDelta(transcript))
        if tool_calls is not None:
            self._tool_calls(event, tool_calls, out)
        function_call = delta.get("function_call")
        if function_call is not None:  # the deprecated functions API: one call, no id
            update = self._tool_call(event, {"index": 0, "function": function_call})
            if update is not None:
                out.append(update)
        for annotation in get_list(event, delta, "annotations"):  # search models' citations
            if isinstance(annotation, dict) and annotation.get("type") == "url_citation":
                url = as_str((get_object(event, annotation, "url_citation") or {}).get("url"))
                if url is not None:
                    out.append(Uri(url))

    def _tool_calls(
        self, event: ServerSentEvent, calls: list[Any], out: list[AgentResponseUpdate]
    ) -> None:
        for call in calls:
            if type(call) is not dict:
                raise malformed(event, "a tool call delta should be an object")
            if call.get("custom") is not None:
                self._custom_call(event, call, out)
                continue
            if self._custom and call.get("function") is not None:  # at its index: its end
                self._close_custom(self._wire_index(event, call), out)
            update = self._tool_call(event, call)
            if update is not None:
                out.append(update)
            extra = call.get("extra_content")
            if extra is not None:
                # (a call with no id here: split_legacy_delta names the call at that index,
                # the one _tool_call just set)
                call_id = None if update is None else update.id
                ref = ("call_id", call_id) if call_id is not None else ("index", self._last_index)
                block = {"type": "tool_call_extra", ref[0]: ref[1], "extra_content": extra}
                out.append(ReasoningDelta("", provider_data=block))

    def _content_parts(
        self, event: ServerSentEvent, parts: list[Any], out: list[AgentResponseUpdate]
    ) -> None:
        for part in parts:
            if isinstance(part, str):
                if part:
                    out.append(TextDelta(part))
                continue
            if not isinstance(part, dict):
                raise malformed(event, "a content part should be an object")
            kind = part.get("type")
            if kind == "text":
                text = as_str(part.get("text"))
                if text is not None:
                    out.append(TextDelta(text))
            elif kind == "thinking":
                thinking = part.get("thinking")
                pieces: list[Any] = []
                if isinstance(thinking, str):
                    pieces.append(thinking)
                elif isinstance(thinking, list):
                    pieces.extend(p.get("text") for p in thinking if isinstance(p, dict))
                text = "".join(p for p in pieces if isinstance(p, str))
                if text:
                    out.append(ReasoningDelta(text))

    def _custom_call(
        self, event: ServerSentEvent, call: dict[str, Any], out: list[AgentResponseUpdate]
    ) -> None:
        """A piece of a custom tool's call (``custom: {name, input}``): its arguments are
        ``{"input": text}``, closed when another call takes its index or at the end
        of a response that ends well (see :meth:`_end`)."""
        custom = get_object(event, call, "custom") or {}
        name = as_str(custom.get("name"))
        call_id = as_str(call.get("id"))
        text = json_escaped(as_str(custom.get("input")) or "")
        index = self._wire_index(event, call)
        if name is not None and index in self._custom:
            if call_id in (None, self._custom[index]):  # its id and name again (Fireworks)
                name = None
            else:  # a new call: the one at its index before it is over
                self._close_custom(index, out)
        if name is not None:
            call_id = call_id or new_call_id()  # (to be marked, and answered, as custom)
            text = CUSTOM_INPUT_HEAD + text
        update = self._delta(index, call_id, name, text)
        if update is None:
            return
        out.append(update)
        if name is not None:
            self._custom[update.index] = str(call_id)
            ref = {"type": CUSTOM_TOOL_CALL_REF, "call_id": call_id}
            out.append(ReasoningDelta("", provider_data=ref))

    def _close_custom(self, index: int | None, out: list[AgentResponseUpdate]) -> None:
        if index is not None and self._custom.pop(index, None) is not None:
            out.append(ToolCallDelta(index, None, None, CUSTOM_INPUT_TAIL))

    def _wire_index(self, event: ServerSentEvent, call: dict[str, Any]) -> int | None:
        raw_index = call.get("index")
        wire_index = raw_index if type(raw_index) is int else as_int(raw_index)
        if raw_index is not None and (wire_index is None or wire_index < 0):
            raise malformed(event, f"invalid tool call index {raw_index!r}")
        return wire_index

    def _tool_call(self, event: ServerSentEvent, call: dict[str, Any]) -> ToolCallDelta | None:
        function = call.get("function")
        if type(function) is not dict:
            function = get_object(event, call, "function") or {}
        name = function.get("name")
        if name is not None:
            name = as_str(name)
        call_id = call.get("id")
        if call_id is not None:
            call_id = as_str(call_id)
        arguments = function.get("arguments")
        if arguments is None:
            arguments = ""
        elif type(arguments) is not str:
            arguments = event_json(event, arguments, "a tool call's arguments (sent as an object)")
        return self._delta(self._wire_index(event, call), call_id, name, arguments)

    def _delta(
        self, wire_index: int | None, call_id: str | None, name: str | None, arguments: str
    ) -> ToolCallDelta | None:
        """The update for one tool-call entry (``None``: an empty one); see the module docstring."""
        if wire_index is None:
            if call_id is not None and call_id in self._ids:
                index = self._ids[call_id]
            elif name is not None or call_id is not None or self._last_index is None:
                index = self._next_index
            else:
                index = self._last_index
        else:
            index = wire_index
        self._last_index = index
        if index >= self._next_index:
            self._next_index = index + 1
        if call_id is not None:
            self._ids[call_id] = index
        elif name is None and not arguments:
            return None
        return _tool_call_delta(index, call_id, name, arguments)
