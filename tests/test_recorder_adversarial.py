"""rafrx.recorder under hostile input: malformed, empty, binary and huge files, secrets, errors.

Everything here passes: it pins behaviour verified by hand. Bugs the same hunt found
are in ``tests/test_cli_found_bugs.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import reactivex
from reactivex import operators as rx

from rafrx import content as c
from rafrx import updates as u
from rafrx.errors import (
    HTTPStatusError,
    IncompleteStream,
    MalformedEvent,
    ProviderError,
    RafrxError,
)
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
    replay,
    sample,
    samples,
    timing_path,
)
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.testing import Fault, LLMServer, Reply

KEY = "sk-adv-0123456789abcdefghijklmnop"

# ----------------------------------------------------------------- helpers


def record_items(
    items: list[Any], path: Path, *, error: Exception | None = None, **kw: Any
) -> None:
    """Record ``items`` (then ``error``, if any) to ``path`` synchronously."""
    source = reactivex.from_iterable(items)
    if error is not None:
        source = reactivex.concat(source, reactivex.throw(error))
    seen: list[Exception] = []
    record(source, path, **kw).subscribe(on_error=seen.append)
    assert [type(e) for e in seen] == ([type(error)] if error is not None else [])


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


HEADER = '{"t":0,"kind":"header","fields":{"version":1}}'


def sse(*events: dict[str, Any], done: bool = True) -> bytes:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def chat_text(*parts: str, finish: str | None = "stop") -> bytes:
    events: list[dict[str, Any]] = [{"choices": [{"delta": {"content": p}}]} for p in parts]
    events.append({"choices": [{"delta": {}, "finish_reason": finish}]})
    return sse(*events)


async def agen(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        await asyncio.sleep(0)
        yield part


# ----------------------------------------------------------------- JSON lines: round trips


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain",
        "über 21 °C 東京 😀",
        "nul\x00 bell\x07 esc\x1b[31m cr\r lf\n tab\t",
        "line\u2028sep\u2029para",
        '{"not": "json-escaped"}',
        "x" * 200_000,
    ],
)
def test_any_text_round_trips_exactly(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.jsonl"
    items = [u.TextDelta(text), u.Finish(FinishReason.STOP)]
    record_items(items, path)
    assert load(path).items == items
    assert path.read_text(encoding="utf-8").count("\n") == 4  # header, 2 items, completed


def test_load_tolerates_blank_lines_crlf_and_a_missing_header(tmp_path: Path) -> None:
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(
        b"\r\n"
        b'{"t":0.5,"kind":"TextDelta","fields":{"delta":"a"}}\r\n'
        b"   \r\n"
        b'{"t":1,"kind":"completed"}\r\n'
    )
    recording = load(path)
    assert recording.items == [u.TextDelta("a")]
    assert recording.end == 1.0
    assert recording.error is None


@pytest.mark.parametrize(
    ("line", "number"),
    [
        ("not json at all", 2),
        ('{"t": 0, "kind": "TextDelta", "fields": {"delta": "cut', 2),  # a truncated write
        ("[1, 2]", 2),
        ("42", 2),
        ('"a string"', 2),
        ('{"kind": "TextDelta", "fields": {"delta": "no time"}}', 2),
        ('{"t": 0, "fields": {}}', 2),
        ('{"t": "soon", "kind": "completed"}', 2),
        ('{"t": 0, "kind": "Finish", "fields": {"finish_reason": "bogus"}}', 2),
    ],
)
def test_a_malformed_line_is_a_value_error_naming_file_and_line(
    tmp_path: Path, line: str, number: int
) -> None:
    path = write_lines(tmp_path / "bad.jsonl", HEADER, line)
    where = "is not a valid FinishReason" if "bogus" in line else "not a recorded item"
    with pytest.raises(ValueError, match=where) as raised:
        load(path)
    if "bogus" not in line:  # FinishReason's own ValueError does not say where
        assert f"bad.jsonl:{number}: not a recorded item" in str(raised.value)


def test_an_unknown_kind_is_a_value_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "k.jsonl", HEADER, '{"t": 0, "kind": "Teleport", "fields": {}}')
    with pytest.raises(ValueError, match="unknown recorded item kind 'Teleport'"):
        load(path)


def test_binary_and_bom_files_are_value_errors(tmp_path: Path) -> None:
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(ValueError, match="codec can't decode"):
        load(binary)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + HEADER.encode() + b"\n")
    with pytest.raises(ValueError, match=r"bom\.jsonl:1"):
        load(bom)


def test_an_empty_file_loads_as_an_empty_unfinished_recording(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    recording = load(path)
    assert (recording.entries, recording.end, recording.error) == ((), None, None)


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError):
        replay(tmp_path / "nope.sse")


def test_value_and_repr_kinds_decode_to_plain_values() -> None:
    assert decode_item("value", {"value": {"a": [1, None, True]}}) == {"a": [1, None, True]}
    assert decode_item("value", {}) is None
    assert decode_item("repr", {"repr": "<object>"}) == "<object>"
    assert decode_item("repr", {}) == ""
    assert encode_item(b"\x00\xff") == ("repr", {"repr": "b'\\x00\\xff'"})


# ----------------------------------------------------------------- recorded errors


def test_a_recorded_http_error_replays_typed_with_status_body_and_the_partial(
    tmp_path: Path,
) -> None:
    path = tmp_path / "err.jsonl"
    error = HTTPStatusError(503, body='{"error": "overloaded"}', provider_message="overloaded")
    turn = [u.ResponseMetadata("r1", "m"), u.TextDelta("Half "), u.TextDelta("an answer")]
    record_items(turn, path, error=error)
    recording = load(path)
    assert isinstance(recording.error, HTTPStatusError)
    assert recording.error.status == 503
    assert recording.error.body == '{"error": "overloaded"}'
    assert recording.error.provider_message == "overloaded"
    assert recording.error.retryable is True
    with pytest.raises(HTTPStatusError) as raised:
        replay(path).pipe(convert(), aggregate()).run()
    assert raised.value.partial is not None
    assert raised.value.partial.text == "Half an answer"
    assert raised.value.partial.model == "m"
    contents = replay(path).pipe(convert(), rx.to_list()).pipe(rx.catch(reactivex.of([])))
    assert contents.run() == []  # the error ends it, as live


def test_the_error_content_before_a_recorded_error_replays_too(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    live = reactivex.concat(
        reactivex.from_iterable([u.TextDelta("partial")]),
        reactivex.throw(ProviderError("overloaded", error_type="overloaded_error")),
    ).pipe(convert())
    record(live, path).subscribe(on_error=lambda _: None)
    results = load(path).items
    assert all(isinstance(r, AgentResponseResult) for r in results)
    kinds = [type(x) for r in results for x in r.contents]
    assert kinds[0] is c.TextContent
    assert c.ErrorContent in kinds
    assert isinstance(load(path).error, ProviderError)
    assert load(path).error.error_type == "overloaded_error"  # type: ignore[union-attr]


def test_error_attributes_holding_secrets_are_redacted(tmp_path: Path) -> None:
    path = tmp_path / "leak.jsonl"
    error = MalformedEvent(
        f"bad event from ?key={KEY}", raw=f'{{"echo": "Bearer {KEY}"}}', event_name=KEY
    )
    record_items([u.TextDelta("x")], path, error=error)
    text = path.read_text(encoding="utf-8")
    assert KEY not in text
    replayed = load(path).error
    assert isinstance(replayed, MalformedEvent)
    assert KEY not in replayed.raw
    assert KEY not in str(replayed)
    assert replayed.event_name == "[REDACTED]"


def test_env_secrets_are_redacted_everywhere_in_a_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok-env-secret-value-9876"
    monkeypatch.setenv("MY_SERVICE_TOKEN", token)
    monkeypatch.setenv("SHORT_TOKEN", "abc")  # too short to be worth redacting
    path = tmp_path / "env.jsonl"
    items = [
        u.ToolApprovalRequest("c1", "deploy", {"headers": {"X-Token": token}}, f"uses {token}"),
        u.ReasoningDelta("hmm", provider_data={"signature": token}),
        u.TextDelta("abc stays"),
    ]
    record_items(items, path, error=RafrxError(f"rejected {token}", body=token))
    text = path.read_text(encoding="utf-8")
    assert token not in text
    assert text.count("[REDACTED]") == 5
    assert "abc stays" in text


def test_a_foreign_error_without_a_message_replays(tmp_path: Path) -> None:
    path = tmp_path / "foreign.jsonl"
    record_items([u.TextDelta("a")], path, error=KeyError())
    error = load(path).error
    assert isinstance(error, KeyError)
    path = write_lines(
        tmp_path / "odd.jsonl",
        HEADER,
        '{"t": 1, "kind": "error", "fields": {"type": "NoSuchError", "message": "gone"}}',
    )
    error = load(path).error
    assert type(error) is RafrxError
    assert str(error) == "NoSuchError: gone"


# ----------------------------------------------------------------- replay


def test_speed_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    record_items([u.TextDelta("a")], path)
    for speed in (0.0, -1.0):
        with pytest.raises(ValueError, match="speed must be > 0"):
            replay(path, pacing=True, speed=speed)


def test_an_unfinished_recording_replays_everything_it_holds_then_fails(tmp_path: Path) -> None:
    """No completed or error line (the recording was cut short): everything, then an error."""
    path = write_lines(
        tmp_path / "cut.jsonl",
        HEADER,
        '{"t": 0.1, "kind": "TextDelta", "fields": {"delta": "kept"}}',
    )
    items: list[Any] = []
    errors: list[Exception] = []
    replay(path).subscribe(items.append, errors.append)
    assert items == [u.TextDelta("kept")]
    assert [type(e) for e in errors] == [IncompleteStream]


@pytest.mark.asyncio
async def test_paced_jsonl_replay_keeps_order_then_fails_with_the_recorded_error(
    tmp_path: Path,
) -> None:
    path = write_lines(
        tmp_path / "paced.jsonl",
        HEADER,
        '{"t": 0.04, "kind": "TextDelta", "fields": {"delta": "a"}}',
        '{"t": 0.02, "kind": "TextDelta", "fields": {"delta": "b"}}',  # out of order: no wait
        '{"t": 0.06, "kind": "error", "fields": {"type": "IncompleteStream", "message": "cut"}}',
    )
    loop = asyncio.get_running_loop()
    done: asyncio.Future[list[Any]] = loop.create_future()
    seen: list[Any] = []
    start = loop.time()
    replay(path, pacing=True, speed=2.0).subscribe(
        on_next=seen.append,
        on_error=lambda e: done.set_result([*seen, e]),
        on_completed=lambda: done.set_result(seen),
    )
    out = await asyncio.wait_for(done, 5)
    assert out[:2] == [u.TextDelta("a"), u.TextDelta("b")]
    assert isinstance(out[2], IncompleteStream)
    assert loop.time() - start >= 0.025


@pytest.mark.asyncio
async def test_disposing_a_paced_replay_stops_it(tmp_path: Path) -> None:
    lines = [
        f'{{"t": {i * 0.01}, "kind": "TextDelta", "fields": {{"delta": "{i}"}}}}' for i in range(20)
    ]
    path = write_lines(tmp_path / "long.jsonl", HEADER, *lines)
    seen: list[Any] = []
    ended: list[str] = []
    subscription = replay(path, pacing=True).subscribe(
        on_next=seen.append,
        on_error=lambda _: ended.append("error"),
        on_completed=lambda: ended.append("completed"),
    )
    await asyncio.sleep(0.045)
    subscription.dispose()
    count = len(seen)
    await asyncio.sleep(0.2)
    assert 1 <= count < 20
    assert len(seen) == count
    assert ended == []
    subscription.dispose()  # twice: a no-op


# ----------------------------------------------------------------- raw SSE


@pytest.mark.asyncio
async def test_a_key_split_across_chunks_is_masked_in_place(tmp_path: Path) -> None:
    body = b'data: {"echo": "' + KEY.encode() + b'"}\n\ndata: [DONE]\n\n'
    cut = body.index(KEY.encode()) + 7
    parts = [body[:cut], body[cut : cut + 5], body[cut + 5 :]]
    path = tmp_path / "split.sse"
    passed = [chunk async for chunk in record_sse(agen(parts), path)]
    assert passed == parts
    saved = path.read_bytes()
    assert KEY.encode() not in saved
    assert len(saved) == len(body)
    assert [len(chunk) for _, chunk in load_sse(path).chunks] == [len(p) for p in parts]


@pytest.mark.asyncio
async def test_masking_keeps_offsets_around_multibyte_text(tmp_path: Path) -> None:
    body = chat_text("東京 😀 ", f"Bearer {KEY} ", "über")
    parts = [body[i : i + 7] for i in range(0, len(body), 7)]  # splits code points too
    path = tmp_path / "mb.sse"
    async for _ in record_sse(agen(parts), path, secrets=["über"]):
        pass
    saved = load_sse(path)
    assert len(saved.body) == len(body)
    assert KEY.encode() not in saved.body
    assert "über".encode() not in saved.body
    text = replay(path, dialect="openai-chat").pipe(convert(), aggregate()).run().text
    assert text.startswith("東京 😀 Bearer ")
    assert KEY not in text


@pytest.mark.asyncio
async def test_record_http_hides_bearer_tokens_and_query_keys(tmp_path: Path) -> None:
    async with LLMServer() as server:
        server.enqueue(Reply(text="recorded answer", chunk_size=4))
        path = tmp_path / "live.sse"
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        saved = await record_http(
            f"{server.url}/v1/chat/completions?api_key={KEY}&x=1",
            path,
            json_body=body,
            headers={"Authorization": f"Bearer {KEY}", "X-Trace": "visible"},
            dialect="openai-chat",
        )
        sent = server.requests[0].headers["authorization"]
    assert sent == "Bearer ***"  # the key went out (the server hides it)
    timing = timing_path(path).read_text(encoding="utf-8")
    assert KEY not in timing
    assert KEY.encode() not in path.read_bytes()
    meta = json.loads(timing)
    assert meta["request"]["headers"] == {"Authorization": "[REDACTED]", "X-Trace": "visible"}
    assert meta["request"]["url"].endswith("?api_key=[REDACTED]&x=1")
    assert sum(size for _, size in meta["chunks"]) == len(saved.body)
    response = replay(path, dialect="auto").pipe(convert(), aggregate()).run()
    assert response.text == "recorded answer"


@pytest.mark.asyncio
async def test_record_http_of_a_dropped_stream_keeps_what_arrived(tmp_path: Path) -> None:
    async with LLMServer() as server:
        server.enqueue(Fault.drop_after(900, body=Reply(text="cut " * 100, chunk_size=4)))
        path = tmp_path / "drop.sse"
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        failed = False
        try:  # the type is aiohttp's (see test_cli_found_bugs.py), so catch broadly
            await record_http(f"{server.url}/v1/chat/completions", path, json_body=body)
        except Exception:
            failed = True
    assert failed
    saved = load_sse(path)
    assert 0 < len(saved.body) <= 900
    assert "error" in saved.meta
    with pytest.raises(IncompleteStream) as raised:
        replay(path, dialect="auto").pipe(convert(), aggregate()).run()
    assert raised.value.partial is not None
    assert raised.value.partial.text.startswith("cut ")


def test_load_sse_without_timing_is_one_chunk_and_extra_bytes_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "plain.sse"
    body = chat_text("Hello")
    path.write_bytes(body)
    assert load_sse(path).chunks == ((0.0, body),)
    timing_path(path).write_text('{"chunks": [[0.5, 10]], "dialect": null}', encoding="utf-8")
    saved = load_sse(path)
    assert [len(c) for _, c in saved.chunks] == [10, len(body) - 10]
    assert saved.chunks[1][0] == 0.5  # the leftover bytes arrive with the last chunk
    assert saved.body == body
    assert saved.dialect == "openai-chat"


def test_empty_and_binary_sse_bodies_fail_typed(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sse"
    empty.write_bytes(b"")
    assert replay(empty).pipe(rx.to_list()).run() == [b""]
    with pytest.raises(IncompleteStream):
        replay(empty, dialect="auto").pipe(convert(), aggregate()).run()
    binary = tmp_path / "binary.sse"
    binary.write_bytes(bytes(b for b in range(256) if b not in b"\r\n") * 50)
    with pytest.raises(RafrxError):
        replay(binary, dialect="auto").pipe(convert(), aggregate()).run()


def test_a_huge_data_line_replays_whole(tmp_path: Path) -> None:
    path = tmp_path / "huge.sse"
    big = "y" * (3 * 1024 * 1024)
    path.write_bytes(chat_text(big, "!"))
    assert replay(path, dialect="auto").pipe(convert(), aggregate()).run().text == big + "!"


def test_auto_prefers_the_recorded_dialect_over_the_guess(tmp_path: Path) -> None:
    path = tmp_path / "mention.sse"
    body = chat_text("Anthropic streams begin with message_start.")
    path.write_bytes(body)
    timing_path(path).write_text(
        json.dumps({"dialect": "openai-chat", "chunks": [[0, len(body)]]}), encoding="utf-8"
    )
    response = replay(path, dialect="auto").pipe(convert(), aggregate()).run()
    assert response.text == "Anthropic streams begin with message_start."


@pytest.mark.parametrize(
    ("body", "dialect"),
    [
        (b": keep-alive\r\n\r\nevent: message_start\r\ndata: {}\r\n\r\n", "anthropic"),
        (b"\xef\xbb\xbfevent: response.created\ndata: {}\n\n", "openai-responses"),
        (b'data: {"type":"response.created"}\n\n', "openai-responses"),
        (b"", "openai-chat"),
        (b"\x00\xff\xfe garbage", "openai-chat"),
    ],
)
def test_guess_dialect_on_odd_bodies(body: bytes, dialect: str) -> None:
    assert guess_dialect(body) == dialect


# ----------------------------------------------------------------- samples and redact


@pytest.mark.parametrize("name", samples())
def test_each_sample_has_consistent_timing(name: str) -> None:
    path = sample(name)
    meta = json.loads(timing_path(path).read_text(encoding="utf-8"))
    sizes = [size for _, size in meta["chunks"]]
    assert sum(sizes) == path.stat().st_size
    assert all(size > 0 for size in sizes)
    times = [t for t, _ in meta["chunks"]]
    assert times == sorted(times)
    assert meta["end"] >= times[-1]
    text = path.read_text(encoding="utf-8") + json.dumps(meta)
    assert "sk-" not in text
    assert "Bearer" not in text


@pytest.mark.asyncio
@pytest.mark.parametrize("name", samples())
async def test_each_sample_replays_paced_on_the_loop(name: str) -> None:
    from rafrx import collect_agent_response

    stream = replay(sample(name), pacing=True, speed=50.0, dialect="auto").pipe(convert())
    response = await asyncio.wait_for(collect_agent_response(stream), 5)
    assert [call.name for call in response.tool_calls] == ["get_weather", "write_file"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("no secrets here", "no secrets here"),
        (f"{KEY}{KEY}", "[REDACTED]"),  # overlapping matches collapse to one
        (f"Bearer {KEY}", "Bearer [REDACTED]"),
        ("GET /v1?key=abc&token=def#frag", "GET /v1?key=[REDACTED]&token=[REDACTED]#frag"),
    ],
)
def test_redact_edge_cases(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(redact(text)) == redact(text)  # idempotent
