"""Where a live view renders: IPython's display, or a plain-text stand-in outside IPython.

Example:
    >>> from rafrx.notebook import LiveSnapshot
    >>> handle = text_display()(LiveSnapshot("<b>Hi</b>", "Hi"), display_id=True)
    >>> handle.update(LiveSnapshot("<b>Hi</b>", "Hi", final=True))
    Hi
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from rafrx.notebook._render import LiveSnapshot
from rafrx.terminal import inert

__all__ = ["Display", "DisplayHandle", "default_display", "text_display"]


class DisplayHandle(Protocol):
    """What :func:`live` needs from a display handle (IPython's ``DisplayHandle``)."""

    def update(self, obj: Any, **kwargs: Any) -> Any:
        """Replace what the handle shows."""
        ...


Display = Callable[..., Any]
"""A function like ``IPython.display.display``: ``display(obj, display_id=True) -> handle``."""


class _TextHandle:
    """Without IPython: print only the final render, as text."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def update(self, obj: Any, **kwargs: Any) -> None:
        if isinstance(obj, LiveSnapshot) and obj.final:
            print(inert(obj.text), file=self._stream or sys.stdout)


def text_display(stream: TextIO | None = None) -> Display:
    """A display for plain terminals/scripts: prints the final render once.

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u, FinishReason
        >>> from rafrx.notebook import live
        >>> view = live(reactivex.from_iterable([u.TextDelta("Hi"), u.Finish(FinishReason.STOP)]),
        ...             display=text_display())
        Hi
        status: done · finish: stop
        >>> view.response.text
        'Hi'
    """

    def display(obj: Any, **kwargs: Any) -> _TextHandle:
        return _TextHandle(stream)

    return display


def default_display() -> Display:
    """IPython's ``display`` in a Jupyter kernel, else :func:`text_display` on stdout.

    Terminal IPython cannot update an output in place: there, as in a script,
    only the final render is printed.
    """
    try:
        from IPython.core.getipython import get_ipython
        from IPython.display import display
    except ImportError:
        return text_display()
    shell = get_ipython()  # type: ignore[no-untyped-call, unused-ignore]  # typed in IPython 9
    if shell is None or getattr(shell, "kernel", None) is None:  # no kernel: a terminal
        return text_display()
    return display
