"""Running a rafrx-based agent service in production: what it reports, and how it behaves.

The angle is the engineer on call for a service built on rafrx. That engineer trusts:

- the **logs**: which loggers rafrx uses, and that a record never holds a key;
- the **usage** numbers billing is built on: once per LLM call, summed over a turn's
  steps, never doubled by retries, kept when a stream fails or the client closes;
- the **errors** log aggregators and support tickets see: class, ``retryable``,
  ``retry_after``, ``request_id``, bounded one-line reprs, and pickling to other
  processes;
- how rafrx behaves **under load and at shutdown**: hundreds of concurrent streams,
  some of them stalled into their idle timeout; ``aclose()`` with streams and turns
  in flight; ``asyncio.timeout`` around ``Agent.send``; ``asyncio.run`` returning
  with turns still running. Afterwards no task is left, no connection stays open,
  and nothing is logged.

Every request is real aiohttp over 127.0.0.1 against :class:`rafrx.testing.LLMServer`.
Nothing is patched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx

from rafrx import (
    Agent,
    AgentResponse,
    ChatMessage,
    FinishReason,
    InMemoryHistoryProvider,
    RafrxError,
    RetryPolicy,
    Timeouts,
    Usage,
    UsageContent,
    collect_agent_response,
    tool,
)
from rafrx import operators as ops
from rafrx.errors import (
    MAX_BODY_CHARS,
    ConnectTimeout,
    ContentTypeError,
    HTTPStatusError,
    IdleTimeout,
    IncompleteStream,
    InvalidToolArguments,
    LimitExceeded,
    MalformedEvent,
    MaxStepsExceeded,
    ProtocolError,
    ProviderError,
    StreamInterrupted,
    StreamTimeout,
    ToolApprovalDenied,
    ToolError,
    ToolExecutionError,
    ToolNotFound,
    ToolTimeout,
    TransportError,
)
from rafrx.sources import from_sse
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from rafrx.testing import Fault, LLMServer, Replay, Reply, ToolCallSpec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data" / "fixtures"

KEY = "sk-ops-0123456789abcdefXYZ"
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
FORMATS = tuple(CLIENTS)
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02, jitter=False)


def client_for(server: LLMServer, fmt: str, **kwargs: Any) -> LLMClient:
    return CLIENTS[fmt](server.url, api_key=KEY, model="m", **kwargs)


async def failure(results: Any) -> RafrxError:
    """The error that ``results`` (an observable of results) ends with."""
    try:
        async with asyncio.timeout(20):
            response = await collect_agent_response(results)
    except RafrxError as err:
        return err
    raise AssertionError(f"the call succeeded: {response!r}")


async def one_call(client: LLMClient, text: str = "hi") -> AgentResponse:
    return await collect_agent_response(client.stream([ChatMessage.user(text)]).pipe(ops.convert()))


def other_tasks() -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}


async def settle(server: LLMServer) -> None:
    """Wait until the server saw every connection close and its handlers ended."""
    await server.wait_connections_closed()
    for _ in range(50):
        if not other_tasks():
            return
        await asyncio.sleep(0.01)


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def of(self, prefix: str, level: int = logging.DEBUG) -> list[logging.LogRecord]:
        return [
            r
            for r in self.records
            if (r.name == prefix or r.name.startswith(prefix + ".")) and r.levelno >= level
        ]

    def texts(self) -> str:
        out = []
        for r in self.records:
            out.append(r.getMessage())
            if r.exc_info and r.exc_info[1] is not None:
                out.append(repr(r.exc_info[1]))
        return "\n".join(out)


@pytest.fixture
def logs() -> Iterator[Captured]:
    """Every log record of the test, at every level, from every logger."""
    handler = Captured()
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


@pytest_asyncio.fixture
async def server(no_task_leak: None) -> AsyncIterator[LLMServer]:
    async with LLMServer() as started:
        yield started


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


@tool
def explode(reason: str) -> str:
    """Fail on purpose.

    Args:
        reason: Why.
    """
    raise RuntimeError(f"boom: {reason}")


@tool
async def slow(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "slept"


# ---------------------------------------------------------------- logging


@pytest.mark.asyncio
async def test_a_healthy_turn_logs_nothing_at_warning_or_above(
    server: LLMServer, logs: Captured, capfd: pytest.CaptureFixture[str]
) -> None:
    """A service sets the root logger to WARNING and alerts on it: a normal turn with a
    tool must not page anyone, and the library prints nothing itself."""
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("add", {"a": 2, "b": 3})]),
        Reply(text="5"),
    )
    async with client_for(server, "anthropic") as client:
        agent = Agent(client, tools=[add], history=InMemoryHistoryProvider())
        response = await agent.send("2+3?")
    assert response.text == "5"
    assert logs.of("rafrx", logging.WARNING) == []
    assert logs.of("asyncio", logging.WARNING) == []
    out, err = capfd.readouterr()
    assert out == ""
    assert err == ""


@pytest.mark.asyncio
async def test_a_failing_tool_is_logged_once_under_rafrx_tools_without_the_key(
    server: LLMServer, logs: Captured
) -> None:
    """A tool failure is one INFO record of the ``rafrx.tools`` logger (a service can
    raise it or silence it by name); the key the tool's error echoes is not in it."""
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("explode", {"reason": f"key {KEY}"})]),
        Reply(text="sorry"),
    )
    async with client_for(server, "openai-chat") as client:
        agent = Agent(client, tools=[explode])
        await agent.send("go")
    records = logs.of("rafrx")
    assert [r.name for r in records] == ["rafrx.tools"]
    assert records[0].levelno == logging.INFO
    assert "explode" in records[0].getMessage()
    assert KEY not in logs.texts()


@pytest.mark.asyncio
async def test_an_event_stream_with_a_wrong_content_type_warns_once_per_call_with_a_masked_url(
    server: LLMServer, logs: Captured
) -> None:
    """A gateway that labels its event stream ``text/plain``: one warning per call (not
    per chunk) that names the endpoint without the ``?key=`` value."""
    body = b"".join(
        [
            b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
            *[
                b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"b"}}]}\n\n'
                for _ in range(30)
            ],
            b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
            b"data: [DONE]\n\n",
        ]
    )
    for _ in range(2):
        server.enqueue(Fault.wrong_content_type("text/plain", body=body))
    client = OpenAIChatClient(server.url + "/v1?key=AIzaSecret0123456789", model="m")
    async with client:
        for _ in range(2):
            response = await one_call(client)
            assert response.text == "a" + "b" * 30
    warnings = logs.of("rafrx", logging.WARNING)
    assert len(warnings) == 2
    assert {r.name for r in warnings} == {"rafrx.sources._http"}
    assert all("AIzaSecret" not in r.getMessage() for r in warnings)
    assert all("/v1/chat/completions" in r.getMessage() for r in warnings)


@pytest.mark.asyncio
async def test_failed_calls_under_load_log_nothing(server: LLMServer, logs: Captured) -> None:
    """Errors go to the caller, not to the log: 60 calls failing in every way log no
    record (the service logs what it decides to)."""
    faults = [
        Fault.status(500),
        Fault.status(429, retry_after=0),
        Fault.drop_after(200),
        Fault.garbage(b"{unparsable"),
        Reply(text="partial", finish=FinishReason.ERROR),
    ]

    @server.script
    def answer(request: Any) -> Any:
        return faults[server.request_count % len(faults)]

    async with client_for(server, "anthropic") as client:
        errors = await asyncio.gather(
            *(
                failure(client.stream([ChatMessage.user("x")]).pipe(ops.convert()))
                for _ in range(60)
            )
        )
    assert all(isinstance(e, RafrxError) for e in errors)
    assert logs.of("rafrx") == []
    assert logs.of("asyncio", logging.WARNING) == []


# ---------------------------------------------------------------- usage


def _manifest() -> list[dict[str, Any]]:
    entries = json.loads((FIXTURES / "MANIFEST.json").read_text())
    return [
        e
        for e in entries
        if e["format"] in FORMATS and (e.get("expected") or {}).get("usage") is not None
    ]


def _raw_usages(data: bytes) -> list[dict[str, Any]]:
    """Every non-empty ``usage`` object in the body's events, in order."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                if key == "usage" and isinstance(inner, dict) and inner:
                    found.append(inner)
                else:
                    walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            try:
                walk(json.loads(line[5:]))
            except ValueError:
                continue
    return found


def _aggregate(data: bytes, fmt: str) -> AgentResponse:
    out: list[AgentResponse] = []
    errors: list[Exception] = []
    from_sse([data], dialect=fmt).pipe(ops.convert(), ops.aggregate()).subscribe(
        out.append, errors.append
    )
    if errors:  # (a recorded failure: its partial holds what the provider reported)
        error = errors[0]
        assert isinstance(error, RafrxError), errors
        assert error.partial is not None, errors
        return error.partial
    return out[0]


@pytest.mark.parametrize("entry", _manifest(), ids=lambda e: e["path"])
def test_recorded_usage_is_what_the_provider_billed(entry: dict[str, Any]) -> None:
    """Each recorded stream's usage, as billing reads it: prompt = every input token
    (Anthropic's cache writes and reads included), completion, total, and the cached
    and reasoning shares the provider reported, with the details it put them in."""
    data = (FIXTURES / entry["path"]).read_bytes()
    usage = _aggregate(data, entry["format"]).usage
    assert usage is not None
    expected = entry["expected"]["usage"]
    last = _raw_usages(data)[-1]
    if entry["format"] == "anthropic":
        prompt = (
            expected["input_tokens"]
            + (expected.get("cache_creation_input_tokens") or 0)
            + (expected.get("cache_read_input_tokens") or 0)
        )
        assert usage.prompt_tokens == prompt
        assert usage.completion_tokens == expected["output_tokens"]
        assert usage.total_tokens == prompt + expected["output_tokens"]
        assert usage.cached_tokens == expected.get("cache_read_input_tokens")
        return
    prompt_key, completion_key = (
        ("input", "output") if entry["format"] == "openai-responses" else ("prompt", "completion")
    )
    assert usage.prompt_tokens == expected[f"{prompt_key}_tokens"]
    assert usage.completion_tokens == expected[f"{completion_key}_tokens"]
    assert usage.total_tokens == expected["total_tokens"]
    cached = (last.get(f"{prompt_key}_tokens_details") or {}).get("cached_tokens")
    reasoning = (last.get(f"{completion_key}_tokens_details") or {}).get("reasoning_tokens")
    assert usage.cached_tokens == cached
    assert usage.reasoning_tokens == reasoning


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_turn_s_usage_is_its_steps_once_each_whatever_the_retries(
    server: LLMServer, fmt: str
) -> None:
    """Two LLM calls, each after a retried 429/503: ``AgentResponse.usage`` is the sum
    of the two calls (the refused attempts cost nothing) and equals the sum of the
    ``UsageContent``s the turn streamed, so a meter fed from either agrees."""
    first = Usage(100, 10, 110, reasoning_tokens=3, cached_tokens=40)
    second = Usage(200, 20, 220, reasoning_tokens=5, cached_tokens=80)
    server.enqueue(
        Fault.status(429, retry_after=0),
        Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2})], usage=first),
        Fault.status(503),
        Reply(text="3", usage=second),
    )
    streamed: list[Usage] = []
    async with client_for(server, fmt, retry=FAST_RETRY) as client:
        agent = Agent(client, tools=[add])
        results = agent.run("1+2?").pipe(
            rx.do_action(
                lambda r: streamed.extend(
                    c.usage for c in r.contents if isinstance(c, UsageContent)
                )
            )
        )
        response = await collect_agent_response(results)
    assert server.request_count == 4
    assert response.usage is not None
    assert len(streamed) == 2
    assert response.usage == streamed[0] + streamed[1]
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (300, 30)
    assert response.usage.total_tokens == 330
    assert response.usage.cached_tokens == 120
    if fmt != "anthropic":  # (the test server reports Anthropic's thinking share as none)
        assert response.usage.reasoning_tokens == 8


@pytest.mark.asyncio
async def test_a_turn_failing_in_its_second_step_keeps_both_steps_usage(
    server: LLMServer,
) -> None:
    """Anthropic fails mid-answer in the second LLM call: the error's partial counts
    the first call and the input tokens the second had already reported."""
    server.enqueue(
        Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2})], usage=Usage(100, 10, 110)),
        Reply(text="The sum is", finish=FinishReason.ERROR, usage=Usage(150, 4, 154)),
    )
    async with client_for(server, "anthropic", retry=FAST_RETRY) as client:
        err = await failure(Agent(client, tools=[add]).run("1+2?"))
    assert isinstance(err, ProviderError)
    assert err.partial is not None
    assert err.partial.usage is not None
    assert err.partial.usage.prompt_tokens == 250
    assert err.partial.usage.completion_tokens >= 10
    assert server.request_count == 2  # (content had come: not retried)


@pytest.mark.asyncio
async def test_max_steps_exceeded_keeps_the_usage_of_every_step(server: LLMServer) -> None:
    server.default = Reply(
        tool_calls=[ToolCallSpec("add", {"a": 1, "b": 1})], usage=Usage(10, 1, 11)
    )
    async with client_for(server, "openai-chat") as client:
        err = await failure(Agent(client, tools=[add], max_steps=3).run("loop"))
    assert isinstance(err, MaxStepsExceeded)
    assert err.partial is not None
    assert err.partial.usage == Usage(30, 3, 33)


@pytest.mark.asyncio
async def test_aclose_mid_stream_keeps_the_usage_already_reported(server: LLMServer) -> None:
    """A service shutting down closes its client with a long Anthropic answer in flight:
    the call ends with a non-retryable ``TransportError`` whose partial holds the text
    so far and ``message_start``'s input tokens."""
    server.enqueue(Reply(text="word " * 400, chunk_size=5, delay=0.002, usage=Usage(77, 9, 86)))
    client = client_for(server, "anthropic")
    texts: list[str] = []
    got_text = asyncio.Event()

    def seen(result: Any) -> None:
        if any(getattr(c, "text", "") for c in result.contents):
            texts.append("x")
            got_text.set()

    task = asyncio.create_task(
        failure(client.stream([ChatMessage.user("long")]).pipe(ops.convert(), rx.do_action(seen)))
    )
    await asyncio.wait_for(got_text.wait(), 10)
    await client.aclose()
    err = await task
    assert type(err) is TransportError
    assert not err.retryable
    assert "aclose()" in str(err)
    assert err.partial is not None
    assert err.partial.text.startswith("word")
    assert err.partial.usage is not None
    assert err.partial.usage.prompt_tokens == 77
    await settle(server)
    assert server.open_connections == 0


usages = st.builds(
    Usage,
    st.integers(0, 10**7),
    st.integers(0, 10**7),
    st.integers(0, 2 * 10**7),
    st.none() | st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(usages, min_size=1, max_size=8))
def test_summing_usage_in_any_grouping_gives_the_same_bill(parts: list[Usage]) -> None:
    """A meter that sums per step, per turn or per day must agree: ``+`` is associative
    and commutative, and a detail stays ``None`` only when no part reported it."""
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    backwards = parts[-1]
    for part in reversed(parts[:-1]):
        backwards = part + backwards
    assert total == backwards
    assert total.prompt_tokens == sum(p.prompt_tokens for p in parts)
    assert total.total_tokens == sum(p.total_tokens for p in parts)
    for name in ("reasoning_tokens", "cached_tokens"):
        given_values = [getattr(p, name) for p in parts if getattr(p, name) is not None]
        assert getattr(total, name) == (sum(given_values) if given_values else None)


# ---------------------------------------------------------------- error reports


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("status", "retry_after", "expected_wait"),
    [(429, "7", 7.0), (500, None, None), (503, "2", 2.0), (529, None, None)],
)
async def test_an_http_error_carries_what_the_on_call_engineer_needs(
    server: LLMServer, fmt: str, status: int, retry_after: str | None, expected_wait: float | None
) -> None:
    """Status, retryable, the server's ``Retry-After`` and the request id for support;
    a short one-line ``str`` and ``repr`` without the key."""
    server.enqueue(Fault.status(status, retry_after=retry_after))
    async with client_for(server, fmt) as client:
        err = await failure(client.stream([ChatMessage.user("x")]).pipe(ops.convert()))
    assert isinstance(err, HTTPStatusError)
    assert err.status == status
    assert err.retryable
    assert err.retry_after == expected_wait
    assert isinstance(err.request_id, str)
    assert err.request_id.startswith("req_")
    for text in (str(err), repr(err)):
        assert "\n" not in text
        assert len(text) < 300
        assert KEY not in text
    assert str(status) in str(err)


@pytest.mark.asyncio
async def test_a_quota_429_is_not_retryable_and_is_sent_once(server: LLMServer) -> None:
    """Out of credit, not rate limited: retrying cannot help, so the retry policy does
    not hammer the provider (OpenAI's ``insufficient_quota``)."""
    server.enqueue(Fault.status(429, error_type="insufficient_quota", message="You exceeded"))
    async with client_for(server, "openai-chat", retry=FAST_RETRY) as client:
        err = await failure(client.stream([ChatMessage.user("x")]).pipe(ops.convert()))
    assert isinstance(err, HTTPStatusError)
    assert not err.retryable
    assert err.attempts == 1
    assert server.request_count == 1


@pytest.mark.asyncio
async def test_an_overloaded_event_before_content_is_retried_and_after_content_is_terminal(
    server: LLMServer,
) -> None:
    """Anthropic's ``overloaded_error`` event: right after ``message_start`` (nothing
    delivered) the policy retries it and the turn succeeds; after text it ends the
    call, still ``retryable`` as a request, with the text in its partial."""
    start = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
        b'"type":"message","role":"assistant","model":"m","content":[],"usage":'
        b'{"input_tokens":5,"output_tokens":1}}}\n\n'
    )
    overloaded = (
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"Overloaded"}}\n\n'
    )
    text = (
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Half an ans"}}\n\n'
    )
    server.enqueue(Replay(start + overloaded), Reply(text="fine", usage=Usage(5, 1, 6)))
    async with client_for(server, "anthropic", retry=FAST_RETRY) as client:
        response = await one_call(client)
        assert response.text == "fine"
        assert response.usage == Usage(5, 1, 6)
        assert server.request_count == 2
        server.enqueue(Replay(start + text + overloaded))
        err = await failure(client.stream([ChatMessage.user("x")]).pipe(ops.convert()))
    assert isinstance(err, ProviderError)
    assert err.error_type == "overloaded_error"
    assert err.retryable
    assert err.attempts == 1
    assert server.request_count == 3
    assert err.partial is not None
    assert err.partial.text == "Half an ans"
    assert err.partial.usage is not None
    assert err.partial.usage.prompt_tokens == 5


@pytest.mark.asyncio
async def test_a_64_kb_error_body_gives_a_bounded_report(server: LLMServer) -> None:
    """A proxy's 64 KB error page: the error, its repr and its pickle stay bounded, so a
    log line or an error tracker event does not balloon."""
    page = "<html>" + "<p>upstream exploded</p>\n" * 3000 + "</html>"
    assert len(page) > 64 * 1024
    server.enqueue(Fault.status(502, body=page))
    async with client_for(server, "openai-chat") as client:
        err = await failure(client.stream([ChatMessage.user("x")]).pipe(ops.convert()))
    assert isinstance(err, HTTPStatusError)
    assert err.status == 502
    assert err.body is not None
    assert len(err.body) <= MAX_BODY_CHARS + 64
    assert len(str(err)) <= MAX_BODY_CHARS + 64
    assert len(repr(err)) <= MAX_BODY_CHARS + 128
    assert len(pickle.dumps(err)) < 4 * MAX_BODY_CHARS


@pytest.mark.asyncio
async def test_every_failure_kind_reports_a_typed_error_with_a_partial_that_pickles(
    server: LLMServer,
) -> None:
    """A multiprocessing worker sends its failure back pickled: each kind of stream
    failure survives the trip with its class, text, status, retryable flag and partial."""
    cases: list[tuple[Any, type[RafrxError]]] = [
        (Fault.status(503), HTTPStatusError),
        (Fault.drop_after(400, body=Reply(text="x" * 300)), StreamInterrupted),
        (Fault.stall(30, after_bytes=300, body=Reply(text="y" * 300)), IdleTimeout),
        (Fault.garbage(b"{unparsable"), MalformedEvent),
        (Fault.wrong_content_type(), ContentTypeError),
        (
            Replay(
                b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"z"}}]}\n\n'
                b'data: {"error":{"message":"Overloaded","type":"server_error"}}\n\n'
            ),
            ProviderError,
        ),
        (
            Replay(b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"z"}}]}\n\n'),
            IncompleteStream,
        ),
    ]
    async with client_for(server, "openai-chat", timeouts=Timeouts(idle=0.3)) as client:
        for response, kind in cases:
            server.enqueue(response)
            err = await failure(client.stream([ChatMessage.user("x")]).pipe(ops.convert()))
            assert isinstance(err, kind), (kind, err)
            back = pickle.loads(pickle.dumps(err))
            assert type(back) is type(err)
            assert (str(back), repr(back)) == (str(err), repr(err))
            assert (back.status, back.retryable, back.attempts) == (
                err.status,
                err.retryable,
                err.attempts,
            )
            assert err.partial is not None
            assert back.partial == err.partial
            assert "\n" not in repr(err)
            assert KEY not in repr(err) + str(err)


ERROR_KINDS: list[Any] = [
    RafrxError,
    TransportError,
    StreamInterrupted,
    StreamTimeout,
    ConnectTimeout,
    IdleTimeout,
    ProtocolError,
    ContentTypeError,
    IncompleteStream,
    ProviderError,
    MaxStepsExceeded,
    ToolError,
    ToolNotFound,
    InvalidToolArguments,
    ToolTimeout,
    ToolApprovalDenied,
    ToolExecutionError,
]


def _build(kind: Any, text: str) -> RafrxError:
    error: RafrxError = kind(text)
    return error


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(ERROR_KINDS),
    text=st.text(min_size=0, max_size=3 * MAX_BODY_CHARS),
    repeat=st.integers(1, 4),
)
def test_any_error_s_repr_is_one_bounded_line_and_round_trips_pickle(
    kind: Any, text: str, repeat: int
) -> None:
    """Whatever text an error is given (newlines, control characters, 24 KB of it), its
    ``repr`` is one line of bounded size, and pickling keeps its class and text."""
    err = _build(kind, text * repeat)
    shown = repr(err)
    assert "\n" not in shown
    assert "\r" not in shown
    assert len(shown) <= 6 * MAX_BODY_CHARS + 200  # (escapes may grow each character)
    assert len(str(err)) <= MAX_BODY_CHARS + 64
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is kind
    assert str(back) == str(err)
    assert repr(back) == shown


@settings(max_examples=40, deadline=None)
@given(
    status=st.integers(400, 599),
    body=st.text(max_size=2000),
    limit=st.integers(1, 10**9),
    raw=st.text(max_size=500),
)
def test_errors_with_their_own_fields_pickle_with_them(
    status: int, body: str, limit: int, raw: str
) -> None:
    http = HTTPStatusError(status, body=body, retry_after=1.5, request_id="req_1", code="c")
    back = pickle.loads(pickle.dumps(http))
    assert (back.status, back.body, back.retry_after, back.request_id, back.code) == (
        status,
        http.body,
        1.5,
        "req_1",
        "c",
    )
    assert back.retryable == (status in (408, 409, 429) or status >= 500)
    limited = pickle.loads(pickle.dumps(LimitExceeded("too long", limit=limit)))
    assert limited.limit == limit
    malformed = pickle.loads(pickle.dumps(MalformedEvent("bad", raw=raw, event_name="e")))
    assert (malformed.raw, malformed.event_name) == (raw, "e")


# ---------------------------------------------------------------- load and shutdown


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", FORMATS)
async def test_220_concurrent_streams_some_stalling_all_end_and_leave_nothing_open(
    server: LLMServer, fmt: str, logs: Captured
) -> None:
    """One stream in five stalls mid-body: those end in ``IdleTimeout`` (not retryable,
    partial kept), the others complete with their own text and usage, and afterwards no
    task, no connection and no log record is left."""

    @server.script
    def answer(request: Any) -> Any:
        content = request.messages[-1]["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        n = int(text)
        if n % 5 == 0:
            return Fault.stall(30, after_bytes=400, body=Reply(text="stalled " * 20, chunk_size=3))
        return Reply(text=f"answer {n}", chunk_size=2, usage=Usage(n, 1, n + 1))

    async with client_for(server, fmt, timeouts=Timeouts(idle=0.5)) as client:

        async def one(n: int) -> Any:
            try:
                return await one_call(client, str(n))
            except RafrxError as err:
                return err

        outcomes = await asyncio.gather(*(one(n) for n in range(220)))
    kinds = Counter(type(o).__name__ for o in outcomes)
    assert kinds == {"AgentResponse": 176, "IdleTimeout": 44}
    for n, outcome in enumerate(outcomes):
        if isinstance(outcome, AgentResponse):
            assert outcome.text == f"answer {n}"
            assert outcome.usage is not None
            assert outcome.usage.prompt_tokens == n
        else:
            assert n % 5 == 0
            assert not outcome.retryable
            assert outcome.partial is not None
    await settle(server)
    assert server.open_connections == 0
    assert other_tasks() == set()
    assert logs.of("rafrx") == []
    assert logs.of("asyncio", logging.WARNING) == []


@pytest.mark.asyncio
async def test_asyncio_timeout_around_agent_send_cancels_cleanly(
    server: LLMServer, loop_errors: list[dict[str, Any]], logs: Captured
) -> None:
    """``async with asyncio.timeout(...)`` around ``agent.send``: ``TimeoutError``, the
    connection is closed, nothing is saved, and the agent serves the next turn."""
    history = InMemoryHistoryProvider()
    server.enqueue(Reply(text="slow " * 200, chunk_size=1, delay=0.01))
    async with client_for(server, "openai-responses") as client:
        agent = Agent(client, history=history)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await agent.send("take your time")
        await server.wait_connections_closed()
        assert (await history.load()) == ()
        server.enqueue(Reply(text="quick"))
        response = await agent.send("now quick")
    assert response.text == "quick"
    assert [m.content for m in await history.load()] == ["now quick", "quick"]
    assert loop_errors == []
    assert logs.of("rafrx", logging.WARNING) == []


@pytest.mark.asyncio
async def test_asyncio_timeout_while_a_tool_runs_stops_the_tool_and_saves_nothing(
    server: LLMServer,
) -> None:
    history = InMemoryHistoryProvider()
    server.enqueue(Reply(tool_calls=[ToolCallSpec("slow", {"seconds": 30})]))
    async with client_for(server, "anthropic") as client:
        agent = Agent(client, tools=[slow], history=history)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await agent.send("wait")
    assert (await history.load()) == ()
    await settle(server)
    assert other_tasks() == set()


@pytest.mark.asyncio
async def test_aclose_with_turns_and_streams_in_flight_ends_each_with_a_typed_error(
    server: LLMServer, loop_errors: list[dict[str, Any]], logs: Captured
) -> None:
    """Shutdown: ``aclose()`` while 20 agent turns and 20 bare streams run; each ends
    with a non-retryable ``TransportError`` saying the client was closed, with a partial;
    nothing is saved half-way; every connection closes; nothing reaches the loop's
    handler or the log."""
    server.default = Reply(text="a long answer " * 100, chunk_size=2, delay=0.005)
    history = InMemoryHistoryProvider()
    client = client_for(server, "anthropic")
    agent = Agent(client, history=history)
    turns = [asyncio.create_task(agent.send(f"q{i}")) for i in range(20)]
    streams = [asyncio.create_task(one_call(client, f"s{i}")) for i in range(20)]
    await server.wait_requests(40, timeout=10)
    await asyncio.sleep(0.1)
    await client.aclose()
    outcomes = await asyncio.gather(*turns, *streams, return_exceptions=True)
    for outcome in outcomes:
        assert type(outcome) is TransportError, outcome
        assert not outcome.retryable
        assert outcome.partial is not None
    assert (await history.load()) == ()
    await settle(server)
    assert server.open_connections == 0
    assert other_tasks() == set()
    assert loop_errors == []
    assert logs.of("rafrx") == []


def test_asyncio_run_returning_with_turns_in_flight_leaks_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A worker's ``main()`` returns (or is interrupted) with turns and streams still
    running: ``asyncio.run`` cancels them; the server sees every connection close; no
    "Task was destroyed", "Unclosed" or "never retrieved" complaint is printed."""
    with LLMServer.in_thread() as server:
        server.default = Reply(text="never ending " * 200, chunk_size=2, delay=0.01)

        async def main() -> None:
            client = client_for(server, "openai-chat")
            agent = Agent(client, tools=[slow])
            for i in range(10):
                asyncio.get_running_loop().create_task(agent.send(f"q{i}"))
                asyncio.get_running_loop().create_task(one_call(client, f"s{i}"))
            await asyncio.sleep(0.3)

        asyncio.run(main())
        deadline = 50
        while server.open_connections and deadline:
            deadline -= 1
            time.sleep(0.05)
        assert server.request_count == 20
        assert server.open_connections == 0
    out, err = capfd.readouterr()
    for complaint in ("Task was destroyed", "Unclosed", "never retrieved", "Traceback"):
        assert complaint not in out + err
