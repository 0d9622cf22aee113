"""Differential tests of :class:`rafrx.sse.SSEDecoder` against the WHATWG algorithm.

The oracle below is a literal, character-by-character transcription of
"event stream interpretation" (HTML Living Standard, server-sent events,
§9.2.6): decode UTF-8 with U+FFFD replacement, strip one leading BOM, split
lines at CRLF / LF / CR, interpret fields, dispatch at blank lines, drop
whatever follows the last line end. Bodies are generated from the tokens that
matter (field names with and without colon and space, CR / LF / CRLF,
comments, NUL, BOMs, multi-byte and invalid UTF-8) and fed in any split;
the events, ``last_event_id`` and ``retry`` must be the oracle's, and the
limits must trip for the same bodies however they are split.
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rafrx.errors import LimitExceeded
from rafrx.sse import ServerSentEvent, SSEDecoder

FAST = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Event = tuple[str, str, str, int | None]
Outcome = tuple[list[Event], str, int | None]


# -- the oracle -------------------------------------------------------------


def decode_stream(body: bytes) -> str:
    """UTF-8 decode (replacement), minus an incomplete sequence at the very end.

    A trailing incomplete sequence can only be part of the unfinished last
    line, which is discarded anyway; holding it back makes the oracle usable
    for the limits too (the decoder cannot count bytes it has not decoded).
    """
    return codecs.getincrementaldecoder("utf-8")("replace").decode(body, False)


def oracle(body: bytes, last_id: str = "", retry: int | None = None) -> Outcome:
    text = decode_stream(body)
    if text.startswith("\ufeff"):
        text = text[1:]
    lines: list[str] = []
    start = i = 0
    while i < len(text):
        c = text[i]
        if c in "\r\n":
            lines.append(text[start:i])
            if c == "\r" and i + 1 < len(text) and text[i + 1] == "\n":
                i += 1
            start = i + 1
        i += 1
    events: list[Event] = []
    data, event_type, id_buffer = "", "", last_id
    for line in lines:
        if line == "":  # dispatch
            last_id = id_buffer
            if data == "":
                event_type = ""
                continue
            if data.endswith("\n"):
                data = data[:-1]
            events.append((event_type or "message", data, last_id, retry))
            data, event_type = "", ""
            continue
        if line.startswith(":"):
            continue
        if ":" in line:
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
        else:
            name, value = line, ""
        if name == "event":
            event_type = value
        elif name == "data":
            data += value + "\n"
        elif name == "id":
            if "\x00" not in value:
                id_buffer = value
        elif name == "retry" and value and all("0" <= ch <= "9" for ch in value):
            retry = int(value)
    return events, last_id, retry


def as_tuple(event: ServerSentEvent) -> Event:
    return (event.event, event.data, event.id, event.retry)


def decode(chunks: Sequence[bytes], decoder: SSEDecoder | None = None) -> Outcome:
    decoder = decoder or SSEDecoder()
    events = [as_tuple(e) for chunk in chunks for e in decoder.feed(chunk)]
    events += [as_tuple(e) for e in decoder.close()]
    return events, decoder.last_event_id, decoder.retry


def pieces(body: bytes, cuts: Sequence[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


# -- bodies -----------------------------------------------------------------

_TOKENS = [
    b"data",
    b"data:",
    b"data: ",
    b"data:  ",
    b"event",
    b"event:",
    b"event: ",
    b"id",
    b"id:",
    b"id: ",
    b"retry:",
    b"retry: ",
    b"retry:12",
    b"Data:",
    b":",
    b": comment",
    b" ",
    b"\t",
    b"x",
    b"1",
    b"a:b",
    b"\r",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"\r\r",
    b"\x00",
    b"\xef\xbb\xbf",  # BOM
    b"\xe2\x82\xac",  # €
    b"\xf0\x9f\x98\x80",  # 😀
    b"\xe2\x82",  # truncated €
    b"\xe2",
    b"\x82",
    b"\xff",
    b"\xc0\xaf",  # overlong
    b"\xed\xa0\x80",  # encoded surrogate
    b"\xf4\x90\x80\x80",  # beyond U+10FFFF
    b"\xf0\x90",
]
bodies = st.lists(st.sampled_from(_TOKENS), max_size=30).map(b"".join)


@st.composite
def splits(draw: st.DrawFn, body: bytes) -> list[bytes]:
    mode = draw(st.sampled_from(["random", "bytes", "whole"]))
    if mode == "bytes":
        return [body[i : i + 1] for i in range(len(body))]
    if mode == "whole":
        return [body]
    return pieces(body, draw(st.lists(st.integers(0, len(body)), max_size=12)))


# -- any body, any split ----------------------------------------------------


@FAST
@given(body=bodies, data=st.data())
@example(body=b"data: a\r", data=None)
@example(body=b"data: a\r\n\r\n", data=None)
@example(body=b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n", data=None)
@example(body=b"id: a\x00b\ndata: x\n\n", data=None)
@example(body=b"retry: 1x\nretry: 007\ndata\n\n", data=None)
@example(body=b"data: \xe2\x82\n\n", data=None)
def test_any_body_any_split_matches_the_standard(body: bytes, data: Any) -> None:
    expected = oracle(body)
    if data is None:
        chunkings = [[body], [body[i : i + 1] for i in range(len(body))]]
        chunkings += [pieces(body, [cut]) for cut in range(len(body) + 1)]
    else:
        chunkings = [data.draw(splits(body))]
    for chunks in chunkings:
        assert decode(chunks) == expected, chunks


@FAST
@given(first=bodies, second=bodies, data=st.data())
def test_after_close_the_next_response_keeps_only_id_and_retry(
    first: bytes, second: bytes, data: st.DataObject
) -> None:
    decoder = SSEDecoder()
    events1, last_id, retry = decode(data.draw(splits(first)), decoder)
    assert (events1, last_id, retry) == oracle(first)
    expected = oracle(second, last_id, retry)
    assert decode(data.draw(splits(second)), decoder) == expected


@FAST
@given(
    body=st.lists(
        st.sampled_from([*_TOKENS, b"xxxxxxxx", b"\xe2\x82\xac" * 3, b"data: 0123456789"]),
        max_size=20,
    ).map(b"".join),
    max_line=st.integers(1, 30),
    max_event=st.integers(1, 30),
    data=st.data(),
)
def test_limits_trip_for_the_same_bodies_however_split(
    body: bytes, max_line: int, max_event: int, data: st.DataObject
) -> None:
    expected = limits_oracle(body, max_line, max_event)
    chunks = data.draw(splits(body))
    decoder = SSEDecoder(max_line_bytes=max_line, max_event_bytes=max_event)
    try:
        got: Any = decode(chunks, decoder)
    except LimitExceeded:
        got = "raise"
        # Raised by a feed(), it is refused until close(); raised by close() (kept
        # from the last chunk, after its events), the decoder is already reset.
        if decoder.error is not None:
            with pytest.raises(LimitExceeded):
                decoder.feed(b"data: x\n\n")
        with contextlib.suppress(LimitExceeded):
            decoder.close()  # it may report the error once more; it resets the decoder anyway
        if max_line >= 7:  # usable again after close()
            assert [e.data for e in decoder.feed(b"data: x\n\n")] == ["x"]
    assert got == (oracle(body) if expected == "ok" else expected)


def limits_oracle(body: bytes, max_line: int, max_event: int) -> str:
    """'raise' if any line (the unfinished one too) or any event's data is over its limit:
    an unfinished line known to be a data line (``data:``) counts toward its event."""
    text = decode_stream(body)
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    data: str | None = None
    for index, line in enumerate(lines):
        if len(line.encode("utf-8")) > max_line:
            return "raise"
        if index == len(lines) - 1 and not line.startswith("data:"):
            break  # unfinished, and not known to be a data line
        if line == "":
            data = None
            continue
        name, _, value = line.partition(":")
        if name == "data":
            value = value[1:] if value.startswith(" ") else value
            data = value if data is None else data + "\n" + value
            if len(data.encode("utf-8")) > max_event:
                return "raise"
    return "ok"


# -- pinned cases -------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        # CR at a chunk's end, LF at the next one's start: one line end.
        ([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], [("message", "a\nb", "", None)]),
        # CR then CR: two line ends (a blank line), whatever the split.
        ([b"data: a\r", b"\r"], [("message", "a", "", None)]),
        ([b"data: a\r\r", b"\n"], [("message", "a", "", None)]),
        # No space, one space, two spaces after the colon.
        (
            [b"data:a\n\ndata: a\n\ndata:  a\n\n"],
            [("message", v, "", None) for v in "aa"] + [("message", " a", "", None)],
        ),
        # A field name without a colon has an empty value.
        ([b"data\ndata\n\n"], [("message", "\n", "", None)]),
        # Comments and unknown fields are ignored; the block is still an event.
        ([b": hi\nfoo: bar\ndata: x\n: bye\n\n"], [("message", "x", "", None)]),
        # Blank lines alone dispatch nothing; "data:" alone dispatches "".
        ([b"\n\n\r\n\r\r", b"data:\n\n"], [("message", "", "", None)]),
        # The last event of the stream has no blank line: dropped.
        ([b"data: a\n\ndata: b\n"], [("message", "a", "", None)]),
        ([b"data: a\n\ndata: b"], [("message", "a", "", None)]),
        # An id with NUL is ignored; an empty id resets.
        (
            [b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\nid\ndata: c\n\n"],
            [("message", "a", "1", None), ("message", "b", "1", None), ("message", "c", "", None)],
        ),
        # retry: only ASCII digits count.
        (
            [b"retry: 10\nretry: -1\nretry: 1 0\nretry: \xd9\xa1\nretry:\ndata: a\n\n"],
            [("message", "a", "", 10)],
        ),
        # A BOM is stripped at the stream's start only, and only one.
        ([b"\xef\xbb", b"\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n"], [("message", "b", "", None)]),
        # Invalid UTF-8 (split across chunks) becomes U+FFFD, as in one piece.
        ([b"data: \xe2\x82", b"x\xff\n\n"], [("message", "\ufffdx\ufffd", "", None)]),
        # event type resets after each dispatch, even without data.
        ([b"event: a\n\ndata: x\n\n"], [("message", "x", "", None)]),
    ],
)
def test_pinned_cases(chunks: list[bytes], expected: list[Event]) -> None:
    body = b"".join(chunks)
    assert oracle(body)[0] == expected
    assert decode(chunks)[0] == expected
    for cut in range(len(body) + 1):
        assert decode(pieces(body, [cut]))[0] == expected


def test_an_id_is_committed_only_by_a_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 7\ndata: a\n") == []
    assert decoder.last_event_id == ""
    assert [e.id for e in decoder.feed(b"\n")] == ["7"]
    assert decoder.feed(b"id: 8\n") == []
    assert decoder.close() == []  # the stream ended before the blank line
    assert decoder.last_event_id == "7"
    assert [e.id for e in decoder.feed(b"data: b\n\n")] == ["7"]
