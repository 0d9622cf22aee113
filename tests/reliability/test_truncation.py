"""Truncation at every byte: a body cut anywhere gives the whole response or a
typed error whose ``.partial`` holds exactly what came before the cut.

For a sample of recorded fixtures (text, parallel tool calls, reasoning, in
each dialect, plus index-less calls and unterminated final events) the body
is cut after every byte offset (bodies up to :data:`EVERY_BYTE` bytes) or
after every offset of a dense sample (around every event boundary, through
the first events and one whole middle event, plus random ones) and read with
``from_sse``. The expected outcome is computed independently (see
``_support``): the updates of the events wholly delivered before the cut,
taken from the complete run, and the provider's terminal and finish markers
read from the event JSON directly.

A sample of cuts is also served by the local server, which then closes (or
resets) the connection, and read by the HTTP clients.
"""

from __future__ import annotations

import random
from functools import cache

import pytest

from rafrx import updates as u
from rafrx.content import ToolCallArgsContent, ToolCallEndContent, ToolCallStartContent
from rafrx.errors import IncompleteStream, RafrxError, StreamInterrupted
from rafrx.operators._flush_tool_calls import FAILED_FIRST
from rafrx.sources import from_sse
from rafrx.sources.dialects.openai_chat import chat_usage
from rafrx.testing import Fault, LLMServer, Replay
from tests.reliability._support import (
    CLIENTS,
    FullRun,
    Outcome,
    expected_partial,
    full_run,
    normalized,
    run_async,
    run_pipeline,
    run_sync,
    tool_callings,
)

#: Bodies up to this many bytes are cut after every single byte.
EVERY_BYTE = 5_000

SAMPLE = [
    # openai-chat: text, parallel calls, reasoning, index-less calls, no blank line at the end
    "openai-chat/openai-text.sse",
    "openai-chat/openai-parallel-tool-calls.sse",
    "openai-chat/deepseek-reasoning.sse",
    "openai-chat/mistral-parallel-tools-one-delta.sse",
    "openai-chat/gemini-compat-tool-call.sse",
    "openai-chat/anthropic-compat-tool-index-1.sse",
    # anthropic: text, parallel tool use, thinking + tool, arguments cut by max_tokens
    "anthropic/anthropic-text-padded.sse",
    "anthropic/anthropic-parallel-tool-use.sse",
    "anthropic/anthropic-thinking-tool-use.sse",
    "anthropic/anthropic-max-tokens-truncated-tool-json.sse",
    # openai-responses: text, parallel function calls, function call, reasoning summary + tool
    "openai-responses/responses-text.sse",
    "openai-responses/responses-parallel-function-calls.sse",
    "openai-responses/responses-function-call.sse",
    "openai-responses/responses-reasoning-summary-tool.sse",
]


@cache
def _run(path: str) -> FullRun:
    return full_run(path)


def offsets(run: FullRun, seed: str) -> list[int]:
    """Every offset of a short body; a dense sample of a long one: the first
    two events, both sides of every event end (of 60 of them in very long
    bodies), one whole middle event and one whole tool-argument event byte by
    byte, and random offsets."""
    size = len(run.body)
    if size <= EVERY_BYTE:
        return list(range(size + 1))
    rng = random.Random(seed)
    picks = set(range(run.ends[min(1, len(run.ends) - 1)] + 1)) | set(run.ends)
    ends = run.ends if len(run.ends) <= 60 else rng.sample(run.ends, 60)
    for end in ends:
        picks.update((end - 2, end - 1, end, end + 1))
    starts = [0, *run.ends]
    middle = len(run.events) // 2
    picks.update(range(starts[middle], run.ends[middle] + 1))
    for i, event in enumerate(run.events):
        if any(key in event.data for key in ('"arguments"', "arguments.delta", "input_json")):
            picks.update(range(starts[i], event.end + 1))
            break
    picks.update(rng.sample(range(size + 1), 150))
    picks.add(size)
    return sorted(p for p in picks if 0 <= p <= size)


def check_updates(
    run: FullRun, cut: int, updates: list[u.AgentResponseUpdate], error: Exception | None
) -> None:
    """The updates (and error) of ``from_sse`` over the body cut after ``cut`` bytes."""
    n = run.delivered(cut)
    where = f"cut at byte {cut} of {len(run.body)} ({n} events delivered)"
    full = run.outcome.updates
    if run.terminal_at is not None and n >= run.terminal_at:
        assert error is None, f"{where}: {error!r}"
        assert updates == full, where
    elif run.finish_at is not None and n >= run.finish_at:
        assert error is None, f"{where}: {error!r}"
        assert updates[:-1] == full[: run.counts[n]], where
        assert isinstance(updates[-1], u.Finish), where
    else:
        assert isinstance(error, IncompleteStream), f"{where}: {error!r}"
        assert updates == full[: run.counts[n]] + run.owed_after(n), where


def check_cut(run: FullRun, cut: int, got: Outcome, *, transport: bool = False) -> None:
    """``got`` is what the body cut after ``cut`` bytes must give.

    Args:
        transport: The cut was a dropped connection (not a clean end of a
            body): only a delivered terminal marker makes a success.
    """
    full = run.outcome
    n = run.delivered(cut)
    prefix = full.updates[: run.counts[n]]
    where = f"cut at byte {cut} of {len(run.body)} ({n} events delivered)"
    terminal = run.terminal_at is not None and n >= run.terminal_at
    finished = run.finish_at is not None and n >= run.finish_at

    # never a ToolCalling for a call whose arguments were cut
    calls = [(c.name, c.raw_arguments, c.arguments, c.error) for c in tool_callings(got.results)]
    want = [(c.name, c.raw_arguments, c.arguments, c.error) for c in tool_callings(full.results)]
    assert calls == want[: len(calls)], where

    if terminal:
        assert got.error is None, f"{where}: {got.error!r}"
        assert got.updates == full.updates, where
        assert got.response is not None
        assert full.response is not None
        assert normalized(got.response, run.body) == normalized(full.response, run.body), where
    elif finished and not transport:
        # a finish reason without the terminal marker counts as complete
        assert got.error is None, f"{where}: {got.error!r}"
        assert got.updates[:-1] == prefix, where
        finish = got.updates[-1]
        assert isinstance(finish, u.Finish), where
        assert finish.finish_reason == run.finish().finish_reason, where
        if run.dialect == "openai-chat":
            usage = run.chat_usage_after(n)
            assert finish.usage == (None if usage is None else chat_usage(usage)), where
        else:
            assert finish.usage == run.finish().usage, where
        assert got.response is not None
        assert full.response is not None
        assert got.response.text == full.response.text, where
        assert got.response.reasoning_text == full.response.reasoning_text, where
        assert got.response.finish_reason == full.response.finish_reason, where
        assert len(got.response.tool_calls) == len(full.response.tool_calls), where
    else:
        error = got.error
        expected_type = StreamInterrupted if transport else IncompleteStream
        assert isinstance(error, expected_type), f"{where}: {error!r}"
        assert got.updates == prefix + run.owed_after(n), where
        assert error.partial is not None, where
        assert error.partial.interrupted, where
        partial = expected_partial(prefix + run.owed_after(n))
        assert normalized(error.partial, run.body) == normalized(partial, run.body), where
        text = "".join(x.delta for x in prefix if isinstance(x, u.TextDelta))
        assert error.partial.text == text, where
        assert full.response is not None
        assert full.response.text.startswith(text), where
        seen = [c for r in got.results for c in r.contents]
        open_ids = {c.call_id for c in seen if isinstance(c, ToolCallStartContent)}
        open_ids -= {c.call_id for c in seen if isinstance(c, ToolCallEndContent)}
        for call in error.partial.tool_calls:
            if call.complete:  # a call whose arguments ended
                assert call.error is None, where
                assert call.arguments in [c.arguments for c in full.response.tool_calls], where
            else:  # cut short: what came of it, never to run
                assert call.arguments is None, where
                if call.id in open_ids:  # still open at the cut
                    assert call.error == "arguments cut short: the stream ended before the call did"
                else:  # ended, not flushed yet (flushed at completion, never reached)
                    assert call.error == FAILED_FIRST, where
                whole = "".join(
                    c.args_delta
                    for r in full.results
                    for c in r.contents
                    if isinstance(c, ToolCallArgsContent) and c.call_id == call.id
                )
                assert whole.startswith(call.raw_arguments or ""), where


@pytest.mark.parametrize("path", SAMPLE)
def test_cut_after_every_byte_via_from_sse(path: str) -> None:
    run = _run(path)
    assert run.outcome.response is not None
    cuts = offsets(run, path)
    assert cuts[0] == 0
    assert cuts[-1] == len(run.body)
    # the whole pipeline (results, partial) once per number of delivered events
    # (for streams of many events: the first and last ones, and every step-th)
    events = len(run.events)
    step = max(1, events // 30)
    wanted = {n for n in range(events + 1) if n <= 10 or n >= events - 3 or n % step == 0}
    checked: set[int] = set()
    for cut in cuts:
        updates: list[u.AgentResponseUpdate] = []
        errors: list[Exception] = []
        from_sse(run.body[:cut], run.dialect).subscribe(updates.append, errors.append)
        check_updates(run, cut, updates, errors[0] if errors else None)
        n = run.delivered(cut)
        if n in wanted and n not in checked:
            checked.add(n)
            check_cut(run, cut, run_sync(run.body[:cut], run.dialect))
    assert checked == wanted


def test_the_sample_covers_each_dialect_and_kind_of_stream() -> None:
    runs = [_run(p) for p in SAMPLE]
    assert {r.dialect for r in runs} == set(CLIENTS)
    for dialect in CLIENTS:
        responses = [r.outcome.response for r in runs if r.dialect == dialect]
        assert any(x is not None and x.text for x in responses), dialect
        assert any(x is not None and len(x.tool_calls) >= 2 for x in responses), dialect
        assert any(x is not None and x.reasoning_text for x in responses), dialect
    # and bodies short enough to be cut after every single byte, in each dialect
    assert {r.dialect for r in runs if len(r.body) <= EVERY_BYTE} == set(CLIENTS)


@pytest.mark.parametrize("eager", [False, True])
def test_a_cut_mid_arguments_never_yields_a_tool_call(eager: bool) -> None:
    run = _run("anthropic/anthropic-parallel-tool-use.sse")
    cuts = [e.end - 1 for e in run.events if '"input_json_delta"' in e.data]
    assert len(cuts) > 5
    for cut in cuts:  # each inside an argument delta, one byte before it is dispatched
        got = run_pipeline(from_sse(run.body[:cut], run.dialect), eager=eager)
        assert isinstance(got.error, IncompleteStream)
        partial = got.error.partial
        assert partial is not None
        assert partial.interrupted
        started = [x.id for x in got.updates if isinstance(x, u.ToolCallStart)]
        ended = [x.id for x in got.updates if isinstance(x, u.ToolCallEnd)]
        assert set(started) - set(ended)  # a call was open when the body was cut
        flushed = [c.call_id for c in tool_callings(got.results)]
        # eager: each ended call at its end; by default calls are flushed only on completion
        assert flushed == (ended if eager else [])
        # the ended calls (whole arguments) are complete in the partial, flushed to run
        # or not; the others are kept, cut short, and never flushed to run
        assert [c.id for c in partial.tool_calls if c.complete] == ended
        assert all(c.error is None for c in partial.tool_calls if c.complete)
        cut = [c.id for c in partial.tool_calls if not c.complete]
        assert cut == [i for i in started if i not in ended]
        assert set(started) - set(ended) <= set(cut)


# ---------------------------------------------------------------- over HTTP

HTTP_SAMPLE = [
    "openai-chat/openai-parallel-tool-calls.sse",
    "anthropic/anthropic-thinking-tool-use.sse",
    "openai-responses/responses-parallel-function-calls.sse",
]


def http_offsets(run: FullRun, seed: str) -> list[int]:
    """About 40 cuts: the start, both sides of a dozen event ends, random ones, the end."""
    rng = random.Random(seed)
    ends = rng.sample(run.ends, min(12, len(run.ends)))
    if run.terminal_at is not None:
        ends.append(run.ends[run.terminal_at - 1])
    picks = {0, 1, len(run.body)}
    for end in ends:
        picks.update((end - 1, end))
    picks.update(rng.sample(range(len(run.body)), 10))
    return sorted(picks)


@pytest.mark.asyncio
@pytest.mark.parametrize("path", HTTP_SAMPLE)
async def test_cut_by_a_closed_connection_via_the_client(llm_server: LLMServer, path: str) -> None:
    run = _run(path)
    async with CLIENTS[run.dialect](llm_server.url, "sk-test") as client:
        for cut in http_offsets(run, path):
            llm_server.enqueue(Fault.drop_after(cut, body=Replay(run.body, chunk_size=97)))
            got = await run_async(client.stream([]))
            check_cut(run, cut, got, transport=cut < len(run.body))
    await llm_server.wait_connections_closed()


@pytest.mark.asyncio
@pytest.mark.parametrize("path", HTTP_SAMPLE)
async def test_cut_by_a_reset_connection_via_the_client(llm_server: LLMServer, path: str) -> None:
    run = _run(path)
    full = run.outcome.updates
    async with CLIENTS[run.dialect](llm_server.url, "sk-test") as client:
        for cut in random.Random(path).sample(range(1, len(run.body)), 8):
            llm_server.enqueue(Fault.drop_after(cut, body=Replay(run.body), reset=True))
            got = await run_async(client.stream([]))
            n = run.delivered(cut)
            if run.terminal_at is not None and n >= run.terminal_at and got.error is None:
                assert got.updates == full
                continue
            # a reset may discard bytes still in flight: a shorter prefix, never more,
            # then the usage reported by then (Anthropic's: only a Finish carries it)
            assert isinstance(got.error, RafrxError), repr(got.error)
            updates = got.updates
            owed = next(
                (o for o in map(run.owed_after, range(n, -1, -1)) if updates[-len(o) :] == o), []
            )  # (what the prefix delivered owes: the longest that matches)
            updates = updates[: len(updates) - len(owed)]
            assert updates == full[: len(updates)]
            assert len(updates) <= run.counts[n]
            assert got.error.partial is not None
            assert got.error.partial.interrupted
    await llm_server.wait_connections_closed()
