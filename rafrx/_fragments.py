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

from typing import Final

__all__ = ["COMPACT_AT", "compact", "joined"]

#: How many fragments a keeper holds before it joins them into one block.
COMPACT_AT: Final = 1024


def compact(parts: list[str], blocks: list[str]) -> None:
    """Move ``parts`` into ``blocks`` as one string; ``parts`` is emptied in place."""
    blocks.append("".join(parts))
    parts.clear()


def joined(blocks: list[str], parts: list[str]) -> str:
    """The whole text: the ``blocks``, then the ``parts``."""
    return "".join([*blocks, *parts]) if blocks else "".join(parts)
