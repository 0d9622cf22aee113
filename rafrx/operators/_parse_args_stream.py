"""``parse_args_stream``: arguments parsed while they stream (Parsed / Progress contents)."""

from __future__ import annotations

from collections.abc import Sequence

from rafrx.content import (
    Content,
    ToolCallArgsContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
    ToolCallEndContent,
    ToolCallStartContent,
)
from rafrx.json_stream import ArgMember, StreamingArgsParser
from rafrx.operators._reducer import reducer_operator
from rafrx.response import AgentResponseResult
from rafrx.typing import Operator

__all__ = ["ArgsStreamParser", "parse_args_stream"]


class ArgsStreamParser:
    """The reducer behind :func:`parse_args_stream`: one incremental parser per call.

    Results without argument deltas pass through untouched (the same object).
    """

    __slots__ = ("_parsers",)

    def __init__(self) -> None:
        self._parsers: dict[str, StreamingArgsParser] = {}

    def step(self, result: AgentResponseResult) -> Sequence[AgentResponseResult]:
        contents = result.contents
        has_args = False
        for content in contents:
            if isinstance(content, ToolCallArgsContent):
                has_args = True
                break
            if isinstance(content, ToolCallStartContent):
                self._parsers[content.call_id] = StreamingArgsParser()
            elif isinstance(content, ToolCallEndContent):
                self._parsers.pop(content.call_id, None)
        if not has_args:
            return (result,)
        expanded: list[Content] = []
        for content in contents:
            expanded.append(content)
            if type(content) is ToolCallArgsContent:
                expanded.extend(self.parse(content))
            elif type(content) is ToolCallStartContent:
                self._parsers[content.call_id] = StreamingArgsParser()
            elif type(content) is ToolCallEndContent:
                self._parsers.pop(content.call_id, None)
        return (
            AgentResponseResult(
                result.id, result.model, result.finish_reason, expanded, result.events
            ),
        )

    def parse(self, content: ToolCallArgsContent) -> list[Content]:
        """The Parsed / Progress contents that follow ``content`` (what :meth:`step` inserts)."""
        parser = self._parsers.get(content.call_id)
        if parser is None:
            parser = self._parsers[content.call_id] = StreamingArgsParser()
        call_id, meta = content.call_id, content.meta
        out: list[Content] = []
        for event in parser.feed(content.args_delta):
            if type(event) is ArgMember:
                out.append(ToolCallArgsParsedContent(call_id, event.name, event.value, meta=meta))
            else:
                out.append(
                    ToolCallArgsProgressContent(
                        call_id, event.name, event.received, event.fragment, meta=meta
                    )
                )
        return out

    def finish(self) -> Sequence[AgentResponseResult]:
        return ()

    def fail(self, error: Exception) -> Sequence[AgentResponseResult]:
        return ()


def parse_args_stream() -> Operator[AgentResponseResult, AgentResponseResult]:
    """See :func:`rafrx.operators.parse_args_stream`."""
    return reducer_operator(ArgsStreamParser)
