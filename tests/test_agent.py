"""Tests for rafrx.agent with a scripted in-process client (no HTTP).

The end-to-end tests over real HTTP against rafrx.testing.LLMServer are in
tests/test_agent_http.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex import operators as rx
from reactivex.disposable import Disposable

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.agent import Agent
from rafrx.content import ToolCalledContent
from rafrx.errors import MaxStepsExceeded, ProviderError
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import ANTHROPIC_THINKING, ChatMessage, MessageRole, MessageSource, ToolCall
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.tools import Tool, tool

EXTERNAL = MessageSource.EXTERNAL
HISTORY = MessageSource.CHAT_HISTORY
CONTEXT = MessageSource.CONTEXT_PROVIDER
RESULT = MessageSource.TOOL_RESULT

HANG = "hang"  # a step that never finishes


class FakeClient:
    """Answers each stream() with the next scripted list of updates, emitted on the loop."""

    def __init__(self, *steps: Sequence[u.AgentResponseUpdate] | str) -> None:
        self.steps = list(steps)
        self.requests: list[tuple[tuple[ChatMessage, ...], tuple[Tool, ...] | None]] = []
        self.disposed = 0

    def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[Tool] | None = None
    ) -> Observable[u.AgentResponseUpdate]:
        def subscribe(
            observer: abc.ObserverBase[u.AgentResponseUpdate],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            self.requests.append((tuple(messages), None if tools is None else tuple(tools)))
            step = self.steps.pop(0)

            async def emit() -> None:
                if step == HANG:
                    await asyncio.sleep(60)
                for update in step:
                    await asyncio.sleep(0)
                    observer.on_next(update)  # type: ignore[arg-type]
                observer.on_completed()

            task = asyncio.get_running_loop().create_task(emit())

            def dispose() -> None:
                self.disposed += 1
                task.cancel()

            return Disposable(dispose)

        return Observable(subscribe)


def text(reply: str, usage: int = 0) -> list[u.AgentResponseUpdate]:
    return [
        u.ResponseMetadata("resp", "fake-1"),
        u.TextDelta(reply),
        u.Finish(FinishReason.STOP, Usage(usage, 1, usage + 1) if usage else None),
    ]


def calls(
    *specs: tuple[str, str, str], say: str = "", usage: int = 0
) -> list[u.AgentResponseUpdate]:
    """One LLM call: optional text, then (legacy, OpenAI-style) tool-call deltas."""
    out: list[u.AgentResponseUpdate] = [u.ResponseMetadata("resp", "fake-1")]
    if say:
        out.append(u.TextDelta(say))
    for index, (call_id, name, arguments) in enumerate(specs):
        out.append(u.ToolCallDelta(index, id=call_id, name=name))
        out.append(u.ToolCallDelta(index, arguments_delta=arguments))
    out.append(u.Finish(FinishReason.TOOL_CALLS, Usage(usage, 1, usage + 1) if usage else None))
    return out


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return {"Oslo": "rain", "Rome": "sun"}.get(city, "unknown")


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


async def collect(stream: Observable[AgentResponseResult]) -> list[AgentResponseResult]:
    return list(await stream.pipe(rx.to_list()))


def user(content: str) -> ChatMessage:
    return ChatMessage.user(content, source=EXTERNAL)


# ---------------------------------------------------------------- one step


@pytest.mark.asyncio
async def test_a_plain_answer_is_one_llm_call() -> None:
    client = FakeClient(text("Hello!", usage=5))
    agent = Agent(client, instructions="Be brief.", id="a1")
    results = await collect(agent.run("Hi"))
    assert client.requests == [((ChatMessage.system("Be brief."), user("Hi")), None)]
    events = [e for r in results for e in r.events]
    assert events == [
        ResponseStartedEvent("resp", "fake-1"),
        FinishEvent(FinishReason.STOP, Usage(5, 1, 6)),
    ]


@pytest.mark.asyncio
async def test_send_returns_the_turns_response() -> None:
    agent = Agent(FakeClient(text("Hello!", usage=5)), id="a1")
    response = await agent.send("Hi")
    assert isinstance(response, AgentResponse)
    assert (response.text, response.finish_reason) == ("Hello!", FinishReason.STOP)
    assert response.source_agent_id == "a1"
    assert response.turn_transcript == (ChatMessage.assistant("Hello!"),)
    assert response.usage == Usage(5, 1, 6)


@pytest.mark.asyncio
async def test_tools_are_offered_to_the_client() -> None:
    client = FakeClient(text("ok"))
    await Agent(client, tools=[add, weather]).send("Hi")
    assert client.requests[0][1] == (add, weather)


# ---------------------------------------------------------------- the loop


@pytest.mark.asyncio
async def test_multi_step_turn_with_parallel_tool_calls() -> None:
    started: list[str] = []
    both_started = asyncio.Event()

    @tool
    async def lookup(city: str) -> str:
        """Look a city up."""
        started.append(city)
        if len(started) == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), 5)  # only passes if both run at once
        return f"{city}: fine"

    client = FakeClient(
        [
            u.ResponseMetadata("r1", "fake-1"),
            u.ReasoningDelta("Two cities. "),
            u.ToolCallDelta(0, id="c1", name="lookup", arguments_delta='{"city": "Oslo"}'),
            u.ToolCallDelta(1, id="c2", name="lookup", arguments_delta='{"city": "Rome"}'),
            u.Finish(FinishReason.TOOL_CALLS, Usage(10, 5, 15)),
        ],
        [
            u.ResponseMetadata("r2", "fake-1"),
            u.TextDelta("Oslo and Rome are fine."),
            u.Finish(FinishReason.STOP, Usage(30, 6, 36)),
        ],
    )
    agent = Agent(client, tools=[lookup], instructions="sys", id="agent-7")
    stream = agent.run("How are Oslo and Rome?")
    results = await collect(stream)

    assert sorted(started) == ["Oslo", "Rome"]
    assistant = ChatMessage(
        MessageRole.ASSISTANT,
        "",
        tool_calls=[
            ToolCall("c1", "lookup", {"city": "Oslo"}),
            ToolCall("c2", "lookup", {"city": "Rome"}),
        ],
        reasoning="Two cities. ",
    )
    tool_messages = (ChatMessage.tool("Oslo: fine", "c1"), ChatMessage.tool("Rome: fine", "c2"))
    first = (ChatMessage.system("sys"), user("How are Oslo and Rome?"))
    assert [messages for messages, _ in client.requests] == [
        first,
        (*first, assistant, *tool_messages),
    ]
    # every LLM call shows as ResponseStarted ... Finish, its tools' results after it
    kinds = [
        type(x).__name__
        for r in results
        for x in (*r.events, *r.contents)
        if isinstance(x, ResponseStartedEvent | FinishEvent | ToolCalledContent)
    ]
    assert kinds == [
        "ResponseStartedEvent",
        "FinishEvent",
        "ToolCalledContent",
        "ToolCalledContent",
        "ResponseStartedEvent",
        "FinishEvent",
    ]
    response = await reactivex.from_iterable(results).pipe(ops.aggregate(agent_id=agent.id))
    assert response.turn_transcript == (
        assistant,
        *tool_messages,
        ChatMessage.assistant("Oslo and Rome are fine."),
    )
    assert response.tool_messages == tool_messages
    assert response.text == "Oslo and Rome are fine."
    assert response.reasoning_text == "Two cities. "
    assert response.usage == Usage(40, 11, 51)
    assert (response.id, response.finish_reason, response.source_agent_id) == (
        "r2",
        FinishReason.STOP,
        "agent-7",
    )


@pytest.mark.asyncio
async def test_reasoning_and_provider_data_go_back_with_the_assistant_message() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig=="}
    client = FakeClient(
        [
            u.ReasoningDelta("hmm", provider_data=thinking),
            u.ToolCallStart("toolu_1", "add"),
            u.ToolCallArgs("toolu_1", '{"a": 1, "b": 2}'),
            u.ToolCallEnd("toolu_1"),
            u.Finish(FinishReason.TOOL_CALLS),
        ],
        text("3"),
    )
    await Agent(client, tools=[add]).send("1+2?")
    sent = client.requests[1][0][1]
    assert sent.reasoning == "hmm"
    assert sent.provider_data == {ANTHROPIC_THINKING: (thinking,)}
    assert sent.tool_calls == (ToolCall("toolu_1", "add", {"a": 1, "b": 2}),)


@pytest.mark.asyncio
async def test_tool_errors_go_back_to_the_model() -> None:
    client = FakeClient(
        calls(("c1", "add", '{"a": 1}'), ("c2", "nope", "{}"), ("c3", "add", '{"a": ')),
        text("Sorry."),
    )
    await Agent(client, tools=[add]).send("go")
    tool_messages = client.requests[1][0][2:]
    assert [(m.tool_call_id, m.content) for m in tool_messages] == [
        ("c1", "Error: invalid arguments for tool 'add': missing required argument 'b'"),
        ("c2", "Error: unknown tool 'nope' (available: add)"),
        (
            "c3",
            "Error: invalid arguments for tool 'add': invalid JSON arguments: "
            "Expecting value: line 1 column 7 (char 6)",
        ),
    ]
    # the unparsable call goes back exactly as the model sent it
    assert client.requests[1][0][1].tool_calls is not None
    assert client.requests[1][0][1].tool_calls[2].arguments_json() == '{"a": '


@pytest.mark.asyncio
async def test_max_steps_is_a_clear_error_with_the_partial_turn() -> None:
    client = FakeClient(*(calls((f"c{i}", "add", '{"a": 1, "b": 1}')) for i in range(3)))
    history = InMemoryHistoryProvider()
    agent = Agent(client, tools=[add], history=history, max_steps=2)
    with pytest.raises(MaxStepsExceeded) as info:
        await agent.send("loop forever")
    assert str(info.value) == "the model was still calling tools after 2 LLM calls (max_steps=2)"
    assert len(client.requests) == 2
    partial = info.value.partial
    assert partial is not None
    assert partial.interrupted
    assert [m.tool_call_id for m in partial.tool_messages] == ["c0", "c1"]
    assert len(partial.turn_transcript) == 4
    assert history.messages == ()  # a failed turn is not saved


@pytest.mark.asyncio
async def test_max_steps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_steps"):
        Agent(FakeClient(), max_steps=0)


@pytest.mark.asyncio
async def test_a_client_error_ends_the_turn_with_the_partial_response() -> None:
    client = FakeClient(
        calls(("c1", "add", '{"a": 1, "b": 1}')),
        [u.TextDelta("The answer is"), u.Error("overloaded", error_type="overloaded_error")],
    )
    history = InMemoryHistoryProvider()
    with pytest.raises(ProviderError) as info:
        await Agent(client, tools=[add], history=history).send("1+1?")
    assert info.value.error_type == "overloaded_error"
    partial = info.value.partial
    assert partial is not None
    assert partial.tool_messages == (ChatMessage.tool("2", "c1"),)
    assert partial.text == "The answer is"
    assert history.messages == ()


# ---------------------------------------------------------------- approvals


@pytest.mark.asyncio
async def test_approval_granted_and_denied_through_the_agents_approver() -> None:
    asked: list[ToolApprovalRequestEvent] = []

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append(event)
        return event.arguments["path"] != "/"

    client = FakeClient(
        calls(("c1", "delete", '{"path": "tmp.txt"}'), ("c2", "delete", '{"path": "/"}')),
        text("Deleted tmp.txt; not allowed to delete /."),
    )
    agent = Agent(client, tools=[delete], approver=approver)
    results = await collect(agent.run("clean up"))
    requests = [e for r in results for e in r.events if isinstance(e, ToolApprovalRequestEvent)]
    assert requests == asked
    assert [e.call_id for e in asked] == ["c1", "c2"]
    assert asked[0] == ToolApprovalRequestEvent(
        "c1", "delete", {"path": "tmp.txt"}, "Delete a file."
    )
    sent = client.requests[1][0]
    assert [(m.tool_call_id, m.content) for m in sent[2:]] == [
        ("c1", "deleted tmp.txt"),
        ("c2", "Error: the user denied the call to tool 'delete'; it was not run"),
    ]


@pytest.mark.asyncio
async def test_provider_sent_approval_requests_surface_in_the_results() -> None:
    client = FakeClient(
        [
            u.ToolApprovalRequest("mcp_1", "search_docs", {"q": "rx"}, "Search the docs"),
            u.TextDelta("Waiting for approval."),
            u.Finish(FinishReason.STOP),
        ]
    )
    results = await collect(Agent(client).run("search"))
    events = [e for r in results for e in r.events if isinstance(e, ToolApprovalRequestEvent)]
    assert events == [
        ToolApprovalRequestEvent("mcp_1", "search_docs", {"q": "rx"}, "Search the docs")
    ]


# ---------------------------------------------------------------- history and context


class Facts:
    """A context provider that records what it was given."""

    def __init__(self) -> None:
        self.given: list[tuple[ChatMessage, ...]] = []

    async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        self.given.append(tuple(messages))
        return [ChatMessage.system(f"fact #{len(self.given)}")]


@pytest.mark.asyncio
async def test_history_across_turns_without_duplicates() -> None:
    history = InMemoryHistoryProvider()
    facts = Facts()
    client = FakeClient(
        calls(("c1", "weather", '{"city": "Oslo"}')),
        text("Rain in Oslo."),
        text("You asked about Oslo."),
    )
    agent = Agent(
        client, tools=[weather], instructions="sys", history=history, context_providers=[facts]
    )
    await agent.send("Weather in Oslo?")
    turn1 = (
        user("Weather in Oslo?"),
        ChatMessage.assistant_with_tools("", [ToolCall("c1", "weather", {"city": "Oslo"})]),
        ChatMessage.tool("rain", "c1"),
        ChatMessage.assistant("Rain in Oslo."),
    )
    assert history.messages == turn1

    await agent.send("What did I ask?")
    turn2 = (user("What did I ask?"), ChatMessage.assistant("You asked about Oslo."))
    assert history.messages == (*turn1, *turn2)

    # what the third LLM call got: instructions, context (per turn), history, new input
    assert client.requests[2][0] == (
        ChatMessage.system("sys"),
        ChatMessage.system("fact #2", source=CONTEXT),
        *(m.with_source(HISTORY) for m in turn1),
        user("What did I ask?"),
    )
    # context providers see the history and the new input
    assert facts.given[1] == (*(m.with_source(HISTORY) for m in turn1), user("What did I ask?"))


@pytest.mark.asyncio
async def test_a_fresh_agent_continues_from_the_saved_history() -> None:
    history = InMemoryHistoryProvider()
    first = FakeClient(
        calls(("c1", "add", '{"a": 2, "b": 2}'), ("c2", "add", '{"a": 3, "b": 3}')),
        text("4 and 6."),
    )
    await Agent(first, tools=[add], instructions="sys", history=history).send("2+2 and 3+3?")

    second = FakeClient(text("10."))
    fresh = Agent(second, tools=[add], instructions="sys", history=history)
    response = await fresh.send("And their sum?")
    assert response.text == "10."
    assert second.requests[0][0] == (
        ChatMessage.system("sys"),
        ChatMessage.user("2+2 and 3+3?", source=HISTORY),
        ChatMessage.assistant_with_tools(
            "", [ToolCall("c1", "add", {"a": 2, "b": 2}), ToolCall("c2", "add", {"a": 3, "b": 3})]
        ).with_source(HISTORY),
        ChatMessage.tool("4", "c1", source=HISTORY),
        ChatMessage.tool("6", "c2", source=HISTORY),
        ChatMessage.assistant("4 and 6.", source=HISTORY),
        user("And their sum?"),
    )
    assert [m.content for m in history.messages] == [
        "2+2 and 3+3?",
        "",
        "4",
        "6",
        "4 and 6.",
        "And their sum?",
        "10.",
    ]


# ---------------------------------------------------------------- input, cold, errors


@pytest.mark.asyncio
async def test_input_forms() -> None:
    client = FakeClient(text("a"), text("b"), text("c"))
    agent = Agent(client)
    await agent.send(ChatMessage.user("one"))
    await agent.send([ChatMessage.user("two"), ChatMessage.user("three", source=HISTORY)])
    await agent.send([])
    assert [r[0] for r in client.requests] == [
        (user("one"),),
        (user("two"), ChatMessage.user("three", source=HISTORY)),
        (),
    ]
    with pytest.raises(TypeError, match="str or ChatMessage"):
        agent.run([{"role": "user", "content": "x"}])  # type: ignore[list-item]


@pytest.mark.asyncio
async def test_run_is_cold_one_turn_per_subscription() -> None:
    client = FakeClient(text("a"), text("b"))
    stream = Agent(client).run("hi")
    assert client.requests == []
    await collect(stream)
    await collect(stream)
    assert len(client.requests) == 2


def test_subscribing_without_a_running_loop_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="running loop"):
        Agent(FakeClient(text("a"))).run("hi").run()


@pytest.mark.asyncio
async def test_a_failing_subscriber_ends_the_turn() -> None:
    def explode(result: AgentResponseResult) -> None:
        if result.finish_reason is not None:
            raise KeyError("ui bug")

    client = FakeClient(text("a"))
    with pytest.raises(KeyError):
        await Agent(client).run("hi").pipe(rx.do_action(explode))
    assert client.disposed == 1


@pytest.mark.asyncio
async def test_a_subscriber_raising_in_on_next_stops_the_turn() -> None:
    def on_next(result: AgentResponseResult) -> None:
        raise KeyError("ui bug")

    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        client = FakeClient(calls(("c1", "add", '{"a": 1, "b": 1}')), text("unused"))
        Agent(client, tools=[add]).run("hi").subscribe(on_next)  # no on_error: Rx re-raises
        for _ in range(50):
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert len(client.requests) == 1
    assert client.disposed == 1
    assert [type(c["exception"]) for c in reported] == [KeyError]
    assert reported[0]["message"] == "rafrx.Agent: an observer raised"


def test_repr_names_tools_not_secrets() -> None:
    class Client(FakeClient):
        api_key = "sk-secret"

    text_ = repr(Agent(Client(), tools=[add, weather], id="x"))
    assert text_ == "Agent(id='x', client=Client, tools=[add, weather], max_steps=10)"
    assert Agent(FakeClient()).id.startswith("agent-")


def test_duplicate_tool_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        Agent(FakeClient(), tools=[add, add])


# ---------------------------------------------------------------- cancellation


@pytest.mark.asyncio
async def test_disposal_mid_tool_cancels_the_tool_and_makes_no_more_calls() -> None:
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

    client = FakeClient(calls(("c1", "forever", "{}")), text("unused"))
    seen: list[AgentResponseResult] = []
    subscription = Agent(client, tools=[forever]).run("go").subscribe(seen.append)
    await asyncio.wait_for(started.wait(), 5)
    subscription.dispose()
    await asyncio.wait_for(cancelled.wait(), 5)
    await asyncio.sleep(0.01)
    assert len(client.requests) == 1
    assert not any(isinstance(c, ToolCalledContent) for r in seen for c in r.contents)


@pytest.mark.asyncio
async def test_disposal_mid_request_disposes_the_client_stream() -> None:
    client = FakeClient(HANG)
    subscription = Agent(client).run("go").subscribe()
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(client.requests) == 1
    subscription.dispose()
    await asyncio.sleep(0)
    assert client.disposed == 1


@pytest.mark.asyncio
async def test_cancelling_send_cancels_the_turn() -> None:
    client = FakeClient(HANG)
    task = asyncio.create_task(Agent(client).send("go"))
    for _ in range(20):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert client.disposed == 1


@pytest.mark.asyncio
async def test_eager_tools_start_before_the_llm_call_ends() -> None:
    order: list[str] = []

    @tool
    async def note(text: str) -> str:
        order.append(f"tool {text}")
        return text

    class Tracing(FakeClient):
        def stream(self, messages: Sequence[ChatMessage], tools: Any = None) -> Any:
            return (
                super()
                .stream(messages, tools)
                .pipe(rx.do_action(lambda x: order.append(type(x).__name__)))
            )

    client = Tracing(
        [
            u.ToolCallStart("c1", "note"),
            u.ToolCallArgs("c1", '{"text": "a"}'),
            u.ToolCallEnd("c1"),
            *([u.TextDelta(".")] * 5),
            u.Finish(FinishReason.TOOL_CALLS),
        ],
        text("done"),
    )
    await Agent(client, tools=[note], eager_tools=True).send("go")
    assert order.index("tool a") < order.index("Finish")
