"""A user composing the pipeline themselves, as DESIGN.md describes it.

* the documented examples (doctests, marble diagrams, README and notebook code) do what
  they say;
* ``split_legacy_delta() | accumulate_tool_calls() | parse_args_stream() |
  flush_tool_calls()`` equals ``convert()`` result for result, over every recorded
  fixture and over generated update sequences, with each option;
* the operators re-subscribed, over sources that fail at once, complete empty, carry two
  LLM calls, or bring the updates in unusual but legal orders;
* ``aggregate()`` / ``collect_agent_response()`` / ``execute_tools()`` in chains built
  with ``share()``, ``replay()`` and ``take_until()``.
"""

from __future__ import annotations

import asyncio
import doctest
import importlib
import itertools
import json
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import reactivex
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex import Observable
from reactivex import operators as rx
from reactivex.disposable import Disposable
from reactivex.subject import Subject

import rafrx
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.content import (
    ErrorContent,
    ResponseMetadata,
    TextContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
    ToolCalledContent,
    ToolCallEndContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    UriContent,
    UsageContent,
)
from rafrx.errors import ProtocolError, ProviderError, RafrxError
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import ChatMessage, MessageRole, ToolCall
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.tools import tool
from tests.operators import apart, run
from tests.operators.test_convert import counted_ids
from tests.strategies import (
    LLMCall,
    argument_runs,
    legacy_updates,
    llm_calls,
    messy_updates,
    start_args_updates,
)

D = u.ToolCallDelta
R = AgentResponseResult
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "fixtures"
MANIFEST: list[dict[str, Any]] = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
STREAMS = [e for e in MANIFEST if e["format"] != "sse-only"]
LIMIT = 64 * 1024 * 1024


def composed(eager: bool = False, limit: int = LIMIT) -> Callable[[Any], Any]:
    """The four operators, as a user pipes them (they fuse into one chain)."""
    return reactivex.compose(
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(limit),
        ops.parse_args_stream(),
        ops.flush_tool_calls(eager),
    )


def observe(source: Observable[Any]) -> tuple[list[Any], list[tuple[type, str]], bool]:
    """Subscribe synchronously: (items, errors as (type, text), completed)."""
    out: list[Any] = []
    errors: list[Exception] = []
    done: list[bool] = []
    source.subscribe(out.append, errors.append, lambda: done.append(True))
    assert len(errors) + len(done) == 1, "exactly one terminal notification"
    return out, [(type(e), str(e)) for e in errors], bool(done)


def flat(results: list[Any]) -> list[Any]:
    return [c for r in results for c in r.contents]


def kinds(results: list[Any]) -> list[str]:
    return [type(c).__name__ for c in flat(results)]


def aggregated(updates: list[Any], *operators: Any) -> AgentResponse:
    out, errors = run(updates, *operators, ops.aggregate())
    assert errors == []
    [response] = out
    return response  # type: ignore[no-any-return]


def timed(items: list[Any], gap: float = 0.005) -> Observable[Any]:
    """A cold source emitting ``items`` on the running loop, ``gap`` seconds apart."""

    def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
        loop = asyncio.get_running_loop()
        state: dict[str, Any] = {"stopped": False}

        def emit(i: int) -> None:
            if state["stopped"]:
                return
            if i < len(items):
                observer.on_next(items[i])
                state["handle"] = loop.call_later(gap, emit, i + 1)
            else:
                observer.on_completed()

        state["handle"] = loop.call_later(gap, emit, 0)

        def dispose() -> None:
            state["stopped"] = True
            state["handle"].cancel()

        return Disposable(dispose)

    return reactivex.create(subscribe)


# ================================================================ 1. documented examples

MODULES = sorted(
    [m.name for m in pkgutil.walk_packages(rafrx.__path__, "rafrx.")] + ["rafrx"],
)


@pytest.mark.parametrize("name", MODULES)
def test_every_docstring_example_of_the_module_runs_as_written(name: str) -> None:
    # (The suite also collects them with --doctest-modules; here as a user would run them.)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
    assert result.failed == 0


def test_the_convert_marble_holds() -> None:
    # -T("Hi")--D(0,f,"{}")--F-|
    # -r(Text)--r(Start)r(Args,Parsed?)--r(End)r(Finish)--r(Calling)-|
    conv, _ = run(
        [u.TextDelta("Hi"), D(0, name="f", arguments_delta="{}"), u.Finish(FinishReason.STOP)],
        ops.convert(),
    )
    shown = [[type(c).__name__ for c in r.contents] for r in conv]
    assert shown[:3] == [["TextContent"], ["ToolCallStartContent"], ["ToolCallArgsContent"]]
    assert shown[-1] == ["ToolCallingContent"]
    assert "ToolCallEndContent" in shown[3]


def test_the_other_operator_marbles_hold() -> None:
    # split_legacy_delta
    out, _ = run(
        [
            D(0, id="a", name="f", arguments_delta="{"),
            D(0, arguments_delta="}"),
            u.TextDelta("hi"),
            u.Finish(FinishReason.STOP),
        ],
        ops.split_legacy_delta(),
    )
    assert out == [
        u.ToolCallStart("a", "f"),
        u.ToolCallArgs("a", "{"),
        u.ToolCallArgs("a", "}"),
        u.TextDelta("hi"),
        u.ToolCallEnd("a"),
        u.Finish(FinishReason.STOP),
    ]
    # accumulate_tool_calls: r1..r6, start event on r1, finish event on r6
    out, _ = run(
        [
            u.ResponseMetadata("id"),
            u.TextDelta("a"),
            u.ToolCallStart("c", "f"),
            u.ToolCallArgs("c", "{}"),
            u.ToolCallEnd("c"),
            u.Finish(FinishReason.STOP),
        ],
        ops.accumulate_tool_calls(),
    )
    assert len(out) == 6
    assert [type(e).__name__ for r in out for e in r.events] == [
        "ResponseStartedEvent",
        "FinishEvent",
    ]
    assert out[0].events == (ResponseStartedEvent("id", None),)
    # parse_args_stream
    out, _ = run(
        [
            u.ToolCallStart("c", "f"),
            u.ToolCallArgs("c", '{"path": "a.'),
            u.ToolCallArgs("c", 'py", "n": 1}'),
        ],
        ops.accumulate_tool_calls(),
        ops.parse_args_stream(),
    )
    assert out[1].contents[1:] == (ToolCallArgsProgressContent("c", "path", 2, "a."),)
    assert out[2].contents[1:] == (
        ToolCallArgsProgressContent("c", "path", 4, "py"),
        ToolCallArgsParsedContent("c", "path", "a.py"),
        ToolCallArgsParsedContent("c", "n", 1),
    )
    # flush_tool_calls: the Calling after everything
    out, _ = run(
        [
            u.ToolCallStart("a", "f"),
            u.ToolCallArgs("a", "{}"),
            u.ToolCallEnd("a"),
            u.Finish(FinishReason.STOP),
        ],
        ops.accumulate_tool_calls(),
        ops.flush_tool_calls(),
    )
    assert kinds(out) == [
        "ToolCallStartContent",
        "ToolCallArgsContent",
        "ToolCallEndContent",
        "ToolCallingContent",
    ]
    assert out[3].finish_reason is FinishReason.STOP
    assert out[4].contents[0].call_id == "a"


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text("utf-8"), re.S)


@pytest.mark.asyncio
async def test_readme_subscribe_example_runs_against_a_local_server(
    llm_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from rafrx.testing import Reply, ToolCallSpec

    code = _python_blocks(ROOT / "README.md")[0]
    assert "asyncio.run(main())" in code
    assert "https://api.openai.com" in code
    code = code.replace("https://api.openai.com", llm_server.url)
    code = code.replace("asyncio.run(main())", "")
    llm_server.enqueue(Reply(text="Sunny.", tool_calls=[ToolCallSpec("w", {"c": "P"}, id="k")]))
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    await namespace["main"]()
    printed = capsys.readouterr().out
    assert "TextContent(text='Sunny.')" in printed
    assert "ToolCallingContent(call_id='k', name='w', arguments={'c': 'P'}" in printed
    assert "Sunny. (ToolCall(id='k', name='w', arguments={'c': 'P'}" in printed


def test_readme_custom_operator_and_match_examples() -> None:
    blocks = _python_blocks(ROOT / "README.md")
    chain, match = blocks[1], blocks[2]
    body = (
        b'data: {"choices":[{"delta":{"content":"mail ann@x.org"}}]}\n\n'
        b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":'
        b'{"name":"f","arguments":"{\\"s\\": \\"abc\\"}"}}]},"finish_reason":"tool_calls"}]}\n\n'
        b"data: [DONE]\n\n"
    )

    class Client:
        def stream(self, messages: Any) -> Any:
            return from_sse(body)

    namespace: dict[str, Any] = {
        "ops": ops,
        "client": Client(),
        "messages": [],
        "my_redactor": lambda r: r,
    }
    exec(compile(chain, "README.md", "exec"), namespace)
    results = observe(namespace["redacted"])[0]
    seen: list[tuple[str, Any]] = []

    class UI:
        def append(self, text: str) -> None:
            seen.append(("text", text))

        def progress(self, call_id: str, name: str, received: int) -> None:
            seen.append(("progress", (call_id, name, received)))

        def card(self, call_id: str, name: str, arguments: Any) -> None:
            seen.append(("card", (call_id, name, arguments)))

    match_code = compile(
        "def show(content):\n" + re.sub("^", "    ", match, flags=re.M), "README.md", "exec"
    )
    ns2: dict[str, Any] = {"rafrx": rafrx, "ui": UI()}
    exec(match_code, ns2)
    for content in flat(results):
        ns2["show"](content)
    assert seen == [
        ("text", "mail ann@x.org"),
        ("progress", ("c", "s", 3)),
        ("card", ("c", "f", {"s": "abc"})),
    ]
    # eager=True: the Calling comes right after its End, before the Finish result
    names = kinds(results)
    assert names.index("ToolCallingContent") == names.index("ToolCallEndContent") + 1


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic", "openai-responses"])
def test_notebooks_readme_recording_script_reproduces_the_shipped_demo(
    dialect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = _python_blocks(ROOT / "notebooks" / "README.md")[0]
    code = code.replace(
        "(OpenAIChatClient, AnthropicClient, OpenAIResponsesClient)", "CLASSES"
    ).replace("delay=0.008", "delay=0")
    from rafrx.sources import clients

    cls = {
        c.dialect: c
        for c in (clients.OpenAIChatClient, clients.AnthropicClient, clients.OpenAIResponsesClient)
    }[dialect]
    (tmp_path / "rafrx" / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "notebooks/README.md", "exec"), {"CLASSES": (cls,), "__name__": "x"})
    made = (tmp_path / f"rafrx/data/demo-{dialect}.sse").read_bytes()
    shipped = (ROOT / f"rafrx/data/demo-{dialect}.sse").read_bytes()

    def response(body: bytes) -> AgentResponse:
        return (
            from_sse(body, dialect=dialect)
            .pipe(  # type: ignore[no-any-return]
                ops.convert(), ops.aggregate()
            )
            .run()
        )

    a, b = response(made), response(shipped)
    assert (a.text, a.reasoning_text, a.tool_calls, a.finish_reason) == (
        b.text,
        b.reasoning_text,
        b.tool_calls,
        b.finish_reason,
    )
    assert a.usage == b.usage


# ================================================================ 2. composed == convert()


@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
@pytest.mark.parametrize("path", [e["path"] for e in STREAMS])
def test_fixture_composed_chain_equals_convert(path: str, eager: bool) -> None:
    entry = next(e for e in STREAMS if e["path"] == path)
    body = (FIXTURES / path).read_bytes()
    dialect = entry["format"]
    outcomes = []
    for make in (
        lambda: ops.convert(eager),
        lambda: composed(eager),
        lambda: apart(
            ops.split_legacy_delta(),
            ops.accumulate_tool_calls(),
            ops.parse_args_stream(),
            ops.flush_tool_calls(eager),
        ),
    ):
        with counted_ids():
            outcomes.append(observe(from_sse(body, dialect=dialect).pipe(make())))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    # the same over the updates as a hand-built list (the error, if any, re-raised after them)
    updates: list[Any] = []
    raised: list[Exception] = []
    from_sse(body, dialect=dialect).subscribe(updates.append, raised.append)
    tail: Observable[Any] = reactivex.throw(raised[0]) if raised else reactivex.empty()
    listed = []
    for make in (lambda: ops.convert(eager), lambda: composed(eager)):
        with counted_ids():
            listed.append(
                observe(reactivex.concat(reactivex.from_iterable(updates), tail).pipe(make()))
            )
    assert listed[0] == listed[1]
    assert list(listed[0][0]) == outcomes[0][0]


@settings(max_examples=150, deadline=None)
@given(
    updates=messy_updates() | argument_runs(),
    eager=st.booleans(),
    limit=st.sampled_from([LIMIT, 4, 12]),
)
def test_generated_updates_composed_chain_equals_convert(
    updates: list[Any], eager: bool, limit: int
) -> None:
    with counted_ids():
        a = observe(reactivex.from_iterable(updates).pipe(ops.convert(eager, limit)))
    with counted_ids():
        b = observe(reactivex.from_iterable(updates).pipe(composed(eager, limit)))
    assert a == b


def _two_calls(data: st.DataObject, first: LLMCall, second: LLMCall) -> list[Any]:
    return [*data.draw(legacy_updates(first)), *data.draw(start_args_updates(second))]


@settings(max_examples=60, deadline=None)
@given(first=llm_calls(), second=llm_calls(), data=st.data(), eager=st.booleans())
def test_two_llm_calls_composed_chain_equals_convert_and_takes_agree(
    first: LLMCall, second: LLMCall, data: st.DataObject, eager: bool
) -> None:
    updates = _two_calls(data, first, second)
    a = observe(reactivex.from_iterable(updates).pipe(ops.convert(eager)))
    b = observe(reactivex.from_iterable(updates).pipe(composed(eager)))
    assert a == b
    starts = [e for r in a[0] for e in r.events if isinstance(e, ResponseStartedEvent)]
    assert len(starts) == 2
    n = data.draw(st.integers(0, len(a[0]) + 1))
    taken = observe(reactivex.from_iterable(updates).pipe(composed(eager), rx.take(n)))
    assert taken[0] == a[0][:n]


def test_composed_chain_is_cold_and_resubscribable() -> None:
    updates = [
        u.ResponseMetadata("r", "m"),
        u.TextDelta("a"),
        D(0, id="c", name="f", arguments_delta='{"k": "v"}'),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    for make in (lambda: ops.convert(), lambda: composed(), lambda: composed(True)):
        source = reactivex.from_iterable(updates).pipe(make(), ops.aggregate())
        first, second = observe(source), observe(source)
        assert first == second
        assert first[0][0].tool_calls == (ToolCall("c", "f", {"k": "v"}),)
        body = (FIXTURES / "openai-chat/openai-parallel-tool-calls.sse").read_bytes()
        sse = from_sse(body).pipe(make())
        assert observe(sse) == observe(sse)


# ================================================================ 3. unusual orders


def test_usage_before_text_opens_the_call_and_counts_once() -> None:
    updates = [u.Usage(Usage(1, 2, 3)), u.TextDelta("a"), u.Finish(FinishReason.STOP)]
    out, _ = run(updates, composed())
    assert out[0].events == (ResponseStartedEvent(None, None),)
    assert out[0].contents == (UsageContent(Usage(1, 2, 3)),)
    response = aggregated(updates, composed())
    assert response.usage == Usage(1, 2, 3)
    assert response.turn_transcript == (ChatMessage(MessageRole.ASSISTANT, "a"),)


def test_index_1_before_index_0_keeps_start_order_everywhere() -> None:
    updates = [
        D(1, id="b", name="g", arguments_delta='{"y"'),
        D(0, id="a", name="f", arguments_delta='{"x": 1}'),
        D(1, arguments_delta=": 2}"),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    for make in (lambda: ops.convert(), lambda: composed(), lambda: composed(True)):
        out, errors = run(updates, make())
        assert errors == []
        ends = [c.call_id for c in flat(out) if isinstance(c, ToolCallEndContent)]
        calls = [c.call_id for c in flat(out) if isinstance(c, ToolCallingContent)]
        assert ends == ["b", "a"]
        assert calls == ["b", "a"]  # start order (eager: end order, the same here)
    response = aggregated(updates, composed())
    assert [c.id for c in response.tool_calls] == ["b", "a"]
    assert response.tool_calls[0].arguments == {"y": 2}


def test_metadata_twice_updates_id_and_keeps_the_model() -> None:
    updates = [
        u.ResponseMetadata("r1", "m1"),
        u.TextDelta("a"),
        u.ResponseMetadata("r2", None),
        u.TextDelta("b"),
        u.Finish(FinishReason.STOP),
    ]
    out, _ = run(updates, composed())
    assert [(r.id, r.model) for r in out] == [("r1", "m1")] * 2 + [("r2", "m1")] * 3
    assert [e for r in out for e in r.events if isinstance(e, ResponseStartedEvent)] == [
        ResponseStartedEvent("r1", "m1")
    ]
    texts = [c for c in flat(out) if isinstance(c, TextContent)]
    assert [(c.meta.id, c.meta.model) for c in texts] == [("r1", "m1"), ("r2", "m1")]
    response = aggregated(updates, composed())
    assert (response.id, response.model, response.text) == ("r2", "m1", "ab")


def test_arguments_after_the_finish_fail_the_stream_with_a_partial() -> None:
    # A Finish closes the calls (End just before it); a nameless fragment after it is a
    # call that never gets a name, and Args of a closed Start/Args call are not open.
    for updates in (
        [
            D(0, id="a", name="f", arguments_delta='{"x": 1}'),
            u.Finish(FinishReason.TOOL_CALLS),
            D(0, arguments_delta="}"),
        ],
        [
            u.ToolCallStart("a", "f"),
            u.ToolCallArgs("a", '{"x": 1}'),
            u.ToolCallEnd("a"),
            u.Finish(FinishReason.TOOL_CALLS),
            u.ToolCallArgs("a", "}"),
        ],
    ):
        a = observe(reactivex.from_iterable(updates).pipe(ops.convert()))
        b = observe(reactivex.from_iterable(updates).pipe(composed()))
        assert a == b
        assert a[1][0][0] is ProtocolError
        assert sum(isinstance(c, ErrorContent) for c in flat(a[0])) == 1
        out, errors = run(updates, composed(), ops.aggregate())
        assert out == []
        assert isinstance(errors[0], ProtocolError)
        assert errors[0].partial is not None
        assert errors[0].partial.interrupted
    # an empty fragment after the finish (vLLM) is nothing
    updates = [
        D(0, id="a", name="f", arguments_delta="{}"),
        u.Finish(FinishReason.TOOL_CALLS),
        D(0, arguments_delta=""),
    ]
    assert aggregated(updates, composed()).tool_calls == (ToolCall("a", "f", {}),)


def test_every_update_variant_from_a_hand_built_list() -> None:
    usage = Usage(3, 4, 7)
    updates = [
        u.ResponseMetadata("r", "m"),
        u.ReasoningDelta("think"),
        u.TextDelta("see "),
        u.Uri("https://e.x/a", "text/html"),
        u.ToolCallDelta(0, id="d", name="legacy", arguments_delta='{"a": 1}'),
        u.ToolCallStart("s", "modern"),
        u.ToolCallArgs("s", '{"b": "xy"}'),
        u.ToolCallEnd("s"),
        u.ToolApprovalRequest("s", "modern", {"b": "xy"}, "desc"),
        u.ToolCalled("srv", result="server ran"),
        u.Usage(usage),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    a = observe(reactivex.from_iterable(updates).pipe(ops.convert()))
    b = observe(reactivex.from_iterable(updates).pipe(composed()))
    assert a == b
    contents = flat(a[0])
    meta = ResponseMetadata("r", "m")
    assert UriContent("https://e.x/a", "text/html", meta=meta) in contents
    assert ToolCalledContent("srv", "server ran", meta=meta) in contents
    assert [type(e) for r in a[0] for e in r.events] == [
        ResponseStartedEvent,
        ToolApprovalRequestEvent,
        FinishEvent,
    ]
    assert [c.call_id for c in contents if isinstance(c, ToolCallingContent)] == ["d", "s"]
    response = aggregated(updates, composed())
    assert response.text == "see "
    assert response.reasoning_text == "think"
    assert response.usage == usage
    assert [c.id for c in response.tool_calls] == ["d", "s"]  # start order
    assert [m.tool_call_id for m in response.tool_messages] == ["srv"]


def test_error_update_one_error_content_then_provider_error() -> None:
    updates = [u.TextDelta("kept"), u.Error("overloaded")]
    a = observe(reactivex.from_iterable(updates).pipe(ops.convert()))
    assert a == observe(reactivex.from_iterable(updates).pipe(composed()))
    assert a[1] == [(ProviderError, "overloaded")]
    assert [type(c) for c in flat(a[0])] == [TextContent, ErrorContent]
    _out, errors = run(updates, composed(), ops.aggregate())
    assert isinstance(errors[0], ProviderError)
    assert errors[0].partial is not None
    assert errors[0].partial.text == "kept"
    assert errors[0].partial.finish_reason is FinishReason.ERROR


@pytest.mark.parametrize(
    "error", [ProviderError("boom"), ConnectionResetError("reset")], ids=["rafrx", "other"]
)
def test_a_source_that_fails_at_once(error: Exception) -> None:
    assert observe(reactivex.throw(error).pipe(ops.split_legacy_delta()))[0] == []
    for make in (lambda: ops.convert(), lambda: composed(), lambda: ops.accumulate_tool_calls()):
        items, errors, _ = observe(reactivex.throw(error).pipe(make()))
        assert [c.message for c in flat(items)] == [str(error)]
        assert errors == [(type(error), str(error))]
    got: list[Exception] = []
    reactivex.throw(error).pipe(composed(), ops.aggregate()).subscribe(
        lambda _: pytest.fail("no response"), got.append
    )
    assert got == [error]
    assert got[0] is error
    if isinstance(error, RafrxError):
        assert error.partial is not None
        assert error.partial.interrupted
        assert error.partial.text == ""
        assert error.partial.tool_calls == ()


def test_a_source_that_completes_empty() -> None:
    for make in (ops.split_legacy_delta, ops.convert, composed, ops.accumulate_tool_calls):
        assert observe(reactivex.empty().pipe(make())) == ([], [], True)
    for make2 in (ops.parse_args_stream, ops.flush_tool_calls):
        assert observe(reactivex.empty().pipe(make2())) == ([], [], True)
    response = reactivex.empty().pipe(composed(), ops.aggregate()).run()
    assert (response.text, response.tool_calls, response.turn_transcript) == ("", (), ())
    assert response.usage is None
    assert response.finish_reason is None


def test_two_llm_calls_each_start_and_finish_and_usage_is_summed() -> None:
    updates = [
        u.ResponseMetadata("r1", "m"),
        u.TextDelta("a"),
        u.Finish(FinishReason.STOP, Usage(1, 1, 2)),
        u.ResponseMetadata("r2", "m"),
        u.TextDelta("b"),
        u.Usage(Usage(2, 2, 4)),
        u.Finish(FinishReason.STOP),
    ]
    out, _ = run(updates, composed())
    events = [e for r in out for e in r.events]
    assert events == [
        ResponseStartedEvent("r1", "m"),
        FinishEvent(FinishReason.STOP, Usage(1, 1, 2)),
        ResponseStartedEvent("r2", "m"),
        FinishEvent(FinishReason.STOP),
    ]
    response = aggregated(updates, composed())
    assert response.usage == Usage(3, 3, 6)
    assert response.turn_transcript == (
        ChatMessage(MessageRole.ASSISTANT, "a"),
        ChatMessage(MessageRole.ASSISTANT, "b"),
    )


TWO_CALLS_WITH_TOOLS = [
    u.ResponseMetadata("r1", "m"),
    u.TextDelta("looking"),
    D(0, id="a", name="f", arguments_delta='{"x": 1}'),
    u.Finish(FinishReason.TOOL_CALLS),
    u.ResponseMetadata("r2", "m"),
    u.TextDelta("done"),
    u.Finish(FinishReason.STOP),
]
EXPECTED_TRANSCRIPT = (
    ChatMessage.assistant_with_tools("looking", [ToolCall("a", "f", {"x": 1})]),
    ChatMessage(MessageRole.ASSISTANT, "done"),
)


def test_two_llm_calls_eager_transcript_puts_the_call_in_its_step() -> None:
    assert aggregated(TWO_CALLS_WITH_TOOLS, composed(True)).turn_transcript == EXPECTED_TRANSCRIPT
    # convert() applied per LLM call and concatenated (what the agent does) agrees
    per_call = (
        reactivex.concat(
            reactivex.from_iterable(TWO_CALLS_WITH_TOOLS[:4]).pipe(ops.convert()),
            reactivex.from_iterable(TWO_CALLS_WITH_TOOLS[4:]).pipe(ops.convert()),
        )
        .pipe(ops.aggregate())
        .run()
    )
    assert per_call.turn_transcript == EXPECTED_TRANSCRIPT


@pytest.mark.parametrize("make", [ops.convert, composed], ids=["convert", "composed"])
def test_two_llm_calls_lazy_flush_transcript_puts_the_call_in_its_step(make: Any) -> None:
    response = aggregated(TWO_CALLS_WITH_TOOLS, make())
    assert response.tool_calls == (ToolCall("a", "f", {"x": 1}),)
    assert response.turn_transcript == EXPECTED_TRANSCRIPT


@settings(max_examples=60, deadline=None)
@given(first=llm_calls(), second=llm_calls(), data=st.data())
def test_two_generated_llm_calls_eager_aggregate_to_both_plans(
    first: LLMCall, second: LLMCall, data: st.DataObject
) -> None:
    def message(call: LLMCall) -> ChatMessage | None:
        calls = [ToolCall(c.id, c.name, c.arguments) for c in call.calls]
        if not (call.text or call.reasoning or calls):
            return None
        return ChatMessage(
            MessageRole.ASSISTANT,
            call.text,
            tool_calls=calls or None,
            reasoning=call.reasoning or None,
        )

    response = aggregated(_two_calls(data, first, second), composed(True))
    one = message(first)
    expected = [*([one] if one else []), message(second) or ChatMessage(MessageRole.ASSISTANT, "")]
    assert list(response.turn_transcript) == expected
    assert response.text == first.text + second.text
    usages = [c.usage for c in (first, second) if c.usage is not None]
    assert response.usage == (None if not usages else sum(usages[1:], usages[0]))
    assert response.finish_reason is second.finish_reason


def test_eager_flush_reports_a_cut_call_whose_id_comes_back_in_the_next_llm_call() -> None:
    updates = [
        u.ToolCallStart("a", "f"),
        u.ToolCallArgs("a", '{"x": '),
        u.Finish(FinishReason.LENGTH),
        u.ToolCallStart("a", "f"),
        u.ToolCallArgs("a", "{}"),
        u.ToolCallEnd("a"),
        u.Finish(FinishReason.STOP),
    ]

    def flushed(eager: bool) -> list[str]:
        out, errors = run(updates, composed(eager))
        assert errors == []
        return [
            type(c).__name__
            for c in flat(out)
            if isinstance(c, ToolCallingContent | ToolCallIncompleteContent)
        ]

    assert sorted(flushed(False)) == ["ToolCallIncompleteContent", "ToolCallingContent"]
    assert sorted(flushed(True)) == sorted(flushed(False))


def test_flush_applied_after_convert_hands_each_call_over_once() -> None:
    updates = [
        D(0, id="a", name="f", arguments_delta="{}"),
        D(1, id="b", name="g", arguments_delta='{"k": 1}'),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    for e1, e2 in itertools.product([False, True], repeat=2):
        out, _ = run(updates, ops.convert(e1), ops.flush_tool_calls(e2))
        assert sorted(c.call_id for c in flat(out) if isinstance(c, ToolCallingContent)) == [
            "a",
            "b",
        ]


# ================================================================ 4. aggregate / execute_tools


def _tools() -> tuple[Any, list[int], list[int]]:
    started: list[int] = []
    finished: list[int] = []

    @tool
    async def slow(x: int) -> int:
        """Wait x ticks."""
        started.append(x)
        await asyncio.sleep(0.02 * x)
        finished.append(x)
        return x * 10

    return slow, started, finished


TOOL_TURN = [
    u.ResponseMetadata("r1", "m"),
    u.TextDelta("t1"),
    D(0, id="a", name="slow", arguments_delta='{"x": 3}'),
    D(1, id="b", name="slow", arguments_delta='{"x": 1}'),
    u.Finish(FinishReason.TOOL_CALLS, Usage(1, 2, 3)),
]


def _tool_transcript(response: AgentResponse) -> list[tuple[str, str, str | None]]:
    return [(m.role.value, m.content, m.tool_call_id) for m in response.turn_transcript]


EXPECTED_TOOL_TRANSCRIPT = [("assistant", "t1", None), ("tool", "30", "a"), ("tool", "10", "b")]


@pytest.mark.asyncio
@pytest.mark.parametrize("eager", [False, True])
async def test_execute_tools_in_a_user_chain_and_resubscribed(
    no_task_leak: None, eager: bool
) -> None:
    slow, started, _ = _tools()
    chain = reactivex.from_iterable(TOOL_TURN).pipe(composed(eager), ops.execute_tools([slow]))
    first = await rafrx.collect_agent_response(chain)
    second = await rafrx.collect_agent_response(chain)  # cold: the tools run again
    assert first == second
    assert _tool_transcript(first) == EXPECTED_TOOL_TRANSCRIPT  # start order, not finish order
    assert first.turn_transcript[0].tool_calls == (
        ToolCall("a", "slow", {"x": 3}),
        ToolCall("b", "slow", {"x": 1}),
    )
    assert sorted(started) == [1, 1, 3, 3]


@pytest.mark.asyncio
async def test_execute_tools_shared_runs_each_tool_once_for_every_subscriber(
    no_task_leak: None,
) -> None:
    slow, started, _ = _tools()
    shared = timed(TOOL_TURN).pipe(ops.convert(), ops.execute_tools([slow]), rx.share())
    seen: list[R] = []
    shared.subscribe(seen.append)
    response = await rafrx.collect_agent_response(shared)
    assert _tool_transcript(response) == EXPECTED_TOOL_TRANSCRIPT
    assert sorted(started) == [1, 3]
    assert [c.call_id for c in flat(seen) if isinstance(c, ToolCalledContent)] == ["b", "a"]


@pytest.mark.asyncio
async def test_execute_tools_replayed_to_a_late_subscriber(no_task_leak: None) -> None:
    slow, started, _ = _tools()
    direct = await rafrx.collect_agent_response(
        timed(TOOL_TURN).pipe(ops.convert(eager=True), ops.execute_tools([slow]))
    )
    replayed = timed(TOOL_TURN).pipe(
        ops.convert(eager=True), ops.execute_tools([slow]), rx.replay()
    )
    ended = asyncio.Event()
    replayed.subscribe(on_completed=ended.set)
    connection = replayed.connect()
    await asyncio.wait_for(ended.wait(), 10)
    late = await rafrx.collect_agent_response(replayed)
    connection.dispose()
    assert late == direct
    assert sorted(started) == [1, 1, 3, 3]


@pytest.mark.asyncio
async def test_take_until_disposes_the_running_tools(no_task_leak: None) -> None:
    slow, started, finished = _tools()
    stop: Subject[bool] = Subject()
    loop = asyncio.get_running_loop()

    def on_result(result: R) -> None:  # stop once b's result went by (a still runs)
        if any(isinstance(c, ToolCalledContent) and c.call_id == "b" for c in result.contents):
            loop.call_soon(stop.on_next, True)

    response = await rafrx.collect_agent_response(
        timed(TOOL_TURN).pipe(
            ops.convert(), ops.execute_tools([slow]), rx.do_action(on_result), rx.take_until(stop)
        )
    )
    await asyncio.sleep(0.1)
    assert sorted(started) == [1, 3]
    assert finished == [1]  # a was cancelled, never finished
    assert [m.tool_call_id for m in response.tool_messages] == ["b"]
    assert [c.id for c in response.tool_calls] == ["a", "b"]


@pytest.mark.asyncio
async def test_eager_tool_results_arriving_in_the_next_llm_call_stay_in_their_step(
    no_task_leak: None,
) -> None:
    slow, _, _ = _tools()
    turn = [
        *TOOL_TURN,
        u.ResponseMetadata("r2", "m"),
        u.TextDelta("t2"),
        D(0, id="c", name="slow", arguments_delta='{"x": 1}'),
        u.Finish(FinishReason.TOOL_CALLS, Usage(1, 2, 3)),
        u.ResponseMetadata("r3", "m"),
        u.TextDelta("final"),
        u.Finish(FinishReason.STOP),
    ]
    response = await rafrx.collect_agent_response(
        timed(turn).pipe(composed(True), ops.execute_tools([slow]))
    )
    assert _tool_transcript(response) == [
        *EXPECTED_TOOL_TRANSCRIPT,
        ("assistant", "t2", None),
        ("tool", "10", "c"),
        ("assistant", "final", None),
    ]
    assert response.usage == Usage(2, 4, 6)
    assert response.text == "t1t2final"


@pytest.mark.asyncio
async def test_collect_agent_response_reraises_with_the_partial(no_task_leak: None) -> None:
    error = ProviderError("overloaded")
    source = reactivex.concat(reactivex.from_iterable(TOOL_TURN[:3]), reactivex.throw(error))
    with pytest.raises(ProviderError) as caught:
        await rafrx.collect_agent_response(source.pipe(composed()))
    assert caught.value is error
    partial = caught.value.partial
    assert partial is not None
    assert partial.text == "t1"
    assert [(c.id, c.complete) for c in partial.tool_calls] == [("a", False)]
