"""Fidelity of rafrx.testing.LLMServer judged by the official ``openai`` and
``anthropic`` SDKs.

Every test points an official SDK client at a local LLMServer (``base_url`` is
always the local server: nothing reaches the network), lets the SDK's own
streaming helpers parse what the server sends, and checks that they rebuild
exactly what the :class:`~rafrx.testing.Reply` scripted, with the values and
shapes the real provider uses (the SDK types are the reference: a real
provider's payload validates against them). The one deliberate departure is
chat ``finish_reason: "error"`` (and the ``"other"`` probe), which OpenAI-compatible
servers send but OpenAI does not.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pydantic
import pytest
from anthropic.types import RawMessageStreamEvent, StopReason
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from rafrx.response import FinishReason, Usage
from rafrx.testing import Fault, LLMServer, RecordedRequest, Reply, ToolCallSpec

# ------------------------------------------------------------------ fixtures

USER = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def thread_server() -> Iterator[LLMServer]:
    """One server in a background thread for the module's sync SDK tests."""
    with LLMServer.in_thread() as server:
        yield server


@pytest.fixture
def server(thread_server: LLMServer) -> Iterator[LLMServer]:
    """The module's server with an empty queue, no script and no recorded requests."""
    thread_server.reset()
    yield thread_server
    thread_server.reset()


class _Capture:
    """What the SDK put on the wire (httpx request hook)."""

    def __init__(self) -> None:
        self.requests: list[Any] = []  # httpx2.Request

    def __call__(self, request: Any) -> None:
        request.read()
        self.requests.append(request)


@pytest.fixture
def sent() -> _Capture:
    return _Capture()


@pytest.fixture
def oai(server: LLMServer, sent: _Capture) -> Iterator[openai.OpenAI]:
    """An official OpenAI client on the local server (no retries)."""
    http = httpx2.Client(event_hooks={"request": [sent]})  # (the SDKs' HTTP library)
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="sk-test-key", max_retries=0, http_client=http
    ) as client:
        yield client


@pytest.fixture
def ant(server: LLMServer, sent: _Capture) -> Iterator[anthropic.Anthropic]:
    """An official Anthropic client on the local server (no retries)."""
    http = httpx2.Client(event_hooks={"request": [sent]})
    with anthropic.Anthropic(
        base_url=server.url, api_key="sk-ant-test-key", max_retries=0, http_client=http
    ) as client:
        yield client


# ------------------------------------------------------------------ helpers


def chat_final(client: openai.OpenAI, **kwargs: Any) -> tuple[Any, list[Any]]:
    """Stream with ``client.chat.completions.stream`` and return (final completion, events)."""
    kwargs.setdefault("model", "gpt-test")
    kwargs.setdefault("messages", USER)
    with client.chat.completions.stream(**kwargs) as stream:
        events = list(stream)
        return stream.get_final_completion(), events


def messages_final(client: anthropic.Anthropic, **kwargs: Any) -> tuple[Any, list[Any]]:
    """Stream with ``client.messages.stream`` and return (final message, events)."""
    kwargs.setdefault("model", "claude-test")
    kwargs.setdefault("max_tokens", 1024)
    kwargs.setdefault("messages", USER)
    with client.messages.stream(**kwargs) as stream:
        events = list(stream)
        return stream.get_final_message(), events


def responses_events(client: openai.OpenAI, **kwargs: Any) -> list[Any]:
    """The events ``client.responses.stream`` yields (whatever the terminal event)."""
    kwargs.setdefault("model", "gpt-test")
    kwargs.setdefault("input", "Weather in Paris?")
    with client.responses.stream(**kwargs) as stream:
        return list(stream)


def responses_final(client: openai.OpenAI, **kwargs: Any) -> tuple[Any, list[Any]]:
    """Stream with ``client.responses.stream`` and return (final response, events)."""
    kwargs.setdefault("model", "gpt-test")
    kwargs.setdefault("input", "Weather in Paris?")
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        return stream.get_final_response(), events


def chat_raw_chunks(client: openai.OpenAI, **kwargs: Any) -> list[dict[str, Any]]:
    """The raw JSON of each chunk (``create(stream=True)``), for strict type validation."""
    kwargs.setdefault("model", "gpt-test")
    kwargs.setdefault("messages", USER)
    return [c.to_dict() for c in client.chat.completions.create(stream=True, **kwargs)]


WEIRD = (
    "e\u0301 👩\u200d👩\u200d👧 \u202eRTL\u202c 中文 \x00nul \u2028ls\u2029ps \r\ncrlf\r"
    '\ndata: [DONE]\n\nevent: ping\n\ufeffbom \U0001d54f\U0010ffff \\u00e9 "q" \t'
)

FULL = Reply(
    text="Il fait beau à Paris ☀️ — 晴れ.",
    reasoning="L'utilisateur veut la météo; j'appelle l'outil. 🤔",
    tool_calls=[
        ToolCallSpec("get_weather", {"city": "Paris", "unit": "°C", "emoji": "🌦"}, id="call_A1"),
        ToolCallSpec("get_time", {"tz": "Europe/Paris", "nested": {"a": [1, 2.5, None, True]}}),
        ToolCallSpec("no_args", {}, id="call_C3"),
    ],
    usage=Usage(
        prompt_tokens=123,
        completion_tokens=45,
        total_tokens=168,
        reasoning_tokens=17,
        cached_tokens=100,
    ),
    model="served-model-x",
)


# ================================================================== OpenAI chat


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_chat_stream_rebuilds_full_reply(
    server: LLMServer, oai: openai.OpenAI, chunk_size: int
) -> None:
    """chat.completions.stream() rebuilds text, DeepSeek reasoning, 3 parallel calls
    (ids, names, arguments), usage incl. cached/reasoning tokens, finish reason and model."""
    reply = Reply(**{**_fields(FULL), "chunk_size": chunk_size})
    server.enqueue(reply)
    final, _ = chat_final(oai, stream_options={"include_usage": True})
    [choice] = final.choices
    message = choice.message
    assert message.content == reply.text
    assert message.model_extra.get("reasoning_content") == reply.reasoning
    calls = message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time", "no_args"]
    assert calls[0].id == "call_A1"
    assert calls[2].id == "call_C3"
    assert calls[1].id.startswith("call_")
    assert len({c.id for c in calls}) == 3
    assert [json.loads(c.function.arguments) for c in calls] == [
        dict(c.arguments) for c in reply.tool_calls
    ]
    assert choice.finish_reason == "tool_calls"
    assert final.model == "served-model-x"
    usage = final.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (123, 45, 168)
    assert usage.prompt_tokens_details.cached_tokens == 100
    assert usage.completion_tokens_details.reasoning_tokens == 17


def test_chat_stream_helper_events(server: LLMServer, oai: openai.OpenAI) -> None:
    """The helper's high-level events (content.delta/done, arguments.delta/done) add up."""
    server.enqueue(
        Reply(text="Hello there", tool_calls=[ToolCallSpec("f", {"x": "é"})], chunk_size=2)
    )
    _, events = chat_final(oai)
    deltas = "".join(e.delta for e in events if e.type == "content.delta")
    assert deltas == "Hello there"
    [done] = [e for e in events if e.type == "content.done"]
    assert done.content == "Hello there"
    [args_done] = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert (args_done.name, args_done.index, args_done.arguments) == ("f", 0, '{"x":"é"}')
    arg_deltas = "".join(
        e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta"
    )
    assert arg_deltas == '{"x":"é"}'


def test_chat_no_usage_unless_requested(server: LLMServer, oai: openai.OpenAI) -> None:
    """Without stream_options.include_usage OpenAI sends no usage chunk; with it, one
    chunk with choices=[] carries it (and every chunk has usage: null before)."""
    server.enqueue(Reply(text="hi"), Reply(text="hi"))
    final, _ = chat_final(oai)
    assert final.usage is None
    chunks = chat_raw_chunks(oai, stream_options={"include_usage": True})
    assert [c["choices"] for c in chunks[-1:]] == [[]]
    assert chunks[-1]["usage"]["total_tokens"] >= 2
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])


@pytest.mark.parametrize("finish", ["stop", "length", "tool_calls", "content_filter"])
def test_chat_chunks_validate_against_sdk_types(
    server: LLMServer, oai: openai.OpenAI, finish: str
) -> None:
    """Every chunk validates strictly as openai.types.chat.ChatCompletionChunk."""
    server.enqueue(
        Reply(text="a", reasoning="b", tool_calls=[ToolCallSpec("f", {"k": 1})], finish=finish)
    )
    for chunk in chat_raw_chunks(oai, stream_options={"include_usage": True}):
        ChatCompletionChunk.model_validate(chunk)


def test_chat_length_and_content_filter_surface_like_the_real_api(
    server: LLMServer, oai: openai.OpenAI
) -> None:
    """finish_reason length / content_filter: get_final_completion() raises the SDK's
    LengthFinishReasonError / ContentFilterFinishReasonError, carrying the partial text."""
    server.enqueue(Reply(text="truncated…", finish="length"))
    with pytest.raises(openai.LengthFinishReasonError) as info:
        chat_final(oai, stream_options={"include_usage": True})
    assert info.value.completion.choices[0].message.content == "truncated…"
    assert info.value.completion.choices[0].finish_reason == "length"
    server.enqueue(Reply(text="no", finish=FinishReason.CONTENT_FILTER))
    with pytest.raises(openai.ContentFilterFinishReasonError):
        chat_final(oai)


@pytest.mark.parametrize(("finish", "wire"), [(FinishReason.ERROR, "error"), ("other", "other")])
def test_chat_compatible_server_finish_reasons(
    server: LLMServer, oai: openai.OpenAI, finish: FinishReason | str, wire: str
) -> None:
    """FinishReason.ERROR sends finish_reason "error" as OpenRouter and other
    OpenAI-compatible servers do (OpenAI itself never does), and OTHER the undocumented
    "other" (a probe). Nothing else departs from ChatCompletionChunk: with that one
    value set to an OpenAI one, every chunk validates strictly."""
    server.enqueue(Reply(text="partial", finish=finish))
    chunks = chat_raw_chunks(oai, stream_options={"include_usage": True})
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == wire
    assert all(f is None for f in finishes[:-1])
    for chunk in chunks:
        for choice in chunk["choices"]:
            if choice["finish_reason"] == wire:
                choice["finish_reason"] = "stop"
        ChatCompletionChunk.model_validate(chunk)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "partial"


def test_chat_tool_only_message_content_is_null(server: LLMServer, oai: openai.OpenAI) -> None:
    """For a reply with only tool calls, OpenAI's first delta is
    {"role":"assistant","content":null,...} and the assembled message has content None;
    a text reply's first delta has content "" (and reasoning alone does not change that)."""
    server.enqueue(Reply(tool_calls=[ToolCallSpec("f", {"a": 1})]))
    final, _ = chat_final(oai)
    assert final.choices[0].message.tool_calls[0].function.name == "f"
    assert final.choices[0].message.content is None
    server.enqueue(Reply(reasoning="hmm", tool_calls=[ToolCallSpec("f", {"a": 1})]))
    first = chat_raw_chunks(oai)[0]["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": None, "refusal": None}
    server.enqueue(Reply(text="hi", tool_calls=[ToolCallSpec("f", {"a": 1})]))
    first = chat_raw_chunks(oai)[0]["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": "", "refusal": None}


def test_chat_large_parallel_non_ascii_arguments(server: LLMServer, oai: openai.OpenAI) -> None:
    """Several large parallel calls with non-ASCII / astral / escaped arguments survive."""
    big = {"blob": "ü" * 20000 + "😀" * 500 + WEIRD, "n": list(range(500))}
    calls = [ToolCallSpec(f"tool_{i}", {**big, "i": i}, id=f"call_{i}") for i in range(4)]
    server.enqueue(Reply(tool_calls=calls, chunk_size=97))
    final, _ = chat_final(oai)
    got = final.choices[0].message.tool_calls
    assert [(c.id, c.function.name) for c in got] == [(c.id, c.name) for c in calls]
    assert [json.loads(c.function.arguments) for c in got] == [dict(c.arguments) for c in calls]


def test_chat_unicode_edge_cases_chunk_size_one(server: LLMServer, oai: openai.OpenAI) -> None:
    """Combining marks, ZWJ emoji, bidi controls, NUL, U+2028, CR/LF, fake SSE lines and
    astral code points in text and arguments, one code point per delta."""
    server.enqueue(
        Reply(
            text=WEIRD, reasoning=WEIRD, tool_calls=[ToolCallSpec("f", {"w": WEIRD})], chunk_size=1
        )
    )
    final, _ = chat_final(oai)
    message = final.choices[0].message
    assert message.content == WEIRD
    assert message.model_extra["reasoning_content"] == WEIRD
    assert json.loads(message.tool_calls[0].function.arguments) == {"w": WEIRD}


def test_chat_model_defaults_to_request_model(server: LLMServer, oai: openai.OpenAI) -> None:
    """Without Reply.model the response reports the requested model."""
    server.enqueue(Reply(text="x"))
    final, _ = chat_final(oai, model="my-requested-model")
    assert final.model == "my-requested-model"


# ================================================================== Anthropic


@pytest.mark.parametrize("chunk_size", [1, 5, 64])
def test_anthropic_stream_rebuilds_full_reply(
    server: LLMServer, ant: anthropic.Anthropic, chunk_size: int
) -> None:
    """messages.stream() rebuilds thinking (+signature), text, 3 tool_use blocks (ids,
    names, input), stop_reason, model and usage (input excludes cache reads)."""
    server.enqueue(Reply(**{**_fields(FULL), "chunk_size": chunk_size}))
    final, events = messages_final(ant)
    kinds = [b.type for b in final.content]
    assert kinds == ["thinking", "text", "tool_use", "tool_use", "tool_use"]
    assert final.content[0].thinking == FULL.reasoning
    assert final.content[0].signature
    assert final.content[1].text == FULL.text
    uses = final.content[2:]
    assert [u.name for u in uses] == ["get_weather", "get_time", "no_args"]
    assert uses[0].id == "call_A1"
    assert uses[1].id.startswith("toolu_")
    assert [u.input for u in uses] == [dict(c.arguments) for c in FULL.tool_calls]
    assert final.stop_reason == "tool_use"
    assert final.model == "served-model-x"
    assert final.usage.input_tokens == 23
    assert final.usage.cache_read_input_tokens == 100
    assert final.usage.output_tokens == 45
    text_events = "".join(e.text for e in events if e.type == "text")
    assert text_events == FULL.text
    thinking_events = "".join(e.thinking for e in events if e.type == "thinking")
    assert thinking_events == FULL.reasoning


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        (FinishReason.STOP, "end_turn"),
        (FinishReason.LENGTH, "max_tokens"),
        (FinishReason.TOOL_CALLS, "tool_use"),
        (FinishReason.CONTENT_FILTER, "refusal"),
    ],
)
def test_anthropic_stop_reasons(
    server: LLMServer, ant: anthropic.Anthropic, finish: FinishReason, stop_reason: str
) -> None:
    """Each finish reason arrives as the real Anthropic stop_reason."""
    server.enqueue(Reply(text="t", finish=finish))
    final, _ = messages_final(ant)
    assert final.stop_reason == stop_reason
    assert final.stop_reason in typing.get_args(StopReason)


def test_anthropic_events_validate_against_sdk_types(
    server: LLMServer, ant: anthropic.Anthropic
) -> None:
    """Every raw event (but ping, which the SDK handles apart) validates strictly as
    anthropic.types.RawMessageStreamEvent."""
    adapter = pydantic.TypeAdapter(RawMessageStreamEvent)
    server.enqueue(Reply(text="a", reasoning="b", tool_calls=[ToolCallSpec("f", {"k": "ü"})]))
    raw = ant.messages.create(model="c", max_tokens=9, messages=USER, stream=True)
    with raw:
        for event in raw:
            adapter.validate_python(event.to_dict())


def test_anthropic_error_finish_is_an_error_event(
    server: LLMServer, ant: anthropic.Anthropic
) -> None:
    """Reply(finish=ERROR) on /v1/messages ends, after the partial content, with
    Anthropic's mid-stream failure: ``event: error`` / {"type":"error","error":
    {"type":"api_error",...}} and no message_delta / message_stop. The SDK raises it
    as an APIStatusError carrying that body, after the partial text was delivered."""
    server.enqueue(Reply(text="partial", finish=FinishReason.ERROR, chunk_size=3))
    texts: list[str] = []

    def read() -> None:
        with ant.messages.stream(model="c", max_tokens=9, messages=USER) as stream:
            for event in stream:
                assert event.type != "message_stop"
                if event.type == "text":
                    texts.append(event.text)

    with pytest.raises(anthropic.APIStatusError) as info:
        read()
    assert "".join(texts) == "partial"
    assert info.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "Internal server error"},
    }


def test_anthropic_large_parallel_and_unicode(server: LLMServer, ant: anthropic.Anthropic) -> None:
    """Large, non-ASCII, parallel tool inputs and odd Unicode text survive the SDK."""
    big = {"blob": "ß" * 15000 + "🦀" * 300 + WEIRD, "list": list(range(300))}
    calls = [ToolCallSpec(f"t{i}", {**big, "i": i}) for i in range(3)]
    server.enqueue(Reply(text=WEIRD, tool_calls=calls, chunk_size=101))
    final, _ = messages_final(ant)
    assert final.content[0].text == WEIRD
    assert [b.input for b in final.content[1:]] == [dict(c.arguments) for c in calls]
    server.enqueue(
        Reply(
            text=WEIRD, reasoning=WEIRD, tool_calls=[ToolCallSpec("f", {"w": WEIRD})], chunk_size=1
        )
    )
    final, _ = messages_final(ant)
    assert [final.content[0].thinking, final.content[1].text] == [WEIRD, WEIRD]
    assert final.content[2].input == {"w": WEIRD}


def test_anthropic_beta_stream_and_text_stream(server: LLMServer, ant: anthropic.Anthropic) -> None:
    """beta.messages.stream() (path /v1/messages?beta=true) and text_stream work too."""
    server.enqueue(Reply(text="beta ok"))
    with ant.beta.messages.stream(model="c", max_tokens=9, messages=USER) as stream:
        assert "".join(stream.text_stream) == "beta ok"
    server.enqueue(Reply(text="plain ok", chunk_size=1))
    with ant.messages.stream(model="c", max_tokens=9, messages=USER) as stream:
        assert "".join(stream.text_stream) == "plain ok"
    assert server.requests[0].path == "/v1/messages"


def test_anthropic_stream_request_id(server: LLMServer, ant: anthropic.Anthropic) -> None:
    """Anthropic sends its request id in the ``request-id`` header, which
    MessageStream.request_id reads."""
    server.enqueue(Reply(text="x"))
    with ant.messages.stream(model="c", max_tokens=9, messages=USER) as stream:
        stream.until_done()
        assert stream.request_id is not None
        assert stream.request_id.startswith("req_")


# ================================================================== OpenAI Responses


@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_responses_stream_rebuilds_full_reply(
    server: LLMServer, oai: openai.OpenAI, chunk_size: int
) -> None:
    """responses.stream() rebuilds the reasoning summary, output text, 3 function calls
    (call_id, name, arguments), usage incl. cached/reasoning tokens, status and model."""
    server.enqueue(Reply(**{**_fields(FULL), "chunk_size": chunk_size}))
    final, events = responses_final(oai)
    kinds = [item.type for item in final.output]
    assert kinds == ["reasoning", "message", "function_call", "function_call", "function_call"]
    assert final.output[0].summary[0].text == FULL.reasoning
    assert final.output_text == FULL.text
    calls = final.output[2:]
    assert [c.name for c in calls] == ["get_weather", "get_time", "no_args"]
    assert calls[0].call_id == "call_A1"
    assert [json.loads(c.arguments) for c in calls] == [dict(c.arguments) for c in FULL.tool_calls]
    assert final.status == "completed"
    assert final.model == "served-model-x"
    usage = final.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (123, 45, 168)
    assert usage.input_tokens_details.cached_tokens == 100
    assert usage.output_tokens_details.reasoning_tokens == 17
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == FULL.text
    seq = [e.sequence_number for e in events]
    assert seq == list(range(len(seq)))


@pytest.mark.parametrize(
    "finish", [None, FinishReason.LENGTH, FinishReason.CONTENT_FILTER, FinishReason.ERROR]
)
def test_responses_events_validate_against_sdk_types(
    server: LLMServer, oai: openai.OpenAI, finish: FinishReason | None
) -> None:
    """Every event, whatever the terminal one (completed, incomplete, failed), validates
    strictly as openai.types.responses.ResponseStreamEvent: the Response objects carry
    the required ``tools`` and ``tool_choice`` and the usage its token details."""
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}
    server.enqueue(
        Reply(text="a", reasoning="r", tool_calls=[ToolCallSpec("f", {"k": 1})], finish=finish)
    )
    with oai.responses.create(model="m", input="x", tools=[tool], stream=True) as raw:
        payloads = [event.to_dict() for event in raw]
    for payload in payloads:
        adapter.validate_python(payload)
    for payload in payloads:
        if "response" in payload:
            Response.model_validate(payload["response"])
            assert payload["response"]["tools"] == [tool]


def test_responses_usage_details_always_present(server: LLMServer, oai: openai.OpenAI) -> None:
    """ResponseUsage.input_tokens_details / output_tokens_details are required in the
    SDK and always sent by OpenAI: {"cached_tokens": 0, ...}, {"reasoning_tokens": 0}
    when the reply has no cached or reasoning tokens."""
    server.enqueue(
        Reply(text="plain", usage=Usage(prompt_tokens=5, completion_tokens=2, total_tokens=7))
    )
    final, _ = responses_final(oai)
    assert final.usage.input_tokens == 5
    assert final.usage.input_tokens_details is not None
    assert final.usage.input_tokens_details.cached_tokens == 0
    assert final.usage.output_tokens_details is not None
    assert final.usage.output_tokens_details.reasoning_tokens == 0


def test_responses_echo_tools_and_tool_choice(server: LLMServer, oai: openai.OpenAI) -> None:
    """The Response object echoes the request's ``tools`` (as sent) and ``tool_choice``
    ("auto" when the request has none), both required in openai.types.responses.Response."""
    tool = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object"},
        "strict": False,
    }
    server.enqueue(Reply(tool_calls=[ToolCallSpec("get_weather", {})]))
    final, _ = responses_final(oai, tools=[tool])
    assert final.tool_choice == "auto"
    assert [t.name for t in final.tools] == ["get_weather"]
    server.enqueue(Reply(tool_calls=[ToolCallSpec("get_weather", {})]))
    choice = {"type": "function", "name": "get_weather"}
    final, _ = responses_final(oai, tools=[tool], tool_choice=choice)
    assert final.tool_choice.to_dict() == choice
    server.enqueue(Reply(text="no tools"))
    final, _ = responses_final(oai)
    assert (final.tools, final.tool_choice) == ([], "auto")


@pytest.mark.parametrize(
    ("finish", "terminal", "status", "reason"),
    [
        (FinishReason.LENGTH, "response.incomplete", "incomplete", "max_output_tokens"),
        (FinishReason.CONTENT_FILTER, "response.incomplete", "incomplete", "content_filter"),
        (FinishReason.ERROR, "response.failed", "failed", None),
        (FinishReason.STOP, "response.completed", "completed", None),
    ],
)
def test_responses_terminal_events(
    server: LLMServer,
    oai: openai.OpenAI,
    finish: FinishReason,
    terminal: str,
    status: str,
    reason: str | None,
) -> None:
    """length/content filter end with response.incomplete (incomplete_details.reason),
    error with response.failed (error object), as the real API; the SDK parses them and
    keeps the partial output text."""
    server.enqueue(Reply(text="partial text", finish=finish, chunk_size=3))
    events = responses_events(oai)
    last = events[-1]
    assert last.type == terminal
    assert last.response.status == status
    if reason is not None:
        assert last.response.incomplete_details.reason == reason
    if status == "failed":
        assert last.response.error.code == "server_error"
        assert last.response.error.message
    assert last.response.output[0].content[0].text == "partial text"


def test_responses_unicode_chunk_size_one(server: LLMServer, oai: openai.OpenAI) -> None:
    """Odd Unicode in reasoning, text and arguments, one code point per delta."""
    server.enqueue(
        Reply(
            text=WEIRD, reasoning=WEIRD, tool_calls=[ToolCallSpec("f", {"w": WEIRD})], chunk_size=1
        )
    )
    final, _ = responses_final(oai)
    assert final.output[0].summary[0].text == WEIRD
    assert final.output_text == WEIRD
    assert json.loads(final.output[2].arguments) == {"w": WEIRD}


# ================================================================== non-streaming


# The server only streams: a request without "stream": true gets a 400 in the
# provider's error shape (recorded, and taking no answer from the queue).


def _assert_asks_for_a_stream(server: LLMServer, err: Any) -> None:
    assert err.status_code == 400
    assert err.request_id is not None
    assert '"stream": true' in err.message
    assert server.queued == 1
    assert len(server.requests) == 1
    assert "stream" not in server.requests[0].body


def test_chat_non_streaming_is_refused(server: LLMServer, oai: openai.OpenAI) -> None:
    """chat.completions.create() without ``stream`` raises BadRequestError, OpenAI's
    invalid_request_error body saying to set "stream": true."""
    server.enqueue(Reply(text="hello"))
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model="m", messages=USER)
    assert info.value.type == "invalid_request_error"
    assert set(info.value.body) == {"message", "type", "param", "code"}
    _assert_asks_for_a_stream(server, info.value)


def test_anthropic_non_streaming_is_refused(server: LLMServer, ant: anthropic.Anthropic) -> None:
    """messages.create() without ``stream`` raises BadRequestError with Anthropic's
    invalid_request_error body."""
    server.enqueue(Reply(text="hello"))
    with pytest.raises(anthropic.BadRequestError) as info:
        ant.messages.create(model="c", max_tokens=9, messages=USER)
    assert info.value.body["error"]["type"] == "invalid_request_error"
    _assert_asks_for_a_stream(server, info.value)


def test_responses_non_streaming_is_refused(server: LLMServer, oai: openai.OpenAI) -> None:
    """responses.create() without ``stream`` raises BadRequestError."""
    server.enqueue(Reply(text="hello"))
    with pytest.raises(openai.BadRequestError) as info:
        oai.responses.create(model="m", input="x")
    assert info.value.type == "invalid_request_error"
    _assert_asks_for_a_stream(server, info.value)


# ================================================================== HTTP errors


@pytest.mark.parametrize(
    ("status", "exc", "kind", "code"),
    [
        (400, openai.BadRequestError, "invalid_request_error", None),
        (401, openai.AuthenticationError, "invalid_request_error", "invalid_api_key"),
        (403, openai.PermissionDeniedError, "permission_error", None),
        (404, openai.NotFoundError, "invalid_request_error", "model_not_found"),
        (429, openai.RateLimitError, "requests", "rate_limit_exceeded"),
        (500, openai.InternalServerError, "server_error", None),
        (503, openai.InternalServerError, "server_error", None),
    ],
)
@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_openai_http_errors(
    server: LLMServer,
    oai: openai.OpenAI,
    status: int,
    exc: type[openai.APIStatusError],
    kind: str,
    code: str | None,
    endpoint: str,
) -> None:
    """Fault.status(n) reaches the OpenAI SDK as the right APIStatusError subclass with
    OpenAI's {"error": {message, type, param, code}} body and OpenAI's type/code pair."""
    server.enqueue(Fault.status(status, message="boom"))
    call = chat_final if endpoint == "chat" else responses_final
    with pytest.raises(exc) as info:
        call(oai)
    err = info.value
    assert err.status_code == status
    assert set(err.body) == {"message", "type", "param", "code"}
    assert err.body["message"] == "boom"
    assert (err.type, err.code, err.param) == (kind, code, None)


def test_openai_rate_limit_error_shape(server: LLMServer, oai: openai.OpenAI) -> None:
    """OpenAI's 429 body is {"error": {"message": "Rate limit reached for …",
    "type": "requests" (or "tokens"), "param": null, "code": "rate_limit_exceeded"}};
    Fault.status(error_type=...) changes the type, not the code."""
    server.enqueue(Fault.status(429), Fault.status(429, error_type="tokens"))
    with pytest.raises(openai.RateLimitError) as info:
        chat_final(oai)
    assert (info.value.type, info.value.code) == ("requests", "rate_limit_exceeded")
    assert info.value.message.endswith("Too Many Requests")
    with pytest.raises(openai.RateLimitError) as info:
        chat_final(oai)
    assert (info.value.type, info.value.code) == ("tokens", "rate_limit_exceeded")


def test_error_responses_carry_request_ids(
    server: LLMServer, oai: openai.OpenAI, ant: anthropic.Anthropic
) -> None:
    """Error responses carry the request id header (OpenAI ``x-request-id``, Anthropic
    ``request-id``) that APIStatusError.request_id reads, each its own; a header given
    to Fault.status wins."""
    server.enqueue(
        Fault.status(500),
        Fault.status(500),
        Fault.status(500, headers={"X-Request-Id": "req_mine"}),
    )
    with pytest.raises(openai.InternalServerError) as oerr:
        chat_final(oai)
    with pytest.raises(anthropic.InternalServerError) as aerr:
        messages_final(ant)
    assert oerr.value.request_id is not None
    assert aerr.value.request_id is not None
    assert oerr.value.request_id.startswith("req_")
    assert oerr.value.request_id != aerr.value.request_id
    assert "request-id" not in oerr.value.response.headers
    assert "x-request-id" not in aerr.value.response.headers
    with pytest.raises(openai.InternalServerError) as oerr:
        responses_final(oai)
    assert oerr.value.request_id == "req_mine"


def test_openai_stream_request_id(server: LLMServer, oai: openai.OpenAI) -> None:
    """A successful stream carries ``x-request-id``, as OpenAI's does."""
    server.enqueue(Reply(text="x"))
    raw = oai.chat.completions.with_raw_response.create(model="m", messages=USER, stream=True)
    assert raw.request_id is not None
    assert raw.request_id.startswith("req_")
    list(raw.parse())


@pytest.mark.parametrize(
    ("status", "exc", "kind"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (401, anthropic.AuthenticationError, "authentication_error"),
        (403, anthropic.PermissionDeniedError, "permission_error"),
        (404, anthropic.NotFoundError, "not_found_error"),
        (413, anthropic.APIStatusError, "request_too_large"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_anthropic_http_errors(
    server: LLMServer,
    ant: anthropic.Anthropic,
    status: int,
    exc: type[anthropic.APIStatusError],
    kind: str,
) -> None:
    """Fault.status(n) reaches the Anthropic SDK as the right APIStatusError subclass with
    Anthropic's {"type": "error", "error": {"type", "message"}} body."""
    server.enqueue(Fault.status(status, message="boom"))
    with pytest.raises(exc) as info:
        messages_final(ant)
    err = info.value
    assert err.status_code == status
    assert err.body["type"] == "error"
    assert err.body["error"] == {"type": kind, "message": "boom"}


def test_anthropic_overloaded_default_message(server: LLMServer, ant: anthropic.Anthropic) -> None:
    """Anthropic's 529 says {"type":"overloaded_error","message":"Overloaded"}, and so
    does Fault.status(529) without a message."""
    server.enqueue(Fault.status(529))
    with pytest.raises(anthropic.OverloadedError) as info:
        messages_final(ant)
    assert info.value.body["error"]["message"] == "Overloaded"


def test_sdk_retry_honours_retry_after_ms(server: LLMServer) -> None:
    """A 429 with retry-after-ms makes the SDK retry once; both attempts are recorded
    with the SDK's x-stainless-retry-count and the same body."""
    server.enqueue(Fault.status(429, headers={"retry-after-ms": "10"}), Reply(text="after retry"))
    with openai.OpenAI(base_url=server.url + "/v1", api_key="sk-x", max_retries=1) as client:
        final, _ = chat_final(client)
    assert final.choices[0].message.content == "after retry"
    first, second = server.requests
    assert [
        first.headers["x-stainless-retry-count"],
        second.headers["x-stainless-retry-count"],
    ] == ["0", "1"]
    assert first.json == second.json


# ================================================================== recording


def test_recorded_openai_chat_request(
    server: LLMServer, oai: openai.OpenAI, sent: _Capture
) -> None:
    """server.requests holds exactly the JSON the SDK sent, its headers (secret redacted),
    the model, the tool names and last_role for a tool-result turn."""
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    server.enqueue(Reply(text="ok"))
    chat_final(oai, model="gpt-rec", messages=messages, tools=tools)
    [rec] = server.requests
    [wire] = sent.requests
    _same_request(rec, wire)
    assert rec.headers["authorization"] == "Bearer ***"
    assert "sk-test-key" not in repr(rec)
    assert rec.body["stream"] is True
    assert (rec.model, rec.tool_names, rec.last_role) == ("gpt-rec", ("get_weather",), "tool")
    assert rec.wire_format == "openai-chat"


def test_recorded_anthropic_request(
    server: LLMServer, ant: anthropic.Anthropic, sent: _Capture
) -> None:
    """The Anthropic SDK's request is recorded as sent: the key redacted,
    anthropic-version kept, tool names and tool_result last_role."""
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
        },
    ]
    server.enqueue(Reply(text="ok"))
    messages_final(ant, model="claude-rec", messages=messages, tools=tools, system="be brief")
    [rec] = server.requests
    [wire] = sent.requests
    _same_request(rec, wire)
    # This SDK sends the key as "Authorization: Bearer"; older ones as x-api-key.
    assert rec.headers.get("x-api-key", "***") == "***"
    assert rec.headers.get("authorization", "Bearer ***") == "Bearer ***"
    assert rec.headers["anthropic-version"] == wire.headers["anthropic-version"]
    assert "sk-ant-test-key" not in repr(rec)
    assert (rec.model, rec.tool_names, rec.last_role) == ("claude-rec", ("get_weather",), "tool")
    assert rec.body["system"] == "be brief"


def test_recorded_responses_request(server: LLMServer, oai: openai.OpenAI, sent: _Capture) -> None:
    """The Responses request is recorded as sent; a function_call_output makes last_role
    "tool", and messages are the input items."""
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ]
    items = [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    server.enqueue(Reply(text="ok"))
    responses_final(oai, model="gpt-resp", input=items, tools=tools, instructions="be brief")
    [rec] = server.requests
    [wire] = sent.requests
    _same_request(rec, wire)
    assert (rec.model, rec.tool_names, rec.last_role) == ("gpt-resp", ("get_weather",), "tool")
    assert rec.messages == items


# ================================================================== async clients


@pytest.mark.asyncio
async def test_async_clients_against_in_loop_server(llm_server: LLMServer) -> None:
    """AsyncOpenAI and AsyncAnthropic streaming helpers against an LLMServer on the
    test's own loop (no task left running afterwards)."""
    reply = Reply(
        text="async ✓", reasoning="hmm", tool_calls=[ToolCallSpec("f", {"a": "ü"})], chunk_size=2
    )
    llm_server.enqueue(reply, reply, reply)
    async with openai.AsyncOpenAI(
        base_url=llm_server.url + "/v1", api_key="k", max_retries=0
    ) as oc:
        async with oc.chat.completions.stream(model="m", messages=USER) as stream:
            completion = await stream.get_final_completion()
        async with oc.responses.stream(model="m", input="x") as rstream:
            response = await rstream.get_final_response()
    async with (
        anthropic.AsyncAnthropic(base_url=llm_server.url, api_key="k", max_retries=0) as ac,
        ac.messages.stream(model="c", max_tokens=9, messages=USER) as astream,
    ):
        message = await astream.get_final_message()
    assert completion.choices[0].message.content == "async ✓"
    assert json.loads(completion.choices[0].message.tool_calls[0].function.arguments) == {"a": "ü"}
    assert response.output_text == "async ✓"
    assert json.loads(response.output[-1].arguments) == {"a": "ü"}
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == {"a": "ü"}
    await llm_server.wait_connections_closed()


# ------------------------------------------------------------------ utilities


def _fields(reply: Reply) -> dict[str, Any]:
    return {
        "text": reply.text,
        "reasoning": reply.reasoning,
        "tool_calls": reply.tool_calls,
        "finish": reply.finish,
        "usage": reply.usage,
        "chunk_size": reply.chunk_size,
        "model": reply.model,
    }


_HOP = {"host", "connection", "accept-encoding", "content-length", "transfer-encoding"}


def _same_request(rec: RecordedRequest, wire: Any) -> None:
    """The recorded request equals what httpx put on the wire (secrets aside)."""
    assert rec.method == wire.method
    assert rec.path == wire.url.path
    assert rec.json == json.loads(wire.content)
    secret = {"authorization", "x-api-key"}
    for name, value in wire.headers.items():
        if name.lower() in _HOP | secret:
            continue
        assert rec.headers.get(name) == value, name


# ================================================================== more coverage


def test_responses_large_parallel_non_ascii_arguments(
    server: LLMServer, oai: openai.OpenAI
) -> None:
    """Several large parallel function calls with non-ASCII arguments survive responses.stream()."""
    big = {"blob": "ø" * 20000 + "🐍" * 400 + WEIRD, "n": list(range(400))}
    calls = [ToolCallSpec(f"fn_{i}", {**big, "i": i}, id=f"call_{i}") for i in range(4)]
    server.enqueue(Reply(tool_calls=calls, chunk_size=89))
    final, _ = responses_final(oai)
    got = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name) for c in got] == [(c.id, c.name) for c in calls]
    assert [json.loads(c.arguments) for c in got] == [dict(c.arguments) for c in calls]
    assert len({item.id for item in got}) == 4


WEATHER_TOOLS_CHAT = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("get_weather", "write_file")
]


def _chat_agent_turn(client: openai.OpenAI) -> str:
    """Two LLM calls through the SDK: tool calls, then the answer to the tool results."""
    first, _ = chat_final(client, tools=WEATHER_TOOLS_CHAT)
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    history: list[Any] = [
        *USER,
        {
            "role": "assistant",
            "content": message.content,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in message.tool_calls
            ],
        },
        *({"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in message.tool_calls),
    ]
    second, _ = chat_final(client, messages=history, tools=WEATHER_TOOLS_CHAT)
    assert second.choices[0].finish_reason == "stop"
    return second.choices[0].message.content


def test_demo_script_agent_loop_via_sdks(
    server: LLMServer, oai: openai.OpenAI, ant: anthropic.Anthropic
) -> None:
    """The scripted model behind ``rafrx serve`` drives a full tool loop through the
    official SDKs: chat and Anthropic (tool calls, then the final answer)."""
    from rafrx.__main__ import demo_script

    server.script(demo_script(speed=1000.0))
    assert "21 °C" in _chat_agent_turn(oai)
    tools = [{"name": n, "input_schema": {"type": "object"}} for n in ("get_weather", "write_file")]
    first, _ = messages_final(ant, tools=tools)
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert [u.name for u in uses] == ["get_weather", "write_file"]
    history = [
        *USER,
        {"role": "assistant", "content": [b.to_dict() for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": "ok"} for u in uses
            ],
        },
    ]
    second, _ = messages_final(ant, messages=history, tools=tools)
    assert second.stop_reason == "end_turn"
    assert "21 °C" in second.content[0].text
    assert [r.last_role for r in server.requests] == ["user", "tool", "user", "tool"]


def test_cli_serve_speaks_to_the_sdks(tmp_path: Any) -> None:
    """``python -m rafrx serve --port 0`` answers the official SDKs (plain text turn)
    and refuses a non-streaming request with a 400 saying so."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rafrx", "serve", "--port", "0", "--speed", "1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), line
        with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as oc:
            with oc.chat.completions.stream(model="m", messages=USER) as stream:
                assert stream.get_final_completion().choices[0].message.content == (
                    "You said: Weather in Paris?"
                )
            with oc.responses.stream(model="m", input="hi") as rstream:
                assert rstream.get_final_response().output_text == "You said: hi"
            with pytest.raises(openai.BadRequestError, match='"stream": true'):
                oc.chat.completions.create(model="m", messages=USER)
        with (
            anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as ac,
            ac.messages.stream(model="c", max_tokens=9, messages=USER) as astream,
        ):
            assert astream.get_final_message().content[0].text == "You said: Weather in Paris?"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
