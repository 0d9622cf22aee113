"""rafrx against the providers' own SDKs, on generated well-formed streams.

Hypothesis plans what one LLM call says (text, reasoning, parallel tool calls
with nested arguments, usage, a finish reason), streams it the way the provider
does (deltas cut anywhere, including inside a JSON escape of the arguments),
writes the SSE body and cuts the bytes anywhere (also inside multi-byte UTF-8).
The same chunks then go through rafrx (``from_sse`` → ``convert()`` →
``aggregate()``) and through the SDK's own accumulator, which is the oracle:

* OpenAI chat: openai-python's SSE decoder, ``ChatCompletionChunk`` and
  ``ChatCompletionStreamState`` (its ``current_completion_snapshot``), as bench/peers.py;
* Anthropic: anthropic-sdk-python's SSE decoder, ``RawMessageStreamEvent`` and
  ``accumulate_event`` (the snapshot ``MessageStream`` keeps);
* OpenAI Responses: openai-python's ``ResponseStreamState.handle_event`` (what
  ``ResponseStream`` runs), whose ``response.completed`` event carries the
  final ``ParsedResponse``.

Both results are mapped to one neutral form (:class:`Neutral`). Where rafrx
differs from an SDK by design, the mapping says so and why (see the comments
in ``_neutral_*``); everything else is compared as is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import attrs
from anthropic._models import construct_type as anthropic_construct
from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import NOT_GIVEN
from openai._models import construct_type as openai_construct
from openai._streaming import SSEDecoder as OpenAISSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from rafrx import operators as ops
from rafrx.messages import ANTHROPIC_THINKING, OPENAI_REASONING
from rafrx.response import AgentResponse, FinishReason
from rafrx.sources import from_sse
from tests import cut
from tests.strategies import _ordered_starts, chunks, unicode_text

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ------------------------------------------------------------------ neutral form


@attrs.frozen
class Neutral:
    """What both sides agree a stream means.

    ``calls`` holds ``(id, name, arguments)`` with the arguments as
    ``json.dumps`` of the parsed value, so ``1``, ``1.0`` and ``true``, or
    ``0.0`` and ``-0.0``, or two key orders, are all told apart.
    ``usage`` is ``(prompt, completion, total, reasoning, cached)``.
    """

    id: str | None
    model: str | None
    text: str
    reasoning: str
    calls: tuple[tuple[str, str, str], ...]
    usage: tuple[int, int, int, int | None, int | None] | None
    finish: FinishReason | None


def _args(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _sdk_args(raw: str | None) -> str:
    # DESIGN, flush_tool_calls(): arguments "" mean {} (a call with no parameters).
    return _args(json.loads(raw or "{}"))


def _rafrx(body_chunks: Iterable[bytes], dialect: str) -> AgentResponse:
    results: list[AgentResponse] = []
    errors: list[Exception] = []
    from_sse(body_chunks, dialect=dialect).pipe(ops.convert(), ops.aggregate()).subscribe(
        results.append, errors.append
    )
    assert not errors, repr(errors)
    [response] = results
    return response


def _neutral_rafrx(response: AgentResponse) -> Neutral:
    for call in response.tool_calls:
        assert call.error is None, call
    usage = response.usage
    return Neutral(
        id=response.id,
        model=response.model,
        text=response.text,
        # DESIGN, aggregate(): reasoning_text is None when there was none; the SDKs say "".
        reasoning=response.reasoning_text or "",
        calls=tuple((c.id, c.name, _args(c.arguments)) for c in response.tool_calls),
        usage=None
        if usage is None
        else (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            usage.reasoning_tokens,
            usage.cached_tokens,
        ),
        finish=response.finish_reason,
    )


# ------------------------------------------------------------------ shared strategies

_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
_BASE64URL = _ID_ALPHABET + "="


def _ids(prefix: str) -> st.SearchStrategy[str]:
    return st.text(alphabet=_ID_ALPHABET, min_size=1, max_size=16).map(lambda s: prefix + s)


_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
_MODELS = st.sampled_from(["gpt-4o-mini", "deepseek-reasoner", "claude-sonnet-4-5", "o4-mini"])


def _json_values() -> st.SearchStrategy[Any]:
    """JSON values a model writes: no NaN nor infinity (``json.dumps`` would write
    ``NaN``/``Infinity``, which is not JSON); big integers and awkward floats are fine."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        unicode_text(max_size=12),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(unicode_text(max_size=6), inner, max_size=4),
        ),
        max_leaves=8,
    )


@attrs.frozen
class Call:
    id: str
    name: str
    raw: str  # the arguments as the model writes them


@st.composite
def _calls(draw: st.DrawFn, prefix: str, max_size: int = 3) -> list[Call]:
    ids = draw(st.lists(_ids(prefix), max_size=max_size, unique=True))
    out = []
    for call_id in ids:
        arguments = draw(st.dictionaries(unicode_text(max_size=8), _json_values(), max_size=4))
        raw = json.dumps(
            arguments,
            ensure_ascii=draw(st.booleans()),  # True: astral chars as \\ud83d\\ude00 pairs
            separators=draw(st.sampled_from([(", ", ": "), (",", ":")])),
            indent=draw(st.sampled_from([None, None, 2])),
        )
        if not arguments and draw(st.integers(0, 4)) == 0:
            raw = ""  # some servers send nothing for a call without parameters
        out.append(Call(call_id, draw(_NAMES), raw))
    return out


def _interleave(draw: st.DrawFn, queues: list[list[Any]]) -> list[Any]:
    """Merge queues, each in its own order, with every queue's head after the
    previous queue's head (parallel calls start in order, then interleave)."""
    return _ordered_starts(draw, [[[item] for item in q] for q in queues if q])


def _groups(draw: st.DrawFn, items: list[Any], max_size: int = 3) -> list[list[Any]]:
    """``items`` in order, cut into runs of 1 to ``max_size``."""
    out: list[list[Any]] = []
    at = 0
    while at < len(items):
        size = draw(st.integers(1, max_size))
        out.append(items[at : at + size])
        at += size
    return out


def _pieces(draw: st.DrawFn, text: str) -> list[str]:
    return [p for p in draw(chunks(text)) if p]


def _json(draw: st.DrawFn, value: Any) -> str:
    return json.dumps(value, ensure_ascii=draw(st.booleans()))


@st.composite
def _split(draw: st.DrawFn, body: bytes) -> list[bytes]:
    """``body`` cut anywhere (inside UTF-8 sequences, ``\\r\\n``, field names...)."""
    if draw(st.integers(0, 9)) == 0:
        return [body[i : i + 1] for i in range(len(body))]
    return cut(body, draw(st.lists(st.integers(0, len(body)), max_size=40)))


# ------------------------------------------------------------------ OpenAI chat


@attrs.frozen
class ChatPlan:
    body: bytes
    id: str
    model: str
    text: str
    reasoning: str
    calls: tuple[Call, ...]
    azure: bool  # opens with Azure's prompt-filter chunk (id "", model "", object "")


@st.composite
def chat_streams(draw: st.DrawFn) -> ChatPlan:
    """A Chat Completions stream as OpenAI (or DeepSeek) sends it.

    Reasoning deltas (DeepSeek's ``reasoning_content``, with ``content: null``),
    then text (or a refusal), then parallel tool calls: the first delta of call
    ``i`` has ``index: i``, its id, type and name (and maybe the first piece of
    the arguments), later ones only argument pieces, interleaved across calls,
    one or several entries per chunk. Then the finish reason, usage in the finish
    chunk (DeepSeek) or in a ``choices: []`` chunk (``include_usage``), ``[DONE]``.
    Azure may open with a prompt-filter chunk (``object: ""``, ``id: ""``).
    (Not generated: Azure's content-filter-offsets chunk, a choice with no
    ``delta``, which ``ChatCompletionStreamState`` fails on with an AttributeError;
    tests/sources/test_fixtures.py replays a recorded one through rafrx.)
    """
    ensure_ascii = draw(st.booleans())
    base = {
        "id": draw(_ids("chatcmpl-")),
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": draw(_MODELS),
        "system_fingerprint": draw(st.sampled_from([None, "fp_1"])),
    }
    usage_nulls = draw(st.booleans())  # include_usage: every other chunk says "usage": null

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        out = {**base, "choices": [choice]}
        if usage_nulls:
            out["usage"] = None
        out.update(extra)
        return out

    reasoning = draw(unicode_text(max_size=30))
    text = draw(unicode_text(max_size=30))
    refusal = draw(st.integers(0, 5)) == 0
    calls = draw(_calls("call_"))

    out: list[dict[str, Any]] = []
    azure = draw(st.integers(0, 4)) == 0
    if azure:
        filtered = {"hate": {"filtered": False, "severity": "safe"}}
        out.append(
            {
                "choices": [],
                "created": 0,
                "id": "",
                "model": "",
                "object": "",
                "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": filtered}],
            }
        )
    if draw(st.booleans()):
        out.append(chunk({"role": "assistant", "content": "", "refusal": None}))
    for piece in _pieces(draw, reasoning):
        out.append(chunk({"content": None, "reasoning_content": piece}))
    for piece in _pieces(draw, text):
        delta = {"refusal": piece} if refusal else {"content": piece}
        if reasoning:
            delta["reasoning_content"] = None
        out.append(chunk(delta))

    queues = []
    for index, call in enumerate(calls):
        pieces = draw(chunks(call.raw))
        first = pieces.pop(0) if pieces and draw(st.booleans()) else ""
        head = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": first},
        }
        if not first and draw(st.booleans()):
            del head["function"]["arguments"]  # a head with the name only
        nulls = draw(st.booleans())  # some servers (Writer) repeat the fields as null

        def more(piece: str, index: int = index, nulls: bool = nulls) -> dict[str, Any]:
            if nulls:
                return {"index": index, "id": None, "function": {"name": None, "arguments": piece}}
            return {"index": index, "function": {"arguments": piece}}

        queues.append([head, *map(more, pieces)])
    for group in _groups(draw, _interleave(draw, queues)):
        delta = {"tool_calls": group}
        if draw(st.booleans()):
            delta = {"content": None, **delta}
        out.append(chunk(delta))

    finish = draw(st.sampled_from(["stop", "length", "tool_calls", "content_filter"]))
    if calls and draw(st.integers(0, 4)):
        finish = "tool_calls"
    usage = None
    if draw(st.integers(0, 3)):
        prompt, completion = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**5))
        usage = {"prompt_tokens": prompt, "completion_tokens": completion}
        usage["total_tokens"] = prompt + completion
        if draw(st.booleans()):
            usage["prompt_tokens_details"] = {"cached_tokens": draw(st.integers(0, prompt))}
        if draw(st.booleans()):
            usage["completion_tokens_details"] = {
                "reasoning_tokens": draw(st.integers(0, completion))
            }
    if usage is not None and not azure and draw(st.booleans()):
        out.append(chunk({}, finish, usage=usage))  # DeepSeek, Groq...
        usage = None
    else:
        out.append(chunk({}, finish))
    if usage is not None:
        out.append({**base, "choices": [], "usage": usage})  # include_usage: the last chunk

    lines = [f"data: {json.dumps(c, ensure_ascii=ensure_ascii)}\n\n" for c in out]
    body = ("".join(lines) + "data: [DONE]\n\n").encode()
    if draw(st.booleans()):
        body = body.replace(b"\n", b"\r\n")
    return ChatPlan(body, base["id"], base["model"], text, reasoning, tuple(calls), azure)


def _sdk_chat(body_chunks: Iterable[bytes]) -> Any:
    state: Any = ChatCompletionStreamState()
    for sse in OpenAISSEDecoder().iter_bytes(iter(body_chunks)):
        if sse.data.startswith("[DONE]"):
            break
        chunk = openai_construct(type_=ChatCompletionChunk, value=sse.json())
        if chunk.object != "chat.completion.chunk":
            continue  # Azure's filter chunks, which ChatCompletionStream skips too
        state.handle_chunk(chunk)
    # The snapshot get_final_completion() parses (which raises on "length" and
    # "content_filter" finishes, having nothing to parse then).
    return state.current_completion_snapshot


def _neutral_chat(completion: Any) -> Neutral:
    [choice] = completion.choices
    message = choice.message
    usage = completion.usage
    return Neutral(
        id=completion.id,
        model=completion.model,
        # rafrx reads a refusal as text (the reply the user sees: openai_chat.py's
        # docstring); the SDK keeps it apart. A stream carries one or the other.
        text=(message.content or "") + (message.refusal or ""),
        reasoning=getattr(message, "reasoning_content", None) or "",
        calls=tuple(
            (tc.id, tc.function.name, _sdk_args(tc.function.arguments))
            for tc in message.tool_calls or ()
        ),
        usage=None
        if usage is None
        else (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            None
            if usage.completion_tokens_details is None
            else usage.completion_tokens_details.reasoning_tokens,
            None
            if usage.prompt_tokens_details is None
            else usage.prompt_tokens_details.cached_tokens,
        ),
        # DESIGN, Types: provider strings map onto FinishReason.
        finish=FinishReason.from_provider(choice.finish_reason),
    )


@SETTINGS
@given(data=st.data())
def test_openai_chat_matches_chat_completion_stream_state(data: st.DataObject) -> None:
    plan = data.draw(chat_streams(), label="plan")
    body_chunks = data.draw(_split(plan.body), label="chunks")
    sdk = _neutral_chat(_sdk_chat(body_chunks))
    assert (sdk.id, sdk.model) == (plan.id, plan.model)  # (not Azure's "" and "")
    # The generator is sound: the SDK hears what was planned.
    assert sdk.text == plan.text
    assert sdk.reasoning == plan.reasoning
    assert [c[:2] for c in sdk.calls] == [(c.id, c.name) for c in plan.calls]
    assert _neutral_rafrx(_rafrx(body_chunks, "openai-chat")) == sdk


# ------------------------------------------------------------------ Anthropic


@attrs.frozen
class AnthropicPlan:
    body: bytes
    blocks: tuple[dict[str, Any], ...]  # the message's content, as the API returns it


def _signature() -> st.SearchStrategy[str]:
    return st.text(alphabet=_ID_ALPHABET + "+/=", min_size=8, max_size=40)


@st.composite
def _anthropic_blocks(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The content blocks of one message: thinking first (Claude thinks before it
    speaks), then text, tool_use blocks and a web search (a ``server_tool_use``
    block and its ``web_search_tool_result``: Anthropic runs it, so it is no call
    for the client) in any order."""
    thinking = draw(
        st.lists(
            st.one_of(
                st.builds(
                    lambda t, s: {"type": "thinking", "thinking": t, "signature": s},
                    unicode_text(max_size=30),
                    _signature(),
                ),
                st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _signature()),
            ),
            max_size=2,
        )
    )
    texts = draw(
        st.lists(unicode_text(max_size=30).map(lambda t: {"type": "text", "text": t}), max_size=3)
    )
    tools = [
        {"type": "tool_use", "id": c.id, "name": c.name, "raw": c.raw}
        for c in draw(_calls("toolu_"))
    ]
    searches: list[Any] = []
    if draw(st.integers(0, 3)) == 0:
        search_id = draw(_ids("srvtoolu_"))
        query = json.dumps({"query": draw(unicode_text(max_size=10))})
        result = {
            "type": "web_search_result",
            "title": "t",
            "url": "https://example.com/a",
            "encrypted_content": "Eo8B",
            "page_age": None,
        }
        searches.append(
            (
                {"type": "server_tool_use", "id": search_id, "name": "web_search", "raw": query},
                {"type": "web_search_tool_result", "tool_use_id": search_id, "content": [result]},
            )
        )
    rest = draw(st.permutations(texts + tools + searches))
    return thinking + [b for item in rest for b in (item if isinstance(item, tuple) else (item,))]


@st.composite
def anthropic_streams(draw: st.DrawFn) -> AnthropicPlan:
    """A Messages stream as Anthropic sends it: ``message_start`` (input and cache
    usage), the blocks one after another (start, deltas, stop; thinking blocks end
    with a ``signature_delta``, redacted ones come whole), ``ping`` here and there,
    ``message_delta`` (stop reason, cumulative usage), ``message_stop``."""
    blocks = draw(_anthropic_blocks())
    cache_write = draw(st.none() | st.integers(0, 10**5))
    cache_read = draw(st.none() | st.integers(0, 10**5))
    start_usage: dict[str, Any] = {"input_tokens": draw(st.integers(0, 10**5))}
    if cache_write is not None or draw(st.booleans()):
        start_usage["cache_creation_input_tokens"] = cache_write
    if cache_read is not None or draw(st.booleans()):
        start_usage["cache_read_input_tokens"] = cache_read
    start_usage["output_tokens"] = draw(st.integers(0, 5))
    message = {
        "id": draw(_ids("msg_")),
        "type": "message",
        "role": "assistant",
        "model": draw(_MODELS),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]

    def delta(index: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": body}

    wire_blocks = []
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "thinking":
            wire_blocks.append(block)
            start = {"type": "thinking", "thinking": "", "signature": ""}
            events.append({"type": "content_block_start", "index": index, "content_block": start})
            for piece in _pieces(draw, block["thinking"]):
                events.append(delta(index, {"type": "thinking_delta", "thinking": piece}))
            events.append(
                delta(index, {"type": "signature_delta", "signature": block["signature"]})
            )
        elif kind == "redacted_thinking":
            wire_blocks.append(block)
            events.append({"type": "content_block_start", "index": index, "content_block": block})
        elif kind == "text":
            wire_blocks.append(block)
            start = {"type": "text", "text": ""}
            events.append({"type": "content_block_start", "index": index, "content_block": start})
            for piece in _pieces(draw, block["text"]):
                events.append(delta(index, {"type": "text_delta", "text": piece}))
        elif kind == "web_search_tool_result":
            wire_blocks.append(block)
            events.append({"type": "content_block_start", "index": index, "content_block": block})
        else:  # tool_use, server_tool_use
            wire_blocks.append({k: v for k, v in block.items() if k != "raw"})
            start = {"type": kind, "id": block["id"], "name": block["name"], "input": {}}
            events.append({"type": "content_block_start", "index": index, "content_block": start})
            pieces = draw(chunks(block["raw"]))
            if draw(st.booleans()):
                pieces.insert(0, "")  # Anthropic opens with an empty partial_json
            for piece in pieces:
                events.append(delta(index, {"type": "input_json_delta", "partial_json": piece}))
        events.append({"type": "content_block_stop", "index": index})

    has_tools = any(b["type"] == "tool_use" for b in blocks)
    reasons = ["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"]
    stop_reason = (
        "tool_use" if has_tools and draw(st.booleans()) else draw(st.sampled_from(reasons))
    )
    final_usage: dict[str, Any] = {"output_tokens": draw(st.integers(0, 10**5))}
    if draw(st.booleans()):  # newer API versions repeat the (cumulative) input and cache
        # counts, which server tools may have raised since message_start
        final_usage["input_tokens"] = start_usage["input_tokens"] + draw(st.integers(0, 99))
        final_usage["cache_creation_input_tokens"] = draw(st.just(cache_write) | st.integers(0, 99))
        final_usage["cache_read_input_tokens"] = draw(st.just(cache_read) | st.integers(0, 99))
    stop_sequence = "\n\nHuman:" if stop_reason == "stop_sequence" else None
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": final_usage,
        }
    )
    events.append({"type": "message_stop"})

    # ping: at the start (as Anthropic does) and anywhere between events.
    for _ in range(draw(st.integers(0, 3))):
        events.insert(draw(st.integers(1, len(events) - 1)), {"type": "ping"})
    body = "".join(f"event: {e['type']}\ndata: {_json(draw, e)}\n\n" for e in events).encode()
    return AnthropicPlan(body, tuple(wire_blocks))


def _sdk_anthropic(body_chunks: Iterable[bytes]) -> Any:
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for sse in AnthropicSSEDecoder().iter_bytes(iter(body_chunks)):
        if sse.event in (None, "ping") or not sse.data:
            continue  # as anthropic's Stream does
        event = anthropic_construct(type_=RawMessageStreamEvent, value=sse.json())
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    return snapshot


def _neutral_anthropic(message: Any) -> Neutral:
    usage = message.usage
    # DESIGN, aggregate() and anthropic.py's anthropic_usage: rafrx's prompt tokens are
    # all input tokens (uncached + written to + read from the cache); cached = read.
    # Anthropic sends no total (rafrx's is prompt + completion) nor reasoning tokens.
    prompt = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    blocks = message.content
    return Neutral(
        id=message.id,
        model=message.model,
        text="".join(b.text for b in blocks if b.type == "text"),
        reasoning="".join(b.thinking for b in blocks if b.type == "thinking"),
        calls=tuple((b.id, b.name, _args(b.input)) for b in blocks if b.type == "tool_use"),
        usage=(
            prompt,
            usage.output_tokens,
            prompt + usage.output_tokens,
            None,
            usage.cache_read_input_tokens,
        ),
        # DESIGN, Types: end_turn/stop_sequence→STOP, tool_use→TOOL_CALLS, max_tokens→LENGTH.
        finish=FinishReason.from_provider(message.stop_reason),
    )


_SERVER_BLOCK_KEYS = ("type", "id", "tool_use_id", "name", "input")


def _kept_blocks(message: Any) -> list[dict[str, Any]]:
    """The blocks to send back that are neither text nor tool_use: thinking (with its
    signature), redacted thinking, and server tools' blocks (named, with their input)."""
    out: list[dict[str, Any]] = []
    for block in message.content:
        if block.type == "thinking":
            out.append(
                {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
            )
        elif block.type == "redacted_thinking":
            out.append({"type": "redacted_thinking", "data": block.data})
        elif block.type not in ("text", "tool_use"):
            out.append({k: getattr(block, k) for k in _SERVER_BLOCK_KEYS if hasattr(block, k)})
    return out


def _as_kept(block: Any) -> dict[str, Any]:
    """rafrx's kept block, in :func:`_kept_blocks`' terms."""
    if block["type"] in ("thinking", "redacted_thinking"):
        return dict(block)
    return {k: block[k] for k in _SERVER_BLOCK_KEYS if k in block}


@SETTINGS
@given(data=st.data())
def test_anthropic_matches_accumulate_event(data: st.DataObject) -> None:
    plan = data.draw(anthropic_streams(), label="plan")
    body_chunks = data.draw(_split(plan.body), label="chunks")
    message = _sdk_anthropic(body_chunks)
    # The generator is sound: the SDK rebuilds the planned blocks.
    sdk_blocks = [
        {k: v for k, v in b.to_dict().items() if k not in ("input", "citations")}
        for b in message.content
    ]
    assert sdk_blocks == [{k: v for k, v in b.items() if k != "input"} for b in plan.blocks]

    response = _rafrx(body_chunks, "anthropic")
    assert _neutral_rafrx(response) == _neutral_anthropic(message)
    # The blocks rafrx keeps to send back (thinking with its signature, server tools'
    # blocks) are the SDK's.
    # (An empty message has no assistant message in the transcript: aggregate() skips it.)
    final = response.turn_transcript[-1].provider_data if response.turn_transcript else None
    kept = (final or {}).get(ANTHROPIC_THINKING, ())
    kept = [_as_kept(b) for b in kept if not b["type"].startswith("rafrx.")]  # not the refs
    assert kept == _kept_blocks(message)


# ------------------------------------------------------------------ OpenAI Responses


@attrs.frozen
class ResponsesPlan:
    body: bytes
    output: tuple[dict[str, Any], ...]


@st.composite
def _responses_output(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Output items: reasoning (a summary, or reasoning text as gpt-oss sends),
    messages (output text, or a refusal) and function calls, in any order."""
    items: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 2))):
        texts = draw(st.lists(unicode_text(max_size=20), min_size=1, max_size=3))
        item = {"type": "reasoning", "id": draw(_ids("rs_")), "summary": []}
        if draw(st.booleans()):
            item["summary"] = [{"type": "summary_text", "text": t} for t in texts]
        else:
            item["content"] = [{"type": "reasoning_text", "text": t} for t in texts]
        if draw(st.booleans()):  # with include=["reasoning.encrypted_content"]
            item["encrypted_content"] = draw(st.text(_BASE64URL, min_size=1, max_size=40))
        items.append(item)
    for _ in range(draw(st.integers(0, 2))):
        refusal = draw(st.integers(0, 5)) == 0
        texts = draw(st.lists(unicode_text(max_size=30), min_size=1, max_size=2))
        content = [
            {"type": "refusal", "refusal": t}
            if refusal
            else {"type": "output_text", "text": t, "annotations": [], "logprobs": []}
            for t in texts
        ]
        items.append(
            {
                "type": "message",
                "id": draw(_ids("msg_")),
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    for call in draw(_calls("call_")):
        items.append(
            {
                "type": "function_call",
                "id": draw(_ids("fc_")),
                "call_id": call.id,
                "name": call.name,
                "arguments": call.raw,
                "status": "completed",
            }
        )
    for n, item in enumerate(items):
        item["id"] += f"_{n}"  # item ids are unique in a response
    reasoning = [i for i in items if i["type"] == "reasoning"]
    return reasoning + list(draw(st.permutations(items[len(reasoning) :])))


@st.composite
def responses_streams(draw: st.DrawFn) -> ResponsesPlan:
    """A Responses stream as OpenAI sends it: ``response.created`` and
    ``response.in_progress``, then each output item in turn (added, its parts
    added, deltas, done events, item done), then ``response.completed`` (or
    ``response.incomplete``) with the whole output and the usage."""
    output = draw(_responses_output())
    response = {
        "id": draw(_ids("resp_")),
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "in_progress",
        "model": draw(_MODELS),
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
    ]
    for output_index, item in enumerate(output):
        kind, item_id = item["type"], item["id"]
        where = {"item_id": item_id, "output_index": output_index}
        if kind == "reasoning":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": output_index,
                    "item": {"type": "reasoning", "id": item_id, "summary": []},
                }
            )
            for i, part in enumerate(item["summary"]):
                at = {**where, "summary_index": i}
                empty = {"type": "summary_text", "text": ""}
                events.append(
                    {"type": "response.reasoning_summary_part.added", **at, "part": empty}
                )
                for piece in _pieces(draw, part["text"]):
                    events.append(
                        {"type": "response.reasoning_summary_text.delta", **at, "delta": piece}
                    )
                events.append(
                    {"type": "response.reasoning_summary_text.done", **at, "text": part["text"]}
                )
                events.append({"type": "response.reasoning_summary_part.done", **at, "part": part})
            for i, part in enumerate(item.get("content", ())):
                at = {**where, "content_index": i}
                for piece in _pieces(draw, part["text"]):
                    events.append({"type": "response.reasoning_text.delta", **at, "delta": piece})
                events.append({"type": "response.reasoning_text.done", **at, "text": part["text"]})
        elif kind == "message":
            added = {**item, "status": "in_progress", "content": []}
            events.append(
                {"type": "response.output_item.added", "output_index": output_index, "item": added}
            )
            for i, part in enumerate(item["content"]):
                at = {**where, "content_index": i}
                refusal = part["type"] == "refusal"
                empty = (
                    {"type": "refusal", "refusal": ""}
                    if refusal
                    else {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                )
                events.append({"type": "response.content_part.added", **at, "part": empty})
                whole = part["refusal"] if refusal else part["text"]
                for piece in _pieces(draw, whole):
                    kind_delta = (
                        "response.refusal.delta" if refusal else "response.output_text.delta"
                    )
                    extra = {} if refusal else {"logprobs": []}
                    events.append({"type": kind_delta, **at, "delta": piece, **extra})
                if refusal:
                    events.append({"type": "response.refusal.done", **at, "refusal": whole})
                else:
                    events.append(
                        {"type": "response.output_text.done", **at, "text": whole, "logprobs": []}
                    )
                events.append({"type": "response.content_part.done", **at, "part": part})
        else:
            added = {**item, "arguments": "", "status": "in_progress"}
            events.append(
                {"type": "response.output_item.added", "output_index": output_index, "item": added}
            )
            # OpenAI streams the arguments and repeats them whole in ..._arguments.done;
            # some compatible servers send no deltas, or no done event (then
            # output_item.done ends the call).
            if draw(st.integers(0, 4)):
                for piece in _pieces(draw, item["arguments"]):
                    events.append(
                        {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                    )
            if draw(st.integers(0, 4)):
                done = {"arguments": item["arguments"]}
                events.append({"type": "response.function_call_arguments.done", **where, **done})
        events.append(
            {"type": "response.output_item.done", "output_index": output_index, "item": item}
        )

    usage: dict[str, Any] | None = None
    if draw(st.integers(0, 4)):
        prompt, completion = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**5))
        usage = {"input_tokens": prompt, "output_tokens": completion}
        if draw(st.integers(0, 3)):  # OpenAI always sends both details; some servers don't
            usage["input_tokens_details"] = {"cached_tokens": draw(st.integers(0, prompt))}
            usage["output_tokens_details"] = {"reasoning_tokens": draw(st.integers(0, completion))}
        usage["total_tokens"] = prompt + completion
    final = {**response, "output": output, "usage": usage}
    if draw(st.integers(0, 4)):
        events.append({"type": "response.completed", "response": {**final, "status": "completed"}})
    else:
        reason = draw(st.sampled_from(["max_output_tokens", "content_filter"]))
        final = {**final, "status": "incomplete", "incomplete_details": {"reason": reason}}
        events.append({"type": "response.incomplete", "response": final})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    named = draw(st.booleans())  # OpenAI names every event; some servers send data only
    body = "".join(
        (f"event: {e['type']}\n" if named else "") + f"data: {_json(draw, e)}\n\n" for e in events
    ).encode()
    return ResponsesPlan(body, tuple(output))


def _sdk_responses(body_chunks: Iterable[bytes]) -> Any:
    state: Any = ResponseStreamState(input_tools=NOT_GIVEN, text_format=NOT_GIVEN)
    final = None
    for sse in OpenAISSEDecoder().iter_bytes(iter(body_chunks)):
        raw = openai_construct(type_=ResponseStreamEvent, value=sse.json())
        for event in state.handle_event(raw):
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
    assert final is not None
    return final


def _neutral_responses(response: Any) -> Neutral:
    text, reasoning, calls = [], [], []
    for item in response.output:
        if item.type == "message":
            for part in item.content:
                # rafrx reads a refusal as text (openai_responses.py's docstring).
                text.append(part.text if part.type == "output_text" else part.refusal)
        elif item.type == "reasoning":
            reasoning.extend(s.text for s in item.summary)
            reasoning.extend(c.text for c in item.content or ())
        elif item.type == "function_call":
            calls.append((item.call_id, item.name, _sdk_args(item.arguments)))
    usage = response.usage
    if response.status == "completed":
        # The Responses API has no finish reason for a completed response: rafrx says
        # TOOL_CALLS when it called functions, else STOP (openai_responses.py, and
        # tests/sources/test_fixtures.py's _expected_finish).
        finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
    else:
        finish = FinishReason.from_provider(response.incomplete_details.reason)
    return Neutral(
        id=response.id,
        model=response.model,
        text="".join(text),
        reasoning="".join(reasoning),
        calls=tuple(calls),
        usage=None
        if usage is None
        else (
            usage.input_tokens,
            usage.output_tokens,
            usage.total_tokens,
            None
            if usage.output_tokens_details is None
            else usage.output_tokens_details.reasoning_tokens,
            None
            if usage.input_tokens_details is None
            else usage.input_tokens_details.cached_tokens,
        ),
        finish=finish,
    )


@SETTINGS
@given(data=st.data())
def test_openai_responses_match_response_stream_state(data: st.DataObject) -> None:
    plan = data.draw(responses_streams(), label="plan")
    body_chunks = data.draw(_split(plan.body), label="chunks")
    final = _sdk_responses(body_chunks)
    # The generator is sound: the SDK rebuilds the planned output items.
    assert [item.id for item in final.output] == [item["id"] for item in plan.output]
    response = _rafrx(body_chunks, "openai-responses")
    assert _neutral_rafrx(response) == _neutral_responses(final)
    # The reasoning items rafrx keeps to send back (encrypted_content and all) are the SDK's.
    final_message = response.turn_transcript[-1] if response.turn_transcript else None
    kept = ((final_message and final_message.provider_data) or {}).get(OPENAI_REASONING, ())
    reasoning = [dict(i) for i in kept if i["type"] == "reasoning"]  # (and refs to the rest)
    assert reasoning == [i.to_dict() for i in final.output if i.type == "reasoning"]


def test_chat_arguments_cut_inside_an_escaped_surrogate_pair() -> None:
    # A fixed stream, fed one byte at a time, that both sides must read as planned
    # (so the neutral forms cannot agree by both being empty).
    tricky = 'é😀\\"\u2028'
    raw = json.dumps({"q": tricky, "n": [1, 2.5, None, -0.0, 2**70]}, ensure_ascii=True)
    mid = raw.index("\\ud83d") + 3  # between "\\ud" and "83d\\ude00"

    def chunk(delta: dict[str, Any], **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": extra.pop("finish", None)}
        body = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
        return f"data: {json.dumps({**body, **extra})}\n\n".encode()

    def call(index: int, arguments: str, **head: Any) -> dict[str, Any]:
        function = {"arguments": arguments, **({"name": head.pop("name")} if head else {})}
        return {"index": index, **head, "function": function}

    body = b"".join(
        [
            chunk({"reasoning_content": "hm"}),
            chunk({"content": tricky}),
            chunk(
                {
                    "tool_calls": [
                        call(0, raw[:mid], id="call_a", type="function", name="f"),
                        call(1, "{}", id="call_b", type="function", name="g"),
                    ]
                }
            ),
            chunk({"tool_calls": [call(0, raw[mid:])]}),
            chunk({}, finish="tool_calls"),
            chunk({}, usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}),
            b"data: [DONE]\n\n",
        ]
    )
    body_chunks = [body[i : i + 1] for i in range(len(body))]
    want = Neutral(
        "c",
        "m",
        tricky,
        "hm",
        (("call_a", "f", _args(json.loads(raw))), ("call_b", "g", "{}")),
        (3, 4, 7, None, None),
        FinishReason.TOOL_CALLS,
    )
    assert _neutral_chat(_sdk_chat(body_chunks)) == want
    assert _neutral_rafrx(_rafrx(body_chunks, "openai-chat")) == want


@settings(max_examples=30, deadline=None, database=None)
@given(data=st.data())
def test_the_interleaving_keeps_each_call_in_order(data: st.DataObject) -> None:
    # The chat generator relies on it: a call's deltas in order, calls started in order.
    queues = [[1, 2, 3], [10, 20], [100]]
    merged = data.draw(_interleaved(queues))
    assert sorted(merged) == sorted(x for q in queues for x in q)
    for queue in queues:
        assert [x for x in merged if x in queue] == queue
    assert merged.index(1) < merged.index(10) < merged.index(100)


@st.composite
def _interleaved(draw: st.DrawFn, queues: list[list[int]]) -> list[int]:
    return _interleave(draw, queues)
