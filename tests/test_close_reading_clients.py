"""Close reading of the request-building side: clients, strict schemas, docstrings.

The angle is a code reviewer reading ``rafrx/sources/clients.py``,
``rafrx/_strict.py``, ``rafrx/_constraints.py``, ``rafrx/_docstrings.py``,
``rafrx/_slot_init.py``, ``rafrx/_fragments.py``, ``rafrx/_call.py``,
``rafrx/history.py`` and ``rafrx/__init__.py`` line by line and asking, for each
branch, which input reaches it and whether the result is right. Each test pins
one such branch: how ``base_url`` and the endpoint are joined (query kept, one
``/v1``), which header wins and how often it is sent, where secrets may show,
which body fields a provider would refuse, what strict mode keeps of a schema's
meaning, how the three docstring styles read, and the small helpers' contracts.
HTTP goes over real aiohttp to :class:`rafrx.testing.LLMServer` on 127.0.0.1,
which records every request it gets.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import decimal
import functools
import re
import threading
from collections.abc import Sequence
from typing import Annotated, Any

import annotated_types
import attrs
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from yarl import URL

import rafrx
from rafrx import (
    AgentResponse,
    ChatMessage,
    InMemoryHistoryProvider,
    MessageSource,
    Tool,
    collect_agent_response,
    convert,
    tool,
)
from rafrx._call import call_function, is_async
from rafrx._constraints import annotated_schema, bounded
from rafrx._docstrings import parse_docstring
from rafrx._fragments import compact, join_surrogates, joined
from rafrx._schema_check import check
from rafrx._slot_init import slot_builder, slot_init
from rafrx._strict import strict_schema, without_nulls
from rafrx.errors import HTTPStatusError, RafrxError
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import Fault, LLMServer

KEY = "sk-close-reading-0123456789abcdef"
USER = [ChatMessage.user("Hi")]
CLIENTS: dict[str, type[LLMClient]] = {
    "chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "responses": OpenAIResponsesClient,
}
ENDPOINTS = {"chat": "chat/completions", "anthropic": "messages", "responses": "responses"}
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


async def ask(
    client: LLMClient, tools: Sequence[Any] = (), **params: Any
) -> tuple[AgentResponse | None, RafrxError | None]:
    """One call: its response, or the typed error it ended with."""
    try:
        async with asyncio.timeout(10):  # against hangs only
            updates = client.stream(USER, list(tools), **params).pipe(convert())
            return await collect_agent_response(updates), None
    except RafrxError as err:
        return None, err


# ---------------------------------------------------------------- base_url + endpoint


@pytest.mark.parametrize(
    ("kind", "base", "path"),
    [
        ("chat", "https://api.openai.com", "/v1/chat/completions"),
        ("chat", "https://api.openai.com/", "/v1/chat/completions"),
        ("chat", "https://api.openai.com/v1/", "/v1/chat/completions"),
        ("chat", "https://openrouter.ai/api/v1", "/api/v1/chat/completions"),
        ("chat", "https://g.example/v1beta/openai/", "/v1beta/openai/chat/completions"),
        (
            "chat",
            "https://r.openai.azure.com/openai/deployments/d1",
            "/openai/deployments/d1/chat/completions",
        ),
        ("anthropic", "https://api.anthropic.com", "/v1/messages"),
        ("anthropic", "https://api.anthropic.com/v1", "/v1/messages"),
        ("anthropic", "https://api.deepseek.com/anthropic", "/anthropic/v1/messages"),
        ("anthropic", "https://api.deepseek.com/anthropic/", "/anthropic/v1/messages"),
        ("responses", "http://localhost:11434/v1", "/v1/responses"),
        ("responses", "https://r.openai.azure.com/openai/v1/", "/openai/v1/responses"),
    ],
)
def test_the_endpoint_goes_under_the_prefix_with_one_v1(kind: str, base: str, path: str) -> None:
    url = CLIENTS[kind](base).url
    assert url.path == path
    assert url.host == URL(base).host


SEGMENT = st.from_regex(r"[A-Za-z0-9._~-]{1,8}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)


@FAST
@given(
    kind=st.sampled_from(sorted(CLIENTS)),
    segments=st.lists(SEGMENT, max_size=3),
    slash=st.booleans(),
    query=st.dictionaries(
        st.from_regex(r"[a-z]{1,6}", fullmatch=True),
        st.from_regex(r"[A-Za-z0-9-]{0,6}", fullmatch=True),
        max_size=2,
    ),
)
def test_endpoint_joining_keeps_the_prefix_and_the_query(
    kind: str, segments: list[str], slash: bool, query: dict[str, str]
) -> None:
    """Whatever the prefix, the endpoint follows it after exactly one slash, ``/v1``
    is added only to a bare root (or, for Anthropic, a prefix not ending in it), and
    the query (Azure's ``api-version``) is kept as it was."""
    base = URL("https://gw.example").with_path("/".join(segments) + ("/" if slash else ""))
    base = base.with_query(query)
    url = CLIENTS[kind](str(base)).url
    prefix = "/" + "/".join(segments) if segments else ""
    if not segments or (kind == "anthropic" and segments[-1] != "v1"):
        prefix += "/v1"
    assert url.path == f"{prefix}/{ENDPOINTS[kind]}"
    assert "//" not in url.raw_path
    assert dict(url.query) == query


@pytest.mark.asyncio
async def test_the_query_of_base_url_reaches_the_server(llm_server: LLMServer) -> None:
    """Azure's ``api-version`` rides on ``base_url``; the request carries it, on the
    endpoint's path, over real HTTP."""
    async with OpenAIChatClient(llm_server.url + "/v1?api-version=2024-10-21", KEY) as client:
        response, error = await ask(client)
    assert error is None
    assert response is not None
    seen = llm_server.requests[-1]
    assert seen.path == "/v1/chat/completions"
    assert seen.query["api-version"] == "2024-10-21"


@pytest.mark.parametrize(
    "base", ["ftp://me:hunter2@host/v1", "me:hunter2@host/v1?key=AIza99", "/v1/chat"]
)
def test_a_base_url_that_is_no_http_url_is_refused_without_its_credentials(base: str) -> None:
    with pytest.raises(ValueError, match="base_url") as raised:
        OpenAIChatClient(base, KEY)
    assert "hunter2" not in str(raised.value)
    assert "AIza99" not in str(raised.value)


# ---------------------------------------------------------------- headers


@pytest.mark.asyncio
async def test_user_headers_replace_the_defaults_whatever_their_case(
    llm_server: LLMServer,
) -> None:
    """``headers=`` win over the client's own (the key's header too), compared without
    case as HTTP does, and each name goes once."""
    given = {"authorization": "Bearer gateway-token", "ACCEPT": "text/event-stream; q=1"}
    async with OpenAIChatClient(llm_server.url, KEY, headers=given) as client:
        _, error = await ask(client)
    assert error is None
    headers = llm_server.requests[-1].headers
    assert len(headers.getall("Authorization")) == 1
    assert headers.getall("Accept") == ["text/event-stream; q=1"]
    assert headers["User-Agent"].startswith("rafrx")


@pytest.mark.asyncio
async def test_anthropic_sends_its_key_as_x_api_key_with_the_version(
    llm_server: LLMServer,
) -> None:
    async with AnthropicClient(llm_server.url, KEY, anthropic_version="2023-06-01") as client:
        _, error = await ask(client)
    assert error is None
    headers = llm_server.requests[-1].headers
    assert headers["x-api-key"] == "***"  # (recorded redacted: it was sent)
    assert headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in headers


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [None, ""])
async def test_no_key_sends_no_credentials(llm_server: LLMServer, key: str | None) -> None:
    """A local server without a key: neither ``Authorization`` nor ``x-api-key``."""
    for cls in (OpenAIChatClient, AnthropicClient):
        async with cls(llm_server.url, key) as client:
            _, error = await ask(client)
        assert error is None
        headers = llm_server.requests[-1].headers
        assert "Authorization" not in headers
        assert "x-api-key" not in headers


# ---------------------------------------------------------------- secrets


def test_the_repr_shows_no_key_no_password_and_no_query_value() -> None:
    client = AnthropicClient(
        "https://me:hunter2@gw.example/anthropic?key=AIza123",
        KEY,
        headers={"api-key": "hdr-secret-42"},
    )
    shown = repr(client)
    for secret in (KEY, "hunter2", "AIza123", "hdr-secret-42"):
        assert secret not in shown
    assert "api_key=***" in shown


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_a_server_echoing_the_key_in_its_error_does_not_show_it(
    llm_server: LLMServer, kind: str
) -> None:
    """A 401 whose message repeats the key (and a header credential): the typed
    error and its ``str`` say neither."""
    llm_server.enqueue(Fault.status(401, message=f"Incorrect API key: {KEY} / hdr-secret-42"))
    client = CLIENTS[kind](llm_server.url, KEY, headers={"cf-aig-authorization": "hdr-secret-42"})
    async with client:
        response, error = await ask(client)
    assert response is None
    assert isinstance(error, HTTPStatusError)
    assert error.status == 401
    text = f"{error!s} {error!r}"
    assert KEY not in text
    assert "hdr-secret-42" not in text


# ---------------------------------------------------------------- body fields


@pytest.mark.asyncio
async def test_chat_tool_options_go_only_with_tools(llm_server: LLMServer) -> None:
    """OpenAI refuses ``tool_choice`` / ``parallel_tool_calls`` without ``tools``: they
    are left out of a call without tools, and kept when the client's own ``tools``
    are offered."""
    options = {"tool_choice": "required", "parallel_tool_calls": False}
    async with OpenAIChatClient(llm_server.url, KEY, **options) as client:
        await ask(client)
    assert not {"tool_choice", "parallel_tool_calls", "tools"} & set(llm_server.requests[-1].json)
    server_tool = {"type": "function", "function": {"name": "now", "parameters": {}}}
    async with OpenAIChatClient(llm_server.url, KEY, tools=[server_tool], **options) as client:
        await ask(client)
    body = llm_server.requests[-1].json
    assert body["tool_choice"] == "required"
    assert body["parallel_tool_calls"] is False
    assert [t["function"]["name"] for t in body["tools"]] == ["now"]


@pytest.mark.asyncio
async def test_chat_stream_options_keep_usage_unless_set(llm_server: LLMServer) -> None:
    async with OpenAIChatClient(llm_server.url, KEY, stream_options={"x": 1}) as client:
        await ask(client)
        assert llm_server.requests[-1].json["stream_options"] == {"include_usage": True, "x": 1}
        await ask(client, stream_options={"include_usage": False})
        assert llm_server.requests[-1].json["stream_options"] == {"include_usage": False}
        await ask(client, stream_options=None)
        assert "stream_options" not in llm_server.requests[-1].json
    assert client.params["stream_options"] == {"x": 1}  # (the client's own, unchanged)


@pytest.mark.asyncio
async def test_a_call_cannot_turn_streaming_off(llm_server: LLMServer) -> None:
    async with OpenAIResponsesClient(llm_server.url, KEY, stream=False) as client:
        response, error = await ask(client, stream=False)
    assert error is None
    assert response is not None
    assert llm_server.requests[-1].json["stream"] is True


@pytest.mark.asyncio
async def test_responses_without_store_asks_for_encrypted_reasoning_once(
    llm_server: LLMServer,
) -> None:
    given = ["message.output_text.logprobs", "reasoning.encrypted_content"]
    async with OpenAIResponsesClient(llm_server.url, KEY, store=False) as client:
        await ask(client)
        assert llm_server.requests[-1].json["include"] == ["reasoning.encrypted_content"]
        await ask(client, include=given)
        assert llm_server.requests[-1].json["include"] == given
        await ask(client, store=True)
        assert "include" not in llm_server.requests[-1].json


@pytest.mark.asyncio
async def test_an_anthropic_shaped_tool_keeps_its_extras_and_a_chat_one_is_reshaped(
    llm_server: LLMServer,
) -> None:
    own = {
        "type": "custom",
        "name": "lookup",
        "input_schema": {"properties": {"q": {"type": "string"}}},
        "cache_control": {"type": "ephemeral"},
    }
    chat = {"type": "function", "function": {"name": "now", "description": "Time."}}
    async with AnthropicClient(llm_server.url, KEY) as client:
        await ask(client, [own, chat])
    first, second = llm_server.requests[-1].json["tools"]
    assert first["type"] == "custom"
    assert first["cache_control"] == {"type": "ephemeral"}
    assert first["input_schema"]["type"] == "object"  # (Anthropic requires it)
    assert second == {
        "name": "now",
        "description": "Time.",
        "input_schema": {"type": "object", "properties": {}},
    }


@pytest.mark.asyncio
async def test_a_chat_description_over_the_limit_is_cut_to_it(llm_server: LLMServer) -> None:
    """Chat completions refuse a function description over 1024 characters: it goes
    cut to exactly 1024, ending in an ellipsis; the Responses API gets it whole."""
    long = "word " * 400
    spec = {"name": "verbose", "description": long, "parameters": {}}
    async with OpenAIChatClient(llm_server.url, KEY) as client:
        await ask(client, [spec])
    sent = llm_server.requests[-1].json["tools"][0]["function"]["description"]
    assert len(sent) == 1024
    assert sent.endswith("…")
    assert long.startswith(sent[:-1])
    async with OpenAIResponsesClient(llm_server.url, KEY) as client:
        await ask(client, [spec])
    assert llm_server.requests[-1].json["tools"][0]["description"] == long


@pytest.mark.asyncio
async def test_responses_tools_are_not_strict_unless_the_tool_says_so(
    llm_server: LLMServer,
) -> None:
    """The Responses API's default is strict, which would rewrite a schema not made
    for it: a mapping without ``strict`` goes ``strict: false``; one with it keeps it."""
    loose = {"type": "function", "name": "a", "parameters": {"type": "object"}}
    closed = {**loose, "name": "b", "strict": True}
    async with OpenAIResponsesClient(llm_server.url, KEY) as client:
        await ask(client, [loose, closed])
    sent = {t["name"]: t["strict"] for t in llm_server.requests[-1].json["tools"]}
    assert sent == {"a": False, "b": True}


# ---------------------------------------------------------------- strict mode

LEAF = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer", "default": 3},
        {"type": "number", "description": "A number."},
        {"type": "boolean"},
        {"type": "string", "enum": ["a", "b"], "default": "a"},
        {"type": ["string", "null"]},
        {"const": "x"},
    ]
)
NAMES = st.from_regex(r"[a-z]{1,5}", fullmatch=True)


def objects(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(NAMES, children, max_size=4).flatmap(
        lambda props: st.sets(st.sampled_from(sorted(props)) if props else st.nothing()).map(
            lambda required: {
                "type": "object",
                "properties": props,
                "required": sorted(required),
                "additionalProperties": False,
            }
        )
    )


SCHEMAS = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        objects(inner),
        inner.map(lambda item: {"type": "array", "items": item}),
        inner.map(lambda item: {"anyOf": [item, {"type": "null"}]}),
    ),
    max_leaves=8,
)


def walk(schema: Any) -> list[dict[str, Any]]:
    """``schema`` and every schema inside it (properties, items, ``anyOf`` branches)."""
    if not isinstance(schema, dict):
        return []
    inner = [*schema.get("properties", {}).values(), *schema.get("anyOf", ())]
    if "items" in schema:
        inner.append(schema["items"])
    return [schema, *(node for sub in inner for node in walk(sub))]


@FAST
@given(objects(SCHEMAS))
def test_strict_form_closes_every_object_and_keeps_optional_ones_optional(
    schema: dict[str, Any],
) -> None:
    """Every object in the strict form lists all its properties as required and is
    closed; no ``default`` is left; a property that was optional now takes ``null``,
    and a required one takes ``null`` only if it did before."""
    strict = strict_schema(schema)
    assert len(walk(strict)) >= len(walk(schema))  # (none lost; a null branch may be added)
    for node in walk(strict):
        assert "default" not in node
        if node.get("type") == "object" or "properties" in node:
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])
    for name, sub in schema["properties"].items():
        takes_null = check(strict["properties"][name], None, "") is None
        if name in schema["required"]:
            assert takes_null == (check(sub, None, "") is None)
        else:
            assert takes_null


def fitting(schema: dict[str, Any], draw: Any) -> Any:
    """A value ``schema`` (of the grammar above, in strict form) accepts."""
    if "anyOf" in schema:
        return fitting(draw(st.sampled_from(schema["anyOf"])), draw)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    kind = schema["type"]
    kind = draw(st.sampled_from(kind)) if isinstance(kind, list) else kind
    if kind == "array":
        return [fitting(schema["items"], draw) for _ in range(draw(st.integers(0, 2)))]
    if kind == "object":
        return {name: fitting(sub, draw) for name, sub in schema["properties"].items()}
    plain = {"null": st.none(), "string": st.text(max_size=3), "boolean": st.booleans()}
    return draw(plain.get(kind, st.integers(-5, 5)))


@FAST
@given(objects(SCHEMAS), st.data())
def test_what_fits_the_strict_form_fits_the_schema_once_its_nulls_are_dropped(
    schema: dict[str, Any], data: st.DataObject
) -> None:
    """The round trip a strict tool's arguments make: any value the strict form
    accepts (a ``null`` for any optional property, at any depth) fits the tool's
    own schema after :func:`without_nulls`."""
    strict = strict_schema(schema)
    value = fitting(strict, data.draw)
    assert check(strict, value, "") is None
    assert check(schema, without_nulls(schema, value), "") is None


@pytest.mark.parametrize(
    ("prop", "where"),
    [
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "'tags'"),
        ({"type": "array", "items": {}}, "'tags[]'"),
        ({"type": "array", "prefixItems": [{"type": "integer"}]}, "'tags'"),
        ({"type": "object", "properties": {"deep": {}}}, "'tags.deep'"),
    ],
)
def test_strict_mode_names_the_parameter_it_cannot_express(
    prop: dict[str, Any], where: str
) -> None:
    schema = {"type": "object", "properties": {"tags": prop}, "required": ["tags"]}
    with pytest.raises(TypeError, match=f"strict mode cannot express parameter {re.escape(where)}"):
        strict_schema(schema)


def test_an_optional_enum_becomes_any_of_with_null_and_keeps_its_description() -> None:
    schema = {
        "type": "object",
        "properties": {"mode": {"type": "string", "enum": ["a", "b"], "description": "How."}},
    }
    assert strict_schema(schema)["properties"]["mode"] == {
        "anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}],
        "description": "How.",
    }


@attrs.frozen
class Box:
    """A box."""

    width: int
    label: str = "box"


@pytest.mark.asyncio
async def test_a_strict_tool_reads_null_as_the_default_at_any_depth() -> None:
    @tool(strict=True)
    def pack(boxes: list[Box], note: str | None = None, count: int = 1) -> str:
        """Pack boxes."""
        return f"{[(b.width, b.label) for b in boxes]} {note} {count}"

    sent = pack.to_openai()["function"]
    assert sent["strict"] is True
    assert sent["parameters"]["required"] == ["boxes", "note", "count"]
    arguments = {"boxes": [{"width": 2, "label": None}], "note": None, "count": None}
    assert await pack.invoke(arguments) == "[(2, 'box')] None 1"


def test_without_nulls_keeps_a_null_the_schema_takes() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": ["integer", "null"], "default": 5}, "b": {"type": "integer"}},
    }
    assert without_nulls(schema, {"a": None, "b": None}) == {"a": None}


# ---------------------------------------------------------------- Annotated metadata


def test_annotated_lengths_follow_the_json_type_and_bounds_become_numbers() -> None:
    assert annotated_schema({"type": "array"}, [annotated_types.MinLen(1)]) == {
        "type": "array",
        "minItems": 1,
    }
    assert annotated_schema(
        {"type": "number"}, [annotated_types.Ge(decimal.Decimal("2.0")), annotated_types.Lt(1e400)]
    ) == {"type": "number", "minimum": 2}  # (a whole Decimal is an int; inf is no bound)


def test_a_bound_with_no_json_number_is_checked_after_conversion() -> None:
    after = bounded(datetime.date.fromisoformat, [annotated_types.Gt(datetime.date(2024, 1, 1))])
    assert after("2024-06-01") == datetime.date(2024, 6, 1)
    with pytest.raises(ValueError, match="more than 2024-01-01, got 2024-01-01"):
        after("2024-01-01")


def test_a_field_description_wins_over_a_plain_string_in_either_order() -> None:
    def f(
        a: Annotated[int, "plain", pydantic.Field(description="field")],
        b: Annotated[int, pydantic.Field(description="field"), "plain"],
        c: Annotated[int, "plain", "later"],
    ) -> str:
        """F."""
        return ""

    props = tool(f).parameters["properties"]
    assert [props[n]["description"] for n in "abc"] == ["field", "field", "plain"]


# ---------------------------------------------------------------- docstrings

DOC_WORDS = st.text(
    alphabet=st.characters(categories=("L", "N", "P", "S"), exclude_characters="\x85"),
    min_size=1,
    max_size=8,
)
DOC_LINES = st.lists(DOC_WORDS, min_size=1, max_size=5).map(" ".join)


@FAST
@given(
    params=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
        st.lists(DOC_LINES, min_size=1, max_size=3),
        min_size=1,
        max_size=4,
    ),
    style=st.sampled_from(["google", "sphinx", "numpy"]),
    indent=st.sampled_from(["", "    "]),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_each_docstring_style_gives_each_parameter_its_joined_lines(
    params: dict[str, list[str]], style: str, indent: str, newline: str
) -> None:
    """Any words (colons, brackets, backticks included) in each of the three styles,
    over one or more lines, indented or not, with Unix or Windows line ends."""
    lines = ["Do the thing.", ""]
    for name, text in params.items():
        if style == "google":
            lines += [f"    {name} (int): {text[0]}", *(f"        {t}" for t in text[1:])]
        elif style == "sphinx":
            lines += [f":param int {name}: {text[0]}", *(f"    {t}" for t in text[1:])]
        else:
            lines += [f"{name} : int, optional", *(f"    {t}" for t in text)]
    if style == "google":
        lines.insert(2, "Args:")
    elif style == "numpy":
        lines[2:2] = ["Parameters", "----------"]
    doc = lines[0] + newline + newline.join(indent + line for line in lines[1:])
    summary, docs = parse_docstring(doc)
    assert summary == "Do the thing."
    assert docs == {name: " ".join(text) for name, text in params.items()}


def test_a_description_ending_in_a_colon_is_no_section() -> None:
    doc = """Do these:

    Things: several.

    Args:
        x: The x.

    Returns:
        Nothing.
    """
    assert parse_docstring(doc) == ("Do these:\n\nThings: several.", {"x": "The x."})


def test_a_sections_text_does_not_leak_into_the_parameters() -> None:
    doc = """Do.

    Raises:
        ValueError: when bad.

    Args:
        x: The x,
            continued.

    Examples:
        y: not a parameter.
    """
    assert parse_docstring(doc) == ("Do.", {"x": "The x, continued."})


# ---------------------------------------------------------------- slot_init


@slot_init
@attrs.frozen
class Pair:
    left: int = attrs.field(validator=attrs.validators.ge(0))
    right: str = attrs.field(default="r", converter=str)
    tag: str = attrs.field(default="", kw_only=True)


@attrs.frozen
class PlainPair:
    left: int = attrs.field(validator=attrs.validators.ge(0))
    right: str = attrs.field(default="r", converter=str)
    tag: str = attrs.field(default="", kw_only=True)


@FAST
@given(st.integers(0, 10**6), st.integers() | st.text(max_size=3), st.text(max_size=3))
def test_slot_init_builds_what_attrs_builds(left: int, right: Any, tag: str) -> None:
    built = Pair(left, right, tag=tag)
    plain = PlainPair(left, right, tag=tag)
    assert attrs.astuple(built) == attrs.astuple(plain)
    assert slot_builder(Pair)(left, right, tag) == built
    assert Pair(left) == Pair(left, "r", tag="")


def test_slot_init_keeps_validators_and_their_switch() -> None:
    with pytest.raises(ValueError, match="left"):
        Pair(-1)
    with attrs.validators.disabled():
        assert Pair(-1).left == -1


@pytest.mark.parametrize(
    "field",
    [
        attrs.field(factory=list),
        attrs.field(init=False, default=1),
        attrs.field(alias="other"),
    ],
)
def test_slot_init_refuses_what_it_does_not_reproduce(field: Any) -> None:
    cls = attrs.make_class("Odd", {"x": field}, frozen=True, slots=True)
    with pytest.raises(TypeError, match=r"Odd\.x uses"):
        slot_init(cls)


def test_slot_init_refuses_a_post_init_hook() -> None:
    @attrs.frozen
    class Hooked:
        x: int

        def __attrs_post_init__(self) -> None: ...

    with pytest.raises(TypeError, match="__attrs_post_init__"):
        slot_init(Hooked)


# ---------------------------------------------------------------- history


@pytest.mark.asyncio
async def test_history_keeps_order_and_skips_what_it_loaded_or_was_injected() -> None:
    history = InMemoryHistoryProvider([ChatMessage.user("first")])
    loaded = await history.load()
    assert [m.source for m in loaded] == [MessageSource.CHAT_HISTORY]
    context = ChatMessage.system("Fact.", source=MessageSource.CONTEXT_PROVIDER)
    turn = [*loaded, context, ChatMessage.user("second"), ChatMessage.assistant("third")]
    await history.save(turn)
    await history.save(iter([ChatMessage.user("fourth")]))  # (any iterable of messages)
    assert [m.content for m in history.messages] == ["first", "second", "third", "fourth"]
    assert repr(history) == "InMemoryHistoryProvider(4 messages)"


@pytest.mark.asyncio
async def test_a_change_to_a_loaded_message_never_reaches_the_history() -> None:
    blocks = [{"type": "thinking", "thinking": "t", "signature": "s"}]
    history = InMemoryHistoryProvider([ChatMessage("assistant", "a", provider_data={"x": blocks})])
    (loaded,) = await history.load()
    loaded.provider_data["x"][0]["thinking"] = "edited"
    assert history.messages[0].provider_data["x"][0]["thinking"] == "t"
    history.clear()
    assert await history.load() == ()


# ---------------------------------------------------------------- small helpers


@FAST
@given(st.text(max_size=20), st.integers(0, 40))
def test_utf16_halves_joined_make_the_text_again(text: str, cut: int) -> None:
    """A server slicing by UTF-16 units can split an emoji between two deltas; the
    two decoded halves, joined, are the text again."""
    units = text.encode("utf-16-le")
    cut = min(cut, len(units) // 2) * 2
    halves = [
        units[:cut].decode("utf-16-le", "surrogatepass"),
        units[cut:].decode("utf-16-le", "surrogatepass"),
    ]
    assert join_surrogates("".join(halves)) == text


@FAST
@given(st.lists(st.text(max_size=3), max_size=30), st.integers(1, 5))
def test_compacted_fragments_join_to_the_same_text(fragments: list[str], every: int) -> None:
    parts: list[str] = []
    blocks: list[str] = []
    for fragment in fragments:
        parts.append(fragment)
        if len(parts) >= every:
            compact(parts, blocks)
            assert parts == []
    assert joined(blocks, parts) == "".join(fragments)


class AsyncCallable:
    async def __call__(self, x: int) -> int:
        return x + 1


async def add(x: int, y: int) -> int:
    return x + y


def test_is_async_sees_through_partials_and_callable_objects() -> None:
    assert is_async(functools.partial(functools.partial(add, 1), 2))
    assert is_async(AsyncCallable())
    assert not is_async(len)
    assert not is_async(functools.partial(len))


CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="unset")


@pytest.mark.asyncio
async def test_a_sync_function_runs_on_rafrx_threads_with_the_callers_context() -> None:
    def where() -> tuple[str, str]:
        return threading.current_thread().name, CURRENT.get()

    CURRENT.set("caller")
    name, seen = await call_function(where, [], {})
    assert name.startswith("rafrx-sync")
    assert seen == "caller"


@pytest.mark.asyncio
async def test_stop_iteration_from_a_sync_function_becomes_a_runtime_error() -> None:
    """An asyncio future cannot hold a StopIteration: the awaiter gets a
    RuntimeError naming the function, the StopIteration as its cause."""
    with pytest.raises(RuntimeError, match="next raised StopIteration") as raised:
        await asyncio.wait_for(call_function(next, [iter(())], {}), 5)
    assert isinstance(raised.value.__cause__, StopIteration)


@pytest.mark.asyncio
async def test_an_awaitable_returned_by_a_sync_function_is_awaited() -> None:
    def later(x: int) -> Any:
        return add(x, 1)

    assert await call_function(later, [41], {}) == 42


def test_the_clients_load_lazily_as_the_same_classes() -> None:
    assert rafrx.OpenAIChatClient is OpenAIChatClient
    assert rafrx.AnthropicClient is AnthropicClient
    with pytest.raises(AttributeError, match="'NoSuchClient'"):
        rafrx.NoSuchClient  # noqa: B018


def test_a_tool_built_by_hand_is_offered_under_its_own_name_everywhere() -> None:
    t = Tool("echo", "Echo.", {"properties": {"text": {"type": "string"}}}, lambda text: text)
    assert t.to_openai()["function"]["parameters"]["type"] == "object"
    assert t.to_anthropic()["input_schema"]["type"] == "object"
    assert t.to_responses()["strict"] is False
