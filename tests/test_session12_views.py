"""Regression tests of session 12's fix in the notebook views: the final view of a response
(``AgentResponse._repr_html_`` / ``response_html``) shows each tool call where it came among
the text and reasoning, as the live view (``live``) showed it while the turn streamed;
and pins that the terminal renderer and ``python -m rafrx replay`` keep that order too.

Each test not marked "pin" failed on the commit before the fix, for the reason its
docstring gives. Those marked "pin" hold behaviour the fix keeps (the ones reading a
view's items by its classes need the ``rafrx-text`` / ``rafrx-call`` classes the fix
gave the final view). Every HTTP exchange is real aiohttp over 127.0.0.1
(rafrx.testing.LLMServer); the streams go through the real clients, agent and operators.
"""

from __future__ import annotations

import asyncio
import io
import json
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

import pytest

import tests.sources.test_anthropic_agent_hunt as claude
import tests.sources.test_responses_agent_hunt as responses
from rafrx import Agent, AgentResponse, ChatMessage, RafrxError, ToolCall
from rafrx import operators as ops
from rafrx.__main__ import main
from rafrx.messages import ANTHROPIC_THINKING, TEXT_REF, TOOL_USE_REF
from rafrx.notebook import LiveSnapshot, live, message_html, response_html
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIResponsesClient
from rafrx.testing import LLMServer, Replay
from rafrx.tools import tool

GUARD = 5.0  # seconds: a guard against hangs only
FIXTURES = Path(__file__).resolve().parent / "data" / "fixtures"

Item = tuple[str, str]  # ("text" | "reasoning", its text) or ("call", its id)


# ================================================================ reading the views


class _Items(HTMLParser):
    """The text, reasoning and tool calls a view shows, in document order: the live
    view's ``rafrx-text`` / ``rafrx-reasoning`` blocks and ``rafrx-card`` cards, the
    final view's messages' (tool results left out: the live view shows them in the cards)."""

    KINDS: ClassVar[dict[str, str]] = {"rafrx-text": "text", "rafrx-reasoning": "reasoning"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[Item] = []
        self._open: list[str | None] = []  # per open tag: the item it begins, if any
        self._text: list[str] = []
        self._codes: list[str] = []
        self._in_code = False
        self._role: str | None = None
        self._role_next = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        kind = next((self.KINDS[c] for c in classes if c in self.KINDS), None)
        if "rafrx-card" in classes or "rafrx-call" in classes:
            kind = "card" if "rafrx-card" in classes else "call"
        if "rafrx-message" in classes:
            self._role_next = True
        if tag == "b" and self._role_next:
            self._role, self._role_next, self._text = "", False, []
        if kind is not None and not any(self._open):
            self._text, self._codes = [], []
        self._open.append(kind)
        self._in_code = tag == "code"

    def handle_endtag(self, tag: str) -> None:
        kind = self._open.pop() if self._open else None
        self._in_code = False
        if tag == "b" and self._role == "":
            self._role = "".join(self._text) or None
            self._text = []
        if kind is None or any(self._open) or self._role == "tool":
            return
        if kind == "card":  # its header: 🔧 name <code>id</code>
            self.items.append(("call", self._codes[0]))
        elif kind == "call":  # 🔧 name(<code>arguments</code>) <code>id</code>
            self.items.append(("call", self._codes[-1]))
        else:
            self.items.append((kind, "".join(self._text)))

    def handle_data(self, data: str) -> None:
        if self._role == "":
            self._text.append(data)
        elif any(self._open):
            self._text.append(data)
            if self._in_code:
                self._codes.append(data)


def shown_items(html: str) -> list[Item]:
    """What a view shows, in order; the text (or reasoning) of a run of blocks joined
    (the live view splits it at links, the final view at a call's tool messages)."""
    parser = _Items()
    parser.feed(html)
    merged: list[Item] = []
    for kind, value in parser.items:
        if merged and kind != "call" and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + value)
        elif kind == "call" or value:
            merged.append((kind, value))
    return [(kind, value) for kind, value in merged if kind == "call" or value]


class _Handle:
    def __init__(self) -> None:
        self.renders: list[Any] = []

    def update(self, obj: Any, **kwargs: Any) -> None:
        self.renders.append(obj)


def in_order(html: str, *needles: str) -> bool:
    """Whether each of ``needles`` (texts, call ids) is in ``html`` after the one before."""
    at = 0
    for needle in needles:
        at = html.find(escape(needle), at)
        if at < 0:
            return False
        at += len(escape(needle))
    return True


async def watched(observable: Any) -> tuple[list[Item], list[Item], AgentResponse]:
    """Watch a stream in the live view: the items of its final render and those of the
    final view of the response it gives."""
    handle = _Handle()
    response = await asyncio.wait_for(
        live(observable, display=lambda obj, **kwargs: handle, interval=0.0), GUARD
    )
    final = handle.renders[-1]
    assert isinstance(final, LiveSnapshot)
    assert final.final
    assert response_html(response) == response._repr_html_()
    return shown_items(final.html), shown_items(response._repr_html_()), response


# ================================================================ tools


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


@tool
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    return f"{city}: rain tomorrow"


# ================================================================ Anthropic

SPLIT_TURN = claude.message(
    claude.text("Let me look it up."),
    claude.tool_use("toolu_01", "lookup", {"city": "Oslo"}),
    claude.text(" Then I will tell you."),
    msg_id="msg_split",
)


@pytest.mark.asyncio
async def test_a_call_between_two_texts_stays_between_them_in_the_final_view(
    llm_server: LLMServer,
) -> None:
    """Anthropic ``[text, tool_use, text]``: the live view shows the call between the
    two texts; the final view showed the message's joined text, then the call (the
    order changed once the turn was over). It shows them as they came."""
    llm_server.enqueue(Replay(SPLIT_TURN, chunk_size=61), Replay(claude.answer("Sunny.")))
    async with AnthropicClient(llm_server.url, claude.KEY, claude.MODEL) as client:
        agent = Agent(client, tools=[lookup])
        seen_live, seen_final, response = await watched(agent.run("Oslo?"))
    final = response._repr_html_()
    assert in_order(final, "Let me look it up.", "toolu_01", " Then I will tell you.", "Sunny.")
    expected = [
        ("text", "Let me look it up."),
        ("call", "toolu_01"),
        ("text", " Then I will tell you.Sunny."),
    ]
    assert seen_live == expected
    assert seen_final == expected
    assert response.text == "Let me look it up. Then I will tell you.Sunny."  # (unchanged)
    saved = [
        ChatMessage.from_dict(json.loads(json.dumps(m.to_dict()))) for m in response.turn_transcript
    ]
    assert [message_html(m) for m in saved] == [message_html(m) for m in response.turn_transcript]


INTERLEAVED_TURN = claude.message(
    claude.thinking("I should say what I do.", "sig_1"),
    claude.text("Checking two cities."),
    claude.thinking("Oslo first, then Bergen.", "sig_2"),
    claude.tool_use("toolu_01", "lookup", {"city": "Oslo"}),
    claude.text(" And tomorrow:"),
    claude.tool_use("toolu_02", "forecast", {"city": "Bergen"}),
    msg_id="msg_interleaved",
)


@pytest.mark.asyncio
async def test_interleaved_thinking_text_and_calls_keep_their_order_in_the_final_view(
    llm_server: LLMServer,
) -> None:
    """Interleaved thinking: thinking, text, thinking, call, text, call. The final view
    showed all the reasoning first, the text joined, then both calls."""
    llm_server.enqueue(Replay(INTERLEAVED_TURN, chunk_size=97), Replay(claude.answer("Done.")))
    async with AnthropicClient(llm_server.url, claude.KEY, claude.MODEL) as client:
        agent = Agent(client, tools=[lookup, forecast])
        seen_live, seen_final, response = await watched(agent.run("Weather?"))
    final = response._repr_html_()
    assert in_order(
        final, "I should", "Checking", "Oslo first", "toolu_01", " And tomorrow:", "toolu_02"
    )
    expected = [
        ("reasoning", "I should say what I do."),
        ("text", "Checking two cities."),
        ("reasoning", "Oslo first, then Bergen."),
        ("call", "toolu_01"),
        ("text", " And tomorrow:"),
        ("call", "toolu_02"),
        ("text", "Done."),
    ]
    assert seen_live == expected
    assert seen_final == expected


# ================================================================ OpenAI Responses

RESPONSES_TURN = responses.turn(
    responses.reasoning("rs_1", "Look Oslo up."),
    responses.message("msg_1", "Let me check."),
    responses.call("fc_1", "call_1", "lookup", {"city": "Oslo"}),
    responses.message("msg_2", " One moment."),
    response_id="resp_split",
)


@pytest.mark.asyncio
async def test_a_responses_message_after_a_function_call_stays_after_it(
    llm_server: LLMServer,
) -> None:
    """Responses output ``[reasoning, message, function_call, message]``: the second
    message's text was shown before the call, joined to the first."""
    llm_server.enqueue(Replay(RESPONSES_TURN, chunk_size=83))
    llm_server.enqueue(Replay(responses.turn(responses.message("msg_3", "Sunny."))))
    async with OpenAIResponsesClient(llm_server.url, "sk-test", model=responses.MODEL) as client:
        agent = Agent(client, tools=[lookup])
        seen_live, seen_final, response = await watched(agent.run("Oslo?"))
    assert in_order(response._repr_html_(), "Let me check.", "call_1", " One moment.", "Sunny.")
    expected = [
        ("reasoning", "Look Oslo up."),
        ("text", "Let me check."),
        ("call", "call_1"),
        ("text", " One moment.Sunny."),
    ]
    assert seen_live == expected
    assert seen_final == expected


# ================================================================ every recorded stream


def _fixtures() -> list[Path]:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    return [FIXTURES / e["path"] for e in manifest if e["format"] != "sse-only"]


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_pin_every_recorded_stream_shows_one_order_live_and_final(path: Path) -> None:
    """Pin: over every recorded provider stream, the final view shows the same text,
    reasoning and calls in the same order as the live view's last render."""
    fmt = path.parent.name
    stream = from_sse([path.read_bytes()], dialect=fmt).pipe(ops.convert(), ops.flush_tool_calls())
    handle = _Handle()
    view = live(stream, display=lambda obj, **kwargs: handle, interval=0.0)
    assert view.done
    try:
        response = view.response
    except RafrxError as exc:  # (a stream that fails: the response it had built)
        response = exc.partial
    assert response is not None
    assert shown_items(handle.renders[-1].html) == shown_items(response_html(response))


# ================================================================ a message on its own


def test_pin_an_edited_message_whose_marks_no_longer_fit_shows_text_then_calls() -> None:
    """Pin: a message edited since it streamed (its text no longer what the marks count):
    the whole text, then the calls; nothing is lost or shown twice."""
    marks = ({"type": TEXT_REF, "chars": 5}, {"type": TOOL_USE_REF, "id": "c1"})
    call = ToolCall("c1", "lookup", {"city": "Oslo"})
    edited = ChatMessage(
        "assistant", "Edited text.", tool_calls=[call], provider_data={ANTHROPIC_THINKING: marks}
    )
    assert shown_items(message_html(edited)) == [("text", "Edited text."), ("call", "c1")]


def test_pin_a_message_with_no_marks_shows_reasoning_text_then_calls() -> None:
    """Pin: with no marks (OpenAI chat) the order is reasoning, text, calls, as before."""
    calls = [ToolCall("c1", "lookup", {"city": "Oslo"}), ToolCall("c2", "lookup", {})]
    msg = ChatMessage("assistant", "<b>Two</b>", tool_calls=calls, reasoning="Think <i>.")
    html = message_html(msg)
    assert shown_items(html) == [
        ("reasoning", "Think <i>."),
        ("text", "<b>Two</b>"),
        ("call", "c1"),
        ("call", "c2"),
    ]
    assert "&lt;b&gt;Two&lt;/b&gt;" in html
    assert "<b>Two</b>" not in html


def test_pin_calls_sharing_an_id_and_odd_kept_blocks_are_all_shown() -> None:
    """Pin: two calls with one id (a history may hold that) are both shown, in their
    order; kept blocks of odd shapes (an id that is not a string, a summary that is not
    a list) are read past, never a crash."""
    marks = (
        {"type": "reasoning", "id": "rs_1", "summary": 5},
        {"type": "rafrx.function_call_ref", "id": "fc_1", "call_id": {"not": "an id"}},
        {"type": "rafrx.function_call_ref", "id": "fc_2", "call_id": "c1"},
    )
    calls = [ToolCall("c1", "first", {}), ToolCall("c1", "second", {})]
    msg = ChatMessage(
        "assistant", "Hm.", tool_calls=calls, provider_data={"openai_reasoning": marks}
    )
    html = message_html(msg)
    assert shown_items(html) == [("text", "Hm."), ("call", "c1"), ("call", "c1")]
    assert in_order(html, "Hm.", "first", "second")


# ================================================================ terminal and CLI


def test_pin_the_replay_command_prints_a_call_between_the_texts_around_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pin: ``python -m rafrx replay`` (the terminal renderer) prints the stream as it
    comes: the first text, the call's card, then the text after it."""
    body = tmp_path / "split.sse"
    body.write_bytes(SPLIT_TURN)
    assert main(["replay", str(body), "--plain", "--dialect", "anthropic"]) == 0
    out = capsys.readouterr().out
    first = out.index("Let me look it up.")
    card = out.index("[tool] lookup (toolu_01)")
    after = out.index("Then I will tell you.")
    assert first < card < after
    assert io.StringIO(out).readline().rstrip("\n") == "Let me look it up."


def test_pin_the_chat_command_prints_thinking_text_and_calls_as_they_came(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pin: ``python -m rafrx chat`` against a server streaming interleaved thinking
    prints each piece where it came (the chat has no tools: the turn ends with the calls)."""
    with LLMServer.in_thread() as server:
        server.enqueue(Replay(INTERLEAVED_TURN, chunk_size=97))
        monkeypatch.setattr("sys.stdin", io.StringIO("Weather?\n"))
        args = ["chat", "--base-url", server.url, "--model", claude.MODEL, "--plain"]
        assert main([*args, "--format", "anthropic"]) == 0
    out = capsys.readouterr().out
    assert in_order(
        out,
        "[thinking] I should say what I do.",
        "Checking two cities.",
        "[thinking] Oslo first, then Bergen.",
        "[tool] lookup (toolu_01)",
        " And tomorrow:",
        "[tool] forecast (toolu_02)",
        "finish: tool_calls",
    )
