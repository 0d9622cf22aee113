"""Cancellation and disposal at every point of an agent turn, over real HTTP.

For each wire format (OpenAI chat, Anthropic, OpenAI Responses) an
:class:`~rafrx.agent.Agent` runs a scripted two-step turn against the local
:class:`~rafrx.testing.LLMServer` (a text preamble and three tool calls: one
that works, one that raises, one that times out; then a final answer). The
turn is stopped after its k-th emitted item, for *every* k, in three ways:

* disposing the ``Agent.run()`` subscription synchronously inside ``on_next``;
* disposing it on the next loop iteration (``call_soon``);
* cancelling the task awaiting ``Agent.send()``.

After each stop: nothing is delivered after disposal, every tool that started
is finished or cancelled, no asyncio task is left, at most the idle
keep-alive connection stays open on the server (none after a disposal
mid-stream), history holds either nothing of the turn or the whole turn
(never a call without its result), and the next turn on the same agent
works and sends a request that obeys its API's rules
(:func:`tests.test_agent_wire.wire_problems`).

Then the special points: an approval pending (async, sync and observable
approvers that never answer), a retry waiting in its backoff, the client
closed mid-stream / during the backoff / while tools run, slow history and
context providers, and tools that ignore their cancellation or fail while
cleaning up.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import Agent, ChatMessage
from rafrx.content import ToolCalledContent, ToolCallingContent
from rafrx.errors import RafrxError, TransportError
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import MessageRole
from rafrx.response import AgentResponseResult
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
)
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, ServerResponse, ToolCallSpec
from rafrx.tools import ToolApprovalResponse, tool
from tests.test_agent_wire import wire_problems

GUARD = 5.0  # seconds: a guard against hangs only, never reached by a passing test

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = sorted(CLIENTS)


# ---------------------------------------------------------------- fixtures and helpers


@pytest_asyncio.fixture
async def server(llm_server: LLMServer) -> AsyncIterator[LLMServer]:
    """The local server (the conftest fixture checks no task leaked); after the test,
    with every client closed, no connection may be left open."""
    yield llm_server
    await llm_server.wait_connections_closed(timeout=GUARD)


async def wait_for(predicate: Callable[[], bool], timeout: float = GUARD) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)


def _server_side(task: asyncio.Task[Any]) -> bool:
    """A task of the local server (a keep-alive connection's handler), not of rafrx."""
    return "RequestHandler" in getattr(task.get_coro(), "__qualname__", "")


def new_tasks(before: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    """Client-side tasks started since ``before`` and still running (not the current one)."""
    current = asyncio.current_task()
    return [
        t
        for t in asyncio.all_tasks() - before
        if t is not current and not t.done() and not _server_side(t)
    ]


def history_problems(messages: Sequence[ChatMessage]) -> list[str]:
    """A saved conversation's broken tool loops: a call without its result right after
    it, or a result that answers no call of the assistant message before it."""
    problems: list[str] = []
    open_ids: set[str] = set()
    answerable: set[str] = set()
    for i, m in enumerate(messages):
        if m.role is MessageRole.TOOL:
            if m.tool_call_id not in open_ids:
                problems.append(f"{i}: result {m.tool_call_id!r} answers no open call")
            open_ids.discard(m.tool_call_id or "")
            continue
        if open_ids:
            problems.append(f"{i}: calls {sorted(open_ids)} have no result")
        open_ids = set()
        if m.role is MessageRole.ASSISTANT and m.tool_calls:
            answerable = {c.id for c in m.tool_calls}
            open_ids = set(answerable)
    if open_ids:
        problems.append(f"end: calls {sorted(open_ids)} have no result")
    return problems


def last_text(request: RecordedRequest) -> str:
    return json.dumps(request.messages[-1]) if request.messages else ""


class Probe:
    """Tools that record how each call ended: finished, failed or cancelled."""

    def __init__(self, slow_timeout: float = 0.02, work: float = 0.005) -> None:
        self.work = work
        self.started = 0
        self.finished = 0
        self.failed = 0
        self.cancelled = 0
        self.running = 0
        self.tools = [
            tool(self.lookup),
            tool(self.boom),
            tool(timeout=slow_timeout)(self.slow),
        ]

    def balanced(self) -> bool:
        return self.running == 0 and self.started == self.finished + self.failed + self.cancelled

    async def _run(self, seconds: float, fail: bool) -> str:
        self.started += 1
        self.running += 1
        try:
            await asyncio.sleep(seconds)
            if fail:
                self.failed += 1
                raise ValueError("boom")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        self.finished += 1
        return "ok"

    async def lookup(self, q: str) -> str:
        """Look something up."""
        return f"found {q}: " + await self._run(self.work, False)

    async def boom(self, q: str) -> str:
        """Fail."""
        return await self._run(self.work, True)

    async def slow(self, q: str) -> str:
        """Hang (until its timeout)."""
        return await self._run(30.0, False)


STEP1 = Reply(
    text="Let me look.",
    tool_calls=[
        ToolCallSpec("lookup", {"q": "a"}),
        ToolCallSpec("boom", {"q": "b"}),
        ToolCallSpec("slow", {"q": "c"}),
    ],
    chunk_size=6,
    delay=0.001,
)
STEP2 = Reply(text="All done now, thanks.", chunk_size=6, delay=0.001)
NEXT = Reply(text="Fine.", chunk_size=6)


def turn_script(request: RecordedRequest) -> ServerResponse:
    """Step 1 calls three tools; after tool results, the answer; "NEXT" gets "Fine."."""
    if request.last_role == "tool":
        return STEP2
    if "NEXT" in last_text(request):
        return NEXT
    return STEP1


def started_and_finished(results: list[AgentResponseResult]) -> tuple[int, int]:
    started = sum(isinstance(e, ResponseStartedEvent) for r in results for e in r.events)
    finished = sum(isinstance(e, FinishEvent) for r in results for e in r.events)
    return started, finished


async def check_after_stop(
    server: LLMServer,
    agent: Agent,
    history: InMemoryHistoryProvider,
    before_history: int,
    delivered: list[AgentResponseResult],
    before_tasks: set[asyncio.Task[Any]],
    probe: Probe | None,
    label: str,
) -> None:
    """Everything a stopped turn must leave behind, then the next turn on the agent."""
    if probe is not None:
        await wait_for(probe.balanced)
    await wait_for(lambda: not new_tasks(before_tasks))
    # Stopped mid-stream the connection closes; stopped after the body was read (the
    # stop takes effect when the turn's task wakes, the rest of a chunk may be read
    # first) it may stay as the pool's idle keep-alive connection: at most one.
    try:
        await server.wait_until(lambda: server.open_connections <= 1, timeout=1.0)
    except TimeoutError:
        pytest.fail(f"{label}: {server.open_connections} connection(s) left open")
    saved = history.messages[before_history:]
    assert history_problems(history.messages) == [], label
    assert len(saved) in (0, 6), (label, saved)  # nothing, or the whole turn
    count = len(server.requests)
    after = await asyncio.wait_for(agent.send("NEXT please"), GUARD)
    assert after.text == "Fine.", label
    # (a request of the stopped turn sent just before the stop may be recorded late)
    nexts = [r for r in server.requests[count:] if "NEXT please" in last_text(r)]
    assert len(nexts) == 1, label
    assert wire_problems(nexts[0]) == [], label
    assert history_problems(history.messages) == [], label


# ---------------------------------------------------------------- one full turn


async def full_turn_length(server: LLMServer, fmt: str, eager: bool = False) -> int:
    """How many items a whole turn emits (checked to complete and save itself)."""
    probe = Probe()
    history = InMemoryHistoryProvider()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=probe.tools, history=history, eager_tools=eager)
        results = await asyncio.wait_for(agent.run("go").pipe(rx.to_list()), GUARD)
    assert probe.balanced()
    assert (probe.finished, probe.failed, probe.cancelled) == (1, 1, 1)
    assert len(history.messages) == 6
    return len(results)


# ---------------------------------------------------------------- the sweep over k


class Stopper:
    """Stops a turn after its k-th item, in one of three ways."""

    def __init__(self, agent: Agent, k: int, mode: str, probe: Probe | None = None) -> None:
        self.probe = probe
        self.started_at_stop: int | None = None
        self.agent = agent
        self.k = k
        self.mode = mode
        self.seen: list[AgentResponseResult] = []
        self.delivered_at_stop: int | None = None
        self.ended: list[Any] = []
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        if self.mode == "send-cancel":
            task: asyncio.Task[Any] | None = None

            def hook(result: AgentResponseResult) -> None:
                self.seen.append(result)
                if len(self.seen) == self.k and task is not None:
                    task.cancel()
                    self.delivered_at_stop = len(self.seen)

            agent = self.agent
            original = agent.run
            agent.run = lambda m: original(m).pipe(rx.do_action(hook))  # type: ignore[method-assign]
            try:
                task = asyncio.create_task(agent.send("go"))
                try:
                    await asyncio.wait_for(asyncio.shield(task), GUARD)
                    self.ended.append("done")
                except asyncio.CancelledError:
                    assert task.cancelled()
            finally:
                del agent.run  # type: ignore[method-assign]
            return

        holder: dict[str, Any] = {}

        def stop() -> None:
            holder["subscription"].dispose()
            self.delivered_at_stop = len(self.seen)
            if self.probe is not None:
                self.started_at_stop = self.probe.started
            self.stopped.set()

        def on_next(result: AgentResponseResult) -> None:
            self.seen.append(result)
            if len(self.seen) == self.k:
                if self.mode == "inside":
                    stop()
                else:
                    loop.call_soon(stop)

        def on_end(value: Any) -> None:
            self.ended.append(value)
            self.stopped.set()

        holder["subscription"] = self.agent.run("go").subscribe(
            on_next, on_end, lambda: on_end("done")
        )
        await asyncio.wait_for(self.stopped.wait(), GUARD)
        holder["subscription"].dispose()  # twice (or after completion): a no-op


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("mode", "eager", "concurrency"),
    [
        ("inside", False, 8),
        ("soon", False, 8),
        ("send-cancel", False, 8),
        ("inside", True, 8),
        ("inside", False, 1),
    ],
)
@pytest.mark.parametrize("fmt", FORMATS)
async def test_stopping_a_turn_after_every_item_leaves_nothing_behind(
    server: LLMServer, fmt: str, mode: str, eager: bool, concurrency: int
) -> None:
    """Stop after item k for every k of the turn (plus one past its end): no item or
    terminal event after the stop, tools cancelled or finished, no task or
    connection left, history all-or-nothing, and the next turn works and is valid.
    ``eager``: tools start while the model still streams (``eager_tools=True``);
    ``concurrency=1``: the tools queue. (That no tool body may start after the
    disposal is checked by test_no_tool_starts_after_the_turn_is_disposed.)"""
    server.script(turn_script)
    n = await full_turn_length(server, fmt, eager)
    assert n >= 15
    history = InMemoryHistoryProvider()
    probe = Probe()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(
            client, tools=probe.tools, history=history, eager_tools=eager, concurrency=concurrency
        )
        for k in range(1, n + 2):
            label = f"{fmt} {mode} eager={eager} concurrency={concurrency} k={k}/{n}"
            before_tasks = asyncio.all_tasks()
            before_history = len(history.messages)
            stopper = Stopper(agent, k, mode, probe)
            await stopper.run()
            await settle()
            if k > n:  # never stopped: the turn completed
                assert stopper.ended == ["done"], label
                assert len(history.messages) == before_history + 6, label
            else:
                assert stopper.ended == [], label  # no on_error / on_completed after a stop
                assert stopper.delivered_at_stop is not None
                if mode != "send-cancel":  # task.cancel() takes effect when the task wakes
                    assert len(stopper.seen) == stopper.delivered_at_stop, label
                if mode == "inside":
                    assert len(stopper.seen) == k, label
                # a stop before the final answer ends saves nothing
                if len(stopper.seen) < n:
                    assert len(history.messages) == before_history, label
            # no tool result is made up for a call that did not finish
            results = [
                c for r in stopper.seen for c in r.contents if isinstance(c, ToolCalledContent)
            ]
            assert len(results) <= 3, label
            await check_after_stop(
                server,
                agent,
                history,
                before_history,
                stopper.seen,
                before_tasks,
                probe,
                label,
            )


# ---------------------------------------------------------------- approvals pending


def approval_script(request: RecordedRequest) -> ServerResponse:
    """Step 1 calls ``wipe`` (requires approval) and ``lookup``; then an answer."""
    if request.last_role == "tool":
        return Reply(text="Done.")
    if "NEXT" in last_text(request):
        return NEXT
    return Reply(
        text="Wiping.",
        tool_calls=[ToolCallSpec("wipe", {"path": "/tmp/x"}), ToolCallSpec("lookup", {"q": "z"})],
    )


class Wiper:
    """A tool requiring approval, counting its runs."""

    def __init__(self) -> None:
        self.ran = 0
        self.tool = tool(requires_approval=True)(self.wipe)

    async def wipe(self, path: str) -> str:
        """Wipe a path."""
        self.ran += 1
        return f"wiped {path}"


def approval_requested(result: AgentResponseResult) -> bool:
    return any(isinstance(e, ToolApprovalRequestEvent) for e in result.events)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_disposing_on_the_approval_request_never_asks_the_approver(
    server: LLMServer, kind: str
) -> None:
    """A UI shows the ToolApprovalRequestEvent and the user presses stop right there
    (the subscription is disposed inside that on_next). The turn is disposed, so
    nobody should be asked any more: the approver (a prompt, a notification) must
    not be called after the disposal."""
    server.script(approval_script)
    asked: list[str] = []
    release = threading.Event()

    async def async_approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append(event.call_id)
        return False

    def sync_approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append(event.call_id)  # e.g. input("Allow? ") in a terminal
        release.wait(GUARD)
        return False

    wiper = Wiper()
    probe = Probe()
    approver = async_approver if kind == "async" else sync_approver
    try:
        async with OpenAIChatClient(server.url, "k") as client:
            agent = Agent(client, tools=[wiper.tool, *probe.tools], approver=approver)
            holder: dict[str, Any] = {}
            seen: list[AgentResponseResult] = []

            def on_next(result: AgentResponseResult) -> None:
                seen.append(result)
                if approval_requested(result):
                    holder["subscription"].dispose()

            holder["subscription"] = agent.run("wipe it").subscribe(on_next)
            await wait_for(lambda: any(approval_requested(r) for r in seen))
            await asyncio.sleep(0.1)
            await wait_for(probe.balanced)
            assert asked == []  # asked after the turn was disposed
            assert wiper.ran == 0
    finally:
        release.set()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_disposing_while_an_async_approver_never_answers_cancels_it(
    server: LLMServer, fmt: str
) -> None:
    """An async approver that never answers holds the turn (no timeout applies to an
    approval); disposing cancels the approver's coroutine, the tool never runs, the
    other tool finishes or is cancelled, and the next turn sends a valid request
    with nothing of the stopped turn."""
    server.script(approval_script)
    waiting = asyncio.Event()
    cancelled = asyncio.Event()

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        waiting.set()
        try:
            await asyncio.Event().wait()  # the user went for coffee
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True  # pragma: no cover

    wiper = Wiper()
    probe = Probe()
    history = InMemoryHistoryProvider()
    before = asyncio.all_tasks()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[wiper.tool, *probe.tools], approver=approver, history=history)
        seen: list[AgentResponseResult] = []
        subscription = agent.run("wipe it").subscribe(seen.append)
        await asyncio.wait_for(waiting.wait(), GUARD)
        await wait_for(probe.balanced)
        delivered = len(seen)
        subscription.dispose()
        await asyncio.wait_for(cancelled.wait(), GUARD)
        await settle()
        assert len(seen) == delivered
        assert wiper.ran == 0
        await check_after_stop(server, agent, history, 0, seen, before, probe, fmt)
    assert history.messages[0].content == "NEXT please"


@pytest.mark.asyncio
async def test_cancelling_send_while_an_approval_is_pending_does_not_hang(
    server: LLMServer,
) -> None:
    """Cancelling the task awaiting send() while an approval waits: it ends at once with
    CancelledError, the approver is cancelled, nothing is left running."""
    server.script(approval_script)
    waiting = asyncio.Event()
    outcome: list[str] = []

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        waiting.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return True  # pragma: no cover

    wiper = Wiper()
    before = asyncio.all_tasks()
    async with AnthropicClient(server.url, "k") as client:
        agent = Agent(client, tools=[wiper.tool, *Probe().tools], approver=approver)
        task = asyncio.create_task(agent.send("wipe it"))
        await asyncio.wait_for(waiting.wait(), GUARD)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, GUARD)
        await wait_for(lambda: not new_tasks(before))
        assert outcome == ["cancelled"]
        assert wiper.ran == 0
        after = await asyncio.wait_for(agent.send("NEXT"), GUARD)
    assert after.text == "Fine."
    assert wire_problems(server.requests[-1]) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_disposing_while_an_observable_approver_never_answers(
    server: LLMServer, fmt: str
) -> None:
    """An approver Subject nobody answers: disposal releases the waiting call and
    unsubscribes from the Subject; a late answer runs nothing; the next turn works."""
    server.script(approval_script)
    answers: Subject[ToolApprovalResponse] = Subject()
    wiper = Wiper()
    history = InMemoryHistoryProvider()
    before = asyncio.all_tasks()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[wiper.tool, *Probe().tools], approver=answers, history=history)
        seen: list[AgentResponseResult] = []
        subscription = agent.run("wipe it").subscribe(seen.append)
        await wait_for(lambda: any(approval_requested(r) for r in seen))
        request = next(e for r in seen for e in r.events if isinstance(e, ToolApprovalRequestEvent))
        await asyncio.sleep(0.05)
        subscription.dispose()
        await wait_for(lambda: not new_tasks(before))
        assert answers.observers == []  # nothing listens for answers any more
        answers.on_next(ToolApprovalResponse(request.call_id, True))  # too late
        await settle()
        assert wiper.ran == 0
        await check_after_stop(server, agent, history, 0, seen, before, None, fmt)


@pytest.mark.asyncio
async def test_a_sync_approver_that_never_answers_outlives_the_disposed_turn(
    server: LLMServer,
) -> None:
    """Documented design, not a bug: a sync approver runs in a worker thread
    (``asyncio.to_thread``), which cannot be cancelled. Disposing the turn ends it
    at once (no task left), but the approver's thread stays blocked until it
    returns, and its answer is then ignored (the tool never runs). NB: the
    loop's default executor, which ``asyncio.run`` shuts down, waits for it."""
    server.script(approval_script)
    entered = threading.Event()
    release = threading.Event()
    returned = threading.Event()

    def approver(event: ToolApprovalRequestEvent) -> bool:
        entered.set()
        release.wait(GUARD)
        returned.set()
        return True

    wiper = Wiper()
    before = asyncio.all_tasks()
    try:
        async with OpenAIResponsesClient(server.url, "k") as client:
            agent = Agent(client, tools=[wiper.tool, *Probe().tools], approver=approver)
            subscription = agent.run("wipe it").subscribe(lambda _: None)
            await wait_for(entered.is_set)
            subscription.dispose()
            await wait_for(lambda: not new_tasks(before))
            assert not returned.is_set()  # the thread is still blocked
            release.set()
            await wait_for(returned.is_set)
            await settle()
            assert wiper.ran == 0  # its late "yes" ran nothing
            after = await asyncio.wait_for(agent.send("NEXT"), GUARD)
            assert after.text == "Fine."
    finally:
        release.set()


# ---------------------------------------------------------------- tools that misbehave on cancel


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["dispose", "send-cancel"])
async def test_a_tool_failing_in_its_cancellation_cleanup_reports_nothing_to_the_loop(
    server: LLMServer, loop_errors: list[dict[str, Any]], how: str
) -> None:
    """A tool whose cleanup raises when the turn is cancelled (a connection that fails
    to close ...). The turn was disposed/cancelled, so the tool's late exception has
    nobody to go to; rafrx retrieves it on the timeout path (``_drop_outcome``) so
    asyncio does not log it. The disposal path should do the same: nothing may reach
    the loop's exception handler as "Task exception was never retrieved"."""
    started = asyncio.Event()

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed while cancelling") from None
        return "page"  # pragma: no cover

    server.enqueue(Reply(tool_calls=[ToolCallSpec("fetch", {"url": "http://x"})]))
    before = asyncio.all_tasks()
    async with OpenAIChatClient(server.url, "k") as client:
        agent = Agent(client, tools=[fetch])
        if how == "dispose":
            subscription = agent.run("fetch").subscribe(lambda _: None)
            await asyncio.wait_for(started.wait(), GUARD)
            subscription.dispose()
        else:
            task = asyncio.create_task(agent.send("fetch"))
            await asyncio.wait_for(started.wait(), GUARD)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await wait_for(lambda: not new_tasks(before))
        await settle()
        gc.collect()
        await settle()
    messages = [str(c.get("message")) for c in loop_errors]
    assert messages == []


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_tool_ignoring_cancellation_keeps_running_after_disposal(
    server: LLMServer, fmt: str
) -> None:
    """A tool that catches CancelledError and carries on. Disposal (and cancelling
    send()) cannot stop it: the turn still ends at once (no hang, no item after
    disposal), the next turn works while it runs, and its late result goes nowhere.
    The tool's coroutine is left running "unheeded" (as tools.py documents for
    timeouts; for disposal it is not documented), in a task rafrx does not track."""
    started = asyncio.Event()
    release = asyncio.Event()
    ended: list[str] = []

    @tool
    async def stubborn(q: str) -> str:
        """Ignore cancellation."""
        started.set()
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                ended.append("ignored a cancel")
        ended.append("returned")
        return "late"

    def script(request: RecordedRequest) -> ServerResponse:
        if "NEXT" in last_text(request):
            return NEXT
        if request.last_role == "tool":
            return Reply(text="Done.")
        return Reply(tool_calls=[ToolCallSpec("stubborn", {"q": "a"})])

    server.script(script)
    history = InMemoryHistoryProvider()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[stubborn], history=history)
        seen: list[AgentResponseResult] = []
        subscription = agent.run("go").subscribe(seen.append)
        await asyncio.wait_for(started.wait(), GUARD)
        delivered = len(seen)
        subscription.dispose()
        await wait_for(lambda: "ignored a cancel" in ended)
        after = await asyncio.wait_for(agent.send("NEXT"), GUARD)  # while it still runs
        assert after.text == "Fine."
        assert ended == ["ignored a cancel"]  # still running: orphaned
        release.set()
        await wait_for(lambda: "returned" in ended)
        await settle()
        assert len(seen) == delivered
    assert history_problems(history.messages) == []
    assert [m.content for m in history.messages] == ["NEXT", "Fine."]
    for request in server.requests:
        assert wire_problems(request) == []


# ---------------------------------------------------------------- retries and closing the client


def retry_script(first_answer: ServerResponse) -> Callable[[RecordedRequest], ServerResponse]:
    """Step 1 calls ``lookup``; the next request gets ``first_answer`` (a 503 ...), the
    following ones the answer; "NEXT" gets "Fine."."""
    answered: list[int] = []

    def script(request: RecordedRequest) -> ServerResponse:
        if "NEXT" in last_text(request):
            return NEXT
        if request.last_role == "tool":
            answered.append(1)
            return first_answer if len(answered) == 1 else STEP2
        return Reply(text="Looking.", tool_calls=[ToolCallSpec("lookup", {"q": "a"})])

    return script


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_disposing_during_a_retry_backoff_sends_nothing_more(
    server: LLMServer, fmt: str
) -> None:
    """The second LLM call gets HTTP 503 with Retry-After: 0.5; the turn is disposed
    while the client waits to retry. No retry request may be sent afterwards, no
    task or connection is left, and the next turn works and is valid."""
    server.script(retry_script(Fault.status(503, retry_after=0.5)))
    history = InMemoryHistoryProvider()
    probe = Probe()
    before = asyncio.all_tasks()
    retry = RetryPolicy(max_attempts=3, jitter=False)
    async with CLIENTS[fmt](server.url, "k", retry=retry) as client:
        agent = Agent(client, tools=probe.tools, history=history)
        seen: list[AgentResponseResult] = []
        subscription = agent.run("go").subscribe(seen.append)
        await server.wait_requests(2, timeout=GUARD)  # the 503
        await asyncio.sleep(0.1)  # now in the backoff
        subscription.dispose()
        await asyncio.sleep(0.7)  # past the Retry-After
        assert len(server.requests) == 2  # no retry went out
        await check_after_stop(server, agent, history, 0, seen, before, probe, fmt)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_closing_the_client_during_a_retry_backoff_fails_the_turn_cleanly(
    server: LLMServer, fmt: str
) -> None:
    """``aclose()`` while the second LLM call waits to retry: the turn fails at once
    with a non-retryable TransportError whose partial keeps the tool's result, no
    retry is sent, nothing is saved, and the client (re-opened) serves the next turn."""
    server.script(retry_script(Fault.status(503, retry_after=0.5)))
    history = InMemoryHistoryProvider()
    before = asyncio.all_tasks()
    retry = RetryPolicy(max_attempts=3, jitter=False)
    client = CLIENTS[fmt](server.url, "k", retry=retry)
    try:
        agent = Agent(client, tools=Probe().tools, history=history)
        task = asyncio.create_task(agent.send("go"))
        await server.wait_requests(2, timeout=GUARD)
        await asyncio.sleep(0.1)
        await asyncio.wait_for(client.aclose(), GUARD)
        with pytest.raises(TransportError) as caught:
            await asyncio.wait_for(task, 0.5)  # at once, not after the backoff
        assert not caught.value.retryable
        partial = caught.value.partial
        assert partial is not None
        assert partial.interrupted
        assert [m.content for m in partial.tool_messages] == ["found a: ok"]
        await asyncio.sleep(0.6)
        assert len(server.requests) == 2
        assert history.messages == ()
        await check_after_stop(server, agent, history, 0, [], before, None, fmt)
    finally:
        await client.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_closing_the_client_mid_answer_fails_the_turn_and_the_next_turn_works(
    server: LLMServer, fmt: str
) -> None:
    """``aclose()`` while the final answer streams: the turn ends with a TransportError
    (partial: the text so far and the tool results), the connection closes, nothing
    is saved, and the next turn on the same agent and client is valid."""
    slow = Reply(text="word " * 200, chunk_size=5, delay=0.005)
    server.script(retry_script(slow))
    history = InMemoryHistoryProvider()
    before = asyncio.all_tasks()
    client = CLIENTS[fmt](server.url, "k")
    try:
        agent = Agent(client, tools=Probe().tools, history=history)
        seen: list[AgentResponseResult] = []
        errors: list[Exception] = []
        agent.run("go").subscribe(seen.append, errors.append)
        await wait_for(lambda: started_and_finished(seen) == (2, 1) and len(seen) > 20)
        await asyncio.wait_for(client.aclose(), GUARD)
        await wait_for(lambda: bool(errors))
        await server.wait_connections_closed(timeout=GUARD)
        (error,) = errors
        assert isinstance(error, TransportError)
        assert error.partial is not None
        assert error.partial.interrupted
        assert error.partial.text.startswith("Looking.word")
        assert [m.content for m in error.partial.tool_messages] == ["found a: ok"]
        assert history.messages == ()
        await check_after_stop(server, agent, history, 0, seen, before, None, fmt)
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_closing_the_client_while_tools_run_does_not_end_the_turn(
    server: LLMServer,
) -> None:
    """Design, not a bug (see the report): ``aclose()`` ends only the HTTP calls in
    flight. Called while the turn's tools run (between two LLM calls), it ends
    nothing; the turn's next LLM call opens a *new* session on the closed client
    and the turn succeeds. Whoever closed the client must close it again."""
    server.script(turn_script)
    probe = Probe(work=0.2)
    client = OpenAIChatClient(server.url, "k")
    try:
        agent = Agent(client, tools=probe.tools)
        task = asyncio.create_task(agent.send("go"))
        await wait_for(lambda: probe.started == 3)
        await client.aclose()
        response = await asyncio.wait_for(task, GUARD)
        assert response.text == "Let me look.All done now, thanks."
        assert len(client._sessions._owned) == 1  # a session opened after aclose()
    finally:
        await client.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_disposing_while_the_second_call_waits_for_headers_closes_it(
    server: LLMServer, fmt: str
) -> None:
    """The server stalls before answering the second LLM call; disposing the turn
    then aborts that request: the server sees the connection close."""
    server.script(retry_script(Fault.stall(30)))
    history = InMemoryHistoryProvider()
    before = asyncio.all_tasks()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=Probe().tools, history=history)
        seen: list[AgentResponseResult] = []
        subscription = agent.run("go").subscribe(seen.append)
        await server.wait_requests(2, timeout=GUARD)
        subscription.dispose()
        await server.wait_connections_closed(timeout=GUARD)
        await check_after_stop(server, agent, history, 0, seen, before, None, fmt)


# ---------------------------------------------------------------- history and context providers


class RowHistory:
    """A history provider that stores one row per message, awaiting each write (as a
    database client does), and signals when a save begins."""

    def __init__(self, delay: float = 0.01) -> None:
        self.rows: list[ChatMessage] = []
        self.delay = delay
        self.loading = asyncio.Event()
        self.saving = asyncio.Event()

    async def load(self) -> Sequence[ChatMessage]:
        self.loading.set()
        await asyncio.sleep(self.delay)
        return tuple(self.rows)

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.saving.set()
        from rafrx.history import is_new

        for message in messages:
            if is_new(message):
                await asyncio.sleep(self.delay)  # one INSERT per message
                self.rows.append(message)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["dispose", "send-cancel"])
async def test_stopping_a_turn_while_its_history_saves_never_tears_the_history(
    server: LLMServer, how: str
) -> None:
    """The turn is stopped while history.save() runs (after the final FinishEvent,
    before completion: the documented "start the next turn on completion" window).
    The turn is over by then: the save should either complete or not happen, never
    leave an assistant's tool calls saved without their results, which makes every
    later request on that history invalid (OpenAI chat: "An assistant message with
    'tool_calls' must be followed by tool messages")."""
    server.script(turn_script)
    history = RowHistory()
    async with OpenAIChatClient(server.url, "k") as client:
        agent = Agent(client, tools=Probe().tools, history=history)  # type: ignore[arg-type]
        if how == "dispose":
            subscription = agent.run("go").subscribe(lambda _: None)
            await asyncio.wait_for(history.saving.wait(), GUARD)
            await asyncio.sleep(history.delay * 2.5)  # a couple of rows in
            subscription.dispose()
        else:
            task = asyncio.create_task(agent.send("go"))
            await asyncio.wait_for(history.saving.wait(), GUARD)
            await asyncio.sleep(history.delay * 2.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await settle()
        # The turn has ended; its save runs on, and the next turn loads only after it.
        rows_at_stop = len(history.rows)
        await asyncio.wait_for(agent.send("NEXT please"), GUARD)
        turn_one = history.rows[: len(history.rows) - 2]  # without "NEXT please" and its answer
        assert len(turn_one) > rows_at_stop
        assert history_problems(turn_one) == [], [(m.role.value, m.content) for m in turn_one]
        assert [m.role.value for m in history.rows[-2:]] == ["user", "assistant"]
    assert wire_problems(server.requests[-1]) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["load", "provide"])
async def test_disposing_while_history_loads_or_context_is_provided_sends_nothing(
    server: LLMServer, where: str
) -> None:
    """Disposal before the first LLM call (history loading, a context provider
    working) cancels them: no request is sent, nothing is saved, nothing is left."""
    history = RowHistory(delay=0.2)
    providing = asyncio.Event()
    cancelled: list[str] = []

    class Facts:
        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            providing.set()
            try:
                await asyncio.sleep(0.2)
            except asyncio.CancelledError:
                cancelled.append("provide")
                raise
            return [ChatMessage.system("Facts.")]

    before = asyncio.all_tasks()
    async with OpenAIChatClient(server.url, "k") as client:
        agent = Agent(
            client,
            tools=Probe().tools,
            history=history,  # type: ignore[arg-type]
            context_providers=[Facts()],
        )
        seen: list[AgentResponseResult] = []
        subscription = agent.run("go").subscribe(seen.append)
        event = history.loading if where == "load" else providing
        await asyncio.wait_for(event.wait(), GUARD)
        subscription.dispose()
        await wait_for(lambda: not new_tasks(before))
        await asyncio.sleep(0.3)
        assert server.requests == []
        assert seen == []
        assert history.rows == []
        if where == "provide":
            assert cancelled == ["provide"]


# ---------------------------------------------------------------- random points in time


async def _random_stop(fmt: str, eager: bool, how: str, at: float, work: float, hang: bool) -> None:
    """One turn stopped ``at`` seconds in (dispose, cancel send(), or close the client),
    with tools that work, raise, and time out (or hang with no timeout), then every
    check of :func:`check_after_stop` and a clean shutdown."""
    async with LLMServer() as server:
        server.script(turn_script)
        await settle()
        before = asyncio.all_tasks()
        probe = Probe(work=work)
        if hang:  # no timeout: only the stop ends it
            probe.tools[2] = tool(probe.slow)
        history = InMemoryHistoryProvider()
        client = CLIENTS[fmt](server.url, "k")
        try:
            agent = Agent(client, tools=probe.tools, history=history, eager_tools=eager)
            seen: list[AgentResponseResult] = []
            ended: list[Any] = []
            if how == "send-cancel":
                task: asyncio.Task[Any] = asyncio.create_task(agent.send("go"))
                await asyncio.sleep(at)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, RafrxError):
                    await asyncio.wait_for(asyncio.shield(task), GUARD)
            else:
                subscription = agent.run("go").subscribe(
                    seen.append, ended.append, lambda: ended.append("done")
                )
                await asyncio.sleep(at)
                if how == "dispose":
                    subscription.dispose()
                    delivered = len(seen)
                    await settle()
                    assert len(seen) == delivered
                    assert ended in ([], ["done"])
                else:  # aclose: a call in flight fails; tools running are not stopped
                    await asyncio.wait_for(client.aclose(), GUARD)
                    if hang and not ended:
                        subscription.dispose()  # nothing else ends a hanging tool
                    else:
                        await wait_for(lambda: bool(ended))
                    assert len(ended) <= 1
                    assert ended == [] or ended == ["done"] or isinstance(ended[0], TransportError)
            await check_after_stop(server, agent, history, 0, seen, before, probe, how)
        finally:
            await client.aclose()
        await server.wait_connections_closed(timeout=GUARD)
        await wait_for(lambda: not new_tasks(before))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    fmt=st.sampled_from(FORMATS),
    eager=st.booleans(),
    how=st.sampled_from(["dispose", "send-cancel", "aclose"]),
    at=st.floats(0.0, 0.12),
    work=st.sampled_from([0.0, 0.01, 0.05]),
    hang=st.booleans(),
)
def test_stopping_a_turn_at_a_random_moment(
    fmt: str, eager: bool, how: str, at: float, work: float, hang: bool
) -> None:
    """Hypothesis over the moment (and the way) a turn is stopped, the wire format,
    eager tools and tool durations: the invariants of the sweep hold everywhere."""
    asyncio.run(asyncio.wait_for(_random_stop(fmt, eager, how, at, work, hang), 3 * GUARD))


# ---------------------------------------------------------------- nothing starts after disposal


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("case", ["queued-behind-concurrency", "eager-call-just-flushed"])
async def test_no_tool_starts_after_the_turn_is_disposed(
    server: LLMServer, case: str, kind: str
) -> None:
    """The user presses stop (disposes inside on_next) as soon as they see the first
    tool's result (``concurrency=1``: the other calls still queue), or, with
    ``eager_tools``, on the item right after the first call was flushed (its task
    created, not yet run). Disposal "cancels the running request and tools"
    (Agent.run): a tool with side effects (``delete``) must not *begin* after it
    (a sync tool's worker thread cannot be cancelled once started)."""
    deleted: list[str] = []

    def delete_sync(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        time.sleep(0.01)  # the file system takes a moment
        return f"deleted {path}"

    async def delete_async(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        await asyncio.sleep(0.01)
        return f"deleted {path}"

    delete = tool(name="delete")(delete_sync if kind == "sync" else delete_async)

    eager = case == "eager-call-just-flushed"
    late: list[list[str]] = []
    async with OpenAIChatClient(server.url, "k") as client:
        agent = Agent(client, tools=[delete], concurrency=1, eager_tools=eager)
        for attempt in range(4):  # a worker thread may or may not pick the call up in time
            paths = [f"/tmp/{attempt}/{name}" for name in "abc"]
            server.enqueue(
                Reply(
                    tool_calls=[ToolCallSpec("delete", {"path": p}) for p in paths],
                    chunk_size=4,
                    delay=0.002,
                )
            )
            deleted.clear()
            holder: dict[str, Any] = {}
            seen: list[AgentResponseResult] = []
            at_stop: list[str] = []

            def on_next(
                result: AgentResponseResult,
                seen: list[AgentResponseResult] = seen,
                holder: dict[str, Any] = holder,
                at_stop: list[str] = at_stop,
            ) -> None:
                seen.append(result)
                if holder.get("stopped"):
                    return
                if eager:  # the item right after the first flushed call (same burst)
                    stop_now = any(
                        isinstance(c, ToolCallingContent) for r in seen[:-1] for c in r.contents
                    )
                else:
                    stop_now = any(isinstance(c, ToolCalledContent) for c in result.contents)
                if stop_now:
                    holder["stopped"] = True
                    holder["subscription"].dispose()
                    at_stop.extend(deleted)

            holder["subscription"] = agent.run("clean up").subscribe(on_next)
            await wait_for(lambda holder=holder: bool(holder.get("stopped")))  # type: ignore[misc]
            await asyncio.sleep(0.1)
            late.append(deleted[len(at_stop) :])
    assert late == [[]] * 4, f"deleted after the stop, per attempt: {late}"
