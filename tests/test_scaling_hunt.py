"""Super-linear cliffs: work per item that grows with what came before.

No test here measures time. Each one counts work, at a size ``n`` and at
``4 n``: the Python lines rafrx runs (``sys.settrace``, rafrx's own files
only), the string comparisons a call id takes part in, or how many items a
stream holds back. Linear work grows about 4x from ``n`` to ``4 n``, quadratic
work about 16x; a test fails above :data:`MAX_GROWTH`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import reactivex

import rafrx
from rafrx import content as c
from rafrx import operators as ops
from rafrx import updates as u
from rafrx._redaction import DeltaRedactor
from rafrx.events import FinishEvent, ResponseStartedEvent
from rafrx.messages import (
    ANTHROPIC_THINKING,
    OPENAI_REASONING,
    ChatMessage,
    MessageRole,
    ToolCall,
    to_anthropic,
)
from rafrx.notebook import LiveState
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.sources import from_sse
from rafrx.sources.clients import to_responses_input

RAFRX_DIR = str(Path(rafrx.__file__).resolve().parent)

#: The most the work may grow from ``n`` to ``4 n`` (linear: about 4; quadratic: about 16).
MAX_GROWTH = 6.0


def lines_run(fn: Callable[[], Any]) -> int:
    """How many lines of rafrx's own code ``fn()`` runs (loop iterations included)."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(RAFRX_DIR) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def growth(make: Callable[[int], Callable[[], Any]], n: int) -> tuple[float, int, int]:
    """The growth of the lines run from size ``n`` to ``4 n`` (``make(size)`` builds the
    input, untraced, and returns the work to count)."""
    small = lines_run(make(n))
    large = lines_run(make(4 * n))
    return large / small, small, large


def assert_linear(make: Callable[[int], Callable[[], Any]], n: int) -> None:
    ratio, small, large = growth(make, n)
    assert ratio <= MAX_GROWTH, (
        f"work grew {ratio:.1f}x from n={n} to n={4 * n} ({small} -> {large} lines of rafrx)"
    )


def results(updates: list[Any]) -> list[AgentResponseResult]:
    """``updates`` through ``convert()`` (synchronously)."""
    out: list[AgentResponseResult] = []
    reactivex.from_iterable(updates).pipe(ops.convert()).subscribe(out.append)
    return out


def tool_calls(n: int) -> list[Any]:
    updates: list[Any] = []
    for i in range(n):
        call_id = f"call_{i}"
        updates += [
            u.ToolCallStart(call_id, "f"),
            u.ToolCallArgs(call_id, '{"a": 1}'),
            u.ToolCallEnd(call_id),
        ]
    updates.append(u.Finish(FinishReason.TOOL_CALLS))
    return updates


# ---------------------------------------------------------------- aggregate()


class CountingId(str):
    """A call id that counts the equality comparisons it takes part in (a dict lookup
    by the same object compares nothing; a scan of a list of ids compares each)."""

    compares = 0

    def __eq__(self, other: object) -> bool:
        CountingId.compares += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def aggregate_compares(n: int) -> int:
    ids = [CountingId(f"call_{i}") for i in range(n)]
    chunks = [AgentResponseResult(events=[ResponseStartedEvent()])]
    for call_id in ids:
        chunks.append(AgentResponseResult(contents=[c.ToolCallStartContent(call_id, "f")]))
    for call_id in ids:
        calling = c.ToolCallingContent(call_id, "f", {"a": 1}, '{"a": 1}')
        chunks.append(AgentResponseResult(contents=[calling]))
    chunks.append(AgentResponseResult(events=[FinishEvent(FinishReason.TOOL_CALLS)]))
    responses: list[rafrx.AgentResponse] = []
    CountingId.compares = 0
    reactivex.from_iterable(chunks).pipe(ops.aggregate()).subscribe(responses.append)
    assert len(responses[0].tool_calls) == n
    return CountingId.compares


def test_aggregate_many_tool_calls_compares_each_id_a_bounded_number_of_times() -> None:
    n = 1000
    small, large = aggregate_compares(n), aggregate_compares(4 * n)
    assert large <= 10 * 4 * n, f"{small} comparisons for {n} calls, {large} for {4 * n}"


# ---------------------------------------------------------------- flush_tool_calls()


def flush_twice(n: int) -> Callable[[], Any]:
    converted = results(tool_calls(n))  # (flushed by convert(), at the end)

    def run() -> None:
        out: list[AgentResponseResult] = []
        flush = ops.flush_tool_calls(eager=True)
        reactivex.from_iterable(converted).pipe(flush).subscribe(out.append)
        flushed = [x for r in out for x in r.contents if isinstance(x, c.ToolCallingContent)]
        assert len(flushed) == n

    return run


def test_eager_flush_after_convert_is_linear_in_the_number_of_calls() -> None:
    assert_linear(flush_twice, 200)


# ---------------------------------------------------------------- message conversion


def reused_ids(n: int) -> list[ChatMessage]:
    """n steps, each calling with the id Kimi K2 gives in every response."""
    messages = [ChatMessage.user("Look it up.")]
    for i in range(n):
        call = ToolCall("functions.lookup:0", "lookup", {"q": i})
        messages += [
            ChatMessage.assistant_with_tools("", [call]),
            ChatMessage.tool("found", "functions.lookup:0"),
        ]
    return messages


def with_blocks(n: int, key: str) -> list[ChatMessage]:
    """n steps whose assistant messages keep the blocks that go back (thinking, reasoning)."""
    messages = [ChatMessage.user("Look it up.")]
    for i in range(n):
        block: dict[str, Any]
        if key == ANTHROPIC_THINKING:
            block = {"type": "thinking", "thinking": "Hm.", "signature": f"sig{i}"}
        else:
            block = {"type": "reasoning", "id": f"rs_{i}", "summary": []}
        call = ToolCall(f"call_{i}", "lookup", {"q": i})
        messages += [
            ChatMessage(
                MessageRole.ASSISTANT, "", tool_calls=[call], provider_data={key: (block,)}
            ),
            ChatMessage.tool("found", f"call_{i}"),
        ]
    return messages


CONVERTERS = [
    pytest.param(to_anthropic, id="to_anthropic"),
    pytest.param(to_responses_input, id="to_responses_input"),
]


@pytest.mark.parametrize("convert", CONVERTERS)
def test_reused_call_ids_are_renamed_in_linear_time(convert: Callable[..., Any]) -> None:
    def make(n: int) -> Callable[[], Any]:
        messages = reused_ids(n)
        return lambda: convert(messages)

    assert_linear(make, 100)


@pytest.mark.parametrize(
    ("convert", "key"),
    [
        pytest.param(to_anthropic, ANTHROPIC_THINKING, id="to_anthropic"),
        pytest.param(to_responses_input, OPENAI_REASONING, id="to_responses_input"),
    ],
)
def test_messages_with_blocks_convert_in_linear_time(convert: Callable[..., Any], key: str) -> None:
    def make(n: int) -> Callable[[], Any]:
        messages = with_blocks(n, key)
        return lambda: convert(messages)

    assert_linear(make, 200)


def parallel_results(n: int) -> Callable[[], Any]:
    calls = [ToolCall(f"call_{i}", "f", {}) for i in range(n)]
    messages = [ChatMessage.user("Go."), ChatMessage.assistant_with_tools("", calls)]
    messages += [ChatMessage.tool("ok", f"call_{i}") for i in range(n)]

    def run() -> None:
        _, wire = to_anthropic(messages)
        assert len(wire[-1]["content"]) == n

    return run


def test_to_anthropic_many_parallel_results_is_linear() -> None:
    assert_linear(parallel_results, 200)


# ---------------------------------------------------------------- Responses dialect


def _event(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def responses_body(n: int) -> bytes:
    events = [_event("response.created", {"response": {"id": "resp_1", "model": "m"}})]
    for i in range(n):
        item = {
            "id": f"fc_{i}",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": f"call_{i}",
            "name": "f",
        }
        events += [
            _event("response.output_item.added", {"output_index": i, "item": item}),
            _event(
                "response.function_call_arguments.delta",
                {"item_id": f"fc_{i}", "output_index": i, "delta": "{}"},
            ),
            _event(
                "response.output_item.done",
                {"output_index": i, "item": {**item, "arguments": "{}", "status": "completed"}},
            ),
        ]
    usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
    response = {"id": "resp_1", "model": "m", "status": "completed", "usage": usage}
    events.append(_event("response.completed", {"response": response}))
    return "".join(events).encode()


def responses_stream(n: int) -> Callable[[], Any]:
    body = responses_body(n)

    def run() -> None:
        starts: list[Any] = []
        from_sse(body, "openai-responses").subscribe(
            lambda x: starts.append(x) if isinstance(x, u.ToolCallStart) else None
        )
        assert len(starts) == n

    return run


def test_responses_dialect_many_calls_is_linear() -> None:
    assert_linear(responses_stream, 200)


# ---------------------------------------------------------------- notebook live view


def agent_steps(n: int, same_id: bool) -> list[AgentResponseResult]:
    """A turn of n LLM calls, each calling one tool that then runs."""
    out = []
    for i in range(n):
        call_id = "call_0" if same_id else f"call_{i}"
        contents = [
            c.ToolCallStartContent(call_id, "f"),
            c.ToolCallArgsContent(call_id, '{"a": 1}'),
            c.ToolCallArgsParsedContent(call_id, "a", 1),
            c.ToolCallEndContent(call_id),
            c.ToolCallingContent(call_id, "f", {"a": 1}, '{"a": 1}'),
        ]
        out += [
            AgentResponseResult(events=[ResponseStartedEvent()], contents=contents),
            AgentResponseResult(contents=[c.ToolCalledContent(call_id, "ok")]),
            AgentResponseResult(events=[FinishEvent(FinishReason.TOOL_CALLS)]),
        ]
    return out


@pytest.mark.parametrize("same_id", [False, True], ids=["distinct-ids", "reused-id"])
def test_live_state_over_many_steps_is_linear(same_id: bool) -> None:
    def make(n: int) -> Callable[[], Any]:
        chunks = agent_steps(n, same_id)

        def run() -> None:
            state = LiveState()
            for chunk in chunks:
                state.add(chunk)
            assert len(state.cards) == n

        return run

    assert_linear(make, 100)


# ---------------------------------------------------------------- recorder redaction


def test_redactor_does_not_hold_a_run_of_whitespace_after_bearer() -> None:
    n = 2000
    redactor = DeltaRedactor(())
    released = len(redactor.push(0, u.TextDelta("Authorization: Bearer")))
    for i in range(n):
        released += len(redactor.push(i + 1, u.TextDelta(" ")))
    held = n + 1 - released
    assert len(redactor.flush()) == held
    assert held <= 64, f"{held} of {n + 1} deltas held back (each push re-scans them all)"
