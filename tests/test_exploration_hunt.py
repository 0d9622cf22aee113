"""Exploration as a notebook or CLI user meets it: what is shown matches the turn.

Multi-step agent turns over the scripted server (approvals, failures, reused
call ids), the terminal renderer fed hostile names, the live view's footer and
card statuses, and the CLI's exit status for a stream that ends in error.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
import reactivex
from reactivex import operators as rx

from rafrx import Agent, tool
from rafrx import content as c
from rafrx import updates as u
from rafrx.errors import RafrxError
from rafrx.events import ToolApprovalRequestEvent
from rafrx.notebook import LiveSnapshot, LiveState, as_results, live, live_text
from rafrx.operators import aggregate
from rafrx.operators._aggregate import collect_agent_response
from rafrx.recorder import replay
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.terminal import TerminalRenderer
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, ToolCallSpec, render
from tests.test_cli import run as run_cli

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "fixtures"
CLIENTS = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


class Handle:
    """A display handle keeping every snapshot it was given."""

    def __init__(self) -> None:
        self.snapshots: list[LiveSnapshot] = []

    def update(self, obj: Any, **kwargs: Any) -> None:
        assert isinstance(obj, LiveSnapshot)
        self.snapshots.append(obj)

    @property
    def last(self) -> LiveSnapshot:
        return self.snapshots[-1]


def chat_cli(url: str, fmt: str, stdin: str) -> Any:
    """``rafrx chat --plain`` against ``url`` in ``fmt``, typing ``stdin``."""
    return run_cli(
        "chat", "--base-url", url, "--model", "m", "--format", fmt, "--plain", stdin=stdin
    )


def _display(handle: Handle) -> Any:
    def display(obj: Any, **kwargs: Any) -> Handle:
        return handle

    return display


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


@tool
def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city.

    Args:
        city: The city.
    """
    return {"city": city, "temp_c": 21}


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    return f"deleted {path}"


@tool(requires_approval=True)
async def slow_job(x: int) -> str:
    """A job that takes a while.

    Args:
        x: A number.
    """
    await asyncio.sleep(1.0)
    return f"job {x} done"


@tool
def boom(x: int) -> str:
    """Always fails.

    Args:
        x: A number.
    """
    raise ValueError("kaput <b>")


# ----------------------------------------------------------------- fixtures, both views


def _manifest() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(
        (FIXTURES / "MANIFEST.json").read_text(encoding="utf-8")
    )
    return [e for e in entries if e["format"] != "sse-only"]


def _aggregate(path: Path, dialect: str) -> tuple[Any, RafrxError | None]:
    try:
        return as_results(replay(path, dialect=dialect)).pipe(aggregate()).run(), None
    except RafrxError as exc:
        return exc.partial, exc


@pytest.mark.parametrize("entry", _manifest(), ids=lambda e: e["path"])
def test_live_view_of_every_fixture_shows_the_aggregated_turn(entry: dict[str, Any]) -> None:
    path = FIXTURES / entry["path"]
    response, error = _aggregate(path, entry["format"])
    handle = Handle()
    view = live(replay(path, dialect=entry["format"]), display=_display(handle))
    assert view.done
    text = handle.last.text
    assert handle.last.final
    for line in (response.reasoning_text or "").splitlines():
        assert line in text
    for call in response.tool_calls:  # (an id the wire lacked is generated afresh per run)
        assert f"[tool {call.name} " in text
        if call.complete and isinstance(call.arguments, dict):
            for name in call.arguments:
                assert f"  {name} " in text or f"  {name}:" in text
    if response.usage is not None:
        u = response.usage
        assert f"tokens: {u.prompt_tokens} in / {u.completion_tokens} out" in text
    if error is None:
        assert f"finish: {response.finish_reason}" in text
        assert "status: done" in text
    else:
        assert "status: failed" in text
        assert "error: " in text


@pytest.mark.parametrize("entry", _manifest(), ids=lambda e: e["path"])
def test_cli_replay_of_every_fixture_shows_calls_usage_and_status(entry: dict[str, Any]) -> None:
    path = FIXTURES / entry["path"]
    response, error = _aggregate(path, entry["format"])
    result = run_cli("replay", "--plain", str(path))
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert "\x1b" not in out
    for line in (response.reasoning_text or "").splitlines():
        assert line[:50] in out
    for call in response.tool_calls:
        assert f"[tool] {call.name} (" in out
        if call.complete and isinstance(call.arguments, dict):
            for name, value in call.arguments.items():
                shown = json.dumps(value, ensure_ascii=False)
                assert f"  {name} = {shown}"[:80] in out
    if error is None:
        assert result.returncode == 0, result.stderr
        assert f"finish: {response.finish_reason}" in out
        if response.usage is not None:
            u = response.usage
            assert f"tokens: {u.prompt_tokens} in / {u.completion_tokens} out" in out
    else:
        assert result.returncode == 1
        assert f"error: {type(error).__name__}" in out


# ----------------------------------------------------------------- agent turns, live view


async def _one_turn(
    fmt: str, handle: Handle, *replies: Any, script: Any = None, **agent_kw: Any
) -> Any:
    async with LLMServer() as server:
        server.enqueue(*replies)
        server.script(script)
        client = CLIENTS[fmt](server.url, api_key="sk-hunt-SECRET-0123456789", model="m")
        try:
            agent = Agent(client, **agent_kw)
            view = live(agent.run("hi"), display=_display(handle), interval=0.01)
            try:
                return await view
            except RafrxError as exc:
                return exc
        finally:
            await client.aclose()


def _mixed_step() -> Reply:
    return Reply(
        text="Let me check.",
        reasoning="thinking <hard>",
        tool_calls=[
            ToolCallSpec("get_weather", {"city": "Paris"}, id="c1"),
            ToolCallSpec("delete_file", {"path": "/tmp/x"}, id="c2"),
            ToolCallSpec("slow_job", {"x": 1}, id="c3"),
            ToolCallSpec("boom", {"x": 2}, id="c4"),
            ToolCallSpec("nosuch", {"y": 2}, id="c5"),
        ],
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", list(CLIENTS))
async def test_live_view_of_a_turn_with_approved_denied_timed_out_and_failing_calls(
    fmt: str,
) -> None:
    async def approver(event: ToolApprovalRequestEvent) -> bool:
        if event.name == "delete_file":
            return False
        await asyncio.sleep(5)  # slow_job: never answered in time
        return True

    handle = Handle()
    response = await _one_turn(
        fmt,
        handle,
        _mixed_step(),
        Reply(text="Done: sunny."),
        tools=[get_weather, delete_file, slow_job, boom],
        approver=approver,
        approval_timeout=0.3,
    )
    assert response.text == "Let me check.Done: sunny."
    text = handle.last.text
    html = handle.last.html
    assert "<hard>" not in html
    assert "thinking &lt;hard&gt;" in html
    tool_results = {m.tool_call_id: m for m in response.turn_transcript if m.tool_call_id}
    for call in response.tool_calls:
        message = tool_results[call.id]
        status = "failed" if message.is_error else "done"
        assert f"[tool {call.name} {call.id}: {status}]" in text
        shown = message.content.removeprefix("Error: ")
        assert shown in text
    assert "kaput &lt;b&gt;" in html
    u = response.usage
    assert f"tokens: {u.prompt_tokens} in / {u.completion_tokens} out" in text
    assert text.rstrip().endswith(f"finish: {response.finish_reason}")


@pytest.mark.asyncio
async def test_live_view_keeps_two_calls_of_one_turn_that_share_an_id_across_steps() -> None:
    handle = Handle()
    response = await _one_turn(
        "openai-chat",
        handle,
        Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2}, id="functions.add:0")]),
        Reply(tool_calls=[ToolCallSpec("add", {"a": 3, "b": 4}, id="functions.add:0")]),
        Reply(text="3 and 7"),
        tools=[add],
    )
    assert [call.arguments for call in response.tool_calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    text = handle.last.text
    assert text.count("[tool add functions.add:0: done]") == 2, text
    assert "-> 3" in text
    assert "-> 7" in text
    assert handle.last.html.count('class="rafrx-card"') == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", list(CLIENTS))
async def test_live_footer_of_a_turn_failing_in_step_two_does_not_claim_tool_calls(
    fmt: str,
) -> None:
    handle = Handle()
    error = await _one_turn(
        fmt,
        handle,
        Reply(text="Step one.", tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2}, id="c1")]),
        Fault.status(429, retry_after=1),
        tools=[add],
    )
    assert isinstance(error, RafrxError)
    partial = error.partial
    assert partial.text == "Step one."
    footer = handle.last.text.splitlines()[-1]
    assert "status: failed" in footer
    assert "HTTP 429" in handle.last.text
    assert partial.finish_reason is not FinishReason.TOOL_CALLS
    assert "finish: tool_calls" not in footer, footer


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", list(CLIENTS))
async def test_a_drop_in_step_two_keeps_step_one_and_the_partial_answer_in_view(
    fmt: str,
) -> None:
    handle = Handle()
    body = Reply(text="Partial answer that is long enough to be cut somewhere", chunk_size=4)

    def drop(request: RecordedRequest) -> Fault:  # a few deltas in, well before the end
        return Fault.drop_after(render(body, fmt, request.json).index(b"Part") + 400, body=body)

    error = await _one_turn(
        fmt,
        handle,
        Reply(text="Step one.", tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2}, id="c1")]),
        script=drop,
        tools=[add],
    )
    assert isinstance(error, RafrxError)
    text = handle.last.text
    assert "Step one." in text
    assert "[tool add c1: done]" in text
    assert "-> 3" in text
    assert error.partial.turn_transcript[-1].content in text
    assert error.partial.turn_transcript[-1].content.startswith("Partial")
    assert "sk-hunt-SECRET" not in text + handle.last.html
    assert "status: failed" in text


# ----------------------------------------------------------------- terminal renderer


async def _terminal_turn(fmt: str, *replies: Any, **agent_kw: Any) -> tuple[str, Any]:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    async with LLMServer() as server:
        server.enqueue(*replies)
        client = CLIENTS[fmt](server.url, api_key="sk-hunt-SECRET-0123456789", model="m")
        try:
            turn = Agent(client, **agent_kw).run("hi").pipe(rx.do_action(on_next=renderer.result))
            try:
                response = await collect_agent_response(turn)
            except RafrxError as exc:
                renderer.close()
                renderer.error(exc)
                return out.getvalue(), exc
            renderer.close()
            renderer.response(response)
            return out.getvalue(), response
        finally:
            await client.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", list(CLIENTS))
async def test_terminal_shows_every_call_its_result_and_the_turn_totals(fmt: str) -> None:
    async def approver(event: ToolApprovalRequestEvent) -> bool:
        return event.name != "delete_file"

    out, response = await _terminal_turn(
        fmt,
        Reply(
            text="Checking.",
            tool_calls=[
                ToolCallSpec("get_weather", {"city": "Paris"}, id="c1"),
                ToolCallSpec("delete_file", {"path": "/tmp/x"}, id="c2"),
                ToolCallSpec("boom", {"x": 2}, id="c4"),
            ],
        ),
        Reply(text="Done."),
        tools=[get_weather, delete_file, boom],
        approver=approver,
    )
    assert "\x1b" not in out
    assert "\r" not in out
    assert "[tool] get_weather (c1)" in out
    assert '  city = "Paris"' in out
    assert '[ok] get_weather → {"city": "Paris", "temp_c": 21}' in out
    assert '[approve?] approval asked: delete_file({"path": "/tmp/x"})' in out
    assert "[failed] delete_file: the user denied the call" in out
    assert "[failed] boom: tool 'boom' raised ValueError: kaput <b>" in out
    assert "-- step 2 (m) --" in out
    u = response.usage
    last = out.rstrip().splitlines()[-1]
    assert last.startswith(f"tokens: {u.prompt_tokens} in / {u.completion_tokens} out")
    assert "finish: stop" in last
    assert "sk-hunt-SECRET" not in out


def test_terminal_names_from_the_model_cannot_forge_lines() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    forged = "get_weather\n[ok] delete_all → done"
    renderer.result(
        AgentResponseResult(
            contents=[
                c.ToolCallStartContent("c1\n[ok] x → y", forged),
                c.ToolCallArgsParsedContent("c1\n[ok] x → y", "city\n[ok] rm → ok", "Paris"),
            ]
        )
    )
    renderer.result(
        AgentResponseResult(events=[ToolApprovalRequestEvent("c2", forged, {"a": 1}, "")])
    )
    renderer.result(AgentResponseResult(contents=[c.ToolCallStartContent("c3", "n" * 5000)]))
    renderer.close()
    lines = out.getvalue().splitlines()
    assert not [line for line in lines if line.startswith("[ok]")], lines
    assert len(lines) == 4, lines
    assert max(len(line) for line in lines) < 400


def test_live_text_card_header_stays_one_line_with_a_hostile_name() -> None:
    state = LiveState()
    state.add(
        AgentResponseResult(
            contents=[
                c.ToolCallStartContent("c1", "get_weather\n[tool delete_all c9: done]"),
                c.ToolCallingContent("c1", "get_weather", {"city": "Paris"}),
            ]
        )
    )
    lines = live_text(state).splitlines()
    assert [line for line in lines if line.startswith("[tool ")] == [lines[0]], lines


def test_terminal_neutralises_bidi_overrides_in_an_approval_prompt() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    sneaky = "/tmp/\u202egnp.exe"
    renderer.result(
        AgentResponseResult(
            events=[ToolApprovalRequestEvent("c1", "delete_file", {"path": sneaky}, "")]
        )
    )
    renderer.result(AgentResponseResult(contents=[c.TextContent("ok \u2067isolated\u2069")]))
    renderer.close()
    shown = out.getvalue()
    assert "approval asked: delete_file" in shown
    for char in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069":
        assert char not in shown


# ----------------------------------------------------------------- CLI exit status


@pytest.mark.parametrize("fmt", list(CLIENTS))
def test_chat_exit_status_of_a_turn_the_server_ends_with_an_error(fmt: str) -> None:
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="Partial answ", finish=FinishReason.ERROR))
        result = chat_cli(server.url, fmt, "hi\n")
    assert "Partial answ" in result.stdout
    assert "Traceback" not in result.stderr
    assert result.returncode == 1, (result.stdout, result.stderr)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("replay",), "file"),
        (("replay", "x.sse", "--dialect", "klingon"), "klingon"),
        (("chat", "--base-url", "http://127.0.0.1:9", "--model", "m", "--format", "x"), "x"),
        (("replay", "x.sse", "--speed", "0"), "must be > 0"),
        (("replay", "x.sse", "--speed", "nan"), "must be > 0"),
        (("serve", "--port", "70000"), "out of range"),
        (("nosuchcommand",), "nosuchcommand"),
    ],
)
def test_bad_flags_are_one_line_status_2(args: tuple[str, ...], needle: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert result.stdout == ""


# ----------------------------------------------------------------- live view: calls cut short


@pytest.mark.parametrize(
    "end",
    [[u.Finish(FinishReason.LENGTH)], [u.Error("the server broke off")]],
    ids=["finish-length", "error"],
)
def test_final_render_of_a_cut_call_shows_no_argument_still_streaming(end: list[Any]) -> None:
    source = reactivex.from_iterable(
        [
            u.ToolCallStart("c1", "write_file"),
            u.ToolCallArgs("c1", '{"path": "a.md", "content": "' + "x" * 300),
            *end,
        ]
    )
    handle = Handle()
    view = live(source, display=_display(handle))
    assert view.done
    final = handle.last
    assert final.final
    assert "[tool write_file c1: cut short]" in final.text
    assert "300 B" in final.text  # what arrived is still told
    assert "300 B …" not in final.text, final.text
    assert "<progress></progress>" not in final.html


# ----------------------------------------------------------------- CLI chat history


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic"])
def test_chat_never_sends_a_tool_call_without_its_result(fmt: str) -> None:
    with LLMServer.in_thread() as server:
        server.enqueue(
            Reply(text="I'll look.", tool_calls=[ToolCallSpec("search", {"q": "x"}, id="call_1")]),
            Reply(text="second answer"),
        )
        result = chat_cli(server.url, fmt, "hi\nagain\n")
        messages = server.requests[-1].json["messages"]
    assert result.returncode == 0, result.stderr
    assert "[tool] search (call_1)" in result.stdout
    assert "second answer" in result.stdout
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if fmt == "openai-chat":
            called |= {call["id"] for call in message.get("tool_calls") or ()}
            if message["role"] == "tool":
                answered.add(message["tool_call_id"])
        else:
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block["type"] == "tool_use":
                    called.add(block["id"])
                elif block["type"] == "tool_result":
                    answered.add(block["tool_use_id"])
    assert called <= answered, messages
