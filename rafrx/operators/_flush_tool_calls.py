"""``flush_tool_calls``: one :class:`ToolCallingContent` per ended call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from rafrx._fragments import COMPACT_AT, compact, joined
from rafrx.content import (
    ResponseMetadata,
    ToolCallArgsContent,
    ToolCallEndContent,
    ToolCallingContent,
    ToolCallStartContent,
)
from rafrx.operators._reducer import reducer_operator
from rafrx.response import AgentResponseResult
from rafrx.typing import Operator

__all__ = ["KeptCall", "ToolCallFlusher", "flush_tool_calls", "parse_arguments"]


def parse_arguments(raw: str) -> tuple[Any, str | None]:
    """Strictly parse a call's arguments: ``""`` → ``{}``; invalid → ``(None, error)``.

    Example:
        >>> parse_arguments(""), parse_arguments('{"a": 1}')
        (({}, None), ({'a': 1}, None))
        >>> parse_arguments('{"a": ')[1]
        'invalid JSON arguments: Expecting value: line 1 column 7 (char 6)'
    """
    if not raw or raw.isspace():
        return {}, None
    try:
        return json.loads(raw), None
    except ValueError as exc:
        return None, f"invalid JSON arguments: {exc}"
    except RecursionError:
        return None, "invalid JSON arguments: nested too deeply"


class KeptCall:
    """A started call's name and argument fragments, until it is flushed.

    Fragments go to ``args``; every :data:`~rafrx._fragments.COMPACT_AT` of
    them, :meth:`compact` joins them into one block.
    """

    __slots__ = ("args", "blocks", "call_id", "ended", "meta", "name")

    def __init__(self, call_id: str, name: str, meta: ResponseMetadata) -> None:
        self.call_id = call_id
        self.name = name
        self.meta = meta
        self.args: list[str] = []
        self.blocks: list[str] = []
        self.ended = False

    def compact(self) -> None:
        """Join the fragments in ``args`` into one block."""
        compact(self.args, self.blocks)

    def calling(self) -> ToolCallingContent:
        raw = joined(self.blocks, self.args)
        arguments, error = parse_arguments(raw)
        return ToolCallingContent(self.call_id, self.name, arguments, raw, error, meta=self.meta)


_LIFECYCLE = frozenset(
    {ToolCallStartContent, ToolCallArgsContent, ToolCallEndContent, ToolCallingContent}
)


class ToolCallFlusher:
    """The reducer behind :func:`flush_tool_calls`.

    A call flushed upstream already (``flush_tool_calls`` applied twice, as
    after ``convert()``) is flushed once: its upstream ``ToolCallingContent``
    stands for the one this flusher would add (eager or not, whichever comes
    first), so no tool runs twice.
    """

    __slots__ = ("_calls", "_eager", "_flushed", "_id", "_model", "_started")

    def __init__(self, eager: bool = False) -> None:
        self._eager = eager
        self._calls: dict[str, KeptCall] = {}  # by id: the latest call to start with it
        self._started: list[KeptCall] = []  # every call not flushed yet, in start order
        self._flushed: dict[str, int] = {}  # eager flushes by id not yet met upstream
        self._id: str | None = None
        self._model: str | None = None

    def kept_call(self, call_id: str) -> KeptCall | None:
        """Where :meth:`arguments` keeps the fragments of an open call (None: not kept)."""
        pending = self._calls.get(call_id)
        return None if pending is None or pending.ended else pending

    def arguments(self, content: ToolCallArgsContent) -> None:
        """Keep an argument fragment (what :meth:`step` does with one).

        Fragments of a call that has ended are ignored: its arguments are complete.
        """
        pending = self._calls.get(content.call_id)
        if pending is not None and not pending.ended:
            args = pending.args
            args.append(content.args_delta)
            if len(args) >= COMPACT_AT:
                pending.compact()

    def step(self, result: AgentResponseResult) -> Sequence[AgentResponseResult]:
        self._id, self._model = result.id, result.model  # the flushed results carry them
        eager: list[ToolCallingContent] = []
        repeated: list[ToolCallingContent] = []
        for content in result.contents:
            if type(content) not in _LIFECYCLE:
                continue
            if isinstance(content, ToolCallArgsContent):
                self.arguments(content)
            elif isinstance(content, ToolCallStartContent):
                # An id may come back in the next LLM call: the ended call stays in _started.
                call = KeptCall(content.call_id, content.name, content.meta)
                self._calls[content.call_id] = call
                if not self._eager:
                    self._started.append(call)
            elif isinstance(content, ToolCallEndContent):
                pending = self._calls.get(content.call_id)
                if pending is not None and not pending.ended:
                    pending.ended = True
                    if self._eager:
                        eager.append(pending.calling())
                        del self._calls[pending.call_id]
                        self._flushed[pending.call_id] = self._flushed.get(pending.call_id, 0) + 1
            elif isinstance(content, ToolCallingContent) and self._flushed_upstream(
                content.call_id
            ):
                repeated.append(content)
        out: tuple[AgentResponseResult, ...] = (result,)
        if repeated:
            result = attrs.evolve(
                result, contents=[c for c in result.contents if all(c is not r for r in repeated)]
            )
            empty = not (result.contents or result.events or result.finish_reason)
            out = () if empty else (result,)
        if eager:
            return (*out, AgentResponseResult(self._id, self._model, None, eager))
        return out

    def _flushed_upstream(self, call_id: str) -> bool:
        """Note that a flusher upstream flushed ``call_id``; whether this one already had.

        The upstream ``ToolCallingContent`` then stands for this flusher's own: an
        ended call still kept is forgotten (``False``: pass it on); one this
        flusher flushed eagerly makes it a repeat (``True``: drop it).
        """
        for pending in self._started:
            if pending.call_id == call_id and pending.ended:
                self._started.remove(pending)
                if self._calls.get(call_id) is pending:
                    del self._calls[call_id]
                return False
        latest = self._calls.get(call_id)
        if latest is not None and latest.ended:
            del self._calls[call_id]  # (eager: not in _started)
            return False
        count = self._flushed.get(call_id, 0)
        if not count:
            return False
        if count == 1:
            del self._flushed[call_id]
        else:
            self._flushed[call_id] = count - 1
        return True

    def finish(self) -> Sequence[AgentResponseResult]:
        calls = [p.calling() for p in self._started if p.ended]
        self._calls.clear()
        self._started.clear()
        self._flushed.clear()
        if not calls:
            return ()
        return (AgentResponseResult(self._id, self._model, None, calls),)

    def fail(self, error: Exception) -> Sequence[AgentResponseResult]:
        self._calls.clear()
        self._started.clear()
        self._flushed.clear()
        return ()


def flush_tool_calls(eager: bool = False) -> Operator[AgentResponseResult, AgentResponseResult]:
    """See :func:`rafrx.operators.flush_tool_calls`."""
    return reducer_operator(lambda: ToolCallFlusher(eager))
