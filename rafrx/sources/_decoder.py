"""``UpdateDecoder``: response bytes → updates (SSE decoding and a dialect in one object).

Example:
    >>> decoder = UpdateDecoder("openai-chat")
    >>> decoder.feed(b'data: {"choices": [{"delta": {"content": "Hi"}, "finish_reason": "st')
    []
    >>> decoder.feed(b'op"}]}\\n\\ndata: [DONE]\\n\\ndata: ignored')
    [TextDelta(delta='Hi'), Finish(finish_reason=<FinishReason.STOP: 'stop'>, usage=None)]
    >>> decoder.done, decoder.close()
    (True, [])
"""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final

from rafrx._cycles import detached
from rafrx.errors import IncompleteStream, MalformedEvent, RafrxError, error_text
from rafrx.sources._guess import dialect_of
from rafrx.sources.dialects import (
    AnthropicDialect,
    DialectFactory,
    OpenAIChatDialect,
    OpenAIResponsesDialect,
    get_dialect,
)
from rafrx.sources.dialects._common import error_event
from rafrx.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    EventFields,
    ServerSentEvent,
    SSEDecoder,
    event_of,
)
from rafrx.updates import AgentResponseUpdate

__all__ = ["UpdateDecoder"]

#: How much of a body with no event is kept, to say what it held instead.
_HEAD_BYTES = 2048

#: The dialects read from the SSE decoder's event fields (``_feed_fields``), with no
#: :class:`ServerSentEvent` built for their usual events (about 2,000 instructions an
#: event) and no ``done`` check per event: once done, their ``_feed_fields`` ignores
#: the events after it, as ``feed`` does. Only these classes themselves: a subclass
#: may override ``feed``.
_READS_FIELDS: Final = (OpenAIChatDialect, AnthropicDialect, OpenAIResponsesDialect)
_LINE_END = re.compile(rb"\r\n|\r|\n")


def _shown(line: bytes) -> bool:
    """Whether a line of a body with no event says something (no comment, not blank)."""
    return bool(line.strip()) and not line.startswith(b":")


class UpdateDecoder:
    """Sans-IO: the bytes of one streamed response in, updates out.

    Feed it the body in chunks split anywhere; stop reading once :attr:`done`
    is true and call :meth:`close` (which raises the stream's error, if any).

    When an event fails (a :class:`~rafrx.errors.ProviderError` or
    :class:`~rafrx.errors.MalformedEvent` from the dialect; another exception
    raised by a dialect of one's own becomes a ``MalformedEvent`` caused by it,
    keeping the event's data), or a line or an event exceeds its limit
    (:class:`~rafrx.errors.LimitExceeded`), after
    other events of the same chunk produced updates, :meth:`feed` returns
    those updates first and keeps the error: :attr:`done` becomes true and
    the next :meth:`feed` or :meth:`close` raises it. So nothing received
    before an error is lost, whatever the chunking, and the usual loop needs
    no special case::

        for chunk in body:
            for update in decoder.feed(chunk):
                deliver(update)
            if decoder.done:
                break
        for update in decoder.close():  # raises IncompleteStream, ProviderError ...
            deliver(update)

    For example, an event and then a line past the limit, in one read:

    >>> decoder = UpdateDecoder("openai-chat", max_line_bytes=64)
    >>> decoder.feed(b'data: {"choices": [{"delta": {"content": "Hi"}}]}\\n\\ndata: ' + b"x" * 99)
    [TextDelta(delta='Hi')]
    >>> decoder.done
    True
    >>> decoder.close()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rafrx.errors.LimitExceeded: SSE line longer than max_line_bytes=64 bytes ...

    A body that ends with no event at all fails as the provider's error when it
    holds one as plain JSON (a server that answers an event-stream request with
    a JSON error, status 200), else as ``IncompleteStream`` quoting how it began:

    >>> decoder = UpdateDecoder("openai-chat")
    >>> decoder.feed(b'{"error": {"message": "model not loaded", "type": "server_error"}}')
    []
    >>> decoder.close()
    Traceback (most recent call last):
    ...
    rafrx.errors.ProviderError: model not loaded

    A non-standard ``error:`` line (llama.cpp's servers until late 2025) is
    read as ``event: error``, so that it fails the stream as the dialect's
    ``ProviderError`` rather than being ignored (see
    :class:`~rafrx.sse.SSEDecoder`'s ``error_field``).

    Args:
        dialect: A name from :data:`~rafrx.sources.dialects.DIALECTS`, or a
            factory making a :class:`~rafrx.sources.dialects.Dialect`.
        max_line_bytes: Longest SSE line accepted (see :class:`~rafrx.sse.SSEDecoder`).
        max_event_bytes: Longest SSE event data accepted.

    Raises:
        ValueError: An unknown dialect name.
    """

    __slots__ = (
        "_decode",
        "_dialect",
        "_error",
        "_first",
        "_head",
        "_name",
        "_read",
        "_salvaged",
        "_sse",
        "_stops_per_event",
    )

    def __init__(
        self,
        dialect: str | DialectFactory = "openai-chat",
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._dialect = get_dialect(dialect) if isinstance(dialect, str) else dialect()
        self._name = dialect if isinstance(dialect, str) else None
        self._sse = SSEDecoder(
            max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes, error_field=True
        )
        # Each event goes from the SSE decoder to the dialect as a ServerSentEvent, or as
        # its fields (see _READS_FIELDS).
        self._decode: Callable[[bytes], list[Any]] = self._sse.feed
        self._read: Callable[[Any], list[AgentResponseUpdate]] = self._dialect.feed
        self._stops_per_event = True  # checks done after each event
        if type(self._dialect) in _READS_FIELDS:
            self._decode = self._sse._feed_fields
            self._read = self._dialect._feed_fields  # type: ignore[attr-defined]
            self._stops_per_event = False
        self._error: RafrxError | None = None
        self._salvaged = False
        self._head: bytearray | None = bytearray()  # the body's start, until an event comes
        self._first: ServerSentEvent | None = None  # the body's first event

    @property
    def done(self) -> bool:
        """True once the terminal marker (or an error) was seen: stop reading."""
        return self._error is not None or self._dialect.done

    def feed(self, chunk: bytes) -> list[AgentResponseUpdate]:
        """Decode the next piece of the body; ``[]`` once :attr:`done`.

        Raises:
            RafrxError: ``LimitExceeded`` from the SSE decoder, or the
                dialect's ``ProviderError`` / ``MalformedEvent`` (which its
                exception of another kind becomes).
        """
        if self._error is not None:
            raise _again(self._error)
        dialect = self._dialect
        if dialect.done:
            return []
        sse = self._sse
        events = self._decode(chunk)  # ServerSentEvents, or their fields
        if self._head is not None:
            self._keep_head(chunk, events)
        read = self._read
        if len(events) == 1 and sse.error is None:  # a live stream's usual read
            try:
                return read(events[0])
            except RafrxError as err:
                self._raise_if_of_another_dialect(err)
                raise
            except Exception as err:  # (a dialect of one's own failed: typed, caused by it)
                raise _dialect_failed(events[0], err) from err.with_traceback(_below(err))
        out: list[AgentResponseUpdate] = []
        stops_per_event = self._stops_per_event
        for event in events:
            try:
                out += read(event)
            except RafrxError as err:
                if not out:
                    self._raise_if_of_another_dialect(err)
                    raise
                self._error = detached(err)  # (err's traceback holds this decoder)
                return out
            except Exception as err:  # (a dialect of one's own failed: typed, caused by it)
                if not out:
                    raise _dialect_failed(event, err) from err.with_traceback(_below(err))
                self._error = _kept_failure(event, err)
                return out
            if stops_per_event and dialect.done:
                return out  # whatever follows the terminal marker is ignored
        if sse.error is not None and not dialect.done:  # a limit exceeded after these events
            self._error = sse.error
            if not out:
                raise detached(sse.error)
        return out

    def _keep_head(self, chunk: bytes, events: list[ServerSentEvent] | list[EventFields]) -> None:
        head = self._head
        if events:
            self._first = _as_event(events[0])
        if events or head is None:
            self._head = None  # a stream of events: nothing to explain
        elif len(head) < _HEAD_BYTES:
            head += chunk
            if len(head) >= _HEAD_BYTES:  # full: what is worth keeping (no comment lines)
                *lines, rest = _LINE_END.split(bytes(head))
                head[:] = b"".join(line + b"\n" for line in lines if _shown(line)) + rest
                del head[_HEAD_BYTES:]

    def salvage(self) -> list[AgentResponseUpdate]:
        """After the stream failed (an error raised here, a broken connection, a timeout):
        what the dialect still owes from what it received, to deliver before the error.

        That is what the provider sent before the failure but only the end
        would have delivered: the usage reported so far (Anthropic's
        ``message_start`` counts, a Responses ``response.failed`` event's, a
        chat chunk's), and the blocks that came whole (Anthropic's signed
        thinking and server tool results whose stop event never came, chat's
        signed LiteLLM thinking blocks and OpenRouter's reasoning details); and,
        once a finish reason came (with no error event after it), the ``Finish``
        itself, as the end of the body would have given it. ``[]`` after the
        terminal marker, on a second call, or from a dialect without ``salvage()``.

        Example:
            >>> decoder = UpdateDecoder("anthropic")
            >>> _ = decoder.feed(b'event: message_start\\ndata: {"type": "message_start", '
            ...     b'"message": {"usage": {"input_tokens": 9, "output_tokens": 1}}}\\n\\n')
            >>> decoder.salvage(), decoder.salvage()  # doctest: +NORMALIZE_WHITESPACE
            ([Usage(usage=Usage(prompt_tokens=9, completion_tokens=1, total_tokens=10,
                                reasoning_tokens=None, cached_tokens=None))], [])
        """
        salvage = getattr(self._dialect, "salvage", None)
        if salvage is None or self._salvaged or self._dialect.done:
            return []
        self._salvaged = True
        owed: list[AgentResponseUpdate] = salvage()
        return owed

    def close(self) -> list[AgentResponseUpdate]:
        """End of the body: the updates the dialect held back (usually ``Finish``).

        Raises:
            IncompleteStream: The body ended without the terminal marker.
            RafrxError: The error kept by :meth:`feed`.
        """
        if self._error is not None:
            raise _again(self._error)
        # No SSEDecoder.close(): an unfinished event is dropped anyway, and a limit
        # exceeded after the terminal marker is not an error (feed() kept any other).
        try:
            return self._dialect.close()
        except IncompleteStream as err:
            if self._head:
                raise _no_events(err, self._head) from None
            self._raise_if_of_another_dialect(err)
            raise

    def _raise_if_of_another_dialect(self, err: RafrxError) -> None:
        """When ``err`` is an :class:`~rafrx.errors.IncompleteStream` of a body whose first
        event is of another dialect than the one decoding it (named), raise a copy saying
        so: the body may well be whole (``from_sse(body)`` of an Anthropic body).

        (It raises rather than returns the error: a caller's local holding the error its
        traceback leads back to would be a reference cycle.)"""
        if not isinstance(err, IncompleteStream) or self._first is None or self._name is None:
            return
        other = dialect_of(self._first)
        if other is not None and other != self._name:
            raise _of_another_dialect(err, other, self._name) from None


def _again(kept: RafrxError) -> RafrxError:
    """A copy of an error the decoder kept, to raise, with the exception it was caused
    by (a dialect's own, see :func:`_dialect_failed`)."""
    error = detached(kept)
    if kept.__cause__ is not None:
        error.__cause__ = kept.__cause__
    return error


def _as_event(event: ServerSentEvent | EventFields) -> ServerSentEvent:
    """An event the SSE decoder gave, as a :class:`ServerSentEvent` (it may be its fields)."""
    return event if isinstance(event, ServerSentEvent) else event_of(event)


def _dialect_failed(event: ServerSentEvent | EventFields, error: Exception) -> MalformedEvent:
    """The error of a dialect that failed to read ``event`` with an exception of its own
    (not a :class:`~rafrx.errors.RafrxError`): a :class:`~rafrx.errors.MalformedEvent`
    keeping the event's data, to be raised from ``error``.

    Example:
        >>> _dialect_failed(ServerSentEvent(data="{}"), KeyError("text"))
        MalformedEvent("the dialect could not read an event: KeyError: 'text'")
    """
    event = _as_event(event)
    return MalformedEvent(
        f"the dialect could not read an event: {type(error).__name__}: {error_text(error)}",
        raw=event.data,
        event_name=event.event,
    )


def _kept_failure(event: ServerSentEvent | EventFields, error: Exception) -> MalformedEvent:
    """:func:`_dialect_failed` to keep (and raise later), caused by ``error`` without
    the frames of the exceptions of its chain (each dialect frame leads back to the
    decoder that keeps it); the dialect's traceback goes in a note instead."""
    below = _below(error)
    if below is not None:
        trace = "".join(traceback.format_tb(below))
        error.add_note(f"the dialect's traceback (most recent call last):\n{trace}")
    chain: BaseException | None = error
    for _ in range(16):  # (a chain of its own making: bounded)
        if chain is None:
            break
        chain.__traceback__ = None
        chain = chain.__cause__ or chain.__context__
    failed = _dialect_failed(event, error)
    failed.__cause__ = error
    return failed


def _below(error: Exception) -> TracebackType | None:
    """``error``'s traceback below the frame that caught it (the decoder's, which an
    error it keeps must not hold): from the dialect's frame on."""
    traceback = error.__traceback__
    return None if traceback is None else traceback.tb_next


def _of_another_dialect(err: IncompleteStream, other: str, name: str) -> IncompleteStream:
    """``err`` of a body whose first event is of the dialect ``other``, not of ``name``, the
    one decoding it (``from_sse(body)``, openai-chat by default, of an Anthropic body):
    saying so, for the body may well be whole.

    Example:
        >>> _of_another_dialect(IncompleteStream("no [DONE]"), "anthropic", "openai-chat")
        IncompleteStream("no [DONE]; its events are anthropic's, not openai-chat's: decode it with dialect='anthropic'")
    """  # noqa: E501
    return IncompleteStream(
        f"{err.message}; its events are {other}'s, not {name}'s: decode it with dialect={other!r}"
    )


def _no_events(err: IncompleteStream, head: bytearray) -> RafrxError:
    """Why a body with no event ended: the provider's error it holds as JSON (not as
    an event), or ``err`` saying how the body began (its lines that are no comments)."""
    lines = _LINE_END.split(bytes(head).removeprefix(b"\xef\xbb\xbf"))  # (less a BOM)
    shown = b"\n".join(line for line in lines if _shown(line)).decode("utf-8", "replace")
    if not shown:  # nothing, or keep-alive comments only
        return err
    try:
        payload = json.loads(shown)
    except (ValueError, RecursionError):
        payload = None
    if isinstance(payload, dict) and ("error" in payload or payload.get("type") == "error"):
        return error_event(ServerSentEvent(event="error", data=shown))
    began = shown if len(shown) <= 200 else shown[:199] + "…"
    return IncompleteStream(f"{err.message}; the body held no event, it began: {began!r}")
