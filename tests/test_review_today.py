"""A skeptical review of the code paths that landed in 8210fe0..HEAD.

Each test states an expectation the new code claims (docstrings, commit messages) or
that a provider enforces.

Areas: Anthropic interleaved thinking refs (TEXT_REF / TOOL_USE_REF) through
from_anthropic / to_anthropic / the stream dialect; Responses refs
(FUNCTION_CALL_REF / MESSAGE_REF) with store=false, renamed ids and edited content;
chat provider data (Gemini extra_content, OpenRouter reasoning_details); the
same-name restart heuristic of split_legacy_delta; paired() history repair; the
agent's one-turn-at-a-time observable approver; Outcome; LLMServer(keep_requests).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import operators as ops
from rafrx import updates as u
from rafrx._cycles import Outcome
from rafrx.agent import Agent
from rafrx.events import ToolApprovalRequestEvent
from rafrx.messages import (
    FUNCTION_CALL_REF,
    LOST_RESULT,
    MESSAGE_REF,
    OPENAI_CALL_EXTRA,
    OPENAI_REASONING,
    REASONING_DETAILS,
    ChatMessage,
    MessageRole,
    ToolCall,
    from_anthropic,
    paired,
    to_anthropic,
)
from rafrx.operators._split_legacy_delta import LegacyDeltaSplitter
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason
from rafrx.sources import from_sse
from rafrx.sources.clients import OpenAIResponsesClient, to_responses_input
from rafrx.testing import LLMServer, Reply, ToolCallSpec, render
from rafrx.tools import ToolApprovalResponse, tool
from tests.test_agent import text
from tests.test_agent_overlap import Client, calls, last_user
from tests.test_messages_wire_edges import all_problems, conversations

M = ChatMessage
GUARD = 5.0  # seconds: a guard against hangs only

# ---------------------------------------------------------------- helpers


def _ev(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def anthropic_stream(blocks: Sequence[dict[str, Any]], chunk: int | None = None) -> Any:
    """An Anthropic Messages stream that sends ``blocks`` (wire content blocks) as a
    real server does: start, deltas (thinking, signature, text, input JSON), stop."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    out = _ev("message_start", {"type": "message_start", "message": start})
    for i, b in enumerate(blocks):

        def delta(d: dict[str, Any], i: int = i) -> str:
            return _ev(
                "content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}
            )

        if b["type"] == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            out += _ev(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": first},
            )
            if b["thinking"]:
                out += delta({"type": "thinking_delta", "thinking": b["thinking"]})
            out += delta({"type": "signature_delta", "signature": b["signature"]})
        elif b["type"] == "redacted_thinking":
            out += _ev(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": b},
            )
        elif b["type"] == "text":
            first = {"type": "text", "text": ""}
            out += _ev(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": first},
            )
            half = len(b["text"]) // 2
            for piece in (b["text"][:half], b["text"][half:]):
                if piece:
                    out += delta({"type": "text_delta", "text": piece})
        else:
            first = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
            out += _ev(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": first},
            )
            out += delta({"type": "input_json_delta", "partial_json": json.dumps(b["input"])})
        out += _ev("content_block_stop", {"type": "content_block_stop", "index": i})
    out += _ev(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
    )
    body = (out + _ev("message_stop", {"type": "message_stop"})).encode()
    if chunk is None:
        return body
    return [body[i : i + chunk] for i in range(0, len(body), chunk)]


def aggregated(chunks: Any, dialect: str) -> AgentResponse:
    response = from_sse(chunks, dialect).pipe(ops.convert(), ops.aggregate()).run()
    assert isinstance(response, AgentResponse)
    return response


def sent_assistant(message: ChatMessage) -> list[dict[str, Any]]:
    """The content blocks ``message`` goes back to Anthropic as (after a user turn)."""
    wire = to_anthropic([M.user("q"), message])[1]
    assert wire[1]["role"] == "assistant"
    return list(wire[1]["content"])


def thought(n: int) -> dict[str, Any]:
    return {"type": "thinking", "thinking": f"step {n}", "signature": f"sig{n}"}


def use(call_id: str, n: int = 0) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "lookup", "input": {"n": n}}


def results(*ids: str) -> dict[str, Any]:
    blocks = [{"type": "tool_result", "tool_use_id": i, "content": f"r {i}"} for i in ids]
    return {"role": "user", "content": blocks}


# ================================================================ Anthropic interleaved thinking


@st.composite
def interleaved_messages(draw: st.DrawFn, thinking_first: bool = False) -> list[dict[str, Any]]:
    """Content of an assistant message where the model thought between blocks: some
    thinking block comes after a text or tool_use block. Texts are never blank (as
    Anthropic sends them); tool_use ids are unique and in Anthropic's form."""
    kinds = draw(
        st.lists(
            st.sampled_from(["thinking", "redacted", "text", "tool_use"]), min_size=2, max_size=9
        )
    )
    if thinking_first:
        kinds.insert(0, "thinking")
    first_other = next((i for i, k in enumerate(kinds) if k in ("text", "tool_use")), None)
    if first_other is None:
        kinds.append("text")
        first_other = len(kinds) - 1
    if not any(k in ("thinking", "redacted") for k in kinds[first_other:]):
        kinds.append(draw(st.sampled_from(["thinking", "redacted"])))
    texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
    out: list[dict[str, Any]] = []
    for n, kind in enumerate(kinds):
        if kind == "thinking":
            out.append({"type": "thinking", "thinking": draw(texts), "signature": f"sig_{n}"})
        elif kind == "redacted":
            out.append({"type": "redacted_thinking", "data": f"ENC{n}=="})
        elif kind == "text":
            out.append({"type": "text", "text": draw(texts.filter(lambda t: t.strip() != ""))})
        else:
            out.append(use(f"toolu_{n:02d}", n))
    return out


@settings(max_examples=120, deadline=None)
@given(interleaved_messages())
def test_interleaved_anthropic_message_round_trips_exactly_through_json(
    content: list[dict[str, Any]],
) -> None:
    """from_anthropic -> (JSON history) -> to_anthropic gives the message back block for
    block, in its order: Anthropic refuses an interleaved turn echoed in another order."""
    ids = [b["id"] for b in content if b["type"] == "tool_use"]
    wire = [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}]
    if ids:
        wire.append(results(*ids))
    messages = from_anthropic(None, wire)
    _, again = to_anthropic(messages)
    assert again[1]["content"] == content
    # through a JSON history that keeps the messages in Anthropic's format
    _, twice = to_anthropic(from_anthropic(None, json.loads(json.dumps(again))))
    assert twice == again


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_messages(thinking_first=True), st.integers(7, 400))
def test_streamed_interleaved_message_goes_back_as_it_came_for_any_chunking(
    content: list[dict[str, Any]], chunk: int
) -> None:
    """A streamed message (thinking first, as Claude sends it) goes back to Anthropic with
    each block where it stood, whatever the network chunking."""
    response = aggregated(anthropic_stream(content, chunk), "anthropic")
    [message] = [m for m in response.turn_transcript if m.role is MessageRole.ASSISTANT]
    assert sent_assistant(message) == content


@pytest.mark.parametrize(
    "content",
    [
        [
            {"type": "text", "text": "Hi. "},
            thought(1),
            use("toolu_a"),
            thought(2),
            {"type": "text", "text": "Done"},
        ],
        [use("toolu_a"), thought(1), {"type": "text", "text": "Then this."}],
    ],
    ids=["text-first", "tool_use-first"],
)
def test_streamed_message_whose_first_block_is_not_thinking_goes_back_as_it_came(
    content: list[dict[str, Any]],
) -> None:
    """Anthropic-compatible servers (and Claude with interleaved thinking) may open a message
    with text or a call before thinking; from_anthropic keeps such a message in order, so
    must the stream dialect (the message echoed back otherwise is reordered or its text is
    cut at the wrong place)."""
    wire = [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}]
    assert to_anthropic(from_anthropic(None, wire))[1][1]["content"] == content  # the reference
    response = aggregated(anthropic_stream(content), "anthropic")
    [message] = [m for m in response.turn_transcript if m.role is MessageRole.ASSISTANT]
    assert sent_assistant(message) == content


@pytest.mark.parametrize("case", ["kimi-style ids", "ids repeated across turns"])
def test_interleaved_order_survives_the_call_ids_to_anthropic_rewrites(case: str) -> None:
    """Kimi's and other Anthropic-compatible endpoints give ids like ``functions.lookup:0``
    (not in Anthropic's id form) and the same ids in every response; to_anthropic rewrites
    them, and the interleaved order must still be the one that came."""
    if case == "kimi-style ids":
        first, second = "functions.lookup:0", "functions.lookup:1"
        earlier: list[dict[str, Any]] = []
    else:
        first, second = "toolu_0", "toolu_1"
        earlier = [
            {"role": "assistant", "content": [thought(0), use(first), use(second)]},
            results(first, second),
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": "again"},
        ]
    content = [thought(1), use(first, 1), thought(2), use(second, 2)]
    wire = [
        {"role": "user", "content": "q"},
        *earlier,
        {"role": "assistant", "content": content},
        results(first, second),
    ]
    _, again = to_anthropic(from_anthropic(None, wire))
    kinds = [b["type"] for b in again[-2]["content"]]
    assert kinds == ["thinking", "tool_use", "thinking", "tool_use"]
    uses = [b["id"] for b in again[-2]["content"] if b["type"] == "tool_use"]
    assert [b["tool_use_id"] for b in again[-1]["content"]] == uses


def test_anthropic_thinking_never_reaches_the_other_wire_formats() -> None:
    """An interleaved Anthropic turn continued with an OpenAI client: its signed thinking
    and refs stay out of the chat and Responses requests, which stay valid."""
    content = [
        thought(1),
        {"type": "text", "text": "Looking."},
        use("toolu_a"),
        thought(2),
        use("toolu_b"),
    ]
    wire = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": content},
        results("toolu_a", "toolu_b"),
    ]
    messages = from_anthropic(None, wire)
    problems = all_problems(messages)
    assert problems["openai-chat"] == []
    assert problems["openai-responses"] == []
    text_of_requests = json.dumps([m.to_openai() for m in messages]) + json.dumps(
        to_responses_input(messages)
    )
    assert "sig1" not in text_of_requests
    assert "rafrx." not in text_of_requests


# ================================================================ OpenAI Responses refs


def _reasoning(n: int, encrypted: str | None = "ENC") -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": f"rs_{n}", "summary": []}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def _responses_body(client: OpenAIResponsesClient, messages: list[ChatMessage]) -> dict[str, Any]:
    """The body ``client.stream(messages)`` sends (as stream() builds it)."""
    payload = client._payload(messages, [])
    payload.update(client.params)
    payload["stream"] = True
    return client._complete(payload)


def _paired_ids_without_reasoning(items: Sequence[dict[str, Any]]) -> list[str]:
    """Ids of output items (fc_/msg_) sent with their item id though no reasoning item
    opens their run of output items: OpenAI refuses "Item 'fc_…' of type
    'function_call' was provided without its required 'reasoning' item"."""
    bad = []
    run_has_reasoning = False
    for item in items:
        kind = item.get("type")
        if kind == "reasoning":
            run_has_reasoning = True
        elif kind in ("function_call", "message"):
            if item.get("id") and not run_has_reasoning:
                bad.append(item["id"])
        else:  # a user message or a tool output ends the run of output items
            run_has_reasoning = False
    return bad


@pytest.mark.asyncio
async def test_store_false_dropping_a_reasoning_item_also_unpairs_its_items(
    llm_server: LLMServer,
) -> None:
    """A server that does not return ``encrypted_content`` (a proxy, an older Azure
    deployment) under ``store: false``: rafrx rightly leaves the reasoning item out, and
    then the function_call / message it was paired with must go without their item ids.

    Evidence: https://github.com/laravel/ai/pull/1052 ("Keep an OpenAI function call item id
    only beside its reasoning"), https://github.com/omnigent-ai/omnigent/issues/5066
    ("Item 'fc_…' of type 'function_call' was provided without its required 'reasoning'
    item: 'rs_…'").
    """

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return f"{city}: sunny"

    llm_server.enqueue(
        Reply(
            reasoning="Plan.",
            text="Let me check.",
            tool_calls=[ToolCallSpec("lookup", {"city": "Turin"})],
        ),
        Reply(text="Sunny."),
    )
    async with OpenAIResponsesClient(llm_server.url, "sk", model="o4-mini", store=False) as client:
        await asyncio.wait_for(Agent(client, tools=[lookup]).send("Turin?"), GUARD)
    items = llm_server.requests[1].messages
    assert [i for i in items if i.get("type") == "reasoning"] == []
    assert _paired_ids_without_reasoning(items) == []


def test_store_false_keeps_a_reasoning_item_with_encrypted_content_and_its_pair() -> None:
    call = ToolCall("call_1", "f", {})
    ref = {"type": FUNCTION_CALL_REF, "id": "fc_1", "call_id": "call_1"}
    messages = [
        M.user("q"),
        M(
            "assistant",
            "",
            tool_calls=[call],
            provider_data={OPENAI_REASONING: (_reasoning(1), ref)},
        ),
        M.tool("r", "call_1"),
    ]
    client = OpenAIResponsesClient("http://127.0.0.1:1", "sk", model="o4-mini", store=False)
    body = _responses_body(client, messages)
    assert body["include"] == ["reasoning.encrypted_content"]
    assert [i.get("type") for i in body["input"]] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert body["input"][2]["id"] == "fc_1"


def test_responses_refs_survive_a_call_id_repeated_across_steps() -> None:
    """A Responses-compatible server that numbers calls per response (``call_0`` in every
    step): the second step's call is renamed for uniqueness, and it must still go back
    right after its reasoning item with its item id."""

    def step(n: int) -> list[ChatMessage]:
        ref = {"type": FUNCTION_CALL_REF, "id": f"fc_{n}", "call_id": "call_0"}
        data = {OPENAI_REASONING: (_reasoning(n), ref)}
        return [
            M("assistant", "", tool_calls=[ToolCall("call_0", "f", {"n": n})], provider_data=data),
            M.tool(f"r{n}", "call_0"),
        ]

    messages = [M.user("a"), *step(1), M.assistant("x"), M.user("b"), *step(2)]
    items = to_responses_input(messages)
    after = {
        items[i]["id"]: items[i + 1]
        for i, item in enumerate(items)
        if item.get("type") == "reasoning"
    }
    assert after["rs_1"].get("id") == "fc_1"
    assert after["rs_2"].get("type") == "function_call"
    assert after["rs_2"].get("id") == "fc_2"
    assert all_problems(messages)["openai-responses"] == []


def test_responses_edited_content_of_a_two_message_turn_is_what_goes_back() -> None:
    refs = (
        _reasoning(1),
        {"type": MESSAGE_REF, "id": "msg_1", "text": "My card is 4111. "},
        _reasoning(2),
        {"type": MESSAGE_REF, "id": "msg_2", "text": "Done."},
    )
    original = M("assistant", "My card is 4111. Done.", provider_data={OPENAI_REASONING: refs})
    edited = attrs.evolve(original, content="My card is [redacted]. Done.")
    items = to_responses_input([M.user("q"), edited])
    sent = "".join(
        part["text"] for i in items if i.get("type") == "message" for part in i["content"]
    ) + "".join(i["content"] for i in items if i.get("role") == "assistant" and "type" not in i)
    assert "4111" not in sent
    assert sent == edited.content


def test_responses_edited_content_of_a_one_message_turn_is_what_goes_back() -> None:
    refs = (_reasoning(1), {"type": MESSAGE_REF, "id": "msg_1", "text": "old"})
    edited = M("assistant", "new text", provider_data={OPENAI_REASONING: refs})
    items = to_responses_input([M.user("q"), edited])
    assert items[2]["id"] == "msg_1"
    assert items[2]["content"][0]["text"] == "new text"


def _responses_reply_body() -> bytes:
    reply = Reply(
        reasoning="Check two cities.",
        text="Let me check.",
        tool_calls=[
            ToolCallSpec("lookup", {"city": "Nice"}, id="call_nice"),
            ToolCallSpec("lookup", {"city": "Lyon"}, id="call_lyon"),
        ],
    )
    return render(reply, "openai-responses", {"model": "o4-mini"})


_RESPONSES_BODY = _responses_reply_body()


def _updates(chunks: Any, dialect: str) -> list[Any]:
    out: list[Any] = []
    from_sse(chunks, dialect).subscribe(out.append)
    return out


_WHOLE = _updates(_RESPONSES_BODY, "openai-responses")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, len(_RESPONSES_BODY) - 1), max_size=40, unique=True))
def test_responses_refs_do_not_depend_on_how_the_body_is_split(cuts: list[int]) -> None:
    """The same body in any chunking gives the same updates, refs included."""
    bounds = [0, *sorted(cuts), len(_RESPONSES_BODY)]
    chunks = [_RESPONSES_BODY[a:b] for a, b in itertools.pairwise(bounds)]
    assert _updates(chunks, "openai-responses") == _WHOLE
    refs = [x.provider_data for x in _WHOLE if isinstance(x, u.ReasoningDelta) and x.provider_data]
    assert [r["type"] for r in refs] == [
        "reasoning",
        MESSAGE_REF,
        FUNCTION_CALL_REF,
        FUNCTION_CALL_REF,
    ]


def test_responses_text_only_in_output_text_done_after_reasoning_goes_back_paired() -> None:
    """A server that sends the text only in ``output_text.done`` (no delta), after a
    reasoning item: the text is kept once and goes back as the paired message item."""
    message = {
        "type": "message",
        "id": "msg_9",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
    }
    resp = {
        "id": "resp_1",
        "object": "response",
        "model": "o4-mini",
        "status": "in_progress",
        "output": [],
    }
    events = [
        ("response.created", {"response": resp}),
        ("response.output_item.done", {"output_index": 0, "item": _reasoning(1)}),
        ("response.output_item.added", {"output_index": 1, "item": {**message, "content": []}}),
        (
            "response.output_text.done",
            {"item_id": "msg_9", "output_index": 1, "content_index": 0, "text": "Hello."},
        ),
        ("response.output_item.done", {"output_index": 1, "item": message}),
        (
            "response.completed",
            {"response": {**resp, "status": "completed", "output": [_reasoning(1), message]}},
        ),
    ]
    body = "".join(_ev(k, {"type": k, **v}) for k, v in events).encode()
    response = aggregated(body, "openai-responses")
    assert response.text == "Hello."
    [assistant] = response.turn_transcript
    items = to_responses_input([M.user("q"), assistant, M.user("again")])
    assert [i.get("type") for i in items] == [None, "reasoning", "message", None]
    assert items[2]["id"] == "msg_9"
    assert items[2]["content"][0]["text"] == "Hello."


# ================================================================ chat provider data


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
    }


def _chat_body(*chunks: dict[str, Any]) -> bytes:
    return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


def test_openrouter_reasoning_details_survive_an_openai_json_history() -> None:
    """to_openai / from_openai are documented inverses (the module docstring); a history
    kept in the OpenAI format (AgentResponse.to_dict, a chat-format store) must give back
    the reasoning_details OpenRouter needs in the tool loop, as it does the Gemini
    extra_content beside them."""
    details = (
        {
            "type": REASONING_DETAILS,
            "details": [{"type": "reasoning.encrypted", "data": "ENC", "index": 0}],
        },
    )
    extra = (
        {
            "type": "tool_call_extra",
            "call_id": "c1",
            "extra_content": {"google": {"thought_signature": "S"}},
        },
    )
    message = M(
        "assistant",
        "",
        tool_calls=[ToolCall("c1", "f", {})],
        provider_data={REASONING_DETAILS: details, OPENAI_CALL_EXTRA: extra},
    )
    wire = json.loads(json.dumps(message.to_openai()))
    again = M.from_openai(wire)
    assert again.to_openai() == wire
    assert again == message


def test_openrouter_reasoning_details_stay_out_of_anthropic_and_responses() -> None:
    details = (
        {
            "type": REASONING_DETAILS,
            "details": [{"type": "reasoning.text", "text": "t", "signature": "S"}],
        },
    )
    messages = [
        M.user("q"),
        M(
            "assistant",
            "",
            tool_calls=[ToolCall("c1", "f", {})],
            provider_data={REASONING_DETAILS: details},
        ),
        M.tool("r", "c1"),
    ]
    assert "reasoning.text" not in json.dumps(to_anthropic(messages))
    assert "reasoning.text" not in json.dumps(to_responses_input(messages))
    assert all_problems(messages)["anthropic"] == []


# ================================================================ same-name restart heuristic


def _split(deltas: Sequence[u.ToolCallDelta]) -> list[tuple[str, str]]:
    """(name, arguments) of each call the splitter makes of ``deltas``."""
    splitter = LegacyDeltaSplitter()
    out: list[Any] = []
    for delta in deltas:
        out += splitter.step(delta)
    out += splitter.step(u.Finish(FinishReason.TOOL_CALLS))
    calls_: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for update in out:
        if isinstance(update, u.ToolCallStart):
            calls_[update.id], names[update.id] = [], update.name
        elif isinstance(update, u.ToolCallArgs):
            calls_[update.id].append(update.args_delta)
    return [(names[i], "".join(a)) for i, a in calls_.items()]


_ARGS = st.dictionaries(
    st.text("abc", min_size=1, max_size=3),
    st.recursive(
        st.integers() | st.text('{}[]",: ab', max_size=4),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text("ab{", max_size=2), inner, max_size=3)
        ),
        max_leaves=6,
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(_ARGS, st.data())
def test_a_name_repeated_on_every_fragment_never_splits_one_call(
    arguments: dict[str, Any], data: st.DataObject
) -> None:
    """A provider that repeats the function name on every fragment of one call (no id):
    however the arguments are cut, it stays one call."""
    whole = json.dumps(arguments)
    cuts = sorted(data.draw(st.lists(st.integers(1, len(whole) - 1), max_size=12, unique=True)))
    bounds = [0, *cuts, len(whole)]
    pieces = [whole[a:b] for a, b in itertools.pairwise(bounds)]
    deltas = [u.ToolCallDelta(0, None, "f", p) for p in pieces]
    assert _split(deltas) == [("f", whole)]


def test_same_name_whole_calls_at_index_0_split_and_different_names_too() -> None:
    deltas = [
        u.ToolCallDelta(0, None, "f", '{"a": 1}'),
        u.ToolCallDelta(0, None, "f", '{"a": 2}'),
        u.ToolCallDelta(0, None, "g", "{}"),
        u.ToolCallDelta(0, None, "f", "  {}"),
    ]
    assert _split(deltas) == [("f", '{"a": 1}'), ("f", '{"a": 2}'), ("g", "{}"), ("f", "  {}")]


def test_a_name_repeated_on_every_fragment_stays_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """30 000 fragments of one call's arguments (an array of objects, each fragment
    starting with ``{``, the name on each): the restart check must not parse the
    arguments again at each of them (quadratic), so it parses at most once."""
    from rafrx.operators import _split_legacy_delta as splitter

    parsed: list[int] = []
    real_loads = json.loads

    def counting_loads(text: str) -> Any:
        parsed.append(len(text))
        return real_loads(text)

    monkeypatch.setattr(splitter.json, "loads", counting_loads)
    n = 30_000
    deltas = [u.ToolCallDelta(0, None, "f", '{"items": [')]
    deltas += [u.ToolCallDelta(0, None, "f", '{"a": 1}, ') for _ in range(n)]
    deltas.append(u.ToolCallDelta(0, None, "f", '{"a": 1}]}'))
    made = _split(deltas)
    monkeypatch.undo()
    assert len(made) == 1
    assert len(json.loads(made[0][1])["items"]) == n + 1
    assert sum(parsed) <= 100  # (a linear splitter parses nothing here)


# ================================================================ paired()


def test_paired_keeps_results_with_empty_string_ids_of_id_less_calls() -> None:
    """The conversation of tests/test_messages_wire_edges.py's "" id test, as an agent loads
    it (every loaded history goes through paired())."""
    messages = [
        M.from_openai(d)
        for d in [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "", "type": "function", "function": {"name": "now", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "", "content": "12:00"},
        ]
    ]
    fixed = paired(messages)
    assert [m.content for m in fixed] == ["q", "", "12:00"]
    problems = all_problems(fixed)
    assert problems["anthropic"] == []
    assert problems["openai-responses"] == []


def test_paired_keeps_the_results_of_a_message_mixing_legacy_and_id_calls() -> None:
    messages = [
        M.user("q"),
        M.assistant_with_tools(
            "", [ToolCall("", "now", {}), ToolCall("c2", "lookup", {"city": "Oslo"})]
        ),
        M("tool", "12:00", name="now"),
        M.tool("Oslo: sun", "c2"),
    ]
    fixed = paired(messages)
    assert [m.content for m in fixed] == ["q", "", "12:00", "Oslo: sun"]
    problems = all_problems(fixed)
    assert problems["anthropic"] == []
    assert problems["openai-responses"] == []


def test_paired_answers_two_calls_sharing_an_id_with_their_own_results() -> None:
    messages = [
        M.user("q"),
        M.assistant_with_tools("", [ToolCall("c1", "f", {"n": 1}), ToolCall("c1", "f", {"n": 2})]),
        M.tool("one", "c1"),
        M.tool("two", "c1"),
    ]
    fixed = paired(messages)
    assert [m.content for m in fixed if m.role is MessageRole.TOOL] == ["one", "two"]


def test_paired_repairs_results_before_calls_missing_results_and_strays() -> None:
    call = ToolCall("c1", "f", {})
    messages = [
        M.tool("early", "c1"),
        M.user("q"),
        M.assistant_with_tools("", [call, ToolCall("c2", "g", {})]),
        M.tool("stray", "zz"),
        M.tool("second", "c2"),
        M.user("next"),
        M.tool("late", "c1"),
    ]
    fixed = paired(messages)
    assert [(m.role.value, m.tool_call_id, m.content) for m in fixed] == [
        ("user", None, "q"),
        ("assistant", None, ""),
        ("tool", "c1", LOST_RESULT),
        ("tool", "c2", "second"),
        ("user", None, "next"),
    ]
    assert fixed[2].is_error


def test_paired_leaves_a_legacy_function_call_and_its_answer_alone() -> None:
    messages = [
        M.user("q"),
        M.from_openai({"role": "assistant", "function_call": {"name": "now", "arguments": "{}"}}),
        M.from_openai({"role": "function", "name": "now", "content": "12:00"}),
    ]
    assert paired(messages) == messages


@st.composite
def broken_histories(draw: st.DrawFn) -> list[ChatMessage]:
    """A valid conversation whose tool results were then dropped, duplicated, moved or
    reordered (a save failed half-way, rows edited)."""
    messages = draw(conversations())
    tools = [i for i, m in enumerate(messages) if m.role is MessageRole.TOOL]
    for _ in range(draw(st.integers(0, 4))):
        if not tools:
            break
        i = draw(st.sampled_from(tools))
        action = draw(st.sampled_from(["drop", "dup", "move"]))
        if action == "drop":
            messages[i] = M.user("(dropped)")
        elif action == "dup":
            messages.insert(i, messages[i])
        else:
            target = draw(st.integers(0, len(messages)))
            messages.insert(target, messages.pop(i))
        tools = [k for k, m in enumerate(messages) if m.role is MessageRole.TOOL]
    return messages


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_histories())
def test_paired_history_is_accepted_by_every_api_and_paired_is_idempotent(
    messages: list[ChatMessage],
) -> None:
    fixed = paired(messages)
    assert paired(fixed) == fixed
    problems = all_problems(fixed)
    assert problems == {"openai-chat": [], "anthropic": [], "openai-responses": []}


# ================================================================ agent: one turn at a time


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"


def _answer_respond(messages: tuple[ChatMessage, ...]) -> list[u.AgentResponseUpdate]:
    asked = last_user(messages)
    if messages[-1].role is MessageRole.TOOL:
        return text(f"{asked}: {messages[-1].content}")
    return calls(("functions.remove:0", "remove", {"path": f"/tmp/{asked}"}))


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_after_a_turn_is_disposed_waiting_for_approval_the_next_turn_gets_its_own() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    agent = Agent(Client(_answer_respond), tools=[remove], approver=answers)
    asked: list[ToolApprovalRequestEvent] = []
    first = agent.run("A").subscribe(
        lambda r: asked.extend(e for e in r.events if isinstance(e, ToolApprovalRequestEvent))
    )
    async with asyncio.timeout(GUARD):
        while not asked:
            await asyncio.sleep(0.001)
    first.dispose()  # the user closed that view while asked

    def approve(result: AgentResponseResult) -> None:
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                answers.on_next(ToolApprovalResponse(event.call_id, True))

    response = await asyncio.wait_for(
        agent.run("B").pipe(rx.do_action(approve), ops.aggregate()), GUARD
    )
    assert response.text == "B: removed /tmp/B"
    assert agent._turns == set()


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_after_a_failed_or_cancelled_turn_the_next_turn_may_start() -> None:
    answers: Subject[ToolApprovalResponse] = Subject()
    failing = True

    def respond(messages: tuple[ChatMessage, ...]) -> list[u.AgentResponseUpdate]:
        if failing:
            return [u.TextDelta("It"), u.Error("overloaded", error_type="overloaded")]
        return text("fine")

    agent = Agent(Client(respond), tools=[remove], approver=answers)
    with pytest.raises(Exception, match="overloaded"):
        await asyncio.wait_for(agent.send("one"), GUARD)
    sending = asyncio.ensure_future(agent.send("two"))
    await asyncio.sleep(0)
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    failing = False
    assert (await asyncio.wait_for(agent.send("three"), GUARD)).text == "fine"
    # and a turn started from the previous one's on_completed is not refused
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def next_turn() -> None:
        agent.run("four").pipe(ops.aggregate()).subscribe(
            lambda r: done.set_result(r.text), lambda e: done.set_exception(e)
        )

    agent.run("three").subscribe(on_completed=next_turn)
    assert await asyncio.wait_for(done, GUARD) == "fine"


@pytest.mark.timeout(30)
@pytest.mark.asyncio
async def test_a_second_turn_while_one_runs_is_refused_clearly_with_an_observable_approver() -> (
    None
):
    answers: Subject[ToolApprovalResponse] = Subject()
    agent = Agent(Client(_answer_respond), tools=[remove], approver=answers)
    first = agent.run("A").subscribe()
    with pytest.raises(RuntimeError, match="one at a time"):
        await asyncio.wait_for(agent.send("B"), GUARD)
    first.dispose()
    assert agent._turns == set()


# ================================================================ Outcome, LLMServer


def test_outcome_settled_after_its_loop_closed_is_ignored_from_any_thread() -> None:
    async def make() -> Outcome[int]:
        return Outcome()

    outcome = asyncio.run(make())  # (asyncio.run closes the loop)
    outcome.set_result(1)
    outcome.set_exception(RuntimeError("late"))
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            outcome.set_result(2)
        except BaseException as exc:  # pragma: no cover - the failure being tested
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert errors == []
    assert not outcome.done()


@pytest.mark.asyncio
async def test_outcome_first_settlement_wins_across_threads() -> None:
    outcome: Outcome[str] = Outcome()
    threads = [threading.Thread(target=outcome.set_result, args=(f"t{n}",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcome.set_exception(RuntimeError("after"))
    assert (await asyncio.wait_for(outcome.wait(), GUARD)).startswith("t")


@pytest.mark.asyncio
async def test_keep_requests_zero_still_counts_and_waits() -> None:
    async with (
        LLMServer(keep_requests=0) as server,
        OpenAIResponsesClient(server.url, "sk", model="m") as client,
    ):
        agent = Agent(client)
        for n in range(3):
            await asyncio.wait_for(agent.send(f"hi {n}"), GUARD)
        await server.wait_requests(3, timeout=GUARD)
        assert server.requests == []
        assert server.request_count == 3
        assert "requests=3" in repr(server)
        server.reset()
        assert server.request_count == 0
    with pytest.raises(ValueError, match="keep_requests"):
        LLMServer(keep_requests=-1)
