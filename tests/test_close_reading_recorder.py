"""The recorder, its redaction and the test server, read line by line.

The angle is a code reviewer's, not a user's. For each branch of
``rafrx/recorder.py``, ``rafrx/_redaction.py`` and ``rafrx/testing/`` ask which
input reaches it and whether the result is right:

* the item codec's tags (``$float``, ``$dict``, ``$type``), lone surrogates, the
  numbers and mapping keys that hold a secret, the error line;
* redaction at a delta's end: a key parameter whose name or value the stream
  splits, at every split point;
* raw ``.sse`` recordings: byte-exact bodies (CRLF, BOM, a trailing half event,
  split code points), chunk sizes kept by masking, timing files that lie;
* ``record_http``: what goes into the timing file (request and response headers,
  URL user info, a redirect's ``Location``) and what it raises;
* the scripted server's faults, which must strike at the byte they name over a
  real socket, and its request records.

HTTP goes over real aiohttp on 127.0.0.1 through ``rafrx.testing.LLMServer``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import reactivex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rxops

from rafrx import FinishReason
from rafrx import updates as u
from rafrx.errors import (
    HTTPStatusError,
    IncompleteStream,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.recorder import (
    decode_item,
    encode_item,
    guess_dialect,
    load,
    load_sse,
    record,
    record_http,
    record_sse,
    replay,
    timing_path,
)
from rafrx.testing import Fault, LLMServer, RecordedRequest, Replay, Reply, render

SECRET = "c0ffee1234deadbeef5678"  # matches no built-in pattern: found by position only
KEY = "sk-proj-0123456789abcdefXYZ"  # found by the built-in sk-... pattern
REDACTED = "[REDACTED]"
CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}

FAST = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def round_trip(tmp_path: Path, items: Iterable[Any], *, secrets: Iterable[str] = ()) -> list[Any]:
    path = tmp_path / "turn.jsonl"
    record(reactivex.from_iterable(list(items)), path, secrets=secrets).run()
    return replay(path).pipe(rxops.to_list()).run()


def text_of(items: Iterable[Any]) -> str:
    return "".join(i.delta for i in items if isinstance(i, u.TextDelta))


async def agen(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def fetch(server: LLMServer, path: str = "/v1/chat/completions") -> tuple[bytes, bool]:
    """The raw body a client reads, and whether the body broke off."""
    received = bytearray()
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.url + path, json=CHAT) as response,
    ):
        try:
            async for chunk in response.content.iter_any():
                received += chunk
        except aiohttp.ClientPayloadError:
            return bytes(received), True
    return bytes(received), False


# ================================================================ the item codec


def test_non_finite_floats_in_provider_data_replay_as_themselves(tmp_path: Path) -> None:
    data = {"score": math.inf, "low": -math.inf, "note": "x"}
    (item,) = round_trip(tmp_path, [u.ReasoningDelta("", provider_data=data)])
    assert item.provider_data == {"score": math.inf, "low": -math.inf, "note": "x"}
    kind, fields = encode_item(u.ReasoningDelta("", provider_data={"v": math.nan}))
    value = decode_item(kind, fields).provider_data["v"]
    assert math.isnan(value)


def test_mappings_holding_a_tag_key_replay_as_plain_mappings(tmp_path: Path) -> None:
    data = {"$type": "TextContent", "$repr": "no", "$dict": {"$float": "inf"}}
    (item,) = round_trip(tmp_path, [u.ReasoningDelta("", provider_data=data)])
    assert item.provider_data == data


def test_a_lone_surrogate_replays_as_written(tmp_path: Path) -> None:
    items = [u.TextDelta("half \ud83d"), u.TextDelta("\ude00 emoji"), u.Finish(FinishReason.STOP)]
    assert round_trip(tmp_path, items) == items


def test_a_secret_given_as_a_number_or_a_key_is_redacted(tmp_path: Path) -> None:
    data = {"pin": 48151623, SECRET: "as a key", "nested": [SECRET]}
    (item,) = round_trip(
        tmp_path, [u.ReasoningDelta("", provider_data=data)], secrets=["48151623", SECRET]
    )
    assert item.provider_data == {"pin": REDACTED, REDACTED: "as a key", "nested": [REDACTED]}
    text = (tmp_path / "turn.jsonl").read_text(encoding="utf-8")
    assert SECRET not in text
    assert "48151623" not in text


def test_a_recorded_error_with_every_attribute_set_replays_them(tmp_path: Path) -> None:
    error = HTTPStatusError(
        429,
        body='{"error": "slow"}',
        provider_message="slow",
        error_type="rate_limit_error",
        code="rate_limit_exceeded",
        retry_after=1.5,
        request_id="req_1",
    )
    path = tmp_path / "turn.jsonl"
    with pytest.raises(HTTPStatusError):
        record(reactivex.throw(error), path).run()
    replayed = load(path).error
    assert type(replayed) is HTTPStatusError
    assert str(replayed) == "HTTP 429: slow"
    for name in ("status", "body", "provider_message", "error_type", "code", "retry_after"):
        assert getattr(replayed, name) == getattr(error, name), name
    assert replayed.request_id == "req_1"
    assert replayed.retryable is True


def test_an_error_whose_str_fails_is_recorded_by_its_type(tmp_path: Path) -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError

    path = tmp_path / "turn.jsonl"
    with pytest.raises(Odd):
        record(reactivex.throw(Odd()), path).run()
    replayed = load(path).error
    assert isinstance(replayed, RafrxError)
    assert str(replayed) == "Odd: <Odd: str() failed>"


def test_a_secret_in_an_error_attribute_and_message_is_redacted(tmp_path: Path) -> None:
    error = TransportError(f"refused for {KEY}", body=f"echo {SECRET}")
    path = tmp_path / "turn.jsonl"
    with pytest.raises(TransportError):
        record(reactivex.throw(error), path, secrets=[SECRET]).run()
    text = path.read_text(encoding="utf-8")
    assert KEY not in text
    assert SECRET not in text
    assert str(load(path).error) == f"refused for {REDACTED}"


def test_each_subscription_records_afresh(tmp_path: Path) -> None:
    path = tmp_path / "turn.jsonl"
    source = record(reactivex.from_iterable([u.TextDelta("a")]), path)
    source.run()
    source.run()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["header", "TextDelta", "completed"]


def test_a_disposed_recording_has_no_end_and_replays_as_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "turn.jsonl"
    subject: reactivex.subject.Subject[Any] = reactivex.subject.Subject()
    subscription = record(subject, path, secrets=[SECRET]).subscribe()
    subject.on_next(u.TextDelta("partial "))
    subject.on_next(u.TextDelta(SECRET[:8]))  # a stream stopped inside a secret
    subscription.dispose()
    recording = load(path)
    assert recording.end is None
    assert text_of(recording.items) == f"partial {REDACTED}"
    with pytest.raises(IncompleteStream):
        replay(path).pipe(rxops.to_list()).run()


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"t": -1, "kind": "TextDelta", "fields": {"delta": "x"}}', "time"),
        ('{"t": 0, "kind": "TextDelta", "fields": {"nope": "x"}}', "nope"),
        ('{"t": 0, "kind": "value", "fields": {"value": {"$type": "Nope"}}}', "Nope"),
        ('{"t": 0, "kind": "Finish", "fields": {"finish_reason": "bogus"}}', "bogus"),
        ('["a list"]', "not a recorded item"),
    ],
)
def test_a_line_record_did_not_write_is_a_value_error_naming_it(
    tmp_path: Path, line: str, why: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"t": 0, "kind": "header"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"bad\.jsonl:2: .*{why}"):
        load(path)


# ================================================================ redaction at a delta's end


@pytest.mark.parametrize(
    "text",
    [
        f"see https://h/v1?key={SECRET}&alt=sse ok",
        f"see https://h/v1?x=1&api_key={SECRET} ok",
        f"see https://h/v1?a=b&apiKey={SECRET} ok",
        f"see https://h/v1?access_token={SECRET} ok",
        f"see https://h/v1?a=b&TOKEN={SECRET} ok",
        f"Authorization: Bearer {SECRET} ok",
        f"Authorization: bearer\t{SECRET} ok",
        f"my key {KEY} ok",
    ],
)
def test_a_key_split_at_any_point_is_redacted(tmp_path: Path, text: str) -> None:
    for cut in range(1, len(text)):
        items = [u.TextDelta(text[:cut]), u.TextDelta(text[cut:]), u.Finish(FinishReason.STOP)]
        got = text_of(round_trip(tmp_path, items))
        assert SECRET not in got, (cut, got)
        assert KEY not in got, (cut, got)
        assert REDACTED in got


@FAST
@given(cuts=st.lists(st.integers(1, 60), min_size=1, max_size=6, unique=True))
def test_a_user_secret_split_into_many_deltas_is_redacted_once(
    tmp_path: Path, cuts: list[int]
) -> None:
    text = f"the code is {SECRET}, keep it safe"
    bounds = [0, *sorted(c % len(text) or 1 for c in cuts), len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    items = [*map(u.TextDelta, pieces), u.Finish(FinishReason.STOP)]
    got = round_trip(tmp_path, items, secrets=[SECRET])
    assert text_of(got) == f"the code is {REDACTED}, keep it safe"
    assert len([i for i in got if isinstance(i, u.TextDelta)]) == len(pieces)


def test_text_that_only_looks_like_a_key_start_is_kept_when_the_call_stops(
    tmp_path: Path,
) -> None:
    items = [u.TextDelta("ask me about sk-"), u.Finish(FinishReason.STOP)]
    assert text_of(round_trip(tmp_path, items)) == "ask me about sk-"


# ================================================================ raw .sse files


BYTE_EDGES = (
    "\ufeffdata: {}\r\n\r\n".encode()  # a BOM and CRLF endings
    + 'data: {"t": "東京"}\r\r'.encode()  # CR endings, multibyte text
    + b"data: [DONE]\n\n"
    + b"data: {tail"  # a half event at the end
)


@pytest.mark.asyncio
@FAST
@given(cuts=st.lists(st.integers(1, len(BYTE_EDGES) - 1), max_size=8, unique=True))
async def test_record_sse_keeps_the_exact_bytes_and_chunks(tmp_path: Path, cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(BYTE_EDGES)]
    parts = [BYTE_EDGES[a:b] for a, b in itertools.pairwise(bounds)]
    path = tmp_path / "edges.sse"
    passed = [chunk async for chunk in record_sse(agen(parts), path)]
    assert passed == parts
    assert path.read_bytes() == BYTE_EDGES
    assert [chunk for _, chunk in load_sse(path).chunks] == parts
    assert replay(path).pipe(rxops.to_list()).run() == parts


@pytest.mark.asyncio
async def test_record_sse_masks_escaped_secrets_keeping_every_offset(tmp_path: Path) -> None:
    secret = "pass/wörd-12345"
    escaped = json.dumps(secret)[1:-1].replace("/", "\\/")  # PHP-style and \\u00f6
    body = f'data: {{"a": "{escaped}", "b": "{KEY}"}}\n\n'.encode()
    parts = [body[:20], body[20:41], body[41:]]
    path = tmp_path / "masked.sse"
    async for _ in record_sse(agen(parts), path, secrets=[secret]):
        pass
    saved = load_sse(path)
    assert [len(c) for _, c in saved.chunks] == [len(p) for p in parts]
    assert escaped.encode() not in saved.body
    assert KEY.encode() not in saved.body
    assert saved.body.startswith(b'data: {"a": "*')
    assert saved.body.endswith(b'"}\n\n')


@pytest.mark.asyncio
async def test_record_sse_writes_the_error_and_re_raises(tmp_path: Path) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"
        raise ConnectionResetError(f"reset while sending {KEY}")

    path = tmp_path / "broken.sse"
    with pytest.raises(ConnectionResetError):
        async for _ in record_sse(broken(), path):
            pass
    saved = load_sse(path)
    assert saved.body == b"data: {}\n\n"
    assert saved.meta["error"] == f"ConnectionResetError: reset while sending {REDACTED}"
    assert saved.meta["end"] >= 0


def test_load_sse_rejects_timing_rows_that_are_no_times_or_sizes(tmp_path: Path) -> None:
    path = tmp_path / "t.sse"
    path.write_bytes(b"data: {}\n\n")
    for rows in ("[[0, -1]]", "[[-0.5, 3]]", '[["x", 3]]', "[[0, 1, 2]]", "7"):
        timing_path(path).write_text(f'{{"chunks": {rows}}}', encoding="utf-8")
        with pytest.raises(ValueError, match="not a timing file"):
            load_sse(path)


def test_timing_path_sits_next_to_any_file_name() -> None:
    assert timing_path("a/turn.sse").as_posix() == "a/turn.timing.json"
    assert timing_path("a/turn.txt").as_posix() == "a/turn.txt.timing.json"
    assert timing_path("a/turn").as_posix() == "a/turn.timing.json"


@pytest.mark.parametrize(
    ("body", "dialect"),
    [
        (render(Reply(text="Hi"), "openai-chat"), "openai-chat"),
        (render(Reply(text="Hi"), "anthropic"), "anthropic"),
        (render(Reply(text="Hi"), "openai-responses"), "openai-responses"),
        (render(Reply(text="Hi"), "anthropic").replace(b"\n", b"\r\n"), "anthropic"),
        (b'data: {"type": "response.created", "response": {}}\n\n', "openai-responses"),
        (b'data: {"type": "message_start", "message": {}}\n\n', "anthropic"),
        (b": keep-alive\n\ndata: [DONE]\n\n", "openai-chat"),
    ],
)
def test_guess_dialect_reads_event_names_and_types(body: bytes, dialect: str) -> None:
    assert guess_dialect(body) == dialect


# ================================================================ record_http


@pytest.mark.asyncio
async def test_record_http_saves_the_servers_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "live.sse"
    async with LLMServer() as server:
        server.enqueue(Replay(BYTE_EDGES, chunk_size=7))
        saved = await record_http(server.url + "/v1/chat/completions", path, json_body=CHAT)
    assert saved.body == BYTE_EDGES == path.read_bytes()
    assert saved.meta["response"]["status"] == 200
    assert saved.meta["response"]["headers"]["Content-Type"].startswith("text/event-stream")


@pytest.mark.asyncio
async def test_record_http_keeps_every_credential_out_of_both_files(tmp_path: Path) -> None:
    path = tmp_path / "live.sse"
    async with LLMServer() as server:
        # the server echoes the key in its answer, as a proxy's error page may
        server.enqueue(Reply(text=f"you sent {SECRET} and {KEY}", chunk_size=5))
        url = server.url.replace("http://", f"http://me:{SECRET}@")
        await record_http(
            url + "/v1/chat/completions?key=q-secret-1&alt=sse",
            path,
            json_body=CHAT,
            headers={
                "X-Portkey-Api-Key": KEY,
                "Proxy-Authorization": "Basic bWU6cHc=",
                "X-Title": "visible",
            },
        )
        sent = server.requests[0]
    assert sent.headers["Authorization"].startswith("Basic ")  # aiohttp sent the user info
    assert sent.query["key"] == "***"
    both = path.read_bytes().decode() + timing_path(path).read_text(encoding="utf-8")
    for secret in (SECRET, KEY, "q-secret-1", "bWU6cHc="):
        assert secret not in both, secret
    meta = json.loads(timing_path(path).read_text(encoding="utf-8"))
    assert meta["request"]["headers"] == {
        "X-Portkey-Api-Key": REDACTED,
        "Proxy-Authorization": REDACTED,
        "X-Title": "visible",
    }
    assert meta["request"]["url"].endswith("/v1/chat/completions?key=[REDACTED]&alt=sse")
    assert "me:[REDACTED]@" in meta["request"]["url"]


@pytest.mark.asyncio
async def test_record_http_records_a_redirect_without_following_it(tmp_path: Path) -> None:
    path = tmp_path / "redirect.sse"
    async with LLMServer() as server:
        target = f"{server.url}/v1/chat/completions?key={SECRET}"
        server.enqueue(Fault.status(307, headers={"Location": target}))
        saved = await record_http(server.url + "/v1/chat/completions", path, json_body=CHAT)
        assert server.request_count == 1
    assert saved.meta["response"]["status"] == 307
    assert saved.meta["response"]["headers"]["Location"].endswith(f"?key={REDACTED}")
    assert SECRET not in timing_path(path).read_text(encoding="utf-8")


@pytest.mark.asyncio
async def test_record_http_of_a_reset_stream_is_stream_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "reset.sse"
    body = render(Reply(text="word " * 50, chunk_size=3), "openai-chat")
    async with LLMServer() as server:
        server.enqueue(Fault.drop_after(400, body=Replay(body, chunk_size=100)))
        with pytest.raises(StreamInterrupted, match="what came is saved"):
            await record_http(server.url + "/v1/chat/completions", path, json_body=CHAT)
    saved = load_sse(path)
    assert saved.body == body[:400]
    assert "error" in saved.meta


@pytest.mark.asyncio
async def test_record_http_to_a_closed_port_is_a_transport_error_without_the_key(
    tmp_path: Path,
) -> None:
    async with LLMServer() as server:
        url = f"{server.url}/v1/chat/completions?api_key={SECRET}"
    with pytest.raises(TransportError) as raised:
        await record_http(url, tmp_path / "none.sse", json_body=CHAT, timeout=5)
    assert SECRET not in str(raised.value)
    assert f"api_key={REDACTED}" in str(raised.value)


# ================================================================ the scripted server's faults


BODY = render(Reply(text="The quick brown fox jumps over the lazy dog.", chunk_size=4), "anthropic")


@pytest.mark.asyncio
@pytest.mark.parametrize("at", [0, 1, 57, len(BODY) // 2, len(BODY) - 1])
async def test_drop_after_sends_exactly_that_many_bytes(at: int) -> None:
    async with LLMServer() as server:
        server.enqueue(Fault.drop_after(at, body=Replay(BODY, chunk_size=33)))
        received, broke = await fetch(server, "/v1/messages")
        await server.wait_connections_closed()
    assert received == BODY[:at]
    assert broke


@pytest.mark.asyncio
@pytest.mark.parametrize("at", [0, 5, 200])
async def test_garbage_goes_in_at_its_byte_offset(at: int) -> None:
    async with LLMServer() as server:
        server.enqueue(Fault.garbage(b"\xff\xfe not json", at=at, body=Replay(BODY, chunk_size=50)))
        received, broke = await fetch(server, "/v1/messages")
    assert received == BODY[:at] + b"data: \xff\xfe not json\n\n" + BODY[at:]
    assert not broke


@pytest.mark.asyncio
async def test_garbage_by_default_follows_the_first_event_even_with_crlf() -> None:
    body = BODY.replace(b"\n", b"\r\n")
    first = body.index(b"\r\n\r\n") + 4
    async with LLMServer() as server:
        server.enqueue(Fault.garbage(b"junk", body=Replay(body)))
        received, _ = await fetch(server, "/v1/messages")
    assert received == body[:first] + b"data: junk\n\n" + body[first:]


@pytest.mark.asyncio
async def test_a_stall_mid_body_loses_no_byte() -> None:
    async with LLMServer() as server:
        server.enqueue(Fault.stall(0.05, after_bytes=101, body=Replay(BODY, chunk_size=40)))
        received, broke = await fetch(server, "/v1/messages")
    assert received == BODY
    assert not broke


@pytest.mark.asyncio
async def test_paced_replay_serves_every_line_ending_whole() -> None:
    body = b"data: 1\r\n\r\ndata: 2\r\rdata: 3\n\r\ndata: 4\n\ndata: tail"
    async with LLMServer() as server:
        server.enqueue(Replay(body, pacing=True, delay=0.001))
        received, broke = await fetch(server)
    assert received == body
    assert not broke


@pytest.mark.asyncio
async def test_a_status_fault_takes_headers_case_insensitively() -> None:
    fault = Fault.status(
        429,
        body="",
        retry_after=1.5,
        headers={"content-type": "text/plain", "retry-after": "99", "X-Request-Id": "req_me"},
    )
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(fault)
        async with http.post(server.url + "/v1/chat/completions", json=CHAT) as response:
            body = await response.read()
            headers = response.headers
    assert response.status == 429
    assert body == b""
    assert headers.getall("Retry-After") == ["1.5"]
    assert headers.getall("Content-Type") == ["text/plain"]
    assert headers.getall("x-request-id") == ["req_me"]


@pytest.mark.asyncio
async def test_a_wrong_content_type_is_sent_as_given() -> None:
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(Fault.wrong_content_type("application/json", body='{"ok": 1}', status=502))
        async with http.post(server.url + "/v1/responses", json=CHAT) as response:
            assert (response.status, await response.read()) == (502, b'{"ok": 1}')
            assert response.headers["Content-Type"] == "application/json"


@pytest.mark.asyncio
async def test_a_missing_replay_file_is_a_500_naming_it(tmp_path: Path) -> None:
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(Replay(tmp_path / "missing.sse"))
        async with http.post(server.url + "/v1/messages", json=CHAT) as response:
            error = await response.json()
    assert response.status == 500
    assert error["type"] == "error"
    assert "FileNotFoundError" in error["error"]["message"]


# ================================================================ what the server records


def test_recorded_requests_redact_every_credential_header_and_parameter() -> None:
    request = RecordedRequest.build(
        "/v1/chat/completions",
        [
            ("Authorization", f"Bearer {KEY}"),
            ("cf-aig-authorization", f"Bearer {SECRET}"),
            ("X-API-KEY", KEY),
            ("Cookie", f"session={SECRET}"),
            ("X-Ratelimit-Remaining-Tokens", "99"),
        ],
        None,
        query=[("api-version", "1"), ("Key", SECRET), ("API_KEY", SECRET), ("access_token", "t")],
    )
    assert dict(request.headers) == {
        "Authorization": "Bearer ***",
        "cf-aig-authorization": "Bearer ***",
        "X-API-KEY": "***",
        "Cookie": "***",
        "X-Ratelimit-Remaining-Tokens": "99",
    }
    assert list(request.query.items()) == [
        ("api-version", "1"),
        ("Key", "***"),
        ("API_KEY", "***"),
        ("access_token", "***"),
    ]


@pytest.mark.parametrize(
    ("body", "role"),
    [
        ({"input": "Hi"}, "user"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}, "tool"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "assistant"),
        ({"input": []}, None),
        ({"input": ["not a mapping"]}, None),
    ],
)
def test_last_role_of_responses_inputs(body: dict[str, Any], role: str | None) -> None:
    assert RecordedRequest.build("/v1/responses", {}, body).last_role == role
