"""Regression tests of the test kit (``rafrx.testing``, ``record_sse``) bugs a hunt found.

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import aiohttp
import pytest

from rafrx import ChatMessage, RafrxError, collect_agent_response
from rafrx import operators as ops
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import Fault, LLMServer

pytestmark = pytest.mark.asyncio

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


@pytest.mark.parametrize(("path", "header"), [(CHAT, "x-request-id"), (MESSAGES, "request-id")])
async def test_a_wrong_content_type_answer_carries_the_request_id(path: str, header: str) -> None:
    """``Fault.wrong_content_type`` answered without the provider's request id header,
    which every other answer of the server carries: a client error it caused named
    no request id."""
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(Fault.wrong_content_type(status=502))
        async with http.post(server.url + path, json={"stream": True}) as resp:
            await resp.read()
    assert resp.status == 502
    assert resp.content_type == "text/html"
    assert resp.headers[header].startswith("req_")


async def test_a_client_error_from_a_wrong_content_type_names_the_request_id() -> None:
    """The same fault as a client sees it: the error of a 200 answered with an HTML
    page had ``request_id`` ``None``."""
    async with LLMServer() as server:
        server.enqueue(Fault.wrong_content_type())
        client = OpenAIChatClient(server.url + "/v1", "sk-test", model="m")
        try:
            with pytest.raises(RafrxError) as caught:
                await collect_agent_response(
                    client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
                )
        finally:
            await client.aclose()
    assert str(getattr(caught.value, "request_id", None)).startswith("req_")
