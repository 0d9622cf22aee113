"""Calling back later from wherever a stream emits: on its event loop, or on a thread.

Throttled views (the notebook's live view, the terminal's progress line) draw a
skipped update once their interval is over. A stream emits on the running event
loop, or on a worker thread with no loop (``in_thread`` servers, sync replays):
:func:`call_later` takes the loop's timer when there is one, else a daemon timer
thread. Either has ``cancel()``.

Example:
    >>> import threading
    >>> fired = threading.Event()
    >>> timer = call_later(0.01, fired.set)  # no loop running here: a timer thread
    >>> fired.wait(5)
    True
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

__all__ = ["Later", "call_later"]

Later = asyncio.TimerHandle | threading.Timer
"""A pending :func:`call_later`: ``cancel()`` it to call nothing."""


def call_later(wait: float, callback: Callable[[], object]) -> Later:
    """Call ``callback`` in ``wait`` seconds: on the running event loop, or (called off
    any loop, from a worker thread) on a daemon timer thread."""
    try:
        return asyncio.get_running_loop().call_later(wait, callback)
    except RuntimeError:  # emitted off any loop (a worker thread): a thread's timer
        timer = threading.Timer(wait, callback)
        timer.daemon = True
        timer.start()
        return timer
