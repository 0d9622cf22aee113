"""rafrx as a typed, importable API that users write code against.

Checks the public names of the design contract (DESIGN.md) from the user's side:
where they import from, their runtime signatures and shapes, their value
semantics (equality, hashing, copies, pickling, ``attrs.evolve``), that the
wire converters neither mutate their inputs nor share their outputs, that the
docstrings carry examples, and that small user programs (and the README's own
examples) pass ``mypy --strict`` without ``Any`` leaking where a type is known.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import importlib
import inspect
import json
import os
import pickle
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest
import reactivex

import rafrx
from rafrx import content as c
from rafrx import events as e
from rafrx import messages as m
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage

ROOT = Path(__file__).resolve().parent.parent
USAGE = Usage(1, 2, 3)
STOP = FinishReason.STOP

# ---------------------------------------------------------------- names and where they live

#: name -> the module DESIGN.md puts it in (each also re-exported from ``rafrx``).
HOMES = {
    "MessageRole": "rafrx.messages",
    "MessageSource": "rafrx.messages",
    "ToolCall": "rafrx.messages",
    "ChatMessage": "rafrx.messages",
    "ResponseMetadata": "rafrx.content",
    "Content": "rafrx.content",
    **dict.fromkeys(
        (
            "TextContent",
            "ReasoningContent",
            "UriContent",
            "ToolCallStartContent",
            "ToolCallArgsContent",
            "ToolCallArgsParsedContent",
            "ToolCallArgsProgressContent",
            "ToolCallEndContent",
            "ToolCallingContent",
            "ToolCalledContent",
            "UsageContent",
            "ErrorContent",
        ),
        "rafrx.content",
    ),
    "Event": "rafrx.events",
    "ResponseStartedEvent": "rafrx.events",
    "ToolApprovalRequestEvent": "rafrx.events",
    "FinishEvent": "rafrx.events",
    "Usage": "rafrx.response",
    "FinishReason": "rafrx.response",
    "AgentResponseResult": "rafrx.response",
    "AgentResponse": "rafrx.response",
    "AgentResponseUpdate": "rafrx.updates",
    "RafrxError": "rafrx.errors",
    "from_sse": "rafrx.sources",
    "OpenAIChatClient": "rafrx.sources.clients",
    "AnthropicClient": "rafrx.sources.clients",
    "OpenAIResponsesClient": "rafrx.sources.clients",
    "split_legacy_delta": "rafrx.operators",
    "accumulate_tool_calls": "rafrx.operators",
    "parse_args_stream": "rafrx.operators",
    "flush_tool_calls": "rafrx.operators",
    "execute_tools": "rafrx.operators",
    "aggregate": "rafrx.operators",
    "convert": "rafrx.operators",
    "tool": "rafrx.tools",
    "Agent": "rafrx.agent",
    "HistoryProvider": "rafrx.history",
    "InMemoryHistoryProvider": "rafrx.history",
    "ContextProvider": "rafrx.history",
}


@pytest.mark.parametrize(("name", "home"), sorted(HOMES.items()))
def test_design_name_is_the_same_object_in_its_module_and_in_rafrx(name: str, home: str) -> None:
    module = importlib.import_module(home)
    assert getattr(module, name) is getattr(rafrx, name)
    assert name in rafrx.__all__
    if hasattr(module, "__all__"):
        assert name in module.__all__, f"{home}.__all__ misses {name}"


def test_star_import_gives_every_name_of_all_including_the_lazy_clients() -> None:
    namespace: dict[str, Any] = {}
    exec("from rafrx import *", namespace)
    assert set(rafrx.__all__) <= set(namespace)
    assert namespace["OpenAIChatClient"] is rafrx.OpenAIChatClient


def test_the_unions_work_with_isinstance_at_runtime() -> None:
    assert isinstance(c.TextContent("x"), rafrx.Content)
    assert not isinstance(c.TextContent("x"), rafrx.Event)
    assert isinstance(e.FinishEvent(STOP), rafrx.Event)
    assert isinstance(u.TextDelta("x"), rafrx.AgentResponseUpdate)
    assert not isinstance(u.TextDelta("x"), rafrx.Content)


# ---------------------------------------------------------------- runtime signatures

REQ = inspect.Parameter.empty
POS = inspect.Parameter.POSITIONAL_OR_KEYWORD

#: callable -> its leading (name, default) parameters as DESIGN.md writes them.
SIGNATURES: list[tuple[Any, list[tuple[str, Any]]]] = [
    (m.ToolCall, [("id", REQ), ("name", REQ)]),
    (
        m.ChatMessage,
        [
            ("role", REQ),
            ("content", ""),
            ("name", None),
            ("tool_calls", None),
            ("tool_call_id", None),
            ("source", None),
        ],
    ),
    (
        Usage,
        [
            ("prompt_tokens", 0),
            ("completion_tokens", 0),
            ("total_tokens", 0),
            ("reasoning_tokens", None),
            ("cached_tokens", None),
        ],
    ),
    (c.ResponseMetadata, [("id", None), ("model", None)]),
    (u.TextDelta, [("delta", REQ)]),
    (u.ReasoningDelta, [("delta", REQ)]),
    (u.ToolCallDelta, [("index", REQ), ("id", None), ("name", None), ("arguments_delta", "")]),
    (u.ToolCallStart, [("id", REQ), ("name", REQ)]),
    (u.ToolCallArgs, [("id", REQ), ("args_delta", REQ)]),
    (u.ToolCallEnd, [("id", REQ)]),
    (u.ToolCalled, [("id", REQ), ("result", None), ("error", None)]),
    (
        u.ToolApprovalRequest,
        [("call_id", REQ), ("name", REQ), ("arguments", REQ), ("description", "")],
    ),
    (u.Usage, [("usage", REQ)]),
    (u.Finish, [("finish_reason", REQ), ("usage", None)]),
    (u.Error, [("message", REQ)]),
    (u.ResponseMetadata, [("id", None), ("model", None)]),
    (u.Uri, [("uri", REQ), ("media_type", None)]),
    (c.TextContent, [("text", REQ)]),
    (c.ReasoningContent, [("text", REQ)]),
    (c.UriContent, [("uri", REQ), ("media_type", None)]),
    (c.ToolCallStartContent, [("call_id", REQ), ("name", REQ)]),
    (c.ToolCallArgsContent, [("call_id", REQ), ("args_delta", REQ)]),
    (c.ToolCallArgsParsedContent, [("call_id", REQ), ("name", REQ), ("value", REQ)]),
    (
        c.ToolCallArgsProgressContent,
        [("call_id", REQ), ("name", REQ), ("received", REQ), ("value", REQ)],
    ),
    (c.ToolCallEndContent, [("call_id", REQ)]),
    (
        c.ToolCallingContent,
        [
            ("call_id", REQ),
            ("name", REQ),
            ("arguments", REQ),
            ("raw_arguments", ""),
            ("error", None),
        ],
    ),
    (c.ToolCalledContent, [("call_id", REQ), ("result", None), ("error", None)]),
    (c.UsageContent, [("usage", REQ)]),
    (c.ErrorContent, [("message", REQ)]),
    (e.ResponseStartedEvent, [("id", Ellipsis), ("model", Ellipsis)]),
    (
        e.ToolApprovalRequestEvent,
        [("call_id", REQ), ("name", REQ), ("arguments", REQ), ("description", Ellipsis)],
    ),
    (e.FinishEvent, [("finish_reason", REQ), ("usage", None)]),
    (
        AgentResponseResult,
        [("id", None), ("model", None), ("finish_reason", None), ("contents", ()), ("events", ())],
    ),
    (
        AgentResponse,
        [
            ("id", Ellipsis),
            ("model", Ellipsis),
            ("text", Ellipsis),
            ("reasoning_text", Ellipsis),
            ("tool_calls", Ellipsis),
            ("tool_messages", Ellipsis),
            ("turn_transcript", Ellipsis),
            ("finish_reason", Ellipsis),
            ("usage", Ellipsis),
            ("source_agent_id", Ellipsis),
        ],
    ),
    (
        rafrx.Agent,
        [
            ("client", REQ),
            ("tools", ()),
            ("instructions", None),
            ("history", None),
            ("context_providers", ()),
            ("approver", None),
            ("max_steps", 10),
            ("id", None),
        ],
    ),
    (rafrx.OpenAIChatClient, [("base_url", REQ), ("api_key", None), ("model", Ellipsis)]),
    (rafrx.AnthropicClient, [("base_url", REQ), ("api_key", None), ("model", Ellipsis)]),
    (rafrx.OpenAIResponsesClient, [("base_url", REQ), ("api_key", None), ("model", Ellipsis)]),
    (ops.execute_tools, [("tools", REQ), ("approver", None)]),
    (ops.flush_tool_calls, [("eager", False)]),
    (rafrx.from_sse, [("chunks", REQ), ("dialect", "openai-chat")]),
    (rafrx.collect_agent_response, [("results", REQ)]),
]


@pytest.mark.parametrize(
    ("target", "expected"), SIGNATURES, ids=[t.__qualname__ for t, _ in SIGNATURES]
)
def test_runtime_signature_matches_the_design(target: Any, expected: list[tuple[str, Any]]) -> None:
    """``Ellipsis`` as a default: DESIGN names the parameter but fixes no default."""
    params = list(inspect.signature(target).parameters.values())
    assert [p.name for p in params[: len(expected)]] == [n for n, _ in expected]
    for param, (name, default) in zip(params, expected, strict=False):
        assert param.kind is POS, f"{name} must be passable positionally"
        if default is not Ellipsis:
            assert param.default == default, f"{name}: {param.default!r} != {default!r}"
    # every parameter past the DESIGN's is optional: the DESIGN's calls keep working
    for param in params[len(expected) :]:
        assert param.default is not REQ or param.kind in (
            inspect.Parameter.VAR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        ), param.name


@pytest.mark.parametrize(
    "cls",
    [getattr(c, n) for n in c.__all__ if n not in ("Content", "ResponseMetadata")],
    ids=lambda cls: cls.__name__,
)
def test_content_meta_is_the_last_field_and_keyword_only_in_the_signature(cls: Any) -> None:
    params = inspect.signature(cls).parameters
    assert params["meta"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["meta"].default == c.ResponseMetadata()
    assert [f.name for f in attrs.fields(cls) if not f.kw_only] == list(cls.__match_args__)


def test_enum_values_are_the_designs_strings_and_parse_back() -> None:
    for enum_cls in (m.MessageRole, m.MessageSource, FinishReason):
        for member in enum_cls:
            assert isinstance(member, str)
            assert enum_cls(member.value) is member
            assert str(member) == member.value  # StrEnum: usable as the wire string
    assert [r.value for r in m.MessageRole] == ["system", "user", "assistant", "tool"]
    assert m.ChatMessage("user", "x").role is m.MessageRole.USER


# ---------------------------------------------------------------- shapes: frozen, slotted, tuples

DESIGN_VALUES: list[Any] = [
    m.ToolCall("c1", "f", ()),
    m.ChatMessage.user("hi"),
    Usage(1, 2, 3),
    c.ResponseMetadata("r", "m"),
    e.ResponseStartedEvent("r", "m"),
    e.ToolApprovalRequestEvent("c1", "f", (), "d"),
    e.FinishEvent(STOP, USAGE),
    AgentResponseResult("r", "m", STOP),
    AgentResponse("r", "m", "t"),
    rafrx.ToolApprovalResponse("c1", True),
]


@pytest.mark.parametrize("value", DESIGN_VALUES, ids=lambda v: type(v).__name__)
def test_design_value_classes_are_frozen_and_slotted(value: Any) -> None:
    cls = type(value)
    assert attrs.has(cls)
    assert "__slots__" in vars(cls)
    assert not hasattr(value, "__dict__")
    for field in attrs.fields(cls):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(value, field.name, getattr(value, field.name))
    with pytest.raises((AttributeError, TypeError)):
        value.not_a_field = 1  # no __dict__ to put it in


def test_sequences_are_tuples_whatever_iterable_is_passed() -> None:
    call = m.ToolCall("c1", "f", {})
    assert m.ChatMessage("assistant", tool_calls=[call]).tool_calls == (call,)
    assert m.ChatMessage("assistant", tool_calls=iter([call])).tool_calls == (call,)
    assert m.ChatMessage.assistant_with_tools("", (x for x in [call])).tool_calls == (call,)
    assert m.ChatMessage("assistant", tool_calls=[]).tool_calls == ()
    evolved = attrs.evolve(m.ChatMessage.user("x"), tool_calls=[call])
    assert type(evolved.tool_calls) is tuple
    response = AgentResponse(
        tool_calls=[call],
        tool_messages=iter([m.ChatMessage.tool("r", "c1")]),
        turn_transcript=[m.ChatMessage.assistant("a")],
    )
    for field in ("tool_calls", "tool_messages", "turn_transcript"):
        assert type(getattr(response, field)) is tuple, field
    result = attrs.evolve(
        AgentResponseResult(), contents=[c.TextContent("a")], events=iter([e.FinishEvent(STOP)])
    )
    assert type(result.contents) is tuple
    assert type(result.events) is tuple
    assert result.events == (e.FinishEvent(STOP),)


# ---------------------------------------------------------------- runtime type hints

SLOT_INIT_CLASSES = [
    c.TextContent,
    c.ReasoningContent,
    c.UriContent,
    c.ToolCallArgsParsedContent,
    c.ToolCallingContent,
    c.ToolCalledContent,
    c.UsageContent,
    u.ReasoningDelta,
    u.Finish,
    u.Usage,
    u.ToolApprovalRequest,
    AgentResponseResult,
]


@pytest.mark.parametrize("cls", SLOT_INIT_CLASSES, ids=lambda cls: cls.__name__)
def test_init_type_hints_resolve_like_attrs_own(cls: Any) -> None:
    # ToolCallIncompleteContent has attrs' own __init__: its hints resolve
    assert "meta" in typing.get_type_hints(c.ToolCallIncompleteContent.__init__)
    hints = typing.get_type_hints(cls.__init__)  # (was NameError: 'ResponseMetadata')
    assert set(hints) == set(cls.__init__.__annotations__)
    # (attrs leaves a field converted by an unannotated callable, tuple, unannotated)
    assert set(hints) >= {f.name for f in attrs.fields(cls) if f.converter is None}
    inspect.signature(cls, eval_str=True)


@pytest.mark.parametrize("cls", [AgentResponse, AgentResponseResult], ids=lambda k: k.__name__)
def test_response_classes_type_hints_resolve(cls: Any) -> None:
    hints = typing.get_type_hints(cls)
    assert set(hints) >= {f.name for f in attrs.fields(cls)}
    attrs.resolve_types(cls)
    assert all(not isinstance(f.type, str) for f in attrs.fields(cls))


# ---------------------------------------------------------------- value semantics

#: one hashable value of every content, event, update, message and response class.
HASHABLE: list[Any] = [
    u.TextDelta("a"),
    u.ReasoningDelta("r", provider_data=("sig",)),
    u.ToolCallDelta(0, "c1", "f", "{"),
    u.ToolCallStart("c1", "f"),
    u.ToolCallArgs("c1", "{"),
    u.ToolCallEnd("c1"),
    u.ToolCalled("c1", "r"),
    u.ToolApprovalRequest("c1", "f", ("a",), "d"),
    u.Usage(USAGE),
    u.Finish(STOP, USAGE),
    u.Error("boom", error_type="overloaded"),
    u.ResponseMetadata("r", "m"),
    u.Uri("https://x", "text/html"),
    c.TextContent("t", meta=c.ResponseMetadata("r", "m")),
    c.ReasoningContent("r", provider_data="sig"),
    c.UriContent("https://x", "text/html"),
    c.ToolCallStartContent("c1", "f"),
    c.ToolCallArgsContent("c1", "{"),
    c.ToolCallArgsParsedContent("c1", "n", 1),
    c.ToolCallArgsProgressContent("c1", "n", 2, "é"),
    c.ToolCallEndContent("c1"),
    c.ToolCallingContent("c1", "f", None, "{", error="invalid JSON"),
    c.ToolCallIncompleteContent("c1", "f", '{"a', None, FinishReason.LENGTH),
    c.ToolCalledContent("c1", error="boom"),
    c.UsageContent(USAGE),
    c.ErrorContent("boom"),
    e.ResponseStartedEvent("r", "m"),
    e.ToolApprovalRequestEvent("c1", "f", None, "d"),
    e.FinishEvent(FinishReason.TOOL_CALLS, USAGE),
    Usage(1, 2, 3, 4, 5),
    c.ResponseMetadata("r", "m"),
    m.ToolCall("c1", "f", None, raw_arguments="{", error="bad"),
    m.ChatMessage.user("hi", source=m.MessageSource.EXTERNAL),
    m.ChatMessage.assistant_with_tools("x", [m.ToolCall("c1", "f", ("t",))], source=None),
    m.ChatMessage.tool("r", "c1", is_error=True),
    m.ChatMessage("assistant", "a", reasoning="why"),
    AgentResponseResult("r", "m", STOP, [c.TextContent("x")], [e.FinishEvent(STOP)]),
    AgentResponse(
        "r",
        "m",
        "t",
        None,
        [m.ToolCall("c1", "f", None)],
        [m.ChatMessage.tool("r", "c1")],
        [m.ChatMessage.assistant("t")],
        STOP,
        USAGE,
        "agent",
    ),
    rafrx.ToolApprovalResponse("c1", False, "no"),
]


@pytest.mark.parametrize(
    "value", HASHABLE, ids=lambda v: f"{type(v).__module__}.{type(v).__name__}"
)
def test_value_semantics_eq_hash_copy_pickle_evolve(value: Any) -> None:
    clones = [
        copy.copy(value),
        copy.deepcopy(value),
        pickle.loads(pickle.dumps(value)),
        attrs.evolve(value),
    ]
    for clone in clones:
        assert clone == value
        assert not clone.__ne__(value)
        assert hash(clone) == hash(value)
        assert type(clone) is type(value)
    assert {value, *clones} == {value}
    assert value != object()
    first = attrs.fields(type(value))[0]
    other = attrs.evolve(value, **{first.name: _different(getattr(value, first.name))})
    assert other != value


def _different(value: Any) -> Any:
    if isinstance(value, FinishReason):
        return FinishReason.OTHER if value is not FinishReason.OTHER else FinishReason.STOP
    if isinstance(value, m.MessageRole):
        return m.MessageRole.SYSTEM if value is not m.MessageRole.SYSTEM else m.MessageRole.USER
    if isinstance(value, Usage):
        return value + value
    if isinstance(value, int):
        return value + 1
    return f"{value}-other"


@pytest.mark.parametrize(
    "value", HASHABLE, ids=lambda v: f"{type(v).__module__}.{type(v).__name__}"
)
def test_no_ordering_is_defined(value: Any) -> None:
    for op in ("__lt__", "__le__", "__gt__", "__ge__"):
        assert getattr(value, op)(value) is NotImplemented
    with pytest.raises(TypeError):
        _ = value < value  # type: ignore[operator]


UNHASHABLE: list[Any] = [
    m.ToolCall("c1", "f", {"a": 1}),
    m.ChatMessage("assistant", "", provider_data={"anthropic_thinking": ()}),
    m.ChatMessage.assistant_with_tools("", [m.ToolCall("c1", "f", {"a": 1})]),
    c.ToolCallArgsParsedContent("c1", "n", [1, 2]),
    c.ToolCallingContent("c1", "f", {"a": 1}, '{"a": 1}'),
    c.ReasoningContent("r", provider_data={"type": "thinking", "signature": "s"}),
    u.ToolApprovalRequest("c1", "f", {"a": 1}),
    e.ToolApprovalRequestEvent("c1", "f", {"a": 1}),
    AgentResponseResult(contents=[c.ToolCallingContent("c1", "f", {"a": 1})]),
    AgentResponse(tool_calls=[m.ToolCall("c1", "f", {"a": 1})]),
]


@pytest.mark.parametrize("value", UNHASHABLE, ids=lambda v: type(v).__name__)
def test_hash_raises_a_clear_type_error_only_for_dict_or_list_fields(value: Any) -> None:
    with pytest.raises(TypeError, match=r"unhashable type: '(dict|list)'"):
        hash(value)
    # still equal to its copies, and it round-trips
    assert copy.deepcopy(value) == value
    assert pickle.loads(pickle.dumps(value)) == value
    assert attrs.evolve(value) == value


def test_equal_spellings_of_one_value_are_equal_and_hash_equal() -> None:
    pairs = [
        (m.ChatMessage("user", "x"), m.ChatMessage.user("x")),
        (
            m.ChatMessage("assistant", tool_calls=[m.ToolCall("c", "f", ())]),
            m.ChatMessage(m.MessageRole.ASSISTANT, tool_calls=(m.ToolCall("c", "f", ()),)),
        ),
        (
            AgentResponseResult(contents=[c.TextContent("a")]),
            AgentResponseResult(None, None, None, (c.TextContent("a"),)),
        ),
        (Usage() + USAGE, USAGE),
        (c.TextContent("a"), c.TextContent("a", meta=c.ResponseMetadata())),
    ]
    for left, right in pairs:
        assert left == right
        assert hash(left) == hash(right)


def _module_namespace(value: Any) -> dict[str, Any]:
    return dict(vars(sys.modules[type(value).__module__]))


REPR_EVALUABLE = [
    v
    for v in HASHABLE
    if not any(
        isinstance(getattr(v, f.name), FinishReason | m.MessageRole | m.MessageSource)
        or attrs.has(type(getattr(v, f.name)))
        or isinstance(getattr(v, f.name), tuple)
        for f in attrs.fields(type(v))
        if f.repr
    )
    and not any(
        not f.repr and getattr(v, f.name) != f.default
        for f in attrs.fields(type(v))
        if f.default is not attrs.NOTHING
    )
] + [m.ToolCall("c1", "f", {"path": "a.py", "n": [1, 2.5, None, True]})]


@pytest.mark.parametrize("value", REPR_EVALUABLE, ids=lambda v: type(v).__name__)
def test_constructor_like_repr_round_trips(value: Any) -> None:
    text = repr(value)
    assert text.startswith(type(value).__name__ + "(")
    assert eval(text, _module_namespace(value)) == value


# ---------------------------------------------------------------- wire converters


def _conversation() -> list[m.ChatMessage]:
    reasoning_item = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Look it up."}],
        "encrypted_content": "enc",
    }
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    return [
        m.ChatMessage.system("Be brief."),
        m.ChatMessage.user("Weather?"),
        m.ChatMessage(
            "assistant",
            "Checking.",
            tool_calls=[m.ToolCall("c1", "weather", {"city": "Paris", "days": [1, 2]})],
            reasoning="hmm",
            provider_data={
                m.ANTHROPIC_THINKING: (thinking,),
                m.OPENAI_REASONING: (reasoning_item,),
            },
        ),
        m.ChatMessage.tool("sunny", "c1"),
        m.ChatMessage.assistant("Sunny."),
    ]


def test_converters_never_mutate_their_inputs() -> None:
    from rafrx.sources.clients import to_responses_input

    conversation = _conversation()
    snapshot = copy.deepcopy(conversation)
    for msg in conversation:
        msg.to_openai()
    m.to_anthropic(conversation)
    to_responses_input(conversation)
    m.with_call_ids(conversation)
    assert conversation == snapshot
    assert [msg.provider_data for msg in conversation] == [s.provider_data for s in snapshot]

    wire = [msg.to_openai() for msg in snapshot]
    wire_before = copy.deepcopy(wire)
    for d in wire:
        m.ChatMessage.from_openai(d)
    assert wire == wire_before

    system, anthropic_wire = m.to_anthropic(snapshot)
    anthropic_before = copy.deepcopy(anthropic_wire)
    m.from_anthropic(system, anthropic_wire)
    m.from_anthropic([{"type": "text", "text": "Be brief."}], anthropic_wire)
    assert anthropic_wire == anthropic_before


def test_to_openai_output_is_not_shared_with_the_message() -> None:
    msg = _conversation()[2]
    before = copy.deepcopy(msg)
    out = msg.to_openai()
    out["tool_calls"][0]["function"]["name"] = "hacked"
    out["tool_calls"].append({"id": "x"})
    out["content"] = "hacked"
    assert msg == before
    assert msg.to_openai() != out


def test_to_anthropic_output_is_not_shared_with_the_messages() -> None:
    conversation = _conversation()
    snapshot = copy.deepcopy(conversation)
    _, wire = m.to_anthropic(conversation)
    assistant = wire[1]
    for block in assistant["content"]:
        if block["type"] == "tool_use":
            block["input"]["days"].append(99)
            block["input"]["city"] = "hacked"
        if block["type"] == "thinking":
            block["signature"] = "hacked"
    assert conversation == snapshot
    assert conversation[2].provider_data == snapshot[2].provider_data


def test_to_responses_input_output_is_not_shared_with_the_messages() -> None:
    from rafrx.sources.clients import to_responses_input

    conversation = _conversation()
    snapshot = copy.deepcopy(conversation)
    items = to_responses_input(conversation)
    reasoning = next(i for i in items if i.get("type") == "reasoning")
    reasoning["summary"].append({"type": "summary_text", "text": "hacked"})
    assert conversation[2].provider_data == snapshot[2].provider_data


def test_agent_response_to_dict_is_not_shared_with_the_response() -> None:
    response = AgentResponse(
        tool_calls=[m.ToolCall("c1", "f", {"xs": [1]})],
        turn_transcript=_conversation()[2:],
        usage=USAGE,
    )
    before = copy.deepcopy(response)
    out = response.to_dict()
    out["tool_calls"][0]["arguments"]["xs"].append(2)
    out["usage"]["total_tokens"] = 999
    out["turn_transcript"][0]["tool_calls"].clear()
    assert response == before


def _weather_tool() -> rafrx.Tool:
    def weather(city: str, days: int = 1) -> str:
        """Forecast for a city.

        Args:
            city: The city's name.
            days: How many days ahead.
        """
        return f"{city}: {days}"

    return rafrx.tool(weather)


@pytest.mark.parametrize("form", ["to_openai", "to_anthropic", "to_responses"])
def test_tool_definitions_are_not_shared_with_the_tool(form: str) -> None:
    weather = _weather_tool()
    before = copy.deepcopy(dict(weather.parameters))
    out = getattr(weather, form)()
    schema = out.get("input_schema") or out.get("parameters") or out["function"]["parameters"]
    schema["required"].append("days")
    schema["properties"]["city"]["description"] = "hacked"
    assert dict(weather.parameters) == before
    assert weather.validate({"city": "Paris"}) == {"city": "Paris"}


def _run_tool_call(tool: rafrx.Tool, raw: str) -> tuple[AgentResponse, list[Any]]:
    seen: list[Any] = []
    stream = reactivex.from_iterable(
        [
            u.ToolCallStart("c1", tool.name),
            u.ToolCallArgs("c1", raw),
            u.ToolCallEnd("c1"),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    ).pipe(ops.convert(), ops.execute_tools([tool]))

    async def main() -> AgentResponse:
        from reactivex import operators as rx

        return await rafrx.collect_agent_response(stream.pipe(rx.do_action(seen.append)))

    return asyncio.run(main()), seen


def test_a_typed_tool_mutating_its_list_argument_leaves_the_call_as_the_model_sent_it() -> None:
    @rafrx.tool
    def push(items: list[int]) -> str:
        """Push."""
        items.append(99)
        return "ok"

    response, _ = _run_tool_call(push, '{"items": [1]}')
    assert response.tool_messages[0].content == "ok"
    assert response.tool_calls[0].arguments == {"items": [1]}


@pytest.mark.parametrize("kind", ["any-typed", "dict-typed", "hand-built"])
def test_a_tool_mutating_its_arguments_does_not_rewrite_the_recorded_call(kind: str) -> None:
    def mutate(items: Any) -> str:
        items.append(99)
        return "ok"

    def mutate_dict(data: dict[str, Any]) -> str:
        data["items"].append(99)
        return "ok"

    if kind == "any-typed":
        tool, raw = rafrx.tool(mutate, description="Mutate."), '{"items": [1]}'
        expected: Any = {"items": [1]}
    elif kind == "dict-typed":
        tool, raw = rafrx.tool(mutate_dict, description="Mutate."), '{"data": {"items": [1]}}'
        expected = {"data": {"items": [1]}}
    else:
        schema = {"type": "object", "properties": {"items": {"type": "array"}}}
        tool, raw = rafrx.Tool("mutate", "Mutate.", schema, mutate), '{"items": [1]}'
        expected = {"items": [1]}
    response, seen = _run_tool_call(tool, raw)
    assert response.tool_messages[0].content == "ok"
    calling = [x for r in seen for x in r.contents if isinstance(x, c.ToolCallingContent)]
    assert calling[0].arguments == expected
    assert response.tool_calls[0].arguments == expected
    sent_back = response.turn_transcript[0].to_openai()["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent_back) == expected


# ---------------------------------------------------------------- docstrings


def _public_objects(modules: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    ids: set[int] = set()
    for name in modules:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if inspect.ismodule(obj) or typing.get_origin(obj) is not None:
                continue  # modules, and type aliases (unions, Literal, Callable[...])
            if not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue  # constants
            if id(obj) in ids:
                continue
            ids.add(id(obj))
            found[f"{name}.{attr}"] = obj
    return found


def _has_example(obj: Any) -> bool:
    doc = inspect.getdoc(obj) or ""
    return "Example" in doc or ">>>" in doc


SUBMODULES = [
    "rafrx.messages",
    "rafrx.updates",
    "rafrx.content",
    "rafrx.events",
    "rafrx.response",
    "rafrx.errors",
    "rafrx.sse",
    "rafrx.json_stream",
    "rafrx.sources",
    "rafrx.sources.clients",
    "rafrx.operators",
    "rafrx.tools",
    "rafrx.agent",
    "rafrx.history",
    "rafrx.testing",
    "rafrx.recorder",
]


def test_every_public_class_and_function_has_a_docstring() -> None:
    objects = _public_objects(["rafrx", *SUBMODULES])
    missing = [name for name, obj in objects.items() if not inspect.getdoc(obj)]
    assert missing == []


@pytest.mark.parametrize("name", [*ops.__all__, "collect_agent_response"], ids=lambda n: n)
def test_pipeline_functions_have_an_example(name: str) -> None:
    assert _has_example(getattr(rafrx, name)), f"rafrx.{name} has no Example"


#: where a user starts: each shows itself with an example (the content, event, update
#: and error classes are shown in their modules' examples).
ENTRY_POINTS = [
    rafrx.Agent,
    rafrx.ChatMessage,
    rafrx.AgentResponse,
    rafrx.AgentResponseResult,
    rafrx.InMemoryHistoryProvider,
    rafrx.record,
    rafrx.replay,
    rafrx.tool,
    rafrx.from_sse,
    rafrx.collect_agent_response,
    rafrx.Usage,
]


@pytest.mark.parametrize("obj", ENTRY_POINTS, ids=lambda obj: obj.__name__)
def test_every_entry_point_has_an_example(obj: Any) -> None:
    assert _has_example(obj)


# ---------------------------------------------------------------- mypy --strict on user programs

USER_PIPELINE = """
from __future__ import annotations

import asyncio
from typing import assert_never

import reactivex
from reactivex import Observable
from reactivex import operators as rx

import rafrx
from rafrx import operators as ops, updates
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.typing import Operator


def show(content: rafrx.Content) -> str:
    match content:
        case rafrx.TextContent(text):
            return text
        case rafrx.ToolCallArgsProgressContent(call_id, name, received, fragment):
            return f"{call_id} {name} {received + 1} {fragment}"
        case rafrx.ToolCallingContent(call_id, name, arguments):
            return name
        case _:
            return ""


def exhaustive(content: rafrx.Content) -> int:
    match content:
        case (
            rafrx.TextContent() | rafrx.ReasoningContent() | rafrx.UriContent()
            | rafrx.ToolCallStartContent() | rafrx.ToolCallArgsContent()
            | rafrx.ToolCallArgsParsedContent() | rafrx.ToolCallArgsProgressContent()
            | rafrx.ToolCallEndContent() | rafrx.ToolCallingContent()
            | rafrx.ToolCallIncompleteContent() | rafrx.ToolCalledContent()
            | rafrx.UsageContent() | rafrx.ErrorContent()
        ):
            return 1
        case _:
            assert_never(content)


def event_name(event: rafrx.Event) -> str:
    match event:
        case rafrx.ResponseStartedEvent(rid, model):
            return f"{rid}{model}"
        case rafrx.ToolApprovalRequestEvent(call_id, name, arguments, description):
            return description
        case rafrx.FinishEvent(reason, usage):
            return reason.value
        case _:
            assert_never(event)


def texts_only() -> Operator[rafrx.AgentResponseResult, rafrx.AgentResponseResult]:
    return rx.filter(lambda r: any(isinstance(x, rafrx.TextContent) for x in r.contents))


def size(result: rafrx.AgentResponseResult) -> int:
    return len(result.contents)


def count_contents(source: Observable[rafrx.AgentResponseResult]) -> Observable[int]:
    return source.pipe(rx.map(size))


def on_next(result: rafrx.AgentResponseResult) -> None:
    for item in result.contents:
        print(show(item))
    for event in result.events:
        print(event_name(event))


def on_error(error: Exception) -> None:
    if isinstance(error, rafrx.HTTPStatusError):
        print(error.status, error.body)
    if isinstance(error, rafrx.RafrxError) and error.partial is not None:
        print(error.partial.text)


async def main() -> None:
    client = OpenAIChatClient("https://api.openai.com", api_key="sk-...", model="gpt-4o")
    stream = client.stream([rafrx.ChatMessage.user("Weather in Paris?")])
    reveal_type(stream)  # R:stream
    converted = stream.pipe(ops.convert())
    reveal_type(converted)  # R:convert
    results = stream.pipe(ops.convert(), texts_only(), rx.do_action(on_next))
    response = await rafrx.collect_agent_response(results)
    reveal_type(response)  # R:collect
    reveal_type(response.tool_calls)  # R:tool_calls
    reveal_type(response.tool_calls[0])  # R:tool_call
    reveal_type(response.usage)  # R:usage
    reveal_type(response.turn_transcript)  # R:transcript
    by_hand = stream.pipe(
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        ops.parse_args_stream(),
        ops.flush_tool_calls(eager=True),
    )
    reveal_type(by_hand)  # R:by_hand
    reveal_type(by_hand.pipe(ops.aggregate()))  # R:aggregate
    disposable = by_hand.subscribe(on_next, on_error, lambda: print("done"))
    disposable.dispose()
    items: list[rafrx.AgentResponseUpdate] = [
        updates.TextDelta("Hello"), updates.Finish(rafrx.FinishReason.STOP)
    ]
    offline = reactivex.from_iterable(items).pipe(ops.convert(), ops.aggregate()).run()
    reveal_type(offline)  # R:offline
    body = rafrx.from_sse([b"data: [DONE]\\n\\n"], dialect="openai-chat")
    reveal_type(body)  # R:from_sse
    reveal_type(AnthropicClient("http://x").stream([]))  # R:anthropic
    reveal_type(OpenAIResponsesClient("http://x").stream([]))  # R:responses
    recorded = rafrx.record(converted, "turn.jsonl")
    reveal_type(recorded)  # R:record
    print(count_contents(results), exhaustive(rafrx.TextContent("x")))
    await client.aclose()


asyncio.run(main())
"""

USER_AGENT = '''
from __future__ import annotations

import asyncio
from collections.abc import Sequence

import reactivex
from reactivex import Observable
from reactivex.subject import Subject

import rafrx
from rafrx import updates
from rafrx.agent import ServerTool


@rafrx.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@rafrx.tool(requires_approval=True, timeout=5)
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


async def approver(event: rafrx.ToolApprovalRequestEvent) -> bool:
    return event.name != "delete_file"


def sync_approver(event: rafrx.ToolApprovalRequestEvent) -> rafrx.ToolApprovalResponse:
    return rafrx.ToolApprovalResponse(event.call_id, False, reason="not today")


class Facts:
    async def provide(self, messages: Sequence[rafrx.ChatMessage]) -> Sequence[rafrx.ChatMessage]:
        return [rafrx.ChatMessage.system("It is Monday.")]


class ListHistory:
    def __init__(self) -> None:
        self.saved: list[rafrx.ChatMessage] = []

    async def load(self) -> Sequence[rafrx.ChatMessage]:
        return self.saved

    async def save(self, messages: Sequence[rafrx.ChatMessage]) -> None:
        self.saved.extend(messages)


class Scripted:
    def stream(
        self,
        messages: Sequence[rafrx.ChatMessage],
        tools: Sequence[rafrx.Tool | ServerTool] | None = None,
    ) -> Observable[rafrx.AgentResponseUpdate]:
        items: list[rafrx.AgentResponseUpdate] = [
            updates.TextDelta("hi"), updates.Finish(rafrx.FinishReason.STOP)
        ]
        return reactivex.from_iterable(items)


async def main() -> None:
    history = rafrx.InMemoryHistoryProvider()
    agent = rafrx.Agent(
        rafrx.OpenAIChatClient("http://127.0.0.1:1", model="m"),
        tools=[add, delete_file],
        instructions="Be brief.",
        history=history,
        context_providers=[Facts()],
        approver=approver,
        max_steps=3,
        id="calc",
    )
    run = agent.run("What is 2 + 3?")
    reveal_type(run)  # R:agent_run
    response = await rafrx.collect_agent_response(run)
    reveal_type(response)  # R:agent_collect
    reveal_type(await agent.send([rafrx.ChatMessage.user("again")]))  # R:agent_send
    for call in response.tool_calls:
        reveal_type(call)  # R:agent_call
        print(call.id, call.name, call.arguments)
    for message in response.turn_transcript:
        reveal_type(message.role)  # R:role
        print(message.to_openai())
    reveal_type(history.messages)  # R:history
    rafrx.Agent(Scripted(), tools=[add], history=ListHistory(), approver=sync_approver)
    rafrx.Agent(rafrx.AnthropicClient("http://x"), approver=Subject[rafrx.ToolApprovalResponse]())
    try:
        await rafrx.Agent(rafrx.OpenAIResponsesClient("http://x")).send("x")
    except rafrx.RafrxError as error:
        reveal_type(error.partial)  # R:partial


asyncio.run(main())
'''

USER_VALUES = """
from __future__ import annotations

import attrs

import rafrx
from rafrx.messages import ToolCall, from_anthropic, to_anthropic

user = rafrx.ChatMessage("user", "hi")
calls = rafrx.ChatMessage.assistant_with_tools("", [ToolCall("c1", "f", {"a": 1})])
reveal_type(calls.tool_calls)  # R:msg_calls
result = rafrx.AgentResponseResult(contents=[rafrx.TextContent("x")], events=[])
reveal_type(result.contents)  # R:contents
response = rafrx.AgentResponse(tool_calls=[ToolCall("c1", "f")], turn_transcript=[user, calls])
total = sum([rafrx.Usage(1, 1, 2), rafrx.Usage(2, 2, 4)], rafrx.Usage())
reveal_type(total)  # R:usage_sum
reveal_type(attrs.evolve(user, content="x"))  # R:evolve
reveal_type(user.to_openai())  # R:to_openai
reveal_type(rafrx.ChatMessage.from_openai(user.to_openai()))  # R:from_openai
reveal_type(from_anthropic(*to_anthropic([user, calls])))  # R:anthropic_round
reveal_type(rafrx.FinishReason.from_provider("end_turn"))  # R:finish
reveal_type(rafrx.TextContent("x").meta)  # R:meta
"""

README_HEADERS = {
    1: (
        "from collections.abc import Sequence\n"
        "import rafrx\n"
        "from rafrx import operators as ops\n"
        "from rafrx.sources.clients import OpenAIChatClient\n"
        'client = OpenAIChatClient("http://127.0.0.1:1")\n'
        'messages: Sequence[rafrx.ChatMessage] = [rafrx.ChatMessage.user("hi")]\n'
        "def my_redactor(r: rafrx.AgentResponseResult) -> rafrx.AgentResponseResult:\n"
        "    return r\n"
    ),
    2: (
        "import rafrx\n"
        "class UI:\n"
        "    def append(self, text: str) -> None: ...\n"
        "    def progress(self, call_id: str, name: str, received: int) -> None: ...\n"
        "    def card(self, call_id: str, name: str, arguments: object) -> None: ...\n"
        "ui = UI()\n"
        "def render(content: rafrx.Content) -> None:\n"
    ),
}


def _readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _readme_program(index: int, block: str) -> str:
    """The README block as a program: only names it leaves undefined are stubbed."""
    header = README_HEADERS.get(index, "")
    if header.endswith(":\n"):  # a bare statement: the body of a function
        return header + textwrap.indent(block, "    ")
    return header + block


class MypyRun:
    def __init__(self, directory: Path, files: dict[str, str]) -> None:
        self.sources = files
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
        env = {**os.environ, "MYPYPATH": str(ROOT)}
        self.result = subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--strict",
                "--no-incremental",
                "--cache-dir",
                os.devnull,
                "--python-version",
                "3.11",
                "--show-error-codes",
                *files,
            ],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        self.lines = self.result.stdout.splitlines()

    def errors(self, file: str) -> list[str]:
        return [line for line in self.lines if line.startswith(f"{file}:") and ": error:" in line]

    def revealed(self, file: str, tag: str) -> str:
        source = self.sources[file].splitlines()
        number = next(i for i, line in enumerate(source, 1) if line.endswith(f"# R:{tag}"))
        prefix = f"{file}:{number}: note: Revealed type is "
        found = [line[len(prefix) :].strip('"') for line in self.lines if line.startswith(prefix)]
        assert found, f"no reveal for {tag}:\n{self.result.stdout}{self.result.stderr}"
        return found[0]


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> MypyRun:
    files = {
        "user_pipeline.py": USER_PIPELINE,
        "user_agent.py": USER_AGENT,
        "user_values.py": USER_VALUES,
    }
    for index, block in enumerate(_readme_blocks()):
        files[f"readme_{index}.py"] = _readme_program(index, block)
    return MypyRun(tmp_path_factory.mktemp("mypy_user"), files)


@pytest.mark.parametrize("file", ["user_pipeline.py", "user_agent.py", "user_values.py"])
def test_user_programs_pass_mypy_strict(mypy_run: MypyRun, file: str) -> None:
    assert "Cannot find implementation" not in mypy_run.result.stdout
    assert mypy_run.errors(file) == [], mypy_run.result.stdout


UPDATE_UNION = (
    "rafrx.updates.TextDelta | rafrx.updates.ReasoningDelta | rafrx.updates.ToolCallDelta | "
    "rafrx.updates.ToolCallStart | rafrx.updates.ToolCallArgs | rafrx.updates.ToolCallEnd | "
    "rafrx.updates.ToolCalled | rafrx.updates.ToolApprovalRequest | rafrx.updates.Usage | "
    "rafrx.updates.Finish | rafrx.updates.Error | rafrx.updates.ResponseMetadata | "
    "rafrx.updates.Uri"
)
OBSERVABLE = "reactivex.observable.observable.Observable"
RESULTS = f"{OBSERVABLE}[rafrx.response.AgentResponseResult]"

REVEALS = [
    ("user_pipeline.py", "stream", f"{OBSERVABLE}[{UPDATE_UNION}]"),
    ("user_pipeline.py", "convert", RESULTS),
    ("user_pipeline.py", "collect", "rafrx.response.AgentResponse"),
    ("user_pipeline.py", "tool_calls", "tuple[rafrx.messages.ToolCall, ...]"),
    ("user_pipeline.py", "tool_call", "rafrx.messages.ToolCall"),
    ("user_pipeline.py", "usage", "rafrx.response.Usage | None"),
    ("user_pipeline.py", "transcript", "tuple[rafrx.messages.ChatMessage, ...]"),
    ("user_pipeline.py", "by_hand", RESULTS),
    ("user_pipeline.py", "aggregate", f"{OBSERVABLE}[rafrx.response.AgentResponse]"),
    ("user_pipeline.py", "offline", "rafrx.response.AgentResponse"),
    ("user_pipeline.py", "from_sse", f"{OBSERVABLE}[{UPDATE_UNION}]"),
    ("user_pipeline.py", "anthropic", f"{OBSERVABLE}[{UPDATE_UNION}]"),
    ("user_pipeline.py", "responses", f"{OBSERVABLE}[{UPDATE_UNION}]"),
    ("user_agent.py", "agent_run", RESULTS),
    ("user_agent.py", "agent_collect", "rafrx.response.AgentResponse"),
    ("user_agent.py", "agent_send", "rafrx.response.AgentResponse"),
    ("user_agent.py", "agent_call", "rafrx.messages.ToolCall"),
    ("user_agent.py", "role", "rafrx.messages.MessageRole"),
    ("user_agent.py", "history", "tuple[rafrx.messages.ChatMessage, ...]"),
    ("user_agent.py", "partial", "rafrx.response.AgentResponse | None"),
    ("user_values.py", "msg_calls", "tuple[rafrx.messages.ToolCall, ...] | None"),
    ("user_values.py", "usage_sum", "rafrx.response.Usage"),
    ("user_values.py", "evolve", "rafrx.messages.ChatMessage"),
    ("user_values.py", "to_openai", "dict[str, Any]"),
    ("user_values.py", "from_openai", "rafrx.messages.ChatMessage"),
    ("user_values.py", "anthropic_round", "list[rafrx.messages.ChatMessage]"),
    ("user_values.py", "finish", "rafrx.response.FinishReason"),
    ("user_values.py", "meta", "rafrx.content.ResponseMetadata"),
]


@pytest.mark.parametrize(("file", "tag", "expected"), REVEALS, ids=[t for _, t, _ in REVEALS])
def test_mypy_sees_the_designs_types(mypy_run: MypyRun, file: str, tag: str, expected: str) -> None:
    assert mypy_run.revealed(file, tag) == expected


def test_result_contents_are_typed_as_the_content_union(mypy_run: MypyRun) -> None:
    revealed = mypy_run.revealed("user_values.py", "contents")
    assert revealed.startswith("tuple[rafrx.content.TextContent | ")
    assert "Any" not in revealed
    assert revealed.count("rafrx.content.") == 13


def test_record_keeps_the_item_type(mypy_run: MypyRun) -> None:
    assert mypy_run.revealed("user_pipeline.py", "record") == RESULTS


def _readme_params() -> list[int]:
    return list(range(len(_readme_blocks())))


@pytest.mark.parametrize("index", _readme_params())
def test_readme_python_examples_pass_mypy_strict(mypy_run: MypyRun, index: int) -> None:
    assert len(_readme_blocks()) >= 3
    assert mypy_run.errors(f"readme_{index}.py") == [], mypy_run.sources[f"readme_{index}.py"]


def test_the_operator_alias_is_what_pipe_takes() -> None:
    """The ``Operator`` alias users annotate custom operators with works at runtime too."""
    from reactivex import operators as rx

    from rafrx.typing import Operator

    double: Operator[AgentResponseResult, AgentResponseResult] = rx.map(
        functools.partial(attrs.evolve, id="x")
    )
    items: list[rafrx.AgentResponseUpdate] = [u.TextDelta("Hi"), u.Finish(STOP)]
    response = reactivex.from_iterable(items).pipe(ops.convert(), double, ops.aggregate()).run()
    assert response.text == "Hi"
    assert response.id == "x"
