"""rafrx.recorder: JSON-lines and raw SSE recordings, replay, redaction."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import reactivex
from aiohttp import web
from reactivex import operators as rx
from reactivex.testing import ReactiveTest, TestScheduler

from rafrx import content as c
from rafrx import updates as u
from rafrx.errors import HTTPStatusError, IncompleteStream, StreamInterrupted
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.operators import aggregate, convert
from rafrx.recorder import (
    decode_item,
    encode_item,
    guess_dialect,
    load,
    load_sse,
    record,
    record_http,
    record_sse,
    redact,
    redact_headers,
    replay,
    timing_path,
)
from rafrx.response import AgentResponseResult, FinishReason, Usage

FIXTURES = Path(__file__).parent / "data" / "fixtures"
KEY = "sk-test-0123456789abcdefghijklmnop"

ALL_UPDATES: list[Any] = [
    u.ResponseMetadata(id="r1", model="m"),
    u.TextDelta("Hi"),
    u.ReasoningDelta("hmm", provider_data={"signature": "abc", "$type": "not ours"}),
    u.ToolCallDelta(0, id="a", name="f", arguments_delta='{"x": '),
    u.ToolCallStart("b", "g"),
    u.ToolCallArgs("b", '{"y": [1, 2.5, null, true]}'),
    u.ToolCallEnd("b"),
    u.ToolCalled("b", result="ok"),
    u.ToolCalled("c", error="boom"),
    u.ToolApprovalRequest("d", "rm", {"path": "/", "nested": {"$dict": 1}}, "dangerous"),
    u.Usage(Usage(1, 2, 3, reasoning_tokens=1, cached_tokens=0)),
    u.Error("overloaded", error_type="overloaded_error"),
    u.Uri("https://example.com/a", "text/html"),
    u.Finish(FinishReason.TOOL_CALLS, Usage(4, 5, 9)),
]

ALL_RESULTS: list[Any] = [
    AgentResponseResult(
        id="r1",
        model="m",
        finish_reason=FinishReason.STOP,
        contents=[
            c.TextContent("Hi", meta=c.ResponseMetadata("r1", "m")),
            c.ReasoningContent("hmm", provider_data={"sig": "x"}),
            c.UriContent("https://example.com", "text/html"),
            c.ToolCallStartContent("a", "f"),
            c.ToolCallArgsContent("a", '{"q": "ü"}'),
            c.ToolCallArgsParsedContent("a", "q", [{"$type": "TextContent"}, "ü"]),
            c.ToolCallArgsProgressContent("a", "q", 2, "ü"),
            c.ToolCallEndContent("a"),
            c.ToolCallingContent("a", "f", {"q": "ü"}, raw_arguments='{"q": "ü"}'),
            c.ToolCallingContent("e", "f", None, raw_arguments="{", error="bad"),
            c.ToolCalledContent("a", result="done"),
            c.ToolCalledContent("e", error="failed"),
            c.UsageContent(Usage(1, 2, 3)),
            c.ErrorContent("oops"),
        ],
        events=[
            ResponseStartedEvent("r1", "m"),
            ToolApprovalRequestEvent("a", "f", {"q": 1}, "why"),
            FinishEvent(FinishReason.STOP, Usage(1, 2, 3)),
        ],
    ),
    AgentResponseResult(),
]


def expected(fixture: str) -> dict[str, Any]:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text(encoding="utf-8"))
    entry: dict[str, Any] = next(e for e in manifest if e["path"] == fixture)
    return entry["expected"]  # type: ignore[no-any-return]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ----------------------------------------------------------------- codec


@pytest.mark.parametrize("item", ALL_UPDATES + ALL_RESULTS + [None, 3, "text", [1, {"a": 2}]])
def test_every_item_round_trips_through_json(item: Any) -> None:
    kind, fields = encode_item(item)
    assert decode_item(kind, json.loads(json.dumps(fields))) == item
    assert type(decode_item(kind, fields)) is type(item)


def test_unknown_objects_are_kept_as_their_repr() -> None:
    kind, fields = encode_item(Path("a") / "b")
    assert (kind, decode_item(kind, fields)) == ("repr", repr(Path("a/b")))
    with pytest.raises(ValueError, match="unknown recorded item kind"):
        decode_item("Nonsense", {})


# ----------------------------------------------------------------- record / load / replay


def test_record_passes_items_through_and_replays_them_equal(tmp_path: Path) -> None:
    path = tmp_path / "updates.jsonl"
    seen = record(reactivex.from_iterable(ALL_UPDATES), path).pipe(rx.to_list()).run()
    assert seen == ALL_UPDATES
    rows = lines(path)
    assert rows[0]["kind"] == "header"
    assert rows[0]["fields"]["version"] == 1
    assert [r["kind"] for r in rows[1:-1]] == [type(x).__name__ for x in ALL_UPDATES]
    assert rows[-1]["kind"] == "completed"
    times = [r["t"] for r in rows]
    assert times == sorted(times)
    assert times[0] == 0.0
    assert load(path).items == ALL_UPDATES
    assert replay(path).pipe(rx.to_list()).run() == ALL_UPDATES


def test_record_of_results_and_the_aggregate_after_replay(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    source = reactivex.from_iterable(
        [u.TextDelta("Hel"), u.TextDelta("lo"), u.Finish(FinishReason.STOP, Usage(1, 2, 3))]
    ).pipe(convert())
    original = record(source, path).pipe(aggregate()).run()
    assert replay(path).pipe(aggregate()).run() == original
    assert original.text == "Hello"
    assert all(isinstance(x, AgentResponseResult) for x in load(path).items)


def test_an_error_replays_as_the_same_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "failed.jsonl"
    error = HTTPStatusError(429, body='{"error": "slow down"}', retry_after=2.0)
    stream = reactivex.concat(reactivex.of(u.TextDelta("x")), reactivex.throw(error))
    with pytest.raises(HTTPStatusError):
        record(stream, path).run()
    recording = load(path)
    assert recording.items == [u.TextDelta("x")]
    replayed = recording.error
    assert isinstance(replayed, HTTPStatusError)
    assert (replayed.status, replayed.body, replayed.retry_after) == (429, error.body, 2.0)
    assert str(replayed) == str(error)
    assert replayed.retryable
    seen: list[Any] = []
    errors: list[Exception] = []
    replay(path).subscribe(seen.append, errors.append)
    assert seen == [u.TextDelta("x")]
    assert len(errors) == 1
    assert type(errors[0]) is HTTPStatusError


def test_foreign_errors_replay_as_builtins_or_rafrx_errors(tmp_path: Path) -> None:
    from rafrx.errors import RafrxError

    class Weird(Exception):
        pass

    for error, expected in [(ValueError("v"), ValueError), (Weird("w"), RafrxError)]:
        path = tmp_path / "e.jsonl"
        with pytest.raises(type(error)):
            record(reactivex.throw(error), path).run()
        assert type(load(path).error) is expected
        assert "w" in str(load(path).error) or "v" in str(load(path).error)


def test_each_subscription_records_again_and_dispose_closes_the_file(tmp_path: Path) -> None:
    from reactivex.subject import Subject

    path = tmp_path / "live.jsonl"
    subject: Subject[Any] = Subject()
    recorded = record(subject, path)
    subscription = recorded.subscribe()
    subject.on_next(u.TextDelta("a"))
    subscription.dispose()
    subject.on_next(u.TextDelta("lost"))
    recording = load(path)
    assert recording.items == [u.TextDelta("a")]
    assert recording.end is None  # disposed: no terminal line
    recorded.subscribe()
    subject.on_next(u.TextDelta("b"))
    subject.on_completed()
    assert load(path).items == [u.TextDelta("b")]


def test_paced_replay_keeps_the_recorded_times_on_a_scheduler(tmp_path: Path) -> None:
    path = tmp_path / "paced.jsonl"
    rows = [
        {"t": 0.0, "kind": "header", "fields": {"version": 1}},
        {"t": 0.1, "kind": "TextDelta", "fields": {"delta": "a"}},
        {"t": 0.4, "kind": "TextDelta", "fields": {"delta": "b"}},
        {"t": 1.0, "kind": "completed"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    scheduler = TestScheduler()
    observer = scheduler.start(
        lambda: replay(path, pacing=True, speed=2.0),
        created=1.0,
        subscribed=10.0,
        disposed=10_000.0,
    )
    # TestScheduler ticks are seconds here: 0.1 s at speed 2 → 0.05 after subscribing.
    assert observer.messages == [
        ReactiveTest.on_next(10.05, u.TextDelta("a")),
        ReactiveTest.on_next(10.2, u.TextDelta("b")),
        ReactiveTest.on_completed(10.5),
    ]


@pytest.mark.asyncio
async def test_paced_replay_on_the_running_loop(tmp_path: Path) -> None:
    path = tmp_path / "loop.jsonl"
    times = [0.0, 0.05, 0.1]
    rows = [{"t": t, "kind": "TextDelta", "fields": {"delta": str(t)}} for t in times]
    rows.append({"t": 0.1, "kind": "completed"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    arrivals: list[float] = []
    done = asyncio.get_running_loop().create_future()
    start = time.monotonic()
    replay(path, pacing=True).subscribe(
        lambda _: arrivals.append(time.monotonic() - start),
        done.set_exception,
        lambda: done.set_result(None),
    )
    assert arrivals[:1] == [pytest.approx(0.0, abs=0.01)] or arrivals == []
    await asyncio.wait_for(done, 5)
    assert len(arrivals) == 3
    assert arrivals[2] >= 0.095
    assert arrivals[2] < 1.0


def test_fast_replay_is_synchronous_and_stops_when_disposed(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    record(reactivex.from_iterable([u.TextDelta(str(i)) for i in range(50)]), path).run()
    first = replay(path).pipe(rx.take(3), rx.to_list()).run()
    assert first == [u.TextDelta("0"), u.TextDelta("1"), u.TextDelta("2")]
    with pytest.raises(ValueError, match="speed"):
        replay(path, speed=0)


# ----------------------------------------------------------------- redaction


def test_redact_masks_keys_tokens_and_env_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_PROVIDER_API_KEY", "zz-secret-value-42")
    text = (
        f"key {KEY}, Authorization: Bearer abc.DEF-123_456, env zz-secret-value-42, "
        "url https://x.test/v1?key=AIzaSecret&alt=sse, AIzaSyA1234567890123456789012345678901"
    )
    out = redact(text)
    for secret in (KEY, "abc.DEF-123_456", "zz-secret-value-42", "AIzaSecret", "AIzaSyA123"):
        assert secret not in out
    assert "alt=sse" in out
    assert out.count("[REDACTED]") == 5
    assert redact("nothing to hide: sk-short") == "nothing to hide: sk-short"


def test_redact_headers_hides_credentials_only() -> None:
    headers = {"Authorization": f"Bearer {KEY}", "x-api-key": KEY, "Accept": "text/event-stream"}
    assert redact_headers(headers) == {
        "Authorization": "[REDACTED]",
        "x-api-key": "[REDACTED]",
        "Accept": "text/event-stream",
    }


def test_recordings_never_contain_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key-value-123456")
    path = tmp_path / "leaky.jsonl"
    leaky = [
        u.TextDelta(f"my key is {KEY}"),
        u.ToolCallStart("c", "login"),
        u.ToolCallArgs("c", '{"token": "env-key-value-123456"}'),
        u.Error("401: Bearer abcdefgh12345678 rejected"),
    ]
    error = HTTPStatusError(401, body=f"invalid key {KEY}")
    with pytest.raises(HTTPStatusError):
        record(
            reactivex.concat(reactivex.from_iterable(leaky), reactivex.throw(error)),
            path,
            secrets=["login"],
        ).run()
    text = path.read_text(encoding="utf-8")
    for secret in (KEY, "env-key-value-123456", "abcdefgh12345678", "login"):
        assert secret not in text
    assert text.count("[REDACTED]") == 5


# ----------------------------------------------------------------- raw SSE


async def _chunks(parts: list[bytes], pause: float = 0.0) -> AsyncIterator[bytes]:
    for part in parts:
        await asyncio.sleep(pause)
        yield part


@pytest.mark.asyncio
async def test_record_sse_keeps_bytes_and_chunk_timing(tmp_path: Path) -> None:
    parts = [b'data: {"a":', b' "' + KEY.encode() + b'"}\n', b"\n", b"data: [DONE]\n\n"]
    path = tmp_path / "raw.sse"
    passed = [chunk async for chunk in record_sse(_chunks(parts, 0.01), path, meta={"x": 1})]
    assert passed == parts  # the caller sees the real bytes
    saved = load_sse(path)
    assert [len(chunk) for _, chunk in saved.chunks] == [len(p) for p in parts]
    assert KEY.encode() not in path.read_bytes()
    assert b"*" * len(KEY) in path.read_bytes()  # masked in place: offsets stay valid
    times = [t for t, _ in saved.chunks]
    assert times == sorted(times)
    assert times[-1] >= 0.03
    assert saved.meta["x"] == 1
    assert saved.meta["end"] >= times[-1]
    assert timing_path(path).name == "raw.timing.json"


@pytest.mark.asyncio
async def test_record_sse_notes_the_error_and_still_writes(tmp_path: Path) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"
        raise StreamInterrupted("reset")

    path = tmp_path / "cut.sse"
    with pytest.raises(StreamInterrupted):
        async for _ in record_sse(broken(), path):
            pass
    saved = load_sse(path)
    assert saved.body == b"data: {}\n\n"
    assert saved.meta["error"] == "StreamInterrupted: reset"


@pytest.mark.asyncio
async def test_record_http_saves_the_response_and_redacts_the_request(tmp_path: Path) -> None:
    body = (FIXTURES / "anthropic" / "anthropic-text-padded.sse").read_bytes()
    seen_headers: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen_headers.append(request.headers.get("x-api-key", ""))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(0, len(body), 500):
            await response.write(body[i : i + 500])
            await asyncio.sleep(0.005)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/messages", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        path = tmp_path / "anthropic.sse"
        saved = await record_http(
            f"http://127.0.0.1:{port}/v1/messages?key={KEY}",
            path,
            json_body={"model": "claude", "stream": True},
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
            dialect="anthropic",
        )
    finally:
        await runner.cleanup()
    assert seen_headers == [KEY]  # the real request had the key
    assert saved.body == body == path.read_bytes()
    assert len(saved.chunks) >= 2
    timing = timing_path(path).read_text(encoding="utf-8")
    assert KEY not in timing
    meta = json.loads(timing)
    assert meta["request"]["headers"]["x-api-key"] == "[REDACTED]"
    assert meta["request"]["headers"]["anthropic-version"] == "2023-06-01"
    assert meta["request"]["url"].endswith("?key=[REDACTED]")
    assert meta["response"]["status"] == 200
    assert saved.dialect == "anthropic"
    response = replay(path, dialect="auto").pipe(convert(), aggregate()).run()
    assert response.text == expected("anthropic/anthropic-text-padded.sse")["text"]


def test_replay_of_a_fixture_without_timing(tmp_path: Path) -> None:
    fixture = FIXTURES / "openai-chat" / "openai-text.sse"
    wanted = expected("openai-chat/openai-text.sse")
    chunks = replay(fixture).pipe(rx.to_list()).run()
    assert b"".join(chunks) == fixture.read_bytes()
    response = replay(fixture, dialect="auto").pipe(convert(), aggregate()).run()
    assert response.text == wanted["text"]
    assert response.usage is not None
    assert response.usage.total_tokens == wanted["usage"]["total_tokens"]


@pytest.mark.asyncio
async def test_paced_sse_replay_decodes_on_the_loop(tmp_path: Path) -> None:
    parts = [
        b'data: {"choices": [{"delta": {"content": "He"}}]}\n\n',
        b'data: {"choices": [{"delta": {"content": "llo"}, "finish_reason": "stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    path = tmp_path / "paced.sse"
    async for _ in record_sse(_chunks(parts, 0.03), path, meta={"dialect": "openai-chat"}):
        pass
    from rafrx import collect_agent_response

    start = time.monotonic()
    stream = replay(path, pacing=True, speed=2.0, dialect="auto").pipe(convert())
    response = await collect_agent_response(stream)
    assert response.text == "Hello"
    assert time.monotonic() - start >= 0.04  # ~0.09 s recorded, at double speed


def test_replay_of_a_truncated_sse_fails_like_the_live_stream(tmp_path: Path) -> None:
    path = tmp_path / "cut.sse"
    path.write_bytes(b'data: {"choices": [{"delta": {"content": "He"}}]}\n\n')
    with pytest.raises(IncompleteStream):
        replay(path, dialect="openai-chat").pipe(convert(), aggregate()).run()


@pytest.mark.parametrize("folder", ["openai-chat", "anthropic", "openai-responses"])
def test_guess_dialect_recognises_every_fixture(folder: str) -> None:
    for fixture in sorted((FIXTURES / folder).glob("*.sse")):
        assert guess_dialect(fixture.read_bytes()) == folder, fixture.name


def test_the_bundled_samples_tell_the_same_turn_in_every_format() -> None:
    from rafrx.recorder import sample, samples

    assert samples() == ["demo-anthropic.sse", "demo-openai-chat.sse", "demo-openai-responses.sse"]
    responses = []
    for name in samples():
        saved = load_sse(sample(name))
        assert saved.dialect == name.removeprefix("demo-").removesuffix(".sse")
        assert len(saved.chunks) > 10
        assert 0.1 < saved.chunks[-1][0] < 5.0
        responses.append(replay(sample(name), dialect="auto").pipe(convert(), aggregate()).run())
    assert {r.text for r in responses} == {
        "Let me check the weather in Paris and save a note for you."
    }
    assert {r.finish_reason for r in responses} == {FinishReason.TOOL_CALLS}
    for response in responses:
        calls = [
            (c.name, c.arguments.get("city") or c.arguments["path"]) for c in response.tool_calls
        ]
        assert calls == [("get_weather", "Paris"), ("write_file", "paris.md")]
    with pytest.raises(FileNotFoundError, match="no sample named"):
        sample("nope.sse")
