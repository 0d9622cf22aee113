"""Any rafrx stream as result chunks: what a live view and the CLI consume.

Example:
    >>> import reactivex
    >>> from rafrx import updates as u
    >>> as_results(reactivex.of(u.TextDelta("Hi"))).run().contents
    (TextContent(text='Hi'),)
"""

from __future__ import annotations

from typing import Any

from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, SingleAssignmentDisposable
from reactivex.subject import Subject

from rafrx.operators import convert
from rafrx.response import AgentResponseResult

__all__ = ["as_results"]


def as_results(source: Observable[Any]) -> Observable[AgentResponseResult]:
    """``source`` as result chunks: results pass, updates go through ``convert()``.

    The first item decides: a stream of :class:`~rafrx.AgentResponseResult`
    passes unchanged, anything else is converted.

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> as_results(reactivex.of(u.TextDelta("Hi"))).run().contents
        (TextContent(text='Hi'),)
    """

    def subscribe(
        observer: abc.ObserverBase[AgentResponseResult], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        target: list[abc.ObserverBase[Any]] = []
        converting = SingleAssignmentDisposable()  # disposed with the subscription: no cycle

        def sink(item: Any) -> abc.ObserverBase[Any]:
            if not target:
                if isinstance(item, AgentResponseResult):
                    target.append(observer)
                else:
                    subject: Subject[Any] = Subject()
                    converting.disposable = subject.pipe(convert()).subscribe(observer)
                    target.append(subject)
            return target[0]

        def on_next(item: Any) -> None:
            sink(item).on_next(item)

        def on_error(error: Exception) -> None:
            (target[0] if target else observer).on_error(error)

        def on_completed() -> None:
            (target[0] if target else observer).on_completed()

        upstream = source.subscribe(on_next, on_error, on_completed, scheduler=scheduler)
        return CompositeDisposable(upstream, converting)

    return Observable(subscribe)
