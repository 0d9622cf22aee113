"""The Anthropic Messages path end to end, over real HTTP.

Scripted Messages SSE bodies (built to the shapes of the ``anthropic`` package's
``RawMessageStreamEvent`` types, as the API streams them: ``message_start`` with its
usage, each content block's ``content_block_start`` / deltas / ``content_block_stop``,
``message_delta`` with the stop reason and cumulative usage, ``message_stop``) are
served by :class:`~rafrx.testing.LLMServer` (``Replay``) to an
:class:`~rafrx.sources.clients.AnthropicClient`, alone or under an
:class:`~rafrx.agent.Agent`. What rafrx reads is checked against
anthropic-sdk-python's own accumulator (``accumulate_event``); what it sends next is
checked against the SDK's request TypedDicts (``tests/test_sdk_request_types``) and
against the rule that an assistant turn goes back as it came: its blocks in their
order, thinking blocks with their signatures, server tools' blocks whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from anthropic._models import construct_type as anthropic_construct
from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent

from rafrx import (
    InMemoryHistoryProvider,
    ToolApprovalRequestEvent,
    ToolApprovalResponse,
    convert,
)
from rafrx.agent import Agent
from rafrx.messages import ChatMessage, from_anthropic, to_anthropic
from rafrx.operators import aggregate
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.sources.clients import AnthropicClient
from rafrx.testing import LLMServer, RecordedRequest, Replay
from rafrx.tools import tool
from tests.test_sdk_request_types import body_problems

GUARD = 10.0  # seconds: a guard against hangs only
MODEL = "claude-sonnet-4-5"
KEY = "sk-ant-test-0123456789"


# ================================================================ SSE bodies


def _event(data: dict[str, Any]) -> str:
    return f"event: {data['type']}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def text(value: str, *citations: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    if citations:
        block["citations"] = list(citations)
    return block


def thinking(value: str, signature: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": signature}


def redacted(data: str) -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": data}


def tool_use(call_id: str, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments, **extra}


def server_use(call_id: str, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": call_id, "name": name, "input": arguments, **extra}


def search_result(call_id: str, url: str = "https://example.com/paris") -> dict[str, Any]:
    return {
        "type": "web_search_tool_result",
        "tool_use_id": call_id,
        "content": [
            {
                "type": "web_search_result",
                "url": url,
                "title": "Paris weather",
                "encrypted_content": "EqgfCioIARgBIiQ3",
                "page_age": "April 30, 2025",
            }
        ],
    }


def code_result(call_id: str, stdout: str = "4\n") -> dict[str, Any]:
    return {
        "type": "code_execution_tool_result",
        "tool_use_id": call_id,
        "content": {
            "type": "code_execution_result",
            "stdout": stdout,
            "stderr": "",
            "return_code": 0,
            "content": [],
        },
    }


def citation(url: str = "https://example.com/paris") -> dict[str, Any]:
    return {
        "type": "web_search_result_location",
        "url": url,
        "title": "Paris weather",
        "encrypted_index": "Eo8BCioIAhgBIiQy",
        "cited_text": "Sunny, 21 degrees.",
    }


def message(
    *blocks: dict[str, Any],
    stop: str = "tool_use",
    start_usage: dict[str, Any] | None = None,
    final_usage: dict[str, Any] | None = None,
    cut: bool = False,
    msg_id: str = "msg_01",
    cut_json: int | None = None,
) -> bytes:
    """A Messages stream of ``blocks`` (the content as the API returns it), ending with
    ``stop``. ``cut``: the last block never stops (the token limit hit inside it);
    ``cut_json``: its input stops after that many characters."""
    usage = start_usage or {"input_tokens": 50, "output_tokens": 1}
    start: dict[str, Any] = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(blocks):
        last = index == len(blocks) - 1

        def delta(body: dict[str, Any], index: int = index) -> None:
            events.append({"type": "content_block_delta", "index": index, "delta": body})

        kind = block["type"]
        if kind == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            if "citations" in block:
                opening["citations"] = []
            events.append({"type": "content_block_start", "index": index, "content_block": opening})
            for cited in block.get("citations", ()):
                delta({"type": "citations_delta", "citation": cited})
            for piece in _pieces(block["text"]):
                delta({"type": "text_delta", "text": piece})
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            events.append({"type": "content_block_start", "index": index, "content_block": opening})
            for piece in _pieces(block["thinking"]):
                delta({"type": "thinking_delta", "thinking": piece})
            delta({"type": "signature_delta", "signature": block["signature"]})
        elif kind in ("tool_use", "server_tool_use"):
            opening = {**block, "input": {}}
            events.append({"type": "content_block_start", "index": index, "content_block": opening})
            raw = json.dumps(block["input"])
            if last and cut_json is not None:
                raw = raw[:cut_json]
            delta({"type": "input_json_delta", "partial_json": ""})
            for piece in _pieces(raw, 5):
                delta({"type": "input_json_delta", "partial_json": piece})
        else:  # redacted thinking and server tools' results come whole
            events.append({"type": "content_block_start", "index": index, "content_block": block})
        if not (last and cut):
            events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": final_usage or {"output_tokens": 40},
        }
    )
    events.append({"type": "message_stop"})
    return "".join(_event(e) for e in events).encode()


def answer(value: str = "Done.", **kwargs: Any) -> bytes:
    return message(text(value), stop="end_turn", **kwargs)


def sdk_message(body: bytes) -> Any:
    """anthropic-sdk-python's MessageStream snapshot of a Messages stream."""
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for event in AnthropicSSEDecoder().iter_bytes(iter([body])):
        if event.event in (None, "ping") or not event.data:
            continue
        raw: Any = anthropic_construct(type_=RawMessageStreamEvent, value=event.json())
        snapshot = accumulate_event(event=raw, current_snapshot=snapshot, json_bufs=json_bufs)
    return snapshot


def rafrx_response(body: bytes) -> AgentResponse:
    out: list[AgentResponse] = []
    from_sse([body], dialect="anthropic").pipe(convert(), aggregate()).subscribe(out.append)
    [response] = out
    return response


def sdk_usage(message: Any) -> Usage:
    """The SDK's usage in rafrx's terms (DESIGN: prompt = input + cache write + read)."""
    usage = message.usage
    prompt = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    details = usage.output_tokens_details
    return Usage(
        prompt,
        usage.output_tokens,
        prompt + usage.output_tokens,
        reasoning_tokens=details.thinking_tokens if details is not None else None,
        cached_tokens=usage.cache_read_input_tokens,
    )


def kept_wire(message: Any) -> list[dict[str, Any]]:
    """The SDK message's content as it goes back: each block's dict, but text without
    its citations (rafrx sends text alone, which the API takes)."""
    out = []
    for block in message.content:
        data = block.to_dict()
        if data["type"] == "text":
            data = {"type": "text", "text": data["text"]}
        out.append(data)
    return out


# ================================================================ tools


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


@tool
def broken(path: str) -> str:
    """Always fails."""
    raise OSError(f"cannot read {path}")


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@tool(requires_approval=True)
def send_mail(to: str) -> str:
    """Send a mail."""
    return f"sent to {to}"


@tool(requires_approval=True)
def wipe(disk: str) -> str:
    """Wipe a disk."""
    return f"wiped {disk}"  # pragma: no cover - never approved in time


async def approver(event: ToolApprovalRequestEvent) -> ToolApprovalResponse | bool:
    if event.name == "delete_file":
        return ToolApprovalResponse(event.call_id, False, reason="not today")
    if event.name == "wipe":
        await asyncio.sleep(GUARD)  # nobody answers: the approval times out
    return True


# ================================================================ helpers


async def run_turns(
    server: LLMServer,
    bodies: Sequence[bytes],
    prompts: Sequence[str],
    *,
    history: InMemoryHistoryProvider | None = None,
    **agent_args: Any,
) -> list[AgentResponse]:
    server.enqueue(*(Replay(b, chunk_size=61) for b in bodies))
    responses = []
    async with AnthropicClient(server.url, KEY, MODEL) as client:
        agent = Agent(client, history=history, **agent_args)
        for prompt in prompts:
            responses.append(await asyncio.wait_for(agent.send(prompt), GUARD))
    return responses


def assistant_contents(request: RecordedRequest) -> list[list[dict[str, Any]]]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "assistant"]


def results_of(request: RecordedRequest) -> list[tuple[str, bool, str]]:
    """(tool_use_id, is_error, content) of every tool_result the request sends."""
    return [
        (b["tool_use_id"], b.get("is_error", False), b["content"])
        for m in request.body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


# ================================================================ the dialect against the SDK


def test_a_web_search_turn_reads_as_the_sdk_accumulates_it() -> None:
    """Thinking, a web search (``server_tool_use`` streamed input, its result), text
    blocks with ``citations_delta`` and a client ``tool_use``: the text, the thinking,
    the call, the usage and the finish reason are what ``accumulate_event`` builds."""
    body = message(
        thinking("Search first.", "sig_1"),
        server_use("srvtoolu_01", "web_search", {"query": "paris weather"}),
        search_result("srvtoolu_01"),
        text("In Paris: "),
        text("sunny.", citation()),
        tool_use("toolu_01", "lookup", {"city": "Paris"}),
        start_usage={
            "input_tokens": 900,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 100,
            "output_tokens": 1,
        },
        final_usage={
            "input_tokens": 1200,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 100,
            "output_tokens": 90,
            "server_tool_use": {"web_search_requests": 1},
        },
    )
    sdk = sdk_message(body)
    response = rafrx_response(body)
    assert response.text == "".join(b.text for b in sdk.content if b.type == "text")
    assert response.reasoning_text == "".join(
        b.thinking for b in sdk.content if b.type == "thinking"
    )
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        (b.id, b.name, b.input) for b in sdk.content if b.type == "tool_use"
    ]
    assert response.usage == sdk_usage(sdk)
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert response.id == sdk.id
    assert response.model == sdk.model


def test_thinking_tokens_of_the_usage_are_the_reasoning_tokens() -> None:
    body = message(
        thinking("Let me think about it.", "sig_1"),
        text("42."),
        stop="end_turn",
        final_usage={"output_tokens": 60, "output_tokens_details": {"thinking_tokens": 25}},
    )
    sdk = sdk_message(body)
    assert sdk.usage.output_tokens_details.thinking_tokens == 25
    assert rafrx_response(body).usage == sdk_usage(sdk)


@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param(
            (
                server_use("srvtoolu_01", "web_search", {"query": "paris"}),
                search_result("srvtoolu_01"),
            ),
            id="web_search",
        ),
        pytest.param(
            (
                server_use("srvtoolu_01", "web_search", {"query": "paris"}),
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_01",
                    "content": {
                        "type": "web_search_tool_result_error",
                        "error_code": "max_uses_exceeded",
                    },
                },
            ),
            id="web_search_error",
        ),
        pytest.param(
            (
                server_use("srvtoolu_02", "code_execution", {"code": "print(2 + 2)"}),
                code_result("srvtoolu_02"),
            ),
            id="code_execution",
        ),
        pytest.param(
            (
                server_use("srvtoolu_03", "bash_code_execution", {"command": "ls"}),
                {
                    "type": "bash_code_execution_tool_result",
                    "tool_use_id": "srvtoolu_03",
                    "content": {
                        "type": "bash_code_execution_result",
                        "stdout": "a.txt\n",
                        "stderr": "",
                        "return_code": 0,
                        "content": [],
                    },
                },
            ),
            id="bash_code_execution",
        ),
        pytest.param(
            (
                server_use(
                    "srvtoolu_04",
                    "text_editor_code_execution",
                    {"command": "view", "path": "/tmp/a.txt"},
                ),
                {
                    "type": "text_editor_code_execution_tool_result",
                    "tool_use_id": "srvtoolu_04",
                    "content": {
                        "type": "text_editor_code_execution_view_result",
                        "content": "hello\n",
                        "file_type": "text",
                        "num_lines": 1,
                        "start_line": 1,
                        "total_lines": 1,
                    },
                },
            ),
            id="text_editor_code_execution",
        ),
        pytest.param(
            (
                server_use("srvtoolu_05", "web_fetch", {"url": "https://example.com/a"}),
                {
                    "type": "web_fetch_tool_result",
                    "tool_use_id": "srvtoolu_05",
                    "content": {
                        "type": "web_fetch_result",
                        "url": "https://example.com/a",
                        "retrieved_at": "2025-08-25T10:30:00Z",
                        "content": {
                            "type": "document",
                            "source": {
                                "type": "text",
                                "media_type": "text/plain",
                                "data": "Hello",
                            },
                            "title": "A",
                        },
                    },
                },
            ),
            id="web_fetch",
        ),
    ],
)
def test_server_tool_blocks_are_kept_as_the_sdk_builds_them(
    blocks: tuple[dict[str, Any], ...],
) -> None:
    """A server tool's blocks are kept whole (README: "Anthropic's server-tool blocks
    ... in theirs"): what rafrx keeps is the SDK's block, and fits ``ContentBlockParam``."""
    stream = message(thinking("Use it.", "sig_1"), *blocks, text("Here it is."), stop="end_turn")
    sdk = sdk_message(stream)
    response = rafrx_response(stream)
    _, wire = to_anthropic([ChatMessage.user("Go"), *response.turn_transcript])
    assert wire[1]["content"] == kept_wire(sdk)
    if blocks[-1]["type"] != "web_fetch_tool_result":  # (the oracle cannot read IO[bytes])
        body = {"model": MODEL, "max_tokens": 9, "messages": wire, "stream": True}
        assert body_problems("anthropic", body) == []


# ================================================================ agent turns


@pytest.mark.asyncio
async def test_parallel_calls_with_approvals_go_back_after_their_signed_thinking(
    llm_server: LLMServer,
) -> None:
    """One thinking step, five parallel calls: one runs, one raises, one is denied, one
    approved, one whose approval times out. The next request sends the assistant turn
    back as it came (thinking first with its signature, the calls in order) and all five
    results in the next user message, in call order, the failed ones ``is_error``
    (https://platform.claude.com/docs/en/agents-and-tools/tool-use/parallel-tool-use)."""
    step = message(
        thinking("Five things to do.", "sig_five"),
        text("On it."),
        tool_use("toolu_1", "lookup", {"city": "Oslo"}),
        tool_use("toolu_2", "broken", {"path": "/etc/x"}),
        tool_use("toolu_3", "delete_file", {"path": "/tmp/a"}),
        tool_use("toolu_4", "send_mail", {"to": "bob"}),
        tool_use("toolu_5", "wipe", {"disk": "sda"}),
    )
    [response] = await run_turns(
        llm_server,
        [step, answer("All handled.")],
        ["Do it all."],
        tools=[lookup, broken, delete_file, send_mail, wipe],
        approver=approver,
        approval_timeout=0.3,
    )
    assert response.text == "On it.All handled."
    second = llm_server.requests[1]
    assert body_problems("anthropic", second.json) == []
    assert assistant_contents(second) == [
        [
            thinking("Five things to do.", "sig_five"),
            text("On it."),
            tool_use("toolu_1", "lookup", {"city": "Oslo"}),
            tool_use("toolu_2", "broken", {"path": "/etc/x"}),
            tool_use("toolu_3", "delete_file", {"path": "/tmp/a"}),
            tool_use("toolu_4", "send_mail", {"to": "bob"}),
            tool_use("toolu_5", "wipe", {"disk": "sda"}),
        ]
    ]
    results = results_of(second)
    assert [(r[0], r[1]) for r in results] == [
        ("toolu_1", False),
        ("toolu_2", True),
        ("toolu_3", True),
        ("toolu_4", False),
        ("toolu_5", True),
    ]
    assert results[0][2] == "Oslo: sunny"
    assert "cannot read /etc/x" in results[1][2]
    assert "not today" in results[2][2]
    assert results[3][2] == "sent to bob"
    assert "0.3 s" in results[4][2]
    # the results are one user message, right after the assistant turn
    roles = [m["role"] for m in second.body["messages"]]
    assert roles == ["user", "assistant", "user"]


@pytest.mark.asyncio
async def test_interleaved_thinking_over_three_steps_keeps_each_turn_as_it_came(
    llm_server: LLMServer,
) -> None:
    """Interleaved thinking (thinking between tool calls, and a redacted block) over
    three steps: every later request carries each earlier assistant turn in its own
    block order, byte for byte."""
    step1 = message(
        thinking("Oslo first.", "sig_a"),
        tool_use("toolu_a", "lookup", {"city": "Oslo"}),
        redacted("REDACTED_1"),
        text("And Bergen."),
        tool_use("toolu_b", "lookup", {"city": "Bergen"}),
    )
    step2 = message(
        thinking("Now a broken one.", "sig_c"),
        text("Reading."),
        tool_use("toolu_c", "broken", {"path": "/x"}),
        thinking("And Lima.", "sig_d"),
        tool_use("toolu_d", "lookup", {"city": "Lima"}),
    )
    await run_turns(
        llm_server,
        [step1, step2, answer("Done.")],
        ["Weather?"],
        tools=[lookup, broken],
    )
    third = llm_server.requests[2]
    assert body_problems("anthropic", third.json) == []
    assert assistant_contents(third) == [
        [
            thinking("Oslo first.", "sig_a"),
            tool_use("toolu_a", "lookup", {"city": "Oslo"}),
            redacted("REDACTED_1"),
            text("And Bergen."),
            tool_use("toolu_b", "lookup", {"city": "Bergen"}),
        ],
        [
            thinking("Now a broken one.", "sig_c"),
            text("Reading."),
            tool_use("toolu_c", "broken", {"path": "/x"}),
            thinking("And Lima.", "sig_d"),
            tool_use("toolu_d", "lookup", {"city": "Lima"}),
        ],
    ]
    assert [(r[0], r[1]) for r in results_of(third)] == [
        ("toolu_a", False),
        ("toolu_b", False),
        ("toolu_c", True),
        ("toolu_d", False),
    ]
    assert llm_server.requests[1].body["messages"] == third.body["messages"][:3]


@pytest.mark.asyncio
async def test_a_web_search_answer_goes_back_in_the_next_turn_as_it_came(
    llm_server: LLMServer,
) -> None:
    """A turn with a web search and cited text, saved to history: the next turn sends
    the assistant message back with its blocks in order (text, server_tool_use, its
    result, the cited texts) and fits the SDK's request types."""
    turn1 = message(
        text("Let me search."),
        server_use("srvtoolu_01", "web_search", {"query": "paris weather"}),
        search_result("srvtoolu_01"),
        text("Paris is "),
        text("sunny", citation()),
        text(" today."),
        stop="end_turn",
    )
    history = InMemoryHistoryProvider()
    first, _ = await run_turns(
        llm_server, [turn1, answer("You're welcome.")], ["Paris?", "Thanks"], history=history
    )
    assert first.text == "Let me search.Paris is sunny today."
    second = llm_server.requests[1]
    assert body_problems("anthropic", second.json) == []
    assert second.body["messages"] == [
        {"role": "user", "content": [text("Paris?")]},
        {
            "role": "assistant",
            "content": [
                text("Let me search."),
                server_use("srvtoolu_01", "web_search", {"query": "paris weather"}),
                search_result("srvtoolu_01"),
                text("Paris is "),
                text("sunny"),
                text(" today."),
            ],
        },
        {"role": "user", "content": [text("Thanks")]},
    ]


@pytest.mark.asyncio
async def test_a_paused_code_execution_turn_with_thinking_goes_on_and_sums_usage(
    llm_server: LLMServer,
) -> None:
    """``pause_turn`` in a thinking turn running code: the message goes back as it is
    (thinking first, then the server blocks, no mark of rafrx's), the model goes on,
    and the turn's usage is the sum of both calls as the SDK reads each."""
    paused = message(
        thinking("Compute it.", "sig_p"),
        server_use("srvtoolu_01", "code_execution", {"code": "print(2 + 2)"}),
        code_result("srvtoolu_01"),
        stop="pause_turn",
        start_usage={"input_tokens": 100, "cache_creation_input_tokens": 50, "output_tokens": 1},
        final_usage={"input_tokens": 120, "cache_creation_input_tokens": 50, "output_tokens": 30},
    )
    resumed = answer(
        "It is 4.",
        msg_id="msg_02",
        start_usage={"input_tokens": 10, "cache_read_input_tokens": 150, "output_tokens": 1},
        final_usage={"output_tokens": 5},
    )
    [response] = await run_turns(llm_server, [paused, resumed], ["2 + 2?"])
    assert response.text == "It is 4."
    assert response.finish_reason is FinishReason.STOP
    second = llm_server.requests[1]
    assert body_problems("anthropic", second.json) == []
    assert second.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                thinking("Compute it.", "sig_p"),
                server_use("srvtoolu_01", "code_execution", {"code": "print(2 + 2)"}),
                code_result("srvtoolu_01"),
            ],
        }
    ]
    assert response.usage == sdk_usage(sdk_message(paused)) + sdk_usage(sdk_message(resumed))


@pytest.mark.asyncio
@pytest.mark.parametrize("stopped", [False, True], ids=["block_open", "block_stopped"])
@pytest.mark.parametrize("reason", ["max_tokens", "model_context_window_exceeded"])
async def test_a_call_cut_by_the_token_limit_never_runs_and_the_rest_goes_back(
    llm_server: LLMServer, reason: str, stopped: bool
) -> None:
    """README: a call cut short by the token limit never runs and stays out of the
    transcript; the calls that completed run. The assistant turn goes back as it came
    (interleaved thinking in place) but for the cut call, whose arguments the SDK
    reads as partial JSON (never a call to run)."""
    blocks = (
        thinking("Two files.", "sig_a"),
        text("Writing."),
        tool_use("toolu_x", "lookup", {"city": "Oslo"}),
        thinking("Now the big one.", "sig_b"),
        tool_use("toolu_y", "lookup", {"city": "Bergen and a very long name"}),
    )
    step = message(*blocks, stop=reason, cut=not stopped, cut_json=20)
    assert sdk_message(step).stop_reason == reason
    [response] = await run_turns(llm_server, [step, answer("Oslo done.")], ["Go"], tools=[lookup])
    assert [(c.id, c.complete) for c in response.tool_calls] == [
        ("toolu_x", True),
        ("toolu_y", False),
    ]
    assert response.tool_calls[1].partial_value == {"city": "Bergen and"}
    assert [m.content for m in response.tool_messages] == ["Oslo: sunny"]
    second = llm_server.requests[1]
    assert body_problems("anthropic", second.json) == []
    assert assistant_contents(second) == [list(blocks[:4])]
    assert results_of(second) == [("toolu_x", False, "Oslo: sunny")]


@pytest.mark.asyncio
async def test_a_refused_turn_is_not_sent_back_in_the_next_turn(llm_server: LLMServer) -> None:
    refused = message(text("Hello.."), stop="refusal")
    history = InMemoryHistoryProvider()
    first, second = await run_turns(
        llm_server,
        [refused, answer("Paris.")],
        ["<something refused>", "Capital of France?"],
        history=history,
    )
    assert first.finish_reason is FinishReason.CONTENT_FILTER
    assert first.text == "Hello.."
    assert second.text == "Paris."
    sent = json.dumps(llm_server.requests[1].body["messages"])
    assert "Hello.." not in sent
    assert "<something refused>" not in sent


def rich_turn() -> list[bytes]:
    """A turn of three calls: a paused web search, an interleaved-thinking tool step
    (one call failing), then the answer."""
    return [
        message(
            text("Searching."),
            server_use("srvtoolu_01", "web_search", {"query": "oslo"}),
            search_result("srvtoolu_01", "https://example.com/oslo"),
            stop="pause_turn",
        ),
        message(
            thinking("Check both.", "sig_1"),
            text("Looking up."),
            tool_use("toolu_a", "lookup", {"city": "Oslo"}),
            redacted("REDACTED_2"),
            tool_use("toolu_b", "broken", {"path": "/x"}),
            msg_id="msg_02",
        ),
        answer("Oslo is sunny.", msg_id="msg_03"),
    ]


@pytest.mark.asyncio
async def test_a_history_saved_as_json_and_loaded_back_goes_on_as_if_kept(
    llm_server: LLMServer,
) -> None:
    """A history saved in Anthropic's wire form (``to_anthropic``, JSON) and loaded back
    (``from_anthropic``) sends the next turn exactly as the kept history does."""
    kept = InMemoryHistoryProvider()
    await run_turns(
        llm_server,
        [*rich_turn(), answer("Bye.")],
        ["Oslo?", "Thanks"],
        history=kept,
        tools=[lookup, broken],
    )
    as_kept = llm_server.requests[-1]
    assert body_problems("anthropic", as_kept.json) == []

    system, wire = to_anthropic(kept.messages[:-2])  # the first turn, as saved
    stored = json.loads(json.dumps({"system": system, "messages": wire}))
    loaded = InMemoryHistoryProvider(from_anthropic(stored["system"], stored["messages"]))
    llm_server.reset()
    await run_turns(
        llm_server, [answer("Bye.")], ["Thanks"], history=loaded, tools=[lookup, broken]
    )
    [as_loaded] = llm_server.requests
    assert as_loaded.body["messages"] == as_kept.body["messages"]


@pytest.mark.asyncio
async def test_a_turn_of_many_steps_sums_the_usage_the_sdk_reads_of_each_call(
    llm_server: LLMServer,
) -> None:
    """Usage: per call the last cumulative values (``message_delta`` overwrites input
    and cache counts of ``message_start``), summed over the turn's calls (a paused
    one included)."""
    bodies = [
        message(
            text("Searching."),
            server_use("srvtoolu_01", "web_search", {"query": "oslo"}),
            search_result("srvtoolu_01"),
            stop="pause_turn",
            start_usage={"input_tokens": 400, "cache_creation_input_tokens": 1000},
            final_usage={
                "input_tokens": 900,
                "cache_creation_input_tokens": 1000,
                "output_tokens": 50,
                "server_tool_use": {"web_search_requests": 1},
            },
        ),
        message(
            tool_use("toolu_a", "lookup", {"city": "Oslo"}),
            msg_id="msg_02",
            start_usage={"input_tokens": 30, "cache_read_input_tokens": 1000, "output_tokens": 1},
            final_usage={"output_tokens": 70},
        ),
        answer(
            "Sunny.",
            msg_id="msg_03",
            start_usage={
                "input_tokens": 20,
                "cache_read_input_tokens": 1100,
                "cache_creation_input_tokens": 0,
                "output_tokens": 1,
            },
            final_usage={"input_tokens": 25, "cache_read_input_tokens": 1100, "output_tokens": 9},
        ),
    ]
    [response] = await run_turns(llm_server, bodies, ["Oslo?"], tools=[lookup])
    first, second, third = (sdk_usage(sdk_message(b)) for b in bodies)
    assert response.usage == first + second + third
    assert response.usage is not None
    assert response.usage.cached_tokens == 2100
    assert response.usage.prompt_tokens == 1900 + 1030 + 1125


WEB_SEARCH_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


@pytest.mark.asyncio
async def test_an_agent_offers_a_server_tool_beside_its_own(llm_server: LLMServer) -> None:
    tools: list[Any] = [lookup, WEB_SEARCH_TOOL]
    [response] = await run_turns(llm_server, [answer("Hi.")], ["Hi"], tools=tools)
    assert response.text == "Hi."
    [request] = llm_server.requests
    assert body_problems("anthropic", request.json) == []
    assert [t.get("type") for t in request.body["tools"]] == [None, "web_search_20250305"]
    assert request.body["tools"][1] == WEB_SEARCH_TOOL


@pytest.mark.asyncio
async def test_a_client_level_server_tool_does_not_drop_the_agents_tools(
    llm_server: LLMServer,
) -> None:
    llm_server.enqueue(Replay(answer("Hi.")))
    async with AnthropicClient(llm_server.url, KEY, MODEL, tools=[WEB_SEARCH_TOOL]) as client:
        await asyncio.wait_for(Agent(client, tools=[lookup]).send("Hi"), GUARD)
    [request] = llm_server.requests
    names = sorted(t["name"] for t in request.body["tools"])
    assert names == ["lookup", "web_search"]


def ptc_step() -> bytes:
    """Programmatic tool calling: Claude's code calls the client tool ``lookup`` from a
    code execution container; the ``tool_use`` block names its ``caller``, the message
    its ``container`` (``message_delta.delta.container``, as ``accumulate_event`` reads)."""
    body = message(
        server_use("srvtoolu_01", "code_execution", {"code": "await lookup(city='Oslo')"}),
        tool_use(
            "toolu_01",
            "lookup",
            {"city": "Oslo"},
            caller={"type": "code_execution_20250825", "tool_id": "srvtoolu_01"},
        ),
    )
    container = {"id": "container_011CPR5CNjB747bTd36fQLFk", "expires_at": "2099-01-01T00:00:00Z"}
    return body.replace(
        b'"delta": {"stop_reason": "tool_use", "stop_sequence": null}',
        b'"delta": {"stop_reason": "tool_use", "stop_sequence": null, "container": '
        + json.dumps(container).encode()
        + b"}",
    )


@pytest.mark.asyncio
async def test_a_programmatic_tool_call_goes_back_with_its_caller(llm_server: LLMServer) -> None:
    step = ptc_step()
    sdk = sdk_message(step)
    await run_turns(llm_server, [step, answer("Sunny.")], ["Oslo?"], tools=[lookup])
    second = llm_server.requests[1]
    assert body_problems("anthropic", second.json) == []
    assert assistant_contents(second) == [[b.to_dict() for b in sdk.content]]


@pytest.mark.asyncio
async def test_a_programmatic_tool_call_result_goes_to_its_container(
    llm_server: LLMServer,
) -> None:
    step = ptc_step()
    sdk = sdk_message(step)
    assert sdk.container is not None
    await run_turns(llm_server, [step, answer("Sunny.")], ["Oslo?"], tools=[lookup])
    second = llm_server.requests[1]
    assert second.body.get("container") == sdk.container.id
