"""``flush_tool_calls``: one :class:`ToolCallingContent` per ended call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

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

__all__ = ["ToolCallFlusher", "flush_tool_calls", "parse_arguments"]


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


class _Pending:
    __slots__ = ("args", "call_id", "ended", "meta", "name")

    def __init__(self, call_id: str, name: str, meta: ResponseMetadata) -> None:
        self.call_id = call_id
        self.name = name
        self.meta = meta
        self.args: list[str] = []
        self.ended = False

    def calling(self) -> ToolCallingContent:
        raw = "".join(self.args)
        arguments, error = parse_arguments(raw)
        return ToolCallingContent(self.call_id, self.name, arguments, raw, error, meta=self.meta)


_LIFECYCLE = frozenset({ToolCallStartContent, ToolCallArgsContent, ToolCallEndContent})


class ToolCallFlusher:
    """The reducer behind :func:`flush_tool_calls`."""

    __slots__ = ("_calls", "_eager", "_id", "_model")

    def __init__(self, eager: bool = False) -> None:
        self._eager = eager
        self._calls: dict[str, _Pending] = {}
        self._id: str | None = None
        self._model: str | None = None

    def kept_arguments(self, call_id: str) -> list[str] | None:
        """The list :meth:`arguments` appends a call's fragments to (None: not kept)."""
        pending = self._calls.get(call_id)
        return None if pending is None else pending.args

    def arguments(self, content: ToolCallArgsContent) -> None:
        """Keep an argument fragment (what :meth:`step` does with one)."""
        pending = self._calls.get(content.call_id)
        if pending is not None:
            pending.args.append(content.args_delta)

    def step(self, result: AgentResponseResult) -> Sequence[AgentResponseResult]:
        self._id, self._model = result.id, result.model  # the flushed results carry them
        eager: list[ToolCallingContent] = []
        for content in result.contents:
            if type(content) not in _LIFECYCLE:
                continue
            if isinstance(content, ToolCallArgsContent):
                self.arguments(content)
            elif isinstance(content, ToolCallStartContent):
                self._calls[content.call_id] = _Pending(content.call_id, content.name, content.meta)
            elif isinstance(content, ToolCallEndContent):
                pending = self._calls.get(content.call_id)
                if pending is not None and not pending.ended:
                    pending.ended = True
                    if self._eager:
                        eager.append(pending.calling())
                        del self._calls[pending.call_id]
        if eager:
            return (result, AgentResponseResult(self._id, self._model, None, eager))
        return (result,)

    def finish(self) -> Sequence[AgentResponseResult]:
        calls = [p.calling() for p in self._calls.values() if p.ended]
        self._calls.clear()
        if not calls:
            return ()
        return (AgentResponseResult(self._id, self._model, None, calls),)

    def fail(self, error: Exception) -> Sequence[AgentResponseResult]:
        self._calls.clear()
        return ()


def flush_tool_calls(eager: bool = False) -> Operator[AgentResponseResult, AgentResponseResult]:
    """See :func:`rafrx.operators.flush_tool_calls`."""
    return reducer_operator(lambda: ToolCallFlusher(eager))
