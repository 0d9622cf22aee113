"""A reviewer's pins on the three latest commits (20d23f1, 7e90ff9, 10fd9a4).

The angle: for each change, what input reaches it, is the result right, and
does what worked before still work? The changes pinned here:

* the tool-call accumulator holds a trailing high surrogate of an argument
  fragment for the next one (``OpenCall.whole``); ``convert()``'s fused path
  defers to the stages when a fragment has surrogates;
* the terminal holds a trailing CR or high surrogate (CRLF shows as LF); the
  notebook state joins surrogate halves at the seam of two deltas;
* the docstring parser reads names with combining marks, normalises them
  (NFKC) and keeps identifiers only;
* ``execute_tools`` lets a call of no local tool wait for its LLM call's end
  before failing as unknown;
* ``_call_doc`` walks the MRO; ``_access_of`` is keyed by identity;
  ``proxy_secrets`` reads netrc credentials of a proxy;
* ``live()`` renders with a thread timer off any loop; the first-byte
  deadline expires one loop iteration late.

The bugs found are in /tmp/hunts/review9b_bugs.py (not part of the suite).
"""

from __future__ import annotations

import asyncio
import gc
import io
import itertools
import json
import unicodedata
from typing import Any

import pytest
import reactivex as rx
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex.subject import Subject

import rafrx
from rafrx import tool
from rafrx import updates as u
from rafrx._docstrings import parse_docstring
from rafrx._fragments import join_surrogates
from rafrx._redaction import proxy_secrets
from rafrx.agent import _access_of, _HistoryAccess
from rafrx.content import (
    Content,
    TextContent,
    ToolCallArgsContent,
    ToolCalledContent,
    ToolCallEndContent,
    ToolCallingContent,
)
from rafrx.errors import ConnectTimeout, LimitExceeded
from rafrx.notebook import LiveSnapshot, LiveState, live
from rafrx.operators import (
    accumulate_tool_calls,
    convert,
    execute_tools,
    flush_tool_calls,
    parse_args_stream,
    split_legacy_delta,
)
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.sources.clients import OpenAIChatClient, Timeouts
from rafrx.terminal import TerminalRenderer
from rafrx.testing import Fault, LLMServer

HIGH, LOW = "\ud83d", "\ude00"  # U+1F600's two UTF-16 halves
EMOJI = "\U0001f600"

# ---------------------------------------------------------------- helpers


def _units(text: str) -> list[str]:
    """``text`` as its UTF-16 code units (an astral character becomes two surrogates)."""
    raw = text.encode("utf-16-le")
    return [chr(int.from_bytes(raw[i : i + 2], "little")) for i in range(0, len(raw), 2)]


def _pieces(units: list[str], cuts: list[int]) -> list[str]:
    """``units`` cut at ``cuts`` (indices into it), empty pieces dropped."""
    bounds = [0, *sorted(set(cuts)), len(units)]
    return ["".join(units[a:b]) for a, b in itertools.pairwise(bounds) if a < b]


def _unfused() -> list[Any]:
    return [split_legacy_delta(), accumulate_tool_calls(), parse_args_stream(), flush_tool_calls()]


def _contents(updates: list[u.Update], ops: list[Any]) -> tuple[list[Content], list[Exception]]:
    out: list[AgentResponseResult] = []
    errors: list[Exception] = []
    rx.from_iterable(updates).pipe(*ops).subscribe(out.append, errors.append)
    return [c for r in out for c in r.contents], errors


def _args_call(pieces: list[str], call_id: str = "c1") -> list[u.Update]:
    return [
        u.ResponseMetadata("r1", "m"),
        u.ToolCallStart(call_id, "f"),
        *(u.ToolCallArgs(call_id, p) for p in pieces),
        u.ToolCallEnd(call_id),
        u.Finish(FinishReason.TOOL_CALLS),
    ]


def _legacy_call(pieces: list[str]) -> list[u.Update]:
    first, *rest = pieces
    return [
        u.ResponseMetadata("r1", "m"),
        u.ToolCallDelta(0, "c1", "f", first),
        *(u.ToolCallDelta(0, None, None, p) for p in rest),
        u.Finish(FinishReason.TOOL_CALLS),
    ]


def _calling(contents: list[Content]) -> ToolCallingContent:
    (calling,) = [c for c in contents if isinstance(c, ToolCallingContent)]
    return calling


# ------------------------------------------- argument fragments with surrogates

_TEXTS = st.text(
    alphabet=st.sampled_from(["a", "é", "\n", '"', "\\", EMOJI, "\U0001f44d", "\u4e2d"]),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(text=_TEXTS, data=st.data())
def test_arguments_cut_anywhere_in_utf16_units_reach_the_tool_whole_on_every_path(
    text: str, data: st.DataObject
) -> None:
    """ToolCallArgs and legacy ToolCallDelta, fused and unfused: one call, the same
    arguments, the raw text whole (no lone surrogate), identical contents."""
    raw = json.dumps({"s": text}, ensure_ascii=False)
    units = _units(raw)
    cuts = data.draw(st.lists(st.integers(1, len(units) - 1), max_size=6))
    pieces = _pieces(units, cuts)
    fused, fused_errors = _contents(_args_call(pieces), [convert()])
    unfused, unfused_errors = _contents(_args_call(pieces), _unfused())
    assert fused == unfused
    assert not fused_errors
    assert not unfused_errors
    calling = _calling(fused)
    assert calling.arguments == {"s": text}
    assert calling.raw_arguments == raw
    legacy, _ = _contents(_legacy_call(pieces), [convert()])
    assert _calling(legacy).raw_arguments == raw
    legacy_unfused, _ = _contents(_legacy_call(pieces), _unfused())
    assert legacy == legacy_unfused


@pytest.mark.parametrize("fused", [True, False], ids=["convert", "operators"])
def test_no_argument_fragment_carries_half_an_emoji(fused: bool) -> None:
    """The fragment a tool's streaming UI shows never ends in a high half: the held
    half goes out joined with the next fragment's low half."""
    pieces = ['{"s": "a' + HIGH, LOW + 'b"}']
    contents, _ = _contents(_args_call(pieces), [convert()] if fused else _unfused())
    fragments = [c.args_delta for c in contents if isinstance(c, ToolCallArgsContent)]
    assert fragments == ['{"s": "a', EMOJI + 'b"}']


@pytest.mark.parametrize("fused", [True, False], ids=["convert", "operators"])
def test_a_high_half_that_ends_the_arguments_goes_out_before_the_call_ends(fused: bool) -> None:
    """A call whose last fragment is a lone high half: the half is kept (as it came),
    in a fragment right before the call's end."""
    pieces = ['"a', HIGH]
    contents, _ = _contents(_args_call(pieces), [convert()] if fused else _unfused())
    lifecycle = [c for c in contents if isinstance(c, ToolCallArgsContent | ToolCallEndContent)]
    assert [type(c).__name__ for c in lifecycle] == [
        "ToolCallArgsContent",
        "ToolCallArgsContent",
        "ToolCallEndContent",
    ]
    assert lifecycle[1].args_delta == HIGH
    assert _calling(contents).raw_arguments == '"a' + HIGH


@pytest.mark.parametrize("fused", [True, False], ids=["convert", "operators"])
def test_a_held_high_half_not_followed_by_its_low_half_goes_out_unchanged(fused: bool) -> None:
    """An empty fragment between does not lose the held half; a next fragment that
    does not start with a low half gets it back in front, as it came."""
    pieces = ['{"s": "a' + HIGH, "", 'x"}']
    contents, _ = _contents(_args_call(pieces), [convert()] if fused else _unfused())
    assert _calling(contents).raw_arguments == '{"s": "a' + HIGH + 'x"}'


@pytest.mark.parametrize("fused", [True, False], ids=["convert", "operators"])
def test_max_argument_chars_counts_a_joined_emoji_once(fused: bool) -> None:
    """An emoji sent as two halves counts as the one character it becomes, whichever
    path: at the limit the call passes; one under, it fails with LimitExceeded."""
    raw = '{"s": "' + EMOJI + EMOJI + '"}'
    pieces = ['{"s": "' + HIGH, LOW + HIGH, LOW + '"}']

    def run(limit: int) -> tuple[list[Content], list[Exception]]:
        if fused:
            return _contents(_args_call(pieces), [convert(max_argument_chars=limit)])
        ops = _unfused()
        ops[1] = accumulate_tool_calls(max_argument_chars=limit)
        return _contents(_args_call(pieces), ops)

    contents, errors = run(len(raw))
    assert not errors
    assert _calling(contents).raw_arguments == raw
    _, errors = run(len(raw) - 1)
    assert [type(e) for e in errors] == [LimitExceeded]


def test_two_calls_hold_their_own_high_halves() -> None:
    """Interleaved calls (parallel tool calls): each call's held half joins its own
    call's low half, never the other call's."""
    updates = [
        u.ResponseMetadata("r1", "m"),
        u.ToolCallStart("a", "f"),
        u.ToolCallStart("b", "f"),
        u.ToolCallArgs("a", '"x' + HIGH),
        u.ToolCallArgs("b", '"y' + HIGH),
        u.ToolCallArgs("b", LOW + '"'),
        u.ToolCallArgs("a", LOW + '"'),
        u.ToolCallEnd("a"),
        u.ToolCallEnd("b"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    contents, _ = _contents(updates, [convert()])
    raws = {c.call_id: c.raw_arguments for c in contents if isinstance(c, ToolCallingContent)}
    assert raws == {"a": '"x' + EMOJI + '"', "b": '"y' + EMOJI + '"'}


# ---------------------------------------------- execute_tools and unknown tools


def known(x: int) -> int:
    """Return x."""
    return x


def _called(results: list[AgentResponseResult]) -> list[tuple[str, Any, str | None]]:
    return [
        (c.call_id, c.result, c.error)
        for r in results
        for c in r.contents
        if isinstance(c, ToolCalledContent)
    ]


def _call_updates(call_id: str, name: str, args: str = "{}") -> list[u.Update]:
    return [u.ToolCallStart(call_id, name), u.ToolCallArgs(call_id, args), u.ToolCallEnd(call_id)]


async def _drain() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_an_unknown_tool_fails_at_its_llm_calls_finish_before_the_stream_completes() -> None:
    """Eager: a call of no local tool waits for the Finish, then fails as unknown,
    even while the stream stays open."""
    subject: Subject[u.Update] = Subject()
    out: list[AgentResponseResult] = []
    subject.pipe(convert(eager=True), execute_tools([known])).subscribe(out.append)
    subject.on_next(u.ResponseMetadata("r1", "m"))
    for update in _call_updates("c1", "nope"):
        subject.on_next(update)
    await _drain()
    assert _called(out) == []  # (the provider may still report it ran it)
    subject.on_next(u.Finish(FinishReason.TOOL_CALLS))
    async with asyncio.timeout(5):
        while not _called(out):
            await asyncio.sleep(0.01)
    assert _called(out) == [("c1", None, "unknown tool 'nope' (available: known)")]


@pytest.mark.asyncio
async def test_a_known_tool_runs_at_once_without_waiting_for_the_finish() -> None:
    """Only calls of no local tool wait: a local tool's result comes before the Finish."""
    subject: Subject[u.Update] = Subject()
    out: list[AgentResponseResult] = []
    subject.pipe(convert(eager=True), execute_tools([known])).subscribe(out.append)
    subject.on_next(u.ResponseMetadata("r1", "m"))
    for update in _call_updates("c1", "known", '{"x": 7}'):
        subject.on_next(update)
    async with asyncio.timeout(5):
        while not _called(out):
            await asyncio.sleep(0.01)
    assert _called(out) == [("c1", "7", None)]


@pytest.mark.asyncio
async def test_a_stream_failing_while_an_unknown_call_waits_fails_without_hanging() -> None:
    subject: Subject[u.Update] = Subject()
    out: list[AgentResponseResult] = []
    failed: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
    subject.pipe(convert(eager=True), execute_tools([known])).subscribe(
        out.append, failed.set_result
    )
    subject.on_next(u.ResponseMetadata("r1", "m"))
    for update in _call_updates("c1", "nope"):
        subject.on_next(update)
    await _drain()
    subject.on_error(ConnectionResetError("dropped"))
    error = await asyncio.wait_for(failed, 5)
    assert isinstance(error, ConnectionResetError)
    await _drain()
    assert _called(out) == []


@pytest.mark.asyncio
async def test_disposing_while_an_unknown_call_waits_cancels_it() -> None:
    subject: Subject[u.Update] = Subject()
    out: list[AgentResponseResult] = []
    subscription = subject.pipe(convert(eager=True), execute_tools([known])).subscribe(out.append)
    subject.on_next(u.ResponseMetadata("r1", "m"))
    for update in _call_updates("c1", "nope"):
        subject.on_next(update)
    await _drain()
    waiting = [t for t in asyncio.all_tasks() if t.get_name() == "rafrx tool nope"]
    assert len(waiting) == 1
    subscription.dispose()
    async with asyncio.timeout(5):
        while not waiting[0].done():
            await asyncio.sleep(0.01)
    assert waiting[0].cancelled()
    assert _called(out) == []


@pytest.mark.asyncio
async def test_a_provider_run_call_reported_after_its_end_is_not_reported_unknown() -> None:
    updates = [
        u.ResponseMetadata("r1", "m"),
        *_call_updates("c1", "web_search"),
        u.ToolCalled("c1", "found"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    out: list[AgentResponseResult] = []
    rx.from_iterable(updates).pipe(convert(eager=True), execute_tools([known])).subscribe(
        out.append, done.set_exception, lambda: done.set_result(None)
    )
    await asyncio.wait_for(done, 5)
    assert _called(out) == [("c1", "found", None)]


@pytest.mark.asyncio
async def test_an_unknown_call_of_a_stream_without_finish_fails_at_completion() -> None:
    """No Finish at all (a hand-built stream): the completion ends the LLM call."""
    updates = [u.ResponseMetadata("r1", "m"), *_call_updates("c1", "nope")]
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    out: list[AgentResponseResult] = []
    rx.from_iterable(updates).pipe(convert(eager=True), execute_tools([known])).subscribe(
        out.append, done.set_exception, lambda: done.set_result(None)
    )
    await asyncio.wait_for(done, 5)
    assert _called(out) == [("c1", None, "unknown tool 'nope' (available: known)")]


# ---------------------------------------------------------------- terminal


def _shown(pieces: list[str], kind: str = "text") -> str:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    for piece in pieces:
        item = TextContent(piece) if kind == "text" else rafrx.content.ReasoningContent(piece)
        renderer.result(AgentResponseResult(contents=[item]))
    renderer.close()
    return out.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(["a", "\r", "\n", EMOJI, "é"]), min_size=1, max_size=12),
    data=st.data(),
)
def test_the_terminal_shows_a_text_the_same_however_its_utf16_units_are_cut(
    text: str, data: st.DataObject
) -> None:
    units = _units(text)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(units) - 1)), max_size=5))
    assert _shown(_pieces(units, cuts)) == _shown([text])


def test_a_lone_cr_ending_a_delta_is_shown_as_a_lone_cr_is() -> None:
    """A CR held for a possible LF that does not come shows as an unsplit lone CR."""
    assert _shown(["a\r", "b"]) == _shown(["a\rb"])
    assert "\r" not in _shown(["a\r", "b"])  # (inert: it would drive the terminal)


def test_a_held_cr_at_the_end_of_the_text_is_not_lost() -> None:
    assert _shown(["a\r"]) == _shown(["a\r", ""]) != _shown(["a"])


def test_a_held_cr_does_not_move_into_the_reasoning_that_follows() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    renderer.result(AgentResponseResult(contents=[TextContent("x\r")]))
    renderer.result(AgentResponseResult(contents=[rafrx.content.ReasoningContent("\nthink")]))
    renderer.close()
    shown = out.getvalue()
    text_line, reasoning_line = shown.split("\n", 1)
    assert text_line.startswith("x")
    assert len(text_line) == 2
    assert "think" in reasoning_line


# ---------------------------------------------------------------- notebook state


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(["a", EMOJI, "\U0001f44d", "中"]), min_size=1),
    data=st.data(),
)
def test_the_live_state_joins_emoji_halves_however_often_it_is_read(
    text: str, data: st.DataObject
) -> None:
    """Read between any deltas (a render), the text is whole at the end. (Each delta
    as JSON decoding gives it: a pair within one delta is one character already.)"""
    units = _units(text)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(units) - 1)), max_size=6))
    state = LiveState()
    for piece in map(join_surrogates, _pieces(units, cuts)):
        state.add(AgentResponseResult(contents=[TextContent(piece)]))
        if data.draw(st.booleans()):
            assert state.blocks  # a render reads them
    assert state.text == text


# ---------------------------------------------------------------- docstrings


def test_google_star_args_and_typed_entries_keep_their_descriptions() -> None:
    _, params = parse_docstring(
        """Do it.

        Args:
            path (str | None): the file.
            mapping (dict[str, tuple[int, int]]): pairs.
            *args: extra values.
            **kwargs (Any): options.
        """
    )
    assert params == {
        "path": "the file.",
        "mapping": "pairs.",
        "args": "extra values.",
        "kwargs": "options.",
    }


def test_sphinx_typed_params_keep_their_descriptions() -> None:
    _, params = parse_docstring(
        """Do it.

        :param str path: the file.
        :param dict[str, int] counts: the counts.
        :param timeout: seconds.
        :keyword bool strict: no guessing.
        """
    )
    assert params == {
        "path": "the file.",
        "counts": "the counts.",
        "timeout": "seconds.",
        "strict": "no guessing.",
    }


def test_a_docstring_in_nfd_describes_the_nfc_parameter() -> None:
    name = unicodedata.normalize("NFC", "café")
    doc = "Order.\n\nArgs:\n    " + unicodedata.normalize("NFD", name) + ": the place.\n"
    _, params = parse_docstring(doc)
    assert params == {name: "the place."}


def test_entries_that_are_no_identifier_are_no_parameters() -> None:
    _, params = parse_docstring(
        """Do it.

        Args:
            config: the settings.
            config.timeout: seconds.
            2nd: not a name.
        """
    )
    assert set(params) == {"config"}
    assert params["config"].startswith("the settings.")


def test_a_combining_mark_name_gets_its_description_in_the_tool_schema() -> None:
    @tool
    def greet(नाम: str, ชื่อ: str) -> str:
        """Greet.

        Args:
            नाम: the name.
            ชื่อ: the other name.
        """
        return नाम + ชื่อ

    properties = greet.to_openai()["function"]["parameters"]["properties"]
    assert {k: v.get("description") for k, v in properties.items()} == {
        "नाम": "the name.",
        "ชื่อ": "the other name.",
    }


# ---------------------------------------------------------------- tools: __call__ docs


class _Base:
    def __call__(self, x: int) -> int:
        """Double a number.

        Args:
            x: the number.
        """
        return 2 * x


class _Quiet(_Base):
    def __call__(self, x: int) -> int:
        return 2 * x


class _Loud(_Base):
    def __call__(self, x: int) -> int:
        """Triple a number."""
        return 3 * x


class _Undocumented:
    def __call__(self, x: int) -> int:
        return x


def test_a_callable_objects_tool_takes_the_nearest_call_docstring() -> None:
    assert tool(_Quiet()).description == "Double a number."
    assert tool(_Loud()).description == "Triple a number."
    schema = tool(_Quiet()).to_openai()["function"]["parameters"]["properties"]
    assert schema["x"].get("description") == "the number."


def test_a_callable_object_without_any_docstring_gets_no_builtin_text() -> None:
    assert "Call self as a function" not in (tool(_Undocumented()).description or "")


# ---------------------------------------------------------------- history access registry


class _Provider:
    """A history provider stand-in (the registry only needs its identity)."""

    __hash__ = None  # type: ignore[assignment]  # (unhashable: a dataclass with eq)


class _Slotted:
    __slots__ = ()  # (no weak reference)


def test_agents_on_one_provider_share_its_access_and_others_do_not() -> None:
    one, other = _Provider(), _Provider()
    shared = _access_of(one, _HistoryAccess())
    assert _access_of(one, _HistoryAccess()) is shared
    assert _access_of(other, _HistoryAccess()) is not shared
    assert _access_of(None, own := _HistoryAccess()) is own


def test_a_provider_without_weak_references_keeps_each_agents_own_access() -> None:
    provider = _Slotted()
    own = _HistoryAccess()
    assert _access_of(provider, own) is own


def test_a_dead_providers_entry_goes_with_it() -> None:
    from rafrx import agent

    provider = _Provider()
    key = id(provider)
    _access_of(provider, _HistoryAccess())
    assert key in agent._ACCESS
    del provider
    gc.collect()
    assert key not in agent._ACCESS


# ---------------------------------------------------------------- proxy netrc secrets


def test_netrc_credentials_of_a_proxy_without_any_are_secrets(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine proxy.example login svc password pr0xy-pw\n")
    netrc_file.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc_file))
    secrets = proxy_secrets({"https": "http://proxy.example:3128"})
    assert "pr0xy-pw" in secrets
    assert "c3ZjOnByMHh5LXB3" in secrets  # base64("svc:pr0xy-pw"), the Basic credentials
    assert proxy_secrets({"https": "http://other.example:3128"}) == ()


def test_a_proxy_urls_own_credentials_win_over_netrc(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine proxy.example login svc password from-netrc\n")
    monkeypatch.setenv("NETRC", str(netrc_file))
    secrets = proxy_secrets({"https": "http://me:from-url@proxy.example:3128"})
    assert "from-url" in secrets
    assert "from-netrc" not in secrets


def test_a_missing_or_broken_netrc_gives_no_secrets(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    assert proxy_secrets({"https": "http://proxy.example:3128"}) == ()
    broken = tmp_path / "broken"
    broken.write_text("machine\n")
    monkeypatch.setenv("NETRC", str(broken))
    assert proxy_secrets({"https": "http://proxy.example:3128"}) == ()


# ---------------------------------------------------------------- live view


class _Display:
    def __init__(self) -> None:
        self.snapshots: list[LiveSnapshot] = []

    def __call__(self, obj: LiveSnapshot, display_id: bool = True) -> _Display:
        self.snapshots.append(obj)
        return self

    def update(self, obj: LiveSnapshot, **_: Any) -> None:
        self.snapshots.append(obj)


def test_a_synchronous_stream_off_any_loop_ends_with_one_final_render_and_no_timer() -> None:
    """No loop: the throttle's thread timer, if started, is cancelled by the final
    render, which shows everything."""
    display = _Display()
    pieces = [u.TextDelta(t) for t in ("a", "b", "c", "d")]
    view = live(rx.from_iterable(pieces), display=display, interval=60)
    assert view.done
    assert view._timer is None
    assert display.snapshots[-1].final
    assert "abcd" in display.snapshots[-1].text
    assert sum(s.final for s in display.snapshots) == 1


# ---------------------------------------------------------------- first-byte deadline


@pytest.mark.asyncio
async def test_a_server_silent_before_its_headers_still_fails_with_connect_timeout() -> None:
    """The deadline one loop iteration late still expires: a stall longer than
    ``first_byte`` is a ConnectTimeout, well before the stall ends."""
    async with LLMServer() as server:
        server.enqueue(Fault.stall(5))
        client = OpenAIChatClient(
            server.url, api_key="k", model="m", timeouts=Timeouts(first_byte=0.3)
        )
        try:
            failed: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
            client.stream([rafrx.ChatMessage.user("hi")]).subscribe(on_error=failed.set_result)
            error = await asyncio.wait_for(failed, 3)
        finally:
            await client.aclose()
    assert isinstance(error, ConnectTimeout)
