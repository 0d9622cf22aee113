"""Tests for the execute_tools() operator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import ResponseMetadata, TextContent, ToolCalledContent, ToolCallingContent
from rafrx.errors import ProviderError, ToolError
from rafrx.events import ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.sources import from_sse
from rafrx.tools import Tool, ToolApprovalResponse, tool


def calling(call_id: str, name: str, arguments: Any = None, **kw: Any) -> ToolCallingContent:
    return ToolCallingContent(call_id, name, {} if arguments is None else arguments, **kw)


def results_of(*calls: ToolCallingContent) -> AgentResponseResult:
    return AgentResponseResult("resp_1", "m", None, calls)


class Recorder:
    """Subscribes and records every notification."""

    def __init__(self, source: Observable[AgentResponseResult]) -> None:
        self.items: list[AgentResponseResult] = []
        self.error: Exception | None = None
        self.completed = False
        self.finished = asyncio.Event()
        self.subscription = source.subscribe(self.on_next, self.on_error, self.on_completed)

    def on_next(self, item: AgentResponseResult) -> None:
        self.items.append(item)

    def on_error(self, error: Exception) -> None:
        self.error = error
        self.finished.set()

    def on_completed(self) -> None:
        self.completed = True
        self.finished.set()

    async def wait(self) -> Recorder:
        await asyncio.wait_for(self.finished.wait(), 5)
        return self

    def called(self) -> dict[str, ToolCalledContent]:
        return {
            c.call_id: c for r in self.items for c in r.contents if isinstance(c, ToolCalledContent)
        }

    def approvals(self) -> list[ToolApprovalRequestEvent]:
        return [e for r in self.items for e in r.events if isinstance(e, ToolApprovalRequestEvent)]


async def run(
    calls: list[ToolCallingContent], tools: list[Any], approver: Any = None, **kw: Any
) -> Recorder:
    source = reactivex.of(results_of(*calls))
    return await Recorder(source.pipe(ops.execute_tools(tools, approver, **kw))).wait()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def echo(text: str) -> str:
    return text


@tool
def info() -> dict[str, Any]:
    return {"ok": True, "name": "ü"}


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


# ---------------------------------------------------------------- results


@pytest.mark.asyncio
async def test_results_pass_through_and_each_call_gets_its_result() -> None:
    text = AgentResponseResult("resp_1", "m", None, (TextContent("hi"),))
    calls = results_of(calling("c1", "add", {"a": 2, "b": 3}), calling("c2", "echo", {"text": "x"}))
    source = reactivex.from_iterable([text, calls])
    rec = await Recorder(source.pipe(ops.execute_tools([add, echo, info]))).wait()
    assert rec.completed
    assert rec.items[:2] == [text, calls]
    assert len(rec.items) == 4
    assert rec.called() == {
        "c1": ToolCalledContent("c1", result="5"),
        "c2": ToolCalledContent("c2", result="x"),
    }
    for item in rec.items[2:]:
        assert (item.id, item.model, item.events) == ("resp_1", "m", ())
        assert len(item.contents) == 1


@pytest.mark.asyncio
async def test_non_str_results_are_sent_as_json() -> None:
    rec = await run([calling("c1", "info")], [info])
    assert rec.called()["c1"].result == '{"ok": true, "name": "ü"}'


@pytest.mark.asyncio
async def test_the_called_content_keeps_the_calls_metadata() -> None:
    meta = ResponseMetadata("resp_9", "model-x")
    rec = await run([calling("c1", "echo", {"text": "a"}, meta=meta)], [echo])
    assert rec.called()["c1"].meta == meta


def test_a_stream_without_calls_needs_no_event_loop() -> None:
    items = [AgentResponseResult(contents=(TextContent("a"),)), AgentResponseResult()]
    out = reactivex.from_iterable(items).pipe(ops.execute_tools([add]), rx.to_list()).run()
    assert out == items


def test_a_call_without_a_running_loop_is_a_clear_error() -> None:
    source = reactivex.of(results_of(calling("c1", "add", {"a": 1, "b": 2})))
    with pytest.raises(RuntimeError, match="running asyncio loop"):
        source.pipe(ops.execute_tools([add])).run()


# ---------------------------------------------------------------- errors


@pytest.mark.asyncio
async def test_unknown_tool() -> None:
    rec = await run([calling("c1", "nope")], [add, echo])
    assert rec.completed
    assert rec.called()["c1"].error == "unknown tool 'nope' (available: add, echo)"


@pytest.mark.asyncio
async def test_unparsable_arguments() -> None:
    call = ToolCallingContent("c1", "add", None, '{"a": ', "invalid JSON arguments: x")
    rec = await run([call], [add])
    assert rec.called()["c1"].error == "invalid arguments for tool 'add': invalid JSON arguments: x"


@pytest.mark.asyncio
async def test_validation_failure() -> None:
    rec = await run([calling("c1", "add", {"a": 1, "b": "2"})], [add])
    assert rec.called()["c1"].error == (
        "invalid arguments for tool 'add': argument 'b': expected integer, got string \"2\""
    )


@pytest.mark.asyncio
async def test_exception_names_type_and_message() -> None:
    @tool
    async def boom(n: int) -> None:
        raise ZeroDivisionError(f"cannot divide {n} by zero")

    rec = await run([calling("c1", "boom", {"n": 7})], [boom])
    assert rec.completed
    assert (
        rec.called()["c1"].error == "tool 'boom' raised ZeroDivisionError: cannot divide 7 by zero"
    )


@pytest.mark.asyncio
async def test_timeout() -> None:
    @tool(timeout=0.02)
    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"  # pragma: no cover

    rec = await run([calling("c1", "slow")], [slow])
    assert rec.called()["c1"].error == "tool 'slow' timed out after 0.02 s"


@pytest.mark.asyncio
async def test_a_result_without_json_form_is_an_error() -> None:
    @tool
    def raw() -> bytes:
        return b"\x00"

    rec = await run([calling("c1", "raw")], [raw])
    assert rec.called()["c1"].error == (
        "tool 'raw': TypeError: a tool result of type bytes is not JSON serializable"
    )


@pytest.mark.asyncio
async def test_every_error_kind_in_one_stream_never_crashes_it() -> None:
    @tool
    def fails() -> None:
        raise ValueError("no")

    calls = [
        calling("ok", "add", {"a": 1, "b": 1}),
        calling("unknown", "nope"),
        ToolCallingContent("unparsable", "add", None, "{", "invalid JSON arguments: y"),
        calling("invalid", "add", {"a": 1}),
        calling("raises", "fails"),
        calling("denied", "delete", {"path": "/"}),
    ]
    rec = await run(calls, [add, fails, delete])
    assert rec.completed
    assert rec.error is None
    called = rec.called()
    assert called["ok"].result == "2"
    assert [k for k, c in called.items() if c.error] == sorted(
        ["unknown", "unparsable", "invalid", "raises", "denied"], key=list(called).index
    )
    assert len(called) == 6


@pytest.mark.asyncio
async def test_results_and_errors_are_capped() -> None:
    @tool
    def big() -> str:
        return "x" * 50

    @tool
    def loud() -> None:
        raise ValueError("e" * 50)

    rec = await run([calling("c1", "big"), calling("c2", "loud")], [big, loud], max_result_chars=10)
    assert rec.called()["c1"].result == "xxxxxxxxxx… [truncated: 40 more characters]"
    message = "tool 'loud' raised ValueError: " + "e" * 50
    assert rec.called()["c2"].error == (
        f"{message[:10]}… [truncated: {len(message) - 10} more characters]"
    )


# ---------------------------------------------------------------- concurrency and order


@pytest.mark.asyncio
async def test_concurrency_is_bounded() -> None:
    running = 0
    peak = 0
    release = asyncio.Event()

    @tool
    async def work(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return n

    calls = [calling(f"c{i}", "work", {"n": i}) for i in range(6)]
    rec = Recorder(reactivex.of(results_of(*calls)).pipe(ops.execute_tools([work], concurrency=2)))
    for _ in range(20):
        await asyncio.sleep(0)
    assert (running, peak) == (2, 2)
    release.set()
    await rec.wait()
    assert peak == 2
    assert {k: c.result for k, c in rec.called().items()} == {f"c{i}": str(i) for i in range(6)}


@pytest.mark.asyncio
async def test_tools_run_concurrently_by_default() -> None:
    started: list[str] = []
    release = asyncio.Event()

    @tool
    async def wait(name: str) -> str:
        started.append(name)
        await release.wait()
        return name

    calls = [calling(f"c{i}", "wait", {"name": str(i)}) for i in range(3)]
    rec = Recorder(reactivex.of(results_of(*calls)).pipe(ops.execute_tools([wait])))
    for _ in range(10):
        await asyncio.sleep(0)
    assert sorted(started) == ["0", "1", "2"]
    release.set()
    await rec.wait()


@pytest.mark.asyncio
async def test_results_come_as_tools_finish_and_aggregate_orders_them_by_call() -> None:
    first_done = asyncio.Event()

    @tool
    async def slow() -> str:
        await first_done.wait()
        return "slow"

    @tool
    async def fast() -> str:
        first_done.set()
        return "fast"

    stream = reactivex.from_iterable(
        [
            u.ToolCallStart("a", "slow"),
            u.ToolCallEnd("a"),
            u.ToolCallStart("b", "fast"),
            u.ToolCallEnd("b"),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    ).pipe(ops.convert(), ops.execute_tools([slow, fast]))
    rec = await Recorder(stream).wait()
    assert list(rec.called()) == ["b", "a"]
    response = await stream.pipe(ops.aggregate())
    assert [m.tool_call_id for m in response.tool_messages] == ["a", "b"]
    assert [m.content for m in response.turn_transcript[1:]] == ["slow", "fast"]


@pytest.mark.asyncio
async def test_completion_waits_for_running_tools() -> None:
    release = asyncio.Event()

    @tool
    async def wait() -> str:
        await release.wait()
        return "done"

    rec = Recorder(reactivex.of(results_of(calling("c1", "wait"))).pipe(ops.execute_tools([wait])))
    await asyncio.sleep(0.01)
    assert not rec.completed
    assert len(rec.items) == 1
    release.set()
    await rec.wait()
    assert rec.completed
    assert rec.called()["c1"].result == "done"


@pytest.mark.asyncio
async def test_eager_flush_starts_tools_while_the_model_still_streams() -> None:
    upstream: Subject[u.AgentResponseUpdate] = Subject()
    rec = Recorder(upstream.pipe(ops.convert(eager=True), ops.execute_tools([echo])))
    upstream.on_next(u.ToolCallStart("c1", "echo"))
    upstream.on_next(u.ToolCallArgs("c1", '{"text": "early"}'))
    upstream.on_next(u.ToolCallEnd("c1"))
    upstream.on_next(u.TextDelta("still talking"))
    for _ in range(200):
        if rec.called():
            break
        await asyncio.sleep(0.005)
    assert rec.called()["c1"].result == "early"
    assert not rec.completed
    upstream.on_next(u.Finish(FinishReason.TOOL_CALLS))
    upstream.on_completed()
    await rec.wait()
    assert rec.completed


@pytest.mark.asyncio
async def test_a_duplicated_call_runs_once() -> None:
    count = 0

    @tool
    def once() -> int:
        nonlocal count
        count += 1
        return count

    source = reactivex.from_iterable(
        [results_of(calling("c1", "once")), results_of(calling("c1", "once"))]
    )
    rec = await Recorder(source.pipe(ops.execute_tools([once]))).wait()
    assert count == 1
    assert len([c for r in rec.items for c in r.contents if isinstance(c, ToolCalledContent)]) == 1


@pytest.mark.asyncio
async def test_state_is_per_subscription() -> None:
    count = 0

    @tool
    def tick() -> int:
        nonlocal count
        count += 1
        return count

    piped = reactivex.of(results_of(calling("c1", "tick"))).pipe(ops.execute_tools([tick]))
    first = await Recorder(piped).wait()
    second = await Recorder(piped).wait()
    assert (first.called()["c1"].result, second.called()["c1"].result) == ("1", "2")


# ---------------------------------------------------------------- approvals


@pytest.mark.asyncio
async def test_approval_granted_by_an_async_approver() -> None:
    seen: list[ToolApprovalRequestEvent] = []

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        seen.append(event)
        await asyncio.sleep(0)
        return True

    rec = await run([calling("c1", "delete", {"path": "a.txt"})], [delete], approver)
    request = ToolApprovalRequestEvent("c1", "delete", {"path": "a.txt"}, "Delete a file.")
    assert seen == [request]
    assert rec.approvals() == [request]
    assert rec.called()["c1"].result == "deleted a.txt"
    # the request comes (in a result of its own) before the call's result
    assert [(r.events, r.contents) for r in rec.items[1:]] == [
        ((request,), ()),
        ((), (ToolCalledContent("c1", result="deleted a.txt"),)),
    ]
    assert (rec.items[1].id, rec.items[1].model) == ("resp_1", "m")


@pytest.mark.asyncio
async def test_approval_denied_by_an_async_approver() -> None:
    ran = False

    @tool(requires_approval=True)
    def launch() -> str:  # pragma: no cover
        nonlocal ran
        ran = True
        return "launched"

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        return False

    rec = await run([calling("c1", "launch")], [launch], approver)
    assert not ran
    assert rec.called()["c1"].error == "the user denied the call to tool 'launch'; it was not run"


@pytest.mark.asyncio
async def test_sync_approver_granting_and_denying_with_a_reason() -> None:
    threads: list[int] = []

    def approver(event: ToolApprovalRequestEvent) -> bool | ToolApprovalResponse:
        threads.append(threading.get_ident())
        if event.arguments["path"] == "/":
            return ToolApprovalResponse(event.call_id, False, reason="never the root")
        return True

    calls = [calling("c1", "delete", {"path": "/"}), calling("c2", "delete", {"path": "b"})]
    rec = await run(calls, [delete], approver)
    assert rec.called()["c1"].error == "the user denied the call to tool 'delete': never the root"
    assert rec.called()["c2"].result == "deleted b"
    assert threads
    assert threading.get_ident() not in threads


@pytest.mark.asyncio
async def test_no_approver_denies_with_a_clear_error_and_asks_nobody() -> None:
    rec = await run([calling("c1", "delete", {"path": "x"})], [delete])
    assert rec.approvals() == []
    assert rec.called()["c1"].error == (
        "tool 'delete' requires approval and no approver is configured; the call was not run"
    )


@pytest.mark.asyncio
async def test_an_approver_that_raises_denies() -> None:
    async def approver(event: ToolApprovalRequestEvent) -> bool:
        raise ConnectionError("UI went away")

    rec = await run([calling("c1", "delete", {"path": "x"})], [delete], approver)
    assert rec.called()["c1"].error == "tool 'delete': ConnectionError: UI went away"


@pytest.mark.asyncio
async def test_invalid_calls_are_not_sent_for_approval() -> None:
    asked: list[ToolApprovalRequestEvent] = []

    async def approver(event: ToolApprovalRequestEvent) -> bool:  # pragma: no cover
        asked.append(event)
        return True

    rec = await run([calling("c1", "delete", {"file": "x"})], [delete], approver)
    assert asked == []
    assert rec.approvals() == []
    assert (rec.called()["c1"].error or "").startswith("invalid arguments for tool 'delete'")


@pytest.mark.asyncio
async def test_a_subject_the_ui_answers() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    calls = [calling("c1", "delete", {"path": "a"}), calling("c2", "delete", {"path": "b"})]
    stream = reactivex.of(results_of(*calls)).pipe(ops.execute_tools([delete], answers))

    def ui(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                answers.on_next(ToolApprovalResponse(event.call_id, event.arguments["path"] == "a"))

    rec = await Recorder(stream.pipe(rx.do_action(ui))).wait()
    assert rec.called()["c1"].result == "deleted a"
    assert rec.called()["c2"].error == "the user denied the call to tool 'delete'; it was not run"


@pytest.mark.asyncio
async def test_a_subject_answer_given_before_the_request_counts() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    rec = Recorder(upstream.pipe(ops.execute_tools([delete], answers)))
    answers.on_next(ToolApprovalResponse("c1", True))  # pre-approved
    upstream.on_next(results_of(calling("c1", "delete", {"path": "a"})))
    upstream.on_completed()
    await rec.wait()
    assert rec.called()["c1"].result == "deleted a"


TIMED_OUT = (
    "the call to tool 'delete' was denied: no answer to its approval request within 0.05 s;"
    " it was not run"
)


@pytest.mark.asyncio
async def test_an_unanswered_subject_request_is_denied_at_the_approval_timeout() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    rec = Recorder(upstream.pipe(ops.execute_tools([delete], answers, approval_timeout=0.05)))
    upstream.on_next(results_of(calling("c1", "delete", {"path": "a"})))
    upstream.on_completed()
    await rec.wait()
    assert rec.completed
    assert rec.called() == {"c1": ToolCalledContent("c1", error=TIMED_OUT)}
    answers.on_next(ToolApprovalResponse("c1", True))  # too late: dropped, not kept
    assert len(rec.items) == 3


@pytest.mark.asyncio
async def test_a_late_answer_never_approves_a_later_call_with_the_same_id() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    rec = Recorder(upstream.pipe(ops.execute_tools([delete], answers, approval_timeout=0.05)))
    upstream.on_next(results_of(calling("c1", "delete", {"path": "a"})))
    while not rec.called():
        await asyncio.sleep(0.01)
    answers.on_next(ToolApprovalResponse("c1", True))  # the answer to the timed-out request
    # The next LLM call (Kimi gives every response the same ids) asks again for "c1".
    upstream.on_next(AgentResponseResult("resp_2", "m", None, (), (ResponseStartedEvent(),)))
    upstream.on_next(results_of(calling("c1", "delete", {"path": "b"})))
    upstream.on_completed()
    await rec.wait()
    assert len(rec.approvals()) == 2
    results = [c for r in rec.items for c in r.contents if isinstance(c, ToolCalledContent)]
    assert [c.error for c in results] == [TIMED_OUT, TIMED_OUT]


@pytest.mark.asyncio
async def test_an_answer_to_the_new_request_of_a_timed_out_id_counts() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    rec = Recorder(upstream.pipe(ops.execute_tools([delete], answers, approval_timeout=0.2)))
    upstream.on_next(results_of(calling("c1", "delete", {"path": "a"})))
    while not rec.called():
        await asyncio.sleep(0.01)
    upstream.on_next(AgentResponseResult("resp_2", "m", None, (), (ResponseStartedEvent(),)))
    upstream.on_next(results_of(calling("c1", "delete", {"path": "b"})))
    while len(rec.approvals()) < 2:
        await asyncio.sleep(0.01)
    answers.on_next(ToolApprovalResponse("c1", True))  # answers the new request
    upstream.on_completed()
    await rec.wait()
    results = [c for r in rec.items for c in r.contents if isinstance(c, ToolCalledContent)]
    assert [(c.result, c.error) for c in results] == [
        (None, TIMED_OUT.replace("0.05", "0.2")),
        ("deleted b", None),
    ]


@pytest.mark.asyncio
async def test_an_answer_in_time_is_taken_as_usual() -> None:
    async def approver(event: ToolApprovalRequestEvent) -> bool:
        await asyncio.sleep(0.01)
        return True

    rec = await run(
        [calling("c1", "delete", {"path": "a"})], [delete], approver, approval_timeout=5
    )
    assert rec.called()["c1"].result == "deleted a"


@pytest.mark.asyncio
async def test_a_slow_async_or_sync_approver_is_denied_at_the_timeout() -> None:
    release = threading.Event()

    async def slow(event: ToolApprovalRequestEvent) -> bool:
        await asyncio.sleep(5)
        return True  # pragma: no cover

    def blocking(event: ToolApprovalRequestEvent) -> bool:  # a terminal prompt, unanswered
        release.wait(5)
        return True

    try:
        for approver in (slow, blocking):
            rec = await run(
                [calling("c1", "delete", {"path": "a"})], [delete], approver, approval_timeout=0.05
            )
            assert rec.called() == {"c1": ToolCalledContent("c1", error=TIMED_OUT)}
    finally:
        release.set()


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_approval_timeout_must_be_positive(timeout: float) -> None:
    with pytest.raises(ValueError, match="approval_timeout must be positive"):
        ops.execute_tools([delete], approval_timeout=timeout)


@pytest.mark.asyncio
async def test_waiting_for_approval_does_not_hold_a_concurrency_slot() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    calls = [calling("c1", "delete", {"path": "a"}), calling("c2", "add", {"a": 1, "b": 1})]
    stream = reactivex.of(results_of(*calls)).pipe(
        ops.execute_tools([delete, add], answers, concurrency=1)
    )
    rec = Recorder(stream)
    for _ in range(200):
        if "c2" in rec.called():
            break
        await asyncio.sleep(0.005)
    assert rec.called()["c2"].result == "2"  # ran while c1 waited for a human
    answers.on_next(ToolApprovalResponse("c1", True))
    await rec.wait()
    assert rec.called()["c1"].result == "deleted a"


# ---------------------------------------------------------------- cancellation and errors


def forever_tool(cancelled: asyncio.Event) -> Tool:
    """A tool named ``forever`` that never returns and sets ``cancelled`` when cancelled."""

    @tool
    async def forever() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"  # pragma: no cover

    return forever


@pytest.mark.asyncio
async def test_disposal_cancels_a_running_tool() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def forever() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"  # pragma: no cover

    rec = Recorder(
        reactivex.of(results_of(calling("c1", "forever"))).pipe(ops.execute_tools([forever]))
    )
    await asyncio.wait_for(started.wait(), 5)
    rec.subscription.dispose()
    await asyncio.wait_for(cancelled.wait(), 5)
    await asyncio.sleep(0.01)
    assert len(rec.items) == 1
    assert not rec.completed
    assert rec.error is None
    rec.subscription.dispose()  # twice is fine


@pytest.mark.asyncio
async def test_disposal_while_waiting_for_approval() -> None:
    asked = asyncio.Event()
    cancelled = asyncio.Event()

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True  # pragma: no cover

    source = reactivex.of(results_of(calling("c1", "delete", {"path": "a"})))
    rec = Recorder(source.pipe(ops.execute_tools([delete], approver)))
    await asyncio.wait_for(asked.wait(), 5)
    rec.subscription.dispose()
    await asyncio.wait_for(cancelled.wait(), 5)
    assert rec.called() == {}


@pytest.mark.asyncio
async def test_an_upstream_error_cancels_running_tools_and_is_forwarded() -> None:
    cancelled = asyncio.Event()

    forever = forever_tool(cancelled)

    upstream: Subject[AgentResponseResult] = Subject()
    rec = Recorder(upstream.pipe(ops.execute_tools([forever])))
    upstream.on_next(results_of(calling("c1", "forever")))
    await asyncio.sleep(0.01)
    error = ProviderError("overloaded")
    upstream.on_error(error)
    await rec.wait()
    assert rec.error is error
    await asyncio.wait_for(cancelled.wait(), 5)
    assert rec.called() == {}


@pytest.mark.asyncio
async def test_a_failing_downstream_callback_ends_the_stream_with_its_error() -> None:
    def explode(result: AgentResponseResult) -> None:
        if any(isinstance(c, ToolCalledContent) for c in result.contents):
            raise KeyError("ui bug")

    stream = reactivex.of(results_of(calling("c1", "echo", {"text": "a"}))).pipe(
        ops.execute_tools([echo]), rx.do_action(explode)
    )
    rec = await Recorder(stream).wait()
    assert isinstance(rec.error, KeyError)


def test_factory_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        ops.execute_tools([add, add])
    with pytest.raises(ValueError, match="concurrency"):
        ops.execute_tools([add], concurrency=0)


@pytest.mark.asyncio
async def test_plain_functions_and_hand_built_tools_are_accepted() -> None:
    def shout(text: str) -> str:
        return text.upper()

    custom = Tool("custom", "", {"type": "object"}, lambda **kw: sorted(kw))
    tools: list[Tool | Callable[..., Any]] = [shout, custom]
    rec = await run(
        [calling("c1", "shout", {"text": "hi"}), calling("c2", "custom", {"b": 1, "a": 2})], tools
    )
    assert rec.called()["c1"].result == "HI"
    assert rec.called()["c2"].result == '["a", "b"]'


# ---------------------------------------------------------------- the operator after it stopped


def test_without_a_loop_the_stream_fails_once_and_nothing_after_the_error_passes() -> None:
    """The first call fails the stream; its sibling call and later results are dropped."""
    first = results_of(calling("c1", "add", {"a": 1, "b": 2}), calling("c2", "echo", {"text": "x"}))
    later = AgentResponseResult("resp_1", "m", None, (TextContent("after"),))
    items: list[AgentResponseResult] = []
    errors: list[Exception] = []
    completed: list[bool] = []
    reactivex.from_iterable([first, later]).pipe(ops.execute_tools([add, echo])).subscribe(
        items.append, errors.append, lambda: completed.append(True)
    )
    assert items == [first]
    assert [str(e) for e in errors] == ["execute_tools() runs tools on the running asyncio loop"]
    assert isinstance(errors[0], RuntimeError)
    assert completed == []


def test_without_a_loop_a_synchronous_body_stops_at_the_first_call() -> None:
    """``from_sse`` over bytes emits on subscribe and reads on after the operator failed."""

    def chunk(index: int, call_id: str, arguments: str) -> bytes:
        call = {"index": index, "id": call_id, "function": {"name": "add", "arguments": arguments}}
        return b"data: " + json.dumps({"choices": [{"delta": {"tool_calls": [call]}}]}).encode()

    body = b"\n\n".join(
        [
            chunk(0, "c1", '{"a": 1, "b": 2}'),
            chunk(1, "c2", '{"a": 3, "b": 4}'),
            b'data: {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}',
            b"data: [DONE]\n\n",
        ]
    )
    items: list[AgentResponseResult] = []
    errors: list[Exception] = []
    completed: list[bool] = []
    from_sse(body).pipe(ops.convert(eager=True), ops.execute_tools([add])).subscribe(
        items.append, errors.append, lambda: completed.append(True)
    )
    # the first call's ToolCallingContent is the last item: c2's and the finish are dropped
    assert items[-1].contents == (
        ToolCallingContent("c1", "add", {"a": 1, "b": 2}, raw_arguments='{"a": 1, "b": 2}'),
    )
    calling_ids = [
        c.call_id for r in items for c in r.contents if isinstance(c, ToolCallingContent)
    ]
    assert calling_ids == ["c1"]
    assert all(r.finish_reason is None for r in items)
    assert [str(e) for e in errors] == ["execute_tools() runs tools on the running asyncio loop"]
    assert completed == []


@pytest.mark.asyncio
async def test_a_tool_that_ignores_cancellation_delivers_nothing_after_disposal() -> None:
    started = asyncio.Event()
    finished = asyncio.Event()

    @tool
    async def stubborn() -> str:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # the task ends with a result
            await asyncio.sleep(60)
        finished.set()
        return "too late"

    rec = Recorder(
        reactivex.of(results_of(calling("c1", "stubborn"))).pipe(ops.execute_tools([stubborn]))
    )
    await asyncio.wait_for(started.wait(), 5)
    rec.subscription.dispose()
    await asyncio.wait_for(finished.wait(), 5)
    await asyncio.sleep(0.01)
    assert len(rec.items) == 1
    assert rec.called() == {}
    assert not rec.completed
    assert rec.error is None


@pytest.mark.asyncio
async def test_disposal_while_waiting_for_a_subject_answer_and_a_late_answer_is_ignored() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def wipe(path: str) -> str:  # pragma: no cover - must never run
        ran.append(path)
        return "wiped"

    answers: Subject[ToolApprovalResponse] = Subject()
    rec = Recorder(
        reactivex.of(results_of(calling("c1", "wipe", {"path": "/"}))).pipe(
            ops.execute_tools([wipe], answers)
        )
    )
    for _ in range(200):
        if rec.approvals():
            break
        await asyncio.sleep(0.005)
    assert [e.call_id for e in rec.approvals()] == ["c1"]
    rec.subscription.dispose()
    answers.on_next(ToolApprovalResponse("c1", True))  # too late: nobody waits for it
    await asyncio.sleep(0.01)
    assert ran == []
    assert rec.called() == {}
    assert len(rec.items) == 2  # the calls, then the approval request
    assert (rec.completed, rec.error) == (False, None)


@pytest.mark.asyncio
async def test_an_upstream_error_while_a_call_waits_for_its_subject_answer() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    upstream: Subject[AgentResponseResult] = Subject()
    rec = Recorder(upstream.pipe(ops.execute_tools([delete], answers)))
    upstream.on_next(results_of(calling("c1", "delete", {"path": "a"})))
    for _ in range(200):
        if rec.approvals():
            break
        await asyncio.sleep(0.005)
    error = ProviderError("overloaded")
    upstream.on_error(error)
    await rec.wait()
    answers.on_next(ToolApprovalResponse("c1", True))
    await asyncio.sleep(0.01)
    assert rec.error is error
    assert rec.called() == {}


@pytest.mark.asyncio
async def test_a_subscriber_raising_on_a_tool_result_ends_the_stream_with_its_error() -> None:
    """The exception comes from the observer itself, not from an Rx operator in between."""
    items: list[AgentResponseResult] = []
    errors: list[Exception] = []

    def on_next(result: AgentResponseResult) -> None:
        items.append(result)
        if any(isinstance(c, ToolCalledContent) for c in result.contents):
            raise KeyError("ui bug")

    finished = asyncio.Event()
    calls = results_of(calling("c1", "echo", {"text": "a"}))
    reactivex.of(calls).pipe(ops.execute_tools([echo])).subscribe(
        on_next, lambda e: (errors.append(e), finished.set()), finished.set
    )
    await asyncio.wait_for(finished.wait(), 5)
    assert items == [
        calls,
        AgentResponseResult("resp_1", "m", None, (ToolCalledContent("c1", "a"),)),
    ]
    assert [type(e) for e in errors] == [KeyError]
    assert errors[0].args == ("ui bug",)


@pytest.mark.asyncio
async def test_an_observer_raising_from_a_tools_task_goes_to_the_loops_exception_handler() -> None:
    """No on_error: reactivex re-raises, and the tool's task hands that to the loop."""

    def on_next(result: AgentResponseResult) -> None:
        if any(isinstance(c, ToolCalledContent) for c in result.contents):
            raise KeyError("ui bug")

    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        calls = results_of(calling("c1", "echo", {"text": "a"}))
        reactivex.of(calls).pipe(ops.execute_tools([echo])).subscribe(on_next)
        for _ in range(200):
            if reported:
                break
            await asyncio.sleep(0.005)
    finally:
        loop.set_exception_handler(None)
    assert [c["message"] for c in reported] == ["rafrx.execute_tools: an observer raised"]
    assert isinstance(reported[0]["exception"], KeyError)


@pytest.mark.asyncio
async def test_a_failure_outside_the_tool_fails_the_stream_and_cancels_the_other_calls() -> None:
    """Here the host's logging filter raises while a tool's failure is logged: a bug, not a
    tool failure, so the stream ends with it instead of hanging."""
    cancelled = asyncio.Event()

    forever = forever_tool(cancelled)

    def broken_filter(record: logging.LogRecord) -> bool:
        raise LookupError("logging misconfigured")

    logger = logging.getLogger("rafrx.tools")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addFilter(broken_filter)
    try:
        calls = results_of(calling("slow", "forever"), calling("bad", "nope"))
        rec = await Recorder(reactivex.of(calls).pipe(ops.execute_tools([forever]))).wait()
    finally:
        logger.removeFilter(broken_filter)
        logger.setLevel(level)
    assert isinstance(rec.error, LookupError)
    assert str(rec.error) == "logging misconfigured"
    assert rec.items == [calls]
    await asyncio.wait_for(cancelled.wait(), 5)
    assert not rec.completed


class _Unprintable(Exception):
    """An exception whose ``str()`` raises (some third-party exceptions do)."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this error")


class _UnprintableToolError(ToolError):
    def __str__(self) -> str:
        raise RuntimeError("no text for this error")


@tool(requires_approval=True)
def _guarded() -> str:
    return "ran"


@tool
def _raises_unprintable_tool_error() -> str:
    raise _UnprintableToolError("unused")


@pytest.mark.parametrize("name", ["_guarded", "_raises_unprintable_tool_error"])
@pytest.mark.asyncio
async def test_an_exception_whose_str_raises_becomes_the_calls_error_result(name: str) -> None:
    """An approver (or a tool, with a ToolError) raises an exception whose str() fails: that
    call gets an error result, the other call completes, and so does the stream."""

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        raise _Unprintable()

    @tool
    async def sibling() -> str:
        await asyncio.sleep(0.01)
        return "sibling done"

    calls = AgentResponseResult(
        "r",
        "m",
        None,
        (ToolCallingContent("c1", name, {}), ToolCallingContent("c2", "sibling", {})),
    )
    tools = [_guarded, _raises_unprintable_tool_error, sibling]
    done = asyncio.get_running_loop().create_future()
    items: list[AgentResponseResult] = []
    reactivex.of(calls).pipe(ops.execute_tools(tools, approver)).subscribe(
        items.append, done.set_exception, lambda: done.set_result(None)
    )
    await asyncio.wait_for(done, 5)
    called = {c.call_id: c for r in items for c in r.contents if isinstance(c, ToolCalledContent)}
    assert called["c1"].error is not None
    assert called["c2"] == ToolCalledContent("c2", result="sibling done")


@pytest.mark.asyncio
@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
async def test_a_flush_after_convert_does_not_run_a_tool_twice(eager: bool) -> None:
    """convert() already flushes; a flush_tool_calls() added after it (to get eager calls,
    say) must not hand execute_tools each call a second time."""
    runs: list[dict[str, Any]] = []

    @tool
    def launch(target: str) -> str:
        """Not idempotent."""
        runs.append({"target": target})
        return "launched"

    call = {"index": 0, "id": "c1", "function": {"name": "launch", "arguments": '{"target": "x"}'}}
    body = (
        b"data: " + json.dumps({"choices": [{"delta": {"tool_calls": [call]}}]}).encode() + b"\n\n"
        b'data: {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    source = from_sse(body).pipe(
        ops.convert(), ops.flush_tool_calls(eager=eager), ops.execute_tools([launch])
    )
    recorder = await Recorder(source).wait()
    assert recorder.error is None
    assert runs == [{"target": "x"}]
    assert list(recorder.called()) == ["c1"]
    callings = [c for r in recorder.items for c in r.contents if isinstance(c, ToolCallingContent)]
    assert [c.call_id for c in callings] == ["c1"]
