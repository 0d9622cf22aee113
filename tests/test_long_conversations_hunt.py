"""Long agent conversations: hundreds of turns with tools, under the user's own history.

The angle: a user whose agent conversations run for hundreds of turns with tools,
and who writes their own :class:`~rafrx.HistoryProvider`: a JSON file, SQLite (the
stdlib ``sqlite3``), one that gives back only the last ``N`` messages, one that
trims to a character budget, one that summarises. Everything here runs a real
:class:`rafrx.Agent` over real HTTP against :class:`rafrx.testing.LLMServer`
(127.0.0.1) unless it tests a pure function, and checks each request the server
recorded against its API's rules (``tests/test_wire_validity_properties``' checkers) and the
official SDK request types (``tests/test_sdk_request_types.body_problems``).

1. Windows: a history that loads only its last ``N`` messages (every ``N``, so the
   window cuts a call from its result, a thinking block's message from the results
   after it, starts with an assistant or a tool message, drops the system message
   the user kept) still sends valid requests, and the full store stays paired.
2. Storage: SQLite and JSON-file histories keep every message kind a long run makes
   (reasoning, ``provider_data``, failed and denied tool calls, long ids) equal
   through ``to_dict`` / ``from_dict``; rows an older run wrote (fields left out,
   keys since added) load; a save that fails rolls back and the next turn is valid;
   turns at once save whole.
3. Context and instructions: a summarising ``ContextProvider`` sees the repaired
   history and is never saved; instructions changed between turns go out as they
   are at each turn's start.
4. Cost: one turn's work, and one request's body, grow linearly with the history
   (counted lines of rafrx, as ``tests/test_scaling_hunt`` does, never wall-clock);
   after many turns nothing but the history keeps messages alive.
5. Switching providers (chat → Anthropic → Responses → chat) after many tool turns,
   with Kimi's reused call ids, keeps every request valid and every result paired.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafrx import Agent, AgentResponse
from rafrx.history import InMemoryHistoryProvider, is_new
from rafrx.messages import (
    LOST_RESULT,
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
    paired,
)
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import LLMServer, RecordedRequest, Reply, ToolCallSpec
from rafrx.tools import tool
from tests.test_scaling_hunt import lines_run
from tests.test_sdk_request_types import body_problems
from tests.test_wire_validity_properties import (
    _stream,
    all_problems,
    anthropic_problems,
    chat_problems,
    responses_problems,
)

GUARD = 10.0  # seconds: a guard against hangs only, never reached by a passing test
FORMATS = ("openai-chat", "anthropic", "openai-responses")
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
#: Documented (README): Gemini's ``extra_content`` is a field the OpenAI SDK type lacks.
GEMINI_EXTENSION = "has no field 'extra_content'"
MAX_GROWTH = 6.0  # work from n to 4n: linear is about 4, quadratic about 16


# ---------------------------------------------------------------- tools


@tool
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"sunny in {city}"


@tool
def explode(city: str) -> str:
    """A tool that always fails."""
    raise RuntimeError(f"no weather station in {city}")


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file (needs an approval)."""
    return f"deleted {path}"


async def deny(_event: Any) -> bool:
    return False


# ---------------------------------------------------------------- users' history providers


def _store(message: ChatMessage) -> str:
    return json.dumps(message.to_dict(), ensure_ascii=False, allow_nan=False)


def _read(text: str) -> ChatMessage:
    return ChatMessage.from_dict(json.loads(text))


class WindowHistory:
    """Keeps everything, loads only the last ``window`` messages (``None``: all);
    ``window`` may be changed between turns."""

    def __init__(self, window: int | None = None) -> None:
        self.rows: list[str] = []
        self.window = window

    @property
    def messages(self) -> list[ChatMessage]:
        return [_read(row) for row in self.rows]

    async def load(self) -> Sequence[ChatMessage]:
        rows = self.rows if self.window is None else self.rows[-self.window :]
        return [_read(row) for row in rows] if self.window != 0 else []

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.rows.extend(_store(m) for m in messages if is_new(m))


class BudgetHistory(WindowHistory):
    """Loads the newest messages whose content fits a character budget."""

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.budget = budget

    async def load(self) -> Sequence[ChatMessage]:
        kept: list[ChatMessage] = []
        used = 0
        for message in reversed([_read(row) for row in self.rows]):
            used += len(message.content) + 20 * len(message.tool_calls or ())
            if used > self.budget:
                break
            kept.append(message)
        return kept[::-1]


class SQLiteHistory:
    """One row per message in a stdlib ``sqlite3`` database, each save one transaction.

    ``fail_after``: the next save raises ``sqlite3.OperationalError`` after writing
    that many rows (the transaction is rolled back, as ``with connection`` does).
    """

    def __init__(self, path: Path, conversation: str = "c1", last: int | None = None) -> None:
        self.path = path
        self.conversation = conversation
        self.last = last
        self.fail_after: int | None = None
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS messages (n INTEGER PRIMARY KEY AUTOINCREMENT,"
                " conversation TEXT, body TEXT)"
            )

    async def load(self) -> Sequence[ChatMessage]:
        with sqlite3.connect(self.path) as db:
            rows = db.execute(
                "SELECT body FROM messages WHERE conversation = ? ORDER BY n",
                (self.conversation,),
            ).fetchall()
        if self.last is not None:
            rows = rows[-self.last :] if self.last else []
        return [_read(body) for (body,) in rows]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        fail_after, self.fail_after = self.fail_after, None
        db = sqlite3.connect(self.path)
        try:
            with db:  # one transaction: committed whole or rolled back
                for n, message in enumerate(m for m in messages if is_new(m)):
                    if fail_after is not None and n >= fail_after:
                        raise sqlite3.OperationalError("database is locked")
                    db.execute(
                        "INSERT INTO messages (conversation, body) VALUES (?, ?)",
                        (self.conversation, _store(message)),
                    )
                    await asyncio.sleep(0)  # (another turn may run between two rows)
        finally:
            db.close()

    def all(self) -> list[ChatMessage]:
        with sqlite3.connect(self.path) as db:
            rows = db.execute(
                "SELECT body FROM messages WHERE conversation = ? ORDER BY n",
                (self.conversation,),
            ).fetchall()
        return [_read(body) for (body,) in rows]


class JsonFileHistory:
    """The whole conversation as one JSON file, rewritten on each save."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def load(self) -> Sequence[ChatMessage]:
        if not self.path.exists():
            return []
        return [ChatMessage.from_dict(d) for d in json.loads(self.path.read_text("utf-8"))]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        old = [m.to_dict() for m in await self.load()]
        new = [m.to_dict() for m in messages if is_new(m)]
        self.path.write_text(json.dumps(old + new, ensure_ascii=False, allow_nan=False), "utf-8")


# ---------------------------------------------------------------- the scripted model


def tool_then_answer(
    request: RecordedRequest, *, reasoning: str = "Let me check.", call_id: str | None = None
) -> Reply:
    """A call of ``lookup`` (with reasoning) for a user message, an answer after results."""
    if request.last_role == "tool":
        return Reply(reasoning=reasoning, text="It is sunny.")
    return Reply(
        reasoning=reasoning,
        text="Checking.",
        tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"}, id=call_id)],
    )


def problems_of(request: RecordedRequest) -> list[str]:
    """The API-rule and SDK-type problems of a recorded request.

    The rules are ``tests/test_wire_validity_properties``' (stricter than
    ``tests/test_agent_wire``'s, and current: Anthropic's first-party API takes an
    assistant-first conversation, anthropic-sdk-typescript#622, which a window may
    send; chat call ids need be unique within a message only)."""
    fmt = request.wire_format
    assert fmt is not None
    sdk = [p for p in body_problems(fmt, request.json) if GEMINI_EXTENSION not in p]
    body = request.json
    if fmt == "openai-chat":
        return chat_problems(body["messages"]) + sdk
    if fmt == "anthropic":
        return anthropic_problems(body) + sdk
    return responses_problems(body["input"]) + sdk


def assert_all_valid(requests: Sequence[RecordedRequest]) -> None:
    for n, request in enumerate(requests):
        assert problems_of(request) == [], f"request {n} ({request.wire_format})"


def user_texts(request: RecordedRequest) -> list[str]:
    """The plain user texts a request carries (any format)."""
    out: list[str] = []
    for message in request.messages:
        if message.get("role") != "user" or message.get("type") not in (None, "message"):
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        else:
            out += [b["text"] for b in content if b.get("type") in ("text", "input_text")]
    return out


@pytest_asyncio.fixture
async def server(llm_server: LLMServer) -> AsyncIterator[LLMServer]:
    yield llm_server
    await llm_server.wait_connections_closed(timeout=GUARD)


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def send(agent: Agent, prompt: str | Sequence[ChatMessage]) -> AgentResponse:
    return await asyncio.wait_for(agent.send(prompt), GUARD)


# ================================================================ 1. windows


@pytest.mark.asyncio
async def test_a_last_n_window_cutting_at_every_offset_sends_valid_requests(
    server: LLMServer, fmt: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every window size from 0 to 9 over a conversation of tool turns: the window
    starts at a user, an assistant with calls, a tool result, a final answer."""
    server.script(tool_then_answer)
    history = WindowHistory()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], instructions="Be brief.", history=history)
        for turn in range(12):
            history.window = turn % 10
            await send(agent, f"question {turn}")
    assert_all_valid(server.requests)
    assert len(server.requests) == 24
    for turn in range(12):
        first, second = server.requests[2 * turn], server.requests[2 * turn + 1]
        assert user_texts(first)[-1] == f"question {turn}"  # the new input always goes
        assert user_texts(second)[-1] == f"question {turn}"
    stored = history.messages
    assert paired(stored) == stored  # the store itself never needs repair
    assert len(stored) == 12 * 4
    # each tool result the window cut from its call was dropped with a log line
    assert "no call before it" in caplog.text


@pytest.mark.asyncio
async def test_a_budget_trimmed_history_sends_valid_requests_within_the_budget(
    server: LLMServer, fmt: str
) -> None:
    server.script(tool_then_answer)
    history = BudgetHistory(budget=60)
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        for turn in range(8):
            await send(agent, f"q{turn} " + "x" * (turn * 3))
    assert_all_valid(server.requests)
    first_of_last_turn = server.requests[-2]
    # Earlier turns beyond the budget are gone; the last turn's own input is there.
    assert "q0 " not in user_texts(first_of_last_turn)
    assert user_texts(first_of_last_turn)[-1].startswith("q7 ")


@pytest.mark.asyncio
async def test_a_window_starting_with_a_tool_result_drops_it_and_logs_it_once_per_turn(
    server: LLMServer, fmt: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(tool_then_answer)
    history = WindowHistory()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        await send(agent, "first")  # user, assistant(call), tool, assistant
        history.window = 2  # tool, assistant
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rafrx.messages"):
            await send(agent, "second")
    request = server.requests[2]
    assert problems_of(request) == []
    dropped = [r for r in caplog.records if "no call before it" in r.getMessage()]
    assert len(dropped) == 1
    sent = json.dumps(request.json)
    assert "sunny in Oslo" not in sent  # the orphan result went nowhere
    assert "It is sunny." in sent  # the answer after it did


@pytest.mark.asyncio
async def test_a_window_starting_with_an_assistant_turn_is_sent_as_it_is(
    server: LLMServer, fmt: str
) -> None:
    server.script(tool_then_answer)
    history = WindowHistory()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        await send(agent, "first")
        history.window = 3  # assistant(call) with its reasoning, tool, assistant
        await send(agent, "second")
    request = server.requests[2]
    assert problems_of(request) == []
    assert "first" not in user_texts(request)
    sent = json.dumps(request.json)
    assert "sunny in Oslo" in sent
    assert "It is sunny." in sent


@pytest.mark.asyncio
async def test_anthropic_thinking_of_a_windowed_call_goes_back_first_and_signed(
    server: LLMServer,
) -> None:
    """The window keeps a signed-thinking tool turn whole: its thinking block stays at
    the start of its assistant message, before the tool_use, results right after."""
    server.script(tool_then_answer)
    history = WindowHistory()
    async with AnthropicClient(server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        await send(agent, "first")
        history.window = 3
        await send(agent, "second")
    messages = server.requests[2].json["messages"]
    assert problems_of(server.requests[2]) == []
    assistant = messages[0]
    assert assistant["role"] == "assistant"
    kinds = [b["type"] for b in assistant["content"]]
    assert kinds[0] == "thinking"
    assert assistant["content"][0]["signature"]
    assert kinds.index("tool_use") > kinds.index("thinking")
    assert messages[1]["content"][0]["type"] == "tool_result"


@pytest.mark.asyncio
async def test_instructions_stay_first_when_the_window_drops_a_saved_system_message(
    server: LLMServer, fmt: str
) -> None:
    """A user who saved a system message as input keeps getting the agent's own
    instructions once the window no longer holds it."""
    server.script(tool_then_answer)
    history = WindowHistory()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], instructions="Agent rules.", history=history)
        await send(agent, [ChatMessage.system("Saved rules."), ChatMessage.user("first")])
        history.window = 4
        await send(agent, "second")
    sent = json.dumps(server.requests[-1].json)
    assert "Agent rules." in sent
    assert "Saved rules." not in sent
    assert_all_valid(server.requests)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(start=st.integers(0, 40), length=st.integers(0, 40), target=st.sampled_from(FORMATS))
def test_any_window_of_a_streamed_multi_provider_conversation_goes_valid_anywhere(
    start: int, length: int, target: str
) -> None:
    """A conversation streamed by all three providers (thinking, reasoning items,
    DeepSeek reasoning), any slice of it, repaired as the agent repairs a load."""
    window = LONG_CONVERSATION[start : start + length]
    logging.disable(logging.WARNING)
    try:
        repaired = paired(window)
    finally:
        logging.disable(logging.NOTSET)
    found = all_problems([ChatMessage.system("Sys."), *repaired, ChatMessage.user("next")])
    assert found.get(target, []) == []


def _long_conversation() -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for turn in range(12):
        fmt = FORMATS[turn % 3]
        call_id = ("functions.lookup:0", "call_1", "toolu_01")[turn % 3]
        call = _stream(
            Reply(
                reasoning="hm",
                text="One moment." if turn % 2 else "",
                tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"}, id=call_id)],
            ),
            fmt,
        )
        answer = _stream(Reply(reasoning="done", text=f"answer {turn}"), fmt)
        out += [ChatMessage.user(f"q{turn}"), call, ChatMessage.tool("sunny", call_id), answer]
    return out


LONG_CONVERSATION = _long_conversation()


# ================================================================ 2. storage


@pytest.mark.asyncio
async def test_every_message_kind_of_a_long_run_survives_sqlite_equal(
    server: LLMServer, fmt: str, tmp_path: Path
) -> None:
    """Reasoning, provider blocks, a failing tool, a denied approval, a vLLM-long id:
    what the agent saved comes back from SQLite equal, and a fresh agent on the same
    database sends the conversation on as the first one would."""
    long_id = "chatcmpl-tool-" + "f" * 32

    def script(request: RecordedRequest) -> Reply:
        if request.last_role == "tool":
            return Reply(reasoning="ok", text="Done.")
        return Reply(
            reasoning="plan",
            tool_calls=[
                ToolCallSpec("lookup", {"city": "Kraków ✓"}, id=long_id),
                ToolCallSpec("explode", {"city": "Nowhere"}),
                ToolCallSpec("delete", {"path": "/etc"}),
            ],
        )

    server.script(script)
    saved: list[ChatMessage] = []

    class Recording(SQLiteHistory):
        async def save(self, messages: Sequence[ChatMessage]) -> None:
            saved.extend(m for m in messages if is_new(m))
            await super().save(messages)

    database = tmp_path / "history.db"
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(
            client, tools=[lookup, explode, delete], approver=deny, history=Recording(database)
        )
        for turn in range(3):
            await send(agent, f"turn {turn}")
        loaded = await SQLiteHistory(database).load()
        assert loaded == saved
        assert any(m.is_error for m in loaded)  # the failure and the denial
        assert any(m.reasoning for m in loaded)
        if fmt != "openai-chat":
            assert any(m.provider_data for m in loaded)
        fresh = Agent(client, tools=[lookup, explode, delete], approver=deny)
        fresh.history = SQLiteHistory(database)
        before = len(server.requests)
        await send(fresh, "turn 3")
    assert_all_valid(server.requests)
    assert server.requests[before].json["messages" if fmt != "openai-responses" else "input"]


@pytest.mark.asyncio
async def test_sqlite_last_n_rows_history_over_thirty_turns_stays_valid(
    server: LLMServer, fmt: str, tmp_path: Path
) -> None:
    server.script(tool_then_answer)
    history = SQLiteHistory(tmp_path / "h.db", last=5)
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        for turn in range(30):
            await send(agent, f"q{turn}")
    assert_all_valid(server.requests)
    stored = history.all()
    assert len(stored) == 30 * 4
    assert paired(stored) == stored


@pytest.mark.asyncio
async def test_a_save_that_fails_rolls_back_and_the_next_turn_is_valid_without_it(
    server: LLMServer, fmt: str, tmp_path: Path
) -> None:
    server.script(tool_then_answer)
    history = SQLiteHistory(tmp_path / "h.db")
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        await send(agent, "kept")
        history.fail_after = 2  # the user message and the call written, then it fails
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await send(agent, "lost")
        assert [m.content for m in history.all() if m.role is MessageRole.USER] == ["kept"]
        await send(agent, "after")
    assert_all_valid(server.requests)
    last = server.requests[-2]
    assert user_texts(last) == ["kept", "after"]


@pytest.mark.asyncio
async def test_turns_at_once_on_one_sqlite_history_each_save_whole(
    server: LLMServer, tmp_path: Path
) -> None:
    server.script(tool_then_answer)
    history = SQLiteHistory(tmp_path / "h.db")
    async with OpenAIChatClient(server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        await asyncio.wait_for(asyncio.gather(*(agent.send(f"q{n}") for n in range(6))), GUARD * 2)
    stored = history.all()
    assert len(stored) == 6 * 4
    assert paired(stored) == stored
    # each turn's four rows are together, in order
    for start in range(0, len(stored), 4):
        roles = [m.role for m in stored[start : start + 4]]
        assert roles == [
            MessageRole.USER,
            MessageRole.ASSISTANT,
            MessageRole.TOOL,
            MessageRole.ASSISTANT,
        ]


@pytest.mark.asyncio
async def test_a_json_file_history_read_by_a_new_agent_each_turn(
    server: LLMServer, fmt: str, tmp_path: Path
) -> None:
    """A new process each turn (a fresh client, agent and provider on the same file)."""
    server.script(tool_then_answer)
    path = tmp_path / "conversation.json"
    for turn in range(6):
        async with CLIENTS[fmt](server.url, "k") as client:
            agent = Agent(client, tools=[lookup], history=JsonFileHistory(path))
            await send(agent, f"q{turn}")
    assert_all_valid(server.requests)
    assert user_texts(server.requests[-1]) == [f"q{n}" for n in range(6)]
    stored = [ChatMessage.from_dict(d) for d in json.loads(path.read_text("utf-8"))]
    assert len(stored) == 24
    assert all(m.source is not MessageSource.CHAT_HISTORY for m in stored)


def test_rows_an_older_run_wrote_load_and_go_out_valid() -> None:
    """Rows written with fewer fields (defaults left out, as ``to_dict`` omits them) and
    with keys this version does not know load, and the conversation goes out valid."""
    rows = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"city": "Oslo"}}],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "c1", "saved_at": 17},
        {"role": "assistant", "content": "Sunny.", "model": "gpt-4o", "usage": {"in": 3}},
        {"role": "tool", "content": "orphan", "tool_call_id": "gone"},
    ]
    messages = [ChatMessage.from_dict(row) for row in rows]
    assert messages[1].tool_calls == (ToolCall("c1", "lookup", {"city": "Oslo"}),)
    assert messages[1].content == ""
    logging.disable(logging.WARNING)
    try:
        repaired = paired([*messages, ChatMessage.user("again")])
    finally:
        logging.disable(logging.NOTSET)
    assert all_problems(repaired) == {}
    assert [m.content for m in repaired if m.role is MessageRole.TOOL] == ["sunny"]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_slice_of_a_long_conversation_survives_json_rows_equal(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(LONG_CONVERSATION)))
    chosen = LONG_CONVERSATION[start:]
    marked = [m.with_source(data.draw(st.sampled_from([None, *MessageSource]))) for m in chosen]
    assert [_read(_store(m)) for m in marked] == marked


def test_cut_and_failed_calls_of_a_response_survive_to_dict() -> None:
    """What a user may keep of a response besides its transcript: a call cut by the
    token limit (``complete`` false, raw text, preview) and a call whose arguments were
    invalid JSON, each a ``ToolCall`` that comes back equal."""
    cut = ToolCall(
        "c1",
        "lookup",
        None,
        raw_arguments='{"city": "Os',
        error="arguments cut short: the response hit its token limit",
        complete=False,
        partial_value={"city": "Os"},
    )
    invalid = ToolCall("c2", "lookup", None, raw_arguments="{oops", error="invalid JSON: x")
    for call in (cut, invalid):
        assert ToolCall.from_dict(json.loads(json.dumps(call.to_dict()))) == call
    message = ChatMessage.assistant_with_tools("", [cut, invalid])
    assert _read(_store(message)) == message


@pytest.mark.asyncio
async def test_a_turn_cut_by_the_token_limit_mid_call_leaves_the_long_history_valid(
    server: LLMServer, fmt: str
) -> None:
    """Among tool turns, one whose only call the token limit cut: the call never ran,
    the history keeps no call without its result, and the turns after it are valid."""
    cut = {"n": 0}

    def script(request: RecordedRequest) -> Reply:
        if request.last_role == "user" and "cut" in user_texts(request)[-1] and not cut["n"]:
            cut["n"] += 1
            return Reply(tool_calls=[ToolCallSpec("lookup", '{"city": "Os')], finish="length")
        return tool_then_answer(request)

    server.script(script)
    history = WindowHistory()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        for prompt in ("q0", "cut here", "q2", "q3"):
            response = await send(agent, prompt)
            if prompt == "cut here":
                assert [c.complete for c in response.tool_calls] == [False]
                assert not response.tool_messages
    assert_all_valid(server.requests)
    stored = history.messages
    assert paired(stored) == stored
    assert all(c.complete for m in stored for c in m.tool_calls or ())
    assert user_texts(server.requests[-1])[:3] == ["q0", "cut here", "q2"]


# ================================================================ 3. context and instructions


class Summariser:
    """A context provider that summarises every turn before the last two user turns."""

    def __init__(self) -> None:
        self.seen: list[tuple[ChatMessage, ...]] = []

    async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        self.seen.append(tuple(messages))
        users = [m.content for m in messages if m.role is MessageRole.USER]
        old = users[:-2]
        return [ChatMessage.system(f"Summary of {len(old)} earlier questions.")] if old else []


@pytest.mark.asyncio
async def test_a_summarising_context_provider_sees_the_repaired_history_and_is_never_saved(
    server: LLMServer, fmt: str
) -> None:
    server.script(tool_then_answer)
    summariser = Summariser()
    history = WindowHistory(window=5)
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history, context_providers=[summariser])
        for turn in range(6):
            await send(agent, f"q{turn}")
    assert_all_valid(server.requests)
    for seen in summariser.seen:
        assert paired(seen) == list(seen)  # repaired before the provider sees it
        assert seen[-1].source is MessageSource.EXTERNAL
        assert all(m.source is MessageSource.CHAT_HISTORY for m in seen[:-1])
    assert not any("Summary" in m.content for m in history.messages)


@pytest.mark.asyncio
async def test_instructions_changed_between_turns_go_out_as_they_are_at_each_turn(
    server: LLMServer, fmt: str
) -> None:
    server.script(tool_then_answer)
    history = InMemoryHistoryProvider()
    async with CLIENTS[fmt](server.url, "k") as client:
        agent = Agent(client, tools=[lookup], history=history)
        for turn in range(4):
            agent.instructions = None if turn == 2 else f"Rules v{turn}."
            await send(agent, f"q{turn}")
    assert_all_valid(server.requests)
    for turn in range(4):
        for request in server.requests[2 * turn : 2 * turn + 2]:
            sent = json.dumps(request.json)
            for other in range(4):
                assert (f"Rules v{other}." in sent) == (other == turn != 2)
    assert all(m.role is not MessageRole.SYSTEM for m in history.messages)


# ================================================================ 4. cost


def _history(turns: int) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for turn in range(turns):
        call_id = "functions.lookup:0" if turn % 2 else f"call_{turn}"  # Kimi reuses ids
        out += [
            ChatMessage.user(f"q{turn}"),
            ChatMessage(
                "assistant", "", tool_calls=[ToolCall(call_id, "lookup", {})], reasoning="r"
            ),
            ChatMessage.tool("sunny", call_id),
            ChatMessage.assistant(f"a{turn}"),
        ]
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_request_body_is_linear_in_the_history(fmt: str) -> None:
    client = CLIENTS[fmt]("http://127.0.0.1:1", model="m")

    def work(turns: int) -> Callable[[], Any]:
        messages = _history(turns)
        return lambda: client._complete(client._payload(messages, [lookup]))

    small, large = lines_run(work(60)), lines_run(work(240))
    assert large / small <= MAX_GROWTH, (small, large)


class _Counting:
    """A chat client stand-in over a real client's payload builder: counts nothing
    itself, answers each request with a call, then an answer."""

    def __init__(self, real: LLMClient) -> None:
        self.real = real

    def stream(self, messages: Sequence[ChatMessage], tools: Any = None) -> Any:
        import reactivex

        from rafrx import FinishReason
        from rafrx import updates as u

        self.real._payload(list(messages), list(tools or ()))
        if messages[-1].role is MessageRole.TOOL:
            return reactivex.from_iterable([u.TextDelta("ok"), u.Finish(FinishReason.STOP)])
        return reactivex.from_iterable(
            [
                u.ToolCallStart("c", "lookup"),
                u.ToolCallArgs("c", '{"city": "x"}'),
                u.ToolCallEnd("c"),
                u.Finish(FinishReason.TOOL_CALLS),
            ]
        )


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_turn_of_the_agent_is_linear_in_the_history(fmt: str) -> None:
    """Loading (a deep copy), repairing, the context, two requests' bodies and the
    save: all of it grows with the history about as the history does."""

    def work(turns: int) -> Callable[[], Any]:
        client = _Counting(CLIENTS[fmt]("http://127.0.0.1:1", model="m"))
        history = InMemoryHistoryProvider(_history(turns))
        agent = Agent(client, tools=[lookup], history=history, context_providers=[Summariser()])
        return lambda: asyncio.run(agent.send("next"))

    small, large = lines_run(work(50)), lines_run(work(200))
    assert large / small <= MAX_GROWTH, (small, large)


@pytest.mark.asyncio
async def test_after_many_turns_only_the_history_keeps_messages_alive() -> None:
    """200 turns with tools: the agent keeps no per-turn state (no running turn, no
    pending save, no live message beyond those the history holds)."""

    def alive() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is ChatMessage)

    history = InMemoryHistoryProvider()
    agent = Agent(_Counting(OpenAIChatClient("http://127.0.0.1:1", model="m")), tools=[lookup])
    agent.history = history
    before = alive()
    for turn in range(200):
        await agent.send(f"q{turn}")
    assert len(history.messages) == 800
    assert alive() - before <= len(history.messages) + 20
    assert not agent._turns
    assert not agent._history_access.saving


# ================================================================ 5. switching providers


@pytest.mark.asyncio
async def test_chat_anthropic_responses_chat_after_many_tool_turns_with_reused_ids(
    server: LLMServer,
) -> None:
    """Kimi gives every turn the call id ``functions.lookup:0``: after 8 turns on each
    provider in turn, every request is valid, and each result answers its own call."""

    def script(request: RecordedRequest) -> Reply:
        return tool_then_answer(request, call_id="functions.lookup:0")

    server.script(script)
    history = InMemoryHistoryProvider()
    order = ("openai-chat", "anthropic", "openai-responses", "openai-chat")
    for fmt in order:
        async with CLIENTS[fmt](server.url, "k") as client:
            agent = Agent(client, tools=[lookup], instructions="Sys.", history=history)
            for turn in range(8):
                await send(agent, f"{fmt} {turn}")
    assert_all_valid(server.requests)
    last_anthropic = [r for r in server.requests if r.wire_format == "anthropic"][-1]
    uses = [
        b["id"]
        for m in last_anthropic.json["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    assert len(uses) == len(set(uses)) == 8 + 8  # chat's eight calls and its own
    assert paired(history.messages) == list(history.messages)
    assert not any(m.content == LOST_RESULT for m in history.messages)


@pytest.mark.asyncio
async def test_switching_providers_under_a_moving_window_keeps_every_request_valid(
    server: LLMServer,
) -> None:
    server.script(tool_then_answer)
    history = WindowHistory()
    for turn in range(12):
        fmt = FORMATS[turn % 3]
        history.window = (turn * 5) % 9
        async with CLIENTS[fmt](server.url, "k") as client:
            agent = Agent(client, tools=[lookup, explode], history=history)
            await send(agent, f"q{turn}")
    assert_all_valid(server.requests)
    assert paired(history.messages) == history.messages
