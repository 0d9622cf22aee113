"""Chat messages: what goes into an LLM call and what a turn adds to history.

Example:
    >>> msg = ChatMessage.assistant_with_tools(
    ...     "Reading it.", [ToolCall("call_1", "read_file", {"path": "a.py"})])
    >>> msg.to_openai()["tool_calls"][0]["function"]
    {'name': 'read_file', 'arguments': '{"path": "a.py"}'}
    >>> ChatMessage.from_openai(msg.to_openai()) == msg
    True

Messages convert to and from the OpenAI chat wire format (:meth:`ChatMessage.to_openai`,
:meth:`ChatMessage.from_openai`) and the Anthropic Messages format
(:func:`to_anthropic`, :func:`from_anthropic`). ``source`` is rafrx's own
bookkeeping (see :class:`MessageSource`) and never goes on the wire.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import json
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from rafrx._finite import finite, is_strict_json, strict_dumps
from rafrx.errors import InvalidToolArguments, invalid_arguments

__all__ = [
    "ANTHROPIC_THINKING",
    "CONTAINER_REF",
    "CUSTOM_TOOL_CALL_REF",
    "FUNCTION_CALL_REF",
    "LOST_RESULT",
    "MCP_APPROVAL_RESPONSE",
    "MESSAGE_REF",
    "OPENAI_CALL_EXTRA",
    "OPENAI_REASONING",
    "OPENAI_SERVER_TOOL_ITEMS",
    "PAUSE_TURN_REF",
    "REASONING_DETAILS",
    "TEXT_REF",
    "THINKING_BLOCKS",
    "TOOL_USE_REF",
    "ChatMessage",
    "MessageRole",
    "MessageSource",
    "ToolCall",
    "answers_approvals",
    "custom_call_ids",
    "custom_input",
    "from_anthropic",
    "is_paused",
    "paired",
    "pending_container",
    "provider_data_of",
    "to_anthropic",
    "to_openai_chat",
    "with_call_ids",
]

_log = logging.getLogger(__name__)


def _block_type(block: Any) -> str | None:
    """The ``type`` of a ``provider_data`` block or wire item, ``None`` when it has none."""
    kind = block.get("type") if isinstance(block, Mapping) else None
    return kind if isinstance(kind, str) else None


def _is_rafrx_mark(block: Any) -> bool:
    """Whether a ``provider_data`` block is one of rafrx's own marks (:data:`TEXT_REF`,
    :data:`MESSAGE_REF` …: ``rafrx.``-typed), not a provider's block."""
    return (_block_type(block) or "").startswith("rafrx.")


class MessageRole(enum.StrEnum):
    """Who speaks."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class MessageSource(enum.StrEnum):
    """Where a message came from; history providers use it to avoid re-saving."""

    EXTERNAL = "external"
    CHAT_HISTORY = "chat_history"
    CONTEXT_PROVIDER = "context_provider"
    TOOL_RESULT = "tool_result"


@final
@attrs.frozen
class ToolCall:
    """A tool call the model made; ``arguments`` is the parsed JSON.

    When the arguments were not valid JSON, ``arguments`` is ``None``,
    ``error`` says why and ``raw_arguments`` keeps the exact string. A call
    the response cut short (the model's token limit hit mid-arguments, or the
    stream failed) has ``complete`` false, ``error`` saying so,
    ``raw_arguments`` and ``partial_value`` (what the arguments were on
    their way to, a preview); it never runs. A call whose arguments had ended
    whole when its stream failed (a finish reason, ``content_block_stop`` or
    ``function_call_arguments.done`` came, then a stall, a broken connection
    or an error event) is complete, with its parsed arguments, in the error's
    ``.partial``; it never ran either: no result answers it.

    On the wire parsed arguments are always strict JSON: a number JSON cannot
    write (``1e400`` parses to infinity, ``NaN``) goes as the raw text when
    the call has it and that text is strict JSON (``1e400`` is), else as
    ``null`` (as JavaScript's ``JSON.stringify`` does).

    Example:
        >>> ToolCall("c1", "f", {"big": float("inf"), "n": 1}).arguments_json()
        '{"big": null, "n": 1}'
    """

    id: str
    name: str
    arguments: Any = attrs.field(factory=dict)
    raw_arguments: str | None = attrs.field(default=None, kw_only=True)
    error: str | None = attrs.field(default=None, kw_only=True)
    complete: bool = attrs.field(default=True, kw_only=True)
    partial_value: Any = attrs.field(default=None, kw_only=True)

    @property
    def invalid_arguments(self) -> InvalidToolArguments | None:
        """The call's failure as an :class:`~rafrx.errors.InvalidToolArguments`
        (``call_id``, ``raw``) when it is complete but its arguments did not
        parse; ``None`` otherwise (a call cut short says so in ``error``).

        Example:
            >>> ToolCall("c1", "f", None, raw_arguments="{oops", error="bad JSON").invalid_arguments
            InvalidToolArguments("invalid arguments for tool 'f': bad JSON")
        """
        if self.error is None or not self.complete:
            return None
        return invalid_arguments(self.id, self.name, self.error, self.raw_arguments)

    def to_dict(self) -> dict[str, Any]:
        """Every field as a JSON-ready dict (NaN and the infinities as ``None``);
        :meth:`from_dict` reads it back.

        Example:
            >>> ToolCall("c1", "f", {"n": 1}).to_dict()["arguments"]
            {'n': 1}
        """
        return {name: finite(getattr(self, name)) for name in _CALL_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        """The call :meth:`to_dict` wrote (``id`` and ``name`` required, any other
        field may be left out; the values are copied, not shared with ``data``).

        Example:
            >>> call = ToolCall("c1", "f", None, raw_arguments="{oops", error="bad JSON")
            >>> ToolCall.from_dict(call.to_dict()) == call
            True
        """
        known = {k: finite(v) for k, v in data.items() if k in _CALL_FIELDS}
        return cls(**known)

    def arguments_json(self) -> str:
        """The arguments as the JSON string the wire formats carry."""
        if self.raw_arguments is not None and (self.error is not None or self.arguments is None):
            return self.raw_arguments
        try:
            return json.dumps(self.arguments, ensure_ascii=False, allow_nan=False)
        except ValueError:  # NaN or an infinity: no JSON text
            if self.raw_arguments is not None and is_strict_json(self.raw_arguments):
                return self.raw_arguments  # e.g. 1e400, as the model wrote it
            return strict_dumps(self.arguments, ensure_ascii=False)


_CALL_FIELDS: Final = tuple(f.name for f in attrs.fields(ToolCall))


def _text(value: str | None) -> str:
    """A message's content: text, ``None`` (OpenAI's for an assistant message with only
    tool calls) read as ``""``; anything else is refused here, not when it is sent."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(
            f"a ChatMessage's content is text (str), not a {type(value).__name__}; "
            "ChatMessage.from_openai and from_anthropic read content parts"
        )
    return value


def _role(value: MessageRole | str) -> MessageRole:
    """``MessageRole(value)``; a role already is kept without the enum's call (two
    Python calls: every message ``aggregate()`` builds)."""
    return value if type(value) is MessageRole else MessageRole(value)


def _source_or_none(value: MessageSource | str | None) -> MessageSource | None:
    return None if value is None else MessageSource(value)


def _tuple_or_none(value: Iterable[ToolCall] | None) -> tuple[ToolCall, ...] | None:
    return None if value is None else tuple(value)


@final
@attrs.frozen
class ChatMessage:
    """One message of a conversation (OpenAI-compatible shape).

    Beyond the OpenAI fields, assistant messages keep ``reasoning`` (the
    reasoning text) and ``provider_data`` (opaque blocks such as Anthropic
    thinking signatures) because DeepSeek and Anthropic reject a tool-loop
    continuation that drops them. A tool message whose call failed has
    ``is_error`` set: Anthropic gets it as the ``tool_result``'s ``is_error``,
    the other APIs have no such field and read the ``"Error: …"`` text alone.

    Example:
        >>> call = ToolCall("call_1", "get_weather", {"city": "Paris"})
        >>> turn = [ChatMessage.user("Weather?"), ChatMessage.assistant_with_tools("", [call]),
        ...         ChatMessage.tool("sunny", "call_1")]
        >>> turn[1].to_openai()["tool_calls"][0]["function"]["arguments"]
        '{"city": "Paris"}'
        >>> ChatMessage.from_openai(turn[2].to_openai()).tool_call_id
        'call_1'
    """

    role: MessageRole = attrs.field(converter=_role)
    content: str = attrs.field(default="", converter=_text)
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = attrs.field(default=None, converter=_tuple_or_none)
    tool_call_id: str | None = None
    source: MessageSource | None = attrs.field(default=None, converter=_source_or_none)
    reasoning: str | None = attrs.field(default=None, kw_only=True)
    provider_data: Mapping[str, Any] | None = attrs.field(default=None, kw_only=True)
    is_error: bool = attrs.field(default=False, kw_only=True)

    # ------------------------------------------------------------ constructors

    @classmethod
    def system(cls, text: str, *, source: MessageSource | None = None) -> ChatMessage:
        """A system instruction."""
        return cls(MessageRole.SYSTEM, text, source=source)

    @classmethod
    def user(cls, text: str, *, source: MessageSource | None = None) -> ChatMessage:
        """A user message."""
        return cls(MessageRole.USER, text, source=source)

    @classmethod
    def assistant(cls, text: str, *, source: MessageSource | None = None) -> ChatMessage:
        """An assistant reply with text only."""
        return cls(MessageRole.ASSISTANT, text, source=source)

    @classmethod
    def assistant_with_tools(
        cls, text: str, tool_calls: Iterable[ToolCall], *, source: MessageSource | None = None
    ) -> ChatMessage:
        """An assistant reply that calls tools."""
        return cls(MessageRole.ASSISTANT, text, tool_calls=tuple(tool_calls), source=source)

    @classmethod
    def tool(
        cls,
        result: str,
        call_id: str,
        *,
        source: MessageSource | None = MessageSource.TOOL_RESULT,
        is_error: bool = False,
    ) -> ChatMessage:
        """A tool's result, answering the call ``call_id`` (``is_error``: the call failed)."""
        return cls(MessageRole.TOOL, result, tool_call_id=call_id, source=source, is_error=is_error)

    def with_source(self, source: MessageSource | None) -> ChatMessage:
        """The same message marked with another source."""
        return attrs.evolve(self, source=source)

    # ------------------------------------------------------------ storage

    def to_dict(self) -> dict[str, Any]:
        """Every field as a JSON-ready dict, for keeping a history (a file, a
        database): :meth:`from_dict` gives back an equal message.

        Unlike :meth:`to_openai` nothing is left out: ``source``, ``is_error``
        and the ``provider_data`` blocks (thinking signatures, encrypted
        reasoning) a continuation needs. Fields at their default are omitted;
        NaN and the infinities go as ``None``.

        Example:
            >>> msg = ChatMessage.tool("sunny", "call_1")
            >>> msg.to_dict()
            {'role': 'tool', 'content': 'sunny', 'tool_call_id': 'call_1', 'source': 'tool_result'}
            >>> ChatMessage.from_dict(json.loads(json.dumps(msg.to_dict()))) == msg
            True
        """
        data: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.name is not None:
            data["name"] = self.name
        if self.tool_calls is not None:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.source is not None:
            data["source"] = self.source.value
        if self.reasoning is not None:
            data["reasoning"] = self.reasoning
        if self.provider_data is not None:
            data["provider_data"] = finite(self.provider_data)
        if self.is_error:
            data["is_error"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatMessage:
        """The message :meth:`to_dict` wrote (``role`` required; keys it does not
        know are ignored; the values are copied, not shared with ``data``).
        ``provider_data``'s lists of blocks come back as the tuples rafrx keeps them in.
        """
        calls = data.get("tool_calls")
        kept = data.get("provider_data")
        return cls(
            MessageRole(data["role"]),
            data.get("content", ""),
            name=data.get("name"),
            tool_calls=None if calls is None else [ToolCall.from_dict(c) for c in calls],
            tool_call_id=data.get("tool_call_id"),
            source=data.get("source"),  # (a str becomes a MessageSource)
            reasoning=data.get("reasoning"),
            provider_data=None
            if kept is None
            else {k: tuple(v) if isinstance(v, list) else v for k, v in finite(kept).items()},
            is_error=bool(data.get("is_error", False)),
        )

    # ------------------------------------------------------------ OpenAI wire

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat-completions message dict (arguments as JSON strings).

        ``reasoning`` goes out as ``reasoning_content`` (DeepSeek's field). A
        call without an id, and a TOOL message with a ``name`` but no
        ``tool_call_id``, go out as OpenAI's legacy ``function_call`` and
        ``function`` message (as :meth:`from_openai` reads them). A call's
        ``extra_content`` kept in ``provider_data`` goes back on the call, and
        a custom tool's call (:data:`CUSTOM_TOOL_CALL_REF`) as ``type: "custom"``.

        Example:
            >>> ChatMessage("tool", "12:00", name="now").to_openai()
            {'role': 'function', 'name': 'now', 'content': '12:00'}
        """
        if self.role is MessageRole.TOOL and self.tool_call_id is None and self.name is not None:
            return {"role": "function", "name": self.name, "content": self.content}
        out: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls and _is_legacy_call(self.tool_calls):
            call = self.tool_calls[0]
            out["function_call"] = {"name": call.name, "arguments": call.arguments_json()}
            out["content"] = self.content or None
        elif self.tool_calls:  # never "tool_calls": [] (OpenAI rejects an empty array)
            extras = _call_extras(self)  # (Gemini refuses a call without its signature)
            customs = custom_call_ids(self)
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "custom",
                    "custom": {"name": call.name, "input": custom_input(call)},
                }
                if call.id in customs
                else {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json()},
                    **({"extra_content": extras[call.id]} if call.id in extras else {}),
                }
                for call in self.tool_calls
            ]
            if not self.content:
                out["content"] = None
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.reasoning is not None:
            out["reasoning_content"] = self.reasoning
        details = self.provider_data.get(REASONING_DETAILS) if self.provider_data else None
        if details:  # OpenRouter's, as they came
            out["reasoning_details"] = [copy.deepcopy(d) for b in details for d in b["details"]]
        thinking = self.provider_data.get(THINKING_BLOCKS) if self.provider_data else None
        if thinking:  # LiteLLM's, as they came
            out["thinking_blocks"] = [copy.deepcopy(t) for b in thinking for t in b["blocks"]]
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ChatMessage:
        """Build a message from an OpenAI chat message dict.

        Content given as a list of parts is joined; tool-call arguments are
        parsed (invalid JSON keeps the raw string and an ``error``). The
        ``developer`` role (OpenAI's name for system instructions to newer
        models) is read as SYSTEM. The legacy ``function_call`` of an
        assistant becomes a call with no id, the ``function`` message
        answering it a TOOL message with its ``name`` and no ``tool_call_id``;
        a call's ``extra_content`` is kept in ``provider_data``
        (:data:`OPENAI_CALL_EXTRA`), a custom tool's call (``type: "custom"``)
        has the arguments ``{"input": text}`` and a :data:`CUSTOM_TOOL_CALL_REF`;
        :meth:`to_openai` sends all of it back as it came, and
        :func:`with_call_ids` pairs them for the other wire formats.

        Example:
            >>> msg = ChatMessage.from_openai({"role": "developer", "content": "Be brief."})
            >>> msg.role, msg.content
            (<MessageRole.SYSTEM: 'system'>, 'Be brief.')
        """
        calls = data.get("tool_calls")
        if calls is None and data.get("function_call") is not None:
            calls = [{"function": data["function_call"]}]  # legacy: one call, no id
        role = data["role"]
        extras = tuple(
            {"type": "tool_call_extra", "call_id": c["id"], "extra_content": c["extra_content"]}
            for c in calls or ()
            if isinstance(c, Mapping) and c.get("id") and c.get("extra_content") is not None
        )
        provider_data: dict[str, Any] = {}
        if extras:
            provider_data[OPENAI_CALL_EXTRA] = copy.deepcopy(extras)
        customs = tuple(  # as the stream marks them, for to_openai and the Responses API
            {"type": CUSTOM_TOOL_CALL_REF, "call_id": c["id"]}
            for c in calls or ()
            if isinstance(c, Mapping) and c.get("id") and isinstance(c.get("custom"), Mapping)
        )
        if customs:
            provider_data[OPENAI_REASONING] = customs
        if data.get("reasoning_details"):  # OpenRouter's, as to_openai sends them
            details = copy.deepcopy(list(data["reasoning_details"]))
            provider_data[REASONING_DETAILS] = ({"type": REASONING_DETAILS, "details": details},)
        if data.get("thinking_blocks"):  # LiteLLM's, as to_openai sends them
            blocks = copy.deepcopy(list(data["thinking_blocks"]))
            provider_data[THINKING_BLOCKS] = ({"type": THINKING_BLOCKS, "blocks": blocks},)
        return cls(
            _ROLE_ALIASES.get(role) or MessageRole(role),
            _text_of(data.get("content")) or _refusal_of(data),
            name=data.get("name"),
            tool_calls=[_call_from_openai(c) for c in calls] if calls else None,
            tool_call_id=data.get("tool_call_id"),
            reasoning=_reasoning_of(data),
            provider_data=provider_data or None,
        )

    def _repr_html_(self) -> str:
        from rafrx.notebook import message_html

        return message_html(self)


_ROLE_ALIASES = {"developer": MessageRole.SYSTEM, "function": MessageRole.TOOL}
"""OpenAI chat roles that are another name for one of ours."""


def _is_legacy_call(calls: tuple[ToolCall, ...]) -> bool:
    """Whether ``calls`` is a legacy OpenAI ``function_call``: one call, no id."""
    return len(calls) == 1 and not calls[0].id


#: The result :func:`paired` gives a call whose own result was lost.
LOST_RESULT = "the result of this call was lost (it is not in the history)"


def _reasoning_of(message: Mapping[str, Any]) -> str | None:
    """An OpenAI-style message's reasoning: DeepSeek's ``reasoning_content``, or the
    ``reasoning`` of Ollama, vLLM and OpenRouter (as the stream dialect reads them).

    A blank ``reasoning_content`` beside a ``reasoning`` text (a proxy that
    fills both fields) gives way to the text.

    Example:
        >>> _reasoning_of({"role": "assistant", "reasoning": "Greet."})
        'Greet.'
        >>> _reasoning_of({"role": "assistant", "reasoning_content": "", "reasoning": "Greet."})
        'Greet.'
    """
    fields = (message.get("reasoning_content"), message.get("reasoning"))
    texts = [text for text in fields if isinstance(text, str)]
    return next((text for text in texts if text), texts[0] if texts else None)


def checked_messages(value: Any, expected: str) -> tuple[ChatMessage, ...]:
    """``value`` (a ChatMessage, or an iterable of them) as a tuple of ChatMessages; else
    a ``TypeError`` saying ``expected`` and what was given (and how to read a dict).

    Example:
        >>> checked_messages([{"role": "user", "content": "hi"}], "messages are ChatMessages")
        Traceback (most recent call last):
        ...
        TypeError: messages are ChatMessages; item 0 is {'role': 'user', 'content': 'hi'}, a dict (ChatMessage.from_openai reads an OpenAI message dict)
    """  # noqa: E501
    hint = " (ChatMessage.from_openai reads an OpenAI message dict)"
    if isinstance(value, ChatMessage):
        return (value,)
    if isinstance(value, str | Mapping) or not isinstance(value, Iterable):
        said = type(value).__name__ + (hint if isinstance(value, Mapping) else "")
        raise TypeError(f"{expected}, not a {said}")
    messages = tuple(value)
    for i, message in enumerate(messages):
        if not isinstance(message, ChatMessage):
            said = f"a {type(message).__name__}" + (hint if isinstance(message, Mapping) else "")
            raise TypeError(f"{expected}; item {i} is {message!r:.80}, {said}")
    return messages


def paired(messages: Iterable[ChatMessage]) -> list[ChatMessage]:
    """The messages with every tool call answered right after its assistant message.

    What every provider requires, and a history may break (a save that
    failed half-way, rows edited or trimmed): the tool results that follow an
    assistant message with tool calls are put in call order, a call with no
    result gets an error result (:data:`LOST_RESULT`), and a result that
    answers no call just before it is dropped; each repair is logged. A call
    without an id (OpenAI's legacy ``function_call``) is answered by a result
    without one, of its name; a system message among the results goes after
    them.

    Example:
        >>> call = ToolCall("c1", "now", {})
        >>> fixed = paired([ChatMessage.tool("12:00", "c0"),
        ...                 ChatMessage.assistant_with_tools("", [call]),
        ...                 ChatMessage.user("Hello?")])
        >>> [(m.role.value, m.tool_call_id, m.is_error) for m in fixed]
        [('assistant', None, False), ('tool', 'c1', True), ('user', None, False)]
    """
    items = list(messages)
    out: list[ChatMessage] = []
    server_calls: set[str] = set()  # the ids of Anthropic's server tool uses so far
    i = 0
    while i < len(items):
        msg = items[i]
        i += 1
        if msg.role is MessageRole.TOOL:
            _log.warning("dropped a tool result for call %r: no call before it", msg.tool_call_id)
            continue
        if msg.role is MessageRole.ASSISTANT and msg.provider_data:
            msg = _server_results_paired(msg, server_calls)
        out.append(msg)
        calls = msg.tool_calls or () if msg.role is MessageRole.ASSISTANT else ()
        if not calls:
            continue
        results: dict[str, deque[ChatMessage]] = {}  # (two calls may share an id)
        unnamed: list[ChatMessage] = []  # results without an id: legacy calls' answers
        notes: list[ChatMessage] = []  # system messages among the results
        while i < len(items) and items[i].role in (MessageRole.TOOL, MessageRole.SYSTEM):
            result = items[i]
            i += 1
            if result.role is MessageRole.SYSTEM:
                notes.append(result)
            elif result.tool_call_id:
                results.setdefault(result.tool_call_id, deque()).append(result)
            else:
                unnamed.append(result)
        for call in calls:
            answer = _answer(call, results, unnamed)
            if answer is None:
                _log.warning("answered call %r, whose result was lost, with an error", call.id)
                answer = ChatMessage(
                    MessageRole.TOOL,
                    LOST_RESULT,
                    name=None if call.id else call.name,
                    tool_call_id=call.id or None,
                    source=msg.source,
                    is_error=True,
                )
            out.append(answer)
        for extra in [*(r for rs in results.values() for r in rs), *unnamed]:
            _log.warning("dropped a tool result for call %r: no such call", extra.tool_call_id)
        out.extend(notes)
    return out


def _server_results_paired(msg: ChatMessage, server_calls: set[str]) -> ChatMessage:
    """``msg`` without the results of Anthropic's server tools (``web_search_tool_result``
    …) whose use came in no block before them (a history window that cut a paused turn
    in two), which the API refuses; ``server_calls`` gets the uses it holds."""
    data = msg.provider_data
    blocks = data.get(ANTHROPIC_THINKING) if data else None
    if data is None or not isinstance(blocks, tuple | list):
        return msg
    kept: list[Any] = []
    for block in blocks:
        kind = _block_type(block) or ""
        if kind in ("server_tool_use", "mcp_tool_use") and isinstance(block.get("id"), str):
            server_calls.add(block["id"])
        elif kind.endswith("_tool_result") and block.get("tool_use_id") not in server_calls:
            _log.warning("dropped a %s for %r: no use before it", kind, block.get("tool_use_id"))
            continue
        kept.append(block)
    if len(kept) == len(blocks):
        return msg
    return attrs.evolve(msg, provider_data={**data, ANTHROPIC_THINKING: tuple(kept)})


def _answer(
    call: ToolCall, results: dict[str, deque[ChatMessage]], unnamed: list[ChatMessage]
) -> ChatMessage | None:
    """The result that answers ``call`` (taken from those that came), if one does."""
    if call.id:
        waiting = results.get(call.id)
        return waiting.popleft() if waiting else None
    for result in unnamed:  # (a legacy call: the first result without an id of its name)
        if result.name in (None, call.name):
            unnamed.remove(result)
            return result
    return None


def with_call_ids(messages: Iterable[ChatMessage]) -> list[ChatMessage]:
    """The messages with every tool call and tool result carrying an id.

    OpenAI's legacy ``function_call`` and ``function`` messages have none
    (an answer follows its call); Anthropic and the Responses API need one on
    both sides. A call without an id gets ``function_call_<n>`` (``n``: its
    message's position; then ``_1``, ``_2`` ... for more in one message), and
    a result without one takes the id of the earliest unanswered such call of
    its name. Other messages are unchanged.

    Example:
        >>> messages = with_call_ids([
        ...     ChatMessage.from_openai({"role": "assistant",
        ...         "function_call": {"name": "now", "arguments": "{}"}}),
        ...     ChatMessage.from_openai({"role": "function", "name": "now", "content": "12:00"}),
        ... ])
        >>> [c.id for c in messages[0].tool_calls or ()], messages[1].tool_call_id
        (['function_call_0'], 'function_call_0')
    """
    messages = list(messages)
    fresh = _fresh_ids({c.id for m in messages for c in m.tool_calls or () if c.id})
    out: list[ChatMessage] = []
    unanswered: list[ToolCall] = []  # calls given an id here, not answered yet, in order
    for position, msg in enumerate(messages):
        if msg.tool_calls and any(not call.id for call in msg.tool_calls):
            calls = []
            for call in msg.tool_calls:
                if not call.id:
                    call = attrs.evolve(call, id=fresh(f"function_call_{position}"))
                    unanswered.append(call)
                calls.append(call)
            msg = attrs.evolve(msg, tool_calls=calls)
        elif msg.role is MessageRole.TOOL and not msg.tool_call_id:  # None or ""
            # the earliest call of its name (a result without a name: the earliest call)
            match = next((c for c in unanswered if msg.name in (None, c.name)), None)
            if match is not None:
                unanswered.remove(match)
            call_id = fresh(f"function_call_{position}") if match is None else match.id
            msg = attrs.evolve(msg, tool_call_id=call_id)
        out.append(msg)
    return out


def _fresh_ids(taken: set[str]) -> Callable[[str], str]:
    """A maker of ids that are not in ``taken`` (``base``, else ``base_1``, ``base_2`` …)."""

    tried: dict[str, int] = {}  # base → the first suffix not tried yet (taken only grows)

    def fresh(base: str) -> str:
        call_id, n = base, tried.get(base, 1)
        while call_id in taken:
            call_id, n = f"{base}_{n}", n + 1
        tried[base] = n
        taken.add(call_id)
        return call_id

    return fresh


def _unique_call_ids(
    messages: Iterable[ChatMessage], form: Callable[[str], str] = str
) -> list[ChatMessage]:
    """:func:`with_call_ids`, then each call id in ``form`` and unique in the conversation.

    Anthropic and the Responses API refuse a conversation that uses one id for
    two calls, and some providers give the same ids in every response (Kimi
    K2's ``functions.lookup:0``), or ids that are one after ``form`` (which
    puts an id in the characters a provider takes). Such a call gets a fresh
    id, and its results (the tool messages that follow, until the id's next
    call) get it too.

    Example:
        >>> step = [ChatMessage.assistant_with_tools("", [ToolCall("c:0", "now", {})]),
        ...         ChatMessage.tool("12:00", "c:0")]
        >>> [m.tool_call_id or m.tool_calls[0].id for m in _unique_call_ids(step * 2)]
        ['c:0', 'c:0', 'c:0_1', 'c:0_1']
    """
    return _unique_ids(with_call_ids(messages), form)


def _unique_ids(
    messages: Iterable[ChatMessage], form: Callable[[str], str], *, per_message: bool = False
) -> list[ChatMessage]:
    """:func:`_unique_call_ids` without giving ids: calls and results without one
    (OpenAI's legacy ``function_call``) stay as they are. ``per_message``: ids
    need only be unique within a message (chat completions, where Kimi K2 reads
    its own ``functions.lookup:0`` in every step)."""
    fresh = _fresh_ids(set())
    waiting: dict[str, list[str]] = {}  # an id as given → its latest message's calls' ids
    latest: dict[str, str] = {}  # an id as given → the id of its latest call
    out: list[ChatMessage] = []
    for msg in messages:
        if msg.tool_calls and any(call.id for call in msg.tool_calls):
            calls: list[ToolCall] = []
            givens = {call.id for call in msg.tool_calls if call.id}
            if per_message:
                fresh = _fresh_ids(set())
            for given in givens:
                waiting[given] = []
            for call in msg.tool_calls:
                if not call.id:
                    calls.append(call)
                    continue
                call_id = fresh(form(call.id))
                if form(call_id) != call_id:  # (its suffix made it too long: a short one)
                    call_id = fresh(form(call_id))
                waiting[call.id].append(call_id)
                latest[call.id] = call_id
                calls.append(call if call_id == call.id else attrs.evolve(call, id=call_id))
            renamed = {given: waiting[given] for given in givens}  # (this message's calls)
            msg = _refs_renamed(attrs.evolve(msg, tool_calls=calls), renamed)
        elif msg.role is MessageRole.TOOL and msg.tool_call_id:
            given = msg.tool_call_id
            queue = waiting.get(given)
            call_id = queue.pop(0) if queue else latest.get(given, form(given))
            if call_id != given:
                msg = attrs.evolve(msg, tool_call_id=call_id)
        out.append(msg)
    return out


def _refs_renamed(msg: ChatMessage, ids: Mapping[str, list[str]]) -> ChatMessage:
    """``msg`` with the blocks of its ``provider_data`` that name its calls renamed as
    its calls were (``ids``: each id as given → its calls' new ids, in order)."""
    if not msg.provider_data:
        return msg
    data: dict[str, Any] = {}
    for key, blocks in msg.provider_data.items():
        if isinstance(blocks, tuple | list):
            left = {given: list(new) for given, new in ids.items()}  # (each key names them all)
            blocks = tuple(_ref_renamed(block, left) for block in blocks)
        data[key] = blocks
    return attrs.evolve(msg, provider_data=data) if data != msg.provider_data else msg


def _ref_renamed(block: Any, left: dict[str, list[str]]) -> Any:
    kind = _block_type(block)
    field = _CALL_REFS.get(kind) if kind else None
    given = block.get(field) if field else None
    if not isinstance(given, str) or not left.get(given):
        return block
    return {**block, field: left[given].pop(0)}


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: Sequence[Any] = content
    return "".join(
        p.get("text", "") if isinstance(p, Mapping) else str(p)
        for p in parts
        if not isinstance(p, Mapping) or p.get("type", "text") in ("text", "input_text")
    )


def _refusal_of(data: Mapping[str, Any]) -> str:
    """An assistant's refusal (its ``refusal`` field, or refusal parts): its text, as
    a stream's refusal is read."""
    refusal = data.get("refusal")
    if isinstance(refusal, str):
        return refusal
    parts = data.get("content")
    if not isinstance(parts, list):
        return ""
    return "".join(
        str(p.get("refusal") or "")
        for p in parts
        if isinstance(p, Mapping) and p.get("type") == "refusal"
    )


def _call_from_openai(data: Mapping[str, Any]) -> ToolCall:
    custom = data.get("custom")
    if isinstance(custom, Mapping):  # a custom tool's call: its free-form input
        return ToolCall(
            data.get("id") or "", custom.get("name") or "", {"input": custom.get("input") or ""}
        )
    function = data.get("function") or {}
    raw = function.get("arguments")
    if raw is None or isinstance(raw, str):
        return _parsed_call(data.get("id") or "", function.get("name") or "", raw or "")
    return ToolCall(data.get("id") or "", function.get("name") or "", copy.deepcopy(raw))


def _parsed_call(call_id: str, name: str, raw: str) -> ToolCall:
    if raw.strip() == "":
        return ToolCall(call_id, name, {})
    try:
        return ToolCall(call_id, name, json.loads(raw))
    except ValueError as exc:
        return ToolCall(call_id, name, None, raw_arguments=raw, error=f"invalid JSON: {exc}")
    except RecursionError:
        return ToolCall(
            call_id, name, None, raw_arguments=raw, error="invalid JSON: nested too deeply"
        )


# ------------------------------------------------------------ Anthropic wire

#: ``provider_data`` key holding an assistant message's Anthropic thinking blocks.
ANTHROPIC_THINKING = "anthropic_thinking"

#: ``provider_data`` key holding an assistant message's OpenAI Responses reasoning items.
OPENAI_REASONING = "openai_reasoning"

#: Types of the ``provider_data`` blocks naming a Responses function call's and message's
#: output item (``{"type": ..., "id": ..., "call_id" | "text": ...}``), kept under
#: :data:`OPENAI_REASONING` in output order beside the reasoning items: the API pairs a
#: reasoning item with the item after it by id, so that item goes back with its id.
FUNCTION_CALL_REF = "rafrx.function_call_ref"
MESSAGE_REF = "rafrx.message_ref"

#: Types of the Responses output items of tools the server runs (web search, file search,
#: code interpreter, image generation, remote MCP, and a remote MCP tool's approval
#: request): kept whole under :data:`OPENAI_REASONING`, in output order, they go back in
#: a tool loop, where a reasoning item must be followed by the item that followed it.
OPENAI_SERVER_TOOL_ITEMS: Final = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
    }
)

#: Type of the Responses input item answering a remote MCP tool's approval request
#: (``{"type": ..., "approval_request_id": ..., "approve": bool}``): ``execute_tools``
#: adds it, from the approver's answer, under :data:`OPENAI_REASONING` after the request.
MCP_APPROVAL_RESPONSE = "mcp_approval_response"

#: Type of the ``provider_data`` block (``{"type": ..., "call_id": ..., "id": ...}``, under
#: :data:`OPENAI_REASONING`) marking a call of a Responses *custom* tool: its free-form
#: input arrives as the arguments ``{"input": text}``, and the call and its result go
#: back as ``custom_tool_call`` / ``custom_tool_call_output`` items. It also stands
#: where the call's output item did, as :data:`FUNCTION_CALL_REF` does.
CUSTOM_TOOL_CALL_REF = "rafrx.custom_tool_call_ref"

#: Types of the ``provider_data`` blocks marking where an Anthropic assistant message's
#: text blocks (``{"type": TEXT_REF, "chars": n}``: its next ``n`` characters) and
#: ``tool_use`` blocks (``{"type": TOOL_USE_REF, "id": ...}``) stood among its thinking
#: blocks, kept under :data:`ANTHROPIC_THINKING` when the model thought between them
#: (interleaved thinking): Anthropic refuses the message back in another order. Also
#: when text came after a call, which the message's one text would put before it.
TEXT_REF = "rafrx.text_ref"
TOOL_USE_REF = "rafrx.tool_use_ref"

#: Type of the ``provider_data`` block (under :data:`ANTHROPIC_THINKING`) holding the code
#: execution container of an Anthropic message (``{"type": ..., "id": ..., "expires_at":
#: ...}``, from ``message_delta``): calls that Claude's code made wait in it, and a paused
#: turn goes on in it, so the next request names it (``container``, beside ``messages``:
#: no content block holds it, and :func:`to_anthropic` leaves it out), as
#: :func:`pending_container` finds.
CONTAINER_REF = "rafrx.container"

#: Type of the ``provider_data`` block (under :data:`ANTHROPIC_THINKING`) marking an
#: Anthropic message that stopped with ``pause_turn``: the server paused a long turn of
#: its tools, and :class:`~rafrx.Agent` sends the message back for Claude to go on.
PAUSE_TURN_REF = "rafrx.pause_turn"

#: ``provider_data`` block type, and key, of OpenRouter's ``reasoning_details`` (the
#: block's ``details``), which go back on the assistant message in a tool loop.
REASONING_DETAILS = "openrouter_reasoning_details"

#: ``provider_data`` block type, and key, of the ``thinking_blocks`` a LiteLLM proxy streams
#: for Claude's extended thinking (the block's ``blocks``, signed): they go back on the
#: assistant message, which Anthropic refuses without them in a tool loop.
THINKING_BLOCKS = "litellm_thinking_blocks"

#: ``provider_data`` key holding the ``extra_content`` of an assistant message's chat tool
#: calls (Gemini's ``thought_signature``), as ``{"type": "tool_call_extra", "call_id": ...,
#: "extra_content": ...}`` blocks.
OPENAI_CALL_EXTRA = "openai_call_extra"


def provider_data_of(blocks: Iterable[Any]) -> dict[str, tuple[Any, ...]] | None:
    """The ``provider_data`` of an assistant message that streamed ``blocks``.

    Responses ``reasoning`` items go under :data:`OPENAI_REASONING`, chat
    tool calls' ``extra_content`` under :data:`OPENAI_CALL_EXTRA`, every
    other block (Anthropic thinking) under :data:`ANTHROPIC_THINKING`, so each
    wire format sends back only its own; ``None`` when there are none.

    Example:
        >>> provider_data_of([{"type": "reasoning", "id": "rs_1"}])
        {'openai_reasoning': ({'type': 'reasoning', 'id': 'rs_1'},)}
    """
    grouped: dict[str, list[Any]] = {}
    for block in blocks:
        kind = _block_type(block)
        key = _BLOCK_KEYS.get(kind) if kind else None
        grouped.setdefault(key or ANTHROPIC_THINKING, []).append(block)
    return {key: tuple(kept) for key, kept in grouped.items()} or None


#: The ``provider_data`` blocks naming a call of their message, and the member naming it.
_CALL_REFS = {
    TOOL_USE_REF: "id",
    FUNCTION_CALL_REF: "call_id",
    CUSTOM_TOOL_CALL_REF: "call_id",
    "tool_call_extra": "call_id",
}

_BLOCK_KEYS = {
    "reasoning": OPENAI_REASONING,
    FUNCTION_CALL_REF: OPENAI_REASONING,
    CUSTOM_TOOL_CALL_REF: OPENAI_REASONING,
    MESSAGE_REF: OPENAI_REASONING,
    **dict.fromkeys(OPENAI_SERVER_TOOL_ITEMS, OPENAI_REASONING),
    MCP_APPROVAL_RESPONSE: OPENAI_REASONING,
    "tool_call_extra": OPENAI_CALL_EXTRA,
    REASONING_DETAILS: REASONING_DETAILS,
    THINKING_BLOCKS: THINKING_BLOCKS,
}


def is_paused(message: ChatMessage) -> bool:
    """Whether an Anthropic assistant message stopped with ``pause_turn`` (see
    :data:`PAUSE_TURN_REF`): it goes back as it is, for the model to go on."""
    blocks = message.provider_data.get(ANTHROPIC_THINKING, ()) if message.provider_data else ()
    return any(_block_type(b) == PAUSE_TURN_REF for b in blocks)


def pending_container(messages: Sequence[ChatMessage]) -> str | None:
    """The id of the code execution container that the last assistant message's tool
    calls wait in (:data:`CONTAINER_REF`): Anthropic requires it with their results.
    Also that of a paused message (:func:`is_paused`): the turn goes on in the
    container its code ran in, with the files and state it left there.

    Example:
        >>> mark = {"type": CONTAINER_REF, "id": "container_1"}
        >>> calls = [ToolCall("c1", "f", {})]
        >>> thinking = {ANTHROPIC_THINKING: (mark,)}
        >>> calling = ChatMessage("assistant", tool_calls=calls, provider_data=thinking)
        >>> pending_container([calling, ChatMessage.tool("done", "c1")])
        'container_1'
    """
    for message in reversed(messages):
        if message.role is MessageRole.ASSISTANT:
            goes_on = bool(message.tool_calls) or is_paused(message)
            if not goes_on or not message.provider_data:
                return None
            for block in message.provider_data.get(ANTHROPIC_THINKING, ()):
                if _block_type(block) == CONTAINER_REF and isinstance(block.get("id"), str):
                    return str(block["id"])
            return None
    return None


def answers_approvals(message: ChatMessage) -> bool:
    """Whether an assistant message answers approval requests of the provider's own
    tools (:data:`MCP_APPROVAL_RESPONSE` blocks): it goes back for the model to go on.

    Example:
        >>> answer = {"type": MCP_APPROVAL_RESPONSE, "approval_request_id": "mcpr_1", "approve": True}
        >>> answers_approvals(ChatMessage("assistant", "", provider_data={OPENAI_REASONING: [answer]}))
        True
    """  # noqa: E501
    blocks = message.provider_data.get(OPENAI_REASONING, ()) if message.provider_data else ()
    return any(_block_type(b) == MCP_APPROVAL_RESPONSE for b in blocks)


def custom_call_ids(message: ChatMessage) -> set[str]:
    """The ids of a message's calls of custom (free-form) tools: those a
    :data:`CUSTOM_TOOL_CALL_REF` block marks."""
    blocks = message.provider_data.get(OPENAI_REASONING, ()) if message.provider_data else ()
    return {
        str(b.get("call_id"))
        for b in blocks
        if isinstance(b, Mapping) and b.get("type") == CUSTOM_TOOL_CALL_REF
    }


def custom_input(call: ToolCall) -> str:
    """The free-form input of a custom tool's call (its arguments ``{"input": text}``).

    Example:
        >>> custom_input(ToolCall("c1", "shell", {"input": "ls -l"}))
        'ls -l'
    """
    text = call.arguments.get("input") if isinstance(call.arguments, Mapping) else None
    if not isinstance(text, str):  # (edited since into something else: sent as it is)
        text = call.arguments_json()
    return text


def _call_extras(message: ChatMessage) -> dict[str, Any]:
    """call id → its tool call's ``extra_content`` (see :data:`OPENAI_CALL_EXTRA`)."""
    blocks = message.provider_data.get(OPENAI_CALL_EXTRA, ()) if message.provider_data else ()
    return {
        b["call_id"]: copy.deepcopy(b["extra_content"])
        for b in blocks
        if isinstance(b, Mapping) and "call_id" in b and "extra_content" in b
    }


def to_openai_chat(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """Convert messages to OpenAI chat-completions message dicts (:meth:`ChatMessage.to_openai`).

    In a conversation where some message carries ``reasoning_content`` (a
    thinking-mode one), every assistant message with tool calls carries the
    field, ``""`` when it had no reasoning: DeepSeek refuses one without it.
    A call id longer than OpenAI takes (40 characters; vLLM's
    ``chatcmpl-tool-…`` has 46) goes as a short stand-in made from it, and
    one id given to two calls of a message (which OpenAI refuses: "Duplicate
    value for 'tool_call_id'") as two, in the calls and in their results.

    Example:
        >>> turn = [ChatMessage("assistant", "Hm.", reasoning="Think."),
        ...         ChatMessage.assistant_with_tools("", [ToolCall("c1", "now", {})])]
        >>> [m.get("reasoning_content") for m in to_openai_chat(turn)]
        ['Think.', '']
    """
    wire = [m.to_openai() for m in _unique_ids(messages, _chat_id, per_message=True)]
    if any("reasoning_content" in m for m in wire):
        for m in wire:
            if "tool_calls" in m:
                m.setdefault("reasoning_content", "")
    return wire


def _chat_id(call_id: str) -> str:
    """A call id as OpenAI chat completions take it (at most 40 characters)."""
    return _bounded_id(call_id, _OPENAI_CHAT_ID_MAX)


def _responses_id(call_id: str) -> str:
    """A call id as the Responses API takes it (at most 64 characters)."""
    return _bounded_id(call_id, _RESPONSES_ID_MAX)


def to_anthropic(messages: Iterable[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """Convert messages to Anthropic's ``(system, messages)`` pair.

    System messages are joined into ``system``; tool calls become
    ``tool_use`` blocks; consecutive tool results become one user message of
    ``tool_result`` blocks (``is_error`` for a failed call); thinking blocks
    kept in ``provider_data`` go first. rafrx's own marks there stay out: a code
    execution container (:data:`CONTAINER_REF`) goes beside the messages, as the
    request's ``container`` (:func:`pending_container`).
    A message with nothing to send (an empty user message, an assistant turn
    with no text, call or thinking block) is left out: Anthropic refuses an
    empty content list.

    Example:
        >>> system, wire = to_anthropic(
        ...     [ChatMessage.system("Be brief."), ChatMessage.user("Hi"), ChatMessage.user("")])
        >>> system, wire
        ('Be brief.', [{'role': 'user', 'content': [{'type': 'text', 'text': 'Hi'}]}])
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the last message's, if a run of tool results
    for msg in _unique_call_ids(messages, _anthropic_id):
        if msg.role is MessageRole.SYSTEM:
            system.append(msg.content)
            continue
        if msg.role is MessageRole.TOOL:
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": msg.tool_call_id,
                "content": msg.content,
            }
            if msg.is_error:
                block["is_error"] = True
                if not msg.content.strip():  # refused: "content cannot be empty if is_error"
                    block["content"] = "Error"
            if results is not None:
                results.append(block)
            else:
                results = [block]
                out.append({"role": "user", "content": results})
            continue
        kept = (msg.provider_data or {}).get(ANTHROPIC_THINKING) or ()
        blocks = _assistant_blocks(msg, kept)
        if blocks:  # else nothing Anthropic can take: an empty content list is refused
            out.append({"role": msg.role.value, "content": blocks})
            results = None
    text = "\n\n".join(s for s in system if s.strip())  # blank system text is refused
    return (text or None), out


def _assistant_blocks(msg: ChatMessage, kept: Sequence[Any]) -> list[dict[str, Any]]:
    """A message's content blocks: its thinking blocks first, then its text and its
    calls; or, where refs say how they were interleaved, in their order."""
    calls = {call.id: call for call in msg.tool_calls or ()}
    text, at = msg.content, 0
    blocks: list[dict[str, Any]] = []
    for block in kept:
        kind = _block_type(block)
        if kind == TEXT_REF:
            chars = block.get("chars")
            piece = text[at : at + (chars if type(chars) is int else 0)]  # (else: at the end)
            at += len(piece)
            if piece.strip():
                blocks.append({"type": "text", "text": piece})
        elif kind == TOOL_USE_REF:
            call = calls.pop(block.get("id"), None)
            if call is not None:
                extra = {k: copy.deepcopy(v) for k, v in block.items() if k not in ("type", "id")}
                blocks.append(_tool_use(call) | extra)  # (a programmatic call's caller)
        elif _is_rafrx_mark(block):
            continue  # (rafrx's own, not the API's: PAUSE_TURN_REF, CONTAINER_REF)
        else:
            blocks.append(copy.deepcopy(block))
    if text[at:].strip():  # Anthropic refuses a whitespace-only text block
        blocks.append({"type": "text", "text": text[at:]})
    blocks.extend(_tool_use(call) for call in calls.values())
    return blocks


def _tool_use(call: ToolCall) -> dict[str, Any]:
    # Anthropic requires an object (a call whose arguments were invalid JSON sends {}) of
    # strict JSON (a NaN or infinity goes as null, as in ToolCall.arguments_json).
    arguments = finite(call.arguments) if isinstance(call.arguments, Mapping) else {}
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


_NOT_ANTHROPIC_ID: Final = re.compile(r"[^a-zA-Z0-9_-]")


_OPENAI_CHAT_ID_MAX: Final = 40
"""The longest tool-call id OpenAI's chat completions take."""

_RESPONSES_ID_MAX: Final = 64
"""The longest ``call_id`` the OpenAI Responses API takes."""


def _bounded_id(call_id: str, limit: int) -> str:
    """``call_id``, or when it is longer than ``limit`` a short stand-in for it.

    The stand-in is derived from the id alone (a hash), so every request of a
    conversation sends the same one, a call and its result alike, and a
    provider's prompt cache still matches.

    Example:
        >>> _bounded_id("call_1", 40)
        'call_1'
        >>> long = "chatcmpl-tool-" + "0" * 32
        >>> _bounded_id(long, 40) == _bounded_id(long, 40) != long, len(_bounded_id(long, 40))
        (True, 29)
    """
    if len(call_id) <= limit:
        return call_id
    return "call_" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _anthropic_id(call_id: str) -> str:
    """A call id as Anthropic takes it (``^[a-zA-Z0-9_-]+$``): another provider's
    (``functions.lookup:0``) with each other character as ``_``, the same way in a
    ``tool_use`` and in its ``tool_result``."""
    return _NOT_ANTHROPIC_ID.sub("_", call_id) or "_"


def from_anthropic(
    system: str | Iterable[Mapping[str, Any]] | None, messages: Iterable[Mapping[str, Any]]
) -> list[ChatMessage]:
    """Rebuild :class:`ChatMessage` values from Anthropic's ``(system, messages)``.

    The inverse of :func:`to_anthropic`: tool_result blocks become one TOOL
    message each (followed by a user message with any text sent beside them),
    an assistant's thinking and server-tool blocks go back into
    ``provider_data``, where they stood. A ``system`` given as a
    list of text blocks (as for prompt caching) becomes one system message of
    their texts, a blank line apart (as :func:`to_anthropic` joins them).

    Example:
        >>> from_anthropic([{"type": "text", "text": "Be brief."}], [])[0].content
        'Be brief.'
    """
    out: list[ChatMessage] = []
    if system is not None:
        if not isinstance(system, str):
            system = "\n\n".join(b["text"] for b in system if b.get("type") == "text")
        out.append(ChatMessage.system(system))
    for msg in messages:
        content = msg["content"]
        if isinstance(content, str):
            out.append(ChatMessage(MessageRole(msg["role"]), content))
            continue
        results = [b for b in content if b.get("type") == "tool_result"]
        if results:  # one TOOL message each, then the user's own text if it came with them
            out.extend(
                ChatMessage.tool(
                    _text_of(b.get("content")),
                    b["tool_use_id"],
                    source=None,
                    is_error=b.get("is_error") is True,
                )
                for b in results
            )
            content = [b for b in content if b.get("type") != "tool_result"]
            if not content:
                continue
        # (an assistant's blocks join as they came: TEXT_REF counts their characters)
        joint = "" if msg["role"] == "assistant" else "\n\n"
        text = joint.join(b["text"] for b in content if b.get("type") == "text")
        calls = [
            ToolCall(b["id"], b["name"], copy.deepcopy(b.get("input", {})))
            for b in content
            if b.get("type") == "tool_use"
        ]
        thinking = _thinking_of(content) if msg["role"] == "assistant" else ()
        reasoning = "".join(b.get("thinking", "") for b in thinking) or None
        out.append(
            ChatMessage(
                MessageRole(msg["role"]),
                text,
                tool_calls=calls or None,
                reasoning=reasoning,
                provider_data={ANTHROPIC_THINKING: thinking} if thinking else None,
            )
        )
    return out


def _thinking_of(content: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """An assistant wire message's thinking blocks and server tools' blocks (any block
    but text and tool_use), with :data:`TEXT_REF` / :data:`TOOL_USE_REF` blocks for
    the text and calls among them when they stood between them, or when text came
    after a call."""
    kinds = [b.get("type") for b in content]
    is_kept = [k not in ("text", "tool_use") for k in kinds]
    extras = [
        _tool_use_extra(b) if k == "tool_use" else {} for b, k in zip(content, kinds, strict=True)
    ]
    first_other = is_kept.index(False) if False in is_kept else len(kinds)
    interleaved = any(is_kept[first_other:]) or any(extras) or _text_after_a_call(content)
    if not interleaved and not any(is_kept):
        return ()
    kept: list[dict[str, Any]] = []
    for block, kind, keep, extra in zip(content, kinds, is_kept, extras, strict=True):
        if keep:
            kept.append(copy.deepcopy(dict(block)))
        elif interleaved and kind == "text":
            kept.append({"type": TEXT_REF, "chars": len(block.get("text", ""))})
        elif interleaved and kind == "tool_use":
            kept.append({"type": TOOL_USE_REF, "id": block.get("id"), **extra})
    return tuple(kept)


def _text_after_a_call(content: Sequence[Mapping[str, Any]]) -> bool:
    """Whether text follows a ``tool_use`` block (``[text, tool_use, text]``): the text
    joins, so only refs keep where each stood (as the stream dialect keeps them).

    Example:
        >>> call = {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
        >>> _text_after_a_call([{"type": "text", "text": "A"}, call])
        False
        >>> _text_after_a_call([call, {"type": "text", "text": "B"}])
        True
    """
    kinds = [b.get("type") for b in content]
    if "tool_use" not in kinds:
        return False
    after = content[kinds.index("tool_use") :]
    return any(b.get("type") == "text" and b.get("text") for b in after)


def _tool_use_extra(block: Mapping[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` block's members besides its call's (a programmatic call's ``caller``)."""
    return {
        k: copy.deepcopy(v) for k, v in block.items() if k not in ("type", "id", "name", "input")
    }
