"""JSON value edge cases across the whole stack (hunt).

NaN / Infinity / -0.0 / 1e400 / huge integers / duplicate keys / top-level
non-objects as tool arguments, followed from the streaming parser through
``flush_tool_calls``, tool validation and conversion, the next request sent to
the provider (real HTTP on 127.0.0.1, checked as *strict* JSON), the
serialisations (``AgentResponse.to_dict``, the recorder); tool results that
are not JSON-friendly; the dialects' fast and general paths on odd values;
usage arithmetic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
import reactivex
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx

from rafrx import Agent, AgentResponseResult, FinishReason, Usage
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import ToolCallIncompleteContent, ToolCallingContent
from rafrx.json_stream import StreamingArgsParser, partial_json
from rafrx.messages import ToolCall
from rafrx.operators._flush_tool_calls import parse_arguments
from rafrx.recorder import decode_item, encode_item, load, record
from rafrx.sources import AnthropicDialect, OpenAIChatDialect
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient
from rafrx.sse import ServerSentEvent
from rafrx.testing import Reply, ToolCallSpec, render
from rafrx.tools import format_result, tool
from tests.sources._raw_server import raw_server
from tests.sources.test_dialect_fast_paths import general_path_only, replay

HYP = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ----------------------------------------------------------------- helpers


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def strict_loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses NaN, Infinity and -Infinity (strict RFC 8259 JSON)."""
    return json.loads(text, parse_constant=_reject_constant)


def is_strict_json(text: str | bytes) -> bool:
    try:
        strict_loads(text)
    except ValueError:
        return False
    return True


class Bodies:
    """A raw server's handler: answers each request with the next queued SSE body and
    keeps each request's raw bytes."""

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)
        self.raw: list[bytes] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.raw.append(await request.read())
        body = self.bodies.pop(0) if self.bodies else b""
        return web.Response(body=body, content_type="text/event-stream")


CLIENTS: dict[str, tuple[type[Any], str]] = {
    "openai-chat": (OpenAIChatClient, "openai-chat"),
    "anthropic": (AnthropicClient, "anthropic"),
    "openai-responses": (OpenAIResponsesClient, "openai-responses"),
}


async def run_agent(
    fmt: str,
    bodies: Sequence[bytes],
    tools: Sequence[Any],
    prompt: str = "go",
) -> tuple[Any, list[bytes]]:
    """One agent turn against a raw server answering ``bodies``; the response and the raw
    request bodies."""
    client_class, _ = CLIENTS[fmt]
    handler = Bodies(*bodies)
    async with raw_server(handler) as (url, _seen), client_class(url, "sk-test") as client:
        agent = Agent(client, tools=list(tools))
        async with asyncio.timeout(20):
            response = await agent.send(prompt)
    return response, handler.raw


def call_reply(arguments: str, name: str = "probe", call_id: str = "call_1") -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, arguments, id=call_id)])


def flushed(arguments: Sequence[str], finish: FinishReason = FinishReason.TOOL_CALLS) -> list[Any]:
    """The contents ``convert()`` makes of one call streamed as ``arguments`` fragments."""
    steps: list[u.AgentResponseUpdate] = [u.ToolCallDelta(0, "c1", "f", "")]
    steps += [u.ToolCallDelta(0, None, None, piece) for piece in arguments]
    steps.append(u.Finish(finish))
    results = reactivex.from_iterable(steps).pipe(ops.convert(), rx.to_list())
    return [c for r in results.run() for c in r.contents]


def the_call(contents: list[Any]) -> ToolCallingContent | ToolCallIncompleteContent:
    calls = [c for c in contents if isinstance(c, ToolCallingContent | ToolCallIncompleteContent)]
    assert len(calls) == 1, calls
    return calls[0]


# ------------------------------------------- arguments: parse and flush


@pytest.mark.parametrize(
    ("raw", "check"),
    [
        ('{"x": NaN}', lambda v: math.isnan(v["x"])),
        ('{"x": Infinity}', lambda v: v["x"] == math.inf),
        ('{"x": -Infinity}', lambda v: v["x"] == -math.inf),
        ('{"x": -0.0}', lambda v: math.copysign(1, v["x"]) == -1),
        ('{"x": 1e400}', lambda v: v["x"] == math.inf),
        ('{"x": -1e400}', lambda v: v["x"] == -math.inf),
        ('{"x": 1e-400}', lambda v: v["x"] == 0.0),
        ('{"x": 0.1000000000000000055511151231257827}', lambda v: v["x"] == 0.1),
        ('{"x": 1, "x": 2}', lambda v: v == {"x": 2}),
        ('{"x": -0}', lambda v: v["x"] == 0 and type(v["x"]) is int),
        ("[1, 2]", lambda v: v == [1, 2]),
        ('"text"', lambda v: v == "text"),
        ("42", lambda v: v == 42),
        ("null", lambda v: v is None),
        ("", lambda v: v == {}),
        ("   \n\t", lambda v: v == {}),
    ],
)
def test_flush_gives_what_json_loads_gives(raw: str, check: Callable[[Any], bool]) -> None:
    call = the_call(flushed([raw[: len(raw) // 2], raw[len(raw) // 2 :]]))
    assert isinstance(call, ToolCallingContent)
    assert call.error is None
    assert call.raw_arguments == raw
    assert check(call.arguments)


def test_flush_refuses_an_integer_longer_than_pythons_limit_as_an_error_not_a_crash() -> None:
    limit = sys.get_int_max_str_digits()
    raw = '{"n": ' + "7" * (limit + 1) + "}"
    call = the_call(flushed([raw[:100], raw[100:]]))
    assert isinstance(call, ToolCallingContent)
    assert call.arguments is None
    assert call.error is not None
    assert call.raw_arguments == raw


def test_a_cut_call_holding_a_huge_integer_has_no_preview_rather_than_a_crash() -> None:
    limit = sys.get_int_max_str_digits()
    raw = '{"a": 1, "n": ' + "7" * (limit + 1) + ', "s": "x'
    call = the_call(flushed([raw], FinishReason.LENGTH))
    assert isinstance(call, ToolCallIncompleteContent)
    assert call.raw_arguments == raw


def test_deep_nesting_is_an_error_not_a_recursion_crash() -> None:
    raw = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    call = the_call(flushed([raw]))
    assert isinstance(call, ToolCallingContent)
    assert call.arguments is None
    assert call.error is not None


_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN and -0.0 differs from 0.0 (bit-exact JSON values)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@HYP
@given(value=st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=5), data=st.data())
def test_streaming_parser_members_and_close_match_json_loads(value: Any, data: Any) -> None:
    text = json.dumps(value)  # NaN / Infinity spelled as Python's json does
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    parser = StreamingArgsParser()
    members: dict[str, Any] = {}
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        for event in parser.feed(text[a:b]):
            if type(event).__name__ == "ArgMember":
                members[event.name] = event.value
    closed = parser.close()
    expected = json.loads(text)
    assert _same(closed, expected)
    assert _same(members, expected)
    assert _same(partial_json(text), expected)
    assert _same(parse_arguments(text)[0], expected)


# ------------------------------------- arguments: back to the provider


@tool
def probe(x: float = 0.0) -> str:
    """Probe.

    Args:
        x: A number.
    """
    return f"got {x!r}"


def _sent_arguments(fmt: str, body: Any) -> list[Any]:
    """The arguments of the assistant's tool calls in a request body, as sent."""
    if fmt == "openai-chat":
        return [
            call["function"]["arguments"]
            for message in body["messages"]
            for call in message.get("tool_calls") or ()
        ]
    if fmt == "openai-responses":
        return [item["arguments"] for item in body["input"] if item.get("type") == "function_call"]
    return [
        block["input"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    ]


@pytest.mark.parametrize("fmt", list(CLIENTS))
@pytest.mark.parametrize("raw", ['{"x": 1e400}', '{"x": -1e400}', '{"x": -0.0}', '{"x": 1e-400}'])
@pytest.mark.asyncio
async def test_overflowing_numbers_go_back_as_strict_json(fmt: str, raw: str) -> None:
    bodies = [render(call_reply(raw), fmt), render(Reply(text="done"), fmt)]  # type: ignore[arg-type]
    response, sent = await run_agent(fmt, bodies, [probe])
    assert response.text == "done"
    assert len(sent) == 2
    body = strict_loads(sent[1])  # the whole body: strict JSON
    (arguments,) = _sent_arguments(fmt, body)
    if isinstance(arguments, str):
        assert is_strict_json(arguments), arguments
    else:
        assert is_strict_json(json.dumps(arguments))


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
@pytest.mark.parametrize("raw", ['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}'])
@pytest.mark.asyncio
async def test_non_finite_literals_never_go_back_as_arguments_text(fmt: str, raw: str) -> None:
    bodies = [render(call_reply(raw), fmt), render(Reply(text="done"), fmt)]  # type: ignore[arg-type]
    response, sent = await run_agent(fmt, bodies, [probe])
    assert response.text == "done"
    body = strict_loads(sent[1])
    (arguments,) = _sent_arguments(fmt, body)
    assert is_strict_json(arguments), arguments


@pytest.mark.parametrize("raw", ['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}'])
@pytest.mark.asyncio
async def test_anthropic_tool_use_input_with_non_finite_literals_goes_back_as_null(
    raw: str,
) -> None:
    fmt = "anthropic"
    bodies = [render(call_reply(raw), fmt), render(Reply(text="done"), fmt)]
    response, sent = await run_agent(fmt, bodies, [probe])
    assert response.text == "done"
    body = strict_loads(sent[1])
    assert _sent_arguments(fmt, body) == [{"x": None}]


def test_arguments_json_is_strict_json_for_any_parsed_value() -> None:
    for raw in ('{"x": NaN}', '{"x": [Infinity, 1]}', '{"x": {"y": -Infinity}}', "NaN", "[NaN]"):
        arguments, error = parse_arguments(raw)
        assert error is None
        call = ToolCall("c1", "f", arguments, raw_arguments=raw)
        assert is_strict_json(call.arguments_json()), (raw, call.arguments_json())


def sse_events(*events: tuple[str | None, str]) -> bytes:
    out = []
    for name, data in events:
        out.append((f"event: {name}\n" if name else "") + f"data: {data}\n\n")
    return "".join(out).encode()


def _anthropic_turn(*blocks: tuple[dict[str, Any], list[str]], stop: str = "tool_use") -> bytes:
    events: list[tuple[str | None, str]] = [
        (
            "message_start",
            json.dumps(
                {
                    "type": "message_start",
                    "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 1}},
                }
            ),
        )
    ]
    for index, (start, deltas) in enumerate(blocks):
        events.append(
            (
                "content_block_start",
                f'{{"type": "content_block_start", "index": {index}, "content_block": '
                f"{json.dumps(start) if isinstance(start, dict) else start}}}",
            )
        )
        for piece in deltas:
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(
                (
                    "content_block_delta",
                    json.dumps({"type": "content_block_delta", "index": index, "delta": delta}),
                )
            )
        events.append(
            ("content_block_stop", json.dumps({"type": "content_block_stop", "index": index}))
        )
    events.append(
        (
            "message_delta",
            json.dumps(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop},
                    "usage": {"output_tokens": 3},
                }
            ),
        )
    )
    events.append(("message_stop", '{"type": "message_stop"}'))
    return sse_events(*events)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.asyncio
async def test_anthropic_server_tool_input_with_non_finite_numbers_is_sent_as_strict_json(
    literal: str,
) -> None:
    server_use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    local = {"type": "tool_use", "id": "toolu_1", "name": "probe", "input": {}}
    first = _anthropic_turn(
        (server_use, ['{"query": "x", "weight": ', literal + "}"]),
        (result, []),
        (local, ['{"x": 1}']),
    )
    second = render(Reply(text="done"), "anthropic")
    response, sent = await run_agent("anthropic", [first, second], [probe])
    assert response.text == "done"
    assert len(sent) == 2
    assert b"srvtoolu_1" in sent[1]  # the server block went back
    assert is_strict_json(sent[1]), sent[1][:400]


@pytest.mark.asyncio
async def test_anthropic_tool_use_started_with_a_non_finite_input_runs_and_goes_back_strict() -> (
    None
):
    # A gateway that sends the whole input in content_block_start (rafrx serialises it).
    local = '{"type": "tool_use", "id": "toolu_1", "name": "probe", "input": {"x": -Infinity}}'
    first = _anthropic_turn((local, []))  # type: ignore[arg-type]
    second = render(Reply(text="done"), "anthropic")
    response, sent = await run_agent("anthropic", [first, second], [probe])
    assert response.tool_messages[0].content == "got -inf"
    assert is_strict_json(sent[1])
    assert _sent_arguments("anthropic", strict_loads(sent[1])) == [{"x": None}]


# A chat call whose arguments come as an object (some OpenAI-compatible servers) holding NaN.
@pytest.mark.asyncio
async def test_chat_arguments_sent_as_an_object_with_nan_go_back_as_strict_json() -> None:
    chunk = (
        '{"id": "c", "model": "m", "object": "chat.completion.chunk", "choices": [{"index": 0, '
        '"delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", '
        '"function": {"name": "probe", "arguments": {"x": NaN}}}]}, '
        '"finish_reason": "tool_calls"}]}'
    )
    first = sse_events((None, chunk), (None, "[DONE]"))
    second = render(Reply(text="done"), "openai-chat")
    response, sent = await run_agent("openai-chat", [first, second], [probe])
    assert response.tool_messages[0].content == "got nan"
    body = strict_loads(sent[1])
    (arguments,) = _sent_arguments("openai-chat", body)
    assert is_strict_json(arguments), arguments


@pytest.mark.asyncio
async def test_chat_extra_content_with_nan_goes_back_as_strict_json() -> None:
    chunk = (
        '{"id": "c", "model": "m", "object": "chat.completion.chunk", "choices": [{"index": 0, '
        '"delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", '
        '"function": {"name": "probe", "arguments": "{}"}, '
        '"extra_content": {"google": {"thought_signature": "sig", "score": NaN}}}]}, '
        '"finish_reason": "tool_calls"}]}'
    )
    first = sse_events((None, chunk), (None, "[DONE]"))
    second = render(Reply(text="done"), "openai-chat")
    response, sent = await run_agent("openai-chat", [first, second], [probe])
    assert response.text == "done"
    assert b"thought_signature" in sent[1]
    assert is_strict_json(sent[1]), sent[1][:400]


# ------------------------------------------------------------ tool results


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Reading:
    value: float
    tags: dict[Any, Any]


@attrs.define
class Point:
    x: float
    y: float


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (float("nan"), None),
        (float("inf"), None),
        (-0.0, -0.0),
        ({"a": float("-inf")}, {"a": None}),
        ((1, float("nan")), [1, None]),
        ({3, 1, 2}, [1, 2, 3]),
        (frozenset({"b"}), ["b"]),
        (datetime.date(2024, 5, 1), "2024-05-01"),
        (datetime.datetime(2024, 5, 1, 12, 30), "2024-05-01T12:30:00"),
        (decimal.Decimal("1.10"), "1.10"),
        (decimal.Decimal("NaN"), "NaN"),
        (Colour.RED, "red"),
        (Level.HIGH, 3),
        ({Colour.RED: 1, Level.HIGH: 2}, {"red": 1, "3": 2}),
        (
            {1: "a", None: "b", 2.5: "c", False: "d"},
            {"1": "a", "null": "b", "2.5": "c", "false": "d"},
        ),
        (
            Reading(float("nan"), {datetime.date(2024, 1, 1): {1}}),
            {"value": None, "tags": {"2024-01-01": [1]}},
        ),
        (Point(1.0, float("inf")), {"x": 1.0, "y": None}),
        ([[[[{"deep": float("nan")}]]]], [[[[{"deep": None}]]]]),
        (None, None),
        (True, True),
    ],
)
def test_format_result_sends_strict_json(value: Any, expected: Any) -> None:
    text = format_result(value)
    assert _same(strict_loads(text), expected), text


@pytest.mark.parametrize("value", [b"\xff", {(1, 2): "pair"}, [1, 2j]])
def test_format_result_refuses_values_with_no_json_form_with_a_type_error(value: Any) -> None:
    with pytest.raises(TypeError):
        format_result(value)


def test_format_result_of_a_cycle_is_a_value_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match=r"[Cc]ircular"):
        format_result({"loop": loop})


@pytest.mark.parametrize("key", [float("nan"), float("inf"), float("-inf")])
def test_format_result_gives_a_non_finite_float_key_a_json_form(key: float) -> None:
    text = format_result({key: 3, 1.0: 2})
    loaded = strict_loads(text)
    assert len(loaded) == 2
    assert loaded["1.0"] == 2


def test_format_result_writes_an_integer_longer_than_the_str_digit_limit() -> None:
    """Python refuses to write it as a number: it goes as a string of all its digits."""
    big = math.factorial(2000)  # 5736 digits
    text = format_result({"n": big, "k": {-(10**5000): 1}})
    loaded = json.loads(text)
    assert loaded["n"] == str(decimal.Decimal(big))
    assert list(loaded["k"]) == ["-1" + "0" * 5000]
    assert format_result(10**4000) == "1" + "0" * 4000  # within the limit: a number


@pytest.mark.parametrize("fmt", list(CLIENTS))
@pytest.mark.asyncio
async def test_tool_results_with_odd_values_reach_the_model_as_strict_json(fmt: str) -> None:
    @tool
    def stats() -> Any:
        """Stats."""
        return {
            "mean": float("nan"),
            "max": float("inf"),
            "when": datetime.date(2024, 1, 2),
            "where": Point(0.0, -0.0),
            "ids": {2, 1},
            3: Colour.RED,
        }

    bodies = [render(call_reply("{}", "stats"), fmt), render(Reply(text="done"), fmt)]  # type: ignore[arg-type]
    response, sent = await run_agent(fmt, bodies, [stats])
    (message,) = response.tool_messages
    assert not message.is_error, message.content
    assert strict_loads(message.content) == {
        "mean": None,
        "max": None,
        "when": "2024-01-02",
        "where": {"x": 0.0, "y": -0.0},
        "ids": [1, 2],
        "3": "red",
    }
    assert is_strict_json(sent[1])
    assert (
        message.content in sent[1].decode() or json.dumps(message.content)[1:-1] in sent[1].decode()
    )


@pytest.mark.parametrize(
    "value",
    [b"bytes", {(1, 2): 1}, object()],
)
@pytest.mark.asyncio
async def test_a_result_with_no_json_form_is_an_error_result_not_the_end_of_the_loop(
    value: Any,
) -> None:
    @tool
    def odd() -> Any:
        """Odd."""
        return value

    fmt = "openai-chat"
    bodies = [render(call_reply("{}", "odd"), fmt), render(Reply(text="done"), fmt)]
    response, sent = await run_agent(fmt, bodies, [odd])
    assert response.text == "done"
    (message,) = response.tool_messages
    assert message.is_error
    assert message.content.startswith("Error: ")
    assert is_strict_json(sent[1])


@pytest.mark.asyncio
async def test_a_tool_returning_counts_keyed_by_nan_is_not_reported_as_failed() -> None:
    @tool
    def counts() -> dict[float, int]:
        """Value counts, NaN included."""
        return {1.5: 2, float("nan"): 3}

    fmt = "openai-chat"
    bodies = [render(call_reply("{}", "counts"), fmt), render(Reply(text="done"), fmt)]
    response, _ = await run_agent(fmt, bodies, [counts])
    (message,) = response.tool_messages
    assert not message.is_error, message.content
    assert strict_loads(message.content)["1.5"] == 2


# ------------------------------------------------ serialisations


def _converted(steps: Sequence[u.AgentResponseUpdate]) -> Any:
    return reactivex.from_iterable(steps).pipe(ops.convert(), ops.aggregate()).run()


@pytest.mark.parametrize("raw", ['{"x": 1e400}', '{"x": NaN}', '{"x": [-Infinity]}'])
def test_response_to_dict_is_json_ready_for_overflowing_arguments(raw: str) -> None:
    response = _converted(
        [
            u.ToolCallDelta(0, "c1", "probe", raw),
            u.Finish(FinishReason.TOOL_CALLS, Usage(1, 2, 3)),
        ]
    )
    assert response.tool_calls[0].error is None
    data = response.to_dict()
    text = json.dumps(data, allow_nan=False)  # JSON-ready: no NaN / Infinity to write
    assert strict_loads(text)["tool_calls"][0]["name"] == "probe"


@pytest.mark.parametrize(
    "raw", ['{"x": -0.0, "y": 1e-400, "z": 12345678901234567890}', '{"a": [1, 2]}']
)
def test_response_to_dict_round_trips_finite_arguments(raw: str) -> None:
    response = _converted(
        [u.ToolCallDelta(0, "c1", "probe", raw), u.Finish(FinishReason.TOOL_CALLS)]
    )
    data = strict_loads(json.dumps(response.to_dict(), allow_nan=False))
    assert _same(data["tool_calls"][0]["arguments"], json.loads(raw))
    transcript_args = data["turn_transcript"][0]["tool_calls"][0]["arguments"]
    assert _same(transcript_args, json.loads(raw))


@pytest.mark.parametrize(
    "raw",
    [
        '{"x": NaN, "y": Infinity, "z": -Infinity, "w": -0.0, "v": 1e400}',
        '{"$float": "nan", "$type": "TextContent", "$dict": {}, "$repr": 1}',
        '{"x": 1, "x": 2, "n": 123456789012345678901234567890}',
    ],
)
def test_recorder_round_trips_odd_argument_values_in_strict_json_lines(
    tmp_path: Path, raw: str
) -> None:
    steps = [
        u.ToolCallDelta(0, "c1", "probe", raw[:7]),
        u.ToolCallDelta(0, None, None, raw[7:]),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    path = tmp_path / "turn.jsonl"
    results = (
        record(reactivex.from_iterable(steps).pipe(ops.convert()), path).pipe(rx.to_list()).run()
    )
    for line in path.read_text(encoding="utf-8").splitlines():
        assert is_strict_json(line), line
    replayed = load(path).items
    live = [c for r in results for c in r.contents if isinstance(c, ToolCallingContent)]
    again = [c for r in replayed for c in r.contents if isinstance(c, ToolCallingContent)]
    assert len(live) == len(again) == 1
    assert _same(again[0].arguments, live[0].arguments)
    assert again[0].raw_arguments == raw


@HYP
@given(value=_JSON_VALUES)
def test_recorder_item_codec_round_trips_any_json_value(value: Any) -> None:
    item = ToolCallingContent("c1", "f", value, json.dumps(value), None)
    kind, fields = encode_item(AgentResponseResult(contents=[item]))
    text = json.dumps(fields, allow_nan=False)
    back = decode_item(kind, json.loads(text))
    assert _same(back.contents[0].arguments, value)


@pytest.mark.asyncio
async def test_responses_reasoning_item_with_nan_goes_back_as_strict_json() -> None:
    reasoning = (
        '{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc", '
        '"score": NaN}'
    )
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "probe",
        "arguments": "{}",
        "status": "completed",
    }
    first = sse_events(
        (None, '{"type": "response.created", "response": {"id": "resp_1", "model": "m"}}'),
        (None, f'{{"type": "response.output_item.added", "output_index": 0, "item": {reasoning}}}'),
        (None, f'{{"type": "response.output_item.done", "output_index": 0, "item": {reasoning}}}'),
        (None, json.dumps({"type": "response.output_item.added", "output_index": 1, "item": call})),
        (None, json.dumps({"type": "response.output_item.done", "output_index": 1, "item": call})),
        (
            None,
            '{"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}',
        ),
    )
    second = render(Reply(text="done"), "openai-responses")
    response, sent = await run_agent("openai-responses", [first, second], [probe])
    assert response.text == "done"
    assert b"rs_1" in sent[1]  # the reasoning item went back
    assert is_strict_json(sent[1]), sent[1][:400]


# ---------------------------------------------- dialects: odd values


def _chat(*datas: str) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=d) for d in datas]


_TEXT = '{"id":"c","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]%s}'


@pytest.mark.parametrize(
    "data",
    [
        _TEXT % ',"created":1.5',
        _TEXT % ',"created":NaN,"system_fingerprint":Infinity',
        _TEXT % ',"usage":{"prompt_tokens":-5,"completion_tokens":2.5,"total_tokens":"7"}',
        _TEXT % ',"usage":{"prompt_tokens":1e400,"completion_tokens":NaN}',
        _TEXT % ',"usage":{"prompt_tokens":1e30,"completion_tokens":true}',
        _TEXT % ',"usage":{"prompt_tokens":1,"prompt_tokens":null}',
        _TEXT % ',"usage":{"prompt_tokens":' + "9" * 5000 + "}",
        _TEXT % ',"usage":5',
        _TEXT % ',"id":7',
        _TEXT % ',"model":null,"object":null',
        '{"choices":[{"finish_reason":"stop","delta":{"content":"b","content":"a"},"index":0}],"id":"c"}',
        '{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":1e20,"id":"x",'
        '"function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}',
        '{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":1e400,"id":"x",'
        '"function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}',
        '{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":-0.0,"id":"x",'
        '"function":{"name":"f","arguments":"{\\"a\\": NaN}"}}]},"finish_reason":"tool_calls"}]}',
        '{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x",'
        '"function":{"name":"f","arguments":{"a":NaN,"b":-0.0}}}]},"finish_reason":"tool_calls"}]}',
        '{"id":"c","choices":[{"index":0.0,"delta":{"content":"a"},"finish_reason":null}]}',
        '{"id":"c","choices":[{"index":1e-400,"delta":{"content":"a"},"finish_reason":7}]}',
        '{"id":"c","choices":[{"index":0,"delta":null,"finish_reason":"weird"}],"usage":null}',
    ],
)
def test_chat_fast_and_general_paths_agree_on_odd_values(data: str) -> None:
    events = _chat(data, "[DONE]")
    fast = replay(OpenAIChatDialect, events)
    with general_path_only():
        general = replay(OpenAIChatDialect, events)
    assert fast == general
    for step in fast:  # never a bare exception: updates, or a RafrxError's name and text
        if isinstance(step, tuple):
            assert step[0] in ("MalformedEvent", "ProviderError", "IncompleteStream"), step


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (',"usage":{"prompt_tokens":1e30,"completion_tokens":2}', (int(1e30), 2)),
        (',"usage":{"prompt_tokens":3.0,"completion_tokens":2,"total_tokens":null}', (3, 2)),
        (',"usage":{"prompt_tokens":"3","completion_tokens":2}', (0, 2)),
    ],
)
def test_chat_usage_numbers_are_read_as_json_integers(
    extra: str, expected: tuple[int, int]
) -> None:
    (_, (finish,), _) = replay(OpenAIChatDialect, _chat(_TEXT % extra, "[DONE]"))
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens) == expected
    assert finish.usage.total_tokens == finish.usage.prompt_tokens + finish.usage.completion_tokens


@pytest.mark.parametrize("index", ['"0"', "true", "false", '"a"'])
def test_chat_choice_with_a_non_integer_index_is_malformed_not_silently_dropped(index: str) -> None:
    data = '{"id":"c","choices":[{"index":%s,"delta":{"content":"Hello"},"finish_reason":"stop"}]}'
    seen = replay(OpenAIChatDialect, _chat(data % index, "[DONE]"))
    texts = [
        x for step in seen if isinstance(step, list) for x in step if isinstance(x, u.TextDelta)
    ]
    malformed = [step for step in seen if isinstance(step, tuple) and step[0] == "MalformedEvent"]
    assert texts or malformed, seen


def test_chat_tool_call_with_a_string_index_is_malformed() -> None:  # (the rule the above breaks)
    data = (
        '{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":"0","id":"x",'
        '"function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}'
    )
    seen = replay(OpenAIChatDialect, _chat(data, "[DONE]"))
    assert seen[0][0] == "MalformedEvent"


def _anthropic_events(*datas: tuple[str, str]) -> list[ServerSentEvent]:
    return [ServerSentEvent(name, data) for name, data in datas]


_A_START = (
    "message_start",
    '{"type":"message_start","message":{"id":"m","model":"x","usage":'
    '{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":null}}}',
)
_A_TEXT = (
    "content_block_start",
    '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
)
_A_STOP = ("message_stop", '{"type":"message_stop"}')


def _a_delta(body: str) -> tuple[str, str]:
    return ("content_block_delta", body)


def _a_message_delta(usage: str, reason: str = '"end_turn"') -> tuple[str, str]:
    return (
        "message_delta",
        f'{{"type":"message_delta","delta":{{"stop_reason":{reason}}},"usage":{usage}}}',
    )


@pytest.mark.parametrize(
    "delta",
    [
        '{"type":"content_block_delta","index":0.0,"delta":{"type":"text_delta","text":"a"}}',
        '{"type":"content_block_delta","index":"0","delta":{"type":"text_delta","text":"a"}}',
        '{"type":"content_block_delta","index":true,"delta":{"type":"text_delta","text":"a"}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b","text":"a"}}',
        '{"index":0,"delta":{"text":"a","type":"text_delta"},"type":"content_block_delta"}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":null}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"},"x":NaN}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":7}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\\ud800"}}',
        '{"type":"content_block_delta","index":1e400,"delta":{"type":"text_delta","text":"a"}}',
    ],
)
def test_anthropic_fast_and_general_paths_agree_on_odd_values(delta: str) -> None:
    events = _anthropic_events(
        _A_START, _A_TEXT, _a_delta(delta), _a_message_delta('{"output_tokens":5}'), _A_STOP
    )
    fast = replay(AnthropicDialect, events)
    with general_path_only():
        general = replay(AnthropicDialect, events)
    assert fast == general
    for step in fast:
        if isinstance(step, tuple):
            assert step[0] == "MalformedEvent", step


def test_anthropic_usage_is_cumulative_and_ignores_nulls_and_non_integers() -> None:
    events = _anthropic_events(
        _A_START,
        _A_TEXT,
        _a_message_delta('{"output_tokens":5,"input_tokens":null}', "null"),
        _a_message_delta('{"output_tokens":7.0,"input_tokens":12,"cache_read_input_tokens":"3"}'),
        _a_message_delta('{"output_tokens":NaN,"cache_creation_input_tokens":1e400}', "null"),
        _A_STOP,
    )
    (finish,) = replay(AnthropicDialect, events)[-2]
    assert finish.finish_reason is FinishReason.STOP
    assert finish.usage == Usage(12, 7, 19, None, None)


# ----------------------------------------------------------------- usage


_COUNTS = st.integers(0, 10**12)
_OPTIONAL = st.none() | _COUNTS


@HYP
@given(
    st.lists(
        st.builds(Usage, _COUNTS, _COUNTS, _COUNTS, _OPTIONAL, _OPTIONAL), min_size=1, max_size=6
    )
)
def test_usage_sum_is_associative_and_keeps_none_only_when_all_are_none(
    usages: list[Usage],
) -> None:
    total = usages[0]
    for usage in usages[1:]:
        total = total + usage
    assert total.prompt_tokens == sum(x.prompt_tokens for x in usages)
    assert total.total_tokens == sum(x.total_tokens for x in usages)
    for field in ("reasoning_tokens", "cached_tokens"):
        values = [getattr(x, field) for x in usages if getattr(x, field) is not None]
        assert getattr(total, field) == (sum(values) if values else None)
    right = usages[-1]
    for usage in reversed(usages[:-1]):
        right = usage + right
    assert right == total


def test_usage_plus_something_else_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        Usage(1, 1, 2) + 3  # type: ignore[operator]
    with pytest.raises(TypeError):
        Usage(1, 1, 2) + None  # type: ignore[operator]


def test_a_turn_sums_the_usage_of_its_llm_calls_and_skips_calls_without_usage() -> None:
    steps = [
        u.ToolCallDelta(0, "c1", "probe", "{}"),
        u.Finish(FinishReason.TOOL_CALLS, None),
    ]
    results = reactivex.from_iterable(steps).pipe(ops.convert(), rx.to_list()).run()
    second = (
        reactivex.from_iterable(
            [u.TextDelta("ok"), u.Finish(FinishReason.STOP, Usage(3, 4, 7, reasoning_tokens=1))]
        )
        .pipe(ops.convert(), rx.to_list())
        .run()
    )
    response = reactivex.from_iterable([*results, *second]).pipe(ops.aggregate()).run()
    assert response.usage == Usage(3, 4, 7, reasoning_tokens=1)


# ------------------------------------ arguments: validation over HTTP


@tool
def typed(
    n: int,
    ratio: float = 1.0,
    flag: bool = False,
    mode: Literal["a", "b"] = "a",
    colour: Colour = Colour.RED,
    limit: int | None = None,
    point: Point | None = None,
) -> str:
    """Typed.

    Args:
        n: A count.
        ratio: A ratio.
        flag: A flag.
        mode: A mode.
        colour: A colour.
        limit: A limit.
        point: A point.
    """
    return json.dumps(
        [n, ratio, flag, mode, colour.value, limit, None if point is None else [point.x, point.y]]
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"n": 2.0}', [2, 1.0, False, "a", "red", None, None]),
        ('{"n": -0.0, "ratio": -0.0}', [0, -0.0, False, "a", "red", None, None]),
        ('{"n": 1, "n": 3}', [3, 1.0, False, "a", "red", None, None]),
        ('{"n": 1e2, "ratio": 1e-400, "limit": null}', [100, 0.0, False, "a", "red", None, None]),
        (
            '{"n": 1, "colour": "red", "mode": "b", "point": {"x": 1, "y": 2.5}}',
            [1, 1.0, False, "b", "red", None, [1.0, 2.5]],
        ),
    ],
)
@pytest.mark.asyncio
async def test_typed_tool_arguments_convert_as_json_numbers(raw: str, expected: list[Any]) -> None:
    fmt = "openai-chat"
    bodies = [render(call_reply(raw, "typed"), fmt), render(Reply(text="done"), fmt)]
    response, sent = await run_agent(fmt, bodies, [typed])
    (message,) = response.tool_messages
    assert not message.is_error, message.content
    assert _same(json.loads(message.content), expected)
    assert is_strict_json(sent[1])


@pytest.mark.parametrize(
    "raw",
    [
        '{"n": NaN}',
        '{"n": Infinity}',
        '{"n": 1e400}',
        '{"n": 1.5}',
        '{"n": true}',
        '{"n": "1"}',
        '{"n": 1, "ratio": NaN, "limit": NaN}',
        '{"n": 1, "flag": 1}',
        '{"n": 1, "mode": "c"}',
        '{"n": 1, "colour": "RED"}',
        '{"n": 1, "point": {"x": NaN}}',
        '{"n": 1, "ratio": ' + "1" * 400 + "}",
        "[1]",
        '"n"',
        "null",
        "42",
        "NaN",
        '{"n": 1',
        '{"n": ' + "7" * 5000 + "}",
    ],
)
@pytest.mark.parametrize("fmt", list(CLIENTS))
@pytest.mark.asyncio
async def test_bad_arguments_are_an_error_result_and_the_next_request_is_strict_json(
    fmt: str, raw: str
) -> None:
    ran: list[Any] = []

    @tool
    def strict_probe(
        n: int,
        ratio: float = 1.0,
        flag: bool = False,
        mode: Literal["a", "b"] = "a",
        colour: Colour = Colour.RED,
        limit: int | None = None,
        point: Point | None = None,
    ) -> str:
        """Probe."""
        ran.append(n)
        return "ran"

    bodies = [render(call_reply(raw, "strict_probe"), fmt), render(Reply(text="done"), fmt)]  # type: ignore[arg-type]
    response, sent = await run_agent(fmt, bodies, [strict_probe])
    assert response.text == "done"
    assert ran == []
    (message,) = response.tool_messages
    assert message.is_error, message.content
    assert message.content.startswith("Error: "), message.content
    assert is_strict_json(sent[1]), sent[1][:300]


@pytest.mark.parametrize("raw", ["", "   ", "\n\t", "{}"])
@pytest.mark.parametrize("fmt", list(CLIENTS))
@pytest.mark.asyncio
async def test_empty_or_blank_arguments_run_the_tool_with_its_defaults(fmt: str, raw: str) -> None:
    bodies = [render(call_reply(raw), fmt), render(Reply(text="done"), fmt)]  # type: ignore[arg-type]
    response, sent = await run_agent(fmt, bodies, [probe])
    assert [m.content for m in response.tool_messages] == ["got 0.0"]
    body = strict_loads(sent[1])
    (arguments,) = _sent_arguments(fmt, body)
    assert (strict_loads(arguments) if isinstance(arguments, str) else arguments) == {}
