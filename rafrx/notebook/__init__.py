"""Jupyter display: rich HTML for rafrx values, a live view of a stream and a timeline.

Everything model-made is escaped: a ``<script>`` in a reply stays text.

* :func:`content_html`, :func:`result_html`, :func:`message_html`,
  :func:`response_html` back the ``_repr_html_`` of the model classes.
* :func:`live` renders a stream as it arrives by updating one display
  handle (text and reasoning growing, a card per tool call, results, usage),
  at most every ``interval`` seconds plus a final render; ``await live(obs)``
  gives the :class:`~rafrx.AgentResponse`. Without IPython it prints the
  final render as text.
* :func:`timeline` draws a recorded stream (see :mod:`rafrx.recorder`) as
  an SVG marble diagram: one lane per content kind and per tool call.

The modules, one job each: ``_html`` (HTML of the model values), ``_state``
(a stream folded into a live view's state), ``_render`` (that state as HTML
and text), ``_display`` (IPython or plain-text display), ``_results``
(updates or results as results), ``_live`` (the live view), ``_order`` (a
message's reasoning, text and calls in the order they streamed, for the final
view), ``_marks`` and ``_timeline`` (the timeline), ``_format`` (formatters
shared with :mod:`rafrx.terminal`).

Example:
    >>> from rafrx.content import TextContent
    >>> content_html(TextContent("<b>hi</b>"))
    '<span class="rafrx-text">&lt;b&gt;hi&lt;/b&gt;</span>'
"""

from __future__ import annotations

from rafrx.notebook._display import Display, DisplayHandle, text_display
from rafrx.notebook._html import content_html, message_html, response_html, result_html
from rafrx.notebook._live import LiveView, live
from rafrx.notebook._render import LiveSnapshot, card_html, live_html, live_text
from rafrx.notebook._results import as_results
from rafrx.notebook._state import ArgumentProgress, LiveState, ToolCard
from rafrx.notebook._timeline import Timeline, timeline

__all__ = [
    "ArgumentProgress",
    "Display",
    "DisplayHandle",
    "LiveSnapshot",
    "LiveState",
    "LiveView",
    "Timeline",
    "ToolCard",
    "as_results",
    "card_html",
    "content_html",
    "live",
    "live_html",
    "live_text",
    "message_html",
    "response_html",
    "result_html",
    "text_display",
    "timeline",
]
