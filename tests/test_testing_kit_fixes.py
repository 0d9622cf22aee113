"""Regression tests of the bugs a "team testing its agent with rafrx.testing" hunt found
(the passing pins are in ``test_testing_kit_hunt.py``).

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
import types
from pathlib import Path

import aiohttp
import pytest

from rafrx.errors import StreamTimeout
from rafrx.recorder import load_sse, record_http
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, ToolCallSpec

_CHAT = "/v1/chat/completions"


def test_a_legacy_function_result_is_a_tool_result_for_last_role() -> None:
    """A chat request ending with OpenAI's legacy ``function`` message had ``last_role ==
    "function"``, though the doc promises the same roles across formats (``"tool"`` for a
    tool result). rafrx itself sends that shape (``ChatMessage("tool", ..., name=...)``
    without a call id), so a script checking ``last_role == "tool"`` called tools forever."""
    body = {"messages": [{"role": "function", "name": "now", "content": "12:00"}]}
    assert RecordedRequest.build(_CHAT, {}, body).last_role == "tool"


def test_tool_names_include_a_chat_custom_tool() -> None:
    """``tool_names`` ("in every provider's shape") left out a Chat Completions custom
    tool, ``{"type": "custom", "custom": {"name": ...}}``, which rafrx's chat client
    sends as given: an assertion that the agent offered its free-form tool failed."""
    tools = [
        {"type": "function", "function": {"name": "search", "parameters": {}}},
        {"type": "custom", "custom": {"name": "shell", "description": "Run a command"}},
    ]
    request = RecordedRequest.build(_CHAT, {}, {"messages": [], "tools": tools})
    assert request.tool_names == ("search", "shell")


@pytest.mark.parametrize(
    ("item_type", "role"),
    [
        ("computer_call", "assistant"),
        ("computer_call_output", "tool"),
        ("local_shell_call", "assistant"),
        ("local_shell_call_output", "tool"),
        ("shell_call", "assistant"),
        ("shell_call_output", "tool"),
        ("apply_patch_call", "assistant"),
        ("apply_patch_call_output", "tool"),
    ],
)
def test_last_role_of_the_responses_tools_a_client_runs(item_type: str, role: str) -> None:
    """A Responses request ending with the call or the output of a tool the client runs
    other than a function (computer use, local shell, shell, apply patch) had ``last_role
    None``: a script driving a computer-use agent could not tell the model's turn from
    the tool's. Items without a ``role``: ``*_call`` is the model's, ``*_call_output``
    the tool's, as for functions."""
    body = {"input": [{"type": "message", "role": "user", "content": "Go"}, {"type": item_type}]}
    assert RecordedRequest.build("/v1/responses", {}, body).last_role == role


def test_script_refuses_what_is_not_a_function_and_says_where_it_goes() -> None:
    """``server.script(Reply(text="hi"))`` (meaning "always answer this") was taken, and
    every request then got an HTTP 500 "script raised TypeError: 'Reply' object is not
    callable", far from the mistake. As ``enqueue`` refuses a function and names
    ``script()``, ``script`` refuses a response and names where it goes."""
    server = LLMServer()
    with pytest.raises(TypeError, match=r"enqueue\(\).*default"):
        server.script(Reply(text="hi"))  # type: ignore[type-var]
    server.script(None)  # still removes the script
    assert server.script(print) is print


def test_a_default_that_is_no_response_is_refused_where_it_is_set() -> None:
    """``LLMServer(default=...)`` and ``server.default = ...`` took anything: a string, or
    a function meant as a script, was found only when a request fell through to it, as a
    200 whose body broke off (a client's ``TransferEncodingError``) and an aiohttp
    traceback in the log. Like ``enqueue``, both now refuse it with a ``TypeError``."""
    with pytest.raises(TypeError, match="Reply, Replay or Fault"):
        LLMServer(default="Hello")  # type: ignore[arg-type]
    server = LLMServer()
    with pytest.raises(TypeError, match=r"script\(\)"):
        server.default = lambda request: Reply(text="hi")  # type: ignore[assignment]
    server.default = Reply(text="fine")
    assert server.default == Reply(text="fine")


def test_thread_run_that_times_out_cancels_the_coroutine_and_says_so() -> None:
    """``ServerThread.run(coro, timeout)`` raised a bare ``TimeoutError()`` (no message)
    and left ``coro`` running on the server's loop: a ``wait_requests`` given up on still
    waited there, and a script or a test waiting on it later saw it fire."""
    thread = LLMServer.in_thread()
    with thread as server:
        with pytest.raises(TimeoutError, match=r"0\.1 s"):
            thread.run(server.wait_requests(1, timeout=30), timeout=0.1)

        async def others() -> list[asyncio.Task[object]]:
            current = asyncio.current_task()
            return [t for t in asyncio.all_tasks() if t is not current and not t.done()]

        assert thread.run(others(), timeout=5) == []


def test_waiting_on_a_server_from_another_event_loop_fails_at_once() -> None:
    """Awaiting ``server.wait_requests`` on a loop other than the server's (a server run
    ``in_thread``, or one started by a session fixture on another loop) hung: the
    server's thread set an ``asyncio.Event`` of the other loop, which never woke up, so
    the wait took its whole timeout, then returned as if it had succeeded. It now says at
    once to run it on the server's loop."""
    with LLMServer.in_thread() as server:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"server's event loop.*thread\.run\("):
            asyncio.run(server.wait_requests(1, timeout=1.5))
        assert time.monotonic() - start < 1


@pytest.mark.asyncio
async def test_wait_requests_and_wait_until_say_what_they_waited_for() -> None:
    """``wait_requests`` and ``wait_until`` timed out with a bare ``TimeoutError()``: a
    failing test read "TimeoutError" and nothing else (how many requests came, how long
    it waited), while ``wait_connections_closed`` said how many stayed open."""
    async with LLMServer() as server:
        with pytest.raises(TimeoutError, match=r"0 of 2 requests.*0\.05 s"):
            await server.wait_requests(2, timeout=0.05)
        with pytest.raises(TimeoutError, match=r"did not hold within 0\.05 s"):
            await server.wait_until(lambda: False, timeout=0.05)


@pytest.mark.asyncio
async def test_record_http_that_times_out_says_so(tmp_path: Path) -> None:
    """``record_http(..., timeout=...)`` against a stalled server raised
    ``TransportError("recording <url> failed: TimeoutError: ")``: no word of a timeout
    or of how long, nor that what came before the stall was saved; the timing file's
    ``"error"`` was ``"TimeoutError: "``. It is now a ``StreamTimeout`` (a
    ``TransportError``) saying how long it waited, and whether a body was saved."""
    async with LLMServer() as server:
        url = server.url + "/v1/messages"
        server.enqueue(Fault.stall(5))  # before the headers: nothing to save
        with pytest.raises(StreamTimeout, match=r"timed out after 0\.2 s$"):
            await record_http(url, tmp_path / "a.sse", json_body={"stream": True}, timeout=0.2)
        assert not (tmp_path / "a.sse").exists()
        server.enqueue(Fault.stall(5, after_bytes=50))
        with pytest.raises(StreamTimeout, match=r"timed out after 0\.2 s; what came is saved"):
            await record_http(url, tmp_path / "b.sse", json_body={"stream": True}, timeout=0.2)
        saved = load_sse(tmp_path / "b.sse")
        assert len(saved.body) == 50
        assert saved.meta["error"] == "TimeoutError"


def test_tool_call_arguments_may_be_any_mapping() -> None:
    """``ToolCallSpec.arguments`` is typed ``Mapping[str, Any]``, but a mapping that is no
    dict (a ``MappingProxyType`` of shared, frozen test data) failed to serialise, and the
    request got an HTTP 500 "cannot serve the Reply: TypeError: Object of type mappingproxy
    is not JSON serializable"."""
    frozen = types.MappingProxyType({"city": "Paris", "where": types.MappingProxyType({"x": 1})})
    assert ToolCallSpec("weather", frozen).arguments_json() == '{"city":"Paris","where":{"x":1}}'


def test_a_reply_refuses_tool_calls_that_are_no_tool_call_specs() -> None:
    """``Reply(tool_calls=[{"name": "search"}])`` (the provider's shape, a natural slip)
    was built, and failed only when served: an HTTP 500 "cannot serve the Reply:
    AttributeError: 'dict' object has no attribute 'name'", in the middle of the agent
    under test. A lone ``ToolCallSpec`` failed with "'ToolCallSpec' object is not
    iterable". Both are now a ``TypeError`` where the reply is made, naming the type."""
    with pytest.raises(TypeError, match=r"ToolCallSpec.*\{'name': 'search'\}"):
        Reply(tool_calls=[{"name": "search"}])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"a list of ToolCallSpec"):
        Reply(tool_calls=ToolCallSpec("search"))  # type: ignore[arg-type]
    assert Reply(tool_calls=iter([ToolCallSpec("a")])).tool_calls == (ToolCallSpec("a"),)


@pytest.mark.asyncio
async def test_a_request_over_64_mib_gets_the_providers_413_and_is_recorded() -> None:
    """A body over the 64 MiB the server reads got aiohttp's own answer: ``413`` as
    ``text/plain`` "Maximum request body size 67108864 exceeded.", with no request id,
    not recorded, so an agent's handling of Anthropic's ``request_too_large`` could not
    be tested, and ``request_count`` missed it. It is now the provider's JSON error, with
    a request id, and recorded (its ``json`` is ``None``: the body was not read)."""
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        data = io.BytesIO(b'{"stream": true, "x": "' + b"a" * (64 * 1024 * 1024) + b'"}')
        headers = {"Content-Type": "application/json", "x-api-key": "sk-ant-secret-1"}
        url = server.url + "/v1/messages"
        async with http.post(url, data=data, headers=headers) as resp:
            status, answer_headers, body = resp.status, resp.headers, await resp.json()
    assert status == 413
    assert body["error"]["type"] == "request_too_large"
    assert "request-id" in answer_headers
    [request] = server.requests
    assert (request.path, request.json, request.headers["x-api-key"]) == (
        "/v1/messages",
        None,
        "***",
    )


@pytest.mark.parametrize("status", [4290, 99, 0, -1])
def test_a_fault_status_that_is_no_http_status_is_refused(status: int) -> None:
    """``Fault.status(4290)`` (a typo) was built and served: the status line carried
    4290, which no client parses, so the agent under test failed with a client-side
    parse error that named no fault. An HTTP status has three digits."""
    with pytest.raises(ValueError, match=f"three digits.*{status}"):
        Fault.status(status)
    with pytest.raises(ValueError, match=f"three digits.*{status}"):
        Fault.wrong_content_type(status=status)
    assert Fault.status(529).status_code == 529


def test_thread_run_on_a_stopped_thread_closes_the_coroutine_it_refuses() -> None:
    """``thread.run(server.wait_requests(1))`` after the thread stopped raised its
    ``RuntimeError`` but left the coroutine never awaited: a ``RuntimeWarning`` at
    garbage collection, which the pytest setting ``filterwarnings = error`` pins on
    whichever test runs then."""
    thread = LLMServer.in_thread()
    with thread as server:
        pass
    waiting = server.wait_requests(1)
    with pytest.raises(RuntimeError, match="not running"):
        thread.run(waiting)
    assert waiting.cr_frame is None  # closed: nothing left to warn about


@pytest.mark.asyncio
async def test_a_script_whose_replies_ran_out_says_so() -> None:
    """A script handing out replies from an iterator (``lambda r: next(replies)``) that
    ran out answered "HTTP 500: script raised StopIteration: ", a message ending in a
    colon and nothing after it. It now says the script's iterator ran out."""
    async with LLMServer() as server, aiohttp.ClientSession() as http:
        replies = iter([Reply(text="one")])
        server.script(lambda request: next(replies))
        messages = []
        for _ in range(2):
            async with http.post(server.url + _CHAT, json={"stream": True}) as resp:
                messages.append((resp.status, await resp.text()))
    assert messages[0][0] == 200
    status, body = messages[1]
    assert status == 500
    assert json.loads(body)["error"]["message"] == (
        "script raised StopIteration (an iterator of replies ran out?)"
    )
