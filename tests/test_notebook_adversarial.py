"""rafrx.notebook under hostile input: injection, huge values, odd unicode, odd stream endings.

Everything here passes: it pins behaviour verified correct. Failing findings live in
``tests/test_notebook_found_bugs.py``.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
import reactivex
from reactivex import abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rafrx import content as c
from rafrx import updates as u
from rafrx.errors import HTTPStatusError, StreamInterrupted
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import ChatMessage, ToolCall
from rafrx.notebook import (
    LiveSnapshot,
    LiveState,
    _live,
    card_html,
    content_html,
    live,
    live_html,
    live_text,
    message_html,
    response_html,
    result_html,
    text_display,
    timeline,
)
from rafrx.notebook._format import BIDI_CONTROLS, PREVIEW_CHARS, clip_html, json_html
from rafrx.operators import convert
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from tests.conftest import StreamTime
from tests.test_notebook import FakeDisplay as OneHandleDisplay

# ----------------------------------------------------------------- helpers

NASTY = [
    '<script>alert("x")</script>',
    "</div></td></tr></table></code></small></span><b>",
    "\"'><img src=x onerror=alert(1)>",
    "&amp; &lt;not a tag&gt; &#60;script&#62; & < >",
    "<!-- c --> <![CDATA[ x ]]> <?pi x?> <!DOCTYPE html>",
    "<svg onload=alert(1)><style>*{display:none}</style>",
    "<textarea><title><plaintext>",
    # RTL override, Hebrew, Arabic
    "\u202eevil\u202c \u05e9\u05dc\u05d5\u05dd \u0639\u0631\u0628\u064a",
    "e\u0301\u0301 Z\u0351\u0352\u0353",  # combining marks
    "\U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f1eb\U0001f1f7 \U0001f600",  # ZWJ, flag
    "tab\tnl\ncr\r nbsp\u00a0 zwsp\u200b",
]
BENIGN = "plain"


def no_bidi(text: str) -> str:
    """``text`` as the HTML views show it: its bidi controls as U+FFFD (they would make a
    path read as another: "/tmp/\u202egnp.exe" as "/tmp/exe.png")."""
    return re.sub(f"[{BIDI_CONTROLS}]", "\ufffd", text)


class _Parsed(HTMLParser):
    """The markup skeleton (tags, attributes) and the visible text of an HTML fragment."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.skeleton: list[tuple[Any, ...]] = []
        self.data: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.skeleton.append(("<", tag, tuple(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.skeleton.append(("</>", tag, tuple(attrs)))

    def handle_endtag(self, tag: str) -> None:
        self.skeleton.append((">", tag))

    def handle_data(self, data: str) -> None:
        self.data.append(data)

    def handle_comment(self, data: str) -> None:
        self.skeleton.append(("!--", data))

    def handle_decl(self, decl: str) -> None:
        self.skeleton.append(("!", decl))

    def handle_pi(self, data: str) -> None:
        self.skeleton.append(("?", data))

    def unknown_decl(self, data: str) -> None:
        self.skeleton.append(("![", data))

    @property
    def text(self) -> str:
        return "".join(self.data)


def skeleton(html: str) -> list[tuple[Any, ...]]:
    return _Parsed(html).skeleton


def visible(html: str) -> str:
    return _Parsed(html).text


def assert_inert(render: Callable[[str], str], strings: list[str] = NASTY) -> None:
    """Model-made strings change only text: the markup is the one a benign string gives."""
    expected = skeleton(render(BENIGN))
    for s in strings:
        html = render(s)
        assert skeleton(html) == expected, s
        assert "<script" not in html


class FakeDisplay(OneHandleDisplay):
    """test_notebook's fake ``display``, with the updates of its one handle."""

    @property
    def updates(self) -> list[LiveSnapshot]:
        assert len(self.handles) == 1
        return self.handles[0].updates


def is_cyclic(value: Any) -> bool:
    """Whether ``value`` is a list holding itself."""
    return isinstance(value, list) and bool(value) and value[0] is value


def results_of(updates: list[u.AgentResponseUpdate]) -> list[AgentResponseResult]:
    out: list[AgentResponseResult] = []
    reactivex.from_iterable(updates).pipe(convert()).subscribe(out.append)
    return out


def fold(results: list[AgentResponseResult]) -> LiveState:
    state = LiveState()
    for result in results:
        state.add(result)
    return state


def long_arg_call(call_id: str, name: str, value: str, chunk: int) -> list[u.AgentResponseUpdate]:
    args = json.dumps({"path": "out.txt", "content": value})
    return [
        u.ToolCallStart(call_id, name),
        *(u.ToolCallArgs(call_id, args[i : i + chunk]) for i in range(0, len(args), chunk)),
        u.ToolCallEnd(call_id),
    ]


# ----------------------------------------------------------------- escaping: HTML reprs


def _contents(s: str) -> list[c.Content]:
    return [
        c.TextContent(s),
        c.ReasoningContent(s),
        c.UriContent(s, s),
        c.ToolCallStartContent(s, s),
        c.ToolCallArgsContent(s, s),
        c.ToolCallArgsParsedContent(s, s, {s: [s, 1, None]}),
        c.ToolCallArgsProgressContent(s, s, 12, s),
        c.ToolCallEndContent(s),
        c.ToolCallingContent(s, s, {s: s}),
        c.ToolCallingContent(s, s, None, raw_arguments=s, error=s),
        c.ToolCalledContent(s, result=s),
        c.ToolCalledContent(s, error=s),
        c.UsageContent(Usage(1, 2, 3)),
        c.ErrorContent(s),
    ]


@pytest.mark.parametrize("index", range(len(_contents(BENIGN))))
def test_content_html_markup_does_not_depend_on_model_strings(index: int) -> None:
    assert_inert(lambda s: content_html(_contents(s)[index]))
    assert_inert(lambda s: _contents(s)[index]._repr_html_())


@pytest.mark.parametrize("raw", NASTY)
def test_content_html_shows_model_text_verbatim_but_bidi_controls(raw: str) -> None:
    """Every character as the model sent it, but the bidi controls (U+FFFD): they would
    make what follows read as something else ("/tmp/\u202egnp.exe" as "/tmp/exe.png")."""
    shown = no_bidi(raw)
    assert visible(content_html(c.TextContent(raw))) == shown
    assert visible(content_html(c.ReasoningContent(raw))) == shown
    assert visible(content_html(c.ErrorContent(raw))) == f"error: {shown}"
    assert visible(content_html(c.ToolCalledContent("id", result=raw))) == f"→ {shown}"
    called = content_html(c.ToolCallingContent("id", "f", None, raw_arguments=raw, error="bad"))
    assert shown in visible(called)
    parsed = content_html(c.ToolCallArgsParsedContent("id", "k", raw))
    assert json.dumps(shown, ensure_ascii=False) in visible(parsed)


def test_result_html_escapes_events_and_contents() -> None:
    def render(s: str) -> str:
        events = [
            ResponseStartedEvent(s, s),
            ToolApprovalRequestEvent(s, s, {s: s}, s),
            FinishEvent(FinishReason.STOP, Usage(1, 1, 2)),
        ]
        result = AgentResponseResult(id=s, model=s, contents=_contents(s), events=events)
        assert result._repr_html_() == result_html(result)
        return result_html(result)

    assert_inert(render)


def test_message_and_response_html_are_inert() -> None:
    def message(s: str) -> ChatMessage:
        calls = [ToolCall(s, s, {s: s}), ToolCall(s + "2", s, [s, 1.5])]
        msg = ChatMessage.assistant_with_tools(s, calls)
        return ChatMessage(msg.role, s, tool_calls=msg.tool_calls, reasoning=s)

    def response(s: str) -> str:
        transcript = [ChatMessage.user(s), message(s), ChatMessage.tool(s, s), message(s)]
        resp = AgentResponse(
            id=s,
            model=s,
            text=s,
            reasoning_text=s,
            turn_transcript=transcript,
            finish_reason=FinishReason.TOOL_CALLS,
            usage=Usage(3, 4, 7),
            interrupted=True,
        )
        assert resp._repr_html_() == response_html(resp)
        return response_html(resp)

    assert_inert(lambda s: message_html(message(s)))
    assert_inert(lambda s: message(s)._repr_html_())
    assert_inert(response)
    for s in NASTY:
        shown = visible(message_html(ChatMessage.user(s)))
        assert shown == f"user: {no_bidi(s)}"


def test_no_model_string_ever_lands_in_an_attribute() -> None:
    """Attributes are fixed by the renderer: none of them carries model text."""
    state = LiveState()
    marker = "ZZ<'\">ZZ"
    state.add(
        AgentResponseResult(
            model=marker,
            contents=[
                c.TextContent(marker),
                c.ReasoningContent(marker),
                c.ToolCallStartContent(marker, marker),
                c.ToolCallArgsProgressContent(marker, marker, 500, marker),
                c.ToolCallArgsParsedContent(marker, "k", marker),
                c.ToolCalledContent(marker, result=marker),
                c.UriContent(marker),
                c.ErrorContent(marker),
            ],
        )
    )
    htmls = [live_html(state), card_html(state.cards[marker])]
    htmls += [content_html(item) for item in _contents(marker)]
    for html in htmls:
        for tag in skeleton(html):
            for _, value in tag[2] if tag[0] in ("<", "</>") else ():
                assert "ZZ" not in (value or "")


# ----------------------------------------------------------------- escaping: live view


def _hostile_state(s: str) -> LiveState:
    state = LiveState()
    state.add(
        AgentResponseResult(
            model=s,
            contents=[
                c.ReasoningContent(s),
                c.TextContent(s),
                c.ToolCallStartContent("call_" + s, s),
                c.ToolCallArgsProgressContent("call_" + s, s, 100, s),
                c.ToolCallArgsParsedContent("call_" + s, "short " + s, s),
                c.ToolCallArgsProgressContent("call_" + s, "long " + s, 200, s),
            ],
            events=[ResponseStartedEvent(s, s)],
        )
    )
    state.add(
        AgentResponseResult(
            contents=[
                c.ToolCallArgsParsedContent("call_" + s, s, s * 20),
                c.ToolCallEndContent("call_" + s),
                c.ToolCalledContent("call_" + s, result=s),
                c.ToolCallingContent("bad_" + s, s, None, raw_arguments=s, error=s),
                c.ToolCalledContent("err_" + s, error=s),
                c.UriContent(s),
                c.TextContent(s),
                c.ErrorContent(s),
            ],
            events=[
                ToolApprovalRequestEvent("appr_" + s, s, {s: s}, s),
                FinishEvent(FinishReason.ERROR),
            ],
        )
    )
    return state


def test_live_html_markup_does_not_depend_on_model_strings() -> None:
    assert_inert(lambda s: live_html(_hostile_state(s)))
    assert_inert(lambda s: card_html(_hostile_state(s).cards["call_" + s]))


@pytest.mark.parametrize("s", NASTY)
def test_live_html_shows_model_text_verbatim_but_bidi_controls(s: str) -> None:
    state = LiveState()
    state.add(AgentResponseResult(model=s, contents=[c.ReasoningContent(s), c.TextContent(s)]))
    state.add(AgentResponseResult(contents=[c.ErrorContent(s)]))
    text = visible(live_html(state))
    b = no_bidi(s)
    assert text == f"{b}{b}error: {b}status: streaming · model: {b}"
    assert live_text(state) == f"[thinking] {b}\n{b}\nerror: {b}\nstatus: streaming · model: {b}"


def test_live_view_end_to_end_escapes_an_http_error_body_and_message() -> None:
    fake = FakeDisplay()
    error = HTTPStatusError(
        401, body='{"error": "<script>x()</script>"}', provider_message="<img src=x onerror=y()>"
    )
    stream = reactivex.concat(reactivex.of(u.TextDelta("Half <i>")), reactivex.throw(error))
    view = live(stream, display=fake)
    final = fake.updates[-1]
    assert "<img" not in final.html
    assert "<i>" not in final.html
    assert visible(final.html) == "Half <i>error: HTTP 401: <img src=x onerror=y()>status: failed"
    assert final.text == "Half <i>\nerror: HTTP 401: <img src=x onerror=y()>\nstatus: failed"
    with pytest.raises(HTTPStatusError) as caught:
        _ = view.response
    assert caught.value.partial is not None
    assert caught.value.partial.text == "Half <i>"


# ----------------------------------------------------------------- timeline


def test_timeline_stays_well_formed_xml_with_hostile_printable_strings() -> None:
    ns = "{http://www.w3.org/2000/svg}"
    for i, s in enumerate(NASTY):
        call = f"id{i}{s}"
        turn = [
            u.ResponseMetadata(s, s),
            u.ReasoningDelta(s),
            u.TextDelta(s),
            u.ToolCallStart(call, s),
            u.ToolCallArgs(call, json.dumps({s: s})),
            u.ToolCallEnd(call),
            u.Uri(s, s),
            u.Finish(FinishReason.TOOL_CALLS, Usage(1, 2, 3)),
        ]
        picture = timeline([(0.01 * k, x) for k, x in enumerate(turn)], title=s)
        root = ET.fromstring(picture.svg)  # well-formed, or this raises
        assert "<script" not in picture.svg
        assert f"{s} · {call}" in picture.lanes
        titles = "".join(t.text or "" for t in root.iter(f"{ns}title"))
        label = no_bidi(f"{s} · {call}".replace("\r", "\n"))  # XML reads a raw CR as LF
        assert label in titles  # the full lane label, as its tooltip
        assert repr(s)[1:-1][:100] in titles  # tooltips show the items' reprs


def test_timeline_with_many_parallel_calls_has_one_lane_each() -> None:
    calls = [f"call_{i}" for i in range(24)]
    turn: list[u.AgentResponseUpdate] = [
        u.ToolCallStart(k, f"tool{i}") for i, k in enumerate(calls)
    ]
    turn += [u.ToolCallArgs(k, '{"a": 1}') for k in reversed(calls)]
    turn += [u.ToolCallEnd(k) for k in calls]
    turn.append(u.Finish(FinishReason.TOOL_CALLS))
    picture = timeline([(0.001 * i, x) for i, x in enumerate(turn)])
    call_lanes = [lane for lane in picture.lanes if "call_" in lane]
    assert call_lanes == [f"tool{i} · call_{i}" for i in range(24)]
    ET.fromstring(picture.svg)


def test_timeline_of_nothing_is_an_empty_but_valid_picture() -> None:
    picture = timeline([])
    assert picture.lanes == ()
    ET.fromstring(picture.svg)


# ----------------------------------------------------------------- huge values


def test_clip_html_marks_what_it_cut() -> None:
    text = "<" * (PREVIEW_CHARS + 5)
    clipped = clip_html(text)
    assert visible(clipped) == "<" * PREVIEW_CHARS + "… (5 more characters)"
    assert clip_html("x" * PREVIEW_CHARS) == "x" * PREVIEW_CHARS  # at the limit: nothing cut


def test_a_one_megabyte_argument_value_renders_as_a_bounded_preview() -> None:
    value = {"rows": "<&>" * 350_000}
    html = json_html(value)
    assert len(html) < 6 * PREVIEW_CHARS  # 2000 characters, each escaped to at most 5
    # the encoding stops at the limit (bounded work), so the marker cannot count the rest
    assert visible(html) == json.dumps(value, indent=1)[:PREVIEW_CHARS] + "… (more)"
    call = c.ToolCallingContent("c", "f", value)
    assert len(content_html(call)) < 6 * PREVIEW_CHARS


def test_a_streamed_one_megabyte_argument_stays_a_size_and_a_tail() -> None:
    value = ("0123456789abcdef" * 65_536) + "<END>"  # 1 MiB and a bit, ending in markup
    updates = [
        u.ResponseMetadata("r", "m"),
        *long_arg_call("call_w", "write_file", value, 4096),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    fake = FakeDisplay()
    view = live(reactivex.from_iterable(updates), display=fake)
    final = fake.updates[-1]
    assert len(final.html) < 4_000  # a size, a progress bar and a 160-character tail
    assert len(final.text) < 1_000
    assert "1.0 MiB" in final.html
    assert "  content: 1.0 MiB" in final.text
    assert '<progress max="1" value="1"></progress>' in final.html
    assert "&lt;END&gt;" in final.html
    card = view.state.cards["call_w"]
    assert card.progress["content"].received == len(value.encode())
    assert card.progress["content"].tail == value[-160:]
    assert card.arguments["content"] == value  # the value itself is kept, only not shown
    assert view.response.tool_calls[0].arguments["content"] == value


def test_a_huge_tool_result_is_clipped_in_the_card_with_a_marker() -> None:
    state = LiveState()
    big = "r<" * 500_000
    state.add(
        AgentResponseResult(
            contents=[c.ToolCallStartContent("c", "read"), c.ToolCalledContent("c", result=big)]
        )
    )
    html = card_html(state.cards["c"])
    assert len(html) < 3 * PREVIEW_CHARS + 1000
    assert f"… ({len(big) - PREVIEW_CHARS} more characters)" in html


def test_a_sync_source_renders_first_and_final_only_however_long(
    stream_time: StreamTime,
) -> None:
    """Items that come within one interval render the first and the final state only,
    however many: the stream's time is a clock of its own (the machine's is no part of
    it: 5,000 items under CI load, or during a long gc pass, took more than 2 intervals)."""
    timers = stream_time.on(_live).timers  # (its clock stands still: no time passes)
    fake = FakeDisplay()
    deltas = [u.TextDelta(f"{i:05d} ") for i in range(5000)]
    view = live(reactivex.from_iterable([*deltas, u.Finish(FinishReason.STOP)]), display=fake)
    assert view.renders == len(fake.updates) == 2
    assert [t.cancelled for t in timers.pending] == [True]  # one timer, the final render's
    assert fake.updates[-1].final
    assert visible(fake.updates[-1].html).startswith("".join(d.delta for d in deltas))


def test_throttle_renders_once_per_interval_of_stream_time(stream_time: StreamTime) -> None:
    """A clock advancing 1/64 s per item, a 1/16 s interval: one render every 4 items."""
    clock = stream_time.on(_live).clock  # (its timers are held: the wall clock is not the stream's)

    def slow_items() -> Iterator[u.AgentResponseUpdate]:
        for i in range(200):
            clock.now += 1 / 64
            yield u.TextDelta(f"{i} ")
        yield u.Finish(FinishReason.STOP)

    fake = FakeDisplay()
    view = live(reactivex.from_iterable(slow_items()), display=fake, interval=1 / 16)
    assert view.renders == 200 // 4 + 1  # items 1, 5, 9, ... 197, then the final render
    assert sum(s.final for s in fake.updates) == 1
    shown = [visible(s.html) for s in fake.updates]
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(shown))  # only grows


# ----------------------------------------------------------------- unicode


@pytest.mark.parametrize("s", NASTY[7:])
def test_unicode_arguments_count_utf8_bytes_and_render(s: str) -> None:
    value = s * 10
    state = fold(results_of(long_arg_call("c1", "note", value, 7)))
    bar = state.cards["c1"].progress["content"]
    assert bar.received == len(value.encode())
    assert bar.done
    assert bar.tail == value[-160:]
    html = live_html(state)
    assert visible(html).count(no_bidi(value[-160:])) == 1
    html.encode("utf-8")


def test_escaped_surrogate_pairs_in_arguments_render_as_one_character() -> None:
    args = '{"q": "\\ud83d\\ude00 ok"}'
    updates = [u.ToolCallStart("c", "f"), u.ToolCallArgs("c", args), u.ToolCallEnd("c")]
    state = fold(results_of([*updates, u.Finish(FinishReason.TOOL_CALLS)]))
    assert state.cards["c"].arguments == {"q": "\U0001f600 ok"}
    assert "\U0001f600 ok" in visible(live_html(state))
    live_html(state).encode("utf-8")


# ----------------------------------------------------------------- stream endings


def test_an_empty_stream_completes_as_done_with_an_empty_response() -> None:
    fake = FakeDisplay()
    view = live(reactivex.empty(), display=fake)
    assert view.done
    assert view.state.status == "done"
    assert view.response.text == ""
    assert not view.response.interrupted
    assert [s.final for s in fake.updates] == [True]
    assert visible(fake.updates[-1].html) == "status: done"
    assert visible(fake.shown[0].html) == "status: waiting"  # the first display


def test_an_error_mid_stream_keeps_text_cards_and_shows_the_error_once() -> None:
    fake = FakeDisplay()
    head = [
        u.ResponseMetadata("r", "m"),
        u.TextDelta("Writing "),
        u.ToolCallStart("c1", "write_file"),
        u.ToolCallArgs("c1", '{"path": "a.txt", "content": "' + "x" * 300),
    ]
    stream = reactivex.concat(
        reactivex.from_iterable(head), reactivex.throw(StreamInterrupted("reset <by peer>"))
    )
    view = live(stream, display=fake)
    final = fake.updates[-1]
    assert final.final
    assert view.state.status == "failed"
    assert final.html.count("reset &lt;by peer&gt;") == 1
    assert final.text.count("reset <by peer>") == 1
    assert "Writing " in final.text
    assert "[tool write_file c1: cut short]" in final.text  # never run
    assert "! arguments cut short: the stream ended before the call did" in final.text
    assert "  content: 300 B (incomplete)" in final.text  # it never ended, nor will
    assert "<progress></progress>" not in final.html  # no bar still spinning
    assert "300 B (incomplete)" in final.html
    with pytest.raises(StreamInterrupted) as caught:
        _ = view.response
    assert caught.value.partial is not None
    assert caught.value.partial.text == "Writing "


def test_an_error_whose_str_raises_is_still_shown() -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    fake = FakeDisplay()
    view = live(reactivex.throw(Odd()), display=fake)
    assert "Odd: &lt;Odd: str() failed&gt;" in fake.updates[-1].html
    with pytest.raises(Odd):
        _ = view.response


def test_non_rafrx_errors_of_a_results_stream_are_named_and_escaped() -> None:
    fake = FakeDisplay()
    results = [AgentResponseResult(contents=[c.TextContent("ok")])]
    stream = reactivex.concat(reactivex.from_iterable(results), reactivex.throw(KeyError("<k>")))
    view = live(stream, display=fake)
    assert view.state.errors == ["KeyError: '<k>'"]
    assert "error: KeyError: &#x27;&lt;k&gt;&#x27;" in fake.updates[-1].html


@pytest.mark.asyncio
async def test_disposing_before_anything_arrived_shows_stopped_once() -> None:
    fake = FakeDisplay()
    subject: Subject[u.AgentResponseUpdate] = Subject()
    view = live(subject, display=fake)
    view.dispose()
    view.dispose()  # idempotent
    assert not subject.observers
    subject.on_next(u.TextDelta("too late"))
    response = await view
    assert response.interrupted
    assert response.text == ""
    assert [s.final for s in fake.updates] == [True]
    assert "status: stopped" in fake.updates[-1].text


@pytest.mark.asyncio
async def test_dispose_after_completion_changes_nothing() -> None:
    fake = FakeDisplay()
    subject: Subject[u.AgentResponseUpdate] = Subject()
    view = live(subject, display=fake)
    subject.on_next(u.TextDelta("all"))
    subject.on_next(u.Finish(FinishReason.STOP))
    subject.on_completed()
    renders = view.renders
    view.dispose()
    assert view.renders == renders
    assert view.state.status == "done"
    assert not (await view).interrupted


def test_items_after_completion_or_error_are_ignored() -> None:
    def misbehaving(
        observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        observer.on_next(u.TextDelta("kept"))
        observer.on_completed()
        observer.on_next(u.TextDelta(" late"))
        observer.on_error(ValueError("late error"))
        observer.on_completed()
        return Disposable()

    fake = FakeDisplay()
    view = live(reactivex.create(misbehaving), display=fake)
    assert view.response.text == "kept"
    assert view.state.text == "kept"
    assert view.state.status == "done"
    assert sum(s.final for s in fake.updates) == 1
    assert "late" not in fake.updates[-1].text


def test_tool_results_arriving_after_the_llm_finished_fill_their_cards() -> None:
    first = results_of(
        [
            u.ToolCallStart("a", "search"),
            u.ToolCallArgs("a", '{"q": "x"}'),
            u.ToolCallStart("b", "fetch"),
            u.ToolCallArgs("b", '{"url": "u"}'),
            u.ToolCallEnd("a"),
            u.ToolCallEnd("b"),
            u.Finish(FinishReason.TOOL_CALLS, Usage(1, 2, 3)),
        ]
    )
    late = [
        AgentResponseResult(contents=[c.ToolCalledContent("b", result="<page>")]),
        AgentResponseResult(contents=[c.ToolCalledContent("a", error="Timeout: <slow>")]),
    ]
    second = results_of([u.TextDelta("Done."), u.Finish(FinishReason.STOP, Usage(4, 5, 9))])
    fake = FakeDisplay()
    view = live(reactivex.from_iterable([*first, *late, *second]), display=fake)
    a, b = view.state.cards["a"], view.state.cards["b"]
    assert (a.status, a.error, b.status, b.result) == (
        "failed",
        "Timeout: <slow>",
        "done",
        "<page>",
    )
    final = fake.updates[-1]
    assert "✗ Timeout: &lt;slow&gt;" in final.html
    assert "→ <code" in final.html
    assert "tokens: 5 in / 7 out / 12 total" in final.text
    assert [b[0] for b in view.state.blocks] == ["tool", "tool", "text"]
    transcript = view.response.turn_transcript
    assert [(m.role.value, m.tool_call_id) for m in transcript] == [
        ("assistant", None),
        ("tool", "a"),  # in call start order, whatever order the tools finished in
        ("tool", "b"),
        ("assistant", None),
    ]


def test_many_parallel_interleaved_calls_stay_apart_in_start_order() -> None:
    n = 32
    ids = [f"call_{i:02d}" for i in range(n)]
    payloads = [json.dumps({"i": i, "body": f"<{i}>" * (40 + i)}) for i in range(n)]
    updates: list[u.AgentResponseUpdate] = [u.ToolCallStart(k, f"tool_{k}") for k in ids]
    step = 9
    longest = max(len(p) for p in payloads)
    for pos in range(0, longest, step):  # round-robin: every call interleaved with all others
        for k, p in zip(ids, payloads, strict=True):
            if pos < len(p):
                updates.append(u.ToolCallArgs(k, p[pos : pos + step]))
    updates += [u.ToolCallEnd(k) for k in reversed(ids)]
    updates.append(u.Finish(FinishReason.TOOL_CALLS))
    fake = FakeDisplay()
    view = live(reactivex.from_iterable(updates), display=fake)
    for i, k in enumerate(ids):
        card = view.state.cards[k]
        assert card.name == f"tool_{k}"
        assert card.arguments == json.loads(payloads[i])
        assert card.status == "ready"
        assert card.progress["body"].received == len(f"<{i}>".encode()) * (40 + i)
    html = fake.updates[-1].html
    positions = [html.index(f"<code>{k}</code>") for k in ids]
    assert positions == sorted(positions)
    assert html.count('class="rafrx-card"') == n
    assert [call.id for call in view.response.tool_calls] == ids


# ----------------------------------------------------------------- text fallbacks and reprs


def test_text_display_prints_only_the_final_render_even_on_failure() -> None:
    stream = io.StringIO()
    source = reactivex.concat(
        reactivex.of(u.TextDelta("a"), u.TextDelta("b")), reactivex.throw(StreamInterrupted("x"))
    )
    live(source, display=text_display(stream))
    assert stream.getvalue() == "ab\nerror: x\nstatus: failed\n"


def test_live_snapshot_reprs() -> None:
    snap = LiveSnapshot("<b>&lt;</b>", "<", final=True)
    assert snap._repr_html_() == "<b>&lt;</b>"
    assert repr(snap) == "<"


def _odd_values() -> list[Any]:
    class BadRepr:
        def __repr__(self) -> str:
            return "<bad & 'repr'>"

    cyclic: list[Any] = []
    cyclic.append(cyclic)
    return [
        float("nan"),
        float("inf"),
        10**400,
        b"\x00<bytes>",
        {1, 2},
        BadRepr(),
        cyclic,
        {"nested": {"k": [None, True, -0.0]}},
        "",
        None,
    ]


def test_reprs_of_public_values_survive_odd_values() -> None:
    from IPython.lib.pretty import pretty  # ipykernel, in the test extra, brings IPython

    for value in _odd_values():
        items: list[Any] = [
            c.ToolCallArgsParsedContent("c", "k", value),
            c.ToolCallingContent("c", "f", value),
            ToolCall("c", "f", value),
            ChatMessage.assistant_with_tools("", [ToolCall("c", "f", value)]),
            AgentResponseResult(events=[ToolApprovalRequestEvent("c", "f", value)]),
        ]
        for item in items:
            text = pretty(item)
            assert isinstance(text, str)
            if hasattr(item, "_repr_html_"):
                html = item._repr_html_()
                assert "<bad" not in html
                assert "<bytes>" not in html
        state = LiveState()
        state.add(AgentResponseResult(contents=[items[0], items[1]]))
        assert "<bad" not in live_html(state)
        if not is_cyclic(value):
            live_text(state)  # (a cyclic value: see test_notebook_found_bugs.py)


def test_response_html_of_empty_and_partial_responses() -> None:
    assert visible(response_html(AgentResponse())) == "finish: None"
    partial = AgentResponse(
        turn_transcript=[ChatMessage.assistant("half <b>")], model="m<1>", interrupted=True
    )
    shown = visible(response_html(partial))
    assert shown == "m<1>assistant: half <b>finish: None · interrupted"


def test_live_view_repr_is_plain_and_short() -> None:
    view = live(reactivex.of(u.TextDelta("<" * 10_000)), display=FakeDisplay())
    assert repr(view) == "<LiveView done, 1 results>"
    assert view._ipython_display_() is None


@pytest.mark.asyncio
async def test_awaiting_twice_gives_the_same_response() -> None:
    subject: Subject[u.AgentResponseUpdate] = Subject()
    view = live(subject, display=FakeDisplay())
    first = asyncio.ensure_future(view._wait())
    second = asyncio.ensure_future(view._wait())
    await asyncio.sleep(0)
    subject.on_next(u.TextDelta("x"))
    subject.on_completed()
    assert (await first) is (await second) is view.response


def test_usage_footer_sums_steps_and_counts_the_last_report_per_step() -> None:
    state = LiveState()
    state.add(AgentResponseResult(events=[ResponseStartedEvent()]))
    state.add(AgentResponseResult(contents=[c.UsageContent(Usage(5, 1, 6))]))
    state.add(AgentResponseResult(contents=[c.UsageContent(Usage(5, 9, 14))]))  # cumulative
    state.add(AgentResponseResult(events=[FinishEvent(FinishReason.TOOL_CALLS)]))
    state.add(AgentResponseResult(events=[ResponseStartedEvent()]))
    state.add(AgentResponseResult(events=[FinishEvent(FinishReason.STOP, Usage(20, 2, 22))]))
    assert re.search(r"tokens: 25 in / 11 out / 36 total", live_text(state))
