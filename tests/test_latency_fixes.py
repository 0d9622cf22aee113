"""Regression tests of the bugs a "latency and slow consumers" hunt found (the passing
pins are in ``test_latency_hunt.py``).

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from reactivex.subject import Subject

import rafrx
from rafrx import updates as u
from rafrx.notebook import LiveSnapshot, live
from rafrx.sources.clients import OpenAIChatClient, Timeouts
from rafrx.testing import Reply, render

pytestmark = pytest.mark.asyncio


class _RecordingDisplay:
    """A display handle that keeps every snapshot it is given."""

    def __init__(self) -> None:
        self.snapshots: list[LiveSnapshot] = []

    def __call__(self, obj: LiveSnapshot, display_id: bool = True) -> _RecordingDisplay:
        self.snapshots.append(obj)
        return self

    def update(self, obj: LiveSnapshot, **_: Any) -> None:
        self.snapshots.append(obj)


async def _until(predicate: Callable[[], bool], timeout: float = 3.0) -> bool:
    """Poll ``predicate`` on the loop; whether it became true within ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.005)
    except TimeoutError:
        return False
    return True


async def test_live_view_shows_the_latest_state_when_results_come_from_a_worker_thread() -> None:
    """A live view fed from another thread drops its trailing render.

    User: in a notebook cell (a running loop), ``live(stream)`` where the stream
    emits on a worker thread, e.g. ``client_stream.pipe(rx.observe_on(pool))``,
    ``replay(..., pacing=True).subscribe(..., scheduler=NewThreadScheduler())``,
    or a turn run on a server thread. The model sends "first " then, within the
    throttle interval, "second", then pauses (thinking, a slow tool).

    What happens: "first " renders at once; "second" falls inside the interval,
    and ``LiveView._render_soon`` (rafrx/notebook/_live.py) tries to schedule the
    trailing render with ``asyncio.get_running_loop()``, which raises on the worker
    thread, so it returns without scheduling anything. The view shows "first "
    until the next item or the end of the stream, however long that takes.

    What should happen: as when the same items come on the loop, the view shows
    "second" about one interval later. ``live()``'s docstring: it "updates the
    handle at most every ``interval`` seconds, plus a final render"; a throttle
    delays, it never withholds the latest state for an unbounded time. The view
    already expects streams that end on another thread (``_finish`` wakes waiters
    with ``call_on(waiter.get_loop(), ...)``).
    """
    display = _RecordingDisplay()
    subject: Subject[Any] = Subject()
    view = live(subject, display=display, interval=0.02)

    def emit() -> None:
        subject.on_next(u.TextDelta("first "))
        subject.on_next(u.TextDelta("second"))

    worker = threading.Thread(target=emit)
    worker.start()
    worker.join()
    try:
        shown = await _until(lambda: "first second" in display.snapshots[-1].text)
        assert shown, f"the view still shows {display.snapshots[-1].text!r}"
    finally:
        view.dispose()


# ---------------------------------------------------------------- first-byte timeout


class _ThreadedServer:
    """An aiohttp server on its own thread and loop: it answers while the client's loop
    is blocked. Answers every POST 0.3 s after it came with ``body`` as an event stream."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requested = threading.Event()
        self.headers_sent = threading.Event()
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        loop = self._loop = asyncio.new_event_loop()

        async def handle(request: web.Request) -> web.StreamResponse:
            await request.read()
            self.requested.set()
            await asyncio.sleep(0.3)  # the headers come while the client's loop is blocked
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            self.headers_sent.set()
            await response.write(self.body)
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", handle)
        self._runner = web.AppRunner(app)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def __enter__(self) -> _ThreadedServer:
        self._ready = threading.Event()
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def threaded_server() -> Iterator[_ThreadedServer]:
    with _ThreadedServer(render(Reply(text="hello"), "openai-chat")) as server:
        yield server


async def test_headers_that_came_in_time_are_no_connect_timeout_when_the_loop_was_busy(
    threaded_server: _ThreadedServer,
) -> None:
    """A busy loop turns response headers that came in time into a ConnectTimeout.

    User: a UI backend runs several streams on one loop. One subscriber does slow
    synchronous work (a big render, a blocking log write) that holds the loop for
    longer than ``Timeouts.first_byte``, just after another stream sent its request.
    That request's server answers 0.3 s later: the headers and the whole body are in
    the socket long before the deadline.

    What happens: ``_StreamCall._send`` (rafrx/sources/_http.py, the
    ``asyncio.timeout(timeouts.first_byte)`` around ``session.post``) expires when the
    loop wakes: the timer callback runs before the task that would read the headers
    already received, and the stream fails with ``ConnectTimeout: no response ...
    within ... first byte (1.0 s)``, a false statement, after which an agent turn is
    lost (and a RetryPolicy would send the request again).

    What should happen: the stream delivers "hello" and completes. The body's own
    idle timeout already handles exactly this case (rafrx/sources/_idle.py,
    ``IdleTimer``: "When the event loop was busy elsewhere (another task's long
    synchronous work), the timer may fire before the waiting task saw the bytes that
    came meanwhile: bytes that came since the wait began mean the stream is not
    silent"); ``Timeouts.first_byte`` is documented as "Seconds from sending the
    request to the response headers", which here took milliseconds.
    """
    client = OpenAIChatClient(
        threaded_server.url, api_key="k", model="m", timeouts=Timeouts(first_byte=1.0)
    )
    got: list[Any] = []
    done = asyncio.Event()
    client.stream([rafrx.ChatMessage.user("hi")]).subscribe(
        got.append, lambda e: (got.append(e), done.set()), done.set
    )
    try:
        assert await _until(threaded_server.requested.is_set, timeout=10)
        time.sleep(2.0)  # the scenario: another subscriber blocks the loop (not an assertion)
        async with asyncio.timeout(10):
            await done.wait()
        assert threaded_server.headers_sent.is_set()
        errors = [x for x in got if isinstance(x, Exception)]
        assert not errors, errors
        assert [x.delta for x in got if isinstance(x, u.TextDelta)] == ["hello"]
    finally:
        await client.aclose()
