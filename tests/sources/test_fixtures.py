"""Every recorded stream in tests/data/fixtures through from_sse → convert → aggregate.

The expected results in MANIFEST.json were computed by the providers' own
SDKs (see tests/data/fixtures/README.md); here they are mapped onto rafrx's
model: text (+ refusal, which rafrx treats as text), reasoning, tool calls
(blocks never stopped are not calls), the finish reason and usage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex import operators as rx_ops

from rafrx import operators as ops
from rafrx.content import ErrorContent
from rafrx.errors import ProviderError, RafrxError
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources import from_sse
from tests import cut, split_after

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures"
MANIFEST: list[dict[str, Any]] = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
STREAMS = [entry for entry in MANIFEST if entry["format"] != "sse-only"]
BY_PATH = {entry["path"]: entry for entry in STREAMS}
IDS = [entry["path"] for entry in STREAMS]

# A few streams replayed one byte at a time: multi-byte UTF-8 (emoji, °, —),
# an error, tool calls of each dialect, Azure's odd chunks, Mistral arrays.
ONE_BYTE = [
    "openai-chat/deepseek-reasoning.sse",
    "openai-chat/groq-error-event.sse",
    "openai-chat/azure-content-filter-offsets.sse",
    "openai-chat/mistral-parallel-tools-one-delta.sse",
    "openai-chat/writer-palmyra-7-tools.sse",
    "anthropic/anthropic-thinking-tool-use.sse",
    "anthropic/anthropic-max-tokens-truncated-tool-json.sse",
    "openai-responses/responses-reasoning-summary-text.sse",
    "openai-responses/responses-error-failed.sse",
]


def _body(entry: dict[str, Any]) -> bytes:
    return (FIXTURES / entry["path"]).read_bytes()


def _outcome(chunks: Any, dialect: str, *, fused: bool = True) -> AgentResponse | RafrxError:
    """The AgentResponse of the stream, or the error it failed with.

    With ``fused=False`` an identity map stands between the source and each
    operator, so nothing fuses (the reference the fused pipeline must equal).
    """
    results: list[AgentResponse] = []
    errors: list[Exception] = []
    completed: list[bool] = []
    pipeline = from_sse(chunks, dialect=dialect)
    for operator in (ops.convert(), ops.aggregate()):
        pipeline = operator(pipeline if fused else pipeline.pipe(rx_ops.map(_same)))
    pipeline.subscribe(results.append, errors.append, lambda: completed.append(True))
    if errors:
        assert not results
        assert not completed
        assert len(errors) == 1
        assert isinstance(errors[0], RafrxError), repr(errors[0])
        return errors[0]
    assert completed == [True]
    assert len(results) == 1
    return results[0]


def _same(item: Any) -> Any:
    return item


def _expected_usage(fmt: str, usage: dict[str, Any] | None) -> Usage | None:
    if usage is None:
        return None
    if fmt == "anthropic":
        prompt = (
            usage["input_tokens"]
            + (usage.get("cache_creation_input_tokens") or 0)
            + (usage.get("cache_read_input_tokens") or 0)
        )
        completion = usage["output_tokens"]
        return Usage(prompt, completion, prompt + completion)
    if fmt == "openai-responses":
        return Usage(usage["input_tokens"], usage["output_tokens"], usage["total_tokens"])
    return Usage(usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"])


def _expected_finish(fmt: str, expected: dict[str, Any], calls: list[Any]) -> FinishReason:
    reason = expected["finish_reason"]
    if fmt == "openai-responses":
        if reason == "completed":
            return FinishReason.TOOL_CALLS if calls else FinishReason.STOP
        if reason == "incomplete":
            return FinishReason.from_provider(expected.get("incomplete_reason"))
    if reason is None:
        return FinishReason.OTHER  # chat: [DONE] without a finish_reason
    return FinishReason.from_provider(reason)


def _expected_text(expected: dict[str, Any]) -> str:
    return expected["text"] + (expected.get("refusal") or "")


def _check_content(response: AgentResponse, expected: dict[str, Any]) -> None:
    assert response.text == _expected_text(expected)
    assert response.reasoning_text == (expected["reasoning_text"] or None)


@pytest.mark.parametrize("path", IDS)
def test_fixture_matches_expected(path: str) -> None:
    entry = BY_PATH[path]
    fmt, expected = entry["format"], entry["expected"]
    outcome = _outcome(_body(entry), fmt)

    if "error" in expected:
        assert isinstance(outcome, ProviderError), repr(outcome)
        error = expected["error"]
        assert outcome.message == error["message"]
        if error.get("code") is not None:
            assert outcome.code == str(error["code"])
        if error.get("type") is not None:
            assert outcome.error_type == error["type"]
        assert outcome.partial is not None
        assert outcome.partial.interrupted
        _check_content(outcome.partial, expected)
        return

    assert isinstance(outcome, AgentResponse), repr(outcome)
    _check_content(outcome, expected)

    calls = [c for c in expected["tool_calls"] if not c.get("block_not_stopped")]
    cut = [c for c in expected["tool_calls"] if c.get("block_not_stopped")]
    # a call the stream left open is kept, cut short (tests/test_cut_tool_calls.py)
    assert [(c.id, c.raw_arguments) for c in outcome.tool_calls if not c.complete] == [
        (c["id"], c["arguments_raw"]) for c in cut
    ]
    got = [c for c in outcome.tool_calls if c.complete]
    assert [c.name for c in got] == [c["name"] for c in calls]
    assert [c.arguments for c in got] == [c["arguments"] for c in calls]
    for call, want in zip(got, calls, strict=True):
        assert call.error is None
        if want["id"]:  # the provider sent one
            assert call.id == want["id"]
        else:
            assert call.id  # a generated one
    assert len({c.id for c in outcome.tool_calls}) == len(outcome.tool_calls)

    assert outcome.finish_reason == _expected_finish(fmt, expected, calls)

    want_usage = _expected_usage(fmt, expected["usage"])
    if want_usage is None:
        assert outcome.usage is None
    else:
        assert outcome.usage is not None
        assert outcome.usage.prompt_tokens == want_usage.prompt_tokens
        assert outcome.usage.completion_tokens == want_usage.completion_tokens
        assert outcome.usage.total_tokens == want_usage.total_tokens

    if entry["model"]:
        assert outcome.model == entry["model"]


# ---------------------------------------------------------------- split bodies


def _normalized(outcome: AgentResponse | RafrxError, body: bytes) -> Any:
    """A comparable form: generated tool-call ids (absent from the body) renamed by order."""
    if isinstance(outcome, RafrxError):
        assert outcome.partial is not None
        return (type(outcome), outcome.message, _normalized(outcome.partial, body))
    text = json.dumps(outcome.to_dict(), sort_keys=True)
    for n, call in enumerate(outcome.tool_calls):
        if json.dumps(call.id).encode() not in body:
            text = text.replace(json.dumps(call.id), f'"<generated {n}>"')
    return text


@pytest.mark.parametrize("path", IDS)
@settings(max_examples=5, deadline=None, database=None)
@given(data=st.data())
def test_fixture_split_anywhere_gives_the_same_response(path: str, data: st.DataObject) -> None:
    entry = BY_PATH[path]
    body = _body(entry)
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=40), label="cuts")
    whole = _normalized(_outcome(body, entry["format"]), body)
    split = _normalized(_outcome(cut(body, cuts), entry["format"]), body)
    assert split == whole


@pytest.mark.parametrize("path", ONE_BYTE)
def test_fixture_one_byte_chunks_give_the_same_response(path: str) -> None:
    entry = BY_PATH[path]
    body = _body(entry)
    whole = _normalized(_outcome(body, entry["format"]), body)
    bytewise = (body[i : i + 1] for i in range(len(body)))
    assert _normalized(_outcome(bytewise, entry["format"]), body) == whole


@pytest.mark.parametrize("path", IDS)
def test_fixture_read_one_event_at_a_time_gives_the_same_response(path: str) -> None:
    # As a live stream arrives: each read one event (the decoders' fast paths).
    entry = BY_PATH[path]
    body = _body(entry)
    whole = _normalized(_outcome(body, entry["format"]), body)
    events = split_after(body.replace(b"\r\n", b"\n"), b"\n\n")
    assert _normalized(_outcome(events, entry["format"]), body) == whole


@pytest.mark.parametrize("path", IDS)
def test_fixture_fused_pipeline_equals_the_operators_kept_apart(path: str) -> None:
    # from_sse → convert() → aggregate() runs as one loop over the body (a SyncSource
    # driving one Chain); with identity maps between them nothing fuses.
    entry = BY_PATH[path]
    body = _body(entry)
    fused = _normalized(_outcome(body, entry["format"]), body)
    assert fused == _normalized(_outcome(body, entry["format"], fused=False), body)


def test_a_subscriber_that_raises_gets_the_same_treatment_fused_or_not() -> None:
    body = _body(BY_PATH["openai-chat/deepseek-reasoning.sse"])

    def observe(fused: bool) -> tuple[list[Any], list[str]]:
        seen: list[Any] = []
        errors: list[Exception] = []

        def on_next(result: Any) -> None:
            seen.append(result)
            if len(seen) == 3:
                raise ValueError("subscriber bug")

        pipeline = from_sse(body, dialect="openai-chat")
        if not fused:
            pipeline = pipeline.pipe(rx_ops.map(_same))
        pipeline.pipe(ops.convert()).subscribe(on_next, errors.append)
        return seen, [f"{type(e).__name__}: {e}" for e in errors]

    fused = observe(True)
    assert fused == observe(False)
    seen, errors = fused
    assert errors == ["ValueError: subscriber bug"]
    # nothing more reaches the subscriber that raised: no ErrorContent for its own bug
    assert len(seen) == 3
    assert not any(isinstance(c, ErrorContent) for r in seen for c in r.contents)


def test_every_stream_of_the_manifest_is_tested() -> None:
    assert len(STREAMS) == 61
    assert {e["format"] for e in STREAMS} == {"openai-chat", "anthropic", "openai-responses"}
    assert all((FIXTURES / p).is_file() for p in IDS)
