"""Fuzzing with hypothesis: hostile bodies and arguments only ever give ``RafrxError``s.

* random bytes, random events built from each dialect's vocabulary, and
  recorded fixtures mutated byte-wise and event-wise, for every dialect,
  through ``from_sse → convert() → aggregate()`` (and a few through the HTTP
  client): the outcome is a response or a :class:`~rafrx.errors.RafrxError`
  (with ``.partial``), never another exception, and nothing is emitted after
  the end;
* random JSON (valid, mutated, split anywhere) as tool-call arguments: the
  pipeline never raises, a call is flushed with ``arguments ==
  json.loads(text)`` or with ``error`` set and the text kept, and
  :class:`~rafrx.json_stream.StreamingArgsParser` agrees with ``json.loads``.

The coverage-guided counterparts (atheris) are in ``fuzz/``.
"""

from __future__ import annotations

import itertools
import json
import random
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rafrx import updates as u
from rafrx.content import ToolCallingContent
from rafrx.errors import RafrxError
from rafrx.json_stream import StreamingArgsParser
from rafrx.response import FinishReason
from rafrx.testing import LLMServer, Replay
from tests.reliability._support import (
    CLIENTS,
    MANIFEST,
    Outcome,
    fixture,
    run_async,
    run_pipeline,
    run_sync,
    tool_callings,
)
from tests.strategies import json_values

DIALECTS = list(CLIENTS)
FUZZ = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def assert_only_rafrx_errors(got: Outcome) -> None:
    """A response, or a RafrxError whose partial is set; nothing else."""
    if got.error is None:
        assert got.response is not None
        assert not got.response.interrupted
        return
    assert isinstance(got.error, RafrxError), repr(got.error)
    assert got.response is None
    assert got.error.partial is not None
    assert got.error.partial.interrupted


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted({c % (len(body) + 1) for c in cuts}), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(points)]


# ---------------------------------------------------------------- random bodies


@pytest.mark.parametrize("dialect", DIALECTS)
@FUZZ
@given(body=st.binary(max_size=600), cuts=st.lists(st.integers(0, 10**6), max_size=6))
def test_random_bytes(dialect: str, body: bytes, cuts: list[int]) -> None:
    assert_only_rafrx_errors(run_sync(split(body, cuts), dialect))


_KEYS = [
    # openai chat
    "id", "model", "object", "choices", "index", "delta", "content", "role", "refusal",
    "reasoning", "reasoning_content", "tool_calls", "function", "name", "arguments", "type",
    "finish_reason", "usage", "prompt_tokens", "completion_tokens", "total_tokens", "error",
    "message", "code", "thinking", "text",
    # anthropic
    "content_block", "partial_json", "input", "stop_reason", "signature", "data",
    "input_tokens", "output_tokens", "citations", "url",
    # responses
    "response", "item", "output_index", "call_id", "item_id", "status", "part", "summary_index",
    "output", "incomplete_details", "annotation", "annotations",
]  # fmt: skip
_TYPES = [
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop", "ping", "error", "text_delta", "input_json_delta",
    "thinking_delta", "signature_delta", "citations_delta", "tool_use", "thinking",
    "redacted_thinking", "text", "response.created", "response.output_item.added",
    "response.output_item.done", "response.output_text.delta", "response.refusal.delta",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.reasoning_summary_text.delta", "response.reasoning_text.delta",
    "response.output_text.annotation.added", "response.content_part.done",
    "response.completed", "response.incomplete", "response.failed", "function_call",
    "url_citation", "chat.completion.chunk",
]  # fmt: skip
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5),
    st.sampled_from(_TYPES),
    st.sampled_from(["stop", "length", "tool_calls", "end_turn", "tool_use", "", "[DONE]"]),
    st.text(max_size=8),
    st.floats(allow_nan=False, width=16),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4)
    ),
    max_leaves=8,
)
_OBJECTS = st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=5)


@st.composite
def events(draw: st.DrawFn) -> bytes:
    """One SSE event whose JSON uses the dialects' field names and event types."""
    payload = draw(_OBJECTS)
    if draw(st.booleans()):
        payload["type"] = draw(st.sampled_from(_TYPES))
    name = draw(st.none() | st.sampled_from(_TYPES))
    data = draw(st.sampled_from(["[DONE]", "{", ""]) | st.just(json.dumps(payload)))
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {data}\n\n".encode()


@pytest.mark.parametrize("dialect", DIALECTS)
@settings(FUZZ, max_examples=60)
@given(
    body=st.lists(events(), max_size=8).map(b"".join),
    cuts=st.lists(st.integers(0, 10**6), max_size=4),
)
def test_random_events_from_the_dialects_vocabulary(
    dialect: str, body: bytes, cuts: list[int]
) -> None:
    assert_only_rafrx_errors(run_sync(split(body, cuts), dialect))


# ---------------------------------------------------------------- mutated fixtures


@cache
def _bodies(dialect: str) -> list[bytes]:
    small = [e for e in MANIFEST if e["format"] == dialect and e["stats"]["bytes"] < 9000]
    return [fixture(e["path"])[0] for e in small]


_TOKENS = [
    b"\n", b"\n\n", b"\r", b"\r\n", b"data: ", b"event: error\n", b": ping\n", b"[DONE]",
    b'"', b"{", b"}", b"[", b"]", b",", b":", b"\\", b"\\u", b"\\ud83d", b"\xff", b"\xc3",
    b"\xef\xbb\xbf", b"\x00", b"null", b"-1", b"1e999", b'"index": 7', b'"type": "error"',
]  # fmt: skip


def mutate(body: bytes, rng: random.Random) -> bytes:
    """``body`` after one to six byte- and event-level mutations."""
    data = bytearray(body)
    for _ in range(rng.randint(1, 6)):
        if not data:
            break
        at = rng.randrange(len(data))
        kind = rng.randrange(6)
        if kind == 0:  # flip a byte
            data[at] = rng.randrange(256)
        elif kind == 1:  # delete a run
            del data[at : at + rng.randint(1, 40)]
        elif kind == 2:  # insert a token
            data[at:at] = rng.choice(_TOKENS)
        elif kind == 3:  # repeat a run (events duplicated)
            data[at:at] = data[at : at + rng.randint(1, 400)]
        elif kind == 4:  # swap two events
            blocks = bytes(data).split(b"\n\n")
            i, j = rng.randrange(len(blocks)), rng.randrange(len(blocks))
            blocks[i], blocks[j] = blocks[j], blocks[i]
            data = bytearray(b"\n\n".join(blocks))
        else:  # truncate
            del data[at:]
    return bytes(data)


def mutated(dialect: str) -> st.SearchStrategy[bytes]:
    """A recorded body of ``dialect``, mutated."""
    return st.builds(mutate, st.sampled_from(_bodies(dialect)), st.randoms(use_true_random=False))


@pytest.mark.parametrize("dialect", DIALECTS)
@FUZZ
@given(data=st.data(), cuts=st.lists(st.integers(0, 10**6), max_size=5))
def test_mutated_fixtures(dialect: str, data: st.DataObject, cuts: list[int]) -> None:
    body = data.draw(mutated(dialect), label="body")
    got = run_sync(split(body, cuts), dialect)
    assert_only_rafrx_errors(got)
    for call in tool_callings(got.results):  # a flushed call is valid or says why not
        if call.error is None:
            assert call.arguments == (json.loads(call.raw_arguments) if call.raw_arguments else {})


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_mutated_fixtures_through_the_client(llm_server: LLMServer, dialect: str) -> None:
    """A smaller run over HTTP (the same bodies, chunked by the server)."""
    rng = random.Random(dialect)
    async with CLIENTS[dialect](llm_server.url, "sk-fuzz") as client:
        for n in range(25):
            body = mutate(rng.choice(_bodies(dialect)), rng) if n else _bodies(dialect)[0]
            llm_server.enqueue(Replay(body, chunk_size=1 + n * 37))
            got = await run_async(client.stream([]))
            assert_only_rafrx_errors(got)
            assert got.updates == run_sync(body, dialect).updates
    await llm_server.wait_connections_closed()


# ---------------------------------------------------------------- tool arguments


@st.composite
def argument_texts(draw: st.DrawFn) -> str:
    """Valid JSON (mostly objects), or JSON with a mutation, or any text."""
    value = draw(st.dictionaries(st.text(max_size=6), json_values(4), max_size=4) | json_values(4))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.none() | st.just(1)))
    kind = draw(st.integers(0, 3))
    if kind == 1 and text:
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at] + draw(st.sampled_from(['"', "\\", "{", "}", ",", "\ud800", "x"])) + text[at:]
        )
    elif kind == 2:
        text = text[: draw(st.integers(0, len(text)))]
    elif kind == 3:
        text = draw(st.text(max_size=40))
    return text


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


DEEP = "[" * 50_000 + "]" * 50_000  # valid JSON that json.loads cannot build


@settings(FUZZ, max_examples=60)
@given(text=argument_texts(), cuts=st.lists(st.integers(0, 10**4), max_size=8))
@example(text='{"a": ' + DEEP + "}", cuts=[7, 3000, 99_000])
@example(text=" \u2000\t", cuts=[1])
def test_random_arguments_through_the_pipeline(text: str, cuts: list[int]) -> None:
    points = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(points)]
    updates: list[u.AgentResponseUpdate] = [u.ToolCallStart("c1", "f")]
    updates += [u.ToolCallArgs("c1", p) for p in pieces if p]
    updates += [u.ToolCallEnd("c1"), u.Finish(FinishReason.TOOL_CALLS)]
    import reactivex

    got = run_pipeline(reactivex.from_iterable(updates))
    assert got.error is None, repr(got.error)
    (call,) = tool_callings(got.results)
    assert isinstance(call, ToolCallingContent)
    ok, value = (True, {}) if not text or text.isspace() else _loads(text)  # blank: no arguments
    if ok:
        assert call.error is None
        assert call.arguments == value
    else:
        assert call.error
        assert call.raw_arguments == text


@settings(FUZZ, max_examples=60)
@given(text=argument_texts(), cuts=st.lists(st.integers(0, 10**4), max_size=8))
@example(text=DEEP, cuts=[1, 50_001])
def test_streaming_args_parser_agrees_with_json_loads(text: str, cuts: list[int]) -> None:
    points = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    parser = StreamingArgsParser()
    for a, b in itertools.pairwise(points):
        parser.feed(text[a:b])  # never raises, whatever the text
    ok, value = _loads(text)
    if ok:
        assert parser.close() == value
    else:
        with pytest.raises(json.JSONDecodeError):
            parser.close()


def test_deeply_nested_arguments_in_a_history_message_are_an_error() -> None:
    from rafrx import ChatMessage

    wire = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": DEEP}}
        ],
    }
    (call,) = ChatMessage.from_openai(wire).tool_calls or ()
    assert call.error is not None
    assert call.raw_arguments == DEEP
