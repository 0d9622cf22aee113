"""The state of a live view: a stream of result chunks folded into blocks and tool cards.

:class:`LiveState` keeps what a live view shows, in the order it appeared;
each tool call is a :class:`ToolCard` that fills in as its arguments stream,
with an :class:`ArgumentProgress` per long string argument.

Example:
    >>> from rafrx.response import AgentResponseResult
    >>> state = LiveState()
    >>> state.add(AgentResponseResult(contents=[
    ...     c.ToolCallStartContent("call_1", "search"),
    ...     c.ToolCallArgsParsedContent("call_1", "q", "cats")]))
    >>> state.cards["call_1"].arguments
    {'q': 'cats'}
"""

from __future__ import annotations

from typing import Any

import attrs

from rafrx import content as c
from rafrx.events import Event, FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.response import AgentResponseResult, FinishReason, Usage

__all__ = ["ArgumentProgress", "LiveState", "ToolCard"]

_TAIL_CHARS = 160


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

    _blocks: list[list[str]] = attrs.field(factory=list, alias="blocks")
    # Deltas of the last text or reasoning block not yet joined into it: appending
    # each to the block itself would copy the whole block every time (quadratic).
    _parts: list[str] = attrs.field(factory=list, init=False, repr=False, eq=False)
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

    @property
    def blocks(self) -> list[list[str]]:
        """``[kind, value]`` pairs in the order they appeared (see the class docstring)."""
        if self._parts:
            self._blocks[-1][1] += "".join(self._parts)
            self._parts.clear()
        return self._blocks

    def _append(self, kind: str, text: str) -> None:
        if not text:  # (an empty reasoning delta carries data to send back: nothing to show)
            return
        if self._blocks and self._blocks[-1][0] == kind:
            self._parts.append(text)
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
                    # An object's members one per row; any other JSON value as one row.
                    value = arguments if isinstance(arguments, dict) else {"(arguments)": arguments}
                    card.arguments = dict(value)
                    card.status = "ready"
            case c.ToolCallIncompleteContent(call_id, name):
                card = self._card(call_id, name)
                card.name = card.name or name
                card.argument_error, card.status = item.error, "cut short"
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
