"""The rafrx contender: ``from_sse`` → ``convert()`` → ``aggregate()``, end to end.

``convert()`` runs with its defaults, so ``parse_args_stream`` is in the
chain and every ``ToolCallArgsProgressContent`` / ``ToolCallArgsParsedContent``
is built while the arguments stream, though nobody here looks at them.

Example:
    >>> body = b'data: {"choices":[{"delta":{"content":"Hi"},"finish_reason":"stop"}]}\\n\\n'
    >>> run_rafrx([body], "openai-chat").text
    'Hi'
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from reactivex import operators as ops

from bench.outcome import Outcome
from rafrx.content import ToolCallArgsParsedContent, ToolCallArgsProgressContent
from rafrx.operators import aggregate, convert
from rafrx.response import AgentResponseResult
from rafrx.sources import from_sse

__all__ = ["count_parse_events", "run_rafrx"]


def run_rafrx(chunks: Iterable[bytes], dialect: str, counts: list[int] | None = None) -> Outcome:
    """Aggregate an SSE body with the rafrx pipeline.

    With ``counts`` (a list of two ints), the ``Progress`` and ``Parsed``
    contents that ``convert()`` emits are added to it on the way.
    """
    results = from_sse(chunks, dialect).pipe(convert())
    if counts is not None:
        results = results.pipe(ops.do_action(functools.partial(_count, counts)))
    response = results.pipe(aggregate()).run()
    return Outcome(
        response.text,
        response.reasoning_text or "",
        tuple((call.id, call.name, call.arguments) for call in response.tool_calls),
    )


def _count(counts: list[int], result: AgentResponseResult) -> None:
    for content in result.contents:
        if type(content) is ToolCallArgsProgressContent:
            counts[0] += 1
        elif type(content) is ToolCallArgsParsedContent:
            counts[1] += 1


def count_parse_events(chunks: Iterable[bytes], dialect: str) -> tuple[int, int]:
    """``(Progress, Parsed)`` contents that ``convert()`` emits for this body.

    Shows that the timed pipeline does the streaming-parse work it claims.
    """
    counts = [0, 0]
    run_rafrx(chunks, dialect, counts)
    return counts[0], counts[1]
