"""The OpenAI Responses API stream dialect.

Events are dispatched on the ``type`` member of their data (some servers send
no ``event:`` line):

* ``response.created`` → :class:`~rafrx.updates.ResponseMetadata`;
* ``response.output_text.delta`` and ``response.refusal.delta`` →
  :class:`~rafrx.updates.TextDelta` (from a server that sends no delta, the
  text of ``response.output_text.done`` / ``response.refusal.done``, else of
  the finished ``message`` item, else of the one in the final output);
* ``response.reasoning_summary_text.delta`` and
  ``response.reasoning_text.delta`` → :class:`~rafrx.updates.ReasoningDelta`
  (parts follow each other with no separator; from a server that sends no
  delta, the text of their ``.done`` events, else of the finished item); a
  message's text is taken once, whatever ids its stages give it (mistral.rs
  gives each its own: its ``output_index`` says it is one); a finished ``reasoning`` item
  with an id → ``ReasoningDelta("", provider_data=item)``, kept whole (with
  its ``encrypted_content``) to go back in the next request of a tool loop,
  and so is a finished item of a tool the server ran (``web_search_call``,
  ...: ``OPENAI_SERVER_TOOL_ITEMS``); for a finished ``function_call`` or
  ``message`` item that follows one, a small block naming its id (``FUNCTION_CALL_REF`` /
  ``MESSAGE_REF`` of :mod:`rafrx.messages`): the API pairs a reasoning item
  with the item after it by id;
* a ``function_call`` output item → ``ToolCallStart(call_id, name)``, its
  ``function_call_arguments.delta`` events → ``ToolCallArgs`` and the first
  of ``function_call_arguments.done`` / ``output_item.done`` →
  ``ToolCallEnd`` (preceded by the whole arguments when no delta came); an
  item added under an id of its own whose ``call_id`` repeats an earlier
  call's is another call, under that id with ``_2`` (``_3`` ...) added, as
  ``split_legacy_delta`` does;
* a ``custom_tool_call`` output item (a custom tool's free-form input) →
  the same, its ``custom_tool_call_input.delta`` events being the text of the
  arguments ``{"input": text}``, and a ``CUSTOM_TOOL_CALL_REF`` block at its
  end, so that the call and its result go back as custom tool items;
* an ``mcp_approval_request`` output item (a remote MCP tool waiting for
  approval) → :class:`~rafrx.updates.ToolApprovalRequest` with the item's id,
  and the item, kept to go back (``execute_tools`` with an approver answers it);
* URL annotations (``output_text.annotation.added``, or those first seen on
  a finished part) → :class:`~rafrx.updates.Uri`;
* ``response.completed`` → ``Finish(TOOL_CALLS if the response called
  functions else STOP, usage)``; ``response.incomplete``, or a completed
  event whose response says ``status: "incomplete"`` (vLLM's), → ``Finish``
  with the mapped ``incomplete_details.reason``;
* ``response.failed`` and ``error`` → :class:`~rafrx.errors.ProviderError`;
  a ``data: [DONE]`` line (OpenAI chat's end, which some servers add) ends
  the stream as the end of the input does.

Example:
    >>> from rafrx.sse import EventFields, ServerSentEvent, event_of
    >>> d = OpenAIResponsesDialect()
    >>> d.feed(ServerSentEvent(data='{"type": "response.output_text.delta", "delta": "Hi"}'))
    [TextDelta(delta='Hi')]
    >>> d.feed(ServerSentEvent(data='{"type": "response.completed", "response": {}}'))
    [Finish(finish_reason=<FinishReason.STOP: 'stop'>, usage=None)]
"""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

from rafrx import response
from rafrx.errors import IncompleteStream
from rafrx.messages import (
    CUSTOM_TOOL_CALL_REF,
    FUNCTION_CALL_REF,
    MESSAGE_REF,
    OPENAI_SERVER_TOOL_ITEMS,
)
from rafrx.operators._split_legacy_delta import unique_call_id
from rafrx.response import FinishReason
from rafrx.sources.dialects._common import (
    CUSTOM_INPUT_HEAD,
    CUSTOM_INPUT_TAIL,
    as_int,
    as_str,
    end_marker,
    error_event,
    get_list,
    get_object,
    json_escaped,
    load_object,
    malformed,
    openai_usage,
    provider_error,
    untagged,
)
from rafrx.sse import EventFields, ServerSentEvent, event_of
from rafrx.updates import (
    AgentResponseUpdate,
    Finish,
    ReasoningDelta,
    ResponseMetadata,
    TextDelta,
    ToolApprovalRequest,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Uri,
    Usage,
)

__all__ = ["OpenAIResponsesDialect", "responses_usage"]


def responses_usage(usage: dict[str, Any]) -> response.Usage:
    """Map a Responses ``usage`` object to :class:`rafrx.Usage`.

    Example:
        >>> responses_usage({"input_tokens": 4, "output_tokens": 6, "total_tokens": 10,
        ...                  "output_tokens_details": {"reasoning_tokens": 2}})
        Usage(prompt_tokens=4, completion_tokens=6, total_tokens=10, reasoning_tokens=2, \
cached_tokens=None)
    """
    return openai_usage(usage, prompt="input", completion="output")


_CALLS = ("function_call", "custom_tool_call")


class _Call:
    """A function call output item (or a custom tool call item)."""

    __slots__ = ("call_id", "custom", "ended", "got_args", "named")

    def __init__(self, call_id: str, custom: bool) -> None:
        self.call_id = call_id
        self.custom = custom  # its input is free-form text: the arguments wrap it
        self.got_args = False
        self.ended = False
        self.named = False  # its output item's id was sent (a FUNCTION_CALL_REF)


def _event_type(event: ServerSentEvent, data: dict[str, Any]) -> str:
    kind = data.get("type")
    return kind if isinstance(kind, str) else event.event


class OpenAIResponsesDialect:
    """Responses API events → updates; see the module docstring for the rules."""

    __slots__ = (
        "_annotations",
        "_call_keys",
        "_call_suffixes",
        "_calls",
        "_done",
        "_early_refs",
        "_finished_messages",
        "_meta_sent",
        "_owed",
        "_placed",
        "_reasoned_at",
        "_reasoning_finals",
        "_reasoning_items",
        "_reasoning_streamed",
        "_streamed_text",
        "_texted",
        "_texted_at",
        "_whole_sent",
    )

    def __init__(self) -> None:
        self._done = False
        self._owed: response.Usage | None = None  # a failed response's usage (salvage())
        self._meta_sent = False
        self._streamed_text = False  # a text delta came: the .done events repeat it
        self._texted: set[str | None] = set()  # the message items whose text was sent
        self._texted_at: set[int] = set()  # and their output indexes
        self._reasoned_at: set[int] = set()  # those of the items whose reasoning was sent
        self._reasoning_streamed: set[str | None] = set()  # items whose reasoning had deltas
        self._reasoning_finals: set[str | None] = set()  # items whose .done text was sent
        self._finished_messages = _Items()  # the message items done
        self._reasoning_items = _Items()  # the reasoning items done (whole)
        # The items whose whole text their finished item brought (no part came before):
        # a part's .done coming after it repeats it.
        self._whole_sent = _Items()
        # A reasoning or a server tool's item came: the output items' places and ids
        # are kept (the API pairs a reasoning item with the item after it; a server
        # item goes back in its place), those before it named when it comes.
        self._placed = False
        self._early_refs: list[tuple[int | None, dict[str, Any]]] = []  # (output index, ref)
        self._calls: dict[str, _Call] = {}  # output item id → call
        self._call_keys: dict[str, str] = {}  # call id → its key in _calls
        self._call_suffixes: dict[str, int] = {}  # a reused call id → the next suffix to try
        self._annotations: dict[tuple[str, int], int] = {}  # (item id, part) → count sent

    @property
    def done(self) -> bool:
        """True once ``response.completed`` or ``response.incomplete`` was seen."""
        return self._done

    def feed(self, event: ServerSentEvent) -> list[AgentResponseUpdate]:
        """Translate one event; see :class:`~rafrx.sources.dialects.Dialect`."""
        if self._done:
            return []
        if event.event == "error":
            raise error_event(event)
        ended = end_marker(event)  # (blank data, or the [DONE] gateways add)
        if ended is not None:
            return self.close() if ended else []
        data = load_object(event)
        kind = _event_type(event, data)
        if kind == "error":
            raise provider_error(event, get_object(event, data, "error") or untagged(data))
        if kind == "response.failed":
            body = get_object(event, data, "response") or {}
            error = dict(get_object(event, body, "error") or {})
            error.setdefault("type", error.get("code"))  # failed responses carry only a code
            usage = body.get("usage")
            if type(usage) is dict:
                self._owed = responses_usage(usage)
            raise provider_error(event, error, "the response failed")
        handler = _HANDLERS.get(kind)
        if handler is None:
            return []
        return handler(self, event, data)

    def _feed_fields(self, fields: EventFields) -> list[AgentResponseUpdate]:
        """:meth:`feed` for an event given by its fields (:class:`UpdateDecoder
        <rafrx.sources.UpdateDecoder>`'s way); every event is read from a
        :class:`ServerSentEvent`."""
        return self.feed(event_of(fields))

    def salvage(self) -> list[AgentResponseUpdate]:
        """After the stream failed: the usage ``response.failed`` reported, if it did;
        see :meth:`UpdateDecoder.salvage`."""
        usage, self._owed = self._owed, None
        return [] if usage is None else [Usage(usage)]

    def close(self) -> list[AgentResponseUpdate]:
        """End of input.

        Raises:
            IncompleteStream: Neither ``response.completed`` nor
                ``response.incomplete`` came.
        """
        if self._done:
            return []
        raise IncompleteStream("the stream ended without response.completed")

    # ------------------------------------------------------------ handlers

    def _created(self, event: ServerSentEvent, data: dict[str, Any]) -> list[AgentResponseUpdate]:
        if self._meta_sent:
            return []
        body = get_object(event, data, "response") or {}
        response_id, model = as_str(body.get("id")), as_str(body.get("model"))
        if response_id is None and model is None:
            return []
        self._meta_sent = True
        return [ResponseMetadata(response_id, model)]

    def _text(self, event: ServerSentEvent, data: dict[str, Any]) -> list[AgentResponseUpdate]:
        self._streamed_text = True
        self._note_text(data)
        delta = as_str(data.get("delta"))
        return [] if delta is None else [TextDelta(delta)]

    def _text_done(self, event: ServerSentEvent, data: dict[str, Any]) -> list[AgentResponseUpdate]:
        """The whole text of a part, from a server that sent it without deltas."""
        if self._streamed_text or self._whole_sent.has(as_str(data.get("item_id")), data):
            return []  # (its finished item, come first, brought the whole text)
        refusal = _event_type(event, data) == "response.refusal.done"
        text = as_str(data.get("refusal" if refusal else "text"))
        self._note_text(data)
        return [TextDelta(text)] if text else []

    def _note_text(self, data: dict[str, Any]) -> None:
        """The text of the message this event is about has been sent."""
        self._texted.add(as_str(data.get("item_id")))
        index = data.get("output_index")
        if type(index) is int:
            self._texted_at.add(index)

    def _was_texted(self, item_id: str, index: Any) -> bool:
        return bool(
            item_id in self._texted
            or None in self._texted  # (a server that sends deltas without item ids)
            or (type(index) is int and index in self._texted_at)
        )

    def _reasoning(self, event: ServerSentEvent, data: dict[str, Any]) -> list[AgentResponseUpdate]:
        self._reasoning_streamed.add(as_str(data.get("item_id")))
        self._reasoned_at.update(_index_of(data))
        delta = as_str(data.get("delta"))
        return [] if delta is None else [ReasoningDelta(delta)]

    def _reasoning_done(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        """A reasoning part's whole text, from a server that sent it without deltas."""
        item_id = as_str(data.get("item_id"))
        if item_id in self._reasoning_streamed or None in self._reasoning_streamed:
            return []
        if self._whole_sent.has(item_id, data):
            return []  # (its finished item, come first, brought the whole text)
        if item_id not in self._reasoning_finals and self._reasoned_at & set(_index_of(data)):
            return []  # another id for an item whose reasoning came (mistral.rs)
        self._reasoning_finals.add(item_id)
        self._reasoned_at.update(_index_of(data))
        text = as_str(data.get("text"))
        return [ReasoningDelta(text)] if text else []

    def _reasoning_of(
        self, event: ServerSentEvent, item: dict[str, Any], data: dict[str, Any]
    ) -> list[ReasoningDelta]:
        """The text of a finished reasoning ``item`` (of the event ``data``) none of
        whose text came before."""
        item_id = as_str(item.get("id"))
        sent = self._reasoning_streamed | self._reasoning_finals
        if item_id in sent or None in self._reasoning_streamed:
            return []
        if self._reasoned_at & set(_index_of(data)):
            return []
        parts = [*get_list(event, item, "summary"), *get_list(event, item, "content")]
        text = "".join(as_str(p.get("text")) or "" for p in parts if isinstance(p, dict))
        if not text:
            return []
        self._whole_sent.add(item_id, data)
        return [ReasoningDelta(text)]

    def _start_call(
        self, event: ServerSentEvent, item: dict[str, Any], *, added: bool = False
    ) -> list[AgentResponseUpdate]:
        """Start the call ``item`` is, unless it is known. An item an
        ``output_item.added`` event brings under an id of its own is a new call,
        even with a known ``call_id``; a finished item (``output_item.done``, the
        final output) with a known ``call_id`` is that call, whatever its id
        (mistral.rs gives each stage its own, LiteLLM's final output one of its own)."""
        item_id = as_str(item.get("id"))
        call_id = as_str(item.get("call_id")) or item_id
        name = as_str(item.get("name"))
        if call_id is None or name is None:
            raise malformed(event, f"a {item.get('type')} item needs a 'call_id' and a 'name'")
        known = self._key(item_id, call_id)
        if known is not None and not (added and item_id is not None and item_id != known):
            return []  # known: by its item id, or (an item first sent without one) its call id
        if call_id in self._call_keys:  # another item repeating a call id: a call of its own
            call_id = unique_call_id(call_id, self._call_keys, self._call_suffixes)
        custom = item.get("type") == "custom_tool_call"
        key = item_id or call_id
        self._calls[key] = _Call(call_id, custom)
        self._call_keys[call_id] = key
        if custom:
            return [ToolCallStart(call_id, name), ToolCallArgs(call_id, CUSTOM_INPUT_HEAD)]
        return [ToolCallStart(call_id, name)]

    def _key(self, item_id: str | None, call_id: str | None) -> str | None:
        """The key of a call already started: its item id, else the one with ``call_id``."""
        if item_id is not None and item_id in self._calls:
            return item_id
        return None if call_id is None else self._call_keys.get(call_id)

    def _end_call(self, item_id: str | None, source: dict[str, Any]) -> list[AgentResponseUpdate]:
        """End a call; ``source`` (the item or the ``.done`` event) may hold its arguments."""
        call = None if item_id is None else self._calls.get(item_id)
        if call is None or call.ended:
            return []
        call.ended = True
        arguments = source.get("input" if call.custom else "arguments")
        out: list[AgentResponseUpdate] = []
        if not call.got_args and isinstance(arguments, str) and arguments:
            text = json_escaped(arguments) if call.custom else arguments
            out.append(ToolCallArgs(call.call_id, text))
        if call.custom:
            out.append(ToolCallArgs(call.call_id, CUSTOM_INPUT_TAIL))
        out.append(ToolCallEnd(call.call_id))
        return out

    def _item_added(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        item = get_object(event, data, "item") or {}
        if item.get("type") not in _CALLS:
            return []
        return self._start_call(event, item, added=True)

    def _ref(self, ref: dict[str, Any], data: dict[str, Any]) -> list[AgentResponseUpdate]:
        """An output item's id (the event ``data`` ended it), for it to go back paired
        with the reasoning item before it, and in its place among server items; one
        before the first reasoning or server item waits for it (none may come)."""
        if self._placed:
            return [ReasoningDelta("", provider_data=ref)]
        index = data.get("output_index")
        self._early_refs.append((index if type(index) is int else None, ref))
        return []

    def _place(self, item: dict[str, Any], data: dict[str, Any]) -> list[AgentResponseUpdate]:
        """A reasoning or server item (the event ``data`` ended it), kept whole, after the
        refs of the items before it in the output; those of the items after it (which
        ended first: OpenRouter's order) go after it."""
        self._placed = True
        index = data.get("output_index")
        refs, self._early_refs = self._early_refs, []
        before = [ref for at, ref in refs if not _after(at, index)]
        after = [ref for at, ref in refs if _after(at, index)]
        return [ReasoningDelta("", provider_data=block) for block in (*before, item, *after)]

    def _args_delta(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        item_id = as_str(data.get("item_id"))
        call = None if item_id is None else self._calls.get(item_id)
        delta = as_str(data.get("delta"))
        if call is None or call.ended or delta is None:
            return []
        call.got_args = True
        return [ToolCallArgs(call.call_id, json_escaped(delta) if call.custom else delta)]

    def _args_done(self, event: ServerSentEvent, data: dict[str, Any]) -> list[AgentResponseUpdate]:
        return self._end_call(as_str(data.get("item_id")), data)

    def _item_done(self, event: ServerSentEvent, data: dict[str, Any]) -> list[AgentResponseUpdate]:
        item = get_object(event, data, "item") or {}
        kind = item.get("type")
        item_id = as_str(item.get("id"))
        if kind in _CALLS:
            out = self._start_call(event, item)  # no-op when output_item.added came
            key = self._key(item_id, as_str(item.get("call_id")))
            call = None if key is None else self._calls[key]
            out += self._end_call(key, item)
            if call is None or call.named:
                return out
            if call.custom:  # marked whether a reasoning item came or not
                call.named = True
                ref = {"type": CUSTOM_TOOL_CALL_REF, "call_id": call.call_id}
                if item_id is not None:
                    ref["id"] = item_id
                out.append(ReasoningDelta("", provider_data=ref))
            elif item_id is not None:
                call.named = True
                ref = {"type": FUNCTION_CALL_REF, "id": item_id, "call_id": call.call_id}
                out += self._ref(ref, data)
            return out
        if kind == "reasoning":
            if self._reasoning_items.has(item_id, data):
                return []  # (done already, maybe under another id: the final output)
            self._reasoning_items.add(item_id, data)
            # (the items after it go back paired with it, by id: one without cannot go)
            placed = [] if item_id is None else self._place(item, data)
            return [*self._reasoning_of(event, item, data), *placed]
        if kind == "mcp_approval_request" and item_id is not None:
            # (the item goes back in its place, before the answer execute_tools adds)
            return [self._approval_request(item_id, item), *self._place(item, data)]
        if kind in OPENAI_SERVER_TOOL_ITEMS and item_id is not None:
            return self._place(item, data)  # to go back, in its place
        if kind == "message" and item_id is not None:
            if self._finished_messages.has(item_id, data):
                return []  # (done already, maybe under another id: mistral.rs)
            self._finished_messages.add(item_id, data)
            out = []
            text: list[str] = []
            refused = False
            for index, part in enumerate(get_list(event, item, "content")):
                if isinstance(part, dict):
                    out += self._new_annotations(event, item_id, index, part)
                    text.append(as_str(part.get("text") or part.get("refusal")) or "")
                    refused = refused or part.get("type") == "refusal"
            if not self._was_texted(item_id, data.get("output_index")) and any(text):
                # A server that sends the text in the finished item only.
                self._note_text({"item_id": item_id, "output_index": data.get("output_index")})
                self._whole_sent.add(item_id, data)
                out.insert(0, TextDelta("".join(text)))
            said = {"type": MESSAGE_REF, "id": item_id, "text": "".join(text)}
            # (a refusal goes back as one, not as something the model said)
            return out + self._ref({**said, "refusal": True} if refused else said, data)
        return []

    @staticmethod
    def _approval_request(item_id: str, item: dict[str, Any]) -> ToolApprovalRequest:
        """A remote MCP tool's call waiting for the user's approval (its id answers it)."""
        arguments: Any = copy.deepcopy(item.get("arguments"))  # (the item goes back as it came)
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError, RecursionError):  # else shown as sent
                arguments = json.loads(arguments)
        label = as_str(item.get("server_label"))
        return ToolApprovalRequest(
            item_id,
            as_str(item.get("name")) or "",
            arguments,
            "" if label is None else f"a tool of the MCP server {label!r}",
        )

    def _new_annotations(
        self, event: ServerSentEvent, item_id: str, index: int, part: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        annotations = get_list(event, part, "annotations")
        key = (item_id, index)
        sent = self._annotations.get(key, 0)
        self._annotations[key] = max(sent, len(annotations))
        return [u for a in annotations[sent:] if (u := _uri(a)) is not None]

    def _part_done(self, event: ServerSentEvent, data: dict[str, Any]) -> list[AgentResponseUpdate]:
        item_id = as_str(data.get("item_id"))
        index = as_int(data.get("content_index"))
        part = get_object(event, data, "part")
        if item_id is None or index is None or part is None:
            return []
        return self._new_annotations(event, item_id, index, part)

    def _annotation(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        item_id = as_str(data.get("item_id"))
        index = as_int(data.get("content_index"))
        if item_id is not None and index is not None:
            key = (item_id, index)
            self._annotations[key] = self._annotations.get(key, 0) + 1
        uri = _uri(data.get("annotation"))
        return [] if uri is None else [uri]

    def _completed(self, event: ServerSentEvent, data: dict[str, Any]) -> list[AgentResponseUpdate]:
        body = get_object(event, data, "response") or {}
        cut = body.get("status") == "incomplete"  # (vLLM's way to say response.incomplete)
        return self._end(event, body, cut=cut)

    def _incomplete(
        self, event: ServerSentEvent, data: dict[str, Any]
    ) -> list[AgentResponseUpdate]:
        return self._end(event, get_object(event, data, "response") or {}, cut=True)

    def _end(
        self, event: ServerSentEvent, body: dict[str, Any], *, cut: bool
    ) -> list[AgentResponseUpdate]:
        """The response ended (``cut``: incomplete): what only its final output
        holds, then the finish."""
        self._done = True
        out: list[AgentResponseUpdate] = []
        finished: tuple[str, ...] = ("message", "reasoning")  # (a cut call stays open)
        finished = finished if cut else (*_CALLS, *finished)
        for index, item in enumerate(get_list(event, body, "output")):
            if isinstance(item, dict) and item.get("type") in finished:
                # A call, message or reasoning item no output_item event brought (a
                # minimal compatible server): in the final output only, delivered from there.
                out += self._item_done(event, {"item": item, "output_index": index})
        if cut:
            details = get_object(event, body, "incomplete_details") or {}
            reason = FinishReason.from_provider(as_str(details.get("reason")))
        else:
            reason = FinishReason.TOOL_CALLS if self._calls else FinishReason.STOP
        out.append(Finish(reason, self._usage(event, body)))
        return out

    def _usage(self, event: ServerSentEvent, body: dict[str, Any]) -> response.Usage | None:
        usage = get_object(event, body, "usage")
        return None if usage is None else responses_usage(usage)


class _Items:
    """Output items, known by id or by output index (a server may give an item another
    id in each event that names it: mistral.rs, LiteLLM's final output)."""

    __slots__ = ("at", "ids")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.at: set[int] = set()

    def add(self, item_id: str | None, data: dict[str, Any]) -> None:
        """Know the item ``item_id`` (none: by index only) the event ``data`` is about."""
        if item_id is not None:
            self.ids.add(item_id)
        self.at.update(_index_of(data))

    def has(self, item_id: str | None, data: dict[str, Any]) -> bool:
        """Whether the item ``item_id`` the event ``data`` is about is known."""
        return item_id in self.ids or not self.at.isdisjoint(_index_of(data))


def _after(at: int | None, index: Any) -> bool:
    """Whether the output index ``at`` comes after ``index`` (both known)."""
    return at is not None and type(index) is int and at > index


def _index_of(data: dict[str, Any]) -> tuple[int, ...]:
    """The event's ``output_index``, as a tuple of none or one."""
    index = data.get("output_index")
    return (index,) if type(index) is int else ()


def _uri(annotation: Any) -> Uri | None:
    if not isinstance(annotation, dict):
        return None
    url = as_str(annotation.get("url"))
    return None if url is None else Uri(url)


_HANDLERS = {
    "response.created": OpenAIResponsesDialect._created,
    "response.in_progress": OpenAIResponsesDialect._created,
    "response.output_text.delta": OpenAIResponsesDialect._text,
    "response.refusal.delta": OpenAIResponsesDialect._text,
    "response.output_text.done": OpenAIResponsesDialect._text_done,
    "response.refusal.done": OpenAIResponsesDialect._text_done,
    "response.reasoning_summary_text.delta": OpenAIResponsesDialect._reasoning,
    "response.reasoning_text.delta": OpenAIResponsesDialect._reasoning,
    "response.reasoning_summary_text.done": OpenAIResponsesDialect._reasoning_done,
    "response.reasoning_text.done": OpenAIResponsesDialect._reasoning_done,
    "response.output_item.added": OpenAIResponsesDialect._item_added,
    "response.function_call_arguments.delta": OpenAIResponsesDialect._args_delta,
    "response.function_call_arguments.done": OpenAIResponsesDialect._args_done,
    "response.custom_tool_call_input.delta": OpenAIResponsesDialect._args_delta,
    "response.custom_tool_call_input.done": OpenAIResponsesDialect._args_done,
    "response.output_item.done": OpenAIResponsesDialect._item_done,
    "response.content_part.done": OpenAIResponsesDialect._part_done,
    "response.output_text.annotation.added": OpenAIResponsesDialect._annotation,
    "response.completed": OpenAIResponsesDialect._completed,
    "response.incomplete": OpenAIResponsesDialect._incomplete,
}
