"""Secrets hunt, second pass: the surfaces past the HTTP layer.

The reprs of what can hold a credential (clients given ``api_key=``,
``headers=`` and a ``session=``, agents, tools made of partials or callable
objects, :class:`~rafrx.testing.LLMServer` and its records), the log records of
an agent's turn (tool failures, approvals, retries), a recording of a whole
agent turn whose text, tool arguments and tool results hold keys (and its
replay), the CLI's output, and the notebook's HTML of a stream that fails
with the key echoed. Every request is real HTTP on 127.0.0.1 against an
:class:`~rafrx.testing.LLMServer` or a small aiohttp server of the test's own.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import pickle
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from reactivex import operators as rxops

from rafrx import Agent, ChatMessage, collect_agent_response, record
from rafrx import operators as ops
from rafrx.errors import RafrxError, ToolApprovalDenied
from rafrx.history import InMemoryHistoryProvider
from rafrx.notebook import live, response_html, timeline
from rafrx.recorder import replay
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    RetryPolicy,
    Timeouts,
)
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec
from rafrx.tools import tool
from tests.reliability.test_secrets_hunt import serving

ROOT = Path(__file__).resolve().parent.parent.parent
#: No built-in pattern matches it: found by value only (the client's key).
KEY = "secret-key-do-not-leak-0123456789"
#: An environment secret (``*_API_KEY``), with no built-in pattern either.
ENV_KEY = "env-secret-value-do-not-leak-42"
#: A gateway credential given in ``headers=``.
GATEWAY = "gateway-token-do-not-leak-987654"
#: A key the built-in ``sk-`` pattern finds.
SK_KEY = "sk-proj-AbCdEf0123456789XyZ"
FAST = Timeouts(connect=2.0, first_byte=5.0, idle=5.0)
CLIENTS: list[type[LLMClient]] = [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient]
ALL_SECRETS = (KEY, ENV_KEY, GATEWAY, SK_KEY)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# ---------------------------------------------------------------- helpers


def assert_hidden(*texts: object, secrets: tuple[str, ...] = ALL_SECRETS) -> None:
    for text in texts:
        shown = str(text)
        for secret in secrets:
            assert secret not in shown, f"{secret!r} leaked into: {shown[:400]}"


def error_shows(error: BaseException) -> list[object]:
    """Everything an error shows: str, repr, args, attributes, notes, traceback, chain."""
    parts: list[object] = [str(error), repr(error), repr(error.args), repr(vars(error))]
    parts.append(repr(getattr(error, "__notes__", None)))
    parts.append("".join(traceback.format_exception(error)))
    parts.append(pickle.dumps(error).decode("latin-1"))
    for linked in (error.__cause__, error.__context__):
        if linked is not None:
            parts += [repr(linked), str(linked)]
    partial = getattr(error, "partial", None)
    if partial is not None:
        parts.append(repr(partial))
    return parts


def log_texts(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record's message, args, exception text and formatted exception."""
    texts: list[str] = []
    for rec in caplog.records:
        texts += [rec.getMessage(), repr(rec.args), str(rec.exc_text)]
        if rec.exc_info and rec.exc_info[1] is not None:
            texts.append("".join(traceback.format_exception(rec.exc_info[1])))
    return texts


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log record of every logger, at DEBUG."""
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.fixture
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """An ``OPENAI_API_KEY``-style environment secret."""
    monkeypatch.setenv("RAFRX_HUNT_API_KEY", ENV_KEY)
    return ENV_KEY


async def run_cli(*args: str, env: dict[str, str] | None = None, stdin: bytes = b"") -> str:
    """``python -m rafrx ARGS`` as a subprocess: stdout+stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rafrx",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8", **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    return out.decode("utf-8", "replace") + err.decode("utf-8", "replace")


# ---------------------------------------------------------------- reprs


@pytest.mark.asyncio
@pytest.mark.parametrize("client_type", CLIENTS)
async def test_a_client_given_a_key_headers_and_a_session_shows_none_of_them(
    no_task_leak: None, client_type: type[LLMClient]
) -> None:
    """A user prints a client built with a key, a gateway header and their own
    session (which carries default credential headers): no credential shows."""
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as session:
        client = client_type(
            "http://127.0.0.1:9/v1",
            api_key=KEY,
            headers={"cf-aig-authorization": f"Bearer {GATEWAY}", "X-Title": "hunt"},
            session=session,
        )
        request = client.stream([ChatMessage.user("hi")])
        assert_hidden(repr(client), str(client), repr(request), f"{client!r}", f"{client}")
        assert "api_key=***" in repr(client)


@pytest.mark.asyncio
async def test_an_agent_over_a_keyed_client_with_history_shows_no_key(
    no_task_leak: None, env_key: str
) -> None:
    """``repr(agent)`` of an agent whose client holds the key, whose tools are
    partials and callable objects holding keys, with history and instructions."""

    def search(query: str, api_key: str) -> str:
        """Search."""
        return query

    class Fetch:
        def __init__(self, token: str) -> None:
            self.token = token

        def __call__(self, url: str) -> str:
            """Fetch a URL."""
            return url

    client = OpenAIChatClient("http://127.0.0.1:9", api_key=KEY)
    history = InMemoryHistoryProvider([ChatMessage.user(f"my key is {env_key}")])
    agent = Agent(
        client,
        tools=[tool(functools.partial(search, api_key=KEY)), tool(Fetch(env_key), name="fetch")],
        instructions=f"use {env_key}",
        history=history,
    )
    assert_hidden(repr(agent), str(agent), repr(history), *(repr(t) for t in agent.tools))
    await client.aclose()


def test_a_tool_made_of_a_keyed_partial_keeps_the_key_out_of_its_schema_and_repr() -> None:
    """A partial fixing ``api_key=`` (the README's way to give a tool its key): the
    key is neither in the repr nor in any schema sent to a provider."""

    def search(query: str, api_key: str) -> str:
        """Search the web."""
        return query

    web_search = tool(functools.partial(search, api_key=KEY))
    sent = [web_search.to_openai(), web_search.to_anthropic(), web_search.to_responses()]
    assert_hidden(repr(web_search), str(web_search), json.dumps(sent))


@pytest.mark.asyncio
async def test_llm_server_and_its_records_show_no_credential(no_task_leak: None) -> None:
    """A test prints the scripted server and what it recorded, after a client sent
    its key, a gateway credential and a key-like query parameter."""
    async with LLMServer() as server:
        for client_type in CLIENTS:
            async with client_type(
                f"{server.url}/v1?api-key={KEY}",
                api_key=KEY,
                headers={"X-Portkey-Api-Key": GATEWAY, "Proxy-Authorization": f"Basic {GATEWAY}"},
                timeouts=FAST,
            ) as client:
                await collect_agent_response(
                    client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
                )
        assert len(server.requests) == 3
        shown = [repr(server), str(server), repr(server.requests)]
        for request in server.requests:
            shown += [repr(request), dict(request.headers), dict(request.query), request.json]
        assert_hidden(*shown)


# ---------------------------------------------------------------- errors


@pytest.mark.asyncio
async def test_an_error_after_retries_shows_no_key_in_its_chain_notes_or_partial(
    no_task_leak: None, debug_logs: pytest.LogCaptureFixture
) -> None:
    """Retries (with ``Retry-After``) of a server echoing the key and a gateway
    credential in every error body: the last error, its chain, notes and partial
    show neither, nor does any log record."""
    async with LLMServer() as server:
        echo = {"error": {"message": f"bad {KEY} / {GATEWAY}", "type": "rate_limit"}}
        server.enqueue(
            Fault.status(429, body=echo, retry_after=0.01, headers={"x-echo": KEY}),
            Fault.status(503, body=f"down for {KEY}"),
            Fault.status(500, body=echo),
        )
        async with OpenAIChatClient(
            server.url,
            KEY,
            headers={"helicone-auth": f"Bearer {GATEWAY}"},
            retry=RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False),
            timeouts=FAST,
        ) as client:
            with pytest.raises(RafrxError) as caught:
                await collect_agent_response(
                    client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
                )
        assert server.request_count == 3
    assert_hidden(*error_shows(caught.value), *log_texts(debug_logs))


# ---------------------------------------------------------------- logs


@pytest.mark.asyncio
async def test_a_failing_tool_echoing_the_clients_key_is_logged_without_it(
    llm_server: LLMServer, debug_logs: pytest.LogCaptureFixture
) -> None:
    """A tool calls another API with the same key and fails with it in its message
    (as HTTP libraries do): the log records of the turn must not hold the key."""

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        raise RuntimeError(f"401 from upstream for Authorization: Bearer {KEY}")

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Paris"})]), Reply(text="ok")
    )
    async with OpenAIChatClient(llm_server.url, KEY, timeouts=FAST) as client:
        await Agent(client, tools=[lookup]).send("go")
    assert any("lookup" in text for text in log_texts(debug_logs))
    assert_hidden(*log_texts(debug_logs), secrets=(KEY,))


@pytest.mark.asyncio
async def test_a_failing_tool_echoing_an_env_secret_is_logged_without_it(
    llm_server: LLMServer, debug_logs: pytest.LogCaptureFixture, env_key: str
) -> None:
    """A tool reads its key from ``*_API_KEY`` and fails with it (and an ``sk-``
    key) in the message: no log record holds either."""

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        raise PermissionError(f"key {env_key} refused; try {SK_KEY}")

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Paris"})]), Reply(text="ok")
    )
    async with OpenAIChatClient(llm_server.url, timeouts=FAST) as client:
        await Agent(client, tools=[lookup]).send("go")
    assert any("lookup" in text for text in log_texts(debug_logs))
    assert_hidden(*log_texts(debug_logs), secrets=(env_key, SK_KEY))


@pytest.mark.asyncio
async def test_an_approval_denied_with_a_secret_in_its_reason_is_logged_without_it(
    llm_server: LLMServer, debug_logs: pytest.LogCaptureFixture, env_key: str
) -> None:
    """An approver denies, quoting the env secret the call would have used: the
    approval log records do not hold it."""

    @tool(requires_approval=True)
    def deploy(target: str) -> str:
        """Deploy."""
        return target

    async def approver(event: Any) -> bool:
        raise ToolApprovalDenied(f"not with credentials {env_key}")

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("deploy", {"target": "prod"})]), Reply(text="ok")
    )
    async with AnthropicClient(llm_server.url, timeouts=FAST) as client:
        await Agent(client, tools=[deploy], approver=approver).send("go")
    assert any("deploy" in text for text in log_texts(debug_logs))
    assert_hidden(*log_texts(debug_logs), secrets=(env_key,))


# ---------------------------------------------------------------- recorder


@pytest.mark.asyncio
async def test_a_recorded_agent_turn_holding_keys_everywhere_keeps_none_and_replays(
    llm_server: LLMServer, tmp_path: Path, env_key: str
) -> None:
    """``record(agent.run(...))`` of a turn whose model text, reasoning, tool
    arguments and tool result hold an env secret and an ``sk-`` key (split over
    small deltas): the file holds neither, and its replay neither."""

    @tool
    def login(user: str, password: str) -> str:
        """Log in."""
        return f"logged in {user} with {password}; session {SK_KEY}"

    llm_server.enqueue(
        Reply(
            text=f"Using {env_key} and {SK_KEY}.",
            reasoning=f"the key is {SK_KEY}",
            tool_calls=[ToolCallSpec("login", {"user": "me", "password": env_key})],
            chunk_size=3,
        ),
        Reply(text=f"Done: {SK_KEY} / {env_key}", chunk_size=2),
    )
    path = tmp_path / "turn.jsonl"
    async with AnthropicClient(llm_server.url, KEY, timeouts=FAST) as client:
        agent = Agent(client, tools=[login])
        response = await collect_agent_response(record(agent.run("log in"), path))
    assert "logged in me" in (response.tool_messages[0].content or "")
    data = path.read_text("utf-8")
    assert "logged in me" in data
    assert_hidden(data, secrets=(env_key, SK_KEY, KEY))
    replayed = await collect_agent_response(replay(path).pipe(rxops.map(lambda r: r)))
    assert "[REDACTED]" in replayed.text
    assert_hidden(repr(replayed), secrets=(env_key, SK_KEY, KEY))


@pytest.mark.asyncio
async def test_a_recorded_failing_agent_turn_keeps_no_key_of_the_error(
    llm_server: LLMServer, tmp_path: Path, env_key: str
) -> None:
    """The second call of a turn fails with a 401 echoing the key and the env
    secret: neither is in the recording, and the replayed error shows neither."""

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("noop", {})]),
        Fault.status(401, body={"error": {"message": f"bad key {KEY}, env {env_key}"}}),
    )
    path = tmp_path / "turn.jsonl"
    async with OpenAIResponsesClient(llm_server.url, KEY, timeouts=FAST) as client:
        with pytest.raises(RafrxError):
            await collect_agent_response(record(Agent(client, tools=[noop]).run("go"), path))
    assert_hidden(path.read_text("utf-8"), secrets=(KEY, env_key))
    with pytest.raises(RafrxError) as caught:
        await collect_agent_response(replay(path))
    assert_hidden(*error_shows(caught.value), secrets=(KEY, env_key))


# ---------------------------------------------------------------- CLI


@pytest.mark.asyncio
async def test_cli_demo_with_env_secrets_set_prints_none(env_key: str, tmp_path: Path) -> None:
    """``rafrx demo --record`` run with secrets in the environment: neither the
    terminal output nor the recording holds one."""
    path = tmp_path / "demo.jsonl"
    env = {"OPENAI_API_KEY": SK_KEY, "RAFRX_HUNT_API_KEY": env_key, "GITHUB_TOKEN": KEY}
    out = await run_cli("demo", "--plain", "--speed", "100", "--record", str(path), env=env)
    assert "get_weather" in out or "write_file" in out, out[:500]
    assert_hidden(out, path.read_text("utf-8"), secrets=(SK_KEY, env_key, KEY))


@pytest.mark.asyncio
async def test_cli_replay_json_of_a_raw_sse_holding_env_secrets_prints_none(
    tmp_path: Path,
) -> None:
    """``rafrx replay --json`` of a raw ``.sse`` whose model text holds an env
    secret and an ``sk-`` key: the JSON lines (meant for jq, files) hold none."""
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": f"key {ENV_KEY} and {SK_KEY} end"}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    path = tmp_path / "turn.sse"
    path.write_text(body, "utf-8")
    out = await run_cli(
        "replay",
        "--json",
        "--dialect",
        "openai-chat",
        str(path),
        env={"RAFRX_HUNT_API_KEY": ENV_KEY},
    )
    assert "TextContent" in out, out[:500]
    assert_hidden(out, secrets=(ENV_KEY, SK_KEY))


@pytest.mark.asyncio
async def test_cli_chat_failing_with_the_key_echoed_prints_no_key(no_task_leak: None) -> None:
    """``rafrx chat --api-key-env`` against a server whose error page echoes the
    request's head (the bearer key and a gateway-style header): no key printed."""

    async def echo(request: web.Request) -> web.StreamResponse:
        await request.read()
        head = "\n".join(f"{k}: {v}" for k, v in request.headers.items())
        return web.json_response({"error": {"message": f"denied\n{head}"}}, status=403)

    async with serving(echo) as url:
        out = await run_cli(
            "chat",
            "--base-url",
            url,
            "--model",
            "m",
            "--api-key-env",
            "RAFRX_HUNT_API_KEY",
            "--plain",
            env={"RAFRX_HUNT_API_KEY": ENV_KEY},
            stdin=b"hello\n",
        )
    assert "403" in out or "denied" in out, out[:500]
    assert_hidden(out, secrets=(ENV_KEY,))


# ---------------------------------------------------------------- notebook


class _Handle:
    """A display handle that keeps every HTML it was given."""

    def __init__(self) -> None:
        self.html: list[str] = []

    def update(self, obj: Any, **kwargs: Any) -> None:
        self.html += [obj._repr_html_(), repr(obj), str(obj)]

    def show(self, obj: Any, **kwargs: Any) -> _Handle:
        self.update(obj)
        return self


@pytest.mark.asyncio
async def test_the_live_view_and_html_of_a_call_failing_with_the_key_echoed_show_none(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """A notebook shows a call whose server fails echoing the key: the live view,
    the response's HTML and the recording's timeline hold no key."""
    llm_server.enqueue(Fault.status(401, body={"error": {"message": f"Incorrect API key {KEY}"}}))
    path = tmp_path / "call.jsonl"
    async with OpenAIChatClient(llm_server.url, KEY, timeouts=FAST) as client:
        handle = _Handle()
        stream = client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
        view = live(record(stream, path), display=handle.show)
        with pytest.raises(RafrxError) as caught:
            await view
    partial = caught.value.partial
    assert partial is not None
    shown = [repr(view), *handle.html, response_html(partial), repr(partial)]
    shown.append(timeline(path)._repr_html_())
    assert "401" in "".join(shown)
    assert_hidden(*shown, secrets=(KEY,))


@pytest.mark.asyncio
async def test_a_failed_tool_result_holding_an_env_secret_is_recorded_redacted(
    llm_server: LLMServer, tmp_path: Path, env_key: str
) -> None:
    """A tool fails with the env secret and an ``sk-`` key in its message: the
    error result in the recording (and its replay) holds neither."""

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        raise PermissionError(f"key {env_key} refused; try {SK_KEY}")

    call = ToolCallSpec("lookup", {"city": "Paris"})
    llm_server.enqueue(Reply(tool_calls=[call]), Reply(text="sorry"))
    path = tmp_path / "turn.jsonl"
    async with OpenAIChatClient(llm_server.url, timeouts=FAST) as client:
        await collect_agent_response(record(Agent(client, tools=[lookup]).run("go"), path))
    data = path.read_text("utf-8")
    assert "PermissionError" in data
    assert_hidden(data, secrets=(env_key, SK_KEY))
    replayed = await collect_agent_response(replay(path))
    assert_hidden(repr(replayed), repr(replayed.tool_messages), secrets=(env_key, SK_KEY))


@pytest.mark.asyncio
async def test_an_error_echoing_a_gateway_injected_sk_key_shows_no_key(
    no_task_leak: None, env_key: str
) -> None:
    """A local gateway adds the provider key itself (the client sends none) and its
    401 page echoes it (an ``sk-`` key, the env secret): the error shows neither."""

    async def echo(request: web.Request) -> web.StreamResponse:
        await request.read()
        message = f"upstream refused Authorization: Bearer {SK_KEY} (from {env_key})"
        return web.json_response({"error": {"message": message, "type": "auth"}}, status=401)

    async with serving(echo) as url, OpenAIChatClient(url, timeouts=FAST) as client:
        stream = client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
        with pytest.raises(RafrxError) as caught:
            await collect_agent_response(stream)
    assert getattr(caught.value, "status", None) == 401
    assert_hidden(*error_shows(caught.value), secrets=(SK_KEY, env_key))
