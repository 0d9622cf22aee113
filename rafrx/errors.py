"""The rafrx exception hierarchy.

Every failure rafrx reports is a :class:`RafrxError`. Errors raised by a stream
carry what is known about the failure (HTTP ``status`` and ``body``, the
provider's error ``type``, whether a retry could help) and, once
``aggregate()`` has seen them, ``partial``: the :class:`~rafrx.AgentResponse`
built from everything received before the failure.

Example:
    >>> err = HTTPStatusError(429, body='{"error": "slow down"}', retry_after=2.0)
    >>> isinstance(err, RafrxError), err.status, err.retryable
    (True, 429, True)

Secrets never reach an error (clients redact API keys before constructing one),
and messages and bodies are truncated to :data:`MAX_BODY_CHARS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rafrx.response import AgentResponse

__all__ = [
    "MAX_BODY_CHARS",
    "ConnectTimeout",
    "ContentTypeError",
    "HTTPStatusError",
    "IdleTimeout",
    "IncompleteStream",
    "InvalidToolArguments",
    "LimitExceeded",
    "MalformedEvent",
    "MaxStepsExceeded",
    "ProtocolError",
    "ProviderError",
    "RafrxError",
    "StreamInterrupted",
    "StreamTimeout",
    "ToolApprovalDenied",
    "ToolError",
    "ToolExecutionError",
    "ToolNotFound",
    "ToolTimeout",
    "TransportError",
    "TurnTimeout",
]

#: Longest message or response body (in characters) an error keeps; the rest is cut.
MAX_BODY_CHARS = 8192

_RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def error_text(error: BaseException) -> str:
    """``str(error)``, or a placeholder naming its type when ``str()`` itself raises.

    For exceptions from code rafrx does not control (tools, approvers, your
    operators), whose ``__str__`` may fail: describing an error must not
    become the failure.

    Example:
        >>> class Odd(Exception):
        ...     def __str__(self) -> str:
        ...         raise RuntimeError
        >>> error_text(ValueError("bad")), error_text(Odd())
        ('bad', '<Odd: str() failed>')
    """
    try:
        return str(error)
    except Exception:
        return f"<{type(error).__name__}: str() failed>"


def _clip(body: str | None) -> str | None:
    if body is None or len(body) <= MAX_BODY_CHARS:
        return body
    return body[:MAX_BODY_CHARS] + f"… [{len(body) - MAX_BODY_CHARS} more characters]"


class RafrxError(Exception):
    """Base class of every error rafrx raises or emits.

    Attributes:
        message: What happened, in words.
        status: The HTTP status code, when the failure has one.
        body: The response body (clipped), when there is one.
        retryable: Whether the same request could succeed if sent again.
        partial: The response built from what was received before the
            failure; set by ``aggregate()`` / ``collect_agent_response()``.
        attempts: How many times the request was sent: more than 1 when a
            retry policy sent it again (the message then ends with
            "(after N attempts)"); this is the last attempt's error.
        request_id: The server's id for the failed request (its
            ``x-request-id`` / ``request-id`` header), what the providers'
            support asks for, when a response came: an HTTP error's, and a
            stream's that failed after its 200 (an in-band error event, a cut).
    """

    retryable: bool = False
    attempts: int = 1
    request_id: str | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        message = _clip(message) or ""
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = _clip(body)
        if retryable is not None:
            self.retryable = retryable
        self.partial: AgentResponse | None = None

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        extra = f", status={self.status}" if self.status is not None else ""
        return f"{type(self).__name__}({self.message!r}{extra})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__.copy()))


def _rebuild(cls: type[RafrxError], state: dict[str, Any]) -> RafrxError:
    err = cls.__new__(cls)
    Exception.__init__(err, state.get("message", ""))
    err.__dict__.update(state)
    return err


# ---------------------------------------------------------------- transport


class TransportError(RafrxError):
    """The connection could not be made or broke (refused, reset, DNS)."""

    retryable = True


class StreamInterrupted(TransportError):
    """The connection dropped after the response started streaming."""

    retryable = False


class StreamTimeout(TransportError):
    """A configured timeout elapsed."""


class ConnectTimeout(StreamTimeout):
    """No connection (or no response headers) within the connect timeout."""


class IdleTimeout(StreamTimeout):
    """The server sent nothing for longer than the idle timeout."""

    retryable = False


class TurnTimeout(StreamTimeout, TimeoutError):
    """An agent's turn took longer than its ``timeout`` (``Agent.send(..., timeout=...)``):
    it was stopped, and ``partial`` holds what it had received and run. A
    ``TimeoutError`` too, as ``asyncio.timeout`` raises (without what arrived)."""

    retryable = False


# ---------------------------------------------------------------- HTTP


class HTTPStatusError(RafrxError):
    """The server answered with an HTTP error status.

    Attributes:
        provider_message: The error message the provider put in the body.
        error_type: The provider's error type (``rate_limit_error`` ...).
        code: The provider's error code, when it sends one (OpenAI's
            ``rate_limit_exceeded``, ``insufficient_quota`` ...).
        retry_after: Seconds the server asked to wait (``Retry-After``).
        request_id: The server's id for the request (``x-request-id`` /
            ``request-id``), what the providers' support asks for.
    """

    status: int  # always set: an HTTP error has its status

    def __init__(
        self,
        status: int,
        *,
        body: str | None = None,
        provider_message: str | None = None,
        error_type: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        message: str | None = None,
        request_id: str | None = None,
    ) -> None:
        if message is None:
            message = f"HTTP {status}"
            if provider_message:
                message += f": {provider_message}"
        retryable = status in _RETRYABLE_STATUSES or status >= 500  # as the SDKs: any 5xx
        super().__init__(message, status=status, body=body, retryable=retryable)
        self.request_id = request_id
        self.provider_message = provider_message
        self.error_type = error_type
        self.code = code
        self.retry_after = retry_after


# ---------------------------------------------------------------- protocol


class ProtocolError(RafrxError):
    """The bytes received do not follow the expected wire format."""


class ContentTypeError(ProtocolError):
    """The response is not ``text/event-stream``; ``body`` holds a snippet."""


class LimitExceeded(ProtocolError):
    """A line, an event or a tool argument grew past its configured limit."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class MalformedEvent(ProtocolError):
    """An event's data is not the JSON the dialect expects.

    Attributes:
        raw: The event's data, clipped.
        event_name: The SSE event type, when there was one.
    """

    def __init__(self, message: str, *, raw: str, event_name: str | None = None) -> None:
        super().__init__(message)
        self.raw = _clip(raw) or ""
        self.event_name = event_name


class IncompleteStream(ProtocolError):
    """The stream ended without the provider's terminal marker."""


class ProviderError(RafrxError):
    """The provider reported an error inside the stream.

    Attributes:
        error_type: The provider's error type, e.g. ``overloaded_error``.
        code: The provider's error code, when it sends one.
    """

    def __init__(
        self,
        message: str,
        *,
        error_type: str | None = None,
        code: str | None = None,
        retryable: bool | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message, body=body, retryable=retryable)
        self.error_type = error_type
        self.code = code


# ---------------------------------------------------------------- tools


class ToolError(RafrxError):
    """A tool call could not be carried out. Sent back to the model as text."""

    def __init__(self, message: str, *, call_id: str | None = None, name: str | None = None):
        super().__init__(message)
        self.call_id = call_id
        self.name = name


class ToolNotFound(ToolError):
    """The model called a tool that was not offered."""


class InvalidToolArguments(ToolError):
    """A tool call's arguments are not valid JSON or fail validation.

    Scoped to that one call: the response's text and its other calls stand.
    :attr:`ToolCallingContent.invalid_arguments
    <rafrx.content.ToolCallingContent.invalid_arguments>` and
    :attr:`ToolCall.invalid_arguments <rafrx.messages.ToolCall.invalid_arguments>`
    give it for a call whose arguments did not parse, so the caller can repair
    them or ask the model again.

    Attributes:
        call_id: The call's id, when known.
        name: The tool's name, when known.
        raw: The arguments exactly as the model sent them (clipped), when
            they did not parse; never in the message or the ``repr``.

    Example:
        >>> err = InvalidToolArguments("invalid arguments for tool 'f': bad JSON",
        ...                            call_id="c1", name="f", raw='{"a": ')
        >>> err.call_id, err.raw, err
        ('c1', '{"a": ', InvalidToolArguments("invalid arguments for tool 'f': bad JSON"))
    """

    def __init__(
        self,
        message: str,
        *,
        call_id: str | None = None,
        name: str | None = None,
        raw: str | None = None,
    ) -> None:
        super().__init__(message, call_id=call_id, name=name)
        self.raw = _clip(raw)


def invalid_arguments(call_id: str, name: str, why: str, raw: str | None) -> InvalidToolArguments:
    """The error of a call whose arguments did not parse (``why``: the parse error)."""
    return InvalidToolArguments(
        f"invalid arguments for tool {name!r}: {why}", call_id=call_id, name=name, raw=raw
    )


class ToolTimeout(ToolError):
    """A tool ran longer than its timeout and was cancelled."""


class ToolApprovalDenied(ToolError):
    """The approver refused a tool call that requires approval."""


class ToolExecutionError(ToolError):
    """The tool raised an exception."""


class MaxStepsExceeded(RafrxError):
    """An agent turn had not ended after ``max_steps`` LLM calls: the model was still
    calling tools, or the server still went on with the turn (Anthropic's ``pause_turn``,
    approvals of the Responses API's remote MCP tools answered)."""
