"""Where the newest ``provider_data`` blocks meet the rest of rafrx.

The blocks: Chat custom tool calls (a ``CUSTOM_TOOL_CALL_REF`` under
``OPENAI_REASONING``, arguments ``{"input": text}``), LiteLLM's ``thinking_blocks``
(``THINKING_BLOCKS``), and Anthropic's server-tool blocks kept whole under
``ANTHROPIC_THINKING`` with a ``PAUSE_TURN_REF`` mark on a ``pause_turn`` message.
Each test takes them somewhere else: value semantics, history (in memory and as JSON
text), ``paired``, the agent's pause loop, the recorder and its redaction, the CLI's
``replay`` (a subprocess), the notebook renderers, and the other providers' requests
(checked against the official SDKs' request types). Everything over HTTP runs on
127.0.0.1 against real local servers; nothing is patched.
"""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from aiohttp import web
from reactivex import operators as rxops

from rafrx import Agent, FinishReason, InMemoryHistoryProvider, collect_agent_response, recorder
from rafrx import operators as ops
from rafrx.errors import MaxStepsExceeded
from rafrx.messages import (
    ANTHROPIC_THINKING,
    CUSTOM_TOOL_CALL_REF,
    LOST_RESULT,
    OPENAI_REASONING,
    PAUSE_TURN_REF,
    THINKING_BLOCKS,
    ChatMessage,
    MessageSource,
    from_anthropic,
    is_paused,
    paired,
    to_anthropic,
    to_openai_chat,
)
from rafrx.notebook import live, message_html, response_html, result_html, timeline
from rafrx.response import AgentResponse
from rafrx.sources import from_sse
from rafrx.sources.clients import (
    AnthropicClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.testing import LLMServer, Reply, render
from rafrx.tools import tool
from tests.sources._raw_server import KEY, raw_server
from tests.sources.test_dialect_quirks import ch, sse, tc
from tests.sources.test_provider_shapes import (
    block_delta,
    block_start,
    block_stop,
    ev,
    message_start,
)
from tests.sources.test_provider_shapes_3 import pause_turn_body
from tests.test_sdk_request_types import (
    ANTHROPIC_MESSAGE,
    CHAT_MESSAGE,
    RESPONSES_ITEM,
    body_problems,
    sdk_problems,
    wire,
)

GUARD = 10  # seconds, against hangs only
SECRET = "sk-proj-Zq8xWv3RtY6uIo9PaS2dF5gH"  # a key-shaped string the recorder must hide

# ================================================================ bodies


def aggregate(body: bytes, dialect: str) -> AgentResponse:
    response = from_sse(body, dialect).pipe(ops.convert(), ops.aggregate()).run()
    assert isinstance(response, AgentResponse)
    return response


def custom_call_body(text: str = 'echo "hi" <b>&\n', call_id: str = "call_x1") -> bytes:
    """GPT-5 on Chat Completions calling a custom (free-form) tool ``shell``."""
    half = len(text) // 2
    return sse(
        ch({"role": "assistant", "content": None}),
        tc(
            {
                "index": 0,
                "id": call_id,
                "type": "custom",
                "custom": {"name": "shell", "input": text[:half]},
            }
        ),
        tc({"index": 0, "type": "custom", "custom": {"input": text[half:]}}),
        ch({}, finish="tool_calls"),
        "[DONE]",
    )


SIGNATURE = "ErUBCkYIBxgCIkB3qXlpZ2k0Zm9vYmFyYmF6cXV4"


def litellm_body(thought: str = "The user wants the weather.") -> bytes:
    """A LiteLLM proxy in front of Claude: signed thinking_blocks, then a function call."""

    def thinking(text: str, sig: str | None = None) -> dict[str, Any]:
        block = {"type": "thinking", "thinking": text, "signature": sig}
        return ch({"reasoning_content": text, "thinking_blocks": [block]})

    return sse(
        ch({"role": "assistant", "content": ""}),
        thinking(thought),
        thinking("", SIGNATURE),
        tc(
            {
                "index": 0,
                "id": "toolu_01",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
            }
        ),
        ch({}, finish="tool_calls"),
        "[DONE]",
    )


def web_search_answer_body(title: str = "Paris <script>alert(1)</script>") -> bytes:
    """The turn Anthropic goes on with after a pause: the search's result, then text."""
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://weather.example/paris",
                "title": title,
                "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1",
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


def pause_with_tool_use_body() -> bytes:
    """A paused turn whose message also calls a client tool (``weather``)."""
    return sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Searching."}),
        block_stop(0),
        block_start(
            1, {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}
        ),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"query": "paris"}'}),
        block_stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_w1", "name": "weather", "input": {}}),
        block_delta(2, {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}),
        block_stop(2),
        ev("message_delta", delta={"stop_reason": "pause_turn"}, usage={"output_tokens": 9}),
        ev("message_stop"),
    )


def anthropic_text_body(text: str) -> bytes:
    return sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": text}),
        block_stop(0),
        ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
        ev("message_stop"),
    )


def chat_text_body(text: str) -> bytes:
    return render(Reply(text=text), "openai-chat")


def queue(*bodies: bytes) -> Any:
    """A raw_server handler answering each request with the next body."""
    left = list(bodies)

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=left.pop(0), content_type="text/event-stream")

    return handle


@tool
def weather(city: str) -> str:
    """Forecast for a city.

    Args:
        city: The city.
    """
    return f"{city}: sunny"


@tool
def shell(input: str) -> str:
    """Run a shell command.

    Args:
        input: The command line.
    """
    return f"ran {len(input)} chars"


def paused_message() -> ChatMessage:
    return aggregate(pause_turn_body(), "anthropic").turn_transcript[-1]


def continued_message() -> ChatMessage:
    return aggregate(web_search_answer_body(), "anthropic").turn_transcript[-1]


def custom_call_message() -> ChatMessage:
    return aggregate(custom_call_body(), "openai-chat").turn_transcript[-1]


def litellm_message() -> ChatMessage:
    return aggregate(litellm_body(), "openai-chat").turn_transcript[-1]


def leaks(body: Any) -> list[str]:
    """What of rafrx's own bookkeeping a request body carries (it must carry none)."""
    text = json.dumps(body)
    return [m for m in ("rafrx.", "litellm_thinking_blocks", "openai_reasoning") if m in text]


def all_types(body: Any) -> set[str]:
    """Every ``type`` value anywhere in a JSON value."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("type"), str):
                found.add(value["type"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(body)
    return found


FMTS = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


async def send_with(server: LLMServer, fmt: str, messages: Sequence[ChatMessage]) -> Any:
    """One call of the ``fmt`` client with ``messages``; the body the server received."""
    async with FMTS[fmt](server.url, "sk-test") as client:
        updates = client.stream(list(messages), [weather, shell])
        await asyncio.wait_for(collect_agent_response(updates.pipe(ops.convert())), GUARD)
    return server.requests[-1].json


# ================================================================ the blocks as values


def test_the_new_blocks_are_where_the_docs_say() -> None:
    paused, custom, lite = paused_message(), custom_call_message(), litellm_message()
    assert is_paused(paused)
    assert {"type": PAUSE_TURN_REF} in paused.provider_data[ANTHROPIC_THINKING]
    assert not is_paused(custom)
    assert not is_paused(lite)
    assert custom.provider_data == {
        OPENAI_REASONING: ({"type": CUSTOM_TOOL_CALL_REF, "call_id": "call_x1"},)
    }
    [block] = lite.provider_data[THINKING_BLOCKS]
    assert block["blocks"][0]["signature"] == SIGNATURE


@pytest.mark.parametrize("make", [paused_message, custom_call_message, litellm_message])
def test_messages_with_the_new_blocks_copy_pickle_and_evolve_as_equal_values(make: Any) -> None:
    message = make()
    for clone in (
        copy.copy(message),
        copy.deepcopy(message),
        pickle.loads(pickle.dumps(message)),
        attrs.evolve(message),
        message.with_source(message.source),
    ):
        assert clone == message
        assert is_paused(clone) is is_paused(message)
        assert clone.to_openai() == message.to_openai()
        assert to_anthropic([clone]) == to_anthropic([message])
    with pytest.raises(TypeError, match="unhashable type"):
        hash(message)
    assert attrs.evolve(message, content="other") != message


def test_a_deep_copy_of_a_paused_message_does_not_share_its_server_blocks() -> None:
    message = paused_message()
    clone = copy.deepcopy(message)
    clone.provider_data[ANTHROPIC_THINKING][1]["input"]["query"] = "changed"
    assert message.provider_data[ANTHROPIC_THINKING][1]["input"] == {"query": "paris weather"}


def test_custom_calls_and_thinking_blocks_survive_a_json_history_in_chat_format() -> None:
    messages = [
        custom_call_message(),
        ChatMessage.tool("hi", "call_x1", source=None),
        litellm_message(),
    ]
    stored = json.loads(json.dumps([m.to_openai() for m in messages]))
    loaded = [ChatMessage.from_openai(d) for d in stored]
    assert loaded == messages
    assert to_responses_input(loaded) == to_responses_input(messages)
    assert [m.to_openai() for m in loaded] == [m.to_openai() for m in messages]


def test_a_paused_turn_survives_a_json_history_in_anthropic_format() -> None:
    turn = [ChatMessage.user("Weather in Paris?"), paused_message(), continued_message()]
    system, stored = to_anthropic(turn)
    loaded = from_anthropic(system, json.loads(json.dumps(stored)))
    assert to_anthropic(loaded) == (system, stored)
    kinds = [b["type"] for m in stored if m["role"] == "assistant" for b in m["content"]]
    assert kinds == ["text", "server_tool_use", "web_search_tool_result", "text"]


def test_from_anthropic_does_not_share_server_blocks_with_the_wire_it_read() -> None:
    _, stored = to_anthropic([ChatMessage.user("Q?"), paused_message(), continued_message()])
    loaded = from_anthropic(None, stored)
    server_use = stored[1]["content"][1]
    result = stored[2]["content"][0]
    server_use["input"]["query"] = "edited after loading"
    result["content"][0]["title"] = "edited after loading"
    kept = [b for m in loaded for b in (m.provider_data or {}).get(ANTHROPIC_THINKING, ())]
    assert "edited after loading" not in json.dumps(kept)


def test_in_memory_history_keeps_the_new_blocks_and_marks_only_the_source() -> None:
    messages = [
        ChatMessage.user("Q?", source=MessageSource.EXTERNAL),
        paused_message(),
        continued_message(),
        custom_call_message(),
        ChatMessage.tool("hi", "call_x1"),
        litellm_message(),
    ]
    history = InMemoryHistoryProvider()
    asyncio.run(history.save(messages))
    loaded = asyncio.run(history.load())
    assert [m.with_source(None) for m in loaded] == [m.with_source(None) for m in messages]
    assert is_paused(loaded[1])
    assert all(m.source is MessageSource.CHAT_HISTORY for m in loaded)


def test_paired_keeps_a_paused_message_and_answers_a_custom_call_as_custom() -> None:
    custom = custom_call_message()
    history = [
        ChatMessage.user("Q?"),
        paused_message(),
        ChatMessage.tool("stray", "srvtoolu_01"),  # a result of no call before it: dropped
        continued_message(),
        custom,  # its result was lost
        ChatMessage.user("Well?"),
    ]
    fixed = paired(history)
    assert fixed[1] == history[1]
    assert is_paused(fixed[1])
    assert [m.role.value for m in fixed] == [
        "user",
        "assistant",
        "assistant",
        "assistant",
        "tool",
        "user",
    ]
    assert (fixed[4].tool_call_id, fixed[4].content, fixed[4].is_error) == (
        "call_x1",
        LOST_RESULT,
        True,
    )
    items = to_responses_input(fixed)
    assert {"type": "custom_tool_call_output", "call_id": "call_x1", "output": LOST_RESULT} in items
    assert [c["type"] for c in to_openai_chat(fixed)[3]["tool_calls"]] == ["custom"]


# ================================================================ across providers


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
async def test_an_anthropic_paused_turn_sent_to_openai_fits_its_sdk_type_and_leaks_nothing(
    llm_server: LLMServer, fmt: str
) -> None:
    llm_server.enqueue(Reply(text="ok"))
    conversation = [
        ChatMessage.user("Weather in Paris?"),
        paused_message(),
        continued_message(),
        ChatMessage.user("Thanks"),
    ]
    body = await send_with(llm_server, fmt, conversation)
    assert body_problems(fmt, body) == []
    assert leaks(body) == []
    assert not all_types(body) & {"server_tool_use", "web_search_tool_result", "web_search_result"}
    assert "srvtoolu_01" not in json.dumps(body)
    assert "Let me search for that." in json.dumps(body)


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
async def test_a_chat_custom_call_sent_to_another_api_fits_its_sdk_type(
    llm_server: LLMServer, fmt: str
) -> None:
    llm_server.enqueue(Reply(text="ok"))
    conversation = [
        ChatMessage.user("List files"),
        custom_call_message(),
        ChatMessage.tool("a.txt", "call_x1"),
        ChatMessage.user("Thanks"),
    ]
    body = await send_with(llm_server, fmt, conversation)
    assert body_problems(fmt, body) == []
    assert leaks(body) == []
    if fmt == "anthropic":
        assert "custom" not in all_types(body)
        [use] = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"]
        assert use["input"] == {"input": 'echo "hi" <b>&\n'}
    else:
        types = [i.get("type") for i in body["input"]]
        assert "custom_tool_call" in types
        assert "custom_tool_call_output" in types


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses"])
async def test_litellm_thinking_blocks_do_not_go_to_another_api(
    llm_server: LLMServer, fmt: str
) -> None:
    llm_server.enqueue(Reply(text="ok"))
    conversation = [
        ChatMessage.user("Weather?"),
        litellm_message(),
        ChatMessage.tool("Paris: sunny", "toolu_01"),
    ]
    body = await send_with(llm_server, fmt, conversation)
    assert body_problems(fmt, body) == []
    assert leaks(body) == []
    assert "thinking_blocks" not in json.dumps(body)


@pytest.mark.asyncio
async def test_a_mixed_history_sent_to_chat_keeps_chat_blocks_and_drops_anthropic_ones(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Reply(text="ok"))
    conversation = [
        ChatMessage.user("Q?"),
        paused_message(),
        continued_message(),
        custom_call_message(),
        ChatMessage.tool("a.txt", "call_x1"),
        ChatMessage.user("Thanks"),
    ]
    body = await send_with(llm_server, "openai-chat", conversation)
    assert body_problems("openai-chat", body) == []
    assert leaks(body) == []
    [custom] = [c for m in body["messages"] for c in m.get("tool_calls") or ()]
    assert custom == {
        "id": "call_x1",
        "type": "custom",
        "custom": {"name": "shell", "input": 'echo "hi" <b>&\n'},
    }
    assert "server_tool_use" not in json.dumps(body)


def test_each_new_block_fits_each_sdk_message_type_after_conversion() -> None:
    conversation = [
        ChatMessage.user("Q?"),
        paused_message(),
        continued_message(),
        custom_call_message(),
        ChatMessage.tool("a.txt", "call_x1"),
        litellm_message(),
        ChatMessage.tool("Paris: sunny", "toolu_01"),
    ]
    for message in to_openai_chat(conversation):
        problems = sdk_problems(wire(message), CHAT_MESSAGE)
        # (thinking_blocks: LiteLLM's field, sent on purpose to a chat endpoint)
        assert [
            p for p in problems if "thinking_blocks" not in p and "reasoning_content" not in p
        ] == []
    for message in to_anthropic(conversation)[1]:
        assert sdk_problems(wire(message), ANTHROPIC_MESSAGE) == []
    for item in to_responses_input(conversation):
        assert sdk_problems(wire(item), RESPONSES_ITEM) == []


@pytest.mark.asyncio
async def test_reasoning_field_none_sends_no_thinking_blocks_either() -> None:
    async with (
        raw_server(queue(chat_text_body("ok"))) as (url, seen),
        OpenAIChatClient(url, KEY, "m", reasoning_field=None) as client,
    ):
        conversation = [
            ChatMessage.user("Weather?"),
            litellm_message(),
            ChatMessage.tool("Paris: sunny", "toolu_01"),
        ]
        updates = client.stream(conversation)
        await asyncio.wait_for(collect_agent_response(updates.pipe(ops.convert())), GUARD)
    [assistant] = [m for m in seen[0].body["messages"] if m["role"] == "assistant"]
    assert "reasoning_content" not in assistant
    assert "thinking_blocks" not in assistant


@pytest.mark.asyncio
async def test_thinking_blocks_go_back_to_a_chat_endpoint_by_default() -> None:
    async with (
        raw_server(queue(chat_text_body("ok"))) as (url, seen),
        OpenAIChatClient(url, KEY, "m") as client,
    ):
        conversation = [
            ChatMessage.user("Weather?"),
            litellm_message(),
            ChatMessage.tool("Paris: sunny", "toolu_01"),
        ]
        updates = client.stream(conversation)
        await asyncio.wait_for(collect_agent_response(updates.pipe(ops.convert())), GUARD)
    [assistant] = [m for m in seen[0].body["messages"] if m["role"] == "assistant"]
    assert assistant["thinking_blocks"] == [
        {"type": "thinking", "thinking": "The user wants the weather.", "signature": SIGNATURE}
    ]
    assert assistant["tool_calls"][0]["function"]["name"] == "weather"


# ================================================================ the agent


@pytest.mark.asyncio
async def test_a_paused_turn_is_saved_whole_and_the_next_turn_sends_it_back_unmarked() -> None:
    history = InMemoryHistoryProvider()
    async with (
        raw_server(
            queue(
                pause_turn_body(), web_search_answer_body(), anthropic_text_body("You're welcome.")
            )
        ) as (url, seen),
        AnthropicClient(url, KEY, "claude-x") as client,
    ):
        agent = Agent(client, history=history)
        first = await asyncio.wait_for(agent.send("Weather in Paris?"), GUARD)
        await asyncio.wait_for(agent.send("Thanks"), GUARD)
    assert first.finish_reason is FinishReason.STOP
    assert [m.role.value for m in history.messages] == [
        "user",
        "assistant",
        "assistant",
        "user",
        "assistant",
    ]
    assert is_paused(history.messages[1])
    third = seen[2].body["messages"]
    assert leaks(third) == []
    kinds = [b["type"] for m in third if m["role"] == "assistant" for b in m["content"]]
    assert kinds[:4] == ["text", "server_tool_use", "web_search_tool_result", "text"]
    assert body_problems("anthropic", seen[2].body) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
async def test_a_saved_paused_turn_goes_on_with_an_openai_client(fmt: str) -> None:
    history = InMemoryHistoryProvider()
    async with (
        raw_server(queue(pause_turn_body(), web_search_answer_body())) as (url, _),
        AnthropicClient(url, KEY, "claude-x") as client,
    ):
        await asyncio.wait_for(Agent(client, history=history).send("Weather?"), GUARD)
    async with LLMServer() as server:
        server.enqueue(Reply(text="You're welcome."))
        async with FMTS[fmt](server.url, "sk-test") as client:
            await asyncio.wait_for(Agent(client, history=history).send("Thanks"), GUARD)
        body = server.requests[-1].json
    assert body_problems(fmt, body) == []
    assert leaks(body) == []
    assert not all_types(body) & {"server_tool_use", "web_search_tool_result"}


@pytest.mark.asyncio
async def test_a_paused_message_with_a_client_tool_call_runs_it_and_goes_on() -> None:
    history = InMemoryHistoryProvider()
    async with (
        raw_server(queue(pause_with_tool_use_body(), web_search_answer_body())) as (url, seen),
        AnthropicClient(url, KEY, "claude-x") as client,
    ):
        response = await asyncio.wait_for(
            Agent(client, tools=[weather], history=history).send("Weather?"), GUARD
        )
    assert len(seen) == 2
    assert response.text == "Searching. It is sunny."
    resumed = seen[1].body["messages"]
    assert leaks(resumed) == []
    assert [b["type"] for b in resumed[1]["content"]] == ["text", "server_tool_use", "tool_use"]
    assert resumed[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_w1", "content": "Paris: sunny"}
    ]
    assert [m.role.value for m in history.messages] == ["user", "assistant", "tool", "assistant"]
    assert paired(history.messages) == list(history.messages)


@pytest.mark.asyncio
async def test_pauses_count_as_steps_and_one_more_pause_than_allowed_saves_nothing() -> None:
    history = InMemoryHistoryProvider()
    async with (
        raw_server(queue(pause_turn_body(), pause_turn_body(), web_search_answer_body())) as (
            url,
            seen,
        ),
        AnthropicClient(url, KEY, "claude-x") as client,
    ):
        with pytest.raises(MaxStepsExceeded) as raised:
            await asyncio.wait_for(Agent(client, history=history, max_steps=2).send("Q?"), GUARD)
    assert len(seen) == 2
    assert history.messages == ()
    partial = raised.value.partial
    assert partial is not None
    assert all(is_paused(m) for m in partial.turn_transcript)


@pytest.mark.asyncio
async def test_two_pauses_within_max_steps_end_in_one_saved_turn() -> None:
    history = InMemoryHistoryProvider()
    async with (
        raw_server(queue(pause_turn_body(), pause_turn_body(), web_search_answer_body())) as (
            url,
            seen,
        ),
        AnthropicClient(url, KEY, "claude-x") as client,
    ):
        response = await asyncio.wait_for(
            Agent(client, history=history, max_steps=3).send("Q?"), GUARD
        )
    assert len(seen) == 3
    assert response.finish_reason is FinishReason.STOP
    assert len(seen[2].body["messages"]) == 3  # the user's, then both paused messages
    assert [is_paused(m) for m in history.messages[1:]] == [True, True, False]


@pytest.mark.asyncio
async def test_max_steps_error_of_a_paused_turn_does_not_claim_tool_calls() -> None:
    async with (
        raw_server(queue(pause_turn_body())) as (url, _),
        AnthropicClient(url, KEY, "claude-x") as client,
    ):
        with pytest.raises(MaxStepsExceeded) as raised:
            await asyncio.wait_for(Agent(client, max_steps=1).send("Q?"), GUARD)
    assert raised.value.partial is not None
    assert raised.value.partial.tool_calls == ()
    assert "calling tools" not in str(raised.value)


@pytest.mark.asyncio
async def test_an_agent_answers_a_chat_custom_call_as_a_custom_call() -> None:
    history = InMemoryHistoryProvider()
    async with (
        raw_server(queue(custom_call_body("ls -la"), chat_text_body("Two files."))) as (url, seen),
        OpenAIChatClient(url, KEY, "gpt-5") as client,
    ):
        response = await asyncio.wait_for(
            Agent(client, tools=[shell], history=history).send("List"), GUARD
        )
    assert response.text == "Two files."
    second = seen[1].body
    assert body_problems("openai-chat", second) == []
    assert second["messages"][1]["tool_calls"] == [
        {"id": "call_x1", "type": "custom", "custom": {"name": "shell", "input": "ls -la"}}
    ]
    assert second["messages"][2] == {
        "role": "tool",
        "content": "ran 6 chars",
        "tool_call_id": "call_x1",
    }
    assert custom_call_message().provider_data == history.messages[1].provider_data


# ================================================================ the recorder


def _record(body: bytes, dialect: str, path: Path) -> str:
    recorder.record(from_sse(body, dialect), path).pipe(rxops.to_list()).run()
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("body", "dialect"),
    [
        (pause_turn_body(), "anthropic"),
        (web_search_answer_body(), "anthropic"),
        (custom_call_body(), "openai-chat"),
        (litellm_body(), "openai-chat"),
    ],
    ids=["pause", "server-result", "custom", "litellm"],
)
def test_a_recorded_stream_with_the_new_blocks_replays_to_the_same_response(
    tmp_path: Path, body: bytes, dialect: str
) -> None:
    path = tmp_path / "turn.jsonl"
    _record(body, dialect, path)
    replayed = recorder.replay(path).pipe(ops.convert(), ops.aggregate()).run()
    original = aggregate(body, dialect)
    assert replayed == original
    message = replayed.turn_transcript[-1]
    assert is_paused(message) is is_paused(original.turn_transcript[-1])
    assert to_anthropic([message]) == to_anthropic(original.turn_transcript)
    assert message.to_openai() == original.turn_transcript[-1].to_openai()


def test_secrets_inside_server_blocks_and_thinking_blocks_are_redacted(tmp_path: Path) -> None:
    server = sse(
        message_start(),
        block_start(
            0, {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}
        ),
        block_delta(
            0,
            {"type": "input_json_delta", "partial_json": json.dumps({"query": f"is {SECRET} ok"})},
        ),
        block_stop(0),
        ev("message_delta", delta={"stop_reason": "pause_turn"}, usage={"output_tokens": 5}),
        ev("message_stop"),
    )
    text = _record(server, "anthropic", tmp_path / "server.jsonl")
    text += _record(litellm_body(f"the key is {SECRET}"), "openai-chat", tmp_path / "lite.jsonl")
    assert SECRET not in text
    assert SECRET[3:20] not in text
    replayed = recorder.replay(tmp_path / "server.jsonl").pipe(ops.convert(), ops.aggregate()).run()
    assert is_paused(replayed.turn_transcript[-1])
    [use] = [
        b
        for b in replayed.turn_transcript[-1].provider_data[ANTHROPIC_THINKING]
        if b.get("type") == "server_tool_use"
    ]
    assert use["input"] == {"query": "is [REDACTED] ok"}


def test_a_redacted_text_block_stays_before_the_search_it_came_before(tmp_path: Path) -> None:
    body = sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": f"Your key {SECRET} leaked. Searching."}),
        block_stop(0),
        block_start(
            1, {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}
        ),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"query": "leak"}'}),
        block_stop(1),
        block_start(
            2, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": []}
        ),
        block_stop(2),
        block_start(3, {"type": "text", "text": ""}),
        block_delta(3, {"type": "text_delta", "text": " Rotate it now."}),
        block_stop(3),
        ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 5}),
        ev("message_stop"),
    )
    text = _record(body, "anthropic", tmp_path / "leak.jsonl")
    assert SECRET not in text
    replayed = recorder.replay(tmp_path / "leak.jsonl").pipe(ops.convert(), ops.aggregate()).run()
    assert replayed.text == "Your key [REDACTED] leaked. Searching. Rotate it now."
    [assistant] = to_anthropic(replayed.turn_transcript)[1]
    assert [(b["type"], b.get("text")) for b in assistant["content"]] == [
        ("text", "Your key [REDACTED] leaked. Searching."),
        ("server_tool_use", None),
        ("web_search_tool_result", None),
        ("text", " Rotate it now."),
    ]


def test_a_secret_split_over_a_custom_calls_input_is_redacted(tmp_path: Path) -> None:
    text = _record(custom_call_body(f"export KEY={SECRET}"), "openai-chat", tmp_path / "c.jsonl")
    assert SECRET[3:20] not in text
    replayed = recorder.replay(tmp_path / "c.jsonl").pipe(ops.convert(), ops.aggregate()).run()
    [call] = replayed.tool_calls
    assert call.arguments == {"input": "export KEY=[REDACTED]"}
    assert replayed.turn_transcript[-1].to_openai()["tool_calls"][0]["type"] == "custom"


# ================================================================ the CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rafrx", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )


def test_cli_replay_json_of_a_paused_recording_keeps_the_blocks(tmp_path: Path) -> None:
    path = tmp_path / "pause.jsonl"
    _record(pause_turn_body(), "anthropic", path)
    done = _cli("replay", str(path), "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    blocks = [r["provider_data"] for r in rows if r["type"] == "ReasoningContent"]
    assert {"type": PAUSE_TURN_REF} in blocks
    assert any(b.get("type") == "server_tool_use" for b in blocks)
    assert [r["finish_reason"] for r in rows if r["type"] == "FinishEvent"] == ["other"]


@pytest.mark.parametrize(
    ("name", "body"),
    [("custom.sse", custom_call_body("rm <b>x</b>")), ("result.sse", web_search_answer_body())],
)
def test_cli_replay_of_raw_bodies_with_the_new_blocks(
    tmp_path: Path, name: str, body: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(body)
    done = _cli("replay", str(path), "--plain")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    if name == "custom.sse":
        assert "shell" in done.stdout
        assert "rm <b>x</b>" in done.stdout
    else:
        assert "It is sunny." in done.stdout
        assert "encrypted_content" not in done.stdout


# ================================================================ the notebook


def test_html_of_responses_and_messages_with_the_new_blocks_is_escaped() -> None:
    custom = aggregate(custom_call_body("<script>alert(1)</script>"), "openai-chat")
    server = aggregate(web_search_answer_body(), "anthropic")
    for response in (custom, server, aggregate(pause_turn_body(), "anthropic")):
        html = response_html(response) + "".join(message_html(m) for m in response.turn_transcript)
        assert "<script>" not in html
        assert response._repr_html_() == response_html(response)
    assert "&lt;script&gt;" in message_html(custom.turn_transcript[-1])
    assert "srvtoolu_01" not in response_html(server)  # (kept to send back, not shown)


def test_result_html_of_block_carrying_contents_is_empty_text() -> None:
    results = from_sse(pause_turn_body(), "anthropic").pipe(ops.convert(), rxops.to_list()).run()
    html = "".join(result_html(r) for r in results)
    assert "server_tool_use" not in html
    assert PAUSE_TURN_REF not in html
    assert "Let me search for that." in html


@pytest.mark.asyncio
async def test_live_renders_streams_with_the_new_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    response = await asyncio.wait_for(live(from_sse(web_search_answer_body(), "anthropic")), GUARD)
    assert response.text == " It is sunny."
    custom = await asyncio.wait_for(
        live(from_sse(custom_call_body("<i>x</i>"), "openai-chat")), GUARD
    )
    assert custom.tool_calls[0].arguments == {"input": "<i>x</i>"}
    shown = capsys.readouterr().out
    assert "It is sunny." in shown
    assert "shell" in shown
    assert "web_search_tool_result" not in shown


def test_timeline_of_a_server_block_recording_escapes_and_draws(tmp_path: Path) -> None:
    path = tmp_path / "result.jsonl"
    _record(web_search_answer_body(), "anthropic", path)
    picture = timeline(path, title="<b>search</b>")
    assert "<script>" not in picture.svg
    assert "<b>search</b>" not in picture.svg
    assert picture.svg.endswith("</svg>")
    assert "text" in picture.lanes


def test_timeline_shows_no_reasoning_lane_for_a_turn_without_reasoning(tmp_path: Path) -> None:
    path = tmp_path / "custom.jsonl"
    _record(custom_call_body(), "openai-chat", path)
    picture = timeline(path)
    assert any(lane.startswith("shell") for lane in picture.lanes)
    assert "reasoning" not in picture.lanes
