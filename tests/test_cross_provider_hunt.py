"""A conversation that moves between providers and through storage, over real HTTP.

A user's agent starts a conversation on one provider, the history is kept as JSON
(``ChatMessage.to_dict`` / ``from_dict`` through ``json.dumps`` / ``json.loads``, one
line a message, as a file or a database row), and a *new* agent (a fresh client, a
fresh history object reading the same text: a new process) goes on with another
provider, and back. Each leg runs against :class:`~rafrx.testing.LLMServer` on
127.0.0.1, which records every request; every request is checked:

* against the official SDKs' request types (``tests/test_sdk_request_types``) and the
  APIs' own pairing rules (``tests/test_agent_wire.wire_problems``): each tool_result
  right after its tool_use, each tool message right after its assistant tool_calls,
  each function_call_output after its call, Anthropic ids in ``^[a-zA-Z0-9_-]+$``;
* for what it carries: every earlier call, result (errors, non-ASCII, structured and
  large ones), answer and the system prompt, each exactly once; reasoning and
  thinking only where their provider reads them (signed thinking and server-tool
  blocks only to Anthropic, reasoning items only to the Responses API), verbatim;
* against what the same conversation sends when it never left memory (storage
  changes nothing a provider sees).

The hunts already in ``tests/test_history_blocks_hunt.py``,
``tests/test_wire_multistep.py`` and ``tests/sources/test_*_agent_hunt.py`` convert
stored bodies or run one provider per agent; these run whole multi-leg journeys with
new agents per leg.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rafrx import Agent, AgentResponse, InMemoryHistoryProvider
from rafrx.history import is_new
from rafrx.messages import (
    ANTHROPIC_THINKING,
    OPENAI_REASONING,
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
)
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import LLMServer, RecordedRequest, Replay, Reply, ToolCallSpec
from tests.sources.test_anthropic_agent_hunt import (
    citation,
    search_result,
    server_use,
    text,
    thinking,
    tool_use,
)
from tests.sources.test_anthropic_agent_hunt import message as anthropic_message
from tests.sources.test_responses_agent_hunt import call, custom_call, reasoning, turn
from tests.sources.test_responses_agent_hunt import message as responses_message
from tests.test_agent_wire import wire_problems
from tests.test_history_blocks_hunt import aggregate, gemini_body
from tests.test_sdk_request_types import CHAT_BODY, body_problems, sdk_problems

GUARD = 10.0  # seconds, against hangs only
INSTRUCTIONS = "Be brief. Réponds en français si on te parle français. ✓"
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


# ================================================================ storage


class JsonLinesHistory:
    """A history provider keeping the conversation in a JSON-lines file: every field
    of each new message (``to_dict``), read back with ``from_dict`` on each load, so
    each agent over the same file is as a new process would be."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def load(self) -> list[ChatMessage]:
        if not self.path.exists():
            return []
        return [
            ChatMessage.from_dict(json.loads(line))
            for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        with self.path.open("a", encoding="utf-8") as file:
            for m in messages:
                if is_new(m):
                    file.write(json.dumps(m.to_dict(), ensure_ascii=False) + "\n")


class Tee:
    """Saves to a JSON-lines file and to memory; loads from the file."""

    def __init__(self, path: Path, memory: InMemoryHistoryProvider) -> None:
        self.file = JsonLinesHistory(path)
        self.memory = memory

    async def load(self) -> list[ChatMessage]:
        return await self.file.load()

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        await self.file.save(messages)
        await self.memory.save(messages)


# ================================================================ tools


def lookup(city: str) -> str:
    """The weather in a city."""
    return f"{city}: ☀ 21 °C, vent 5 km/h"


def broken(path: str) -> str:
    """Read a file (always fails)."""
    raise FileNotFoundError(f"no such file: {path} (é中)")


def table(n: int) -> dict[str, Any]:
    """Rows of a table (a structured, non-ASCII result)."""
    return {"rows": [{"i": i, "名前": f"行{i}", "ok": i % 2 == 0} for i in range(n)], "n": n}


def dump(size: int) -> str:
    """A large result."""
    return ("ligne é😀 " * size)[:size]


TOOLS = [lookup, broken, table, dump]

#: The results each call gives, as they go back to the model (a failed call's as text).
LOOKUP_ZURICH = lookup("Zürich")
TABLE_3 = json.dumps(table(3), ensure_ascii=False)
BIG = dump(20_000)


# ================================================================ checks


def problems_of(request: RecordedRequest) -> list[str]:
    """What the request's API would refuse: SDK types (DeepSeek's documented
    reasoning_content aside) and the API's pairing rules."""
    fmt = request.wire_format
    assert fmt is not None
    return body_problems(fmt, request.json) + wire_problems(request)


def dumped(request: RecordedRequest) -> str:
    return json.dumps(request.messages, ensure_ascii=False)


def system_of(request: RecordedRequest) -> list[str]:
    """The system prompt(s) a request carries."""
    if request.wire_format == "anthropic":
        system = request.json.get("system")
        return [] if system is None else [system]
    return [m["content"] for m in request.messages if m.get("role") == "system"]


def anthropic_ids(request: RecordedRequest) -> tuple[list[str], list[str]]:
    blocks = [b for m in request.messages for b in m["content"] if isinstance(b, dict)]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
    return uses, results


def results_sent(request: RecordedRequest) -> list[tuple[str, bool]]:
    """Each tool result a request carries: its text and whether it is marked an error
    (only Anthropic marks them)."""
    if request.wire_format == "anthropic":
        return [
            (b["content"], b.get("is_error") is True)
            for m in request.messages
            for b in m["content"]
            if isinstance(b, dict) and b["type"] == "tool_result"
        ]
    if request.wire_format == "openai-chat":
        return [(m["content"], False) for m in request.messages if m.get("role") == "tool"]
    return [(i["output"], False) for i in request.messages if i.get("type", "").endswith("output")]


async def leg(
    server: LLMServer,
    fmt: str,
    history: Any,
    prompt: str,
    *replies: Reply | Replay,
    tools: Sequence[Any] = TOOLS,
    **params: Any,
) -> AgentResponse:
    """One leg: a new client and a new agent on ``history``, one turn."""
    server.enqueue(*replies)
    async with CLIENTS[fmt](server.url, "sk-test", **params) as client:
        agent = Agent(client, tools=tools, instructions=INSTRUCTIONS, history=history)
        return await asyncio.wait_for(agent.send(prompt), GUARD)


# ================================================================ the journey


@pytest.mark.asyncio
async def test_chat_anthropic_responses_chat_anthropic_journey_through_json(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """DeepSeek-style chat with reasoning and parallel calls (a Kimi-style id, a failing
    tool, a structured non-ASCII result, a large one), then Anthropic with signed
    thinking and parallel calls, then the Responses API with a reasoning item, then
    chat, then Anthropic: a new agent each time over one JSON-lines history."""
    path = tmp_path / "history.jsonl"
    memory = InMemoryHistoryProvider()
    history = Tee(path, memory)
    first = await leg(
        llm_server,
        "openai-chat",
        history,
        "Quel temps à Zürich ?",
        Reply(
            reasoning="Il faut chercher. 思考",
            tool_calls=[
                ToolCallSpec("lookup", {"city": "Zürich"}, id="functions.lookup:0"),
                ToolCallSpec("broken", {"path": "/etc/nope"}, id="functions.broken:1"),
                ToolCallSpec("table", {"n": 3}, id="call_table"),
                ToolCallSpec("dump", {"size": 20_000}, id="call_dump"),
            ],
        ),
        Reply(reasoning="J'ai tout.", text="Il fait beau à Zürich."),
    )
    assert first.text == "Il fait beau à Zürich."
    second = await leg(
        llm_server,
        "anthropic",
        history,
        "And Oslo and Bergen?",
        Reply(
            reasoning="Two lookups.",
            text="Checking both.",
            tool_calls=[
                ToolCallSpec("lookup", {"city": "Oslo"}, id="toolu_oslo"),
                ToolCallSpec("lookup", {"city": "Bergen"}, id="toolu_bergen"),
            ],
        ),
        Reply(text="Both sunny."),
    )
    assert second.text.startswith("Checking both.")
    assert second.text.endswith("Both sunny.")
    await leg(
        llm_server,
        "openai-responses",
        history,
        "Rome?",
        Reply(
            reasoning="One lookup.",
            tool_calls=[ToolCallSpec("lookup", {"city": "Rome"}, id="call_rome")],
        ),
        Reply(text="Rome too."),
    )
    await leg(llm_server, "openai-chat", history, "Merci !", Reply(text="De rien."))
    await leg(llm_server, "anthropic", history, "Summary?", Reply(text="Sunny everywhere."))

    requests = llm_server.requests
    fmts = [r.wire_format for r in requests]
    assert fmts == ["openai-chat"] * 2 + ["anthropic"] * 2 + ["openai-responses"] * 2 + [
        "openai-chat",
        "anthropic",
    ]
    for n, request in enumerate(requests):
        assert problems_of(request) == [], n
        assert system_of(request) == [INSTRUCTIONS], n  # once, whatever the provider
        assert len(request.json.get("tools", ())) == len(TOOLS), n

    # every result goes back exactly once, in every later request, on every provider
    results = [LOOKUP_ZURICH, TABLE_3, BIG, lookup("Oslo"), lookup("Bergen"), lookup("Rome")]
    firsts = [1, 1, 1, 3, 3, 5]
    for result, since in zip(results, firsts, strict=True):
        for n, request in enumerate(requests):
            sent = [t for t, _ in results_sent(request)]
            assert sent.count(result) == (1 if n >= since else 0), (n, result[:40])
    # the failing call's result: an error, marked so for Anthropic
    for request in requests[1:]:
        failed = [(t, e) for t, e in results_sent(request) if "FileNotFoundError" in t]
        assert len(failed) == 1
        assert "no such file: /etc/nope (é中)" in failed[0][0]
        assert failed[0][1] is (request.wire_format == "anthropic")
    # every earlier answer once in each later request
    answers = ["Il fait beau à Zürich.", "Both sunny.", "Rome too.", "De rien."]
    since = [2, 4, 6, 7]
    for answer, at in zip(answers, since, strict=True):
        for request in requests[at:]:
            assert dumped(request).count(answer) == 1, (answer, request.wire_format)

    # ids: Anthropic gets valid ones, paired; the others get the ids as the model gave them
    for request in (requests[2], requests[3], requests[7]):
        uses, answered = anthropic_ids(request)
        assert all(ANTHROPIC_ID.match(i) for i in uses + answered), uses
        assert sorted(uses) == sorted(answered)
        assert len(set(uses)) == len(uses)
    assert "functions.lookup:0" not in dumped(requests[7])
    for request in (requests[4], requests[6]):
        assert "functions.lookup:0" in dumped(request)
        assert "functions.broken:1" in dumped(request)
    assert "functions.lookup:0" in path.read_text(encoding="utf-8")  # stored as given

    # thinking and reasoning only where their provider reads them, verbatim
    signed = [
        b
        for m in requests[3].messages
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "thinking"
    ]
    assert len(signed) == 1
    assert signed[0]["thinking"] == "Two lookups."
    assert signed[0]["signature"].startswith("sig_")
    later_thinking = [
        b
        for m in requests[7].messages
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "thinking"
    ]
    assert later_thinking == signed  # after Responses and chat legs, via JSON
    for request in requests[4:7]:
        assert signed[0]["signature"] not in json.dumps(request.json)
    rs_ids = [i["id"] for i in requests[5].messages if i.get("type") == "reasoning"]
    assert len(rs_ids) == 1
    for request in (requests[6], requests[7]):
        assert rs_ids[0] not in json.dumps(request.json)
    # DeepSeek (chat): every tool-call message carries reasoning_content (a string)
    tool_turns = [m for m in requests[6].messages if m.get("tool_calls")]
    assert len(tool_turns) == 3
    assert all(isinstance(m.get("reasoning_content"), str) for m in tool_turns)
    assert tool_turns[0]["reasoning_content"] == "Il faut chercher. 思考"

    # storage changed nothing a provider sees: the JSON history and the one that never
    # left memory give each client the same request body
    stored = await history.load()
    kept = list(await memory.load())
    assert [m.with_source(None) for m in stored] == [m.with_source(None) for m in kept]
    for fmt, cls in CLIENTS.items():
        client = cls("http://127.0.0.1:1", "sk-test", "m")
        assert client._payload(stored, []) == client._payload(kept, []), fmt
    roles = [m.role for m in stored]
    assert roles.count(MessageRole.USER) == 5
    assert roles.count(MessageRole.TOOL) == 7
    assert not any(m.role is MessageRole.SYSTEM for m in stored)  # instructions not saved


@pytest.mark.asyncio
async def test_ids_that_collide_once_made_anthropic_ids_stay_paired_with_their_results(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """A chat model's parallel calls whose ids differ only in characters Anthropic
    refuses (``a.b``, ``a:b``, ``a b`` and a real ``a_b``), stored as JSON, then an
    Anthropic agent: four distinct valid ids, each result after its own call (the
    content says which), and the chat ids kept as they came for the next chat leg."""
    history = JsonLinesHistory(tmp_path / "h.jsonl")
    ids = ["a.b", "a:b", "a b", "a_b", "é/1"]
    await leg(
        llm_server,
        "openai-chat",
        history,
        "Five cities?",
        Reply(
            tool_calls=[
                ToolCallSpec("lookup", {"city": f"City{n}"}, id=call_id)
                for n, call_id in enumerate(ids)
            ]
        ),
        Reply(text="Done."),
    )
    await leg(llm_server, "anthropic", history, "Again?", Reply(text="Same."))
    await leg(llm_server, "openai-chat", history, "And?", Reply(text="Same again."))
    anthropic = llm_server.requests[2]
    assert problems_of(anthropic) == []
    calling = next(m for m in anthropic.messages if m["role"] == "assistant")
    answers = anthropic.messages[anthropic.messages.index(calling) + 1]["content"]
    uses = {b["id"]: b["input"]["city"] for b in calling["content"] if b["type"] == "tool_use"}
    assert len(uses) == len(ids)
    assert all(ANTHROPIC_ID.match(i) for i in uses)
    for block in answers:
        assert block["content"] == lookup(uses[block["tool_use_id"]])
    chat = llm_server.requests[3]
    assert problems_of(chat) == []
    sent = [c["id"] for m in chat.messages for c in m.get("tool_calls") or ()]
    assert sent == ids
    assert [m["tool_call_id"] for m in chat.messages if m["role"] == "tool"] == ids


@pytest.mark.asyncio
async def test_anthropic_server_tools_and_citations_stay_with_anthropic_across_other_legs(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """Claude searches the web (server_tool_use + web_search_tool_result), answers with
    a citation and calls a client tool after signed thinking; the conversation, kept as
    JSON, goes to chat and to the Responses API (no server block, no encrypted content,
    no signature; the text and the client call and its result intact), then back to
    Anthropic: the blocks go back verbatim and in their order, as they first did."""
    history = JsonLinesHistory(tmp_path / "h.jsonl")
    step = anthropic_message(
        thinking("Search, then look up.", "SIG-SEARCH"),
        server_use("srvtoolu_01", "web_search", {"query": "paris weather"}),
        search_result("srvtoolu_01"),
        text("Paris is sunny.", citation()),
        tool_use("toolu_paris", "lookup", {"city": "Paris"}),
    )
    await leg(
        llm_server,
        "anthropic",
        history,
        "Paris?",
        Replay(step),
        Reply(text="Sunny in Paris."),
        tools=[*TOOLS, {"type": "web_search_20250305", "name": "web_search"}],
    )
    first_back = llm_server.requests[1]
    assert problems_of(first_back) == []
    kinds = ["thinking", "server_tool_use", "web_search_tool_result", "text", "tool_use"]
    step_blocks = first_back.messages[1]["content"]
    assert [b["type"] for b in step_blocks] == kinds
    await leg(llm_server, "openai-chat", history, "Lyon?", Reply(text="Cloudy."))
    await leg(llm_server, "openai-responses", history, "Nice?", Reply(text="Warm."))
    for request in llm_server.requests[2:4]:
        assert problems_of(request) == [], request.wire_format
        body = json.dumps(request.json, ensure_ascii=False)
        for foreign in ("srvtoolu_01", "server_tool_use", "EqgfCioI", "SIG-SEARCH", "Eo8BCio"):
            assert foreign not in body, (request.wire_format, foreign)
        assert "Paris is sunny." in body
        assert [t for t, _ in results_sent(request)] == [lookup("Paris")]
        assert body.count("Sunny in Paris.") == 1
    await leg(
        llm_server,
        "anthropic",
        history,
        "Thanks.",
        Reply(text="Bye."),
        tools=[*TOOLS, {"type": "web_search_20250305", "name": "web_search"}],
    )
    last = llm_server.requests[4]
    assert problems_of(last) == []
    assert last.messages[1]["content"] == step_blocks
    assert [m["role"] for m in last.messages] == ["user", "assistant", "user", "assistant"] + [
        "user",
        "assistant",
    ] * 2 + ["user"]


@pytest.mark.asyncio
async def test_responses_encrypted_reasoning_survives_an_anthropic_leg_with_store_off(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """``store: false`` Responses turn with an encrypted reasoning item before a call;
    then Anthropic (which gets neither the item nor its encrypted content), then the
    Responses API again: the item goes back once, verbatim, before the call it was
    paired with (by id), and the Anthropic leg's calls go back as plain items."""
    history = JsonLinesHistory(tmp_path / "h.jsonl")
    step = turn(
        reasoning("rs_a1", "Look it up.", encrypted="ENC-A1"),
        call("fc_a1", "call_a1", "lookup", {"city": "Kyoto"}),
    )
    final = turn(responses_message("msg_a2", "Kyoto: sunny."), response_id="resp_2")
    await leg(
        llm_server, "openai-responses", history, "Kyoto?", Replay(step), Replay(final), store=False
    )
    await leg(
        llm_server,
        "anthropic",
        history,
        "Osaka?",
        Reply(tool_calls=[ToolCallSpec("lookup", {"city": "Osaka"}, id="toolu_osaka")]),
        Reply(text="Osaka: sunny."),
    )
    await leg(llm_server, "openai-responses", history, "Nara?", Reply(text="Nara."), store=False)
    requests = llm_server.requests
    for request in requests:
        assert problems_of(request) == [], request.wire_format
    for request in requests[2:4]:
        assert "ENC-A1" not in json.dumps(request.json)
        assert "rs_a1" not in json.dumps(request.json)
    last = requests[4]
    assert last.json["include"] == ["reasoning.encrypted_content"]
    items = last.messages
    kinds = [i.get("type", i.get("role")) for i in items]
    at = kinds.index("reasoning")
    assert kinds.count("reasoning") == 1
    assert items[at] == {
        "type": "reasoning",
        "id": "rs_a1",
        "summary": [{"type": "summary_text", "text": "Look it up."}],
        "encrypted_content": "ENC-A1",
    }
    assert items[at + 1]["type"] == "function_call"
    assert (items[at + 1]["id"], items[at + 1]["call_id"]) == ("fc_a1", "call_a1")
    osaka = [i for i in items if i.get("call_id") == "toolu_osaka"]
    assert [i["type"] for i in osaka] == ["function_call", "function_call_output"]
    assert "id" not in osaka[0]


@pytest.mark.asyncio
async def test_a_chat_history_reaches_a_strict_chat_server_without_foreign_fields(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """Anthropic thinking and Responses reasoning become an assistant message's
    ``reasoning``; a chat client with ``reasoning_field=None`` (a server refusing
    unknown fields) sends none of it: the body fits the SDK type with no extension."""
    history = JsonLinesHistory(tmp_path / "h.jsonl")
    await leg(
        llm_server,
        "anthropic",
        history,
        "Oslo?",
        Reply(
            reasoning="Look.",
            tool_calls=[ToolCallSpec("lookup", {"city": "Oslo"}, id="toolu_o")],
        ),
        Reply(reasoning="Done.", text="Sunny."),
    )
    await leg(
        llm_server,
        "openai-responses",
        history,
        "Rome?",
        Reply(reasoning="Look.", tool_calls=[ToolCallSpec("lookup", {"city": "Rome"})]),
        Reply(text="Warm."),
    )
    await leg(
        llm_server, "openai-chat", history, "Thanks", Reply(text="Bye."), reasoning_field=None
    )
    chat = llm_server.requests[-1]
    assert body_problems("openai-chat", chat.json) == []
    assert wire_problems(chat) == []
    for field in ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks"):
        assert all(field not in m for m in chat.messages), field


@pytest.mark.asyncio
async def test_a_large_non_ascii_result_is_clipped_once_and_sent_alike_everywhere(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """A result longer than ``max_result_chars`` is clipped when it is made, not per
    provider: stored as JSON, the same text (emoji and all) goes to each provider."""
    history = JsonLinesHistory(tmp_path / "h.jsonl")
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("dump", {"size": 5_000}, id="call_big")]),
        Reply(text="Big."),
    )
    async with OpenAIChatClient(llm_server.url, "sk") as client:
        agent = Agent(client, tools=TOOLS, history=history, max_result_chars=1_000)
        await asyncio.wait_for(agent.send("Dump."), GUARD)
    for fmt in ("anthropic", "openai-responses", "openai-chat"):
        await leg(llm_server, fmt, history, "Again?", Reply(text="Same."))
    clipped = [t for t, _ in results_sent(llm_server.requests[1])]
    assert len(clipped) == 1
    assert clipped[0].startswith(dump(1_000))
    assert clipped[0].endswith("… [truncated: 4000 more characters]")
    for request in llm_server.requests[2:]:
        assert problems_of(request) == [], request.wire_format
        assert [t for t, _ in results_sent(request)] == clipped, request.wire_format


@pytest.mark.asyncio
async def test_a_stored_interrupted_tool_loop_is_repaired_for_the_next_provider(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """A history file holding a chat step whose second result was never saved, and a
    stray result (as a crash mid-save leaves it), loaded by Anthropic and Responses
    agents: each request is valid, the lost call answered with an error result (marked
    is_error for Anthropic), the stray one not sent."""
    path = tmp_path / "h.jsonl"
    calls = [
        ToolCall("call_1", "lookup", {"city": "Oslo"}),
        ToolCall("call_2", "lookup", {"city": "Rome"}),
    ]
    broken_history = [
        ChatMessage.user("Two?", source=MessageSource.EXTERNAL),
        ChatMessage("assistant", "", tool_calls=calls, reasoning="Two lookups."),
        ChatMessage.tool(lookup("Oslo"), "call_1"),
        ChatMessage.tool("stray", "call_9"),
    ]
    path.write_text(
        "".join(json.dumps(m.to_dict(), ensure_ascii=False) + "\n" for m in broken_history),
        encoding="utf-8",
    )
    for fmt in ("anthropic", "openai-responses"):
        await leg(llm_server, fmt, JsonLinesHistory(path), "Well?", Reply(text="Hm."))
        request = llm_server.requests[-1]
        assert problems_of(request) == [], fmt
        sent = results_sent(request)
        assert sent[0] == (lookup("Oslo"), False)
        assert "lost" in sent[1][0]
        assert sent[1][1] is (fmt == "anthropic")
        assert "stray" not in json.dumps(request.json)


@pytest.mark.asyncio
async def test_a_client_swapped_on_one_agent_carries_the_conversation_on(
    llm_server: LLMServer,
) -> None:
    """One agent whose ``client`` is swapped between turns (chat → Anthropic → Responses,
    in-memory history): each provider gets the whole conversation, valid."""
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("table", {"n": 2}, id="functions.table:0")]),
        Reply(text="Two rows."),
        Reply(text="Still two."),
        Reply(text="Yes, two."),
    )
    clients = [cls(llm_server.url, "sk") for cls in CLIENTS.values()]
    try:
        agent = Agent(clients[0], tools=TOOLS, instructions=INSTRUCTIONS)
        agent.history = InMemoryHistoryProvider()
        await asyncio.wait_for(agent.send("Rows?"), GUARD)
        for client in clients[1:]:
            agent.client = client
            await asyncio.wait_for(agent.send("Sure?"), GUARD)
    finally:
        for client in clients:
            await client.aclose()
    requests = llm_server.requests
    fmts = [r.wire_format for r in requests]
    assert fmts == ["openai-chat", "openai-chat", "anthropic", "openai-responses"]
    result = json.dumps(table(2), ensure_ascii=False)
    for request in requests[1:]:
        assert problems_of(request) == [], request.wire_format
        assert [t for t, _ in results_sent(request)] == [result]
        assert system_of(request) == [INSTRUCTIONS]


def test_the_json_history_keeps_every_block_a_later_provider_needs() -> None:
    """What each provider's blocks look like in the stored JSON: plain data (lists and
    dicts), and read back as the tuples rafrx keeps, equal to the message saved."""
    message = ChatMessage(
        "assistant",
        "Hi.",
        tool_calls=[ToolCall("toolu_1", "lookup", {"city": "Oslo"})],
        reasoning="Think.",
        provider_data={
            ANTHROPIC_THINKING: ({"type": "thinking", "thinking": "Think.", "signature": "S"},),
            OPENAI_REASONING: ({"type": "reasoning", "id": "rs_1", "summary": []},),
        },
    )
    text_form = json.dumps(message.to_dict(), ensure_ascii=False)
    back = ChatMessage.from_dict(json.loads(text_form))
    assert back == message
    assert isinstance(back.provider_data, dict)
    assert all(isinstance(v, tuple) for v in back.provider_data.values())


# ================================================================ ids and fields a provider refuses

FIXTURES = Path(__file__).parent / "data" / "fixtures"


def search_google(query: str) -> str:
    """Search."""
    return f"results for {query}"


@pytest.mark.asyncio
async def test_vllm_call_ids_are_made_short_enough_for_openai_chat_and_responses(
    tmp_path: Path,
) -> None:
    """vLLM's call ids (``chatcmpl-tool-<32 hex>``: 46 characters, a recorded body) go on
    to OpenAI chat, which refuses an id over 40 characters ("Invalid
    'messages[2].tool_calls[0].id': string too long"), and to the Responses API (64):
    each long id goes as one short stand-in, the same in the call and its result and in
    every request (a provider's prompt cache still matches)."""
    history = JsonLinesHistory(tmp_path / "h.jsonl")
    long_id = "call_" + "x" * 70  # (over the Responses API's 64 too)
    async with LLMServer() as server:
        server.enqueue(
            Replay(FIXTURES / "openai-chat" / "vllm-tool-call.sse"),
            Reply(text="Here is the news."),
            Reply(tool_calls=[ToolCallSpec("search_google", {"query": "more"}, id=long_id)]),
            Reply(text="More news."),
            Reply(text="Sure."),
            Reply(text="Again."),
        )
        async with OpenAIChatClient(server.url, "sk", model="meta/llama-3.1-8b-instruct") as vllm:
            agent = Agent(vllm, tools=[search_google], history=history)
            await asyncio.wait_for(agent.send("News?"), GUARD)
            await asyncio.wait_for(agent.send("More?"), GUARD)
        for _ in range(2):
            async with OpenAIChatClient(server.url, "sk", model="gpt-4o-mini") as openai:
                agent = Agent(openai, tools=[search_google], history=history)
                await asyncio.wait_for(agent.send("And?"), GUARD)
        async with OpenAIResponsesClient(server.url, "sk", model="gpt-5") as responses:
            agent = Agent(responses, tools=[search_google], history=history)
            await asyncio.wait_for(agent.send("Last?"), GUARD)
        chat_1, chat_2, last = server.requests[-3:]
    stored = [json.loads(line) for line in (tmp_path / "h.jsonl").read_text().splitlines()]
    kept = [c["id"] for m in stored for c in m.get("tool_calls") or ()]
    assert len(kept) == 2
    assert all(len(i) > 40 for i in kept)
    for request in (chat_1, chat_2):
        ids = [c["id"] for m in request.messages for c in m.get("tool_calls") or ()]
        answers = [m["tool_call_id"] for m in request.messages if m["role"] == "tool"]
        assert ids == answers
        assert len(set(ids)) == 2
        assert all(len(i) <= 40 for i in ids), ids
        assert problems_of(request) == []
    assert chat_1.messages[:-1] == chat_2.messages[: len(chat_1.messages) - 1]  # (the same)
    items = last.body["input"]
    call_ids = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert call_ids == outputs
    assert len(set(call_ids)) == 2
    assert all(len(i) <= 64 for i in call_ids), call_ids
    assert call_ids[0] == kept[0]  # (46 characters: the Responses API takes it as it is)


def test_reasoning_field_none_sends_no_gemini_extra_content() -> None:
    """``reasoning_field=None`` is for a server that refuses unknown fields (StepFun's):
    a conversation that started on Gemini (a call's ``extra_content`` with its thought
    signature) reaches it without the field, as the SDK's request type has it."""
    step = aggregate(gemini_body(), "openai-chat")
    conversation = [
        ChatMessage.user("Weather in Paris and Oslo?"),
        *step.turn_transcript,
        *(ChatMessage.tool("sunny", c.id) for c in step.tool_calls),
        ChatMessage.user("Thanks"),
    ]
    gemini = OpenAIChatClient("http://127.0.0.1:1", "sk", "gemini-2.5-flash")
    kept = gemini._payload(conversation, [])["messages"]
    assert any("extra_content" in c for m in kept for c in m.get("tool_calls") or ())
    strict = OpenAIChatClient("http://127.0.0.1:1", "sk", "step-1", reasoning_field=None)
    body = json.loads(json.dumps({**strict._payload(conversation, []), "stream": True}))
    assert sdk_problems(body, CHAT_BODY) == []
    assert [c["id"] for m in body["messages"] for c in m.get("tool_calls") or ()] == [
        c.id for c in step.tool_calls
    ]


def test_text_said_before_a_custom_tool_call_goes_back_before_it() -> None:
    """GPT-5 says "I will run it." and then calls a custom (free-form) tool, with no
    reasoning item; or the same turn comes from Chat Completions (``type: "custom"``).
    Sent to the Responses API, the text goes back before the call, as the model wrote
    it (and as with a function call), not between the call and its output."""
    body = turn(
        responses_message("msg_1", "I will run it."),
        custom_call("ctc_1", "call_c", "run_code", "print(1)"),
    )
    step = aggregate(body, "openai-responses")
    client = OpenAIResponsesClient("http://127.0.0.1:1", "sk", "gpt-5")

    def kinds(conversation: Sequence[ChatMessage]) -> list[str]:
        items = client._payload(conversation, [])["input"]
        return [i.get("type", i.get("role")) for i in items]

    conversation = [ChatMessage.user("Run it."), *step.turn_transcript]
    assert kinds([*conversation, ChatMessage.tool("1", "call_c")]) == [
        "user",
        "assistant",
        "custom_tool_call",
        "custom_tool_call_output",
    ]
    from_chat = ChatMessage.from_openai(
        {
            "role": "assistant",
            "content": "I will run it.",
            "tool_calls": [
                {"id": "call_c", "type": "custom", "custom": {"name": "run_code", "input": "1"}}
            ],
        }
    )
    assert kinds([ChatMessage.user("Run it."), from_chat]) == [
        "user",
        "assistant",
        "custom_tool_call",
    ]
