"""Seeded generator of realistic LLM SSE response bodies for the benchmarks.

Every scenario is a complete response body as a provider sends it (the
envelopes copy the recorded streams in ``tests/data/fixtures``), plus the
result it must aggregate to, so every contender can be checked before it is
timed.

OpenAI chat (``dialect="openai-chat"``):

* ``text``: a long answer, 1-4 tokens per delta.
* ``reasoning``: DeepSeek ``reasoning_content`` deltas, then ``content``.
* ``tools4-seq`` / ``tools16-seq``: 4 or 16 parallel calls, one after the other.
* ``tools4-inter`` / ``tools16-inter``: the same calls with their deltas interleaved.
* ``write_file-10k`` / ``-100k`` / ``-1m``: one ``write_file`` call whose
  ``content`` argument is Python-like source of that size, in 3-8 character
  deltas.

Anthropic (``dialect="anthropic"``): the same scenarios as Messages API events
(``message_start`` ... ``message_stop``; thinking blocks for ``reasoning``,
``tool_use`` blocks with ``input_json_delta`` for the calls).

Example:
    >>> from bench.generate import build_scenarios, split_chunks
    >>> scenarios = build_scenarios(scale=0.01, arg_sizes=(1000,))
    >>> [s.name for s in scenarios][:3]
    ['chat/text', 'chat/reasoning', 'chat/tools4-seq']
    >>> chunks = split_chunks(scenarios[0].body, seed=0)
    >>> b"".join(chunks) == scenarios[0].body
    True
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

import attrs

__all__ = [
    "ARG_SIZES",
    "Expected",
    "Scenario",
    "build_scenarios",
    "python_source",
    "split_chunks",
]

Dialect = Literal["openai-chat", "anthropic"]
Kind = Literal["text", "reasoning", "tools", "args"]

ARG_SIZES: Final = (10_000, 100_000, 1_000_000)
"""Default ``write_file`` argument sizes (characters of source code)."""

_CHAT_MODEL: Final = "gpt-4o-2024-08-06"
_DEEPSEEK_MODEL: Final = "deepseek-reasoner"
_CLAUDE_MODEL: Final = "claude-sonnet-4-20250514"

# Word pieces as a tokenizer cuts English prose and markdown (with a few
# characters JSON must escape and some non-ASCII text).
_PIECES: Final = (
    " the",
    " of",
    " and",
    " to",
    " a",
    " in",
    " is",
    " that",
    " for",
    " it",
    " as",
    " with",
    " be",
    " on",
    " not",
    " this",
    " are",
    " by",
    " can",
    " stream",
    "ing",
    " response",
    " token",
    " model",
    " request",
    " server",
    " client",
    " data",
    " function",
    " value",
    " result",
    " each",
    " when",
    " which",
    " their",
    " you",
    " should",
    " will",
    " because",
    " however",
    " example",
    " performance",
    " memory",
    " parse",
    "r",
    "s",
    "ed",
    "ly",
    ",",
    ".",
    ":",
    ";",
    " (",
    ")",
    "\n\n",
    "\n- ",
    "**",
    " `",
    "`",
    ' "',
    '"',
    " café",
    " naïve",
    " —",
    " →",
    " 東京",
    " 😊",
    "\\",
)
_SENTENCE_START: Final = ("The", "In", "When", "This", "Each", "However", "For", "A")


def _rand_id(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=n))


def _prose_deltas(rng: random.Random, count: int) -> list[str]:
    """``count`` text deltas of 1-4 tokens each."""
    deltas: list[str] = []
    for i in range(count):
        n = rng.randint(1, 4)
        if i % 40 == 0:
            piece = rng.choice(_SENTENCE_START) if i == 0 else ". " + rng.choice(_SENTENCE_START)
            deltas.append(piece + "".join(rng.choices(_PIECES, k=n - 1)))
        else:
            deltas.append("".join(rng.choices(_PIECES, k=n)))
    return deltas


_IDENTS: Final = (
    "buffer",
    "chunk",
    "offset",
    "event",
    "parser",
    "result",
    "items",
    "value",
    "index",
    "config",
    "session",
    "handler",
    "payload",
    "request",
    "response",
    "stream",
    "total",
)


def python_source(size: int, seed: int = 0) -> str:
    """Python-like source code of exactly ``size`` characters.

    Classes, functions, docstrings, comments with a little non-ASCII, string
    literals with both quote kinds and backslashes: what a ``write_file`` call
    carries, with the usual share of characters JSON has to escape.

    Example:
        >>> len(python_source(500, seed=1))
        500
    """
    rng = random.Random(seed)
    parts: list[str] = ['"""Generated module."""\n\nfrom __future__ import annotations\n\n']
    length = len(parts[0])
    while length < size:
        name = rng.choice(_IDENTS)
        other = rng.choice(_IDENTS)
        block = (
            f"\n\nclass {name.title()}{rng.randint(0, 999)}:\n"
            f'    """Keeps the {name} and its {other} — see “docs/{name}.md”."""\n\n'
            f"    def __init__(self, {name}: int = {rng.randint(0, 99)}) -> None:\n"
            f"        self.{name} = {name}  # the {other}, in bytes\n"
            f"        self.{other} = {{'key': \"{_rand_id(rng, 6)}\","
            f" 'path': r'C:\\tmp\\{name}'}}\n"
            f"\n    def process(self, {other}: list[str]) -> str:\n"
            f"        total = 0\n"
            f"        for {name} in {other}:\n"
            f"            if {name}.startswith('\\t') or len({name}) > {rng.randint(2, 80)}:\n"
            f"                total += len({name}) * {rng.randint(1, 9)}\n"
            f'        return f"{{total}} {name}s\\n"\n'
        )
        parts.append(block)
        length += len(block)
    return "".join(parts)[:size]


def _split_text(rng: random.Random, text: str, lo: int, hi: int) -> list[str]:
    """``text`` in pieces of ``lo``-``hi`` characters (escapes may split, as on the wire)."""
    out: list[str] = []
    i = 0
    span = hi - lo + 1
    rand = rng.random
    while i < len(text):
        j = i + lo + int(rand() * span)
        out.append(text[i:j])
        i = j
    return out


_dumps: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_MARK: Final = "\x00HOLE\x00"


def _template(obj_json: str) -> tuple[str, str]:
    """Split a dumped object around the string ``_MARK`` it holds."""
    before, after = obj_json.split(_dumps(_MARK))
    return before, after


@attrs.frozen
class Expected:
    """What a scenario's body aggregates to."""

    text: str
    reasoning: str
    tool_calls: tuple[tuple[str, str, Any], ...]
    """``(id, name, arguments)`` in call order, arguments as parsed JSON."""


@attrs.frozen
class Scenario:
    """One benchmark input: a whole SSE body and what it must aggregate to."""

    name: str
    dialect: Dialect
    kind: Kind
    body: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    expected: Expected
    events: int
    """SSE events in the body."""
    arg_chars: int = 0
    """``args`` scenarios: characters of the source-code argument."""


@attrs.frozen
class _Call:
    id: str
    name: str
    arguments: dict[str, Any]
    deltas: tuple[str, ...]


_TOOL_SPECS: Final = (
    (
        "get_weather",
        lambda r: {
            "city": r.choice(["Paris", "Zürich", "東京", "São Paulo"]),
            "units": r.choice(["celsius", "fahrenheit"]),
            "days": r.randint(1, 14),
            "include": ["wind", "humidity", "uv"][: r.randint(1, 3)],
        },
    ),
    (
        "search_docs",
        lambda r: {
            "query": " ".join(r.choices(_IDENTS, k=r.randint(3, 12))),
            "top_k": r.randint(1, 50),
            "filters": {"lang": "en", "since": "2024-01-01", "tags": r.sample(_IDENTS, 3)},
        },
    ),
    (
        "read_file",
        lambda r: {
            "path": f"src/{r.choice(_IDENTS)}/{r.choice(_IDENTS)}.py",
            "start_line": r.randint(1, 500),
            "end_line": r.randint(501, 900),
            "reason": 'Check how the "' + r.choice(_IDENTS) + '" is built.',
        },
    ),
    (
        "run_sql",
        lambda r: {
            "sql": "SELECT id, name FROM t WHERE x > "
            f"{r.randint(0, 99)} AND note LIKE '%\\n%' LIMIT 10;",
            "timeout_s": r.random() * 10,
            "dry_run": r.random() < 0.5,
        },
    ),
)


def _tool_calls(rng: random.Random, count: int, id_prefix: str, id_len: int) -> list[_Call]:
    calls: list[_Call] = []
    for i in range(count):
        name, make = _TOOL_SPECS[i % len(_TOOL_SPECS)]
        args = make(rng)
        text = json.dumps(args, ensure_ascii=False)
        calls.append(
            _Call(
                id_prefix + _rand_id(rng, id_len), name, args, tuple(_split_text(rng, text, 2, 12))
            )
        )
    return calls


def _write_file_call(
    rng: random.Random, size: int, seed: int, id_prefix: str, id_len: int
) -> _Call:
    args = {"path": "src/app/generated_module.py", "content": python_source(size, seed)}
    text = json.dumps(args, ensure_ascii=False)
    return _Call(
        id_prefix + _rand_id(rng, id_len), "write_file", args, tuple(_split_text(rng, text, 3, 8))
    )


def _schedule(calls: Sequence[_Call], interleave: bool) -> Iterator[tuple[int, str]]:
    """``(call index, delta)`` pairs: call by call, or round-robin."""
    if not interleave:
        for i, call in enumerate(calls):
            for delta in call.deltas:
                yield i, delta
        return
    cursors = [0] * len(calls)
    remaining = sum(len(c.deltas) for c in calls)
    while remaining:
        for i, call in enumerate(calls):
            if cursors[i] < len(call.deltas):
                yield i, call.deltas[cursors[i]]
                cursors[i] += 1
                remaining -= 1


# --------------------------------------------------------------------- OpenAI


class _ChatWriter:
    """Builds an OpenAI-chat (or DeepSeek) body, one ``chat.completion.chunk`` per event."""

    def __init__(self, rng: random.Random, *, deepseek: bool = False) -> None:
        self.deepseek = deepseek
        if deepseek:
            hexid = f"{rng.getrandbits(128):032x}"
            self.head = {
                "id": f"{hexid[:8]}-{hexid[8:12]}-{hexid[12:16]}-{hexid[16:20]}-{hexid[20:]}",
                "object": "chat.completion.chunk",
                "created": 1752169304,
                "model": _DEEPSEEK_MODEL,
                "system_fingerprint": "fp_393bca965e_prod0623_fp8_kvcache",
            }
        else:
            self.head = {
                "id": "chatcmpl-" + _rand_id(rng, 29),
                "object": "chat.completion.chunk",
                "created": 1727346168,
                "model": _CHAT_MODEL,
                "system_fingerprint": "fp_5050236cbd",
            }
        self.parts: list[str] = []
        self._templates: dict[str, tuple[str, str]] = {}

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
        obj = {
            **self.head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self.deepseek:
            obj["usage"] = None
        obj.update(extra)
        self.parts.append("data: " + _dumps(obj) + "\n\n")

    def delta(self, shape: dict[str, Any], value: str) -> None:
        """``chunk(delta)``, where ``delta`` is ``shape`` with its ``_MARK`` replaced by ``value``.

        Same bytes as :meth:`chunk`, built from a template (much faster).
        """
        key = _dumps(shape)
        template = self._templates.get(key)
        if template is None:
            self.chunk(shape)
            template = self._templates[key] = _template(self.parts.pop())
        before, after = template
        self.parts.append(before + _dumps(value) + after)

    def usage(self, prompt: int, completion: int) -> None:
        obj = {
            **self.head,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        self.parts.append("data: " + _dumps(obj) + "\n\n")

    def done(self) -> bytes:
        self.parts.append("data: [DONE]\n\n")
        return "".join(self.parts).encode()


def _chat_text(rng: random.Random, deltas: int) -> tuple[bytes, Expected, int]:
    w = _ChatWriter(rng)
    w.chunk({"role": "assistant", "content": "", "refusal": None})
    pieces = _prose_deltas(rng, deltas)
    for piece in pieces:
        w.delta({"content": _MARK}, piece)
    w.chunk({}, "stop")
    w.usage(14, deltas * 2)
    return w.done(), Expected("".join(pieces), "", ()), deltas + 4


def _chat_reasoning(rng: random.Random, deltas: int) -> tuple[bytes, Expected, int]:
    w = _ChatWriter(rng, deepseek=True)
    w.chunk({"role": "assistant", "content": None, "reasoning_content": ""})
    thinking = _prose_deltas(rng, deltas * 2 // 3)
    answer = _prose_deltas(rng, deltas - len(thinking))
    for piece in thinking:
        w.delta({"content": None, "reasoning_content": _MARK}, piece)
    for piece in answer:
        w.delta({"content": _MARK, "reasoning_content": None}, piece)
    w.chunk(
        {"content": "", "reasoning_content": None},
        "stop",
        usage={
            "prompt_tokens": 13,
            "completion_tokens": deltas * 2,
            "total_tokens": 13 + deltas * 2,
            "completion_tokens_details": {"reasoning_tokens": len(thinking) * 2},
        },
    )
    return w.done(), Expected("".join(answer), "".join(thinking), ()), deltas + 3


def _chat_calls(
    rng: random.Random, calls: Sequence[_Call], interleave: bool
) -> tuple[bytes, Expected, int]:
    w = _ChatWriter(rng)
    w.chunk({"role": "assistant", "content": None})
    started: set[int] = set()
    events = 1
    for i, delta in _schedule(calls, interleave):
        if i not in started:
            started.add(i)
            head = {
                "index": i,
                "id": calls[i].id,
                "type": "function",
                "function": {"name": calls[i].name, "arguments": ""},
            }
            w.chunk({"tool_calls": [head]})
            events += 1
        w.delta({"tool_calls": [{"index": i, "function": {"arguments": _MARK}}]}, delta)
        events += 1
    w.chunk({}, "tool_calls")
    w.usage(120, events * 3)
    expected = Expected("", "", tuple((c.id, c.name, c.arguments) for c in calls))
    return w.done(), expected, events + 3


# ------------------------------------------------------------------ Anthropic


class _AnthropicWriter:
    """Builds a Messages API body: ``event: <type>`` + ``data: {...}`` per event."""

    def __init__(self, rng: random.Random) -> None:
        self.parts: list[str] = []
        self.events = 0
        self._templates: dict[tuple[int, str], tuple[str, str]] = {}
        self.emit(
            "message_start",
            message={
                "id": "msg_01" + _rand_id(rng, 22),
                "type": "message",
                "role": "assistant",
                "model": _CLAUDE_MODEL,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 424,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 5,
                    "service_tier": "standard",
                },
            },
        )

    def emit(self, kind: str, **fields: Any) -> None:
        self.parts.append(f"event: {kind}\ndata: " + _dumps({"type": kind, **fields}) + "\n\n")
        self.events += 1

    def start_block(self, index: int, block: dict[str, Any]) -> None:
        self.emit("content_block_start", index=index, content_block=block)
        if index == 0:
            self.parts.append('event: ping\ndata: {"type": "ping"}\n\n')
            self.events += 1

    def delta(self, index: int, kind: str, field: str, value: str) -> None:
        """A ``content_block_delta`` whose delta is ``{"type": kind, field: value}``."""
        key = (index, kind)
        template = self._templates.get(key)
        if template is None:
            self.emit("content_block_delta", index=index, delta={"type": kind, field: _MARK})
            template = self._templates[key] = _template(self.parts.pop())
            self.events -= 1
        before, after = template
        self.parts.append(before + _dumps(value) + after)
        self.events += 1

    def stop_block(self, index: int) -> None:
        self.emit("content_block_stop", index=index)

    def done(self, stop_reason: str, output_tokens: int) -> bytes:
        self.emit(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": output_tokens},
        )
        self.emit("message_stop")
        return "".join(self.parts).encode()


def _anthropic_text(rng: random.Random, deltas: int) -> tuple[bytes, Expected, int]:
    w = _AnthropicWriter(rng)
    w.start_block(0, {"type": "text", "text": ""})
    pieces = _prose_deltas(rng, deltas)
    for piece in pieces:
        w.delta(0, "text_delta", "text", piece)
    w.stop_block(0)
    body = w.done("end_turn", deltas * 2)
    return body, Expected("".join(pieces), "", ()), w.events


def _anthropic_thinking(rng: random.Random, deltas: int) -> tuple[bytes, Expected, int]:
    w = _AnthropicWriter(rng)
    w.start_block(0, {"type": "thinking", "thinking": "", "signature": ""})
    thinking = _prose_deltas(rng, deltas * 2 // 3)
    answer = _prose_deltas(rng, deltas - len(thinking))
    for piece in thinking:
        w.delta(0, "thinking_delta", "thinking", piece)
    w.delta(0, "signature_delta", "signature", "Et" + _rand_id(rng, 600) + "==")
    w.stop_block(0)
    w.start_block(1, {"type": "text", "text": ""})
    for piece in answer:
        w.delta(1, "text_delta", "text", piece)
    w.stop_block(1)
    body = w.done("end_turn", deltas * 2)
    return body, Expected("".join(answer), "".join(thinking), ()), w.events


def _anthropic_calls(
    rng: random.Random, calls: Sequence[_Call], interleave: bool
) -> tuple[bytes, Expected, int]:
    """``tool_use`` blocks; interleaved: all blocks open, deltas round-robin, then all stop."""
    w = _AnthropicWriter(rng)
    started: set[int] = set()

    def start(i: int) -> None:
        started.add(i)
        w.start_block(
            i, {"type": "tool_use", "id": calls[i].id, "name": calls[i].name, "input": {}}
        )
        w.delta(i, "input_json_delta", "partial_json", "")

    previous = -1
    for i, delta in _schedule(calls, interleave):
        if i not in started:
            if not interleave and previous >= 0:
                w.stop_block(previous)
            start(i)
            previous = i
        w.delta(i, "input_json_delta", "partial_json", delta)
    for i in range(len(calls)) if interleave else [previous]:
        w.stop_block(i)
    body = w.done("tool_use", w.events * 3)
    expected = Expected("", "", tuple((c.id, c.name, c.arguments) for c in calls))
    return body, expected, w.events


# ---------------------------------------------------------------- scenarios


def build_scenarios(
    *,
    scale: float = 1.0,
    arg_sizes: Sequence[int] = ARG_SIZES,
    seed: int = 0,
    dialects: Sequence[Dialect] = ("openai-chat", "anthropic"),
) -> list[Scenario]:
    """Every scenario for each dialect, reproducible from ``seed``.

    Args:
        scale: Multiplies the number of text and reasoning deltas (3000 at
            1.0); parallel-call arguments keep a realistic size (a few hundred
            bytes per call).
        arg_sizes: ``write_file`` source sizes in characters.
        seed: Everything (ids, text, chunking of arguments) derives from it.
        dialects: Which wire formats to build.
    """
    text_deltas = max(8, round(3000 * scale))
    out: list[Scenario] = []
    for dialect in dialects:
        rng = random.Random(f"{seed}/{dialect}")
        chat = dialect == "openai-chat"
        prefix = "chat" if chat else "anthropic"
        id_prefix, id_len = ("call_", 24) if chat else ("toolu_01", 22)
        text = _chat_text if chat else _anthropic_text
        reasoning = _chat_reasoning if chat else _anthropic_thinking
        calls_fn = _chat_calls if chat else _anthropic_calls

        body, expected, events = text(rng, text_deltas)
        out.append(Scenario(f"{prefix}/text", dialect, "text", body, expected, events))
        body, expected, events = reasoning(rng, text_deltas)
        out.append(Scenario(f"{prefix}/reasoning", dialect, "reasoning", body, expected, events))
        for count in (4, 16):
            calls = _tool_calls(rng, count, id_prefix, id_len)
            for interleave in (False, True):
                label = f"{prefix}/tools{count}-{'inter' if interleave else 'seq'}"
                body, expected, events = calls_fn(rng, calls, interleave)
                out.append(Scenario(label, dialect, "tools", body, expected, events))
        for size in arg_sizes:
            call = _write_file_call(rng, size, seed + size, id_prefix, id_len)
            body, expected, events = calls_fn(rng, [call], False)
            label = f"{prefix}/write_file-{_size_label(size)}"
            out.append(Scenario(label, dialect, "args", body, expected, events, arg_chars=size))
    return out


def _size_label(size: int) -> str:
    if size >= 1_000_000 and size % 1_000_000 == 0:
        return f"{size // 1_000_000}m"
    if size >= 1000 and size % 1000 == 0:
        return f"{size // 1000}k"
    return str(size)


def split_events(body: bytes) -> list[bytes]:
    """``body`` cut after every blank line: one SSE event per chunk, as a live stream arrives.

    Example:
        >>> split_events(b"data: 1\\n\\ndata: 2\\n\\n")
        [b'data: 1\\n\\n', b'data: 2\\n\\n']
    """
    chunks = [event + b"\n\n" for event in body.split(b"\n\n")]
    last = chunks.pop()[:-2]  # what followed the last blank line
    return [*chunks, last] if last else chunks


def split_chunks(body: bytes, seed: int = 0, lo: int = 1024, hi: int = 4096) -> list[bytes]:
    """``body`` cut into ``lo``-``hi`` byte chunks, as a socket would deliver it.

    Cuts fall anywhere: inside a line, a JSON escape or a UTF-8 character.
    """
    rng = random.Random(seed)
    chunks: list[bytes] = []
    i = 0
    while i < len(body):
        j = i + rng.randint(lo, hi)
        chunks.append(body[i:j])
        i = j
    return chunks
