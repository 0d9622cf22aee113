"""Small text formatters shared by the notebook renderers and the terminal renderer.

Example:
    >>> human_size(2048)
    '2.0 KiB'
    >>> json_html({"q": "<b>"})
    '{\\n &quot;q&quot;: &quot;&lt;b&gt;&quot;\\n}'
"""

from __future__ import annotations

import json
from html import escape
from typing import Any, Final

from rafrx.response import Usage

__all__ = ["LONG_ARG_BYTES", "PREVIEW_CHARS", "clip_html", "human_size", "json_html", "usage_line"]

PREVIEW_CHARS: Final = 2000
"""The longest tool result or argument value shown in HTML, in characters."""

LONG_ARG_BYTES: Final = 80
"""A streamed string argument at least this long is shown by its size, not its value."""


def clip_html(text: str) -> str:
    """``text`` cut to :data:`PREVIEW_CHARS` (saying how much was cut), HTML-escaped.

    Example:
        >>> clip_html("a" * 2001).endswith("… (1 more characters)")
        True
    """
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS] + f"… ({len(text) - PREVIEW_CHARS} more characters)"
    return escape(text)


def json_html(value: Any) -> str:
    """``value`` as indented JSON (``repr`` for what JSON cannot hold), clipped and escaped."""
    try:
        text = json.dumps(value, ensure_ascii=False, indent=1, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return clip_html(text)


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
