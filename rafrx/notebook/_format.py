"""Small text formatters shared by the notebook renderers and the terminal renderer.

Example:
    >>> human_size(2048)
    '2.0 KiB'
    >>> json_html({"q": "<b>"})
    '{\\n &quot;q&quot;: &quot;&lt;b&gt;&quot;\\n}'
"""

from __future__ import annotations

import html
import json
import re
from typing import Any, Final

from rafrx.response import Usage

__all__ = [
    "LONG_ARG_BYTES",
    "PREVIEW_CHARS",
    "clip",
    "clip_html",
    "escape",
    "human_size",
    "json_html",
    "json_preview",
    "one_line",
    "showable",
    "usage_line",
]

PREVIEW_CHARS: Final = 2000
"""The longest tool result or argument value shown in HTML, in characters."""

LONG_ARG_BYTES: Final = 80
"""A streamed string argument at least this long is shown by its size, not its value."""


#: The bidi controls (marks, embeddings, overrides, isolates), as a regular expression class's
#: inside: they reorder what follows, so "/tmp/\u202egnp.exe" would read as "/tmp/exe.png".
BIDI_CONTROLS: Final = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"

# What no display can take: lone surrogates (a JSON "\ud800" escape decodes to one; UTF-8
# cannot encode it) and the characters XML 1.0 forbids (the timeline is SVG); and what it
# must not take from a model: the bidi controls.
_UNSHOWABLE: Final = re.compile(
    f"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff{BIDI_CONTROLS}]"
)


def showable(text: str) -> str:
    """``text`` with what no display can take (lone surrogates, XML-forbidden controls) and
    the bidi controls (which would make a path or a command read as another) as U+FFFD.

    Example:
        >>> showable("ok \\ud800 \\x01") == "ok \\ufffd \\ufffd"
        True
        >>> showable("/tmp/\\u202egnp.exe") == "/tmp/\\ufffdgnp.exe"
        True
    """
    return text if text.isascii() and text.isprintable() else _UNSHOWABLE.sub("\ufffd", text)


def escape(text: str) -> str:
    """``text`` HTML-escaped (quotes included) and :func:`showable`."""
    return html.escape(showable(text))


def clip(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut.

    Example:
        >>> clip("abcdef", 4)
        'abcd… (2 more characters)'
    """
    if len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text) - limit} more characters)"


def clip_html(text: str) -> str:
    """``text`` cut to :data:`PREVIEW_CHARS` (saying how much was cut), HTML-escaped.

    Example:
        >>> clip_html("a" * 2001).endswith("… (1 more characters)")
        True
    """
    return escape(clip(text))


def json_preview(value: Any, limit: int = PREVIEW_CHARS, indent: int | None = 1) -> str:
    """``value`` as JSON (``repr`` for what JSON cannot hold), cut to ``limit`` characters.

    The encoding stops once ``limit`` is reached, so the work is bounded by
    what is shown, however large the value.

    Example:
        >>> json_preview(list(range(10**6)), limit=12, indent=None)
        '[0, 1, 2, 3,… (more)'
    """
    pieces: list[str] = []
    size = 0
    encoder = json.JSONEncoder(ensure_ascii=False, indent=indent, default=repr)
    try:
        for piece in encoder.iterencode(value):
            pieces.append(piece)
            size += len(piece)
            if size > limit:
                return "".join(pieces)[:limit] + "… (more)"
    except (TypeError, ValueError):  # e.g. a circular value
        return clip(repr(value), limit)
    return "".join(pieces)


# Every character str.splitlines() breaks a line at, escaped: shown, but on the same line.
_LINE_BREAKS: Final = str.maketrans(
    {ch: ascii(ch)[1:-1] for ch in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}
)


def one_line(value: Any, limit: int = 100, *, as_json: bool = False) -> str:
    """``value`` on one line (line breaks shown escaped, as ``\\n``), cut to ``limit`` characters.

    A ``str`` is shown as it is unless ``as_json``, anything else as JSON; the
    work is bounded by what is shown. For model-made names, ids and values
    that a renderer prints inside a line of its own.

    Example:
        >>> print(one_line("get_weather\\n[ok] forged"))
        get_weather\\n[ok] forged
        >>> one_line("n" * 500, 8), one_line({"q": "x"}), one_line("x", as_json=True)
        ('nnnnnnn…', '{"q": "x"}', '"x"')
    """
    if isinstance(value, str):
        value = value[: limit + 1]
        text = json.dumps(value, ensure_ascii=False) if as_json else value
    else:
        text = json_preview(value, limit=limit + 1, indent=None)
    text = text.translate(_LINE_BREAKS)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_html(value: Any) -> str:
    """``value`` as indented JSON (``repr`` for what JSON cannot hold), clipped and escaped."""
    return escape(json_preview(value))


def human_size(n: int) -> str:
    """A byte count for people: ``B``, ``KiB`` or ``MiB`` with one decimal.

    Example:
        >>> human_size(80), human_size(3 * 1024 * 1024)
        ('80 B', '3.0 MiB')
    """
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def usage_line(usage: Usage) -> str:
    """Token usage as one line.

    Example:
        >>> usage_line(Usage(prompt_tokens=3, completion_tokens=4, total_tokens=7))
        'tokens: 3 in / 4 out / 7 total'
    """
    return (
        f"tokens: {usage.prompt_tokens} in / {usage.completion_tokens} out"
        f" / {usage.total_tokens} total"
    )
