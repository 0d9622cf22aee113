"""Hypothesis strategies for rafrx values, wire messages and update streams.

The strategies build *logical* values (a chat message, one LLM call with its
text and tool calls) and separately the many ways a provider may stream them
(split anywhere, interleaved, legacy index-keyed deltas or Start/Args/End), so
property tests can check that the way a stream is cut never changes what it
means.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import attrs
from hypothesis import strategies as st

from rafrx import updates as u
from rafrx.messages import ANTHROPIC_THINKING, ChatMessage, MessageRole, MessageSource, ToolCall
from rafrx.response import FinishReason, Usage

__all__ = [
    "LLMCall",
    "PlannedCall",
    "anthropic_conversations",
    "argument_objects",
    "chunks",
    "json_values",
    "stored_calls",
    "stored_messages",
    "llm_calls",
    "messy_updates",
    "openai_messages",
    "start_args_updates",
    "legacy_updates",
    "unicode_text",
]

#: Characters that stress encoders: quotes, escapes, controls, line separators,
#: BMP and astral (surrogate-pair) code points.
_TRICKY = '"\\/\n\r\t\b\f\x00\x1f\x7f é中\u2028\u2029\ufeff😀𝄞🇫🇷\U0010ffff'


def unicode_text(*, min_size: int = 0, max_size: int = 20) -> st.SearchStrategy[str]:
    """Text mixing arbitrary (non-surrogate) code points with hand-picked tricky ones."""
    return st.one_of(
        st.text(min_size=min_size, max_size=max_size),
        st.text(alphabet=_TRICKY + "ab", min_size=min_size, max_size=max_size),
    )


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value ``json.loads`` gives back equal (no NaN: it is not equal to itself)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False),
        unicode_text(),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(unicode_text(max_size=6), inner, max_size=4),
        ),
        max_leaves=max_leaves,
    )


def argument_objects(max_size: int = 5, max_leaves: int = 8) -> st.SearchStrategy[dict[str, Any]]:
    """A tool call's arguments: a JSON object with unique keys and nested values."""
    return st.dictionaries(unicode_text(max_size=8), json_values(max_leaves), max_size=max_size)


@st.composite
def chunks(draw: st.DrawFn, text: str, *, max_pieces: int = 12) -> list[str]:
    """``text`` cut at arbitrary positions (pieces may be empty); they join back to it."""
    if not text:
        return draw(st.sampled_from([[], [""]]))
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=max_pieces))
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def stored_calls(values: st.SearchStrategy[Any]) -> st.SearchStrategy[ToolCall]:
    """Tool calls with every field drawn (arguments and partial values from
    ``values``): what storing a call (``to_dict``/``from_dict``) must keep."""
    return st.builds(
        ToolCall,
        unicode_text(min_size=1),
        unicode_text(min_size=1),
        values,
        raw_arguments=st.none() | unicode_text(),
        error=st.none() | unicode_text(),
        complete=st.booleans(),
        partial_value=values,
    )


def stored_messages(
    values: st.SearchStrategy[Any], *, max_items: int = 3
) -> st.SearchStrategy[ChatMessage]:
    """Chat messages with every field drawn (up to ``max_items`` calls and provider
    blocks, their JSON values from ``values``): what storing a message must keep."""
    blocks = st.dictionaries(
        unicode_text(min_size=1),
        st.lists(st.dictionaries(unicode_text(), values), max_size=max_items),
    ).map(lambda kept: {k: tuple(v) for k, v in kept.items()})
    return st.builds(
        ChatMessage,
        st.sampled_from(MessageRole),
        unicode_text(),
        name=st.none() | unicode_text(),
        tool_calls=st.none() | st.lists(stored_calls(values), max_size=max_items),
        tool_call_id=st.none() | unicode_text(),
        source=st.none() | st.sampled_from(MessageSource),
        reasoning=st.none() | unicode_text(),
        provider_data=st.none() | blocks,
        is_error=st.booleans(),
    )


def _ids() -> st.SearchStrategy[str]:
    return st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)


def _names() -> st.SearchStrategy[str]:
    return st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)


def _tool_calls(max_size: int = 3) -> st.SearchStrategy[tuple[ToolCall, ...]]:
    call = st.builds(ToolCall, _ids(), _names(), argument_objects(max_size=3, max_leaves=4))
    return st.lists(call, min_size=1, max_size=max_size, unique_by=lambda c: c.id).map(tuple)


@st.composite
def openai_messages(draw: st.DrawFn) -> ChatMessage:
    """A message that the OpenAI chat wire format carries completely (``source=None``)."""
    role = draw(st.sampled_from(MessageRole))
    name = draw(st.none() | _names())
    text = draw(unicode_text())
    if role is MessageRole.TOOL:
        return ChatMessage(role, text, tool_call_id=draw(_ids()))
    if role is MessageRole.ASSISTANT:
        calls = draw(st.none() | _tool_calls())
        reasoning = draw(st.none() | unicode_text())
        return ChatMessage(role, text, name=name, tool_calls=calls, reasoning=reasoning)
    return ChatMessage(role, text, name=name)


def _thinking_blocks() -> st.SearchStrategy[tuple[dict[str, Any], ...]]:
    thinking = st.builds(
        lambda text, sig: {"type": "thinking", "thinking": text, "signature": sig},
        unicode_text(min_size=1),
        st.text(alphabet="ABCDEFabcdef0123456789+/=", min_size=8, max_size=24),
    )
    redacted = st.builds(
        lambda data: {"type": "redacted_thinking", "data": data},
        st.text(alphabet="ABCDEFabcdef0123456789+/=", min_size=8, max_size=24),
    )
    return st.lists(thinking | redacted, min_size=1, max_size=3).map(tuple)


@st.composite
def _anthropic_assistant(draw: st.DrawFn) -> ChatMessage:
    blocks = draw(st.none() | _thinking_blocks())
    reasoning = None
    if blocks is not None:
        reasoning = "".join(b.get("thinking", "") for b in blocks) or None
    return ChatMessage(
        MessageRole.ASSISTANT,
        draw(unicode_text()),
        tool_calls=draw(st.none() | _tool_calls()),
        reasoning=reasoning,
        provider_data=None if blocks is None else {ANTHROPIC_THINKING: blocks},
    )


@st.composite
def anthropic_conversations(draw: st.DrawFn) -> list[ChatMessage]:
    """A conversation the Anthropic Messages format carries completely.

    At most one system message (Anthropic has one ``system`` string), no
    ``name``, reasoning only inside thinking blocks, and runs of consecutive
    tool results (which the wire merges into one user message).
    """
    out: list[ChatMessage] = []
    if draw(st.booleans()):
        out.append(ChatMessage.system(draw(unicode_text())))
    user = st.builds(ChatMessage.user, unicode_text())
    tool = st.builds(
        lambda text, call_id, failed: ChatMessage.tool(text, call_id, source=None, is_error=failed),
        unicode_text(),
        _ids(),
        st.booleans(),
    )
    # An assistant turn with no text, call or thinking block has no Anthropic form (an
    # empty content list is refused), so to_anthropic leaves it out: not drawn here.
    assistant = _anthropic_assistant().filter(
        lambda m: bool(m.content or m.tool_calls or m.provider_data)
    )
    turns = draw(st.lists(user | assistant | tool, max_size=6))
    return out + turns


# ---------------------------------------------------------------- LLM calls


@attrs.frozen
class PlannedCall:
    """A tool call the model will make: what it means, not how it is streamed."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw: str


@attrs.frozen
class LLMCall:
    """What one LLM call says, independent of streaming."""

    response_id: str | None
    model: str | None
    text: str
    reasoning: str
    calls: tuple[PlannedCall, ...]
    finish_reason: FinishReason
    usage: Usage | None


@st.composite
def _planned_call(draw: st.DrawFn, call_id: str) -> PlannedCall:
    arguments = draw(argument_objects())
    raw = json.dumps(arguments, ensure_ascii=draw(st.booleans()))
    return PlannedCall(call_id, draw(_names()), arguments, raw)


@st.composite
def llm_calls(draw: st.DrawFn) -> LLMCall:
    """One LLM call: metadata, text, reasoning, parallel tool calls, finish and usage."""
    ids = draw(st.lists(_ids(), max_size=3, unique=True))
    calls = tuple(draw(_planned_call(i)) for i in ids)
    usage = draw(
        st.none()
        | st.builds(
            Usage,
            st.integers(0, 10_000),
            st.integers(0, 10_000),
            st.integers(0, 20_000),
            st.none() | st.integers(0, 100),
            st.none() | st.integers(0, 100),
        )
    )
    return LLMCall(
        response_id=draw(st.none() | _ids()),
        model=draw(st.none() | _names()),
        text=draw(unicode_text(max_size=30)),
        reasoning=draw(unicode_text(max_size=10)),
        calls=calls,
        finish_reason=FinishReason.TOOL_CALLS if calls else draw(st.sampled_from(FinishReason)),
        usage=usage,
    )


def _interleave(draw: st.DrawFn, queues: list[list[Any]]) -> list[Any]:
    """Merge queues in a random order that keeps each queue's own order."""
    queues = [q for q in queues if q]
    out: list[Any] = []
    while queues:
        i = draw(st.integers(0, len(queues) - 1))
        out.append(queues[i].pop(0))
        if not queues[i]:
            queues.pop(i)
    return out


def _head_and_tail(draw: st.DrawFn, call: LLMCall) -> tuple[list[Any], list[Any]]:
    head: list[Any] = []
    if call.response_id is not None or call.model is not None:
        head.append(u.ResponseMetadata(call.response_id, call.model))
    reasoning = [u.ReasoningDelta(p) for p in draw(chunks(call.reasoning)) if p]
    text = [u.TextDelta(p) for p in draw(chunks(call.text)) if p]
    head.extend(reasoning + text)
    tail: list[Any] = []
    if call.usage is not None and draw(st.booleans()):
        tail.append(u.Usage(call.usage))
        tail.append(u.Finish(call.finish_reason))
    else:
        tail.append(u.Finish(call.finish_reason, call.usage))
    return head, tail


@st.composite
def legacy_updates(draw: st.DrawFn, call: LLMCall) -> list[u.AgentResponseUpdate]:
    """``call`` streamed the OpenAI-chat way: ``ToolCallDelta`` keyed by wire index.

    The id comes with the first delta; the name with the first or a later one
    (arguments before it are held back); the deltas of parallel calls interleave;
    later deltas repeat the id, send ``""`` or nothing.
    """
    head, tail = _head_and_tail(draw, call)
    indexes = sorted(
        draw(
            st.lists(
                st.integers(0, 50), min_size=len(call.calls), max_size=len(call.calls), unique=True
            )
        )
    )
    queues: list[list[u.AgentResponseUpdate]] = []
    for index, planned in zip(indexes, call.calls, strict=True):
        pieces = draw(chunks(planned.raw))
        name_at = draw(st.integers(0, max(0, len(pieces) - 1)))
        deltas: list[u.AgentResponseUpdate] = []
        for i, piece in enumerate(pieces or [""]):
            call_id = planned.id if i == 0 else draw(st.sampled_from([None, "", planned.id]))
            name = planned.name if i == name_at else None
            deltas.append(u.ToolCallDelta(index, id=call_id, name=name, arguments_delta=piece))
        # The deltas up to the one naming the call go together, so calls start in plan order.
        queues.append([deltas[: name_at + 1], *([d] for d in deltas[name_at + 1 :])])
    return [*head, *_ordered_starts(draw, queues), *tail]


def _ordered_starts(draw: st.DrawFn, queues: list[list[list[Any]]]) -> list[Any]:
    """Interleave queues of groups, keeping each queue's first group in queue order.

    Returns the groups' items, flattened.
    """
    out: list[Any] = []
    live: list[list[Any]] = []
    for queue in queues:
        for _ in range(draw(st.integers(0, 3))):
            if not live:
                break
            i = draw(st.integers(0, len(live) - 1))
            out.append(live[i].pop(0))
            if not live[i]:
                live.pop(i)
        out.append(queue.pop(0))
        if queue:
            live.append(queue)
    out.extend(_interleave(draw, live))
    return [item for group in out for item in group]


@st.composite
def start_args_updates(draw: st.DrawFn, call: LLMCall) -> list[u.AgentResponseUpdate]:
    """``call`` streamed the Anthropic / Responses way: ``ToolCallStart/Args/End``."""
    head, tail = _head_and_tail(draw, call)
    queues: list[list[u.AgentResponseUpdate]] = []
    for planned in call.calls:
        args = [[u.ToolCallArgs(planned.id, p)] for p in draw(chunks(planned.raw))]
        start, end = u.ToolCallStart(planned.id, planned.name), u.ToolCallEnd(planned.id)
        queues.append([[start], *args, [end]])
    return [*head, *_ordered_starts(draw, queues), *tail]


@st.composite
def messy_updates(draw: st.DrawFn) -> list[u.AgentResponseUpdate]:
    """Arbitrary, often ill-formed update sequences from a small pool of ids and indexes."""
    ids = st.sampled_from(["a", "b", "c"])
    fragment = st.sampled_from(["", "{", "}", '{"k": ', '"v"', "1", ", ", '"\\u00e9', "]"])
    update = st.one_of(
        st.builds(u.TextDelta, unicode_text(max_size=4)),
        st.builds(u.ReasoningDelta, unicode_text(max_size=4)),
        st.builds(
            u.ToolCallDelta,
            st.integers(0, 2),
            st.none() | st.sampled_from(["", "a", "b", "x"]),
            st.none() | st.sampled_from(["", "f", "g"]),
            fragment,
        ),
        st.builds(u.ToolCallStart, ids, st.sampled_from(["f", "g"])),
        st.builds(u.ToolCallArgs, ids, fragment),
        st.builds(u.ToolCallEnd, ids),
        st.builds(u.ToolCalled, ids, st.none() | st.just("ok")),
        st.builds(u.Usage, st.builds(Usage, st.integers(0, 9), st.integers(0, 9))),
        st.builds(u.Finish, st.sampled_from(FinishReason)),
        st.builds(u.ResponseMetadata, st.none() | _ids(), st.none() | _names()),
        st.builds(u.Uri, st.just("https://example.com/a"), st.none() | st.just("text/html")),
        st.builds(u.Error, st.just("overloaded")),
        st.builds(u.ToolApprovalRequest, ids, st.just("f"), st.just({}), st.just("")),
    )
    return draw(st.lists(update, max_size=25))


@st.composite
def argument_runs(draw: st.DrawFn) -> list[u.AgentResponseUpdate]:
    """Mostly argument fragments of open calls, with the odd other update between.

    ``convert()`` keeps a call's state across a run of its fragments and must
    drop it whenever another update may change it: starts, ends, metadata,
    a new call at the same wire index, finishes, limits.
    """
    fragment = st.sampled_from(['{"k": ', '"v', 'w"', "1", ", ", "}", "", '"\\u00e9', "xx"])
    wire_id = st.none() | st.sampled_from(["", "c", "x"])
    argument = st.one_of(
        st.builds(u.ToolCallArgs, st.sampled_from(["a", "b"]), fragment),
        st.builds(u.ToolCallDelta, st.integers(0, 1), wire_id, st.none() | st.just("f"), fragment),
    )
    other = st.one_of(
        st.builds(u.ToolCallStart, st.sampled_from(["a", "b", "c"]), st.just("f")),
        st.builds(u.ToolCallEnd, st.sampled_from(["a", "b", "c"])),
        st.builds(u.TextDelta, st.just("t")),
        st.builds(u.ResponseMetadata, st.none() | _ids(), st.none() | _names()),
        st.builds(u.Finish, st.just(FinishReason.TOOL_CALLS)),
    )
    head: list[u.AgentResponseUpdate] = [
        u.ToolCallStart("a", "f"),
        u.ToolCallStart("b", "g"),
        u.ToolCallDelta(0, "c", "f"),
        u.ToolCallDelta(1, "d", "g"),
    ]
    weighted = st.sampled_from([0, 0, 0, 0, 0, 0, 1]).flatmap(
        lambda k: argument if k == 0 else other
    )
    return head + draw(st.lists(weighted, max_size=40))
