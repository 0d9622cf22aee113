"""Review of commit 97a97f5 (close-reading round 3), from a reviewer's angle: each
test pins a behaviour one of its fixes gave, or one it could have broken, as a user
meets it through the public API (Agent, clients, Tool, the SSE decoder).

HTTP goes over real aiohttp to :class:`rafrx.testing.LLMServer` on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import weakref
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import reactivex
import reactivex.operators as rx_ops
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rafrx.updates as u
from rafrx import ChatMessage, FinishReason
from rafrx._cycles import detached
from rafrx._strict import strict_schema, without_nulls
from rafrx.agent import Agent
from rafrx.errors import InvalidToolArguments, RafrxError, TransportError
from rafrx.sources._decoder import UpdateDecoder
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer
from rafrx.tools import Tool, tool

KEY = "sk-review-round3-0123456789abcdef"
USER = [ChatMessage.user("Hi")]


class Answering:
    """A client that answers each LLM call at once (as ``from_iterable`` does)."""

    def __init__(self, text: str = "hi") -> None:
        self.text = text
        self.calls: list[tuple[ChatMessage, ...]] = []

    def stream(self, messages: Sequence[ChatMessage], tools: Any = None, **params: Any) -> Any:
        self.calls.append(tuple(messages))
        return reactivex.from_iterable([u.TextDelta(self.text), u.Finish(FinishReason.STOP)])


class SyncHistory:
    """A history provider written with plain (sync) methods."""

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []

    def load(self) -> list[ChatMessage]:
        return list(self.messages)

    def save(self, messages: Sequence[ChatMessage]) -> None:
        self.messages.extend(messages)


# ---------------------------------------------------------------- sync providers


@pytest.mark.asyncio
async def test_a_sync_history_provider_loads_and_saves() -> None:
    history = SyncHistory()
    client = Answering()
    agent = Agent(client, history=history)
    await agent.send("one")
    await agent.send("two")
    assert [m.content for m in history.messages] == ["one", "hi", "two", "hi"]
    assert [m.content for m in client.calls[1]] == ["one", "hi", "two"]


@pytest.mark.asyncio
async def test_a_sync_context_provider_adds_its_messages() -> None:
    class Context:
        def provide(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
            return [ChatMessage.system(f"{len(messages)} message(s) so far")]

    client = Answering()
    await Agent(client, context_providers=[Context()]).send("hello")
    assert [m.content for m in client.calls[0]] == ["1 message(s) so far", "hello"]


@pytest.mark.asyncio
async def test_a_sync_save_that_raises_fails_the_turn_with_its_error() -> None:
    class Failing(SyncHistory):
        def save(self, messages: Sequence[ChatMessage]) -> None:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await Agent(Answering(), history=Failing()).send("hello")


# ---------------------------------------------------------------- CancelledError from user code


class CancellingContext:
    async def provide(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        raise asyncio.CancelledError("the pool's task was cancelled")


@pytest.mark.asyncio
async def test_a_providers_cancelled_error_fails_the_turn_and_not_the_caller() -> None:
    agent = Agent(Answering(), context_providers=[CancellingContext()])
    with pytest.raises(TransportError) as caught:
        await agent.send("hello")
    assert isinstance(caught.value.__cause__, asyncio.CancelledError)
    assert "the pool's task was cancelled" in str(caught.value)
    assert caught.value.retryable is False
    assert asyncio.current_task().cancelling() == 0  # the caller goes on
    assert (await Agent(Answering()).send("again")).text == "hi"


def test_a_turn_failed_by_a_providers_cancelled_error_is_freed_without_the_gc() -> None:
    async def scenario() -> tuple[weakref.ref[Agent], str]:
        agent = Agent(Answering(), context_providers=[CancellingContext()])
        alive = weakref.ref(agent)
        said = ""
        try:
            await agent.send("hello")
        except TransportError as error:
            said = type(error).__name__
        del agent
        await asyncio.sleep(0)
        return alive, said

    gc.collect()
    gc.disable()
    try:
        alive, said = asyncio.run(scenario())
        assert said == "TransportError"
        assert alive() is None, "the failed turn's agent is kept by a reference cycle"
    finally:
        gc.enable()


def test_a_turn_whose_loop_ends_still_says_the_loop_ended() -> None:
    errors: list[BaseException] = []

    class Never:
        def stream(self, messages: Any, tools: Any = None, **params: Any) -> Any:
            return reactivex.never()

    async def main() -> None:
        agent = Agent(Never())
        agent.run("hello").subscribe(on_error=errors.append)
        await asyncio.sleep(0)

    asyncio.run(main())
    assert len(errors) == 1
    assert isinstance(errors[0], TransportError)
    assert "event loop ended" in str(errors[0])


# ---------------------------------------------------------------- stranded saves


def test_a_turn_started_after_a_save_was_stranded_on_a_closed_loop_runs() -> None:
    gate: dict[str, asyncio.Event] = {}

    class Slow(SyncHistory):
        async def save(self, messages: Sequence[ChatMessage]) -> None:  # type: ignore[override]
            self.messages.extend(messages)
            if "stuck" in gate:
                await gate["stuck"].wait()

    agent = Agent(Answering(), history=Slow())
    loop = asyncio.new_event_loop()

    async def stranded() -> None:
        gate["stuck"] = asyncio.Event()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.send("one"), 0.2)

    loop.run_until_complete(stranded())
    del gate["stuck"]
    loop.close()

    async def later() -> str:
        return (await asyncio.wait_for(agent.send("two"), 5)).text

    assert asyncio.run(later()) == "hi"


# ---------------------------------------------------------------- detached copies


class StatusError(Exception):
    """An SDK's status error: keyword-only arguments, its message in ``args``."""

    def __init__(self, message: str, *, status: int, body: object) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def test_a_detached_status_error_keeps_its_fields_and_its_own_notes() -> None:
    error = StatusError("429 Too Many Requests", status=429, body={"retry": 2})
    error.add_note("first")
    try:
        raise error
    except StatusError:
        pass
    copy = detached(error)
    copy.add_note("second")
    assert type(copy) is StatusError
    assert copy is not error
    assert (copy.args, copy.status, copy.body) == (error.args, 429, {"retry": 2})
    assert copy.__traceback__ is None
    assert error.__notes__ == ["first"]
    assert copy.__notes__ == ["first", "second"]


def test_a_detached_plain_error_is_a_fresh_copy_each_time() -> None:
    error = ValueError("bad", 3)
    first, second = detached(error), detached(error)
    assert first is not second
    assert first.args == second.args == ("bad", 3)


# ---------------------------------------------------------------- client.stream inputs


@attrs.frozen
class Definition:
    """A tool definition of the user's own: an attrs class with the three fields."""

    name: str
    description: str
    parameters: dict[str, Any]


@tool
def now() -> str:
    """The time."""
    return "12:00"


async def _names(client: OpenAIChatClient, server: LLMServer, tools: Any, messages: Any) -> Any:
    await client.stream(messages, tools).pipe(rx_ops.to_list())
    return [t["function"]["name"] for t in server.requests[-1].json.get("tools", [])]


@pytest.mark.asyncio
async def test_client_stream_takes_tools_of_every_shape_from_any_iterable(
    llm_server: LLMServer,
) -> None:
    mapping = {"type": "function", "function": {"name": "weather", "parameters": {}}}
    defined = Definition("lookup", "Look up.", {"type": "object", "properties": {}})
    async with OpenAIChatClient(llm_server.url, KEY) as client:
        generated = (t for t in [now, mapping, defined])
        assert await _names(client, llm_server, generated, USER) == ["now", "weather", "lookup"]
        registry = {"now": now, "weather": mapping}
        assert await _names(client, llm_server, registry.values(), USER) == ["now", "weather"]
        assert await _names(client, llm_server, (), USER) == []


@pytest.mark.asyncio
async def test_client_stream_takes_one_message_or_a_generator_of_them(
    llm_server: LLMServer,
) -> None:
    async with OpenAIChatClient(llm_server.url, KEY) as client:
        await _names(client, llm_server, None, ChatMessage.user("one"))
        assert llm_server.requests[-1].json["messages"] == [{"role": "user", "content": "one"}]
        await _names(client, llm_server, None, (m for m in USER))
        assert llm_server.requests[-1].json["messages"] == [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    ("tools", "said"),
    [
        (now, "not one Tool"),
        ({"name": "now", "parameters": {}}, "not one dict"),
        ([now, "now"], "tool 1 is a str"),
        ([now.fn], "tool 0 is a function"),
    ],
)
def test_client_stream_names_tools_of_the_wrong_shape_before_any_request(
    tools: Any, said: str
) -> None:
    client = OpenAIChatClient("http://127.0.0.1:9", KEY)
    with pytest.raises(TypeError, match=said):
        client.stream(USER, tools)


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ([{"role": "user", "content": "hi"}], "item 0 is .*ChatMessage.from_openai"),
        ({"role": "user", "content": "hi"}, "not a dict .*ChatMessage.from_openai"),
        ("hi", "not a str"),
        (42, "not a int"),
    ],
)
def test_client_stream_names_messages_that_are_no_chat_messages(messages: Any, said: str) -> None:
    client = OpenAIChatClient("http://127.0.0.1:9", KEY)
    with pytest.raises(TypeError, match=said):
        client.stream(messages)


# ---------------------------------------------------------------- decoder: a body with no event

ERROR_BODY = {"error": {"message": "The server is overloaded", "type": "overloaded_error"}}


def _decoded_error(chunks: list[bytes]) -> RafrxError:
    decoder = UpdateDecoder("openai-chat")
    for chunk in chunks:
        assert decoder.feed(chunk) == []
    with pytest.raises(RafrxError) as caught:
        decoder.close()
    return caught.value


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    pings=st.integers(min_value=0, max_value=400),
    ending=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(min_value=1, max_value=5000), max_size=6),
)
def test_an_error_body_after_keep_alive_comments_is_read_however_it_is_cut(
    pings: int, ending: bytes, cuts: list[int]
) -> None:
    body = (b": ping" + ending) * pings + json.dumps(ERROR_BODY, indent=2).encode()
    body = body.replace(b"\n", ending) if ending != b"\n" else body
    points = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    chunks = [body[a:b] for a, b in itertools.pairwise(points) if b > a]
    error = _decoded_error(chunks)
    assert "overloaded" in str(error), f"{error!r}"


def test_a_body_of_comments_only_is_an_incomplete_stream() -> None:
    error = _decoded_error([b": keep-alive\n" * 500])
    assert "held no event" not in str(error)


# ---------------------------------------------------------------- strict schemas with $defs

POINT = {
    "type": "object",
    "properties": {"x": {"type": "number"}, "label": {"type": "string", "default": ""}},
    "required": ["x"],
}
WITH_DEFS = {
    "type": "object",
    "properties": {
        "start": {"$ref": "#/$defs/Point"},
        "end": {"$ref": "#/$defs/Point", "default": None},
    },
    "required": ["start"],
    "$defs": {"Point": POINT},
}


def test_strict_form_makes_defs_strict_and_an_optional_ref_nullable() -> None:
    strict = strict_schema(WITH_DEFS)
    point = strict["$defs"]["Point"]
    assert point["additionalProperties"] is False
    assert point["required"] == ["x", "label"]
    assert point["properties"]["label"]["type"] == ["string", "null"]
    assert strict["properties"]["start"] == {"$ref": "#/$defs/Point"}
    assert strict["properties"]["end"] == {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]}


def test_without_nulls_follows_refs_to_their_defs() -> None:
    sent = {"start": {"x": 1, "label": None}, "end": None}
    assert without_nulls(WITH_DEFS, sent) == {"start": {"x": 1}}


def test_a_strict_tool_with_defs_reads_nulls_as_defaults_through_refs() -> None:
    t = Tool("draw", "Draw a line.", WITH_DEFS, lambda **kw: kw, strict=True)
    assert t.validate({"start": {"x": 1, "label": None}, "end": None}) == {"start": {"x": 1}}


def test_a_draft4_tuple_is_refused_in_strict_mode_naming_the_parameter() -> None:
    schema = {"type": "object", "properties": {"pair": {"type": "array", "items": [{}, {}]}}}
    with pytest.raises(TypeError, match=r"'pair'.*fixed-length"):
        strict_schema(schema)


# ---------------------------------------------------------------- whole-object keywords


def _tool(schema: dict[str, Any]) -> Tool[..., Any]:
    return Tool("t", "A tool.", schema, lambda **kw: kw)


def test_a_hand_built_any_of_required_is_checked_and_its_fitting_calls_pass() -> None:
    t = _tool(
        {
            "type": "object",
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}},
            "anyOf": [{"required": ["id"]}, {"required": ["name"]}],
        }
    )
    assert t.validate({"id": "7"}) == {"id": "7"}
    assert t.validate({"name": "x", "id": "7"}) == {"name": "x", "id": "7"}
    with pytest.raises(InvalidToolArguments, match=r"'id'.*'name'"):
        t.validate({})


def test_a_member_problem_is_told_before_the_whole_objects() -> None:
    t = _tool(
        {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "anyOf": [{"required": ["id"]}],
        }
    )
    with pytest.raises(InvalidToolArguments, match="expected string") as caught:
        t.validate({"id": 7})
    assert "required" not in str(caught.value)


@pytest.mark.parametrize(("value", "ok"), [(0, False), (0.5, True), (10, True), (10.5, False)])
def test_draft4_exclusive_minimum_true_makes_the_bound_exclusive(value: float, ok: bool) -> None:
    t = _tool(
        {
            "type": "object",
            "properties": {
                "n": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 10}
            },
        }
    )
    if ok:
        assert t.validate({"n": value}) == {"n": value}
    else:
        with pytest.raises(InvalidToolArguments, match="'n'"):
            t.validate({"n": value})
