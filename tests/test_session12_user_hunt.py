"""Regression tests of what a new user of rafrx hit first (session 12, "new user" hunt):
someone building an agent and its UI who tries the README, the CLI and the docstrings,
and makes the mistakes a newcomer makes.

Each failed on the commit before its fix: the mistake gave an ``AttributeError`` from
deep inside an operator or the agent loop (or was accepted and did something else)
instead of a ``TypeError`` saying what was wrong and what to write instead. HTTP
exchanges are real aiohttp over 127.0.0.1 (``rafrx.testing.LLMServer``).
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
import reactivex

import rafrx
from rafrx import (
    Agent,
    ChatMessage,
    FinishReason,
    InMemoryHistoryProvider,
    Tool,
    collect_agent_response,
    tool,
)
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.__main__ import main
from rafrx.errors import IncompleteStream
from rafrx.recorder import record, sample
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec


def updates() -> reactivex.Observable[Any]:
    """A text answer as raw updates, as a client's ``stream()`` gives it."""
    return reactivex.of(
        u.ResponseMetadata("r1", "m"), u.TextDelta("Hi"), u.Finish(FinishReason.STOP)
    )


class _Client:
    """A client never asked to stream."""

    def stream(self, messages: Any, tools: Any = None) -> Any:
        raise AssertionError("not called")


# --------------------------------------------- an operator over results given updates


@pytest.mark.parametrize(
    ("name", "operator"),
    [
        ("aggregate()", ops.aggregate),
        ("parse_args_stream()", ops.parse_args_stream),
        ("flush_tool_calls()", ops.flush_tool_calls),
    ],
)
def test_an_operator_over_results_given_updates_says_to_convert_first(
    name: str, operator: Any
) -> None:
    """``client.stream(...).pipe(aggregate())``, ``convert()`` forgotten: it was
    ``AttributeError: 'ResponseMetadata' object has no attribute 'events'``."""
    with pytest.raises(TypeError) as caught:
        updates().pipe(operator()).run()
    message = str(caught.value)
    assert name in message
    assert "ResponseMetadata" in message
    assert "convert()" in message


@pytest.mark.asyncio
async def test_collect_agent_response_of_updates_says_to_convert_first() -> None:
    """The README's ``collect_agent_response(results)`` given ``client.stream(...)``."""
    with pytest.raises(TypeError, match=r"aggregate\(\) takes AgentResponseResults.*convert\(\)"):
        await collect_agent_response(updates())


@pytest.mark.asyncio
async def test_execute_tools_given_updates_says_to_convert_first() -> None:
    with pytest.raises(TypeError, match=r"execute_tools\(\) takes AgentResponseResults"):
        await updates().pipe(ops.execute_tools([]))


def test_an_operator_over_results_given_something_else_names_it() -> None:
    expected = r"aggregate\(\) takes AgentResponseResults, got 'Hi', a str"
    with pytest.raises(TypeError, match=expected):
        reactivex.of("Hi").pipe(ops.aggregate()).run()


def test_the_fused_pipeline_still_aggregates() -> None:
    assert updates().pipe(ops.convert(), ops.aggregate()).run().text == "Hi"


# --------------------------------------------- an operator factory given to pipe() uncalled


@pytest.mark.parametrize(
    ("name", "factory"),
    [
        ("convert", ops.convert),
        ("accumulate_tool_calls", ops.accumulate_tool_calls),
        ("flush_tool_calls", ops.flush_tool_calls),
        ("aggregate", ops.aggregate),
        ("execute_tools", ops.execute_tools),
    ],
)
def test_an_operator_factory_given_to_pipe_uncalled_says_to_call_it(
    name: str, factory: Any
) -> None:
    """``stream.pipe(ops.convert, ops.aggregate())``: pipe() called the factory with the
    stream as ``eager`` (``agent_id``, ``tools`` …), which made an operator function that
    the next stage took for an observable: ``AttributeError: 'function' object has no
    attribute 'subscribe'`` (or ``'run'``): the last stage gave back a function."""
    with pytest.raises(TypeError, match=rf"{name} makes an operator: call it in pipe\(\)"):
        updates().pipe(factory)


def test_an_operator_factory_called_in_pipe_still_works() -> None:
    response = updates().pipe(ops.convert(False), ops.aggregate(None)).run()
    assert response.text == "Hi"


# --------------------------------------------- an agent given what it cannot use


@pytest.mark.parametrize("approver", [True, False, "yes"])
def test_an_approver_that_cannot_answer_is_refused_when_given(approver: Any) -> None:
    """``Agent(client, approver=True)`` meaning "approve everything": it was taken, and each
    call of a tool that requires approval was denied, the model reading "TypeError: 'bool'
    object is not callable"."""
    with pytest.raises(TypeError, match=r"an approver is a callable .*lambda event: True"):
        Agent(_Client(), approver=approver)
    with pytest.raises(TypeError, match=r"an approver is a callable"):
        ops.execute_tools([], approver)
    agent = Agent(_Client())
    with pytest.raises(TypeError, match=r"an approver is a callable"):
        agent.approver = approver
    assert agent.approver is None


@pytest.mark.asyncio
async def test_an_agent_with_a_lambda_approver_approves() -> None:
    @tool(requires_approval=True)
    def delete(path: str) -> str:
        "Delete a file."
        return f"deleted {path}"

    async with LLMServer() as server:
        server.enqueue(Reply(tool_calls=[ToolCallSpec("delete", {"path": "a"})]), Reply(text="ok"))
        async with OpenAIChatClient(server.url, model="m") as client:
            agent = Agent(client, tools=[delete], approver=lambda event: True)
            response = await agent.send("Delete a.")
    assert [m.content for m in response.tool_messages] == ["deleted a"]


@pytest.mark.parametrize(
    ("client", "said"),
    [("gpt-4o", "a str"), (OpenAIChatClient, "the class OpenAIChatClient"), (None, "a NoneType")],
)
def test_an_agent_without_a_client_is_refused_when_made(client: Any, said: str) -> None:
    """``Agent("gpt-4o")`` (other agent libraries take a model name) was taken; its first
    turn failed with ``AttributeError: 'str' object has no attribute 'stream'``."""
    with pytest.raises(TypeError, match=rf"stream\(messages, tools\) method.*not {said}"):
        Agent(client)
    agent = Agent(_Client())
    with pytest.raises(TypeError, match="stream"):
        agent.client = client


@pytest.mark.parametrize(
    ("history", "said"),
    [
        ([ChatMessage.user("Hi")], "a list"),
        (InMemoryHistoryProvider, r"the class InMemoryHistoryProvider \(give an instance\)"),
    ],
)
def test_a_history_without_load_and_save_is_refused_when_given(history: Any, said: str) -> None:
    """``Agent(client, history=[...messages])`` was taken; its first turn failed with
    ``AttributeError: 'list' object has no attribute 'load'``."""
    with pytest.raises(TypeError, match=rf"InMemoryHistoryProvider\(messages\).*not {said}"):
        Agent(_Client(), history=history)
    agent = Agent(_Client(), history=InMemoryHistoryProvider())
    with pytest.raises(TypeError, match="load"):
        agent.history = history


@pytest.mark.asyncio
async def test_a_history_of_sync_methods_still_serves() -> None:
    """The agent awaits a provider's methods only when they return awaitables."""

    class Kept:
        def __init__(self) -> None:
            self.messages: list[ChatMessage] = []

        def load(self) -> list[ChatMessage]:
            return list(self.messages)

        def save(self, messages: Any) -> None:
            self.messages.extend(messages)

    kept = Kept()
    async with LLMServer() as server:
        server.enqueue(Reply(text="Hello."))
        async with OpenAIChatClient(server.url, model="m") as client:
            await Agent(client, history=kept).send("Hi")  # type: ignore[arg-type]
    assert [m.content for m in kept.messages] == ["Hi", "Hello."]


# --------------------------------------------- a view or a collector given no stream


@pytest.mark.asyncio
async def test_live_given_the_coroutine_of_send_says_to_give_run() -> None:
    """``await live(agent.send("Hi"))``: the view showed "error: AttributeError: 'coroutine'
    object has no attribute 'subscribe'", then Python warned the coroutine was never
    awaited (the turn never ran)."""
    agent = Agent(_Client())
    pending = agent.send("Hi")
    shown: list[Any] = []
    with pytest.raises(TypeError, match=r"live\(\) takes a stream .*agent\.run\(\.\.\.\) its"):
        rafrx.live(pending, display=lambda obj, display_id: shown.append(obj))
    assert pending.cr_frame is None  # closed: no "never awaited" warning
    assert shown == []  # no view of a failure that is the caller's


@pytest.mark.asyncio
async def test_collect_agent_response_given_a_response_names_it() -> None:
    response = updates().pipe(ops.convert(), ops.aggregate()).run()
    expected = r"collect_agent_response\(\) takes a stream .*, not an AgentResponse"
    with pytest.raises(TypeError, match=expected):
        await collect_agent_response(response)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_live_still_shows_an_agent_turn() -> None:
    async with LLMServer() as server:
        server.enqueue(Reply(text="Hello."))
        async with OpenAIChatClient(server.url, model="m") as client:
            view = rafrx.live(Agent(client).run("Hi"), display=_Shown)
            assert (await view).text == "Hello."


class _Shown:
    """A display handle that keeps nothing (``display(obj, display_id=True)``)."""

    def __init__(self, obj: Any, display_id: bool) -> None:
        pass

    def update(self, obj: Any) -> None:
        pass


# --------------------------------------------- a body decoded with another dialect


@pytest.mark.parametrize(
    ("recorded", "decoded_as"),
    [
        ("anthropic", "openai-chat"),
        ("openai-responses", "openai-chat"),
        ("openai-chat", "anthropic"),
        ("anthropic", "openai-responses"),
    ],
)
def test_a_whole_body_of_another_format_says_which_dialect_reads_it(
    recorded: str, decoded_as: str
) -> None:
    """``from_sse(anthropic_body).pipe(convert(), aggregate())`` (the dialect defaults to
    openai-chat): "the stream ended without [DONE] or a finish_reason", as if the body
    were cut short, when it is whole and of another format."""
    body = sample(f"demo-{recorded}.sse").read_bytes()
    with pytest.raises(IncompleteStream) as caught:
        from_sse(body, decoded_as).pipe(ops.convert(), ops.aggregate()).run()
    assert f"its events are {recorded}'s, not {decoded_as}'s" in str(caught.value)
    assert f"dialect={recorded!r}" in str(caught.value)


def test_a_body_cut_short_in_its_own_format_says_only_that() -> None:
    body = sample("demo-anthropic.sse").read_bytes()
    cut = body[: body.index(b"event: message_delta")]
    with pytest.raises(IncompleteStream) as caught:
        from_sse(cut, "anthropic").pipe(ops.convert(), ops.aggregate()).run()
    assert str(caught.value) == "the stream ended without message_stop or a stop_reason"


def test_the_error_of_a_body_of_another_format_is_freed_without_the_gc() -> None:
    """As every error of a failed stream (``tests/reliability/test_failure_cycles.py``)."""
    body = sample("demo-anthropic.sse").read_bytes()
    gc.collect()
    gc.disable()
    try:
        try:
            from_sse(body).pipe(ops.convert(), ops.aggregate()).run()
        except IncompleteStream as err:
            said, ref = str(err), weakref.ref(err)
        assert "anthropic's" in said
        assert ref() is None
    finally:
        gc.enable()


# --------------------------------------------- an in-memory history of other things


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ([{"role": "user", "content": "Hi"}], r"item 0 is .*a dict \(ChatMessage\.from_openai"),
        (["Hi"], "item 0 is 'Hi', a str"),
        ("Hi", "not a str"),
    ],
)
def test_an_in_memory_history_of_other_things_is_refused_when_made(
    messages: Any, said: str
) -> None:
    """``InMemoryHistoryProvider([{"role": "user", "content": "Hi"}])`` (OpenAI's message
    dicts) was taken; the agent's first turn failed with ``AttributeError: 'dict' object
    has no attribute 'with_source'``."""
    with pytest.raises(TypeError, match=rf"an InMemoryHistoryProvider keeps ChatMessages.*{said}"):
        InMemoryHistoryProvider(messages)


@pytest.mark.asyncio
async def test_an_in_memory_history_refuses_to_save_other_things() -> None:
    history = InMemoryHistoryProvider()
    with pytest.raises(TypeError, match="keeps ChatMessages; item 0 is"):
        await history.save([{"role": "user", "content": "Hi"}])  # type: ignore[list-item]
    await history.save((ChatMessage.user("Hi"),))
    assert [m.content for m in history.messages] == ["Hi"]


# --------------------------------------------- the CLI's replay of a recording with --dialect


def test_replay_of_a_recording_with_a_dialect_says_dialect_is_for_sse_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rafrx replay turn.jsonl --dialect anthropic``: the recording was read as an SSE
    body, failing with "IncompleteStream: ... the body held no event, it began:
    '{"t":0.0,"kind":"header"...'"."""
    path = tmp_path / "turn.jsonl"
    record(updates(), path).run()
    assert main(["replay", str(path), "--dialect", "anthropic", "--plain"]) == 2
    assert capsys.readouterr().err == (
        f"rafrx replay: error: --dialect is for .sse files: {path} is a recording of decoded"
        " items\n"
    )
    assert main(["replay", str(path), "--plain"]) == 0  # without it, replayed


@pytest.mark.parametrize("cls", [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient])
@pytest.mark.parametrize(
    ("setting", "value", "kind"),
    [
        ("api_key", 1234, "an int"),
        ("api_key", b"sk-bytes-secret", "a bytes"),
        ("model", 4, "an int"),
    ],
)
def test_a_client_setting_of_the_wrong_type_is_refused_when_made(
    cls: Any, setting: str, value: object, kind: str
) -> None:
    """``OpenAIChatClient(url, api_key=1234)`` was accepted, and every call then failed
    as a ``TransportError`` about ``'int' object has no attribute 'strip'``. It is a
    ``TypeError`` when the client is made, naming the type, never the value."""
    with pytest.raises(TypeError) as refused:
        cls("http://127.0.0.1:9/v1", **{setting: value})
    assert str(refused.value) == f"{setting} takes a string (or None), not {kind}"
    assert "sk-bytes-secret" not in repr(refused.value)


@pytest.mark.parametrize("schema", [{"type": "string"}, {"type": "array"}, {"type": ["string"]}])
def test_a_tool_whose_arguments_are_no_object_is_refused_when_made(schema: dict[str, Any]) -> None:
    """``Tool(..., parameters={"type": "string"})`` was accepted, and every turn offering it
    then failed with the provider's 400 (both refuse arguments that are not an object)."""
    with pytest.raises(ValueError, match="a tool's parameters are an object schema"):
        Tool("shout", "Shouts.", schema, str.upper)


def test_object_schemas_of_every_spelling_are_still_tools() -> None:
    for schema in [{}, {"type": "object"}, {"type": ["object", "null"], "properties": {}}]:
        assert Tool("shout", "Shouts.", schema, str.upper).parameters == schema
