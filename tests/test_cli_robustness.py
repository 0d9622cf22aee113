"""The CLI and the recorder on hostile input: no secret printed or written, typed errors.

A password in a base URL, a key echoed back, terminal escape sequences in a
stream, a dropped stream in `chat`, lone surrogates, malformed recordings and
timing files, a wrong `--dialect auto` guess, an explicit dialect on any file
name, `--json` on a non-UTF-8 stdout, `sample()` names, `record_http`
failures. (Each of these once failed: found by adversarial testing.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rafrx import updates as u
from rafrx.errors import RafrxError
from rafrx.operators import aggregate, convert
from rafrx.recorder import (
    decode_item,
    encode_item,
    load,
    record,
    record_http,
    sample,
    timing_path,
)
from rafrx.sources import from_sse
from rafrx.testing import Fault, LLMServer, Reply
from tests.test_cli import ROOT, free_port, one_line_error, run

KEY = "sk-found-0123456789abcdefghijkl"
PASSWORD = "hunter2-correct-horse"
HEADER = '{"t":0,"kind":"header","fields":{"version":1}}'


def sse(*events: dict[str, Any]) -> bytes:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return body + b"data: [DONE]\n\n"


def chat_sse(*parts: str) -> bytes:
    events: list[dict[str, Any]] = [{"choices": [{"delta": {"content": p}}]} for p in parts]
    return sse(*events, {"choices": [{"delta": {}, "finish_reason": "stop"}]})


# ----------------------------------------------------------------- secrets


def test_chat_errors_never_print_a_password_from_the_base_url() -> None:
    """``chat --base-url http://user:PASSWORD@host:closed`` prints the password.

    Before the fix: ``rafrx chat: error: endpoint unreachable: cannot connect to
    http://alice:hunter2-correct-horse@127.0.0.1:PORT/v1/chat/completions: ...``.
    Expected: the userinfo is dropped or masked, as the query is (``safe_url``).
    """
    url = f"http://alice:{PASSWORD}@127.0.0.1:{free_port()}"
    result = run("chat", "--base-url", url, "--model", "m", stdin="hello\n")
    assert result.returncode == 2
    assert PASSWORD not in result.stdout + result.stderr


@pytest.mark.asyncio
async def test_record_http_never_writes_a_password_from_the_url(tmp_path: Path) -> None:
    """``record_http("http://user:PASSWORD@host/...")`` writes the URL verbatim to the
    ``.timing.json`` (``request.url``): the password lands in a file."""
    async with LLMServer() as server:
        server.enqueue(Reply(text="hi"))
        url = server.url.replace("http://", f"http://alice:{PASSWORD}@") + "/v1/chat/completions"
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        path = tmp_path / "userinfo.sse"
        await record_http(url, path, json_body=body)
    assert PASSWORD not in timing_path(path).read_text(encoding="utf-8")


# ----------------------------------------------------------------- recorder


def test_record_passes_a_lone_surrogate_through(tmp_path: Path) -> None:
    """An SSE body whose JSON escapes split a surrogate pair across two deltas
    (``"\\ud83d"`` then ``"\\ude00"``) streams fine, but ``record()`` makes the stream
    fail with a bare ``UnicodeEncodeError``: the file is opened as strict UTF-8 and
    ``json.dumps(..., ensure_ascii=False)`` keeps the lone surrogate. The recorder
    must be transparent: same items, same terminal event as without it.
    """
    body = (
        b'data: {"choices":[{"delta":{"content":"smile \\ud83d"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"\\ude00!"},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    plain = from_sse([body]).pipe(convert(), aggregate()).run()
    path = tmp_path / "surrogate.jsonl"
    recorded = record(from_sse([body]), path).pipe(convert(), aggregate()).run()
    assert recorded.text == plain.text
    assert load(path).items[:2] == [u.TextDelta("smile \ud83d"), u.TextDelta("\ude00!")]


def test_a_dict_with_a_dollar_repr_key_round_trips() -> None:
    """``encode_item`` escapes dicts holding ``$type``/``$dict`` keys but not ``$repr``,
    which ``_decode`` also treats as a tag: tool arguments ``{"$repr": "x", "a": 1}``
    come back as the string ``"x"``."""
    item = u.ToolApprovalRequest("c1", "f", {"$repr": "x", "a": 1}, "d")
    kind, fields = encode_item(item)
    assert decode_item(kind, json.loads(json.dumps(fields))) == item


@pytest.mark.parametrize(
    "line",
    [
        '{"t": 0, "kind": "TextDelta", "fields": {"nope": 1}}',  # TypeError
        '{"t": 0, "kind": "TextDelta"}',  # TypeError: missing delta
        '{"t": 0, "kind": "TextDelta", "fields": []}',  # AttributeError
        '{"t": 0, "kind": "AgentResponseResult", "fields": {"contents": [{"$type": "Nope"}]}}',
        '{"t": 0, "kind": "error", "fields": "x"}',  # AttributeError
    ],
)
def test_a_malformed_recorded_item_is_a_value_error_and_cli_status_2(
    tmp_path: Path, line: str
) -> None:
    """``load()`` documents ``ValueError: a line is not a recorded item`` and the CLI
    turns that into ``cannot read FILE: FILE:N: not a recorded item`` (status 2). A
    well-formed JSON line with the wrong fields escapes as TypeError/AttributeError/
    KeyError instead: the CLI prints ``error: TypeError: ... (set RAFRX_DEBUG=1 ...)``
    with status 1."""
    path = tmp_path / "bad.jsonl"
    path.write_text(HEADER + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not a recorded item"):
        load(path)
    assert "bad.jsonl:2: not a recorded item" in one_line_error(run("replay", str(path)))


@pytest.mark.parametrize("timing", ["[1, 2]", '{"chunks": 5}', '{"chunks": [5]}'])
def test_a_malformed_timing_file_is_one_line_status_2(tmp_path: Path, timing: str) -> None:
    """A ``.timing.json`` that is JSON but not the expected shape gives
    ``rafrx replay: error: TypeError: ... (set RAFRX_DEBUG=1 ...)`` and status 1;
    other corrupt timing files give ``cannot read FILE: ...`` and status 2."""
    path = tmp_path / "t.sse"
    path.write_bytes(chat_sse("hi"))
    (tmp_path / "t.timing.json").write_text(timing, encoding="utf-8")
    assert one_line_error(run("replay", str(path))).startswith(
        f"rafrx replay: error: cannot read {path}: "
    )


@pytest.mark.asyncio
async def test_record_http_failures_are_typed_rafrx_errors(tmp_path: Path) -> None:
    """``record_http`` to a closed port raises aiohttp's ``ClientConnectorError``, and
    a dropped body aiohttp's ``ClientPayloadError``: not :class:`rafrx.RafrxError`
    (``TransportError`` / ``StreamInterrupted``) as every other rafrx failure is."""
    with pytest.raises(RafrxError):
        await record_http(f"http://127.0.0.1:{free_port()}/v1/chat/completions", tmp_path / "a.sse")
    async with LLMServer() as server:
        server.enqueue(Fault.drop_after(900, body=Reply(text="cut " * 100, chunk_size=4)))
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        with pytest.raises(RafrxError):
            await record_http(
                f"{server.url}/v1/chat/completions", tmp_path / "b.sse", json_body=body
            )


def test_sample_only_returns_shipped_samples() -> None:
    """``sample(name)`` joins ``name`` to the data folder unchecked: ``sample("/etc/hostname")``
    returns ``/etc/hostname`` and ``sample("README.md")`` a non-recording, though the
    docstring promises ``FileNotFoundError`` when "no sample has that name"."""
    outside = "/etc/hostname" if Path("/etc/hostname").is_file() else str(Path(__file__))
    for name in (outside, "README.md", "../recorder.py"):
        with pytest.raises(FileNotFoundError):
            sample(name)


# ----------------------------------------------------------------- replay


def test_auto_dialect_of_a_chat_stream_quoting_response_dot(tmp_path: Path) -> None:
    """``guess_dialect`` takes any ``"response.`` in the first 4 KiB for the Responses
    API, so an OpenAI chat stream whose text holds ``print("response.ok")`` (the
    quote is JSON-escaped as ``\\"response.``) is decoded as Responses and fails:
    ``error: MalformedEvent`` / status 1 instead of the text and status 0."""
    path = tmp_path / "code.sse"
    path.write_bytes(chat_sse('Try print("response.ok") here.'))
    result = run("replay", str(path), "--plain")
    assert result.returncode == 0, result.stdout
    assert result.stdout.startswith('Try print("response.ok") here.\n')


def test_auto_dialect_of_a_chat_stream_mentioning_message_start(tmp_path: Path) -> None:
    """Same with the Anthropic guess: ``message_start`` anywhere in the text of the
    first 4 KiB makes an OpenAI chat stream decode as Anthropic (``IncompleteStream``)."""
    path = tmp_path / "mention.sse"
    path.write_bytes(chat_sse("Anthropic streams open with message_start."))
    result = run("replay", str(path), "--plain")
    assert result.returncode == 0, result.stdout
    assert result.stdout.startswith("Anthropic streams open with message_start.\n")


def test_replay_honours_an_explicit_dialect_whatever_the_file_name(tmp_path: Path) -> None:
    """``replay dump.txt --dialect openai-chat`` ignores the dialect the user named (only
    ``*.sse`` is decoded as SSE) and fails with ``not a recorded item`` (status 2)."""
    for name in ("dump.txt", "DUMP.SSE", "stream"):
        path = tmp_path / name
        path.write_bytes(chat_sse("named dialect"))
        result = run("replay", str(path), "--dialect", "openai-chat", "--plain")
        assert result.returncode == 0, (name, result.stderr)
        assert result.stdout.startswith("named dialect\n")


def test_replay_json_is_lossless_on_a_non_utf8_stdout() -> None:
    """``replay --json`` writes ``json.dumps(ensure_ascii=False)`` to a stdout that
    ``main`` reconfigures with ``errors="replace"``: on an ASCII (or cp1252) stdout the
    machine-readable output silently turns ``°``/``Î`` into ``?``. JSON can always be
    written losslessly (``\\u00b0``)."""
    result = subprocess.run(
        [sys.executable, "-m", "rafrx", "replay", "rafrx/data/demo-anthropic.sse", "--json"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
        check=False,
    )
    assert result.returncode == 0
    rows = [json.loads(line) for line in result.stdout.decode("ascii").splitlines()]
    calls = [r for r in rows if r["type"] == "ToolCallingContent"]
    assert "21 °C" in calls[1]["arguments"]["content"]


# ----------------------------------------------------------------- terminal


def test_plain_output_carries_no_escape_sequences_from_the_stream(tmp_path: Path) -> None:
    """The renderer promises "with color=False ... no escape sequences and no carriage
    returns, fit for pipes and logs", but writes model text, tool names and call ids
    raw: a recording (or a live model) can clear the screen, retitle the terminal or
    hide text (``\\x1b[8m``) in ``replay --plain`` and ``chat``."""
    text = "safe \x1b[2J\x1b]0;pwned\x07 and\rover"
    call = {"index": 0, "id": "c\x1b[31m1", "type": "function"}
    call["function"] = {"name": "rm\x1b[8m", "arguments": "{}"}  # type: ignore[assignment]
    body = sse(
        {"choices": [{"delta": {"content": text}}]},
        {"choices": [{"delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]},
    )
    path = tmp_path / "escape.sse"
    path.write_bytes(body)
    result = subprocess.run(
        [sys.executable, "-m", "rafrx", "replay", str(path), "--plain"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0
    for control in (b"\x1b", b"\x07", b"\r"):
        assert control not in result.stdout


# ----------------------------------------------------------------- chat and demo


def test_chat_reports_a_mid_stream_drop_as_a_failed_stream() -> None:
    """The server drops the connection after part of the answer. ``chat`` catches
    ``TransportError`` as "endpoint unreachable", and ``StreamInterrupted`` (like
    ``IdleTimeout``) is a ``TransportError``: it prints ``endpoint unreachable: the
    connection ... broke mid-stream``, exits 2 and drops the rest of the conversation.
    Expected: reported like any failed turn (``error: StreamInterrupted: ...``), the
    next line still sent (or at least status 1, "a stream that fails gives status 1")."""
    with LLMServer.in_thread() as server:
        server.enqueue(
            Fault.drop_after(700, body=Reply(text="Partial answer. " * 10, chunk_size=9)),
            Reply(text="second answer"),
        )
        result = run(
            "chat", "--base-url", server.url, "--model", "m", "--plain", stdin="hi\nagain\n"
        )
        sent = len(server.requests)
    assert result.stdout.startswith("Partial a")  # the partial is shown
    assert "unreachable" not in result.stderr
    assert result.returncode != 2
    assert sent == 2
    assert "second answer" in result.stdout


def test_chat_exits_non_zero_when_its_only_turn_failed() -> None:
    """``echo q | rafrx chat ...`` against an endpoint answering 401 prints the error on
    stdout and exits 0: a script cannot tell. The module promises "a stream that fails
    gives status 1"."""
    with LLMServer.in_thread() as server:
        server.enqueue(Fault.status(401, message="invalid api key"))
        result = run("chat", "--base-url", server.url, "--model", "m", stdin="q\n")
    assert "HTTP 401" in result.stdout + result.stderr
    assert result.returncode == 1


def test_demo_record_to_an_unwritable_path_is_one_line_status_2(tmp_path: Path) -> None:
    """``demo --record /no/such/dir/x.jsonl`` starts the server, prints the banner, then
    fails with ``error: FileNotFoundError: ... (set RAFRX_DEBUG=1 ...)`` and status 1.
    The module: "missing files ... give a one-line message and exit status 2"."""
    target = tmp_path / "no" / "such" / "dir" / "turn.jsonl"
    result = run("demo", "--plain", "--speed", "50", "--record", str(target))
    assert result.returncode == 2
    assert "RAFRX_DEBUG" not in result.stderr


def test_replay_of_a_recorded_broken_pipe_error_is_reported(tmp_path: Path) -> None:
    """A recording that ended with ``BrokenPipeError`` (a tool writing to a dead pipe)
    replays that error, reported like any other; only a closed stdout ends quietly."""
    error = '{"t":0.2,"kind":"error","fields":{"type":"BrokenPipeError","message":"[Errno 32]"}}'
    text = '{"t":0.1,"kind":"TextDelta","fields":{"delta":"so far"}}'
    path = tmp_path / "pipe.jsonl"
    path.write_text("\n".join([HEADER, text, error]) + "\n", encoding="utf-8")
    result = run("replay", str(path), "--plain")
    assert result.returncode == 1
    assert result.stdout.startswith("so far")
    assert "BrokenPipeError" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "lines",
    [
        [],  # an empty file
        [HEADER],  # a header only
        [HEADER, '{"t": 0.1, "kind": "TextDelta", "fields": {"delta": "cut sho"}}'],  # Ctrl-C
    ],
    ids=["empty", "header-only", "cut-short"],
)
def test_replay_of_an_unfinished_recording_is_not_a_success(
    tmp_path: Path, lines: list[str]
) -> None:
    """No ``completed`` or ``error`` line: the recorded stream was cut short, and a stream
    with no terminal marker is an error (DESIGN), after everything it holds."""
    path = tmp_path / "unfinished.jsonl"
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    result = run("replay", str(path), "--plain")
    assert result.returncode == 1, result.stdout
    assert "IncompleteStream" in result.stdout + result.stderr
    if len(lines) == 2:
        assert result.stdout.startswith("cut sho")
