"""Regression tests of the bugs a "framework author" hunt found: a developer building on
rafrx (their own history providers, agents composed into handoffs, one approval channel
for several agents; the passing pins are in ``test_framework_author_hunt.py``).

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence

import pytest
from reactivex.subject import Subject

from rafrx import Agent, ChatMessage
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider, is_new
from rafrx.response import AgentResponseResult
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, RecordedRequest, Reply, ToolCallSpec
from rafrx.tools import ToolApprovalResponse, tool

GUARD = 10.0


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


class RowsHistory:
    """A database-backed history: one INSERT (an await) per message, rows as JSON.

    The first save pauses after its first row until another save starts (or 2 s
    pass, so that a fixed rafrx, which would hold the other save back, still ends)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, object]] = []
        self.saves = 0
        self.other_save_started = asyncio.Event()

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
                    await asyncio.wait_for(self.other_save_started.wait(), 2.0)


@pytest.mark.asyncio
async def test_two_agents_sharing_one_history_never_interleave_their_saves() -> None:
    """Multi-agent handoff over one shared history (the documented pattern of
    ``test_agent_wire.py::test_concurrent_turns_on_a_shared_history_are_each_saved_whole``:
    "each turn is saved in one piece (its call still followed by its result)").

    What the user does: two ``Agent``s (a triage agent and a specialist, say) share one
    ``HistoryProvider`` backed by a database, whose ``save`` awaits one INSERT per
    message, as any async DB driver does. Their turns overlap (two browser tabs, or a
    router and a sub-agent).

    What happens: agent B's turn loads agent A's half-saved turn and saves its own in
    the middle of A's save. The stored conversation is
    ``[A user, B user, B call, B result, B answer, A call, A result, A answer]`` or
    similar: A's call is no longer followed by its result, so the next load repairs it
    away ("answered call ..., whose result was lost, with an error" and "dropped a
    tool result ...: no such call"): A's tool result is lost for good.

    What should happen: the saves of one history never interleave, as they already do
    not for two turns of one agent (``_HistoryAccess``: "A load waits for the saves
    running, a save for the loads and saves running: no turn reads a half-saved
    history ... and two saves never interleave"; README: "an agent's turns save one at a
    time"). The lock is per ``Agent`` (``agent.py`` ``Agent.__init__``:
    ``self._history_access = _HistoryAccess()``), not per history, so it protects
    nothing when the history is shared, which is the only way rafrx offers for a
    handoff.
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
            while history.saves == 0:  # A's save has begun (its first row is written)
                await asyncio.sleep(0.001)
            await asyncio.wait_for(asyncio.gather(turn_a, b.send("from B")), GUARD)
    roles = [(r["role"], r.get("content")) for r in history.rows]
    first_user_b = roles.index(("user", "from B"))
    # A's turn (user, call, result, answer) is four rows in one piece, then B's.
    assert first_user_b == 4, roles
    call = history.rows[1]["tool_calls"]
    assert isinstance(call, list)
    assert history.rows[2]["tool_call_id"] == call[0]["id"]


@pytest.mark.asyncio
async def test_a_turn_saves_to_the_history_it_loaded_not_one_assigned_meanwhile() -> None:
    """What the user does: a chat product keeps one ``Agent`` per browser window and,
    on "New chat", gives it a fresh history (``agent.history = InMemoryHistoryProvider()``;
    the Agent docstring: "The arguments are kept as attributes of the same names"),
    while the previous answer is still streaming.

    What happens: the running turn loaded Alice's conversation but saves its exchange
    (``"what is my card?"`` and the answer quoting the card) into the *new* chat's
    history; Alice's history never gets it. The new chat opens with another
    conversation's private content, and the old one lost its last turn.

    What should happen: a turn saves to the history it loaded from, as it keeps the
    instructions it started with (``test_agent_overlap.py::
    test_instructions_changed_mid_turn_apply_from_the_next_turn_only``): the
    ``history`` argument is "Loaded before each turn and given the turn's new messages
    after it succeeds" — the turn's history, not whatever the attribute holds when the
    turn ends. Root cause: ``_Turn.loop`` reads ``agent.history`` again for the save
    (``agent.py``, ``await agent._history_access.save(functools.partial(
    agent.history.save, messages))``) instead of the provider ``_Turn.messages`` loaded.
    """
    async with LLMServer() as server, OpenAIChatClient(server.url, "k", model="m") as client:
        alice = InMemoryHistoryProvider(
            [ChatMessage.user("my card is 4111 1111 1111 1111"), ChatMessage.assistant("noted")]
        )
        agent = Agent(client, history=alice)
        server.enqueue(Reply(text="Your card ends in 1111.", chunk_size=2, delay=0.01))
        turn = asyncio.ensure_future(agent.send("what is my card?"))
        await server.wait_requests(1, GUARD)
        fresh = InMemoryHistoryProvider()
        agent.history = fresh  # "New chat"
        await asyncio.wait_for(turn, GUARD)
    assert fresh.messages == ()
    assert [m.content for m in alice.messages][-2:] == [
        "what is my card?",
        "Your card ends in 1111.",
    ]


@pytest.mark.asyncio
async def test_an_answer_to_one_agents_approval_request_never_approves_another_agents_call() -> (
    None
):
    """Approval gate bypass across agents sharing one approver observable.

    What the user does: a product has two agents (two assistants in one workspace, or a
    router and its sub-agent) and one approval channel, a ``Subject`` its UI feeds with
    ``ToolApprovalResponse``s, given to both as ``approver``. The model is Kimi (or any
    server whose call ids are per-conversation counters: ``functions.delete:0``, as
    recorded in ``tests/data/fixtures/openai-chat/groq-kimi-text-and-parallel-tools.sse``), so
    both agents' pending calls have the same id. The user approves the first dialog
    (agent A deleting ``/A``) and has not answered the second (agent B deleting ``/B``).

    What happens: the one answer approves both calls: B's ``delete('/B')`` runs without
    the user ever approving it.

    What should happen: a call runs only after its own request was approved. rafrx knows
    the hazard: the Agent docstring says "An observable of answers serves one turn at a
    time: answers go to calls by id, and two turns may be given the same id (Kimi's
    ``functions.f:0``), so a turn subscribed while another runs fails with
    RuntimeError". But the check (``Agent.run``'s ``subscribe``: ``if
    isinstance(self.approver, Observable) and self._turns``) looks only at the turns of
    *this* agent, and its error message even suggests "or use another Agent" — which,
    with the same observable, is exactly this bypass. Fix: keep the running turns per
    approver observable (a module-level ``WeakKeyDictionary`` keyed by the observable),
    or refuse a second subscriber of the same observable while one turn waits.
    """
    ran: list[str] = []

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a path."""
        ran.append(path)
        return "deleted"

    async with LLMServer() as server, OpenAIChatClient(server.url, "k", model="m") as client:

        @server.script
        def answer(request: RecordedRequest) -> Reply:
            if request.last_role == "tool":
                return Reply(text="done")
            who = request.messages[0]["content"]  # the instructions: "A" or "B"
            spec = ToolCallSpec("delete", {"path": f"/{who}"}, id="functions.delete:0")
            return Reply(tool_calls=[spec])

        approvals: Subject[ToolApprovalResponse] = Subject()
        agents = [
            Agent(
                client,
                tools=[delete],
                instructions=name,
                approver=approvals,
                approval_timeout=1.0,
                id=name,
            )
            for name in ("A", "B")
        ]
        asked: list[str] = []
        both_asked = asyncio.Event()
        ended: list[asyncio.Future[None]] = []
        for agent in agents:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ended.append(done)

            def on_next(result: AgentResponseResult, name: str = agent.id) -> None:
                if any(isinstance(e, ToolApprovalRequestEvent) for e in result.events):
                    asked.append(name)
                    if len(asked) == 2:
                        both_asked.set()

            agent.run("clean up").subscribe(
                on_next,
                lambda e, d=done: d.done() or d.set_exception(e),
                lambda d=done: d.done() or d.set_result(None),
            )
        with contextlib.suppress(TimeoutError):  # (a fix refusing B's turn: B never asks)
            await asyncio.wait_for(both_asked.wait(), 3.0)
        approvals.on_next(ToolApprovalResponse("functions.delete:0", True))  # A's dialog
        await asyncio.wait_for(asyncio.gather(*ended, return_exceptions=True), GUARD)
    assert "/B" not in ran, f"B's call ran on the answer to A's request: ran {ran}"
