"""A close, concurrency-minded reading of ``rafrx/agent.py``: every await point,
callback and lock of a turn, pinned.

Angle: a reviewer asking, at each point of ``Agent.run`` / ``_Turn`` /
``_HistoryAccess`` (and ``execute_tools`` / ``Outcome`` as the agent uses them):
what if the client's observable fails on subscribe, completes with nothing, or
signals after its end; what if the observer raises, disposes in a terminal
callback, or disposes from another thread; what if a provider is slow or raises;
what if another turn of the same agent loads or saves meanwhile (same loop, or
another thread's loop); how many LLM calls ``max_steps`` allows; and does the turn
end exactly once, with nothing after its end.

The clients here are small fakes of the ``ChatClient`` protocol (a synchronous
``reactivex.from_iterable`` one, as the Agent docstring writes, and one emitting
one update per loop tick), plus the real local :class:`~rafrx.testing.LLMServer`
over aiohttp where the wire matters. Every wait is bounded by ``GUARD`` (a guard
against hangs, never reached by a passing test).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import reactivex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rafrx import Agent, ChatMessage, FinishReason
from rafrx import updates as u
from rafrx.content import ToolCalledContent, ToolCallingContent
from rafrx.errors import MaxStepsExceeded, TransportError
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import MessageRole
from rafrx.response import AgentResponseResult
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import ToolApprovalResponse, tool

GUARD = 5.0  # seconds: a guard against hangs only

Updates = list[u.AgentResponseUpdate]


# ---------------------------------------------------------------- fakes and helpers


def calls(*specs: tuple[str, str, dict[str, Any]]) -> Updates:
    """One LLM call making the given (id, name, arguments) calls."""
    out: Updates = [u.ResponseMetadata("resp", "fake-1")]
    for call_id, name, arguments in specs:
        out += [
            u.ToolCallStart(call_id, name),
            u.ToolCallArgs(call_id, json.dumps(arguments)),
            u.ToolCallEnd(call_id),
        ]
    out.append(u.Finish(FinishReason.TOOL_CALLS))
    return out


def answer(text: str) -> Updates:
    return [u.ResponseMetadata("resp", "fake-1"), u.TextDelta(text), u.Finish(FinishReason.STOP)]


class Scripted:
    """A client that gives each LLM call the next script: a list of updates (emitted
    synchronously on subscribe, as ``reactivex.from_iterable``), an ``Observable``
    (given as is) or an exception (raised by ``stream`` itself)."""

    def __init__(self, *scripts: Updates | Observable[Any] | Exception) -> None:
        self.scripts = list(scripts)
        self.sent: list[tuple[ChatMessage, ...]] = []

    def stream(
        self, messages: Sequence[ChatMessage], tools: Any = None, **params: Any
    ) -> Observable[Any]:
        self.sent.append(tuple(messages))
        script = self.scripts.pop(0)
        if isinstance(script, Exception):
            raise script
        return script if isinstance(script, Observable) else reactivex.from_iterable(script)


class Ticking(Scripted):
    """As :class:`Scripted`, but a list is emitted one update per loop tick from a task
    (as a network source does), which disposal cancels."""

    def stream(
        self, messages: Sequence[ChatMessage], tools: Any = None, **params: Any
    ) -> Observable[Any]:
        script = self.scripts[0]
        if not isinstance(script, list):
            return super().stream(messages, tools, **params)
        self.sent.append(tuple(messages))
        self.scripts.pop(0)

        def subscribe(
            observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            async def emit() -> None:
                for update in script:
                    await asyncio.sleep(0)
                    observer.on_next(update)
                observer.on_completed()

            task = asyncio.get_running_loop().create_task(emit())
            return Disposable(task.cancel)

        return Observable(subscribe)


class Watch:
    """An observer of one turn that records everything and checks the Rx grammar:
    ``on_next* (on_error | on_completed)?``, each terminal at most once."""

    def __init__(self) -> None:
        self.items: list[AgentResponseResult] = []
        self.errors: list[Exception] = []
        self.completions = 0
        self.after_end: list[str] = []
        self.ended = asyncio.Event()

    def on_next(self, result: AgentResponseResult) -> None:
        if self.ended.is_set():
            self.after_end.append("on_next")
        self.items.append(result)

    def on_error(self, error: Exception) -> None:
        if self.ended.is_set():
            self.after_end.append("on_error")
        self.errors.append(error)
        self.ended.set()

    def on_completed(self) -> None:
        if self.ended.is_set():
            self.after_end.append("on_completed")
        self.completions += 1
        self.ended.set()

    def subscribe(self, observable: Observable[AgentResponseResult]) -> abc.DisposableBase:
        return observable.subscribe(self.on_next, self.on_error, self.on_completed)

    async def end(self) -> None:
        await asyncio.wait_for(self.ended.wait(), GUARD)
        for _ in range(5):  # anything late would come within a few ticks
            await asyncio.sleep(0)
        assert self.after_end == []
        assert len(self.errors) + self.completions == 1

    def contents(self, kind: type) -> list[Any]:
        return [c for r in self.items for c in r.contents if isinstance(c, kind)]

    def events(self, kind: type) -> list[Any]:
        return [e for r in self.items for e in r.events if isinstance(e, kind)]


async def ticks(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def wait_until(predicate: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), GUARD)


RAN: list[str] = []


@tool
async def lookup(city: str) -> str:
    """Look a city up."""
    RAN.append(city)
    return f"{city}: sunny"


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()


# ---------------------------------------------------------------- the client's observable


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["on_error at subscribe", "stream() raises"])
async def test_a_client_failing_at_once_ends_the_turn_once_with_its_error(how: str) -> None:
    """An observable that errors synchronously on subscribe (``reactivex.throw``) or a
    ``stream()`` that raises: the turn ends with that error, once (after the
    ``ErrorContent`` the converter emits for a stream's error), typed: another
    library's error as a ``TransportError`` caused by it, with ``.partial``; nothing is
    saved; the agent's next turn works."""
    boom = ConnectionError("refused")
    script: Exception | Observable[Any] = reactivex.throw(boom) if how.startswith("on") else boom
    history = InMemoryHistoryProvider()
    agent = Agent(Scripted(script, answer("hi")), history=history)
    watch = Watch()
    watch.subscribe(agent.run("hello"))
    await watch.end()
    (error,) = watch.errors
    assert isinstance(error, TransportError)
    assert error.__cause__ is boom
    assert error.partial is not None
    said = [type(c).__name__ for r in watch.items for c in r.contents]
    assert said == (["ErrorContent"] if how.startswith("on") else [])  # (DESIGN: Errors)
    assert history.messages == ()
    assert (await asyncio.wait_for(agent.send("again"), GUARD)).text == "hi"
    assert [m.content for m in history.messages] == ["again", "hi"]


@pytest.mark.asyncio
@pytest.mark.parametrize("client", [Scripted, Ticking])
async def test_a_client_completing_with_nothing_ends_the_turn_once(client: type) -> None:
    """An LLM call that completes without a single update: no hang, no tool, one end."""
    agent = Agent(client(reactivex.empty()), tools=[lookup])
    watch = Watch()
    watch.subscribe(agent.run("hello"))
    await watch.end()
    assert watch.completions == 1
    assert watch.items == []
    assert RAN == []


def _signals_after_its_end(*after: Callable[[abc.ObserverBase[Any]], None]) -> Observable[Any]:
    def subscribe(
        observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        for update in answer("done"):
            observer.on_next(update)
        observer.on_completed()
        for signal in after:
            signal(observer)
        return Disposable()

    return Observable(subscribe)


@pytest.mark.asyncio
async def test_what_a_client_signals_after_completing_never_reaches_the_turn() -> None:
    """A sloppy client: after ``on_completed`` it emits a tool call, errors and completes
    again. The turn saw one answer, runs no tool, and ends once, as a success."""
    late = calls(("c1", "lookup", {"city": "Oslo"}))
    observable = _signals_after_its_end(
        *(lambda o, x=x: o.on_next(x) for x in late),  # type: ignore[misc]
        lambda o: o.on_error(RuntimeError("late")),
        lambda o: o.on_completed(),
    )
    history = InMemoryHistoryProvider()
    agent = Agent(Scripted(observable), tools=[lookup], history=history)
    watch = Watch()
    watch.subscribe(agent.run("hello"))
    await watch.end()
    assert watch.completions == 1
    assert watch.contents(ToolCallingContent) == []
    assert RAN == []
    assert [m.content for m in history.messages] == ["hello", "done"]


@pytest.mark.asyncio
async def test_a_client_error_while_tools_run_cancels_them_and_nothing_follows() -> None:
    """The model's stream fails after a complete tool call, while the tool runs: the
    turn ends with that error at once, the tool is cancelled (its result never comes),
    and the partial response keeps the call."""
    release = asyncio.Event()
    cancelled: list[str] = []

    @tool
    async def slow(city: str) -> str:
        """A slow lookup."""
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(city)
            raise
        return "never"

    upstream: Subject[Any] = Subject()
    agent = Agent(Scripted(upstream), tools=[slow], eager_tools=True)
    watch = Watch()
    watch.subscribe(agent.run("hello"))
    await wait_until(lambda: upstream.observers != [])
    for update in calls(("c1", "slow", {"city": "Oslo"}))[:-1]:  # no Finish yet
        upstream.on_next(update)
    await wait_until(lambda: bool(watch.contents(ToolCallingContent)))
    await ticks()
    failure = ConnectionResetError("peer reset")
    upstream.on_error(failure)
    await watch.end()
    release.set()
    await ticks()
    assert [e.__cause__ for e in watch.errors] == [failure]  # (a TransportError of it)
    assert cancelled == ["Oslo"]
    assert watch.contents(ToolCalledContent) == []


# ---------------------------------------------------------------- how the turn ends


@pytest.mark.asyncio
async def test_the_turn_completes_after_its_history_save_and_only_once() -> None:
    """``run``: "the new input and the turn's transcript are saved to history, then the
    observable completes". Inside ``save``, the observer has seen the last
    ``FinishEvent`` but not the completion."""
    seen_at_save: list[tuple[int, int]] = []
    watch = Watch()

    class Recording(InMemoryHistoryProvider):
        async def save(self, messages: Sequence[ChatMessage]) -> None:
            await asyncio.sleep(0)
            seen_at_save.append((len(watch.events(FinishEvent)), watch.completions))
            await super().save(messages)

    script = (calls(("c1", "lookup", {"city": "Oslo"})), answer("sunny"))
    agent = Agent(Ticking(*script), tools=[lookup], history=Recording())
    watch.subscribe(agent.run("weather?"))
    await watch.end()
    assert seen_at_save == [(2, 0)]
    assert watch.completions == 1


@pytest.mark.asyncio
async def test_an_observer_raising_in_on_next_ends_the_turn_with_that_error_once() -> None:
    """The UI's ``on_next`` raises on the tool call: the turn ends with that very
    exception in ``on_error``, no tool runs, nothing more is forwarded, nothing saved."""
    oops = ValueError("the UI broke")
    items: list[AgentResponseResult] = []
    errors: list[Exception] = []
    ended = asyncio.Event()

    def on_next(result: AgentResponseResult) -> None:
        items.append(result)
        if any(isinstance(c, ToolCallingContent) for c in result.contents):
            raise oops

    def on_error(error: Exception) -> None:
        errors.append(error)
        ended.set()

    history = InMemoryHistoryProvider()
    agent = Agent(
        Ticking(calls(("c1", "lookup", {"city": "Oslo"})), answer("x")),
        tools=[lookup],
        history=history,
    )
    agent.run("hello").subscribe(on_next, on_error, ended.set)
    await asyncio.wait_for(ended.wait(), GUARD)
    count = len(items)
    await ticks(20)
    assert errors == [oops]
    assert len(items) == count
    assert RAN == []
    assert history.messages == ()


@pytest.mark.asyncio
async def test_an_observer_raising_in_on_completed_reaches_the_loop_once(
    loop_errors: list[dict[str, Any]],
) -> None:
    """A terminal callback that raises goes to the loop's exception handler (once, named
    as the Agent's), after the turn was saved; the next turn may start."""
    history = InMemoryHistoryProvider()
    agent = Agent(Ticking(answer("one"), answer("two")), history=history)
    finished = asyncio.Event()

    def on_completed() -> None:
        finished.set()
        raise RuntimeError("the UI's completion handler broke")

    agent.run("first").subscribe(lambda _: None, lambda _: None, on_completed)
    await asyncio.wait_for(finished.wait(), GUARD)
    await ticks()
    assert [c["message"] for c in loop_errors] == ["rafrx.Agent: an observer raised"]
    assert [m.content for m in history.messages] == ["first", "one"]
    assert (await asyncio.wait_for(agent.send("second"), GUARD)).text == "two"


@pytest.mark.asyncio
@pytest.mark.parametrize("end", ["on_completed", "on_error"])
async def test_disposing_inside_a_terminal_callback_is_harmless(
    end: str, loop_errors: list[dict[str, Any]]
) -> None:
    """``subscription.dispose()`` inside ``on_completed`` / ``on_error`` (a UI resetting
    itself) raises nothing, reports nothing, and leaves the agent usable."""
    first: Updates | Observable[Any] = (
        answer("ok") if end == "on_completed" else reactivex.throw(OSError("down"))
    )
    agent = Agent(Ticking(first, answer("next")))
    holder: dict[str, abc.DisposableBase] = {}
    ended = asyncio.Event()

    def stop(*_: Any) -> None:
        holder["subscription"].dispose()
        holder["subscription"].dispose()  # twice, too
        ended.set()

    holder["subscription"] = agent.run("hi").subscribe(lambda _: None, stop, stop)
    await asyncio.wait_for(ended.wait(), GUARD)
    await ticks()
    assert loop_errors == []
    assert (await asyncio.wait_for(agent.send("again"), GUARD)).text == "next"


@pytest.mark.asyncio
async def test_disposing_right_after_subscribing_asks_nothing_of_anyone() -> None:
    """Disposed before the turn's task first ran: no history load, no context, no LLM
    call, no signal at all."""
    asked: list[str] = []

    class History(InMemoryHistoryProvider):
        async def load(self) -> Sequence[ChatMessage]:
            asked.append("load")
            return ()

    class Context:
        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            asked.append("provide")
            return ()

    client = Scripted(answer("x"))
    agent = Agent(client, history=History(), context_providers=[Context()])
    watch = Watch()
    watch.subscribe(agent.run("hi")).dispose()
    await ticks(20)
    assert asked == []
    assert client.sent == []
    assert watch.items == []
    assert watch.errors == []
    assert watch.completions == 0


@pytest.mark.asyncio
async def test_disposing_a_synchronous_clients_turn_forwards_nothing_more() -> None:
    """A client that emits its whole answer inside ``subscribe`` (a replay): disposing on
    the first item forwards nothing more and never ends the observer."""
    agent = Agent(Scripted(answer("a long answer")))
    seen: list[AgentResponseResult] = []
    holder: dict[str, abc.DisposableBase] = {}

    def on_next(result: AgentResponseResult) -> None:
        seen.append(result)
        holder["subscription"].dispose()

    ends: list[str] = []
    holder["subscription"] = agent.run("hi").subscribe(
        on_next, lambda e: ends.append("error"), lambda: ends.append("completed")
    )
    await ticks(20)
    assert len(seen) == 1
    assert ends == []


@pytest.mark.asyncio
async def test_disposing_from_another_thread_while_a_tool_runs_cancels_it() -> None:
    """A UI thread presses stop while a tool awaits: the tool is cancelled on the loop's
    thread, nothing is forwarded after ``dispose()`` returned, and no later LLM call is
    made."""
    running = asyncio.Event()
    cancelled = threading.Event()

    @tool
    async def wait_forever(city: str) -> str:
        """Wait."""
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    client = Ticking(calls(("c1", "wait_forever", {"city": "Oslo"})), answer("x"))
    agent = Agent(client, tools=[wait_forever])
    watch = Watch()
    subscription = watch.subscribe(agent.run("hello"))
    await asyncio.wait_for(running.wait(), GUARD)
    count: list[int] = []

    def press_stop() -> None:
        subscription.dispose()
        count.append(len(watch.items))

    thread = threading.Thread(target=press_stop)
    thread.start()
    await asyncio.to_thread(thread.join, GUARD)
    await wait_until(cancelled.is_set)
    await ticks(20)
    assert len(watch.items) == count[0]
    assert len(client.sent) == 1
    assert watch.errors == []
    assert watch.completions == 0


# ---------------------------------------------------------------- max_steps


async def _turn_with_tool_steps(tool_steps: int, max_steps: int) -> tuple[Scripted, Any, Any]:
    script: list[Updates] = [
        calls((f"c{i}", "lookup", {"city": f"city{i}"})) for i in range(tool_steps)
    ]
    client = Scripted(*script, answer("done"))
    history = InMemoryHistoryProvider()
    agent = Agent(client, tools=[lookup], max_steps=max_steps, history=history)
    try:
        outcome: Any = await asyncio.wait_for(agent.send("go"), GUARD)
    except MaxStepsExceeded as error:
        outcome = error
    return client, outcome, history


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(tool_steps=st.integers(0, 5), max_steps=st.integers(1, 5))
def test_max_steps_is_the_number_of_llm_calls_a_turn_may_make(
    tool_steps: int, max_steps: int
) -> None:
    """A model that calls a tool in each of its first ``tool_steps`` LLM calls, then
    answers. The turn makes ``min(tool_steps + 1, max_steps)`` LLM calls; it fails
    with ``MaxStepsExceeded`` exactly when ``tool_steps >= max_steps``, after running
    ``max_steps`` tools, whose results are in ``.partial``; only a successful turn is
    saved."""
    RAN.clear()
    client, outcome, history = asyncio.run(_turn_with_tool_steps(tool_steps, max_steps))
    assert len(client.sent) == min(tool_steps + 1, max_steps)
    if tool_steps >= max_steps:
        assert isinstance(outcome, MaxStepsExceeded)
        assert f"after {max_steps} LLM calls" in str(outcome)
        assert len(RAN) == max_steps
        assert outcome.partial is not None
        assert len(outcome.partial.tool_messages) == max_steps
        assert history.messages == ()
    else:
        assert outcome.text == "done"
        assert len(RAN) == tool_steps
        roles = [m.role for m in history.messages]
        assert roles == [MessageRole.USER] + [MessageRole.ASSISTANT, MessageRole.TOOL] * (
            tool_steps
        ) + [MessageRole.ASSISTANT]


def test_max_steps_below_one_is_refused_when_the_agent_is_made() -> None:
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        Agent(Scripted(), max_steps=0)


# ---------------------------------------------------------------- providers that fail


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["history.load", "context.provide"])
async def test_a_failing_provider_ends_the_turn_before_any_llm_call(where: str) -> None:
    """The provider's own exception ends the turn (the same object), before the model is
    asked; nothing is emitted or saved."""
    oops = LookupError(f"{where} is down")

    class History(InMemoryHistoryProvider):
        async def load(self) -> Sequence[ChatMessage]:
            if where == "history.load":
                raise oops
            return await super().load()

    class Context:
        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            raise oops

    client = Scripted(answer("x"))
    history = History()
    providers = [Context()] if where == "context.provide" else []
    agent = Agent(client, history=history, context_providers=providers)
    watch = Watch()
    watch.subscribe(agent.run("hello"))
    await watch.end()
    assert watch.errors == [oops]
    assert client.sent == []
    assert watch.items == []
    assert history.messages == ()


@pytest.mark.asyncio
async def test_a_failing_save_ends_the_turn_after_every_result_and_each_tool_ran_once() -> None:
    oops = OSError("disk full")

    class History(InMemoryHistoryProvider):
        async def save(self, messages: Sequence[ChatMessage]) -> None:
            raise oops

    agent = Agent(
        Ticking(calls(("c1", "lookup", {"city": "Oslo"})), answer("sunny")),
        tools=[lookup],
        history=History(),
    )
    watch = Watch()
    watch.subscribe(agent.run("weather?"))
    await watch.end()
    assert watch.errors == [oops]
    assert len(watch.events(FinishEvent)) == 2
    assert RAN == ["Oslo"]


@pytest.mark.asyncio
@pytest.mark.parametrize("who", ["approver", "tool"])
async def test_a_cancelled_error_raised_by_user_code_is_a_result_not_a_cancellation(
    who: str,
) -> None:
    """An approver or a tool that *raises* ``CancelledError`` (an inner task of its own
    was cancelled) is not the turn being cancelled: the call fails with a result that
    says so, and the turn goes on to the model's answer."""

    async def approver(request: ToolApprovalRequestEvent) -> bool:
        raise asyncio.CancelledError("the dialog's task was cancelled")

    @tool(requires_approval=who == "approver")
    async def fetch(city: str) -> str:
        """Fetch."""
        if who == "tool":
            raise asyncio.CancelledError("an inner request was cancelled")
        return "fetched"

    agent = Agent(
        Ticking(calls(("c1", "fetch", {"city": "Oslo"})), answer("sorry")),
        tools=[fetch],
        approver=approver,
    )
    response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert response.text == "sorry"
    [message] = response.tool_messages
    assert message.is_error
    assert "CancelledError" in message.content


# ---------------------------------------------------------------- history across turns


class _HalfSaving(InMemoryHistoryProvider):
    """A save that writes its first message, then waits (on any thread) for ``release``
    before the rest: a reader in between would see a call without its result."""

    def __init__(self) -> None:
        super().__init__()
        self.half_saved = threading.Event()
        self.release = threading.Event()
        self.loaded: list[int] = []

    async def load(self) -> Sequence[ChatMessage]:
        loaded = await super().load()
        self.loaded.append(len(loaded))
        return loaded

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        new = list(messages)
        await super().save(new[:1])
        self.half_saved.set()
        while not self.release.is_set():
            await asyncio.sleep(0.005)
        await super().save(new[1:])


@pytest.mark.asyncio
async def test_a_turn_on_another_threads_loop_never_loads_a_half_saved_history() -> None:
    """A sync web app: one agent, a turn running in a worker thread's ``asyncio.run``
    is half-way through its save when a turn starts on the main loop. The second
    turn's load waits for the save (it reads all four messages, never one) and its
    request holds the whole first turn."""
    history = _HalfSaving()
    client = Scripted(calls(("c1", "lookup", {"city": "Oslo"})), answer("sunny"), answer("ok"))
    agent = Agent(client, tools=[lookup], history=history)
    worker = threading.Thread(target=lambda: asyncio.run(agent.send("weather?")))
    worker.start()
    try:
        assert await asyncio.to_thread(history.half_saved.wait, GUARD)
        second = asyncio.ensure_future(agent.send("thanks"))
        await ticks(20)
        assert history.loaded == [0]  # the second turn waits
        assert not second.done()
        history.release.set()
        response = await asyncio.wait_for(second, GUARD)
    finally:
        history.release.set()
        await asyncio.to_thread(worker.join, GUARD)
    assert response.text == "ok"
    assert history.loaded == [0, 4]
    roles = [m.role.value for m in client.sent[-1]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


@pytest.mark.asyncio
async def test_a_save_waits_for_a_load_under_way_and_neither_tears() -> None:
    """``_HistoryAccess``: "a save [waits] for the loads and saves running". Turn B is
    loading (slowly) when turn A finishes: A's save starts only after B's load has
    returned, so B read the history from before A, whole; each turn is saved in one
    piece."""
    order: list[str] = []
    loaded_once = asyncio.Event()
    loading = asyncio.Event()
    finish_load = asyncio.Event()

    class History(InMemoryHistoryProvider):
        async def load(self) -> Sequence[ChatMessage]:
            loaded = await super().load()
            if loaded_once.is_set() and not loading.is_set():  # B's load
                loading.set()
                order.append("B loads")
                await finish_load.wait()
                order.append("B loaded")
            loaded_once.set()
            return loaded

        async def save(self, messages: Sequence[ChatMessage]) -> None:
            order.append(f"save {messages[0].content}")
            await super().save(messages)

    upstream: Subject[Any] = Subject()
    client = Scripted(upstream, answer("b"))
    history = History()
    agent = Agent(client, history=history)
    history._messages.append(ChatMessage.user("earlier"))
    a = asyncio.ensure_future(agent.send("A"))
    await wait_until(lambda: upstream.observers != [])  # A loaded, is asking the model
    b = asyncio.ensure_future(agent.send("B"))
    await asyncio.wait_for(loading.wait(), GUARD)
    for update in answer("a"):
        upstream.on_next(update)
    upstream.on_completed()
    await ticks(20)
    assert order == ["B loads"]  # A's save waits for B's load
    finish_load.set()
    await asyncio.wait_for(asyncio.gather(a, b), GUARD)
    assert order[:2] == ["B loads", "B loaded"]
    assert sorted(order[2:]) == ["save A", "save B"]  # (no order between the two saves)
    assert [m.content for m in client.sent[1]] == ["earlier", "B"]
    saved = [m.content for m in history.messages]
    assert saved in (["earlier", "A", "a", "B", "b"], ["earlier", "B", "b", "A", "a"])


@pytest.mark.asyncio
async def test_loads_of_overlapping_turns_do_not_wait_for_each_other() -> None:
    """Two turns loading at once: a load waits for saves only, so a slow load does not
    hold another turn's load back (both are under way together)."""
    under_way = 0
    most = 0
    release = asyncio.Event()

    class History(InMemoryHistoryProvider):
        async def load(self) -> Sequence[ChatMessage]:
            nonlocal under_way, most
            under_way += 1
            most = max(most, under_way)
            await release.wait()
            under_way -= 1
            return ()

    agent = Agent(Scripted(answer("1"), answer("2")), history=History())
    turns = [asyncio.ensure_future(agent.send(str(i))) for i in (1, 2)]
    await wait_until(lambda: most == 2)
    release.set()
    responses = await asyncio.wait_for(asyncio.gather(*turns), GUARD)
    assert sorted(r.text for r in responses) == ["1", "2"]


# ---------------------------------------------------------------- approvals across turns


@pytest.mark.asyncio
@pytest.mark.parametrize("end", ["on_completed", "on_error"])
async def test_with_an_observable_approver_the_next_turn_may_start_in_the_last_ones_end(
    end: str,
) -> None:
    """``terminate``: "the turn has ended: the next may start in it". A UI chaining turns
    from the terminal callback of the last one is not refused, and its approval is
    answered by the same Subject."""
    answers: Subject[ToolApprovalResponse] = Subject()

    @tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    first: Updates | Observable[Any] = (
        answer("first") if end == "on_completed" else reactivex.throw(OSError("down"))
    )
    client = Ticking(first, calls(("c2", "delete", {"path": "a"})), answer("second"))
    agent = Agent(client, tools=[delete], approver=answers)
    outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def next_turn(*_: Any) -> None:
        def on_next(result: AgentResponseResult) -> None:
            for event in result.events:
                if isinstance(event, ToolApprovalRequestEvent):
                    answers.on_next(ToolApprovalResponse(event.call_id, True))

        agent.run("go on").subscribe(
            on_next, outcome.set_exception, lambda: outcome.set_result("completed")
        )

    agent.run("start").subscribe(lambda _: None, next_turn, next_turn)
    assert await asyncio.wait_for(outcome, GUARD) == "completed"
    assert len(client.sent) == 3


@pytest.mark.asyncio
async def test_an_approver_assigned_mid_turn_answers_from_the_next_llm_call() -> None:
    """ "Assigning ``tools`` or ``approver`` takes effect from the next LLM call on": the
    first call's request goes to the old approver, the second's to the new one."""
    asked: list[tuple[str, str]] = []

    def old(request: ToolApprovalRequestEvent) -> bool:
        asked.append(("old", request.call_id))
        agent.approver = new
        return True

    async def new(request: ToolApprovalRequestEvent) -> bool:
        asked.append(("new", request.call_id))
        return False

    @tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    client = Ticking(
        calls(("c1", "delete", {"path": "a"})),
        calls(("c2", "delete", {"path": "b"})),
        answer("done"),
    )
    agent = Agent(client, tools=[delete], approver=old)
    response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert asked == [("old", "c1"), ("new", "c2")]
    assert [m.is_error for m in response.tool_messages] == [False, True]


@pytest.mark.asyncio
async def test_an_answer_from_another_thread_approves_its_call_over_http() -> None:
    """A UI thread answers the Subject (not the loop's thread): the answer is taken on
    the loop, the tool runs once, the model gets its result."""
    answers: Subject[ToolApprovalResponse] = Subject()
    ran: list[str] = []

    @tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    def on_next(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                reply = ToolApprovalResponse(event.call_id, True)
                threading.Thread(target=answers.on_next, args=(reply,)).start()

    async with LLMServer() as server:
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("delete", {"path": "a"}, id="call_1")]),
            Reply(text="deleted"),
        )
        async with OpenAIChatClient(server.url, model="m") as client:
            agent = Agent(client, tools=[delete], approver=answers)
            watch = Watch()
            agent.run("clean").subscribe(on_next, watch.on_error, watch.on_completed)
            await watch.end()
        second = server.requests[1].body["messages"]
    assert watch.completions == 1
    assert ran == ["a"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "deleted a"}


# ---------------------------------------------------------------- the order of results


@pytest.mark.asyncio
async def test_each_llm_call_shows_started_to_finish_then_its_tools_results_over_http() -> None:
    """``run``: "each LLM call shows as a ``ResponseStartedEvent`` ... ``FinishEvent``,
    followed by its tools' results" (tools not eager): every ``ToolCalledContent``
    comes after its call's ``FinishEvent`` and before the next call starts."""
    async with LLMServer() as server:
        server.enqueue(
            Reply(
                tool_calls=[
                    ToolCallSpec("lookup", {"city": "Oslo"}),
                    ToolCallSpec("lookup", {"city": "Rome"}),
                ],
                chunk_size=3,
            ),
            Reply(text="Both sunny."),
        )
        async with OpenAIChatClient(server.url, model="m") as client:
            agent = Agent(client, tools=[lookup])
            watch = Watch()
            watch.subscribe(agent.run("weather?"))
            await watch.end()
    marks: list[str] = []
    for result in watch.items:
        for event in result.events:
            if isinstance(event, ResponseStartedEvent):
                marks.append("start")
            elif isinstance(event, FinishEvent):
                marks.append("finish")
        marks += ["result" for c in result.contents if isinstance(c, ToolCalledContent)]
    assert marks == ["start", "finish", "result", "result", "start", "finish"]
    assert sorted(RAN) == ["Oslo", "Rome"]


@pytest.mark.asyncio
async def test_the_docstrings_synchronous_stand_in_client_runs_a_whole_turn() -> None:
    """The Agent docstring's ``Scripted`` client (``stream(messages, tools=None)``
    without ``**params``, emitting on subscribe): tools run, history is saved in
    order, ``send`` returns the answer."""

    class DocScripted:
        def __init__(self, *turns: Updates) -> None:
            self.turns = list(turns)

        def stream(self, messages: Any, tools: Any = None) -> Observable[Any]:
            return reactivex.from_iterable(self.turns.pop(0))

    history = InMemoryHistoryProvider()
    agent = Agent(
        DocScripted(calls(("c1", "lookup", {"city": "Oslo"})), answer("Sunny in Oslo.")),
        tools=[lookup],
        history=history,
    )
    response = await asyncio.wait_for(agent.send("weather?"), GUARD)
    assert response.text == "Sunny in Oslo."
    assert [m.role.value for m in history.messages] == ["user", "assistant", "tool", "assistant"]


# ---------------------------------------------------------------- overlapping turns, any timing


class _Echo(Scripted):
    """Answers each call with "re: <the last user message>", one update per tick."""

    def stream(
        self, messages: Sequence[ChatMessage], tools: Any = None, **params: Any
    ) -> Observable[Any]:
        self.sent.append(tuple(messages))
        last = [m for m in messages if m.role is MessageRole.USER][-1].content
        return Ticking(answer(f"re: {last}")).stream(messages)


class _Yielding(InMemoryHistoryProvider):
    """Loads and saves that suspend a given number of ticks, and a save that writes one
    message per tick: a reader between its writes would see a torn turn."""

    def __init__(self, load_ticks: list[int], save_ticks: list[int]) -> None:
        super().__init__()
        self.load_ticks = load_ticks
        self.save_ticks = save_ticks
        self.seen: list[list[str]] = []

    async def load(self) -> Sequence[ChatMessage]:
        await ticks(self.load_ticks.pop(0) if self.load_ticks else 0)
        loaded = await super().load()
        self.seen.append([m.content for m in loaded])
        return loaded

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        await ticks(self.save_ticks.pop(0) if self.save_ticks else 0)
        for message in messages:
            await super().save([message])
            await asyncio.sleep(0)


def _whole_turns(contents: list[str]) -> bool:
    pairs = list(zip(contents[::2], contents[1::2], strict=False))
    return len(contents) % 2 == 0 and all(a == f"re: {q}" for q, a in pairs)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    starts=st.lists(st.integers(0, 12), min_size=2, max_size=4),
    load_ticks=st.lists(st.integers(0, 6), min_size=4, max_size=4),
    save_ticks=st.lists(st.integers(0, 6), min_size=4, max_size=4),
)
def test_overlapping_turns_of_one_agent_never_see_or_leave_a_torn_history(
    starts: list[int], load_ticks: list[int], save_ticks: list[int]
) -> None:
    """Turns of one agent started at any ticks, with loads and saves taking any number
    of ticks: every load sees whole turns only, every turn is saved whole (its two
    messages next to each other), and each request holds whole turns before its input."""

    async def main() -> tuple[_Yielding, _Echo]:
        history = _Yielding(list(load_ticks), list(save_ticks))
        client = _Echo()
        agent = Agent(client, history=history)

        async def turn(i: int, at: int) -> None:
            await ticks(at)
            await agent.send(f"q{i}")

        await asyncio.wait_for(asyncio.gather(*(turn(i, at) for i, at in enumerate(starts))), GUARD)
        return history, client

    history, client = asyncio.run(main())
    assert all(_whole_turns(seen) for seen in history.seen), history.seen
    saved = [m.content for m in history.messages]
    assert _whole_turns(saved), saved
    assert sorted(saved[::2]) == sorted(f"q{i}" for i in range(len(starts)))
    for sent in client.sent:
        assert _whole_turns([m.content for m in sent[:-1]])


# ---------------------------------------------------------------- disposal at any item


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(k=st.integers(1, 14))
def test_disposing_after_any_item_of_a_ticking_client_leaves_nothing_behind(k: int) -> None:
    """A client emitting one update per tick (as a network source does); the observer
    disposes inside ``on_next`` of the k-th item of a two-tool, two-call turn. After
    that: no signal at all, no tool starts and no approver is asked, and the history
    holds nothing of the turn or the whole turn. (Tools neither eager nor needing
    approval: there a tool whose task began a tick before the disposal still starts
    its function after it, a bug reported with this file.)"""

    async def main() -> None:
        events: list[str] = []
        disposed = False

        @tool
        async def note(text: str) -> str:
            """Take a note."""
            events.append(f"ran {text}" + (" late" if disposed else ""))
            await asyncio.sleep(0)
            return "noted"

        history = InMemoryHistoryProvider()
        client = Ticking(
            calls(("c1", "note", {"text": "a"}), ("c2", "note", {"text": "b"})),
            answer("done"),
        )
        agent = Agent(client, tools=[note], history=history)
        seen: list[AgentResponseResult] = []
        late: list[str] = []
        holder: dict[str, abc.DisposableBase] = {}

        def on_next(result: AgentResponseResult) -> None:
            nonlocal disposed
            if disposed:
                late.append("on_next")
            seen.append(result)
            if len(seen) == k:
                disposed = True
                holder["subscription"].dispose()

        holder["subscription"] = agent.run("go").subscribe(
            on_next, lambda e: late.append(f"on_error {e!r}"), lambda: late.append("completed")
        )
        await ticks(60)
        assert late == [] or (not disposed and late == ["completed"])
        assert not any(e.endswith("late") for e in events), events
        saved = [m.role.value for m in history.messages]
        assert saved in ([], ["user", "assistant", "tool", "tool", "assistant"]), saved

    asyncio.run(main())
