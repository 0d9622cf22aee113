"""Regression tests for the bugs a close, line-by-line reading of rafrx's code found
(views side; the passing pins of the same reading are in test_close_reading_views.py).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import os
import subprocess
import sys
import traceback
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import reactivex
from reactivex import operators as rx
from reactivex.disposable import Disposable

from rafrx import Agent, ChatMessage, FinishReason
from rafrx import content as c
from rafrx import updates as u
from rafrx.errors import RafrxError, StreamInterrupted
from rafrx.notebook import LiveState, content_html, live, text_display
from rafrx.response import AgentResponseResult
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import Fault, LLMServer, Reply

REPO = Path(__file__).resolve().parents[1]


class _Display:
    """A display that keeps the last snapshot (a stand-in for IPython's)."""

    def __init__(self) -> None:
        self.last: Any = None

    def __call__(self, obj: Any, **kwargs: Any) -> _Display:
        self.last = obj
        return self

    def update(self, obj: Any, **kwargs: Any) -> None:
        self.last = obj


# ---------------------------------------------------------------- 1. let_go closes coroutines


class _QueuedClient:
    """A user's client: every request goes through one worker task (a rate limiter, a
    single connection...). A request that fails is reported to its subscriber and the
    worker goes on with the next one."""

    def __init__(self, inner: OpenAIChatClient) -> None:
        self.inner = inner
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.worker = asyncio.create_task(self._work())

    def stream(self, messages: Sequence[ChatMessage], tools: Any = None) -> Any:
        def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
            self.queue.put_nowait((messages, tools, observer))
            return Disposable()

        return reactivex.Observable(subscribe)

    async def _work(self) -> None:
        while True:
            messages, tools, observer = await self.queue.get()
            try:
                updates = await self.inner.stream(messages, tools).pipe(rx.to_list())
            except RafrxError as exc:
                observer.on_error(exc)  # this request failed: the worker goes on
                continue
            for update in updates:
                observer.on_next(update)
            observer.on_completed()


def test_a_failed_agent_turn_leaves_the_coroutine_that_caught_its_error_running() -> None:
    """What the user does: an Agent over their own client (the ChatClient protocol), whose
    requests go through one long-lived worker coroutine that catches a request's error,
    hands it to the subscriber (``observer.on_error``) and goes on with the next request.

    What happens: the first turn fails (HTTP 400) and the Agent calls ``let_go(error)``
    (agent.py, ``_Turn.run``). ``let_go`` runs ``traceback.clear_frames`` over the error's
    traceback, which holds the worker's frame (the one that caught it), suspended at
    ``await queue.get()``. ``frame.clear()`` on a suspended coroutine's frame *finalizes the
    coroutine* (Python docs, ``frame.clear``: "if the frame belonged to a generator, the
    generator is finalized"): the worker gets ``GeneratorExit``, its task dies with
    ``RuntimeError: cannot reuse already awaited coroutine``, and every later turn waits
    forever.

    What should happen: the worker goes on; the second turn gets its answer. ``let_go``'s
    docstring promises only to clear the locals of the frames the error "went through",
    and to leave the frames still running alone.
    """

    async def main() -> tuple[bool, str | None]:
        async with LLMServer() as server:
            server.enqueue(Fault.status(400), Reply(text="second answer"))
            inner = OpenAIChatClient(server.url, model="m")
            client = _QueuedClient(inner)
            agent = Agent(client)
            with contextlib.suppress(RafrxError):
                await agent.run("first")
            try:
                answer: str | None = (await asyncio.wait_for(agent.send("second"), 5)).text
            except TimeoutError:
                answer = None
            worker_alive = not client.worker.done()
            if client.worker.done() and not client.worker.cancelled():
                client.worker.exception()  # (retrieved: no "never retrieved" log)
            client.worker.cancel()
            await inner.aclose()
            return worker_alive, answer

    worker_alive, answer = asyncio.run(main())
    assert worker_alive, "the worker coroutine was closed by let_go's clear_frames"
    assert answer == "second answer"


# ---------------------------------------------------------------- 2. view.response re-raises


class _Big:
    """A caller's local the error must not keep."""


def test_reading_a_failed_views_response_does_not_grow_its_error() -> None:
    """What the user does: ``view = live(stream)`` in a notebook; the stream fails; they
    look at ``view.response`` in a few cells (or ``await view`` again) to see the error.

    What happens: ``LiveView.response`` (notebook/_live.py:96, ``raise self._error``) raises
    the one error object the view keeps, each time. Raising an exception that already has a
    traceback appends the new frames to it: after five reads the error's traceback has five
    copies of the reading frames, and each keeps its frame's locals alive (here a ``_Big``
    the caller held, still alive after the caller returned) for as long as the view lives.

    What should happen: each read raises the error with only that read's frames (or a
    ``detached`` copy, as ``UpdateDecoder`` and ``SSEDecoder`` do for the errors they keep:
    see _cycles.detached: "raising the kept one would give it a traceback holding the
    raising frame"). README: "An error you keep holds its message and .partial, not the
    stream ...".
    """
    source = reactivex.concat(
        reactivex.of(u.TextDelta("a")),
        reactivex.defer(lambda _: reactivex.throw(StreamInterrupted("cut"))),
    )
    view = live(source, display=_Display())

    def look(big: _Big) -> None:
        view.response  # noqa: B018

    sizes = []
    kept = []
    for _ in range(5):
        big = _Big()
        kept.append(weakref.ref(big))
        try:
            look(big)
        except StreamInterrupted as err:
            sizes.append(len(traceback.extract_tb(err.__traceback__)))
        del big
    gc.collect()
    assert sizes == [sizes[0]] * 5, f"the kept error's traceback grows: {sizes}"
    assert sum(ref() is not None for ref in kept) <= 1, "old callers' locals are kept alive"


# ---------------------------------------------------------------- 3. text_display and controls


def test_live_outside_jupyter_makes_carriage_returns_and_c1_controls_inert() -> None:
    """What the user does: ``await live(client.stream(...))`` in a script or a terminal
    IPython (``default_display()`` picks ``text_display()``: "A display for plain
    terminals/scripts"); the final render is printed to the terminal.

    What happens: model text goes through ``showable`` only (notebook/_format.py), which
    replaces C0 controls but not ``\\r`` (nor DEL and the C1 controls such as ``\\x9b``, the
    8-bit CSI). ``_TextHandle.update`` (notebook/_display.py:40) prints it as it is: a
    reply "rm -rf ~ done\\rAll fine, nothing changed." shows on the terminal as
    "All fine, nothing changed." only.

    What should happen: the same as ``rafrx.terminal.inert`` does for the CLI (terminal.py:
    "an escape sequence or a carriage return would drive the terminal (clear it, retitle
    it, hide text)"): the controls printed as U+FFFD. rafrx.notebook: "Everything
    model-made is escaped".
    """
    out = io.StringIO()
    text = "rm -rf ~ done\rAll fine, nothing changed. \x9b2J\x7f"
    live(reactivex.of(u.TextDelta(text), u.Finish(FinishReason.STOP)), display=text_display(out))
    printed = out.getvalue()
    assert "\r" not in printed
    assert "\x9b" not in printed
    assert "\x7f" not in printed


# ---------------------------------------------------------------- 4. LiveState's repr


def test_live_state_repr_and_eq_show_the_text_received() -> None:
    """What the user does: looks at ``view.state`` (a :class:`LiveState`, public in
    rafrx.notebook) in a notebook, or compares two states, while text streams.

    What happens: ``LiveState`` keeps the deltas of the last block in ``_parts`` and joins
    them only when ``blocks`` is read (notebook/_state.py:160-174); the attrs-generated
    ``__repr__`` and ``__eq__`` read the ``_blocks`` field directly. After "Hel" + "lo" the
    repr says ``_blocks=[['text', 'Hel']]``: the last deltas are missing. Two states with
    the same blocks compare unequal, depending on whether someone read ``.blocks`` yet.

    What should happen: the repr shows ``Hello`` (the class docstring's own example says
    ``state.blocks == [['text', 'Hello']]``), and equality does not depend on a read.
    """
    a = LiveState()
    a.add(AgentResponseResult(contents=[c.TextContent("Hel")]))
    a.add(AgentResponseResult(contents=[c.TextContent("lo")]))
    b = LiveState()
    b.add(AgentResponseResult(contents=[c.TextContent("Hello")]))
    b.add(AgentResponseResult(contents=[c.TextContent("")]))  # (same item count)
    assert "Hello" in repr(a), repr(a)
    assert a == b


# ---------------------------------------------------------------- 5. card error not clipped


def test_live_card_clips_a_tool_error_as_every_other_html_view() -> None:
    """What the user does: ``live(agent.run(...))`` in Jupyter; a tool fails with a long
    message (a traceback, a server's body: up to 8 KiB after RafrxError's clip, unbounded
    for a provider's own tool).

    What happens: ``card_html`` (notebook/_render.py:205) shows ``escape(card.error)`` whole,
    on every render (every 50 ms while the turn goes on), while it clips the result to
    ``PREVIEW_CHARS``; ``content_html`` of the same ``ToolCalledContent`` error and
    ``message_html`` of the tool message both clip it (``clip_html``).

    What should happen: the card clips the error to ``PREVIEW_CHARS`` (2000 characters,
    "The longest tool result or argument value shown in HTML"), saying how much was cut.
    """
    error = "E" * 8000
    view = live(
        reactivex.of(
            AgentResponseResult(
                contents=[
                    c.ToolCallStartContent("c1", "f"),
                    c.ToolCallingContent("c1", "f", {}, "{}"),
                    c.ToolCalledContent("c1", error=error),
                ]
            )
        ),
        display=(display := _Display()),
    )
    assert view.done
    whole = len(content_html(c.ToolCalledContent("c1", error=error)))
    assert whole < 2100
    assert display.last.html.count("E") <= 2000, "the card shows the whole error"


# ---------------------------------------------------------------- 6. demo --record DIR


def test_demo_record_to_a_directory_is_a_bad_argument(tmp_path: Path) -> None:
    """What the user does: ``rafrx demo --record out`` where ``out`` is a directory.

    What happens: the demo runs, then ``open()`` fails: "rafrx demo: error:
    IsADirectoryError: [Errno 21] Is a directory: 'out' (set RAFRX_DEBUG=1 for the
    traceback)", exit status 1: the message for an internal error. __main__.py:233 checks
    only that the parent directory exists.

    What should happen: as for a missing directory ("cannot record to FILE: no such
    directory"), a one-line message without the debugging hint and exit status 2: the
    module docstring says "Bad arguments, missing files and unreachable endpoints give a
    one-line message and exit status 2".
    """
    target = tmp_path / "out"
    target.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    env.pop("RAFRX_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "rafrx", "demo", "--plain", "--speed", "50", "--record", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "RAFRX_DEBUG" not in done.stderr
