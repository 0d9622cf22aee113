"""The dialects' typed fast paths give exactly what their general paths give.

``OpenAIChatDialect`` decodes a chunk that fits its typed shape straight into
msgspec structs, and ``AnthropicDialect`` does the same for text, argument and
thinking deltas; anything else goes through ``load_object`` and the dict walk.
These tests feed the same events to a dialect with its fast path and to one
with it switched off, over generated chunks that mix the usual shapes with the
odd ones (nulls, empty strings, floats and bools where ints go, objects where
strings go, error payloads), and check that every update and every error is
the same. They also check that the usual chunks of recorded streams do take the
fast path (so a schema slip cannot quietly make it dead code), and that the
JSON decoder behind ``load_object`` agrees with :func:`json.loads` on
JSONTestSuite.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx.errors import MalformedEvent
from rafrx.sources import AnthropicDialect, OpenAIChatDialect
from rafrx.sources.dialects import _common, anthropic, openai_chat
from rafrx.sse import ServerSentEvent, SSEDecoder

DATA = Path(__file__).parent.parent / "data"
SUITE = DATA / "conformance" / "json-test-suite"


@contextmanager
def general_path_only() -> Iterator[None]:
    """Switch both typed fast paths off (their decoders then fit nothing)."""
    fits_nothing = msgspec.DecodeError("fits nothing")
    with (
        mock.patch.object(openai_chat, "_decode_first", side_effect=fits_nothing),
        mock.patch.object(openai_chat, "_decode_chunk", side_effect=fits_nothing),
        mock.patch.object(anthropic, "_decode_block_delta", side_effect=fits_nothing),
    ):
        yield


def replay(make: Callable[[], Any], events: list[ServerSentEvent]) -> list[Any]:
    """Each event's updates (or its error's type and text), then close()'s."""
    dialect = make()
    seen: list[Any] = []
    for event in [*events, None]:
        try:
            seen.append(dialect.close() if event is None else dialect.feed(event))
        except Exception as err:  # the error is part of what must match
            seen.append((type(err).__name__, str(err)))
    return seen


def assert_same_both_ways(make: Callable[[], Any], events: list[ServerSentEvent]) -> None:
    fast = replay(make, events)
    with general_path_only():
        general = replay(make, events)
    assert fast == general


# ------------------------------------------------------------- strategies

# A member is absent, null or of the expected type; in an *odd* payload it may
# also be of a wrong type or an unusual shape, which the typed path must leave
# to the general one. Most generated payloads are well typed, so the typed path
# itself runs on every combination of members.
_ABSENT = object()
_texts = st.sampled_from(["", "Hi", "x y", 'q"\\', "é中😀"])
_odd_values = st.sampled_from([0, 1, -1, 1.0, 0.0, True, False, [], {}, "", "0", None])
_indexes = st.sampled_from([0, 1, 2, 3])
_blocks = st.sampled_from([0, 1, 3])  # few: starts, deltas and stops meet


def _member(
    expected: st.SearchStrategy[Any], odd: bool, unusual: st.SearchStrategy[Any] | None = None
) -> st.SearchStrategy[Any]:
    if not odd:
        return st.one_of(st.just(_ABSENT), st.none(), expected, expected, expected)
    others = _odd_values if unusual is None else st.one_of(_odd_values, unusual)
    return st.one_of(st.just(_ABSENT), st.none(), expected, others)


def _obj(**members: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(members).map(
        lambda d: {k: v for k, v in d.items() if v is not _ABSENT}
    )


def _chat_chunk(odd: bool) -> st.SearchStrategy[dict[str, Any]]:
    function = _obj(
        name=_member(st.sampled_from(["f", "get_weather", ""]), odd),
        arguments=_member(st.one_of(_texts, st.just('{"a": 1')), odd, st.just({"a": [1]})),
    )
    tool_call = _obj(
        index=_member(_indexes, odd, st.just(-1)),
        id=_member(st.sampled_from(["call_1", "call_2", ""]), odd),
        type=_member(st.just("function"), odd),
        function=_member(function, odd),
    )
    parts = st.just([{"type": "text", "text": "part"}, {"type": "thinking", "thinking": "t"}])
    delta = _obj(
        role=_member(st.just("assistant"), odd),
        content=_member(_texts, odd, parts),
        reasoning_content=_member(_texts, odd),
        reasoning=_member(_texts, odd),
        refusal=_member(_texts, odd),
        tool_calls=_member(st.lists(tool_call, max_size=3), odd),
    )
    choice = _obj(
        index=_member(st.sampled_from([0, 0, 1, 2, -1]), odd),
        delta=_member(delta, odd),
        finish_reason=_member(st.sampled_from(["stop", "tool_calls", "length", ""]), odd),
        logprobs=_member(st.just({"content": []}), odd),
    )
    errors = st.sampled_from([{"message": "boom", "type": "server_error"}, "boom"])
    return _obj(
        id=_member(st.sampled_from(["chatcmpl-1", ""]), odd),
        object=_member(st.sampled_from(["chat.completion.chunk", "chat.completion"]), odd),
        created=_member(st.just(1727346168), odd),
        model=_member(st.sampled_from(["gpt-4o", ""]), odd),
        choices=_member(st.lists(choice, max_size=2), odd),
        usage=_member(st.just({"prompt_tokens": 3, "completion_tokens": 2}), odd),
        error=st.one_of(st.just(_ABSENT), st.none(), errors) if odd else st.just(_ABSENT),
    )


def _block_delta(odd: bool) -> st.SearchStrategy[dict[str, Any]]:
    delta = st.one_of(
        _obj(type=st.just("text_delta"), text=_member(_texts, odd)),
        _obj(
            type=st.just("input_json_delta"),
            partial_json=_member(st.sampled_from(["", '{"a": ', "1}"]), odd),
        ),
        _obj(type=st.just("thinking_delta"), thinking=_member(_texts, odd)),
    )
    if odd:
        delta = st.one_of(
            delta, _obj(type=_member(st.just("signature_delta"), odd), signature=st.just("s"))
        )
    return _obj(
        type=st.just("content_block_delta")
        if not odd
        else _member(st.just("content_block_delta"), odd),
        index=_blocks if not odd else _member(_blocks, odd),
        delta=delta if not odd else _member(delta, odd),
    )


_chat_chunks = st.one_of(_chat_chunk(odd=False), _chat_chunk(odd=False), _chat_chunk(odd=True))
_block_deltas = st.one_of(_block_delta(odd=False), _block_delta(odd=False), _block_delta(odd=True))
_kinds = st.sampled_from(["text", "tool_use", "thinking"])


def _start(index: int, kind: str) -> dict[str, Any]:
    block = {"type": kind, "id": f"toolu_{index}", "name": "f", "input": {}}
    if kind != "tool_use":
        block = {"type": kind, "thinking" if kind == "thinking" else "text": ""}
    return {"type": "content_block_start", "index": index, "content_block": block}


@st.composite
def _anthropic_payloads(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Blocks (start, deltas, maybe a stop, maybe late deltas), mostly at the block's index."""
    payloads: list[dict[str, Any]] = []

    def deltas(index: int, most: int) -> list[dict[str, Any]]:
        drawn = draw(st.lists(_block_deltas, max_size=most))
        return [{**d, "index": index} if "index" in d and draw(st.booleans()) else d for d in drawn]

    for index in draw(st.lists(_blocks, max_size=3)):
        payloads.append(_start(index, draw(_kinds)))
        payloads += deltas(index, 4)
        if draw(st.booleans()):
            payloads.append({"type": "content_block_stop", "index": index})
            payloads += deltas(index, 2)  # after the stop: ignored
    return payloads


def _data(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False)


# ------------------------------------------------------------------ tests


@settings(max_examples=400, deadline=None)
@given(st.lists(_chat_chunks, min_size=1, max_size=6), st.booleans())
def test_openai_chat_fast_path_matches_the_general_path(
    chunks: list[dict[str, Any]], done: bool
) -> None:
    events = [ServerSentEvent(data=_data(chunk)) for chunk in chunks]
    if done:
        events.append(ServerSentEvent(data="[DONE]"))
    assert_same_both_ways(OpenAIChatDialect, events)


@settings(max_examples=400, deadline=None)
@given(_anthropic_payloads())
def test_anthropic_fast_path_matches_the_general_path(payloads: list[dict[str, Any]]) -> None:
    events = [ServerSentEvent(event="message_start", data=_data({"type": "message_start"}))]
    for payload in payloads:
        # The event name usually matches the type; sometimes it does not.
        name = payload.get("type") if payload.get("index") != 3 else "content_block_delta"
        events.append(ServerSentEvent(event=str(name or "message"), data=_data(payload)))
    events.append(ServerSentEvent(event="message_stop", data=_data({"type": "message_stop"})))
    assert_same_both_ways(AnthropicDialect, events)


@pytest.mark.parametrize(
    "data",
    [
        '{"choices": [{"delta": {"tool_calls": [{"index": -1, "function": {}}]}}]}',
        '{"choices": [{"delta": {"tool_calls": [{"index": 1.0, "id": "c"}]}}]}',
        '{"choices": [{"delta": {"tool_calls": [{"index": true}]}}]}',
        '{"choices": [{"index": 0, "delta": {"content": "a\\ud800b"}}]}',  # lone surrogate
        '{"choices": [{"delta": {"content": "x"}}], "usage": {"prompt_tokens": NaN}}',
        '{"choices": [{"delta": {"content": "x"}}], "choices": [{"delta": {"content": "y"}}]}',
        '{"choices": [{"delta": {"content": "x"}}], "error": null}',
        '{"choices": [{"delta": {"content": "x"}}], "error": {"message": "late"}}',
        '{"choices": [{"delta": {"content": "x"}}], "n": ' + "[" * 5000 + "]" * 5000 + "}",
    ],
)
def test_openai_chat_edge_chunks_match(data: str) -> None:
    assert_same_both_ways(OpenAIChatDialect, [ServerSentEvent(data=data)])


def _typed_anthropic_delta(event: ServerSentEvent) -> bool:
    kinds = ("text_delta", "input_json_delta", "thinking_delta")
    data = json.loads(event.data)
    return event.event == "content_block_delta" and data["delta"]["type"] in kinds


def _fixture_events(path: Path) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [*decoder.feed(path.read_bytes()), *decoder.close()]


@pytest.mark.parametrize(
    "path",
    [
        "openai-chat/openai-parallel-tool-calls.sse",
        "openai-chat/deepseek-reasoning-tools.sse",
        "openai-chat/openai-text.sse",
        "anthropic/anthropic-parallel-tool-use.sse",
        "anthropic/anthropic-thinking-tool-use.sse",
    ],
)
def test_recorded_streams_take_the_fast_path(path: str) -> None:
    """Only what does not fit the typed shapes is read the general way.

    For chat that is no chunk at all; for Anthropic, every event but the text,
    argument and thinking deltas (message and block starts and stops, pings).
    """
    events = _fixture_events(DATA / "fixtures" / path)
    chat = path.startswith("openai-chat/")
    dialect = OpenAIChatDialect() if chat else AnthropicDialect()
    general = mock.Mock(wraps=_common.load_object)
    with mock.patch.object(openai_chat if chat else anthropic, "load_object", general):
        updates = [update for event in events for update in dialect.feed(event)]
    assert len(updates) >= 3
    allowed = 0 if chat else sum(1 for e in events if not _typed_anthropic_delta(e))
    assert general.call_count == allowed
    assert allowed < len(events) / 2  # the deltas are most of the stream


def test_load_object_agrees_with_json_loads_on_json_test_suite() -> None:
    """msgspec first, json.loads when msgspec refuses: rafrx accepts what json accepts.

    Each document is tried as it is and as the member of an object, so that
    every value (not only the suite's few objects) reaches the decoder.
    """
    accepted = 0
    for path in sorted(SUITE.rglob("*.json")):
        try:
            document = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue  # not text: an SSE decoder never hands it to a dialect
        for text in (document, '{"v": ' + document + "}"):
            event = ServerSentEvent(data=text)
            try:
                expected = json.loads(text)
            except (ValueError, RecursionError):
                expected = None
            if not isinstance(expected, dict):
                with pytest.raises(MalformedEvent):
                    _common.load_object(event)
                continue
            # json.dumps tells 1 from 1.0 and -0.0 from 0.0, and writes NaN as NaN.
            assert json.dumps(_common.load_object(event)) == json.dumps(expected), path.name
            accepted += 1
    assert accepted >= 100
