"""Contract audit: "I believe exactly what the documents say".

Each test quotes a concrete claim of DESIGN.md, RELIABILITY.md, the seed
(message-model.zh.md), README.md or a public docstring, and checks it the way a
user who took the sentence literally would: the README's own code blocks run
offline against ``rafrx.testing.LLMServer``, every recorded provider stream is
held to the cross-cutting guarantees (usage once per LLM call, the order of
the five tool-call stages, lossless history round trips), and the "errors
lose nothing" promise is checked content by content.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex import operators as rx

import rafrx
from rafrx import content as c
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import HTTPStatusError, IncompleteStream, RafrxError, StreamInterrupted
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import ChatMessage, MessageRole, ToolCall
from rafrx.response import AgentResponseResult, FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIChatClient, RetryPolicy
from rafrx.testing import Fault, LLMServer, Replay, Reply, ToolCallSpec
from rafrx.tools import tool

FIXTURES = Path(__file__).parent / "data" / "fixtures"
MANIFEST = json.loads((FIXTURES / "MANIFEST.json").read_text())
PROVIDER_FIXTURES = [
    e for e in MANIFEST if e["format"] in ("openai-chat", "anthropic", "openai-responses")
]


def _fixture_id(entry: dict[str, Any]) -> str:
    return str(entry["path"])


def _body(entry: dict[str, Any]) -> bytes:
    return (FIXTURES / entry["path"]).read_bytes()


def _updates(body: bytes, dialect: str = "openai-chat") -> tuple[list[Any], list[Exception]]:
    out: list[Any] = []
    errors: list[Exception] = []
    from_sse([body], dialect=dialect).subscribe(out.append, errors.append)
    return out, errors


def _chat(choices: list[dict[str, Any]], **extra: Any) -> bytes:
    data = {"id": "c1", "model": "m", "object": "chat.completion.chunk", "choices": choices}
    return b"data: " + json.dumps({**data, **extra}).encode() + b"\n\n"


def _anthropic(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _contents(results: list[AgentResponseResult]) -> list[Any]:
    return [item for r in results for item in r.contents]


TEXT_THEN_STOP = _chat([{"index": 0, "delta": {"content": "hi"}}]) + _chat(
    [{"index": 0, "delta": {}, "finish_reason": "stop"}]
)


# ---------------------------------------------------------------- types, seed and README


CONTENT_SAMPLES = [
    (c.TextContent("t"), ("t",)),
    (c.ReasoningContent("r"), ("r",)),
    (c.UriContent("https://x", "text/html"), ("https://x", "text/html")),
    (c.ToolCallStartContent("id", "f"), ("id", "f")),
    (c.ToolCallArgsContent("id", "{"), ("id", "{")),
    (c.ToolCallArgsParsedContent("id", "k", 1), ("id", "k", 1)),
    (c.ToolCallArgsProgressContent("id", "k", 3, "abc"), ("id", "k", 3, "abc")),
    (c.ToolCallEndContent("id"), ("id",)),
    (c.ToolCallingContent("id", "f", {"a": 1}), ("id", "f", {"a": 1})),
    (c.ToolCalledContent("id", "ok"), ("id", "ok", None)),
    (c.UsageContent(Usage(1, 2, 3)), (Usage(1, 2, 3),)),
    (c.ErrorContent("boom"), ("boom",)),
]


def _bind(item: Any) -> tuple[Any, ...]:
    """One ``case`` per Content variant, positional names as DESIGN.md lists them."""
    match item:
        case c.TextContent(text) | c.ReasoningContent(text):
            return (text,)
        case c.UriContent(uri, media_type):
            return (uri, media_type)
        case c.ToolCallStartContent(call_id, name):
            return (call_id, name)
        case c.ToolCallArgsContent(call_id, args_delta):
            return (call_id, args_delta)
        case c.ToolCallArgsParsedContent(call_id, name, value):
            return (call_id, name, value)
        case c.ToolCallArgsProgressContent(call_id, name, received, value):
            return (call_id, name, received, value)
        case c.ToolCallEndContent(call_id):
            return (call_id,)
        case c.ToolCallingContent(call_id, name, arguments):
            return (call_id, name, arguments)
        case c.ToolCalledContent(call_id, result, error):
            return (call_id, result, error)
        case c.UsageContent(usage):
            return (usage,)
        case c.ErrorContent(message):
            return (message,)
    raise AssertionError(f"no case matched {item!r}")


@pytest.mark.parametrize(("item", "expected"), CONTENT_SAMPLES, ids=lambda v: type(v).__name__)
def test_every_content_variant_matches_positionally_and_meta_stays_out(
    item: Any, expected: tuple[Any, ...]
) -> None:
    """DESIGN: every variant has keyword-only ``meta`` (default empty) outside
    ``__match_args__``, so ``case TextContent(text):`` works: a real ``match`` with
    DESIGN's positional names binds the fields, whatever the meta."""
    meta = rafrx.ResponseMetadata("resp", "model")
    with_meta = type(item)(*expected, meta=meta)
    assert item.meta == rafrx.ResponseMetadata()
    assert _bind(item) == _bind(with_meta) == expected
    assert "meta" not in type(item).__match_args__
    with pytest.raises(TypeError):  # meta is never positional
        type(item)(*expected, *([None] * (len(type(item).__match_args__) - len(expected))), meta)


def test_the_readme_match_block_runs_over_real_converted_contents() -> None:
    """README "Match on the typed contents": the three ``case`` lines, as written,
    catch the text, the argument progress and the ready call of a converted stream."""
    stream = reactivex.from_iterable(
        [
            u.TextDelta("Let me write it."),
            u.ToolCallDelta(0, id="c1", name="write", arguments_delta='{"body": "hel'),
            u.ToolCallDelta(0, arguments_delta='lo"}'),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    )
    calls: list[tuple[str, ...]] = []
    for content in _contents(stream.pipe(ops.convert(), rx.to_list()).run()):
        match content:
            case rafrx.TextContent(text):
                calls.append(("append", text))
            case rafrx.ToolCallArgsProgressContent(call_id, name, received, fragment):
                calls.append(("progress", call_id, name, received, fragment))
            case rafrx.ToolCallingContent(call_id, name, arguments):
                calls.append(("card", call_id, name, json.dumps(arguments)))
    assert calls == [
        ("append", "Let me write it."),
        ("progress", "c1", "body", 3, "hel"),
        ("progress", "c1", "body", 5, "lo"),
        ("card", "c1", "write", '{"body": "hello"}'),
    ]


def test_the_seed_constructors_build_the_seed_messages_and_go_to_the_wire() -> None:
    """Seed "便捷构造方法": ``system/user/assistant/assistant_with_tools/tool`` build the
    roles and fields of the Rust example; DESIGN: arguments are a JSON string on the
    wire and ``from_openai`` reads every message back equal."""
    call = ToolCall("call_001", "read_file", {"path": "src/main.rs"})
    msgs = [
        ChatMessage.system("你是一个代码助手，可以使用文件工具。"),  # noqa: RUF001
        ChatMessage.user("请读取 src/main.rs 的内容"),
        ChatMessage.assistant("好的，我来读取文件。"),  # noqa: RUF001
        ChatMessage.assistant_with_tools("正在读取文件...", [call]),
        ChatMessage.tool("文件内容: fn main() {} ...", "call_001"),
    ]
    roles = [m.role for m in msgs]
    assert roles == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
    ]
    assert msgs[3].tool_calls == (call,)
    assert msgs[4].tool_call_id == "call_001"
    assert msgs[4].tool_calls is None
    assert all(m.name is None for m in msgs)
    assert msgs[4].source is rafrx.MessageSource.TOOL_RESULT  # MessageSource: ToolResult
    wire = [m.to_openai() for m in msgs]
    arguments = wire[3]["tool_calls"][0]["function"]["arguments"]
    assert isinstance(arguments, str)
    assert json.loads(arguments) == {"path": "src/main.rs"}
    assert wire[4]["tool_call_id"] == wire[3]["tool_calls"][0]["id"]
    back = [ChatMessage.from_openai(json.loads(json.dumps(w))) for w in wire]
    assert back == [m.with_source(None) for m in msgs]  # the source never goes on the wire


usages = st.builds(
    Usage,
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
)


@settings(max_examples=60, deadline=None)
@given(usages, usages, usages)
def test_usage_plus_is_a_commutative_monoid_with_none_as_unknown(
    a: Usage, b: Usage, k: Usage
) -> None:
    """DESIGN ``Usage(...)`` "supports ``+``": order of LLM calls never changes the sum,
    ``Usage()`` is the zero, and an optional count is ``None`` only when unknown on
    both sides (else the known counts are summed)."""
    assert a + b == b + a
    assert (a + b) + k == a + (b + k)
    assert a + Usage() == a
    total = a + b
    assert total.prompt_tokens == a.prompt_tokens + b.prompt_tokens
    for field in ("reasoning_tokens", "cached_tokens"):
        x, y = getattr(a, field), getattr(b, field)
        expected = None if x is None and y is None else (x or 0) + (y or 0)
        assert getattr(total, field) == expected


# ---------------------------------------------------------------- every recorded stream


@pytest.mark.parametrize("entry", PROVIDER_FIXTURES, ids=_fixture_id)
def test_fixture_metadata_first_and_usage_once_per_llm_call(entry: dict[str, Any]) -> None:
    """DESIGN Sources: "``ResponseMetadata`` comes first when known; usage arrives once
    per LLM call (a ``Usage`` update or ``Finish.usage``, never both)"."""
    out, _ = _updates(_body(entry), entry["format"])
    metas = [i for i, x in enumerate(out) if isinstance(x, u.ResponseMetadata)]
    if metas:
        assert metas[0] == 0, f"{type(out[0]).__name__} came before the metadata"
    reports = 0
    for update in out:
        if isinstance(update, u.Usage):
            reports += 1
        if isinstance(update, u.Finish):
            reports += update.usage is not None
            assert reports <= 1, "usage reported twice in one LLM call"
            reports = 0
    assert reports <= 1


STAGE = {
    c.ToolCallStartContent: 0,
    c.ToolCallArgsContent: 1,
    c.ToolCallArgsProgressContent: 1,
    c.ToolCallArgsParsedContent: 1,
    c.ToolCallEndContent: 2,
    c.ToolCallingContent: 3,
    c.ToolCallIncompleteContent: 3,
}


@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize("entry", PROVIDER_FIXTURES, ids=_fixture_id)
def test_fixture_tool_call_stages_come_in_the_seed_order(
    entry: dict[str, Any], eager: bool
) -> None:
    """Seed "工具调用生命周期": Start → Args* (with Parsed/Progress) → End → Calling, once
    each, per call id; README: a call cut short ends as ``ToolCallIncompleteContent``,
    never vanishes. Checked on every recorded provider stream, eager or not."""
    results: list[AgentResponseResult] = []
    from_sse([_body(entry)], dialect=entry["format"]).pipe(ops.convert(eager=eager)).subscribe(
        results.append, lambda _e: None
    )
    last: dict[str, int] = {}
    for item in _contents(results):
        stage = STAGE.get(type(item))
        if stage is None:
            continue
        before = last.get(item.call_id, -1)
        if stage == 1:
            assert before in (0, 1), f"{type(item).__name__} outside Start..End"
        else:
            assert stage > before, f"{type(item).__name__} after stage {before}"
        last[item.call_id] = stage
    assert all(stage == 3 for stage in last.values()), last


@pytest.mark.parametrize("entry", PROVIDER_FIXTURES, ids=_fixture_id)
def test_fixture_transcript_survives_to_dict_json_and_the_openai_wire(
    entry: dict[str, Any],
) -> None:
    """README: a history stores ``message.to_dict()`` (JSON-ready, every field and block
    kept) and ``ChatMessage.from_dict(data)`` reads it back equal; DESIGN:
    ``to_openai``/``from_openai`` keep the content and the calls. Every message
    every recorded stream produces, through real JSON text."""
    outcome: list[Any] = []
    from_sse([_body(entry)], dialect=entry["format"]).pipe(
        ops.convert(), ops.aggregate()
    ).subscribe(outcome.append, outcome.append)
    (response,) = outcome
    if isinstance(response, RafrxError):
        response = response.partial
    assert isinstance(response, rafrx.AgentResponse)
    for msg in response.turn_transcript:
        text = json.dumps(msg.to_dict(), allow_nan=False)
        assert ChatMessage.from_dict(json.loads(text)) == msg
        wire = ChatMessage.from_openai(json.loads(json.dumps(msg.to_openai())))
        assert wire.content == msg.content
        assert (wire.tool_calls or ()) == (msg.tool_calls or ())


# ---------------------------------------------------------------- RELIABILITY: "also worth a test"


def test_n_greater_than_one_only_choice_zero_is_read_and_nothing_leaks() -> None:
    """RELIABILITY: ``n > 1`` choices interleaved, kept apart by choice index; the
    dialect's documented choice: only index 0 is read. Choice 1's text and its
    ``length`` finish never reach the response; the final usage chunk counts once."""
    body = b"".join(
        [
            _chat([{"index": 0, "delta": {"role": "assistant", "content": "A0"}}]),
            _chat([{"index": 1, "delta": {"role": "assistant", "content": "B0"}}]),
            _chat([{"index": 1, "delta": {"content": "B1"}}]),
            _chat([{"index": 0, "delta": {"content": "A1"}}]),
            _chat([{"index": 1, "delta": {}, "finish_reason": "length"}]),
            _chat([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            _chat([], usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}),
            b"data: [DONE]\n\n",
        ]
    )
    response = from_sse([body]).pipe(ops.convert(), ops.aggregate()).run()
    assert response.text == "A0A1"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == Usage(3, 4, 7)


@pytest.mark.parametrize(
    "after",
    [
        _chat([{"index": 0, "delta": {"content": "MORE"}}]),
        b"data: {unparsable\n\n",
        b"\xff\xfe not even text",
        _chat([{"index": 0, "delta": {}, "finish_reason": "length"}]),
    ],
    ids=["more-text", "malformed", "binary", "another-finish"],
)
def test_bytes_after_done_are_never_read(after: bytes) -> None:
    """RELIABILITY: "a ``data: [DONE]`` followed by more bytes (stop at ``[DONE]``)":
    neither more text, nor garbage, nor a second finish changes the outcome."""
    out, errors = _updates(TEXT_THEN_STOP + b"data: [DONE]\n\n" + after)
    assert errors == []
    assert [type(x).__name__ for x in out] == ["ResponseMetadata", "TextDelta", "Finish"]
    assert out[-1] == u.Finish(FinishReason.STOP)


def test_usage_in_a_final_chunk_with_empty_choices_lands_on_the_finish() -> None:
    """RELIABILITY: usage arriving in a final chunk with empty ``choices``; DESIGN: one
    report per call, on ``Finish.usage``; aggregate counts it once."""
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    body = TEXT_THEN_STOP + _chat([], usage=usage) + b"data: [DONE]\n\n"
    out, errors = _updates(body)
    assert errors == []
    assert out[-1] == u.Finish(FinishReason.STOP, Usage(1, 2, 3))
    assert not any(isinstance(x, u.Usage) for x in out)
    assert from_sse([body]).pipe(ops.convert(), ops.aggregate()).run().usage == Usage(1, 2, 3)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_invalid_utf8_becomes_replacement_and_the_stream_goes_on(chunk: int) -> None:
    """RELIABILITY: invalid UTF-8 in the body → U+FFFD, go on; row 8: split anywhere,
    the same events."""
    body = TEXT_THEN_STOP.replace(b'"hi"', b'"h\xffi\xe2\x82"') + b"data: [DONE]\n\n"
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]
    out: list[Any] = []
    errors: list[Exception] = []
    from_sse(pieces).subscribe(out.append, errors.append)
    assert errors == []
    assert u.TextDelta("h\ufffdi\ufffd") in out
    assert out[-1] == u.Finish(FinishReason.STOP)


# ---------------------------------------------------------------- errors lose nothing


ANTHROPIC_CUT = b"".join(
    [
        _anthropic(
            "message_start",
            {
                "type": "message_start",
                "message": {"id": "msg_1", "model": "claude-x", "content": [], "usage": {}},
            },
        ),
        _anthropic(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
        ),
        _anthropic(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"},
            },
        ),
        _anthropic(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "SIG"},
            },
        ),
        _anthropic("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _anthropic(
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text"}},
        ),
        _anthropic(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Hello"},
            },
        ),
        _anthropic(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
            },
        ),
        _anthropic(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"a": "x'},
            },
        ),
    ]
)


def test_a_truncated_anthropic_stream_keeps_everything_received_in_partial() -> None:
    """README "Errors lose nothing" and "A tool call cut short never runs and never
    vanishes": ErrorContent, then the same IncompleteStream; ``.partial`` keeps id,
    model, text, reasoning and the signed thinking block; the open call is a
    ``ToolCall(complete=False, raw_arguments, partial_value, error="arguments cut
    short: …")`` and stays out of the transcript sent back."""
    results: list[AgentResponseResult] = []
    errors: list[Exception] = []
    from_sse([ANTHROPIC_CUT], dialect="anthropic").pipe(ops.convert()).subscribe(
        results.append, errors.append
    )
    contents = _contents(results)
    assert isinstance(errors[0], IncompleteStream)
    assert isinstance(contents[-1], c.ErrorContent)
    assert isinstance(contents[-2], c.ToolCallIncompleteContent)
    assert not any(isinstance(x, c.ToolCallingContent) for x in contents)

    with pytest.raises(IncompleteStream) as caught:
        from_sse([ANTHROPIC_CUT], dialect="anthropic").pipe(ops.convert(), ops.aggregate()).run()
    partial = caught.value.partial
    assert partial is not None
    assert (partial.id, partial.model, partial.text) == ("msg_1", "claude-x", "Hello")
    assert partial.reasoning_text == "hmm"
    (call,) = partial.tool_calls
    assert (call.id, call.complete, call.raw_arguments) == ("toolu_1", False, '{"a": "x')
    assert call.partial_value == {"a": "x"}
    assert call.error is not None
    assert call.error.startswith("arguments cut short")
    (msg,) = partial.turn_transcript
    assert msg.tool_calls is None
    assert msg.content == "Hello"
    thinking = json.dumps(msg.to_dict())
    assert '"SIG"' in thinking, "the thinking signature must survive for the next request"


PIPELINES = {
    "convert": lambda: [ops.convert()],
    "four-ops": lambda: [
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        ops.parse_args_stream(),
        ops.flush_tool_calls(),
    ],
    "four-ops-eager": lambda: [
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        ops.parse_args_stream(),
        ops.flush_tool_calls(eager=True),
    ],
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_an_upstream_error_never_ends_an_open_call_into_an_executable_one(name: str) -> None:
    """DESIGN: ``ToolCallEnd`` "just before ``Finish`` (or at completion)" — not on an
    error; "a call whose arguments never ended is never flushed", even when its
    buffer parses (``{"x": 1}``: RELIABILITY row 12)."""
    error = StreamInterrupted("connection reset")
    source = reactivex.concat(
        reactivex.of(u.ToolCallDelta(0, id="a", name="rm", arguments_delta='{"x": 1}')),
        reactivex.throw(error),
    )
    results: list[AgentResponseResult] = []
    errors: list[Exception] = []
    source.pipe(*PIPELINES[name]()).subscribe(results.append, errors.append)
    kinds = [type(x).__name__ for x in _contents(results)]
    assert errors == [error]
    assert "ToolCallEndContent" not in kinds
    assert "ToolCallingContent" not in kinds
    assert kinds[-2:] == ["ToolCallIncompleteContent", "ErrorContent"]


@pytest.mark.parametrize("name", list(PIPELINES))
def test_flush_applied_again_hands_each_call_over_once(name: str) -> None:
    """``flush_tool_calls`` docstring: "A call flushed upstream already (as
    ``convert()`` does) is not flushed again: applied twice, it still hands each
    call to ``execute_tools`` once"."""
    source = reactivex.from_iterable(
        [
            u.ToolCallDelta(0, id="a", name="f", arguments_delta="{}"),
            u.ToolCallDelta(1, id="b", name="g", arguments_delta='{"x":'),
            u.ToolCallDelta(1, arguments_delta="1}"),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    )
    results: list[AgentResponseResult] = []
    source.pipe(*PIPELINES[name](), ops.flush_tool_calls()).subscribe(results.append)
    calls = [x for x in _contents(results) if isinstance(x, c.ToolCallingContent)]
    assert [(x.call_id, x.arguments) for x in calls] == [("a", {}), ("b", {"x": 1})]


def test_reasoning_text_is_none_when_only_opaque_thinking_came() -> None:
    """``aggregate`` docstring: "``reasoning_text`` is ``None`` when there was none" —
    a redacted thinking block (``ReasoningDelta("", provider_data=…)``) is no text."""
    stream = reactivex.from_iterable(
        [
            u.ReasoningDelta("", provider_data={"type": "redacted_thinking", "data": "x"}),
            u.TextDelta("hi"),
            u.Finish(FinishReason.STOP),
        ]
    )
    response = stream.pipe(ops.convert(), ops.aggregate()).run()
    assert response.reasoning_text is None
    assert response.text == "hi"


# ---------------------------------------------------------------- execute_tools claims


@pytest.mark.parametrize("answer", [1, "yes", None, False, object()])
@pytest.mark.asyncio
async def test_only_true_approves_and_the_event_holds_a_copy(answer: Any) -> None:
    """``execute_tools``: "Only ``True`` … approves: anything else (``"no"``, ``1`` …)
    denies it, saying why"; "The event holds a copy of the arguments"."""
    ran: list[str] = []

    @tool(requires_approval=True)
    def danger(path: str) -> str:
        ran.append(path)
        return "done"

    args = {"path": "/etc"}

    async def approver(event: ToolApprovalRequestEvent) -> Any:
        return answer

    calls = AgentResponseResult(contents=[c.ToolCallingContent("c1", "danger", args)])
    results = await reactivex.of(calls).pipe(ops.execute_tools([danger], approver), rx.to_list())
    (event,) = [e for r in results for e in r.events if isinstance(e, ToolApprovalRequestEvent)]
    assert event.arguments == args
    assert event.arguments is not args
    (called,) = [x for x in _contents(results) if isinstance(x, c.ToolCalledContent)]
    assert ran == []
    assert called.result is None
    assert called.error
    assert "denied" in called.error


@pytest.mark.asyncio
async def test_tool_messages_follow_call_start_order_not_finish_order() -> None:
    """DESIGN ``aggregate``: tool messages "in call start order, whatever order the
    tools finish in"; ``execute_tools``: each result comes as soon as it finishes."""
    first_may_finish = asyncio.Event()
    finished: list[str] = []

    @tool
    async def slow() -> str:
        await first_may_finish.wait()
        finished.append("slow")
        return "slow done"

    @tool
    async def fast() -> str:
        finished.append("fast")
        first_may_finish.set()
        return "fast done"

    source = reactivex.from_iterable(
        [
            u.ToolCallStart("c_slow", "slow"),
            u.ToolCallArgs("c_slow", "{}"),
            u.ToolCallStart("c_fast", "fast"),
            u.ToolCallArgs("c_fast", "{}"),
            u.ToolCallEnd("c_slow"),
            u.ToolCallEnd("c_fast"),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    )
    results = await source.pipe(ops.convert(), ops.execute_tools([slow, fast]), rx.to_list())
    response = reactivex.from_iterable(results).pipe(ops.aggregate()).run()
    assert finished == ["fast", "slow"]
    assert [m.tool_call_id for m in response.tool_messages] == ["c_slow", "c_fast"]
    assistant, *tools = response.turn_transcript
    assert [t.id for t in assistant.tool_calls or ()] == ["c_slow", "c_fast"]
    assert [(m.tool_call_id, m.content) for m in tools] == [
        ("c_slow", "slow done"),
        ("c_fast", "fast done"),
    ]


# ---------------------------------------------------------------- README over real HTTP


@pytest.mark.asyncio
async def test_the_readme_pipeline_runs_offline_against_the_local_server(
    llm_server: LLMServer,
) -> None:
    """README "Subscribe to a pipeline", with only the URL changed: one request per
    subscription, contents shown live, and ``collect_agent_response`` gives text,
    calls and usage; ``aclose`` leaves no connection open."""
    llm_server.enqueue(
        Reply(text="Checking.", tool_calls=[ToolCallSpec("weather", {"city": "Paris"})])
    )
    shown: list[Any] = []

    def show(result: rafrx.AgentResponseResult) -> None:
        for content in result.contents:
            shown.append(content)

    client = OpenAIChatClient(llm_server.url, api_key="sk-readme-demo-key", model="gpt-4o")
    results = client.stream([rafrx.ChatMessage.user("Weather in Paris?")]).pipe(
        ops.convert(),
        rx.do_action(show),
    )
    response = await rafrx.collect_agent_response(results)
    await client.aclose()
    assert response.text == "Checking."
    assert [(t.name, t.arguments) for t in response.tool_calls] == [("weather", {"city": "Paris"})]
    assert response.usage is not None
    assert response.usage.total_tokens > 0
    assert any(isinstance(x, c.ToolCallArgsProgressContent) for x in shown)
    assert len(llm_server.requests) == 1
    await llm_server.wait_connections_closed()


@pytest.mark.asyncio
async def test_the_readme_user_operator_slots_between_built_in_ones(
    llm_server: LLMServer,
) -> None:
    """README: "your own slot in anywhere" — an ``rx.map`` between
    ``accumulate_tool_calls`` and ``parse_args_stream`` sees every result and its
    rewrite reaches the eager flush (the server splits the arguments every 8
    characters, so the rewrite must act per delta)."""
    llm_server.enqueue(Reply(tool_calls=[ToolCallSpec("save", {"secret": "hunter2"})]))

    def my_redactor(result: AgentResponseResult) -> AgentResponseResult:
        import attrs

        def fix(item: Any) -> Any:
            if isinstance(item, c.ToolCallArgsContent):
                return attrs.evolve(item, args_delta=item.args_delta.replace("h", "*"))
            return item

        return attrs.evolve(result, contents=tuple(fix(x) for x in result.contents))

    async with OpenAIChatClient(llm_server.url, model="m") as client:
        redacted = client.stream([ChatMessage.user("save it")]).pipe(
            ops.split_legacy_delta(),
            ops.accumulate_tool_calls(),
            rx.map(my_redactor),
            ops.parse_args_stream(),
            ops.flush_tool_calls(eager=True),
        )
        results = await redacted.pipe(rx.to_list())
    (calling,) = [x for x in _contents(results) if isinstance(x, c.ToolCallingContent)]
    assert calling.arguments == {"secret": "*unter2"}
    assert "hunter2" not in repr(results)  # the raw deltas were rewritten too


@pytest.mark.asyncio
async def test_status_error_keeps_status_and_body_through_aggregate_without_the_key(
    llm_server: LLMServer,
) -> None:
    """DESIGN Errors: ``on_error(RafrxError subclass)`` "carrying ``.status``/``.body``
    … (never the API key)"; after an ``ErrorContent`` result, ``aggregate()``
    re-raises the same error with ``.partial``. The server echoes the key."""
    key = "sk-proj-AUDITkey1234567890abcdef"
    llm_server.enqueue(
        Fault.status(401, body={"error": {"message": f"Incorrect API key provided: {key}"}})
    )
    async with OpenAIChatClient(llm_server.url, api_key=key, model="m") as client:
        results: list[AgentResponseResult] = []
        stream = client.stream([ChatMessage.user("hi")]).pipe(
            ops.convert(), rx.do_action(results.append)
        )
        with pytest.raises(HTTPStatusError) as caught:
            await stream.pipe(ops.aggregate())
    error = caught.value
    assert error.status == 401
    assert error.retryable is False
    assert error.body is not None
    assert "Incorrect API key" in error.body
    assert isinstance(_contents(results)[-1], c.ErrorContent)
    assert error.partial is not None
    assert error.partial.text == ""
    for text in (str(error), repr(error), error.body, repr(error.__dict__), repr(client)):
        assert key not in text
        assert key[8:] not in text
    assert len(llm_server.requests) == 1  # 401 is never retried


@pytest.mark.asyncio
async def test_retries_give_up_saying_how_many_attempts_and_release_each_connection(
    llm_server: LLMServer,
) -> None:
    """README: "when they give up, the error says how many attempts were made
    (``.attempts``)"; RetryPolicy: "its message, '(after N attempts)'"; RELIABILITY
    row 4: "Release the connection on every attempt"."""
    llm_server.enqueue(*[Fault.status(503) for _ in range(3)])
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False)
    async with OpenAIChatClient(llm_server.url, model="m", retry=policy) as client:
        with pytest.raises(HTTPStatusError) as caught:
            await rafrx.collect_agent_response(
                client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
            )
    assert caught.value.status == 503
    assert caught.value.attempts == 3
    assert str(caught.value).endswith("(after 3 attempts)")
    assert len(llm_server.requests) == 3
    await llm_server.wait_connections_closed()


@pytest.mark.asyncio
async def test_a_bom_on_the_retried_response_is_stripped_again(llm_server: LLMServer) -> None:
    """RELIABILITY: "a BOM on a *retried* response (strip again, since each response
    is a new stream)" — both attempts start with a BOM; the second one's text is
    intact and the retry is not visible in the output."""
    body = b"\xef\xbb\xbf" + TEXT_THEN_STOP + b"data: [DONE]\n\n"
    llm_server.enqueue(Fault.status(503), Replay(body, chunk_size=1))
    policy = RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=False)
    async with OpenAIChatClient(llm_server.url, model="m", retry=policy) as client:
        updates = await client.stream([ChatMessage.user("hi")]).pipe(rx.to_list())
    assert [type(x).__name__ for x in updates] == ["ResponseMetadata", "TextDelta", "Finish"]
    assert updates[1] == u.TextDelta("hi")
    assert len(llm_server.requests) == 2


@pytest.mark.asyncio
async def test_disposing_twice_is_a_no_op_and_closes_the_connection(
    llm_server: LLMServer,
) -> None:
    """RELIABILITY row 7: dispose mid-stream → nothing more is emitted, the half-read
    response is closed, no task is left (the fixture checks); "Disposing twice is a
    no-op"."""
    llm_server.enqueue(Reply(text="x" * 400, chunk_size=1, delay=0.01))
    seen: list[Any] = []
    ended: list[str] = []
    got_text = asyncio.Event()

    def on_next(update: Any) -> None:
        seen.append(update)
        if isinstance(update, u.TextDelta):
            got_text.set()

    async with OpenAIChatClient(llm_server.url, model="m") as client:
        subscription = client.stream([ChatMessage.user("hi")]).subscribe(
            on_next, lambda e: ended.append("error"), lambda: ended.append("done")
        )
        await asyncio.wait_for(got_text.wait(), 5)
        subscription.dispose()
        count = len(seen)
        subscription.dispose()
        await llm_server.wait_connections_closed()
        assert len(seen) == count
        assert ended == []
        assert llm_server.open_connections == 0


@pytest.mark.asyncio
async def test_an_agent_turn_orders_the_five_stages_and_brackets_each_llm_call(
    llm_server: LLMServer,
) -> None:
    """Seed: ToolCallStart → Args → End → Calling → Called; DESIGN Agent: ``run()``
    covers every LLM call, each a ``ResponseStartedEvent`` … ``FinishEvent``, and the
    response's ``source_agent_id`` is the agent's ``id``."""
    llm_server.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("add", {"a": 1, "b": 2}),
                ToolCallSpec("add", {"a": 3, "b": 4}),
            ]
        ),
        Reply(text="3 and 7"),
    )

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    async with OpenAIChatClient(llm_server.url, model="m") as client:
        agent = rafrx.Agent(client, tools=[add], id="auditor")
        results = await agent.run("sums?").pipe(rx.to_list())
    order: dict[str, list[int]] = {}
    stages = {**STAGE, c.ToolCalledContent: 4}
    for item in _contents(results):
        if type(item) in stages:
            order.setdefault(item.call_id, []).append(stages[type(item)])
    assert len(order) == 2
    for seq in order.values():
        assert seq == sorted(seq)
        assert seq[0] == 0
        assert seq[-2:] == [3, 4]
    events = [type(e) for r in results for e in r.events]
    assert events == [ResponseStartedEvent, FinishEvent, ResponseStartedEvent, FinishEvent]
    response = reactivex.from_iterable(results).pipe(ops.aggregate("auditor")).run()
    assert response.text == "3 and 7"
    assert [m.content for m in response.tool_messages] == ["3", "7"]
