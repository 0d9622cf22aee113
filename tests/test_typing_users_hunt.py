"""Bug hunt: the typing experience of users' code under ``mypy --strict``.

Small realistic user programs (pipelines, own operators, isinstance narrowing,
tools, approvals, agents, history conversions, rafrx.testing, errors, the
notebook/recorder helpers, every name in the public ``__all__`` lists) and the
docstring examples of the public modules are written to a temporary directory
and type-checked by ONE mypy run (module-scoped fixture). Tests then assert on
its errors and ``reveal_type`` notes; a few runtime checks back a hint.
"""

from __future__ import annotations

import asyncio
import doctest
import importlib
import inspect
import os
import re
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path

import pytest
import reactivex
from reactivex import Observable

import rafrx
from rafrx import updates
from rafrx.agent import ChatClient, ServerTool

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------ user programs

U_PIPELINE = """from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import reactivex
from reactivex import Observable
from reactivex import operators as rx

import rafrx
from rafrx import operators as ops
from rafrx import updates
from rafrx.sources import (
    DIALECTS, AnthropicDialect, Dialect, DialectFactory, OpenAIChatDialect,
    OpenAIResponsesDialect, UpdateDecoder, from_sse, get_dialect,
)
from rafrx.sse import ServerSentEvent
from rafrx.typing import Operator

BODY = (
    b'data: {"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]}\\n\\n'
    b"data: [DONE]\\n\\n"
)


def is_text(update: rafrx.AgentResponseUpdate) -> bool:
    return isinstance(update, updates.TextDelta)


def delta_of(update: rafrx.AgentResponseUpdate) -> str:
    if isinstance(update, updates.TextDelta):
        return update.delta
    if isinstance(update, updates.ToolCallDelta):
        return update.arguments_delta
    return ""


def texts(result: rafrx.AgentResponseResult) -> list[str]:
    return [c.text for c in result.contents if isinstance(c, rafrx.TextContent)]


def parsed_values(result: rafrx.AgentResponseResult) -> dict[str, object]:
    out: dict[str, object] = {}
    for c in result.contents:
        if isinstance(c, rafrx.ToolCallArgsParsedContent):
            out[c.name] = c.value
        elif isinstance(c, rafrx.ToolCallArgsProgressContent):
            out[c.name] = c.received + len(c.value)
        elif isinstance(c, rafrx.ToolCallIncompleteContent):
            out[c.call_id] = (c.raw_arguments, c.partial_value, c.error, c.finish_reason)
        elif isinstance(c, rafrx.UsageContent):
            out["usage"] = c.usage.total_tokens
        elif isinstance(c, rafrx.UriContent):
            out[c.uri] = c.media_type
        elif isinstance(c, rafrx.ToolCalledContent):
            out[c.call_id] = c.result if c.error is None else c.error
    return out


def only_text() -> Operator[rafrx.AgentResponseUpdate, rafrx.AgentResponseUpdate]:
    return rx.filter(is_text)


def tag(label: str) -> Operator[rafrx.AgentResponseResult, rafrx.AgentResponseResult]:
    def show(result: rafrx.AgentResponseResult) -> None:
        print(label, result.id, result.model, result.finish_reason)

    def apply(
        source: Observable[rafrx.AgentResponseResult],
    ) -> Observable[rafrx.AgentResponseResult]:
        return source.pipe(rx.do_action(show))
    return apply


def chunks() -> Iterator[bytes]:
    yield BODY[:10]
    yield BODY[10:]


async def achunks() -> AsyncIterator[bytes]:
    yield BODY


class MyDialect:
    def __init__(self) -> None:
        self.done = False

    def feed(self, event: ServerSentEvent) -> list[rafrx.AgentResponseUpdate]:
        return [updates.TextDelta(event.data)]

    def close(self) -> list[rafrx.AgentResponseUpdate]:
        return [updates.Finish(rafrx.FinishReason.STOP)]


def main() -> None:
    r1 = from_sse(BODY).pipe(ops.convert(), ops.aggregate()).run()
    reveal_type(r1)  # R:run
    r2 = rafrx.from_sse(chunks(), "openai-chat").pipe(
        ops.convert(), tag("x"), ops.aggregate("me")
    ).run()
    reveal_type(r2.source_agent_id)  # R:agent_id
    only = from_sse(BODY).pipe(only_text(), rx.map(delta_of), rx.to_list()).run()
    reveal_type(only)  # R:deltas
    joined = from_sse(BODY).pipe(ops.convert(), rx.map(texts)).run()
    reveal_type(joined)  # R:texts
    values = from_sse(BODY, dialect="openai-chat").pipe(
        ops.convert(eager=True, max_argument_chars=10), rx.map(parsed_values)
    ).run()
    print(values)
    steps = from_sse(BODY).pipe(
        ops.split_legacy_delta(), ops.accumulate_tool_calls(), ops.parse_args_stream(),
        ops.flush_tool_calls(), ops.aggregate(),
    ).run()
    reveal_type(steps)  # R:steps
    decoder = UpdateDecoder("anthropic")
    ups: list[rafrx.AgentResponseUpdate] = decoder.feed(BODY) + decoder.close()
    print(decoder.done, ups)
    factory: DialectFactory = AnthropicDialect
    d: Dialect = get_dialect("openai-responses")
    print(d.done, factory, DIALECTS["openai-chat"](), OpenAIChatDialect(), OpenAIResponsesDialect())
    mine: Observable[rafrx.AgentResponseUpdate] = from_sse(BODY, MyDialect)
    print(UpdateDecoder(MyDialect).feed(BODY), mine)
    from_sse(bytearray(BODY)).subscribe(print)
    from_sse(memoryview(BODY)).subscribe(print)


async def amain() -> None:
    response = await rafrx.collect_agent_response(from_sse(achunks()).pipe(ops.convert()))
    reveal_type(response)  # R:acollect
    items: list[rafrx.AgentResponseResult] = await from_sse(achunks()).pipe(
        ops.convert(), rx.to_list()
    )
    print(items)
    final = await from_sse(achunks()).pipe(ops.convert(), ops.aggregate())
    reveal_type(final)  # R:await_obs


main()
asyncio.run(amain())
"""

U_TOOLS = '''from __future__ import annotations

import asyncio
import functools
from typing import Annotated, Literal, TypedDict

import pydantic
import reactivex
from reactivex import operators as rx
from reactivex.subject import Subject

import rafrx
from rafrx import operators as ops
from rafrx.tools import as_tool, format_result


class Point(pydantic.BaseModel):
    x: int
    y: int


class Options(TypedDict):
    unit: Literal["c", "f"]


@rafrx.tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: first
        b: second
    """
    return a + b


@rafrx.tool(name="move", description="Move a point.", strict=True, timeout=2.5)
async def move(p: Point, dx: Annotated[int, pydantic.Field(ge=1)] = 1) -> Point:
    return Point(x=p.x + dx, y=p.y)


@rafrx.tool(requires_approval=True)
def weather(city: str, options: Options | None = None) -> dict[str, float]:
    """Weather in a city."""
    return {"temp": 20.0}


def search(query: str, api_key: str) -> str:
    """Search the web."""
    return query


web = rafrx.tool(functools.partial(search, api_key="sk-..."))


class Counter:
    total = 0

    @rafrx.tool
    def bump(self, n: int) -> int:
        """Add n."""
        self.total += n
        return self.total


async def approver(event: rafrx.ToolApprovalRequestEvent) -> bool:
    return event.name == "weather" and event.description != ""


def sync_answer(event: rafrx.ToolApprovalRequestEvent) -> rafrx.ToolApprovalResponse:
    return rafrx.ToolApprovalResponse(event.call_id, approved=True, reason=None)


async def main() -> None:
    t: rafrx.Tool = add
    print(t.name, t.description, t.parameters, t.requires_approval, t.timeout, t.strict)
    print(t.to_openai(), t.to_anthropic(), t.to_responses(), move.strict_parameters)
    checked: dict[str, object] = t.validate({"a": 1, "b": 2})
    value = await t.invoke({"a": 1, "b": 2})
    print(checked, value, format_result(value), as_tool(search).name, web.name)
    print(Counter().bump.parameters)
    calls = [rafrx.ToolCallingContent("c1", "add", {"a": 2, "b": 3})]
    stream = reactivex.of(rafrx.AgentResponseResult(contents=calls))
    out = await stream.pipe(ops.execute_tools([add, move, weather, search], approver), rx.to_list())
    reveal_type(out)  # R:exec_list
    answers: Subject[rafrx.ToolApprovalResponse] = Subject()
    stream.pipe(
        ops.execute_tools([add], answers, concurrency=2, max_result_chars=10, approval_timeout=1.0)
    )
    stream.pipe(ops.execute_tools([weather], sync_answer))
    stream.pipe(ops.execute_tools([weather], lambda e: True))
    hand = rafrx.Tool("echo", "Echo.", {"type": "object", "properties": {}}, lambda **kw: kw)
    print(hand)


asyncio.run(main())
'''

U_ERRORS = """from __future__ import annotations

import asyncio

import rafrx
from rafrx import errors
from rafrx.sources.clients import OpenAIChatClient, RetryPolicy, Timeouts


async def main() -> None:
    client = OpenAIChatClient(
        "http://127.0.0.1:1", api_key="sk-x", model="m",
        retry=RetryPolicy(max_attempts=2), timeouts=Timeouts(connect=1.0, idle=None),
        headers={"x": "y"}, trust_env=True, reasoning_field=None, temperature=0.2,
    )
    try:
        await rafrx.Agent(client).send("hi")
    except rafrx.HTTPStatusError as e:
        if e.status == 503:
            print(e.body, e.retry_after, e.request_id, e.code, e.error_type, e.provider_message)
    except rafrx.ProviderError as e:
        print(e.error_type, e.code, e.retryable)
    except rafrx.MalformedEvent as e:
        print(e.raw, e.event_name)
    except rafrx.LimitExceeded as e:
        print(e.limit + 1)
    except rafrx.ToolError as e:
        print(e.call_id, e.name)
    except (
        rafrx.IdleTimeout, rafrx.ConnectTimeout, rafrx.StreamTimeout, rafrx.StreamInterrupted,
        rafrx.TransportError,
    ) as e:
        print(e.attempts, e.message)
    except (
        rafrx.IncompleteStream, rafrx.ContentTypeError, rafrx.ProtocolError, rafrx.MaxStepsExceeded
    ) as e:
        print(e)
    except (
        rafrx.ToolNotFound, rafrx.InvalidToolArguments, rafrx.ToolTimeout,
        rafrx.ToolApprovalDenied, rafrx.ToolExecutionError,
    ) as e:
        print(e.name)
    except rafrx.RafrxError as e:
        attempts: int = e.attempts
        retry: bool = e.retryable
        status: int | None = e.status
        body: str | None = e.body
        msg: str = e.message
        if e.partial is not None:
            reveal_type(e.partial)  # R:partial
            print(e.partial.text, e.partial.interrupted)
        print(attempts, retry, status, body, msg, errors.MAX_BODY_CHARS)
    finally:
        await client.aclose()
    async with rafrx.AnthropicClient("http://x") as ac:
        reveal_type(ac)  # R:aenter
    async with rafrx.OpenAIResponsesClient("http://x", store=False) as rc:
        reveal_type(rc)  # R:aenter_resp
    lc: rafrx.LLMClient = rc
    print(lc.model, lc.retry, lc.timeouts)


asyncio.run(main())
"""

U_AGENT = '''from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import reactivex
from reactivex import Observable

import rafrx
from rafrx import updates
from rafrx.agent import ServerTool
from rafrx.history import is_new
from rafrx.messages import from_anthropic, paired, to_anthropic, to_openai_chat


@rafrx.tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


class MyClient:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def stream(
        self,
        messages: Sequence[rafrx.ChatMessage],
        tools: Sequence[rafrx.Tool | ServerTool] | None = None,
    ) -> Observable[rafrx.AgentResponseUpdate]:
        for t in tools or ():
            self.seen.append(str(t.get("name")) if isinstance(t, Mapping) else t.name)
        items: list[rafrx.AgentResponseUpdate] = [
            updates.TextDelta("ok"), updates.Finish(rafrx.FinishReason.STOP)
        ]
        return reactivex.from_iterable(items)


class Saver:
    def __init__(self) -> None:
        self.kept: list[rafrx.ChatMessage] = []

    async def load(self) -> Sequence[rafrx.ChatMessage]:
        return list(self.kept)

    async def save(self, messages: Sequence[rafrx.ChatMessage]) -> None:
        self.kept.extend(m for m in messages if is_new(m))


class Today:
    async def provide(self, messages: Sequence[rafrx.ChatMessage]) -> Sequence[rafrx.ChatMessage]:
        return [rafrx.ChatMessage.system("Today is Monday.")]


async def main() -> None:
    hp: rafrx.HistoryProvider = Saver()
    cp: rafrx.ContextProvider = Today()
    mem = rafrx.InMemoryHistoryProvider([rafrx.ChatMessage.user("earlier")])
    server_tool: Mapping[str, Any] = {"type": "web_search_20250305", "name": "web_search"}
    agent = rafrx.Agent(
        MyClient(), tools=[add, server_tool], history=hp, context_providers=[cp],
        max_steps=2, id="a", concurrency=4, eager_tools=True, approval_timeout=3.0,
    )
    agent2 = rafrx.Agent(MyClient(), tools=[add, {"type": "web_search"}], history=mem)
    r = await agent.send([rafrx.ChatMessage.user("hi"), rafrx.ChatMessage.system("x")])
    reveal_type(r.text)  # R:text
    reveal_type(r.reasoning_text)  # R:reasoning
    reveal_type(r.finish_reason)  # R:finish
    r2 = await agent2.send(rafrx.ChatMessage.user("hi"))
    msgs = list(r.turn_transcript) + list(r2.tool_messages)
    wire = [m.to_openai() for m in msgs]
    back = [rafrx.ChatMessage.from_openai(w) for w in wire]
    system, anth = to_anthropic(back)
    again = from_anthropic(system, anth)
    reveal_type(again)  # R:from_anthropic
    chat = to_openai_chat(paired(again))
    reveal_type(chat)  # R:to_openai_chat
    msg = rafrx.ChatMessage(rafrx.MessageRole.USER, "x", source=rafrx.MessageSource.EXTERNAL)
    call = rafrx.ToolCall("c1", "add", {"a": 1}, raw_arguments='{"a": 1}', complete=True)
    asst = rafrx.ChatMessage.assistant_with_tools("", [call])
    tool_msg = rafrx.ChatMessage.tool("3", "c1")
    print(msg.role.value, asst.tool_calls, tool_msg.tool_call_id, mem.messages)
    print(rafrx.Usage(1, 2, 3) + rafrx.Usage(reasoning_tokens=1, cached_tokens=2))
    meta = rafrx.ResponseMetadata(id="x", model="m")
    print(meta, rafrx.TextContent("x", meta=rafrx.ResponseMetadata()))


asyncio.run(main())
'''

U_TESTING = """from __future__ import annotations

import asyncio
from pathlib import Path

import rafrx
from rafrx.testing import (
    DEFAULT_REPLY, FAULT_REPLY, REDACTED, WIRE_FORMATS, Body, Fault, FaultKind, LLMServer,
    RecordedRequest, Replay, Reply, Script, ServerResponse, ServerThread, ToolCallSpec,
    WireFormat, error_body, estimate_usage, redact_headers, render, render_events,
)


async def turn(request: RecordedRequest) -> ServerResponse:
    if request.last_role == "tool":
        return Reply(text="Done.")
    return Reply(tool_calls=[ToolCallSpec("add", {"a": 1, "b": 2})], finish="tool_use")


def sync_turn(request: RecordedRequest) -> Reply:
    usage = rafrx.Usage(1, 1, 2)
    return Reply(text=str(request.json), model="m", usage=usage, chunk_size=3, delay=0.0)


async def main() -> None:
    async with LLMServer(keep_requests=10, default=DEFAULT_REPLY) as server:
        server.enqueue(Reply(text="hi", reasoning="hmm"), Fault.status(429, retry_after=1))
        server.enqueue(Fault.drop_after(10, body=Reply(text="x")), Fault.stall(1.0))
        server.enqueue(Fault.garbage())
        server.enqueue(Fault.huge_line(), Fault.wrong_content_type())
        server.enqueue(Replay(b"data: [DONE]\\n\\n", chunk_size=4))
        script: Script = turn
        server.script(script)
        decorated = server.script(sync_turn)
        reveal_type(decorated)  # R:script
        server.script(None)
        client = rafrx.OpenAIChatClient(server.url, model="m")
        response = await rafrx.Agent(client).send("hi")
        print(response.text, server.port, server.queued, server.open_connections)
        print(server.request_count)
        await server.wait_requests(1)
        await server.wait_connections_closed()
        req = server.requests[0]
        print(req.path, req.headers.get("x"), req.json, req.method, req.wire_format)
        print(req.messages, req.tool_names, req.model, req.body)
        await client.aclose()
    kind: FaultKind = "stall"
    fmt: WireFormat = WIRE_FORMATS["/v1/messages"]
    body: Body = b"x"
    raw: bytes = render(Reply(text="x"), fmt)
    events: list[bytes] = render_events(Reply(text="x"), "openai-chat", {"model": "m"})
    print(kind, body, raw, events, error_body("anthropic", 500, "boom"))
    print(estimate_usage(Reply(text="x")).total_tokens)
    print(REDACTED, FAULT_REPLY, redact_headers({"Authorization": "Bearer x"}))


def sync_user() -> None:
    thread: ServerThread = LLMServer.in_thread()
    with thread as server:
        server.enqueue(Reply(text="hi"))
        n: int = thread.run(asyncio.sleep(0, 5))
        print(server.url, n)


asyncio.run(main())
sync_user()
"""

U_VIEWS = """from __future__ import annotations

import asyncio

import rafrx
from rafrx import operators as ops
from rafrx.json_stream import ArgEvent, ArgMember, ArgProgress, StreamingArgsParser, partial_json
from rafrx.recorder import load, sample


async def main() -> None:
    updates = rafrx.replay(sample("demo-anthropic.sse"), dialect="auto")
    response = updates.pipe(ops.convert(), ops.aggregate()).run()
    reveal_type(response)  # R:replay_run
    view = rafrx.live(rafrx.from_sse(b"data: [DONE]\\n\\n").pipe(ops.convert()), interval=0.1)
    reveal_type(await view)  # R:live
    recorded = rafrx.record(updates, "/tmp/x.jsonl", secrets=["sk-1"])
    print(rafrx.timeline("/tmp/x.jsonl", width=300, title="t"), recorded)
    print(load("/tmp/x.jsonl").items)
    parser = StreamingArgsParser()
    for event in parser.feed('{"a": "b'):
        reveal_type(event)  # R:arg_event
        if isinstance(event, ArgMember):
            print(event.name, event.value)
        elif isinstance(event, ArgProgress):
            print(event.received + 1, event.fragment)
    typed = StreamingArgsParser(progress=lambda n, r, f: (n, r), member=lambda n, v: (n, 0))
    reveal_type(typed)  # R:typed_parser
    e: ArgEvent = ArgMember("a", 1)
    print(e, parser.close(), partial_json('{"a": [1, 2'))


asyncio.run(main())
"""

U_MATCH = """
from __future__ import annotations

from typing import assert_never

import rafrx
from rafrx import updates as u


def describe(update: rafrx.AgentResponseUpdate) -> str:
    match update:
        case u.TextDelta(delta) | u.ReasoningDelta(delta):
            return delta
        case u.ToolCallDelta(index, call_id, name, args):
            return f"{index}{call_id}{name}{args}"
        case u.ToolCallStart(call_id, name):
            return call_id + name
        case u.ToolCallArgs(call_id, delta):
            return call_id + delta
        case u.ToolCallEnd(call_id):
            return call_id
        case u.ToolCalled(call_id, result, error):
            return f"{call_id}{result}{error}"
        case u.ToolApprovalRequest(call_id, name, arguments, description):
            return description
        case u.Usage(usage):
            return str(usage.total_tokens)
        case u.Finish(reason, usage):
            return reason.value
        case u.Error(message):
            return message
        case u.ResponseMetadata(rid, model):
            return f"{rid}{model}"
        case u.Uri(uri, media_type):
            return uri
        case _:
            assert_never(update)


print(describe(u.TextDelta("x")))
"""

# A tool called directly, "as if it were not decorated" (Tool.__call__'s docstring).
U_TOOL_CALL = '''
from __future__ import annotations

import rafrx


@rafrx.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class Counter:
    total = 0

    @rafrx.tool
    def bump(self, n: int) -> int:
        """Add n."""
        self.total += n
        return self.total


def total() -> int:
    return add(1, 2)


def bumped(counter: Counter) -> int:
    return counter.bump(3)


reveal_type(add(1, 2))  # R:direct
print(total(), bumped(Counter()))
'''

U_HTTP_STATUS = """
from __future__ import annotations

import rafrx


def is_server_side(error: rafrx.HTTPStatusError) -> bool:
    return error.status >= 500


def code_of(error: rafrx.HTTPStatusError) -> int:
    return error.status


reveal_type(rafrx.HTTPStatusError(503).status)  # R:status
print(is_server_side(rafrx.HTTPStatusError(503)), code_of(rafrx.HTTPStatusError(429)))
"""

# Each line marked "# E" passes a documented client option with a wrong type.
U_CLIENT_KWARGS = """
from __future__ import annotations

import rafrx
from rafrx.sources.clients import RetryPolicy, Timeouts

rafrx.OpenAIChatClient("http://x", timeouts="soon")  # E
rafrx.OpenAIChatClient("http://x", retry=3)  # E
rafrx.OpenAIChatClient("http://x", headers=["Authorization"])  # E
rafrx.AnthropicClient("http://x", timeouts=5.0)  # E
rafrx.AnthropicClient("http://x", trust_env="yes")  # E
rafrx.OpenAIResponsesClient("http://x", timeouts="soon")  # E
rafrx.OpenAIChatClient("http://x", timeouts=Timeouts(), retry=RetryPolicy(), trust_env=True)
rafrx.AnthropicClient("http://x", timeouts=Timeouts(idle=5.0), headers={"x": "y"}, max_tokens=10)
"""

# Agent's docstring: "The arguments are kept as attributes of the same names; assigning
# ``tools`` or ``approver`` takes effect from the next LLM call on."
U_AGENT_ASSIGN = '''
from __future__ import annotations

import rafrx


@rafrx.tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def now() -> str:
    """The time."""
    return "12:00"


async def approve(event: rafrx.ToolApprovalRequestEvent) -> bool:
    return True


agent = rafrx.Agent(rafrx.OpenAIChatClient("http://127.0.0.1:1"), tools=[add, now])
agent.tools = [add]
agent.tools = [add, now, {"type": "web_search"}]
agent.approver = approve
print(agent)
'''

# The offline pipeline exactly as the package docstring shows it, in a typed function.
U_OFFLINE_MIXED = """
from __future__ import annotations

import reactivex

from rafrx import FinishReason, operators as ops, updates


def hello() -> str:
    stream = reactivex.from_iterable(
        [updates.TextDelta("Hello"), updates.Finish(FinishReason.STOP)])
    return stream.pipe(ops.convert(), ops.aggregate()).run().text


def of_form() -> str:
    stream = reactivex.of(updates.TextDelta("Hi"), updates.Finish(FinishReason.STOP))
    return stream.pipe(ops.convert(), ops.aggregate()).run().text


print(hello(), of_form())
"""

PUBLIC_MODULES = [
    "rafrx",
    "rafrx.agent",
    "rafrx.content",
    "rafrx.errors",
    "rafrx.events",
    "rafrx.history",
    "rafrx.json_stream",
    "rafrx.messages",
    "rafrx.notebook",
    "rafrx.operators",
    "rafrx.recorder",
    "rafrx.response",
    "rafrx.sources",
    "rafrx.sources.clients",
    "rafrx.sources.dialects",
    "rafrx.sse",
    "rafrx.terminal",
    "rafrx.testing",
    "rafrx.tools",
    "rafrx.typing",
    "rafrx.updates",
]


def _names_program() -> str:
    """Every name of every public ``__all__``, read through its module (as users do)."""
    lines = ["from __future__ import annotations", ""]
    for module in PUBLIC_MODULES:
        alias = module.replace(".", "_")
        lines.append(f"import {module} as {alias}")
    lines.append("")
    for module in PUBLIC_MODULES:
        alias = module.replace(".", "_")
        for name in importlib.import_module(module).__all__:
            lines.append(f"reveal_type({alias}.{name})  # N:{module}.{name}")
    lines.append("from rafrx import *  # noqa: F403")
    lines.append("print(Agent, AgentResponse, tool, convert, from_sse, OpenAIChatClient, live)")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ docstring examples

_ASSIGNED = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=]*)?=(?!=)", re.M)


def _doc_programs() -> dict[str, str]:
    """The examples of the public modules' docstrings, each as a program importing the
    names it uses from the module they were written in."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    programs: dict[str, str] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for test in finder.find(module, module_name):
            if not test.examples or any(p.startswith("_") for p in test.name.split(".")):
                continue
            source = "".join(example.source for example in test.examples)
            assigned = set(_ASSIGNED.findall(source))
            imports = []
            for word in sorted(set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source)) - assigned):
                if word.startswith("__") or word not in vars(module):
                    continue
                value = vars(module)[word]
                if isinstance(value, types.ModuleType):
                    imports.append(f"import {value.__name__} as {word}")
                elif word in getattr(module, "__all__", ()):
                    imports.append(f"from {module_name} import {word}")
                else:
                    origin = getattr(value, "__module__", None) or module_name
                    if not hasattr(sys.modules.get(origin), word):
                        origin = module_name
                    imports.append(f"from {origin} import {word}")
            programs[test.name] = "\n".join(imports) + "\n" + source
    return programs


def _doc_file(name: str) -> str:
    return "docs/" + name.replace(".", "_") + ".py"


MYPY_INI = """
[mypy]
strict = True
python_version = 3.11
show_error_codes = True

[mypy-docs.*]
# Doctests are written untyped: check their bodies, not their missing annotations.
disallow_untyped_defs = False
disallow_incomplete_defs = False
disallow_untyped_calls = False
check_untyped_defs = True
warn_unused_ignores = False
disable_error_code = var-annotated, no-untyped-def
"""


class MypyRun:
    def __init__(self, directory: Path, files: dict[str, str]) -> None:
        self.sources = files
        (directory / "docs").mkdir()
        (directory / "docs" / "__init__.py").write_text("", encoding="utf-8")
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
        (directory / "mypy.ini").write_text(MYPY_INI, encoding="utf-8")
        env = {**os.environ, "MYPYPATH": str(ROOT)}
        self.result = subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--config-file",
                str(directory / "mypy.ini"),
                "--cache-dir",
                str(directory / ".mypy_cache"),
                *sorted(files),
            ],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        self.lines = self.result.stdout.splitlines()

    def errors(self, file: str) -> list[str]:
        return [line for line in self.lines if line.startswith(f"{file}:") and ": error:" in line]

    def line_of(self, file: str, marker: str) -> int:
        source = self.sources[file].splitlines()
        return next(i for i, line in enumerate(source, 1) if line.endswith(marker))

    def revealed(self, file: str, tag: str) -> str:
        number = self.line_of(file, f"# R:{tag}")
        prefix = f"{file}:{number}: note: Revealed type is "
        found = [line[len(prefix) :].strip('"') for line in self.lines if line.startswith(prefix)]
        assert found, f"no reveal for {tag}:\n{self.result.stdout}{self.result.stderr}"
        return found[0]


USER_FILES = {
    "u_pipeline.py": U_PIPELINE,
    "u_tools.py": U_TOOLS,
    "u_errors.py": U_ERRORS,
    "u_agent.py": U_AGENT,
    "u_testing.py": U_TESTING,
    "u_views.py": U_VIEWS,
    "u_match.py": U_MATCH,
    "u_tool_call.py": U_TOOL_CALL,
    "u_http_status.py": U_HTTP_STATUS,
    "u_client_kwargs.py": U_CLIENT_KWARGS,
    "u_offline_mixed.py": U_OFFLINE_MIXED,
    "u_agent_assign.py": U_AGENT_ASSIGN,
}

DOCS = _doc_programs()


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> MypyRun:
    files = {**USER_FILES, "u_names.py": _names_program()}
    for name, text in DOCS.items():
        files[_doc_file(name)] = text
    run = MypyRun(tmp_path_factory.mktemp("typing_users_hunt"), files)
    assert run.result.returncode in (0, 1), run.result.stdout + run.result.stderr
    assert "Found" in run.result.stdout or "Success" in run.result.stdout, run.result.stderr
    return run


# ------------------------------------------------------------------ tests: clean programs

CLEAN = [
    "u_pipeline.py",
    "u_tools.py",
    "u_errors.py",
    "u_agent.py",
    "u_testing.py",
    "u_views.py",
    "u_match.py",
    "u_names.py",
]


@pytest.mark.parametrize("file", CLEAN)
def test_user_program_passes_mypy_strict(mypy_run: MypyRun, file: str) -> None:
    assert mypy_run.errors(file) == [], mypy_run.result.stdout


REVEALS = [
    ("u_pipeline.py", "run", "rafrx.response.AgentResponse"),
    ("u_pipeline.py", "agent_id", "str | None"),
    ("u_pipeline.py", "deltas", "builtins.list[builtins.str]"),
    ("u_pipeline.py", "texts", "builtins.list[builtins.str]"),
    ("u_pipeline.py", "steps", "rafrx.response.AgentResponse"),
    ("u_pipeline.py", "acollect", "rafrx.response.AgentResponse"),
    ("u_pipeline.py", "await_obs", "rafrx.response.AgentResponse"),
    ("u_tools.py", "exec_list", "builtins.list[rafrx.response.AgentResponseResult]"),
    ("u_errors.py", "partial", "rafrx.response.AgentResponse"),
    ("u_errors.py", "aenter", "rafrx.sources.clients.AnthropicClient"),
    ("u_errors.py", "aenter_resp", "rafrx.sources.clients.OpenAIResponsesClient"),
    ("u_agent.py", "text", "builtins.str"),
    ("u_agent.py", "finish", "rafrx.response.FinishReason | None"),
    ("u_agent.py", "from_anthropic", "builtins.list[rafrx.messages.ChatMessage]"),
    (
        "u_testing.py",
        "script",
        "def (request: rafrx.testing._recorded.RecordedRequest) -> rafrx.testing._responses.Reply",
    ),
    ("u_views.py", "replay_run", "rafrx.response.AgentResponse"),
    ("u_views.py", "live", "rafrx.response.AgentResponse"),
    ("u_views.py", "arg_event", "rafrx.json_stream.ArgMember | rafrx.json_stream.ArgProgress"),
    (
        "u_views.py",
        "typed_parser",
        "rafrx.json_stream.StreamingArgsParser[tuple[builtins.str, builtins.int]]",
    ),
]


def _plain(revealed: str) -> str:
    return revealed.replace("builtins.", "")


@pytest.mark.parametrize(
    ("file", "tag", "expected"), REVEALS, ids=[f"{f}:{t}" for f, t, _ in REVEALS]
)
def test_inferred_types_are_the_documented_ones(
    mypy_run: MypyRun, file: str, tag: str, expected: str
) -> None:
    assert _plain(mypy_run.revealed(file, tag)) == _plain(expected)


def test_no_public_name_is_any_to_mypy(mypy_run: MypyRun) -> None:
    """Every name of the public ``__all__`` lists is known to mypy (no name is ``Any``:
    a lazily imported client, a re-export missing from a stub path …)."""
    source = mypy_run.sources["u_names.py"].splitlines()
    any_names = []
    for number, line in enumerate(source, 1):
        if "# N:" not in line:
            continue
        prefix = f"u_names.py:{number}: note: Revealed type is "
        found = [x[len(prefix) :] for x in mypy_run.lines if x.startswith(prefix)]
        assert found, line
        if found[0].strip('"') == "Any":
            any_names.append(line.split("# N:")[1])
    assert any_names == []
    assert sum("# N:" in line for line in source) >= 250


# ------------------------------------------------------------------ tests: bugs


def test_calling_a_tool_directly_keeps_its_types(mypy_run: MypyRun) -> None:
    assert mypy_run.errors("u_tool_call.py") == [], mypy_run.result.stdout
    assert _plain(mypy_run.revealed("u_tool_call.py", "direct")) == "int"


def test_http_status_error_status_is_an_int(mypy_run: MypyRun) -> None:
    assert _plain(mypy_run.revealed("u_http_status.py", "status")) == "int"
    assert mypy_run.errors("u_http_status.py") == [], mypy_run.result.stdout


def test_client_options_are_type_checked_on_every_client(mypy_run: MypyRun) -> None:
    source = mypy_run.sources["u_client_kwargs.py"].splitlines()
    marked = [i for i, line in enumerate(source, 1) if line.endswith("# E")]
    errors = mypy_run.errors("u_client_kwargs.py")
    missed = [
        source[i - 1]
        for i in marked
        if not any(e.startswith(f"u_client_kwargs.py:{i}:") for e in errors)
    ]
    assert len(marked) == 6
    assert missed == []
    unmarked = [e for e in errors if int(e.split(":")[1]) not in marked]
    assert unmarked == []


def test_the_documented_offline_pipeline_type_checks(mypy_run: MypyRun) -> None:
    assert mypy_run.errors("u_offline_mixed.py") == [], mypy_run.result.stdout


def test_agent_tools_can_be_reassigned_as_documented(mypy_run: MypyRun) -> None:
    assert mypy_run.errors("u_agent_assign.py") == [], mypy_run.result.stdout


def test_agent_tools_reassigned_as_a_list_of_functions_work_at_run_time() -> None:
    turns: list[list[rafrx.AgentResponseUpdate]] = [
        [
            updates.ToolCallStart("c1", "add"),
            updates.ToolCallArgs("c1", '{"a": 2, "b": 3}'),
            updates.ToolCallEnd("c1"),
            updates.Finish(rafrx.FinishReason.TOOL_CALLS),
        ],
        [updates.TextDelta("5"), updates.Finish(rafrx.FinishReason.STOP)],
    ]

    class Client:
        def stream(
            self, messages: Sequence[rafrx.ChatMessage], tools: Sequence[rafrx.Tool] | None = None
        ) -> Observable[rafrx.AgentResponseUpdate]:
            return reactivex.from_iterable(turns.pop(0))

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    agent = rafrx.Agent(Client())
    agent.tools = [add]  # type: ignore[assignment]  # the bug above
    response = asyncio.run(agent.send("2 + 3?"))
    assert [m.content for m in response.turn_transcript] == ["", "5", "5"]


def _doc_errors(mypy_run: MypyRun, name: str) -> list[str]:
    file = _doc_file(name)
    # mypy reports the module's path relative to the run's directory
    return [line for line in mypy_run.lines if line.startswith(f"{file}:") and ": error:" in line]


# These once failed (mixed update lists joining to `object`, `usage.total_tokens` on
# `Usage | None`, indexing `tool_calls` that may be None, `reactivex.operators` after a
# bare `import reactivex`): named so that they stay among the extracted examples.
ONCE_FAILING = [
    "rafrx",
    "rafrx.messages.with_call_ids",
    "rafrx.recorder.record",
    "rafrx.operators",
    "rafrx.operators.convert",
    "rafrx.operators.flush_tool_calls",
    "rafrx.operators.parse_args_stream",
    "rafrx.response.AgentResponse",
    "rafrx.sources",
    "rafrx.updates",
]


def test_docstring_examples_were_extracted() -> None:
    assert len(DOCS) >= 60
    assert set(ONCE_FAILING) <= set(DOCS)
    assert "from_iterable" in DOCS["rafrx"]


@pytest.mark.parametrize("name", sorted(DOCS))
def test_docstring_example_type_checks(mypy_run: MypyRun, name: str) -> None:
    assert _doc_errors(mypy_run, name) == [], DOCS[name]


# ------------------------------------------------------------------ runtime backing a hint


def test_chat_client_protocol_hint_names_what_the_agent_passes() -> None:
    """The protocol's ``tools`` hint includes server tools, which an agent passes as
    they were given (``Agent(tools=[f, {"type": "web_search_20250305", ...}])``)."""
    seen: list[object] = []

    class Client:
        def stream(
            self,
            messages: Sequence[rafrx.ChatMessage],
            tools: Sequence[rafrx.Tool | ServerTool] | None = None,
        ) -> Observable[updates.Update]:
            seen.extend(tools or ())
            return reactivex.from_iterable(
                [updates.TextDelta("ok"), updates.Finish(rafrx.FinishReason.STOP)]
            )

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    server_tool = {"type": "web_search_20250305", "name": "web_search"}
    agent = rafrx.Agent(Client(), tools=[add, server_tool])
    response = asyncio.run(agent.send("hi"))
    assert response.text == "ok"
    assert [type(t).__name__ for t in seen] == ["Tool", "dict"]
    hint = inspect.signature(ChatClient.stream).parameters["tools"].annotation
    assert hint == "Sequence[Tool | ServerTool] | None"


def test_a_tool_called_directly_runs_the_function() -> None:
    """What the typing bug above is about works at run time: the call is the function's."""

    @rafrx.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert add(1, 2) == 3
    assert rafrx.HTTPStatusError(503).status == 503
