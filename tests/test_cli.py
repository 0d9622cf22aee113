"""The ``rafrx`` command line, run as a subprocess (``sys.executable -m rafrx``)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import reactivex

import rafrx
from rafrx import updates as u
from rafrx.operators import aggregate, convert
from rafrx.recorder import record
from rafrx.response import FinishReason
from rafrx.sources import from_sse
from rafrx.testing import LLMServer, Reply

FIXTURES = Path(__file__).parent / "data" / "fixtures"
ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def run(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "rafrx", *args],
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})},
        check=False,
    )


def run_here(
    capsys: pytest.CaptureFixture[str], *args: str, stdin: str = ""
) -> tuple[int, str, str]:
    """The CLI in this process (cheaper than a subprocess): status, stdout, stderr."""
    import io

    from rafrx.__main__ import main

    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        code = main(list(args))
    finally:
        sys.stdin = saved
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(result: Any) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return str(lines[0])


def expected(fixture: str) -> dict[str, Any]:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text(encoding="utf-8"))
    entry: dict[str, Any] = next(e for e in manifest if e["path"] == fixture)
    return entry["expected"]  # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------- help and bad arguments


def test_help_lists_the_commands_and_each_has_its_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rafrx.__main__ import build_parser, main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    top = capsys.readouterr().out
    for command in ("demo", "replay", "chat", "serve"):
        assert command in top

    parser = build_parser()
    for command, option in [
        ("demo", "--format"),
        ("replay", "--json"),
        ("chat", "--base-url"),
        ("serve", "--port"),
    ]:
        with pytest.raises(SystemExit) as done:
            parser.parse_args([command, "--help"])
        assert done.value.code == 0
        assert option in parser._subparsers._group_actions[0].choices[command].format_help()  # type: ignore[union-attr]


def test_subcommand_help_as_a_subprocess() -> None:
    result = run("chat", "--help")
    assert result.returncode == 0
    assert "--api-key-env" in result.stdout
    assert "usage: rafrx chat" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("demo", "--format", "nope"), "invalid choice: 'nope'"),
        (("fly",), "invalid choice: 'fly'"),
        (("replay",), "the following arguments are required: file"),
        (("chat", "--model", "m"), "the following arguments are required: --base-url"),
        (("serve", "--port", "99999"), "port out of range: 99999"),
        (("demo", "--speed", "-1"), "must be > 0"),
    ],
)
def test_bad_arguments_give_one_line_and_status_2(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rafrx.__main__ import main

    with pytest.raises(SystemExit) as done:
        main(list(args))
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert message in err
    assert "--help" in err


def test_bad_arguments_as_a_subprocess() -> None:
    line = one_line_error(run("replay", "x.sse", "--dialect", "klingon"))
    assert line.startswith("rafrx replay: error: argument --dialect: invalid choice")


def test_missing_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_here(capsys, "replay", "does/not/exist.sse")
    assert code == 2
    assert err == "rafrx replay: error: no such file: does/not/exist.sse\n"


# ----------------------------------------------------------------- replay


def test_replay_shows_a_fixture() -> None:
    fixture = "anthropic/anthropic-thinking-tool-use.sse"
    result = run("replay", str(FIXTURES / fixture), "--plain")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert "[thinking] The user is asking for weather information for Florence" in result.stdout
    assert "[tool] weather (toolu_01Js4AMfx5qpTLhwTusnvT68)" in result.stdout
    assert '  location = "Florence, Italy"' in result.stdout
    assert "finish: tool_calls · model: claude-sonnet-4-20250514" in result.stdout


def test_replay_json_prints_every_content_as_a_line() -> None:
    fixture = "openai-chat/openai-text-then-tool-call.sse"
    result = run("replay", str(FIXTURES / fixture), "--json", "--dialect", "openai-chat")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [row["type"] for row in rows]
    assert kinds[0] == "ResponseStartedEvent"
    assert "FinishEvent" in kinds
    text = "".join(row["text"] for row in rows if row["type"] == "TextContent")
    want = expected(fixture)
    assert text == want["text"]
    calls = [row for row in rows if row["type"] == "ToolCallingContent"]
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (call["name"], call["arguments"]) for call in want["tool_calls"]
    ]


def test_replay_of_a_failing_stream_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "openai-chat" / "groq-error-event.sse"
    code, out, _ = run_here(capsys, "replay", str(fixture), "--plain")
    assert code == 1
    assert "\nerror: ProviderError: Tool call validation failed" in out
    assert out.count("Tool call validation failed") == 1
    code, _, err = run_here(capsys, "replay", str(fixture), "--json")
    assert code == 1
    assert err.startswith("rafrx replay: stream failed: ProviderError: Tool call validation")


def test_replay_of_a_jsonl_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "turn.jsonl"
    turn = [u.TextDelta("Recorded "), u.TextDelta("<answer>"), u.Finish(FinishReason.STOP)]
    record(reactivex.from_iterable(turn).pipe(convert()), path).run()
    code, out, _ = run_here(capsys, "replay", str(path), "--plain")
    assert code == 0
    assert "Recorded <answer>" in out
    assert "finish: stop" in out
    code, out, _ = run_here(capsys, "replay", str(path), "--json", "--pace", "--speed", "10")
    texts = [json.loads(x).get("text") for x in out.splitlines()]
    assert "".join(t for t in texts if t) == "Recorded <answer>"


def test_replay_of_a_corrupt_recording_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("this is not json\n", encoding="utf-8")
    code, _, err = run_here(capsys, "replay", str(path))
    assert code == 2
    assert err.count("\n") == 1
    assert "bad.jsonl:1: not a recorded item" in err


# ----------------------------------------------------------------- demo


DEMO_LINES = [
    "[tool] get_weather (",
    '  city = "Paris"',
    "[tool] write_file (",
    '  path = "paris.md"',
    "  content: 1.3 KiB received · # Paris, today",
    "[approve?] approval asked: write_file(",
    '[ok] get_weather → {"city": "Paris", "temp_c": 21, "sky": "sunny", "wind_kmh": 12}',
    "[ok] write_file → wrote 1284 bytes to paris.md (in memory)",
    "It's 21 °C and sunny in Paris, with a light westerly breeze.",
    "finish: stop · model: rafrx-demo",
]


def check_demo(out: str) -> None:
    assert "\x1b" not in out
    assert "\r" not in out
    assert "[thinking] The user wants the weather in Paris" in out
    positions = [out.find(line) for line in DEMO_LINES]
    assert -1 not in positions, [x for x, p in zip(DEMO_LINES, positions, strict=True) if p < 0]
    assert positions == sorted(positions)  # in the order they happened
    assert "-- step 2 (rafrx-demo) --" in out


def test_demo_shows_a_tool_calling_turn() -> None:
    start = time.monotonic()
    result = run("demo", "--plain", "--speed", "3")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - start < 30
    assert "rafrx demo · openai-chat · scripted server at http://127.0.0.1:" in result.stdout
    check_demo(result.stdout)


def test_demo_can_record_the_turn_for_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "demo.jsonl"
    code, shown, _ = run_here(capsys, "demo", "--plain", "--speed", "5", "--record", str(path))
    assert code == 0
    code, replayed, _ = run_here(capsys, "replay", str(path), "--plain")
    assert code == 0
    check_demo(replayed)
    # the same lines, minus the demo's own notes (header, prompt, approval decision)
    notes = ("rafrx demo", "you: ", "approved write_file")
    assert [x for x in shown.splitlines() if not x.startswith(notes)] == replayed.splitlines()


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
def test_demo_in_every_wire_format(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_here(capsys, "demo", "--plain", "--format", fmt, "--speed", "4")
    assert (code, err) == (0, "")
    assert f"rafrx demo · {fmt} · scripted server at http://127.0.0.1:" in out
    check_demo(out)


def _run_in_pty(*args: str, timeout: float = 60) -> tuple[int, bytes]:
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on a pseudo-terminal
        os.environ.pop("NO_COLOR", None)
        os.environ["TERM"] = "xterm-256color"
        os.execv(sys.executable, [sys.executable, "-m", "rafrx", *args])
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            output += data
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output


def test_demo_in_a_terminal_uses_colour_and_in_place_progress() -> None:
    code, raw = _run_in_pty("demo", "--speed", "3", "--format", "anthropic")
    assert code == 0, raw[-2000:]
    text = raw.decode("utf-8")
    assert "\x1b[" in text  # ANSI styles
    assert "\r\x1b[K  content" in text  # the progress line is redrawn in place
    plain = ANSI.sub("", text).replace("\r\n", "\n")
    assert "🔧 get_weather (" in plain
    assert "✓ write_file → wrote 1284 bytes to paris.md (in memory)" in plain
    assert "It's 21 °C and sunny in Paris" in plain
    assert "finish: stop" in plain


# ----------------------------------------------------------------- chat


def test_chat_against_a_local_server_keeps_the_conversation() -> None:
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="Bonjour !"), Reply(text="You said hello before."))
        result = run(
            "chat",
            "--base-url",
            server.url,
            "--model",
            "local-model",
            "--api-key-env",
            "RAFRX_TEST_KEY",
            "--plain",
            stdin="hello\n\nwhat did I say?\n/exit\nnot sent\n",
            env={"RAFRX_TEST_KEY": "sk-cli-test-0123456789abcdef"},
        )
        requests = list(server.requests)
    assert result.returncode == 0, result.stderr
    assert "Bonjour !" in result.stdout
    assert "You said hello before." in result.stdout
    assert "sk-cli-test" not in result.stdout + result.stderr
    assert len(requests) == 2  # the blank line is skipped; /exit stops before "not sent"
    assert requests[0].headers["authorization"] == "Bearer ***"  # a key was sent
    assert requests[1].model == "local-model"
    roles = [(m["role"], m["content"]) for m in requests[1].messages]
    assert roles == [("user", "hello"), ("assistant", "Bonjour !"), ("user", "what did I say?")]


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
def test_chat_speaks_the_other_formats(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text=f"hi over {fmt}"))
        args = ("chat", "--base-url", server.url, "--model", "m", "--format", fmt)
        code, out, _ = run_here(capsys, *args, stdin="hi\n")
        paths = [r.path for r in server.requests]
    assert code == 0
    assert f"hi over {fmt}" in out
    assert paths == ["/v1/messages" if fmt == "anthropic" else "/v1/responses"]


def test_chat_with_an_unreachable_endpoint_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(run("chat", "--base-url", url, "--model", "m", stdin="hello\n"))
    assert line.startswith("rafrx chat: error: endpoint unreachable: ")
    assert f"{url}/v1/chat/completions" in line


def test_chat_reports_http_errors_and_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    from rafrx.testing import Fault

    with LLMServer.in_thread() as server:
        server.enqueue(Fault.status(401, message="bad key"), Reply(text="second try works"))
        args = ("chat", "--base-url", server.url, "--model", "m", "--plain")
        code, out, _ = run_here(capsys, *args, stdin="a\nb\n")
        second = server.requests[1].messages
    assert code == 0
    assert out.startswith("error: HTTPStatusError: HTTP 401: bad key\n")
    assert "second try works" in out
    assert "step 2" not in out  # each line is a turn of its own
    assert [m["content"] for m in second] == ["b"]  # the failed turn left no history


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--api-key-env", "RAFRX_SURELY_UNSET"),
            "environment variable RAFRX_SURELY_UNSET is not set",
        ),
        (("--base-url", "not a url"), "invalid --base-url"),
    ],
)
def test_chat_configuration_errors(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["chat", "--model", "m"]
    if "--base-url" not in args:
        base += ["--base-url", "http://127.0.0.1:9"]
    code, _, err = run_here(capsys, *base, *args, stdin="hi\n")
    assert code == 2
    assert err.count("\n") == 1
    assert message in err


# ----------------------------------------------------------------- serve


def _post(url: str, body: dict[str, Any]) -> bytes:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


def test_serve_runs_until_interrupted() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "rafrx", "serve", "--port", "0", "--speed", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", first)
        assert match, first
        url = match.group(1)
        tools = [
            {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
            for name in ("get_weather", "write_file")
        ]
        chat = {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": tools,
        }
        body = _post(url + "/v1/chat/completions", chat)
        assert b'"name":"get_weather"' in body
        assert body.endswith(b"data: [DONE]\n\n")
        plain = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "ping"}]}
        answer = from_sse(_post(url + "/v1/messages", plain), "anthropic")
        assert answer.pipe(convert(), aggregate()).run().text == "You said: ping"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "stopped after 2 request(s)" in out
    assert "Traceback" not in err


def test_serve_on_a_busy_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run_here(capsys, "serve", "--port", str(port))
    assert code == 2
    assert err.startswith(f"rafrx serve: error: cannot listen on 127.0.0.1:{port}")
    assert err.count("\n") == 1


# ----------------------------------------------------------------- the terminal renderer


def _render(results: list[Any], *, color: bool, interval: float = 0.05) -> str:
    import io

    from rafrx.terminal import TerminalRenderer

    stream = io.StringIO()
    renderer = TerminalRenderer(stream, color=color, interval=interval)
    for result in results:
        renderer.result(result)
    renderer.close()
    return stream.getvalue()


def _turn() -> list[Any]:
    from rafrx import content as c
    from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
    from rafrx.response import AgentResponseResult as R
    from rafrx.response import Usage

    long = "x" * 500
    return [
        R(events=[ResponseStartedEvent("r1", "m")], contents=[c.ReasoningContent("Hmm, ")]),
        R(contents=[c.ReasoningContent("let me see.")]),
        R(contents=[c.TextContent("Writing ")]),
        R(contents=[c.TextContent("it.")]),
        R(contents=[c.ToolCallStartContent("c1", "write_file")]),
        *(
            R(contents=[c.ToolCallArgsProgressContent("c1", "content", n, "x" * 50)])
            for n in range(50, 550, 50)
        ),
        R(contents=[c.ToolCallArgsParsedContent("c1", "content", long)]),
        R(contents=[c.ToolCallArgsParsedContent("c1", "mode", "w")]),
        R(events=[FinishEvent(FinishReason.TOOL_CALLS, Usage(1, 2, 3))]),
        R(events=[ToolApprovalRequestEvent("c1", "write_file", {"mode": "w"})]),
        R(contents=[c.ToolCalledContent("c1", result="done")]),
        R(events=[ResponseStartedEvent("r2", "m")], contents=[c.TextContent("Saved.")]),
        R(contents=[c.ToolCalledContent("zz", error="boom")]),
    ]


def test_plain_rendering_is_append_only_text() -> None:
    out = _render(_turn(), color=False)
    assert out == (
        "[thinking] Hmm, let me see.\n"
        "Writing it.\n"
        "[tool] write_file (c1)\n"
        "  content: 500 B received · " + "x" * 59 + "…\n"
        '  mode = "w"\n'
        "tokens: 1 in / 2 out / 3 total · tool_calls\n"
        '[approve?] approval asked: write_file({"mode": "w"})\n'
        "[ok] write_file → done\n"
        "-- step 2 (m) --\n"
        "Saved.\n"
        "[failed] zz: boom\n"
    )


def test_colour_rendering_redraws_progress_in_place_at_a_bounded_rate() -> None:
    fast = _render(_turn(), color=True, interval=0.0)
    slow = _render(_turn(), color=True, interval=60.0)
    assert fast.count("\r\x1b[K") == 9  # 9 updates from 100 bytes on: 8 redraws, 1 clear
    assert slow.count("\r\x1b[K") == 1  # the first one only; the parsed line replaces it
    plain = ANSI.sub("", slow).replace("\r", "")
    assert "🔧 write_file (c1)" in plain
    assert "✓ write_file → done" in plain
    assert "\x1b[2m💭 Hmm, let me see." in slow  # reasoning is dim


def test_renderer_shows_an_error_once() -> None:
    import io

    from rafrx import content as c
    from rafrx.errors import ProviderError
    from rafrx.response import AgentResponseResult as R
    from rafrx.terminal import TerminalRenderer, supports_color

    stream = io.StringIO()
    renderer = TerminalRenderer(stream, color=False)
    renderer.result(R(contents=[c.TextContent("Half"), c.ErrorContent("overloaded")]))
    renderer.error(ProviderError("overloaded"))
    assert stream.getvalue() == "Half\nerror: ProviderError: overloaded\n"
    renderer.result(R(contents=[c.ErrorContent("in-band only")]))
    renderer.response(rafrx.AgentResponse(finish_reason=FinishReason.ERROR))
    assert stream.getvalue().endswith("error: in-band only\nfinish: error\n")
    assert not supports_color(stream)


def test_replay_json_rows_carry_every_field_even_a_derived_default() -> None:
    fixture = FIXTURES / "anthropic" / "anthropic-max-tokens-truncated-tool-json.sse"
    result = run("replay", str(fixture), "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    (cut,) = [row for row in rows if row["type"] == "ToolCallIncompleteContent"]
    assert cut["finish_reason"] == "length"
    assert cut["error"] == (
        "arguments cut short: the response hit its token limit (finish reason length)"
    )
    texts = [row for row in rows if row["type"] == "TextContent"]
    assert texts
    assert all(set(row) == {"type", "text"} for row in texts)


@pytest.mark.parametrize("calls", [1, 2])
def test_the_footer_shows_turn_totals_once(calls: int) -> None:
    import io

    from rafrx.events import FinishEvent, ResponseStartedEvent
    from rafrx.response import AgentResponseResult as R
    from rafrx.response import FinishReason, Usage
    from rafrx.terminal import TerminalRenderer

    results = [
        R(
            events=[
                ResponseStartedEvent(f"r{n}", "m"),
                FinishEvent(FinishReason.STOP, Usage(1, 2, 3)),
            ]
        )
        for n in range(calls)
    ]
    stream = io.StringIO()
    renderer = TerminalRenderer(stream, color=False)
    for result in results:
        renderer.result(result)
    renderer.response(reactivex.from_iterable(results).pipe(aggregate()).run())
    lines = stream.getvalue().splitlines()
    assert lines.count("tokens: 1 in / 2 out / 3 total · stop") == calls
    totals = "tokens: 2 in / 4 out / 6 total · "
    assert lines[-1] == ("" if calls == 1 else totals) + "finish: stop"


@pytest.mark.parametrize(
    "fixture",
    [
        "openai-responses/responses-reasoning-summary-tool.sse",  # a ref after its call
        "openai-chat/openrouter-anthropic-thinking-tool.sse",  # reasoning_details at the end
    ],
)
def test_replay_shows_no_empty_thinking_for_data_kept_to_send_back(
    capsys: pytest.CaptureFixture[str], fixture: str
) -> None:
    # Blocks kept to go back in a tool loop come as empty reasoning deltas: nothing to show.
    code, out, _ = run_here(capsys, "replay", str(FIXTURES / fixture), "--plain")
    assert code == 0
    assert out.count("[thinking]") == 1, out
    assert not [line for line in out.splitlines() if line.strip() == "[thinking]"], out
