"""An Anthropic turn the server pauses (``stop_reason: "pause_turn"``) goes on.

Anthropic pauses a long turn of its own tools (web search, web fetch) and asks the
client to send the response back as it is, with no new user message, for Claude to
go on (anthropic-sdk-python's ``StopReason``: "we paused a long-running turn. You may
provide the response back as-is"). The agent does so within the turn, over real
HTTP: the second request ends with the paused message, its ``server_tool_use`` block
included and rafrx's own mark left out.
"""

from __future__ import annotations

import pytest
from aiohttp import web

from rafrx import Agent, FinishReason
from rafrx.errors import MaxStepsExceeded
from rafrx.sources.clients import AnthropicClient
from tests.sources._raw_server import KEY, raw_server
from tests.sources.test_dialect_quirks import sse
from tests.sources.test_provider_shapes import (
    block_delta,
    block_start,
    block_stop,
    ev,
    message_start,
)
from tests.sources.test_provider_shapes_3 import pause_turn_body


def answer_body() -> bytes:
    return sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": " It is sunny."}),
        block_stop(0),
        ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 5}),
        ev("message_stop"),
    )


@pytest.mark.asyncio
async def test_a_paused_turn_is_sent_back_as_it_is_and_goes_on() -> None:
    bodies = [pause_turn_body(), answer_body()]

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=bodies.pop(0), content_type="text/event-stream")

    async with raw_server(handle) as (url, seen), AnthropicClient(url, KEY, "claude-x") as client:
        response = await Agent(client).send("Weather in Paris?")
    assert len(seen) == 2
    assert response.text == "Let me search for that. It is sunny."
    assert response.finish_reason is FinishReason.STOP
    resumed = seen[1].body["messages"]
    assert resumed[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "Weather in Paris?"}],
    }
    assert resumed[1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me search for that."},
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_01",
                    "name": "web_search",
                    "input": {"query": "paris weather"},
                },
            ],
        }
    ]


@pytest.mark.asyncio
async def test_a_turn_that_keeps_pausing_stops_at_max_steps() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(body=pause_turn_body(), content_type="text/event-stream")

    async with raw_server(handle) as (url, seen), AnthropicClient(url, KEY, "claude-x") as client:
        with pytest.raises(MaxStepsExceeded) as raised:
            await Agent(client, max_steps=3).send("Weather in Paris?")
    assert len(seen) == 3
    assert raised.value.partial is not None
    assert raised.value.partial.text.count("Let me search for that.") == 3
