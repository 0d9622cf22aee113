"""Unicode across the whole stack: bytes on the wire, SSE, dialects, streamed tool
arguments, the agent loop over real HTTP, the recorder, the terminal, the CLI and
the notebook views.

Lone surrogates (a JSON ``\\ud83d`` escape alone, or an escaped pair split between
two events), invalid UTF-8, BOMs, NUL, line separators, combining and RTL text,
non-BMP characters, non-ASCII keys and odd charsets: each must be kept faithfully
or replaced consistently, never end in a bare ``UnicodeError``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import reactivex
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx

from rafrx import Agent, ChatMessage, collect_agent_response, content, convert, from_sse, tool
from rafrx import updates as u
from rafrx.errors import HTTPStatusError, RafrxError
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.json_stream import ArgMember, ArgProgress, StreamingArgsParser
from rafrx.operators import aggregate
from rafrx.recorder import record, replay
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.terminal import TerminalRenderer
from rafrx.testing import LLMServer, Reply, ToolCallSpec, render
from tests.sources._raw_server import ask, raw_server

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient]
FORMATS = ["openai-chat", "anthropic", "openai-responses"]

# Everything awkward that is still a valid Unicode scalar value.
TRICKY = [
    "é",
    "e\u0301",  # combining acute
    "שלום",  # RTL
    "مرحبا",
    "😀",
    "𝄞",
    "👩\u200d👩\u200d👧",  # ZWJ sequence
    "\u2028",
    "\u2029",
    "\x85",
    "\x00",
    "\ufeff",
    "\r",
    "\n",
    "\x1c",
    "\ufffd",
    "\U0010ffff",
]
tricky_text = st.lists(
    st.one_of(st.sampled_from(TRICKY), st.characters(exclude_categories=["Cs"])), max_size=30
).map("".join)


def chat_body(*deltas: dict[str, Any], finish: str = "stop", ascii_json: bool = True) -> bytes:
    """An OpenAI chat SSE body with these deltas (JSON escapes lone surrogates)."""
    out = b""
    for delta in deltas:
        chunk = {"choices": [{"index": 0, "delta": delta}]}
        out += b"data: " + json.dumps(chunk, ensure_ascii=ascii_json).encode() + b"\n\n"
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    return out + b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n"


def call_body(pieces: list[str], name: str = "write_file") -> bytes:
    """An OpenAI chat SSE body streaming one tool call's arguments in ``pieces``."""
    deltas = []
    for i, piece in enumerate(pieces):
        fn: dict[str, Any] = {"arguments": piece}
        call: dict[str, Any] = {"index": 0, "function": fn}
        if i == 0:
            call.update(id="call_1", type="function")
            fn["name"] = name
        deltas.append({"tool_calls": [call]})
    return chat_body(*deltas, finish="tool_calls")


def aggregate_of(body: bytes | list[bytes], dialect: str = "openai-chat") -> AgentResponse:
    return from_sse(body, dialect).pipe(convert(), aggregate()).run()  # type: ignore[no-any-return]


def contents_of(body: bytes | list[bytes]) -> list[Any]:
    results = from_sse(body).pipe(convert(), rx.to_list()).run()
    return [item for result in results for item in result.contents]


def utf8_strict_stream() -> io.TextIOWrapper:
    """A text stream like ``sys.stdout`` on Linux: UTF-8, strict errors."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")


def run_cli(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "rafrx", *args],
        input=stdin,
        capture_output=True,
        timeout=30,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        check=False,
    )


# ================================================================= 1. bytes → text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=tricky_text,
    reasoning=tricky_text,
    fmt=st.sampled_from(FORMATS),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
)
def test_any_text_split_anywhere_in_the_bytes_comes_back_whole(
    text: str, reasoning: str, fmt: str, cuts: list[int]
) -> None:
    body = render(Reply(text=text, reasoning=reasoning, chunk_size=3), fmt)  # type: ignore[arg-type]
    points = sorted({c % (len(body) + 1) for c in cuts})
    chunks = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    response = aggregate_of(chunks, fmt)
    assert response.text == text
    assert (response.reasoning_text or "") == reasoning


def test_utf8_split_at_every_byte_gives_the_same_text_as_whole() -> None:
    text = "é😀𝄞 שלום e\u0301 \u2028\u2029\x85 \ufeff"
    body = chat_body(
        {"content": text}, {"reasoning_content": "👩\u200d👩\u200d👧"}, ascii_json=False
    )
    response = aggregate_of([body[i : i + 1] for i in range(len(body))])
    assert response.text == text
    assert response.reasoning_text == "👩\u200d👩\u200d👧"


@pytest.mark.parametrize(
    "bad",
    [b"\xff", b"\xc3", b"\xed\xa0\xbd", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82"],
    ids=["ff", "truncated-2", "encoded-surrogate", "above-max", "overlong", "truncated-3"],
)
def test_invalid_utf8_in_a_string_becomes_u_fffd_and_the_stream_goes_on(bad: bytes) -> None:
    body = chat_body({"content": "aXb"}, {"content": " é"}).replace(b"X", bad)
    response = aggregate_of(body)
    assert response.finish_reason is FinishReason.STOP
    assert response.text.startswith("a\ufffd")
    assert response.text.endswith("b é")
    assert set(response.text[1:-3]) == {"\ufffd"}


def test_cr_only_line_ends_with_non_ascii_around_them() -> None:
    body = chat_body({"content": "é\r😀"}, ascii_json=False).replace(b"\n", b"\r")
    assert aggregate_of(body).text == "é\r😀"


def test_a_bom_starts_the_stream_but_one_in_the_middle_is_kept_in_the_field_name() -> None:
    body = b"\xef\xbb\xbf" + chat_body({"content": "a\ufeffb"}, ascii_json=False)
    assert aggregate_of(body).text == "a\ufeffb"  # the leading BOM goes, the one in data stays


def test_unicode_line_separators_in_data_do_not_end_sse_lines() -> None:
    # str.splitlines() would break at each of these; SSE only at CR, LF and CRLF.
    text = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\x1dh\x1ei"
    body = chat_body({"content": text}, ascii_json=False)
    assert aggregate_of(body).text == text


@pytest.mark.asyncio
@pytest.mark.parametrize("charset", ["latin-1", "utf-16", "windows-1252", "nonsense-charset"])
async def test_an_event_stream_in_any_declared_charset_is_read_as_utf8(
    no_task_leak: None, charset: str
) -> None:
    body = render(Reply(text="café 😀 שלום"), "openai-chat")

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.Response(body=body)
        response.headers["Content-Type"] = f"text/event-stream; charset={charset}"
        return response

    async with raw_server(handle) as (url, _):
        client = OpenAIChatClient(url, model="m")
        response, error = await ask(client)
        await client.aclose()
    assert error is None
    assert response is not None
    assert response.text == "café 😀 שלום"


# ================================================================= 2. error bodies


@pytest.mark.asyncio
@pytest.mark.parametrize("charset", ["iso-8859-1", "utf-8", "cp1252"])
async def test_an_error_body_in_a_real_charset_is_decoded_by_it(
    no_task_leak: None, charset: str
) -> None:
    message = "clé refusée"

    async def handle(request: web.Request) -> web.StreamResponse:
        data = json.dumps({"error": {"message": message}}, ensure_ascii=False).encode(charset)
        response = web.Response(body=data, status=400)
        response.headers["Content-Type"] = f"application/json; charset={charset}"
        return response

    async with raw_server(handle) as (url, _):
        client = OpenAIChatClient(url, model="m")
        _, error = await ask(client)
        await client.aclose()
    assert isinstance(error, HTTPStatusError)
    assert error.provider_message == message


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", CLIENTS)
async def test_a_call_to_an_unknown_non_ascii_tool_name_is_an_error_result_and_goes_on(
    llm_server: LLMServer, cls: Any
) -> None:
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("météo\ud83d", {"ville": "Zürich"})]), Reply(text="fin")
    )
    client = cls(llm_server.url, model="m")
    try:
        response = await Agent(client, tools=[echo]).send("hi")
    finally:
        await client.aclose()
    assert response.text == "fin"
    result = response.turn_transcript[1]
    assert result.is_error or "unknown tool" in str(result.content)
    assert "météo" in str(result.content)
    body = json.dumps(llm_server.requests[1].json)
    # the call goes back under the name it had, its lone surrogate as U+FFFD (a request
    # holding one is refused whole)
    assert "m\\u00e9t\\u00e9o\\ufffd" in body


def test_a_tool_named_in_non_ascii_is_refused_at_definition_with_a_clear_error() -> None:
    def météo(ville: str) -> str:
        return ville

    with pytest.raises(ValueError, match="tool name must match"):
        tool(météo)


@pytest.mark.asyncio
@pytest.mark.parametrize("charset", ["hex", "base64", "rot13", "zlib", "idna", "punycode"])
async def test_an_error_body_with_a_bogus_charset_still_gives_an_http_status_error(
    no_task_leak: None, charset: str
) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        data = json.dumps({"error": {"message": "clé ☃ refusée"}}, ensure_ascii=False).encode()
        response = web.Response(body=data, status=400)
        response.headers["Content-Type"] = f"application/json; charset={charset}"
        return response

    async with raw_server(handle) as (url, _):
        client = OpenAIChatClient(url, model="m")
        try:
            _, error = await ask(client)
        except Exception as exc:
            error = exc  # type: ignore[assignment]
        finally:
            await client.aclose()
    assert isinstance(error, HTTPStatusError), repr(error)
    assert error.status == 400


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", [OpenAIChatClient, AnthropicClient])
@pytest.mark.parametrize("key", ["sk-clé-0123456789abcdefghij", "ключ-секрет-0123456789"])
async def test_a_non_ascii_api_key_echoed_in_an_error_is_redacted(
    no_task_leak: None, cls: Any, key: str
) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization") or request.headers.get("x-api-key")
        body = {"error": {"message": f"bad key {auth} / {json.dumps(auth)}"}}
        return web.json_response(body, status=401)

    async with raw_server(handle) as (url, seen):
        client = cls(url, api_key=key, model="m")
        _, error = await ask(client)
        await client.aclose()
    assert key in str(seen[0].headers)  # it was sent as is
    assert isinstance(error, HTTPStatusError)
    for text in (str(error), repr(error), error.body or "", error.provider_message or ""):
        assert key not in text
        assert json.dumps(key)[1:-1] not in text


# ================================================================= 3. streamed arguments


@settings(max_examples=80, deadline=None)
@given(
    value=tricky_text,
    ascii_json=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_progress_counts_utf8_bytes_of_the_decoded_value(
    value: str, ascii_json: bool, cuts: list[int]
) -> None:
    text = json.dumps({"path": "x", "content": value}, ensure_ascii=ascii_json)
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    parser = StreamingArgsParser()
    events = [e for piece in pieces for e in parser.feed(piece)]
    progress = [e for e in events if isinstance(e, ArgProgress) and e.name == "content"]
    members = {e.name: e.value for e in events if isinstance(e, ArgMember)}
    assert members["content"] == value
    assert "".join(p.fragment for p in progress) == value
    if value:
        assert progress[-1].received == len(value.encode("utf-8"))
    for p in progress:
        p.fragment.encode("utf-8")  # whole code points: no half of an escaped pair
    assert parser.close() == {"path": "x", "content": value}


def test_an_escaped_pair_split_between_deltas_reaches_the_tool_call_whole() -> None:
    items = contents_of(call_body(['{"path": "é', "\\ud83d", "\\ude00", '𝄞"}']))
    progress = [i for i in items if isinstance(i, content.ToolCallArgsProgressContent)]
    calling = next(i for i in items if isinstance(i, content.ToolCallingContent))
    assert calling.arguments == {"path": "é😀𝄞"}
    assert "".join(p.value for p in progress) == "é😀𝄞"
    assert progress[-1].received == len("é😀𝄞".encode())


def test_non_ascii_and_escaped_keys_are_decoded_in_progress_and_members() -> None:
    items = contents_of(call_body(['{"ch\\u00e9', 'min": "a', "b\\u00e9", '", "😀": 1}']))
    parsed = [i for i in items if isinstance(i, content.ToolCallArgsParsedContent)]
    assert [(p.name, p.value) for p in parsed] == [("chémin", "abé"), ("😀", 1)]


def test_a_lone_escaped_surrogate_in_arguments_is_kept_and_counted_three_bytes() -> None:
    items = contents_of(call_body(['{"q": "a\\ud800', 'b"}']))
    calling = next(i for i in items if isinstance(i, content.ToolCallingContent))
    progress = [i for i in items if isinstance(i, content.ToolCallArgsProgressContent)]
    assert calling.arguments == {"q": "a\ud800b"}
    assert progress[-1].received == 5  # as documented: a lone surrogate counts 3


# ================================================================= 4. the agent loop over HTTP


got: list[str] = []


@tool
def echo(s: str) -> str:
    """Echo the text back.

    Args:
        s: The text.
    """
    got.append(s)
    return "r:" + s


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", CLIENTS)
async def test_lone_surrogates_everywhere_survive_the_agent_loop_over_http(
    llm_server: LLMServer, cls: Any
) -> None:
    got.clear()
    llm_server.enqueue(
        Reply(
            text="t\ud83d",
            reasoning="r\ude00",
            tool_calls=[ToolCallSpec("echo", {"s": "x\ud800y😀\x00\u2028"})],
            chunk_size=1,
        ),
        Reply(text="done é😀"),
    )
    client = cls(llm_server.url, model="modèle-😀")
    history = InMemoryHistoryProvider()
    agent = Agent(client, tools=[echo], history=history)
    try:
        response = await agent.send("hi ü\ud83d")
    finally:
        await client.aclose()
    assert got == ["x\ud800y😀\x00\u2028"]
    assert response.text.endswith("done é😀")
    second = json.dumps(llm_server.requests[1].json)  # what the server parsed, re-escaped
    # The tool's argument goes back with its lone surrogate as U+FFFD (the providers
    # refuse a request holding one: "no low surrogate in string"), the rest intact.
    assert "\\ufffdy\\ud83d\\ude00\\u0000\\u2028" in second
    assert "hi \\u00fc\\ufffd" in second
    assert llm_server.requests[1].json["model"] == "modèle-😀"
    assert any(m.content and "t\ud83d" in str(m.content) for m in history.messages)


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", CLIENTS)
async def test_a_pair_split_between_two_text_deltas_aggregates_to_the_character(
    llm_server: LLMServer, cls: Any
) -> None:
    # chunk_size=1 over the two UTF-16 halves: each half is its own event (a \ud83d escape)
    halves = "a" + "\ud83d\ude00" + "b"
    llm_server.enqueue(Reply(text=halves, chunk_size=1))
    client = cls(llm_server.url, model="m")
    try:
        response = await collect_agent_response(
            client.stream([ChatMessage.user("hi")]).pipe(convert())
        )
    finally:
        await client.aclose()
    assert response.text == "a😀b"
    assert response.turn_transcript[-1].content == "a😀b"


# ================================================================= 5. recorder


def test_recorder_round_trips_lone_surrogates_nul_bidi_and_astral(tmp_path: Path) -> None:
    path = tmp_path / "turn.jsonl"
    deltas = ["a\ud83d", "\ude00b", "\x00", "\u202e", "𝄞\u2028", "\ufeff"]
    source = reactivex.from_iterable(
        [
            *(u.TextDelta(d) for d in deltas),
            u.ToolCallStart("c1", "echo"),
            u.ToolCallArgs("c1", '{"s": "\\ud800\u2029é"}'),
            u.ToolCallEnd("c1"),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    )
    record(source, path).pipe(rx.to_list()).run()
    raw = path.read_bytes()
    raw.decode("utf-8")  # the file itself is valid UTF-8
    back = replay(path).pipe(rx.to_list()).run()
    assert [d.delta for d in back if isinstance(d, u.TextDelta)] == deltas
    args = next(d for d in back if isinstance(d, u.ToolCallArgs))
    assert args.args_delta == '{"s": "\\ud800\u2029é"}'


def test_recorder_redacts_a_non_ascii_secret_split_across_deltas(tmp_path: Path) -> None:
    path = tmp_path / "turn.jsonl"
    secret = "clé-secrète-😀-42"
    source = reactivex.of(u.TextDelta("voici " + secret[:5]), u.TextDelta(secret[5:] + " fin"))
    record(source, path, secrets=[secret]).pipe(rx.to_list()).run()
    text = path.read_text(encoding="utf-8")
    assert secret not in text
    assert secret[5:] not in text
    joined = "".join(d.delta for d in replay(path).pipe(rx.to_list()).run())
    assert joined.startswith("voici ")
    assert joined.endswith(" fin")


# ================================================================= 6. terminal and CLI


@pytest.mark.parametrize(
    "item",
    [
        content.TextContent("a\ud83d"),
        content.ReasoningContent("r\ude00"),
        content.ToolCallStartContent("c1", "f\ud800"),
        content.ToolCallArgsParsedContent("c1", "q", "x\ud800"),
        content.ToolCalledContent("c1", "res\udfff"),
    ],
    ids=["text", "reasoning", "tool-name", "argument", "result"],
)
def test_terminal_renderer_survives_a_lone_surrogate_on_a_utf8_stream(item: Any) -> None:
    stream = utf8_strict_stream()
    renderer = TerminalRenderer(stream, color=False)
    renderer.result(AgentResponseResult(contents=[item]))
    renderer.response(AgentResponse(finish_reason=FinishReason.STOP))
    renderer.close()
    stream.flush()
    out = stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    assert "\ufffd" in out


def test_terminal_renderer_keeps_astral_combining_and_rtl_text_but_not_bidi_overrides() -> None:
    stream = utf8_strict_stream()
    renderer = TerminalRenderer(stream, color=False)
    renderer.result(
        AgentResponseResult(contents=[content.TextContent("😀 e\u0301 שלום /tmp/\u202egnp.exe")])
    )
    renderer.close()
    stream.flush()
    out = stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    assert "😀 e\u0301 שלום /tmp/\ufffdgnp.exe" in out


@pytest.mark.parametrize("encoding", ["ascii", "utf-8", "latin-1"])
def test_cli_replay_of_a_hostile_sse_file_never_crashes(tmp_path: Path, encoding: str) -> None:
    body = chat_body(
        {"content": "lone \ud83d then \ude00 nul \x00 ls \u2028 rtl \u202e bom \ufeff é😀"},
        {"reasoning_content": "pensée \ud800"},
    ).replace(b" bom", b" \xff\xfe bad")
    path = tmp_path / "hostile-é.sse"
    path.write_bytes(body)
    result = run_cli("replay", "--plain", str(path), env={"PYTHONIOENCODING": encoding})
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    out = result.stdout.decode(encoding, "replace")
    assert "lone" in out
    assert "nul" in out


def test_cli_replay_json_is_ascii_and_loses_no_surrogate(tmp_path: Path) -> None:
    path = tmp_path / "t.sse"
    path.write_bytes(chat_body({"content": "a\ud83d"}, {"content": "é😀"}))
    result = run_cli("replay", "--json", str(path), env={"PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0, result.stderr
    result.stdout.decode("ascii")
    texts = [json.loads(line).get("text") for line in result.stdout.decode().splitlines()]
    assert "a\ud83d" in texts
    assert "é😀" in texts


def test_cli_replay_prints_an_emoji_split_between_two_events(tmp_path: Path) -> None:
    path = tmp_path / "split.sse"
    path.write_bytes(chat_body({"content": "a\ud83d"}, {"content": "\ude00b"}))
    result = run_cli("replay", "--plain", str(path), env={"PYTHONIOENCODING": "utf-8"})
    assert result.returncode == 0, result.stderr
    assert "a😀b" in result.stdout.decode("utf-8")


def test_cli_chat_with_non_utf8_stdin_does_not_hang() -> None:
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="ok"), Reply(text="ok"))
        try:
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rafrx",
                    "chat",
                    "--base-url",
                    server.url,
                    "--model",
                    "m",
                    "--plain",
                ],
                input=b"caf\xe9\nhello\n",
                capture_output=True,
                timeout=15,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"},
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"rafrx chat hung on a non-UTF-8 line; stderr: {exc.stderr!r}")
    assert b"Traceback" not in result.stderr


def test_cli_chat_sends_non_ascii_input_and_model_name_faithfully() -> None:
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="réponse 😀 שלום"))
        result = run_cli(
            "chat",
            "--base-url",
            server.url,
            "--model",
            "modèle-😀",
            "--plain",
            stdin="héllo 𝄞 e\u0301\n".encode(),
            env={"PYTHONIOENCODING": "utf-8"},
        )
        requests = list(server.requests)
    assert result.returncode == 0, result.stderr
    assert "réponse 😀 שלום" in result.stdout.decode("utf-8")
    assert requests[0].json["model"] == "modèle-😀"
    assert requests[0].json["messages"][-1]["content"] == "héllo 𝄞 e\u0301"


# ================================================================= 7. notebook HTML

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def test_html_reprs_of_lone_surrogates_are_encodable_and_replaced_consistently() -> None:
    lone = "a\ud83d b\ude00"
    htmls = [
        content.TextContent(lone)._repr_html_(),
        content.ToolCallingContent("c1", "f", {"q": lone}, None, None)._repr_html_(),
        AgentResponse(text=lone, turn_transcript=(ChatMessage.assistant(lone),))._repr_html_(),
        AgentResponseResult(contents=[content.TextContent(lone)])._repr_html_(),
    ]
    for html in htmls:
        html.encode("utf-8")
        assert "\ufffd" in html or "\\ud83d" in html


def test_html_views_neutralise_bidi_overrides_in_model_made_text() -> None:
    spoof = "/tmp/\u202egnp.exe"
    htmls = {
        "text": content.TextContent("see " + spoof)._repr_html_(),
        "calling": content.ToolCallingContent(
            "c1", "write_file", {"path": spoof}, None, None
        )._repr_html_(),
        "parsed": content.ToolCallArgsParsedContent("c1", "path", spoof)._repr_html_(),
        "response": AgentResponse(turn_transcript=(ChatMessage.assistant(spoof),))._repr_html_(),
    }
    leaking = [name for name, html in htmls.items() if any(ch in html for ch in BIDI)]
    assert leaking == []


@pytest.mark.asyncio
async def test_the_live_approval_card_neutralises_bidi_overrides_too() -> None:
    from rafrx.notebook import live

    updates: list[Any] = []

    class Handle:
        def update(self, obj: Any, **kwargs: Any) -> None:
            updates.append(obj)

    def display(obj: Any, *, display_id: bool = False) -> Handle:
        updates.append(obj)
        return Handle()

    spoof = "/tmp/\u202egnp.exe"
    result = AgentResponseResult(
        events=[ToolApprovalRequestEvent("c1", "write_file", {"path": spoof})],
        contents=[content.ToolCallingContent("c1", "write_file", {"path": spoof}, None, None)],
    )
    view = live(reactivex.of(result), display=display)
    await asyncio.sleep(0)
    assert view.done
    html = updates[-1]._repr_html_()
    assert "gnp.exe" in html
    assert not any(ch in html for ch in BIDI)


def test_errors_with_unicode_messages_have_encodable_reprs() -> None:
    from rafrx.errors import ProviderError

    error = ProviderError("modèle surchargé \ud83d 😀")
    assert "😀" in str(error)
    assert isinstance(error, RafrxError)
    repr(error)
