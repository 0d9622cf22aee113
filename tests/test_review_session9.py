"""Pins of a review of one day's changes (932d742..HEAD, review9): what each change does
for the inputs that reach it, and what it must not have broken.

The changes reviewed: ``Agent.tools`` checked for two tools of a name; a blank
``reasoning_content`` giving way to ``reasoning``; calls the provider ran
(``ToolCalled``) left alone; ``from_sse``'s dialect checks; ``tool_choice`` only for a
``stream`` that takes it; a client's foreign error as ``TransportError``; callable
objects' descriptions; recorded third-party error subclasses; one history access per
history and one turn per observable approver across agents; the transport split; every
request error keeping the server's ``request_id``; proxy credentials redacted; and two
fast paths (``ResponseAggregator.step``, ``StreamingArgsParser.grow``).

HTTP exchanges are real aiohttp over 127.0.0.1 (``rafrx.testing.LLMServer``); agents
driven without HTTP use a ChatClient of the test's own.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import pathlib
import pickle
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.subject import Subject

import rafrx
from rafrx import Agent, ChatMessage, FinishReason, tool
from rafrx import operators as ops
from rafrx import updates as u
from rafrx._redaction import proxy_secrets
from rafrx.errors import (
    HTTPStatusError,
    ProviderError,
    RafrxError,
    StreamInterrupted,
    TransportError,
)
from rafrx.history import InMemoryHistoryProvider
from rafrx.json_stream import StreamingArgsParser
from rafrx.recorder import record, replay
from rafrx.response import AgentResponse
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIChatClient, RetryPolicy
from rafrx.sources.dialects.openai_chat import OpenAIChatDialect
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, ToolCallSpec
from rafrx.tools import ToolApprovalResponse

GUARD = 10.0


def done(text: str = "ok") -> list[Any]:
    return [u.TextDelta(text), u.Finish(FinishReason.STOP)]


def calls(name: str, call_id: str = "c1", args: str = "{}") -> list[Any]:
    return [
        u.ToolCallStart(call_id, name),
        u.ToolCallArgs(call_id, args),
        u.ToolCallEnd(call_id),
        u.Finish(FinishReason.TOOL_CALLS),
    ]


class Scripted:
    """A ChatClient of the protocol alone: each call plays the next list of updates and
    keeps the messages it was given."""

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = list(turns)
        self.seen: list[tuple[ChatMessage, ...]] = []

    def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
        self.seen.append(tuple(messages))
        return reactivex.from_iterable(self.turns.pop(0))


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


# ---------------------------------------------------------------- Agent.tools


def test_tools_assigned_with_two_of_a_name_are_refused_and_the_old_ones_stay() -> None:
    agent = Agent(Scripted(), tools=[ping])
    with pytest.raises(ValueError, match="two tools are named 'ping'"):
        agent.tools = [ping, ping]
    assert [t.name for t in agent.tools] == ["ping"]


def test_tools_assigned_check_names_as_the_constructor_does() -> None:
    server_tool = {"type": "web_search_20250305", "name": "web_search"}
    agent = Agent(Scripted(), tools=[ping, server_tool])  # a server tool beside a function
    agent.tools = [server_tool, ping]
    assert len(agent.tools) == 2
    with pytest.raises(ValueError, match="two tools are named 'ping'"):
        Agent(Scripted(), tools=[ping, ping])


# ---------------------------------------------------------------- reasoning read back

_REASONING = st.one_of(st.none(), st.just(""), st.text(min_size=1, max_size=8))


@settings(max_examples=60, deadline=None)
@given(content=_REASONING, reasoning=_REASONING)
def test_a_messages_reasoning_is_read_back_as_the_stream_dialect_reads_it(
    content: str | None, reasoning: str | None
) -> None:
    message: dict[str, Any] = {"role": "assistant", "content": "x"}
    if content is not None:
        message["reasoning_content"] = content
    if reasoning is not None:
        message["reasoning"] = reasoning
    read = ChatMessage.from_openai(message).reasoning
    if content or reasoning:  # the dialect's rule: reasoning_content or reasoning
        assert read == (content or reasoning)
    else:
        assert not read


# ---------------------------------------------------------------- calls the provider ran

SERVER_RAN = [
    u.ToolCallStart("s1", "code_exec"),
    u.ToolCallArgs("s1", '{"code": "1+1"}'),
    u.ToolCallEnd("s1"),
    u.ToolCalled("s1", result="2"),
    u.TextDelta("It is 2."),
    u.Finish(FinishReason.STOP),
]


@pytest.mark.asyncio
async def test_a_local_tool_named_as_a_provider_run_call_does_not_run_it_again() -> None:
    ran: list[str] = []

    @tool
    def code_exec(code: str) -> str:
        """Run code."""
        ran.append(code)
        return "local"

    response = await rafrx.collect_agent_response(
        reactivex.from_iterable(SERVER_RAN).pipe(ops.convert(), ops.execute_tools([code_exec]))
    )
    assert ran == []
    assert [m.content for m in response.tool_messages] == ["2"]


@pytest.mark.asyncio
async def test_a_step_with_a_provider_run_call_and_a_local_one_still_goes_on() -> None:
    mixed = [
        *SERVER_RAN[:4],
        u.ToolCallStart("c1", "ping"),
        u.ToolCallArgs("c1", "{}"),
        u.ToolCallEnd("c1"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    client = Scripted(mixed, done("both done"))
    response = await Agent(client, tools=[ping]).send("go")
    assert len(client.seen) == 2  # the local call's result went back to the model
    assert [m.content for m in response.tool_messages] == ["2", "pong"]
    assert response.text.endswith("both done")


# ---------------------------------------------------------------- from_sse dialects

BODY = (
    b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\n'
    b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def test_from_sse_refuses_a_dialect_instance_up_front() -> None:
    with pytest.raises(TypeError, match="not a OpenAIChatDialect"):
        from_sse(BODY, OpenAIChatDialect())  # type: ignore[arg-type]


def test_from_sse_takes_a_dialect_class_as_its_factory() -> None:
    response = from_sse(BODY, OpenAIChatDialect).pipe(ops.convert(), ops.aggregate()).run()
    assert response.text == "Hi"


def test_a_failing_dialect_factory_fails_each_sync_subscription_without_raising() -> None:
    def factory() -> Any:
        raise LookupError("no such model family")

    errors: list[Exception] = []
    source = from_sse(BODY, factory)
    for _ in range(2):  # every subscription makes its dialect anew
        source.subscribe(on_error=errors.append)
    assert [type(e) for e in errors] == [LookupError, LookupError]


# ---------------------------------------------------------------- tool_choice


class Forcing:
    """A client with ``params`` forcing a tool call, and a ``stream`` of a given shape
    recording the keywords it got."""

    params: ClassVar[dict[str, Any]] = {"tool_choice": "required"}

    def __init__(self) -> None:
        self.turns = [calls("ping"), done("answered")]
        self.keywords: list[dict[str, Any]] = []

    def play(self, **keywords: Any) -> reactivex.Observable[Any]:
        self.keywords.append(keywords)
        return reactivex.from_iterable(self.turns.pop(0))


class ArgsOnly(Forcing):
    def stream(self, *args: Any) -> reactivex.Observable[Any]:
        return self.play()


class KeywordOnly(Forcing):
    def stream(
        self, messages: Any, tools: Any = None, *, tool_choice: Any = None
    ) -> reactivex.Observable[Any]:
        return self.play(tool_choice=tool_choice)


class AnyKeywords(Forcing):
    def stream(self, messages: Any, tools: Any = None, **params: Any) -> reactivex.Observable[Any]:
        return self.play(**params)


@pytest.mark.asyncio
async def test_a_stream_taking_only_positional_args_never_gets_tool_choice() -> None:
    client = ArgsOnly()
    response = await Agent(client, tools=[ping]).send("go")
    assert response.text == "answered"
    assert client.keywords == [{}, {}]


@pytest.mark.parametrize("shape", [KeywordOnly, AnyKeywords])
@pytest.mark.asyncio
async def test_a_stream_taking_tool_choice_gets_it_unforced_after_a_tool_ran(
    shape: type[Forcing],
) -> None:
    client = shape()
    response = await Agent(client, tools=[ping]).send("go")
    assert response.text == "answered"
    assert client.keywords[0].get("tool_choice") is None  # the client's own, first
    assert client.keywords[1]["tool_choice"] == "auto"


# ---------------------------------------------------------------- a client's own errors


class Failing:
    """A client wrapping another library: its stream raises, or its observable fails
    after some text."""

    def __init__(self, error: BaseException, *, at_call: bool) -> None:
        self.error = error
        self.at_call = at_call

    def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
        if self.at_call:
            raise self.error
        return reactivex.concat(
            reactivex.from_iterable([u.TextDelta("Partly")]), reactivex.throw(self.error)
        )


@pytest.mark.parametrize("at_call", [True, False])
@pytest.mark.asyncio
async def test_a_foreign_timeout_ends_the_turn_as_a_transport_error_caused_by_it(
    at_call: bool,
) -> None:
    original = TimeoutError("read timed out")
    with pytest.raises(TransportError) as info:
        await Agent(Failing(original, at_call=at_call)).send("hi")
    err = info.value
    assert err.__cause__ is original
    assert "TimeoutError: read timed out" in str(err)
    assert isinstance(err.partial, AgentResponse)
    assert err.partial.text == ("" if at_call else "Partly")
    copy = pickle.loads(pickle.dumps(err))  # (the cause does not travel; the text does)
    assert type(copy) is TransportError
    assert str(copy) == str(err)


@pytest.mark.asyncio
async def test_a_clients_rafrx_error_ends_the_turn_as_it_is() -> None:
    original = ProviderError("overloaded", error_type="overloaded_error")
    with pytest.raises(ProviderError) as info:
        await Agent(Failing(original, at_call=False)).send("hi")
    assert info.value is original
    assert info.value.__cause__ is None
    assert info.value.partial is not None
    assert info.value.partial.text == "Partly"


# ---------------------------------------------------------------- callable objects


class Documented:
    def __call__(self, a: int) -> int:
        """Add one to a number."""
        return a + 1


class ClassDocumented:
    """Square a number."""

    def __call__(self, a: int) -> int:
        return a * a


def test_a_callable_objects_own_docstrings_still_describe_it() -> None:
    assert tool(Documented()).description == "Add one to a number."
    assert tool(ClassDocumented()).description == "Square a number."


# ---------------------------------------------------------------- recorder


class Blocked(ProviderError):
    """A dialect's error."""


class HardBlocked(Blocked):
    """A subclass of it, two classes away from rafrx."""


def _recorded_error(path: pathlib.Path, error: Exception) -> dict[str, Any]:
    failing = reactivex.concat(reactivex.from_iterable([u.TextDelta("Hi")]), reactivex.throw(error))
    with pytest.raises(type(error)):
        record(failing, path).pipe(rx.to_list()).run()
    fields: dict[str, Any] = json.loads(path.read_text().splitlines()[-1])["fields"]
    return fields


def test_a_rafrx_error_is_recorded_without_a_base(tmp_path: pathlib.Path) -> None:
    fields = _recorded_error(tmp_path / "a.jsonl", ProviderError("no", error_type="x"))
    assert fields["type"] == "ProviderError"
    assert "base" not in fields


def test_a_subclass_two_levels_out_replays_as_the_nearest_rafrx_class(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "b.jsonl"
    fields = _recorded_error(path, HardBlocked("blocked", error_type="SAFETY"))
    assert (fields["type"], fields["base"]) == ("HardBlocked", "ProviderError")
    with pytest.raises(ProviderError) as info:
        replay(path).pipe(rx.to_list()).run()
    assert type(info.value) is ProviderError
    assert info.value.error_type == "SAFETY"
    assert not hasattr(info.value, "base")  # (the record's own key, not an attribute)


def test_a_recorded_errors_request_id_replays(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.jsonl"
    error = ProviderError("overloaded", error_type="overloaded_error")
    error.request_id = "req_123"
    _recorded_error(path, error)
    with pytest.raises(ProviderError) as info:
        replay(path).pipe(rx.to_list()).run()
    assert info.value.request_id == "req_123"


# ---------------------------------------------------------------- histories across agents


class Recording(InMemoryHistoryProvider):
    """An in-memory history that counts its saves."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.saves += 1
        await super().save(messages)


class Unhashable(Recording):
    __hash__ = None  # type: ignore[assignment]  # (as a dataclass or a pydantic model)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unhashable) and self.messages == other.messages


class SameKey(Recording):
    """Providers that compare equal (and hash alike) though they hold different rows."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SameKey)

    def __hash__(self) -> int:
        return 1


@pytest.mark.asyncio
async def test_an_unhashable_history_serves_one_agents_turns_in_order() -> None:
    history = Unhashable()
    agent = Agent(Scripted(done("one"), done("two")), history=history)
    assert (await agent.send("first")).text == "one"
    assert (await agent.send("second")).text == "two"
    assert [m.content for m in history.messages] == ["first", "one", "second", "two"]


@pytest.mark.asyncio
async def test_equal_histories_of_two_agents_each_keep_their_own_turns() -> None:
    left, right = SameKey(), SameKey()
    a = Agent(Scripted(done("from a")), history=left)
    b = Agent(Scripted(done("from b")), history=right)
    await asyncio.wait_for(asyncio.gather(a.send("to a"), b.send("to b")), GUARD)
    assert [m.content for m in left.messages] == ["to a", "from a"]
    assert [m.content for m in right.messages] == ["to b", "from b"]


@pytest.mark.asyncio
async def test_a_router_whose_tool_runs_a_sub_agent_on_the_same_history_ends() -> None:
    history = Recording()
    sub = Agent(Scripted(done("sub answer")), history=history, id="sub")

    @tool
    async def ask_specialist(question: str) -> str:
        """Ask the specialist."""
        return (await sub.send(question)).text

    router = Agent(
        Scripted(calls("ask_specialist", args='{"question": "why?"}'), done("router answer")),
        tools=[ask_specialist],
        history=history,
        id="router",
    )
    response = await asyncio.wait_for(router.send("hello"), GUARD)
    assert response.text == "router answer"
    assert history.saves == 2  # the sub-agent's turn, then the router's, each whole
    assert [m.content for m in history.messages][:2] == ["why?", "sub answer"]


@pytest.mark.asyncio
async def test_history_set_to_none_mid_turn_still_saves_the_turn_it_loaded() -> None:
    history = Recording()
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def wait() -> str:
        """Wait."""
        started.set()
        await release.wait()
        return "waited"

    agent = Agent(Scripted(calls("wait"), done("one"), done("two")), tools=[wait], history=history)
    turn = asyncio.ensure_future(agent.send("first"))
    await asyncio.wait_for(started.wait(), GUARD)  # the turn loaded its history
    agent.history = None
    release.set()
    await asyncio.wait_for(turn, GUARD)
    assert [m.content for m in history.messages] == ["first", "", "waited", "one"]
    assert (await agent.send("second")).text == "two"
    assert history.saves == 1  # the next turn had no history


# ---------------------------------------------------------------- one approver, many agents


@pytest.mark.asyncio
async def test_one_approval_subject_serves_two_agents_one_after_the_other() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a path."""
        ran.append(path)
        return "deleted"

    answers: Subject[ToolApprovalResponse] = Subject()

    def approve_all(result: Any) -> None:
        for event in result.events:
            if type(event).__name__ == "ToolApprovalRequestEvent":
                asyncio.get_running_loop().call_soon(
                    answers.on_next, ToolApprovalResponse(event.call_id, True)
                )

    for who in ("A", "B"):
        client = Scripted(calls("delete", "functions.delete:0", f'{{"path": "/{who}"}}'), done())
        agent = Agent(client, tools=[delete], approver=answers, id=who)
        await asyncio.wait_for(
            rafrx.collect_agent_response(agent.run("go").pipe(rx.do_action(approve_all))), GUARD
        )
    assert ran == ["/A", "/B"]


@pytest.mark.asyncio
async def test_a_disposed_turn_frees_its_approver_for_another_agents_turn() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    never = Agent(Scripted([]), approver=answers)
    never.client.stream = lambda messages, tools=None: reactivex.never()  # type: ignore[method-assign]
    subscription = never.run("hang").subscribe()
    await asyncio.sleep(0)
    other = Agent(Scripted(done("free")), approver=answers)
    with pytest.raises(RuntimeError, match="running with this approver"):
        await other.send("refused while the first turn runs")
    subscription.dispose()
    assert (await asyncio.wait_for(other.send("now"), GUARD)).text == "free"


# ---------------------------------------------------------------- request ids


async def _failure(client: OpenAIChatClient) -> RafrxError:
    with pytest.raises(RafrxError) as info:
        await rafrx.collect_agent_response(
            client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
        )
    return info.value


def test_an_error_of_no_request_has_no_request_id() -> None:
    err = RafrxError("local")
    assert err.request_id is None
    assert pickle.loads(pickle.dumps(err)).request_id is None


@pytest.mark.asyncio
async def test_an_http_errors_request_id_is_the_servers() -> None:
    async with LLMServer() as server:
        server.enqueue(Fault.status(400, message="bad", headers={"x-request-id": "req_mine"}))
        async with OpenAIChatClient(server.url, "k", model="m") as client:
            err = await _failure(client)
    assert isinstance(err, HTTPStatusError)
    assert err.request_id == "req_mine"


@pytest.mark.asyncio
async def test_a_cut_after_a_retry_keeps_the_last_attempts_request_id() -> None:
    async with LLMServer() as server:
        server.enqueue(
            Fault.status(503, headers={"x-request-id": "req_first"}),
            Fault.drop_after(60, body=Reply(text="x" * 400, chunk_size=4)),
        )
        retry = RetryPolicy(initial_backoff=0.01, jitter=False)
        async with OpenAIChatClient(server.url, "k", model="m", retry=retry) as client:
            err = await _failure(client)
    assert isinstance(err, StreamInterrupted)
    assert err.request_id is not None
    assert err.request_id.startswith("req_")
    assert err.request_id != "req_first"
    assert err.attempts == 2


# ---------------------------------------------------------------- proxy credentials


def test_proxy_secrets_are_the_credentials_of_proxy_urls_only() -> None:
    given = {
        "https": "http://svc:pw-123@proxy:3128",
        "http": "http://proxy:3128",
        "no": "localhost,svc:pw-x",
        "ftp": "::not a url::",
    }
    assert proxy_secrets(given) == ("pw-123", "c3ZjOnB3LTEyMw==")
    assert proxy_secrets({}) == ()


def test_proxy_secrets_read_the_environment_when_given_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://tok-abc@proxy:3128")
    assert "tok-abc" in proxy_secrets()


# ---------------------------------------------------------------- the fast paths

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@settings(max_examples=80, deadline=None)
@given(value=_TEXT, cuts=st.lists(st.integers(0, 200), max_size=8))
def test_grow_then_feed_parses_any_string_value_split_anywhere(value: str, cuts: list[int]) -> None:
    text = json.dumps({"content": value, "n": 1}, ensure_ascii=False)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    parser: StreamingArgsParser[Any] = StreamingArgsParser()
    grown: list[str] = []
    for start, end in itertools.pairwise(bounds):
        fragment = text[start:end]
        got = parser.grow(fragment)
        if got is None:
            parser.feed(fragment)
        else:
            assert got[0] == "content"
            grown.append(got[2])
    assert parser.close() == {"content": value, "n": 1}
    assert "".join(grown) in value  # what grew is a piece of the value, never past it


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.text(max_size=5), min_size=1, max_size=4), steps=st.integers(1, 3))
def test_aggregate_counts_each_llm_call_of_a_multi_step_stream(
    texts: list[str], steps: int
) -> None:
    updates: list[Any] = []
    for step in range(steps):
        updates.append(u.ResponseMetadata(f"r{step}", "m"))
        updates += [u.TextDelta(t) for t in texts]
        updates.append(u.Finish(FinishReason.STOP, rafrx.Usage(1, 2)))
    response = reactivex.from_iterable(updates).pipe(ops.convert(), ops.aggregate()).run()
    assert response.text == "".join(texts) * steps
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (steps, 2 * steps)
    assert response.finish_reason is FinishReason.STOP


# ---------------------------------------------------------------- a scripted turn end to end


@pytest.mark.asyncio
async def test_a_tool_turn_over_http_is_saved_whole_to_a_shared_history() -> None:
    history = Recording()
    async with LLMServer() as server:

        @server.script
        def answer(request: RecordedRequest) -> Reply:
            if request.last_role == "tool":
                return Reply(text="pong it is")
            return Reply(tool_calls=[ToolCallSpec("ping", {})])

        async with OpenAIChatClient(server.url, "k", model="m") as client:
            a = Agent(client, tools=[ping], history=history, id="a")
            b = Agent(client, tools=[ping], history=history, id="b")
            await asyncio.wait_for(asyncio.gather(a.send("from A"), b.send("from B")), GUARD)
    roles = [m.role.value for m in history.messages]
    assert roles == ["user", "assistant", "tool", "assistant"] * 2
