"""``parse_args_stream``: arguments parsed while they stream (Parsed / Progress contents)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rafrx.content import (
    Content,
    ResponseMetadata,
    ToolCallArgsContent,
    ToolCallEndContent,
    ToolCallStartContent,
)
from rafrx.json_stream import StreamingArgsParser
from rafrx.operators._builders import parsed_content, progress_content
from rafrx.operators._inputs import not_a_result
from rafrx.operators._reducer import reducer_operator
from rafrx.response import AgentResponseResult
from rafrx.typing import Operator

__all__ = ["ArgsStreamParser", "CallParser", "parse_args_stream"]


class _Contents:
    """Builds one call's Parsed / Progress contents as its parser reports them."""

    __slots__ = ("call_id", "meta")

    def __init__(self, call_id: str, meta: ResponseMetadata) -> None:
        self.call_id = call_id
        self.meta = meta

    def progress(self, name: str, received: int, fragment: str) -> Content:
        return progress_content(self.call_id, name, received, fragment, self.meta)

    def parsed(self, name: str, value: Any) -> Content:
        return parsed_content(self.call_id, name, value, self.meta)


class CallParser:
    """One call's incremental parser, reporting contents (see :meth:`ArgsStreamParser.call`)."""

    __slots__ = ("contents", "parser")

    def __init__(self, call_id: str, meta: ResponseMetadata) -> None:
        self.contents = contents = _Contents(call_id, meta)
        self.parser = StreamingArgsParser(progress=contents.progress, member=contents.parsed)


class ArgsStreamParser:
    """The reducer behind :func:`parse_args_stream`: one incremental parser per call.

    Results without argument deltas pass through untouched (the same object).
    """

    __slots__ = ("_parsers",)

    def __init__(self) -> None:
        self._parsers: dict[str, CallParser] = {}

    def step(self, result: AgentResponseResult) -> Sequence[AgentResponseResult]:
        try:
            contents = result.contents
        except AttributeError:
            raise not_a_result(result, "parse_args_stream()") from None
        has_args = False
        for content in contents:
            if isinstance(content, ToolCallArgsContent):
                has_args = True
                break
            if isinstance(content, ToolCallStartContent):
                self.start(content)
            elif isinstance(content, ToolCallEndContent):
                self.end(content.call_id)
        if not has_args:
            return (result,)
        expanded: list[Content] = []
        for content in contents:
            expanded.append(content)
            if type(content) is ToolCallArgsContent:
                expanded.extend(self.parse(content))
            elif type(content) is ToolCallStartContent:
                self.start(content)
            elif type(content) is ToolCallEndContent:
                self.end(content.call_id)
        return (
            AgentResponseResult(
                result.id, result.model, result.finish_reason, expanded, result.events
            ),
        )

    def start(self, content: ToolCallStartContent) -> None:
        """A fresh parser for the call ``content`` starts (what :meth:`step` does with it)."""
        self._parsers[content.call_id] = CallParser(content.call_id, content.meta)

    def end(self, call_id: str) -> None:
        """Forget the call's parser: its arguments ended (what :meth:`step` does at its end)."""
        self._parsers.pop(call_id, None)

    def call(self, call_id: str) -> CallParser | None:
        """The parser of a call that has received arguments.

        ``call.parser.feed(delta)`` (with ``call.contents.meta`` set to the
        fragment's metadata) is what :meth:`parse` does with a fragment.
        """
        return self._parsers.get(call_id)

    def parse(self, content: ToolCallArgsContent) -> list[Content]:
        """The Parsed / Progress contents that follow ``content`` (what :meth:`step` inserts)."""
        call = self._parsers.get(content.call_id)
        if call is None:
            call = self._parsers[content.call_id] = CallParser(content.call_id, content.meta)
        call.contents.meta = content.meta  # they carry the fragment's metadata
        return call.parser.feed(content.args_delta)

    def finish(self) -> Sequence[AgentResponseResult]:
        return ()

    def fail(self, error: Exception) -> Sequence[AgentResponseResult]:
        return ()


def parse_args_stream() -> Operator[AgentResponseResult, AgentResponseResult]:
    """See :func:`rafrx.operators.parse_args_stream`."""
    return reducer_operator(ArgsStreamParser)
