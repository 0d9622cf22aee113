"""Rendering a :class:`~rafrx.notebook.LiveState` as HTML and as plain text.

Every model-made string is escaped in the HTML. A :class:`LiveSnapshot`
carries one render (both forms) to a display handle.

Example:
    >>> from rafrx import content as c
    >>> from rafrx.response import AgentResponseResult
    >>> from rafrx.notebook import LiveState
    >>> state = LiveState()
    >>> state.add(AgentResponseResult(contents=[c.TextContent("<hi>")]))
    >>> print(live_text(state))
    <hi>
    status: streaming
    >>> "&lt;hi&gt;" in live_html(state)
    True
"""

from __future__ import annotations

import attrs

from rafrx.notebook._format import (
    LONG_ARG_BYTES,
    clip,
    clip_html,
    escape,
    human_size,
    json_html,
    json_preview,
    one_line,
    showable,
    usage_line,
)
from rafrx.notebook._state import ArgumentProgress, LiveState, ToolCard

__all__ = ["LiveSnapshot", "card_html", "live_html", "live_text"]

_BOX = "border:1px solid #ccc;border-radius:6px;padding:4px 8px;margin:4px 0"
_STATUS_COLORS = {
    "done": "#2a2",
    "failed": "#c00",
    "invalid arguments": "#c00",
    "cut short": "#c00",
    "never run": "#c00",
    "approved": "#2a2",
    "denied": "#c00",
}


def _meter_html(bar: ArgumentProgress) -> str:
    """A full bar and the size; an indeterminate bar (total unknown) while it streams;
    no bar once its call ended before it did."""
    size = human_size(bar.received)
    if bar.done:
        return f'<progress max="1" value="1"></progress> {size}'
    return f"<progress></progress> {size}" if bar.streaming else f"{size} (incomplete)"


def _argument_html(name: str, card: ToolCard) -> str:
    bar = card.progress.get(name)
    label = f"<td><b>{escape(name)}</b></td>"
    if bar is not None and (not bar.done or bar.received >= LONG_ARG_BYTES):
        tail = escape(bar.tail)
        return (
            f"<tr>{label}<td>{_meter_html(bar)}"
            f'<div style="color:#666;white-space:pre-wrap;font-size:90%">…{tail}</div></td></tr>'
        )
    shown = json_html(card.arguments[name]) if name in card.arguments else "…"
    return f"<tr>{label}<td><code>{shown}</code></td></tr>"


def card_html(card: ToolCard) -> str:
    """One tool call as an HTML card (arguments, progress bars, result)."""
    names = list(card.arguments) + [n for n in card.progress if n not in card.arguments]
    rows = "".join(_argument_html(name, card) for name in names)
    color = _STATUS_COLORS.get(card.status, "#888")
    parts = [
        f'<div class="rafrx-card" style="{_BOX}">',
        f"<div>🔧 <b>{escape(card.name)}</b> <code>{escape(card.call_id)}</code> ",
        f'<small style="color:{color}">{escape(card.status)}</small></div>',
        f"<table>{rows}</table>" if rows else "",
    ]
    if card.argument_error:
        parts.append(f'<div style="color:#c00">{escape(card.argument_error)}</div>')
    if card.error is not None:
        parts.append(f'<div style="color:#c00">✗ {clip_html(card.error)}</div>')
    elif card.result is not None:
        parts.append(
            f'<div>→ <code style="white-space:pre-wrap">{clip_html(card.result)}</code></div>'
        )
    parts.append("</div>")
    return "".join(parts)


def _footer(state: LiveState) -> str:
    parts = [f"status: {state.status}"]
    if state.model:
        parts.append(f"model: {state.model}")
    usage = state.usage
    if usage is not None:
        parts.append(usage_line(usage))
    if state.finish_reason is not None:
        parts.append(f"finish: {state.finish_reason}")
    return " · ".join(parts)


def live_html(state: LiveState) -> str:
    """The live view of ``state`` as HTML (every model-made string escaped)."""
    parts = ['<div class="rafrx-live">']
    for kind, value in state.blocks:
        if kind == "text":
            parts.append(
                f'<div class="rafrx-text" style="white-space:pre-wrap">{escape(value)}</div>'
            )
        elif kind == "reasoning":
            parts.append(
                '<div class="rafrx-reasoning" style="color:#888;white-space:pre-wrap;'
                f'border-left:3px solid #ddd;padding-left:6px">{escape(value)}</div>'
            )
        elif kind == "tool":
            parts.append(card_html(state.cards[value]))
        else:
            parts.append(f"<div>🔗 <code>{escape(value)}</code></div>")
    parts.extend(f'<div style="color:#c00">error: {escape(m)}</div>' for m in state.errors)
    parts.append(f'<small style="color:#666">{escape(_footer(state))}</small></div>')
    return "".join(parts)


_TEXT_ARGUMENT = 200  # characters of an argument value / a result in the text fallback
_TEXT_RESULT = 500
_TEXT_NAME = 100  # characters of a tool or argument name, or a call id


def _size_text(bar: ArgumentProgress) -> str:
    """How much of a string argument arrived, and whether more may come."""
    size = human_size(bar.received)
    if bar.streaming:
        return f"{size} …"
    return size if bar.done else f"{size} (incomplete)"


def _card_text(card: ToolCard) -> list[str]:
    # Model-made names and ids each on the card's own line: a newline must not forge one.
    title = f"{one_line(card.name, _TEXT_NAME)} {one_line(card.call_id, _TEXT_NAME)}"
    lines = [f"[tool {title}: {card.status}]"]
    for name in list(card.arguments) + [n for n in card.progress if n not in card.arguments]:
        bar = card.progress.get(name)
        shown = one_line(name, _TEXT_NAME)
        if bar is not None and (not bar.done or bar.received >= LONG_ARG_BYTES):
            lines.append(f"  {shown}: {_size_text(bar)}")
        else:
            value = json_preview(card.arguments.get(name), limit=_TEXT_ARGUMENT, indent=None)
            lines.append(f"  {shown} = {value}")
    if card.argument_error:
        lines.append(f"  ! {one_line(card.argument_error, _TEXT_RESULT)}")
    if card.error is not None:
        lines.append(f"  x {one_line(card.error, _TEXT_RESULT)}")
    elif card.result is not None:
        lines.append(f"  -> {clip(card.result, _TEXT_RESULT)}")
    return lines


def live_text(state: LiveState) -> str:
    """The live view of ``state`` as plain text."""
    lines: list[str] = []
    for kind, value in state.blocks:
        if kind == "text":
            lines.append(value)
        elif kind == "reasoning":
            lines.append(f"[thinking] {value}")
        elif kind == "tool":
            lines.extend(_card_text(state.cards[value]))
        else:
            lines.append(f"[link] {value}")
    lines.extend(f"error: {m}" for m in state.errors)
    lines.append(_footer(state))
    return showable("\n".join(lines))


@attrs.frozen(repr=False)
class LiveSnapshot:
    """What one render of a live view displays (HTML and text)."""

    html: str
    text: str
    final: bool = False

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text
