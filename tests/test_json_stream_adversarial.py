"""Adversarial, differential tests of :class:`rafrx.json_stream.StreamingArgsParser`.

The oracle is :func:`json.loads` on the whole text. Documents are generated
from the JSON grammar itself (not from ``json.dumps``), so they carry what a
serializer never writes: every escape form (``\\u`` in either case, escaped
astral characters as surrogate pairs, lone surrogate escapes, raw lone
surrogates), numbers of every shape (``-0``, ``1E+2``, ``1e400``, long
mantissas), whitespace between every two tokens, duplicate keys. They are fed
in arbitrary fragments, with and without the ``grow()`` fast path, and:

* the verdict and value equal ``json.loads`` (type-, sign- and NaN-aware);
* the events never contradict the final value (progress fragments add up to
  a prefix of the member's value, and to all of it when the member completes);
* invalid texts (mutations of valid ones) are rejected, with the same error
  however they are split, and the parser stays consistent after the error and
  after ``close()``;
* the work, counted (not timed), is linear in the input.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rafrx import json_stream
from rafrx.json_stream import ArgEvent, ArgMember, ArgProgress, StreamingArgsParser
from tests.test_json_stream import same

FAST = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- helpers ----------------------------------------------------------------


def oracle(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def pieces(text: str, cuts: Sequence[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def feed_all(
    frags: Sequence[str], *, use_grow: bool = False
) -> tuple[StreamingArgsParser[ArgEvent], list[list[ArgEvent]], tuple[bool, Any]]:
    parser = StreamingArgsParser()
    per_feed: list[list[ArgEvent]] = []
    for frag in frags:
        if use_grow:
            grown = parser.grow(frag)
            if grown is not None:
                per_feed.append([ArgProgress(*grown)])
                continue
        per_feed.append(parser.feed(frag))
    try:
        verdict: tuple[bool, Any] = (True, parser.close())
    except json.JSONDecodeError:
        verdict = (False, None)
    return parser, per_feed, verdict


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


# -- a generator of JSON texts from the grammar -------------------------------

_WS = st.text(alphabet=" \t\n\r", max_size=2)
_LONE = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"]
_TRICKY = '"\\/\b\f\n\r\t\x00\x1f\x7f é€😀𝄞\u2028\u2029\ufeff'
_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f"}
_SHORT.update({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def _u(code: int, upper: bool) -> str:
    text = f"{code:04x}"
    return "\\u" + (text.upper() if upper else text)


@st.composite
def encoded_char(draw: st.DrawFn, char: str) -> str:
    """One character written any way JSON allows (and a raw lone surrogate, as json.loads does)."""
    code = ord(char)
    upper = draw(st.booleans())
    forms: list[str] = []
    if code > 0xFFFF:
        high = 0xD800 + ((code - 0x10000) >> 10)
        low = 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(_u(high, upper) + _u(low, draw(st.booleans())))
    else:
        forms.append(_u(code, upper))
    if char in _SHORT:
        forms.append(_SHORT[char])
    if char not in '"\\' and code >= 0x20:
        forms.append(char)
    return draw(st.sampled_from(forms))


@st.composite
def json_string(draw: st.DrawFn) -> str:
    chars = draw(
        st.lists(
            st.one_of(st.characters(), st.sampled_from(_TRICKY), st.sampled_from(_LONE)),
            max_size=8,
        )
    )
    return '"' + "".join(draw(encoded_char(c)) for c in chars) + '"'


_numbers = st.one_of(
    st.from_regex(r"-?(0|[1-9][0-9]{0,22})(\.[0-9]{1,18})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
    st.sampled_from(
        ["-0", "-0.0", "0e0", "1E+2", "1e400", "-1e400", "1e-400", "-0e-0", "9" * 40, "0.5e308"]
    ),
)
_literals = st.sampled_from(["true", "false", "null", "NaN", "Infinity", "-Infinity"])


def _ws(draw: st.DrawFn, text: str) -> str:
    return draw(_WS) + text + draw(_WS)


def json_text(max_leaves: int = 10) -> st.SearchStrategy[str]:
    """Valid JSON text (for json.loads), whitespace anywhere, duplicate keys allowed."""
    scalars = st.one_of(json_string(), _numbers, _literals)

    @st.composite
    def array(draw: st.DrawFn, kids: st.SearchStrategy[str]) -> str:
        items = draw(st.lists(kids, max_size=4))
        return "[" + ",".join(_ws(draw, i) for i in items) + (draw(_WS) if not items else "") + "]"

    @st.composite
    def obj(draw: st.DrawFn, kids: st.SearchStrategy[str]) -> str:
        members = draw(st.lists(st.tuples(json_string(), kids), max_size=4))
        body = ",".join(_ws(draw, k) + ":" + _ws(draw, v) for k, v in members)
        return "{" + body + (draw(_WS) if not members else "") + "}"

    return st.recursive(
        scalars, lambda kids: st.one_of(array(kids), obj(kids)), max_leaves=max_leaves
    )


@st.composite
def object_text(draw: st.DrawFn) -> str:
    """A top-level object (what tool arguments are), padded with whitespace."""
    members = draw(st.lists(st.tuples(json_string(), json_text(6)), max_size=5))
    body = ",".join(_ws(draw, k) + ":" + _ws(draw, v) for k, v in members)
    return _ws(draw, "{" + body + (draw(_WS) if not members else "") + "}")


documents = st.one_of(object_text(), object_text(), json_text().map(lambda t: " " + t + "\n"))


@st.composite
def split(draw: st.DrawFn, text: str) -> list[str]:
    mode = draw(st.sampled_from(["random", "chars", "whole"]))
    if mode == "chars":
        return list(text)
    if mode == "whole":
        return [text]
    return pieces(text, draw(st.lists(st.integers(0, len(text)), max_size=30)))


_GARBAGE = [
    "",
    "x",
    "\x00",
    "\x01",
    "\ufeff",
    ",",
    "}",
    "]",
    '"',
    "\\",
    "\\u",
    "\\ud800\\u",
    "\\x",
    "-",
    ".",
    "e",
    "+",
    "01",
    "1.",
    "tru",
    "nul",
    "NaN",
    "-NaN",
    "infinity",
    "{}",
    "[]",
    " 1",
    "/*",
    "\u00a0",
]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A valid text with a few edits: mostly invalid, sometimes still valid."""
    text = draw(documents)
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "truncate", "append", "prepend"]))
        if op == "insert":
            text = text[:pos] + draw(st.sampled_from(_GARBAGE)) + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + 1 :]
        elif op == "truncate":
            text = text[:pos]
        elif op == "append":
            text += draw(st.sampled_from(_GARBAGE))
        else:
            text = draw(st.sampled_from(_GARBAGE)) + text
    return text


# -- the events never contradict the final value --------------------------------


def check_events(text: str, per_feed: list[list[ArgEvent]], final: Any) -> None:
    """Progress adds up to (a prefix of) each string member; members follow the text."""
    events = [e for batch in per_feed for e in batch]
    if not isinstance(final, dict):
        assert events == []
        return
    members = [e for e in events if isinstance(e, ArgMember)]
    # Each key's last report is the final value (json.loads: the last duplicate wins).
    last = {m.name: m.value for m in members}
    assert same(last, final)
    assert list(last) == list(final)
    current: list[ArgProgress] = []
    for event in events:
        if isinstance(event, ArgProgress):
            assert all(p.name == event.name for p in current)
            current.append(event)
            so_far = "".join(p.fragment for p in current)
            assert event.fragment
            assert event.received == utf8_len(so_far)
            continue
        if isinstance(event.value, str):
            assert "".join(p.fragment for p in current) == event.value
        else:
            assert current == []
        current = []
    assert current == []
    for batch in per_feed:  # one progress per member (occurrence) per feed at most
        names: list[str] = []
        for event in batch:
            if isinstance(event, ArgMember):
                names = []
            else:
                assert event.name not in names
                names.append(event.name)


def check_progress_is_prefix(per_feed: list[list[ArgEvent]], final: dict[str, Any]) -> None:
    """For unique keys, what progress showed at each step is a prefix of the final value."""
    shown: dict[str, str] = {}
    for batch in per_feed:
        for event in batch:
            if isinstance(event, ArgProgress):
                shown[event.name] = shown.get(event.name, "") + event.fragment
                value = final[event.name]
                assert isinstance(value, str)
                assert value.startswith(shown[event.name])


# -- valid documents ------------------------------------------------------------


@FAST
@given(text=documents, data=st.data())
@example(text='{"s": "\\ud83d\\ude00"}', data=None)
@example(text=' {"a" : -0 , "b":-0.0,"c":1E+2 , "d": 1e400}\n', data=None)
def test_valid_documents_match_json_loads_in_any_split(text: str, data: Any) -> None:
    expected = oracle(text)
    assert expected[0], text
    splits = [[text], list(text)] if data is None else [data.draw(split(text))]
    for frags in splits:
        for use_grow in (False, True):
            parser, per_feed, verdict = feed_all(frags, use_grow=use_grow)
            assert parser.error is None
            assert verdict[0]
            assert same(verdict[1], expected[1])
            check_events(text, per_feed, expected[1])
            assert parser.text == text


@FAST
@given(
    members=st.lists(st.tuples(json_string(), json_text(6)), max_size=5, unique_by=lambda m: m[0]),
    data=st.data(),
)
def test_unique_keys_each_member_equals_json_loads_and_progress_is_a_prefix(
    members: list[tuple[str, str]], data: st.DataObject
) -> None:
    keys = [json.loads(k) for k, _ in members]
    if len(set(keys)) != len(keys):  # two spellings of one key
        return
    text = "{" + ",".join(f"{k}:{v}" for k, v in members) + "}"
    final = json.loads(text)
    frags = data.draw(split(text))
    _, per_feed, verdict = feed_all(frags, use_grow=data.draw(st.booleans()))
    assert same(verdict[1], final)
    check_progress_is_prefix(per_feed, final)
    for event in (e for batch in per_feed for e in batch):
        if isinstance(event, ArgMember):
            assert same(event.value, final[event.name])


@pytest.mark.parametrize(
    "text",
    [
        "-0",
        "-0.0",
        "0e0",
        "1E+2",
        "1e400",
        "-1e400",
        "1e-400",
        "1" * 300,
        "1" * 4300,
        "0." + "1" * 400,
        "  [ ]  ",
        "\t{ }\r\n",
        '"\\ud834\\udd1e"',
        '"\\uD834\\uDD1E"',
        '"\\ud834"',
        '"\\udd1e\\ud834"',
        '"\ud800"',
        '"\\u0000\\u001F\\u007f"',
        "NaN",
        "Infinity",
        "-Infinity",
        '{"a": NaN, "b": [Infinity, -Infinity]}',
        '{"a": {"a": {"a": ["\\"", "\\\\", "\\/"]}}}',
        '{"":""}',
    ],
)
def test_edge_values_in_every_two_way_split(text: str) -> None:
    expected = oracle(text)
    assert expected[0]
    for cut in range(len(text) + 1) if len(text) < 500 else (0, 1, len(text) // 2):
        for use_grow in (False, True):
            parser, per_feed, verdict = feed_all(pieces(text, [cut]), use_grow=use_grow)
            assert verdict[0], (cut, parser.error)
            assert same(verdict[1], expected[1])
            check_events(text, per_feed, expected[1])


def test_a_surrogate_pair_split_at_every_point_into_three_pieces() -> None:
    text = '{"s": "\\ud83d\\ude00\\uD834\\uDD1E\\ud800x"}'
    expected = json.loads(text)
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            for use_grow in (False, True):
                _, per_feed, verdict = feed_all(pieces(text, [i, j]), use_grow=use_grow)
                assert verdict == (True, expected)
                progress = [e for b in per_feed for e in b if isinstance(e, ArgProgress)]
                for p in progress:  # a pair is never cut between two fragments
                    assert not (
                        "\ud800" <= p.fragment[-1] <= "\udbff" and p.fragment[-1] != "\ud800"
                    )
                check_events(text, per_feed, expected)


# -- invalid documents ----------------------------------------------------------


@FAST
@given(text=mutated(), data=st.data())
@example(text="\ufeff{}", data=None)
@example(text='{"a": 1} {"b": 2}', data=None)
@example(text='"a" "b"', data=None)
@example(text='{"a": "\x1f"}', data=None)
@example(text='{"a": "\\a"}', data=None)
@example(text='{"a": "\\u12"}', data=None)
@example(text='{"a": -NaN}', data=None)
@example(text='{"a": 1', data=None)
@example(text='{"a": 1}}', data=None)
@example(text="[1,]", data=None)
@example(text='{"a": 1e+}', data=None)
@example(text="1" * 4301, data=None)
@example(text='{"n": [' + "1" * 4301 + "]}", data=None)
def test_any_text_verdict_matches_json_loads_and_errors_do_not_depend_on_the_split(
    text: str, data: Any
) -> None:
    ok, value = oracle(text)
    whole, whole_events, whole_verdict = feed_all([text])
    assert whole_verdict[0] == ok, (text, whole.error)
    if ok:
        assert same(whole_verdict[1], value)
        check_events(text, whole_events, value)
    else:
        assert whole.error is not None
    splits = [list(text)] if data is None else [data.draw(split(text))]
    for frags in splits:
        for use_grow in (False, True):
            parser, per_feed, verdict = feed_all(frags, use_grow=use_grow)
            assert verdict[0] == ok
            assert parser.error == whole.error  # same message, same offset
            assert parser.text == text
            if ok:
                assert same(verdict[1], value)
                check_events(text, per_feed, value)


@FAST
@given(text=mutated(), data=st.data())
def test_state_after_an_error_and_after_close(text: str, data: st.DataObject) -> None:
    frags = data.draw(split(text))
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    seen_error = False
    for frag in frags:
        events = parser.feed(frag)
        if seen_error:
            assert events == []  # nothing after an error
            assert parser.grow("x") is None
        if parser.error is not None:
            # The error is sticky, and names an offset inside what was fed.
            offset = int(parser.error.rsplit(" ", 1)[1])
            assert 0 <= offset <= len(parser.text)
            seen_error = True
    ok = oracle(text)[0]
    for _ in range(2):  # close() is idempotent
        if ok:
            assert same(parser.close(), json.loads(text))
        else:
            with pytest.raises(json.JSONDecodeError) as info:
                parser.close()
            assert parser.error is not None
            assert info.value.pos == int(parser.error.rsplit(" ", 1)[1])
            assert info.value.doc == text
    with pytest.raises(RuntimeError):
        parser.feed("")
    with pytest.raises(RuntimeError):
        parser.feed(" ")
    assert parser.grow("x") is None  # a closed parser takes nothing, even mid-string
    assert parser.text == text


def test_grow_and_feed_after_close_in_the_middle_of_a_string_value() -> None:
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    assert parser.feed('{"a": "x') == [ArgProgress("a", 1, "x")]
    with pytest.raises(json.JSONDecodeError):
        parser.close()
    assert parser.grow("more") is None
    with pytest.raises(RuntimeError):
        parser.feed("more")
    assert parser.text == '{"a": "x'


def test_after_a_complete_value_only_whitespace_may_follow() -> None:
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    assert parser.feed('{"a": 1}') == [ArgMember("a", 1)]
    assert parser.feed(" \t\r\n") == []
    assert parser.error is None
    assert parser.feed('{"b": 2}') == []  # a second top-level value
    assert parser.error == "Extra data at offset 12"
    with pytest.raises(json.JSONDecodeError):
        parser.close()


def test_max_bytes_error_does_not_depend_on_the_split() -> None:
    text = '{"a": "é€😀", "b": [1, 2]}'
    size = utf8_len(text)
    for limit in (size - 1, size):
        for cut in range(len(text) + 1):
            parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser(max_bytes=limit)
            for frag in pieces(text, [cut]):
                parser.feed(frag)
            if limit >= size:
                assert parser.close() == json.loads(text)
            else:
                assert parser.error is not None
                assert "exceed" in parser.error


# -- the work is linear -----------------------------------------------------------


@contextmanager
def counted_work() -> Iterator[list[int]]:
    """Count characters handed to json.loads, scanstring and the string-content regex."""
    total = [0]
    real_loads = json.loads
    real_scan = json_stream._scanstring
    real_content = json_stream._CONTENT

    def loads(s: Any, *args: Any, **kwargs: Any) -> Any:
        total[0] += len(s)
        return real_loads(s, *args, **kwargs)

    def scan(s: str, end: int) -> tuple[str, int]:
        result = real_scan(s, end)
        total[0] += result[1] - end
        return result

    def content(s: str, pos: int) -> Any:
        match = real_content(s, pos)
        total[0] += match.end() - pos + 1
        return match

    with (
        mock.patch.object(json_stream.json, "loads", loads),
        mock.patch.object(json_stream, "_scanstring", scan),
        mock.patch.object(json_stream, "_CONTENT", content),
    ):
        yield total


_PATTERNS: dict[str, Callable[[int], str]] = {
    "escapes": lambda n: '{"a": "' + "\\ud83d\\ude00\\n\\u00e9" * n + '"}',
    "high surrogates": lambda n: '{"a": "' + "\\ud800" * n + '"}',
    "escaped key": lambda n: '{"' + "\\u00e9k" * n + '": 1}',
    "top-level string": lambda n: '"' + "ab\\n" * n + '"',
    "deep member": lambda n: '{"a": ' + "[" * min(n, 400) + "]" * min(n, 400) + "}",
    "long number": lambda n: '{"a": 1.' + "5" * n + "}",
    "many members": lambda n: "{" + ",".join(f'"k{i}": "v\\n"' for i in range(n)) + "}",
    "strings in an array": lambda n: '{"a": [' + ",".join(['"x\\ud83d\\ude00"'] * n) + "]}",
    "whitespace": lambda n: "{" + " \t\r\n" * n + "}",
}


@pytest.mark.parametrize("name", sorted(_PATTERNS))
@pytest.mark.parametrize("step", [1, 2, 3, 7])
def test_work_is_linear_in_the_input_however_it_is_split(name: str, step: int) -> None:
    text = _PATTERNS[name](1500)
    for use_grow in (False, True):
        with counted_work() as total:
            parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
            for i in range(0, len(text), step):
                frag = text[i : i + step]
                if use_grow and parser.grow(frag) is not None:
                    continue
                parser.feed(frag)
            parser.close()
        assert total[0] <= 6 * len(text), (name, step, total[0], len(text))
        assert parser._scanned <= 3 * len(text)
        assert len(parser._pending) <= 12


# -- deep nesting at json.loads' own limit --------------------------------------


def _deepest_json_loads_accepts() -> int:
    lo, hi = 1, 100_000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            json.loads("[" * mid + "]" * mid)
            lo = mid
        except RecursionError:
            hi = mid - 1
    return lo


def test_nesting_near_the_recursion_limit_is_a_clear_error_a_few_levels_early() -> None:
    """The parser decodes a captured value with ``json.loads`` a few frames
    below its caller (documented in the module): nesting that a direct
    ``json.loads`` just manages may be reported invalid, never a crash, and
    ten levels less is read."""
    depth = _deepest_json_loads_accepts()
    for nesting in (depth, depth - 10):
        text = "[" * nesting + "]" * nesting
        parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
        parser.feed(text)
        if parser.error is None:
            assert parser.close() == json.loads(text)
        else:
            assert nesting == depth
            assert parser.error.startswith("Value nested too deeply")
