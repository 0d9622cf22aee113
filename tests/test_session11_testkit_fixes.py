"""Regression tests of the test kit (``rafrx.testing``, ``record_sse``) bugs a hunt found.

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import datetime
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rafrx import ChatMessage, FinishReason, RafrxError, collect_agent_response, recorder
from rafrx import operators as ops
from rafrx.recorder import load_sse, record_http, record_sse, timing_path
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, render

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "header"), [(CHAT, "x-request-id"), (MESSAGES, "request-id")])
async def test_a_wrong_content_type_answer_carries_the_request_id(path: str, header: str) -> None:
    """``Fault.wrong_content_type`` answered without the provider's request id header,
    which every other answer of the server carries: a client error it caused named
    no request id."""
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(Fault.wrong_content_type(status=502))
        async with http.post(server.url + path, json={"stream": True}) as resp:
            await resp.read()
    assert resp.status == 502
    assert resp.content_type == "text/html"
    assert resp.headers[header].startswith("req_")


@pytest.mark.asyncio
async def test_a_client_error_from_a_wrong_content_type_names_the_request_id() -> None:
    """The same fault as a client sees it: the error of a 200 answered with an HTML
    page had ``request_id`` ``None``."""
    async with LLMServer() as server:
        server.enqueue(Fault.wrong_content_type())
        client = OpenAIChatClient(server.url + "/v1", "sk-test", model="m")
        try:
            with pytest.raises(RafrxError) as caught:
                await collect_agent_response(
                    client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
                )
        finally:
            await client.aclose()
    assert str(getattr(caught.value, "request_id", None)).startswith("req_")


@pytest.mark.parametrize("typo", ["end_trun", "Stopp", "pause-turn", ""])
def test_a_finish_reason_typo_is_refused_where_the_reply_is_made(typo: str) -> None:
    """``Reply(finish="end_trun")`` became ``FinishReason.OTHER`` without a word: the
    test then probed an unknown finish reason instead of the one it meant."""
    with pytest.raises(ValueError, match=r"end_turn.*pause_turn") as caught:
        Reply(finish=typo)
    assert repr(typo) in str(caught.value)


def test_a_finish_reason_that_is_no_string_is_a_type_error() -> None:
    """``Reply(finish=1)`` raised ``AttributeError: 'int' object has no attribute
    'lower'`` (from ``FinishReason.from_provider``)."""
    with pytest.raises(TypeError, match="FinishReason"):
        Reply(finish=1)  # type: ignore[arg-type]


def _last_data(body: bytes) -> dict[str, Any]:
    """The last JSON ``data:`` payload of an SSE body that holds a finish reason."""
    payloads = [json.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: {")]
    return [p for p in payloads if "delta" in p or p.get("choices")][-1]


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("pause_turn", "pause_turn"),
        ("refusal", "refusal"),
        ("end_turn", "end_turn"),
        ("stop_sequence", "stop_sequence"),
        ("max_output_tokens", "max_tokens"),
    ],
)
def test_anthropic_sends_its_own_stop_reasons_as_spelled(finish: str, stop_reason: str) -> None:
    """``Reply(finish="pause_turn")`` sent ``stop_reason: "other"`` (and ``"refusal"``
    only by luck of the content-filter mapping): a test could not script Anthropic's
    paused turn, which the agent must send back to go on."""
    body = render(Reply(text="…", finish=finish), "anthropic")
    assert _last_data(body)["delta"]["stop_reason"] == stop_reason


@pytest.mark.parametrize(
    ("finish", "finish_reason"),
    [
        ("sensitive", "sensitive"),
        ("abort", "abort"),
        ("pause_turn", "other"),
        ("refusal", "content_filter"),
        ("end_turn", "stop"),
    ],
)
def test_chat_sends_its_own_finish_reasons_as_spelled(finish: str, finish_reason: str) -> None:
    """Chat sends an OpenAI-compatible server's spelling as given (Zhipu's
    ``sensitive``, vLLM's ``abort``), another provider's as the reason it means."""
    body = render(Reply(text="…", finish=finish), "openai-chat")
    assert _last_data(body)["choices"][0]["finish_reason"] == finish_reason


def test_a_provider_spelling_keeps_the_reason_it_means() -> None:
    """The reply still reports the normalised reason, whatever its spelling."""
    from rafrx.testing import FINISH_SPELLINGS  # (new: imported here, the other tests run)

    assert Reply(finish="pause_turn").finish_reason is FinishReason.OTHER
    assert Reply(finish="REFUSAL").finish == "refusal"
    assert Reply(finish="REFUSAL").finish_reason is FinishReason.CONTENT_FILTER
    assert Reply(finish="stop").finish is FinishReason.STOP
    assert set(FINISH_SPELLINGS) >= {r.value for r in FinishReason} | {"pause_turn", "refusal"}


@pytest.mark.asyncio
async def test_a_scripted_pause_turn_goes_on_the_anthropic_wire() -> None:
    """End to end: the server sends the paused turn the reply scripted."""
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(Reply(text="Searching…", finish="pause_turn"))
        body = {"model": "claude-test", "stream": True}
        async with http.post(server.url + MESSAGES, json=body) as resp:
            raw = await resp.read()
    assert b'"stop_reason":"pause_turn"' in raw


def _expects_one_tool(request: RecordedRequest) -> Reply:
    """A test's script asserting on the request it got."""
    assert request.tool_names == ("search",), "the client offered no search tool"
    return Reply(text="ok")


@pytest.mark.asyncio
async def test_a_failed_assert_in_a_script_fails_the_test_when_the_server_closes() -> None:
    """A script's ``assert`` on the request became an HTTP 500 only: a client that
    retries or handles the 500 (an agent's fallback, an error view) let the test
    pass, and one that raised showed a client error, not the assertion.

    The 500 stays (as documented); the server keeps the exception and ``async with``
    raises the assertion itself once the server is closed."""
    server = LLMServer()

    async def a_test_whose_client_goes_on_after_the_500() -> None:
        async with server, aiohttp.ClientSession() as http:
            server.script(_expects_one_tool)
            async with http.post(server.url + CHAT, json={"stream": True}) as resp:
                body = await resp.json()
            assert resp.status == 500
            assert "script raised AssertionError" in body["error"]["message"]

    with pytest.raises(AssertionError, match="the client offered no search tool"):
        await a_test_whose_client_goes_on_after_the_500()
    assert [type(e) for e in server.script_errors] == [AssertionError]


def _sync_test_whose_client_goes_on_after_the_500() -> None:
    with LLMServer.in_thread() as server:
        server.script(_expects_one_tool)
        request = urllib.request.Request(server.url + CHAT, data=b'{"stream": true}')
        with pytest.raises(urllib.error.HTTPError, match="500"):
            urllib.request.urlopen(request)


def test_a_failed_assert_in_a_script_fails_a_server_thread_when_it_stops() -> None:
    """The same for sync code: the end of ``with LLMServer.in_thread()`` raises it."""
    with pytest.raises(AssertionError, match="the client offered no search tool"):
        _sync_test_whose_client_goes_on_after_the_500()


@pytest.mark.asyncio
async def test_other_script_errors_stay_an_http_500_and_are_kept() -> None:
    """A script raising anything else is a 500 as before (tests probe the client with
    it), kept in ``script_errors``; ``reset()`` forgets them, and the assertion."""

    def broken(request: RecordedRequest) -> Reply:
        raise KeyError("nope")

    async with LLMServer() as server, aiohttp.ClientSession() as http:
        for script in (_expects_one_tool, broken):
            server.script(script)
            async with http.post(server.url + CHAT, json={"stream": True}) as resp:
                assert resp.status == 500
        assert [type(e) for e in server.script_errors] == [AssertionError, KeyError]
        server.reset()
        assert server.script_errors == []
    # (closed without raising: reset() forgot the assertion)


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "header"), [(CHAT, "x-request-id"), (MESSAGES, "request-id")])
async def test_a_body_nested_too_deeply_gets_a_400_in_the_providers_shape(
    path: str, header: str
) -> None:
    """A body nested deeper than ``json.loads`` goes raised ``RecursionError`` in the
    handler: aiohttp answered a bare ``500 Internal Server Error`` (text, no request
    id), unlike every other bad body, which gets a 400 in the provider's error shape."""
    depth = 100_000
    raw = b'{"stream": true, "messages": ' + b"[" * depth + b"]" * depth + b"}"
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        headers = {"Content-Type": "application/json"}
        async with http.post(server.url + path, data=raw, headers=headers) as resp:
            body = await resp.json()
    assert resp.status == 400
    assert header in resp.headers
    error = body["error"]
    assert "nested too deeply" in error["message"]
    assert error["type"] == "invalid_request_error"
    [recorded] = server.requests
    assert recorded.json is None
    assert server.queued == 0  # (no answer taken from the queue)


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "header"), [(CHAT, "x-request-id"), (MESSAGES, "request-id")])
async def test_a_body_that_is_not_json_is_told_so(path: str, header: str) -> None:
    """A body that is not JSON got the 400 of a request that does not stream
    ('set "stream": true'), which sent its author looking in the wrong place."""
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(Reply(text="kept"))
        async with http.post(server.url + path, data=b"stream=true") as resp:
            body = await resp.json()
    assert resp.status == 400
    assert resp.headers[header].startswith("req_")
    assert body["error"]["type"] == "invalid_request_error"
    assert "not JSON" in body["error"]["message"]
    assert '"stream": true' not in body["error"]["message"]
    [recorded] = server.requests
    assert recorded.json is None
    assert server.queued == 1  # (the reply stays for the next request)


@pytest.mark.parametrize("bad", [{"started": datetime.datetime(2026, 1, 1)}, {"tags": {"a"}}])
def test_record_sse_refuses_meta_json_cannot_hold_before_reading(
    bad: dict[str, Any], tmp_path: Path
) -> None:
    """``record_sse(meta={"started": datetime(...)})`` read and passed on the whole
    stream (the request made, the tokens paid), then failed writing the timing file,
    leaving a ``.sse`` without one."""
    read: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        read.append(b"data: {}\n\n")
        yield b"data: {}\n\n"

    path = tmp_path / "turn.sse"
    with pytest.raises(TypeError, match="meta"):
        record_sse(body(), path, meta=bad)
    assert read == []
    assert not path.exists()


def test_record_sse_refuses_meta_that_holds_itself(tmp_path: Path) -> None:
    """A mapping holding itself is a ``ValueError`` (JSON's circular reference)."""
    meta: dict[str, Any] = {}
    meta["self"] = meta

    async def body() -> AsyncIterator[bytes]:
        yield b""

    with pytest.raises(ValueError, match="meta"):
        record_sse(body(), tmp_path / "turn.sse", meta=meta)


@pytest.mark.asyncio
async def test_record_sse_with_json_ready_meta_still_records(tmp_path: Path) -> None:
    """The pass-through and the files are as before."""

    async def body() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"

    path = tmp_path / "turn.sse"
    assert [c async for c in record_sse(body(), path, meta={"dialect": "openai-chat"})] == [
        b"data: {}\n\n"
    ]
    assert load_sse(path).meta["dialect"] == "openai-chat"


ACCOUNT = {"OpenAI-Organization": "org-AcmeCorp0001", "OpenAI-Project": "proj_AcmeLaunch02"}


@pytest.mark.asyncio
async def test_recordings_keep_openai_account_ids_out(tmp_path: Path) -> None:
    """Kept on purpose: ``OpenAI-Organization`` / ``OpenAI-Project`` are no
    credentials, but they name the account billed, and a recording is made to be
    shared (a bug report, a public fixture); no replay needs them. Pinned here with
    the test server's record of the request, which redacts the same set."""
    path = tmp_path / "turn.sse"
    async with LLMServer() as server:
        await record_http(server.url + CHAT, path, json_body={"stream": True}, headers=ACCOUNT)
    files = path.read_bytes() + timing_path(path).read_bytes()
    for value in ACCOUNT.values():
        assert value.encode() not in files
    request_headers = load_sse(path).meta["request"]["headers"]
    assert {request_headers[name] for name in ACCOUNT} == {"[REDACTED]"}
    [recorded] = server.requests
    assert {recorded.headers[name] for name in ACCOUNT} == {"***"}


def test_the_docs_say_recordings_keep_openai_account_ids_out() -> None:
    """The redaction was undocumented: the docs named credentials only, so a user
    read a redacted org id as a bug, or did not know a recording hides it."""
    for doc in (recorder.__doc__, recorder.record_http.__doc__, RecordedRequest.__doc__):
        assert doc is not None
        assert "OpenAI-Organization" in doc, doc[:80]
        assert "OpenAI-Project" in doc, doc[:80]


@pytest.mark.parametrize("key", ["version", "created", "chunks"])
def test_record_sse_refuses_meta_that_sets_the_timing_files_own_keys(
    key: str, tmp_path: Path
) -> None:
    """``record_sse(meta={"version": 0})`` wrote the caller's value over the timing
    file's own (a ``chunks`` key even made the file hold the key twice)."""

    async def body() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"

    with pytest.raises(ValueError, match=key):
        record_sse(body(), tmp_path / "turn.sse", meta={key: 0})
    assert list(tmp_path.iterdir()) == []
