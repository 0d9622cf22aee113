"""Regression tests of the test kit (``rafrx.testing``) bugs of session 12.

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rafrx import ChatMessage, FinishReason, collect_agent_response
from rafrx import operators as ops
from rafrx.content import ToolCallingContent
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient
from rafrx.testing import Fault, LLMServer, Reply, ToolCallSpec, error_body, render

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"

#: The deepest nesting a request body may have (``LLMServer``'s docstring says so).
MAX_DEPTH = 512

#: Per endpoint: the members whose values the answer writes back (in the usage
#: estimate, and Responses' echo of ``tools``), where a deep body broke the answer.
_DEEP_MEMBERS = [
    (CHAT, "messages"),
    (CHAT, "tools"),
    (MESSAGES, "messages"),
    (MESSAGES, "system"),
    (RESPONSES, "input"),
    (RESPONSES, "tools"),
]

#: The last event of a whole answer, by endpoint.
_LAST_EVENT = {
    CHAT: b"data: [DONE]\n\n",
    MESSAGES: b"message_stop",
    RESPONSES: b"response.completed",
}


def _nested_body(member: str, depth: int) -> bytes:
    """A streaming request body nested ``depth`` levels deep (the body itself is
    the first level), its deepest part under ``member``."""
    inner = depth - 1
    return b'{"stream": true, "%s": %s%s}' % (member.encode(), b"[" * inner, b"]" * inner)


async def _post(server: LLMServer, path: str, data: bytes) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as http:
        headers = {"Content-Type": "application/json"}
        async with http.post(server.url + path, data=data, headers=headers) as resp:
            return resp.status, await resp.read()


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "member"), _DEEP_MEMBERS)
@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH])
async def test_a_body_as_deep_as_the_server_takes_gets_its_whole_answer(
    path: str, member: str, depth: int
) -> None:
    """A body nested just under the depth ``json.loads`` reaches was parsed, then
    the answer overflowed writing parts of it back as JSON (the usage estimate,
    Responses' ``tools`` echo): an HTTP 500 'RecursionError', neither an answer
    nor a 400. Every body the server takes, up to its limit, is answered whole."""
    async with LLMServer() as server:
        server.enqueue(Reply(text="deep"))
        status, body = await _post(server, path, _nested_body(member, depth))
    assert status == 200, body[:300]
    assert _LAST_EVENT[path] in body
    assert b"deep" in body
    [recorded] = server.requests
    assert recorded.json is not None


@pytest.mark.asyncio
@pytest.mark.parametrize(("path", "member"), _DEEP_MEMBERS)
async def test_the_deepest_body_the_server_takes_gets_its_answer(path: str, member: str) -> None:
    """Found by bisection whatever the stack (the bound ``json.loads`` had depends
    on it): the deepest body not refused as too deep is answered, not an HTTP 500
    'RecursionError' (as it was when ``json.loads`` alone set the bound)."""
    shallow, deep = 1, 100_000  # taken / refused as too deep
    async with LLMServer() as server:
        while deep - shallow > 1:
            depth = (shallow + deep) // 2
            status, body = await _post(server, path, _nested_body(member, depth))
            refused = status == 400 and b"nested too deeply" in body
            shallow, deep = (shallow, depth) if refused else (depth, deep)
            if not refused:
                assert status == 200, (depth, body[:300])
    assert shallow == MAX_DEPTH


@pytest.mark.asyncio
async def test_responses_echo_tools_nested_as_deep_as_the_server_takes() -> None:
    """The Responses echo of the request's ``tools`` is the deep value as sent."""
    tools: Any = []
    for _ in range(MAX_DEPTH - 2):
        tools = [tools]
    raw = json.dumps({"stream": True, "tools": tools}).encode()
    async with LLMServer() as server:
        status, body = await _post(server, RESPONSES, raw)
    assert status == 200
    completed = next(
        json.loads(line[len(b"data: ") :])
        for line in body.split(b"\n")
        if line.startswith(b'data: {"type":"response.completed"')
    )
    assert completed["response"]["tools"] == tools


@pytest.mark.asyncio
@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 100_000])
async def test_a_body_deeper_than_the_server_takes_gets_a_400_saying_so(
    path: str, depth: int
) -> None:
    """Past the limit, whether ``json.loads`` could parse the body or not, the
    answer is the provider's 400 naming the limit (a body ``json.loads`` just
    parsed got an HTTP 500 'RecursionError'); it takes no queued answer."""
    async with LLMServer() as server:
        server.enqueue(Reply(text="kept"))
        status, body = await _post(server, path, _nested_body("metadata", depth))
        assert server.queued == 1
    assert status == 400
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error"
    assert "nested too deeply" in error["message"]
    assert f"at most {MAX_DEPTH} levels" in error["message"]
    [recorded] = server.requests
    assert recorded.json is None


# ------------------------------------------------------------ stop sequences


def _message_delta(body: bytes) -> dict[str, Any]:
    """The ``message_delta`` payload of an Anthropic SSE body."""
    [delta] = [
        json.loads(line[len(b"data: ") :])
        for line in body.split(b"\n")
        if line.startswith(b'data: {"type":"message_delta"')
    ]
    return delta


def test_a_reply_names_the_stop_sequence_that_matched() -> None:
    """``Reply(finish="stop_sequence")`` sent ``stop_sequence: null`` in
    ``message_delta``, where Anthropic sends the sequence that matched: a script
    could not say which one did."""
    reply = Reply(text="1, 2, 3", finish="stop_sequence", stop_sequence="\n\nHuman:")
    delta = _message_delta(render(reply, "anthropic"))["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "\n\nHuman:"}


def test_a_stop_sequence_alone_means_the_reply_stopped_at_it() -> None:
    reply = Reply(text="1, 2, 3", stop_sequence="4")
    assert reply.finish == "stop_sequence"
    assert reply.finish_reason is FinishReason.STOP
    assert reply == Reply(text="1, 2, 3", finish="stop_sequence", stop_sequence="4")
    delta = _message_delta(render(reply, "anthropic"))["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "4"}


@pytest.mark.parametrize(
    ("request_json", "sequence"),
    [
        ({"stop_sequences": ["END", "STOP"]}, "END"),
        ({"stop_sequences": [7, "STOP"]}, "STOP"),  # (what is not a string is skipped)
        ({"stop_sequences": []}, None),
        ({"stop_sequences": "END"}, None),  # (not the list Anthropic takes)
        ({}, None),
    ],
)
def test_by_default_the_stop_sequence_is_the_first_the_request_asked_for(
    request_json: dict[str, Any], sequence: str | None
) -> None:
    reply = Reply(text="…", finish="stop_sequence")
    delta = _message_delta(render(reply, "anthropic", request_json))["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": sequence}


@pytest.mark.asyncio
async def test_the_server_names_the_first_stop_sequence_of_the_request() -> None:
    async with LLMServer() as server:
        server.enqueue(Reply(text="1, 2, 3", finish="stop_sequence"))
        raw = json.dumps({"stream": True, "stop_sequences": ["4", "5"]}).encode()
        status, body = await _post(server, MESSAGES, raw)
    assert status == 200
    assert _message_delta(body)["delta"]["stop_sequence"] == "4"


@pytest.mark.parametrize("finish", ["end_turn", FinishReason.STOP, FinishReason.TOOL_CALLS])
def test_a_stop_sequence_goes_only_with_its_finish(finish: str) -> None:
    with pytest.raises(ValueError, match='finish="stop_sequence"'):
        Reply(text="…", finish=finish, stop_sequence="END")


@pytest.mark.parametrize(
    ("value", "error"), [("", ValueError), (["END"], TypeError), (b"END", TypeError)]
)
def test_a_stop_sequence_is_a_non_empty_string(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="stop_sequence"):
        Reply(text="…", stop_sequence=value)


@pytest.mark.parametrize("finish", ["end_turn", "tool_use", "max_tokens", None])
def test_no_stop_sequence_is_named_when_the_reply_did_not_stop_at_one(finish: str | None) -> None:
    request_json = {"stop_sequences": ["END"]}
    delta = _message_delta(render(Reply(text="…", finish=finish), "anthropic", request_json))
    assert delta["delta"]["stop_sequence"] is None


def test_other_formats_send_a_stop_at_a_sequence_as_a_plain_stop() -> None:
    """OpenAI chat names no sequence; Responses has no stop sequences."""
    reply = Reply(text="…", stop_sequence="END")
    chat = render(reply, "openai-chat", {"stop": ["END"]})
    assert b'"finish_reason":"stop"' in chat
    assert b"END" not in chat
    responses = render(reply, "openai-responses")
    assert b"response.completed" in responses
    assert b"END" not in responses


@pytest.mark.asyncio
async def test_an_anthropic_client_sees_a_stop_at_a_sequence_as_stop() -> None:
    """Over the wire, with the sequence the request asked for: rafrx's Anthropic
    client takes the answer whole, finishing ``STOP``."""
    async with LLMServer() as server:
        server.enqueue(Reply(text="1, 2, 3", finish="stop_sequence"))
        client = AnthropicClient(server.url, "sk-ant-test", model="claude-test")
        try:
            response = await collect_agent_response(
                client.stream([ChatMessage.user("count")], stop_sequences=["4"]).pipe(ops.convert())
            )
        finally:
            await client.aclose()
    assert response.text == "1, 2, 3"
    assert response.finish_reason is FinishReason.STOP
    [recorded] = server.requests
    assert recorded.body["stop_sequences"] == ["4"]


# ------------------------------------------------------------ as the providers send it

FIXTURES = Path(__file__).parent / "data" / "fixtures"


def _event_names(body: bytes) -> list[str]:
    return [
        line[len("event: ") :] for line in body.decode().splitlines() if line.startswith("event: ")
    ]


@pytest.mark.parametrize(
    ("fixture", "reply"),
    [
        ("anthropic-text-padded.sse", Reply(text="Hello")),
        ("anthropic-thinking.sse", Reply(reasoning="Hmm.", text="Hello")),
        ("anthropic-tool-use-padded.sse", Reply(tool_calls=[ToolCallSpec("f", {"a": 1})])),
    ],
)
def test_anthropic_pings_after_the_first_content_block_start(fixture: str, reply: Reply) -> None:
    """The server sent ``ping`` right after ``message_start``; Anthropic sends it after
    the first ``content_block_start``, as the recorded streams show."""
    recorded = _event_names((FIXTURES / "anthropic" / fixture).read_bytes())
    ours = _event_names(render(reply, "anthropic"))
    assert recorded[:4] == ["message_start", "content_block_start", "ping", "content_block_delta"]
    assert ours[:4] == recorded[:4]
    assert ours.count("ping") == 1


def test_an_anthropic_reply_without_content_still_pings_once() -> None:
    assert _event_names(render(Reply(), "anthropic")) == [
        "message_start",
        "ping",
        "message_delta",
        "message_stop",
    ]


def _payloads(body: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in body.decode().splitlines()
        if line.startswith("data: {")
    ]


def _tool_input_pieces(body: bytes) -> list[list[str]]:
    """Per ``tool_use`` block of an Anthropic body, its ``partial_json`` pieces."""
    blocks: dict[int, list[str]] = {}
    for payload in _payloads(body):
        if payload["type"] == "content_block_start":
            if payload["content_block"]["type"] == "tool_use":
                blocks[payload["index"]] = []
        elif payload["type"] == "content_block_delta" and payload["index"] in blocks:
            blocks[payload["index"]].append(payload["delta"]["partial_json"])
    return list(blocks.values())


def test_an_anthropic_call_without_arguments_streams_no_input() -> None:
    """A call with no arguments streamed ``partial_json: "{}"``; Anthropic streams one
    empty piece and no ``{}``, so a client saw ``raw_arguments`` ``"{}"`` where the
    real API gives ``""``."""
    recorded = (FIXTURES / "anthropic" / "anthropic-tool-no-args.sse").read_bytes()
    ours = render(Reply(tool_calls=[ToolCallSpec("updateIssueList", {})]), "anthropic")
    assert _tool_input_pieces(recorded) == [[""]]
    assert _tool_input_pieces(ours) == [[""]]
    [recorded_call] = _calls(recorded)
    [our_call] = _calls(ours)
    assert (
        (our_call.arguments, our_call.raw_arguments)
        == ({}, "")
        == (
            recorded_call.arguments,
            recorded_call.raw_arguments,
        )
    )


@pytest.mark.parametrize(
    "fixture", ["anthropic-parallel-tool-use.sse", "anthropic-tool-use-padded.sse"]
)
def test_an_anthropic_tool_use_block_opens_with_an_empty_piece(fixture: str) -> None:
    """Anthropic's first ``input_json_delta`` of every ``tool_use`` block is empty;
    the server's first piece was already JSON."""
    recorded = _tool_input_pieces((FIXTURES / "anthropic" / fixture).read_bytes())
    reply = Reply(tool_calls=[ToolCallSpec("f", {"a": 1}), ToolCallSpec("g", '{"b": 2}')])
    ours = _tool_input_pieces(render(reply, "anthropic"))
    assert all(pieces[0] == "" and len(pieces) > 1 for pieces in recorded)
    assert [pieces[0] for pieces in ours] == ["", ""]
    assert ["".join(pieces) for pieces in ours] == ['{"a":1}', '{"b": 2}']
    assert [call.arguments for call in _calls(render(reply, "anthropic"))] == [{"a": 1}, {"b": 2}]


def test_an_exact_empty_argument_string_is_sent_as_given() -> None:
    ours = render(Reply(tool_calls=[ToolCallSpec("f", "{}")]), "anthropic")
    assert _tool_input_pieces(ours) == [["", "{}"]]


def _calls(body: bytes) -> list[ToolCallingContent]:
    """The calls rafrx's Anthropic dialect makes of ``body``."""
    results: list[Any] = []
    from_sse([body], dialect="anthropic").pipe(ops.convert()).subscribe(results.append)
    return [c for r in results for c in r.contents if isinstance(c, ToolCallingContent)]


def test_a_responses_output_text_part_has_its_logprobs() -> None:
    """The server's ``output_text`` parts (``content_part.added``/``done``, the message
    item) had no ``logprobs``, which OpenAI sends (``[]``) as it does on the deltas."""
    recorded = _payloads(
        (FIXTURES / "openai-responses" / "responses-reasoning-summary-text.sse").read_bytes()
    )
    ours = _payloads(render(Reply(text="Hi."), "openai-responses"))

    def parts(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found = [p["part"] for p in payloads if p["type"].startswith("response.content_part.")]
        items = [p["item"] for p in payloads if p["type"] == "response.output_item.done"]
        return found + [c for item in items if item["type"] == "message" for c in item["content"]]

    assert all(part["logprobs"] == [] for part in parts(recorded))
    assert len(parts(ours)) == 3
    for part in parts(ours):
        assert part["logprobs"] == []
        assert set(part) == {"type", "annotations", "logprobs", "text"}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "fault",
    [Fault.status(529), Fault.status(400, message="bad"), Fault.status(429, retry_after=1)],
    ids=["529", "400", "429"],
)
async def test_an_anthropic_error_body_names_its_request_id(fault: Fault) -> None:
    """Anthropic's error body carries ``request_id``, the id of its ``request-id``
    header (``{"type": "error", "error": {...}, "request_id": "req_..."}``); the
    server's had none, so an SDK's ``error.body`` lacked it."""
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(fault)
        async with http.post(server.url + MESSAGES, json={"stream": True}) as resp:
            body = await resp.json()
    assert resp.status == fault.status_code
    assert body["request_id"] == resp.headers["request-id"]
    assert body["request_id"].startswith("req_")
    assert set(body) == {"type", "error", "request_id"}


@pytest.mark.asyncio
async def test_an_anthropic_error_body_names_the_request_id_the_fault_sets() -> None:
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(Fault.status(500, headers={"Request-Id": "req_mine"}))
        async with http.post(server.url + MESSAGES, json={"stream": True}) as resp:
            body = await resp.json()
    assert resp.headers["request-id"] == "req_mine"
    assert body["request_id"] == "req_mine"


@pytest.mark.asyncio
async def test_the_servers_own_anthropic_errors_name_their_request_id() -> None:
    async with (
        LLMServer() as server,
        aiohttp.ClientSession() as http,
        http.post(server.url + MESSAGES, json={"stream": False}) as resp,
    ):
        body = await resp.json()
    assert resp.status == 400
    assert body["request_id"] == resp.headers["request-id"]


@pytest.mark.asyncio
@pytest.mark.parametrize("path", [CHAT, RESPONSES])
async def test_an_openai_error_body_stays_as_openai_sends_it(path: str) -> None:
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        server.enqueue(Fault.status(429))
        async with http.post(server.url + path, json={"stream": True}) as resp:
            body = await resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_error_body_takes_a_request_id_for_anthropic_only() -> None:
    assert error_body("anthropic", 404, "no")["error"]["type"] == "not_found_error"
    assert "request_id" not in error_body("anthropic", 404, "no")
    assert error_body("anthropic", 404, "no", request_id="req_1")["request_id"] == "req_1"
    assert "request_id" not in error_body("openai-chat", 404, "no", request_id="req_1")
