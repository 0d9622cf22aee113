"""Shared fixtures: a live local LLM server, a check that no asyncio task leaked, what
reaches the loop's exception handler, and a thread pool scheduler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
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
