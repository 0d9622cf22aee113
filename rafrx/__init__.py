"""rafrx: a streaming message model for LLM agents, on ReactiveX.

An LLM provider's SSE stream becomes an ``Observable`` of typed updates;
composable operators turn it into :mod:`~rafrx.content` items, events and
finally one :class:`AgentResponse`.

Example:
    >>> import reactivex
    >>> from rafrx import updates, operators as ops, FinishReason
    >>> stream = reactivex.from_iterable(
    ...     [updates.TextDelta("Hello"), updates.Finish(FinishReason.STOP)])
    >>> stream.pipe(ops.convert(), ops.aggregate()).run().text
    'Hello'
"""

import logging as _logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rafrx import content, errors, events, operators, response, sources, updates
from rafrx.agent import Agent
from rafrx.content import (
    Content,
    ErrorContent,
    ReasoningContent,
    ResponseMetadata,
    TextContent,
    ToolCallArgsContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
    ToolCalledContent,
    ToolCallEndContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
    UriContent,
    UsageContent,
)
from rafrx.errors import (
    ConnectTimeout,
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    IncompleteStream,
    InvalidToolArguments,
    LimitExceeded,
    MalformedEvent,
    MaxStepsExceeded,
    ProtocolError,
    ProviderError,
    RafrxError,
    StreamInterrupted,
    StreamTimeout,
    ToolApprovalDenied,
    ToolError,
    ToolExecutionError,
    ToolNotFound,
    ToolTimeout,
    TransportError,
    TurnTimeout,
)
from rafrx.events import Event, FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.history import ContextProvider, HistoryProvider, InMemoryHistoryProvider
from rafrx.messages import ChatMessage, MessageRole, MessageSource, ToolCall
from rafrx.notebook import live, timeline
from rafrx.operators import (
    accumulate_tool_calls,
    aggregate,
    convert,
    execute_tools,
    flush_tool_calls,
    parse_args_stream,
    split_legacy_delta,
)
from rafrx.operators._aggregate import collect_agent_response
from rafrx.recorder import record, replay
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.sources import UpdateDecoder, from_sse
from rafrx.tools import Tool, ToolApprovalResponse, tool
from rafrx.updates import AgentResponseUpdate

if TYPE_CHECKING:
    from rafrx.sources.clients import (
        AnthropicClient,
        LLMClient,
        OpenAIChatClient,
        OpenAIResponsesClient,
        RetryPolicy,
        Timeouts,
    )

__version__ = "0.1.0"

# rafrx's log records go where the application's logging sends them, and nowhere when
# it configures none: not to stderr through Python's last-resort handler (the logging
# HOWTO's "Configuring Logging for a Library").
_logging.getLogger("rafrx").addHandler(_logging.NullHandler())

# The names the response classes' annotations use, which rafrx.response imports only
# for type checkers (content and events import it): typing.get_type_hints() (cattrs,
# pydantic …) finds them in the module at run time.
vars(response).update(
    Iterable=Iterable, Content=Content, Event=Event, ChatMessage=ChatMessage, ToolCall=ToolCall
)

# The HTTP clients load aiohttp, which is most of ``import rafrx``'s time: they are
# imported on first use, so the pure operators and from_sse import quickly.
_CLIENTS = frozenset(
    {
        "AnthropicClient",
        "LLMClient",
        "OpenAIChatClient",
        "OpenAIResponsesClient",
        "RetryPolicy",
        "Timeouts",
    }
)


def __getattr__(name: str) -> Any:
    if name in _CLIENTS:
        from rafrx.sources import clients

        value = getattr(clients, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rafrx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Agent",
    "AgentResponse",
    "AgentResponseResult",
    "AgentResponseUpdate",
    "AnthropicClient",
    "ChatMessage",
    "ConnectTimeout",
    "Content",
    "ContentTypeError",
    "ContextProvider",
    "ErrorContent",
    "Event",
    "FinishEvent",
    "FinishReason",
    "HTTPStatusError",
    "HistoryProvider",
    "IdleTimeout",
    "InMemoryHistoryProvider",
    "IncompleteStream",
    "InvalidToolArguments",
    "LLMClient",
    "LimitExceeded",
    "MalformedEvent",
    "MaxStepsExceeded",
    "MessageRole",
    "MessageSource",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "ProtocolError",
    "ProviderError",
    "RafrxError",
    "ReasoningContent",
    "ResponseMetadata",
    "ResponseStartedEvent",
    "RetryPolicy",
    "StreamInterrupted",
    "StreamTimeout",
    "TextContent",
    "Timeouts",
    "Tool",
    "ToolApprovalDenied",
    "ToolApprovalRequestEvent",
    "ToolApprovalResponse",
    "ToolCall",
    "ToolCallArgsContent",
    "ToolCallArgsParsedContent",
    "ToolCallArgsProgressContent",
    "ToolCallEndContent",
    "ToolCallIncompleteContent",
    "ToolCallStartContent",
    "ToolCalledContent",
    "ToolCallingContent",
    "ToolError",
    "ToolExecutionError",
    "ToolNotFound",
    "ToolTimeout",
    "TransportError",
    "TurnTimeout",
    "UpdateDecoder",
    "UriContent",
    "Usage",
    "UsageContent",
    "accumulate_tool_calls",
    "aggregate",
    "collect_agent_response",
    "content",
    "convert",
    "errors",
    "events",
    "execute_tools",
    "flush_tool_calls",
    "from_sse",
    "live",
    "operators",
    "parse_args_stream",
    "record",
    "replay",
    "sources",
    "split_legacy_delta",
    "timeline",
    "tool",
    "updates",
]
