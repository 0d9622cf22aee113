"""The state of a live view: a stream of result chunks folded into blocks and tool cards.

:class:`LiveState` keeps what a live view shows, in the order it appeared;
each tool call is a :class:`ToolCard` that fills in as its arguments stream,
with an :class:`ArgumentProgress` per long string argument. Cards belong to
the LLM call that made them: a later call of the turn that reuses an id gets
a card of its own.

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

from collections import deque
from typing import Any

import attrs

from rafrx import content as c
from rafrx._fragments import has_surrogates, join_surrogates
from rafrx.events import Event, FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import MCP_APPROVAL_RESPONSE
from rafrx.response import AgentResponseResult, FinishReason, Usage

__all__ = ["ArgumentProgress", "LiveState", "ToolCard"]

_TAIL_CHARS = 160

# A card's statuses while its call's arguments may still change (then: ready, invalid
# arguments, cut short or never run (whole, but its stream failed), and awaiting
# approval, done or failed; a provider's own tool: awaiting approval, approved or denied).
_ARGUMENTS_OPEN = frozenset({"streaming arguments", "arguments complete"})


@attrs.define
class ArgumentProgress:
    """A top-level string argument while it streams.

    ``done``: it arrived whole; ``incomplete``: its call ended (cut short,
    invalid, or the stream stopped) before it did.
    """

    received: int = 0
    tail: str = ""
    done: bool = False
    incomplete: bool = False

    @property
    def streaming(self) -> bool:
        """Whether more of it may still come."""
        return not (self.done or self.incomplete)


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

    @property
    def arguments_open(self) -> bool:
        """Whether the call's arguments may still change (not yet ready, invalid or cut short)."""
        return self.status in _ARGUMENTS_OPEN

    def end_arguments(self, status: str, why: str | None = None) -> None:
        """The call's arguments ended unusable (``status``: ``"cut short"`` or ``"invalid
        arguments"``, ``why`` says why): it never runs, and none of them still streams.

        Example:
            >>> card = ToolCard("c1", "write_file", progress={"text": ArgumentProgress(300)})
            >>> card.end_arguments("cut short", "the token limit came first")
            >>> card.status, card.progress["text"].streaming
            ('cut short', False)
        """
        self.argument_error, self.status = why, status
        for bar in self.progress.values():
            bar.incomplete = not bar.done


@attrs.define
class LiveState:
    """A stream folded into what a live view shows.

    ``blocks`` keeps the order things appeared in: ``("text", str)``,
    ``("reasoning", str)``, ``("tool", key)``, ``("uri", str)``. ``cards``
    holds every card by its key: the call id, or (for an id an earlier LLM
    call of the turn used too) the id and `` #2``, `` #3``...
    ``finish_reason`` is the current LLM call's (``None`` until it finishes).
    Every read of ``blocks`` is current, ``attrs.asdict`` and ``attrs.evolve``'s
    too (the text deltas are joined into their block when it is read), and a
    state made by ``attrs.evolve`` goes on as the original would (with the
    fields changed), sharing its lists, dicts and cards as ``evolve`` does.

    Example:
        >>> from rafrx.response import AgentResponseResult
        >>> state = LiveState()
        >>> state.add(AgentResponseResult(contents=[c.TextContent("Hel")]))
        >>> state.add(AgentResponseResult(contents=[c.TextContent("lo")]))
        >>> state.blocks
        [['text', 'Hello']]
    """

    # The bookkeeping (underscored) is given to __init__ by the same names, so that
    # attrs.evolve carries it over: a state made without it would lose track of the
    # current LLM call and of each call id's cards.

    # (read through _join_parts, set below: the deltas not yet joined go in first)
    blocks: list[list[str]] = attrs.field(factory=list)
    # Deltas of the last text or reasoning block not yet joined into it: appending
    # each to the block itself would copy the whole block every time (quadratic).
    _parts: list[str] = attrs.field(
        factory=list, alias="_parts", kw_only=True, repr=False, eq=False
    )
    cards: dict[str, ToolCard] = attrs.field(factory=dict)
    # Per LLM call of the turn: its call ids' cards (an id may come again in a later call).
    _calls: list[dict[str, ToolCard]] = attrs.field(
        factory=list, alias="_calls", kw_only=True, repr=False, eq=False
    )
    # Per call id: its cards in order (one per LLM call that made it); those that may still
    # be handed over; the next " #n" of its cards' keys.
    _cards_of: dict[str, list[ToolCard]] = attrs.field(
        factory=dict, alias="_cards_of", kw_only=True, repr=False, eq=False
    )
    _open_cards: dict[str, deque[ToolCard]] = attrs.field(
        factory=dict, alias="_open_cards", kw_only=True, repr=False, eq=False
    )
    _next_n: dict[str, int] = attrs.field(
        factory=dict, alias="_next_n", kw_only=True, repr=False, eq=False
    )
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

    def _join_parts(self) -> list[list[str]]:
        """The blocks, with the deltas not yet joined into the last one joined."""
        blocks: list[list[str]] = _BLOCKS_SLOT.__get__(self, LiveState)
        if self._parts:
            block, new = blocks[-1], "".join(self._parts)
            self._parts.clear()
            if has_surrogates(new):  # an emoji's UTF-16 halves in two deltas: one character
                block[1], new = block[1][:-1], join_surrogates(block[1][-1:] + new)
            block[1] += new
        return blocks

    def _append(self, kind: str, text: str) -> None:
        if not text:  # (an empty reasoning delta carries data to send back: nothing to show)
            return
        blocks = _BLOCKS_SLOT.__get__(self, LiveState)  # (as they are: no join per delta)
        if blocks and blocks[-1][0] == kind:
            self._parts.append(text)
        else:
            self.blocks.append([kind, text])

    def end(self, status: str) -> None:
        """The stream ended with ``status``: a call whose arguments never ended is cut short.

        Example:
            >>> state = LiveState()
            >>> state.add(AgentResponseResult(contents=[c.ToolCallStartContent("c1", "f")]))
            >>> state.end("stopped")
            >>> state.status, state.cards["c1"].status
            ('stopped', 'cut short')
        """
        self.status = status
        for card in self.cards.values():
            if card.arguments_open:
                card.end_arguments("cut short", card.argument_error)

    # -- LLM calls and their cards

    def _start_call(self) -> None:
        """An LLM call began: its cards, usage and finish reason are its own."""
        self._calls.append({})
        self.step_usage.append(None)
        self.finish_reason = None

    def _this_call(self) -> dict[str, ToolCard]:
        if not self._calls:
            self._start_call()
        return self._calls[-1]

    def _new_card(self, calls: dict[str, ToolCard], call_id: str, name: str) -> ToolCard:
        key, n = call_id, self._next_n.get(call_id, 1)
        while key in self.cards:
            n += 1
            key = f"{call_id} #{n}"
        self._next_n[call_id] = n
        card = calls[call_id] = self.cards[key] = ToolCard(call_id, name)
        self._cards_of.setdefault(call_id, []).append(card)
        self._open_cards.setdefault(call_id, deque()).append(card)
        self.blocks.append(["tool", key])
        return card

    def _streamed(self, call_id: str, name: str = "") -> ToolCard:
        """The card of ``call_id`` in the current LLM call (whose arguments stream)."""
        calls = self._this_call()
        return calls.get(call_id) or self._new_card(calls, call_id, name)

    def _handed_over(self, call_id: str, name: str) -> ToolCard:
        """The card a complete (or cut) call ends: the earliest whose arguments are still
        open (with a lazy flush, calls of several LLM calls end together), else the
        current LLM call's."""
        cards = self._open_cards.get(call_id)
        if cards:
            current = self._this_call().get(call_id)
            while cards and not cards[0].arguments_open and cards[0] is not current:
                cards.popleft()  # ended for good: only the current LLM call's card goes on
            for card in cards:
                if card.arguments_open:
                    return card
        return self._streamed(call_id, name)

    def _answered(self, call_id: str, name: str = "") -> ToolCard:
        """The card an approval request or a tool result is about: the latest whose
        arguments ended (a result may come after the next LLM call started), else
        the latest of ``call_id``."""
        cards = self._cards_of.get(call_id)
        if not cards:
            return self._streamed(call_id, name)
        return next((card for card in reversed(cards) if not card.arguments_open), cards[-1])

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
        if isinstance(event, ResponseStartedEvent):
            self._start_call()
        self._this_call()
        if isinstance(event, FinishEvent):
            self.finish_reason = event.finish_reason
            if event.usage is not None:
                self.step_usage[-1] = event.usage
        elif isinstance(event, ToolApprovalRequestEvent):
            card = self._answered(event.call_id, event.name)
            card.status = "awaiting approval"
            if not card.arguments and isinstance(event.arguments, dict):
                card.arguments = dict(event.arguments)  # (a provider's own tool: no stream)

    def _remote_answer(self, answer: dict[str, Any]) -> None:
        """The approver's answer to a tool the provider runs (a Responses MCP tool),
        going back to it: the provider runs the tool, or not, in the next LLM call."""
        card = self._answered(str(answer.get("approval_request_id")))
        if answer.get("approve") is True:
            card.status = "approved"
        else:
            card.status, card.error = "denied", str(answer.get("reason") or "denied")

    def _content(self, item: c.Content) -> None:
        match item:
            case c.TextContent(text):
                self._append("text", text)
            case c.ReasoningContent(text, provider_data=data):
                if type(data) is dict and data.get("type") == MCP_APPROVAL_RESPONSE:
                    self._remote_answer(data)
                self._append("reasoning", text)
            case c.UriContent(uri):
                self.blocks.append(["uri", uri])
            case c.ToolCallStartContent(call_id, name):
                self._streamed(call_id, name).name = name
            case c.ToolCallArgsContent(call_id, delta):
                self._streamed(call_id).raw_bytes += len(delta.encode("utf-8", "replace"))
            case c.ToolCallArgsProgressContent(call_id, name, received, value):
                bar = self._streamed(call_id).progress.setdefault(name, ArgumentProgress())
                bar.received = received
                bar.tail = (bar.tail + value)[-_TAIL_CHARS:]
            case c.ToolCallArgsParsedContent(call_id, name, value):
                card = self._streamed(call_id)
                card.arguments[name] = value
                if name in card.progress:
                    card.progress[name].done = True
            case c.ToolCallEndContent(call_id):
                self._streamed(call_id).status = "arguments complete"
            case c.ToolCallingContent(call_id, name, arguments, _raw, error):
                card = self._handed_over(call_id, name)
                card.name = card.name or name
                if error is not None:
                    card.end_arguments("invalid arguments", error)
                else:
                    card.arguments = _rows(arguments)
                    card.status = "ready"
            case c.ToolCallIncompleteContent(call_id, name) if item.whole:
                card = self._handed_over(call_id, name)  # (whole, but its stream failed)
                card.name = card.name or name
                card.arguments = _rows(item.partial_value)
                card.end_arguments("never run", item.error)
            case c.ToolCallIncompleteContent(call_id, name):
                card = self._handed_over(call_id, name)
                card.name = card.name or name
                card.end_arguments("cut short", item.error)
            case c.ToolCalledContent(call_id, result, error):
                card = self._answered(call_id)
                card.result, card.error = result, error
                card.status = "failed" if error is not None else "done"
            case c.UsageContent(usage):
                self._this_call()
                self.step_usage[-1] = usage
            case c.ErrorContent(message):
                self.errors.append(message)


# ``blocks`` is read through the joining of the deltas not yet in it: attrs' own methods
# (repr, ==, asdict, evolve, pickling) read the field by its name, and see it current.
_BLOCKS_SLOT: Any = LiveState.__dict__["blocks"]
LiveState.blocks = property(  # type: ignore[assignment,misc]  # (to mypy: a slot, a list)
    LiveState._join_parts,
    _BLOCKS_SLOT.__set__,
    doc="``[kind, value]`` pairs in the order they appeared (see the class docstring).",
)


def _rows(arguments: Any) -> dict[str, Any]:
    """A call's arguments as a card's rows: an object's members one per row; any other
    JSON value as one row."""
    return dict(arguments) if isinstance(arguments, dict) else {"(arguments)": arguments}
