"""Agent turns at their edges: approvers, history and context providers, tool results.

Most tests drive an :class:`~rafrx.agent.Agent` over an in-process scripted client
(updates emitted on the loop, as ``tests/test_agent.py``'s ``FakeClient``); the
wire tests use the real local :class:`~rafrx.testing.LLMServer` and the three
clients, and check every recorded request with ``tests/test_agent_wire``'s
API-rule checker. Tests marked ``# BUG:`` fail because of a rafrx bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import pytest
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import updates as u
from rafrx.agent import Agent
from rafrx.content import ToolCalledContent
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import ChatMessage, MessageRole, MessageSource, ToolCall
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import ToolApprovalResponse, tool
from tests.test_agent import FakeClient, text
from tests.test_agent_wire import CLIENTS, wire_problems

GUARD = 2.0  # seconds: a guard against hangs only, never reached by a passing test

EXTERNAL = MessageSource.EXTERNAL
HISTORY = MessageSource.CHAT_HISTORY
CONTEXT = MessageSource.CONTEXT_PROVIDER


# ---------------------------------------------------------------- a scripted client


class Scripted(FakeClient):
    """``test_agent``'s scripted client; ``sent`` holds each request's messages."""

    @property
    def sent(self) -> list[tuple[ChatMessage, ...]]:
        return [messages for messages, _ in self.requests]


def calls(*specs: tuple[str, str, Any]) -> list[u.AgentResponseUpdate]:
    """One LLM call making the given (id, name, arguments) calls."""
    out: list[u.AgentResponseUpdate] = [u.ResponseMetadata("resp", "fake-1")]
    for call_id, name, arguments in specs:
        out += [
            u.ToolCallStart(call_id, name),
            u.ToolCallArgs(call_id, json.dumps(arguments)),
            u.ToolCallEnd(call_id),
        ]
    out.append(u.Finish(FinishReason.TOOL_CALLS))
    return out


def user(content: str) -> ChatMessage:
    return ChatMessage.user(content, source=EXTERNAL)


def unanswered_calls(messages: Sequence[ChatMessage]) -> list[str]:
    """Ids of tool calls in ``messages`` that no tool message answers."""
    asked = [c.id for m in messages for c in m.tool_calls or ()]
    answered = {m.tool_call_id for m in messages if m.role is MessageRole.TOOL}
    return [i for i in asked if i not in answered]


async def send(agent: Agent, prompt: Any) -> Any:
    return await asyncio.wait_for(agent.send(prompt), GUARD)


RAN: list[str] = []


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file."""
    RAN.append(path)
    return f"removed {path}"


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    RAN.append(city)
    return f"{city}: sun"


class Abort(BaseException):
    """A BaseException that is neither KeyboardInterrupt nor SystemExit (like
    pytest's outcome exceptions, gevent's GreenletExit, trio's Cancelled)."""


# ---------------------------------------------------------------- approvers


@pytest.mark.asyncio
@pytest.mark.parametrize("answer", [None, False, 0, "", []], ids=repr)
async def test_a_falsy_approver_answer_denies_and_the_model_sees_the_denial(answer: Any) -> None:
    client = Scripted(calls(("c1", "remove", {"path": "/x"})), text("ok"))
    agent = Agent(client, tools=[remove], approver=lambda event: answer)
    response = await send(agent, "rm /x")
    assert RAN == []
    (message,) = response.tool_messages
    assert message.is_error
    assert "denied" in message.content
    assert client.sent[1][-1] == message  # the loop went on with the denial
    assert response.text == "ok"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "answer",
    [
        lambda event: "no",
        lambda event: "false",
        lambda event: ToolApprovalResponse(event.call_id, "false"),  # type: ignore[arg-type]
    ],
    ids=["str-no", "str-false", "response-approved-str-false"],
)
async def test_an_approval_answer_that_is_not_a_bool_never_runs_the_tool(answer: Any) -> None:
    """An approval gate must fail closed: only ``True`` (or a response whose
    ``approved`` is ``True``) may run a tool that requires approval. A UI or a
    JSON round trip giving ``"no"`` / ``"false"`` must not be read as a yes."""
    client = Scripted(calls(("c1", "remove", {"path": "/etc/passwd"})), text("ok"))
    agent = Agent(client, tools=[remove], approver=answer)
    response = await send(agent, "rm /etc/passwd")
    assert RAN == []
    assert response.tool_messages[0].is_error


@pytest.mark.asyncio
async def test_an_approval_response_for_another_call_does_not_approve_this_one() -> None:
    client = Scripted(calls(("c1", "remove", {"path": "/etc/passwd"})), text("ok"))

    def approver(event: ToolApprovalRequestEvent) -> ToolApprovalResponse:
        return ToolApprovalResponse("some-other-call", True)

    response = await send(Agent(client, tools=[remove], approver=approver), "rm")
    assert RAN == []
    assert response.tool_messages[0].is_error


@pytest.mark.asyncio
async def test_an_observable_approver_answering_another_id_then_ending_denies() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()

    def on_request(result: AgentResponseResult) -> None:
        if any(isinstance(e, ToolApprovalRequestEvent) for e in result.events):
            answers.on_next(ToolApprovalResponse("not-c1", True))
            answers.on_completed()

    client = Scripted(calls(("c1", "remove", {"path": "/x"})), text("ok"))
    agent = Agent(client, tools=[remove], approver=answers)
    results = await asyncio.wait_for(
        agent.run("rm").pipe(rx.do_action(on_request), rx.to_list()), GUARD
    )
    called = [c for r in results for c in r.contents if isinstance(c, ToolCalledContent)]
    assert RAN == []
    assert [(c.call_id, c.result) for c in called] == [("c1", None)]
    assert "approver completed" in (called[0].error or "")


@pytest.mark.asyncio
async def test_plain_and_approval_tools_in_one_step_each_get_one_result_in_call_order() -> None:
    gate: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    asked: list[str] = []

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append(event.call_id)
        return await gate

    client = Scripted(
        calls(
            ("c1", "remove", {"path": "/tmp/a"}),
            ("c2", "lookup", {"city": "Oslo"}),
            ("c3", "remove", {"path": "/etc/b"}),
        ),
        text("done"),
    )
    agent = Agent(client, tools=[remove, lookup], approver=approver)
    seen: list[str] = []

    def on_next(result: AgentResponseResult) -> None:
        for c in result.contents:
            if isinstance(c, ToolCalledContent):
                seen.append(c.call_id)
                if c.call_id == "c2":  # the plain tool did not wait for the approvals
                    gate.set_result(True)

    response = await asyncio.wait_for(agent.run("go").pipe(rx.do_action(on_next), rx.last()), GUARD)
    assert asked == ["c1", "c3"]  # only the tool needing approval is put to the approver
    assert seen[0] == "c2"
    assert sorted(seen) == ["c1", "c2", "c3"]
    sent = client.sent[1]
    assert [m.tool_call_id for m in sent if m.role is MessageRole.TOOL] == ["c1", "c2", "c3"]
    assert sorted(RAN) == ["/etc/b", "/tmp/a", "Oslo"]
    assert isinstance(response, AgentResponseResult)


@pytest.mark.asyncio
async def test_a_sync_approver_raising_stop_iteration_gives_an_error_result() -> None:
    def approver(event: ToolApprovalRequestEvent) -> bool:
        return next(p for p in ["/tmp"] if event.arguments["path"].startswith(p))

    client = Scripted(calls(("c1", "remove", {"path": "/etc/x"})), text("ok"))
    response = await send(Agent(client, tools=[remove], approver=approver), "rm")
    assert RAN == []
    assert response.tool_messages[0].is_error


@pytest.mark.asyncio
async def test_an_approver_raising_a_base_exception_never_leaves_a_call_unanswered() -> None:
    async def approver(event: ToolApprovalRequestEvent) -> bool:
        raise Abort("policy engine aborted")

    history = InMemoryHistoryProvider()
    client = Scripted(calls(("c1", "remove", {"path": "/x"})), text("ok"))
    agent = Agent(client, tools=[remove], approver=approver, history=history)
    response = await send(agent, "rm")
    assert RAN == []
    (message,) = response.tool_messages
    assert message.is_error
    assert "Abort: policy engine aborted" in message.content
    assert response.text == "ok"
    for request in client.sent[1:]:
        assert unanswered_calls(request) == []
    assert unanswered_calls(history.messages) == []


# ---------------------------------------------------------------- tools raising odd things


@pytest.mark.asyncio
async def test_a_sync_tool_raising_stop_iteration_gives_an_error_result() -> None:
    @tool
    def find(name: str) -> str:
        """Find a user by name."""
        return next(n for n in ["ann", "bob"] if n == name)

    client = Scripted(calls(("c1", "find", {"name": "zed"})), text("no such user"))
    response = await send(Agent(client, tools=[find]), "find zed")
    (message,) = response.tool_messages
    assert message.is_error
    assert "StopIteration" in message.content
    assert response.text == "no such user"


@pytest.mark.asyncio
async def test_an_async_tool_raising_stop_iteration_gives_an_error_result() -> None:
    @tool
    async def find(name: str) -> str:
        """Find a user by name."""
        return next(n for n in ["ann", "bob"] if n == name)

    client = Scripted(calls(("c1", "find", {"name": "zed"})), text("no such user"))
    response = await send(Agent(client, tools=[find]), "find zed")
    assert response.tool_messages[0].is_error
    assert "StopIteration" in response.tool_messages[0].content


@pytest.mark.asyncio
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_tool_raising_a_base_exception_never_leaves_a_call_unanswered(sync: bool) -> None:
    if sync:

        def fn(x: int) -> int:
            raise Abort("aborted")

    else:

        async def fn(x: int) -> int:  # type: ignore[misc]
            raise Abort("aborted")

    boom = tool(fn, name="boom", description="Boom.")
    history = InMemoryHistoryProvider()
    client = Scripted(calls(("c1", "boom", {"x": 1})), text("ok"))
    agent = Agent(client, tools=[boom], history=history)
    response = await send(agent, "go")
    (message,) = response.tool_messages
    assert message.content == "Error: tool 'boom' raised Abort: aborted"
    for request in client.sent[1:]:
        assert unanswered_calls(request) == []
    assert unanswered_calls(history.messages) == []


def test_keyboard_interrupt_raised_by_a_tool_propagates_and_does_not_hang() -> None:
    """A KeyboardInterrupt is the user asking to stop: a serious library lets it
    through (as asyncio does) rather than turn it into a tool result the model reads,
    and it must not hang the process either."""
    script = textwrap.dedent(
        """
        import asyncio, reactivex
        from rafrx import updates as u, FinishReason
        from rafrx.agent import Agent
        from rafrx.tools import tool

        class C:
            def __init__(self): self.n = 0
            def stream(self, messages, tools=None):
                self.n += 1
                if self.n == 1:
                    return reactivex.from_iterable([u.ToolCallStart("c1", "stop"),
                        u.ToolCallArgs("c1", "{}"), u.ToolCallEnd("c1"),
                        u.Finish(FinishReason.TOOL_CALLS)])
                print("SECOND REQUEST", messages[-1].content, flush=True)
                return reactivex.from_iterable([u.TextDelta("x"), u.Finish(FinishReason.STOP)])

        @tool
        async def stop() -> str:
            '''Stop.'''
            raise KeyboardInterrupt

        asyncio.run(Agent(C(), tools=[stop]).send("go"))
        print("COMPLETED")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=20, cwd="."
    )
    assert "KeyboardInterrupt" in proc.stderr
    assert "COMPLETED" not in proc.stdout
    assert "SECOND REQUEST" not in proc.stdout


@pytest.mark.asyncio
async def test_odd_tool_return_values_are_written_or_become_error_results() -> None:
    async def inner() -> str:
        return "never"

    @tool
    def sync_returns_coro() -> Any:
        """A sync tool returning an awaitable: awaited (as rafrx._call documents)."""
        return inner()

    @tool
    def huge_int() -> int:
        """An int too long for str() (Python's 4300-digit limit): sent as its digits."""
        return 10**5000

    @tool
    def gen() -> Any:
        """A generator tool."""
        yield 1

    @tool
    def big() -> str:
        """A huge result."""
        return "x" * 5000

    @tool
    def raw() -> bytes:
        """Bytes."""
        return b"\x00\xff"

    client = Scripted(
        calls(
            ("c2", "sync_returns_coro", {}),
            ("c3", "huge_int", {}),
            ("c4", "gen", {}),
            ("c5", "big", {}),
            ("c6", "raw", {}),
        ),
        text("ok"),
    )
    agent = Agent(client, tools=[sync_returns_coro, huge_int, gen, big, raw], max_result_chars=100)
    response = await send(agent, "go")
    by_id = {m.tool_call_id: m for m in response.tool_messages}
    assert list(by_id) == ["c2", "c3", "c4", "c5", "c6"]
    assert not by_id["c2"].is_error
    assert by_id["c2"].content == "never"
    assert not by_id["c3"].is_error  # its digits, as a string (json.dumps cannot write it)
    assert by_id["c3"].content.startswith('"1' + "0" * 98)
    assert by_id["c4"].is_error
    assert "generator" in by_id["c4"].content
    assert not by_id["c5"].is_error
    assert by_id["c5"].content.startswith("x" * 100 + "…")
    assert len(by_id["c5"].content) < 200
    assert by_id["c6"].is_error
    assert "bytes" in by_id["c6"].content
    assert response.text == "ok"
    assert client.sent[1][-5:] == response.tool_messages


@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_an_async_tool_returning_a_coroutine_by_mistake_is_an_error_result() -> None:
    """(Python's own "never awaited" warning then points the author at the mistake.)"""

    async def inner() -> str:
        return "never"

    @tool
    async def coro_by_mistake() -> Any:
        """Returns a coroutine object instead of awaiting it."""
        return inner()

    client = Scripted(calls(("c1", "coro_by_mistake", {})), text("ok"))
    response = await send(Agent(client, tools=[coro_by_mistake]), "go")
    (message,) = response.tool_messages
    assert message.is_error
    assert "coroutine" in message.content
    gc.collect()


# ---------------------------------------------------------------- inputs


@pytest.mark.asyncio
async def test_mixed_sources_in_the_input_are_sent_in_order_and_only_new_ones_saved() -> None:
    history = InMemoryHistoryProvider(
        [ChatMessage.user("old"), ChatMessage.assistant("old answer")]
    )
    client = Scripted(text("fine"))
    agent = Agent(client, history=history, instructions="Be brief.")
    given = [
        ChatMessage.user("echoed history", source=HISTORY),
        ChatMessage.system("injected", source=CONTEXT),
        ChatMessage.system("Answer in French."),  # no source: EXTERNAL
        ChatMessage.user("new question", source=EXTERNAL),
        ChatMessage.assistant("prefill", source=MessageSource.TOOL_RESULT),
    ]
    response = await send(agent, given)
    sent = client.sent[0]
    assert [m.content for m in sent] == [
        "Be brief.",
        "old",
        "old answer",
        "echoed history",
        "injected",
        "Answer in French.",
        "new question",
        "prefill",
    ]
    assert [m.content for m in history.messages] == [
        "old",
        "old answer",
        "Answer in French.",
        "new question",
        "prefill",
        "fine",
    ]
    assert response.text == "fine"


@pytest.mark.asyncio
async def test_a_system_message_in_the_input_next_to_instructions_is_valid_on_every_wire() -> None:
    async with LLMServer() as server:
        for fmt, cls in CLIENTS.items():
            server.enqueue(Reply(text="ok"))
            async with cls(server.url, "sk-test") as client:
                agent = Agent(client, instructions="Be brief.")
                await send(agent, [ChatMessage.system("Use French."), user("Hi")])
            request = server.requests[-1]
            assert wire_problems(request) == [], fmt
            if fmt == "anthropic":
                assert request.body["system"] == "Be brief.\n\nUse French."
                assert request.messages == [
                    {"role": "user", "content": [{"type": "text", "text": "Hi"}]}
                ]


@pytest.mark.asyncio
async def test_an_empty_input_continues_from_history_and_saves_only_the_reply() -> None:
    history = InMemoryHistoryProvider([user("Tell me a story.")])
    client = Scripted(text("Once upon a time."))
    response = await send(Agent(client, history=history), [])
    assert [m.content for m in client.sent[0]] == ["Tell me a story."]
    assert [m.content for m in history.messages] == ["Tell me a story.", "Once upon a time."]
    assert response.text == "Once upon a time."


def long_history(turns: int) -> list[ChatMessage]:
    """``turns`` exchanges of four messages each: a question, a tool call, its result
    and an answer."""
    old: list[ChatMessage] = []
    for i in range(turns):
        old += [
            ChatMessage.user(f"q{i}"),
            ChatMessage.assistant_with_tools("", [ToolCall(f"c{i}", "lookup", {"city": f"x{i}"})]),
            ChatMessage.tool(f"r{i}", f"c{i}"),
            ChatMessage.assistant(f"a{i}"),
        ]
    return old


@pytest.mark.asyncio
async def test_a_very_long_history_is_sent_whole_on_every_wire() -> None:
    old = long_history(1500)
    async with LLMServer() as server:
        for fmt, cls in CLIENTS.items():
            server.enqueue(Reply(text="ok"))
            history = InMemoryHistoryProvider(old)
            async with cls(server.url, "sk-test") as client:
                await send(Agent(client, tools=[lookup], history=history), "more")
            assert wire_problems(server.requests[-1]) == [], fmt
            assert len(history.messages) == len(old) + 2


async def rafrx_calls_of_a_turn(fmt: str, turns: int) -> int:
    """How many Python calls in rafrx's own code (the server's included) one agent turn
    over a history of ``turns`` exchanges makes: a count, which load does not change."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and "/rafrx/" in frame.f_code.co_filename:
            calls += 1

    history = InMemoryHistoryProvider(long_history(turns))
    async with LLMServer() as server:
        server.enqueue(Reply(text="ok"))
        async with CLIENTS[fmt](server.url, "sk-test") as client:
            agent = Agent(client, tools=[lookup], history=history)
            sys.setprofile(count)
            try:
                await send(agent, "more")
            finally:
                sys.setprofile(None)
    return calls


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", list(CLIENTS))
async def test_a_turns_work_grows_linearly_with_its_history(fmt: str) -> None:
    """Doubling the history doubles the work of a turn, no more (a quadratic step, such
    as a repair that looks through the history for every message, would quadruple it)."""
    small, large = await rafrx_calls_of_a_turn(fmt, 300), await rafrx_calls_of_a_turn(fmt, 600)
    assert 1.5 < large / small < 2.3, (fmt, small, large)


# ---------------------------------------------------------------- context and history providers


class Returns:
    def __init__(self, value: Any) -> None:
        self.value = value

    async def provide(self, messages: Sequence[ChatMessage]) -> Any:
        return self.value


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "value",
    ["Today is Monday.", [{"role": "system", "content": "x"}], None],
    ids=["str", "dict", "None"],
)
async def test_a_context_provider_returning_non_messages_is_a_clear_type_error(value: Any) -> None:
    client = Scripted(text("hi"))
    history = InMemoryHistoryProvider()
    agent = Agent(client, context_providers=[Returns(value)], history=history)
    with pytest.raises(TypeError, match="ChatMessage"):
        await send(agent, "q")
    assert client.sent == []
    assert history.messages == ()


@pytest.mark.asyncio
async def test_a_history_provider_loading_non_messages_is_a_clear_type_error() -> None:
    class Loads:
        async def load(self) -> Any:
            return [{"role": "user", "content": "hi"}]

        async def save(self, messages: Sequence[ChatMessage]) -> None:
            pass

    client = Scripted(text("hi"))
    with pytest.raises(TypeError, match="ChatMessage"):
        await send(Agent(client, history=Loads()), "q")
    assert client.sent == []


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["load", "save", "context"])
async def test_a_provider_raising_a_base_exception_ends_the_turn(
    where: str, loop_errors: list[dict[str, Any]]
) -> None:
    class Provider:
        async def load(self) -> Sequence[ChatMessage]:
            if where == "load":
                raise Abort("db gone")
            return ()

        async def save(self, messages: Sequence[ChatMessage]) -> None:
            if where == "save":
                raise Abort("db gone")

        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            if where == "context":
                raise Abort("db gone")
            return ()

    provider = Provider()
    agent = Agent(Scripted(text("hi")), history=provider, context_providers=[provider])
    outcome: list[str] = []
    done = asyncio.Event()
    agent.run("q").subscribe(
        on_error=lambda e: (outcome.append("error"), done.set()),
        on_completed=lambda: (outcome.append("completed"), done.set()),
    )
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), 1.0)
    await asyncio.sleep(0)
    gc.collect()  # "Task exception was never retrieved" goes to loop_errors, not to logging
    assert outcome != [], "the turn neither completed nor failed: whoever waits on it hangs"


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["load", "save"])
async def test_a_history_provider_failing_ends_the_turn_and_the_next_turn_works(where: str) -> None:
    class Flaky(InMemoryHistoryProvider):
        broken = True

        async def load(self) -> Sequence[ChatMessage]:
            if where == "load" and self.broken:
                raise ConnectionError("db down")
            return await super().load()

        async def save(self, messages: Sequence[ChatMessage]) -> None:
            if where == "save" and self.broken:
                raise ConnectionError("db down")
            await super().save(messages)

    history = Flaky()
    client = Scripted(calls(("c1", "lookup", {"city": "Oslo"})), text("sun"), text("bye"))
    agent = Agent(client, tools=[lookup], history=history)
    with pytest.raises(ConnectionError):
        await send(agent, "weather?")
    assert history.messages == ()
    assert len(client.sent) == (0 if where == "load" else 2)
    history.broken = False
    await send(agent, "thanks")
    assert next(m.content for m in history.messages) == "thanks"
    assert unanswered_calls(history.messages) == []


@pytest.mark.asyncio
async def test_an_async_context_provider_is_awaited_and_its_messages_are_never_saved() -> None:
    class Facts:
        def __init__(self) -> None:
            self.seen: list[tuple[str, ...]] = []

        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            await asyncio.sleep(0.01)
            self.seen.append(tuple(m.content for m in messages))
            return [ChatMessage.system("Fact: it rains.", source=EXTERNAL), user("pretend user")]

    facts = Facts()
    history = InMemoryHistoryProvider()
    client = Scripted(text("one"), text("two"))
    agent = Agent(client, context_providers=[facts], history=history)
    await send(agent, "a")
    await send(agent, "b")
    assert facts.seen == [("a",), ("a", "one", "b")]
    assert [m.source for m in client.sent[1][:2]] == [CONTEXT, CONTEXT]
    assert [m.content for m in history.messages] == ["a", "one", "b", "two"]


# ---------------------------------------------------------------- disposal then a new turn


@pytest.mark.asyncio
async def test_a_turn_disposed_mid_tool_saves_nothing_and_the_next_turn_is_clean() -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    @tool
    async def slow(n: int) -> int:
        """Slow."""
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return n

    history = InMemoryHistoryProvider([user("earlier"), ChatMessage.assistant("earlier reply")])
    client = Scripted(calls(("c1", "slow", {"n": 1})), text("fresh"))
    agent = Agent(client, tools=[slow], history=history)
    subscription = agent.run("first").subscribe()
    await asyncio.wait_for(started.wait(), GUARD)
    subscription.dispose()
    await asyncio.sleep(0.05)
    assert cancelled == [True]
    assert [m.content for m in history.messages] == ["earlier", "earlier reply"]
    response = await send(agent, "second")
    assert [m.content for m in client.sent[-1]] == ["earlier", "earlier reply", "second"]
    assert [m.content for m in history.messages] == ["earlier", "earlier reply", "second", "fresh"]
    assert response.text == "fresh"


@pytest.mark.asyncio
async def test_two_concurrent_turns_with_tools_each_save_whole_and_in_order() -> None:
    gate = asyncio.Event()

    @tool
    async def wait(tag: str) -> str:
        """Wait for the gate."""
        await gate.wait()
        return f"done {tag}"

    history = InMemoryHistoryProvider()
    client = Scripted(
        calls(("a1", "wait", {"tag": "A"})),
        calls(("b1", "wait", {"tag": "B"})),
        text("answer"),
        text("answer"),
    )
    agent = Agent(client, tools=[wait], history=history)
    first = asyncio.ensure_future(send(agent, "A?"))
    second = asyncio.ensure_future(send(agent, "B?"))
    await asyncio.sleep(0.05)
    gate.set()
    r1, r2 = await asyncio.gather(first, second)
    saved = list(history.messages)
    assert len(saved) == 8
    assert unanswered_calls(saved) == []
    halves = [saved[:4], saved[4:]]
    for half in halves:
        assert [m.role.value for m in half] == ["user", "assistant", "tool", "assistant"]
        assert half[2].tool_call_id == half[1].tool_calls[0].id  # type: ignore[index]
    assert {h[0].content for h in halves} == {"A?", "B?"}
    assert r1.tool_messages[0].content == "done A"
    assert r2.tool_messages[0].content == "done B"


# ---------------------------------------------------------------- cross-provider history


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("first", "second"),
    [(a, b) for a in sorted(CLIENTS) for b in sorted(CLIENTS) if a != b],
)
async def test_a_transcript_from_one_provider_is_valid_for_the_next(
    first: str, second: str
) -> None:
    @tool
    def broken(city: str) -> str:
        """Always fails."""
        raise ValueError("nope")

    history = InMemoryHistoryProvider()
    async with LLMServer() as server:
        server.enqueue(
            Reply(
                reasoning="Two lookups.",
                text="Let me check.",
                tool_calls=[
                    ToolCallSpec("lookup", {"city": "Oslo"}),
                    ToolCallSpec("broken", {"city": "Rome"}),
                ],
            ),
            Reply(reasoning="Summing up.", text="Sunny in Oslo."),
            Reply(reasoning="Again.", tool_calls=[ToolCallSpec("lookup", {"city": "Paris"})]),
            Reply(text="Sunny in Paris."),
        )
        async with CLIENTS[first](server.url, "sk-test") as one:
            agent = Agent(one, tools=[lookup, broken], history=history, instructions="Brief.")
            await send(agent, "Oslo and Rome?")
        async with CLIENTS[second](server.url, "sk-test") as two:
            agent = Agent(two, tools=[lookup, broken], history=history, instructions="Brief.")
            response = await send(agent, "Paris?")
        assert response.text == "Sunny in Paris."
        later = server.requests[2:]
        assert len(later) == 2
        for request in later:
            assert request.wire_format == second
            assert wire_problems(request) == []
            body = json.dumps(request.body)
            assert "sk-test" not in body
            if second != "anthropic":
                assert '"thinking"' not in body
                assert "signature" not in body
            if second != "openai-responses":
                assert '"type": "reasoning"' not in body
        # the whole first turn went across: both calls and both results
        body = json.dumps(later[0].body)
        assert "Error: tool 'broken' raised ValueError: nope" in body
        assert "Oslo: sun" in body
        assert unanswered_calls(history.messages) == []


@pytest.mark.asyncio
async def test_a_call_id_reused_across_steps_gives_unique_tool_use_ids_on_anthropic() -> None:
    history = InMemoryHistoryProvider()
    async with LLMServer() as server:
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"}, id="functions.lookup:0")]),
            Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Rome"}, id="functions.lookup:0")]),
            Reply(text="Sun in both."),
            Reply(text="ok"),
        )
        async with CLIENTS["openai-chat"](server.url, "sk-test") as kimi:
            await send(Agent(kimi, tools=[lookup], history=history), "Oslo, then Rome?")
        async with CLIENTS["anthropic"](server.url, "sk-test") as claude:
            await send(Agent(claude, tools=[lookup], history=history), "And now?")
        request = server.requests[-1]
        assert request.wire_format == "anthropic"
        uses = [
            b["id"]
            for m in request.messages
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_use"
        ]
        assert len(uses) == 2
        assert wire_problems(request) == []  # unique ids, each answered right after its use
