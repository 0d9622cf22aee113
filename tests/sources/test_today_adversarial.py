"""An adversarial hunt over two changes of the day.

1. ``from_sse`` over bytes / a sync iterable is driven on Rx's current-thread
   trampoline inside ``subscribe`` (so ``take(n)`` stops the reading), and at
   once by ``.run()`` and direct calls (``_reducer._soon``, ``SyncSource``,
   ``ReducedObservable``).
2. ``SSEDecoder.feed`` returns the events completed before an oversized line
   or event and keeps the ``LimitExceeded`` for the next ``feed()`` /
   ``close()``; ``UpdateDecoder`` keeps it like a dialect error;
   ``iter_events`` / ``aiter_events`` stop at it.

Each test states the behaviour it expects; the ones that fail pin a bug.
Tests that could hang run the code in a daemon thread with a timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import reactivex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.scheduler import CurrentThreadScheduler
from reactivex.subject import Subject

from rafrx import updates as u
from rafrx.errors import LimitExceeded, RafrxError
from rafrx.operators import aggregate, convert
from rafrx.recorder import record_sse, replay
from rafrx.sources import UpdateDecoder, from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient
from rafrx.sse import SSEDecoder, aiter_events, iter_events
from rafrx.testing import LLMServer, Replay
from tests.reliability._support import FIXTURES

pytestmark = pytest.mark.timeout(30)

GUARD = 5.0  # seconds a threaded run may take before it counts as hung


def chat(content: str) -> bytes:
    data = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return f"data: {json.dumps(data)}\n\n".encode()


STOP = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
DONE = b"data: [DONE]\n\n"
BODY = chat("a") + chat("b") + STOP + DONE


def texts(items: list[Any]) -> list[str]:
    return [x.delta for x in items if isinstance(x, u.TextDelta)]


class Chunks:
    """A generator of ``n`` chat chunks (then the end, unless ``n`` is None: endless)
    recording what it yields and whether it was closed."""

    def __init__(self, n: int | None = 200, tag: str = "g") -> None:
        self.n = n
        self.tag = tag
        self.read: list[int] = []
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        try:
            for i in itertools.count() if self.n is None else range(self.n):
                self.read.append(i)
                yield chat(f"{self.tag}{i} ")
            yield STOP + DONE
        finally:
            self.closed.set()


def in_thread(fn: Callable[[], Any], timeout: float = GUARD) -> tuple[bool, Any]:
    """(finished, result or exception) of ``fn`` run in a daemon thread."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    return (not thread.is_alive(), box[0] if box else None)


def subscribe_all(source: reactivex.Observable[Any]) -> tuple[list[Any], list[Any]]:
    """(items, terminal) of a subscription made outside any trampoline."""
    items: list[Any] = []
    terminal: list[Any] = []
    source.subscribe(items.append, terminal.append, lambda: terminal.append("completed"))
    return items, terminal


# ===================================================================== 1. sync driving


def test_take_stops_an_endless_generator_and_closes_it() -> None:
    body = Chunks(None)
    finished, got = in_thread(lambda: from_sse(iter(body)).pipe(rx.take(3), rx.to_list()).run())
    assert finished
    assert texts(got) == ["g0 ", "g1 ", "g2 "]
    assert body.closed.is_set()
    assert len(body.read) <= 4


def test_fused_convert_then_take_and_first_stop_an_endless_generator() -> None:
    body = Chunks(None)
    finished, got = in_thread(
        lambda: from_sse(iter(body)).pipe(convert(), rx.take(2), rx.to_list()).run()
    )
    assert finished
    assert len(got) == 2
    assert body.closed.is_set()
    other = Chunks(None)
    finished, first = in_thread(lambda: from_sse(iter(other)).pipe(rx.first()).run())
    assert finished
    assert first == u.TextDelta("g0 ")
    assert other.closed.is_set()
    assert other.read == [0]


def test_defer_and_take_stop_an_endless_generator() -> None:
    body = Chunks(None)
    finished, got = in_thread(
        lambda: reactivex.defer(lambda _: from_sse(iter(body))).pipe(rx.take(2), rx.count()).run()
    )
    assert finished
    assert got == 2
    assert body.closed.is_set()


def test_take_under_plain_subscribe_stops_at_once() -> None:
    body = Chunks(500)
    items, terminal = subscribe_all(from_sse(iter(body)).pipe(rx.take(3)))
    assert texts(items) == ["g0 ", "g1 ", "g2 "]
    assert terminal == ["completed"]
    assert body.closed.is_set()
    assert len(body.read) <= 4


def test_merge_and_flat_map_stop_under_plain_subscribe() -> None:
    body = Chunks(500)
    items, _ = subscribe_all(
        reactivex.merge(from_sse(iter(body)), reactivex.never()).pipe(rx.take(3))
    )
    assert len(items) == 3
    assert body.closed.is_set()
    assert len(body.read) <= 4
    inner = Chunks(500)
    items, _ = subscribe_all(
        reactivex.of(1).pipe(rx.flat_map(lambda _: from_sse(iter(inner))), rx.take(2))
    )
    assert len(items) == 2
    assert inner.closed.is_set()
    assert len(inner.read) <= 3


def test_take_after_merge_under_run_stops_reading() -> None:
    """``merge(...).pipe(take(3)).run()``: Rx's ``run`` subscribes with its
    NewThreadScheduler, so merge subscribes the inner ``from_sse`` on a scheduler
    thread where no trampoline runs; ``_soon`` then drives the whole body inside
    that ``subscribe`` call, before merge holds its disposable, and ``take(3)``
    cannot stop it. ``reactivex.from_iterable`` in the same place honours the
    scheduler and stops after a few items. Expected: the generator is closed after
    a few chunks, as under a plain ``subscribe`` (an endless one is read forever
    in a background thread)."""
    body = Chunks(300)
    got = (
        reactivex.merge(from_sse(iter(body)), reactivex.never()).pipe(rx.take(3), rx.count()).run()
    )
    assert got == 3
    assert body.closed.wait(GUARD)
    assert len(body.read) <= 10, f"read {len(body.read)} of 300 chunks after take(3) completed"


def test_flat_map_then_take_under_run_stops_reading_like_from_iterable() -> None:
    """The reference: the same shape over ``reactivex.from_iterable`` stops (it
    schedules on the subscribe scheduler); only ``from_sse`` keeps reading."""
    seen: list[int] = []

    def numbers() -> Iterator[int]:
        for i in range(300):
            seen.append(i)
            yield i

    got = (
        reactivex.of(1)
        .pipe(rx.flat_map(lambda _: reactivex.from_iterable(numbers())), rx.take(2), rx.count())
        .run()
    )
    assert got == 2
    time.sleep(0.2)
    assert len(seen) < 300  # from_iterable: stopped (compare the test above)


def test_concat_zip_repeat_and_share_give_everything_once_in_order() -> None:
    a = chat("a") + STOP + DONE
    b = chat("b") + STOP + DONE
    assert texts(reactivex.concat(from_sse(a), from_sse(b)).pipe(rx.to_list()).run()) == [
        "a",
        "b",
    ]
    pairs = reactivex.zip(from_sse(a), from_sse(b)).pipe(rx.to_list()).run()
    assert [(x.delta, y.delta) for x, y in pairs[:1]] == [("a", "b")]
    assert len(pairs) == 2
    assert texts(from_sse(a).pipe(rx.repeat(3), rx.to_list()).run()) == ["a", "a", "a"]
    shared = from_sse(a).pipe(rx.share())
    left, _ = subscribe_all(shared)
    right, _ = subscribe_all(shared)
    assert texts(left) == ["a"]
    assert right == []  # as over reactivex.from_iterable: the shared subject has completed


def test_flat_map_of_fused_pipelines_gives_each_response() -> None:
    bodies = {i: chat(f"t{i}") + STOP + DONE for i in range(3)}
    got = (
        reactivex.of(0, 1, 2)
        .pipe(
            rx.flat_map(lambda i: from_sse(bodies[i]).pipe(convert(), aggregate())),
            rx.map(lambda r: r.text),
            rx.to_list(),
        )
        .run()
    )
    # Under run() (a new thread's scheduler) each inner body is read on its own
    # thread, as reactivex.from_iterable's would be: flat_map gives no order.
    assert sorted(got) == ["t0", "t1", "t2"]


def test_subscribe_inside_an_action_then_dispose_reads_no_chunk() -> None:
    """Subscribed inside a trampoline action (another stream's on_next) and disposed
    before the queued drive runs: nothing should be read from the body (as
    ``reactivex.from_iterable`` checks ``disposed`` before its first ``next()``).
    Actual: ``drive`` reads and decodes the first chunk, then sees ``stopped()``."""
    body = Chunks(5)
    fused = Chunks(5)

    def action(_scheduler: Any, _state: Any = None) -> None:
        from_sse(iter(body)).subscribe(lambda _: None).dispose()
        from_sse(iter(fused)).pipe(convert()).subscribe(lambda _: None).dispose()

    CurrentThreadScheduler.singleton().schedule(action)
    assert (body.read, fused.read) == ([], [])


def test_rx_run_inside_an_on_next_does_not_hang() -> None:
    """``from_sse(body).pipe(to_list()).run()`` called from another stream's
    ``on_next`` (any trampoline action): Rx's ``run`` subscribes and then blocks on
    its latch, but ``_soon`` queued the drive on the very trampoline that ``run``
    is blocking, so it never runs: a deadlock. Before today the body was driven
    during ``subscribe``; ``reactivex.from_iterable`` runs it on ``run``'s
    scheduler. Expected: the inner list, as at top level."""

    def outer() -> list[Any]:
        got: list[Any] = []
        reactivex.of(1).subscribe(lambda _: got.append(from_sse(BODY).pipe(rx.to_list()).run()))
        return got

    finished, got = in_thread(outer, timeout=2.0)
    assert finished, "Observable.run() inside on_next never returned"
    assert [texts(x) for x in got] == [["a", "b"]]

    def fused() -> list[Any]:  # the same through ReducedObservable._attach (convert())
        got: list[Any] = []
        reactivex.of(1).subscribe(
            lambda _: got.append(from_sse(BODY).pipe(convert(), rx.to_list()).run())
        )
        return got

    finished, got = in_thread(fused, timeout=2.0)
    assert finished, "a fused pipeline's Observable.run() inside on_next never returned"
    assert [len(x) for x in got] == [3]


def test_from_iterable_run_inside_an_on_next_works() -> None:
    """The reference for the test above."""

    def outer() -> list[Any]:
        got: list[Any] = []
        reactivex.of(1).subscribe(
            lambda _: got.append(reactivex.from_iterable([1, 2]).pipe(rx.to_list()).run())
        )
        return got

    finished, got = in_thread(outer, timeout=2.0)
    assert finished
    assert got == [[1, 2]]


def test_fused_run_inside_an_on_next_drives_at_once() -> None:
    got: list[str] = []
    reactivex.of(1, 2).subscribe(
        lambda _: got.append(from_sse(BODY).pipe(convert(), aggregate()).run().text)
    )
    assert got == ["ab", "ab"]


def test_take_until_from_another_thread_stops_the_reading() -> None:
    gate = threading.Semaphore(0)
    read: list[int] = []
    closed = threading.Event()

    def gated() -> Iterator[bytes]:
        try:
            for i in range(100):
                gate.acquire()
                read.append(i)
                yield chat(str(i))
            yield STOP + DONE
        finally:
            closed.set()

    stop: Subject[int] = Subject()
    items: list[Any] = []
    terminal: list[Any] = []
    thread = threading.Thread(
        target=lambda: (
            from_sse(gated())
            .pipe(rx.take_until(stop))
            .subscribe(items.append, terminal.append, lambda: terminal.append("completed"))
        ),
        daemon=True,
    )
    thread.start()
    gate.release()
    gate.release()
    deadline = time.monotonic() + GUARD
    while len(items) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    stop.on_next(1)
    for _ in range(10):
        gate.release()
    thread.join(GUARD)
    assert not thread.is_alive()
    assert closed.is_set()
    assert len(read) <= 3
    assert texts(items) == ["0", "1"]
    assert terminal == ["completed"]


def test_a_generator_raising_midway_is_forwarded_after_its_items() -> None:
    def broken() -> Iterator[bytes]:
        yield chat("a")
        raise OSError("socket gone")

    items, terminal = subscribe_all(from_sse(broken()))
    assert texts(items) == ["a"]
    assert len(terminal) == 1
    assert isinstance(terminal[0], OSError)
    with pytest.raises(OSError, match="socket gone"):
        from_sse(broken()).pipe(convert(), aggregate()).run()


def test_subscriber_on_next_raising_is_reported_once_and_closes_the_body() -> None:
    body = Chunks(50)
    terminal: list[Any] = []

    def on_next(_: Any) -> None:
        raise ValueError("subscriber bug")

    from_sse(iter(body)).subscribe(on_next, terminal.append, lambda: terminal.append("done"))
    assert len(terminal) == 1
    assert isinstance(terminal[0], ValueError)
    assert body.closed.is_set()
    assert len(body.read) == 1


def test_on_completed_raising_propagates_out_of_subscribe() -> None:
    def on_completed() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        from_sse(BODY).subscribe(lambda _: None, lambda _: None, on_completed)
    # the trampoline is usable afterwards
    assert texts(from_sse(BODY).pipe(rx.to_list()).run()) == ["a", "b"]


@pytest.mark.asyncio
async def test_await_and_to_future_in_asyncio() -> None:
    items = await from_sse(BODY).pipe(rx.to_list())
    assert texts(items) == ["a", "b"]
    response = await from_sse(BODY).pipe(convert(), aggregate())
    assert response.text == "ab"
    future = from_sse(BODY).pipe(convert(), aggregate(), rx.to_future())
    assert (await asyncio.wait_for(future, GUARD)).text == "ab"


def outcome_of_run(source: reactivex.Observable[Any]) -> Any:
    try:
        response = source.pipe(convert(), aggregate()).run()
    except Exception as exc:
        return ("error", type(exc), str(exc), getattr(exc, "partial", None))
    return ("ok", response)


def outcome_of_subscribe(source: reactivex.Observable[Any]) -> Any:
    items, terminal = subscribe_all(source.pipe(convert(), aggregate()))
    assert len(terminal) == 1
    if terminal[0] == "completed":
        assert len(items) == 1
        return ("ok", items[0])
    exc = terminal[0]
    return ("error", type(exc), str(exc), getattr(exc, "partial", None))


BODY_PIECES = st.sampled_from(
    [
        chat("x"),
        chat("é€"),
        b": keepalive\n\n",
        b"data: {not json}\n\n",
        b'data: {"error": {"message": "overloaded", "type": "overloaded_error"}}\n\n',
        b"data: " + b"z" * 300 + b"\n\n",
        STOP,
        DONE,
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(BODY_PIECES, max_size=6), st.lists(st.integers(0, 400), max_size=4))
def test_run_and_subscribe_agree(pieces: list[bytes], cuts: list[int]) -> None:
    body = b"".join(pieces)
    bounds = sorted({min(c, len(body)) for c in cuts})
    chunks = [body[a:b] for a, b in zip([0, *bounds], [*bounds, len(body)], strict=True)]

    def make() -> reactivex.Observable[Any]:
        return from_sse(list(chunks), max_line_bytes=200)

    ran = outcome_of_run(make())
    subscribed = outcome_of_subscribe(make())
    assert ran == subscribed
    assert outcome_of_run(from_sse(body, max_line_bytes=200)) == ran  # any split
    if ran[0] == "error":
        assert issubclass(ran[1], RafrxError)


# ===================================================================== 2. limits


def reference(body: bytes, max_line: int, max_event: int) -> Any:
    """Events, error kind, last_event_id and retry per the standard, line by line."""
    text = body.decode("utf-8", "replace")
    text = text.removeprefix("\ufeff")
    lines = re.split(r"\r\n|\r|\n", text)
    tail = lines.pop()
    events: list[tuple[str, str, str, int | None]] = []
    data: list[str] = []
    etype, id_buffer, last_id, retry, size = "", "", "", None, 0

    def size_of(s: str) -> int:
        return len(s.encode("utf-8", "surrogatepass"))

    def limit_reached(line: str) -> str | None:
        """The limit a line (ended or not) reaches first, read from its start: a data
        line takes its event past max_event once that many bytes of its value are in
        (the event's limit at a tie)."""
        if line.startswith("data:"):
            needed = max_event + 1 - size  # bytes of its value that pass the limit
            event_at = 5 if needed <= 0 else 5 + line.startswith(" ", 5) + needed
            if event_at <= min(size_of(line), max_line + 1):
                return "event"
        return "line" if size_of(line) > max_line else None

    for line in lines:
        if (reached := limit_reached(line)) is not None:
            return events, reached, last_id, retry
        if not line:
            if data:
                events.append((etype or "message", "\n".join(data), id_buffer, retry))
            data, etype, size, last_id = [], "", 0, id_buffer
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
            size += size_of(value) + 1
            if size - 1 > max_event:
                return events, "event", last_id, retry
        elif name == "event":
            etype = value
        elif name == "id" and "\x00" not in value:
            id_buffer = value
        elif name == "retry" and value.isascii() and value.isdigit():
            retry = int(value)
    return events, limit_reached(tail), last_id, retry


def decode(chunks: list[bytes], max_line: int, max_event: int) -> Any:
    decoder = SSEDecoder(max_line_bytes=max_line, max_event_bytes=max_event)
    events: list[Any] = []
    kind = None
    limit = None
    try:
        for chunk in chunks:
            events += decoder.feed(chunk)
            if decoder.error is not None:
                break
        decoder.close()
    except LimitExceeded as err:
        kind = "line" if "line" in str(err) else "event"
        limit = err.limit
    if kind is not None:
        assert limit == (max_line if kind == "line" else max_event)
    shaped = [(e.event, e.data, e.id, e.retry) for e in events]
    return shaped, kind, decoder.last_event_id, decoder.retry


SSE_LINES = st.one_of(
    st.builds(lambda n: "data: " + "x" * n, st.integers(0, 70)),
    st.builds(lambda n: "data:" + "é" * n, st.integers(0, 30)),
    st.builds(lambda n: "event:" + "\U0001d11e" * n, st.integers(0, 20)),
    st.builds(lambda n: ": " + "z" * n, st.integers(0, 90)),
    st.sampled_from(["id: 1", "id: 22", "id", "retry: 5", "retry: 70", "retry: x", "", "", ""]),
    st.sampled_from(["", "data", "event: t", "foo: bar", "data: [DONE]"]),
)


@st.composite
def sse_bodies(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.tuples(SSE_LINES, st.sampled_from(["\n", "\r\n", "\r"])), max_size=16))
    text = "".join(line + end for line, end in lines)
    if draw(st.booleans()):
        text = "\ufeff" + text
    if draw(st.booleans()):
        text += draw(SSE_LINES)
    body = text.encode()
    if body and draw(st.booleans()):
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + b"\xff\xc3" + body[at:]
    return body


@st.composite
def splits(draw: st.DrawFn, body: bytes) -> list[bytes]:
    if draw(st.integers(0, 4)) == 0:
        return [body[i : i + 1] for i in range(len(body))]
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=8)))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data(), sse_bodies(), st.integers(4, 100), st.integers(4, 150))
def test_any_split_gives_the_reference_events_then_error(
    data: st.DataObject, body: bytes, max_line: int, max_event: int
) -> None:
    expected = reference(body, max_line, max_event)
    assert decode([body], max_line, max_event) == expected
    assert decode(data.draw(splits(body)), max_line, max_event) == expected


def test_feeding_after_a_kept_error_raises_it_then_close_is_clean() -> None:
    decoder = SSEDecoder(max_line_bytes=16)
    events = decoder.feed(b"id: 7\ndata: ok\n\nretry: 9\ndata: " + b"x" * 20)
    assert [e.data for e in events] == ["ok"]
    kept = decoder.error
    assert isinstance(kept, LimitExceeded)
    assert (decoder.last_event_id, decoder.retry) == ("7", 9)
    with pytest.raises(LimitExceeded) as raised:
        decoder.feed(b"data: more\n\n")
    assert (str(raised.value), raised.value.limit) == (str(kept), kept.limit)
    assert raised.value is not kept  # a copy, so that the kept one holds no traceback
    assert kept.__traceback__ is None
    with pytest.raises(LimitExceeded):
        decoder.feed(b"")
    assert decoder.close() == []  # raised already: not again
    assert decoder.close() == []
    assert decoder.error is None
    again = decoder.feed(b"data: next\n\n")  # a reconnection
    assert [(e.data, e.id, e.retry) for e in again] == [("next", "7", 9)]


def test_close_raises_a_kept_error_once_then_the_decoder_reconnects() -> None:
    decoder = SSEDecoder(max_event_bytes=8)
    events = decoder.feed(b"id: a\ndata: 1\n\nid: b\ndata: 123456789\n\n")
    assert [(e.data, e.id) for e in events] == [("1", "a")]
    with pytest.raises(LimitExceeded):
        decoder.close()
    assert decoder.close() == []
    assert decoder.last_event_id == "a"  # the too big event's id is not committed
    assert [e.id for e in decoder.feed(b"\xef\xbb\xbfdata: x\n\n")] == ["a"]  # BOM again


@pytest.mark.parametrize("cut", [None, 16])
def test_iter_events_leaves_the_decoder_the_same_whatever_the_split(cut: int | None) -> None:
    """``iter_events(chunks, decoder=d)``, the documented way to keep ``d`` for a
    reconnection: when the limit error came in the same chunk as an event,
    ``close()`` raised it and reset ``d``; when it came alone in a later chunk,
    ``feed()`` raised it and ``d`` was never closed, so it still refuses input and
    the next ``iter_events(..., decoder=d)`` fails at once with the old error.
    Expected: the same decoder state (clean, last_event_id kept) for both splits."""
    body = b"id: 1\ndata: a\n\ndata: " + b"x" * 100 + b"\n\n"
    chunks = [body] if cut is None else [body[:cut], body[cut:]]
    decoder = SSEDecoder(max_line_bytes=16)
    got: list[str] = []
    with pytest.raises(LimitExceeded):
        got.extend(event.data for event in iter_events(chunks, decoder=decoder))
    assert got == ["a"]
    assert decoder.last_event_id == "1"
    assert decoder.error is None
    assert [e.data for e in iter_events([b"data: b\n\n"], decoder=decoder)] == ["b"]


@pytest.mark.asyncio
async def test_aiter_events_stops_at_the_error_and_reads_no_further() -> None:
    read: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        for i, piece in enumerate([b"data: a\n\ndata: " + b"x" * 40, b"data: b\n\n"]):
            read.append(i)
            yield piece

    got: list[str] = []

    async def consume() -> None:
        async for event in aiter_events(body(), decoder=SSEDecoder(max_line_bytes=16)):
            got.append(event.data)

    with pytest.raises(LimitExceeded):
        await consume()
    assert got == ["a"]
    assert read == [0]


def test_iter_events_reads_no_chunk_past_the_error() -> None:
    read: list[int] = []

    def body() -> Iterator[bytes]:
        for i, piece in enumerate([b"data: a\n\n: " + b"x" * 40 + b"\n", b"data: b\n\n"]):
            read.append(i)
            yield piece

    got: list[str] = []
    with pytest.raises(LimitExceeded):
        got.extend(
            event.data for event in iter_events(body(), decoder=SSEDecoder(max_line_bytes=16))
        )
    assert got == ["a"]
    assert read == [0]


def test_update_decoder_keeps_the_limit_like_a_dialect_error() -> None:
    decoder = UpdateDecoder("openai-chat", max_line_bytes=64)
    assert decoder.feed(chat("Hi") + b"data: " + b"x" * 99) == [u.TextDelta("Hi")]
    assert decoder.done
    with pytest.raises(LimitExceeded):
        decoder.close()
    with pytest.raises(LimitExceeded):
        decoder.close()  # kept: raised every time


def test_update_decoder_feed_after_a_kept_limit_raises_it() -> None:
    decoder = UpdateDecoder("openai-chat", max_line_bytes=64)
    decoder.feed(chat("Hi") + b"data: " + b"x" * 99)
    with pytest.raises(LimitExceeded):
        decoder.feed(DONE)


@pytest.mark.parametrize(
    "tail",
    [b"data: " + b"x" * 99, b": " + b"x" * 99 + b"\n", b"data: " + b"x" * 99 + b"\n\n"],
)
def test_a_limit_after_done_in_the_same_chunk_is_not_an_error(tail: bytes) -> None:
    body = chat("a") + STOP + DONE + tail  # STOP's line is 71 bytes
    for chunks in (
        [body],
        [body[:40], body[40:]],
        [body[i : i + 7] for i in range(0, len(body), 7)],
    ):
        response = from_sse(chunks, max_line_bytes=80).pipe(convert(), aggregate()).run()
        assert (response.text, response.finish_reason) == ("a", "stop")


def test_a_limit_before_done_in_the_same_chunk_fails_after_the_items() -> None:
    body = chat("a") + b"data: " + b"x" * 99 + b"\n\n" + STOP + DONE
    for chunks in ([body], [body[i : i + 5] for i in range(0, len(body), 5)]):
        items, terminal = subscribe_all(from_sse(chunks, max_line_bytes=64))
        assert texts(items) == ["a"]
        assert len(terminal) == 1
        assert isinstance(terminal[0], LimitExceeded)
        with pytest.raises(LimitExceeded) as raised:
            from_sse(chunks, max_line_bytes=64).pipe(convert(), aggregate()).run()
        assert raised.value.partial is not None
        assert raised.value.partial.text == "a"


def test_anthropic_limit_in_the_chunk_of_message_stop() -> None:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    head = (
        event(
            "message_start",
            {"type": "message_start", "message": {"id": "m", "model": "c", "usage": {}}},
        )
        + event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        )
        + event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "hi"},
            },
        )
        + event("content_block_stop", {"type": "content_block_stop", "index": 0})
        + event(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        )
    )
    stop = event("message_stop", {"type": "message_stop"})
    long = b"data: " + b"x" * 400 + b"\n\n"
    ok = from_sse(head + stop + long, "anthropic", max_line_bytes=300).pipe(convert(), aggregate())
    assert ok.run().text == "hi"
    with pytest.raises(LimitExceeded) as raised:
        from_sse(head + long + stop, "anthropic", max_line_bytes=300).pipe(
            convert(), aggregate()
        ).run()
    assert raised.value.partial.text == "hi"


def fixture_bodies() -> list[tuple[bytes, str]]:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
    chosen: dict[str, tuple[bytes, str]] = {}
    for entry in manifest:
        fmt = entry["format"]
        if fmt in ("openai-chat", "anthropic", "openai-responses") and fmt not in chosen:
            chosen[fmt] = ((FIXTURES / entry["path"]).read_bytes(), fmt)
    return list(chosen.values())


FIXTURE_BODIES = fixture_bodies()


def event_ends(body: bytes) -> list[int]:
    normal = body.replace(b"\r\n", b"\n")
    assert normal == body  # the chosen fixtures are LF-framed
    return [m.end() for m in re.finditer(b"\n\n", body)]


def outcome(observable: reactivex.Observable[Any]) -> tuple[list[Any], Any]:
    items, terminal = subscribe_all(observable)
    assert len(terminal) == 1
    end = terminal[0]
    return items, end if end == "completed" else type(end)


async def outcome_async(chunks: list[bytes], dialect: str, max_line: int) -> tuple[list[Any], Any]:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            await asyncio.sleep(0)
            yield chunk

    items: list[Any] = []
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    from_sse(body(), dialect, max_line_bytes=max_line).subscribe(
        items.append, done.set_result, lambda: done.set_result("completed")
    )
    end = await asyncio.wait_for(done, GUARD)
    return items, end if end == "completed" else type(end)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data(), st.sampled_from(FIXTURE_BODIES), st.booleans())
def test_from_sse_items_before_a_limit_whatever_the_split(
    data: st.DataObject, fixture: tuple[bytes, str], comment: bool
) -> None:
    body, dialect = fixture
    ends = event_ends(body)
    at = data.draw(st.sampled_from([0, *ends[:-1]]))
    longest = max(map(len, body.split(b"\n")))
    max_line = longest + 8
    poison = (b": " if comment else b"data: ") + b"p" * (max_line + 1) + b"\n\n"
    poisoned = body[:at] + poison + body[at:]
    decoder = UpdateDecoder(dialect)  # what the events before the poison give
    before = decoder.feed(body[:at])
    if decoder.done:
        expected: tuple[list[Any], Any] = (before + decoder.close(), "completed")
    else:  # (then the usage reported so far, before the error)
        expected = (before + decoder.salvage(), LimitExceeded)
    whole = outcome(from_sse(poisoned, dialect, max_line_bytes=max_line))
    assert whole == expected
    chunks = data.draw(splits(poisoned))
    assert outcome(from_sse(chunks, dialect, max_line_bytes=max_line)) == whole
    assert asyncio.run(outcome_async(chunks, dialect, max_line)) == whole


# ---------------------------------------------------------------- HTTP clients


@pytest.mark.asyncio
@pytest.mark.parametrize("chunk_size", [None, 1, 13])
async def test_clients_deliver_the_items_then_limit_exceeded(chunk_size: int | None) -> None:
    body = chat("Hel") + chat("lo") + b"data: " + b"x" * 3000 + b"\n\n" + STOP + DONE
    async with LLMServer() as server:
        server.enqueue(Replay(body, chunk_size=chunk_size))
        async with OpenAIChatClient(server.url, "sk-test", max_line_bytes=1024) as client:
            items: list[Any] = []
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            client.stream([]).subscribe(
                items.append, done.set_result, lambda: done.set_result("completed")
            )
            end = await asyncio.wait_for(done, GUARD)
    assert texts(items) == ["Hel", "lo"]
    assert isinstance(end, LimitExceeded)
    assert isinstance(end, RafrxError)


@pytest.mark.asyncio
async def test_anthropic_client_limit_after_message_stop_completes() -> None:
    body = (
        b'event: message_start\ndata: {"type": "message_start", "message": '
        b'{"id": "m", "model": "c", "usage": {}}}\n\n'
        b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
        b'"content_block": {"type": "text", "text": ""}}\n\n'
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "text_delta", "text": "hi"}}\n\n'
        b'event: message_delta\ndata: {"type": "message_delta", "delta": '
        b'{"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}\n\n'
        b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
        b"data: " + b"x" * 3000 + b"\n\n"
    )
    async with LLMServer() as server:
        server.enqueue(Replay(body))
        async with AnthropicClient(server.url, "sk-ant", max_line_bytes=1024) as client:
            response = await asyncio.wait_for(client.stream([]).pipe(convert(), aggregate()), GUARD)
    assert response.text == "hi"


# ---------------------------------------------------------------- record / replay


@pytest.mark.asyncio
async def test_record_sse_of_a_body_cut_by_a_limit_keeps_what_was_read(tmp_path: Any) -> None:
    pieces = [chat("a"), b"data: " + b"x" * 200 + b"\n\n", STOP + DONE]
    read: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        for i, piece in enumerate(pieces):
            read.append(i)
            yield piece

    path = tmp_path / "cut.sse"
    items: list[Any] = []
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    from_sse(record_sse(body(), path), max_line_bytes=64).subscribe(
        items.append, done.set_result, lambda: done.set_result("completed")
    )
    end = await asyncio.wait_for(done, GUARD)
    assert texts(items) == ["a"]
    assert isinstance(end, LimitExceeded)
    for _ in range(100):  # the recorder writes when its generator is closed
        if path.exists():
            break
        await asyncio.sleep(0.01)
    assert read == [0, 1]
    assert path.read_bytes() == pieces[0] + pieces[1]
    replayed = outcome(replay(path, dialect="openai-chat"))
    assert texts(replayed[0]) == ["a"]
    # replay() has no limit options: the default ones let the long line through
    # and it fails as a MalformedEvent instead (see the report's judgement calls)
    assert replayed[1] is not LimitExceeded
    assert issubclass(replayed[1], RafrxError)
