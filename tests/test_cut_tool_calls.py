"""A tool call cut short is reported, never run (RELIABILITY.md: a response cut by its limit).

When the model hits its token limit mid-arguments, Anthropic leaves the
``tool_use`` block open and OpenAI's chat API still ends the call, with
``finish_reason: "length"``. Either way the call must not run (its arguments
are a fragment) and must not vanish: it ends as a ``ToolCallIncompleteContent``
and an ``AgentResponse`` tool call with ``complete`` false, the raw text and a
preview of what the arguments were on their way to. Calls that did complete in
the same response still run. The same holds for a call left open when the
stream fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jiter
import pytest
import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx import operators as ops
from rafrx import updates as u
from rafrx.agent import Agent
from rafrx.content import (
    ErrorContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
)
from rafrx.errors import ProtocolError, ProviderError
from rafrx.json_stream import partial_json
from rafrx.messages import MessageRole, to_anthropic
from rafrx.operators._flush_tool_calls import FAILED_FIRST
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.sources import from_sse
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import tool
from tests.operators import contents, run
from tests.strategies import LLMCall, legacy_updates, llm_calls, start_args_updates

FIXTURES = Path(__file__).resolve().parent / "data" / "fixtures"
MANIFEST = {e["path"]: e for e in json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))}
ANTHROPIC_CUT = "anthropic/anthropic-max-tokens-truncated-tool-json.sse"

CUT_RAW = '{"path": "a.py", "text": "def f('
CUT_PREVIEW = {"path": "a.py", "text": "def f("}


def flushed(results: list[AgentResponseResult]) -> list[Any]:
    """The flushed calls among the results, in order: to run, or cut short."""
    kinds = (ToolCallingContent, ToolCallIncompleteContent)
    return [c for c in contents(results) if isinstance(c, kinds)]


def chat_stream(*calls: tuple[str, str], finish: FinishReason | None) -> list[Any]:
    """Updates of one OpenAI chat response: ``calls`` as (id, arguments) in one piece each."""
    updates: list[Any] = [u.ResponseMetadata("r1", "m"), u.TextDelta("Writing.")]
    for index, (call_id, raw) in enumerate(calls):
        updates.append(u.ToolCallDelta(index, id=call_id, name="write_file", arguments_delta=""))
        updates.append(u.ToolCallDelta(index, arguments_delta=raw))
    if finish is not None:
        updates.append(u.Finish(finish))
    return updates


# ---------------------------------------------------------------- the recorded Anthropic cut


@pytest.mark.parametrize("eager", [False, True])
def test_the_recorded_max_tokens_cut_is_kept_and_never_flushed_to_run(eager: bool) -> None:
    entry = MANIFEST[ANTHROPIC_CUT]
    want = entry["expected"]["tool_calls"][0]
    assert want["block_not_stopped"]  # the recording's tool_use block never stops
    body = (FIXTURES / ANTHROPIC_CUT).read_bytes()

    results: list[AgentResponseResult] = []
    from_sse(body, "anthropic").pipe(ops.convert(eager)).subscribe(results.append)
    (cut,) = flushed(results)
    assert isinstance(cut, ToolCallIncompleteContent)
    assert (cut.call_id, cut.name) == (want["id"], want["name"])
    assert cut.raw_arguments == want["arguments_raw"]
    assert cut.finish_reason is FinishReason.LENGTH
    assert cut.partial_value == jiter.from_json(
        cut.raw_arguments.encode(), partial_mode="trailing-strings"
    )
    # the SDK's own partial parse (which drops an unfinished string)
    assert partial_json(cut.raw_arguments, trailing_strings=False) == want["arguments_partial"]

    response = reactivex.from_iterable(results).pipe(ops.aggregate()).run()
    assert response.finish_reason is FinishReason.LENGTH
    (call,) = response.tool_calls
    assert (call.id, call.complete, call.arguments) == (want["id"], False, None)
    assert call.raw_arguments == want["arguments_raw"]
    assert call.partial_value == cut.partial_value
    assert (
        call.error == "arguments cut short: the response hit its token limit (finish reason length)"
    )
    # the transcript keeps the text; the cut call would be a tool_use nothing answers
    (assistant,) = response.turn_transcript
    assert assistant.role is MessageRole.ASSISTANT
    assert assistant.content == entry["expected"]["text"]
    assert assistant.tool_calls is None


# ---------------------------------------------------------------- the flusher's choices


@pytest.mark.parametrize("eager", [False, True])
def test_a_chat_call_ended_by_a_length_finish_is_cut_not_called(eager: bool) -> None:
    results, errors = run(
        chat_stream(("ok", '{"path": "b.py"}'), ("cut", CUT_RAW), finish=FinishReason.LENGTH),
        ops.convert(eager),
    )
    assert errors == []
    calls = flushed(results)
    assert [type(c).__name__ for c in calls] == ["ToolCallingContent", "ToolCallIncompleteContent"]
    ok, cut = calls
    assert (ok.call_id, ok.arguments, ok.error) == ("ok", {"path": "b.py"}, None)
    assert (cut.call_id, cut.raw_arguments) == ("cut", CUT_RAW)
    assert (cut.partial_value, cut.finish_reason) == (CUT_PREVIEW, FinishReason.LENGTH)


@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize("finish", [FinishReason.STOP, FinishReason.TOOL_CALLS, None])
def test_invalid_arguments_without_a_length_finish_still_go_to_the_model(
    eager: bool, finish: FinishReason | None
) -> None:
    # Not a cut: the model wrote bad JSON. The tool layer answers it with the parse error.
    results, errors = run(chat_stream(("bad", '{"path": '), finish=finish), ops.convert(eager))
    assert errors == []
    (call,) = flushed(results)
    assert isinstance(call, ToolCallingContent)
    assert (call.call_id, call.arguments, call.raw_arguments) == ("bad", None, '{"path": ')
    assert str(call.error).startswith("invalid JSON arguments")


def test_eagerly_a_valid_call_runs_at_its_end_and_an_invalid_one_waits_for_the_finish() -> None:
    updates = chat_stream(("ok", "{}"), ("cut", CUT_RAW), finish=FinishReason.LENGTH)
    seen: list[tuple[str, list[str]]] = []

    def on_next(result: AgentResponseResult) -> None:
        kinds = (ToolCallingContent, ToolCallIncompleteContent)
        names = [type(c).__name__ for c in result.contents if isinstance(c, kinds)]
        if names or result.finish_reason:
            seen.append((str(result.finish_reason), names))

    reactivex.from_iterable(updates).pipe(ops.convert(eager=True)).subscribe(on_next)
    assert seen == [
        ("None", ["ToolCallingContent"]),  # "ok": flushed as soon as the calls ended
        ("length", []),
        ("None", ["ToolCallIncompleteContent"]),  # "cut": only the finish could tell
    ]


def test_an_invalid_call_of_an_earlier_llm_call_is_not_blamed_on_a_later_length_finish() -> None:
    first = chat_stream(("bad", '{"x": '), finish=FinishReason.TOOL_CALLS)
    second = [u.ResponseMetadata("r2", "m"), u.TextDelta("More"), u.Finish(FinishReason.LENGTH)]
    results, _ = run([*first, *second], ops.convert())
    (call,) = flushed(results)
    assert isinstance(call, ToolCallingContent)
    assert call.error is not None


@pytest.mark.parametrize("eager", [False, True])
def test_a_failing_stream_cuts_open_calls_before_the_error_which_stays_last(eager: bool) -> None:
    updates = [
        u.ResponseMetadata("r1", "m"),
        u.ToolCallStart("done", "write_file"),
        u.ToolCallArgs("done", "{}"),
        u.ToolCallEnd("done"),
        u.ToolCallStart("open", "write_file"),
        u.ToolCallArgs("open", CUT_RAW),
        u.Error("overloaded"),
    ]
    results, errors = run(updates, ops.convert(eager), ops.flush_tool_calls(eager))
    assert len(errors) == 1
    assert isinstance(errors[0], ProviderError)
    assert isinstance(results[-1].contents[-1], ErrorContent)
    # eagerly "done" ran at its end; otherwise an ended call waits for completion, never
    # reached: the failure cuts it short too (whole arguments, but its response failed)
    assert [c.call_id for c in flushed(results) if isinstance(c, ToolCallingContent)] == (
        ["done"] if eager else []
    )
    kinds = (ErrorContent, ToolCallIncompleteContent)
    order = [type(c).__name__ for c in contents(results) if isinstance(c, kinds)]
    cut_first = [] if eager else ["ToolCallIncompleteContent"]
    assert order == [*cut_first, "ToolCallIncompleteContent", "ErrorContent"]
    cut = [c for c in contents(results) if isinstance(c, ToolCallIncompleteContent)]
    done = [("done", "{}", {}, None, FAILED_FIRST)]
    assert [
        (c.call_id, c.raw_arguments, c.partial_value, c.finish_reason, c.error) for c in cut
    ] == [
        *([] if eager else done),
        (
            "open",
            CUT_RAW,
            CUT_PREVIEW,
            None,
            "arguments cut short: the stream ended before the call did",
        ),
    ]

    with pytest.raises(ProviderError) as info:
        reactivex.from_iterable(updates).pipe(ops.convert(eager), ops.aggregate()).run()
    partial = info.value.partial
    assert partial is not None
    open_call = partial.tool_calls[-1]
    assert (open_call.id, open_call.complete, open_call.partial_value) == (
        "open",
        False,
        CUT_PREVIEW,
    )
    assert open_call.error == "arguments cut short: the stream ended before the call did"


@pytest.mark.parametrize("first", [False, True])
@pytest.mark.parametrize("second", [False, True])
def test_flushing_twice_reports_each_cut_call_once(first: bool, second: bool) -> None:
    updates = chat_stream(("ok", "{}"), ("cut", CUT_RAW), finish=FinishReason.LENGTH)
    results, errors = run(updates, ops.convert(first), ops.flush_tool_calls(second))
    assert errors == []
    assert [(type(c).__name__, c.call_id) for c in flushed(results)] == [
        ("ToolCallingContent", "ok"),
        ("ToolCallIncompleteContent", "cut"),
    ]


@pytest.mark.parametrize("eager", [False, True])
def test_the_fused_pipeline_equals_the_operators_kept_apart(eager: bool) -> None:
    updates = chat_stream(("ok", "{}"), ("cut", CUT_RAW), finish=FinishReason.LENGTH)
    fused, _ = run(updates, ops.convert(eager))
    apart, _ = run(
        updates,
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        ops.parse_args_stream(),
        ops.flush_tool_calls(eager),
    )
    assert fused == apart


# ---------------------------------------------------------------- the agent, over HTTP

CLIENTS = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


@pytest.fixture(params=sorted(CLIENTS))
def client_class(request: pytest.FixtureRequest) -> type[LLMClient]:
    return CLIENTS[request.param]


@pytest.mark.asyncio
async def test_the_agent_runs_the_complete_calls_and_never_the_cut_one(
    client_class: type[LLMClient],
) -> None:
    written: list[dict[str, Any]] = []

    @tool
    def write_file(path: str, text: str = "") -> str:
        """Write a file."""
        written.append({"path": path, "text": text})
        return "written"

    async with LLMServer() as server, client_class(server.url, "sk-test") as client:
        server.enqueue(
            Reply(
                text="Writing both.",
                tool_calls=[
                    ToolCallSpec("write_file", {"path": "b.py"}, id="call_ok"),
                    ToolCallSpec("write_file", CUT_RAW, id="call_cut"),
                ],
                finish=FinishReason.LENGTH,
            ),
            Reply(text="b.py is written; a.py was too long."),
        )
        response = await Agent(client, tools=[write_file]).send("Write a.py and b.py")
        assert len(server.requests) == 2
        follow_up = server.requests[1]

    assert written == [{"path": "b.py", "text": ""}]  # the cut call never ran
    assert [(c.id, c.complete) for c in response.tool_calls] == [
        ("call_ok", True),
        ("call_cut", False),
    ]
    cut = response.tool_calls[1]
    assert (cut.raw_arguments, cut.partial_value) == (CUT_RAW, CUT_PREVIEW)
    assert "token limit" in str(cut.error)
    # what goes back to the model pairs every call with a result: the cut one is left out
    assert [m.tool_call_id for m in response.tool_messages] == ["call_ok"]
    assert follow_up.last_role == "tool"
    assert "call_cut" not in json.dumps(follow_up.json)
    assert response.text == "Writing both.b.py is written; a.py was too long."


@pytest.mark.asyncio
async def test_a_turn_whose_only_call_was_cut_ends_there(client_class: type[LLMClient]) -> None:
    ran: list[str] = []

    @tool
    def write_file(path: str, text: str = "") -> str:
        """Write a file."""
        ran.append(path)
        return "written"

    async with LLMServer() as server, client_class(server.url, "sk-test") as client:
        server.enqueue(
            Reply(
                tool_calls=[ToolCallSpec("write_file", CUT_RAW, id="call_cut")],
                finish=FinishReason.LENGTH,
            )
        )
        response = await Agent(client, tools=[write_file]).send("Write a.py")
        assert len(server.requests) == 1  # nothing ran, so nothing to tell the model

    assert ran == []
    assert response.finish_reason is FinishReason.LENGTH
    assert [(c.id, c.complete, c.partial_value) for c in response.tool_calls] == [
        ("call_cut", False, CUT_PREVIEW)
    ]
    # the transcript is one a provider accepts as history: no call without a result
    for message in response.turn_transcript:
        assert not message.tool_calls
    transcript = response.turn_transcript
    openai = [m.to_openai() for m in transcript]
    wire = json.dumps([openai, to_anthropic(transcript), to_responses_input(transcript)])
    assert "call_cut" not in wire


def test_a_cut_call_in_the_json_form_of_the_response() -> None:
    results, _ = run(chat_stream(("cut", CUT_RAW), finish=FinishReason.LENGTH), ops.convert())
    response = reactivex.from_iterable(results).pipe(ops.aggregate()).run()
    (call,) = json.loads(json.dumps(response.to_dict()))["tool_calls"]
    assert call["complete"] is False
    assert (call["raw_arguments"], call["partial_value"]) == (CUT_RAW, CUT_PREVIEW)


# ---------------------------------------------------------------- what people see


def test_notebook_and_terminal_show_a_cut_call_as_never_run() -> None:
    import io

    from rafrx.notebook import LiveState, content_html, live_html, response_html
    from rafrx.terminal import TerminalRenderer

    results, _ = run(chat_stream(("cut", CUT_RAW), finish=FinishReason.LENGTH), ops.convert())
    (cut,) = flushed(results)
    assert "✂" in content_html(cut)
    assert "token limit" in content_html(cut)

    state = LiveState()
    for result in results:
        state.add(result)
    assert state.cards["cut"].status == "cut short"
    assert state.cards["cut"].argument_error == cut.error
    assert "cut short" in live_html(state)

    response = reactivex.from_iterable(results).pipe(ops.aggregate()).run()
    html = response_html(response)
    assert "✂ <b>write_file</b> <code>cut</code>" in html

    stream = io.StringIO()
    renderer = TerminalRenderer(stream, color=False)
    for result in results:
        renderer.result(result)
    renderer.close()
    shown = stream.getvalue()
    assert "write_file never ran: arguments cut short: the response hit its token limit" in shown
    assert '"def f(' in shown


# ---------------------------------------------------------------- any stream, cut anywhere


@settings(max_examples=100, deadline=None)
@given(
    call=llm_calls().filter(lambda c: bool(c.calls)),
    legacy=st.booleans(),
    eager=st.booleans(),
    data=st.data(),
)
def test_a_length_finish_anywhere_runs_only_calls_whose_arguments_are_whole(
    call: LLMCall, legacy: bool, eager: bool, data: st.DataObject
) -> None:
    updates = data.draw(legacy_updates(call) if legacy else start_args_updates(call))
    body = [x for x in updates if not isinstance(x, u.Finish | u.Usage)]
    k = data.draw(st.integers(0, len(body)))
    cut_updates = [*body[:k], u.Finish(FinishReason.LENGTH)]
    results, errors = run(cut_updates, ops.convert(eager))
    if errors:  # a chat call cut before its name came: a protocol error, not a call
        (error,) = errors
        assert isinstance(error, ProtocolError)
        assert "never a name" in str(error)
        assert legacy
        return
    started = [c.call_id for c in contents(results) if isinstance(c, ToolCallStartContent)]
    out = flushed(results)
    assert sorted(c.call_id for c in out) == sorted(started)  # each started call, once
    planned = {p.id: p for p in call.calls}
    for content in out:
        whole = planned[content.call_id].raw
        if isinstance(content, ToolCallingContent):
            # only arguments that came whole run (or none yet: "" is {} by contract)
            assert content.error is None
            assert content.raw_arguments in (whole, "")
            if content.raw_arguments:
                assert content.arguments == planned[content.call_id].arguments
        else:
            assert content.finish_reason is FinishReason.LENGTH
            assert whole.startswith(content.raw_arguments)
            if content.raw_arguments.strip():
                expected = jiter.from_json(
                    content.raw_arguments.encode(), partial_mode="trailing-strings"
                )
                assert content.partial_value == expected
