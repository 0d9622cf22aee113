"""Tests for rafrx.sse: WHATWG conformance vectors, chunking invariance, limits."""

from __future__ import annotations

import asyncio
import base64
import doctest
import functools
import json
import random
import re
import tracemalloc
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rafrx.sse
from rafrx.errors import ContentTypeError, LimitExceeded, ProtocolError
from rafrx.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    ServerSentEvent,
    SSEDecoder,
    aiter_events,
    check_content_type,
    iter_events,
)
from tests import cut, split_after

DATA = Path(__file__).parent / "data"
CONFORMANCE = json.loads((DATA / "conformance" / "sse-wpt.json").read_text("utf-8"))
CASES: list[dict[str, Any]] = CONFORMANCE["cases"]
CHUNKED_CASES = [case for case in CASES if "chunks_base64" in case]
CONTENT_TYPE_CASES: list[dict[str, Any]] = CONFORMANCE["content_type_cases"]
FIXTURES = DATA / "fixtures"
MANIFEST: list[dict[str, Any]] = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
SSE_ONLY = [entry for entry in MANIFEST if entry["format"] == "sse-only"]
SSE_FILES = sorted(FIXTURES.rglob("*.sse"))

MiB = 1024 * 1024

# No example database: the tests must not write into the working tree.
FEW = settings(max_examples=4, deadline=None, database=None)
MANY = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

Outcome = tuple[list[dict[str, str]], int | None, str]


def same_error(raised: LimitExceeded, kept: LimitExceeded) -> bool:
    """The decoder raises a copy of the error it keeps (the kept one holds no traceback)."""
    return (type(raised), str(raised), raised.limit) == (type(kept), str(kept), kept.limit)


def decode(chunks: Iterable[bytes], decoder: SSEDecoder | None = None) -> Outcome:
    """Events (in the vectors' shape), reconnection time and final last event ID."""
    decoder = decoder or SSEDecoder()
    events = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    events += decoder.close()
    return (
        [{"type": e.event, "data": e.data, "last_event_id": e.id} for e in events],
        decoder.retry,
        decoder.last_event_id,
    )


def body_of(case: dict[str, Any]) -> bytes:
    return base64.b64decode(case["input_base64"])


def expected(case: dict[str, Any]) -> Outcome:
    return (
        case["expected_events"],
        case["expected_reconnection_time_ms"],
        case["expected_final_last_event_id"],
    )


def one_byte_chunks(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


def case_id(case: dict[str, Any]) -> str:
    return str(case["id"])


# ------------------------------------------------------------ conformance vectors


def test_vectors_loaded() -> None:
    assert len(CASES) == 80
    assert len(CHUNKED_CASES) >= 4
    assert len(CONTENT_TYPE_CASES) == 4


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_vector_whole_body(case: dict[str, Any]) -> None:
    assert decode([body_of(case)]) == expected(case)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_vector_one_byte_at_a_time(case: dict[str, Any]) -> None:
    assert decode(one_byte_chunks(body_of(case))) == expected(case)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_vector_every_two_way_split(case: dict[str, Any]) -> None:
    body = body_of(case)
    want = expected(case)
    for i in range(len(body) + 1):
        assert decode([body[:i], body[i:]]) == want, f"split at {i}"


@pytest.mark.parametrize("case", CHUNKED_CASES, ids=case_id)
def test_vector_given_chunking(case: dict[str, Any]) -> None:
    chunks = [base64.b64decode(c) for c in case["chunks_base64"]]
    assert b"".join(chunks) == body_of(case)
    assert decode(chunks) == expected(case)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_vector_seeded_random_splits(case: dict[str, Any]) -> None:
    """A few hundred random chunkings per vector, cheaply (no hypothesis)."""
    body = body_of(case)
    want = expected(case)
    rng = random.Random(case["id"])
    for _ in range(120):
        offsets = [rng.randint(0, len(body)) for _ in range(rng.randint(1, 12))]
        assert decode(cut(body, offsets)) == want, offsets


@MANY
@given(case=st.sampled_from(CASES), data=st.data())
def test_vector_arbitrary_splits(case: dict[str, Any], data: st.DataObject) -> None:
    """Hypothesis picks the vector and the cut offsets (shrinks to a minimal split)."""
    body = body_of(case)
    offsets = data.draw(st.lists(st.integers(0, len(body)), max_size=24), label="offsets")
    assert decode(cut(body, offsets)) == expected(case)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_vector_one_line_or_one_block_per_chunk(case: dict[str, Any]) -> None:
    """As a live stream arrives: an event (or a line) per read."""
    body = body_of(case)
    for separator in (b"\n\n", b"\n", b"\r\n\r\n", b"\r"):
        assert decode(split_after(body, separator)) == expected(case), separator


# ------------------------------------------------------------ Content-Type


@pytest.mark.parametrize("case", CONTENT_TYPE_CASES, ids=case_id)
def test_content_type_vectors(case: dict[str, Any]) -> None:
    if case["expect"] == "accept":
        check_content_type(case["content_type"])
    else:
        assert case["expect"] == "fail-connection"
        with pytest.raises(ContentTypeError):
            check_content_type(case["content_type"])


@pytest.mark.parametrize(
    "content_type",
    [
        "text/event-stream",
        "TEXT/Event-Stream",
        "  text/event-stream  ",
        "\ttext/event-stream\t; charset=utf-8",
        "text/event-stream ;charset=UTF-8",
        "text/event-stream; charset=windows-1252; foo=bar",
    ],
)
def test_content_type_accepted(content_type: str) -> None:
    check_content_type(content_type)


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "",
        "text/html; charset=utf-8",
        "application/json",
        "text/event-streams",
        "text/event stream",
        "text/plain; x=text/event-stream",
        "event-stream",
    ],
)
def test_content_type_rejected(content_type: str | None) -> None:
    with pytest.raises(ContentTypeError) as info:
        check_content_type(content_type)
    assert isinstance(info.value, ProtocolError)
    assert repr(content_type) in str(info.value)


# ------------------------------------------------------------ recorded fixtures


@pytest.mark.parametrize("entry", SSE_ONLY, ids=lambda e: str(e["path"]))
def test_sse_only_fixture(entry: dict[str, Any]) -> None:
    body = (FIXTURES / entry["path"]).read_bytes()
    want = [
        (e["event"] or "message", e["data"], e["id"] or "") for e in entry["expected"]["events"]
    ]
    for chunks in ([body], one_byte_chunks(body)):
        assert [(e.event, e.data, e.id) for e in iter_events(chunks)] == want


def test_every_fixture_file_is_listed() -> None:
    assert len(SSE_FILES) == len(MANIFEST) == 63
    assert len(SSE_ONLY) == 2


@functools.cache
def fixture_whole(path: Path) -> tuple[bytes, Outcome]:
    body = path.read_bytes()
    return body, decode([body])


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
@FEW
@given(data=st.data())
def test_fixture_chunking_invariance(path: Path, data: st.DataObject) -> None:
    body, whole = fixture_whole(path)
    assert whole[0], "every recorded stream has events"
    offsets = data.draw(st.lists(st.integers(0, len(body)), max_size=64), label="offsets")
    assert decode(cut(body, offsets)) == whole


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_one_byte_chunks(path: Path) -> None:
    body, whole = fixture_whole(path)
    assert decode(one_byte_chunks(body)) == whole


USUAL_BLOCK = re.compile(r"(?:event: ?[^\n]*\n)?data: ?[^\n]*")


def test_fixture_events_read_one_by_one_take_the_lone_event_path() -> None:
    # A live stream arrives one event per read. A chunk holding one event of the
    # usual shapes must be decoded without the general block loop (the fast path),
    # to the same events: checked on every recorded stream made only of such events.
    usual = []
    for path in SSE_FILES:
        body, whole = fixture_whole(path)
        blocks = body.decode().split("\n\n")
        if blocks[-1] or not all(USUAL_BLOCK.fullmatch(b) for b in blocks[:-1]):
            continue  # comments, ids, multi-line data, a cut-off end: the general path
        usual.append(path)
        with mock.patch.object(SSEDecoder, "_process", side_effect=AssertionError(path)):
            assert decode(split_after(body, b"\n\n")) == whole
    assert len(usual) >= 40


@pytest.mark.parametrize(
    ("chunks", "want"),
    [
        # state left by earlier chunks applies to a lone event
        ([b"event: e\n", b"data: 1\n\n"], [("e", "1", "")]),
        ([b"event: e\n", b"event: f\ndata: 1\n\n"], [("f", "1", "")]),
        ([b"event: e\n", b"event:\ndata: 1\n\n"], [("message", "1", "")]),
        (
            [b"id: 7\n", b"data: 1\n\n", b"data: 2\n\n"],
            [("message", "1", "7"), ("message", "2", "7")],
        ),
        ([b"data: 1\n", b"data: 2\n\n"], [("message", "1\n2", "")]),
        ([b"da", b"ta: 1\n\n", b"data: 2\n\n"], [("message", "1", ""), ("message", "2", "")]),
        (
            [b"\xef\xbb\xbfdata: 1\n\n", b"data: 2\n\n"],
            [("message", "1", ""), ("message", "2", "")],
        ),
        ([b"data: 1\r\r", b"\ndata: 2\r\n\r\n"], [("message", "1", ""), ("message", "2", "")]),
        ([b"data: \xe2\x82", b"\xac\n\n"], [("message", "\u20ac", "")]),
        # a lone event resets the type for the next one; no space after the colon
        ([b"event: e\ndata: 1\n\n", b"data:2\n\n"], [("e", "1", ""), ("message", "2", "")]),
        # not usual shapes: the general path
        ([b"data: 1\ndata: 2\n\n"], [("message", "1\n2", "")]),
        ([b"id: 3\ndata: 1\n\n"], [("message", "1", "3")]),
        ([b": ping\n\n", b"data: 1\n\n"], [("message", "1", "")]),
    ],
)
def test_lone_event_chunks_keep_the_stream_state(
    chunks: list[bytes], want: list[tuple[str, str, str]]
) -> None:
    assert [(e.event, e.data, e.id) for e in iter_events(chunks)] == want


_FIELD_VALUES = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=6)
_LINES = st.one_of(
    st.builds(lambda v: f"data: {v}", _FIELD_VALUES),
    st.builds(lambda v: f"data:{v}", _FIELD_VALUES),
    st.builds(lambda v: f"event: {v}", _FIELD_VALUES),
    st.just("event:"),
    st.builds(lambda n: f"id: {n}", st.integers(0, 99)),
    st.builds(lambda n: f"retry: {n}", st.integers(0, 9999)),
    st.just(": keep-alive"),
    st.just("data"),
)
# Event types that repeat, as a stream's do (the block loop remembers the last one).
_TYPES = st.sampled_from(["delta", "delta", "ping"]) | _FIELD_VALUES
# Blocks mostly of the usual shapes (what the fast paths take), some not.
_BLOCKS = st.one_of(
    st.builds(lambda v: f"data: {v}", _FIELD_VALUES),
    st.builds(lambda t, v: f"event: {t}\ndata: {v}", _TYPES, _FIELD_VALUES),
    st.builds(lambda t, v, line: f"event: {t}\ndata: {v}\n{line}", _TYPES, _FIELD_VALUES, _LINES),
    st.lists(_LINES, min_size=1, max_size=4).map("\n".join),
)


@MANY
@given(
    blocks=st.lists(_BLOCKS, max_size=8), tail=st.sampled_from(["", "data: cut"]), data=st.data()
)
def test_one_block_per_chunk_equals_the_whole_body(
    blocks: list[str], tail: str, data: st.DataObject
) -> None:
    body = "".join(block + "\n\n" for block in blocks) + tail
    raw = body.encode()
    whole = decode([raw])
    assert decode(split_after(raw, b"\n")) == whole  # line by line: no block fast path
    assert decode(split_after(raw, b"\n\n")) == whole
    offsets = data.draw(st.lists(st.integers(0, len(raw)), max_size=8), label="offsets")
    assert decode(cut(raw, offsets)) == whole


def test_lone_event_with_retry_then_lone_events() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"retry: 250\n\n") == []
    [event] = decoder.feed(b"data: x\n\n")
    assert (event.data, event.retry) == ("x", 250)


# ------------------------------------------------------------ limits


def test_default_limits() -> None:
    limits = DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_EVENT_BYTES
    assert limits == (16 * MiB, 64 * MiB)
    decoder = SSEDecoder()
    assert decoder.feed(b"data: " + b"x" * (2 * MiB) + b"\n\n")[0].data == "x" * (2 * MiB)


@pytest.mark.parametrize("kwargs", [{"max_line_bytes": 0}, {"max_event_bytes": -1}])
def test_limits_must_be_positive(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        SSEDecoder(**kwargs)


def _feed_until_error(decoder: SSEDecoder, chunks: Iterable[bytes], limit: int) -> tuple[int, int]:
    """Feed until LimitExceeded; return (bytes fed, traced peak memory)."""
    fed = 0

    def feed_all() -> None:
        nonlocal fed
        for chunk in chunks:
            fed += len(chunk)
            decoder.feed(chunk)

    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded) as info:
            feed_all()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.limit == limit
    return fed, peak


def test_huge_line_raises_before_buffering_past_the_limit() -> None:
    decoder = SSEDecoder(max_line_bytes=1 * MiB)
    piece = b"x" * (64 * 1024)
    chunks = [b"data: ", *([piece] * 32)]  # 2 MiB, no line end
    with pytest.raises(LimitExceeded) as info:
        decoder.feed(b"x" * (2 * MiB))
    assert info.value.limit == 1 * MiB
    assert "max_line_bytes=1048576" in str(info.value)
    decoder.close()
    fed, peak = _feed_until_error(decoder, chunks, 1 * MiB)
    assert fed <= 1 * MiB + len(piece)  # raised at the first chunk past the limit
    assert peak < 1.5 * MiB, peak  # about the limit, not the 2 MiB sent


def test_huge_line_inside_one_chunk_raises_after_the_events_before_it() -> None:
    decoder = SSEDecoder(max_line_bytes=1 * MiB)
    events = decoder.feed(b"data: ok\n\ndata: " + b"x" * (2 * MiB) + b"\n\ndata: after\n\n")
    assert events == [ServerSentEvent(data="ok")]
    error = decoder.error
    assert error is not None
    assert error.limit == 1 * MiB
    with pytest.raises(LimitExceeded) as info:
        decoder.close()
    assert same_error(info.value, error)
    assert decoder.error is None  # close() resets the decoder


def test_long_comment_line_counts_too() -> None:
    decoder = SSEDecoder(max_line_bytes=100)
    with pytest.raises(LimitExceeded):
        decoder.feed(b":" + b"x" * 200 + b"\n")


def test_event_with_many_data_lines_raises_early() -> None:
    decoder = SSEDecoder(max_event_bytes=1 * MiB)
    line = b"data: " + b"y" * 1000 + b"\n"
    block = line * 64  # ~64 KiB per chunk, no blank line ever
    fed, peak = _feed_until_error(decoder, [block] * 40, 1 * MiB)
    assert fed <= 1 * MiB + 2 * len(block)
    assert peak < 2 * MiB, peak


def test_event_data_too_big_in_one_chunk_raises() -> None:
    decoder = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(LimitExceeded) as info:
        decoder.feed(b"data: " + b"z" * 600 + b"\ndata: " + b"z" * 600 + b"\n\n")
    assert info.value.limit == 1000
    assert "max_event_bytes=1000" in str(info.value)


@pytest.mark.parametrize("split", [None, 1, 3, 7])
def test_line_limit_boundary_counts_utf8_bytes(split: int | None) -> None:
    # "data: é" is 8 bytes; limit 8 accepts it, 7 does not.
    body = "data: é\n\n".encode()
    chunks = [body] if split is None else [body[i : i + split] for i in range(0, len(body), split)]
    assert decode(chunks, SSEDecoder(max_line_bytes=8))[0] == [
        {"type": "message", "data": "é", "last_event_id": ""}
    ]
    with pytest.raises(LimitExceeded):
        decode(chunks, SSEDecoder(max_line_bytes=7))


@pytest.mark.parametrize("split", [None, 1, 5])
def test_event_limit_boundary(split: int | None) -> None:
    body = b"data: abc\ndata: \xc3\xa9f\n\n"  # data "abc\néf" = 7 UTF-8 bytes
    chunks = [body] if split is None else [body[i : i + split] for i in range(0, len(body), split)]
    assert decode(chunks, SSEDecoder(max_event_bytes=7))[0][0]["data"] == "abc\néf"
    with pytest.raises(LimitExceeded):
        decode(chunks, SSEDecoder(max_event_bytes=6))


def test_event_limit_on_a_single_line_event() -> None:
    with pytest.raises(LimitExceeded):
        SSEDecoder(max_event_bytes=4).feed(b"data: 12345\n\n")
    with pytest.raises(LimitExceeded):
        SSEDecoder(max_event_bytes=4).feed(b"event: x\ndata: 12345\n\n")
    assert SSEDecoder(max_event_bytes=5).feed(b"data: 12345\n\n")[0].data == "12345"


def test_pending_data_count_restarts_after_each_event() -> None:
    decoder = SSEDecoder(max_event_bytes=10)
    assert decoder.feed(b"data: 12345\n") == []
    # the pending "12345" is dispatched by the first block; a comment-only block
    # follows; then a new event starts
    events = decoder.feed(b"data: x\n\n:c\n\ndata: 1234567\n")
    assert [e.data for e in events] == ["12345\nx"]
    with pytest.raises(LimitExceeded):  # "1234567\n1234" is 12 bytes, still pending
        decoder.feed(b"data: 1234\n")


def test_after_limit_error_decoder_refuses_until_close() -> None:
    decoder = SSEDecoder(max_line_bytes=10)
    with pytest.raises(LimitExceeded) as first:
        decoder.feed(b"data: 0123456789\n")
    with pytest.raises(LimitExceeded) as again:
        decoder.feed(b"data: ok\n\n")
    assert same_error(again.value, first.value)
    assert decoder.close() == []
    assert [e.data for e in decoder.feed(b"data: ok\n\n")] == ["ok"]


def test_an_unfinished_line_past_the_limit_after_complete_lines_raises() -> None:
    """A chunk completing an event, then starting a line already longer than the limit:
    the event is returned, and the next feed() raises the error kept for it."""
    decoder = SSEDecoder(max_line_bytes=16)
    events = decoder.feed(b"event: a\ndata: ok\n\ndata: " + b"x" * 11)  # 17 bytes, no line end
    assert events == [ServerSentEvent(event="a", data="ok")]
    error = decoder.error
    assert error is not None
    assert error.limit == 16
    assert str(error) == (
        "SSE line longer than max_line_bytes=16 bytes (is the response really an event stream?)"
    )
    with pytest.raises(LimitExceeded) as info:
        decoder.feed(b"\n\n")
    assert same_error(info.value, error)
    with pytest.raises(LimitExceeded) as again:
        decoder.feed(b"\n\n")
    assert same_error(again.value, error)
    assert decoder.close() == []  # raised already: close() only resets
    assert decoder.feed(b"data: " + b"x" * 10 + b"\n\n") == [ServerSentEvent(data="x" * 10)]


LimitedOutcome = tuple[list[tuple[str, str, str]], tuple[int, str] | None, str, int | None]


def decode_limited(chunks: Iterable[bytes], decoder: SSEDecoder) -> LimitedOutcome:
    """Events, the limit error (its limit and message) if any, last event ID, retry."""
    events: list[ServerSentEvent] = []
    error = None
    try:
        for chunk in chunks:
            events += decoder.feed(chunk)
            if decoder.error is not None:
                break
        decoder.close()
    except LimitExceeded as err:
        error = (err.limit, str(err))
    shown = [(e.event, e.data, e.id) for e in events]
    return shown, error, decoder.last_event_id, decoder.retry


_OVERSIZED = st.one_of(
    st.builds(lambda n: "data: " + "x" * n, st.integers(0, 40)),  # a long line
    st.builds(lambda k: "\n".join(["data: yyyy"] * k), st.integers(1, 8)),  # a big event
)


@MANY
@given(
    blocks=st.lists(_BLOCKS | _OVERSIZED, max_size=8),
    tail=st.sampled_from(["", "data: cut", "data: " + "z" * 40]),
    max_line=st.integers(10, 40),
    max_event=st.integers(4, 40),
    data=st.data(),
)
def test_a_limit_error_comes_after_the_same_events_however_the_body_is_split(
    blocks: list[str], tail: str, max_line: int, max_event: int, data: st.DataObject
) -> None:
    """Events completed before the offending line or event are delivered, then
    LimitExceeded, whether they share a chunk with it or not."""
    raw = ("".join(block + "\n\n" for block in blocks) + tail).encode()

    def run(chunks: list[bytes]) -> LimitedOutcome:
        return decode_limited(
            chunks, SSEDecoder(max_line_bytes=max_line, max_event_bytes=max_event)
        )

    whole = run([raw])
    assert run(one_byte_chunks(raw)) == whole
    assert run(split_after(raw, b"\n")) == whole
    assert run(split_after(raw, b"\n\n")) == whole
    offsets = data.draw(st.lists(st.integers(0, len(raw)), max_size=8), label="offsets")
    assert run(cut(raw, offsets)) == whole


def test_iter_events_yields_the_events_before_a_limit_error_and_reads_no_further() -> None:
    read: list[bytes] = []

    def chunks() -> Iterator[bytes]:
        for chunk in (b"data: a\n\ndata: " + b"x" * 20 + b"\n\n", b"data: b\n\n"):
            read.append(chunk)
            yield chunk

    events = iter_events(chunks(), decoder=SSEDecoder(max_line_bytes=16))
    assert next(events).data == "a"
    with pytest.raises(LimitExceeded):
        next(events)
    assert len(read) == 1


@pytest.mark.asyncio
async def test_aiter_events_raises_a_limit_error_without_awaiting_more_input() -> None:
    """The events before the error, then the error, while the body stays open."""
    more = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: a\n\ndata: " + b"x" * 20
        await more.wait()  # a server that sends nothing more
        yield b"\n\n"

    body = chunks()
    events = aiter_events(body, decoder=SSEDecoder(max_line_bytes=16))
    assert (await anext(events)).data == "a"
    with pytest.raises(LimitExceeded):
        await asyncio.wait_for(anext(events), 5)
    await body.aclose()


def test_one_mib_data_line_in_small_chunks() -> None:
    payload = json.dumps({"text": "a" * MiB}).encode()
    body = b"data: " + payload + b"\r\n\r\n"
    for size in (997, 4096, 65536):
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        (event,) = list(iter_events(chunks))
        assert event.data.encode() == payload


# ------------------------------------------------------------ UTF-8, BOM, line ends


def test_invalid_utf8_becomes_replacement_and_decoding_goes_on() -> None:
    body = b"data: a\xffb\n\ndata: \xe2\x82\n\ndata: \xc3\n\ndata: ok \xf0\x9f\x98\x80\n\n"
    want = ["a\ufffdb", "\ufffd", "\ufffd", "ok \U0001f600"]
    assert [e.data for e in iter_events([body])] == want
    assert [e.data for e in iter_events(one_byte_chunks(body))] == want


def test_multibyte_character_split_across_chunks() -> None:
    text = "data: é日本😀\n\n".encode()
    for i in range(len(text) + 1):
        assert [e.data for e in iter_events([text[:i], text[i:]])] == ["é日本😀"]
    assert [e.data for e in iter_events(one_byte_chunks(text))] == ["é日本😀"]


def test_bom_only_at_stream_start() -> None:
    bom = b"\xef\xbb\xbf"
    decoder = SSEDecoder()
    assert decoder.feed(bom[:1]) == []
    assert decoder.feed(bom[1:2]) == []
    assert decoder.feed(bom[2:] + b"data: 1\n\n")[0].data == "1"
    # a BOM later in the stream is part of a field name: unknown field, ignored
    assert decoder.feed(bom + b"data: 2\n\ndata: 3\n\n") == [ServerSentEvent(data="3")]
    # inside a value it is data
    assert decoder.feed(b"data:" + bom + b"x\n\n")[0].data == "\ufeffx"


def test_bom_stripped_again_after_close() -> None:
    decoder = SSEDecoder()
    assert [e.data for e in decoder.feed(b"\xef\xbb\xbfdata: 1\n\n")] == ["1"]
    decoder.close()
    assert [e.data for e in decoder.feed(b"\xef\xbb\xbfdata: 2\n\n")] == ["2"]


def test_partial_bom_then_other_bytes() -> None:
    assert [e.data for e in iter_events([b"\xef\xbb", b"data: x\n\n"])] == []
    assert decode([b"\xef\xbb", b"\ndata: x\n\n"])[0] == [
        {"type": "message", "data": "x", "last_event_id": ""}
    ]


@pytest.mark.parametrize(
    "chunks",
    [
        [b"data: a\r", b"\n", b"data: b\r", b"\n\r", b"\n"],
        [b"data: a\r", b"", b"\ndata: b\r\n\r", b"\n"],
        [b"data: a\r\ndata: b\r\n\r", b"\n"],
        [b"data: a\r", b"\ndata: b\r", b"\n\r\n"],
    ],
)
def test_crlf_split_across_chunks_is_one_line_end(chunks: list[bytes]) -> None:
    assert decode(chunks)[0] == [{"type": "message", "data": "a\nb", "last_event_id": ""}]


def test_cr_dispatches_without_waiting_for_the_next_chunk() -> None:
    decoder = SSEDecoder()
    assert [e.data for e in decoder.feed(b"data: x\r\r")] == ["x"]
    assert decoder.feed(b"\n") == []  # the LF of a CRLF: no extra blank line
    assert [e.data for e in decoder.feed(b"data: y\r\n\r\n")] == ["y"]


def test_cr_then_split_multibyte_character() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\xc3") == []  # nothing decoded yet: still might be a CRLF
    assert decoder.feed(b"\xa9\n") == []  # "é" is a line of its own (an unknown field)
    assert [e.data for e in decoder.feed(b"data: b\n\n")] == ["a\nb"]


def test_unicode_line_breaks_are_not_line_ends() -> None:
    body = "data: a\u2028b\x85c\x0bd\x0ce\x1cf\n\n".encode()
    assert [e.data for e in iter_events([body])] == ["a\u2028b\x85c\x0bd\x0ce\x1cf"]


# ------------------------------------------------------------ fields and dispatch


def test_event_fields_and_state() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(
        b'retry: 1500\nid: 7\nevent: tick\ndata: {"n": 1}\n\ndata: second\n\nid: 8\ndata: pending\n'
    )
    assert events == [
        ServerSentEvent(event="tick", data='{"n": 1}', id="7", retry=1500),
        ServerSentEvent(event="message", data="second", id="7", retry=1500),
    ]
    assert events[0].json() == {"n": 1}
    assert decoder.retry == 1500
    assert decoder.last_event_id == "7"  # "8" is not committed yet
    assert decoder.close() == []  # the pending event is discarded
    assert decoder.last_event_id == "7"
    # a reconnection: the committed id and reconnection time carry over
    assert decoder.feed(b"data: again\n\n") == [ServerSentEvent(data="again", id="7", retry=1500)]


def test_retry_values() -> None:
    def retry_of(value: bytes) -> int | None:
        decoder = SSEDecoder()
        decoder.feed(b"retry:" + value + b"\n\n")
        return decoder.retry

    assert retry_of(b"0") == 0
    assert retry_of(b" 007") == 7
    assert retry_of(b"0" * 5000 + b"250") == 250
    for bad in (b"", b" ", b"-1", b"+1", b"1e3", b"1_000", b" 1 ", "٣".encode(), b"9" * 5000):
        assert retry_of(bad) is None, bad


def test_id_with_nul_is_ignored_and_field_without_colon() -> None:
    body = b"id: 1\ndata: a\n\nid: 2\x00\ndata: b\n\nid\ndata\n\n"
    assert decode([body]) == (
        [
            {"type": "message", "data": "a", "last_event_id": "1"},
            {"type": "message", "data": "b", "last_event_id": "1"},
            {"type": "message", "data": "", "last_event_id": ""},
        ],
        None,
        "",
    )


def test_event_data_pending_across_chunks_with_fast_shapes() -> None:
    # data lines before the chunk boundary join the one-line block after it
    chunks = [b"event: e\ndata: 1\n", b"data: 2\n\nevent: f\ndata: 3\n\n"]
    assert [(e.event, e.data) for e in iter_events(chunks)] == [("e", "1\n2"), ("f", "3")]
    chunks = [b"data: 1\n", b"event: g\ndata: 2\n\n"]
    assert [(e.event, e.data) for e in iter_events(chunks)] == [("g", "1\n2")]


def test_event_type_reset_and_empty_event_name() -> None:
    body = b"event: a\n\ndata: 1\n\nevent:\ndata: 2\n\nevent: b\ndata:3\n\n"
    assert [(e.event, e.data) for e in iter_events([body])] == [
        ("message", "1"),
        ("message", "2"),
        ("b", "3"),
    ]


LLAMA_CPP_ERROR = b'data: {"n": 1}\n\nerror: {"code": 400}\n\ndata: [DONE]\n\n'


def test_error_field_is_ignored_by_default_as_the_standard_says() -> None:
    assert [(e.event, e.data) for e in iter_events([LLAMA_CPP_ERROR])] == [
        ("message", '{"n": 1}'),
        ("message", "[DONE]"),
    ]


@given(offsets=st.lists(st.integers(0, len(LLAMA_CPP_ERROR)), max_size=6))
@MANY
def test_error_field_opted_in_is_an_error_event_however_split(offsets: list[int]) -> None:
    events, _, _ = decode(cut(LLAMA_CPP_ERROR, offsets), SSEDecoder(error_field=True))
    assert events == [
        {"type": "message", "data": '{"n": 1}', "last_event_id": ""},
        {"type": "error", "data": '{"code": 400}', "last_event_id": ""},
        {"type": "message", "data": "[DONE]", "last_event_id": ""},
    ]


def test_error_field_reads_as_event_error_and_a_data_line() -> None:
    body = b"id: 7\nerror: a\ndata: b\n\nerror\n\nerrors: c\n\n"
    events, _, last_id = decode([body], SSEDecoder(error_field=True))
    assert events == [
        {"type": "error", "data": "a\nb", "last_event_id": "7"},
        {"type": "error", "data": "", "last_event_id": "7"},
    ]
    assert last_id == "7"


def test_error_field_counts_against_the_event_limit() -> None:
    decoder = SSEDecoder(max_event_bytes=8, error_field=True)
    with pytest.raises(LimitExceeded, match="max_event_bytes=8"):
        decoder.feed(b"error: 123456789\n")


# ------------------------------------------------------------ ServerSentEvent


def test_server_sent_event_value_class() -> None:
    event = ServerSentEvent()
    assert (event.event, event.data, event.id, event.retry) == ("message", "", "", None)
    assert not hasattr(event, "__dict__")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.data = "x"  # type: ignore[misc]
    assert ServerSentEvent(data="[1, 2]").json() == [1, 2]
    with pytest.raises(json.JSONDecodeError):
        ServerSentEvent(data="{unparsable}").json()


def test_decoded_events_equal_constructed_ones() -> None:
    """The decoder's fast construction gives the same objects as __init__."""
    body = b"retry: 5\nid: i\nevent: e\ndata: d\n\ndata: x\n\nevent: y\ndata: z\n\n"
    decoded = list(iter_events([body]))
    built = [
        ServerSentEvent("e", "d", "i", 5),
        ServerSentEvent("message", "x", "i", 5),
        ServerSentEvent("y", "z", "i", 5),
    ]
    assert decoded == built
    assert [hash(e) for e in decoded] == [hash(e) for e in built]
    assert [repr(e) for e in decoded] == [repr(e) for e in built]
    assert attrs.asdict(decoded[0]) == {"event": "e", "data": "d", "id": "i", "retry": 5}
    assert attrs.evolve(decoded[0], data="q").data == "q"


# ------------------------------------------------------------ helpers


def test_iter_events_is_lazy_and_uses_given_decoder() -> None:
    decoder = SSEDecoder()
    seen: list[bytes] = []

    def chunks() -> Iterable[bytes]:
        for chunk in (b"id: 1\ndata: a\n\n", b"data: b\n", b"\n", b"id: 2\n"):
            seen.append(chunk)
            yield chunk

    events = iter_events(chunks(), decoder=decoder)
    assert next(events).data == "a"
    assert len(seen) == 1
    assert [e.data for e in events] == ["b"]
    assert decoder.last_event_id == "1"


def test_aiter_events() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for chunk in (b"event: x\r\ndata: 1\r", b"\n\r\ndata: 2\n", b"\n"):
            await asyncio.sleep(0)
            yield chunk

    async def collect() -> list[ServerSentEvent]:
        return [event async for event in aiter_events(chunks())]

    assert asyncio.run(collect()) == [ServerSentEvent("x", "1"), ServerSentEvent("message", "2")]


class _FlushingDecoder(SSEDecoder):
    """A lenient decoder: close() dispatches the event whose blank line never came."""

    def __init__(self) -> None:
        super().__init__()
        self.fed = b""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        self.fed += chunk
        return super().feed(chunk)

    def close(self) -> list[ServerSentEvent]:
        super().close()
        unterminated = self.fed.rpartition(b"\n\n")[2]
        return [ServerSentEvent(data=unterminated.decode())] if unterminated else []


def test_aiter_events_yields_what_close_returns_as_iter_events_does() -> None:
    chunks = [b"data: 1\n\n", b"tail"]

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def collect() -> list[ServerSentEvent]:
        return [event async for event in aiter_events(body(), decoder=_FlushingDecoder())]

    expected = [ServerSentEvent(data="1"), ServerSentEvent(data="tail")]
    assert list(iter_events(chunks, decoder=_FlushingDecoder())) == expected
    assert asyncio.run(collect()) == expected


def test_module_doctests() -> None:
    result = doctest.testmod(rafrx.sse, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5
    assert result.failed == 0


def test_public_names() -> None:
    assert set(rafrx.sse.__all__) == {
        "DEFAULT_MAX_EVENT_BYTES",
        "DEFAULT_MAX_LINE_BYTES",
        "SSEDecoder",
        "ServerSentEvent",
        "aiter_events",
        "check_content_type",
        "iter_events",
        "sniff_event_stream",
    }


@pytest.mark.parametrize(
    ("limits", "chunk"),
    [
        ({"max_line_bytes": 16}, b"id: 7\ndata: ok\n\nid: 8\ndata: " + b"x" * 11),
        ({"max_event_bytes": 8}, b"id: 7\ndata: ok\n\nid: 8\ndata: 123456789\n"),
        ({"max_event_bytes": 8}, b"id: 7\ndata: ok\n\nid: 8\ndata: 123456789\n\n"),
    ],
    ids=["unfinished-line", "pending-data", "next-event"],
)
def test_a_limit_error_keeps_the_events_before_it_and_commits_no_later_id(
    limits: dict[str, int], chunk: bytes
) -> None:
    """The event before the offending line or event is returned, with its id committed;
    the id of the event that failed is not (what a reconnection sends as
    Last-Event-ID must name the last event actually delivered)."""
    decoder = SSEDecoder(**limits)
    assert decoder.feed(chunk) == [ServerSentEvent(data="ok", id="7")]
    assert decoder.last_event_id == "7"
    with pytest.raises(LimitExceeded):
        decoder.close()
    assert decoder.last_event_id == "7"


@pytest.mark.parametrize(
    ("head", "verdict"),
    [
        (b"data: {}", True),
        (b"event: message_start", True),
        (b": keep-alive", True),
        (b"id:1", True),
        (b"retry: 10", True),
        (b"\xef\xbb\xbf\r\n\ndata:", True),
        (b"", None),
        (b"\n\r\n", None),
        (b"da", None),
        (b"\xef", None),  # (a byte order mark cut by the first read)
        (b"\xef\xbb", None),
        (b'{"error": {}}', False),
        (b"<html>", False),
        (b" data: x", False),  # (a field name starting with a space: not "data")
        (b"dat\n", False),
    ],
)
def test_sniff_event_stream_tells_a_body_that_starts_as_an_event_stream(
    head: bytes, verdict: bool | None
) -> None:
    assert rafrx.sse.sniff_event_stream(head) is verdict
