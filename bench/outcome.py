"""What every contender returns, so their results can be compared exactly."""

from __future__ import annotations

from typing import Any

import attrs

from bench.generate import Expected

__all__ = ["Outcome"]


@attrs.frozen
class Outcome:
    """The aggregated result of one stream: text, reasoning and parsed tool calls.

    Example:
        >>> Outcome("Hi", "", ()) == Outcome("Hi", "", ())
        True
    """

    text: str
    reasoning: str
    tool_calls: tuple[tuple[str, str, Any], ...]
    """``(id, name, arguments)`` per call, in call order; arguments parsed."""

    @classmethod
    def of(cls, expected: Expected) -> Outcome:
        """The outcome a scenario's body must produce."""
        return cls(expected.text, expected.reasoning, expected.tool_calls)
