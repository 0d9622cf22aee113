"""Tests of the converter operators, with small marble-testing helpers.

``marble(...)`` runs an operator over a hot observable described by a marble
string on a :class:`~reactivex.testing.TestScheduler` (one tick = 10 virtual
time units from 200, when the operator is subscribed) and returns what the
observer saw plus the hot source's subscriptions, so tests can assert both the
output and that the operator disposed its upstream (RxPY's
``xs.subscriptions == [subscribe(200, 400)]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import reactivex
from reactivex import operators as rx_ops
from reactivex.testing import ReactiveTest, TestScheduler
from reactivex.testing.marbles import messages_to_records, parse
from reactivex.testing.recorded import Recorded
from reactivex.testing.subscription import Subscription

from rafrx.response import AgentResponseResult
from rafrx.typing import Operator

__all__ = ["TICK", "apart", "contents", "marble", "records", "run", "subscribed", "values"]

TICK = 10
"""Virtual time of one marble character."""


def apart(*operators: Operator[Any, Any]) -> Operator[Any, Any]:
    """The operators piped with an identity map between each two, so they cannot fuse.

    Reducer operators applied to each other's output run as one chain
    (``reducer_operator``); this is the reference that fusion must equal.
    """

    def operator(source: reactivex.Observable[Any]) -> reactivex.Observable[Any]:
        for op in operators:
            source = op(source.pipe(rx_ops.map(_same)))
        return source

    return operator


def _same(item: Any) -> Any:
    return item


def records(
    diagram: str, lookup: Mapping[str, Any], error: Exception | None = None
) -> list[Recorded[Any]]:
    """The notifications a marble diagram stands for, in subscribed virtual time."""
    return messages_to_records(
        parse(diagram, timespan=TICK, time_shift=200, lookup=lookup, error=error)
    )


def marble(
    operator: Operator[Any, Any],
    source: str,
    lookup: Mapping[str, Any],
    *,
    error: Exception | None = None,
    disposed: int = 1000,
) -> tuple[list[Recorded[Any]], list[Subscription]]:
    """Run ``operator`` over a hot ``source`` diagram; return (messages, source subscriptions)."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(records(source, lookup, error))
    observer = scheduler.start(lambda: xs.pipe(operator), disposed=disposed)
    return observer.messages, xs.subscriptions


def subscribed(start: int, end: int) -> Subscription:
    """A subscription record, as in ``xs.subscriptions == [subscribed(200, 400)]``."""
    return ReactiveTest.subscribe(start, end)


def values(messages: Iterable[Recorded[Any]]) -> list[Any]:
    """The ``on_next`` values among recorded notifications."""
    return [m.value.value for m in messages if m.value.kind == "N"]


def run(items: Iterable[Any], *operators: Operator[Any, Any]) -> tuple[list[Any], list[Exception]]:
    """Subscribe synchronously over ``items``; return (values, errors) and check the grammar."""
    out: list[Any] = []
    errors: list[Exception] = []
    completed: list[bool] = []

    def on_next(value: Any) -> None:
        assert not errors, "on_next after on_error"
        assert not completed, "on_next after on_completed"
        out.append(value)

    reactivex.from_iterable(list(items)).pipe(*operators).subscribe(
        on_next, errors.append, lambda: completed.append(True)
    )
    assert len(errors) + len(completed) == 1, "exactly one terminal notification"
    return out, errors


def contents(results: Iterable[AgentResponseResult]) -> list[Any]:
    """All contents of the results, flattened."""
    return [c for r in results for c in r.contents]
