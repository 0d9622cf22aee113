"""Helpers shared by the test modules: cutting a body into chunks."""

from __future__ import annotations

import itertools
from collections.abc import Iterable


def cut(body: bytes, offsets: Iterable[int]) -> list[bytes]:
    """Split ``body`` at the given offsets (any order, duplicates allowed)."""
    bounds = [0, *sorted(set(offsets)), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def split_after(body: bytes, separator: bytes) -> list[bytes]:
    """``body`` cut just after every ``separator`` (``b"\\n\\n"``: one SSE event per chunk)."""
    offsets, at = [], body.find(separator)
    while at >= 0:
        offsets.append(at + len(separator))
        at = body.find(separator, at + len(separator))
    return cut(body, offsets)
