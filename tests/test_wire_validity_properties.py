"""Any history a user can build goes out as a request its provider accepts.

Property-based: hypothesis builds *arbitrary* conversations (system messages
anywhere, any order of roles, runs of one role, empty and whitespace-only
text, calls with any ids: duplicated, empty, long, non-ASCII, other providers'
``functions.lookup:0`` / ``toolu_…`` / ``call_…`` / ``fc_…``; results before
their call, without a call, missing, failed; reasoning; the ``provider_data``
blocks the dialects keep, taken from real streams (``render`` →
``from_sse(...).pipe(convert(), aggregate())``) and from Anthropic wire messages
with interleaved thinking read by ``from_anthropic``). The history is repaired
as the agent repairs a loaded one (:func:`rafrx.messages.paired`), and each
client's ``_payload`` (then ``_complete``, as ``stream`` does) must follow the
provider's rules, checked here more strictly than ``tests/test_agent_wire.py``
(merged same-role turns, ids in full, lengths, every item id once) and against
the official SDK request types (``tests/test_sdk_request_types.body_problems``).

Rules and where they come from:

Anthropic Messages
    consecutive same-role turns are merged by the API (the SDK's own docstring
    of ``messages``: "Consecutive user or assistant turns in your request will
    be combined into a single turn"), so the rules below hold on merged turns;
    the first turn need not be a user turn any more (anthropic-sdk-typescript
    #622: an assistant-first request succeeds on the first-party API), so that
    is not asserted. Every ``tool_use`` is answered by a ``tool_result`` at the
    start of the next turn and every ``tool_result`` answers a ``tool_use`` of
    the turn before ("tool_use ids were found without tool_result blocks
    immediately after", "unexpected tool_use_id"); ids match
    ``^[a-zA-Z0-9_-]+$`` in full and are unique; no empty content, no blank
    text block; the final assistant turn does not end with whitespace.

OpenAI chat completions
    a ``tool`` message follows, in one run, the assistant message whose
    ``tool_calls`` name its id, and answers each call once ("Duplicate value for
    'tool_call_id'", agno-agi/agno#5116); no tool message without a call; ids
    non-empty and at most 40 characters ("string too long. Expected a string
    with maximum length 40"); never ``tool_calls: []``; ``content`` null only
    beside calls.

OpenAI Responses
    every ``function_call_output`` comes after the ``function_call`` with its
    ``call_id`` ("No tool call found for function call output"), every call
    has its output; call ids unique, non-empty, at most 64 characters; no item
    id twice ("Duplicate item found with id", vercel/ai#13307), which covers a
    reasoning item sent twice; a reasoning item is followed by an item that is
    not a tool output.

Beyond the rules: nothing the user said is silently dropped (every non-blank
user text and every tool result goes out, and each result ``paired`` drops is
logged, as its docstring says).

Three shapes were bugs the hunt that wrote this file found, now fixed and
generated like the rest: an id-less call or result (OpenAI's legacy
``function_call`` / ``function`` message, ``tool_call_id`` ``None`` or ``""``)
that is not answered or answers nothing right before it, which ``paired`` left
as it was; two calls sharing one id in one assistant message, which went to
chat completions as they were; and an id of 61 to 64 characters used twice,
which the Responses API got made unique but too long.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rafrx.messages import (
    LOST_RESULT,
    ChatMessage,
    MessageRole,
    ToolCall,
    from_anthropic,
    paired,
    to_anthropic,
    to_openai_chat,
)
from rafrx.operators import aggregate, convert
from rafrx.sources import from_sse
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.testing import Reply, ToolCallSpec
from rafrx.testing._render import render
from tests.test_sdk_request_types import body_problems

M = ChatMessage
FORMATS = ("openai-chat", "anthropic", "openai-responses")
CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _wire(value: Any) -> Any:
    """``value`` as it goes over HTTP and is parsed back (strict JSON)."""
    return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))


def body(fmt: str, messages: Sequence[ChatMessage], **fields: Any) -> dict[str, Any]:
    """The body the ``fmt`` client sends for ``messages`` with the call's ``fields``
    (``_payload``, the fields, then ``_complete``, as ``stream`` builds it), parsed back."""
    client = CLIENTS[fmt]("http://127.0.0.1:1", model="m")
    payload = client._payload(list(messages), [])
    payload.update(fields)
    payload["stream"] = True
    return _wire(client._complete(payload))


# ---------------------------------------------------------------- the providers' rules

_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
_CHAT_ID_MAX = 40
_RESPONSES_ID_MAX = 64


def _merged(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """Anthropic's turns: consecutive messages of one role combined, as the API does."""
    turns: list[tuple[str, list[Any]]] = []
    for message in messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if turns and turns[-1][0] == message["role"]:
            turns[-1][1].extend(blocks)
        else:
            turns.append((message["role"], list(blocks)))
    return turns


def anthropic_problems(payload: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    messages = payload["messages"]
    system = payload.get("system")
    if system is not None and not (isinstance(system, str) and system.strip()):
        problems.append(f"system {system!r}")
    if not messages:
        problems.append("no messages")
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            problems.append(f"messages.{i}: role {message.get('role')!r}")
        if not message.get("content"):
            problems.append(f"messages.{i}: empty content")
    ids: list[str] = []
    uses_before: list[str] = []
    turns = _merged(messages)
    for t, (role, blocks) in enumerate(turns):
        kinds = [b.get("type") for b in blocks]
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        leading = len(results) if kinds[: len(results)] == ["tool_result"] * len(results) else -1
        if leading < 0:
            problems.append(f"turn {t}: tool_result blocks not first")
        if sorted(results) != sorted(uses_before):
            problems.append(f"turn {t}: results {results} for tool_use ids {uses_before}")
        if len(set(results)) != len(results):
            problems.append(f"turn {t}: a tool_use answered twice {results}")
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        if uses and role != "assistant":
            problems.append(f"turn {t}: tool_use in a {role} turn")
        if results and role != "user":
            problems.append(f"turn {t}: tool_result in a {role} turn")
        for block in blocks:
            kind = block.get("type")
            if kind == "text" and not str(block.get("text", "")).strip():
                problems.append(f"turn {t}: blank text block {block.get('text')!r}")
            if kind == "tool_use":
                ids.append(block.get("id"))
                if not _ANTHROPIC_ID.fullmatch(str(block.get("id"))):
                    problems.append(f"turn {t}: tool_use id {block.get('id')!r}")
                if not isinstance(block.get("input"), dict):
                    problems.append(f"turn {t}: tool_use input {block.get('input')!r}")
            if kind == "tool_result":
                content = block.get("content")
                if not isinstance(content, str):
                    problems.append(f"turn {t}: tool_result content {content!r}")
                elif block.get("is_error") and not content.strip():
                    problems.append(f"turn {t}: blank content of a failed tool_result")
            if kind == "thinking" and not block.get("signature"):
                problems.append(f"turn {t}: thinking without a signature")
        uses_before = uses
    if uses_before:
        problems.append(f"end: tool_use ids {uses_before} without tool_result blocks")
    if len(ids) != len(set(ids)):
        problems.append(f"duplicate tool_use ids {ids}")
    if turns and turns[-1][0] == "assistant":
        last = turns[-1][1][-1]
        if last.get("type") == "text" and last.get("text") != last.get("text", "").rstrip():
            problems.append("the final assistant content ends with whitespace")
    return problems


def chat_problems(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    problems: list[str] = []
    open_calls: dict[str, int] | None = None  # the run's calls → answers still owed
    legacy: str | None = None  # the name of a legacy function_call waiting for its answer
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool", "function"):
            problems.append(f"messages.{i}: role {role!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if open_calls is None:
                problems.append(f"messages.{i}: tool message {call_id!r} follows no tool_calls")
            elif open_calls.get(call_id, 0) < 1:
                problems.append(f"messages.{i}: tool message {call_id!r} answers no open call")
            else:
                open_calls[call_id] -= 1
            if not isinstance(message.get("content"), str):
                problems.append(f"messages.{i}: tool content {message.get('content')!r}")
            continue
        if open_calls and any(open_calls.values()):
            problems.append(f"messages.{i}: calls {open_calls} not answered")
        open_calls = None
        if role == "function":
            if legacy is None or message.get("name") != legacy:
                problems.append(f"messages.{i}: function message answers no function_call")
            legacy = None
            continue
        legacy = None
        content = message.get("content")
        if "tool_calls" in message:
            calls = message["tool_calls"]
            if not calls:
                problems.append(f"messages.{i}: empty tool_calls")
            ids = [c.get("id") for c in calls]
            if len(set(ids)) != len(ids):
                problems.append(f"messages.{i}: duplicate call ids {ids}")
            for call_id in ids:
                if not isinstance(call_id, str) or not call_id or len(call_id) > _CHAT_ID_MAX:
                    problems.append(f"messages.{i}: call id {call_id!r}")
            open_calls = {call_id: ids.count(call_id) for call_id in ids}
            if content is not None and not isinstance(content, str):
                problems.append(f"messages.{i}: content {content!r}")
        elif "function_call" in message:
            legacy = message["function_call"].get("name")
            if content is not None and not isinstance(content, str):
                problems.append(f"messages.{i}: content {content!r}")
        elif not isinstance(content, str):
            problems.append(f"messages.{i}: content {content!r} without calls")
    if open_calls and any(open_calls.values()):
        problems.append(f"end: calls {open_calls} not answered")
    return problems


def responses_problems(items: Sequence[Mapping[str, Any]]) -> list[str]:
    problems: list[str] = []
    calls: list[str] = []
    outputs: list[str] = []
    item_ids: list[str] = []
    for i, item in enumerate(items):
        kind = item.get("type")
        if isinstance(item.get("id"), str):
            item_ids.append(item["id"])
        if kind in ("function_call", "custom_tool_call"):
            call_id = item.get("call_id")
            calls.append(call_id)
            if not isinstance(call_id, str) or not call_id or len(call_id) > _RESPONSES_ID_MAX:
                problems.append(f"input.{i}: call_id {call_id!r}")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if call_id not in calls:
                problems.append(f"input.{i}: no tool call found for output {call_id!r}")
            if call_id in outputs:
                problems.append(f"input.{i}: {call_id!r} answered twice")
            outputs.append(call_id)
            if not isinstance(item.get("output"), str):
                problems.append(f"input.{i}: output {item.get('output')!r}")
        elif kind == "reasoning":
            following = items[i + 1].get("type") if i + 1 < len(items) else "end"
            if following in ("end", "function_call_output", "custom_tool_call_output"):
                problems.append(f"input.{i}: reasoning item without its following item")
        elif kind in (None, "message") and item.get("role") not in (
            "user",
            "assistant",
            "system",
            "developer",
        ):
            problems.append(f"input.{i}: role {item.get('role')!r}")
    missing = [c for c in calls if c not in outputs]
    if missing:
        problems.append(f"no tool output found for function calls {missing}")
    if len(calls) != len(set(calls)):
        problems.append(f"duplicate call ids {calls}")
    if len(item_ids) != len(set(item_ids)):
        problems.append(f"duplicate item ids {item_ids}")
    return problems


#: Documented (README, "Tool loops the providers accept"): a call's Gemini
#: ``thought_signature`` goes back in its ``extra_content``, which the OpenAI SDK type
#: lacks (as ``body_problems`` leaves out DeepSeek's ``reasoning_content``).
GEMINI_EXTENSION = "has no field 'extra_content'"


def all_problems(messages: Sequence[ChatMessage]) -> dict[str, list[str]]:
    """Every provider rule and SDK-type problem of each client's body for ``messages``."""
    chat, anthropic, responses = (body(fmt, messages) for fmt in FORMATS)
    unstored = body("openai-responses", messages, store=False)
    found = {
        "openai-chat": chat_problems(chat["messages"])
        + [p for p in body_problems("openai-chat", chat) if GEMINI_EXTENSION not in p],
        "anthropic": anthropic_problems(anthropic) + body_problems("anthropic", anthropic),
        "openai-responses": responses_problems(responses["input"])
        + body_problems("openai-responses", responses)
        + responses_problems(unstored["input"])
        + body_problems("openai-responses", unstored),
    }
    return {fmt: problems for fmt, problems in found.items() if problems}


# ---------------------------------------------------------------- strategies

#: Ids as providers make them, and as nobody should: each drawn from a small pool so
#: that they collide across and within messages.
_FOREIGN_IDS = (
    "call_1",
    "call_abc123",
    "toolu_01A09q90qw90lq917835lq9",
    "functions.lookup:0",
    "functions.lookup:1",
    "fc_68d1",
    "chatcmpl-tool-" + "0" * 32,  # vLLM: 46 characters
    "x" * 64,
    "y" * 65,
    "é中😀",
    "a b",
    "tab\there",
    "-",
    "_",
    "call_1 ",
)
ids = st.sampled_from(_FOREIGN_IDS) | st.text(min_size=1, max_size=6) | st.text("ab:.", min_size=1)
texts = st.sampled_from(["", " ", "\n\t", "hi", "hi ", " hi\n", "é中😀", "Error"]) | st.text(
    max_size=6
)
names = st.sampled_from(["lookup", "read_file", "f-1"])
arguments = st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=3), max_size=2)


def _stream(reply: Reply, fmt: str) -> ChatMessage:
    """The assistant message a real ``fmt`` stream of ``reply`` leaves in a transcript."""
    found: list[Any] = []
    from_sse([render(reply, fmt)], dialect=fmt).pipe(convert(), aggregate()).subscribe(found.append)
    return found[0].turn_transcript[0]


@st.composite
def streamed_assistant(draw: st.DrawFn) -> ChatMessage:
    """An assistant message as a real stream of any dialect builds it (reasoning items,
    message and call refs, thinking signatures), calls with the drawn ids."""
    fmt = draw(st.sampled_from(FORMATS))
    # (one response's calls have distinct ids: duplicates in a message come from
    # plain_assistant; a stream with two tool_use blocks of one id is another matter)
    call_ids = draw(st.lists(ids, max_size=3, unique=True))
    calls = [ToolCallSpec(draw(names), draw(arguments), id=call_id) for call_id in call_ids]
    reply = Reply(
        text=draw(st.sampled_from(["", "Checking.", "Done. "])),
        reasoning=draw(st.sampled_from(["", "Think.", "Plan it."])),
        tool_calls=calls,
    )
    return _stream(reply, fmt)


@st.composite
def interleaved_anthropic(draw: st.DrawFn) -> ChatMessage:
    """An Anthropic assistant message with thinking between its text and calls (as a
    stored Anthropic history holds it), read by ``from_anthropic``."""
    blocks: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["thinking", "redacted", "text", "tool_use"]))
        if kind == "thinking":
            blocks.append({"type": "thinking", "thinking": draw(texts), "signature": "sig=="})
        elif kind == "redacted":
            blocks.append({"type": "redacted_thinking", "data": "ZGF0YQ=="})
        elif kind == "text":
            blocks.append({"type": "text", "text": draw(texts)})
        else:
            blocks.append(
                {"type": "tool_use", "id": draw(ids), "name": draw(names), "input": draw(arguments)}
            )
    [message] = from_anthropic(None, [{"role": "assistant", "content": blocks}])
    return message


@st.composite
def chat_assistant(draw: st.DrawFn) -> ChatMessage:
    """An assistant message of a stored chat-completions history, read by ``from_openai``:
    function calls with Gemini's ``extra_content``, custom tools' free-form calls, calls
    whose arguments are not JSON."""
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        call_id = draw(ids)
        kind = draw(st.sampled_from(["function", "gemini", "custom", "raw"]))
        if kind == "custom":
            calls.append(
                {"id": call_id, "type": "custom", "custom": {"name": "shell", "input": "ls -l"}}
            )
            continue
        raw = '{"a": ' if kind == "raw" else json.dumps(draw(arguments))
        call: dict[str, Any] = {
            "id": call_id,
            "type": "function",
            "function": {"name": draw(names), "arguments": raw},
        }
        if kind == "gemini":
            call["extra_content"] = {"google": {"thought_signature": "c2ln"}}
        calls.append(call)
    return M.from_openai({"role": "assistant", "content": draw(texts), "tool_calls": calls})


@st.composite
def plain_assistant(draw: st.DrawFn) -> ChatMessage:
    calls = [
        ToolCall(draw(ids), draw(names), draw(arguments | st.none() | st.just([1])))
        for _ in range(draw(st.integers(0, 3)))
    ]
    return M(
        MessageRole.ASSISTANT,
        draw(texts),
        name=draw(st.none() | st.just("bot")),
        tool_calls=calls or (None if draw(st.booleans()) else []),
        reasoning=draw(st.none() | texts),
    )


@st.composite
def histories(draw: st.DrawFn) -> list[ChatMessage]:
    """Any sequence of messages, the results' ids drawn mostly from the calls made so far
    (so that some answer, some answer the wrong call, twice, or too early) and some not."""
    units: list[list[ChatMessage]] = []
    made: list[str] = []
    for _ in range(draw(st.integers(1, 9))):
        kind = draw(
            st.sampled_from(
                ["system", "user", "assistant", "legacy", "again", "tool", "tool", "tool"]
            )
        )
        if kind == "system":
            units.append([M.system(draw(texts))])
        elif kind == "user":
            units.append([M(MessageRole.USER, draw(texts), name=draw(st.none() | st.just("ann")))])
        elif kind == "assistant":
            message = draw(
                plain_assistant()
                | streamed_assistant()
                | interleaved_anthropic()
                | chat_assistant()
            )
            made += [call.id for call in message.tool_calls or ()]
            units.append([message])
        elif kind == "again" and units:  # a row saved twice: the same messages once more
            units.append(list(draw(st.sampled_from(units))))
        elif kind == "legacy":  # OpenAI's function_call and function message: no ids
            name = draw(names)
            call = M.assistant_with_tools(draw(texts), [ToolCall("", name, draw(arguments))])
            answer = M(MessageRole.TOOL, draw(texts), name=name)
            # (answered right after, or not: its result lost, or come later on its own)
            units += [[call, answer]] if draw(st.booleans()) else [[call], [answer]]
        else:
            call_id = draw(st.sampled_from(made) | ids) if made else draw(ids)
            units.append([M.tool(draw(texts), call_id, is_error=draw(st.booleans()))])
    if draw(st.booleans()):  # a user's question, somewhere
        question = M.user(draw(texts.filter(str.strip)))
        units.insert(draw(st.integers(0, len(units))), [question])
    return [message for unit in units for message in unit]


def _said(messages: Sequence[ChatMessage]) -> bool:
    """Whether the conversation says anything Anthropic can take (it requires one message
    at least, and rafrx sends no blank text, by the API's own rule)."""
    return any(m.role is MessageRole.USER and m.content.strip() for m in messages)


def _quiet_paired(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    logger = logging.getLogger("rafrx.messages")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return paired(messages)
    finally:
        logger.setLevel(level)


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


# ---------------------------------------------------------------- properties


@PROPERTY
@given(histories())
def test_a_repaired_arbitrary_history_goes_to_every_provider_valid(
    history: list[ChatMessage],
) -> None:
    """The property of this file: any history, once ``paired`` (as the agent does with a
    loaded one), is a request each provider takes, by its rules and its SDK's types."""
    assume(_said(history))
    fixed = _quiet_paired(history)
    assert all_problems(fixed) == {}


@PROPERTY
@given(histories())
def test_a_well_paired_history_needs_no_repair_to_be_valid(history: list[ChatMessage]) -> None:
    """A history whose results already follow their calls (``paired`` changes nothing)
    goes out valid from the client itself, whatever its ids, roles and text."""
    assume(_said(history))
    fixed = _quiet_paired(history)
    assume(fixed == history)
    assert all_problems(history) == {}


@PROPERTY
@given(histories())
def test_paired_is_a_fixed_point_and_drops_only_orphans_and_logs_each(
    history: list[ChatMessage],
) -> None:
    """``paired`` once is enough; it keeps every message but tool results, keeps each
    result that answers a call of the assistant message before its run, and logs every
    result it drops and every call it answers for a lost result."""
    records: list[logging.LogRecord] = []
    handler = _Collect(records)
    logger = logging.getLogger("rafrx.messages")
    logger.addHandler(handler)
    try:
        fixed = paired(history)
    finally:
        logger.removeHandler(handler)
    assert paired(fixed) == fixed
    others = [m for m in history if m.role is not MessageRole.TOOL]
    assert [m for m in fixed if m.role is not MessageRole.TOOL] == others
    kept = [m for m in fixed if m.role is MessageRole.TOOL and m.content != LOST_RESULT]
    lost = [m for m in fixed if m.role is MessageRole.TOOL and m.content == LOST_RESULT]
    given_results = [m for m in history if m.role is MessageRole.TOOL]
    dropped = len(given_results) - len([m for m in kept if any(m is g for g in given_results)])
    warnings = [r for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == dropped + len([m for m in lost if m not in given_results])


@PROPERTY
@given(histories())
def test_nothing_the_user_said_is_dropped_on_any_wire(history: list[ChatMessage]) -> None:
    """Every non-blank user text and every tool result of the repaired history goes out,
    whole, to every provider (Anthropic gets a failed call's blank result as "Error")."""
    assume(_said(history))
    fixed = _quiet_paired(history)
    users = [m.content for m in fixed if m.role is MessageRole.USER and m.content.strip()]
    results = [
        (m.content if m.content.strip() or not m.is_error else "Error")
        for m in fixed
        if m.role is MessageRole.TOOL
    ]
    chat = to_openai_chat(fixed)
    assert [m["content"] for m in chat if m["role"] == "user" and m["content"].strip()] == users
    assert [m["content"] for m in chat if m["role"] in ("tool", "function")] == [
        m.content for m in fixed if m.role is MessageRole.TOOL
    ]
    _, wire = to_anthropic(fixed)
    user_texts = [
        b["text"] for m in wire if m["role"] == "user" for b in m["content"] if b["type"] == "text"
    ]
    assert user_texts == users
    sent_results = [b["content"] for m in wire for b in m["content"] if b["type"] == "tool_result"]
    assert sent_results == results
    items = to_responses_input(fixed)
    assert [i["content"] for i in items if i.get("role") == "user" and i["content"].strip()] == (
        users
    )
    assert [i["output"] for i in items if i.get("type") in _OUTPUTS] == [
        m.content for m in fixed if m.role is MessageRole.TOOL
    ]


_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _expected_pairs(messages: Sequence[ChatMessage]) -> list[str]:
    """The names of the calls the results of ``messages`` answer, in order: the n-th
    result of a run answers the n-th call of the assistant message before it."""
    expected: list[str] = []
    for k, message in enumerate(messages):
        if message.tool_calls:
            results = 0
            for after in messages[k + 1 :]:
                if after.role is not MessageRole.TOOL:
                    break
                results += 1
            expected += [c.name for c in message.tool_calls][:results]
    return expected


@PROPERTY
@given(histories())
def test_every_provider_gets_the_same_calls_and_results_in_the_same_order(
    history: list[ChatMessage],
) -> None:
    """The three wire forms carry one call per call of the history (same names, in
    order; the arguments as the call's JSON text, for Anthropic as the object) and one
    result per result, each with the call it answers: renaming ids never mixes pairs."""
    assume(_said(history))
    fixed = _quiet_paired(history)
    calls = [c for m in fixed for c in m.tool_calls or ()]
    expected = _expected_pairs(fixed)

    chat = to_openai_chat(fixed)
    chat_calls = [
        c.get("function") or c.get("custom")
        for m in chat
        for c in m.get("tool_calls")
        or ([{"function": m["function_call"]}] if "function_call" in m else [])
    ]
    assert [c["name"] for c in chat_calls] == [c.name for c in calls]
    for sent, call in zip(chat_calls, calls, strict=True):
        if "arguments" in sent:
            assert sent["arguments"] == call.arguments_json()
    answered: list[str] = []
    named: dict[str, str] = {}  # the ids of the assistant message before → their names
    for m in chat:
        if "tool_calls" in m:
            named = {
                c["id"]: (c.get("function") or c.get("custom"))["name"] for c in m["tool_calls"]
            }
        elif m["role"] == "tool":
            answered.append(named[m["tool_call_id"]])
        elif m["role"] == "function":
            answered.append(m["name"])
    assert answered == expected

    _, wire = to_anthropic(fixed)
    uses = [b for m in wire for b in m["content"] if b["type"] == "tool_use"]
    assert [b["name"] for b in uses] == [c.name for c in calls]
    for use, call in zip(uses, calls, strict=True):
        if isinstance(call.arguments, dict) and call.error is None:
            assert use["input"] == call.arguments
    named = {b["id"]: b["name"] for b in uses}
    results = [b["tool_use_id"] for m in wire for b in m["content"] if b["type"] == "tool_result"]
    assert [named[r] for r in results] == expected

    items = to_responses_input(fixed)
    sent_calls = [i for i in items if i.get("type") in _CALLS]
    # (as sorted lists: a custom call's ref stands where its output item did, so a chat
    # history's custom call may go before the function calls of its message)
    assert sorted(i["name"] for i in sent_calls) == sorted(c.name for c in calls)
    named = {i["call_id"]: i["name"] for i in sent_calls}
    outputs = [named[i["call_id"]] for i in items if i.get("type") in _OUTPUTS]
    assert sorted(outputs) == sorted(expected)


# ---------------------------------------------------------------- concrete anchors


def test_the_checkers_catch_what_the_providers_refuse() -> None:
    """The rules above are failable: each catches a body the provider is known to refuse."""
    found = anthropic_problems(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "a:b", "name": "f", "input": {}}],
                },
                {"role": "user", "content": [{"type": "text", "text": " "}]},
                {"role": "assistant", "content": [{"type": "text", "text": "end "}]},
            ]
        }
    )
    assert any("tool_use id 'a:b'" in p for p in found)
    assert any("results [] for tool_use ids" in p for p in found)
    assert any("blank text block" in p for p in found)
    assert any("ends with whitespace" in p for p in found)
    chat = chat_problems(
        [
            {"role": "tool", "tool_call_id": "c0", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c" * 41,
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    },
                    {"id": "d", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "d", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                ],
            },
            {"role": "user", "content": "hi"},
        ]
    )
    assert any("follows no tool_calls" in p for p in chat)
    assert any("call id 'ccc" in p for p in chat)
    assert any("duplicate call ids" in p for p in chat)
    assert any("not answered" in p for p in chat)
    responses = responses_problems(
        [
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        ]
    )
    assert any("no tool call found for output 'c1'" in p for p in responses)
    assert any("duplicate item ids" in p for p in responses)
    assert any("no tool output found" in p for p in responses)


def test_ids_of_every_provider_go_valid_to_every_provider() -> None:
    """One call per foreign id, each answered: every id shape goes out valid everywhere."""
    history = [M.user("go")]
    for n, call_id in enumerate(_FOREIGN_IDS):
        history += [
            M.assistant_with_tools("", [ToolCall(call_id, "lookup", {"n": n})]),
            M.tool(f"r{n}", call_id),
        ]
    assert all_problems(history) == {}


# ---------------------------------------------------------------- the bugs this hunt found


def test_id_less_results_and_calls_are_paired_like_the_others() -> None:
    """A legacy ``function`` result that answers no call (its ``function_call`` trimmed
    away, or ``tool_call_id=""``) is dropped, and a legacy call whose result was lost,
    or came after another message, is answered with :data:`LOST_RESULT`: Anthropic
    ("unexpected tool_use_id", "tool_use ids were found without tool_result blocks")
    and the Responses API ("No tool call found for function call output") refuse
    either."""
    legacy = M.assistant_with_tools("", [ToolCall("", "now", {})])
    answer = M(MessageRole.TOOL, "12:00", name="now")
    for history in (
        [M.user("What time is it?"), answer],
        [M.user("What time is it?"), M.tool("12:00", "")],
        [M.user("What time is it?"), legacy, M.user("Well?")],
        [M.user("q"), legacy, M.user("hurry"), answer],
    ):
        fixed = _quiet_paired(history)
        assert all_problems(fixed) == {}
        results = [m for m in fixed if m.role is MessageRole.TOOL]
        assert [m.content for m in results] == ([LOST_RESULT] if legacy in history else [])
    kept = _quiet_paired([M.user("q"), legacy, answer])
    assert kept == [M.user("q"), legacy, answer]
    assert to_openai_chat(kept)[2] == {"role": "function", "name": "now", "content": "12:00"}


def test_two_calls_with_one_id_in_a_message_go_to_chat_as_two() -> None:
    """OpenAI refuses "Duplicate value for 'tool_call_id'" (agno-agi/agno#5116,
    openclaw/openclaw#40897; DeepSeek: BuilderIO/agent-native#2312): the second call
    gets an id of its own, and its result with it; ids repeated across steps (Kimi's
    ``functions.edit:0``) stay as they are."""
    calls = [ToolCall("edit:22", "edit", {"a": 1}), ToolCall("edit:22", "edit", {"a": 2})]
    step = [M.assistant_with_tools("", calls), M.tool("one", "edit:22"), M.tool("two", "edit:22")]
    wire = to_openai_chat([M.user("q"), *step, *step])
    ids = [c["id"] for c in wire[1]["tool_calls"]]
    assert ids == ["edit:22", "edit:22_1"]
    assert [m["tool_call_id"] for m in wire[2:4]] == ids
    assert [c["id"] for c in wire[4]["tool_calls"]] == ids  # (the next step: the same)
    assert [(m["tool_call_id"], m["content"]) for m in wire[5:]] == [
        (ids[0], "one"),
        (ids[1], "two"),
    ]
    assert chat_problems(wire) == []


def test_a_reused_id_near_64_characters_stays_within_64_for_the_responses_api() -> None:
    """A unique id's suffix (``_1``) took a 63 or 64 character id past the 64 the Responses
    API takes ("string too long. Expected a string with maximum length 64":
    decolua/9router#393, NousResearch/hermes-agent#73492)."""
    for long_id in ("x" * 64, "c" * 63):
        history = [
            M.user("q"),
            M.assistant_with_tools("", [ToolCall(long_id, "f", {}), ToolCall(long_id, "f", {})]),
            M.tool("a", long_id),
            M.tool("b", long_id),
            M.assistant_with_tools("", [ToolCall(long_id, "f", {})]),
            M.tool("c", long_id),
        ]
        items = to_responses_input(history)
        call_ids = [i["call_id"] for i in items if i.get("type") == "function_call"]
        outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
        assert call_ids == outputs
        assert len(set(call_ids)) == 3
        assert all(len(i) <= 64 for i in call_ids)
        assert responses_problems(items) == []


def test_a_system_message_among_results_goes_after_them() -> None:
    """[assistant(c1, c2), tool c1, system, tool c2]: the run of results goes on past
    the system message (it goes after them), instead of answering c2 as lost and
    dropping its real result."""
    history = [
        M.user("q"),
        M.assistant_with_tools("", [ToolCall("c1", "f", {}), ToolCall("c2", "f", {})]),
        M.tool("one", "c1"),
        M.system("Context: the user is in Paris."),
        M.tool("two", "c2"),
    ]
    fixed = paired(history)
    assert [(m.role.value, m.content) for m in fixed[2:]] == [
        ("tool", "one"),
        ("tool", "two"),
        ("system", "Context: the user is in Paris."),
    ]
    assert all_problems(fixed) == {}
