"""Regression tests for the bugs a close, line-by-line reading of rafrx's code found
(operators side; the passing pins of the same reading are in test_close_reading_operators.py).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from reactivex.subject import Subject

from rafrx import operators as ops
from rafrx.content import ToolCalledContent, ToolCallingContent
from rafrx.events import ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.response import AgentResponseResult
from rafrx.sources import from_sse
from rafrx.tools import ToolApprovalResponse, tool


def _anthropic(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def test_anthropic_tool_use_start_input_is_replaced_not_prefixed_by_its_deltas() -> None:
    """What the user does: reads an Anthropic-format stream (a gateway or an
    Anthropic-compatible server) whose ``tool_use`` ``content_block_start`` already
    carries the call's ``input`` and which then also streams that input as
    ``input_json_delta`` pieces, as the Messages API streams every tool input.

    What happens: rafrx emits the start's input as a ``ToolCallArgs`` *and then* the
    deltas, so the arguments are ``{"city": "Oslo"}{"city": "Oslo"}``: the call gets
    ``error="invalid JSON arguments: Extra data"`` and never runs.

    What should happen: the arguments are the streamed input, ``{"city": "Oslo"}``.

    Evidence: anthropic-sdk-python's ``accumulate_event`` (lib/streaming/_messages.py)
    keeps a per-block ``json_buf`` that starts empty and, on each non-empty
    ``input_json_delta``, sets ``content.input = from_json(json_buf)``: the start's
    ``input`` is *replaced* by the deltas, kept only when none come. rafrx's own
    ``_server_block`` does exactly that for ``server_tool_use`` blocks (their start
    input is overwritten by the streamed JSON); only ``tool_use`` blocks append.
    Root cause: rafrx/sources/dialects/anthropic.py ``_block_start`` emits
    ``ToolCallArgs(json.dumps(initial))`` at once, and ``_content_delta`` appends the
    deltas after it.
    """
    body = _anthropic(
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude"}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "weather",
                "input": {"city": "Oslo"},
            },
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"city": '},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '"Oslo"}'},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    )
    response = from_sse(body, "anthropic").pipe(ops.convert(), ops.aggregate()).run()
    (call,) = response.tool_calls
    assert call.error is None, call.raw_arguments
    assert call.arguments == {"city": "Oslo"}


_RUNS: list[str] = []


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    _RUNS.append(path)
    return f"deleted {path}"


def _calling(call_id: str, path: str) -> AgentResponseResult:
    content = ToolCallingContent(call_id, "delete", {"path": path}, json.dumps({"path": path}))
    return AgentResponseResult("resp", "m", None, (content,))


@pytest.mark.asyncio
async def test_a_repeated_answer_to_an_answered_request_never_approves_a_later_call() -> None:
    """What the user does: runs ``execute_tools([delete], answers)`` with a hot
    ``Subject`` of answers over a stream of several LLM calls (the operator clears its
    seen ids at each ``ResponseStartedEvent`` for this: "an id may come back in it").
    The UI answers the first approval request twice (a double click, or a "yes" sent
    by two widgets): ``ToolApprovalResponse("c1", True)`` twice. The next LLM call
    reuses the id ``c1`` (Kimi, Mistral, Gemini adapters give every response the same
    ids) for ``delete(path="b")``.

    What happens: the second, redundant answer to the first request is stored in
    ``_Runner.answers`` (``take_answer``: no waiting future any more →
    ``answers.setdefault``), and the second call's request pops it: ``delete("b")``
    runs although nobody approved it. The request event is still emitted, so the UI
    shows a question whose answer has already been taken.

    What should happen: the second call waits for an answer to *its* request (here it
    is then denied at ``approval_timeout``); an answer to a request already answered
    is dropped.

    Evidence: the docstring of ``execute_tools``: "the first answer to a request
    counts" and "each subscription ... takes the answers given from then on";
    tests/operators/test_execute_tools.py
    ``test_a_late_answer_never_approves_a_later_call_with_the_same_id`` pins exactly
    this for a late answer to a *timed-out* request (``expired``), but the same late
    answer to an *answered* request slips through. Root cause:
    rafrx/operators/_execute_tools.py ``take_answer`` keeps any answer whose call has
    no waiting future. Fix: remember the ids answered (when a waiting future is
    resolved or a stored answer is taken) and drop later answers for them; clear the
    mark in ``approve()`` just before the new request is emitted.
    """
    _RUNS.clear()
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    items: list[AgentResponseResult] = []
    done = asyncio.get_running_loop().create_future()
    upstream.pipe(ops.execute_tools([delete], answers, approval_timeout=0.2)).subscribe(
        items.append, done.set_exception, lambda: done.set_result(None)
    )

    def called() -> list[ToolCalledContent]:
        return [c for r in items for c in r.contents if isinstance(c, ToolCalledContent)]

    upstream.on_next(_calling("c1", "a"))
    await asyncio.sleep(0)
    answers.on_next(ToolApprovalResponse("c1", True))
    answers.on_next(ToolApprovalResponse("c1", True))  # the same answer again
    while not called():
        await asyncio.sleep(0.01)
    # The next LLM call reuses the id for another call.
    upstream.on_next(AgentResponseResult("resp_2", "m", None, (), (ResponseStartedEvent(),)))
    upstream.on_next(_calling("c1", "b"))
    upstream.on_completed()
    await asyncio.wait_for(done, 5)
    requests = [e for r in items for e in r.events if isinstance(e, ToolApprovalRequestEvent)]
    assert len(requests) == 2
    assert _RUNS == ["a"], f"ran {_RUNS}: the second request was never answered"
    assert called()[1].error is not None
