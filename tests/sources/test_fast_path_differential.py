"""Differential tests: the dialects' msgspec fast paths against their general paths.

``tests/sources/test_dialect_fast_paths.py`` feeds ``json.dumps`` output. Here
the JSON text itself is adversarial, written token by token: keys in any
order, members the structs do not name (with any JSON value in them),
duplicate keys (``json.loads``: the last one wins), strings with ``\\u``
escapes (surrogate pairs included), integers written as ``1.0`` / ``1e0`` /
``-0.0``, whitespace between tokens. The same events go to a dialect with its
fast path and to one with it switched off; every update and every error must
be the same.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafrx.sources import AnthropicDialect, OpenAIChatDialect
from rafrx.sse import ServerSentEvent
from tests.sources.test_dialect_fast_paths import general_path_only, replay

FAST = settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def both_ways(make: Callable[[], Any], events: list[ServerSentEvent]) -> tuple[Any, Any]:
    fast = replay(make, events)
    with general_path_only():
        general = replay(make, events)
    return fast, general


# -- writing JSON adversarially -------------------------------------------------


class Float(float):
    """An integer the writer must spell as a float (``1.0``, ``1e0``)."""


_WS = st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n "])
_EXTRA_VALUES = st.sampled_from(
    [None, True, 0, -1, 1.5, 1e300, "", "x", "é", [], {}, [1, [2, {"k": None}]], {"a": {"b": []}}]
)


@st.composite
def string_text(draw: st.DrawFn, value: str) -> str:
    escape = draw(st.integers(0, 2 ** len(value) - 1)) if draw(st.booleans()) else 0
    upper = draw(st.booleans())
    out = ['"']
    for i, ch in enumerate(value):
        code = ord(ch)
        if ch in '"\\' or code < 0x20 or escape >> i & 1:
            if code > 0xFFFF:
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04X}")
            else:
                out.append(f"\\u{code:04X}" if upper else f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


@st.composite
def json_text(draw: st.DrawFn, value: Any, extras: bool = True) -> str:
    ws = draw(_WS)
    if isinstance(value, Float):
        return ws + draw(st.sampled_from([repr(float(value)), f"{float(value):e}"]))
    if value is None or isinstance(value, bool):
        return ws + json.dumps(value)
    if isinstance(value, int | float):
        return ws + json.dumps(value)
    if isinstance(value, str):
        return ws + draw(string_text(value))
    if isinstance(value, list):
        items = [draw(json_text(v, extras)) for v in value]
        return ws + "[" + ",".join(items) + draw(_WS) + "]"
    assert isinstance(value, dict)
    pairs = list(value.items())
    if extras:
        for name in draw(st.lists(st.sampled_from(["x", "extra", "logprobs", "ÿ"]), max_size=2)):
            if name not in value and name not in dict(pairs):
                pairs.append((name, draw(_EXTRA_VALUES)))
    members = [pairs[i] for i in draw(st.permutations(range(len(pairs))))]
    decoys = []  # duplicate keys written first: json.loads keeps the last one
    if extras and members and draw(st.integers(0, 4)) == 0:
        key = draw(st.sampled_from([k for k, _ in members]))
        decoys.append((key, draw(_EXTRA_VALUES)))
    parts = [
        draw(string_text(k)) + draw(_WS) + ":" + draw(json_text(v, extras))
        for k, v in [*decoys, *members]
    ]
    return ws + "{" + ",".join(draw(_WS) + p for p in parts) + draw(_WS) + "}"


def _maybe_float(values: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    return st.one_of(values, values.map(Float))


_ABSENT = object()


def _obj(**members: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(members).map(
        lambda d: {k: v for k, v in d.items() if v is not _ABSENT}
    )


def _opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(_ABSENT), st.none(), strategy, strategy)


_texts = st.sampled_from(["", "Hi", 'q"\\/', "é中😀", "\u2028\x00\x1f", "a\nb"])

_chat_chunk = _obj(
    id=_opt(st.sampled_from(["chatcmpl-1", ""])),
    object=_opt(st.sampled_from(["chat.completion.chunk", "chat.completion"])),
    model=_opt(st.sampled_from(["gpt-4o", "é"])),
    choices=_opt(
        st.lists(
            _obj(
                index=_opt(_maybe_float(st.sampled_from([0, 0, 1]))),
                finish_reason=_opt(st.sampled_from(["stop", "tool_calls", ""])),
                delta=_opt(
                    _obj(
                        role=_opt(st.just("assistant")),
                        content=_opt(_texts),
                        reasoning_content=_opt(_texts),
                        reasoning=_opt(_texts),
                        refusal=_opt(_texts),
                        tool_calls=_opt(
                            st.lists(
                                _obj(
                                    index=_opt(_maybe_float(st.sampled_from([0, 1, 2]))),
                                    id=_opt(st.sampled_from(["call_1", "call_2", ""])),
                                    type=_opt(st.just("function")),
                                    function=_opt(
                                        _obj(
                                            name=_opt(st.sampled_from(["f", "", "é"])),
                                            arguments=_opt(
                                                st.sampled_from(['{"a": ', "1}", "", "é😀"])
                                            ),
                                        )
                                    ),
                                ),
                                max_size=2,
                            )
                        ),
                    )
                ),
            ),
            max_size=2,
        )
    ),
    usage=_opt(
        _obj(
            prompt_tokens=_opt(_maybe_float(st.sampled_from([0, 3, 10**20]))),
            completion_tokens=_opt(_maybe_float(st.sampled_from([2]))),
            total_tokens=_opt(st.sampled_from([5])),
        )
    ),
)

_block_delta = _obj(
    type=st.just("content_block_delta"),
    index=_maybe_float(st.sampled_from([0, 1])),
    delta=st.one_of(
        _obj(type=st.just("text_delta"), text=_opt(_texts)),
        _obj(type=st.just("input_json_delta"), partial_json=_opt(_texts)),
        _obj(type=st.just("thinking_delta"), thinking=_opt(_texts)),
        _obj(type=st.just("signature_delta"), signature=_opt(_texts)),
    ),
)


def _start(index: int, kind: str) -> ServerSentEvent:
    block: dict[str, Any] = {"type": kind, "id": f"toolu_{index}", "name": "f", "input": {}}
    if kind != "tool_use":
        block = {"type": kind, "thinking" if kind == "thinking" else "text": ""}
    payload = {"type": "content_block_start", "index": index, "content_block": block}
    return ServerSentEvent("content_block_start", json.dumps(payload))


# -- properties -------------------------------------------------------------------


@FAST
@given(data=st.data(), chunks=st.lists(_chat_chunk, min_size=1, max_size=4))
def test_openai_chat_any_spelling_of_a_chunk_gives_the_same_updates(
    data: st.DataObject, chunks: list[dict[str, Any]]
) -> None:
    events = [ServerSentEvent(data=data.draw(json_text(chunk))) for chunk in chunks]
    for event in events:
        json.loads(event.data)  # the writer writes valid JSON
    events.append(ServerSentEvent(data="[DONE]"))
    fast, general = both_ways(OpenAIChatDialect, events)
    assert fast == general


@FAST
@given(
    data=st.data(),
    kinds=st.lists(st.sampled_from(["text", "tool_use", "thinking"]), min_size=2, max_size=2),
    deltas=st.lists(_block_delta, min_size=1, max_size=5),
)
def test_anthropic_any_spelling_of_a_block_delta_gives_the_same_updates(
    data: st.DataObject, kinds: list[str], deltas: list[dict[str, Any]]
) -> None:
    events = [_start(index, kind) for index, kind in enumerate(kinds)]
    for delta in deltas:
        text = data.draw(json_text(delta))
        json.loads(text)
        events.append(ServerSentEvent("content_block_delta", text))
    events += [
        ServerSentEvent("content_block_stop", '{"type": "content_block_stop", "index": 0}'),
        ServerSentEvent("message_stop", '{"type": "message_stop"}'),
    ]
    fast, general = both_ways(AnthropicDialect, events)
    assert fast == general


_CHAT_TEXT = '{"choices": [{"index": 0, "delta": {"content": "x"}}]}'
_BLOCK_TEXT = (
    '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}'
)


def _chat(data: str) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=data), ServerSentEvent(data="[DONE]")]


def _anthropic(data: str) -> list[ServerSentEvent]:
    return [
        _start(0, "text"),
        ServerSentEvent("content_block_delta", data),
        ServerSentEvent("message_stop", '{"type": "message_stop"}'),
    ]


@pytest.mark.parametrize(
    ("make", "events"),
    [
        # Duplicate keys: the last one wins, in the structs as in json.loads.
        (OpenAIChatDialect, _chat('{"choices": [{"delta": {"content": "x", "content": "y"}}]}')),
        (OpenAIChatDialect, _chat('{"choices": [{"delta": {"content": "x", "content": null}}]}')),
        (
            OpenAIChatDialect,
            _chat('{"choices": [{"index": 1, "index": 0, "delta": {"content": "x"}}]}'),
        ),
        (
            AnthropicDialect,
            _anthropic(
                '{"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta",'
                ' "thinking": "t", "type": "text_delta", "text": "x"}}'
            ),
        ),
        (
            AnthropicDialect,
            _anthropic(
                '{"type": "ping", "type": "content_block_delta", "index": 0,'
                ' "delta": {"type": "text_delta", "text": "x"}}'
            ),
        ),
        (
            AnthropicDialect,
            _anthropic('{"index": 0, "delta": {"text": "x", "type": "text_delta"}}'),
        ),
        # Integers as floats.
        (OpenAIChatDialect, _chat('{"choices": [{"index": -0.0, "delta": {"content": "x"}}]}')),
        (OpenAIChatDialect, _chat('{"choices": [{"index": 1e-400, "delta": {"content": "x"}}]}')),
        (
            OpenAIChatDialect,
            _chat('{"choices": [{"delta": {"tool_calls": [{"index": 1e0, "id": "c"}]}}]}'),
        ),
        (AnthropicDialect, _anthropic(_BLOCK_TEXT.replace('"index": 0', '"index": 0.0'))),
        # Numbers json.loads reads as inf in skipped members.
        (OpenAIChatDialect, _chat(_CHAT_TEXT[:-1] + ', "x": 1e400}')),
        (AnthropicDialect, _anthropic(_BLOCK_TEXT[:-1] + ', "x": -1e400}')),
        # Escapes: an escaped surrogate pair, an escaped lone surrogate.
        (OpenAIChatDialect, _chat(_CHAT_TEXT.replace('"x"', '"\\ud83d\\ude00"'))),
        (OpenAIChatDialect, _chat(_CHAT_TEXT.replace('"x"', '"a\\udc00b"'))),
        (AnthropicDialect, _anthropic(_BLOCK_TEXT.replace('"x"', '"\\ud800"'))),
        # JSON whitespace around the object.
        (OpenAIChatDialect, _chat(" \r\n\t" + _CHAT_TEXT + "\n ")),
        (AnthropicDialect, _anthropic(" \r\n\t" + _BLOCK_TEXT + "\n ")),
    ],
)
def test_pinned_chunks_match(make: Callable[[], Any], events: list[ServerSentEvent]) -> None:
    fast, general = both_ways(make, events)
    assert fast == general


# -- bugs -------------------------------------------------------------------------


def test_openai_chat_data_padded_with_non_json_whitespace_is_read_the_same_both_ways() -> None:
    """The fast path strips Unicode whitespace json.loads does not accept.

    ``OpenAIChatDialect.feed`` strips data that does not start with ``{``
    with ``str.strip()`` (any Unicode whitespace: NBSP, U+001C, U+3000,
    U+2028 ...) and hands the stripped text to the typed decoder, but the
    general path parses the unstripped ``event.data``: the same chunk gives
    a TextDelta when it fits the structs and MalformedEvent when it does not
    (or with the fast path off).
    """
    fast, general = both_ways(OpenAIChatDialect, _chat("\xa0" + _CHAT_TEXT))
    assert general[0][0] == "MalformedEvent"
    assert fast == general


_BUG_CASES: list[tuple[str, Callable[[], Any], Callable[[str], list[ServerSentEvent]], str]] = [
    ("openai-chat", OpenAIChatDialect, _chat, _CHAT_TEXT),
    ("anthropic", AnthropicDialect, _anthropic, _BLOCK_TEXT),
]


def test_a_skipped_member_is_read_as_json_loads_without_the_int_digit_limit() -> None:
    """``typed_decoder()`` skips members the struct does not name without Python's
    limit on an integer's digits (``sys.get_int_max_str_digits()``): the fast
    path reads the event as the general path does once that limit is lifted
    (documented in ``typed_decoder``), in both dialects."""
    for _name, make, events, text in _BUG_CASES:
        data = events(text[:-1] + ', "x": ' + "7" * 5000 + "}")
        delta = 0 if make is OpenAIChatDialect else 1  # the event carrying the member
        fast, general = both_ways(make, data)
        assert general[delta][0] == "MalformedEvent"  # json.loads: the digit limit
        assert [type(update).__name__ for update in fast[delta]] == ["TextDelta"]
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            assert both_ways(make, data) == (fast, fast)
        finally:
            sys.set_int_max_str_digits(limit)


def test_a_raw_lone_surrogate_in_event_data_is_read_the_same_both_ways() -> None:
    """msgspec must encode ``str`` data to UTF-8 and raises UnicodeEncodeError
    on a lone surrogate; were it not among ``NOT_FITTING`` (with DecodeError
    and RecursionError), the fast path would let UnicodeEncodeError (neither a
    MalformedEvent nor a ProviderError) out of ``feed()``, while the general
    path (json.loads) reads the text (both dialects)."""
    differ = []
    for name, make, events, text in _BUG_CASES:
        fast, general = both_ways(make, events(text.replace('"x"', '"x\ud800"')))
        delta = 0 if make is OpenAIChatDialect else 1  # the event carrying the text
        assert [type(update).__name__ for update in general[delta]] == ["TextDelta"]
        if fast != general:
            differ.append((name, fast[delta]))
    assert differ == []
