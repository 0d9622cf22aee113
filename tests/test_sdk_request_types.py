"""Every request body rafrx sends, checked against the official SDKs' request types.

The oracle is the ``openai`` and ``anthropic`` packages' request TypedDicts
(``CompletionCreateParamsStreaming``, ``ResponseCreateParamsStreaming``,
``MessageCreateParamsStreaming`` and everything they nest). ``sdk_problems``
walks a JSON value against such a type *strictly*: required keys present,
no key the TypedDict does not declare (unless its pydantic config says
``extra: allow``), ``Literal`` values exact, ``str``/``int``/``bool`` never
coerced, unions matched member by member. pydantic's own ``TypeAdapter``
validates ``Iterable[...]`` lazily and ignores TypedDict extras by default, so
it is used only as a cross-check on single pieces.
"""

from __future__ import annotations

import asyncio
import enum
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Optional

import anthropic.types as at
import attrs
import jsonschema
import openai.types.chat as oc
import openai.types.chat.completion_create_params as occ
import openai.types.responses as orp
import openai.types.responses.response_create_params as orc
import pydantic
import pytest
import typing_extensions
from anthropic.types import message_create_params as amc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafrx.agent import Agent
from rafrx.messages import (
    ANTHROPIC_THINKING,
    OPENAI_REASONING,
    ChatMessage,
    MessageRole,
    ToolCall,
    from_anthropic,
    to_anthropic,
    with_call_ids,
)
from rafrx.sources.clients import (
    AnthropicClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import Tool, tool

# ---------------------------------------------------------------- the oracle

_REQUIRED_WRAPPERS = {typing_extensions.Required, typing_extensions.NotRequired}


def _unwrap(hint: Any) -> tuple[Any, str | None]:
    """``hint`` without Required/NotRequired/Annotated, and a PropertyInfo alias if any."""
    alias = None
    while True:
        origin = typing.get_origin(hint)
        if (
            origin in _REQUIRED_WRAPPERS
            or origin is getattr(typing, "Required", None)
            or (origin is getattr(typing, "NotRequired", None))
        ):
            hint = typing.get_args(hint)[0]
            continue
        if origin is Annotated:
            args = typing.get_args(hint)
            for meta in args[1:]:
                alias = getattr(meta, "alias", None) or alias
            hint = args[0]
            continue
        return hint, alias


def _is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and typing_extensions.is_typeddict(hint)


_HINTS: dict[Any, dict[str, tuple[Any, bool]]] = {}


def _totality(td: Any) -> dict[str, bool]:
    """Each key of ``td`` (and its TypedDict bases) → whether its own class was ``total``.

    ``__required_keys__`` is wrong for the SDKs' string annotations
    (``from __future__ import annotations``), so totality is read per class.
    """
    out: dict[str, bool] = {}
    for base in getattr(td, "__orig_bases__", ()):
        if _is_typeddict(base):
            out.update(_totality(base))
    for key in td.__dict__.get("__annotations__", {}):  # noqa: RUF063 - own keys only
        out.setdefault(key, td.__total__)
    return out


def _fields(td: Any) -> dict[str, tuple[Any, bool]]:
    """Wire key → (hint, required) of a TypedDict."""
    if td not in _HINTS:
        hints = typing.get_type_hints(td, include_extras=True)
        total = _totality(td)
        out: dict[str, tuple[Any, bool]] = {}
        for name, hint in hints.items():
            origin = typing.get_origin(hint)
            names = {getattr(o, "__name__", None) or str(o) for o in (origin,)}
            if "Required" in names or origin is typing_extensions.Required:
                required = True
            elif "NotRequired" in names or origin is typing_extensions.NotRequired:
                required = False
            else:
                required = total.get(name, True)
            inner, alias = _unwrap(hint)
            out[alias or name] = (inner, required)
        _HINTS[td] = out
    return _HINTS[td]


def _extra_allowed(td: Any) -> bool:
    config = getattr(td, "__pydantic_config__", None) or {}
    return config.get("extra") == "allow"


def sdk_problems(value: Any, hint: Any, path: str = "$") -> list[str]:
    """Every way ``value`` (parsed JSON) breaks the SDK type ``hint``; [] when it fits."""
    hint, _ = _unwrap(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return []
    if hint is None or hint is type(None):
        return [] if value is None else [f"{path}: expected null, got {value!r:.60}"]
    if origin is Literal:
        ok = any(value == a and type(value) is type(a) for a in args)
        return [] if ok else [f"{path}: expected one of {list(args)}, got {value!r:.60}"]
    if origin is typing.Union or origin is types.UnionType:
        results = [(a, sdk_problems(value, a, path)) for a in args]
        if any(not p for _, p in results):
            return []

        # report against the member of the value's own kind whose literal tags match
        def rank(item: tuple[Any, list[str]]) -> tuple[int, int, int]:
            _, problems = item
            own_kind = any(p.startswith(f"{path}: expected") for p in problems)
            tag_miss = sum(
                "expected one of" in p and p.split(": ", 1)[0].count(".") == path.count(".") + 1
                for p in problems
            )
            return (own_kind, tag_miss, len(problems))

        best = min(results, key=rank)
        return best[1]
    if _is_typeddict(hint):
        if not isinstance(value, Mapping):
            return [f"{path}: expected object ({hint.__name__}), got {value!r:.60}"]
        fields = _fields(hint)
        problems = []
        for key, (inner, required) in fields.items():
            if key in value:
                problems += sdk_problems(value[key], inner, f"{path}.{key}")
            elif required:
                problems.append(f"{path}: {hint.__name__} requires {key!r}")
        if not _extra_allowed(hint):
            for key in value:
                if key not in fields:
                    problems.append(f"{path}: {hint.__name__} has no field {key!r}")
        return problems
    if isinstance(hint, type) and issubclass(hint, pydantic.BaseModel):
        # a response model the SDK also accepts as a param (Anthropic's content blocks)
        if not isinstance(value, Mapping):
            return [f"{path}: expected object ({hint.__name__}), got {value!r:.60}"]
        problems = []
        for name, field in hint.model_fields.items():
            key = field.alias or name
            if key in value:
                problems += sdk_problems(value[key], field.annotation, f"{path}.{key}")
            elif field.is_required():
                problems.append(f"{path}: {hint.__name__} requires {key!r}")
        if hint.model_config.get("extra") != "allow":
            names = {f.alias or n for n, f in hint.model_fields.items()}
            problems += [
                f"{path}: {hint.__name__} has no field {k!r}" for k in value if k not in names
            ]
        return problems
    if hint is str:
        return [] if isinstance(value, str) else [f"{path}: expected string, got {value!r:.60}"]
    if hint is bool:
        return [] if isinstance(value, bool) else [f"{path}: expected bool, got {value!r:.60}"]
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected int, got {value!r:.60}"]
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected number, got {value!r:.60}"]
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            return [f"{path}: expected object, got {value!r:.60}"]
        problems = []
        for k, v in value.items():
            if not isinstance(k, str):
                problems.append(f"{path}: non-string key {k!r}")
            if args:
                problems += sdk_problems(v, args[1], f"{path}.{k}")
        return problems
    list_origins = (list, Sequence, typing.Iterable, __import__("collections.abc").abc.Iterable)
    if (
        origin in list_origins
        or getattr(origin, "__name__", "") == "SequenceNotStr"
        or (getattr(hint, "__name__", "") == "SequenceNotStr")
    ):
        if not isinstance(value, list):
            return [f"{path}: expected array, got {value!r:.60}"]
        problems = []
        for i, v in enumerate(value):
            problems += sdk_problems(v, args[0] if args else Any, f"{path}.{i}")
        return problems
    if isinstance(hint, typing.TypeVar):
        return []
    raise AssertionError(f"the oracle does not know {hint!r} at {path}")


CHAT_BODY = occ.CompletionCreateParamsStreaming
ANTHROPIC_BODY = amc.MessageCreateParamsStreaming
RESPONSES_BODY = orc.ResponseCreateParamsStreaming
CHAT_MESSAGE = oc.ChatCompletionMessageParam
ANTHROPIC_MESSAGE = at.MessageParam
RESPONSES_ITEM = orp.ResponseInputItemParam

CLIENTS = {
    "openai-chat": (OpenAIChatClient, CHAT_BODY),
    "anthropic": (AnthropicClient, ANTHROPIC_BODY),
    "openai-responses": (OpenAIResponsesClient, RESPONSES_BODY),
}

#: The one field rafrx sends that no SDK type has, on purpose (DESIGN.md: DeepSeek's
#: ``reasoning_content`` goes back on assistant messages).
DOCUMENTED_EXTENSION = "has no field 'reasoning_content'"


def body_problems(fmt: str, body: Any) -> list[str]:
    """SDK-type problems of a recorded body, the documented chat extension left out."""
    problems = sdk_problems(body, CLIENTS[fmt][1])
    return [p for p in problems if DOCUMENTED_EXTENSION not in p]


def wire(value: Any) -> Any:
    """``value`` as the server parses it (what went over HTTP)."""
    return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))


# ---------------------------------------------------------------- strategies

_ID = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=10)
_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10)
_TEXT = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=' \n\t"\\é中😀\u2028\x00ab', max_size=12),
)
_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)


def _invalid_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return text.strip() != ""
    return False


_RAW = st.sampled_from(['{"a": 1', "{'a': 1}", "not json", '{"x": }', "[1,"]) | _TEXT.filter(
    _invalid_json
)


@st.composite
def tool_calls(draw: st.DrawFn, call_id: str) -> ToolCall:
    """A call with any JSON arguments, or with invalid JSON kept raw."""
    name = draw(_NAME)
    if draw(st.integers(0, 4)) == 0:
        raw = draw(_RAW)
        return ToolCall(call_id, name, None, raw_arguments=raw, error="invalid JSON")
    return ToolCall(call_id, name, draw(st.dictionaries(_TEXT, _JSON, max_size=3) | _JSON))


_SIGNATURE = st.text(alphabet="ABCDEFabcdef0123456789+/=", min_size=8, max_size=16)
_THINKING = st.lists(
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, _TEXT, _SIGNATURE)
    | st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _SIGNATURE),
    min_size=1,
    max_size=2,
).map(tuple)


@st.composite
def reasoning_items(draw: st.DrawFn) -> tuple[dict[str, Any], ...]:
    """Responses ``reasoning`` output items as the dialect keeps them."""
    items = []
    for _ in range(draw(st.integers(1, 2))):
        item: dict[str, Any] = {
            "id": "rs_" + draw(_ID),
            "type": "reasoning",
            "summary": [
                {"type": "summary_text", "text": t} for t in draw(st.lists(_TEXT, max_size=2))
            ],
        }
        if draw(st.booleans()):
            item["encrypted_content"] = draw(_SIGNATURE)
        if draw(st.booleans()):
            item["status"] = "completed"
        items.append(item)
    return tuple(items)


@st.composite
def conversations(draw: st.DrawFn) -> list[ChatMessage]:
    """A well-formed conversation: system/user/assistant turns, tool loops, names,
    reasoning, thinking blocks, Responses reasoning items, errors, empty and odd text."""
    out = [
        ChatMessage(MessageRole.SYSTEM, draw(_TEXT), name=draw(st.none() | _NAME))
        for _ in range(draw(st.integers(0, 2)))
    ]
    counter = 0
    for _ in range(draw(st.integers(1, 2))):
        out.append(ChatMessage(MessageRole.USER, draw(_TEXT), name=draw(st.none() | _NAME)))
        for _ in range(draw(st.integers(0, 2))):
            calls = []
            for _ in range(draw(st.integers(0, 2))):
                counter += 1
                calls.append(draw(tool_calls(f"call_{counter}")))
            provider: dict[str, Any] = {}
            if draw(st.booleans()):
                provider[ANTHROPIC_THINKING] = draw(_THINKING)
            if draw(st.booleans()):
                provider[OPENAI_REASONING] = draw(reasoning_items())
            out.append(
                ChatMessage(
                    MessageRole.ASSISTANT,
                    draw(_TEXT),
                    name=draw(st.none() | _NAME),
                    tool_calls=calls or None,
                    reasoning=draw(st.none() | _TEXT),
                    provider_data=provider or None,
                )
            )
            out += [
                ChatMessage.tool(draw(_TEXT), c.id, is_error=draw(st.booleans())) for c in calls
            ]
    return out


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.define
class Point:
    """A point on the map.

    Args:
        x: East.
    """

    x: int
    y: float = 0.0


_HINTS_POOL: dict[str, tuple[Any, list[Any]]] = {  # hint source → (hint, some defaults)
    "str": (str, ["z", "é中"]),
    "int": (int, [0, -3]),
    "float": (float, [1.5, 2, float("inf")]),
    "bool": (bool, [True]),
    "Optional[int]": (Optional[int], [None, 4]),  # noqa: UP045 - the SDKs' own spelling
    "int | str | None": (int | str | None, [None, "a"]),
    "Literal['a', 'b']": (Literal["a", "b"], ["a"]),
    "Literal[1, 'x', None]": (Literal[1, "x", None], [None, 1]),
    "Color": (Color, [Color.BLUE]),
    "Level": (Level, [Level.HIGH]),
    "list[str]": (list[str], [["a"], []]),
    "list[Point]": (list[Point], [[]]),
    "dict[str, float]": (dict[str, float], [{}]),
    "tuple[int, str]": (tuple[int, str], [(1, "a")]),
    "tuple[float, ...]": (tuple[float, ...], [(1.0,)]),
    "Point": (Point, [Point(1)]),
    "Point | None": (Point | None, [None]),
    "Annotated[str, 'a doc']": (Annotated[str, "a doc"], ["d"]),
    "list[Color] | None": (list[Color] | None, [None, [Color.RED]]),
    "dict[str, list[int]]": (dict[str, list[int]], [{"a": [1]}]),
}


@st.composite
def tools(draw: st.DrawFn) -> Tool:
    """A @tool of a function with a drawn signature (defaults, Optional, Literal, enums,
    attrs classes, lists, tuples, nested dicts) and a docstring documenting some params."""
    keys = draw(st.lists(st.sampled_from(sorted(_HINTS_POOL)), max_size=5))
    params = []
    namespace: dict[str, Any] = {}
    with_default = False
    for i, key in enumerate(keys):
        hint, defaults = _HINTS_POOL[key]
        namespace[f"T{i}"] = hint
        if with_default or draw(st.booleans()):
            with_default = True  # no required parameter after one with a default
            namespace[f"D{i}"] = draw(st.sampled_from(defaults))
            params.append(f"p{i}: T{i} = D{i}")
        else:
            params.append(f"p{i}: T{i}")
    documented = [
        f"        p{i}: Parameter {i} é." for i in range(len(keys)) if draw(st.booleans())
    ]
    doc = draw(st.sampled_from(["", "Do a thing.", "Dö 中 thing.\n\nMore."]))
    if documented:
        doc += "\n\n    Args:\n" + "\n".join(documented)
    source = f'def f({", ".join(params)}) -> str:\n    """{doc}"""\n    return "ok"\n'
    exec(source, namespace)
    return tool(namespace["f"], name=draw(_NAME))


# ---------------------------------------------------------------- the oracle itself


def test_the_oracle_catches_extra_missing_and_mistyped_fields() -> None:
    """sdk_problems rejects a field a type does not declare, a missing required field, a
    wrong literal and a coerced scalar, and accepts bodies written as the SDK docs show."""
    assert sdk_problems({"role": "tool", "content": "x"}, CHAT_MESSAGE) == [
        "$: ChatCompletionToolMessageParam requires 'tool_call_id'"
    ]
    assert sdk_problems({"role": "user", "content": "x", "foo": 1}, CHAT_MESSAGE) == [
        "$: ChatCompletionUserMessageParam has no field 'foo'"
    ]
    assert sdk_problems({"role": "user", "content": 1}, CHAT_MESSAGE)
    assert sdk_problems({"role": "robot", "content": "x"}, CHAT_MESSAGE)
    assert sdk_problems(
        {"type": "tool_use", "id": "t", "name": "n", "input": []}, at.ToolUseBlockParam
    )
    assert sdk_problems(
        {"max_tokens": "1", "model": "m", "messages": [], "stream": True}, ANTHROPIC_BODY
    )
    good_chat = {
        "model": "gpt-4o-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}], "name": "bob"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "auto",
    }
    assert sdk_problems(good_chat, CHAT_BODY) == []
    good_anthropic = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "stream": True,
        "system": "S",
        "messages": [
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": True}
                ],
            },
        ],
        "tools": [{"name": "f", "description": "", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
    }
    assert sdk_problems(good_anthropic, ANTHROPIC_BODY) == []
    good_responses = {
        "model": "gpt-4o-mini",
        "stream": True,
        "input": [
            {"role": "system", "content": "S"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": False}],
    }
    assert sdk_problems(good_responses, RESPONSES_BODY) == []
    # the oracle agrees with pydantic (extra forbidden) on a flat piece
    forbid = pydantic.TypeAdapter(
        list[oc.ChatCompletionToolMessageParam], config=pydantic.ConfigDict(extra="forbid")
    )
    with pytest.raises(pydantic.ValidationError):
        forbid.validate_python([{"role": "tool", "content": "x", "tool_call_id": "c", "name": "f"}])
    forbid.validate_python([{"role": "tool", "content": "x", "tool_call_id": "c"}], strict=True)


# ---------------------------------------------------------------- bodies over real HTTP


async def send(
    server: LLMServer, fmt: str, messages: Sequence[ChatMessage], tool_list: Sequence[Any] = ()
) -> Any:
    """Stream one call with the ``fmt`` client; the body the server received."""
    import rafrx

    cls = CLIENTS[fmt][0]
    async with cls(server.url, "sk-test") as client:
        updates = client.stream(list(messages), list(tool_list) or None)
        await asyncio.wait_for(rafrx.collect_agent_response(updates.pipe(rafrx.convert())), 5)
    return server.requests[-1].json


@pytest.mark.asyncio
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    conversation=conversations(), offered=st.lists(tools(), max_size=2, unique_by=lambda t: t.name)
)
async def test_every_body_fits_the_sdk_request_types(
    llm_server: LLMServer, conversation: list[ChatMessage], offered: list[Tool]
) -> None:
    """Any well-formed conversation (tool loops, invalid-JSON arguments, errors, thinking
    blocks, reasoning items, names, non-ASCII, empty text) and generated tools: each
    client's request body fits CompletionCreateParamsStreaming /
    MessageCreateParamsStreaming / ResponseCreateParamsStreaming (only chat's documented
    reasoning_content aside)."""
    for fmt in CLIENTS:
        body = await send(llm_server, fmt, conversation, offered)
        assert body["stream"] is True
        assert len(body.get("tools", ())) == len(offered)
        assert body_problems(fmt, body) == [], fmt


# ---------------------------------------------------------------- documented extensions


def test_documented_reasoning_content_is_the_field_the_sdk_type_lacks() -> None:
    """Documented extension (DeepSeek): an assistant message's reasoning goes out as
    reasoning_content, which ChatCompletionAssistantMessageParam does not declare; it is
    the only field the SDK type rejects, and only when there is reasoning."""
    msg = ChatMessage(MessageRole.ASSISTANT, "Hi", reasoning="because")
    assert sdk_problems(wire(msg.to_openai()), CHAT_MESSAGE) == [
        "$: ChatCompletionAssistantMessageParam has no field 'reasoning_content'"
    ]
    assert sdk_problems(wire(ChatMessage.assistant("Hi").to_openai()), CHAT_MESSAGE) == []


def test_documented_invalid_json_arguments_go_back_verbatim_as_strings() -> None:
    """Documented: invalid-JSON raw arguments go back verbatim. The SDK types only ask for a
    string (chat function.arguments, Responses function_call.arguments), so they pass; the
    Anthropic tool_use input becomes {} (an object, as ToolUseBlockParam.input requires)."""
    call = ToolCall("c1", "f", None, raw_arguments='{"a": 1', error="invalid JSON")
    messages = [
        ChatMessage.user("go"),
        ChatMessage.assistant_with_tools("", [call]),
        ChatMessage.tool("Error: bad arguments", "c1", is_error=True),
    ]
    chat = [wire(m.to_openai()) for m in messages]
    assert sdk_problems(chat, list[CHAT_MESSAGE]) == []
    assert chat[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1'
    responses = wire(to_responses_input(messages))
    assert sdk_problems(responses, list[RESPONSES_ITEM]) == []
    assert responses[1]["arguments"] == '{"a": 1'
    _, anthropic_wire = to_anthropic(messages)
    assert sdk_problems(wire(anthropic_wire), list[ANTHROPIC_MESSAGE]) == []
    assert anthropic_wire[1]["content"][0]["input"] == {}
    assert anthropic_wire[2]["content"][0]["is_error"] is True


# ---------------------------------------------------------------- the legacy function role

LEGACY_FUNCTION_RESULT = {"role": "function", "name": "get_time", "content": "12:00"}
"""A ChatCompletionFunctionMessageParam: the result of a legacy ``function_call``."""

LEGACY_HISTORY = [
    {"role": "user", "content": "What time is it?"},
    {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "get_time", "arguments": "{}"},
    },
    LEGACY_FUNCTION_RESULT,
    {"role": "user", "content": "Thanks. And in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "get_time", "arguments": '{"tz": "Europe/Paris"}'},
    },
    {"role": "function", "name": "get_time", "content": "13:00"},
]
"""A conversation of OpenAI's legacy function calling: each result follows its call."""


def test_legacy_function_messages_go_back_to_openai_as_they_came() -> None:
    """from_openai reads a legacy ``function_call`` as a call without an id and the
    ``function`` message as a TOOL message with a name; to_openai sends both back unchanged
    (a ``role: tool`` message would need a tool_call_id and allows no name)."""
    assert sdk_problems(LEGACY_HISTORY, list[CHAT_MESSAGE]) == []  # valid input
    messages = [ChatMessage.from_openai(m) for m in LEGACY_HISTORY]
    assert messages[2].role is MessageRole.TOOL
    assert (messages[2].name, messages[2].tool_call_id) == ("get_time", None)
    calls = messages[4].tool_calls
    assert calls is not None
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("", "get_time", {"tz": "Europe/Paris"})
    ]
    assert [m.to_openai() for m in messages] == LEGACY_HISTORY


@pytest.mark.asyncio
async def test_legacy_function_history_sent_by_the_chat_client_fits_the_sdk_type(
    llm_server: LLMServer,
) -> None:
    body = await send(
        llm_server, "openai-chat", [ChatMessage.from_openai(m) for m in LEGACY_HISTORY]
    )
    assert body_problems("openai-chat", body) == []
    assert body["messages"][-4:] == LEGACY_HISTORY[-4:]


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
@pytest.mark.asyncio
async def test_legacy_function_calls_get_paired_ids_for_the_other_apis(
    llm_server: LLMServer, fmt: str
) -> None:
    """Anthropic and the Responses API need an id on a call and on its result: each legacy
    call gets one, and the result after it the same, over HTTP and fitting the SDK types."""
    messages = [ChatMessage.from_openai(m) for m in LEGACY_HISTORY]
    body = await send(llm_server, fmt, messages)
    assert body_problems(fmt, body) == []
    if fmt == "anthropic":
        blocks = [b for m in body["messages"] for b in m["content"]]
        calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
    else:
        calls = [i["call_id"] for i in body["input"] if i.get("type") == "function_call"]
        results = [i["call_id"] for i in body["input"] if i.get("type") == "function_call_output"]
    assert calls == results
    assert len(set(calls)) == 2


def test_with_call_ids_pairs_each_result_with_the_earliest_open_call_of_its_name() -> None:
    calls = [ToolCall("", "a", {}), ToolCall("", "b", {})]  # ids missing, as built by hand
    messages = with_call_ids(
        [
            ChatMessage.assistant_with_tools("", calls),
            ChatMessage(MessageRole.TOOL, "B", name="b"),
            ChatMessage(MessageRole.TOOL, "A", name="a"),
            ChatMessage(MessageRole.TOOL, "orphan", name="a"),
            ChatMessage.tool("kept", "c9"),
        ]
    )
    first = messages[0].tool_calls
    assert first is not None
    assert [c.id for c in first] == ["function_call_0", "function_call_0_1"]
    assert [m.tool_call_id for m in messages[1:]] == [
        "function_call_0_1",
        "function_call_0",
        "function_call_3",
        "c9",
    ]


def test_legacy_function_message_goes_to_anthropic_with_a_string_tool_use_id() -> None:
    """Even a result whose call is not in the conversation gets a string id (null is not a
    ToolResultBlockParam.tool_use_id)."""
    msg = ChatMessage.from_openai(LEGACY_FUNCTION_RESULT)
    _, anthropic_wire = to_anthropic([ChatMessage.user("time?"), msg])
    assert sdk_problems(wire(anthropic_wire), list[ANTHROPIC_MESSAGE]) == []


# ---------------------------------------------------------------- agent runs over HTTP


@tool
def weather(city: str, days: int = 1, unit: Literal["C", "F"] = "C") -> str:
    """Forecast for a city.

    Args:
        city: The city's name.
        days: How many days ahead.
        unit: Celsius or Fahrenheit.
    """
    return f"{city}: sunny for {days} days"


@tool
def boom(x: int, colors: list[Color] | None = None, at: Point | None = None) -> str:
    """Always fails."""
    raise RuntimeError("kaboom é")


@tool
def echo(payload: dict[str, list[int]], pair: tuple[int, str] = (1, "a")) -> dict[str, Any]:
    """Echo (a non-str result goes back as JSON)."""
    return {"payload": payload, "pair": list(pair)}


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", sorted(CLIENTS))
async def test_agent_tool_loop_bodies_fit_the_sdk_types(llm_server: LLMServer, fmt: str) -> None:
    """An Agent with instructions, history and three tools over real HTTP: reasoning (chat
    reasoning_content / Anthropic signed thinking / Responses reasoning items), parallel
    calls with valid, invalid-JSON and unknown-tool arguments, a raising tool, a non-str
    result, then a second turn from history: every request body fits the SDK type."""
    import rafrx

    llm_server.enqueue(
        Reply(
            reasoning="Let me think… é中",
            text="Checking.",
            tool_calls=[
                ToolCallSpec("weather", {"city": "Zürich", "unit": "F"}),
                ToolCallSpec("weather", '{"city": "Par'),  # invalid JSON
                ToolCallSpec("boom", {"x": 1, "colors": ["red"]}),
                ToolCallSpec("echo", {"payload": {"a": [1, 2]}}),
                ToolCallSpec("missing_tool", {}),
            ],
        )
    )
    llm_server.enqueue(
        Reply(reasoning="Now answer.", tool_calls=[ToolCallSpec("weather", {"city": "Oslo"})])
    )
    llm_server.enqueue(Reply(text="Done 😀."))
    llm_server.enqueue(Reply(text=""))  # an empty final answer
    llm_server.enqueue(Reply(text="Again."))
    cls = CLIENTS[fmt][0]
    async with cls(llm_server.url, "sk-test") as client:
        agent = Agent(
            client,
            tools=[weather, boom, echo],
            instructions="Be brief. ✓",
            history=rafrx.InMemoryHistoryProvider(),
        )
        await asyncio.wait_for(agent.send("Weather in Zürich?"), 10)
        await asyncio.wait_for(agent.send(""), 10)  # an empty user message
        more = [ChatMessage.user("One more"), ChatMessage(MessageRole.USER, "x", name="bob")]
        await asyncio.wait_for(agent.send(more), 10)
    assert len(llm_server.requests) == 5
    for i, request in enumerate(llm_server.requests):
        assert body_problems(fmt, request.json) == [], (fmt, i)
    assert len(llm_server.requests[-1].json.get("tools", ())) == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("source", sorted(CLIENTS))
async def test_a_history_from_one_provider_fits_the_others_sdk_types(
    llm_server: LLMServer, source: str
) -> None:
    """A turn transcript produced with one client (its provider_data: thinking blocks or
    reasoning items) sent with each other client: every body fits that client's SDK type."""
    llm_server.enqueue(
        Reply(
            reasoning="hmm", text="Looking.", tool_calls=[ToolCallSpec("weather", {"city": "Rome"})]
        )
    )
    llm_server.enqueue(Reply(reasoning="ok", text="Sunny."))
    async with CLIENTS[source][0](llm_server.url, "sk-test") as client:
        response = await asyncio.wait_for(Agent(client, tools=[weather]).send("Rome?"), 10)
    transcript = [ChatMessage.user("Rome?"), *response.turn_transcript, ChatMessage.user("Thanks")]
    assert any(m.provider_data for m in transcript) or source == "openai-chat"
    for fmt in CLIENTS:
        body = await send(llm_server, fmt, transcript, [weather])
        assert body_problems(fmt, body) == [], (source, fmt)


# ---------------------------------------------------------------- tool definitions


@settings(max_examples=80, deadline=None)
@given(generated=tools())
def test_tool_definitions_fit_the_sdk_tool_types(generated: Tool) -> None:
    """@tool over drawn signatures: to_openai fits ChatCompletionFunctionToolParam,
    to_anthropic ToolParam (input_schema an object schema), to_responses FunctionToolParam;
    the parameters are a valid JSON Schema 2020-12 (what Anthropic validates) and every
    default satisfies its own property schema. pydantic agrees (extra forbidden)."""
    chat_tool, anthropic_tool, responses_tool = map(
        wire, (generated.to_openai(), generated.to_anthropic(), generated.to_responses())
    )
    assert sdk_problems(chat_tool, oc.ChatCompletionFunctionToolParam) == []
    assert sdk_problems(anthropic_tool, at.ToolParam) == []
    assert anthropic_tool["input_schema"]["type"] == "object"
    assert sdk_problems(anthropic_tool["input_schema"], at.tool_param.InputSchemaTyped) == []
    assert sdk_problems(responses_tool, orp.FunctionToolParam) == []
    forbid = pydantic.ConfigDict(extra="forbid")
    pydantic.TypeAdapter(list[oc.ChatCompletionFunctionToolParam], config=forbid).validate_python(
        [chat_tool], strict=True
    )
    pydantic.TypeAdapter(list[orp.FunctionToolParam], config=forbid).validate_python(
        [responses_tool], strict=True
    )
    schema = generated.parameters
    jsonschema.Draft202012Validator.check_schema(schema)
    for name, prop in schema["properties"].items():
        if "default" in prop:
            errors = list(jsonschema.Draft202012Validator(prop).iter_errors(prop["default"]))
            assert errors == [], (name, prop)
    # and the defaults, all together, are arguments the tool itself accepts
    defaults = {n: p["default"] for n, p in schema["properties"].items() if "default" in p}
    required = set(schema["required"])
    if required <= defaults.keys():
        generated.validate(defaults)


# ---------------------------------------------------------------- round trips


@st.composite
def chat_messages(draw: st.DrawFn) -> ChatMessage:
    """A message as the OpenAI chat API carries it (fields its role has)."""
    role = draw(st.sampled_from(MessageRole))
    if role is MessageRole.TOOL:
        return ChatMessage.tool(draw(_TEXT), draw(_ID), source=None)
    if role is MessageRole.ASSISTANT:
        calls = draw(st.lists(_ID, max_size=3, unique=True))
        return ChatMessage(
            role,
            draw(_TEXT),
            name=draw(st.none() | _NAME),
            tool_calls=[draw(tool_calls(i)) for i in calls] or None,
            reasoning=draw(st.none() | _TEXT),
        )
    return ChatMessage(role, draw(_TEXT), name=draw(st.none() | _NAME))


def _carried(msg: ChatMessage) -> tuple[Any, ...]:
    """What the chat wire carries of a message (an invalid call: its raw text)."""
    calls = tuple(
        (c.id, c.name, c.raw_arguments if c.arguments is None else json.dumps(c.arguments))
        for c in msg.tool_calls or ()
    )
    return (msg.role, msg.content, msg.name, calls or None, msg.tool_call_id, msg.reasoning)


@settings(max_examples=150, deadline=None)
@given(message=chat_messages())
def test_chat_round_trip_keeps_what_the_api_carries(message: ChatMessage) -> None:
    """from_openai(to_openai(m)) keeps role, text, name, calls (ids, names, arguments or the
    raw invalid text), tool_call_id and reasoning; the wire fits ChatCompletionMessageParam
    (reasoning_content aside) and a second trip changes nothing."""
    sent = wire(message.to_openai())
    assert [p for p in sdk_problems(sent, CHAT_MESSAGE) if DOCUMENTED_EXTENSION not in p] == []
    back = ChatMessage.from_openai(sent)
    assert _carried(back) == _carried(message)
    assert wire(back.to_openai()) == sent


def _merged(wire_messages: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """Anthropic's view: consecutive same-role turns are one turn; adjacent text joined."""
    out: list[tuple[str, list[Any]]] = []
    for msg in wire_messages:
        content = msg["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        if out and out[-1][0] == msg["role"]:
            out[-1][1].extend(blocks)
        else:
            out.append((msg["role"], blocks))
    for _, blocks in out:
        joined: list[Any] = []
        for b in blocks:
            if b["type"] == "text" and joined and joined[-1]["type"] == "text":
                joined[-1] = {"type": "text", "text": joined[-1]["text"] + b["text"]}
            else:
                joined.append(dict(b))
        blocks[:] = joined
    return out


@settings(max_examples=100, deadline=None)
@given(conversation=conversations())
def test_anthropic_wire_survives_a_trip_through_chat_messages(
    conversation: list[ChatMessage],
) -> None:
    """to_anthropic(from_anthropic(*to_anthropic(ms))) carries the same turns as
    to_anthropic(ms) (system, text, tool_use ids/names/input, tool_result ids/content/
    is_error, thinking blocks verbatim), and both fit MessageParam."""
    system, first = to_anthropic(conversation)
    assert sdk_problems(wire(first), list[ANTHROPIC_MESSAGE]) == []
    back = from_anthropic(system, first)
    system2, second = to_anthropic(back)
    assert system2 == system
    assert _merged(wire(second)) == _merged(wire(first))


def test_anthropic_system_blocks_keep_their_boundaries() -> None:
    """A system given as a list of text blocks (prompt caching) reads back as one system
    message whose texts are a blank line apart, as to_anthropic joins system messages:
    the words of two blocks never run together."""
    blocks = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}]
    assert sdk_problems(blocks, list[at.TextBlockParam]) == []  # a valid `system`
    system, _ = to_anthropic(from_anthropic(blocks, []))
    assert system == "Be brief.\n\nAnswer in French."
