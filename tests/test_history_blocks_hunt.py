"""Conversation history and cross-provider conversion.

A conversation streamed by any provider (recorded bodies from ``tests/data/fixtures``,
or bodies built to the providers' documented shapes) is run through
``from_sse(...).pipe(convert(), aggregate())`` and then:

1. saved to and loaded from each history provider (rafrx's in-memory one, and a
   JSON-lines file on disk, written here as a user would: every field of the
   message as JSON), and must come back equal, blocks intact, in order, sharing
   nothing mutable with what was saved;
2. sent to the same provider in the next request, every block in its place, in a
   shape the official SDK request types accept (``tests/test_sdk_request_types``);
3. sent to another provider (switching mid-conversation), the foreign blocks
   dropped, the request still valid, no text, call or result lost;
4. repaired by ``paired()`` (a call without its result, a result without its call)
   for every block kind, the kept messages' blocks untouched;
5. and, property-based, random conversations survive a JSON history and the
   Anthropic wire's round trip.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessage

from rafrx import Agent, InMemoryHistoryProvider, collect_agent_response
from rafrx import operators as ops
from rafrx.history import HistoryProvider, is_new
from rafrx.messages import (
    ANTHROPIC_THINKING,
    CUSTOM_TOOL_CALL_REF,
    FUNCTION_CALL_REF,
    LOST_RESULT,
    MCP_APPROVAL_RESPONSE,
    MESSAGE_REF,
    OPENAI_CALL_EXTRA,
    OPENAI_REASONING,
    REASONING_DETAILS,
    TEXT_REF,
    THINKING_BLOCKS,
    TOOL_USE_REF,
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
    answers_approvals,
    custom_call_ids,
    from_anthropic,
    paired,
    to_anthropic,
    to_openai_chat,
)
from rafrx.response import AgentResponse
from rafrx.sources import from_sse
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import LLMServer, Replay, Reply
from tests.sources.test_dialect_quirks import ch, sse, tc
from tests.sources.test_provider_shapes import (
    block_delta,
    block_start,
    block_stop,
    ev,
    message_start,
)
from tests.sources.test_responses_agent_hunt import call, message, reasoning, turn
from tests.test_agent_mcp_approvals import approval_body
from tests.test_new_blocks_hunt import custom_call_body, litellm_body
from tests.test_sdk_request_types import body_problems, wire

GUARD = 10.0  # seconds, against hangs only
FIXTURES = Path(__file__).parent / "data" / "fixtures"
MANIFEST: list[dict[str, Any]] = json.loads((FIXTURES / "MANIFEST.json").read_text())
#: Every recorded body a provider streamed to its end (the error bodies left out).
RECORDED = sorted(
    (entry["path"], entry["format"])
    for entry in MANIFEST
    if entry["format"] != "sse-only" and "error_event" not in entry["tags"]
)
FORMATS = ("openai-chat", "anthropic", "openai-responses")
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
#: Chat fields rafrx sends on purpose that OpenAI's SDK types lack (README: OpenRouter's
#: reasoning_details, LiteLLM's thinking_blocks, Gemini's extra_content on a tool call).
CHAT_EXTENSIONS = ("reasoning_details", "thinking_blocks", "extra_content")
#: rafrx's own bookkeeping, which must never reach a provider.
BOOKKEEPING = ("rafrx.", "openai_reasoning", "anthropic_thinking", "litellm_thinking_blocks")


# ================================================================ helpers


def aggregate(body: bytes, dialect: str) -> AgentResponse:
    response = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    assert isinstance(response, AgentResponse)
    return response


def recorded(path: str, dialect: str) -> AgentResponse:
    return aggregate((FIXTURES / path).read_bytes(), dialect)


def conversation_of(response: AgentResponse, question: str = "Question?") -> list[ChatMessage]:
    """A whole exchange around a streamed turn: the question, the turn, a result for
    each complete call, and the user's next message."""
    out = [ChatMessage.user(question, source=MessageSource.EXTERNAL), *response.turn_transcript]
    out += [
        ChatMessage.tool(f"result of {c.name} #{n}", c.id)
        for n, c in enumerate(response.tool_calls)
        if c.complete
    ]
    out.append(ChatMessage.user("And then?", source=MessageSource.EXTERNAL))
    return out


def request_body(fmt: str, messages: Sequence[ChatMessage], **params: Any) -> dict[str, Any]:
    """The body the ``fmt`` client sends for ``messages``, as the server parses it."""
    client = CLIENTS[fmt]("http://127.0.0.1:1", "sk-test", "m", **params)
    payload = client._payload(list(messages), [])
    payload.update(client.params)
    payload["stream"] = True
    body: dict[str, Any] = wire(client._complete(payload))
    return body


def problems(fmt: str, body: Any) -> list[str]:
    """SDK-type problems of a body, rafrx's documented chat extensions left out."""
    return [
        p
        for p in body_problems(fmt, body)
        if not any(f"has no field '{ext}'" in p for ext in CHAT_EXTENSIONS)
    ]


def leaked(body: Any) -> list[str]:
    text = json.dumps(body)
    return [mark for mark in BOOKKEEPING if mark in text]


def without_source(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    return [m.with_source(None) for m in messages]


def blocks_of(message: ChatMessage, key: str) -> list[Any]:
    return list((message.provider_data or {}).get(key) or ())


def answered(items: list[dict[str, Any]]) -> None:
    """Responses input rules: each output after its call, each reasoning item followed by
    an item that is not one, each approval answer after its request."""
    calls: set[Any] = set()
    requests: set[Any] = set()
    for n, item in enumerate(items):
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            calls.add(item["call_id"])
        elif kind in ("function_call_output", "custom_tool_call_output"):
            assert item["call_id"] in calls, items
        elif kind == "mcp_approval_request" or (
            kind == "item_reference" and str(item["id"]).startswith("mcpr")
        ):
            requests.add(item["id"])
        elif kind == MCP_APPROVAL_RESPONSE:
            assert item["approval_request_id"] in requests, items
        elif kind == "reasoning":
            assert n + 1 < len(items), items
            assert items[n + 1].get("type") != "reasoning", items


def anthropic_pairs(messages: list[dict[str, Any]]) -> None:
    """Anthropic's rule: each tool_use is answered in the very next (user) message."""
    for n, msg in enumerate(messages):
        uses = [b["id"] for b in msg["content"] if b["type"] == "tool_use"]
        if uses:
            after = messages[n + 1]["content"] if n + 1 < len(messages) else []
            results = [b["tool_use_id"] for b in after if b["type"] == "tool_result"]
            assert sorted(results) == sorted(uses), messages


def chat_pairs(messages: list[dict[str, Any]]) -> None:
    """OpenAI chat's rule: each tool call answered by the tool messages right after it."""
    for n, msg in enumerate(messages):
        ids = [c["id"] for c in msg.get("tool_calls") or ()]
        if ids:
            after = [str(m.get("tool_call_id")) for m in messages[n + 1 : n + 1 + len(ids)]]
            assert sorted(after) == sorted(ids), messages


# ---------------------------------------------------------------- a JSON history on disk


class JsonFileHistoryProvider:
    """A :class:`~rafrx.history.HistoryProvider` keeping the conversation in a JSON-lines
    file, one message a line, every field of it (what a user writes for a database)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def load(self) -> list[ChatMessage]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [
            ChatMessage.from_dict(json.loads(line)).with_source(MessageSource.CHAT_HISTORY)
            for line in lines
            if line.strip()
        ]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        with self.path.open("a", encoding="utf-8") as file:
            for m in messages:
                if is_new(m):
                    file.write(json.dumps(m.to_dict(), ensure_ascii=False) + "\n")


class JsonFileHistoryProviderInMemory:
    """The JSON provider's encoding without a file: each message through JSON text."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def load(self) -> list[ChatMessage]:
        return [ChatMessage.from_dict(json.loads(line)) for line in self.lines]

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        self.lines += [json.dumps(m.to_dict(), ensure_ascii=False) for m in messages]


@pytest.fixture(params=["memory", "json-file"])
def history(request: pytest.FixtureRequest, tmp_path: Path) -> HistoryProvider:
    if request.param == "memory":
        return InMemoryHistoryProvider()
    return JsonFileHistoryProvider(tmp_path / "history.jsonl")


def round_trip(provider: HistoryProvider, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    asyncio.run(provider.save(list(messages)))
    return list(asyncio.run(provider.load()))


# ---------------------------------------------------------------- bodies built here


def anthropic_interleaved_body(call_id: str = "toolu_01") -> bytes:
    """Claude with interleaved thinking and a server tool: thinking, text, a web search
    and its result, redacted thinking, text, then a client tool_use."""
    result = {
        "type": "web_search_result",
        "url": "https://rome.example",
        "title": "Rome",
        "encrypted_content": "EC1",
        "page_age": None,
    }
    return sse(
        message_start(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Search first."}),
        block_delta(0, {"type": "signature_delta", "signature": "SIG-ONE"}),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        block_delta(1, {"type": "text_delta", "text": "Searching… 😀 "}),
        block_stop(1),
        block_start(
            2, {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}
        ),
        block_delta(2, {"type": "input_json_delta", "partial_json": '{"query": "rome"}'}),
        block_stop(2),
        block_start(
            3,
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [result]},
        ),
        block_stop(3),
        block_start(4, {"type": "redacted_thinking", "data": "REDACTED-DATA"}),
        block_stop(4),
        block_start(5, {"type": "text", "text": ""}),
        block_delta(5, {"type": "text_delta", "text": "Now the weather."}),
        block_stop(5),
        block_start(6, {"type": "tool_use", "id": call_id, "name": "weather", "input": {}}),
        block_delta(6, {"type": "input_json_delta", "partial_json": '{"location": "Rome"}'}),
        block_stop(6),
        ev(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 9},
        ),
        ev("message_stop"),
    )


INTERLEAVED_KINDS = [
    "thinking",
    "text",
    "server_tool_use",
    "web_search_tool_result",
    "redacted_thinking",
    "text",
    "tool_use",
]


def responses_interleaved_body() -> bytes:
    """A Responses turn whose output interleaves messages, reasoning items and calls."""
    return turn(
        message("msg_0", "Let me look."),
        reasoning("rs_1", "Which city?", encrypted="ENC1"),
        call("fc_1", "call_1", "weather", {"location": "Oslo"}),
        reasoning("rs_2", "And the other.", encrypted="ENC2"),
        call("fc_2", "call_2", "weather", {"location": "Rome"}),
    )


def gemini_body() -> bytes:
    """Gemini on its OpenAI-compatible endpoint: two parallel calls, only the second
    signed (``extra_content.google.thought_signature``)."""
    return sse(
        ch({"role": "assistant"}),
        tc(
            {
                "index": 0,
                "id": "function-call-1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"location": "Paris"}'},
            }
        ),
        tc(
            {
                "index": 1,
                "id": "function-call-2",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"location": "Oslo"}'},
                "extra_content": {"google": {"thought_signature": "U0lHLVRXTw=="}},
            }
        ),
        ch({}, finish="tool_calls"),
        "[DONE]",
    )


# ================================================================ 1. history providers


@pytest.mark.parametrize(("path", "dialect"), RECORDED)
def test_every_recorded_turn_survives_each_history_provider(
    history: HistoryProvider, path: str, dialect: str
) -> None:
    """Saved then loaded: equal messages (marked CHAT_HISTORY only), in order, blocks
    intact, and the same request body for every provider."""
    conversation = conversation_of(recorded(path, dialect))
    loaded = round_trip(history, conversation)
    assert all(m.source is MessageSource.CHAT_HISTORY for m in loaded)
    assert without_source(loaded) == without_source(conversation)
    for fmt in FORMATS:
        assert request_body(fmt, loaded) == request_body(fmt, conversation), fmt


def test_histories_keep_the_order_of_many_saves_of_mixed_providers(
    history: HistoryProvider,
) -> None:
    """Turns of three providers saved one after another, each save with the loaded
    history in front (as an agent does): nothing duplicated, nothing reordered."""
    turns = [
        conversation_of(recorded("anthropic/anthropic-thinking-tool-use.sse", "anthropic"), "A?"),
        conversation_of(aggregate(responses_interleaved_body(), "openai-responses"), "B?"),
        conversation_of(aggregate(gemini_body(), "openai-chat"), "C?"),
        conversation_of(aggregate(anthropic_interleaved_body(), "anthropic"), "D?"),
    ]
    everything: list[ChatMessage] = []
    for t in turns:
        loaded = list(asyncio.run(history.load()))
        asyncio.run(history.save([*loaded, *t]))
        everything += t
    final = list(asyncio.run(history.load()))
    assert without_source(final) == without_source(everything)


def test_what_is_loaded_from_memory_shares_nothing_mutable_with_the_history() -> None:
    history = InMemoryHistoryProvider()
    [step] = aggregate(anthropic_interleaved_body(), "anthropic").turn_transcript
    asyncio.run(history.save([ChatMessage.user("Rome?"), step]))
    before = copy.deepcopy(without_source(asyncio.run(history.load())))
    first = list(asyncio.run(history.load()))
    blocks_of(first[1], ANTHROPIC_THINKING)[0]["signature"] = "edited by the caller"
    assert first[1].tool_calls is not None
    first[1].tool_calls[0].arguments["location"] = "edited by the caller"
    assert without_source(asyncio.run(history.load())) == before


def test_from_anthropic_shares_no_tool_input_with_the_wire_it_read() -> None:
    [step] = aggregate(anthropic_interleaved_body(), "anthropic").turn_transcript
    system, stored = to_anthropic([ChatMessage.user("Rome?"), step])
    loaded = from_anthropic(system, stored)
    tool_use = next(b for b in stored[1]["content"] if b["type"] == "tool_use")
    tool_use["input"]["location"] = "edited after loading"
    assert loaded[1].tool_calls == step.tool_calls


def test_from_openai_shares_no_object_arguments_with_the_dict_it_read() -> None:
    data: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": {"location": "Oslo"}},
            }
        ],
    }
    message = ChatMessage.from_openai(data)
    data["tool_calls"][0]["function"]["arguments"]["location"] = "edited after loading"
    assert message.tool_calls == (ToolCall("call_1", "weather", {"location": "Oslo"}),)


def test_a_json_file_history_holds_nothing_but_json_and_no_bookkeeping_leaks_out(
    tmp_path: Path,
) -> None:
    """What rafrx puts in messages is plain JSON (the file reads back strictly), and its
    own marks (refs) stay in the file: no request carries them."""
    provider = JsonFileHistoryProvider(tmp_path / "h.jsonl")
    conversation: list[ChatMessage] = []
    for path, dialect in RECORDED:
        conversation += conversation_of(recorded(path, dialect), path)
    asyncio.run(provider.save(conversation))
    for line in provider.path.read_text(encoding="utf-8").splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    loaded = asyncio.run(provider.load())
    for fmt in FORMATS:
        body = request_body(fmt, loaded)
        assert leaked(body) == [], fmt


# ================================================================ 2. the same provider again


def test_anthropic_blocks_go_back_in_their_stream_order_after_a_json_history(
    history: HistoryProvider,
) -> None:
    """Thinking, text, server-tool blocks, redacted thinking, text, tool_use: the saved
    and loaded message goes back to Anthropic exactly as it streamed."""
    response = aggregate(anthropic_interleaved_body(), "anthropic")
    loaded = round_trip(history, conversation_of(response, "Rome?"))
    body = request_body("anthropic", loaded)
    assert problems("anthropic", body) == []
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == INTERLEAVED_KINDS
    assert assistant[0] == {"type": "thinking", "thinking": "Search first.", "signature": "SIG-ONE"}
    assert assistant[4] == {"type": "redacted_thinking", "data": "REDACTED-DATA"}
    assert [b["text"] for b in assistant if b["type"] == "text"] == [
        "Searching… 😀 ",
        "Now the weather.",
    ]
    assert assistant[2]["input"] == {"query": "rome"}
    anthropic_pairs(body["messages"])
    assert leaked(body) == []


def test_responses_items_go_back_paired_by_id_in_output_order_after_a_json_history(
    history: HistoryProvider,
) -> None:
    response = aggregate(responses_interleaved_body(), "openai-responses")
    loaded = round_trip(history, conversation_of(response, "Weather?"))
    for store in (True, False):
        body = request_body("openai-responses", loaded, store=store)
        assert problems("openai-responses", body) == [], store
        items = body["input"]
        answered(items)
        shape = [(i.get("type") or i.get("role"), i.get("id")) for i in items]
        assert shape[1:6] == [
            ("message", "msg_0"),
            ("reasoning", "rs_1"),
            ("function_call", "fc_1"),
            ("reasoning", "rs_2"),
            ("function_call", "fc_2"),
        ], store
        assert [i.get("encrypted_content") for i in items if i.get("type") == "reasoning"] == [
            "ENC1",
            "ENC2",
        ]


def test_a_responses_refusal_after_reasoning_goes_back_as_a_refusal_after_history(
    history: HistoryProvider,
) -> None:
    body_bytes = turn(
        reasoning("rs_1", "Unsafe.", encrypted="ENC"),
        message("msg_1", "I can't help with that.", refusal=True),
    )
    loaded = round_trip(history, conversation_of(aggregate(body_bytes, "openai-responses")))
    items = request_body("openai-responses", loaded)["input"]
    sent = next(i for i in items if i.get("id") == "msg_1")
    assert sent["content"] == [{"type": "refusal", "refusal": "I can't help with that."}]


def test_store_off_keeps_the_text_of_a_refusal_after_unresolvable_reasoning() -> None:
    response = aggregate(
        turn(
            reasoning("rs_1", "Unsafe.", encrypted=None),
            message("msg_1", "I can't help with that.", refusal=True),
        ),
        "openai-responses",
    )
    body = request_body("openai-responses", conversation_of(response), store=False)
    assert problems("openai-responses", body) == []
    assert "I can't help with that." in json.dumps(body["input"])


@pytest.mark.asyncio
@pytest.mark.parametrize("store", [True, False])
async def test_mcp_approval_request_and_answer_survive_a_json_history_in_order(
    tmp_path: Path, store: bool
) -> None:
    response = await asyncio.wait_for(
        collect_agent_response(
            from_sse(approval_body(), "openai-responses").pipe(
                ops.convert(), ops.execute_tools([], approver=lambda request: True)
            )
        ),
        GUARD,
    )
    provider = JsonFileHistoryProvider(tmp_path / "h.jsonl")
    await provider.save([ChatMessage.user("Roll a die.", source=None), *response.turn_transcript])
    loaded = await provider.load()
    assert answers_approvals(loaded[-1])
    body = request_body("openai-responses", loaded, store=store)
    assert problems("openai-responses", body) == []
    items = body["input"]
    answered(items)
    kinds = [i.get("type") or i.get("role") for i in items]
    request = "mcp_approval_request" if not store else "item_reference"
    assert kinds == ["user", request, MCP_APPROVAL_RESPONSE]
    assert items[2]["approve"] is True


def test_gemini_signature_stays_on_its_own_call_after_a_json_history(
    history: HistoryProvider,
) -> None:
    loaded = round_trip(history, conversation_of(aggregate(gemini_body(), "openai-chat")))
    sent = request_body("openai-chat", loaded)["messages"]
    calls = sent[1]["tool_calls"]
    assert [c["id"] for c in calls] == ["function-call-1", "function-call-2"]
    assert [c.get("extra_content") for c in calls] == [
        None,
        {"google": {"thought_signature": "U0lHLVRXTw=="}},
    ]
    chat_pairs(sent)


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ("openai-chat/openrouter-gemini-parallel-tools.sse", "reasoning_details"),
        ("openai-chat/openrouter-anthropic-thinking-tool.sse", "reasoning_details"),
        ("litellm", "thinking_blocks"),
        ("custom", "tool_calls"),
    ],
)
def test_chat_blocks_go_back_to_chat_as_they_came_after_a_json_history(
    history: HistoryProvider, source: str, field: str
) -> None:
    if source == "litellm":
        response = aggregate(litellm_body(), "openai-chat")
    elif source == "custom":
        response = aggregate(custom_call_body(), "openai-chat")
    else:
        response = recorded(source, "openai-chat")
    conversation = conversation_of(response)
    loaded = round_trip(history, conversation)
    before = request_body("openai-chat", conversation)["messages"]
    after = request_body("openai-chat", loaded)["messages"]
    assert after == before
    assert after[1].get(field), after[1]
    assert problems("openai-chat", {"model": "m", "messages": after, "stream": True}) == []
    chat_pairs(after)


# ================================================================ 3. another provider


@pytest.mark.parametrize(("path", "dialect"), RECORDED)
@pytest.mark.parametrize("target", FORMATS)
def test_a_recorded_turn_goes_to_any_provider_valid_and_whole(
    path: str, dialect: str, target: str
) -> None:
    """Each recorded turn, saved as JSON, sent to each provider: the body fits the SDK
    type, no bookkeeping leaks, every call and result is there, and the text too."""
    response = recorded(path, dialect)
    conversation = round_trip(JsonFileHistoryProviderInMemory(), conversation_of(response))
    body = request_body(target, conversation)
    assert problems(target, body) == []
    assert leaked(body) == []
    dumped = json.dumps(body, ensure_ascii=False)
    for piece in response.text.split():
        assert json.dumps(piece, ensure_ascii=False)[1:-1] in dumped
    complete = [c for c in response.tool_calls if c.complete]
    for n, c in enumerate(complete):
        assert f"result of {c.name} #{n}" in dumped
    if target == "anthropic":
        anthropic_pairs(body["messages"])
        uses = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"]
        assert [(b["name"], b["input"]) for b in uses] == [(c.name, c.arguments) for c in complete]
    elif target == "openai-chat":
        chat_pairs(body["messages"])
    else:
        answered(body["input"])
        sent = [i for i in body["input"] if i.get("type") == "function_call"]
        assert [(i["name"], json.loads(i["arguments"])) for i in sent] == [
            (c.name, c.arguments) for c in complete
        ]


@pytest.mark.parametrize("target", ["openai-chat", "openai-responses"])
def test_anthropic_interleaved_history_switched_to_openai_and_back(target: str) -> None:
    """An Anthropic tool turn, then a turn on OpenAI (its own call and result), then back
    to Anthropic: OpenAI gets no Anthropic block, and Anthropic gets its blocks back in
    place with the OpenAI turn's call as a tool_use answered right after it."""
    first = conversation_of(aggregate(anthropic_interleaved_body(), "anthropic"), "Rome?")
    to_openai = request_body(target, first)
    assert problems(target, to_openai) == []
    assert "SIG-ONE" not in json.dumps(to_openai)
    assert "REDACTED-DATA" not in json.dumps(to_openai)
    assert "EC1" not in json.dumps(to_openai)
    if target == "openai-chat":
        second = aggregate(gemini_body(), "openai-chat")
    else:
        second = aggregate(responses_interleaved_body(), "openai-responses")
    conversation = [*first[:-1], *conversation_of(second, "And Oslo?")]
    body = request_body("anthropic", conversation)
    assert problems("anthropic", body) == []
    messages = body["messages"]
    assert [b["type"] for b in messages[1]["content"]] == INTERLEAVED_KINDS
    anthropic_pairs(messages)
    uses = [b["name"] for m in messages for b in m["content"] if b["type"] == "tool_use"]
    assert uses == ["weather"] * (1 + len(second.tool_calls))
    assert leaked(body) == []
    dumped = json.dumps(messages, ensure_ascii=False)
    assert second.text in dumped
    assert "Now the weather." in dumped
    assert dumped.count("result of weather") == 1 + len(second.tool_calls)


def test_responses_history_switched_to_anthropic_and_chat_keeps_texts_calls_and_results() -> None:
    response = aggregate(responses_interleaved_body(), "openai-responses")
    conversation = conversation_of(response)
    for target in ("anthropic", "openai-chat"):
        body = request_body(target, conversation)
        assert problems(target, body) == [], target
        dumped = json.dumps(body, ensure_ascii=False)
        assert "ENC1" not in dumped
        assert "rs_1" not in dumped
        assert "Let me look." in dumped
        assert dumped.count("result of weather") == 2


def test_mcp_approval_blocks_stay_out_of_anthropic_and_chat() -> None:
    answered_turn = ChatMessage(
        MessageRole.ASSISTANT,
        "Rolling.",
        provider_data={
            OPENAI_REASONING: (
                {
                    "type": "mcp_approval_request",
                    "id": "mcpr_01",
                    "server_label": "dice",
                    "name": "roll",
                    "arguments": "{}",
                },
                {"type": MCP_APPROVAL_RESPONSE, "approval_request_id": "mcpr_01", "approve": True},
            )
        },
    )
    conversation = [ChatMessage.user("Roll."), answered_turn, ChatMessage.user("Again?")]
    for target in ("anthropic", "openai-chat"):
        body = request_body(target, conversation)
        assert problems(target, body) == [], target
        dumped = json.dumps(body)
        assert "mcpr_01" not in dumped
        assert "Rolling." in dumped


# ================================================================ 4. paired()


def _assistant(kind: str, calls: list[ToolCall], text: str = "Calling.") -> ChatMessage:
    """An assistant message with two calls and the blocks of one provider's kind."""
    data: dict[str, tuple[Any, ...]] = {}
    if kind == "anthropic":
        data[ANTHROPIC_THINKING] = (
            {"type": "thinking", "thinking": "Hm.", "signature": "SIG"},
            {"type": TEXT_REF, "chars": len(text)},
            {"type": "redacted_thinking", "data": "RD"},
            *({"type": TOOL_USE_REF, "id": c.id} for c in calls),
        )
    elif kind == "responses":
        data[OPENAI_REASONING] = (
            {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "E"},
            {"type": MESSAGE_REF, "id": "msg_9", "text": text},
            *({"type": FUNCTION_CALL_REF, "id": f"fc_{c.id}", "call_id": c.id} for c in calls),
        )
    elif kind == "custom":
        data[OPENAI_REASONING] = tuple(
            {"type": CUSTOM_TOOL_CALL_REF, "call_id": c.id} for c in calls
        )
        calls = [attrs.evolve(c, arguments={"input": "ls -l"}) for c in calls]
    elif kind == "gemini":
        data[OPENAI_CALL_EXTRA] = tuple(
            {"type": "tool_call_extra", "call_id": c.id, "extra_content": {"google": {"n": i}}}
            for i, c in enumerate(calls)
        )
    elif kind == "openrouter":
        detail = {"type": "reasoning.encrypted", "data": "D", "format": "x", "index": 0}
        data[REASONING_DETAILS] = ({"type": REASONING_DETAILS, "details": [detail]},)
    elif kind == "litellm":
        block = {"type": "thinking", "thinking": "Hm.", "signature": "S"}
        data[THINKING_BLOCKS] = ({"type": THINKING_BLOCKS, "blocks": [block]},)
    elif kind == "mcp":
        data[OPENAI_REASONING] = (
            {
                "type": "mcp_approval_request",
                "id": "mcpr_1",
                "server_label": "d",
                "name": "r",
                "arguments": "{}",
            },
            {"type": MCP_APPROVAL_RESPONSE, "approval_request_id": "mcpr_1", "approve": True},
        )
    return ChatMessage(MessageRole.ASSISTANT, text, tool_calls=calls, provider_data=data or None)


BLOCK_KINDS = [
    "plain",
    "anthropic",
    "responses",
    "custom",
    "gemini",
    "openrouter",
    "litellm",
    "mcp",
]


def _sent_everywhere(messages: list[ChatMessage]) -> None:
    for fmt in FORMATS:
        body = request_body(fmt, messages)
        assert problems(fmt, body) == [], fmt
    anthropic_pairs(request_body("anthropic", messages)["messages"])
    chat_pairs(request_body("openai-chat", messages)["messages"])
    answered(request_body("openai-responses", messages)["input"])


@pytest.mark.parametrize("kind", BLOCK_KINDS)
def test_paired_answers_a_lost_result_and_keeps_the_blocks(kind: str) -> None:
    calls = [ToolCall("c_1", "weather", {"location": "Oslo"}), ToolCall("c_2", "now", {})]
    step = _assistant(kind, calls)
    assert step.tool_calls is not None
    history = [
        ChatMessage.user("Q?"),
        step,
        ChatMessage.tool("sunny", "c_2"),  # c_1's result lost
        ChatMessage.user("Well?"),
    ]
    fixed = paired(history)
    assert fixed[1] == step  # every block of the kept message, as it was
    assert [(m.tool_call_id, m.content, m.is_error) for m in fixed[2:4]] == [
        ("c_1", LOST_RESULT, True),
        ("c_2", "sunny", False),
    ]
    assert fixed[4] == history[3]
    if kind == "custom":
        assert custom_call_ids(fixed[1]) == {"c_1", "c_2"}
        kinds = [i.get("type") for i in request_body("openai-responses", fixed)["input"]]
        assert kinds.count("custom_tool_call_output") == 2
    _sent_everywhere(fixed)


@pytest.mark.parametrize("kind", BLOCK_KINDS)
def test_paired_drops_results_without_their_call_and_keeps_the_blocks(kind: str) -> None:
    calls = [ToolCall("c_1", "weather", {"location": "Oslo"}), ToolCall("c_2", "now", {})]
    step = _assistant(kind, calls)
    history = [
        ChatMessage.tool("orphan", "c_0"),
        ChatMessage.user("Q?"),
        step,
        ChatMessage.tool("12:00", "c_2"),
        ChatMessage.tool("stray", "c_9"),
        ChatMessage.tool("sunny", "c_1"),
        ChatMessage.tool("sunny again", "c_1"),
        ChatMessage.assistant("Done."),
    ]
    fixed = paired(history)
    assert [m.content for m in fixed] == ["Q?", "Calling.", "sunny", "12:00", "Done."]
    assert fixed[1] == step
    _sent_everywhere(fixed)


@pytest.mark.parametrize(("path", "dialect"), RECORDED)
def test_paired_leaves_a_well_formed_recorded_conversation_as_it_is(
    path: str, dialect: str
) -> None:
    conversation = conversation_of(recorded(path, dialect))
    assert paired(conversation) == conversation


# ================================================================ refusals in the chat format


def test_from_openai_keeps_a_refusal_as_the_message_text() -> None:
    said = "I can't help with that."
    dumped = ChatCompletionMessage(role="assistant", content=None, refusal=said).model_dump()
    as_parts = {"role": "assistant", "content": [{"type": "refusal", "refusal": said}]}
    chunks = sse(ch({"role": "assistant", "refusal": said}), ch({}, finish="stop"), "[DONE]")
    streamed = aggregate(chunks, "openai-chat")
    assert streamed.text == said
    assert ChatMessage.from_openai(dumped).content == said
    assert ChatMessage.from_openai(as_parts).content == said


# ================================================================ 5. properties


_TEXT = st.sampled_from(["", " ", "Hi.", "Let me check.", "é😀 \n", "a\tb", "Done!", '"q"\\'])
_ARGS = st.dictionaries(
    st.sampled_from(["city", "n", "ok", "é"]),
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | _TEXT,
    max_size=3,
)


@st.composite
def assistant_steps(draw: st.DrawFn, first_id: int) -> ChatMessage:
    """An assistant message with random calls and one provider's random blocks."""
    calls = [
        ToolCall(
            draw(st.sampled_from([f"call_{first_id + n}", f"toolu_{first_id + n}"])),
            draw(st.sampled_from(["weather", "now", "shell"])),
            draw(_ARGS),
        )
        for n in range(draw(st.integers(0, 2)))
    ]
    text = draw(_TEXT)
    kind = draw(st.sampled_from([*BLOCK_KINDS, "server", "none"]))
    step = _assistant(kind, calls, text) if kind not in ("server", "none") else None
    if kind == "server":
        blocks = (
            {
                "type": "server_tool_use",
                "id": f"srvtoolu_{first_id}",
                "name": "web_search",
                "input": {"query": "q"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": f"srvtoolu_{first_id}",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://x.example",
                        "title": "X",
                        "encrypted_content": "E",
                        "page_age": None,
                    }
                ],
            },
            {"type": TEXT_REF, "chars": len(text)},
        )
        step = ChatMessage(
            MessageRole.ASSISTANT,
            text,
            tool_calls=calls or None,
            provider_data={ANTHROPIC_THINKING: blocks},
        )
    if step is None:
        step = ChatMessage(MessageRole.ASSISTANT, text, tool_calls=calls or None)
    reasoning_text = draw(st.none() | _TEXT)
    return attrs.evolve(step, tool_calls=step.tool_calls or None, reasoning=reasoning_text)


@st.composite
def conversations(draw: st.DrawFn) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    if draw(st.booleans()):
        out.append(ChatMessage.system("Be brief."))
    counter = 0
    for _ in range(draw(st.integers(1, 3))):
        out.append(ChatMessage.user(draw(_TEXT.filter(str.strip))))
        for _ in range(draw(st.integers(1, 2))):
            step = draw(assistant_steps(counter))
            counter += 3
            out.append(step)
            out += [
                ChatMessage.tool(draw(_TEXT), c.id, is_error=draw(st.booleans()))
                for c in step.tool_calls or ()
            ]
    return out


def _said(messages: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    """What a conversation says, as a provider reads it: each non-blank text by role."""
    return [
        (m.role.value, "".join(m.content.split()))
        for m in messages
        if m.role is not MessageRole.SYSTEM and m.role is not MessageRole.TOOL and m.content.strip()
    ]


def _calls(messages: Sequence[ChatMessage]) -> list[tuple[str, Any]]:
    return [(c.name, c.arguments) for m in messages for c in m.tool_calls or ()]


HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@HYPOTHESIS
@given(conversations())
def test_random_conversations_survive_a_json_file_history(
    tmp_path_factory: pytest.TempPathFactory, conversation: list[ChatMessage]
) -> None:
    provider = JsonFileHistoryProvider(tmp_path_factory.mktemp("h") / "history.jsonl")
    loaded = round_trip(provider, conversation)
    assert without_source(loaded) == without_source(conversation)
    for fmt in FORMATS:
        body = request_body(fmt, loaded)
        assert body == request_body(fmt, conversation), fmt
        assert problems(fmt, body) == [], fmt
        assert leaked(body) == [], fmt


@HYPOTHESIS
@given(conversations())
def test_random_conversations_survive_the_anthropic_wire_and_back(
    conversation: list[ChatMessage],
) -> None:
    system, stored = to_anthropic(conversation)
    loaded = from_anthropic(system, json.loads(json.dumps(stored)))
    assert to_anthropic(loaded) == (system, stored)
    assert _said(loaded) == _said(conversation)
    assert _calls(loaded) == _calls(conversation)
    results = [(m.content, m.is_error) for m in loaded if m.role is MessageRole.TOOL]
    assert results == [
        (m.content if m.content.strip() or not m.is_error else "Error", m.is_error)
        for m in conversation
        if m.role is MessageRole.TOOL
    ]
    kept = [blocks_of(m, ANTHROPIC_THINKING) for m in conversation if m.role.value == "assistant"]
    assert [b for m in loaded for b in _sent_kinds(blocks_of(m, ANTHROPIC_THINKING))] == [
        b for blocks in kept for b in _sent_kinds(blocks)
    ]


def _sent_kinds(blocks: list[Any]) -> Iterator[Any]:
    """A message's kept Anthropic blocks but the refs (rebuilt from the wire's order)."""
    for b in blocks:
        if b.get("type") not in (TEXT_REF, TOOL_USE_REF):
            yield b


@HYPOTHESIS
@given(conversations())
def test_random_conversations_in_chat_json_keep_their_text_and_calls(
    conversation: list[ChatMessage],
) -> None:
    stored = json.loads(json.dumps(to_openai_chat(conversation)))
    loaded = [ChatMessage.from_openai(m) for m in stored]
    assert _said(loaded) == _said(conversation)
    assert _calls(loaded) == _calls(conversation)
    assert to_openai_chat(loaded) == stored
    assert [custom_call_ids(m) for m in loaded] == [custom_call_ids(m) for m in conversation]


# ================================================================ an agent, switching providers


def weather(location: str) -> str:
    """The weather somewhere."""
    return f"40 degrees in {location}"


@pytest.mark.asyncio
async def test_an_agent_with_a_json_file_history_switches_providers_and_back(
    llm_server: LLMServer, tmp_path: Path
) -> None:
    """Recorded turns of Anthropic, then the Responses API, then OpenRouter (chat), then
    Anthropic again, one agent and one JSON history: every request fits its SDK type,
    carries every earlier call, result and answer, and no other provider's blocks."""
    provider = JsonFileHistoryProvider(tmp_path / "history.jsonl")
    script = [
        (AnthropicClient, "anthropic/anthropic-thinking-tool-use.sse", "Florence is hot."),
        (OpenAIResponsesClient, "openai-responses/responses-reasoning-summary-tool.sse", "Hot."),
        (OpenAIChatClient, "openai-chat/openrouter-anthropic-thinking-tool.sse", "Still hot."),
    ]
    answers: list[str] = []
    for cls, fixture, answer in script:
        llm_server.enqueue(Replay(FIXTURES / fixture), Reply(text=answer))
        async with cls(llm_server.url, "sk-test") as client:
            agent = Agent(client, tools=[weather], history=provider)
            response = await asyncio.wait_for(agent.send("Weather in Florence?"), GUARD)
        assert response.text == answer
        answers.append(answer)
    llm_server.enqueue(Reply(text="Bye."))
    async with AnthropicClient(llm_server.url, "sk-test") as client:
        await asyncio.wait_for(Agent(client, history=provider).send("Thanks!"), GUARD)
    fmts = ["anthropic"] * 2 + ["openai-responses"] * 2 + ["openai-chat"] * 2 + ["anthropic"]
    assert len(llm_server.requests) == len(fmts)
    for n, (fmt, request) in enumerate(zip(fmts, llm_server.requests, strict=True)):
        assert problems(fmt, request.json) == [], (n, fmt)
        assert leaked(request.json) == [], (n, fmt)
    last = llm_server.requests[-1].json["messages"]
    anthropic_pairs(last)
    dumped = json.dumps(last)
    for answer in answers:
        assert answer in dumped
    assert dumped.count("40 degrees in Florence, Italy") == 3
    first_step = last[1]["content"]
    assert first_step[0]["type"] == "thinking"
    assert first_step[0]["signature"].startswith("EtYDCkYICxgCKkAVHEWRYo6RgSMs4ZZDX4gW16kdfp2")
    assert sum(b["type"] == "thinking" for m in last for b in m["content"]) == 1
    responses_request = llm_server.requests[2].json
    assert "EtYDCkYICxgCKkAVHEWRYo6RgSMs" not in json.dumps(responses_request)
    chat_request = llm_server.requests[4].json
    assert "encrypted_content" not in json.dumps(chat_request)
    chat_pairs(chat_request["messages"])
    roles = [m.role.value for m in await provider.load()]
    assert roles == ["user", "assistant", "tool", "assistant"] * 3 + ["user", "assistant"]
