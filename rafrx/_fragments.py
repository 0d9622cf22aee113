"""Many small strings kept compactly: the fragments a stream delivers.

A stream keeps what it must (the answer, each call's arguments) as the
fragments arrive, a few characters each. One string object per fragment
costs ten times the text itself, so the keepers append to a list of
``parts`` and, every :data:`COMPACT_AT` of them, move the parts into a list
of ``blocks`` as one string. That keeps appending a plain ``list.append``
(the hot path checks the length) and the whole linear in the text.

Example:
    >>> parts, blocks = [], []
    >>> for ch in "hello":
    ...     parts.append(ch)
    ...     if len(parts) >= 2:
    ...         compact(parts, blocks)
    >>> blocks, parts, joined(blocks, parts)
    (['he', 'll'], ['o'], 'hello')
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["COMPACT_AT", "compact", "has_surrogates", "join_surrogates", "joined"]

#: How many fragments a keeper holds before it joins them into one block.
COMPACT_AT: Final = 1024


def compact(parts: list[str], blocks: list[str]) -> None:
    """Move ``parts`` into ``blocks`` as one string; ``parts`` is emptied in place."""
    blocks.append("".join(parts))
    parts.clear()


def joined(blocks: list[str], parts: list[str]) -> str:
    """The whole text: the ``blocks``, then the ``parts``."""
    return "".join([*blocks, *parts]) if blocks else "".join(parts)


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a UTF-16 surrogate (half of a character, on its own).

    Example:
        >>> has_surrogates("a\\U0001f600b"), has_surrogates("a\\ud83d")
        (False, True)
    """
    return not text.isascii() and _SURROGATE.search(text) is not None


def join_surrogates(text: str) -> str:
    """``text`` with each high + low surrogate pair in it as the one character they make.

    A server slicing text by UTF-16 units may send an emoji's two halves as
    ``\\ud83d`` and ``\\ude00`` escapes in two deltas: joined, the two
    halves are still two lone surrogates, which ``print()`` and ``encode()``
    refuse. Lone surrogates without their other half stay as they are.

    Example:
        >>> join_surrogates("a\\ud83d" + "\\ude00b") == "a\\U0001f600b"
        True
    """
    if not has_surrogates(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
