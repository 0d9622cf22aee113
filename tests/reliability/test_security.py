"""Security: secrets stay secret, model output stays text, arguments stay JSON,
and what goes back to the model is capped.

* API keys and ``Authorization`` headers never appear in reprs, logs (every
  logger, captured at DEBUG), errors (message, body, provider fields,
  tracebacks, pickles), the server's record of requests, or recordings,
  even when the server echoes the key back (HTTP error bodies, in-band error
  events, malformed events) or the key sits in the URL;
* HTML reprs, the live notebook view and the timeline escape model output:
  a ``<script>`` in text, reasoning, tool names, arguments, results or
  errors stays text;
* tool arguments are only ever parsed as JSON (``eval``, ``exec``,
  ``ast.literal_eval``, ``pickle`` and ``marshal`` are never called, and
  Python or YAML look-alikes are rejected);
* tool results and error messages sent back to the model have a size cap,
  as do error bodies and raw event data kept in errors.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import io
import json
import logging
import marshal
import pickle
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import reactivex

from rafrx import Agent, ChatMessage, collect_agent_response, record
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    ReasoningContent,
    TextContent,
    ToolCalledContent,
    ToolCallingContent,
    ToolCallStartContent,
)
from rafrx.errors import MAX_BODY_CHARS, RafrxError
from rafrx.messages import ToolCall
from rafrx.notebook import LiveSnapshot, live, message_html, response_html, result_html, timeline
from rafrx.recorder import record_http
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason
from rafrx.testing import Fault, LLMServer, Replay, Reply, ToolCallSpec
from rafrx.tools import tool
from tests.reliability._support import CLIENTS, run_async

FORMATS = list(CLIENTS)
KEY = "secret-key-do-not-leak-0123456789"  # no sk- prefix: found by value, not by pattern
SCRIPT = "<script>alert('pwned')</script>"
IMG = '<img src=x onerror="alert(1)">'


def assert_no_key(*texts: object) -> None:
    for text in texts:
        assert KEY not in str(text), f"the API key leaked into: {str(text)[:300]}"


def error_texts(error: BaseException) -> list[object]:
    """Everything an error shows: str, repr, attributes, traceback and pickle."""
    texts: list[object] = [str(error), repr(error), vars(error)]
    texts.append("".join(traceback.format_exception(error)))
    texts.append(pickle.dumps(error))
    return texts


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record of every logger, at DEBUG."""
    caplog.set_level(logging.DEBUG)
    yield caplog
    for record_ in caplog.records:
        assert_no_key(record_.getMessage(), record_.args, record_.exc_text)
        if record_.exc_info and record_.exc_info[1] is not None:
            assert_no_key("".join(traceback.format_exception(record_.exc_info[1])))


# ---------------------------------------------------------------- secrets


@pytest.mark.parametrize("fmt", FORMATS)
def test_client_reprs_hide_the_key(fmt: str) -> None:
    client = CLIENTS[fmt]("http://127.0.0.1:9", KEY)
    assert_no_key(repr(client), str(client))
    with pytest.raises(TypeError):
        pickle.dumps(client)
    request = client.stream([ChatMessage.user("hi")])
    assert_no_key(repr(request))


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_the_key_is_sent_but_recorded_redacted(llm_server: LLMServer, fmt: str) -> None:
    async with CLIENTS[fmt](llm_server.url, KEY) as client:
        got = await run_async(client.stream([ChatMessage.user("hi")]))
    assert got.error is None
    (request,) = llm_server.requests
    secret = request.headers.get("authorization") or request.headers.get("x-api-key")
    assert secret is not None
    assert secret.endswith("***")
    assert_no_key(request, dict(request.headers), request.json)


def _echoes(fmt: str) -> list[Any]:
    """Server answers that echo the key back, in every place one can."""
    in_band = {
        "openai-chat": f'data: {{"error": {{"message": "bad key {KEY}", "type": "auth"}}}}\n\n',
        "anthropic": "event: error\ndata: "
        f'{{"type": "error", "error": {{"type": "authentication_error", "message": "{KEY}"}}}}\n\n',
        "openai-responses": f'data: {{"type": "error", "code": "auth", "message": "{KEY}"}}\n\n',
    }[fmt]
    return [
        Fault.status(401, body={"error": {"message": f"Incorrect API key: {KEY}", "type": KEY}}),
        Fault.status(403, body=f"denied for {KEY}"),
        Fault.wrong_content_type(body=f"<html>{KEY}</html>"),
        Replay(in_band.encode()),
        Replay(f'data: {{"choices": "{KEY}"}}\n\ndata: {{"type": "{KEY}"\n\n'.encode()),
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_errors_never_show_the_key_even_when_the_server_echoes_it(
    llm_server: LLMServer, fmt: str, logs: pytest.LogCaptureFixture
) -> None:
    echoes = _echoes(fmt)
    llm_server.enqueue(*echoes)
    async with CLIENTS[fmt](llm_server.url, KEY) as client:
        for _ in echoes:
            got = await run_async(client.stream([ChatMessage.user("hi")]))
            assert isinstance(got.error, RafrxError), repr(got.error)
            assert_no_key(*error_texts(got.error))
            assert got.error.partial is not None
            assert_no_key(got.error.partial, got.results)


@pytest.mark.asyncio
async def test_a_key_in_the_url_stays_out_of_errors(
    llm_server: LLMServer, logs: pytest.LogCaptureFixture
) -> None:
    llm_server.enqueue(Fault.status(500), Fault.drop_after(40))
    for base in (f"{llm_server.url}/v1?key={KEY}", f"http://127.0.0.1:9/v1?key={KEY}"):
        async with CLIENTS["openai-chat"](base) as client:
            assert_no_key(repr(client))
            for _ in range(2 if "9/" not in base else 1):
                got = await run_async(client.stream([ChatMessage.user("hi")]))
                assert isinstance(got.error, RafrxError), repr(got.error)
                assert_no_key(*error_texts(got.error))


@pytest.mark.asyncio
async def test_agent_logs_and_failures_never_show_the_key(
    llm_server: LLMServer, logs: pytest.LogCaptureFixture
) -> None:
    @tool
    def fail(reason: str) -> str:
        """Fail."""
        raise RuntimeError(f"tool failed: {reason}")

    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("fail", {"reason": "r"}), ToolCallSpec("nope", {})]),
        Fault.status(429, body={"error": {"message": f"slow down {KEY}"}}),
    )
    async with CLIENTS["anthropic"](llm_server.url, KEY) as client:
        agent = Agent(client, tools=[fail])
        assert_no_key(repr(agent))
        with pytest.raises(RafrxError) as caught:
            await agent.send("hi")
    assert_no_key(*error_texts(caught.value), caught.value.partial)


@pytest.mark.asyncio
async def test_recordings_never_hold_the_key(llm_server: LLMServer, tmp_path: Path) -> None:
    llm_server.enqueue(Reply(text="recorded"))
    sse = tmp_path / "call.sse"
    await record_http(
        f"{llm_server.url}/v1/chat/completions?api_key={KEY}",
        sse,
        json_body={"messages": [], "stream": True},
        headers={"Authorization": f"Bearer {KEY}", "x-api-key": KEY},
        dialect="openai-chat",
    )
    llm_server.enqueue(Fault.status(401, body={"error": {"message": f"bad key {KEY}"}}))
    jsonl = tmp_path / "call.jsonl"
    async with CLIENTS["openai-chat"](llm_server.url, KEY) as client:
        with pytest.raises(RafrxError):
            await collect_agent_response(record(client.stream([]).pipe(ops.convert()), jsonl))
    files = sorted(tmp_path.iterdir())
    assert len(files) == 3  # the .sse, its .timing.json and the .jsonl
    for file in files:
        assert KEY.encode() not in file.read_bytes(), file.name
    assert b"recorded" in sse.read_bytes()


# ---------------------------------------------------------------- HTML


def hostile_results() -> list[AgentResponseResult]:
    call = ToolCallingContent("c1", f"name{SCRIPT}", {"html": SCRIPT}, json.dumps({"html": SCRIPT}))
    return [
        AgentResponseResult(contents=(TextContent(SCRIPT),)),
        AgentResponseResult(contents=(ReasoningContent(IMG),)),
        AgentResponseResult(contents=(ToolCallStartContent("c1", f"name{SCRIPT}"),)),
        AgentResponseResult(contents=(call,)),
        AgentResponseResult(contents=(ToolCalledContent("c1", result=SCRIPT),)),
        AgentResponseResult(contents=(ToolCalledContent("c2", error=IMG),)),
        AgentResponseResult(contents=(ErrorContent(SCRIPT),)),
    ]


def assert_escaped(html: str) -> None:
    """No tag of the model's made it through, and what it wrote is shown escaped."""
    assert_no_tags(html)
    assert "&lt;script&gt;" in html or "&lt;img" in html, html[:500]


def test_html_reprs_escape_model_output() -> None:
    for result in hostile_results():
        assert_escaped(result._repr_html_())
        assert_escaped(result_html(result))
    response = AgentResponse(
        text=SCRIPT,
        reasoning_text=IMG,
        tool_calls=[ToolCall("c1", f"n{SCRIPT}", {"q": SCRIPT})],
        turn_transcript=[
            ChatMessage.assistant_with_tools(SCRIPT, [ToolCall("c1", "n", {"q": IMG})]),
            ChatMessage.tool(SCRIPT, "c1"),
        ],
    )
    assert_escaped(response._repr_html_())
    assert_escaped(response_html(response))
    for message in response.turn_transcript:
        assert_escaped(message_html(message))


@pytest.mark.asyncio
async def test_the_live_view_escapes_a_streamed_script(llm_server: LLMServer) -> None:
    llm_server.enqueue(
        Reply(
            text=SCRIPT,
            reasoning=IMG,
            tool_calls=[ToolCallSpec("lookup", {"q": SCRIPT, "html": IMG})],
            chunk_size=3,  # the tag arrives split across deltas
        )
    )
    snapshots: list[LiveSnapshot] = []

    class Handle:
        def update(self, obj: Any, **kwargs: Any) -> None:
            snapshots.append(obj)

    def display(obj: Any, **kwargs: Any) -> Handle:
        snapshots.append(obj)
        return Handle()

    async with CLIENTS["openai-chat"](llm_server.url, "sk-x") as client:
        view = live(client.stream([ChatMessage.user("hi")]), display=display, interval=0)
        response = await view
    assert response.text == SCRIPT
    assert len(snapshots) > 3
    for snapshot in snapshots:
        assert_no_tags(snapshot._repr_html_())
    assert_escaped(snapshots[-1]._repr_html_())


def assert_no_tags(html: str) -> None:
    lowered = html.lower()
    assert "<script" not in lowered, html[:500]
    assert "<img" not in lowered, html[:500]


def test_the_timeline_escapes_model_output(tmp_path: Path) -> None:
    path = tmp_path / "turn.jsonl"
    source = reactivex.from_iterable(
        [
            u.TextDelta(SCRIPT),
            u.ToolCallStart("c1", f"x{SCRIPT}"),
            u.ToolCallArgs("c1", json.dumps({"h": IMG})),
            u.ToolCallEnd("c1"),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    )
    record(source, path).run()
    drawing = timeline(path, title=SCRIPT)
    for html in (drawing._repr_svg_(), drawing._repr_html_()):
        assert_no_tags(html)
        assert "&lt;script" in html


# ---------------------------------------------------------------- JSON only


@pytest.fixture
def no_code_loading(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Make every way of turning text into code or objects (but JSON) fail loudly."""
    called: list[str] = []

    def forbidden(name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            called.append(name)
            raise AssertionError(f"{name} was called on model output")

        return fail

    monkeypatch.setattr(builtins, "eval", forbidden("eval"))
    monkeypatch.setattr(builtins, "exec", forbidden("exec"))
    monkeypatch.setattr(ast, "literal_eval", forbidden("ast.literal_eval"))
    monkeypatch.setattr(pickle, "loads", forbidden("pickle.loads"))
    monkeypatch.setattr(marshal, "loads", forbidden("marshal.loads"))
    yield called
    assert called == []


HOSTILE_ARGUMENTS = [
    "__import__('os').system('echo pwned')",
    "{'path': '/etc/passwd'}",  # a Python literal, not JSON
    "{path: '/etc/passwd'}",  # JavaScript
    "!!python/object/apply:os.system ['echo pwned']",  # YAML
    "path: /etc/passwd",
    "gASVIAAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjAVlY2hvIJSFlFKULg==",  # base64 pickle
    '{"path": "/tmp/x"} trailing',
    '{"path": "/tmp/x"',
]


RUNS: list[str] = []


@tool
def read(path: str) -> str:
    """Read a file (made a tool here: ``@tool`` reads string annotations with ``eval``)."""
    RUNS.append(path)
    return f"read {path}"


@pytest.mark.asyncio
@pytest.mark.parametrize("raw", HOSTILE_ARGUMENTS)
async def test_tool_arguments_are_only_ever_parsed_as_json(
    raw: str, no_code_loading: list[str]
) -> None:
    RUNS.clear()
    updates = [
        u.ToolCallStart("c1", "read"),
        u.ToolCallArgs("c1", raw),
        u.ToolCallEnd("c1"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    results: list[AgentResponseResult] = []
    done = asyncio.get_running_loop().create_future()
    reactivex.from_iterable(updates).pipe(ops.convert(), ops.execute_tools([read])).subscribe(
        results.append, done.set_exception, lambda: done.set_result(None)
    )
    await done
    (calling,) = [c for r in results for c in r.contents if isinstance(c, ToolCallingContent)]
    assert calling.error is not None
    assert calling.raw_arguments == raw
    (called,) = [c for r in results for c in r.contents if isinstance(c, ToolCalledContent)]
    assert called.result is None
    assert called.error is not None
    assert "invalid arguments" in called.error
    assert RUNS == []  # the tool never ran


@pytest.mark.asyncio
async def test_valid_json_arguments_run_under_the_same_guard(no_code_loading: list[str]) -> None:
    updates = [
        u.ToolCallStart("c1", "read"),
        u.ToolCallArgs("c1", '{"path": "__import__(\'os\')"}'),
        u.ToolCallEnd("c1"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    response = await collect_agent_response(
        reactivex.from_iterable(updates).pipe(ops.convert(), ops.execute_tools([read]))
    )
    assert response.tool_messages[0].content == "read __import__('os')"


# ---------------------------------------------------------------- size caps

BIG = 1_000_000


@pytest.mark.asyncio
async def test_tool_results_and_errors_sent_back_are_capped(llm_server: LLMServer) -> None:
    @tool
    def dump() -> str:
        """A huge result."""
        return "r" * BIG

    @tool
    def explode() -> str:
        """A huge error."""
        raise ValueError("e" * BIG)

    calls = [
        ToolCallSpec("dump", {}),
        ToolCallSpec("explode", {}),
        ToolCallSpec("missing" * 1000, {}),
        ToolCallSpec("dump", '{"x": "' + "a" * 10_000),  # invalid JSON, echoed in the error
    ]
    llm_server.enqueue(Reply(tool_calls=calls), Reply(text="done"))
    cap = 5_000
    async with CLIENTS["openai-chat"](llm_server.url, "sk-x") as client:
        agent = Agent(client, tools=[dump, explode], max_result_chars=cap)
        response = await agent.send("go")
    assert response.text == "done"
    sent = [m for m in llm_server.requests[1].messages if m.get("role") == "tool"]
    assert len(sent) == 4
    for message in sent:
        assert len(message["content"]) <= cap + 100, len(message["content"])
    for message in sent[:3]:  # the huge result, exception and unknown name
        assert "truncated" in message["content"]
    assert sent[0]["content"].startswith("rrrr")
    assert "ValueError" in sent[1]["content"]
    assert "invalid arguments" in sent[3]["content"]


@pytest.mark.asyncio
async def test_the_default_cap_applies_to_agents(llm_server: LLMServer) -> None:
    @tool
    def dump() -> str:
        """A huge result."""
        return "r" * BIG

    llm_server.enqueue(Reply(tool_calls=[ToolCallSpec("dump", {})]), Reply(text="done"))
    async with CLIENTS["anthropic"](llm_server.url, "sk-x") as client:
        await Agent(client, tools=[dump]).send("go")
    blocks = llm_server.requests[1].messages[-1]["content"]
    (block,) = [b for b in blocks if b.get("type") == "tool_result"]
    content = block["content"]
    text = content if isinstance(content, str) else "".join(p["text"] for p in content)
    assert 50_000 <= len(text) <= 100_000 + 100


@pytest.mark.asyncio
async def test_error_bodies_and_raw_event_data_are_capped(llm_server: LLMServer) -> None:
    llm_server.enqueue(
        Fault.status(500, body="x" * BIG),
        Replay(b'data: {"choices": "' + b"y" * BIG + b'"}\n\n'),
        Replay(b'data: {"error": {"message": "' + b"z" * BIG + b'"}}\n\n'),
    )
    async with CLIENTS["openai-chat"](llm_server.url, "sk-x") as client:
        for _ in range(3):
            got = await run_async(client.stream([]))
            error = got.error
            assert isinstance(error, RafrxError), repr(error)
            for value in vars(error).values():
                if isinstance(value, str):
                    assert len(value) <= MAX_BODY_CHARS + 100
            assert len(str(error)) <= MAX_BODY_CHARS + 100
            assert len(io.StringIO(repr(error)).getvalue()) <= MAX_BODY_CHARS + 200
