"""The OpenAI Chat Completions path and the OpenAI-compatible servers, end to end,
over several agent steps and over real HTTP.

Recorded streams (``tests/data/fixtures/openai-chat``) and streams built to the
providers' documented shapes are served by :class:`~rafrx.testing.LLMServer` on
127.0.0.1 to an :class:`~rafrx.sources.clients.OpenAIChatClient` under an
:class:`~rafrx.agent.Agent`. What rafrx reads of a step is checked against
openai-python's own accumulator (``ChatCompletionStreamState``) on the same bytes;
what it sends next is checked against the SDK's request TypedDicts
(``tests/test_sdk_request_types.sdk_problems``, the extensions the README documents
aside: DeepSeek's ``reasoning_content``, OpenRouter's ``reasoning_details``,
Gemini's ``extra_content``) and against the rule that a step's assistant message
goes back as the provider streamed it, each call answered once, in order.

Not repeated here (tests/test_wire_multistep.py, tests/sources/test_provider_shapes*.py,
tests/sources/test_dialect_quirks.py, tests/sources/test_dialects_hunt.py): a single
DeepSeek / Gemini / OpenRouter tool step going back, single-call readings of the
recorded fixtures, custom tool calls, LiteLLM thinking blocks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from openai._models import construct_type as openai_construct
from openai._streaming import SSEDecoder as OpenAISSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from rafrx.agent import Agent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import _bounded_id
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import LLMServer, Replay, Reply, ServerResponse
from rafrx.tools import Tool, tool
from tests.test_sdk_request_types import body_problems

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures"
MANIFEST: list[dict[str, Any]] = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
GUARD = 10.0  # seconds: a guard against hangs only

#: The request fields the README documents as rafrx's own extensions of the chat
#: wire (each is what a provider asks back): the SDK types do not declare them.
EXTENSIONS = ("'reasoning_details'", "'extra_content'", "'thinking_blocks'")


def wire_problems(body: Any) -> list[str]:
    """The SDK-type problems of a chat request body, the documented extensions aside."""
    return [p for p in body_problems("openai-chat", body) if not any(e in p for e in EXTENSIONS)]


# ================================================================ SSE bodies


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    index: int = 0,
    model: str = "gpt-4o-mini",
    chunk_id: str = "chatcmpl-1",
    **extra: Any,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` (no choice at all when ``delta`` and ``finish`` are None)."""
    choices = (
        []
        if delta is None and finish is None
        else [{"index": index, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]
    )
    out = {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": choices,
    }
    out.update(extra)
    return out


def sse(*chunks: dict[str, Any], done: bool = True) -> bytes:
    text = "".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def call_delta(
    index: int | None,
    call_id: str | None,
    name: str | None,
    arguments: str,
    **extra: Any,
) -> dict[str, Any]:
    """A ``tool_calls`` entry (the head of a call when it has an id or a name)."""
    entry: dict[str, Any] = {"function": {"arguments": arguments}}
    if index is not None:
        entry["index"] = index
    if call_id is not None:
        entry["id"] = call_id
        entry["type"] = "function"
    if name is not None:
        entry["function"]["name"] = name
    entry.update(extra)
    return entry


def usage(
    prompt: int, completion: int, *, cached: int | None = None, reasoning: int | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning, "audio_tokens": 0}
    return out


def sse_data(path: Path) -> list[dict[str, Any]]:
    """The JSON ``data:`` payloads of a recorded stream."""
    return [
        json.loads(line[len("data: ") :])
        for line in path.read_text("utf-8").splitlines()
        if line.startswith("data: {")
    ]


# ================================================================ the SDK's reading


def sdk_completion(body: bytes) -> Any:
    """openai-python's reading of a chat stream: ``ChatCompletionStreamState``'s snapshot."""
    state: Any = ChatCompletionStreamState()
    for event in OpenAISSEDecoder().iter_bytes(iter([body])):
        if event.data.startswith("[DONE]"):
            break
        raw = openai_construct(type_=ChatCompletionChunk, value=event.json())
        if raw.object != "chat.completion.chunk":
            continue  # (Azure's filter chunks, which ChatCompletionStream skips too)
        state.handle_chunk(raw)
    return state.current_completion_snapshot


def sdk_calls(completion: Any, choice: int = 0) -> list[tuple[str, str, Any]]:
    message = completion.choices[choice].message
    return [
        (c.id, c.function.name, json.loads(c.function.arguments or "{}"))
        for c in message.tool_calls or ()
    ]


def sdk_usage(completion: Any) -> Usage:
    used = completion.usage
    assert used is not None
    details = used.prompt_tokens_details
    reasoning = used.completion_tokens_details
    return Usage(
        used.prompt_tokens,
        used.completion_tokens,
        used.total_tokens,
        reasoning_tokens=None if reasoning is None else reasoning.reasoning_tokens,
        cached_tokens=None if details is None else details.cached_tokens,
    )


def sent_calls(message: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or ()
    ]


# ================================================================ tools and runs

RAN: list[tuple[str, Any]] = []  # what the tools were run with, in order


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RAN.clear()


@tool
def lookup(city: str) -> str:
    """Look a city's weather up."""
    RAN.append(("lookup", city))
    return f"{city}: sunny"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    RAN.append(("add", (a, b)))
    return a + b


@tool
def weather(location: str) -> str:
    """The weather at a place."""
    RAN.append(("weather", location))
    return f"{location}: 18 °C"


def any_tool(name: str) -> Tool:
    """A tool of that name taking any object (for the recordings' own tools)."""

    def run(**kwargs: Any) -> str:
        RAN.append((name, kwargs))
        return f"{name} ok"

    return Tool(name, f"The recording's {name}.", {"type": "object"}, run)


@attrs.define
class Run:
    responses: list[AgentResponse]
    requests: list[dict[str, Any]]

    def messages(self, n: int) -> list[dict[str, Any]]:
        messages = self.requests[n]["messages"]
        assert isinstance(messages, list)
        return messages

    def assistants(self, n: int) -> list[dict[str, Any]]:
        return [m for m in self.messages(n) if m["role"] == "assistant"]


async def agent_run(
    answers: Sequence[ServerResponse],
    prompts: Sequence[str] = ("Go.",),
    *,
    tools: Sequence[Tool] = (lookup, add),
    model: str = "gpt-4o-mini",
    history: bool = False,
    **client_params: Any,
) -> Run:
    """An agent's turns (one per prompt) against a server answering ``answers`` in turn."""
    responses: list[AgentResponse] = []
    async with LLMServer() as server:
        server.enqueue(*answers)
        async with OpenAIChatClient(server.url, "sk-test", model=model, **client_params) as client:
            agent = Agent(
                client,
                tools=list(tools),
                history=InMemoryHistoryProvider() if history else None,
            )
            for prompt in prompts:
                responses.append(await asyncio.wait_for(agent.send(prompt), GUARD))
        requests = [dict(r.json) for r in server.requests]
        await server.wait_connections_closed(timeout=GUARD)
    return Run(responses, requests)


def answered_in_order(messages: Iterable[dict[str, Any]]) -> list[str]:
    """Every problem with the tool messages: each call answered once, right after its
    assistant message, in call order (what OpenAI requires)."""
    problems: list[str] = []
    items = list(messages)
    for at, message in enumerate(items):
        ids = [c["id"] for c in message.get("tool_calls") or ()]
        if not ids:
            continue
        answers = [m.get("tool_call_id") for m in items[at + 1 : at + 1 + len(ids)]]
        if answers != ids:
            problems.append(f"message {at}: calls {ids} answered by {answers}")
    return problems


# ================================================================ recordings, step by step

# The recordings with tool calls that openai-python can read (it fails on the
# index-less ones: Ollama, Gemini, Mistral, Writer's, and on the tool index 1 of
# an Anthropic-compatible proxy).
SDK_READABLE = [
    entry["path"]
    for entry in MANIFEST
    if entry["format"] == "openai-chat"
    and entry["expected"]["tool_calls"]
    and not {"no_tool_call_index", "tool_index_not_zero", "message_and_delta"} & set(entry["tags"])
]


@pytest.mark.parametrize("path", SDK_READABLE)
@pytest.mark.asyncio
async def test_a_recorded_tool_step_goes_back_as_the_sdk_read_it(path: str) -> None:
    """Each recorded tool-calling step, replayed in 61-byte writes: the next request's
    assistant message carries the calls openai-python's ``ChatCompletionStreamState``
    reads of the same bytes (ids, names, arguments), in their order, its text as
    ``content`` (``null`` with calls and no text), each call answered once in order,
    and the body fits the SDK's ``CompletionCreateParamsStreaming``."""
    body = (FIXTURES / path).read_bytes()
    completion = sdk_completion(body)
    expected = sdk_calls(completion)
    names = sorted({name for _, name, _ in expected})
    run = await agent_run(
        [Replay(body, chunk_size=61), Reply(text="Done.")], tools=[any_tool(n) for n in names]
    )
    assert len(run.requests) == 2
    [assistant] = run.assistants(1)
    # (an id longer than OpenAI takes, vLLM's 46 characters, goes as its short stand-in)
    assert sent_calls(assistant) == [(_bounded_id(i, 40), n, a) for i, n, a in expected]
    assert assistant["content"] == (completion.choices[0].message.content or None)
    assert answered_in_order(run.messages(1)) == []
    assert [name for name, _ in RAN] == [name for _, name, _ in expected]
    assert wire_problems(run.requests[1]) == []


# ================================================================ ids shared by parallel calls


@pytest.mark.asyncio
async def test_parallel_calls_sharing_an_id_and_a_name_at_two_indexes_both_run() -> None:
    step = sse(
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [call_delta(0, "call_0", "lookup", "")]}),
        chunk({"tool_calls": [call_delta(0, None, None, '{"city": "Paris"}')]}),
        chunk({"tool_calls": [call_delta(1, "call_0", "lookup", "")]}),
        chunk({"tool_calls": [call_delta(1, None, None, '{"city": "Rome"}')]}),
        chunk({}, "tool_calls"),
        chunk(None, usage=usage(40, 20)),
    )
    completion = sdk_completion(step)
    assert [(n, a) for _, n, a in sdk_calls(completion)] == [
        ("lookup", {"city": "Paris"}),
        ("lookup", {"city": "Rome"}),
    ]
    run = await agent_run([Replay(step), Reply(text="Both sunny.")])
    assert RAN == [("lookup", "Paris"), ("lookup", "Rome")]
    [assistant] = run.assistants(1)
    assert [(n, a) for _, n, a in sent_calls(assistant)] == [
        ("lookup", {"city": "Paris"}),
        ("lookup", {"city": "Rome"}),
    ]
    ids = [c for c, _, _ in sent_calls(assistant)]
    assert len(set(ids)) == 2  # "Duplicate value for 'tool_call_id'" otherwise
    assert answered_in_order(run.messages(1)) == []


@pytest.mark.asyncio
async def test_parallel_calls_sharing_an_id_with_two_names_are_answered_apart() -> None:
    """The same id on two parallel calls of different functions: both run, and each goes
    back under an id of its own, answered once, in call order."""
    step = sse(
        chunk({"role": "assistant", "tool_calls": [call_delta(0, "dup", "lookup", "")]}),
        chunk({"tool_calls": [call_delta(0, None, None, '{"city": "Oslo"}')]}),
        chunk({"tool_calls": [call_delta(1, "dup", "add", '{"a": 2, "b": 3}')]}),
        chunk({}, "tool_calls"),
    )
    run = await agent_run([Replay(step), Reply(text="Done.")])
    assert RAN == [("lookup", "Oslo"), ("add", (2, 3))]
    [assistant] = run.assistants(1)
    calls = sent_calls(assistant)
    assert [(n, a) for _, n, a in calls] == [
        ("lookup", {"city": "Oslo"}),
        ("add", {"a": 2, "b": 3}),
    ]
    assert len({c for c, _, _ in calls}) == 2
    assert answered_in_order(run.messages(1)) == []
    assert wire_problems(run.requests[1]) == []


@pytest.mark.asyncio
async def test_kimi_ids_repeated_in_every_step_pair_each_result_with_its_step() -> None:
    """Kimi K2 numbers its calls per response (``functions.lookup:0`` in every step):
    the third request answers each step's call right after it, with its own result."""
    first = sse(
        chunk(
            {
                "role": "assistant",
                "tool_calls": [call_delta(0, "functions.lookup:0", "lookup", '{"city": "Paris"}')],
            },
            model="kimi-k2",
        ),
        chunk({}, "tool_calls", model="kimi-k2"),
    )
    second = sse(
        chunk(
            {
                "role": "assistant",
                "tool_calls": [call_delta(0, "functions.lookup:0", "lookup", '{"city": "Rome"}')],
            },
            model="kimi-k2",
        ),
        chunk({}, "tool_calls", model="kimi-k2"),
    )
    run = await agent_run([Replay(first), Replay(second), Reply(text="Done.")], model="kimi-k2")
    assert RAN == [("lookup", "Paris"), ("lookup", "Rome")]
    third = run.messages(2)
    assert [(m["role"], m.get("tool_call_id"), m.get("content")) for m in third[1:]] == [
        ("assistant", None, None),
        ("tool", "functions.lookup:0", "Paris: sunny"),
        ("assistant", None, None),
        ("tool", "functions.lookup:0", "Rome: sunny"),
    ]
    assert [sent_calls(m) for m in run.assistants(2)] == [
        [("functions.lookup:0", "lookup", {"city": "Paris"})],
        [("functions.lookup:0", "lookup", {"city": "Rome"})],
    ]


# ================================================================ n > 1, refusals, recordings


@pytest.mark.asyncio
async def test_n2_only_choice_zero_is_the_step_and_choice_one_calls_never_run() -> None:
    """With ``n: 2`` the two choices' deltas come interleaved; the agent's step is choice 0
    (a text answer, ``stop``): choice 1's tool call is not run, and openai-python's
    choice 0 is what rafrx reads (text, finish reason, usage)."""
    step = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"role": "assistant", "content": None}, index=1),
        chunk({"content": "Paris is "}),
        chunk({"tool_calls": [call_delta(0, "call_n1", "lookup", '{"city": "Paris"}')]}, index=1),
        chunk({"content": "sunny."}),
        chunk({}, "stop"),
        chunk({}, "tool_calls", index=1),
        chunk(None, usage=usage(30, 24, cached=0, reasoning=0)),
    )
    completion = sdk_completion(step)
    assert completion.choices[0].message.content == "Paris is sunny."
    run = await agent_run([Replay(step, chunk_size=37)], n=2)
    assert RAN == []
    assert len(run.requests) == 1
    assert run.requests[0]["n"] == 2
    [response] = run.responses
    assert response.text == completion.choices[0].message.content
    assert not response.tool_calls
    assert response.finish_reason is FinishReason.STOP
    assert response.usage == sdk_usage(completion)


@pytest.mark.asyncio
async def test_a_recorded_refusal_goes_back_as_the_assistant_text_of_the_next_turn() -> None:
    """gpt-4o's recorded refusal (``delta.refusal`` pieces): rafrx reads it as the reply's
    text (what the SDK keeps as ``message.refusal``); the next turn sends it back as the
    assistant's ``content``, the body fitting the SDK types."""
    recording = FIXTURES / "openai-chat" / "openai-refusal.sse"
    completion = sdk_completion(recording.read_bytes())
    refusal = completion.choices[0].message.refusal
    assert refusal
    run = await agent_run(
        [Replay(recording, chunk_size=50), Reply(text="Fine.")],
        ("Do the bad thing.", "Then something else."),
        history=True,
    )
    assert run.responses[0].text == refusal
    assert run.responses[0].finish_reason is FinishReason.STOP
    assert run.responses[0].usage == sdk_usage(completion)
    assert [(m["role"], m["content"]) for m in run.messages(1)] == [
        ("user", "Do the bad thing."),
        ("assistant", refusal),
        ("user", "Then something else."),
    ]
    assert wire_problems(run.requests[1]) == []


@pytest.mark.asyncio
async def test_a_recorded_ollama_call_finished_with_stop_runs_and_is_answered() -> None:
    """Ollama's recorded tool call: no ``index``, whole arguments in one delta and
    ``finish_reason: "stop"`` (not ``tool_calls``). The call still runs, goes back with
    its id, and is answered."""
    recording = FIXTURES / "openai-chat" / "ollama-tool-call.sse"
    run = await agent_run(
        [Replay(recording, chunk_size=23), Reply(text="True.")],
        tools=[any_tool("return_bool")],
        model="llama3.2",
    )
    assert RAN == [("return_bool", {"value": True})]
    assert len(run.requests) == 2
    [assistant] = run.assistants(1)
    assert sent_calls(assistant) == [("call_kve3oltz", "return_bool", {"value": True})]
    assert answered_in_order(run.messages(1)) == []
    assert wire_problems(run.requests[1]) == []


@pytest.mark.asyncio
async def test_a_recorded_gemini_call_without_id_gets_one_answered_in_the_next_request() -> None:
    """Gemini's OpenAI-compatible endpoint (recorded): the call comes with ``id: ""``, no
    ``index``, and ``finish_reason: "stop"``; it runs, and the next request carries it
    under a non-empty id that its tool message answers (OpenAI's types require one)."""
    recording = FIXTURES / "openai-chat" / "gemini-compat-tool-call.sse"
    run = await agent_run(
        [Replay(recording), Reply(text="Fruit.")],
        tools=[any_tool("return_list_of_str")],
        model="gemini-2.0-flash",
    )
    assert RAN == [("return_list_of_str", {"value": ["apple", "banana", "orange"]})]
    [assistant] = run.assistants(1)
    [(call_id, name, arguments)] = sent_calls(assistant)
    assert call_id
    assert (name, arguments) == ("return_list_of_str", {"value": ["apple", "banana", "orange"]})
    assert answered_in_order(run.messages(1)) == []
    assert wire_problems(run.requests[1]) == []


# ================================================================ reasoning across steps


@pytest.mark.asyncio
async def test_openrouter_each_steps_reasoning_details_go_back_on_its_own_message() -> None:
    """A real OpenRouter Claude recording (reasoning.text pieces, then its signature, then a
    call), then a second step of the same shape with its own signed block: the third
    request carries each step's ``reasoning_details``, merged per entry and unmodified, on
    that step's assistant message, not mixed.

    Evidence: https://openrouter.ai/docs/guides/best-practices/reasoning-tokens
    (preserving reasoning blocks: pass ``reasoning_details`` back unmodified)."""
    recording = FIXTURES / "openai-chat" / "openrouter-anthropic-thinking-tool.sse"
    pieces = [
        d
        for c in sse_data(recording)
        for ch in c.get("choices") or ()
        for d in ch.get("delta", {}).get("reasoning_details") or ()
    ]
    first_details = [
        {
            "type": "reasoning.text",
            "text": "".join(p.get("text") or "" for p in pieces),
            "format": "anthropic-claude-v1",
            "index": 0,
            "signature": pieces[-1]["signature"],
        }
    ]
    detail = {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0}
    second = sse(
        chunk(
            {
                "role": "assistant",
                "reasoning": "Now Rome",
                "reasoning_details": [{**detail, "text": "Now Rome"}],
            }
        ),
        chunk({"reasoning": ".", "reasoning_details": [{**detail, "text": "."}]}),
        chunk({"reasoning_details": [{**detail, "signature": "sig-two"}]}),
        chunk({"tool_calls": [call_delta(0, "toolu_2", "weather", '{"location": "Rome"}')]}),
        chunk({}, "tool_calls", usage=usage(700, 40)),
    )
    run = await agent_run(
        [Replay(recording, chunk_size=90), Replay(second), Reply(text="Both mild.")],
        tools=[weather],
        model="anthropic/claude-sonnet-4",
    )
    assert RAN == [("weather", "Florence, Italy"), ("weather", "Rome")]
    one, two = run.assistants(2)
    assert _same_details(one.get("reasoning_details"), first_details)
    assert two.get("reasoning_details") == [{**detail, "text": "Now Rome.", "signature": "sig-two"}]
    assert two.get("reasoning_content") == "Now Rome."
    assert run.assistants(1) == [one]
    assert answered_in_order(run.messages(2)) == []
    assert wire_problems(run.requests[2]) == []


def _same_details(sent: Any, expected: list[dict[str, Any]]) -> bool:
    """The same entries, whatever the order of their members."""
    return isinstance(sent, list) and [dict(d) for d in sent] == expected


@pytest.mark.asyncio
async def test_gemini_each_steps_thought_signature_goes_back_on_its_own_call() -> None:
    """Gemini 3 (OpenAI-compatible endpoint) in a sequential tool loop: every step's first
    call carries a ``thought_signature`` in ``extra_content.google``; the third request
    sends each back on the call it came with (the docs: "you must pass back thought
    signatures during function calling", for every step of the current turn).

    Evidence: https://ai.google.dev/gemini-api/docs/thought-signatures."""

    def step(call_id: str, city: str, signature: str) -> bytes:
        extra = {"google": {"thought_signature": signature}}
        return sse(
            chunk(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "extra_content": extra,
                            "function": {"arguments": json.dumps({"city": city}), "name": "lookup"},
                            "id": call_id,
                            "type": "function",
                        }
                    ],
                },
                "tool_calls",
                model="gemini-3-flash-preview",
            ),
        )

    run = await agent_run(
        [
            Replay(step("function-call-1", "Paris", "c2lnLTE=")),
            Replay(step("function-call-2", "Rome", "c2lnLTI=")),
            Reply(text="Both sunny."),
        ],
        model="gemini-3-flash-preview",
    )
    assert RAN == [("lookup", "Paris"), ("lookup", "Rome")]
    calls = [m["tool_calls"] for m in run.assistants(2)]
    assert [[(c["id"], c.get("extra_content")) for c in cs] for cs in calls] == [
        [("function-call-1", {"google": {"thought_signature": "c2lnLTE="}})],
        [("function-call-2", {"google": {"thought_signature": "c2lnLTI="}})],
    ]
    assert wire_problems(run.requests[2]) == []


@pytest.mark.asyncio
async def test_gemini_signature_on_an_entry_of_its_own_goes_back_on_its_call() -> None:
    extra = {"google": {"thought_signature": "c2lnLWxhdGU="}}
    step = sse(
        chunk(
            {
                "role": "assistant",
                "tool_calls": [call_delta(0, "function-call-9", "lookup", '{"city": "Paris"}')],
            },
            model="gemini-3-flash-preview",
        ),
        chunk(
            {"tool_calls": [{"index": 0, "function": {"arguments": ""}, "extra_content": extra}]},
            model="gemini-3-flash-preview",
        ),
        chunk({}, "tool_calls", model="gemini-3-flash-preview"),
    )
    [sdk_call] = sdk_completion(step).choices[0].message.tool_calls
    assert sdk_call.to_dict().get("extra_content") == extra
    run = await agent_run([Replay(step), Reply(text="Sunny.")], model="gemini-3-flash-preview")
    assert RAN == [("lookup", "Paris")]
    [assistant] = run.assistants(1)
    assert [(c["id"], c.get("extra_content")) for c in assistant["tool_calls"]] == [
        ("function-call-9", extra)
    ]


@pytest.mark.asyncio
async def test_gemini_signature_before_its_call_goes_back_on_that_call() -> None:
    """The signature's entry comes first, naming only the index of the call that follows."""
    extra = {"google": {"thought_signature": "c2lnLWVhcmx5"}}
    step = sse(
        chunk(
            {"role": "assistant", "tool_calls": [{"index": 0, "extra_content": extra}]},
            model="gemini-3-flash-preview",
        ),
        chunk(
            {"tool_calls": [call_delta(0, None, "lookup", '{"city": "Oslo"}')]},
            model="gemini-3-flash-preview",
        ),
        chunk({}, "tool_calls", model="gemini-3-flash-preview"),
    )
    run = await agent_run([Replay(step), Reply(text="Rain.")], model="gemini-3-flash-preview")
    assert RAN == [("lookup", "Oslo")]
    [assistant] = run.assistants(1)
    [call] = assistant["tool_calls"]
    assert call.get("extra_content") == extra
    [answer] = [m for m in run.messages(1) if m["role"] == "tool"]
    assert answer["tool_call_id"] == call["id"]


@pytest.mark.asyncio
async def test_gemini_signature_before_its_call_leaves_the_call_its_own_id() -> None:
    """As above, the call then bringing its id: that id is the one answered, not one
    made up when the signature came."""
    extra = {"google": {"thought_signature": "c2lnLWVhcmx5"}}
    step = sse(
        chunk({"role": "assistant", "tool_calls": [{"index": 0, "extra_content": extra}]}),
        chunk({"tool_calls": [call_delta(0, "function-call-7", "lookup", '{"city": "Oslo"}')]}),
        chunk({}, "tool_calls"),
    )
    run = await agent_run([Replay(step), Reply(text="Rain.")], model="gemini-3-flash-preview")
    assert RAN == [("lookup", "Oslo")]
    [assistant] = run.assistants(1)
    assert [(c["id"], c.get("extra_content")) for c in assistant["tool_calls"]] == [
        ("function-call-7", extra)
    ]
    [answer] = [m for m in run.messages(1) if m["role"] == "tool"]
    assert answer["tool_call_id"] == "function-call-7"


@pytest.mark.asyncio
async def test_deepseek_thinking_tool_turn_then_a_new_turn_keeps_the_tool_turns_reasoning() -> None:
    """DeepSeek thinking mode: "between two user messages, if the model performed a tool
    call, the intermediate assistant's reasoning_content must participate in the context
    concatenation and must be passed back". The recorded deepseek-reasoner tool step,
    its final answer, then a second user turn (from history): the second turn's request
    still carries the tool-call message's reasoning_content verbatim, and every
    assistant tool-call message has the field.

    Evidence: https://api-docs.deepseek.com/guides/thinking_mode."""
    recording = FIXTURES / "openai-chat" / "deepseek-reasoning-tools.sse"
    reasoning = "".join(
        (c["choices"][0]["delta"].get("reasoning_content") or "")
        for c in sse_data(recording)
        if c.get("choices")
    )
    run = await agent_run(
        [
            Replay(recording, chunk_size=77),
            Reply(reasoning="Got it.", text="18 °C."),
            Reply(reasoning="Same.", text="Still 18 °C."),
        ],
        ("Weather in San Francisco?", "Still?"),
        tools=[weather],
        model="deepseek-reasoner",
        history=True,
    )
    third = run.messages(2)
    assert [m["role"] for m in third] == ["user", "assistant", "tool", "assistant", "user"]
    assert third[1]["reasoning_content"] == reasoning
    assert third[1]["tool_calls"][0]["id"] == "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF"
    assert wire_problems(run.requests[2]) == []  # (reasoning_content: documented)


@pytest.mark.asyncio
async def test_ollama_reasoning_field_carries_a_thinking_tool_step_back_as_reasoning() -> None:
    """Ollama streams thinking as ``delta.reasoning`` and reads it back from the assistant
    message's ``reasoning`` field (``OpenAIChatClient(reasoning_field="reasoning")``): the
    next step's request carries the tool step's thinking there, and no
    ``reasoning_content``."""
    step = sse(
        chunk({"role": "assistant", "content": "", "reasoning": "Look Paris "}, model="qwen3"),
        chunk({"content": "", "reasoning": "up."}, model="qwen3"),
        chunk(
            {
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_q1",
                        "index": 0,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            model="qwen3",
        ),
        chunk({"content": ""}, "tool_calls", model="qwen3"),
    )
    run = await agent_run(
        [Replay(step), Reply(text="Sunny.")], model="qwen3", reasoning_field="reasoning"
    )
    assert RAN == [("lookup", "Paris")]
    [assistant] = run.assistants(1)
    assert assistant.get("reasoning") == "Look Paris up."
    assert "reasoning_content" not in assistant
    assert sent_calls(assistant) == [("call_q1", "lookup", {"city": "Paris"})]


# ================================================================ usage across steps


@pytest.mark.asyncio
async def test_turn_usage_is_the_sum_of_each_steps_usage_as_the_sdk_reads_it() -> None:
    """Three steps whose usage comes three ways (in an empty-``choices`` chunk after the
    finish as ``include_usage`` sends it, on the finish chunk as DeepSeek does, and on
    every chunk as vLLM's continuous usage stats do), with ``cached_tokens`` and
    ``reasoning_tokens`` details: the turn's usage is the sum of what openai-python
    reads of each step."""
    first = sse(
        chunk(
            {"role": "assistant", "tool_calls": [call_delta(0, "c1", "lookup", '{"city": "Oslo"}')]}
        ),
        chunk({}, "tool_calls"),
        chunk(None, usage=usage(120, 30, cached=64, reasoning=12)),
    )
    second = sse(
        chunk(
            {"role": "assistant", "tool_calls": [call_delta(0, "c2", "add", '{"a": 1, "b": 2}')]}
        ),
        chunk({}, "tool_calls", usage=usage(180, 20, cached=128)),
    )
    third = sse(
        chunk({"role": "assistant", "content": "Cold"}, usage=usage(220, 1)),
        chunk({"content": "."}, usage=usage(220, 2)),
        chunk({}, "stop", usage=usage(220, 3, reasoning=0)),
    )
    expected = [sdk_usage(sdk_completion(body)) for body in (first, second, third)]
    run = await agent_run([Replay(first), Replay(second), Replay(third)])
    [response] = run.responses
    assert RAN == [("lookup", "Oslo"), ("add", (1, 2))]
    assert response.usage == expected[0] + expected[1] + expected[2]
    assert response.usage == Usage(520, 53, 573, reasoning_tokens=12, cached_tokens=192)
    assert response.text == "Cold."
