"""Positional builders for the contents a stream makes on every chunk (and every tool call).

Each builds the same object as the class call, taking every field in order
(``meta`` included, which the class takes by keyword only): see
:func:`~rafrx._slot_init.slot_builder`.

Example:
    >>> from rafrx.content import ResponseMetadata, TextContent
    >>> meta = ResponseMetadata("resp_1", "gpt")
    >>> text_content("Hi", meta) == TextContent("Hi", meta=meta)
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from rafrx._slot_init import slot_builder
from rafrx.content import (
    Content,
    ReasoningContent,
    ResponseMetadata,
    TextContent,
    ToolCallArgsContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
    ToolCallEndContent,
    ToolCallStartContent,
)
from rafrx.events import Event
from rafrx.response import AgentResponseResult, FinishReason

__all__ = [
    "agent_result",
    "args_content",
    "end_content",
    "parsed_content",
    "progress_content",
    "reasoning_content",
    "start_content",
    "text_content",
]

text_content: Final[Callable[[str, ResponseMetadata], TextContent]] = slot_builder(TextContent)
reasoning_content: Final[Callable[[str, ResponseMetadata, Any], ReasoningContent]] = slot_builder(
    ReasoningContent
)
start_content: Final[Callable[[str, str, ResponseMetadata], ToolCallStartContent]] = slot_builder(
    ToolCallStartContent
)
end_content: Final[Callable[[str, ResponseMetadata], ToolCallEndContent]] = slot_builder(
    ToolCallEndContent
)
args_content: Final[Callable[[str, str, ResponseMetadata], ToolCallArgsContent]] = slot_builder(
    ToolCallArgsContent
)
progress_content: Final[
    Callable[[str, str, int, str, ResponseMetadata], ToolCallArgsProgressContent]
] = slot_builder(ToolCallArgsProgressContent)
parsed_content: Final[Callable[[str, str, Any, ResponseMetadata], ToolCallArgsParsedContent]] = (
    slot_builder(ToolCallArgsParsedContent)
)
agent_result: Final[
    Callable[
        [str | None, str | None, FinishReason | None, tuple[Content, ...], tuple[Event, ...]],
        AgentResponseResult,
    ]
] = slot_builder(AgentResponseResult)
