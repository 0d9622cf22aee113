"""Tests for rafrx.agent.

First with a scripted in-process client (no HTTP), then end to end over real
HTTP against rafrx.testing.LLMServer with each of the three clients.
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
from reactivex.subject import Subject

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.agent import Agent
from rafrx.content import ToolCalledContent
from rafrx.errors import MaxStepsExceeded, ProviderError
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import (
    ANTHROPIC_THINKING,
    LOST_RESULT,
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
    to_anthropic,
    to_openai_chat,
)
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import Tool, ToolApprovalResponse, tool

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
async def test_an_approval_nobody_answers_is_denied_at_the_agents_approval_timeout() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()  # a UI that never answers
    client = FakeClient(calls(("c1", "delete", '{"path": "a"}')), text("Not deleted."))
    agent = Agent(client, tools=[delete], approver=answers, approval_timeout=0.05)
    response = await asyncio.wait_for(agent.send("delete a"), 5)
    assert response.text == "Not deleted."
    assert [m.content for m in response.tool_messages] == [
        "Error: the call to tool 'delete' was denied: no answer to its approval request"
        " within 0.05 s; it was not run"
    ]
    assert agent.approval_timeout == 0.05


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


@pytest.mark.asyncio
async def test_new_input_answering_the_calls_the_history_ends_with_is_not_repaired_away() -> None:
    """A saved turn that ended on a call (the user ran the tool): the results given as the
    next input answer it; no "result lost" error is added beside them."""
    history = InMemoryHistoryProvider()
    call = ChatMessage.assistant_with_tools("", [ToolCall("c1", "add", {"a": 1, "b": 1})])
    await history.save([ChatMessage.user("1+1?"), call])
    client = FakeClient(text("2."))
    await Agent(client, history=history).send([ChatMessage.tool("2", "c1", source=EXTERNAL)])
    sent = client.requests[0][0]
    assert [(m.role.value, m.tool_call_id, m.content) for m in sent] == [
        ("user", None, "1+1?"),
        ("assistant", None, ""),
        ("tool", "c1", "2"),
    ]
    assert not any(m.is_error for m in sent)


@pytest.mark.asyncio
async def test_new_input_answering_some_calls_still_repairs_the_others() -> None:
    history = InMemoryHistoryProvider()
    calls_ = [ToolCall("c1", "add", {"a": 1, "b": 1}), ToolCall("c2", "add", {"a": 2, "b": 2})]
    await history.save([ChatMessage.user("q"), ChatMessage.assistant_with_tools("", calls_)])
    client = FakeClient(text("ok"))
    await Agent(client, history=history).send(
        [ChatMessage.tool("4", "c2", source=EXTERNAL), ChatMessage.tool("x", "zz")]
    )
    sent = client.requests[0][0]
    assert [(m.tool_call_id, m.content, m.is_error) for m in sent[2:]] == [
        ("c1", LOST_RESULT, True),
        ("c2", "4", False),
        ("zz", "x", False),  # (the new input goes as given)
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
    with pytest.raises(TypeError, match="str, a ChatMessage or a sequence"):
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


class SyncClient(FakeClient):
    """Emits each scripted step synchronously, while it is subscribed."""

    def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[Tool] | None = None
    ) -> Observable[u.AgentResponseUpdate]:
        self.requests.append((tuple(messages), None if tools is None else tuple(tools)))
        return reactivex.from_iterable(self.steps.pop(0))


@pytest.mark.asyncio
async def test_after_a_subscriber_raised_the_steps_later_results_are_not_delivered() -> None:
    """The step's results arrive in one go; the first one's callback fails the turn."""
    ran: list[int] = []

    @tool
    def count(n: int) -> int:  # pragma: no cover - the turn ends before it runs
        ran.append(n)
        return n

    seen: list[AgentResponseResult] = []
    errors: list[Exception] = []
    finished = asyncio.Event()

    def on_next(result: AgentResponseResult) -> None:
        seen.append(result)
        raise KeyError("ui bug")

    def on_error(error: Exception) -> None:
        errors.append(error)
        finished.set()

    client = SyncClient(calls(("c1", "count", '{"n": 1}'), say="Counting."), text("unused"))
    Agent(client, tools=[count]).run("hi").subscribe(on_next, on_error)
    await asyncio.wait_for(finished.wait(), 5)
    await asyncio.sleep(0.01)
    assert [type(e) for e in errors] == [KeyError]
    assert len(seen) == 1
    assert seen[0].events == (ResponseStartedEvent("resp", "fake-1"),)
    assert len(client.requests) == 1
    assert ran == []


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


# ================================================================ over real HTTP

CLIENTS = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


@pytest.fixture(params=sorted(CLIENTS))
def client_class(request: pytest.FixtureRequest) -> type[LLMClient]:
    return CLIENTS[request.param]


@tool
def forecast(city: str) -> str:
    """The forecast for a city.

    Args:
        city: The city's name.
    """
    return {"Oslo": "rain", "Rome": "sun"}[city]


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"


async def only_tmp(event: ToolApprovalRequestEvent) -> bool:
    return str(event.arguments["path"]).startswith("/tmp/")


@pytest.mark.asyncio
async def test_three_turns_with_parallel_tools_and_an_approval_over_http(
    client_class: type[LLMClient],
) -> None:
    history = InMemoryHistoryProvider()
    async with LLMServer() as server, client_class(server.url, "sk-test-key") as client:
        agent = Agent(
            client,
            tools=[forecast, remove],
            instructions="Be brief.",
            history=history,
            approver=only_tmp,
            id="e2e",
        )
        server.enqueue(
            # turn 1: two tools at once, with reasoning
            Reply(
                reasoning="Two cities, two lookups.",
                tool_calls=[
                    ToolCallSpec("forecast", {"city": "Oslo"}, id="call_1"),
                    ToolCallSpec("forecast", {"city": "Rome"}, id="call_2"),
                ],
            ),
            Reply(text="Rain in Oslo, sun in Rome."),
            # turn 2: two calls that need approval: one granted, one denied
            Reply(
                tool_calls=[
                    ToolCallSpec("remove", {"path": "/tmp/old.txt"}, id="call_3"),
                    ToolCallSpec("remove", {"path": "/etc/passwd"}, id="call_4"),
                ]
            ),
            Reply(text="Removed /tmp/old.txt; /etc/passwd was refused."),
            # turn 3: a plain answer
            Reply(text="You are welcome."),
        )
        inputs = ["Weather in Oslo and Rome?", "Remove /tmp/old.txt and /etc/passwd.", "Thanks!"]
        results1 = await collect(agent.run(inputs[0]))
        r1 = await reactivex.from_iterable(results1).pipe(ops.aggregate(agent_id=agent.id))
        r2 = await agent.send(inputs[1])
        r3 = await agent.send(inputs[2])
        assert len(server.requests) == 5

        # turn 1: both tools ran, their results went back in call order
        assert [r.finish_reason for r in (r1, r2, r3)] == [FinishReason.STOP] * 3
        assert r1.source_agent_id == "e2e"
        assert [(c.id, c.arguments) for c in r1.tool_calls] == [
            ("call_1", {"city": "Oslo"}),
            ("call_2", {"city": "Rome"}),
        ]
        assert [(m.tool_call_id, m.content) for m in r1.tool_messages] == [
            ("call_1", "rain"),
            ("call_2", "sun"),
        ]
        assert r1.turn_transcript[0].reasoning == "Two cities, two lookups."
        assert r1.text == "Rain in Oslo, sun in Rome."
        starts = [e for r in results1 for e in r.events if isinstance(e, ResponseStartedEvent)]
        assert len(starts) == 2
        assert server.requests[1].last_role == "tool"
        assert server.requests[1].tool_names == ("forecast", "remove")

        # turn 2: the approval was asked for both, granted for one
        assert [(m.tool_call_id, m.content) for m in r2.tool_messages] == [
            ("call_3", "removed /tmp/old.txt"),
            ("call_4", "Error: the user denied the call to tool 'remove'; it was not run"),
        ]

        # the saved history is exactly each turn's input and transcript, nothing twice
        expected = [
            *(
                m
                for text, r in zip(inputs, (r1, r2, r3), strict=True)
                for m in (user(text), *r.turn_transcript)
            ),
        ]
        assert list(history.messages) == expected
        assert [m.role.value for m in history.messages] == [
            "user", "assistant", "tool", "tool", "assistant",
            "user", "assistant", "tool", "tool", "assistant",
            "user", "assistant",
        ]  # fmt: skip

        # a fresh agent on the saved history sends exactly what the first one would
        saved = InMemoryHistoryProvider(history.messages)
        server.enqueue(Reply(text="Weather and files."), Reply(text="Weather and files."))
        await agent.send("What did we talk about?")
        async with client_class(server.url, "sk-test-key") as other:
            fresh = Agent(other, tools=[forecast, remove], instructions="Be brief.", history=saved)
            response = await fresh.send("What did we talk about?")
        assert response.text == "Weather and files."
        continued, fresh_request = server.requests[-2], server.requests[-1]
        assert fresh_request.json == continued.json
        conversation = [ChatMessage.system("Be brief."), *expected, user("What did we talk about?")]
        wire = {
            "openai-chat": lambda: to_openai_chat(conversation),
            "anthropic": lambda: to_anthropic(conversation)[1],
            "openai-responses": lambda: to_responses_input(conversation),
        }
        assert fresh_request.wire_format is not None
        assert fresh_request.messages == wire[fresh_request.wire_format]()
        assert len(fresh_request.messages) > len(server.requests[4].messages)
        assert list(saved.messages) == [
            *expected,
            user("What did we talk about?"),
            ChatMessage.assistant("Weather and files."),
        ]
    await server.wait_connections_closed()


def thinking_blocks(message: ChatMessage) -> list[Any]:
    return list((message.provider_data or {}).get(ANTHROPIC_THINKING, ()))


@pytest.mark.asyncio
async def test_anthropic_thinking_signatures_go_back_in_the_tool_loop() -> None:
    async with LLMServer() as server, AnthropicClient(server.url, "sk-ant") as client:
        server.enqueue(
            Reply(reasoning="Check Oslo.", tool_calls=[ToolCallSpec("forecast", {"city": "Oslo"})]),
            Reply(text="Rain."),
        )
        response = await Agent(client, tools=[forecast]).send("Oslo?")
        blocks = thinking_blocks(response.turn_transcript[0])
        assert [b["type"] for b in blocks] == ["thinking"]
        assert blocks[0]["signature"].startswith("sig_")
        sent = server.requests[1].json["messages"][1]
        assert sent["role"] == "assistant"
        assert sent["content"][0] == {
            "type": "thinking",
            "thinking": "Check Oslo.",
            "signature": blocks[0]["signature"],
        }
        assert sent["content"][1]["type"] == "tool_use"


@pytest.mark.asyncio
async def test_each_tool_error_kind_goes_back_to_the_model_over_http(
    client_class: type[LLMClient],
) -> None:
    @tool
    def divide(a: int, b: int) -> float:
        """Divide a by b."""
        return a / b

    @tool(timeout=0.05)
    async def slow() -> str:
        """Takes a while."""
        await asyncio.sleep(5)
        return "late"  # pragma: no cover

    async with LLMServer() as server, client_class(server.url, "k") as client:
        server.enqueue(
            Reply(
                tool_calls=[
                    ToolCallSpec("divide", {"a": 6, "b": 3}, id="ok"),
                    ToolCallSpec("divide", {"a": 1, "b": 0}, id="raises"),
                    ToolCallSpec("divide", {"a": "6"}, id="invalid"),
                    ToolCallSpec("divide", '{"a": 6, "b": ', id="unparsable"),
                    ToolCallSpec("multiply", {"a": 1}, id="unknown"),
                    ToolCallSpec("slow", {}, id="timeout"),
                ]
            ),
            Reply(text="Some of that failed."),
        )
        response = await Agent(client, tools=[divide, slow]).send("go")
    results = {m.tool_call_id: m.content for m in response.tool_messages}
    assert results == {
        "ok": "2.0",
        "raises": "Error: tool 'divide' raised ZeroDivisionError: division by zero",
        "invalid": "Error: invalid arguments for tool 'divide': missing required argument 'b'; "
        "argument 'a': expected integer, got string \"6\"",
        "unparsable": "Error: invalid arguments for tool 'divide': invalid JSON arguments: "
        "Expecting value: line 1 column 15 (char 14)",
        "unknown": "Error: unknown tool 'multiply' (available: divide, slow)",
        "timeout": "Error: tool 'slow' timed out after 0.05 s",
    }
    assert [m.tool_call_id for m in response.tool_messages] == list(results)  # call order
    assert server.requests[1].last_role == "tool"
    assert response.text == "Some of that failed."


@pytest.mark.asyncio
async def test_max_steps_over_http(client_class: type[LLMClient]) -> None:
    async with LLMServer() as server, client_class(server.url, "k") as client:
        server.script(
            lambda request: Reply(tool_calls=[ToolCallSpec("forecast", {"city": "Oslo"})])
        )
        history = InMemoryHistoryProvider()
        with pytest.raises(MaxStepsExceeded) as info:
            await Agent(client, tools=[forecast], history=history, max_steps=3).send("loop")
        assert len(server.requests) == 3
    partial = info.value.partial
    assert partial is not None
    assert [m.content for m in partial.tool_messages] == ["rain"] * 3
    assert history.messages == ()


@pytest.mark.asyncio
async def test_cancellation_mid_tool_over_http(client_class: type[LLMClient]) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def crawl(url: str) -> str:
        """Crawl a site."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"  # pragma: no cover

    async with LLMServer() as server, client_class(server.url, "k") as client:
        server.enqueue(Reply(tool_calls=[ToolCallSpec("crawl", {"url": "https://x"})]))
        task = asyncio.create_task(Agent(client, tools=[crawl]).send("crawl it"))
        await asyncio.wait_for(started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(cancelled.wait(), 5)
        await asyncio.sleep(0.05)
        assert len(server.requests) == 1  # no second LLM call


@pytest.mark.asyncio
async def test_cancellation_mid_request_closes_the_connection() -> None:
    async with LLMServer() as server, OpenAIChatClient(server.url, "k") as client:
        server.enqueue(Reply(text="a long answer " * 50, chunk_size=1, delay=0.01))
        seen: list[AgentResponseResult] = []
        subscription = Agent(client).run("talk").subscribe(seen.append)
        for _ in range(500):
            if len(seen) > 3:
                break
            await asyncio.sleep(0.01)
        assert 3 < len(seen) < 100
        subscription.dispose()
        await server.wait_connections_closed()
        count = len(seen)
        await asyncio.sleep(0.05)
        assert len(seen) == count
