"""rafrx.notebook: HTML reprs, the live view and the timeline."""

from __future__ import annotations

import asyncio
import json
import time
import xml.etree.ElementTree as ET
from typing import Any

import pytest
import reactivex
from reactivex.subject import Subject

from rafrx import content as c
from rafrx import updates as u
from rafrx.errors import StreamInterrupted
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import ChatMessage, ToolCall
from rafrx.notebook import (
    LiveSnapshot,
    LiveState,
    _live,
    content_html,
    live,
    live_html,
    message_html,
    response_html,
    result_html,
    text_display,
    timeline,
)
from rafrx.operators import aggregate, convert
from rafrx.recorder import Entry, Recording
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from tests.conftest import StreamTime

EVIL = '<script>alert("x")</script>'
LONG = "# Notes\n" + "All work and no play makes Jack a dull boy. " * 40


class FakeHandle:
    def __init__(self) -> None:
        self.updates: list[LiveSnapshot] = []

    def update(self, obj: Any, **kwargs: Any) -> None:
        assert isinstance(obj, LiveSnapshot)
        self.updates.append(obj)


class FakeDisplay:
    """Stands in for IPython.display.display: one handle per display call."""

    def __init__(self) -> None:
        self.shown: list[Any] = []
        self.handles: list[FakeHandle] = []

    def __call__(self, obj: Any, *, display_id: bool = False) -> FakeHandle:
        assert display_id is True
        self.shown.append(obj)
        handle = FakeHandle()
        self.handles.append(handle)
        return handle


def tool_turn(text: str = "Let me write that down.") -> list[u.AgentResponseUpdate]:
    """A first LLM call: reasoning, text, a call with a long string argument."""
    args = json.dumps({"path": "notes.md", "content": LONG})
    pieces = [args[i : i + 37] for i in range(0, len(args), 37)]
    return [
        u.ResponseMetadata(id="resp_1", model="scripted"),
        u.ReasoningDelta("The user wants "),
        u.ReasoningDelta("a file."),
        u.TextDelta(text),
        u.ToolCallDelta(0, id="call_1", name="write_file", arguments_delta=pieces[0]),
        *(u.ToolCallDelta(0, arguments_delta=p) for p in pieces[1:]),
        u.Finish(FinishReason.TOOL_CALLS, Usage(10, 20, 30)),
    ]


def tool_results() -> list[AgentResponseResult]:
    results: list[AgentResponseResult] = []
    reactivex.from_iterable(tool_turn()).pipe(convert()).subscribe(results.append)
    results.append(AgentResponseResult(contents=[c.ToolCalledContent("call_1", result="wrote")]))
    second = [u.TextDelta("Done."), u.Finish(FinishReason.STOP, Usage(40, 5, 45))]
    reactivex.from_iterable(second).pipe(convert()).subscribe(results.append)
    return results


# ----------------------------------------------------------------- HTML reprs


def test_every_renderer_escapes_model_text() -> None:
    items: list[c.Content] = [
        c.TextContent(EVIL),
        c.ReasoningContent(EVIL),
        c.UriContent(EVIL, EVIL),
        c.ToolCallStartContent(EVIL, EVIL),
        c.ToolCallArgsContent(EVIL, EVIL),
        c.ToolCallArgsParsedContent(EVIL, EVIL, {EVIL: [EVIL]}),
        c.ToolCallArgsProgressContent(EVIL, EVIL, 3, EVIL),
        c.ToolCallEndContent(EVIL),
        c.ToolCallingContent(EVIL, EVIL, {"a": EVIL}),
        c.ToolCallingContent(EVIL, EVIL, None, raw_arguments=EVIL, error=EVIL),
        c.ToolCalledContent(EVIL, result=EVIL),
        c.ToolCalledContent(EVIL, error=EVIL),
        c.ToolCallIncompleteContent(EVIL, EVIL, EVIL),
        c.ErrorContent(EVIL),
    ]
    call = ToolCall(EVIL, EVIL, {"x": EVIL})
    cut = ToolCall(EVIL, EVIL, None, raw_arguments=EVIL, error=EVIL, complete=False)
    message = ChatMessage.assistant_with_tools(EVIL, [call])
    response = AgentResponse(
        text=EVIL, model=EVIL, turn_transcript=[message], tool_calls=[call, cut]
    )
    rendered = [content_html(item) for item in items]
    rendered += [result_html(AgentResponseResult(contents=items)), message_html(message)]
    rendered += [response_html(response), response._repr_html_(), items[0]._repr_html_()]
    for html in rendered:
        assert "<script" not in html
        assert "&lt;script&gt;" in html


def test_live_view_escapes_everything() -> None:
    state = LiveState()
    state.add(
        AgentResponseResult(
            model=EVIL,
            contents=[
                c.TextContent(EVIL),
                c.ReasoningContent(EVIL),
                c.ToolCallStartContent(EVIL, EVIL),
                c.ToolCallArgsProgressContent(EVIL, EVIL, 200, EVIL),
                c.ToolCallArgsParsedContent(EVIL, "n", EVIL),
                c.ToolCalledContent(EVIL, error=EVIL),
                c.UriContent(EVIL),
                c.ErrorContent(EVIL),
            ],
        )
    )
    html = live_html(state)
    assert "<script" not in html
    assert html.count("&lt;script&gt;") >= 8


# ----------------------------------------------------------------- LiveState


def test_state_folds_text_reasoning_cards_and_usage() -> None:
    state = LiveState()
    for result in tool_results():
        state.add(result)
    assert state.reasoning == "The user wants a file."
    assert state.text == "Let me write that down.Done."
    assert [b[0] for b in state.blocks] == ["reasoning", "text", "tool", "text"]
    card = state.cards["call_1"]
    assert card.name == "write_file"
    assert card.arguments == {"path": "notes.md", "content": LONG}
    assert card.progress["content"].received == len(LONG.encode())
    assert card.progress["content"].done
    assert card.progress["content"].tail == LONG[-160:]
    assert (card.status, card.result) == ("done", "wrote")
    assert state.usage == Usage(50, 25, 75)
    assert state.finish_reason is FinishReason.STOP
    assert state.model == "scripted"


def test_state_tracks_approvals_invalid_arguments_and_errors() -> None:
    state = LiveState()
    state.add(
        AgentResponseResult(
            contents=[c.ToolCallingContent("a", "rm", None, raw_arguments="{", error="bad JSON")],
            events=[ResponseStartedEvent(), ToolApprovalRequestEvent("b", "deploy", {})],
        )
    )
    state.add(
        AgentResponseResult(
            contents=[c.ErrorContent("boom")], events=[FinishEvent(FinishReason.ERROR)]
        )
    )
    assert state.cards["a"].status == "invalid arguments"
    assert state.cards["a"].argument_error == "bad JSON"
    assert state.cards["b"].status == "awaiting approval"
    assert state.errors == ["boom"]


def test_progress_bar_shows_while_streaming_then_completes() -> None:
    state = LiveState()
    state.add(
        AgentResponseResult(
            contents=[
                c.ToolCallStartContent("c1", "write_file"),
                c.ToolCallArgsProgressContent("c1", "content", 1234, "abc"),
            ]
        )
    )
    assert "<progress></progress>" in live_html(state)  # indeterminate: total unknown
    assert "1.2 KiB" in live_html(state)
    state.add(AgentResponseResult(contents=[c.ToolCallArgsParsedContent("c1", "content", "x")]))
    assert '<progress max="1" value="1"></progress>' in live_html(state)


# ----------------------------------------------------------------- live()


def test_live_renders_one_handle_and_returns_the_response(stream_time: StreamTime) -> None:
    # The stream's time is the test's own: on the wall clock a stall of a loaded machine
    # (over the 0.05 s interval) let the view's thread timer render between two items.
    stream_time.on(_live)
    fake = FakeDisplay()
    view = live(reactivex.from_iterable(tool_results()), display=fake)
    assert len(fake.shown) == 1  # one display, then only updates of it
    updates = fake.handles[0].updates
    assert updates[-1].final
    assert sum(snapshot.final for snapshot in updates) == 1
    assert view.renders == len(updates) == 2  # synchronous: coalesced (first and final)
    final = updates[-1].html
    assert "write_file" in final
    assert "rafrx-card" in final
    assert "wrote" in final
    assert "tokens: 50 in / 25 out / 75 total" in final
    assert "finish: stop" in final
    assert view.done
    assert view.response.text == "Let me write that down.Done."
    assert view.response.usage == Usage(50, 25, 75)
    assert "status: done" in repr(updates[-1])


def test_live_converts_raw_updates() -> None:
    fake = FakeDisplay()
    view = live(reactivex.from_iterable(tool_turn("Hi <b>")), display=fake)
    assert view.response.tool_calls[0].arguments["content"] == LONG
    assert "Hi &lt;b&gt;" in fake.handles[0].updates[-1].html


def test_live_without_ipython_prints_the_final_text(capsys: pytest.CaptureFixture[str]) -> None:
    view = live(reactivex.from_iterable(tool_results()))  # no IPython shell in pytest
    out = capsys.readouterr().out
    assert out.count("status: done") == 1
    assert "[tool write_file call_1: done]" in out
    assert f"  content: {len(LONG.encode()) / 1024:.1f} KiB" in out
    assert "  -> wrote" in out
    assert view.response.finish_reason is FinishReason.STOP


def test_live_without_ipython_installed_falls_back_to_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "IPython", None)  # import IPython → ImportError
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    monkeypatch.setitem(sys.modules, "IPython.core.getipython", None)
    live(reactivex.of(u.TextDelta("plain <b>"), u.Finish(FinishReason.STOP)))
    assert capsys.readouterr().out == "plain <b>\nstatus: done · finish: stop\n"


def test_text_display_writes_to_a_stream() -> None:
    import io

    stream = io.StringIO()
    live(reactivex.of(u.TextDelta("Hi"), u.Finish(FinishReason.STOP)), display=text_display(stream))
    assert stream.getvalue() == "Hi\nstatus: done · finish: stop\n"


@pytest.mark.asyncio
async def test_live_coalesces_renders_on_the_loop() -> None:
    fake = FakeDisplay()
    subject: Subject[u.AgentResponseUpdate] = Subject()
    view = live(subject, display=fake, interval=0.05)
    start = time.monotonic()
    for i in range(150):
        subject.on_next(u.TextDelta(f"{i} "))
        await asyncio.sleep(0.002)
    await asyncio.sleep(0.06)  # let the pending timer fire
    elapsed = time.monotonic() - start
    subject.on_next(u.Finish(FinishReason.STOP))
    subject.on_completed()
    response = await view
    renders = fake.handles[0].updates
    assert response.text == "".join(f"{i} " for i in range(150))
    assert 3 <= len(renders) <= elapsed / 0.05 + 2  # bounded rate, yet live
    assert renders[-2].html.count("149 ") == 1  # the timer rendered the tail before the end
    assert renders[-1].final


@pytest.mark.asyncio
async def test_await_live_raises_the_stream_error_with_partial() -> None:
    fake = FakeDisplay()
    error = StreamInterrupted("connection reset")
    stream = reactivex.concat(reactivex.of(u.TextDelta("Half")), reactivex.throw(error))
    with pytest.raises(StreamInterrupted) as caught:
        await live(stream, display=fake)
    # A copy (the view keeps the error: raising it again and again would gather frames).
    assert str(caught.value) == str(error)
    assert caught.value.partial is not None
    assert caught.value.partial.text == "Half"
    final = fake.handles[0].updates[-1].html
    assert "status: failed" in final
    assert "connection reset" in final


@pytest.mark.asyncio
async def test_dispose_stops_the_stream_and_keeps_what_arrived() -> None:
    fake = FakeDisplay()
    subject: Subject[u.AgentResponseUpdate] = Subject()
    view = live(subject, display=fake)
    subject.on_next(u.TextDelta("partial"))
    assert not view.done
    with pytest.raises(RuntimeError, match="still running"):
        _ = view.response
    view.dispose()
    assert not subject.observers  # unsubscribed upstream
    response = await view
    assert response.text == "partial"
    assert response.interrupted
    assert "status: stopped" in fake.handles[0].updates[-1].text


@pytest.mark.asyncio
async def test_cancelling_the_await_disposes_the_stream() -> None:
    subject: Subject[u.AgentResponseUpdate] = Subject()
    view = live(subject, display=FakeDisplay())
    task = asyncio.ensure_future(view._wait())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not subject.observers
    assert view.done


def test_live_view_displays_nothing_itself() -> None:
    view = live(reactivex.empty(), display=FakeDisplay())
    assert view._ipython_display_() is None
    assert "LiveView done" in repr(view)


# ----------------------------------------------------------------- timeline


def _svg(picture_svg: str) -> ET.Element:
    return ET.fromstring(picture_svg)  # well-formed XML, or this raises


def test_timeline_has_a_lane_per_kind_and_per_call() -> None:
    entries = [(i * 0.01, update) for i, update in enumerate(tool_turn())]
    entries.append((0.5, u.TextDelta("late")))
    picture = timeline(Recording([Entry(t, x) for t, x in entries], end=0.6))
    assert picture.lanes == ("events", "reasoning", "text", "write_file · call_1", "usage")
    root = _svg(picture.svg)
    ns = "{http://www.w3.org/2000/svg}"
    circles = root.findall(f"{ns}circle")
    kinds = {circle.get("class") for circle in circles}
    assert {"ToolCallStartContent", "ToolCallArgsProgressContent"} <= kinds
    assert {"ToolCallArgsParsedContent", "ToolCallingContent", "TextContent"} <= kinds
    texts = [c for c in circles if c.get("class") == "TextContent"]
    xs = [float(c.get("cx", 0)) for c in texts]
    assert xs[1] - xs[0] > 300  # x is arrival time: 0.03 s vs 0.5 s on a 640 px axis
    assert picture._repr_svg_() == picture._repr_html_() == str(picture)
    assert picture.duration == pytest.approx(0.6)


def test_timeline_of_a_file_marks_the_error_in_red(tmp_path: Any) -> None:
    from rafrx.recorder import record

    stream = reactivex.concat(
        reactivex.from_iterable(tool_turn()[:5]), reactivex.throw(StreamInterrupted("reset"))
    )
    path = tmp_path / "failed.jsonl"
    with pytest.raises(StreamInterrupted):
        record(stream.pipe(convert()), path).pipe(aggregate()).run()
    picture = timeline(path, title="failed turn")
    assert "error" in picture.lanes
    assert 'stroke="#d62728"' in picture.svg
    assert ">failed turn</text>" in picture.svg


def test_timeline_escapes_labels_and_tooltips() -> None:
    turn = [u.ToolCallStart(EVIL, EVIL), u.ToolCallArgs(EVIL, "{}"), u.TextDelta(EVIL)]
    picture = timeline([(0.0, x) for x in turn], title=EVIL)
    assert "<script" not in picture.svg
    assert "&lt;script&gt;" in picture.svg
    _svg(picture.svg)


def test_timeline_of_non_rafrx_items_uses_their_type() -> None:
    picture = timeline([(0.0, 1), (1.0, "two")])
    assert picture.lanes == ("int", "str")
    _svg(picture.svg)
