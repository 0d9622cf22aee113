"""The value a cut JSON text was on its way to: what a truncated tool call shows.

A tool call cut by the model's token limit has arguments that stop anywhere:
inside a string, a key, a number, after a comma. :func:`partial_json` closes
what is open and drops what cannot be completed (a key without its value, a
half number or literal, an unfinished escape), then decodes the result with
:func:`json.loads`, in one linear pass. It gives the same values as jiter's
``partial_mode`` (which the Anthropic SDK uses for its snapshots).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["partial_json"]

_TOKEN: Final = re.compile(
    r'[ \t\n\r]*+(?:(")|([\[{])|([\]}])|(,)|(:)'
    r"|(-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][+-]?[0-9]++)?|true|false|null|NaN|-?Infinity))"
)
_STRING_BODY: Final = re.compile(  # (a raw control character is no string content)
    r'(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+'
)
_CUT_ESCAPE: Final = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_CUT_TOKEN: Final = re.compile(  # the start of a number or literal, cut short
    r"[ \t\n\r]*+(?:-?(?:(?:0|[1-9][0-9]*+)"
    r"(?:\.(?:[0-9]++(?:[eE][+-]?[0-9]*+)?)?|[eE][+-]?[0-9]*+)?)?"
    r"|t(?:ru?)?|f(?:a(?:ls?)?)?|n(?:ul?)?|N(?:a)?|-?I(?:n(?:f(?:i(?:n(?:i(?:t)?)?)?)?)?)?)"
)
_HIGH_SURROGATE: Final = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\Z")
_CLOSER: Final = {"{": "}", "[": "]"}

# What may come next.
_VALUE, _FIRST_VALUE, _KEY, _FIRST_KEY, _COLON, _AFTER = range(6)


def partial_json(text: str, *, trailing_strings: bool = True) -> Any:
    """The value of the longest completable prefix of the JSON text ``text``.

    Open strings, arrays and objects are closed; a member without its value,
    a number or literal cut short, an unfinished escape (or a high surrogate
    whose pair may follow) are left out. With ``trailing_strings=False`` an
    unfinished string value is left out too.

    Raises:
        ValueError: ``text`` is not the start of a JSON text, or holds no
            value yet.

    Example:
        >>> partial_json('{"path": "a.py", "lines": ["x", "y')
        {'path': 'a.py', 'lines': ['x', 'y']}
        >>> partial_json('{"path": "a.py", "lines": ["x", "y', trailing_strings=False)
        {'path': 'a.py', 'lines': ['x']}
        >>> partial_json('{"n": 1, "ok": tr')
        {'n': 1}
    """
    stack: list[str] = []
    expect = _VALUE
    safe = -1  # text[:safe] plus the closers of ``stack`` is complete JSON
    end = len(text)
    i = 0
    while i < end:
        match = _TOKEN.match(text, i)
        if match is None:
            rest = not text[i:].strip(" \t\n\r")
            if rest or (expect in (_VALUE, _FIRST_VALUE) and _CUT_TOKEN.fullmatch(text, i)):
                break  # a number or literal cut short (where a value goes): it is left out
            raise ValueError(f"not JSON at offset {i}")
        quote, opener, closer, comma, colon, scalar = match.groups()
        i = match.end()
        if quote:
            if expect not in (_VALUE, _FIRST_VALUE, _KEY, _FIRST_KEY):
                raise ValueError(f"unexpected string at offset {i - 1}")
            is_key = expect in (_KEY, _FIRST_KEY)
            body = _STRING_BODY.match(text, i)
            body_end = body.end() if body else i
            if body_end < end and text[body_end] == '"':
                i = body_end + 1
                expect = _COLON if is_key else _AFTER
                if not is_key:
                    safe = i
                continue
            if body_end < end and not _CUT_ESCAPE.fullmatch(text, body_end):
                raise ValueError(f"invalid string content at offset {body_end}")
            if trailing_strings and not is_key:
                cut = text[:body_end]
                surrogate = _HIGH_SURROGATE.search(cut, i)
                if surrogate and _escapes(cut, surrogate.start()):
                    cut = cut[: surrogate.start()]
                return _decode(cut + '"', stack)
            break
        if opener:
            if expect not in (_VALUE, _FIRST_VALUE):
                raise ValueError(f"unexpected {opener!r} at offset {i - 1}")
            stack.append(opener)
            expect = _FIRST_KEY if opener == "{" else _FIRST_VALUE
            safe = i
        elif closer:
            if (
                not stack
                or _CLOSER[stack[-1]] != closer
                or expect
                not in (
                    _AFTER,
                    _FIRST_KEY if closer == "}" else _FIRST_VALUE,
                )
            ):
                raise ValueError(f"unexpected {closer!r} at offset {i - 1}")
            stack.pop()
            expect = _AFTER
            safe = i
        elif comma:
            if expect != _AFTER or not stack:
                raise ValueError(f"unexpected ',' at offset {i - 1}")
            expect = _KEY if stack[-1] == "{" else _VALUE
        elif colon:
            if expect != _COLON:
                raise ValueError(f"unexpected ':' at offset {i - 1}")
            expect = _VALUE
        else:
            if expect not in (_VALUE, _FIRST_VALUE):
                raise ValueError(f"unexpected {scalar!r} at offset {match.start(6)}")
            if i < end and _CUT_TOKEN.fullmatch(text, match.start(6)):
                break  # "1.", "1e" ...: the longest number is not the whole token
            expect = _AFTER
            safe = i
        if expect == _AFTER and not stack and text[i:].strip(" \t\n\r"):
            raise ValueError(f"extra data at offset {i}")
    if safe < 0:
        raise ValueError("no value yet")
    return _decode(text[:safe], stack)


def _escapes(text: str, at: int) -> bool:
    """Whether the backslash at ``at`` starts an escape (is not itself escaped)."""
    before = at
    while before and text[before - 1] == "\\":
        before -= 1
    return (at - before) % 2 == 0


def _decode(prefix: str, stack: list[str]) -> Any:
    try:
        return json.loads(prefix + "".join(_CLOSER[opener] for opener in reversed(stack)))
    except RecursionError:
        raise ValueError("nested too deeply") from None
