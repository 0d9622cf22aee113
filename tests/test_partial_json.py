"""``partial_json``: the value a cut JSON text was on its way to.

The oracle is jiter's ``partial_mode`` (what the Anthropic SDK shows for a tool
call's arguments while they stream): every prefix of every generated JSON text
must give jiter's value.
"""

from __future__ import annotations

import json
from typing import Any

import jiter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx.json_stream import partial_json

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


_NOT_JSON = r"offset|no value yet|char \d+"  # ours, or json.loads' own position


def _jiter(text: str, trailing_strings: bool) -> Any:
    return jiter.from_json(
        text.encode(), partial_mode="trailing-strings" if trailing_strings else True
    )


@settings(max_examples=150, deadline=None)
@given(
    value=_VALUES,
    ensure_ascii=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
    trailing_strings=st.booleans(),
)
def test_every_prefix_gives_what_jiter_gives(
    value: Any, ensure_ascii: bool, indent: int | None, trailing_strings: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)
    for end in range(1, len(text) + 1):
        prefix = text[:end]
        try:
            want = _jiter(prefix, trailing_strings)
        except ValueError:
            with pytest.raises(ValueError, match=_NOT_JSON):
                partial_json(prefix, trailing_strings=trailing_strings)
            continue
        assert partial_json(prefix, trailing_strings=trailing_strings) == want, prefix
    assert partial_json(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"path": "a.py", "content": "def f(', {"path": "a.py", "content": "def f("}),
        ('{"a": "x\\u00', {"a": "x"}),  # an unfinished escape is left out
        ('{"a": "x\\', {"a": "x"}),
        ('["\\ud83d', [""]),  # a high surrogate whose pair may follow
        ('["\\ud83d\\ude', [""]),
        ('["\\\\ud83d', ["\\ud83d"]),  # an escaped backslash, then text
        ('{"a": 1, "b": tr', {"a": 1}),
        ('{"a": 1, "b": -', {"a": 1}),
        ('{"a": 1.5e', {}),
        ('{"a": 12', {"a": 12}),
        ('{"a": [1, {"b', {"a": [1, {}]}),
        ('{"a": [1, 2], "b":', {"a": [1, 2]}),
        ('{"a": NaN', {"a": pytest.approx(float("nan"), nan_ok=True)}),
        ("  [ ", []),
    ],
)
def test_what_a_cut_keeps(text: str, value: Any) -> None:
    assert partial_json(text) == value


@pytest.mark.parametrize(("text", "value"), [("{", {}), ("[", []), ("[1,", [1]), ('{"a', {})])
def test_an_opened_container_is_a_value(text: str, value: Any) -> None:
    assert partial_json(text) == value


@pytest.mark.parametrize(
    "text", ["", "   ", "-", "tr", '{"a": 1}x', "[1]]", '{"a":1,}', "[01", '{"a" 1', '["\\x"]', "}"]
)
def test_what_is_not_the_start_of_a_json_text_raises(text: str) -> None:
    with pytest.raises(ValueError, match=_NOT_JSON):
        partial_json(text)


def test_a_trailing_string_is_left_out_on_request() -> None:
    assert partial_json('"abc', trailing_strings=True) == "abc"
    with pytest.raises(ValueError, match=_NOT_JSON):
        partial_json('"abc', trailing_strings=False)


def test_a_long_cut_argument() -> None:
    """A 600 KB argument of many short strings with escapes, cut near its end."""
    text = json.dumps({"lines": [f"line {n} \\ \u00e9" for n in range(40_000)]})[:-50]
    value = partial_json(text)
    assert len(value["lines"]) > 39_990
    assert value["lines"][:2] == ["line 0 \\ \u00e9", "line 1 \\ \u00e9"]
