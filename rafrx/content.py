"""The 13 :data:`Content` variants: the public items of a converted stream.

Every variant is a frozen value with a keyword-only ``meta``
(:class:`ResponseMetadata`) that stays out of ``__match_args__``, so pattern
matching reads naturally:

    >>> def show(content: Content) -> str:
    ...     match content:
    ...         case TextContent(text):
    ...             return text
    ...         case ToolCallStartContent(call_id, name):
    ...             return f"calling {name} ({call_id})"
    ...         case _:
    ...             return ""
    >>> show(TextContent("Hello")), show(ToolCallStartContent("call_1", "read_file"))
    ('Hello', 'calling read_file (call_1)')

The tool-call lifecycle, per ``call_id``: :class:`ToolCallStartContent` →
:class:`ToolCallArgsContent` (raw deltas; with :class:`ToolCallArgsProgressContent`
and :class:`ToolCallArgsParsedContent` parsed while they stream) →
:class:`ToolCallEndContent` → :class:`ToolCallingContent` (complete, parsed, ready
to run) → :class:`ToolCalledContent` (the tool's result or error). A call the
response cut short (its token limit hit mid-arguments, or the stream failed)
ends with a :class:`ToolCallIncompleteContent` instead, and never runs.
"""

from __future__ import annotations

from typing import Any, final

import attrs

from rafrx._slot_init import slot_init
from rafrx.errors import InvalidToolArguments, invalid_arguments
from rafrx.response import FinishReason, Usage

__all__ = [
    "Content",
    "ErrorContent",
    "ReasoningContent",
    "ResponseMetadata",
    "TextContent",
    "ToolCallArgsContent",
    "ToolCallArgsParsedContent",
    "ToolCallArgsProgressContent",
    "ToolCallEndContent",
    "ToolCallIncompleteContent",
    "ToolCalledContent",
    "ToolCallingContent",
    "ToolCallStartContent",
    "UriContent",
    "UsageContent",
]


@final
@slot_init
@attrs.frozen
class ResponseMetadata:
    """Which response (and model) a content item belongs to."""

    id: str | None = None
    model: str | None = None


_EMPTY = ResponseMetadata()


def _meta() -> Any:
    return attrs.field(default=_EMPTY, kw_only=True, repr=False)


class _HtmlRepr:
    """Mixin: rich display of content in Jupyter."""

    __slots__ = ()

    def _repr_html_(self) -> str:
        from rafrx.notebook import content_html

        return content_html(self)  # type: ignore[arg-type]


@final
@slot_init
@attrs.frozen
class TextContent(_HtmlRepr):
    """A piece of assistant text."""

    text: str
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class ReasoningContent(_HtmlRepr):
    """A piece of reasoning ("thinking") text.

    ``provider_data`` is an opaque block to send back with the assistant
    message (e.g. an Anthropic thinking signature); usually ``None``.
    """

    text: str
    meta: ResponseMetadata = _meta()
    provider_data: Any = attrs.field(default=None, kw_only=True, repr=False)


@final
@slot_init
@attrs.frozen
class UriContent(_HtmlRepr):
    """A URI the model cited or produced (citation, annotation, file)."""

    uri: str
    media_type: str | None = None
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class ToolCallStartContent(_HtmlRepr):
    """① The model began a tool call; no arguments yet."""

    call_id: str
    name: str
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class ToolCallArgsContent(_HtmlRepr):
    """② A raw fragment of the call's JSON arguments."""

    call_id: str
    args_delta: str
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class ToolCallArgsParsedContent(_HtmlRepr):
    """②b A top-level argument is complete: ``value == json.loads(args)[name]``."""

    call_id: str
    name: str
    value: Any
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class ToolCallArgsProgressContent(_HtmlRepr):
    """②c A top-level string argument grew.

    ``received`` is the UTF-8 size in bytes of the decoded value so far;
    ``value`` the newly decoded text (whole code points).
    """

    call_id: str
    name: str
    received: int
    value: str
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class ToolCallEndContent(_HtmlRepr):
    """③ The call's arguments are complete (not yet parsed)."""

    call_id: str
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class ToolCallingContent(_HtmlRepr):
    """④ A complete call, parsed and ready to execute.

    ``error`` is set (and ``arguments`` is ``None``) when the arguments are
    not valid JSON; ``raw_arguments`` always keeps the exact string received.
    """

    call_id: str
    name: str
    arguments: Any
    raw_arguments: str = ""
    error: str | None = None
    meta: ResponseMetadata = _meta()

    @property
    def invalid_arguments(self) -> InvalidToolArguments | None:
        """The call's failure as an :class:`~rafrx.errors.InvalidToolArguments`
        (``call_id``, ``raw``) when its arguments did not parse, else ``None``.

        Example:
            >>> bad = ToolCallingContent("c1", "f", None, '{"a": ', error="invalid JSON")
            >>> failure = bad.invalid_arguments
            >>> failure is not None and failure.raw
            '{"a": '
            >>> print(ToolCallingContent("c2", "f", {}).invalid_arguments)
            None
        """
        if self.error is None:
            return None
        return invalid_arguments(self.call_id, self.name, self.error, self.raw_arguments)


def _cut_short(content: ToolCallIncompleteContent) -> str:
    if content.finish_reason is FinishReason.LENGTH:
        return "arguments cut short: the response hit its token limit (finish reason length)"
    return "arguments cut short: the stream ended before the call did"


@final
@attrs.frozen
class ToolCallIncompleteContent(_HtmlRepr):
    """④ A call cut short: it never runs.

    The response ended before the call's arguments did (``finish_reason``
    is ``LENGTH``: the model hit its token limit), or the stream ended or
    failed first (``finish_reason`` is ``None``; a stream that fails after a
    call's arguments ended but before it was flushed to run cuts that call
    short too). ``raw_arguments`` is what arrived; ``partial_value`` what it was
    on its way to (see :func:`rafrx.json_stream.partial_json`; ``None`` when
    nothing could be read): a preview, never arguments to run a tool with.
    ``error`` says why, as :attr:`rafrx.messages.ToolCall.error` will.

    ``whole`` is true for a call whose arguments were whole when the stream
    failed: the provider had ended them, and they parse, or their LLM call
    had finished short of its token limit (the finish reason came, then the
    stream stalled or broke before its end). Only the failure kept it from
    running; :func:`~rafrx.operators.aggregate` keeps it as a complete
    :class:`~rafrx.messages.ToolCall` with its parsed arguments (and no result).

    Example:
        >>> from rafrx.json_stream import partial_json
        >>> raw = '{"path": "a.py", "text": "def f('
        >>> cut = ToolCallIncompleteContent("c1", "write_file", raw, partial_json(raw))
        >>> cut.partial_value
        {'path': 'a.py', 'text': 'def f('}
        >>> cut.error
        'arguments cut short: the stream ended before the call did'
    """

    call_id: str
    name: str
    raw_arguments: str
    partial_value: Any = None
    finish_reason: FinishReason | None = None
    error: str = attrs.field(default=attrs.Factory(_cut_short, takes_self=True))
    whole: bool = attrs.field(default=False, kw_only=True)
    meta: ResponseMetadata = _meta()


def _exclusive(instance: ToolCalledContent, attribute: Any, value: Any) -> None:
    if value is not None and instance.result is not None:
        raise ValueError("ToolCalledContent takes a result or an error, not both")


@final
@slot_init
@attrs.frozen
class ToolCalledContent(_HtmlRepr):
    """⑤ The tool ran: ``result`` on success, ``error`` otherwise (never both)."""

    call_id: str
    result: str | None = None
    error: str | None = attrs.field(default=None, validator=_exclusive)
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class UsageContent(_HtmlRepr):
    """Token usage of one LLM call."""

    usage: Usage
    meta: ResponseMetadata = _meta()


@final
@slot_init
@attrs.frozen
class ErrorContent(_HtmlRepr):
    """The stream failed; the observable's ``on_error`` follows with the exception."""

    message: str
    meta: ResponseMetadata = _meta()


Content = (
    TextContent
    | ReasoningContent
    | UriContent
    | ToolCallStartContent
    | ToolCallArgsContent
    | ToolCallArgsParsedContent
    | ToolCallArgsProgressContent
    | ToolCallEndContent
    | ToolCallingContent
    | ToolCallIncompleteContent
    | ToolCalledContent
    | UsageContent
    | ErrorContent
)
"""Any of the 13 content variants."""
