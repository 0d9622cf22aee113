"""A stream rendered as it arrives into one display handle: :func:`live` and :class:`LiveView`.

The view folds each result chunk into a :class:`~rafrx.notebook.LiveState`,
updates the handle at most every ``interval`` seconds plus a final render,
and aggregates the :class:`~rafrx.AgentResponse` that ``await view`` gives.

Example:
    >>> import reactivex
    >>> from rafrx import updates as u
    >>> from rafrx.notebook import text_display
    >>> view = live(reactivex.of(u.TextDelta("Hi")), display=text_display())
    Hi
    status: done
    >>> view.done, view.response.text, view.state.text
    (True, 'Hi', 'Hi')
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from reactivex import Observable, abc

from rafrx._call import call_on
from rafrx._cycles import detached
from rafrx._later import Later, call_later
from rafrx.errors import RafrxError, error_text
from rafrx.notebook._display import Display, DisplayHandle, default_display
from rafrx.notebook._render import LiveSnapshot, live_html, live_text
from rafrx.notebook._results import as_results
from rafrx.notebook._state import LiveState
from rafrx.operators._aggregate import ResponseAggregator
from rafrx.operators._inputs import check_stream
from rafrx.response import AgentResponseResult

if TYPE_CHECKING:
    from rafrx.response import AgentResponse

__all__ = ["LiveView", "live"]


class LiveView:
    """A stream being rendered into one display handle; await it for the response.

    Created by :func:`live`. ``state`` is the folded stream, ``renders`` how
    many times the handle was updated.
    """

    def __init__(
        self,
        observable: Observable[Any],
        *,
        display: Display | None = None,
        interval: float = 0.05,
        agent_id: str | None = None,
    ) -> None:
        check_stream(observable, "live()")
        self.state = LiveState()
        self.renders = 0
        self._interval = interval
        self._aggregator = ResponseAggregator(agent_id)
        self._last_render = -math.inf
        self._timer: Later | None = None
        # A stream may emit on a worker thread while a timer renders on another: one at a time.
        self._lock = threading.RLock()
        self._response: AgentResponse | None = None
        self._error: Exception | None = None
        self._done = False
        self._waiters: list[asyncio.Future[None]] = []
        show = display or default_display()
        self._handle: DisplayHandle = show(self._snapshot(), display_id=True)
        self._subscription: abc.DisposableBase | None = None
        subscription = as_results(observable).subscribe(
            self._on_next, self._on_error, self._on_completed
        )
        if self._done:
            subscription.dispose()
        else:
            self._subscription = subscription

    # -- results

    @property
    def done(self) -> bool:
        """Whether the stream has ended (completed, failed or disposed)."""
        return self._done

    @property
    def response(self) -> AgentResponse:
        """The aggregated response.

        Raises:
            RuntimeError: the stream is still running.
            RafrxError: the stream failed (``.partial`` holds what arrived).
        """
        if self._error is not None:
            raise detached(self._error)  # (the kept one would gather each raise's frames)
        if self._response is None:
            raise RuntimeError("the stream is still running: await the view first")
        return self._response

    def __await__(self) -> Generator[Any, None, AgentResponse]:
        return self._wait().__await__()

    async def _wait(self) -> AgentResponse:
        if not self._done:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            try:
                await future
            except asyncio.CancelledError:
                self.dispose()
                raise
        return self.response

    def dispose(self) -> None:
        """Stop the stream (aborting its request); the view shows what arrived."""
        if self._subscription is not None:
            self._subscription.dispose()
            self._subscription = None
        with self._lock:
            if not self._done:
                self.state.end("stopped")
                self._finish(self._aggregator.response(interrupted=True), None)

    def _ipython_display_(self) -> None:
        """Nothing: the live handle already shows the stream."""

    def __repr__(self) -> str:
        return f"<LiveView {self.state.status}, {self.state.items} results>"

    # -- observer

    def _on_next(self, result: AgentResponseResult) -> None:
        with self._lock:
            if self._done:
                return
            self._aggregator.step(result)
            self.state.add(result)
            self._render_soon()

    def _on_error(self, error: Exception) -> None:
        with self._lock:
            if self._done:
                return
            self._aggregator.fail(error)
            self.state.end("failed")
            self.state.finish_reason = self._partial(error).finish_reason  # as `await view`
            if not self.state.errors:
                self.state.errors.append(f"{type(error).__name__}: {error_text(error)}")
            self._finish(None, error)

    def _on_completed(self) -> None:
        with self._lock:
            if self._done:
                return
            self.state.end("done")
            self._finish(self._aggregator.response(), None)

    def _partial(self, error: Exception) -> AgentResponse:
        """The turn that ``error`` interrupted, as the error carries it (or would)."""
        partial = error.partial if isinstance(error, RafrxError) else None
        return partial if partial is not None else self._aggregator.failed(error)

    def _finish(self, response: AgentResponse | None, error: Exception | None) -> None:
        self._done = True
        self._subscription = None  # it holds this view's callbacks: no cycle
        self._response, self._error = response, error
        try:
            self._render(final=True)
        finally:  # a display that fails must not leave `await view` waiting forever
            for waiter in self._waiters:  # on their loop's thread: the stream may end on another
                call_on(waiter.get_loop(), functools.partial(_wake, waiter))
            self._waiters.clear()

    # -- rendering

    def _snapshot(self, final: bool = False) -> LiveSnapshot:
        return LiveSnapshot(live_html(self.state), live_text(self.state), final)

    def _render(self, final: bool = False) -> None:
        if self._timer is not None:  # this render shows what the timer would have
            self._timer.cancel()
            self._timer = None
        self.renders += 1
        try:
            self._handle.update(self._snapshot(final))
        finally:  # stamped after the render: a slow render must not make every update render
            self._last_render = time.monotonic()

    def _render_soon(self) -> None:
        wait = self._interval - (time.monotonic() - self._last_render)
        if wait <= 0:
            self._render()
            return
        if self._timer is None:
            self._timer = call_later(wait, self._on_timer)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            if not self._done:
                self._render()


def live(
    observable: Observable[Any],
    *,
    display: Display | None = None,
    interval: float = 0.05,
    agent_id: str | None = None,
) -> LiveView:
    """Render a stream as it arrives in one display handle; ``await`` it for the response.

    ``observable`` emits :class:`~rafrx.AgentResponseResult` chunks (from
    ``convert()`` or ``Agent.run``) or raw updates (converted here). The
    view subscribes at once and updates the handle at most every
    ``interval`` seconds, plus a final render when the stream ends.

    Args:
        observable: the stream to show.
        display: ``display(obj, display_id=True) -> handle``; by default
            IPython's, or (outside IPython) a text display that prints the
            final render.
        interval: the shortest time between two renders, in seconds.
        agent_id: passed on to the aggregated response.

    Example:
        In a notebook cell::

            response = await live(client.stream([ChatMessage.user("Hi")]))
    """
    return LiveView(observable, display=display, interval=interval, agent_id=agent_id)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
