"""Two repairs a long conversation under a user's own history needed (found by
``tests/test_long_conversations_hunt.py``'s hunt): a save waits for the loads running,
so that no turn reads another's turn half saved; and ``paired()`` drops a server tool's
result whose use a history window cut off, which Anthropic refuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
import reactivex

from rafrx import Agent, FinishReason
from rafrx import updates as u
from rafrx.history import is_new
from rafrx.messages import LOST_RESULT, ChatMessage, MessageRole
from rafrx.sources.clients import AnthropicClient
from rafrx.testing import LLMServer, Replay, Reply
from tests.sources.test_dialect_quirks import sse
from tests.sources.test_provider_shapes import (
    block_delta,
    block_start,
    block_stop,
    ev,
    message_start,
)
from tests.sources.test_provider_shapes_3 import pause_turn_body


class _Scripted:
    """A model stand-in: a ``lookup`` call for a user message, an answer after results."""

    def __init__(self) -> None:
        self.sent: list[list[ChatMessage]] = []

    def stream(self, messages: Sequence[ChatMessage], tools: Any = None) -> Any:
        self.sent.append(list(messages))
        asked = [m for m in messages if m.role is MessageRole.USER][-1].content
        if messages[-1].role is MessageRole.TOOL:
            return reactivex.from_iterable(
                [u.TextDelta(f"{asked}: sunny"), u.Finish(FinishReason.STOP)]
            )
        call_id = f"call-{asked}"
        return reactivex.from_iterable(
            [
                u.ToolCallStart(call_id, "lookup"),
                u.ToolCallArgs(call_id, '{"city": "Oslo"}'),
                u.ToolCallEnd(call_id),
                u.Finish(FinishReason.TOOL_CALLS),
            ]
        )


class _DatabaseHistory:
    """One row per message. A save writes its rows one by one, each when the "disk"
    (``tokens``) lets it; a load's read (after ``read_gate``, its I/O) sees the rows
    written by then, as a SELECT beside a running INSERT loop does."""

    def __init__(self) -> None:
        self.rows: list[ChatMessage] = []
        self.tokens: asyncio.Queue[None] = asyncio.Queue()
        self.read_gate = asyncio.Event()
        self.loads = 0
        self.second_load_started = asyncio.Event()
        self.second_load_done = asyncio.Event()

    async def load(self) -> Sequence[ChatMessage]:
        self.loads += 1
        if self.loads != 2:
            return tuple(self.rows)
        self.second_load_started.set()
        await self.read_gate.wait()  # the query's round trip
        snapshot = tuple(self.rows)
        self.second_load_done.set()
        return snapshot

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        for message in (m for m in messages if is_new(m)):
            await self.tokens.get()
            self.rows.append(message)


@pytest.mark.asyncio
async def test_a_save_that_starts_during_another_turns_load_is_read_half_done() -> None:
    """A turn's load that is in flight when another turn's save starts reads that
    save half done, and the model is told a tool call that ran "was lost".

    What the user does: one agent, a database-backed ``HistoryProvider`` (rows
    inserted one by one, as ``aiosqlite``/``asyncpg`` code does; a load is one
    awaited query). Turn B is started while turn A is still running its tool (a
    chat UI sending the next message, or a second request for the same session).

    Before the fix: B's ``load()`` starts while no save runs (``_settled`` is empty),
    then A finishes and starts its save: nothing makes a save wait for a load in
    flight, so B's query reads A's user message and tool call but not yet its
    result. ``paired()`` then answers A's call with ``LOST_RESULT`` and B's requests
    tell the model "the result of this call was lost" although the tool ran and
    its result is being saved.

    What should happen: B's load sees A's turn whole or not at all. rafrx says
    so: ``rafrx/agent.py`` ``_to_its_end``: "a turn loads, and saves, only once the
    agent's other saves are over (no turn reads a half-saved history, and two
    saves never interleave)"; README: "an agent's turns save one at a time" and
    the history is "never left with a call but no result". A save that waits for
    the loads in flight (a readers-writer lock over ``load``/``save``) keeps it.
    """
    history = _DatabaseHistory()
    client = _Scripted()
    tool_started = asyncio.Event()
    tool_gate = asyncio.Event()

    async def lookup(city: str) -> str:
        """Look up the weather."""
        tool_started.set()
        await tool_gate.wait()
        return f"sunny in {city}"

    agent = Agent(client, tools=[lookup], history=history)
    first = asyncio.ensure_future(agent.send("A"))
    await asyncio.wait_for(tool_started.wait(), 5)
    second = asyncio.ensure_future(agent.send("B"))
    await asyncio.wait_for(history.second_load_started.wait(), 5)  # B's query is in flight
    tool_gate.set()  # A's tool ends; A answers and saves
    history.tokens.put_nowait(None)
    history.tokens.put_nowait(None)  # the disk takes two rows, then is slow
    for _ in range(1000):  # (bounded: a save that waits for B's load never writes here)
        if len(history.rows) >= 2:
            break
        await asyncio.sleep(0)
    history.read_gate.set()  # B's query returns
    await asyncio.wait_for(history.second_load_done.wait(), 5)
    for _ in range(100):
        history.tokens.put_nowait(None)
    await asyncio.wait_for(asyncio.gather(first, second), 5)

    b_first_request = next(
        sent
        for sent in client.sent
        if sent[-1].role is MessageRole.USER and sent[-1].content == "B"
    )
    told_lost = [m for m in b_first_request if m.content == LOST_RESULT]
    assert told_lost == [], (
        "turn B read turn A's save half done: A's call was sent as lost: "
        f"{[(m.role.value, m.content[:40]) for m in b_first_request]}"
    )


# ---------------------------------------------------------------- a window splits a paused turn


def _continuation_body() -> bytes:
    """Claude going on after ``pause_turn``: the search's result, then the answer."""
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://weather.example/paris",
                "title": "Paris weather",
                "encrypted_content": "EqgfCioIARgBIiQ3",
                "page_age": None,
            }
        ],
    }
    return sse(
        message_start(),
        block_start(0, result),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        block_delta(1, {"type": "text_delta", "text": " It is sunny."}),
        block_stop(1),
        ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 5}),
        ev("message_stop"),
    )


class _LastN:
    """A history that keeps every message and loads the last ``window`` of them."""

    def __init__(self) -> None:
        self.rows: list[ChatMessage] = []
        self.window: int | None = None

    async def load(self) -> Sequence[ChatMessage]:
        return list(self.rows if self.window is None else self.rows[-self.window :])

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.rows.extend(m for m in messages if is_new(m))


def _orphan_server_results(body: Any) -> list[str]:
    """Ids of server-tool result blocks with no ``server_tool_use`` of theirs before them."""
    used: set[str] = set()
    orphans: list[str] = []
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else ():
            kind = block.get("type", "")
            if kind == "server_tool_use":
                used.add(block["id"])
            elif (
                kind.endswith("_tool_result")
                and kind != "tool_result"
                and block.get("tool_use_id") not in used
            ):
                orphans.append(block.get("tool_use_id"))
    return orphans


@pytest.mark.asyncio
async def test_a_window_that_cuts_a_paused_turn_sends_a_server_tool_result_without_its_use() -> (
    None
):
    """A last-N window that starts between the two halves of a paused Anthropic turn
    sends a ``web_search_tool_result`` whose ``server_tool_use`` was cut off.

    What the user does: an Anthropic agent with the web search server tool and a
    history that loads the last N messages (or trims to a token budget). Anthropic
    pauses a long search turn (``stop_reason: "pause_turn"``); the agent sends the
    paused message back and Claude goes on, so the saved turn is: user, assistant
    (text + ``server_tool_use`` srvtoolu_01, paused), assistant
    (``web_search_tool_result`` for srvtoolu_01 + text). The next turn's window
    starts at the second assistant message.

    Before the fix: ``paired()`` only knows ``tool_calls``/TOOL messages, so the
    loaded history goes out as it is: the request opens with a
    ``web_search_tool_result`` block naming srvtoolu_01, and no ``server_tool_use``
    with that id is anywhere in it. Anthropic refuses it, and every later turn with
    the same window: "unexpected `tool_use_id` found in `web_search_tool_result`
    blocks: srvtoolu_…. Each `web_search_tool_result` block must have a
    corresponding `server_tool_use` block before it." (the API's 400, quoted in
    anthropics/claude-code#62577 and #80439 for its advisor tool's results after a
    compaction, and by other clients' tests of pairs split across pause_turn
    messages).

    What should happen: the repair ``paired()`` does for a loaded history (its
    docstring: "What every provider requires, and a history may break (a save that
    failed half-way, rows edited or trimmed)") covers server tools' pairs too: a
    server-tool result block whose ``server_tool_use`` is not before it is dropped
    (with the log line every other repair gets), as a TOOL message without its call
    is; symmetrically, a ``server_tool_use`` left without its result (a save cut
    between the halves) is dropped unless the message is the paused one being sent
    back. README: a history "can go on with another provider" and is "repaired
    before it is sent".
    """
    history = _LastN()
    web_search = {"type": "web_search_20250305", "name": "web_search"}
    async with LLMServer() as server:
        server.enqueue(Replay(pause_turn_body()), Replay(_continuation_body()), Reply(text="Rain."))
        async with AnthropicClient(server.url, "k") as client:
            agent = Agent(client, tools=[web_search], history=history)
            await asyncio.wait_for(agent.send("Weather in Paris?"), 5)
            assert [m.role.value for m in history.rows] == ["user", "assistant", "assistant"]
            history.window = 1  # the last message only: the paused turn's second half
            await asyncio.wait_for(agent.send("And tomorrow?"), 5)
        body = server.requests[-1].json
    assert _orphan_server_results(body) == [], body["messages"]
