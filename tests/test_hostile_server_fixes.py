"""Regression tests of the bugs a "hostile server" hunt found: a security reviewer auditing
rafrx before it talks to an untrusted OpenAI-compatible endpoint (a user-configured
``base_url`` that is hostile or compromised). The passing pins are in
``test_hostile_server_hunt.py``.

Each failed on the commit before its fix, for the reason its docstring gives. Every HTTP
exchange is real aiohttp over 127.0.0.1 (a small aiohttp app of the test's own).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import reactivex
from aiohttp import web
from reactivex import operators as rx

import rafrx
from rafrx import Agent, ChatMessage, collect_agent_response
from rafrx import operators as ops
from rafrx.errors import TransportError
from rafrx.sources._decoder import UpdateDecoder
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient
from rafrx.tools import tool

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

KEY = "sk-hostile-test-0123456789abcdef"


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """An aiohttp app on 127.0.0.1 answering every path with ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def replying(
    *bodies: bytes, content_type: str = "text/event-stream", sent: list[Any] | None = None
) -> Handler:
    """A handler answering its n-th request with ``bodies[n]`` (the last one after them);
    the JSON request bodies go to ``sent``, if given."""
    left = list(bodies)

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if sent is not None:
            sent.append(json.loads(body))
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        await response.write(left.pop(0) if len(left) > 1 else left[0])
        await response.write_eof()
        return response

    return handler


@pytest.mark.asyncio
async def test_the_request_id_of_a_call_ended_by_aclose_never_holds_the_api_key() -> None:
    """The ``request_id`` of a call that ``aclose()`` (or its loop's end) cuts short is the
    server's header as sent, API key and all.

    What the reviewer does: a compromised server echoes the client's key in its
    ``x-request-id`` header (as a debugging gateway echoing the request would), streams
    some text, then stalls; the program closes its client (shutting down).

    What happens: the ``TransportError`` ("client closed: ...") has
    ``request_id == "req-<the API key>"``. Every other error of a 200 stream has it
    redacted (``_run`` passes them through ``redact_error``); this path,
    ``_StreamCall._cut_short``, sets the id after that and never redacts it, so an error
    tracker or a log line that shows the id (what the providers' support asks for) shows
    the key.

    What should happen: the key is ``***`` there too. The README: "API keys never appear
    in reprs, logs or errors: the client's own in every form a server may echo it".
    """

    stalled = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "x-request-id": f"req-{KEY}"}
        )
        await response.prepare(request)
        await response.write(chat_chunk({"content": "Hel"}))
        await stalled.wait()  # (until the client has closed)
        return response

    async with serve(handler) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m")
        seen = asyncio.Event()
        results = client.stream([ChatMessage.user("hi")]).pipe(
            ops.convert(), rx.do_action(lambda _: seen.set())
        )
        turn = asyncio.ensure_future(collect_agent_response(results))
        await seen.wait()  # (the text came: the call is streaming, then stalled)
        await client.aclose()
        stalled.set()
        with pytest.raises(TransportError) as caught:
            await turn
    err = caught.value
    assert "client closed" in str(err)
    assert err.request_id == "req-***"
    assert err.partial is not None
    assert err.partial.text == "Hel"


@pytest.mark.asyncio
async def test_the_content_type_warning_never_logs_the_api_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The warning about an event stream sent under another Content-Type logs that
    header as the server sent it, API key and all.

    What the reviewer does: the server answers 200 with a real event stream but a
    ``Content-Type`` of its own choosing that echoes the key
    (``text/plain; token=<key>``). rafrx sniffs the body, decodes it (right), and warns.

    What happens: the WARNING on ``rafrx.sources._http`` is ``... sent an event stream as
    Content-Type 'text/plain; token=sk-...': decoding it``: the key, in the program's
    logs (and on the CLI's stderr, which shows rafrx's warnings).

    What should happen: the key is ``***`` in the log line, as in every error built from
    the same header (``ContentTypeError`` goes through ``redact_error``). README: "API
    keys never appear in reprs, logs or errors".
    """
    body = chat_chunk({"content": "hi"}, "stop") + b"data: [DONE]\n\n"
    handler = replying(body, content_type=f"text/plain; token={KEY}")
    async with serve(handler) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m")
        try:
            with caplog.at_level(logging.WARNING, logger="rafrx"):
                response = await collect_agent_response(
                    client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
                )
        finally:
            await client.aclose()
    assert response.text == "hi"
    warned = [r.getMessage() for r in caplog.records if "Content-Type" in r.getMessage()]
    assert len(warned) == 1
    assert KEY not in warned[0]
    assert "token=***" in warned[0]


def _anthropic_calls(*blocks: bytes) -> bytes:
    start = event(
        "message_start",
        {
            "type": "message_start",
            "message": {"id": "msg_1", "model": "claude-x", "usage": {"input_tokens": 1}},
        },
    )
    end = event(
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
    ) + event("message_stop", {"type": "message_stop"})
    return start + b"".join(blocks) + end


def _tool_use_start(index: int, call_id: str, name: str) -> bytes:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return event(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def _input_delta(index: int, partial_json: str) -> bytes:
    delta = {"type": "input_json_delta", "partial_json": partial_json}
    return event(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def _block_stop(index: int) -> bytes:
    return event("content_block_stop", {"type": "content_block_stop", "index": index})


_ANTHROPIC_TEXT_REPLY = (
    event(
        "message_start",
        {"type": "message_start", "message": {"id": "msg_2", "model": "claude-x", "usage": {}}},
    )
    + event(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    + event(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
    )
    + _block_stop(0)
    + event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    + event("message_stop", {"type": "message_stop"})
)


@pytest.mark.asyncio
@pytest.mark.parametrize("overlapping", [False, True], ids=["one-after-the-other", "overlapping"])
async def test_two_anthropic_tool_use_blocks_with_one_id_are_two_calls(overlapping: bool) -> None:
    """Two ``tool_use`` blocks (two indices) that share an ``id`` merge into one call, or
    fail the whole stream.

    What the reviewer does: an Anthropic-compatible server (a gateway translating a
    model that gives parallel calls one id, as DeepSeek, GLM and Kimi do in the chat
    format; or a hostile one) streams block 0 ``tool_use`` ``f`` and block 1 ``tool_use``
    ``g``, both ``id: "toolu_1"``.

    What happens: the dialect emits ``ToolCallStart("toolu_1", ...)`` twice; the
    accumulator drops the second as "a duplicate start". Sent one after the other, the
    second block's arguments go to a call already ended: ``ProtocolError: arguments for
    a tool call that is not open``, the whole turn fails and ``f``, complete, is marked
    never run. Interleaved, both blocks' arguments join into ``f``'s
    (``{"a": 1}{"a": 2}``, invalid; or, split just so, a valid value made of two
    calls' bytes) and ``g`` vanishes.

    What should happen: as the OpenAI chat and Responses dialects do with a reused id
    (``split_legacy_delta``'s ``_unique``, ``_start_call``), the second call gets an id
    of its own (``toolu_1_2``), each call keeps its own arguments, both run and both are
    answered.
    """
    if overlapping:
        body = _anthropic_calls(
            _tool_use_start(0, "toolu_1", "f"),
            _tool_use_start(1, "toolu_1", "g"),
            _input_delta(0, '{"a": 1}'),
            _input_delta(1, '{"a": 2}'),
            _block_stop(0),
            _block_stop(1),
        )
    else:
        body = _anthropic_calls(
            _tool_use_start(0, "toolu_1", "f"),
            _input_delta(0, '{"a": 1}'),
            _block_stop(0),
            _tool_use_start(1, "toolu_1", "g"),
            _input_delta(1, '{"a": 2}'),
            _block_stop(1),
        )
    ran: list[tuple[str, int]] = []

    @tool
    def f(a: int) -> str:
        """F."""
        ran.append(("f", a))
        return f"f{a}"

    @tool
    def g(a: int) -> str:
        """G."""
        ran.append(("g", a))
        return f"g{a}"

    sent: list[Any] = []
    async with serve(replying(body, _ANTHROPIC_TEXT_REPLY, sent=sent)) as url:
        client = AnthropicClient(url, api_key=KEY, model="claude-x")
        try:
            response = await Agent(client, tools=[f, g]).send("hi")
        finally:
            await client.aclose()
    assert sorted(ran) == [("f", 1), ("g", 2)]
    calls = response.turn_transcript[0].tool_calls or ()
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("toolu_1", "f", {"a": 1}),
        ("toolu_1_2", "g", {"a": 2}),
    ]
    answers = [(m.tool_call_id, m.content) for m in response.turn_transcript if m.tool_call_id]
    assert answers == [("toolu_1", "f1"), ("toolu_1_2", "g2")]
    uses, results = sent[1]["messages"][1:]  # (what goes back: two uses, each answered)
    assert [(b["id"], b["input"]) for b in uses["content"]] == [
        ("toolu_1", {"a": 1}),
        ("toolu_1_2", {"a": 2}),
    ]
    assert [b["tool_use_id"] for b in results["content"]] == ["toolu_1", "toolu_1_2"]
    assert response.text == "ok"


@pytest.mark.asyncio
async def test_a_tool_call_id_or_name_from_the_server_cannot_forge_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool call's id and name, chosen by the server, go into rafrx's log lines as
    they are: a newline in them starts a line of the server's choosing.

    What the reviewer does: the server calls a tool named
    ``"nope\\nCRITICAL forged: all checks passed"`` (id likewise). The agent answers
    ``ToolNotFound`` (right) and logs the failure at INFO on ``rafrx.operators``.

    What happens: ``logger.info("tool call %s (%s) failed: %s", call.call_id, call.name,
    ...)`` writes the id and name raw: the record's message holds the newline and, with
    a plain text handler, the log gets a line that reads as a CRITICAL record (CWE-117,
    log injection); an ANSI escape would reach the terminal tailing the log.

    What should happen: the id and name are quoted as ``repr()`` does (``'nope\\nCRITICAL
    ...'``), as ``rafrx.messages`` logs call ids already (``%r``): the record is one line.
    """
    forged = "nope\nCRITICAL forged: all checks passed"
    first = (
        chat_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1\n\x1b[2Jx",
                        "type": "function",
                        "function": {"name": forged, "arguments": "{}"},
                    }
                ]
            }
        )
        + chat_chunk({}, "tool_calls")
        + b"data: [DONE]\n\n"
    )
    second = chat_chunk({"content": "ok"}, "stop") + b"data: [DONE]\n\n"

    @tool
    def f() -> str:
        """F."""
        return "f"

    async with serve(replying(first, second)) as url:
        client = OpenAIChatClient(url, api_key=KEY, model="m")
        try:
            with caplog.at_level(logging.INFO, logger="rafrx"):
                response = await Agent(client, tools=[f]).send("hi")
        finally:
            await client.aclose()
    assert response.text == "ok"
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed, "the failed call is logged"
    for line in failed:
        assert "\n" not in line
        assert "\x1b" not in line
        assert "CRITICAL forged" in line  # (quoted, not dropped)


RAFRX_DIR = str(Path(rafrx.__file__).resolve().parent)


def _lines_run(fn: Callable[[], Any]) -> int:
    """How many lines of rafrx's own code ``fn()`` runs (as ``test_scaling_hunt`` counts)."""
    count = 0

    def local(frame: FrameType, what: str, arg: Any) -> Any:
        nonlocal count
        if what == "line":
            count += 1
        return local

    def calls(frame: FrameType, what: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(RAFRX_DIR) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def _text_blocks(n: int) -> bytes:
    """An Anthropic message of ``n`` one-character text blocks (no thinking block)."""
    blocks = b"".join(
        event(
            "content_block_start",
            {"type": "content_block_start", "index": i, "content_block": {"type": "text"}},
        )
        + event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": i,
                "delta": {"type": "text_delta", "text": "a"},
            },
        )
        + _block_stop(i)
        for i in range(n)
    )
    start = event("message_start", {"type": "message_start", "message": {"id": "m"}})
    end = event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    return start + blocks + end + event("message_stop", {"type": "message_stop"})


def test_an_anthropic_message_of_many_text_blocks_decodes_in_linear_work() -> None:
    """Each text block's end scans every block ended before it: a message of many small
    blocks costs quadratic CPU.

    What the reviewer does: a hostile Anthropic-compatible server answers with 20,000
    one-character text blocks (6.6 MB, within every default limit).

    What happens: ``AnthropicDialect._after_a_call()``, called at each text block's end,
    runs ``any(ref["type"] == TOOL_USE_REF for ref in self._refs)`` over the refs of
    all the blocks so far (kept until a thinking block, which never comes): 1.8 s for
    5,000 blocks, 6.4 s for 10,000, 23 s for 20,000, one core held busy by a few
    megabytes.

    What should happen: the work grows linearly with the blocks (the dialects' other
    paths do, ``test_scaling_hunt``): whether a ``tool_use`` ref waits among the refs
    is known as they are added. Counted in lines of rafrx run, at n and 4 n, as
    ``test_scaling_hunt`` counts (linear: about 4x; quadratic: about 16x).
    """
    small_body, large_body = _text_blocks(200), _text_blocks(800)

    def decode(body: bytes) -> Callable[[], Any]:
        return lambda: UpdateDecoder("anthropic").feed(body)

    small, large = _lines_run(decode(small_body)), _lines_run(decode(large_body))
    assert large / small <= 6.0, f"{small} -> {large} lines of rafrx"  # (it was 8.2x)
    updates = UpdateDecoder("anthropic").feed(small_body)
    assert sum(len(u.delta) for u in updates if type(u).__name__ == "TextDelta") == 200


def _one_id_calls(dialect: str, n: int) -> bytes:
    """``n`` tool calls in one response, all with the id ``call_x``, in ``dialect``."""
    if dialect == "openai-chat":
        return (
            b"".join(
                call_chunk(i, "call_x")
                for i in range(n)  # (one index each)
            )
            + chat_chunk({}, "tool_calls")
            + b"data: [DONE]\n\n"
        )
    if dialect == "anthropic":
        return _anthropic_calls(
            *(_tool_use_start(i, "call_x", "f") + _block_stop(i) for i in range(n))
        )
    items = b"".join(
        event(
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": i,
                "item": {
                    "type": "function_call",
                    "id": f"fc_{i}",
                    "call_id": "call_x",
                    "name": "f",
                },
            },
        )
        for i in range(n)
    )
    done = {"type": "response.completed", "response": {"id": "r", "status": "completed"}}
    return items + event("response.completed", done)


def call_chunk(index: int, call_id: str) -> bytes:
    call = {"index": index, "id": call_id, "type": "function", "function": {"name": "f"}}
    return chat_chunk({"tool_calls": [call]})


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "openai-responses"])
def test_many_tool_calls_sharing_one_id_are_renamed_in_linear_work(dialect: str) -> None:
    """Each call reusing an id looks for its suffix from ``_2`` up: ``n`` calls with one
    id cost quadratic work.

    What the reviewer does: a hostile server sends 4,000 tool calls that all have the id
    ``call_x`` (a few hundred kilobytes).

    What happens: ``SplitLegacyDelta._unique`` (chat completions), the Responses
    dialect's ``_start_call`` and the Anthropic dialect's ``_own_call_id`` (the fix above)
    try ``call_x_2``, ``call_x_3`` … for every call: 1,000 calls 0.3 s, 4,000 calls 3.5 s,
    16,000 about a minute of CPU.

    What should happen: the calls are still renamed ``call_x``, ``call_x_2``, … (one id
    each), in work linear in the calls: each reused id goes on from the last suffix it
    took. Counted in lines of rafrx run at n and 4 n, as ``test_scaling_hunt`` counts.
    """

    def decode(n: int) -> Callable[[], Any]:
        body = _one_id_calls(dialect, n)

        def run() -> None:
            decoder = UpdateDecoder(dialect)
            updates = [*decoder.feed(body), *decoder.close()]
            reactivex.from_iterable(updates).pipe(ops.split_legacy_delta()).subscribe()

        return run

    small, large = _lines_run(decode(100)), _lines_run(decode(400))
    assert large / small <= 6.0, f"{small} -> {large} lines of rafrx"
    decoder = UpdateDecoder(dialect)
    updates = [*decoder.feed(_one_id_calls(dialect, 5)), *decoder.close()]
    starts: list[str] = []
    reactivex.from_iterable(updates).pipe(ops.split_legacy_delta()).subscribe(
        lambda update: (
            starts.append(update.id) if type(update).__name__ == "ToolCallStart" else None
        )
    )
    assert starts == ["call_x", "call_x_2", "call_x_3", "call_x_4", "call_x_5"]
