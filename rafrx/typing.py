"""Type aliases shared by the operators.

Example:
    >>> from rafrx.typing import Operator
    >>> from rafrx.updates import AgentResponseUpdate
    >>> from rafrx.response import AgentResponseResult
    >>> Converter = Operator[AgentResponseUpdate, AgentResponseResult]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias, TypeVar

from reactivex import Observable

__all__ = ["A", "B", "Operator"]

A = TypeVar("A")
B = TypeVar("B")

Operator: TypeAlias = Callable[[Observable[A]], Observable[B]]
"""A curried operator: a function from one observable to another, for ``.pipe``."""
