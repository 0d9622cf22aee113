"""The recorder's secret redaction (``rafrx.recorder.record``), property-based.

The contract under test: a JSON-lines recording never holds a secret (the
built-in key patterns, ``*_API_KEY`` environment values and the ``secrets``
given), whatever deltas the model split it over; replaying it gives the
original response with each secret replaced by ``[REDACTED]``; an Anthropic
message that interleaves text with server / thinking blocks goes back through
``to_anthropic`` with each redacted text block where it stood (the
``rafrx.text_ref`` marks count the redacted text). Nothing is lost, reordered
or duplicated.

Every source here is a hand-built SSE body read with ``rafrx.from_sse``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from reactivex import Observable
from reactivex import operators as rxops

from rafrx import Agent, collect_agent_response, recorder
from rafrx import operators as ops
from rafrx.errors import IncompleteStream
from rafrx.messages import TEXT_REF, to_anthropic
from rafrx.response import AgentResponse
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, to_responses_input
from rafrx.tools import tool
from tests.sources._raw_server import KEY as API_KEY
from tests.sources._raw_server import raw_server

USER_SECRET = "hunter2-hunter2"
ENV_SECRET = "Zo9-PoRk-7000-FjoRd"  # known to the recorder only from the environment
KEY = "sk-proj-0123456789abcdefXYZ"  # found by the built-in sk-... pattern
REDACTED = "[REDACTED]"
GUARD = 10  # seconds, against hangs only

# Filler text: none of its characters is in a secret, none starts a key pattern
# (no "s", "A", "b", "?", "&"), so a secret is exactly where a test put it.
FILLER_CHARS = "gilmqvwxyGIL .,!é\n"

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

Event = tuple[str, dict[str, Any]]

# ================================================================ SSE bodies


def sse(*events: Event) -> bytes:
    """An SSE body: each event an ``(event name, data)`` pair."""
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def ev(kind: str, **fields: Any) -> Event:
    return kind, {"type": kind, **fields}


def message_start() -> Event:
    message = {"id": "msg_01", "model": "claude-x", "usage": {"input_tokens": 3}}
    return ev("message_start", message=message)


def message_end(reason: str = "end_turn") -> list[Event]:
    return [
        ev("message_delta", delta={"stop_reason": reason}, usage={"output_tokens": 7}),
        ev("message_stop"),
    ]


def block_start(index: int, block: dict[str, Any]) -> Event:
    return ev("content_block_start", index=index, content_block=block)


def block_delta(index: int, delta: dict[str, Any]) -> Event:
    return ev("content_block_delta", index=index, delta=delta)


def block_stop(index: int) -> Event:
    return ev("content_block_stop", index=index)


def text_block(index: int, pieces: Sequence[str]) -> list[Event]:
    deltas = [block_delta(index, {"type": "text_delta", "text": p}) for p in pieces if p]
    return [block_start(index, {"type": "text", "text": ""}), *deltas, block_stop(index)]


def thinking_block(index: int, pieces: Sequence[str]) -> list[Event]:
    deltas = [block_delta(index, {"type": "thinking_delta", "thinking": p}) for p in pieces if p]
    return [
        block_start(index, {"type": "thinking", "thinking": ""}),
        *deltas,
        block_delta(index, {"type": "signature_delta", "signature": "sig"}),
        block_stop(index),
    ]


def server_use_block(index: int, query: Sequence[str]) -> list[Event]:
    start = {"type": "server_tool_use", "id": f"srvtoolu_{index}", "name": "web_search"}
    raw = json.dumps({"query": "".join(query)})
    return [
        block_start(index, {**start, "input": {}}),
        block_delta(index, {"type": "input_json_delta", "partial_json": raw}),
        block_stop(index),
    ]


def search_result_block(index: int, use_index: int) -> list[Event]:
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": f"srvtoolu_{use_index}",
        "content": [],
    }
    return [block_start(index, result), block_stop(index)]


def tool_use_block(index: int, call_id: str, pieces: Sequence[str]) -> list[Event]:
    deltas = [
        block_delta(index, {"type": "input_json_delta", "partial_json": p}) for p in pieces if p
    ]
    start = {"type": "tool_use", "id": call_id, "name": "login", "input": {}}
    return [block_start(index, start), *deltas, block_stop(index)]


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [choice],
    }


def chat_body(*chunks: dict[str, Any], done: bool = True) -> bytes:
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    return "".join([*lines, "data: [DONE]\n\n" if done else ""]).encode()


def responses_body(*events: dict[str, Any]) -> bytes:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()


# ================================================================ recording


def record_to(source: Observable[Any], path: Path, secrets: Sequence[str] = ()) -> list[Any]:
    """Record ``source`` to ``path``; what passed through. The only error expected is a
    stream that breaks off (bodies cut on purpose)."""
    seen: list[Any] = []
    failures: list[Exception] = []
    recorder.record(source, path, secrets=secrets).subscribe(seen.append, failures.append)
    assert all(isinstance(f, IncompleteStream) for f in failures), failures
    return seen


def replayed_response(path: Path, *, converted: bool) -> AgentResponse:
    stream = recorder.replay(path)
    if not converted:
        stream = stream.pipe(ops.convert())
    return stream.pipe(ops.aggregate()).run()


def original_response(body: bytes, dialect: str) -> AgentResponse:
    return from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()


def source_of(body: bytes, dialect: str, *, converted: bool) -> Observable[Any]:
    source = from_sse(body, dialect)
    return source.pipe(ops.convert()) if converted else source


def strings_in(value: Any) -> Iterator[str]:
    """Every string (mapping keys too) in a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings_in(v)


def leaked(path: Path, secrets: Sequence[str], least: int = 8) -> list[str]:
    """The strings of a recording holding a secret, or ``least`` characters of one."""
    pieces = {s[i : i + least] for s in secrets for i in range(len(s) - least + 1)}
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = json.loads(line).get("fields", {})
        out += [s for s in strings_in(fields) if any(p in s for p in pieces)]
    return out


def wire_blocks(response: AgentResponse) -> list[dict[str, Any]]:
    """The content blocks of the (only) assistant message, as Anthropic is sent them."""
    _, wire = to_anthropic(response.turn_transcript)
    [message] = [m for m in wire if m["role"] == "assistant"]
    return list(message["content"])


def piece(text: str, start: int, end: int, spans: Sequence[tuple[int, int]]) -> str:
    """``text[start:end]`` with the secrets at ``spans`` (sorted, disjoint) redacted, the
    marker going where a secret begins (in the piece holding its first character)."""
    out: list[str] = []
    at = start
    for first, last in spans:
        if last <= start or first >= end:
            continue
        if first >= start:
            out += [text[at:first], REDACTED]
        at = max(at, min(last, end))
    out.append(text[at:end])
    return "".join(out)


def merged(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a < out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def cut(text: str, points: Sequence[int]) -> list[str]:
    """``text`` cut at ``points`` (taken modulo its length + 1; repeats give empty pieces)."""
    bounds = [0, *sorted(p % (len(text) + 1) for p in points), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


# ================================================================ strategies

filler = st.text(alphabet=FILLER_CHARS, min_size=1, max_size=12)


@st.composite
def text_with_secrets(draw: st.DrawFn, secrets: Sequence[str] = (USER_SECRET, KEY)) -> Any:
    """A text of filler and whole secrets (keys with a space each side), and where
    the secrets stand in it."""
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    at = 0
    for _ in range(draw(st.integers(1, 5))):
        word = draw(filler)
        parts.append(word)
        at += len(word)
        if draw(st.booleans()):
            secret = draw(st.sampled_from(secrets))
            pad = " " if secret == KEY else ""
            parts.append(f"{pad}{secret}{pad}")
            spans.append((at + len(pad), at + len(pad) + len(secret)))
            at += len(secret) + 2 * len(pad)
    return "".join(parts), spans


Layout = list[tuple[str, Any]]


@st.composite
def interleaved_message(draw: st.DrawFn) -> Any:
    """An Anthropic message: text blocks (one text cut into blocks anywhere, so a
    secret may straddle two) with server, thinking and tool_use blocks between
    them and after the last (so that every text block gets its mark)."""
    text, spans = draw(text_with_secrets())
    inner = st.integers(1, max(1, len(text) - 1))
    cuts = sorted(c for c in draw(st.sets(inner, max_size=3)) if c < len(text))
    bounds = [0, *cuts, len(text)]
    others = st.sampled_from(["server", "thinking", "tool"])
    layout: Layout = []
    if draw(st.booleans()):
        layout.append(("thinking", draw(text_with_secrets((USER_SECRET,)))[0]))
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        layout.append(("text", (a, b, draw(st.lists(st.integers(0, 200), max_size=4)))))
        last = i == len(bounds) - 2
        kinds = draw(st.lists(others, min_size=1 if last else 0, max_size=2))
        if last and not {"server", "thinking"} & set(kinds):
            kinds.append(draw(st.sampled_from(["server", "thinking"])))
        for kind in kinds:
            if kind == "thinking":
                layout.append((kind, draw(text_with_secrets((USER_SECRET,)))[0]))
            elif kind == "server":
                layout.append((kind, draw(st.sampled_from(["paris", f"is {KEY} ok"]))))
            else:
                layout.append((kind, draw(st.sampled_from(["ok", USER_SECRET]))))
    split_seed = draw(st.lists(st.integers(0, 300), max_size=3))
    return text, merged(spans), layout, split_seed


def build_interleaved(
    text: str, spans: list[tuple[int, int]], layout: Layout, seed: list[int]
) -> tuple[bytes, list[dict[str, Any]], str]:
    """The body of a message laid out as ``layout``, the content blocks that
    ``to_anthropic`` should send back for its redacted replay, and its redacted text."""
    events: list[Event] = [message_start()]
    expected: list[dict[str, Any]] = []
    index = 0
    tool = False
    for kind, data in layout:
        if kind == "text":
            a, b, points = data
            events += text_block(index, cut(text[a:b], points))
            redacted = piece(text, a, b, spans)
            if redacted.strip():
                expected.append({"type": "text", "text": redacted})
        elif kind == "thinking":
            events += thinking_block(index, cut(data, seed))
            thought = data.replace(USER_SECRET, REDACTED)
            expected.append({"type": "thinking", "thinking": thought, "signature": "sig"})
        elif kind == "server":
            events += server_use_block(index, [data])
            query = data.replace(KEY, REDACTED)
            expected.append(
                {
                    "type": "server_tool_use",
                    "id": f"srvtoolu_{index}",
                    "name": "web_search",
                    "input": {"query": query},
                }
            )
            index += 1
            events += search_result_block(index, index - 1)
            expected.append(
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": f"srvtoolu_{index - 1}",
                    "content": [],
                }
            )
        else:
            tool = True
            call_id = f"toolu_{index}"
            events += tool_use_block(index, call_id, cut(json.dumps({"pw": data}), seed))
            pw = data.replace(USER_SECRET, REDACTED)
            expected.append(
                {"type": "tool_use", "id": call_id, "name": "login", "input": {"pw": pw}}
            )
        index += 1
    events += message_end("tool_use" if tool else "end_turn")
    return sse(*events), expected, piece(text, 0, len(text), spans)


# ================================================================ helpers of the tests


def deep_redacted(value: Any, secrets: Sequence[str]) -> Any:
    """``value`` with each secret in each string replaced (what a redacted replay
    should give wherever the original had the secret whole)."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, list | tuple):
        return [deep_redacted(v, secrets) for v in value]
    if isinstance(value, dict):
        return {deep_redacted(k, secrets): deep_redacted(v, secrets) for k, v in value.items()}
    return value


def text_refs(path: Path) -> list[Any]:
    """The ``chars`` of each text mark in a recording, in order."""
    out = []
    for item in recorder.load(path).items:
        blocks = [c.provider_data for c in getattr(item, "contents", ())] or [
            getattr(item, "provider_data", None)
        ]
        out += [b["chars"] for b in blocks if isinstance(b, dict) and b.get("type") == TEXT_REF]
    return out


def recorded_text(path: Path) -> str:
    """The text of a recording of raw updates: its text deltas joined."""
    return "".join(i.delta for i in recorder.load(path).items if type(i).__name__ == "TextDelta")


def merge_randomly(draw: st.DrawFn, *runs: list[Any]) -> list[Any]:
    """The items of ``runs`` in one list, each run keeping its order."""
    left = [list(run) for run in runs if run]
    out: list[Any] = []
    while left:
        run = left[draw(st.integers(0, len(left) - 1))]
        out.append(run.pop(0))
        left = [r for r in left if r]
    return out


@pytest.fixture
def env_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """A secret the recorder knows only from an ``*_API_KEY`` environment variable."""
    monkeypatch.setenv("RAFRX_HUNT_SERVICE_API_KEY", ENV_SECRET)
    return ENV_SECRET


# ================================================================ property tests


@SETTINGS
@given(message=interleaved_message(), converted=st.booleans())
def test_interleaved_anthropic_message_replays_redacted_with_each_block_in_place(
    tmp_path_factory: pytest.TempPathFactory, message: Any, converted: bool
) -> None:
    """Text cut into blocks anywhere (a secret may straddle two, or a block may be
    all secret), thinking / server / tool_use blocks between: the replay sends each
    redacted block back where it stood."""
    text, spans, layout, seed = message
    body, expected_blocks, expected_text = build_interleaved(text, spans, layout, seed)
    path = tmp_path_factory.mktemp("rec") / "turn.jsonl"

    passed = record_to(source_of(body, "anthropic", converted=converted), path, [USER_SECRET])
    assert passed == source_of(body, "anthropic", converted=converted).pipe(rxops.to_list()).run()

    assert leaked(path, [USER_SECRET, KEY]) == []
    replayed = replayed_response(path, converted=converted)
    assert replayed.text == expected_text
    assert wire_blocks(replayed) == expected_blocks


@st.composite
def chat_turn(draw: st.DrawFn) -> Any:
    """A chat stream: reasoning, text and one call's arguments, each with secrets in
    it, cut into deltas anywhere and interleaved in any order."""
    secrets = (USER_SECRET, KEY, ENV_SECRET)
    text, _ = draw(text_with_secrets(secrets))
    thought, _ = draw(text_with_secrets(secrets))
    password = draw(st.sampled_from([USER_SECRET, ENV_SECRET, "plain", f'say "{USER_SECRET}"']))
    note = draw(filler)
    arguments = json.dumps({"pw": password, "note": note})
    points = st.lists(st.integers(0, 400), max_size=6)
    reasoning = [chat_chunk({"reasoning_content": p}) for p in cut(thought, draw(points)) if p]
    answer = [chat_chunk({"content": p}) for p in cut(text, draw(points)) if p]
    call = {"index": 0, "id": "call_1", "type": "function"}
    first = chat_chunk({"tool_calls": [{**call, "function": {"name": "login", "arguments": ""}}]})
    fragments = [
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
        for p in cut(arguments, draw(points))
        if p
    ]
    chunks = merge_randomly(draw, reasoning, answer)
    return chat_body(*chunks, first, *fragments, chat_chunk({}, "tool_calls"))


@SETTINGS
@given(body=chat_turn(), converted=st.booleans())
def test_chat_turn_with_secrets_anywhere_replays_as_the_original_redacted(
    tmp_path_factory: pytest.TempPathFactory, env_secret: str, body: bytes, converted: bool
) -> None:
    secrets = [USER_SECRET, KEY, env_secret]
    path = tmp_path_factory.mktemp("rec") / "chat.jsonl"
    passed = record_to(source_of(body, "openai-chat", converted=converted), path, [USER_SECRET])

    assert leaked(path, secrets) == []
    loaded = recorder.load(path).items
    assert [type(i) for i in loaded] == [type(i) for i in passed]  # nothing lost or added
    original = original_response(body, "openai-chat")
    replayed = replayed_response(path, converted=converted)
    assert replayed.text == deep_redacted(original.text, secrets)
    assert replayed.reasoning_text == deep_redacted(original.reasoning_text, secrets)
    assert [c.arguments for c in replayed.tool_calls] == deep_redacted(
        [c.arguments for c in original.tool_calls], secrets
    )
    assert replayed.finish_reason is original.finish_reason


# Words whose joins make secrets, near misses and key patterns (a key right after a
# letter is none; "hunt" and "sk-" only begin one).
near_misses = st.sampled_from(
    [
        *(USER_SECRET, KEY, ENV_SECRET, "hunter2", "hunt", "-", "sk-", "sk-proj-01234"),
        *("ask-0123456789abcdefXYZ", "Bearer abcdefgh123", "bear", "?key=v4lue&", "AIza"),
        *("Zo9-PoRk", " ", "é", "\n", "a", "s", "ok"),
    ]
)


@SETTINGS
@given(
    words=st.lists(near_misses, max_size=10),
    thought=st.lists(near_misses, max_size=6),
    points=st.lists(st.integers(0, 300), max_size=8),
    converted=st.booleans(),
)
def test_chat_text_and_reasoning_redact_like_their_whole_texts(
    tmp_path_factory: pytest.TempPathFactory,
    env_secret: str,
    words: list[str],
    thought: list[str],
    points: list[int],
    converted: bool,
) -> None:
    """Deltas cut anywhere through secrets and near misses: the replay's text and
    reasoning are the original ones redacted as whole texts."""
    text, reasoning = "".join(words) + ".", "".join(thought) + "."
    chunks = [chat_chunk({"reasoning_content": p}) for p in cut(reasoning, points) if p]
    chunks += [chat_chunk({"content": p}) for p in cut(text, points[::-1]) if p]
    body = chat_body(*chunks, chat_chunk({}, "stop"))
    path = tmp_path_factory.mktemp("rec") / "near.jsonl"
    record_to(source_of(body, "openai-chat", converted=converted), path, [USER_SECRET])

    for secret in (USER_SECRET, env_secret):
        assert leaked(path, [secret], least=len(secret)) == []
    replayed = replayed_response(path, converted=converted)
    assert replayed.text == recorder.redact(text, [USER_SECRET])
    assert replayed.reasoning_text == recorder.redact(reasoning, [USER_SECRET])


pattern_words = st.sampled_from([KEY, "ask-0123456789abcdefXYZ", "sk-", "ok", "7", " ", ".", "é"])


@st.composite
def responses_turn(draw: st.DrawFn) -> Any:
    """A Responses stream: a reasoning item, a message and a function call, with
    secrets in each, cut into deltas anywhere."""
    summary, _ = draw(text_with_secrets())
    text, _ = draw(text_with_secrets())
    arguments = json.dumps({"pw": draw(st.sampled_from([USER_SECRET, KEY, "plain"]))})
    points = st.lists(st.integers(0, 400), max_size=5)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-x"}}
    ]
    events += [
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0}
        | {"summary_index": 0, "delta": p}
        for p in cut(summary, draw(points))
        if p
    ]
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": "gAAAAB",
    }
    events.append({"type": "response.output_item.done", "output_index": 0, "item": reasoning})
    message = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    events.append({"type": "response.output_item.added", "output_index": 1, "item": message})
    events += [
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1}
        | {"content_index": 0, "delta": p}
        for p in cut(text, draw(points))
        if p
    ]
    part = {"type": "output_text", "text": text, "annotations": []}
    done = {**message, "status": "completed", "content": [part]}
    events.append({"type": "response.output_item.done", "output_index": 1, "item": done})
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "login"}
    events.append(
        {"type": "response.output_item.added", "output_index": 2, "item": {**call, "arguments": ""}}
    )
    events += [
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2}
        | {"delta": p}
        for p in cut(arguments, draw(points))
        if p
    ]
    finished = {**call, "arguments": arguments, "status": "completed"}
    events.append({"type": "response.output_item.done", "output_index": 2, "item": finished})
    events.append(
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}
    )
    return responses_body(*events)


@SETTINGS
@given(body=responses_turn(), converted=st.booleans())
def test_responses_turn_with_secrets_replays_and_goes_back_as_the_original_redacted(
    tmp_path_factory: pytest.TempPathFactory, body: bytes, converted: bool
) -> None:
    secrets = [USER_SECRET, KEY]
    path = tmp_path_factory.mktemp("rec") / "responses.jsonl"
    record_to(source_of(body, "openai-responses", converted=converted), path, [USER_SECRET])

    assert leaked(path, secrets) == []
    original = original_response(body, "openai-responses")
    replayed = replayed_response(path, converted=converted)
    assert replayed.text == deep_redacted(original.text, secrets)
    assert replayed.reasoning_text == deep_redacted(original.reasoning_text, secrets)
    sent = to_responses_input(replayed.turn_transcript)
    assert sent == deep_redacted(to_responses_input(original.turn_transcript), secrets)


@SETTINGS
@given(
    before=filler,
    cut_at=st.integers(1, len(USER_SECRET) - 1),
    points=st.lists(st.integers(0, 100), max_size=5),
)
def test_a_chat_stream_cut_inside_a_secret_keeps_none_of_it(
    tmp_path_factory: pytest.TempPathFactory, before: str, cut_at: int, points: list[int]
) -> None:
    """The stream breaks off (no finish, no [DONE]) ``cut_at`` characters into the
    secret: four or more of them are hidden, the text before is kept."""
    text = before + USER_SECRET[:cut_at]
    body = chat_body(*[chat_chunk({"content": p}) for p in cut(text, points) if p], done=False)
    path = tmp_path_factory.mktemp("rec") / "cut.jsonl"
    record_to(from_sse(body, "openai-chat"), path, [USER_SECRET])

    hidden = before + REDACTED if cut_at >= 4 else text
    assert recorded_text(path) == hidden
    if cut_at >= 4:
        assert leaked(path, [USER_SECRET[:cut_at]], least=4) == []
    assert isinstance(recorder.load(path).error, IncompleteStream)


@SETTINGS
@given(
    cut_at=st.integers(4, len(USER_SECRET) - 1),
    points=st.lists(st.integers(0, 100), max_size=5),
    converted=st.booleans(),
)
def test_tool_arguments_cut_inside_a_secret_keep_none_of_it(
    tmp_path_factory: pytest.TempPathFactory, cut_at: int, points: list[int], converted: bool
) -> None:
    """A tool_use block whose input breaks off inside the secret (max_tokens)."""
    raw = '{"user": "me", "pw": "' + USER_SECRET[:cut_at]
    body = sse(
        message_start(),
        *tool_use_block(0, "toolu_1", cut(raw, points))[:-1],  # never stopped
        *message_end("max_tokens"),
    )
    path = tmp_path_factory.mktemp("rec") / "cut.jsonl"
    record_to(source_of(body, "anthropic", converted=converted), path, [USER_SECRET])

    assert leaked(path, [USER_SECRET[:cut_at]], least=4) == []
    [call] = replayed_response(path, converted=converted).tool_calls
    assert call.complete is False
    assert "me" in (call.raw_arguments or "")  # what came before the secret is kept


@SETTINGS
@given(
    head=filler,
    tail=filler,
    split=st.integers(1, len(USER_SECRET) - 1),
    points=st.lists(st.integers(0, 60), max_size=4),
    between=st.sampled_from(["thinking", "server"]),
)
def test_a_secret_straddling_two_text_blocks_is_redacted_and_the_marks_count_it(
    tmp_path_factory: pytest.TempPathFactory,
    head: str,
    tail: str,
    split: int,
    points: list[int],
    between: str,
) -> None:
    first, second = head + USER_SECRET[:split], USER_SECRET[split:] + tail
    middle = thinking_block(1, ["hm"]) if between == "thinking" else server_use_block(1, ["q"])
    body = sse(
        message_start(),
        *text_block(0, cut(first, points)),
        *middle,
        *text_block(2, cut(second, points)),
        *server_use_block(3, ["r"]),
        *message_end(),
    )
    path = tmp_path_factory.mktemp("rec") / "straddle.jsonl"
    record_to(from_sse(body, "anthropic"), path, [USER_SECRET])

    assert leaked(path, [USER_SECRET], least=4) == []
    assert text_refs(path) == [len(head + REDACTED), len(tail)]
    texts = [
        b["text"] for b in wire_blocks(replayed_response(path, converted=False)) if "text" in b
    ]
    assert texts == [t for t in (head + REDACTED, tail) if t.strip()]


# ================================================================ edge cases that hold


def test_a_secret_one_character_per_delta_across_a_search_is_redacted(tmp_path: Path) -> None:
    text = f"Your key {KEY} leaked."
    body = sse(
        message_start(),
        *text_block(0, list(text[:20])),
        *server_use_block(1, ["leak"]),
        *search_result_block(2, 1),
        *text_block(3, list(text[20:])),
        *thinking_block(4, ["done"]),
        *message_end(),
    )
    path = tmp_path / "chars.jsonl"
    record_to(from_sse(body, "anthropic"), path)
    assert leaked(path, [KEY], least=6) == []
    replayed = replayed_response(path, converted=False)
    assert replayed.text == "Your key [REDACTED] leaked."
    assert [b.get("text") for b in wire_blocks(replayed)][:4] == [
        "Your key [REDACTED]",
        None,
        None,
        " leaked.",
    ]


def test_a_secret_starting_exactly_at_a_block_start_leaves_the_block_before_alone(
    tmp_path: Path,
) -> None:
    body = sse(
        message_start(),
        *text_block(0, ["Look: "]),
        *thinking_block(1, ["ok"]),
        *text_block(2, [USER_SECRET[:5], USER_SECRET[5:], " end"]),
        *thinking_block(3, ["ok"]),
        *message_end(),
    )
    path = tmp_path / "edge.jsonl"
    record_to(from_sse(body, "anthropic"), path, [USER_SECRET])
    assert text_refs(path) == [6, len(REDACTED) + 4]
    replayed = replayed_response(path, converted=False)
    assert [b.get("text") for b in wire_blocks(replayed)] == [
        "Look: ",
        None,
        "[REDACTED] end",
        None,
    ]


def test_a_text_block_that_is_all_secret_middle_counts_zero_and_is_left_out(
    tmp_path: Path,
) -> None:
    """Block 2 holds only the middle of a secret begun in block 1 and ended in block 3."""
    body = sse(
        message_start(),
        *text_block(0, ["pw " + USER_SECRET[:4]]),
        *server_use_block(1, ["a"]),
        *text_block(2, [USER_SECRET[4:10]]),
        *server_use_block(3, ["b"]),
        *text_block(4, [USER_SECRET[10:] + " ok"]),
        *server_use_block(5, ["c"]),
        *message_end(),
    )
    path = tmp_path / "middle.jsonl"
    record_to(from_sse(body, "anthropic"), path, [USER_SECRET])
    assert text_refs(path) == [len("pw [REDACTED]"), 0, 3]
    blocks = wire_blocks(replayed_response(path, converted=False))
    assert [(b["type"], b.get("text")) for b in blocks] == [
        ("text", "pw [REDACTED]"),
        ("server_tool_use", None),
        ("server_tool_use", None),
        ("text", " ok"),
        ("server_tool_use", None),
    ]


def test_raw_and_converted_recordings_of_an_interleaved_turn_replay_alike(tmp_path: Path) -> None:
    body = sse(
        message_start(),
        *thinking_block(0, ["think ", USER_SECRET[:6], USER_SECRET[6:]]),
        *text_block(1, ["a ", KEY[:10], KEY[10:], " b"]),
        *tool_use_block(2, "toolu_1", ['{"pw": "hunter', '2-hunter2"}']),
        *thinking_block(3, ["more"]),
        *text_block(4, ["c ", USER_SECRET]),
        *server_use_block(5, [f"q {KEY}"]),
        *message_end("tool_use"),
    )
    raw, converted = tmp_path / "raw.jsonl", tmp_path / "converted.jsonl"
    record_to(from_sse(body, "anthropic"), raw, [USER_SECRET])
    record_to(from_sse(body, "anthropic").pipe(ops.convert()), converted, [USER_SECRET])
    first = replayed_response(raw, converted=False)
    second = replayed_response(converted, converted=True)
    assert first == second
    _, wire = to_anthropic(original_response(body, "anthropic").turn_transcript)
    assert to_anthropic(first.turn_transcript)[1] == deep_redacted(wire, [USER_SECRET, KEY])


def test_a_secret_in_the_text_a_block_starts_with_is_redacted(tmp_path: Path) -> None:
    """Some proxies put the first text in content_block_start."""
    body = sse(
        message_start(),
        block_start(0, {"type": "text", "text": "pw hunter2-"}),
        block_delta(0, {"type": "text_delta", "text": "hunter2 ok"}),
        block_stop(0),
        *thinking_block(1, ["x"]),
        *message_end(),
    )
    path = tmp_path / "start.jsonl"
    record_to(from_sse(body, "anthropic"), path, [USER_SECRET])
    assert text_refs(path) == [len("pw [REDACTED] ok")]
    assert replayed_response(path, converted=False).text == "pw [REDACTED] ok"


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (
            ["Authorization: Bear", "er abc.def", "ghijkl done"],
            "Authorization: Bearer [REDACTED] done",
        ),
        (["GET /v1?ke", "y=s3cr3tv", "alue&x=1"], "GET /v1?key=[REDACTED]&x=1"),
        (["google AI", "zaSyA01234567890123456", "78901234567 ok"], "google [REDACTED] ok"),
    ],
    ids=["bearer", "query-key", "google-key"],
)
def test_built_in_patterns_split_over_chat_deltas_are_redacted(
    tmp_path: Path, pieces: list[str], expected: str
) -> None:
    body = chat_body(*[chat_chunk({"content": p}) for p in pieces], chat_chunk({}, "stop"))
    path = tmp_path / "pattern.jsonl"
    record_to(from_sse(body, "openai-chat"), path)
    assert recorded_text(path) == expected
    assert replayed_response(path, converted=False).text == expected


def test_an_environment_secret_split_in_a_tool_call_is_redacted_in_every_content(
    tmp_path: Path, env_secret: str
) -> None:
    raw = json.dumps({"token": env_secret, "path": "/tmp/x"})
    fragments = [raw[i : i + 3] for i in range(0, len(raw), 3)]
    call = {"index": 0, "id": "call_1", "type": "function"}
    body = chat_body(
        chat_chunk({"tool_calls": [{**call, "function": {"name": "f", "arguments": ""}}]}),
        *[
            chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": f}}]})
            for f in fragments
        ],
        chat_chunk({}, "tool_calls"),
    )
    path = tmp_path / "env.jsonl"
    record_to(from_sse(body, "openai-chat").pipe(ops.convert()), path)
    assert leaked(path, [env_secret], least=5) == []
    [call_made] = replayed_response(path, converted=True).tool_calls
    assert call_made.arguments == {"token": REDACTED, "path": "/tmp/x"}


def test_a_secret_with_a_quote_split_over_tool_input_is_redacted(tmp_path: Path) -> None:
    secret = 'pa"ss\\w0rd-42'
    raw = json.dumps({"pw": secret})
    body = sse(
        message_start(),
        *tool_use_block(0, "toolu_1", [raw[:10], raw[10:14], raw[14:]]),
        *message_end("tool_use"),
    )
    path = tmp_path / "quote.jsonl"
    record_to(from_sse(body, "anthropic"), path, [secret])
    assert "w0rd-42" not in path.read_text(encoding="utf-8")
    [call] = replayed_response(path, converted=False).tool_calls
    assert call.arguments == {"pw": REDACTED}


def test_a_failing_stream_writes_its_held_deltas_then_the_error(tmp_path: Path) -> None:
    """The stream breaks off inside a key's pattern run: the key, complete, is hidden,
    and the error line comes after every item."""
    body = sse(
        message_start(),
        *text_block(0, ["key ", KEY]),
        *thinking_block(1, ["x"]),
        block_start(2, {"type": "text", "text": ""}),
        block_delta(2, {"type": "text_delta", "text": " more " + KEY[:20]}),
    )
    path = tmp_path / "fail.jsonl"
    passed = record_to(from_sse(body, "anthropic"), path)
    loaded = recorder.load(path)
    assert [type(i) for i in loaded.items] == [type(i) for i in passed]
    assert isinstance(loaded.error, IncompleteStream)
    assert leaked(path, [KEY], least=12) == []
    assert recorded_text(path) == "key [REDACTED] more [REDACTED]"


# ================================================================ bugs


@tool
def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"found {query}"


def answering(*bodies: bytes) -> Any:
    """A raw_server handler answering each request with the next body."""
    left = list(bodies)

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=left.pop(0), content_type="text/event-stream")

    return handle


async def record_agent_turn(
    client_class: Any, bodies: Sequence[bytes], path: Path
) -> tuple[AgentResponse, AgentResponse]:
    """An agent's turn over ``bodies`` (one per model call), recorded: the response
    as it ran and as the recording replays."""
    async with (
        raw_server(answering(*bodies)) as (url, _),
        client_class(url, API_KEY, "model-x") as client,
    ):
        agent = Agent(client, tools=[lookup])
        turn = recorder.record(agent.run("Check my key"), path)
        ran = await asyncio.wait_for(collect_agent_response(turn), GUARD)
    return ran, await collect_agent_response(recorder.replay(path))


def tool_use_turn(text: str) -> bytes:
    """A first Anthropic message: ``text``, then a call of ``lookup`` (no thinking)."""
    return sse(
        message_start(),
        *text_block(0, [text]),
        *tool_use_block(1, "toolu_1", ['{"query": "key"}']),
        *message_end("tool_use"),
    )


@pytest.mark.asyncio
async def test_an_agent_turn_keeps_the_text_blocks_of_its_later_message_in_place(
    tmp_path: Path,
) -> None:
    second = sse(
        message_start(),
        *text_block(0, ["Done. Searching for more now, please wait."]),
        *server_use_block(1, ["more"]),
        *search_result_block(2, 1),
        *text_block(3, [" Bye."]),
        *message_end(),
    )
    ran, replayed = await record_agent_turn(
        AnthropicClient, [tool_use_turn(f"Your key: {KEY}."), second], tmp_path / "agent.jsonl"
    )
    _, wire = to_anthropic(replayed.turn_transcript)
    assert wire == deep_redacted(to_anthropic(ran.turn_transcript)[1], [KEY])
    assert [b.get("text") for b in wire[-1]["content"]] == [
        "Done. Searching for more now, please wait.",
        None,
        None,
        " Bye.",
    ]


@pytest.mark.asyncio
async def test_a_key_opening_the_next_message_of_an_agent_turn_is_redacted(
    tmp_path: Path,
) -> None:
    call = {"index": 0, "id": "call_1", "type": "function"}
    first = chat_body(
        chat_chunk({"content": "Let me look that up"}),
        chat_chunk({"tool_calls": [{**call, "function": {"name": "lookup", "arguments": ""}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": "k"}'}}]}),
        chat_chunk({}, "tool_calls"),
    )
    second = chat_body(
        chat_chunk({"content": f"{KEY} is the key on file."}), chat_chunk({}, "stop")
    )
    path = tmp_path / "agent.jsonl"
    _, replayed = await record_agent_turn(OpenAIChatClient, [first, second], path)
    assert leaked(path, [KEY]) == []
    assert replayed.turn_transcript[-1].content == "[REDACTED] is the key on file."


@pytest.mark.parametrize(
    ("secret", "escaped"),
    [
        ("hunter2&hunter2", "hunter2\\u0026hunter2"),
        ("hunter2<hunter2>", "hunter2\\u003chunter2\\u003e"),
        ("hunter2/hunter2", "hunter2\\/hunter2"),
    ],
    ids=["go-amp", "go-angle", "slash"],
)
def test_a_secret_escaped_otherwise_in_tool_arguments_is_redacted(
    tmp_path: Path, secret: str, escaped: str
) -> None:
    raw = '{"pw": "' + escaped + '"}'
    call = {"index": 0, "id": "call_1", "type": "function"}
    body = chat_body(
        chat_chunk({"tool_calls": [{**call, "function": {"name": "login", "arguments": ""}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": raw[:11]}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": raw[11:]}}]}),
        chat_chunk({}, "tool_calls"),
    )
    path = tmp_path / "escaped.jsonl"
    record_to(from_sse(body, "openai-chat"), path, [secret])
    [call_made] = replayed_response(path, converted=False).tool_calls
    assert call_made.arguments == {"pw": REDACTED}


@pytest.mark.asyncio
async def test_record_sse_masks_a_secret_the_body_sends_unicode_escaped(tmp_path: Path) -> None:
    secret = "pässwort-2024"
    body = chat_body(chat_chunk({"content": f"the password is {secret}"}), chat_chunk({}, "stop"))
    assert b"p\\u00e4sswort" in body  # json.dumps escapes it

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    path = tmp_path / "turn.sse"
    async for _ in recorder.record_sse(chunks(), path, secrets=[secret]):
        pass
    replayed = recorder.replay(path, dialect="openai-chat").pipe(ops.convert(), ops.aggregate())
    assert secret not in replayed.run().text


def responses_message(index: int, item_id: str, text: str) -> list[dict[str, Any]]:
    message = {"type": "message", "id": item_id, "role": "assistant", "content": []}
    part = {"type": "output_text", "text": text, "annotations": []}
    return [
        {"type": "response.output_item.added", "output_index": index, "item": message},
        {"type": "response.output_text.delta", "item_id": item_id, "output_index": index}
        | {"content_index": 0, "delta": text},
        {"type": "response.output_item.done", "output_index": index}
        | {"item": {**message, "status": "completed", "content": [part]}},
    ]


def responses_reasoning(index: int, item_id: str) -> dict[str, Any]:
    item = {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": "gAAAAB"}
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def test_a_secret_split_between_two_responses_messages_is_in_no_message_ref(
    tmp_path: Path,
) -> None:
    body = responses_body(
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-x"}},
        responses_reasoning(0, "rs_1"),
        *responses_message(1, "msg_1", "code hunter2-"),
        responses_reasoning(2, "rs_2"),
        *responses_message(3, "msg_2", "hunter2 ok"),
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    )
    path = tmp_path / "two.jsonl"
    record_to(from_sse(body, "openai-responses"), path, [USER_SECRET])
    assert leaked(path, [USER_SECRET], least=7) == []
    replayed = replayed_response(path, converted=False)
    sent = [i for i in to_responses_input(replayed.turn_transcript) if i.get("type") == "message"]
    assert "".join(i["content"][0]["text"] for i in sent) == replayed.text == "code [REDACTED] ok"


def test_a_secret_split_between_two_thinking_blocks_is_in_no_thinking_block(
    tmp_path: Path,
) -> None:
    body = sse(
        message_start(),
        *thinking_block(0, ["plan: hunter2-"]),
        *text_block(1, ["Looking."]),
        *thinking_block(2, ["hunter2 then go"]),
        *text_block(3, ["Done."]),
        *server_use_block(4, ["q"]),
        *message_end(),
    )
    path = tmp_path / "thinking.jsonl"
    record_to(from_sse(body, "anthropic"), path, [USER_SECRET])
    replayed = replayed_response(path, converted=False)
    assert replayed.reasoning_text == "plan: [REDACTED] then go"
    thoughts = [b["thinking"] for b in wire_blocks(replayed) if b["type"] == "thinking"]
    assert leaked(path, [USER_SECRET], least=7) == []
    assert thoughts == ["plan: [REDACTED]", "[REDACTED] then go"]  # (each block alone)


def test_a_numeric_secret_does_not_break_the_text_marks(tmp_path: Path) -> None:
    text = "x" * 1234
    body = sse(
        message_start(),
        *text_block(0, [text]),
        *server_use_block(1, ["q"]),
        *text_block(2, ["The PIN is 4321."]),
        *server_use_block(3, ["r"]),
        *message_end(),
    )
    path = tmp_path / "pin.jsonl"
    record_to(from_sse(body, "anthropic"), path, ["1234", "4321"])
    replayed = replayed_response(path, converted=False)
    texts = [b["text"] for b in wire_blocks(replayed) if b["type"] == "text"]
    assert texts == [text, "The PIN is [REDACTED]."]


def test_a_finished_answer_ending_like_a_secret_begins_keeps_its_text(tmp_path: Path) -> None:
    body = chat_body(
        chat_chunk({"content": "Time to "}), chat_chunk({"content": "hunt"}), chat_chunk({}, "stop")
    )
    path = tmp_path / "hunt.jsonl"
    record_to(from_sse(body, "openai-chat"), path, [USER_SECRET])
    assert replayed_response(path, converted=False).text == "Time to hunt"


# ================================================================ text blocks


@pytest.mark.parametrize("converted", [False, True])
def test_a_key_that_opens_a_text_block_after_a_word_ending_the_one_before_is_redacted(
    tmp_path: Path, converted: bool
) -> None:
    """Two text blocks with a server tool between them: the second's key follows a
    letter in the joined text, but not in its own block."""
    body = sse(
        message_start(),
        *text_block(0, ["Let me search for abc"]),
        *server_use_block(1, ["abc"]),
        *search_result_block(2, 1),
        *text_block(3, [KEY[:5], KEY[5:], " is what I found."]),
        *message_end(),
    )
    path = tmp_path / "turn.jsonl"
    record_to(source_of(body, "anthropic", converted=converted), path)
    assert leaked(path, [KEY]) == []
    assert replayed_response(path, converted=converted).text == (
        f"Let me search for abc{REDACTED} is what I found."
    )


@SETTINGS
@given(
    head=filler,
    tail=filler,
    points=st.lists(st.integers(0, 60), max_size=5),
    between=st.sampled_from(["thinking", "server"]),
    converted=st.booleans(),
)
def test_a_key_opening_a_text_block_is_redacted_however_it_is_cut(
    tmp_path_factory: pytest.TempPathFactory,
    head: str,
    tail: str,
    points: list[int],
    between: str,
    converted: bool,
) -> None:
    """The block before ends in a letter: joined, the key does not start a word."""
    middle = thinking_block(1, ["hm"]) if between == "thinking" else server_use_block(1, ["q"])
    body = sse(
        message_start(),
        *text_block(0, cut(head + "x", points)),
        *middle,
        *text_block(2, cut(KEY + " " + tail, points)),
        *message_end(),
    )
    path = tmp_path_factory.mktemp("rec") / "opening.jsonl"
    record_to(source_of(body, "anthropic", converted=converted), path)

    assert leaked(path, [KEY]) == []
    assert replayed_response(path, converted=converted).text == f"{head}x{REDACTED} {tail}"
