"""Regression tests of the bugs the review of session 9's last three commits found (the
passing pins are in ``test_review_session9b.py``).

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import reactivex as rx

from rafrx import updates as u
from rafrx.content import ToolCalledContent, ToolCallIncompleteContent
from rafrx.operators import (
    accumulate_tool_calls,
    convert,
    execute_tools,
    flush_tool_calls,
    parse_args_stream,
    split_legacy_delta,
)
from rafrx.response import AgentResponseResult, FinishReason

HIGH = "\ud83d"  # the first UTF-16 half of U+1F600, as a server slicing by UTF-16 units sends it


def _incomplete(updates: list[u.Update], *, unfused: bool, error: Exception | None = None) -> list:
    ops = (
        [split_legacy_delta(), accumulate_tool_calls(), parse_args_stream(), flush_tool_calls()]
        if unfused
        else [convert()]
    )
    source = rx.from_iterable(updates)
    if error is not None:
        source = rx.concat(source, rx.throw(error))
    out: list[AgentResponseResult] = []
    source.pipe(*ops).subscribe(out.append, lambda e: None)
    return [c for r in out for c in r.contents if isinstance(c, ToolCallIncompleteContent)]


@pytest.mark.parametrize("unfused", [False, True], ids=["convert", "operators"])
def test_a_cut_calls_raw_arguments_keep_a_trailing_high_surrogate_when_the_stream_fails(
    unfused: bool,
) -> None:
    """What the user does: streams a tool call (Anthropic ``input_json_delta`` / Responses
    ``function_call_arguments.delta``: ``ToolCallArgs`` updates) whose last fragment
    before a network drop ends with the first UTF-16 half of an emoji (a server slicing
    by UTF-16 units sends ``"\\ud83d"`` on its own; the stream dies before the other half).

    What happens: the ``ToolCallIncompleteContent`` the flusher makes of the cut call has
    ``raw_arguments == '{"s": "a'``: the accumulator holds the high half (``OpenCall.high``,
    commit 20d23f1) for the next fragment and only lets it go at ``ToolCallEnd``; a call
    that never ends (stream failed, or completed/finished without the end) loses it.
    Before 20d23f1 the fragment went out as it came.

    What should happen: ``raw_arguments == '{"s": "a\\ud83d'``, as the commit message
    itself promises for an ended call ("emitted before the end if its call ends") and
    as the same stream in legacy ``ToolCallDelta`` form (OpenAI chat) still gives
    (the splitter ends the call first, so the held half goes out).

    Evidence: ``ToolCallIncompleteContent``'s docstring: "``raw_arguments`` is what
    arrived"; RELIABILITY.md #13: a cut call reports ``raw_arguments=…``.
    """
    updates = [
        u.ResponseMetadata("r1", "m"),
        u.ToolCallStart("c1", "f"),
        u.ToolCallArgs("c1", '{"s": "a' + HIGH),
    ]
    (cut,) = _incomplete(updates, unfused=unfused, error=ConnectionResetError("dropped"))
    assert cut.raw_arguments == '{"s": "a' + HIGH


@pytest.mark.parametrize("unfused", [False, True], ids=["convert", "operators"])
def test_a_cut_calls_raw_arguments_are_the_same_for_tool_call_args_and_legacy_deltas(
    unfused: bool,
) -> None:
    """What the user does: the same call, cut by the token limit before it ends, once
    as ``ToolCallArgs`` updates and once as legacy ``ToolCallDelta`` updates (OpenAI
    chat), its last fragment a lone high surrogate.

    What happens: the legacy stream's ``ToolCallIncompleteContent.raw_arguments`` ends
    with ``"\\ud83d"``; the ``ToolCallArgs`` one does not (``Finish`` clears the
    accumulator's open calls, and the held half with them:
    ``_accumulate_tool_calls.py`` ``u.Finish`` branch, ``self._calls.clear()``).

    What should happen: the two wire forms give the same contents (DESIGN.md: the
    converter normalises every provider's stream into one model; the convert/operators
    equivalence is property-tested in tests/operators/test_convert.py).
    """
    head = [u.ResponseMetadata("r1", "m")]
    finish = [u.Finish(FinishReason.LENGTH)]
    args = [
        u.ToolCallStart("c1", "f"),
        u.ToolCallArgs("c1", '{"s": "a'),
        u.ToolCallArgs("c1", HIGH),
    ]
    legacy = [u.ToolCallDelta(0, "c1", "f", '{"s": "a'), u.ToolCallDelta(0, None, None, HIGH)]
    (from_args,) = _incomplete(head + args + finish, unfused=unfused)
    (from_legacy,) = _incomplete(head + legacy + finish, unfused=unfused)
    assert from_legacy.raw_arguments == '{"s": "a' + HIGH  # (holds today)
    assert from_args.raw_arguments == from_legacy.raw_arguments


def known(x: int) -> int:
    """A local tool."""
    return x


@pytest.mark.asyncio
async def test_a_provider_run_call_is_not_reported_unknown_when_the_next_call_follows() -> None:
    """What the user does: pipes a recorded (synchronous) stream of two LLM calls
    through ``convert(eager=True)`` and ``execute_tools([known])``. In the first call
    the provider ran its own tool (``web_search``) and said so with a ``ToolCalled``
    update after the call's end; the second call follows at once.

    What happens: ``c1`` gets two ``ToolCalledContent``: the provider's result, then
    ``unknown tool 'web_search'``. ``_Runner.run`` (``_execute_tools.py``, commit
    7e90ff9) reads ``self.ran_upstream`` and ``self.in_call`` when the task first runs,
    not when the call was seen: by then the second call's ``ResponseStartedEvent`` has
    replaced the set (and reopened ``in_call``), so the call waits for the wrong LLM
    call's end and then misses the provider's report.

    What should happen: one ``ToolCalledContent`` for ``c1`` (the provider's), as with
    one LLM call. Evidence: ``execute_tools``' docstring: "A call the provider ran
    itself and said so ... is not run again; a call of no tool given here waits for
    the end of its LLM call".
    """
    first = [
        u.ResponseMetadata("r1", "m"),
        u.ToolCallStart("c1", "web_search"),
        u.ToolCallArgs("c1", "{}"),
        u.ToolCallEnd("c1"),
        u.ToolCalled("c1", "provider result"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    second = [u.ResponseMetadata("r2", "m"), u.TextDelta("done"), u.Finish(FinishReason.STOP)]
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    out: list[AgentResponseResult] = []
    rx.from_iterable(first + second).pipe(convert(eager=True), execute_tools([known])).subscribe(
        out.append, done.set_exception, lambda: done.set_result(None)
    )
    await asyncio.wait_for(done, 5)
    called: list[Any] = [
        (c.result, c.error) for r in out for c in r.contents if isinstance(c, ToolCalledContent)
    ]
    assert called == [("provider result", None)]
