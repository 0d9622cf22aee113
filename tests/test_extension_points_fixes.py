"""Regression tests of the bugs an "extender" hunt found: a developer who writes their
own dialect, ``ChatClient``, tool type or operator between rafrx's (the passing pins of
the same hunt are in ``test_extension_points_hunt.py``).

Each failed on the commit before its fix, for the reason its docstring gives (the
docstrings say what happened then).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import reactivex
from reactivex import operators as rx

import rafrx
from rafrx import Agent, FinishReason, tool
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import IncompleteStream, ProviderError
from rafrx.recorder import record, replay
from rafrx.sources import from_sse
from rafrx.sources.dialects._common import load_object
from rafrx.sse import ServerSentEvent


class Scripted:
    """A ChatClient of one's own (the shape of rafrx.agent's docstring example)."""

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = list(turns)
        self.calls = 0

    def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
        self.calls += 1
        return reactivex.from_iterable(self.turns.pop(0))


class LineDialect:
    """A minimal third-party dialect: ``{"text": ...}`` events, ``{"end": true}`` ends."""

    def __init__(self) -> None:
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: ServerSentEvent) -> list[u.AgentResponseUpdate]:
        data = load_object(event)
        if data.get("end"):
            self._done = True
            return [u.Finish(FinishReason.STOP)]
        return [u.TextDelta(str(data.get("text", "")))]

    def close(self) -> list[u.AgentResponseUpdate]:
        if not self._done:
            raise IncompleteStream("no end event")
        return []


class Adder:
    def __call__(self, a: int, b: int) -> int:
        return a + b


BODY = b'data: {"text": "Hi"}\n\ndata: {"end": true}\n\n'

# A provider that runs a tool itself reports it with ToolCalled (rafrx.updates:
# "A tool ran (reported by a provider that executes tools server-side)").
SERVER_RAN = [
    u.ToolCallStart("s1", "code_exec"),
    u.ToolCallArgs("s1", '{"code": "1+1"}'),
    u.ToolCallEnd("s1"),
    u.ToolCalled("s1", result="2"),
    u.TextDelta("It is 2."),
    u.Finish(FinishReason.STOP),
]


@pytest.mark.asyncio
async def test_agent_does_not_run_again_a_tool_the_provider_already_ran() -> None:
    """What the user does: writes a dialect (or ChatClient) for a provider that
    executes tools server-side (Gemini code execution, a hosted agent API) and
    reports each run with ``updates.ToolCalled(id, result=...)``, as the update's
    docstring says it is for; then drives it with ``Agent``.

    What happens: ``execute_tools`` ignores the ``ToolCalledContent`` already in
    the stream and runs the call again: with no local tool of that name the
    provider's result ``"2"`` is replaced by ``Error: unknown tool 'code_exec'``
    (with a local one of the same name, it runs twice), and because the step
    now has a complete tool call the agent makes a second LLM call, although
    the model had already answered (``Finish(STOP)``).

    What should happen: a call the provider reports as run is not run again;
    its result stays the provider's; the turn ends after the one LLM call.

    Evidence: ``rafrx/updates.py`` ToolCalled docstring; DESIGN.md lists
    ``ToolCalled(id, result=None, error=None)`` among the updates a source
    emits; ``convert()`` + ``aggregate()`` without the agent keep ``"2"``.
    """
    client = Scripted(SERVER_RAN, [u.TextDelta("again"), u.Finish(FinishReason.STOP)])
    response = await Agent(client).send("1+1?")
    assert [m.content for m in response.tool_messages] == ["2"]
    assert client.calls == 1
    assert response.text == "It is 2."


@pytest.mark.asyncio
async def test_execute_tools_keeps_a_result_reported_by_the_stream() -> None:
    """What the user does: pipes a custom dialect's updates through
    ``convert()`` and ``execute_tools(tools)`` (the documented standalone
    pipeline), the stream holding a provider-run call and its ``ToolCalled``.

    What happens: ``execute_tools`` runs (here: fails to find) the call and emits
    a second ``ToolCalledContent`` for the same id; ``aggregate()`` keeps the last,
    so the tool message says ``Error: unknown tool`` instead of the result ``"2"``.

    What should happen: the same tool messages as without ``execute_tools``
    (``["2"]``): a call already answered upstream is not executed.

    Evidence: as above; ``rafrx/operators/_execute_tools.py`` ``_Runner.on_next``
    starts every ``ToolCallingContent`` and never looks at ``ToolCalledContent``.
    """
    plain = await rafrx.collect_agent_response(
        reactivex.from_iterable(SERVER_RAN).pipe(ops.convert())
    )
    executed = await rafrx.collect_agent_response(
        reactivex.from_iterable(SERVER_RAN).pipe(ops.convert(), ops.execute_tools([]))
    )
    assert [m.content for m in plain.tool_messages] == ["2"]
    assert [m.content for m in executed.tool_messages] == ["2"]


@pytest.mark.asyncio
async def test_from_sse_over_async_chunks_fails_when_the_dialect_factory_raises() -> None:
    """What the user does: ``from_sse(response_chunks, dialect=factory)`` over an
    async iterable (an HTTP body), with a dialect factory of their own that
    raises (a missing setting), or passing a dialect *instance* by mistake.

    What happens: the reader task raises before its ``try`` (``decoder = make()``
    in ``_from_sse.py``), so the observer never gets ``on_error`` nor
    ``on_completed``: ``collect_agent_response`` waits forever, asyncio logs
    "Task exception was never retrieved", and an HTTP response behind the
    chunks is left to the garbage collector.

    What should happen: the observable fails with the factory's error (as the
    HTTP clients do for the same factory: ``_StreamCall._run`` ends with it).

    Evidence: RELIABILITY.md "no hung task"; from_sse's docstring: "fails with
    the typed error otherwise"; Rx grammar (every subscription terminates).
    """

    async def chunks() -> AsyncIterator[bytes]:
        yield BODY

    def factory() -> LineDialect:
        raise RuntimeError("the dialect needs an API version")

    source = from_sse(chunks(), factory).pipe(ops.convert())
    with pytest.raises(RuntimeError, match="API version"):
        await asyncio.wait_for(rafrx.collect_agent_response(source), 2.0)


@pytest.mark.asyncio
async def test_agent_calls_a_chat_client_only_as_its_protocol_says() -> None:
    """What the user does: writes a ChatClient as ``rafrx.agent.ChatClient``
    declares it, ``stream(messages, tools=None)``, that also keeps its request
    settings in a ``params`` mapping (a wrapper around another library, with
    ``tool_choice="required"`` to force a first tool call).

    What happens: after the first step used a tool, ``_Turn.unforced`` reads
    ``client.params`` and ``step`` calls ``client.stream(..., tool_choice="auto")``:
    ``TypeError: stream() got an unexpected keyword argument 'tool_choice'``.
    The turn fails (a bare ``TypeError``, no ``.partial``) after its tools ran.

    What should happen: the agent calls a client only as the ``ChatClient``
    protocol says, or passes the keyword only to a ``stream`` that takes it
    (``**params``, as rafrx's clients do); the turn completes.

    Evidence: ``ChatClient.stream(self, messages, tools=None)`` in agent.py;
    Agent's docstring: "client: Has ``stream(messages, tools)`` ... or your own".
    """
    client = Scripted(
        [
            u.ToolCallStart("c1", "add"),
            u.ToolCallArgs("c1", '{"a": 2, "b": 3}'),
            u.ToolCallEnd("c1"),
            u.Finish(FinishReason.TOOL_CALLS),
        ],
        [u.TextDelta("5"), u.Finish(FinishReason.STOP)],
    )
    client.params = {"tool_choice": "required"}  # type: ignore[attr-defined]

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    response = await Agent(client, tools=[add]).send("2 + 3?")
    assert response.text == "5"


def test_a_callable_object_without_docstring_has_no_description() -> None:
    """What the user does: gives the agent (or ``tool()``) a callable object of
    their own tool class, with typed ``__call__`` but no docstrings.

    What happens: the tool's description, sent to the model in every request,
    is ``"Call self as a function."``: ``inspect.getdoc(type(obj).__call__)``
    inherits the docstring of ``type.__call__`` (``tools.py`` ``_make_tool``).

    What should happen: no description (``""``), as for a plain function without
    a docstring, never CPython's own text.

    Evidence: README: tools may be "callable objects"; ``tool()``'s docs: the
    description comes from the docstring.
    """

    def add(a: int, b: int) -> int:
        return a + b

    assert tool(add).description == ""
    assert tool(Adder()).description == ""


def test_a_recorded_error_of_a_third_party_subclass_replays_as_its_rafrx_base(
    tmp_path: pathlib.Path,
) -> None:
    """What the user does: their dialect raises its own subclass of
    ``ProviderError`` (``SafetyBlocked(ProviderError)``); they ``record()`` the
    stream to share the bug, and ``replay()`` it.

    What happens: ``_decode_error`` finds no ``rafrx.errors.SafetyBlocked`` and
    rebuilds ``RafrxError("SafetyBlocked: blocked")``: no longer a
    ``ProviderError`` (an ``except ProviderError`` that caught it live does
    not catch the replay) and without ``error_type``, ``code``, ``status`` or
    ``body``, although the file holds them.

    What should happen: the nearest rafrx class (``ProviderError``) with the
    recorded fields, as for rafrx's own errors.

    Evidence: recorder docstring: replaying gives "the same terminal event (the
    error rebuilt as the same rafrx.errors class)"; the file keeps the fields.
    """

    class SafetyBlocked(ProviderError):
        """A custom dialect's error."""

    path = tmp_path / "turn.jsonl"
    failing = reactivex.concat(
        reactivex.from_iterable([u.TextDelta("Hi")]),
        reactivex.throw(SafetyBlocked("blocked", error_type="SAFETY", code="7")),
    )
    with pytest.raises(SafetyBlocked):
        record(failing, path).pipe(rx.to_list()).run()
    assert json.loads(path.read_text().splitlines()[-1])["fields"]["error_type"] == "SAFETY"
    with pytest.raises(ProviderError) as info:
        replay(path).pipe(rx.to_list()).run()
    assert (info.value.error_type, info.value.code) == ("SAFETY", "7")


@pytest.mark.asyncio
async def test_a_chat_clients_own_error_ends_the_turn_typed_with_partial() -> None:
    """What the user does: drives ``Agent`` with a ChatClient wrapping another
    library's stream; that library fails mid-answer with its own exception
    (``ConnectionResetError`` here) after a first step whose tool already ran.

    What happens: the turn fails with the exception unchanged and no
    ``.partial``: the tool's result and the text received are lost
    (``_Turn.run`` sets ``partial`` only on a ``RafrxError``).

    What should happen: Agent.run's docstring: "Errors: the client's errors end
    the turn (nothing is saved); MaxStepsExceeded ... Both carry ``.partial``."
    E.g. a ``TransportError`` (``__cause__`` the library's error) with
    ``.partial``, or the error with a ``partial`` attribute.

    Evidence: Agent.run docstring; DESIGN.md "Errors": errors keep what was
    received.
    """
    broken = reactivex.concat(
        reactivex.from_iterable([u.TextDelta("The sum is")]),
        reactivex.throw(ConnectionResetError("peer reset")),
    )

    class Wrapper(Scripted):
        def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
            self.calls += 1
            return self.turns.pop(0)  # type: ignore[no-any-return]

    client = Wrapper(
        reactivex.from_iterable(
            [
                u.ToolCallStart("c1", "add"),
                u.ToolCallArgs("c1", '{"a": 2, "b": 3}'),
                u.ToolCallEnd("c1"),
                u.Finish(FinishReason.TOOL_CALLS),
            ]
        ),
        broken,
    )

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    with pytest.raises(rafrx.TransportError, match="ConnectionResetError: peer reset") as info:
        await Agent(client, tools=[add]).send("2 + 3?")
    assert isinstance(info.value.__cause__, ConnectionResetError)
    partial = info.value.partial
    assert partial is not None
    assert [m.content for m in partial.tool_messages] == ["5"]
    assert partial.text.endswith("The sum is")


def test_from_sse_refuses_a_dialect_instance_when_called() -> None:
    """A dialect instance where a factory belongs is a TypeError at the call (no
    subscription yet), saying what was given; a factory that raises fails the
    subscription over sync chunks too, through on_error."""

    with pytest.raises(TypeError, match="not a LineDialect"):
        from_sse(BODY, LineDialect())  # type: ignore[arg-type]

    def factory() -> LineDialect:
        raise RuntimeError("the dialect needs an API version")

    errors: list[Exception] = []
    from_sse(BODY, factory).subscribe(on_error=errors.append)
    assert [str(e) for e in errors] == ["the dialect needs an API version"]
