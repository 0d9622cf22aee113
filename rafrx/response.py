"""What a stream produces: :class:`AgentResponseResult` chunks and one :class:`AgentResponse`.

Example:
    >>> total = Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15) + Usage(
    ...     prompt_tokens=1, completion_tokens=1, total_tokens=2)
    >>> total.prompt_tokens, total.completion_tokens, total.total_tokens
    (11, 6, 17)
    >>> FinishReason.from_provider("tool_use")
    <FinishReason.TOOL_CALLS: 'tool_calls'>
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, final

import attrs

from rafrx._slot_init import slot_init
from rafrx.messages import ChatMessage, ToolCall

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from rafrx.content import Content
    from rafrx.events import Event

__all__ = ["AgentResponse", "AgentResponseResult", "FinishReason", "Usage"]


def _add_optional(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


@final
@attrs.frozen
class Usage:
    """Token counts of one or more LLM calls. ``+`` sums them.

    ``reasoning_tokens`` and ``cached_tokens`` stay ``None`` unless the
    provider reported them.

    Example:
        >>> Usage(10, 5, 15) + Usage(3, 2, 5, reasoning_tokens=1)
        Usage(prompt_tokens=13, completion_tokens=7, total_tokens=20, reasoning_tokens=1, cached_tokens=None)
    """  # noqa: E501

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            reasoning_tokens=_add_optional(self.reasoning_tokens, other.reasoning_tokens),
            cached_tokens=_add_optional(self.cached_tokens, other.cached_tokens),
        )


class FinishReason(enum.StrEnum):
    """Why an LLM call stopped, across providers."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    ERROR = "error"
    OTHER = "other"

    @classmethod
    def from_provider(cls, reason: str | None) -> FinishReason:
        """Map a provider's spelling onto a :class:`FinishReason` (unknown → OTHER).

        Example:
            >>> FinishReason.from_provider("end_turn"), FinishReason.from_provider("weird")
            (<FinishReason.STOP: 'stop'>, <FinishReason.OTHER: 'other'>)
        """
        if reason is None:
            return cls.OTHER
        return _PROVIDER_REASONS.get(reason.lower(), cls.OTHER)


_PROVIDER_REASONS: dict[str, FinishReason] = {
    # OpenAI chat and compatibles
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
    "error": FinishReason.ERROR,
    "eos": FinishReason.STOP,
    "eos_token": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_length": FinishReason.LENGTH,
    "sensitive": FinishReason.CONTENT_FILTER,  # Zhipu GLM's content filter
    "insufficient_system_resource": FinishReason.ERROR,  # DeepSeek: the server broke off
    "network_error": FinishReason.ERROR,  # Zhipu GLM: the same
    "abort": FinishReason.ERROR,  # vLLM, SGLang: the engine aborted the request
    # Anthropic
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.OTHER,  # not the end: send the turn back to go on
    "tool_use": FinishReason.TOOL_CALLS,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
    # Responses API statuses and incomplete reasons
    "completed": FinishReason.STOP,
    "failed": FinishReason.ERROR,
    "max_output_tokens": FinishReason.LENGTH,
    "safety": FinishReason.CONTENT_FILTER,
    "recitation": FinishReason.CONTENT_FILTER,
}


def _calls(items: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(items)


def _messages(items: Iterable[ChatMessage]) -> tuple[ChatMessage, ...]:
    return tuple(items)


if TYPE_CHECKING:

    def _as_contents(items: Iterable[Content]) -> tuple[Content, ...]: ...
    def _as_events(items: Iterable[Event]) -> tuple[Event, ...]: ...

else:  # ``tuple`` returns a tuple argument itself: no copy, and no Python-level call
    _as_contents = _as_events = tuple


@final
@slot_init
@attrs.frozen
class AgentResponseResult:
    """One chunk of a converted stream: the contents and events of one update.

    Example:
        >>> from rafrx.content import TextContent
        >>> AgentResponseResult(contents=[TextContent("Hi")]).contents
        (TextContent(text='Hi'),)
    """

    id: str | None = None
    model: str | None = None
    finish_reason: FinishReason | None = None
    contents: tuple[Content, ...] = attrs.field(default=(), converter=_as_contents)
    events: tuple[Event, ...] = attrs.field(default=(), converter=_as_events)

    def _repr_html_(self) -> str:
        from rafrx.notebook import result_html

        return result_html(self)


@final
@attrs.frozen
class AgentResponse:
    """The aggregate of a whole turn: text, reasoning, tool calls and transcript.

    ``text`` is all assistant text of the turn in order; the final answer is
    ``turn_transcript[-1]``. ``interrupted`` is true for the partial response
    attached to an error (``err.partial``).

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> from rafrx.operators import aggregate, convert
        >>> turn = [u.TextDelta("Checking."), u.ToolCallDelta(0, id="c1", name="now",
        ...     arguments_delta="{}"), u.Finish(FinishReason.TOOL_CALLS, Usage(9, 4, 13))]
        >>> response = reactivex.from_iterable(turn).pipe(convert(), aggregate()).run()
        >>> response.text, [c.name for c in response.tool_calls]
        ('Checking.', ['now'])
        >>> response.usage  # doctest: +NORMALIZE_WHITESPACE
        Usage(prompt_tokens=9, completion_tokens=4, total_tokens=13,
              reasoning_tokens=None, cached_tokens=None)
        >>> [c.id for c in response.turn_transcript[0].tool_calls or ()]
        ['c1']
    """

    id: str | None = None
    model: str | None = None
    text: str = ""
    reasoning_text: str | None = None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    tool_messages: tuple[ChatMessage, ...] = attrs.field(default=(), converter=_messages)
    turn_transcript: tuple[ChatMessage, ...] = attrs.field(default=(), converter=_messages)
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    source_agent_id: str | None = None
    interrupted: bool = attrs.field(default=False, kw_only=True)

    def _repr_html_(self) -> str:
        from rafrx.notebook import response_html

        return response_html(self)

    def to_dict(self) -> dict[str, Any]:
        """Every field as a JSON-ready dict, for keeping a turn (a file, a database):
        :meth:`from_dict` gives back an equal response.

        The calls and messages are written as :meth:`ToolCall.to_dict` and
        :meth:`ChatMessage.to_dict` write them, every field kept (a message's
        ``source`` and ``is_error``, the ``provider_data`` blocks a continuation
        needs, a cut call's ``partial_value``); NaN and the infinities go as
        ``None``. For the OpenAI wire form of the messages, use
        :meth:`ChatMessage.to_openai`.

        Example:
            >>> from rafrx.messages import ChatMessage
            >>> response = AgentResponse(text="Hi", turn_transcript=[ChatMessage.assistant("Hi")])
            >>> response.to_dict()["turn_transcript"]
            [{'role': 'assistant', 'content': 'Hi'}]
            >>> AgentResponse.from_dict(response.to_dict()) == response
            True
        """
        return {
            "id": self.id,
            "model": self.model,
            "text": self.text,
            "reasoning_text": self.reasoning_text,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "tool_messages": [m.to_dict() for m in self.tool_messages],
            "turn_transcript": [m.to_dict() for m in self.turn_transcript],
            "finish_reason": None if self.finish_reason is None else str(self.finish_reason),
            "usage": None if self.usage is None else attrs.asdict(self.usage),
            "source_agent_id": self.source_agent_id,
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentResponse:
        """The response :meth:`to_dict` wrote (keys left out take their defaults; keys
        it does not know are ignored; the values are copied, not shared with ``data``)."""
        reason = data.get("finish_reason")
        usage = data.get("usage")
        return cls(
            id=data.get("id"),
            model=data.get("model"),
            text=data.get("text", ""),
            reasoning_text=data.get("reasoning_text"),
            tool_calls=[ToolCall.from_dict(c) for c in data.get("tool_calls", ())],
            tool_messages=[ChatMessage.from_dict(m) for m in data.get("tool_messages", ())],
            turn_transcript=[ChatMessage.from_dict(m) for m in data.get("turn_transcript", ())],
            finish_reason=None if reason is None else FinishReason(reason),
            usage=None if usage is None else Usage(**usage),
            source_agent_id=data.get("source_agent_id"),
            interrupted=bool(data.get("interrupted", False)),
        )
