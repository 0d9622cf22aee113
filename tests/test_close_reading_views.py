"""Close reading of the views: rafrx/notebook, terminal.py, the CLI, errors.py and _cycles.py.

The angle is a reviewer's, branch by branch: for each branch, what input reaches it and
whether the result is right. Model text with markup, escape sequences and control
characters; counts and cut-offs at their boundaries; live state across several LLM calls
and reused call ids; the CLI's exit codes and what it keeps of a failed turn (run as a
subprocess); the error values' clipping, pickling and copies. Earlier hunts covered the
user-level flows (test_exploration_hunt.py, test_ui_consumer_hunt.py,
test_error_ux_hunt.py, test_cli_adversarial.py); these pin the details a reading found
right.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import pickle
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx import FinishReason, Usage
from rafrx import content as c
from rafrx import updates as u
from rafrx._cycles import Outcome, detached
from rafrx.errors import (
    MAX_BODY_CHARS,
    HTTPStatusError,
    MalformedEvent,
    RafrxError,
    StreamInterrupted,
    error_text,
)
from rafrx.events import FinishEvent, ResponseStartedEvent
from rafrx.notebook import LiveState, live, live_html, live_text, timeline
from rafrx.notebook._format import clip, human_size, json_preview, one_line, showable
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.terminal import TerminalRenderer, inert
from rafrx.testing import LLMServer, Reply

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "fixtures"
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
# What a terminal must never get from a model: C0 (but tab and newline), DEL, C1, the
# bidi controls and lone surrogates.
TERMINAL_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


class FakeDisplay:
    """``display(obj, display_id=True) -> handle`` keeping every snapshot shown."""

    def __init__(self) -> None:
        self.shown: list[Any] = []

    def __call__(self, obj: Any, **kwargs: Any) -> FakeDisplay:
        self.shown.append(obj)
        return self

    def update(self, obj: Any, **kwargs: Any) -> None:
        self.shown.append(obj)


def result(*contents: Any, events: tuple[Any, ...] = (), model: str | None = None) -> Any:
    return AgentResponseResult(contents=contents, events=events, model=model)


def started() -> AgentResponseResult:
    return AgentResponseResult(events=[ResponseStartedEvent()])


# ----------------------------------------------------------------- shared formatters


@settings(max_examples=150, deadline=None)
@given(st.text(), st.integers(min_value=2, max_value=120))
def test_one_line_has_no_line_break_and_keeps_to_its_limit(text: str, limit: int) -> None:
    shown = one_line(text, limit)
    assert not any(ch in shown for ch in LINE_BREAKS)
    assert len(shown) <= limit
    if len(text) <= limit and not any(ch in text for ch in LINE_BREAKS):
        assert shown == text  # nothing to escape nor cut: shown as it is


@settings(max_examples=150, deadline=None)
@given(st.text(), st.integers(min_value=0, max_value=50))
def test_clip_says_exactly_how_much_it_cut(text: str, limit: int) -> None:
    shown = clip(text, limit)
    if len(text) <= limit:
        assert shown == text
    else:
        assert shown == text[:limit] + f"… ({len(text) - limit} more characters)"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=40,
)


@settings(max_examples=120, deadline=None)
@given(json_values, st.integers(min_value=1, max_value=60))
def test_json_preview_is_the_json_or_its_marked_prefix(value: Any, limit: int) -> None:
    whole = json.dumps(value, ensure_ascii=False, indent=None)
    shown = json_preview(value, limit=limit, indent=None)
    if len(whole) <= limit:
        assert shown == whole
    else:
        assert shown == whole[:limit] + "… (more)"


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_showable_and_inert_replace_one_for_one(text: str) -> None:
    """Each replaces a character by one U+FFFD: offsets and lengths stay as received."""
    for shown in (showable(text), inert(text)):
        assert len(shown) == len(text)
        assert all(a == b or b == "\ufffd" for a, b in zip(text, shown, strict=True))
    assert not TERMINAL_CONTROLS.search(inert(text))
    assert set(inert(text)) & set("\t\n") == set(text) & set("\t\n")  # tab and newline kept


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1024 * 1024 - 1, "1024.0 KiB"),
        (1024 * 1024, "1.0 MiB"),
    ],
)
def test_human_size_boundaries(n: int, shown: str) -> None:
    assert human_size(n) == shown


# ----------------------------------------------------------------- live state


def test_a_call_id_reused_by_a_later_llm_call_gets_its_own_card_and_result() -> None:
    state = LiveState()
    state.add(started())
    state.add(
        result(
            c.ToolCallStartContent("call_0", "add"),
            c.ToolCallingContent("call_0", "add", {"a": 1}, ""),
        )
    )
    state.add(result(events=(FinishEvent(FinishReason.TOOL_CALLS),)))
    state.add(started())  # the next LLM call starts before the first call's result came
    state.add(result(c.ToolCallStartContent("call_0", "add")))
    state.add(result(c.ToolCalledContent("call_0", result="2")))  # the first call's
    state.add(result(c.ToolCallingContent("call_0", "add", {"a": 5}, "")))
    state.add(result(c.ToolCalledContent("call_0", result="6")))
    assert list(state.cards) == ["call_0", "call_0 #2"]
    first, second = state.cards["call_0"], state.cards["call_0 #2"]
    assert (first.arguments, first.result, first.status) == ({"a": 1}, "2", "done")
    assert (second.arguments, second.result, second.status) == ({"a": 5}, "6", "done")
    assert [b for b in state.blocks if b[0] == "tool"] == [
        ["tool", "call_0"],
        ["tool", "call_0 #2"],
    ]


def test_a_call_id_that_looks_like_a_reuse_key_does_not_take_its_card() -> None:
    state = LiveState()
    state.add(started())
    state.add(result(c.ToolCallStartContent("c #2", "real"), c.ToolCallStartContent("c", "f")))
    state.add(started())
    state.add(result(c.ToolCallStartContent("c", "g")))
    assert {key: card.name for key, card in state.cards.items()} == {
        "c #2": "real",
        "c": "f",
        "c #3": "g",
    }


def test_the_end_cuts_short_only_the_cards_whose_arguments_were_open() -> None:
    state = LiveState()
    state.add(
        result(
            c.ToolCallStartContent("a", "write"),
            c.ToolCallArgsProgressContent("a", "text", 300, "x" * 300),
            c.ToolCallStartContent("b", "read"),
            c.ToolCallingContent("b", "read", {"p": 1}, ""),
        )
    )
    state.end("stopped")
    assert state.status == "stopped"
    assert state.cards["a"].status == "cut short"
    assert not state.cards["a"].progress["text"].streaming
    assert state.cards["b"].status == "ready"
    assert "300 B (incomplete)" in live_html(state)
    assert "text: 300 B (incomplete)" in live_text(state)


def test_usage_is_the_last_report_of_each_llm_call_summed() -> None:
    state = LiveState()
    for prompt in (10, 20):
        state.add(started())
        state.add(result(c.UsageContent(Usage(prompt, 0, prompt))))  # (an early report)
        final = Usage(prompt, 5, prompt + 5)
        state.add(result(events=(FinishEvent(FinishReason.STOP, final),)))
    assert state.usage == Usage(30, 10, 40)
    assert "tokens: 30 in / 10 out / 40 total" in live_text(state)


def test_finish_reason_is_the_current_llm_calls() -> None:
    state = LiveState()
    state.add(started())
    state.add(result(events=(FinishEvent(FinishReason.TOOL_CALLS),)))
    assert state.finish_reason is FinishReason.TOOL_CALLS
    state.add(started())
    assert state.finish_reason is None
    assert "finish:" not in live_text(state)


def test_an_empty_reasoning_delta_carrying_data_is_no_block() -> None:
    state = LiveState()
    state.add(result(c.TextContent("a"), c.ReasoningContent("", provider_data={"sig": "x"})))
    state.add(result(c.TextContent("b")))
    assert state.blocks == [["text", "ab"]]


def test_a_remote_tools_approval_answers_show_on_its_card() -> None:
    from rafrx.events import ToolApprovalRequestEvent
    from rafrx.messages import MCP_APPROVAL_RESPONSE

    state = LiveState()
    for call in ("r1", "r2"):
        event = ToolApprovalRequestEvent(call_id=call, name="deploy", arguments={"env": "prod"})
        state.add(result(events=(event,)))
    yes = {"type": MCP_APPROVAL_RESPONSE, "approval_request_id": "r1", "approve": True}
    no = {"type": MCP_APPROVAL_RESPONSE, "approval_request_id": "r2", "approve": False}
    state.add(
        result(c.ReasoningContent("", provider_data=yes), c.ReasoningContent("", provider_data=no))
    )
    assert state.cards["r1"].status == "approved"
    assert (state.cards["r2"].status, state.cards["r2"].error) == ("denied", "denied")
    assert state.cards["r1"].arguments == {"env": "prod"}


@pytest.mark.parametrize("hostile", ["<script>x()</script>", '"><img src=x onerror=y()>'])
def test_live_html_escapes_every_model_string_of_a_card(hostile: str) -> None:
    state = LiveState()
    state.add(
        result(
            c.ToolCallStartContent(hostile, hostile),
            c.ToolCallArgsProgressContent(hostile, hostile, 100, hostile),
            c.ToolCallingContent(hostile, hostile, None, hostile, error=hostile),
            model=hostile,
        )
    )
    state.add(result(c.ErrorContent(hostile), c.UriContent(hostile)))
    html = live_html(state)
    assert "<script" not in html
    assert "<img" not in html


# ----------------------------------------------------------------- the live view


def test_a_view_of_a_synchronous_stream_renders_once_more_at_its_end() -> None:
    display = FakeDisplay()
    view = live(reactivex.of(u.TextDelta("Hi"), u.Finish(FinishReason.STOP)), display=display)
    assert view.done
    assert view.response.text == "Hi"
    assert len(display.shown) == view.renders + 1  # the first display, then each update
    assert display.shown[-1].final
    assert not any(s.final for s in display.shown[:-1])
    assert repr(view) == "<LiveView done, 2 results>"


def test_a_failed_view_shows_the_typed_error_and_the_partials_finish() -> None:
    display = FakeDisplay()
    error = StreamInterrupted("the connection broke")
    source = reactivex.concat(reactivex.of(u.TextDelta("half")), reactivex.throw(error))
    view = live(source, display=display)
    assert view.state.status == "failed"
    with pytest.raises(StreamInterrupted) as caught:
        view.response  # noqa: B018
    assert caught.value.partial is not None
    assert caught.value.partial.text == "half"
    assert view.state.errors == ["the connection broke"]  # the ErrorContent, once
    assert display.shown[-1].text == "half\nerror: the connection broke\nstatus: failed"


def test_a_failed_view_without_error_content_names_the_error_type() -> None:
    display = FakeDisplay()
    chunks = reactivex.of(result(c.TextContent("x")))
    view = live(reactivex.concat(chunks, reactivex.throw(ValueError("bad"))), display=display)
    assert view.state.errors == ["ValueError: bad"]


def test_disposing_a_view_stops_it_and_keeps_what_arrived() -> None:
    display = FakeDisplay()
    source = reactivex.concat(
        reactivex.of(u.ToolCallStart("c1", "write"), u.ToolCallArgs("c1", '{"p": "a')),
        reactivex.never(),
    )
    view = live(source, display=display)
    assert not view.done
    with pytest.raises(RuntimeError, match="still running"):
        view.response  # noqa: B018
    view.dispose()
    assert view.done
    assert view.response.interrupted
    assert view.state.status == "stopped"
    assert view.state.cards["c1"].status == "cut short"
    view.dispose()  # twice: nothing more
    assert display.shown[-1].final
    assert sum(s.final for s in display.shown) == 1


def test_a_live_agent_turn_over_http_matches_its_response() -> None:
    from rafrx import Agent, tool
    from rafrx.sources.clients import AnthropicClient
    from rafrx.testing import ToolCallSpec

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: The first.
            b: The second.
        """
        return a + b

    async def main() -> tuple[Any, AgentResponse]:
        async with LLMServer() as server:
            server.enqueue(
                Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2}, id="call_0")]),
                Reply(tool_calls=[ToolCallSpec("add", {"a": 5, "b": 6}, id="call_0")]),
                Reply(text="<b>9</b>"),
            )
            client = AnthropicClient(server.url, model="m")
            try:
                view = live(Agent(client, tools=[add]).run("sum"), display=FakeDisplay())
                return view, await view
            finally:
                await client.aclose()

    view, response = asyncio.run(main())
    assert [(card.result, card.status) for card in view.state.cards.values()] == [
        ("3", "done"),
        ("11", "done"),
    ]
    assert view.state.usage == response.usage
    assert view.state.finish_reason is response.finish_reason is FinishReason.STOP
    assert "&lt;b&gt;9&lt;/b&gt;" in live_html(view.state)


# ----------------------------------------------------------------- the terminal renderer


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=6))
def test_plain_terminal_output_holds_no_control_character(deltas: list[str]) -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    for i, delta in enumerate(deltas):
        kind = c.TextContent if i % 2 == 0 else c.ReasoningContent
        renderer.result(result(kind(delta), c.ToolCallStartContent(delta, delta)))
        renderer.result(result(c.ToolCalledContent(delta, error=delta or None)))
    renderer.error(StreamInterrupted("".join(deltas)))
    renderer.close()
    assert not TERMINAL_CONTROLS.search(out.getvalue())
    assert "\x1b" not in out.getvalue()


def test_an_emoji_split_into_utf16_halves_is_joined_and_a_lone_half_is_inert() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    for delta in ("a\ud83d", "\ude00b", "c\ud83d"):
        renderer.result(result(c.TextContent(delta)))
    renderer.close()
    assert out.getvalue() == "a\U0001f600bc\ufffd\n"


def test_one_llm_call_shows_its_usage_once_and_a_turn_of_several_its_total() -> None:
    def render(steps: list[Usage]) -> str:
        out = io.StringIO()
        renderer = TerminalRenderer(out, color=False)
        for usage in steps:
            renderer.result(started())
            renderer.result(result(events=(FinishEvent(FinishReason.STOP, usage),)))
        total = steps[0] if len(steps) == 1 else steps[0] + steps[1]
        renderer.response(AgentResponse(finish_reason=FinishReason.STOP, usage=total))
        return out.getvalue()

    one = render([Usage(3, 4, 7)])
    assert one.count("tokens: 3 in / 4 out / 7 total") == 1
    two = render([Usage(3, 4, 7), Usage(10, 1, 11)])
    assert "-- step 2 --" in two
    assert two.splitlines()[-1] == "tokens: 13 in / 5 out / 18 total · finish: stop"


def test_a_server_ended_turn_says_so_and_an_error_replaces_the_error_content() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    renderer.response(AgentResponse(finish_reason=FinishReason.ERROR))
    renderer.result(result(c.ErrorContent("in band")))
    renderer.error(StreamInterrupted("line one\nline two\x1b[2J"))
    renderer.response(AgentResponse(finish_reason=FinishReason.STOP))
    assert out.getvalue().splitlines() == [
        "error: the server ended the turn with an error",
        "finish: error",
        "error: StreamInterrupted: line one\\nline two\ufffd[2J",
        "finish: stop",
    ]


def test_in_colour_a_progress_line_is_cleared_and_reasoning_reset() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=True, interval=0)
    renderer.result(result(c.ReasoningContent("hmm")))
    renderer.result(result(c.ToolCallStartContent("c1", "write")))
    renderer.result(result(c.ToolCallArgsProgressContent("c1", "text", 4096, "x")))
    renderer.result(result(c.ToolCallArgsParsedContent("c1", "text", "x" * 4096)))
    renderer.close()
    shown = out.getvalue()
    assert shown.index("hmm") < shown.index("\x1b[0m\n")  # the dim reasoning ends reset
    assert "\r\x1b[K" in shown  # the progress line is cleared before the next line
    assert shown.endswith("\r\x1b[K  text: 4.0 KiB received · " + "x" * 59 + "…\n")


# ----------------------------------------------------------------- the CLI (subprocess)


def rafrx_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(ROOT)}
    env.pop("RAFRX_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "rafrx", *args],
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer.in_thread() as running:
        yield running


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("replay", "x.sse", "--speed", "0"), "must be > 0, got 0"),
        (("replay", "x.sse", "--speed", "nan"), "must be > 0, got nan"),
        (("serve", "--port", "65536"), "port out of range: 65536"),
        (("chat", "--model", "m"), "--base-url"),
        (("demo", "--format", "gemini"), "invalid choice: 'gemini'"),
    ],
)
def test_bad_arguments_are_one_line_and_status_2(args: tuple[str, ...], says: str) -> None:
    done = rafrx_cli(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert says in done.stderr
    assert "--help'" in done.stderr
    assert done.stdout == ""


def test_replay_of_a_directory_is_one_line_status_2(tmp_path: Path) -> None:
    done = rafrx_cli("replay", str(tmp_path))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"rafrx replay: error: no such file: {tmp_path}\n"


def test_replay_json_rows_are_ascii_json_with_every_field(tmp_path: Path) -> None:
    body = (
        'data: {"choices":[{"index":0,"delta":{"content":"h\\u00e9 \\ud83d\\ude00"}}]}\n\n'
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        "data: [DONE]\n\n"
    )
    path = tmp_path / "t.sse"
    path.write_text(body, encoding="utf-8")
    done = rafrx_cli("replay", str(path), "--json", "--dialect", "openai-chat")
    assert done.returncode == 0, done.stderr
    assert done.stdout.isascii()
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["type"] for row in rows] == ["ResponseStartedEvent", "TextContent", "FinishEvent"]
    assert rows[1] == {"type": "TextContent", "text": "hé 😀"}
    assert rows[2] == {"type": "FinishEvent", "finish_reason": "stop", "usage": None}


def test_replay_of_a_provider_error_with_escapes_is_inert_and_status_1(tmp_path: Path) -> None:
    error = {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "x\x1b]0;pwned\x07y"},
    }
    path = tmp_path / "e.sse"
    path.write_text(f"event: error\ndata: {json.dumps(error)}\n\n", encoding="utf-8")
    for mode in ("--json", "--plain"):
        done = rafrx_cli("replay", str(path), "--dialect", "anthropic", mode)
        assert done.returncode == 1
        shown = done.stdout + done.stderr
        assert "ProviderError: x\ufffd]0;pwned\ufffdy\n" in shown  # inert, on one line
        assert "\x1b" not in shown
        assert "\x07" not in shown
        assert "Traceback" not in done.stderr


def test_chat_keeps_no_turn_the_server_ended_with_an_error(server: LLMServer) -> None:
    server.enqueue(
        Reply(text="half an answ", finish=FinishReason.ERROR),
        Reply(text="second answer"),
        Reply(text="third answer"),
    )
    done = rafrx_cli(
        "chat",
        "--base-url",
        server.url,
        "--model",
        "m",
        "--plain",
        "--system",
        "be brief",
        stdin="first\nsecond\nthird\n",
    )
    assert done.returncode == 0, done.stderr
    assert "error: the server ended the turn with an error" in done.stdout
    sent = [[(m["role"], m["content"]) for m in r.messages] for r in server.requests]
    assert sent[1] == [("system", "be brief"), ("user", "second")]
    assert sent[2] == [
        ("system", "be brief"),
        ("user", "second"),
        ("assistant", "second answer"),
        ("user", "third"),
    ]


def test_chat_where_every_turn_failed_is_status_1(server: LLMServer) -> None:
    server.enqueue(Reply(text="x", finish=FinishReason.ERROR))
    done = rafrx_cli(
        "chat", "--base-url", server.url, "--model", "m", "--plain", stdin="hi\n/exit\nnot sent\n"
    )
    assert done.returncode == 1
    assert len(server.requests) == 1


def test_chat_with_an_unset_key_variable_is_status_2_before_any_request(
    server: LLMServer,
) -> None:
    done = rafrx_cli(
        "chat",
        "--base-url",
        server.url,
        "--model",
        "m",
        "--api-key-env",
        "RAFRX_NO_SUCH_VAR_1",
        stdin="hi\n",
    )
    assert done.returncode == 2
    assert done.stderr == "rafrx chat: error: environment variable RAFRX_NO_SUCH_VAR_1 is not set\n"
    assert len(server.requests) == 0


# ----------------------------------------------------------------- errors and _cycles


def test_an_errors_message_and_body_are_clipped_saying_how_much() -> None:
    long = "m" * (MAX_BODY_CHARS + 5)
    error = RafrxError(long, body=long)
    suffix = "… [5 more characters]"
    assert error.message == str(error) == "m" * MAX_BODY_CHARS + suffix
    assert error.body == error.message
    assert RafrxError("m" * MAX_BODY_CHARS).message == "m" * MAX_BODY_CHARS  # at the limit: whole
    assert len(repr(error)) < MAX_BODY_CHARS + 100


def test_a_pickled_error_keeps_its_type_fields_and_partial() -> None:
    error = HTTPStatusError(
        429, body="{}", provider_message="slow", retry_after=2.0, request_id="r"
    )
    error.partial = AgentResponse(text="so far", interrupted=True)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is HTTPStatusError
    assert (copy.status, copy.message, copy.retry_after, copy.request_id, copy.retryable) == (
        429,
        "HTTP 429: slow",
        2.0,
        "r",
        True,
    )
    assert copy.partial == error.partial
    assert copy.args == error.args


def test_a_detached_copy_has_no_traceback_cause_or_context() -> None:
    def fail() -> None:
        try:
            raise ValueError("inner")
        except ValueError as inner:
            raise MalformedEvent("bad", raw="{", event_name="e") from inner

    with pytest.raises(MalformedEvent) as caught:
        fail()
    kept = caught.value
    copy = detached(kept)
    assert copy is not kept
    assert kept.__cause__ is not None
    assert kept.__traceback__ is not None
    assert (copy.__traceback__, copy.__cause__, copy.__context__) == (None, None, None)
    assert (type(copy), copy.raw, copy.event_name, str(copy)) == (MalformedEvent, "{", "e", "bad")


def test_error_text_survives_a_failing_str() -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert error_text(Odd()) == "<Odd: str() failed>"


def test_an_outcome_keeps_the_first_settlement_and_raises_its_error_once() -> None:
    async def main() -> list[str]:
        seen = []
        outcome: Outcome[str] = Outcome()
        outcome.set_exception(ValueError("first"))
        outcome.set_result("ignored")
        assert outcome.done()
        with pytest.raises(ValueError, match="first"):
            await outcome.wait()
        try:
            await outcome.wait()
        except RuntimeError as again:
            seen.append(str(again))
        return seen

    assert asyncio.run(main()) == ["the outcome was an error, raised already"]


# ----------------------------------------------------------------- values and the timeline


def test_content_and_update_values_keep_their_invariants() -> None:
    with pytest.raises(ValueError, match="not both"):
        c.ToolCalledContent("c", result="r", error="e")
    with pytest.raises(ValueError, match="not both"):
        u.ToolCalled("c", result="r", error="e")
    cut = c.ToolCallIncompleteContent("c", "f", "{", finish_reason=FinishReason.LENGTH)
    assert "token limit" in cut.error
    assert FinishReason.from_provider("END_TURN") is FinishReason.STOP
    assert FinishReason.from_provider("brand_new") is FinishReason.OTHER
    assert Usage(1, 2, 3) + Usage(1, 1, 2, cached_tokens=4) == Usage(2, 3, 5, None, 4)
    assert AgentResponse(finish_reason=FinishReason.LENGTH).to_dict()["finish_reason"] == "length"


def test_a_timeline_of_hostile_names_is_well_formed_svg_with_one_lane_per_call() -> None:
    hostile = "<x>&\"'\x01\u202e"
    picture = timeline(
        [
            (0.0, u.ToolCallStart("c1", hostile)),
            (0.1, u.ToolCallArgs("c1", "{}")),
            (0.2, u.ToolCallEnd("c1")),
            (0.3, u.TextDelta(hostile)),
            (0.5, u.Finish(FinishReason.STOP)),
        ],
        title=hostile,
    )
    root = ET.fromstring(picture.svg)  # parses: escaped, no XML-forbidden character
    assert root.tag.endswith("svg")
    assert picture.lanes.count(f"{hostile} · c1") == 1  # (data: escaped in the picture only)
    assert "\x01" not in picture.svg
    assert "\u202e" not in picture.svg
    assert "text" in picture.lanes
