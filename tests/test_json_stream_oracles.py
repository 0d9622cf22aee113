"""Oracles for :class:`rafrx.json_stream.StreamingArgsParser`, ``partial_json``
and ``parse_args_stream()``, against independent oracles.

Oracles: :func:`json.loads` of the whole text (values, verdicts), jiter's
``partial_mode`` (cut texts), and each other: while an object streams, what
the parser has reported after any prefix must agree with ``partial_json`` of
that prefix (a complete member has its value, a growing string value is the
text its progress events add up to), and ``partial_json`` must reject a
prefix exactly when the parser has found it invalid.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import jiter
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import ToolCallArgsParsedContent, ToolCallArgsProgressContent
from rafrx.json_stream import ArgEvent, ArgMember, ArgProgress, StreamingArgsParser, partial_json
from tests.operators import contents, run
from tests.test_json_stream import same
from tests.test_json_stream_adversarial import counted_work

ORACLE = settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- generators -------------------------------------------------------------------

_TRICKY = '"\\/\b\f\n\r\t\x00\x1f\x7f é€😀𝄞\U0010ffff\u2028\ufeffaZ'
_LONE = "\ud800\udbff\udc00\udfff"
_SAFE_TEXT = st.one_of(
    st.text(max_size=10), st.text(alphabet=_TRICKY, max_size=10)
)  # no surrogates
_ANY_TEXT = st.one_of(_SAFE_TEXT, st.text(alphabet=_TRICKY + _LONE, max_size=8))
_NUMBERS = st.one_of(
    st.integers(),
    st.integers(-(10**400), 10**400),
    st.sampled_from([0.0, -0.0, 1e308, -1e-308, 5e-324, 1.5, 1e16, 2**53 + 1]),
    st.floats(),
)


def values(text: st.SearchStrategy[str], numbers: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(st.none(), st.booleans(), numbers, text),
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(text, kids, max_size=4),
        max_leaves=10,
    )


_WS = st.text(alphabet=" \t\n\r", max_size=3)


@st.composite
def dumped(draw: st.DrawFn, obj: Any, *, nan: bool = True) -> str:
    """``obj`` serialized with any ``ensure_ascii``, indentation and whitespace."""
    text = json.dumps(
        obj,
        ensure_ascii=draw(st.booleans()),
        allow_nan=nan,
        indent=draw(st.one_of(st.none(), st.integers(0, 2), _WS)),
        separators=(draw(_WS) + "," + draw(_WS), draw(_WS) + ":" + draw(_WS)),
    )
    return draw(_WS) + text + draw(_WS)


@st.composite
def cuts(draw: st.DrawFn, text: str, max_pieces: int = 30) -> list[str]:
    mode = draw(st.sampled_from(["random", "random", "chars", "whole"]))
    if mode == "chars":
        return list(text)
    if mode == "whole":
        return [text]
    points = sorted(draw(st.lists(st.integers(0, len(text)), max_size=max_pieces)))
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def feed_mixed(
    parser: StreamingArgsParser[ArgEvent], frags: Sequence[str], grow_mask: Sequence[bool]
) -> list[list[ArgEvent]]:
    """Feed each fragment, trying :meth:`grow` first where the mask says so."""
    per_feed: list[list[ArgEvent]] = []
    for frag, use_grow in zip(frags, itertools.cycle(grow_mask or [False]), strict=False):
        if use_grow:
            grown = parser.grow(frag)
            if grown is not None:
                per_feed.append([ArgProgress(*grown)])
                continue
        per_feed.append(parser.feed(frag))
    return per_feed


def check_stream(obj: dict[str, Any], per_feed: list[list[ArgEvent]], pairs: bool = True) -> None:
    """The DESIGN invariant and the progress accounting, for unique keys.

    ``pairs``: the text has no raw surrogates, so a pair in a value was escaped.
    """
    events = [e for batch in per_feed for e in batch]
    members = [e for e in events if isinstance(e, ArgMember)]
    assert [m.name for m in members] == list(obj)
    for m in members:
        assert same(m.value, obj[m.name]), (m.name, m.value, obj[m.name])
    growing: list[ArgProgress] = []
    for event in events:
        if isinstance(event, ArgProgress):
            assert isinstance(obj[event.name], str)
            assert event.fragment
            assert not growing or growing[-1].name == event.name
            growing.append(event)
            so_far = "".join(p.fragment for p in growing)
            assert event.received == utf8_len(so_far)
            assert obj[event.name].startswith(so_far)
            # Never half of an escaped pair: a fragment never ends inside a pair
            # the final value has whole.
            value = obj[event.name]
            cut = len(so_far)
            if pairs and 0 < cut < len(value):
                assert not (
                    "\ud800" <= value[cut - 1] <= "\udbff" and "\udc00" <= value[cut] <= "\udfff"
                )
        else:
            if isinstance(event.value, str):
                assert "".join(p.fragment for p in growing) == event.value
            else:
                assert growing == []
            growing = []
    assert growing == []


# -- StreamingArgsParser: the DESIGN invariant ---------------------------------------


@ORACLE
@given(
    obj=st.dictionaries(_ANY_TEXT, values(_ANY_TEXT, _NUMBERS) | _ANY_TEXT, max_size=6),
    data=st.data(),
)
def test_members_equal_json_loads_with_grow_and_feed_interleaved(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    text = data.draw(dumped(obj))
    full = json.loads(text)
    frags = data.draw(cuts(text))
    mask = data.draw(st.lists(st.booleans(), min_size=1, max_size=5))
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    per_feed = feed_mixed(parser, frags, mask)
    assert parser.error is None, parser.error
    check_stream(full, per_feed, not any("\ud800" <= c <= "\udfff" for c in text))
    assert same(parser.close(), full)
    assert parser.text == text


@ORACLE
@given(obj=st.dictionaries(_SAFE_TEXT, _SAFE_TEXT, min_size=1, max_size=4), data=st.data())
def test_escaped_pairs_never_split_in_any_three_way_cut(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    """ensure_ascii writes astral characters as escaped pairs: no fragment holds half of one."""
    text = json.dumps(obj, ensure_ascii=True)
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, len(text)))
    for mask in ([False], [True]):
        parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
        per_feed = feed_mixed(parser, [text[:i], text[i:j], text[j:]], mask)
        for event in (e for b in per_feed for e in b):
            if isinstance(event, ArgProgress):
                assert not any("\ud800" <= c <= "\udfff" for c in event.fragment), event
        check_stream(obj, per_feed)
        assert parser.close() == obj


@ORACLE
@given(
    keys=st.lists(st.sampled_from(["a", "b", "\\u0061", "\\ud83d\\ude00", "😀"]), max_size=6),
    vals=st.lists(values(_SAFE_TEXT, _NUMBERS) | _SAFE_TEXT, min_size=6, max_size=6),
    data=st.data(),
)
def test_duplicate_keys_each_report_is_that_occurrence_and_last_wins(
    keys: list[str], vals: list[Any], data: st.DataObject
) -> None:
    member_texts = [json.dumps(v) for v in vals]
    text = "{" + ", ".join(f'"{k}": {v}' for k, v in zip(keys, member_texts, strict=False)) + "}"
    full = json.loads(text)
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    per_feed = feed_mixed(parser, data.draw(cuts(text)), [data.draw(st.booleans())])
    members = [e for b in per_feed for e in b if isinstance(e, ArgMember)]
    assert [m.name for m in members] == [json.loads(f'"{k}"') for k in keys]
    for m, v in zip(members, member_texts, strict=False):
        assert same(m.value, json.loads(v))
    result = parser.close()
    assert same(result, full)
    assert list(result) == list(full)


_EDGE_NUMBERS = [
    "-0",
    "-0.0",
    "0E-0",
    "1e400",
    "-1E+400",
    "1e-400",
    "-1e-400",
    "4.9e-324",
    "2.4703282292062328e-324",
    "1.7976931348623157e308",
    "1.7976931348623159e308",
    "123456789012345678901234567890",
    "-" + "9" * 4300,
    "0." + "0" * 500 + "1",
    "1" + "0" * 400 + ".0",
    "NaN",
    "Infinity",
    "-Infinity",
]


@pytest.mark.parametrize("number", _EDGE_NUMBERS)
def test_edge_numbers_as_members_and_nested_in_every_split(number: str) -> None:
    text = '{"n": ' + number + ', "l": [' + number + "], " + '"s": "x"}'
    full = json.loads(text)
    step = max(1, len(text) // 60)
    for cut in range(0, len(text) + 1, step):
        parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
        events = parser.feed(text[:cut]) + parser.feed(text[cut:])
        members = {e.name: e.value for e in events if isinstance(e, ArgMember)}
        assert same(members, full), (cut, members)
        assert same(parser.close(), full)


@pytest.mark.parametrize("number", _EDGE_NUMBERS)
def test_edge_numbers_at_top_level_char_by_char(number: str) -> None:
    text = " " + number + "\n"
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    for ch in text:
        assert parser.feed(ch) == []
    assert same(parser.close(), json.loads(text))
    bare = StreamingArgsParser()
    bare.feed(number)
    assert same(bare.close(), json.loads(number))


@pytest.mark.parametrize("depth", [1, 2, 50, 400])
def test_deep_member_values_char_by_char(depth: int) -> None:
    inner = '{"k": ["\\ud83d\\ude00", -0.0, 1e400]}'
    value_text = "[" * depth + inner + "]" * depth
    text = '{"deep": ' + value_text + ', "after": "ok"}'
    full = json.loads(text)
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    events = [e for ch in text for e in parser.feed(ch)]
    members = [e for e in events if isinstance(e, ArgMember)]
    assert events[0] == members[0]
    assert [m.name for m in members] == ["deep", "after"]
    assert same(members[0].value, full["deep"])
    assert "".join(e.fragment for e in events if isinstance(e, ArgProgress)) == "ok"
    assert same(parser.close(), full)


# -- StreamingArgsParser against partial_json on every prefix -----------------------


@ORACLE
@given(
    obj=st.dictionaries(
        _SAFE_TEXT,
        values(_SAFE_TEXT, st.integers() | st.floats(allow_nan=False, allow_infinity=False))
        | _SAFE_TEXT,
    ),
    data=st.data(),
)
def test_what_the_parser_reported_agrees_with_partial_json_of_each_prefix(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    text = data.draw(dumped(obj, nan=False))
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    done: dict[str, Any] = {}
    growing: tuple[str, str] | None = None
    step = data.draw(st.integers(1, 4))
    for end in range(0, len(text), step):
        for event in parser.feed(text[end : end + step]):
            if isinstance(event, ArgMember):
                done[event.name] = event.value
                growing = None
            else:
                sofar = growing[1] if growing else ""
                growing = (event.name, sofar + event.fragment)
        prefix = text[: end + step]
        try:
            partial = partial_json(prefix)
        except ValueError:
            assert not done, prefix
            assert growing is None, prefix
            continue
        for name, value in done.items():
            assert same(partial[name], value), (prefix, name)
        if growing is not None:
            assert partial[growing[0]] == growing[1], prefix
    assert done == obj


# -- invalid input ---------------------------------------------------------------------

_JUNK = ["x", "\x00", "\ufeff", ",", "}", "]", '"', "\\", "\\u", "\\ud800\\u", "-", ".", "e"]
_JUNK += ["01", "tru", "NaN", "-NaN", "infinity", "{}", "[]", ":", "\u00a0", "\\uZZZZ", "1.e"]


@st.composite
def mangled(draw: st.DrawFn) -> str:
    obj = draw(st.dictionaries(_SAFE_TEXT, values(_SAFE_TEXT, _NUMBERS), max_size=4))
    text = draw(dumped(obj))
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "truncate"]))
        if op == "insert":
            text = text[:pos] + draw(st.sampled_from(_JUNK)) + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + 1 :]
        else:
            text = text[:pos]
    return text


def _verdict(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


@ORACLE
@given(text=mangled(), data=st.data())
@example(text='{"a": 1, "b": "x\\ud800\\uZZZZ"}', data=None)
@example(text='{"a": "\\ud83d\\u12G4"}', data=None)
def test_invalid_input_stops_events_never_raises_and_custom_builders_agree(
    text: str, data: st.DataObject | None
) -> None:
    frags = [text] if data is None else data.draw(cuts(text))
    mask = [False] if data is None else data.draw(st.lists(st.booleans(), min_size=1, max_size=3))
    plain: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    built: list[list[Any]] = []
    custom: StreamingArgsParser[list[Any]] = StreamingArgsParser(
        progress=lambda n, r, f: ["p", n, r, f], member=lambda n, v: ["m", n, v]
    )
    errored = False
    for frag, use_grow in zip(frags, itertools.cycle(mask), strict=False):
        grown = plain.grow(frag) if use_grow else None
        events = [ArgProgress(*grown)] if grown is not None else plain.feed(frag)
        if errored:
            assert events == []
        errored = plain.error is not None
        built.extend(custom.feed(frag))
        expected = [
            ["p", e.name, e.received, e.fragment]
            if isinstance(e, ArgProgress)
            else ["m", e.name, e.value]
            for e in events
        ]
        assert same(built[len(built) - len(expected) :], expected)
    assert plain.error == custom.error
    ok = _verdict(text)
    if ok:
        assert same(plain.close(), json.loads(text))
    else:
        with pytest.raises(json.JSONDecodeError):
            plain.close()
        assert plain.error is not None


@ORACLE
@given(text=mangled(), data=st.data())
@example(text="{N", data=None)
def test_partial_json_rejects_a_prefix_exactly_when_the_parser_finds_it_invalid(
    text: str, data: st.DataObject | None
) -> None:
    """The parser sets ``error`` as soon as no continuation could make the text
    valid; ``partial_json`` raises on text that is not the start of a JSON text.
    So, on every prefix: the parser has an error iff ``partial_json`` raises
    (beyond "no value yet", which a valid start may still give), except where
    jiter, the reference, is lenient too."""
    ends = (
        range(len(text) + 1)
        if data is None
        else sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=8))) | {len(text)})
    )
    for end in ends:
        prefix = text[:end]
        parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
        parser.feed(prefix)
        for trailing in (True, False):
            try:
                partial_json(prefix, trailing_strings=trailing)
                raised = None
            except ValueError as exc:
                raised = str(exc)
            if parser.error is not None and raised is None:
                # jiter (the reference) tolerates a cut token right after a
                # value ('[1 t' -> [1]); anything else it refuses must be refused.
                try:
                    _jiter(prefix, trailing)
                except ValueError:
                    pytest.fail(f"{prefix!r} (trailing={trailing}): {parser.error}")
            elif raised is not None and parser.error is None:  # a valid start, no value yet
                assert raised == "no value yet", (prefix, trailing, raised)


# -- work stays linear (counted) -------------------------------------------------------


def _count_work(text: str, step: int, use_grow: bool) -> tuple[int, int]:
    """(characters handed to json.loads / scanstring / the content regex, _scanned)."""
    with counted_work() as total:
        parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
        for i in range(0, len(text), step):
            frag = text[i : i + step]
            if use_grow and parser.grow(frag) is not None:
                continue
            parser.feed(frag)
        parser.close()
    return total[0], parser._scanned


_LINEAR: dict[str, Callable[[int], str]] = {
    "long key": lambda n: '{"' + "k" * n + '": 1}',
    "long key with pairs": lambda n: '{"' + "\\ud83d\\ude00" * n + '": "v"}',
    "many nested members": lambda n: "{" + ",".join(f'"k{i}": [{i}]' for i in range(n)) + "}",
    "long nested string": lambda n: '{"a": ["' + "x\\n" * n + '"]}',
    "high-surrogate chain": lambda n: '{"a": "' + "\\ud83d" * n + '\\ude00"}',
    "backslash runs": lambda n: '{"a": "' + "\\\\" * n + '"}',
    "long literal run": lambda n: '{"a": [' + ",".join(["-Infinity"] * n) + "]}",
    "huge int member": lambda n: '{"a": ' + "7" * min(n, 4000) + "}",
    "empty strings": lambda n: '{"a": [' + ",".join(['""'] * n) + "]}",
    "top-level array of strings": lambda n: "[" + ",".join(['"\\u00e9x"'] * n) + "]",
}


@pytest.mark.parametrize("name", sorted(_LINEAR))
@pytest.mark.parametrize(("step", "use_grow"), [(1, False), (1, True), (5, True)])
def test_work_is_counted_linear(name: str, step: int, use_grow: bool) -> None:
    small, big = _LINEAR[name](300), _LINEAR[name](3000)
    work_small, scanned_small = _count_work(small, step, use_grow)
    work_big, scanned_big = _count_work(big, step, use_grow)
    assert work_big <= 6 * len(big), (work_big, len(big))
    assert scanned_big <= 3 * len(big), (scanned_big, len(big))
    # Ten times the input: about ten times the work, never a hundred.
    assert work_big <= 15 * max(work_small, 1)
    assert scanned_big <= 15 * max(scanned_small, 1)


# -- partial_json ----------------------------------------------------------------------


_NOT_JSON = r"offset|no value yet|char \d+"  # partial_json's own message, or json.loads'


def _jiter(text: str, trailing: bool) -> Any:
    return jiter.from_json(text.encode(), partial_mode="trailing-strings" if trailing else True)


_SCALARS = st.one_of(
    st.sampled_from(["true", "false", "null", "NaN", "Infinity", "-Infinity"]),
    st.sampled_from(["-0", "-0.0", "0e0", "1E+2", "1e400", "-1e-400", "12.5E-3", "9" * 30]),
    st.from_regex(r"-?(0|[1-9][0-9]{0,5})(\.[0-9]{1,4})?([eE][+-]?[0-9]{1,2})?", fullmatch=True),
)
_ESCAPED = st.sampled_from(
    [
        *['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u00E9", "\\u00e9"],
        *["\\u20AC", "\\uD83D\\uDE00", "\\ud834\\udd1e", "a", "é", "😀", " "],
    ]
)


@st.composite
def _jstring(draw: st.DrawFn) -> str:
    return '"' + "".join(draw(st.lists(_ESCAPED, max_size=5))) + '"'


@st.composite
def _jtext(draw: st.DrawFn, depth: int = 3) -> str:
    """JSON from the grammar (no lone surrogates: jiter refuses them), whitespace anywhere."""
    kind = draw(st.sampled_from(["scalar", "string", "array", "object"] if depth else ["scalar"]))
    if kind == "scalar":
        return draw(_SCALARS)
    if kind == "string":
        return draw(_jstring())
    ws = draw(_WS)
    if kind == "array":
        items = [
            draw(_WS) + draw(_jtext(depth - 1)) + draw(_WS) for _ in range(draw(st.integers(0, 3)))
        ]
        return "[" + ",".join(items) + (ws if not items else "") + "]"
    members = [
        draw(_WS)
        + draw(_jstring())
        + draw(_WS)
        + ":"
        + draw(_WS)
        + draw(_jtext(depth - 1))
        + draw(_WS)
        for _ in range(draw(st.integers(0, 3)))
    ]
    return "{" + ",".join(members) + (ws if not members else "") + "}"


def _agree(a: Any, b: Any) -> bool:
    """Equal as values, NaN equal to NaN (dict order ignored, as jiter keeps the first place)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_agree(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_agree(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@ORACLE
@given(text=_jtext(), lead=_WS, trail=_WS)
@example(text='{"a": -0}', lead="", trail="")
@example(text='["\\uD83D\\uDE00", 1E+2]', lead="\r", trail="\t")
def test_partial_json_equals_jiter_on_every_prefix_of_grammar_texts(
    text: str, lead: str, trail: str
) -> None:
    text = lead + text + trail
    for end in range(len(text) + 1):
        prefix = text[:end]
        for trailing in (True, False):
            try:
                want = _jiter(prefix, trailing)
            except ValueError:
                with pytest.raises(ValueError, match=_NOT_JSON):
                    partial_json(prefix, trailing_strings=trailing)
                continue
            got = partial_json(prefix, trailing_strings=trailing)
            assert _agree(got, want), (prefix, trailing, got, want)
    assert _agree(partial_json(text), json.loads(text))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("-0", 0),
        ("-0.0", -0.0),
        ("1e400", math.inf),
        ("-1e400", -math.inf),
        ('"x"', "x"),
        ('"x', "x"),
        ("true", True),
        (" null ", None),
        ("\t[\r\n]\n", []),
        ("Infinity", math.inf),
        ("-Infinity", -math.inf),
        ('{"a": Infinity, "b": -Infinity}', {"a": math.inf, "b": -math.inf}),
        ('{"a": -Infinity', {"a": -math.inf}),
        ('{"a": -Infini', {}),
        ('{"a": 1, "a": 2', {"a": 2}),
        ('["\\uD83D\\uDE00', ["😀"]),
        ('["\\ud83d\\u', [""]),
        ('{"\\u00e9": "\\u00', {"é": ""}),
    ],
)
def test_partial_json_odd_but_valid_inputs(text: str, value: Any) -> None:
    assert same(partial_json(text), value)


@pytest.mark.parametrize(
    "text",
    [
        "\ufeff",
        "\ufeff{}",
        "\ufeff[1",
        " \u00a0",
        "nan",
        "-NaN",
        "+1",
        "[.5",
        "[1,,",
        '{"a":}',
        '{,"a": 1',
        '{"a": 1 "b"',
        "[1] [2",
        '"a" "b',
        '["\\x',
        '["\\u12G',
        "'a'",
        "{'a': 1",
        "[1]\x00",
    ],
)
def test_partial_json_raises_value_error_on_what_no_json_starts_with(text: str) -> None:
    with pytest.raises(ValueError, match=_NOT_JSON):
        partial_json(text)


@pytest.mark.parametrize(
    "text",
    [
        "{N",  # a value where a key must be
        "{ -",
        '{"a": 1, t',
        '{"a" t',  # a value where the colon must be
        '{"a"\tN',
    ],
)
def test_partial_json_rejects_a_cut_value_where_a_key_or_colon_must_be(text: str) -> None:
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    parser.feed(text)
    assert parser.error is not None
    with pytest.raises(ValueError, match=r"key must be a string|expected `:`"):
        _jiter(text, True)
    for trailing in (True, False):
        with pytest.raises(ValueError, match=_NOT_JSON):
            partial_json(text, trailing_strings=trailing)


@pytest.mark.parametrize("text", ["[1.e", "[1.e5", '{"a": -0.E+', "[1, 2.e1"])
def test_partial_json_rejects_a_dot_without_a_digit_before_the_exponent(text: str) -> None:
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    parser.feed(text)
    assert parser.error is not None
    with pytest.raises(ValueError, match="invalid number"):
        _jiter(text, True)
    with pytest.raises(ValueError, match=_NOT_JSON):
        partial_json(text)


@pytest.mark.parametrize(
    ("text", "trailing"),
    [
        ('{"a\x01', True),  # a raw control character in a cut key
        ('{"\t', True),
        ('{"a": "x\x01', False),  # ... in a cut string value left out
        ('["a\x1f', False),
    ],
)
def test_partial_json_rejects_a_raw_control_character_in_a_cut_string(
    text: str, trailing: bool
) -> None:
    parser: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
    parser.feed(text)
    assert parser.error is not None
    assert parser.error.startswith("Invalid control character")
    with pytest.raises(ValueError, match="control character"):
        _jiter(text, trailing)
    with pytest.raises(ValueError, match=_NOT_JSON):
        partial_json(text, trailing_strings=trailing)


def test_partial_json_deep_nesting_is_a_value_error() -> None:
    """Documented: ``ValueError`` for what cannot be given; jiter says ValueError too."""
    text = "[" * 100_000
    with pytest.raises(ValueError, match="recursion limit"):
        _jiter(text, True)
    with pytest.raises(ValueError, match=r".+"):
        partial_json(text)


# -- the operator ------------------------------------------------------------------------


@ORACLE
@given(
    first=st.dictionaries(_SAFE_TEXT, values(_SAFE_TEXT, st.integers()) | _SAFE_TEXT, max_size=3),
    second=st.dictionaries(_SAFE_TEXT, _SAFE_TEXT, max_size=3),
    bad=st.sampled_from(["", "x", "}", '"\\q', "\x01"]),
    data=st.data(),
)
def test_operator_interleaved_calls_match_standalone_parsers(
    first: dict[str, Any], second: dict[str, Any], bad: str, data: st.DataObject
) -> None:
    texts = {"c1": data.draw(dumped(first)), "c2": data.draw(dumped(second))}
    cut = data.draw(st.integers(0, len(texts["c2"])))
    texts["c2"] = texts["c2"][:cut] + bad + texts["c2"][cut:]
    frags = {k: data.draw(cuts(t, max_pieces=8)) for k, t in texts.items()}
    order = data.draw(st.permutations(["c1"] * len(frags["c1"]) + ["c2"] * len(frags["c2"])))
    updates: list[Any] = [u.ToolCallStart("c1", "f"), u.ToolCallStart("c2", "g")]
    position = {"c1": 0, "c2": 0}
    for call in order:
        updates.append(u.ToolCallArgs(call, frags[call][position[call]]))
        position[call] += 1
    updates += [u.ToolCallEnd("c1"), u.ToolCallEnd("c2")]
    out, errors = run(updates, ops.accumulate_tool_calls(), ops.parse_args_stream())
    assert errors == []
    got = contents(out)
    for call, text in texts.items():
        reference: StreamingArgsParser[ArgEvent] = StreamingArgsParser()
        want: list[Any] = []
        for frag in frags[call]:
            for e in reference.feed(frag):
                if isinstance(e, ArgProgress):
                    want.append(("p", e.name, e.received, e.fragment))
                else:
                    want.append(("m", e.name, e.value))
        seen: list[Any] = []
        for c in got:
            if isinstance(c, ToolCallArgsProgressContent) and c.call_id == call:
                seen.append(("p", c.name, c.received, c.value))
            elif isinstance(c, ToolCallArgsParsedContent) and c.call_id == call:
                seen.append(("m", c.name, c.value))
        assert same(seen, want), call
        if _verdict(text):
            assert [s for s in seen if s[0] == "m"] == [
                ("m", k, v) for k, v in json.loads(text).items()
            ]
