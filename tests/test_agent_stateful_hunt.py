"""A model-based (stateful) hunt of the agent loop and its history.

A :class:`~hypothesis.stateful.RuleBasedStateMachine` drives one real
:class:`rafrx.Agent` over real HTTP against :class:`rafrx.testing.LLMServer`,
turn after turn, in each wire format: turns whose scripted replies are text,
reasoning and text, or tool calls (tools that fail, are slow, need an approval
granted or denied, are unknown, get invalid JSON or arguments cut by the token
limit) then an answer; turns that fail (HTTP 500/429, a drop mid-stream, an
in-band error) with and without a ``RetryPolicy``; turns disposed mid-way;
``max_steps`` exceeded; the agent's client switched to another wire format
between turns (same history); a JSON-lines history on disk reloaded by a fresh
agent between turns, or left half-saved by another process; eager tools toggled;
Kimi's call ids reused from turn to turn; turns disposed at any result or in the
middle of their (slow) save.

The model is the list of messages the history must hold. After every step:
the history holds each completed turn's input and transcript once, in order,
and nothing of a failed or disposed turn (``Agent.run``: "the client's errors
end the turn (nothing is saved)"); each call has exactly one result
(``paired`` is a no-op on it); every request of the turn obeys its API, starts
with the history in order, grows step by step, sends reasoning back as the
README says; usage sums; no turn task nor connection is left behind.

``RAFRX_STATEFUL_EXAMPLES=150`` hunts deeper; ``RAFRX_NO_SHRINK=1`` skips shrinking.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from reactivex import operators as rxops

from rafrx import (
    Agent,
    AgentResponseResult,
    InMemoryHistoryProvider,
    RetryPolicy,
    collect_agent_response,
)
from rafrx.content import TextContent
from rafrx.errors import HTTPStatusError, MaxStepsExceeded, RafrxError
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import is_new
from rafrx.messages import (
    LOST_RESULT,
    ChatMessage,
    MessageRole,
    MessageSource,
    paired,
)
from rafrx.response import FinishReason, Usage
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.testing import Fault, LLMServer, RecordedRequest, Replay, Reply, ToolCallSpec, render
from rafrx.tools import tool
from tests.test_agent_wire import wire_of, wire_problems
from tests.test_sdk_request_types import body_problems

GUARD = 10.0  # seconds, against hangs only
FORMATS = ("openai-chat", "anthropic", "openai-responses")
CLIENTS: dict[str, Any] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
#: Chat fields rafrx sends on purpose that OpenAI's SDK types lack.
CHAT_EXTENSIONS = ("reasoning_details", "thinking_blocks", "extra_content")
INSTRUCTIONS = "Be brief."
RETRY = RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.01, jitter=False)


# ================================================================ tools


class Probe:
    """What the tools saw, per machine (the tools are module-level)."""

    def __init__(self) -> None:
        self.started: asyncio.Event | None = None
        self.cancelled = 0
        self.approvals: list[str] = []  # call ids the approver was asked about
        self.hung_approvals = 0


PROBE = Probe()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def boom(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"kaput: {reason}")


@tool
async def slow(ms: int) -> str:
    """Sleep a little."""
    await asyncio.sleep(ms / 1000)
    return f"slept {ms}"


@tool
async def hang(n: int) -> str:
    """Never returns (until cancelled)."""
    assert PROBE.started is not None
    PROBE.started.set()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        PROBE.cancelled += 1
        raise
    return "never"


@tool(requires_approval=True)
def guarded(x: int) -> str:
    """Needs approval: even ``x`` is granted, odd denied, 999 never answered."""
    return f"guarded {x}"


TOOLS = [add, boom, slow, hang, guarded]


async def approver(event: ToolApprovalRequestEvent) -> bool:
    PROBE.approvals.append(event.call_id)
    x = event.arguments.get("x") if isinstance(event.arguments, dict) else None
    if x == 999:
        if PROBE.started is not None:
            PROBE.started.set()
        PROBE.hung_approvals += 1
        await asyncio.sleep(60)
    return isinstance(x, int) and x % 2 == 0


class Context:
    """A context provider that records what it is given; never saved."""

    def __init__(self) -> None:
        self.given: list[list[ChatMessage]] = []

    async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        self.given.append(list(messages))
        return [ChatMessage.system(f"Context: {len(messages)} messages so far.")]


# ================================================================ a JSON history on disk


class JsonFileHistory:
    """A history provider on a JSON-lines file, one message a line, every field."""

    def __init__(self, path: Path, delay: float = 0.0) -> None:
        self.path = path
        self.delay = delay  # seconds between two lines written (a slow database)

    async def load(self) -> list[ChatMessage]:
        if not self.path.exists():
            return []
        return [
            ChatMessage.from_dict(json.loads(line)).with_source(MessageSource.CHAT_HISTORY)
            for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        for m in messages:
            if is_new(m):
                with self.path.open("a", encoding="utf-8") as file:
                    file.write(json.dumps(m.to_dict(), ensure_ascii=False) + "\n")
                if self.delay:
                    await asyncio.sleep(self.delay)


# ================================================================ the model's messages


@attrs.frozen
class Expected:
    """A message the history must hold: ``content`` ``None`` means "an error text"."""

    role: str
    content: str | None
    calls: tuple[tuple[str, str], ...] = ()
    call_id: str | None = None
    is_error: bool = False
    reasoning: str | None = None
    origin: str | None = None  # the wire format an assistant message streamed in


def actual(m: ChatMessage) -> Expected:
    return Expected(
        m.role.value,
        m.content,
        tuple((c.id, c.name) for c in m.tool_calls or ()),
        m.tool_call_id,
        m.is_error,
        m.reasoning,
    )


def matches(m: ChatMessage, e: Expected) -> bool:
    a = actual(m)
    if e.content is None:
        if not (a.is_error and a.content and a.content.startswith("Error:")):
            return False
        a = attrs.evolve(a, content=None)
    return a == attrs.evolve(e, origin=None)


def assert_history(loaded: Sequence[ChatMessage], model: Sequence[Expected]) -> None:
    got = [actual(m) for m in loaded]
    assert len(loaded) == len(model), (got, model)
    for n, (m, e) in enumerate(zip(loaded, model, strict=True)):
        assert matches(m, e), (n, actual(m), e)


def assert_paired(loaded: Sequence[ChatMessage]) -> None:
    """Each call has exactly one result, right after its assistant message, and no result
    answers nothing (ids may repeat across turns, as Kimi's do); ``paired`` is a no-op."""
    assert [m.with_source(None) for m in paired(loaded)] == [m.with_source(None) for m in loaded]
    i = 0
    while i < len(loaded):
        m = loaded[i]
        i += 1
        assert m.role is not MessageRole.TOOL, f"result {m.tool_call_id!r} answers no call"
        assert not any(not c.complete for c in m.tool_calls or ()), m
        calls = sorted(c.id for c in m.tool_calls or ())
        results: list[str] = []
        while i < len(loaded) and loaded[i].role is MessageRole.TOOL:
            results.append(str(loaded[i].tool_call_id))
            i += 1
        assert sorted(results) == calls, (calls, results)


def model_paired(model: Sequence[Expected]) -> list[Expected]:
    """What ``paired`` must make of a history (README: a loaded history with a call but
    no result is repaired before it is sent), computed on the model."""
    out: list[Expected] = []
    i = 0
    while i < len(model):
        e = model[i]
        i += 1
        if e.role == "tool":
            continue  # a result with no call just before it: dropped
        out.append(e)
        if e.role != "assistant" or not e.calls:
            continue
        results: dict[str | None, Expected] = {}
        while i < len(model) and model[i].role == "tool":
            results.setdefault(model[i].call_id, model[i])
            i += 1
        for call_id, _ in e.calls:
            lost = Expected("tool", LOST_RESULT, call_id=call_id, is_error=True)
            out.append(results.get(call_id, lost))
    return out


# ================================================================ scripting a turn

CALL_KINDS = (
    "add",
    "boom",
    "slow",
    "guarded_yes",
    "guarded_no",
    "guarded_timeout",
    "unknown",
    "badjson",
)
APPROVAL_TIMEOUT = 0.2


@attrs.frozen
class Step:
    """One LLM call that calls tools (``cut``: one more call cut by the token limit)."""

    calls: tuple[str, ...]
    text: str = ""
    reasoning: str = ""
    cut: bool = False


@attrs.frozen
class Final:
    text: str
    reasoning: str = ""
    cut_only: bool = False  # the answer is a lone call cut by the token limit


steps_st = st.builds(
    Step,
    calls=st.lists(st.sampled_from(CALL_KINDS), min_size=1, max_size=3).map(tuple),
    text=st.sampled_from(["", "Let me check."]),
    reasoning=st.sampled_from(["", "I should use a tool."]),
    cut=st.booleans(),
)
running_st = steps_st.map(lambda s: attrs.evolve(s, cut=False))  # (a step that runs on)
#: Steps with no approval left unanswered (a disposal waits for the first one).
quiet_st = running_st.map(
    lambda s: attrs.evolve(s, calls=tuple(c for c in s.calls if c != "guarded_timeout") or ("add",))
)
final_st = st.builds(
    Final,
    text=st.sampled_from(["Done.", "All set: 42.", "Voilà — fini ✓", ""]),
    reasoning=st.sampled_from(["", "The answer is clear."]),
)


class Script:
    """Replies for one turn and the transcript they must give."""

    def __init__(self, ids: itertools.count[int], fmt: str) -> None:
        self.ids = ids
        self.fmt = fmt
        self.replies: list[Reply | Fault | Replay] = []
        self.transcript: list[Expected] = []
        self.usage = Usage()
        self.raw: set[str] = set()  # ids of calls sent with invalid JSON arguments
        self.approvals: list[str] = []  # ids the approver must be asked about
        self.ended = False  # a step that ran no call ended the turn
        self.kimi = False
        self.k = 0  # calls made so far in the turn

    def _usage(self) -> Usage:
        n = len(self.replies) + 1
        usage = Usage(prompt_tokens=100 * n, completion_tokens=n, total_tokens=101 * n)
        self.usage = self.usage + usage
        return usage

    def _call(self, kind: str) -> tuple[ToolCallSpec, Expected]:
        if self.kimi and kind == "badjson":
            kind = "add"  # (raw arguments are told apart by id: keep those unique)
        n = next(self.ids)
        call_id = f"call_{n}"
        if self.kimi:  # Kimi's ids: functions.{name}:{index in the turn}, again each turn
            name = {"unknown": "nope", "badjson": "add"}.get(kind, kind.split("_")[0])
            call_id = f"functions.{name}:{self.k}"
            self.k += 1
        if kind == "add":
            spec = ToolCallSpec("add", {"a": n, "b": 2}, id=call_id)
            return spec, Expected("tool", str(n + 2), call_id=call_id)
        if kind == "boom":
            spec = ToolCallSpec("boom", {"reason": f"r{n}"}, id=call_id)
        elif kind == "slow":
            spec = ToolCallSpec("slow", {"ms": 5}, id=call_id)
            return spec, Expected("tool", "slept 5", call_id=call_id)
        elif kind == "guarded_yes":
            self.approvals.append(call_id)
            spec = ToolCallSpec("guarded", {"x": 2 * n}, id=call_id)
            return spec, Expected("tool", f"guarded {2 * n}", call_id=call_id)
        elif kind == "guarded_no":
            self.approvals.append(call_id)
            spec = ToolCallSpec("guarded", {"x": 2 * n + 1}, id=call_id)
        elif kind == "guarded_timeout":
            self.approvals.append(call_id)
            spec = ToolCallSpec("guarded", {"x": 999}, id=call_id)
        elif kind == "unknown":
            spec = ToolCallSpec("nope", {"q": n}, id=call_id)
        else:
            self.raw.add(call_id)
            spec = ToolCallSpec("add", '{"a": 1,', id=call_id)
        return spec, Expected("tool", None, call_id=call_id, is_error=True)

    def step(self, step: Step) -> None:
        if self.ended:
            return
        made = [self._call(k) for k in step.calls]
        sent = [spec for spec, _ in made]
        if step.cut:  # one more call, its arguments cut by the token limit
            sent.append(ToolCallSpec("add", '{"a": 1, "b"', id=f"call_{next(self.ids)}"))
            # (invalid arguments in an LLM call cut by its token limit: cut short too)
            made = [(spec, e) for spec, e in made if not isinstance(spec.arguments, str)]
            self.raw -= {spec.id for spec in sent if isinstance(spec.arguments, str)}
        specs = [spec for spec, _ in made]
        results = [e for _, e in made]
        self.ended = not specs  # no call to run: this was the answer
        self.replies.append(
            Reply(
                text=step.text,
                reasoning=step.reasoning,
                tool_calls=sent,
                finish="length" if step.cut else None,
                usage=self._usage(),
            )
        )
        self.transcript.append(
            Expected(
                "assistant",
                step.text,
                tuple((s.id or "", s.name) for s in specs),
                reasoning=step.reasoning or None,
                origin=self.fmt,
            )
        )
        self.transcript.extend(results)

    def final(self, final: Final) -> None:
        if self.ended:
            return
        if final.cut_only:
            cut = ToolCallSpec("add", '{"a": 1, "b"', id=f"call_{next(self.ids)}")
            self.replies.append(
                Reply(text=final.text, tool_calls=[cut], finish="length", usage=self._usage())
            )
            self.transcript.append(Expected("assistant", final.text, origin=self.fmt))
            return
        self.replies.append(Reply(text=final.text, reasoning=final.reasoning, usage=self._usage()))
        self.transcript.append(
            Expected("assistant", final.text, reasoning=final.reasoning or None, origin=self.fmt)
        )


FAULTS = ("500", "429", "drop", "drop_in_call", "inband", "inband_early")
#: Faults before anything was delivered: a retry policy retries them.
RETRIED = ("500", "429", "inband_early")
LONG = "Lorem ipsum dolor sit amet. " * 150


def fault_of(kind: str, fmt: str) -> Fault | Reply | Replay:
    if kind == "500":
        return Fault.status(500)
    if kind == "429":
        return Fault.status(429, retry_after=0)
    if kind == "drop":
        return Fault.drop_after(20_000, body=Reply(text=LONG, chunk_size=4))
    if kind == "drop_in_call":
        call = ToolCallSpec("add", {"a": 1, "b": 2, "pad": LONG}, id="call_cut_by_drop")
        return Fault.drop_after(20_000, body=Reply(text="Hm.", tool_calls=[call], chunk_size=4))
    if kind == "inband_early" and fmt != "openai-chat":  # right after message_start & co
        return Reply(finish="error")
    if fmt == "openai-chat":  # an error object in the stream, as compatible servers send
        text = "" if kind == "inband_early" else "partial answer"
        head = render(Reply(text=text), "openai-chat").split(b"\n\n")[: -3 if text else 1]
        error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}'
        return Replay(b"\n\n".join([*head, error]) + b"\n\n")
    return Reply(text="partial answer", finish="error")


# ================================================================ the machine


def request_problems(fmt: str, request: RecordedRequest, raw: frozenset[str]) -> list[str]:
    out = [p for p in wire_problems(request, raw) if not p.startswith("duplicate tool call ids")]
    out += [
        p
        for p in body_problems(fmt, request.json)
        if not any(f"has no field '{ext}'" in p for ext in CHAT_EXTENSIONS)
    ]
    return out


def user_texts(fmt: str, request: RecordedRequest) -> list[str]:
    out: list[str] = []
    for item in request.messages:
        if item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            texts = [b.get("text") for b in content if b.get("type") in ("text", "input_text")]
            if texts:
                out.append("".join(texts))
    return out


def call_ids(request: RecordedRequest) -> tuple[list[str], list[str]]:
    """(call ids, result ids) as sent, in order, in any format."""
    calls: list[str] = []
    results: list[str] = []
    for item in request.messages:
        kind = item.get("type")
        if kind == "function_call":
            calls.append(item["call_id"])
        elif kind == "function_call_output":
            results.append(item["call_id"])
        calls += [c["id"] for c in item.get("tool_calls") or ()]
        if item.get("role") == "tool":
            results.append(item["tool_call_id"])
        content = item.get("content")
        if isinstance(content, list):
            calls += [b["id"] for b in content if b.get("type") == "tool_use"]
            results += [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
    return calls, results


def reasoning_sent(fmt: str, request: RecordedRequest) -> int:
    """How many past reasoning blocks went back (thinking blocks, reasoning items, or
    non-empty ``reasoning_content``)."""
    n = 0
    for item in request.messages:
        if fmt == "openai-responses":
            n += item.get("type") == "reasoning"
        elif fmt == "anthropic":
            content = item.get("content")
            if isinstance(content, list):
                n += sum(b.get("type") == "thinking" for b in content)
        else:
            n += bool(item.get("reasoning_content"))
    return n


class AgentMachine(RuleBasedStateMachine):
    start_fmt = "openai-chat"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.ids = itertools.count(1)
        self.model: list[Expected] = []
        self.turns = 0
        self.fmt = self.start_fmt
        self.tmp = Path(tempfile.mkdtemp(prefix="rafrx-stateful-"))
        self.path = self.tmp / "h.jsonl"
        self.server = LLMServer()
        self.run(self.server.start())
        self.clients = {f: CLIENTS[f](self.server.url, "sk-test", "m") for f in FORMATS}
        self.used: set[str] = set()
        self.raw: frozenset[str] = frozenset()
        self.kimi = False  # some turn reused call ids (Kimi's)
        self.context = Context()
        self.agent: Agent | None = None
        self.kind = "memory"
        PROBE.started = None
        PROBE.cancelled = 0
        PROBE.approvals.clear()
        PROBE.hung_approvals = 0

    def run(self, coro: Any) -> Any:
        async def guarded() -> Any:
            async with asyncio.timeout(30):
                return await coro

        return self.loop.run_until_complete(guarded())

    def new_agent(self, history: Any) -> Agent:
        return Agent(
            self.clients[self.fmt],
            tools=TOOLS,
            instructions=INSTRUCTIONS,
            history=history,
            context_providers=[self.context],
            approver=approver,
            approval_timeout=APPROVAL_TIMEOUT,
        )

    def teardown(self) -> None:
        async def close() -> None:
            for client in self.clients.values():
                await client.aclose()
            await self.server.wait_connections_closed(5)
            current = asyncio.current_task()
            others = {t for t in asyncio.all_tasks() if t is not current and not t.done()}
            if others:
                await asyncio.wait(others, timeout=1.0)
            leaked = [t for t in others if not t.done()]
            await self.server.close()
            assert not leaked, leaked

        try:
            self.run(close())
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ set up

    @initialize(kind=st.sampled_from(["memory", "json"]))
    def start(self, kind: str) -> None:
        self.kind = kind
        history: Any = (
            InMemoryHistoryProvider() if kind == "memory" else JsonFileHistory(self.path, 0.001)
        )
        self.agent = self.new_agent(history)

    # ------------------------------------------------------------ helpers

    async def loaded(self) -> list[ChatMessage]:
        assert self.agent is not None
        assert self.agent.history is not None
        return list(await self.agent.history.load())

    def begin(self, replies: Sequence[Reply | Fault | Replay]) -> tuple[str, list[ChatMessage]]:
        self.turns += 1
        self.used.add(self.fmt)
        self.server.reset()
        self.server.enqueue(*replies)
        self.context.given.clear()
        before = self.run(self.loaded())
        return f"Question {self.turns}?", before

    def check_requests(
        self,
        text: str,
        before: Sequence[ChatMessage],
        raw: frozenset[str],
        requests: int | None = None,
    ) -> list[RecordedRequest]:
        got = list(self.server.requests)
        raw = raw | self.raw  # (the history's own calls with invalid JSON go back as they came)
        if requests is not None:
            assert len(got) == requests, [r.messages for r in got]
        assert got, "no request"
        for n, request in enumerate(got):
            assert request.wire_format == self.fmt
            assert request_problems(self.fmt, request, raw) == [], (n, request.json)
        # the first request: instructions and context, then the history in order, then the input
        first = got[0]
        new = ChatMessage.user(text, source=MessageSource.EXTERNAL)
        sent_model = model_paired(self.model)
        expected_users = [e.content for e in sent_model if e.role == "user"] + [text]
        assert user_texts(self.fmt, first) == expected_users
        calls, results = call_ids(first)
        want_calls = [c for e in sent_model for c, _ in e.calls]
        want_results = [e.call_id for e in sent_model if e.role == "tool"]
        if self.kimi and self.fmt != "openai-chat":  # (ids made unique, Anthropic's charset)
            assert len(calls) == len(set(calls)) == len(want_calls)
            assert len(results) == len(want_results)
        else:
            assert calls == want_calls
            assert results == want_results
        wire = wire_of(self.fmt, [*paired(before), new])
        sent = [m for m in first.messages if m.get("role") != "system"]
        assert sent == wire
        if self.fmt == "anthropic":
            assert INSTRUCTIONS in first.body.get("system", "")
        else:
            assert first.messages[0] in (
                {"role": "system", "content": INSTRUCTIONS},
                {"role": "developer", "content": INSTRUCTIONS},
            ), first.messages[0]
        # reasoning goes back as the README says
        with_reasoning = [e for e in sent_model if e.role == "assistant" and e.reasoning]
        if self.fmt == "openai-chat":
            want = len(with_reasoning)  # reasoning_content, whatever streamed it
        else:
            want = sum(e.origin == self.fmt for e in with_reasoning)  # the provider's own
        assert reasoning_sent(self.fmt, first) == want, first.messages
        # the context provider is given the history and the new input, never saves
        given = [m.content for m in self.context.given[0]]
        assert given == [*(m.content for m in paired(before)), text]
        # each request of the turn starts with the one before
        # (DeepSeek's rule: once a reasoning comes, each call message carries one, "" or not)
        for n in range(1, len(got)):
            before_n, after_n = (
                [{k: v for k, v in m.items() if (k, v) != ("reasoning_content", "")} for m in r]
                for r in (got[n - 1].messages, got[n].messages)
            )
            assert after_n[: len(before_n)] == before_n, n
        return got

    async def settle(self) -> None:
        """No turn task left, and no connection beyond one kept alive per client."""
        for _ in range(200):
            turns = [t for t in asyncio.all_tasks() if t.get_name() == "rafrx turn"]
            if not turns and self.server.open_connections <= len(self.used):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"left behind: {turns}, {self.server.open_connections} connections")

    def ok(self, text: str, before: list[ChatMessage], script: Script) -> None:
        assert self.agent is not None
        results: list[AgentResponseResult] = []
        turn = self.agent.run(text).pipe(rxops.do_action(results.append))
        response = self.run(collect_agent_response(turn, agent_id=self.agent.id))
        self.run(self.settle())
        got = self.check_requests(text, before, frozenset(script.raw), len(script.replies))
        # one ResponseStartedEvent and one FinishEvent per LLM call that answered (a retried
        # attempt shows nothing), one approval request per call that needs one
        events = [type(e) for r in results for e in r.events]
        answered = sum(
            isinstance(r, Reply) and r.finish_reason is not FinishReason.ERROR
            for r in script.replies
        )
        assert events.count(ResponseStartedEvent) == answered, events
        assert events.count(FinishEvent) == answered, events
        assert events.count(ToolApprovalRequestEvent) == len(script.approvals), events
        assert response.source_agent_id == self.agent.id
        assert [actual(m) for m in response.turn_transcript] == [
            actual(m) for m in response.turn_transcript
        ]
        for m, e in zip(response.turn_transcript, script.transcript, strict=False):
            assert matches(m, e), (actual(m), e)
        assert len(response.turn_transcript) == len(script.transcript), (
            [actual(m) for m in response.turn_transcript],
            script.transcript,
        )
        assert response.usage is not None
        got = response.usage
        assert (got.prompt_tokens, got.completion_tokens, got.total_tokens) == (
            script.usage.prompt_tokens,
            script.usage.completion_tokens,
            script.usage.total_tokens,
        )
        assert sorted(PROBE.approvals) == sorted(script.approvals)
        self.model += [Expected("user", text), *script.transcript]
        self.raw |= script.raw
        after = self.run(self.loaded())
        assert [m.with_source(None) for m in after] == [
            m.with_source(None)
            for m in [*before, ChatMessage.user(text), *response.turn_transcript]
        ]

    # ------------------------------------------------------------ rules

    @precondition(lambda self: self.agent is not None)
    @rule(
        steps=st.lists(steps_st, max_size=3),
        final=final_st,
        cut_only=st.booleans(),
        kimi=st.booleans(),
    )
    def turn(self, steps: list[Step], final: Final, cut_only: bool, kimi: bool) -> None:
        """A turn: tool steps, then an answer (or a lone call cut by the token limit)."""
        script = Script(self.ids, self.fmt)
        script.kimi = kimi
        self.kimi |= kimi
        for step in steps:
            script.step(step)
        script.final(attrs.evolve(final, cut_only=cut_only))
        PROBE.approvals.clear()
        text, before = self.begin(script.replies)
        self.ok(text, before, script)

    @precondition(lambda self: self.agent is not None)
    @rule(
        steps=st.lists(running_st, max_size=1),
        fault=st.sampled_from(FAULTS),
        retry=st.booleans(),
        final=final_st,
    )
    def failing_turn(self, steps: list[Step], fault: str, retry: bool, final: Final) -> None:
        """A turn whose next LLM call fails; a retry policy saves it only when nothing
        was delivered (an HTTP status before the body)."""
        assert self.agent is not None
        script = Script(self.ids, self.fmt)
        for step in steps:
            script.step(step)
        replies = [*script.replies, fault_of(fault, self.fmt)]
        retried = retry and fault in RETRIED
        if retried:
            script.replies.append(replies[-1])  # (counted as a request)
            script.final(final)
            replies.append(script.replies[-1])
            script.replies = replies
        PROBE.approvals.clear()
        client = self.clients[self.fmt]
        client.retry = RETRY if retry else None
        try:
            text, before = self.begin(replies)
            if retried:
                self.ok(text, before, script)
                return
            with pytest.raises(RafrxError) as caught:
                self.run(self.agent.send(text))
        finally:
            client.retry = None
        self.run(self.settle())
        error = caught.value
        assert not isinstance(error, MaxStepsExceeded)
        if fault in ("500", "429"):
            assert isinstance(error, HTTPStatusError)
            assert error.status == int(fault)
        assert error.partial is not None
        assert error.partial.interrupted
        if fault == "inband":
            assert error.partial.text.endswith("partial answer")
        if fault == "drop":  # (cut mid-text: a prefix of it was delivered)
            last = error.partial.turn_transcript[-1].content
            assert last, error.partial
            assert LONG.startswith(last), last
        # what ran before the failure is in the partial, in order; nothing is saved
        prefix = script.transcript
        for m, e in zip(error.partial.turn_transcript, prefix, strict=False):
            assert matches(m, e), (actual(m), e)
        if fault == "drop_in_call":
            cut = [c for c in error.partial.tool_calls if c.id == "call_cut_by_drop"]
            assert cut
            assert not cut[0].complete
        self.check_requests(text, before, frozenset(script.raw), len(replies))
        after = self.run(self.loaded())
        assert [m.with_source(None) for m in after] == [m.with_source(None) for m in before]

    @precondition(lambda self: self.agent is not None)
    @rule(
        where=st.sampled_from(["tool", "stream", "approval"]), steps=st.lists(quiet_st, max_size=1)
    )
    def disposed_turn(self, where: str, steps: list[Step]) -> None:
        """A turn disposed of mid-way: nothing saved, the tool cancelled, no approver
        asked after it, the request's connection closed."""
        assert self.agent is not None
        script = Script(self.ids, self.fmt)
        for step in steps:
            script.step(step)
        if where == "tool":
            spec = ToolCallSpec("hang", {"n": 1}, id=f"call_{next(self.ids)}")
            last: Reply = Reply(tool_calls=[spec, ToolCallSpec("add", {"a": 1, "b": 1})])
        elif where == "approval":
            spec = ToolCallSpec("guarded", {"x": 999}, id=f"call_{next(self.ids)}")
            last = Reply(tool_calls=[spec])
        else:
            last = Reply(text=LONG, chunk_size=4, delay=0.005)
        PROBE.approvals.clear()
        text, before = self.begin([*script.replies, last, Reply(text="never sent")])
        cancelled, hung = PROBE.cancelled, PROBE.hung_approvals
        seen: list[Any] = []

        async def go() -> None:
            assert self.agent is not None
            started = PROBE.started = asyncio.Event()
            texts = asyncio.Event()

            def on_next(result: Any) -> None:
                seen.append(result)
                if len(self.server.requests) == len(script.replies) + 1 and any(
                    isinstance(c, TextContent) for c in result.contents
                ):
                    texts.set()

            errors: list[BaseException] = []
            done = asyncio.Event()
            subscription = self.agent.run(text).subscribe(
                on_next, lambda e: (errors.append(e), done.set()), done.set
            )
            await asyncio.wait_for((texts if where == "stream" else started).wait(), GUARD)
            subscription.dispose()
            count = len(seen)
            await asyncio.sleep(0.05)
            assert len(seen) == count, "results after disposal"
            assert not done.is_set() or not errors, errors

        self.run(go())
        self.run(self.settle())
        if where == "tool":
            assert PROBE.cancelled == cancelled + 1
        if where == "approval":
            assert PROBE.hung_approvals == hung + 1
        assert len(self.server.requests) == len(script.replies) + 1
        self.check_requests(text, before, frozenset(script.raw))
        after = self.run(self.loaded())
        assert [m.with_source(None) for m in after] == [m.with_source(None) for m in before]

    @precondition(lambda self: self.agent is not None)
    @rule(max_steps=st.integers(1, 3))
    def too_many_steps(self, max_steps: int) -> None:
        """Every LLM call calls a tool: MaxStepsExceeded after max_steps, nothing saved."""
        assert self.agent is not None
        script = Script(self.ids, self.fmt)
        for _ in range(max_steps):
            script.step(Step(("add",)))
        self.agent.max_steps = max_steps
        text, before = self.begin([*script.replies, Reply(text="never sent")])
        try:
            with pytest.raises(MaxStepsExceeded) as caught:
                self.run(self.agent.send(text))
        finally:
            self.agent.max_steps = 10
        self.run(self.settle())
        partial = caught.value.partial
        assert partial is not None
        assert partial.usage is not None
        assert partial.usage.total_tokens == script.usage.total_tokens  # every call counted
        assert len(partial.turn_transcript) == len(script.transcript)
        for m, e in zip(partial.turn_transcript, script.transcript, strict=True):
            assert matches(m, e), (actual(m), e)
        self.check_requests(text, before, frozenset(), max_steps)
        after = self.run(self.loaded())
        assert [m.with_source(None) for m in after] == [m.with_source(None) for m in before]

    @precondition(lambda self: self.agent is not None)
    @rule(fmt=st.sampled_from(FORMATS))
    def switch_format(self, fmt: str) -> None:
        """The same agent and history go on with another provider."""
        assert self.agent is not None
        self.fmt = fmt
        self.agent.client = self.clients[fmt]

    @precondition(lambda self: self.agent is not None and self.kind == "json")
    @rule()
    def reload(self) -> None:
        """Another process: a fresh agent reads the same file."""
        self.agent = self.new_agent(JsonFileHistory(self.path, 0.001))

    @precondition(lambda self: self.agent is not None and self.kind == "json" and self.model)
    @rule(lines=st.integers(1, 4))
    def half_saved(self, lines: int) -> None:
        """A save that failed half-way (another process): the file lost its last lines."""
        kept = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        lines = min(lines, len(kept))
        self.path.write_text("".join(kept[: len(kept) - lines]), encoding="utf-8")
        self.model = self.model[: len(self.model) - lines]

    @precondition(lambda self: self.agent is not None)
    @rule()
    def toggle_eager(self) -> None:
        """Tools start as soon as their arguments are complete, or at the end of the call."""
        assert self.agent is not None
        self.agent.eager_tools = not self.agent.eager_tools

    @precondition(lambda self: self.agent is not None)
    @rule(
        steps=st.lists(running_st, max_size=2),
        final=final_st,
        after=st.integers(0, 60) | st.just(-1),
    )
    def disposed_anytime(self, steps: list[Step], final: Final, after: int) -> None:
        """A turn disposed of after ``after`` results (or never, when it has fewer): its
        history is all of it or none of it, never half (a save once begun runs to its end)."""
        assert self.agent is not None
        script = Script(self.ids, self.fmt)
        for step in steps:
            script.step(step)
        script.final(final)
        PROBE.approvals.clear()
        text, before = self.begin(script.replies)
        seen: list[Any] = []

        async def go() -> bool:
            assert self.agent is not None
            done = asyncio.Event()
            box: dict[str, Any] = {}

            def on_next(result: Any) -> None:
                seen.append(result)
                if len(seen) == after:
                    box["subscription"].dispose()
                    done.set()

            subscription = self.agent.run(text).subscribe(on_next, lambda e: done.set(), done.set)
            box["subscription"] = subscription
            if after == 0:
                subscription.dispose()
                done.set()
            if after < 0:  # mid-save: as soon as the file holds the turn's first line
                lines = len(before)
                while not done.is_set():
                    text_now = self.path.read_text("utf-8") if self.path.exists() else ""
                    if len(text_now.splitlines()) > lines:
                        subscription.dispose()
                        box["mid_save"] = True
                        break
                    await asyncio.sleep(0.0002)
            await asyncio.wait_for(done.wait() if after >= 0 else asyncio.sleep(0), GUARD)
            count = len(seen)
            await asyncio.sleep(0.05)
            assert len(seen) == count, "results after disposal"
            await asyncio.sleep(0.1)  # (a save begun runs on: let it end)
            return bool(box.get("mid_save"))

        mid_save = self.run(go())
        self.run(self.settle())
        after_turn = self.run(self.loaded())
        if mid_save:  # a save once begun runs on to its end
            assert len(after_turn) == len(before) + 1 + len(script.transcript)
        if len(after_turn) == len(before):
            assert [m.with_source(None) for m in after_turn] == [
                m.with_source(None) for m in before
            ]
            return
        new = after_turn[len(before) :]
        assert [m.content for m in new[:1]] == [text]
        assert len(new) == 1 + len(script.transcript), [actual(m) for m in new]
        for m, e in zip(new[1:], script.transcript, strict=True):
            assert matches(m, e), (actual(m), e)
        self.model += [Expected("user", text), *script.transcript]
        self.raw |= script.raw

    # ------------------------------------------------------------ invariants

    @invariant()
    def history_is_the_model(self) -> None:
        if self.agent is None:
            return
        loaded = self.run(self.loaded())
        assert_history(loaded, self.model)
        repaired = paired(loaded)
        assert_history(repaired, model_paired(self.model))
        assert_paired(repaired)
        if model_paired(self.model) == self.model:
            assert [m.with_source(None) for m in repaired] == [m.with_source(None) for m in loaded]
        assert all(m.source is MessageSource.CHAT_HISTORY for m in loaded)
        assert not any(m.role is MessageRole.SYSTEM for m in loaded)


def _machine(fmt: str) -> type[AgentMachine]:
    return type(f"AgentMachine_{fmt}", (AgentMachine,), {"start_fmt": fmt})


_SETTINGS = settings(
    max_examples=int(os.environ.get("RAFRX_STATEFUL_EXAMPLES", "40")),
    report_multiple_bugs=False,
    phases=[p for p in Phase if p is not Phase.shrink or not os.environ.get("RAFRX_NO_SHRINK")],
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
TestAgentOpenAIChat = _machine("openai-chat").TestCase
TestAgentOpenAIChat.settings = _SETTINGS
TestAgentAnthropic = _machine("anthropic").TestCase
TestAgentAnthropic.settings = _SETTINGS
TestAgentResponses = _machine("openai-responses").TestCase
TestAgentResponses.settings = _SETTINGS


# ================================================================ regressions


@pytest.mark.asyncio
async def test_a_chat_turn_the_server_ends_with_finish_reason_error_is_not_saved(
    llm_server: LLMServer,
) -> None:
    history = InMemoryHistoryProvider()
    llm_server.enqueue(Reply(text="Half an ans", finish="error"))
    async with OpenAIChatClient(llm_server.url, "sk-test", "m") as client:
        agent = Agent(client, history=history)
        try:
            response = await asyncio.wait_for(agent.send("Hi"), GUARD)
        except RafrxError:
            pass  # (failing the turn is right too)
        else:
            assert response.finish_reason is FinishReason.ERROR
    assert history.messages == ()


def _question(request: RecordedRequest) -> str:
    """The last user text of a request, in any format."""
    return [t for t in user_texts(str(request.wire_format), request) if t.startswith("Q")][-1]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_two_turns_at_once_save_one_after_the_other_whole(
    llm_server: LLMServer, fmt: str, tmp_path: Path
) -> None:
    """Two turns of one agent running at once on a slow history: each is saved whole,
    one after the other (never interleaved), every call with its result."""

    @llm_server.script
    def answer(request: RecordedRequest) -> Reply:
        question = _question(request)
        tag = question.strip("Q?")
        if request.last_role == "tool":
            return Reply(text=f"Answer {tag}.", delay=0.002)
        calls = [ToolCallSpec("slow", {"ms": 5 * int(tag)}, id=f"call_{tag}_{k}") for k in (1, 2)]
        return Reply(tool_calls=calls, delay=0.002)

    history = JsonFileHistory(tmp_path / "h.jsonl", delay=0.005)
    async with CLIENTS[fmt](llm_server.url, "sk-test", "m") as client:
        agent = Agent(client, tools=TOOLS, history=history)
        await asyncio.wait_for(asyncio.gather(agent.send("Q1?"), agent.send("Q2?")), GUARD)
        loaded = await history.load()
        assert_paired(loaded)
        users = [n for n, m in enumerate(loaded) if m.role is MessageRole.USER]
        assert len(loaded) == 10, [actual(m) for m in loaded]
        assert users == [0, 5], [actual(m) for m in loaded]
        for start in users:  # each turn whole: its question, calls, results, answer
            tag = loaded[start].content.strip("Q?")
            block = loaded[start : start + 5]
            assert [c.id for c in block[1].tool_calls or ()] == [f"call_{tag}_1", f"call_{tag}_2"]
            assert block[-1].content == f"Answer {tag}."
        # the next turn sends both, in the order they were saved
        await asyncio.wait_for(agent.send("Q3?"), GUARD)
        last = llm_server.requests[-1]
        assert wire_problems(last) == []
        assert user_texts(fmt, llm_server.requests[-2])[-3:] == [
            loaded[users[0]].content,
            loaded[users[1]].content,
            "Q3?",
        ]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_next_turn_right_after_disposing_mid_save_sees_the_whole_turn(
    llm_server: LLMServer, fmt: str, tmp_path: Path
) -> None:
    """Agent.run: "a save already begun runs on to its end (the agent's next turn waits
    for it)": the next turn, started at once, sends the whole disposed turn."""
    path = tmp_path / "h.jsonl"
    history = JsonFileHistory(path, delay=0.01)
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2}, id="call_a")]),
        Reply(text="Three."),
        Reply(text="Next."),
    )
    async with CLIENTS[fmt](llm_server.url, "sk-test", "m") as client:
        agent = Agent(client, tools=TOOLS, history=history)
        ended: list[str] = []
        subscription = agent.run("Q1?").subscribe(
            lambda r: None, lambda e: ended.append("error"), lambda: ended.append("done")
        )
        async with asyncio.timeout(GUARD):
            while not path.exists() or not path.read_text("utf-8"):
                await asyncio.sleep(0.001)
        subscription.dispose()  # mid-save
        await asyncio.wait_for(agent.send("Q2?"), GUARD)
        assert ended == []
    sent = llm_server.requests[-1]
    assert wire_problems(sent) == []
    assert user_texts(fmt, sent) == ["Q1?", "Q2?"]
    assert call_ids(sent) == (["call_a"], ["call_a"])
    loaded = await history.load()
    assert [m.content for m in loaded if m.role is not MessageRole.TOOL][-2:] == ["Q2?", "Next."]
    assert len(loaded) == 6
