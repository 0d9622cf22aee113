"""What an operator says when it is given the wrong thing: the mistakes of a newcomer.

Example:
    >>> from rafrx import updates as u
    >>> print(not_a_result(u.TextDelta("Hi"), "aggregate()"))
    aggregate() takes AgentResponseResults, got TextDelta(delta='Hi'), an update: put convert() before it (updates -> results)
    >>> import reactivex
    >>> not_a_source(reactivex.of(1), "convert")
    Traceback (most recent call last):
    ...
    TypeError: convert makes an operator: call it in pipe(), as convert(...); pipe(convert) gave it the stream as its first argument
    >>> async def send(text): ...
    >>> check_stream(send("Hi"), "live()")
    Traceback (most recent call last):
    ...
    TypeError: live() takes a stream (an Observable: agent.run(...), client.stream(...)), not a coroutine: agent.send(...) is the awaitable response, agent.run(...) its stream
"""  # noqa: E501

from __future__ import annotations

import inspect

from reactivex import Observable

from rafrx.updates import Update

__all__ = ["a_noun", "check_stream", "not_a_result", "not_a_source"]


def check_stream(value: object, taker: str) -> None:
    """Raise ``TypeError`` unless ``value``, given to ``taker`` (``"live()"``), is an
    observable; a coroutine (``agent.send(...)`` where ``agent.run(...)`` was meant) is
    closed first, so that Python does not warn it was never awaited."""
    if isinstance(value, Observable):
        return
    said = f"{taker} takes a stream (an Observable: agent.run(...), client.stream(...)), not"
    if inspect.iscoroutine(value):
        value.close()
        raise TypeError(
            f"{said} a coroutine: agent.send(...) is the awaitable response, "
            "agent.run(...) its stream"
        )
    raise TypeError(f"{said} {a_noun(type(value).__name__)}")


def a_noun(noun: str) -> str:
    """``noun`` with its indefinite article."""
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


_PLAIN = frozenset({type(None), bool, int, str})
"""What operator factories' first arguments usually are: never an observable."""


def not_a_source(first: object, factory: str) -> None:
    """Raise ``TypeError`` when ``first``, the first argument of the operator factory
    named ``factory``, is an observable: the factory itself was given to ``pipe()``
    (``pipe(convert)``), which called it with the stream."""
    if type(first) in _PLAIN:  # (isinstance with an ABC: a Python call, twice a stream)
        return
    if isinstance(first, Observable):
        raise TypeError(
            f"{factory} makes an operator: call it in pipe(), as {factory}(...); "
            f"pipe({factory}) gave it the stream as its first argument"
        )


def not_a_result(item: object, operator: str) -> TypeError:
    """The error of ``operator`` (``"aggregate()"``) over results given ``item``, which is
    not one: most often an update from a client or ``from_sse``, ``convert()`` left out."""
    shown = repr(item)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if isinstance(item, Update):
        why = "an update: put convert() before it (updates -> results)"
    else:
        why = a_noun(type(item).__name__)
    return TypeError(f"{operator} takes AgentResponseResults, got {shown}, {why}")
