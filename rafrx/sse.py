"""An incremental, WHATWG-conformant Server-Sent-Events decoder.

:class:`SSEDecoder` turns the bytes of a ``text/event-stream`` response,
split anywhere, into :class:`ServerSentEvent` objects, following the
"event stream interpretation" of the HTML Living Standard exactly: UTF-8 with
U+FFFD for invalid bytes, one leading BOM stripped, CRLF / LF / CR line ends,
``:`` comments, the ``data`` / ``event`` / ``id`` / ``retry`` fields, and no
dispatch of an event whose blank line never came. It is sans-IO: hand it
bytes with :meth:`~SSEDecoder.feed`, end the stream with
:meth:`~SSEDecoder.close`.

Example:
    >>> decoder = SSEDecoder()
    >>> decoder.feed(b"event: greeting\\r\\ndata: hel")
    []
    >>> decoder.feed(b"lo\\r\\nid: 1\\r")
    []
    >>> decoder.feed(b"\\n\\r\\ndata: {\\"n\\": 2}\\n\\n")
    [ServerSentEvent(event='greeting', data='hello', id='1', retry=None), \
ServerSentEvent(event='message', data='{"n": 2}', id='1', retry=None)]
    >>> decoder.last_event_id
    '1'
    >>> decoder.close()
    []

Memory is bounded: a line longer than ``max_line_bytes`` or an event whose
data is longer than ``max_event_bytes`` (both counted in UTF-8 bytes) raises
:class:`~rafrx.errors.LimitExceeded` as soon as a chunk carries it over the
limit, so the decoder never holds much more than the limits plus one chunk.
A data line counts toward its event as its bytes arrive, ended or not; a line
past both limits fails with the one it reached first (the event's at a tie).
The events completed before the offending line or event come first, however
the body is split: ``feed()`` returns them and keeps the error for the next
``feed()`` or ``close()`` (:attr:`SSEDecoder.error` tells a reader to stop):

    >>> decoder = SSEDecoder(max_line_bytes=16)
    >>> [e.data for e in decoder.feed(b"data: ok\\n\\ndata: " + b"x" * 20)]
    ['ok']
    >>> decoder.close()
    Traceback (most recent call last):
    ...
    rafrx.errors.LimitExceeded: SSE line longer than max_line_bytes=16 bytes (is the response \
really an event stream?)
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from itertools import starmap
from typing import Any, Final, TypeAlias, final

import attrs

from rafrx._cycles import detached
from rafrx._slot_init import slot_builder
from rafrx.errors import ContentTypeError, LimitExceeded

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "SSEDecoder",
    "ServerSentEvent",
    "aiter_events",
    "check_content_type",
    "iter_events",
    "sniff_event_stream",
]

#: Default longest line (16 MiB) :class:`SSEDecoder` accepts.
DEFAULT_MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: Default longest event data (64 MiB) :class:`SSEDecoder` accepts.
DEFAULT_MAX_EVENT_BYTES: Final = 64 * 1024 * 1024

# int() refuses longer decimal strings (CPython's int_max_str_digits guard).
_MAX_RETRY_DIGITS: Final = 4300

_utf8_decode = codecs.utf_8_decode


@final
@attrs.frozen
class ServerSentEvent:
    """One dispatched event.

    Example:
        >>> ServerSentEvent(data='{"a": 1}').json()
        {'a': 1}
    """

    event: str = "message"
    """The event type: the last ``event`` field of the block, else ``"message"``."""
    data: str = ""
    """The ``data`` lines of the block, joined with ``"\\n"``."""
    id: str = ""
    """The last event ID committed when the event was dispatched (``""`` for none)."""
    retry: int | None = None
    """The reconnection time in milliseconds in force at dispatch, or ``None``
    if the stream has not set one."""

    def json(self) -> Any:
        """Parse :attr:`data` as JSON.

        Returns:
            The decoded JSON value.

        Raises:
            json.JSONDecodeError: If the data is not JSON.
        """
        return json.loads(self.data)


# attrs' generated __init__ for a frozen class calls object.__setattr__ once
# per field; on the hot path (one event per LLM token) a builder storing the
# slots directly is cheaper (see :func:`~rafrx._slot_init.slot_builder`; tests
# check both give equal objects).
assert [a.name for a in attrs.fields(ServerSentEvent)] == ["event", "data", "id", "retry"]
_make_event: Final[Callable[[str, str, str, int | None], ServerSentEvent]] = slot_builder(
    ServerSentEvent
)

EventFields: TypeAlias = tuple[str, str, str, int | None]
"""An event as its fields (``event``, ``data``, ``id``, ``retry``): what the decoder
makes of each event before it builds the :class:`ServerSentEvent`, which the built-in
dialects do without on their usual events (``SSEDecoder._feed_fields``)."""


def event_of(fields: EventFields) -> ServerSentEvent:
    """The :class:`ServerSentEvent` of an event's fields.

    Example:
        >>> event_of(("ping", "{}", "7", None))
        ServerSentEvent(event='ping', data='{}', id='7', retry=None)
    """
    return _make_event(*fields)


def _usual_block(block: str, event_type: str) -> tuple[str, str] | None:
    """``(event type, data)`` of a block of one of the usual shapes; None for any other.

    The usual shapes are one ``data`` line, and an ``event`` line followed by
    one ``data`` line (a space after the colon or not). ``event_type`` is the
    type set by earlier lines of the same event, if any.
    """
    if block.startswith("event:"):
        nl = block.find("\n")
        if nl < 0 or not block.startswith("data:", nl + 1) or block.find("\n", nl + 1) >= 0:
            return None
        etype = block[7:nl] if block.startswith(" ", 6) else block[6:nl]
        nl += 6
        return etype, block[nl + 1 :] if block.startswith(" ", nl) else block[nl:]
    if not block.startswith("data:") or "\n" in block:
        return None
    return event_type, block[6:] if block.startswith(" ", 5) else block[5:]


def _utf8_len(text: str) -> int:
    """Return the length of ``text`` in UTF-8 bytes (``isascii`` is O(1))."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class SSEDecoder:
    """Incremental ``text/event-stream`` decoder (sans-IO).

    Feed it the response body in chunks of any size, split anywhere (inside a
    CRLF, a multi-byte character or the BOM); the events are the same as for
    the whole body at once. The work is done with C-level string operations
    per chunk and per event, never per character.

    After :meth:`close` the decoder can read the next response of the same
    source (a reconnection): :attr:`last_event_id` and :attr:`retry` carry
    over, everything else starts afresh, including BOM stripping.

    Args:
        max_line_bytes: Longest line accepted, in UTF-8 bytes, without its
            line end.
        max_event_bytes: Longest event data accepted, in UTF-8 bytes.
        error_field: Also read a non-standard ``error: X`` line, as
            ``event: error`` and ``data: X`` (the standard ignores it). Servers
            built on llama.cpp before late 2025 report a failure mid-stream
            that way, with HTTP 200 (ggml-org/llama.cpp#16109); without this,
            the stream would seem to end well.

    Example:
        >>> d = SSEDecoder()
        >>> [e.data for e in d.feed(b"data: a\\ndata: b\\n\\nretry: 3000\\n\\n")], d.retry
        (['a\\nb'], 3000)
        >>> SSEDecoder(error_field=True).feed(b'error: {"code": 500}\\n\\n')
        [ServerSentEvent(event='error', data='{"code": 500}', id='', retry=None)]
    """

    __slots__ = (
        "_at_start",
        "_data",
        "_data_size",
        "_error",
        "_error_field",
        "_event_type",
        "_held",
        "_id_buffer",
        "_last_id",
        "_lone_chars",
        "_max_event",
        "_max_line",
        "_pending",
        "_pieces",
        "_retry",
        "_skip_lf",
        "_tail_bytes",
    )

    def __init__(
        self,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        *,
        error_field: bool = False,
    ) -> None:
        if max_line_bytes <= 0 or max_event_bytes <= 0:
            raise ValueError("max_line_bytes and max_event_bytes must be positive")
        self._error_field = error_field
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        # A chunk of at most this many characters is within both limits (4 UTF-8 bytes a char).
        self._lone_chars = min(max_line_bytes, max_event_bytes) >> 2
        self._last_id = ""
        self._retry: int | None = None
        self._reset()

    def _reset(self) -> None:
        """Start a new stream: drop everything not committed."""
        self._error: LimitExceeded | None = None  # set: refuse input until close()
        self._pending = False  # _error not raised yet: feed() returned the events before it
        self._held = b""  # the first bytes of a character split across chunks
        self._at_start = True  # a BOM may still come
        self._skip_lf = False  # the last chunk ended in CR: drop a leading LF
        self._pieces: list[str] = []  # the unfinished line
        self._tail_bytes = 0  # its UTF-8 length
        self._data: list[str] = []  # data lines of the event being built
        self._data_size = 0  # their UTF-8 length, with a "\n" each
        self._event_type = ""
        self._id_buffer = self._last_id

    @property
    def last_event_id(self) -> str:
        """The last event ID committed so far (by a blank line); ``""`` for none.

        This is what a reconnection sends as ``Last-Event-ID``.
        """
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The reconnection time in milliseconds set by the stream, or ``None``."""
        return self._retry

    @property
    def error(self) -> LimitExceeded | None:
        """The limit this stream exceeded, or ``None``; reset by :meth:`close`.

        Once set, :meth:`feed` raises it. It can be set by a :meth:`feed` that
        returned events (those completed before the offending line or event):
        a reader should then stop reading and call :meth:`close`, which raises
        it. What is raised is a copy each time: the kept error never holds a
        traceback, nor through it this decoder (a reference cycle).
        """
        return self._error

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode the next piece of the body.

        Args:
            chunk: Bytes, split anywhere.

        Returns:
            The events completed by this chunk, in order. When the chunk
            completes events and then exceeds a limit, those events are
            returned and the error is kept in :attr:`error`, to be raised by
            the next ``feed()`` or :meth:`close`: what comes before the
            failure is the same however the body is split.

        Raises:
            LimitExceeded: A line or an event grew past its limit (and no
                event came before it in this chunk), or an earlier chunk did.
                :attr:`last_event_id` is that of the events before it; the
                decoder refuses further input until :meth:`close`.
        """
        return [*starmap(_make_event, self._feed_fields(chunk))]

    def _feed_fields(self, chunk: bytes) -> list[EventFields]:
        """:meth:`feed`, giving each event as its fields: the same events, without
        building a :class:`ServerSentEvent` (about 2,000 instructions an event) that
        a built-in dialect would only read two fields of (:class:`UpdateDecoder
        <rafrx.sources.UpdateDecoder>`)."""
        if self._error is not None:
            self._pending = False
            raise detached(self._error)  # (raising the kept one would make a cycle: see _fail)
        # Incremental UTF-8 decoding, as codecs.getincrementaldecoder("utf-8")
        # does it (same primitive, same result) minus a Python-level layer.
        if self._held:
            chunk = self._held + chunk
            self._held = b""
        text, used = _utf8_decode(chunk, "replace", False)
        if used != len(chunk):
            self._held = bytes(chunk[used:])
        if self._at_start or self._skip_lf:
            text = self._fix_start(text)
        if not text:
            return []
        if "\r" in text:
            if text[-1] == "\r":  # the LF of a CRLF may start the next chunk
                self._skip_lf = True
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if (
            text.endswith("\n\n")
            and not self._pieces
            and not self._data
            and len(text) <= self._lone_chars
        ):  # one whole event (a usual block has no blank line), nothing pending: a live read
            usual = _usual_block(text[:-2], self._event_type)
            if usual is not None:
                self._last_id = last_id = self._id_buffer
                self._event_type = ""
                return [(usual[0] or "message", usual[1], last_id, self._retry)]
        events: list[EventFields] = []
        try:
            if "\n" not in text:  # the line goes on
                self._add_piece(text)
            else:
                self._process(text, events)
        except LimitExceeded as err:
            self._fail(err)
            if not events:
                raise
            self._pending = True
        return events

    def close(self) -> list[ServerSentEvent]:
        """End the stream.

        Per the standard, an unfinished line and an event without its blank
        line are discarded (and an ``id`` in it is not committed), so this
        returns ``[]``; it is a list to keep the ``feed()`` shape. The decoder
        is then ready for the next response of the same source.

        Returns:
            Always an empty list.

        Raises:
            LimitExceeded: The :attr:`error` kept by :meth:`feed` and not
                raised yet (the decoder is reset all the same).
        """
        pending = self._error if self._pending else None
        self._reset()
        if pending is not None:
            raise detached(pending)
        return []

    # ------------------------------------------------------------ internals

    def _fix_start(self, text: str) -> str:
        """Strip the stream's BOM, or the LF of a CRLF split across chunks."""
        if not text:  # only part of a character so far: decide on the next chunk
            return text
        if self._at_start:
            self._at_start = False
            if text[0] == "\ufeff":
                return text[1:]
        elif text[0] == "\n":  # _skip_lf
            self._skip_lf = False
            return text[1:]
        self._skip_lf = False
        return text

    def _process(self, text: str, events: list[EventFields]) -> None:
        """Interpret LF-normalised text holding at least one line end.

        The text is cut at blank lines into blocks; the common block shapes
        (``data: ...`` and ``event: ...`` + ``data: ...``) become events right
        here, on local variables; anything else goes line by line through
        :meth:`_lines`. The events are appended to ``events``. On a limit
        error, ``events`` holds those before it, and :attr:`last_event_id` and
        :attr:`retry` are as they were at the line that crossed the limit.
        """
        if self._tail_bytes + (len(text) if text.isascii() else 4 * len(text)) > self._max_line:
            at = self._long_line_at(text)
            if at >= 0:
                if at:  # the complete lines before it, as if they had come alone
                    self._process(text[:at], events)
                head = _head([*self._pieces, text]) if at == 0 else text[at : at + _HEAD]
                self._past_a_limit(head, self._max_line + 1)
        blocks = text.split("\n\n")  # all but the last are followed by a blank line
        last = blocks.pop()
        if self._pieces:  # complete the line begun in earlier chunks
            pieces = self._pieces
            if blocks:
                pieces.append(blocks[0])
                blocks[0] = "".join(pieces)
            else:
                pieces.append(last)
                last = "".join(pieces)
            self._pieces = []
            self._tail_bytes = 0

        if blocks:
            append_event = events.append
            data = self._data
            event_type = self._event_type
            id_buffer = self._id_buffer
            last_id = self._last_id
            retry = self._retry
            quarter = self._max_event >> 2  # data of at most this many chars is in bounds
            # The "event: X\ndata: " that began the last such block, and its X: a stream
            # sends the same few types over and over ("\n\n" begins no block).
            head, head_end, head_type = "\n\n", 2, ""
            for block in blocks:
                if block.startswith("data: ") and "\n" not in block:  # the commonest: inline
                    value = block[6:]
                    etype = event_type
                elif block.startswith(head) and block.find("\n", head_end) < 0:
                    value = block[head_end:]  # the next commonest: Anthropic's, as the last
                    etype = head_type
                elif (  # the same shape, another type
                    block.startswith("event: ")
                    and (nl := block.find("\n")) > 0
                    and block.startswith("data: ", nl + 1)
                    and block.find("\n", nl + 1) < 0
                ):
                    etype = block[7:nl]
                    value = block[nl + 7 :]
                    head_end = nl + 7
                    head, head_type = block[:head_end], etype
                elif (usual := _usual_block(block, event_type)) is not None:
                    etype, value = usual
                else:  # any other block: line by line, then its blank line
                    self._data = data
                    self._event_type = event_type
                    self._id_buffer = id_buffer
                    self._last_id = last_id
                    lines = block.split("\n")
                    lines.append("")
                    self._lines(lines, events)
                    data = self._data
                    event_type = self._event_type
                    id_buffer = self._id_buffer
                    last_id = self._last_id
                    retry = self._retry
                    continue
                # the blank line after the block: dispatch
                if data:  # data lines from an earlier chunk
                    data.append(value)
                    value = "\n".join(data)
                    data = []
                    self._data_size = 0
                if len(value) > quarter:
                    self._last_id = last_id  # if it is too big, its id is not committed
                    self._check_event_size(value)
                last_id = id_buffer
                append_event((etype or "message", value, last_id, retry))
                event_type = ""
            self._data = data
            self._event_type = event_type
            self._id_buffer = id_buffer
            self._last_id = last_id

        cut = last.rfind("\n")
        if cut >= 0:  # complete lines of an event still open
            self._lines(last[:cut].split("\n"), events)
            last = last[cut + 1 :]
        if last:  # the unfinished line (self._pieces is empty here)
            self._pieces = [last]
            self._tail_bytes = len(last) if last.isascii() else _utf8_len(last)
            self._check_open_line()

    def _lines(self, lines: list[str], events: list[EventFields]) -> None:
        """Interpret complete lines one by one, appending dispatched events.

        The event's data is measured line by line, so that it fails at the
        data line that carries it past the limit, however the body is split
        (with :attr:`last_event_id` and :attr:`retry` as they were then).
        """
        data = self._data
        size = self._data_size
        event_type = self._event_type
        id_buffer = self._id_buffer
        last_id = self._last_id
        retry = self._retry
        error_field = self._error_field
        for line in lines:
            if not line:  # blank line: dispatch
                if data:
                    value = "\n".join(data)
                    events.append((event_type or "message", value, id_buffer, retry))
                    data = []
                    size = 0
                last_id = id_buffer
                event_type = ""
                continue
            colon = line.find(":")
            if colon == 0:  # comment
                continue
            if colon > 0:
                name = line[:colon]
                colon += 1
                value = line[colon + 1 :] if line.startswith(" ", colon) else line[colon:]
            else:
                name = line
                value = ""
            if name == "error" and error_field:  # read as "event: error" + "data: value"
                name, event_type = "data", "error"
            if name == "data":
                data.append(value)
                size += (len(value) if value.isascii() else _utf8_len(value)) + 1
                if size - 1 > self._max_event:
                    self._last_id, self._retry = last_id, retry
                    self._event_too_big()
            elif name == "event":
                event_type = value
            elif name == "id":
                if "\x00" not in value:
                    id_buffer = value
            elif name == "retry":
                parsed = _parse_retry(value)
                if parsed is not None:
                    retry = parsed
            # any other field is ignored
        self._data = data
        self._data_size = size
        self._event_type = event_type
        self._id_buffer = id_buffer
        self._last_id = last_id
        self._retry = retry

    def _add_piece(self, piece: str) -> None:
        """Append to the unfinished line, refusing to grow it past a limit."""
        self._pieces.append(piece)
        self._tail_bytes += _utf8_len(piece)
        self._check_open_line()

    def _check_open_line(self) -> None:
        """Fail if the unfinished line is past a limit (see :meth:`_past_a_limit`)."""
        size = self._tail_bytes
        if size > self._max_line or size + self._data_size > self._max_event:
            self._past_a_limit(_head(self._pieces), size)

    def _past_a_limit(self, head: str, size: int) -> None:
        """Fail for a line beginning with ``head`` of ``size`` UTF-8 bytes so far (or
        ``max_line_bytes + 1`` for one known to be longer), if it is past a limit:
        the event's, when it is a data line whose bytes so far already take the event
        past ``max_event_bytes`` no later in the line than it passes
        ``max_line_bytes``; else the line's. The first limit the line reaches decides,
        however the body is split.
        """
        event_at = self._event_limit_at(head)
        if event_at is not None and event_at <= min(size, self._max_line + 1):
            self._event_too_big()
        if size > self._max_line:
            self._line_too_long()

    def _event_limit_at(self, head: str) -> int | None:
        """How many UTF-8 bytes of a line beginning with ``head`` take the event being
        built past ``max_event_bytes``: ``None`` if it is no data line (or it is not
        known yet)."""
        if head.startswith("data:"):
            name_end = 5
        elif self._error_field and head.startswith("error:"):
            name_end = 6
        else:
            return None
        needed = self._max_event + 1 - self._data_size  # bytes of the line's value
        if needed <= 0:  # (the data before fill the event: the line itself is too many)
            return name_end
        return name_end + head.startswith(" ", name_end) + needed

    def _long_line_at(self, text: str) -> int:
        """Where the first line that ``text`` completes past the limit starts; -1 if none.

        An exact check, rarely needed: only when ``text`` could hold such a line.
        """
        lines = text.split("\n")
        lines.pop()  # unfinished: checked by the caller
        sizes = [*map(_utf8_len, lines)]
        sizes[0] += self._tail_bytes
        if max(sizes) <= self._max_line:
            return -1
        index = next(i for i, size in enumerate(sizes) if size > self._max_line)
        return sum(map(len, lines[:index])) + index  # the lengths and line ends before it

    def _line_too_long(self) -> None:
        raise LimitExceeded(
            f"SSE line longer than max_line_bytes={self._max_line} bytes"
            " (is the response really an event stream?)",
            limit=self._max_line,
        )

    def _check_event_size(self, value: str) -> None:
        if len(value) > self._max_event >> 2 and _utf8_len(value) > self._max_event:
            self._event_too_big()

    def _event_too_big(self) -> None:
        raise LimitExceeded(
            f"SSE event data longer than max_event_bytes={self._max_event} bytes",
            limit=self._max_event,
        )

    def _fail(self, err: LimitExceeded) -> None:
        """Keep ``err`` to raise again (a copy: ``err``'s traceback holds this decoder)."""
        self._reset()  # free the buffers
        self._error = detached(err)


#: Characters of a line enough to tell a data line and where its value begins
#: (``"error: "``, with :class:`SSEDecoder`'s ``error_field``).
_HEAD: Final = 7


def _head(pieces: list[str]) -> str:
    """The first characters of the line that ``pieces`` make up: ``_HEAD`` or more,
    or all of them.

    Example:
        >>> _head(["da", "t", "a: xyz", "abc"])
        'data: xyz'
    """
    head = pieces[0]
    for piece in pieces[1:]:
        if len(head) >= _HEAD:
            break
        head += piece
    return head


def _parse_retry(value: str) -> int | None:
    """Return the reconnection time a ``retry`` field sets, or ``None`` to ignore it.

    Only ASCII digits count (no sign, space, ``_`` or other scripts' digits).
    """
    if not (value.isascii() and value.isdigit()):
        return None
    value = value.lstrip("0") or "0"
    if len(value) > _MAX_RETRY_DIGITS:  # absurdly long: ignore rather than crash
        return None
    return int(value)


_HTTP_WHITESPACE: Final = " \t\r\n"


def check_content_type(content_type: str | None) -> None:
    """Check that a response's ``Content-Type`` announces an event stream.

    The MIME type essence must be ``text/event-stream`` (any case, surrounding
    whitespace allowed); parameters such as ``charset`` are accepted and
    ignored (the body is UTF-8 regardless).

    Args:
        content_type: The header value, or ``None`` when it is missing.

    Raises:
        ContentTypeError: For a missing header or any other type.

    Example:
        >>> check_content_type("Text/Event-Stream; charset=utf-8")
        >>> check_content_type("text/html")
        Traceback (most recent call last):
        ...
        rafrx.errors.ContentTypeError: expected Content-Type text/event-stream, got 'text/html'
    """
    if content_type is not None:
        essence = content_type.partition(";")[0].strip(_HTTP_WHITESPACE).lower()
        if essence == "text/event-stream":
            return
    raise ContentTypeError(f"expected Content-Type text/event-stream, got {content_type!r}")


_FIELD_STARTS: Final = (b"data:", b"event:", b"id:", b"retry:", b":")


def sniff_event_stream(head: bytes) -> bool | None:
    """Whether a body that starts with ``head`` is an event stream, whatever its
    ``Content-Type`` says; ``None`` while ``head`` is too short to tell.

    Some servers label a real event stream ``application/json`` or
    ``text/plain`` (Foundry Local, proxies). An event stream starts (after a
    byte order mark and blank lines) with a ``data``, ``event``, ``id`` or
    ``retry`` field or a ``:`` comment; a JSON error body or an HTML page
    does not.

    Example:
        >>> sniff_event_stream(b"data: {}"), sniff_event_stream(b"{"), sniff_event_stream(b"da")
        (True, False, None)
    """
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b"\r\n")
    if not text or b"\xef\xbb\xbf".startswith(text):  # (nothing yet, or part of a BOM)
        return None
    if text.startswith(_FIELD_STARTS):
        return True
    if any(start.startswith(text) for start in _FIELD_STARTS):
        return None
    return False


def iter_events(
    chunks: Iterable[bytes], *, decoder: SSEDecoder | None = None
) -> Iterator[ServerSentEvent]:
    """Decode a body given as an iterable of byte chunks.

    Args:
        chunks: The body, split anywhere.
        decoder: The decoder to use (e.g. to read :attr:`~SSEDecoder.last_event_id`
            afterwards, or to set limits); a new one by default.

    Yields:
        Each event as soon as its blank line has arrived.

    Raises:
        LimitExceeded: After the events before it; no chunk is read past it.

    Example:
        >>> [e.data for e in iter_events([b"data: 1\\n", b"\\ndata: 2\\n\\n"])]
        ['1', '2']
    """
    if decoder is None:
        decoder = SSEDecoder()
    feed = decoder.feed
    try:
        for chunk in chunks:
            yield from feed(chunk)
            if decoder.error is not None:
                break
    except LimitExceeded:
        decoder.close()  # ready for a reconnection, as when close() raises the kept error
        raise
    yield from decoder.close()


async def aiter_events(
    chunks: AsyncIterable[bytes], *, decoder: SSEDecoder | None = None
) -> AsyncIterator[ServerSentEvent]:
    """Decode a body given as an async iterable of byte chunks.

    Args:
        chunks: The body, split anywhere (e.g. ``response.content.iter_any()``).
        decoder: The decoder to use; a new one by default.

    Yields:
        Each event as soon as its blank line has arrived.

    Raises:
        LimitExceeded: After the events before it; no chunk is awaited past it.
    """
    if decoder is None:
        decoder = SSEDecoder()
    feed = decoder.feed
    try:
        async for chunk in chunks:
            for event in feed(chunk):
                yield event
            if decoder.error is not None:
                break
    except LimitExceeded:
        decoder.close()  # ready for a reconnection (see iter_events)
        raise
    for event in decoder.close():
        yield event
