"""What each provider receives must be accepted by it: request bodies, probed again.

Every test sends real requests through the real clients to a local server on
127.0.0.1 (:class:`~rafrx.testing.LLMServer`, or a small raw-bytes server of this
file's own) and checks what arrived against the providers' documented request rules
and the official SDKs' request ``TypedDict``s (the oracle of
``tests/test_sdk_request_types.py``):

* tool schemas as OpenAI's strict mode, Anthropic's ``input_schema`` and JSON Schema
  2020-12 take them, for every kind of type hint at once (enums, literals, nested
  dataclasses, ``TypedDict``s, pydantic models, optional and list-of-object fields,
  dates, variadic tuples);
* the body fields a user passes (``tool_choice`` in each provider's forms,
  ``response_format`` / ``text.format`` JSON schemas, ``thinking``, ``system`` blocks
  with ``cache_control``, ``metadata``, stop sequences, reasoning options ...): sent
  unchanged, fitting the SDK types, per call only, never accumulating;
* provider-defined tools (Anthropic's web search, Responses' hosted tools, chat's
  custom tools) sent verbatim;
* the bytes themselves: UTF-8, strict JSON (no ``NaN``), non-ASCII and control
  characters exact, a very long history whole and in order;
* Azure's v1 URL shape with its ``api-key`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import enum
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import attrs
import jsonschema
import pydantic
import pytest
from aiohttp import web

import rafrx
from rafrx import ChatMessage, ToolCall, tool
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import LLMServer, Reply, render
from rafrx.tools import Tool
from tests.test_sdk_request_types import body_problems

GUARD = 5.0  # seconds: a guard against hangs only

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = sorted(CLIENTS)


async def call(
    client: LLMClient, messages: Sequence[ChatMessage], tools: Any = None, **p: Any
) -> rafrx.AgentResponse:
    """One call through ``client``, awaited to its end."""
    updates = client.stream(list(messages), tools, **p)
    async with asyncio.timeout(GUARD):
        return await rafrx.collect_agent_response(updates.pipe(rafrx.convert()))


def walk(schema: Any, path: str = "$") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every subschema of ``schema`` with its path."""
    if not isinstance(schema, Mapping):
        return
    yield path, schema
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), Mapping):
            yield from walk(schema[key], f"{path}.{key}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, part in enumerate(schema.get(key) or ()):
            yield from walk(part, f"{path}.{key}[{i}]")
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")


# ---------------------------------------------------------------- a zoo of type hints


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


@dataclasses.dataclass
class Point:
    """A point.

    Attributes:
        x: Across.
        y: Up.
    """

    x: float
    y: float = 0.0


class Filters(TypedDict):
    tag: str
    limit: NotRequired[int]


class Owner(pydantic.BaseModel):
    name: str = pydantic.Field(description="Who.")
    email: str | None = None
    home: Point | None = None


class Order(pydantic.BaseModel):
    owner: Owner
    items: list[Point]
    when: datetime.date | None = None


def zoo(
    city: Annotated[str, "The city."],
    unit: Unit,
    mode: Literal["fast", "slow"],
    where: Point,
    path: list[Point],
    maybe: Point | None,
    filters: Filters,
    order: Order,
    day: datetime.date,
    ns: tuple[int, ...] = (),
    k: int = 3,
    note: str | None = None,
) -> str:
    """Every kind of parameter at once.

    Args:
        k: How many.
    """
    return ""


@dataclasses.dataclass
class Line:
    counts: dict[str, int]


def no_parameters() -> str:
    """Tell the time."""
    return "12:00"


STRICT_ZOO = tool(zoo, strict=True)
ZOO = tool(zoo)
NOW = tool(no_parameters, name="now")


def strict_rule_breaks(schema: Mapping[str, Any]) -> list[str]:
    """Where ``schema`` breaks OpenAI's strict-mode rules
    (https://platform.openai.com/docs/guides/structured-outputs#supported-schemas):
    every object closed and listing all its properties as required, every schema
    typed (or a union), no ``default``, no ``$ref``/``$defs``, no ``prefixItems``."""
    problems = []
    for path, node in walk(schema):
        if "type" not in node and "anyOf" not in node:
            problems.append(f"{path}: no type")
        if "default" in node or "$ref" in node or "$defs" in node or "prefixItems" in node:
            problems.append(f"{path}: unsupported keyword in {sorted(node)}")
        kinds = node.get("type")
        if kinds == "object" or (isinstance(kinds, list) and "object" in kinds):
            if node.get("additionalProperties") is not False:
                problems.append(f"{path}: additionalProperties is not false")
            if list(node.get("required", ())) != list(node.get("properties", {})):
                problems.append(f"{path}: not every property is required")
    return problems


def test_the_strict_rule_checker_catches_what_strict_mode_refuses() -> None:
    """The checker itself: an open object, an optional property, a default, an untyped
    node and a tuple's prefixItems are each caught."""
    bad = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "string"}}},
            "c": {"type": "integer", "default": 1},
            "d": {"description": "anything"},
            "e": {"type": "array", "prefixItems": [{"type": "integer"}]},
        },
        "required": ["a", "c", "d", "e"],
        "additionalProperties": False,
    }
    problems = strict_rule_breaks(bad)
    assert any("$.a: additionalProperties" in p for p in problems)
    assert any("$.a: not every property" in p for p in problems)
    assert any("$.c: unsupported keyword" in p for p in problems)
    assert any("$.d: no type" in p for p in problems)
    assert any("$.e: unsupported keyword" in p for p in problems)


def test_the_strict_form_of_every_kind_of_hint_obeys_openai_strict_mode() -> None:
    """Nested dataclasses, a ``TypedDict`` with a ``NotRequired`` key, pydantic models
    nesting a dataclass, ``X | None``, lists of objects, enums, literals, dates and a
    variadic tuple: the strict form OpenAI gets is closed and fully required at every
    depth (optional properties nullable instead), with no default, ref or prefixItems."""
    schema = STRICT_ZOO.strict_parameters
    assert strict_rule_breaks(schema) == []
    nested = schema["properties"]["order"]["properties"]["owner"]["properties"]
    assert nested["email"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert schema["properties"]["filters"]["required"] == ["tag", "limit"]
    assert schema["properties"]["filters"]["properties"]["limit"] == {"type": ["integer", "null"]}
    assert schema["properties"]["k"] == {"type": ["integer", "null"], "description": "How many."}
    jsonschema.Draft202012Validator.check_schema(schema)


def test_a_strict_refusal_names_the_nested_path_of_an_open_object() -> None:
    """An open ``dict`` deep inside a list of dataclasses has no strict form: the
    ``TypeError`` at definition names where it is, not just the parameter."""

    def tally(lines: list[Line]) -> str:
        return ""

    with pytest.raises(TypeError, match=r"'lines\[\]\.counts'.*open objects"):
        tool(tally, strict=True)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
async def test_a_strict_tool_arrives_strict_with_its_strict_schema(
    llm_server: LLMServer, fmt: str
) -> None:
    """Over HTTP both OpenAI APIs get ``"strict": true`` beside exactly the strict form
    (a non-strict tool beside it keeps its own schema, with its defaults)."""
    async with CLIENTS[fmt](llm_server.url, "sk-test") as client:
        await call(client, [ChatMessage.user("Plan.")], [STRICT_ZOO, ZOO])
    sent = llm_server.requests[-1].body["tools"]
    functions = [t["function"] if fmt == "openai-chat" else t for t in sent]
    assert functions[0]["strict"] is True
    if fmt == "openai-chat":
        assert "strict" not in functions[1]  # (chat's default is off)
    else:
        assert functions[1]["strict"] is False  # (the Responses default would be on)
    assert functions[0]["parameters"] == STRICT_ZOO.strict_parameters
    assert functions[1]["parameters"] == ZOO.parameters
    assert functions[1]["parameters"]["properties"]["k"]["default"] == 3
    assert strict_rule_breaks(functions[0]["parameters"]) == []
    assert body_problems(fmt, llm_server.requests[-1].json) == []


@pytest.mark.asyncio
async def test_anthropic_input_schemas_are_object_schemas_without_refs_or_titles(
    llm_server: LLMServer,
) -> None:
    """Anthropic requires ``input_schema.type: "object"`` ("tools.N.custom.input_schema.type:
    Field required", lidge-jun/opencodex#75) and resolves no ``$ref`` to ``$defs`` it was
    not sent: every generated schema (the zoo, a strict tool, a parameterless one, a
    hand-built ``Tool`` with ``{}``) arrives as a valid 2020-12 object schema, pydantic's
    ``$defs``/``$ref``/auto titles left out, the strict flag not sent."""
    empty = Tool("blank", "Nothing.", {}, lambda: "")
    offered = [ZOO, tool(zoo, name="zoo2", strict=True), NOW, empty]
    async with AnthropicClient(llm_server.url, "sk-test") as client:
        await call(client, [ChatMessage.user("Plan.")], offered)
    body = llm_server.requests[-1].json
    assert body_problems("anthropic", body) == []
    for sent in body["tools"]:
        schema = sent["input_schema"]
        assert set(sent) == {"name", "description", "input_schema"}
        assert schema["type"] == "object", sent["name"]
        jsonschema.Draft202012Validator.check_schema(schema)
        for path, node in walk(schema):
            assert not {"$ref", "$defs", "definitions", "title"} & set(node), path
    assert body["tools"][1]["input_schema"] == ZOO.parameters  # strict: Anthropic as written
    assert body["tools"][2]["input_schema"]["properties"] == {}
    assert body["tools"][3]["input_schema"] == {"type": "object", "properties": {}}


# ---------------------------------------------------------------- the user's body fields

OBJECT = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}

DOCUMENTED_PARAMS: dict[str, list[dict[str, Any]]] = {
    "openai-chat": [
        {"tool_choice": "required", "parallel_tool_calls": False, "temperature": 0.0},
        {"tool_choice": {"type": "function", "function": {"name": "lookup"}}, "seed": 7},
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": OBJECT, "strict": True},
            },
            "max_completion_tokens": 256,
            "reasoning_effort": "low",
            "stop": ["\n\n", "END"],
            "metadata": {"run": "42"},
            "store": False,
            "user": "u-1",
        },
        {"tool_choice": "none", "response_format": {"type": "json_object"}, "n": 1},
    ],
    "anthropic": [
        {
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "cache_control": {"type": "ephemeral"},
        },
        {"tool_choice": {"type": "tool", "name": "lookup"}, "stop_sequences": ["END"]},
        {
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "max_tokens": 8192,
            "system": [
                {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
            ],
            "metadata": {"user_id": "u-1"},
        },
        {"tool_choice": {"type": "none"}, "service_tier": "auto"},
    ],
    "openai-responses": [
        {"tool_choice": "required", "parallel_tool_calls": False, "max_output_tokens": 256},
        {"tool_choice": {"type": "function", "name": "lookup"}, "instructions": "Be brief."},
        {
            "reasoning": {"effort": "low", "summary": "auto"},
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "answer",
                    "schema": OBJECT,
                    "strict": True,
                }
            },
            "metadata": {"run": "42"},
            "store": False,
            "include": ["reasoning.encrypted_content"],
        },
        {"tool_choice": "none", "truncation": "auto", "service_tier": "auto"},
    ],
}


@tool
def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city's name.
    """
    return f"{city}: sunny"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fmt", "params"),
    [(fmt, p) for fmt in FORMATS for p in DOCUMENTED_PARAMS[fmt]],
    ids=lambda v: v if isinstance(v, str) else ",".join(v),
)
async def test_documented_body_fields_arrive_unchanged_and_fit_the_sdk_types(
    llm_server: LLMServer, fmt: str, params: dict[str, Any]
) -> None:
    """``tool_choice`` in each provider's own forms, JSON-schema response formats,
    ``thinking``, ``system`` blocks with ``cache_control``, metadata, stop sequences,
    reasoning options: given to the client, each arrives exactly as given (beside
    the client's own fields) and the whole body fits the SDK's request type."""
    system = [ChatMessage.system("Instructions.")]
    async with CLIENTS[fmt](llm_server.url, "sk-test", model="m-1", **params) as client:
        await call(client, [*system, ChatMessage.user("Paris?")], [lookup])
    body = llm_server.requests[-1].json
    assert body_problems(fmt, body) == []
    for key, value in params.items():
        assert body[key] == value, key
    assert body["stream"] is True
    assert body["model"] == "m-1"
    if fmt == "anthropic":
        assert body["max_tokens"] == params.get("max_tokens", 4096)
        assert body["system"] == params.get("system", "Instructions.")


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_call_fields_win_for_that_call_only_and_never_change_the_client(
    llm_server: LLMServer, fmt: str
) -> None:
    """A field given to one ``stream()`` call overrides the client's for that request
    only; the next request is the client's again; the dicts the client was given are
    never changed (chat's ``stream_options`` merge, Responses' ``include`` with
    ``store: false``); ``stream`` is true whatever anyone says."""
    options: dict[str, Any] = {
        "temperature": 0.2,
        "metadata": {"run": "1"},
        "stream": False,
    }
    if fmt == "openai-chat":
        options["stream_options"] = {"include_obfuscation": False}
    if fmt == "openai-responses":
        options.update(store=False, include=["message.output_text.logprobs"])
    kept = copy.deepcopy(options)
    async with CLIENTS[fmt](llm_server.url, "sk-test", **options) as client:
        await call(client, [ChatMessage.user("a")], temperature=0.9, stop_x=1, stream=False)
        await call(client, [ChatMessage.user("b")])
        assert client.params == kept
    first, second = (r.json for r in llm_server.requests)
    assert (first["temperature"], second["temperature"]) == (0.9, 0.2)
    assert first["stop_x"] == 1
    assert "stop_x" not in second
    assert first["stream"] is True
    assert second["stream"] is True
    assert first["metadata"] == second["metadata"] == {"run": "1"}
    if fmt == "openai-chat":
        assert second["stream_options"] == {"include_usage": True, "include_obfuscation": False}
    if fmt == "openai-responses":
        expected = ["message.output_text.logprobs", "reasoning.encrypted_content"]
        assert first["include"] == second["include"] == expected


@pytest.mark.asyncio
async def test_anthropic_max_tokens_is_always_sent_and_a_call_may_raise_it(
    llm_server: LLMServer,
) -> None:
    """Anthropic requires ``max_tokens``: the default (4096), the client's, and one call's."""
    async with (
        AnthropicClient(llm_server.url, "sk-test") as default,
        AnthropicClient(llm_server.url, "sk-test", max_tokens=1000) as given,
    ):
        await call(default, [ChatMessage.user("a")])
        await call(given, [ChatMessage.user("b")])
        await call(given, [ChatMessage.user("c")], max_tokens=20000)
        await call(given, [ChatMessage.user("d")])
    assert [r.json["max_tokens"] for r in llm_server.requests] == [4096, 1000, 20000, 1000]


# ---------------------------------------------------------------- provider-defined tools

SERVER_TOOLS: dict[str, list[dict[str, Any]]] = {
    "anthropic": [
        {
            "type": "web_search_20250305",
            "name": "web_search",
            "max_uses": 3,
            "allowed_domains": ["example.com"],
            "user_location": {"type": "approximate", "city": "Paris", "country": "FR"},
            "cache_control": {"type": "ephemeral"},
        }
    ],
    "openai-responses": [
        {"type": "web_search", "search_context_size": "low"},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 4},
        {
            "type": "mcp",
            "server_label": "docs",
            "server_url": "https://example.com/mcp",
            "require_approval": "never",
        },
    ],
    "openai-chat": [
        {
            "type": "custom",
            "custom": {
                "name": "shell",
                "description": "Run a command.",
                "format": {"type": "text"},
            },
        }
    ],
}


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_provider_defined_tools_go_verbatim_after_the_calls_own_and_never_pile_up(
    llm_server: LLMServer, fmt: str
) -> None:
    """Tools the provider defines (Anthropic's web search with its options and cache
    breakpoint, Responses' hosted tools, chat's custom tools), given to the client,
    are offered verbatim after the call's own tools on every request, and three calls
    send them three times once, not once, twice, thrice."""
    given = SERVER_TOOLS[fmt]
    async with CLIENTS[fmt](llm_server.url, "sk-test", tools=copy.deepcopy(given)) as client:
        for _ in range(3):
            await call(client, [ChatMessage.user("Search.")], [lookup])
        assert client.params["tools"] == given
    bodies = [r.json for r in llm_server.requests]
    assert all(b["tools"] == bodies[0]["tools"] for b in bodies)
    assert bodies[0]["tools"][1:] == given
    assert llm_server.requests[0].tool_names[0] == "lookup"
    assert body_problems(fmt, bodies[0]) == []


# ---------------------------------------------------------------- the bytes


@attrs.frozen
class Seen:
    """One request a :func:`recording_server` received, as it came."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw: bytes


@contextlib.asynccontextmanager
async def recording_server(fmt: str) -> AsyncIterator[tuple[str, list[Seen]]]:
    """A server on 127.0.0.1 recording each POST (any path) as it came, answering "ok"
    in ``fmt``: what :class:`~rafrx.testing.LLMServer` does not show (raw bytes, paths
    that are no provider's own)."""
    seen: list[Seen] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen.append(Seen(request.path, dict(request.query), dict(request.headers), raw))
        body = render(Reply(text="ok"), fmt)  # type: ignore[arg-type]
        return web.Response(body=body, content_type="text/event-stream")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


def _refuse(literal: str) -> Any:
    raise ValueError(f"{literal} is not JSON")


ODD = "é 😀 a\u0301 \u05e9\u05dc\u05d5\u05dd \x00 \u2028 \u2029 \t \x7f 𝄞 \ufeff"


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_the_body_is_strict_utf8_json_and_odd_characters_arrive_exactly(fmt: str) -> None:
    """Non-ASCII, astral, combining, right-to-left, NUL, line and paragraph separators,
    DEL and a BOM, in every place text goes (system, user, assistant, tool arguments,
    tool results, a body field), with a NaN and an infinity among the values: the body
    is ``application/json``, decodes as strict UTF-8 and strict JSON (no ``NaN`` /
    ``Infinity`` literal, which every provider refuses), its ``Content-Length`` is right,
    and every string arrives exactly (the non-finite numbers as ``null``)."""
    history = [
        ChatMessage.system(f"sys {ODD}"),
        ChatMessage.user(f"user {ODD}"),
        ChatMessage.assistant_with_tools(
            f"calling {ODD}",
            [ToolCall("c1", "lookup", {"city": ODD, "score": float("nan"), "big": float("inf")})],
        ),
        ChatMessage.tool(f"result {ODD}", "c1"),
    ]
    async with recording_server(fmt) as (url, seen), CLIENTS[fmt](url, "sk-test") as client:
        await call(client, history, [lookup], metadata={"note": ODD, "x": float("-inf")})
    [request] = seen
    headers, raw = request.headers, request.raw
    assert headers["Content-Type"].startswith("application/json")
    assert int(headers["Content-Length"]) == len(raw)
    text = raw.decode("utf-8", errors="strict")
    body = json.loads(text, parse_constant=_refuse)
    assert body["metadata"] == {"note": ODD, "x": None}
    sent = json.dumps(body, ensure_ascii=False)
    for needle in (f"sys {ODD}", f"user {ODD}", f"calling {ODD}", f"result {ODD}"):
        assert json.dumps(needle, ensure_ascii=False)[1:-1] in sent, needle
    arguments = _arguments(fmt, body)
    assert arguments == {"city": ODD, "score": None, "big": None}


def _arguments(fmt: str, body: Mapping[str, Any]) -> Any:
    """The one tool call's arguments in a body, parsed."""
    if fmt == "openai-chat":
        [call_message] = [m for m in body["messages"] if m.get("tool_calls")]
        return json.loads(call_message["tool_calls"][0]["function"]["arguments"])
    if fmt == "anthropic":
        blocks = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"]
        return blocks[0]["input"]
    [item] = [i for i in body["input"] if i.get("type") == "function_call"]
    return json.loads(item["arguments"])


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_very_long_history_is_sent_whole_and_in_order(fmt: str) -> None:
    """1500 messages (over 1 MiB of body: aiohttp's threshold for writing in chunks),
    with a tool step every 25 messages: the request carries all of them, in order,
    every call answered right after it, and the body is exactly as long as announced."""
    history: list[ChatMessage] = []
    for i in range(60):
        history.append(ChatMessage.user(f"q{i} " + "x" * 9000))
        history.append(
            ChatMessage.assistant_with_tools(
                "", [ToolCall(f"call_{i}", "lookup", {"city": f"c{i}"})]
            )
        )
        history.append(ChatMessage.tool(f"r{i} " + "y" * 9000, f"call_{i}"))
        for j in range(11):
            history.append(ChatMessage.assistant(f"a{i}.{j} " + "z" * 50))
            history.append(ChatMessage.user(f"u{i}.{j} " + "w" * 50))
    assert len(history) == 1500
    async with recording_server(fmt) as (url, seen), CLIENTS[fmt](url, "sk-test") as client:
        await call(client, history, [lookup])
    [request] = seen
    headers, raw = request.headers, request.raw
    assert len(raw) > 1024 * 1024
    assert int(headers["Content-Length"]) == len(raw)
    body = json.loads(raw)
    texts = list(_texts(fmt, body))
    expected = [m.content for m in history if m.content]
    assert texts == expected
    assert len(_call_ids(fmt, body)) == 60


def _texts(fmt: str, body: Mapping[str, Any]) -> Iterator[str]:
    """Every text (message, tool result) of a body, in order."""
    items = body["input"] if fmt == "openai-responses" else body["messages"]
    for item in items:
        if "output" in item:
            yield item["output"]
        content = item.get("content")
        if isinstance(content, str) and content:
            yield content
        elif isinstance(content, list):
            for block in content:
                if block["type"] == "text":
                    yield block["text"]
                elif block["type"] == "tool_result":
                    yield block["content"]


def _call_ids(fmt: str, body: Mapping[str, Any]) -> list[str]:
    items = body["input"] if fmt == "openai-responses" else body["messages"]
    ids: list[str] = []
    for item in items:
        ids += [c["id"] for c in item.get("tool_calls") or ()]
        if item.get("type") == "function_call":
            ids.append(item["call_id"])
        if isinstance(item.get("content"), list):
            ids += [b["id"] for b in item["content"] if b["type"] == "tool_use"]
    return ids


# ---------------------------------------------------------------- gateways


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("cls", "endpoint"),
    [(OpenAIChatClient, "chat/completions"), (OpenAIResponsesClient, "responses")],
)
async def test_azure_v1_urls_keep_their_query_and_authenticate_with_the_api_key_header(
    cls: type[LLMClient], endpoint: str
) -> None:
    """Azure OpenAI's v1 API (``{resource}/openai/v1/``, an ``api-version`` query on
    the preview) with the key in an ``api-key`` header, as ``openai.AzureOpenAI`` sends
    it (https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle):
    the endpoint is appended to the path, the query kept, no ``Authorization`` sent,
    the ``model`` field is the deployment name."""
    fmt = "openai-chat" if cls is OpenAIChatClient else "openai-responses"
    async with recording_server(fmt) as (url, seen):
        base = f"{url}/openai/v1/?api-version=preview"
        async with cls(base, model="gpt-4o-prod", headers={"api-key": "azure-key"}) as client:
            await call(client, [ChatMessage.user("Hi")])
    [request] = seen
    body = json.loads(request.raw)
    assert request.path == f"/openai/v1/{endpoint}"
    assert request.query == {"api-version": "preview"}
    assert request.headers["api-key"] == "azure-key"
    assert "Authorization" not in request.headers
    assert body["model"] == "gpt-4o-prod"
    assert body_problems(fmt, body) == []


@pytest.mark.asyncio
async def test_openrouter_prefix_headers_and_routing_fields_arrive_as_given() -> None:
    """OpenRouter (https://openrouter.ai/docs/api-reference/overview): the base URL is
    the ``/api/v1`` prefix, the app's ``HTTP-Referer`` and ``X-Title`` headers go beside
    the bearer key, and its own body fields (``provider`` routing, ``reasoning``,
    ``transforms``, a ``models`` fallback list) arrive unchanged."""
    extra = {
        "provider": {"order": ["anthropic", "openai"], "allow_fallbacks": False},
        "reasoning": {"effort": "high", "exclude": False},
        "transforms": ["middle-out"],
        "models": ["anthropic/claude-sonnet-4.5", "openai/gpt-4o"],
    }
    headers = {"HTTP-Referer": "https://example.com", "X-Title": "rafrx tests"}
    async with (
        recording_server("openai-chat") as (url, seen),
        OpenAIChatClient(
            f"{url}/api/v1", "sk-or-v1-test", "openrouter/auto", headers=headers, **extra
        ) as client,
    ):
        await call(client, [ChatMessage.user("Hi")], [lookup])
    [request] = seen
    body = json.loads(request.raw)
    assert request.path == "/api/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-or-v1-test"
    assert request.headers["HTTP-Referer"] == "https://example.com"
    assert request.headers["X-Title"] == "rafrx tests"
    for key, value in extra.items():
        assert body[key] == value, key
    assert body["model"] == "openrouter/auto"


# ---------------------------------------------------------------- found by this hunt


async def sent_body(
    cls: type[LLMClient], messages: Sequence[ChatMessage], tools: Any = None, **params: Any
) -> Any:
    """The JSON body the server received for one call of a ``cls`` client."""
    async with LLMServer() as server, cls(server.url, "sk-test", **params) as client:
        server.enqueue(Reply(text="ok"))
        await call(client, messages, tools)
        return server.requests[-1].json


def strings(value: Any) -> Iterator[str]:
    """Every string (keys included) in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_lone_surrogate_goes_as_the_replacement_character(fmt: str) -> None:
    """A lone surrogate (a tool's output read with ``surrogateescape``, half of an
    emoji) sent as ``"\\ud800"`` is valid JSON grammar, but Anthropic answers 400 "The
    request body is not valid JSON: no low surrogate in string"
    (anthropics/claude-code#3277, #1939, #6273), OpenAI and DeepSeek refuse it too
    (anomalyco/opencode#14630, JohnnyZ93/oai-compatible-copilot#206), this request and
    every later one of the conversation. It goes as U+FFFD; a pair of halves is the
    character it makes."""
    text = "ls: caf\udce9 \ud83d done \ud83d\ude00 é"
    body = await sent_body(CLIENTS[fmt], [ChatMessage.user(text)])
    sent = [s for s in strings(body) if "caf" in s]
    assert sent == ["ls: caf\ufffd \ufffd done 😀 é"]
    bad = [s for s in strings(body) if any(0xD800 <= ord(c) <= 0xDFFF for c in s)]
    assert bad == []


@pytest.mark.asyncio
async def test_anthropic_final_assistant_text_ends_without_whitespace() -> None:
    """A conversation ending with an assistant message (a prefill, a paused turn going
    on) whose text ends in whitespace: Anthropic answers 400 "final assistant content
    cannot end with trailing whitespace" (tailcallhq/forgecode#1872,
    anomalyco/opencode#1295; other clients trim it: aaif-goose/goose#5967,
    crewAIInc/crewAI#4620). The last text is trimmed, a blank one left out, and an
    assistant message left empty with it too; earlier messages keep their text."""
    body = await sent_body(
        AnthropicClient,
        [
            ChatMessage.user("Write a haiku."),
            ChatMessage.assistant("Rain \n"),
            ChatMessage.user("Another."),
            ChatMessage.assistant("Here it is:\n"),
        ],
    )
    assert [m["content"][-1]["text"] for m in body["messages"]] == [
        "Write a haiku.",
        "Rain \n",
        "Another.",
        "Here it is:",
    ]
    blank = await sent_body(
        AnthropicClient, [ChatMessage.user("Go on."), ChatMessage.assistant(" \n")]
    )
    assert [m["role"] for m in blank["messages"]] == ["user"]


@pytest.mark.asyncio
@pytest.mark.parametrize("parameters", [{}, None, {"properties": {"q": {"type": "string"}}}])
async def test_a_mapping_tool_with_no_or_typeless_parameters_is_an_object_schema(
    parameters: Any,
) -> None:
    """A tool mapping with ``"parameters": {}``, ``None`` (an MCP tool without a schema,
    galaxyproject/galaxy#22030) or a schema without ``type`` reaches every provider as an
    object schema: Anthropic answers 400 "input_schema.type: Field required" otherwise
    (lidge-jun/opencodex#75)."""
    mapping = {"type": "function", "function": {"name": "now", "parameters": parameters}}
    for fmt, cls in CLIENTS.items():
        body = await sent_body(cls, [ChatMessage.user("Time?")], [mapping])
        [sent] = body["tools"]
        schema = sent.get("input_schema") or sent.get("parameters") or sent["function"]
        schema = schema.get("parameters", schema)
        assert schema["type"] == "object", fmt
        assert schema.get("properties") == (parameters or {}).get("properties", {}), fmt


@pytest.mark.asyncio
async def test_an_anthropic_tool_mapping_keeps_its_documented_fields() -> None:
    """Anthropic caches the tool definitions up to the one marked ``cache_control``
    (its prompt-caching guide: "Place cache_control on the last tool"); a tool also
    takes ``strict``, ``input_examples``, ``defer_loading``. A mapping in Anthropic's
    own shape goes with all of them."""
    mapping = {
        "name": "lookup",
        "description": "Look a city up.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        "cache_control": {"type": "ephemeral"},
        "strict": True,
        "input_examples": [{"city": "Paris"}],
    }
    body = await sent_body(AnthropicClient, [ChatMessage.user("Paris?")], [mapping])
    assert body["tools"] == [mapping]
    assert body_problems("anthropic", {**body, "stream": True}) == []


def test_a_strict_tool_with_a_fixed_length_tuple_is_refused_at_definition() -> None:
    """OpenAI's strict mode has no ``prefixItems`` (400 "array schema missing items":
    pydantic/pydantic-ai#7315, openai/openai-agents-python#4752): ``@tool(strict=True)``
    refuses a ``tuple[int, str]`` parameter at once, naming it, as its other
    inexpressible types; a variadic tuple is an array and stays strict."""

    def locate(point: tuple[int, str]) -> str:
        return repr(point)

    with pytest.raises(TypeError, match="point"):
        tool(strict=True)(locate)

    def path(points: tuple[int, ...]) -> str:
        return repr(points)

    assert strict_rule_breaks(tool(strict=True)(path).strict_parameters) == []


@pytest.mark.asyncio
async def test_openai_chat_sends_no_function_description_over_1024_characters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Chat completions refuse a function description over 1024 characters (400
    "string too long ... maximum length 1024": OpenHands/OpenHands#4838,
    getsentry/sentry-mcp#106; gptme/gptme#1697 cuts it with a warning). A long
    docstring's description is cut there, with one warning; Anthropic and the
    Responses API get it whole."""
    long_doc = ("Search the knowledge base for documents about the topic. " * 30).strip()

    def search(topic: str) -> str:
        return topic

    search.__doc__ = long_doc
    searcher = tool(search)
    with caplog.at_level("WARNING", logger="rafrx.sources.clients"):
        for _ in range(2):
            body = await sent_body(OpenAIChatClient, [ChatMessage.user("rx?")], [searcher])
            description = body["tools"][0]["function"]["description"]
            assert len(description) == 1024
            assert description == long_doc[:1023] + "…"
    assert len([r for r in caplog.records if "description" in r.getMessage()]) <= 1
    for fmt in ("anthropic", "openai-responses"):
        body = await sent_body(CLIENTS[fmt], [ChatMessage.user("rx?")], [searcher])
        [sent] = body["tools"]
        assert sent["description"] == long_doc


@pytest.mark.parametrize("text", ["\\ud83d\ude00", "C:\\ud83d\udc4d"])
def test_a_lone_surrogate_after_an_escaped_backslash_is_replaced(text: str) -> None:
    """A lone low surrogate right after the *text* ``\\ud83d`` (a backslash, then
    ``ud83d``: code, a path) reads like the second half of a pair in the JSON; it
    still goes as U+FFFD, and the text before it as it was."""
    from rafrx._finite import strict_dumps
    from rafrx.sources._http import _utf8

    sent = json.loads(_utf8(strict_dumps({"a": text})))["a"]
    assert sent == text[:-1] + "\ufffd"
