"""Regression tests of the bugs the review of session 9's changes found (the passing pins
are in ``test_review_session9.py``).

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import reactivex
from aiohttp import web
from reactivex import operators as rx

import rafrx
from rafrx import Agent, ChatMessage, FinishReason, RafrxError, tool
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import ProviderError
from rafrx.history import is_new
from rafrx.recorder import record, replay
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, RecordedRequest, Reply, ToolCallSpec

GUARD = 10.0


class Scripted:
    """A ChatClient of one's own: each ``stream`` call plays the next list of updates."""

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = list(turns)
        self.calls = 0

    def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
        self.calls += 1
        return reactivex.from_iterable(self.turns.pop(0))


SERVER_RAN = [
    u.ToolCallStart("s1", "code_exec"),
    u.ToolCallArgs("s1", '{"code": "1+1"}'),
    u.ToolCallEnd("s1"),
    u.ToolCalled("s1", result="2"),
    u.TextDelta("It is 2."),
    u.Finish(FinishReason.STOP),
]


# ---------------------------------------------------------------- Agent: GeneratorExit


class ClosingHistory:
    """A history provider whose load raises ``GeneratorExit`` (user code: e.g. a
    generator-based resource helper that re-raises what it was closed with)."""

    async def load(self) -> Sequence[ChatMessage]:
        raise GeneratorExit("the connection pool was closed")

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        pass


@pytest.mark.asyncio
async def test_a_generator_exit_raised_by_user_code_ends_the_turn_instead_of_hanging() -> None:
    """What the user does: runs ``agent.send(...)`` with a history provider (or a
    context provider, or a ChatClient's ``stream()``) that raises ``GeneratorExit``
    while the turn runs on a live loop.

    What happens: ``_Turn.run`` (rafrx/agent.py, ``except GeneratorExit: raise``, added
    today for turns stranded on a closed loop) re-raises it into the task; the turn's
    observer never gets ``on_error`` nor ``on_completed``, so ``send()`` waits forever
    (here: until the test's 2 s timeout). Before today it failed with
    ``RuntimeError("the turn was aborted by GeneratorExit: ...")``.

    What should happen: as for any other BaseException raised by the turn's code
    ("any other (GreenletExit …) still ends the turn"): the turn ends with an error.
    Only a coroutine being closed on a closed loop has nobody to tell.
    RELIABILITY.md #15: user code raising gives an error, "no hung task".
    """
    client = Scripted([u.TextDelta("hi"), u.Finish(FinishReason.STOP)])
    agent = Agent(client, history=ClosingHistory())
    with pytest.raises(RuntimeError, match="aborted by GeneratorExit"):
        await asyncio.wait_for(agent.send("hi"), 2.0)  # (a TimeoutError: the turn hung)


# ---------------------------------------------------------------- Agent: provider-run calls


@pytest.mark.asyncio
async def test_a_provider_run_call_is_not_run_again_with_eager_tools() -> None:
    """What the user does: a ChatClient of a provider that runs tools itself reports a
    run with ``ToolCalled`` (as today's fix expects), and the agent has
    ``eager_tools=True`` (tools start as soon as their arguments end).

    What happens: ``convert(eager=True)`` emits the call's ``ToolCallingContent`` at its
    ``ToolCallEnd``, before the ``ToolCalledContent``; ``_Runner.on_next``
    (rafrx/operators/_execute_tools.py) only skips a call whose ``ToolCalledContent``
    came *first*, so it runs the call: the provider's result ``"2"`` is replaced by
    ``Error: unknown tool 'code_exec'`` in the response and the saved history (with a
    local tool of the same name, it runs a second time).

    What should happen: the same as with ``eager_tools=False`` (the fix's test
    ``test_agent_does_not_run_again_a_tool_the_provider_already_ran``): the
    provider's result stays. ``eager_tools`` only changes *when* tools start
    (Agent docstring), not which.
    """
    client = Scripted(SERVER_RAN, [u.TextDelta("again"), u.Finish(FinishReason.STOP)])
    response = await Agent(client, eager_tools=True).send("1+1?")
    assert [m.content for m in response.tool_messages] == ["2"]


# ---------------------------------------------------------------- Agent: shared history


@dataclasses.dataclass
class RowsHistory:
    """A database-backed history written as a plain ``@dataclass`` (so ``eq=True`` and
    therefore unhashable, as are pydantic models such as LangChain's histories): one
    INSERT (an await) per message. The first save pauses after its first row until
    another save starts (or 1 s passes, so that a fixed rafrx still ends)."""

    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    saves: int = 0
    other_save_started: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    async def load(self) -> Sequence[ChatMessage]:
        await asyncio.sleep(0)
        return [ChatMessage.from_dict(json.loads(json.dumps(r))) for r in self.rows]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.saves += 1
        first = self.saves == 1
        if not first:
            self.other_save_started.set()
        for index, message in enumerate(m for m in messages if is_new(m)):
            await asyncio.sleep(0)  # the INSERT
            self.rows.append(message.to_dict())
            if first and index == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.other_save_started.wait(), 1.0)


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


@pytest.mark.asyncio
async def test_two_agents_on_one_unhashable_history_never_interleave_their_saves() -> None:
    """What the user does: a handoff between two agents over one history provider that
    is a plain ``@dataclass`` (unhashable: ``eq=True`` sets ``__hash__ = None``).

    What happens: ``_access_of`` (rafrx/agent.py) keys the shared access by the
    provider in a ``WeakKeyDictionary``; an unhashable provider raises ``TypeError``
    there and each agent falls back to its *own* access, so B's turn loads A's
    half-saved turn and saves in the middle of it:
    ``[A user, B user, A call, A result, B call, B answer, ...]``. A's call is no
    longer followed by its result: the next load repairs the result away.

    What should happen: what the Agent docstring promises since today, whatever the
    provider's ``__eq__``: "the turns of every agent on one history load and save it in
    turn, so a handoff between agents never interleaves two saves" (as the fix's test
    ``test_two_agents_sharing_one_history_never_interleave_their_saves`` shows for a
    hashable provider). Fix: key the registry by identity (``id(history)`` with a
    ``weakref.finalize`` to drop it), not by ``hash``/``__eq__``.
    """
    history = RowsHistory()
    async with LLMServer() as server:

        @server.script
        def answer(request: RecordedRequest) -> Reply:
            if request.last_role == "tool":
                return Reply(text="done")
            return Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"})])

        async with OpenAIChatClient(server.url, "k", model="m") as client:
            a = Agent(client, tools=[lookup], history=history, id="a")
            b = Agent(client, tools=[lookup], history=history, id="b")
            turn_a = asyncio.ensure_future(a.send("from A"))
            while history.saves == 0:
                await asyncio.sleep(0.001)
            await asyncio.wait_for(asyncio.gather(turn_a, b.send("from B")), GUARD)
    roles = [(r["role"], r.get("content")) for r in history.rows]
    assert roles.index(("user", "from B")) == 4, roles


# ---------------------------------------------------------------- tools: descriptions


class Doubler:
    """An abstract tool class: subclasses implement ``__call__``."""

    def __call__(self, x: int) -> int:
        """Double a number."""
        raise NotImplementedError


class FastDoubler(Doubler):
    def __call__(self, x: int) -> int:
        return 2 * x


def test_a_callable_objects_tool_keeps_the_docstring_its_call_inherits() -> None:
    """What the user does: a tool class hierarchy: the base class documents
    ``__call__``, the subclass overrides it without repeating the docstring (as Python
    lets methods inherit docs: ``inspect.getdoc``).

    What happens: today's fix for ``"Call self as a function."`` (rafrx/tools.py
    ``_make_tool``) reads only ``type(obj).__call__.__doc__`` of the class itself, so
    ``tool(FastDoubler())`` has no description any more (it had "Double a number."
    before today), while ``tool(FastDoubler().__call__)``, the same code as a bound
    method, still gets it through ``inspect.getdoc``. The model is offered an
    undescribed tool. (Same root cause: a ``__call__`` wrapped by a decorator object,
    e.g. ``functools.lru_cache``, is not ``inspect.isfunction`` and loses its own
    docstring.)

    What should happen: the inherited docstring, as before today and as for the bound
    method; only ``type.__call__``'s / ``object``'s text is to be skipped. Fix: walk
    ``type(obj).__mro__`` (without ``object``) for the first ``__call__`` in a class
    ``__dict__`` with a docstring.
    """
    assert tool(FastDoubler().__call__).description == "Double a number."
    assert tool(FastDoubler()).description == "Double a number."


# ---------------------------------------------------------------- recorder


class StreamTimeout(ProviderError):
    """A custom dialect's error for the provider's own in-band "stream timeout" event:
    a ``ProviderError`` that happens to share a name with ``rafrx.errors``'s class."""


def test_a_third_party_error_named_like_a_rafrx_class_replays_as_its_base(
    tmp_path: pathlib.Path,
) -> None:
    """What the user does: their dialect raises ``StreamTimeout(ProviderError)`` (their
    own class); they ``record()`` the stream and ``replay()`` it in a test that catches
    ``ProviderError``.

    What happens: the recording holds ``"type": "StreamTimeout", "base":
    "ProviderError"`` (right), but ``_decode_error`` (rafrx/recorder.py) looks the
    ``type`` name up in ``rafrx.errors`` first and finds rafrx's own
    ``StreamTimeout``, a ``TransportError``: the replay is no ``ProviderError`` (and
    reads as retryable), so ``except ProviderError`` misses it.

    What should happen: today's change says a third-party subclass "replays as its
    rafrx base"; the recorded ``base`` names it. Fix: when ``base`` is recorded, use
    it (the ``type`` named a class outside rafrx).
    """
    path = tmp_path / "turn.jsonl"
    failing = reactivex.concat(
        reactivex.from_iterable([u.TextDelta("Hi")]),
        reactivex.throw(StreamTimeout("provider timed out", error_type="timeout")),
    )
    with pytest.raises(StreamTimeout):
        record(failing, path).pipe(rx.to_list()).run()
    with pytest.raises(RafrxError) as info:
        replay(path).pipe(rx.to_list()).run()
    assert isinstance(info.value, ProviderError), type(info.value).__mro__


# ---------------------------------------------------------------- proxy credentials


@contextlib.asynccontextmanager
async def echoing_proxy() -> AsyncIterator[str]:
    """An HTTP proxy stand-in on 127.0.0.1 that refuses every request with a 502 page
    echoing the headers it got (as debugging proxies and some gateways do)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(status=502, text=f"upstream failed; you sent {dict(request.headers)}")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_proxy_credentials_from_netrc_never_reach_an_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the user does: a service behind an authenticating egress proxy keeps the
    proxy's URL in ``HTTP_PROXY`` and its credentials in ``~/.netrc`` (``$NETRC``), as
    curl, requests and aiohttp all support, with ``OpenAIChatClient(...,
    trust_env=True)``. The proxy refuses a call with a page echoing the headers.

    What happens: with ``trust_env`` aiohttp takes the proxy's auth from netrc
    (``aiohttp.helpers.proxies_from_env``: ``basicauth_from_netrc`` when the proxy URL
    has none) and sends ``Proxy-Authorization: Basic <base64(svc:password)>``. Today's
    ``proxy_secrets()`` (rafrx/_redaction.py) reads only the credentials *in the proxy
    URLs*, so the echoed Basic credentials reach ``err.body`` and ``str(err)``.

    What should happen: the proxy's credentials are redacted whatever the
    environment took them from, as today's fix does for ``HTTP_PROXY=http://svc:pw@…``
    (``test_proxy_credentials_from_the_environment_never_reach_an_error``). Fix:
    ``proxy_secrets`` adds, for a proxy URL without credentials, the netrc entry of
    its host (``aiohttp.helpers.netrc_from_env()`` / ``basicauth_from_netrc``), in the
    same forms as ``url_secrets``.
    """
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login svc password Pr0xyS3cret\n")
    os.chmod(netrc, 0o600)
    basic = base64.b64encode(b"svc:Pr0xyS3cret").decode()
    async with echoing_proxy() as proxy:
        monkeypatch.setenv("NETRC", str(netrc))
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        client = OpenAIChatClient(
            "http://api.example.invalid",
            api_key="sk-live-0123456789abcdefXYZ",
            model="m",
            trust_env=True,
        )
        try:
            with pytest.raises(RafrxError) as info:
                await rafrx.collect_agent_response(
                    client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
                )
        finally:
            await client.aclose()
    err = info.value
    shown = f"{err} {err!r} {err.body}"
    assert "Bearer ***" in shown  # the echo did come back (the client's own key redacted)
    assert basic not in shown
