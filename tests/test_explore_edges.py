"""Edges of the exploration layer: notebook views, timeline, terminal, recorder and CLI.

Strict JSON lines whatever the numbers, secrets cut short in cut calls, previews
bounded by what they show, signals, bad URLs, cut calls in every view.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import reactivex
from reactivex import operators as rxo

from rafrx import content as c
from rafrx import events as e
from rafrx import updates as u
from rafrx.errors import RafrxError
from rafrx.messages import ToolCall
from rafrx.notebook import LiveState, content_html, live, live_html, response_html, timeline
from rafrx.operators import aggregate, convert
from rafrx.recorder import load, record, replay
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.terminal import TerminalRenderer
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec
from tests.test_cli import run as run_cli

ROOT = Path(__file__).resolve().parent.parent
SECRET = "supersecretvalue123456"


def strict_json(line: str) -> Any:
    """``json.loads`` that rejects ``NaN``/``Infinity``, as every other JSON parser does."""

    def reject(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(line, parse_constant=reject)


def chat_sse(*chunks: dict[str, Any], done: bool = True) -> str:
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks)
    return body + ("data: [DONE]\n\n" if done else "")


def tool_call_sse(arguments: str) -> str:
    call = {"index": 0, "id": "call_1", "type": "function"}
    return chat_sse(
        {
            "id": "r1",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "tool_calls": [{**call, "function": {"name": "f", "arguments": arguments}}],
                    },
                }
            ],
        },
        {
            "id": "r1",
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        },
    )


def results_of(updates: list[Any]) -> list[AgentResponseResult]:
    out: list[AgentResponseResult] = (
        reactivex.from_iterable(updates).pipe(convert(), rxo.to_list()).run()
    )
    return out


def record_and_replay(items: list[Any], path: Path, **kwargs: Any) -> list[Any]:
    record(reactivex.from_iterable(items), path, **kwargs).pipe(rxo.to_list()).run()
    back: list[Any] = replay(path).pipe(rxo.to_list()).run()
    return back


# ----------------------------------------------------------------- JSON output validity


def test_replay_json_output_is_strict_json_for_a_huge_number(tmp_path: Path) -> None:
    path = tmp_path / "huge.sse"
    path.write_text(tool_call_sse('{"z": 1e999}'), encoding="utf-8")
    result = run_cli("replay", str(path), "--json")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any('"ToolCallingContent"' in line for line in lines)
    for line in lines:
        strict_json(line)


def test_recording_lines_are_strict_json_for_a_huge_number(tmp_path: Path) -> None:
    updates = [
        u.ToolCallStart("c1", "f"),
        u.ToolCallArgs("c1", '{"z": 1e999}'),
        u.ToolCallEnd("c1"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    path = tmp_path / "huge.jsonl"
    results = results_of(updates)
    back = record_and_replay(results, path)
    assert back == results  # round trip in Python is fine ...
    for line in path.read_text(encoding="utf-8").splitlines():
        strict_json(line)  # ... but the file is not JSON


def test_replay_json_of_a_demo_recording_is_strict_json_and_lossless(tmp_path: Path) -> None:
    target = tmp_path / "demo.jsonl"
    demo = run_cli("demo", "--plain", "--speed", "200", "--record", str(target))
    assert demo.returncode == 0, demo.stderr
    result = run_cli("replay", str(target), "--json")
    assert result.returncode == 0, result.stderr
    lines = [strict_json(line) for line in result.stdout.splitlines()]
    kinds = [line["type"] for line in lines]
    assert kinds.count("ResponseStartedEvent") == 2
    assert kinds.count("ToolCalledContent") == 2
    assert "ToolApprovalRequestEvent" in kinds
    written = next(
        x for x in lines if x["type"] == "ToolCallingContent" and x["name"] == "write_file"
    )
    text = "".join(x["text"] for x in lines if x["type"] == "TextContent")
    assert written["arguments"]["content"].startswith("# Paris, today\n")
    assert "21 °C" in text or "21 \\u00b0C" in text


# ----------------------------------------------------------------- redaction


def test_a_secret_prefix_cut_short_is_redacted_in_the_incomplete_call_too(tmp_path: Path) -> None:
    updates = [
        u.ToolCallStart("c1", "write_file"),
        u.ToolCallArgs("c1", '{"k": "supersecr'),
        u.ToolCallArgs("c1", "etval"),
        u.Finish(FinishReason.LENGTH),
    ]
    results = results_of(updates)
    assert any(isinstance(x, c.ToolCallIncompleteContent) for r in results for x in r.contents)
    path = tmp_path / "cut.jsonl"
    record_and_replay(results, path, secrets=[SECRET])
    text = path.read_text(encoding="utf-8")
    assert "[REDACTED]" in text  # the deltas were redacted ...
    assert "supersecretval" not in text  # ... the incomplete call must be too


def test_chat_masks_a_short_key_the_server_echoes_back() -> None:
    key = "abc123x"  # shorter than what env_secrets() picks up by itself
    with LLMServer.in_thread() as server:
        server.enqueue(Fault.status(401, message=f"bad key {key}"))
        result = run_cli(
            "chat",
            "--base-url",
            server.url,
            "--model",
            "m",
            "--api-key-env",
            "HUNT_KEY",
            "--plain",
            stdin="hi\n",
            env={"HUNT_KEY": key},
        )
    assert result.returncode == 1
    assert key not in result.stdout + result.stderr
    assert "HTTP 401" in result.stdout


# ----------------------------------------------------------------- recording round trips


def test_every_incomplete_call_shape_round_trips_through_a_recording(tmp_path: Path) -> None:
    items: list[Any] = [
        c.ToolCallIncompleteContent("c1", "w", '{"a": "x', {"a": "x"}, FinishReason.LENGTH),
        c.ToolCallIncompleteContent("c2", "w", "{", None),
        c.ToolCallIncompleteContent("c3", "w", '{"k": 1', {"k": 1}, None, error="custom <b>"),
        c.ToolCallIncompleteContent("c4", "w", '{"$type": "X', {"$type": "X"}),
        c.ToolCallingContent("c5", "g", {"$type": "Usage", "$repr": [1, 2]}, "{}"),
        c.ToolCalledContent("c6", result=""),
        c.TextContent("", meta=c.ResponseMetadata("id1", "m")),
    ]
    results = [
        AgentResponseResult(id="r", model="m", contents=[item], finish_reason=FinishReason.LENGTH)
        for item in items
    ]
    results.append(
        AgentResponseResult(events=[e.FinishEvent(FinishReason.LENGTH, Usage(1, 2, 3, 0, 5))])
    )
    back = record_and_replay(results, tmp_path / "shapes.jsonl")
    assert back == results
    assert back[0].contents[0].error.endswith("(finish reason length)")


def _failing_turn() -> list[Any]:
    """Results of a turn whose stream drops while a call's arguments stream."""

    async def go() -> list[Any]:
        from rafrx.sources.clients import OpenAIChatClient

        async with LLMServer() as server:
            body = Reply(
                text="Saving.",
                tool_calls=[ToolCallSpec("write_file", {"path": "a.md", "content": "x" * 400})],
                chunk_size=16,
            )
            server.enqueue(Fault.drop_after(900, body=body))
            client = OpenAIChatClient(server.url, model="m")
            try:
                seen: list[Any] = []
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                client.stream([]).pipe(convert(), rxo.materialize()).subscribe(
                    seen.append, on_completed=lambda: done.set_result(None)
                )
                await asyncio.wait_for(done, 10)
                return seen
            finally:
                await client.aclose()

    return asyncio.run(go())


def test_a_recorded_failed_turn_with_a_cut_call_replays_and_aggregates_the_same(
    tmp_path: Path,
) -> None:
    notifications = _failing_turn()
    items = [n.value for n in notifications if n.kind == "N"]
    error = next(n.exception for n in notifications if n.kind == "E")
    assert isinstance(error, RafrxError)
    source: Any = reactivex.from_iterable(items).pipe(rxo.concat(reactivex.throw(error)))
    path = tmp_path / "failed.jsonl"
    record(source, path).pipe(rxo.materialize(), rxo.to_list()).run()
    recording = load(path)
    assert recording.items == items
    assert type(recording.error) is type(error)

    def partial(stream: Any) -> AgentResponse:
        with pytest.raises(RafrxError) as info:
            stream.pipe(aggregate()).run()
        assert type(info.value) is type(error)
        assert info.value.partial is not None
        return info.value.partial

    live_partial = partial(reactivex.from_iterable(items).pipe(rxo.concat(reactivex.throw(error))))
    replayed = partial(replay(path))
    assert replayed.text == live_partial.text == "Saving."
    assert replayed.tool_calls == live_partial.tool_calls
    (call,) = replayed.tool_calls
    assert isinstance(call, ToolCall)
    assert call.complete is False
    assert call.name == "write_file"


# ----------------------------------------------------------------- terminal


def test_terminal_shows_a_cut_call_inert_and_bounded() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    raw = '{"path": "\x1b]0;owned\x07' + "y" * 1_000_000
    renderer.result(
        AgentResponseResult(
            contents=[
                c.ToolCallStartContent("c1", "w\x1b[2J"),
                c.ToolCallIncompleteContent("c1", "w\x1b[2J", raw, None, FinishReason.LENGTH),
            ]
        )
    )
    text = out.getvalue()
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "never ran: arguments cut short: the response hit its token limit" in text
    assert len(text) < 400


class _PastThePreview:
    """A value JSON can only show by ``repr``: reached only by encoding past the preview."""

    def __repr__(self) -> str:
        raise AssertionError("encoded past what the terminal shows")


def test_terminal_previews_of_huge_values_encode_only_what_they_show() -> None:
    # Work bounded by what is shown (not a timing): the end of each value is never reached.
    rows: list[Any] = [{"i": i, "s": "x" * 10} for i in range(300_000)]
    rows.append(_PastThePreview())
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    renderer.result(
        AgentResponseResult(events=[e.ToolApprovalRequestEvent("c1", "f", {"rows": rows}, "")])
    )
    renderer.result(AgentResponseResult(contents=[c.ToolCallArgsParsedContent("c1", "r", rows)]))
    renderer.result(AgentResponseResult(contents=[c.ToolCalledContent("c1", "y" * 50_000_000)]))
    renderer.close()
    shown = out.getvalue()
    assert len(shown) < 800
    assert 'approval asked: f({"rows": [{"i": 0, "s": "xxxxxxxxxx"}' in shown
    assert "r = [{" in shown


def test_terminal_colour_progress_then_cut_short_leaves_no_half_line() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=True, interval=0.0)
    renderer.result(AgentResponseResult(contents=[c.ToolCallStartContent("c1", "write")]))
    for size in (100, 200, 300):
        renderer.result(
            AgentResponseResult(contents=[c.ToolCallArgsProgressContent("c1", "body", size, "z")])
        )
    renderer.result(AgentResponseResult(contents=[c.ToolCallIncompleteContent("c1", "write", "{")]))
    renderer.close()
    text = out.getvalue()
    last_progress = text.rindex("300 B")
    # the progress line is cleared before the cut-short line is printed
    assert "\r\x1b[K" in text[last_progress:]
    assert text.rstrip("\n").endswith("raw: {\x1b[0m")


# ----------------------------------------------------------------- notebook HTML and state


def test_content_html_of_a_cut_call_escapes_and_clips() -> None:
    raw = "<script>" + "x" * 1_000_000
    html = content_html(c.ToolCallIncompleteContent("c<1", "n<b>", raw, error="why <i>"))
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert "n&lt;b&gt;" in html
    assert "why &lt;i&gt;" in html
    assert len(html) < 3000
    assert "more characters" in html


def test_response_html_lists_a_cut_call_escaped() -> None:
    updates: list[Any] = [
        u.TextDelta("<p>hi</p>"),
        u.ToolCallStart("c<1>", "wr<i>te"),
        u.ToolCallArgs("c<1>", '{"a": "'),
        u.Finish(FinishReason.LENGTH),
    ]
    response: AgentResponse = reactivex.from_iterable(updates).pipe(convert(), aggregate()).run()
    html = response_html(response)
    assert "<p>" not in html
    assert "<i>" not in html
    assert "wr&lt;i&gt;te" in html
    assert "c&lt;1&gt;" in html
    assert "token limit" in html
    ET.fromstring(html.replace("&nbsp;", " "))  # well-formed


def test_live_view_card_of_a_cut_call_and_finish_length() -> None:
    updates = [
        u.ResponseMetadata("r1", "m<x>"),
        u.ToolCallStart("c1", "write_file"),
        u.ToolCallArgs("c1", '{"path": "a.md", "content": "' + "q" * 500),
        u.Finish(FinishReason.LENGTH, Usage(1, 2, 3)),
    ]
    shown: list[Any] = []

    class Handle:
        def update(self, obj: Any, **kwargs: Any) -> None:
            shown.append(obj)

    view = live(reactivex.from_iterable(updates), display=lambda obj, **kw: Handle())
    assert view.done
    card = view.state.cards["c1"]
    assert card.status == "cut short"
    assert card.arguments == {"path": "a.md"}
    assert card.progress["content"].received == 500
    assert view.state.finish_reason is FinishReason.LENGTH
    html = shown[-1].html
    assert "m&lt;x&gt;" in html
    assert "cut short" in html
    assert "tokens: 1 in / 2 out / 3 total" in shown[-1].text
    (call,) = view.response.tool_calls
    assert call.complete is False


def test_live_state_uri_between_text_deltas_keeps_order() -> None:
    state = LiveState()
    for item in (c.TextContent("a"), c.TextContent("b"), c.UriContent("u<1>"), c.TextContent("c")):
        state.add(AgentResponseResult(contents=[item]))
    assert state.blocks == [["text", "ab"], ["uri", "u<1>"], ["text", "c"]]
    assert state.text == "abc"
    assert "u&lt;1&gt;" in live_html(state)


# ----------------------------------------------------------------- timeline


def test_timeline_of_a_recorded_empty_stream_is_valid_svg_with_an_end_bar(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    record(reactivex.empty(), path).pipe(rxo.to_list()).run()
    picture = timeline(path, title="<empty>")
    root = ET.fromstring(picture.svg)
    assert root.tag.endswith("svg")
    assert picture.lanes == ()
    assert "completed at" in picture.svg
    assert "&lt;empty&gt;" in picture.svg


def test_timeline_puts_a_cut_call_on_its_named_lane(tmp_path: Path) -> None:
    updates = [
        u.ToolCallStart("c1", "write_file"),
        u.ToolCallArgs("c1", '{"a": "'),
        u.Finish(FinishReason.LENGTH),
    ]
    picture = timeline([(0.1 * i, x) for i, x in enumerate(updates)])
    assert "write_file · c1" in picture.lanes
    assert 'class="ToolCallIncompleteContent"' in picture.svg
    ET.fromstring(picture.svg)


# ----------------------------------------------------------------- CLI


def test_replay_of_a_call_cut_mid_arguments_shows_it_never_ran(tmp_path: Path) -> None:
    path = tmp_path / "cut.sse"
    body = tool_call_sse('{"city": "Par')
    path.write_text(
        body[: body.index('data: {"id": "r1", "model": "m", "choices": [{"index": 0, "delta": {}')]
    )
    result = run_cli("replay", str(path), "--plain")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "f never ran: arguments cut short" in result.stdout
    assert 'raw: {"city": "Par' in result.stdout
    assert "IncompleteStream" in result.stdout


@pytest.mark.parametrize("url", ["not-a-url", "http://", "http://[::1", "127.0.0.1:9"])
def test_chat_with_a_malformed_base_url_is_one_line_status_2(url: str) -> None:
    result = run_cli("chat", "--base-url", url, "--model", "m", stdin="hi\n")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("rafrx chat: error: invalid --base-url")


def test_sigint_while_chat_streams_is_130_and_closes_the_connection() -> None:
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.005))
        proc = subprocess.Popen(
            [sys.executable, "-m", "rafrx", "chat", "--base-url", server.url, "--model", "m"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write("hi\n")
        proc.stdin.flush()
        first = proc.stdout.read(10)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=10)
        assert first == "word word "
        assert proc.returncode == 130
        assert err == "interrupted\n"
        deadline = time.monotonic() + 2
        while server.open_connections and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.open_connections == 0
