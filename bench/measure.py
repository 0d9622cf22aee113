"""Timing and memory of one contender on one scenario.

* :func:`warm_up` runs once, checks the outcome against the scenario's
  expected result, and stops a run that passes its time cap (a quadratic
  peer on a 1 MB argument would otherwise take many minutes): such a run is
  reported as a lower bound, with the share of the body it had consumed.
* :func:`time_once` is one timed run over the plain chunk list.
* :func:`peak_memory` is a separate run under :mod:`tracemalloc` (the chunk
  list is allocated before tracing starts, so only what the contender
  allocates counts).

Example:
    >>> from bench.limit import limit_openai_chat
    >>> body = b'data: {"choices":[{"delta":{"content":"Hi"}}]}\\n\\ndata: [DONE]\\n\\n'
    >>> run = lambda chunks, dialect: limit_openai_chat(chunks)
    >>> result = warm_up(run, [body], "openai-chat", cap=10.0)
    >>> result.outcome.text, result.complete
    ('Hi', True)
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Iterator, Sequence

import attrs

from bench.contenders import Runner
from bench.outcome import Outcome

__all__ = ["Capped", "WarmUp", "peak_memory", "time_once", "warm_up"]


class Capped(Exception):
    """A capped run passed its deadline (raised from inside the chunk iterator)."""


class _Feed:
    """The chunks, stopping with :class:`Capped` once ``deadline`` has passed."""

    def __init__(self, chunks: Sequence[bytes], deadline: float | None) -> None:
        self.chunks = chunks
        self.deadline = deadline
        self.consumed = 0

    def __iter__(self) -> Iterator[bytes]:
        deadline = self.deadline
        for chunk in self.chunks:
            if deadline is not None and time.perf_counter() > deadline:
                raise Capped
            self.consumed += len(chunk)
            yield chunk


def _capped(error: BaseException | None) -> bool:
    """Whether ``error`` is, or was caused by, :class:`Capped`."""
    seen = 0
    while error is not None and seen < 20:
        if isinstance(error, Capped):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


@attrs.frozen
class WarmUp:
    """The first run: its outcome, its time, and whether it finished."""

    outcome: Outcome | None
    seconds: float
    complete: bool
    fraction: float
    """Share of the body's bytes read (1.0 when complete)."""


def warm_up(run: Runner, chunks: Sequence[bytes], dialect: str, cap: float | None) -> WarmUp:
    """One run with a time cap (``None``: no cap)."""
    total = sum(len(c) for c in chunks) or 1
    gc.collect()
    start = time.perf_counter()
    feed = _Feed(chunks, None if cap is None else start + cap)
    try:
        outcome = run(feed, dialect)
    except Exception as exc:
        if not _capped(exc):
            raise
        return WarmUp(None, time.perf_counter() - start, False, feed.consumed / total)
    return WarmUp(outcome, time.perf_counter() - start, True, 1.0)


def time_once(run: Runner, chunks: Sequence[bytes], dialect: str) -> float:
    """Wall time of one complete run (the garbage collector stays on, as in production)."""
    gc.collect()
    start = time.perf_counter()
    run(chunks, dialect)
    return time.perf_counter() - start


def peak_memory(run: Runner, chunks: Sequence[bytes], dialect: str) -> int:
    """Peak bytes allocated by one run, by :mod:`tracemalloc`."""
    gc.collect()
    tracemalloc.start()
    try:
        run(chunks, dialect)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
