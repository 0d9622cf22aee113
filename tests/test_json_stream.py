"""Tests for :mod:`rafrx.json_stream` (the incremental tool-argument parser).

The oracle is :func:`json.loads` on the same text: the parser must accept what
it accepts (with an equal value) and reject what it rejects, however the text
is split into fragments. Data: ``tests/data/conformance/json-test-suite``.
"""

from __future__ import annotations

import doctest
import functools
import itertools
import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rafrx.json_stream
from rafrx.json_stream import ArgEvent, ArgMember, ArgProgress, StreamingArgsParser

SUITE = Path(__file__).parent / "data" / "conformance" / "json-test-suite"
FILES = sorted(SUITE.glob("*.json"))

# json.loads (hence rafrx) accepts NaN / Infinity / -Infinity.
N_ACCEPTED_BY_JSON_LOADS = {
    "n_number_NaN.json",
    "n_number_infinity.json",
    "n_number_minus_infinity.json",
}
# The only valid-UTF-8 i_ file json.loads (hence rafrx) rejects: a leading BOM.
I_REJECTED = {"i_structure_UTF-8_BOM_empty_object.json"}

Verdict = tuple[bool, Any]


# -- helpers ----------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Deep equality that tells 1 / 1.0 / True apart, -0.0 from 0.0, and lets NaN == NaN.

    No recursion: any nesting json.loads can build.
    """
    todo = [(a, b)]
    while todo:
        x, y = todo.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, float):
            if math.isnan(x) or math.isnan(y):
                if not (math.isnan(x) and math.isnan(y)):
                    return False
            elif x != y or math.copysign(1.0, x) != math.copysign(1.0, y):
                return False
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            todo.extend(zip(x, y, strict=True))
        elif isinstance(x, dict):
            if list(x) != list(y):
                return False
            todo.extend((x[k], y[k]) for k in x)
        elif x != y:
            return False
    return True


def oracle(text: str) -> Verdict:
    """What json.loads says: (True, value) or (False, None)."""
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def pieces(text: str, cuts: Iterable[int]) -> list[str]:
    """Split ``text`` at the given offsets (any order, duplicates give empty pieces)."""
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def run(frags: Sequence[str]) -> tuple[StreamingArgsParser, list[list[ArgEvent]], Verdict]:
    """Feed the fragments, then close; return the parser, events per feed and verdict."""
    parser = StreamingArgsParser()
    per_feed = [parser.feed(f) for f in frags]
    try:
        verdict: Verdict = (True, parser.close())
    except ValueError:
        verdict = (False, None)
    return parser, per_feed, verdict


def check_parity(text: str, frags: Sequence[str]) -> Verdict:
    """Assert the parser's verdict on ``frags`` equals json.loads on ``text``."""
    assert "".join(frags) == text
    expected = oracle(text)
    parser, _, verdict = run(frags)
    assert verdict[0] == expected[0], (parser.error, len(frags))
    if expected[0]:
        assert parser.error is None
        assert same(verdict[1], expected[1])
    else:
        assert parser.error is not None
        assert "at offset" in parser.error
    return verdict


@functools.cache
def suite_texts(path: Path) -> list[str]:
    """The decoded texts of a suite file to feed (the parser takes ``str``).

    Valid UTF-8 decodes strictly. Otherwise the parser can't see the bytes,
    so parity is with json.loads on a decoded text: the decoding json.loads
    itself uses for bytes (UTF-16 detection, surrogatepass) when that works,
    and the U+FFFD replacement form.
    """
    raw = path.read_bytes()
    try:
        return [raw.decode("utf-8", errors="strict")]
    except UnicodeDecodeError:
        pass
    texts = [raw.decode("utf-8", errors="replace")]
    try:
        texts.append(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except UnicodeDecodeError:
        with pytest.raises(ValueError, match="codec"):
            json.loads(raw)  # json.loads fails on these bytes too
    return texts


def two_way_cuts(n: int) -> list[int]:
    """Every 2-way split of a short text; a few evenly spaced ones of a long one."""
    if n <= 200:
        return list(range(n + 1))
    count = 100 if n <= 5000 else 4
    return sorted({n * k // count for k in range(count + 1)})


def split_points(text: str) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, len(text)), max_size=40)


def events_of(per_feed: Iterable[list[ArgEvent]]) -> list[ArgEvent]:
    return [e for batch in per_feed for e in batch]


# -- conformance suite ------------------------------------------------------


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_suite_whole_per_char_and_two_way(path: Path) -> None:
    for text in suite_texts(path):
        ok, _ = check_parity(text, [text])
        if path.name.startswith("y_"):
            assert ok
        elif path.name.startswith("n_"):
            assert ok == (path.name in N_ACCEPTED_BY_JSON_LOADS)
        check_parity(text, list(text))
        for cut in two_way_cuts(len(text)):
            check_parity(text, pieces(text, [cut]))


@pytest.mark.parametrize("prefix", ["y_", "n_", "i_"])
@settings(
    max_examples=5,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_suite_random_splits(prefix: str, data: st.DataObject) -> None:
    """Each example splits every file of the group at its own random points."""
    for path in FILES:
        if path.name.startswith(prefix):
            for text in suite_texts(path):
                cuts = st.lists(st.integers(0, len(text)), max_size=12)
                check_parity(text, pieces(text, data.draw(cuts, label=path.name)))


def test_suite_verdicts_are_documented() -> None:
    """rafrx's answers where RFC 8259 and json.loads differ (valid UTF-8 files)."""
    accepted_n, rejected_i = set(), set()
    for path in FILES:
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        accepted = run([text])[2][0]
        if path.name.startswith("n_") and accepted:
            accepted_n.add(path.name)
        elif path.name.startswith("i_") and not accepted:
            rejected_i.add(path.name)
    assert accepted_n == N_ACCEPTED_BY_JSON_LOADS
    assert rejected_i == I_REJECTED


def test_deep_nesting_has_no_recursion() -> None:
    text = "[" * 100_000
    parser = StreamingArgsParser()
    for ch in text:
        assert parser.feed(ch) == []
    assert parser.error is None  # a valid prefix so far
    with pytest.raises(json.JSONDecodeError):
        parser.close()
    assert parser.error == "Unexpected end of input at offset 100000"


def test_too_deep_for_json_loads_is_invalid_not_a_crash() -> None:
    text = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(RecursionError):
        json.loads(text)
    parser, _, verdict = run([text])
    assert verdict == (False, None)
    assert parser.error == "Value nested too deeply at offset 6"


@pytest.fixture
def int_digits_limit() -> Iterator[int]:
    """Python's limit on digits of an int converted from text, on (4300) for the test."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(before or 4300)  # 0 (PYTHONINTMAXSTRDIGITS=0): no limit
    try:
        yield sys.get_int_max_str_digits()
    finally:
        sys.set_int_max_str_digits(before)


def test_an_integer_longer_than_python_converts_is_invalid_like_json_loads(
    int_digits_limit: int,
) -> None:
    limit = int_digits_limit
    longest, too_long = "7" * limit, "7" * (limit + 1)
    parser, per_feed, verdict = run(['{"n": ' + longest[:10], longest[10:] + ', "s": "x"}'])
    assert parser.error is None
    assert events_of(per_feed)[0] == ArgMember("n", int(longest))
    assert verdict == (True, {"n": int(longest), "s": "x"})
    for text, offset in [
        ('{"n": ' + too_long + ', "s": "x"}', 6),  # a member
        ('{"a": [1, ' + too_long + "]}", 6),  # inside a member's value
        (too_long, 0),  # the whole document
    ]:
        with pytest.raises(ValueError, match=f"Exceeds the limit \\({limit} digits\\)") as info:
            json.loads(text)
        parser, per_feed, verdict = run([text])
        assert (verdict, events_of(per_feed)) == ((False, None), [])
        assert parser.error == f"Invalid value ({info.value}) at offset {offset}"
        check_parity(text, list(text))  # the same verdict, one character at a time


# -- events -----------------------------------------------------------------

_TRICKY = '"\\/\n\r\t\b\f\x00\x1f\x7f é€😀𝄞\u2028\ufeffaZ'
json_strings = st.text() | st.text(alphabet=_TRICKY)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | json_strings
)
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(json_strings, kids, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(json_strings, json_values | json_strings, max_size=6)
SEPARATORS = [(",", ":"), (", ", ": "), (" ,\t", " :\r\n"), (",\n", ":  ")]


@st.composite
def serialized(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    obj = draw(json_objects)
    text = json.dumps(
        obj,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 0, 2, "\t"])),
        separators=draw(st.sampled_from(SEPARATORS)),
    )
    return obj, text


def assert_events(obj: dict[str, Any], per_feed: list[list[ArgEvent]]) -> None:
    events = events_of(per_feed)
    members = [(e.name, e.value) for e in events if isinstance(e, ArgMember)]
    assert same(dict(members), obj)
    assert [name for name, _ in members] == list(obj)
    for batch in per_feed:  # at most one progress per member per feed
        names = [e.name for e in batch if isinstance(e, ArgProgress)]
        assert len(names) == len(set(names))
    # Progress for a member comes right before its ArgMember, after the previous one.
    current: list[ArgProgress] = []
    for event in events:
        if isinstance(event, ArgProgress):
            assert all(p.name == event.name for p in current)
            current.append(event)
            continue
        value = event.value
        if isinstance(value, str):
            assert all(p.name == event.name for p in current)
            assert "".join(p.fragment for p in current) == value
            so_far = ""
            for p in current:
                assert p.fragment
                assert not any(0xD800 <= ord(c) <= 0xDFFF for c in p.fragment)
                so_far += p.fragment
                assert p.received == len(so_far.encode("utf-8"))
        else:
            assert current == []
        current = []
    assert current == []


@settings(max_examples=100, deadline=None)
@given(case=serialized(), per_char=st.booleans(), data=st.data())
def test_events_match_the_object(
    case: tuple[dict[str, Any], str], per_char: bool, data: st.DataObject
) -> None:
    obj, text = case
    frags = list(text) if per_char else pieces(text, data.draw(split_points(text)))
    parser, per_feed, verdict = run(frags)
    assert parser.error is None
    assert verdict[0]
    assert same(verdict[1], obj)
    assert_events(obj, per_feed)


def grow_or_feed(parser: StreamingArgsParser, fragment: str) -> list[ArgEvent]:
    """What a caller of ``grow`` does: its own event if it took the fragment, else ``feed``."""
    grown = parser.grow(fragment)
    if grown is None:
        return parser.feed(fragment)
    return [ArgProgress(*grown)]


@settings(max_examples=100, deadline=None)
@given(case=serialized(), per_char=st.booleans(), data=st.data())
def test_grow_then_feed_equals_feed(
    case: tuple[dict[str, Any], str], per_char: bool, data: st.DataObject
) -> None:
    _, text = case
    frags = list(text) if per_char else pieces(text, data.draw(split_points(text)))
    fed, per_feed, verdict = run(frags)
    grower = StreamingArgsParser()
    grown = [grow_or_feed(grower, f) for f in frags]
    assert repr(grown) == repr(per_feed)  # (repr: NaN values compare unequal)
    assert same(grower.close(), verdict[1])
    assert grower.text == fed.text


def test_grow_takes_only_more_of_a_string_value() -> None:
    parser = StreamingArgsParser()
    assert parser.grow('{"path": "a') is None  # not in a string value yet: nothing consumed
    assert parser.text == ""
    assert parser.feed('{"path": "a') == [ArgProgress("path", 1, "a")]
    assert parser.grow(r"\u00e9") == ("path", 3, "é")
    assert parser.grow("\\") is None  # decodes nothing yet: feed holds it
    assert parser.feed("\\") == []
    assert parser.grow('n"') is None  # ends the value
    assert parser.grow("") is None
    assert parser.feed('n"') == [ArgProgress("path", 4, "\n"), ArgMember("path", "aé\n")]
    assert parser.grow("x") is None  # between members
    assert parser.text == '{"path": "a\\u00e9\\n"'


def test_grow_leaves_errors_and_limits_to_feed() -> None:
    bad = StreamingArgsParser()
    bad.feed('{"a": "x')
    assert bad.grow("\x01") is None  # a control character: feed reports it
    assert bad.feed("\x01") == []
    assert bad.error == "Invalid control character at offset 8"
    assert bad.grow("y") is None
    capped = StreamingArgsParser(max_bytes=10)
    capped.feed('{"a": "x')
    assert capped.grow("yyyy") is None  # feed counts the bytes
    assert capped.feed("yyyy") == []
    assert capped.error == "arguments exceed 10 bytes at offset 8"


@settings(max_examples=60, deadline=None)
@given(value=json_values, ensure_ascii=st.booleans(), data=st.data())
def test_any_top_level_value_no_events(value: Any, ensure_ascii: bool, data: st.DataObject) -> None:
    text = json.dumps(value, ensure_ascii=ensure_ascii)
    frags = pieces(text, data.draw(split_points(text)))
    _, per_feed, verdict = run(frags)
    assert same(verdict[1], value)
    if not isinstance(value, dict):
        assert events_of(per_feed) == []


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet='{}[]",:0123456789-+.eEtrufalsnNIiy\\u \n'),
    data=st.data(),
)
def test_random_text_parity(text: str, data: st.DataObject) -> None:
    check_parity(text, pieces(text, data.draw(split_points(text))))


def test_surrogate_pair_never_split() -> None:
    text = '{"s": "a\\ud83d\\ude00b\\ud834\\udd1e"}'
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            _, per_feed, verdict = run(pieces(text, [i, j]))
            assert verdict == (True, {"s": "a😀b𝄞"})
            assert_events({"s": "a😀b𝄞"}, per_feed)


def test_lone_surrogates_are_kept_like_json_loads() -> None:
    text = '{"s": "\\ud800x\\udc00\\ud800\\ud800\\udc00\\ud800\\n\\udbff"}'
    expected = json.loads(text)["s"]
    assert expected == "\ud800x\udc00\ud800\U00010000\ud800\n\udbff"
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            _, per_feed, verdict = run(pieces(text, [i, j]))
            assert verdict == (True, {"s": expected})
            progress = [e for e in events_of(per_feed) if isinstance(e, ArgProgress)]
            assert "".join(p.fragment for p in progress) == expected
            assert progress[-1].received == len(expected.encode("utf-8", "surrogatepass"))


def test_escape_waits_for_its_rest() -> None:
    parser = StreamingArgsParser()
    assert parser.feed('{"s": "ab\\') == [ArgProgress("s", 2, "ab")]
    assert parser.feed("u00") == []
    assert parser.feed("e9") == [ArgProgress("s", 4, "é")]
    assert parser.feed('\\ud83d"') == [  # a lone surrogate: the string ended
        ArgProgress("s", 7, "\ud83d"),
        ArgMember("s", "abé\ud83d"),
    ]
    assert parser.feed("}") == []
    assert parser.close() == {"s": "abé\ud83d"}


# -- completeness -----------------------------------------------------------


def test_parsable_prefix_is_not_reported() -> None:
    parser = StreamingArgsParser()
    assert parser.feed('{"q": "a') == [ArgProgress("q", 1, "a")]
    assert parser.feed('bc"') == [ArgProgress("q", 3, "bc"), ArgMember("q", "abc")]
    assert parser.feed("}") == []
    assert parser.close() == {"q": "abc"}


def test_number_is_complete_only_when_delimited() -> None:
    parser = StreamingArgsParser()
    assert parser.feed('{"n": 12') == []
    assert parser.feed("3") == []
    assert parser.feed("}") == [ArgMember("n", 123)]
    assert parser.close() == {"n": 123}

    parser = StreamingArgsParser()
    assert parser.feed('{"n": -1.5e') == []
    assert parser.feed("+3 ") == [ArgMember("n", -1500.0)]
    assert parser.feed(', "m": 0,') == [ArgMember("m", 0)]


def test_non_string_members() -> None:
    parser = StreamingArgsParser()
    events = parser.feed('{"a": [1, {"b": "}]"}], "t": true, "x": null, "i": -Infinity, "o": {}')
    assert events == [
        ArgMember("a", [1, {"b": "}]"}]),
        ArgMember("t", True),
        ArgMember("x", None),
        ArgMember("i", float("-inf")),
        ArgMember("o", {}),
    ]
    assert parser.feed("}") == []
    assert parser.close()["t"] is True


def test_duplicate_keys_reported_each_time_last_wins() -> None:
    parser = StreamingArgsParser()
    events = parser.feed('{"a": 1, "a": 2}')
    assert events == [ArgMember("a", 1), ArgMember("a", 2)]
    assert parser.close() == json.loads('{"a": 1, "a": 2}') == {"a": 2}


def test_top_level_scalars() -> None:
    for text, value in [("12", 12), (" -0.5e1 ", -5.0), ('"x"', "x"), ("true", True)]:
        parser = StreamingArgsParser()
        assert parser.feed(text) == []
        assert same(parser.close(), value)
    parser = StreamingArgsParser()
    parser.feed("NaN")
    assert math.isnan(parser.close())


# -- errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"a" 1', "Expecting ':' delimiter at offset 5"),
        ('{"a": 1 "b"', "Expecting ',' delimiter at offset 8"),
        ('{"a": 01', "Expecting ',' delimiter at offset 7"),
        ('{"a": 1,}', "Expecting property name enclosed in double quotes at offset 8"),
        ("{} x", "Extra data at offset 3"),
        ('{"a": "\x01"}', "Invalid control character at offset 7"),
        ('{"a": "\\x"}', "Invalid \\escape at offset 7"),
        ('{"a": "\\u12g4"}', "Invalid \\uXXXX escape at offset 7"),
        ("\ufeff{}", "Expecting value at offset 0"),
        ("[-NaN]", "Expecting value at offset 1"),
    ],
)
def test_error_is_set_as_soon_as_detectable(text: str, error: str) -> None:
    assert not oracle(text)[0]
    parser = StreamingArgsParser()
    for ch in text:
        parser.feed(ch)
    assert parser.error == error
    with pytest.raises(json.JSONDecodeError) as info:
        parser.close()
    assert info.value.pos == int(error.rsplit(" ", 1)[1])


def test_no_events_after_error_but_earlier_ones_kept() -> None:
    parser = StreamingArgsParser()
    assert parser.feed('{"a": 1, "b": x') == [ArgMember("a", 1)]
    assert parser.error == "Expecting value at offset 14"
    assert parser.feed('"c": "d"}') == []
    assert parser.text == '{"a": 1, "b": x"c": "d"}'
    with pytest.raises(json.JSONDecodeError):
        parser.close()
    with pytest.raises(json.JSONDecodeError):
        parser.close()


def test_incomplete_input() -> None:
    for text in ["", "   ", '{"a": 1', '{"a": "x', "[1, 2", "nul", "-", '"abc\\']:
        parser = StreamingArgsParser()
        parser.feed(text)
        assert parser.error is None
        with pytest.raises(json.JSONDecodeError):
            parser.close()
        assert parser.error is not None


def test_max_bytes() -> None:
    parser = StreamingArgsParser(max_bytes=10)
    assert parser.feed('{"a": "é') != []  # 9 bytes
    assert parser.error is None
    assert parser.feed("é") == []  # 11 bytes
    assert parser.error == "arguments exceed 10 bytes at offset 8"
    with pytest.raises(ValueError, match="exceed"):
        parser.close()


def test_feed_after_close() -> None:
    parser = StreamingArgsParser()
    parser.feed("{}")
    assert parser.close() == {}
    assert parser.close() == {}
    with pytest.raises(RuntimeError):
        parser.feed(" ")


# -- linear work ------------------------------------------------------------


def test_work_is_linear_for_a_huge_string_in_tiny_fragments() -> None:
    content = ('def f(x):\n    return x * 2  # "q" \\ \t é 😀\n' * 25_000)[:1_000_000]
    text = json.dumps({"path": "src/main.py", "content": content})
    parser = StreamingArgsParser()
    received = 0
    for i in range(0, len(text), 4):
        for event in parser.feed(text[i : i + 4]):
            if isinstance(event, ArgProgress) and event.name == "content":
                received = event.received
    assert parser.close()["content"] == content
    assert received == len(content.encode())
    assert parser._scanned <= 2 * len(text)
    assert parser._pending == ""


def test_work_is_linear_for_a_huge_nested_value() -> None:
    text = json.dumps({"rows": [[i, str(i), {"k": [i]}] for i in range(10_000)]})
    parser = StreamingArgsParser()
    for i in range(0, len(text), 4):
        parser.feed(text[i : i + 4])
    assert same(parser.close(), json.loads(text))
    # Every character once by the scanner (a number's delimiter twice), once by
    # json.loads of the closed value.
    assert parser._scanned <= 2.1 * len(text)


def test_text_is_joined_lazily() -> None:
    parser = StreamingArgsParser()
    for ch in '{"a": 1}':
        parser.feed(ch)
    assert parser.text == '{"a": 1}'
    assert parser._pieces == ['{"a": 1}']


def test_module_doctest() -> None:
    result = doctest.testmod(rafrx.json_stream)
    assert result.attempted > 0
    assert result.failed == 0


# A long argument in one-character fragments: the parser joins what it keeps
# into blocks every COMPACT_AT fragments (rafrx._fragments). Values, progress
# and the text must not change across those joins.
LONG_DOCUMENTS = {
    "string value with escapes": json.dumps(
        {"path": "a.py", "content": 'line "q" \\ é 😀\n' * 400, "mode": "w"}
    ),
    "captured nested value": json.dumps(
        {"edits": [{"line": i, "text": f"x{i}"} for i in range(600)]}
    ),
    "top-level string": json.dumps("é\\" * 2000),
    "top-level array": json.dumps(list(range(1500))),
}


@pytest.mark.parametrize("doc", LONG_DOCUMENTS.values(), ids=LONG_DOCUMENTS.keys())
def test_a_long_argument_in_tiny_fragments_parses_like_json_loads(doc: str) -> None:
    from rafrx._fragments import COMPACT_AT

    assert len(doc) > 3 * COMPACT_AT
    parser = StreamingArgsParser()
    events = [event for ch in doc for event in parser.feed(ch)]
    assert parser.close() == json.loads(doc)
    assert parser.text == doc
    members = {e.name: e.value for e in events if isinstance(e, ArgMember)}
    if isinstance(json.loads(doc), dict):
        assert members == json.loads(doc)
    for name, value in members.items():
        progress = [e for e in events if isinstance(e, ArgProgress) and e.name == name]
        if isinstance(value, str):
            assert "".join(e.fragment for e in progress) == value
            assert progress[-1].received == len(value.encode())


def test_the_text_of_a_long_argument_is_kept_while_it_streams() -> None:
    doc = LONG_DOCUMENTS["string value with escapes"]
    parser = StreamingArgsParser()
    for i, ch in enumerate(doc[:-2]):
        parser.feed(ch)
        if i % 1500 == 0:
            assert parser.text == doc[: i + 1]
    parser.feed(doc[-2:])
    assert parser.text == doc
    assert parser.close() == json.loads(doc)


# -- token fast paths -------------------------------------------------------

_TOKEN_RUNS = [
    '{"city": "Paris", "days": 5, "include": ["wind", "uv"], "deep": {"k": [1, "v"]}}',
    '{"a"  :\t"b" ,\n"c":1}',
    '{"k\\u00e9y\\n": 1, "\\ud83d\\ude00": 2, "\\"": 3, "": 4}',
    '{"a": {"b"  : 1, "c\\t": 2, "d": {}}, "e": [{"f": null}]}',
    '{"a": -0, "b": 12.5e-3, "c": 0E+2, "d": -1, "e": 7}',
    '{"a": [1, -2.5, 3e2, 0], "b": [[0], {"x": 1E1}]}',
    '{"a": 1}',
    # Invalid: the error (message and offset) is the same however the text is cut.
    '{"a\x01": 1}',
    '{"a\\x": 1}',
    '{"a" 1}',
    '{"a": 1 "b": 2}',
    '{"a": 01}',
    '{"a": 1.}',
    '{"a": 1.5e}',
    '{"a": -}',
    '{"a": 1x}',
    '{"a": [1 2]}',
    '{"a": {"b" 1}}',
    '{"a": 1, "b"',
    '{"a": 5',
]


@pytest.mark.parametrize("text", _TOKEN_RUNS)
def test_token_fast_paths_equal_the_per_character_path(text: str) -> None:
    """Fed whole or cut in two, a key with its colon, or a number with its
    delimiter, takes one regular expression: it must report exactly what
    the per-character feed (a token at a time, never a whole one) reports."""

    def outcome(frags: list[str]) -> tuple[Any, ...]:
        parser, per_feed, verdict = run(frags)
        events = events_of(per_feed)
        members = [e for e in events if isinstance(e, ArgMember)]
        grown = [(e.name, e.fragment) for e in events if isinstance(e, ArgProgress)]
        return members, "".join(f for _, f in grown), verdict, parser.error

    expected = outcome(list(text))
    assert expected[2][0] == oracle(text)[0]
    for cut in range(len(text) + 1):
        assert outcome(pieces(text, [cut])) == expected, cut
