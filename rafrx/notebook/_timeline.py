"""A recorded stream drawn as an SVG marble diagram: :func:`timeline` and :class:`Timeline`.

One lane per content kind and per tool call; x is the arrival time.

Example:
    >>> from rafrx import updates as u, FinishReason
    >>> picture = timeline([(0.0, u.TextDelta("Hi")), (0.4, u.Finish(FinishReason.STOP))])
    >>> picture.lanes, picture.svg.endswith("</svg>")
    (('events', 'text'), True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import attrs

from rafrx.notebook._format import escape
from rafrx.notebook._marks import entries, marks

__all__ = ["Timeline", "timeline"]

_LANE_H = 22
_LABEL_W = 190
_TOP = 10

_MARBLES: dict[str, tuple[str, float]] = {  # kind → (color, radius)
    "TextContent": ("#1f77b4", 4),
    "ReasoningContent": ("#999999", 4),
    "UriContent": ("#17becf", 4),
    "ToolCallStartContent": ("#2ca02c", 5),
    "ToolCallArgsContent": ("#bbbbbb", 2.5),
    "ToolCallArgsProgressContent": ("#9467bd", 3),
    "ToolCallArgsParsedContent": ("#ff7f0e", 4.5),
    "ToolCallEndContent": ("#333333", 4.5),
    "ToolCallingContent": ("#8c564b", 5),
    "ToolCallIncompleteContent": ("#d62728", 5),
    "ToolCalledContent": ("#2ca02c", 6),
    "UsageContent": ("#e377c2", 4),
    "ErrorContent": ("#d62728", 6),
    "ResponseStartedEvent": ("#7f7f7f", 5),
    "FinishEvent": ("#000000", 5),
    "ToolApprovalRequestEvent": ("#bcbd22", 6),
}


def _str_tuple(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


@attrs.frozen
class Timeline:
    """An SVG marble diagram of a recorded stream (``_repr_svg_`` / ``_repr_html_``).

    ``lanes`` are the lane labels, top to bottom; ``svg`` the picture.
    """

    svg: str = attrs.field(repr=False)
    lanes: tuple[str, ...] = attrs.field(converter=_str_tuple)
    duration: float = 0.0

    def _repr_svg_(self) -> str:
        return self.svg

    def _repr_html_(self) -> str:
        return self.svg

    def __str__(self) -> str:
        return self.svg


def _ticks(duration: float) -> list[float]:
    step = 10 ** math.floor(math.log10(duration / 6)) if duration > 0 else 1.0
    for factor in (1, 2, 5, 10):
        if duration / (step * factor) <= 8:
            step *= factor
            break
    count = int(duration / step + 1e-9)
    return [i * step for i in range(count + 1)]


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _legend_items(kinds: list[str]) -> list[tuple[str, str, float]]:
    """(label, colour, width) per distinct kind, in order of appearance."""
    items = []
    for kind in dict.fromkeys(kinds):
        name = kind.removesuffix("Content").removesuffix("Event")
        items.append((name, _MARBLES.get(kind, ("#444444", 4.0))[0], 14 + 5.5 * len(name)))
    return items


def _legend_rows(kinds: list[str], width: int) -> int:
    rows, x = 1, 0.0
    for _, _, w in _legend_items(kinds):
        if x and x + w > width:
            rows, x = rows + 1, 0.0
        x += w
    return rows


def _legend(kinds: list[str], y: float, right: float) -> list[str]:
    svg, x = [], float(_LABEL_W)
    for name, color, w in _legend_items(kinds):
        if x > _LABEL_W and x + w > right:
            x, y = float(_LABEL_W), y + 14
        svg.append(
            f'<circle cx="{x + 4}" cy="{y}" r="4" fill="{color}"/>'
            f'<text x="{x + 11}" y="{y + 4}" font-size="9">{escape(name)}</text>'
        )
        x += w
    return svg


def timeline(recording: Any, *, width: int = 640, title: str | None = None) -> Timeline:
    """A marble diagram of a recorded stream: one lane per content kind and per call_id.

    x is the arrival time; each item is a marble whose tooltip shows it. A
    recording of updates is converted first (results keep the arrival time
    of the update that produced them); the end is a grey bar, or red when
    the stream failed.

    Args:
        recording: a path to a ``.jsonl`` recording, a
            :class:`~rafrx.recorder.Recording`, or ``(t, item)`` pairs.
        width: the width of the time axis in pixels.
        title: a caption above the lanes.

    Example:
        >>> from rafrx import updates as u, FinishReason
        >>> picture = timeline([(0.0, u.TextDelta("Hi")), (0.4, u.Finish(FinishReason.STOP))])
        >>> picture.lanes
        ('events', 'text')
        >>> picture.svg.startswith("<svg")
        True
    """
    timed, end, failed = entries(recording)
    found = marks(timed, end)
    lanes: dict[str, str] = {}
    for mark in found:
        lanes.setdefault(mark.lane, mark.label)
    for mark in found:  # a call's label may only be known from a later mark
        if mark.lane.startswith("call:") and not mark.label.startswith("tool · "):
            lanes[mark.lane] = mark.label
    order = {lane: i for i, lane in enumerate(lanes)}
    last = max([m.t for m in found] + [end or 0.0, 1e-3])
    duration = last * 1.02
    top = _TOP + (18 if title else 0)
    legend_rows = _legend_rows([m.kind for m in found], width)
    height = top + _LANE_H * len(lanes) + 36 + 14 * legend_rows

    def x(t: float) -> float:
        return round(_LABEL_W + t / duration * width, 2)

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_LABEL_W + width + 20}" '
        f'height="{height}" font-family="sans-serif" font-size="11" class="rafrx-timeline">'
    ]
    if title:
        svg.append(f'<text x="4" y="{_TOP + 8}" font-weight="bold">{escape(title)}</text>')
    for lane, i in order.items():
        y = top + i * _LANE_H + _LANE_H / 2
        label = lanes[lane]
        svg.append(
            f'<text x="4" y="{y + 4}"><title>{escape(label)}</title>{escape(_short(label))}</text>'
            f'<line x1="{_LABEL_W}" y1="{y}" x2="{_LABEL_W + width}" y2="{y}" stroke="#ddd"/>'
        )
    for mark in found:
        y = top + order[mark.lane] * _LANE_H + _LANE_H / 2
        color, radius = _MARBLES.get(mark.kind, ("#444444", 4))
        svg.append(
            f'<circle cx="{x(mark.t)}" cy="{y}" r="{radius}" fill="{color}" fill-opacity="0.8" '
            f'class="{escape(mark.kind)}"><title>{escape(mark.tip)}</title></circle>'
        )
    axis_y = top + _LANE_H * len(lanes) + 6
    svg.append(
        f'<line x1="{_LABEL_W}" y1="{axis_y}" x2="{_LABEL_W + width}" y2="{axis_y}" stroke="#888"/>'
    )
    for tick in _ticks(duration):
        svg.append(
            f'<line x1="{x(tick)}" y1="{axis_y}" x2="{x(tick)}" y2="{axis_y + 4}" stroke="#888"/>'
            f'<text x="{x(tick)}" y="{axis_y + 16}" text-anchor="middle">{tick:g}s</text>'
        )
    if end is not None:
        color = "#d62728" if failed else "#888"
        svg.append(
            f'<line x1="{x(end)}" y1="{top}" x2="{x(end)}" y2="{axis_y}" stroke="{color}" '
            f'stroke-width="2"><title>{"error" if failed else "completed"} at {end:.3f}s'
            "</title></line>"
        )
    svg.extend(_legend([m.kind for m in found], axis_y + 30, _LABEL_W + width))
    svg.append("</svg>")
    return Timeline("".join(svg), list(lanes.values()), last)
