"""The backend of an agent chat UI built on rafrx, attacked the way production does.

The angle: a user writes a small web app. The browser POSTs a message; the
server (an ``aiohttp.web`` app on 127.0.0.1) runs an :class:`rafrx.Agent` turn
for that browser's session (tools, approvals, an ``InMemoryHistoryProvider``
per session) and relays every typed content and event to the browser as its
own Server-Sent Event, JSON-encoded with ``attrs.asdict``. Approvals come back
later over another HTTP request (``POST /approve/{sid}/{call_id}``), answering
the session's async approver. A second endpoint relays a bare client stream
through ``convert()`` (no agent, no history). The model is rafrx's own scripted
:class:`~rafrx.testing.LLMServer`; the "browser" is an ``aiohttp`` client
reading the SSE with :func:`rafrx.sse.aiter_events`.

Attacks, each over real sockets:

* the browser disconnects mid-answer, mid-tool-call or while an approval waits
  (the server's handler is cancelled): the provider request is cancelled and
  its connection closed, no asyncio task is left, the session's history keeps
  nothing of the half turn (never a call without its result), and the next
  turn works and sends a valid conversation;
* a slow browser (stops reading for longer than the idle timeout) never makes
  the provider stream time out;
* two browsers on one session at once, and 120 sessions at once on one loop:
  no cross-talk, every history whole and in order;
* approvals answered later over HTTP, denied, never answered
  (``approval_timeout``), or abandoned by the browser;
* the provider failing mid-turn (a dropped connection, HTTP 500, an in-band
  error): the browser gets one clear error event with what was received, the
  history keeps only finished turns, and retrying works;
* every content and event type serialises to strict JSON, and no message or
  repr the browser sees holds the API key;
* a server restart: the history goes to JSON and back, and the conversation
  goes on with the same provider and with another one.

Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import typing
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafrx import (
    Agent,
    AgentResponseResult,
    ChatMessage,
    FinishReason,
    InMemoryHistoryProvider,
    MessageRole,
    Usage,
    content,
    tool,
)
from rafrx import operators as ops
from rafrx.events import Event, FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import paired
from rafrx.recorder import decode_item, encode_item, encode_value
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    Timeouts,
)
from rafrx.sse import aiter_events
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, ToolCallSpec

GUARD = 10.0  # seconds, against hangs only
API_KEY = "sk-relay-SECRET-0123456789abcdef"

# ---------------------------------------------------------------- the tools


@tool
def lookup(q: str) -> str:
    """Look something up.

    Args:
        q: What to look up.
    """
    return f"found {q}"


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    DELETED.append(path)
    return f"deleted {path}"


DELETED: list[str] = []


# ---------------------------------------------------------------- the model


def _text_of(message: Any) -> str:
    """The text of a wire message in any of the three formats."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def last_user_text(request: RecordedRequest) -> str:
    """The latest user message of a request (any wire format)."""
    for message in reversed(request.messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _text_of(message)
            if text:
                return text
    return ""


def model(request: RecordedRequest) -> Reply:
    """The scripted model: what it answers depends on the user's words.

    ``tool X`` looks X up, ``delete X`` deletes X (needs approval), ``slow X``
    streams a long answer slowly, anything else is echoed (with the number of
    messages the model saw, so that a test can tell what history was sent).
    """
    text = last_user_text(request)
    seen = len(request.messages)
    if request.last_role == "tool":
        return Reply(text=f"done: {text}")
    if text.startswith("tool "):
        return Reply(text="Looking.", tool_calls=[ToolCallSpec("lookup", {"q": text[5:]})])
    if text.startswith("delete "):
        return Reply(tool_calls=[ToolCallSpec("delete_file", {"path": text[7:]})])
    if text.startswith("slow "):
        return Reply(text=f"slowly {text[5:]} " * 40, chunk_size=4, delay=0.01)
    return Reply(text=f"echo {text} [{seen}]")


# ---------------------------------------------------------------- the backend


def jsonable(item: Any) -> dict[str, Any]:
    """A content or event as the browser gets it: rafrx's own JSON form
    (:func:`rafrx.recorder.encode_value`: ``$type``, the fields not at their
    default, no NaN, secrets redacted)."""
    data: dict[str, Any] = encode_value(item)
    return data


def in_order(result: AgentResponseResult) -> list[Any]:
    """A result's items in the order a UI shows them: the step opens, its contents,
    then the other events (finish, approval request)."""
    opening = [e for e in result.events if isinstance(e, ResponseStartedEvent)]
    rest = [e for e in result.events if not isinstance(e, ResponseStartedEvent)]
    return [*opening, *result.contents, *rest]


def sse(event: str, data: Any) -> bytes:
    """One SSE event; strict JSON (a browser's ``JSON.parse`` takes no NaN)."""
    return f"event: {event}\ndata: {json.dumps(data, allow_nan=False)}\n\n".encode()


class Session:
    """One browser session: its agent, its history and its pending approvals."""

    def __init__(self, client: Any, approval_timeout: float | None) -> None:
        self.history = InMemoryHistoryProvider()
        self.pending: dict[str, asyncio.Future[bool]] = {}
        self.asked = asyncio.Event()
        self.agent = Agent(
            client,
            tools=[lookup, delete_file],
            history=self.history,
            approver=self.approve,
            approval_timeout=approval_timeout,
        )

    async def approve(self, event: Any) -> bool:
        """The approver: waits for ``POST /approve/{sid}/{call_id}``."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending[event.call_id] = answer
        self.asked.set()
        try:
            return await answer
        finally:
            self.pending.pop(event.call_id, None)


class Backend:
    """The web app: ``/chat/{sid}`` (an agent turn as SSE), ``/approve/{sid}/{call_id}``,
    ``/history/{sid}`` and ``/complete`` (a bare client stream through ``convert()``)."""

    def __init__(self, client: LLMClient, approval_timeout: float | None = None) -> None:
        self.client = client
        self.approval_timeout = approval_timeout
        self.sessions: dict[str, Session] = {}
        self.running = 0  # chat handlers running
        self.ended: list[str] = []  # how each chat handler ended: done, error, cancelled
        self.changed = asyncio.Event()
        app = web.Application()
        app.router.add_post("/chat/{sid}", self.chat)
        app.router.add_post("/approve/{sid}/{call_id}", self.answer)
        app.router.add_get("/history/{sid}", self.show_history)
        app.router.add_post("/complete", self.complete)
        self.app = app

    def session(self, sid: str) -> Session:
        if sid not in self.sessions:
            self.sessions[sid] = Session(self.client, self.approval_timeout)
        return self.sessions[sid]

    def _ended(self, how: str) -> None:
        self.running -= 1
        self.ended.append(how)
        self.changed.set()

    async def wait_idle(self) -> None:
        """Wait until no chat handler runs."""
        async with asyncio.timeout(GUARD):
            while self.running:
                self.changed.clear()
                await self.changed.wait()

    async def relay(self, request: web.Request, results: Any) -> web.StreamResponse:
        """Subscribe to ``results`` and write each content and event as an SSE event."""
        self.running += 1
        how = "cancelled"
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        subscription = results.subscribe(
            on_next=lambda r: queue.put_nowait(("result", r)),
            on_error=lambda e: queue.put_nowait(("error", e)),
            on_completed=lambda: queue.put_nowait(("done", None)),
        )
        try:
            while True:
                kind, value = await queue.get()
                if kind == "result":
                    for item in in_order(value):
                        await response.write(sse(type(item).__name__, jsonable(item)))
                elif kind == "error":
                    partial = getattr(value, "partial", None)
                    error = {
                        "type": type(value).__name__,
                        "message": str(value),
                        "status": getattr(value, "status", None),
                        "partial_text": None if partial is None else partial.text,
                    }
                    await response.write(sse("error", error))
                    how = "error"
                    break
                else:
                    await response.write(sse("done", {}))
                    how = "done"
                    break
        finally:
            subscription.dispose()
            self._ended(how)
        return response

    async def chat(self, request: web.Request) -> web.StreamResponse:
        session = self.session(request.match_info["sid"])
        body = await request.json()
        return await self.relay(request, session.agent.run(body["message"]))

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = [ChatMessage.user(body["message"])]
        return await self.relay(request, self.client.stream(messages).pipe(ops.convert()))

    async def answer(self, request: web.Request) -> web.Response:
        session = self.session(request.match_info["sid"])
        pending = session.pending.get(request.match_info["call_id"])
        if pending is None or pending.done():
            return web.json_response({"ok": False}, status=404)
        pending.set_result(bool((await request.json())["approved"]))
        return web.json_response({"ok": True})

    async def show_history(self, request: web.Request) -> web.Response:
        session = self.session(request.match_info["sid"])
        return web.json_response([m.to_dict() for m in session.history.messages])


@asynccontextmanager
async def serving(backend: Backend, *, cancel_handlers: bool = True) -> AsyncIterator[str]:
    """Run the backend on 127.0.0.1; with ``cancel_handlers``, a handler is cancelled
    when its browser leaves (else, aiohttp's default, its next write fails)."""
    runner = web.AppRunner(backend.app, handler_cancellation=cancel_handlers, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


# ---------------------------------------------------------------- the browser

Events = list[tuple[str, dict[str, Any]]]


async def chat(
    http: aiohttp.ClientSession,
    url: str,
    message: str,
    *,
    until: Callable[[str, dict[str, Any]], bool] | None = None,
    on_event: Callable[[str, dict[str, Any]], Any] | None = None,
) -> Events:
    """Send ``message`` and read the SSE answer; with ``until``, leave (close the
    connection) right after the first event it accepts."""
    events: Events = []
    async with asyncio.timeout(GUARD), http.post(url, json={"message": message}) as resp:
        assert resp.status == 200
        async for event in aiter_events(resp.content.iter_any()):
            data = json.loads(event.data)
            events.append((event.event, data))
            if on_event is not None:
                await on_event(event.event, data)
            if until is not None and until(event.event, data):
                resp.close()  # the tab is closed
                break
    return events


def text_of(events: Events) -> str:
    return "".join(d["text"] for name, d in events if name == "TextContent")


def names(events: Events) -> list[str]:
    return [name for name, _ in events]


def roles(history: InMemoryHistoryProvider) -> list[str]:
    return [m.role.value for m in history.messages]


def assert_whole(history: InMemoryHistoryProvider) -> None:
    """Each call has its result, each result its call, each user turn an answer."""
    messages = list(history.messages)
    assert paired(messages) == messages
    if messages:
        assert messages[0].role is MessageRole.USER
        assert messages[-1].role is MessageRole.ASSISTANT
        assert not messages[-1].tool_calls


# ---------------------------------------------------------------- fixtures


@pytest_asyncio.fixture
async def llm(no_task_leak: None) -> AsyncIterator[LLMServer]:
    async with LLMServer() as server:
        server.script(model)
        yield server


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@asynccontextmanager
async def app(
    client: LLMClient, approval_timeout: float | None = None, *, cancel_handlers: bool = True
) -> AsyncIterator[tuple[Backend, str]]:
    backend = Backend(client, approval_timeout)
    try:
        async with serving(backend, cancel_handlers=cancel_handlers) as url:
            yield backend, url
    finally:
        await client.aclose()


def chat_client(llm: LLMServer, **kwargs: Any) -> OpenAIChatClient:
    return OpenAIChatClient(llm.url, api_key=API_KEY, model="m", **kwargs)


CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


def client_for(fmt: str, llm: LLMServer, **kwargs: Any) -> LLMClient:
    return CLIENTS[fmt](llm.url, api_key=API_KEY, model="m", **kwargs)


# ---------------------------------------------------------------- the happy path


@pytest.mark.asyncio
async def test_a_turn_with_a_tool_reaches_the_browser_in_order_and_is_saved(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        events = await chat(http, url + "/chat/s1", "tool rx")
    order = names(events)
    assert order[0] == "ResponseStartedEvent"
    assert order[-1] == "done"
    assert order.count("ResponseStartedEvent") == 2
    lifecycle = [
        "ToolCallStartContent",
        "ToolCallEndContent",
        "ToolCallingContent",
        "ToolCalledContent",
    ]
    assert [n for n in order if n in lifecycle] == lifecycle
    called = next(d for n, d in events if n == "ToolCalledContent")
    assert called["result"] == "found rx"
    assert text_of(events) == "Looking.done: tool rx"
    history = backend.sessions["s1"].history
    assert roles(history) == ["user", "assistant", "tool", "assistant"]
    assert_whole(history)


@pytest.mark.asyncio
async def test_the_history_endpoint_returns_what_the_agent_saved(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        await chat(http, url + "/chat/s1", "hi")
        await chat(http, url + "/chat/s1", "tool x")
        async with http.get(url + "/history/s1") as resp:
            shown = await resp.json()
    restored = [ChatMessage.from_dict(d) for d in shown]
    assert restored == list(backend.sessions["s1"].history.messages)
    assert [m.role.value for m in restored] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


# ---------------------------------------------------------------- the browser leaves


async def _left(llm: LLMServer, backend: Backend, *, streaming: bool = True) -> None:
    """After the browser left: its handler ended; when it left while the provider
    streamed, the provider connection was closed (else it idles in the pool)."""
    await backend.wait_idle()
    assert backend.ended == ["cancelled"]
    if streaming:
        await llm.wait_connections_closed(timeout=GUARD)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", CLIENTS)
async def test_leaving_mid_answer_closes_the_provider_stream_and_saves_nothing(
    llm: LLMServer, http: aiohttp.ClientSession, fmt: str
) -> None:
    async with app(client_for(fmt, llm)) as (backend, url):
        events = await chat(
            http, url + "/chat/s1", "slow words", until=lambda n, d: n == "TextContent"
        )
        assert names(events)[-1] == "TextContent"
        await _left(llm, backend)
        assert llm.request_count == 1
        assert backend.sessions["s1"].history.messages == ()
        again = await chat(http, url + "/chat/s1", "hello")
    assert text_of(again) == "echo hello [1]"  # the model saw only the new message
    assert roles(backend.sessions["s1"].history) == ["user", "assistant"]


@pytest.mark.asyncio
async def test_leaving_with_aiohttps_default_no_handler_cancellation_also_cleans_up(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    # aiohttp's default: the handler is not cancelled; its next write to the gone
    # browser raises, and the relay's ``finally`` disposes of the turn.
    async with app(chat_client(llm), cancel_handlers=False) as (backend, url):
        await chat(http, url + "/chat/s1", "slow words", until=lambda n, d: n == "TextContent")
        await backend.wait_idle()
        assert backend.ended == ["cancelled"]
        await llm.wait_connections_closed(timeout=GUARD)
        assert backend.sessions["s1"].history.messages == ()
        assert text_of(await chat(http, url + "/chat/s1", "hi")) == "echo hi [1]"


@pytest.mark.asyncio
async def test_leaving_while_the_tool_call_streams_leaves_no_half_turn(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        await chat(http, url + "/chat/s1", "hi")
        llm.enqueue(
            Reply(
                tool_calls=[ToolCallSpec("lookup", {"q": "a long query " * 20})],
                chunk_size=3,
                delay=0.01,
            )
        )
        await chat(
            http,
            url + "/chat/s1",
            "tool anything",
            until=lambda n, d: n == "ToolCallArgsProgressContent",
        )
        await backend.wait_idle()
        history = backend.sessions["s1"].history
        assert roles(history) == ["user", "assistant"]
        again = await chat(http, url + "/chat/s1", "tool y")
    assert text_of(again) == "Looking.done: tool y"
    assert_whole(history)
    last = llm.requests[-1].messages
    # the next turn sends the old turn and the new one, nothing of the one abandoned
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "tool"]


@pytest.mark.asyncio
async def test_leaving_after_the_tool_ran_keeps_history_whole_and_the_next_turn_valid(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        llm.enqueue(
            Reply(tool_calls=[ToolCallSpec("lookup", {"q": "z"})]),
            Reply(text="the answer is slow " * 30, chunk_size=2, delay=0.01),
        )
        events = await chat(
            http,
            url + "/chat/s1",
            "tool z",
            until=lambda n, d: n == "TextContent",
        )
        assert "ToolCalledContent" in names(events)
        await backend.wait_idle()
        await llm.wait_connections_closed(timeout=GUARD)
        history = backend.sessions["s1"].history
        assert history.messages == ()  # a turn is saved whole or not at all
        again = await chat(http, url + "/chat/s1", "tool w")
    assert names(again)[-1] == "done"
    assert_whole(history)


# ---------------------------------------------------------------- approvals over HTTP


async def _answer(http: aiohttp.ClientSession, url: str, sid: str, call_id: str, ok: bool) -> int:
    async with http.post(f"{url}/approve/{sid}/{call_id}", json={"approved": ok}) as resp:
        return resp.status


@pytest.mark.asyncio
@pytest.mark.parametrize("approved", [True, False])
async def test_an_approval_answered_by_another_request_runs_or_denies_the_call(
    llm: LLMServer, http: aiohttp.ClientSession, approved: bool
) -> None:
    DELETED.clear()
    async with app(chat_client(llm)) as (backend, url):
        statuses: list[int] = []

        async def click(name: str, data: dict[str, Any]) -> None:
            if name == "ToolApprovalRequestEvent":
                assert data["arguments"] == {"path": "/tmp/a"}
                statuses.append(await _answer(http, url, "s1", data["call_id"], approved))

        events = await chat(http, url + "/chat/s1", "delete /tmp/a", on_event=click)
        history = backend.sessions["s1"].history
    assert statuses == [200]
    called = next(d for n, d in events if n == "ToolCalledContent")
    if approved:
        assert called["result"] == "deleted /tmp/a"
        assert "error" not in called
        assert DELETED == ["/tmp/a"]
    else:
        assert called.get("result") is None
        assert "denied" in called["error"]
        assert DELETED == []
    assert names(events)[-1] == "done"
    assert roles(history) == ["user", "assistant", "tool", "assistant"]
    assert_whole(history)
    assert backend.sessions["s1"].pending == {}


@pytest.mark.asyncio
async def test_leaving_while_an_approval_waits_cancels_it_and_a_late_click_finds_nothing(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    DELETED.clear()
    async with app(chat_client(llm)) as (backend, url):
        events = await chat(
            http,
            url + "/chat/s1",
            "delete /etc",
            until=lambda n, d: n == "ToolApprovalRequestEvent",
        )
        call_id = events[-1][1]["call_id"]
        await _left(llm, backend, streaming=False)
        assert llm.request_count == 1
        session = backend.sessions["s1"]
        assert session.pending == {}  # the approver was cancelled with the turn
        assert await _answer(http, url, "s1", call_id, True) == 404
        assert DELETED == []
        assert session.history.messages == ()
        again = await chat(http, url + "/chat/s1", "hello")
    assert text_of(again) == "echo hello [1]"


@pytest.mark.asyncio
async def test_an_approval_nobody_answers_is_denied_after_the_timeout_and_the_turn_ends(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    DELETED.clear()
    async with app(chat_client(llm), approval_timeout=0.2) as (backend, url):
        events = await chat(http, url + "/chat/s1", "delete /srv")
        call_id = next(d for n, d in events if n == "ToolApprovalRequestEvent")["call_id"]
        assert await _answer(http, url, "s1", call_id, True) == 404  # too late
        history = backend.sessions["s1"].history
    called = next(d for n, d in events if n == "ToolCalledContent")
    assert called.get("result") is None
    assert "no answer" in called["error"]
    assert DELETED == []
    assert names(events)[-1] == "done"
    assert_whole(history)
    # the model was told why
    tool_message = next(m for m in llm.requests[-1].messages if m["role"] == "tool")
    assert "denied" in tool_message["content"]


@pytest.mark.asyncio
async def test_a_second_tab_on_the_session_can_answer_the_first_tabs_approval(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    DELETED.clear()
    async with app(chat_client(llm)) as (backend, url):
        turn = asyncio.create_task(chat(http, url + "/chat/s1", "delete /var/x"))
        session = backend.session("s1")
        async with asyncio.timeout(GUARD):
            await session.asked.wait()
        (call_id,) = session.pending
        async with aiohttp.ClientSession() as other_tab:
            assert await _answer(other_tab, url, "s1", call_id, True) == 200
        events = await turn
    assert DELETED == ["/var/x"]
    assert names(events)[-1] == "done"


# ---------------------------------------------------------------- the provider fails


def _error_of(events: Events) -> dict[str, Any]:
    """The one error event, which ends the stream right after the one ErrorContent."""
    assert names(events)[-2:] == ["ErrorContent", "error"]
    assert names(events).count("ErrorContent") == 1
    return events[-1][1]


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", CLIENTS)
async def test_a_dropped_provider_connection_tells_the_browser_what_it_got(
    llm: LLMServer, http: aiohttp.ClientSession, fmt: str
) -> None:
    async with app(client_for(fmt, llm)) as (backend, url):
        await chat(http, url + "/chat/s1", "hi")
        llm.enqueue(Fault.drop_after(2500, body=Reply(text="partial answer " * 20, chunk_size=5)))
        events = await chat(http, url + "/chat/s1", "again")
        error = _error_of(events)
        assert error["type"] == "StreamInterrupted"
        assert error["partial_text"] == text_of(events) != ""
        assert roles(backend.sessions["s1"].history) == ["user", "assistant"]
        retried = await chat(http, url + "/chat/s1", "again")
    assert text_of(retried) == "echo again [3]"
    assert roles(backend.sessions["s1"].history) == ["user", "assistant"] * 2


@pytest.mark.asyncio
async def test_an_http_500_is_one_error_event_with_its_status(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        llm.enqueue(Fault.status(500, message="upstream exploded"))
        events = await chat(http, url + "/chat/s1", "hi")
        error = _error_of(events)
        assert error["type"] == "HTTPStatusError"
        assert error["status"] == 500
        assert "upstream exploded" in error["message"]
        assert error["partial_text"] == ""
        assert backend.sessions["s1"].history.messages == ()
        assert text_of(await chat(http, url + "/chat/s1", "hi")) == "echo hi [1]"


@pytest.mark.asyncio
async def test_a_failure_after_a_tool_ran_keeps_the_first_steps_text_in_the_error(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        llm.enqueue(
            Reply(text="Looking.", tool_calls=[ToolCallSpec("lookup", {"q": "k"})]),
            Fault.drop_after(1400, body=Reply(text="the final words " * 20, chunk_size=4)),
        )
        events = await chat(http, url + "/chat/s1", "tool k")
        error = _error_of(events)
        assert "ToolCalledContent" in names(events)
        assert error["partial_text"] == text_of(events)
        assert error["partial_text"].startswith("Looking.the final")
        assert backend.sessions["s1"].history.messages == ()
        retried = await chat(http, url + "/chat/s1", "tool k")
    assert names(retried)[-1] == "done"
    assert_whole(backend.sessions["s1"].history)


@pytest.mark.asyncio
async def test_an_in_band_anthropic_error_mid_answer_is_an_error_event(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    client = AnthropicClient(llm.url, api_key=API_KEY, model="claude-test")
    async with app(client) as (backend, url):
        llm.enqueue(Reply(text="half an answer", finish="error"))
        events = await chat(http, url + "/chat/s1", "hi")
        error = _error_of(events)
        assert error["type"] == "ProviderError"
        assert error["partial_text"] == "half an answer" == text_of(events)
        assert backend.sessions["s1"].history.messages == ()
        assert names(await chat(http, url + "/chat/s1", "hi"))[-1] == "done"
    assert roles(backend.sessions["s1"].history) == ["user", "assistant"]


@pytest.mark.asyncio
@pytest.mark.parametrize("echo", ["json", "text"])
async def test_no_error_the_browser_sees_holds_the_api_key(
    llm: LLMServer, http: aiohttp.ClientSession, echo: str
) -> None:
    said = f"Incorrect API key provided: {API_KEY}. Bearer {API_KEY}"
    body: Any = {"error": {"message": said, "type": "invalid_request_error"}}
    if echo == "text":
        body = said
    async with app(chat_client(llm)) as (_backend, url):
        llm.enqueue(Fault.status(401, body=body))
        events = await chat(http, url + "/chat/s1", "hi")
        async with http.get(url + "/history/s1") as resp:
            shown = await resp.text()
    wire = json.dumps(events)
    assert _error_of(events)["status"] == 401
    assert API_KEY not in wire
    assert API_KEY[8:] not in wire
    assert API_KEY not in shown


# ---------------------------------------------------------------- many browsers


@pytest.mark.asyncio
async def test_two_tabs_on_one_session_at_once_each_get_their_own_answer(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        first, second = await asyncio.gather(
            chat(http, url + "/chat/s1", "slow one"),
            chat(http, url + "/chat/s1", "slow two"),
        )
        assert text_of(first) == "slowly one " * 40
        assert text_of(second) == "slowly two " * 40
        history = backend.sessions["s1"].history
        assert_whole(history)
        # each turn is saved whole, one after the other: a question next to its answer
        texts = [m.content for m in history.messages]
        assert sorted(texts[0::2]) == ["slow one", "slow two"]
        for question, answer in zip(texts[0::2], texts[1::2], strict=True):
            assert answer == "slowly " + question[5:] + " " + ("slowly " + question[5:] + " ") * 39
        third = await chat(http, url + "/chat/s1", "and now")
    assert text_of(third) == "echo and now [5]"


@pytest.mark.asyncio
async def test_120_sessions_at_once_on_one_loop_never_cross_talk(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    sessions = [f"s{i}" for i in range(120)]
    async with app(chat_client(llm)) as (backend, url):

        async def converse(sid: str) -> tuple[Events, Events]:
            one = await chat(http, f"{url}/chat/{sid}", f"{sid} hello")
            two = await chat(http, f"{url}/chat/{sid}", f"tool {sid}")
            return one, two

        answers = await asyncio.gather(*(converse(sid) for sid in sessions))
        for sid, (one, two) in zip(sessions, answers, strict=True):
            assert text_of(one) == f"echo {sid} hello [1]"
            assert text_of(two) == f"Looking.done: tool {sid}"
            results = [d["result"] for n, d in two if n == "ToolCalledContent"]
            assert results == [f"found {sid}"]
            history = backend.sessions[sid].history
            assert [m.content for m in history.messages] == [
                f"{sid} hello",
                f"echo {sid} hello [1]",
                f"tool {sid}",
                "Looking.",
                f"found {sid}",
                f"done: tool {sid}",
            ]
        assert backend.ended == ["done"] * 240
    assert llm.request_count == 360


@pytest.mark.asyncio
async def test_many_tabs_leaving_at_once_close_every_provider_stream(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        await asyncio.gather(
            *(
                chat(http, f"{url}/chat/s{i}", f"slow {i}", until=lambda n, d: n == "TextContent")
                for i in range(40)
            )
        )
        await backend.wait_idle()
        assert backend.ended == ["cancelled"] * 40
        await llm.wait_connections_closed(timeout=GUARD)
        assert all(s.history.messages == () for s in backend.sessions.values())


# ---------------------------------------------------------------- a slow browser


@pytest.mark.asyncio
async def test_a_browser_that_stops_reading_past_the_idle_timeout_still_gets_everything(
    llm: LLMServer,
) -> None:
    # The browser reads one event, then nothing for 3 idle timeouts: rafrx reads the
    # provider on its own (the relay queues), so no IdleTimeout, and nothing is lost.
    answer = "".join(f"[{i:05d}]" for i in range(20_000))  # 140 kB of text
    llm.enqueue(Reply(text=answer, chunk_size=700, delay=0.001))
    client = chat_client(llm, timeouts=Timeouts(idle=0.2))
    async with app(client) as (backend, url):
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, read_bufsize=2**10) as slow:
            paused = False

            async def dawdle(name: str, data: dict[str, Any]) -> None:
                nonlocal paused
                if name == "TextContent" and not paused:
                    paused = True
                    await asyncio.sleep(0.6)

            events = await chat(slow, url + "/chat/s1", "long please", on_event=dawdle)
    assert names(events)[-1] == "done"
    assert text_of(events) == answer
    assert backend.ended == ["done"]


# ---------------------------------------------------------------- a bare client stream


@pytest.mark.asyncio
async def test_a_bare_converted_stream_relays_and_closes_when_the_browser_leaves(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        whole = await chat(http, url + "/complete", "plain")
        assert text_of(whole) == "echo plain [1]"
        assert names(whole)[-1] == "done"
        await llm.wait_until(lambda: llm.open_connections <= 1)
        await chat(http, url + "/complete", "slow x", until=lambda n, d: n == "TextContent")
        await backend.wait_idle()
        assert backend.ended == ["done", "cancelled"]
        await llm.wait_connections_closed(timeout=GUARD)


# ---------------------------------------------------------------- JSON for the browser

ALL_ITEMS: list[Any] = [
    content.TextContent("Hi", meta=content.ResponseMetadata("r1", "m")),
    content.ReasoningContent("hmm", provider_data={"type": "thinking", "signature": "s"}),
    content.UriContent("https://example.com/a", "text/html"),
    content.ToolCallStartContent("c1", "f"),
    content.ToolCallArgsContent("c1", '{"x": 1e999'),
    content.ToolCallArgsParsedContent("c1", "x", math.inf),
    content.ToolCallArgsProgressContent("c1", "s", 3, "abc"),
    content.ToolCallEndContent("c1"),
    content.ToolCallingContent("c1", "f", {"x": -math.inf, "y": [1, None]}, '{"x": -1e999}'),
    content.ToolCallIncompleteContent("c2", "g", '{"a": "b', {"a": "b"}, FinishReason.LENGTH),
    content.ToolCalledContent("c1", result="ok"),
    content.ToolCalledContent("c3", error="ValueError: no"),
    content.UsageContent(Usage(1, 2, 3, reasoning_tokens=1)),
    content.ErrorContent("the connection broke"),
    ResponseStartedEvent("r1", "m"),
    ToolApprovalRequestEvent("c1", "f", {"x": 1}, "does f"),
    FinishEvent(FinishReason.TOOL_CALLS, Usage(1, 2, 3)),
]


def test_every_content_and_event_type_has_a_strict_json_form_that_reads_back() -> None:
    covered = {type(item) for item in ALL_ITEMS}
    assert covered == {*typing.get_args(content.Content), *typing.get_args(Event)}
    result = AgentResponseResult("r1", "m", None, ALL_ITEMS[:14], ALL_ITEMS[14:])
    kind, fields = encode_item(result)
    wire = json.dumps(fields, allow_nan=False)  # raises on NaN / infinities
    assert decode_item(kind, json.loads(wire)) == result
    for item in ALL_ITEMS:
        data = json.loads(json.dumps(encode_value(item), allow_nan=False))
        assert data["$type"] == type(item).__name__


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json, text=st.text())
def test_any_argument_value_or_text_goes_to_the_browser_as_strict_json(
    value: Any, text: str
) -> None:
    items = [
        content.ToolCallArgsParsedContent("c1", "x", value),
        content.ToolCallingContent("c1", "f", {"x": value}),
        ToolApprovalRequestEvent("c1", "f", {"x": value}),
        content.TextContent(text),
    ]
    for item in items:
        wire = json.dumps(encode_value(item), allow_nan=False)
        back = decode_item("value", {"value": json.loads(wire)})
        assert type(back) is type(item)
        assert repr(back) == repr(item)  # (NaN == NaN by repr)


def test_the_browser_never_sees_an_api_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    said = content.TextContent(f"your key is {API_KEY}")
    args = content.ToolCallingContent("c1", "login", {"key": API_KEY}, json.dumps(API_KEY))
    wire = json.dumps([encode_value(said), encode_value(args)])
    assert API_KEY not in wire
    client = OpenAIChatClient("http://127.0.0.1:9", api_key=API_KEY)
    agent = Agent(client, tools=[lookup])
    assert API_KEY not in repr(client) + repr(agent) + str(vars(client))


# ---------------------------------------------------------------- a restart


async def _saved(url: str, http: aiohttp.ClientSession, sid: str) -> str:
    async with http.get(f"{url}/history/{sid}") as resp:
        return await resp.text()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", CLIENTS)
async def test_a_restarted_server_goes_on_from_its_json_history_with_any_provider(
    llm: LLMServer, http: aiohttp.ClientSession, fmt: str
) -> None:
    DELETED.clear()
    async with app(chat_client(llm)) as (backend, url):
        await chat(http, url + "/chat/s1", "hello")
        await chat(http, url + "/chat/s1", "tool before")

        async def click(name: str, data: dict[str, Any]) -> None:
            if name == "ToolApprovalRequestEvent":
                await _answer(http, url, "s1", data["call_id"], False)

        await chat(http, url + "/chat/s1", "delete /x", on_event=click)
        saved = await _saved(url, http, "s1")
        before = list(backend.sessions["s1"].history.messages)
    # the process restarts: the sessions come back from their JSON
    loaded = [ChatMessage.from_dict(d) for d in json.loads(saved)]
    assert loaded == before
    async with app(client_for(fmt, llm)) as (backend, url):
        backend.session("s1").history = history = InMemoryHistoryProvider(loaded)
        backend.session("s1").agent.history = history
        sent = llm.request_count
        events = await chat(http, url + "/chat/s1", "tool after")
        assert names(events)[-1] == "done"
        assert text_of(events) == "Looking.done: tool after"
        first = llm.requests[sent]
        assert first.wire_format == fmt
        assert last_user_text(first) == "tool after"
        assert _texts_in(first.json) >= {"hello", "echo hello [1]", "found before", "Looking."}
        assert len(history.messages) == len(loaded) + 4
        assert history.messages[: len(loaded)] == tuple(loaded)
        assert_whole(history)
    assert DELETED == []


def _texts_in(value: Any) -> set[str]:
    """Every string in a request body."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_texts_in(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_texts_in(v) for v in value)) if value else set()
    return set()


# ---------------------------------------------------------------- tabs sharing a session


@pytest.mark.asyncio
async def test_one_tab_leaving_never_disturbs_the_other_tabs_turn_on_the_session(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    async with app(chat_client(llm)) as (backend, url):
        staying = asyncio.create_task(chat(http, url + "/chat/s1", "slow stays"))
        await chat(http, url + "/chat/s1", "slow leaves", until=lambda n, d: n == "TextContent")
        events = await staying
        await backend.wait_idle()
        history = backend.sessions["s1"].history
    assert text_of(events) == "slowly stays " * 40
    assert sorted(backend.ended) == ["cancelled", "done"]
    assert [m.content for m in history.messages] == ["slow stays", "slowly stays " * 40]


@pytest.mark.asyncio
async def test_a_new_message_while_an_approval_waits_runs_and_both_turns_are_saved(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    DELETED.clear()
    async with app(chat_client(llm)) as (backend, url):
        waiting = asyncio.create_task(chat(http, url + "/chat/s1", "delete /old"))
        session = backend.session("s1")
        async with asyncio.timeout(GUARD):
            await session.asked.wait()
        meanwhile = await chat(http, url + "/chat/s1", "are you there?")
        assert text_of(meanwhile) == "echo are you there? [1]"
        (call_id,) = session.pending
        assert await _answer(http, url, "s1", call_id, True) == 200
        events = await waiting
    assert names(events)[-1] == "done"
    assert DELETED == ["/old"]
    history = session.history
    assert_whole(history)
    assert [m.content for m in history.messages][:2] == [
        "are you there?",
        "echo are you there? [1]",
    ]
    assert [m.role.value for m in history.messages][2:] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


# ---------------------------------------------------------------- forgetting sessions


@pytest.mark.asyncio
async def test_a_forgotten_session_is_freed_whatever_its_last_turn_did(
    llm: LLMServer, http: aiohttp.ClientSession
) -> None:
    # A server keeps sessions for a while, then drops them: nothing in rafrx (running
    # turns, the client's calls, errors' partials) may keep a session's agent alive.
    async with app(chat_client(llm)) as (backend, url):
        await chat(http, url + "/chat/ok", "tool x")
        await chat(http, url + "/chat/left", "slow y", until=lambda n, d: n == "TextContent")
        llm.enqueue(Fault.drop_after(2500, body=Reply(text="partial answer " * 20, chunk_size=5)))
        await chat(http, url + "/chat/dropped", "x")
        llm.enqueue(Fault.status(500))
        await chat(http, url + "/chat/failed", "x")
        await chat(
            http,
            url + "/chat/asking",
            "delete /q",
            until=lambda n, d: n == "ToolApprovalRequestEvent",
        )
        await backend.wait_idle()
        refs = {sid: weakref.ref(s.agent) for sid, s in backend.sessions.items()}
        backend.sessions.clear()
        alive = set(refs)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10.0):  # (a cancelled turn's task ends a little later)
                while alive:
                    gc.collect()
                    alive = {sid for sid, ref in refs.items() if ref() is not None}
                    await asyncio.sleep(0.01)
        assert alive == set()
