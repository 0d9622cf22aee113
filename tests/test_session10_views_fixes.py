"""Regression tests of session 10's fixes to the test kit, the CLI, the response's dict
form, the terminal renderer and the notebook's live state.

Each failed on the commit before its fix, for the reason its docstring gives. Every HTTP
exchange is real aiohttp over 127.0.0.1 (rafrx.testing.LLMServer).
"""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import math
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from rafrx import content as c
from rafrx import terminal
from rafrx.messages import ANTHROPIC_THINKING, OPENAI_REASONING, ChatMessage, ToolCall
from rafrx.notebook import LiveState
from rafrx.notebook._format import human_size
from rafrx.response import AgentResponse, AgentResponseResult
from rafrx.terminal import TerminalRenderer
from rafrx.testing import Fault, LLMServer, RecordedRequest
from tests.conftest import StreamTime
from tests.test_cli import run

FIXTURES = Path(__file__).parent / "data" / "fixtures"

# ----------------------------------------------------------------- LLMServer.in_thread


def test_in_thread_takes_every_option_of_the_constructor() -> None:
    """``in_thread()`` had no ``keep_requests``: a sync test could not bound the record."""
    constructor = inspect.signature(LLMServer).parameters
    in_thread = inspect.signature(LLMServer.in_thread).parameters
    assert list(in_thread) == list(constructor)
    with LLMServer.in_thread(keep_requests=1) as server:
        for _ in range(3):
            request = urllib.request.Request(
                server.url + "/v1/chat/completions", data=b'{"stream": true}', method="POST"
            )
            with urllib.request.urlopen(request, timeout=5) as response:
                response.read()
        assert server.keep_requests == 1
        assert (server.request_count, len(server.requests)) == (3, 1)


# ----------------------------------------------------------------- RecordedRequest.last_role


@pytest.mark.parametrize(
    ("item", "role"),
    [
        ({"type": "custom_tool_call_output", "call_id": "c", "output": "1"}, "tool"),
        ({"type": "custom_tool_call", "call_id": "c", "name": "f", "input": "x"}, "assistant"),
        (
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
            "tool",
        ),
        ({"type": "mcp_approval_request", "id": "mcpr_1", "name": "f"}, "assistant"),
        ({"type": "reasoning", "id": "rs_1", "summary": []}, "assistant"),
        ({"type": "item_reference", "id": "ws_1"}, "assistant"),
        ({"type": "web_search_call", "id": "ws_1", "status": "completed"}, "assistant"),
        ({"type": "mcp_call", "id": "mcp_1", "name": "f"}, "assistant"),
        (
            {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
            "assistant",
        ),
    ],
)
def test_last_role_of_every_responses_item_rafrx_sends(item: dict[str, Any], role: str) -> None:
    """``last_role`` knew only ``function_call`` and ``function_call_output``: a custom
    tool's result or an MCP approval answer (what ends a tool loop's request) was
    ``None``, so a script's ``last_role == "tool"`` never saw the loop go on."""
    request = RecordedRequest.build("/v1/responses", {}, {"input": [item]})
    assert request.last_role == role


# ----------------------------------------------------------------- AgentResponse.to_dict


def test_response_to_dict_keeps_the_messages_provider_data() -> None:
    """``to_dict()`` wrote the messages by ``to_openai()`` alone: an Anthropic thinking
    block's signature and a Responses reasoning item (what a continuation needs) were
    lost from the dict a caller keeps."""
    thinking = {"type": "thinking", "thinking": "Hmm.", "signature": "sig-1", "score": math.nan}
    reasoning = {"type": "reasoning", "id": "rs_1", "encrypted_content": "enc"}
    said = ChatMessage(
        "assistant",
        "Checking.",
        tool_calls=[ToolCall("c1", "now", {})],
        provider_data={ANTHROPIC_THINKING: (thinking,), OPENAI_REASONING: (reasoning,)},
    )
    result = ChatMessage.tool("12:00", "c1")
    response = AgentResponse(turn_transcript=[said, result], tool_messages=[result])
    data = json.loads(json.dumps(response.to_dict(), allow_nan=False))
    kept = data["turn_transcript"][0]
    assert kept["provider_data"] == {
        ANTHROPIC_THINKING: [{**thinking, "score": None}],
        OPENAI_REASONING: [reasoning],
    }
    assert "provider_data" not in data["turn_transcript"][1]  # none kept: no key
    back = ChatMessage.from_dict(kept)
    assert back.provider_data == {
        ANTHROPIC_THINKING: ({**thinking, "score": None},),
        OPENAI_REASONING: (reasoning,),
    }
    kept_here = response.to_dict()["turn_transcript"][0]["provider_data"]
    kept_here[OPENAI_REASONING][0]["id"] = "changed"
    assert reasoning["id"] == "rs_1"  # a copy, not the message's own blocks


# ----------------------------------------------------------------- the CLI's --dialect

_WITH_A_DIALECT_OF_MY_OWN = """
import sys
from rafrx.__main__ import main
from rafrx.sources.dialects import DIALECTS, OpenAIChatDialect
DIALECTS["my-chat"] = OpenAIChatDialect
sys.exit(main(sys.argv[1:]))
"""


def test_replay_offers_every_registered_dialect() -> None:
    """``--dialect`` offered a hard-coded list: a dialect registered in ``DIALECTS`` (as
    its docstring says to) was an invalid choice."""
    fixture = FIXTURES / "openai-chat" / "openai-text-then-tool-call.sse"
    args = ["replay", str(fixture), "--json", "--dialect", "my-chat"]
    result = subprocess.run(
        [sys.executable, "-c", _WITH_A_DIALECT_OF_MY_OWN, *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    kinds = [json.loads(line)["type"] for line in result.stdout.splitlines()]
    assert "FinishEvent" in kinds


def test_replay_help_lists_every_registered_dialect(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same, as ``rafrx replay --help`` lists the choices."""
    from rafrx.__main__ import build_parser
    from rafrx.sources.dialects import DIALECTS, OpenAIChatDialect

    monkeypatch.setitem(DIALECTS, "my-chat", OpenAIChatDialect)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", "--help"])
    assert "auto,openai-chat,anthropic,openai-responses,my-chat" in capsys.readouterr().out


# ----------------------------------------------------------------- the terminal's progress line


def _progress(received: int) -> AgentResponseResult:
    return AgentResponseResult(
        contents=[c.ToolCallArgsProgressContent("c1", "content", received, "x")]
    )


def _progress_shown(out: io.StringIO) -> str:
    """What the in-place progress line shows now: the text after its last clear."""
    return out.getvalue().rsplit("\r\x1b[K", 1)[-1]


async def _until(condition: Callable[[], bool], timeout: float = 1.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_terminal_progress_line_shows_the_last_update_when_the_stream_pauses(
    stream_time: StreamTime,
) -> None:
    """An update that came within the interval was skipped and nothing drew it later: a
    stream that paused there left the line showing an older size.

    The renderer's clock stands still (its timer is the loop's own): the second update is
    within the interval however long a loaded machine takes between the two."""
    stream_time.on(terminal, hold_timers=False)
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=True, interval=0.2)
    renderer.result(AgentResponseResult(contents=[c.ToolCallStartContent("c1", "write_file")]))
    renderer.result(_progress(1000))
    renderer.result(_progress(250_000))  # within the interval: not drawn now
    assert human_size(250_000) not in _progress_shown(out)
    await _until(lambda: human_size(250_000) in _progress_shown(out))  # the stream pauses
    assert human_size(250_000) in _progress_shown(out)
    renderer.result(AgentResponseResult(contents=[c.TextContent("Done.")]))
    renderer.close()
    assert out.getvalue().endswith("Done.\x1b[0m\n")


def test_terminal_progress_redraw_skipped_once_something_else_is_written(
    stream_time: StreamTime,
) -> None:
    """The late draw never comes after the line was ended (by text, or by close()).

    On the test's own time: the second update is within the interval (on the wall clock a
    stall over 0.05 s drew it at once), and the late draw is fired when the test says."""
    timers = stream_time.on(terminal).timers
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=True, interval=0.05)
    renderer.result(_progress(1000))
    renderer.result(_progress(250_000))
    assert [t.cancelled for t in timers.pending] == [False]  # the late draw, due
    renderer.close()
    written = out.getvalue()
    assert [t.cancelled for t in timers.pending] == [True]
    timers.pending[0].callback()  # as a timer thread already running when close() cancelled it
    assert out.getvalue() == written
    assert human_size(250_000) not in written


# ----------------------------------------------------------------- LiveState, asdict and evolve


def test_live_state_asdict_and_evolve_see_the_deltas_not_yet_joined() -> None:
    """``blocks`` was a property over a private field that held the text deltas apart
    until read: ``attrs.asdict`` gave that field (``_blocks``) without the latest
    deltas, and ``attrs.evolve`` a state whose text missed them."""
    state = LiveState()
    for delta in ("Hel", "lo", " there"):
        state.add(AgentResponseResult(contents=[c.TextContent(delta)]))
    copied = attrs.evolve(state)
    assert copied.blocks == [["text", "Hello there"]]
    assert copied.text == "Hello there"
    state.add(AgentResponseResult(contents=[c.TextContent("!")]))
    assert attrs.asdict(state)["blocks"] == [["text", "Hello there!"]]
    assert "_blocks" not in attrs.asdict(state)
    state.add(AgentResponseResult(contents=[c.ReasoningContent("Hmm")]))
    state.add(AgentResponseResult(contents=[c.ReasoningContent(".")]))
    assert attrs.astuple(state)[0] == [["text", "Hello there!"], ["reasoning", "Hmm."]]


def test_cli_shows_rafrx_warnings_on_stderr() -> None:
    """The library's loggers have only a NullHandler: the CLI, an application, shows
    their warnings itself (here: an event stream sent as text/plain, decoded anyway)."""
    body = (
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"sniffed"},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    with LLMServer.in_thread() as server:
        server.enqueue(Fault.wrong_content_type("text/plain", body=body))
        result = run("chat", "--base-url", server.url, "--model", "m", "--plain", stdin="hi\n")
    assert result.returncode == 0, result.stderr
    assert "sniffed" in result.stdout
    assert "rafrx: warning:" in result.stderr
    assert "sent an event stream as Content-Type 'text/plain'" in result.stderr
