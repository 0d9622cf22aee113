"""Edges of the agent layer: Agent, @tool schemas, methods and validation, sync tools
on their threads, approvals, history, execute_tools.

HTTP tests use the real local LLMServer on 127.0.0.1 and the real clients.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import os
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, Literal, Optional, Union

import pytest
import pytest_asyncio
from reactivex.subject import Subject

from rafrx import operators as ops
from rafrx.agent import Agent
from rafrx.errors import InvalidToolArguments, MaxStepsExceeded
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import ChatMessage, MessageRole, MessageSource
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import Tool, ToolApprovalResponse, tool

GUARD = 5.0  # seconds: only a guard against hangs


@pytest_asyncio.fixture
async def server(llm_server: LLMServer) -> AsyncIterator[LLMServer]:
    yield llm_server
    await llm_server.wait_connections_closed(timeout=GUARD)


def wire_tool_call_ids(message: dict[str, Any]) -> list[str]:
    return [c["id"] for c in message.get("tool_calls") or ()]


def assert_every_call_answered(messages: list[dict[str, Any]]) -> None:
    """OpenAI chat rule: each assistant tool call is followed by exactly its tool results."""
    for i, m in enumerate(messages):
        ids = wire_tool_call_ids(m)
        if not ids:
            continue
        answers = [x["tool_call_id"] for x in messages[i + 1 : i + 1 + len(ids)]]
        assert sorted(answers) == sorted(ids), (ids, answers)


# ---------------------------------------------------------------- @tool schemas


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


def test_schema_of_optional_union_literal_enum_and_list_of_dicts() -> None:
    @tool
    def report(
        city: str,
        unit: Unit = Unit.C,
        mode: Literal["fast", "exact"] = "fast",
        limit: Optional[int] = None,  # noqa: UP045 - the old spelling under test
        key: Union[int, str] = 0,  # noqa: UP007
        rows: list[dict[str, Any]] | None = None,
        *,
        verbose: bool,
    ) -> str:
        """Report the weather.

        Args:
            city: The city.
            unit: The unit.
            verbose: Say more.
        """
        return "ok"

    props = report.parameters["properties"]
    assert report.parameters["required"] == ["city", "verbose"]
    assert report.parameters["additionalProperties"] is False
    assert props["unit"] == {
        "type": "string",
        "enum": ["celsius", "fahrenheit"],
        "description": "The unit.",
        "default": "celsius",
    }
    assert props["mode"] == {"type": "string", "enum": ["fast", "exact"], "default": "fast"}
    assert props["limit"] == {"type": ["integer", "null"], "default": None}
    assert props["key"] == {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 0}
    assert props["rows"]["anyOf"][0] == {
        "type": "array",
        "items": {"type": "object", "additionalProperties": {}},
    }
    assert props["verbose"] == {"type": "boolean", "description": "Say more."}
    values = report.validate({"city": "Oslo", "unit": "fahrenheit", "key": "k", "verbose": False})
    assert values == {"city": "Oslo", "unit": Unit.F, "key": "k", "verbose": False}


def test_keyword_only_parameters_are_passed_by_keyword() -> None:
    seen: list[tuple[int, int, int]] = []

    @tool
    def f(a: int, /, b: int = 2, *, c: int) -> int:
        seen.append((a, b, c))
        return a + b + c

    assert f.parameters["required"] == ["a", "c"]
    assert asyncio.run(f.invoke({"c": 3.0, "a": 1})) == 6
    assert seen == [(1, 2, 3)]


def test_validation_of_a_list_of_dicts_names_the_element() -> None:
    @tool
    def load(rows: list[dict[str, int]]) -> int:
        return len(rows)

    with pytest.raises(InvalidToolArguments) as info:
        load.validate({"rows": [{"a": 1}, {"b": "two"}]})
    assert "rows[1]" in str(info.value)
    assert "expected integer" in str(info.value)


def test_a_tool_decorated_in_a_class_body_does_not_expose_self() -> None:
    class Box:
        factor = 3

        @tool
        def scale(self, n: int) -> int:
            """Scale a number."""
            return n * self.factor

    box = Box()
    assert "self" not in box.scale.parameters["properties"]
    assert asyncio.run(box.scale.invoke({"n": 2})) == 6


def test_a_tool_given_a_str_for_a_date_gets_a_named_error() -> None:

    @tool
    def book(day: datetime.date) -> str:
        return day.isoformat()

    assert book.parameters["properties"]["day"] == {"type": "string", "format": "date"}
    with pytest.raises(InvalidToolArguments, match="argument 'day'"):
        book.validate({"day": "next tuesday"})


# ---------------------------------------------------------------- concurrency of sync tools


@pytest.mark.asyncio
async def test_sync_tools_up_to_the_concurrency_limit_all_run_at_once(server: LLMServer) -> None:
    """``concurrency=n`` lets n tools run at once, sync tools as well as async ones."""
    n = min(32, (os.cpu_count() or 1) + 4) + 1  # one more than asyncio's default thread pool
    barrier = threading.Barrier(n, timeout=1.0)

    @tool
    def meet() -> str:
        """Wait until every call has started."""
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return "alone"
        return "met"

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("meet", {}, id=f"c{i}") for i in range(n)]),
        Reply(text="done"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[meet], concurrency=n)
        response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert [m.content for m in response.tool_messages] == ["met"] * n


@pytest.mark.asyncio
async def test_a_sync_tool_timeout_counts_its_own_run_not_the_wait_for_a_thread(
    server: LLMServer,
) -> None:
    """A quick sync tool with a timeout must not time out because earlier, timed-out
    sync tools still hold every worker thread."""
    release = threading.Event()
    workers = min(32, (os.cpu_count() or 1) + 4)

    @tool(timeout=0.1)
    def stuck() -> str:
        """Blocks."""
        release.wait(3)
        return "late"

    @tool(timeout=0.3)
    def quick() -> str:
        """Answers at once."""
        return "pong"

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("stuck", {}, id=f"s{i}") for i in range(workers)]),
        Reply(tool_calls=[ToolCallSpec("quick", {}, id="q")]),
        Reply(text="done"),
    )
    try:
        async with OpenAIChatClient(server.url, "sk-test") as client:
            agent = Agent(client, tools=[stuck, quick], concurrency=workers)
            response = await asyncio.wait_for(agent.send("go"), GUARD)
    finally:
        release.set()
    contents = [m.content for m in response.tool_messages]
    assert contents[:-1] == ["Error: tool 'stuck' timed out after 0.1 s"] * workers
    assert contents[-1] == "pong"


# ---------------------------------------------------------------- agent attributes


@pytest.mark.asyncio
async def test_a_plain_function_assigned_to_agent_tools_works_like_one_given_to_init(
    server: LLMServer,
) -> None:
    def shout(text: str) -> str:
        """Shout the text."""
        return text.upper()

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("shout", {"text": "hi"}, id="c1")]),
        Reply(text="HI"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client)
        agent.tools = (shout,)  # type: ignore[assignment]  # as Agent(tools=[shout]) takes it
        response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert [m.content for m in response.tool_messages] == ["HI"]
    assert server.requests[0].tool_names == ("shout",)


# ---------------------------------------------------------------- approvals and timeouts


@pytest.mark.asyncio
async def test_a_tool_timeout_does_not_count_the_wait_for_approval(server: LLMServer) -> None:
    @tool(requires_approval=True, timeout=0.1)
    async def deploy(env: str) -> str:
        """Deploy."""
        return f"deployed {env}"

    async def slow_yes(event: ToolApprovalRequestEvent) -> bool:
        await asyncio.sleep(0.3)  # a human takes longer than the tool's timeout
        return True

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("deploy", {"env": "prod"}, id="c1")]),
        Reply(text="Deployed."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[deploy], approver=slow_yes)
        response = await asyncio.wait_for(agent.send("deploy"), GUARD)
    assert [m.content for m in response.tool_messages] == ["deployed prod"]


@pytest.mark.asyncio
async def test_an_approval_response_with_a_reason_goes_back_and_the_tool_never_runs(
    server: LLMServer,
) -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def wipe(disk: str) -> str:
        """Wipe a disk."""
        ran.append(disk)
        return "wiped"

    def deny(event: ToolApprovalRequestEvent) -> ToolApprovalResponse:
        return ToolApprovalResponse(event.call_id, False, reason="not in production")

    history = InMemoryHistoryProvider()
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("wipe", {"disk": "sda"}, id="c1")]),
        Reply(text="Refused."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[wipe], approver=deny, history=history)
        response = await asyncio.wait_for(agent.send("wipe sda"), GUARD)
    assert ran == []
    (message,) = response.tool_messages
    assert message.content == "Error: the user denied the call to tool 'wipe': not in production"
    sent = server.requests[1].messages
    assert sent[-1]["content"] == message.content
    assert_every_call_answered(sent)
    assert [m.role for m in history.messages] == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]


@pytest.mark.asyncio
async def test_a_subject_approver_is_asked_again_in_every_turn_with_reused_call_ids(
    server: LLMServer,
) -> None:
    """Some OpenAI-compatible servers number calls call_0, call_1 ... in every
    response: turn one's answer for call_0 must not approve turn two's call_0."""
    ran: list[str] = []

    @tool(requires_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(str(amount))
        return "paid"

    answers: Subject[ToolApprovalResponse] = Subject()
    requests: list[ToolApprovalRequestEvent] = []

    def on_result(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                requests.append(event)
                approve = event.arguments["amount"] < 100
                answers.on_next(ToolApprovalResponse(event.call_id, approve))

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("pay", {"amount": 5}, id="call_0")]),
        Reply(text="Paid 5."),
        Reply(tool_calls=[ToolCallSpec("pay", {"amount": 500}, id="call_0")]),
        Reply(text="Refused 500."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[pay], approver=answers)
        for prompt in ("pay 5", "pay 500"):
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            agent.run(prompt).subscribe(
                on_result,
                lambda e, d=done: d.set_exception(e),
                lambda d=done: d.set_result(None),
            )
            await asyncio.wait_for(done, GUARD)
    assert [e.arguments for e in requests] == [{"amount": 5}, {"amount": 500}]
    assert ran == ["5"]
    assert server.requests[3].messages[-1]["content"].startswith("Error: the user denied")


@pytest.mark.asyncio
async def test_an_approver_raising_gives_an_error_result_and_the_turn_is_saved(
    server: LLMServer,
) -> None:
    @tool(requires_approval=True)
    def send_mail(to: str) -> str:
        """Send mail."""
        return "sent"

    def broken(event: ToolApprovalRequestEvent) -> bool:
        raise LookupError("policy table missing")

    history = InMemoryHistoryProvider()
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("send_mail", {"to": "a@b"}, id="c1")]),
        Reply(text="Could not send."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[send_mail], approver=broken, history=history)
        response = await asyncio.wait_for(agent.send("mail"), GUARD)
    (message,) = response.tool_messages
    assert message.content.startswith("Error: ")
    assert "LookupError" in message.content
    assert "policy table missing" in message.content
    assert len(history.messages) == 4


# ---------------------------------------------------------------- max_steps and cut calls


@pytest.mark.asyncio
async def test_max_steps_one_runs_the_first_calls_tools_then_fails_and_saves_nothing(
    server: LLMServer,
) -> None:
    ran: list[int] = []

    @tool
    def step(n: int) -> str:
        """A step."""
        ran.append(n)
        return f"step {n}"

    server.enqueue(Reply(tool_calls=[ToolCallSpec("step", {"n": 1}, id="c1")]))
    history = InMemoryHistoryProvider()
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[step], history=history, max_steps=1)
        with pytest.raises(MaxStepsExceeded, match="max_steps=1") as info:
            await asyncio.wait_for(agent.send("go"), GUARD)
        assert len(server.requests) == 1
        # the agent stays usable, and the failed turn left nothing in the history
        server.enqueue(Reply(text="fresh"))
        response = await asyncio.wait_for(agent.send("again"), GUARD)
    partial = info.value.partial
    assert partial is not None
    assert [m.content for m in partial.tool_messages] == ["step 1"]
    assert response.text == "fresh"
    assert [m.content for m in history.messages] == ["again", "fresh"]
    assert [m["role"] for m in server.requests[1].messages] == ["user"]


@pytest.mark.asyncio
async def test_a_complete_call_next_to_one_cut_by_length_runs_and_only_it_goes_back(
    server: LLMServer,
) -> None:
    ran: list[int] = []

    @tool
    def store(n: int) -> str:
        """Store a number."""
        ran.append(n)
        return "stored"

    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("store", {"n": 1}, id="ok"),
                ToolCallSpec("store", '{"n": 2', id="cut"),
            ],
            finish="length",
        ),
        Reply(text="Stored one."),
        Reply(text="Bye."),
    )
    history = InMemoryHistoryProvider()
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[store], history=history)
        response = await asyncio.wait_for(agent.send("store 1 and 2"), GUARD)
        await asyncio.wait_for(agent.send("bye"), GUARD)
    assert ran == [1]
    assert [m.tool_call_id for m in response.tool_messages] == ["ok"]
    for request in server.requests[1:]:
        assert_every_call_answered(request.messages)
        assert "cut" not in str(request.messages)
    saved_calls = [c.id for m in history.messages for c in m.tool_calls or ()]
    assert saved_calls == ["ok"]


# ---------------------------------------------------------------- history over several turns


class CountingHistory(InMemoryHistoryProvider):
    def __init__(self) -> None:
        super().__init__()
        self.saves: list[list[ChatMessage]] = []
        self.loads = 0

    async def load(self) -> tuple[ChatMessage, ...]:
        self.loads += 1
        return tuple(await super().load())

    async def save(self, messages: Any) -> None:
        self.saves.append(list(messages))
        await super().save(messages)


@pytest.mark.asyncio
async def test_a_reused_agent_saves_each_turn_once_and_never_a_call_without_its_result(
    server: LLMServer,
) -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        if key == "boom":
            raise KeyError(key)
        return f"value of {key}"

    class Facts:
        def __init__(self) -> None:
            self.calls = 0

        async def provide(self, messages: Any) -> list[ChatMessage]:
            self.calls += 1
            return [ChatMessage.system(f"fact #{self.calls}")]

    facts = Facts()
    history = CountingHistory()
    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("lookup", {"key": "a"}, id="t1a"),
                ToolCallSpec("lookup", {"key": "boom"}, id="t1b"),
            ]
        ),
        Reply(tool_calls=[ToolCallSpec("lookup", {"key": "c"}, id="t1c")]),
        Reply(text="one"),
        Reply(text="two"),
        Reply(tool_calls=[ToolCallSpec("nope", {}, id="t3a")]),
        Reply(text="three"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(
            client,
            tools=[lookup],
            instructions="Be brief.",
            history=history,
            context_providers=[facts],
        )
        texts = [(await asyncio.wait_for(agent.send(p), GUARD)).text for p in ("1", "2", "3")]
    assert texts == ["one", "two", "three"]
    assert (history.loads, len(history.saves), facts.calls) == (3, 3, 3)
    assert len(server.requests) == 6
    for request in server.requests:
        assert_every_call_answered(request.messages)
        assert request.messages[0] == {"role": "system", "content": "Be brief."}
    # the context of turn 2 is in both of its requests' heads, never saved
    assert "fact #2" in str(server.requests[3].messages)
    assert "fact #" not in str([m.content for m in history.messages])
    assert all(m.source is not MessageSource.CONTEXT_PROVIDER for m in history.messages)
    roles = [m.role.value for m in history.messages]
    assert roles == [
        "user", "assistant", "tool", "tool", "assistant", "tool", "assistant",
        "user", "assistant",
        "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    # the last request holds the whole saved conversation exactly once
    last = server.requests[-1].messages
    assert sum(1 for m in last if m["role"] == "user") == 3
    errors = [m.content for m in history.messages if m.is_error]
    assert len(errors) == 2
    assert "KeyError" in errors[0]
    assert "unknown tool 'nope'" in errors[1]


@pytest.mark.asyncio
async def test_an_agent_running_a_turn_while_another_is_pending_keeps_histories_whole(
    server: LLMServer,
) -> None:
    """Two turns of one agent started at once: each is saved whole, none interleaved."""

    @tool
    async def wait(ms: int) -> str:
        """Wait."""
        await asyncio.sleep(ms / 1000)
        return f"waited {ms}"

    def script(request: Any) -> Reply:
        last = request.messages[-1]
        if last["role"] == "user":
            ms = 50 if last["content"] == "slow" else 1
            return Reply(tool_calls=[ToolCallSpec("wait", {"ms": ms})])
        return Reply(text=f"done {last['content']}")

    server.script(script)
    history = InMemoryHistoryProvider()
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[wait], history=history)
        await asyncio.wait_for(asyncio.gather(agent.send("slow"), agent.send("fast")), GUARD)
    contents = [m.content for m in history.messages]
    # each turn's four messages are contiguous
    fast = contents.index("fast")
    slow = contents.index("slow")
    assert contents[fast : fast + 4][2:] == ["waited 1", "done waited 1"]
    assert contents[slow : slow + 4][2:] == ["waited 50", "done waited 50"]


# ---------------------------------------------------------------- results


@pytest.mark.asyncio
async def test_a_huge_result_is_clipped_to_max_result_chars_on_the_wire(
    server: LLMServer,
) -> None:
    @tool
    def dump() -> str:
        """Dump everything."""
        return "é" * 50_000

    server.enqueue(Reply(tool_calls=[ToolCallSpec("dump", {}, id="c1")]), Reply(text="ok"))
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[dump], max_result_chars=100)
        response = await asyncio.wait_for(agent.send("dump"), GUARD)
    sent = server.requests[1].messages[-1]["content"]
    assert sent == response.tool_messages[0].content
    assert sent.startswith("é" * 100)
    assert len(sent) < 200
    assert "49900" in sent


@pytest.mark.asyncio
async def test_a_bytes_result_is_an_error_result_naming_the_type(server: LLMServer) -> None:
    @tool
    def raw() -> Any:
        """Raw bytes."""
        return b"\xff\x00"

    server.enqueue(Reply(tool_calls=[ToolCallSpec("raw", {}, id="c1")]), Reply(text="ok"))
    async with OpenAIChatClient(server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[raw]).send("go"), GUARD)
    (message,) = response.tool_messages
    assert message.is_error
    assert "bytes" in message.content


# ---------------------------------------------------------------- execute_tools directly


@pytest.mark.asyncio
async def test_execute_tools_concurrency_one_runs_calls_one_after_another() -> None:
    import reactivex

    from rafrx import updates as u

    active = 0
    peak = 0

    @tool
    async def work(n: int) -> int:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)
        active -= 1
        return n

    updates: list[u.AgentResponseUpdate] = []
    for i in range(4):
        updates += [
            u.ToolCallStart(f"c{i}", "work"),
            u.ToolCallArgs(f"c{i}", f'{{"n": {i}}}'),
            u.ToolCallEnd(f"c{i}"),
        ]
    updates.append(u.Finish(FinishReason.TOOL_CALLS))
    started = time.monotonic()
    response = await asyncio.wait_for(
        reactivex.from_iterable(updates).pipe(
            ops.convert(), ops.execute_tools([work], concurrency=1), ops.aggregate()
        ),
        GUARD,
    )
    assert peak == 1
    assert time.monotonic() - started >= 0.08
    assert [m.content for m in response.tool_messages] == ["0", "1", "2", "3"]


def test_a_hand_built_tool_with_a_non_object_schema_still_needs_an_object() -> None:
    t = Tool("echo", "Echo.", {"type": "object", "properties": {}}, lambda: "x")
    with pytest.raises(InvalidToolArguments, match="JSON object"):
        t.validate([1, 2])


# ---------------------------------------------------------------- more agent hunts


def test_a_sync_tool_exiting_through_argparse_is_an_error_result_not_a_crash() -> None:
    """argparse (and click, sys.exit) signal a bad command line with SystemExit: a tool
    wrapping a CLI must give an error result, as every other exception does."""

    @tool
    def cli(argv: list[str]) -> str:
        """Run the command line tool."""
        import argparse

        parser = argparse.ArgumentParser(prog="cli", add_help=False)
        parser.add_argument("--n", type=int, required=True)
        parser.error = lambda message: sys_exit(2)  # type: ignore[method-assign]
        return str(parser.parse_args(argv).n)

    def sys_exit(code: int) -> Any:
        raise SystemExit(code)

    async def turn() -> list[str]:
        async with LLMServer() as server, OpenAIChatClient(server.url, "sk-test") as client:
            server.enqueue(
                Reply(tool_calls=[ToolCallSpec("cli", {"argv": ["--n", "zz"]}, id="c1")]),
                Reply(text="Bad arguments."),
            )
            response = await asyncio.wait_for(Agent(client, tools=[cli]).send("run"), GUARD)
            return [m.content for m in response.tool_messages]

    outcome: list[Any] = []

    def in_a_thread() -> None:  # keeps an escaping SystemExit away from pytest
        try:
            outcome.append(asyncio.run(turn()))
        except BaseException as exc:  # what escapes is under test
            outcome.append(exc)

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join(GUARD + 1)
    assert outcome == [["Error: tool 'cli' raised SystemExit: 2"]]


@pytest.mark.asyncio
async def test_cancelling_a_turn_mid_approval_then_the_next_turn_is_clean(
    server: LLMServer,
) -> None:
    ran: list[str] = []
    asked = asyncio.Event()

    @tool(requires_approval=True)
    def drop(table: str) -> str:
        """Drop a table."""
        ran.append(table)
        return "dropped"

    async def never(event: ToolApprovalRequestEvent) -> bool:
        asked.set()
        await asyncio.sleep(60)
        return True  # pragma: no cover

    history = CountingHistory()
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("drop", {"table": "users"}, id="c1")]),
        Reply(text="Hello again."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[drop], approver=never, history=history)
        task = asyncio.create_task(agent.send("drop users"))
        await asyncio.wait_for(asked.wait(), GUARD)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        response = await asyncio.wait_for(agent.send("hi"), GUARD)
    assert ran == []
    assert response.text == "Hello again."
    assert history.saves == [[ChatMessage.user("hi", source=MessageSource.EXTERNAL),
                              ChatMessage.assistant("Hello again.")]]  # fmt: skip
    assert [m["role"] for m in server.requests[1].messages] == ["user"]


@pytest.mark.asyncio
async def test_eager_tools_with_approval_run_once_each_and_history_is_whole(
    server: LLMServer,
) -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    async def fetch(url: str) -> str:
        """Fetch a URL."""
        ran.append(url)
        return f"body of {url}"

    async def only_https(event: ToolApprovalRequestEvent) -> bool:
        return str(event.arguments["url"]).startswith("https://")

    history = InMemoryHistoryProvider()
    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("fetch", {"url": "https://a"}, id="c1"),
                ToolCallSpec("fetch", {"url": "http://b"}, id="c2"),
            ],
            chunk_size=3,
            delay=0.005,
        ),
        Reply(text="Fetched a."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[fetch], approver=only_https, history=history, eager_tools=True)
        response = await asyncio.wait_for(agent.send("fetch"), GUARD)
    assert ran == ["https://a"]
    assert [m.tool_call_id for m in response.tool_messages] == ["c1", "c2"]
    assert response.tool_messages[1].is_error
    assert_every_call_answered(server.requests[1].messages)
    assert len(history.messages) == 5
