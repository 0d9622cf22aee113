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

Example:
    >>> from rafrx.content import TextContent
    >>> content_html(TextContent("<b>hi</b>"))
    '<span class="rafrx-text">&lt;b&gt;hi&lt;/b&gt;</span>'
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Callable, Generator, Iterable
from html import escape
from typing import TYPE_CHECKING, Any, Protocol, TextIO

import attrs
from reactivex import Observable, abc
from reactivex.subject import Subject

from rafrx import content as c
from rafrx.events import Event, FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.operators import convert
from rafrx.operators._aggregate import ResponseAggregator
from rafrx.response import AgentResponseResult, FinishReason, Usage

if TYPE_CHECKING:
    from rafrx.messages import ChatMessage
    from rafrx.response import AgentResponse

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

_PREVIEW_CHARS = 2000


def _json(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, indent=1, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > _PREVIEW_CHARS:
        text = text[:_PREVIEW_CHARS] + f"… ({len(text) - _PREVIEW_CHARS} more characters)"
    return escape(text)


def content_html(item: c.Content) -> str:
    """One content item as an HTML fragment."""
    match item:
        case c.TextContent(text):
            return f'<span class="rafrx-text">{escape(text)}</span>'
        case c.ReasoningContent(text):
            return f'<span class="rafrx-reasoning" style="color:#888">{escape(text)}</span>'
        case c.UriContent(uri, media_type):
            kind = f" ({escape(media_type)})" if media_type else ""
            return f'<span class="rafrx-uri">🔗 <code>{escape(uri)}</code>{kind}</span>'
        case c.ToolCallStartContent(call_id, name):
            return f"<div>▶ tool call <b>{escape(name)}</b> <code>{escape(call_id)}</code></div>"
        case c.ToolCallArgsContent(call_id, delta):
            return f"<code>{escape(delta)}</code>"
        case c.ToolCallArgsParsedContent(call_id, name, value):
            return f"<div>✓ <b>{escape(name)}</b> = <code>{_json(value)}</code></div>"
        case c.ToolCallArgsProgressContent(call_id, name, received, value):
            return f"<div>… <b>{escape(name)}</b> {received} bytes</div>"
        case c.ToolCallEndContent(call_id):
            return f"<div>■ arguments complete <code>{escape(call_id)}</code></div>"
        case c.ToolCallingContent(call_id, name, arguments, raw, error):
            shown = _json(arguments) if error is None else escape(raw)
            problem = f' <span style="color:#c00">{escape(error)}</span>' if error else ""
            return (
                f'<div class="rafrx-tool"><b>{escape(name)}</b>'
                f"(<code>{shown}</code>){problem}</div>"
            )
        case c.ToolCalledContent(call_id, result, error):
            if error is not None:
                return f'<div style="color:#c00">✗ {escape(error)}</div>'
            return f"<div>→ <code>{escape(result or '')}</code></div>"
        case c.UsageContent(usage):
            return (
                f"<div>usage: {usage.prompt_tokens} in, {usage.completion_tokens} out, "
                f"{usage.total_tokens} total</div>"
            )
        case c.ErrorContent(message):
            return f'<div style="color:#c00">error: {escape(message)}</div>'
    return escape(repr(item))


def result_html(result: AgentResponseResult) -> str:
    """One result chunk as HTML."""
    parts = [content_html(item) for item in result.contents]
    parts.extend(f"<div><i>{escape(repr(event))}</i></div>" for event in result.events)
    return f'<div class="rafrx-result">{"".join(parts)}</div>'


def message_html(message: ChatMessage) -> str:
    """A chat message as HTML."""
    calls = "".join(
        f"<div>🔧 <b>{escape(call.name)}</b>(<code>{_json(call.arguments)}</code>) "
        f"<code>{escape(call.id)}</code></div>"
        for call in message.tool_calls or ()
    )
    reasoning = (
        f'<div style="color:#888">{escape(message.reasoning)}</div>' if message.reasoning else ""
    )
    return (
        f'<div class="rafrx-message"><b>{escape(message.role.value)}</b>: '
        f'{reasoning}<span style="white-space:pre-wrap">{escape(message.content)}</span>'
        f"{calls}</div>"
    )


def response_html(response: AgentResponse) -> str:
    """An :class:`~rafrx.AgentResponse` as HTML: transcript, finish and usage."""
    rows = "".join(message_html(m) for m in response.turn_transcript)
    usage = response.usage
    footer = f"finish: {escape(str(response.finish_reason))}"
    if usage is not None:
        footer += f" · tokens {usage.prompt_tokens} in / {usage.completion_tokens} out"
    if response.interrupted:
        footer += ' · <span style="color:#c00">interrupted</span>'
    model = escape(response.model or "")
    return f'<div class="rafrx-response"><small>{model}</small>{rows}<small>{footer}</small></div>'


# ----------------------------------------------------------------- live view state

_TAIL_CHARS = 160
_LONG_ARG_BYTES = 80


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


@attrs.define
class ArgumentProgress:
    """A top-level string argument while it streams."""

    received: int = 0
    tail: str = ""
    done: bool = False


@attrs.define
class ToolCard:
    """What is known about one tool call so far (mutable: it fills in)."""

    call_id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    progress: dict[str, ArgumentProgress] = attrs.field(factory=dict)
    raw_bytes: int = 0
    status: str = "streaming arguments"
    argument_error: str | None = None
    result: str | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the tool has run (successfully or not)."""
        return self.result is not None or self.error is not None


@attrs.define
class LiveState:
    """A stream folded into what a live view shows.

    ``blocks`` keeps the order things appeared in: ``("text", str)``,
    ``("reasoning", str)``, ``("tool", call_id)``, ``("uri", str)``.

    Example:
        >>> from rafrx.response import AgentResponseResult
        >>> state = LiveState()
        >>> state.add(AgentResponseResult(contents=[c.TextContent("Hel")]))
        >>> state.add(AgentResponseResult(contents=[c.TextContent("lo")]))
        >>> state.blocks
        [['text', 'Hello']]
    """

    blocks: list[list[str]] = attrs.field(factory=list)
    cards: dict[str, ToolCard] = attrs.field(factory=dict)
    step_usage: list[Usage | None] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    model: str | None = None
    finish_reason: FinishReason | None = None
    status: str = "waiting"
    items: int = 0

    @property
    def usage(self) -> Usage | None:
        """Usage summed over LLM calls (the last report of each call counts)."""
        total: Usage | None = None
        for usage in self.step_usage:
            if usage is not None:
                total = usage if total is None else total + usage
        return total

    @property
    def text(self) -> str:
        """All assistant text so far."""
        return "".join(b[1] for b in self.blocks if b[0] == "text")

    @property
    def reasoning(self) -> str:
        """All reasoning text so far."""
        return "".join(b[1] for b in self.blocks if b[0] == "reasoning")

    def _append(self, kind: str, text: str) -> None:
        if self.blocks and self.blocks[-1][0] == kind:
            self.blocks[-1][1] += text
        else:
            self.blocks.append([kind, text])

    def _card(self, call_id: str, name: str = "") -> ToolCard:
        card = self.cards.get(call_id)
        if card is None:
            card = self.cards[call_id] = ToolCard(call_id, name)
            self.blocks.append(["tool", call_id])
        return card

    def add(self, result: AgentResponseResult) -> None:
        """Fold one result chunk in."""
        self.items += 1
        self.status = "streaming"
        if result.model:
            self.model = result.model
        for event in result.events:
            self._event(event)
        for item in result.contents:
            self._content(item)

    def _event(self, event: Event) -> None:
        if isinstance(event, ResponseStartedEvent) or not self.step_usage:
            self.step_usage.append(None)
        if isinstance(event, FinishEvent):
            self.finish_reason = event.finish_reason
            if event.usage is not None:
                self.step_usage[-1] = event.usage
        elif isinstance(event, ToolApprovalRequestEvent):
            self._card(event.call_id, event.name).status = "awaiting approval"

    def _content(self, item: c.Content) -> None:
        match item:
            case c.TextContent(text):
                self._append("text", text)
            case c.ReasoningContent(text):
                self._append("reasoning", text)
            case c.UriContent(uri):
                self.blocks.append(["uri", uri])
            case c.ToolCallStartContent(call_id, name):
                self._card(call_id, name).name = name
            case c.ToolCallArgsContent(call_id, delta):
                self._card(call_id).raw_bytes += len(delta.encode("utf-8", "replace"))
            case c.ToolCallArgsProgressContent(call_id, name, received, value):
                bar = self._card(call_id).progress.setdefault(name, ArgumentProgress())
                bar.received = received
                bar.tail = (bar.tail + value)[-_TAIL_CHARS:]
            case c.ToolCallArgsParsedContent(call_id, name, value):
                card = self._card(call_id)
                card.arguments[name] = value
                if name in card.progress:
                    card.progress[name].done = True
            case c.ToolCallEndContent(call_id):
                self._card(call_id).status = "arguments complete"
            case c.ToolCallingContent(call_id, name, arguments, _raw, error):
                card = self._card(call_id, name)
                card.name = card.name or name
                if error is not None:
                    card.argument_error, card.status = error, "invalid arguments"
                else:
                    if isinstance(arguments, dict):
                        card.arguments = dict(arguments)
                    card.status = "ready"
            case c.ToolCalledContent(call_id, result, error):
                card = self._card(call_id)
                card.result, card.error = result, error
                card.status = "failed" if error is not None else "done"
            case c.UsageContent(usage):
                if not self.step_usage:
                    self.step_usage.append(None)
                self.step_usage[-1] = usage
            case c.ErrorContent(message):
                self.errors.append(message)


# ----------------------------------------------------------------- live view rendering

_PRE = "white-space:pre-wrap"
_BOX = "border:1px solid #ccc;border-radius:6px;padding:4px 8px;margin:4px 0"
_STATUS_COLORS = {"done": "#2a2", "failed": "#c00", "invalid arguments": "#c00"}


def _argument_html(name: str, card: ToolCard) -> str:
    bar = card.progress.get(name)
    label = f"<td><b>{escape(name)}</b></td>"
    if bar is not None and (not bar.done or bar.received >= _LONG_ARG_BYTES):
        value = "1" if bar.done else ""
        meter = (
            f'<progress max="1" value="{value}"></progress>'
            if bar.done
            else "<progress></progress>"
        )
        tail = escape(bar.tail)
        return (
            f"<tr>{label}<td>{meter} {_size(bar.received)}"
            f'<div style="color:#666;white-space:pre-wrap;font-size:90%">…{tail}</div></td></tr>'
        )
    shown = _json(card.arguments[name]) if name in card.arguments else "…"
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
        parts.append(f'<div style="color:#c00">✗ {escape(card.error)}</div>')
    elif card.result is not None:
        parts.append(f'<div>→ <code style="white-space:pre-wrap">{_clip(card.result)}</code></div>')
    parts.append("</div>")
    return "".join(parts)


def _clip(text: str) -> str:
    if len(text) > _PREVIEW_CHARS:
        text = text[:_PREVIEW_CHARS] + f"… ({len(text) - _PREVIEW_CHARS} more characters)"
    return escape(text)


def _footer(state: LiveState) -> str:
    parts = [f"status: {state.status}"]
    if state.model:
        parts.append(f"model: {state.model}")
    usage = state.usage
    if usage is not None:
        parts.append(
            f"tokens: {usage.prompt_tokens} in / {usage.completion_tokens} out"
            f" / {usage.total_tokens} total"
        )
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


def _card_text(card: ToolCard) -> list[str]:
    lines = [f"[tool {card.name} {card.call_id}: {card.status}]"]
    for name in list(card.arguments) + [n for n in card.progress if n not in card.arguments]:
        bar = card.progress.get(name)
        if bar is not None and (not bar.done or bar.received >= _LONG_ARG_BYTES):
            lines.append(f"  {name}: {_size(bar.received)}{'' if bar.done else ' …'}")
        else:
            value = json.dumps(card.arguments.get(name), ensure_ascii=False, default=repr)
            lines.append(f"  {name} = {value[:200]}")
    if card.argument_error:
        lines.append(f"  ! {card.argument_error}")
    if card.error is not None:
        lines.append(f"  x {card.error}")
    elif card.result is not None:
        lines.append(f"  -> {card.result[:500]}")
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
    return "\n".join(lines)


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


# ----------------------------------------------------------------- live view


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
            print(obj.text, file=self._stream or sys.stdout)


def text_display(stream: TextIO | None = None) -> Display:
    """A display for plain terminals/scripts: prints the final render once.

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u, FinishReason
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


def _default_display() -> Display:
    try:
        from IPython.core.getipython import get_ipython
        from IPython.display import display
    except ImportError:
        return text_display()
    if get_ipython() is None:  # type: ignore[no-untyped-call]
        return text_display()
    return display


def as_results(source: Observable[Any]) -> Observable[AgentResponseResult]:
    """``source`` as result chunks: results pass, updates go through ``convert()``.

    The first item decides: a stream of :class:`~rafrx.AgentResponseResult`
    passes unchanged, anything else is converted.

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> as_results(reactivex.of(u.TextDelta("Hi"))).run().contents
        (TextContent(text='Hi'),)
    """

    def subscribe(
        observer: abc.ObserverBase[AgentResponseResult], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        target: list[abc.ObserverBase[Any]] = []

        def sink(item: Any) -> abc.ObserverBase[Any]:
            if not target:
                if isinstance(item, AgentResponseResult):
                    target.append(observer)
                else:
                    subject: Subject[Any] = Subject()
                    subject.pipe(convert()).subscribe(observer)
                    target.append(subject)
            return target[0]

        def on_next(item: Any) -> None:
            sink(item).on_next(item)

        def on_error(error: Exception) -> None:
            (target[0] if target else observer).on_error(error)

        def on_completed() -> None:
            (target[0] if target else observer).on_completed()

        return source.subscribe(on_next, on_error, on_completed, scheduler=scheduler)

    return Observable(subscribe)


class LiveView:
    """A stream being rendered into one display handle; await it for the response.

    Created by :func:`live`. ``state`` is the folded stream, ``renders`` how
    many times the handle was updated.
    """

    def __init__(
        self,
        observable: Observable[Any],
        *,
        display: Display | None = None,
        interval: float = 0.05,
        agent_id: str | None = None,
    ) -> None:
        self.state = LiveState()
        self.renders = 0
        self._interval = interval
        self._aggregator = ResponseAggregator(agent_id)
        self._last_render = -math.inf
        self._timer: asyncio.TimerHandle | None = None
        self._response: AgentResponse | None = None
        self._error: Exception | None = None
        self._done = False
        self._waiters: list[asyncio.Future[None]] = []
        show = display or _default_display()
        self._handle: DisplayHandle = show(self._snapshot(), display_id=True)
        self._subscription: abc.DisposableBase | None = None
        subscription = as_results(observable).subscribe(
            self._on_next, self._on_error, self._on_completed
        )
        if self._done:
            subscription.dispose()
        else:
            self._subscription = subscription

    # -- results

    @property
    def done(self) -> bool:
        """Whether the stream has ended (completed, failed or disposed)."""
        return self._done

    @property
    def response(self) -> AgentResponse:
        """The aggregated response.

        Raises:
            RuntimeError: the stream is still running.
            RafrxError: the stream failed (``.partial`` holds what arrived).
        """
        if self._error is not None:
            raise self._error
        if self._response is None:
            raise RuntimeError("the stream is still running: await the view first")
        return self._response

    def __await__(self) -> Generator[Any, None, AgentResponse]:
        return self._wait().__await__()

    async def _wait(self) -> AgentResponse:
        if not self._done:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            try:
                await future
            except asyncio.CancelledError:
                self.dispose()
                raise
        return self.response

    def dispose(self) -> None:
        """Stop the stream (aborting its request); the view shows what arrived."""
        if self._subscription is not None:
            self._subscription.dispose()
            self._subscription = None
        if not self._done:
            self.state.status = "stopped"
            self._finish(self._aggregator.response(interrupted=True), None)

    def _ipython_display_(self) -> None:
        """Nothing: the live handle already shows the stream."""

    def __repr__(self) -> str:
        return f"<LiveView {self.state.status}, {self.state.items} results>"

    # -- observer

    def _on_next(self, result: AgentResponseResult) -> None:
        if self._done:
            return
        self._aggregator.step(result)
        self.state.add(result)
        self._render_soon()

    def _on_error(self, error: Exception) -> None:
        if self._done:
            return
        self._aggregator.fail(error)
        self.state.status = "failed"
        if not self.state.errors:
            self.state.errors.append(f"{type(error).__name__}: {error}")
        self._finish(None, error)

    def _on_completed(self) -> None:
        if self._done:
            return
        self.state.status = "done"
        self._finish(self._aggregator.response(), None)

    def _finish(self, response: AgentResponse | None, error: Exception | None) -> None:
        self._done = True
        self._response, self._error = response, error
        self._render(final=True)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    # -- rendering

    def _snapshot(self, final: bool = False) -> LiveSnapshot:
        return LiveSnapshot(live_html(self.state), live_text(self.state), final)

    def _render(self, final: bool = False) -> None:
        if self._timer is not None:  # this render shows what the timer would have
            self._timer.cancel()
            self._timer = None
        self._last_render = time.monotonic()
        self.renders += 1
        self._handle.update(self._snapshot(final))

    def _render_soon(self) -> None:
        wait = self._interval - (time.monotonic() - self._last_render)
        if wait <= 0:
            self._render()
            return
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # synchronous source: the final render shows everything
        self._timer = loop.call_later(wait, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._done:
            self._render()


def live(
    observable: Observable[Any],
    *,
    display: Display | None = None,
    interval: float = 0.05,
    agent_id: str | None = None,
) -> LiveView:
    """Render a stream as it arrives in one display handle; ``await`` it for the response.

    ``observable`` emits :class:`~rafrx.AgentResponseResult` chunks (from
    ``convert()`` or ``Agent.run``) or raw updates (converted here). The
    view subscribes at once and updates the handle at most every
    ``interval`` seconds, plus a final render when the stream ends.

    Args:
        observable: the stream to show.
        display: ``display(obj, display_id=True) -> handle``; by default
            IPython's, or (outside IPython) a text display that prints the
            final render.
        interval: the shortest time between two renders, in seconds.
        agent_id: passed on to the aggregated response.

    Example:
        In a notebook cell::

            response = await live(client.stream([ChatMessage.user("Hi")]))
    """
    return LiveView(observable, display=display, interval=interval, agent_id=agent_id)


# ----------------------------------------------------------------- timeline

_LANE_H = 22
_LABEL_W = 190
_TOP = 10
_KIND_LANES = {
    "TextContent": "text",
    "ReasoningContent": "reasoning",
    "UriContent": "uri",
    "UsageContent": "usage",
    "ErrorContent": "error",
}
_MARKS: dict[str, tuple[str, float]] = {  # kind → (color, radius)
    "TextContent": ("#1f77b4", 4),
    "ReasoningContent": ("#999999", 4),
    "UriContent": ("#17becf", 4),
    "ToolCallStartContent": ("#2ca02c", 5),
    "ToolCallArgsContent": ("#bbbbbb", 2.5),
    "ToolCallArgsProgressContent": ("#9467bd", 3),
    "ToolCallArgsParsedContent": ("#ff7f0e", 4.5),
    "ToolCallEndContent": ("#333333", 4.5),
    "ToolCallingContent": ("#8c564b", 5),
    "ToolCalledContent": ("#2ca02c", 6),
    "UsageContent": ("#e377c2", 4),
    "ErrorContent": ("#d62728", 6),
    "ResponseStartedEvent": ("#7f7f7f", 5),
    "FinishEvent": ("#000000", 5),
    "ToolApprovalRequestEvent": ("#bcbd22", 6),
}


@attrs.frozen
class _Mark:
    t: float
    lane: str
    label: str
    kind: str
    tip: str


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


def _entries(recording: Any) -> tuple[list[tuple[float, Any]], float | None, bool]:
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


def _marks(timed: list[tuple[float, Any]]) -> list[_Mark]:
    names: dict[str, str] = {}
    marks: list[_Mark] = []
    for t, item in timed:
        if not isinstance(item, AgentResponseResult):
            kind = type(item).__name__
            marks.append(_Mark(t, kind, kind, kind, f"{t:.3f}s {_preview(item)}"))
            continue
        parts: list[Any] = [*item.events, *item.contents]
        for part in parts:
            kind = type(part).__name__
            call_id = getattr(part, "call_id", None)
            if isinstance(part, c.ToolCallStartContent | c.ToolCallingContent):
                names.setdefault(part.call_id, part.name)
            if call_id is not None:
                lane = f"call:{call_id}"
                label = f"{names.get(call_id, 'tool')} · {call_id}"
            elif kind in _KIND_LANES:
                lane = label = _KIND_LANES[kind]
            else:
                lane = label = "events"
            marks.append(_Mark(t, lane, label, kind, f"{t:.3f}s {_preview(part)}"))
    return marks


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
        items.append((name, _MARKS.get(kind, ("#444444", 4.0))[0], 14 + 5.5 * len(name)))
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
    timed, end, failed = _entries(recording)
    marks = _marks(_as_timed_results(timed, end))
    lanes: dict[str, str] = {}
    for mark in marks:
        lanes.setdefault(mark.lane, mark.label)
    for mark in marks:  # a call's label may only be known from a later mark
        if mark.lane.startswith("call:") and not mark.label.startswith("tool · "):
            lanes[mark.lane] = mark.label
    order = {lane: i for i, lane in enumerate(lanes)}
    last = max([m.t for m in marks] + [end or 0.0, 1e-3])
    duration = last * 1.02
    top = _TOP + (18 if title else 0)
    legend_rows = _legend_rows([m.kind for m in marks], width)
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
    for mark in marks:
        y = top + order[mark.lane] * _LANE_H + _LANE_H / 2
        color, radius = _MARKS.get(mark.kind, ("#444444", 4))
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
    svg.extend(_legend([m.kind for m in marks], axis_y + 30, _LABEL_W + width))
    svg.append("</svg>")
    return Timeline("".join(svg), list(lanes.values()), last)
