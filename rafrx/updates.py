"""The 13 :data:`AgentResponseUpdate` variants: rafrx's internal wire format.

Sources (dialects) turn provider events into these; the operators in
:mod:`rafrx.operators` turn them into :mod:`rafrx.content` items. Build them
by hand to test an operator without any provider:

    >>> import reactivex
    >>> from rafrx import operators as ops
    >>> from rafrx.response import FinishReason
    >>> updates = [TextDelta("Hel"), TextDelta("lo"), Finish(FinishReason.STOP)]
    >>> results = []
    >>> _ = reactivex.from_iterable(updates).pipe(ops.convert()).subscribe(results.append)
    >>> "".join(c.text for r in results for c in r.contents)
    'Hello'

``Usage`` and ``ResponseMetadata`` here are update variants, distinct from
:class:`rafrx.Usage` (the counts they carry) and :class:`rafrx.ResponseMetadata`.
"""

from __future__ import annotations

from typing import Any, final

import attrs

from rafrx import response as _response
from rafrx._slot_init import slot_init
from rafrx.response import FinishReason

__all__ = [
    "AgentResponseUpdate",
    "Error",
    "Finish",
    "ReasoningDelta",
    "ResponseMetadata",
    "TextDelta",
    "ToolApprovalRequest",
    "ToolCallArgs",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolCalled",
    "Update",
    "Uri",
    "Usage",
]


class Update:
    """The base class of the 13 update variants: what the operators that read
    updates take (a list mixing variants is a ``list[Update]`` to a type checker).

    Match over :data:`AgentResponseUpdate`, the closed union, to handle each.

    Example:
        >>> isinstance(TextDelta("Hi"), Update)
        True
    """

    __slots__ = ()


@final
@slot_init
@attrs.frozen
class TextDelta(Update):
    """A piece of assistant text."""

    delta: str


@final
@slot_init
@attrs.frozen
class ReasoningDelta(Update):
    """A piece of reasoning text (DeepSeek ``reasoning_content``, Anthropic thinking).

    ``provider_data`` carries an opaque block the provider needs back in the
    next request (an Anthropic thinking signature, a redacted thinking block).
    """

    delta: str
    provider_data: Any = attrs.field(default=None, kw_only=True)


@final
@slot_init
@attrs.frozen
class ToolCallDelta(Update):
    """A legacy (OpenAI chat) flat tool-call delta, keyed by ``index``.

    ``split_legacy_delta()`` turns these into Start/Args/End updates (and
    rejects a negative ``index`` with a ``ProtocolError``; no validator runs
    per delta).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


@final
@slot_init
@attrs.frozen
class ToolCallStart(Update):
    """A tool call began."""

    id: str
    name: str


@final
@slot_init
@attrs.frozen
class ToolCallArgs(Update):
    """A fragment of a call's JSON arguments."""

    id: str
    args_delta: str


@final
@slot_init
@attrs.frozen
class ToolCallEnd(Update):
    """A call's arguments are complete."""

    id: str


def _exclusive(instance: ToolCalled, attribute: Any, value: Any) -> None:
    if value is not None and instance.result is not None:
        raise ValueError("ToolCalled takes a result or an error, not both")


@final
@slot_init
@attrs.frozen
class ToolCalled(Update):
    """A tool ran (reported by a provider that executes tools server-side).

    It has a ``result`` or an ``error``, like the :class:`~rafrx.content.ToolCalledContent`
    it becomes:

        >>> ToolCalled("call_1", result="42")
        ToolCalled(id='call_1', result='42', error=None)
        >>> ToolCalled("call_1", result="42", error="timed out")
        Traceback (most recent call last):
        ValueError: ToolCalled takes a result or an error, not both
    """

    id: str
    result: str | None = None
    error: str | None = attrs.field(default=None, validator=_exclusive)


@final
@slot_init
@attrs.frozen
class ToolApprovalRequest(Update):
    """The provider asks for approval before it runs a tool."""

    call_id: str
    name: str
    arguments: Any
    description: str = ""


@final
@slot_init
@attrs.frozen
class Usage(Update):
    """Token usage of the current LLM call."""

    usage: _response.Usage


@final
@slot_init
@attrs.frozen
class Finish(Update):
    """The LLM call finished."""

    finish_reason: FinishReason
    usage: _response.Usage | None = None


@final
@slot_init
@attrs.frozen
class Error(Update):
    """The provider reported an error in the stream (ends the stream)."""

    message: str
    error_type: str | None = attrs.field(default=None, kw_only=True)


@final
@slot_init
@attrs.frozen
class ResponseMetadata(Update):
    """The response id and model, as soon as the provider tells them."""

    id: str | None = None
    model: str | None = None


@final
@slot_init
@attrs.frozen
class Uri(Update):
    """A citation, annotation or generated file."""

    uri: str
    media_type: str | None = None


AgentResponseUpdate = (
    TextDelta
    | ReasoningDelta
    | ToolCallDelta
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | ToolCalled
    | ToolApprovalRequest
    | Usage
    | Finish
    | Error
    | ResponseMetadata
    | Uri
)
"""Any of the 13 update variants."""
