"""What an agent UI relies on, checked by a small UI model over real HTTP.

The UI model (:class:`UI`) is the reducer a chat front end would write: it
consumes every ``AgentResponseResult`` an observable emits (an
``Agent.run()`` turn, or ``client.stream(...).pipe(convert(), execute_tools(...))``)
and keeps one card per tool call (its stages, its live argument preview built
*only* from ``ToolCallArgsProgressContent`` / ``ToolCallArgsParsedContent``,
its approval and its result), the streamed text and reasoning, and the steps
(``ResponseStartedEvent`` … ``FinishEvent``, usage). :meth:`UI.check` then
asserts the invariants a UI depends on:

* each card's stages come in order, each once: start → args* → end →
  calling → (approval) → called, or → incomplete (cut short, never run);
* the preview equals the final parsed arguments (and, for a call cut short,
  what ``partial_value`` shows); a Progress ``received`` is the UTF-8 size
  of the preview's string so far;
* one ``ResponseStartedEvent`` opens each step, at most one ``FinishEvent``
  and one ``UsageContent`` close it, and every card of a step is settled
  before the next step starts;
* nothing arrives after ``on_completed`` / ``on_error``; a failed stream says
  why with one ``ErrorContent``, the last content before the error;
* the text, reasoning, calls, tool results and usage the UI shows are those
  of the ``AgentResponse`` (or the error's ``.partial``) built from the same items.

Every recorded fixture is replayed through :class:`~rafrx.testing.LLMServer`;
scripted multi-step turns, approvals (approved, denied, timed out, failing,
missing), tool errors, eager tools, faults in a later step (dropped
connection, HTTP 500 / 429, garbage, stall with a small idle timeout), calls
cut by a dropped connection or by the token limit, retries, ``max_steps``
and disposal mid-stream and mid-tool. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import reactivex
from reactivex import Observable

from rafrx import (
    Agent,
    AgentResponse,
    AgentResponseResult,
    ChatMessage,
    FinishReason,
    Usage,
    collect_agent_response,
    tool,
)
from rafrx import operators as ops
from rafrx.content import (
    ErrorContent,
    ReasoningContent,
    TextContent,
    ToolCallArgsContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
    ToolCalledContent,
    ToolCallEndContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
    UsageContent,
)
from rafrx.errors import (
    HTTPStatusError,
    IdleTimeout,
    MalformedEvent,
    MaxStepsExceeded,
    RafrxError,
    StreamInterrupted,
)
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.sources.clients import (
    AnthropicClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.testing import Fault, LLMServer, Replay, Reply, ToolCallSpec, render
from rafrx.tools import Tool

FIXTURES = Path(__file__).resolve().parent / "data" / "fixtures"
MANIFEST: list[dict[str, Any]] = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
CLIENTS: dict[str, Any] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = list(CLIENTS)
REPLAYED = [entry for entry in MANIFEST if entry["format"] in CLIENTS]
#: Seconds any one wait may take before the test fails instead of hanging.
GUARD = 8.0
#: A schema taking any object (recorded calls carry arguments of every shape).
ANY_OBJECT: dict[str, Any] = {"type": "object"}

#: A card's stages, in the only orders a UI accepts (``args`` may repeat).
GRAMMAR = re.compile(r"^start( args)*( end)?( calling( approval)?( called)?| incomplete)?$")
SETTLED = re.compile(r"( called| incomplete)$")


# ---------------------------------------------------------------- the UI model


class Card:
    """One tool call as a UI shows it."""

    def __init__(self, step: int, call_id: str, name: str) -> None:
        self.step = step
        self.call_id = call_id
        self.name = name
        self.stages: list[str] = ["start"]
        self.preview: dict[str, Any] = {}  # from Progress / Parsed only
        self.calling: ToolCallingContent | None = None
        self.incomplete: ToolCallIncompleteContent | None = None
        self.approval: ToolApprovalRequestEvent | None = None
        self.called: ToolCalledContent | None = None

    @property
    def stage_line(self) -> str:
        return " ".join(self.stages)

    def __repr__(self) -> str:
        return f"Card({self.step}, {self.call_id!r}, {self.name!r}, {self.stage_line!r})"


class Step:
    """One LLM call as a UI shows it."""

    def __init__(self, started: ResponseStartedEvent | None) -> None:
        self.started = started
        self.finish: FinishEvent | None = None
        self.usage: list[Usage] = []
        self.failed = False


class UI:
    """A reducer over every item a turn emits, noting each broken expectation."""

    def __init__(self) -> None:
        self.items: list[AgentResponseResult] = []
        self.cards: list[Card] = []
        self.steps: list[Step] = []
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.errors: list[ErrorContent] = []
        self.terminal: str | None = None
        self.error: BaseException | None = None
        self.late: list[Any] = []
        self.problems: list[str] = []
        self.last_content: Any = None

    # ------------------------------------------------------------ observer

    def on_next(self, result: AgentResponseResult) -> None:
        if self.terminal is not None:
            self.late.append(result)
        self.items.append(result)
        for event in result.events:
            if isinstance(event, ResponseStartedEvent):
                self.start_step(event)
        if not self.steps:
            self.problems.append(f"an item before any ResponseStartedEvent: {result!r}")
            self.steps.append(Step(None))
        for content in result.contents:
            self.content(content)
            self.last_content = content
        for event in result.events:
            if isinstance(event, FinishEvent):
                step = self.steps[-1]
                if step.finish is not None:
                    self.problems.append("two FinishEvents in one step")
                step.finish = event
            elif isinstance(event, ToolApprovalRequestEvent):
                card = self.card(event.call_id, "approval")
                if card is not None:
                    card.approval = event
                    if card.calling is not None and event.arguments != card.calling.arguments:
                        self.problems.append(f"approval arguments differ: {event!r}")

    def on_error(self, error: BaseException) -> None:
        if self.terminal is not None:
            self.late.append(error)
        self.terminal = self.terminal or "error"
        self.error = error

    def on_completed(self) -> None:
        if self.terminal is not None:
            self.late.append("completed")
        self.terminal = self.terminal or "completed"

    # ------------------------------------------------------------ reducer

    def start_step(self, event: ResponseStartedEvent) -> None:
        if self.steps:
            previous = self.steps[-1]
            if previous.finish is None and not previous.failed:
                self.problems.append("a step started before the previous one finished")
            for card in self.cards:
                if not SETTLED.search(card.stage_line):
                    self.problems.append(f"{card!r} not settled when the next step started")
        self.steps.append(Step(event))

    def card(self, call_id: str, stage: str) -> Card | None:
        for card in reversed(self.cards):  # (an id may come back in a later step)
            if card.call_id == call_id:
                card.stages.append(stage)
                return card
        self.problems.append(f"{stage} for a call no card shows: {call_id!r}")
        return None

    def previewing(self, call_id: str) -> Card | None:
        for card in reversed(self.cards):
            if card.call_id == call_id:
                if card.stages[-1] != "args":
                    self.problems.append(f"a preview of {card!r} after its arguments")
                return card
        self.problems.append(f"a preview for a call no card shows: {call_id!r}")
        return None

    def content(self, content: Any) -> None:
        step = self.steps[-1]
        match content:
            case TextContent(text):
                self.text.append(text)
            case ReasoningContent(text):
                self.reasoning.append(text)
            case ToolCallStartContent(call_id, name):
                self.cards.append(Card(len(self.steps) - 1, call_id, name))
            case ToolCallArgsContent(call_id, _):
                self.card(call_id, "args")
            case ToolCallArgsProgressContent(call_id, name, received, fragment):
                card = self.previewing(call_id)
                if card is not None:
                    so_far = card.preview.get(name, "")
                    if not isinstance(so_far, str):
                        self.problems.append(f"progress of a non-string: {content!r}")
                        so_far = ""
                    card.preview[name] = so_far + fragment
                    size = len(card.preview[name].encode("utf-8", "surrogatepass"))
                    if received != size:
                        self.problems.append(f"received {received} != {size}: {content!r}")
            case ToolCallArgsParsedContent(call_id, name, value):
                card = self.previewing(call_id)
                if card is not None:
                    shown = card.preview.get(name)
                    if isinstance(shown, str) and shown != value:
                        self.problems.append(f"progress {shown!r} != parsed {value!r}")
                    card.preview[name] = value
            case ToolCallEndContent(call_id):
                self.card(call_id, "end")
            case ToolCallingContent(call_id):
                card = self.card(call_id, "calling")
                if card is not None:
                    card.calling = content
            case ToolCallIncompleteContent(call_id):
                card = self.card(call_id, "incomplete")
                if card is not None:
                    card.incomplete = content
            case ToolCalledContent(call_id, result, error):
                card = self.card(call_id, "called")
                if card is not None:
                    card.called = content
                if (result is None) == (error is None) and not (result == "" and error is None):
                    self.problems.append(f"a result and an error, or neither: {content!r}")
            case UsageContent(usage):
                step.usage.append(usage)
            case ErrorContent():
                self.errors.append(content)
                step.failed = True

    # ------------------------------------------------------------ invariants

    def check(self, *, tools_run: bool = False) -> None:
        """Assert the invariants; ``tools_run``: every ``ToolCallingContent`` must be answered."""
        assert self.terminal is not None, "the observable never ended"
        assert self.late == [], f"delivered after the end: {self.late!r}"
        assert self.problems == [], self.problems
        for card in self.cards:
            assert GRAMMAR.match(card.stage_line), card
            if card.calling is not None:
                assert card.calling.name == card.name
                args = card.calling.arguments
                if card.calling.error is None and isinstance(args, dict):
                    assert card.preview == args, (card, card.preview, args)
            if card.incomplete is not None and isinstance(card.incomplete.partial_value, dict):
                for key, shown in card.preview.items():
                    assert card.incomplete.partial_value.get(key) == shown, (card, key)
        for step in self.steps:
            assert step.started is not None
            assert len(step.usage) <= 1, step.usage
            if step.finish is not None and step.finish.usage is not None:
                assert step.usage == [step.finish.usage]
        assert len(self.errors) <= 1, self.errors
        if self.terminal == "completed":
            assert self.errors == []
            assert all(step.finish is not None for step in self.steps)
            for card in self.cards:
                assert card.calling is not None or card.incomplete is not None, card
                if tools_run and card.calling is not None:
                    assert card.called is not None, card
        else:
            assert all(step.finish is not None for step in self.steps[:-1])
            if isinstance(self.error, RafrxError) and self.errors:
                assert self.last_content is self.errors[-1], "the ErrorContent is not last"

    def matches(self, response: AgentResponse) -> None:
        """What the UI shows is the response built from the same items."""
        assert response.text == "".join(self.text)
        assert (response.reasoning_text or "") == "".join(self.reasoning)
        assert [c.id for c in response.tool_calls] == [card.call_id for card in self.cards]
        assert [c.name for c in response.tool_calls] == [card.name for card in self.cards]
        for call, card in zip(response.tool_calls, self.cards, strict=True):
            assert call.complete == (card.calling is not None), (call, card)
            if card.calling is not None and card.calling.error is None:
                assert call.arguments == card.calling.arguments
        answered = {card.call_id for card in self.cards if card.called is not None}
        assert {m.tool_call_id for m in response.tool_messages} == answered
        usages = [u for step in self.steps for u in step.usage]
        if usages:
            total = sum(usages[1:], usages[0])
            assert response.usage is not None
            assert response.usage.prompt_tokens == total.prompt_tokens
            assert response.usage.completion_tokens == total.completion_tokens


async def watch(
    observable: Observable[AgentResponseResult],
    *,
    dispose_when: Callable[[UI, AgentResponseResult], bool] | None = None,
    dispose_on: asyncio.Event | None = None,
    timeout: float = GUARD,
) -> UI:
    """Subscribe a :class:`UI`; return when the observable ends, or once disposed (from
    ``on_next`` when ``dispose_when`` says so, or from outside when ``dispose_on`` is set)."""
    ui = UI()
    ended = asyncio.get_running_loop().create_future()
    held: list[Any] = []

    def on_next(result: AgentResponseResult) -> None:
        ui.on_next(result)
        if dispose_when is not None and dispose_when(ui, result):
            held[0].dispose()
            if not ended.done():
                ended.set_result("disposed")

    def on_error(error: Exception) -> None:
        ui.on_error(error)
        if not ended.done():
            ended.set_result("error")

    def on_completed() -> None:
        ui.on_completed()
        if not ended.done():
            ended.set_result("completed")

    held.append(observable.subscribe(on_next, on_error, on_completed))
    if dispose_on is None:
        await asyncio.wait_for(ended, timeout)
        return ui
    stop = asyncio.ensure_future(dispose_on.wait())
    try:
        done, _ = await asyncio.wait((ended, stop), timeout=timeout, return_when="FIRST_COMPLETED")
    finally:
        stop.cancel()
    assert done, "neither ended nor told to stop in time"
    if stop in done:
        held[0].dispose()
    return ui


async def response_of(ui: UI) -> AgentResponse:
    """The response ``aggregate()`` builds from the UI's items (a failure's ``.partial``)."""
    items = reactivex.from_iterable(ui.items)
    if ui.terminal == "completed":
        return await collect_agent_response(items)
    assert isinstance(ui.error, RafrxError)
    if ui.error.partial is None:  # a bare pipeline: aggregate() sets it, re-raising the error
        with pytest.raises(type(ui.error)) as raised:
            await collect_agent_response(reactivex.concat(items, reactivex.throw(ui.error)))
        assert raised.value is ui.error
    assert ui.error.partial is not None
    return ui.error.partial


# ---------------------------------------------------------------- tools


@tool
async def write_file(path: str, text: str) -> str:
    """Write a file."""
    return f"wrote {len(text)} to {path}"


@tool
def explode(level: int) -> str:
    """Always fails."""
    raise ValueError(f"exploded at level {level}")


@tool(timeout=0.05)
async def dawdle(seconds: float) -> str:
    """Takes too long."""
    await asyncio.sleep(seconds)
    return "late"  # pragma: no cover


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file (asks first)."""
    return f"removed {path}"


@tool
async def wait(ms: int) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(ms / 1000)
    return f"waited {ms}"


def user(text: str = "go") -> list[ChatMessage]:
    return [ChatMessage.user(text)]


# ---------------------------------------------------------------- recorded fixtures


@pytest.mark.asyncio
@pytest.mark.parametrize("entry", REPLAYED, ids=[e["path"] for e in REPLAYED])
async def test_every_recorded_stream_keeps_the_ui_invariants(
    entry: dict[str, Any], llm_server: LLMServer
) -> None:
    """Each recorded body, replayed over HTTP in odd-sized writes and run through
    ``convert()`` and ``execute_tools()`` (no tools: every call is answered with an
    error), gives cards whose stages, previews, steps and text the UI can trust."""
    llm_server.enqueue(Replay(FIXTURES / entry["path"], chunk_size=13))
    async with CLIENTS[entry["format"]](llm_server.url, model="m") as client:
        ui = await watch(client.stream(user()).pipe(ops.convert(), ops.execute_tools([])))
    ui.check(tools_run=True)
    assert len(ui.steps) == 1
    response = await response_of(ui)
    ui.matches(response)
    expected = entry["expected"]
    if ui.terminal == "completed":
        assert "".join(ui.text) == expected["text"] + (expected.get("refusal") or "")
        complete = [card for card in ui.cards if card.calling is not None]
        assert [card.name for card in complete] == [
            c["name"] for c in expected["tool_calls"] if c.get("complete", True)
        ][: len(complete)]
        for card in complete:  # an unknown tool: answered, with an error naming it
            assert card.called is not None
            assert card.called.error is not None
            assert card.name in card.called.error
    else:
        assert ui.errors, "a failed stream says why before its error"
        assert response.interrupted


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "path",
    [e["path"] for e in REPLAYED if e["expected"]["tool_calls"]],
)
async def test_recorded_tool_calls_event_by_event_as_an_agent_step(
    path: str, llm_server: LLMServer
) -> None:
    """A recorded tool-call response, paced event by event, as the first step of an agent
    turn whose tools carry the recorded names: every complete call runs once, its card
    closes before the next step starts, and the turn's cards match its response."""
    entry = next(e for e in MANIFEST if e["path"] == path)
    names = {c["name"] for c in entry["expected"]["tool_calls"]}
    ran: list[tuple[str, Any]] = []

    def make(name: str) -> Any:
        async def run(**kwargs: Any) -> str:
            ran.append((name, kwargs))
            return f"{name} ok"

        return run

    tools = [Tool(name, "A recorded tool.", ANY_OBJECT, make(name)) for name in sorted(names)]
    llm_server.enqueue(Replay(FIXTURES / path, pacing=True), Reply(text="all done"))
    async with CLIENTS[entry["format"]](llm_server.url, model="m") as client:
        ui = await watch(Agent(client, tools=tools).run("go"))
    ui.check(tools_run=True)
    response = await response_of(ui)
    ui.matches(response)
    complete = [card for card in ui.cards if card.calling is not None]
    if ui.terminal == "completed" and complete:
        assert len(ui.steps) == 2
        assert "".join(ui.text).endswith("all done")
    assert sorted(name for name, _ in ran) == sorted(
        card.name for card in complete if card.calling and card.calling.error is None
    )


# ---------------------------------------------------------------- scripted turns


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_three_step_turn_with_failing_tools_settles_every_card(
    fmt: str, llm_server: LLMServer
) -> None:
    """Text, reasoning and four kinds of failing call in step 1, a long unicode argument
    one character a chunk in step 2, the answer in step 3: every card settles in its
    step, each failure says why on its own card, and nothing is lost or doubled."""
    long_text = 'héllo “wörld” 😀 \\ " \n' * 6
    llm_server.enqueue(
        Reply(
            text="Let me try.",
            reasoning="Several tools.",
            tool_calls=[
                ToolCallSpec("explode", {"level": 3}),
                ToolCallSpec("dawdle", {"seconds": 5}),
                ToolCallSpec("vanish", {"x": 1}),
                ToolCallSpec("write_file", '{"path": "a.txt", "text": '),
                ToolCallSpec("write_file", {"path": 7, "text": "x"}),
            ],
        ),
        Reply(
            tool_calls=[ToolCallSpec("write_file", {"path": "b.txt", "text": long_text})],
            chunk_size=1,
        ),
        Reply(text="Done, mostly.", reasoning="Summing up."),
    )
    async with CLIENTS[fmt](llm_server.url, model="m") as client:
        agent = Agent(client, tools=[explode, dawdle, write_file])
        ui = await watch(agent.run("go"))
    ui.check(tools_run=True)
    assert ui.terminal == "completed"
    assert len(ui.steps) == 3
    assert [card.step for card in ui.cards] == [0, 0, 0, 0, 0, 1]
    errors = [card.called.error if card.called else None for card in ui.cards]
    assert errors[0] is not None
    assert "ValueError: exploded at level 3" in errors[0]
    assert errors[1] is not None
    assert "dawdle" in errors[1]
    assert errors[2] is not None
    assert "unknown tool 'vanish'" in errors[2]
    assert errors[3] is not None
    assert "invalid" in errors[3]
    assert errors[4] is not None
    assert "path" in errors[4]
    last = ui.cards[-1]
    assert last.preview == {"path": "b.txt", "text": long_text}
    assert last.called is not None
    assert last.called.result == f"wrote {len(long_text)} to b.txt"
    assert "".join(ui.text) == "Let me try.Done, mostly."
    response = await response_of(ui)
    ui.matches(response)
    assert response.text == "Let me try.Done, mostly."
    assert response.turn_transcript[-1].content == "Done, mostly."


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("answer", ["approve", "deny", "timeout", "raise", "none"])
async def test_an_approval_shows_on_its_card_between_calling_and_called(
    fmt: str, answer: str, llm_server: LLMServer
) -> None:
    """The request shows on the call's card after ``calling`` with the same arguments, and
    the card always ends ``called``: with the result, or an error saying who said no."""
    asked: list[ToolApprovalRequestEvent] = []

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append(event)
        if answer == "timeout":
            await asyncio.sleep(GUARD)
        if answer == "raise":
            raise RuntimeError("the dialog crashed")
        return answer == "approve"

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("remove", {"path": "/tmp/x"})]), Reply(text="ok")
    )
    async with CLIENTS[fmt](llm_server.url, model="m") as client:
        agent = Agent(
            client,
            tools=[remove],
            approver=None if answer == "none" else approver,
            approval_timeout=0.2 if answer == "timeout" else None,
        )
        ui = await watch(agent.run("rm"))
    ui.check(tools_run=True)
    (card,) = ui.cards
    assert card.called is not None
    if answer == "none":
        assert card.stages[-2:] == ["calling", "called"]
        assert asked == []
        assert card.called.error is not None
        assert "no approver" in card.called.error
        return
    assert card.stages[-3:] == ["calling", "approval", "called"]
    assert card.approval is not None
    assert asked == [card.approval]
    assert card.approval.arguments == {"path": "/tmp/x"}
    expected = {
        "approve": "removed /tmp/x",
        "deny": "denied",
        "timeout": "no answer to its approval request within 0.2 s",
        "raise": "RuntimeError: the dialog crashed",
    }[answer]
    shown = card.called.result if answer == "approve" else card.called.error
    assert shown is not None
    assert expected in shown


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_eager_tools_finishing_out_of_order_keep_each_card_in_order(
    fmt: str, llm_server: LLMServer
) -> None:
    """With eager tools a result may come before the step's finish and in any order; each
    card still goes start → args → end → calling → called, and the response lists the
    results in start order while the UI saw them as they finished."""
    llm_server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("wait", {"ms": 120}),
                ToolCallSpec("wait", {"ms": 1}),
                ToolCallSpec("wait", {"ms": 40}),
            ],
            chunk_size=3,
            delay=0.003,
        ),
        Reply(text="ok"),
    )
    async with CLIENTS[fmt](llm_server.url, model="m") as client:
        ui = await watch(Agent(client, tools=[wait], eager_tools=True).run("go"))
    ui.check(tools_run=True)
    assert ui.terminal == "completed"
    called = [c for r in ui.items for c in r.contents if isinstance(c, ToolCalledContent)]
    ids = [card.call_id for card in ui.cards]
    assert [c.call_id for c in called] != ids  # they finished out of order
    assert next(c.result for c in called) == "waited 1"
    response = await response_of(ui)
    ui.matches(response)
    assert [m.tool_call_id for m in response.tool_messages] == ids
    assert [m.content for m in response.tool_messages] == ["waited 120", "waited 1", "waited 40"]


# ---------------------------------------------------------------- failures


def _step2_fault(kind: str) -> Fault:
    slow = Reply(text="The answer is on its way, slowly.", chunk_size=2)
    return {
        "drop": Fault.drop_after(1, body=slow, reset=True),
        "500": Fault.status(500),
        "429": Fault.status(429, retry_after=0),
        "garbage": Fault.garbage(b"{not json at all", framed=True, body=slow),
        "stall": Fault.stall(GUARD / 4, after_bytes=200, body=slow),
    }[kind]


_STEP2_ERRORS = {
    "drop": StreamInterrupted,
    "500": HTTPStatusError,
    "429": HTTPStatusError,
    "garbage": MalformedEvent,
    "stall": IdleTimeout,
}


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", list(_STEP2_ERRORS))
async def test_a_fault_in_the_second_step_keeps_the_first_steps_cards(
    fmt: str, kind: str, llm_server: LLMServer
) -> None:
    """The tool ran in step 1; step 2 fails. The UI keeps step 1's settled card and its
    result, sees step 2 start and fail with one ErrorContent as its last content, gets a
    typed error whose partial holds what it showed, and nothing after it."""
    llm_server.enqueue(
        Reply(text="Writing.", tool_calls=[ToolCallSpec("write_file", {"path": "p", "text": "t"})]),
        _step2_fault(kind),
    )
    timeouts = Timeouts(first_byte=2.0, idle=0.25)
    async with CLIENTS[fmt](llm_server.url, model="m", timeouts=timeouts) as client:
        ui = await watch(Agent(client, tools=[write_file]).run("go"))
        await asyncio.sleep(0.05)  # anything late would come now
    ui.check(tools_run=True)
    assert ui.terminal == "error"
    assert isinstance(ui.error, _STEP2_ERRORS[kind])
    assert len(ui.steps) == 2
    assert ui.steps[0].finish is not None
    assert ui.steps[1].finish is None
    assert len(ui.errors) == 1
    assert ui.last_content is ui.errors[0]
    (card,) = ui.cards
    assert card.stage_line.endswith("end calling called")
    assert card.called is not None
    assert card.called.result == "wrote 1 to p"
    partial = await response_of(ui)
    assert partial.interrupted
    ui.matches(partial)
    assert [m.content for m in partial.tool_messages] == ["wrote 1 to p"]
    if isinstance(ui.error, HTTPStatusError):
        assert ui.error.status == int(kind)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", ["drop", "stall"])
async def test_a_stream_failing_mid_arguments_cuts_the_card_with_its_preview(
    fmt: str, how: str, llm_server: LLMServer
) -> None:
    """The connection drops (or goes silent past a small idle timeout) inside a long string
    argument: the card ends ``incomplete``, never runs, and its ``partial_value`` shows
    exactly the preview the UI built from Progress contents."""
    ran: list[str] = []

    @tool
    async def save(path: str, text: str) -> str:
        """Save."""
        ran.append(path)  # pragma: no cover
        return "saved"  # pragma: no cover

    full = "def f():\n" * 60
    body = render(
        Reply(
            text="Saving.",
            tool_calls=[ToolCallSpec("save", {"path": "a.py", "text": full})],
            chunk_size=6,
        ),
        fmt,
    )
    at = body.index(b"def f") + 150
    if how == "drop":
        llm_server.enqueue(Fault.drop_after(at, body=body))
    else:
        llm_server.enqueue(Fault.stall(GUARD / 2, after_bytes=at, body=body))
    timeouts = Timeouts(idle=0.2)
    async with CLIENTS[fmt](llm_server.url, model="m", timeouts=timeouts) as client:
        ui = await watch(Agent(client, tools=[save]).run("save it"))
    ui.check(tools_run=True)
    assert isinstance(ui.error, StreamInterrupted if how == "drop" else IdleTimeout)
    assert ran == []
    (card,) = ui.cards
    assert card.stages[-1] == "incomplete"
    assert card.incomplete is not None
    assert card.incomplete.error == "arguments cut short: the stream ended before the call did"
    shown = card.preview["text"]
    assert 0 < len(shown) < len(full)
    assert full.startswith(shown)  # what came, exactly: no more, no less
    assert card.incomplete.partial_value == card.preview
    assert ui.last_content is ui.errors[0]
    partial = await response_of(ui)
    ui.matches(partial)
    assert partial.tool_calls[0].partial_value == card.preview
    assert partial.text == "Saving."


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_call_cut_by_the_token_limit_ends_incomplete_and_the_turn_completes(
    fmt: str, llm_server: LLMServer
) -> None:
    """``finish: length`` mid-arguments: the card ends ``incomplete`` with the finish
    reason, never runs, and the turn completes in one step (nothing for the model to read)."""
    llm_server.enqueue(
        Reply(
            tool_calls=[ToolCallSpec("write_file", '{"path": "x", "text": "abc')],
            finish=FinishReason.LENGTH,
        ),
        Reply(text="should not be asked"),
    )
    async with CLIENTS[fmt](llm_server.url, model="m") as client:
        ui = await watch(Agent(client, tools=[write_file]).run("go"))
    ui.check(tools_run=True)
    assert ui.terminal == "completed"
    assert len(ui.steps) == 1
    (card,) = ui.cards
    assert card.stages[-1] == "incomplete"
    assert card.called is None
    assert card.incomplete is not None
    assert card.incomplete.finish_reason is FinishReason.LENGTH
    assert card.incomplete.partial_value == card.preview == {"path": "x", "text": "abc"}
    assert len(llm_server.requests) == 1
    ui.matches(await response_of(ui))


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_max_steps_exceeded_ends_with_every_card_answered(
    fmt: str, llm_server: LLMServer
) -> None:
    """A model that never stops calling tools: after ``max_steps`` the turn fails with
    ``MaxStepsExceeded``, every card it showed is answered, and the partial agrees."""
    llm_server.script(
        lambda request: Reply(tool_calls=[ToolCallSpec("wait", {"ms": len(request.messages)})])
    )
    async with CLIENTS[fmt](llm_server.url, model="m") as client:
        ui = await watch(Agent(client, tools=[wait], max_steps=3).run("loop"))
    ui.check(tools_run=True)
    assert isinstance(ui.error, MaxStepsExceeded)
    assert ui.errors == []  # not a stream failure: no ErrorContent
    assert len(ui.steps) == 3
    assert all(step.finish is not None for step in ui.steps)
    assert [card.step for card in ui.cards] == [0, 1, 2]
    assert all(card.called is not None for card in ui.cards)
    ui.matches(await response_of(ui))


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_retried_failures_never_show_as_a_step(fmt: str, llm_server: LLMServer) -> None:
    """A 429 then a 503 then the answer, with retries on: the UI sees one step, one start,
    no ErrorContent, and the answer's text once."""
    llm_server.enqueue(
        Fault.status(429, retry_after=0),
        Fault.status(503),
        Reply(text="third time lucky", chunk_size=3),
    )
    retry = RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False)
    async with CLIENTS[fmt](llm_server.url, model="m", retry=retry) as client:
        ui = await watch(Agent(client).run("go"))
    ui.check()
    assert ui.terminal == "completed"
    assert len(ui.steps) == 1
    assert ui.errors == []
    assert "".join(ui.text) == "third time lucky"
    assert len(llm_server.requests) == 3


@pytest.mark.asyncio
async def test_an_overloaded_error_right_after_message_start_is_retried_unseen(
    llm_server: LLMServer,
) -> None:
    """Anthropic's ``overloaded_error`` right after ``message_start``: retried before any
    content, so the UI sees the second attempt's response only (its id, its text)."""
    failed = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_failed",'
        b'"type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,'
        b'"usage":{"input_tokens":5,"output_tokens":1}}}\n\n'
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"Overloaded"}}\n\n'
    )
    llm_server.enqueue(Replay(failed), Reply(text="second try"))
    retry = RetryPolicy(initial_backoff=0.01, jitter=False)
    async with AnthropicClient(llm_server.url, model="m", retry=retry) as client:
        ui = await watch(Agent(client).run("go"))
    ui.check()
    (step,) = ui.steps
    assert step.started is not None
    assert step.started.id != "msg_failed"
    assert "".join(ui.text) == "second try"
    assert all(r.id != "msg_failed" for r in ui.items)


# ---------------------------------------------------------------- disposal


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", ["text", "args", "calling", "running", "approval"])
async def test_disposing_mid_stream_or_mid_tool_delivers_nothing_more(
    fmt: str, where: str, llm_server: LLMServer
) -> None:
    """A UI closing the turn from its own ``on_next`` (on text, mid-arguments, on the call,
    on an approval request) or from outside while the tool runs: nothing more arrives, no
    tool runs to its end (none even starts once the UI saw its call: it is disposed before),
    no approver is asked, and what was shown is a valid prefix of the lifecycle."""
    finished: list[str] = []
    asked: list[str] = []
    started = asyncio.Event()

    @tool
    async def crawl(url: str, note: str = "") -> str:
        """Crawl slowly."""
        started.set()
        await asyncio.sleep(GUARD)
        finished.append(url)  # pragma: no cover
        return "page"  # pragma: no cover

    @tool(requires_approval=True)
    async def deploy(env: str, note: str = "") -> str:
        """Deploy (asks first)."""
        finished.append(env)  # pragma: no cover
        return "deployed"  # pragma: no cover

    async def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append(event.call_id)  # pragma: no cover
        return True  # pragma: no cover

    name, args = ("deploy", {"env": "prod"}) if where == "approval" else ("crawl", {"url": "u"})
    llm_server.enqueue(
        Reply(
            text="Going to " + "work " * 20,
            tool_calls=[ToolCallSpec(name, {**args, "note": "n" * 80})],
            chunk_size=4,
            delay=0.002,
        ),
        Reply(text="never"),
    )

    def close(ui: UI, result: AgentResponseResult) -> bool:
        kinds = {
            "text": TextContent,
            "args": ToolCallArgsProgressContent,
            "calling": ToolCallingContent,
        }
        if where == "approval":
            return any(isinstance(e, ToolApprovalRequestEvent) for e in result.events)
        if where == "running":
            return False
        return any(isinstance(c, kinds[where]) for c in result.contents)

    async with CLIENTS[fmt](llm_server.url, model="m") as client:
        agent = Agent(client, tools=[crawl, deploy], approver=approver)
        running = started if where == "running" else None
        ui = await watch(agent.run("go"), dispose_when=close, dispose_on=running)
        delivered = len(ui.items)
        await asyncio.sleep(0.15)
    assert len(ui.items) == delivered
    assert ui.terminal is None
    assert ui.problems == []
    assert finished == []
    assert asked == []
    assert started.is_set() == (where == "running")
    assert len(llm_server.requests) == 1
    for card in ui.cards:
        assert GRAMMAR.match(card.stage_line), card
        assert card.called is None


# ---------------------------------------------------------------- UI answers


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_ui_answering_through_a_subject_from_on_next_runs_the_call(
    fmt: str, llm_server: LLMServer
) -> None:
    """The usual UI wiring: the approver is a ``Subject`` the UI pushes its answers into
    from ``on_next`` as soon as the request shows; two calls, one approved one denied,
    each answered on its own card."""
    from reactivex.subject import Subject

    from rafrx.tools import ToolApprovalResponse

    answers: Subject[ToolApprovalResponse] = Subject()
    llm_server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("remove", {"path": "keep.txt"}),
                ToolCallSpec("remove", {"path": "junk.txt"}),
            ]
        ),
        Reply(text="ok"),
    )

    def answer(ui: UI, result: AgentResponseResult) -> bool:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                ok = event.arguments["path"] == "junk.txt"
                answers.on_next(ToolApprovalResponse(event.call_id, ok, reason="kept"))
        return False

    async with CLIENTS[fmt](llm_server.url, model="m") as client:
        agent = Agent(client, tools=[remove], approver=answers, approval_timeout=GUARD / 2)
        ui = await watch(agent.run("clean"), dispose_when=answer)
    ui.check(tools_run=True)
    keep, junk = ui.cards
    assert keep.called is not None
    assert keep.called.error is not None
    assert "kept" in keep.called.error
    assert junk.called is not None
    assert junk.called.result == "removed junk.txt"
    ui.matches(await response_of(ui))


@pytest.mark.asyncio
async def test_the_ui_model_itself_flags_broken_orders() -> None:
    """The checker is not vacuous: a lifecycle out of order, an item after completion,
    a wrong preview and a card left running on completion are all caught."""
    start = ResponseStartedEvent("r", "m")
    finish = FinishEvent(FinishReason.STOP)

    def fed(items: Sequence[AgentResponseResult]) -> UI:
        ui = UI()
        for item in items:
            ui.on_next(item)
        ui.on_completed()
        return ui

    out_of_order = fed(
        [
            AgentResponseResult(contents=(ToolCallStartContent("c", "f"),), events=(start,)),
            AgentResponseResult(contents=(ToolCallingContent("c", "f", {}),)),
            AgentResponseResult(contents=(ToolCallEndContent("c"),), events=(finish,)),
        ]
    )
    with pytest.raises(AssertionError):
        out_of_order.check()
    late = fed([AgentResponseResult(contents=(TextContent("a"),), events=(start, finish))])
    late.on_next(AgentResponseResult(contents=(TextContent("b"),)))
    with pytest.raises(AssertionError):
        late.check()
    wrong_preview = fed(
        [
            AgentResponseResult(contents=(ToolCallStartContent("c", "f"),), events=(start,)),
            AgentResponseResult(
                contents=(
                    ToolCallArgsContent("c", '{"a": "xy"}'),
                    ToolCallArgsProgressContent("c", "a", 1, "x"),
                    ToolCallArgsParsedContent("c", "a", "xy"),
                )
            ),
            AgentResponseResult(contents=(ToolCallEndContent("c"),), events=(finish,)),
            AgentResponseResult(contents=(ToolCallingContent("c", "f", {"a": "xy"}),)),
        ]
    )
    with pytest.raises(AssertionError):
        wrong_preview.check()
    running = fed(
        [
            AgentResponseResult(contents=(ToolCallStartContent("c", "f"),), events=(start,)),
            AgentResponseResult(contents=(ToolCallEndContent("c"),), events=(finish,)),
            AgentResponseResult(contents=(ToolCallingContent("c", "f", {}),)),
        ]
    )
    running.check()
    with pytest.raises(AssertionError):
        running.check(tools_run=True)


# ---------------------------------------------------------------- found by this hunt


@pytest.mark.asyncio
async def test_a_busy_loop_while_bytes_keep_arriving_is_not_an_idle_timeout() -> None:
    """The server (on its own thread, as a real provider) sends a byte every 20 ms, so
    the stream is never silent, while another pane's synchronous render holds the UI's
    loop 0.5 s, three times, longer than the 0.3 s idle timeout. The loop then reads
    the socket and runs the idle timer before the reading task sees the bytes: the
    timer counts them, and the stream goes on to its end."""
    loop = asyncio.get_running_loop()
    with LLMServer.in_thread() as server:
        server.enqueue(Reply(text="b" * 120, chunk_size=1, delay=0.02))
        timeouts = Timeouts(idle=0.3)
        async with OpenAIChatClient(server.url, model="m", timeouts=timeouts) as client:
            started = False

            def busy_once_streaming(ui: UI, result: AgentResponseResult) -> bool:
                nonlocal started
                if not started and ui.text:  # (streaming: the first text came)
                    started = True
                    for at in (0.05, 0.7, 1.35):  # another pane's heavy render, now and then
                        loop.call_later(at, time.sleep, 0.5)
                return False

            stream = client.stream([ChatMessage.user("b")]).pipe(ops.convert())
            ui = await watch(stream, dispose_when=busy_once_streaming)
    assert started
    assert ui.terminal == "completed", ui.error
    assert "".join(ui.text) == "b" * 120
    ui.check()


@pytest.mark.asyncio
async def test_a_responses_call_reusing_a_call_id_is_a_card_of_its_own(
    llm_server: LLMServer,
) -> None:
    """Two ``function_call`` items, each with its own item id, repeat one ``call_id``
    (a Responses-compatible server's; OpenAI's are unique): the model asked for two
    writes, so the UI shows two cards, both run, under distinct ids (the second with
    ``_2``, as the chat dialect names a repeated id), and the next request pairs each
    output with its call."""
    ran: list[str] = []

    @tool
    async def write(path: str) -> str:
        """Write."""
        ran.append(path)
        return f"wrote {path}"

    llm_server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("write", {"path": "a"}, id="call_same"),
                ToolCallSpec("write", {"path": "b"}, id="call_same"),
            ]
        ),
        Reply(text="ok"),
    )
    async with OpenAIResponsesClient(llm_server.url, model="m") as client:
        ui = await watch(Agent(client, tools=[write]).run("go"))
    assert ui.terminal == "completed", ui.error
    ui.check()
    first = [card for card in ui.cards if card.step == 0]
    assert [card.call_id for card in first] == ["call_same", "call_same_2"]
    assert all(card.stage_line.endswith(" end calling called") for card in first)
    assert [card.preview for card in first] == [{"path": "a"}, {"path": "b"}]
    assert sorted(ran) == ["a", "b"]
    items = llm_server.requests[-1].body["input"]
    calls = [
        (i["call_id"], json.loads(i["arguments"]))
        for i in items
        if i.get("type") == "function_call"
    ]
    outputs = [
        (i["call_id"], i["output"]) for i in items if i.get("type") == "function_call_output"
    ]
    assert calls == [("call_same", {"path": "a"}), ("call_same_2", {"path": "b"})]
    assert outputs == [("call_same", "wrote a"), ("call_same_2", "wrote b")]
