"""What an operator over result chunks says when it is given something else.

Example:
    >>> from rafrx import updates as u
    >>> print(not_a_result(u.TextDelta("Hi"), "aggregate()"))
    aggregate() takes AgentResponseResults, got TextDelta(delta='Hi'), an update: put convert() before it (updates -> results)
"""  # noqa: E501

from __future__ import annotations

from rafrx.updates import Update

__all__ = ["not_a_result"]


def not_a_result(item: object, operator: str) -> TypeError:
    """The error of ``operator`` (``"aggregate()"``) over results given ``item``, which is
    not one: most often an update from a client or ``from_sse``, ``convert()`` left out."""
    shown = repr(item)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if isinstance(item, Update):
        why = "an update: put convert() before it (updates -> results)"
    else:
        why = f"a {type(item).__name__}"
    return TypeError(f"{operator} takes AgentResponseResults, got {shown}, {why}")
