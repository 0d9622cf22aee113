"""The exploration surfaces (HTML reprs, live view, timeline, terminal, CLI, recorder)
fed by a hostile or merely odd provider, or a hostile shared recording.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import reactivex
from aiohttp import web
from reactivex import operators as rxo

from rafrx import content as c
from rafrx import updates as u
from rafrx.errors import ProviderError
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import ChatMessage, ToolCall
from rafrx.notebook import (
    LiveState,
    live_html,
    message_html,
    timeline,
)
from rafrx.notebook._format import PREVIEW_CHARS
from rafrx.operators import convert
from rafrx.recorder import load, load_sse, record, record_http, record_sse, replay, timing_path
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.terminal import TerminalRenderer
from tests.test_cli import FIXTURES, ROOT, run, run_here
from tests.test_explore_edges import strict_json
from tests.test_notebook_adversarial import skeleton, visible

# Payloads beyond test_notebook_adversarial.NASTY: the odd characters of the brief.
ODD = [
    "</title><script>alert(1)</script>",
    "]]><script>alert(1)</script><![CDATA[",
    "{{7*7}} ${x} <%= x %>",
    '"><img src=x onerror=alert(1)>',
    "nul\x00 lone\ud800 other\udfff nonchar\ufffe\uffff",
    "ls\u2028ps\u2029 rlo\u202egnp.exe bom\ufeff",
    "\U0001f600\U00010348 astral",
    "esc\x1b[2J osc\x1b]52;c;ZXZpbA==\x07 c1\x9b31m del\x7f",
]
# What a terminal must never get from a stream (C0 but tab/newline, DEL, C1).
TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
BIG = "x" * 1_000_000


def _every_content(s: str) -> list[Any]:
    return [
        c.TextContent(s),
        c.ReasoningContent(s),
        c.UriContent(s, s),
        c.ToolCallStartContent(s, s),
        c.ToolCallArgsContent(s, s),
        c.ToolCallArgsParsedContent(s, s, {s: [s]}),
        c.ToolCallArgsProgressContent(s, s, 5, s),
        c.ToolCallEndContent(s),
        c.ToolCallingContent(s, s, {s: s}),
        c.ToolCallingContent(s, s, None, s, s),
        c.ToolCallIncompleteContent(s, s, s, {s: s}),
        c.ToolCalledContent(s, s),
        c.ToolCalledContent(s, None, s),
        c.ErrorContent(s),
    ]


def _every_render(s: str) -> list[str]:
    """Every HTML surface, fed ``s`` in every provider-made string."""
    call = ToolCall(s, s, {s: s})
    message = ChatMessage.assistant_with_tools(s, [call])
    out = [item._repr_html_() for item in _every_content(s)]
    out.append(
        AgentResponseResult(
            id=s,
            model=s,
            contents=_every_content(s),
            events=[ResponseStartedEvent(s, s), ToolApprovalRequestEvent(s, s, {s: s}, s)],
        )._repr_html_()
    )
    out.append(message._repr_html_())
    out.append(ChatMessage.tool(s, s)._repr_html_())
    out.append(
        AgentResponse(
            id=s, model=s, text=s, tool_calls=[call], turn_transcript=[message]
        )._repr_html_()
    )
    state = LiveState()
    state.add(AgentResponseResult(model=s, contents=_every_content(s)))
    state.add(AgentResponseResult(events=[ToolApprovalRequestEvent(s + "2", s, {}, s)]))
    out.append(live_html(state))
    return out


# ----------------------------------------------------------------- HTML: escaping


@pytest.mark.parametrize("payload", ODD)
def test_every_html_surface_keeps_odd_payloads_as_text(payload: str) -> None:
    benign = [skeleton(h) for h in _every_render("plain")]
    for index, html in enumerate(_every_render(payload)):
        assert skeleton(html) == benign[index], (index, payload)
        assert "<script" not in html
        assert "<img" not in html
        html.encode("utf-8")  # no lone surrogate reaches the notebook's wire
        assert "\x00" not in html
    text = visible(_every_render(payload)[0])
    assert "{{7*7}}" in text or "{{" not in payload


def test_numbers_of_a_shared_recording_cannot_inject_html(tmp_path: Path) -> None:
    attack = "<img src=x onerror=alert(1)>"
    usage = {"$type": "Usage", "prompt_tokens": attack}
    progress = {"$type": "ToolCallArgsProgressContent", "call_id": "c", "name": "n"}
    progress |= {"received": attack, "value": "v"}
    lines = [
        {"t": 0, "kind": "header", "fields": {"version": 1}},
        {
            "t": 0.1,
            "kind": "AgentResponseResult",
            "fields": {"contents": [{"$type": "UsageContent", "usage": usage}, progress]},
        },
        {"t": 0.2, "kind": "completed"},
    ]
    path = tmp_path / "shared.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    try:
        (result,) = load(path).items
    except ValueError:
        return  # rejecting the malformed recording is fine too
    rendered = [item._repr_html_() for item in result.contents]
    rendered.append(result._repr_html_())
    rendered.append(AgentResponse(usage=result.contents[0].usage)._repr_html_())
    for html in rendered:
        assert "<img" not in html, html


# ----------------------------------------------------------------- HTML: bounded size


def _bounded(html: str) -> None:
    assert len(html) < 20 * PREVIEW_CHARS, f"{len(html)} characters of HTML"


def test_response_html_of_a_turn_with_a_one_megabyte_tool_result_is_bounded() -> None:
    call = ToolCall("call_1", "read_file", {"path": "big.log"})
    transcript = [
        ChatMessage.assistant_with_tools("", [call]),
        ChatMessage.tool(BIG, "call_1"),
        ChatMessage.assistant("done"),
    ]
    response = AgentResponse(text="done", tool_calls=[call], turn_transcript=transcript)
    _bounded(response._repr_html_())
    _bounded(ChatMessage.tool(BIG, "call_1")._repr_html_())


def test_result_html_of_an_approval_with_a_one_megabyte_argument_is_bounded() -> None:
    event = ToolApprovalRequestEvent("call_1", "write_file", {"content": BIG}, "Write it?")
    _bounded(AgentResponseResult(events=[event])._repr_html_())


def test_content_html_of_a_one_megabyte_argument_delta_is_bounded() -> None:
    arguments = json.dumps({"content": BIG})
    _bounded(c.ToolCallArgsContent("call_1", arguments)._repr_html_())


def test_content_html_of_one_megabyte_values_that_are_clipped_stays_bounded() -> None:
    _bounded(c.ToolCalledContent("c", BIG)._repr_html_())
    _bounded(c.ToolCallArgsParsedContent("c", "n", BIG)._repr_html_())
    _bounded(c.ToolCallingContent("c", "n", {"a": BIG})._repr_html_())
    _bounded(c.ToolCallingContent("c", "n", None, BIG, "bad")._repr_html_())
    _bounded(message_html(ChatMessage.assistant_with_tools("", [ToolCall("c", "n", BIG)])))
    state = LiveState()
    state.add(
        AgentResponseResult(
            contents=[
                c.ToolCallStartContent("c", "n"),
                c.ToolCallingContent("c", "n", {"a": BIG}),
                c.ToolCalledContent("c", BIG),
            ]
        )
    )
    _bounded(live_html(state))


# ----------------------------------------------------------------- timeline


@pytest.mark.parametrize("payload", ODD)
def test_timeline_is_well_formed_svg_whatever_the_strings(payload: str) -> None:
    items = [
        u.ResponseMetadata(payload, payload),
        u.TextDelta(payload),
        u.ReasoningDelta(payload),
        u.ToolCallStart(payload, payload),
        u.ToolCallArgs(payload, json.dumps({payload: payload})),
        u.ToolCallEnd(payload),
        u.Uri(payload, payload),
        u.Error(payload),
    ]
    picture = timeline([(i * 0.1, item) for i, item in enumerate(items)], title=payload)
    root = ET.fromstring(picture.svg)  # XML 1.0: no NUL, lone surrogate or U+FFFE
    assert root.tag.endswith("svg")
    assert not [el for el in root.iter() if el.tag.endswith(("script", "img", "foreignObject"))]
    picture.svg.encode("utf-8")


def test_timeline_of_a_recording_with_a_huge_time_fails_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "huge-t.jsonl"
    path.write_text(
        '{"t":0,"kind":"header","fields":{"version":1}}\n'
        '{"t":1e999,"kind":"TextDelta","fields":{"delta":"hi"}}\n'
        '{"t":0.5,"kind":"completed"}\n',
        encoding="utf-8",
    )
    try:
        picture = timeline(path)
    except ValueError:
        return  # "not a recorded item": a clean refusal
    ET.fromstring(picture.svg)
    assert "inf" not in picture.svg
    assert "nan" not in picture.svg


# ----------------------------------------------------------------- terminal


@pytest.mark.parametrize("color", [True, False])
def test_terminal_never_writes_a_control_character_from_the_stream(color: bool) -> None:
    hostile = "".join(ODD) + "a\rb\bc\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\x85"
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=color, interval=0)
    s = hostile
    renderer.result(
        AgentResponseResult(
            model=s, events=[ResponseStartedEvent(s, s)], contents=_every_content(s)[:3]
        )
    )
    renderer.result(
        AgentResponseResult(
            model=s,
            events=[ResponseStartedEvent(s, s), ToolApprovalRequestEvent(s, s, {s: s}, s)],
            contents=[
                *_every_content(s)[3:],
                c.ToolCallArgsProgressContent(s, s + "2", 500, s),
                c.ToolCallArgsParsedContent(s, s + "2", s),
            ],
        )
    )
    renderer.result(AgentResponseResult(events=[FinishEvent(FinishReason.STOP, Usage(1, 2, 3))]))
    renderer.close()
    renderer.response(AgentResponse(model=s, finish_reason=FinishReason.STOP))
    renderer.error(ProviderError(s))
    written = out.getvalue()
    own = re.sub(r"\x1b\[[0-9;]*m|\r\x1b\[K", "", written) if color else written
    assert TERMINAL_CONTROLS.findall(own) == []
    if not color:
        assert "\x1b" not in written
        assert "\r" not in written


def _error_sse(message: str) -> bytes:
    return b"data: " + json.dumps({"error": {"message": message}}).encode() + b"\n\n"


HOSTILE_ERROR = "boom \x1b[2J\x1b]52;c;ZXZpbA==\x07 \x9b31m \x1b]0;pwned\x07"


def test_replay_json_of_a_failed_stream_keeps_stderr_inert(tmp_path: Path) -> None:
    path = tmp_path / "error.sse"
    path.write_bytes(_error_sse(HOSTILE_ERROR))
    result = run("replay", str(path), "--json")
    assert result.returncode == 1
    assert "ProviderError" in result.stderr
    assert TERMINAL_CONTROLS.findall(result.stdout + result.stderr) == []


def test_replay_json_of_a_recording_with_a_hostile_error_keeps_stderr_inert(tmp_path: Path) -> None:
    path = tmp_path / "error.jsonl"
    error = {"type": "ProviderError", "message": HOSTILE_ERROR}
    path.write_text(
        '{"t":0,"kind":"header","fields":{"version":1}}\n'
        + json.dumps({"t": 0.1, "kind": "error", "fields": error})
        + "\n",
        encoding="utf-8",
    )
    result = run("replay", str(path), "--json")
    assert result.returncode == 1
    assert TERMINAL_CONTROLS.findall(result.stdout + result.stderr) == []


def test_replay_plain_of_a_failed_stream_is_inert(tmp_path: Path) -> None:
    path = tmp_path / "error.sse"
    path.write_bytes(_error_sse(HOSTILE_ERROR))
    result = run("replay", str(path), "--plain")
    assert result.returncode == 1
    assert "ProviderError" in result.stdout
    assert TERMINAL_CONTROLS.findall(result.stdout + result.stderr) == []


def test_replay_json_is_strict_ascii_json_with_lone_surrogates_nul_and_nan(tmp_path: Path) -> None:
    call = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {
            "name": "f",
            "arguments": '{"x": NaN, "y": -Infinity, "s": "\\ud800", "t": "a\\u0000b"}',
        },
    }
    chunks = [
        {"choices": [{"delta": {"content": "lone \ud800 nul \x00 ls \u2028 esc \x1b[2J"}}]},
        {"choices": [{"delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]},
    ]
    body = "".join(f"data: {json.dumps(x)}\n\n" for x in chunks) + "data: [DONE]\n\n"
    path = tmp_path / "odd.sse"
    path.write_bytes(body.encode("ascii"))
    result = subprocess.run(
        [sys.executable, "-m", "rafrx", "replay", str(path), "--json"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = [strict_json(line) for line in result.stdout.decode("ascii").splitlines()]
    text = next(r for r in rows if r["type"] == "TextContent")["text"]
    assert text == "lone \ud800 nul \x00 ls \u2028 esc \x1b[2J"
    called = next(r for r in rows if r["type"] == "ToolCallingContent")
    assert called["arguments"]["x"] == {"$float": "nan"}


def test_replay_json_of_every_fixture_is_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text(encoding="utf-8"))
    for entry in manifest:
        code, out, err = run_here(capsys, "replay", str(FIXTURES / entry["path"]), "--json")
        assert code in (0, 1), (entry["path"], err)
        assert out.isascii()
        for line in out.splitlines():
            assert "type" in strict_json(line)


# ----------------------------------------------------------------- CLI: files and stdin


def test_chat_with_a_closed_stdin_ends_like_end_of_input() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rafrx",
            "chat",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--plain",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        check=False,
        preexec_fn=lambda: os.close(0),  # like `rafrx chat <&-`
    )
    assert "AttributeError" not in result.stderr
    assert result.returncode == 0, result.stderr


def test_chat_with_an_empty_stdin_sends_nothing_and_succeeds() -> None:
    result = run("chat", "--base-url", "http://127.0.0.1:9", "--model", "m", "--plain")
    assert (result.returncode, result.stderr) == (0, "")


def test_replay_of_a_deeply_nested_recording_is_one_line_status_2(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    nested = "[" * 100_000 + "]" * 100_000
    path.write_text('{"t":0,"kind":"value","fields":{"value":' + nested + "}}\n", "utf-8")
    result = run("replay", str(path), "--json")
    assert "RecursionError" not in result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"rafrx replay: error: cannot read {path}")


@pytest.mark.parametrize("kind", ["fifo", "dir", "empty-sse", "empty-jsonl", "garbage-jsonl"])
def test_replay_of_odd_files_fails_with_a_status_and_no_traceback(
    tmp_path: Path, kind: str
) -> None:
    path = (
        tmp_path
        / {
            "fifo": "pipe.sse",
            "dir": "d.sse",
            "empty-sse": "e.sse",
            "empty-jsonl": "e.jsonl",
            "garbage-jsonl": "g.jsonl",
        }[kind]
    )
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "garbage-jsonl":
        path.write_bytes(bytes(range(256)) * 10)
    else:
        path.write_bytes(b"")
    result = run("replay", str(path), "--plain")
    assert result.returncode == {"fifo": 2, "dir": 2, "garbage-jsonl": 2}.get(kind, 1)
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 1


def test_a_timing_file_with_a_negative_size_is_refused_or_harmless(tmp_path: Path) -> None:
    body = (
        b'data: {"choices":[{"delta":{"content":"abcdef"}}]}\n\n'
        b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    )
    path = tmp_path / "neg.sse"
    path.write_bytes(body)
    timing_path(path).write_text(
        json.dumps(
            {"version": 1, "dialect": "openai-chat", "chunks": [[0, 10], [0.1, -8], [0.2, 30]]}
        )
    )
    try:
        saved = load_sse(path)
    except ValueError:
        return
    assert saved.body == body


# ----------------------------------------------------------------- recorder: round trips


MANIFEST = json.loads((FIXTURES / "MANIFEST.json").read_text(encoding="utf-8"))
DECODABLE = [e for e in MANIFEST if e["format"] in ("openai-chat", "anthropic", "openai-responses")]


def _collect(observable: Any) -> tuple[list[Any], list[Exception]]:
    items: list[Any] = []
    failures: list[Exception] = []
    observable.subscribe(items.append, failures.append)
    return items, failures


@pytest.mark.parametrize("entry", DECODABLE, ids=[e["path"] for e in DECODABLE])
def test_every_fixture_round_trips_through_record_and_record_sse(
    entry: dict[str, Any], tmp_path: Path
) -> None:
    body = (FIXTURES / entry["path"]).read_bytes()
    fmt = entry["format"]
    for name, source in (
        ("updates", from_sse([body], dialect=fmt)),
        ("results", from_sse([body], dialect=fmt).pipe(convert())),
    ):
        path = tmp_path / f"{name}.jsonl"
        passed, failed = _collect(record(source, path))
        back, back_failed = _collect(replay(path))
        assert back == passed, name
        assert [type(e) for e in back_failed] == [type(e) for e in failed]
        assert [str(e) for e in back_failed] == [str(e) for e in failed]
        assert [getattr(e, "status", None) for e in back_failed] == [
            getattr(e, "status", None) for e in failed
        ]

    async def save() -> None:
        async def chunks() -> Any:
            for i in range(0, len(body), 7):
                yield body[i : i + 7]

        async for _ in record_sse(chunks(), tmp_path / "raw.sse"):
            pass

    asyncio.run(save())
    assert load_sse(tmp_path / "raw.sse").body == body
    direct, direct_failed = _collect(from_sse([body], dialect=fmt))
    replayed, replayed_failed = _collect(replay(tmp_path / "raw.sse", dialect="auto"))
    assert replayed == direct
    assert [type(e) for e in replayed_failed] == [type(e) for e in direct_failed]


# ----------------------------------------------------------------- recorder: secrets

QUERY_KEY = "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e"  # an Azure-style key: matches no built-in pattern


async def _echo_server(secret_params: tuple[str, ...]) -> tuple[web.AppRunner, int]:
    """An SSE endpoint that echoes the request's key (query or header) split over chunks."""

    async def handler(request: web.Request) -> web.StreamResponse:
        sent = next((request.query[p] for p in secret_params if p in request.query), "")
        sent = sent or request.headers.get("x-api-key", "")
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "X-Echo": request.path_qs}
        )
        await response.prepare(request)
        message = json.dumps({"choices": [{"delta": {"content": f"your key: {sent}"}}]})
        data = f"data: {message}\n\ndata: [DONE]\n\n".encode()
        for i in range(0, len(data), 9):
            await response.write(data[i : i + 9])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def _record_echo(tmp_path: Path, query: str, headers: dict[str, str]) -> tuple[bytes, str]:
    runner, port = await _echo_server(("key", "api-key"))
    try:
        path = tmp_path / "echo.sse"
        await record_http(
            f"http://127.0.0.1:{port}/v1/chat/completions{query}",
            path,
            json_body={"stream": True},
            headers=headers,
            dialect="openai-chat",
        )
    finally:
        await runner.cleanup()
    return path.read_bytes(), timing_path(path).read_text(encoding="utf-8")


def test_record_http_masks_a_header_key_the_server_echoes_split_over_chunks(
    tmp_path: Path,
) -> None:
    body, timing = asyncio.run(_record_echo(tmp_path, "", {"x-api-key": QUERY_KEY}))
    assert QUERY_KEY.encode() not in body
    assert QUERY_KEY not in timing


def test_record_http_masks_an_env_secret_echoed_in_body_and_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ODD_PROVIDER_API_KEY", QUERY_KEY)
    body, timing = asyncio.run(_record_echo(tmp_path, f"?key={QUERY_KEY}&x=1", {}))
    assert QUERY_KEY.encode() not in body
    assert QUERY_KEY not in timing


def test_record_http_masks_a_query_key_the_server_echoes_in_the_body(tmp_path: Path) -> None:
    body, timing = asyncio.run(_record_echo(tmp_path, f"?key={QUERY_KEY}", {}))
    assert QUERY_KEY not in timing
    assert QUERY_KEY.encode() not in body


def test_record_http_redacts_an_api_key_url_parameter(tmp_path: Path) -> None:
    query = f"?api-version=2024-02-01&api-key={QUERY_KEY}"
    body, timing = asyncio.run(_record_echo(tmp_path, query, {}))
    assert QUERY_KEY not in timing
    assert QUERY_KEY.encode() not in body


def test_record_keeps_an_env_secret_out_of_the_jsonl_however_it_is_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "Zq7rT2mWx9pLk4Hv"
    monkeypatch.setenv("ODD_RECORD_API_KEY", secret)
    text = f"my key is {secret}, ok"
    args = json.dumps({"k": f"x{secret}y", "n": secret})
    for step in (1, 2, 3, 5, 7):
        texts = [text[i : i + step] for i in range(0, len(text), step)]
        parts = [args[i : i + step + 1] for i in range(0, len(args), step + 1)]
        updates: list[Any] = [u.ResponseMetadata("r", "m")]
        for i in range(max(len(texts), len(parts))):
            if i < len(texts):
                updates.append(u.TextDelta(texts[i]))
            if i < len(parts):
                updates.append(
                    u.ToolCallDelta(0, "c1" if i == 0 else None, "f" if i == 0 else None, parts[i])
                )
        updates.append(u.Finish(FinishReason.TOOL_CALLS))
        for name, source in (
            ("u", reactivex.from_iterable(updates)),
            ("r", reactivex.from_iterable(updates).pipe(convert())),
        ):
            path = tmp_path / f"{name}{step}.jsonl"
            record(source, path).pipe(rxo.to_list()).run()
            data = path.read_text(encoding="utf-8")
            assert secret[:8] not in data, (name, step)
            assert secret[-8:] not in data, (name, step)
