"""The notebook layer on hostile input: bounded work, displayable output, no hang.

Long streams fold in linear time; lone surrogates and control characters
never reach a display; a failing final render still ends ``await view``;
terminal IPython prints once; a slow render does not defeat the throttle;
previews cost what they show; odd argument values show, cuts are marked,
HTML is clipped, and a result is listed once. (Each of these once failed:
found by adversarial testing.)
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import pytest
import reactivex
from reactivex.subject import Subject

from rafrx import content as c
from rafrx import updates as u
from rafrx.messages import ChatMessage
from rafrx.notebook import (
    LiveSnapshot,
    LiveState,
    _live,
    content_html,
    live,
    live_html,
    live_text,
    message_html,
    response_html,
    text_display,
    timeline,
)
from rafrx.notebook._format import PREVIEW_CHARS, json_html
from rafrx.operators import convert
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason
from tests.conftest import StreamTime

# ----------------------------------------------------------------- helpers


class FakeHandle:
    def __init__(self, on_update: Callable[[LiveSnapshot], None] | None = None) -> None:
        self.updates: list[LiveSnapshot] = []
        self._on_update = on_update

    def update(self, obj: Any, **kwargs: Any) -> None:
        assert isinstance(obj, LiveSnapshot)
        self.updates.append(obj)
        if self._on_update is not None:
            self._on_update(obj)


class FakeDisplay:
    def __init__(self, on_update: Callable[[LiveSnapshot], None] | None = None) -> None:
        self.handles: list[FakeHandle] = []
        self._on_update = on_update

    def __call__(self, obj: Any, *, display_id: bool = False) -> FakeHandle:
        handle = FakeHandle(self._on_update)
        self.handles.append(handle)
        return handle

    @property
    def updates(self) -> list[LiveSnapshot]:
        return self.handles[0].updates


class CountedStr(str):
    """A text delta that counts the characters copied when it is concatenated."""

    copied = 0

    def __add__(self, other: str) -> str:
        CountedStr.copied += len(self) + len(other)
        return str.__add__(str(self), other)

    def __radd__(self, other: str) -> str:
        CountedStr.copied += len(self) + len(other)
        return str.__add__(other, str(self))


class CountedRepr:
    """A non-JSON value: the JSON preview calls ``repr`` on it; count those calls."""

    calls = 0

    def __repr__(self) -> str:
        CountedRepr.calls += 1
        return "obj"


LONE = "a\ud800b"  # what json.loads('"a\\ud800b"') gives: a lone surrogate

# An OpenAI chat stream whose JSON holds a lone-surrogate escape in text and in arguments.
SURROGATE_SSE = (
    b'data: {"choices":[{"index":0,"delta":{"content":"a\\ud800b"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1",'
    b'"type":"function","function":{"name":"f","arguments":"{\\"q\\": \\"x\\\\ud800y\\"}"}}]}}]}'
    b"\n\n"
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
    b"data: [DONE]\n\n"
)


def surrogate_results() -> list[AgentResponseResult]:
    from rafrx.sources import from_sse

    out: list[AgentResponseResult] = []
    from_sse([SURROGATE_SSE]).pipe(convert()).subscribe(out.append)
    return out


# ----------------------------------------------------------------- 1. quadratic fold


def test_folding_text_deltas_copies_linear_not_quadratic_characters() -> None:
    """LiveState._append re-copies the whole text block on every delta (str += in a list)."""
    n = 4000
    CountedStr.copied = 0
    state = LiveState()
    for _ in range(n):  # one growing reasoning block, then one growing text block
        state.add(AgentResponseResult(contents=[c.ReasoningContent(CountedStr("abcde"))]))
    for _ in range(n):
        state.add(AgentResponseResult(contents=[c.TextContent(CountedStr("abcde"))]))
    assert state.text == "abcde" * n
    assert state.reasoning == "abcde" * n
    total = 2 * 5 * n
    assert (
        CountedStr.copied <= 4 * total
    )  # (before the fix: 80 019 990 characters copied for 40 000)


# ----------------------------------------------------------------- 2. lone surrogates


def test_renders_of_a_lone_surrogate_stream_are_utf8_encodable() -> None:
    """A JSON ``\\ud800`` escape reaches the HTML and text as-is: neither can be encoded."""
    results = surrogate_results()
    state = LiveState()
    for result in results:
        state.add(result)
    assert state.text == LONE  # the pipeline keeps it (fine); the renderers must cope
    message = ChatMessage.assistant(LONE)
    rendered = {
        "live_html": live_html(state),
        "live_text": live_text(state),
        "content_html": content_html(c.TextContent(LONE)),
        "message_html": message_html(message),
        "response_html": response_html(AgentResponse(turn_transcript=[message])),
        "timeline": timeline([(0.0, u.ToolCallStart("c1", LONE))]).svg,
    }
    failing = []
    for name, text in rendered.items():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            failing.append(name)
    assert failing == []


def test_live_view_survives_jupyters_wire_encoder_on_a_lone_surrogate() -> None:
    """ipykernel sends every display update through jupyter_client's JSON packer."""
    from jupyter_client import session  # ipykernel, in the test extra, brings it

    def send(snapshot: LiveSnapshot) -> None:  # what ipykernel does with a display update
        data = {"text/plain": repr(snapshot), "text/html": snapshot._repr_html_()}
        session.json_packer({"data": data, "metadata": {}, "transient": {}})

    fake = FakeDisplay(send)
    view = live(reactivex.from_iterable(surrogate_results()), display=fake)
    assert view.done


def test_text_display_survives_a_lone_surrogate_on_a_utf8_terminal() -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # like sys.stdout on Linux
    source = reactivex.of(u.TextDelta(LONE), u.Finish(FinishReason.STOP))
    view = live(source, display=text_display(stream))  # (raised UnicodeEncodeError before the fix)
    assert view.response.text == LONE


# ----------------------------------------------------------------- 3. hang on a failed render


@pytest.mark.asyncio
async def test_await_returns_even_if_the_final_render_fails() -> None:
    """LiveView._finish renders before waking the waiters: a raising display leaves them hung."""

    def fail_final(snapshot: LiveSnapshot) -> None:
        if snapshot.final:
            raise RuntimeError("display failed")

    subject: Subject[u.AgentResponseUpdate] = Subject()
    view = live(subject, display=FakeDisplay(fail_final))
    waiter = asyncio.ensure_future(view._wait())
    await asyncio.sleep(0)
    subject.on_next(u.TextDelta("x"))
    with contextlib.suppress(RuntimeError):  # the display's failure may surface here
        subject.on_completed()
    done, _ = await asyncio.wait({waiter}, timeout=0.5)
    if not done:
        waiter.cancel()
    assert done, "await view never returned"


# ----------------------------------------------------------------- 4. terminal IPython


def test_terminal_ipython_prints_the_final_render_once() -> None:
    """default_display() picks IPython's display only under a kernel: in terminal IPython
    every throttled update would print the whole view again."""
    code = textwrap.dedent(
        """
        import asyncio
        from IPython.core.interactiveshell import InteractiveShell
        InteractiveShell.instance()  # what a terminal `ipython` session has
        from reactivex.subject import Subject
        from rafrx import updates as u, FinishReason
        from rafrx.notebook import live

        async def main():
            subject = Subject()
            view = live(subject, interval=0.01)
            for i in range(5):
                subject.on_next(u.TextDelta(f"chunk{i} "))
                await asyncio.sleep(0.03)
            subject.on_next(u.Finish(FinishReason.STOP))
            subject.on_completed()
            await view

        asyncio.run(main())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.count("status:") == 1, out  # (before the fix: 7 (waiting, 5 x streaming, done))


# ----------------------------------------------------------------- 5. throttle vs slow renders


def test_renders_slower_than_the_interval_do_not_render_on_every_update(
    stream_time: StreamTime,
) -> None:
    """The throttle stamps a render's start: a render costing more than ``interval``
    leaves no gap, so every update renders (each costing O(history)).

    The stream's time is the test's own (the view's timers are held: a real one would
    fire on the wall clock, during a stall of a loaded machine, and render once more)."""
    clock = stream_time.on(_live).clock

    def slow_render(snapshot: LiveSnapshot) -> None:
        clock.now += 0.1  # each render takes 2 intervals; the stream itself takes no time

    fake = FakeDisplay(slow_render)
    deltas = [u.TextDelta(f"{i} ") for i in range(50)]
    view = live(reactivex.from_iterable(deltas), display=fake, interval=0.05)
    assert view.renders == 2  # the first and the final (before the fix: 51, every update)
    assert [t.cancelled for t in stream_time.timers.pending] == [True]  # the final render's


# ----------------------------------------------------------------- 6. unbounded preview work


def test_json_preview_work_is_bounded_by_what_it_shows() -> None:
    """json_html / live_text serialize a whole argument value to show 2000 / 200 characters."""
    value = [CountedRepr() for _ in range(50_000)]
    CountedRepr.calls = 0
    html = json_html(value)
    assert len(html) < 6 * PREVIEW_CHARS
    assert CountedRepr.calls <= PREVIEW_CHARS  # (before the fix: 50 000)
    state = LiveState()
    state.add(
        AgentResponseResult(
            contents=[
                c.ToolCallStartContent("c", "f"),
                c.ToolCallArgsParsedContent("c", "rows", value),
            ]
        )
    )
    CountedRepr.calls = 0
    live_html(state)
    live_text(state)
    assert CountedRepr.calls <= 2 * PREVIEW_CHARS  # (before the fix: 100 000 per render)


# ----------------------------------------------------------------- 7. arguments hidden


def test_a_ready_call_with_non_object_arguments_shows_them() -> None:
    """ToolCard keeps arguments only when they are a dict: a list/str/number shows nothing."""
    updates = [
        u.ToolCallStart("c", "plot"),
        u.ToolCallArgs("c", "[1, 2, 3]"),
        u.ToolCallEnd("c"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    fake = FakeDisplay()
    view = live(reactivex.from_iterable(updates), display=fake)
    assert view.response.tool_calls[0].arguments == [1, 2, 3]
    final = fake.updates[-1]
    assert "[tool plot c: ready]" in final.text
    assert "1" in final.text.split("[tool plot c: ready]")[1].split("status:")[0]
    assert "1," in final.html  # (before the fix: the card has no argument table at all)


# ----------------------------------------------------------------- 8. text fallback


def test_text_fallback_says_when_it_cuts_a_value() -> None:
    """_card_text cuts argument JSON at 200 and results at 500 characters, silently."""
    state = LiveState()
    state.add(
        AgentResponseResult(
            contents=[
                c.ToolCallStartContent("c", "f"),
                c.ToolCallArgsParsedContent("c", "ids", list(range(1000))),
                c.ToolCalledContent("c", result="r" * 1000),
            ]
        )
    )
    text = live_text(state)
    ids_line = next(line for line in text.splitlines() if line.startswith("  ids = "))
    result_line = next(line for line in text.splitlines() if line.startswith("  -> "))
    assert "more" in ids_line or "…" in ids_line  # (before the fix: ends mid-number, no marker)
    assert "more" in result_line or "…" in result_line  # (before the fix: 500 r's, no marker)


# ----------------------------------------------------------------- 9. unclipped HTML reprs


def test_content_html_clips_invalid_raw_arguments_and_tool_results() -> None:
    """Valid arguments are clipped to PREVIEW_CHARS; raw invalid ones and results are not."""
    big = "x" * 1_000_000
    invalid = c.ToolCallingContent("c", "f", None, raw_arguments="{" + big, error="bad JSON")
    called = c.ToolCalledContent("c", result=big)
    valid = c.ToolCallingContent("c", "f", {"a": big})
    assert len(content_html(valid)) < 3 * PREVIEW_CHARS  # clipped, with a marker
    assert len(content_html(invalid)) < 3 * PREVIEW_CHARS  # (before the fix: 1 000 078)
    assert len(content_html(called)) < 3 * PREVIEW_CHARS  # (before the fix: 1 000 024)


# ----------------------------------------------------------------- 10. timeline XML


@pytest.mark.parametrize("name", ["a\x01b", "a\x00b", "esc\x1b[31m", "a\ufffeb"])
def test_timeline_stays_well_formed_xml_with_control_characters_in_a_tool_name(
    name: str,
) -> None:
    """Lane labels are the raw tool name and call id: escape() keeps XML-invalid characters."""
    updates = [u.ToolCallStart("c1", name), u.ToolCallArgs("c1", "{}"), u.ToolCallEnd("c1")]
    picture = timeline([(0.1 * i, x) for i, x in enumerate(updates)])
    ET.fromstring(picture.svg)  # (before the fix: ParseError, not well-formed (invalid token))


# ----------------------------------------------------------------- 11. cyclic value in text


def test_live_text_survives_a_value_json_cannot_encode() -> None:
    """json_html falls back to repr on ValueError; _card_text's json.dumps does not."""
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    state = LiveState()
    state.add(
        AgentResponseResult(
            contents=[
                c.ToolCallStartContent("c", "f"),
                c.ToolCallArgsParsedContent("c", "k", cyclic),
            ]
        )
    )
    live_html(state)  # fine
    assert "k = " in live_text(state)  # (before the fix: ValueError: Circular reference detected)


# ----------------------------------------------------------------- 12. duplicated tool message


def test_live_response_does_not_duplicate_a_result_for_a_call_that_never_ended() -> None:
    """Seen through live(): the aggregator lists a started-but-unflushed call's result twice."""
    first: list[AgentResponseResult] = []
    reactivex.from_iterable(
        [u.ToolCallStart("b", "fetch"), u.ToolCallArgs("b", "{}"), u.Finish(FinishReason.STOP)]
    ).pipe(convert()).subscribe(first.append)
    late = AgentResponseResult(contents=[c.ToolCalledContent("b", result="B")])
    view = live(reactivex.from_iterable([*first, late]), display=FakeDisplay())
    tool_messages = [m for m in view.response.turn_transcript if m.tool_call_id == "b"]
    assert len(tool_messages) == 1  # (before the fix: 2)
    assert json.dumps([m.content for m in view.response.tool_messages]) == '["B"]'
