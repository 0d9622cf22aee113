"""Shared helpers of the reliability suites: fixtures, an independent event
splitter, expected prefixes of truncated bodies, and resource counters.

The expected outcome of a truncated body is computed here *without* rafrx's
SSE decoder: the body is split into events by a minimal LF-only reading of
the event-stream format, the complete body is run once event by event to
learn which updates each event produced, and the provider's terminal and
finish markers are found by parsing the event JSON directly.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import reactivex
from reactivex import operators as rxops

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import ToolCallingContent
from rafrx.errors import IncompleteStream, RafrxError
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.sources.dialects.anthropic import anthropic_usage
from rafrx.sources.dialects.openai_chat import chat_usage

__all__ = [
    "CLIENTS",
    "FIXTURES",
    "MANIFEST",
    "Event",
    "FullRun",
    "Outcome",
    "count_fds",
    "expected_partial",
    "fixture",
    "full_run",
    "normalized",
    "parse_events",
    "run_async",
    "run_pipeline",
    "run_sync",
    "settle",
    "tool_callings",
    "wait_for",
]

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures"
MANIFEST: list[dict[str, Any]] = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
_FORMATS = {entry["path"]: entry["format"] for entry in MANIFEST}

#: The client class speaking each dialect.
CLIENTS: dict[str, type[OpenAIChatClient | AnthropicClient | OpenAIResponsesClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


def fixture(path: str) -> tuple[bytes, str]:
    """A recorded body and its dialect."""
    return (FIXTURES / path).read_bytes(), _FORMATS[path]


# ---------------------------------------------------------------- events


@attrs.frozen
class Event:
    """One dispatched event of an LF-framed body."""

    end: int  # offset just past the blank line that dispatched it
    name: str
    data: str

    def json(self) -> Any:
        try:
            return json.loads(self.data)
        except ValueError:
            return None


def parse_events(body: bytes) -> list[Event]:
    """The dispatched events of an LF-framed body (a minimal WHATWG reading).

    A block is dispatched by its blank line when it had a ``data`` line; a
    block the body ends inside is not dispatched.
    """
    assert b"\r" not in body, "the sample bodies are LF-framed"
    events: list[Event] = []
    name, data, pos = "", list[str](), 0
    while True:
        newline = body.find(b"\n", pos)
        if newline < 0:
            return events
        line = body[pos:newline].decode("utf-8", "replace")
        pos = newline + 1
        if not line:
            if data:
                events.append(Event(pos, name or "message", "\n".join(data)))
            name, data = "", []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def _marks(dialect: str, event: Event) -> tuple[bool, bool]:
    """(terminal, finish seen) for one event, read from its JSON directly."""
    if dialect == "openai-chat":
        if event.data.strip() == "[DONE]":
            return True, True
        payload = event.json()
        choices = payload.get("choices") if isinstance(payload, dict) else None
        finish = any(
            isinstance(c, dict) and c.get("index") in (0, None) and c.get("finish_reason")
            for c in choices or ()
        )
        return False, finish
    payload = event.json()
    kind = payload.get("type") if isinstance(payload, dict) else None
    if dialect == "anthropic":
        if kind == "message_stop":
            return True, True
        delta = payload.get("delta") if kind == "message_delta" else None
        return False, bool(isinstance(delta, dict) and delta.get("stop_reason"))
    terminal = kind in ("response.completed", "response.incomplete")
    return terminal, terminal


# ---------------------------------------------------------------- the full run


@attrs.frozen
class Outcome:
    """What a (possibly truncated) body gave: updates, results, response or error."""

    updates: list[u.AgentResponseUpdate]
    results: list[AgentResponseResult]
    response: AgentResponse | None
    error: Exception | None


def run_pipeline(
    source: reactivex.Observable[u.AgentResponseUpdate], *, eager: bool = False
) -> Outcome:
    """Run ``source → convert(eager) → aggregate()`` and keep everything it emitted."""
    updates: list[u.AgentResponseUpdate] = []
    results: list[AgentResponseResult] = []
    responses: list[AgentResponse] = []
    errors: list[Exception] = []
    source.pipe(
        rxops.do_action(updates.append),
        ops.convert(eager),
        rxops.do_action(results.append),
        ops.aggregate(),
    ).subscribe(responses.append, errors.append)
    assert len(responses) + len(errors) == 1, (responses, errors)
    return Outcome(updates, results, responses[0] if responses else None, (errors or [None])[0])


def run_sync(chunks: Any, dialect: str) -> Outcome:
    """Run ``from_sse(chunks) → convert() → aggregate()`` synchronously."""
    return run_pipeline(from_sse(chunks, dialect))


async def run_async(source: reactivex.Observable[u.AgentResponseUpdate]) -> Outcome:
    """Like :func:`run_pipeline` for a source that emits on the running loop."""
    updates: list[u.AgentResponseUpdate] = []
    results: list[AgentResponseResult] = []
    done: asyncio.Future[AgentResponse] = asyncio.get_running_loop().create_future()

    def on_error(error: Exception) -> None:
        if not done.done():
            done.set_exception(error)

    subscription = source.pipe(
        rxops.do_action(updates.append),
        ops.convert(),
        rxops.do_action(results.append),
        ops.aggregate(),
    ).subscribe(done.set_result, on_error)
    try:
        response = await done
    except Exception as error:
        return Outcome(updates, results, None, error)
    finally:
        subscription.dispose()
    return Outcome(updates, results, response, None)


@attrs.frozen
class FullRun:
    """A complete body run event by event: which updates each event produced."""

    body: bytes
    dialect: str
    events: list[Event]
    outcome: Outcome
    counts: list[int]  # counts[j]: updates emitted once the first j events were read
    terminal_at: int | None  # events needed to reach the terminal marker
    finish_at: int | None  # events needed to see a finish reason
    ends: list[int] = attrs.field(init=False)

    @ends.default
    def _ends(self) -> list[int]:
        return [e.end for e in self.events]

    def delivered(self, cut: int) -> int:
        """How many events a body cut after ``cut`` bytes dispatches."""
        return bisect.bisect_right(self.ends, cut)

    def finish(self) -> u.Finish:
        finishes = [x for x in self.outcome.updates if isinstance(x, u.Finish)]
        assert len(finishes) == 1
        return finishes[0]

    def owed_after(self, n_events: int) -> list[u.AgentResponseUpdate]:
        """What a stream failing after its first ``n_events`` events still delivers
        before the error (``UpdateDecoder.salvage()``), read from the events' JSON:
        the usage reported so far, which only the ``Finish`` would carry, after
        Anthropic's blocks that came whole but not their end (signed thinking, a
        server tool's result); once a finish reason came, the ``Finish`` (with the
        usage reported by then), as the end of the input would have delivered it."""
        if self.finish_at is not None and n_events >= self.finish_at:
            if self.dialect != "openai-chat":
                return [self.finish()]
            usage = self.chat_usage_after(n_events)
            reason = self.finish().finish_reason
            return [u.Finish(reason, None if usage is None else chat_usage(usage))]
        if self.dialect == "openai-chat":
            usage = self.chat_usage_after(n_events)
            return [] if usage is None else [u.Usage(chat_usage(usage))]
        if self.dialect != "anthropic":  # (the Responses one owes a response.failed's)
            return []
        totals: dict[str, Any] = {}
        open_blocks: dict[int, dict[str, Any]] = {}
        for event in self.events[:n_events]:
            payload = event.json()
            if not isinstance(payload, dict):
                continue
            kind, index = payload.get("type"), payload.get("index")
            if kind == "message_start":
                totals.update(payload["message"].get("usage") or {})
            elif kind == "message_delta":
                totals.update(payload.get("usage") or {})
            elif kind == "content_block_start":
                open_blocks[index] = dict(payload["content_block"])
            elif kind == "content_block_stop":
                open_blocks.pop(index, None)
            elif kind == "content_block_delta" and index in open_blocks:
                delta, block = payload["delta"], open_blocks[index]
                if delta["type"] == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + delta["thinking"]
                elif delta["type"] == "signature_delta":
                    block["signature"] = delta["signature"]
        owed: list[u.AgentResponseUpdate] = []
        for _, block in sorted(open_blocks.items()):
            if block["type"] == "thinking" and block.get("signature"):
                whole = {k: block[k] for k in ("type", "thinking", "signature")}
            elif block["type"].endswith("_tool_result"):
                whole = block
            else:
                continue
            owed.append(u.ReasoningDelta("", provider_data=whole))
        return [*owed, u.Usage(anthropic_usage(totals))] if totals else owed

    def chat_usage_after(self, n_events: int) -> Any:
        """The last ``usage`` object among the first ``n_events`` chat chunks."""
        usage = None
        for event in self.events[:n_events]:
            payload = event.json()
            if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
                usage = payload["usage"]
        return usage


def full_run(path: str) -> FullRun:
    """Run a whole fixture, fed event by event, recording the updates per event."""
    body, dialect = fixture(path)
    events = parse_events(body)
    cuts = [0, *(e.end for e in events)]
    pieces = [body[a:b] for a, b in itertools.pairwise(cuts)] + [body[cuts[-1] :]]
    emitted: list[int] = []
    seen: list[u.AgentResponseUpdate] = []

    def chunks() -> Iterator[bytes]:
        for piece in pieces:
            yield piece
            emitted.append(len(seen))

    outcome = run_pipeline(from_sse(chunks(), dialect).pipe(rxops.do_action(seen.append)))
    assert outcome.error is None, f"{path} is expected to complete: {outcome.error!r}"
    updates = outcome.updates
    counts = [0, *emitted[: len(events)]]
    counts += [len(updates)] * (len(events) + 1 - len(counts))
    terminal_at = finish_at = None
    for n, event in enumerate(events, 1):
        terminal, finish = _marks(dialect, event)
        if finish and finish_at is None:
            finish_at = n
        if terminal:
            terminal_at = n
            break
    return FullRun(body, dialect, events, outcome, counts, terminal_at, finish_at)


def expected_partial(
    prefix: list[u.AgentResponseUpdate], failure: RafrxError | None = None
) -> AgentResponse:
    """The partial response of a stream that delivered ``prefix`` and then failed (with
    ``failure``: a provider's error closes it with finish reason ``ERROR``)."""
    error = IncompleteStream("cut") if failure is None else failure
    failing = reactivex.concat(reactivex.from_iterable(prefix), reactivex.throw(error))
    errors: list[Exception] = []
    failing.pipe(ops.convert(), ops.aggregate()).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert isinstance(errors[0], RafrxError)
    partial = errors[0].partial
    assert partial is not None
    return partial


def normalized(response: AgentResponse, body: bytes) -> str:
    """A comparable form: generated tool-call ids (absent from the body) renamed by order."""
    text = json.dumps(response.to_dict(), sort_keys=True)
    for n, call in enumerate(response.tool_calls):
        if json.dumps(call.id).encode() not in body:
            text = text.replace(json.dumps(call.id), f'"<generated {n}>"')
    return text


def tool_callings(results: list[AgentResponseResult]) -> list[ToolCallingContent]:
    """Every ``ToolCallingContent`` among the results, in order."""
    return [c for r in results for c in r.contents if isinstance(c, ToolCallingContent)]


# ---------------------------------------------------------------- resources


def count_fds() -> int:
    """Open file descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


async def settle(rounds: int = 5) -> None:
    """Let callbacks scheduled by closing transports run, and collect garbage."""
    for _ in range(rounds):
        await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0.01)


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until it holds (or fail after ``timeout`` seconds)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)
