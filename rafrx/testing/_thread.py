"""Run an :class:`~rafrx.testing.LLMServer` on its own loop in a daemon thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rafrx.testing._server import LLMServer

__all__ = ["ServerThread"]

T = TypeVar("T")

_START_TIMEOUT = 10.0


class ServerThread:
    """A server running in a background thread; a context manager giving the server.

    Used by sync code (the CLI, notebooks, benchmarks). ``enqueue`` and
    ``script`` are thread-safe; use :meth:`run` for the server's coroutines.
    """

    def __init__(self, server: LLMServer) -> None:
        self.server = server
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Lock()  # one stop() at a time: the others wait for it

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop."""
        if self._loop is None:
            raise RuntimeError("the server thread is not running")
        return self._loop

    def start(self) -> LLMServer:
        """Start the thread and the server; returns the started server."""
        if self._thread is not None:
            raise RuntimeError("the server thread is already running")
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._main, args=(loop, started), name="rafrx-llm-server", daemon=True
        )
        self._loop, self._thread = loop, thread
        thread.start()
        try:
            started.result(_START_TIMEOUT)
        except BaseException:
            thread.join(_START_TIMEOUT)
            self._loop = self._thread = None
            raise
        return self.server

    def _main(
        self, loop: asyncio.AbstractEventLoop, started: concurrent.futures.Future[None]
    ) -> None:
        asyncio.set_event_loop(loop)
        # Closing the runner cancels the tasks left over, shuts down async
        # generators and the default executor, then closes the loop.
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            try:
                runner.run(self.server.start())
            except BaseException as exc:
                started.set_exception(exc)
                return
            started.set_result(None)
            loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the server's loop and return its result.

        Example: ``thread.run(thread.server.wait_connections_closed())``.

        Raises:
            TimeoutError: It did not finish within ``timeout`` seconds; it is
                cancelled (nothing of it goes on running on the server's loop).
            RuntimeError: The thread is not running (``coro`` is closed).
        """
        if self._loop is None:
            coro.close()  # never to run: no "never awaited" warning
            raise RuntimeError("the server thread is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            if future.done():  # the coroutine's own TimeoutError
                raise
            future.cancel()
            name = getattr(coro, "__qualname__", "the coroutine")
            raise TimeoutError(f"{name} did not finish within {timeout} s: cancelled") from None

    def stop(self) -> None:
        """Close the server, stop the loop and join the thread.

        Tasks still running on the loop (e.g. from :meth:`run`) are cancelled.
        Safe to call from several threads at once: each returns once it is stopped.

        Raises:
            AssertionError: A script's assertion failed (see
                :meth:`LLMServer.close <rafrx.testing.LLMServer.close>`).
        """
        with self._stopping:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None:
                return
            try:
                close = asyncio.run_coroutine_threadsafe(self.server.close(), loop)
                close.result(_START_TIMEOUT)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(_START_TIMEOUT)
                self._loop = self._thread = None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        except AssertionError:
            if exc is None or isinstance(exc, Exception):  # (not over a Ctrl-C)
                raise
