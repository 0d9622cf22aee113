"""Shared fixtures: a live local LLM server, a check that no asyncio task leaked, what
reaches the loop's exception handler, a thread pool scheduler, and a throttled view's
time made the test's own (:class:`StreamTime`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
import pytest_asyncio
from reactivex.scheduler import ThreadPoolScheduler

from rafrx.testing import LLMServer

#: Seconds tasks started by a test get to finish after it before they count as leaked.
TASK_GRACE = 1.0


@pytest_asyncio.fixture
async def no_task_leak() -> AsyncIterator[None]:
    """Fail the test if it leaves asyncio tasks running (after a short grace)."""
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    started = {t for t in asyncio.all_tasks() - before if t is not current and not t.done()}
    if started:
        await asyncio.wait(started, timeout=TASK_GRACE)
    leaked = [t for t in started if not t.done()]
    assert not leaked, f"asyncio tasks still running after the test: {leaked}"


@pytest_asyncio.fixture
async def llm_server(no_task_leak: None) -> AsyncIterator[LLMServer]:
    """A started :class:`~rafrx.testing.LLMServer` on 127.0.0.1, closed after the test
    (then no task may be left running)."""
    async with LLMServer() as server:
        yield server


@pytest_asyncio.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the running loop's exception handler during the test."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        yield seen
    finally:
        loop.set_exception_handler(None)


@pytest.fixture
def pool() -> Iterator[ThreadPoolScheduler]:
    """A reactivex thread pool of 4 workers, shut down (waiting for them) after the test."""
    scheduler = ThreadPoolScheduler(4)
    yield scheduler
    scheduler.executor.shutdown(wait=True)


class FakeClock:
    """Stands in for the ``time`` module a throttled view reads (``monotonic()`` only):
    its time is ``now``, which stands still until the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class HeldTimer:
    """A timer :class:`HeldTimers` keeps: ``callback`` runs only when the test fires it."""

    def __init__(self, wait: float, callback: Callable[[], object]) -> None:
        self.wait = wait
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class HeldTimers:
    """Stands in for a throttled view's ``call_later``: the timers are kept, never fired
    on the wall clock (a slow machine, a long gc pass would fire them between two items,
    at no point of the stream's own time); :meth:`fire` runs them when the test says."""

    def __init__(self) -> None:
        self.pending: list[HeldTimer] = []

    def __call__(self, wait: float, callback: Callable[[], object]) -> HeldTimer:
        timer = HeldTimer(wait, callback)
        self.pending.append(timer)
        return timer

    def fire(self) -> None:
        """Run the callbacks of the timers not cancelled, as if their wait were over."""
        due, self.pending = self.pending, []
        for timer in due:
            if not timer.cancelled:
                timer.callback()


class StreamTime:
    """A throttled view's time made the test's own: ``clock`` moves only when the test
    moves it, and (unless real timers are asked for) ``timers`` fire only when it fires them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.clock = FakeClock()
        self.timers = HeldTimers()
        self._monkeypatch = monkeypatch

    def on(self, module: ModuleType, *, hold_timers: bool = True) -> StreamTime:
        """Give ``module`` (``rafrx.notebook._live``, ``rafrx.terminal``) this clock, and
        these held timers in place of ``call_later`` if ``hold_timers``."""
        self._monkeypatch.setattr(module, "time", self.clock)
        if hold_timers:
            self._monkeypatch.setattr(module, "call_later", self.timers)
        return self


@pytest.fixture
def stream_time(monkeypatch: pytest.MonkeyPatch) -> StreamTime:
    """A :class:`StreamTime`: ``stream_time.on(module)`` gives a throttled view the test's
    clock and timers, so how many times it renders depends on no machine's speed."""
    return StreamTime(monkeypatch)
