"""The public names of ``/work/shared/DESIGN.md``, listed by hand from the contract.

``import rafrx; from rafrx import updates`` must expose every one of them, with
the field names, defaults and members the contract spells out.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from typing import Any

import attrs
import pytest

import rafrx
from rafrx import updates

# ---------------------------------------------------------------- names

TYPES = [
    "MessageRole",
    "MessageSource",
    "ToolCall",
    "ChatMessage",
    "Usage",
    "ResponseMetadata",
    "FinishReason",
    "AgentResponseResult",
    "AgentResponse",
]
CONTENTS = [
    "TextContent",
    "ReasoningContent",
    "UriContent",
    "ToolCallStartContent",
    "ToolCallArgsContent",
    "ToolCallArgsParsedContent",
    "ToolCallArgsProgressContent",
    "ToolCallEndContent",
    "ToolCallingContent",
    "ToolCallIncompleteContent",
    "ToolCalledContent",
    "UsageContent",
    "ErrorContent",
]
EVENTS = ["ResponseStartedEvent", "ToolApprovalRequestEvent", "FinishEvent"]
UNIONS = ["Content", "Event", "AgentResponseUpdate"]
OPERATORS = [
    "split_legacy_delta",
    "accumulate_tool_calls",
    "parse_args_stream",
    "flush_tool_calls",
    "aggregate",
    "convert",
]
AGENT_LAYER = ["tool", "Agent", "HistoryProvider", "InMemoryHistoryProvider", "ContextProvider"]
CLIENTS = ["OpenAIChatClient", "AnthropicClient", "OpenAIResponsesClient"]
ERRORS = [
    "RafrxError",
    "TransportError",
    "StreamInterrupted",
    "StreamTimeout",
    "HTTPStatusError",
    "ProtocolError",
    "MalformedEvent",
    "IncompleteStream",
    "ProviderError",
    "ToolError",
    "InvalidToolArguments",
]
UPDATES = [
    "TextDelta",
    "ReasoningDelta",
    "ToolCallDelta",
    "ToolCallStart",
    "ToolCallArgs",
    "ToolCallEnd",
    "ToolCalled",
    "ToolApprovalRequest",
    "Usage",
    "Finish",
    "Error",
    "ResponseMetadata",
    "Uri",
]
MODULES = [
    "rafrx.messages",
    "rafrx.updates",
    "rafrx.content",
    "rafrx.events",
    "rafrx.response",
    "rafrx.errors",
    "rafrx.sse",
    "rafrx.json_stream",
    "rafrx.sources",
    "rafrx.operators",
    "rafrx.tools",
    "rafrx.agent",
    "rafrx.history",
    "rafrx.testing",
    "rafrx.notebook",
]

TOP_LEVEL = [
    *TYPES,
    *CONTENTS,
    *EVENTS,
    *UNIONS,
    *OPERATORS,
    "collect_agent_response",
    *AGENT_LAYER,
    *CLIENTS,
    *ERRORS,
    "updates",
]


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_rafrx_exports(name: str) -> None:
    assert hasattr(rafrx, name), f"rafrx.{name} is missing"
    assert name in rafrx.__all__


def test_every_name_in_all_exists() -> None:
    assert [n for n in rafrx.__all__ if not hasattr(rafrx, n)] == []


@pytest.mark.parametrize("module", MODULES)
def test_modules_of_the_layout_import(module: str) -> None:
    assert importlib.import_module(module).__name__ == module


@pytest.mark.parametrize("name", UPDATES)
def test_updates_exports_the_thirteen_variants(name: str) -> None:
    assert inspect.isclass(getattr(updates, name))
    assert name in updates.__all__


def test_update_union_and_distinct_usage_metadata() -> None:
    assert {c.__name__ for c in typing.get_args(updates.AgentResponseUpdate)} == set(UPDATES)
    assert updates.Usage is not rafrx.Usage
    assert updates.ResponseMetadata is not rafrx.ResponseMetadata


@pytest.mark.parametrize("name", [*OPERATORS, "execute_tools"])
def test_operator_factories_live_in_rafrx_operators(name: str) -> None:
    factory = getattr(rafrx.operators, name)
    assert callable(factory)
    assert factory.__doc__, f"operators.{name} needs a docstring"


def test_sources_from_sse() -> None:
    from rafrx.sources import from_sse

    assert callable(from_sse)
    assert list(inspect.signature(from_sse).parameters)[:2] == ["chunks", "dialect"]
    assert inspect.signature(from_sse).parameters["dialect"].default == "openai-chat"


def test_streaming_args_parser() -> None:
    from rafrx.json_stream import StreamingArgsParser

    assert inspect.isclass(StreamingArgsParser)


@pytest.mark.parametrize("name", CLIENTS)
def test_clients_have_a_stream_method(name: str) -> None:
    client = getattr(rafrx, name)
    assert callable(client.stream)
    assert list(inspect.signature(client.stream).parameters)[1:3] == ["messages", "tools"]


# ---------------------------------------------------------------- shapes


def _fields(cls: Any) -> list[tuple[str, Any]]:
    return [(f.name, f.default) for f in attrs.fields(cls)]


def test_enum_members() -> None:
    assert {m.name: m.value for m in rafrx.MessageRole} == {
        "SYSTEM": "system",
        "USER": "user",
        "ASSISTANT": "assistant",
        "TOOL": "tool",
    }
    assert [m.name for m in rafrx.MessageSource] == [
        "EXTERNAL",
        "CHAT_HISTORY",
        "CONTEXT_PROVIDER",
        "TOOL_RESULT",
    ]
    assert [m.name for m in rafrx.FinishReason] == [
        "STOP",
        "LENGTH",
        "TOOL_CALLS",
        "CONTENT_FILTER",
        "ERROR",
        "OTHER",
    ]


def test_value_class_fields_and_defaults() -> None:
    assert [n for n, _ in _fields(rafrx.ToolCall)][:3] == ["id", "name", "arguments"]
    assert _fields(rafrx.ChatMessage)[:6] == [
        ("role", attrs.NOTHING),
        ("content", ""),
        ("name", None),
        ("tool_calls", None),
        ("tool_call_id", None),
        ("source", None),
    ]
    assert _fields(rafrx.Usage) == [
        ("prompt_tokens", 0),
        ("completion_tokens", 0),
        ("total_tokens", 0),
        ("reasoning_tokens", None),
        ("cached_tokens", None),
    ]
    assert _fields(rafrx.ResponseMetadata) == [("id", None), ("model", None)]
    assert _fields(rafrx.AgentResponseResult) == [
        ("id", None),
        ("model", None),
        ("finish_reason", None),
        ("contents", ()),
        ("events", ()),
    ]
    assert [n for n, _ in _fields(rafrx.AgentResponse)][:10] == [
        "id",
        "model",
        "text",
        "reasoning_text",
        "tool_calls",
        "tool_messages",
        "turn_transcript",
        "finish_reason",
        "usage",
        "source_agent_id",
    ]


def test_chat_message_constructors() -> None:
    for name in ("system", "user", "assistant", "assistant_with_tools", "tool"):
        assert callable(getattr(rafrx.ChatMessage, name))
    assert callable(rafrx.ChatMessage.from_openai)
    assert callable(rafrx.ChatMessage.user("x").to_openai)


def test_update_fields_and_defaults() -> None:
    assert _fields(updates.ToolCallDelta) == [
        ("index", attrs.NOTHING),
        ("id", None),
        ("name", None),
        ("arguments_delta", ""),
    ]
    assert _fields(updates.ToolCalled) == [
        ("id", attrs.NOTHING),
        ("result", None),
        ("error", None),
    ]
    assert [n for n, _ in _fields(updates.ToolApprovalRequest)] == [
        "call_id",
        "name",
        "arguments",
        "description",
    ]
    assert _fields(updates.Finish) == [("finish_reason", attrs.NOTHING), ("usage", None)]
    assert _fields(updates.Uri) == [("uri", attrs.NOTHING), ("media_type", None)]
    assert _fields(updates.ResponseMetadata) == [("id", None), ("model", None)]


@pytest.mark.parametrize(
    ("name", "match_args"),
    [
        ("TextContent", ("text",)),
        ("ReasoningContent", ("text",)),
        ("UriContent", ("uri", "media_type")),
        ("ToolCallStartContent", ("call_id", "name")),
        ("ToolCallArgsContent", ("call_id", "args_delta")),
        ("ToolCallArgsParsedContent", ("call_id", "name", "value")),
        ("ToolCallArgsProgressContent", ("call_id", "name", "received", "value")),
        ("ToolCallEndContent", ("call_id",)),
        ("ToolCallingContent", ("call_id", "name", "arguments", "raw_arguments", "error")),
        ("ToolCalledContent", ("call_id", "result", "error")),
        ("UsageContent", ("usage",)),
        ("ErrorContent", ("message",)),
        ("ResponseStartedEvent", ("id", "model")),
        ("ToolApprovalRequestEvent", ("call_id", "name", "arguments", "description")),
        ("FinishEvent", ("finish_reason", "usage")),
    ],
)
def test_content_and_event_match_args(name: str, match_args: tuple[str, ...]) -> None:
    cls = getattr(rafrx, name)
    assert cls.__match_args__ == match_args
    if name in CONTENTS:
        meta = attrs.fields_dict(cls)["meta"]
        assert meta.kw_only
        assert meta.default == rafrx.ResponseMetadata()


def test_unions_hold_exactly_the_listed_variants() -> None:
    assert {c.__name__ for c in typing.get_args(rafrx.Content)} == set(CONTENTS)
    assert {c.__name__ for c in typing.get_args(rafrx.Event)} == set(EVENTS)


def test_operator_signatures() -> None:
    assert inspect.signature(rafrx.operators.flush_tool_calls).parameters["eager"].default is False
    for name in ("split_legacy_delta", "accumulate_tool_calls", "parse_args_stream", "convert"):
        params = inspect.signature(getattr(rafrx.operators, name)).parameters.values()
        assert all(p.default is not inspect.Parameter.empty for p in params)


def test_import_rafrx_leaves_aiohttp_until_a_client_is_used() -> None:
    import subprocess
    import sys

    script = (
        "import sys, rafrx\n"
        "print('aiohttp' in sys.modules)\n"
        "from rafrx import OpenAIChatClient, Timeouts\n"
        "print('aiohttp' in sys.modules, OpenAIChatClient.__name__, Timeouts.__name__)\n"
        "print(rafrx.LLMClient is __import__('rafrx.sources.clients').sources.clients.LLMClient)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split("\n")
    assert out[:3] == ["False", "True OpenAIChatClient Timeouts", "True"]
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = rafrx.NoSuchName  # type: ignore[attr-defined]
    assert "OpenAIChatClient" in dir(rafrx)
