"""Adversarial tests of the agent layer, over real HTTP against the local LLMServer.

Each scenario is what a demanding user does to break an agent turn: provider
errors after tools ran, every kind of bad tool call at once, tools that time
out, block, mutate their arguments or fail oddly, approvals denied, answered
twice or after disposal, disposal at awkward points, concurrent turns sharing
a client. Every test runs under ``llm_server`` (no asyncio task may be left)
and checks that the client closed its connections.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
import pytest_asyncio
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx.agent import Agent
from rafrx.content import TextContent, ToolCalledContent, ToolCallingContent
from rafrx.errors import (
    HTTPStatusError,
    IdleTimeout,
    MaxStepsExceeded,
    RafrxError,
    StreamInterrupted,
    ToolExecutionError,
)
from rafrx.events import ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import ChatMessage, MessageRole, MessageSource
from rafrx.response import AgentResponseResult, FinishReason, Usage
from rafrx.sources.clients import (
    AnthropicClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    Timeouts,
)
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, ToolCallSpec, render
from rafrx.tools import ToolApprovalResponse, tool
from tests.reliability._support import CLIENTS

GUARD = 5.0  # seconds: a guard against hangs only, never reached by a passing test


@pytest_asyncio.fixture
async def server(llm_server: LLMServer) -> AsyncIterator[LLMServer]:
    """The shared local server; after the test every connection must be closed."""
    yield llm_server
    await llm_server.wait_connections_closed(timeout=GUARD)


@pytest.fixture(params=sorted(CLIENTS))
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---------------------------------------------------------------- helpers


def sent_calls(request: RecordedRequest) -> list[tuple[str, str]]:
    """(call id, tool name) of every tool call sent back to the model, in any format."""
    out: list[tuple[str, str]] = []
    for item in request.messages:
        if item.get("type") == "function_call":  # Responses
            out.append((item["call_id"], item["name"]))
        for call in item.get("tool_calls") or ():  # OpenAI chat
            out.append((call["id"], call["function"]["name"]))
        content = item.get("content")
        if isinstance(content, list):  # Anthropic
            out.extend((b["id"], b["name"]) for b in content if b.get("type") == "tool_use")
    return out


def sent_results(request: RecordedRequest) -> list[tuple[str, str]]:
    """(call id, text) of every tool result sent back to the model, in any format."""
    out: list[tuple[str, str]] = []
    for item in request.messages:
        if item.get("type") == "function_call_output":  # Responses
            out.append((item["call_id"], item["output"]))
        elif item.get("role") == "tool":  # OpenAI chat
            out.append((item["tool_call_id"], item["content"]))
        content = item.get("content")
        if isinstance(content, list):  # Anthropic
            out.extend(
                (b["tool_use_id"], b["content"]) for b in content if b.get("type") == "tool_result"
            )
    return out


def calledcontents(results: Sequence[AgentResponseResult]) -> list[ToolCalledContent]:
    return [c for r in results for c in r.contents if isinstance(c, ToolCalledContent)]


def approval_requests(results: Sequence[AgentResponseResult]) -> list[ToolApprovalRequestEvent]:
    return [e for r in results for e in r.events if isinstance(e, ToolApprovalRequestEvent)]


async def collect(agent: Agent, prompt: str) -> list[AgentResponseResult]:
    async with asyncio.timeout(GUARD):
        return list(await agent.run(prompt).pipe(rx.to_list()))


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


# ---------------------------------------------------------------- provider errors and history


@pytest.mark.asyncio
async def test_an_http_error_on_step_two_keeps_step_ones_transcript_and_saves_nothing(
    server: LLMServer, fmt: str
) -> None:
    history = InMemoryHistoryProvider([ChatMessage.user("earlier"), ChatMessage.assistant("ok")])
    server.enqueue(
        Reply(text="Adding.", tool_calls=[ToolCallSpec("add", {"a": 2, "b": 3}, id="c1")]),
        Fault.status(400, message="context too long"),
    )
    async with CLIENTS[fmt](server.url, "sk-test") as client:
        agent = Agent(client, tools=[add], history=history)
        with pytest.raises(HTTPStatusError) as caught:
            await asyncio.wait_for(agent.send("2 + 3?"), GUARD)
    error = caught.value
    assert error.status == 400
    partial = error.partial
    assert partial is not None
    assert partial.interrupted
    assert partial.text == "Adding."
    assert [(c.id, c.arguments) for c in partial.tool_calls] == [("c1", {"a": 2, "b": 3})]
    assert [(m.tool_call_id, m.content) for m in partial.tool_messages] == [("c1", "5")]
    assert [m.role for m in partial.turn_transcript] == [MessageRole.ASSISTANT, MessageRole.TOOL]
    # the failed turn left the history as it was, so a retry starts from the same place
    assert [m.content for m in history.messages] == ["earlier", "ok"]
    assert sent_results(server.requests[1]) == [("c1", "5")]


@pytest.mark.asyncio
async def test_retrying_a_failed_turn_sends_exactly_the_first_attempts_request(
    server: LLMServer,
) -> None:
    history = InMemoryHistoryProvider()
    call = ToolCallSpec("add", {"a": 1, "b": 1}, id="c1")
    server.enqueue(
        Reply(text="Hi."),
        Reply(tool_calls=[call]),
        Fault.drop_after(40),
        Reply(tool_calls=[call]),
        Reply(text="2"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[add], history=history, instructions="Be brief.")
        await agent.send("hello")
        with pytest.raises(StreamInterrupted):
            await asyncio.wait_for(agent.send("1 + 1?"), GUARD)
        assert len(history.messages) == 2  # the first turn only
        response = await asyncio.wait_for(agent.send("1 + 1?"), GUARD)
    assert response.text == "2"
    first_attempt, retry = server.requests[1], server.requests[3]
    assert retry.json == first_attempt.json
    assert server.requests[4].messages[:3] == first_attempt.messages[:3]
    assert [(m.role, m.content) for m in history.messages] == [
        (MessageRole.USER, "hello"),
        (MessageRole.ASSISTANT, "Hi."),
        (MessageRole.USER, "1 + 1?"),
        (MessageRole.ASSISTANT, ""),
        (MessageRole.TOOL, "2"),
        (MessageRole.ASSISTANT, "2"),
    ]


@pytest.mark.asyncio
async def test_the_next_turn_sends_every_call_followed_by_its_result(
    server: LLMServer, fmt: str
) -> None:
    """History and context around tool pairs: system first, context never saved,
    each saved call still followed by its result, in call order."""

    class Facts:
        def __init__(self) -> None:
            self.seen: list[tuple[ChatMessage, ...]] = []

        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            self.seen.append(tuple(messages))
            return [ChatMessage.system("Fact: today is Monday.")]

    facts = Facts()
    history = InMemoryHistoryProvider()
    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("add", {"a": 1, "b": 2}, id="c1"),
                ToolCallSpec("add", {"a": 3, "b": 4}, id="c2"),
            ]
        ),
        Reply(text="3 and 7."),
        Reply(text="You are welcome."),
    )
    async with CLIENTS[fmt](server.url, "sk-test") as client:
        agent = Agent(
            client,
            tools=[add],
            instructions="Be brief.",
            history=history,
            context_providers=[facts],
        )
        await asyncio.wait_for(agent.send("Sums?"), GUARD)
        await asyncio.wait_for(agent.send("Thanks"), GUARD)
    assert all(m.source is not MessageSource.CONTEXT_PROVIDER for m in history.messages)
    assert [m.role for m in history.messages] == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    third = server.requests[2]
    assert sent_calls(third) == [("c1", "add"), ("c2", "add")]
    assert sent_results(third) == [("c1", "3"), ("c2", "7")]
    # the context provider was asked with the loaded history (marked) and the new input
    assert [m.source for m in facts.seen[1]][-1] is MessageSource.EXTERNAL
    assert all(m.source is MessageSource.CHAT_HISTORY for m in facts.seen[1][:-1])
    if fmt == "anthropic":
        assert third.body["system"] == "Be brief.\n\nFact: today is Monday."
    elif fmt == "openai-chat":
        assert [m["content"] for m in third.messages[:2]] == [
            "Be brief.",
            "Fact: today is Monday.",
        ]


@pytest.mark.asyncio
async def test_max_steps_partial_holds_every_step_and_nothing_is_saved(server: LLMServer) -> None:
    history = InMemoryHistoryProvider()
    server.script(
        lambda request: Reply(text="More.", tool_calls=[ToolCallSpec("add", {"a": 1, "b": 1})])
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[add], history=history, max_steps=3)
        with pytest.raises(MaxStepsExceeded) as caught:
            await asyncio.wait_for(agent.send("loop"), GUARD)
    assert len(server.requests) == 3
    partial = caught.value.partial
    assert partial is not None
    assert partial.interrupted
    assert partial.text == "More." * 3
    assert partial.finish_reason is FinishReason.TOOL_CALLS
    assert len(partial.tool_calls) == len(partial.tool_messages) == 3
    assert [m.content for m in partial.tool_messages] == ["2", "2", "2"]
    assert history.messages == ()
    assert "max_steps=3" in str(caught.value)


@pytest.mark.asyncio
async def test_a_stall_on_step_two_after_tools_ran_is_an_idle_timeout_not_a_hang(
    server: LLMServer, fmt: str
) -> None:
    answer = Reply(text="The sum is 3.", model="m", usage=Usage(1, 1, 2))
    sent = {"stream_options": {"include_usage": True}}  # as the chat client asks
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2}, id="c1")]),
        Fault.stall(GUARD, after_bytes=render(answer, fmt, sent).index(b"The sum"), body=answer),
    )
    async with CLIENTS[fmt](server.url, "sk-test", timeouts=Timeouts(idle=0.1)) as client:
        with pytest.raises(IdleTimeout) as caught:
            await asyncio.wait_for(Agent(client, tools=[add]).send("go"), GUARD)
    partial = caught.value.partial
    assert partial is not None
    assert partial.interrupted
    assert [m.content for m in partial.tool_messages] == ["3"]
    assert "The sum" not in partial.text


@pytest.mark.asyncio
async def test_a_context_provider_failure_sends_no_request_and_saves_nothing(
    server: LLMServer,
) -> None:
    class Broken:
        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            raise LookupError("vector store down")

    history = InMemoryHistoryProvider()
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, history=history, context_providers=[Broken()])
        with pytest.raises(LookupError, match="vector store down"):
            await asyncio.wait_for(agent.send("hi"), GUARD)
    assert server.requests == []
    assert history.messages == ()


@pytest.mark.asyncio
async def test_a_secret_echoed_by_a_step_two_error_is_redacted_everywhere(
    server: LLMServer,
) -> None:
    key = "sk-live-SECRET-0123456789"
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 1})]),
        Fault.status(401, message=f"Incorrect API key provided: {key}"),
    )
    async with OpenAIChatClient(server.url, key) as client:
        agent = Agent(client, tools=[add])
        with pytest.raises(HTTPStatusError) as caught:
            await asyncio.wait_for(agent.send("hi"), GUARD)
        assert key not in repr(agent) + repr(client)
    error = caught.value
    for text in (str(error), repr(error), error.body or "", repr(error.partial)):
        assert key not in text
    assert "***" in str(error)


# ---------------------------------------------------------------- bad tool calls


@pytest.mark.asyncio
async def test_every_kind_of_bad_call_in_one_step_becomes_an_error_result_in_call_order(
    server: LLMServer, fmt: str
) -> None:
    ran: list[tuple[int, int]] = []

    @tool
    def plus(a: int, b: int) -> int:
        """Add."""
        ran.append((a, b))
        return a + b

    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("nope", {}, id="c1"),
                ToolCallSpec("plus", '{"a": 1,', id="c2"),  # invalid JSON
                ToolCallSpec("plus", {"a": "x", "b": 2}, id="c3"),  # fails the schema
                ToolCallSpec("plus", "[1, 2]", id="c4"),  # not an object
                ToolCallSpec("plus", {"a": 1, "b": 2, "c": 3}, id="c5"),  # unexpected member
                ToolCallSpec("plus", {"a": 1, "b": 2}, id="c6"),
            ]
        ),
        Reply(text="Done."),
    )
    async with CLIENTS[fmt](server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[plus]).send("go"), GUARD)
    assert ran == [(1, 2)]
    assert response.text == "Done."
    results = [(m.tool_call_id, m.content) for m in response.tool_messages]
    assert [i for i, _ in results] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    texts = dict(results)
    assert texts["c1"] == "Error: unknown tool 'nope' (available: plus)"
    assert "invalid JSON" in texts["c2"]
    assert "argument 'a': expected integer" in texts["c3"]
    assert "must be a JSON object" in texts["c4"]
    assert "'c'" in texts["c5"]
    assert texts["c6"] == "3"
    bad = response.tool_calls[1]
    assert (bad.arguments, bad.raw_arguments) == (None, '{"a": 1,')
    assert bad.error is not None
    # the next request pairs every call with its result, in order
    assert [i for i, _ in sent_calls(server.requests[1])] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert sent_results(server.requests[1]) == results
    if fmt != "anthropic":  # the exact bytes the model sent go back (Anthropic needs an object)
        assert '{"a": 1,' in str(server.requests[1].json)


@pytest.mark.asyncio
async def test_a_call_when_no_tool_is_offered(server: LLMServer) -> None:
    server.enqueue(Reply(tool_calls=[ToolCallSpec("ghost", {}, id="c1")]), Reply(text="Sorry."))
    async with OpenAIChatClient(server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client).send("go"), GUARD)
    assert "tools" not in server.requests[0].body
    assert [m.content for m in response.tool_messages] == [
        "Error: unknown tool 'ghost' (available: none)"
    ]
    assert response.text == "Sorry."


@pytest.mark.asyncio
async def test_arguments_cut_by_length_are_never_run(server: LLMServer) -> None:
    ran: list[int] = []

    @tool
    def store(n: int) -> str:
        """Store a number."""
        ran.append(n)
        return "stored"

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("store", '{"n": 12', id="c1")], finish="length"),
        Reply(text="Retrying is up to you."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[store]).send("go"), GUARD)
    assert ran == []
    assert len(server.requests) == 1  # the turn ends: the limit, not bad JSON, is the cause
    (call,) = response.tool_calls
    assert (call.raw_arguments, call.partial_value, call.complete) == ('{"n": 12', {"n": 12}, False)
    assert "token limit" in str(call.error)
    assert response.tool_messages == ()
    assert response.finish_reason is FinishReason.LENGTH


@pytest.mark.asyncio
async def test_calls_with_finish_reason_stop_still_run(server: LLMServer) -> None:
    """Some OpenAI-compatible servers say ``stop`` while calling tools."""
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("add", {"a": 2, "b": 2}, id="c1")], finish="stop"),
        Reply(text="4"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[add]).send("go"), GUARD)
    assert [m.content for m in response.tool_messages] == ["4"]
    assert response.text == "4"
    assert len(server.requests) == 2


# ---------------------------------------------------------------- odd tools


@pytest.mark.asyncio
async def test_odd_tool_results_and_exceptions_go_back_as_errors(server: LLMServer) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    @tool
    def binary() -> Any:
        """Returns bytes."""
        return b"\x00\x01"

    @tool
    def objecty() -> Any:
        """Returns an object."""
        return object()

    @tool
    def huge() -> str:
        """Returns a lot."""
        return "x" * 10_000

    @tool
    async def odd() -> str:
        """Raises an exception whose str() fails."""
        raise Unprintable

    @tool
    def typed() -> str:
        """Raises a rafrx tool error itself."""
        raise ToolExecutionError("quota exhausted for today")

    @tool
    def surrogate() -> str:
        """Returns a lone surrogate, as surrogateescape decoding does."""
        return "bad \udcff byte"

    names = ["binary", "objecty", "huge", "odd", "typed", "surrogate"]
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec(n, {}, id=n) for n in names]), Reply(text="Noted.")
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(
            client, tools=[binary, objecty, huge, odd, typed, surrogate], max_result_chars=100
        )
        response = await asyncio.wait_for(agent.send("go"), GUARD)
    texts = {m.tool_call_id: m.content for m in response.tool_messages}
    assert list(texts) == names
    assert "bytes is not JSON serializable" in texts["binary"]
    assert "object is not JSON serializable" in texts["objecty"]
    assert texts["huge"] == "x" * 100 + "… [truncated: 9900 more characters]"
    assert "Unprintable" in texts["odd"]
    assert "str() failed" in texts["odd"]
    assert texts["typed"] == "Error: quota exhausted for today"
    assert texts["surrogate"] == "bad \udcff byte"  # (kept as the tool returned it)
    # sent with the lone surrogate as U+FFFD: a provider refuses a request holding one
    sent = {**texts, "surrogate": "bad \ufffd byte"}
    assert sent_results(server.requests[1]) == list(sent.items())


@pytest.mark.asyncio
async def test_a_tool_mutating_its_arguments_leaves_the_transcript_as_the_model_sent_it(
    server: LLMServer,
) -> None:
    @tool
    def grow(items: list[str], meta: dict[str, int]) -> int:
        """Mutates what it is given."""
        items.append("injected")
        meta["n"] = 99
        return len(items)

    args = {"items": ["a"], "meta": {"n": 1}}
    server.enqueue(Reply(tool_calls=[ToolCallSpec("grow", args, id="c1")]), Reply(text="ok"))
    async with OpenAIChatClient(server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[grow]).send("go"), GUARD)
    assert response.tool_calls[0].arguments == args
    sent = server.requests[1].messages[1]["tool_calls"][0]["function"]["arguments"]
    assert "injected" not in sent
    assert "99" not in sent


@pytest.mark.asyncio
async def test_an_async_tool_past_its_timeout_is_cancelled_and_the_turn_goes_on(
    server: LLMServer,
) -> None:
    cancelled = asyncio.Event()

    @tool(timeout=0.05)
    async def slow() -> str:
        """Never answers in time."""
        try:
            await asyncio.sleep(GUARD)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"  # pragma: no cover

    server.enqueue(
        Reply(
            tool_calls=[ToolCallSpec("slow", {}, id="c1"), ToolCallSpec("add", {"a": 1, "b": 2})]
        ),
        Reply(text="It timed out."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[slow, add]).send("go"), GUARD)
    assert cancelled.is_set()
    assert [m.content for m in response.tool_messages] == [
        "Error: tool 'slow' timed out after 0.05 s",
        "3",
    ]
    assert response.text == "It timed out."


@pytest.mark.asyncio
async def test_a_blocking_sync_tool_past_its_timeout_does_not_hold_the_turn(
    server: LLMServer,
) -> None:
    release = threading.Event()

    @tool(timeout=0.05)
    def blocking() -> str:
        """Blocks its thread."""
        release.wait(GUARD)
        return "late"

    server.enqueue(Reply(tool_calls=[ToolCallSpec("blocking", {}, id="c1")]), Reply(text="ok"))
    try:
        async with OpenAIChatClient(server.url, "sk-test") as client:
            response = await asyncio.wait_for(Agent(client, tools=[blocking]).send("go"), GUARD)
        assert not release.is_set()  # the turn ended while the thread still blocked
        assert [m.content for m in response.tool_messages] == [
            "Error: tool 'blocking' timed out after 0.05 s"
        ]
    finally:
        release.set()


@pytest.mark.asyncio
async def test_the_concurrency_limit_is_honoured_for_parallel_calls(server: LLMServer) -> None:
    running = 0
    peak = 0
    order: list[int] = []

    @tool
    async def work(n: int) -> int:
        """Some work."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01 * (7 - n))  # later calls finish first
        order.append(n)
        running -= 1
        return n * n

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("work", {"n": n}, id=f"c{n}") for n in range(1, 7)]),
        Reply(text="All done."),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[work], concurrency=2)
        response = await asyncio.wait_for(agent.send("go"), GUARD)
    assert peak == 2
    assert sorted(order) == [1, 2, 3, 4, 5, 6]
    assert [m.content for m in response.tool_messages] == ["1", "4", "9", "16", "25", "36"]
    assert [i for i, _ in sent_results(server.requests[1])] == [f"c{n}" for n in range(1, 7)]


# ---------------------------------------------------------------- approvals


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"


def answering(subject: Subject[ToolApprovalResponse], answers: Mapping[str, list[bool]]) -> Any:
    """A do_action callback answering each approval request through ``subject``."""

    def on_next(result: AgentResponseResult) -> None:
        for event in approval_requests([result]):
            for approved in answers[event.arguments["path"]]:
                subject.on_next(ToolApprovalResponse(event.call_id, approved, reason="policy"))

    return on_next


@pytest.mark.asyncio
async def test_one_of_three_parallel_calls_denied_through_a_subject(server: LLMServer) -> None:
    subject: Subject[ToolApprovalResponse] = Subject()
    paths = ["/tmp/a", "/etc/passwd", "/tmp/b"]
    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("remove", {"path": p}, id=f"c{i}") for i, p in enumerate(paths)
            ]
        ),
        Reply(text="Two removed."),
    )
    answers = {"/tmp/a": [True], "/etc/passwd": [False], "/tmp/b": [True]}
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[remove], approver=subject)
        async with asyncio.timeout(GUARD):
            results = await agent.run("clean").pipe(
                rx.do_action(answering(subject, answers)), rx.to_list()
            )
    assert [e.arguments["path"] for e in approval_requests(results)] == paths
    assert sorted((c.call_id, c.result, c.error) for c in calledcontents(results)) == [
        ("c0", "removed /tmp/a", None),
        ("c1", None, "the user denied the call to tool 'remove': policy"),
        ("c2", "removed /tmp/b", None),
    ]
    assert sent_results(server.requests[1]) == [
        ("c0", "removed /tmp/a"),
        ("c1", "Error: the user denied the call to tool 'remove': policy"),
        ("c2", "removed /tmp/b"),
    ]


@pytest.mark.asyncio
async def test_a_late_approval_answered_twice_counts_the_first_answer(server: LLMServer) -> None:
    """Answers given while the call waits: deny, then approve; the denial stands."""
    subject: Subject[ToolApprovalResponse] = Subject()
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("remove", {"path": "/tmp/x"}, id="c1")]),
        Reply(text="Not removed."),
    )
    loop = asyncio.get_running_loop()

    def on_next(result: AgentResponseResult) -> None:
        for event in approval_requests([result]):
            for approved in (False, True):  # after the call started waiting
                answer = ToolApprovalResponse(event.call_id, approved, reason="policy")
                loop.call_soon(subject.on_next, answer)

    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[remove], approver=subject)
        async with asyncio.timeout(GUARD):
            results = await agent.run("rm").pipe(rx.do_action(on_next), rx.to_list())
    called = calledcontents(results)
    assert [(c.call_id, c.result) for c in called] == [("c1", None)]
    assert called[0].error == "the user denied the call to tool 'remove': policy"


@pytest.mark.asyncio
async def test_invalid_arguments_are_never_put_to_the_approver(server: LLMServer) -> None:
    asked: list[ToolApprovalRequestEvent] = []

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append(event)
        return True

    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("remove", {"path": 7}, id="c1"),
                ToolCallSpec("remove", '{"path": ', id="c2"),
                ToolCallSpec("remove", {"path": "/tmp/ok"}, id="c3"),
            ]
        ),
        Reply(text="ok"),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[remove], approver=approver)
        results = await collect(agent, "rm")
    assert [e.call_id for e in asked] == ["c3"]
    assert [e.call_id for e in approval_requests(results)] == ["c3"]
    assert [c.result for c in calledcontents(results) if c.call_id == "c3"] == ["removed /tmp/ok"]


@pytest.mark.asyncio
async def test_disposal_mid_approval_cancels_the_approver_and_sends_nothing_more(
    server: LLMServer,
) -> None:
    asked = asyncio.Event()
    approver_cancelled = asyncio.Event()

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.set()
        try:
            await asyncio.sleep(GUARD)
        except asyncio.CancelledError:
            approver_cancelled.set()
            raise
        return True  # pragma: no cover

    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("remove", {"path": "/tmp/x"}, id="c1")]),
        Reply(text="unused"),
    )
    seen: list[AgentResponseResult] = []
    ended: list[str] = []
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[remove], approver=approver)
        subscription = agent.run("rm").subscribe(
            seen.append, lambda e: ended.append(f"error {e!r}"), lambda: ended.append("done")
        )
        await asyncio.wait_for(asked.wait(), GUARD)
        delivered = len(seen)
        subscription.dispose()
        subscription.dispose()  # twice: a no-op
        await asyncio.wait_for(approver_cancelled.wait(), GUARD)
        for _ in range(10):
            await asyncio.sleep(0)
    assert len(seen) == delivered
    assert ended == []
    assert calledcontents(seen) == []
    assert len(server.requests) == 1


@pytest.mark.asyncio
async def test_a_subject_answer_after_disposal_runs_nothing_and_raises_nothing(
    server: LLMServer,
) -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def launch(target: str) -> str:
        """Launch."""
        ran.append(target)  # pragma: no cover - never approved in time
        return "launched"  # pragma: no cover

    subject: Subject[ToolApprovalResponse] = Subject()
    server.enqueue(Reply(tool_calls=[ToolCallSpec("launch", {"target": "moon"}, id="c1")]))
    seen: list[AgentResponseResult] = []
    asked = asyncio.Event()

    def on_next(result: AgentResponseResult) -> None:
        seen.append(result)
        if approval_requests([result]):
            asked.set()

    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[launch], approver=subject)
        subscription = agent.run("go").subscribe(on_next)
        await asyncio.wait_for(asked.wait(), GUARD)
        delivered = len(seen)
        subscription.dispose()
        for _ in range(5):
            await asyncio.sleep(0)
        subject.on_next(ToolApprovalResponse("c1", True))  # too late
        for _ in range(10):
            await asyncio.sleep(0)
    assert ran == []
    assert len(seen) == delivered
    assert len(server.requests) == 1


# ---------------------------------------------------------------- disposal and cancellation


@pytest.mark.asyncio
async def test_disposing_right_after_subscribing_sends_no_request(server: LLMServer) -> None:
    ended: list[str] = []
    async with OpenAIChatClient(server.url, "sk-test") as client:
        subscription = (
            Agent(client)
            .run("hi")
            .subscribe(
                on_error=lambda e: ended.append("error"), on_completed=lambda: ended.append("done")
            )
        )
        subscription.dispose()
        for _ in range(20):
            await asyncio.sleep(0)
    assert server.requests == []
    assert ended == []


@pytest.mark.asyncio
async def test_disposing_mid_answer_after_tools_ran_closes_the_connection(
    server: LLMServer, fmt: str
) -> None:
    story = " ".join(f"w{i}" for i in range(400))
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 1}, id="c1")]),
        Reply(text=story, chunk_size=4, delay=0.002),
    )
    seen: list[AgentResponseResult] = []
    in_answer = asyncio.Event()

    def on_next(result: AgentResponseResult) -> None:
        seen.append(result)
        if calledcontents(seen) and any(isinstance(c, TextContent) for c in result.contents):
            in_answer.set()

    async with CLIENTS[fmt](server.url, "sk-test") as client:
        subscription = Agent(client, tools=[add]).run("go").subscribe(on_next)
        await asyncio.wait_for(in_answer.wait(), GUARD)
        subscription.dispose()
        delivered = len(seen)
        await server.wait_until(lambda: server.connections_closed >= 1, GUARD)
        await asyncio.sleep(0.02)
        assert len(seen) == delivered
    text = "".join(c.text for r in seen for c in r.contents if isinstance(c, TextContent))
    assert story.startswith(text)
    assert text != story
    assert [c.result for c in calledcontents(seen)] == ["2"]


@pytest.mark.asyncio
async def test_taking_only_the_first_result_ends_the_turn_cleanly(server: LLMServer) -> None:
    server.enqueue(
        Reply(text="a long answer " * 50, chunk_size=3, delay=0.002),
    )
    async with OpenAIChatClient(server.url, "sk-test") as client:
        async with asyncio.timeout(GUARD):
            first = await Agent(client).run("hi").pipe(rx.first())
    assert any(isinstance(e, ResponseStartedEvent) for e in first.events)


@pytest.mark.asyncio
async def test_a_step_error_while_an_eager_tool_runs_cancels_it(server: LLMServer) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def crawl(url: str) -> str:
        """Crawl a page, slowly."""
        started.set()
        try:
            await asyncio.sleep(GUARD)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "page"  # pragma: no cover

    body = render(
        Reply(tool_calls=[ToolCallSpec("crawl", {"url": "http://x"}, id="toolu_1")]),
        "anthropic",
    )
    server.enqueue(Fault.stall(0.3, after_bytes=body.index(b"event: message_delta"), body=body))
    async with AnthropicClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[crawl], eager_tools=True)
        task = asyncio.create_task(agent.send("crawl"))
        await asyncio.wait_for(started.wait(), GUARD)  # running before the call's end arrived
        assert not task.done()
        await server.close()  # the provider goes away mid-call
        with pytest.raises(RafrxError) as caught:
            await asyncio.wait_for(task, GUARD)
    assert cancelled.is_set()
    partial = caught.value.partial
    assert partial is not None
    assert partial.interrupted
    assert [c.id for c in partial.tool_calls] == ["toolu_1"]
    assert partial.tool_messages == ()


# ---------------------------------------------------------------- concurrency between turns


@pytest.mark.asyncio
async def test_concurrent_turns_on_one_client_never_mix_their_tool_results(
    server: LLMServer,
) -> None:
    @tool
    async def echo(n: int) -> str:
        """Echo after a while."""
        await asyncio.sleep(0.001 * (n % 3))
        return f"echo {n}"

    def script(request: RecordedRequest) -> Reply:
        n = int(request.messages[-1]["content"].split()[-1])  # "turn n", then "echo n"
        if request.last_role == "tool":
            return Reply(text=f"turn {n} done")
        return Reply(tool_calls=[ToolCallSpec("echo", {"n": n})])

    server.script(script)
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[echo])
        async with asyncio.timeout(GUARD):
            responses = await asyncio.gather(*(agent.send(f"turn {n}") for n in range(12)))
    assert [r.text for r in responses] == [f"turn {n} done" for n in range(12)]
    assert [[m.content for m in r.tool_messages] for r in responses] == [
        [f"echo {n}"] for n in range(12)
    ]
    assert len(server.requests) == 24


@pytest.mark.asyncio
async def test_a_failing_turn_does_not_disturb_a_concurrent_one(server: LLMServer) -> None:
    gate = asyncio.Event()

    @tool
    async def wait_gate() -> str:
        """Waits until the other turn failed."""
        await gate.wait()
        return "opened"

    def script(request: RecordedRequest) -> Reply | Fault:
        first = request.messages[0]["content"]
        if first == "fail":
            return Fault.status(503, message="overloaded")
        if request.last_role == "tool":
            return Reply(text="survived")
        return Reply(tool_calls=[ToolCallSpec("wait_gate", {})])

    server.script(script)
    async with OpenAIChatClient(server.url, "sk-test") as client:
        agent = Agent(client, tools=[wait_gate])
        survivor = asyncio.create_task(agent.send("ok"))
        await server.wait_requests(1, GUARD)
        with pytest.raises(HTTPStatusError):
            await asyncio.wait_for(agent.send("fail"), GUARD)
        gate.set()
        response = await asyncio.wait_for(survivor, GUARD)
    assert response.text == "survived"
    assert [m.content for m in response.tool_messages] == ["opened"]


@pytest.mark.asyncio
async def test_provider_sent_tool_calling_contents_are_forwarded_once(server: LLMServer) -> None:
    """Every ToolCallingContent of a step is delivered once, before its result."""
    server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("add", {"a": 1, "b": 1}, id="c1"),
                ToolCallSpec("add", {"a": 2, "b": 2}, id="c2"),
            ]
        ),
        Reply(text="ok"),
    )
    async with OpenAIResponsesClient(server.url, "sk-test") as client:
        results = await collect(Agent(client, tools=[add], eager_tools=True), "go")
    flat = [c for r in results for c in r.contents]
    callings = [c.call_id for c in flat if isinstance(c, ToolCallingContent)]
    assert callings == ["c1", "c2"]
    for call_id in callings:
        calling_at = next(
            i
            for i, c in enumerate(flat)
            if isinstance(c, ToolCallingContent) and c.call_id == call_id
        )
        called_at = next(
            i
            for i, c in enumerate(flat)
            if isinstance(c, ToolCalledContent) and c.call_id == call_id
        )
        assert calling_at < called_at
