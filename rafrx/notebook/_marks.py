"""A recording turned into timed marks, each on a lane: the data behind a timeline.

Updates are converted to results first (keeping the arrival time of the
update that produced them); every event and content item of a result is a
:class:`Mark` on the lane of its kind, or of its tool call.

Example:
    >>> from rafrx import updates as u
    >>> [(m.t, m.lane, m.kind) for m in marks([(0.5, u.TextDelta("Hi"))], end=1.0)]
    [(0.5, 'events', 'ResponseStartedEvent'), (0.5, 'text', 'TextContent')]
"""

from __future__ import annotations

import os
from typing import Any

import attrs
from reactivex.subject import Subject

from rafrx import content as c
from rafrx.messages import _is_rafrx_mark
from rafrx.operators import convert
from rafrx.response import AgentResponseResult

__all__ = ["Mark", "entries", "marks"]

_KIND_LANES = {
    "TextContent": "text",
    "ReasoningContent": "reasoning",
    "UriContent": "uri",
    "UsageContent": "usage",
    "ErrorContent": "error",
}


@attrs.frozen
class Mark:
    """One item at time ``t`` on ``lane`` (shown as ``label``); ``tip`` describes it."""

    t: float
    lane: str
    label: str
    kind: str
    tip: str


def entries(recording: Any) -> tuple[list[tuple[float, Any]], float | None, bool]:
    """``(t, item)`` pairs, the end time and whether the stream failed.

    Args:
        recording: a path to a ``.jsonl`` recording, a
            :class:`~rafrx.recorder.Recording`, or ``(t, item)`` pairs.
    """
    from rafrx.recorder import Entry, Recording, load

    if isinstance(recording, str | os.PathLike):
        recording = load(recording)
    if isinstance(recording, Recording):
        timed = [(e.t, e.item) for e in recording.entries]
        return timed, recording.end, recording.error is not None
    timed = [(e.t, e.item) if isinstance(e, Entry) else (float(e[0]), e[1]) for e in recording]
    return timed, None, False


def _as_timed_results(timed: list[tuple[float, Any]], end: float | None) -> list[tuple[float, Any]]:
    """Updates become results (through ``convert()``), keeping their arrival time."""
    out: list[tuple[float, Any]] = []
    now = [0.0]
    subject: Subject[Any] = Subject()
    subject.pipe(convert()).subscribe(lambda r: out.append((now[0], r)), lambda _: None)
    for t, item in timed:
        if attrs.has(type(item)) and type(item).__module__ == "rafrx.updates":
            now[0] = t
            subject.on_next(item)
        else:
            out.append((t, item))
    now[0] = end if end is not None else (timed[-1][0] if timed else 0.0)
    subject.on_completed()
    return out


def _preview(item: Any) -> str:
    text = repr(item)
    return text if len(text) <= 160 else text[:157] + "…"


def marks(timed: list[tuple[float, Any]], end: float | None) -> list[Mark]:
    """The marks of ``timed`` items (updates converted), in arrival order.

    A tool call's lane is ``call:<call_id>``, labelled with the call's name
    once known; items that are not results get a lane of their own type.
    """
    names: dict[str, str] = {}
    found: list[Mark] = []
    for t, item in _as_timed_results(timed, end):
        if not isinstance(item, AgentResponseResult):
            kind = type(item).__name__
            found.append(Mark(t, kind, kind, kind, f"{t:.3f}s {_preview(item)}"))
            continue
        parts: list[Any] = [*item.events, *item.contents]
        for part in parts:
            kind = type(part).__name__
            call_id = getattr(part, "call_id", None)
            if isinstance(part, c.ToolCallStartContent | c.ToolCallingContent):
                names.setdefault(part.call_id, part.name)
            if isinstance(part, c.ReasoningContent) and not part.text:
                if _is_rafrx_mark(part.provider_data):
                    continue  # (where a block stood, for the message sent back: not shown)
                lane = label = "events"  # a block carried whole (a signature, a server tool's)
            elif call_id is not None:
                lane = f"call:{call_id}"
                label = f"{names.get(call_id, 'tool')} · {call_id}"
            elif kind in _KIND_LANES:
                lane = label = _KIND_LANES[kind]
            else:
                lane = label = "events"
            found.append(Mark(t, lane, label, kind, f"{t:.3f}s {_preview(part)}"))
    return found
