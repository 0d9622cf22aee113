"""The OpenAI Responses API path end to end, over real HTTP.

Scripted Responses SSE bodies (built to the shapes of the ``openai`` package's
``ResponseStreamEvent`` types, as OpenAI streams them: ``output_item.added``,
deltas, ``.done`` events, ``output_item.done``, then ``response.completed`` /
``response.incomplete`` with the whole output) are served by the tests' raw
recording server (``tests/sources/_raw_server.py``) to an
:class:`~rafrx.sources.clients.OpenAIResponsesClient`, alone or under an
:class:`~rafrx.agent.Agent`. What rafrx reads is checked against openai-python's
own accumulator (``ResponseStreamState``); what it sends next is checked against
the SDK's request TypedDicts (``tests/test_sdk_request_types.sdk_problems``) and
against the rule that the output items of a turn go back as they came: in their
order, with their ids, their types and their contents.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import attrs
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import omit
from openai._models import construct_type as openai_construct
from openai._streaming import SSEDecoder as OpenAISSEDecoder
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import FunctionToolParam, ResponseStreamEvent

import rafrx
from rafrx import ChatMessage, collect_agent_response, convert
from rafrx.agent import Agent
from rafrx.errors import ProviderError, RafrxError
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider, is_new
from rafrx.messages import MessageRole, MessageSource, ToolCall
from rafrx.operators import aggregate
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources.clients import OpenAIResponsesClient
from rafrx.tools import Tool, ToolApprovalResponse, tool
from tests.sources._raw_server import KEY, USER, Seen, raw_server
from tests.test_sdk_request_types import body_problems, sdk_problems

GUARD = 10.0  # seconds: a guard against hangs only
MODEL = "o4-mini"

HYPOTHESIS = settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# ================================================================ SSE bodies


def _event(data: dict[str, Any], *, named: bool = True) -> str:
    name = f"event: {data['type']}\n" if named else ""
    return f"{name}data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def reasoning(
    item_id: str, *summary: str, encrypted: str | None = "ENC", content: Sequence[str] = ()
) -> dict[str, Any]:
    """A finished ``reasoning`` output item (``encrypted_content`` as ``include`` asks)."""
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": s} for s in summary],
    }
    if content:
        item["content"] = [{"type": "reasoning_text", "text": c} for c in content]
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def message(item_id: str, *texts: str, refusal: bool = False) -> dict[str, Any]:
    """A finished assistant ``message`` output item."""
    parts = [
        {"type": "refusal", "refusal": t}
        if refusal
        else {"type": "output_text", "text": t, "annotations": [], "logprobs": []}
        for t in texts
    ]
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": parts,
    }


def call(item_id: str, call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """A finished ``function_call`` output item (``arguments``: a JSON string or a value)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": raw,
        "status": "completed",
    }


def custom_call(item_id: str, call_id: str, name: str, text: str) -> dict[str, Any]:
    """A finished ``custom_tool_call`` output item (a custom tool's free-form input)."""
    return {
        "type": "custom_tool_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "input": text,
        "status": "completed",
    }


def _response(response_id: str, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }


def usage(
    prompt: int, completion: int, *, reasoning_tokens: int = 0, cached: int = 0
) -> dict[str, Any]:
    """A Responses ``usage`` object as OpenAI sends it (both details, always)."""
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": prompt + completion,
    }


def item_events(index: int, item: dict[str, Any], size: int = 3) -> list[dict[str, Any]]:
    """The events OpenAI streams for one output item, ``output_item.added`` to ``.done``."""
    kind, item_id = item["type"], item["id"]
    at = {"item_id": item_id, "output_index": index}
    events: list[dict[str, Any]] = []
    if kind == "reasoning":
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {"type": "reasoning", "id": item_id, "summary": []},
            }
        )
        for n, part in enumerate(item["summary"]):
            where = {**at, "summary_index": n}
            blank = {"type": "summary_text", "text": ""}
            events.append({"type": "response.reasoning_summary_part.added", **where, "part": blank})
            events += [
                {"type": "response.reasoning_summary_text.delta", **where, "delta": piece}
                for piece in _pieces(part["text"], size)
            ]
            events.append(
                {"type": "response.reasoning_summary_text.done", **where, "text": part["text"]}
            )
            events.append({"type": "response.reasoning_summary_part.done", **where, "part": part})
        for n, part in enumerate(item.get("content") or ()):
            where = {**at, "content_index": n}
            events += [
                {"type": "response.reasoning_text.delta", **where, "delta": piece}
                for piece in _pieces(part["text"], size)
            ]
            events.append({"type": "response.reasoning_text.done", **where, "text": part["text"]})
    elif kind == "message":
        added = {**item, "status": "in_progress", "content": []}
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        for n, part in enumerate(item["content"]):
            where = {**at, "content_index": n}
            refusal = part["type"] == "refusal"
            empty: dict[str, Any] = (
                {"type": "refusal", "refusal": ""}
                if refusal
                else {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            )
            events.append({"type": "response.content_part.added", **where, "part": empty})
            whole = part["refusal"] if refusal else part["text"]
            for piece in _pieces(whole, size):
                if refusal:
                    events.append({"type": "response.refusal.delta", **where, "delta": piece})
                else:
                    events.append(
                        {
                            "type": "response.output_text.delta",
                            **where,
                            "delta": piece,
                            "logprobs": [],
                        }
                    )
            if refusal:
                events.append({"type": "response.refusal.done", **where, "refusal": whole})
            else:
                events.append(
                    {"type": "response.output_text.done", **where, "text": whole, "logprobs": []}
                )
            events.append({"type": "response.content_part.done", **where, "part": part})
    elif kind == "function_call":
        added = {**item, "arguments": "", "status": "in_progress"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        events += [
            {"type": "response.function_call_arguments.delta", **at, "delta": piece}
            for piece in _pieces(item["arguments"], size)
        ]
        events.append(
            {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]}
        )
    elif kind == "custom_tool_call":
        added = {**item, "input": "", "status": "in_progress"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        events += [
            {"type": "response.custom_tool_call_input.delta", **at, "delta": piece}
            for piece in _pieces(item["input"], size)
        ]
        events.append(
            {"type": "response.custom_tool_call_input.done", **at, "input": item["input"]}
        )
    else:  # a server tool's item, an MCP approval request ...
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def numbered(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(e) for e in events]
    for n, event in enumerate(out):
        event["sequence_number"] = n
    return out


def sse_body(events: Iterable[dict[str, Any]], *, named: bool = True) -> bytes:
    return "".join(_event(e, named=named) for e in numbered(events)).encode()


def head(response_id: str = "resp_1") -> list[dict[str, Any]]:
    start = _response(response_id, "in_progress", [])
    return [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]


def opened(
    calls: list[dict[str, Any]], size: int
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The events opening ``calls`` (after :func:`head`), and per call its argument
    deltas of ``size`` characters, for a test to interleave."""
    events = head()
    for index, item in enumerate(calls):
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "arguments": "", "status": "in_progress"},
            }
        )
    queues = [
        [
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": index,
                "delta": piece,
            }
            for piece in _pieces(item["arguments"], size)
        ]
        for index, item in enumerate(calls)
    ]
    return events, queues


def completed(
    output: list[dict[str, Any]], used: dict[str, Any] | None = None, response_id: str = "resp_1"
) -> dict[str, Any]:
    final = {**_response(response_id, "completed", output), "usage": used}
    return {"type": "response.completed", "response": final}


def incomplete(
    output: list[dict[str, Any]],
    reason: str,
    used: dict[str, Any] | None = None,
    response_id: str = "resp_1",
) -> dict[str, Any]:
    final = {
        **_response(response_id, "incomplete", output),
        "usage": used,
        "incomplete_details": {"reason": reason},
    }
    return {"type": "response.incomplete", "response": final}


def turn(
    *output: dict[str, Any],
    used: dict[str, Any] | None = None,
    response_id: str = "resp_1",
    size: int = 3,
) -> bytes:
    """A whole completed response streamed as OpenAI streams it."""
    events = head(response_id)
    for index, item in enumerate(output):
        events += item_events(index, item, size)
    events.append(completed(list(output), used, response_id))
    return sse_body(events)


# ================================================================ oracles


def sdk_final(chunks: Iterable[bytes]) -> Any:
    """openai-python's reading of a body: ``ResponseStreamState``'s final response."""
    state: Any = ResponseStreamState(input_tools=omit, text_format=omit)
    final = None
    for sse in OpenAISSEDecoder().iter_bytes(iter(chunks)):
        raw = openai_construct(type_=ResponseStreamEvent, value=sse.json())
        for event in state.handle_event(raw):
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
    assert final is not None
    return final


def sdk_calls(final: Any) -> list[tuple[str, str, Any]]:
    return [
        (o.call_id, o.name, json.loads(o.arguments or "{}"))
        for o in final.output
        if o.type == "function_call"
    ]


def sdk_text(final: Any) -> str:
    return "".join(
        part.text if part.type == "output_text" else part.refusal
        for o in final.output
        if o.type == "message"
        for part in o.content
    )


def read(chunks: Sequence[bytes] | bytes) -> AgentResponse:
    """rafrx's reading of a body, without HTTP (``from_sse`` takes chunk lists)."""
    body = [chunks] if isinstance(chunks, bytes) else list(chunks)
    return rafrx.from_sse(body, "openai-responses").pipe(convert(), aggregate()).run()


def input_kinds(items: Sequence[dict[str, Any]]) -> list[str]:
    return [str(i.get("type") or i.get("role")) for i in items]


# ================================================================ HTTP plumbing

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def serving(*bodies: bytes) -> Handler:
    """A handler answering the n-th request with the n-th body (then a plain reply)."""
    queue = list(bodies)
    last = turn(message("msg_last", "(no more scripted turns)"), response_id="resp_last")

    async def handle(request: web.Request) -> web.StreamResponse:
        body = queue.pop(0) if queue else last
        return web.Response(body=body, content_type="text/event-stream")

    return handle


@attrs.define
class Run:
    """What a scripted agent turn (or several) did."""

    responses: list[AgentResponse]
    seen: list[Seen]

    def body(self, n: int) -> dict[str, Any]:
        body = self.seen[n].body
        assert isinstance(body, dict)
        return body

    def input(self, n: int) -> list[dict[str, Any]]:
        items = self.body(n)["input"]
        assert isinstance(items, list)
        return items


async def agent_run(
    bodies: Sequence[bytes],
    prompts: Sequence[str] = ("Go.",),
    *,
    tools: Sequence[Tool] = (),
    client_params: dict[str, Any] | None = None,
    **agent_kwargs: Any,
) -> Run:
    """Run an agent's turns (one per prompt) against a server replaying ``bodies``."""
    responses: list[AgentResponse] = []
    async with (
        raw_server(serving(*bodies)) as (url, seen),
        OpenAIResponsesClient(url, KEY, model=MODEL, **(client_params or {})) as client,
    ):
        agent = Agent(client, tools=tools, **agent_kwargs)
        for prompt in prompts:
            responses.append(await asyncio.wait_for(agent.send(prompt), GUARD))
    return Run(responses, seen)


async def one_call(
    body: bytes,
    messages: Sequence[ChatMessage] = USER,
    tools: Sequence[Any] = (),
    **params: Any,
) -> tuple[AgentResponse | None, RafrxError | None, list[Seen]]:
    """One client call over HTTP: its response or its error, and the requests seen."""
    async with (
        raw_server(serving(body)) as (url, seen),
        OpenAIResponsesClient(url, KEY, model=MODEL) as client,
    ):
        try:
            updates = client.stream(messages, tools or None, **params).pipe(convert())
            response = await asyncio.wait_for(collect_agent_response(updates), GUARD)
        except RafrxError as error:
            return None, error, seen
    return response, None, seen


# ================================================================ tools


CALLS: list[tuple[str, Any]] = []  # what the tools below were run with, in order


@tool
def lookup(city: str) -> str:
    """Look a city's weather up."""
    CALLS.append(("lookup", city))
    return f"{city}: sunny"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    CALLS.append(("add", (a, b)))
    return a + b


@tool
def run_code(input: str) -> str:
    """Run Python code (a custom tool: its input is the code itself)."""
    CALLS.append(("run_code", input))
    return f"ran {len(input)} characters"


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (asks first)."""
    CALLS.append(("delete_file", path))
    return f"deleted {path}"


@tool(strict=True)
def search(query: str, limit: int = 5) -> str:
    """Search the docs.

    Args:
        query: What to look for.
        limit: How many hits at most.
    """
    return f"{limit} hits for {query}"


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


# ================================================================ one call: what rafrx reads


@pytest.mark.asyncio
async def test_text_reasoning_and_usage_over_http_agree_with_the_sdk() -> None:
    body = turn(
        reasoning("rs_1", "Think about ", "the weather.", encrypted="gAAAA-enc"),
        message("msg_1", "It is ", "sunny in Paris."),
        used=usage(120, 48, reasoning_tokens=32, cached=64),
        response_id="resp_text",
    )
    response, error, seen = await one_call(body)
    assert error is None
    assert response is not None
    final = sdk_final([body])
    assert response.text == sdk_text(final) == "It is sunny in Paris."
    assert response.reasoning_text == "Think about the weather."
    assert (response.id, response.model) == ("resp_text", MODEL)
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(120, 48, 168, reasoning_tokens=32, cached_tokens=64)
    assert final.usage is not None
    assert response.usage.cached_tokens == final.usage.input_tokens_details.cached_tokens
    assert response.usage.reasoning_tokens == final.usage.output_tokens_details.reasoning_tokens
    assert seen[0].path == "/v1/responses"
    assert seen[0].body["stream"] is True


@pytest.mark.asyncio
async def test_parallel_calls_interleaved_by_output_index_are_all_kept() -> None:
    """Three calls whose argument deltas come interleaved (as a server streaming them
    concurrently sends them, each event naming its item and output index)."""
    calls = [
        call("fc_a", "call_a", "lookup", {"city": "Paris", "note": 'a "q" \\ é'}),
        call("fc_b", "call_b", "add", {"a": 2, "b": 3}),
        call("fc_c", "call_c", "lookup", {"city": "東京"}),
    ]
    events, queues = opened(calls, 2)
    while any(queues):  # round robin over the calls
        for queue in queues:
            if queue:
                events.append(queue.pop(0))
    for index in (2, 0, 1):  # finished out of order
        item = calls[index]
        where = {"item_id": item["id"], "output_index": index}
        events.append(
            {
                "type": "response.function_call_arguments.done",
                **where,
                "arguments": item["arguments"],
            }
        )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append(completed(calls, usage(10, 20)))
    body = sse_body(events)
    response, error, _ = await one_call(body)
    assert error is None
    assert response is not None
    got = [(c.id, c.name, c.arguments) for c in response.tool_calls]
    assert got == sdk_calls(sdk_final([body]))
    assert got[0] == ("call_a", "lookup", {"city": "Paris", "note": 'a "q" \\ é'})
    assert all(c.complete for c in response.tool_calls)
    assert all(c.error is None for c in response.tool_calls)
    assert response.finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("reason", "finish"),
    [("max_output_tokens", FinishReason.LENGTH), ("content_filter", FinishReason.CONTENT_FILTER)],
)
async def test_incomplete_response_ends_with_its_reason_and_keeps_the_text(
    reason: str, finish: FinishReason
) -> None:
    cut = message("msg_1", "The answer is")
    cut["status"] = "incomplete"
    events = [*head(), *item_events(0, cut)]
    events.append(incomplete([cut], reason, usage(9, 4)))
    body = sse_body(events)
    response, error, _ = await one_call(body)
    assert error is None
    assert response is not None
    assert response.text == sdk_text(sdk_final([body])) == "The answer is"
    assert response.finish_reason is finish
    assert response.usage == Usage(9, 4, 13, reasoning_tokens=0, cached_tokens=0)


@pytest.mark.asyncio
async def test_incomplete_response_keeps_finished_calls_and_cuts_the_open_one() -> None:
    """max_output_tokens while the second call's arguments stream: the first call (done)
    is whole, the second is cut short (never to run), the finish is LENGTH."""
    first = call("fc_1", "call_1", "lookup", {"city": "Oslo"})
    second = call("fc_2", "call_2", "lookup", {"city": "Bergen"})
    events = [*head(), *item_events(0, first)]
    events.append(
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**second, "arguments": "", "status": "in_progress"},
        }
    )
    events.append(
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_2",
            "output_index": 1,
            "delta": '{"city": "Ber',
        }
    )
    cut = {**second, "arguments": '{"city": "Ber', "status": "incomplete"}
    events.append(incomplete([first, cut], "max_output_tokens", usage(5, 50)))
    response, error, _ = await one_call(sse_body(events))
    assert error is None
    assert response is not None
    assert response.finish_reason is FinishReason.LENGTH
    whole, open_call = response.tool_calls
    assert (whole.id, whole.arguments, whole.complete) == ("call_1", {"city": "Oslo"}, True)
    assert (open_call.id, open_call.complete) == ("call_2", False)
    assert open_call.raw_arguments == '{"city": "Ber'
    assert open_call.partial_value == {"city": "Ber"}


@pytest.mark.asyncio
async def test_incomplete_response_keeps_a_message_sent_only_in_its_final_output() -> None:
    """A minimal compatible server sends no deltas: the text is in the terminal event's
    output only. rafrx reads it from ``response.completed`` (and from a completed event
    whose status is ``incomplete``); ``response.incomplete`` must keep it too."""
    text = message("msg_1", "Partial answer")
    via_completed = read(sse_body([*head(), completed([text])]))
    assert via_completed.text == "Partial answer"
    vllm = completed([text])
    vllm["response"] = {
        **vllm["response"],
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    assert read(sse_body([*head(), vllm])).text == "Partial answer"
    body = sse_body([*head(), incomplete([text], "max_output_tokens")])
    response, error, _ = await one_call(body)
    assert error is None
    assert response is not None
    assert response.finish_reason is FinishReason.LENGTH
    assert response.text == sdk_text(sdk_final([body])) == "Partial answer"


@pytest.mark.asyncio
async def test_response_failed_is_a_typed_error_keeping_the_text_and_the_finished_call() -> None:
    done_call = call("fc_1", "call_1", "lookup", {"city": "Rome"})
    events = [*head(), *item_events(0, message("msg_1", "Checking.")), *item_events(1, done_call)]
    failed = _response("resp_1", "failed", [message("msg_1", "Checking."), done_call])
    failed["error"] = {"code": "server_error", "message": "The server had an error."}
    events.append({"type": "response.failed", "response": failed})
    response, error, _ = await one_call(sse_body(events))
    assert response is None
    assert isinstance(error, ProviderError)
    assert (error.message, error.code, error.retryable) == (
        "The server had an error.",
        "server_error",
        True,
    )
    assert error.partial is not None
    assert error.partial.text == "Checking."
    assert error.partial.finish_reason is FinishReason.ERROR
    # The call had ended, but its response failed: kept complete, with its parsed
    # arguments, and never run (README: "A failed stream runs no call, but a call whose
    # arguments had ended whole before the failure ... is not cut").
    [kept] = error.partial.tool_calls
    assert (kept.id, kept.name, kept.complete) == ("call_1", "lookup", True)
    assert (kept.arguments, kept.error) == ({"city": "Rome"}, None)
    assert error.partial.tool_messages == ()
    assert error.partial.id == "resp_1"


@pytest.mark.asyncio
async def test_flat_error_event_has_no_event_tag_as_its_error_type() -> None:
    """openai-python's ``ResponseErrorEvent`` is ``{type: "error", code, message,
    param}``: its ``type`` says which event it is. ``response.failed`` (which carries only
    a code) takes the code as the error type; the error event must not give "error"."""
    events = [*head(), *item_events(0, message("msg_1", "Hel"))[:3]]
    events.append(
        {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down.", "param": None}
    )
    response, error, _ = await one_call(sse_body(events))
    assert response is None
    assert isinstance(error, ProviderError)
    assert (error.message, error.code, error.retryable) == (
        "Slow down.",
        "rate_limit_exceeded",
        True,
    )
    assert error.partial is not None
    assert error.partial.text == "Hel"
    assert error.error_type in (None, "rate_limit_exceeded")


@pytest.mark.asyncio
async def test_custom_tool_call_input_is_read_exactly_and_ends_as_tool_calls() -> None:
    code = 'print("héllo")\nx = {"a": [1, 2]}  # \\n and "quotes" \U0001f600\n'
    body = turn(custom_call("ctc_1", "call_c", "run_code", code), size=4)
    response, error, _ = await one_call(body)
    assert error is None
    assert response is not None
    [got] = response.tool_calls
    assert (got.id, got.name, got.arguments, got.complete) == (
        "call_c",
        "run_code",
        {"input": code},
        True,
    )
    assert response.finish_reason is FinishReason.TOOL_CALLS


# ================================================================ property tests


_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\r"),
    max_size=25,
)


@st.composite
def outputs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A turn's output items: reasoning first, then messages and calls in any order."""
    items: list[dict[str, Any]] = []
    for n in range(draw(st.integers(0, 2))):
        parts = draw(st.lists(_TEXT, min_size=1, max_size=2))
        items.append(reasoning(f"rs_{n}", *parts, encrypted=draw(st.sampled_from([None, "E"]))))
    rest: list[dict[str, Any]] = []
    for n in range(draw(st.integers(0, 2))):
        rest.append(message(f"msg_{n}", *draw(st.lists(_TEXT, min_size=1, max_size=2))))
    for n in range(draw(st.integers(0, 3))):
        arguments = draw(
            st.dictionaries(
                st.text(max_size=4), st.one_of(st.integers(), _TEXT, st.booleans()), max_size=3
            )
        )
        rest.append(call(f"fc_{n}", f"call_{n}", "lookup", arguments))
    return items + list(draw(st.permutations(rest)))


def _split_at(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts})
    bounds = [0, *points, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def _summary(response: AgentResponse) -> tuple[Any, ...]:
    transcript = [(m.role, m.content, m.provider_data) for m in response.turn_transcript]
    calls = [(c.id, c.name, c.arguments) for c in response.tool_calls]
    return (response.text, response.reasoning_text, calls, response.finish_reason, transcript)


@HYPOTHESIS
@given(
    output=outputs(),
    size=st.integers(1, 7),
    named=st.booleans(),
    cuts=st.lists(st.integers(0, 10**6), max_size=12),
)
def test_splitting_the_body_anywhere_changes_nothing(
    output: list[dict[str, Any]], size: int, named: bool, cuts: list[int]
) -> None:
    events = head()
    for index, item in enumerate(output):
        events += item_events(index, item, size)
    events.append(completed(output, usage(3, 4)))
    body = sse_body(events, named=named)
    whole = read(body)
    split = read(_split_at(body, cuts))
    bytewise = read([body[i : i + 1] for i in range(len(body))]) if len(body) < 4000 else split
    assert _summary(split) == _summary(whole) == _summary(bytewise)
    final = sdk_final(_split_at(body, cuts))
    assert whole.text == sdk_text(final)
    assert [(c.id, c.name, c.arguments) for c in whole.tool_calls] == sdk_calls(final)


@HYPOTHESIS
@given(
    arguments=st.lists(
        st.dictionaries(st.text(max_size=5), st.one_of(_TEXT, st.integers()), max_size=3),
        min_size=2,
        max_size=4,
    ),
    size=st.integers(1, 5),
    order=st.randoms(use_true_random=False),
)
def test_interleaved_argument_deltas_agree_with_the_sdk(
    arguments: list[dict[str, Any]], size: int, order: Any
) -> None:
    calls = [call(f"fc_{n}", f"call_{n}", "lookup", a) for n, a in enumerate(arguments)]
    events, queues = opened(calls, size)
    while any(queues):
        queue = order.choice([q for q in queues if q])
        events.append(queue.pop(0))
    for index, item in enumerate(calls):
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append(completed(calls))
    body = sse_body(events)
    response = read(body)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == sdk_calls(
        sdk_final([body])
    )
    assert [c.arguments for c in response.tool_calls] == arguments


@HYPOTHESIS
@given(code=st.text(max_size=60), size=st.integers(1, 6))
def test_custom_tool_input_of_any_text_goes_back_exactly(code: str, size: int) -> None:
    """Whatever the custom tool's input (quotes, backslashes, controls, astral
    characters), cut anywhere, it is read exactly and goes back as the same input."""
    response = read(turn(custom_call("ctc_1", "call_c", "run_code", code), size=size))
    [got] = response.tool_calls
    assert got.arguments == {"input": code}
    transcript = [*response.turn_transcript, ChatMessage.tool("ok", "call_c")]
    client = OpenAIResponsesClient("http://127.0.0.1:1", KEY, model=MODEL)
    items = client._payload(transcript, [])["input"]
    sent = [i for i in items if i.get("type") == "custom_tool_call"]
    assert sent == [
        {"type": "custom_tool_call", "call_id": "call_c", "name": "run_code", "input": code}
    ]
    assert items[-1] == {"type": "custom_tool_call_output", "call_id": "call_c", "output": "ok"}


# ================================================================ the request: tools


@pytest.mark.asyncio
async def test_rafrx_tools_are_sent_in_the_responses_function_shape() -> None:
    _, error, seen = await one_call(turn(message("m", "ok")), tools=[lookup, search])
    assert error is None
    body = seen[0].body
    assert body_problems("openai-responses", body) == []
    plain, strict = body["tools"]
    assert plain == {
        "type": "function",
        "name": "lookup",
        "description": "Look a city's weather up.",
        "parameters": lookup.to_responses()["parameters"],
        "strict": False,
    }
    assert "function" not in plain  # (the chat shape nests it)
    assert sdk_problems(plain, FunctionToolParam) == []
    assert strict["type"] == "function"
    assert strict["strict"] is True
    params = strict["parameters"]
    assert params["additionalProperties"] is False
    assert sorted(params["required"]) == ["limit", "query"]  # strict: every property required
    assert sdk_problems(strict, FunctionToolParam) == []


@pytest.mark.asyncio
async def test_tool_mappings_in_other_shapes_keep_their_strict_flag() -> None:
    chat_shape = {
        "type": "function",
        "function": {
            "name": "now",
            "description": "The time.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            "strict": True,
        },
    }
    anthropic_shape = {
        "name": "echo",
        "description": "Echo.",
        "input_schema": {"type": "object", "properties": {"t": {"type": "string"}}},
    }
    _, error, seen = await one_call(turn(message("m", "ok")), tools=[chat_shape, anthropic_shape])
    assert error is None
    now, echo = seen[0].body["tools"]
    assert (now["type"], now["name"], now["strict"]) == ("function", "now", True)
    assert (echo["name"], echo["strict"], echo["parameters"]) == (
        "echo",
        False,
        anthropic_shape["input_schema"],
    )
    assert body_problems("openai-responses", seen[0].body) == []


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "given_tool",
    [
        {"type": "custom", "name": "run_code", "description": "Run Python code."},
        {"type": "web_search"},
    ],
    ids=["custom", "web_search"],
)
async def test_responses_tool_mappings_of_other_types_go_as_they_are(
    given_tool: dict[str, Any],
) -> None:
    """The dialect reads custom tool calls and hosted tools' items, and the client sends
    them back; the tools that make them must be offerable as the API defines them
    (openai-python ``CustomToolParam`` / ``WebSearchToolParam``)."""
    try:
        _, error, seen = await one_call(turn(message("m", "ok")), tools=[given_tool])
    except KeyError as exc:  # raised by client.stream() itself
        pytest.fail(f"the tool {given_tool!r} could not be offered: KeyError {exc}")
    assert error is None
    [sent] = seen[0].body["tools"]
    assert sent == given_tool


# ================================================================ agent: multi-step loops


@pytest.mark.asyncio
async def test_three_step_loop_replays_every_item_in_order_with_its_id() -> None:
    step1 = turn(
        reasoning("rs_1", "Need Paris.", encrypted="E1"),
        call("fc_1", "call_1", "lookup", {"city": "Paris"}),
        response_id="resp_1",
    )
    step2 = turn(
        reasoning("rs_2", "Now add.", encrypted="E2"),
        message("msg_2", "Adding."),
        call("fc_2", "call_2", "add", {"a": 2, "b": 3}),
        response_id="resp_2",
    )
    step3 = turn(
        reasoning("rs_3", "Done.", encrypted="E3"),
        message("msg_3", "Sunny; 5."),
        response_id="resp_3",
    )
    run = await agent_run([step1, step2, step3], tools=[lookup, add])
    assert [response.text for response in run.responses] == ["Adding.Sunny; 5."]
    assert CALLS == [("lookup", "Paris"), ("add", (2, 3))]
    assert len(run.seen) == 3
    for n in range(3):
        assert body_problems("openai-responses", run.body(n)) == []
    third = run.input(2)
    assert [(i.get("type") or i.get("role"), i.get("id")) for i in third] == [
        ("user", None),
        ("reasoning", "rs_1"),
        ("function_call", "fc_1"),
        ("function_call_output", None),
        ("reasoning", "rs_2"),
        ("message", "msg_2"),
        ("function_call", "fc_2"),
        ("function_call_output", None),
    ]
    assert third[1] == reasoning("rs_1", "Need Paris.", encrypted="E1")  # whole, as it came
    assert (third[2]["call_id"], third[3]["call_id"]) == ("call_1", "call_1")
    assert third[3]["output"] == "Paris: sunny"
    assert third[5]["content"][0]["text"] == "Adding."
    assert json.loads(third[6]["arguments"]) == {"a": 2, "b": 3}
    assert third[7] == {"type": "function_call_output", "call_id": "call_2", "output": "5"}


@pytest.mark.asyncio
async def test_parallel_calls_run_and_go_back_grouped_after_their_reasoning() -> None:
    step1 = turn(
        reasoning("rs_1", "Three things."),
        call("fc_1", "call_1", "lookup", {"city": "Lyon"}),
        call("fc_2", "call_2", "add", {"a": 1, "b": 1}),
        call("fc_3", "call_3", "lookup", {"city": "Nice"}),
    )
    run = await agent_run([step1, turn(message("msg_9", "All done."))], tools=[lookup, add])
    assert sorted(CALLS, key=str) == sorted(
        [("lookup", "Lyon"), ("add", (1, 1)), ("lookup", "Nice")], key=str
    )
    second = run.input(1)
    assert input_kinds(second) == [
        "user",
        "reasoning",
        *["function_call"] * 3,
        *["function_call_output"] * 3,
    ]
    assert [i.get("id") for i in second[2:5]] == ["fc_1", "fc_2", "fc_3"]
    outputs_ = {i["call_id"]: i["output"] for i in second[5:]}
    assert outputs_ == {"call_1": "Lyon: sunny", "call_2": "2", "call_3": "Nice: sunny"}
    assert [i["call_id"] for i in second[5:]] == ["call_1", "call_2", "call_3"]
    assert body_problems("openai-responses", run.body(1)) == []


@pytest.mark.asyncio
async def test_custom_and_function_calls_of_one_turn_go_back_as_their_own_item_types() -> None:
    code = 'print("a\\tb")\n'
    step1 = turn(
        reasoning("rs_1", "Run it and look it up."),
        custom_call("ctc_1", "call_c", "run_code", code),
        call("fc_1", "call_f", "lookup", {"city": "Porto"}),
    )
    run = await agent_run([step1, turn(message("msg_2", "Done."))], tools=[run_code, lookup])
    second = run.input(1)
    assert body_problems("openai-responses", run.body(1)) == []
    assert [(i.get("type") or i.get("role"), i.get("id")) for i in second] == [
        ("user", None),
        ("reasoning", "rs_1"),
        ("custom_tool_call", "ctc_1"),
        ("function_call", "fc_1"),
        ("custom_tool_call_output", None),
        ("function_call_output", None),
    ]
    assert second[2]["input"] == code
    assert "arguments" not in second[2]
    assert second[4] == {
        "type": "custom_tool_call_output",
        "call_id": "call_c",
        "output": f"ran {len(code)} characters",
    }
    assert second[5]["call_id"] == "call_f"


@pytest.mark.asyncio
async def test_store_false_asks_for_encrypted_content_and_drops_what_cannot_be_resolved() -> None:
    """store=False: the request asks for ``reasoning.encrypted_content``; a reasoning item
    that came without it cannot be sent (the API would look it up by id), and the call
    paired with it then goes without its id; one that has it goes whole."""
    step1 = turn(
        reasoning("rs_a", "First.", encrypted=None),
        call("fc_a", "call_a", "lookup", {"city": "Graz"}),
        reasoning("rs_b", "Second.", encrypted="ENC_B"),
        call("fc_b", "call_b", "lookup", {"city": "Linz"}),
    )
    run = await agent_run(
        [step1, turn(message("msg_2", "Both sunny."))],
        tools=[lookup],
        client_params={"store": False, "include": ["message.output_text.logprobs"]},
    )
    first, second = run.body(0), run.body(1)
    for body in (first, second):
        assert body["store"] is False
        assert body["include"] == ["message.output_text.logprobs", "reasoning.encrypted_content"]
        assert body_problems("openai-responses", body) == []
    items = second["input"]
    assert [(i.get("type") or i.get("role"), i.get("id")) for i in items] == [
        ("user", None),
        ("function_call", None),
        ("reasoning", "rs_b"),
        ("function_call", "fc_b"),
        ("function_call_output", None),
        ("function_call_output", None),
    ]
    assert items[2]["encrypted_content"] == "ENC_B"


@pytest.mark.asyncio
async def test_usage_of_a_multi_step_turn_is_the_sum_of_its_calls() -> None:
    step1 = turn(
        reasoning("rs_1", "Look."),
        call("fc_1", "call_1", "lookup", {"city": "Bern"}),
        used=usage(100, 30, reasoning_tokens=20, cached=0),
    )
    step2 = turn(message("msg_2", "Sunny."), used=usage(150, 10, reasoning_tokens=4, cached=96))
    run = await agent_run([step1, step2], tools=[lookup])
    [response] = run.responses
    assert response.usage == Usage(250, 40, 290, reasoning_tokens=24, cached_tokens=96)
    assert response.finish_reason is FinishReason.STOP


@pytest.mark.asyncio
async def test_incomplete_step_ends_the_turn_with_its_reason_and_its_text() -> None:
    step1 = turn(reasoning("rs_1", "Look."), call("fc_1", "call_1", "lookup", {"city": "Ghent"}))
    cut = message("msg_2", "Ghent is sun")
    cut["status"] = "incomplete"
    step2 = sse_body(
        [
            *head("resp_2"),
            *item_events(0, cut),
            incomplete([cut], "max_output_tokens", usage(40, 8), "resp_2"),
        ]
    )
    run = await agent_run([step1, step2], tools=[lookup])
    [response] = run.responses
    assert len(run.seen) == 2  # no third call: the model did not ask for a tool
    assert response.finish_reason is FinishReason.LENGTH
    assert response.text == "Ghent is sun"
    assert response.turn_transcript[-1].content == "Ghent is sun"
    assert response.id == "resp_2"


@pytest.mark.asyncio
async def test_failed_step_raises_with_the_earlier_steps_in_its_partial() -> None:
    step1 = turn(reasoning("rs_1", "Look."), call("fc_1", "call_1", "lookup", {"city": "Pisa"}))
    failed = _response("resp_2", "failed", [])
    failed["error"] = {"code": "context_length_exceeded", "message": "Too long."}
    started = item_events(0, message("msg_2", "Pisa is"), size=4)[:3]  # up to "Pisa"
    step2 = sse_body([*head("resp_2"), *started, {"type": "response.failed", "response": failed}])
    async with (
        raw_server(serving(step1, step2)) as (url, seen),
        OpenAIResponsesClient(url, KEY, model=MODEL) as client,
    ):
        agent = Agent(client, tools=[lookup])
        with pytest.raises(ProviderError) as info:
            await asyncio.wait_for(agent.send("Pisa?"), GUARD)
    error = info.value
    assert (error.code, error.retryable) == ("context_length_exceeded", False)
    assert len(seen) == 2
    assert error.partial is not None
    assert [c.id for c in error.partial.tool_calls] == ["call_1"]
    assert [m.content for m in error.partial.tool_messages] == ["Pisa: sunny"]
    assert error.partial.text == "Pisa"
    assert error.partial.interrupted
    assert error.partial.id == "resp_2"


@pytest.mark.asyncio
async def test_failed_step_partial_finishes_with_error_not_the_earlier_steps_reason() -> None:
    """A single failed call's partial says ``FinishReason.ERROR`` (ResponseAggregator.failed:
    "a provider's error event closes it with finish reason ERROR"); a turn whose last call
    failed after an earlier call asked for tools must say so too, not ``TOOL_CALLS``."""
    step1 = turn(reasoning("rs_1", "Look."), call("fc_1", "call_1", "lookup", {"city": "Bari"}))
    failed = _response("resp_2", "failed", [])
    failed["error"] = {"code": "server_error", "message": "Boom."}
    step2 = sse_body(
        [
            *head("resp_2"),
            *item_events(0, message("msg_2", "Bari"))[:3],
            {"type": "response.failed", "response": failed},
        ]
    )
    single, error, _ = await one_call(step2)
    assert single is None
    assert isinstance(error, ProviderError)
    assert error.partial is not None
    assert error.partial.finish_reason is FinishReason.ERROR  # one call: ERROR
    async with (
        raw_server(serving(step1, step2)) as (url, _),
        OpenAIResponsesClient(url, KEY, model=MODEL) as client,
    ):
        with pytest.raises(ProviderError) as info:
            await asyncio.wait_for(Agent(client, tools=[lookup]).send("Bari?"), GUARD)
    partial = info.value.partial
    assert partial is not None
    assert partial.interrupted
    assert partial.finish_reason is FinishReason.ERROR


@pytest.mark.asyncio
async def test_response_failed_before_any_output_is_retried_and_the_retry_read() -> None:
    """``response.failed`` with a retryable code right after ``response.created`` (nothing
    delivered yet): a client with a retry policy sends the request again."""
    failed = _response("resp_1", "failed", [])
    failed["error"] = {"code": "server_error", "message": "Try again."}
    first = sse_body([*head(), {"type": "response.failed", "response": failed}])
    second = turn(message("msg_1", "Recovered."), response_id="resp_2")
    retry = rafrx.RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=False)
    async with (
        raw_server(serving(first, second)) as (url, seen),
        OpenAIResponsesClient(url, KEY, model=MODEL, retry=retry) as client,
    ):
        updates = client.stream(USER).pipe(convert())
        response = await asyncio.wait_for(collect_agent_response(updates), GUARD)
    assert len(seen) == 2
    assert seen[0].body == seen[1].body
    assert (response.id, response.text) == ("resp_2", "Recovered.")


# ================================================================ approvals


@pytest.mark.asyncio
@pytest.mark.parametrize("approved", [True, False])
async def test_a_tool_requiring_approval_asks_and_its_answer_goes_back(approved: bool) -> None:
    asked: list[ToolApprovalRequestEvent] = []

    def approver(request: ToolApprovalRequestEvent) -> bool | ToolApprovalResponse:
        asked.append(request)
        return True if approved else ToolApprovalResponse(request.call_id, False, "not today")

    step1 = turn(
        reasoning("rs_1", "Delete it."),
        call("fc_1", "call_del", "delete_file", {"path": "/tmp/x"}),
    )
    run = await agent_run(
        [step1, turn(message("msg_2", "OK."))], tools=[delete_file], approver=approver
    )
    assert [(r.call_id, r.name, r.arguments) for r in asked] == [
        ("call_del", "delete_file", {"path": "/tmp/x"})
    ]
    assert ([("delete_file", "/tmp/x")] if approved else []) == CALLS
    [response] = run.responses
    [result] = response.tool_messages
    assert result.is_error is not approved
    output = run.input(1)[-1]
    assert output["type"] == "function_call_output"
    assert output["call_id"] == "call_del"
    if approved:
        assert output["output"] == "deleted /tmp/x"
    else:
        assert output["output"].startswith("Error:")
        assert "not today" in output["output"]
    assert body_problems("openai-responses", run.body(1)) == []


@pytest.mark.asyncio
async def test_mcp_approval_request_item_becomes_an_approval_request_event() -> None:
    item = {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "name": "create_issue",
        "arguments": '{"title": "Bug"}',
        "server_label": "github",
    }
    body = turn(reasoning("rs_1", "Ask first."), item)
    async with (
        raw_server(serving(body)) as (url, _),
        OpenAIResponsesClient(url, KEY, model=MODEL) as client,
    ):
        results = client.stream(USER).pipe(convert())
        events: list[Any] = []
        done = asyncio.get_running_loop().create_future()
        results.subscribe(
            lambda r: events.extend(r.events),
            done.set_exception,
            lambda: done.set_result(None),
        )
        await asyncio.wait_for(done, GUARD)
    requests = [e for e in events if isinstance(e, ToolApprovalRequestEvent)]
    assert [(r.call_id, r.name, r.arguments) for r in requests] == [
        ("mcpr_1", "create_issue", {"title": "Bug"})
    ]
    assert "github" in requests[0].description


@pytest.mark.asyncio
async def test_mcp_approval_request_is_answered_through_the_agent_approver() -> None:
    """``ToolApprovalRequestEvent``: "answer through the agent's approver". For a remote
    MCP tool the answer is an ``mcp_approval_response`` input item naming the request's
    id (openai-python ``McpApprovalResponse``), and the request item goes back in its
    place, right after the reasoning item it is paired with."""
    item = {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "name": "create_issue",
        "arguments": '{"title": "Bug"}',
        "server_label": "github",
    }
    asked: list[str] = []

    def approver(request: ToolApprovalRequestEvent) -> bool:
        asked.append(request.call_id)
        return True

    run = await agent_run(
        [turn(reasoning("rs_1", "Ask first."), item), turn(message("msg_2", "Created."))],
        ["File the bug.", "Thanks."],
        approver=approver,
        history=InMemoryHistoryProvider(),
    )
    later = run.input(len(run.seen) - 1)
    at = next(n for n, i in enumerate(later) if i.get("id") == "rs_1")
    following = later[at + 1]
    assert following.get("id") == "mcpr_1", f"rs_1 is followed by {following}"
    assert asked == ["mcpr_1"]
    answers = [i for i in later if i.get("type") == "mcp_approval_response"]
    assert [(a["approval_request_id"], a["approve"]) for a in answers] == [("mcpr_1", True)]


# ================================================================ history


@attrs.define
class JSONHistory:
    """A history provider that keeps the conversation as JSON text (as a database row
    would): tuples come back as lists, enums as strings."""

    rows: list[str] = attrs.field(factory=list)

    async def load(self) -> Sequence[ChatMessage]:
        out = []
        for row in self.rows:
            data = json.loads(row)
            calls = data.pop("tool_calls")
            out.append(
                ChatMessage(
                    **{k: v for k, v in data.items() if k != "source"},
                    tool_calls=None if calls is None else [ToolCall(**c) for c in calls],
                    source=MessageSource.CHAT_HISTORY,
                )
            )
        return out

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        for m in messages:
            if is_new(m):
                self.rows.append(json.dumps(attrs.asdict(m, recurse=True)))


def _two_turn_bodies() -> list[bytes]:
    return [
        turn(
            reasoning("rs_1", "Look Kyoto up.", encrypted="E1"),
            call("fc_1", "call_1", "lookup", {"city": "Kyoto"}),
            response_id="resp_1",
        ),
        turn(
            reasoning("rs_2", "Answer.", encrypted="E2"),
            message("msg_2", "Kyoto is sunny."),
            response_id="resp_2",
        ),
        turn(message("msg_3", "Still sunny."), response_id="resp_3"),
    ]


@pytest.mark.asyncio
async def test_history_replays_the_previous_turn_items_in_the_next_turn() -> None:
    history = InMemoryHistoryProvider()
    run = await agent_run(
        _two_turn_bodies(),
        ["Kyoto?", "Tomorrow?"],
        tools=[lookup],
        history=history,
        instructions="Be brief.",
    )
    third = run.input(2)
    assert [(i.get("type") or i.get("role"), i.get("id")) for i in third] == [
        ("system", None),
        ("user", None),
        ("reasoning", "rs_1"),
        ("function_call", "fc_1"),
        ("function_call_output", None),
        ("reasoning", "rs_2"),
        ("message", "msg_2"),
        ("user", None),
    ]
    assert third[0]["content"] == "Be brief."
    assert third[6]["content"][0]["text"] == "Kyoto is sunny."
    assert third[-1]["content"] == "Tomorrow?"
    assert body_problems("openai-responses", run.body(2)) == []
    roles = [m.role for m in history.messages]
    assert roles == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]


@pytest.mark.asyncio
async def test_history_kept_as_json_sends_the_same_items_as_in_memory_history() -> None:
    memory = await agent_run(
        _two_turn_bodies(),
        ["Kyoto?", "Tomorrow?"],
        tools=[lookup],
        history=InMemoryHistoryProvider(),
    )
    stored = JSONHistory()
    as_json = await agent_run(
        _two_turn_bodies(), ["Kyoto?", "Tomorrow?"], tools=[lookup], history=stored
    )
    assert len(stored.rows) == 6
    assert as_json.input(2) == memory.input(2)
    assert body_problems("openai-responses", as_json.body(2)) == []


# ================================================================ the order items came in


@pytest.mark.asyncio
async def test_a_message_before_the_reasoning_item_goes_back_in_its_place() -> None:
    """Output [message msg_0, reasoning, message msg_1] must go back as those
    three items in that order, each message with its own text."""
    step1 = turn(
        message("msg_0", "First, "),
        reasoning("rs_1", "Then think."),
        message("msg_1", "then answer."),
        response_id="resp_1",
    )
    run = await agent_run(
        [step1, turn(message("msg_2", "More."))],
        ["Hi.", "More?"],
        history=InMemoryHistoryProvider(),
    )
    assert run.responses[0].text == "First, then answer."
    items = [i for i in run.input(1) if i.get("role") != "user"]
    texts = [
        (i.get("id"), i["content"] if isinstance(i["content"], str) else i["content"][0]["text"])
        for i in items
        if i.get("type", "message") == "message"
    ]
    assert [i.get("type", "message") for i in items] == ["message", "reasoning", "message"]
    assert texts[-1] == ("msg_1", "then answer.")  # never another item's text
    assert texts[0][1] == "First, "


@pytest.mark.asyncio
async def test_a_call_before_the_reasoning_item_goes_back_in_its_place() -> None:
    step1 = turn(
        call("fc_0", "call_0", "lookup", {"city": "Riga"}),
        reasoning("rs_1", "And one more."),
        call("fc_1", "call_1", "lookup", {"city": "Tartu"}),
    )
    run = await agent_run([step1, turn(message("msg_2", "Done."))], tools=[lookup])
    items = run.input(1)
    assert [(i.get("type") or i.get("role"), i.get("call_id")) for i in items] == [
        ("user", None),
        ("function_call", "call_0"),
        ("reasoning", None),
        ("function_call", "call_1"),
        ("function_call_output", "call_0"),
        ("function_call_output", "call_1"),
    ]


@pytest.mark.asyncio
async def test_messages_between_reasoning_items_go_back_each_with_its_own_text() -> None:
    step1 = turn(
        reasoning("rs_1", "One."),
        message("msg_1", "Part one. "),
        reasoning("rs_2", "Two."),
        message("msg_2", "Part ", "two."),
        call("fc_1", "call_1", "lookup", {"city": "Faro"}),
    )
    run = await agent_run([step1, turn(message("msg_3", "Done."))], tools=[lookup])
    items = run.input(1)
    assert [(i.get("type") or i.get("role"), i.get("id")) for i in items] == [
        ("user", None),
        ("reasoning", "rs_1"),
        ("message", "msg_1"),
        ("reasoning", "rs_2"),
        ("message", "msg_2"),
        ("function_call", "fc_1"),
        ("function_call_output", None),
    ]
    assert items[2]["content"][0]["text"] == "Part one. "
    assert "".join(p["text"] for p in items[4]["content"]) == "Part two."
    assert body_problems("openai-responses", run.body(1)) == []


@pytest.mark.asyncio
async def test_a_refusal_goes_back_as_a_refusal_part() -> None:
    step1 = turn(reasoning("rs_1", "Unsafe."), message("msg_1", "I can't help.", refusal=True))
    run = await agent_run(
        [step1, turn(message("msg_2", "OK."))],
        ["Do it.", "Why?"],
        history=InMemoryHistoryProvider(),
    )
    assert run.responses[0].text == "I can't help."
    sent = next(i for i in run.input(1) if i.get("id") == "msg_1")
    assert sent["content"] == [{"type": "refusal", "refusal": "I can't help."}]


@pytest.mark.asyncio
async def test_server_tool_item_goes_back_by_reference_in_its_place() -> None:
    search_item = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather"},
    }
    step1 = turn(
        reasoning("rs_1", "Search."),
        search_item,
        reasoning("rs_2", "Now call."),
        call("fc_1", "call_1", "lookup", {"city": "Kiel"}),
    )
    run = await agent_run([step1, turn(message("msg_2", "Done."))], tools=[lookup])
    items = run.input(1)
    assert [(i.get("type") or i.get("role"), i.get("id")) for i in items] == [
        ("user", None),
        ("reasoning", "rs_1"),
        ("item_reference", "ws_1"),
        ("reasoning", "rs_2"),
        ("function_call", "fc_1"),
        ("function_call_output", None),
    ]
    assert body_problems("openai-responses", run.body(1)) == []


@pytest.mark.asyncio
async def test_reused_call_ids_across_steps_get_unique_ids_on_both_sides() -> None:
    """A compatible server that numbers its calls per response (``call_0`` each time):
    the Responses API refuses two calls with one id, so the second pair is renamed,
    its call and its output alike."""
    step1 = turn(call("fc_a", "call_0", "lookup", {"city": "Ulm"}), response_id="r1")
    step2 = turn(call("fc_b", "call_0", "lookup", {"city": "Ems"}), response_id="r2")
    run = await agent_run([step1, step2, turn(message("m", "Done."))], tools=[lookup])
    assert CALLS == [("lookup", "Ulm"), ("lookup", "Ems")]
    items = run.input(2)
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs_ = [
        (i["call_id"], i["output"]) for i in items if i.get("type") == "function_call_output"
    ]
    assert len(set(calls)) == 2
    assert outputs_ == [(calls[0], "Ulm: sunny"), (calls[1], "Ems: sunny")]


@pytest.mark.asyncio
async def test_a_call_with_empty_arguments_runs_and_goes_back_with_an_empty_object() -> None:
    @tool
    def now() -> str:
        """The time."""
        CALLS.append(("now", None))
        return "12:00"

    step1 = turn(reasoning("rs_1", "Time?"), call("fc_1", "call_now", "now", ""))
    run = await agent_run([step1, turn(message("msg_2", "Noon."))], tools=[now])
    assert CALLS == [("now", None)]
    sent = next(i for i in run.input(1) if i.get("type") == "function_call")
    assert (sent["id"], sent["call_id"], json.loads(sent["arguments"])) == ("fc_1", "call_now", {})
    assert run.input(1)[-1]["output"] == "12:00"
    assert body_problems("openai-responses", run.body(1)) == []


def test_responses_client_is_an_agent_chat_client() -> None:
    client = OpenAIResponsesClient("http://127.0.0.1:1", KEY, model=MODEL)
    agent = Agent(client, tools=[lookup])
    assert "OpenAIResponsesClient" in repr(agent)
    assert KEY not in repr(client)


@pytest.mark.asyncio
@pytest.mark.parametrize("refusal", [False, True])
async def test_without_reasoning_text_said_before_a_server_tool_goes_back_before_it(
    refusal: bool,
) -> None:
    """A model that does not reason (gpt-4.1) says a sentence, searches, then answers:
    the next request has the sentence, the search and the answer in that order."""
    search_item = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather"},
    }
    step1 = turn(
        message("msg_1", "Let me look.", refusal=refusal),
        search_item,
        message("msg_2", "Sunny in Kiel."),
        call("fc_1", "call_1", "lookup", {"city": "Kiel"}),
    )
    run = await agent_run([step1, turn(message("msg_3", "Done."))], tools=[lookup])
    items = run.input(1)
    assert [(i.get("type") or i.get("role"), i.get("content")) for i in items[1:]] == [
        ("assistant", "Let me look."),
        ("item_reference", None),
        ("assistant", "Sunny in Kiel."),
        ("function_call", None),
        ("function_call_output", None),
    ]
    assert body_problems("openai-responses", run.body(1)) == []
