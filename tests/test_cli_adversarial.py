"""The ``rafrx`` CLI as a demanding user drives it, always as a subprocess.

Bad, empty, binary and huge files; recorded errors; every wire format with
``--dialect auto``; closed pipes; SIGINT/SIGTERM; unreachable and failing
endpoints; non-UTF-8 output. Everything here passes: bugs found on the way
are in ``tests/test_cli_found_bugs.py``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import reactivex

from rafrx import updates as u
from rafrx.errors import HTTPStatusError
from rafrx.operators import convert
from rafrx.recorder import record, sample, samples
from rafrx.testing import Fault, LLMServer, Reply
from tests.test_cli import FIXTURES, ROOT, free_port, one_line_error, run

KEY = "sk-cli-adv-0123456789abcdefghij"

# ----------------------------------------------------------------- helpers


def no_traceback(result: Any) -> None:
    assert "Traceback" not in result.stderr
    assert "Exception ignored" not in result.stderr
    assert "Task was destroyed" not in result.stderr
    assert "Unclosed" not in result.stderr


def chat_sse(*parts: str, finish: str = "stop") -> bytes:
    events: list[dict[str, Any]] = [{"choices": [{"delta": {"content": p}}]} for p in parts]
    events.append({"choices": [{"delta": {}, "finish_reason": finish}]})
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return body + b"data: [DONE]\n\n"


def popen(*args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rafrx", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        **kw,
    )


def finish(process: subprocess.Popen[str], timeout: float = 15) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err


def wait_for_output(process: subprocess.Popen[str], needle: str, timeout: float = 15) -> str:
    """Read stdout lines until one holds ``needle`` (the process is running by then)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} never appeared in {seen!r}")


def read_until(process: subprocess.Popen[str], needle: str, timeout: float = 15) -> str:
    """Read stdout until it ends with ``needle``, a prompt with no newline after it."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    seen = b""
    while not seen.endswith(needle.encode()) and time.monotonic() < deadline:
        byte = os.read(process.stdout.fileno(), 1)  # (under the text layer: nothing buffered)
        if not byte:
            break
        seen += byte
    assert seen.endswith(needle.encode()), f"{needle!r} never came in {seen!r}"
    return seen.decode()


def run_to_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with stdout a pipe whose reader has already gone (``| head`` that quit)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [sys.executable, "-m", "rafrx", *args],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=ROOT,
            check=False,
        )
    finally:
        os.close(writer)


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer.in_thread() as live:
        yield live


def write_jsonl(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


HEADER = '{"t":0,"kind":"header","fields":{"version":1}}'


# ----------------------------------------------------------------- replay: hostile files


def test_replay_of_a_binary_sse_fails_typed_with_status_1(tmp_path: Path) -> None:
    path = tmp_path / "noise.sse"
    path.write_bytes(bytes(b for b in range(256) if b not in b"\r\n") * 40)
    shown = run("replay", str(path), "--plain")
    assert shown.returncode == 1
    no_traceback(shown)
    assert shown.stdout.strip().splitlines()[-1].startswith("error: IncompleteStream: ")
    as_json = run("replay", str(path), "--json")
    assert as_json.returncode == 1
    assert as_json.stderr.startswith("rafrx replay: stream failed: IncompleteStream: ")
    assert as_json.stderr.count("\n") == 1


def test_replay_of_an_empty_sse_is_an_incomplete_stream(tmp_path: Path) -> None:
    path = tmp_path / "empty.sse"
    path.write_bytes(b"")
    result = run("replay", str(path), "--plain")
    assert result.returncode == 1
    assert "error: IncompleteStream: the stream ended without [DONE]" in result.stdout
    no_traceback(result)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (bytes(range(256)), "codec can't decode"),
        (b'{"t": 0, "kind": "TextDelta", "fields": {"delta": "cu', ":1: not a recorded item"),
        (b'{"t": 0, "kind": "Teleport"}\n', "unknown recorded item kind 'Teleport'"),
    ],
)
def test_replay_of_an_unreadable_jsonl_is_one_line_status_2(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    line = one_line_error(run("replay", str(path)))
    assert line.startswith(f"rafrx replay: error: cannot read {path}: ")
    assert message in line


@pytest.mark.parametrize("target", ["dir", "missing", "dev-null"])
def test_replay_of_something_not_a_file_is_one_line_status_2(tmp_path: Path, target: str) -> None:
    path = {"dir": tmp_path, "missing": tmp_path / "ghost-ü.sse", "dev-null": Path(os.devnull)}
    line = one_line_error(run("replay", str(path[target])))
    assert line == f"rafrx replay: error: no such file: {path[target]}"


def test_replay_of_a_huge_event_streams_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "huge.sse"
    big = "z" * (4 * 1024 * 1024)
    path.write_bytes(chat_sse(big, "!"))
    result = run("replay", str(path), "--plain")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(big + "!\n")
    assert result.stdout.endswith("finish: stop\n")


def test_replay_of_a_malformed_timing_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.sse"
    path.write_bytes(chat_sse("hi"))
    (tmp_path / "t.timing.json").write_text("{not json", encoding="utf-8")
    line = one_line_error(run("replay", str(path)))
    assert line.startswith(f"rafrx replay: error: cannot read {path}: Expecting property name")


def test_replay_of_a_timing_file_naming_an_unknown_dialect(tmp_path: Path) -> None:
    path = tmp_path / "t.sse"
    path.write_bytes(chat_sse("hi"))
    (tmp_path / "t.timing.json").write_text('{"dialect": "klingon"}', encoding="utf-8")
    line = one_line_error(run("replay", str(path)))
    assert "unknown dialect 'klingon'" in line
    explicit = run("replay", str(path), "--dialect", "openai-chat", "--plain")
    assert explicit.returncode == 0  # naming the dialect overrides the file's
    assert explicit.stdout.startswith("hi\n")


# ----------------------------------------------------------------- replay: recorded errors


def test_replay_of_a_recorded_error_shows_the_partial_then_the_typed_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fail.jsonl"
    live = reactivex.concat(
        reactivex.from_iterable([u.ResponseMetadata("r", "mdl"), u.TextDelta("Half of it")]),
        reactivex.throw(HTTPStatusError(529, body="{}", provider_message="Overloaded")),
    ).pipe(convert())
    record(live, path).subscribe(on_error=lambda _: None)
    shown = run("replay", str(path), "--plain")
    assert shown.returncode == 1
    no_traceback(shown)
    assert shown.stdout == "Half of it\nerror: HTTPStatusError: HTTP 529: Overloaded\n"
    as_json = run("replay", str(path), "--json")
    assert as_json.returncode == 1
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert {"type": "TextContent", "text": "Half of it"} in rows
    assert as_json.stderr == (
        "rafrx replay: stream failed: HTTPStatusError: HTTP 529: Overloaded\n"
    )


def test_replay_of_a_recording_made_with_secrets_shows_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "secret.jsonl"
    token = "my-very-private-token-value"
    items = [u.TextDelta(f"key {KEY} and {token}"), u.TextDelta(" done")]
    record(reactivex.from_iterable(items), path, secrets=[token]).subscribe()
    for args in (("--plain",), ("--json",)):
        result = run("replay", str(path), *args)
        assert result.returncode == 0
        assert KEY not in result.stdout + result.stderr
        assert token not in result.stdout + result.stderr
        assert "[REDACTED]" in result.stdout


def test_replay_of_a_provider_error_fixture_in_every_mode() -> None:
    fixture = FIXTURES / "openai-chat" / "openrouter-error-midstream.sse"
    for args in (("--plain",), ("--json",), ("--plain", "--pace", "--speed", "1000")):
        result = run("replay", str(fixture), *args)
        assert result.returncode == 1, args
        no_traceback(result)
        assert "ProviderError" in result.stdout + result.stderr


# ----------------------------------------------------------------- replay: formats


@pytest.mark.parametrize("name", samples())
def test_replay_auto_decodes_each_shipped_sample(name: str) -> None:
    result = run("replay", str(sample(name)), "--json", "--dialect", "auto")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    calls = [(r["name"], r["arguments"]) for r in rows if r["type"] == "ToolCallingContent"]
    assert [name for name, _ in calls] == ["get_weather", "write_file"]
    assert calls[0][1] == {"city": "Paris"}
    text = "".join(r["text"] for r in rows if r["type"] == "TextContent")
    assert text == "Let me check the weather in Paris and save a note for you."


@pytest.mark.parametrize("folder", ["openai-chat", "anthropic", "openai-responses"])
def test_replay_auto_matches_the_named_dialect_on_every_fixture(folder: str) -> None:
    """One subprocess per folder: ``auto`` must decode each fixture exactly as the
    folder's dialect does (same lines, same exit status; generated call ids aside)."""
    script = (
        "import sys, io, contextlib, re\n"
        "from pathlib import Path\n"
        "from rafrx.__main__ import main\n"
        "out = []\n"
        "for f in sorted(Path(sys.argv[1]).glob('*.sse')):\n"
        "    for d in ('auto', sys.argv[2]):\n"
        "        buf = io.StringIO()\n"
        "        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):\n"
        "            code = main(['replay', str(f), '--json', '--dialect', d])\n"
        "        ids = re.sub(r'call_[0-9a-f]{24}', 'call_X', buf.getvalue())\n"
        "        out.append((f.name, code, ids))\n"
        "for a, b in zip(out[::2], out[1::2]):\n"
        "    assert a[1:] == b[1:], a[0]\n"
        "print(len(out) // 2)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(FIXTURES / folder), folder],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(list((FIXTURES / folder).glob("*.sse")))


# ----------------------------------------------------------------- output: pipes, encodings


@pytest.mark.parametrize(
    "args",
    [
        ("replay", "rafrx/data/demo-anthropic.sse", "--json"),
        ("replay", "rafrx/data/demo-anthropic.sse", "--plain"),
        ("replay", "rafrx/data/demo-openai-chat.sse"),
        ("demo", "--plain", "--speed", "50"),
    ],
)
def test_a_closed_stdout_ends_quietly_with_status_1(args: tuple[str, ...]) -> None:
    result = run_to_closed_pipe(*args)
    assert result.returncode == 1
    assert result.stderr == ""


def test_help_and_version_to_a_closed_pipe_are_quiet() -> None:
    for args in (("--help",), ("--version",), ("replay", "--help")):
        result = run_to_closed_pipe(*args)
        assert result.returncode == 0, args
        assert result.stderr == ""


def test_output_to_a_file_is_plain_and_complete(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    with target.open("w", encoding="utf-8") as out:
        result = subprocess.run(
            [sys.executable, "-m", "rafrx", "replay", "rafrx/data/demo-openai-responses.sse"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "NO_COLOR"},
            check=False,
        )
    assert result.returncode == 0
    text = target.read_text(encoding="utf-8")
    assert "\x1b" not in text  # not a terminal: no colours without --plain
    assert "\r" not in text
    assert "[tool] write_file (" in text
    assert text.endswith("finish: tool_calls · model: rafrx-demo\n")


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_narrow_output_encoding_degrades_instead_of_crashing(encoding: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rafrx", "demo", "--plain", "--speed", "50"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONIOENCODING": encoding},
        check=False,
    )
    out = result.stdout.decode(encoding)
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    degree = "°" if encoding == "latin-1" else "?"
    assert f"It's 21 {degree}C and sunny in Paris" in out
    assert "finish: stop" in out


def test_a_missing_file_with_a_non_ascii_name_on_an_ascii_stderr() -> None:
    result = run("replay", "/nowhere/ünïcode-😀.sse", env={"PYTHONIOENCODING": "ascii"})
    assert result.returncode == 2
    no_traceback(result)
    assert result.stderr.startswith("rafrx replay: error: no such file: /nowhere/")


# ----------------------------------------------------------------- signals


def test_sigint_during_demo_is_status_130_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    process = popen("demo", "--plain", "--speed", "0.3", "--record", str(path))
    wait_for_output(process, "[thinking]")
    process.send_signal(signal.SIGINT)
    code, _, err = finish(process)
    assert code == 130
    assert err == "interrupted\n"
    replayed = run("replay", str(path), "--plain")  # what was recorded is kept and readable
    assert replayed.returncode == 1  # a recording cut short is not a whole turn
    assert "[thinking] The user wants the weather in Paris" in replayed.stdout
    assert "IncompleteStream" in replayed.stdout + replayed.stderr


def test_sigint_during_a_paced_replay_is_status_130() -> None:
    process = popen("replay", "rafrx/data/demo-openai-chat.sse", "--pace", "--speed", "0.05")
    # Replaying by then (a fixed sleep was not enough: on a loaded machine the signal came
    # while Python still imported rafrx, a KeyboardInterrupt traceback and status -2).
    wait_for_output(process, "[thinking]")  # (some 8 s of the paced replay are still to come)
    process.send_signal(signal.SIGINT)
    code, _, err = finish(process)
    assert (code, err) == (130, "interrupted\n")


def test_sigterm_during_demo_ends_the_process_by_that_signal() -> None:
    process = popen("demo", "--plain", "--speed", "0.3")
    wait_for_output(process, "[thinking]")
    process.send_signal(signal.SIGTERM)
    code, _, err = finish(process)
    assert code == -signal.SIGTERM
    assert "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_on_a_signal_mid_stream_and_frees_its_port(sig: signal.Signals) -> None:
    process = popen("serve", "--port", "0", "--speed", "0.05")
    url = re.search(r"(http://127\.0\.0\.1:\d+)", wait_for_output(process, "listening on"))
    assert url
    port = int(url.group(1).rsplit(":", 1)[1])
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in ("get_weather", "write_file")
    ]
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": tools,
    }
    got: dict[str, Any] = {}

    def client() -> None:
        request = urllib.request.Request(
            url.group(1) + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                got["first"] = response.read(20)
                got["rest"] = response.read()
        except Exception as exc:  # the server going away mid-body
            got["error"] = exc

    thread = threading.Thread(target=client)
    thread.start()
    deadline = time.monotonic() + 10
    while "first" not in got and time.monotonic() < deadline:
        time.sleep(0.02)
    assert got.get("first", b"").startswith(b"data: ")
    start = time.monotonic()
    process.send_signal(sig)
    code, out, err = finish(process)
    thread.join(10)
    assert time.monotonic() - start < 5  # the open stream does not hold the exit up
    assert code == 0, err
    assert err == ""
    assert "stopped after 1 request(s)" in out
    assert "error" in got  # the client sees a cut stream, not a hang
    again = popen("serve", "--port", str(port))  # the port can be taken again at once
    wait_for_output(again, f"listening on http://127.0.0.1:{port}")
    again.send_signal(signal.SIGTERM)
    assert finish(again)[0] == 0


def test_serve_on_a_bad_host_is_one_line_status_2() -> None:
    line = one_line_error(run("serve", "--host", "no-such-host.invalid", "--port", "0"))
    assert line.startswith("rafrx serve: error: cannot listen on no-such-host.invalid:0")


def test_sigint_while_chat_waits_for_input(server: LLMServer) -> None:
    """Ctrl-C at the chat's prompt. Its stdin is a terminal: the prompt it shows tells
    that it waits for input (a fixed sleep did not: on a loaded machine the signal came
    while Python still imported rafrx, a KeyboardInterrupt traceback and status -2)."""
    terminal, stdin = pty.openpty()
    try:
        process = popen("chat", "--base-url", server.url, "--model", "m", stdin=stdin)
        assert read_until(process, "you> ") == "you> "
        process.send_signal(signal.SIGINT)
        code, out, err = finish(process)
    finally:
        os.close(stdin)
        os.close(terminal)
    assert (code, out, err) == (130, "", "interrupted\n")
    assert len(server.requests) == 0


# ----------------------------------------------------------------- chat against failures


def test_chat_to_a_closed_port_never_prints_the_key() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = run(
        "chat",
        "--base-url",
        url,
        "--model",
        "m",
        "--api-key-env",
        "RAFRX_ADV_KEY",
        stdin="hello\n",
        env={"RAFRX_ADV_KEY": KEY},
    )
    line = one_line_error(result)
    assert line.startswith("rafrx chat: error: endpoint unreachable: cannot connect to ")
    assert KEY not in result.stdout + result.stderr
    assert result.stdout == ""


def test_chat_with_a_key_in_the_base_url_query_never_prints_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/?key={KEY}"
    result = run("chat", "--base-url", url, "--model", "m", stdin="hello\n")
    assert result.returncode == 2
    assert KEY not in result.stdout + result.stderr


def test_chat_masks_a_key_the_server_echoes_back(server: LLMServer) -> None:
    server.enqueue(Fault.status(401, message=f"Incorrect API key provided: {KEY}"))
    result = run(
        "chat",
        "--base-url",
        server.url,
        "--model",
        "m",
        "--api-key-env",
        "RAFRX_ADV_KEY",
        "--plain",
        stdin="hello\n",
        env={"RAFRX_ADV_KEY": KEY},
    )
    no_traceback(result)
    assert KEY not in result.stdout + result.stderr
    assert result.stdout == "error: HTTPStatusError: HTTP 401: Incorrect API key provided: ***\n"


@pytest.mark.parametrize(
    ("fault", "shown"),
    [
        (Fault.wrong_content_type(), "error: ContentTypeError: expected Content-Type"),
        (Fault.status(500, message="boom"), "error: HTTPStatusError: HTTP 500: boom"),
        (Fault.garbage(b"{unparsable}"), "error: MalformedEvent: "),
    ],
)
def test_chat_reports_a_failing_turn_and_takes_the_next(
    server: LLMServer, fault: Fault, shown: str
) -> None:
    server.enqueue(fault, Reply(text="recovered"))
    result = run("chat", "--base-url", server.url, "--model", "m", "--plain", stdin="one\ntwo\n")
    no_traceback(result)
    assert result.stdout.startswith(shown) or f"\n{shown}" in result.stdout
    assert "\nrecovered\n" in result.stdout
    assert result.stdout.endswith("finish: stop · model: m\n")
    assert len(server.requests) == 2


def test_chat_with_no_input_sends_nothing(server: LLMServer) -> None:
    for stdin in ("", "\n   \n", "/quit\nhello\n"):
        result = run("chat", "--base-url", server.url, "--model", "m", stdin=stdin)
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert len(server.requests) == 0


def test_chat_keeps_non_ascii_and_long_lines_intact(server: LLMServer) -> None:
    line = "Grüße aus 東京 😀 " + "x" * 20_000
    server.enqueue(Reply(text="ok"))
    result = run("chat", "--base-url", server.url, "--model", "m", stdin=line + "\n")
    assert result.returncode == 0
    assert server.requests[0].messages[-1]["content"] == line.strip()


def test_replay_works_from_any_working_directory(tmp_path: Path) -> None:
    fixture = FIXTURES / "anthropic" / "anthropic-text-padded.sse"
    result = subprocess.run(
        [sys.executable, "-m", "rafrx", "replay", str(fixture), "--plain"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "finish: stop" in result.stdout
