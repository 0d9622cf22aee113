"""Regression tests for the bugs a close, line-by-line reading of rafrx's code found
(agent side).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex.subject import Subject

from rafrx import Agent, ChatMessage, FinishReason
from rafrx import updates as u
from rafrx.events import ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.recorder import replay, sample
from rafrx.response import AgentResponseResult
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import ToolApprovalResponse, tool

GUARD = 5.0  # seconds: a guard against hangs only


class Scripted:
    """A stand-in client as the Agent docstring writes one: each LLM call replays the
    next script with ``reactivex.from_iterable`` (synchronously on subscribe)."""

    def __init__(self, *turns: list[u.AgentResponseUpdate] | Observable[Any]) -> None:
        self.turns = list(turns)
        self.calls: list[tuple[ChatMessage, ...]] = []

    def stream(
        self, messages: Sequence[ChatMessage], tools: Any = None, **params: Any
    ) -> Observable[Any]:
        self.calls.append(tuple(messages))
        turn = self.turns.pop(0)
        return turn if isinstance(turn, Observable) else reactivex.from_iterable(turn)


def answer(text: str) -> list[u.AgentResponseUpdate]:
    return [u.TextDelta(text), u.Finish(FinishReason.STOP)]


# ------------------------------------------------------------------------------ 1


@pytest.mark.asyncio
async def test_a_late_answer_to_a_timed_out_request_never_approves_the_next_llm_calls_call() -> (
    None
):
    """What the user does: an Agent with a hot ``Subject`` of answers (a UI's approve
    button) and ``approval_timeout``; the model (Kimi gives every response the same ids,
    ``functions.delete:0``) calls ``delete(path="a")``. Nobody answers in time: the
    call is denied and sent back. The model tries again in the next LLM call with
    ``delete(path="b")`` under the same id. While that call streams, the user clicks
    "approve" on the dialog still showing the first request.

    What happens: the late answer approves ``delete("b")``: it runs, though nobody was
    asked about *it* (its request is emitted after its answer was already taken).

    What should happen: "With ``approval_timeout`` (seconds), a request not answered in
    time is denied, saying so, and a later answer to it is ignored" (execute_tools'
    docstring); the operator pins exactly this within one subscription
    (tests/operators/test_execute_tools.py
    ``test_a_late_answer_never_approves_a_later_call_with_the_same_id``). The same
    holds for a double click on an answered request (tests/
    test_close_reading_operators_fixes.py). An approval gate must fail closed.

    Root cause: rafrx/agent.py ``_Turn.step`` subscribes a fresh
    ``agent._executor()`` (a new ``_Runner``) per LLM call, so the ``closed`` ids of
    the previous call are forgotten, and the new runner's ``take_answer``
    (rafrx/operators/_execute_tools.py:159-167) stores any answer for an id it has no
    waiting future for; the next request for the id pops it (``answer``, :353).
    """
    ran: list[str] = []

    @tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    cid = "functions.delete:0"
    async with LLMServer() as server:
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "a"}, id=cid)]),
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "b"}, id=cid)]),
            Reply(text="I could not delete anything."),
        )
        answers: Subject[ToolApprovalResponse] = Subject()
        async with OpenAIChatClient(server.url, model="m") as client:
            agent = Agent(client, tools=[delete], approver=answers, approval_timeout=0.2)
            starts: list[ResponseStartedEvent] = []

            def on_next(result: AgentResponseResult) -> None:
                for event in result.events:
                    if isinstance(event, ResponseStartedEvent):
                        starts.append(event)
                        if len(starts) == 2:  # the late click on the stale dialog
                            answers.on_next(ToolApprovalResponse(cid, True))

            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            agent.run("clean up").subscribe(
                on_next, done.set_exception, lambda: done.set_result(None)
            )
            await asyncio.wait_for(done, GUARD)
    assert ran == [], f"ran {ran}: a late answer to the first request approved the second"


# ------------------------------------------------------------------------------ 2


@pytest.mark.asyncio
@pytest.mark.parametrize("what", ["tool", "approver"])
async def test_disposing_a_turn_of_a_synchronous_client_starts_no_tool_and_asks_no_approver(
    what: str,
) -> None:
    """What the user does: a client that replays a recorded stream
    (``rafrx.recorder.replay(sample("demo-anthropic.sse"), dialect="auto")``, which
    "emits everything synchronously on subscribe"; or the Agent docstring's
    ``reactivex.from_iterable`` stand-in) and a UI that stops the turn on its first
    item (``take(1)``-style: disposing inside ``on_next``).

    What happens: the rest of the LLM call is still run through ``execute_tools``:
    ``get_weather`` starts and the approver of ``write_file`` is asked, after the
    disposal.

    What should happen: ``Agent.run``: "Disposal cancels the running request and tools
    at once (no tool starts and no approver is asked after it)". Over HTTP this holds
    (tests/test_agent_cancellation.py); DESIGN.md names synchronous sources ("replays,
    benchmarks, marble tests") as supported.

    Root cause: rafrx/agent.py ``_Turn.step`` (:619-622) sets ``self.current`` only
    after ``results.subscribe`` returns, so ``_Turn.stop`` (:497-499) finds nothing to
    dispose while a synchronous source emits inside ``subscribe``; the execute_tools
    runner is not stopped and creates its tasks; the turn task's cancellation is only
    delivered after those tasks' first steps ran (``Task.cancel`` of a running task
    wakes it on a later loop iteration). Fix: give ``self.current`` a
    ``SingleAssignmentDisposable`` *before* subscribing (assigning to a disposed one
    disposes the subscription at once, cancelling the tasks before they start), and
    do not start a step once ``self.stopped``.
    """
    started: list[str] = []

    @tool
    async def get_weather(city: str) -> str:
        """The weather."""
        started.append(f"get_weather({city})")
        return "sunny"

    @tool(requires_approval=True)
    async def write_file(path: str, content: str) -> str:
        """Write a file."""
        started.append(f"write_file({path})")
        return "written"

    async def approver(request: ToolApprovalRequestEvent) -> bool:
        started.append(f"asked about {request.name}")
        return True

    class ReplayClient:
        def stream(self, messages: Any, tools: Any = None, **params: Any) -> Observable[Any]:
            return replay(sample("demo-anthropic.sse"), dialect="auto")

    tools = [get_weather] if what == "tool" else [write_file]
    agent = Agent(ReplayClient(), tools=tools, approver=approver)
    seen: list[AgentResponseResult] = []
    holder: dict[str, Any] = {}

    def on_next(result: AgentResponseResult) -> None:
        seen.append(result)
        holder["subscription"].dispose()  # stop at the first item

    holder["subscription"] = agent.run("Plan my day in Paris").subscribe(on_next)
    for _ in range(20):  # let every task the turn made run (they finish at once)
        await asyncio.sleep(0)
    assert len(seen) == 1
    assert started == [], f"after the disposal: {started}"


# ------------------------------------------------------------------------------ 2b


@pytest.mark.asyncio
async def test_a_turn_disposed_mid_answer_of_a_synchronous_client_saves_nothing() -> None:
    """What the user does: an Agent with history and a client that replays synchronously
    (``replay(..., pacing=False)``, ``from_sse(body)``, or the docstring's
    ``from_iterable`` stand-in). The UI shows the answer as it comes and the user
    presses "stop" after its first words (disposal inside ``on_next``).

    What happens: the stopped turn is *saved*: the history gets the user's message and
    the answer cut at the disposal ("Paris is "), as if it were the whole answer; every
    later turn sends it to the model.

    What should happen: a stopped turn saves nothing, unless its save had already begun
    (``Agent.run``: "a save already begun runs on to its end"); over HTTP that is what
    happens (tests/test_agent_cancellation.py: "history holds either nothing of the turn
    or the whole turn").

    Root cause: rafrx/agent.py ``_Turn.loop`` (:558-588) never checks ``self.stopped``.
    The disposal cancels the turn's task, but the cancellation is only delivered at the
    task's next real suspension: ``Outcome.wait`` returns without suspending when the
    step already ended (the synchronous source completed inside ``subscribe``), and
    ``_HistoryAccess._enter`` does not suspend when no other save runs, so the first
    suspension is ``await asyncio.shield(saving)``, after the save was started. Fix:
    ``if self.stopped: raise asyncio.CancelledError`` after each step (and before the
    save).
    """
    history = InMemoryHistoryProvider()
    script = [
        u.ResponseMetadata("resp", "m"),
        u.TextDelta("Paris is "),
        u.TextDelta("the capital of France."),
        u.Finish(FinishReason.STOP),
    ]
    agent = Agent(Scripted(script), history=history)
    holder: dict[str, Any] = {}

    def on_next(result: AgentResponseResult) -> None:
        if result.contents:  # the first words: the user presses stop
            holder["subscription"].dispose()

    holder["subscription"] = agent.run("What is Paris?").subscribe(on_next)
    for _ in range(20):
        await asyncio.sleep(0)
    assert [m.content for m in history.messages] == [], "a stopped turn was saved, cut"


# ------------------------------------------------------------------------------ 3


class _StuckSave(InMemoryHistoryProvider):
    """A history whose first save waits until released (a slow database)."""

    def __init__(self) -> None:
        super().__init__()
        self.saving: asyncio.Event | None = None
        self.first = True

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        if self.first:
            self.first = False
            assert self.saving is not None
            self.saving.set()
            await asyncio.Event().wait()  # never released: its loop goes away first
        await super().save(messages)


def test_a_save_stranded_on_a_closed_loop_never_blocks_the_agents_next_turns() -> None:
    """What the user does: a sync program driving the agent with its own loop
    (``loop.run_until_complete(...)`` then ``loop.close()``, the pattern of many sync
    wrappers and per-request loops). A turn is stopped while its history save runs
    (a UI "stop", or a ``wait_for`` timeout); the save goes on as a task, as
    documented, but the loop is then closed with that task still pending. Later the
    program asks the agent again, on a new loop.

    What happens: the new turn waits forever: ``_HistoryAccess._enter`` waits for the
    save's entry, which only the stranded task's done callback would remove.

    What should happen: the next turn runs (at worst the stranded save's messages are
    missing). rafrx already lets go of what a closed loop holds: ``_stop`` ("the task
    can never run again: let it go"), ``Outcome.set_result`` and ``call_on`` ignore a
    closed loop. A turn that never ends is the worst outcome (RELIABILITY: nothing
    hangs).

    Root cause: rafrx/agent.py:393-420: an entry of ``saving`` (and of ``loading``)
    is left only from its own loop. Fix: keep each entry's loop with it and treat an
    entry whose loop is closed as gone in ``_enter`` (and log that a save was cut).
    """
    history = _StuckSave()
    agent = Agent(Scripted(answer("one"), answer("two")), history=history)
    loop = asyncio.new_event_loop()

    async def first() -> None:
        history.saving = asyncio.Event()
        subscription = agent.run("one").subscribe(lambda _: None)
        await asyncio.wait_for(history.saving.wait(), GUARD)
        subscription.dispose()  # the save runs on, as documented

    loop.run_until_complete(first())
    loop.close()  # (the save task is still pending)

    async def second() -> str:
        return (await asyncio.wait_for(agent.send("two"), GUARD)).text

    assert asyncio.run(second()) == "two"


# ------------------------------------------------------------------------------ 4


def test_a_turn_stranded_on_a_closed_loop_does_not_refuse_every_later_turn() -> None:
    """What the user does: an Agent with a ``Subject`` approver (one turn at a time),
    driven by a sync program with its own loops. A turn is under way when its loop is
    closed (the program gave up on it: ``run_until_complete`` of something else
    returned and the loop was closed without cancelling the pending tasks). The
    program asks the agent again on a new loop.

    What happens: every later turn fails at once with "this agent is running a turn
    ... start the next turn when this one ends": the stranded turn stays in
    ``Agent._turns`` forever (it is also kept alive by ``_RUNNING``, so not even its
    garbage collection ends it). The agent is unusable for good.

    What should happen: a turn whose loop is closed can never run again (``_stop``
    says so, and drops it from ``_RUNNING``), so it cannot be using the approver: the
    next turn runs.

    Root cause: rafrx/agent.py:330 counts every turn in ``self._turns``, which only
    ``_Turn.stop`` / ``terminate`` / ``run``'s ``finally`` (all on the turn's loop or
    on disposal) remove. Fix: in ``subscribe``, ignore (and drop) turns whose task's
    loop is closed, e.g. keep ``(turn, task)`` and test ``task.get_loop().is_closed()``.
    """

    class Client:
        def __init__(self) -> None:
            self.n = 0

        def stream(self, messages: Any, tools: Any = None, **params: Any) -> Observable[Any]:
            self.n += 1
            if self.n == 1:
                return reactivex.never()  # a call that is still streaming
            return reactivex.from_iterable(answer("two"))

    agent = Agent(Client(), approver=Subject())
    loop = asyncio.new_event_loop()

    async def first() -> None:
        agent.run("one").subscribe(lambda _: None)
        for _ in range(5):
            await asyncio.sleep(0)

    loop.run_until_complete(first())
    loop.close()

    async def second() -> str:
        return (await asyncio.wait_for(agent.send("two"), GUARD)).text

    assert asyncio.run(second()) == "two"


# ------------------------------------------------------------------------------ 5


@pytest.mark.asyncio
async def test_a_sync_history_save_is_not_run_and_then_reported_failed() -> None:
    """What the user does: writes a history provider with plain ``def load`` /
    ``def save`` (a dict, a sqlite3 connection), as they may for tools and approvers
    (both may be sync). ``load`` happens to be async, ``save`` is not.

    What happens: the turn's ``save`` *runs* (the messages are stored), then the turn
    fails with ``TypeError: An asyncio.Future, a coroutine or an awaitable is
    required``, an error that names neither the provider nor the method. The caller,
    told the turn failed, retries it, and the history holds the exchange twice. (A
    sync ``load`` or ``provide`` fails with "object list can't be used in 'await'
    expression", naming no provider either.)

    What should happen: either a sync provider works (as sync tools and approvers do,
    via ``rafrx._call.call_function``), or it is refused *before* anything is stored,
    with an error naming it (as ``_messages_from`` does for a wrong return value:
    "{Provider}.load() gave ..., not a ChatMessage").

    Root cause: rafrx/agent.py:395 ``asyncio.ensure_future(save())`` calls ``save``
    first and only then finds it returned no awaitable (and :387 / :548 ``await``
    what ``load()`` / ``provide()`` returned). Fix: ``result = save(); if
    inspect.isawaitable(result): await it`` (the same for load and provide), or check
    ``inspect.iscoroutinefunction`` up front and raise a TypeError naming the provider.
    """

    class Store:
        def __init__(self) -> None:
            self.saved: list[ChatMessage] = []

        async def load(self) -> list[ChatMessage]:
            return list(self.saved)

        def save(self, messages: Sequence[ChatMessage]) -> None:
            self.saved.extend(messages)

    store = Store()
    agent = Agent(Scripted(answer("hi")), history=store)  # type: ignore[arg-type]
    error: Exception | None = None
    try:
        await agent.send("hello")
    except Exception as raised:
        error = raised
    if error is not None:
        assert store.saved == [], f"saved, then reported as failed: {error!r}"
        assert "Store" in str(error), f"the error names no provider: {error!r}"


# ------------------------------------------------------------------------------ 6


# ------------------------------------------------------------------------------ 7


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["history.load", "client on_error"])
async def test_a_cancelled_error_from_user_code_is_not_reported_as_the_loop_ending(
    where: str,
) -> None:
    """What the user does: a history provider whose database driver raises
    ``CancelledError`` from ``load`` (its own pool task was cancelled), or a client built
    with ``reactivex.from_future`` over a request task that was cancelled (reactivex
    passes the ``CancelledError`` to ``on_error``). The turn itself is not cancelled and
    its loop runs on.

    What happens: the turn fails with ``TransportError("the turn was cancelled (its
    event loop ended?)", retryable=False)``: a transport error that names the wrong
    cause; the provider's message ("the database pool's task was cancelled") is lost
    (not even a ``__cause__``).

    What should happen: the error says what happened: the ``CancelledError`` raised by
    user code is treated as that code's failure, as ``execute_tools`` does for a tool
    or an approver ("raised by the approver itself: still a result", using
    ``_being_cancelled()``: the running task's ``cancelling()``), and the "loop ended"
    message is kept for a real cancellation of the turn's task.

    Root cause: rafrx/agent.py:504-511 takes every ``CancelledError`` that reaches
    ``_Turn.run`` while not stopped for the loop ending. Fix: check
    ``asyncio.current_task().cancelling()``; when 0, end the turn with an error whose
    ``__cause__`` is the ``CancelledError`` (and do not re-raise it).
    """
    said = "the database pool's task was cancelled"

    class History(InMemoryHistoryProvider):
        async def load(self) -> Sequence[ChatMessage]:
            raise asyncio.CancelledError(said)

    if where == "history.load":
        agent = Agent(Scripted(answer("hi")), history=History())
    else:
        request: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        request.cancel(said)
        agent = Agent(Scripted(reactivex.from_future(request)))
    with pytest.raises(BaseException) as caught:  # noqa: PT011 - whatever it is
        await asyncio.wait_for(agent.send("hello"), GUARD)
    error = caught.value
    chain = [error, error.__cause__, error.__context__]
    assert "event loop ended" not in str(error), f"{error!r}"
    assert any(said in str(e) for e in chain if e is not None), f"{error!r} lost the cause"


# ------------------------------------------------------------------------------ 8


def _ticking(updates: list[u.AgentResponseUpdate]) -> Observable[Any]:
    """Emits one update per loop tick from a task (as a network source does)."""
    from reactivex.disposable import Disposable

    def subscribe(observer: Any, scheduler: Any = None) -> Any:
        async def emit() -> None:
            for update in updates:
                await asyncio.sleep(0)
                observer.on_next(update)
            observer.on_completed()

        task = asyncio.get_running_loop().create_task(emit())
        return Disposable(task.cancel)

    return Observable(subscribe)


@pytest.mark.asyncio
async def test_stopping_at_the_second_approval_request_never_starts_the_first_tool() -> None:
    """What the user does: the model asks for ``delete("a")`` and ``delete("b")`` (both
    need approval). The approver approves ``a`` at once; the UI shows the request for
    ``b`` and the user presses stop right there (disposal inside ``on_next`` of that
    request).

    What happens: ``delete("a")``'s function starts *after* the disposal returned.

    What should happen: ``Agent.run``: "Disposal cancels the running request and tools
    at once (no tool starts and no approver is asked after it)";
    tests/test_agent_cancellation.py ``test_no_tool_starts_after_the_turn_is_disposed``
    asks the same ("a tool with side effects (delete) must not *begin* after it"), but
    only for a call whose task had not yet run. (The same happens with
    ``eager_tools`` when the stop comes one tick after a call was flushed.)

    Root cause: rafrx/tools.py:294 ``Tool.invoke`` runs the function in an inner task
    (``asyncio.ensure_future(self._call(...))``) and awaits it with ``asyncio.wait``.
    When the call's task is cancelled after that inner task was scheduled but before
    it first ran, the outer task only learns of the cancellation on a later loop
    iteration, after the inner task's first step has started the function (or
    submitted a sync one to a worker thread); ``running.cancel()`` then comes too late.
    Fix: in ``invoke``, capture ``outer = asyncio.current_task()`` and have ``_call``
    begin with ``if outer is not None and outer.cancelling(): raise CancelledError``
    (the cancel request is counted at once), or cancel the inner task from
    ``_Runner.cancel`` directly.
    """
    events: list[str] = []
    state = {"disposed": False}

    @tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        events.append(f"delete({path})" + (" after the stop" if state["disposed"] else ""))
        return f"deleted {path}"

    async def approver(request: ToolApprovalRequestEvent) -> bool:
        return request.call_id == "c1"

    script: list[u.AgentResponseUpdate] = [u.ResponseMetadata("resp", "m")]
    for call_id, path in (("c1", "a"), ("c2", "b")):
        script += [
            u.ToolCallStart(call_id, "delete"),
            u.ToolCallArgs(call_id, f'{{"path": "{path}"}}'),
            u.ToolCallEnd(call_id),
        ]
    script.append(u.Finish(FinishReason.TOOL_CALLS))

    class Client:
        def stream(self, messages: Any, tools: Any = None, **params: Any) -> Observable[Any]:
            return _ticking(script)

    agent = Agent(Client(), tools=[delete], approver=approver)
    holder: dict[str, Any] = {}

    def on_next(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent) and event.call_id == "c2":
                state["disposed"] = True
                holder["subscription"].dispose()

    holder["subscription"] = agent.run("clean up").subscribe(on_next)
    for _ in range(60):
        await asyncio.sleep(0)
    assert state["disposed"]
    assert events == [], f"after the stop: {events}"
