"""What :class:`~rafrx.testing.LLMServer` answers: replays, scripted replies and faults.

Each value describes one HTTP response. The server takes them from its queue
(one per request), from its script, or uses its default.

Example:
    >>> reply = Reply(text="Paris.", tool_calls=[ToolCallSpec("weather", {"city": "Paris"})])
    >>> reply.tool_calls[0].arguments_json()
    '{"city":"Paris"}'
    >>> Fault.status(429, retry_after=2).kind
    'status'
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias, final

import attrs

from rafrx.response import _PROVIDER_REASONS, FinishReason, Usage

__all__ = [
    "DEFAULT_REPLY",
    "FINISH_SPELLINGS",
    "Body",
    "Fault",
    "FaultKind",
    "Replay",
    "Reply",
    "ServerResponse",
    "ToolCallSpec",
]

FaultKind: TypeAlias = Literal[
    "status", "drop_after", "stall", "garbage", "huge_line", "wrong_content_type"
]


@final
@attrs.frozen
class ToolCallSpec:
    """A tool call a :class:`Reply` makes.

    Args:
        name: The tool's name.
        arguments: A JSON-ready dict (serialised compactly on the wire) or the
            exact argument string to send (which may be invalid JSON).
        id: The call id; generated (``call_…`` / ``toolu_…``) when ``None``.
    """

    name: str
    arguments: Mapping[str, Any] | str = attrs.field(factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        """The argument string as it goes on the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(
            self.arguments, ensure_ascii=False, separators=(",", ":"), default=_mapping_as_dict
        )


def _mapping_as_dict(value: Any) -> dict[str, Any]:
    """A mapping that is no dict, for :func:`json.dumps` (``MappingProxyType`` …)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _tool_calls(value: Iterable[ToolCallSpec]) -> tuple[ToolCallSpec, ...]:
    if isinstance(value, ToolCallSpec):
        raise TypeError("Reply.tool_calls takes a list of ToolCallSpec, not a lone one")
    calls = tuple(value)
    for call in calls:
        if not isinstance(call, ToolCallSpec):
            raise TypeError(f"Reply.tool_calls takes ToolCallSpec values, not {call!r}")
    return calls


_REASONS: Final = tuple(reason.value for reason in FinishReason)

#: The spellings ``Reply(finish=...)`` takes: rafrx's reasons, then the providers' that
#: :meth:`~rafrx.FinishReason.from_provider` knows.
FINISH_SPELLINGS: Final = (*_REASONS, *sorted(set(_PROVIDER_REASONS) - set(_REASONS)))


def _finish(value: FinishReason | str | None) -> FinishReason | str | None:
    """A :class:`~rafrx.FinishReason`; a provider's spelling (lower case) kept as given.

    Raises:
        ValueError: ``value`` is a spelling no provider uses (a typo).
        TypeError: ``value`` is no string.
    """
    if value is None or isinstance(value, FinishReason):
        return value
    if not isinstance(value, str):
        raise TypeError(f"Reply.finish takes a FinishReason or a string, not {value!r}")
    spelling = value.lower()
    if spelling not in FINISH_SPELLINGS:
        raise ValueError(
            f"Reply.finish takes a FinishReason or one of {', '.join(FINISH_SPELLINGS)};"
            f" not {value!r}"
        )
    return FinishReason(spelling) if spelling in _REASONS else spelling


def _stop_sequence(instance: Any, attribute: Any, value: str | None) -> None:
    """Refuse a ``Reply.stop_sequence`` that is no string, or empty.

    Raises:
        TypeError: ``value`` is neither a string nor ``None``.
        ValueError: ``value`` is empty (no sequence matched).
    """
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"Reply.stop_sequence takes a string, not {value!r}")
    if not value:
        raise ValueError("Reply.stop_sequence is the sequence that matched: not empty")


def _positive(instance: Any, attribute: Any, value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value}")


@final
@attrs.frozen
class Reply:
    """A scripted answer, rendered in the wire format of the endpoint that was hit.

    OpenAI chat gets ``chat.completion.chunk`` deltas (the first with
    ``content: null`` when there are calls but no text, else ``""``;
    reasoning as DeepSeek's ``reasoning_content``, tool calls as
    ``tool_calls`` deltas whose arguments are split into ``chunk_size``
    pieces) and ``data: [DONE]``; Anthropic gets ``message_start`` …
    ``message_stop`` with thinking, text and ``tool_use`` blocks (``ping``
    after the first block's start; a call's input opening with an empty piece,
    and no other for empty arguments, as Anthropic streams them); Responses
    gets ``response.created`` … ``response.completed``, whose Response
    echoes the request's ``tools`` and ``tool_choice`` and whose usage always
    has its token details.

    Args:
        text: The assistant text.
        reasoning: Reasoning text, streamed before the text.
        tool_calls: Calls streamed after the text, one after the other.
        finish: The finish reason; by default ``TOOL_CALLS`` when there are
            calls, else ``STOP``. A provider's spelling (any of
            :data:`FINISH_SPELLINGS`: ``"end_turn"``, ``"pause_turn"``,
            ``"refusal"`` …) is kept: the endpoint whose wire format has it
            sends it as spelled (Anthropic's ``stop_reason: "pause_turn"``,
            chat's ``finish_reason: "sensitive"``), the others send the reason
            it means (:meth:`~rafrx.FinishReason.from_provider`: ``pause_turn``
            is ``OTHER``, ``refusal`` ``CONTENT_FILTER``); a spelling no
            provider uses is a ``ValueError`` naming those it takes.
            ``ERROR`` is a failure after the partial content: Anthropic gets
            an ``error`` event (``api_error``) instead of ``message_delta``,
            Responses ``response.failed``, and chat ``finish_reason:
            "error"``, which OpenAI never sends but OpenAI-compatible servers
            (OpenRouter, vLLM …) do. ``OTHER`` sends ``"other"`` (chat
            ``finish_reason``, Anthropic ``stop_reason``), a value no provider
            documents: a probe of how a client takes an unknown one.
        usage: The usage to report; by default estimated from the request and
            the reply (about four characters a token), as real servers count.
            Anthropic's ``input_tokens`` leave out the ``cached_tokens``
            (sent as ``cache_read_input_tokens``), as its API counts them.
        chunk_size: Characters per text, reasoning or argument delta.
        delay: Seconds to wait between events.
        model: The model name reported; by default the request's ``model``.
        stop_sequence: The stop sequence that matched, for ``finish="stop_sequence"``
            (which it implies when ``finish`` is not given; with another finish it
            is a ``ValueError``). Anthropic's ``message_delta`` sends it as its
            ``stop_sequence``; by default that is the first of the request's
            ``stop_sequences``, ``null`` when it had none. OpenAI chat names no
            sequence (``finish_reason: "stop"``), and Responses has no stop
            sequences (``response.completed``).

    Example:
        >>> Reply(text="1, 2, 3", stop_sequence="4").finish
        'stop_sequence'
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCallSpec, ...] = attrs.field(default=(), converter=_tool_calls)
    finish: FinishReason | str | None = attrs.field(default=None, converter=_finish)
    usage: Usage | None = None
    chunk_size: int = attrs.field(default=8, validator=_positive)
    delay: float = 0.0
    model: str | None = None
    stop_sequence: str | None = attrs.field(default=None, validator=_stop_sequence)

    def __attrs_post_init__(self) -> None:
        if self.stop_sequence is None:
            return
        if self.finish is None:  # (a matched stop sequence says why the reply ended)
            object.__setattr__(self, "finish", "stop_sequence")
        elif self.finish != "stop_sequence":
            raise ValueError(
                "Reply.stop_sequence is the stop sequence that matched: it goes with"
                f' finish="stop_sequence" (or no finish), not finish={self.finish!r}'
            )

    @property
    def finish_reason(self) -> FinishReason:
        """The finish reason this reply reports."""
        if isinstance(self.finish, str):  # (a FinishReason is a str too)
            return FinishReason.from_provider(self.finish)
        return FinishReason.TOOL_CALLS if self.tool_calls else FinishReason.STOP


#: What the server answers when its queue is empty and no script is set.
DEFAULT_REPLY = Reply(text="Hello from the rafrx test server!")


@final
@attrs.frozen
class Replay:
    """Raw bytes (e.g. a recorded ``.sse`` file) served as ``text/event-stream``.

    Args:
        body: The bytes, or the path of a file holding them (read when served,
            before the response headers: a file that cannot be read is an
            HTTP 500 naming the error).
        chunk_size: Bytes per write; the whole body at once when ``None``.
        delay: Seconds to wait between writes.
        pacing: Write event by event (split after each blank line, whatever
            its line endings: CRLF, LF or CR) instead of by ``chunk_size``,
            waiting ``delay`` between events, as a live provider would.
    """

    body: bytes | str | os.PathLike[str]
    chunk_size: int | None = attrs.field(default=None)
    delay: float = 0.0
    pacing: bool = False

    @chunk_size.validator
    def _check_chunk_size(self, attribute: Any, value: int | None) -> None:
        if value is not None:
            _positive(self, attribute, value)

    def read(self) -> bytes:
        """The bytes to serve."""
        if isinstance(self.body, bytes):
            return self.body
        with open(self.body, "rb") as file:
            return file.read()


Body: TypeAlias = bytes | Reply | Replay
"""A faulty response's underlying body: raw bytes, a reply rendered for the
endpoint, or a replay."""


@final
@attrs.frozen
class Fault:
    """A misbehaving response; build one with the class methods.

    ``body`` is what the server streams around the fault (a :class:`Reply`
    rendered for the endpoint by default), paced as it would be on its own (a
    reply's ``delay``, a replay's ``chunk_size``, ``delay`` and ``pacing``);
    ``at`` is the byte offset into that body where the fault strikes.

    Example:
        A reply streamed an event every 50 ms, cut after its first 300 bytes:

        >>> fault = Fault.drop_after(300, body=Reply(text="Slowly...", chunk_size=1, delay=0.05))
    """

    kind: FaultKind
    status_code: int = attrs.field(default=200)
    body: bytes | Reply | Replay | None = None
    at: int | None = None
    seconds: float = 0.0
    size: int = 0
    data: bytes | None = None
    framed: bool = True
    reset: bool = False
    seed: int = 0
    content_type: str | None = None
    message: str | None = None
    error_type: str | None = None
    error_body: bytes | str | Mapping[str, Any] | None = None
    retry_after: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)

    @status_code.validator
    def _check_status_code(self, attribute: Any, value: int) -> None:
        if not 100 <= value <= 999:
            raise ValueError(f"an HTTP status has three digits (100-999), got {value}")

    @classmethod
    def status(
        cls,
        status: int,
        *,
        message: str | None = None,
        error_type: str | None = None,
        body: bytes | str | Mapping[str, Any] | None = None,
        retry_after: float | str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Fault:
        """An HTTP error status before any body.

        Args:
            status: The HTTP status code (three digits: a ``ValueError`` else).
            message: The error message; by default the reason phrase
                (``Overloaded`` for 529, Anthropic's).
            error_type: The provider error type (``rate_limit_error`` …);
                by default the provider's for ``status``
                (:func:`~rafrx.testing.error_body`).
            body: The exact body instead of the provider's JSON error shape:
                a mapping (sent as JSON), ``str`` (``text/plain``; ``""`` for
                an empty body) or ``bytes`` (``application/json``).
            retry_after: The ``Retry-After`` header (seconds or an HTTP date).
            headers: More response headers (e.g. ``retry-after-ms``). Names are
                case-insensitive: ``content-type`` replaces the default
                ``Content-Type``; ``retry_after`` replaces a ``retry-after``.
        """
        return cls(
            "status",
            status_code=status,
            message=message,
            error_type=error_type,
            error_body=body,
            retry_after=None if retry_after is None else _header_value(retry_after),
            headers=dict(headers or {}),
        )

    @classmethod
    def drop_after(cls, n_bytes: int, *, body: Body | None = None, reset: bool = False) -> Fault:
        """Send the first ``n_bytes`` of the body, then drop the connection.

        Args:
            n_bytes: Body bytes sent before the drop.
            body: The body; a default :class:`Reply` rendered for the endpoint.
            reset: Abort with a TCP reset (RST, unsent data discarded) instead
                of closing after the bytes are flushed.
        """
        return cls("drop_after", body=body, at=n_bytes, reset=reset)

    @classmethod
    def stall(
        cls, seconds: float, *, after_bytes: int | None = None, body: Body | None = None
    ) -> Fault:
        """Go silent for ``seconds``, then send the rest.

        Args:
            seconds: How long to stall.
            after_bytes: ``None`` stalls before the response headers (the
                client's first-byte timeout); a number stalls after that many
                body bytes (its idle timeout).
            body: The body; a default :class:`Reply` rendered for the endpoint.
        """
        return cls("stall", body=body, at=after_bytes, seconds=seconds)

    @classmethod
    def garbage(
        cls,
        data: bytes | None = None,
        *,
        size: int = 32,
        at: int | None = None,
        framed: bool = True,
        seed: int = 0,
        body: Body | None = None,
    ) -> Fault:
        """Insert bytes that are not what the format promises.

        Args:
            data: The bytes to insert; by default ``size`` random bytes
                (seeded by ``seed``, never CR or LF, often invalid UTF-8).
            size: How many random bytes.
            at: The body offset to insert at; by default right after the
                first event.
            framed: Wrap the bytes as an event of their own
                (``data: …\\n\\n``); ``False`` inserts them raw, e.g. inside
                a JSON string to test invalid UTF-8.
            seed: The random seed.
            body: The body; a default :class:`Reply` rendered for the endpoint.
        """
        return cls("garbage", body=body, at=at, size=size, data=data, framed=framed, seed=seed)

    @classmethod
    def huge_line(cls, size: int = 17 * 1024 * 1024, *, body: Body | None = None) -> Fault:
        """Stream a ``data:`` line of ``size`` bytes that never ends, then EOF.

        Args:
            size: Bytes in the line (streamed in 64 KiB writes).
            body: Events sent first: the body up to its first event boundary.
        """
        return cls("huge_line", body=body, size=size)

    @classmethod
    def wrong_content_type(
        cls,
        content_type: str = "text/html; charset=utf-8",
        *,
        body: bytes | str = b"<html><body><h1>502 Bad Gateway</h1></body></html>",
        status: int = 200,
    ) -> Fault:
        """A response that is not an event stream (a proxy's HTML page, JSON …)."""
        data = body.encode() if isinstance(body, str) else body
        return cls("wrong_content_type", status_code=status, content_type=content_type, data=data)


def _header_value(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


ServerResponse: TypeAlias = Reply | Replay | Fault
"""Anything :class:`~rafrx.testing.LLMServer` can answer with."""
